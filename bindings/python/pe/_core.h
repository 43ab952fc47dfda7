/* bindings/python/pe/_core.h — shared declarations of the pe._core extension
 * (_core.c: module, errors, conversions, registry; core_objects.c: Program,
 * Scope, Tensor; core_exec.c: feeds, Executor, ParallelExecutor;
 * core_passes.c: autodiff, optimizer, initializer passes, checkpoints;
 * core_dist.c: the process world of pe.distributed; core_eager.c: eager
 * mode's one-op runs and grad ops; core_eager_tensor.c: the eager fast
 * path, EagerTensor and EagerOp).
 * Not a public API: only these files include it.
 */
#ifndef PE_PY_CORE_H
#define PE_PY_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL pe_core_ARRAY_API
#ifndef PE_CORE_MAIN
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "pe/pe.h"

#include <stdint.h>

/* ---- errors (_core.c) ---- */
/* Raises the pe.Error subclass of st with pe_last_error(); returns NULL. */
PyObject *raise_status(pe_status st);
/* Raises the pe.Error subclass of st with a formatted message; returns NULL. */
PyObject *raise_msg(pe_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Bumped whenever a scope variable is erased or a scope cleared: executors
 * then drop their prepared op contexts (which point at scope variables). */
extern uint64_t g_scope_gen;

/* ---- conversions (_core.c) ---- */
typedef struct strlist {
    char **s;
    int n;
} strlist;
void strlist_free(strlist *l);
/* A sequence of str (None = empty) copied into C strings; 0, or -1 + exception. */
int strlist_from(PyObject *seq, const char *what, strlist *out);
/* The UTF-8 of str o, borrowed from o; NULL when o is no str (no exception
 * set) or holds a NUL (an exception set naming `what`): C strings would cut
 * such a name short, so it is refused, never truncated. */
const char *py_name_utf8(PyObject *o, const char *what);
/* None (cpu:0), a (kind, id) tuple, or an object with `_pe_place`. 0, or -1 + exception. */
int parse_place(PyObject *o, pe_place *out);
PyObject *place_tuple(pe_place p);
int npy_from_pe(pe_dtype dt);
int pe_from_npy(int t, pe_dtype *out);
/* An array PE can read in place (the same array when obj already is one). */
PyArrayObject *pe_ready_array(PyObject *obj, const char *what);
/* A caller-owned CPU tensor reading arr's memory (arr must outlive it). */
pe_tensor *wrap_array(PyArrayObject *arr);
PyObject *tensor_copy_to_numpy(const pe_tensor *t, const char *what);
/* The Python value of an attr (int, bool, float, str or a list of them). */
PyObject *attr_to_py(const pe_attr *a);

/* ---- objects (core_objects.c) ---- */
typedef struct {
    PyObject_HEAD
    pe_program *p;
    int n_users;   /* executors holding it: mutation is refused while > 0 */
} ProgramObject;

typedef struct {
    PyObject_HEAD
    pe_scope *s;
    int owned;        /* pe_scope_free on dealloc */
    PyObject *owner;  /* keeps s alive: the parent Scope (owned) or the owning object (borrowed) */
} ScopeObject;

/* Variable handle: (scope, name); looked up on every use. */
typedef struct {
    PyObject_HEAD
    PyObject *scope;  /* ScopeObject */
    PyObject *name;   /* str */
} VariableObject;

/* Either owned (a standalone pe_tensor: a fetch result or a wrapped array)
 * or a handle on a scope variable (scope + name, looked up on each use). */
typedef struct {
    PyObject_HEAD
    pe_tensor *owned;
    PyObject *keep;   /* owned: the numpy array a wrapped buffer reads */
    PyObject *scope;  /* handle: ScopeObject */
    PyObject *name;   /* handle: str */
} TensorObject;

extern PyTypeObject ProgramType, ScopeType, TensorType, VariableType;
ProgramObject *program_wrap(pe_program *p);   /* takes ownership of p */
int program_ready(ProgramObject *self);
int program_mutable(ProgramObject *self, const char *what);
ProgramObject *as_program(PyObject *o, const char *what);
ScopeObject *scope_borrowed(pe_scope *s, PyObject *owner);
TensorObject *tensor_alloc(void);
TensorObject *tensor_from_owned(pe_tensor *pt, PyObject *keep);
pe_tensor *tensor_get(TensorObject *self);
PyObject *py_load_program(PyObject *m, PyObject *args);
PyObject *py_as_tensor(PyObject *m, PyObject *obj);

/* ---- executors (core_exec.c) ---- */
extern PyTypeObject ExecutorType, PEType;
/* core_exec.c: _core.check_strategy (the strategy setters' check) */
PyObject *pe_check_strategy(PyObject *mod, PyObject *args, PyObject *kw);
/* core_exec.c: _core.strategy_defaults (the strategy classes' defaults, from C) */
PyObject *py_strategy_defaults(PyObject *mod, PyObject *noargs);
PyObject *py_strategy_refused(PyObject *mod, PyObject *noargs);
/* core_exec.c: _core.fuse_program (pe.jit fuses a traced forward + backward) */
PyObject *py_fuse_program(PyObject *mod, PyObject *args, PyObject *kw);

/* ---- passes and checkpoints (core_passes.c) ---- */
PyObject *py_append_backward(PyObject *m, PyObject *args, PyObject *kw);
PyObject *py_gradients(PyObject *m, PyObject *args, PyObject *kw);
PyObject *py_minimize(PyObject *m, PyObject *args, PyObject *kw);
PyObject *py_startup_init_var(PyObject *m, PyObject *args, PyObject *kw);
PyObject *py_checkpoint_save(PyObject *m, PyObject *args);
PyObject *py_checkpoint_load(PyObject *m, PyObject *args);
PyObject *py_safetensors_read(PyObject *m, PyObject *args);
PyObject *py_safetensors_write(PyObject *m, PyObject *args);

/* ---- the process world (core_dist.c) ---- */
extern PyMethodDef g_world_methods[]; /* world_init, world_allreduce, ...: added to the module */

/* ---- eager mode (core_eager.c) ---- */
extern PyMethodDef g_eager_methods[]; /* eager_op_index, eager_run, eager_grad_ops, eager_dims_only_inputs */
/* Attrs of op `op` from a dict {name: value} (or None), converted by the
 * registry's type of each; an attr the op does not have is refused naming
 * the op. Names are borrowed from the dict's keys. */
typedef struct attr_buf {
    pe_attr *a;
    int n;
} attr_buf;
int attrs_from_py(int op, PyObject *attrs, attr_buf *out);
void attr_buf_free(attr_buf *b);

/* ---- the eager fast path (core_eager_tensor.c) ---- */
extern PyMethodDef g_eager_fast_methods[];    /* eager_mode, eager_install */
extern PyTypeObject *const g_eager_types[];   /* EagerTensor, EagerOp (2) */
extern const char *const g_eager_type_names[];

#endif
