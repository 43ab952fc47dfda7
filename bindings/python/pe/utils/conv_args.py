"""pe.utils.conv_args — the kernel-size / stride / padding arguments of the
conv and pool APIs, read once for the static builders (pe.nn.functional)
and their eager forms (pe.eager.nn_functional)."""
import numpy as np

from .. import _core


def pair(v, what):
    """[h, w] from an int or a pair; `what` names the argument in errors."""
    if isinstance(v, (int, np.integer)):
        return [int(v), int(v)]
    v = [int(a) for a in v]
    if len(v) != 2:
        raise _core.InvalidArgumentError("%s must be an int or a pair, got %s" % (what, v))
    return v


def padding(padding, what):
    """(paddings [h, w], padding_algorithm) from 'SAME' / 'VALID', an int, a
    pair, or four symmetric values."""
    if isinstance(padding, str):
        algo = padding.upper()
        if algo not in ("SAME", "VALID"):
            raise _core.InvalidArgumentError("%s: padding must be 'SAME', 'VALID', an int or a pair" % what)
        return [0, 0], algo
    if isinstance(padding, (list, tuple)) and len(padding) == 4:
        p = [int(a) for a in padding]
        if p[0] != p[1] or p[2] != p[3]:
            raise _core.UnsupportedError("%s: asymmetric padding %s is not supported" % (what, p))
        return [p[0], p[2]], "EXPLICIT"
    return pair(padding, what + " padding"), "EXPLICIT"
