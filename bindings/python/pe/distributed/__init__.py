"""pe.distributed — training across processes, with Paddle's names.

    import pe as paddle
    import pe.distributed as dist

    def train():
        dist.init_parallel_env()              # the process world (MPI) when there are several
        env = dist.ParallelEnv()
        print("rank", env.rank, "of", env.world_size)

    if __name__ == "__main__":
        dist.spawn(train, nprocs=2)           # or: python -m pe.distributed.launch --nproc_per_node 2 x.py

- env.py: ParallelEnv, get_rank, get_world_size (PADDLE_* variables, or
  Open MPI's OMPI_COMM_WORLD_* under a plain mpirun).
- collective.py: init_parallel_env, ReduceOp, barrier, all_reduce, reduce,
  broadcast, all_gather, scatter on numpy arrays (or, with a pe.static
  Variable, the static-graph collective op).
- spawn.py: spawn(func, args, nprocs) through mpirun.
- parallel.py: DataParallel (eager mode: rank 0's parameters at
  construction, gradients averaged in buckets when backward() returns).
- launch.py: `python -m pe.distributed.launch` (ranks through mpirun, one
  log per rank); _bootstrap.py and _spawn_child.py run inside each rank;
  _mpirun.py builds mpirun's command line and names a failed rank.

Static-graph training across processes: every rank builds the same program
and runs ParallelExecutor(..., num_trainers=env.world_size,
trainer_id=env.rank) on its own shard of the batch (docs/guide.md,
"Training across processes").
"""
from .env import ParallelEnv, get_rank, get_world_size  # noqa: F401
from .collective import (ReduceOp, Group, init_parallel_env, is_initialized, barrier, all_reduce,  # noqa: F401
                         reduce, broadcast, all_gather, scatter)
from .spawn import spawn, SpawnContext, SpawnError  # noqa: F401
from .parallel import DataParallel  # noqa: F401

__all__ = ["ParallelEnv", "get_rank", "get_world_size", "ReduceOp", "Group", "init_parallel_env",
           "is_initialized", "barrier", "all_reduce", "reduce", "broadcast", "all_gather", "scatter", "spawn",
           "SpawnContext", "SpawnError", "DataParallel"]
