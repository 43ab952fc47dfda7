"""Each rank reports its trainer environment after init_parallel_env.

    python env_report.py spawn N     # pe.distributed.spawn(report, nprocs=N)
    python env_report.py nojoin N    # spawn(..., join=False), then join()
    python env_report.py             # as one rank of launch (or alone)
"""
import sys

import pe as paddle
import pe.distributed as dist


def report(tag):
    dist.init_parallel_env()
    env = dist.ParallelEnv()
    print("%s rank=%d world_size=%d endpoint=%s endpoints=%s rank_in_node=%d" % (
        tag, env.rank, env.world_size, env.current_endpoint, ",".join(env.trainer_endpoints or []),
        env.rank_in_node), flush=True)
    assert paddle.distributed.get_rank() == env.rank


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "spawn":
        dist.spawn(report, args=("spawned",), nprocs=int(sys.argv[2]))
        print("spawn returned", flush=True)
    elif len(sys.argv) > 2 and sys.argv[1] == "nojoin":
        ctx = dist.spawn(report, args=("nojoin",), nprocs=int(sys.argv[2]), join=False)
        print("spawn returned at once", flush=True)
        assert ctx.join(timeout=60), "the ranks did not end within 60 s"
        print("joined", flush=True)
    else:
        report("launched")
