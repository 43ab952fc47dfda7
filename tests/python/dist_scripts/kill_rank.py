"""Rank RANK kills itself with SIGKILL mid-run; the others wait in all_reduce.

    python kill_rank.py RANK       # as one rank of launch
"""
import os
import signal
import sys
import time

import numpy as np

import pe.distributed as dist

bad = int(sys.argv[1])
dist.init_parallel_env()
print("rank %d: jobid %x pid %d" % (dist.get_rank(), int(os.environ.get("OMPI_MCA_ess_base_jobid", "0")),
                                      os.getpid()), flush=True)
x = np.ones(8, dtype="float32")
dist.all_reduce(x)
print("rank %d: first all_reduce done" % dist.get_rank(), flush=True)
if dist.get_rank() == bad:
    time.sleep(0.2)
    print("rank %d: killing itself at %.3f" % (bad, time.time()), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
dist.all_reduce(x)  # the killed rank never comes
print("rank %d: unreachable" % dist.get_rank(), flush=True)
