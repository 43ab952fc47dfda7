"""Helpers for the tests/python/test_distributed_*.py tests: run a command
(mpirun, launch, a spawning script) with a hard time limit, and the
environment those jobs need here.

Each job runs in its own session; on a timeout the whole process group
(mpirun and its ranks) is killed, so no test leaves a process behind.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (openmpi-bin; scripts/setup.sh installs it)")
PY = sys.executable
PADDLE_VARS = ["PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_CURRENT_ENDPOINT", "PADDLE_TRAINER_ENDPOINTS",
               "PADDLE_RANK_IN_NODE", "FLAGS_selected_gpus"]


def running(pid):
    """pid exists and is not a zombie (an ended process not yet reaped)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def script(name):
    return os.path.join(HERE, name)


def job_env(**extra):
    """The test process's environment (PYTHONPATH finds pe) for a job: one
    OpenMP thread and one place per rank, collectives that give up after
    30 s without progress, root allowed to run mpirun, no PADDLE_* left over."""
    env = {k: v for k, v in os.environ.items() if k not in PADDLE_VARS and not k.startswith("OMPI_COMM_WORLD")}
    env.update({"OMP_NUM_THREADS": "1", "CPU_NUM": "1", "PE_MPI_TIMEOUT": "30",
                "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_btl_vader_single_copy_mechanism": "none"})
    env.update(extra)
    return env


class Result:
    def __init__(self, rc, out, err, seconds):
        self.rc, self.out, self.err, self.seconds = rc, out, err, seconds

    def __repr__(self):
        return "rc=%s after %.1f s\n--- stdout\n%s\n--- stderr\n%s" % (self.rc, self.seconds, self.out, self.err)


def run(cmd, timeout, cwd=None, env=None):
    """Runs cmd; fails the test when it is still running after timeout
    seconds (after killing its process group)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env or job_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail("%s did not finish within %d s:\n%s" % (" ".join(cmd), timeout,
                                                             Result(None, out.decode(), err.decode(), timeout)))
    return Result(p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                  time.monotonic() - t0)


def mpirun(np_, args, timeout=60, env=None):
    return run([MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", str(np_)] + args, timeout, env=env)


def launch(args, timeout=60, cwd=None, env=None):
    return run([PY, "-m", "pe.distributed.launch"] + args, timeout, cwd=cwd, env=env)


def vader_segments():
    """Open MPI's shared-memory files in /dev/shm (its vader transport)."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("vader_segment")}
    except OSError:
        return set()
