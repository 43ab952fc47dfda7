"""pe.distributed._bootstrap — one rank of `python -m pe.distributed.launch` (run by mpirun).

    python -m pe.distributed._bootstrap training_script [args...]

Reads its rank from Open MPI (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK)
and the job from the launcher's PE_LAUNCH_* variables; sets Paddle's
PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_CURRENT_ENDPOINT,
PADDLE_TRAINER_ENDPOINTS, PADDLE_RANK_IN_NODE (and FLAGS_selected_gpus when
GPUs were given); sends its stdout and stderr to <log_dir>/workerlog.<rank>
(rank 0 also to the console, through `tee`); runs the script with runpy as
__main__. A script that raises or exits non-zero makes the process exit at
once with that code (no MPI_Finalize, which would wait for the other
ranks), so mpirun ends the job; <status_dir>/start.N and exit.N tell the
launcher what happened.
"""
import atexit
import os
import runpy
import shutil
import subprocess
import sys
import traceback

from . import _mpirun

_tee = None


def _redirect(log_path, to_console):
    """fd 1 and 2 -> log_path (and the console through tee when to_console)."""
    global _tee
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    tee = shutil.which("tee") if to_console else None
    if tee:
        os.close(fd)
        # -i: a Ctrl-C on the console must not cut the log short; -p: nor a console gone away.
        _tee = subprocess.Popen([tee, "-i", "-p", "-a", log_path], stdin=subprocess.PIPE, close_fds=True)
        fd = _tee.stdin.fileno()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        _tee.stdin.close()
    else:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    for s in (sys.stdout, sys.stderr):
        try:
            s.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass


def _close_output():
    """Flushes, and lets tee write the rest before the process goes."""
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError):
            pass
    if _tee is not None:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        try:
            _tee.wait(5)
        except subprocess.TimeoutExpired:
            pass


def main():
    _mpirun.die_with_parent()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(rank)))
    status_dir = os.environ.get("PE_LAUNCH_STATUS_DIR", "")
    log_dir = os.environ.get("PE_LAUNCH_LOG_DIR", "log")
    eps = [e for e in os.environ.get("PE_LAUNCH_ENDPOINTS", "").split(",") if e]
    gpus = [g for g in os.environ.get("PE_LAUNCH_GPUS", "").split(",") if g]
    os.environ.update({"PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(size),
                       "PADDLE_CURRENT_ENDPOINT": eps[rank] if rank < len(eps) else "",
                       "PADDLE_TRAINER_ENDPOINTS": ",".join(eps), "PADDLE_RANK_IN_NODE": str(local)})
    if gpus:
        os.environ["FLAGS_selected_gpus"] = gpus[local % len(gpus)]
    os.makedirs(log_dir, exist_ok=True)
    _redirect(os.path.join(log_dir, "workerlog.%d" % rank), rank == 0)
    # Registered before the script's own handlers, so it runs after them (last in, first out).
    atexit.register(_close_output)
    _mpirun.write_status(status_dir, "start", rank, _mpirun.started_text())
    if len(sys.argv) < 2:
        sys.stderr.write("pe.distributed._bootstrap: no training script given\n")
        code = 2
    elif not os.path.isfile(sys.argv[1]):
        sys.stderr.write("launch: rank %d: training script '%s' does not exist (working directory %s)\n" % (
            rank, sys.argv[1], os.getcwd()))
        code = 2
    else:
        script = sys.argv[1]
        sys.argv = sys.argv[1:]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        code = 0
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                sys.stderr.write("%s\n" % e.code)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
    _mpirun.write_status(status_dir, "exit", rank, str(code))
    if code:
        _close_output()
        os._exit(code)


if __name__ == "__main__":
    main()
