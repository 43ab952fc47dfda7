/* runtime/comm/inproc.c — in-process collectives across CPU places.
 *
 * All places live in one address space, so an allreduce is a
 * reduce-scatter + all-gather over chunks: the buffer is cut into chunks of
 * 64 KiB, each chunk is owned by one thread, which sums the chunk over the
 * places in place order 0..N-1 (8 KiB tiles through an L1-resident
 * accumulator) and writes the sum back to every place. Every element is summed in the same order
 * whatever the thread count, so results are bitwise reproducible, and each
 * byte is read N times and written N times: memcpy-bound.
 * A reduce to any root sums the same way and writes the root only. Calls on
 * different vars may run at the same time (one per scheduler thread): all
 * scratch lives on the calling threads' stacks.
 */
#include "runtime/comm/comm.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (64 * 1024)
#define TILE_BYTES (8 * 1024)
#define TILE_ELEMS(es) (TILE_BYTES / (es))

typedef struct {
    pe_comm base;
    int threads;
} inproc_comm;

/* d[0..n) += s[0..n) */
static void add_n(void *d, const void *s, int64_t n, pe_dtype dt) {
    switch (dt) {
    case PE_DTYPE_FP32: { float *x = d; const float *y = s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; } break;
    case PE_DTYPE_FP64: { double *x = d; const double *y = s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; } break;
    case PE_DTYPE_INT32: { int32_t *x = d; const int32_t *y = s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; } break;
    case PE_DTYPE_INT64: { int64_t *x = d; const int64_t *y = s; for (int64_t i = 0; i < n; i++) x[i] += y[i]; } break;
    default: break;
    }
}

static pe_status check_dtype(const char *what, pe_dtype dt) {
    if (dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 || dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64) return PE_OK;
    return pe_error(PE_ERR_UNSUPPORTED, "%s: dtype %s is not supported (float32, float64, int32, int64)", what,
                    pe_dtype_name(dt));
}

/* Chunk k of a reduction: summed tile by tile through an L1-resident
 * accumulator on this thread's stack (collectives of different vars run
 * concurrently on the scheduler's threads, so no shared scratch): each
 * buffer is read once and written once, the minimum traffic.
 * mode 0 = allreduce, 1 = reduce to root. */
static void reduce_chunk(void *const *bufs, int n, int64_t k, int64_t chunk, int64_t numel, int64_t es, pe_dtype dt,
                         int root, int mode) {
    int64_t b = k * chunk, m = (b + chunk < numel ? b + chunk : numel) - b;
    size_t off = (size_t)(b * es);
    _Alignas(64) char acc[TILE_BYTES];
    for (int64_t t0 = 0; t0 < m; t0 += TILE_ELEMS(es)) {
        int64_t tm = m - t0 < TILE_ELEMS(es) ? m - t0 : TILE_ELEMS(es);
        size_t toff = off + (size_t)(t0 * es), tlen = (size_t)(tm * es);
        memcpy(acc, (char *)bufs[0] + toff, tlen);
        for (int p = 1; p < n; p++) add_n(acc, (char *)bufs[p] + toff, tm, dt);
        if (mode == 0)
            for (int p = 0; p < n; p++) memcpy((char *)bufs[p] + toff, acc, tlen);
        else
            memcpy((char *)bufs[root] + toff, acc, tlen);
    }
}

/* mode 0 = allreduce, 1 = reduce to root. One thread: no OpenMP construct at
 * all (entering `omp parallel`, even with if(false), costs about a
 * microsecond and a half on a scheduler thread — per call, and the sharded
 * optimizer calls this once per tile). */
static pe_status run(inproc_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root, int mode) {
    PE_CHECK(check_dtype(mode ? "reduce" : "allreduce", dt));
    int n = c->base.n_places;
    if (root < 0 || root >= n) return pe_error(PE_ERR_INVALID, "reduce: root %d is not a place (0..%d)", root, n - 1);
    if (n == 1 || numel <= 0) return PE_OK;
    int64_t es = (int64_t)pe_dtype_size(dt);
    int64_t chunk = CHUNK_BYTES / es;
    int64_t n_chunks = (numel + chunk - 1) / chunk;
    int threads = (int)(n_chunks < c->threads ? n_chunks : c->threads);
    if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t k = 0; k < n_chunks; k++) reduce_chunk(bufs, n, k, chunk, numel, es, dt, root, mode);
    } else {
        for (int64_t k = 0; k < n_chunks; k++) reduce_chunk(bufs, n, k, chunk, numel, es, dt, root, mode);
    }
    return PE_OK;
}

static pe_status inproc_allreduce(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt) {
    return run((inproc_comm *)c, bufs, numel, dt, 0, 0);
}

static pe_status inproc_reduce(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    return run((inproc_comm *)c, bufs, numel, dt, root, 1);
}

static void bcast_chunk(void *const *bufs, int n, int64_t k, int64_t bytes, int root) {
    int64_t b = k * CHUNK_BYTES, e = b + CHUNK_BYTES < bytes ? b + CHUNK_BYTES : bytes;
    for (int p = 0; p < n; p++)
        if (p != root) memcpy((char *)bufs[p] + b, (const char *)bufs[root] + b, (size_t)(e - b));
}

static pe_status inproc_broadcast(pe_comm *cm, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    inproc_comm *c = (inproc_comm *)cm;
    int n = c->base.n_places;
    if (root < 0 || root >= n) return pe_error(PE_ERR_INVALID, "broadcast: root %d is not a place (0..%d)", root, n - 1);
    int64_t bytes = numel * (int64_t)pe_dtype_size(dt);
    int64_t n_chunks = (bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
    int threads = (int)(n_chunks < c->threads ? n_chunks : c->threads);
    if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t k = 0; k < n_chunks; k++) bcast_chunk(bufs, n, k, bytes, root);
    } else {
        for (int64_t k = 0; k < n_chunks; k++) bcast_chunk(bufs, n, k, bytes, root);
    }
    return PE_OK;
}

static void inproc_free(pe_comm *c) { free(c); }

static const pe_comm_ops k_inproc_ops = {"inproc", inproc_allreduce, inproc_reduce, inproc_broadcast, inproc_free};

pe_comm *pe_comm_inproc_new(int n_places, int threads) {
    if (n_places < 1) {
        pe_error(PE_ERR_INVALID, "collectives need at least one place (got %d)", n_places);
        return NULL;
    }
    inproc_comm *c = calloc(1, sizeof *c);
    if (c) c->threads = threads < 1 ? 1 : threads;
    if (!c) {
        pe_error(PE_ERR_NOMEM, "out of memory creating collectives for %d places", n_places);
        return NULL;
    }
    c->base.ops = &k_inproc_ops;
    c->base.n_places = n_places;
    return &c->base;
}
