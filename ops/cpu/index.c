/* ops/cpu/index.c — CPU kernels of gather, gather_nd, scatter, one_hot,
 * one_hot_v2 and the grads of the first three (ops/index.c has the shapes
 * and the semantics).
 *
 * Every index is validated in one serial pass before anything is written:
 * a bad index is an error naming the op, the index var, the element, the
 * value and the allowed range, never an out-of-bounds access. The forward
 * kernels move bytes (any dtype of X; one_hot writes float32 / float64 /
 * int32 / int64); the grads (float32, float64) accumulate on one thread in
 * index order, so duplicate indices sum the same way whatever the thread
 * count.
 */
#include "ops/cpu/par.h"
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

static pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

static inline int64_t idx_at(const pe_tensor *t, int64_t i) {
    return t->dtype == PE_DTYPE_INT64 ? ((const int64_t *)pe_tensor_data(t))[i]
                                      : ((const int32_t *)pe_tensor_data(t))[i];
}

/* Every element of index slot `slot` (n values, from element `first` with
 * stride `step`) is in [0, bound); `what` names the bound ("... of X" gets X's var name). */
static pe_status check_range(const pe_op_ctx *ctx, const char *slot, const pe_tensor *t, int64_t first, int64_t step,
                             int64_t n, int64_t bound, const char *what, const char *xslot) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t e = first + i * step, v = idx_at(t, e);
        if (v < 0 || v >= bound)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' element %lld is %lld, outside [0, %lld) (%s %s '%s')",
                                slot, pe_ctx_in_name(ctx, slot, 0), (long long)e, (long long)v, (long long)bound,
                                what, xslot, pe_ctx_in_name(ctx, xslot, 0));
    }
    return PE_OK;
}

/* [pre, d, post] around the normalized axis attr of x. */
static void axis_view(const pe_op_ctx *ctx, const pe_tensor *x, int64_t *pre, int64_t *d, int64_t *post) {
    int64_t a = pe_ctx_int(ctx, "axis");
    if (a < 0) a += x->ndim;
    *pre = pe_dims_prod(x->dims, 0, (int)a);
    *d = x->dims[a];
    *post = pe_dims_prod(x->dims, (int)a + 1, x->ndim);
}

/* ---- gather: x [pre, d, post], index [n] -> out [pre, n, post] ------------------------ */

pe_status pe_cpu_gather(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *idx = pe_ctx_in(ctx, "Index");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int64_t pre, d, post;
    axis_view(ctx, x, &pre, &d, &post);
    const int64_t n = pe_tensor_numel(idx);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != pre * n * post) return internal_mismatch(ctx);
    PE_CHECK(check_range(ctx, "Index", idx, 0, 1, n, d, "the gathered axis of", "X"));
    if (pe_tensor_numel(out) == 0) return PE_OK;
    const size_t es = pe_dtype_size(x->dtype), row = (size_t)post * es;
    const char *xd = pe_tensor_data(x);
    char *od = pe_tensor_data(out);
    const int nt = ctx->num_threads;
    PE_PAR_FOR(pe_tensor_numel(out) >= PE_PAR_MIN && nt > 1, r, pre * n, {
        const int64_t p = r / n, i = r % n;
        memcpy(od + (size_t)r * row, xd + (size_t)(p * d + idx_at(idx, i)) * row, row);
    });
    return PE_OK;
}

#define GATHER_GRAD(NAME, T)                                                                          \
    static void NAME(const pe_tensor *idx, const T *g, T *dx, int64_t pre, int64_t d, int64_t n,      \
                     int64_t post) {                                                                  \
        for (int64_t p = 0; p < pre; p++)                                                             \
            for (int64_t i = 0; i < n; i++) {                                                         \
                const T *gr = g + (p * n + i) * post;                                                 \
                T *dr = dx + (p * d + idx_at(idx, i)) * post;                                         \
                for (int64_t q = 0; q < post; q++) dr[q] += gr[q];                                    \
            }                                                                                         \
    }
GATHER_GRAD(gather_grad_f32, float)
GATHER_GRAD(gather_grad_f64, double)

/* x (dims only) [pre, d, post], index [n], dout [pre, n, post] -> dx [pre, d, post] */
pe_status pe_cpu_gather_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *idx = pe_ctx_in(ctx, "Index"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    int64_t pre, d, post;
    axis_view(ctx, x, &pre, &d, &post);
    const int64_t n = pe_tensor_numel(idx);
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(g) != pre * n * post ||
        pe_tensor_numel(dx) != pre * d * post)
        return internal_mismatch(ctx);
    PE_CHECK(check_range(ctx, "Index", idx, 0, 1, n, d, "the gathered axis of", "X"));
    if (pe_tensor_numel(dx) == 0) return PE_OK;
    memset(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx));
    if (x->dtype == PE_DTYPE_FP32) gather_grad_f32(idx, pe_tensor_data(g), pe_tensor_data(dx), pre, d, n, post);
    else if (x->dtype == PE_DTYPE_FP64) gather_grad_f64(idx, pe_tensor_data(g), pe_tensor_data(dx), pre, d, n, post);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* ---- gather_nd: x [d0..d(r-1)], index [m, k] -> out [m, slice] --------------------------- */

/* Checks every index tuple; *m rows of k, slice = prod(x dims k..), xoff[i] = offset of row i's slice
 * is computed on the fly by nd_offset. */
static pe_status nd_check(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *idx, int64_t *m, int64_t *k,
                          int64_t *slice) {
    *k = idx->dims[idx->ndim - 1];
    *m = *k ? pe_tensor_numel(idx) / *k : pe_dims_prod(idx->dims, 0, idx->ndim - 1);
    *slice = pe_dims_prod(x->dims, (int)*k, x->ndim);
    for (int64_t j = 0; j < *k; j++) {
        char what[64];
        snprintf(what, sizeof what, "dim %lld of", (long long)j);
        PE_CHECK(check_range(ctx, "Index", idx, j, *k, *m, x->dims[j], what, "X"));
    }
    return PE_OK;
}

static inline int64_t nd_offset(const pe_tensor *x, const pe_tensor *idx, int64_t row, int64_t k, int64_t slice) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; j++) off = off * x->dims[j] + idx_at(idx, row * k + j);
    return off * slice;
}

pe_status pe_cpu_gather_nd(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *idx = pe_ctx_in(ctx, "Index");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int64_t m, k, slice;
    if (out->dtype != x->dtype) return internal_mismatch(ctx);
    PE_CHECK(nd_check(ctx, x, idx, &m, &k, &slice));
    if (pe_tensor_numel(out) != m * slice) return internal_mismatch(ctx);
    if (pe_tensor_numel(out) == 0) return PE_OK;
    const size_t es = pe_dtype_size(x->dtype), row = (size_t)slice * es;
    const char *xd = pe_tensor_data(x);
    char *od = pe_tensor_data(out);
    const int nt = ctx->num_threads;
    PE_PAR_FOR(pe_tensor_numel(out) >= PE_PAR_MIN && nt > 1, r, m, {
        memcpy(od + (size_t)r * row, xd + (size_t)nd_offset(x, idx, r, k, slice) * es, row);
    });
    return PE_OK;
}

#define GATHER_ND_GRAD(NAME, T)                                                                     \
    static void NAME(const pe_tensor *x, const pe_tensor *idx, const T *g, T *dx, int64_t m,        \
                     int64_t k, int64_t slice) {                                                    \
        for (int64_t r = 0; r < m; r++) {                                                           \
            T *dr = dx + nd_offset(x, idx, r, k, slice);                                            \
            const T *gr = g + r * slice;                                                            \
            for (int64_t q = 0; q < slice; q++) dr[q] += gr[q];                                     \
        }                                                                                           \
    }
GATHER_ND_GRAD(gather_nd_grad_f32, float)
GATHER_ND_GRAD(gather_nd_grad_f64, double)

pe_status pe_cpu_gather_nd_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *idx = pe_ctx_in(ctx, "Index"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    int64_t m, k, slice;
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(dx) != pe_tensor_numel(x))
        return internal_mismatch(ctx);
    PE_CHECK(nd_check(ctx, x, idx, &m, &k, &slice));
    if (pe_tensor_numel(g) != m * slice) return internal_mismatch(ctx);
    if (pe_tensor_numel(dx) == 0) return PE_OK;
    memset(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx));
    if (x->dtype == PE_DTYPE_FP32) gather_nd_grad_f32(x, idx, pe_tensor_data(g), pe_tensor_data(dx), m, k, slice);
    else if (x->dtype == PE_DTYPE_FP64) gather_nd_grad_f64(x, idx, pe_tensor_data(g), pe_tensor_data(dx), m, k, slice);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* ---- scatter: x [d0, row], ids [n], updates [n, row] -> out [d0, row] ------------------ */

#define SCATTER_ADD(NAME, T)                                                                      \
    static void NAME(const pe_tensor *ids, const T *u, T *o, int64_t n, int64_t row) {            \
        for (int64_t i = 0; i < n; i++) memset(o + idx_at(ids, i) * row, 0, (size_t)row * sizeof(T)); \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T *orow = o + idx_at(ids, i) * row;                                                   \
            const T *ur = u + i * row;                                                            \
            for (int64_t q = 0; q < row; q++) orow[q] += ur[q];                                   \
        }                                                                                         \
    }
SCATTER_ADD(scatter_add_f32, float)
SCATTER_ADD(scatter_add_f64, double)
SCATTER_ADD(scatter_add_i32, int32_t)
SCATTER_ADD(scatter_add_i64, int64_t)

pe_status pe_cpu_scatter(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *ids = pe_ctx_in(ctx, "Ids"), *upd = pe_ctx_in(ctx, "Updates");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(ids), d0 = x->ndim ? x->dims[0] : 0;
    const int64_t row = x->ndim ? pe_dims_prod(x->dims, 1, x->ndim) : 0;
    if (out->dtype != x->dtype || upd->dtype != x->dtype || pe_tensor_numel(out) != pe_tensor_numel(x) ||
        pe_tensor_numel(upd) != n * row)
        return internal_mismatch(ctx);
    PE_CHECK(check_range(ctx, "Ids", ids, 0, 1, n, d0, "the rows of", "X"));
    if (pe_tensor_nbytes(x) && pe_tensor_data(out) != pe_tensor_data(x))
        memcpy(pe_tensor_data(out), pe_tensor_data(x), pe_tensor_nbytes(x));
    if (n * row == 0) return PE_OK;
    const size_t es = pe_dtype_size(x->dtype);
    if (pe_ctx_bool(ctx, "overwrite")) {
        const char *u = pe_tensor_data(upd);
        char *o = pe_tensor_data(out);
        for (int64_t i = 0; i < n; i++)   /* in order: the later of duplicate ids wins */
            memcpy(o + (size_t)(idx_at(ids, i) * row) * es, u + (size_t)(i * row) * es, (size_t)row * es);
        return PE_OK;
    }
    switch (x->dtype) {
    case PE_DTYPE_FP32: scatter_add_f32(ids, pe_tensor_data(upd), pe_tensor_data(out), n, row); break;
    case PE_DTYPE_FP64: scatter_add_f64(ids, pe_tensor_data(upd), pe_tensor_data(out), n, row); break;
    case PE_DTYPE_INT32: scatter_add_i32(ids, pe_tensor_data(upd), pe_tensor_data(out), n, row); break;
    case PE_DTYPE_INT64: scatter_add_i64(ids, pe_tensor_data(upd), pe_tensor_data(out), n, row); break;
    default:
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported with overwrite = false (float32, "
                            "float64, int32, int64)", pe_dtype_name(x->dtype));
    }
    return PE_OK;
}

/* ids [n], updates (dims only), dout [d0, row] -> dx = dout with rows ids zeroed, dupdates [n, row] = dout[ids] */
pe_status pe_cpu_scatter_grad(const pe_op_ctx *ctx) {
    const pe_tensor *ids = pe_ctx_in(ctx, "Ids"), *upd = pe_ctx_in(ctx, "Updates"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *du = pe_ctx_out(ctx, "Updates@GRAD");
    const int64_t n = pe_tensor_numel(ids), d0 = g->ndim ? g->dims[0] : 0;
    const int64_t row = g->ndim ? pe_dims_prod(g->dims, 1, g->ndim) : 0;
    if (pe_tensor_numel(upd) != n * row || (dx && (dx->dtype != g->dtype || pe_tensor_numel(dx) != pe_tensor_numel(g))) ||
        (du && (du->dtype != g->dtype || pe_tensor_numel(du) != n * row)))
        return internal_mismatch(ctx);
    PE_CHECK(check_range(ctx, "Ids", ids, 0, 1, n, d0, "the rows of", "Out@GRAD"));
    const size_t es = pe_dtype_size(g->dtype), rb = (size_t)row * es;
    const char *gd = pe_tensor_data(g);
    if (dx && pe_tensor_nbytes(dx)) {
        char *o = pe_tensor_data(dx);
        if (o != gd) memcpy(o, gd, pe_tensor_nbytes(dx));
        for (int64_t i = 0; i < n; i++) memset(o + (size_t)idx_at(ids, i) * rb, 0, rb);
    }
    if (du && pe_tensor_nbytes(du)) {
        char *o = pe_tensor_data(du);
        for (int64_t i = 0; i < n; i++) memcpy(o + (size_t)i * rb, gd + (size_t)idx_at(ids, i) * rb, rb);
    }
    return PE_OK;
}

/* ---- one_hot / one_hot_v2: x [m] -> out [m, depth] ------------------------------------ */

pe_status pe_cpu_one_hot(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t depth = pe_ctx_int(ctx, "depth"), m = pe_tensor_numel(x);
    if (pe_tensor_numel(out) != m * depth) return internal_mismatch(ctx);
    const bool allow = pe_ctx_bool(ctx, "allow_out_of_range");
    for (int64_t i = 0; !allow && i < m; i++) {
        const int64_t v = idx_at(x, i);
        if (v < 0 || v >= depth)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' element %lld is %lld, outside [0, depth = %lld) (set "
                                "allow_out_of_range to give such rows all zeros)", pe_ctx_in_name(ctx, "X", 0),
                                (long long)i, (long long)v, (long long)depth);
    }
    if (m * depth == 0) return PE_OK;
    memset(pe_tensor_data(out), 0, pe_tensor_nbytes(out));
    void *o = pe_tensor_data(out);
    for (int64_t i = 0; i < m; i++) {
        const int64_t v = idx_at(x, i);
        if (v < 0 || v >= depth) continue;
        const int64_t e = i * depth + v;
        switch (out->dtype) {
        case PE_DTYPE_FP32: ((float *)o)[e] = 1; break;
        case PE_DTYPE_FP64: ((double *)o)[e] = 1; break;
        case PE_DTYPE_INT32: ((int32_t *)o)[e] = 1; break;
        case PE_DTYPE_INT64: ((int64_t *)o)[e] = 1; break;
        default: return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(out->dtype));
        }
    }
    return PE_OK;
}
