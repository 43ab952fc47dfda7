"""pe.distributed._spawn_child — one rank of pe.distributed.spawn (run by mpirun).

    python -m pe.distributed._spawn_child <dir>      # <dir>/job.pkl written by spawn

Sets Paddle's variables from the MPI rank, restores the parent's sys.path,
re-imports the parent's main module as __mp_main__ (what multiprocessing's
spawn does, so pickled references to __main__ resolve and the main block
does not run again), unpickles (func, args) and calls func(*args). On an
exception: the traceback goes to stderr and to <dir>/error.<rank>, and the
process exits 1 at once (no MPI_Finalize, which would wait for the other
ranks), so mpirun ends the job.
"""
import os
import pickle
import runpy
import sys
import time
import traceback
import types


def _setup_main(path, name):
    if name:
        mod = types.ModuleType("__mp_main__")
        mod.__dict__.update(runpy.run_module(name, run_name="__mp_main__", alter_sys=False))
    elif path:
        mod = types.ModuleType("__mp_main__")
        mod.__file__ = path
        sys.path.insert(0, os.path.dirname(path))
        mod.__dict__.update(runpy.run_path(path, run_name="__mp_main__"))
    else:
        return
    sys.modules["__main__"] = sys.modules["__mp_main__"] = mod


def main():
    from . import _mpirun
    tmpdir = sys.argv[1]
    _mpirun.die_with_parent()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(rank)))
    _mpirun.write_status(tmpdir, "start", rank, _mpirun.started_text())
    code = 0
    try:
        with open(os.path.join(tmpdir, "job.pkl"), "rb") as f:
            job = pickle.load(f)
        eps = job["endpoints"].split(",")
        os.environ.update({"PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(size),
                           "PADDLE_CURRENT_ENDPOINT": eps[rank] if rank < len(eps) else "",
                           "PADDLE_TRAINER_ENDPOINTS": job["endpoints"], "PADDLE_RANK_IN_NODE": str(local)})
        gpus = [g for g in job["gpus"].split(",") if g]
        if gpus:
            os.environ["FLAGS_selected_gpus"] = gpus[local % len(gpus)]
        for p in reversed(job["sys_path"]):
            if p not in sys.path:
                sys.path.insert(0, p)
        os.chdir(job["cwd"])
        _mpirun.importing_main = True
        try:
            _setup_main(job["main_path"], job["main_name"])
        finally:
            _mpirun.importing_main = False
        func, args = pickle.loads(job["payload"])
        func(*args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            tb = "SystemExit: %s\n" % e.code
            _write_error(tmpdir, rank, tb)
    except BaseException:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        _write_error(tmpdir, rank, tb)
        code = 1
    _mpirun.write_status(tmpdir, "exit", rank, str(code))
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _write_error(tmpdir, rank, tb):
    try:
        path = os.path.join(tmpdir, "error.%d" % rank)
        with open(path + ".tmp", "w") as f:
            f.write("%.6f\n%s" % (time.time(), tb))
        os.replace(path + ".tmp", path)
    except OSError:
        pass


if __name__ == "__main__":
    main()
