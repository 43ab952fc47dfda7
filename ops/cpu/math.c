/* ops/cpu/math.c — CPU kernels of the math family: mul, matmul, matmul_v2
 * and their grads, lookup_table(_v2) and its grad, layer_norm and its grad.
 *
 * Every product is one pe_cpu_gemm on row-major data (ops/cpu/gemm.c:
 * OpenBLAS's sgemm / dgemm, split across threads by PE); a gradient is
 * two more GEMMs with transposes chosen so no operand is ever copied
 * (dX = dOut op(Y)^T, dY = op(X)^T dOut, rearranged for transposed
 * operands).
 *
 * Threads: PE links the OpenMP build of OpenBLAS, and pe_cpu_gemm, like
 * OpenBLAS's GEMM, uses as many threads as the *calling thread's* OpenMP
 * setting (omp_get_max_threads(), an ICV private to each thread) and one
 * thread when called inside an OpenMP parallel region. So each GEMM is
 * bracketed by omp_set_num_threads(ctx->num_threads) and a restore of the
 * previous value: the setting is per calling thread, hence per place, and
 * two places running kernels at the same time do not change each other's
 * thread counts; no global openblas_set_num_threads (which would race
 * between places) is needed.
 *
 * Batched matmul: when Y is shared by all batches and X is not transposed,
 * the batches fold into one tall GEMM ([B*M, K] x [K, N]); otherwise one GEMM
 * per batch, and for many small matrices the batches themselves are split
 * across OpenMP threads (each GEMM then runs single-threaded inside the
 * region). pe_cpu_gemm's threads partition M and N, never K, each running
 * OpenBLAS single-threaded, so results do not depend on the thread count
 * (OpenBLAS's own threads would change them: ops/cpu/gemm.c). A gradient
 * of a broadcast operand (one X matrix used by several output batches) is
 * the sum of the per-batch products, added into one matrix with beta = 1
 * in batch order — a fixed order, so the sum does not depend on the thread
 * count either.
 *
 * lookup_table_grad and layer_norm_grad sum over rows (ids, batch rows);
 * their threads own disjoint ranges of the *summed-into* elements (table
 * rows, feature columns) and each walks the rows in order, so every sum is
 * formed in the same order whatever the thread count: bitwise-identical
 * results with 1 or N threads, no atomics, no per-thread buffers.
 */
#include "ops/math.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/par.h"

#include <math.h>
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

/* C[m, n] = alpha * op(A) op(B) + beta * C, op(A): [m, k], op(B): [k, n],
 * row-major; beta is 0 or 1. A is stored [m, k] ([k, m] when ta), B [k, n]
 * ([n, k] when tb). ops/cpu/gemm.c picks the library. */
static void gemm(pe_place pl, pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, const void *b, double beta, void *c) {
    pe_cpu_gemm(pl, dt, ta, tb, m, n, k, alpha, a, b, beta, c);
}

/* mul's GEMM dims: X [M..., K...] as [m, k], Y [K..., N...] as [k, n]. */
static void mul_dims(const pe_op_ctx *ctx, int64_t *m, int64_t *n, int64_t *k) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    const int xn = (int)pe_ctx_int(ctx, "x_num_col_dims"), yn = (int)pe_ctx_int(ctx, "y_num_col_dims");
    *m = pe_dims_prod(x->dims, 0, xn);
    *k = pe_dims_prod(x->dims, xn, x->ndim);
    *n = pe_dims_prod(y->dims, yn, y->ndim);
}

/* The scratch of mul's product (pe_cpu_gemm_ws), for the memory plan. */
pe_status pe_cpu_mul_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    int64_t m, n, k;
    mul_dims(ctx, &m, &n, &k);
    *bytes = pe_cpu_gemm_scratch_bytes(pe_ctx_in(ctx, "X")->dtype, false, false, m, n, k, 1.0, 0.0);
    return PE_OK;
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
    int64_t m, n, k;
    mul_dims(ctx, &m, &n, &k);
    PE_CHECK(check_blas_size(ctx, m, n, k));
    blas_threads bt = blas_threads_begin(ctx->num_threads);
    pe_cpu_gemm_ws(ctx->place, ctx->workspace, ctx->workspace_bytes, x->dtype, false, false, m, n, k, 1.0,
                   pe_tensor_data(x), pe_tensor_data(y), 0.0, pe_tensor_data(out));
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
        gemm(ctx->place, x->dtype, p.trans_x, p.trans_y, nb * m, n, k, p.alpha, xd, yd, 0.0, od);
        blas_threads_end(bt);
        return PE_OK;
    }
    PE_CHECK(check_blas_size(ctx, m, n, k));
    size_t xs = (size_t)(m * k) * es, ys = (size_t)(k * n) * es, os = (size_t)(m * n) * es;
    int nt = pe_kernel_threads(ctx);
    if (nt > 1 && m * n * k < SMALL_GEMM_FLOPS && nb >= nt) {
        /* many small GEMMs: batches across threads, each GEMM single-threaded */
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t b = 0; b < nb; b++)
            gemm(ctx->place, x->dtype, p.trans_x, p.trans_y, m, n, k, p.alpha, xd + (size_t)pe_matmul_x_batch(&p, b) * xs,
                 yd + (size_t)pe_matmul_y_batch(&p, b) * ys, 0.0, od + (size_t)b * os);
        return PE_OK;
    }
    blas_threads bt = blas_threads_begin(nt);
    for (int64_t b = 0; b < nb; b++)
        gemm(ctx->place, x->dtype, p.trans_x, p.trans_y, m, n, k, p.alpha, xd + (size_t)pe_matmul_x_batch(&p, b) * xs,
             yd + (size_t)pe_matmul_y_batch(&p, b) * ys, 0.0, od + (size_t)b * os);
    blas_threads_end(bt);
    return PE_OK;
}

/* ---- mul_grad ------------------------------------------------------------ */

/* x: [M, K], y: [K, N] (flattened), Out@GRAD: [M, N]
 * -> X@GRAD = dOut Y^T: [M, K], Y@GRAD = X^T dOut: [K, N] */
pe_status pe_cpu_mul_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    int xn = (int)pe_ctx_int(ctx, "x_num_col_dims"), yn = (int)pe_ctx_int(ctx, "y_num_col_dims");
    int64_t m = pe_dims_prod(x->dims, 0, xn), k = pe_dims_prod(x->dims, xn, x->ndim);
    int64_t n = pe_dims_prod(y->dims, yn, y->ndim);
    PE_CHECK(check_blas_size(ctx, m, n, k));
    blas_threads bt = blas_threads_begin(ctx->num_threads);
    if (dx)
        gemm(ctx->place, x->dtype, false, true, m, k, n, 1.0, pe_tensor_data(g), pe_tensor_data(y), 0.0,
             pe_tensor_data(dx));
    if (dy)
        gemm(ctx->place, x->dtype, true, false, k, n, m, 1.0, pe_tensor_data(x), pe_tensor_data(g), 0.0,
             pe_tensor_data(dy));
    blas_threads_end(bt);
    return PE_OK;
}

/* ---- matmul_grad / matmul_v2_grad ------------------------------------------ */

/* One batch of dX: op(X) = X:   dX [m, k] = alpha * dOut [m, n] op(Y)^T [n, k]
 *                  op(X) = X^T: dX [k, m] = alpha * op(Y) [k, n] dOut^T [n, m] */
static void matmul_dx(pe_place pl, pe_dtype dt, const pe_matmul_plan *p, int64_t rows, const void *g, const void *y,
                      double beta, void *dx) {
    if (!p->trans_x)
        gemm(pl, dt, false, !p->trans_y, rows, p->k, p->n, p->alpha, g, y, beta, dx);
    else
        gemm(pl, dt, p->trans_y, true, p->k, p->m, p->n, p->alpha, y, g, beta, dx);
}

/* One batch of dY: op(Y) = Y:   dY [k, n] = alpha * op(X)^T [k, m] dOut [m, n]
 *                  op(Y) = Y^T: dY [n, k] = alpha * dOut^T [n, m] op(X) [m, k]
 * (rows = m, or nb * m when the batches are folded into one GEMM) */
static void matmul_dy(pe_place pl, pe_dtype dt, const pe_matmul_plan *p, int64_t rows, const void *x, const void *g,
                      double beta, void *dy) {
    if (!p->trans_y)
        gemm(pl, dt, !p->trans_x, false, p->k, p->n, rows, p->alpha, x, g, beta, dy);
    else
        gemm(pl, dt, true, p->trans_x, p->n, p->k, rows, p->alpha, g, x, beta, dy);
}

/* The operands of one matmul_grad, for the per-batch loops. */
typedef struct {
    const pe_matmul_plan *p;
    pe_dtype dt;
    const char *xd, *yd, *gd;
    size_t xs, ys, gs;          /* bytes per matrix */
    size_t xbytes, ybytes;      /* bytes of all of X, Y */
    pe_place pl;                /* the kernel's place (oneDNN's scratchpad) */
} mm_grad;

static void mm_grad_one(const mm_grad *a, bool for_x, int64_t b, double beta, char *dst) {
    const pe_matmul_plan *p = a->p;
    const char *xb = a->xd + (size_t)pe_matmul_x_batch(p, b) * a->xs;
    const char *yb = a->yd + (size_t)pe_matmul_y_batch(p, b) * a->ys;
    const char *gb = a->gd + (size_t)b * a->gs;
    if (for_x) matmul_dx(a->pl, a->dt, p, p->m, gb, yb, beta, dst + (size_t)pe_matmul_x_batch(p, b) * a->xs);
    else matmul_dy(a->pl, a->dt, p, p->m, xb, gb, beta, dst + (size_t)pe_matmul_y_batch(p, b) * a->ys);
}

/* Gradient of one operand over all batches. `full`: the operand has one
 * matrix per output batch (each batch writes its own block); otherwise it is
 * broadcast and the batches are added into its matrices in batch order. */
static void mm_grad_all(const mm_grad *a, bool for_x, bool full, int nt, char *dst) {
    const pe_matmul_plan *p = a->p;
    int64_t nb = p->n_batch;
    if (full && nt > 1 && p->m * p->n * p->k < SMALL_GEMM_FLOPS && nb >= nt) {
        /* many small GEMMs, each batch its own block: batches across threads */
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t b = 0; b < nb; b++) mm_grad_one(a, for_x, b, 0.0, dst);
        return;
    }
    if (!full) memset(dst, 0, for_x ? a->xbytes : a->ybytes);
    blas_threads bt = blas_threads_begin(nt);
    for (int64_t b = 0; b < nb; b++) mm_grad_one(a, for_x, b, full ? 0.0 : 1.0, dst);
    blas_threads_end(bt);
}

/* x: [bx..., M, K] (or transposed, or [K]), y: [by..., K, N], Out@GRAD: [bcast..., M, N]
 * -> X@GRAD like x, Y@GRAD like y (broadcast batch dims summed) */
pe_status pe_cpu_matmul_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    pe_matmul_plan p;
    PE_CHECK(pe_matmul_plan_make(ctx, x, y, &p));
    int64_t m = p.m, n = p.n, k = p.k, nb = p.n_batch;
    if (nb == 0 || m == 0 || n == 0) { /* empty product: zero gradients */
        if (dx && pe_tensor_nbytes(dx)) memset(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx));
        if (dy && pe_tensor_nbytes(dy)) memset(pe_tensor_data(dy), 0, pe_tensor_nbytes(dy));
        return PE_OK;
    }
    size_t es = pe_dtype_size(x->dtype);
    mm_grad a = {&p, x->dtype, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(g),
                 (size_t)(m * k) * es, (size_t)(k * n) * es, (size_t)(m * n) * es,
                 pe_tensor_nbytes(x), pe_tensor_nbytes(y), ctx->place};
    int nt = pe_kernel_threads(ctx);
    bool y_shared = p.batch_ndim == 0 || pe_dims_prod(y->dims, 0, y->ndim) == k * n;
    if (nb == 1 || (y_shared && p.x_full && !p.trans_x)) {
        /* as the forward: x's batches are consecutive row blocks [nb*M, K] sharing one Y */
        PE_CHECK(check_blas_size(ctx, nb * m, n, k));
        blas_threads bt = blas_threads_begin(nt);
        if (dx) matmul_dx(ctx->place, x->dtype, &p, nb * m, a.gd, a.yd, 0.0, pe_tensor_data(dx));
        if (dy) matmul_dy(ctx->place, x->dtype, &p, nb * m, a.xd, a.gd, 0.0, pe_tensor_data(dy));
        blas_threads_end(bt);
        return PE_OK;
    }
    PE_CHECK(check_blas_size(ctx, m, n, k));
    if (dx) mm_grad_all(&a, true, p.x_full, nt, pe_tensor_data(dx));
    if (dy) mm_grad_all(&a, false, p.y_full, nt, pe_tensor_data(dy));
    return PE_OK;
}

/* ---- lookup_table / lookup_table_v2 ----------------------------------------- */

static inline int64_t id_at(const void *ids, bool i64, int64_t i) {
    return i64 ? ((const int64_t *)ids)[i] : ((const int32_t *)ids)[i];
}

/* Every id in [0, V), or a clear error naming the first one that is not. */
static pe_status check_ids(const pe_op_ctx *ctx, const pe_tensor *ids, int64_t v) {
    const void *d = pe_tensor_data(ids);
    bool i64 = ids->dtype == PE_DTYPE_INT64;
    int64_t n = pe_tensor_numel(ids);
    for (int64_t i = 0; i < n; i++) {
        int64_t id = id_at(d, i64, i);
        if (id < 0 || id >= v)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "Ids '%s'[%lld] = %lld is outside the table [0, %lld) of W '%s'",
                                pe_ctx_in_name(ctx, "Ids", 0), (long long)i, (long long)id, (long long)v,
                                pe_ctx_in_name(ctx, "W", 0));
    }
    return PE_OK;
}

/* w: [V, D], ids: [n...] -> out: [n..., D]; out row i = w row ids[i] (zeros for padding_idx) */
pe_status pe_cpu_lookup_table(const pe_op_ctx *ctx) {
    const pe_tensor *w = pe_ctx_in(ctx, "W"), *ids = pe_ctx_in(ctx, "Ids");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int64_t V = w->dims[0], D = w->dims[1], n = pe_tensor_numel(ids), pad = pe_ctx_int(ctx, "padding_idx");
    PE_CHECK(check_ids(ctx, ids, V));
    size_t row = (size_t)D * pe_dtype_size(w->dtype);
    if (!row) return PE_OK;
    const char *wd = pe_tensor_data(w);
    char *od = pe_tensor_data(out);
    const void *idd = pe_tensor_data(ids);
    bool i64 = ids->dtype == PE_DTYPE_INT64;
    const int nt = ctx->num_threads;
    PE_PAR_FOR(n * D >= PE_PAR_MIN && nt > 1, i, n, {
        int64_t id = id_at(idd, i64, i);
        if (id == pad) memset(od + (size_t)i * row, 0, row);
        else memcpy(od + (size_t)i * row, wd + (size_t)id * row, row);
    });
    return PE_OK;
}

/* Table rows [r0, r1) of dw: zeros plus, in ids order, every dOut row whose id falls there. */
#define DEFINE_EMBED_GRAD(NAME, T)                                                                      \
    static void NAME(const void *idd, bool i64, int64_t n, int64_t pad, const T *g, T *dw, int64_t D,    \
                     int64_t r0, int64_t r1) {                                                          \
        memset(dw + r0 * D, 0, (size_t)((r1 - r0) * D) * sizeof(T));                                    \
        for (int64_t i = 0; i < n; i++) {                                                               \
            int64_t id = id_at(idd, i64, i);                                                            \
            if (id < r0 || id >= r1 || id == pad) continue;                                             \
            T *dst = dw + id * D;                                                                       \
            const T *src = g + i * D;                                                                   \
            for (int64_t j = 0; j < D; j++) dst[j] += src[j];                                           \
        }                                                                                               \
    }
DEFINE_EMBED_GRAD(embed_grad_f32, float)
DEFINE_EMBED_GRAD(embed_grad_f64, double)

/* w: [V, D], ids: [n...], Out@GRAD: [n..., D] -> W@GRAD: [V, D] (dense; padding row 0).
 * Threads own disjoint ranges of table rows and each scans all ids, so a
 * repeated id's rows are added in ids order whatever the thread count. */
pe_status pe_cpu_lookup_table_grad(const pe_op_ctx *ctx) {
    const pe_tensor *w = pe_ctx_in(ctx, "W"), *ids = pe_ctx_in(ctx, "Ids"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dw = pe_ctx_out(ctx, "W@GRAD");
    if (!dw) return PE_OK;
    int64_t V = w->dims[0], D = w->dims[1], n = pe_tensor_numel(ids), pad = pe_ctx_int(ctx, "padding_idx");
    PE_CHECK(check_ids(ctx, ids, V));
    const void *idd = pe_tensor_data(ids);
    bool i64 = ids->dtype == PE_DTYPE_INT64;
    const int nt = ctx->num_threads;
    int64_t parts = (n + V) * D >= PE_PAR_MIN && nt > 1 && V >= nt ? nt : 1;
    bool f32 = w->dtype == PE_DTYPE_FP32;
    const void *gd = pe_tensor_data(g);
    void *dd = pe_tensor_data(dw);
    PE_PAR_FOR(parts > 1, t, parts, {
        int64_t r0 = V * t / parts, r1 = V * (t + 1) / parts;
        if (f32) embed_grad_f32(idd, i64, n, pad, gd, dd, D, r0, r1);
        else embed_grad_f64(idd, i64, n, pad, gd, dd, D, r0, r1);
    });
    return PE_OK;
}

/* ---- layer_norm ------------------------------------------------------------- */

/* x: [N, D] -> y = (x - mean) / sqrt(var + eps) * scale + bias, mean/var: [N]
 * (statistics accumulated in double, two passes over each row) */
#define DEFINE_LN_FWD(NAME, T)                                                                          \
    static void NAME(const T *x, const T *scale, const T *bias, T *y, T *mean, T *var, int64_t N,        \
                     int64_t D, double eps, int nt) {                                                   \
        PE_PAR_FOR(N * D >= PE_PAR_MIN && nt > 1, i, N, {                                               \
            const T *xr = x + i * D;                                                                    \
            T *yr = y + i * D;                                                                          \
            double s = 0, q = 0;                                                                        \
            for (int64_t j = 0; j < D; j++) s += xr[j];                                                 \
            double mu = D ? s / (double)D : 0.0;                                                        \
            for (int64_t j = 0; j < D; j++) q += ((double)xr[j] - mu) * ((double)xr[j] - mu);           \
            double v = D ? q / (double)D : 0.0, rs = 1.0 / sqrt(v + eps);                               \
            for (int64_t j = 0; j < D; j++) {                                                           \
                double h = ((double)xr[j] - mu) * rs;                                                   \
                if (scale) h *= (double)scale[j];                                                       \
                if (bias) h += (double)bias[j];                                                         \
                yr[j] = (T)h;                                                                           \
            }                                                                                           \
            mean[i] = (T)mu;                                                                            \
            var[i] = (T)v;                                                                              \
        });                                                                                             \
    }
DEFINE_LN_FWD(ln_fwd_f32, float)
DEFINE_LN_FWD(ln_fwd_f64, double)

/* x: [N, D] (N = prod(dims[:begin_norm_axis])), scale?, bias?: [D]
 * -> y: like x, mean, variance: [N] */
pe_status pe_cpu_layer_norm(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *sc = pe_ctx_in(ctx, "Scale"), *bi = pe_ctx_in(ctx, "Bias");
    pe_tensor *y = pe_ctx_out(ctx, "Y"), *mean = pe_ctx_out(ctx, "Mean"), *var = pe_ctx_out(ctx, "Variance");
    int64_t N, D;
    PE_CHECK(pe_layer_norm_dims(ctx, x, &N, &D));
    double eps = pe_ctx_float(ctx, "epsilon");
    const void *s = sc ? pe_tensor_data(sc) : NULL, *b = bi ? pe_tensor_data(bi) : NULL;
    if (x->dtype == PE_DTYPE_FP32)
        ln_fwd_f32(pe_tensor_data(x), s, b, pe_tensor_data(y), pe_tensor_data(mean), pe_tensor_data(var), N, D,
                   eps, ctx->num_threads);
    else
        ln_fwd_f64(pe_tensor_data(x), s, b, pe_tensor_data(y), pe_tensor_data(mean), pe_tensor_data(var), N, D,
                   eps, ctx->num_threads);
    return PE_OK;
}

/* Columns summed per block: a double accumulator per column on the stack. */
#define LN_COLS 256

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale, per row;
 * dscale[j] = sum_i dy[i, j] xhat[i, j], dbias[j] = sum_i dy[i, j]: threads
 * own column ranges and walk the rows in order (thread-count-invariant). */
#define DEFINE_LN_BWD(NAME, T)                                                                          \
    static void NAME(const T *x, const T *scale, const T *mean, const T *var, const T *dy, T *dx,       \
                     T *dscale, T *dbias, int64_t N, int64_t D, double eps, int nt) {                   \
        bool par = N * D >= PE_PAR_MIN && nt > 1;                                                       \
        if (dx) PE_PAR_FOR(par, i, N, {                                                                 \
            const T *xr = x + i * D, *gr = dy + i * D;                                                  \
            T *dr = dx + i * D;                                                                         \
            double mu = (double)mean[i], rs = 1.0 / sqrt((double)var[i] + eps), a = 0, c = 0;           \
            for (int64_t j = 0; j < D; j++) {                                                           \
                double gj = scale ? (double)gr[j] * (double)scale[j] : (double)gr[j];                   \
                a += gj;                                                                                \
                c += gj * ((double)xr[j] - mu) * rs;                                                    \
            }                                                                                           \
            a = D ? a / (double)D : 0.0;                                                                \
            c = D ? c / (double)D : 0.0;                                                                \
            for (int64_t j = 0; j < D; j++) {                                                           \
                double gj = scale ? (double)gr[j] * (double)scale[j] : (double)gr[j];                   \
                dr[j] = (T)(rs * (gj - a - ((double)xr[j] - mu) * rs * c));                             \
            }                                                                                           \
        });                                                                                             \
        if (!dscale && !dbias) return;                                                                  \
        int64_t nblk = (D + LN_COLS - 1) / LN_COLS;                                                     \
        PE_PAR_FOR(par && nblk > 1, blk, nblk, {                                                        \
            double as[LN_COLS], ab[LN_COLS];                                                            \
            int64_t j0 = blk * LN_COLS, w = D - j0 < LN_COLS ? D - j0 : LN_COLS;                        \
            for (int64_t j = 0; j < w; j++) as[j] = ab[j] = 0.0;                                        \
            for (int64_t i = 0; i < N; i++) {                                                           \
                const T *xr = x + i * D + j0, *gr = dy + i * D + j0;                                    \
                double mu = (double)mean[i], rs = 1.0 / sqrt((double)var[i] + eps);                     \
                for (int64_t j = 0; j < w; j++) {                                                       \
                    as[j] += (double)gr[j] * ((double)xr[j] - mu) * rs;                                 \
                    ab[j] += (double)gr[j];                                                             \
                }                                                                                       \
            }                                                                                           \
            for (int64_t j = 0; j < w; j++) {                                                           \
                if (dscale) dscale[j0 + j] = (T)as[j];                                                  \
                if (dbias) dbias[j0 + j] = (T)ab[j];                                                    \
            }                                                                                           \
        });                                                                                             \
    }
DEFINE_LN_BWD(ln_bwd_f32, float)
DEFINE_LN_BWD(ln_bwd_f64, double)

/* x: [N, D], scale?: [D], mean, variance: [N], Y@GRAD: like x
 * -> X@GRAD: like x, Scale@GRAD, Bias@GRAD: [D] */
pe_status pe_cpu_layer_norm_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *sc = pe_ctx_in(ctx, "Scale"), *dy = pe_ctx_in(ctx, "Y@GRAD");
    const pe_tensor *mean = pe_ctx_in(ctx, "Mean"), *var = pe_ctx_in(ctx, "Variance");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *ds = pe_ctx_out(ctx, "Scale@GRAD"), *db = pe_ctx_out(ctx, "Bias@GRAD");
    int64_t N, D;
    PE_CHECK(pe_layer_norm_dims(ctx, x, &N, &D));
    double eps = pe_ctx_float(ctx, "epsilon");
    const void *s = sc ? pe_tensor_data(sc) : NULL;
    void *dxd = dx ? pe_tensor_data(dx) : NULL, *dsd = ds ? pe_tensor_data(ds) : NULL, *dbd = db ? pe_tensor_data(db) : NULL;
    if (x->dtype == PE_DTYPE_FP32)
        ln_bwd_f32(pe_tensor_data(x), s, pe_tensor_data(mean), pe_tensor_data(var), pe_tensor_data(dy), dxd, dsd, dbd,
                   N, D, eps, ctx->num_threads);
    else
        ln_bwd_f64(pe_tensor_data(x), s, pe_tensor_data(mean), pe_tensor_data(var), pe_tensor_data(dy), dxd, dsd, dbd,
                   N, D, eps, ctx->num_threads);
    return PE_OK;
}
