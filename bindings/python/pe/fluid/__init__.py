"""pe.fluid — PaddlePaddle 1.x's fluid names over PE's engine (`import pe.fluid as fluid`).

Thin wrappers with Paddle 1.x signatures, not new machinery: the programs,
layers, optimizers and executors are pe.static's (pe.framework, the C
engine); fluid.layers keeps the 1.x argument names (act=, param_attr=,
append_batch_size=, dropout_prob=, ...), fluid.nets the composite
networks built from fluid.layers, fluid.optimizer takes
regularization= and parameter_list=, fluid.transpiler holds
DistributeTranspiler (pserver and nccl2 modes; see transpiler.py) and
fluid.io saves / loads persistables and parameters (see io.py); fluid.data /
fluid.embedding are 1.6's top-level input layers (input.py) and fluid.core
holds Scope, LoDTensor and is_compiled_with_cuda; fluid.regularizer
(L1Decay, L2Decay and their *Regularizer names) and fluid.clip
(GradientClipByValue / ByNorm / ByGlobalNorm) are pe's, with 1.x names.

    import pe.fluid as fluid
    x = fluid.layers.data(name="x", shape=[13], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
    fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
"""
import contextlib as _contextlib

from ..framework import (CPUPlace, CUDAPlace, Program, Variable, Parameter, program_guard,  # noqa: F401
                         default_main_program, default_startup_program, is_compiled_with_cuda)
from ..param_attr import ParamAttr  # noqa: F401
from ..static.executor import (Executor, ParallelExecutor, CompiledProgram, ExecutionStrategy,  # noqa: F401
                               BuildStrategy, global_scope, scope_guard, Scope, cpu_places, cuda_places)
from .. import initializer  # noqa: F401
from .. import regularizer  # noqa: F401
from . import layers  # noqa: F401
from . import nets  # noqa: F401
from . import optimizer  # noqa: F401
from . import transpiler  # noqa: F401
from . import io  # noqa: F401
from . import clip  # noqa: F401
from . import backward  # noqa: F401
from . import core  # noqa: F401
from .input import data, embedding  # noqa: F401
from .backward import gradients  # noqa: F401
from .data_feeder import DataFeeder  # noqa: F401
from .lod_tensor import LoDTensor, create_lod_tensor, create_random_int_lodtensor  # noqa: F401
from .input import one_hot  # noqa: F401
from ..utils import unique_name  # noqa: F401

Tensor = LoDTensor


@_contextlib.contextmanager
def name_scope(prefix=None):
    """Paddle 1.x groups the ops made inside under `prefix` for graph
    visualization only; PE records no op name scopes, so this only checks
    the argument and runs the block (names of vars and params are unchanged,
    as in Paddle)."""
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError("fluid.name_scope: prefix must be a str, got %s" % type(prefix).__name__)
    yield
from .transpiler import DistributeTranspiler, DistributeTranspilerConfig, memory_optimize, release_memory  # noqa: F401

__all__ = ["CPUPlace", "CUDAPlace", "Program", "Variable", "program_guard", "default_main_program",
           "default_startup_program", "Executor", "ParallelExecutor", "CompiledProgram", "ExecutionStrategy",
           "BuildStrategy", "global_scope", "scope_guard", "ParamAttr", "DataFeeder", "DistributeTranspiler",
           "DistributeTranspilerConfig", "memory_optimize", "release_memory", "layers", "nets", "optimizer", "transpiler",
           "io", "clip", "regularizer", "initializer", "is_compiled_with_cuda", "cpu_places", "cuda_places", "backward", "gradients", "core", "data",
           "embedding", "LoDTensor", "Tensor", "create_lod_tensor", "create_random_int_lodtensor", "one_hot", "unique_name",
           "name_scope"]
