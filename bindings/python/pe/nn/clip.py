"""pe.nn.clip — gradient clipping, applied by the optimizer pass in C
(passes/optimizer.c) after the cross-place gradient sum, before weight decay:

  ClipGradByGlobalNorm(clip_norm): every gradient times
      clip_norm / max(global_norm, clip_norm), global_norm over all of them
      (one clip_by_global_norm op);
  ClipGradByNorm(clip_norm): each gradient times clip_norm / max(||g||, clip_norm),
      its own L2 norm (Paddle's clip_by_norm; a clip_by_global_norm op over
      that one gradient);
  ClipGradByValue(max, min=None): each element clipped to [min, max]
      (min=None: -max), a clip op per gradient.
"""
import math

from .. import _core

__all__ = ["ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue", "GradientClipByGlobalNorm",
           "GradientClipByNorm", "GradientClipByValue"]


def _finite(cls, name, v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = float("nan")
    if isinstance(v, bool) or not math.isfinite(f):
        raise _core.InvalidArgumentError("%s: %s must be a finite number, got %r" % (cls, name, v))
    return f


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
    """Scales each gradient by clip_norm / max(||grad||, clip_norm) (Paddle's ClipGradByNorm)."""

    def __init__(self, clip_norm):
        self.clip_norm = _finite("ClipGradByNorm", "clip_norm", clip_norm)
        if not self.clip_norm > 0:
            raise _core.InvalidArgumentError("ClipGradByNorm: clip_norm must be > 0 (got %r)" % (clip_norm,))

    def __repr__(self):
        return "ClipGradByNorm(clip_norm=%g)" % self.clip_norm


class ClipGradByValue:
    """Clips each gradient element to [min, max]; min=None is -max (Paddle's ClipGradByValue)."""

    def __init__(self, max, min=None):
        self.max = _finite("ClipGradByValue", "max", max)
        self.min = -self.max if min is None else _finite("ClipGradByValue", "min", min)
        if not self.min <= self.max:
            raise _core.InvalidArgumentError("ClipGradByValue: min (%g) must be <= max (%g)" % (self.min, self.max))

    def __repr__(self):
        return "ClipGradByValue(min=%g, max=%g)" % (self.min, self.max)


GradientClipByGlobalNorm = ClipGradByGlobalNorm
GradientClipByNorm = ClipGradByNorm
GradientClipByValue = ClipGradByValue
