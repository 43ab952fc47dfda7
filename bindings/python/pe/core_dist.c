/* bindings/python/pe/core_dist.c — the process world for pe.distributed:
 * _core.world_init / world_allreduce / ... over pe/world.h.
 *
 * What: one pe_world per process (MPI_COMM_WORLD), made by world_init and
 * freed by world_shutdown (pe.distributed registers it with atexit, so MPI
 * is finalized at a clean exit); blocking collectives on numpy arrays in
 * place, and one non-blocking one: world_allreduce_start(array) returns a
 * work handle (wait(), is_completed()) over the comm backend's work, which
 * holds the array until the sum is in it (pe.DataParallel starts each
 * gradient bucket's sum with it during backward).
 *
 * How: arrays must be numpy ndarrays that are C-contiguous, aligned,
 * native-endian and (written ones) writeable, of a dtype PE sums (float32,
 * float64, int32, int64): the collective reads and writes their memory
 * directly, with the GIL released. pe.distributed checks the same things
 * first, on every rank together, so a wrong argument is an error on every
 * rank; these checks are the last guard.
 *
 * Why here: the Python layer stays pure Python over this small surface;
 * the extension reaches the MPI backend only through include/pe/world.h.
 */
#include "_core.h"

static pe_world *g_world;

static PyObject *py_world_available(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyBool_FromLong(pe_world_available());
}

static PyObject *py_world_init(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    if (!g_world) {
        pe_status st;
        Py_BEGIN_ALLOW_THREADS
        st = pe_world_new(&g_world);
        Py_END_ALLOW_THREADS
        if (st != PE_OK) return raise_status(st);
    }
    return Py_BuildValue("(ii)", pe_world_rank(g_world), pe_world_size(g_world));
}

static PyObject *py_world_shutdown(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    pe_world *w = g_world;
    g_world = NULL;
    Py_BEGIN_ALLOW_THREADS
    pe_world_free(w);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static pe_world *need_world(const char *what) {
    if (!g_world) raise_msg(PE_ERR_INVALID, "%s: the process world is not initialized (call init_parallel_env())", what);
    return g_world;
}

/* arr as the buffer of a collective: 0 and *dt, *count, or -1 + exception. */
static int check_array(PyObject *o, const char *what, int writeable, pe_dtype *dt, int64_t *count) {
    if (!PyArray_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a numpy.ndarray, got %s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    if (pe_from_npy(PyArray_TYPE(a), dt) != 0 || !(*dt == PE_DTYPE_FP32 || *dt == PE_DTYPE_FP64 ||
                                                  *dt == PE_DTYPE_INT32 || *dt == PE_DTYPE_INT64)) {
        raise_msg(PE_ERR_INVALID, "%s: dtype must be float32, float64, int32 or int64", what);
        return -1;
    }
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a) || !PyArray_ISNOTSWAPPED(a)) {
        raise_msg(PE_ERR_INVALID, "%s: the array must be C-contiguous, aligned and native-endian "
                  "(numpy.ascontiguousarray makes one)", what);
        return -1;
    }
    if (writeable && !PyArray_ISWRITEABLE(a)) {
        raise_msg(PE_ERR_INVALID, "%s: the array is read-only", what);
        return -1;
    }
    *count = (int64_t)PyArray_SIZE(a);
    return 0;
}

static PyObject *py_world_allreduce(PyObject *m, PyObject *arg) {
    (void)m;
    pe_world *w = need_world("all_reduce");
    pe_dtype dt;
    int64_t n;
    if (!w || check_array(arg, "all_reduce", 1, &dt, &n)) return NULL;
    void *p = PyArray_DATA((PyArrayObject *)arg);
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_world_allreduce(w, p, n, dt);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* reduce and broadcast: (array, root). */
static PyObject *rooted(PyObject *args, const char *what, int is_reduce) {
    PyObject *arr;
    int root;
    if (!PyArg_ParseTuple(args, "Oi", &arr, &root)) return NULL;
    pe_world *w = need_world(what);
    pe_dtype dt;
    int64_t n;
    if (!w || check_array(arr, what, 1, &dt, &n)) return NULL;
    void *p = PyArray_DATA((PyArrayObject *)arr);
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = is_reduce ? pe_world_reduce(w, p, n, dt, root) : pe_world_broadcast(w, p, n, dt, root);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_world_reduce(PyObject *m, PyObject *args) {
    (void)m;
    return rooted(args, "reduce", 1);
}

static PyObject *py_world_broadcast(PyObject *m, PyObject *args) {
    (void)m;
    return rooted(args, "broadcast", 0);
}

static PyObject *py_world_allgather(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *send, *recv;
    if (!PyArg_ParseTuple(args, "OO", &send, &recv)) return NULL;
    pe_world *w = need_world("all_gather");
    pe_dtype dt, rdt;
    int64_t n, rn;
    if (!w || check_array(send, "all_gather", 0, &dt, &n) || check_array(recv, "all_gather (output)", 1, &rdt, &rn))
        return NULL;
    int size = pe_world_size(w);
    if (rdt != dt || rn != n * size)
        return raise_msg(PE_ERR_INVALID, "all_gather: the output must be %d x %lld elements of the input's dtype",
                         size, (long long)n);
    const void *s = PyArray_DATA((PyArrayObject *)send);
    void *r = PyArray_DATA((PyArrayObject *)recv);
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_world_allgather(w, s, r, n, dt);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_world_barrier(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    pe_world *w = need_world("barrier");
    if (!w) return NULL;
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_world_barrier(w);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* ---- a started all_reduce: _core.WorldWork ------------------------------------ */

typedef struct {
    PyObject_HEAD
    pe_world_work *h; /* NULL once freed */
    PyObject *arr;    /* the buffer, alive until the work is done */
} WorldWork;

static void worldwork_release(WorldWork *self) {
    pe_world_work *h = self->h;
    self->h = NULL;
    if (h) {
        Py_BEGIN_ALLOW_THREADS
        pe_world_work_free(h); /* waits for a pending sum: its buffer is self->arr */
        Py_END_ALLOW_THREADS
    }
    Py_CLEAR(self->arr);
}

static void worldwork_dealloc(WorldWork *self) {
    worldwork_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *worldwork_wait(WorldWork *self, PyObject *unused) {
    (void)unused;
    if (!self->h) return raise_msg(PE_ERR_INVALID, "all_reduce: wait() on a work already waited for and released");
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_world_work_wait(self->h);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) {
        PyObject *r = raise_status(st);
        worldwork_release(self);
        return r;
    }
    worldwork_release(self);
    Py_RETURN_NONE;
}

static PyObject *worldwork_is_completed(WorldWork *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(!self->h || pe_world_work_test(self->h));
}

static PyMethodDef worldwork_methods[] = {
    {"wait", (PyCFunction)worldwork_wait, METH_NOARGS,
     "wait(): returns when the sum is in the array (raises what failed, on every rank alike)."},
    {"is_completed", (PyCFunction)worldwork_is_completed, METH_NOARGS, "is_completed(): whether it is done."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject WorldWorkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pe._core.WorldWork",
    .tp_basicsize = sizeof(WorldWork),
    .tp_dealloc = (destructor)worldwork_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A started all_reduce (world_allreduce_start): wait(), is_completed().",
    .tp_methods = worldwork_methods,
};

static PyObject *py_world_allreduce_start(PyObject *m, PyObject *arg) {
    (void)m;
    if (!WorldWorkType.tp_dict && PyType_Ready(&WorldWorkType) < 0) return NULL;
    pe_world *w = need_world("all_reduce");
    pe_dtype dt;
    int64_t n;
    if (!w || check_array(arg, "all_reduce", 1, &dt, &n)) return NULL;
    WorldWork *self = PyObject_New(WorldWork, &WorldWorkType);
    if (!self) return NULL;
    self->h = NULL;
    Py_INCREF(arg);
    self->arr = arg;
    void *p = PyArray_DATA((PyArrayObject *)arg);
    pe_status st;
    pe_world_work *h = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = pe_world_allreduce_start(w, p, n, dt, &h);
    Py_END_ALLOW_THREADS
    if (st != PE_OK) {
        PyObject *r = raise_status(st);
        Py_DECREF(self);
        return r;
    }
    self->h = h;
    return (PyObject *)self;
}

/* exe.close() of a parameter-server trainer: COMPLETE to every pserver (pe/pserver.h) */
static PyObject *py_ps_close(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    pe_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pe_ps_trainer_close();
    Py_END_ALLOW_THREADS
    if (st != PE_OK) return raise_status(st);
    Py_RETURN_NONE;
}

PyMethodDef g_world_methods[] = {
    {"ps_close", py_ps_close, METH_NOARGS, "ps_close(): this trainer leaves every pserver it talked to (exe.close())."},
    {"world_available", py_world_available, METH_NOARGS, "Whether PE was built with MPI (pe/world.h)."},
    {"world_init", py_world_init, METH_NOARGS, "world_init() -> (rank, size) of MPI_COMM_WORLD; idempotent."},
    {"world_shutdown", py_world_shutdown, METH_NOARGS, "Frees the process world (MPI_Finalize at exit)."},
    {"world_allreduce", py_world_allreduce, METH_O, "world_allreduce(array): sum over ranks, in place."},
    {"world_allreduce_start", py_world_allreduce_start, METH_O,
     "world_allreduce_start(array) -> work: starts the sum over ranks in place; work.wait() when it is needed."},
    {"world_reduce", py_world_reduce, METH_VARARGS, "world_reduce(array, root): sum at root, in place."},
    {"world_broadcast", py_world_broadcast, METH_VARARGS, "world_broadcast(array, root): root's array everywhere."},
    {"world_allgather", py_world_allgather, METH_VARARGS, "world_allgather(send, recv): recv = every rank's send."},
    {"world_barrier", py_world_barrier, METH_NOARGS, "world_barrier(): returns when every rank has called it."},
    {NULL, NULL, 0, NULL}};
