"""pe.static.save / load — checkpoints of a program's persistables (safetensors) and the program itself.

save(program, path) writes path + ".safetensors" (every persistable of the
program, from the scope: parameters, optimizer state, step counters;
readable by numpy/PyTorch users) and path + ".pe" (the program, binary
form). A persistable absent from the scope or without a value is an error
naming each one, and then neither file is touched. load(program, path)
reads the tensors back into the scope, checking every persistable's dtype
and shape (pe_checkpoint_load); tensors the program does not hold (a
training checkpoint loaded into an inference clone) are skipped unless
strict=True. Writes are atomic (pe_write_file_atomic).

save_inference_model(path_prefix, feed_vars, fetch_vars, executor) writes
the program pruned to the feed -> fetch path (clone(for_test=True), then
only the ops the fetches need; no loss, label, backward or optimizer ops or
vars) to path_prefix.pe, with the feed and fetch names recorded in it
(feed_names / fetch_names of graph/program.fbs), and the weights it reads
to path_prefix.safetensors. `pe run path_prefix.pe --params
path_prefix.safetensors --feed x=x.npy` and the C API (pe_program_load_file,
pe_checkpoint_load, pe_executor_run with p->fetch_names) run it;
load_inference_model gives back [program, feed names, fetch Variables].
"""
import json
import os

import numpy as np

from .. import _core
from ..framework import Program, Variable, default_main_program
from .executor import global_scope

__all__ = ["save", "load", "save_program", "load_program", "save_inference_model", "load_inference_model",
           "load_program_state", "set_program_state"]

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


def load(program, model_path, executor=None, var_list=None, scope=None, strict=False):
    """Loads model_path.safetensors into scope (default the global scope): every
    persistable of program must be in the file with its dtype and shape (a
    missing one is an error naming it). Tensors of the file that program
    does not hold as persistables (a training checkpoint's optimizer moments
    and learning rate, loaded into a clone(for_test=True)) are skipped;
    strict=True refuses them instead, naming the tensor."""
    if not isinstance(program, Program):
        raise TypeError("load: program must be a Program, got %s" % type(program).__name__)
    if var_list is not None:
        raise _core.UnsupportedError("load: var_list is not supported (the checkpoint holds the whole program state)")
    if not isinstance(strict, bool):
        raise TypeError("load: strict must be a bool, got %s" % type(strict).__name__)
    scope = global_scope() if scope is None else scope
    _core.checkpoint_load(_ckpt_path(model_path), program._core_program(), scope, not strict)


def load_program_state(model_path, var_list=None):
    """The tensors of model_path.safetensors as {name: numpy array}
    (var_list: only those vars, each must be in the file)."""
    path = _ckpt_path(model_path)
    if not os.path.exists(path):
        raise _core.NotFoundError("load_program_state: no checkpoint file %s" % path)
    tmp = _core.Scope()
    _core.safetensors_read(path, tmp)
    if var_list is not None:
        want = [v if isinstance(v, str) else v.name for v in var_list]
    else:
        want = sorted(tmp.local_var_names())
    out = {}
    for n in want:
        v = tmp.find_var(n)
        if v is None:
            raise _core.NotFoundError("load_program_state: var %s is not in %s" % (n, path))
        out[n] = np.array(v.get_tensor())
    return out


def set_program_state(program, state_dict, scope=None, strict=False):
    """Sets every persistable of program from state_dict ({name: array}) into
    scope (default the global scope). A persistable missing from state_dict,
    or of another dtype or shape, is an error naming it (nothing is set
    then); names program does not hold are skipped (strict=True: refused)."""
    if not isinstance(program, Program):
        raise TypeError("set_program_state: program must be a Program, got %s" % type(program).__name__)
    if not isinstance(state_dict, dict):
        raise TypeError("set_program_state: state_dict must be a dict, got %s" % type(state_dict).__name__)
    g = program.global_block()
    persist = [v for v in g.vars.values() if v.persistable]
    bad = []
    vals = []
    for v in persist:
        if v.name not in state_dict:
            bad.append("%s is missing" % v.name)
            continue
        a = np.asarray(state_dict[v.name])
        shape = [int(d) for d in v.shape]
        if str(a.dtype) != v.dtype or a.ndim != len(shape) or any(d >= 0 and d != e for d, e in zip(shape, a.shape)):
            bad.append("%s: the state holds %s %s, the program declares %s %s"
                       % (v.name, a.dtype, list(a.shape), v.dtype, shape))
            continue
        vals.append((v.name, a))
    if bad:
        cls = _core.NotFoundError if all(b.endswith("is missing") for b in bad) else _core.InvalidArgumentError
        raise cls("set_program_state: %s" % "; ".join(bad))
    extra = sorted(set(state_dict) - {v.name for v in persist})
    if strict and extra:
        raise _core.InvalidArgumentError("set_program_state: %d vars of the state are not persistables of the program: "
                                         "%s" % (len(extra), ", ".join(extra)))
    scope = global_scope() if scope is None else scope
    for n, a in vals:
        scope.var(n).get_tensor().set(np.ascontiguousarray(a))


def save_program(program, path):
    """Writes the program: JSON when path ends with .json, else binary .pe."""
    program._core_program().save(os.fspath(path))


def load_program(path):
    """A Program from a .pe or .json file (verified and checked)."""
    c = _core.load_program(os.fspath(path))
    p = Program()
    p._load_json(c.to_json())
    return p


# ---- inference models ------------------------------------------------------------------

def _io_names(vs, what, fn):
    if isinstance(vs, (Variable, str)):
        vs = [vs]
    if not isinstance(vs, (list, tuple)) or not vs:
        raise ValueError("%s: %s must be a non-empty list of Variables" % (fn, what))
    names = []
    for v in vs:
        if not isinstance(v, (Variable, str)):
            raise TypeError("%s: %s entries must be Variables (or names), got %s" % (fn, what, type(v).__name__))
        n = v if isinstance(v, str) else v.name
        if n not in names:
            names.append(n)
    return names


def _prune_for_inference(program, feeds, fetches, fn):
    """clone(for_test=True) of program reduced to the ops of block 0 that the
    fetches need, cut at the feeds; vars no kept op uses are dropped."""
    g = program.global_block()
    for n in feeds:
        if n not in g.vars:
            raise ValueError("%s: feed var %s is not a variable of the program" % (fn, n))
    for n in fetches:
        if n not in g.vars:
            raise ValueError("%s: fetch var %s is not a variable of the program" % (fn, n))
    p = program.clone(for_test=True)
    b = p.global_block()
    feed_set = set(feeds)
    need = set(fetches) - feed_set
    kept = []
    for op in reversed(b.ops):
        if any(a in need for a in op.output_arg_names):
            kept.append(op)
            need.update(a for a in op.input_arg_names if a not in feed_set)
    kept.reverse()
    b.ops = kept
    used = set(feeds) | set(fetches)
    for blk in p.blocks:
        for op in blk.ops:
            used.update(op.input_arg_names)
            used.update(op.output_arg_names)
    for name in list(b.vars):
        if name not in used:
            del b.vars[name]
    # every var read before it is written must be fed or persistable
    written = set(feeds)
    for op in b.ops:
        for a in op.input_arg_names:
            v = b.vars.get(a)
            if v is None or a in written or v.persistable:
                continue
            raise ValueError("%s: the fetch vars %s are not reachable from the feed vars %s: op %s reads %s, "
                             "which is neither fed nor computed (add it to the feed vars)"
                             % (fn, fetches, feeds, op.type, a))
        written.update(op.output_arg_names)
    for n in fetches:
        if n not in written and not b.vars[n].persistable:
            raise ValueError("%s: fetch var %s is not computed by the program" % (fn, n))
    p._bump()
    return p


def _save_inference(model_path, params_path, feeds, fetches, program, scope, fn):
    """Writes the pruned program (feed / fetch names recorded) and, unless
    params_path is None, its persistables from scope (checked first: a
    refused save writes neither file)."""
    pruned = _prune_for_inference(program, feeds, fetches, fn)
    d = json.loads(pruned.to_json())
    d["feed_names"] = feeds
    d["fetch_names"] = fetches
    c = _core.Program(json.dumps(d), "<inference model>")
    for path in (model_path, params_path):
        dd = os.path.dirname(path) if path else ""
        if dd:
            os.makedirs(dd, exist_ok=True)
    c.to_bytes()
    if params_path is not None:
        _core.checkpoint_save(params_path, c, scope)
    c.save(model_path)
    return pruned


def _load_inference(model_path, params_path, scope, fn):
    for path in (model_path, params_path):
        if not os.path.exists(path):
            raise _core.NotFoundError("%s: no file %s" % (fn, path))
    c = _core.load_program(model_path)
    text = c.to_json()
    d = json.loads(text)
    p = Program()
    p._load_json(text)
    feeds = list(d.get("feed_names") or [])
    fetches = list(d.get("fetch_names") or [])
    if not fetches:
        raise _core.InvalidArgumentError("%s: %s is not an inference model (it records no fetch vars; "
                                         "save_inference_model writes them)" % (fn, model_path))
    _core.checkpoint_load(params_path, c, scope)
    g = p.global_block()
    for n in feeds:
        g.var(n).is_data = True
    return [p, feeds, [g.var(n) for n in fetches]]


def save_inference_model(path_prefix, feed_vars, fetch_vars, executor, program=None, scope=None, **kwargs):
    """Writes path_prefix.pe (program pruned to the feed -> fetch path, the
    feed and fetch names recorded) and path_prefix.safetensors (the weights
    it reads, from scope, default the global scope)."""
    fn = "save_inference_model"
    if not isinstance(path_prefix, (str, os.PathLike)):
        raise TypeError("%s: path_prefix must be a path, got %s" % (fn, type(path_prefix).__name__))
    from .executor import Executor
    if not isinstance(executor, Executor):
        raise TypeError("%s: executor must be an Executor, got %s" % (fn, type(executor).__name__))
    program = default_main_program() if program is None else program
    if not isinstance(program, Program):
        raise TypeError("%s: program must be a Program, got %s" % (fn, type(program).__name__))
    prefix = os.fspath(path_prefix)
    if prefix.endswith(".pe"):
        prefix = prefix[:-3]
    feeds = _io_names(feed_vars, "feed_vars", fn)
    fetches = _io_names(fetch_vars, "fetch_vars", fn)
    scope = global_scope() if scope is None else scope
    _save_inference(prefix + ".pe", prefix + _SUFFIX, feeds, fetches, program, scope, fn)


def load_inference_model(path_prefix, executor, scope=None, **kwargs):
    """Reads path_prefix.pe and loads path_prefix.safetensors into scope
    (default the global scope): [program, feed_target_names, fetch_targets]."""
    fn = "load_inference_model"
    if not isinstance(path_prefix, (str, os.PathLike)):
        raise TypeError("%s: path_prefix must be a path, got %s" % (fn, type(path_prefix).__name__))
    prefix = os.fspath(path_prefix)
    if prefix.endswith(".pe"):
        prefix = prefix[:-3]
    scope = global_scope() if scope is None else scope
    return _load_inference(prefix + ".pe", prefix + _SUFFIX, scope, fn)
