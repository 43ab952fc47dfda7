"""pe.distributed.fleet — the one piece of Paddle's fleet API that eager
data-parallel scripts use without fleet itself:
`fleet.utils.hybrid_parallel_util.fused_allreduce_gradients` (averaging
gradients by hand after `DataParallel.no_sync()`, as seed 001's PyLayer
example does).

Fleet's own training API (`fleet.init`, `fleet.distributed_optimizer`,
hybrid parallelism, fleet's parameter server) is not part of PE: any other
name here raises pe.UnsupportedError saying what to use instead —
`pe.DataParallel` / `pe.distributed` in eager mode,
`ParallelExecutor(num_trainers=...)` or `DistributeTranspiler` in static
mode.
"""
from ... import _core
from . import utils  # noqa: F401

__all__ = ["utils"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise _core.UnsupportedError(
        "pe.distributed.fleet.%s: PE has only fleet.utils.hybrid_parallel_util.fused_allreduce_gradients; for "
        "training across processes use pe.DataParallel and pe.distributed (eager), "
        "pe.static.ParallelExecutor(num_trainers=...) (nccl2 / collective mode) or "
        "pe.fluid.DistributeTranspiler (parameter servers)" % name)
