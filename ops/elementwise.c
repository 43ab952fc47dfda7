/* ops/elementwise.c — shape inference of the elementwise family and the
 * broadcast plan shared by its CPU and CUDA kernels (ops/elementwise.h).
 *
 * elementwise_{add,sub,mul,div,max,min,pow,mod,floordiv}: Out gets the
 * broadcast shape of X and Y (Paddle's `axis` alignment, then numpy's per-dim
 * rule); X and Y must have the same dtype, one of fp32/fp64/int32/int64. The
 * plan is computed by one pure function so that inference, the CPU loops and
 * the CUDA launches can never disagree about the shape. The compare ops
 * (equal, not_equal, less_than, less_equal, greater_than, greater_equal) take
 * the same shapes and also bool operands, and give a bool Out; the logical
 * ops (logical_and/or/xor: bool X, Y broadcast with axis -1; logical_not)
 * give bool; where (Condition bool, X, Y of one shape, no broadcasting, as
 * Paddle's op) gives X's meta.
 *
 * relu/sigmoid/tanh/scale/softmax (ops.def routes all to pe_infer_unary):
 * Out has X's meta; the dtype (and softmax's axis) is checked here so a
 * kernel never sees a type it has no loop for. cast: Out has X's dims and
 * the out_dtype attr (pe_dtype values 0..5). cast's in_dtype attr is ignored
 * (the input tensor's own dtype is authoritative, as in Paddle's kernel).
 *
 * Also scale's grad maker (ops/grad.h; the family's other gradients are
 * wired in ops.def, PE_GRAD_WIRE) and the shape inference of the grad ops:
 * elementwise_*_grad (X, Y, Out@GRAD -> X@GRAD?, Y@GRAD? of X's and Y's
 * shapes), where_grad (likewise), relu/sigmoid/tanh_grad (from Out), scale (its
 * gradient is a `scale` op by the same factor without bias) and cast_grad
 * (Out@GRAD cast back to X's dtype; X is an input so the dtype comes from
 * the tensor, not from an in_dtype attr that may be left at its default).
 */
#include "ops/elementwise.h"
#include "ops/grad.h"
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

static bool same_dims(const pe_tensor *t, int nd, const int64_t *dims);

/* ---- broadcast plan ----------------------------------------------------- */

const char *pe_bcast_kind_name(pe_bcast_kind kind) {
    static const char *const names[PE_BCAST_KIND_COUNT] = {"same", "scalar_y", "row", "mid", "general"};
    return kind >= 0 && kind < PE_BCAST_KIND_COUNT ? names[kind] : "invalid";
}

/* Aligns the lower-rank operand `lo` (rank lo_n) into `hi_n` dims starting at
 * `axis` (-1 = trailing), dropping trailing 1s of lo that would run past the
 * end (Paddle's trim_trailing_singular_dims). Writes the padded dims to out. */
static pe_status align_dims(int hi_n, int lo_n, const int64_t *lo, int axis, const char *lo_name,
                            int64_t *out) {
    if (axis == -1) axis = hi_n - lo_n;
    if (axis < 0 || axis > hi_n)
        return pe_error(PE_ERR_INVALID, "axis %d is out of range for aligning %s (rank %d) inside rank %d "
                        "(expected -1 or 0..%d)", axis, lo_name, lo_n, hi_n, hi_n - lo_n);
    while (lo_n > 0 && axis + lo_n > hi_n && lo[lo_n - 1] == 1) lo_n--; /* trailing 1s */
    if (axis + lo_n > hi_n)
        return pe_error(PE_ERR_INVALID, "axis %d places %s (rank %d) past the last dim of rank %d "
                        "(expected axis <= %d)", axis, lo_name, lo_n, hi_n, hi_n - lo_n);
    for (int i = 0; i < hi_n; i++) out[i] = 1;
    for (int i = 0; i < lo_n; i++) out[axis + i] = lo[i];
    return PE_OK;
}

static void fill_contig_strides(int n, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = n - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

pe_status pe_bcast_plan_make(int x_ndim, const int64_t *x_dims, int y_ndim, const int64_t *y_dims,
                             int axis, pe_bcast_plan *pl) {
    char xs[160], ys[160];
    memset(pl, 0, sizeof *pl);
    if (x_ndim < 0 || x_ndim > PE_MAX_DIMS || y_ndim < 0 || y_ndim > PE_MAX_DIMS)
        return pe_error(PE_ERR_INVALID, "ranks %d and %d must be in 0..%d", x_ndim, y_ndim, PE_MAX_DIMS);
    bool same = x_ndim == y_ndim && !memcmp(x_dims, y_dims, sizeof(int64_t) * (size_t)x_ndim);
    int r = x_ndim > y_ndim ? x_ndim : y_ndim;
    int64_t xd[PE_MAX_DIMS], yd[PE_MAX_DIMS];
    if (same || (x_ndim == y_ndim && axis == -1)) {
        memcpy(xd, x_dims, sizeof(int64_t) * (size_t)r);
        memcpy(yd, y_dims, sizeof(int64_t) * (size_t)r);
    } else if (x_ndim >= y_ndim) { /* equal ranks with an explicit axis: Y is aligned too */
        memcpy(xd, x_dims, sizeof(int64_t) * (size_t)r);
        if (align_dims(r, y_ndim, y_dims, axis, "Y", yd) != PE_OK)
            return pe_error_wrap(PE_ERR_INVALID, "X %s, Y %s", pe_dims_str(x_ndim, x_dims, xs, sizeof xs),
                                 pe_dims_str(y_ndim, y_dims, ys, sizeof ys));
    } else { /* X has the lower rank: Paddle aligns X inside Y the same way */
        memcpy(yd, y_dims, sizeof(int64_t) * (size_t)r);
        if (align_dims(r, x_ndim, x_dims, axis, "X", xd) != PE_OK)
            return pe_error_wrap(PE_ERR_INVALID, "X %s, Y %s", pe_dims_str(x_ndim, x_dims, xs, sizeof xs),
                                 pe_dims_str(y_ndim, y_dims, ys, sizeof ys));
    }

    /* numpy's rule per aligned dim. */
    int64_t od[PE_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        if (xd[i] < 0 || yd[i] < 0)
            return pe_error(PE_ERR_INVALID, "negative dim in X %s or Y %s", pe_dims_str(x_ndim, x_dims, xs, sizeof xs),
                            pe_dims_str(y_ndim, y_dims, ys, sizeof ys));
        if (xd[i] == yd[i] || yd[i] == 1) od[i] = xd[i];
        else if (xd[i] == 1) od[i] = yd[i];
        else
            return pe_error(PE_ERR_INVALID, "X %s and Y %s do not broadcast with axis %d: aligned dim %d is "
                            "%lld in X and %lld in Y (they must be equal or one of them 1)",
                            pe_dims_str(x_ndim, x_dims, xs, sizeof xs), pe_dims_str(y_ndim, y_dims, ys, sizeof ys),
                            axis, i, (long long)xd[i], (long long)yd[i]);
    }
    pl->out_ndim = r;
    memcpy(pl->out_dims, od, sizeof(int64_t) * (size_t)r);
    pl->numel = pe_dims_prod(od, 0, r);

    /* Iteration space: drop size-1 output dims, then merge neighbours whose
     * broadcast status (full or broadcast) is the same in both operands. */
    int n = 0;
    int64_t d[PE_MAX_DIMS];
    bool xb[PE_MAX_DIMS], yb[PE_MAX_DIMS]; /* true = broadcast along this dim */
    for (int i = 0; i < r; i++) {
        if (od[i] == 1) continue;
        bool bx = xd[i] != od[i], by = yd[i] != od[i];
        if (n > 0 && xb[n - 1] == bx && yb[n - 1] == by) {
            d[n - 1] *= od[i];
        } else {
            d[n] = od[i];
            xb[n] = bx;
            yb[n] = by;
            n++;
        }
    }
    pl->ndim = n;
    memcpy(pl->dims, d, sizeof(int64_t) * (size_t)n);
    int64_t xs_full[PE_MAX_DIMS], ys_full[PE_MAX_DIMS], xdm[PE_MAX_DIMS], ydm[PE_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        xdm[i] = xb[i] ? 1 : d[i];
        ydm[i] = yb[i] ? 1 : d[i];
    }
    fill_contig_strides(n, xdm, xs_full);
    fill_contig_strides(n, ydm, ys_full);
    for (int i = 0; i < n; i++) {
        pl->x_strides[i] = xb[i] ? 0 : xs_full[i];
        pl->y_strides[i] = yb[i] ? 0 : ys_full[i];
    }

    /* Fast-path classification (x must be full: out and x share indices). */
    bool x_full = true, y_full = true, y_none = true;
    for (int i = 0; i < n; i++) {
        x_full = x_full && !xb[i];
        y_full = y_full && !yb[i];
        y_none = y_none && yb[i];
    }
    pl->pre = pl->numel;
    pl->n = 1;
    pl->post = 1;
    if (pl->numel == 0 || n == 0 || (x_full && y_full)) {
        pl->kind = PE_BCAST_SAME;
    } else if (x_full && y_none) {
        pl->kind = PE_BCAST_SCALAR_Y;
    } else if (x_full && n == 2 && yb[0] && !yb[1]) {
        pl->kind = PE_BCAST_ROW;
        pl->pre = d[0];
        pl->n = d[1];
    } else if (x_full && n == 2 && !yb[0] && yb[1]) {
        pl->kind = PE_BCAST_MID;
        pl->pre = 1;
        pl->n = d[0];
        pl->post = d[1];
    } else if (x_full && n == 3 && yb[0] && !yb[1] && yb[2]) {
        pl->kind = PE_BCAST_MID;
        pl->pre = d[0];
        pl->n = d[1];
        pl->post = d[2];
    } else {
        pl->kind = PE_BCAST_GENERAL;
    }
    return PE_OK;
}

/* ---- infer ---------------------------------------------------------------- */

/* X [..], Y [..] -> Out: broadcast shape (ops/elementwise.h), of dtype
 * out_dt (-1: X's). X and Y must have the same dtype, a number type or (when
 * `bools`) bool, or only bool (`only_bool`: the logical ops, trailing axis). */
static pe_status infer_binary(pe_op_ctx *ctx, bool bools, bool only_bool, int out_dt) {
    pe_tensor *x, *y;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Y", &y));
    const char *xn = pe_ctx_in_name(ctx, "X", 0), *yn = pe_ctx_in_name(ctx, "Y", 0);
    if (x->dtype != y->dtype)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is %s but Y '%s' is %s (they must match)", xn,
                            pe_dtype_name(x->dtype), yn, pe_dtype_name(y->dtype));
    bool ok = only_bool ? x->dtype == PE_DTYPE_BOOL : pe_dtype_is_num(x->dtype) || (bools && x->dtype == PE_DTYPE_BOOL);
    if (!ok)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected %s)", xn, pe_dtype_name(x->dtype),
                            only_bool ? "bool" : bools ? "float32, float64, int32, int64 or bool"
                                                       : "float32, float64, int32 or int64");
    pe_bcast_plan pl;
    int axis = only_bool ? -1 : (int)pe_ctx_int(ctx, "axis");
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, axis, &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' and Y '%s': %s", xn, yn, pe_last_error());
    return pe_infer_set_out(ctx, "Out", out_dt < 0 ? x->dtype : (pe_dtype)out_dt, pl.out_ndim, pl.out_dims);
}

/* elementwise_{add,sub,mul,div,max,min,pow,mod,floordiv}: Out has X's dtype. */
pe_status pe_infer_elementwise(pe_op_ctx *ctx) { return infer_binary(ctx, false, false, -1); }

/* equal, not_equal, less_than, less_equal, greater_than, greater_equal:
 * number or bool X, Y -> bool Out. */
pe_status pe_infer_compare(pe_op_ctx *ctx) { return infer_binary(ctx, true, false, PE_DTYPE_BOOL); }

/* logical_{and,or,xor}: bool X, Y -> bool Out; logical_not: bool X -> bool Out. */
pe_status pe_infer_logical(pe_op_ctx *ctx) {
    if (ctx->info->id != PE_OP_logical_not) return infer_binary(ctx, true, true, PE_DTYPE_BOOL);
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (x->dtype != PE_DTYPE_BOOL)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected bool)", pe_ctx_in_name(ctx, "X", 0),
                            pe_dtype_name(x->dtype));
    return pe_infer_set_out(ctx, "Out", PE_DTYPE_BOOL, x->ndim, x->dims);
}

/* Condition [..] bool, X [..], Y [..] -> Out [..]: the three of one shape
 * (Paddle's where op; its Python API expands before), X and Y one dtype. */
pe_status pe_infer_where(pe_op_ctx *ctx) {
    pe_tensor *c, *x, *y;
    PE_CHECK(pe_infer_need_in(ctx, "Condition", &c));
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Y", &y));
    const char *cn = pe_ctx_in_name(ctx, "Condition", 0), *xn = pe_ctx_in_name(ctx, "X", 0),
               *yn = pe_ctx_in_name(ctx, "Y", 0);
    char a[160], b[160], d[160];
    if (c->dtype != PE_DTYPE_BOOL || x->dtype != y->dtype || !pe_dtype_is_num(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Condition '%s' is %s, X '%s' %s, Y '%s' %s (expected bool, and "
                            "X and Y of one dtype: float32, float64, int32 or int64)", cn, pe_dtype_name(c->dtype),
                            xn, pe_dtype_name(x->dtype), yn, pe_dtype_name(y->dtype));
    if (!same_dims(c, x->ndim, x->dims) || !same_dims(y, x->ndim, x->dims))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Condition '%s' %s, X '%s' %s and Y '%s' %s must have the same "
                            "shape", cn, pe_dims_str(c->ndim, c->dims, a, sizeof a), xn,
                            pe_dims_str(x->ndim, x->dims, b, sizeof b), yn, pe_dims_str(y->ndim, y->dims, d, sizeof d));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* X [..] -> Out [..] (relu, sigmoid, tanh, softmax: float; scale: float or
 * int). ops.def also routes softmax here; its axis is checked here too. */
pe_status pe_infer_unary(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (ctx->info->id == PE_OP_softmax) {
        int64_t axis = pe_ctx_int(ctx, "axis");
        int r = x->ndim;
        if (r == 0 || axis < -r || axis >= r) {
            char xs[160];
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis = %lld is out of range for X '%s' of shape %s "
                                "(expected %d..%d)", (long long)axis, pe_ctx_in_name(ctx, "X", 0),
                                pe_dims_str(x->ndim, x->dims, xs, sizeof xs), -r, r - 1);
        }
    }
    bool ok = ctx->info->id == PE_OP_scale ? pe_dtype_is_num(x->dtype) : pe_dtype_is_float(x->dtype);
    if (!ok)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected %s)", pe_ctx_in_name(ctx, "X", 0),
                            pe_dtype_name(x->dtype),
                            ctx->info->id == PE_OP_scale ? "float32, float64, int32 or int64" : "float32 or float64");
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* X [..] of any of the six dtypes -> Out [..] of dtype out_dtype. */
pe_status pe_infer_cast(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (x->dtype > PE_DTYPE_BOOL)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s (cast supports float32, float64, int32, "
                            "int64, uint8, bool)", pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    int64_t od = pe_ctx_int(ctx, "out_dtype");
    if (od < PE_DTYPE_FP32 || od > PE_DTYPE_BOOL)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr out_dtype = %lld is not a supported dtype (expected 0 float32, "
                            "1 float64, 2 int32, 3 int64, 4 uint8, 5 bool)", (long long)od);
    return pe_infer_set_out(ctx, "Out", (pe_dtype)od, x->ndim, x->dims);
}

/* ---- grad ops: shape inference --------------------------------------------- */

/* Output `slot` (when present) gets the meta of tensor `like`. */
static pe_status set_like(pe_op_ctx *ctx, const char *slot, const pe_tensor *like) {
    return pe_infer_set_out(ctx, slot, like->dtype, like->ndim, like->dims);
}

static pe_status grad_mismatch(pe_op_ctx *ctx, const char *slot, const pe_tensor *t, const char *want_slot,
                               pe_dtype want_dt, int want_nd, const int64_t *want_dims) {
    char a[160], b[160];
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is %s %s, expected %s %s (the %s it is the gradient of)", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, a, sizeof a),
                        pe_dtype_name(want_dt), pe_dims_str(want_nd, want_dims, b, sizeof b), want_slot);
}

static bool same_dims(const pe_tensor *t, int nd, const int64_t *dims) {
    if (t->ndim != nd) return false;
    for (int i = 0; i < nd; i++)
        if (t->dims[i] != dims[i]) return false;
    return true;
}

/* X [..], Y [..], Out@GRAD [broadcast of X, Y] -> X@GRAD [X], Y@GRAD [Y] */
pe_status pe_infer_elementwise_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *y, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Y", &y));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (x->dtype != y->dtype || !pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is %s and Y '%s' is %s (expected the same float dtype)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype), pe_ctx_in_name(ctx, "Y", 0),
                            pe_dtype_name(y->dtype));
    pe_bcast_plan pl;
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' and Y '%s': %s", pe_ctx_in_name(ctx, "X", 0),
                            pe_ctx_in_name(ctx, "Y", 0), pe_last_error());
    if (g->dtype != x->dtype || !same_dims(g, pl.out_ndim, pl.out_dims))
        return grad_mismatch(ctx, "Out@GRAD", g, "Out", x->dtype, pl.out_ndim, pl.out_dims);
    PE_CHECK(set_like(ctx, "X@GRAD", x));
    return set_like(ctx, "Y@GRAD", y);
}

/* Condition [..], X [..], Y [..], Out@GRAD [..] -> X@GRAD? [X], Y@GRAD? [Y] */
pe_status pe_infer_where_grad(pe_op_ctx *ctx) {
    pe_tensor *c, *x, *y, *g;
    PE_CHECK(pe_infer_need_in(ctx, "Condition", &c));
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Y", &y));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (c->dtype != PE_DTYPE_BOOL || !same_dims(c, x->ndim, x->dims) || !same_dims(y, x->ndim, x->dims) ||
        x->dtype != y->dtype || !pe_dtype_is_num(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Condition '%s', X '%s' and Y '%s' must be bool and one number "
                            "dtype, of one shape", pe_ctx_in_name(ctx, "Condition", 0), pe_ctx_in_name(ctx, "X", 0),
                            pe_ctx_in_name(ctx, "Y", 0));
    if (g->dtype != x->dtype || !same_dims(g, x->ndim, x->dims))
        return grad_mismatch(ctx, "Out@GRAD", g, "Out", x->dtype, x->ndim, x->dims);
    PE_CHECK(set_like(ctx, "X@GRAD", x));
    return set_like(ctx, "Y@GRAD", y);
}

/* Out [..], Out@GRAD [..] -> X@GRAD [..] (relu_grad, sigmoid_grad, tanh_grad) */
pe_status pe_infer_act_grad(pe_op_ctx *ctx) {
    pe_tensor *o, *g;
    PE_CHECK(pe_infer_need_in(ctx, "Out", &o));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (!pe_dtype_is_float(o->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Out '%s' has dtype %s (expected float32 or float64)",
                            pe_ctx_in_name(ctx, "Out", 0), pe_dtype_name(o->dtype));
    if (g->dtype != o->dtype || !same_dims(g, o->ndim, o->dims))
        return grad_mismatch(ctx, "Out@GRAD", g, "Out", o->dtype, o->ndim, o->dims);
    return set_like(ctx, "X@GRAD", o);
}

/* X [..] (any dtype), Out@GRAD [..] (float) -> X@GRAD [..] of X's dtype */
pe_status pe_infer_cast_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (!same_dims(g, x->ndim, x->dims) || g->dtype > PE_DTYPE_BOOL || x->dtype > PE_DTYPE_BOOL)
        return grad_mismatch(ctx, "Out@GRAD", g, "Out", g->dtype, x->ndim, x->dims);
    return set_like(ctx, "X@GRAD", x);
}

/* ---- grad makers -------------------------------------------------------------- */

/* scale: X@GRAD = scale(Out@GRAD, scale, bias 0) — the bias does not reach X. */
pe_status pe_grad_scale_op(pe_grad_ctx *g) {
    PE_CHECK(pe_grad_new_op(g, "scale"));
    PE_CHECK(pe_op_set_float(pe_grad_cur_op(g), "bias", 0.0));
    PE_CHECK(pe_grad_out_grad(g, "Out", "X"));
    return pe_grad_in_grad(g, "X", "Out");
}
