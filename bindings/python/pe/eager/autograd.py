"""pe.eager.autograd — eager tensors, one-op runs and the tape.

Every eager op is one call of the C entry point pe_eager_run (pe/eager.h,
through _core.eager_run): the registry's infer, allocation and the same CPU
kernel the static executors run — no program is built per call. The hot
ones (the operators + - * / @, add/subtract/multiply/divide/matmul, the
backward ops, sums and seeds) are prepared ops (_core.EagerOp,
pe_eager_prepare: slot layout and attrs resolved once) called from C, and
Tensor's fields live in its C base (_core.EagerTensor); anything off that
path comes back to run_op (core_eager_tensor.c says when). When an
input needs a gradient (stop_gradient False, outside pe.no_grad()), the op
is recorded on its outputs as a node holding the backward ops that the op's
grad maker in ops/ops.def makes (_core.eager_grad_ops, cached per op type,
slot layout, dtypes and attrs, each prepared: _GradEntry) and the tensors
those ops read.

backward() walks the nodes reachable from a tensor in reverse creation
order (a reverse topological order: an op's inputs exist before it runs),
runs each node's backward ops with pe_eager_run, sums the contributions to
a tensor with the `sum` op, and accumulates the result into each leaf's
.grad (leaves with stop_gradient False only) as soon as the last node that
reads the leaf has run: from then on the leaf's .grad is final for this
pass, and the hooks of add_grad_ready_hook are told (pe.DataParallel
starts a gradient bucket's all-reduce there, while backward goes on).

In-place updates: an optimizer step writes each parameter (and its
accumulators) in place, as the static optimizer ops do. Every Tensor has a
version (_version), bumped by such a write (bump_version); a node records
the versions of the leaves whose values its backward ops read (not those
whose dims only they read: ops.def's "-In" slots), and
backward() refuses, before running anything, a graph holding a node whose
saved leaf changed since (PyTorch's rule: the gradient would silently use
the new value).

pe.jit hooks: while a trace is active (_set_tracer), run_op reports every
op to it and Tensor.numpy / item / __array__ ask it whether the value may
be read (a traced tensor's may not: the program could not follow the
Python branch); a node with .fn set (a to_static call) runs fn instead of
per-op backward ops.
"""
import itertools
import threading

import numpy as np

from .. import _core
from .. import framework as _fw

_FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")

class _State(threading.local):
    """Per-thread switches. The defaults are class attributes, so reading one
    that this thread never set costs an attribute lookup, not the
    AttributeError that getattr(local, name, default) raises and catches
    inside every op (run_op reads both)."""
    grad = True      # False inside pe.no_grad()
    tracer = None    # the pe.jit trace recording this thread's ops


_state = _State()
_seq = itertools.count()
_op_index = {}
_grad_cache = {}


def _grad_enabled():
    return _state.grad


def _tracer():
    """The pe.jit trace recording this thread's ops (None when not tracing)."""
    return _state.tracer


def _set_tracer(tr):
    prev = _state.tracer
    _state.tracer = tr
    _core.eager_mode(_state.grad, tr is not None)
    return prev


def _check_value_read(t, what):
    tr = _state.tracer
    if tr is not None:
        tr.value_read(t, what)


class no_grad:
    """Context manager and decorator: ops run inside record nothing for backward()
    and their outputs have stop_gradient True."""

    def __enter__(self):
        self._prev = _grad_enabled()
        _state.grad = False
        _core.eager_mode(False, _state.tracer is not None)
        return self

    def __exit__(self, *exc):
        _state.grad = self._prev
        _core.eager_mode(self._prev, _state.tracer is not None)
        return False

    def __call__(self, fn):
        def wrapped(*a, **k):
            with no_grad():
                return fn(*a, **k)
        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__doc__ = getattr(fn, "__doc__", None)
        return wrapped


def _place():
    return _fw._eager_place


def _dtype_name(dtype):
    return None if dtype is None else _fw.convert_dtype(dtype)


class Tensor(_core.EagerTensor):
    """An eager tensor: a value on a CPU or CUDA place (a pe._core.Tensor), its autograd
    facts (stop_gradient, .grad, the node that made it) and Paddle's tensor API.
    Made by pe.to_tensor, the creation functions and every eager op.

    Tensor(value, stop_gradient=True, name=None): value is a pe._core.Tensor.
    The fields (_t, stop_gradient, grad, name, _node, _slot, _version) and the
    operators + - * / @ are the C base's (_core.EagerTensor,
    core_eager_tensor.c): `a + b` on two tensors is one C call."""

    __array_priority__ = 100  # numpy defers `ndarray op Tensor` to Tensor's reflected operators

    # ---- numpy interop and facts ---------------------------------------------
    def numpy(self):
        """A numpy copy of the value."""
        _check_value_read(self, "numpy()")
        return self._t.numpy(copy=True)

    def __array__(self, dtype=None, copy=None):
        _check_value_read(self, "numpy.asarray()")
        a = self._t.numpy(copy=True)
        return a.astype(dtype) if dtype is not None else a

    @property
    def shape(self):
        return list(self._t.shape())

    @property
    def dtype(self):
        return self._t.dtype()

    @property
    def ndim(self):
        return len(self._t.shape())

    def dim(self):
        return self.ndim

    @property
    def size(self):
        n = 1
        for d in self._t.shape():
            n *= d
        return int(n)

    def __len__(self):
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    @property
    def is_leaf(self):
        return self._node is None

    @property
    def place(self):
        return _fw._place_from_tuple(self._t._place())

    def _copy_to(self, place, blocking=True):
        """A copy of the value on place (CPUPlace / CUDAPlace): a new leaf
        with this tensor's stop_gradient (as Paddle's: the copy is not
        recorded for backward()). `blocking` is accepted for Paddle's
        signature; a copy to the host always waits for the ops before it."""
        t = _core.Tensor()
        t.set(self._t, _fw._check_eager_place(place, "Tensor._copy_to"))
        return Tensor(t, stop_gradient=self.stop_gradient)

    def cuda(self, device_id=None, blocking=True):
        """A copy on GPU device_id (default: the set_device GPU, else 0)."""
        if device_id is None:
            cur = _fw._eager_place
            device_id = cur[1] if cur is not None and cur[0] == "cuda" else 0
        return self._copy_to(_fw.CUDAPlace(device_id), blocking)

    def cpu(self):
        """A copy on the CPU (this tensor itself when it is there)."""
        if self._t._place()[0] == "cpu":
            return self
        return self._copy_to(_fw.CPUPlace(), True)

    def item(self):
        _check_value_read(self, "item() / bool() / float() / int()")
        a = self._t.numpy(copy=True)
        if a.size != 1:
            raise _core.InvalidArgumentError("Tensor.item(): the tensor has %d elements, not 1" % a.size)
        return a.reshape(()).item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __repr__(self):
        return "Tensor(shape=%s, dtype=%s, stop_gradient=%s,\n       %s)" % (
            self.shape, self.dtype, self.stop_gradient, np.array2string(self._t.numpy(copy=True), prefix="       "))

    # ---- autograd --------------------------------------------------------------
    def detach(self):
        """A copy of the value, cut from the graph (stop_gradient True)."""
        t = _core.Tensor()
        t.set(self._t, self._t._place())
        return Tensor(t, stop_gradient=True)

    def clear_grad(self):
        """Drops the accumulated gradient (.grad = None)."""
        self.grad = None

    clear_gradient = clear_grad

    def backward(self, grad_tensor=None, retain_graph=False):
        """Gradients of this tensor (a scalar unless grad_tensor is given) with
        respect to every leaf with stop_gradient False that it depends on,
        accumulated into their .grad."""
        backward(self, grad_tensor, retain_graph)


def _as_tensor(x, like=None, api="op"):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float, np.integer, np.floating)) and like is not None:
        return _fill([1], like.dtype, float(x))
    raise TypeError("%s: expected a pe.eager.Tensor, got %s" % (api, type(x).__name__))


def _fill(shape, dtype, value):
    out, = run_op("fill_constant", {}, {"Out": 1},
                  {"shape": [int(d) for d in shape], "dtype": _fw.DTYPE_ENUM[dtype], "value": float(value)})["Out"]
    return out


def _index(op_type):
    i = _op_index.get(op_type)
    if i is None:
        i = _op_index[op_type] = _core.eager_op_index(op_type)
    return i


def _slots(d):
    """{slot: Tensor | [Tensor|None] | None} -> [(slot, [Tensor|None])]."""
    out = []
    for slot, v in d.items():
        if v is None:
            continue
        out.append((slot, list(v) if isinstance(v, (list, tuple)) else [v]))
    return out


def _run_raw(op_type, ins, outs, attrs, seed=0):
    """ins: [(slot, [_core.Tensor|None], [name|None])]; outs: [(slot, n | [present])]."""
    return _core.eager_run(_index(op_type), ins, outs, attrs, _place(), 0, seed)


_PREPARED = {}   # (op type, input layout, outputs, attrs key) -> EagerOp, or None: not preparable


def run_op(op_type, inputs, outputs, attrs=None, seed=0):
    """Runs registry op `op_type` on eager tensors: inputs {slot: Tensor or
    [Tensor]}, outputs {slot: count}, attrs {name: value}. Returns {slot:
    [Tensor]}; records the op for backward() when an input needs a gradient.

    Through a prepared op (EagerOp, cached per op type, slot layout and
    attrs) when every input is a Tensor and no random seed or pe.jit trace
    is involved; _run_op otherwise (the same results and errors)."""
    if seed or _state.tracer is not None:
        return _run_op(op_type, inputs, outputs, attrs, seed)
    layout, args = [], []
    for slot, v in inputs.items():
        if v is None:
            continue
        if type(v) is Tensor:
            layout.append((slot, 1))
            args.append(v)
            continue
        if not isinstance(v, (list, tuple)) or not all(type(t) is Tensor for t in v):
            return _run_op(op_type, inputs, outputs, attrs, seed)
        layout.append((slot, len(v)))
        args.extend(v)
    outs = tuple(outputs.items())
    try:
        key = (op_type, tuple(layout), outs, _attrs_key(attrs) if attrs else ())
        op = _PREPARED.get(key, False)
    except TypeError:   # an unhashable attr value or output spec: no cache
        return _run_op(op_type, inputs, outputs, attrs, seed)
    if op is False:
        if len(_PREPARED) >= 4096:   # attrs that change every call (shapes): keep the cache bounded
            _PREPARED.clear()
        try:
            op = _core.EagerOp(op_type, layout, list(outs), attrs or None)
        except (_core.Error, TypeError, ValueError):
            op = None   # _run_op gives the error, naming the tensors
        _PREPARED[key] = op
    if op is None:
        return _run_op(op_type, inputs, outputs, attrs, seed)
    res = op(*args)
    if len(outs) == 1 and outs[0][1] == 1:
        return {outs[0][0]: [res]}
    if type(res) is not tuple:
        res = (res,)
    result, k = {}, 0
    for slot, n in outs:
        c = n if type(n) is int else len(n)
        result[slot] = list(res[k:k + c])
        k += c
    return result


def _run_op(op_type, inputs, outputs, attrs=None, seed=0):
    """run_op through _core.eager_run (no prepared op)."""
    # One pass over the inputs makes the C call's (slot, [raw], [name]) list,
    # the tape's [(slot, [Tensor])] (as _slots) and whether any needs a gradient.
    attrs = attrs or {}
    ins, raw_ins, wants = [], [], False
    for slot, v in inputs.items():
        if v is None:
            continue
        ts = list(v) if isinstance(v, (list, tuple)) else [v]
        ins.append((slot, ts))
        raws, names = [], []
        for i, t in enumerate(ts):
            if t is None:
                raws.append(None)
                names.append(None)
            elif not isinstance(t, Tensor):
                what = "%s[%d]" % (slot, i) if isinstance(v, (list, tuple)) else slot
                raise TypeError("run_op(%s): input %s must be a pe.eager.Tensor, a list of them or None, got %s "
                                "(pe.to_tensor makes one)" % (op_type, what, type(t).__name__))
            else:
                raws.append(t._t)
                names.append(t.name)
                if not t.stop_gradient:
                    wants = True
        raw_ins.append((slot, raws, names))
    outs = list(outputs.items())
    res = _core.eager_run(_index(op_type), raw_ins, outs, attrs, _fw._eager_place, 0, seed)
    needs = wants and _state.grad
    result = {}
    for slot, _ in outs:
        if needs:
            result[slot] = [Tensor(r, stop_gradient=not _is_float(r.dtype())) if r is not None else None
                            for r in res[slot]]
        else:
            result[slot] = [Tensor(r) if r is not None else None for r in res[slot]]
    if needs:
        _record(op_type, ins, outs, attrs, result)
    tr = _state.tracer
    if tr is not None:
        tr.record(op_type, ins, outs, attrs, result)
    return result


def _is_float(dtype):
    return dtype in _FLOAT_DTYPES


# ---- the tape ---------------------------------------------------------------------

class _Node:
    """One recorded op: its backward ops (canonical var names: i<k> for the
    k-th distinct input tensor, o<k> for the k-th output), the tensors they
    read, and the input tensors gradients flow to."""
    __slots__ = ("seq", "op_type", "saved", "inputs", "out_meta", "fn", "versions", "entry")

    def __init__(self):
        self.fn = None  # or fn(env, retain_graph) -> {"i<k>@GRAD": raw}: a node whose backward is not per-op (pe.jit)
        self.versions = None  # or [(leaf Tensor, its _version when saved)]: what backward() checks
        self.entry = None  # the _GradEntry of a per-op node (its prepared backward ops)


def _attrs_key(attrs):
    # the type too: 1 and 1.0 (and True) are equal keys, but an int attr refuses 1.0
    return tuple(sorted((k, v.__class__, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))


def _canon(prefix, j, _names={}):
    """"i<j>" / "o<j>", made once per (prefix, j)."""
    n = _names.get((prefix, j))
    if n is None:
        n = _names[(prefix, j)] = "%s%d" % (prefix, j)
    return n


_dims_only_cache = {}


def _dims_only(op_type):
    """The input slots of op_type whose data its kernels never read (ops.def "-In")."""
    d = _dims_only_cache.get(op_type)
    if d is None:
        d = _dims_only_cache[op_type] = frozenset(_core.eager_dims_only_inputs(op_type))
    return d


class _GradEntry:
    """The backward of one op signature (op type, slot layout, which inputs
    need a gradient, dtypes, attrs), made once: the grad maker's ops, each
    prepared (EagerOp) with its flat input and output names; the names the
    backward ops read (read) and whose values they read (data_read); and per
    forward input i<k>, the names of its gradient contributions."""
    __slots__ = ("grad_ops", "read", "data_read", "runs", "contribs", "in_plan", "out_plan")


def _grad_entry(op_type, in_slots, out_slots, needs, in_tensors, out_tensors, attrs):
    e = _GradEntry()
    var_list = [("i%d" % j, t.dtype, t.shape, needs[j]) for j, t in enumerate(in_tensors)]
    var_list += [("o%d" % j, t.dtype, t.shape, False) for j, t in enumerate(out_tensors)]
    try:
        grad_ops = _core.eager_grad_ops(op_type, in_slots, out_slots, attrs, var_list)
    except _core.UnsupportedError:
        grad_ops = None  # no grad maker: the outputs are constants for backward()
    if grad_ops is not None:
        grad_ops = [(t, ins_, outs_, {a: v for a, v in at.items() if a not in ("op_role", "op_role_var")})
                    for t, ins_, outs_, at in grad_ops]
    e.grad_ops = grad_ops
    if grad_ops is None:
        return e
    e.read = frozenset(n for _, gi, _, _ in grad_ops for _, names in gi for n in names)
    e.data_read = frozenset(n for t, gi, _, _ in grad_ops for slot, names in gi
                            if slot not in _dims_only(t) for n in names)
    e.runs = []
    made = []
    for gtype, gins, gouts, gattrs in grad_ops:
        op = _core.EagerOp(gtype, [(slot, len(names)) for slot, names in gins],
                           [(slot, [nm != "@EMPTY@" for nm in names]) for slot, names in gouts], gattrs)
        ins_flat = tuple(nm for _, names in gins for nm in names)
        outs_flat = tuple(nm for _, names in gouts for nm in names)
        e.runs.append((op, ins_flat, outs_flat))
        made.extend(nm for nm in outs_flat if nm != "@EMPTY@" and nm not in made)
    e.contribs = {}
    for j in range(len(in_tensors)):
        g = "i%d@GRAD" % j
        r = g + "@RENAME@"
        e.contribs["i%d" % j] = tuple(nm for nm in made if nm == g or nm.startswith(r))
    # what a node of this signature keeps, per input: (name, saved, value read, gradient wanted);
    # per output: (name, saved, dtype)
    e.in_plan = tuple((_canon("i", j), _canon("i", j) in e.read, _canon("i", j) in e.data_read, needs[j])
                      for j in range(len(in_tensors)))
    e.out_plan = tuple((_canon("o", j), _canon("o", j) in e.read, t._t.dtype()) for j, t in enumerate(out_tensors))
    return e


def _signature(op_type, ins, outs, attrs, result):
    """An op call's tape signature: canonical names (one per distinct input
    tensor, one per output), the slot layouts as lists (for
    _core.eager_grad_ops) and the _grad_cache key (the layouts as tuples,
    which inputs need a gradient, the dtypes, the attrs). Returns (key,
    in_slots, out_slots, needs, in_tensors, out_tensors)."""
    canon, in_tensors, in_slots, in_key = {}, [], [], []
    for slot, ts in ins:
        names = []
        for t in ts:
            if t is None:
                names.append("@EMPTY@")
                continue
            n = canon.get(id(t))
            if n is None:
                n = canon[id(t)] = _canon("i", len(in_tensors))
                in_tensors.append(t)
            names.append(n)
        in_slots.append((slot, names))
        in_key.append((slot, tuple(names)))
    out_slots, out_tensors, out_key = [], [], []
    for slot, _ in outs:
        names = []
        for t in result[slot]:
            if t is None:
                names.append("@EMPTY@")
                continue
            names.append(_canon("o", len(out_tensors)))
            out_tensors.append(t)
        out_slots.append((slot, names))
        out_key.append((slot, tuple(names)))
    needs = tuple(not t.stop_gradient for t in in_tensors)
    dtypes = tuple(t._t.dtype() for t in in_tensors) + tuple(t._t.dtype() for t in out_tensors)
    key = (op_type, tuple(in_key), tuple(out_key), needs, dtypes, _attrs_key(attrs))
    return key, in_slots, out_slots, needs, in_tensors, out_tensors


def _entry_of(op_type, ins, outs, attrs, result):
    """(the signature's _GradEntry, made once, in_tensors, out_tensors)."""
    key, in_slots, out_slots, needs, in_tensors, out_tensors = _signature(op_type, ins, outs, attrs, result)
    entry = _grad_cache.get(key)
    if entry is None:
        entry = _grad_cache[key] = _grad_entry(op_type, in_slots, out_slots, needs, in_tensors, out_tensors, attrs)
    return entry, in_tensors, out_tensors


def _record(op_type, ins, outs, attrs, result):
    entry, in_tensors, out_tensors = _entry_of(op_type, ins, outs, attrs, result)
    _make_node(op_type, entry, in_tensors, out_tensors)


def _make_node(op_type, entry, in_tensors, out_tensors):
    """Puts the op on the tape: a node on its float outputs (none when the op
    has no grad maker: its outputs are constants for backward())."""
    if entry.grad_ops is None:
        for t in out_tensors:
            t.stop_gradient = True
        return
    node = _Node()
    node.seq = next(_seq)
    node.op_type = op_type
    node.entry = entry
    saved = node.saved = {}
    inputs = node.inputs = []
    for (n, rd, data, need), t in zip(entry.in_plan, in_tensors):
        if rd:
            saved[n] = t._t
            if data and t._node is None:   # a leaf (what optimizer steps change) whose value is read
                if node.versions is None:
                    node.versions = []
                node.versions.append((t, t._version))
        if need:
            inputs.append((n, t))
    out_meta = node.out_meta = {}
    for (n, rd, dtype), t in zip(entry.out_plan, out_tensors):
        raw = t._t
        if rd:
            saved[n] = raw  # the raw value: no cycle through the output Tensor
        out_meta[n] = (raw.shape(), dtype)
        if dtype in _FLOAT_DTYPES:
            t._node = node
            t._slot = n


def _record_prepared(op, args, outs):
    """The fast path's record hook (core_eager_tensor.c): EagerOp op ran on
    args (a tuple of Tensors, its input layout) and made outs (a tuple, its
    output layout); records it as run_op does, with the signature's
    _GradEntry cached on the op (op.cache) under a short key."""
    if len(args) == 2:
        a, b = args
        if a is b:
            in_tensors, alias = (a,), True
        else:
            in_tensors, alias = args, False
    else:  # the key holds which args are one tensor (x * x differentiates otherwise)
        pos, in_tensors, alias = {}, [], []
        for t in args:
            j = pos.get(id(t))
            if j is None:
                j = pos[id(t)] = len(in_tensors)
                in_tensors.append(t)
            alias.append(j)
        alias = tuple(alias)
    out_tensors = [t for t in outs if t is not None]
    needs = tuple(not t.stop_gradient for t in in_tensors)
    dtypes = tuple(t._t.dtype() for t in in_tensors) + tuple(t._t.dtype() for t in out_tensors)
    key = (alias, needs, dtypes, tuple(t is None for t in outs))
    cache = op.cache
    entry = cache.get(key)
    if entry is None:   # first call of this signature: the general key, kept under the short one
        op_type, in_layout, out_layout, attrs = op.desc
        ins, k = [], 0
        for slot, n in in_layout:
            ins.append((slot, list(args[k:k + n])))
            k += n
        result, k = {}, 0
        for slot, n in out_layout:
            c = n if isinstance(n, int) else len(n)
            result[slot] = list(outs[k:k + c])
            k += c
        entry = cache[key] = _entry_of(op_type, ins, out_layout, attrs or {}, result)[0]
    _make_node(op.desc[0], entry, in_tensors, out_tensors)


def _call_prepared(desc, args):
    """The fast path's fallback (a pe.jit trace, an argument that is not a
    Tensor, an op that failed): the EagerOp's call through run_op."""
    op_type, in_layout, out_layout, attrs = desc
    inputs, k = {}, 0
    for slot, n in in_layout:
        inputs[slot] = args[k] if n == 1 else list(args[k:k + n])
        k += n
    res = _run_op(op_type, inputs, dict(out_layout), attrs)
    outs = [t for slot, _ in out_layout for t in res[slot]]
    return outs[0] if len(outs) == 1 else tuple(outs)


def prepared(op_type, inputs, outputs, attrs=None, api=None, argnames=()):
    """An EagerOp: op_type with the slot layout inputs [(slot, n)] / outputs
    [(slot, n)] and attrs resolved once; op(*tensors) runs it on eager
    tensors (recorded for backward() as run_op records), op.raw(*raw) on
    _core.Tensors. api / argnames: the TypeError a non-Tensor argument gets
    ("<api>: <argname> must be a pe.eager.Tensor")."""
    return _core.EagerOp(op_type, inputs, outputs, attrs, api, tuple(argnames) if api else None)


_SUMS = {}   # n -> the prepared `sum` of n tensors


def _sum(raws):
    n = len(raws)
    if n == 1:
        return raws[0]
    op = _SUMS.get(n)
    if op is None:
        op = _SUMS[n] = _core.EagerOp("sum", [("X", n)], [("Out", 1)])
    return _run_prepared(op, raws)[0]


def _run_prepared(op, raws):
    """op.raw(*raws): every op the backward pass runs (its grad ops, sums) goes through here."""
    return op.raw(*raws)


_ONES_LIKE = None  # the prepared fill_any_like(value=1): backward()'s seed


def _zeros_raw(shape, dtype):
    return _run_raw("fill_constant", [], [("Out", 1)],
                    {"shape": [int(d) for d in shape], "dtype": _fw.DTYPE_ENUM[dtype], "value": 0.0})["Out"][0]


_around_backward = []   # f(run): runs one backward pass by calling run() once; may act before and after it


def add_backward_wrapper(f):
    """Registers f(run) around every backward pass from now on: f calls
    run() once (the pass itself) and may act before and after it —
    pe.DataParallel exchanges the gradients there. Registering f again does
    nothing."""
    if f not in _around_backward:
        _around_backward.append(f)


_grad_ready = []   # f(leaf): the leaf's .grad is final for the running backward pass


def add_grad_ready_hook(f):
    """Registers f(leaf), called during every backward pass from now on as
    soon as a leaf's .grad is final for the pass (every contribution
    accumulated: the last node reading the leaf has run), before the pass
    goes on. Leaves that get no gradient in the pass are not reported.
    Registering f again does nothing."""
    if f not in _grad_ready:
        _grad_ready.append(f)


def _leaf_done(t, cs):
    _accumulate(t, cs)
    for f in _grad_ready:
        f(t)


def backward(tensor, grad_tensor=None, retain_graph=False):
    """Runs the backward pass from tensor (Tensor.backward), inside the
    wrappers add_backward_wrapper registered."""
    if not _around_backward:
        _backward_pass(tensor, grad_tensor, retain_graph)
        return

    def run():
        _backward_pass(tensor, grad_tensor, retain_graph)
    for f in _around_backward:
        run = (lambda f, inner: lambda: f(inner))(f, run)
    run()


def _backward_pass(tensor, grad_tensor=None, retain_graph=False):
    if tensor.stop_gradient:
        raise _core.InvalidArgumentError(
            "backward(): tensor '%s' has stop_gradient=True: no leaf with stop_gradient=False reaches it" % tensor.name)
    if grad_tensor is None:
        if tensor.size != 1:
            raise _core.InvalidArgumentError(
                "backward(): tensor '%s' has shape %s; give grad_tensor for a non-scalar" % (tensor.name, tensor.shape))
        global _ONES_LIKE
        if _ONES_LIKE is None:
            _ONES_LIKE = _core.EagerOp("fill_any_like", [("X", 1)], [("Out", 1)], {"value": 1.0})
        seed = _ONES_LIKE.raw(tensor._t)[0]
    else:
        g = _as_tensor(grad_tensor, api="backward")
        if g.shape != tensor.shape or g.dtype != tensor.dtype:
            raise _core.InvalidArgumentError("backward(): grad_tensor is %s %s, tensor '%s' is %s %s" % (
                g.dtype, g.shape, tensor.name, tensor.dtype, tensor.shape))
        seed = g._t
    root = tensor._node
    if root is None:  # a leaf
        _leaf_done(tensor, [seed])
        return
    # the nodes reachable from tensor through inputs that still need a gradient,
    # and per leaf the number of them that read it (its .grad is final when the last has run)
    nodes, stack, seen, readers = [], [root], {id(root)}, {}
    while stack:
        n = stack.pop()
        if n.saved is None:
            raise _core.InvalidArgumentError(
                "backward(): the graph of op %s was freed by an earlier backward(); call backward(retain_graph=True) "
                "the first time to run backward twice" % n.op_type)
        nodes.append(n)
        for _, t in n.inputs:
            if t.stop_gradient:
                continue
            tn = t._node
            if tn is None:
                readers[id(t)] = readers.get(id(t), 0) + 1
            elif id(tn) not in seen:
                seen.add(id(tn))
                stack.append(tn)
    for n in nodes:   # before anything runs
        if n.versions is not None:
            _check_versions(n)
    if len(nodes) > 1:
        nodes.sort(key=_node_seq, reverse=True)   # reverse creation order: a reverse topological order
    pending = {id(root): {tensor._slot: [seed]}}   # node -> {out name: [grad contributions]}
    leaves = {}                                    # id(leaf) -> (leaf, [contributions])
    for n in nodes:
        out_grads = pending.pop(id(n), None)
        if out_grads:  # else no gradient reaches its outputs (a cut path): it contributes nothing
            env = dict(n.saved)
            for o, cs in out_grads.items():
                env[_grad_name(o)] = _sum(cs)
            if n.fn is not None:
                env.update(n.fn(env, retain_graph))
            entry = n.entry
            if entry is not None:
                for op, in_names, out_names in entry.runs:
                    raws = []
                    for nm in in_names:
                        if nm == "@EMPTY@":
                            raws.append(None)
                            continue
                        v = env.get(nm)
                        if v is None:   # the gradient of an output none reached: zeros
                            v = _missing(n, env, nm, op)
                        raws.append(v)
                    for nm, r in zip(out_names, _run_prepared(op, raws)):
                        if r is not None:
                            env[nm] = r
                contribs = entry.contribs
            for iname, t in n.inputs:
                if t.stop_gradient:
                    continue
                if entry is not None:
                    cs = [env[k] for k in contribs[iname] if env.get(k) is not None]
                else:  # a pe.jit node: its fn gave i<k>@GRAD
                    g = env.get(_grad_name(iname))
                    cs = [g] if g is not None else None
                if not cs:
                    continue
                tn = t._node
                if tn is None:
                    got = leaves.get(id(t))
                    if got is None:
                        leaves[id(t)] = (t, cs)
                    else:
                        got[1].extend(cs)
                else:
                    got = pending.get(id(tn))
                    if got is None:
                        pending[id(tn)] = {t._slot: cs}
                    else:
                        got.setdefault(t._slot, []).extend(cs)
        if not retain_graph:
            n.saved = None
        for _, t in n.inputs:   # a leaf whose last reader has run: its .grad is final now
            if t.stop_gradient or t._node is not None:
                continue
            c = readers.get(id(t))
            if c is None:
                continue
            if c > 1:
                readers[id(t)] = c - 1
                continue
            del readers[id(t)]
            got = leaves.pop(id(t), None)
            if got is not None:
                _leaf_done(*got)
    for t, cs in leaves.values():   # none left: every leaf's last reader has run
        _leaf_done(t, cs)


def _node_seq(n):
    return n.seq


def _grad_name(name, _names={}):
    """name + "@GRAD", made once per name (the tape's names are few: i<k>, o<k>)."""
    g = _names.get(name)
    if g is None:
        g = _names[name] = name + "@GRAD"
    return g


def _missing(n, env, nm, op):
    """A backward op of node n reads nm, which is not in env: zeros for the
    gradient of an output no gradient reached, else an internal error."""
    if nm.endswith("@GRAD") and nm[:-5] in n.out_meta:
        shape, dtype = n.out_meta[nm[:-5]]
        v = env[nm] = _zeros_raw(shape, dtype)
        return v
    raise _core.InternalError("backward of op %s: backward op %s reads '%s', which nothing made" % (
        n.op_type, op.desc[0], nm))


def bump_version(t):
    """Marks t's value as changed in place (its storage was written): a
    backward() through an op that saved t before now raises."""
    t._version += 1


def _check_versions(n):
    for t, v in n.versions:
        if t._version != v:
            raise _core.InvalidArgumentError(
                "backward(): tensor '%s' %s, saved by op %s for the backward pass, was modified by an in-place "
                "operation (an optimizer step) since it was saved (version %d, saved at version %d): the "
                "gradient would use the new value; call backward() before step(), or run the forward again "
                "after it" % (t.name, t.shape, n.op_type, t._version, v))


def _accumulate(t, cs):
    if t.grad is not None:
        cs = [t.grad._t] + list(cs)
    t.grad = Tensor(_sum(cs), stop_gradient=True, name=t.name + "@GRAD")

