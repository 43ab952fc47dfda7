/* bindings/python/pe/_core.c — pe._core, the CPython extension over PE's C API.
 *
 * What: thin wrappers for programs (pe_program, built from the JSON text the
 * Python layer writes), scopes, tensors, the single-place Executor, the
 * ParallelExecutor, the autodiff / optimizer / initializer passes,
 * checkpoints and the op registry; every engine failure becomes a pe.Error
 * subclass (one per pe_status) carrying pe_last_error()'s message.
 *
 * How: plain CPython C API (no pybind/cython), numpy C API for arrays.
 *   - numpy in: a C-contiguous, aligned, native-endian array with a PE dtype
 *     is wrapped without a copy (pe_buffer_wrap) by a tensor that keeps a
 *     reference to the array; anything else is converted once by numpy.
 *     Executors copy feeds into their scopes, so a wrapped feed is only read
 *     while the run lasts. Tensor.set() copies (as Paddle does): the scope
 *     must never alias memory Python may free.
 *   - numpy out: fetched tensors are owned by a Tensor object and handed out
 *     as numpy views whose base is that object (no copy, no dangling); a
 *     scope variable is copied (its buffer may change on the next run).
 *   - lifetimes: C objects that borrow others (executor -> program, scope;
 *     child scope -> parent; ParallelExecutor -> share_vars_from source)
 *     hold Python references to them, so they are freed in a safe order.
 *     A scope variable handle stores (scope, name) and looks the variable up
 *     on every use, so an erased variable is an error, never a dangling
 *     pointer. Erasing variables bumps a generation counter that makes the
 *     executors drop their prepared op contexts before the next run.
 *   - runs release the GIL; an executor refuses a second concurrent run.
 *
 * Files: this one (module, errors, conversions, registry), core_objects.c,
 * core_exec.c, core_passes.c, core_dist.c; shared declarations in _core.h.
 *
 * Why: the Python API (pe/static, pe/nn, ...) stays pure Python over this
 * small surface, and the numbers a Python user sees are the C engine's.
 */
#define PE_CORE_MAIN /* this file imports the numpy C API */
#include "_core.h"

#include <stdlib.h>
#include <string.h>

/* ---- errors ----------------------------------------------------------- */

static PyObject *g_error;                        /* pe.Error */
static PyObject *g_status_exc[PE_STATUS_COUNT];  /* per pe_status */

PyObject *raise_status(pe_status st) {
    if (st <= PE_OK || st >= PE_STATUS_COUNT) st = PE_ERR_INTERNAL;
    const char *msg = pe_last_error();
    if (!msg || !*msg) msg = pe_status_name(st);
    PyErr_SetString(g_status_exc[st], msg);
    return NULL;
}

PyObject *raise_msg(pe_status st, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    PyErr_SetString(g_status_exc[st], buf);
    return NULL;
}

uint64_t g_scope_gen;

/* ---- small helpers ---------------------------------------------------- */

const char *py_name_utf8(PyObject *o, const char *what) {
    if (!PyUnicode_Check(o)) return NULL;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s && strlen(s) != (size_t)n) {
        raise_msg(PE_ERR_INVALID, "%s '%s\\x00...' holds a NUL character: a name cannot (it would be cut short "
                  "at the NUL)", what, s);
        return NULL;
    }
    return s;
}

void strlist_free(strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    l->s = NULL;
    l->n = 0;
}

/* A sequence of str (or None = empty) copied into C strings; what names it
 * in errors. Returns 0 on success, -1 with an exception set. */
int strlist_from(PyObject *seq, const char *what, strlist *out) {
    out->s = NULL;
    out->n = 0;
    if (!seq || seq == Py_None) return 0;
    if (PyUnicode_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of str, not a str", what);
        return -1;
    }
    PyObject *fast = PySequence_Fast(seq, "");
    if (!fast) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of str", what);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    out->s = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!out->s) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(fast, i);
        const char *c = py_name_utf8(it, what);
        if (!c) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s[%zd] must be a str, not %.80s", what, i, Py_TYPE(it)->tp_name);
            }
            Py_DECREF(fast);
            strlist_free(out);
            return -1;
        }
        out->s[i] = strdup(c);
        out->n = (int)i + 1;
        if (!out->s[i]) {
            Py_DECREF(fast);
            strlist_free(out);
            PyErr_NoMemory();
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* Place from None (cpu:0), a (kind, id) tuple with kind 0/1 or "cpu"/"cuda",
 * or any object with a `_pe_place` attribute giving such a tuple. */
int parse_place(PyObject *o, pe_place *out) {
    *out = pe_place_cpu(0);
    if (!o || o == Py_None) return 0;
    PyObject *tup = NULL;
    if (PyTuple_Check(o)) {
        tup = o;
        Py_INCREF(tup);
    } else if (PyObject_HasAttrString(o, "_pe_place")) {
        tup = PyObject_GetAttrString(o, "_pe_place");
        if (!tup) return -1;
    }
    if (!tup || !PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != 2) {
        Py_XDECREF(tup);
        PyErr_Format(PyExc_TypeError, "place must be pe.CPUPlace(), pe.CUDAPlace(i) or a (kind, id) tuple, not %.80s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *k = PyTuple_GET_ITEM(tup, 0), *i = PyTuple_GET_ITEM(tup, 1);
    long kind = -1;
    if (PyUnicode_Check(k)) {
        const char *ks = PyUnicode_AsUTF8(k);
        if (ks && !strcmp(ks, "cpu")) kind = PE_PLACE_CPU;
        else if (ks && !strcmp(ks, "cuda")) kind = PE_PLACE_CUDA;
    } else if (PyLong_Check(k)) {
        kind = PyLong_AsLong(k);
    }
    long id = PyLong_Check(i) ? PyLong_AsLong(i) : -1;
    Py_DECREF(tup);
    if (kind != PE_PLACE_CPU && kind != PE_PLACE_CUDA) {
        PyErr_SetString(PyExc_ValueError, "place kind must be 'cpu' (0) or 'cuda' (1)");
        return -1;
    }
    if (id < 0 || id > 1 << 20) {
        PyErr_Format(PyExc_ValueError, "place id must be a non-negative int (got %ld)", id);
        return -1;
    }
    out->kind = (pe_place_kind)kind;
    out->id = (int)id;
    return 0;
}

PyObject *place_tuple(pe_place p) {
    return Py_BuildValue("(si)", p.kind == PE_PLACE_CUDA ? "cuda" : "cpu", p.id);
}

/* ---- dtypes ----------------------------------------------------------- */

int npy_from_pe(pe_dtype dt) {
    switch (dt) {
    case PE_DTYPE_FP32: return NPY_FLOAT32;
    case PE_DTYPE_FP64: return NPY_FLOAT64;
    case PE_DTYPE_INT32: return NPY_INT32;
    case PE_DTYPE_INT64: return NPY_INT64;
    case PE_DTYPE_UINT8: return NPY_UINT8;
    case PE_DTYPE_BOOL: return NPY_BOOL;
    case PE_DTYPE_FP16: return NPY_FLOAT16;
    default: return -1; /* bf16: no numpy type */
    }
}

int pe_from_npy(int t, pe_dtype *out) {
    switch (t) {
    case NPY_FLOAT32: *out = PE_DTYPE_FP32; return 0;
    case NPY_FLOAT64: *out = PE_DTYPE_FP64; return 0;
    case NPY_INT32: *out = PE_DTYPE_INT32; return 0;
    case NPY_INT64: *out = PE_DTYPE_INT64; return 0;
    case NPY_UINT8: *out = PE_DTYPE_UINT8; return 0;
    case NPY_BOOL: *out = PE_DTYPE_BOOL; return 0;
    case NPY_FLOAT16: *out = PE_DTYPE_FP16; return 0;
    default: break;
    }
    /* long / longlong / int share a size with int64 / int32 but may have
     * their own type numbers; map by size (no descriptor fields: numpy 2
     * hides them). */
    if (t == NPY_LONGLONG || t == NPY_LONG || t == NPY_INT) {
        size_t sz = t == NPY_LONGLONG ? sizeof(long long) : t == NPY_LONG ? sizeof(long) : sizeof(int);
        if (sz == 8 || sz == 4) {
            *out = sz == 8 ? PE_DTYPE_INT64 : PE_DTYPE_INT32;
            return 0;
        }
    }
    return -1;
}

/* An array for obj that PE can read in place: C-contiguous, aligned,
 * native byte order, PE dtype. The same array (new reference) when obj
 * already is one — the zero-copy path — else one numpy conversion. */
PyArrayObject *pe_ready_array(PyObject *obj, const char *what) {
    PyArrayObject *arr = (PyArrayObject *)PyArray_FROM_OF(obj, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED |
                                                               NPY_ARRAY_NOTSWAPPED);
    if (!arr) return NULL;
    pe_dtype dt;
    if (pe_from_npy(PyArray_TYPE(arr), &dt) != 0) {
        PyObject *s = PyObject_Str((PyObject *)PyArray_DESCR(arr));
        raise_msg(PE_ERR_INVALID, "%s: numpy dtype %s has no PE dtype (use float32, float64, int32, int64, uint8, bool or float16)",
                  what, s ? PyUnicode_AsUTF8(s) : "?");
        Py_XDECREF(s);
        Py_DECREF(arr);
        return NULL;
    }
    if (PyArray_NDIM(arr) > PE_MAX_DIMS) {
        raise_msg(PE_ERR_INVALID, "%s: %d dimensions, PE tensors have at most %d", what, PyArray_NDIM(arr), PE_MAX_DIMS);
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* A caller-owned CPU tensor reading arr's memory in place (arr must stay
 * alive as long as the tensor). NULL + exception on failure. */
pe_tensor *wrap_array(PyArrayObject *arr) {
    pe_dtype dt;
    pe_from_npy(PyArray_TYPE(arr), &dt);
    int64_t dims[PE_MAX_DIMS];
    int nd = PyArray_NDIM(arr);
    for (int i = 0; i < nd; i++) dims[i] = (int64_t)PyArray_DIM(arr, i);
    pe_tensor *t = pe_tensor_new();
    if (!t) return (pe_tensor *)raise_status(PE_ERR_NOMEM);
    pe_status st = pe_tensor_set_meta(t, dt, nd, dims);
    if (st != PE_OK) {
        pe_tensor_free(t);
        return (pe_tensor *)raise_status(st);
    }
    t->place = pe_place_cpu(0);
    t->buf = pe_buffer_wrap(pe_place_cpu(0), PyArray_DATA(arr), (size_t)PyArray_NBYTES(arr));
    t->offset = 0;
    if (!t->buf) {
        pe_tensor_free(t);
        return (pe_tensor *)raise_status(PE_ERR_NOMEM);
    }
    return t;
}

/* New numpy array holding a copy of t (copied to the CPU first if needed). */
PyObject *tensor_copy_to_numpy(const pe_tensor *t, const char *what) {
    int typenum = npy_from_pe(t->dtype);
    if (typenum < 0)
        return raise_msg(PE_ERR_UNSUPPORTED, "%s: dtype %s has no numpy equivalent", what, pe_dtype_name(t->dtype));
    if (!t->buf && pe_tensor_numel(t) != 0)
        return raise_msg(PE_ERR_INVALID, "%s holds no data (not initialized: run the startup program or set it first)",
                         what);
    npy_intp dims[PE_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) dims[i] = (npy_intp)t->dims[i];
    PyObject *arr = PyArray_SimpleNew(t->ndim, dims, typenum);
    if (!arr) return NULL;
    size_t nbytes = pe_tensor_nbytes(t);
    if (nbytes) {
        pe_status st = pe_memcpy_places(PyArray_DATA((PyArrayObject *)arr), pe_place_cpu(0), pe_tensor_data(t),
                                        t->place, nbytes);
        if (st != PE_OK) {
            Py_DECREF(arr);
            return raise_status(st);
        }
    }
    return arr;
}

/* ---- registry and runtime facts --------------------------------------- */

PyObject *attr_to_py(const pe_attr *a) {
    switch (a->type) {
    case PE_ATTR_INT: case PE_ATTR_LONG: case PE_ATTR_BLOCK: return PyLong_FromLongLong(a->i);
    case PE_ATTR_BOOL: return PyBool_FromLong(a->i != 0);
    case PE_ATTR_FLOAT: return PyFloat_FromDouble(a->f);
    case PE_ATTR_STRING: return PyUnicode_FromString(a->s ? a->s : "");
    case PE_ATTR_INTS: case PE_ATTR_LONGS: case PE_ATTR_BOOLS: {
        PyObject *l = PyList_New(a->n);
        for (int i = 0; l && i < a->n; i++)
            PyList_SET_ITEM(l, i, a->type == PE_ATTR_BOOLS ? PyBool_FromLong(a->ints[i] != 0) : PyLong_FromLongLong(a->ints[i]));
        return l;
    }
    case PE_ATTR_FLOATS: {
        PyObject *l = PyList_New(a->n);
        for (int i = 0; l && i < a->n; i++) PyList_SET_ITEM(l, i, PyFloat_FromDouble(a->floats[i]));
        return l;
    }
    case PE_ATTR_STRINGS: {
        PyObject *l = PyList_New(a->n);
        for (int i = 0; l && i < a->n; i++) PyList_SET_ITEM(l, i, PyUnicode_FromString(a->strings[i]));
        return l;
    }
    default: Py_RETURN_NONE;
    }
}

static PyObject *slots_list(int op, bool inputs, int n) {
    static const char *const arity[] = {"one", "optional", "many", "any"};
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        pe_op_slot_desc s = {"", PE_SLOT_ONE};
        if (inputs) pe_op_type_input(op, i, &s);
        else pe_op_type_output(op, i, &s);
        PyObject *t = Py_BuildValue("(ss)", s.name, arity[s.arity & 3]);
        if (!t) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, t);
    }
    return l;
}

/* {type: {"inputs": [(slot, arity)], "outputs": [...], "attrs": {name: (type, required, default)},
 *         "has_grad": bool, "cpu": bool, "cuda": bool}} */
static PyObject *py_op_registry(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    int n = pe_op_type_count();
    for (int i = 0; i < n; i++) {
        pe_op_desc info;
        if (!pe_op_type_get(i, &info)) continue;
        PyObject *attrs = PyDict_New();
        for (int k = 0; attrs && k < info.n_attrs; k++) {
            pe_op_attr_desc a;
            if (!pe_op_type_attr(i, k, &a)) continue;
            PyObject *def = a.required ? (Py_INCREF(Py_None), Py_None) : attr_to_py(a.def);
            PyObject *t = def ? Py_BuildValue("(sON)", pe_attr_type_name(a.type), a.required ? Py_True : Py_False, def)
                              : NULL;
            if (!t || PyDict_SetItemString(attrs, a.name, t)) Py_CLEAR(attrs);
            Py_XDECREF(t);
        }
        PyObject *e = attrs ? Py_BuildValue("{sNsNsNsOsOsO}", "inputs", slots_list(i, true, info.n_inputs),
                                            "outputs", slots_list(i, false, info.n_outputs), "attrs", attrs,
                                            "has_grad", info.has_grad ? Py_True : Py_False,
                                            "cpu", info.has_cpu_kernel ? Py_True : Py_False,
                                            "cuda", info.has_cuda_kernel ? Py_True : Py_False)
                            : NULL;
        if (!e || PyDict_SetItemString(d, info.name, e)) {
            Py_XDECREF(e);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(e);
    }
    return d;
}

static PyObject *py_common_attrs(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    static const char *const names[] = {"op_role", "op_role_var", "op_namescope", "op_callstack", "op_device",
                                        "is_test", "use_mkldnn", "use_cudnn", "with_quant_attr", NULL};
    PyObject *d = PyDict_New();
    for (int i = 0; d && names[i]; i++) {
        pe_op_attr_desc a;
        if (!pe_op_common_attr(names[i], &a)) continue;
        PyObject *t = PyUnicode_FromString(pe_attr_type_name(a.type));
        if (!t || PyDict_SetItemString(d, names[i], t)) Py_CLEAR(d);
        Py_XDECREF(t);
    }
    return d;
}

static PyObject *py_cpu_place_count(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    int n = pe_cpu_place_count();
    if (n < 0) return raise_status(PE_ERR_INVALID);
    return PyLong_FromLong(n);
}

static PyObject *py_cuda_device_count(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
#ifdef PE_WITH_CUDA
    return PyLong_FromLong(pe_cuda_device_count());
#else
    return PyLong_FromLong(0);
#endif
}

static PyObject *py_with_cuda(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
#ifdef PE_WITH_CUDA
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject *py_alloc_stats(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *place_o = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &place_o)) return NULL;
    pe_place p;
    if (parse_place(place_o, &p)) return NULL;
    pe_alloc_stats s = pe_alloc_get_stats(p);
    return Py_BuildValue("{sLsLsLsL}", "bytes_in_use", (long long)s.bytes_in_use, "peak_bytes", (long long)s.peak_bytes,
                         "n_allocs", (long long)s.n_allocs, "n_frees", (long long)s.n_frees);
}

static PyObject *py_set_log_level(PyObject *m, PyObject *arg) {
    (void)m;
    const char *s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; s && i < 4; i++)
        if (!strcmp(s, names[i])) {
            pe_log_set_level((pe_log_level)i);
            Py_RETURN_NONE;
        }
    return raise_msg(PE_ERR_INVALID, "set_log_level: level must be error, warn, info or debug");
}

static PyObject *py_dtype_size(PyObject *m, PyObject *arg) {
    (void)m;
    const char *s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    pe_dtype dt;
    if (!s || !pe_dtype_from_name(s, &dt)) return raise_msg(PE_ERR_INVALID, "unknown dtype name");
    return PyLong_FromSize_t(pe_dtype_size(dt));
}

static PyObject *py_last_error(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyUnicode_FromString(pe_last_error());
}

static PyMethodDef module_methods[] = {
    {"load_program", py_load_program, METH_VARARGS, "load_program(path) -> Program (.pe or .json, verified)."},
    {"as_tensor", py_as_tensor, METH_O, "as_tensor(array) -> Tensor reading the array in place when its layout allows."},
    {"append_backward", (PyCFunction)(void (*)(void))py_append_backward, METH_VARARGS | METH_KEYWORDS,
     "append_backward(program, loss, params=None, no_grad=None) -> [(param, grad)]; edits program."},
    {"gradients", (PyCFunction)(void (*)(void))py_gradients, METH_VARARGS | METH_KEYWORDS,
     "gradients(program, targets, inputs) -> [grad name or None]; edits program."},
    {"minimize", (PyCFunction)(void (*)(void))py_minimize, METH_VARARGS | METH_KEYWORDS,
     "minimize(main, startup, loss, kind='sgd', learning_rate=0.01, ...) -> [(param, grad)]; edits both programs."},
    {"startup_init_var", (PyCFunction)(void (*)(void))py_startup_init_var, METH_VARARGS | METH_KEYWORDS,
     "startup_init_var(startup, name, dtype, dims, kind, ...): declare and initialize a var in a startup program."},
    {"checkpoint_save", py_checkpoint_save, METH_VARARGS, "checkpoint_save(path, program, scope)."},
    {"checkpoint_load", py_checkpoint_load, METH_VARARGS, "checkpoint_load(path, program, scope[, ignore_extra]): ignore_extra skips tensors that are not persistables of the program."},
    {"safetensors_read", py_safetensors_read, METH_VARARGS, "safetensors_read(path, scope, key=None) -> the metadata value of key or None."},
    {"safetensors_write", py_safetensors_write, METH_VARARGS, "safetensors_write(path, scope, names, meta=[key, value, ...])."},
    {"op_registry", py_op_registry, METH_NOARGS, "Every registered op type with its slots and attrs."},
    {"common_attrs", py_common_attrs, METH_NOARGS, "Attrs every op may carry, with their types."},
    {"cpu_place_count", py_cpu_place_count, METH_NOARGS, "CPU_NUM (default 1)."},
    {"strategy_defaults", py_strategy_defaults, METH_NOARGS,
     "strategy_defaults() -> (exec_strategy dict, build_strategy dict): pe_pe_options_default's values of every "
     "strategy field (enums by name)."},
    {"strategy_refused", py_strategy_refused, METH_NOARGS,
     "strategy_refused() -> (exec dict, build dict), name -> (default, why): Paddle's switches PE refuses."},
    {"fuse_program", (PyCFunction)(void (*)(void))py_fuse_program, METH_VARARGS | METH_KEYWORDS,
     "fuse_program(program, build_strategy=None, protect=None) -> (Program, [(pass, n_fused)]): the "
     "program-level passes (fusions) the build strategy dict switches on, on a copy."},
    {"check_strategy", (PyCFunction)(void (*)(void))pe_check_strategy, METH_VARARGS | METH_KEYWORDS,
     "check_strategy(exec_strategy=None, build_strategy=None): raise InvalidArgumentError for a value out of "
     "range (the strategy setters' check)."},
    {"cuda_device_count", py_cuda_device_count, METH_NOARGS, "Visible CUDA devices (0 without CUDA)."},
    {"with_cuda", py_with_cuda, METH_NOARGS, "Whether PE was built with CUDA."},
    {"alloc_stats", py_alloc_stats, METH_VARARGS, "alloc_stats(place=None) -> dict of allocator counters."},
    {"set_log_level", py_set_log_level, METH_O, "set_log_level('error'|'warn'|'info'|'debug')."},
    {"dtype_size", py_dtype_size, METH_O, "dtype_size(name) -> bytes per element."},
    {"last_error", py_last_error, METH_NOARGS, "pe_last_error() of this thread."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef core_module = {PyModuleDef_HEAD_INIT, "pe._core",
                                         "C extension over PE's C API (see pe/_core.c).", -1, module_methods,
                                         NULL, NULL, NULL, NULL};

static int add_exceptions(PyObject *m) {
    g_error = PyErr_NewExceptionWithDoc("pe.Error", "Base class of every PE engine error.", PyExc_Exception, NULL);
    if (!g_error || PyModule_AddObjectRef(m, "Error", g_error)) return -1;
    static const struct {
        pe_status st;
        const char *name;
        PyObject **extra;
        const char *doc;
    } table[] = {
        {PE_ERR_INVALID, "InvalidArgumentError", &PyExc_ValueError, "Bad argument, program or feed."},
        {PE_ERR_NOT_FOUND, "NotFoundError", &PyExc_LookupError, "Missing variable, file or op type."},
        {PE_ERR_IO, "IOError", &PyExc_OSError, "Read or write failure."},
        {PE_ERR_FORMAT, "FormatError", &PyExc_ValueError, "Corrupt or unsupported file content."},
        {PE_ERR_NOMEM, "ResourceExhaustedError", &PyExc_MemoryError, "Allocation failure."},
        {PE_ERR_UNSUPPORTED, "UnsupportedError", &PyExc_NotImplementedError, "Valid request this build cannot serve."},
        {PE_ERR_DEVICE, "DeviceError", &PyExc_RuntimeError, "CUDA / oneDNN / BLAS runtime failure."},
        {PE_ERR_CANCELLED, "CancelledError", &PyExc_RuntimeError, "Run cancelled: another place failed, or pe_interrupt() (a run interrupted by Ctrl-C raises KeyboardInterrupt instead)."},
        {PE_ERR_INTERNAL, "InternalError", &PyExc_RuntimeError, "Invariant broken: a bug in PE."},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        char full[96];
        snprintf(full, sizeof full, "pe.%s", table[i].name);
        PyObject *bases = PyTuple_Pack(2, g_error, *table[i].extra);
        PyObject *dict = Py_BuildValue("{ss}", "status", pe_status_name(table[i].st));
        PyObject *e = bases && dict ? PyErr_NewExceptionWithDoc(full, table[i].doc, bases, dict) : NULL;
        Py_XDECREF(bases);
        Py_XDECREF(dict);
        if (!e || PyModule_AddObjectRef(m, table[i].name, e)) {
            Py_XDECREF(e);
            return -1;
        }
        g_status_exc[table[i].st] = e; /* the module keeps a reference */
        Py_DECREF(e);
    }
    g_status_exc[PE_OK] = g_status_exc[PE_ERR_INTERNAL];
    return 0;
}

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    PyObject *m = PyModule_Create(&core_module);
    if (!m) return NULL;
    if (add_exceptions(m)) goto fail;
    PyTypeObject *types[] = {&ProgramType, &ScopeType, &TensorType, &VariableType, &ExecutorType, &PEType};
    const char *names[] = {"Program", "Scope", "Tensor", "ScopeVariable", "Executor", "ParallelExecutor"};
    for (int i = 0; i < 6; i++) {
        if (PyType_Ready(types[i]) < 0) goto fail;
        if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i])) goto fail;
    }
    if (PyModule_AddStringConstant(m, "version", PE_VERSION_STRING)) goto fail;
    if (PyModule_AddFunctions(m, g_world_methods)) goto fail;
    if (PyModule_AddFunctions(m, g_eager_methods)) goto fail;
    if (PyModule_AddFunctions(m, g_eager_fast_methods)) goto fail;
    for (int i = 0; i < 2; i++) {
        if (PyType_Ready(g_eager_types[i]) < 0) goto fail;
        if (PyModule_AddObjectRef(m, g_eager_type_names[i], (PyObject *)g_eager_types[i])) goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

