/* ops/index.c — shape inference of the index ops: gather, gather_nd,
 * scatter, one_hot, one_hot_v2 (and the grads of the first three). Kernels:
 * ops/cpu/index.c.
 *
 * Paddle's ops, slots and attrs:
 *   gather      X [d0..], Index int32/int64 [N] (or [N, 1]), attr axis (0)
 *               -> Out = X with dims[axis] = N, Out[.., i, ..] = X[.., Index[i], ..].
 *               gather_grad (X for its dims, Index, Out@GRAD -> X@GRAD):
 *               zeros, then every Out@GRAD slice added at its index
 *               (duplicate indices accumulate).
 *   gather_nd   X [d0..d(r-1)], Index int [.., K] (K <= r)
 *               -> Out [Index.dims[:-1], d(K)..d(r-1)]; grad as gather's.
 *   scatter     X [d0, ..], Ids int [N] (or [N, 1]), Updates [N, d1..]
 *               -> Out = X with rows Ids replaced: overwrite (default) the
 *               later of duplicate ids wins (Paddle's CPU kernel); otherwise
 *               the rows named in Ids are zeroed, then every update added.
 *               scatter_grad (Ids, Updates for its dims, Out@GRAD):
 *               X@GRAD = Out@GRAD with the rows in Ids zeroed, Updates@GRAD
 *               = Out@GRAD gathered at Ids (Paddle's, in both modes).
 *   one_hot_v2  X int32/int64 [..] -> Out [.., depth] (attr dtype: pe_dtype,
 *               default float32); one_hot (fluid 1.x): X [.., 1] -> Out
 *               [.., depth] (the last dim 1 replaced). No gradient. An index
 *               outside [0, depth) is an error unless allow_out_of_range,
 *               which leaves its row all zeros (Paddle's).
 * Index values are checked by the kernels (an error naming the op, the
 * var, the element and the value, never an out-of-bounds access); negative
 * indices are refused, as Paddle's CPU kernels do.
 */
#include "ops/op.h"

#include <stdio.h>

static bool dims_eq(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

static pe_status need_int_index(pe_op_ctx *ctx, const char *slot, const pe_tensor *t) {
    if (t->dtype == PE_DTYPE_INT32 || t->dtype == PE_DTYPE_INT64) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has dtype %s (expected int32 or int64 indices)", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype));
}

static pe_status need_float(pe_op_ctx *ctx, const char *slot, const pe_tensor *t) {
    if (pe_dtype_is_float(t->dtype)) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has dtype %s (expected float32 or float64)", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype));
}

/* A list of indices: [N] or [N, 1]; *n = N. */
static pe_status index_list(pe_op_ctx *ctx, const char *slot, const pe_tensor *t, int64_t *n) {
    PE_CHECK(need_int_index(ctx, slot, t));
    if (t->ndim == 1 || (t->ndim == 2 && t->dims[1] == 1)) {
        *n = t->dims[0];
        return PE_OK;
    }
    char a[160];
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has shape %s (expected [N] or [N, 1])", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dims_str(t->ndim, t->dims, a, sizeof a));
}

/* ---- gather ------------------------------------------------------------------------ */

/* X, Index, attr axis -> Out dims; X of rank >= 1. */
static pe_status gather_out_dims(pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *idx, int64_t *od) {
    int64_t n = 0;
    PE_CHECK(index_list(ctx, "Index", idx, &n));
    const int64_t axis = pe_ctx_int(ctx, "axis");
    if (x->ndim < 1 || axis < -x->ndim || axis >= x->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis = %lld is out of range for X '%s' of rank %d",
                            (long long)axis, pe_ctx_in_name(ctx, "X", 0), x->ndim);
    const int a = (int)(axis < 0 ? axis + x->ndim : axis);
    for (int i = 0; i < x->ndim; i++) od[i] = i == a ? n : x->dims[i];
    return PE_OK;
}

/* X [.., d, ..], Index [N] -> Out [.., N, ..] (any dtype of X) */
pe_status pe_infer_gather(pe_op_ctx *ctx) {
    pe_tensor *x, *idx;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Index", &idx));
    int64_t od[PE_MAX_DIMS];
    PE_CHECK(gather_out_dims(ctx, x, idx, od));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, od);
}

/* X (dims only), Index, Out@GRAD [Out] -> X@GRAD [X] */
pe_status pe_infer_gather_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *idx, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Index", &idx));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(need_float(ctx, "X", x));
    int64_t od[PE_MAX_DIMS];
    PE_CHECK(gather_out_dims(ctx, x, idx, od));
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, x->ndim, od));
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}

/* ---- gather_nd --------------------------------------------------------------------- */

static pe_status gather_nd_out_dims(pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *idx, int *nd, int64_t *od) {
    PE_CHECK(need_int_index(ctx, "Index", idx));
    char a[160], b[160];
    const int64_t k = idx->ndim ? idx->dims[idx->ndim - 1] : -1;
    if (idx->ndim < 1 || k > x->ndim || idx->ndim - 1 + x->ndim - k > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Index '%s' has shape %s (expected [.., K] with K <= %d, the rank of "
                            "X '%s' %s)", pe_ctx_in_name(ctx, "Index", 0),
                            pe_dims_str(idx->ndim, idx->dims, a, sizeof a), x->ndim, pe_ctx_in_name(ctx, "X", 0),
                            pe_dims_str(x->ndim, x->dims, b, sizeof b));
    int n = 0;
    for (int i = 0; i < idx->ndim - 1; i++) od[n++] = idx->dims[i];
    for (int i = (int)k; i < x->ndim; i++) od[n++] = x->dims[i];
    *nd = n;
    return PE_OK;
}

/* X [d0..d(r-1)], Index [.., K] -> Out [Index.dims[:-1], d(K)..] */
pe_status pe_infer_gather_nd(pe_op_ctx *ctx) {
    pe_tensor *x, *idx;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Index", &idx));
    int nd = 0;
    int64_t od[PE_MAX_DIMS];
    PE_CHECK(gather_nd_out_dims(ctx, x, idx, &nd, od));
    return pe_infer_set_out(ctx, "Out", x->dtype, nd, od);
}

/* X (dims only), Index, Out@GRAD -> X@GRAD [X] */
pe_status pe_infer_gather_nd_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *idx, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Index", &idx));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(need_float(ctx, "X", x));
    int nd = 0;
    int64_t od[PE_MAX_DIMS];
    PE_CHECK(gather_nd_out_dims(ctx, x, idx, &nd, od));
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, nd, od));
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}

/* ---- scatter ----------------------------------------------------------------------- */

/* Updates must be [N, X.dims[1:]] (X of rank >= 1; N from Ids). xslot: the input standing for X (scatter's X,
 * scatter_grad's Out@GRAD), named in the errors. */
static pe_status scatter_check(pe_op_ctx *ctx, const char *xslot, const pe_tensor *x, const pe_tensor *ids,
                               const pe_tensor *upd) {
    int64_t n = 0;
    PE_CHECK(index_list(ctx, "Ids", ids, &n));
    char a[160], b[160];
    if (x->ndim < 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is a scalar (expected rank >= 1: scatter replaces its rows)",
                            xslot, pe_ctx_in_name(ctx, xslot, 0));
    int64_t ud[PE_MAX_DIMS];
    ud[0] = n;
    for (int i = 1; i < x->ndim; i++) ud[i] = x->dims[i];
    if (upd->dtype != x->dtype || !dims_eq(upd->ndim, upd->dims, x->ndim, ud))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Updates '%s' is %s %s, expected %s %s (one row of %s '%s' per id)",
                            pe_ctx_in_name(ctx, "Updates", 0), pe_dtype_name(upd->dtype),
                            pe_dims_str(upd->ndim, upd->dims, a, sizeof a), pe_dtype_name(x->dtype),
                            pe_dims_str(x->ndim, ud, b, sizeof b), xslot, pe_ctx_in_name(ctx, xslot, 0));
    return PE_OK;
}

/* X [d0, ..], Ids [N], Updates [N, ..] -> Out [X] */
pe_status pe_infer_scatter(pe_op_ctx *ctx) {
    pe_tensor *x, *ids, *upd;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Ids", &ids));
    PE_CHECK(pe_infer_need_in(ctx, "Updates", &upd));
    PE_CHECK(scatter_check(ctx, "X", x, ids, upd));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* Ids [N], Updates [N, ..] (dims only), Out@GRAD [d0, ..] -> X@GRAD [Out@GRAD], Updates@GRAD [Updates] */
pe_status pe_infer_scatter_grad(pe_op_ctx *ctx) {
    pe_tensor *ids, *upd, *g;
    PE_CHECK(pe_infer_need_in(ctx, "Ids", &ids));
    PE_CHECK(pe_infer_need_in(ctx, "Updates", &upd));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(need_float(ctx, "Out@GRAD", g));
    PE_CHECK(scatter_check(ctx, "Out@GRAD", g, ids, upd));
    PE_CHECK(pe_infer_set_out(ctx, "X@GRAD", g->dtype, g->ndim, g->dims));
    return pe_infer_set_out(ctx, "Updates@GRAD", upd->dtype, upd->ndim, upd->dims);
}

/* ---- one_hot, one_hot_v2 ----------------------------------------------------------- */

/* X int [..] (one_hot: [.., 1]) -> Out [.., depth] of attr dtype */
pe_status pe_infer_one_hot(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(need_int_index(ctx, "X", x));
    const int64_t depth = pe_ctx_int(ctx, "depth"), dt = pe_ctx_int(ctx, "dtype");
    if (depth < 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr depth = %lld for X '%s' (expected the number of classes, "
                            ">= 1)", (long long)depth, pe_ctx_in_name(ctx, "X", 0));
    if (dt != PE_DTYPE_FP32 && dt != PE_DTYPE_FP64 && dt != PE_DTYPE_INT32 && dt != PE_DTYPE_INT64)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr dtype = %lld for X '%s' (expected 0 float32, 1 float64, "
                            "2 int32 or 3 int64)", (long long)dt, pe_ctx_in_name(ctx, "X", 0));
    int64_t od[PE_MAX_DIMS];
    int nd = x->ndim;
    for (int i = 0; i < x->ndim; i++) od[i] = x->dims[i];
    if (ctx->info->id == PE_OP_one_hot) {
        char a[160];
        if (x->ndim < 1 || x->dims[x->ndim - 1] != 1)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has shape %s (one_hot expects the last dim to be 1, as "
                                "[N, 1]; one_hot_v2 appends the class dim to any shape)", pe_ctx_in_name(ctx, "X", 0),
                                pe_dims_str(x->ndim, x->dims, a, sizeof a));
        od[nd - 1] = depth;
    } else {
        if (nd >= PE_MAX_DIMS)
            return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has rank %d; Out would exceed %d dims",
                                pe_ctx_in_name(ctx, "X", 0), nd, PE_MAX_DIMS);
        od[nd++] = depth;
    }
    return pe_infer_set_out(ctx, "Out", (pe_dtype)dt, nd, od);
}
