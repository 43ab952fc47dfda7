"""fluid.transpiler — DistributeTranspiler (nccl2 / collective mode),
DistributeTranspilerConfig, RoundRobin, HashName, memory_optimize,
release_memory.

nccl2 mode (Paddle's collective data parallelism over N trainer processes):

    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(trainer_id, trainers="10.0.0.1:6170,10.0.0.2:6170", current_endpoint="10.0.0.1:6170")
    exe = fluid.ParallelExecutor(use_cuda, loss_name=loss.name, num_trainers=2, trainer_id=trainer_id)

Paddle appends a gen_nccl_id op to the startup program, which swaps the
NCCL unique id over the endpoints. PE needs no op for it: the trainers are
MPI processes (started by `python -m pe.distributed.launch` or mpirun), and
the ParallelExecutor constructed with num_trainers/trainer_id checks the
world (trainer count, rank, places, a hash of the program), broadcasts the
persistables from trainer 0 (so the startup programs' random draws need not
agree) and, on CUDA places, makes the NCCL id on trainer 0 and broadcasts it
over MPI. transpile() checks the arguments (the endpoint list, trainer_id in
range, current_endpoint = trainers[trainer_id]) and records them on the
program; the ParallelExecutor refuses a num_trainers / trainer_id that
disagrees with them. The program's ops are unchanged: gradients are summed
across all trainers' places by the executor's allreduce.

Parameter-server mode (config.mode = "pserver", the default; Paddle's
dist_train.py):

    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id, pservers="10.0.0.1:6174,10.0.0.2:6174", trainers=2)
    if role == "PSERVER":
        prog = t.get_pserver_program(current_endpoint)
        exe.run(t.get_startup_program(current_endpoint, prog)); exe.run(prog)
    else:
        exe.run(fluid.default_startup_program()); exe.run(t.get_trainer_program(), ...)
        exe.close()

transpile() checks the arguments (pservers "ip:port" without repeats,
trainers an int >= 1, trainer_id in [0, trainers)), cuts every parameter into
row blocks placed on the pservers, and edits the startup program in place
(the trainer starts from the pservers' values). The rewriting itself, the op
wiring (split / send / send_barrier / recv / fetch_barrier / concat on the
trainer, listen_and_serv with one optimize block per parameter block on a
pserver) and the checkpoint mapping fluid.io uses are in ps_transpiler.py.
"""
from .. import _core
from ..framework import Program, default_main_program, default_startup_program
from . import ps_transpiler as _ps
from .ps_transpiler import HashName, PSDispatcher, RoundRobin  # noqa: F401 (fluid.transpiler's names)

__all__ = ["DistributeTranspiler", "DistributeTranspilerConfig", "RoundRobin", "HashName", "memory_optimize",
           "release_memory"]


class DistributeTranspilerConfig:
    """Knobs of the transpiler; mode is "pserver" (default), "nccl2" or "collective"."""

    def __init__(self):
        self.slice_var_up = True
        self.split_method = None
        self.min_block_size = 8192
        self.enable_dc_asgd = False
        self.mode = "pserver"
        self.print_log = False
        self.wait_port = True
        self.nccl_comm_num = 1
        self.use_hierarchical_allreduce = False
        self.sync_mode = True
        # PE's: a pserver whose trainer dies stops with an error instead of
        # dropping it from the fan-in and going on (listen_and_serv's attr)
        self.stop_on_lost_trainer = False


def _endpoints(trainers, what, arg="trainers", kind="trainer"):
    if not isinstance(trainers, str):
        raise _core.InvalidArgumentError(
            "DistributeTranspiler.transpile: in %s mode %s must be the comma-separated %s endpoints "
            "(\"ip:port,ip:port,...\"), got %r" % (what, arg, kind, trainers))
    eps = [e.strip() for e in trainers.split(",") if e.strip()]
    if not eps:
        raise _core.InvalidArgumentError("DistributeTranspiler.transpile: the %s endpoint list %s=%r is empty"
                                         % (kind, arg, trainers))
    for e in eps:
        host, sep, port = e.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _core.InvalidArgumentError("DistributeTranspiler.transpile: %s endpoint %r is not ip:port"
                                             % (kind, e))
    if len(set(eps)) != len(eps):
        raise _core.InvalidArgumentError("DistributeTranspiler.transpile: %s endpoints repeat: %s=%s"
                                         % (kind, arg, trainers))
    return eps


class DistributeTranspiler:
    def __init__(self, config=None):
        self.config = config if config is not None else DistributeTranspilerConfig()
        if not isinstance(self.config, DistributeTranspilerConfig):
            raise TypeError("DistributeTranspiler: config must be a DistributeTranspilerConfig, got %s"
                            % type(self.config).__name__)
        self._program = None
        self._startup = None
        self._plan = None

    def transpile(self, trainer_id, program=None, pservers="127.0.0.1:6174", trainers=1, sync_mode=True,
                  startup_program=None, current_endpoint="127.0.0.1:6174"):
        program = program if program is not None else default_main_program()
        startup_program = startup_program if startup_program is not None else default_startup_program()
        for p, what in ((program, "program"), (startup_program, "startup_program")):
            if not isinstance(p, Program):
                raise TypeError("DistributeTranspiler.transpile: %s must be a Program, got %s"
                                % (what, type(p).__name__))
        mode = self.config.mode
        if mode == "pserver":
            return self._transpile_pserver(trainer_id, program, pservers, trainers, sync_mode, startup_program)
        if mode not in ("nccl2", "collective"):
            raise _core.UnsupportedError(
                "DistributeTranspiler: mode %r is not implemented in PE; modes \"pserver\" and \"nccl2\" "
                "(collective data parallelism over MPI / NCCL) are" % (mode,))
        eps = _endpoints(trainers, mode)
        if isinstance(trainer_id, bool) or not isinstance(trainer_id, int) or not 0 <= trainer_id < len(eps):
            raise _core.InvalidArgumentError("DistributeTranspiler.transpile: trainer_id %r is not in [0, %d) "
                                             "(trainers=%s)" % (trainer_id, len(eps), trainers))
        if current_endpoint != eps[trainer_id]:
            raise _core.InvalidArgumentError(
                "DistributeTranspiler.transpile: current_endpoint %r is not trainer %d's endpoint %r in trainers=%s"
                % (current_endpoint, trainer_id, eps[trainer_id], trainers))
        if not sync_mode or not self.config.sync_mode:
            raise _core.UnsupportedError("DistributeTranspiler: nccl2 mode is synchronous; sync_mode=False is not "
                                         "supported")
        info = {"trainer_id": trainer_id, "endpoints": eps, "current_endpoint": current_endpoint}
        program._pe_nccl2 = info
        startup_program._pe_nccl2 = info
        self._program, self._startup, self._plan = program, startup_program, None

    def _transpile_pserver(self, trainer_id, program, pservers, trainers, sync_mode, startup_program):
        eps = _endpoints(pservers, "pserver", arg="pservers", kind="pserver")
        if isinstance(trainers, bool) or not isinstance(trainers, int) or trainers < 1:
            raise _core.InvalidArgumentError("DistributeTranspiler.transpile: in pserver mode trainers must be the "
                                             "number of trainers, an int >= 1, got %r" % (trainers,))
        if isinstance(trainer_id, bool) or not isinstance(trainer_id, int) or not 0 <= trainer_id < trainers:
            raise _core.InvalidArgumentError("DistributeTranspiler.transpile: trainer_id %r is not in [0, %d) "
                                             "(trainers=%d)" % (trainer_id, trainers, trainers))
        if self.config.enable_dc_asgd:
            raise _core.UnsupportedError("DistributeTranspiler: enable_dc_asgd is not supported in PE")
        if getattr(program, "lr_scheduler", None) is not None:
            raise _core.UnsupportedError(
                "DistributeTranspiler: in pserver mode the learning rate lives on the pservers, where a "
                "pe.optimizer.lr.%s (a Python object the trainer steps) cannot reach it; use fluid.layers' decay "
                "functions (exponential_decay, piecewise_decay, ...), which the pservers run"
                % type(program.lr_scheduler).__name__)
        sync = bool(sync_mode) and bool(self.config.sync_mode)
        plan = _ps.PServerPlan(program, startup_program, eps, trainer_id, trainers, sync, self.config)
        self._plan = plan
        self._trainer = _ps.trainer_program(plan)
        _ps.edit_trainer_startup(plan, startup_program)
        self._program, self._startup = program, startup_program

    def _need(self, what):
        if self._program is None:
            raise _core.InvalidArgumentError("DistributeTranspiler.%s: call transpile() first" % what)

    def _need_ps(self, what):
        self._need(what)
        if getattr(self, "_plan", None) is None:
            raise _core.InvalidArgumentError("DistributeTranspiler.%s: the program was transpiled in %s mode, not "
                                             "pserver mode" % (what, self.config.mode))

    def get_trainer_program(self, wait_port=True):
        """nccl2: the program (unchanged). pserver: the trainer program (a copy
        without the optimizer ops, with the send / recv ops; see ps_transpiler)."""
        self._need("get_trainer_program")
        if getattr(self, "_plan", None) is not None:
            self._trainer._pe_ps["wait_port"] = bool(wait_port)
            return self._trainer
        return self._program

    def get_pserver_program(self, endpoint):
        """The program the pserver at `endpoint` runs (block 0: listen_and_serv)."""
        self._need_ps("get_pserver_program")
        return _ps.pserver_program(self._plan, endpoint)

    def get_pserver_programs(self, endpoint):
        """(pserver program, its startup program) for `endpoint`."""
        prog = self.get_pserver_program(endpoint)
        return prog, _ps.pserver_startup(self._plan, endpoint, prog)

    def get_startup_program(self, endpoint=None, pserver_program=None, startup_program=None):
        """nccl2 mode, or no endpoint: the startup program given to transpile.
        pserver mode with an endpoint: that pserver's startup program (inits its
        params / optimizer state / LR at full shape, then cuts its blocks)."""
        self._need("get_startup_program")
        if endpoint is None:
            return self._startup
        self._need_ps("get_startup_program")
        return _ps.pserver_startup(self._plan, endpoint, pserver_program)


def memory_optimize(input_program, skip_opt_set=None, print_log=False, level=0, skip_grads=True):
    """Kept for old scripts: PE's executors always plan memory (buffer reuse by
    liveness, in place where an op allows it: see `pe plan`), so there is
    nothing to rewrite in the program. Checks its argument."""
    if not isinstance(input_program, Program):
        raise TypeError("memory_optimize: input_program must be a Program, got %s" % type(input_program).__name__)


def release_memory(input_program, skip_opt_set=None):
    """Kept for old scripts: PE's memory plan frees every temporary after its
    last use already."""
    if not isinstance(input_program, Program):
        raise TypeError("release_memory: input_program must be a Program, got %s" % type(input_program).__name__)
