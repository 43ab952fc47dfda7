"""pe.nn.Layer and the layers — Paddle 2.x's dygraph layers, for eager mode.

A Layer holds parameters (eager tensors with stop_gradient False), buffers
(eager tensors saved in state_dict but not trained: batch norm's running
statistics) and sublayers; assigning one to an attribute registers it.
Parameters are initialized by the same initializers as static mode
(pe.nn.initializer): the op pe_startup_init_var picks for the parameter
(uniform_random for XavierUniform, gaussian_random for Normal, ...) runs
eagerly, seeded from pe.seed's stream. Forward passes are pe.eager ops, so
backward() gives every parameter's .grad.

Layers are eager-only: constructing one in static mode raises
UnsupportedError (static programs use pe.static.nn's builders).
"""
import collections
import math

import numpy as np

from .. import _core
from .. import framework as _fw
from .. import initializer as _init
from ..eager import autograd as _ag
from ..eager import functional as _ef
from ..eager import nn_functional as _enf
from ..param_attr import ParamAttr
from ..utils import unique_name

__all__ = ["Layer", "Linear", "Conv2D", "MaxPool2D", "AvgPool2D", "BatchNorm2D", "LayerNorm", "Embedding", "Dropout",
           "ReLU", "Sigmoid", "Tanh", "GELU", "Softmax", "Flatten", "Sequential", "LayerList", "MSELoss",
           "CrossEntropyLoss", "L1Loss"]


def _eager_init(initializer, shape, dtype, name):
    """The values `initializer` gives a var of this shape and dtype: the op
    pe_startup_init_var appends for it, run eagerly (seed 0 -> pe.seed's stream)."""
    prog = _fw.Program()
    var = prog.global_block().create_var(name=name, shape=list(shape), dtype=dtype, persistable=True)
    initializer(var, prog)
    op = prog.global_block().ops[-1]
    attrs = {k: v for k, v in op.all_attrs().items() if k not in ("op_role", "op_role_var")}
    if "seed" in attrs and not attrs["seed"]:
        attrs["seed"] = _ef._next_seed()
    with _ag.no_grad():
        return _ag.run_op(op.type, {}, {"Out": 1}, attrs)["Out"][0]


def _attr_initializer(attr, default):
    if attr is None or attr is True:
        return default, None
    if isinstance(attr, ParamAttr):
        return (attr.initializer or default), attr.name
    if isinstance(attr, _init.Initializer):
        return attr, None
    if isinstance(attr, str):
        return default, attr
    raise TypeError("weight_attr / bias_attr must be a ParamAttr, an Initializer, a name, None or False, got %s"
                    % type(attr).__name__)


class Layer:
    """Paddle 2.x's Layer: parameters, buffers and sublayers registered by
    attribute assignment, train()/eval(), state_dict(), and __call__ -> forward."""

    def __init__(self, name_scope=None, dtype="float32"):
        if _fw._static_mode:
            raise _core.UnsupportedError(
                "pe.nn.%s is an eager-mode layer: call pe.disable_static() first (static programs use "
                "pe.static.nn's builders)" % type(self).__name__)
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_sub_layers", collections.OrderedDict())
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_dtype", dtype)
        object.__setattr__(self, "_full_name", unique_name.generate(name_scope or type(self).__name__.lower()))

    def full_name(self):
        return self._full_name

    # ---- registration -----------------------------------------------------------------
    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise _core.InvalidArgumentError(
                "%s: call super().__init__() before assigning attribute '%s'" % (type(self).__name__, name))
        for reg in (d["_parameters"], d["_buffers"], d["_sub_layers"]):
            reg.pop(name, None)
        if isinstance(value, Layer):
            d["_sub_layers"][name] = value
        elif isinstance(value, _ag.Tensor) and (getattr(value, "_is_param", False) or
                                                (value.is_leaf and not value.stop_gradient)):
            d["_parameters"][name] = value  # made by create_parameter, or a trainable leaf
        elif isinstance(value, _ag.Tensor) and getattr(value, "_is_buffer", False):
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)
            return
        d.pop(name, None)

    def __getattr__(self, name):
        d = self.__dict__
        for reg in ("_parameters", "_buffers", "_sub_layers"):
            if reg in d and name in d[reg]:
                return d[reg][name]
        raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))

    def __delattr__(self, name):
        for reg in (self._parameters, self._buffers, self._sub_layers):
            if name in reg:
                del reg[name]
                return
        object.__delattr__(self, name)

    def add_sublayer(self, name, sublayer):
        if not isinstance(sublayer, Layer):
            raise TypeError("add_sublayer: '%s' must be a Layer, got %s" % (name, type(sublayer).__name__))
        self._sub_layers[str(name)] = sublayer
        return sublayer

    def add_parameter(self, name, parameter):
        if parameter is None:
            self._parameters[str(name)] = None
            return None
        if not isinstance(parameter, _ag.Tensor):
            raise TypeError("add_parameter: '%s' must be a pe.eager.Tensor, got %s" % (name, type(parameter).__name__))
        self._parameters[str(name)] = parameter
        return parameter

    def register_buffer(self, name, tensor, persistable=True):
        if not isinstance(tensor, _ag.Tensor):
            raise TypeError("register_buffer: '%s' must be a pe.eager.Tensor, got %s" % (name, type(tensor).__name__))
        tensor._is_buffer = True
        tensor.stop_gradient = True
        self._buffers[str(name)] = tensor
        return tensor

    def create_parameter(self, shape, attr=None, dtype=None, is_bias=False, default_initializer=None):
        """A trainable eager tensor of `shape`, filled by attr's initializer, else
        default_initializer, else Constant(0) for a bias and XavierUniform for a
        weight (Paddle's defaults). attr=False: no parameter (None)."""
        if attr is False:
            return None
        dtype = dtype or self._dtype
        default = default_initializer or (_init.Constant(0.0) if is_bias else _init.XavierUniform())
        initializer, pname = _attr_initializer(attr, default)
        pname = pname or unique_name.generate(self._full_name + (".b" if is_bias else ".w"))
        p = _eager_init(initializer, [int(d) for d in shape], dtype, pname)
        p.stop_gradient = False
        p.name = pname
        p.trainable = True
        p._is_param = True
        if isinstance(attr, ParamAttr) and not attr.trainable:
            p.stop_gradient = True
            p.trainable = False
        return p

    # ---- traversal --------------------------------------------------------------------
    def named_sublayers(self, prefix="", include_self=False, layers_set=None):
        layers_set = set() if layers_set is None else layers_set
        if include_self and id(self) not in layers_set:
            layers_set.add(id(self))
            yield prefix, self
        for name, sub in self._sub_layers.items():
            if sub is None or id(sub) in layers_set:
                continue
            p = prefix + ("." if prefix else "") + name
            layers_set.add(id(sub))
            yield p, sub
            yield from sub.named_sublayers(p, False, layers_set)

    def sublayers(self, include_self=False):
        return [l for _, l in self.named_sublayers(include_self=include_self)]

    def children(self):
        return [l for l in self._sub_layers.values() if l is not None]

    def named_children(self):
        return [(n, l) for n, l in self._sub_layers.items() if l is not None]

    def named_parameters(self, prefix="", include_sublayers=True):
        seen = set()
        layers = self.named_sublayers(prefix, include_self=True) if include_sublayers else [(prefix, self)]
        for lp, layer in layers:
            for name, p in layer._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield lp + ("." if lp else "") + name, p

    def parameters(self, include_sublayers=True):
        return [p for _, p in self.named_parameters(include_sublayers=include_sublayers)]

    def named_buffers(self, prefix="", include_sublayers=True):
        layers = self.named_sublayers(prefix, include_self=True) if include_sublayers else [(prefix, self)]
        for lp, layer in layers:
            for name, b in layer._buffers.items():
                yield lp + ("." if lp else "") + name, b

    def buffers(self, include_sublayers=True):
        return [b for _, b in self.named_buffers(include_sublayers=include_sublayers)]

    # ---- modes ------------------------------------------------------------------------
    def train(self):
        for l in self.sublayers(include_self=True):
            object.__setattr__(l, "training", True)
        return self

    def eval(self):
        for l in self.sublayers(include_self=True):
            object.__setattr__(l, "training", False)
        return self

    def clear_gradients(self):
        for p in self.parameters():
            p.clear_grad()

    # ---- state ------------------------------------------------------------------------
    def state_dict(self, destination=None, include_sublayers=True, structured_name_prefix=""):
        """{structured name: tensor} of every parameter and buffer (the tensors
        themselves, not copies), in registration order."""
        d = collections.OrderedDict() if destination is None else destination
        layers = self.named_sublayers(include_self=True) if include_sublayers else [("", self)]
        for lp, layer in layers:
            for reg in (layer._parameters, layer._buffers):
                for name, t in reg.items():
                    if t is not None:
                        d[structured_name_prefix + lp + ("." if lp else "") + name] = t
        return d

    def set_state_dict(self, state_dict, use_structured_name=True):
        """Copies state_dict's values (tensors or numpy arrays) into the
        parameters and buffers of the same name. Every entry is checked first
        (a missing name, or another shape or dtype, is an error naming it);
        nothing is set unless all are good. Returns (missing, unexpected) keys."""
        if not isinstance(state_dict, dict):
            raise TypeError("set_state_dict: state_dict must be a dict, got %s" % type(state_dict).__name__)
        own = self.state_dict()
        bad, vals = [], []
        for name, t in own.items():
            if name not in state_dict:
                bad.append("%s is missing" % name)
                continue
            v = state_dict[name]
            a = v.numpy() if isinstance(v, _ag.Tensor) else np.asarray(v)
            if list(a.shape) != t.shape or a.dtype.name != t.dtype:
                bad.append("%s is %s %s, the layer's is %s %s" % (name, a.dtype.name, list(a.shape), t.dtype, t.shape))
                continue
            vals.append((t, a))
        if bad:
            raise _core.InvalidArgumentError("set_state_dict: %s" % "; ".join(bad))
        for t, a in vals:
            raw = _core.Tensor()
            raw.set(np.ascontiguousarray(a), t._t._place())  # the parameter stays on its place
            t._t = raw
        return [], sorted(set(state_dict) - set(own))

    set_dict = set_state_dict
    load_dict = set_state_dict

    # ---- call -------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        raise NotImplementedError("%s.forward is not defined" % type(self).__name__)

    def __call__(self, *inputs, **kwargs):
        return self.forward(*inputs, **kwargs)

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = ["%s(%s" % (type(self).__name__, self.extra_repr())]
        for n, l in self._sub_layers.items():
            lines.append("  (%s): %s" % (n, repr(l).replace("\n", "\n  ")))
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")


# ---- layers ---------------------------------------------------------------------------

class Linear(Layer):
    """y = x @ weight + bias; weight [in_features, out_features] (XavierUniform), bias zeros."""

    def __init__(self, in_features, out_features, weight_attr=None, bias_attr=None, name=None):
        super().__init__(name or "linear")
        self.weight = self.create_parameter([in_features, out_features], weight_attr)
        self.bias = self.create_parameter([out_features], bias_attr, is_bias=True)
        self._in, self._out = int(in_features), int(out_features)

    def forward(self, x):
        return _enf.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return "in_features=%d, out_features=%d" % (self._in, self._out)


class Conv2D(Layer):
    """conv2d; weight [out_channels, in_channels/groups, kh, kw] ~ Normal(0, sqrt(2 / fan_in))
    (Paddle 2.x's default, fan_in = in_channels/groups * kh * kw), bias zeros."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 padding_mode="zeros", weight_attr=None, bias_attr=None, data_format="NCHW"):
        super().__init__("conv2d")
        if padding_mode != "zeros":
            raise _core.UnsupportedError("Conv2D: padding_mode '%s' is not supported (zeros only)" % padding_mode)
        if in_channels % _enf._positive_int(groups, "Conv2D groups"):
            raise _core.InvalidArgumentError("Conv2D: in_channels %d is not a multiple of groups %d"
                                             % (in_channels, groups))
        ks = _enf._pair(kernel_size, "Conv2D kernel_size", True)
        self._stride, self._padding = _enf._pair(stride, "Conv2D stride", True), padding
        self._dilation, self._groups = _enf._pair(dilation, "Conv2D dilation", True), int(groups)
        self._data_format = data_format
        fan_in = in_channels // groups * ks[0] * ks[1]
        self.weight = self.create_parameter([out_channels, in_channels // groups] + ks, weight_attr,
                                            default_initializer=_init.Normal(0.0, math.sqrt(2.0 / fan_in)))
        self.bias = self.create_parameter([out_channels], bias_attr, is_bias=True)

    def forward(self, x):
        return _enf.conv2d(x, self.weight, self.bias, self._stride, self._padding, self._dilation, self._groups,
                           self._data_format)


class MaxPool2D(Layer):
    def __init__(self, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCHW",
                 name=None):
        super().__init__("maxpool2d")
        self._args = (kernel_size, stride, padding, return_mask, ceil_mode, data_format)

    def forward(self, x):
        return _enf.max_pool2d(x, *self._args)


class AvgPool2D(Layer):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
                 data_format="NCHW", name=None):
        super().__init__("avgpool2d")
        self._args = (kernel_size, stride, padding, ceil_mode, exclusive, divisor_override, data_format)

    def forward(self, x):
        return _enf.avg_pool2d(x, *self._args)


class BatchNorm2D(Layer):
    """batch_norm over axis 1 of NCHW input: weight ones, bias zeros, buffers
    _mean zeros and _variance ones. train(): batch statistics, and the running
    ones move (running = momentum * running + (1 - momentum) * batch);
    eval(): the running statistics."""

    def __init__(self, num_features, momentum=0.9, epsilon=1e-05, weight_attr=None, bias_attr=None,
                 data_format="NCHW", use_global_stats=None, name=None):
        super().__init__("batch_norm")
        self.weight = self.create_parameter([num_features], weight_attr, default_initializer=_init.Constant(1.0))
        self.bias = self.create_parameter([num_features], bias_attr, is_bias=True)
        self.register_buffer("_mean", _ef.zeros([num_features], self._dtype))
        self.register_buffer("_variance", _ef.ones([num_features], self._dtype))
        self._momentum, self._epsilon = float(momentum), float(epsilon)
        self._data_format, self._use_global_stats = data_format, use_global_stats

    def forward(self, x):
        if x.ndim != 4:
            raise _core.InvalidArgumentError("BatchNorm2D: x must be [N, C, H, W], got %s" % x.shape)
        return _enf.batch_norm(x, self._mean, self._variance, self.weight, self.bias, self.training, self._momentum,
                               self._epsilon, self._data_format, self._use_global_stats)


class LayerNorm(Layer):
    """layer_norm over the trailing normalized_shape dims: weight ones, bias zeros."""

    def __init__(self, normalized_shape, epsilon=1e-05, weight_attr=None, bias_attr=None, name=None):
        super().__init__("layer_norm")
        if isinstance(normalized_shape, (int, np.integer)):
            normalized_shape = [int(normalized_shape)]
        self._shape = [int(d) for d in normalized_shape]
        self._epsilon = float(epsilon)
        n = int(np.prod(self._shape))
        self.weight = self.create_parameter([n], weight_attr, default_initializer=_init.Constant(1.0))
        self.bias = self.create_parameter([n], bias_attr, is_bias=True)

    def forward(self, x):
        return _enf.layer_norm(x, self._shape, self.weight, self.bias, self._epsilon)


class Embedding(Layer):
    """lookup_table_v2; weight [num_embeddings, embedding_dim] (XavierUniform);
    ids equal to padding_idx give zeros and no gradient."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, sparse=False, weight_attr=None, name=None):
        super().__init__("embedding")
        if sparse:
            raise _core.UnsupportedError("Embedding: sparse gradients are not supported (dense tensors only)")
        pad = _enf._padding_idx(padding_idx, int(num_embeddings), "Embedding")
        self._padding_idx = None if pad < 0 else pad
        self.weight = self.create_parameter([num_embeddings, embedding_dim], weight_attr)

    def forward(self, x):
        return _enf.embedding(x, self.weight, self._padding_idx)


class Dropout(Layer):
    """dropout in train(), the identity (upscale_in_train) in eval()."""

    def __init__(self, p=0.5, axis=None, mode="upscale_in_train", name=None):
        super().__init__("dropout")
        self.p, self._axis, self._mode = p, axis, mode

    def forward(self, x):
        return _enf.dropout(x, self.p, self._axis, self.training, self._mode)


class _Act(Layer):
    _fn = None

    def __init__(self, name=None):
        super().__init__(type(self).__name__.lower())

    def forward(self, x):
        return type(self)._fn(x)


class ReLU(_Act):
    _fn = staticmethod(_ef.relu)


class Sigmoid(_Act):
    _fn = staticmethod(_ef.sigmoid)


class Tanh(_Act):
    _fn = staticmethod(_ef.tanh)


class GELU(Layer):
    def __init__(self, approximate=False, name=None):
        super().__init__("gelu")
        self._approximate = bool(approximate)

    def forward(self, x):
        return _enf.gelu(x, self._approximate)


class Softmax(Layer):
    def __init__(self, axis=-1, name=None):
        super().__init__("softmax")
        self._axis = int(axis)

    def forward(self, x):
        return _ef.softmax(x, self._axis)


class Flatten(Layer):
    def __init__(self, start_axis=1, stop_axis=-1):
        super().__init__("flatten")
        self._start, self._stop = int(start_axis), int(stop_axis)

    def forward(self, x):
        return _enf.flatten(x, self._start, self._stop)


class Sequential(Layer):
    """Sublayers called in order: Sequential(l1, l2) or Sequential(('name', l1), ...)."""

    def __init__(self, *layers):
        super().__init__("sequential")
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)) and layers[0] and \
                isinstance(layers[0][0], (list, tuple)):
            layers = layers[0]
        for i, l in enumerate(layers):
            if isinstance(l, (list, tuple)):
                self.add_sublayer(l[0], l[1])
            else:
                self.add_sublayer(str(i), l)

    def __getitem__(self, i):
        items = list(self._sub_layers.values())
        if isinstance(i, slice):
            return Sequential(*items[i])
        return items[i]

    def __len__(self):
        return len(self._sub_layers)

    def forward(self, x):
        for l in self._sub_layers.values():
            x = l(x)
        return x


class LayerList(Layer):
    """A list of sublayers (registered as "0", "1", ...)."""

    def __init__(self, sublayers=None):
        super().__init__("layerlist")
        for l in sublayers or []:
            self.append(l)

    def append(self, sublayer):
        self.add_sublayer(str(len(self._sub_layers)), sublayer)
        return self

    def extend(self, sublayers):
        for l in sublayers:
            self.append(l)
        return self

    def __getitem__(self, i):
        items = list(self._sub_layers.values())
        if isinstance(i, slice):
            return LayerList(items[i])
        return items[i]

    def __setitem__(self, i, layer):
        key = list(self._sub_layers)[i]
        self._sub_layers[key] = layer

    def __len__(self):
        return len(self._sub_layers)

    def __iter__(self):
        return iter(self._sub_layers.values())


# ---- losses ---------------------------------------------------------------------------

class MSELoss(Layer):
    def __init__(self, reduction="mean"):
        super().__init__("mseloss")
        self._reduction = reduction

    def forward(self, input, label):
        return _enf.mse_loss(input, label, self._reduction)


class L1Loss(Layer):
    def __init__(self, reduction="mean", name=None):
        super().__init__("l1loss")
        self._reduction = reduction

    def forward(self, input, label):
        return _enf.l1_loss(input, label, self._reduction)


class CrossEntropyLoss(Layer):
    """softmax_with_cross_entropy then the reduction; hard labels [N] or [N, 1]."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1, use_softmax=True,
                 name=None):
        super().__init__("crossentropyloss")
        self._args = (weight, ignore_index, reduction, soft_label, axis, use_softmax)

    def forward(self, input, label):
        weight, ignore_index, reduction, soft_label, axis, use_softmax = self._args
        if not soft_label:
            label = _enf._labels(input, label, axis)
        return _ef.cross_entropy(input, label, weight, ignore_index, reduction, soft_label, axis, use_softmax)
