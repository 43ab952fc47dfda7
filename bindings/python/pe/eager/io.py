"""pe.save / pe.load — state dicts ({name: tensor}) as safetensors files.

pe.save(layer.state_dict(), "model.pdparams") writes every tensor of the
dict under its key (pe_safetensors_write: the file is replaced atomically,
readable by numpy/PyTorch users); pe.load(path) gives them back as a dict
of eager tensors in eager mode (numpy arrays in static mode), ready for
Layer.set_state_dict. The path is used as given (no suffix added).
"""
import collections
import os

import numpy as np

from .. import _core
from .. import framework as _fw
from .autograd import Tensor
from .functional import to_tensor


def save(obj, path, protocol=4, **configs):
    """Writes obj, a dict {str: pe.eager.Tensor or numpy array}, to path."""
    if not isinstance(obj, dict):
        raise _core.UnsupportedError("pe.save: obj must be a state dict {name: tensor}, got %s" % type(obj).__name__)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("pe.save: path must be a path, got %s" % type(path).__name__)
    path = os.fspath(path)
    scope, names = _core.Scope(), []
    for k, v in obj.items():
        if not isinstance(k, str):
            raise TypeError("pe.save: state dict keys must be str, got %r" % (k,))
        if isinstance(v, Tensor):
            a = v.numpy()
        elif isinstance(v, np.ndarray):
            a = v
        else:
            raise _core.UnsupportedError("pe.save: entry '%s' is a %s; a state dict holds tensors or numpy arrays "
                                         "(nested objects are not supported)" % (k, type(v).__name__))
        scope.var(k).get_tensor().set(np.ascontiguousarray(a))
        names.append(k)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    _core.safetensors_write(path, scope, names)


def load(path, **configs):
    """The dict pe.save wrote to path: {name: pe.eager.Tensor} in eager mode,
    {name: numpy array} in static mode."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("pe.load: path must be a path, got %s" % type(path).__name__)
    path = os.fspath(path)
    if not os.path.exists(path):
        raise _core.NotFoundError("pe.load: no file %s" % path)
    scope = _core.Scope()
    _core.safetensors_read(path, scope)
    out = collections.OrderedDict()
    for n in sorted(scope.local_var_names()):
        a = np.array(scope.find_var(n).get_tensor())
        out[n] = a if _fw._static_mode else to_tensor(a)
    return out
