/* runtime/comm/world.c — the process world of pe/world.h: blocking
 * collectives on host buffers over the MPI backend.
 *
 * What: one pe_comm of runtime/comm/mpi.c (a duplicate of MPI_COMM_WORLD
 * with its progress thread) behind a mutex; each call takes the next tag,
 * starts the collective, waits for its work and frees it.
 *
 * How: the ranks issue in the same order, so their tag counters agree; a
 * call that differs (op, dtype, count, root) is caught by mpi.c's header
 * exchange and fails on every rank. A work's failure message becomes the
 * call's pe_last_error(), prefixed with the collective's name.
 * pe_world_allreduce_start takes its tag and starts under the same mutex
 * but returns the backend's work (wrapped) instead of waiting for it.
 *
 * Why: pe.distributed (Python) needs a few blocking collectives on numpy
 * arrays; the extension sees include/ only, so this thin public surface
 * keeps the backend interface (runtime/comm/comm.h) private.
 */
#include "pe/world.h"
#include "runtime/comm/comm.h"

#include <pthread.h>
#include <stdlib.h>

#ifdef PE_WITH_MPI

struct pe_world {
    pe_comm *c;
    uint64_t next_tag;
    pthread_mutex_t mu;
};

bool pe_world_available(void) { return true; }

pe_status pe_world_new(pe_world **out) {
    if (!out) return pe_error(PE_ERR_INVALID, "pe_world_new: out is NULL");
    *out = NULL;
    pe_world *w = calloc(1, sizeof *w);
    if (!w) return pe_error(PE_ERR_NOMEM, "pe_world_new: out of memory");
    pe_status st = pe_comm_mpi_new(&w->c);
    if (st != PE_OK) {
        free(w);
        return pe_error_wrap(st, "the process world");
    }
    w->next_tag = 1;
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return PE_OK;
}

int pe_world_rank(const pe_world *w) { return w ? pe_comm_rank(w->c) : 0; }
int pe_world_size(const pe_world *w) { return w ? pe_comm_size(w->c) : 1; }

/* Waits for the work start() returned; the failure message names the call. */
static pe_status finish(pe_status st, pe_work *wk, const char *what) {
    if (st != PE_OK) return pe_error_wrap(st, "%s", what);
    st = pe_work_wait(wk);
    if (st != PE_OK) pe_error(st, "%s: %s", what, pe_work_message(wk));
    pe_work_free(wk);
    return st;
}

#define WORLD_CALL(what, start_expr)                                     \
    do {                                                                 \
        if (!w) return pe_error(PE_ERR_INVALID, "%s: world is NULL", what); \
        pthread_mutex_lock(&w->mu);                                      \
        uint64_t tag = w->next_tag++;                                    \
        pe_work *wk = NULL;                                              \
        pe_status st_ = (start_expr);                                    \
        st_ = finish(st_, wk, what);                                     \
        pthread_mutex_unlock(&w->mu);                                    \
        return st_;                                                      \
    } while (0)

pe_status pe_world_allreduce(pe_world *w, void *buf, int64_t count, pe_dtype dt) {
    WORLD_CALL("all_reduce", pe_comm_allreduce(w->c, buf, count, dt, tag, &wk));
}

pe_status pe_world_reduce(pe_world *w, void *buf, int64_t count, pe_dtype dt, int root) {
    WORLD_CALL("reduce", pe_comm_reduce(w->c, buf, count, dt, root, tag, &wk));
}

pe_status pe_world_broadcast(pe_world *w, void *buf, int64_t count, pe_dtype dt, int root) {
    WORLD_CALL("broadcast", pe_comm_broadcast(w->c, buf, count, dt, root, tag, &wk));
}

pe_status pe_world_allgather(pe_world *w, const void *send, void *recv, int64_t count, pe_dtype dt) {
    WORLD_CALL("all_gather", pe_comm_allgather(w->c, send, recv, count, dt, tag, &wk));
}

pe_status pe_world_barrier(pe_world *w) { WORLD_CALL("barrier", pe_comm_barrier(w->c, tag, &wk)); }

struct pe_world_work {
    pe_work *wk;
};

pe_status pe_world_allreduce_start(pe_world *w, void *buf, int64_t count, pe_dtype dt, pe_world_work **out) {
    if (!out) return pe_error(PE_ERR_INVALID, "all_reduce (started): out is NULL");
    *out = NULL;
    if (!w) return pe_error(PE_ERR_INVALID, "all_reduce (started): world is NULL");
    pe_world_work *h = calloc(1, sizeof *h);
    if (!h) return pe_error(PE_ERR_NOMEM, "all_reduce (started): out of memory");
    /* the tag and the start under the lock: the ranks' order of collectives
     * is the order of their starts, blocking calls' and this one's alike */
    pthread_mutex_lock(&w->mu);
    uint64_t tag = w->next_tag++;
    pe_status st = pe_comm_allreduce(w->c, buf, count, dt, tag, &h->wk);
    pthread_mutex_unlock(&w->mu);
    if (st != PE_OK) {
        free(h);
        return pe_error_wrap(st, "all_reduce (started)");
    }
    *out = h;
    return PE_OK;
}

pe_status pe_world_work_wait(pe_world_work *h) {
    if (!h) return pe_error(PE_ERR_INVALID, "all_reduce (started): work is NULL");
    pe_status st = pe_work_wait(h->wk);
    if (st != PE_OK) pe_error(st, "all_reduce: %s", pe_work_message(h->wk));
    return st;
}

bool pe_world_work_test(pe_world_work *h) { return h && pe_work_test(h->wk, NULL); }

void pe_world_work_free(pe_world_work *h) {
    if (!h) return;
    pe_work_wait(h->wk);
    pe_work_free(h->wk);
    free(h);
}

void pe_world_free(pe_world *w) {
    if (!w) return;
    pe_comm_free(w->c);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

#else /* no MPI in this build */

#define NO_MPI(what) \
    pe_error(PE_ERR_UNSUPPORTED, "%s: PE was built without MPI (libopenmpi-dev: scripts/setup.sh, -DPE_WITH_MPI=ON)", what)

bool pe_world_available(void) { return false; }
pe_status pe_world_new(pe_world **out) {
    if (out) *out = NULL;
    return NO_MPI("the process world");
}
int pe_world_rank(const pe_world *w) { return (void)w, 0; }
int pe_world_size(const pe_world *w) { return (void)w, 1; }
pe_status pe_world_allreduce(pe_world *w, void *buf, int64_t count, pe_dtype dt) {
    return (void)w, (void)buf, (void)count, (void)dt, NO_MPI("all_reduce");
}
pe_status pe_world_reduce(pe_world *w, void *buf, int64_t count, pe_dtype dt, int root) {
    return (void)w, (void)buf, (void)count, (void)dt, (void)root, NO_MPI("reduce");
}
pe_status pe_world_broadcast(pe_world *w, void *buf, int64_t count, pe_dtype dt, int root) {
    return (void)w, (void)buf, (void)count, (void)dt, (void)root, NO_MPI("broadcast");
}
pe_status pe_world_allgather(pe_world *w, const void *send, void *recv, int64_t count, pe_dtype dt) {
    return (void)w, (void)send, (void)recv, (void)count, (void)dt, NO_MPI("all_gather");
}
pe_status pe_world_barrier(pe_world *w) { return (void)w, NO_MPI("barrier"); }
pe_status pe_world_allreduce_start(pe_world *w, void *buf, int64_t count, pe_dtype dt, pe_world_work **out) {
    if (out) *out = NULL;
    return (void)w, (void)buf, (void)count, (void)dt, NO_MPI("all_reduce (started)");
}
pe_status pe_world_work_wait(pe_world_work *wk) { return (void)wk, NO_MPI("all_reduce (started)"); }
bool pe_world_work_test(pe_world_work *wk) { return (void)wk, false; }
void pe_world_work_free(pe_world_work *wk) { (void)wk; }
void pe_world_free(pe_world *w) { (void)w; }

#endif
