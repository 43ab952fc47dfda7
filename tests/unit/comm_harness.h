/* tests/unit/comm_harness.h — the backend-agnostic conformance harness of
 * the rank API (runtime/comm/comm.h), shared by test_comm_conformance.c
 * (in-process, two-level, NCCL) and test_comm_mpi.c (MPI across processes,
 * and the two-level composition over it). Header-only, static functions.
 *
 *     world w = {.name = "mpi", .size = n, .P = n, .lo = me, .hi = me + 1};
 *     w.rank[me] = my_comm;                 // the ranks this process drives
 *     run_ladder(&w);                       // every op, size, dtype; twice
 *     errors_on(&w);                        // bad root / dtype / sizes: errors on every rank
 *
 * A world is `size` ranks of one backend, of which this process drives
 * ranks [lo, hi) (all of them in a single-process world). Every process
 * prepares every rank's inputs and the expected outputs (sums in a fixed
 * order: places of a process in order, then processes — for a one-level
 * world simply rank order 0..N-1), drives its own ranks and checks their
 * results bit for bit (memcmp):
 *   - threads: each local rank on its own pthread, issuing a batch of cases
 *     with consecutive tags and waiting for them in reverse order;
 *   - driver: one thread issues every local rank's calls (last rank first)
 *     and waits for the works in a scrambled order, as the executor's group
 *     does.
 * Each ladder runs twice with the same seeds: every run must give the same
 * bits. Sizes: 1, 7, 4097, 65537 elements (chunk and tile edges).
 */
#ifndef PE_TEST_COMM_HARNESS_H
#define PE_TEST_COMM_HARNESS_H

#include "tests/unit/gpu_skip.h"
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8

/* ---- worlds ------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int size, P; /* P: places per process (sum groups); size for one level */
    pe_comm *rank[MAX_RANKS];
    pe_comm *outer[MAX_RANKS]; /* hier: the simulated processes */
    int R;
    bool device; /* NCCL: buffers live on cuda:rank */
    int lo, hi;  /* the ranks this process drives (rank[lo..hi) set): all but under MPI */
} world;


/* ---- data ----------------------------------------------------------------------- */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Values whose sum depends on the order (floats over 2^-12..2^12, both
 * signs); integers small enough not to overflow over 8 ranks. */
static void fill(void *b, int64_t n, pe_dtype dt, uint64_t seed) {
    size_t es = pe_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i);
        double v = ldexp((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0, (int)(r % 25) - 12);
        int64_t iv = (int64_t)(r >> 40) % (1 << 21) - (1 << 20);
        switch (dt) {
        case PE_DTYPE_FP32: ((float *)b)[i] = (float)v; break;
        case PE_DTYPE_FP64: ((double *)b)[i] = v; break;
        case PE_DTYPE_INT32: ((int32_t *)b)[i] = (int32_t)iv; break;
        case PE_DTYPE_INT64: ((int64_t *)b)[i] = iv; break;
        default: memcpy((char *)b + (size_t)i * es, &r, es); break;
        }
    }
}

/* out[i] = in[0][off+i] + ... in dt, left to right over ranks, but in
 * groups of P: (x0 + .. + x(P-1)) + (xP + ..) + ..., as the two-level
 * composition sums (P = n: a plain sequential sum in rank order); the
 * same with max, min or prod for red (integer products wrap, as
 * pe_comm_combine's). */
#define GCOMB(T, U, a, b)                                                                                        \
    (red == PE_RED_MAX ? ((b) > (a) ? (b) : (a)) : red == PE_RED_MIN ? ((b) < (a) ? (b) : (a))                   \
     : red == PE_RED_PROD ? (T)((U)(a) * (U)(b)) : (T)((a) + (b)))
#define GSUM(T, U)                                                                                               \
    for (int64_t i = 0; i < m; i++) {                                                                            \
        T tot = 0;                                                                                               \
        for (int g = 0; g < n; g += P) {                                                                         \
            T s = ((const T *)in[g])[off + i];                                                                   \
            for (int p = g + 1; p < g + P; p++) s = GCOMB(T, U, s, ((const T *)in[p])[off + i]);                 \
            tot = g == 0 ? s : GCOMB(T, U, tot, s);                                                              \
        }                                                                                                        \
        ((T *)out)[i] = tot;                                                                                     \
    }
static void gsum(void *out, void *const *in, int n, int P, int64_t off, int64_t m, pe_dtype dt, pe_red red) {
    switch (dt) {
    case PE_DTYPE_FP32: GSUM(float, float) break;
    case PE_DTYPE_FP64: GSUM(double, double) break;
    case PE_DTYPE_INT32: GSUM(int32_t, uint32_t) break;
    default: GSUM(int64_t, uint64_t) break;
    }
}

/* ---- cases ------------------------------------------------------------------------ */

typedef struct {
    pe_coll op;
    pe_dtype dt;
    int64_t count;
    int root;
    int variant; /* allgather: in place; reduce_scatter: uneven counts */
    pe_red red;  /* allreduce, reduce */
} tcase;

/* One case's buffers for every rank: in (inputs), buf (what the call
 * writes; dev: its device copy), want (expected buf), counts. */
typedef struct {
    tcase c;
    int n;
    void *in[MAX_RANKS], *buf[MAX_RANKS], *want[MAX_RANKS], *dev[MAX_RANKS];
    size_t in_bytes[MAX_RANKS], buf_bytes[MAX_RANKS];
    int64_t counts[MAX_RANKS];
    pe_work *work[MAX_RANKS];
} prepared;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static void prepare(prepared *pr, const world *w, tcase c, uint64_t seed) {
    int n = w->size;
    size_t es = pe_dtype_size(c.dt);
    memset(pr, 0, sizeof *pr);
    pr->c = c;
    pr->n = n;
    int64_t total = 0;
    for (int r = 0; r < n; r++) {
        pr->counts[r] = c.count + (c.variant ? r : 0);
        total += pr->counts[r];
    }
    for (int r = 0; r < n; r++) {
        int64_t in_n = c.count, buf_n = c.count;
        if (c.op == PE_COLL_ALLGATHER) buf_n = c.count * n;
        if (c.op == PE_COLL_REDUCE_SCATTER) in_n = total, buf_n = pr->counts[r];
        if (c.op == PE_COLL_BARRIER) in_n = buf_n = 0;
        pr->in_bytes[r] = (size_t)in_n * es;
        pr->buf_bytes[r] = (size_t)buf_n * es;
        pr->in[r] = xmalloc(pr->in_bytes[r]);
        pr->buf[r] = xmalloc(pr->buf_bytes[r]);
        pr->want[r] = xmalloc(pr->buf_bytes[r]);
        fill(pr->in[r], in_n, c.dt, seed * 131 + (uint64_t)r);
        fill(pr->buf[r], buf_n, c.dt, seed * 137 + (uint64_t)r + 1000); /* junk where the call writes */
    }
    for (int r = 0; r < n; r++) {
        switch (c.op) {
        case PE_COLL_ALLREDUCE:
        case PE_COLL_REDUCE:
            memcpy(pr->buf[r], pr->in[r], pr->in_bytes[r]);
            if (c.op == PE_COLL_ALLREDUCE || r == c.root) gsum(pr->want[r], pr->in, n, w->P, 0, c.count, c.dt, c.red);
            else memcpy(pr->want[r], pr->in[r], pr->in_bytes[r]);
            break;
        case PE_COLL_BROADCAST:
            memcpy(pr->buf[r], pr->in[r], pr->in_bytes[r]);
            memcpy(pr->want[r], pr->in[c.root], pr->in_bytes[r]);
            break;
        case PE_COLL_ALLGATHER:
            for (int q = 0; q < n; q++) memcpy((char *)pr->want[r] + (size_t)q * pr->in_bytes[q], pr->in[q], pr->in_bytes[q]);
            if (c.variant) memcpy((char *)pr->buf[r] + (size_t)r * pr->in_bytes[r], pr->in[r], pr->in_bytes[r]);
            break;
        case PE_COLL_REDUCE_SCATTER: {
            int64_t off = 0;
            for (int q = 0; q < r; q++) off += pr->counts[q];
            gsum(pr->want[r], pr->in, n, w->P, off, pr->counts[r], c.dt, PE_RED_SUM);
        } break;
        default: break;
        }
    }
}

static void release(prepared *pr) {
    for (int r = 0; r < pr->n; r++) {
        free(pr->in[r]);
        free(pr->buf[r]);
        free(pr->want[r]);
    }
}

/* Rank r's call of pr's case with tag. Device worlds pass device copies. */
static pe_status issue(const world *w, prepared *pr, int r, uint64_t tag) {
    const tcase *c = &pr->c;
    void *buf = w->device ? pr->dev[r] : pr->buf[r];
    const void *in = w->device ? NULL : pr->in[r];
    pe_comm *cm = w->rank[r];
    pe_work **out = &pr->work[r];
    switch (c->op) {
    case PE_COLL_ALLREDUCE:
        return c->red == PE_RED_SUM ? pe_comm_allreduce(cm, buf, c->count, c->dt, tag, out)
                                    : pe_comm_allreduce_red(cm, buf, c->count, c->dt, c->red, tag, out);
    case PE_COLL_REDUCE: return pe_comm_reduce_red(cm, buf, c->count, c->dt, c->root, c->red, tag, out);
    case PE_COLL_BROADCAST: return pe_comm_broadcast(cm, buf, c->count, c->dt, c->root, tag, out);
    case PE_COLL_ALLGATHER:
        return pe_comm_allgather(cm, c->variant || w->device ? NULL : in, buf, c->count, c->dt, tag, out);
    case PE_COLL_REDUCE_SCATTER:
        return c->variant ? pe_comm_reduce_scatterv(cm, in, buf, pr->counts, c->dt, tag, out)
                          : pe_comm_reduce_scatter(cm, in, buf, c->count, c->dt, tag, out);
    default: return pe_comm_barrier(cm, tag, out);
    }
}

/* "" when rank r's result matches, else why not (into why). */
static bool check(const prepared *pr, int r, const char *wname, char *why, size_t size) {
    if (!memcmp(pr->buf[r], pr->want[r], pr->buf_bytes[r])) return true;
    size_t es = pe_dtype_size(pr->c.dt);
    size_t i = 0;
    while (i < pr->buf_bytes[r] / es && !memcmp((char *)pr->buf[r] + i * es, (char *)pr->want[r] + i * es, es)) i++;
    snprintf(why, size, "%s: %s(%s) of %lld %s (root %d, variant %d) on %d ranks: rank %d, element %zu differs", wname,
             pe_coll_name(pr->c.op), pe_red_name(pr->c.red), (long long)pr->c.count, pe_dtype_name(pr->c.dt),
             pr->c.root, pr->c.variant, pr->n, r, i);
    return false;
}

/* ---- drivers ------------------------------------------------------------------------ */

typedef struct {
    const world *w;
    prepared *batch;
    int n_cases, r;
    uint64_t tag0;
    char why[512];
} rank_job;

static void *rank_main(void *arg) {
    rank_job *j = arg;
    for (int k = 0; k < j->n_cases; k++)
        if (issue(j->w, &j->batch[k], j->r, j->tag0 + (uint64_t)k) != PE_OK) {
            snprintf(j->why, sizeof j->why, "rank %d, case %d: %s", j->r, k, pe_last_error());
            return NULL;
        }
    for (int k = j->n_cases - 1; k >= 0; k--) { /* out of order */
        pe_work *wk = j->batch[k].work[j->r];
        if (pe_work_wait(wk) != PE_OK && !j->why[0])
            snprintf(j->why, sizeof j->why, "rank %d, case %d: %s", j->r, k, pe_last_error());
        pe_work_free(wk);
    }
    return NULL;
}

/* Every local rank on its own thread. */
static void drive_threads(const world *w, prepared *batch, int n_cases, uint64_t tag0) {
    pthread_t t[MAX_RANKS];
    rank_job j[MAX_RANKS];
    for (int r = w->lo; r < w->hi; r++) {
        j[r] = (rank_job){.w = w, .batch = batch, .n_cases = n_cases, .r = r, .tag0 = tag0};
        assert_int_equal(pthread_create(&t[r], NULL, rank_main, &j[r]), 0);
    }
    for (int r = w->lo; r < w->hi; r++) pthread_join(t[r], NULL);
    for (int r = w->lo; r < w->hi; r++)
        if (j[r].why[0]) fail_msg("%s, %d ranks, threads: %s", w->name, w->size, j[r].why);
}

/* One thread issues every local rank's calls, last rank first, then waits
 * for the works in a scrambled order. */
static void drive_one_thread(const world *w, prepared *batch, int n_cases, uint64_t tag0) {
    pe_comm *c0 = w->rank[w->lo];
    int nl = w->hi - w->lo;
    for (int k = 0; k < n_cases; k++) {
        pe_status st = c0->ops->group_begin ? c0->ops->group_begin(c0) : PE_OK;
        assert_int_equal(st, PE_OK);
        for (int r = w->hi - 1; r >= w->lo; r--)
            if (issue(w, &batch[k], r, tag0 + (uint64_t)k) != PE_OK)
                fail_msg("%s, driver: rank %d, case %d: %s", w->name, r, k, pe_last_error());
        if (c0->ops->group_end) assert_int_equal(c0->ops->group_end(c0), PE_OK);
    }
    int total = n_cases * nl;
    for (int i = 0; i < total; i++) {
        int idx = (int)((uint64_t)i * 7 % (uint64_t)total); /* 7 is prime to the totals used */
        if (total % 7 == 0) idx = total - 1 - i;
        pe_work *wk = batch[idx / nl].work[w->lo + idx % nl];
        if (pe_work_wait(wk) != PE_OK) fail_msg("%s, driver: work %d: %s", w->name, idx, pe_last_error());
        pe_work_free(wk);
    }
}

#ifdef PE_WITH_CUDA
static void to_device(const world *w, prepared *pr) {
    for (int r = 0; r < w->size; r++) {
        size_t bytes = pr->buf_bytes[r] > pr->in_bytes[r] ? pr->buf_bytes[r] : pr->in_bytes[r];
        pr->dev[r] = pe_place_alloc(pe_place_cuda(r), bytes ? bytes : 1);
        assert_non_null(pr->dev[r]);
        assert_int_equal(pe_memcpy_places(pr->dev[r], pe_place_cuda(r), pr->buf[r], pe_place_cpu(0), pr->buf_bytes[r]),
                         PE_OK);
    }
}

static void from_device(const world *w, prepared *pr) {
    for (int r = 0; r < w->size; r++) {
        size_t bytes = pr->buf_bytes[r] > pr->in_bytes[r] ? pr->buf_bytes[r] : pr->in_bytes[r];
        assert_int_equal(pe_memcpy_places(pr->buf[r], pe_place_cpu(0), pr->dev[r], pe_place_cuda(r), pr->buf_bytes[r]),
                         PE_OK);
        pe_place_free(pe_place_cuda(r), pr->dev[r], bytes ? bytes : 1);
    }
}
#endif

/* Prepares n_cases cases, runs them in one batch, checks every local rank. */
static void run_batch(const world *w, const tcase *cases, int n_cases, bool threads, uint64_t seed, uint64_t tag0) {
    prepared *batch = calloc((size_t)n_cases, sizeof *batch);
    assert_non_null(batch);
    for (int k = 0; k < n_cases; k++) prepare(&batch[k], w, cases[k], seed + (uint64_t)k);
#ifdef PE_WITH_CUDA
    if (w->device)
        for (int k = 0; k < n_cases; k++) to_device(w, &batch[k]);
#endif
    if (threads) drive_threads(w, batch, n_cases, tag0);
    else drive_one_thread(w, batch, n_cases, tag0);
#ifdef PE_WITH_CUDA
    if (w->device)
        for (int k = 0; k < n_cases; k++) from_device(w, &batch[k]);
#endif
    char why[512];
    for (int k = 0; k < n_cases; k++)
        for (int r = w->lo; r < w->hi; r++)
            if (!check(&batch[k], r, w->name, why, sizeof why)) fail_msg("%s (%s)", why, threads ? "threads" : "driver");
    for (int k = 0; k < n_cases; k++) release(&batch[k]);
    free(batch);
}

/* The ladder: every op the world has, sizes with odd and edge counts,
 * dtypes (sums: the four; moves: fp32, fp16, int64); `exact_only` keeps
 * integer sums (NCCL sums floats in another order). */
static int ladder(const world *w, tcase *out, int cap, bool exact_only) {
    static const int64_t sizes[] = {1, 7, 4097, 65537};
    static const pe_dtype sums[] = {PE_DTYPE_FP32, PE_DTYPE_FP64, PE_DTYPE_INT32, PE_DTYPE_INT64};
    static const pe_dtype moves[] = {PE_DTYPE_FP32, PE_DTYPE_FP16, PE_DTYPE_INT64};
    int n = 0, n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    for (int op = 0; op < PE_COLL_COUNT; op++) {
        /* device worlds: inputs travel in the buffer written (in place) */
        if (w->device && op == PE_COLL_REDUCE_SCATTER) continue;
        bool sum = op == PE_COLL_ALLREDUCE || op == PE_COLL_REDUCE || op == PE_COLL_REDUCE_SCATTER;
        const pe_dtype *dts = sum ? sums : moves;
        int n_dts = sum ? 4 : 3;
        if (op == PE_COLL_BARRIER) {
            if (n < cap) out[n++] = (tcase){.op = PE_COLL_BARRIER, .dt = PE_DTYPE_UINT8};
            continue;
        }
        for (int d = 0; d < n_dts; d++) {
            if (exact_only && sum && (dts[d] == PE_DTYPE_FP32 || dts[d] == PE_DTYPE_FP64)) continue;
            for (int s = 0; s < n_sizes; s++) {
                int k = d * n_sizes + s;
                if (n < cap)
                    out[n++] = (tcase){.op = (pe_coll)op, .dt = dts[d], .count = sizes[s], .root = k % w->size,
                                       .variant = (op == PE_COLL_ALLGATHER || op == PE_COLL_REDUCE_SCATTER) &&
                                                  (k % 2 || w->device)};
            }
            /* max, min and prod: one size across a chunk edge each */
            for (int red = PE_RED_MAX; red < PE_RED_COUNT && (op == PE_COLL_ALLREDUCE || op == PE_COLL_REDUCE); red++)
                if (n < cap)
                    out[n++] = (tcase){.op = (pe_coll)op, .dt = dts[d], .count = 4097, .root = (d + red) % w->size,
                                       .red = (pe_red)red};
        }
    }
    return n;
}

/* The ladder twice each way, in batches of 6 (same seeds on both runs:
 * every run must match the same bits). */
static void run_ladder(const world *w) {
    tcase cases[128];
    int n = ladder(w, cases, 128, w->device);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < n; k += 6) {
            int m = n - k < 6 ? n - k : 6;
            run_batch(w, cases + k, m, true, 1000 + (uint64_t)k, 100 + (uint64_t)k);
            run_batch(w, cases + k, m, false, 1000 + (uint64_t)k, 100 + (uint64_t)k); /* tags reused */
        }
}

/* ---- errors ------------------------------------------------------------------------------- */

/* Rank `bad` calls with (count_bad, root_bad, dt_bad), the others with the
 * good arguments; every local rank must end with an error containing
 * `want` (either from its call or from its work). */
static void expect_all_fail(world *w, pe_coll op, int bad, int64_t count_bad, int root_bad, pe_dtype dt_bad,
                            uint64_t tag, const char *want_bad, const char *want_others) {
    static double buf[MAX_RANKS][64];
    pe_work *wk[MAX_RANKS] = {0};
    pe_status st[MAX_RANKS];
    for (int r = w->lo; r < w->hi; r++) {
        int64_t cnt = r == bad ? count_bad : 4;
        int root = r == bad ? root_bad : 0;
        pe_dtype dt = r == bad ? dt_bad : PE_DTYPE_FP64;
        st[r] = op == PE_COLL_ALLREDUCE ? pe_comm_allreduce(w->rank[r], buf[r], cnt, dt, tag, &wk[r])
                : op == PE_COLL_REDUCE  ? pe_comm_reduce(w->rank[r], buf[r], cnt, dt, root, tag, &wk[r])
                                        : pe_comm_broadcast(w->rank[r], buf[r], cnt, dt, root, tag, &wk[r]);
        if (st[r] != PE_OK) {
            assert_null(wk[r]);
            if (!strstr(pe_last_error(), want_bad)) fail_msg("rank %d: '%s' lacks '%s'", r, pe_last_error(), want_bad);
        }
    }
    for (int r = w->lo; r < w->hi; r++) {
        if (!wk[r]) continue;
        if (pe_work_wait(wk[r]) == PE_OK) fail_msg("%s: rank %d's work succeeded", w->name, r);
        const char *m = pe_last_error();
        if (!strstr(m, want_others)) fail_msg("%s: rank %d: '%s' lacks '%s'", w->name, r, m, want_others);
        if (!strstr(m, pe_coll_name(op))) fail_msg("%s: rank %d: '%s' does not name the op", w->name, r, m);
        pe_work_free(wk[r]);
    }
}

static void errors_on(world *w) {
    int last = w->size - 1;
    /* one rank's bad root: its call fails, every other rank's work too */
    expect_all_fail(w, PE_COLL_BROADCAST, last, 4, w->size, PE_DTYPE_FP64, 7, "is not a rank", "is not a rank");
    expect_all_fail(w, PE_COLL_REDUCE, 0, 4, -1, PE_DTYPE_FP64, 10, "is not a rank", "is not a rank");
    /* one rank's unsummable dtype */
    expect_all_fail(w, PE_COLL_ALLREDUCE, 0, 4, 0, PE_DTYPE_BOOL, 8, "dtype bool is not supported", "bool");
    /* sizes that differ between ranks of one tag */
    expect_all_fail(w, PE_COLL_ALLREDUCE, last, 5, 0, PE_DTYPE_FP64, 9, "differ", "differ");
    /* the same tags work afterwards */
    tcase c = {.op = PE_COLL_ALLREDUCE, .dt = PE_DTYPE_FP64, .count = 9};
    run_batch(w, &c, 1, true, 3, 7);
}
/* ---- callbacks --------------------------------------------------------------------- */

typedef struct {
    _Atomic int calls;
    _Atomic int status;
} cb_count;

static void count_cb(pe_work *wk, pe_status st, void *user) {
    (void)wk;
    cb_count *c = user;
    atomic_fetch_add(&c->calls, 1);
    atomic_store(&c->status, (int)st);
}

#endif
