"""tests/python/test_distributed_launch.py — `python -m pe.distributed.launch` through mpirun.

- Seed 000's example (init_parallel_env + ParallelEnv, with `import pe as
  paddle`) under launch --nproc_per_node 2: Paddle's variables in each
  rank (--started_port moves the endpoints), one workerlog per rank,
  rank 0's output also on the console (and only rank 0's).
- Faults, each followed by a launch that works: a rank killed with
  SIGKILL mid-run (rank 1, and rank 0 whose output goes through tee), a
  rank that raises, a script that does not exist. The launcher exits
  non-zero naming the rank and showing the end of its log within 5 s of
  the fault, no rank is still running then, and Open MPI's shared-memory
  files of the job are gone.
- Programs that differ between the ranks, and a num_trainers that is not
  the launched world: the ParallelExecutor's construction fails on every
  rank with the same message, the launcher exits non-zero with it, well
  within the time limit (no hang).
- A static-graph MLP trained by 2 ranks (ParallelExecutor(num_trainers=2,
  trainer_id=rank), each rank feeding its half of every batch, started
  from different seeds) ends with the same parameters on both ranks,
  allclose to one process trained on the whole batches.
- The launcher across two hosts for real: `--ips 10.213.0.1,10.213.0.2`
  with one rank on each of two network namespaces joined by a veth pair
  (tests/unit/run_netns.sh launch: TCP only, the veth counters must grow),
  training the MLP to the one-process parameters.
- The mpirun command line for several hosts (--host with slots, the
  variables forwarded to remote ranks), and the failed rank read from
  mpirun's messages when no status file names it (no mpirun needed).
Each job runs under a hard time limit (dist_run.run).
"""
import os
import re
import shutil
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_scripts"))
from dist_run import PY, job_env, launch, needs_mpirun, run, running, script, vader_segments  # noqa: E402

from pe.distributed import _mpirun  # noqa: E402

def check_env_report(r, log_dir, nprocs=2, port=6170):
    assert r.rc == 0, r
    eps = ",".join("127.0.0.1:%d" % (port + i) for i in range(nprocs))
    lines = {}
    for rank in range(nprocs):
        with open(os.path.join(log_dir, "workerlog.%d" % rank)) as f:
            lines[rank] = f.read()
        assert ("launched rank=%d world_size=%d endpoint=127.0.0.1:%d endpoints=%s rank_in_node=%d" % (
            rank, nprocs, port + rank, eps, rank)) in lines[rank], (rank, lines[rank], r)
    assert "launched rank=0 " in r.out, r
    assert "launched rank=1 " not in r.out + r.err, r


@needs_mpirun
def test_launch_env_report(tmp_path):
    log = tmp_path / "log"
    r = launch(["--nproc_per_node", "2", "--log_dir", str(log), script("env_report.py")], cwd=tmp_path)
    check_env_report(r, log)
    r = launch(["--nproc_per_node", "3", "--started_port", "7100", script("env_report.py")], cwd=tmp_path)
    check_env_report(r, tmp_path / "log", nprocs=3, port=7100)


def _fault_time(log_dir, rank, what):
    with open(os.path.join(log_dir, "workerlog.%d" % rank)) as f:
        m = re.search(r"rank %d: %s at ([0-9.]+)" % (rank, what), f.read())
    assert m, "rank %d never got to the fault" % rank
    return float(m.group(1))


def _rank_pids(log_dir, nprocs):
    pids = []
    for rank in range(nprocs):
        with open(os.path.join(log_dir, "workerlog.%d" % rank)) as f:
            m = re.search(r"jobid [0-9a-f]+ pid (\d+)", f.read())
        assert m, "rank %d printed no pid" % rank
        pids.append(int(m.group(1)))
    return pids


def _jobid(log_dir):
    with open(os.path.join(log_dir, "workerlog.0")) as f:
        m = re.search(r"jobid ([0-9a-f]+)", f.read())
    return m.group(1) if m else None


FAULTS = {
    "sigkill_rank1": (["kill_rank.py", "1"], 1, "rank 1 was killed by signal 9", "killing itself"),
    "sigkill_rank0": (["kill_rank.py", "0"], 0, "rank 0 was killed by signal 9", "killing itself"),
    "raise_rank2": (["raise_on_rank.py", "2"], 2, "rank 2 exited with code 1", "raising"),
}


@needs_mpirun
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_launch_fault_ends_the_job_and_names_the_rank(tmp_path, fault):
    args, rank, what, mark = FAULTS[fault]
    log = tmp_path / "log"
    r = launch(["--nproc_per_node", "3", "--log_dir", str(log), script(args[0])] + args[1:], cwd=tmp_path)
    ended = time.time()
    assert r.rc != 0, r
    assert ("launch: error: %s" % what) in r.err and "mpirun ended the other ranks" in r.err, r
    assert "launch: the end of %s:" % os.path.join(str(log), "workerlog.%d" % rank) in r.err, r
    if fault.startswith("raise"):
        assert "ValueError: rank 2 fails on purpose" in r.err, r
    assert ended - _fault_time(log, rank, mark) < 5.0, r
    assert not [p for p in _rank_pids(log, 3) if running(p)], "ranks still running after the launcher ended"
    jobid = _jobid(log)
    assert jobid, r
    left = [n for n in vader_segments() if ".%s." % jobid in n]
    assert not left, "shared memory of the failed job left in /dev/shm: %s" % left
    again = launch(["--nproc_per_node", "2", "--log_dir", str(log), script("env_report.py")], cwd=tmp_path)
    check_env_report(again, log)


@needs_mpirun
def test_launch_missing_script(tmp_path):
    r = launch(["--nproc_per_node", "2", "no_such_script.py"], cwd=tmp_path, timeout=30)
    assert r.rc != 0 and "launch: error: training script 'no_such_script.py' does not exist" in r.err, r
    again = launch(["--nproc_per_node", "2", script("env_report.py")], cwd=tmp_path)
    check_env_report(again, tmp_path / "log")


@needs_mpirun
def test_launch_trains_like_one_process(tmp_path):
    r = launch(["--nproc_per_node", "2", script("train_mlp.py"), str(tmp_path)], cwd=tmp_path, timeout=120)
    assert r.rc == 0, r
    one = run([PY, script("train_mlp.py"), str(tmp_path)], timeout=60, cwd=tmp_path)
    assert one.rc == 0, one
    p0, p1, single = [np.load(tmp_path / ("params.%s.npz" % k)) for k in ("0", "1", "single")]
    assert sorted(p0.files) == sorted(single.files)
    for name in single.files:
        np.testing.assert_array_equal(p0[name], p1[name], err_msg=name)
        np.testing.assert_allclose(p0[name], single[name], rtol=1e-5, atol=1e-6, err_msg=name)


@needs_mpirun
@pytest.mark.parametrize("fault,message", [
    ("--mismatch", "trainer 1 runs another program than trainer 0"),
    ("--wrong-count", "says num_trainers=3, but 2 processes were launched"),
])
def test_launch_world_mismatch_is_an_error_on_every_rank(tmp_path, fault, message):
    log = tmp_path / "log"
    start = time.time()
    r = launch(["--nproc_per_node", "2", "--log_dir", str(log), script("train_mlp.py"), str(tmp_path), fault],
               cwd=tmp_path, timeout=60)
    assert r.rc != 0 and message in r.err + r.out, r
    assert time.time() - start < 30, r
    for k in range(2):  # every rank says it (the check is collective: nobody waits for the others)
        assert message in (log / ("workerlog.%d" % k)).read_text(), k
    assert not list(tmp_path.glob("params.*.npz"))


@needs_mpirun
def test_launch_on_two_hosts(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = job_env(PE_NETNS_LOG_DIR=str(tmp_path / "log"))
    env.pop("CPU_NUM", None)
    # the MLP's gradients: 259 float32 per step each way, 10 steps, plus the headers
    r = run(["bash", os.path.join(root, "tests", "unit", "run_netns.sh"), "launch", "8000", "",
             script("train_mlp.py"), str(tmp_path)], timeout=150, env=env)
    if r.rc == 77:
        pytest.skip(r.out.strip().splitlines()[-1] if r.out.strip() else "no network namespaces here")
    assert r.rc == 0, r
    assert "received over the veth" in r.out, r
    for k in range(2):
        assert "rank %d step 9" % k in (tmp_path / "log" / ("workerlog.%d" % k)).read_text()
    one = run([PY, script("train_mlp.py"), str(tmp_path)], timeout=60, cwd=tmp_path)
    assert one.rc == 0, one
    p0, p1, single = [np.load(tmp_path / ("params.%s.npz" % k)) for k in ("0", "1", "single")]
    for name in single.files:
        np.testing.assert_array_equal(p0[name], p1[name], err_msg=name)
        np.testing.assert_allclose(p0[name], single[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_mpirun_command_for_several_hosts():
    env = {"PYTHONPATH": "/x", "PADDLE_DISTRI_BACKEND": "gloo", "PE_LAUNCH_LOG_DIR": "/l", "HOME": "/root"}
    cmd = _mpirun.command("mpirun", 4, ["10.0.0.1", "10.0.0.2"], env)
    if shutil.which("setpriv"):  # mpirun ends with the process that started it
        assert cmd[:4] == [shutil.which("setpriv"), "--pdeathsig", "TERM", "--"]
        cmd = cmd[4:]
    assert cmd[:6] == ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "8"]
    i = cmd.index("--host")
    assert cmd[i + 1] == "10.0.0.1:4,10.0.0.2:4"
    forwarded = [cmd[j + 1] for j, a in enumerate(cmd) if a == "-x"]
    assert {"PYTHONPATH", "PADDLE_DISTRI_BACKEND", "PE_LAUNCH_LOG_DIR"} <= set(forwarded) and "HOME" not in forwarded
    assert "--host" not in _mpirun.command("mpirun", 2, ["127.0.0.1"], {})


def test_diagnose_reads_mpirun_messages(tmp_path):
    sig = "mpirun noticed that process rank 2 with PID 123 on node vm exited on signal 9 (Killed)."
    assert _mpirun.diagnose(str(tmp_path), 3, sig, 137) == (2, "rank 2 was killed by signal 9 (Killed)")
    ex = "The first process to do so was:\n\n  Process name: [[1234,1],1]\n  Exit code:    3\n"
    assert _mpirun.diagnose(str(tmp_path), 3, ex, 1) == (1, "rank 1 exited with code 3")
    _mpirun.write_status(str(tmp_path), "start", 0, "1 vm")
    assert _mpirun.diagnose(str(tmp_path), 2, "", 1) == (1, "rank 1 never started")
    _mpirun.write_status(str(tmp_path), "exit", 0, "4")
    assert _mpirun.diagnose(str(tmp_path), 2, sig, 1) == (0, "rank 0 exited with code 4")
