"""tests/python/test_distributed_collectives.py — pe.distributed's collectives and init_parallel_env.

- Under `mpirun -np 2` and `-np 3` (dist_scripts/collectives.py): all_reduce
  (SUM, MAX, MIN, PROD, AVG), broadcast, reduce, all_gather and scatter on
  float32/float64/int32/int64 arrays of several shapes (0-d, empty, 3-d)
  and one of several backend chunks equal numpy's answers (sums bitwise, in
  rank order); shape, dtype, root, op and function mismatches and a bad
  argument on one rank raise the same error on every rank and the world
  stays usable; ParallelEnv reads Open MPI's variables under a plain mpirun.
- One process: init_parallel_env is a no-op and the collectives act on
  the array alone; PADDLE_TRAINERS_NUM=2 without mpirun is a clear error,
  and so is an environment that disagrees with MPI on any rank: the same
  error on every rank.
- With a pe.static Variable, each function appends the static-graph op
  through pe.static.collective.append_collective (faked here).
- The check of the allgathered headers, on hostile values (no MPI): random
  and extreme int64s give a message or None, never an exception; a peer's
  control characters never reach the error.
Each job runs under a hard time limit (dist_run.run).
"""
import glob
import os
import re
import sys
import tempfile
import types

import numpy as np
import pytest

import pe
import pe.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_scripts"))
from dist_run import PY, job_env, mpirun, needs_mpirun, script  # noqa: E402


@needs_mpirun
@pytest.mark.parametrize("nprocs", [2, 3])
def test_collectives_match_numpy(nprocs):
    r = mpirun(nprocs, [PY, script("collectives.py")], timeout=120)
    assert r.rc == 0, r
    for rank in range(nprocs):
        assert "collectives OK rank %d of %d" % (rank, nprocs) in r.out, r


@needs_mpirun
def test_parallel_env_under_plain_mpirun():
    r = mpirun(2, [PY, script("env_report.py")])
    assert r.rc == 0, r
    for rank in range(2):
        assert re.search(r"launched rank=%d world_size=2 endpoint= endpoints= rank_in_node=%d" % (rank, rank),
                         r.out), r


@needs_mpirun
@pytest.mark.parametrize("who", ["every rank", "rank 1 only"])
def test_environment_disagreeing_with_mpi_is_an_error_on_every_rank(who):
    if who == "every rank":
        args, env, bad = [PY, "-c", "import pe.distributed as d; d.init_parallel_env()"], job_env(
            PADDLE_TRAINERS_NUM="3"), "on MPI rank 0 of 2 the environment says rank 0 of 3"
    else:  # rank 1 believes it is rank 0; rank 0 is right and would wait for it
        code = ("import os, pe.distributed as d; r = os.environ['OMPI_COMM_WORLD_RANK']; "
                "os.environ.update(PADDLE_TRAINER_ID='0', PADDLE_TRAINERS_NUM='2'); d.init_parallel_env()")
        args, env, bad = [PY, "-c", code], job_env(), "on MPI rank 1 of 2 the environment says rank 0 of 2"
    # mpirun would end the job when the first rank exits non-zero, maybe before the other has printed
    # its error: let every rank finish (mpirun's own exit status is then 0; that the launcher fails is
    # test_distributed_launch's business), each rank's stderr in a file of its own
    env["OMPI_MCA_orte_abort_on_non_zero_status"] = "0"
    with tempfile.TemporaryDirectory() as out:
        r = mpirun(2, ["--output-filename", out] + args, env=env)
        for rank in range(2):
            path = glob.glob(os.path.join(out, "*", "rank.%d" % rank, "stderr"))
            assert path, (rank, r)
            with open(path[0]) as f:
                err = f.read()
            assert "pe.InvalidArgumentError: init_parallel_env: " + bad in err, (rank, err, r)
    assert r.seconds < 20, r


@pytest.fixture
def one_process(monkeypatch):
    for v in ["PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_LOCAL_RANK", "PADDLE_RANK_IN_NODE"]:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def test_one_process(one_process):
    g = dist.init_parallel_env()
    assert (g.rank, g.world_size, g.ranks) == (0, 1, [0]) and not dist.is_initialized()
    x = np.arange(3, dtype="float32")
    dist.all_reduce(x)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    dist.broadcast(x, 0)
    dist.reduce(x, 0)
    dist.barrier()
    np.testing.assert_array_equal(x, [0, 1, 2])
    out = []
    dist.all_gather(out, x)
    assert len(out) == 1 and out[0] is not x and (out[0] == x).all()
    y = np.zeros(3, "float32")
    dist.scatter(y, [x], src=0)
    np.testing.assert_array_equal(y, x)
    with pytest.raises(pe.InvalidArgumentError, match="broadcast: src=1 is not a rank of the 1 processes"):
        dist.broadcast(x, 1)
    with pytest.raises(pe.InvalidArgumentError, match="all_reduce: dtype float16 is not supported"):
        dist.all_reduce(np.zeros(2, "float16"))
    with pytest.raises(pe.InvalidArgumentError, match="not C-contiguous"):
        dist.all_reduce(np.zeros((3, 3), "float32")[:, 1])
    with pytest.raises(pe.InvalidArgumentError, match="op must be a ReduceOp"):
        dist.all_reduce(x, op="sum")
    with pytest.raises(pe.InvalidArgumentError, match="tensor_list of the src rank must be a list of 1 arrays"):
        dist.scatter(y, None)


def test_trainers_without_mpirun_is_an_error(one_process):
    one_process.setenv("PADDLE_TRAINERS_NUM", "2")
    one_process.setenv("PADDLE_TRAINER_ID", "0")
    with pytest.raises(pe.InvalidArgumentError, match="PADDLE_TRAINERS_NUM=2 but this process was not started by "
                                                      "mpirun"):
        dist.init_parallel_env()


def test_static_variables_append_collective_ops(one_process):
    calls = []

    def append_collective(op_type, x, **attrs):
        calls.append((op_type, x.name, attrs))
        return x

    fake = types.ModuleType("pe.static.collective")
    fake.append_collective = append_collective
    one_process.setitem(sys.modules, "pe.static.collective", fake)
    one_process.setattr(pe.static, "collective", fake, raising=False)
    main = pe.static.Program()
    with pe.static.program_guard(main, pe.static.Program()):
        v = pe.static.data("v", [None, 4], "float32")
    dist.all_reduce(v)
    dist.all_reduce(v, op=dist.ReduceOp.MAX)
    dist.broadcast(v, src=0)
    dist.reduce(v, dst=0, op=dist.ReduceOp.MIN)
    out = []
    dist.all_gather(out, v)
    assert out == [v]
    assert calls == [("c_allreduce_sum", "v", {}), ("c_allreduce_max", "v", {}), ("c_broadcast", "v", {"root": 0}),
                     ("c_reduce_min", "v", {"root_id": 0}), ("c_allgather", "v", {"nranks": 1})]


@needs_mpirun
def test_uncaught_exception_under_plain_mpirun_ends_the_job():
    # After init_parallel_env an uncaught exception exits at once (no
    # MPI_Finalize, which would wait for the ranks blocked in all_reduce),
    # so mpirun ends the job long before PE_MPI_TIMEOUT (30 s here).
    r = mpirun(3, [PY, script("raise_on_rank.py"), "1"], timeout=60)
    assert r.rc != 0, r
    assert "ValueError: rank 1 fails on purpose" in r.err, r
    assert r.seconds < 20, r


def test_header_check_takes_any_values():
    """The headers are other processes' int64s: out-of-range function, op and
    dtype codes, negative or huge ndims, extremes. _headers_differ must give a
    str (or None when the rows agree), never raise (IndexError before: a
    function code past _FUNCS, a dtype index past _DTYPES)."""
    from pe.distributed import collective as col
    rng = np.random.default_rng(16)
    extremes = np.array([0, 1, -1, 2, 6, 7, 8, 9, 1 << 31, -(1 << 31), (1 << 63) - 1, -(1 << 63)], np.int64)
    for trial in range(3000):
        size = int(rng.integers(1, 5))
        if trial % 2:
            allh = rng.choice(extremes, size=(size, col._HDR))
        else:
            allh = rng.integers(-(1 << 63), (1 << 63) - 1, size=(size, col._HDR), dtype=np.int64, endpoint=True)
        if trial % 3 == 0:
            allh[1:] = allh[0]  # agreeing rows, then one field changed
            if size > 1:
                allh[size - 1, int(rng.integers(0, col._HDR))] = rng.choice(extremes)
        why = col._headers_differ("reduce" if trial % 5 == 0 else "all_reduce", allh)
        agree = all((allh[r, [0, 1, 2, 3, 4]] == allh[0, [0, 1, 2, 3, 4]]).all() and
                    (allh[r, 6:] == allh[0, 6:]).all() for r in range(size))
        assert (why is None) == agree, (allh, why)
        assert why is None or isinstance(why, str)
    # the names stay right for real codes, and odd codes are named as codes
    h = np.zeros((2, col._HDR), np.int64)
    h[:, 2] = -1
    h[0, 0], h[1, 0] = col._FUNCS.index("all_reduce"), 99
    assert "rank 1 called collective #99 while rank 0 called all_reduce" in col._headers_differ("all_reduce", h)
    h[1, 0], h[1, 2] = h[0, 0], 12
    assert "rank 1 passed dtype #12, rank 0 no array" in col._headers_differ("all_reduce", h)
    assert col._peer_text(np.frombuffer(b"bad\x1b[2J\nroot\x00junk", np.uint8)) == "bad?[2J?root"
