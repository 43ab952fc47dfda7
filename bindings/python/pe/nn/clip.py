"""pe.nn.clip — gradient clipping (ClipGradByGlobalNorm, applied by the optimizer pass in C)."""
from .. import _core

__all__ = ["ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue"]


class ClipGradByGlobalNorm:
    """Scales all gradients by clip_norm / max(global_norm, clip_norm) (Paddle's
    ClipGradByGlobalNorm; the norm is taken after the cross-place allreduce)."""

    def __init__(self, clip_norm, group_name="default_group", auto_skip_clip=False):
        if not clip_norm > 0:
            raise _core.InvalidArgumentError("ClipGradByGlobalNorm: clip_norm must be > 0 (got %r)" % (clip_norm,))
        self.clip_norm = float(clip_norm)
        self.group_name = group_name

    def __repr__(self):
        return "ClipGradByGlobalNorm(clip_norm=%g)" % self.clip_norm


class ClipGradByNorm:
    def __init__(self, clip_norm):
        raise _core.UnsupportedError("ClipGradByNorm is not implemented by PE's optimizer pass; use ClipGradByGlobalNorm")


class ClipGradByValue:
    def __init__(self, max, min=None):
        raise _core.UnsupportedError("ClipGradByValue is not implemented by PE's optimizer pass; use ClipGradByGlobalNorm")


GradientClipByGlobalNorm = ClipGradByGlobalNorm
