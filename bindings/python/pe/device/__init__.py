"""pe.device — Paddle 2.x's device functions: where eager tensors live.

    pe.device.set_device("gpu:0")     # also pe.set_device; 'cpu', 'gpu', 'gpu:N'
    pe.device.get_device()            # 'gpu:0'
    pe.device.cuda.device_count()     # GPUs this process sees (0 without CUDA)

Static programs take their place from Executor(place) / the
ParallelExecutor's places, as before; set_device moves eager mode only.
"""
from ..framework import set_device, get_device, is_compiled_with_cuda  # noqa: F401
from . import cuda  # noqa: F401

__all__ = ["set_device", "get_device", "is_compiled_with_cuda", "cuda"]
