/* ops/cpu/pad.c — CPU kernels of pad, pad2d, pad3d (forward: float32,
 * float64, int32, int64) and their grads (float32, float64).
 *
 * Out is walked in rows of its last dim. A row's leading indices map to X
 * through the plan (ops/pad.h); a row in a constant border is all
 * pad_value, any other row copies X's row with the last dim's borders
 * mapped element by element. The grads zero X@GRAD and add every Out@GRAD
 * element at the X element it was read from, on one thread in Out's order
 * (reflect / edge / circular borders read an X element more than once, so
 * the sums never depend on the thread count).
 */
#include "ops/cpu/par.h"
#include "ops/pad.h"

#include <string.h>

static pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

/* Offset in X of the row that Out row `row` reads (leading dims 0..n-2), or -1: a constant row. */
static int64_t src_row(const pe_pad_plan *pp, int64_t row) {
    int64_t off = 0, stride = pp->xd[pp->n - 1];
    for (int i = pp->n - 2; i >= 0; i--) {
        const int64_t o = row % pp->od[i];
        row /= pp->od[i];
        const int64_t s = pe_pad_src(pp, i, o);
        if (s < 0) return -1;
        off += s * stride;
        stride *= pp->xd[i];
    }
    return off;
}

#define PAD_FWD(NAME, T)                                                                            \
    static void NAME(const pe_pad_plan *pp, const T *x, T *out, int64_t rows, int nt) {             \
        const int64_t ol = pp->od[pp->n - 1];                                                       \
        const T v = (T)pp->value;                                                                   \
        PE_PAR_FOR(rows * ol >= PE_PAR_MIN && nt > 1, r, rows, {                                    \
            T *orow = out + r * ol;                                                                 \
            const int64_t base = src_row(pp, r);                                                    \
            for (int64_t j = 0; j < ol; j++) {                                                      \
                const int64_t s = base < 0 ? -1 : pe_pad_src(pp, pp->n - 1, j);                     \
                orow[j] = s < 0 ? v : x[base + s];                                                  \
            }                                                                                       \
        });                                                                                         \
    }
PAD_FWD(pad_f32, float)
PAD_FWD(pad_f64, double)
PAD_FWD(pad_i32, int32_t)
PAD_FWD(pad_i64, int64_t)

/* X [xd..] -> Out [od..] (pad, pad2d, pad3d) */
pe_status pe_cpu_pad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    pe_pad_plan pp;
    PE_CHECK(pe_pad_plan_make(ctx, x->ndim, x->dims, &pp));
    if (out->dtype != x->dtype || pe_tensor_numel(out) != pe_dims_prod(pp.od, 0, pp.n)) return internal_mismatch(ctx);
    if (pe_tensor_numel(out) == 0) return PE_OK;
    if (pp.n == 0) {
        memcpy(pe_tensor_data(out), pe_tensor_data(x), pe_tensor_nbytes(x));
        return PE_OK;
    }
    const int64_t rows = pe_tensor_numel(out) / pp.od[pp.n - 1];
    const void *xd = pe_tensor_data(x);
    void *od = pe_tensor_data(out);
    const int nt = ctx->num_threads;
    switch (x->dtype) {
    case PE_DTYPE_FP32: pad_f32(&pp, xd, od, rows, nt); break;
    case PE_DTYPE_FP64: pad_f64(&pp, xd, od, rows, nt); break;
    case PE_DTYPE_INT32: pad_i32(&pp, xd, od, rows, nt); break;
    case PE_DTYPE_INT64: pad_i64(&pp, xd, od, rows, nt); break;
    default: return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    }
    return PE_OK;
}

#define PAD_GRAD(NAME, T)                                                                           \
    static void NAME(const pe_pad_plan *pp, const T *g, T *dx, int64_t rows) {                      \
        const int64_t ol = pp->od[pp->n - 1];                                                       \
        for (int64_t r = 0; r < rows; r++) {                                                        \
            const int64_t base = src_row(pp, r);                                                    \
            if (base < 0) continue;                                                                 \
            const T *grow = g + r * ol;                                                             \
            for (int64_t j = 0; j < ol; j++) {                                                      \
                const int64_t s = pe_pad_src(pp, pp->n - 1, j);                                     \
                if (s >= 0) dx[base + s] += grow[j];                                                \
            }                                                                                       \
        }                                                                                           \
    }
PAD_GRAD(pad_grad_f32, float)
PAD_GRAD(pad_grad_f64, double)

/* Out@GRAD [od..] -> X@GRAD [xd..] (pad_grad, pad2d_grad, pad3d_grad; the plan from X@GRAD's dims) */
pe_status pe_cpu_pad_grad(const pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    pe_pad_plan pp;
    PE_CHECK(pe_pad_plan_make(ctx, dx->ndim, dx->dims, &pp));
    if (g->dtype != dx->dtype || pe_tensor_numel(g) != pe_dims_prod(pp.od, 0, pp.n)) return internal_mismatch(ctx);
    if (pe_tensor_numel(dx) == 0) return PE_OK;
    memset(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx));
    if (pp.n == 0) {
        memcpy(pe_tensor_data(dx), pe_tensor_data(g), pe_tensor_nbytes(g));
        return PE_OK;
    }
    const int64_t rows = pe_tensor_numel(g) / pp.od[pp.n - 1];
    if (g->dtype == PE_DTYPE_FP32) pad_grad_f32(&pp, pe_tensor_data(g), pe_tensor_data(dx), rows);
    else if (g->dtype == PE_DTYPE_FP64) pad_grad_f64(&pp, pe_tensor_data(g), pe_tensor_data(dx), rows);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(g->dtype));
    return PE_OK;
}
