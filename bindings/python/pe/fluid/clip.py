"""fluid.clip — Paddle 1.x's gradient-clipping classes, passed as an
optimizer's grad_clip= (fluid.optimizer.SGD(..., grad_clip=...)): they are
pe.nn's ClipGradByGlobalNorm / ClipGradByNorm / ClipGradByValue (applied
by the optimizer pass, passes/optimizer.c) with the 1.x names and
arguments. need_clip (a function choosing the parameters to clip) is not
supported: every gradient is clipped. set_gradient_clip(clip, program=)
(1.x's older form) records the clip on the program: an optimizer made
without grad_clip= applies it in minimize (one given to the optimizer wins,
as in Paddle)."""
from .. import _core
from ..framework import Program, default_main_program
from ..nn import clip as _clip

__all__ = ["set_gradient_clip", "GradientClipByValue", "GradientClipByNorm", "GradientClipByGlobalNorm", "ClipGradByValue",
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


def set_gradient_clip(clip, param_list=None, program=None):
    """Clip the gradients of program (default: the main program) with clip in every later minimize
    whose optimizer has no grad_clip. param_list (clipping some parameters only) is not supported."""
    if not isinstance(clip, (_clip.ClipGradByValue, _clip.ClipGradByNorm, _clip.ClipGradByGlobalNorm)):
        raise TypeError("fluid.clip.set_gradient_clip: clip must be a GradientClipByValue, GradientClipByNorm or "
                        "GradientClipByGlobalNorm, got %s" % type(clip).__name__)
    program = program if program is not None else default_main_program()
    if not isinstance(program, Program):
        raise TypeError("fluid.clip.set_gradient_clip: program must be a Program, got %s" % type(program).__name__)
    if param_list is not None:
        params = {p if isinstance(p, str) else p.name for p in param_list}
        every = {p.name for p in program.global_block().all_parameters()}
        if params != every:
            raise _core.UnsupportedError("fluid.clip.set_gradient_clip: param_list names %d of the program's %d "
                                         "parameters; PE clips every gradient (leave param_list out)"
                                         % (len(params & every), len(every)))
    program._gradient_clip = clip
