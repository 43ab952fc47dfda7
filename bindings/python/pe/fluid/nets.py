"""fluid.nets — Paddle 1.x's composite networks, built from fluid.layers as Paddle builds them.

simple_img_conv_pool (conv2d + pool2d), img_conv_group (conv2d [+
batch_norm [+ dropout]] per filter count, then one pool2d), glu (split in
two halves along dim, a * sigmoid(b)) and scaled_dot_product_attention
(multi-head: per-head fc projections when num_heads > 1, softmax(q k^T /
sqrt(d)) v) and sequence_conv_pool (sequence_conv with its bias and act, then
sequence_pool: one row per sequence).
"""
from .. import _core
from ..framework import Variable
from . import layers

__all__ = ["simple_img_conv_pool", "img_conv_group", "glu", "scaled_dot_product_attention", "sequence_conv_pool"]


def simple_img_conv_pool(input, num_filters, filter_size, pool_size, pool_stride, pool_padding=0, pool_type="max",
                         global_pooling=False, conv_stride=1, conv_padding=0, conv_dilation=1, conv_groups=1,
                         param_attr=None, bias_attr=None, act=None, use_cudnn=True):
    """conv2d(input) then pool2d: the recognize_digits CNN's block."""
    conv_out = layers.conv2d(input=input, num_filters=num_filters, filter_size=filter_size, stride=conv_stride,
                             padding=conv_padding, dilation=conv_dilation, groups=conv_groups, param_attr=param_attr,
                             bias_attr=bias_attr, act=act, use_cudnn=use_cudnn)
    return layers.pool2d(input=conv_out, pool_size=pool_size, pool_type=pool_type, pool_stride=pool_stride,
                         pool_padding=pool_padding, global_pooling=global_pooling, use_cudnn=use_cudnn)


def img_conv_group(input, conv_num_filter, pool_size, conv_padding=1, conv_filter_size=3, conv_act=None,
                   param_attr=None, conv_with_batchnorm=False, conv_batchnorm_drop_rate=0.0, pool_stride=1,
                   pool_type="max", use_cudnn=True):
    """One conv2d per entry of conv_num_filter (each followed by batch_norm with
    conv_act, and dropout when its drop rate is not 0, where
    conv_with_batchnorm), then pool2d: the VGG block. The per-conv arguments
    are a value for every conv or a list with one per conv."""
    if not isinstance(conv_num_filter, (list, tuple)) or not conv_num_filter:
        raise _core.InvalidArgumentError("fluid.nets.img_conv_group: conv_num_filter must be a non-empty list of "
                                         "filter counts, got %r" % (conv_num_filter,))
    n = len(conv_num_filter)

    def per_conv(name, obj):
        if not hasattr(obj, "__len__"):
            return [obj] * n
        if len(obj) != n:
            raise _core.InvalidArgumentError("fluid.nets.img_conv_group: %s has %d entries, conv_num_filter has %d"
                                             % (name, len(obj), n))
        return list(obj)

    conv_padding = per_conv("conv_padding", conv_padding)
    conv_filter_size = per_conv("conv_filter_size", conv_filter_size)
    param_attr = per_conv("param_attr", param_attr)
    conv_with_batchnorm = per_conv("conv_with_batchnorm", conv_with_batchnorm)
    conv_batchnorm_drop_rate = per_conv("conv_batchnorm_drop_rate", conv_batchnorm_drop_rate)
    tmp = input
    for i in range(n):
        local_conv_act = None if conv_with_batchnorm[i] else conv_act
        tmp = layers.conv2d(input=tmp, num_filters=conv_num_filter[i], filter_size=conv_filter_size[i],
                            padding=conv_padding[i], param_attr=param_attr[i], act=local_conv_act,
                            use_cudnn=use_cudnn)
        if conv_with_batchnorm[i]:
            tmp = layers.batch_norm(input=tmp, act=conv_act)
            drop_rate = conv_batchnorm_drop_rate[i]
            if abs(drop_rate) > 1e-5:
                tmp = layers.dropout(x=tmp, dropout_prob=drop_rate)
    return layers.pool2d(input=tmp, pool_size=pool_size, pool_type=pool_type, pool_stride=pool_stride,
                         use_cudnn=use_cudnn)


def glu(input, dim=-1):
    """Gated linear unit: input split in halves a, b along dim; a * sigmoid(b)."""
    if not isinstance(input, Variable):
        raise TypeError("fluid.nets.glu: input must be a Variable, got %s" % type(input).__name__)
    rank = len(input.shape)
    if not -rank <= dim < rank:
        raise _core.InvalidArgumentError("fluid.nets.glu: dim %d is out of range for %s of rank %d"
                                         % (dim, input.name, rank))
    size = input.shape[dim]
    if size >= 0 and size % 2:
        raise _core.InvalidArgumentError("fluid.nets.glu: dim %d of %s has size %d; it must be even (two halves)"
                                         % (dim, input.name, size))
    a, b = layers.split(input, num_or_sections=2, dim=dim)
    return layers.elementwise_mul(x=a, y=layers.sigmoid(x=b))


def scaled_dot_product_attention(queries, keys, values, num_heads=1, dropout_rate=0.):
    """softmax(q k^T / sqrt(d_head)) v over [N, L, D] inputs; with num_heads > 1,
    q, k, v are first projected (fc, no activation) and cut into heads, and
    the heads' outputs are put back together: [N, Lq, Dv]."""
    fn = "fluid.nets.scaled_dot_product_attention"
    for name, v in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(v, Variable):
            raise TypeError("%s: %s must be a Variable, got %s" % (fn, name, type(v).__name__))
    if not (len(queries.shape) == len(keys.shape) == len(values.shape) == 3):
        raise _core.InvalidArgumentError("%s: queries, keys and values must be 3-D [N, L, D], got %s, %s, %s"
                                         % (fn, list(queries.shape), list(keys.shape), list(values.shape)))
    if queries.shape[-1] != keys.shape[-1]:
        raise _core.InvalidArgumentError("%s: the hidden sizes of queries (%d) and keys (%d) must be the same"
                                         % (fn, queries.shape[-1], keys.shape[-1]))
    if keys.shape[-2] != values.shape[-2]:
        raise _core.InvalidArgumentError("%s: keys and values must have the same sequence length, got %d and %d"
                                         % (fn, keys.shape[-2], values.shape[-2]))
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise _core.InvalidArgumentError("%s: num_heads must be an int >= 1, got %r" % (fn, num_heads))
    for name, v in (("keys", keys), ("values", values)):
        if v.shape[-1] % num_heads:
            raise _core.InvalidArgumentError("%s: the hidden size of %s (%d) must be divisible by num_heads (%d)"
                                             % (fn, name, v.shape[-1], num_heads))

    def compute_qkv(q, k, v):
        if num_heads == 1:
            return q, k, v
        return (layers.fc(input=q, size=q.shape[-1], num_flatten_dims=2),
                layers.fc(input=k, size=k.shape[-1], num_flatten_dims=2),
                layers.fc(input=v, size=v.shape[-1], num_flatten_dims=2))

    def split_heads(x):  # [N, L, D] -> [N, heads, L, D / heads]
        if num_heads == 1:
            return x
        hidden = x.shape[-1]
        return layers.transpose(layers.reshape(x, shape=[0, 0, num_heads, hidden // num_heads]), perm=[0, 2, 1, 3])

    def combine_heads(x):  # [N, heads, L, d] -> [N, L, heads * d]
        if len(x.shape) == 3:
            return x
        t = layers.transpose(x, perm=[0, 2, 1, 3])
        return layers.reshape(t, shape=[0, 0, t.shape[2] * t.shape[3]])

    q, k, v = compute_qkv(queries, keys, values)
    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    key_dim_per_head = keys.shape[-1] // num_heads
    product = layers.matmul(layers.scale(q, scale=key_dim_per_head ** -0.5), k, transpose_y=True)
    weights = layers.softmax(product, axis=-1)
    if dropout_rate:
        weights = layers.dropout(weights, dropout_prob=dropout_rate, is_test=False)
    return combine_heads(layers.matmul(weights, v))


def sequence_conv_pool(input, num_filters, filter_size, param_attr=None, act="sigmoid", pool_type="max",
                       bias_attr=None):
    """sequence_conv(input) (its bias and act) then sequence_pool(pool_type): [sequences, num_filters],
    the understand_sentiment chapter's convolution block."""
    conv_out = layers.sequence_conv(input=input, num_filters=num_filters, filter_size=filter_size,
                                    param_attr=param_attr, bias_attr=bias_attr, act=act)
    return layers.sequence_pool(input=conv_out, pool_type=pool_type)
