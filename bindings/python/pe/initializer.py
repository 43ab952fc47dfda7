"""pe.initializer (also pe.nn.initializer) — Paddle's initializers, as ops of the startup program.

Each initializer, called on a parameter (or any persistable var) and a
startup block, declares the var in the startup program and appends the op
that fills it. The op itself is chosen and parameterized by the C engine
(passes/initializer.c, pe_startup_init_var): fill_constant, uniform_random,
gaussian_random, truncated_gaussian_random or assign_value, with Xavier and
Kaiming bounds computed from the fans as Paddle's _compute_fans does — the
same startup program a C API user gets. seed=0 derives the random stream
from the startup program's random_seed and the var name.
"""
import numpy as np

from . import _core
from .framework import Block, Program, Variable, default_startup_program

__all__ = ["Initializer", "Constant", "Uniform", "Normal", "TruncatedNormal", "XavierUniform", "XavierNormal",
           "KaimingUniform", "KaimingNormal", "Assign", "calculate_gain"]


class Initializer:
    """Base class: subclasses give _kind and _params()."""

    _kind = None

    def _params(self):
        return {}

    def __call__(self, var, block=None):
        """Declares `var` in the startup program (block: a startup block or
        program; default: the default startup program) and appends its init op."""
        if block is None:
            prog = default_startup_program()
        elif isinstance(block, Block):
            prog = block.program
        elif isinstance(block, Program):
            prog = block
        else:
            raise TypeError("initializer block must be a Block or Program, got %s" % type(block).__name__)
        if not isinstance(var, Variable):
            raise TypeError("initializer target must be a Variable, got %s" % type(var).__name__)
        if any(d < 0 for d in var.shape):
            raise _core.InvalidArgumentError(
                "cannot initialize '%s': its shape %s has an unknown (-1) dim" % (var.name, list(var.shape)))
        c = prog._fresh_core()
        _core.startup_init_var(c, var.name, var.dtype, list(var.shape), self._kind,
                               is_parameter=var.is_parameter, stop_gradient=var.stop_gradient, **self._params())
        prog._load_json(c.to_json())
        return prog.global_block().ops[-1]

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self._params().items()))


class Constant(Initializer):
    _kind = "constant"

    def __init__(self, value=0.0, force_cpu=False):
        self.value = float(value)

    def _params(self):
        return {"value": self.value}


class Uniform(Initializer):
    _kind = "uniform"

    def __init__(self, low=-1.0, high=1.0, seed=0, name=None):
        self.low, self.high, self.seed = float(low), float(high), int(seed)

    def _params(self):
        return {"low": self.low, "high": self.high, "seed": self.seed}


class Normal(Initializer):
    _kind = "normal"

    def __init__(self, mean=0.0, std=1.0, seed=0, name=None):
        self.mean, self.std, self.seed = float(mean), float(std), int(seed)

    def _params(self):
        return {"mean": self.mean, "std": self.std, "seed": self.seed}


class TruncatedNormal(Normal):
    _kind = "truncated_normal"


class XavierUniform(Initializer):
    _kind = "xavier_uniform"

    def __init__(self, fan_in=None, fan_out=None, seed=0, name=None):
        self.fan_in, self.fan_out, self.seed = fan_in, fan_out, int(seed)

    def _params(self):
        return {"fan_in": int(self.fan_in or 0), "fan_out": int(self.fan_out or 0), "seed": self.seed}


class XavierNormal(XavierUniform):
    _kind = "xavier_normal"


class KaimingUniform(Initializer):
    _kind = "kaiming_uniform"

    def __init__(self, fan_in=None, negative_slope=0.0, nonlinearity="relu", seed=0, name=None):
        if nonlinearity != "relu" or negative_slope:
            raise _core.UnsupportedError("Kaiming initializers support nonlinearity='relu' with negative_slope=0 "
                                         "(the gain sqrt(2) of pe_startup_init_var)")
        self.fan_in, self.seed = fan_in, int(seed)

    def _params(self):
        return {"fan_in": int(self.fan_in or 0), "seed": self.seed}


class KaimingNormal(KaimingUniform):
    _kind = "kaiming_normal"


# Paddle's fluid-era names.
ConstantInitializer = Constant
UniformInitializer = Uniform
NormalInitializer = Normal
TruncatedNormalInitializer = TruncatedNormal
MSRA = KaimingNormal


class Assign(Initializer):
    _kind = "assign"

    def __init__(self, value, name=None):
        self.value = np.asarray(value, dtype=np.float64)

    def __call__(self, var, block=None):
        if self.value.size != int(np.prod(var.shape)):
            raise _core.InvalidArgumentError("Assign initializer for '%s': %d values for shape %s" % (
                var.name, self.value.size, list(var.shape)))
        return super().__call__(var, block)

    def _params(self):
        return {"values": self.value.ravel()}


def calculate_gain(nonlinearity, param=None):
    """Paddle's calculate_gain."""
    import math
    gains = {"sigmoid": 1.0, "linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "tanh": 5.0 / 3,
             "relu": math.sqrt(2.0), "selu": 3.0 / 4}
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in gains:
        raise ValueError("calculate_gain: unknown nonlinearity %r" % nonlinearity)
    return gains[nonlinearity]
