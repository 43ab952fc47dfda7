/* runtime/comm/inproc.c — in-process ranks: collectives across CPU places
 * (or simulated processes) that share one address space.
 *
 * Rendezvous: the n ranks of a world share a table of pending collectives
 * keyed by tag. A rank's call records its arguments and work in the tag's
 * entry and returns a pending work at once; the call that arrives last
 * takes the entry out of the table, checks that every rank asked for the
 * same thing, runs the whole collective in its own thread, and completes
 * all n works (their callbacks run there). No rank ever blocks in a call,
 * so a scheduler thread never waits on a collective. Entries and works are
 * pooled per world: the steady state allocates nothing.
 *
 * Algorithm (the pre-rank backend's, unchanged): the data are cut into
 * chunks of 64 KiB, each chunk is owned by one OpenMP thread, which sums
 * the chunk over the ranks in rank order 0..N-1 (8 KiB tiles through an
 * L1-resident accumulator) and writes the sum where it goes (reduce-scatter
 * + all-gather by chunks). Every element is summed in the same order
 * whatever the thread count, so results are bitwise reproducible, and each
 * byte is read N times and written N times: memcpy-bound. Calls of
 * different tags may run at the same time (one per scheduler thread): all
 * scratch lives on the running threads' stacks or in the entry.
 *
 * A group of this world driven by one thread (pe_comm_inproc_new) skips
 * the rendezvous for blocking calls: the caller holds every buffer, so it
 * runs the same algorithm directly (inproc_direct).
 */
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (64 * 1024)
#define TILE_BYTES (8 * 1024)
#define TILE_ELEMS(es) (TILE_BYTES / (es))
#define N_BUCKETS 64

/* One collective over n ranks' buffers, ready to run. */
typedef struct {
    pe_coll op;
    int n, root;
    pe_dtype dt;
    pe_red red;              /* allreduce, reduce */
    int64_t es, count;       /* count: per rank (allgather), the buffer (allreduce, reduce, broadcast) */
    void *const *recv;       /* [n] */
    const void *const *send; /* [n] allgather, reduce_scatter */
    const int64_t *counts;   /* [n] reduce_scatter */
    int64_t *first_job;      /* [n + 1] reduce_scatter: first chunk of each rank's part */
    int64_t chunk;           /* elements per chunk */
} xfer;

typedef struct entry {
    struct entry *next;
    uint64_t tag;
    int arrived, first; /* first: the rank whose arguments the others must match */
    pe_status err;
    char msg[400];
    pe_coll_args *args; /* [n] */
    pe_work **works;    /* [n] */
    int64_t *counts;    /* [n] reduce_scatter counts of the first rank */
    int64_t *first_job; /* [n + 1] */
    void **recv;        /* [n] */
    const void **send;  /* [n] */
} entry;

typedef struct world {
    pthread_mutex_t mu;
    int n, threads, live;
    entry *bucket[N_BUCKETS];
    entry *free_entries;
    pe_work *free_works; /* linked through backend */
} world;

typedef struct {
    pe_comm base;
    world *w;
} inproc_rank;

/* ---- the algorithm ----------------------------------------------------------- */

#define COMBINE(T, EXPR)                                                                                         \
    {                                                                                                            \
        T *x = d;                                                                                                \
        const T *y = s;                                                                                          \
        for (int64_t i = 0; i < n; i++) x[i] = (EXPR);                                                           \
    }
#define COMBINE_ALL(EXPR)                                                                                        \
    switch (dt) {                                                                                                \
    case PE_DTYPE_FP32: COMBINE(float, EXPR) break;                                                              \
    case PE_DTYPE_FP64: COMBINE(double, EXPR) break;                                                             \
    case PE_DTYPE_INT32: COMBINE(int32_t, EXPR) break;                                                           \
    case PE_DTYPE_INT64: COMBINE(int64_t, EXPR) break;                                                           \
    default: break;                                                                                              \
    }

/* d = red(d, s), one element at a time (also the MPI backend's local
 * reductions). max / min keep d on a tie and take s only when it compares
 * greater / smaller (a NaN in d stays, a NaN in s is not taken); integer
 * products wrap around (two's complement, as NCCL's), never overflow. The
 * order of ranks is the order, as for sums. */
void pe_comm_combine(void *d, const void *s, int64_t n, pe_dtype dt, pe_red red) {
    switch (red) {
    case PE_RED_MAX: COMBINE_ALL(y[i] > x[i] ? y[i] : x[i]) break;
    case PE_RED_MIN: COMBINE_ALL(y[i] < x[i] ? y[i] : x[i]) break;
    case PE_RED_PROD:
        switch (dt) {
        case PE_DTYPE_FP32: COMBINE(float, x[i] * y[i]) break;
        case PE_DTYPE_FP64: COMBINE(double, x[i] * y[i]) break;
        case PE_DTYPE_INT32: COMBINE(int32_t, (int32_t)((uint32_t)x[i] * (uint32_t)y[i])) break;
        case PE_DTYPE_INT64: COMBINE(int64_t, (int64_t)((uint64_t)x[i] * (uint64_t)y[i])) break;
        default: break;
        }
        break;
    default: pe_comm_add(d, s, n, dt); break;
    }
}

#define COMBINE_TO(T, EXPR)                                                                                      \
    {                                                                                                            \
        T *z = d;                                                                                                \
        const T *x = a, *y = s;                                                                                  \
        for (int64_t i = 0; i < n; i++) z[i] = (EXPR);                                                           \
    }
#define COMBINE_TO_ALL(EXPR)                                                                                     \
    switch (dt) {                                                                                                \
    case PE_DTYPE_FP32: COMBINE_TO(float, EXPR) break;                                                           \
    case PE_DTYPE_FP64: COMBINE_TO(double, EXPR) break;                                                          \
    case PE_DTYPE_INT32: COMBINE_TO(int32_t, EXPR) break;                                                        \
    case PE_DTYPE_INT64: COMBINE_TO(int64_t, EXPR) break;                                                        \
    default: break;                                                                                              \
    }

/* d = red(a, s), one element at a time, exactly as pe_comm_combine on a
 * copy of a (a is the accumulator: max / min keep a on a tie), without the
 * copy: the MPI backend sums its first two pieces straight into the result.
 * d may be a or s (the same elements), not a partial overlap. */
void pe_comm_combine_to(void *d, const void *a, const void *s, int64_t n, pe_dtype dt, pe_red red) {
    switch (red) {
    case PE_RED_MAX: COMBINE_TO_ALL(y[i] > x[i] ? y[i] : x[i]) break;
    case PE_RED_MIN: COMBINE_TO_ALL(y[i] < x[i] ? y[i] : x[i]) break;
    case PE_RED_PROD:
        switch (dt) {
        case PE_DTYPE_FP32: COMBINE_TO(float, x[i] * y[i]) break;
        case PE_DTYPE_FP64: COMBINE_TO(double, x[i] * y[i]) break;
        case PE_DTYPE_INT32: COMBINE_TO(int32_t, (int32_t)((uint32_t)x[i] * (uint32_t)y[i])) break;
        case PE_DTYPE_INT64: COMBINE_TO(int64_t, (int64_t)((uint64_t)x[i] * (uint64_t)y[i])) break;
        default: break;
        }
        break;
    default:
        switch (dt) {
        case PE_DTYPE_FP32: COMBINE_TO(float, x[i] + y[i]) break;
        case PE_DTYPE_FP64: COMBINE_TO(double, x[i] + y[i]) break;
        case PE_DTYPE_INT32: COMBINE_TO(int32_t, x[i] + y[i]) break;
        case PE_DTYPE_INT64: COMBINE_TO(int64_t, x[i] + y[i]) break;
        default: break;
        }
        break;
    }
}

/* d[0..n) += s[0..n) (also the MPI backend's local sums) */
void pe_comm_add(void *d, const void *s, int64_t n, pe_dtype dt) {
    switch (dt) {
    case PE_DTYPE_FP32: { float *x = d; const float *y = s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; } break;
    case PE_DTYPE_FP64: { double *x = d; const double *y = s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; } break;
    case PE_DTYPE_INT32: { int32_t *x = d; const int32_t *y = s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; } break;
    case PE_DTYPE_INT64: { int64_t *x = d; const int64_t *y = s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; } break;
    default: break;
    }
}

/* m elements at byte soff of src[0..n), summed in rank order tile by tile
 * through an L1-resident accumulator on this thread's stack, written at
 * byte doff of dst[0..n_dst): each buffer read once and written once. */
static void sum_range(const void *const *src, size_t soff, int n, void *const *dst, int n_dst, size_t doff, int64_t m,
                      int64_t es, pe_dtype dt, pe_red red) {
    _Alignas(64) char acc[TILE_BYTES];
    for (int64_t t0 = 0; t0 < m; t0 += TILE_ELEMS(es)) {
        int64_t tm = m - t0 < TILE_ELEMS(es) ? m - t0 : TILE_ELEMS(es);
        size_t to = (size_t)(t0 * es), tlen = (size_t)(tm * es);
        memcpy(acc, (const char *)src[0] + soff + to, tlen);
        for (int p = 1; p < n; p++) pe_comm_combine(acc, (const char *)src[p] + soff + to, tm, dt, red);
        for (int p = 0; p < n_dst; p++) memcpy((char *)dst[p] + doff + to, acc, tlen);
    }
}

static void copy_to_all(const void *src, void *const *dst, int n, size_t doff, size_t len) {
    for (int p = 0; p < n; p++)
        if ((const char *)dst[p] + doff != (const char *)src) memcpy((char *)dst[p] + doff, src, len);
}

static int64_t chunks_of(int64_t numel, int64_t chunk) { return (numel + chunk - 1) / chunk; }

/* Job k of x: one chunk. */
static void run_job(const xfer *x, int64_t k) {
    int64_t es = x->es, ch = x->chunk;
    switch (x->op) {
    case PE_COLL_ALLREDUCE:
    case PE_COLL_REDUCE: {
        int64_t b = k * ch, m = (b + ch < x->count ? b + ch : x->count) - b;
        void *const *dst = x->op == PE_COLL_ALLREDUCE ? x->recv : &x->recv[x->root];
        sum_range((const void *const *)x->recv, (size_t)(b * es), x->n, dst, x->op == PE_COLL_ALLREDUCE ? x->n : 1,
                  (size_t)(b * es), m, es, x->dt, x->red);
    } break;
    case PE_COLL_BROADCAST: {
        int64_t b = k * ch, m = (b + ch < x->count ? b + ch : x->count) - b;
        copy_to_all((const char *)x->recv[x->root] + b * es, x->recv, x->n, (size_t)(b * es), (size_t)(m * es));
    } break;
    case PE_COLL_ALLGATHER: {
        int64_t per = chunks_of(x->count, ch), p = k / per, b = (k % per) * ch;
        int64_t m = (b + ch < x->count ? b + ch : x->count) - b;
        copy_to_all((const char *)x->send[p] + b * es, x->recv, x->n, (size_t)((p * x->count + b) * es),
                    (size_t)(m * es));
    } break;
    case PE_COLL_REDUCE_SCATTER: {
        int r = 0;
        while (x->first_job[r + 1] <= k) r++;
        int64_t off = 0;
        for (int q = 0; q < r; q++) off += x->counts[q];
        int64_t b = (k - x->first_job[r]) * ch, m = (b + ch < x->counts[r] ? b + ch : x->counts[r]) - b;
        sum_range(x->send, (size_t)((off + b) * es), x->n, &x->recv[r], 1, (size_t)(b * es), m, es, x->dt, x->red);
    } break;
    default: break;
    }
}

/* Runs x with up to `threads` OpenMP threads. One thread: no OpenMP
 * construct at all (entering `omp parallel`, even with if(false), costs
 * about a microsecond and a half on a scheduler thread — per call, and the
 * sharded optimizer calls this once per tile). */
static void run_xfer(xfer *x, int max_threads) {
    x->es = (int64_t)pe_dtype_size(x->dt);
    x->chunk = CHUNK_BYTES / x->es;
    int64_t n_jobs = 0;
    switch (x->op) {
    case PE_COLL_ALLGATHER: n_jobs = x->n * chunks_of(x->count, x->chunk); break;
    case PE_COLL_REDUCE_SCATTER:
        x->first_job[0] = 0;
        for (int r = 0; r < x->n; r++) x->first_job[r + 1] = x->first_job[r] + chunks_of(x->counts[r], x->chunk);
        n_jobs = x->first_job[x->n];
        break;
    case PE_COLL_BARRIER: break;
    default:
        if (x->n > 1) n_jobs = chunks_of(x->count, x->chunk);
        break;
    }
    int threads = (int)(n_jobs < max_threads ? n_jobs : max_threads);
#ifdef __SANITIZE_THREAD__
    /* libgomp is not built for TSan: the barriers that hand the buffers and
     * the pooled entry between OpenMP threads and the caller are invisible
     * to it, and every such handoff reads as a race. The result is the same
     * bits with any thread count, so TSan builds run the chunks on one. */
    threads = 1;
#endif
    if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t k = 0; k < n_jobs; k++) run_job(x, k);
    } else {
        for (int64_t k = 0; k < n_jobs; k++) run_job(x, k);
    }
}

/* ---- the rendezvous -------------------------------------------------------------- */

static void work_release(pe_work *pw) {
    world *w = pw->backend;
    pthread_mutex_lock(&w->mu);
    pw->backend = w->free_works; /* reused as the free-list link */
    w->free_works = pw;
    pthread_mutex_unlock(&w->mu);
}

static const pe_work_ops k_work_ops = {NULL, NULL, work_release};

/* Under w->mu. */
static pe_work *take_work(world *w) {
    pe_work *pw = w->free_works;
    if (pw) {
        w->free_works = pw->backend;
    } else if ((pw = malloc(sizeof *pw))) {
        pe_work_init_once(pw, &k_work_ops);
    } else {
        return NULL;
    }
    pe_work_reset(pw);
    pw->backend = w;
    return pw;
}

static void entry_free(entry *e) {
    if (!e) return;
    free(e->args);
    free(e->works);
    free(e->counts);
    free(e->first_job);
    free(e->recv);
    free((void *)e->send);
    free(e);
}

/* Under w->mu. */
static entry *take_entry(world *w, uint64_t tag) {
    entry *e = w->free_entries;
    if (e) {
        w->free_entries = e->next;
    } else {
        size_t n = (size_t)w->n;
        e = calloc(1, sizeof *e);
        if (!e || !(e->args = calloc(n, sizeof *e->args)) || !(e->works = calloc(n, sizeof *e->works)) ||
            !(e->counts = calloc(n, sizeof *e->counts)) || !(e->first_job = calloc(n + 1, sizeof *e->first_job)) ||
            !(e->recv = calloc(n, sizeof *e->recv)) || !(e->send = calloc(n, sizeof *e->send))) {
            entry_free(e);
            return NULL;
        }
    }
    e->tag = tag;
    e->arrived = 0;
    e->first = -1;
    e->err = PE_OK;
    e->msg[0] = '\0';
    memset(e->works, 0, sizeof *e->works * (size_t)w->n);
    e->next = w->bucket[tag % N_BUCKETS];
    w->bucket[tag % N_BUCKETS] = e;
    return e;
}

static entry *find_entry(world *w, uint64_t tag) {
    for (entry *e = w->bucket[tag % N_BUCKETS]; e; e = e->next)
        if (e->tag == tag) return e;
    return NULL;
}

static void unlink_entry(world *w, entry *e) {
    entry **pp = &w->bucket[e->tag % N_BUCKETS];
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
}

/* Rank r's arguments against the first rank's: "" when they match. */
static bool args_match(const entry *e, int r, int n, char *why, size_t size) {
    const pe_coll_args *a = &e->args[r], *f = &e->args[e->first];
    if (a->op != f->op)
        snprintf(why, size, "rank %d called %s, rank %d called %s", r, pe_coll_name(a->op), e->first,
                 pe_coll_name(f->op));
    else if (a->dt != f->dt)
        snprintf(why, size, "rank %d passed dtype %s, rank %d %s", r, pe_dtype_name(a->dt), e->first,
                 pe_dtype_name(f->dt));
    else if (a->red != f->red)
        snprintf(why, size, "rank %d passed reduction %s, rank %d %s", r, pe_red_name(a->red), e->first,
                 pe_red_name(f->red));
    else if (a->root != f->root)
        snprintf(why, size, "rank %d passed root %d, rank %d root %d", r, a->root, e->first, f->root);
    else if (a->op != PE_COLL_REDUCE_SCATTER && a->count != f->count)
        snprintf(why, size, "rank %d passed %lld elements, rank %d %lld", r, (long long)a->count, e->first,
                 (long long)f->count);
    else if (a->op == PE_COLL_REDUCE_SCATTER && memcmp(a->counts, e->counts, sizeof *e->counts * (size_t)n))
        snprintf(why, size, "rank %d passed other per-rank counts than rank %d (total %lld vs %lld)", r, e->first,
                 (long long)a->total, (long long)f->total);
    else
        return true;
    return false;
}

static pe_status inproc_start(pe_comm *c, const pe_coll_args *a, pe_work **out) {
    world *w = ((inproc_rank *)c)->w;
    int r = c->rank, n = w->n;
    char desc[192];
    pthread_mutex_lock(&w->mu);
    entry *e = find_entry(w, a->tag);
    if (e && e->works[r]) {
        pthread_mutex_unlock(&w->mu);
        return pe_error(PE_ERR_INVALID, "%s: this rank already has a pending collective with this tag",
                        pe_coll_desc(c, a, desc, sizeof desc));
    }
    pe_work *pw = NULL;
    if ((!e && !(e = take_entry(w, a->tag))) || !(pw = take_work(w))) {
        pthread_mutex_unlock(&w->mu);
        return pe_error(PE_ERR_NOMEM, "%s: out of memory", pe_coll_desc(c, a, desc, sizeof desc));
    }
    e->args[r] = *a;
    e->works[r] = pw;
    if (a->err != PE_OK) {
        if (e->err == PE_OK) {
            e->err = a->err;
            snprintf(e->msg, sizeof e->msg, "rank %d failed its call: %s", r, a->err_msg ? a->err_msg : "");
        }
    } else if (e->first < 0) {
        e->first = r;
        if (a->op == PE_COLL_REDUCE_SCATTER) memcpy(e->counts, a->counts, sizeof *e->counts * (size_t)n);
    } else if (e->err == PE_OK) {
        char why[256];
        if (!args_match(e, r, n, why, sizeof why)) {
            e->err = PE_ERR_INVALID;
            snprintf(e->msg, sizeof e->msg, "the ranks' calls with this tag differ: %s", why);
        }
    }
    e->args[r].counts = NULL; /* the caller's array; e->counts is the copy */
    *out = pw;
    if (++e->arrived < n) {
        pthread_mutex_unlock(&w->mu);
        return PE_OK;
    }
    /* last to arrive: run it here, out of the table (a callback may reuse the tag) */
    unlink_entry(w, e);
    pthread_mutex_unlock(&w->mu);
    if (e->err == PE_OK) {
        xfer x = {.op = a->op, .n = n, .root = e->args[e->first].root, .dt = a->dt, .red = a->red, .count = a->count,
                  .recv = e->recv, .send = e->send, .counts = e->counts, .first_job = e->first_job};
        for (int p = 0; p < n; p++) {
            e->recv[p] = e->args[p].recv;
            e->send[p] = e->args[p].send;
        }
        run_xfer(&x, w->threads);
    }
    for (int p = 0; p < n; p++) {
        char msg[sizeof e->msg + 200];
        if (e->err != PE_OK) {
            pe_comm view = *c; /* named after the rank whose work this is */
            view.rank = p;
            snprintf(msg, sizeof msg, "%s: %s", pe_coll_desc(&view, &e->args[p], desc, sizeof desc), e->msg);
        }
        pe_work_complete(e->works[p], e->err, e->err != PE_OK ? msg : NULL);
    }
    pthread_mutex_lock(&w->mu);
    e->next = w->free_entries;
    w->free_entries = e;
    pthread_mutex_unlock(&w->mu);
    return PE_OK;
}

static void inproc_free(pe_comm *c) {
    world *w = ((inproc_rank *)c)->w;
    free(c);
    pthread_mutex_lock(&w->mu);
    bool last = --w->live == 0;
    pthread_mutex_unlock(&w->mu);
    if (!last) return;
    /* Collectives some rank never joined (a rank that failed its own
     * checks alone, say): their works end cancelled, back to the pool. */
    for (int b = 0; b < N_BUCKETS; b++)
        while (w->bucket[b]) {
            entry *e = w->bucket[b];
            w->bucket[b] = e->next;
            for (int r = 0; r < w->n; r++)
                if (e->works[r])
                    pe_work_complete(e->works[r], PE_ERR_CANCELLED,
                                     "inproc: the ranks were freed before every rank joined this collective");
            entry_free(e);
        }
    while (w->free_entries) {
        entry *e = w->free_entries;
        w->free_entries = e->next;
        entry_free(e);
    }
    while (w->free_works) {
        pe_work *pw = w->free_works;
        w->free_works = pw->backend;
        pe_work_destroy(pw);
        free(pw);
    }
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static const pe_comm_ops k_inproc_ops = {"inproc", inproc_start, NULL, NULL, inproc_free};

pe_status pe_comm_inproc_world_new(int n, int threads, pe_comm **ranks_out) {
    if (n < 1) return pe_error(PE_ERR_INVALID, "collectives need at least one place (got %d)", n);
    world *w = calloc(1, sizeof *w);
    if (!w) return pe_error(PE_ERR_NOMEM, "out of memory creating collectives for %d places", n);
    pthread_mutex_init(&w->mu, NULL);
    w->n = n;
    w->threads = threads < 1 ? 1 : threads;
    for (int r = 0; r < n; r++) {
        inproc_rank *c = calloc(1, sizeof *c);
        if (!c) {
            for (int q = 0; q < r; q++) pe_comm_free(ranks_out[q]);
            if (r == 0) {
                pthread_mutex_destroy(&w->mu);
                free(w);
            }
            return pe_error(PE_ERR_NOMEM, "out of memory creating collectives for %d places", n);
        }
        c->base.ops = &k_inproc_ops;
        c->base.rank = r;
        c->base.size = n;
        c->w = w;
        w->live++;
        ranks_out[r] = &c->base;
    }
    return PE_OK;
}

/* ---- a group driven by one thread ------------------------------------------------ */

static int inproc_direct(pe_comm_group *g, const pe_coll_args *a, const void *const *sends, void *const *bufs,
                         pe_status *st) {
    world *w = ((inproc_rank *)g->ranks[0])->w;
    xfer x = {.op = a->op, .n = g->n_places, .root = a->root, .dt = a->dt, .red = a->red, .count = a->count,
              .recv = bufs, .send = sends};
    run_xfer(&x, w->threads);
    *st = PE_OK;
    return 1;
}

pe_comm_group *pe_comm_inproc_new(int n_places, int threads) {
    if (n_places < 1) {
        pe_error(PE_ERR_INVALID, "collectives need at least one place (got %d)", n_places);
        return NULL;
    }
    pe_comm *small[16], **ranks = n_places <= 16 ? small : malloc(sizeof *ranks * (size_t)n_places);
    if (!ranks || pe_comm_inproc_world_new(n_places, threads, ranks) != PE_OK) {
        if (!ranks) pe_error(PE_ERR_NOMEM, "out of memory creating collectives for %d places", n_places);
        if (ranks != small) free(ranks);
        return NULL;
    }
    pe_comm_group *g = pe_comm_group_new(ranks, n_places);
    if (ranks != small) free(ranks);
    if (g) g->direct = inproc_direct;
    return g;
}
