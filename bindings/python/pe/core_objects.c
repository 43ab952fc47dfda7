/* bindings/python/pe/core_objects.c — the Program, Scope, Tensor and ScopeVariable types.
 * (part of pe._core; see _core.c for the design). */
#include "_core.h"

#include <stdlib.h>
#include <string.h>

/* ---- Program ---------------------------------------------------------- */

ProgramObject *program_wrap(pe_program *p) {
    ProgramObject *o = PyObject_New(ProgramObject, &ProgramType);
    if (!o) {
        pe_program_free(p);
        return NULL;
    }
    o->p = p;
    o->n_users = 0;
    return o;
}

static int program_init(ProgramObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"source", "what", NULL};
    PyObject *src = NULL;
    const char *what = "<python>";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Os", kwlist, &src, &what)) return -1;
    if (self->n_users) {
        raise_msg(PE_ERR_INVALID, "Program: cannot re-initialize a program an executor is using");
        return -1;
    }
    pe_program *p = NULL;
    pe_status st;
    if (!src || src == Py_None) {
        p = pe_program_new();
        st = p ? PE_OK : PE_ERR_NOMEM;
    } else if (PyUnicode_Check(src)) {
        Py_ssize_t n;
        const char *text = PyUnicode_AsUTF8AndSize(src, &n);
        if (!text) return -1;
        Py_BEGIN_ALLOW_THREADS
        st = pe_program_load_json(text, (size_t)n, what, &p);
        Py_END_ALLOW_THREADS
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(src, &view, PyBUF_SIMPLE) != 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "Program(source): source must be JSON text (str) or a .pe buffer (bytes), not %.80s",
                         Py_TYPE(src)->tp_name);
            return -1;
        }
        st = pe_program_load_buffer(view.buf, (size_t)view.len, what, &p);
        PyBuffer_Release(&view);
    }
    if (st != PE_OK) {
        raise_status(st);
        return -1;
    }
    pe_program_free(self->p);
    self->p = p;
    return 0;
}

static PyObject *program_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)args;
    (void)kw;
    ProgramObject *self = (ProgramObject *)type->tp_alloc(type, 0);
    if (self) {
        self->p = NULL;
        self->n_users = 0;
    }
    return (PyObject *)self;
}

static void program_dealloc(ProgramObject *self) {
    pe_program_free(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

int program_ready(ProgramObject *self) {
    if (!self->p) {
        raise_msg(PE_ERR_INVALID, "Program is empty (construction failed)");
        return -1;
    }
    return 0;
}

int program_mutable(ProgramObject *self, const char *what) {
    if (program_ready(self)) return -1;
    if (self->n_users) {
        raise_msg(PE_ERR_INVALID, "%s: the program is in use by %d executor(s); transform a fresh copy instead", what,
                  self->n_users);
        return -1;
    }
    return 0;
}

static PyObject *program_to_json(ProgramObject *self, PyObject *unused) {
    (void)unused;
    if (program_ready(self)) return NULL;
    char *json = NULL;
    pe_status st = pe_program_to_json(self->p, &json);
    if (st != PE_OK) return raise_status(st);
    PyObject *r = PyUnicode_FromString(json);
    free(json);
    return r;
}

static PyObject *program_to_bytes(ProgramObject *self, PyObject *unused) {
    (void)unused;
    if (program_ready(self)) return NULL;
    void *data = NULL;
    size_t size = 0;
    pe_status st = pe_program_to_buffer(self->p, &data, &size);
    if (st != PE_OK) return raise_status(st);
    PyObject *r = PyBytes_FromStringAndSize(data, (Py_ssize_t)size);
    free(data);
    return r;
}

static PyObject *program_save(ProgramObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (program_ready(self)) return NULL;
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_program_save_file(self->p, path);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *program_clone(ProgramObject *self, PyObject *unused) {
    (void)unused;
    if (program_ready(self)) return NULL;
    pe_program *c = pe_program_clone(self->p);
    if (!c) return raise_status(PE_ERR_NOMEM);
    return (PyObject *)program_wrap(c);
}

static PyObject *program_check(ProgramObject *self, PyObject *args) {
    const char *what = "<python>";
    if (!PyArg_ParseTuple(args, "|s", &what)) return NULL;
    if (program_ready(self)) return NULL;
    pe_status st = pe_program_check(self->p, what);
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *program_get_n_users(ProgramObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->n_users);
}

static PyObject *program_get_random_seed(ProgramObject *self, void *c) {
    (void)c;
    if (program_ready(self)) return NULL;
    return PyLong_FromLongLong(self->p->random_seed);
}

static PyMethodDef program_methods[] = {
    {"to_json", (PyCFunction)program_to_json, METH_NOARGS, "JSON text of the program."},
    {"to_bytes", (PyCFunction)program_to_bytes, METH_NOARGS, "Binary (.pe flatbuffer) form of the program."},
    {"save", (PyCFunction)program_save, METH_VARARGS, "save(path): .json by extension, else binary .pe (atomic)."},
    {"clone", (PyCFunction)program_clone, METH_NOARGS, "Deep copy."},
    {"check", (PyCFunction)program_check, METH_VARARGS, "check(what='<python>'): semantic check."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef program_getset[] = {
    {"n_users", (getter)program_get_n_users, NULL, "executors holding this program", NULL},
    {"random_seed", (getter)program_get_random_seed, NULL, "the program's random seed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pe._core.Program",
    .tp_basicsize = sizeof(ProgramObject),
    .tp_dealloc = (destructor)program_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Program(source=None, what='<python>'): a PE program from JSON text (str) or a .pe buffer (bytes).",
    .tp_methods = program_methods,
    .tp_getset = program_getset,
    .tp_init = (initproc)program_init,
    .tp_new = program_new,
};

PyObject *py_load_program(PyObject *m, PyObject *args) {
    (void)m;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    pe_program *p = NULL;
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_program_load_file(path, &p);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    return (PyObject *)program_wrap(p);
}

ProgramObject *as_program(PyObject *o, const char *what) {
    if (!PyObject_TypeCheck(o, &ProgramType)) {
        PyErr_Format(PyExc_TypeError, "%s must be a pe._core.Program, not %.80s", what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    ProgramObject *p = (ProgramObject *)o;
    if (program_ready(p)) return NULL;
    return p;
}

/* ---- Scope ------------------------------------------------------------ */

ScopeObject *scope_borrowed(pe_scope *s, PyObject *owner) {
    ScopeObject *o = PyObject_New(ScopeObject, &ScopeType);
    if (!o) return NULL;
    o->s = s;
    o->owned = 0;
    o->owner = owner;
    Py_XINCREF(owner);
    return o;
}

static PyObject *scope_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"parent", NULL};
    PyObject *parent = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &parent)) return NULL;
    if (parent != Py_None && !PyObject_TypeCheck(parent, &ScopeType)) {
        PyErr_Format(PyExc_TypeError, "Scope(parent): parent must be a Scope or None, not %.80s", Py_TYPE(parent)->tp_name);
        return NULL;
    }
    ScopeObject *self = (ScopeObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->s = pe_scope_new(parent == Py_None ? NULL : ((ScopeObject *)parent)->s);
    if (!self->s) {
        Py_DECREF(self);
        return raise_status(PE_ERR_NOMEM);
    }
    self->owned = 1;
    self->owner = parent == Py_None ? NULL : parent;
    Py_XINCREF(self->owner);
    return (PyObject *)self;
}

static void scope_dealloc(ScopeObject *self) {
    if (self->owned) pe_scope_free(self->s);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *variable_make(PyObject *scope, PyObject *name) {
    VariableObject *v = PyObject_New(VariableObject, &VariableType);
    if (!v) return NULL;
    v->scope = scope;
    v->name = name;
    Py_INCREF(scope);
    Py_INCREF(name);
    return (PyObject *)v;
}

static PyObject *scope_var(ScopeObject *self, PyObject *name) {
    const char *n = py_name_utf8(name, "var name");
    if (!n) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Scope.var(name): name must be a str");
        return NULL;
    }
    if (!pe_scope_var(self->s, n)) return raise_status(PE_ERR_NOMEM);
    return variable_make((PyObject *)self, name);
}

static PyObject *scope_find_var_impl(ScopeObject *self, PyObject *name, int local) {
    const char *n = py_name_utf8(name, "var name");
    if (!n) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Scope.find_var(name): name must be a str");
        return NULL;
    }
    if (!(local ? pe_scope_find_local_var(self->s, n) : pe_scope_find_var(self->s, n))) Py_RETURN_NONE;
    return variable_make((PyObject *)self, name);
}

static PyObject *scope_find_var(ScopeObject *self, PyObject *name) { return scope_find_var_impl(self, name, 0); }
static PyObject *scope_find_local_var(ScopeObject *self, PyObject *name) { return scope_find_var_impl(self, name, 1); }

static PyObject *scope_erase_var(ScopeObject *self, PyObject *name) {
    const char *n = py_name_utf8(name, "var name");
    if (!n) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Scope.erase_var(name): name must be a str");
        return NULL;
    }
    g_scope_gen++;
    return PyBool_FromLong(pe_scope_erase_var(self->s, n));
}

static PyObject *scope_clear(ScopeObject *self, PyObject *unused) {
    (void)unused;
    g_scope_gen++;
    pe_scope_clear(self->s);
    Py_RETURN_NONE;
}

static PyObject *scope_new_scope(ScopeObject *self, PyObject *unused) {
    (void)unused;
    PyObject *args = PyTuple_Pack(1, (PyObject *)self);
    if (!args) return NULL;
    PyObject *r = scope_new(&ScopeType, args, NULL);
    Py_DECREF(args);
    return r;
}

static PyObject *scope_parent(ScopeObject *self, PyObject *unused) {
    (void)unused;
    pe_scope *p = pe_scope_parent(self->s);
    if (!p) Py_RETURN_NONE;
    if (self->owner && PyObject_TypeCheck(self->owner, &ScopeType) && ((ScopeObject *)self->owner)->s == p) {
        Py_INCREF(self->owner);
        return self->owner;
    }
    return (PyObject *)scope_borrowed(p, (PyObject *)self);
}

static PyObject *scope_local_var_names(ScopeObject *self, PyObject *unused) {
    (void)unused;
    int n = pe_scope_size(self->s);
    const char **names = PyMem_Malloc(sizeof *names * (size_t)(n > 0 ? n : 1));
    if (!names) return PyErr_NoMemory();
    n = pe_scope_var_names(self->s, names, n);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, s);
    }
    PyMem_Free(names);
    return l;
}

static PyObject *scope_size(ScopeObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLong(pe_scope_size(self->s));
}

static PyObject *scope_nbytes(ScopeObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromSize_t(pe_scope_bytes(self->s));
}

static PyObject *scope_ptr(ScopeObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromVoidPtr(self->s);
}

static PyObject *scope_richcompare(PyObject *a, PyObject *b, int op) {
    if (!PyObject_TypeCheck(b, &ScopeType) || (op != Py_EQ && op != Py_NE)) Py_RETURN_NOTIMPLEMENTED;
    int eq = ((ScopeObject *)a)->s == ((ScopeObject *)b)->s;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t scope_hash(ScopeObject *self) { return _Py_HashPointer(self->s); }

static PyMethodDef scope_methods[] = {
    {"var", (PyCFunction)scope_var, METH_O, "var(name): the variable of this scope, created if absent."},
    {"find_var", (PyCFunction)scope_find_var, METH_O, "find_var(name): the variable here or in an ancestor, or None."},
    {"find_local_var", (PyCFunction)scope_find_local_var, METH_O, "find_local_var(name): only this scope, or None."},
    {"erase_var", (PyCFunction)scope_erase_var, METH_O, "erase_var(name) -> bool."},
    {"clear", (PyCFunction)scope_clear, METH_NOARGS, "Frees every variable of this scope."},
    {"new_scope", (PyCFunction)scope_new_scope, METH_NOARGS, "A child scope."},
    {"parent", (PyCFunction)scope_parent, METH_NOARGS, "The parent scope or None."},
    {"local_var_names", (PyCFunction)scope_local_var_names, METH_NOARGS, "Names of this scope's own variables."},
    {"size", (PyCFunction)scope_size, METH_NOARGS, "Number of this scope's own variables."},
    {"nbytes", (PyCFunction)scope_nbytes, METH_NOARGS, "Bytes held by this scope's own variables."},
    {"_ptr", (PyCFunction)scope_ptr, METH_NOARGS, "Address of the C scope (identity)."},
    {NULL, NULL, 0, NULL}};

PyTypeObject ScopeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pe._core.Scope",
    .tp_basicsize = sizeof(ScopeObject),
    .tp_dealloc = (destructor)scope_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Scope(parent=None): name -> variable, with a parent chain (paddle.static.Scope).",
    .tp_methods = scope_methods,
    .tp_richcompare = scope_richcompare,
    .tp_hash = (hashfunc)scope_hash,
    .tp_new = scope_new,
};

/* ---- Tensor ----------------------------------------------------------- */

TensorObject *tensor_alloc(void) {
    TensorObject *t = PyObject_New(TensorObject, &TensorType);
    if (!t) return NULL;
    t->owned = NULL;
    t->keep = NULL;
    t->scope = NULL;
    t->name = NULL;
    return t;
}

TensorObject *tensor_from_owned(pe_tensor *pt, PyObject *keep) {
    TensorObject *t = tensor_alloc();
    if (!t) {
        pe_tensor_free(pt);
        return NULL;
    }
    t->owned = pt;
    t->keep = keep;
    Py_XINCREF(keep);
    return t;
}

static PyObject *tensor_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "", kwlist)) return NULL;
    TensorObject *t = (TensorObject *)type->tp_alloc(type, 0);
    if (!t) return NULL;
    t->owned = pe_tensor_new();
    if (!t->owned) {
        Py_DECREF(t);
        return raise_status(PE_ERR_NOMEM);
    }
    return (PyObject *)t;
}

static void tensor_dealloc(TensorObject *self) {
    pe_tensor_free(self->owned); /* releases a wrapped buffer before the array it reads */
    Py_XDECREF(self->keep);
    Py_XDECREF(self->scope);
    Py_XDECREF(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The pe_tensor behind self, or NULL + NotFoundError when the variable was erased. */
pe_tensor *tensor_get(TensorObject *self) {
    if (self->owned) return self->owned;
    if (!self->scope || !self->name) return (pe_tensor *)raise_msg(PE_ERR_INTERNAL, "Tensor handle without a scope");
    const char *n = PyUnicode_AsUTF8(self->name);
    if (!n) return NULL;
    pe_tensor *t = pe_scope_find_var(((ScopeObject *)self->scope)->s, n);
    if (!t) return (pe_tensor *)raise_msg(PE_ERR_NOT_FOUND, "variable '%s' is no longer in its scope (erased)", n);
    return t;
}

static const char *tensor_what(TensorObject *self) {
    return self->name ? PyUnicode_AsUTF8(self->name) : "tensor";
}

static PyObject *tensor_set(TensorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"array", "place", NULL};
    PyObject *obj, *place_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &obj, &place_o)) return NULL;
    pe_place place;
    if (parse_place(place_o, &place)) return NULL;
    pe_tensor *dst = tensor_get(self);
    if (!dst) return NULL;
    pe_status st;
    if (PyObject_TypeCheck(obj, &TensorType)) {
        pe_tensor *src = tensor_get((TensorObject *)obj);
        if (!src) return NULL;
        if (src == dst) Py_RETURN_NONE;
        st = pe_tensor_copy(dst, src, place);
    } else {
        char what[300];
        snprintf(what, sizeof what, "Tensor.set(%s)", tensor_what(self));
        PyArrayObject *arr = pe_ready_array(obj, what);
        if (!arr) return NULL;
        pe_tensor *src = wrap_array(arr);
        if (!src) {
            Py_DECREF(arr);
            return NULL;
        }
        /* A shared buffer (an executor replica, a fetch view) is detached
         * rather than overwritten: set() gives this variable new storage. */
        if (dst->buf && dst->buf->refcount > 1) pe_tensor_clear(dst);
        /* the data is new, the LoD stays (Paddle's set(): lengths may be set first) */
        pe_tensor lod = {0};
        pe_tensor_share_lod(&lod, dst);
        Py_BEGIN_ALLOW_THREADS
        st = pe_tensor_copy(dst, src, place);
        Py_END_ALLOW_THREADS
        pe_tensor_share_lod(dst, &lod);
        pe_tensor_clear_lod(&lod);
        pe_tensor_free(src);
        Py_DECREF(arr);
    }
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* numpy(copy=True): a copy; copy=False on an owned CPU tensor: a view
 * keeping this Tensor alive. */
static PyObject *tensor_numpy_impl(TensorObject *self, int copy) {
    pe_tensor *t = tensor_get(self);
    if (!t) return NULL;
    if (copy || !self->owned || t->place.kind != PE_PLACE_CPU || !t->buf || pe_tensor_numel(t) == 0)
        return tensor_copy_to_numpy(t, tensor_what(self));
    int typenum = npy_from_pe(t->dtype);
    if (typenum < 0)
        return raise_msg(PE_ERR_UNSUPPORTED, "tensor dtype %s has no numpy equivalent", pe_dtype_name(t->dtype));
    npy_intp dims[PE_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) dims[i] = (npy_intp)t->dims[i];
    PyObject *arr = PyArray_New(&PyArray_Type, t->ndim, dims, typenum, NULL, pe_tensor_data(t), 0,
                                NPY_ARRAY_CARRAY, NULL);
    if (!arr) return NULL;
    Py_INCREF(self);
    if (PyArray_SetBaseObject((PyArrayObject *)arr, (PyObject *)self) != 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

static PyObject *tensor_numpy(TensorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"copy", NULL};
    int copy = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &copy)) return NULL;
    return tensor_numpy_impl(self, copy);
}

static PyObject *tensor_array(TensorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO", kwlist, &dtype, &copy)) return NULL;
    PyObject *arr = tensor_numpy_impl(self, 1);
    if (!arr || dtype == Py_None) return arr;
    PyObject *r = PyObject_CallMethod(arr, "astype", "O", dtype);
    Py_DECREF(arr);
    return r;
}

static PyObject *tensor_shape(TensorObject *self, PyObject *unused) {
    (void)unused;
    pe_tensor *t = tensor_get(self);
    if (!t) return NULL;
    PyObject *l = PyList_New(t->ndim);
    if (!l) return NULL;
    for (int i = 0; i < t->ndim; i++) PyList_SET_ITEM(l, i, PyLong_FromLongLong(t->dims[i]));
    return l;
}

static PyObject *tensor_dtype(TensorObject *self, PyObject *unused) {
    (void)unused;
    pe_tensor *t = tensor_get(self);
    if (!t) return NULL;
    return PyUnicode_FromString(pe_dtype_name(t->dtype));
}

static PyObject *tensor_place(TensorObject *self, PyObject *unused) {
    (void)unused;
    pe_tensor *t = tensor_get(self);
    if (!t) return NULL;
    return place_tuple(t->place);
}

static PyObject *tensor_is_initialized(TensorObject *self, PyObject *unused) {
    (void)unused;
    pe_tensor *t = tensor_get(self);
    if (!t) return NULL;
    return PyBool_FromLong(t->buf != NULL);
}

static PyObject *tensor_data_ptr(TensorObject *self, PyObject *unused) {
    (void)unused;
    pe_tensor *t = tensor_get(self);
    if (!t) return NULL;
    return PyLong_FromVoidPtr(pe_tensor_data(t));
}

/* ---- LoD ---- */

/* list of lists of ints (each level's offsets, or lengths when `lengths`) */
static PyObject *lod_to_list(const pe_tensor *t, int lengths) {
    int nl = pe_tensor_lod_levels(t);
    PyObject *l = PyList_New(nl);
    if (!l) return NULL;
    for (int k = 0; k < nl; k++) {
        int64_t n;
        const int64_t *o = pe_tensor_lod(t, k, &n);
        PyObject *lv = PyList_New(lengths ? n - 1 : n);
        if (!lv) {
            Py_DECREF(l);
            return NULL;
        }
        for (int64_t i = 0; i < (lengths ? n - 1 : n); i++) {
            PyObject *x = PyLong_FromLongLong(lengths ? o[i + 1] - o[i] : o[i]);
            if (!x) {
                Py_DECREF(lv);
                Py_DECREF(l);
                return NULL;
            }
            PyList_SET_ITEM(lv, i, x);
        }
        PyList_SET_ITEM(l, k, lv);
    }
    return l;
}

/* Sets t's LoD from a sequence of sequences of ints: offsets, or lengths
 * (turned into offsets) when `lengths`. `api` names the method in errors. */
static PyObject *lod_from_list(pe_tensor *t, PyObject *obj, int lengths, const char *api) {
    PyObject *seq = PySequence_Fast(obj, "");
    if (!seq) {
        PyErr_Clear();
        return raise_msg(PE_ERR_INVALID, "%s: expected a list of lists of ints, got %s", api, Py_TYPE(obj)->tp_name);
    }
    Py_ssize_t nl = PySequence_Fast_GET_SIZE(seq);
    if (nl > PE_MAX_LOD_LEVELS) {
        Py_DECREF(seq);
        return raise_msg(PE_ERR_INVALID, "%s: %zd levels, at most %d", api, nl, PE_MAX_LOD_LEVELS);
    }
    int64_t *offs[PE_MAX_LOD_LEVELS] = {0};
    int64_t n[PE_MAX_LOD_LEVELS];
    int err = 0; /* an exception is set */
    for (Py_ssize_t k = 0; k < nl && !err; k++) {
        PyObject *lv = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, k), "");
        if (!lv) {
            PyErr_Clear();
            err = 1, raise_msg(PE_ERR_INVALID, "%s: level %zd is not a list of ints", api, k);
            break;
        }
        Py_ssize_t m = PySequence_Fast_GET_SIZE(lv);
        n[k] = lengths ? m + 1 : m;
        offs[k] = malloc(sizeof(int64_t) * (size_t)(n[k] ? n[k] : 1));
        if (!offs[k]) {
            Py_DECREF(lv);
            err = 1, PyErr_NoMemory();
            break;
        }
        if (lengths) offs[k][0] = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(lv, i));
            if (v == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                err = 1, raise_msg(PE_ERR_INVALID, "%s: level %zd entry %zd is not an int", api, k, i);
                break;
            }
            if (lengths && v < 0) {
                err = 1, raise_msg(PE_ERR_INVALID, "%s: level %zd has a negative length %lld at %zd", api, k, v, i);
                break;
            }
            if (lengths) offs[k][i + 1] = offs[k][i] + v;
            else offs[k][i] = v;
        }
        Py_DECREF(lv);
    }
    Py_DECREF(seq);
    if (!err) {
        pe_status st = pe_tensor_set_lod(t, (int)nl, (const int64_t *const *)offs, n);
        if (st != PE_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", pe_last_error());
            err = 1, raise_msg(st, "%s: %s", api, msg);
        }
    }
    for (int k = 0; k < PE_MAX_LOD_LEVELS; k++) free(offs[k]);
    if (err) return NULL;
    Py_RETURN_NONE;
}

static PyObject *tensor_lod(TensorObject *self, PyObject *unused) {
    (void)unused;
    pe_tensor *t = tensor_get(self);
    return t ? lod_to_list(t, 0) : NULL;
}

static PyObject *tensor_recursive_sequence_lengths(TensorObject *self, PyObject *unused) {
    (void)unused;
    pe_tensor *t = tensor_get(self);
    return t ? lod_to_list(t, 1) : NULL;
}

static PyObject *tensor_set_lod(TensorObject *self, PyObject *obj) {
    pe_tensor *t = tensor_get(self);
    return t ? lod_from_list(t, obj, 0, "Tensor.set_lod") : NULL;
}

static PyObject *tensor_set_recursive_sequence_lengths(TensorObject *self, PyObject *obj) {
    pe_tensor *t = tensor_get(self);
    return t ? lod_from_list(t, obj, 1, "Tensor.set_recursive_sequence_lengths") : NULL;
}

static PyObject *tensor_has_valid_lod(TensorObject *self, PyObject *unused) {
    (void)unused;
    pe_tensor *t = tensor_get(self);
    if (!t) return NULL;
    return PyBool_FromLong(pe_tensor_check_lod(t, "tensor") == PE_OK);
}

static Py_ssize_t tensor_len(TensorObject *self) {
    pe_tensor *t = tensor_get(self);
    if (!t) return -1;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)t->dims[0];
}

static PyObject *tensor_repr(TensorObject *self) {
    pe_tensor *t = tensor_get(self);
    if (!t) {
        PyErr_Clear();
        return PyUnicode_FromString("<pe.Tensor (erased)>");
    }
    char dims[128], pl[32];
    pe_dims_str(t->ndim, t->dims, dims, sizeof dims);
    pe_place_str(t->place, pl, sizeof pl);
    return PyUnicode_FromFormat("<pe.Tensor %s%s%s%s %s on %s%s>", self->name ? "'" : "",
                                self->name ? PyUnicode_AsUTF8(self->name) : "", self->name ? "' " : "",
                                pe_dtype_name(t->dtype), t->buf ? dims : "(no data)", pl, t->lod ? " with LoD" : "");
}

static PyMethodDef tensor_methods[] = {
    {"set", (PyCFunction)(void (*)(void))tensor_set, METH_VARARGS | METH_KEYWORDS,
     "set(array, place=None): copy a numpy array (or Tensor) into this tensor on place."},
    {"numpy", (PyCFunction)(void (*)(void))tensor_numpy, METH_VARARGS | METH_KEYWORDS,
     "numpy(copy=True): the data as a numpy array (copy=False: a view when the tensor is owned and on the CPU)."},
    {"__array__", (PyCFunction)(void (*)(void))tensor_array, METH_VARARGS | METH_KEYWORDS, "numpy.array(tensor)."},
    {"shape", (PyCFunction)tensor_shape, METH_NOARGS, "dims as a list."},
    {"_dtype", (PyCFunction)tensor_dtype, METH_NOARGS, "dtype name."},
    {"dtype", (PyCFunction)tensor_dtype, METH_NOARGS, "dtype name."},
    {"_place", (PyCFunction)tensor_place, METH_NOARGS, "(kind, id)."},
    {"_is_initialized", (PyCFunction)tensor_is_initialized, METH_NOARGS, "whether it holds data."},
    {"_data_ptr", (PyCFunction)tensor_data_ptr, METH_NOARGS, "address of element 0 (tests of zero-copy)."},
    {"lod", (PyCFunction)tensor_lod, METH_NOARGS, "the LoD: per level, its offsets ([] when none)."},
    {"set_lod", (PyCFunction)tensor_set_lod, METH_O, "set_lod([[0, 2, 5]]): the LoD as offsets per level ([]: none)."},
    {"recursive_sequence_lengths", (PyCFunction)tensor_recursive_sequence_lengths, METH_NOARGS,
     "the LoD as sequence lengths per level ([] when none)."},
    {"set_recursive_sequence_lengths", (PyCFunction)tensor_set_recursive_sequence_lengths, METH_O,
     "set_recursive_sequence_lengths([[2, 3]]): the LoD as lengths per level."},
    {"has_valid_recursive_sequence_lengths", (PyCFunction)tensor_has_valid_lod, METH_NOARGS,
     "whether the LoD's last level covers the rows exactly (true without a LoD)."},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods tensor_as_seq = {.sq_length = (lenfunc)tensor_len};

PyTypeObject TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pe._core.Tensor",
    .tp_basicsize = sizeof(TensorObject),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_repr = (reprfunc)tensor_repr,
    .tp_as_sequence = &tensor_as_seq,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A PE tensor (Paddle's LoDTensor): set(ndarray, place), numpy.array(t), shape().",
    .tp_methods = tensor_methods,
    .tp_new = tensor_new,
};

/* ---- Variable (scope handle) ------------------------------------------ */

static void variable_dealloc(VariableObject *self) {
    Py_XDECREF(self->scope);
    Py_XDECREF(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *variable_get_tensor(VariableObject *self, PyObject *unused) {
    (void)unused;
    const char *n = PyUnicode_AsUTF8(self->name);
    if (!n) return NULL;
    if (!pe_scope_find_var(((ScopeObject *)self->scope)->s, n))
        return raise_msg(PE_ERR_NOT_FOUND, "variable '%s' is no longer in its scope (erased)", n);
    TensorObject *t = tensor_alloc();
    if (!t) return NULL;
    t->scope = self->scope;
    t->name = self->name;
    Py_INCREF(t->scope);
    Py_INCREF(t->name);
    return (PyObject *)t;
}

static PyObject *variable_is_initialized(VariableObject *self, PyObject *unused) {
    (void)unused;
    const char *n = PyUnicode_AsUTF8(self->name);
    if (!n) return NULL;
    pe_tensor *t = pe_scope_find_var(((ScopeObject *)self->scope)->s, n);
    return PyBool_FromLong(t && t->buf);
}

static PyObject *variable_get_name(VariableObject *self, void *c) {
    (void)c;
    Py_INCREF(self->name);
    return self->name;
}

static PyObject *variable_repr(VariableObject *self) {
    return PyUnicode_FromFormat("<pe scope variable '%U'>", self->name);
}

static PyMethodDef variable_methods[] = {
    {"get_tensor", (PyCFunction)variable_get_tensor, METH_NOARGS, "The variable's tensor."},
    {"is_initialized", (PyCFunction)variable_is_initialized, METH_NOARGS, "Whether it holds data."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef variable_getset[] = {{"name", (getter)variable_get_name, NULL, "var name", NULL},
                                        {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject VariableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pe._core.ScopeVariable",
    .tp_basicsize = sizeof(VariableObject),
    .tp_dealloc = (destructor)variable_dealloc,
    .tp_repr = (reprfunc)variable_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A variable of a scope (scope.find_var(name)); get_tensor() gives its tensor.",
    .tp_methods = variable_methods,
    .tp_getset = variable_getset,
};

PyObject *py_as_tensor(PyObject *m, PyObject *obj) {
    (void)m;
    if (PyObject_TypeCheck(obj, &TensorType)) {
        Py_INCREF(obj);
        return obj;
    }
    PyArrayObject *arr = pe_ready_array(obj, "as_tensor");
    if (!arr) return NULL;
    pe_tensor *t = wrap_array(arr);
    if (!t) {
        Py_DECREF(arr);
        return NULL;
    }
    TensorObject *r = tensor_from_owned(t, (PyObject *)arr);
    Py_DECREF(arr);
    return (PyObject *)r;
}

