/* bindings/python/pe/core_eager.c — eager mode's C entry points (pe/eager.h)
 * for pe.eager: _core.eager_op_index, _core.eager_run, _core.eager_grad_ops,
 * _core.eager_dims_only_inputs.
 *
 * Attrs come as a dict {name: value}, converted by the registry's type of
 * each attr (the op's own or a common one); an attr the op does not have
 * is refused here, naming the op.
 */
#include "_core.h"

#include <stdlib.h>
#include <string.h>

/* ---- attrs ---------------------------------------------------------------- */

void attr_buf_free(attr_buf *b) {
    for (int i = 0; i < b->n; i++) {
        pe_attr *a = &b->a[i];
        free(a->ints);
        free(a->floats);
        free(a->s);
        if (a->strings)
            for (int k = 0; k < a->n; k++) free(a->strings[k]);
        free(a->strings);
    }
    free(b->a);
    b->a = NULL;
    b->n = 0;
}

static int to_i64(PyObject *v, int64_t *out) {
    if (PyFloat_Check(v)) { /* 2.0 for an int attr: refuse, it is a mistake */
        PyErr_SetString(PyExc_TypeError, "expected an int, got a float");
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

static int attr_from_py(const char *op, const char *name, pe_attr_type type, PyObject *v, pe_attr *a) {
    memset(a, 0, sizeof *a);
    a->name = (char *)name; /* borrowed from the dict key, which outlives the call */
    a->type = type;
    switch (type) {
    case PE_ATTR_INT: case PE_ATTR_LONG: case PE_ATTR_BLOCK:
        if (to_i64(v, &a->i)) goto bad;
        return 0;
    case PE_ATTR_BOOL:
        a->i = PyObject_IsTrue(v);
        if (a->i < 0) goto bad;
        return 0;
    case PE_ATTR_FLOAT:
        a->f = PyFloat_AsDouble(v);
        if (a->f == -1.0 && PyErr_Occurred()) goto bad;
        return 0;
    case PE_ATTR_STRING: {
        const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (!s || !(a->s = strdup(s))) goto bad;
        return 0;
    }
    default: break;
    }
    PyObject *seq = PySequence_Fast(v, "a list");
    if (!seq) goto bad;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    a->n = (int)n;
    size_t cnt = (size_t)(n ? n : 1);
    int rc = 0;
    if (type == PE_ATTR_FLOATS) {
        a->floats = calloc(cnt, sizeof(double));
        for (Py_ssize_t k = 0; a->floats && k < n && !rc; k++) {
            a->floats[k] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, k));
            rc = a->floats[k] == -1.0 && PyErr_Occurred();
        }
        if (!a->floats) rc = 1;
    } else if (type == PE_ATTR_STRINGS) {
        a->strings = calloc(cnt, sizeof(char *));
        for (Py_ssize_t k = 0; a->strings && k < n && !rc; k++) {
            PyObject *e = PySequence_Fast_GET_ITEM(seq, k);
            const char *s = PyUnicode_Check(e) ? PyUnicode_AsUTF8(e) : NULL;
            rc = !s || !(a->strings[k] = strdup(s));
        }
        if (!a->strings) rc = 1;
    } else { /* INTS LONGS BOOLS */
        a->ints = calloc(cnt, sizeof(int64_t));
        for (Py_ssize_t k = 0; a->ints && k < n && !rc; k++) {
            PyObject *e = PySequence_Fast_GET_ITEM(seq, k);
            if (type == PE_ATTR_BOOLS) {
                int b = PyObject_IsTrue(e);
                rc = b < 0;
                a->ints[k] = b;
            } else {
                rc = to_i64(e, &a->ints[k]);
            }
        }
        if (!a->ints) rc = 1;
    }
    Py_DECREF(seq);
    if (rc) goto bad;
    return 0;
bad:
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError) ||
        PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Clear();
        raise_msg(PE_ERR_INVALID, "op %s: attr '%s' must be %s, got %s", op, name, pe_attr_type_name(type),
                  Py_TYPE(v)->tp_name);
    }
    return -1;
}

/* attrs: a dict (or None) converted by the registry types of op `op`. */
int attrs_from_py(int op, PyObject *attrs, attr_buf *out) {
    memset(out, 0, sizeof *out);
    if (attrs == Py_None) return 0;
    pe_op_desc d;
    pe_op_type_get(op, &d);
    if (!PyDict_Check(attrs)) {
        raise_msg(PE_ERR_INVALID, "op %s: attrs must be a dict", d.name);
        return -1;
    }
    Py_ssize_t n = PyDict_Size(attrs), pos = 0;
    out->a = calloc((size_t)(n ? n : 1), sizeof(pe_attr));
    if (!out->a) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *k, *v;
    while (PyDict_Next(attrs, &pos, &k, &v)) {
        const char *name = py_name_utf8(k, "attr name");
        if (!name) {
            if (!PyErr_Occurred()) raise_msg(PE_ERR_INVALID, "op %s: attr names must be str", d.name);
            attr_buf_free(out);
            return -1;
        }
        pe_op_attr_desc ad;
        if (!pe_op_type_find_attr(op, name, &ad) && !pe_op_common_attr(name, &ad)) {
            raise_msg(PE_ERR_INVALID, "op %s has no attr '%s'", d.name, name);
            attr_buf_free(out);
            return -1;
        }
        if (attr_from_py(d.name, name, ad.type, v, &out->a[out->n])) {
            out->n++;
            attr_buf_free(out);
            return -1;
        }
        out->n++;
    }
    return 0;
}

/* ---- eager_run ---------------------------------------------------------------- */

static PyObject *py_eager_op_index(PyObject *m, PyObject *arg) {
    (void)m;
    const char *type = py_name_utf8(arg, "op type");
    if (!type) return PyErr_Occurred() ? NULL : raise_msg(PE_ERR_INVALID, "op type must be a str");
    int i = pe_op_type_find(type);
    if (i < 0) return raise_msg(PE_ERR_NOT_FOUND, "unknown op type '%s' (not in ops/ops.def)", type);
    return PyLong_FromLong(i);
}

/* eager_dims_only_inputs(op type) -> [slot]: the input slots whose data the
 * op's kernels never read, only dims and dtype (ops.def "-In"). */
static PyObject *py_eager_dims_only_inputs(PyObject *m, PyObject *arg) {
    (void)m;
    const char *type = py_name_utf8(arg, "op type");
    if (!type) return PyErr_Occurred() ? NULL : raise_msg(PE_ERR_INVALID, "op type must be a str");
    int op = pe_op_type_find(type);
    pe_op_desc d;
    if (op < 0 || !pe_op_type_get(op, &d)) return raise_msg(PE_ERR_NOT_FOUND, "unknown op type '%s' (not in ops/ops.def)", type);
    PyObject *l = PyList_New(0);
    for (int k = 0; l && k < d.n_inputs; k++) {
        pe_op_slot_desc sd;
        if (pe_op_type_reads_input(op, k) || !pe_op_type_input(op, k, &sd)) continue;
        PyObject *u = PyUnicode_FromString(sd.name);
        if (!u || PyList_Append(l, u)) Py_CLEAR(l);
        Py_XDECREF(u);
    }
    return l;
}

/* (slot, n) or (slot, [present, ...]): the number of args, -1 when malformed. */
static long out_count(PyObject *e) {
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) return -1;
    PyObject *c = PyTuple_GET_ITEM(e, 1);
    return PyList_Check(c) ? (long)PyList_GET_SIZE(c) : PyLong_AsLong(c);
}

typedef struct run_buf {
    pe_eager_args *ins, *outs;
    int n_ins, n_outs;
    pe_tensor **t;          /* every tensor pointer, inputs then outputs */
    const char **names;
    PyObject **made;        /* the output Tensor objects (owned references) */
    int n_made;
} run_buf;

static void run_buf_free(run_buf *b) {
    for (int i = 0; i < b->n_made; i++) Py_XDECREF(b->made[i]);
    free(b->ins);
    free(b->outs);
    free(b->t);
    free(b->names);
    free(b->made);
}

/* eager_run(op_index, inputs, outputs, attrs, place, num_threads, seed)
 *   inputs:  sequence of (slot, [Tensor or None], [name or None])
 *   outputs: sequence of (slot, n) or (slot, [present]) (an absent arg: None;
 *            a Tensor: the output written into it, in place — ops.def's
 *            In>Out pairs only, pe_eager_run checks)
 * -> {slot: [Tensor or None]} (fresh tensors, or the Tensors given). */
static PyObject *py_eager_run(PyObject *m, PyObject *args) {
    (void)m;
    int op, num_threads;
    PyObject *ins_o, *outs_o, *attrs_o, *place_o;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "iOOOOiK", &op, &ins_o, &outs_o, &attrs_o, &place_o, &num_threads, &seed)) return NULL;
    pe_op_desc d;
    if (!pe_op_type_get(op, &d)) return raise_msg(PE_ERR_NOT_FOUND, "eager_run: no op type with index %d", op);
    pe_place place;
    if (parse_place(place_o, &place)) return NULL;
    PyObject *ins = PySequence_Fast(ins_o, "eager_run: inputs must be a sequence");
    if (!ins) return NULL;
    PyObject *outs = PySequence_Fast(outs_o, "eager_run: outputs must be a sequence");
    if (!outs) {
        Py_DECREF(ins);
        return NULL;
    }
    run_buf b;
    memset(&b, 0, sizeof b);
    attr_buf ab = {0};
    PyObject *result = NULL;
    b.n_ins = (int)PySequence_Fast_GET_SIZE(ins);
    b.n_outs = (int)PySequence_Fast_GET_SIZE(outs);
    int total = 0, n_out_t = 0;
    for (int i = 0; i < b.n_ins; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(ins, i);
        PyObject *ts = PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 3 ? PyTuple_GET_ITEM(e, 1) : NULL;
        if (!ts || !PyList_Check(ts) || !PyList_Check(PyTuple_GET_ITEM(e, 2)) ||
            PyList_GET_SIZE(PyTuple_GET_ITEM(e, 2)) != PyList_GET_SIZE(ts)) {
            raise_msg(PE_ERR_INVALID, "op %s: inputs must be (slot, [Tensor], [name]) tuples", d.name);
            goto done;
        }
        total += (int)PyList_GET_SIZE(ts);
    }
    for (int i = 0; i < b.n_outs; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(outs, i);
        long n = out_count(e);
        if (n < 0 || n > 100000) {
            PyErr_Clear();
            raise_msg(PE_ERR_INVALID, "op %s: outputs must be (slot, count or [present]) tuples", d.name);
            goto done;
        }
        total += (int)n;
        n_out_t += (int)n;
    }
    b.ins = calloc((size_t)b.n_ins + 1, sizeof *b.ins);
    b.outs = calloc((size_t)b.n_outs + 1, sizeof *b.outs);
    b.t = calloc((size_t)total + 1, sizeof *b.t);
    b.names = calloc((size_t)total + 1, sizeof *b.names);
    b.made = calloc((size_t)n_out_t + 1, sizeof *b.made);
    if (!b.ins || !b.outs || !b.t || !b.names || !b.made) {
        PyErr_NoMemory();
        goto done;
    }
    int at = 0;
    for (int i = 0; i < b.n_ins; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(ins, i);
        PyObject *ts = PyTuple_GET_ITEM(e, 1), *ns = PyTuple_GET_ITEM(e, 2);
        const char *slot = py_name_utf8(PyTuple_GET_ITEM(e, 0), "slot");
        if (!slot) {
            if (!PyErr_Occurred()) raise_msg(PE_ERR_INVALID, "op %s: slot names must be str", d.name);
            goto done;
        }
        b.ins[i].slot = slot;
        b.ins[i].n = (int)PyList_GET_SIZE(ts);
        b.ins[i].t = &b.t[at];
        b.ins[i].names = &b.names[at];
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ts); k++, at++) {
            PyObject *to = PyList_GET_ITEM(ts, k), *no = PyList_GET_ITEM(ns, k);
            if (to != Py_None) {
                if (!PyObject_TypeCheck(to, &TensorType)) {
                    raise_msg(PE_ERR_INVALID, "op %s: input %s:%zd is a %s, not a pe Tensor", d.name, slot, k,
                              Py_TYPE(to)->tp_name);
                    goto done;
                }
                if (!(b.t[at] = tensor_get((TensorObject *)to))) goto done;
            }
            b.names[at] = no == Py_None ? NULL : py_name_utf8(no, "input name");
            if (no != Py_None && !b.names[at]) {
                if (!PyErr_Occurred()) raise_msg(PE_ERR_INVALID, "op %s: input names must be str", d.name);
                goto done;
            }
        }
    }
    for (int i = 0; i < b.n_outs; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(outs, i);
        const char *slot = py_name_utf8(PyTuple_GET_ITEM(e, 0), "slot");
        if (!slot) {
            if (!PyErr_Occurred()) raise_msg(PE_ERR_INVALID, "op %s: slot names must be str", d.name);
            goto done;
        }
        PyObject *present = PyList_Check(PyTuple_GET_ITEM(e, 1)) ? PyTuple_GET_ITEM(e, 1) : NULL;
        int n = (int)out_count(e);
        b.outs[i].slot = slot;
        b.outs[i].n = n;
        b.outs[i].t = &b.t[at];
        b.outs[i].names = NULL;
        for (int k = 0; k < n; k++, at++) {
            PyObject *pk = present ? PyList_GET_ITEM(present, k) : NULL;
            if (pk && PyObject_TypeCheck(pk, &TensorType)) { /* written in place: that tensor is the output */
                if (!(b.t[at] = tensor_get((TensorObject *)pk))) goto done;
                Py_INCREF(pk);
                b.made[b.n_made++] = pk;
                continue;
            }
            if (pk && !PyObject_IsTrue(pk)) { /* an absent arg: None */
                Py_INCREF(Py_None);
                b.made[b.n_made++] = Py_None;
                continue;
            }
            pe_tensor *pt = pe_tensor_new();
            TensorObject *to = pt ? tensor_from_owned(pt, NULL) : NULL;
            if (!to) {
                if (!PyErr_Occurred()) PyErr_NoMemory();
                goto done;
            }
            b.made[b.n_made++] = (PyObject *)to;
            b.t[at] = pt;
        }
    }
    if (attrs_from_py(op, attrs_o, &ab)) goto done;
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_eager_run(op, b.ins, b.n_ins, b.outs, b.n_outs, ab.a, ab.n, place, num_threads, (uint64_t)seed);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) {
        raise_status(st);
        goto done;
    }
    result = PyDict_New();
    int made = 0;
    for (int i = 0; result && i < b.n_outs; i++) {
        PyObject *l = PyList_New(b.outs[i].n);
        for (int k = 0; l && k < b.outs[i].n; k++, made++) {
            PyList_SET_ITEM(l, k, b.made[made]);
            b.made[made] = NULL; /* the list owns it now */
        }
        if (!l || PyDict_SetItemString(result, b.outs[i].slot, l)) Py_CLEAR(result);
        Py_XDECREF(l);
    }
done:
    attr_buf_free(&ab);
    run_buf_free(&b);
    Py_DECREF(ins);
    Py_DECREF(outs);
    return result;
}

/* ---- eager_grad_ops ---------------------------------------------------------- */

static int add_slots(pe_op *op, PyObject *slots, bool inputs, const char *type) {
    PyObject *seq = PySequence_Fast(slots, "slots must be a sequence");
    if (!seq) return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; !rc && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(seq, i);
        const char *slot = PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 2 ? py_name_utf8(PyTuple_GET_ITEM(e, 0), "slot") : NULL;
        PyObject *names = slot ? PyTuple_GET_ITEM(e, 1) : NULL;
        if (!slot || !PyList_Check(names)) {
            if (!PyErr_Occurred()) raise_msg(PE_ERR_INVALID, "op %s: slots must be (slot, [name]) tuples", type);
            rc = -1;
            break;
        }
        for (Py_ssize_t k = 0; !rc && k < PyList_GET_SIZE(names); k++) {
            const char *n = py_name_utf8(PyList_GET_ITEM(names, k), "var name");
            if (!n) {
                if (!PyErr_Occurred()) raise_msg(PE_ERR_INVALID, "op %s: var names must be str", type);
                rc = -1;
            } else if ((inputs ? pe_op_add_input(op, slot, n) : pe_op_add_output(op, slot, n)) != PE_OK) {
                raise_status(PE_ERR_NOMEM);
                rc = -1;
            }
        }
    }
    Py_DECREF(seq);
    return rc;
}

static PyObject *slots_to_py(const pe_slot *s, int n) {
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *names = PyList_New(s[i].n_args);
        for (int k = 0; names && k < s[i].n_args; k++) {
            PyObject *u = PyUnicode_FromString(s[i].args[k]);
            if (!u) Py_CLEAR(names);
            else PyList_SET_ITEM(names, k, u);
        }
        PyObject *t = names ? Py_BuildValue("(sN)", s[i].name, names) : NULL;
        if (!t) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, t);
    }
    return l;
}

/* eager_grad_ops(type, inputs, outputs, attrs, vars)
 *   inputs/outputs: [(slot, [var name])]; vars: [(name, dtype, dims, needs_grad)]
 * -> [(type, [(slot, [name])], [(slot, [name])], {attr: value})] in run order. */
static PyObject *py_eager_grad_ops(PyObject *m, PyObject *args) {
    (void)m;
    const char *type;
    PyObject *ins_o, *outs_o, *attrs_o, *vars_o;
    if (!PyArg_ParseTuple(args, "sOOOO", &type, &ins_o, &outs_o, &attrs_o, &vars_o)) return NULL;
    int opi = pe_op_type_find(type);
    if (opi < 0) return raise_msg(PE_ERR_NOT_FOUND, "unknown op type '%s' (not in ops/ops.def)", type);
    PyObject *result = NULL, *vars = NULL;
    pe_program *tmp = pe_program_new(), *grad = NULL;
    attr_buf ab = {0};
    pe_eager_var *ev = NULL;
    int64_t *dims = NULL;
    if (!tmp) return raise_status(PE_ERR_NOMEM);
    pe_op *op = pe_block_add_op(&tmp->blocks[0], type);
    if (!op) {
        raise_status(PE_ERR_NOMEM);
        goto done;
    }
    if (add_slots(op, ins_o, true, type) || add_slots(op, outs_o, false, type)) goto done;
    if (attrs_from_py(opi, attrs_o, &ab)) goto done;
    for (int i = 0; i < ab.n; i++)
        if (pe_op_set_attr(op, &ab.a[i]) != PE_OK) {
            raise_status(PE_ERR_NOMEM);
            goto done;
        }
    vars = PySequence_Fast(vars_o, "vars must be a sequence");
    if (!vars) goto done;
    Py_ssize_t nv = PySequence_Fast_GET_SIZE(vars);
    ev = calloc((size_t)nv + 1, sizeof *ev);
    dims = calloc((size_t)nv * PE_MAX_DIMS + 1, sizeof *dims);
    if (!ev || !dims) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nv; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(vars, i);
        const char *name, *dt;
        PyObject *shape;
        int needs;
        if (!PyArg_ParseTuple(e, "ssOp", &name, &dt, &shape, &needs)) goto done;
        if (!pe_dtype_from_name(dt, &ev[i].dtype)) {
            raise_msg(PE_ERR_INVALID, "op %s: var '%s' has unknown dtype '%s'", type, name, dt);
            goto done;
        }
        PyObject *sh = PySequence_Fast(shape, "dims must be a sequence");
        if (!sh) goto done;
        Py_ssize_t nd = PySequence_Fast_GET_SIZE(sh);
        if (nd > PE_MAX_DIMS) {
            Py_DECREF(sh);
            raise_msg(PE_ERR_INVALID, "op %s: var '%s' has rank %zd (at most %d)", type, name, nd, PE_MAX_DIMS);
            goto done;
        }
        for (Py_ssize_t k = 0; k < nd; k++) dims[i * PE_MAX_DIMS + k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(sh, k));
        Py_DECREF(sh);
        if (PyErr_Occurred()) goto done;
        ev[i].name = name;
        ev[i].ndim = (int)nd;
        ev[i].dims = &dims[i * PE_MAX_DIMS];
        ev[i].needs_grad = needs;
    }
    pe_status st = pe_eager_grad_ops(op, ev, (int)nv, &grad);
    if (st != PE_OK) {
        raise_status(st);
        goto done;
    }
    const pe_block *gb = &grad->blocks[0];
    result = PyList_New(gb->n_ops);
    for (int i = 0; result && i < gb->n_ops; i++) {
        const pe_op *g = &gb->ops[i];
        PyObject *attrs = PyDict_New();
        for (int k = 0; attrs && k < g->n_attrs; k++) {
            PyObject *v = attr_to_py(&g->attrs[k]);
            if (!v || PyDict_SetItemString(attrs, g->attrs[k].name, v)) Py_CLEAR(attrs);
            Py_XDECREF(v);
        }
        PyObject *t = attrs ? Py_BuildValue("(sNNN)", g->type, slots_to_py(g->inputs, g->n_inputs),
                                            slots_to_py(g->outputs, g->n_outputs), attrs)
                            : NULL;
        if (!t) Py_CLEAR(result);
        else PyList_SET_ITEM(result, i, t);
    }
done:
    Py_XDECREF(vars);
    free(ev);
    free(dims);
    attr_buf_free(&ab);
    pe_program_free(tmp);
    pe_program_free(grad);
    return result;
}

PyMethodDef g_eager_methods[] = {
    {"eager_op_index", py_eager_op_index, METH_O, "eager_op_index(type) -> the op type's registry index."},
    {"eager_run", py_eager_run, METH_VARARGS,
     "eager_run(op_index, [(slot, [Tensor|None], [name|None])], [(slot, n | [present | Tensor])], attrs, place, "
     "num_threads, seed) "
     "-> {slot: [Tensor]}: one op run on tensors (pe_eager_run)."},
    {"eager_dims_only_inputs", py_eager_dims_only_inputs, METH_O,
     "eager_dims_only_inputs(op_type) -> [slot]: input slots whose data the kernels never read (ops.def -In)."},
    {"eager_grad_ops", py_eager_grad_ops, METH_VARARGS,
     "eager_grad_ops(type, [(slot, [name])], [(slot, [name])], attrs, [(name, dtype, dims, needs_grad)]) -> "
     "[(type, inputs, outputs, attrs)]: the backward ops the op's grad maker makes (pe_eager_grad_ops)."},
    {NULL, NULL, 0, NULL}};
