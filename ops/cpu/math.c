/* ops/cpu/math.c — CPU kernels of the math family: mul, matmul, matmul_v2.
 *
 * Every product is OpenBLAS's cblas_sgemm / cblas_dgemm on row-major data.
 *
 * Threads: PE links the OpenMP build of OpenBLAS, whose GEMM uses as many
 * threads as the *calling thread's* OpenMP setting (omp_get_max_threads(),
 * an ICV private to each thread) and one thread when called inside an OpenMP
 * parallel region. So each GEMM is bracketed by omp_set_num_threads(
 * ctx->num_threads) and a restore of the previous value: the setting is per
 * calling thread, hence per place, and two places running kernels at the
 * same time do not change each other's thread counts; no global
 * openblas_set_num_threads (which would race between places) is needed.
 *
 * Batched matmul: when Y is shared by all batches and X is not transposed,
 * the batches fold into one tall GEMM ([B*M, K] x [K, N]); otherwise one GEMM
 * per batch, and for many small matrices the batches themselves are split
 * across OpenMP threads (each GEMM then runs single-threaded inside the
 * region). OpenBLAS partitions M and N, never K, so results do not depend
 * on the thread count.
 */
#include "ops/math.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>

typedef struct {
    int prev;
    bool changed;
} blas_threads;

static blas_threads blas_threads_begin(int n) {
    blas_threads t = {omp_get_max_threads(), false};
    if (n < 1) n = 1;
    if (t.prev != n) {
        omp_set_num_threads(n);
        t.changed = true;
    }
    return t;
}

static void blas_threads_end(blas_threads t) {
    if (t.changed) omp_set_num_threads(t.prev);
}

/* C[m, n] = alpha * op(A) op(B), op(A): [m, k], op(B): [k, n], row-major.
 * A is stored [m, k] ([k, m] when ta), B [k, n] ([n, k] when tb). */
static void gemm(pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, const void *b, void *c) {
    if (m == 0 || n == 0) return;
    size_t es = pe_dtype_size(dt);
    if (k == 0) { /* empty sum */
        memset(c, 0, (size_t)(m * n) * es);
        return;
    }
    blasint lda = (blasint)(ta ? m : k), ldb = (blasint)(tb ? k : n), ldc = (blasint)n;
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
    if (dt == PE_DTYPE_FP32)
        cblas_sgemm(CblasRowMajor, opa, opb, (blasint)m, (blasint)n, (blasint)k, (float)alpha, a, lda, b,
                    ldb, 0.0f, c, ldc);
    else
        cblas_dgemm(CblasRowMajor, opa, opb, (blasint)m, (blasint)n, (blasint)k, alpha, a, lda, b, ldb,
                    0.0, c, ldc);
}

/* OpenBLAS's blasint is 32-bit in Debian's build: refuse larger matrices
 * instead of overflowing. */
static pe_status check_blas_size(const pe_op_ctx *ctx, int64_t m, int64_t n, int64_t k) {
    const int64_t lim = INT32_MAX;
    if (m > lim || n > lim || k > lim)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "GEMM [%lld x %lld] x [%lld x %lld] exceeds BLAS's 32-bit sizes",
                            (long long)m, (long long)k, (long long)k, (long long)n);
    return PE_OK;
}

/* x: [M..., K...] as [M, K]; y: [K..., N...] as [K, N] -> out: [M..., N...] */
pe_status pe_cpu_mul(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int xn = (int)pe_ctx_int(ctx, "x_num_col_dims"), yn = (int)pe_ctx_int(ctx, "y_num_col_dims");
    int64_t m = pe_dims_prod(x->dims, 0, xn), k = pe_dims_prod(x->dims, xn, x->ndim);
    int64_t n = pe_dims_prod(y->dims, yn, y->ndim);
    PE_CHECK(check_blas_size(ctx, m, n, k));
    blas_threads bt = blas_threads_begin(ctx->num_threads);
    gemm(x->dtype, false, false, m, n, k, 1.0, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out));
    blas_threads_end(bt);
    return PE_OK;
}

/* Below this many multiply-adds per GEMM, a batch loop is split across
 * threads rather than each GEMM. */
#define SMALL_GEMM_FLOPS (INT64_C(1) << 18)

/* x: [bx..., M, K] (K, M if transposed; [K] for a vector), y: [by..., K, N]
 * -> out: [broadcast(bx, by)..., M, N] = alpha * op(x) op(y) */
pe_status pe_cpu_matmul(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    pe_matmul_plan p;
    PE_CHECK(pe_matmul_plan_make(ctx, x, y, &p));
    int64_t m = p.m, n = p.n, k = p.k, nb = p.n_batch;
    if (nb == 0 || m == 0 || n == 0) return PE_OK;
    size_t es = pe_dtype_size(x->dtype);
    const char *xd = pe_tensor_data(x), *yd = pe_tensor_data(y);
    char *od = pe_tensor_data(out);
    bool y_shared = p.batch_ndim == 0 || pe_dims_prod(y->dims, 0, y->ndim) == k * n;
    if (nb == 1 || (y_shared && p.x_full && !p.trans_x)) {
        /* one GEMM: [nb*M, K] x [K, N] (x's batches are consecutive row blocks) */
        PE_CHECK(check_blas_size(ctx, nb * m, n, k));
        blas_threads bt = blas_threads_begin(ctx->num_threads);
        gemm(x->dtype, p.trans_x, p.trans_y, nb * m, n, k, p.alpha, xd, yd, od);
        blas_threads_end(bt);
        return PE_OK;
    }
    PE_CHECK(check_blas_size(ctx, m, n, k));
    size_t xs = (size_t)(m * k) * es, ys = (size_t)(k * n) * es, os = (size_t)(m * n) * es;
    int nt = ctx->num_threads > 0 ? ctx->num_threads : 1;
    if (nt > 1 && m * n * k < SMALL_GEMM_FLOPS && nb >= nt) {
        /* many small GEMMs: batches across threads, each GEMM single-threaded */
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t b = 0; b < nb; b++)
            gemm(x->dtype, p.trans_x, p.trans_y, m, n, k, p.alpha, xd + (size_t)pe_matmul_x_batch(&p, b) * xs,
                 yd + (size_t)pe_matmul_y_batch(&p, b) * ys, od + (size_t)b * os);
        return PE_OK;
    }
    blas_threads bt = blas_threads_begin(nt);
    for (int64_t b = 0; b < nb; b++)
        gemm(x->dtype, p.trans_x, p.trans_y, m, n, k, p.alpha, xd + (size_t)pe_matmul_x_batch(&p, b) * xs,
             yd + (size_t)pe_matmul_y_batch(&p, b) * ys, od + (size_t)b * os);
    blas_threads_end(bt);
    return PE_OK;
}
