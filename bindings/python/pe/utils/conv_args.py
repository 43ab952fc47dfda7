"""pe.utils.conv_args — the kernel-size / stride / padding / layout arguments of the
conv, pool and batch-norm APIs and embedding's padding_idx, read once for the static
builders (pe.nn.functional, pe.static.nn, pe.fluid) and their eager forms
(pe.eager.nn_functional, pe.nn's layers)."""
import numpy as np

from .. import _core


def pair(v, what, positive=False):
    """[h, w] from an int or a pair; `what` names the argument in errors.
    positive: each must be > 0 (a kernel size, stride or dilation)."""
    if isinstance(v, (int, np.integer)):
        v = [int(v), int(v)]
    v = [int(a) for a in v]
    if len(v) != 2:
        raise _core.InvalidArgumentError("%s must be an int or a pair, got %s" % (what, v))
    if positive and min(v) <= 0:
        raise _core.InvalidArgumentError("%s must be positive, got %s" % (what, v if v[0] != v[1] else v[0]))
    return v


def positive_int(v, what):
    """int(v), which must be > 0 (a conv's groups); `what` names it in errors."""
    n = int(v)
    if n <= 0:
        raise _core.InvalidArgumentError("%s must be a positive int, got %d" % (what, n))
    return n


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


def padding_idx(v, num, api):
    """An embedding's padding_idx attr: -1 for None, else v in [-num, num)
    (num: the table's rows), a negative v counted from the end (Paddle's rule)."""
    if v is None:
        return -1
    p = int(v)
    if num >= 0 and not -num <= p < num:
        raise _core.InvalidArgumentError("%s: padding_idx must be in [-%d, %d) for %d embeddings, got %d"
                                         % (api, num, num, num, p))
    return p + num if p < 0 else p


def channels_last(data_format, api, nhwc_ok=True):
    """A conv / pool data_format: False for 'NCHW', True for 'NHWC' (the ops
    take both on CPU places; CUDA places run NCHW only); anything else, or
    NHWC where the op has no such form (nhwc_ok False), is an UnsupportedError."""
    if data_format == "NCHW":
        return False
    if data_format == "NHWC" and nhwc_ok:
        return True
    raise _core.UnsupportedError("%s: data_format must be %s, got %r" % (
        api, "'NCHW' or 'NHWC'" if nhwc_ok else "'NCHW'", data_format))


def bn_layout(data_format, api):
    """batch_norm's data_layout attr from a Paddle data_format: channels on
    axis 1 (NC, NCL, NCHW, NCDHW) -> 'NCHW'; channels last (NLC, NHWC,
    NDHWC) -> 'NHWC'."""
    if data_format in ("NCHW", "NC", "NCL", "NCDHW"):
        return "NCHW"
    if data_format in ("NHWC", "NLC", "NDHWC"):
        return "NHWC"
    raise _core.UnsupportedError("%s: data_format must put the channels on axis 1 (NC, NCL, NCHW, NCDHW) or last "
                                 "(NLC, NHWC, NDHWC), got %r" % (api, data_format))
