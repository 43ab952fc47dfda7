"""fluid.clip — Paddle 1.x's gradient-clipping classes, passed as an
optimizer's grad_clip= (fluid.optimizer.SGD(..., grad_clip=...)): they are
pe.nn's ClipGradByGlobalNorm / ClipGradByNorm / ClipGradByValue (applied
by the optimizer pass, passes/optimizer.c) with the 1.x names and
arguments. need_clip (a function choosing the parameters to clip) is not
supported: every gradient is clipped."""
from .. import _core
from ..nn import clip as _clip

__all__ = ["GradientClipByValue", "GradientClipByNorm", "GradientClipByGlobalNorm", "ClipGradByValue",
           "ClipGradByNorm", "ClipGradByGlobalNorm"]


def _no_need_clip(cls, need_clip):
    if need_clip is not None:
        raise _core.UnsupportedError("fluid.clip.%s: need_clip is not supported (PE clips every gradient)" % cls)


class GradientClipByValue(_clip.ClipGradByValue):
    """Each gradient element clipped to [min, max]; min=None is -max."""

    def __init__(self, max, min=None, need_clip=None):
        _no_need_clip("GradientClipByValue", need_clip)
        _clip.ClipGradByValue.__init__(self, max, min)


class GradientClipByNorm(_clip.ClipGradByNorm):
    """Each gradient scaled by clip_norm / max(||grad||, clip_norm)."""

    def __init__(self, clip_norm, need_clip=None):
        _no_need_clip("GradientClipByNorm", need_clip)
        _clip.ClipGradByNorm.__init__(self, clip_norm)


class GradientClipByGlobalNorm(_clip.ClipGradByGlobalNorm):
    """Every gradient scaled by clip_norm / max(global_norm, clip_norm)."""

    def __init__(self, clip_norm, group_name="default_group", need_clip=None):
        _no_need_clip("GradientClipByGlobalNorm", need_clip)
        _clip.ClipGradByGlobalNorm.__init__(self, clip_norm, group_name)


ClipGradByValue, ClipGradByNorm, ClipGradByGlobalNorm = GradientClipByValue, GradientClipByNorm, GradientClipByGlobalNorm
