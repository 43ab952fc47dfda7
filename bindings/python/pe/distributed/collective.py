"""pe.distributed.collective — init_parallel_env and the collectives on numpy arrays.

    import numpy as np
    import pe.distributed as dist
    dist.init_parallel_env()                 # under launch, spawn or mpirun
    x = np.full([3], dist.get_rank() + 1.0, dtype="float32")
    dist.all_reduce(x)                       # x = the sum over ranks, in place
    dist.all_reduce(x, op=dist.ReduceOp.MAX)

What: Paddle's collective functions over the process world (one rank per
process, MPI_COMM_WORLD; pe/world.h). Arrays are numpy.ndarrays of
float32, float64, int32 or int64, C-contiguous, changed in place. With a
pe.static Variable instead, each function appends the static-graph
collective op (pe.static.collective.append_collective) and returns its
result.

How: every call first exchanges a fixed-size header (an all-gather of
int64s: which function, dtype, shape, root, and whether the rank's own
arguments were fine), so every rank sees every rank's call and takes the
same decision: a rank with a bad argument, or ranks passing different
shapes, dtypes, roots or functions, make the call fail on every rank with
the same message (pe.InvalidArgumentError), never a hang. Then the data:
sums run on the C backend (in rank order, bitwise equal on every rank);
MAX, MIN and PROD all-gather the ranks' arrays and reduce them with numpy
(every rank computes the same result from the same data).

Why: Paddle's API over the one collective engine PE has across processes
(Open MPI, DESIGN.md §4b), with the header turning a mismatch into an error.
"""
import atexit
import os
import sys

import numpy as np

from .. import _core
from .env import ParallelEnv

__all__ = ["ReduceOp", "Group", "init_parallel_env", "is_initialized", "barrier", "all_reduce", "broadcast",
           "all_gather", "reduce", "scatter"]


class ReduceOp:
    """How all_reduce and reduce combine the ranks' arrays."""
    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3
    AVG = 4


_OP_NAMES = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min", ReduceOp.PROD: "prod",
             ReduceOp.AVG: "avg"}
_NP_REDUCE = {ReduceOp.MAX: np.max, ReduceOp.MIN: np.min, ReduceOp.PROD: np.prod}
_DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.int64)]
_FUNCS = ["", "all_reduce", "broadcast", "all_gather", "reduce", "scatter", "barrier"]
_MAX_DIMS = 8
# header: func, op, dtype (index in _DTYPES, -1 none), root, ndim, error flag, dims[8]
_HDR = 6 + _MAX_DIMS
_MSG_BYTES = 512


class Group(ParallelEnv):
    """The default group: every process (Paddle's Group of init_parallel_env)."""

    id = 0
    name = "_default_pg"

    @property
    def ranks(self):
        return list(range(self.world_size))

    @property
    def process_group(self):
        return self

    def is_member(self):
        return True

    def get_group_rank(self, rank):
        return rank if 0 <= rank < self.world_size else -1


_world = None  # (rank, size) once the process world is initialized


def is_initialized():
    """Whether init_parallel_env() has set up the process world (more than one process)."""
    return _world is not None


def _under_mpi():
    return bool(os.environ.get("OMPI_COMM_WORLD_SIZE", "").strip())


def _shutdown():
    global _world
    if _world is not None:
        _world = None
        _core.world_shutdown()


def _excepthook(tp, value, tb):
    """An uncaught exception on one rank ends the job: print it, exit non-zero
    without MPI_Finalize (which would wait for the other ranks), so mpirun ends
    every other rank."""
    try:
        _prev_excepthook(tp, value, tb)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(1)


_prev_excepthook = sys.excepthook


def init_parallel_env():
    """Initializes the process world when this process is one of several.

    Launched with more than one process (PADDLE_TRAINERS_NUM > 1, as launch
    and spawn set it, or a plain mpirun: OMPI_COMM_WORLD_SIZE), it starts
    PE's MPI communicator and checks, on every rank together, that each
    rank's environment agrees with MPI's rank and size (the same error on
    every rank otherwise); a single process: nothing to do. Returns the
    Group of every process (a ParallelEnv with ranks). After it, an
    uncaught exception on any rank ends every rank (the others would wait
    for it).
    """
    global _world, _prev_excepthook
    env = ParallelEnv()
    group = Group()
    if _world is not None:
        return group
    if env.world_size < 2 and not (_under_mpi() and int(os.environ["OMPI_COMM_WORLD_SIZE"]) > 1):
        return group
    if not _core.world_available():
        raise _core.UnsupportedError("init_parallel_env: %d processes need PE's MPI backend, and this build of PE "
                                     "has no MPI (libopenmpi-dev: scripts/setup.sh, -DPE_WITH_MPI=ON)" %
                                     env.world_size)
    if not _under_mpi():
        raise _core.InvalidArgumentError(
            "init_parallel_env: PADDLE_TRAINERS_NUM=%d but this process was not started by mpirun: start the "
            "ranks with `python -m pe.distributed.launch`, pe.distributed.spawn, or mpirun" % env.world_size)
    rank, size = _core.world_init()
    # Every rank's view, on every rank: one that disagrees with MPI is the
    # same error everywhere (no rank goes on to wait for the others).
    views = np.empty((size, 2), dtype=np.int64)
    _core.world_allgather(np.array([env.rank, env.world_size], dtype=np.int64), views.reshape(-1))
    bad = [r for r in range(size) if tuple(views[r]) != (r, size)]
    if bad:
        _core.world_shutdown()
        r = bad[0]
        raise _core.InvalidArgumentError(
            "init_parallel_env: on MPI rank %d of %d the environment says rank %d of %d (PADDLE_TRAINER_ID, "
            "PADDLE_TRAINERS_NUM): start every rank with the same launcher (launch or spawn set both), or unset "
            "the PADDLE_* variables under a plain mpirun" % (r, size, views[r][0], views[r][1]))
    _world = (rank, size)
    atexit.register(_shutdown)
    if sys.excepthook is not _excepthook:
        _prev_excepthook = sys.excepthook
        sys.excepthook = _excepthook
    return group


def _world_or_none(func):
    """(rank, size) of the process world, initializing it when the
    environment says there are several processes; None for one process."""
    if _world is None:
        init_parallel_env()
    return _world


def _is_static(t):
    from ..framework import Variable
    return isinstance(t, Variable)


def _append(op_type, x, **attrs):
    from ..static import collective  # written with the static-graph collective ops
    return collective.append_collective(op_type, x, **attrs)


def _local_problem(func, t, writeable=True):
    """Why t cannot be this call's array (None when it can)."""
    if not isinstance(t, np.ndarray):
        return "expected a numpy.ndarray (or a pe.static Variable), got %s" % type(t).__name__
    if t.dtype not in _DTYPES:
        return "dtype %s is not supported (float32, float64, int32 or int64)" % t.dtype
    if t.ndim > _MAX_DIMS:
        return "%d dims (at most %d)" % (t.ndim, _MAX_DIMS)
    if not (t.flags.c_contiguous and t.flags.aligned and t.dtype.isnative):
        return "the array is not C-contiguous, aligned and native-endian (numpy.ascontiguousarray makes one)"
    if writeable and not t.flags.writeable:
        return "the array is read-only"
    return None


# The headers are other processes' values: every lookup below is range-checked,
# so any int64s give the error message, never an IndexError or a wrapped index.
def _func_name(code):
    return _FUNCS[code] if 0 < code < len(_FUNCS) else "collective #%d" % code


def _desc(h):
    if h[2] == -1:
        return "no array"
    if not 0 <= h[2] < len(_DTYPES):
        return "dtype #%d" % h[2]
    ndim = min(max(int(h[4]), 0), _MAX_DIMS)
    return "%s %s" % (_DTYPES[h[2]].name, list(int(d) for d in h[6:6 + ndim]))


def _peer_text(raw):
    """A peer's error message: up to its NUL, decoded, control characters
    replaced, so it cannot write escape sequences into this rank's error."""
    text = bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")
    return "".join("?" if ord(c) < 0x20 or ord(c) == 0x7f else c for c in text)


def _headers_differ(func, allh):
    """Why the ranks' headers (allh: [size, _HDR] int64, as allgathered)
    describe different calls, or None when they agree. Pure: the fuzz-style
    test of tests/python/test_distributed_collectives.py runs it on any values."""
    for r in range(1, len(allh)):
        a, b = allh[0], allh[r]
        if a[0] != b[0]:
            return "rank %d called %s while rank 0 called %s: every rank must call the same collectives in " \
                   "the same order" % (r, _func_name(int(b[0])), _func_name(int(a[0])))
        if a[1] != b[1]:
            return "rank %d passed op %s, rank 0 op %s" % (r, _OP_NAMES.get(int(b[1]), int(b[1])),
                                                          _OP_NAMES.get(int(a[1]), int(a[1])))
        if a[3] != b[3]:
            return "rank %d passed %s %d, rank 0 %d" % (r, "dst" if func == "reduce" else "src", b[3], a[3])
        if a[2] != b[2] or a[4] != b[4] or (a[6:] != b[6:]).any():
            return "rank %d passed %s, rank 0 %s: every rank must pass the same shape and dtype" % (
                r, _desc(b), _desc(a))
    return None


def _agree(func, op, t, root, problem, size):
    """Exchanges every rank's header; raises the same error on every rank
    when a rank's arguments are wrong or the ranks' calls differ."""
    h = np.zeros(_HDR, dtype=np.int64)
    h[0], h[1], h[3] = _FUNCS.index(func), op, root
    h[2] = -1
    if problem is None and t is not None:
        h[2] = _DTYPES.index(t.dtype)
        h[4] = t.ndim
        h[6:6 + t.ndim] = t.shape
    h[5] = problem is not None
    allh = np.empty((size, _HDR), dtype=np.int64)
    _core.world_allgather(h, allh)
    bad = [r for r in range(size) if allh[r, 5]]
    if bad:
        msg = np.zeros(_MSG_BYTES, dtype=np.uint8)
        text = (problem or "").encode("utf-8", "replace")[:_MSG_BYTES - 1]
        msg[:len(text)] = np.frombuffer(text, dtype=np.uint8)
        allm = np.empty((size, _MSG_BYTES), dtype=np.uint8)
        _core.world_allgather(msg.view(np.int64), allm.view(np.int64).reshape(-1))
        r = bad[0]
        raise _core.InvalidArgumentError("%s: rank %d's argument: %s" % (func, r, _peer_text(allm[r])))
    why = _headers_differ(func, allh)
    if why is not None:
        raise _core.InvalidArgumentError("%s: the ranks' calls differ: %s" % (func, why))


def _root_problem(root, size, what):
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        return "%s must be an int rank, got %s" % (what, type(root).__name__)
    if not 0 <= int(root) < size:
        return "%s=%d is not a rank of the %d processes" % (what, int(root), size)
    return None


def _begin(func, tensor, op=ReduceOp.SUM, root=0, root_name=None, writeable=True, problem=None):
    """Checks this rank's arguments and agrees with the other ranks: (rank,
    size) of the process world, or None for one process. Every problem —
    this rank's or another's — raises the same error on every rank."""
    w = _world_or_none(func)
    size = w[1] if w else 1
    if tensor is not None:
        problem = _local_problem(func, tensor, writeable) or problem
    if problem is None and op not in _OP_NAMES:
        problem = "op must be a ReduceOp (SUM, MAX, MIN, PROD, AVG), got %r" % (op,)
    if problem is None and op == ReduceOp.AVG and tensor.dtype.kind != "f":
        problem = "ReduceOp.AVG needs a float array, got %s" % tensor.dtype
    if problem is None and root_name:
        problem = _root_problem(root, size, root_name)
    if w is None:
        if problem:
            raise _core.InvalidArgumentError("%s: %s" % (func, problem))
        return None
    code = int(op) if op in _OP_NAMES else -1
    r = int(root) if problem is None and root_name else 0
    _agree(func, code, tensor, r, problem, size)
    return w


def _combine(op, t, size):
    """MAX / MIN / PROD / AVG of every rank's t, the same on every rank."""
    if op == ReduceOp.AVG:
        s = t.copy()
        _core.world_allreduce(s)
        return s / t.dtype.type(size)
    allt = np.empty((size,) + t.shape, dtype=t.dtype)
    _core.world_allgather(t, allt.reshape(-1))
    return _NP_REDUCE[op](allt, axis=0).astype(t.dtype, copy=False)


def _static_op_name(func, op):
    if op not in _OP_NAMES:
        raise _core.InvalidArgumentError("%s: op must be a ReduceOp (SUM, MAX, MIN, PROD, AVG), got %r" % (func, op))
    return _OP_NAMES[op]


def all_reduce(tensor, op=ReduceOp.SUM, group=None, sync_op=True):
    """Every rank's tensor becomes the reduction (op) of all ranks' tensors, in place."""
    if _is_static(tensor):
        return _append("c_allreduce_" + _static_op_name("all_reduce", op), tensor)
    w = _begin("all_reduce", tensor, op)
    if w is None:
        return None
    if op == ReduceOp.SUM:
        _core.world_allreduce(tensor)
    else:
        tensor[...] = _combine(op, tensor, w[1])
    return None


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, sync_op=True):
    """Rank dst's tensor becomes the reduction (op) of all ranks' tensors; the others' stay."""
    if _is_static(tensor):
        return _append("c_reduce_" + _static_op_name("reduce", op), tensor, root_id=int(dst))
    w = _begin("reduce", tensor, op, dst, "dst")
    if w is None:
        return None
    if op == ReduceOp.SUM:
        _core.world_reduce(tensor, int(dst))
    else:
        out = _combine(op, tensor, w[1])
        if w[0] == dst:
            tensor[...] = out
    return None


def broadcast(tensor, src, group=None, sync_op=True):
    """Every rank's tensor becomes rank src's, in place."""
    if _is_static(tensor):
        return _append("c_broadcast", tensor, root=int(src))
    if _begin("broadcast", tensor, root=src, root_name="src") is not None:
        _core.world_broadcast(tensor, int(src))
    return None


def all_gather(tensor_list, tensor, group=None, sync_op=True):
    """tensor_list (a list, emptied first) gets every rank's tensor, in rank order (copies)."""
    if not isinstance(tensor_list, list):
        problem = "tensor_list must be a list (it receives one array per rank), got %s" % type(tensor_list).__name__
    else:
        problem = None
    if _is_static(tensor):
        if problem:
            raise TypeError("all_gather: " + problem)
        from ..tensor import split
        size = ParallelEnv().world_size
        out = _append("c_allgather", tensor, nranks=size)
        del tensor_list[:]
        tensor_list.extend(split(out, size, 0) if size > 1 else [out])
        return None
    w = _begin("all_gather", tensor, writeable=False, problem=problem)
    del tensor_list[:]
    if w is None:
        tensor_list.append(tensor.copy())
        return None
    out = np.empty((w[1],) + tensor.shape, dtype=tensor.dtype)
    _core.world_allgather(tensor, out.reshape(-1))
    tensor_list.extend(out[r].copy() for r in range(w[1]))
    return None


def _scatter_problem(tensor, tensor_list, size):
    """Why the src rank's tensor_list cannot be scattered (None when it can)."""
    if not isinstance(tensor_list, (list, tuple)) or len(tensor_list) != size:
        got = ("None" if tensor_list is None else "%d items" % len(tensor_list)
               if isinstance(tensor_list, (list, tuple)) else type(tensor_list).__name__)
        return "tensor_list of the src rank must be a list of %d arrays (one per rank), got %s" % (size, got)
    if not isinstance(tensor, np.ndarray):
        return None
    for i, t in enumerate(tensor_list):
        if not isinstance(t, np.ndarray) or t.shape != tensor.shape or t.dtype != tensor.dtype:
            what = "%s %s" % (t.dtype, list(t.shape)) if isinstance(t, np.ndarray) else type(t).__name__
            return "tensor_list[%d] is %s, the tensor is %s %s: each must have its shape and dtype" % (
                i, what, tensor.dtype, list(tensor.shape))
    return None


def scatter(tensor, tensor_list=None, src=0, group=None, sync_op=True):
    """Rank r's tensor becomes tensor_list[r] of rank src (tensor_list: one
    array per rank, each of tensor's shape and dtype; only src's is read)."""
    if _is_static(tensor):
        return _append("c_scatter", tensor, root=int(src), nranks=ParallelEnv().world_size)
    env = ParallelEnv()
    problem = _scatter_problem(tensor, tensor_list, env.world_size) if env.rank == src else None
    w = _begin("scatter", tensor, root=src, root_name="src", problem=problem)
    if w is None:
        tensor[...] = tensor_list[0]
        return None
    rank, size = w
    buf = np.empty((size,) + tensor.shape, dtype=tensor.dtype)
    if rank == src:
        for i, t in enumerate(tensor_list):
            buf[i] = t
    _core.world_broadcast(buf.reshape(-1), int(src))
    tensor[...] = buf[rank]
    return None


def barrier(group=None):
    """Returns when every rank has called it."""
    if _begin("barrier", None) is not None:
        _core.world_barrier()
    return None
