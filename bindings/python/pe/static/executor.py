"""pe.static executors: Executor, ParallelExecutor, CompiledProgram, strategies, scopes, places.

Executor runs a program on one place (the startup program, an evaluation,
a single-device training step); ParallelExecutor and
CompiledProgram.with_data_parallel run it data-parallel on several places
(DESIGN.md §4: feeds split along axis 0, gradients summed across places,
fetches concatenated). All of them hand the program to the C engine as a
pe._core.Program (rebuilt only when the Python program changed) and return
fetches as numpy arrays that view the fetched tensors (no copy).
"""
import collections
import operator
import os
import warnings
import weakref

import numpy as np

from .. import _core
from ..framework import CPUPlace, CUDAPlace, Program, Variable, default_main_program

__all__ = ["Executor", "ParallelExecutor", "CompiledProgram", "ExecutionStrategy", "BuildStrategy", "global_scope",
           "scope_guard", "Scope", "cpu_places", "cuda_places"]

Scope = _core.Scope

_global_scope = _core.Scope()
_scope_stack = [_global_scope]


def global_scope():
    """The scope executors use when none is given (the one scope_guard installed)."""
    return _scope_stack[-1]


class scope_guard:
    """with scope_guard(scope): executors default to `scope` inside the block."""

    def __init__(self, scope):
        if not isinstance(scope, _core.Scope):
            raise TypeError("scope_guard: scope must be a pe.static.Scope, got %s" % type(scope).__name__)
        self.scope = scope

    def __enter__(self):
        _scope_stack.append(self.scope)
        return self.scope

    def __exit__(self, *exc):
        _scope_stack.pop()
        return False


def cpu_places(device_count=None):
    """CPU_NUM places (default 1) — the logical devices of a CPU ParallelExecutor."""
    n = _core.cpu_place_count() if device_count is None else int(device_count)
    if n < 1:
        raise _core.InvalidArgumentError("cpu_places: device_count must be >= 1, got %d" % n)
    return [CPUPlace(i) for i in range(n)]


def cuda_places(device_ids=None):
    """The GPUs in FLAGS_selected_gpus, else every visible GPU."""
    if device_ids is None:
        sel = os.environ.get("FLAGS_selected_gpus", "").strip()
        if sel:
            device_ids = [int(s) for s in sel.split(",") if s.strip()]
        else:
            device_ids = list(range(_core.cuda_device_count()))
    elif isinstance(device_ids, (int, np.integer)):
        device_ids = [int(device_ids)]
    if not device_ids:
        raise _core.UnsupportedError("cuda_places: no CUDA device is visible%s" % (
            "" if _core.with_cuda() else " (PE was built without CUDA)"))
    return [CUDAPlace(i) for i in device_ids]


# ---- feeds and fetches -------------------------------------------------------------

def _fetch_names(fetch_list):
    if fetch_list is None:
        return []
    if isinstance(fetch_list, (Variable, str)):
        fetch_list = [fetch_list]
    names = []
    for f in fetch_list:
        if isinstance(f, Variable):
            names.append(f.name)
        elif isinstance(f, str):
            names.append(f)
        else:
            raise TypeError("fetch_list entries must be Variables or var names, got %s" % type(f).__name__)
    return names


def _feed_value(program, name, value):
    if isinstance(value, (np.ndarray, _core.Tensor)):
        return value
    var = program.global_block()._find_var_recursive(name) if program is not None else None
    return np.asarray(value, dtype=var.dtype if var is not None else None)


def _feed_dict(program, feed, what="feed"):
    if feed is None:
        return {}
    if not isinstance(feed, dict):
        raise TypeError("%s must be a dict {name or Variable: numpy array}, got %s" % (what, type(feed).__name__))
    out = {}
    for k, v in feed.items():
        name = k.name if isinstance(k, Variable) else k
        if not isinstance(name, str):
            raise TypeError("%s keys must be var names or Variables, got %s" % (what, type(k).__name__))
        out[name] = _feed_value(program, name, v)
    return out


def _set_lr(program, scopes):
    """A learning-rate scheduler on program (an optimizer given a
    pe.optimizer.lr.LRScheduler): its current value into its var, as each
    scope (every place holds its own copy) sees it, before the run, as
    Paddle's executors do. scopes: an iterable, looked at only when there is
    a scheduler. Before the startup program has run the var is missing: the
    run reports it."""
    sched = getattr(program, "lr_scheduler", None)
    if sched is None:
        return
    value = np.array([sched()], dtype=np.float32)
    for scope in scopes:
        var = scope.find_var(program._lr_sched_var)
        if var is not None:
            t = var.get_tensor()
            t.set(value, t._place() if t._is_initialized() else None)


def _as_results(tensors, return_numpy):
    if not return_numpy:
        return tensors
    return [t.numpy(copy=False) for t in tensors]


# ---- Executor ------------------------------------------------------------------------

class Executor:
    """Runs programs on one place: Executor(place).run(program, feed, fetch_list, scope)."""

    _CACHE = 8  # prepared programs kept per executor

    def __init__(self, place=None):
        self.place = place if place is not None else CPUPlace()
        if not hasattr(self.place, "_pe_place"):
            raise TypeError("Executor(place): place must be pe.CPUPlace() or pe.CUDAPlace(i), got %r" % (place,))
        _core.Executor(self.place._pe_place)  # fails now (not at run) on an unusable place
        self._execs = collections.OrderedDict()  # id(program) -> (weakref, _core.Executor)
        self._closed = False

    def _core_executor(self, program):
        key = id(program)
        ent = self._execs.get(key)
        if ent is not None and ent[0]() is program:
            self._execs.move_to_end(key)
            return ent[1]
        ex = _core.Executor(self.place._pe_place)
        self._execs[key] = (weakref.ref(program), ex)
        while len(self._execs) > self._CACHE:
            self._execs.popitem(last=False)
        return ex

    def run(self, program=None, feed=None, fetch_list=None, feed_var_name="feed", fetch_var_name="fetch",
            scope=None, return_numpy=True, use_program_cache=False, return_merged=True, use_prune=False):
        """Runs block 0 of program (default: the default main program); returns
        the fetches as numpy arrays (return_numpy) or pe Tensors."""
        if self._closed:
            raise _core.InvalidArgumentError("Executor.run: the executor was closed")
        if program is None:
            program = default_main_program()
        if isinstance(program, CompiledProgram):
            return program._run(self, feed, fetch_list, scope, return_numpy, return_merged)
        if not isinstance(program, Program):
            raise TypeError("Executor.run: program must be a pe.static.Program or CompiledProgram, got %s"
                            % type(program).__name__)
        if isinstance(feed, (list, tuple)):
            # one dict per place; one place here (what a DataLoader with return_list=False yields)
            if len(feed) != 1:
                raise TypeError("Executor.run: a list feed of %d dicts (one per place) needs a data-parallel "
                                "CompiledProgram or ParallelExecutor; a plain program takes one" % len(feed))
            feed = feed[0]
        scope = global_scope() if scope is None else scope
        _set_lr(program, [scope])
        outs = self._core_executor(program).run(program._core_program(), scope, _feed_dict(program, feed),
                                                _fetch_names(fetch_list))
        return _as_results(outs, return_numpy)

    def close(self):
        """Frees the executor's caches; a parameter-server trainer also tells every
        pserver it talked to that it has left (their sync barriers stop waiting for it)."""
        if self._closed:
            return
        self._execs.clear()
        self._closed = True
        _core.ps_close()


# ---- strategies --------------------------------------------------------------------------

class _Strategy:
    """Every field does something or refuses: _fields reach the engine;
    _refused are Paddle's switches PE has nothing to map onto, kept so that
    Paddle scripts setting them to their default run, and any other value
    raises pe.UnsupportedError here, at the assignment, saying why (the
    words of `pe graph/plan --strategy`: both read the library's table,
    pe_strategy_refused_fields)."""
    _fields = {}
    _refused = {}  # name: (default, why)

    def __init__(self):
        for k, v in self._fields.items():
            object.__setattr__(self, k, v)
        for k, (v, _) in self._refused.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, k, v):
        if k in self._refused:
            default, why = self._refused[k]
            if isinstance(default, bool):
                if not isinstance(v, (bool, int, np.bool_, np.integer)):
                    raise TypeError("%s.%s must be a bool, got %r" % (type(self).__name__, k, v))
                v = bool(v)
            else:
                v = _as_int(type(self).__name__, k, v)
            if v != default:
                raise _core.UnsupportedError("%s.%s = %r is not supported: %s" % (type(self).__name__, k, v, why))
        elif k not in self._fields:
            raise AttributeError("%s has no field %r (fields: %s)" % (type(self).__name__, k,
                                                                       ", ".join(sorted(self._fields))))
        else:
            self._check(k, v)
        object.__setattr__(self, k, v)

    def _check(self, k, v):
        """Raises pe.InvalidArgumentError (a ValueError) for a value out of
        range, with the words of pe_parallel_executor_new (pe_pe_options_check)."""

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % (k, getattr(self, k)) for k in self._fields))


# The engine's strategy fields and their defaults (pe_pe_options_default, by the one field table
# pe_strategy_fields that the C API and `pe --strategy` use too): the classes below start from them.
_C_EXEC, _C_BUILD = _core.strategy_defaults()
# Paddle's switches PE refuses, with their one accepted value and why (pe_strategy_refused_fields)
_C_REFUSED = _core.strategy_refused()


def _typed(strategy, c_defaults):
    """The strategy's values of the engine's fields, each as the type of its
    C default (bool, int, float; an enum's int value by its name)."""
    d = {}
    for k, dflt in c_defaults.items():
        v = getattr(strategy, k)
        if isinstance(dflt, str):
            v = _ENUM_NAMES[k][int(v)]
        else:
            v = type(dflt)(v)
        d[k] = v
    return d


def _as_int(owner, k, v):
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError("%s.%s must be an int, got %r" % (owner, k, v)) from None


class ExecutionStrategy(_Strategy):
    """num_threads (0: places-1 on CPU, at least 1, the calling thread works too; none, the ops in
    sequence, on one CPU place whose kernels take several threads; at most 1024),
    num_iteration_per_drop_scope (100; 0: never),
    num_iteration_per_run (1; >= 1), check_nan_inf (False: FLAGS_check_nan_inf), timeline_path ("": off
    unless PE_TIMELINE is set; a directory or path prefix: a Chrome trace per rank, <prefix>.rank<N>.json,
    written when the executor is freed or by ParallelExecutor.write_timeline()), use_cuda (False; True:
    the executor's places must be CUDA places). Paddle's use_thread_barrier, allow_op_delay and
    use_experimental_executor: only their default (docs/guide.md §6, Refused switches)."""
    # the engine's fields at its defaults (pe_pe_options_default, by the one table pe_strategy_fields),
    # then the Python-side ones
    _fields = dict(_C_EXEC, timeline_path="", use_cuda=False)
    _refused = _C_REFUSED[0]

    def _check(self, k, v):
        if k == "use_cuda":
            if not isinstance(v, (bool, int, np.bool_, np.integer)):
                raise TypeError("ExecutionStrategy.use_cuda must be a bool, got %r" % (v,))
        elif k == "timeline_path":
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise TypeError("ExecutionStrategy.timeline_path must be a str or path, got %r" % (v,))
        elif k != "check_nan_inf":
            _core.check_strategy(exec_strategy={k: _as_int("ExecutionStrategy", k, v)})

    def _to_dict(self):
        d = _typed(self, _C_EXEC)
        d["timeline_path"] = os.fspath(self.timeline_path or "")
        return d


def _check_use_cuda(exec_strategy, places, api):
    """ExecutionStrategy.use_cuda = True asks for GPUs: refused (at the
    executor's construction) when the places are not CUDA places. False
    (Paddle's default) leaves the choice to the places."""
    if exec_strategy is not None and exec_strategy.use_cuda and not all(isinstance(p, CUDAPlace) for p in places):
        raise _core.UnsupportedError(
            "%s: ExecutionStrategy.use_cuda = True, but the places are %s: use CUDA places (use_cuda=True, "
            "pe.CUDAPlace) or set use_cuda = False" % (api, ", ".join(str(p) for p in places)))


class _ReduceStrategy:
    AllReduce = 0
    Reduce = 1


class _GradientScaleStrategy:
    """Paddle's values (CoeffNumDevice 0, One 1, Customized 2) plus PE's
    default BatchShare (each place scales by its share of the batch rows, so
    uneven splits give exactly the one-place update)."""
    CoeffNumDevice = 0
    One = 1
    Customized = 2
    BatchShare = 3


_SCALE_NAMES = {0: "coeff_num_device", 1: "one", 2: "customized", 3: "batch_share"}
_REDUCE_NAMES = {0: "all_reduce", 1: "reduce"}
_ENUM_NAMES = {"reduce_strategy": _REDUCE_NAMES, "gradient_scale_strategy": _SCALE_NAMES}


def _from_engine(c_defaults):
    """The engine's defaults with each enum's name as Paddle's value."""
    return {k: {n: i for i, n in _ENUM_NAMES[k].items()}[v] if isinstance(v, str) else v
            for k, v in c_defaults.items()}


class BuildStrategy(_Strategy):
    """The build passes (docs/guide.md §6): each field in _fields reaches the engine
    (use_hierarchical_allreduce: PE's collectives across trainers are always two-level);
    num_trainers, trainer_id, trainers_endpoints are read by the executors; the _refused
    switches take only their Paddle default."""
    ReduceStrategy = _ReduceStrategy
    GradientScaleStrategy = _GradientScaleStrategy
    # the engine's fields at its defaults (pe_pe_options_default, by the one table pe_strategy_fields;
    # enums from their names to Paddle's values), then the Python-side ones
    _fields = dict(_from_engine(_C_BUILD), debug_graphviz_path="", use_hierarchical_allreduce=False)
    _refused = _C_REFUSED[1]

    # read by CompiledProgram.with_data_parallel and ParallelExecutor (the trainers of the collective
    # mode: pe_pe_options.num_trainers / trainer_id; the endpoints are checked), not sent as strategy fields
    _trainer_fields = {"num_trainers": 1, "trainer_id": 0, "trainers_endpoints": []}

    def __init__(self):
        super().__init__()
        for k, v in self._trainer_fields.items():
            object.__setattr__(self, k, list(v) if isinstance(v, list) else v)

    def __setattr__(self, k, v):
        if k in self._trainer_fields:
            if k == "trainers_endpoints":
                v = list(v)
            elif _as_int("BuildStrategy", k, v) < (1 if k == "num_trainers" else 0):
                raise _core.InvalidArgumentError("BuildStrategy.%s = %r is out of range" % (k, v))
            object.__setattr__(self, k, v)
        else:
            super().__setattr__(k, v)

    _enums = {"reduce_strategy": (_REDUCE_NAMES, "ReduceStrategy"),
              "gradient_scale_strategy": (_SCALE_NAMES, "GradientScaleStrategy")}

    def _check(self, k, v):
        if k in self._enums:
            names, cls = self._enums[k]
            if _as_int("BuildStrategy", k, v) not in names:
                raise _core.InvalidArgumentError("BuildStrategy.%s = %r is out of range: allowed %s" % (
                    k, v, ", ".join("%d (%s.%s)" % (i, cls, n) for i, n in sorted(
                        (i, n) for n, i in vars(getattr(self, cls)).items() if not n.startswith("_")))))
        elif k in ("fuse_grad_size_in_MB", "fuse_first_grad_size_in_MB"):
            try:
                size = float(v)
            except (TypeError, ValueError):
                raise TypeError("BuildStrategy.%s must be a number, got %r" % (k, v)) from None
            _core.check_strategy(build_strategy={k: size})

    def _to_dict(self):
        # use_hierarchical_allreduce is not sent: collectives across trainers are always two-level
        # (runtime/comm/hier.c), whichever value
        d = _typed(self, _C_BUILD)
        d["debug_graphviz_path"] = str(self.debug_graphviz_path or "")
        return d


# ---- data parallel ---------------------------------------------------------------------------

def _loss_name(loss_name):
    return loss_name.name if isinstance(loss_name, Variable) else loss_name


def _run_parallel(pe, program, feed, fetch_list, return_numpy, return_merged):
    _set_lr(program, (pe.place_scope(i) for i in range(pe.device_count)))
    if isinstance(feed, (list, tuple)):
        feed = [_feed_dict(program, f, "feed[%d]" % i) for i, f in enumerate(feed)]
    else:
        feed = _feed_dict(program, feed)
    outs = pe.run(feed, _fetch_names(fetch_list), bool(return_merged))
    if return_merged:
        return _as_results(outs, return_numpy)
    return [_as_results(per_place, return_numpy) for per_place in outs]


def _trainers(program, num_trainers, trainer_id, api, endpoints=()):
    """num_trainers, trainer_id as ints, checked against each other, against
    BuildStrategy.trainers_endpoints (when given: one per trainer) and against
    what fluid.DistributeTranspiler (nccl2 mode) recorded on the program."""
    num_trainers, trainer_id = _as_int(api, "num_trainers", num_trainers), _as_int(api, "trainer_id", trainer_id)
    if not 0 <= trainer_id < num_trainers:
        raise _core.InvalidArgumentError("%s: trainer_id=%d is not one of the %d trainers (0 .. %d)"
                                         % (api, trainer_id, num_trainers, num_trainers - 1))
    endpoints = list(endpoints or ())
    if endpoints and len(endpoints) != num_trainers:
        raise _core.InvalidArgumentError(
            "%s: BuildStrategy.trainers_endpoints lists %d endpoints (%s) for num_trainers=%d: give one per trainer "
            "or none" % (api, len(endpoints), ",".join(map(str, endpoints)), num_trainers))
    info = getattr(program, "_pe_nccl2", None)
    if info is not None and endpoints and [str(e) for e in endpoints] != list(info["endpoints"]):
        raise _core.InvalidArgumentError(
            "%s: BuildStrategy.trainers_endpoints %s differ from the endpoints %s the program was transpiled "
            "(nccl2 mode) for" % (api, ",".join(map(str, endpoints)), ",".join(info["endpoints"])))
    if info is not None and (num_trainers != len(info["endpoints"]) or trainer_id != info["trainer_id"]):
        raise _core.InvalidArgumentError(
            "%s: num_trainers=%d, trainer_id=%d, but the program was transpiled (nccl2 mode) for trainer %d of the "
            "%d trainers %s" % (api, num_trainers, trainer_id, info["trainer_id"], len(info["endpoints"]),
                                ",".join(info["endpoints"])))
    return num_trainers, trainer_id


class ParallelExecutor:
    """Data-parallel execution of main_program on every CPU place (CPU_NUM) or GPU.

    Parameters are broadcast from place 0 at construction; run() splits a
    dict feed along axis 0 across the places (or takes a list with one dict
    per place), sums gradients across places and concatenates the fetches
    along axis 0 (return_merged=False: one result per place)."""

    def __init__(self, use_cuda, loss_name=None, main_program=None, share_vars_from=None, exec_strategy=None,
                 build_strategy=None, num_trainers=1, trainer_id=0, scope=None):
        self._places = cuda_places() if use_cuda else cpu_places()
        self._program = main_program if main_program is not None else default_main_program()
        if isinstance(self._program, CompiledProgram):
            self._program = self._program._program
        self._scope = scope if scope is not None else global_scope()
        if share_vars_from is not None and not isinstance(share_vars_from, ParallelExecutor):
            raise TypeError("share_vars_from must be a ParallelExecutor, got %s" % type(share_vars_from).__name__)
        bs = build_strategy or BuildStrategy()
        # the trainers: the arguments, or BuildStrategy.num_trainers / trainer_id (what
        # CompiledProgram reads) where the arguments keep their defaults; both set and
        # different is an error
        for k, arg, dflt in (("num_trainers", num_trainers, 1), ("trainer_id", trainer_id, 0)):
            field = getattr(bs, k)
            if _as_int("ParallelExecutor", k, arg) != dflt and field != dflt and field != arg:
                raise _core.InvalidArgumentError("ParallelExecutor: %s=%r, but BuildStrategy.%s = %r: set one of them"
                                                 % (k, arg, k, field))
        num_trainers = num_trainers if num_trainers != 1 else bs.num_trainers
        trainer_id = trainer_id if trainer_id != 0 else bs.trainer_id
        num_trainers, trainer_id = _trainers(self._program, num_trainers, trainer_id, "ParallelExecutor",
                                             bs.trainers_endpoints)
        _check_use_cuda(exec_strategy, self._places, "ParallelExecutor")
        self._pe = _core.ParallelExecutor(
            [p._pe_place for p in self._places], self._program._core_program(), self._scope,
            loss_name=_loss_name(loss_name), share_vars_from=share_vars_from._pe if share_vars_from else None,
            exec_strategy=(exec_strategy or ExecutionStrategy())._to_dict(),
            build_strategy=bs._to_dict(), num_trainers=num_trainers, trainer_id=trainer_id)

    def run(self, fetch_list, feed=None, feed_dict=None, return_numpy=True, return_merged=True):
        if feed is None and feed_dict is not None:
            warnings.warn("ParallelExecutor.run: feed_dict is deprecated, use feed", DeprecationWarning, stacklevel=2)
            feed = feed_dict
        return _run_parallel(self._pe, self._program, feed, fetch_list, return_numpy, return_merged)

    @property
    def device_count(self):
        return self._pe.device_count

    def drop_local_exe_scopes(self):
        """Frees the temporaries of every place now (they are also dropped every
        ExecutionStrategy.num_iteration_per_drop_scope runs)."""
        self._pe.drop_local_exe_scopes()

    def trainers_sum(self, values):
        """The sum of `values` (a number or an array of numbers) over the trainers of an
        executor built with num_trainers > 1, as float64 of the same shape, summed in
        trainer order so every trainer gets the same bits (with one trainer: `values`
        as float64). A collective, for metrics such as the loss of the global batch:
        every trainer calls it between runs, in the same order, with the same shape."""
        a = np.asarray(values, dtype=np.float64)
        return np.array(self._pe.trainers_sum(a.ravel().tolist()), dtype=np.float64).reshape(a.shape)

    def _need_create_local_exe_scopes(self):
        return self._pe.local_exe_scopes_bytes() == 0

    @property
    def timeline_path(self):
        """The file the timeline goes to (ExecutionStrategy.timeline_path or PE_TIMELINE), or None when off."""
        return self._pe.timeline_path

    def write_timeline(self, path=None):
        """Writes the timeline recorded so far (a Chrome trace-event JSON) to path, default
        timeline_path; it is also written when the executor is freed."""
        self._pe.write_timeline(None if path is None else os.fspath(path))


class CompiledProgram:
    """fluid-style: CompiledProgram(prog).with_data_parallel(loss_name=...) and
    Executor.run(compiled, feed, fetch_list)."""

    def __init__(self, program_or_graph, build_strategy=None):
        if not isinstance(program_or_graph, Program):
            raise TypeError("CompiledProgram: expected a Program, got %s" % type(program_or_graph).__name__)
        self._program = program_or_graph
        self._build_strategy = build_strategy
        self._exec_strategy = None
        self._loss_name = None
        self._share_vars_from = None
        self._places = None
        self._is_data_parallel = False
        self._pe = None
        self._pe_key = None

    def with_data_parallel(self, loss_name=None, build_strategy=None, exec_strategy=None, share_vars_from=None,
                           places=None):
        self._is_data_parallel = True
        self._loss_name = _loss_name(loss_name)
        if build_strategy is not None:
            self._build_strategy = build_strategy
        self._exec_strategy = exec_strategy
        if share_vars_from is not None and not isinstance(share_vars_from, CompiledProgram):
            raise TypeError("share_vars_from must be a CompiledProgram, got %s" % type(share_vars_from).__name__)
        self._share_vars_from = share_vars_from
        self._places = list(places) if places is not None else None
        return self

    def _compile(self, executor, scope):
        key = (self._program._version, id(scope))
        if self._pe is not None and self._pe_key == key:
            return self._pe
        if self._places is not None:
            places = self._places
        elif isinstance(executor.place, CUDAPlace):
            places = cuda_places()
        else:
            places = cpu_places()
        share = None
        if self._share_vars_from is not None:
            share = self._share_vars_from._pe
            if share is None:
                raise _core.InvalidArgumentError(
                    "CompiledProgram: the share_vars_from program has not been run yet; run it first")
        bs = self._build_strategy or BuildStrategy()
        num_trainers, trainer_id = _trainers(self._program, bs.num_trainers, bs.trainer_id, "CompiledProgram",
                                             bs.trainers_endpoints)
        _check_use_cuda(self._exec_strategy, places, "CompiledProgram")
        self._pe = _core.ParallelExecutor(
            [p._pe_place for p in places], self._program._core_program(), scope, loss_name=self._loss_name,
            share_vars_from=share, exec_strategy=(self._exec_strategy or ExecutionStrategy())._to_dict(),
            build_strategy=bs._to_dict(), num_trainers=num_trainers, trainer_id=trainer_id)
        self._pe_key = key
        return self._pe

    def _run(self, executor, feed, fetch_list, scope, return_numpy, return_merged):
        scope = global_scope() if scope is None else scope
        if not self._is_data_parallel:
            return executor.run(self._program, feed=feed, fetch_list=fetch_list, scope=scope,
                                return_numpy=return_numpy)
        pe = self._compile(executor, scope)
        return _run_parallel(pe, self._program, feed, fetch_list, return_numpy, return_merged)

    @property
    def device_count(self):
        return self._pe.device_count if self._pe is not None else None
