/* bindings/python/pe/core_passes.c — autodiff, optimizer and initializer passes; checkpoints.
 * (part of pe._core; see _core.c for the design). */
#include "_core.h"

#include <stdlib.h>
#include <string.h>

/* ---- passes ----------------------------------------------------------- */

static PyObject *pairs_list(pe_param_grad *pg, int n) {
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *t = Py_BuildValue("(ss)", pg[i].param, pg[i].grad);
        if (!t) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, t);
    }
    pe_param_grads_free(pg, n);
    return l;
}

PyObject *py_append_backward(PyObject *m, PyObject *args, PyObject *kw) {
    (void)m;
    static char *kwlist[] = {"program", "loss", "params", "no_grad", NULL};
    PyObject *prog_o, *params_o = Py_None, *nograd_o = Py_None;
    const char *loss;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|OO", kwlist, &prog_o, &loss, &params_o, &nograd_o)) return NULL;
    ProgramObject *prog = as_program(prog_o, "append_backward(program)");
    if (!prog || program_mutable(prog, "append_backward")) return NULL;
    strlist params, nograd;
    if (strlist_from(params_o, "parameter_list", &params)) return NULL;
    if (strlist_from(nograd_o, "no_grad_set", &nograd)) {
        strlist_free(&params);
        return NULL;
    }
    pe_param_grad *pg = NULL;
    int n = 0;
    pe_status st = pe_append_backward(prog->p, loss, (const char *const *)params.s, params.n,
                                      (const char *const *)nograd.s, nograd.n, &pg, &n);
    strlist_free(&params);
    strlist_free(&nograd);
    if (st != PE_OK) return raise_status(st);
    return pairs_list(pg, n);
}

PyObject *py_gradients(PyObject *m, PyObject *args, PyObject *kw) {
    (void)m;
    static char *kwlist[] = {"program", "targets", "inputs", "target_grads", "no_grad", NULL};
    PyObject *prog_o, *targets_o, *inputs_o, *seeds_o = Py_None, *nograd_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OO", kwlist, &prog_o, &targets_o, &inputs_o, &seeds_o, &nograd_o))
        return NULL;
    ProgramObject *prog = as_program(prog_o, "gradients(program)");
    if (!prog || program_mutable(prog, "gradients")) return NULL;
    strlist targets = {NULL, 0}, inputs = {NULL, 0}, nograd = {NULL, 0};
    char **seeds = NULL, **grads = NULL;
    PyObject *r = NULL;
    if (strlist_from(targets_o, "targets", &targets)) return NULL;
    if (strlist_from(inputs_o, "inputs", &inputs) || strlist_from(nograd_o, "no_grad_set", &nograd)) goto out;
    if (seeds_o != Py_None) { /* [name or None] per target */
        PyObject *fast = PySequence_Fast(seeds_o, "target_grads must be a list of var names or None");
        if (!fast) goto out;
        if (PySequence_Fast_GET_SIZE(fast) != targets.n) {
            PyErr_Format(PyExc_ValueError, "gradients: %zd target_gradients for %d targets",
                         PySequence_Fast_GET_SIZE(fast), targets.n);
            Py_DECREF(fast);
            goto out;
        }
        seeds = calloc((size_t)(targets.n ? targets.n : 1), sizeof *seeds);
        for (int i = 0; seeds && i < targets.n; i++) {
            PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
            if (o == Py_None) continue;
            const char *c = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
            if (!c) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "target_grads entries must be str or None");
                Py_DECREF(fast);
                goto out;
            }
            if (!(seeds[i] = strdup(c))) {
                Py_DECREF(fast);
                PyErr_NoMemory();
                goto out;
            }
        }
        Py_DECREF(fast);
        if (!seeds) {
            PyErr_NoMemory();
            goto out;
        }
    }
    grads = calloc((size_t)(inputs.n ? inputs.n : 1), sizeof *grads);
    if (!grads) {
        PyErr_NoMemory();
        goto out;
    }
    pe_status st = pe_gradients_seeded(prog->p, (const char *const *)targets.s, (const char *const *)seeds, targets.n,
                                       (const char *const *)inputs.s, inputs.n, (const char *const *)nograd.s,
                                       nograd.n, grads);
    if (st != PE_OK) {
        raise_status(st);
        goto out;
    }
    r = PyList_New(inputs.n);
    for (int i = 0; r && i < inputs.n; i++) {
        PyObject *g = grads[i] ? PyUnicode_FromString(grads[i]) : (Py_INCREF(Py_None), Py_None);
        if (!g) Py_CLEAR(r);
        else PyList_SET_ITEM(r, i, g);
    }
out:
    if (grads)
        for (int i = 0; i < inputs.n; i++) free(grads[i]);
    free(grads);
    if (seeds)
        for (int i = 0; i < targets.n; i++) free(seeds[i]);
    free(seeds);
    strlist_free(&targets);
    strlist_free(&inputs);
    strlist_free(&nograd);
    return r;
}

PyObject *py_minimize(PyObject *m, PyObject *args, PyObject *kw) {
    (void)m;
    static char *kwlist[] = {"main", "startup", "loss", "kind", "learning_rate", "lr_var", "momentum",
                             "use_nesterov", "beta1", "beta2", "epsilon", "weight_decay", "clip_global_norm",
                             "params", "no_grad", "param_configs", "initial_accumulator_value", "rho",
                             "centered", "coeff", "lr_ratio", "no_decay", "l1_decay", "clip_norm", "clip_min",
                             "clip_max", NULL};
    PyObject *main_o, *startup_o, *lr_var_o = Py_None, *params_o = Py_None, *nograd_o = Py_None, *cfg_o = Py_None;
    PyObject *nodecay_o = Py_None;
    const char *loss, *kind_s = "sgd";
    pe_optimizer o;
    pe_optimizer_default(&o, PE_OPT_SGD, 0.01);
    int nesterov = 0, centered = 0;
    PyObject *clip_min_o = Py_None, *clip_max_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOs|sdOdpdddddOOOddpddOddOO", kwlist, &main_o, &startup_o, &loss,
                                     &kind_s, &o.learning_rate, &lr_var_o, &o.momentum, &nesterov, &o.beta1, &o.beta2,
                                     &o.epsilon, &o.weight_decay, &o.clip_global_norm, &params_o, &nograd_o, &cfg_o,
                                     &o.initial_accumulator_value, &o.rho, &centered, &o.coeff, &o.lr_ratio,
                                     &nodecay_o, &o.l1_decay, &o.clip_norm, &clip_min_o, &clip_max_o))
        return NULL;
    if ((clip_min_o == Py_None) != (clip_max_o == Py_None))
        return raise_msg(PE_ERR_INVALID, "minimize: clip by value needs both clip_min and clip_max");
    if (clip_min_o != Py_None) {
        o.clip_by_value = true;
        o.clip_min = PyFloat_AsDouble(clip_min_o);
        o.clip_max = PyFloat_AsDouble(clip_max_o);
        if (PyErr_Occurred()) return NULL;
    }
    static const char *const kinds[PE_OPT_KIND_COUNT] = {"sgd", "momentum", "adam", "adagrad", "rmsprop",
                                                         "adamax", "adamw", "lamb"};
    int kind = -1;
    for (int i = 0; i < PE_OPT_KIND_COUNT; i++)
        if (!strcmp(kind_s, kinds[i])) kind = i;
    if (kind < 0)
        return raise_msg(PE_ERR_INVALID, "minimize: unknown optimizer kind '%s' (sgd, momentum, adam, adagrad, "
                         "rmsprop, adamax, adamw, lamb)", kind_s);
    o.kind = (pe_optimizer_kind)kind;
    o.use_nesterov = nesterov != 0;
    o.centered = centered != 0;
    ProgramObject *mainp = as_program(main_o, "minimize(main)");
    if (!mainp || program_mutable(mainp, "minimize")) return NULL;
    ProgramObject *startp = as_program(startup_o, "minimize(startup)");
    if (!startp || program_mutable(startp, "minimize")) return NULL;
    if (lr_var_o != Py_None) {
        o.lr_var = PyUnicode_Check(lr_var_o) ? PyUnicode_AsUTF8(lr_var_o) : NULL;
        if (!o.lr_var) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "lr_var must be a str");
            return NULL;
        }
    }
    strlist params, nograd, nodecay;
    if (strlist_from(params_o, "parameters", &params)) return NULL;
    if (strlist_from(nograd_o, "no_grad_set", &nograd)) {
        strlist_free(&params);
        return NULL;
    }
    if (strlist_from(nodecay_o, "no_decay", &nodecay)) {
        strlist_free(&params);
        strlist_free(&nograd);
        return NULL;
    }
    o.no_decay = (const char *const *)nodecay.s;
    o.n_no_decay = nodecay.n;
    pe_param_config *cfg = NULL;
    strlist cfg_names = {NULL, 0};
    int n_cfg = 0;
    PyObject *r = NULL;
    if (cfg_o != Py_None) {
        PyObject *fast = PySequence_Fast(cfg_o, "param_configs must be a list of (name, lr_mult, l2[, l1])");
        if (!fast) goto out;
        n_cfg = (int)PySequence_Fast_GET_SIZE(fast);
        cfg = calloc((size_t)(n_cfg ? n_cfg : 1), sizeof *cfg);
        cfg_names.s = calloc((size_t)(n_cfg ? n_cfg : 1), sizeof(char *));
        if (!cfg || !cfg_names.s) {
            Py_DECREF(fast);
            PyErr_NoMemory();
            goto out;
        }
        for (int i = 0; i < n_cfg; i++) {
            const char *name;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i),
                                  "sdd|d;param_configs entries are (name, lr_mult, l2[, l1])", &name, &cfg[i].lr_mult,
                                  &cfg[i].l2, &cfg[i].l1)) {
                Py_DECREF(fast);
                goto out;
            }
            cfg_names.s[i] = strdup(name);
            cfg_names.n = i + 1;
            cfg[i].name = cfg_names.s[i];
        }
        Py_DECREF(fast);
    }
    {
        pe_param_grad *pg = NULL;
        int n = 0;
        pe_status st = pe_optimizer_minimize(&o, mainp->p, startp->p, loss, (const char *const *)params.s, params.n,
                                             (const char *const *)nograd.s, nograd.n, cfg, n_cfg, &pg, &n);
        if (st != PE_OK) raise_status(st);
        else r = pairs_list(pg, n);
    }
out:
    free(cfg);
    strlist_free(&cfg_names);
    strlist_free(&params);
    strlist_free(&nograd);
    strlist_free(&nodecay);
    return r;
}

PyObject *py_startup_init_var(PyObject *m, PyObject *args, PyObject *kw) {
    (void)m;
    static char *kwlist[] = {"startup", "name", "dtype", "dims", "kind", "value", "low", "high", "mean", "std",
                             "fan_in", "fan_out", "values", "seed", "is_parameter", "stop_gradient", NULL};
    PyObject *startup_o, *dims_o, *values_o = Py_None;
    const char *name, *dtype_s, *kind_s;
    pe_initializer init;
    memset(&init, 0, sizeof init);
    init.high = 1.0;
    init.low = -1.0;
    init.std = 1.0;
    long long fan_in = 0, fan_out = 0;
    int seed = 0, is_param = 0, stop_grad = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OssOs|dddddLLOipp", kwlist, &startup_o, &name, &dtype_s, &dims_o,
                                     &kind_s, &init.value, &init.low, &init.high, &init.mean, &init.std, &fan_in,
                                     &fan_out, &values_o, &seed, &is_param, &stop_grad))
        return NULL;
    static const char *const kinds[PE_INIT_KIND_COUNT] = {"constant", "uniform", "normal", "truncated_normal",
                                                          "xavier_uniform", "xavier_normal", "kaiming_uniform",
                                                          "kaiming_normal", "assign"};
    int k = -1;
    for (int i = 0; i < PE_INIT_KIND_COUNT; i++)
        if (!strcmp(kind_s, kinds[i])) k = i;
    if (k < 0) return raise_msg(PE_ERR_INVALID, "startup_init_var: unknown initializer kind '%s'", kind_s);
    init.kind = (pe_init_kind)k;
    init.fan_in = fan_in;
    init.fan_out = fan_out;
    init.seed = seed;
    ProgramObject *sp = as_program(startup_o, "startup_init_var(startup)");
    if (!sp || program_mutable(sp, "startup_init_var")) return NULL;
    pe_var v;
    memset(&v, 0, sizeof v);
    v.name = (char *)name;
    if (!pe_dtype_from_name(dtype_s, &v.dtype)) return raise_msg(PE_ERR_INVALID, "startup_init_var: unknown dtype '%s'", dtype_s);
    PyObject *fast = PySequence_Fast(dims_o, "dims must be a list of ints");
    if (!fast) return NULL;
    Py_ssize_t nd = PySequence_Fast_GET_SIZE(fast);
    if (nd > PE_MAX_DIMS) {
        Py_DECREF(fast);
        return raise_msg(PE_ERR_INVALID, "startup_init_var: '%s' has %zd dims (max %d)", name, nd, PE_MAX_DIMS);
    }
    v.ndim = (int)nd;
    for (Py_ssize_t i = 0; i < nd; i++) {
        v.dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v.dims[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    v.persistable = true;
    v.is_parameter = is_param != 0;
    v.stop_gradient = stop_grad != 0;
    double *vals = NULL;
    if (values_o != Py_None) {
        PyArrayObject *a = (PyArrayObject *)PyArray_FROM_OTF(values_o, NPY_FLOAT64, NPY_ARRAY_IN_ARRAY);
        if (!a) return NULL;
        init.n_values = (int64_t)PyArray_SIZE(a);
        vals = malloc(sizeof(double) * (size_t)(init.n_values ? init.n_values : 1));
        if (!vals) {
            Py_DECREF(a);
            return PyErr_NoMemory();
        }
        memcpy(vals, PyArray_DATA(a), sizeof(double) * (size_t)init.n_values);
        Py_DECREF(a);
        init.values = vals;
    }
    pe_status st = pe_startup_init_var(sp->p, &v, &init);
    free(vals);
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* ---- checkpoints ------------------------------------------------------ */

static int ckpt_args(PyObject *args, const char *what, const char **path, ProgramObject **prog, ScopeObject **scope) {
    PyObject *prog_o, *scope_o;
    if (!PyArg_ParseTuple(args, "sOO", path, &prog_o, &scope_o)) return -1;
    *prog = as_program(prog_o, what);
    if (!*prog) return -1;
    if (!PyObject_TypeCheck(scope_o, &ScopeType)) {
        PyErr_Format(PyExc_TypeError, "%s: scope must be a Scope", what);
        return -1;
    }
    *scope = (ScopeObject *)scope_o;
    return 0;
}

PyObject *py_checkpoint_save(PyObject *m, PyObject *args) {
    (void)m;
    const char *path;
    ProgramObject *prog;
    ScopeObject *scope;
    if (ckpt_args(args, "checkpoint_save", &path, &prog, &scope)) return NULL;
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_checkpoint_save(path, prog->p, scope->s);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

PyObject *py_checkpoint_load(PyObject *m, PyObject *args) {
    (void)m;
    const char *path;
    ProgramObject *prog;
    ScopeObject *scope;
    int ignore_extra = 0;
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    if (na == 4) { /* (path, program, scope, ignore_extra) */
        ignore_extra = PyObject_IsTrue(PyTuple_GET_ITEM(args, 3));
        if (ignore_extra < 0) return NULL;
        args = PyTuple_GetSlice(args, 0, 3);
        if (!args) return NULL;
    } else {
        Py_INCREF(args);
    }
    int bad = ckpt_args(args, "checkpoint_load", &path, &prog, &scope);
    if (bad) {
        Py_DECREF(args);
        return NULL;
    }
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_checkpoint_load_ex(path, prog->p, scope->s, ignore_extra ? PE_CHECKPOINT_IGNORE_EXTRA : 0);
    Py_END_ALLOW_THREADS
    Py_DECREF(args); /* path (borrowed from it) is no longer used */
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* safetensors_read(path, scope, key=None): the tensors into scope; the
 * header's "__metadata__" value of key (str), or None. */
PyObject *py_safetensors_read(PyObject *m, PyObject *args) {
    (void)m;
    const char *path, *key = NULL;
    PyObject *scope_o;
    if (!PyArg_ParseTuple(args, "sO!|z", &path, &ScopeType, &scope_o, &key)) return NULL;
    pe_status st;
    char *value = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = pe_safetensors_read_meta(path, ((ScopeObject *)scope_o)->s, key, key ? &value : NULL);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    if (!value) Py_RETURN_NONE;
    PyObject *r = PyUnicode_FromString(value);
    free(value);
    return r;
}

PyObject *py_safetensors_write(PyObject *m, PyObject *args) {
    (void)m;
    const char *path;
    PyObject *scope_o, *names_o, *meta_o = NULL;
    if (!PyArg_ParseTuple(args, "sO!O|O", &path, &ScopeType, &scope_o, &names_o, &meta_o)) return NULL;
    strlist names, meta = {0};
    if (strlist_from(names_o, "names", &names)) return NULL;
    if (meta_o && meta_o != Py_None && strlist_from(meta_o, "meta", &meta)) {
        strlist_free(&names);
        return NULL;
    }
    if (meta.n % 2) {
        strlist_free(&names);
        strlist_free(&meta);
        PyErr_SetString(PyExc_ValueError, "safetensors_write: meta must list key, value pairs");
        return NULL;
    }
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_safetensors_write_meta(path, ((ScopeObject *)scope_o)->s, (const char *const *)names.s, names.n,
                                   (const char *const *)meta.s, meta.n / 2);
    Py_END_ALLOW_THREADS
    strlist_free(&names);
    strlist_free(&meta);
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

