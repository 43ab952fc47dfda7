"""pe.eager.autograd — eager tensors, one-op runs and the tape.

Every eager op is one call of the C entry point pe_eager_run (pe/eager.h,
through _core.eager_run): the registry's infer, allocation and the same CPU
kernel the static executors run — no program is built per call. When an
input needs a gradient (stop_gradient False, outside pe.no_grad()), the op
is recorded on its outputs as a node holding the backward ops that the op's
grad maker in ops/ops.def makes (_core.eager_grad_ops, cached per op type,
slot layout, dtypes and attrs) and the tensors those ops read.

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

_DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "double": "float64", "fp64": "float64",
                  "int": "int32", "long": "int64", "bool_": "bool"}
_FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")

class _State(threading.local):
    """Per-thread switches. The defaults are class attributes, so reading one
    that this thread never set costs an attribute lookup, not the
    AttributeError that getattr(local, name, default) raises and catches
    inside every op (run_op reads both)."""
    grad = True      # False inside pe.no_grad()
    tracer = None    # the pe.jit trace recording this thread's ops


_state = _State()
_names = itertools.count()
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
        return self

    def __exit__(self, *exc):
        _state.grad = self._prev
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
    if dtype is None:
        return None
    if isinstance(dtype, str):
        return _DTYPE_ALIASES.get(dtype, dtype)
    return _fw.convert_dtype(dtype)


class Tensor:
    """An eager tensor: a value on a CPU or CUDA place (a pe._core.Tensor), its autograd
    facts (stop_gradient, .grad, the node that made it) and Paddle's tensor API.
    Made by pe.to_tensor, the creation functions and every eager op."""

    __array_priority__ = 100  # numpy defers `ndarray op Tensor` to Tensor's reflected operators
    _version = 0  # bumped by every in-place update of the value (an optimizer step); the tape checks it

    def __init__(self, value, stop_gradient=True, name=None, _node=None, _slot=None):
        if not isinstance(value, _core.Tensor):
            raise TypeError("pe.eager.Tensor wraps a pe._core.Tensor; use pe.to_tensor(data) to make one")
        self._t = value
        self.stop_gradient = bool(stop_gradient)
        self.grad = None
        self.name = name or "eager_tmp_%d" % next(_names)
        self._node = _node
        self._slot = _slot  # the node's name for this output ("o<k>")

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


def run_op(op_type, inputs, outputs, attrs=None, seed=0):
    """Runs registry op `op_type` on eager tensors: inputs {slot: Tensor or
    [Tensor]}, outputs {slot: count}, attrs {name: value}. Returns {slot:
    [Tensor]}; records the op for backward() when an input needs a gradient."""
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
        for t in ts:
            if t is None:
                raws.append(None)
                names.append(None)
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
    __slots__ = ("seq", "op_type", "grad_ops", "saved", "inputs", "out_meta", "fn", "versions")

    def __init__(self):
        self.fn = None  # or fn(env, retain_graph) -> {"i<k>@GRAD": raw}: a node whose backward is not per-op (pe.jit)
        self.versions = None  # or [(leaf Tensor, its _version when saved)]: what backward() checks


def _attrs_key(attrs):
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))


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


def _record(op_type, ins, outs, attrs, result):
    # canonical names: one per distinct input tensor, one per output; the
    # slot layouts as lists (for _core.eager_grad_ops) and as tuples (the key)
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
    in_dtypes = [t._t.dtype() for t in in_tensors]
    out_dtypes = [t._t.dtype() for t in out_tensors]
    key = (op_type, tuple(in_key), tuple(out_key), needs, tuple(in_dtypes) + tuple(out_dtypes), _attrs_key(attrs))
    cached = _grad_cache.get(key)
    if cached is None:
        var_list = [("i%d" % j, t.dtype, t.shape, needs[j]) for j, t in enumerate(in_tensors)]
        var_list += [("o%d" % j, t.dtype, t.shape, False) for j, t in enumerate(out_tensors)]
        try:
            grad_ops = _core.eager_grad_ops(op_type, in_slots, out_slots, attrs, var_list)
        except _core.UnsupportedError:
            grad_ops = None  # no grad maker: the outputs are constants for backward()
        read = data_read = None
        if grad_ops is not None:
            grad_ops = [(t, ins_, outs_, {a: v for a, v in at.items() if a not in ("op_role", "op_role_var")})
                        for t, ins_, outs_, at in grad_ops]
            read = frozenset(n for _, gi, _, _ in grad_ops for _, names in gi for n in names)
            data_read = frozenset(n for t, gi, _, _ in grad_ops for slot, names in gi
                                  if slot not in _dims_only(t) for n in names)
        # read: the names the backward ops read; data_read: those whose values (not only dims) they read
        cached = _grad_cache[key] = (grad_ops, read, data_read)
    grad_ops, read, data_read = cached
    if grad_ops is None:
        for t in out_tensors:
            t.stop_gradient = True
        return
    node = _Node()
    node.seq = next(_seq)
    node.op_type = op_type
    node.grad_ops = grad_ops
    saved = node.saved = {}
    inputs = node.inputs = []
    versions = None
    for j, t in enumerate(in_tensors):
        n = _canon("i", j)
        if n in read:
            saved[n] = t._t
            if t._node is None and n in data_read:   # a leaf (what optimizer steps change) whose value is read
                if versions is None:
                    versions = node.versions = []
                versions.append((t, t._version))
        if needs[j]:
            inputs.append((n, t))
    out_meta = node.out_meta = {}
    for j, t in enumerate(out_tensors):
        n = _canon("o", j)
        if n in read:
            saved[n] = t._t  # the raw value: no cycle through the output Tensor
        out_meta[n] = (list(t._t.shape()), out_dtypes[j])
        if out_dtypes[j] in _FLOAT_DTYPES:
            t._node = node
            t._slot = n


def _sum(raws):
    if len(raws) == 1:
        return raws[0]
    return _run_raw("sum", [("X", list(raws), [None] * len(raws))], [("Out", 1)], {})["Out"][0]


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
        seed = _run_raw("fill_any_like", [("X", [tensor._t], [tensor.name])], [("Out", 1)], {"value": 1.0})["Out"][0]
    else:
        g = _as_tensor(grad_tensor, api="backward")
        if g.shape != tensor.shape or g.dtype != tensor.dtype:
            raise _core.InvalidArgumentError("backward(): grad_tensor is %s %s, tensor '%s' is %s %s" % (
                g.dtype, g.shape, tensor.name, tensor.dtype, tensor.shape))
        seed = g._t
    if tensor._node is None:  # a leaf
        _leaf_done(tensor, [seed])
        return
    # nodes reachable from tensor, through inputs that still need a gradient
    nodes, stack, seen = [], [tensor._node], {id(tensor._node)}
    while stack:
        n = stack.pop()
        if n.saved is None:
            raise _core.InvalidArgumentError(
                "backward(): the graph of op %s was freed by an earlier backward(); call backward(retain_graph=True) "
                "the first time to run backward twice" % n.op_type)
        nodes.append(n)
        for _, t in n.inputs:
            if not t.stop_gradient and t._node is not None and id(t._node) not in seen:
                seen.add(id(t._node))
                stack.append(t._node)
    for n in nodes:
        if n.versions is not None:
            _check_versions(n)
    nodes.sort(key=lambda n: n.seq, reverse=True)
    readers = {}                                           # id(leaf) -> nodes left that may add to its grad
    for n in nodes:
        for _, t in n.inputs:
            if not t.stop_gradient and t._node is None:
                readers[id(t)] = readers.get(id(t), 0) + 1
    pending = {id(tensor._node): {tensor._slot: [seed]}}   # node -> {out name: [grad contributions]}
    leaves = {}                                            # id(leaf) -> (leaf, [contributions])

    def node_done(n):
        # a leaf whose last reader has run: its .grad is final now
        for _, t in n.inputs:
            if t.stop_gradient or t._node is not None or id(t) not in readers:
                continue
            readers[id(t)] -= 1
            if readers[id(t)] == 0:
                del readers[id(t)]
                got = leaves.pop(id(t), None)
                if got is not None:
                    _leaf_done(*got)

    for n in nodes:
        out_grads = pending.pop(id(n), None)
        if not out_grads:  # no gradient reaches its outputs (a cut path): it contributes nothing
            if not retain_graph:
                n.saved = None
            node_done(n)
            continue
        env = dict(n.saved)
        for o, (shape, dtype) in n.out_meta.items():
            cs = out_grads.get(o)
            if cs:
                env[o + "@GRAD"] = _sum(cs)
            elif _is_float(dtype):
                env[o + "@GRAD"] = None  # made only if a backward op reads it
        if n.fn is not None:
            env.update(n.fn(env, retain_graph))
        for gtype, gins, gouts, gattrs in n.grad_ops:
            raw_ins = []
            for slot, names in gins:
                ts = []
                for nm in names:
                    if nm == "@EMPTY@":
                        ts.append(None)
                        continue
                    v = env.get(nm)
                    if v is None and nm.endswith("@GRAD") and nm[:-5] in n.out_meta:
                        shape, dtype = n.out_meta[nm[:-5]]
                        v = env[nm] = _zeros_raw(shape, dtype)
                    if v is None:
                        raise _core.InternalError("backward of op %s: backward op %s reads '%s', which nothing made" % (
                            n.op_type, gtype, nm))
                    ts.append(v)
                raw_ins.append((slot, ts, [None] * len(ts)))
            raw_outs = [(slot, [nm != "@EMPTY@" for nm in names]) for slot, names in gouts]
            res = _run_raw(gtype, raw_ins, raw_outs, gattrs)
            for slot, names in gouts:
                for nm, r in zip(names, res[slot]):
                    if r is not None:
                        env[nm] = r
        for iname, t in n.inputs:
            if t.stop_gradient:
                continue
            g = iname + "@GRAD"
            r = g + "@RENAME@"
            cs = [v for k, v in env.items() if v is not None and (k == g or k.startswith(r))]
            if not cs:
                continue
            if t._node is None:
                leaves.setdefault(id(t), (t, []))[1].extend(cs)
            else:
                pending.setdefault(id(t._node), {}).setdefault(t._slot, []).extend(cs)
        if not retain_graph:
            n.saved = None
        node_done(n)
    for t, cs in leaves.values():   # none left: every leaf's last reader has run
        _leaf_done(t, cs)


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

