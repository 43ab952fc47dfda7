/* tests/unit/test_comm.c — collectives (runtime/comm): the in-process CPU
 * backend, the backend factory, and the NCCL backend where GPUs exist.
 *
 * In-process: allreduce / reduce / broadcast for fp32, fp64, int32, int64 on
 * 1..4 places, sizes around the tile (8 KiB), chunk (64 KiB) and 64 Ki
 * element boundaries plus a few MB, with 1 and 2 threads; every result must
 * equal a sum computed here in place order 0..N-1, bit for bit (memcmp).
 * Also: two collectives on different buffers from two pthreads at once
 * (a shared scratch once made these race), a reduce to a non-zero root
 * leaves the other places' buffers untouched, and bad dtype / root /
 * place counts fail with a message and change nothing.
 * NCCL: with at least 2 GPUs, results on cuda:0..k compared with the CPU
 * backend (integers exact, floats within N ulps of the magnitude sum, and
 * bitwise repeatable run to run); otherwise a visible "SKIPPED:" line. What
 * runs everywhere: the factory's errors for CUDA places it cannot serve.
 */
#include "tests/unit/gpu_skip.h"
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

static const pe_dtype k_dtypes[] = {PE_DTYPE_FP32, PE_DTYPE_FP64, PE_DTYPE_INT32, PE_DTYPE_INT64};
#define N_DTYPES ((int)(sizeof k_dtypes / sizeof k_dtypes[0]))

/* Tile (2048 fp32), chunk (16384 fp32 / 8192 fp64), 64 Ki elements, and a
 * few MB (4 MiB of fp32, 8 MiB of fp64 per place), each +-1. */
static const int64_t k_sizes[] = {0,     1,     2047,  2048,  2049,  8191,  8192,
                                  8193,  16383, 16384, 16385, 65535, 65536, 65537,
                                  (1 << 20) + 5};
#define N_SIZES ((int)(sizeof k_sizes / sizeof k_sizes[0]))
#define MAX_NUMEL ((1 << 20) + 5)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_u64(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

/* Random values whose place-order sum depends on the order: floats spread
 * over 2^-12..2^12 with both signs; integers in [-2^20, 2^20) (no overflow
 * when summing up to 4 places). */
static void fill(void *b, int64_t n, pe_dtype dt, uint64_t *s) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = next_u64(s);
        double u = (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        double v = ldexp(u, (int)(r % 25) - 12);
        int64_t iv = (int64_t)(r >> 40) % (1 << 21) - (1 << 20);
        switch (dt) {
        case PE_DTYPE_FP32: ((float *)b)[i] = (float)v; break;
        case PE_DTYPE_FP64: ((double *)b)[i] = v; break;
        case PE_DTYPE_INT32: ((int32_t *)b)[i] = (int32_t)iv; break;
        default: ((int64_t *)b)[i] = iv; break;
        }
    }
}

/* out[i] = in[0][i] + in[1][i] + ... + in[n-1][i], left to right, in dt. */
static void ref_sum(void *out, void *const *in, int n, int64_t numel, pe_dtype dt) {
    for (int64_t i = 0; i < numel; i++) {
        switch (dt) {
        case PE_DTYPE_FP32: {
            float s = ((const float *)in[0])[i];
            for (int p = 1; p < n; p++) s += ((const float *)in[p])[i];
            ((float *)out)[i] = s;
        } break;
        case PE_DTYPE_FP64: {
            double s = ((const double *)in[0])[i];
            for (int p = 1; p < n; p++) s += ((const double *)in[p])[i];
            ((double *)out)[i] = s;
        } break;
        case PE_DTYPE_INT32: {
            int32_t s = ((const int32_t *)in[0])[i];
            for (int p = 1; p < n; p++) s += ((const int32_t *)in[p])[i];
            ((int32_t *)out)[i] = s;
        } break;
        default: {
            int64_t s = ((const int64_t *)in[0])[i];
            for (int p = 1; p < n; p++) s += ((const int64_t *)in[p])[i];
            ((int64_t *)out)[i] = s;
        } break;
        }
    }
}

/* First differing element index of a and b (numel elements of es bytes), or -1. */
static int64_t first_diff(const void *a, const void *b, int64_t numel, size_t es) {
    if (numel <= 0 || !memcmp(a, b, (size_t)numel * es)) return -1;
    for (int64_t i = 0; i < numel; i++)
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es)) return i;
    return -1;
}

#define ASSERT_SAME(a, b, numel, es, ...)                                                  \
    do {                                                                                   \
        int64_t d_ = first_diff((a), (b), (numel), (es));                                  \
        if (d_ >= 0) {                                                                     \
            print_error(__VA_ARGS__);                                                      \
            print_error(": element %lld of %lld differs\n", (long long)d_, (long long)(numel)); \
            fail();                                                                        \
        }                                                                                  \
    } while (0)

/* Buffers for up to 4 places: orig (inputs), bufs (operated on), ref. */
typedef struct {
    void *orig[4], *bufs[4], *ref;
} bufset;

static void bufset_init(bufset *b, size_t bytes) {
    for (int p = 0; p < 4; p++) {
        b->orig[p] = malloc(bytes ? bytes : 1);
        b->bufs[p] = malloc(bytes ? bytes : 1);
        assert_non_null(b->orig[p]);
        assert_non_null(b->bufs[p]);
    }
    b->ref = malloc(bytes ? bytes : 1);
    assert_non_null(b->ref);
}

static void bufset_free(bufset *b) {
    for (int p = 0; p < 4; p++) {
        free(b->orig[p]);
        free(b->bufs[p]);
    }
    free(b->ref);
}

static void reset(bufset *b, int n, size_t bytes) {
    for (int p = 0; p < n; p++) memcpy(b->bufs[p], b->orig[p], bytes);
}

/* ---- in-process backend -------------------------------------------------- */

/* Every dtype x 1..4 places x every size x {1, 2} threads: allreduce, reduce
 * to the first and last place, broadcast from the last place. */
static void test_inproc_matches_place_order_sum(void **state) {
    (void)state;
    bufset b;
    bufset_init(&b, (size_t)MAX_NUMEL * 8);
    for (int threads = 1; threads <= 2; threads++)
        for (int n = 1; n <= 4; n++) {
            pe_comm_group *c = pe_comm_inproc_new(n, threads);
            assert_non_null(c);
            assert_int_equal(c->n_places, n);
            for (int di = 0; di < N_DTYPES; di++)
                for (int si = 0; si < N_SIZES; si++) {
                    pe_dtype dt = k_dtypes[di];
                    int64_t numel = k_sizes[si];
                    size_t es = pe_dtype_size(dt), bytes = (size_t)numel * es;
                    /* smaller sizes are cheap: the big one only once per dtype/n */
                    if (numel > 65537 && threads == 1 && n != 4) continue;
                    for (int p = 0; p < n; p++) fill(b.orig[p], numel, dt, &g_rng);
                    ref_sum(b.ref, b.orig, n, numel, dt);

                    reset(&b, n, bytes);
                    assert_int_equal(pe_group_allreduce(c, b.bufs, numel, dt), PE_OK);
                    for (int p = 0; p < n; p++)
                        ASSERT_SAME(b.bufs[p], b.ref, numel, es, "allreduce %s n=%d numel=%lld threads=%d place %d",
                                    pe_dtype_name(dt), n, (long long)numel, threads, p);

                    int roots[2] = {0, n - 1};
                    for (int ri = 0; ri < 2; ri++) {
                        int root = roots[ri];
                        reset(&b, n, bytes);
                        assert_int_equal(pe_group_reduce(c, b.bufs, numel, dt, root), PE_OK);
                        for (int p = 0; p < n; p++)
                            ASSERT_SAME(b.bufs[p], p == root ? b.ref : b.orig[p], numel, es,
                                        "reduce %s n=%d numel=%lld threads=%d root %d place %d", pe_dtype_name(dt), n,
                                        (long long)numel, threads, root, p);
                    }

                    reset(&b, n, bytes);
                    assert_int_equal(pe_group_broadcast(c, b.bufs, numel, dt, n - 1), PE_OK);
                    for (int p = 0; p < n; p++)
                        ASSERT_SAME(b.bufs[p], b.orig[n - 1], numel, es,
                                    "broadcast %s n=%d numel=%lld threads=%d place %d", pe_dtype_name(dt), n,
                                    (long long)numel, threads, p);
                }
            pe_group_free(c);
        }
    bufset_free(&b);
}

/* Hand-computed values, independent of ref_sum: place p holds i * (p + 1). */
static void test_inproc_reduce_nonzero_root(void **state) {
    (void)state;
    enum { N = 3, M = 20000 }; /* > one fp64 chunk */
    double *v[N];
    for (int p = 0; p < N; p++) {
        v[p] = malloc(M * sizeof(double));
        assert_non_null(v[p]);
        for (int i = 0; i < M; i++) v[p][i] = (double)i * (p + 1);
    }
    pe_comm_group *c = pe_comm_inproc_new(N, 2);
    assert_non_null(c);
    assert_int_equal(pe_group_reduce(c, (void *const *)v, M, PE_DTYPE_FP64, 2), PE_OK);
    for (int i = 0; i < M; i++) {
        if (v[0][i] != (double)i || v[1][i] != 2.0 * i || v[2][i] != 6.0 * i)
            fail_msg("reduce to place 2, element %d: got %g %g %g, want %g %g %g", i, v[0][i], v[1][i], v[2][i],
                     (double)i, 2.0 * i, 6.0 * i);
    }
    /* broadcast from place 1: everyone gets 2i */
    assert_int_equal(pe_group_broadcast(c, (void *const *)v, M, PE_DTYPE_FP64, 1), PE_OK);
    for (int i = 0; i < M; i++)
        if (v[0][i] != 2.0 * i || v[1][i] != 2.0 * i || v[2][i] != 2.0 * i)
            fail_msg("broadcast from place 1, element %d: got %g %g %g, want %g", i, v[0][i], v[1][i], v[2][i],
                     2.0 * i);
    /* allreduce: 3 * 2i */
    assert_int_equal(pe_group_allreduce(c, (void *const *)v, M, PE_DTYPE_FP64), PE_OK);
    for (int i = 0; i < M; i++)
        if (v[0][i] != 6.0 * i || v[1][i] != 6.0 * i || v[2][i] != 6.0 * i)
            fail_msg("allreduce, element %d: got %g %g %g, want %g", i, v[0][i], v[1][i], v[2][i], 6.0 * i);
    pe_group_free(c);
    for (int p = 0; p < N; p++) free(v[p]);
}

/* Broadcast moves bytes: dtypes that cannot be summed still broadcast. */
static void test_inproc_broadcast_any_dtype(void **state) {
    (void)state;
    uint16_t a[3] = {1, 2, 3}, b[3] = {7, 8, 9};
    void *bufs[2] = {a, b};
    pe_comm_group *c = pe_comm_inproc_new(2, 1);
    assert_non_null(c);
    assert_int_equal(pe_group_broadcast(c, bufs, 3, PE_DTYPE_FP16, 1), PE_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(a[0], 7);
    pe_group_free(c);
}

static void test_inproc_errors(void **state) {
    (void)state;
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    const float a0[4] = {1, 2, 3, 4}, b0[4] = {5, 6, 7, 8};
    void *bufs[2] = {a, b};
    pe_comm_group *c = pe_comm_inproc_new(2, 2);
    assert_non_null(c);
    assert_string_equal(c->ops->name, "inproc");

    assert_int_equal(pe_group_allreduce(c, bufs, 4, PE_DTYPE_FP16), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "allreduce"));
    assert_non_null(strstr(pe_last_error(), "float16"));
    assert_int_equal(pe_group_reduce(c, bufs, 4, PE_DTYPE_BOOL, 0), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "reduce"));
    assert_non_null(strstr(pe_last_error(), "bool"));
    assert_int_equal(pe_group_allreduce(c, bufs, 4, (pe_dtype)99), PE_ERR_UNSUPPORTED);

    assert_int_equal(pe_group_reduce(c, bufs, 4, PE_DTYPE_FP32, 2), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "root 2 is not a place (0..1)"));
    assert_int_equal(pe_group_reduce(c, bufs, 4, PE_DTYPE_FP32, -1), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "root -1"));
    assert_int_equal(pe_group_broadcast(c, bufs, 4, PE_DTYPE_FP32, 2), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "broadcast"));
    /* a bad root is an error even with nothing to move */
    assert_int_equal(pe_group_reduce(c, bufs, 0, PE_DTYPE_FP32, 5), PE_ERR_INVALID);

    /* nothing was touched by the failed calls */
    assert_memory_equal(a, a0, sizeof a);
    assert_memory_equal(b, b0, sizeof b);
    pe_group_free(c);

    pe_clear_error();
    assert_null(pe_comm_inproc_new(0, 1));
    assert_non_null(strstr(pe_last_error(), "at least one place"));
    pe_group_free(NULL);
}

/* ---- concurrency ----------------------------------------------------------- */

/* One worker: `iters` collectives on its own buffers through the shared
 * comm, each checked against its reference; failures are counted (cmocka's
 * asserts are for the main thread). */
typedef struct {
    pe_comm_group *comm;
    pthread_barrier_t *start;
    int n, iters, mode; /* mode 0: allreduce; 1: reduce to place n-1 then broadcast from it */
    int64_t numel;
    pe_dtype dt;
    bufset b;
    int bad;
    char why[256];
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    size_t es = pe_dtype_size(w->dt), bytes = (size_t)w->numel * es;
    pthread_barrier_wait(w->start);
    for (int it = 0; it < w->iters && !w->bad; it++) {
        reset(&w->b, w->n, bytes);
        pe_status st = w->mode == 0 ? pe_group_allreduce(w->comm, w->b.bufs, w->numel, w->dt)
                                    : pe_group_reduce(w->comm, w->b.bufs, w->numel, w->dt, w->n - 1);
        if (st == PE_OK && w->mode == 1) st = pe_group_broadcast(w->comm, w->b.bufs, w->numel, w->dt, w->n - 1);
        if (st != PE_OK) {
            snprintf(w->why, sizeof w->why, "iteration %d: %s", it, pe_last_error());
            w->bad = 1;
            break;
        }
        for (int p = 0; p < w->n; p++) {
            int64_t d = first_diff(w->b.bufs[p], w->b.ref, w->numel, es);
            if (d >= 0) {
                snprintf(w->why, sizeof w->why, "iteration %d, place %d: element %lld differs from the reference", it,
                         p, (long long)d);
                w->bad = 1;
                break;
            }
        }
    }
    return NULL;
}

/* Two pthreads, two vars, one comm (as the scheduler does with gradients). */
static void run_concurrent(pe_comm_group *c, int n, int mode_b) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    worker w[2];
    memset(w, 0, sizeof w);
    for (int k = 0; k < 2; k++) {
        w[k].comm = c;
        w[k].start = &start;
        w[k].n = n;
        w[k].iters = 40;
        w[k].mode = k == 0 ? 0 : mode_b;
        w[k].numel = 300001; /* many chunks and tiles */
        w[k].dt = k == 0 ? PE_DTYPE_FP32 : PE_DTYPE_FP64;
        size_t bytes = (size_t)w[k].numel * pe_dtype_size(w[k].dt);
        bufset_init(&w[k].b, bytes);
        for (int p = 0; p < n; p++) fill(w[k].b.orig[p], w[k].numel, w[k].dt, &g_rng);
        ref_sum(w[k].b.ref, w[k].b.orig, n, w[k].numel, w[k].dt);
    }
    pthread_t t[2];
    for (int k = 0; k < 2; k++) assert_int_equal(pthread_create(&t[k], NULL, worker_main, &w[k]), 0);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    pthread_barrier_destroy(&start);
    for (int k = 0; k < 2; k++) {
        if (w[k].bad) fail_msg("concurrent worker %d (%s, mode %d): %s", k, pe_dtype_name(w[k].dt), w[k].mode, w[k].why);
        bufset_free(&w[k].b);
    }
}

static void test_inproc_concurrent_collectives(void **state) {
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        pe_comm_group *c = pe_comm_inproc_new(3, threads);
        assert_non_null(c);
        run_concurrent(c, 3, 0); /* allreduce || allreduce */
        run_concurrent(c, 3, 1); /* allreduce || reduce + broadcast */
        pe_group_free(c);
    }
}

/* ---- factory ---------------------------------------------------------------- */

static void test_factory_cpu(void **state) {
    (void)state;
    pe_place places[4] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2), pe_place_cpu(3)};
    pe_comm_group *c = pe_comm_new_for_places(places, 4, 2);
    assert_non_null(c);
    assert_string_equal(c->ops->name, "inproc");
    assert_int_equal(c->n_places, 4);
    int32_t v[4][5];
    void *bufs[4];
    for (int p = 0; p < 4; p++) {
        bufs[p] = v[p];
        for (int i = 0; i < 5; i++) v[p][i] = 10 * p + i;
    }
    assert_int_equal(pe_group_allreduce(c, bufs, 5, PE_DTYPE_INT32), PE_OK);
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 5; i++) assert_int_equal(v[p][i], 60 + 4 * i);
    pe_group_free(c);

    c = pe_comm_new_for_places(places, 1, 1);
    assert_non_null(c);
    assert_int_equal(c->n_places, 1);
    pe_group_free(c);
}

/* One CUDA place needs no NCCL and no GPU to build the comm: its collectives
 * move nothing and never read the buffer (here a pointer that is not even
 * memory, as a device pointer would not be on the host). */
static void test_factory_single_cuda_place(void **state) {
    (void)state;
    pe_place one[1] = {pe_place_cuda(0)};
    pe_comm_group *c = pe_comm_new_for_places(one, 1, 4);
    assert_non_null(c);
    assert_int_equal(c->n_places, 1);
    void *bufs[1] = {(void *)(uintptr_t)0x10};
    assert_int_equal(pe_group_allreduce(c, bufs, 1000, PE_DTYPE_FP32), PE_OK);
    assert_int_equal(pe_group_reduce(c, bufs, 1000, PE_DTYPE_INT64, 0), PE_OK);
    assert_int_equal(pe_group_broadcast(c, bufs, 1000, PE_DTYPE_FP64, 0), PE_OK);
    assert_int_equal(pe_group_reduce(c, bufs, 1000, PE_DTYPE_FP32, 1), PE_ERR_INVALID);
    pe_group_free(c);
}

static void test_factory_errors(void **state) {
    (void)state;
    pe_place mixed[2] = {pe_place_cpu(0), pe_place_cuda(0)};
    assert_null(pe_comm_new_for_places(mixed, 2, 1));
    assert_non_null(strstr(pe_last_error(), "cpu:0"));
    assert_non_null(strstr(pe_last_error(), "cuda:0"));
    assert_non_null(strstr(pe_last_error(), "one kind"));

    pe_place cpu[1] = {pe_place_cpu(0)};
    assert_null(pe_comm_new_for_places(cpu, 0, 1));
    assert_non_null(strstr(pe_last_error(), "got 0"));
    assert_null(pe_comm_new_for_places(NULL, 2, 1));
    assert_non_null(strstr(pe_last_error(), "NULL"));
    assert_null(pe_comm_new_for_places(cpu, PE_MAX_PLACES + 1, 1));

    /* CUDA places this machine / build cannot serve */
    int g = tu_gpu_count();
    pe_place past[2] = {pe_place_cuda(0), pe_place_cuda(g)};
    assert_null(pe_comm_new_for_places(past, 2, 1));
#ifdef PE_WITH_CUDA
    char want[64];
    snprintf(want, sizeof want, "cuda:%d: %d CUDA device(s) visible", g, g);
    assert_non_null(strstr(pe_last_error(), want));
    if (g >= 1) {
        pe_place dup[2] = {pe_place_cuda(0), pe_place_cuda(0)};
        assert_null(pe_comm_new_for_places(dup, 2, 1));
        assert_non_null(strstr(pe_last_error(), "same GPU"));
    }
#else
    assert_non_null(strstr(pe_last_error(), "without CUDA"));
#endif
}

/* ---- NCCL --------------------------------------------------------------------- */

#ifdef PE_WITH_NCCL
/* Device copies of host buffers h[0..n) on cuda:0..n-1. */
static void to_devices(void **d, void *const *h, int n, size_t bytes) {
    for (int p = 0; p < n; p++)
        assert_int_equal(pe_memcpy_places(d[p], pe_place_cuda(p), h[p], pe_place_cpu(0), bytes), PE_OK);
}

static void from_devices(void **h, void *const *d, int n, size_t bytes) {
    for (int p = 0; p < n; p++)
        assert_int_equal(pe_memcpy_places(h[p], pe_place_cpu(0), d[p], pe_place_cuda(p), bytes), PE_OK);
}

/* got vs the CPU backend's want: integers exact; floats within n ulps of
 * the sum of magnitudes (another summation order rounds differently). */
static void assert_close_sum(const void *got, const void *want, void *const *in, int n, int64_t numel, pe_dtype dt,
                             const char *what) {
    for (int64_t i = 0; i < numel; i++) {
        double g, w, mag = 0, eps;
        switch (dt) {
        case PE_DTYPE_FP32:
            g = ((const float *)got)[i], w = ((const float *)want)[i], eps = FLT_EPSILON;
            for (int p = 0; p < n; p++) mag += fabs(((const float *)in[p])[i]);
            break;
        case PE_DTYPE_FP64:
            g = ((const double *)got)[i], w = ((const double *)want)[i], eps = DBL_EPSILON;
            for (int p = 0; p < n; p++) mag += fabs(((const double *)in[p])[i]);
            break;
        case PE_DTYPE_INT32:
            g = ((const int32_t *)got)[i], w = ((const int32_t *)want)[i], eps = 0;
            break;
        default:
            g = (double)((const int64_t *)got)[i], w = (double)((const int64_t *)want)[i], eps = 0;
            break;
        }
        if (fabs(g - w) > n * eps * mag) fail_msg("%s: element %lld: NCCL %.17g, CPU %.17g", what, (long long)i, g, w);
    }
}
#endif

static void test_nccl_matches_cpu(void **state) {
    (void)state;
    TU_NEED_GPUS(2, "test_comm");
#ifndef PE_WITH_NCCL
    TU_SKIP_GPU("%s: PE was built with CUDA but without NCCL", __func__);
#else
    int gmax = tu_gpu_count() < 4 ? tu_gpu_count() : 4;
    static const int64_t sizes[] = {1, 2047, 2049, 65537, (1 << 20) + 5};
    bufset h, got;
    bufset_init(&h, (size_t)MAX_NUMEL * 8);
    bufset_init(&got, (size_t)MAX_NUMEL * 8);
    for (int n = 2; n <= gmax; n++) {
        pe_place places[4];
        void *d[4];
        for (int p = 0; p < n; p++) {
            places[p] = pe_place_cuda(p);
            d[p] = pe_place_alloc(places[p], (size_t)MAX_NUMEL * 8);
            assert_non_null(d[p]);
        }
        pe_comm_group *g = pe_comm_new_for_places(places, n, 1);
        if (!g) fail_msg("NCCL comm over %d GPUs: %s", n, pe_last_error());
        assert_string_equal(g->ops->name, "nccl");
        pe_comm_group *cpu = pe_comm_inproc_new(n, 1);
        assert_non_null(cpu);
        for (int di = 0; di < N_DTYPES; di++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                pe_dtype dt = k_dtypes[di];
                int64_t numel = sizes[si];
                size_t es = pe_dtype_size(dt), bytes = (size_t)numel * es;
                char what[96];
                snprintf(what, sizeof what, "%s on %d GPUs, %lld elements", pe_dtype_name(dt), n, (long long)numel);
                for (int p = 0; p < n; p++) fill(h.orig[p], numel, dt, &g_rng);
                /* CPU result */
                reset(&h, n, bytes);
                assert_int_equal(pe_group_allreduce(cpu, h.bufs, numel, dt), PE_OK);
                memcpy(h.ref, h.bufs[0], bytes);
                /* allreduce, twice: close to the CPU, bitwise repeatable */
                to_devices(d, h.orig, n, bytes);
                if (pe_group_allreduce(g, d, numel, dt) != PE_OK) fail_msg("allreduce %s: %s", what, pe_last_error());
                from_devices(got.bufs, d, n, bytes);
                for (int p = 0; p < n; p++) assert_close_sum(got.bufs[p], h.ref, h.orig, n, numel, dt, what);
                for (int p = 1; p < n; p++) ASSERT_SAME(got.bufs[p], got.bufs[0], numel, es, "allreduce %s: place %d vs 0", what, p);
                memcpy(got.ref, got.bufs[0], bytes);
                to_devices(d, h.orig, n, bytes);
                assert_int_equal(pe_group_allreduce(g, d, numel, dt), PE_OK);
                from_devices(got.bufs, d, n, bytes);
                ASSERT_SAME(got.bufs[0], got.ref, numel, es, "allreduce %s: second run", what);
                /* reduce to the last place: others unchanged */
                to_devices(d, h.orig, n, bytes);
                if (pe_group_reduce(g, d, numel, dt, n - 1) != PE_OK) fail_msg("reduce %s: %s", what, pe_last_error());
                from_devices(got.bufs, d, n, bytes);
                assert_close_sum(got.bufs[n - 1], h.ref, h.orig, n, numel, dt, what);
                for (int p = 0; p < n - 1; p++)
                    ASSERT_SAME(got.bufs[p], h.orig[p], numel, es, "reduce %s: place %d changed", what, p);
                /* broadcast from the last place */
                to_devices(d, h.orig, n, bytes);
                if (pe_group_broadcast(g, d, numel, dt, n - 1) != PE_OK) fail_msg("broadcast %s: %s", what, pe_last_error());
                from_devices(got.bufs, d, n, bytes);
                for (int p = 0; p < n; p++)
                    ASSERT_SAME(got.bufs[p], h.orig[n - 1], numel, es, "broadcast %s: place %d", what, p);
            }
        /* errors, as the CPU backend reports them */
        assert_int_equal(pe_group_allreduce(g, d, 4, PE_DTYPE_FP16), PE_ERR_UNSUPPORTED);
        assert_non_null(strstr(pe_last_error(), "float16"));
        assert_int_equal(pe_group_reduce(g, d, 4, PE_DTYPE_FP32, n), PE_ERR_INVALID);
        assert_non_null(strstr(pe_last_error(), "root"));
        assert_int_equal(pe_group_broadcast(g, d, 4, PE_DTYPE_FP32, -1), PE_ERR_INVALID);
        pe_group_free(cpu);
        pe_group_free(g);
        for (int p = 0; p < n; p++) pe_place_free(places[p], d[p], (size_t)MAX_NUMEL * 8);
    }
    bufset_free(&h);
    bufset_free(&got);
#endif
}

#ifdef PE_WITH_NCCL
typedef struct {
    pe_comm_group *comm;
    pthread_barrier_t *start;
    int n, iters;
    int64_t numel;
    void *d[2];
    void *h[2];
    void *ref;
    int bad;
    char why[256];
} gpu_worker;

/* Allreduces of this worker's fp64 integers (exact in any order). */
static void *gpu_worker_main(void *arg) {
    gpu_worker *w = arg;
    size_t bytes = (size_t)w->numel * 8;
    pthread_barrier_wait(w->start);
    for (int it = 0; it < w->iters && !w->bad; it++) {
        pe_status st = PE_OK;
        for (int p = 0; p < w->n && st == PE_OK; p++)
            st = pe_memcpy_places(w->d[p], pe_place_cuda(p), w->h[p], pe_place_cpu(0), bytes);
        if (st == PE_OK) st = pe_group_allreduce(w->comm, w->d, w->numel, PE_DTYPE_FP64);
        for (int p = 0; p < w->n && st == PE_OK; p++) {
            double *back = malloc(bytes);
            if (!back) { st = PE_ERR_NOMEM; break; }
            st = pe_memcpy_places(back, pe_place_cpu(0), w->d[p], pe_place_cuda(p), bytes);
            if (st == PE_OK && memcmp(back, w->ref, bytes)) {
                snprintf(w->why, sizeof w->why, "iteration %d, cuda:%d: wrong sum", it, p);
                w->bad = 1;
            }
            free(back);
        }
        if (st != PE_OK) {
            snprintf(w->why, sizeof w->why, "iteration %d: %s", it, pe_last_error());
            w->bad = 1;
        }
    }
    return NULL;
}
#endif

/* Two pthreads allreducing different vars through one NCCL comm. */
static void test_nccl_concurrent(void **state) {
    (void)state;
    TU_NEED_GPUS(2, "test_comm");
#ifndef PE_WITH_NCCL
    TU_SKIP_GPU("%s: PE was built with CUDA but without NCCL", __func__);
#else
    pe_place places[2] = {pe_place_cuda(0), pe_place_cuda(1)};
    pe_comm_group *g = pe_comm_new_for_places(places, 2, 1);
    if (!g) fail_msg("%s", pe_last_error());
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    gpu_worker w[2];
    memset(w, 0, sizeof w);
    for (int k = 0; k < 2; k++) {
        w[k].comm = g;
        w[k].start = &start;
        w[k].n = 2;
        w[k].iters = 20;
        w[k].numel = 300001 + k;
        size_t bytes = (size_t)w[k].numel * 8;
        w[k].ref = malloc(bytes);
        assert_non_null(w[k].ref);
        for (int p = 0; p < 2; p++) {
            w[k].h[p] = malloc(bytes);
            assert_non_null(w[k].h[p]);
            w[k].d[p] = pe_place_alloc(places[p], bytes);
            assert_non_null(w[k].d[p]);
            for (int64_t i = 0; i < w[k].numel; i++) ((double *)w[k].h[p])[i] = (double)((i * (k + 3) + p) % 1000);
        }
        for (int64_t i = 0; i < w[k].numel; i++)
            ((double *)w[k].ref)[i] = ((double *)w[k].h[0])[i] + ((double *)w[k].h[1])[i];
    }
    pthread_t t[2];
    for (int k = 0; k < 2; k++) assert_int_equal(pthread_create(&t[k], NULL, gpu_worker_main, &w[k]), 0);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    pthread_barrier_destroy(&start);
    for (int k = 0; k < 2; k++) {
        if (w[k].bad) fail_msg("worker %d: %s", k, w[k].why);
        for (int p = 0; p < 2; p++) {
            pe_place_free(places[p], w[k].d[p], (size_t)w[k].numel * 8);
            free(w[k].h[p]);
        }
        free(w[k].ref);
    }
    pe_group_free(g);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inproc_matches_place_order_sum),
        cmocka_unit_test(test_inproc_reduce_nonzero_root),
        cmocka_unit_test(test_inproc_broadcast_any_dtype),
        cmocka_unit_test(test_inproc_errors),
        cmocka_unit_test(test_inproc_concurrent_collectives),
        cmocka_unit_test(test_factory_cpu),
        cmocka_unit_test(test_factory_single_cuda_place),
        cmocka_unit_test(test_factory_errors),
        cmocka_unit_test(test_nccl_matches_cpu),
        cmocka_unit_test(test_nccl_concurrent),
    };
    return TU_RUN_GROUP(tests);
}
