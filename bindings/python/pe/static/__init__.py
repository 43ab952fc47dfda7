"""pe.static — Paddle's static-graph API: programs, data, executors, autodiff, checkpoints."""
from ..framework import (Program, Variable, Parameter, Operator, Block, program_guard,  # noqa: F401
                         default_main_program, default_startup_program, CPUPlace, CUDAPlace, convert_dtype)
from .executor import (Executor, ParallelExecutor, CompiledProgram, ExecutionStrategy,  # noqa: F401
                       BuildStrategy, global_scope, scope_guard, Scope, cpu_places, cuda_places)
from .backward import append_backward, gradients  # noqa: F401
from .io import (save, load, save_program, load_program, save_inference_model, load_inference_model,  # noqa: F401
                 load_program_state, set_program_state)
from . import nn  # noqa: F401
from . import collective  # noqa: F401
from ..metric import accuracy  # noqa: F401

__all__ = ["Program", "program_guard", "default_main_program", "default_startup_program", "data", "Executor",
           "ParallelExecutor", "CompiledProgram", "ExecutionStrategy", "BuildStrategy", "global_scope", "Scope",
           "scope_guard", "cpu_places", "cuda_places", "append_backward", "gradients", "save", "load", "nn",
           "Variable", "InputSpec", "accuracy", "save_program", "load_program", "collective", "save_inference_model",
           "load_inference_model", "load_program_state", "set_program_state"]


def data(name, shape, dtype=None, lod_level=0):
    """A feed variable of the default main program (None / -1 dims: any size)."""
    if not isinstance(name, str):
        raise TypeError("data: name must be a str, got %s" % type(name).__name__)
    block = default_main_program().global_block()
    if name in block.vars:
        raise ValueError("data: variable %s already exists in the main program" % name)
    v = block.create_var(name=name, shape=shape, dtype=convert_dtype(dtype or "float32"), persistable=False,
                         stop_gradient=True)
    v.is_data = True
    v.lod_level = int(lod_level or 0)
    return v


class InputSpec:
    """Shape/dtype/name of an input (Paddle's static.InputSpec)."""

    def __init__(self, shape, dtype="float32", name=None):
        self.shape = tuple(-1 if d is None else int(d) for d in shape)
        self.dtype = dtype
        self.name = name

    def __repr__(self):
        return "InputSpec(shape=%s, dtype=%s, name=%s)" % (self.shape, self.dtype, self.name)
