"""Rank RANK raises ValueError after a barrier; the others wait in a collective.

    python raise_on_rank.py spawn N RANK     # through spawn
    python raise_on_rank.py RANK             # as one rank of launch
"""
import os
import sys
import time

import numpy as np

import pe.distributed as dist


def work(bad_rank):
    dist.init_parallel_env()
    dist.barrier()
    print("rank %d: jobid %x pid %d" % (dist.get_rank(), int(os.environ.get("OMPI_MCA_ess_base_jobid", "0")),
                                      os.getpid()), flush=True)
    if dist.get_rank() == bad_rank:
        print("rank %d: raising at %.3f" % (bad_rank, time.time()), flush=True)
        raise ValueError("rank %d fails on purpose" % bad_rank)
    x = np.ones(4, dtype="float32")
    dist.all_reduce(x)  # never completes: the failing rank does not come


if __name__ == "__main__":
    if sys.argv[1] == "spawn":
        dist.spawn(work, args=(int(sys.argv[3]),), nprocs=int(sys.argv[2]))
    else:
        work(int(sys.argv[1]))
