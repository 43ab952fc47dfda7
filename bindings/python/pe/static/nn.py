"""pe.static.nn — layers that create their parameters: fc, conv2d, conv2d_transpose, batch_norm, group_norm,
instance_norm, embedding.

Paddle's static.nn layers: each creates its parameters (main program) with
their initializers (startup program) through LayerHelper, then appends the
same ops Paddle appends (fc: mul + elementwise_add + activation; conv2d:
conv2d + elementwise_add(axis=1) + activation; batch_norm with running
statistics updated in place), with Paddle's names (fc_0.w_0, fc_0.b_0,
fc_0.tmp_0 ...).
"""
import numpy as np

from .. import _core
from ..framework import Variable
from ..layer_helper import LayerHelper, check_variable
from ..nn import functional as F
from ..nn.initializer import Constant, Normal, XavierUniform
from ..param_attr import ParamAttr

__all__ = ["fc", "conv2d", "conv2d_transpose", "batch_norm", "group_norm", "instance_norm", "embedding"]


def fc(x, size, num_flatten_dims=1, weight_attr=None, bias_attr=None, activation=None, name=None):
    """out = activation(sum_i flatten(x_i) @ w_i + b); x a Variable or a list of them."""
    inputs = [x] if isinstance(x, Variable) else list(x)
    if not inputs:
        raise _core.InvalidArgumentError("fc: x must be a Variable or a non-empty list of Variables")
    helper = LayerHelper("fc", name)
    dtype = inputs[0].dtype
    w_attrs = weight_attr if isinstance(weight_attr, (list, tuple)) else [weight_attr] * len(inputs)
    mul_results = []
    for inp, wa in zip(inputs, w_attrs):
        check_variable(inp, "x", "fc")
        if not 0 < num_flatten_dims < len(inp.shape):
            raise _core.InvalidArgumentError("fc: num_flatten_dims %d is out of range for input %s of shape %s" % (
                num_flatten_dims, inp.name, list(inp.shape)))
        tail = inp.shape[num_flatten_dims:]
        if any(d < 0 for d in tail):
            raise _core.InvalidArgumentError("fc: input %s has unknown dims %s after num_flatten_dims=%d" % (
                inp.name, list(inp.shape), num_flatten_dims))
        in_features = int(np.prod(tail))
        w = helper.create_parameter(wa, [in_features, int(size)], dtype, default_initializer=XavierUniform())
        tmp = helper.create_variable_for_type_inference(dtype, shape=list(inp.shape[:num_flatten_dims]) + [int(size)])
        helper.append_op("mul", {"X": [inp], "Y": [w]}, {"Out": [tmp]},
                         {"x_num_col_dims": int(num_flatten_dims), "y_num_col_dims": 1})
        mul_results.append(tmp)
    if len(mul_results) == 1:
        pre_bias = mul_results[0]
    else:
        pre_bias = helper.create_variable_for_type_inference(dtype, shape=mul_results[0].shape)
        helper.append_op("sum", {"X": mul_results}, {"Out": [pre_bias]})
    pre_act = helper.append_bias_op(pre_bias, bias_attr, dim_start=num_flatten_dims)
    return helper.append_activation(pre_act, activation)


def _conv_groups(input, groups, data_format, api, nhwc_ok=True):
    """Checks a 4-D input (NCHW, or NHWC where nhwc_ok) of known channels C divisible by groups; returns
    (C, groups)."""
    check_variable(input, "input", api)
    nhwc = F._channels_last(data_format, api, nhwc_ok)
    if len(input.shape) != 4:
        raise _core.InvalidArgumentError("%s: input must be %s, got %s" % (
            api, "[N, H, W, C]" if nhwc else "[N, C, H, W]", list(input.shape)))
    groups = 1 if groups is None else F._positive_int(groups, api + " groups")
    c = input.shape[3 if nhwc else 1]
    if c < 0 or c % groups:
        raise _core.InvalidArgumentError("%s: input channels %d must be known and divisible by groups %d" % (
            api, c, groups))
    return c, groups


def conv2d(input, num_filters, filter_size, stride=1, padding=0, dilation=1, groups=None, param_attr=None,
           bias_attr=None, use_cudnn=True, act=None, name=None, data_format="NCHW"):
    c, groups = _conv_groups(input, groups, data_format, "conv2d")
    k = F._pair(filter_size, "conv2d filter_size", True)
    helper = LayerHelper("conv2d", name)
    std = (2.0 / (k[0] * k[1] * c)) ** 0.5
    w = helper.create_parameter(param_attr, [int(num_filters), c // groups] + k, input.dtype,
                                default_initializer=Normal(0.0, std))
    pads, algo = F._padding(padding, "conv2d")
    strides, dil = F._pair(stride, "conv2d stride", True), F._pair(dilation, "conv2d dilation", True)
    nhwc = data_format == "NHWC"
    n, h, wd = (input.shape[0], input.shape[1], input.shape[2]) if nhwc else (input.shape[0], input.shape[2],
                                                                              input.shape[3])
    oh, ow = F._conv_out(h, k[0], strides[0], pads[0], dil[0], algo), F._conv_out(wd, k[1], strides[1], pads[1],
                                                                                 dil[1], algo)
    shape = [n, oh, ow, int(num_filters)] if nhwc else [n, int(num_filters), oh, ow]
    # Paddle's rule: groups == C with num_filters a multiple of C, without cuDNN, is depthwise_conv2d
    op = "depthwise_conv2d" if groups == c and int(num_filters) % c == 0 and not use_cudnn else "conv2d"
    pre_bias = helper.create_variable_for_type_inference(input.dtype, shape=shape)
    helper.append_op(op, {"Input": [input], "Filter": [w]}, {"Output": [pre_bias]},
                     {"strides": strides, "paddings": pads, "dilations": dil, "groups": groups,
                      "padding_algorithm": algo, "data_format": data_format})
    ch = 3 if nhwc else 1
    pre_act = helper.append_bias_op(pre_bias, bias_attr, dim_start=ch, dim_end=ch + 1)
    return helper.append_activation(pre_act, act)


def conv2d_transpose(input, num_filters, output_size=None, filter_size=None, padding=0, stride=1, dilation=1,
                     groups=None, param_attr=None, bias_attr=None, use_cudnn=True, act=None, name=None,
                     data_format="NCHW"):
    """Paddle's conv2d_transpose layer: filter [C, num_filters/groups, kh, kw] (Xavier), the op, the bias
    [num_filters] (elementwise_add axis 1), the activation. filter_size may be left out when output_size
    is given: it is then the size that gives output_size."""
    c, groups = _conv_groups(input, groups, data_format, "conv2d_transpose", nhwc_ok=False)
    if int(num_filters) % groups:
        raise _core.InvalidArgumentError("conv2d_transpose: num_filters %d must be divisible by groups %d"
                                         % (num_filters, groups))
    pads, algo = F._padding(padding, "conv2d_transpose")
    strides = F._pair(stride, "conv2d_transpose stride", True)
    dil = F._pair(dilation, "conv2d_transpose dilation", True)
    osz = None if output_size is None else F._pair(output_size, "conv2d_transpose output_size")
    if filter_size is None:
        if osz is None or min(input.shape[2:]) < 0:
            raise _core.InvalidArgumentError("conv2d_transpose: give filter_size, or output_size with a known "
                                             "input size")
        k = [(osz[i] - (input.shape[2 + i] - 1) * strides[i] + 2 * pads[i] - 1) // dil[i] + 1 for i in range(2)]
    else:
        k = F._pair(filter_size, "conv2d_transpose filter_size", True)
    helper = LayerHelper("conv2d_transpose", name)
    w = helper.create_parameter(param_attr, [c, int(num_filters) // groups] + k, input.dtype,
                                default_initializer=XavierUniform())
    pre_bias = F._conv_transpose_op(helper, input, w, strides, pads, dil, groups, algo, None, osz)
    pre_act = helper.append_bias_op(pre_bias, bias_attr, dim_start=1, dim_end=2)
    return helper.append_activation(pre_act, act)


def _norm_params(helper, input, param_attr, bias_attr, op):
    if len(input.shape) < 2 or input.shape[1] < 0:
        raise _core.InvalidArgumentError("%s: input %s needs a known channel dim 1" % (op, list(input.shape)))
    c = [int(input.shape[1])]
    scale = helper.create_parameter(param_attr, c, input.dtype, default_initializer=Constant(1.0))
    bias = helper.create_parameter(bias_attr, c, input.dtype, is_bias=True)
    return scale, bias


def group_norm(input, groups, epsilon=1e-05, param_attr=None, bias_attr=None, act=None, data_layout="NCHW",
               name=None):
    """Paddle's group_norm layer: scale (1) and bias (0) [C] parameters (param_attr / bias_attr False:
    none), the group_norm op, the activation."""
    check_variable(input, "input", "group_norm")
    if data_layout != "NCHW":
        raise _core.UnsupportedError("group_norm: data_layout must be NCHW")
    helper = LayerHelper("group_norm", name)
    scale, bias = _norm_params(helper, input, param_attr, bias_attr, "group_norm")
    out = F._group_norm_op(input, int(groups), scale, bias, epsilon, "group_norm", helper.name)
    return helper.append_activation(out, act)


def instance_norm(input, epsilon=1e-05, param_attr=None, bias_attr=None, name=None):
    """Paddle's instance_norm layer: scale (1) and bias (0) [C] parameters, the instance_norm op."""
    check_variable(input, "input", "instance_norm")
    helper = LayerHelper("instance_norm", name)
    scale, bias = _norm_params(helper, input, param_attr, bias_attr, "instance_norm")
    return F._group_norm_op(input, None, scale, bias, epsilon, "instance_norm", helper.name)


def batch_norm(input, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None, bias_attr=None,
               data_layout="NCHW", in_place=False, name=None, moving_mean_name=None, moving_variance_name=None,
               do_model_average_for_mean_and_var=True, use_global_stats=False):
    check_variable(input, "input", "batch_norm")
    layout = F._bn_layout(data_layout, "batch_norm")
    ch = len(input.shape) - 1 if layout == "NHWC" else 1
    if len(input.shape) < 2 or input.shape[ch] < 0:
        raise _core.InvalidArgumentError("batch_norm: input %s needs a known channel dim %d" % (list(input.shape), ch))
    helper = LayerHelper("batch_norm", name)
    c = [int(input.shape[ch])]
    scale = helper.create_parameter(param_attr, c, input.dtype, default_initializer=Constant(1.0))
    bias = helper.create_parameter(bias_attr, c, input.dtype, is_bias=True)
    mean = helper.create_parameter(ParamAttr(name=moving_mean_name, initializer=Constant(0.0), trainable=False),
                                   c, input.dtype)
    mean.stop_gradient = True
    var = helper.create_parameter(ParamAttr(name=moving_variance_name, initializer=Constant(1.0), trainable=False),
                                  c, input.dtype)
    var.stop_gradient = True
    saved_mean = helper.create_variable_for_type_inference(input.dtype, shape=c, stop_gradient=True)
    saved_var = helper.create_variable_for_type_inference(input.dtype, shape=c, stop_gradient=True)
    out = input if in_place else helper.create_variable_for_type_inference(input.dtype, shape=input.shape)
    helper.append_op("batch_norm",
                     {"X": [input], "Scale": [scale], "Bias": [bias], "Mean": [mean], "Variance": [var]},
                     {"Y": [out], "MeanOut": [mean], "VarianceOut": [var], "SavedMean": [saved_mean],
                      "SavedVariance": [saved_var]},
                     {"epsilon": float(epsilon), "momentum": float(momentum), "is_test": bool(is_test),
                      "use_global_stats": bool(use_global_stats), "data_layout": layout})
    return helper.append_activation(out, act)


def embedding(input, size, is_sparse=False, is_distributed=False, padding_idx=None, param_attr=None,
              dtype="float32"):
    """lookup_table_v2; is_sparse=True: the table is trained with the dense
    gradient of the whole table, Paddle's update of a sparse table (see
    fluid.embedding)."""
    check_variable(input, "input", "embedding")
    if is_distributed:
        raise _core.UnsupportedError("embedding(is_distributed=True): a table split over parameter servers (Paddle's "
                                     "distributed lookup table) is not supported; use is_distributed=False")
    helper = LayerHelper("embedding")
    w = helper.create_parameter(param_attr, [int(s) for s in size], dtype, default_initializer=XavierUniform())
    out = F.embedding(input, w, padding_idx=padding_idx, name=helper.name)
    if is_sparse:
        op = helper.block.ops[-1]
        assert op.type in ("lookup_table", "lookup_table_v2") and op.input("W") == [w.name], op.type
        op._set_attr("is_sparse", True)
    return out
