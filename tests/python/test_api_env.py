"""tests/python/test_api_env.py — pe.distributed.ParallelEnv, get_rank, get_world_size and the place lists.

ParallelEnv reads Paddle's launcher variables (PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM, FLAGS_selected_gpus, PADDLE_CURRENT_ENDPOINT,
PADDLE_TRAINER_ENDPOINTS) with the defaults of Paddle's documentation
(rank 0, world_size 1, device_id 0, endpoints ""), exposes the old names
(local_rank, nranks, dev_id), and rejects malformed values. cpu_places
follows CPU_NUM.
"""
import pytest

import pe
import pe.distributed as dist

VARS = ["PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "FLAGS_selected_gpus", "PADDLE_CURRENT_ENDPOINT",
        "PADDLE_TRAINER_ENDPOINTS"]


@pytest.fixture
def clean_env(monkeypatch):
    for v in VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def test_defaults(clean_env):
    env = dist.ParallelEnv()
    assert (env.rank, env.world_size, env.device_id) == (0, 1, 0)
    assert env.current_endpoint == "" and env.trainer_endpoints == ""
    assert (env.local_rank, env.nranks, env.dev_id) == (0, 1, 0)
    assert dist.get_rank() == 0 and dist.get_world_size() == 1


def test_from_environment(clean_env):
    clean_env.setenv("PADDLE_TRAINER_ID", "1")
    clean_env.setenv("PADDLE_TRAINERS_NUM", "4")
    clean_env.setenv("FLAGS_selected_gpus", "3,5")
    clean_env.setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6171")
    clean_env.setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1:6171")
    env = dist.ParallelEnv()
    assert env.rank == 1 and env.local_rank == 1
    assert env.world_size == 4 and env.nranks == 4
    assert env.device_id == 3 and env.dev_id == 3
    assert env.current_endpoint == "127.0.0.1:6171"
    assert env.trainer_endpoints == ["127.0.0.1:6170", "127.0.0.1:6171"]
    assert dist.get_rank() == 1 and dist.get_world_size() == 4
    assert pe.distributed.ParallelEnv is dist.ParallelEnv


def test_bad_values(clean_env):
    clean_env.setenv("PADDLE_TRAINER_ID", "x")
    with pytest.raises(ValueError, match="PADDLE_TRAINER_ID"):
        dist.ParallelEnv()
    clean_env.setenv("PADDLE_TRAINER_ID", "2")
    clean_env.setenv("PADDLE_TRAINERS_NUM", "2")
    with pytest.raises(ValueError, match="PADDLE_TRAINER_ID=2"):
        dist.ParallelEnv()


def test_cpu_places_follow_cpu_num(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "3")
    places = pe.static.cpu_places()
    assert [p._pe_place for p in places] == [("cpu", 0), ("cpu", 1), ("cpu", 2)]
    assert len(pe.static.cpu_places(2)) == 2
    assert pe.CPUPlace() == pe.CPUPlace(0) and pe.CUDAPlace(1) != pe.CUDAPlace(0)



@pytest.mark.parametrize("omp", ["2", "1"])
def test_cpu_num_unset_warning(omp):
    """Without CPU_NUM there is one place, whose kernels take every OpenMP
    thread: the warning says so, and points to CPU_NUM as the way to use
    the cores only when the kernels get one thread (OMP_NUM_THREADS=1)."""
    import os
    import subprocess
    import sys
    n = len(os.sched_getaffinity(0))
    if n < 2:
        pytest.skip("SKIPPED: one core: no CPU_NUM warning to check")
    env = dict(os.environ, OMP_NUM_THREADS=omp)
    env.pop("CPU_NUM", None)
    env.pop("PE_LOG_LEVEL", None)
    r = subprocess.run([sys.executable, "-c", "import pe; print(len(pe.static.cpu_places()))"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    if omp == "1":
        want = ("CPU_NUM is not set: using 1 CPU place of 1 thread (OMP_NUM_THREADS=1) on a machine with %d cores; "
                "set CPU_NUM=%d to train data-parallel on all of them" % (n, n))
    else:
        want = ("CPU_NUM is not set: using 1 CPU place, its kernels on 2 threads (CPU_NUM=%d would make %d "
                "data-parallel places of 1 thread each)" % (n, n))
    assert want in r.stderr, r.stderr
