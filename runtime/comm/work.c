/* runtime/comm/work.c — work handles and the rank API's front end.
 *
 * A pe_work is a small state machine guarded by its own mutex: pending ->
 * done (once, by pe_work_complete from whichever thread finishes the
 * collective), then the callback (if one was set) runs on that thread
 * outside the lock, and waiters are woken. Two references keep it alive:
 * the caller's (pe_work_free) and the completion's, so a caller may free a
 * pending work and the backend still finishes it safely. Backends pool
 * works through pe_work_ops.release.
 *
 * The front end (pe_comm_allreduce ... pe_comm_barrier) checks one rank's
 * arguments the same way for every backend (dtype, root, counts, buffers)
 * and names backend, rank, op, dtype and sizes in every message. A rank
 * whose own arguments are wrong still tells the backend (args.err), so a
 * backend with a rendezvous fails the other ranks' works of that tag
 * instead of leaving them waiting for a call that never comes.
 */
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- work handles ---------------------------------------------------------- */

void pe_work_init_once(pe_work *w, const pe_work_ops *ops) {
    memset(w, 0, sizeof *w);
    w->ops = ops;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

void pe_work_reset(pe_work *w) {
    atomic_store_explicit(&w->done, 0, memory_order_relaxed);
    atomic_store_explicit(&w->refs, 2, memory_order_relaxed);
    w->st = PE_OK;
    w->cb = NULL;
    w->cb_user = NULL;
    w->cb_called = false;
    w->msg[0] = '\0';
}

void pe_work_destroy(pe_work *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

pe_work *pe_work_new(const pe_work_ops *ops) {
    pe_work *w = malloc(sizeof *w);
    if (!w) return NULL;
    pe_work_init_once(w, ops);
    pe_work_reset(w);
    return w;
}

pe_work *pe_work_new_for(const pe_work_ops *ops, void *backend) {
    pe_work *w = pe_work_new(ops);
    if (w) w->backend = backend;
    return w;
}

void *pe_work_backend(const pe_work *w) { return w->backend; }

void pe_work_retain(pe_work *w) { atomic_fetch_add_explicit(&w->refs, 1, memory_order_relaxed); }

static void unref(pe_work *w) {
    if (atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1) return;
    if (w->ops && w->ops->release) {
        w->ops->release(w);
    } else {
        pe_work_destroy(w);
        free(w);
    }
}

void pe_work_complete(pe_work *w, pe_status st, const char *msg) {
    pthread_mutex_lock(&w->mu);
    w->st = st;
    if (st != PE_OK) snprintf(w->msg, sizeof w->msg, "%s", msg ? msg : pe_status_name(st));
    atomic_store_explicit(&w->done, 1, memory_order_release);
    pe_work_cb cb = NULL;
    if (w->cb && !w->cb_called) {
        cb = w->cb;
        w->cb_called = true;
    }
    void *user = w->cb_user;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (cb) cb(w, st, user);
    unref(w);
}

pe_work *pe_work_new_done(pe_status st) {
    pe_work *w = pe_work_new(NULL);
    if (w) pe_work_complete(w, st, st != PE_OK ? pe_last_error() : NULL);
    return w;
}

static pe_status result(pe_work *w) {
    if (w->st == PE_OK) return PE_OK;
    return pe_error(w->st, "%s", w->msg);
}

pe_status pe_work_wait(pe_work *w) {
    if (!atomic_load_explicit(&w->done, memory_order_acquire)) {
        /* the backend's blocking wait (NCCL: the event), then the state
         * itself: another thread may be completing it right now */
        if (w->ops && w->ops->wait) w->ops->wait(w);
        pthread_mutex_lock(&w->mu);
        while (!atomic_load_explicit(&w->done, memory_order_relaxed)) pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
    }
    return result(w);
}

bool pe_work_test(pe_work *w, pe_status *st) {
    if (!atomic_load_explicit(&w->done, memory_order_acquire) && w->ops && w->ops->poll) w->ops->poll(w);
    if (!atomic_load_explicit(&w->done, memory_order_acquire)) return false;
    if (st) *st = result(w);
    return true;
}

void pe_work_on_done(pe_work *w, pe_work_cb cb, void *user) {
    pthread_mutex_lock(&w->mu);
    bool now = atomic_load_explicit(&w->done, memory_order_relaxed) && !w->cb_called;
    w->cb = cb;
    w->cb_user = user;
    if (now) w->cb_called = true;
    pe_status st = w->st;
    pthread_mutex_unlock(&w->mu);
    if (now) cb(w, st, user);
}

const char *pe_work_message(const pe_work *w) {
    return atomic_load_explicit(&w->done, memory_order_acquire) ? w->msg : "";
}

void pe_work_free(pe_work *w) {
    if (w) unref(w);
}

/* ---- the rank API ------------------------------------------------------------- */

static const char *const k_coll_names[PE_COLL_COUNT] = {"allreduce", "reduce", "broadcast", "allgather",
                                                        "reduce_scatter", "barrier"};

const char *pe_coll_name(pe_coll op) { return (unsigned)op < PE_COLL_COUNT ? k_coll_names[op] : "collective"; }

static const char *const k_red_names[PE_RED_COUNT] = {"sum", "max", "min", "prod"};

const char *pe_red_name(pe_red red) { return (unsigned)red < PE_RED_COUNT ? k_red_names[red] : "reduction"; }

int pe_comm_rank(const pe_comm *c) { return c->rank; }
int pe_comm_size(const pe_comm *c) { return c->size; }
const char *pe_comm_backend(const pe_comm *c) { return c->ops->name; }

const char *pe_coll_desc(const pe_comm *c, const pe_coll_args *a, char *buf, size_t size) {
    int o = snprintf(buf, size, "%s rank %d/%d: %s", c->ops->name, c->rank, c->size, pe_coll_name(a->op));
    if (o >= 0 && (size_t)o < size && a->red != PE_RED_SUM && (a->op == PE_COLL_ALLREDUCE || a->op == PE_COLL_REDUCE))
        o += snprintf(buf + o, size - (size_t)o, "(%s)", pe_red_name(a->red));
    if (o < 0 || (size_t)o >= size) return buf;
    const char *dn = pe_dtype_name(a->dt);
    switch (a->op) {
    case PE_COLL_BARRIER: break;
    case PE_COLL_ALLGATHER: o += snprintf(buf + o, size - (size_t)o, " of %lld %s elements per rank", (long long)a->count, dn); break;
    case PE_COLL_REDUCE_SCATTER:
        o += snprintf(buf + o, size - (size_t)o, " of %lld %s elements (%lld to this rank)", (long long)a->total, dn,
                      (long long)a->count);
        break;
    default: o += snprintf(buf + o, size - (size_t)o, " of %lld %s elements", (long long)a->count, dn); break;
    }
    if ((size_t)o >= size) return buf;
    if (a->op == PE_COLL_REDUCE) o += snprintf(buf + o, size - (size_t)o, " to root %d", a->root);
    if (a->op == PE_COLL_BROADCAST) o += snprintf(buf + o, size - (size_t)o, " from root %d", a->root);
    if ((size_t)o < size) snprintf(buf + o, size - (size_t)o, " (tag %llu)", (unsigned long long)a->tag);
    return buf;
}

static bool sum_dtype(pe_dtype dt) {
    return dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 || dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64;
}

/* This rank's own view of its arguments: "" when fine, else why not. */
static const char *check_args(const pe_comm *c, const pe_coll_args *a, pe_status *st, char *why, size_t size) {
    *st = PE_OK;
    why[0] = '\0';
    bool sums = a->op == PE_COLL_ALLREDUCE || a->op == PE_COLL_REDUCE || a->op == PE_COLL_REDUCE_SCATTER;
    if (a->op == PE_COLL_BARRIER) return why;
    if (sums && (unsigned)a->red >= PE_RED_COUNT) {
        *st = PE_ERR_INVALID;
        snprintf(why, size, "reduction %d is not sum, max, min or prod", (int)a->red);
    } else if (sums && !sum_dtype(a->dt)) {
        *st = PE_ERR_UNSUPPORTED;
        snprintf(why, size, "dtype %s is not supported (float32, float64, int32, int64)", pe_dtype_name(a->dt));
    } else if (!pe_dtype_valid((int)a->dt)) {
        *st = PE_ERR_INVALID;
        snprintf(why, size, "dtype %d is not a PE dtype", (int)a->dt);
    } else if ((a->op == PE_COLL_REDUCE || a->op == PE_COLL_BROADCAST) && (a->root < 0 || a->root >= c->size)) {
        *st = PE_ERR_INVALID;
        snprintf(why, size, "root %d is not a rank (0..%d)", a->root, c->size - 1);
    } else if (a->count < 0 || a->total < 0) {
        *st = PE_ERR_INVALID;
        snprintf(why, size, "negative element count");
    } else if ((a->count > 0 && !a->recv) || (a->total > 0 && !a->send)) {
        *st = PE_ERR_INVALID;
        snprintf(why, size, "buffer is NULL");
    }
    return why;
}

/* Checks, then starts a on c. */
static pe_status start(pe_comm *c, pe_coll_args *a, pe_work **out) {
    if (!out) return pe_error(PE_ERR_INVALID, "%s: out is NULL", pe_coll_name(a->op));
    *out = NULL;
    if (!c) return pe_error(PE_ERR_INVALID, "%s: communicator is NULL", pe_coll_name(a->op));
    char desc[192], why[256];
    pe_status st;
    check_args(c, a, &st, why, sizeof why);
    if (st != PE_OK) {
        pe_coll_desc(c, a, desc, sizeof desc);
        pe_error(st, "%s: %s", desc, why);
        /* tell the other ranks of this tag, then drop the work */
        a->err = st;
        a->err_msg = pe_last_error();
        pe_work *w = NULL;
        if (c->ops->start(c, a, &w) == PE_OK) pe_work_free(w);
        return pe_error(st, "%s: %s", desc, why);
    }
    return c->ops->start(c, a, out);
}

pe_status pe_comm_allreduce(pe_comm *c, void *buf, int64_t count, pe_dtype dt, uint64_t tag, pe_work **out) {
    pe_coll_args a = {.op = PE_COLL_ALLREDUCE, .recv = buf, .count = count, .dt = dt, .tag = tag};
    return start(c, &a, out);
}

pe_status pe_comm_allreduce_red(pe_comm *c, void *buf, int64_t count, pe_dtype dt, pe_red red, uint64_t tag,
                                pe_work **out) {
    pe_coll_args a = {.op = PE_COLL_ALLREDUCE, .recv = buf, .count = count, .dt = dt, .tag = tag, .red = red};
    return start(c, &a, out);
}

pe_status pe_comm_reduce(pe_comm *c, void *buf, int64_t count, pe_dtype dt, int root, uint64_t tag,
                         pe_work **out) {
    pe_coll_args a = {.op = PE_COLL_REDUCE, .recv = buf, .count = count, .dt = dt, .root = root, .tag = tag};
    return start(c, &a, out);
}

pe_status pe_comm_reduce_red(pe_comm *c, void *buf, int64_t count, pe_dtype dt, int root, pe_red red, uint64_t tag,
                             pe_work **out) {
    pe_coll_args a = {.op = PE_COLL_REDUCE, .recv = buf, .count = count, .dt = dt, .root = root, .tag = tag,
                      .red = red};
    return start(c, &a, out);
}

pe_status pe_comm_broadcast(pe_comm *c, void *buf, int64_t count, pe_dtype dt, int root, uint64_t tag,
                            pe_work **out) {
    pe_coll_args a = {.op = PE_COLL_BROADCAST, .recv = buf, .count = count, .dt = dt, .root = root, .tag = tag};
    return start(c, &a, out);
}

pe_status pe_comm_allgather(pe_comm *c, const void *send, void *recv, int64_t count, pe_dtype dt, uint64_t tag,
                            pe_work **out) {
    int64_t total = c ? count * c->size : 0;
    if (!send && recv && c && count > 0) send = (const char *)recv + (size_t)(c->rank * count) * pe_dtype_size(dt);
    pe_coll_args a = {.op = PE_COLL_ALLGATHER, .send = send, .recv = recv, .count = count, .total = total,
                      .dt = dt, .tag = tag};
    return start(c, &a, out);
}

pe_status pe_comm_reduce_scatterv(pe_comm *c, const void *send, void *recv, const int64_t *counts, pe_dtype dt,
                                  uint64_t tag, pe_work **out) {
    pe_coll_args a = {.op = PE_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .counts = counts, .dt = dt,
                      .tag = tag};
    if (c && counts) {
        for (int r = 0; r < c->size; r++) {
            if (counts[r] < 0) a.total = -1;
            if (a.total >= 0) a.total += counts[r];
        }
        a.count = counts[c->rank];
    } else if (c) {
        if (out) *out = NULL;
        return pe_error(PE_ERR_INVALID, "%s rank %d/%d: reduce_scatter (tag %llu): counts is NULL", c->ops->name,
                        c->rank, c->size, (unsigned long long)tag);
    }
    return start(c, &a, out);
}

pe_status pe_comm_reduce_scatter(pe_comm *c, const void *send, void *recv, int64_t count, pe_dtype dt, uint64_t tag,
                                 pe_work **out) {
    int n = c ? c->size : 1;
    int64_t small[64] = {0}, *counts = n <= 64 ? small : malloc(sizeof *counts * (size_t)n);
    if (!counts) return pe_error(PE_ERR_NOMEM, "reduce_scatter over %d ranks: out of memory", n);
    for (int r = 0; r < n; r++) counts[r] = count;
    pe_status st = pe_comm_reduce_scatterv(c, send, recv, counts, dt, tag, out);
    if (counts != small) free(counts);
    return st;
}

pe_status pe_comm_barrier(pe_comm *c, uint64_t tag, pe_work **out) {
    pe_coll_args a = {.op = PE_COLL_BARRIER, .dt = PE_DTYPE_UINT8, .tag = tag};
    return start(c, &a, out);
}

void pe_comm_free(pe_comm *c) {
    if (c) c->ops->free(c);
}
