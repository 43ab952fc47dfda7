/* benchmarks/bench_gemm.c — the MLP's GEMMs on 64 and 128 rows: OpenBLAS's
 * sgemm (what PE runs) against oneDNN's dnnl_sgemm and oneDNN's matmul
 * primitive (issue 17 item 3, docs/benchmarks.md "Small per-place
 * batches").
 *
 *   bench_gemm [REPS]
 *
 * One OpenMP thread (a place's share when 2 places split 2 cores). For each
 * product of examples/mlp_train.pe (784-512-256-10: the forward X W, the
 * input gradient dOut W^T, the weight gradient X^T dOut) at 64 rows (one
 * place's half of a batch of 128) and 128 rows: the median of REPS
 * (default 200) calls of each library after 5 warm-up calls, in µs, and
 * µs per row at 64 relative to 128 (1.00: the half batch costs half). Then
 * two properties that decide whether PE may use them, whatever their speed:
 * - heap allocations per call at 64 rows, all and those of at least 4 KiB
 *   (benchmarks/heap_count.c, linked in), which PE's steady state must not
 *   make (tests/unit/test_heap.c): the matmul primitive runs with a user
 *   scratchpad, as PE's oneDNN kernels do;
 * - bitwise identity of [64, 784] x [784, 512] and of X^T Y with X, Y
 *   [5000, 16] on 1 and 8 threads of the library's own threading
 *   (tests/unit/test_ops_math.c requires it of PE's products, which
 *   ops/cpu/gemm.c gets from OpenBLAS by splitting the product itself), and
 *   for dnnl_sgemm of two row blocks against the whole.
 * Do not run it at real-time priority (chrt): 8 OpenMP threads spinning at
 * one FIFO priority on fewer cores never yield to each other.
 * Run from anywhere.
 */
#include "benchmarks/bench_util.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* benchmarks/heap_count.c's counters of allocating calls (all, and those of
 * at least 4 KiB); absent in sanitizer builds (the counts then print as -1) */
int64_t pe_heap_calls(void) __attribute__((weak));
int64_t pe_heap_big_calls(void) __attribute__((weak));

typedef struct {
    const char *name;
    bool ta, tb;
    int m, n, k; /* C [m, n] = op(A) [m, k] op(B) [k, n] */
} shape;

enum { OPENBLAS, DNNL_SGEMM, DNNL_MATMUL, N_IMPL };
static const char *const k_impl[N_IMPL] = {"openblas", "dnnl_sgemm", "dnnl_matmul"};

typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, scratch;
    void *scratch_buf;
} matmul;

static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;

static int dnnl_die(const char *what, dnnl_status_t s) {
    fprintf(stderr, "bench_gemm: %s: oneDNN status %d\n", what, (int)s);
    return 1;
}

/* A matmul primitive on plain row-major operands (strides give the
 * transposes), scratchpad supplied by the caller as PE's oneDNN kernels do. */
static int matmul_init(matmul *mm, const shape *q, float *a, float *b, float *c) {
    dnnl_memory_desc_t amd, bmd, cmd, smd;
    dnnl_dims_t ad = {q->m, q->k}, bd = {q->k, q->n}, cd = {q->m, q->n};
    dnnl_dims_t as = {q->ta ? 1 : q->k, q->ta ? q->m : 1}, bs = {q->tb ? 1 : q->n, q->tb ? q->k : 1};
    dnnl_status_t s;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    dnnl_matmul_desc_t md;
    if ((s = dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_f32, as)) ||
        (s = dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_f32, bs)) ||
        (s = dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_f32, dnnl_ab)) ||
        (s = dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd)) || (s = dnnl_primitive_attr_create(&attr)) ||
        (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) ||
        (s = dnnl_primitive_desc_create(&pd, &md, attr, g_eng, NULL)) || (s = dnnl_primitive_create(&mm->prim, pd)))
        return dnnl_die("matmul primitive", s);
    const dnnl_memory_desc_t *sq = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    smd = *sq;
    size_t sbytes = dnnl_memory_desc_get_size(&smd);
    mm->scratch_buf = sbytes ? aligned_alloc(64, (sbytes + 63) / 64 * 64) : NULL;
    if ((s = dnnl_memory_create(&mm->a, &amd, g_eng, a)) || (s = dnnl_memory_create(&mm->b, &bmd, g_eng, b)) ||
        (s = dnnl_memory_create(&mm->c, &cmd, g_eng, c)) ||
        (s = dnnl_memory_create(&mm->scratch, &smd, g_eng, sbytes ? mm->scratch_buf : NULL)))
        return dnnl_die("matmul memory", s);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    return 0;
}

static void matmul_free(matmul *mm) {
    dnnl_memory_destroy(mm->a);
    dnnl_memory_destroy(mm->b);
    dnnl_memory_destroy(mm->c);
    dnnl_memory_destroy(mm->scratch);
    dnnl_primitive_destroy(mm->prim);
    free(mm->scratch_buf);
}

static int run(int impl, const shape *q, const float *a, const float *b, float *c, matmul *mm) {
    const int lda = q->ta ? q->m : q->k, ldb = q->tb ? q->k : q->n;
    dnnl_status_t s = dnnl_success;
    switch (impl) {
    case OPENBLAS:
        cblas_sgemm(CblasRowMajor, q->ta ? CblasTrans : CblasNoTrans, q->tb ? CblasTrans : CblasNoTrans, q->m, q->n,
                    q->k, 1.0f, a, lda, b, ldb, 0.0f, c, q->n);
        break;
    case DNNL_SGEMM:
        s = dnnl_sgemm(q->ta ? 'T' : 'N', q->tb ? 'T' : 'N', q->m, q->n, q->k, 1.0f, a, lda, b, ldb, 0.0f, c, q->n);
        break;
    default: {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mm->a}, {DNNL_ARG_WEIGHTS, mm->b}, {DNNL_ARG_DST, mm->c},
                                   {DNNL_ARG_SCRATCHPAD, mm->scratch}};
        if (!(s = dnnl_primitive_execute(mm->prim, g_stream, 4, args))) s = dnnl_stream_wait(g_stream);
    }
    }
    return s ? dnnl_die(k_impl[impl], s) : 0;
}

/* Bitwise: op(A) op(B) on 1 and on 8 threads (threaded by the library);
 * for dnnl_sgemm also the rows [0, m/2) and [m/2, m) as two single-threaded
 * calls. Prints one line. */
static int same_bits(const shape *q, const float *a, const float *b) {
    size_t bytes = sizeof(float) * (size_t)q->m * (size_t)q->n;
    float *c1 = malloc(bytes), *c8 = malloc(bytes);
    if (!c1 || !c8) return bench_die("out of memory");
    printf("  %-28s", q->name);
    for (int impl = 0; impl < N_IMPL; impl++) {
        matmul mm1 = {0}, mm8 = {0};
        omp_set_num_threads(1);
        if ((impl == DNNL_MATMUL && matmul_init(&mm1, q, (float *)a, (float *)b, c1)) || run(impl, q, a, b, c1, &mm1))
            return 1;
        omp_set_num_threads(8);
        if ((impl == DNNL_MATMUL && matmul_init(&mm8, q, (float *)a, (float *)b, c8)) || run(impl, q, a, b, c8, &mm8))
            return 1;
        omp_set_num_threads(1);
        printf("  %s 1 vs 8 threads: %s", k_impl[impl], memcmp(c1, c8, bytes) ? "DIFFER" : "same");
        if (impl == DNNL_MATMUL) matmul_free(&mm1), matmul_free(&mm8);
    }
    /* dnnl_sgemm on two row blocks (A [m, k] not transposed here) */
    if (!q->ta) {
        const int h = q->m / 2, lda = q->k, ldb = q->tb ? q->k : q->n;
        dnnl_sgemm('N', q->tb ? 'T' : 'N', h, q->n, q->k, 1.0f, a, lda, b, ldb, 0.0f, c8, q->n);
        dnnl_sgemm('N', q->tb ? 'T' : 'N', q->m - h, q->n, q->k, 1.0f, a + (size_t)h * lda, lda, b, ldb, 0.0f,
                   c8 + (size_t)h * q->n, q->n);
        dnnl_sgemm('N', q->tb ? 'T' : 'N', q->m, q->n, q->k, 1.0f, a, lda, b, ldb, 0.0f, c1, q->n);
        printf("  dnnl_sgemm row blocks: %s", memcmp(c1, c8, bytes) ? "DIFFER" : "same");
    }
    printf("\n");
    free(c1);
    free(c8);
    return 0;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps < 1) {
        fprintf(stderr, "usage: bench_gemm [REPS>=1]\n");
        return 2;
    }
    dnnl_status_t s;
    if ((s = dnnl_engine_create(&g_eng, dnnl_cpu, 0)) ||
        (s = dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags)))
        return dnnl_die("engine", s);
    omp_set_num_threads(1);
    const shape shapes[] = {
        {"fc_0 X W", false, false, 0, 512, 784},       {"fc_1 X W", false, false, 0, 256, 512},
        {"fc_2 X W", false, false, 0, 10, 256},        {"fc_1 dOut W^T", false, true, 0, 512, 256},
        {"fc_2 dOut W^T", false, true, 0, 256, 10},    {"fc_0 X^T dOut", true, false, 784, 512, 0},
        {"fc_1 X^T dOut", true, false, 512, 256, 0},   {"fc_2 X^T dOut", true, false, 256, 10, 0},
    };
    const size_t big = 5000 * 784;
    float *a = malloc(sizeof(float) * big), *b = malloc(sizeof(float) * big), *c = malloc(sizeof(float) * big);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!a || !b || !c || !t) return bench_die("out of memory");
    for (size_t i = 0; i < big; i++) {
        a[i] = (float)((i * 7919u) % 1000) / 1000.0f - 0.5f;
        b[i] = (float)((i * 104729u) % 1000) / 1000.0f - 0.5f;
    }
    printf("µs per call, median of %d, 1 thread; at 64 rows: (µs per row at 64) / (µs per row at 128)\n", reps);
    printf("%-16s %-11s %7s %7s %6s %6s %6s\n", "product", "library", "64", "128", "ratio", "allocs", ">=4KiB");
    double total[N_IMPL][2] = {{0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int impl = 0; impl < N_IMPL; impl++) {
            double med[2];
            double allocs = -1, big = -1;
            for (int r = 0; r < 2; r++) {
                shape q = shapes[i];
                const int rows = r ? 128 : 64;
                if (q.ta) q.k = rows; /* the weight gradient sums over the rows */
                else q.m = rows;
                matmul mm = {0};
                if (impl == DNNL_MATMUL && matmul_init(&mm, &q, a, b, c)) return 1;
                for (int w = 0; w < 5; w++)
                    if (run(impl, &q, a, b, c, &mm)) return 1;
                const int64_t calls0 = pe_heap_calls ? pe_heap_calls() : 0;
                const int64_t big0 = pe_heap_big_calls ? pe_heap_big_calls() : 0;
                for (int k = 0; k < reps; k++) {
                    double t0 = bench_now();
                    if (run(impl, &q, a, b, c, &mm)) return 1;
                    t[k] = bench_now() - t0;
                }
                if (r == 0 && pe_heap_calls && pe_heap_big_calls) {
                    allocs = (double)(pe_heap_calls() - calls0) / reps;
                    big = (double)(pe_heap_big_calls() - big0) / reps;
                }
                med[r] = bench_median(t, reps);
                total[impl][r] += med[r];
                if (impl == DNNL_MATMUL) matmul_free(&mm);
            }
            printf("%-16s %-11s %7.1f %7.1f %6.2f %6.1f %6.1f\n", shapes[i].name, k_impl[impl], med[0] * 1e6,
                   med[1] * 1e6, (med[0] / 64) / (med[1] / 128), allocs, big);
        }
    for (int impl = 0; impl < N_IMPL; impl++)
        printf("all eight, %-11s 64 rows %7.1f µs, 128 rows %7.1f µs, ratio %.2f\n", k_impl[impl],
               total[impl][0] * 1e6, total[impl][1] * 1e6, (total[impl][0] / 64) / (total[impl][1] / 128));
    printf("bits:\n");
    const shape bits[] = {{"[64, 784] x [784, 512]", false, false, 64, 512, 784},
                          {"X^T Y, X, Y [5000, 16]", true, false, 16, 16, 5000}};
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
        if (same_bits(&bits[i], a, b)) return 1;
    free(a);
    free(b);
    free(c);
    free(t);
    dnnl_stream_destroy(g_stream);
    dnnl_engine_destroy(g_eng);
    return 0;
}
