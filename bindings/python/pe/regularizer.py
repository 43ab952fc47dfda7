"""pe.regularizer — weight decay terms (Paddle's L2Decay and L1Decay; added to
the gradients by the optimizer pass in C, passes/optimizer.c).

An optimizer's weight_decay= (fluid: regularization=) applies to every
parameter; a ParamAttr(regularizer=) replaces it for that parameter, as in
Paddle. L2Decay(c): grad += c * param; L1Decay(c): grad += c * sign(param).
"""
import math

from . import _core

__all__ = ["L2Decay", "L1Decay", "L2DecayRegularizer", "L1DecayRegularizer"]


def _coeff(cls, coeff):
    try:
        c = float(coeff)
    except (TypeError, ValueError):
        c = float("nan")
    if isinstance(coeff, bool) or not math.isfinite(c) or c < 0:
        raise _core.InvalidArgumentError("%s: coeff must be a finite number >= 0, got %r" % (cls, coeff))
    return c


class L2Decay:
    """grad += coeff * param (Paddle's L2Decay, torch's weight_decay)."""

    def __init__(self, coeff=0.0):
        self.coeff = _coeff("L2Decay", coeff)

    def __repr__(self):
        return "L2Decay(coeff=%g)" % self.coeff


class L1Decay:
    """grad += coeff * sign(param) (Paddle's L1Decay: a sign op and a scale op per parameter)."""

    def __init__(self, coeff=0.0):
        self.coeff = _coeff("L1Decay", coeff)

    def __repr__(self):
        return "L1Decay(coeff=%g)" % self.coeff


L2DecayRegularizer = L2Decay
L1DecayRegularizer = L1Decay
