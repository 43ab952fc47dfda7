"""pe — PE's Python API in PaddlePaddle's style (`import pe as paddle`).

    import pe as paddle
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 784], "float32")
        y = paddle.static.data("y", [None, 1], "int64")
        logits = paddle.static.nn.fc(paddle.static.nn.fc(x, 256, activation="relu"), 10)
        loss = paddle.nn.functional.cross_entropy(logits, y)
        paddle.optimizer.Adam(learning_rate=1e-3).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    pe_exe = paddle.static.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main)
    loss_v, = pe_exe.run(fetch_list=[loss.name], feed={"x": xb, "y": yb})

Programs are built in Python (pe.framework) and run by the C engine
(pe._core). Every engine failure raises a pe.Error subclass carrying the
engine's message: InvalidArgumentError, NotFoundError, IOError,
FormatError, ResourceExhaustedError, UnsupportedError, DeviceError,
CancelledError, InternalError.
"""
import builtins as _builtins
import sys as _sys

from ._cpu import prefer_blas_kernels as _prefer_blas_kernels

_prefer_blas_kernels()   # before _core (and numpy) load OpenBLAS: its kernels are chosen then

from . import _core  # noqa: E402
from . import framework
from . import tensor
from ._core import (Error, InvalidArgumentError, NotFoundError, IOError, FormatError,  # noqa: F401
                    ResourceExhaustedError, UnsupportedError, DeviceError, CancelledError, InternalError, Tensor)
from .framework import (CPUPlace, CUDAPlace, enable_static, disable_static, in_dynamic_mode,  # noqa: F401
                        is_compiled_with_cuda, set_device, get_device)
from .param_attr import ParamAttr  # noqa: F401
from .tensor import (mean, sum, matmul, reshape, transpose, concat, flatten, cast, argmax, add,  # noqa: F401
                     subtract, multiply, divide, scale, topk, full, ones, zeros, tanh, sigmoid, seed,
                     unsqueeze, squeeze, split, slice, exp, log, sqrt, rsqrt, square, abs, sign, floor, ceil,
                     round, pow, clip, maximum, minimum, mod, remainder, floor_divide, equal, not_equal,
                     less_than, less_equal, greater_than, greater_equal, logical_and, logical_or, logical_xor,
                     logical_not, where,
                     max, min, prod, any, all, stack, unstack, expand, tile, assign,
                     shape, increment, cumsum, gather, gather_nd, scatter)
from . import eager  # noqa: F401
from .eager import to_tensor, randn, rand, arange, no_grad  # noqa: F401
from . import utils  # noqa: F401
from . import nn  # noqa: F401
from . import static  # noqa: F401
from . import optimizer  # noqa: F401
from . import metric  # noqa: F401
from . import regularizer  # noqa: F401
from . import distributed  # noqa: F401
from .distributed import DataParallel  # noqa: F401
from . import reader  # noqa: F401
from . import io  # noqa: F401
from . import dataset  # noqa: F401
from .reader import batch  # noqa: F401
from .eager.io import save, load  # noqa: F401
from . import jit  # noqa: F401
from . import autograd  # noqa: F401
from . import device  # noqa: F401

__version__ = _core.version


def _dispatch(static_fn, eager_fn):
    """static_fn in static mode, eager_fn in eager mode or on eager tensors."""
    def fn(*args, **kw):
        if not framework._static_mode or _eager_args(args, kw):
            return eager_fn(*args, **kw)
        return static_fn(*args, **kw)
    fn.__name__, fn.__doc__, fn.__module__ = static_fn.__name__, static_fn.__doc__, static_fn.__module__
    fn._static, fn._eager = static_fn, eager_fn
    return fn


def _eager_args(args, kw):
    for a in list(args) + list(kw.values()):
        if isinstance(a, eager.Tensor) or (
                isinstance(a, (list, tuple)) and _builtins.any(isinstance(e, eager.Tensor) for e in a)):
            return True
    return False


# The pe.* and pe.nn.functional functions with an eager form (pe.eager).
for _n in ("mean", "sum", "matmul", "reshape", "transpose", "concat", "cast", "add", "subtract", "multiply", "divide",
           "scale", "full", "ones", "zeros", "tanh", "sigmoid", "exp", "log", "sqrt", "square", "abs", "pow", "equal",
           "not_equal", "less_than", "less_equal", "greater_than", "greater_equal"):
    globals()[_n] = _dispatch(globals()[_n], getattr(eager, _n))
for _n in ("relu", "sigmoid", "tanh", "softmax", "softmax_with_cross_entropy", "cross_entropy", "gelu", "linear",
           "conv2d", "max_pool2d", "avg_pool2d", "batch_norm", "layer_norm", "embedding", "dropout", "mse_loss",
           "l1_loss"):
    setattr(nn.functional, _n, _dispatch(getattr(nn.functional, _n), getattr(eager, _n)))
_EAGER_NAMES = sorted(_n for _n in globals() if getattr(globals()[_n], "_eager", None) is not None)


_EAGER_F_NAMES = sorted(_n for _n, _f in vars(nn.functional).items() if getattr(_f, "_eager", None) is not None)


def _static_only(static_fn, prefix="pe."):
    """static_fn, refused in eager mode or on eager tensors (it has no eager form yet)."""
    def fn(*args, **kw):
        if not framework._static_mode or _eager_args(args, kw):
            raise UnsupportedError(
                "%s%s has no eager form yet (eager mode runs pe.%s and pe.nn.functional's %s); call "
                "pe.enable_static() to build a program with it" % (
                    prefix, static_fn.__name__, ", pe.".join(_EAGER_NAMES), ", ".join(_EAGER_F_NAMES)))
        return static_fn(*args, **kw)
    fn.__name__, fn.__doc__, fn.__module__ = static_fn.__name__, static_fn.__doc__, static_fn.__module__
    return fn


# The other pe.* and pe.nn.functional functions: static only, with a clear error in eager mode.
for _m, _prefix, _names in ((_sys.modules[__name__], "pe.", tensor.__all__),
                            (nn.functional, "pe.nn.functional.", nn.functional.__all__)):
    for _n in _names:
        _f = getattr(_m, _n, None)
        if _n != "seed" and getattr(_f, "__module__", None) in ("pe.tensor", "pe.nn.functional") and \
                not hasattr(_f, "_eager"):
            setattr(_m, _n, _static_only(_f, _prefix))
del _m, _prefix, _names, _n, _f

# Paddle's dtype names as attributes (paddle.float32 == "float32").
float32, float64, int32, int64, uint8, float16 = "float32", "float64", "int32", "int64", "uint8", "float16"
bool_ = "bool"

# Paddle's error names for the same classes.
UnimplementedError = UnsupportedError
ExternalError = DeviceError
FatalError = InternalError
