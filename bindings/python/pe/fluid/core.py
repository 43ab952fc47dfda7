"""fluid.core — the few names of Paddle 1.x's C++ core module that fluid
scripts reach for: Scope (`inference_scope = fluid.core.Scope()` with
fluid.scope_guard), LoDTensor (fluid.LoDTensor), is_compiled_with_cuda,
CPUPlace, CUDAPlace. They are PE's own (pe._core.Scope, pe.Tensor,
pe.framework's places)."""
from ..framework import CPUPlace, CUDAPlace, is_compiled_with_cuda  # noqa: F401
from ..static.executor import Scope  # noqa: F401
from .lod_tensor import LoDTensor  # noqa: F401

__all__ = ["Scope", "LoDTensor", "is_compiled_with_cuda", "CPUPlace", "CUDAPlace"]
