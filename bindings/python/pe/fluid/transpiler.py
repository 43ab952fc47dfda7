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

Parameter-server mode (pservers=...) is not implemented: transpile() says so.
"""
from .. import _core
from ..framework import Program, default_main_program, default_startup_program

__all__ = ["DistributeTranspiler", "DistributeTranspilerConfig", "RoundRobin", "HashName", "memory_optimize",
           "release_memory"]


class PSDispatcher:
    """Assigns variables to parameter servers (for the pserver mode's split_method)."""

    def __init__(self, pserver_endpoints):
        self._eps = list(pserver_endpoints)
        if not self._eps:
            raise _core.InvalidArgumentError("%s: the pserver endpoint list is empty" % type(self).__name__)
        self._step = 0

    @property
    def eps(self):
        return self._eps

    def reset(self):
        self._step = 0


class RoundRobin(PSDispatcher):
    """Variable i goes to endpoint i mod len(endpoints), in order of the calls."""

    def dispatch(self, varlist):
        out = []
        for _ in varlist:
            out.append(self._eps[self._step % len(self._eps)])
            self._step += 1
        return out


class HashName(PSDispatcher):
    """A variable goes to the endpoint its name hashes to (a stable hash: the
    same on every process, unlike Python's salted hash())."""

    def dispatch(self, varlist):
        out = []
        for v in varlist:
            name = v if isinstance(v, str) else v.name
            h = 0
            for ch in name.encode():
                h = (h * 131 + ch) & 0xFFFFFFFF
            out.append(self._eps[h % len(self._eps)])
        return out


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


def _endpoints(trainers, what):
    if not isinstance(trainers, str):
        raise _core.InvalidArgumentError(
            "DistributeTranspiler.transpile: in %s mode trainers must be the comma-separated trainer endpoints "
            "(\"ip:port,ip:port,...\"), got %r" % (what, trainers))
    eps = [e.strip() for e in trainers.split(",") if e.strip()]
    if not eps:
        raise _core.InvalidArgumentError("DistributeTranspiler.transpile: the trainer endpoint list is empty")
    for e in eps:
        host, sep, port = e.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _core.InvalidArgumentError("DistributeTranspiler.transpile: trainer endpoint %r is not ip:port" % e)
    if len(set(eps)) != len(eps):
        raise _core.InvalidArgumentError("DistributeTranspiler.transpile: trainer endpoints repeat: %s" % trainers)
    return eps


class DistributeTranspiler:
    def __init__(self, config=None):
        self.config = config if config is not None else DistributeTranspilerConfig()
        if not isinstance(self.config, DistributeTranspilerConfig):
            raise TypeError("DistributeTranspiler: config must be a DistributeTranspilerConfig, got %s"
                            % type(self.config).__name__)
        self._program = None
        self._startup = None

    def transpile(self, trainer_id, program=None, pservers="127.0.0.1:6174", trainers=1, sync_mode=True,
                  startup_program=None, current_endpoint="127.0.0.1:6174"):
        program = program if program is not None else default_main_program()
        startup_program = startup_program if startup_program is not None else default_startup_program()
        for p, what in ((program, "program"), (startup_program, "startup_program")):
            if not isinstance(p, Program):
                raise TypeError("DistributeTranspiler.transpile: %s must be a Program, got %s"
                                % (what, type(p).__name__))
        mode = self.config.mode
        if mode not in ("nccl2", "collective"):
            raise _core.UnsupportedError(
                "DistributeTranspiler: mode %r (parameter servers at %s) is not implemented in PE; mode \"nccl2\" "
                "(collective data parallelism over MPI / NCCL) is" % (mode, pservers))
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
        self._program, self._startup = program, startup_program

    def _need(self, what):
        if self._program is None:
            raise _core.InvalidArgumentError("DistributeTranspiler.%s: call transpile() first" % what)

    def get_trainer_program(self, wait_port=True):
        self._need("get_trainer_program")
        return self._program

    def get_startup_program(self, endpoint=None, pserver_program=None, startup_program=None):
        self._need("get_startup_program")
        if endpoint is not None:
            raise _core.UnsupportedError("DistributeTranspiler.get_startup_program(endpoint): parameter-server "
                                         "mode is not implemented in PE")
        return self._startup

    def _pserver(self, *args, **kwargs):
        raise _core.UnsupportedError("DistributeTranspiler: parameter-server mode (get_pserver_program) is not "
                                     "implemented in PE; use config.mode = \"nccl2\"")

    get_pserver_program = get_pserver_programs = _pserver


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
