"""pe.nn.functional — paddle.nn.functional in static mode.

Each function appends Paddle's op for it (relu, softmax_with_cross_entropy,
conv2d, pool2d, batch_norm, dropout, ...) with Paddle's attrs and names;
parameters are passed in (the layer forms in pe.static.nn create them).
An op this build of the engine does not register (ops/ops.def) raises
pe.UnsupportedError when the function is called, naming the op.
"""
import numpy as np

from .. import _core
from ..utils.conv_args import pair as _pair, padding as _padding, channels_last as _channels_last, \
    bn_layout as _bn_layout, padding_idx as _padding_idx, positive_int as _positive_int
from .. import tensor as _t
from ..framework import Variable, has_op, require_op
from ..layer_helper import LayerHelper, check_variable
from ..initializer import Constant

__all__ = [
    "relu", "sigmoid", "tanh", "gelu", "leaky_relu", "relu6", "elu", "softplus", "swish", "hardsigmoid", "selu",
    "softmax", "log_softmax", "cross_entropy",
    "softmax_with_cross_entropy", "mse_loss", "square_error_cost", "dropout", "linear", "conv2d", "max_pool2d",
    "avg_pool2d", "batch_norm", "layer_norm", "embedding", "one_hot", "cosine_similarity",
    "binary_cross_entropy_with_logits", "label_smooth", "pad", "conv2d_transpose", "interpolate", "upsample",
    "group_norm", "instance_norm",
]


def _act(op_type, x, name=None, attrs=None):
    check_variable(x, "x", op_type)
    require_op(op_type, "pe.nn.functional." + op_type)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op(op_type, {"X": [x]}, {"Out": [out]}, attrs)
    return out


def relu(x, name=None):
    return _act("relu", x, name)


def sigmoid(x, name=None):
    return _act("sigmoid", x, name)


def tanh(x, name=None):
    return _act("tanh", x, name)


def gelu(x, approximate=False, name=None):
    return _act("gelu", x, name, {"approximate": bool(approximate)})


def leaky_relu(x, negative_slope=0.01, name=None):
    return _act("leaky_relu", x, name, {"alpha": float(negative_slope)})


def relu6(x, name=None):
    return _act("relu6", x, name, {"threshold": 6.0})


def elu(x, alpha=1.0, name=None):
    return _act("elu", x, name, {"alpha": float(alpha)})


def softplus(x, beta=1, threshold=20, name=None):
    return _act("softplus", x, name, {"beta": float(beta), "threshold": float(threshold)})


def swish(x, name=None):
    return _act("swish", x, name, {"beta": 1.0})


def hardsigmoid(x, slope=0.1666667, offset=0.5, name=None):
    """Paddle 2.x's defaults (PyTorch's slope 1/6); the hard_sigmoid op's own default slope is 0.2."""
    return _act("hard_sigmoid", x, name, {"slope": float(slope), "offset": float(offset)})


def selu(x, scale=1.0507009873554804934193349852946, alpha=1.6732632423543772848170429916717, name=None):
    if scale <= 1.0:
        raise _core.InvalidArgumentError("selu: scale must be greater than 1.0, got %s" % (scale,))
    if alpha < 0:
        raise _core.InvalidArgumentError("selu: alpha must be no less than 0, got %s" % (alpha,))
    return _act("selu", x, name, {"scale": float(scale), "alpha": float(alpha)})


def softmax(x, axis=-1, dtype=None, name=None):
    if dtype is not None:
        x = _t.cast(x, dtype)
    return _act("softmax", x, name, {"axis": int(axis)})


def log_softmax(x, axis=-1, dtype=None, name=None):
    if dtype is not None:
        x = _t.cast(x, dtype)
    return _act("log_softmax", x, name, {"axis": int(axis)})


# ---- losses --------------------------------------------------------------------

def _reduce(loss, reduction, api):
    if reduction == "mean":
        return _t.mean(loss)
    if reduction == "sum":
        return _t.sum(loss)
    if reduction == "none":
        return loss
    raise _core.InvalidArgumentError("%s: reduction must be 'mean', 'sum' or 'none', got %r" % (api, reduction))


def softmax_with_cross_entropy(logits, label, soft_label=False, ignore_index=-100, numeric_stable_mode=True,
                               return_softmax=False, axis=-1):
    """Per-sample loss (the class axis set to 1); with return_softmax also the softmax."""
    check_variable(logits, "logits", "softmax_with_cross_entropy")
    check_variable(label, "label", "softmax_with_cross_entropy")
    helper = LayerHelper("softmax_with_cross_entropy")
    a = _t._norm_axis(axis, len(logits.shape), "softmax_with_cross_entropy")
    loss_shape = [1 if i == a else d for i, d in enumerate(logits.shape)]
    sm = helper.create_variable_for_type_inference(logits.dtype, shape=logits.shape)
    loss = helper.create_variable_for_type_inference(logits.dtype, shape=loss_shape)
    helper.append_op("softmax_with_cross_entropy", {"Logits": [logits], "Label": [label]},
                     {"Softmax": [sm], "Loss": [loss]},
                     {"soft_label": bool(soft_label), "ignore_index": int(ignore_index),
                      "numeric_stable_mode": bool(numeric_stable_mode), "axis": int(axis)})
    return (loss, sm) if return_softmax else loss


def cross_entropy(input, label, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,
                  use_softmax=True, name=None):
    """Paddle 2.x cross_entropy: softmax + cross entropy on logits (use_softmax=True)
    or cross entropy on probabilities, then the reduction."""
    if weight is not None:
        raise _core.UnsupportedError("cross_entropy: per-class weight is not supported by PE's loss ops")
    if use_softmax:
        loss = softmax_with_cross_entropy(input, label, soft_label, ignore_index, True, False, axis)
    else:
        check_variable(input, "input", "cross_entropy")
        if axis not in (-1, len(input.shape) - 1):
            raise _core.UnsupportedError("cross_entropy(use_softmax=False) works on the last axis")
        helper = LayerHelper("cross_entropy", name)
        loss = helper.create_variable_for_type_inference(input.dtype, shape=list(input.shape[:-1]) + [1])
        helper.append_op("cross_entropy", {"X": [input], "Label": [label]}, {"Y": [loss]},
                         {"soft_label": bool(soft_label), "ignore_index": int(ignore_index)})
    return _reduce(loss, reduction, "cross_entropy")


def square_error_cost(input, label):
    return _t.square_error_cost(input, label)


def mse_loss(input, label, reduction="mean", name=None):
    return _reduce(_t.square_error_cost(input, label), reduction, "mse_loss")


def l1_loss(input, label, reduction="mean", name=None):
    """abs(input - label), then the reduction."""
    return _reduce(_t.abs(_t.subtract(input, label)), reduction, "l1_loss")


# ---- dropout -------------------------------------------------------------------

def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", name=None):
    """Dropout with a per-op step counter (a persistable int64 [1] var the op
    advances each training run), so every step draws a fresh mask while runs
    stay reproducible and checkpoints resume the mask sequence."""
    check_variable(x, "x", "dropout")
    if axis is not None:
        raise _core.UnsupportedError("dropout: axis is not supported (PE drops elements independently)")
    if not 0 <= float(p) <= 1:
        raise _core.InvalidArgumentError("dropout: p must be in [0, 1], got %r" % (p,))
    if mode not in ("upscale_in_train", "downscale_in_infer", "downgrade_in_infer"):
        raise _core.InvalidArgumentError("dropout: mode must be 'upscale_in_train' or 'downscale_in_infer'")
    if mode == "downscale_in_infer":
        mode = "downgrade_in_infer"
    helper = LayerHelper("dropout", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    mask = helper.create_variable_for_type_inference("uint8", shape=x.shape, stop_gradient=True)
    inputs, outputs = {"X": [x]}, {"Out": [out], "Mask": [mask]}
    if training:
        step = helper.create_global_variable([1], "int64", persistable=True, name=helper.name + ".step_0")
        helper.set_variable_initializer(step, Constant(0.0))
        inputs["Step"] = [step]
        outputs["StepOut"] = [step]
    helper.append_op("dropout", inputs, outputs,
                     {"dropout_prob": float(p), "is_test": not training, "dropout_implementation": mode})
    return out


# ---- linear / conv / pool / norm -------------------------------------------------

def linear(x, weight, bias=None, name=None):
    """x @ weight (+ bias): matmul_v2 then elementwise_add on the last axis."""
    out = _t.matmul(x, weight, name=name)
    if bias is None:
        return out
    helper = LayerHelper("elementwise_add", name)
    res = helper.create_variable_for_type_inference(out.dtype, shape=out.shape)
    helper.append_op("elementwise_add", {"X": [out], "Y": [bias]}, {"Out": [res]}, {"axis": len(out.shape) - 1})
    return res



def _conv_out(size, k, s, p, d, algo, ceil=False):
    if size < 0:
        return -1
    if algo == "SAME":
        return (size + s - 1) // s
    if algo == "VALID":
        p = 0
    ek = d * (k - 1) + 1
    num = size + 2 * p - ek
    return (num + (s - 1 if ceil else 0)) // s + 1


def _check_conv(x, weight, data_format, api, weight_dims, nhwc_ok=True):
    """A 4-D x (NCHW, or NHWC where nhwc_ok) and a 4-D weight (weight_dims:
    how the op lays it out); returns whether x is channels last."""
    check_variable(x, "x", api)
    check_variable(weight, "weight", api)
    nhwc = _channels_last(data_format, api, nhwc_ok)
    if len(x.shape) != 4 or len(weight.shape) != 4:
        raise _core.InvalidArgumentError("%s: x must be %s and weight %s, got %s and %s"
                                         % (api, "[N, H, W, C]" if nhwc else "[N, C, H, W]", weight_dims,
                                            list(x.shape), list(weight.shape)))
    return nhwc


def _add_channel_bias(helper, out, bias, axis=1):
    """out + bias along the channel axis (elementwise_add), or out when bias is None."""
    if bias is None:
        return out
    res = helper.create_variable_for_type_inference(out.dtype, shape=out.shape)
    helper.append_op("elementwise_add", {"X": [out], "Y": [bias]}, {"Out": [res]}, {"axis": axis})
    return res


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCHW", name=None):
    nhwc = _check_conv(x, weight, data_format, "conv2d", "[M, C/groups, kh, kw]")
    groups = _positive_int(groups, "conv2d groups")
    strides, dil = _pair(stride, "conv2d stride", True), _pair(dilation, "conv2d dilation", True)
    pads, algo = _padding(padding, "conv2d")
    m, _, kh, kw = weight.shape
    n, c, h, w = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if nhwc else x.shape
    oh, ow = _conv_out(h, kh, strides[0], pads[0], dil[0], algo), _conv_out(w, kw, strides[1], pads[1], dil[1], algo)
    shape = [n, oh, ow, m] if nhwc else [n, m, oh, ow]
    # Paddle 2.x: groups == C (C != 1) with M a multiple of C is its depthwise_conv2d op
    op = "depthwise_conv2d" if c == int(groups) and c > 1 and m % c == 0 and has_op("depthwise_conv2d") else "conv2d"
    helper = LayerHelper(op, name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=shape)
    helper.append_op(op, {"Input": [x], "Filter": [weight]}, {"Output": [out]},
                     {"strides": strides, "paddings": pads, "dilations": dil, "groups": int(groups),
                      "padding_algorithm": algo, "data_format": data_format})
    return _add_channel_bias(helper, out, bias, 3 if nhwc else 1)


def _conv_transpose_out(size, k, s, p, d, algo, output_padding, output_size):
    """Paddle's conv2d_transpose output size of one dim (-1 when unknown)."""
    if output_size is not None:
        return int(output_size)
    if size < 0:
        return -1
    if algo == "SAME":
        out = (size + s - 1) // s
        total = max((out - 1) * s + k - size, 0)
        return (size - 1) * s - total + k + output_padding  # SAME resets the dilation to 1
    if algo == "VALID":
        p = 0
    return (size - 1) * s - 2 * p + d * (k - 1) + 1 + output_padding


def _conv_transpose_op(helper, x, weight, strides, pads, dil, groups, algo, output_padding, output_size):
    """Appends conv2d_transpose (Filter [C_in, C_out/groups, kh, kw]) and returns its Output."""
    require_op("conv2d_transpose", "conv2d_transpose")
    n, _, h, w = x.shape
    _, mg, kh, kw = weight.shape
    op_pad = [0, 0] if output_padding is None else _pair(output_padding, "conv2d_transpose output_padding")
    osz = None if output_size is None else _pair(output_size, "conv2d_transpose output_size")
    shape = [n, int(mg) * int(groups)] + [
        _conv_transpose_out(sz, k, st, p, d, algo, op, None if osz is None else osz[i])
        for i, (sz, k, st, p, d, op) in enumerate(zip((h, w), (kh, kw), strides, pads, dil, op_pad))]
    out = helper.create_variable_for_type_inference(x.dtype, shape=shape)
    attrs = {"strides": strides, "paddings": pads, "dilations": dil, "groups": int(groups),
             "padding_algorithm": algo, "data_format": "NCHW", "output_padding": op_pad if any(op_pad) else [],
             "output_size": osz or []}
    helper.append_op("conv2d_transpose", {"Input": [x], "Filter": [weight]}, {"Output": [out]}, attrs)
    return out


def conv2d_transpose(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     data_format="NCHW", output_size=None, name=None):
    """Paddle 2.x's F.conv2d_transpose: weight [C_in, C_out/groups, kh, kw]; output_size (a pair) picks
    the output size among the ones the strides allow, instead of output_padding."""
    _check_conv(x, weight, data_format, "conv2d_transpose", "[C, M/groups, kh, kw]", nhwc_ok=False)
    groups = _positive_int(groups, "conv2d_transpose groups")
    if output_size is not None and output_padding:
        raise _core.InvalidArgumentError("conv2d_transpose: give output_padding or output_size, not both")
    strides, dil = _pair(stride, "conv2d_transpose stride", True), _pair(dilation, "conv2d_transpose dilation", True)
    pads, algo = _padding(padding, "conv2d_transpose")
    helper = LayerHelper("conv2d_transpose", name)
    out = _conv_transpose_op(helper, x, weight, strides, pads, dil, groups, algo,
                             output_padding if output_size is None else None, output_size)
    return _add_channel_bias(helper, out, bias)


def _pool(x, pooling_type, kernel_size, stride, padding, ceil_mode, exclusive, data_format, name, api):
    check_variable(x, "x", api)
    nhwc = _channels_last(data_format, api)
    if len(x.shape) != 4:
        raise _core.InvalidArgumentError("%s: x must be %s, got %s" % (api, "[N, H, W, C]" if nhwc else "[N, C, H, W]",
                                                                     list(x.shape)))
    ks = _pair(kernel_size, api + " kernel_size", True)
    st = ks if stride is None else _pair(stride, api + " stride", True)
    pads, algo = _padding(padding, api)
    n, c, h, w = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if nhwc else x.shape
    oh, ow = _conv_out(h, ks[0], st[0], pads[0], 1, algo, ceil_mode), _conv_out(w, ks[1], st[1], pads[1], 1, algo,
                                                                              ceil_mode)
    shape = [n, oh, ow, c] if nhwc else [n, c, oh, ow]
    helper = LayerHelper("pool2d", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=shape)
    helper.append_op("pool2d", {"X": [x]}, {"Out": [out]},
                     {"pooling_type": pooling_type, "ksize": ks, "strides": st, "paddings": pads,
                      "ceil_mode": bool(ceil_mode), "exclusive": bool(exclusive), "padding_algorithm": algo,
                      "data_format": data_format})
    return out


def max_pool2d(x, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCHW",
               name=None):
    if return_mask:
        raise _core.UnsupportedError("max_pool2d: return_mask is not supported")
    return _pool(x, "max", kernel_size, stride, padding, ceil_mode, True, data_format, name, "max_pool2d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
               data_format="NCHW", name=None):
    if divisor_override is not None:
        raise _core.UnsupportedError("avg_pool2d: divisor_override is not supported")
    return _pool(x, "avg", kernel_size, stride, padding, ceil_mode, exclusive, data_format, name, "avg_pool2d")


def batch_norm(x, running_mean, running_var, weight, bias, training=False, momentum=0.9, epsilon=1e-05,
               data_format="NCHW", use_global_stats=None, name=None):
    """batch_norm op: Y, and the running statistics updated in place (MeanOut =
    running_mean, VarianceOut = running_var) when training."""
    check_variable(x, "x", "batch_norm")
    layout = _bn_layout(data_format, "batch_norm")
    helper = LayerHelper("batch_norm", name)
    saved_mean = helper.create_variable_for_type_inference(x.dtype, shape=running_mean.shape, stop_gradient=True)
    saved_var = helper.create_variable_for_type_inference(x.dtype, shape=running_var.shape, stop_gradient=True)
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    helper.append_op("batch_norm",
                     {"X": [x], "Scale": [weight], "Bias": [bias], "Mean": [running_mean], "Variance": [running_var]},
                     {"Y": [out], "MeanOut": [running_mean], "VarianceOut": [running_var],
                      "SavedMean": [saved_mean], "SavedVariance": [saved_var]},
                     {"epsilon": float(epsilon), "momentum": float(momentum), "is_test": not training,
                      "use_global_stats": bool(use_global_stats) if use_global_stats is not None else False,
                      "data_layout": layout})
    return out


def _norm_vars(helper, x, stat_shape, weight, bias):
    """A normalisation op's inputs {X, Scale?, Bias?}, its output Y (like x) and its two statistics."""
    mean = helper.create_variable_for_type_inference(x.dtype, shape=stat_shape, stop_gradient=True)
    var = helper.create_variable_for_type_inference(x.dtype, shape=stat_shape, stop_gradient=True)
    out = helper.create_variable_for_type_inference(x.dtype, shape=x.shape)
    inputs = {"X": [x]}
    if weight is not None:
        inputs["Scale"] = [weight]
    if bias is not None:
        inputs["Bias"] = [bias]
    return inputs, out, mean, var


def layer_norm(x, normalized_shape, weight=None, bias=None, epsilon=1e-05, name=None):
    """layer_norm op over the trailing dims given by normalized_shape."""
    check_variable(x, "x", "layer_norm")
    require_op("layer_norm", "pe.nn.functional.layer_norm")
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = [int(normalized_shape)]
    begin = len(x.shape) - len(normalized_shape)
    if begin < 0 or list(x.shape[begin:]) != [int(d) for d in normalized_shape]:
        raise _core.InvalidArgumentError("layer_norm: normalized_shape %s does not match the trailing dims of %s" % (
            list(normalized_shape), list(x.shape)))
    helper = LayerHelper("layer_norm", name)
    rows = list(x.shape[:begin])
    nrows = -1 if any(d < 0 for d in rows) else int(np.prod(rows)) if rows else 1
    inputs, out, mean, var = _norm_vars(helper, x, [nrows], weight, bias)
    helper.append_op("layer_norm", inputs, {"Y": [out], "Mean": [mean], "Variance": [var]},
                     {"epsilon": float(epsilon), "begin_norm_axis": begin})
    return out


def _interp(x, out_hw, scale, mode, align_corners, align_mode, api, name):
    """Appends nearest_interp_v2 / bilinear_interp_v2: out_hw [h, w] or scale [sh, sw]."""
    check_variable(x, "x", api)
    if len(x.shape) != 4:
        raise _core.UnsupportedError("%s: x must be 4-D [N, C, H, W] (only 2-D interpolation is supported), got %s"
                                     % (api, list(x.shape)))
    op = {"nearest": "nearest_interp_v2", "bilinear": "bilinear_interp_v2"}.get(mode.lower())
    if op is None:
        raise _core.UnsupportedError("%s: mode '%s' is not supported (nearest, bilinear)" % (api, mode))
    require_op(op, api)
    n, c, h, w = x.shape
    if scale is not None:
        shape = [n, c] + [int(d * s) if d >= 0 else -1 for d, s in zip((h, w), scale)]
        attrs = {"scale": [float(v) for v in scale], "out_h": -1, "out_w": -1}
    else:
        shape, attrs = [n, c, int(out_hw[0]), int(out_hw[1])], {"out_h": int(out_hw[0]), "out_w": int(out_hw[1]),
                                                                "scale": []}
    attrs.update({"interp_method": mode.lower(), "align_corners": bool(align_corners), "align_mode": int(align_mode),
                  "data_layout": "NCHW", "out_d": -1})
    helper = LayerHelper(op, name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=shape)
    helper.append_op(op, {"X": [x]}, {"Out": [out]}, attrs)
    return out


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=False, align_mode=0,
                data_format="NCHW", name=None):
    """Paddle 2.x's F.interpolate for 4-D NCHW inputs, modes nearest and bilinear: size (a pair of ints)
    or scale_factor (a number or a pair); align_corners / align_mode as Paddle's (nearest takes no
    align_corners=True in Paddle 2.x's API either)."""
    if data_format != "NCHW":
        raise _core.UnsupportedError("interpolate: data_format must be NCHW")
    if (size is None) == (scale_factor is None):
        raise _core.InvalidArgumentError("interpolate: give exactly one of size and scale_factor")
    if isinstance(size, Variable) or isinstance(scale_factor, Variable):
        raise _core.UnsupportedError("interpolate: size / scale_factor must be Python numbers (a Variable is not "
                                     "supported yet)")
    if mode.lower() == "nearest" and align_corners:
        raise _core.InvalidArgumentError("interpolate: align_corners is only valid for the linear modes")
    scale = None
    if scale_factor is not None:
        scale = [float(scale_factor)] * 2 if isinstance(scale_factor, (int, float)) else \
            [float(v) for v in scale_factor]
        if len(scale) != 2 or min(scale) <= 0:
            raise _core.InvalidArgumentError("interpolate: scale_factor must be > 0, one or two values, got %r"
                                             % (scale_factor,))
    return _interp(x, None if size is None else _pair(size, "interpolate size"), scale, mode, align_corners,
                   align_mode, "interpolate", name)


def upsample(x, size=None, scale_factor=None, mode="nearest", align_corners=False, align_mode=0, data_format="NCHW",
             name=None):
    return interpolate(x, size, scale_factor, mode, align_corners, align_mode, data_format, name)


def _group_norm_op(x, groups, weight, bias, epsilon, op, name):
    """group_norm (Mean / Variance [N, groups]) or instance_norm (SavedMean / SavedVariance [N * C])."""
    check_variable(x, "x", op)
    require_op(op, "pe.nn.functional." + op)
    if len(x.shape) < 2:
        raise _core.InvalidArgumentError("%s: x must be [N, C, ...], got %s" % (op, list(x.shape)))
    helper = LayerHelper(op, name)
    n, c = x.shape[0], x.shape[1]
    stat = [n, groups] if op == "group_norm" else [n * c if n >= 0 and c >= 0 else -1]
    inputs, out, mean, var = _norm_vars(helper, x, stat, weight, bias)
    if op == "group_norm":
        helper.append_op(op, inputs, {"Y": [out], "Mean": [mean], "Variance": [var]},
                         {"epsilon": float(epsilon), "groups": int(groups), "data_layout": "NCHW"})
    else:
        helper.append_op(op, inputs, {"Y": [out], "SavedMean": [mean], "SavedVariance": [var]},
                         {"epsilon": float(epsilon)})
    return out


def group_norm(x, num_groups, epsilon=1e-05, weight=None, bias=None, data_format="NCHW", name=None):
    """group_norm op: x [N, C, ...] normalised over each group of C / num_groups channels per sample."""
    if data_format not in ("NCHW", "NCL", "NC", "NCDHW"):
        raise _core.UnsupportedError("group_norm: data_format must have the channels on axis 1")
    return _group_norm_op(x, int(num_groups), weight, bias, epsilon, "group_norm", name)


def instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True, momentum=0.9,
                  eps=1e-05, data_format="NCHW", name=None):
    """instance_norm op: each channel of each sample normalised over its spatial dims."""
    if running_mean is not None or running_var is not None or not use_input_stats:
        raise _core.UnsupportedError("instance_norm: running statistics are not supported (Paddle's op keeps none)")
    if data_format not in ("NCHW", "NCL", "NCDHW"):
        raise _core.UnsupportedError("instance_norm: data_format must have the channels on axis 1")
    return _group_norm_op(x, None, weight, bias, eps, "instance_norm", name)


def embedding(x, weight, padding_idx=None, sparse=False, name=None):
    """Rows of weight [V, D] picked by the int64 ids x: out shape x.shape + [D]
    (lookup_table_v2; the older lookup_table when only that is registered,
    with ids [.., 1])."""
    check_variable(x, "x", "embedding")
    check_variable(weight, "weight", "embedding")
    if sparse:
        raise _core.UnsupportedError("embedding: sparse gradients are not supported (dense tensors only)")
    pad = _padding_idx(padding_idx, weight.shape[0], "embedding")
    helper = LayerHelper("embedding", name)
    if has_op("lookup_table_v2"):
        op_type, shape = "lookup_table_v2", list(x.shape) + [weight.shape[1]]
    else:
        require_op("lookup_table", "pe.nn.functional.embedding")
        op_type = "lookup_table"
        shape = (list(x.shape[:-1]) if x.shape and x.shape[-1] == 1 else list(x.shape)) + [weight.shape[1]]
    out = helper.create_variable_for_type_inference(weight.dtype, shape=shape)
    helper.append_op(op_type, {"Ids": [x], "W": [weight]}, {"Out": [out]}, {"padding_idx": pad})
    return out


def _is_var(v):
    return isinstance(v, Variable)


# ---- one_hot, cosine_similarity, binary_cross_entropy_with_logits, label_smooth, pad ----

def one_hot(x, num_classes, name=None):
    """float32 one-hot rows of the int labels x: [*x.shape, num_classes] (one_hot_v2). A label
    outside [0, num_classes) is an error when the program runs."""
    check_variable(x, "x", "one_hot")
    if x.dtype not in ("int32", "int64"):
        raise TypeError("one_hot: x must be int32 or int64, got %s" % x.dtype)
    if isinstance(num_classes, Variable):
        raise _core.UnsupportedError("one_hot: num_classes must be an int (a Variable is not supported yet)")
    helper = LayerHelper("one_hot_v2", name)
    out = helper.create_variable_for_type_inference("float32", shape=list(x.shape) + [int(num_classes)])
    out.stop_gradient = True
    helper.append_op("one_hot_v2", {"X": [x]}, {"Out": [out]},
                     {"depth": int(num_classes), "allow_out_of_range": False, "dtype": 0})
    return out


def cosine_similarity(x1, x2, axis=1, eps=1e-8):
    """Paddle 2.x's composition: sum(x1 x2) / sqrt(max(sum(x1^2) sum(x2^2), eps^2)) along axis."""
    check_variable(x1, "x1", "cosine_similarity")
    check_variable(x2, "x2", "cosine_similarity")
    w12 = _t.sum(_t.multiply(x1, x2), axis=axis)
    w1 = _t.sum(_t.multiply(x1, x1), axis=axis)
    w2 = _t.sum(_t.multiply(x2, x2), axis=axis)
    n12 = _t.sqrt(_t.clip(_t.multiply(w1, w2), min=float(eps) ** 2))
    return _t.divide(w12, n12)


def binary_cross_entropy_with_logits(logit, label, weight=None, reduction="mean", pos_weight=None, name=None):
    """sigmoid_cross_entropy_with_logits, then Paddle 2.x's pos_weight (the loss times
    1 + (pos_weight - 1) label) and weight factors, then the reduction."""
    check_variable(logit, "logit", "binary_cross_entropy_with_logits")
    check_variable(label, "label", "binary_cross_entropy_with_logits")
    if reduction not in ("mean", "sum", "none"):
        raise _core.InvalidArgumentError("binary_cross_entropy_with_logits: reduction must be 'mean', 'sum' or "
                                         "'none', got %r" % (reduction,))
    helper = LayerHelper("sigmoid_cross_entropy_with_logits", name)
    out = helper.create_variable_for_type_inference(logit.dtype, shape=logit.shape)
    helper.append_op("sigmoid_cross_entropy_with_logits", {"X": [logit], "Label": [label]}, {"Out": [out]},
                     {"ignore_index": -100, "normalize": False})
    if pos_weight is not None:
        check_variable(pos_weight, "pos_weight", "binary_cross_entropy_with_logits")
        out = _t.multiply(out, _t.scale(_t.multiply(label, _t.scale(pos_weight, 1.0, -1.0)), 1.0, 1.0))
    if weight is not None:
        check_variable(weight, "weight", "binary_cross_entropy_with_logits")
        out = _t.multiply(out, weight)
    return _reduce(out, reduction, "binary_cross_entropy_with_logits")


def label_smooth(label, prior_dist=None, epsilon=0.1, name=None):
    """(1 - epsilon) label + epsilon prior_dist (epsilon / D when None) (label_smooth)."""
    check_variable(label, "label", "label_smooth")
    if not 0.0 <= float(epsilon) <= 1.0:
        raise _core.InvalidArgumentError("label_smooth: epsilon %r is outside [0, 1]" % (epsilon,))
    helper = LayerHelper("label_smooth", name)
    out = helper.create_variable_for_type_inference(label.dtype, shape=label.shape)
    ins = {"X": [label]}
    if prior_dist is not None:
        check_variable(prior_dist, "prior_dist", "label_smooth")
        ins["PriorDist"] = [prior_dist]
    helper.append_op("label_smooth", ins, {"Out": [out]}, {"epsilon": float(epsilon)})
    return out


_PAD_FORMATS = {3: ("NCL", "NLC"), 4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC")}


def pad(x, pad, mode="constant", value=0.0, data_format="NCHW", name=None):
    """Paddle 2.x's F.pad. constant with 2 x rank values: (before, after) of every dim from the
    first (a pad op); otherwise x of rank 3 / 4 / 5 in data_format and pad = (left, right
    [, top, bottom [, front, back]]) of the spatial dims from the last, mode constant /
    reflect / replicate / circular (a pad3d op, on x unsqueezed to rank 5 as Paddle)."""
    check_variable(x, "x", "pad")
    if isinstance(pad, Variable):
        raise _core.UnsupportedError("pad: pad must be a list of ints (a Variable is not supported yet)")
    pad = [int(p) for p in pad]
    nd = len(x.shape)
    if mode == "constant" and len(pad) == 2 * nd:
        helper = LayerHelper("pad", name)
        out = helper.create_variable_for_type_inference(
            x.dtype, shape=[d + pad[2 * i] + pad[2 * i + 1] if d >= 0 else -1 for i, d in enumerate(x.shape)])
        helper.append_op("pad", {"X": [x]}, {"Out": [out]}, {"paddings": pad, "pad_value": float(value)})
        return out
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise _core.InvalidArgumentError("pad: mode %r (expected 'constant', 'reflect', 'replicate' or 'circular')"
                                         % (mode,))
    if nd not in _PAD_FORMATS or data_format not in _PAD_FORMATS[nd] or len(pad) != 2 * (nd - 2):
        raise _core.InvalidArgumentError(
            "pad: x of shape %s with data_format %r and %d pads (expected rank 3 NCL / NLC with 2 pads, 4 NCHW / "
            "NHWC with 4, 5 NCDHW / NDHWC with 6, or 2 x rank pads in constant mode)"
            % (list(x.shape), data_format, len(pad)))
    last = data_format in ("NLC", "NHWC", "NDHWC")
    y = x
    for _ in range(5 - nd):  # add the missing spatial dims (size 1) in front of the others
        y = _t.unsqueeze(y, [1 if last else 2])
    pads = pad + [0] * (6 - len(pad))
    shape = list(y.shape)
    sp = [1, 2, 3] if last else [2, 3, 4]  # D, H, W
    for k, dim in enumerate(reversed(sp)):  # W from pads 0/1, H from 2/3, D from 4/5
        if shape[dim] >= 0:
            shape[dim] += pads[2 * k] + pads[2 * k + 1]
    helper = LayerHelper("pad3d", name)
    out = helper.create_variable_for_type_inference(x.dtype, shape=shape)
    helper.append_op("pad3d", {"X": [y]}, {"Out": [out]},
                     {"paddings": pads, "mode": mode, "value": float(value),
                      "data_format": "NDHWC" if last else "NCDHW"})
    for _ in range(5 - nd):
        out = _t.squeeze(out, [1 if last else 2])
    return out
