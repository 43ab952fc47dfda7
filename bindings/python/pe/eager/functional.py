"""pe.eager.functional — eager tensor creation and the core ops, each one
registry op run at once (pe.eager.autograd.run_op), with the op types and
attrs the static builders (pe.tensor, pe.nn.functional) append, so an eager
result is the static engine's result for the same inputs.
"""
import builtins as _builtins
import os

import numpy as np

from .. import _core
from .. import framework as _fw
from . import autograd as _ag
from .autograd import _FLOAT_DTYPES as _FLOATS, Tensor, _as_tensor, _dtype_name, _fill, run_op

_NUMBER = (int, float, np.integer, np.floating)


def _out(op_type, inputs, attrs=None, slot="Out", outputs=None):
    return run_op(op_type, inputs, outputs or {slot: 1}, attrs)[slot][0]


def _check(x, api, what="x"):
    if not isinstance(x, Tensor):
        raise TypeError("%s: %s must be a pe.eager.Tensor, got %s" % (api, what, type(x).__name__))
    return x


# ---- creation -----------------------------------------------------------------------

def to_tensor(data, dtype=None, place=None, stop_gradient=True):
    """An eager tensor holding a copy of data (a number, nested lists, a numpy
    array or a Tensor). Python floats become float32 and ints int64 unless
    dtype says otherwise; a numpy array keeps its dtype."""
    where = _fw._check_eager_place(place, "to_tensor") if place is not None else _fw._eager_place
    if isinstance(data, Tensor):
        data = data.numpy()
    if isinstance(data, np.ndarray):
        arr = data
    else:
        arr = np.array(data)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
    if dtype is not None:
        arr = arr.astype(_dtype_name(dtype))
    if arr.dtype.name not in _fw.DTYPE_ENUM:
        raise _core.InvalidArgumentError("to_tensor: dtype %s is not one PE has (%s)" % (
            arr.dtype.name, ", ".join(sorted(_fw.DTYPE_ENUM))))
    t = _core.Tensor()
    t.set(np.ascontiguousarray(arr), where)
    return Tensor(t, stop_gradient=stop_gradient)


def _shape(shape, api):
    if isinstance(shape, Tensor):
        shape = shape.numpy().tolist()
    if isinstance(shape, _NUMBER):
        shape = [shape]
    return [int(d) for d in shape]


def full(shape, fill_value, dtype=None, name=None):
    """fill_constant: shape filled with fill_value (float32 unless dtype)."""
    return _fill(_shape(shape, "full"), _dtype_name(dtype) or "float32", fill_value)


def zeros(shape, dtype=None, name=None):
    return full(shape, 0.0, dtype)


def ones(shape, dtype=None, name=None):
    return full(shape, 1.0, dtype)


_rng = {"gen": None, "state": None}


def _next_seed():
    """The seed attr of the next random op: from pe.seed's value when set
    (reproducible), else from the OS."""
    s = _fw._eager_seed
    if _rng["state"] is None or _rng["gen"] != _fw._eager_seed_gen:
        _rng["gen"] = _fw._eager_seed_gen
        _rng["state"] = np.random.RandomState(s if s is not None else int.from_bytes(os.urandom(4), "little"))
    return int(_rng["state"].randint(1, 2 ** 31 - 1))


def randn(shape, dtype=None, name=None):
    """gaussian_random: standard normal values."""
    dt = _dtype_name(dtype) or "float32"
    return _out("gaussian_random", {}, {"shape": _shape(shape, "randn"), "dtype": _fw.DTYPE_ENUM[dt],
                                        "seed": _next_seed(), "mean": 0.0, "std": 1.0})


def rand(shape, dtype=None, name=None):
    """uniform_random in [0, 1)."""
    dt = _dtype_name(dtype) or "float32"
    return _out("uniform_random", {}, {"shape": _shape(shape, "rand"), "dtype": _fw.DTYPE_ENUM[dt],
                                       "seed": _next_seed(), "min": 0.0, "max": 1.0})


def arange(start=0, end=None, step=1, dtype=None, name=None):
    """[start, end) by step. The registry has no range op: the values are
    numpy's, copied into an eager tensor (int64 for ints, else float32)."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = "int64" if _builtins.all(isinstance(v, (int, np.integer)) for v in (start, end, step)) else "float32"
    return to_tensor(np.arange(start, end, step).astype(_dtype_name(dtype)))


# ---- elementwise, activations, math ----------------------------------------------------

def _elementwise(op_type, x, y):
    return _out(op_type, {"X": x, "Y": y}, {"axis": -1})


def _binary(x, y, op_type, reverse=False):
    """The static Variable operators' rules: a number operand becomes a scale
    op (add, sub, mul, div by it), else a [1] constant of x's dtype; integer
    operands become float32 first where Paddle's rules say (float_first)."""
    number = isinstance(y, _NUMBER) and not isinstance(y, bool)
    if _fw.float_first(op_type, _check(x, op_type).dtype, y if number else None):
        x = cast(x, "float32")
    if isinstance(y, Tensor) and _fw.float_first(op_type, y.dtype):
        y = cast(y, "float32")
    if number:
        c = float(y)
        if op_type == "elementwise_add":
            return scale(x, 1.0, c)
        if op_type == "elementwise_sub":
            return scale(x, -1.0, c) if reverse else scale(x, 1.0, -c)
        if op_type == "elementwise_mul":
            return scale(x, c)
        if op_type == "elementwise_div" and not reverse:
            if c == 0:
                raise ZeroDivisionError("Tensor / 0")
            return scale(x, 1.0 / c)
    y = _as_tensor(y, x, op_type)
    return _elementwise(op_type, y, x) if reverse else _elementwise(op_type, x, y)


def add(x, y, name=None):
    if type(x) is Tensor and type(y) is Tensor:
        return _BIN_OPS["add"](x, y)
    return _binary(_check(x, "add"), y, "elementwise_add")


def subtract(x, y, name=None):
    if type(x) is Tensor and type(y) is Tensor:
        return _BIN_OPS["sub"](x, y)
    return _binary(_check(x, "subtract"), y, "elementwise_sub")


def multiply(x, y, name=None):
    if type(x) is Tensor and type(y) is Tensor:
        return _BIN_OPS["mul"](x, y)
    return _binary(_check(x, "multiply"), y, "elementwise_mul")


def divide(x, y, name=None):
    if type(x) is Tensor and type(y) is Tensor and x.dtype in _FLOATS and y.dtype in _FLOATS:
        return _BIN_OPS["truediv"](x, y)
    return _binary(_check(x, "divide"), y, "elementwise_div")


_UNARY = {}   # (op type, key of the attrs) -> EagerOp: X -> Out


def _unary(op_type, x, attrs=None, key=(), outs=(("Out", 1),), api=None):
    """op_type on tensor x (slot X; outputs outs, the first returned) as a
    prepared op kept per op type and key (a hashable form of the attrs,
    given by the caller: cheaper than run_op's key of any attrs dict). A
    non-Tensor x: TypeError "<api>: x must be a pe.eager.Tensor"."""
    k = (op_type, key, api)
    op = _UNARY.get(k)
    if op is None:
        if len(_UNARY) >= 1024:   # attrs that change every call: keep the cache bounded
            _UNARY.clear()
        op = _UNARY[k] = _ag.prepared(op_type, [("X", 1)], list(outs), attrs, api or op_type, ("x",))
    r = op(x)
    return r[0] if len(outs) > 1 else r


def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, act=None, name=None):
    s, b, after = float(scale), float(bias), bool(bias_after_scale)
    out = _unary("scale", x, {"scale": s, "bias": b, "bias_after_scale": after}, (s, b, after))
    return _act(act, out) if act else out


def _act(op_type, x, attrs=None):
    if attrs is None:
        return _unary(op_type, x)
    return _out(op_type, {"X": _check(x, op_type)}, attrs)


def relu(x, name=None):
    return _act("relu", x)


def sigmoid(x, name=None):
    return _act("sigmoid", x)


def tanh(x, name=None):
    return _act("tanh", x)


def exp(x, name=None):
    return _act("exp", x)


def log(x, name=None):
    return _act("log", x)


def sqrt(x, name=None):
    return _act("sqrt", x)


def square(x, name=None):
    return _act("square", x)


def abs(x, name=None):  # noqa: A001 (Paddle's name; this module does not use the builtin)
    return _act("abs", x)


def softmax(x, axis=-1, dtype=None, name=None):
    a = int(axis)
    return _unary("softmax", x, {"axis": a}, (a,))


def pow(x, y, name=None):
    """x ** y: the `pow` op (factor y) for a number, elementwise_pow for a tensor."""
    _check(x, "pow")
    if isinstance(y, Tensor):
        return _elementwise("elementwise_pow", x, y)
    if isinstance(y, bool) or not isinstance(y, _NUMBER):
        raise TypeError("pe.pow: y must be a float, int or Tensor, got %s" % type(y).__name__)
    f = float(y)
    return _unary("pow", x, {"factor": f}, (f,))


def neg(x, name=None):
    return scale(x, -1.0)


def _compare(op_type, x, y):
    _check(x, op_type)
    return _elementwise(op_type, x, _as_tensor(y, x, op_type))


def equal(x, y, name=None):
    return _compare("equal", x, y)


def not_equal(x, y, name=None):
    return _compare("not_equal", x, y)


def less_than(x, y, name=None):
    return _compare("less_than", x, y)


def less_equal(x, y, name=None):
    return _compare("less_equal", x, y)


def greater_than(x, y, name=None):
    return _compare("greater_than", x, y)


def greater_equal(x, y, name=None):
    return _compare("greater_equal", x, y)


def matmul(x, y, transpose_x=False, transpose_y=False, name=None):
    """matmul_v2 (numpy broadcasting of batch dims)."""
    return _MATMUL[bool(transpose_x), bool(transpose_y)](x, y)


# ---- reductions and shapes ------------------------------------------------------------

def _axes(axis):
    if axis is None:
        return None
    if isinstance(axis, (int, np.integer)):
        return [int(axis)]
    return [int(a) for a in axis]


def _reduce(op_type, x, axis, keepdim):
    axes = _axes(axis)
    reduce_all = axes is None or len(axes) == len(x.shape)
    kd = bool(keepdim)
    return _unary(op_type, x, {"dim": axes or [0], "keep_dim": kd, "reduce_all": reduce_all},
                  (tuple(axes) if axes else None, kd, reduce_all))


def mean(x, axis=None, keepdim=False, name=None):
    """The `mean` op over all elements (output [1]), reduce_mean over axis."""
    _check(x, "mean")
    if axis is None and not keepdim:
        return _unary("mean", x)
    return _reduce("reduce_mean", x, axis, keepdim)


def sum(x, axis=None, dtype=None, keepdim=False, name=None):
    """reduce_sum over axis (all when None)."""
    _check(x, "sum")
    if dtype is not None and _dtype_name(dtype) != x.dtype:
        x = cast(x, dtype)
    return _reduce("reduce_sum", x, axis, keepdim)


def cast(x, dtype):
    dt = _dtype_name(dtype)
    i, o = _fw.DTYPE_ENUM[_check(x, "cast").dtype], _fw.DTYPE_ENUM[dt]
    return _unary("cast", x, {"in_dtype": i, "out_dtype": o}, (i, o))


def reshape(x, shape, name=None):
    """reshape2: 0 copies the input dim, -1 is inferred."""
    shape = _shape(shape, "reshape")
    return _unary("reshape2", x, {"shape": shape}, tuple(shape), (("Out", 1), ("XShape", 1)), "reshape")


def transpose(x, perm, name=None):
    perm = [int(a) for a in perm]
    return _unary("transpose2", x, {"axis": perm}, tuple(perm), (("Out", 1), ("XShape", 1)), "transpose")


def concat(x, axis=0, name=None):
    xs = list(x)
    for i, t in enumerate(xs):
        _check(t, "concat", "x[%d]" % i)
    return _out("concat", {"X": xs}, {"axis": int(axis)})


# ---- losses ------------------------------------------------------------------------

def softmax_with_cross_entropy(logits, label, soft_label=False, ignore_index=-100, numeric_stable_mode=True,
                               return_softmax=False, axis=-1):
    """Per-sample loss (the class axis set to 1); with return_softmax also the softmax."""
    r = run_op("softmax_with_cross_entropy", {"Logits": _check(logits, "softmax_with_cross_entropy", "logits"),
                                              "Label": _check(label, "softmax_with_cross_entropy", "label")},
               {"Softmax": 1, "Loss": 1},
               {"soft_label": bool(soft_label), "ignore_index": int(ignore_index),
                "numeric_stable_mode": bool(numeric_stable_mode), "axis": int(axis)})
    return (r["Loss"][0], r["Softmax"][0]) if return_softmax else r["Loss"][0]


def cross_entropy(input, label, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,
                  use_softmax=True, name=None):
    """softmax_with_cross_entropy then the reduction (mean: the `mean` op)."""
    if weight is not None:
        raise _core.UnsupportedError("cross_entropy: weight is not supported in eager mode")
    if not use_softmax:
        raise _core.UnsupportedError("cross_entropy(use_softmax=False) is not supported in eager mode")
    loss = softmax_with_cross_entropy(input, label, soft_label, ignore_index, True, False, axis)
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    if reduction == "none":
        return loss
    raise _core.InvalidArgumentError("cross_entropy: reduction must be 'mean', 'sum' or 'none', got %r" % (reduction,))


# ---- Tensor methods and operators -----------------------------------------------------

_BIN = {"add": "elementwise_add", "sub": "elementwise_sub", "mul": "elementwise_mul", "truediv": "elementwise_div"}
# The prepared ops of the operators and of add/subtract/multiply/divide/matmul on two
# tensors: one C call each (core_eager_tensor.c), the same op and attrs as _elementwise.
_BIN_OPS = {k: _ag.prepared(v, [("X", 1), ("Y", 1)], [("Out", 1)], {"axis": -1}) for k, v in _BIN.items()}
_MATMUL = {(tx, ty): _ag.prepared("matmul_v2", [("X", 1), ("Y", 1)], [("Out", 1)], {"trans_x": tx, "trans_y": ty},
                                  "matmul", ("x", "y"))
           for tx in (False, True) for ty in (False, True)}
_BIN_OPS["matmul"] = _MATMUL[False, False]


def _install():
    T = Tensor
    # + - * / @ are the C base's number slots: two tensors run the prepared op
    # there; anything else comes back to these (the Python rules).
    hooks = {
        "record": _ag._record_prepared, "call": _ag._call_prepared,
        "add": add, "radd": lambda a, b: _binary(a, b, "elementwise_add", True),
        "sub": subtract, "rsub": lambda a, b: _binary(a, b, "elementwise_sub", True),
        "mul": multiply, "rmul": lambda a, b: _binary(a, b, "elementwise_mul", True),
        "truediv": divide, "rtruediv": lambda a, b: _binary(a, b, "elementwise_div", True),
        "matmul": matmul, "rmatmul": lambda a, b: matmul(_as_tensor(b, a, "matmul"), a),
    }
    _core.eager_install(T, vars(_fw), hooks, _BIN_OPS)
    T.__neg__ = lambda a: neg(a)
    T.__pow__ = lambda a, b: pow(a, b)
    T.__rpow__ = lambda a, b: _elementwise("elementwise_pow", _as_tensor(b, a, "pow"), a)
    for name, op in (("floordiv", "elementwise_floordiv"), ("mod", "elementwise_mod")):   # integer in, integer out
        setattr(T, "__%s__" % name, lambda a, b, op=op: _binary(a, b, op))
        setattr(T, "__r%s__" % name, lambda a, b, op=op: _binary(a, b, op, True))
    T.__eq__ = lambda a, b: equal(a, b)
    T.__ne__ = lambda a, b: not_equal(a, b)
    T.__lt__ = lambda a, b: less_than(a, b)
    T.__le__ = lambda a, b: less_equal(a, b)
    T.__gt__ = lambda a, b: greater_than(a, b)
    T.__ge__ = lambda a, b: greater_equal(a, b)
    T.__hash__ = object.__hash__
    for name in ("add", "subtract", "multiply", "divide", "matmul", "relu", "sigmoid", "tanh", "softmax", "exp",
                 "log", "sqrt", "square", "abs", "pow", "neg", "mean", "sum", "reshape", "transpose", "cast", "scale",
                 "equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal"):
        setattr(T, name, globals()[name])
    T.astype = cast
    T.T = property(lambda a: transpose(a, list(range(a.ndim))[::-1]))


_install()
