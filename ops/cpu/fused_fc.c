/* ops/cpu/fused_fc.c — CPU kernels of fc and fc_grad (shape inference in
 * ops/fused.c; emitted by passes/fuse_fc.c).
 *
 * fc:      one GEMM (pe_cpu_gemm, out = input W) and one epilogue pass over
 *          out that adds the bias row and applies the activation in place:
 *          one read and one write of out, where the unfused ops read and
 *          write two more tensors (the GEMM result and the biased sum).
 * fc_grad: one pass computing the pre-activation gradient
 *          dT = act'(out) * dOut into PreAct@GRAD and, in the same pass,
 *          the bias gradient (column sums of dT), then the two GEMMs
 *          dInput = dT W^T and dW = Input^T dT.
 *
 * Same results as mul + elementwise_add + act (and their grads), bit for
 * bit: the GEMMs are the same pe_cpu_gemm calls with the same arguments as
 * ops/cpu/math.c's mul / mul_grad (ops/cpu/gemm.c splits M and N, never K,
 * across threads, so the thread count does not change them either); the
 * epilogue and the activation gradient are the expressions of
 * ops/cpu/elementwise.c (ops/cpu/fused_act.h); the bias gradient sums each column over the rows
 * in row order in double, as elementwise_add_grad's row-bias path does. (An
 * N = 1 bias on more than 4096 rows is summed by elementwise_add_grad in
 * blocks: there the two agree to rounding, not bitwise.)
 *
 * Threads: the GEMMs follow ctx->num_threads through the calling thread's
 * OpenMP setting (see ops/cpu/math.c); the element passes fork only when
 * large (ops/cpu/par.h).
 */
#include "ops/cpu/fused_act.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/par.h"
#include "ops/op.h"

#include <omp.h>
#include <string.h>

#define FC_TILE 256 /* columns whose bias-gradient sums are kept on the stack */

/* C[m, n] = op(A) op(B), beta 0, row-major: the same pe_cpu_gemm calls as
 * ops/cpu/math.c's mul / mul_grad (so results match them). */
static void gemm(const pe_op_ctx *ctx, pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                 const void *b, void *c) {
    int prev = omp_get_max_threads(), nt = ctx->num_threads;
    if (nt < 1) nt = 1;
    if (prev != nt) omp_set_num_threads(nt);
    pe_cpu_gemm_ws(ctx->place, ctx->workspace, ctx->workspace_bytes, dt, ta, tb, m, n, k, 1.0, a, b, 0.0, c);
    if (prev != nt) omp_set_num_threads(prev);
}

/* fc's GEMM dims: Input [M..., K...] as [m, k], W [k, n]. */
static void fc_dims(const pe_op_ctx *ctx, int64_t *m, int64_t *n, int64_t *k) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *w = pe_ctx_in(ctx, "W");
    const int ncd = (int)pe_ctx_int(ctx, "in_num_col_dims");
    *m = pe_dims_prod(x->dims, 0, ncd);
    *k = pe_dims_prod(x->dims, ncd, x->ndim);
    *n = w->dims[1];
}

/* The scratch of fc's forward product (pe_cpu_gemm_ws), for the memory plan. */
pe_status pe_cpu_fc_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    int64_t m, n, k;
    fc_dims(ctx, &m, &n, &k);
    *bytes = pe_cpu_gemm_scratch_bytes(pe_ctx_in(ctx, "Input")->dtype, false, false, m, n, k, 1.0, 0.0);
    return PE_OK;
}

static pe_status check_blas(const pe_op_ctx *ctx, int64_t m, int64_t n, int64_t k) {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "GEMM [%lld x %lld] x [%lld x %lld] exceeds BLAS's 32-bit sizes",
                            (long long)m, (long long)k, (long long)k, (long long)n);
    return PE_OK;
}

/* ---- fc epilogue: out [m, n] = act(out + bias) in place --------------------- */

#define FC_EPILOGUE(NAME, T, SIGMOID, TANH)                                                        \
    static void NAME(T *out, const T *bias, int64_t m, int64_t n, int act, int nt) {              \
        const int par = m * n >= PE_PAR_MIN && nt > 1;                                             \
        switch (act) {                                                                             \
        case PE_FACT_RELU:                                                                         \
            if (bias) PE_PAR_FOR(par, r, m, { T *o = out + r * n;                                  \
                for (int64_t c = 0; c < n; c++) { const T v = o[c] + bias[c]; o[c] = PE_FUSED_RELU(v); } }); \
            else PE_PAR_FOR(par, r, m, { T *o = out + r * n;                                       \
                for (int64_t c = 0; c < n; c++) o[c] = PE_FUSED_RELU(o[c]); });                    \
            break;                                                                                 \
        case PE_FACT_SIGMOID:                                                                      \
            PE_PAR_FOR(par, r, m, { T *o = out + r * n;                                            \
                for (int64_t c = 0; c < n; c++) o[c] = SIGMOID(bias ? o[c] + bias[c] : o[c]); });   \
            break;                                                                                 \
        case PE_FACT_TANH:                                                                         \
            PE_PAR_FOR(par, r, m, { T *o = out + r * n;                                            \
                for (int64_t c = 0; c < n; c++) o[c] = TANH(bias ? o[c] + bias[c] : o[c]); });      \
            break;                                                                                 \
        default:                                                                                   \
            if (bias) PE_PAR_FOR(par, r, m, { T *o = out + r * n;                                  \
                for (int64_t c = 0; c < n; c++) o[c] = o[c] + bias[c]; });                         \
            break;                                                                                 \
        }                                                                                          \
    }
FC_EPILOGUE(fc_epilogue_f32, float, pe_fused_sigmoid_f32, tanhf)
FC_EPILOGUE(fc_epilogue_f64, double, pe_fused_sigmoid_f64, tanh)

/* input: [M..., K...] as [m, k]; w: [k, n]; bias: [n]? -> out: [m, n] */
pe_status pe_cpu_fc(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *w = pe_ctx_in(ctx, "W"), *b = pe_ctx_in(ctx, "Bias");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int act = pe_fused_act_parse(pe_ctx_string(ctx, "activation_type"));
    int64_t m, n, k;
    fc_dims(ctx, &m, &n, &k);
    if (act < 0 || pe_tensor_numel(out) != m * n || out->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    PE_CHECK(check_blas(ctx, m, n, k));
    gemm(ctx, x->dtype, false, false, m, n, k, pe_tensor_data(x), pe_tensor_data(w), pe_tensor_data(out));
    if (m * n == 0) return PE_OK;
    if (x->dtype == PE_DTYPE_FP32)
        fc_epilogue_f32(pe_tensor_data(out), b ? pe_tensor_data(b) : NULL, m, n, act, ctx->num_threads);
    else
        fc_epilogue_f64(pe_tensor_data(out), b ? pe_tensor_data(b) : NULL, m, n, act, ctx->num_threads);
    return PE_OK;
}

/* ---- fc_grad: dT = act'(out) dOut, db = column sums of dT ------------------- */

/* ACT_G(o, g) per act; `o` unused for NONE */
#define GRAD_NONE(o, g) ((void)(o), (g))

/* One act: dt[r, c] (when dt) and db[c] (when db) for c in column tile
 * [c0, c0 + w), walking rows in order; sums in double as elementwise_add_grad. */
/* One row of a tile: v = G(o, g) per column (o absent: 0) into drow (or
 * scratch), then summed into acc in double: two plain loops, each of which
 * the compiler vectorizes (a select; a widen-and-add). In one loop, with
 * the NULL tests and the loads inside G, it was a scalar loop with a
 * mispredicted branch per element, and fc_grad cost more than the mul_grad
 * + relu_grad + bias sum it replaces. Same values, same summation order. */
#define FC_DT_ROW(T, G, orow, grow, drow, acc, w)                                   \
    do {                                                                            \
        T scratch_[FC_TILE];                                                        \
        T *dst_ = drow ? drow : scratch_;                                           \
        if (orow) {                                                                 \
            for (int64_t c = 0; c < w; c++) {                                       \
                const T ov = orow[c], gv = grow[c];                                 \
                dst_[c] = G(ov, gv);                                                \
            }                                                                       \
        } else {                                                                    \
            for (int64_t c = 0; c < w; c++) {                                       \
                const T ov = (T)0, gv = grow[c];                                    \
                dst_[c] = G(ov, gv);                                                \
            }                                                                       \
        }                                                                           \
        for (int64_t c = 0; c < w; c++) acc[c] += (double)dst_[c];                  \
    } while (0)

#define FC_DT_TILE(NAME, T, G)                                                                          \
    static void NAME(const T *o, const T *g, T *dt, T *db, int64_t m, int64_t n, int64_t c0, int64_t w) { \
        double acc[FC_TILE];                                                                            \
        for (int64_t c = 0; c < w; c++) acc[c] = 0;                                                     \
        for (int64_t r = 0; r < m; r++) {                                                               \
            const T *orow = o ? o + r * n + c0 : NULL, *grow = g + r * n + c0;                         \
            T *drow = dt ? dt + r * n + c0 : NULL;                                                      \
            FC_DT_ROW(T, G, orow, grow, drow, acc, w);                                                  \
        }                                                                                               \
        if (db)                                                                                         \
            for (int64_t c = 0; c < w; c++) db[c0 + c] = (T)acc[c];                                     \
    }

/* dt [m, n] = G(o, g) elementwise, rows across threads */
#define FC_DT_ROWS(NAME, T, G)                                                                          \
    static void NAME(const T *o, const T *g, T *dt, int64_t m, int64_t n, int nt) {                     \
        PE_PAR_FOR(m * n >= PE_PAR_MIN && nt > 1, r, m, {                                               \
            for (int64_t c = 0; c < n; c++) {                                                           \
                const T ov = o[r * n + c], gv = g[r * n + c];                                           \
                dt[r * n + c] = G(ov, gv);                                                              \
            } });                                                                                       \
    }

#define FC_DT_FAMILY(SUF, T)                                                    \
    FC_DT_TILE(dt_tile_none_##SUF, T, GRAD_NONE)                                \
    FC_DT_TILE(dt_tile_relu_##SUF, T, PE_FUSED_RELU_G)                          \
    FC_DT_TILE(dt_tile_sigmoid_##SUF, T, PE_FUSED_SIGMOID_G)                    \
    FC_DT_TILE(dt_tile_tanh_##SUF, T, PE_FUSED_TANH_G)                          \
    FC_DT_ROWS(dt_rows_relu_##SUF, T, PE_FUSED_RELU_G)                          \
    FC_DT_ROWS(dt_rows_sigmoid_##SUF, T, PE_FUSED_SIGMOID_G)                    \
    FC_DT_ROWS(dt_rows_tanh_##SUF, T, PE_FUSED_TANH_G)                          \
    typedef void (*dt_tile_##SUF)(const T *, const T *, T *, T *, int64_t, int64_t, int64_t, int64_t); \
    typedef void (*dt_rows_##SUF)(const T *, const T *, T *, int64_t, int64_t, int);                   \
    static const dt_tile_##SUF k_tile_##SUF[4] = {dt_tile_none_##SUF, dt_tile_relu_##SUF,               \
                                                  dt_tile_sigmoid_##SUF, dt_tile_tanh_##SUF};           \
    static const dt_rows_##SUF k_rows_##SUF[4] = {NULL, dt_rows_relu_##SUF, dt_rows_sigmoid_##SUF,     \
                                                  dt_rows_tanh_##SUF};                                  \
    /* pre: dT buffer (NULL when act is NONE: dT is g itself) */                                        \
    static void fc_dt_##SUF(int act, const T *o, const T *g, T *pre, T *db, int64_t m, int64_t n, int nt) { \
        const int64_t ntile = (n + FC_TILE - 1) / FC_TILE;                                              \
        const int par = m * n >= PE_PAR_MIN && nt > 1;                                                  \
        if (act != PE_FACT_NONE && pre && par && ntile < nt) {                                          \
            /* few column tiles: the activation gradient by rows on all threads, then the sums */       \
            k_rows_##SUF[act](o, g, pre, m, n, nt);                                                     \
            act = PE_FACT_NONE;                                                                         \
            g = pre;                                                                                    \
            pre = NULL;                                                                                 \
        }                                                                                               \
        if (!db && !pre) return;                                                                        \
        const dt_tile_##SUF f = k_tile_##SUF[act];                                                      \
        PE_PAR_FOR(par && ntile > 1, tl, ntile, {                                                       \
            const int64_t c0 = tl * FC_TILE;                                                            \
            f(o, g, pre, db, m, n, c0, n - c0 < FC_TILE ? n - c0 : FC_TILE); });                        \
    }
FC_DT_FAMILY(f32, float)
FC_DT_FAMILY(f64, double)

/* input: [m, k]; w: [k, n]; bias: [n]?; out, out@grad: [m, n]
 * -> input@grad: [m, k]?, w@grad: [k, n]?, bias@grad: [n]?, preact@grad: [m, n]? */
pe_status pe_cpu_fc_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *w = pe_ctx_in(ctx, "W"), *o = pe_ctx_in(ctx, "Out");
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Input@GRAD"), *dw = pe_ctx_out(ctx, "W@GRAD");
    pe_tensor *db = pe_ctx_out(ctx, "Bias@GRAD"), *pre = pe_ctx_out(ctx, "PreAct@GRAD");
    int act = pe_fused_act_parse(pe_ctx_string(ctx, "activation_type"));
    int64_t m, n, k;
    fc_dims(ctx, &m, &n, &k);
    if (act < 0 || (act != PE_FACT_NONE && (!o || ((dx || dw) && !pre))))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    PE_CHECK(check_blas(ctx, m, n, k));
    const int nt = ctx->num_threads;
    const bool f32 = x->dtype == PE_DTYPE_FP32;
    void *pd = act != PE_FACT_NONE ? (pre ? pe_tensor_data(pre) : NULL) : NULL;
    if (m * n > 0) {
        if (f32)
            fc_dt_f32(act, o ? pe_tensor_data(o) : NULL, pe_tensor_data(g), pd, db ? pe_tensor_data(db) : NULL, m, n, nt);
        else
            fc_dt_f64(act, o ? pe_tensor_data(o) : NULL, pe_tensor_data(g), pd, db ? pe_tensor_data(db) : NULL, m, n, nt);
    } else if (db) {
        memset(pe_tensor_data(db), 0, pe_tensor_nbytes(db));
    }
    if (pre && act == PE_FACT_NONE && pe_tensor_data(pre) != pe_tensor_data(g) && pe_tensor_nbytes(g)) /* identity */
        memcpy(pe_tensor_data(pre), pe_tensor_data(g), pe_tensor_nbytes(g));
    const void *dt = act != PE_FACT_NONE ? pd : pe_tensor_data(g);
    if (dx) gemm(ctx, x->dtype, false, true, m, k, n, dt, pe_tensor_data(w), pe_tensor_data(dx));
    if (dw) gemm(ctx, x->dtype, true, false, k, n, m, pe_tensor_data(x), dt, pe_tensor_data(dw));
    return PE_OK;
}
