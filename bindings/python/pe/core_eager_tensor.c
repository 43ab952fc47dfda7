/* bindings/python/pe/core_eager_tensor.c — the eager fast path:
 * _core.EagerTensor (the C base of pe.eager.Tensor) and _core.EagerOp (a
 * prepared op, pe_eager_prepare, callable on eager tensors).
 *
 * What: an eager op used to be Python all the way down to _core.eager_run
 * (wrappers, a dict of slots, a dict of attrs converted by name on every
 * call, the Tensor made by a Python __init__): ~35,000 instructions for
 * `a + b` on [1] tensors, 4-5x PyTorch's whole op. Here the tensor's
 * fields live in a C struct, the operators + - * / @ are the type's number
 * slots, and an EagerOp holds its op's slot layout and attrs resolved once,
 * so `a + b` is one C call: read the two tensors, run the prepared op
 * (infer, allocate, kernel: the static engine's path), make the result.
 *
 * How: everything that is not the plain case goes back to Python, where the
 * rules live (pe/eager/autograd.py and functional.py):
 *   - an argument that is not an eager tensor (a number, a numpy array,
 *     None), a pe.jit trace in progress, or an op that fails (the Python
 *     path runs it again to raise the error naming the tensors): the
 *     EagerOp's fallback (the op's Python form, `hooks["call"]`), or for an
 *     operator its Python form (`hooks["add"]`, `hooks["radd"]`, ...);
 *   - an input that needs a gradient (stop_gradient False, outside
 *     pe.no_grad()): the op runs here and `hooks["record"]`(op, inputs,
 *     outputs) puts it on the tape (autograd._record_prepared, as run_op
 *     records; the op's `cache` dict keeps its grad entries per signature).
 * The switches pe.no_grad() and pe.jit set are per thread, mirrored here
 * by _core.eager_mode(grad, tracing); the place is framework._eager_place,
 * read on each call (and parsed again only when it changed).
 *
 * Why here: the per-op cost of eager mode is the Python around the kernel;
 * the kernels, infer and the registry stay the static engine's
 * (pe_eager_run_prepared), so results are the same bits.
 */
#include "_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the per-thread switches and the hooks ----------------------------------- */

static _Thread_local int t_grad_off; /* inside pe.no_grad() */
static _Thread_local int t_tracing;  /* a pe.jit trace records this thread's ops */

static PyTypeObject *g_tensor_cls;   /* pe.eager.Tensor: the type of the tensors made here */
static PyObject *g_fw_dict;          /* pe.framework's globals: _eager_place */
static PyObject *g_place_key;        /* "_eager_place" */
static PyObject *g_hooks;            /* {"record": f, "call": f, "add": f, "radd": f, ...} */
static PyObject *g_place_obj;        /* the last _eager_place parsed ... */
static pe_place g_place;             /* ... and its place */
static unsigned long long g_name_seq;

static PyObject *hook(const char *name) {
    PyObject *f = g_hooks ? PyDict_GetItemString(g_hooks, name) : NULL;
    if (!f) raise_msg(PE_ERR_INTERNAL, "eager: hook '%s' is not installed (pe.eager not imported?)", name);
    return f;
}

static int current_place(pe_place *out) {
    PyObject *o = g_fw_dict ? PyDict_GetItemWithError(g_fw_dict, g_place_key) : NULL;
    if (!o && PyErr_Occurred()) return -1;
    if (!o) o = Py_None;
    if (o != g_place_obj) {
        pe_place p;
        if (parse_place(o, &p)) return -1;
        Py_INCREF(o);
        Py_XSETREF(g_place_obj, o);
        g_place = p;
    }
    *out = g_place;
    return 0;
}

static PyObject *py_eager_mode(PyObject *m, PyObject *args) {
    (void)m;
    int grad, tracing;
    if (!PyArg_ParseTuple(args, "pp", &grad, &tracing)) return NULL;
    t_grad_off = !grad;
    t_tracing = tracing;
    Py_RETURN_NONE;
}

/* ---- EagerTensor ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *t;       /* the value: a _core.Tensor */
    PyObject *grad;    /* NULL = None */
    PyObject *name;    /* NULL until asked: "eager_tmp_<k>" then */
    PyObject *node;    /* the tape node that made it (NULL = None: a leaf) */
    PyObject *slot;    /* the node's name for it ("o<k>") */
    Py_ssize_t version;
    char stop_gradient;
} EagerTensorObject;

static PyTypeObject EagerTensorType;

static int et_traverse(EagerTensorObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->t);
    Py_VISIT(self->grad);
    Py_VISIT(self->name);
    Py_VISIT(self->node);
    Py_VISIT(self->slot);
    return 0;
}

static int et_clear(EagerTensorObject *self) {
    Py_CLEAR(self->t);
    Py_CLEAR(self->grad);
    Py_CLEAR(self->name);
    Py_CLEAR(self->node);
    Py_CLEAR(self->slot);
    return 0;
}

static void et_dealloc(EagerTensorObject *self) {
    PyObject_GC_UnTrack(self);
    et_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self); /* a subclass's type reference is subtype_dealloc's */
}

static int et_set_value(EagerTensorObject *self, PyObject *v, void *closure) {
    (void)closure;
    if (!v || !PyObject_TypeCheck(v, &TensorType)) {
        PyErr_SetString(PyExc_TypeError, "pe.eager.Tensor wraps a pe._core.Tensor; use pe.to_tensor(data) to make one");
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(self->t, v);
    return 0;
}

static PyObject *et_get_value(EagerTensorObject *self, void *closure) {
    (void)closure;
    if (!self->t) return raise_msg(PE_ERR_INTERNAL, "eager tensor without a value");
    return Py_NewRef(self->t);
}

static int et_init(EagerTensorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"value", "stop_gradient", "name", "_node", "_slot", NULL};
    PyObject *value, *sg = Py_True, *name = Py_None, *node = Py_None, *slot = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOOO", kwlist, &value, &sg, &name, &node, &slot)) return -1;
    if (et_set_value(self, value, NULL)) return -1;
    int b = PyObject_IsTrue(sg);
    if (b < 0) return -1;
    self->stop_gradient = (char)b;
    Py_CLEAR(self->grad);
    Py_XSETREF(self->name, PyObject_IsTrue(name) == 1 ? Py_NewRef(name) : NULL);
    Py_XSETREF(self->node, node == Py_None ? NULL : Py_NewRef(node));
    Py_XSETREF(self->slot, slot == Py_None ? NULL : Py_NewRef(slot));
    return 0;
}

static PyObject *opt_get(PyObject *o) { return Py_NewRef(o ? o : Py_None); }

static int opt_set(PyObject **field, PyObject *v) {
    Py_XSETREF(*field, v && v != Py_None ? Py_NewRef(v) : NULL);
    return 0;
}

static PyObject *et_get_grad(EagerTensorObject *s, void *c) { (void)c; return opt_get(s->grad); }
/* "[2, 3] float32 on cpu:0" into buf. */
static const char *tensor_desc(const pe_tensor *t, char *buf, size_t n) {
    char dims[128], pl[32];
    snprintf(buf, n, "%s %s on %s", pe_dims_str(t->ndim, t->dims, dims, sizeof dims), pe_dtype_name(t->dtype),
             pe_place_str(t->place, pl, sizeof pl));
    return buf;
}

/* .grad: None, or a Tensor of this tensor's shape, dtype and place — what
 * the optimizers and DataParallel read. Anything else is refused here, as
 * PyTorch does, naming both, rather than at the next step. */
static int et_set_grad(EagerTensorObject *s, PyObject *v, void *c) {
    (void)c;
    if (v && v != Py_None) {
        if (!PyObject_TypeCheck(v, &EagerTensorType)) {
            PyErr_Format(PyExc_TypeError, "Tensor.grad must be a Tensor or None, not %s", Py_TYPE(v)->tp_name);
            return -1;
        }
        const pe_tensor *t = s->t ? tensor_get((TensorObject *)s->t) : NULL;
        const EagerTensorObject *gv = (const EagerTensorObject *)v;
        const pe_tensor *g = gv->t ? tensor_get((TensorObject *)gv->t) : NULL;
        if (t && g && (t->dtype != g->dtype || !pe_place_eq(t->place, g->place) || t->ndim != g->ndim ||
                       memcmp(t->dims, g->dims, sizeof(int64_t) * (size_t)t->ndim))) {
            char a[160], b[160];
            tensor_desc(g, b, sizeof b);
            tensor_desc(t, a, sizeof a);
            if (s->name)
                PyErr_Format(PyExc_ValueError, "Tensor.grad of '%S': the gradient assigned is %s, the tensor %s",
                             s->name, b, a);
            else
                PyErr_Format(PyExc_ValueError, "Tensor.grad: the gradient assigned is %s, the tensor %s", b, a);
            return -1;
        }
    }
    return opt_set(&s->grad, v);
}
static PyObject *et_get_node(EagerTensorObject *s, void *c) { (void)c; return opt_get(s->node); }
static int et_set_node(EagerTensorObject *s, PyObject *v, void *c) { (void)c; return opt_set(&s->node, v); }
static PyObject *et_get_slot(EagerTensorObject *s, void *c) { (void)c; return opt_get(s->slot); }
static int et_set_slot(EagerTensorObject *s, PyObject *v, void *c) { (void)c; return opt_set(&s->slot, v); }

static PyObject *et_get_name(EagerTensorObject *self, void *c) {
    (void)c;
    if (!self->name) self->name = PyUnicode_FromFormat("eager_tmp_%llu", g_name_seq++);
    return self->name ? Py_NewRef(self->name) : NULL;
}

static int et_set_name(EagerTensorObject *self, PyObject *v, void *c) {
    (void)c;
    if (v && v != Py_None && !PyUnicode_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "Tensor.name must be a str");
        return -1;
    }
    return opt_set(&self->name, v);
}

static PyObject *et_get_sg(EagerTensorObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->stop_gradient);
}

static int et_set_sg(EagerTensorObject *self, PyObject *v, void *c) {
    (void)c;
    int b = v ? PyObject_IsTrue(v) : -1;
    if (b < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "stop_gradient cannot be deleted");
        return -1;
    }
    self->stop_gradient = (char)b;
    return 0;
}

static PyObject *et_get_version(EagerTensorObject *self, void *c) {
    (void)c;
    return PyLong_FromSsize_t(self->version);
}

static int et_set_version(EagerTensorObject *self, PyObject *v, void *c) {
    (void)c;
    Py_ssize_t x = v ? PyLong_AsSsize_t(v) : -1;
    if (x == -1 && (!v || PyErr_Occurred())) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_version cannot be deleted");
        return -1;
    }
    self->version = x;
    return 0;
}

static PyGetSetDef et_getset[] = {
    {"_t", (getter)et_get_value, (setter)et_set_value, "the value (a pe._core.Tensor)", NULL},
    {"grad", (getter)et_get_grad, (setter)et_set_grad, "the accumulated gradient (a Tensor) or None", NULL},
    {"name", (getter)et_get_name, (setter)et_set_name, "the tensor's name (eager_tmp_<k> unless given)", NULL},
    {"stop_gradient", (getter)et_get_sg, (setter)et_set_sg, "True: no gradient flows to this tensor", NULL},
    {"_node", (getter)et_get_node, (setter)et_set_node, "the tape node that made it (None: a leaf)", NULL},
    {"_slot", (getter)et_get_slot, (setter)et_set_slot, "the node's name for this output", NULL},
    {"_version", (getter)et_get_version, (setter)et_set_version,
     "bumped by every in-place update of the value (an optimizer step); the tape checks it", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* A new tensor of pe.eager.Tensor's type holding raw (a new reference, taken). */
static PyObject *et_make(PyObject *raw, int stop_gradient) {
    EagerTensorObject *o = (EagerTensorObject *)g_tensor_cls->tp_alloc(g_tensor_cls, 0);
    if (!o) {
        Py_DECREF(raw);
        return NULL;
    }
    o->t = raw;
    o->stop_gradient = (char)stop_gradient;
    return (PyObject *)o;
}

static pe_tensor *et_raw(PyObject *o) {
    EagerTensorObject *e = (EagerTensorObject *)o;
    if (!e->t) return (pe_tensor *)raise_msg(PE_ERR_INTERNAL, "eager tensor without a value");
    return tensor_get((TensorObject *)e->t);
}

static int is_float(pe_dtype dt) {
    return dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 || dt == PE_DTYPE_FP16 || dt == PE_DTYPE_BF16;
}

/* ---- EagerOp ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    pe_eager_prep *prep;
    int n_in, n_out;          /* args */
    char *present;            /* per output arg: made (1) or absent (0) */
    PyObject *desc;           /* (op_type, [(slot, n)], [(slot, n | [present])], attrs): for the Python paths */
    PyObject *api;            /* str or NULL: non-tensor args (None too) raise TypeError("<api>: <arg> must be ...") */
    PyObject *argnames;       /* tuple of str, with api */
    PyObject *cache;          /* a dict for the Python side (the tape's entries per signature) */
    vectorcallfunc vectorcall;
} EagerOpObject;

static PyTypeObject EagerOpType;

enum { MAX_LAYOUT_SLOTS = 32 }; /* more than any op has: pe_eager_prepare checks the op's own count */

static void op_dealloc(EagerOpObject *self) {
    pe_eager_prep_free(self->prep);
    free(self->present);
    Py_XDECREF(self->desc);
    Py_XDECREF(self->api);
    Py_XDECREF(self->argnames);
    Py_XDECREF(self->cache);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* [(slot, n | [present])] -> args (t NULL: a layout); n_args; present flags (outputs). */
static int layout_from_py(PyObject *seq, const char *what, pe_eager_args *a, int *n_slots, int *n_args,
                          char **present) {
    PyObject *f = PySequence_Fast(seq, what);
    if (!f) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
    int rc = 0;
    if (n > MAX_LAYOUT_SLOTS) {
        raise_msg(PE_ERR_INVALID, "EagerOp: %zd %s slots (at most %d)", n, what[0] == 'i' ? "input" : "output",
                  MAX_LAYOUT_SLOTS);
        rc = -1;
    }
    *n_args = 0;
    for (Py_ssize_t i = 0; !rc && i < n; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(f, i);
        PyObject *c = PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 2 ? PyTuple_GET_ITEM(e, 1) : NULL;
        const char *slot = c ? py_name_utf8(PyTuple_GET_ITEM(e, 0), "slot") : NULL;
        long cnt = !slot ? -1 : PyList_Check(c) ? (long)PyList_GET_SIZE(c) : PyLong_AsLong(c);
        if (!slot || cnt < 0 || cnt > 4096) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                raise_msg(PE_ERR_INVALID, "EagerOp: %s must be (slot, count or [present]) tuples", what);
            }
            rc = -1;
            break;
        }
        a[i] = (pe_eager_args){slot, (int)cnt, NULL, NULL};
        if (present) {
            char *p = realloc(*present, (size_t)(*n_args + cnt + 1));
            if (!p) {
                PyErr_NoMemory();
                rc = -1;
                break;
            }
            *present = p;
            for (long k = 0; k < cnt; k++) {
                int on = PyList_Check(c) ? PyObject_IsTrue(PyList_GET_ITEM(c, k)) : 1;
                if (on < 0) rc = -1;
                p[*n_args + k] = (char)(on > 0);
            }
        }
        *n_args += (int)cnt;
    }
    *n_slots = (int)n;
    Py_DECREF(f);
    return rc;
}

/* EagerOp(op_type, inputs [(slot, n)], outputs [(slot, n | [present])], attrs=None, api=None, argnames=()) */
static PyObject *op_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

static PyObject *op_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"op_type", "inputs", "outputs", "attrs", "api", "argnames", NULL};
    PyObject *op_type, *ins_o, *outs_o, *attrs_o = Py_None, *api = Py_None, *argnames = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "UOO|OOO", kwlist, &op_type, &ins_o, &outs_o, &attrs_o, &api,
                                     &argnames))
        return NULL;
    const char *tname = py_name_utf8(op_type, "op type");
    int op = tname ? pe_op_type_find(tname) : -1;
    if (op < 0)
        return PyErr_Occurred() ? NULL : raise_msg(PE_ERR_NOT_FOUND, "unknown op type '%s' (not in ops/ops.def)", tname);
    EagerOpObject *self = (EagerOpObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->vectorcall = op_vectorcall;
    pe_eager_args ins[MAX_LAYOUT_SLOTS], outs[MAX_LAYOUT_SLOTS];
    int n_ins = 0, n_outs = 0;
    attr_buf ab = {0};
    if (layout_from_py(ins_o, "inputs", ins, &n_ins, &self->n_in, NULL) ||
        layout_from_py(outs_o, "outputs", outs, &n_outs, &self->n_out, &self->present) ||
        attrs_from_py(op, attrs_o, &ab))
        goto fail;
    pe_status st = pe_eager_prepare(op, ins, n_ins, outs, n_outs, ab.a, ab.n, &self->prep);
    attr_buf_free(&ab);
    if (st != PE_OK) {
        raise_status(st);
        goto fail;
    }
    if (!self->present && !(self->present = calloc(1, 1))) {
        PyErr_NoMemory();
        goto fail;
    }
    self->desc = Py_BuildValue("(OOOO)", op_type, ins_o, outs_o, attrs_o == Py_None ? Py_None : attrs_o);
    self->cache = PyDict_New();
    if (!self->desc || !self->cache) goto fail;
    if (api != Py_None) {
        if (!PyUnicode_Check(api) || !argnames || !PyTuple_Check(argnames) ||
            PyTuple_GET_SIZE(argnames) != self->n_in) {
            raise_msg(PE_ERR_INVALID, "EagerOp %s: api must be a str with a tuple of %d argnames", tname, self->n_in);
            goto fail;
        }
        self->api = Py_NewRef(api);
        self->argnames = Py_NewRef(argnames);
    }
    return (PyObject *)self;
fail:
    attr_buf_free(&ab);
    Py_DECREF(self);
    return NULL;
}

enum { MAX_ARGS = 64 };

/* Runs the prepared op on raw inputs; outs[k] get fresh tensors (NULL where
 * absent). 0, or -1 with the error left in pe_last_error() (*st). */
static int op_run_raw(EagerOpObject *self, pe_tensor *const *in, pe_tensor **outs, pe_place place, pe_status *st) {
    for (int k = 0; k < self->n_out; k++) {
        outs[k] = self->present[k] ? pe_tensor_new() : NULL;
        if (self->present[k] && !outs[k]) {
            for (int j = 0; j < k; j++) pe_tensor_free(outs[j]);
            *st = pe_error(PE_ERR_NOMEM, "op %s: out of memory", pe_eager_prep_op(self->prep));
            return -1;
        }
    }
    int64_t numel = 0;
    for (int k = 0; k < self->n_in; k++)
        if (in[k]) numel += pe_tensor_numel(in[k]);
    if (numel >= 16384 || place.kind != PE_PLACE_CPU) { /* let other threads run during a real kernel */
        Py_BEGIN_ALLOW_THREADS
        *st = pe_eager_run_prepared(self->prep, in, outs, place, 0, 0);
        Py_END_ALLOW_THREADS
    } else {
        *st = pe_eager_run_prepared(self->prep, in, outs, place, 0, 0);
    }
    if (*st == PE_OK) return 0;
    for (int k = 0; k < self->n_out; k++) pe_tensor_free(outs[k]);
    return -1;
}

/* The Python form of the call: hooks["call"](desc, args) (run_op). */
static PyObject *op_fallback(EagerOpObject *self, PyObject *const *args, Py_ssize_t n) {
    PyObject *f = hook("call");
    PyObject *tup = f ? PyTuple_New(n) : NULL;
    if (!tup) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(tup, i, Py_NewRef(args[i]));
    PyObject *r = PyObject_CallFunctionObjArgs(f, self->desc, tup, NULL);
    Py_DECREF(tup);
    return r;
}

/* The op on eager tensors args[0..n): the outputs as eager tensors (one, or a
 * tuple), recorded for backward() when an input needs a gradient. */
static PyObject *op_apply(EagerOpObject *self, PyObject *const *args, Py_ssize_t n) {
    if (n != self->n_in)
        return raise_msg(PE_ERR_INVALID, "op %s takes %d input tensors, got %zd", pe_eager_prep_op(self->prep),
                         self->n_in, n);
    int wants = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyObject_TypeCheck(args[i], &EagerTensorType)) {
            if (self->api)
                return PyErr_Format(PyExc_TypeError, "%U: %U must be a pe.eager.Tensor, got %s", self->api,
                                    PyTuple_GET_ITEM(self->argnames, i), Py_TYPE(args[i])->tp_name);
            if (args[i] != Py_None) /* None: an absent optional input, the Python path's to place */
                return PyErr_Format(PyExc_TypeError, "op %s: input %zd must be a pe.eager.Tensor or None, got %s",
                                    pe_eager_prep_op(self->prep), i, Py_TYPE(args[i])->tp_name);
            return op_fallback(self, args, n);
        }
        wants |= !((EagerTensorObject *)args[i])->stop_gradient;
    }
    if (t_tracing || n > MAX_ARGS || self->n_out > MAX_ARGS) return op_fallback(self, args, n);
    if (!g_tensor_cls) return raise_msg(PE_ERR_INTERNAL, "eager: pe.eager is not installed (import pe first)");
    pe_place place;
    if (current_place(&place)) return NULL;
    pe_tensor *in[MAX_ARGS], *outs[MAX_ARGS];
    PyObject *hold[MAX_ARGS]; /* the values, held: another thread may replace a tensor's _t while the GIL is released */
    for (Py_ssize_t i = 0; i < n; i++) {
        hold[i] = Py_XNewRef(((EagerTensorObject *)args[i])->t);
        if (!(in[i] = et_raw(args[i]))) {
            for (Py_ssize_t j = 0; j <= i; j++) Py_XDECREF(hold[j]);
            return NULL;
        }
    }
    pe_status st;
    int failed = op_run_raw(self, in, outs, place, &st);
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(hold[i]);
    if (failed) return op_fallback(self, args, n); /* raises, naming the tensors */
    int needs = wants && !t_grad_off;
    PyObject *res = PyTuple_New(self->n_out);
    for (int k = 0; k < self->n_out; k++) {
        if (!outs[k]) {
            if (res) PyTuple_SET_ITEM(res, k, Py_NewRef(Py_None));
            continue;
        }
        int sg = needs ? !is_float(outs[k]->dtype) : 1;
        PyObject *raw = res ? (PyObject *)tensor_from_owned(outs[k], NULL) : NULL;
        if (!res) pe_tensor_free(outs[k]);
        PyObject *e = raw ? et_make(raw, sg) : NULL;
        if (!e) Py_CLEAR(res);
        else PyTuple_SET_ITEM(res, k, e);
    }
    if (!res) return NULL;
    if (needs) {
        PyObject *f = hook("record"), *ins = f ? PyTuple_New(n) : NULL;
        if (!ins) {
            Py_DECREF(res);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(ins, i, Py_NewRef(args[i]));
        PyObject *r = PyObject_CallFunctionObjArgs(f, (PyObject *)self, ins, res, NULL);
        Py_DECREF(ins);
        if (!r) {
            Py_DECREF(res);
            return NULL;
        }
        Py_DECREF(r);
    }
    if (self->n_out == 1) {
        PyObject *one = Py_NewRef(PyTuple_GET_ITEM(res, 0));
        Py_DECREF(res);
        return one;
    }
    return res;
}

static PyObject *op_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "EagerOp takes its input tensors as positional arguments");
        return NULL;
    }
    return op_apply((EagerOpObject *)self, args, PyVectorcall_NARGS(nargsf));
}

/* op.raw(*tensors) -> tuple of _core.Tensor (None where absent): the op on
 * raw tensors (None = an absent arg), nothing recorded: the tape's own runs. */
static PyObject *op_raw(EagerOpObject *self, PyObject *const *args, Py_ssize_t n) {
    if (n != self->n_in || n > MAX_ARGS || self->n_out > MAX_ARGS)
        return raise_msg(PE_ERR_INVALID, "op %s: raw() takes %d tensors, got %zd", pe_eager_prep_op(self->prep),
                         self->n_in, n);
    pe_tensor *in[MAX_ARGS], *outs[MAX_ARGS];
    for (Py_ssize_t i = 0; i < n; i++) { /* the caller's argument tuple holds the raw tensors during the run */
        if (args[i] == Py_None) {
            in[i] = NULL;
        } else if (PyObject_TypeCheck(args[i], &TensorType)) {
            if (!(in[i] = tensor_get((TensorObject *)args[i]))) return NULL;
        } else {
            return raise_msg(PE_ERR_INVALID, "op %s: raw() input %zd is a %s, not a pe Tensor",
                             pe_eager_prep_op(self->prep), i, Py_TYPE(args[i])->tp_name);
        }
    }
    pe_place place;
    if (current_place(&place)) return NULL;
    pe_status st;
    if (op_run_raw(self, in, outs, place, &st)) return raise_status(st);
    PyObject *res = PyTuple_New(self->n_out);
    for (int k = 0; k < self->n_out; k++) {
        PyObject *r = !outs[k] ? Py_NewRef(Py_None) : res ? (PyObject *)tensor_from_owned(outs[k], NULL) : NULL;
        if (!res && outs[k]) pe_tensor_free(outs[k]);
        if (!r) Py_CLEAR(res);
        else if (res) PyTuple_SET_ITEM(res, k, r);
    }
    return res;
}

static PyObject *op_get_desc(EagerOpObject *self, void *c) {
    (void)c;
    return Py_NewRef(self->desc);
}

static PyMethodDef op_methods[] = {
    {"raw", (PyCFunction)(void (*)(void))op_raw, METH_FASTCALL,
     "raw(*tensors) -> tuple of _core.Tensor: the op on raw tensors, nothing recorded."},
    {NULL, NULL, 0, NULL}};

static PyObject *op_get_cache(EagerOpObject *self, void *c) {
    (void)c;
    return Py_NewRef(self->cache);
}

static PyGetSetDef op_getset[] = {
    {"desc", (getter)op_get_desc, NULL, "(op_type, inputs, outputs, attrs) as given", NULL},
    {"cache", (getter)op_get_cache, NULL, "a dict kept with the op for the Python side (the tape's entries)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject EagerOpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pe._core.EagerOp",
    .tp_basicsize = sizeof(EagerOpObject),
    .tp_dealloc = (destructor)op_dealloc,
    .tp_vectorcall_offset = offsetof(EagerOpObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "EagerOp(op_type, inputs [(slot, n)], outputs [(slot, n | [present])], attrs=None, api=None, "
              "argnames=()): a prepared eager op (pe_eager_prepare); op(*eager_tensors) runs it.",
    .tp_methods = op_methods,
    .tp_getset = op_getset,
    .tp_new = op_new,
};

/* ---- the operators ------------------------------------------------------------------ */

enum { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_MATMUL, BIN_COUNT };
static const char *const k_bin_names[BIN_COUNT] = {"add", "sub", "mul", "truediv", "matmul"};
static const char *const k_bin_rnames[BIN_COUNT] = {"radd", "rsub", "rmul", "rtruediv", "rmatmul"};
static EagerOpObject *g_bin_ops[BIN_COUNT];

/* Not a float tensor: a true division by or of it takes the Python rules (integers cast to float32 first). */
static int not_float(PyObject *o) {
    pe_tensor *t = ((EagerTensorObject *)o)->t ? et_raw(o) : NULL;
    if (!t) PyErr_Clear(); /* no value: op_apply's error */
    return t && !is_float(t->dtype);
}

static PyObject *binary(int which, PyObject *a, PyObject *b) {
    if (g_bin_ops[which] && PyObject_TypeCheck(a, &EagerTensorType) && PyObject_TypeCheck(b, &EagerTensorType) &&
        !(which == BIN_DIV && (not_float(a) || not_float(b)))) {
        PyObject *args[2] = {a, b};
        return op_apply(g_bin_ops[which], args, 2);
    }
    /* a number or another type on either side, or an integer division: the Python rules (scale ops, constants,
     * float32 casts) */
    int forward = PyObject_TypeCheck(a, &EagerTensorType);
    PyObject *f = hook(forward ? k_bin_names[which] : k_bin_rnames[which]);
    if (!f) return NULL;
    return forward ? PyObject_CallFunctionObjArgs(f, a, b, NULL) : PyObject_CallFunctionObjArgs(f, b, a, NULL);
}

static PyObject *nb_add(PyObject *a, PyObject *b) { return binary(BIN_ADD, a, b); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return binary(BIN_SUB, a, b); }
static PyObject *nb_mul(PyObject *a, PyObject *b) { return binary(BIN_MUL, a, b); }
static PyObject *nb_div(PyObject *a, PyObject *b) { return binary(BIN_DIV, a, b); }
static PyObject *nb_matmul(PyObject *a, PyObject *b) { return binary(BIN_MATMUL, a, b); }

static PyNumberMethods et_as_number = {
    .nb_add = nb_add,
    .nb_subtract = nb_sub,
    .nb_multiply = nb_mul,
    .nb_true_divide = nb_div,
    .nb_matrix_multiply = nb_matmul,
};

static PyTypeObject EagerTensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pe._core.EagerTensor",
    .tp_basicsize = sizeof(EagerTensorObject),
    .tp_dealloc = (destructor)et_dealloc,
    .tp_traverse = (traverseproc)et_traverse,
    .tp_clear = (inquiry)et_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C base of pe.eager.Tensor: the value, the autograd fields and the operators + - * / @.",
    .tp_getset = et_getset,
    .tp_as_number = &et_as_number,
    .tp_init = (initproc)et_init,
    .tp_new = PyType_GenericNew,
};

/* eager_install(tensor_cls, framework_globals, hooks, binary_ops {"add": EagerOp, ...}) */
static PyObject *py_eager_install(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *cls, *fw, *hooks, *bins;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyType_Type, &cls, &PyDict_Type, &fw, &PyDict_Type, &hooks, &PyDict_Type,
                          &bins))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)cls, &EagerTensorType))
        return raise_msg(PE_ERR_INVALID, "eager_install: the tensor class must derive from _core.EagerTensor");
    for (int i = 0; i < BIN_COUNT; i++) {
        PyObject *o = PyDict_GetItemString(bins, k_bin_names[i]);
        if (o && !PyObject_TypeCheck(o, &EagerOpType))
            return raise_msg(PE_ERR_INVALID, "eager_install: binary op '%s' must be an EagerOp", k_bin_names[i]);
        Py_XINCREF(o);
        Py_XSETREF(g_bin_ops[i], (EagerOpObject *)o);
    }
    Py_INCREF(cls);
    Py_XSETREF(g_tensor_cls, (PyTypeObject *)cls);
    Py_INCREF(fw);
    Py_XSETREF(g_fw_dict, fw);
    Py_INCREF(hooks);
    Py_XSETREF(g_hooks, hooks);
    if (!g_place_key && !(g_place_key = PyUnicode_InternFromString("_eager_place"))) return NULL;
    Py_RETURN_NONE;
}

PyMethodDef g_eager_fast_methods[] = {
    {"eager_mode", py_eager_mode, METH_VARARGS,
     "eager_mode(grad, tracing): this thread's switches (pe.no_grad, a pe.jit trace) for the C fast path."},
    {"eager_install", py_eager_install, METH_VARARGS,
     "eager_install(tensor_cls, framework_globals, hooks, binary_ops): wires pe.eager's Python rules into "
     "the fast path."},
    {NULL, NULL, 0, NULL}};

PyTypeObject *const g_eager_types[] = {&EagerTensorType, &EagerOpType};
const char *const g_eager_type_names[] = {"EagerTensor", "EagerOp"};
