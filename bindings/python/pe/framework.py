"""pe.framework — the Python program objects: Program, Block, Variable, Parameter, Operator.

What: Paddle's static-graph program model in pure Python. Layers append
Variables and Operators to the current default main program; parameters are
also declared in the default startup program together with the op that
initializes them.

How: a Program is plain Python objects mirroring graph/program.fbs. It
serializes to PE's JSON text form (to_json) and is handed to the C engine as
a pe._core.Program built from that text (_core_program(), cached until the
program changes). Passes that are implemented in C (append_backward,
gradients, minimize, initializers) run on a fresh C copy and the result is
merged back with _load_json, which keeps the existing Variable objects (so
a `loss` a user holds stays valid) and replaces the op list.

Attr types: the JSON form needs each attr's type (INT vs LONG, INTS vs
LONGS, ...). They come from the op registry of the C engine (ops/ops.def via
_core.op_registry()), so Python never keeps a second list of op specs.
"""
import contextlib
import json

import numpy as np

from . import _core
from .utils import unique_name

__all__ = [
    "Program", "Block", "Variable", "Parameter", "Operator", "program_guard", "default_main_program",
    "default_startup_program", "CPUPlace", "CUDAPlace", "enable_static", "disable_static", "in_dynamic_mode",
    "set_device", "get_device",
    "convert_dtype", "OpRole",
]

# ---- dtypes ----------------------------------------------------------------

_CANON = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float64": "float64", "fp64": "float64", "double": "float64",
    "int32": "int32", "int": "int32",
    "int64": "int64", "long": "int64",
    "uint8": "uint8", "bool": "bool", "bool_": "bool",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}
_TO_JSON = {"float32": "FP32", "float64": "FP64", "int32": "INT32", "int64": "INT64", "uint8": "UINT8",
            "bool": "BOOL", "float16": "FP16", "bfloat16": "BF16"}
_FROM_JSON = {v: k for k, v in _TO_JSON.items()}
_FROM_JSON_INT = {0: "float32", 1: "float64", 2: "int32", 3: "int64", 4: "uint8", 5: "bool", 6: "float16",
                  7: "bfloat16"}
# pe_dtype values (include/pe/dtype.h), used by dtype-valued attrs (cast.out_dtype, ...).
DTYPE_ENUM = {"float32": 0, "float64": 1, "int32": 2, "int64": 3, "uint8": 4, "bool": 5, "float16": 6,
              "bfloat16": 7}


def convert_dtype(dtype):
    """Canonical dtype name ('float32', ...) from a name, an alias, a numpy dtype or a type."""
    if dtype is None:
        return "float32"
    if isinstance(dtype, str):
        key = dtype.lower()
        if key.startswith("paddle."):
            key = key[len("paddle."):]
        if key in _CANON:
            return _CANON[key]
        raise TypeError("unknown dtype %r (PE has %s)" % (dtype, ", ".join(DTYPE_ENUM)))
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError("unknown dtype %r (PE has %s)" % (dtype, ", ".join(DTYPE_ENUM))) from None
    if name in _CANON:
        return _CANON[name]
    raise TypeError("dtype %s has no PE equivalent (PE has %s)" % (name, ", ".join(DTYPE_ENUM)))


# Paddle's math_op_patch: the integer dtypes an operator may promote, and their ranges.
_INT_RANGE = {"int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1), "uint8": (0, 255)}
_FLOAT_SCALAR_OPS = ("elementwise_add", "elementwise_sub", "elementwise_mul")


def float_first(op_type, dtype, other=None):
    """Paddle's math_op_patch rule for an operand of dtype in `op_type` with
    other (a Python number, or None for a tensor): True when the operand is
    cast to float32 first (an integer operand of a true division, or an
    integer tensor with a float number in + - *). Otherwise a number other
    must fit the integer dtype (ValueError naming the op, value and dtype)."""
    if dtype not in _INT_RANGE:
        return False
    if op_type == "elementwise_div" or (isinstance(other, (float, np.floating)) and op_type in _FLOAT_SCALAR_OPS):
        return True
    if other is not None:
        lo, hi = _INT_RANGE[dtype]
        if not (lo <= other <= hi and float(other).is_integer()):
            raise ValueError("%s: the number %r does not fit the tensor's dtype %s (an integer in [%d, %d]); cast "
                             "the tensor first (astype)" % (op_type, other, dtype, lo, hi))
    return False


# ---- registry ----------------------------------------------------------------

_registry = None
_common_attrs = None


def op_registry():
    """{op type: {"inputs", "outputs", "attrs": {name: (type, required, default)}, "has_grad", ...}}."""
    global _registry, _common_attrs
    if _registry is None:
        _registry = _core.op_registry()
        _common_attrs = _core.common_attrs()
    return _registry


def has_op(op_type):
    return op_type in op_registry()


def require_op(op_type, api):
    """Raises pe.UnsupportedError when this engine has no `op_type` op."""
    if not has_op(op_type):
        raise _core.UnsupportedError(
            "%s needs the '%s' op, which this build of PE does not register (ops/ops.def)" % (api, op_type))


class OpRole:
    """Paddle's OpRole values (the op_role attr)."""
    Forward = 0
    Backward = 1
    Optimize = 2
    RPC = 4
    Dist = 8
    LRSched = 16
    Loss = 256


# ---- places --------------------------------------------------------------------

class CPUPlace:
    """The CPU (a logical device; ParallelExecutor uses CPU_NUM of them)."""

    def __init__(self, id=0):
        self._id = int(id)

    @property
    def _pe_place(self):
        return ("cpu", self._id)

    def __eq__(self, other):
        return isinstance(other, CPUPlace) and other._id == self._id

    def __hash__(self):
        return hash(self._pe_place)

    def __repr__(self):
        return "Place(cpu)" if self._id == 0 else "Place(cpu:%d)" % self._id


class CUDAPlace:
    """GPU `id` (needs a PE build with CUDA)."""

    def __init__(self, id=0):
        self._id = int(id)

    def get_device_id(self):
        return self._id

    @property
    def _pe_place(self):
        return ("cuda", self._id)

    def __eq__(self, other):
        return isinstance(other, CUDAPlace) and other._id == self._id

    def __hash__(self):
        return hash(self._pe_place)

    def __repr__(self):
        return "Place(gpu:%d)" % self._id


def is_compiled_with_cuda():
    return _core.with_cuda()


# Static-graph mode stays the default: PE's scripts, examples and tests build
# programs without calling enable_static(). disable_static() switches the
# pe.* functions that have an eager form (pe.eager) to run ops at once on
# eager tensors; enable_static() switches back.
_static_mode = True
_eager_place = None   # the place eager tensors are made on (None: cpu:0)
_eager_seed = None    # pe.seed's value for eager random ops (None: unseeded)
_eager_seed_gen = 0   # bumped by every pe.seed call: eager random ops restart from the seed


def enable_static():
    """Static-graph mode (the default): pe.* functions append ops to programs."""
    global _static_mode
    _static_mode = True


def _check_eager_place(place, api):
    """place (CPUPlace / CUDAPlace) -> its (kind, id), refused with a clear
    error when it is neither or names a GPU this process does not see."""
    if isinstance(place, str):
        place = _parse_device(place, api)
    if isinstance(place, CPUPlace):
        return place._pe_place
    if isinstance(place, CUDAPlace):
        n = _core.cuda_device_count()
        if place._id < 0 or place._id >= n:
            raise _core.DeviceError("%s: %r: %d CUDA device(s) visible to this process%s" % (
                api, place, n, "" if n else (" (this PE build has no CUDA)" if not _core.with_cuda()
                                             else " (no GPU or driver)")))
        return place._pe_place
    raise _core.InvalidArgumentError("%s: place must be pe.CPUPlace() or pe.CUDAPlace(i), got %r" % (api, place))


def disable_static(place=None):
    """Eager (dynamic) mode: pe.* functions with an eager form run their ops
    at once on pe.eager tensors, made on `place` (CPUPlace or CUDAPlace;
    None: the place pe.set_device chose, else cpu:0)."""
    global _static_mode, _eager_place
    if place is not None:
        _eager_place = _check_eager_place(place, "disable_static")
    _static_mode = False


def _place_from_tuple(t):
    """A (kind, id) place tuple -> CPUPlace / CUDAPlace."""
    return CUDAPlace(t[1]) if t is not None and t[0] in ("cuda", 1) else CPUPlace(0 if t is None else t[1])


def _parse_device(device, api):
    """'cpu', 'gpu', 'gpu:N' or 'cuda:N' -> CPUPlace / CUDAPlace."""
    if not isinstance(device, str):
        raise _core.InvalidArgumentError("%s: expected a place or a str like 'gpu:0', got %s" % (
            api, type(device).__name__))
    kind, _, num = device.strip().lower().partition(":")
    if kind == "cpu" and not num:
        return CPUPlace()
    if kind in ("gpu", "cuda") and (not num or num.isdigit()):
        return CUDAPlace(int(num) if num else 0)
    raise _core.InvalidArgumentError("%s(%r): expected 'cpu', 'gpu' or 'gpu:N'" % (api, device))


def set_device(device):
    """Paddle's set_device: 'cpu', 'gpu' (= 'gpu:0') or 'gpu:N' (also
    'cuda:N'); the place eager tensors and ops use from now on. Returns the
    place. Static programs take their place from Executor(place) as before."""
    global _eager_place
    _eager_place = _check_eager_place(device, "set_device")
    return _place_from_tuple(_eager_place)


def get_device():
    """'cpu' or 'gpu:N': the place eager tensors are made on."""
    p = _place_from_tuple(_eager_place)
    return "gpu:%d" % p._id if isinstance(p, CUDAPlace) else "cpu"


def in_dynamic_mode():
    return not _static_mode


def _set_eager_seed(s):
    global _eager_seed, _eager_seed_gen
    _eager_seed = int(s)
    _eager_seed_gen += 1


# ---- attrs -------------------------------------------------------------------

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _infer_attr_type(value):
    if isinstance(value, Block):
        return "BLOCK"
    if isinstance(value, (bool, np.bool_)):
        return "BOOL"
    if isinstance(value, (int, np.integer)):
        return "INT" if _INT32_MIN <= int(value) <= _INT32_MAX else "LONG"
    if isinstance(value, (float, np.floating)):
        return "FLOAT"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, (list, tuple, np.ndarray)):
        vals = list(value)
        if vals and all(isinstance(v, (bool, np.bool_)) for v in vals):
            return "BOOLS"
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
            return "INTS" if all(_INT32_MIN <= int(v) <= _INT32_MAX for v in vals) else "LONGS"
        if all(isinstance(v, (int, float, np.integer, np.floating)) for v in vals):
            return "FLOATS"
        if all(isinstance(v, str) for v in vals):
            return "STRINGS"
    raise TypeError("cannot store attr value %r (%s) in a PE program" % (value, type(value).__name__))


def _attr_to_json(name, type_, value):
    a = {"name": name, "type": type_}
    if type_ in ("INT", "LONG"):
        a["i"] = int(value)
    elif type_ == "FLOAT":
        a["f"] = float(value)
    elif type_ == "STRING":
        a["s"] = str(value)
    elif type_ == "BOOL":
        a["b"] = bool(value)
    elif type_ == "BLOCK":
        a["block_idx"] = value.idx if isinstance(value, Block) else int(value)
    elif type_ in ("INTS", "LONGS"):
        a["ints"] = [int(v) for v in value]
    elif type_ == "FLOATS":
        a["floats"] = [float(v) for v in value]
    elif type_ == "STRINGS":
        a["strings"] = [str(v) for v in value]
    elif type_ == "BOOLS":
        a["bools"] = [bool(v) for v in value]
    else:
        raise TypeError("attr %s: unknown attr type %s" % (name, type_))
    return a


def _attr_from_json(a):
    t = a.get("type", "INT")
    if isinstance(t, int):
        t = ["INT", "FLOAT", "STRING", "BOOL", "LONG", "INTS", "FLOATS", "STRINGS", "BOOLS", "LONGS", "BLOCK"][t]
    if t in ("INT", "LONG"):
        v = int(a.get("i", 0))
    elif t == "FLOAT":
        v = float(a.get("f", 0.0))
    elif t == "STRING":
        v = a.get("s", "")
    elif t == "BOOL":
        v = bool(a.get("b", False))
    elif t == "BLOCK":
        v = int(a.get("block_idx", 0))
    elif t in ("INTS", "LONGS"):
        v = [int(x) for x in a.get("ints", [])]
    elif t == "FLOATS":
        v = [float(x) for x in a.get("floats", [])]
    elif t == "STRINGS":
        v = list(a.get("strings", []))
    elif t == "BOOLS":
        v = [bool(x) for x in a.get("bools", [])]
    else:
        raise _core.FormatError("attr %s has unknown type %s" % (a.get("name"), t))
    return t, v


def _json_nonfinite(text):
    """The engine's JSON writes non-finite floats as inf / -inf / nan (which its
    parser reads back); Python's json wants Infinity / NaN. Rewrites those
    tokens outside strings."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("inf", i) or text.startswith("nan", i):
            if text[i] == "n" and out and out[-1] == "-":
                out.pop()  # -nan is still NaN
            out.append("Infinity" if text[i] == "i" else "NaN")
            i += 2
        else:
            out.append(c)
        i += 1
    return "".join(out)


# ---- Variable ------------------------------------------------------------------

def _norm_shape(shape):
    if shape is None:
        return ()
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    return tuple(-1 if d is None else int(d) for d in shape)


class Variable:
    """A named tensor variable of a block (Paddle's static Variable)."""

    def __init__(self, block, name=None, shape=None, dtype="float32", persistable=False, stop_gradient=False,
                 is_parameter=False, is_data=False, **kwargs):
        self.block = block
        self._name = name if name is not None else unique_name.generate_with_ignorable_key("_generated_var")
        self._shape = _norm_shape(shape)
        self._dtype = convert_dtype(dtype)
        self._persistable = bool(persistable)
        self._stop_gradient = bool(stop_gradient)
        self._is_parameter = bool(is_parameter)
        self.is_data = bool(is_data)
        self.lod_level = 0  # sequences: levels of LoD its fed values carry (fluid.layers.data(lod_level=))

    def _changed(self):
        if self.block is not None:
            self.block.program._bump()

    @property
    def name(self):
        return self._name

    @property
    def shape(self):
        return self._shape

    @property
    def ndim(self):
        return len(self._shape)

    def dim(self):
        return len(self._shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def persistable(self):
        return self._persistable

    @persistable.setter
    def persistable(self, v):
        self._persistable = bool(v)
        self._changed()

    @property
    def stop_gradient(self):
        return self._stop_gradient

    @stop_gradient.setter
    def stop_gradient(self, v):
        self._stop_gradient = bool(v)
        self._changed()

    @property
    def is_parameter(self):
        return self._is_parameter

    @property
    def program(self):
        return self.block.program

    def _set_shape(self, shape):
        self._shape = _norm_shape(shape)
        self._changed()

    def _to_json(self):
        d = {"name": self._name, "dtype": _TO_JSON[self._dtype], "dims": list(self._shape)}
        if self._persistable:
            d["persistable"] = True
        if self._is_parameter:
            d["is_parameter"] = True
        if self._stop_gradient:
            d["stop_gradient"] = True
        return d

    def _update_from_json(self, d):
        self._shape = tuple(int(x) for x in d.get("dims", []))
        dt = d.get("dtype", "FP32")
        self._dtype = _FROM_JSON_INT[dt] if isinstance(dt, int) else _FROM_JSON[dt]
        self._persistable = bool(d.get("persistable", False))
        self._is_parameter = bool(d.get("is_parameter", False))
        self._stop_gradient = bool(d.get("stop_gradient", False))

    def __repr__(self):
        kind = "Parameter" if self._is_parameter else "Variable"
        return "%s(name=%s, shape=%s, dtype=%s%s%s)" % (
            kind, self._name, list(self._shape), self._dtype, ", persistable" if self._persistable else "",
            ", stop_gradient" if self._stop_gradient else "")

    __str__ = __repr__

    # The Python operators (+ - * / @, unary -, astype, reshape, mean, sum)
    # build ops: pe.tensor installs them on this class when the package is
    # imported (pe.tensor._install_variable_operators, like Paddle's
    # math_op_patch), so this module does not depend on pe.tensor.

    __hash__ = object.__hash__


class Parameter(Variable):
    """A trainable persistable variable (Paddle's Parameter)."""

    def __init__(self, block, name=None, shape=None, dtype="float32", trainable=True, optimize_attr=None,
                 regularizer=None, do_model_average=None, need_clip=True, **kwargs):
        kwargs.setdefault("persistable", True)
        kwargs["is_parameter"] = True
        kwargs.setdefault("stop_gradient", not trainable)
        super().__init__(block, name=name, shape=shape, dtype=dtype, **kwargs)
        self.trainable = bool(trainable)
        self.optimize_attr = dict(optimize_attr or {"learning_rate": 1.0})
        self.regularizer = regularizer
        self.do_model_average = do_model_average
        self.need_clip = need_clip
        self.initializer = None

    def _copy_meta(self, other):
        self.trainable = other.trainable
        self.optimize_attr = dict(other.optimize_attr)
        self.regularizer = other.regularizer
        self.do_model_average = other.do_model_average
        self.need_clip = other.need_clip
        self.initializer = other.initializer


# ---- Operator ------------------------------------------------------------------

def _arg_names(v, what):
    if v is None:
        return []
    if isinstance(v, (Variable, str)):
        v = [v]
    out = []
    for x in v:
        if isinstance(x, Variable):
            out.append(x.name)
        elif isinstance(x, str):
            out.append(x)
        else:
            raise TypeError("%s: expected Variables or var names, got %s" % (what, type(x).__name__))
    return out


class Operator:
    """One op of a block: type, named input/output slots (var names) and typed attrs."""

    def __init__(self, block, type, inputs=None, outputs=None, attrs=None, attr_types=None):
        self.block = block
        self.type = type
        self._inputs = {k: _arg_names(v, "op %s input %s" % (type, k)) for k, v in (inputs or {}).items()}
        self._outputs = {k: _arg_names(v, "op %s output %s" % (type, k)) for k, v in (outputs or {}).items()}
        self._attrs = {}
        self._attr_types = dict(attr_types or {})
        for k, v in (attrs or {}).items():
            if v is not None:
                self._attrs[k] = v

    def _changed(self):
        if self.block is not None:
            self.block.program._bump()

    def input(self, name):
        return list(self._inputs.get(name, []))

    def output(self, name):
        return list(self._outputs.get(name, []))

    @property
    def input_names(self):
        return list(self._inputs)

    @property
    def output_names(self):
        return list(self._outputs)

    @property
    def input_arg_names(self):
        return [a for args in self._inputs.values() for a in args]

    @property
    def output_arg_names(self):
        return [a for args in self._outputs.values() for a in args]

    @property
    def attr_names(self):
        return list(self._attrs)

    def has_attr(self, name):
        return name in self._attrs

    def attr(self, name):
        if name in self._attrs:
            return self._attrs[name]
        spec = op_registry().get(self.type, {}).get("attrs", {}).get(name)
        return spec[2] if spec else None

    def all_attrs(self):
        return dict(self._attrs)

    def _set_attr(self, name, value):
        self._attrs[name] = value
        self._changed()

    def _remove_attr(self, name):
        self._attrs.pop(name, None)
        self._attr_types.pop(name, None)
        self._changed()

    def _set_input(self, slot, args):
        self._inputs[slot] = _arg_names(args, "op %s input %s" % (self.type, slot))
        self._changed()

    def _set_output(self, slot, args):
        self._outputs[slot] = _arg_names(args, "op %s output %s" % (self.type, slot))
        self._changed()

    def _remove_input(self, slot):
        self._inputs.pop(slot, None)
        self._changed()

    def _remove_output(self, slot):
        self._outputs.pop(slot, None)
        self._changed()

    def _rename_input(self, old, new):
        for args in self._inputs.values():
            for i, a in enumerate(args):
                if a == old:
                    args[i] = new
        self._changed()

    def _rename_output(self, old, new):
        for args in self._outputs.values():
            for i, a in enumerate(args):
                if a == old:
                    args[i] = new
        self._changed()

    def _attr_type(self, name, value):
        if name in self._attr_types:
            return self._attr_types[name]
        spec = op_registry().get(self.type, {}).get("attrs", {}).get(name)
        if spec:
            return spec[0].upper()
        common = _common_attrs.get(name) if _common_attrs else None
        if common:
            return common.upper()
        return _infer_attr_type(value)

    def _to_json(self):
        return {
            "type": self.type,
            "inputs": [{"name": k, "args": list(v)} for k, v in self._inputs.items()],
            "outputs": [{"name": k, "args": list(v)} for k, v in self._outputs.items()],
            "attrs": [_attr_to_json(k, self._attr_type(k, v), v) for k, v in self._attrs.items()],
        }

    @classmethod
    def _from_json(cls, block, d):
        op = cls(block, d["type"])
        op._inputs = {s["name"]: list(s.get("args", [])) for s in d.get("inputs", [])}
        op._outputs = {s["name"]: list(s.get("args", [])) for s in d.get("outputs", [])}
        for a in d.get("attrs", []):
            t, v = _attr_from_json(a)
            op._attrs[a["name"]] = v
            op._attr_types[a["name"]] = t
        return op

    def __repr__(self):
        ins = ", ".join("%s=%s" % (k, v) for k, v in self._inputs.items())
        outs = ", ".join("%s=%s" % (k, v) for k, v in self._outputs.items())
        attrs = ", ".join("%s=%r" % (k, v) for k, v in self._attrs.items())
        return "{%s} = %s(inputs={%s}, %s)" % (outs, self.type, ins, attrs)

    __str__ = __repr__


# ---- Block ---------------------------------------------------------------------

class Block:
    """Vars and ops of one block (block 0 is the global block)."""

    def __init__(self, program, idx, parent_idx=-1):
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.vars = {}
        self.ops = []

    @property
    def parent_block(self):
        return self.program.blocks[self.parent_idx] if self.parent_idx >= 0 else None

    def var(self, name):
        if not isinstance(name, str):
            raise TypeError("var name must be a str, got %s" % type(name).__name__)
        v = self.vars.get(name)
        if v is None:
            raise ValueError("var %s is not in this block" % name)
        return v

    def has_var(self, name):
        return name in self.vars

    def _find_var_recursive(self, name):
        b = self
        while b is not None:
            if name in b.vars:
                return b.vars[name]
            b = b.parent_block
        return None

    def _var_recursive(self, name):
        v = self._find_var_recursive(name)
        if v is None:
            raise ValueError("var %s is not in block %d or its ancestors" % (name, self.idx))
        return v

    def create_var(self, name=None, shape=None, dtype="float32", persistable=False, stop_gradient=False, **kwargs):
        kwargs.pop("type", None)
        lod_level = int(kwargs.pop("lod_level", 0) or 0)
        if name is not None and name in self.vars:
            v = self.vars[name]
            return v
        v = Variable(self, name=name, shape=shape, dtype=dtype, persistable=persistable, stop_gradient=stop_gradient,
                     **kwargs)
        v.lod_level = lod_level
        self.vars[v.name] = v
        self.program._bump()
        return v

    def create_parameter(self, name, shape, dtype="float32", **kwargs):
        if name in self.vars:
            raise ValueError("parameter %s already exists in block %d" % (name, self.idx))
        p = Parameter(self, name=name, shape=shape, dtype=dtype, **kwargs)
        self.vars[name] = p
        self.program._bump()
        return p

    def _remove_var(self, name):
        self.vars.pop(name, None)
        self.program._bump()

    def append_op(self, type, inputs=None, outputs=None, attrs=None, **kwargs):
        op = Operator(self, type, inputs, outputs, attrs)
        self.ops.append(op)
        self.program._bump()
        return op

    def _insert_op(self, index, type, inputs=None, outputs=None, attrs=None, **kwargs):
        op = Operator(self, type, inputs, outputs, attrs)
        self.ops.insert(index, op)
        self.program._bump()
        return op

    def _prepend_op(self, *args, **kwargs):
        return self._insert_op(0, *args, **kwargs)

    def _remove_op(self, index, sync=True):
        del self.ops[index]
        self.program._bump()

    def all_parameters(self):
        return [v for v in self.vars.values() if isinstance(v, Parameter) or v.is_parameter]

    def iter_parameters(self):
        return iter(self.all_parameters())

    def _to_json(self):
        return {"idx": self.idx, "parent_idx": self.parent_idx, "vars": [v._to_json() for v in self.vars.values()],
                "ops": [op._to_json() for op in self.ops]}

    def __repr__(self):
        lines = ["block %d (parent %d) {" % (self.idx, self.parent_idx)]
        lines += ["  var " + repr(v) for v in self.vars.values()]
        lines += ["  " + repr(op) for op in self.ops]
        lines.append("}")
        return "\n".join(lines)

    to_string = lambda self, throw_on_error=False, with_details=False: repr(self)  # noqa: E731


# ---- Program -------------------------------------------------------------------

class Program:
    """Paddle's static Program: blocks of vars and ops, plus a random seed."""

    def __init__(self):
        self.blocks = [Block(self, 0, -1)]
        self._current_block_idx = 0
        self._seed = 0
        self._version = 0
        self._c = None
        self._c_version = -1

    def _bump(self):
        self._version += 1

    # -- Paddle API --
    def global_block(self):
        return self.blocks[0]

    def block(self, index):
        return self.blocks[index]

    def current_block(self):
        return self.blocks[self._current_block_idx]

    @property
    def num_blocks(self):
        return len(self.blocks)

    @property
    def random_seed(self):
        return self._seed

    @random_seed.setter
    def random_seed(self, seed):
        if not isinstance(seed, (int, np.integer)):
            raise TypeError("Program.random_seed must be an int, got %s" % type(seed).__name__)
        self._seed = int(seed)
        self._bump()

    def all_parameters(self):
        return [p for b in self.blocks for p in b.all_parameters()]

    def list_vars(self):
        for b in self.blocks:
            for v in b.vars.values():
                yield v

    def _create_block(self, parent_idx=None):
        parent = self._current_block_idx if parent_idx is None else parent_idx
        b = Block(self, len(self.blocks), parent)
        self.blocks.append(b)
        self._current_block_idx = b.idx
        self._bump()
        return b

    def _rollback(self):
        self._current_block_idx = self.current_block().parent_idx

    def clone(self, for_test=False):
        """A deep copy. for_test=True: the inference copy — backward and
        optimizer ops dropped, is_test set on every op that has it (dropout,
        batch_norm), dropout step counters detached."""
        p = Program()
        p._load_json(self.to_json())
        for b_src, b_dst in zip(self.blocks, p.blocks):
            for name, v in b_src.vars.items():
                d = b_dst.vars.get(name)
                if isinstance(v, Parameter) and isinstance(d, Parameter):
                    d._copy_meta(v)
                if d is not None:
                    d.is_data = v.is_data
                    d.lod_level = getattr(v, "lod_level", 0)
        if for_test:
            p._inference_optimize()
        return p

    def _inference_optimize(self):
        reg = op_registry()
        for b in self.blocks:
            kept, dropped = [], []
            for op in b.ops:
                role = int(op.attr("op_role") or 0)
                (dropped if role & (OpRole.Backward | OpRole.Optimize) else kept).append(op)
            for op in kept:
                if "is_test" in reg.get(op.type, {}).get("attrs", {}):
                    op._attrs["is_test"] = True
                if op.type == "dropout":
                    op._inputs.pop("Step", None)
                    op._outputs.pop("StepOut", None)
            used = {a for op in kept for a in op.input_arg_names + op.output_arg_names}
            gone = {a for op in dropped for a in op.input_arg_names + op.output_arg_names}
            for name in list(b.vars):
                v = b.vars[name]
                if name in gone and name not in used and not v.is_parameter and not v.is_data:
                    del b.vars[name]
            b.ops = kept
        self._bump()

    # -- serialization --
    def to_json(self):
        """PE's JSON text form (graph/program.fbs)."""
        return json.dumps({"version": 1, "random_seed": self._seed, "blocks": [b._to_json() for b in self.blocks]})

    def _load_json(self, text):
        """Replaces the content with a JSON program, keeping the Variable
        objects of vars that persist (by name)."""
        d = json.loads(_json_nonfinite(text) if ("inf" in text or "nan" in text) else text)
        self._seed = int(d.get("random_seed", 0))
        blocks = []
        for i, bd in enumerate(d.get("blocks", [])):
            idx = int(bd.get("idx", i))
            b = self.blocks[idx] if idx < len(self.blocks) else Block(self, idx)
            b.parent_idx = int(bd.get("parent_idx", -1))
            old = b.vars
            b.vars = {}
            for vd in bd.get("vars", []):
                v = old.get(vd["name"])
                if v is None:
                    cls = Parameter if vd.get("is_parameter") else Variable
                    v = cls.__new__(cls)
                    Variable.__init__(v, b, name=vd["name"])
                    if cls is Parameter:
                        v.trainable = not vd.get("stop_gradient", False)
                        v.optimize_attr = {"learning_rate": 1.0}
                        v.regularizer = None
                        v.do_model_average = None
                        v.need_clip = True
                        v.initializer = None
                v.block = b
                v._update_from_json(vd)
                b.vars[v.name] = v
            b.ops = [Operator._from_json(b, od) for od in bd.get("ops", [])]
            blocks.append(b)
        self.blocks = blocks or [Block(self, 0, -1)]
        self._current_block_idx = min(self._current_block_idx, len(self.blocks) - 1)
        self._bump()

    @staticmethod
    def parse_from_string(binary_str):
        """A Program from a .pe buffer (bytes) or JSON text."""
        c = _core.Program(binary_str, "parse_from_string")
        p = Program()
        p._load_json(c.to_json())
        return p

    def serialize_to_string(self):
        return self._core_program().to_bytes()

    def desc_json(self):
        return self.to_json()

    def _core_program(self):
        """The C program of the current content (cached until the next change)."""
        if self._c is None or self._c_version != self._version:
            self._c = _core.Program(self.to_json(), "<python program>")
            self._c_version = self._version
        return self._c

    def _fresh_core(self):
        """A C copy to transform (never the cached one an executor may hold)."""
        return _core.Program(self.to_json(), "<python program>")

    def __repr__(self):
        return "\n".join(repr(b) for b in self.blocks)

    def to_string(self, throw_on_error=False, with_details=False):
        return repr(self)

    __str__ = __repr__


# ---- default programs ------------------------------------------------------------

_main_program = Program()
_startup_program = Program()


def default_main_program():
    return _main_program


def default_startup_program():
    return _startup_program


def switch_main_program(program):
    global _main_program
    old, _main_program = _main_program, program
    return old


def switch_startup_program(program):
    global _startup_program
    old, _startup_program = _startup_program, program
    return old


@contextlib.contextmanager
def program_guard(main_program, startup_program=None):
    """Layers inside the block go to main_program (and startup_program)."""
    if not isinstance(main_program, Program):
        raise TypeError("program_guard: main_program must be a Program, got %s" % type(main_program).__name__)
    if startup_program is not None and not isinstance(startup_program, Program):
        raise TypeError("program_guard: startup_program must be a Program, got %s" % type(startup_program).__name__)
    old_main = switch_main_program(main_program)
    old_startup = switch_startup_program(startup_program) if startup_program is not None else None
    try:
        yield
    finally:
        switch_main_program(old_main)
        if startup_program is not None:
            switch_startup_program(old_startup)


def _var_name(v):
    if isinstance(v, Variable):
        return v.name
    if isinstance(v, str):
        return v
    raise TypeError("expected a Variable or a var name, got %s" % type(v).__name__)
