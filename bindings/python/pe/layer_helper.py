"""pe.layer_helper — what every layer does: unique names, temporaries, parameters, ops.

Naming follows Paddle's LayerHelper: a layer of type `fc` is named fc_<n>;
its parameters are fc_<n>.w_<k> / fc_<n>.b_<k> and its temporaries
fc_<n>.tmp_<k>, so programs built here carry the names Paddle users (and
checkpoints) expect.
"""
from . import _core
from .framework import Parameter, Variable, default_main_program, default_startup_program, require_op
from .initializer import Constant, XavierUniform
from .param_attr import ParamAttr
from .utils import unique_name


class LayerHelper:
    def __init__(self, layer_type, name=None):
        self.layer_type = layer_type
        self.name = name if name is not None else unique_name.generate(layer_type)

    @property
    def main_program(self):
        return default_main_program()

    @property
    def startup_program(self):
        return default_startup_program()

    @property
    def block(self):
        return self.main_program.current_block()

    def create_variable_for_type_inference(self, dtype, stop_gradient=False, shape=None):
        return self.block.create_var(name=unique_name.generate_with_ignorable_key(self.name + ".tmp"), dtype=dtype,
                                     shape=shape, persistable=False, stop_gradient=stop_gradient)

    create_tmp_variable = create_variable_for_type_inference

    def create_global_variable(self, shape, dtype, persistable=True, name=None, stop_gradient=True):
        name = name if name is not None else unique_name.generate(self.name + ".global")
        v = self.main_program.global_block().create_var(name=name, shape=shape, dtype=dtype, persistable=persistable,
                                                        stop_gradient=stop_gradient)
        return v

    def set_variable_initializer(self, var, initializer):
        """Declares var (persistable) in the startup program with its init op."""
        svar = self.startup_program.global_block().create_var(name=var.name, shape=var.shape, dtype=var.dtype,
                                                              persistable=True, stop_gradient=var.stop_gradient)
        initializer(svar, self.startup_program)
        return var

    def create_parameter(self, attr, shape, dtype="float32", is_bias=False, default_initializer=None):
        """A Parameter in the main program's global block, initialized in the startup program."""
        attr = ParamAttr._to_attr(attr)
        if attr is False:
            return None
        shape = [int(d) for d in shape]
        if any(d <= 0 for d in shape):
            raise _core.InvalidArgumentError(
                "%s: parameter shape %s must be fully known and positive (is an input dim unknown?)" % (
                    self.name, shape))
        name = attr.name if attr.name is not None else unique_name.generate(
            "%s.%s" % (self.name, "b" if is_bias else "w"))
        init = attr.initializer or default_initializer or (Constant(0.0) if is_bias else XavierUniform())
        gblock = self.main_program.global_block()
        if name in gblock.vars:
            p = gblock.vars[name]
            if not isinstance(p, Parameter) or list(p.shape) != shape:
                raise _core.InvalidArgumentError(
                    "parameter name '%s' is already used by %r in this program" % (name, p))
            return p  # shared parameter (same ParamAttr name)
        p = gblock.create_parameter(name=name, shape=shape, dtype=dtype, trainable=attr.trainable,
                                    optimize_attr={"learning_rate": attr.learning_rate},
                                    regularizer=attr.regularizer, do_model_average=attr.do_model_average,
                                    need_clip=attr.need_clip)
        p.initializer = init
        sblock = self.startup_program.global_block()
        if name not in sblock.vars:
            sp = sblock.create_parameter(name=name, shape=shape, dtype=dtype, trainable=attr.trainable)
            init(sp, self.startup_program)
        return p

    def append_op(self, type, inputs=None, outputs=None, attrs=None):
        return self.block.append_op(type=type, inputs=inputs, outputs=outputs, attrs=attrs)

    def append_bias_op(self, x, bias_attr, dim_start=1, dim_end=None):
        """x + bias (bias shape x.shape[dim_start:dim_end]) with elementwise_add(axis=dim_start)."""
        bias_attr = ParamAttr._to_attr(bias_attr)
        if bias_attr is False:
            return x
        size = list(x.shape[dim_start:dim_end])
        b = self.create_parameter(bias_attr, size, x.dtype, is_bias=True)
        out = self.create_variable_for_type_inference(x.dtype, shape=x.shape)
        self.append_op("elementwise_add", {"X": [x], "Y": [b]}, {"Out": [out]}, {"axis": dim_start})
        return out

    def append_activation(self, x, act):
        if act is None:
            return x
        if isinstance(act, dict):
            act = dict(act)
            act_type = act.pop("type")
            attrs = act
        else:
            act_type, attrs = act, {}
        require_op(act_type, "activation '%s'" % act_type)
        out = self.create_variable_for_type_inference(x.dtype, shape=x.shape)
        self.append_op(act_type, {"X": [x]}, {"Out": [out]}, attrs)
        return out


def check_variable(x, name, api):
    if not isinstance(x, Variable):
        raise TypeError("%s: %s must be a Variable (from pe.static.data or a layer), got %s" % (
            api, name, type(x).__name__))
    return x
