/* bindings/python/pe/core_exec.c — feeds, and the Executor and ParallelExecutor types.
 * (part of pe._core; see _core.c for the design). */
#include "_core.h"

#include <limits.h>
#include <pythread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* ---- Ctrl-C during a run ---------------------------------------------- */

/* A run releases the GIL, so Python's SIGINT handler only sets a flag that
 * nothing reads until the run ends. While a run is in progress on the main
 * thread, run_sigint is SIGINT's handler instead: it calls pe_interrupt()
 * (the run stops between ops, PE_ERR_CANCELLED) and chains to the handler
 * it replaced (Python's own C handler, so Python's signal machinery sees
 * the signal); after the run the old handler is back and
 * PyErr_CheckSignals() runs the Python-level handler, which raises
 * KeyboardInterrupt (not a pe error). Nothing is installed when SIGINT is
 * SIG_DFL or SIG_IGN (Ctrl-C then kills, or is ignored, as the user set),
 * or off the main thread (Python runs its handlers there only). */
static struct sigaction g_sigint_prev;
static volatile sig_atomic_t g_sigint_hit;

static void run_sigint(int sig, siginfo_t *info, void *uctx) {
    g_sigint_hit = 1;
    pe_interrupt();
    if (g_sigint_prev.sa_flags & SA_SIGINFO)
        g_sigint_prev.sa_sigaction(sig, info, uctx);
    else
        g_sigint_prev.sa_handler(sig);
}

/* threading.main_thread().ident, once (0 when unknown) */
static unsigned long main_thread_ident(void) {
    static unsigned long ident;
    if (ident) return ident;
    PyObject *th = PyImport_ImportModule("threading");
    PyObject *m = th ? PyObject_CallMethod(th, "main_thread", NULL) : NULL;
    PyObject *i = m ? PyObject_GetAttrString(m, "ident") : NULL;
    if (i) ident = PyLong_AsUnsignedLong(i);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        ident = 0;
    }
    Py_XDECREF(i);
    Py_XDECREF(m);
    Py_XDECREF(th);
    return ident;
}

/* With the GIL, before a run: 1 when run_sigint was installed. */
static int sigint_begin(void) {
    if (PyThread_get_thread_ident() != main_thread_ident()) return 0;
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) != 0) return 0;
    if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN)) return 0;
    g_sigint_prev = cur;
    g_sigint_hit = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = run_sigint;
    sa.sa_flags = SA_SIGINFO | (cur.sa_flags & SA_ONSTACK);
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGINT, &sa, NULL) == 0;
}

/* With the GIL, after the run: puts the old handler back; -1 with the
 * exception of Python's SIGINT handler (KeyboardInterrupt) set when Ctrl-C
 * came during the run, else 0. */
static int sigint_end(int installed) {
    if (!installed) return 0;
    sigaction(SIGINT, &g_sigint_prev, NULL);
    if (!g_sigint_hit) return 0;
    g_sigint_hit = 0;
    return PyErr_CheckSignals();
}

/* ---- feeds ------------------------------------------------------------ */

/* The feeds of one run: names, tensors (borrowed from Tensor objects or
 * wrapping arrays), and the Python objects that keep them alive. */
typedef struct feedset {
    pe_feed *f;
    int n;
    pe_tensor **tmp;   /* tensors created here (wrapped arrays); freed with the set */
    int n_tmp;
    char **names;
    PyObject *keep;    /* list of arrays / Tensor objects */
} feedset;

static void feedset_free(feedset *fs) {
    for (int i = 0; i < fs->n_tmp; i++) pe_tensor_free(fs->tmp[i]);
    for (int i = 0; i < fs->n; i++) free(fs->names ? fs->names[i] : NULL);
    free(fs->tmp);
    free(fs->names);
    free(fs->f);
    Py_XDECREF(fs->keep);
    memset(fs, 0, sizeof *fs);
}

static int feedset_from_dict(PyObject *d, feedset *fs) {
    memset(fs, 0, sizeof *fs);
    if (!d || d == Py_None) return 0;
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "feed must be a dict {name: numpy array}, not %.80s", Py_TYPE(d)->tp_name);
        return -1;
    }
    Py_ssize_t n = PyDict_Size(d);
    fs->f = calloc((size_t)(n ? n : 1), sizeof *fs->f);
    fs->tmp = calloc((size_t)(n ? n : 1), sizeof *fs->tmp);
    fs->names = calloc((size_t)(n ? n : 1), sizeof *fs->names);
    fs->keep = PyList_New(0);
    if (!fs->f || !fs->tmp || !fs->names || !fs->keep) {
        feedset_free(fs);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *name = py_name_utf8(k, "feed name");
        if (!name) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "feed keys must be var names (str), not %.80s", Py_TYPE(k)->tp_name);
            feedset_free(fs);
            return -1;
        }
        char *nm = strdup(name);
        if (!nm) {
            feedset_free(fs);
            PyErr_NoMemory();
            return -1;
        }
        fs->names[fs->n] = nm;
        pe_tensor *t;
        PyObject *keeper;
        if (PyObject_TypeCheck(v, &TensorType)) {
            t = tensor_get((TensorObject *)v);
            keeper = v;
            Py_INCREF(keeper);
        } else {
            char what[300];
            snprintf(what, sizeof what, "feed '%s'", name);
            PyArrayObject *arr = pe_ready_array(v, what);
            t = arr ? wrap_array(arr) : NULL;
            keeper = (PyObject *)arr;
            if (t) fs->tmp[fs->n_tmp++] = t;
        }
        fs->f[fs->n].name = nm;
        fs->f[fs->n].tensor = t;
        fs->n++;
        if (t && keeper && PyList_Append(fs->keep, keeper) != 0) t = NULL;
        Py_XDECREF(keeper);
        if (!t) {
            feedset_free(fs);
            return -1;
        }
    }
    return 0;
}

static int fetch_tensors_new(pe_tensor ***out, int n) {
    *out = calloc((size_t)(n ? n : 1), sizeof **out);
    if (!*out) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!((*out)[i] = pe_tensor_new())) {
            for (int j = 0; j < i; j++) pe_tensor_free((*out)[j]);
            free(*out);
            raise_status(PE_ERR_NOMEM);
            return -1;
        }
    return 0;
}

static void fetch_tensors_free(pe_tensor **t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) pe_tensor_free(t[i]);
    free(t);
}

/* Hands the fetched tensors to Tensor objects (ownership moves; t is freed). */
static PyObject *fetch_list(pe_tensor **t, int n) {
    PyObject *l = PyList_New(n);
    if (!l) {
        fetch_tensors_free(t, n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        TensorObject *o = tensor_from_owned(t[i], NULL);
        t[i] = NULL;
        if (!o) {
            fetch_tensors_free(t, n);
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, (PyObject *)o);
    }
    free(t);
    return l;
}

/* ---- Executor --------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    pe_executor *ex;
    pe_place place;
    ProgramObject *prog;  /* the program the C executor has prepared (held) */
    ScopeObject *scope;   /* its scope (held) */
    uint64_t gen;
    int busy;
} ExecutorObject;

static PyObject *executor_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"place", NULL};
    PyObject *place_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &place_o)) return NULL;
    pe_place place;
    if (parse_place(place_o, &place)) return NULL;
    ExecutorObject *self = (ExecutorObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->place = place;
    self->ex = pe_executor_new(place);
    if (!self->ex) {
        Py_DECREF(self);
#ifdef PE_WITH_CUDA
        pe_status cuda_st = PE_ERR_INVALID; /* a device id out of range */
#else
        pe_status cuda_st = PE_ERR_UNSUPPORTED; /* built without CUDA */
#endif
        return raise_status(place.kind == PE_PLACE_CPU ? PE_ERR_NOMEM : cuda_st);
    }
    return (PyObject *)self;
}

/* Forgets the prepared (program, scope): the C executor frees its local
 * scope before the Python references are dropped. */
static void executor_unprepare(ExecutorObject *self) {
    if (self->ex) pe_executor_drop_local_scope(self->ex);
    if (self->prog) self->prog->n_users--;
    Py_CLEAR(self->prog);
    Py_CLEAR(self->scope);
}

static void executor_dealloc(ExecutorObject *self) {
    executor_unprepare(self);
    pe_executor_free(self->ex);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *executor_run(ExecutorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"program", "scope", "feed", "fetch", "block", NULL};
    PyObject *prog_o, *scope_o, *feed_o = Py_None, *fetch_o = Py_None;
    int block = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOi", kwlist, &prog_o, &scope_o, &feed_o, &fetch_o, &block))
        return NULL;
    ProgramObject *prog = as_program(prog_o, "Executor.run(program)");
    if (!prog) return NULL;
    if (!PyObject_TypeCheck(scope_o, &ScopeType)) {
        PyErr_Format(PyExc_TypeError, "Executor.run(scope): scope must be a Scope, not %.80s", Py_TYPE(scope_o)->tp_name);
        return NULL;
    }
    if (self->busy) return raise_msg(PE_ERR_INVALID, "Executor.run: this executor is already running (one run at a time)");
    ScopeObject *scope = (ScopeObject *)scope_o;
    feedset fs;
    if (feedset_from_dict(feed_o, &fs)) return NULL;
    strlist fetch;
    if (strlist_from(fetch_o, "fetch_list", &fetch)) {
        feedset_free(&fs);
        return NULL;
    }
    pe_tensor **out;
    if (fetch_tensors_new(&out, fetch.n)) {
        feedset_free(&fs);
        strlist_free(&fetch);
        return NULL;
    }
    if (self->prog != prog || self->scope != scope || self->gen != g_scope_gen) {
        executor_unprepare(self);
        self->prog = prog;
        self->scope = scope;
        Py_INCREF(prog);
        Py_INCREF(scope);
        prog->n_users++;
        self->gen = g_scope_gen;
    }
    self->busy = 1;
    pe_status st;
    int sig = sigint_begin();
    Py_BEGIN_ALLOW_THREADS
    st = pe_executor_run(self->ex, prog->p, block, scope->s, fs.f, fs.n, (const char *const *)fetch.s, fetch.n, out);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    feedset_free(&fs);
    int n_fetch = fetch.n;
    strlist_free(&fetch);
    if (sigint_end(sig) < 0) {
        fetch_tensors_free(out, n_fetch);
        return NULL;
    }
    if (st != PE_OK) {
        fetch_tensors_free(out, n_fetch);
        return raise_status(st);
    }
    return fetch_list(out, n_fetch);
}

static PyObject *executor_drop_local_scope(ExecutorObject *self, PyObject *unused) {
    (void)unused;
    if (self->busy) return raise_msg(PE_ERR_INVALID, "Executor: cannot drop scopes while running");
    executor_unprepare(self);
    Py_RETURN_NONE;
}

static PyObject *executor_set_num_threads(ExecutorObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    pe_executor_set_num_threads(self->ex, (int)n);
    Py_RETURN_NONE;
}

static PyObject *executor_get_place(ExecutorObject *self, void *c) {
    (void)c;
    return place_tuple(self->place);
}

static PyMethodDef executor_methods[] = {
    {"run", (PyCFunction)(void (*)(void))executor_run, METH_VARARGS | METH_KEYWORDS,
     "run(program, scope, feed=None, fetch=None, block=0) -> [Tensor]: run one block on this place."},
    {"drop_local_scope", (PyCFunction)executor_drop_local_scope, METH_NOARGS, "Free the temporaries and the prepared block."},
    {"set_num_threads", (PyCFunction)executor_set_num_threads, METH_O, "Threads per kernel."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef executor_getset[] = {{"place", (getter)executor_get_place, NULL, "(kind, id)", NULL},
                                        {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject ExecutorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pe._core.Executor",
    .tp_basicsize = sizeof(ExecutorObject),
    .tp_dealloc = (destructor)executor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Executor(place=None): the single-place executor.",
    .tp_methods = executor_methods,
    .tp_getset = executor_getset,
    .tp_new = executor_new,
};

/* ---- ParallelExecutor ------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    pe_parallel_executor *pe;
    ProgramObject *prog;
    ScopeObject *scope;
    PyObject *share;   /* the share_vars_from ParallelExecutor */
    PyObject *keep;    /* str objects whose UTF-8 the options borrow */
    uint64_t gen;
    int busy;
} PEObject;


static int dict_int(PyObject *d, const char *key, int *out) {
    if (!d || d == Py_None) return 0;
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    long x = PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Format(PyExc_TypeError, "strategy field %s must be an int", key);
            return -1;
        }
        PyErr_Clear();
        x = LONG_MAX; /* refused below, as any value out of an int's range */
    }
    if (x < INT_MIN || x > INT_MAX) {
        raise_msg(PE_ERR_INVALID, "ExecutionStrategy.%s is out of range: it does not fit a C int", key);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int dict_bool(PyObject *d, const char *key, bool *out) {
    if (!d || d == Py_None) return 0;
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    int b = PyObject_IsTrue(v);
    if (b < 0) return -1;
    *out = b != 0;
    return 0;
}

static int dict_double(PyObject *d, const char *key, double *out) {
    if (!d || d == Py_None) return 0;
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "strategy field %s must be a number", key);
        return -1;
    }
    *out = x;
    return 0;
}

/* An enum field f of d: its value name or its int (out of range: left to
 * pe_pe_options_check, which names it). The allowed names are worded only
 * for an error. */
static int dict_enum(PyObject *d, const pe_strategy_field *f, int *out) {
    if (!d || d == Py_None) return 0;
    PyObject *v = PyDict_GetItemString(d, f->name);
    if (!v || v == Py_None) return 0;
    char allowed[256];
    if (PyUnicode_Check(v)) {
        const char *s = PyUnicode_AsUTF8(v);
        for (int i = 0; s && i < f->n_names; i++)
            if (!strcmp(s, f->names[i])) {
                *out = i;
                return 0;
            }
        pe_strategy_field_names(f, allowed, sizeof allowed);
        raise_msg(PE_ERR_INVALID, "BuildStrategy.%s = '%s' is not a known value: allowed %s", f->name, s ? s : "?",
                  allowed);
        return -1;
    }
    long x = PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred()) {
        pe_strategy_field_names(f, allowed, sizeof allowed);
        PyErr_Format(PyExc_TypeError, "strategy field %s must be a str (%s) or an int", f->name, allowed);
        return -1;
    }
    *out = x < INT_MIN ? INT_MIN : x > INT_MAX ? INT_MAX : (int)x;
    return 0;
}

/* The strategy fields of the exec_strategy / build_strategy dicts (absent
 * or None: o's value) into o, by the library's field table
 * (pe_strategy_fields); debug_graphviz_path is left to the caller. */
static int strategies_from_dicts(PyObject *es, PyObject *bs, pe_pe_options *o) {
    for (const pe_strategy_field *f = pe_strategy_fields; f->name; f++) {
        PyObject *d = f->build ? bs : es;
        void *p = pe_strategy_field_ptr(f, &o->exec_strategy, &o->build_strategy);
        int rc = 0;
        switch (f->kind) {
        case PE_FIELD_BOOL: rc = dict_bool(d, f->name, p); break;
        case PE_FIELD_INT: rc = dict_int(d, f->name, p); break;
        case PE_FIELD_DOUBLE: rc = dict_double(d, f->name, p); break;
        case PE_FIELD_ENUM: rc = dict_enum(d, f, p); break;
        }
        if (rc) return -1;
    }
    return 0;
}

/* (d[0], d[1]) taking both references, or NULL (with the exception a failed
 * fill left) when either is NULL, releasing the other. */
static PyObject *dict_pair(PyObject *d[2]) {
    if (!d[0] || !d[1]) {
        Py_XDECREF(d[0]);
        Py_XDECREF(d[1]);
        return NULL;
    }
    return Py_BuildValue("(NN)", d[0], d[1]);
}

/* strategy_defaults() -> (exec_strategy dict, build_strategy dict): every
 * field of the table at pe_pe_options_default's value (enums by name), the
 * defaults pe.static's strategy classes start from. */
PyObject *py_strategy_defaults(PyObject *mod, PyObject *noargs) {
    (void)mod;
    (void)noargs;
    pe_pe_options o;
    pe_pe_options_default(&o);
    PyObject *d[2] = {PyDict_New(), PyDict_New()};
    for (const pe_strategy_field *f = pe_strategy_fields; d[0] && d[1] && f->name; f++) {
        const void *p = pe_strategy_field_ptr(f, &o.exec_strategy, &o.build_strategy);
        PyObject *v = NULL;
        switch (f->kind) {
        case PE_FIELD_BOOL: v = PyBool_FromLong(*(const bool *)p); break;
        case PE_FIELD_INT: v = PyLong_FromLong(*(const int *)p); break;
        case PE_FIELD_DOUBLE: v = PyFloat_FromDouble(*(const double *)p); break;
        case PE_FIELD_ENUM: {
            int i = *(const int *)p;
            v = PyUnicode_FromString(i >= 0 && i < f->n_names ? f->names[i] : "?");
            break;
        }
        }
        if (!v || PyDict_SetItemString(d[f->build], f->name, v)) Py_CLEAR(d[f->build]);
        Py_XDECREF(v);
    }
    return dict_pair(d);
}

/* d[key] (d a strategy dict or None) into *out when it is a non-empty str
 * (absent, None or "": *out unchanged); the str is appended to keep, which
 * lives as long as the executor. -1 with an exception. */
static int dict_path(PyObject *d, const char *key, PyObject *keep, const char **out) {
    PyObject *v = d != Py_None ? PyDict_GetItemString(d, key) : NULL;
    if (!v || v == Py_None) return 0;
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", key);
        return -1;
    }
    if (PyUnicode_GetLength(v) == 0) return 0;
    const char *s = PyUnicode_AsUTF8(v);
    if (!s || PyList_Append(keep, v)) return -1;
    *out = s;
    return 0;
}

/* The defaults with the dicts' values over them (None: the defaults),
 * checked as pe_parallel_executor_new checks them. -1 with an exception. */
static int checked_options(PyObject *es, PyObject *bs, const char *what, pe_pe_options *opt) {
    if ((es != Py_None && !PyDict_Check(es)) || (bs != Py_None && !PyDict_Check(bs))) {
        PyErr_Format(PyExc_TypeError, "%s: exec_strategy / build_strategy must be dicts", what);
        return -1;
    }
    pe_pe_options_default(opt);
    if (strategies_from_dicts(es, bs, opt)) return -1;
    pe_status st = pe_pe_options_check(opt);
    if (st != PE_OK) {
        raise_status(st);
        return -1;
    }
    return 0;
}

/* check_strategy(exec_strategy=None, build_strategy=None): the strategy
 * setters' check — the dicts' values over the defaults, checked as
 * pe_parallel_executor_new checks them (same words). */
PyObject *pe_check_strategy(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"exec_strategy", "build_strategy", NULL};
    PyObject *es = Py_None, *bs = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO", kwlist, &es, &bs)) return NULL;
    pe_pe_options opt;
    if (checked_options(es, bs, "check_strategy", &opt)) return NULL;
    Py_RETURN_NONE;
}

/* strategy_refused() -> (exec dict, build dict), name -> (default, why):
 * Paddle's switches PE refuses (pe_strategy_refused_fields), for the
 * strategy classes' setters. */
PyObject *py_strategy_refused(PyObject *mod, PyObject *noargs) {
    (void)mod;
    (void)noargs;
    PyObject *d[2] = {PyDict_New(), PyDict_New()};
    for (const pe_strategy_refused *f = pe_strategy_refused_fields; d[0] && d[1] && f->name; f++) {
        PyObject *v = f->boolean ? Py_BuildValue("(Os)", f->dflt ? Py_True : Py_False, f->why)
                                 : Py_BuildValue("(is)", f->dflt, f->why);
        if (!v || PyDict_SetItemString(d[f->build], f->name, v)) Py_CLEAR(d[f->build]);
        Py_XDECREF(v);
    }
    return dict_pair(d);
}

/* fuse_program(program, build_strategy=None, protect=None) -> (Program, [(pass, n_fused)]):
 * the program-level passes the build strategy switches on (pe_build_program:
 * the fusions; program untouched, protect's vars kept), as a new Program. */
PyObject *py_fuse_program(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"program", "build_strategy", "protect", NULL};
    PyObject *prog_o, *bs = Py_None, *protect_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", kwlist, &prog_o, &bs, &protect_o)) return NULL;
    ProgramObject *prog = as_program(prog_o, "fuse_program(program)");
    if (!prog) return NULL;
    pe_pe_options opt;
    if (checked_options(Py_None, bs, "fuse_program", &opt)) return NULL;
    strlist protect;
    if (strlist_from(protect_o, "protect", &protect)) return NULL;
    pe_build_opts bo = {.n_places = 1, .bs = &opt.build_strategy, .protect = (const char *const *)protect.s,
                        .n_protect = protect.n};
    pe_program *out = NULL;
    pe_build_report rep;
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_build_program(prog->p, &bo, &out, &rep);
    Py_END_ALLOW_THREADS
    strlist_free(&protect);
    if (st != PE_OK) return raise_status(st);
    PyObject *stats = PyList_New(0);
    for (int i = 0; stats && i < rep.n; i++) {
        PyObject *t = Py_BuildValue("(si)", rep.s[i].name, rep.s[i].n_fused);
        if (!t || PyList_Append(stats, t)) Py_CLEAR(stats);
        Py_XDECREF(t);
    }
    if (!stats) {
        pe_program_free(out);
        return NULL;
    }
    ProgramObject *po = program_wrap(out); /* owns out, frees it on failure */
    if (!po) {
        Py_DECREF(stats);
        return NULL;
    }
    return Py_BuildValue("(NN)", (PyObject *)po, stats);
}

static PyObject *pe_new_(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"places", "program", "scope", "loss_name", "share_vars_from", "exec_strategy",
                             "build_strategy", "num_trainers", "trainer_id", NULL};
    PyObject *places_o, *prog_o, *scope_o, *loss_o = Py_None, *share_o = Py_None, *es = Py_None, *bs = Py_None;
    int num_trainers = 1, trainer_id = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OOOOii", kwlist, &places_o, &prog_o, &scope_o, &loss_o, &share_o,
                                     &es, &bs, &num_trainers, &trainer_id))
        return NULL;
    ProgramObject *prog = as_program(prog_o, "ParallelExecutor(program)");
    if (!prog) return NULL;
    if (!PyObject_TypeCheck(scope_o, &ScopeType)) {
        PyErr_Format(PyExc_TypeError, "ParallelExecutor(scope): scope must be a Scope, not %.80s", Py_TYPE(scope_o)->tp_name);
        return NULL;
    }
    if (share_o != Py_None && !PyObject_TypeCheck(share_o, &PEType)) {
        PyErr_Format(PyExc_TypeError, "share_vars_from must be a ParallelExecutor, not %.80s", Py_TYPE(share_o)->tp_name);
        return NULL;
    }
    if ((es != Py_None && !PyDict_Check(es)) || (bs != Py_None && !PyDict_Check(bs))) {
        PyErr_SetString(PyExc_TypeError, "exec_strategy / build_strategy must be dicts (the Python layer converts them)");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(places_o, "places must be a list of places");
    if (!fast) return NULL;
    Py_ssize_t np_ = PySequence_Fast_GET_SIZE(fast);
    if (np_ < 1 || np_ > PE_MAX_PLACES) {
        Py_DECREF(fast);
        return raise_msg(PE_ERR_INVALID, "ParallelExecutor: %zd places given, need 1..%d", np_, PE_MAX_PLACES);
    }
    pe_place places[PE_MAX_PLACES];
    for (Py_ssize_t i = 0; i < np_; i++)
        if (parse_place(PySequence_Fast_GET_ITEM(fast, i), &places[i])) {
            Py_DECREF(fast);
            return NULL;
        }
    Py_DECREF(fast);

    pe_pe_options opt;
    pe_pe_options_default(&opt);
    PyObject *keep = PyList_New(0);
    if (!keep) return NULL;
    if (loss_o != Py_None) {
        if (!PyUnicode_Check(loss_o)) {
            Py_DECREF(keep);
            PyErr_SetString(PyExc_TypeError, "loss_name must be a str or None");
            return NULL;
        }
        opt.loss_name = PyUnicode_AsUTF8(loss_o);
        if (!opt.loss_name || PyList_Append(keep, loss_o)) {
            Py_DECREF(keep);
            return NULL;
        }
    }
    if (strategies_from_dicts(es, bs, &opt)) {
        Py_DECREF(keep);
        return NULL;
    }
    if (dict_path(bs, "debug_graphviz_path", keep, &opt.build_strategy.debug_graphviz_path) ||
        dict_path(es, "timeline_path", keep, &opt.exec_strategy.timeline_path)) {
        Py_DECREF(keep);
        return NULL;
    }
    opt.num_trainers = num_trainers;
    opt.trainer_id = trainer_id;
    opt.share_vars_from = share_o != Py_None ? ((PEObject *)share_o)->pe : NULL;

    PEObject *self = (PEObject *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(keep);
        return NULL;
    }
    self->keep = keep;
    pe_status st;
    pe_parallel_executor *pex = NULL;
    ScopeObject *scope = (ScopeObject *)scope_o;
    Py_BEGIN_ALLOW_THREADS
    st = pe_parallel_executor_new(places, (int)np_, prog->p, scope->s, &opt, &pex);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) {
        Py_DECREF(self);
        return raise_status(st);
    }
    self->pe = pex;
    self->prog = prog;
    Py_INCREF(prog);
    prog->n_users++;
    self->scope = scope;
    Py_INCREF(scope);
    if (share_o != Py_None) {
        self->share = share_o;
        Py_INCREF(share_o);
    }
    self->gen = g_scope_gen;
    return (PyObject *)self;
}

static void pe_dealloc_(PEObject *self) {
    pe_parallel_executor_free(self->pe); /* before the scope, program and source it borrows */
    if (self->prog) self->prog->n_users--;
    Py_XDECREF(self->prog);
    Py_XDECREF(self->scope);
    Py_XDECREF(self->share);
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pe_run_(PEObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"feed", "fetch", "return_merged", "take", NULL};
    PyObject *feed_o = Py_None, *fetch_o = Py_None;
    int merged = 1, take = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOpp", kwlist, &feed_o, &fetch_o, &merged, &take)) return NULL;
    if (self->busy) return raise_msg(PE_ERR_INVALID, "ParallelExecutor.run: already running (one run at a time)");
    int n = pe_device_count(self->pe);
    int is_list = feed_o != Py_None && !PyDict_Check(feed_o);
    feedset *fs = NULL;
    int n_sets = 0;
    if (is_list) {
        PyObject *fast = PySequence_Fast(feed_o, "feed must be a dict or a list of dicts (one per place)");
        if (!fast) return NULL;
        n_sets = (int)PySequence_Fast_GET_SIZE(fast);
        fs = calloc((size_t)(n_sets ? n_sets : 1), sizeof *fs);
        if (!fs) {
            Py_DECREF(fast);
            return PyErr_NoMemory();
        }
        for (int i = 0; i < n_sets; i++)
            if (feedset_from_dict(PySequence_Fast_GET_ITEM(fast, i), &fs[i])) {
                for (int j = 0; j < i; j++) feedset_free(&fs[j]);
                free(fs);
                Py_DECREF(fast);
                return NULL;
            }
        Py_DECREF(fast);
    } else {
        n_sets = 1;
        fs = calloc(1, sizeof *fs);
        if (!fs) return PyErr_NoMemory();
        if (feedset_from_dict(feed_o, &fs[0])) {
            free(fs);
            return NULL;
        }
    }
    strlist fetch;
    pe_tensor **out = NULL;
    int n_out = 0;
    const pe_feed **lists = NULL;
    int *counts = NULL;
    PyObject *result = NULL;
    if (strlist_from(fetch_o, "fetch_list", &fetch)) goto done_feeds;
    n_out = merged ? fetch.n : fetch.n * n;
    if (fetch_tensors_new(&out, n_out)) {
        out = NULL;
        goto done;
    }
    if (is_list) {
        lists = calloc((size_t)(n_sets ? n_sets : 1), sizeof *lists);
        counts = calloc((size_t)(n_sets ? n_sets : 1), sizeof *counts);
        if (!lists || !counts) {
            PyErr_NoMemory();
            goto done;
        }
        for (int i = 0; i < n_sets; i++) {
            lists[i] = fs[i].f;
            counts[i] = fs[i].n;
        }
    }
    if (self->gen != g_scope_gen) {
        pe_drop_local_exe_scopes(self->pe);
        self->gen = g_scope_gen;
    }
    self->busy = 1;
    pe_status st;
    int sig = sigint_begin();
    Py_BEGIN_ALLOW_THREADS
    if (is_list)
        st = pe_run_list(self->pe, lists, counts, n_sets, (const char *const *)fetch.s, fetch.n, merged != 0, out);
    else if (take && merged)
        st = pe_run_take(self->pe, fs[0].f, fs[0].n, (const char *const *)fetch.s, fetch.n, out);
    else
        st = pe_run(self->pe, fs[0].f, fs[0].n, (const char *const *)fetch.s, fetch.n, merged != 0, out);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (sigint_end(sig) < 0) goto done;
    if (st != PE_OK) {
        raise_status(st);
        goto done;
    }
    {
        PyObject *flat = fetch_list(out, n_out);
        out = NULL;
        if (!flat || merged) {
            result = flat;
            goto done;
        }
        result = PyList_New(fetch.n);
        for (int i = 0; result && i < fetch.n; i++) {
            PyObject *sub = PyList_GetSlice(flat, (Py_ssize_t)i * n, (Py_ssize_t)(i + 1) * n);
            if (!sub) Py_CLEAR(result);
            else PyList_SET_ITEM(result, i, sub);
        }
        Py_DECREF(flat);
    }
done:
    fetch_tensors_free(out, n_out);
    strlist_free(&fetch);
    free(lists);
    free(counts);
done_feeds:
    for (int i = 0; i < n_sets; i++) feedset_free(&fs[i]);
    free(fs);
    return result;
}

static PyObject *pe_drop_(PEObject *self, PyObject *unused) {
    (void)unused;
    if (self->busy) return raise_msg(PE_ERR_INVALID, "ParallelExecutor: cannot drop scopes while running");
    pe_drop_local_exe_scopes(self->pe);
    Py_RETURN_NONE;
}

static PyObject *pe_local_bytes_(PEObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromSize_t(pe_local_exe_scopes_bytes(self->pe));
}

static PyObject *pe_place_scope_(PEObject *self, PyObject *arg) {
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    pe_scope *s = pe_place_scope(self->pe, (int)i);
    if (!s) return raise_msg(PE_ERR_INVALID, "place_scope(%ld): the executor has %d places", i, pe_device_count(self->pe));
    if (s == self->scope->s) {
        Py_INCREF(self->scope);
        return (PyObject *)self->scope;
    }
    return (PyObject *)scope_borrowed(s, (PyObject *)self);
}

/* trainers_sum(list of floats) -> list: pe_trainers_allreduce in float64 */
static PyObject *pe_trainers_sum_(PEObject *self, PyObject *arg) {
    if (self->busy) return raise_msg(PE_ERR_INVALID, "ParallelExecutor.trainers_sum: the executor is running");
    PyObject *seq = PySequence_Fast(arg, "trainers_sum: expected a sequence of numbers");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (v[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            free(v);
            return NULL;
        }
    }
    Py_DECREF(seq);
    pe_status st;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = pe_trainers_allreduce(self->pe, v, (int64_t)n, PE_DTYPE_FP64);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != PE_OK) {
        free(v);
        return raise_status(st);
    }
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *f = PyFloat_FromDouble(v[i]);
        if (!f) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, f);
    }
    free(v);
    return out;
}

static PyObject *pe_write_timeline_(PEObject *self, PyObject *args) {
    const char *path = NULL;
    if (!PyArg_ParseTuple(args, "|z", &path)) return NULL;
    if (self->busy) return raise_msg(PE_ERR_INVALID, "ParallelExecutor: cannot write the timeline while running");
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_pe_write_timeline(self->pe, path);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *pe_get_timeline_path(PEObject *self, void *c) {
    (void)c;
    const char *p = pe_pe_timeline_path(self->pe);
    if (!p) Py_RETURN_NONE;
    return PyUnicode_FromString(p);
}

static PyObject *pe_get_device_count(PEObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(pe_device_count(self->pe));
}

static PyMethodDef pe_methods[] = {
    {"run", (PyCFunction)(void (*)(void))pe_run_, METH_VARARGS | METH_KEYWORDS,
     "run(feed=None, fetch=None, return_merged=True, take=False): dict feed (split along axis 0) or list of dicts (one "
     "per place); take: a dict feed's fetches on one CPU place take the vars' buffers (no copy; pe_run_take)."},
    {"drop_local_exe_scopes", (PyCFunction)pe_drop_, METH_NOARGS, "Free every place's temporaries now."},
    {"local_exe_scopes_bytes", (PyCFunction)pe_local_bytes_, METH_NOARGS, "Bytes held by the local execution scopes."},
    {"place_scope", (PyCFunction)pe_place_scope_, METH_O, "place_scope(i): the scope of place i."},
    {"trainers_sum", (PyCFunction)pe_trainers_sum_, METH_O,
     "trainers_sum(values): the sums of a list of floats over the trainers (num_trainers > 1), in trainer order."},
    {"write_timeline", (PyCFunction)pe_write_timeline_, METH_VARARGS,
     "write_timeline(path=None): the timeline so far as a Chrome trace (default: timeline_path's file)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef pe_getset[] = {{"device_count", (getter)pe_get_device_count, NULL, "number of places", NULL},
                                  {"timeline_path", (getter)pe_get_timeline_path, NULL,
                                   "the timeline's file, or None when it is off", NULL},
                                  {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject PEType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pe._core.ParallelExecutor",
    .tp_basicsize = sizeof(PEObject),
    .tp_dealloc = (destructor)pe_dealloc_,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ParallelExecutor(places, program, scope, loss_name=None, share_vars_from=None, exec_strategy=None, "
              "build_strategy=None, num_trainers=1, trainer_id=0)",
    .tp_methods = pe_methods,
    .tp_getset = pe_getset,
    .tp_new = pe_new_,
};

