/* ops/cpu/array.c — CPU kernels of tile, expand_v2 (one broadcast copy) and
 * their grads (one sum back onto X), cumsum, assign, shape and increment.
 *
 * tile / expand_v2 move bytes, so they take every dtype: Out is walked in
 * rows of its last dim, each row a run of copies of X's matching row (the
 * X row of out row c is X's multi-index c_i % xd_i). Their grads (float32,
 * float64) zero X@GRAD and add every Out@GRAD row onto its X row in Out's
 * row-major order, on one thread, so the sums never depend on the thread
 * count. cumsum views X as [pre, d, post] around the axis ([1, numel, 1]
 * with flatten) and scans each column in order (reverse: from the end;
 * exclusive: the sum before the element); floats add in double, integers
 * wrap around.
 */
#include "ops/array.h"
#include "ops/cpu/par.h"

#include <string.h>

static pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

/* Offset (in elements) into X of the start of Out's row `row` (row-major over od[0..n-1)). */
static int64_t tile_x_row(const pe_tile_plan *tp, const int64_t *xstr, int64_t row) {
    int64_t o = 0;
    for (int i = tp->n - 2; i >= 0; i--) {
        o += (row % tp->od[i] % tp->xd[i]) * xstr[i];
        row /= tp->od[i];
    }
    return o;
}

static void tile_strides(const pe_tile_plan *tp, int64_t *xstr) {
    int64_t s = 1;
    for (int i = tp->n - 1; i >= 0; i--) { xstr[i] = s; s *= tp->xd[i]; }
}

/* x [xd...] -> out [od...] (tile, expand_v2) */
pe_status pe_cpu_tile(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    pe_tile_plan tp;
    PE_CHECK(pe_tile_plan_make(ctx, x, &tp));
    if (out->dtype != x->dtype || pe_tensor_numel(out) != pe_dims_prod(tp.od, 0, tp.n)) return internal_mismatch(ctx);
    if (pe_tensor_numel(out) == 0) return PE_OK;
    if (tp.n == 0) {
        memcpy(pe_tensor_data(out), pe_tensor_data(x), pe_tensor_nbytes(x));
        return PE_OK;
    }
    int64_t xstr[PE_MAX_DIMS];
    tile_strides(&tp, xstr);
    const size_t es = pe_dtype_size(x->dtype);
    const int64_t ol = tp.od[tp.n - 1], xl = tp.xd[tp.n - 1], rows = pe_tensor_numel(out) / ol;
    const char *xd = pe_tensor_data(x);
    char *od = pe_tensor_data(out);
    const int nt = ctx->num_threads;
    PE_PAR_FOR(pe_tensor_numel(out) >= PE_PAR_MIN && nt > 1, r, rows, {
        const char *xr = xd + (size_t)tile_x_row(&tp, xstr, r) * es;
        char *orow = od + (size_t)(r * ol) * es;
        for (int64_t j = 0; j < ol; j += xl) memcpy(orow + (size_t)j * es, xr, (size_t)xl * es);
    });
    return PE_OK;
}

#define TILE_GRAD(NAME, T)                                                                       \
    static void NAME(const pe_tile_plan *tp, const int64_t *xstr, const T *g, T *dx, int64_t rows) { \
        const int64_t ol = tp->od[tp->n - 1], xl = tp->xd[tp->n - 1];                           \
        for (int64_t r = 0; r < rows; r++) {                                                     \
            T *dr = dx + tile_x_row(tp, xstr, r);                                                \
            const T *gr = g + r * ol;                                                            \
            for (int64_t j = 0; j < ol; j++) dr[j % xl] += gr[j];                                \
        }                                                                                        \
    }
TILE_GRAD(tile_grad_f32, float)
TILE_GRAD(tile_grad_f64, double)

/* x [xd...] (dims only), dout [od...] -> dx [xd...] = the sum of dout over the copies */
pe_status pe_cpu_tile_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    pe_tile_plan tp;
    PE_CHECK(pe_tile_plan_make(ctx, x, &tp));
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(g) != pe_dims_prod(tp.od, 0, tp.n) ||
        pe_tensor_numel(dx) != pe_tensor_numel(x))
        return internal_mismatch(ctx);
    if (pe_tensor_numel(dx) == 0) return PE_OK;
    memset(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx));
    if (pe_tensor_numel(g) == 0) return PE_OK;
    if (tp.n == 0) {
        memcpy(pe_tensor_data(dx), pe_tensor_data(g), pe_tensor_nbytes(g));
        return PE_OK;
    }
    int64_t xstr[PE_MAX_DIMS];
    tile_strides(&tp, xstr);
    const int64_t rows = pe_tensor_numel(g) / tp.od[tp.n - 1];
    if (x->dtype == PE_DTYPE_FP32) tile_grad_f32(&tp, xstr, pe_tensor_data(g), pe_tensor_data(dx), rows);
    else if (x->dtype == PE_DTYPE_FP64) tile_grad_f64(&tp, xstr, pe_tensor_data(g), pe_tensor_data(dx), rows);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* ---- cumsum: x, out [pre, d, post], scanned along d ------------------------------ */

#define CUMSUM_LOOP(NAME, T, ACC)                                                                       \
    static void NAME(const T *x, T *out, int64_t pre, int64_t d, int64_t post, bool rev, bool excl, int nt) { \
        PE_PAR_FOR(pre * d * post >= PE_PAR_MIN && nt > 1, pq, pre * post, {                           \
            const int64_t base = (pq / post) * d * post + pq % post;                                   \
            ACC s = 0;                                                                                 \
            for (int64_t k = 0; k < d; k++) {                                                          \
                const int64_t i = base + (rev ? d - 1 - k : k) * post;                                  \
                const ACC v = (ACC)x[i];                                                               \
                if (excl) { out[i] = (T)s; s += v; }                                                   \
                else { s += v; out[i] = (T)s; }                                                        \
            }                                                                                          \
        });                                                                                            \
    }
CUMSUM_LOOP(cumsum_f32, float, double)
CUMSUM_LOOP(cumsum_f64, double, double)
CUMSUM_LOOP(cumsum_i32, int32_t, uint32_t)
CUMSUM_LOOP(cumsum_i64, int64_t, uint64_t)

pe_status pe_cpu_cumsum(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n) return internal_mismatch(ctx);
    int64_t pre = 1, d = n, post = 1;
    if (!pe_ctx_bool(ctx, "flatten") && x->ndim > 0) {
        int64_t a = pe_ctx_int(ctx, "axis");
        if (a < 0) a += x->ndim;
        pre = pe_dims_prod(x->dims, 0, (int)a);
        d = x->dims[a];
        post = pe_dims_prod(x->dims, (int)a + 1, x->ndim);
    }
    if (n == 0) return PE_OK;
    const bool rev = pe_ctx_bool(ctx, "reverse"), excl = pe_ctx_bool(ctx, "exclusive");
    const void *xd = pe_tensor_data(x);
    void *od = pe_tensor_data(out);
    const int nt = ctx->num_threads;
    switch (x->dtype) {
    case PE_DTYPE_FP32: cumsum_f32(xd, od, pre, d, post, rev, excl, nt); break;
    case PE_DTYPE_FP64: cumsum_f64(xd, od, pre, d, post, rev, excl, nt); break;
    case PE_DTYPE_INT32: cumsum_i32(xd, od, pre, d, post, rev, excl, nt); break;
    case PE_DTYPE_INT64: cumsum_i64(xd, od, pre, d, post, rev, excl, nt); break;
    default: return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    }
    return PE_OK;
}

/* ---- assign, shape, increment ------------------------------------------------------ */

/* x -> out, a copy (nothing when in place) */
pe_status pe_cpu_assign(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (out->dtype != x->dtype || pe_tensor_nbytes(out) != pe_tensor_nbytes(x)) return internal_mismatch(ctx);
    if (pe_tensor_nbytes(x) && pe_tensor_data(out) != pe_tensor_data(x))
        memcpy(pe_tensor_data(out), pe_tensor_data(x), pe_tensor_nbytes(x));
    return PE_OK;
}

/* input [d...] -> out int32 [rank] = d */
pe_status pe_cpu_shape(const pe_op_ctx *ctx) {
    const pe_tensor *in = pe_ctx_in(ctx, "Input");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (out->dtype != PE_DTYPE_INT32 || pe_tensor_numel(out) != in->ndim) return internal_mismatch(ctx);
    int32_t *o = pe_tensor_data(out);
    for (int i = 0; i < in->ndim; i++) {
        if (in->dims[i] > INT32_MAX)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "dim %d of Input '%s' (%lld) does not fit the int32 Out", i,
                                pe_ctx_in_name(ctx, "Input", 0), (long long)in->dims[i]);
        o[i] = (int32_t)in->dims[i];
    }
    return PE_OK;
}

/* x [1] -> out [1] = x + step (in place when out is x) */
pe_status pe_cpu_increment(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (out->dtype != x->dtype || pe_tensor_numel(out) != 1 || pe_tensor_numel(x) != 1) return internal_mismatch(ctx);
    const double step = pe_ctx_float(ctx, "step");
    const void *xd = pe_tensor_data(x);
    void *od = pe_tensor_data(out);
    switch (x->dtype) {
    case PE_DTYPE_FP32: *(float *)od = (float)(*(const float *)xd + step); break;
    case PE_DTYPE_FP64: *(double *)od = *(const double *)xd + step; break;
    case PE_DTYPE_INT32: *(int32_t *)od = (int32_t)((uint32_t) * (const int32_t *)xd + (uint32_t)(int64_t)step); break;
    case PE_DTYPE_INT64: *(int64_t *)od = (int64_t)((uint64_t) * (const int64_t *)xd + (uint64_t)(int64_t)step); break;
    default: return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    }
    return PE_OK;
}
