"""pe.nn — functional ops, initializers and gradient clipping (static mode)."""
from . import functional  # noqa: F401
from . import initializer  # noqa: F401
from .clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue  # noqa: F401

__all__ = ["functional", "initializer", "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue"]
