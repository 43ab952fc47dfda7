"""pe.device.cuda — facts about the GPUs this process sees."""
from .. import _core

__all__ = ["device_count"]


def device_count():
    """Number of CUDA devices visible to this process (0 in a build without
    CUDA or without a GPU)."""
    return int(_core.cuda_device_count())
