"""pe.regularizer — weight decay terms (Paddle's L2Decay; applied by the optimizer pass in C)."""
from . import _core

__all__ = ["L2Decay", "L1Decay"]


class L2Decay:
    """grad += coeff * param (Paddle's L2Decay, torch's weight_decay)."""

    def __init__(self, coeff=0.0):
        self.coeff = float(coeff)

    def __repr__(self):
        return "L2Decay(coeff=%g)" % self.coeff


class L1Decay:
    """Declared for Paddle compatibility; the PE optimizer pass implements L2 only."""

    def __init__(self, coeff=0.0):
        raise _core.UnsupportedError("L1Decay is not implemented by PE's optimizer pass; use L2Decay")


L2DecayRegularizer = L2Decay
