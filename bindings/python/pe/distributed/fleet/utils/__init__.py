"""pe.distributed.fleet.utils: hybrid_parallel_util.fused_allreduce_gradients."""
from . import hybrid_parallel_util  # noqa: F401

__all__ = ["hybrid_parallel_util"]
