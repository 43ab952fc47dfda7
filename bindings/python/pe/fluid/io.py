"""fluid.io — Paddle 1.x's save/load of a program's persistables and parameters.

Each call reads or writes ONE safetensors file, dirname/filename (default
dirname/persistables.safetensors, or dirname/params.safetensors for the
*_params calls), over PE's checkpoint support (pe_checkpoint_save / load,
pe_safetensors_read / write). A persistables file is what pe.static.save
writes: pe.static.load(program, dirname + "/persistables") reads it too.

Parameter-server programs (fluid.DistributeTranspiler, pserver mode):
- save_persistables / save_params on a trainer program (program._pe_ps)
  gather every param and optimizer-state var from the pservers: a small
  program of recv (+ concat for a var cut into row blocks) run by the
  executor into a scratch scope, plus the trainer's own persistables
  (batch-norm statistics, ...). The file holds the ORIGINAL names at full
  shape, so a single-process run of the original program loads it. The
  gather has no barrier: in sync mode call it between steps (after a run of
  the trainer program, whose fetch_barrier ended the step).
- load_persistables on a pserver program (program._pe_ps_server) reads such
  a full checkpoint and loads this pserver's blocks (their row ranges, or the
  whole value for per-block copies and shared vars such as the learning
  rate); run the pserver's startup program first (Paddle's
  _load_distributed_persistables). On a trainer program it loads the
  trainer's own vars (the full params and its local persistables).

save_inference_model / load_inference_model (1.x signatures) write and read
dirname/model_filename (default __model__.pe: the program pruned to the
feed -> fetch path, feed and fetch names recorded) and
dirname/params_filename (default __params__.safetensors: its weights);
pe.static.save_inference_model describes the pruning.

save / load / load_program_state / set_program_state are 1.6's
model_path-prefix forms: pe.static's (<model_path>.pdparams etc.; see
pe.static.io).
"""
import os

import numpy as np

from .. import _core
from ..framework import Program, default_main_program
from ..static.executor import Executor, global_scope
from ..static import io as _static_io
from ..static.io import save, load, load_program_state, set_program_state  # noqa: F401

__all__ = ["save_vars", "load_vars", "save_persistables", "load_persistables", "save_params", "load_params",
           "save_inference_model", "load_inference_model", "is_parameter", "is_persistable", "save", "load",
           "load_program_state", "set_program_state"]

_SUFFIX = ".safetensors"


def _path(dirname, filename, default, what):
    if not isinstance(dirname, (str, os.PathLike)):
        raise TypeError("fluid.io.%s: dirname must be a path, got %s" % (what, type(dirname).__name__))
    if filename is not None and not isinstance(filename, str):
        raise TypeError("fluid.io.%s: filename must be a str, got %s" % (what, type(filename).__name__))
    return os.path.join(os.fspath(dirname), filename if filename else default)


def _program(main_program, what):
    p = main_program if main_program is not None else default_main_program()
    if not isinstance(p, Program):
        raise TypeError("fluid.io.%s: main_program must be a Program, got %s" % (what, type(p).__name__))
    return p


def _check_executor(executor, what):
    if not isinstance(executor, Executor):
        raise TypeError("fluid.io.%s: executor must be a fluid.Executor, got %s" % (what, type(executor).__name__))


def _scope_of(scope):
    return global_scope() if scope is None else scope


def _array(scope, name, what):
    v = scope.find_var(name)
    if v is None or not v.is_initialized():
        raise _core.NotFoundError("fluid.io.%s: var %s is not in the scope (run the startup program first)"
                                  % (what, name))
    return np.array(v.get_tensor())


# ---- gathering from the pservers ----------------------------------------------------

def _gather_program(ps, names):
    """A program that recv's (and concats) the vars `names` of a transpiled
    trainer program from the pservers, under their original names."""
    prog = Program()
    g = prog.global_block()
    from .ps_transpiler import _rpc_op
    for name in names:
        kind, entries = ps["vars"][name]
        shape, dtype, _ = ps["meta"][name]
        g.create_var(name=name, shape=shape, dtype=dtype, persistable=True)
        if kind == "copy":
            entries = entries[:1]
        if kind == "rows" and len(entries) > 1:
            outs = []
            for ep, bname, off, rows in entries:
                g.create_var(name=bname, shape=[rows] + list(shape[1:]), dtype=dtype)
                outs.append(bname)
        else:
            outs = [name]
        _rpc_op(g, "recv", inputs={}, outputs={"Out": outs},
                attrs={"epmap": [e[0] for e in entries], "varnames": [e[1] for e in entries],
                       "trainer_id": ps["trainer_id"]})
        if len(outs) > 1:
            g.append_op(type="concat", inputs={"X": outs}, outputs={"Out": [name]}, attrs={"axis": 0})
    return prog


def _save_transpiled(executor, program, path, names, scope, what):
    ps = program._pe_ps
    remote = [n for n in names if ps["vars"][n][0] != "local"]
    local = [n for n in names if ps["vars"][n][0] == "local"]
    tmp = _core.Scope()
    for n in local:
        tmp.var(n).get_tensor().set(_array(scope, n, what))
    if remote:
        executor.run(_gather_program(ps, remote), scope=tmp)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    _core.safetensors_write(path, tmp, list(names))


# ---- loading slices -------------------------------------------------------------------

def _shape_fits(got, declared):
    """got matches the declaration; a declared -1 matches any size."""
    return len(got) == len(declared) and all(int(d) < 0 or int(d) == g for g, d in zip(got, declared))


def _load_into(path, targets, scope, place, what):
    """targets: [(dst name, name in the file, row range or None, expected shape, dtype)].
    Every one is checked before any is written."""
    if not os.path.exists(path):
        raise _core.NotFoundError("fluid.io.%s: no checkpoint file %s" % (what, path))
    src = _core.Scope()
    _core.safetensors_read(path, src)
    vals, bad = [], []
    for dst, name, rng, shape, dtype in targets:
        v = src.find_var(name)
        if v is None:
            bad.append("%s is not in the file" % name)
            continue
        a = np.array(v.get_tensor())
        if rng is not None:
            a = a[rng[0]:rng[0] + rng[1]]
        if not _shape_fits(a.shape, shape) or (dtype and str(a.dtype) != dtype):
            bad.append("%s%s: the file gives %s %s, %s wants %s %s"
                       % (name, "" if rng is None else " rows [%d, %d)" % (rng[0], rng[0] + rng[1]),
                          str(a.dtype), list(a.shape), dst, dtype, list(shape)))
            continue
        vals.append((dst, a))
    if bad:
        raise _core.InvalidArgumentError("fluid.io.%s: %s does not fit the program: %s" % (what, path, "; ".join(bad)))
    for dst, a in vals:
        scope.var(dst).get_tensor().set(np.ascontiguousarray(a), place)


def _targets_pserver(program, names_filter):
    where = program._pe_ps_server["vars"]
    g = program.global_block()
    out = []
    for bname, (kind, orig, off, rows) in where.items():
        v = g.var(bname)
        if names_filter is not None and not names_filter(v):
            continue
        out.append((bname, orig, (off, rows) if kind == "rows" else None, list(v.shape), v.dtype))
    return out


def _targets_plain(program, names):
    g = program.global_block()
    return [(n, n, None, list(g.var(n).shape), g.var(n).dtype) for n in names]


def _persistables(program):
    return [v.name for v in program.global_block().vars.values() if v.persistable]


def _params(program):
    return [v.name for v in program.global_block().vars.values() if v.persistable and v.is_parameter]


# ---- API -----------------------------------------------------------------------------------

def is_parameter(var):
    """True for a parameter (the predicate Paddle's save_vars / load_vars take)."""
    return bool(getattr(var, "is_parameter", False))


def is_persistable(var):
    """True for a persistable var: parameters, optimizer state, LR, counters."""
    return bool(getattr(var, "persistable", False))


def _chosen_vars(program, vars, predicate, what):
    """The var names save_vars / load_vars act on: `vars` (Variables or names
    of main_program's global block) or, when None, every var of the block for
    which predicate(var) is true (predicate None: every var)."""
    if getattr(program, "_pe_ps", None) is not None or getattr(program, "_pe_ps_server", None) is not None:
        raise _core.UnsupportedError("fluid.io.%s: a transpiled parameter-server program keeps its vars on the "
                                     "pservers; use save_persistables / save_params (they gather them) or "
                                     "load_persistables / load_params" % what)
    g = program.global_block()
    if vars is not None:
        if predicate is not None:
            raise _core.InvalidArgumentError("fluid.io.%s: give vars or predicate, not both" % what)
        names = []
        for v in vars:
            n = v if isinstance(v, str) else getattr(v, "name", None)
            if not isinstance(n, str):
                raise TypeError("fluid.io.%s: vars holds %s; expected Variables or var names" % (what,
                                                                                               type(v).__name__))
            if not g.has_var(n):
                raise _core.NotFoundError("fluid.io.%s: var %s is not in main_program's global block" % (what, n))
            names.append(n)
        return names
    if predicate is not None and not callable(predicate):
        raise TypeError("fluid.io.%s: predicate must be callable, got %s" % (what, type(predicate).__name__))
    return [v.name for v in g.vars.values() if predicate is None or predicate(v)]


def _vars_args(executor, dirname, main_program, vars, predicate, filename, scope, what):
    """save_vars / load_vars: (program, file path, scope, chosen var names),
    each argument checked."""
    _check_executor(executor, what)
    program = _program(main_program, what)
    path = _path(dirname, filename, "vars" + _SUFFIX, what)
    scope = _scope_of(scope)
    names = _chosen_vars(program, vars, predicate, what)
    if not names:
        raise _core.InvalidArgumentError("fluid.io.%s: no var chosen (vars is empty or predicate held for none)"
                                         % what)
    return program, path, scope, names


def save_vars(executor, dirname, main_program=None, vars=None, predicate=None, filename=None, scope=None):
    """Writes the chosen vars (`vars`, or those of main_program for which
    predicate(var) holds, e.g. fluid.io.is_parameter) from the scope to
    dirname/filename (default vars.safetensors: one file, not one per var).
    Every var must have a value in the scope."""
    program, path, scope, names = _vars_args(executor, dirname, main_program, vars, predicate, filename, scope,
                                             "save_vars")
    for n in names:
        _array(scope, n, "save_vars")
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    _core.safetensors_write(path, scope, names)


def load_vars(executor, dirname, main_program=None, vars=None, predicate=None, filename=None, scope=None):
    """Loads the chosen vars (as save_vars chooses them) from dirname/filename
    (default vars.safetensors) into the scope; every one must be in the file
    with its declared dtype and shape (a declared -1 matches any size), all
    checked before any is written."""
    program, path, scope, names = _vars_args(executor, dirname, main_program, vars, predicate, filename, scope,
                                             "load_vars")
    _load_into(path, _targets_plain(program, names), scope, executor.place, "load_vars")


def save_persistables(executor, dirname, main_program=None, filename=None, scope=None):
    """Writes every persistable of main_program (params, optimizer state, LR,
    counters) to dirname/filename (default persistables.safetensors). On a
    transpiled trainer program: gathered from the pservers, original names and
    full shapes."""
    _check_executor(executor, "save_persistables")
    program = _program(main_program, "save_persistables")
    path = _path(dirname, filename, "persistables" + _SUFFIX, "save_persistables")
    scope = _scope_of(scope)
    ps = getattr(program, "_pe_ps", None)
    if ps is not None and ps.get("role") == "trainer":
        _save_transpiled(executor, program, path, list(ps["vars"]), scope, "save_persistables")
        return
    if getattr(program, "_pe_ps_server", None) is not None:
        raise _core.UnsupportedError("fluid.io.save_persistables: a pserver program holds row blocks only; save "
                                     "from a trainer (its transpiled program gathers the full vars)")
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    _core.checkpoint_save(path, program._core_program(), scope)


def load_persistables(executor, dirname, main_program=None, filename=None, scope=None):
    """Loads dirname/filename (default persistables.safetensors) into the
    scope: every persistable of main_program, dtype and shape checked. On a
    pserver program: its blocks, cut from a full checkpoint."""
    _check_executor(executor, "load_persistables")
    program = _program(main_program, "load_persistables")
    path = _path(dirname, filename, "persistables" + _SUFFIX, "load_persistables")
    scope = _scope_of(scope)
    if getattr(program, "_pe_ps_server", None) is not None:
        _load_into(path, _targets_pserver(program, None), scope, executor.place, "load_persistables")
        return
    ps = getattr(program, "_pe_ps", None)
    if ps is not None and ps.get("role") == "trainer":
        _load_into(path, _targets_plain(program, _persistables(program)), scope, executor.place,
                   "load_persistables")
        return
    if not os.path.exists(path):
        raise _core.NotFoundError("fluid.io.load_persistables: no checkpoint file %s" % path)
    _core.checkpoint_load(path, program._core_program(), scope)


def save_params(executor, dirname, main_program=None, filename=None, scope=None):
    """Writes the parameters of main_program to dirname/filename (default
    params.safetensors); gathered from the pservers on a transpiled trainer program."""
    _check_executor(executor, "save_params")
    program = _program(main_program, "save_params")
    path = _path(dirname, filename, "params" + _SUFFIX, "save_params")
    scope = _scope_of(scope)
    ps = getattr(program, "_pe_ps", None)
    if ps is not None and ps.get("role") == "trainer":
        names = [n for n in ps["vars"] if ps["meta"][n][2]]
        _save_transpiled(executor, program, path, names, scope, "save_params")
        return
    if getattr(program, "_pe_ps_server", None) is not None:
        raise _core.UnsupportedError("fluid.io.save_params: a pserver program holds row blocks only; save from a "
                                     "trainer")
    names = _params(program)
    for n in names:
        _array(scope, n, "save_params")
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    _core.safetensors_write(path, scope, names)


def load_params(executor, dirname, main_program=None, filename=None, scope=None):
    """Loads the parameters of main_program from dirname/filename (default
    params.safetensors; a persistables file works too); on a pserver program,
    its parameter blocks."""
    _check_executor(executor, "load_params")
    program = _program(main_program, "load_params")
    path = _path(dirname, filename, "params" + _SUFFIX, "load_params")
    scope = _scope_of(scope)
    if getattr(program, "_pe_ps_server", None) is not None:
        targets = _targets_pserver(program, lambda v: v.is_parameter)
    else:
        targets = _targets_plain(program, _params(program))
    _load_into(path, targets, scope, executor.place, "load_params")


def _model_paths(dirname, model_filename, params_filename, what):
    return (_path(dirname, model_filename, "__model__.pe", what),
            _path(dirname, params_filename, "__params__" + _SUFFIX, what))


def save_inference_model(dirname, feeded_var_names, target_vars, executor, main_program=None, model_filename=None,
                         params_filename=None, export_for_deployment=True, program_only=False, scope=None):
    """Writes the program pruned to feeded_var_names -> target_vars to
    dirname/model_filename (default __model__.pe) and its weights to
    dirname/params_filename (default __params__.safetensors; not with
    program_only=True). Returns the fetch var names."""
    what = "save_inference_model"
    _check_executor(executor, what)
    program = _program(main_program, what)
    if isinstance(feeded_var_names, str):
        feeded_var_names = [feeded_var_names]
    if not isinstance(feeded_var_names, (list, tuple)) or not all(isinstance(n, str) for n in feeded_var_names):
        raise TypeError("fluid.io.save_inference_model: feeded_var_names must be a list of str")
    model_path, params_path = _model_paths(dirname, model_filename, params_filename, what)
    feeds = _static_io._io_names(list(feeded_var_names), "feeded_var_names", "fluid.io." + what)
    fetches = _static_io._io_names(target_vars, "target_vars", "fluid.io." + what)
    scope = _scope_of(scope)
    _static_io._save_inference(model_path, None if program_only else params_path, feeds, fetches, program, scope,
                               "fluid.io." + what)
    return fetches


def load_inference_model(dirname, executor, model_filename=None, params_filename=None, pserver_endpoints=None,
                         scope=None):
    """Reads dirname/model_filename and loads dirname/params_filename into the
    scope: [program, feed_target_names, fetch_targets]."""
    what = "load_inference_model"
    _check_executor(executor, what)
    model_path, params_path = _model_paths(dirname, model_filename, params_filename, what)
    return _static_io._load_inference(model_path, params_path, _scope_of(scope), "fluid.io." + what)
