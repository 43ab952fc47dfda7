"""pe.tensor — paddle.* tensor functions in static mode (mean, sum, matmul, reshape, ...).

Each function appends the op Paddle appends (mean, reduce_sum, matmul_v2,
reshape2, transpose2, concat, cast, arg_max, ...) to the current block of
the default main program, with an output Variable named like Paddle's
(<op>_<n>.tmp_<k>) and its shape inferred here (-1 for the batch or any
unknown dim) so later layers can size their parameters. Numbers are
computed by the C kernels when the program runs.
"""
import builtins as _builtins

import numpy as np

from . import _core
from .framework import (DTYPE_ENUM, Variable, _set_eager_seed, convert_dtype, default_main_program,
                        default_startup_program, float_first, has_op, require_op)
from .layer_helper import LayerHelper, check_variable

__all__ = [
    "mean", "sum", "matmul", "reshape", "transpose", "concat", "flatten", "cast", "argmax", "add", "subtract",
    "multiply", "divide", "scale", "topk", "full", "ones", "zeros", "fill_constant", "tanh", "sigmoid", "relu",
    "square_error_cost", "seed", "broadcast_shape", "unsqueeze", "squeeze", "split", "slice", "exp", "log", "sqrt",
    "rsqrt", "square", "abs", "sign", "floor", "ceil", "round", "pow", "clip", "maximum", "minimum", "mod",
    "remainder", "floor_divide", "equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "logical_not", "where",
    "max", "min", "prod", "any", "all",
    "stack", "unstack", "expand", "tile", "assign", "shape", "increment", "cumsum", "gather", "gather_nd", "scatter",
]


# ---- shape helpers -------------------------------------------------------------

def _bcast_dim(a, b):
    if a == 1:
        return b
    if b == 1:
        return a
    if a == -1 or b == -1:
        return _builtins.max(a, b) if _builtins.min(a, b) == -1 and _builtins.max(a, b) != 1 else -1
    if a != b:
        raise _core.InvalidArgumentError("shapes cannot be broadcast: dims %d and %d" % (a, b))
    return a


def broadcast_shape(x_shape, y_shape):
    x, y = list(x_shape), list(y_shape)
    n = _builtins.max(len(x), len(y))
    x = [1] * (n - len(x)) + x
    y = [1] * (n - len(y)) + y
    return [_bcast_dim(a, b) for a, b in zip(x, y)]


def _elementwise_shape(x, y, axis):
    if axis == -1 or len(y.shape) == len(x.shape):
        return broadcast_shape(x.shape, y.shape)
    return list(x.shape)  # Paddle's axis form: Y matches X's dims from axis on


def _norm_axis(axis, ndim, api):
    a = int(axis)
    if a < 0:
        a += ndim
    if not 0 <= a < _builtins.max(ndim, 1):
        raise _core.InvalidArgumentError("%s: axis %d is out of range for rank %d" % (api, axis, ndim))
    return a


def _to_var(v, like, api):
    """A Variable for v: as is, or a fill_constant [1] of like's dtype for a scalar."""
    if isinstance(v, Variable):
        return v
    if isinstance(v, (int, float, np.integer, np.floating)):
        return full([1], float(v), like.dtype)
    raise TypeError("%s: expected a Variable or a number, got %s" % (api, type(v).__name__))


# ---- elementwise -----------------------------------------------------------------

def _elementwise(op_type, x, y, axis=-1, name=None):
    check_variable(x, "x", op_type)
    check_variable(y, "y", op_type)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=_elementwise_shape(x, y, axis))
    helper.append_op(op_type, {"X": [x], "Y": [y]}, {"Out": [out]}, {"axis": int(axis)})
    return out


def add(x, y, name=None):
    return _elementwise("elementwise_add", x, y, -1, name)


def subtract(x, y, name=None):
    return _elementwise("elementwise_sub", x, y, -1, name)


def multiply(x, y, name=None):
    return _elementwise("elementwise_mul", x, y, -1, name)


def divide(x, y, name=None):
    return _elementwise("elementwise_div", x, y, -1, name)


def _binary_op(x, other, op_type, reverse):
    """Variable operators: a scalar operand becomes a scale op (or a [1] constant);
    integer operands become float32 first where Paddle's rules say (float_first)."""
    number = isinstance(other, (int, float, np.integer, np.floating)) and not isinstance(other, bool)
    if float_first(op_type, x.dtype, other if number else None):
        x = cast(x, "float32")
    if isinstance(other, Variable) and float_first(op_type, other.dtype):
        other = cast(other, "float32")
    if number:
        c = float(other)
        if op_type == "elementwise_add":
            return scale(x, 1.0, c)
        if op_type == "elementwise_sub":
            return scale(x, -1.0, c) if reverse else scale(x, 1.0, -c)
        if op_type == "elementwise_mul":
            return scale(x, c)
        if op_type == "elementwise_div" and not reverse:
            if c == 0:
                raise ZeroDivisionError("Variable / 0")
            return scale(x, 1.0 / c)
    other = _to_var(other, x, op_type)
    a, b = (other, x) if reverse else (x, other)
    return _elementwise(op_type, a, b)


def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, act=None, name=None):
    check_variable(x, "x", "scale")
    helper = LayerHelper("scale", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op("scale", {"X": [x]}, {"Out": [out]},
                     {"scale": float(scale), "bias": float(bias), "bias_after_scale": bool(bias_after_scale)})
    return helper.append_activation(out, act)


def _unary(op_type, x, name=None, attrs=None):
    check_variable(x, "x", op_type)
    require_op(op_type, "pe." + op_type)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op(op_type, {"X": [x]}, {"Out": [out]}, attrs)
    return out


def tanh(x, name=None):
    return _unary("tanh", x, name)


def sigmoid(x, name=None):
    return _unary("sigmoid", x, name)


def relu(x, name=None):
    return _unary("relu", x, name)


# ---- elementwise math (ops/math_unary.c): Paddle's op names and attrs ------------

def exp(x, name=None):
    return _unary("exp", x, name)


def log(x, name=None):
    return _unary("log", x, name)


def sqrt(x, name=None):
    return _unary("sqrt", x, name)


def rsqrt(x, name=None):
    return _unary("rsqrt", x, name)


def square(x, name=None):
    return _unary("square", x, name)


def abs(x, name=None):
    return _unary("abs", x, name)


def sign(x, name=None):
    return _unary("sign", x, name)


def floor(x, name=None):
    return _unary("floor", x, name)


def ceil(x, name=None):
    return _unary("ceil", x, name)


def round(x, name=None):
    """Rounds half away from zero (Paddle's round; torch.round rounds half to even)."""
    return _unary("round", x, name)


def pow(x, y, name=None):
    """x ** y: Paddle's `pow` op (attr factor = y) for a number y, elementwise_pow
    (broadcasting) for a Variable y."""
    if isinstance(y, Variable):
        return _elementwise("elementwise_pow", x, y, -1, name)
    if isinstance(y, bool) or not isinstance(y, (int, float, np.integer, np.floating)):
        raise TypeError("pe.pow: y must be a float or int, got %s" % type(y).__name__)
    return _unary("pow", x, name, {"factor": float(y)})


# ---- binary math, compare and logical ops (ops/elementwise.c) ---------------------

def maximum(x, y, name=None):
    """Elementwise max (elementwise_max); a tie's gradient goes to y, as Paddle's."""
    return _elementwise("elementwise_max", x, y, -1, name)


def minimum(x, y, name=None):
    """Elementwise min (elementwise_min); a tie's gradient goes to y, as Paddle's."""
    return _elementwise("elementwise_min", x, y, -1, name)


def mod(x, y, name=None):
    """x % y with the sign of y (Python's %; elementwise_mod). No gradient."""
    return _elementwise("elementwise_mod", x, y, -1, name)


remainder = mod


def floor_divide(x, y, name=None):
    """x // y rounded toward -inf (elementwise_floordiv). No gradient."""
    return _elementwise("elementwise_floordiv", x, y, -1, name)


def _bool_op(op_type, inputs, shape, attrs=None, out=None, name=None):
    """Appends op_type (inputs {slot: Variable}) with a bool Out of `shape` (or into `out`)."""
    for slot, v in inputs.items():
        check_variable(v, slot.lower(), op_type)
    require_op(op_type, "pe." + op_type)
    helper = LayerHelper(op_type, name)
    if out is None:
        out = helper.create_variable_for_type_inference("bool", shape=shape, stop_gradient=True)
    helper.append_op(op_type, {k: [v] for k, v in inputs.items()}, {"Out": [out]}, attrs)
    out.stop_gradient = True
    return out


def _compare(op_type, x, y, name=None, out=None, attrs=None):
    check_variable(x, "x", op_type)
    y = _to_var(y, x, op_type)
    return _bool_op(op_type, {"X": x, "Y": y}, broadcast_shape(x.shape, y.shape), attrs, out, name)


def equal(x, y, name=None):
    return _compare("equal", x, y, name)


def not_equal(x, y, name=None):
    return _compare("not_equal", x, y, name)


def less_than(x, y, name=None):
    return _compare("less_than", x, y, name)


def less_equal(x, y, name=None):
    return _compare("less_equal", x, y, name)


def greater_than(x, y, name=None):
    return _compare("greater_than", x, y, name)


def greater_equal(x, y, name=None):
    return _compare("greater_equal", x, y, name)


def _logical(op_type, x, y=None, out=None, name=None):
    if y is None:
        return _bool_op(op_type, {"X": x}, x.shape, out=out, name=name)
    check_variable(y, "y", op_type)
    return _bool_op(op_type, {"X": x, "Y": y}, broadcast_shape(x.shape, y.shape), out=out, name=name)


def logical_and(x, y, out=None, name=None):
    return _logical("logical_and", x, y, out, name)


def logical_or(x, y, out=None, name=None):
    return _logical("logical_or", x, y, out, name)


def logical_xor(x, y, out=None, name=None):
    return _logical("logical_xor", x, y, out, name)


def logical_not(x, out=None, name=None):
    return _logical("logical_not", x, None, out, name)


def _zeros_like(x):
    helper = LayerHelper("fill_any_like")
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape, stop_gradient=True)
    helper.append_op("fill_any_like", {"X": [x]}, {"Out": [out]}, {"value": 0.0, "dtype": -1})
    return out


def where(condition, x, y, name=None):
    """x where condition, else y (the `where` op; gradients reach x and y).
    Shapes that differ are broadcast first as Paddle's API does: adding the
    zeros of the broadcast shape (fill_any_like + elementwise_add)."""
    check_variable(condition, "condition", "where")
    check_variable(x, "x", "where")
    y = _to_var(y, x, "where")
    if condition.dtype != "bool":
        raise TypeError("pe.where: condition must be bool, got %s" % condition.dtype)
    shape = broadcast_shape(broadcast_shape(condition.shape, x.shape), y.shape)
    if not (list(condition.shape) == list(x.shape) == list(y.shape)):
        c = cast(condition, x.dtype)
        zeros = add(add(_zeros_like(x), _zeros_like(y)), _zeros_like(c))
        x, y, condition = add(x, zeros), add(y, zeros), cast(add(c, zeros), "bool")
    require_op("where", "pe.where")
    helper = LayerHelper("where", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=shape)
    helper.append_op("where", {"Condition": [condition], "X": [x], "Y": [y]}, {"Out": [out]})
    return out


_FLT_MAX = float(np.finfo(np.float32).max)


def clip(x, min=None, max=None, name=None):
    """Clamps x to [min, max]; None means the float32 limit (as Paddle)."""
    lo, hi = -_FLT_MAX if min is None else min, _FLT_MAX if max is None else max
    for what, v in (("min", lo), ("max", hi)):
        if isinstance(v, Variable):
            raise _core.UnsupportedError("pe.clip: %s must be a number (a Variable %s, clip's %s input, is not "
                                         "supported yet)" % (what, what, what.capitalize()))
    return _unary("clip", x, name, {"min": float(lo), "max": float(hi)})


# ---- constants -----------------------------------------------------------------

def fill_constant(shape, dtype, value, force_cpu=False, out=None, name=None):
    dtype = convert_dtype(dtype)
    shape = [int(d) for d in shape]
    helper = LayerHelper("fill_constant", name)
    if out is None:
        out = helper.create_variable_for_type_inference(dtype, shape=shape, stop_gradient=True)
    helper.append_op("fill_constant", {}, {"Out": [out]},
                     {"shape": shape, "dtype": DTYPE_ENUM[dtype], "value": float(value)})
    out.stop_gradient = True
    return out


def full(shape, fill_value, dtype=None, name=None):
    return fill_constant(shape, dtype or "float32", fill_value, name=name)


def ones(shape, dtype=None, name=None):
    return fill_constant(shape, dtype or "float32", 1.0, name=name)


def zeros(shape, dtype=None, name=None):
    return fill_constant(shape, dtype or "float32", 0.0, name=name)


# ---- reductions ----------------------------------------------------------------

def _reduce_shape(shape, dims, keepdim, reduce_all):
    nd = len(shape)
    red = set(range(nd)) if reduce_all else {_norm_axis(d, nd, "reduce") for d in dims}
    out = [1 if i in red else s for i, s in enumerate(shape) if keepdim or i not in red]
    return out or [1]


def _axes(axis):
    if axis is None:
        return None
    if isinstance(axis, (int, np.integer)):
        return [int(axis)]
    return [int(a) for a in axis]


def mean(x, axis=None, keepdim=False, name=None):
    """Mean over axis (all elements when None: the `mean` op, output [1])."""
    check_variable(x, "x", "mean")
    axes = _axes(axis)
    if axes is None and not keepdim:
        helper = LayerHelper("mean", name)
        out = helper.create_variable_for_type_inference(x.dtype, shape=[1])
        helper.append_op("mean", {"X": [x]}, {"Out": [out]})
        return out
    return _reduce("reduce_mean", x, axes, keepdim, name)


def _reduce(op, x, axis, keepdim, name, out_dtype=None):
    """reduce_<op> of x over axis (all dims when None), Paddle's attrs."""
    axes = _axes(axis)
    reduce_all = axes is None or len(axes) == len(x.shape)
    helper = LayerHelper(op, name)
    out = helper.create_variable_for_type_inference(out_dtype or x.dtype,
                                                    shape=_reduce_shape(x.shape, axes or [], keepdim, reduce_all))
    helper.append_op(op, {"X": [x]}, {"Out": [out]},
                     {"dim": axes or [0], "keep_dim": bool(keepdim), "reduce_all": reduce_all})
    return out


def sum(x, axis=None, dtype=None, keepdim=False, name=None):
    """Sum over axis (all when None)."""
    check_variable(x, "x", "sum")
    if dtype is not None and convert_dtype(dtype) != x.dtype:
        x = cast(x, dtype)
    return _reduce("reduce_sum", x, axis, keepdim, name)


def max(x, axis=None, keepdim=False, name=None):
    """Maximum over axis (all when None); its gradient goes to every element equal to it (Paddle's)."""
    check_variable(x, "x", "max")
    return _reduce("reduce_max", x, axis, keepdim, name)


def min(x, axis=None, keepdim=False, name=None):
    """Minimum over axis (all when None); its gradient goes to every element equal to it (Paddle's)."""
    check_variable(x, "x", "min")
    return _reduce("reduce_min", x, axis, keepdim, name)


def prod(x, axis=None, keepdim=False, dtype=None, name=None):
    """Product over axis (all when None)."""
    check_variable(x, "x", "prod")
    if dtype is not None and convert_dtype(dtype) != x.dtype:
        x = cast(x, dtype)
    return _reduce("reduce_prod", x, axis, keepdim, name)


def any(x, axis=None, keepdim=False, name=None):
    """Logical or over axis (all when None) of a bool x."""
    check_variable(x, "x", "any")
    return _reduce("reduce_any", x, axis, keepdim, name, "bool")


def all(x, axis=None, keepdim=False, name=None):
    """Logical and over axis (all when None) of a bool x."""
    check_variable(x, "x", "all")
    return _reduce("reduce_all", x, axis, keepdim, name, "bool")


def argmax(x, axis=None, keepdim=False, dtype="int64", name=None):
    check_variable(x, "x", "argmax")
    dtype = convert_dtype(dtype)
    if dtype not in ("int32", "int64"):
        raise _core.InvalidArgumentError("argmax: dtype must be int32 or int64, got %s" % dtype)
    helper = LayerHelper("arg_max", name)
    if axis is None:
        shape, attrs = [1], {"axis": -1, "flatten": True, "keepdims": False}
    else:
        a = _norm_axis(axis, len(x.shape), "argmax")
        shape = _reduce_shape(x.shape, [a], keepdim, False)
        attrs = {"axis": a, "flatten": False, "keepdims": bool(keepdim)}
    attrs["dtype"] = DTYPE_ENUM[dtype]
    out = helper.create_variable_for_type_inference(dtype, shape=shape, stop_gradient=True)
    helper.append_op("arg_max", {"X": [x]}, {"Out": [out]}, attrs)
    return out


def topk(x, k, axis=None, largest=True, sorted=True, name=None):
    """Values and int64 indices of the k largest entries along the last axis."""
    check_variable(x, "x", "topk")
    if axis not in (None, -1, len(x.shape) - 1) or not largest:
        raise _core.UnsupportedError("topk: PE's top_k op works on the last axis, largest first")
    helper = LayerHelper("top_k", name)
    shape = list(x.shape[:-1]) + [int(k)]
    values = helper.create_variable_for_type_inference(x.dtype, shape=shape)
    indices = helper.create_variable_for_type_inference("int64", shape=shape, stop_gradient=True)
    helper.append_op("top_k", {"X": [x]}, {"Out": [values], "Indices": [indices]}, {"k": int(k)})
    return values, indices


# ---- matmul --------------------------------------------------------------------

def matmul(x, y, transpose_x=False, transpose_y=False, name=None):
    """Batched matrix product (matmul_v2) with numpy broadcasting of batch dims."""
    check_variable(x, "x", "matmul")
    check_variable(y, "y", "matmul")
    xs, ys = list(x.shape), list(y.shape)
    if not xs or not ys:
        raise _core.InvalidArgumentError("matmul: operands must have rank >= 1")
    if len(xs) == 1:
        xs = [1] + xs
    if len(ys) == 1:
        ys = ys + [1]
    if transpose_x:
        xs[-2], xs[-1] = xs[-1], xs[-2]
    if transpose_y:
        ys[-2], ys[-1] = ys[-1], ys[-2]
    if xs[-1] > 0 and ys[-2] > 0 and xs[-1] != ys[-2]:
        raise _core.InvalidArgumentError("matmul: inner dims differ: %s x %s (transpose_x=%s, transpose_y=%s)" % (
            list(x.shape), list(y.shape), transpose_x, transpose_y))
    shape = broadcast_shape(xs[:-2], ys[:-2]) + [xs[-2], ys[-1]]
    if len(x.shape) == 1:
        shape.pop(-2)
    if len(y.shape) == 1:
        shape.pop(-1)
    helper = LayerHelper("matmul_v2", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=shape or [1])
    helper.append_op("matmul_v2", {"X": [x], "Y": [y]}, {"Out": [out]},
                     {"trans_x": bool(transpose_x), "trans_y": bool(transpose_y)})
    return out


# ---- shape ops -----------------------------------------------------------------

def _reshape_shape(in_shape, shape):
    """Declared output shape of reshape2: 0 copies the input dim, one -1 is
    inferred when every other dim is known (else it stays -1)."""
    if list(shape).count(-1) > 1:
        raise _core.InvalidArgumentError("reshape: shape %s has more than one -1" % list(shape))
    out = []
    for i, d in enumerate(shape):
        if d == 0:
            if i >= len(in_shape):
                raise _core.InvalidArgumentError("reshape: 0 at position %d copies a dim the input (rank %d) lacks" % (
                    i, len(in_shape)))
            out.append(in_shape[i])
        elif d < -1:
            raise _core.InvalidArgumentError("reshape: invalid dim %d in %s" % (d, list(shape)))
        else:
            out.append(int(d))
    if -1 in shape:
        k = list(shape).index(-1)
        rest = [d for i, d in enumerate(out) if i != k]
        if _builtins.all(d >= 0 for d in in_shape) and _builtins.all(d >= 0 for d in rest):
            total, part = int(np.prod(in_shape)), int(np.prod(rest))
            if part == 0 or total % part:
                raise _core.InvalidArgumentError("reshape: cannot reshape %s into %s" % (list(in_shape), list(shape)))
            out[k] = total // part
    elif (_builtins.all(d >= 0 for d in in_shape) and _builtins.all(d >= 0 for d in out)
          and int(np.prod(in_shape)) != int(np.prod(out))):
        raise _core.InvalidArgumentError("reshape: cannot reshape %s into %s" % (list(in_shape), list(shape)))
    return out


def reshape(x, shape, name=None):
    """reshape2: 0 copies the input dim, -1 is inferred."""
    check_variable(x, "x", "reshape")
    if isinstance(shape, Variable):
        raise _core.UnsupportedError("reshape: a shape given as a Variable is not supported; pass a list of ints")
    shape = [int(d) for d in shape]
    helper = LayerHelper("reshape2", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=_reshape_shape(list(x.shape), shape))
    xshape = helper.create_variable_for_type_inference(x.dtype, shape=[0] + list(x.shape), stop_gradient=True)
    helper.append_op("reshape2", {"X": [x]}, {"Out": [out], "XShape": [xshape]}, {"shape": shape})
    return out


def _xshape_op(op_type, x, shape, attrs, name, api):
    """An op with outputs Out and XShape (the grad's record of x's shape)."""
    require_op(op_type, api)
    helper = LayerHelper(api.split(".")[-1], name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=shape)
    xshape = helper.create_variable_for_type_inference(x.dtype, shape=[0] + list(x.shape), stop_gradient=True)
    helper.append_op(op_type, {"X": [x]}, {"Out": [out], "XShape": [xshape]}, attrs)
    return out


def flatten(x, start_axis=0, stop_axis=-1, name=None):
    """Flattens dims start_axis..stop_axis into one (flatten_contiguous_range)."""
    check_variable(x, "x", "flatten")
    nd = len(x.shape)
    if nd == 0:
        return reshape(x, [1], name)
    s = _norm_axis(start_axis, nd, "flatten")
    e = _norm_axis(stop_axis, nd, "flatten")
    if s > e:
        raise _core.InvalidArgumentError("flatten: start_axis %d is after stop_axis %d" % (start_axis, stop_axis))
    mid = x.shape[s:e + 1]
    merged = -1 if _builtins.any(d < 0 for d in mid) else int(np.prod(mid))
    shape = list(x.shape[:s]) + [merged] + list(x.shape[e + 1:])
    if not has_op("flatten_contiguous_range"):  # older engines: the same as a reshape2
        tail = list(x.shape[e + 1:])
        if _builtins.any(d < 0 for d in tail):
            raise _core.UnsupportedError("flatten: unknown dims after stop_axis need flatten_contiguous_range")
        return reshape(x, [0] * s + [merged] + tail, name)
    return _xshape_op("flatten_contiguous_range", x, shape, {"start_axis": s, "stop_axis": e}, name, "pe.flatten")


def unsqueeze(x, axis, name=None):
    """Inserts size-1 dims at axis (unsqueeze2)."""
    check_variable(x, "x", "unsqueeze")
    axes = _axes(axis)
    shape = list(x.shape)
    for a in axes:
        a = a if a >= 0 else a + len(shape) + 1
        if not 0 <= a <= len(shape):
            raise _core.InvalidArgumentError("unsqueeze: axis %d is out of range for %s" % (a, list(x.shape)))
        shape.insert(a, 1)
    if not has_op("unsqueeze2") and shape.count(-1) <= 1:
        return reshape(x, shape, name)
    return _xshape_op("unsqueeze2", x, shape, {"axes": axes}, name, "pe.unsqueeze")


def squeeze(x, axis=None, name=None):
    """Removes size-1 dims (all of them, or those in axis) (squeeze2)."""
    check_variable(x, "x", "squeeze")
    nd = len(x.shape)
    axes = _axes(axis)
    drop = ({_norm_axis(a, nd, "squeeze") for a in axes} if axes is not None
            else {i for i, d in enumerate(x.shape) if d == 1})
    shape = [d for i, d in enumerate(x.shape) if not (i in drop and d == 1)]
    if not has_op("squeeze2") and shape.count(-1) <= 1:
        return reshape(x, shape or [1], name)
    return _xshape_op("squeeze2", x, shape, {"axes": axes or []}, name, "pe.squeeze")


def split(x, num_or_sections, axis=0, name=None):
    """Splits x along axis into num equal parts or the given section sizes (-1: the rest)."""
    check_variable(x, "x", "split")
    require_op("split", "pe.split")
    a = _norm_axis(axis, len(x.shape), "split")
    dim = x.shape[a]
    if isinstance(num_or_sections, (int, np.integer)):
        num = int(num_or_sections)
        if num < 1 or (dim >= 0 and dim % num):
            raise _core.InvalidArgumentError("split: dim %d of %s is not divisible into %d parts" % (
                a, list(x.shape), num))
        sizes, attrs = [dim // num if dim >= 0 else -1] * num, {"num": num, "axis": a}
    else:
        sizes = [int(v) for v in num_or_sections]
        if sizes.count(-1) > 1:
            raise _core.InvalidArgumentError("split: at most one section may be -1")
        if -1 in sizes and dim >= 0:
            sizes[sizes.index(-1)] = dim - (int(np.sum(sizes)) + 1)
        if dim >= 0 and int(np.sum(sizes)) != dim:
            raise _core.InvalidArgumentError("split: sections %s do not add up to dim %d (%d) of %s" % (
                list(num_or_sections), a, dim, list(x.shape)))
        attrs = {"sections": [int(v) for v in num_or_sections], "axis": a, "num": 0}
    helper = LayerHelper("split", name)
    outs = []
    for sz in sizes:
        shape = list(x.shape)
        shape[a] = sz
        outs.append(helper.create_variable_for_type_inference(x.dtype, shape=shape))
    helper.append_op("split", {"X": [x]}, {"Out": outs}, attrs)
    return outs


def slice(input, axes, starts, ends):
    """input[starts:ends] along axes (slice; negative indices count from the end)."""
    check_variable(input, "input", "slice")
    require_op("slice", "pe.slice")
    axes, starts, ends = [int(a) for a in axes], [int(v) for v in starts], [int(v) for v in ends]
    if not len(axes) == len(starts) == len(ends):
        raise _core.InvalidArgumentError("slice: axes, starts and ends must have the same length")
    shape = list(input.shape)
    for a, s0, e0 in zip(axes, starts, ends):
        a = _norm_axis(a, len(shape), "slice")
        d = shape[a]
        if d < 0:
            shape[a] = -1
            continue
        s1 = _builtins.max(0, _builtins.min(d, s0 + d if s0 < 0 else s0))
        e1 = _builtins.max(0, _builtins.min(d, e0 + d if e0 < 0 else e0))
        shape[a] = _builtins.max(0, e1 - s1)
    helper = LayerHelper("slice")
    out = helper.create_variable_for_type_inference(input.dtype, shape=shape)
    helper.append_op("slice", {"Input": [input]}, {"Out": [out]},
                     {"axes": axes, "starts": starts, "ends": ends, "infer_flags": [1] * len(axes),
                      "decrease_axis": []})
    return out


def transpose(x, perm, name=None):
    check_variable(x, "x", "transpose")
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(x.shape))):
        raise _core.InvalidArgumentError("transpose: perm %s is not a permutation of the %d dims of %s" % (
            perm, len(x.shape), x.name))
    helper = LayerHelper("transpose2", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=[x.shape[p] for p in perm])
    xshape = helper.create_variable_for_type_inference(x.dtype, shape=[0] + list(x.shape), stop_gradient=True)
    helper.append_op("transpose2", {"X": [x]}, {"Out": [out], "XShape": [xshape]}, {"axis": perm})
    return out


def concat(x, axis=0, name=None):
    if isinstance(x, Variable) or not x:
        raise TypeError("concat: x must be a non-empty list of Variables")
    for i, v in enumerate(x):
        check_variable(v, "x[%d]" % i, "concat")
    if isinstance(axis, Variable):
        raise _core.UnsupportedError("concat: axis must be an int")
    a = _norm_axis(axis, len(x[0].shape), "concat")
    shape = list(x[0].shape)
    dims = [v.shape[a] for v in x]
    shape[a] = -1 if _builtins.any(d < 0 for d in dims) else int(np.sum(dims))
    helper = LayerHelper("concat", name)
    out = helper.create_variable_for_type_inference(x[0].dtype, shape=shape)
    helper.append_op("concat", {"X": list(x)}, {"Out": [out]}, {"axis": a})
    return out


def stack(x, axis=0, name=None):
    """Joins the alike variables of x along a new axis (stack; axis in [-(rank+1), rank])."""
    if isinstance(x, Variable) or not x:
        raise TypeError("stack: x must be a non-empty list of Variables")
    for i, v in enumerate(x):
        check_variable(v, "x[%d]" % i, "stack")
    a = _norm_axis(axis, len(x[0].shape) + 1, "stack")
    shape = list(x[0].shape)
    shape.insert(a, len(x))
    helper = LayerHelper("stack", name)
    out = helper.create_variable_for_type_inference(x[0].dtype, shape=shape)
    helper.append_op("stack", {"X": list(x)}, {"Y": [out]}, {"axis": a})
    return out


def unstack(x, axis=0, num=None):
    """Cuts x along axis into its dims[axis] slices, that axis removed (unstack)."""
    check_variable(x, "x", "unstack")
    a = _norm_axis(axis, len(x.shape), "unstack")
    n = x.shape[a] if num is None else int(num)
    if n < 0:
        raise _core.InvalidArgumentError("unstack: dim %d of %s is unknown: give num" % (a, list(x.shape)))
    helper = LayerHelper("unstack")
    shape = [d for i, d in enumerate(x.shape) if i != a]
    outs = [helper.create_variable_for_type_inference(x.dtype, shape=shape) for _ in range(n)]
    helper.append_op("unstack", {"X": [x]}, {"Y": outs}, {"axis": a, "num": n})
    return outs


def _int_list(v, api, what):
    if isinstance(v, Variable) or _builtins.any(isinstance(e, Variable) for e in v):
        raise _core.UnsupportedError("%s: %s must be a list of ints (a Variable is not supported yet)" % (api, what))
    return [int(e) for e in v]


def expand(x, shape, name=None):
    """Broadcasts x's size-1 dims to shape (-1 keeps x's dim; leading dims may be added) (expand_v2)."""
    check_variable(x, "x", "expand")
    shape = _int_list(shape, "expand", "shape")
    lead = len(shape) - len(x.shape)
    if lead < 0:
        raise _core.InvalidArgumentError("expand: shape %s has fewer dims than x %s" % (shape, list(x.shape)))
    out_shape = [x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape)]
    helper = LayerHelper("expand_v2", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=out_shape)
    helper.append_op("expand_v2", {"X": [x]}, {"Out": [out]}, {"shape": shape})
    return out


def tile(x, repeat_times, name=None):
    """Repeats x repeat_times[i] times along dim i (leading 1s added to the shorter) (tile)."""
    check_variable(x, "x", "tile")
    reps = _int_list(repeat_times, "tile", "repeat_times")
    n = _builtins.max(len(reps), len(x.shape))
    xs, rs = [1] * (n - len(x.shape)) + list(x.shape), [1] * (n - len(reps)) + reps
    helper = LayerHelper("tile", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=[d * r if d >= 0 else -1 for d, r in zip(xs, rs)])
    helper.append_op("tile", {"X": [x]}, {"Out": [out]}, {"repeat_times": reps})
    return out


def assign(x, output=None):
    """Copies x into output (a new variable when None) (assign; a numpy array: assign_value)."""
    helper = LayerHelper("assign")
    if not isinstance(x, Variable):
        a = np.asarray(x)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        dtype = convert_dtype(a.dtype)
        if output is None:
            output = helper.create_variable_for_type_inference(dtype, shape=list(a.shape))
        key = {"float32": "fp32_values", "int32": "int32_values", "int64": "int64_values"}.get(dtype)
        if key is None:
            raise _core.UnsupportedError("assign: a numpy array of dtype %s (float32, int32 or int64 only)" % dtype)
        vals = [float(v) for v in a.ravel()] if key == "fp32_values" else [int(v) for v in a.ravel()]
        helper.append_op("assign_value", {}, {"Out": [output]},
                         {"shape": list(a.shape), "dtype": DTYPE_ENUM[dtype], key: vals})
        return output
    if output is None:
        output = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op("assign", {"X": [x]}, {"Out": [output]})
    return output


def shape(input):
    """input's dims as an int32 [rank] variable (shape)."""
    check_variable(input, "input", "shape")
    helper = LayerHelper("shape")
    out = helper.create_variable_for_type_inference("int32", shape=[len(input.shape)], stop_gradient=True)
    helper.append_op("shape", {"Input": [input]}, {"Out": [out]})
    return out


def increment(x, value=1.0, name=None):
    """x += value in place, x one element (increment, Out = X); returns x."""
    check_variable(x, "x", "increment")
    LayerHelper("increment", name).append_op("increment", {"X": [x]}, {"Out": [x]}, {"step": float(value)})
    return x


def cumsum(x, axis=None, dtype=None, name=None):
    """Cumulative sum along axis (of the flattened x when None) (cumsum)."""
    check_variable(x, "x", "cumsum")
    if dtype is not None and convert_dtype(dtype) != x.dtype:
        x = cast(x, dtype)
    helper = LayerHelper("cumsum", name)
    if axis is None:
        n = int(np.prod(x.shape)) if _builtins.all(d >= 0 for d in x.shape) else -1
        out = helper.create_variable_for_type_inference(x.dtype, shape=[n])
        attrs = {"flatten": True, "axis": -1}
    else:
        out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
        attrs = {"axis": _norm_axis(axis, len(x.shape), "cumsum") - len(x.shape), "flatten": False}
    helper.append_op("cumsum", {"X": [x]}, {"Out": [out]}, attrs)
    return out


def cast(x, dtype):
    check_variable(x, "x", "cast")
    dtype = convert_dtype(dtype)
    helper = LayerHelper("cast")
    out = helper.create_variable_for_type_inference(dtype, shape=x.shape, stop_gradient=x.stop_gradient)
    helper.append_op("cast", {"X": [x]}, {"Out": [out]},
                     {"in_dtype": DTYPE_ENUM[x.dtype], "out_dtype": DTYPE_ENUM[dtype]})
    return out


def square_error_cost(input, label):
    check_variable(input, "input", "square_error_cost")
    check_variable(label, "label", "square_error_cost")
    helper = LayerHelper("square_error_cost")
    out = helper.create_variable_for_type_inference(input.dtype, shape=input.shape)
    helper.append_op("square_error_cost", {"X": [input], "Y": [label]}, {"Out": [out]})
    return out


def seed(s):
    """paddle.seed: sets the random_seed of the default main and startup programs,
    and the seed of eager mode's random ops (pe.randn, pe.rand)."""
    default_main_program().random_seed = int(s)
    default_startup_program().random_seed = int(s)
    _set_eager_seed(s)


# ---- Variable's Python operators (Paddle's math_op_patch) ----------------------

def _install_variable_operators(cls):
    """Gives Variable (and so Parameter) its operators: each builds the op the
    matching function of this module builds. Installed here, at import, so
    that pe.framework (which defines Variable) never imports pe.tensor."""

    def _binary(self, other, op, reverse=False):
        return _binary_op(self, other, op, reverse)

    def binary(op, reverse=False):
        def method(self, o):
            return self._binary(o, op, reverse)
        return method

    cls._binary = _binary
    cls.__add__ = binary("elementwise_add")
    cls.__radd__ = binary("elementwise_add", True)
    cls.__sub__ = binary("elementwise_sub")
    cls.__rsub__ = binary("elementwise_sub", True)
    cls.__mul__ = binary("elementwise_mul")
    cls.__rmul__ = binary("elementwise_mul", True)
    cls.__truediv__ = binary("elementwise_div")
    cls.__rtruediv__ = binary("elementwise_div", True)
    cls.__pow__ = lambda self, o: pow(self, o)
    cls.__mod__ = binary("elementwise_mod")
    cls.__rmod__ = binary("elementwise_mod", True)
    cls.__floordiv__ = binary("elementwise_floordiv")
    cls.__rfloordiv__ = binary("elementwise_floordiv", True)
    cls.__lt__ = lambda self, o: less_than(self, o)
    cls.__le__ = lambda self, o: less_equal(self, o)
    cls.__gt__ = lambda self, o: greater_than(self, o)
    cls.__ge__ = lambda self, o: greater_equal(self, o)
    cls.__neg__ = lambda self: scale(self, -1.0)
    cls.__matmul__ = lambda self, o: matmul(self, o)
    cls.astype = lambda self, dtype: cast(self, dtype)
    cls.reshape = lambda self, shape: reshape(self, shape)
    cls.mean = lambda self, axis=None, keepdim=False: mean(self, axis, keepdim)
    cls.sum = lambda self, axis=None, keepdim=False: sum(self, axis, keepdim=keepdim)


_install_variable_operators(Variable)


# ---- index ops -------------------------------------------------------------------

def _check_index(index, what, api):
    check_variable(index, what, api)
    if index.dtype not in ("int32", "int64"):
        raise TypeError("%s: %s must be int32 or int64, got %s" % (api, what, index.dtype))


def gather(x, index, axis=None, name=None):
    """x's slices along axis (0 when None) at index, a 1-D (or [N, 1]) int tensor (gather)."""
    check_variable(x, "x", "gather")
    _check_index(index, "index", "gather")
    if isinstance(axis, Variable):
        raise _core.UnsupportedError("gather: axis must be an int (a Variable is not supported yet)")
    a = _norm_axis(0 if axis is None else axis, len(x.shape), "gather")
    n = index.shape[0] if index.shape else -1
    helper = LayerHelper("gather", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=[n if i == a else d for i, d in enumerate(x.shape)])
    helper.append_op("gather", {"X": [x], "Index": [index]}, {"Out": [out]}, {"axis": a})
    return out


def gather_nd(x, index, name=None):
    """x at the index tuples in index's last dim: [*index.shape[:-1], *x.shape[K:]] (gather_nd)."""
    check_variable(x, "x", "gather_nd")
    _check_index(index, "index", "gather_nd")
    k = index.shape[-1] if index.shape else -1
    if k < 0 or k > len(x.shape):
        raise _core.InvalidArgumentError("gather_nd: the last dim of index %s must be known and at most the rank of "
                                         "x %s" % (list(index.shape), list(x.shape)))
    helper = LayerHelper("gather_nd", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=list(index.shape[:-1]) + list(x.shape[k:]))
    helper.append_op("gather_nd", {"X": [x], "Index": [index]}, {"Out": [out]})
    return out


def scatter(x, index, updates, overwrite=True, name=None):
    """x with rows index replaced by updates' rows (overwrite: the later duplicate wins;
    otherwise the rows are zeroed, then every update added) (scatter)."""
    check_variable(x, "x", "scatter")
    _check_index(index, "index", "scatter")
    check_variable(updates, "updates", "scatter")
    helper = LayerHelper("scatter", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op("scatter", {"X": [x], "Ids": [index], "Updates": [updates]}, {"Out": [out]},
                     {"overwrite": bool(overwrite)})
    return out
