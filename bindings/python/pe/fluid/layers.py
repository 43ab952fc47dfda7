"""fluid.layers — Paddle 1.x layer functions, each a wrapper of pe.static /
pe.nn.functional / pe.tensor with the 1.x argument names.

data() prepends the batch dim (-1) unless the shape already has a None/-1
dim or append_batch_size=False, as fluid did; declaring the same feed var
again (same shape and dtype) gives the existing var, as in 1.x. lod_level > 0
declares a sequence input: its fed values are LoDTensors
(fluid.create_lod_tensor, or DataFeeder over lists of variable-length sequences).
"""
import numpy as np

from .. import _core
from .. import tensor as _t
from .. import metric as _metric
from ..framework import DTYPE_ENUM as _DTYPE_ENUM, Variable, convert_dtype, default_main_program
from ..layer_helper import LayerHelper, check_variable
from ..nn import functional as F
from ..nn.initializer import XavierUniform
from ..static import nn as _snn
from .learning_rate_scheduler import (exponential_decay, natural_exp_decay, inverse_time_decay,  # noqa: F401
                                      polynomial_decay, piecewise_decay, noam_decay, cosine_decay, linear_lr_warmup)

__all__ = ["sequence_pool", "sequence_softmax", "sequence_expand", "sequence_mask", "sequence_first_step",
           "sequence_last_step", "sequence_conv", "data", "fc", "conv2d", "pool2d", "batch_norm", "embedding", "dropout", "relu", "sigmoid", "tanh",
           "softmax", "mean", "reduce_sum", "reduce_mean", "square_error_cost", "cross_entropy",
           "softmax_with_cross_entropy", "accuracy", "concat", "reshape", "transpose", "flatten", "elementwise_add",
           "elementwise_sub", "elementwise_mul", "elementwise_div", "fill_constant", "cast", "scale", "matmul",
           "topk", "argmax", "split", "sums", "exp", "log", "sqrt", "rsqrt", "square", "abs", "sign", "floor", "ceil",
           "round", "pow", "clip", "relu6", "elu", "softplus", "swish", "hard_sigmoid", "selu", "elementwise_max",
           "elementwise_min", "elementwise_pow", "elementwise_mod", "elementwise_floordiv", "equal", "not_equal",
           "less_than", "less_equal", "greater_than", "greater_equal", "logical_and", "logical_or", "logical_xor",
           "logical_not", "where",
           "reduce_max",
           "reduce_min", "reduce_prod", "reduce_any", "reduce_all", "stack", "unstack", "expand", "assign", "shape",
           "increment", "cumsum", "gather", "gather_nd", "scatter", "one_hot", "cos_sim",
           "sigmoid_cross_entropy_with_logits", "label_smooth", "pad", "pad2d", "conv2d_transpose", "group_norm",
           "instance_norm", "image_resize", "resize_nearest", "resize_bilinear",
           "exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay", "piecewise_decay",
           "noam_decay", "cosine_decay", "linear_lr_warmup", "squeeze", "unsqueeze", "slice", "zeros", "ones",
           "zeros_like", "ones_like", "leaky_relu", "mul", "layer_norm", "uniform_random", "gaussian_random",
           "create_parameter", "create_global_var", "mse_loss", "log_loss", "huber_loss", "l2_normalize"]


def data(name, shape, append_batch_size=True, dtype="float32", lod_level=0, type=None, stop_gradient=True):
    """A feed variable; [-1] + shape unless shape has a None/-1 dim or append_batch_size=False."""
    if not isinstance(name, str):
        raise TypeError("fluid.layers.data: name must be a str, got %s" % type(name).__name__)
    if not isinstance(lod_level, (int, np.integer)) or not 0 <= lod_level <= 8:
        raise _core.InvalidArgumentError("fluid.layers.data('%s'): lod_level=%r: expected an int in 0..8"
                                         % (name, lod_level))
    shape = [-1 if d is None else int(d) for d in shape]
    if append_batch_size and all(d >= 0 for d in shape):
        shape = [-1] + shape
    block = default_main_program().global_block()
    dtype = convert_dtype(dtype)
    if name in block.vars:
        # fluid 1.x: declaring a feed var again gives the same var when the shape and dtype agree
        old = block.vars[name]
        if not getattr(old, "is_data", False) or list(old.shape) != shape or old.dtype != dtype:
            raise _core.InvalidArgumentError(
                "fluid.layers.data: variable %s already exists in the main program as %s %s %s; redeclared as "
                "data %s %s" % (name, "data" if getattr(old, "is_data", False) else "a non-feed var",
                                list(old.shape), old.dtype, shape, dtype))
        return old
    v = block.create_var(name=name, shape=shape, dtype=dtype, persistable=False,
                         stop_gradient=stop_gradient)
    v.is_data = True
    v.lod_level = int(lod_level)
    return v


def fc(input, size, num_flatten_dims=1, param_attr=None, bias_attr=None, act=None, is_test=False, name=None):
    return _snn.fc(input, size, num_flatten_dims=num_flatten_dims, weight_attr=param_attr, bias_attr=bias_attr,
                   activation=act, name=name)


conv2d = _snn.conv2d
conv2d_transpose = _snn.conv2d_transpose
batch_norm = _snn.batch_norm
group_norm = _snn.group_norm
instance_norm = _snn.instance_norm


def _embedding(op_type, fn, input, size, is_sparse, is_distributed, padding_idx, param_attr, dtype):
    """An embedding layer of Paddle 1.x: lookup_table (ids [..., 1] -> [..., D])
    or lookup_table_v2 (ids of any shape -> ids.shape + [D]); padding_idx < 0
    counts from the end of the table, as 1.x. is_sparse=True marks the op
    (its is_sparse attr): the optimizer then trains the table with the dense
    gradient of the whole table, Paddle's update of a sparse table (see
    passes/optimizer.c check_sparse_table for the optimizers it refuses)."""
    check_variable(input, "input", fn)
    if not isinstance(size, (list, tuple)) or len(size) != 2:
        raise _core.InvalidArgumentError("%s: size must be [vocabulary size, embedding dim], got %r" % (fn, size))
    if is_distributed:
        raise _core.UnsupportedError("%s(is_distributed=True): a table split over parameter servers (Paddle's "
                                     "distributed lookup table) is not supported; use is_distributed=False" % fn)
    if op_type == "lookup_table" and (not input.shape or input.shape[-1] != 1):
        raise _core.InvalidArgumentError("%s: input %s is %s; it takes ids [..., 1] (fluid.embedding takes any "
                                         "shape)" % (fn, input.name, list(input.shape)))
    size = [int(size[0]), int(size[1])]
    pad = F._padding_idx(padding_idx, size[0], fn)
    helper = LayerHelper("embedding")
    w = helper.create_parameter(param_attr, size, convert_dtype(dtype), default_initializer=XavierUniform())
    ids_dims = list(input.shape[:-1]) if op_type == "lookup_table" else list(input.shape)
    out = helper.create_variable_for_type_inference(w.dtype, shape=ids_dims + [size[1]])
    helper.append_op(op_type, {"Ids": [input], "W": [w]}, {"Out": [out]},
                     {"padding_idx": pad, "is_sparse": bool(is_sparse)})
    return out


def embedding(input, size, is_sparse=False, is_distributed=False, padding_idx=None, param_attr=None,
              dtype="float32"):
    """1.x's fluid.layers.embedding, the lookup_table op: ids [..., 1] ->
    [..., size[1]] (fluid.embedding, lookup_table_v2, keeps the last dim)."""
    return _embedding("lookup_table", "fluid.layers.embedding", input, size, is_sparse, is_distributed, padding_idx,
                      param_attr, dtype)


def pool2d(input, pool_size=-1, pool_type="max", pool_stride=1, pool_padding=0, global_pooling=False,
           use_cudnn=True, ceil_mode=False, name=None, exclusive=True, data_format="NCHW"):
    check_variable(input, "input", "pool2d")
    if pool_type not in ("max", "avg"):
        raise _core.InvalidArgumentError("pool2d: pool_type must be 'max' or 'avg', got %r" % (pool_type,))
    if global_pooling:
        hw = list(input.shape[1:3] if data_format == "NHWC" else input.shape[2:])
        if len(input.shape) != 4 or min(hw) < 0:
            raise _core.InvalidArgumentError("pool2d(global_pooling=True): input %s needs known H and W, got %s"
                                             % (input.name, list(input.shape)))
        pool_size, pool_stride, pool_padding = hw, 1, 0
    elif pool_size == -1:
        raise _core.InvalidArgumentError("pool2d: pool_size is required unless global_pooling=True")
    return F._pool(input, pool_type, pool_size, pool_stride, pool_padding, ceil_mode, exclusive, data_format, name,
                   "pool2d")


def dropout(x, dropout_prob, is_test=False, seed=None, name=None, dropout_implementation="downgrade_in_infer"):
    if seed is not None:
        raise _core.UnsupportedError("fluid.layers.dropout: a per-op seed is not supported; use pe.seed()")
    return F.dropout(x, dropout_prob, training=not is_test, mode=dropout_implementation, name=name)


def relu(x, name=None):
    return F.relu(x, name)


def sigmoid(x, name=None):
    return F.sigmoid(x, name)


def tanh(x, name=None):
    return F.tanh(x, name)


# the math layers: the same (x, name=None) signature in 1.x as in pe.*
exp, log, sqrt, rsqrt, square, abs, sign = _t.exp, _t.log, _t.sqrt, _t.rsqrt, _t.square, _t.abs, _t.sign
floor, ceil, round = _t.floor, _t.ceil, _t.round


def pow(x, factor=1.0, name=None):
    return _t.pow(x, factor, name)


def clip(x, min, max, name=None):
    return _t.clip(x, min, max, name)


def relu6(x, threshold=6.0, name=None):
    return F._act("relu6", x, name, {"threshold": float(threshold)})


def elu(x, alpha=1.0, name=None):
    return F.elu(x, alpha, name)


def softplus(x, name=None):
    return F.softplus(x, name=name)


def swish(x, beta=1.0, name=None):
    return F._act("swish", x, name, {"beta": float(beta)})


def hard_sigmoid(x, slope=0.2, offset=0.5, name=None):
    return F.hardsigmoid(x, slope, offset, name)


def selu(x, scale=None, alpha=None, name=None):
    attrs = {}
    if scale is not None:
        attrs["scale"] = float(scale)
    if alpha is not None:
        attrs["alpha"] = float(alpha)
    return F._act("selu", x, name, attrs)


def softmax(input, use_cudnn=False, name=None, axis=-1):
    return F.softmax(input, axis=axis, name=name)


def mean(x, name=None):
    return _t.mean(x, name=name)


def _reduce_layer(fn):
    """fluid.layers.reduce_<op>(input, dim=None, keep_dim=False, name=None) over pe.<fn>."""
    def layer(input, dim=None, keep_dim=False, name=None):
        return fn(input, axis=dim, keepdim=keep_dim, name=name)
    layer.__name__ = "reduce_" + fn.__name__
    return layer


reduce_sum, reduce_mean = _reduce_layer(_t.sum), _reduce_layer(_t.mean)
reduce_max, reduce_min, reduce_prod = _reduce_layer(_t.max), _reduce_layer(_t.min), _reduce_layer(_t.prod)
reduce_any, reduce_all = _reduce_layer(_t.any), _reduce_layer(_t.all)


def square_error_cost(input, label):
    return _t.square_error_cost(input, label)


def cross_entropy(input, label, soft_label=False, ignore_index=-100):
    """Cross entropy of probabilities (fluid's; softmax_with_cross_entropy takes logits): [N, 1]."""
    return F.cross_entropy(input, label, ignore_index=ignore_index, reduction="none", soft_label=soft_label,
                           use_softmax=False)


def softmax_with_cross_entropy(logits, label, soft_label=False, ignore_index=-100, numeric_stable_mode=True,
                               return_softmax=False, axis=-1):
    return F.softmax_with_cross_entropy(logits, label, soft_label, ignore_index, numeric_stable_mode,
                                        return_softmax, axis)


def accuracy(input, label, k=1, correct=None, total=None):
    return _metric.accuracy(input, label, k=k, correct=correct, total=total)


def concat(input, axis=0, name=None):
    return _t.concat(input, axis=axis, name=name)


def reshape(x, shape, actual_shape=None, act=None, inplace=False, name=None):
    if actual_shape is not None:
        raise _core.UnsupportedError("fluid.layers.reshape: actual_shape (a shape tensor) is not supported")
    out = _t.reshape(x, shape, name=name)
    return LayerHelper("reshape2", name).append_activation(out, act)


def transpose(x, perm, name=None):
    return _t.transpose(x, perm, name=name)


def flatten(x, axis=1, name=None):
    """[d0..d(axis-1), d(axis)..]: two dims (fluid's flatten)."""
    check_variable(x, "x", "flatten")
    if not 0 <= axis <= len(x.shape):
        raise _core.InvalidArgumentError("flatten: axis %d is out of range for %s of rank %d"
                                         % (axis, x.name, len(x.shape)))
    def size(dims):  # -1 when a dim is unknown; 1 for no dims
        return -1 if any(d < 0 for d in dims) else int(np.prod(dims, dtype=np.int64))
    return _t.reshape(x, [size(x.shape[:axis]), size(x.shape[axis:])], name=name)


def _elementwise(op_type, x, y, axis, act, name):
    out = _t._elementwise(op_type, x, y, axis, name)
    return LayerHelper(op_type, name).append_activation(out, act)


def elementwise_add(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_add", x, y, axis, act, name)


def elementwise_sub(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_sub", x, y, axis, act, name)


def elementwise_mul(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_mul", x, y, axis, act, name)


def elementwise_div(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_div", x, y, axis, act, name)


def elementwise_max(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_max", x, y, axis, act, name)


def elementwise_min(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_min", x, y, axis, act, name)


def elementwise_pow(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_pow", x, y, axis, act, name)


def elementwise_mod(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_mod", x, y, axis, act, name)


def elementwise_floordiv(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_floordiv", x, y, axis, act, name)


# compare layers: `cond` is an existing bool Variable to write into (fluid's form)
def equal(x, y, cond=None, name=None):
    return _t._compare("equal", x, y, name, out=cond)


def not_equal(x, y, cond=None, name=None):
    return _t._compare("not_equal", x, y, name, out=cond)


def less_than(x, y, force_cpu=None, cond=None, name=None):
    attrs = None if force_cpu is None else {"force_cpu": bool(force_cpu)}
    return _t._compare("less_than", x, y, name, out=cond, attrs=attrs)


def less_equal(x, y, cond=None, name=None):
    return _t._compare("less_equal", x, y, name, out=cond)


def greater_than(x, y, cond=None, name=None):
    return _t._compare("greater_than", x, y, name, out=cond)


def greater_equal(x, y, cond=None, name=None):
    return _t._compare("greater_equal", x, y, name, out=cond)


logical_and = _t.logical_and
logical_or = _t.logical_or
logical_xor = _t.logical_xor
logical_not = _t.logical_not


def where(condition):
    """fluid.layers.where(condition) is Paddle 1.x's where_index (the coordinates
    of the true elements), an op PE does not have; pe.where(cond, x, y) selects."""
    raise _core.UnsupportedError("fluid.layers.where(condition) needs the where_index op, which PE does not "
                                 "register; for a select use pe.where(condition, x, y)")


def fill_constant(shape, dtype, value, force_cpu=False, out=None, name=None):
    return _t.fill_constant(shape, dtype, value, force_cpu=force_cpu, out=out, name=name)


def cast(x, dtype):
    return _t.cast(x, dtype)


def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, act=None, name=None):
    return _t.scale(x, scale, bias, bias_after_scale, act, name)


def matmul(x, y, transpose_x=False, transpose_y=False, alpha=1.0, name=None):
    out = _t.matmul(x, y, transpose_x, transpose_y, name)
    return out if alpha == 1.0 else _t.scale(out, alpha)


def topk(input, k, name=None):
    return _t.topk(input, k, name=name)


def argmax(x, axis=0):
    return _t.argmax(x, axis=axis)


def split(input, num_or_sections, dim=-1, name=None):
    return _t.split(input, num_or_sections, axis=dim, name=name)


def sums(input, out=None):
    if out is not None:
        raise _core.UnsupportedError("fluid.layers.sums: out= is not supported")
    inputs = list(input)
    for i, v in enumerate(inputs):
        check_variable(v, "input[%d]" % i, "sums")
    helper = LayerHelper("sum")
    res = helper.create_variable_for_type_inference(inputs[0].dtype, shape=inputs[0].shape)
    helper.append_op("sum", {"X": inputs}, {"Out": [res]})
    return res


def _is_var(v):
    return isinstance(v, Variable)


def stack(x, axis=0):
    return _t.stack(x, axis=axis)


def unstack(x, axis=0, num=None):
    return _t.unstack(x, axis=axis, num=num)


def expand(x, expand_times, name=None):
    """Paddle 1.x's expand: dim i repeated expand_times[i] times (a tile op)."""
    if len(expand_times) != len(x.shape):
        raise _core.InvalidArgumentError("fluid.layers.expand: expand_times %s must have one entry per dim of %s"
                                         % (list(expand_times), list(x.shape)))
    return _t.tile(x, expand_times, name=name)


def assign(input, output=None):
    return _t.assign(input, output)


def shape(input):
    return _t.shape(input)


def increment(x, value=1.0, in_place=True):
    """x + value (one element); in place (the loop counter) unless in_place=False."""
    if in_place:
        return _t.increment(x, value)
    check_variable(x, "x", "increment")
    helper = LayerHelper("increment")
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op("increment", {"X": [x]}, {"Out": [out]}, {"step": float(value)})
    return out


def cumsum(x, axis=None, exclusive=None, reverse=None):
    """Paddle 1.x's cumsum: axis None = the last axis (not flattened); exclusive / reverse flags."""
    check_variable(x, "x", "cumsum")
    a = -1 if axis is None else int(axis)
    if not -len(x.shape) <= a < len(x.shape):
        raise _core.InvalidArgumentError("fluid.layers.cumsum: axis %d is out of range for rank %d" % (a, len(x.shape)))
    helper = LayerHelper("cumsum")
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op("cumsum", {"X": [x]}, {"Out": [out]},
                     {"axis": a, "exclusive": bool(exclusive), "reverse": bool(reverse), "flatten": False})
    return out


def gather(input, index, overwrite=True):
    """Paddle 1.x's gather: rows of input (axis 0) at index; overwrite only concerns Paddle's
    gradient kernels (PE's gather_grad always sums duplicates)."""
    return _t.gather(input, index)


def gather_nd(input, index, name=None):
    return _t.gather_nd(input, index, name=name)


def scatter(input, index, updates, name=None, overwrite=True):
    return _t.scatter(input, index, updates, overwrite=overwrite, name=name)


def one_hot(input, depth, allow_out_of_range=False):
    """Paddle 1.x's one_hot: int input [.., 1] -> float32 [.., depth] (the last dim replaced);
    a label outside [0, depth) is an error unless allow_out_of_range (its row is all zeros)."""
    check_variable(input, "input", "one_hot")
    if input.dtype not in ("int32", "int64"):
        raise TypeError("fluid.layers.one_hot: input must be int32 or int64, got %s" % input.dtype)
    if not input.shape or input.shape[-1] != 1:
        raise _core.InvalidArgumentError("fluid.layers.one_hot: input %s must have a last dim of 1 ([N, 1])"
                                         % list(input.shape))
    if isinstance(depth, Variable):
        raise _core.UnsupportedError("fluid.layers.one_hot: depth must be an int (a Variable is not supported yet)")
    helper = LayerHelper("one_hot")
    out = helper.create_variable_for_type_inference("float32", shape=list(input.shape[:-1]) + [int(depth)])
    out.stop_gradient = True
    helper.append_op("one_hot", {"X": [input]}, {"Out": [out]},
                     {"depth": int(depth), "allow_out_of_range": bool(allow_out_of_range), "dtype": 0})
    return out


def cos_sim(X, Y):
    """Cosine similarity of X's rows [N, D] with Y's ([N, D], or [1, D] for every row): [N, 1] (cos_sim)."""
    check_variable(X, "X", "cos_sim")
    check_variable(Y, "Y", "cos_sim")
    helper = LayerHelper("cos_sim")
    out = helper.create_variable_for_type_inference(X.dtype, shape=[X.shape[0], 1])
    xnorm = helper.create_variable_for_type_inference(X.dtype, shape=[X.shape[0], 1])
    ynorm = helper.create_variable_for_type_inference(X.dtype, shape=[Y.shape[0], 1])
    helper.append_op("cos_sim", {"X": [X], "Y": [Y]}, {"Out": [out], "XNorm": [xnorm], "YNorm": [ynorm]})
    return out


def sigmoid_cross_entropy_with_logits(x, label, ignore_index=-100, name=None, normalize=False):
    """Elementwise sigmoid cross entropy of logits x against probabilities label (same shape)."""
    check_variable(x, "x", "sigmoid_cross_entropy_with_logits")
    check_variable(label, "label", "sigmoid_cross_entropy_with_logits")
    helper = LayerHelper("sigmoid_cross_entropy_with_logits", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op("sigmoid_cross_entropy_with_logits", {"X": [x], "Label": [label]}, {"Out": [out]},
                     {"ignore_index": int(ignore_index), "normalize": bool(normalize)})
    return out


def label_smooth(label, prior_dist=None, epsilon=0.1, dtype="float32", name=None):
    return F.label_smooth(label, prior_dist=prior_dist, epsilon=epsilon, name=name)


def pad(x, paddings, pad_value=0., name=None):
    """Paddle 1.x's pad: paddings = (before, after) of every dim, constant pad_value."""
    check_variable(x, "x", "pad")
    if len(paddings) != 2 * len(x.shape):
        raise _core.InvalidArgumentError("fluid.layers.pad: paddings %s must have 2 values per dim of %s"
                                         % (list(paddings), list(x.shape)))
    return F.pad(x, list(paddings), mode="constant", value=pad_value, name=name)


def pad2d(input, paddings=[0, 0, 0, 0], mode="constant", pad_value=0.0, data_format="NCHW", name=None):
    """Paddle 1.x's pad2d: paddings (top, bottom, left, right) of [N, C, H, W] (or NHWC);
    mode constant / reflect / edge."""
    check_variable(input, "input", "pad2d")
    if isinstance(paddings, Variable):
        raise _core.UnsupportedError("fluid.layers.pad2d: paddings must be a list of ints (a Variable is not "
                                     "supported yet)")
    p = [int(v) for v in paddings]
    if len(p) != 4 or len(input.shape) != 4:
        raise _core.InvalidArgumentError("fluid.layers.pad2d: needs a rank-4 input and 4 paddings, got %s and %s"
                                         % (list(input.shape), p))
    shape = list(input.shape)
    h, w = (1, 2) if data_format == "NHWC" else (2, 3)
    for dim, (a, b) in ((h, p[0:2]), (w, p[2:4])):
        if shape[dim] >= 0:
            shape[dim] += a + b
    helper = LayerHelper("pad2d", name)
    out = helper.create_variable_for_type_inference(input.dtype, shape=shape)
    helper.append_op("pad2d", {"X": [input]}, {"Out": [out]},
                     {"paddings": p, "mode": mode, "pad_value": float(pad_value), "data_format": data_format})
    return out


def image_resize(input, out_shape=None, scale=None, name=None, resample="BILINEAR", actual_shape=None,
                 align_corners=True, align_mode=1, data_format="NCHW"):
    """Paddle 1.x's image_resize (BILINEAR, NEAREST) of a 4-D NCHW input, as the 2.x ops: out_shape
    [h, w], or scale (the output size int(in * scale); with a known input size the op gets that size,
    so the ratio is in / out as in 1.x's ops)."""
    check_variable(input, "input", "image_resize")
    if actual_shape is not None or isinstance(out_shape, Variable) or isinstance(scale, Variable):
        raise _core.UnsupportedError("fluid.layers.image_resize: out_shape / scale / actual_shape must be Python "
                                     "numbers (a Variable is not supported yet)")
    if data_format != "NCHW":
        raise _core.UnsupportedError("fluid.layers.image_resize: data_format must be NCHW")
    mode = {"BILINEAR": "bilinear", "NEAREST": "nearest"}.get(str(resample).upper())
    if mode is None:
        raise _core.UnsupportedError("fluid.layers.image_resize: resample '%s' is not supported (BILINEAR, NEAREST)"
                                     % resample)
    if (out_shape is None) == (scale is None):
        raise _core.InvalidArgumentError("fluid.layers.image_resize: give one of out_shape and scale")
    if len(input.shape) != 4:
        raise _core.UnsupportedError("fluid.layers.image_resize: input must be 4-D [N, C, H, W], got %s"
                                     % list(input.shape))
    hw, sc = None, None
    if out_shape is not None:
        hw = [int(v) for v in out_shape]
    elif min(input.shape[2:]) >= 0:
        hw = [int(d * float(scale)) for d in input.shape[2:]]
    else:
        sc = [float(scale)] * 2
    return F._interp(input, hw, sc, mode, align_corners, align_mode if mode == "bilinear" else 1, "image_resize",
                     name)


def resize_bilinear(input, out_shape=None, scale=None, name=None, actual_shape=None, align_corners=True,
                    align_mode=1, data_format="NCHW"):
    return image_resize(input, out_shape, scale, name, "BILINEAR", actual_shape, align_corners, align_mode,
                        data_format)


def resize_nearest(input, out_shape=None, scale=None, name=None, actual_shape=None, align_corners=True,
                   data_format="NCHW"):
    return image_resize(input, out_shape, scale, name, "NEAREST", actual_shape, align_corners, 1, data_format)


# ---- losses and normalization built from the elementwise ops (their gradients are those ops') ---

def mse_loss(input, label):
    """mean((input - label)^2) (1.8's mse_loss: square_error_cost, then mean)."""
    return mean(square_error_cost(input, label))


def log_loss(input, label, epsilon=1e-4, name=None):
    """-label * log(input + epsilon) - (1 - label) * log(1 - input + epsilon), elementwise (input: probabilities)."""
    check_variable(input, "input", "log_loss")
    check_variable(label, "label", "log_loss")
    eps = float(epsilon)
    pos = _t.multiply(label, _t.log(_t.scale(input, 1.0, eps)))
    neg = _t.multiply(_t.scale(label, -1.0, 1.0), _t.log(_t.scale(input, -1.0, 1.0 + eps)))
    return _t.scale(_t.add(pos, neg), -1.0)


def huber_loss(input, label, delta):
    """r = label - input; 0.5 r^2 where |r| <= delta, else delta (|r| - 0.5 delta), elementwise."""
    check_variable(input, "input", "huber_loss")
    check_variable(label, "label", "huber_loss")
    delta = float(delta)
    if not delta > 0:
        raise _core.InvalidArgumentError("fluid.layers.huber_loss: delta must be > 0, got %r" % delta)
    r = _t.subtract(label, input)
    a = _t.abs(r)
    small = _t.scale(_t.square(r), 0.5)
    large = _t.scale(a, delta, -0.5 * delta * delta)
    return _t.where(_t.less_equal(a, fill_constant([1], r.dtype, delta)), small, large)


def l2_normalize(x, axis, epsilon=1e-12, name=None):
    """x / sqrt(max(sum(x^2 along axis), epsilon)) (Paddle's l2_normalize)."""
    check_variable(x, "x", "l2_normalize")
    nd = len(x.shape)
    axis = int(axis)
    if not -nd <= axis < nd:
        raise _core.InvalidArgumentError("fluid.layers.l2_normalize: axis %d is out of range for x %s"
                                         % (axis, list(x.shape)))
    ss = _t.sum(_t.square(x), axis=axis, keepdim=True)
    norm = _t.sqrt(_t.clip(ss, min=float(epsilon)))
    return _t.divide(x, norm)


# ---- shapes, fills, random tensors, parameters -------------------------------------------------

def squeeze(input, axes, name=None):
    """input without its size-1 dims `axes` (squeeze2)."""
    return _t.squeeze(input, axes, name)


def unsqueeze(input, axes, name=None):
    """input with size-1 dims inserted at `axes` (unsqueeze2)."""
    return _t.unsqueeze(input, axes, name)


def slice(input, axes, starts, ends):
    """input[starts:ends] along axes (the slice op; negative indices count from the end)."""
    return _t.slice(input, axes, starts, ends)


def zeros(shape, dtype, force_cpu=False):
    return fill_constant(shape, dtype, 0.0, force_cpu=force_cpu)


def ones(shape, dtype, force_cpu=False):
    return fill_constant(shape, dtype, 1.0, force_cpu=force_cpu)


def _fill_like(api, x, value, out):
    check_variable(x, "x", api)
    helper = LayerHelper("fill_any_like")
    if out is None:
        out = helper.create_variable_for_type_inference(x.dtype, shape=list(x.shape), stop_gradient=True)
    elif not isinstance(out, Variable):
        raise TypeError("fluid.layers.%s: out must be a Variable, got %s" % (api, type(out).__name__))
    helper.append_op("fill_any_like", {"X": [x]}, {"Out": [out]},
                     {"value": float(value), "dtype": _DTYPE_ENUM[convert_dtype(out.dtype)]})
    out.stop_gradient = True
    return out


def zeros_like(x, out=None):
    """Zeros of x's shape and dtype (fill_any_like); out=: the var to write."""
    return _fill_like("zeros_like", x, 0.0, out)


def ones_like(x, out=None):
    """Ones of x's shape and dtype (fill_any_like); out=: the var to write."""
    return _fill_like("ones_like", x, 1.0, out)


def leaky_relu(x, alpha=0.02, name=None):
    """max(x, alpha * x) (the leaky_relu op; 1.x's default alpha 0.02)."""
    check_variable(x, "x", "leaky_relu")
    helper = LayerHelper("leaky_relu", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=list(x.shape))
    helper.append_op("leaky_relu", {"X": [x]}, {"Out": [out]}, {"alpha": float(alpha)})
    return out


def mul(x, y, x_num_col_dims=1, y_num_col_dims=1, name=None):
    """x flattened to 2-D at x_num_col_dims times y flattened at y_num_col_dims; the result has
    x.shape[:x_num_col_dims] + y.shape[y_num_col_dims:] (the mul op)."""
    check_variable(x, "x", "mul")
    check_variable(y, "y", "mul")
    xn, yn = int(x_num_col_dims), int(y_num_col_dims)
    if not 0 < xn < len(x.shape) or not 0 < yn < len(y.shape):
        raise _core.InvalidArgumentError("fluid.layers.mul: x_num_col_dims=%d / y_num_col_dims=%d must split x %s "
                                         "and y %s into two non-empty parts" % (xn, yn, list(x.shape),
                                                                                 list(y.shape)))
    helper = LayerHelper("mul", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=list(x.shape[:xn]) + list(y.shape[yn:]))
    helper.append_op("mul", {"X": [x], "Y": [y]}, {"Out": [out]}, {"x_num_col_dims": xn, "y_num_col_dims": yn})
    return out


def layer_norm(input, scale=True, shift=True, begin_norm_axis=1, epsilon=1e-05, param_attr=None, bias_attr=None,
               act=None, name=None):
    """Normalizes each row of input flattened at begin_norm_axis (its mean and variance), then times
    a learned scale (ones) and plus a learned shift (zeros) of the row's size (the layer_norm op)."""
    from ..initializer import Constant
    check_variable(input, "input", "layer_norm")
    nd = len(input.shape)
    axis = int(begin_norm_axis)
    if not 0 < axis < nd:
        raise _core.InvalidArgumentError("fluid.layers.layer_norm: begin_norm_axis=%d must be in [1, %d) for input "
                                         "%s" % (axis, nd, list(input.shape)))
    tail = list(input.shape[axis:])
    if any(d < 0 for d in tail):
        raise _core.InvalidArgumentError("fluid.layers.layer_norm: the normalized dims %s of input %s must be known"
                                         % (tail, list(input.shape)))
    size = int(np.prod(tail))
    rows = -1 if any(d < 0 for d in input.shape[:axis]) else int(np.prod(input.shape[:axis]))
    helper = LayerHelper("layer_norm", name)
    inputs = {"X": [input]}
    if scale:
        inputs["Scale"] = [helper.create_parameter(param_attr, [size], input.dtype, default_initializer=Constant(1.0))]
    if shift:
        inputs["Bias"] = [helper.create_parameter(bias_attr, [size], input.dtype, is_bias=True)]
    y = helper.create_variable_for_type_inference(input.dtype, shape=list(input.shape))
    mean = helper.create_variable_for_type_inference(input.dtype, shape=[rows], stop_gradient=True)
    var = helper.create_variable_for_type_inference(input.dtype, shape=[rows], stop_gradient=True)
    helper.append_op("layer_norm", inputs, {"Y": [y], "Mean": [mean], "Variance": [var]},
                     {"epsilon": float(epsilon), "begin_norm_axis": axis})
    return helper.append_activation(y, act)


def _random(op, shape, dtype, seed, attrs):
    dtype = convert_dtype(dtype)
    if dtype not in ("float32", "float64"):
        raise TypeError("fluid.layers.%s: dtype must be float32 or float64, got %s" % (
            "uniform_random" if op == "uniform_random" else "gaussian_random", dtype))
    shape = [int(d) for d in shape]
    helper = LayerHelper(op)
    out = helper.create_variable_for_type_inference(dtype, shape=shape, stop_gradient=True)
    attrs = dict(attrs, shape=shape, dtype=_DTYPE_ENUM[dtype], seed=int(seed))
    helper.append_op(op, {}, {"Out": [out]}, attrs)
    return out


def uniform_random(shape, dtype="float32", min=-1.0, max=1.0, seed=0):
    """A tensor of shape drawn uniformly from [min, max) on every run (seed 0: from the program's seed)."""
    return _random("uniform_random", shape, dtype, seed, {"min": float(min), "max": float(max)})


def gaussian_random(shape, mean=0.0, std=1.0, seed=0, dtype="float32"):
    """A tensor of shape drawn from N(mean, std^2) on every run (seed 0: from the program's seed)."""
    return _random("gaussian_random", shape, dtype, seed, {"mean": float(mean), "std": float(std)})


def create_parameter(shape, dtype, name=None, attr=None, is_bias=False, default_initializer=None):
    """A trainable parameter of shape (initialized by the startup program: attr's initializer, or
    default_initializer, or Xavier / zeros for a bias)."""
    from ..param_attr import ParamAttr
    attr = ParamAttr._to_attr(attr) if attr is not None else ParamAttr()
    if attr is False:
        raise _core.InvalidArgumentError("fluid.layers.create_parameter: attr=False makes no parameter")
    if name is not None and attr.name is None:
        attr = ParamAttr(name=name, initializer=attr.initializer, learning_rate=attr.learning_rate,
                         regularizer=attr.regularizer, trainable=attr.trainable)
    return LayerHelper("create_parameter").create_parameter(attr, shape, convert_dtype(dtype), is_bias=is_bias,
                                                            default_initializer=default_initializer)


def create_global_var(shape, value, dtype, persistable=False, force_cpu=False, name=None):
    """A global var of shape filled with value by the startup program (kept across runs in the scope)."""
    from ..initializer import Constant
    helper = LayerHelper("global_var")
    var = helper.create_global_variable(shape=[int(d) for d in shape], dtype=convert_dtype(dtype),
                                        persistable=persistable, name=name, stop_gradient=True)
    helper.set_variable_initializer(var, Constant(float(value)))
    return var


# ---- sequences (LoD) --------------------------------------------------------------------------

def _seq_input(x, arg, api):
    check_variable(x, arg, api)
    return x


def sequence_pool(input, pool_type, is_test=False, pad_value=0.0):
    """Pools each sequence of input's last LoD level to one row: pool_type sum, average, sqrt
    (sum / sqrt(length)), max, last or first; an empty sequence gives pad_value. Out:
    [sequences, dims after the first]; it keeps input's LoD minus its last level."""
    _seq_input(input, "input", "sequence_pool")
    if not isinstance(pool_type, str) or pool_type.upper() not in ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST"):
        raise _core.InvalidArgumentError("fluid.layers.sequence_pool: pool_type=%r (expected sum, average, sqrt, max, "
                                         "last or first)" % (pool_type,))
    helper = LayerHelper("sequence_pool")
    out = helper.create_variable_for_type_inference(input.dtype, shape=[-1] + list(input.shape[1:]))
    max_index = helper.create_variable_for_type_inference("int32", stop_gradient=True, shape=[])
    helper.append_op("sequence_pool", {"X": [input]}, {"Out": [out], "MaxIndex": [max_index]},
                     {"pooltype": pool_type.upper(), "is_test": bool(is_test), "pad_value": float(pad_value)})
    return out


def sequence_conv(input, num_filters, filter_size=3, filter_stride=1, padding=True, padding_start=None,
                  bias_attr=None, param_attr=None, act=None, name=None):
    """Paddle 1.x's sequence convolution: each row t of input ([T, D], lod_level >= 1) sees
    rows t + padding_start .. t + padding_start + filter_size - 1 of its own sequence (rows
    outside it are zeros), side by side, times a [filter_size * D, num_filters] filter; then
    the bias ([num_filters], unless bias_attr=False) and act. Out: [T, num_filters], input's
    LoD. padding_start None: -(filter_size // 2), as Paddle. padding has no effect (Paddle
    ignores it too: the output always has input's rows); filter_stride must be 1."""
    fn = "fluid.layers.sequence_conv"
    _seq_input(input, "input", fn)
    if convert_dtype(input.dtype) not in ("float32", "float64"):
        raise _core.InvalidArgumentError("%s: input %s is %s (expected float32 or float64)"
                                         % (fn, input.name, convert_dtype(input.dtype)))
    if len(input.shape) != 2 or input.shape[1] < 1:
        raise _core.InvalidArgumentError("%s: input %s has shape %s (expected [T, D] with D known)"
                                         % (fn, input.name, list(input.shape)))
    for arg, v in (("num_filters", num_filters), ("filter_size", filter_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise _core.InvalidArgumentError("%s: %s must be an int >= 1, got %r" % (fn, arg, v))
    if filter_stride != 1:
        raise _core.UnsupportedError("%s: filter_stride=%r (only 1 is supported, as in Paddle)" % (fn, filter_stride))
    if padding_start is None:
        padding_start = -int(filter_size // 2)
    helper = LayerHelper("sequence_conv", name)
    w = helper.create_parameter(param_attr, [int(filter_size) * int(input.shape[1]), int(num_filters)],
                                convert_dtype(input.dtype))
    pre_bias = helper.create_variable_for_type_inference(input.dtype, shape=[-1, int(num_filters)])
    helper.append_op("sequence_conv", {"X": [input], "Filter": [w]}, {"Out": [pre_bias]},
                     {"contextStride": int(filter_stride), "contextStart": int(padding_start),
                      "contextLength": int(filter_size)})
    return helper.append_activation(helper.append_bias_op(pre_bias, bias_attr), act)


def sequence_first_step(input):
    """The first row of each sequence (sequence_pool FIRST)."""
    return sequence_pool(input, "first")


def sequence_last_step(input):
    """The last row of each sequence (sequence_pool LAST)."""
    return sequence_pool(input, "last")


def sequence_softmax(input, use_cudnn=False, name=None):
    """Softmax within each sequence of input ([N] or [N, 1] scores with a LoD)."""
    _seq_input(input, "input", "sequence_softmax")
    helper = LayerHelper("sequence_softmax", name)
    out = helper.create_variable_for_type_inference(input.dtype, shape=list(input.shape))
    helper.append_op("sequence_softmax", {"X": [input]}, {"Out": [out]}, {"use_cudnn": bool(use_cudnn)})
    return out


def sequence_expand(x, y, ref_level=-1, name=None):
    """Repeats x's sequences (or rows, when x has no LoD) as many times as y's sequences at
    LoD level ref_level (-1: the last) are long."""
    _seq_input(x, "x", "sequence_expand")
    _seq_input(y, "y", "sequence_expand")
    helper = LayerHelper("sequence_expand", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=[-1] + list(x.shape[1:]))
    helper.append_op("sequence_expand", {"X": [x], "Y": [y]}, {"Out": [out]}, {"ref_level": int(ref_level)})
    return out


def sequence_mask(x, maxlen=None, dtype="int64", name=None):
    """Y[..., j] = j < x[...] for lengths x: Y is x's shape + [maxlen] (maxlen None: max(x))."""
    check_variable(x, "x", "sequence_mask")
    if isinstance(maxlen, Variable):
        raise _core.UnsupportedError("fluid.layers.sequence_mask: maxlen as a Variable is not supported; give an int")
    dt = convert_dtype(dtype)
    codes = {"float32": 0, "float64": 1, "int32": 2, "int64": 3, "uint8": 4, "bool": 5}
    if dt not in codes:
        raise _core.InvalidArgumentError("fluid.layers.sequence_mask: dtype %s (expected one of %s)"
                                         % (dt, ", ".join(codes)))
    helper = LayerHelper("sequence_mask", name)
    m = -1 if maxlen is None else int(maxlen)
    out = helper.create_variable_for_type_inference(dt, stop_gradient=True, shape=list(x.shape) + [m])
    helper.append_op("sequence_mask", {"X": [x]}, {"Y": [out]}, {"maxlen": m, "out_dtype": codes[dt]})
    return out


# ---- recurrent sequence layers (LoD): Paddle 1.x's lstm / gru ops ------------------------------

from ..param_attr import ParamAttr as _ParamAttr  # noqa: E402

__all__ += ["dynamic_lstm", "dynamic_gru"]

_RNN_ACTS = ("sigmoid", "tanh", "relu", "identity")


def _rnn_act(api, arg, value):
    if value not in _RNN_ACTS:
        raise _core.InvalidArgumentError("fluid.layers.%s: %s=%r (expected one of %s)"
                                         % (api, arg, value, ", ".join(_RNN_ACTS)))
    return value


def _rnn_state(api, arg, v, hidden):
    if v is None:
        return None
    check_variable(v, arg, api)
    if len(v.shape) != 2 or v.shape[1] not in (-1, hidden):
        raise _core.InvalidArgumentError("fluid.layers.%s: %s has shape %s (expected [sequences, %d])"
                                         % (api, arg, list(v.shape), hidden))
    return v


def dynamic_lstm(input, size, h_0=None, c_0=None, param_attr=None, bias_attr=None, use_peepholes=True,
                 is_reverse=False, gate_activation="sigmoid", cell_activation="tanh", candidate_activation="tanh",
                 dtype="float32", name=None):
    """An LSTM over each sequence of input's last LoD level (the lstm op). input: [T, size], the
    projection of the sequence (an fc of size 4 * H), gate columns {candidate, input, forget,
    output}; size = 4 * H. Parameters: the hidden-hidden weight [H, 4H] and the bias [1, 4H], or
    [1, 7H] with use_peepholes (the 3 diagonal peephole weights after the gate biases). h_0 / c_0:
    [sequences, H] initial states (zeros when absent). Returns (hidden, cell), both [T, H] with
    input's LoD."""
    check_variable(input, "input", "dynamic_lstm")
    size = int(size)
    if size <= 0 or size % 4:
        raise _core.InvalidArgumentError("fluid.layers.dynamic_lstm: size=%d must be 4 * the hidden size" % size)
    if len(input.shape) != 2 or input.shape[1] not in (-1, size):
        raise _core.InvalidArgumentError("fluid.layers.dynamic_lstm: input has shape %s (expected [T, size=%d]: the "
                                         "fc projection of the sequence)" % (list(input.shape), size))
    if _ParamAttr._to_attr(bias_attr) is False:
        raise _core.InvalidArgumentError("fluid.layers.dynamic_lstm: bias_attr=False: the lstm op needs its bias "
                                         "(give a ParamAttr or None)")
    hidden = size // 4
    for arg, v in (("gate_activation", gate_activation), ("cell_activation", cell_activation),
                   ("candidate_activation", candidate_activation)):
        _rnn_act("dynamic_lstm", arg, v)
    dtype = convert_dtype(dtype)
    helper = LayerHelper("lstm", name)
    w = helper.create_parameter(param_attr, [hidden, size], dtype)
    b = helper.create_parameter(bias_attr, [1, 7 * hidden if use_peepholes else size], dtype, is_bias=True)
    inputs = {"Input": [input], "Weight": [w], "Bias": [b]}
    if _rnn_state("dynamic_lstm", "h_0", h_0, hidden) is not None:
        inputs["H0"] = [h_0]
    if _rnn_state("dynamic_lstm", "c_0", c_0, hidden) is not None:
        inputs["C0"] = [c_0]
    hid = helper.create_variable_for_type_inference(dtype, shape=[-1, hidden])
    cell = helper.create_variable_for_type_inference(dtype, shape=[-1, hidden])
    gate = helper.create_variable_for_type_inference(dtype, shape=[-1, size])
    pre = helper.create_variable_for_type_inference(dtype, shape=[-1, hidden])
    helper.append_op("lstm", inputs, {"Hidden": [hid], "Cell": [cell], "BatchGate": [gate], "BatchCellPreAct": [pre]},
                     {"use_peepholes": bool(use_peepholes), "is_reverse": bool(is_reverse),
                      "gate_activation": gate_activation, "cell_activation": cell_activation,
                      "candidate_activation": candidate_activation})
    return hid, cell


def dynamic_gru(input, size, param_attr=None, bias_attr=None, is_reverse=False, gate_activation="sigmoid",
                candidate_activation="tanh", h_0=None, origin_mode=False):
    """A GRU over each sequence of input's last LoD level (the gru op). input: [T, 3 * size], the
    projection of the sequence, columns {update, reset, candidate}; size = the hidden size H. The
    weight [H, 3H] holds the [H, 2H] update / reset weight in its first H * 2H elements, then the
    [H, H] candidate weight (Paddle's layout); bias [1, 3H] (bias_attr=False: none). h = (1 - u) h_prev
    + u c, or u h_prev + (1 - u) c with origin_mode. h_0: [sequences, H] (zeros when absent).
    Returns hidden [T, H] with input's LoD."""
    check_variable(input, "input", "dynamic_gru")
    size = int(size)
    if size <= 0:
        raise _core.InvalidArgumentError("fluid.layers.dynamic_gru: size=%d must be the (positive) hidden size" % size)
    if len(input.shape) != 2 or input.shape[1] not in (-1, 3 * size):
        raise _core.InvalidArgumentError("fluid.layers.dynamic_gru: input has shape %s (expected [T, 3 * size = %d])"
                                         % (list(input.shape), 3 * size))
    _rnn_act("dynamic_gru", "gate_activation", gate_activation)
    _rnn_act("dynamic_gru", "candidate_activation", candidate_activation)
    dtype = input.dtype
    helper = LayerHelper("gru")
    w = helper.create_parameter(param_attr, [size, 3 * size], dtype)
    b = helper.create_parameter(bias_attr, [1, 3 * size], dtype, is_bias=True)
    inputs = {"Input": [input], "Weight": [w]}
    if b is not None:
        inputs["Bias"] = [b]
    if _rnn_state("dynamic_gru", "h_0", h_0, size) is not None:
        inputs["H0"] = [h_0]
    hid = helper.create_variable_for_type_inference(dtype, shape=[-1, size])
    gate = helper.create_variable_for_type_inference(dtype, shape=[-1, 3 * size])
    rh = helper.create_variable_for_type_inference(dtype, shape=[-1, size])
    bh = helper.create_variable_for_type_inference(dtype, shape=[-1, size])
    helper.append_op("gru", inputs, {"Hidden": [hid], "BatchGate": [gate], "BatchResetHiddenPrev": [rh],
                                     "BatchHidden": [bh]},
                     {"is_reverse": bool(is_reverse), "gate_activation": gate_activation,
                      "activation": candidate_activation, "origin_mode": bool(origin_mode)})
    return hid
