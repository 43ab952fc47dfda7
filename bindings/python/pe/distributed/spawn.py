"""pe.distributed.spawn — start nprocs ranks running func(*args), through mpirun.

    import pe.distributed as dist

    def train(lr):
        dist.init_parallel_env()
        ...

    if __name__ == "__main__":
        dist.spawn(train, args=(0.1,), nprocs=2)

What: like Paddle's spawn (and multiprocessing's "spawn" start method):
each rank is a fresh `python -m pe.distributed._spawn_child <dir>` started
by mpirun; it re-imports the caller's main module as __mp_main__ (so
`if __name__ == "__main__":` blocks do not run again), unpickles (func,
args), sets Paddle's variables (PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM,
PADDLE_CURRENT_ENDPOINT, PADDLE_TRAINER_ENDPOINTS, PADDLE_RANK_IN_NODE) and
calls func(*args). func must be picklable by reference: a module-level
function.

Faults: a rank whose func raises writes its traceback to <dir>/error.N and
exits non-zero; mpirun then ends every other rank, and spawn (or join)
raises SpawnError naming the rank, with its traceback. A rank that dies
(a signal) is named from mpirun's message.

Why mpirun: the ranks need MPI between them anyway (init_parallel_env),
and mpirun already starts, wires and stops a job as one.
"""
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading

from . import _mpirun

__all__ = ["spawn", "SpawnContext", "SpawnError"]

_OPTIONS = {"start_port", "backend", "gpus", "print_config", "start_method"}


class SpawnError(Exception):
    """A spawned rank failed: .rank (None when unknown), .traceback (the rank's, or '')."""

    def __init__(self, message, rank=None, traceback=""):
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback


class SpawnContext:
    """The running job of spawn(..., join=False): join() waits for it."""

    def __init__(self, proc, tmpdir, nprocs, stderr_tail):
        self.proc = proc
        self.nprocs = nprocs
        self._tmpdir = tmpdir
        self._stderr = stderr_tail
        self._error_seen = None
        self._done = False

    @property
    def pid(self):
        return self.proc.pid

    def join(self, timeout=None):
        """Waits for every rank (at most timeout seconds): True when all
        ended, False on timeout; raises SpawnError when a rank failed (again
        on every later call)."""
        if not self._done:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            self._stderr.join()
            _mpirun.reap(self._tmpdir, "pe.distributed._spawn_child")
            try:
                if self.proc.returncode != 0:
                    self._error_seen = self._error()
            finally:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._done = True
        if self._error_seen is not None:
            raise self._error_seen
        return True

    def terminate(self):
        """Ends the job (mpirun stops every rank)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _error(self):
        errors = []
        for name in os.listdir(self._tmpdir):
            if name.startswith("error."):
                try:
                    with open(os.path.join(self._tmpdir, name)) as f:
                        t, _, tb = f.read().partition("\n")
                    errors.append((float(t), int(name.split(".")[1]), tb))
                except (OSError, ValueError):
                    continue
        if errors:
            _, rank, tb = min(errors)
            return SpawnError("spawn: rank %d of %d raised an exception:\n\n%s" % (rank, self.nprocs, tb.rstrip()),
                              rank, tb)
        rank, what = _mpirun.diagnose(self._tmpdir, self.nprocs, self._stderr.text(), self.proc.returncode)
        return SpawnError("spawn: %s" % what, rank)


class _Tail(threading.Thread):
    """Copies a pipe to a stream and keeps its last lines."""

    def __init__(self, pipe, out, keep=400):
        super().__init__(daemon=True)
        self._pipe, self._out, self._keep, self._lines = pipe, out, keep, []
        self.start()

    def run(self):
        for raw in iter(self._pipe.readline, b""):
            line = raw.decode("utf-8", "replace")
            try:
                self._out.write(line)
                self._out.flush()
            except (OSError, ValueError):
                pass
            self._lines.append(line)
            del self._lines[:-self._keep]
        self._pipe.close()

    def text(self):
        return "".join(self._lines)


def _main_module_info():
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) and spec.name != "__main__":
        return None, spec.name
    path = getattr(main, "__file__", None)
    if path and os.path.exists(path):
        return os.path.abspath(path), None
    return None, None


def spawn(func, args=(), nprocs=-1, join=True, daemon=False, **options):
    """Runs func(*args) in nprocs new processes (ranks 0..nprocs-1) started
    by mpirun; nprocs=-1: CPU_NUM, else os.cpu_count(). join=True: returns
    the finished SpawnContext when every rank has ended, or raises
    SpawnError naming the first rank that failed; join=False: returns the
    SpawnContext at once (call its join()). Options: start_port (6170:
    endpoints 127.0.0.1:start_port+rank), backend (gloo, mpi or nccl),
    gpus ("0,1": FLAGS_selected_gpus of each rank). daemon is accepted for
    Paddle's signature (the ranks end with the job either way)."""
    if _mpirun.importing_main:
        raise RuntimeError("spawn: called while a spawned rank re-imports the main module, which would start "
                           "ranks from every rank: put the spawn call under `if __name__ == \"__main__\":`")
    if os.environ.get("OMPI_COMM_WORLD_RANK", "").strip():
        raise RuntimeError("spawn: this process is already a rank started by mpirun (launch, spawn or mpirun), and "
                           "mpirun cannot start a job from inside one: call func directly here, or spawn from a "
                           "plain python process")
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError("spawn: unknown option(s) %s (known: %s)" % (", ".join(sorted(unknown)),
                                                                     ", ".join(sorted(_OPTIONS))))
    if not callable(func):
        raise TypeError("spawn: func must be callable, got %s" % type(func).__name__)
    if nprocs == -1:
        cpu = os.environ.get("CPU_NUM", "").strip()
        nprocs = int(cpu) if cpu.isdigit() and int(cpu) > 0 else (os.cpu_count() or 1)
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError("spawn: nprocs must be a positive int (or -1), got %r" % (nprocs,))
    backend = options.get("backend", "auto")
    if backend not in ("auto", "gloo", "mpi", "nccl"):
        raise ValueError("spawn: backend must be gloo, mpi or nccl (PE runs MPI on CPU), got %r" % (backend,))
    main_path, main_name = _main_module_info()
    if getattr(func, "__module__", None) == "__main__" and not (main_path or main_name):
        raise ValueError("spawn: func %s is defined in an interactive __main__ the new processes cannot import: "
                         "define it in a module file" % getattr(func, "__qualname__", func))
    try:
        payload = pickle.dumps((func, tuple(args)))
    except Exception as e:
        raise ValueError("spawn: cannot pickle func and args for the new processes (func must be a module-level "
                         "function; lambdas and nested functions cannot be sent): %s" % e) from None
    mpirun = _mpirun.find()
    if mpirun is None:
        raise RuntimeError("spawn: mpirun was not found on PATH: PE starts ranks with Open MPI (openmpi-bin; "
                           "scripts/setup.sh installs it)")
    start_port = int(options.get("start_port", 6170))
    gpus = options.get("gpus")
    if isinstance(gpus, (list, tuple)):
        gpus = ",".join(str(g) for g in gpus)
    endpoints = ",".join("127.0.0.1:%d" % (start_port + i) for i in range(nprocs))

    tmpdir = tempfile.mkdtemp(prefix="pe_spawn_")
    try:
        job = {"payload": payload, "sys_path": list(sys.path), "main_path": main_path, "main_name": main_name,
               "endpoints": endpoints, "gpus": gpus or "", "cwd": os.getcwd()}
        with open(os.path.join(tmpdir, "job.pkl"), "wb") as f:
            pickle.dump(job, f)
        env = _mpirun.rank_env()
        if backend != "auto":
            env["PADDLE_DISTRI_BACKEND"] = backend
        cmd = _mpirun.command(mpirun, nprocs, ["127.0.0.1"], env)
        cmd += [sys.executable, "-m", "pe.distributed._spawn_child", tmpdir]
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    except BaseException:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    ctx = SpawnContext(proc, tmpdir, nprocs, _Tail(proc.stderr, sys.stderr))
    if not join:
        return ctx
    try:
        while not ctx.join(0.1):
            pass
    except KeyboardInterrupt:
        ctx.terminate()
        raise
    return ctx
