"""pe.eager.nn_functional — the eager forms of pe.nn.functional's layer ops
(linear, conv2d, pools, batch_norm, layer_norm, embedding, dropout, gelu,
flatten, the losses): each one registry op run at once with the op types
and attrs the static builders (pe.nn.functional) append, so backward() runs
the same grad ops a program gets from pe.static.gradients.
"""
import numpy as np

from .. import _core
from ..utils.conv_args import pair as _pair, padding as _padding, channels_last as _channels_last, \
    bn_layout as _bn_layout, padding_idx as _padding_idx, positive_int as _positive_int
from .autograd import Tensor, run_op
from .functional import _check, _out, _next_seed, mean, sum, reshape, subtract



def _image(x, data_format, api):
    """A 4-D x in data_format (NCHW or NHWC); returns whether it is channels last."""
    _check(x, api)
    nhwc = _channels_last(data_format, api)
    if x.ndim != 4:
        raise _core.InvalidArgumentError("%s: x must be %s, got %s" % (api, "[N, H, W, C]" if nhwc else "[N, C, H, W]",
                                                                     x.shape))
    return nhwc


def gelu(x, approximate=False, name=None):
    return _out("gelu", {"X": _check(x, "gelu")}, {"approximate": bool(approximate)})


def linear(x, weight, bias=None, name=None):
    """x @ weight (+ bias): matmul_v2 then elementwise_add on the last axis."""
    out = _out("matmul_v2", {"X": _check(x, "linear"), "Y": _check(weight, "linear", "weight")},
               {"trans_x": False, "trans_y": False})
    if bias is None:
        return out
    return _out("elementwise_add", {"X": out, "Y": _check(bias, "linear", "bias")}, {"axis": out.ndim - 1})


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCHW", name=None):
    """conv2d op (Filter [M, C/groups, kh, kw]), then bias on axis 1 (NCHW: the ops a static conv2d layer
    writes, so to_static and the static engine take the same steps); NHWC: the bias is the op's Bias input,
    added inside oneDNN's convolution and its gradient summed with the weights'."""
    nhwc = _image(x, data_format, "conv2d")
    _check(weight, "conv2d", "weight")
    pads, algo = _padding(padding, "conv2d")
    ins = {"Input": x, "Filter": weight}
    if nhwc and bias is not None:
        ins["Bias"] = _check(bias, "conv2d", "bias")
    out = run_op("conv2d", ins, {"Output": 1},
                 {"strides": _pair(stride, "conv2d stride", True), "paddings": pads,
                  "dilations": _pair(dilation, "conv2d dilation", True),
                  "groups": _positive_int(groups, "conv2d groups"),
                  "padding_algorithm": algo, "data_format": data_format})["Output"][0]
    if bias is None or nhwc:
        return out
    return _out("elementwise_add", {"X": out, "Y": _check(bias, "conv2d", "bias")}, {"axis": 3 if nhwc else 1})


def _pool(x, pooling_type, kernel_size, stride, padding, ceil_mode, exclusive, data_format, api):
    _image(x, data_format, api)
    ks = _pair(kernel_size, api + " kernel_size", True)
    st = ks if stride is None else _pair(stride, api + " stride", True)
    pads, algo = _padding(padding, api)
    return _out("pool2d", {"X": x}, {"pooling_type": pooling_type, "ksize": ks, "strides": st, "paddings": pads,
                                     "ceil_mode": bool(ceil_mode), "exclusive": bool(exclusive),
                                     "padding_algorithm": algo, "data_format": data_format})


def max_pool2d(x, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCHW",
               name=None):
    if return_mask:
        raise _core.UnsupportedError("max_pool2d: return_mask is not supported")
    return _pool(x, "max", kernel_size, stride, padding, ceil_mode, True, data_format, "max_pool2d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
               data_format="NCHW", name=None):
    if divisor_override is not None:
        raise _core.UnsupportedError("avg_pool2d: divisor_override is not supported")
    return _pool(x, "avg", kernel_size, stride, padding, ceil_mode, exclusive, data_format, "avg_pool2d")


def batch_norm(x, running_mean, running_var, weight, bias, training=False, momentum=0.9, epsilon=1e-05,
               data_format="NCHW", use_global_stats=None, name=None):
    """batch_norm op. training: normalizes with the batch statistics and
    replaces running_mean / running_var's values with the op's MeanOut /
    VarianceOut (running = momentum * running + (1 - momentum) * batch)."""
    _check(x, "batch_norm")
    layout = _bn_layout(data_format, "batch_norm")
    for t, what in ((running_mean, "running_mean"), (running_var, "running_var"), (weight, "weight"),
                    (bias, "bias")):
        _check(t, "batch_norm", what)
    ugs = bool(use_global_stats) if use_global_stats is not None else False
    r = run_op("batch_norm", {"X": x, "Scale": weight, "Bias": bias, "Mean": running_mean, "Variance": running_var},
               {"Y": 1, "MeanOut": 1, "VarianceOut": 1, "SavedMean": 1, "SavedVariance": 1},
               {"epsilon": float(epsilon), "momentum": float(momentum), "is_test": not training,
                "use_global_stats": ugs, "data_layout": layout})
    if training and not ugs:
        running_mean._t = r["MeanOut"][0]._t
        running_var._t = r["VarianceOut"][0]._t
    return r["Y"][0]


def layer_norm(x, normalized_shape, weight=None, bias=None, epsilon=1e-05, name=None):
    """layer_norm op over the trailing dims given by normalized_shape."""
    _check(x, "layer_norm")
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = [int(normalized_shape)]
    begin = x.ndim - len(normalized_shape)
    if begin < 0 or x.shape[begin:] != [int(d) for d in normalized_shape]:
        raise _core.InvalidArgumentError("layer_norm: normalized_shape %s does not match the trailing dims of %s" % (
            list(normalized_shape), x.shape))
    return run_op("layer_norm", {"X": x, "Scale": weight, "Bias": bias}, {"Y": 1, "Mean": 1, "Variance": 1},
                  {"epsilon": float(epsilon), "begin_norm_axis": begin})["Y"][0]


def embedding(x, weight, padding_idx=None, sparse=False, name=None):
    """lookup_table_v2: rows of weight [V, D] picked by the int ids x (out x.shape + [D])."""
    _check(x, "embedding")
    _check(weight, "embedding", "weight")
    if sparse:
        raise _core.UnsupportedError("embedding: sparse gradients are not supported (dense tensors only)")
    pad = _padding_idx(padding_idx, weight.shape[0], "embedding")
    return _out("lookup_table_v2", {"W": weight, "Ids": x}, {"padding_idx": pad})


def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", name=None):
    """dropout op; each training call draws a fresh mask (seed from pe.seed's
    stream). Not training: upscale_in_train is the identity (the op with
    is_test), downscale_in_infer scales by 1 - p."""
    _check(x, "dropout")
    if axis is not None:
        raise _core.UnsupportedError("dropout: axis is not supported (PE drops elements independently)")
    if not 0 <= float(p) <= 1:
        raise _core.InvalidArgumentError("dropout: p must be in [0, 1], got %r" % (p,))
    if mode not in ("upscale_in_train", "downscale_in_infer", "downgrade_in_infer"):
        raise _core.InvalidArgumentError("dropout: mode must be 'upscale_in_train' or 'downscale_in_infer'")
    if mode == "downscale_in_infer":
        mode = "downgrade_in_infer"
    attrs = {"dropout_prob": float(p), "is_test": not training, "dropout_implementation": mode}
    if training:
        attrs.update(fix_seed=True, seed=_next_seed())
    return run_op("dropout", {"X": x}, {"Out": 1, "Mask": 1}, attrs)["Out"][0]


def flatten(x, start_axis=0, stop_axis=-1, name=None):
    """flatten_contiguous_range: dims start_axis..stop_axis merged into one."""
    _check(x, "flatten")
    return run_op("flatten_contiguous_range", {"X": x}, {"Out": 1, "XShape": 1},
                  {"start_axis": int(start_axis), "stop_axis": int(stop_axis)})["Out"][0]


def _reduce(loss, reduction, api):
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    if reduction == "none":
        return loss
    raise _core.InvalidArgumentError("%s: reduction must be 'mean', 'sum' or 'none', got %r" % (api, reduction))


def mse_loss(input, label, reduction="mean", name=None):
    """square_error_cost ((input - label)^2 elementwise), then the reduction."""
    err = _out("square_error_cost", {"X": _check(input, "mse_loss", "input"), "Y": _check(label, "mse_loss", "label")})
    return _reduce(err, reduction, "mse_loss")


def l1_loss(input, label, reduction="mean", name=None):
    """abs(input - label), then the reduction."""
    d = subtract(_check(input, "l1_loss", "input"), _check(label, "l1_loss", "label"))
    return _reduce(_out("abs", {"X": d}), reduction, "l1_loss")


def _labels(input, label, axis):
    """Paddle 2.x accepts hard labels [N] as well as [N, 1]: the op wants rank(input)."""
    if isinstance(label, Tensor) and label.ndim == input.ndim - 1 and label.dtype in ("int64", "int32"):
        ax = axis % input.ndim
        return reshape(label, label.shape[:ax] + [1] + label.shape[ax:])
    return label
