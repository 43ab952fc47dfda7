"""A spawner killed with SIGKILL while its ranks run (test_distributed_spawn.py):
spawns 2 ranks that write their pid to OUT_DIR/rank<N>.pid and sleep, waits
for both files, prints "<mpirun pid> <rank pids>" and kills itself."""
import os
import signal
import sys
import time

import pe.distributed as dist


def sleeper(out_dir):
    rank = dist.ParallelEnv().rank
    with open(os.path.join(out_dir, "rank%d.pid.tmp" % rank), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(out_dir, "rank%d.pid.tmp" % rank), os.path.join(out_dir, "rank%d.pid" % rank))
    time.sleep(120)


if __name__ == "__main__":
    out_dir = sys.argv[1]
    ctx = dist.spawn(sleeper, args=(out_dir,), nprocs=2, join=False)
    paths = [os.path.join(out_dir, "rank%d.pid" % r) for r in range(2)]
    deadline = time.monotonic() + 60
    while not all(os.path.exists(p) for p in paths) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [open(p).read() if os.path.exists(p) else "-1" for p in paths]
    print(ctx.proc.pid, " ".join(pids), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
