"""tests/python/test_distributed_spawn.py — pe.distributed.spawn through mpirun.

- init_parallel_env + ParallelEnv in 2 and 3 spawned ranks (seed 000's
  example, dist_scripts/env_report.py): each rank sees its rank, the world
  size and its endpoint; spawn returns after every rank; join=False
  returns at once and join() waits.
- A rank that raises: spawn raises SpawnError naming the rank, with its
  traceback, and the other ranks (blocked in a collective) are ended.
- spawn called inside this test module (func importable from it, the main
  module being pytest's), join=False then join().
- A script calling spawn without `if __name__ == "__main__":` (each rank
  re-imports it) and spawn inside a rank mpirun started: clear errors.
- Arguments spawn can refuse at once (no process started): a lambda,
  nprocs=0, an unknown option.
- A spawner killed with SIGKILL while its ranks run: mpirun and the ranks
  end within seconds (nothing trains on headless).
Each job runs under a hard time limit (dist_run.run).
"""
import os
import re
import sys

import pytest

import pe.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_scripts"))
from dist_run import PY, job_env, mpirun, needs_mpirun, run, running, script  # noqa: E402


@needs_mpirun
@pytest.mark.parametrize("nprocs", [2, 3])
def test_spawn_env_report(nprocs):
    r = run([PY, script("env_report.py"), "spawn", str(nprocs)], timeout=60)
    assert r.rc == 0, r
    eps = ",".join("127.0.0.1:%d" % (6170 + i) for i in range(nprocs))
    for rank in range(nprocs):
        assert re.search(r"spawned rank=%d world_size=%d endpoint=127.0.0.1:%d endpoints=%s rank_in_node=%d" % (
            rank, nprocs, 6170 + rank, eps, rank), r.out), r
    assert r.out.rstrip().endswith("spawn returned"), r


@needs_mpirun
def test_spawn_join_false():
    r = run([PY, script("env_report.py"), "nojoin", "2"], timeout=60)
    assert r.rc == 0, r
    assert "spawn returned at once" in r.out and r.out.rstrip().endswith("joined"), r
    assert "nojoin rank=1 world_size=2" in r.out, r


@needs_mpirun
def test_spawn_reraises_a_rank_exception():
    r = run([PY, script("raise_on_rank.py"), "spawn", "3", "1"], timeout=60)
    assert r.rc != 0, r
    assert "SpawnError: spawn: rank 1 of 3 raised an exception:" in r.err, r
    tb = r.err.split("raised an exception:", 1)[1]
    assert "Traceback (most recent call last):" in tb and 'raise_on_rank.py", line' in tb, r
    assert "ValueError: rank 1 fails on purpose" in tb, r


def _square(x):
    return x * x


def test_spawn_refuses_bad_arguments_before_starting():
    with pytest.raises(ValueError, match="cannot pickle func and args"):
        dist.spawn(lambda: None, nprocs=2)
    with pytest.raises(ValueError, match="nprocs must be a positive int"):
        dist.spawn(_square, args=(2,), nprocs=0)
    with pytest.raises(TypeError, match="unknown option"):
        dist.spawn(_square, args=(2,), nprocs=2, no_such_option=1)


def _write_rank(out_dir, text):
    env = dist.ParallelEnv()
    with open(os.path.join(out_dir, "rank%d.txt" % env.rank), "w") as f:
        f.write("%s %d %d" % (text, env.rank, env.world_size))


@needs_mpirun
def test_spawn_from_a_test_module(tmp_path):
    # func lives in this (importable) module; the main module is pytest's.
    ctx = dist.spawn(_write_rank, args=(str(tmp_path), "hello"), nprocs=2, join=False)
    try:
        assert ctx.join(timeout=60), "the ranks did not end within 60 s"
    finally:
        ctx.terminate()  # nothing left running whatever happened
    for rank in range(2):
        assert (tmp_path / ("rank%d.txt" % rank)).read_text() == "hello %d 2" % rank


@needs_mpirun
def test_spawn_without_main_guard_is_an_error_not_a_fork_bomb():
    r = run([PY, script("spawn_unguarded.py")], timeout=60)
    assert r.rc != 0, r
    assert "SpawnError: spawn: rank" in r.err and "put the spawn call under" in r.err, r


@needs_mpirun
def test_spawn_inside_an_mpi_rank_is_an_error():
    code = ("import pe.distributed as d\ntry:\n    d.spawn(print, nprocs=2)\nexcept RuntimeError as e:\n"
            "    print('refused:', e)\n")
    r = mpirun(1, [PY, "-c", code])
    assert r.rc == 0 and "refused: spawn: this process is already a rank started by mpirun" in r.out, r


@needs_mpirun
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_spawner_killed_takes_its_ranks_along(tmp_path):
    import signal
    import subprocess
    import time
    out = tmp_path / "pids"
    with open(out, "w") as fo, open(tmp_path / "stderr", "w") as fe:  # files: ranks that lived on would hold a pipe
        rc = subprocess.run([PY, script("spawn_killed.py"), str(tmp_path)], stdout=fo, stderr=fe,
                            stdin=subprocess.DEVNULL, env=job_env(), timeout=90).returncode
    assert rc == -signal.SIGKILL, (tmp_path / "stderr").read_text()
    pids = [int(v) for v in out.read_text().split()]
    assert len(pids) == 3 and min(pids) > 0, out.read_text()  # mpirun, rank 0, rank 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(running(p) for p in pids):
        time.sleep(0.1)
    lived = [p for p in pids if running(p)]
    for p in lived:
        os.kill(p, signal.SIGKILL)
    assert not lived, "mpirun / ranks outlived their killed spawner: %s" % lived
