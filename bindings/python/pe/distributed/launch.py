"""pe.distributed.launch — start a training script on several processes (Paddle 2.x's launcher).

    python -m pe.distributed.launch --nproc_per_node 2 train.py --epochs 3
    python -m pe.distributed.launch --ips 10.0.0.1,10.0.0.2 --nproc_per_node 4 train.py

What: runs nproc_per_node ranks on each host of --ips (default
127.0.0.1) through mpirun; rank r runs on host r // nproc_per_node with
endpoint <host>:<started_port + r % nproc_per_node>. Each rank (through
pe.distributed._bootstrap) gets Paddle's variables (PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM, PADDLE_CURRENT_ENDPOINT, PADDLE_TRAINER_ENDPOINTS,
PADDLE_RANK_IN_NODE, FLAGS_selected_gpus with --gpus), writes its output to
<log_dir>/workerlog.<rank> (rank 0 also to this console) and runs the
script as __main__. mpirun's own messages go to <log_dir>/mpirun.log.

Faults: when a rank exits non-zero, raises, or dies (a signal), mpirun
ends every other rank; the launcher then exits non-zero with a line naming
the rank and what happened, followed by the tail of that rank's log. A
missing script is an error before anything starts. Ctrl-C (SIGINT) or
SIGTERM stops the job.

Why mpirun: it starts processes on one or many hosts, wires MPI between
them (what init_parallel_env and ParallelExecutor(num_trainers=...) use)
and ends the job as one when a rank fails.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from . import _mpirun

__all__ = ["main"]


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m pe.distributed.launch",
        description="Start training_script on several processes through mpirun (Open MPI), with Paddle's "
                    "PADDLE_* variables set in each.")
    p.add_argument("--nproc_per_node", type=int, default=None,
                   help="processes per host (default: the number of --gpus, else 1)")
    p.add_argument("--ips", "--cluster_node_ips", default="127.0.0.1",
                   help="comma-separated hosts, one or many (default 127.0.0.1)")
    p.add_argument("--log_dir", default="log", help="where workerlog.<rank> files go (default log)")
    p.add_argument("--started_port", type=int, default=6170,
                   help="first port of each host's endpoints (default 6170)")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "mpi", "nccl"],
                   help="gloo and mpi: Open MPI on CPU (what PE uses); nccl: accepted for GPUs")
    p.add_argument("--gpus", "--selected_gpus", dest="gpus", default=None,
                   help="comma-separated GPU ids; rank i of a host gets FLAGS_selected_gpus=gpus[i]")
    p.add_argument("training_script", help="the script each rank runs as __main__")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def _fail(msg, code=1):
    sys.stderr.write("launch: error: %s\n" % msg)
    sys.stderr.flush()
    return code


class _Collect(threading.Thread):
    """Writes a pipe to a file and keeps the text."""

    def __init__(self, pipe, path):
        super().__init__(daemon=True)
        self._pipe, self._path, self._chunks = pipe, path, []
        self.start()

    def run(self):
        with open(self._path, "wb") as f:
            for raw in iter(self._pipe.readline, b""):
                f.write(raw)
                f.flush()
                self._chunks.append(raw)
        self._pipe.close()

    def text(self):
        return b"".join(self._chunks).decode("utf-8", "replace")


def main(argv=None):
    args = _parser().parse_args(argv)
    hosts = [h.strip() for h in args.ips.split(",") if h.strip()]
    if not hosts:
        return _fail("--ips names no host")
    gpus = [g.strip() for g in (args.gpus or "").split(",") if g.strip()]
    nproc = args.nproc_per_node if args.nproc_per_node is not None else (len(gpus) or 1)
    if nproc < 1:
        return _fail("--nproc_per_node must be >= 1, got %d" % nproc)
    if not 0 < args.started_port <= 65535 - nproc:
        return _fail("--started_port %d leaves no room for %d ports" % (args.started_port, nproc))
    script = args.training_script
    if not os.path.isfile(script):
        return _fail("training script '%s' does not exist (working directory %s)" % (script, os.getcwd()), 2)
    mpirun = _mpirun.find()
    if mpirun is None:
        return _fail("mpirun was not found on PATH: PE starts ranks with Open MPI (openmpi-bin; scripts/setup.sh "
                     "installs it)")
    world = nproc * len(hosts)
    endpoints = ["%s:%d" % (h, args.started_port + i) for h in hosts for i in range(nproc)]
    log_dir = os.path.abspath(args.log_dir)
    os.makedirs(log_dir, exist_ok=True)
    for r in range(world):  # no stale log of an earlier, larger job is read as this one's
        try:
            os.remove(os.path.join(log_dir, "workerlog.%d" % r))
        except OSError:
            pass
    status_dir = tempfile.mkdtemp(prefix="pe_launch_")
    env = _mpirun.rank_env()
    env.update({"PE_LAUNCH_STATUS_DIR": status_dir, "PE_LAUNCH_LOG_DIR": log_dir,
                "PE_LAUNCH_ENDPOINTS": ",".join(endpoints), "PE_LAUNCH_GPUS": ",".join(gpus)})
    if args.backend != "auto":
        env["PADDLE_DISTRI_BACKEND"] = args.backend
    cmd = _mpirun.command(mpirun, nproc, hosts, env)
    cmd += [sys.executable, "-m", "pe.distributed._bootstrap", script] + list(args.training_script_args)
    try:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as e:
        shutil.rmtree(status_dir, ignore_errors=True)
        return _fail("cannot start mpirun: %s" % e)
    collect = _Collect(proc.stderr, os.path.join(log_dir, "mpirun.log"))
    stopped = []

    def stop(signum, frame):
        stopped.append(signum)
        if proc.poll() is None:
            proc.terminate()  # mpirun forwards it and ends every rank

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    collect.join(10)
    _mpirun.reap(status_dir, "pe.distributed._bootstrap")
    try:
        if rc == 0 and not stopped:
            return 0
        if stopped:
            return _fail("stopped by signal %d; every rank was ended" % stopped[0], 128 + stopped[0])
        rank, what = _mpirun.diagnose(status_dir, world, collect.text(), rc)
        sys.stdout.flush()
        lines = ["launch: error: %s; mpirun ended the other ranks (mpirun exit status %d)" % (what, rc)]
        log = os.path.join(log_dir, "workerlog.%d" % rank) if rank is not None else None
        text = _mpirun.tail(log) if log else ""
        if not text:  # the rank wrote nothing (it died before its log opened): mpirun's words instead
            log = os.path.join(log_dir, "mpirun.log")
            text = _mpirun.tail(log) or "(nothing)"
        lines.append("launch: the end of %s:" % log)
        lines += ["    " + line for line in text.splitlines()]
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
        return 1
    finally:
        shutil.rmtree(status_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
