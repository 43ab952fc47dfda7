"""pe.static.save / load — checkpoints of a program's persistables (safetensors) and the program itself.

save(program, path) writes path + ".safetensors" (every persistable of the
program, from the scope: parameters, optimizer state, step counters;
readable by numpy/PyTorch users) and path + ".pe" (the program, binary
form). A persistable absent from the scope or without a value is an error
naming each one, and then neither file is touched. load(program, path)
reads the tensors back into the scope, checking every persistable's dtype
and shape (pe_checkpoint_load). Writes are atomic (pe_write_file_atomic).
"""
import os

from .. import _core
from ..framework import Program
from .executor import global_scope

__all__ = ["save", "load", "save_program", "load_program"]

_SUFFIX = ".safetensors"


def _ckpt_path(model_path):
    if not isinstance(model_path, (str, os.PathLike)):
        raise TypeError("model_path must be a path, got %s" % type(model_path).__name__)
    p = os.fspath(model_path)
    return p if p.endswith(_SUFFIX) else p + _SUFFIX


def save(program, model_path, protocol=4, scope=None, **configs):
    """Saves the persistables of program (from scope, default the global scope)
    to model_path.safetensors and the program to model_path.pe. Raises
    NotFoundError / InvalidArgumentError naming every persistable that is not
    in the scope or has no value, leaving both files as they were."""
    if not isinstance(program, Program):
        raise TypeError("save: program must be a Program, got %s" % type(program).__name__)
    path = _ckpt_path(model_path)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    scope = global_scope() if scope is None else scope
    c = program._core_program()
    # Everything that can be refused is checked before either file is
    # replaced: the program serializes, and checkpoint_save writes every
    # persistable or nothing (an error naming each one it cannot write).
    c.to_bytes()
    _core.checkpoint_save(path, c, scope)
    c.save(path[:-len(_SUFFIX)] + ".pe")


def load(program, model_path, executor=None, var_list=None, scope=None):
    """Loads model_path.safetensors into scope (default the global scope): every
    persistable of program must be in the file with its dtype and shape."""
    if not isinstance(program, Program):
        raise TypeError("load: program must be a Program, got %s" % type(program).__name__)
    if var_list is not None:
        raise _core.UnsupportedError("load: var_list is not supported (the checkpoint holds the whole program state)")
    scope = global_scope() if scope is None else scope
    _core.checkpoint_load(_ckpt_path(model_path), program._core_program(), scope)


def save_program(program, path):
    """Writes the program: JSON when path ends with .json, else binary .pe."""
    program._core_program().save(os.fspath(path))


def load_program(path):
    """A Program from a .pe or .json file (verified and checked)."""
    c = _core.load_program(os.fspath(path))
    p = Program()
    p._load_json(c.to_json())
    return p
