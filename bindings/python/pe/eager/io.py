"""pe.save / pe.load — state dicts ({name: tensor}) as safetensors files.

pe.save(layer.state_dict(), "model.pdparams") writes every tensor of the
dict under its key (pe_safetensors_write: the file is replaced atomically,
readable by numpy/PyTorch users); pe.load(path) gives them back as a dict
of eager tensors in eager mode (numpy arrays in static mode), ready for
Layer.set_state_dict. The path is used as given (no suffix added).

Other values go in too, as Paddle's pickled files carry them: numbers,
str, bool, None, lists and dicts of them, and dicts holding tensors
(an optimizer's "LR_Scheduler" state, {"model": ..., "opt": ..., "epoch":
3}). They are written as JSON in the header's metadata under "pe.objects"
(never pickle: loading runs no code), a nested tensor as the marker
{"__pe_tensor__": "<key>/<key>..."} with its data in the file under that
path. pe.load puts them back where they were (tuples come back as lists).
"""
import collections
import json
import os

import numpy as np

from .. import _core
from .. import framework as _fw
from .autograd import Tensor
from .functional import to_tensor

_OBJECTS = "pe.objects"   # the metadata key of the non-tensor values
_MARK = "__pe_tensor__"   # a nested tensor's place in them


def _array(v):
    return v.numpy() if isinstance(v, Tensor) else v if isinstance(v, np.ndarray) else None


def _put(tensors, name, a):
    if name in tensors:
        raise _core.InvalidArgumentError("pe.save: '%s' is both a key and the path of a nested tensor" % name)
    tensors[name] = a


def _encode(v, path, tensors):
    """v as JSON-able data; tensors below the top level go to tensors[path]."""
    a = _array(v)
    if a is not None:
        _put(tensors, path, a)
        return {_MARK: path}
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_encode(x, "%s/%d" % (path, i), tensors) for i, x in enumerate(v)]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError("pe.save: dict keys must be str, got %r in '%s'" % (k, path))
            if k == _MARK:
                raise _core.InvalidArgumentError("pe.save: key '%s' in '%s' is PE's marker of a nested tensor"
                                                 % (_MARK, path))
            out[k] = _encode(x, "%s/%s" % (path, k), tensors)
        return out
    raise _core.UnsupportedError("pe.save: '%s' is a %s; a saved dict holds tensors, numpy arrays, numbers, str, "
                                 "bool, None, and lists or dicts of them" % (path, type(v).__name__))


def save(obj, path, protocol=4, **configs):
    """Writes obj, a dict {str: tensor, numpy array, or a plain value (see
    the module's comment)}, to path."""
    if not isinstance(obj, dict):
        raise _core.UnsupportedError("pe.save: obj must be a state dict {name: tensor}, got %s" % type(obj).__name__)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("pe.save: path must be a path, got %s" % type(path).__name__)
    path = os.fspath(path)
    tensors, objects = {}, {}
    for k, v in obj.items():
        if not isinstance(k, str):
            raise TypeError("pe.save: state dict keys must be str, got %r" % (k,))
        a = _array(v)
        if a is not None:
            _put(tensors, k, a)
        else:
            try:
                objects[k] = _encode(v, k, tensors)
            except RecursionError:
                raise _core.InvalidArgumentError("pe.save: '%s' nests too deeply or contains itself" % k) from None
    meta = [_OBJECTS, json.dumps(objects)] if objects else []
    scope = _core.Scope()
    for k, a in tensors.items():
        scope.var(k).get_tensor().set(np.ascontiguousarray(a))
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    _core.safetensors_write(path, scope, list(tensors), meta)


def _decode(v, where, take):
    if isinstance(v, list):
        return [_decode(x, where, take) for x in v]
    if isinstance(v, dict):
        if _MARK in v:
            if len(v) != 1 or not isinstance(v[_MARK], str):
                raise _core.FormatError("%s: metadata '%s': a nested tensor's marker must be {\"%s\": \"<name>\"}"
                                        % (where, _OBJECTS, _MARK))
            return take(v[_MARK])
        return {k: _decode(x, where, take) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise _core.FormatError("%s: metadata '%s' holds a %s" % (where, _OBJECTS, type(v).__name__))

def load(path, **configs):
    """The dict pe.save wrote to path: {name: pe.eager.Tensor} in eager mode,
    {name: numpy array} in static mode, with the plain values pe.save put
    beside them."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("pe.load: path must be a path, got %s" % type(path).__name__)
    path = os.fspath(path)
    if not os.path.exists(path):
        raise _core.NotFoundError("pe.load: no file %s" % path)
    scope = _core.Scope()
    text = _core.safetensors_read(path, scope, _OBJECTS)
    arrays = {n: np.array(scope.find_var(n).get_tensor()) for n in scope.local_var_names()}
    conv = (lambda a: a) if _fw._static_mode else to_tensor
    nested = set()

    def take(name):
        if name not in arrays:
            raise _core.FormatError("%s: metadata '%s' names tensor '%s', which the file does not hold"
                                    % (path, _OBJECTS, name))
        nested.add(name)
        return conv(arrays[name])
    objects = {}
    if text is not None:
        try:
            objects = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise _core.FormatError("%s: metadata '%s' is not valid JSON: %s" % (path, _OBJECTS, e)) from None
        if not isinstance(objects, dict):
            raise _core.FormatError("%s: metadata '%s' is not a JSON object" % (path, _OBJECTS))
        try:
            objects = {k: _decode(v, path, take) for k, v in objects.items()}
        except RecursionError:
            raise _core.FormatError("%s: metadata '%s' nests too deeply" % (path, _OBJECTS)) from None
    out = collections.OrderedDict()
    for n in sorted(arrays):
        if n not in nested:
            out[n] = conv(arrays[n])
    for k, v in objects.items():
        if k in out:
            raise _core.FormatError("%s: '%s' is both a tensor and a value of metadata '%s'" % (path, k, _OBJECTS))
        out[k] = v
    return out
