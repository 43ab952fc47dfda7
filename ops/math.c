/* ops/math.c — shape inference of the math family: mul, matmul, matmul_v2
 * and their grads, lookup_table(_v2) (embedding) and layer_norm (their grad
 * ops are wired in ops.def, PE_GRAD_WIRE).
 *
 * mul follows Paddle's flatten-to-2-D rule; matmul and matmul_v2 follow
 * numpy's matmul (1-D operands promoted and the added dim removed, batch
 * dims broadcast) through one plan (ops/math.h) that the kernels reuse, so
 * the rules live in one place. Both operands must be fp32 or fp64 and of the
 * same dtype, since the GEMM is OpenBLAS's sgemm/dgemm. Grad ops take the
 * forward inputs and Out@GRAD (Paddle's slots) and give each gradient the
 * meta of its forward input; infer checks that Out@GRAD has Out's shape.
 */
#include "ops/math.h"
#include "ops/grad.h"

#include <stdio.h>
#include <string.h>

static pe_status check_float_pair(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *y) {
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; float32 or float64 expected",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    if (y->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Y '%s' has dtype %s but X '%s' has %s; they must match",
                            pe_ctx_in_name(ctx, "Y", 0), pe_dtype_name(y->dtype),
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    return PE_OK;
}

/* ---- mul ----------------------------------------------------------------
 * x: [d0..d(xn-1) | d(xn)..]  -> [M, K];  y: [e0..e(yn-1) | e(yn)..] -> [K, N]
 * out: x.dims[:xn] + y.dims[yn:]                                            */
pe_status pe_infer_mul(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!x || !y || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "X, Y and Out must all be given");
    PE_CHECK(check_float_pair(ctx, x, y));
    int64_t xn = pe_ctx_int(ctx, "x_num_col_dims"), yn = pe_ctx_int(ctx, "y_num_col_dims");
    char xs[128], ys[128];
    pe_dims_str(x->ndim, x->dims, xs, sizeof xs);
    pe_dims_str(y->ndim, y->dims, ys, sizeof ys);
    if (xn < 1 || xn >= x->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "x_num_col_dims = %lld must be in [1, rank(X) - 1] for X '%s' %s",
                            (long long)xn, pe_ctx_in_name(ctx, "X", 0), xs);
    if (yn < 1 || yn >= y->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "y_num_col_dims = %lld must be in [1, rank(Y) - 1] for Y '%s' %s",
                            (long long)yn, pe_ctx_in_name(ctx, "Y", 0), ys);
    int64_t kx = pe_dims_prod(x->dims, (int)xn, x->ndim);
    int64_t ky = pe_dims_prod(y->dims, 0, (int)yn);
    if (kx != ky)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "X '%s' %s flattens to [%lld, %lld] (x_num_col_dims %lld) and Y '%s' %s to "
                            "[%lld, %lld] (y_num_col_dims %lld): inner sizes %lld and %lld differ",
                            pe_ctx_in_name(ctx, "X", 0), xs, (long long)pe_dims_prod(x->dims, 0, (int)xn),
                            (long long)kx, (long long)xn, pe_ctx_in_name(ctx, "Y", 0), ys, (long long)ky,
                            (long long)pe_dims_prod(y->dims, (int)yn, y->ndim), (long long)yn,
                            (long long)kx, (long long)ky);
    int64_t od[PE_MAX_DIMS];
    int on = 0;
    for (int i = 0; i < xn; i++) od[on++] = x->dims[i];
    for (int i = (int)yn; i < y->ndim; i++) {
        if (on == PE_MAX_DIMS)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "output rank exceeds %d (X %s, Y %s)", PE_MAX_DIMS, xs, ys);
        od[on++] = y->dims[i];
    }
    return pe_infer_set_meta(ctx, out, x->dtype, on, od);
}

/* ---- matmul / matmul_v2 ------------------------------------------------- */

pe_status pe_matmul_plan_make(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *y,
                              pe_matmul_plan *p) {
    memset(p, 0, sizeof *p);
    bool v2 = ctx->info->id == PE_OP_matmul_v2 || ctx->info->id == PE_OP_matmul_v2_grad;
    p->trans_x = pe_ctx_bool(ctx, v2 ? "trans_x" : "transpose_X");
    p->trans_y = pe_ctx_bool(ctx, v2 ? "trans_y" : "transpose_Y");
    p->alpha = v2 ? 1.0 : pe_ctx_float(ctx, "alpha");
    /* the dims as text only for a message: formatting them costs more than the plan */
    char xs[128], ys[128];
#define PLAN_DIMS_STR() (pe_dims_str(x->ndim, x->dims, xs, sizeof xs), pe_dims_str(y->ndim, y->dims, ys, sizeof ys))
    const char *xname = pe_ctx_in_name(ctx, "X", 0), *yname = pe_ctx_in_name(ctx, "Y", 0);
    if (x->ndim < 1 || y->ndim < 1)
        return PLAN_DIMS_STR(), pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' %s and Y '%s' %s must have rank >= 1",
                                             xname, xs, yname, ys);
    /* Stored matrix shapes after numpy's 1-D promotion: x [K] -> [1, K],
     * y [K] -> [K, 1]. A vector has no transpose: its flag is ignored. */
    bool x1 = x->ndim == 1, y1 = y->ndim == 1;
    int64_t xr = x1 ? 1 : x->dims[x->ndim - 2], xc = x->dims[x->ndim - 1];
    int64_t yr = y->dims[y1 ? 0 : y->ndim - 2], yc = y1 ? 1 : y->dims[y->ndim - 1];
    if (x1) p->trans_x = false;
    if (y1) p->trans_y = false;
    p->m = p->trans_x ? xc : xr;
    int64_t kx = p->trans_x ? xr : xc;
    int64_t ky = p->trans_y ? yc : yr;
    p->n = p->trans_y ? yr : yc;
    if (kx != ky)
        return PLAN_DIMS_STR(), pe_ctx_error(ctx, PE_ERR_INVALID,
                            "X '%s' %s%s and Y '%s' %s%s: contraction sizes %lld and %lld differ",
                            xname, xs, p->trans_x ? " (transposed)" : "", yname, ys,
                            p->trans_y ? " (transposed)" : "", (long long)kx, (long long)ky);
    p->k = kx;
    /* Batch dims, broadcast right-aligned. */
    int xb = x->ndim > 2 ? x->ndim - 2 : 0, yb = y->ndim > 2 ? y->ndim - 2 : 0;
    int nb = xb > yb ? xb : yb;
    p->batch_ndim = nb;
    for (int a = 0; a < nb; a++) {
        int ix = a - (nb - xb), iy = a - (nb - yb);
        int64_t dx = ix >= 0 ? x->dims[ix] : 1, dy = iy >= 0 ? y->dims[iy] : 1;
        if (dx != dy && dx != 1 && dy != 1)
            return PLAN_DIMS_STR(), pe_ctx_error(ctx, PE_ERR_INVALID,
                                "batch dims of X '%s' %s and Y '%s' %s do not broadcast (%lld vs %lld)",
                                xname, xs, yname, ys, (long long)dx, (long long)dy);
        p->batch_dims[a] = dx == 1 ? dy : dx;
    }
    /* Matrix strides per batch axis (row-major over each operand's own batch
     * dims); a broadcast axis (size 1 or absent) has stride 0. */
    int64_t sx = 1, sy = 1;
    for (int a = nb - 1; a >= 0; a--) {
        int ix = a - (nb - xb), iy = a - (nb - yb);
        int64_t dx = ix >= 0 ? x->dims[ix] : 1, dy = iy >= 0 ? y->dims[iy] : 1;
        p->x_bstride[a] = dx == 1 ? 0 : sx;
        p->y_bstride[a] = dy == 1 ? 0 : sy;
        sx *= dx;
        sy *= dy;
    }
    p->n_batch = pe_dims_prod(p->batch_dims, 0, nb);
    p->x_full = sx == p->n_batch;
    p->y_full = sy == p->n_batch;
    /* out: batch + [m] (unless x was 1-D) + [n] (unless y was 1-D); two
     * vectors give [1], as Paddle (PE has no 0-D results from matmul). */
    p->out_ndim = 0;
    for (int a = 0; a < nb; a++) p->out_dims[p->out_ndim++] = p->batch_dims[a];
    if (!x1) p->out_dims[p->out_ndim++] = p->m;
    if (!y1) p->out_dims[p->out_ndim++] = p->n;
    if (x1 && y1) p->out_dims[p->out_ndim++] = 1;
    return PE_OK;
}

int64_t pe_matmul_x_batch(const pe_matmul_plan *p, int64_t b) {
    if (p->x_full) return b;
    int64_t idx = 0;
    for (int a = p->batch_ndim - 1; a >= 0; a--) {
        idx += (b % p->batch_dims[a]) * p->x_bstride[a];
        b /= p->batch_dims[a];
    }
    return idx;
}

int64_t pe_matmul_y_batch(const pe_matmul_plan *p, int64_t b) {
    if (p->y_full) return b;
    int64_t idx = 0;
    for (int a = p->batch_ndim - 1; a >= 0; a--) {
        idx += (b % p->batch_dims[a]) * p->y_bstride[a];
        b /= p->batch_dims[a];
    }
    return idx;
}

/* x: [..., M, K] (or [K], or transposed), y: [..., K, N] -> out: [bcast..., M, N] */
pe_status pe_infer_matmul(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!x || !y || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "X, Y and Out must all be given");
    PE_CHECK(check_float_pair(ctx, x, y));
    pe_matmul_plan p;
    PE_CHECK(pe_matmul_plan_make(ctx, x, y, &p));
    return pe_infer_set_meta(ctx, out, x->dtype, p.out_ndim, p.out_dims);
}

/* ---- gradients of mul / matmul --------------------------------------------- */

static pe_status set_like(pe_op_ctx *ctx, const char *slot, const pe_tensor *like) {
    pe_tensor *t = pe_ctx_out(ctx, slot);
    if (!t) return PE_OK; /* gradient not wanted */
    return pe_infer_set_meta(ctx, t, like->dtype, like->ndim, like->dims);
}

/* x: [M..., K...], y: [K..., N...], Out@GRAD: [M..., N...] -> X@GRAD like x, Y@GRAD like y */
pe_status pe_infer_mul_grad(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    if (!x || !y) return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Y must be given");
    PE_CHECK(check_float_pair(ctx, x, y));
    int64_t xn = pe_ctx_int(ctx, "x_num_col_dims"), yn = pe_ctx_int(ctx, "y_num_col_dims");
    if (xn < 1 || xn >= x->ndim || yn < 1 || yn >= y->ndim ||
        pe_dims_prod(x->dims, (int)xn, x->ndim) != pe_dims_prod(y->dims, 0, (int)yn))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' and Y '%s' do not fit x_num_col_dims %lld / y_num_col_dims %lld",
                            pe_ctx_in_name(ctx, "X", 0), pe_ctx_in_name(ctx, "Y", 0), (long long)xn, (long long)yn);
    int64_t od[PE_MAX_DIMS];
    int on = 0;
    for (int i = 0; i < xn; i++) od[on++] = x->dims[i];
    for (int i = (int)yn; i < y->ndim && on < PE_MAX_DIMS; i++) od[on++] = y->dims[i];
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, on, od));
    PE_CHECK(set_like(ctx, "X@GRAD", x));
    return set_like(ctx, "Y@GRAD", y);
}

/* x, y as matmul; Out@GRAD: matmul's Out -> X@GRAD like x, Y@GRAD like y */
pe_status pe_infer_matmul_grad(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    if (!x || !y) return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Y must be given");
    PE_CHECK(check_float_pair(ctx, x, y));
    pe_matmul_plan p;
    PE_CHECK(pe_matmul_plan_make(ctx, x, y, &p));
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, p.out_ndim, p.out_dims));
    PE_CHECK(set_like(ctx, "X@GRAD", x));
    return set_like(ctx, "Y@GRAD", y);
}

/* ---- lookup_table / lookup_table_v2 ---------------------------------------
 * w: [V, D], ids: [...] (v2) or [..., 1] (v1), int64 or int32
 * -> out: [..., D] (ids' dims with D appended (v2) or replacing the last 1 (v1)) */

static bool is_v1_lookup(const pe_op_ctx *ctx) {
    return ctx->info->id == PE_OP_lookup_table || ctx->info->id == PE_OP_lookup_table_grad;
}

/* Validates W, Ids and padding_idx; fills the output dims. */
static pe_status lookup_plan(const pe_op_ctx *ctx, const pe_tensor *w, const pe_tensor *ids, int *on, int64_t *od) {
    if (!w || !ids) return pe_ctx_error(ctx, PE_ERR_INVALID, "W and Ids must be given");
    char ws[128], is[128];
    pe_dims_str(w->ndim, w->dims, ws, sizeof ws);
    pe_dims_str(ids->ndim, ids->dims, is, sizeof is);
    if (w->ndim != 2)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "W '%s' is %s; a [vocabulary, dim] table expected",
                            pe_ctx_in_name(ctx, "W", 0), ws);
    if (ids->dtype != PE_DTYPE_INT64 && ids->dtype != PE_DTYPE_INT32)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Ids '%s' has dtype %s; int64 or int32 expected",
                            pe_ctx_in_name(ctx, "Ids", 0), pe_dtype_name(ids->dtype));
    int64_t pad = pe_ctx_int(ctx, "padding_idx");
    if (pad < -1 || pad >= w->dims[0])
        return pe_ctx_error(ctx, PE_ERR_INVALID, "padding_idx %lld is outside [-1, %lld) (-1 = none) for W '%s' %s",
                            (long long)pad, (long long)w->dims[0], pe_ctx_in_name(ctx, "W", 0), ws);
    int n = ids->ndim;
    if (is_v1_lookup(ctx)) {
        if (n < 1 || ids->dims[n - 1] != 1)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "Ids '%s' is %s; lookup_table takes [..., 1] (lookup_table_v2 "
                                "takes any shape)", pe_ctx_in_name(ctx, "Ids", 0), is);
        n--;
    }
    if (n + 1 > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Ids '%s' %s gives an output of rank %d > %d",
                            pe_ctx_in_name(ctx, "Ids", 0), is, n + 1, PE_MAX_DIMS);
    for (int i = 0; i < n; i++) od[i] = ids->dims[i];
    od[n] = w->dims[1];
    *on = n + 1;
    return PE_OK;
}

pe_status pe_infer_lookup_table(pe_op_ctx *ctx) {
    const pe_tensor *w = pe_ctx_in(ctx, "W"), *ids = pe_ctx_in(ctx, "Ids");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int on;
    int64_t od[PE_MAX_DIMS];
    PE_CHECK(lookup_plan(ctx, w, ids, &on, od));
    return pe_infer_set_meta(ctx, out, w->dtype, on, od);
}

/* W [V, D], Ids, Out@GRAD [..., D] -> W@GRAD [V, D] (dense) */
pe_status pe_infer_lookup_table_grad(pe_op_ctx *ctx) {
    const pe_tensor *w = pe_ctx_in(ctx, "W"), *ids = pe_ctx_in(ctx, "Ids"), *g = pe_ctx_in(ctx, "Out@GRAD");
    int on;
    int64_t od[PE_MAX_DIMS];
    PE_CHECK(lookup_plan(ctx, w, ids, &on, od));
    if (w->dtype != PE_DTYPE_FP32 && w->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "W '%s' has dtype %s; gradients need float32 or float64",
                            pe_ctx_in_name(ctx, "W", 0), pe_dtype_name(w->dtype));
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, w->dtype, on, od));
    return set_like(ctx, "W@GRAD", w);
}

/* ---- layer_norm -------------------------------------------------------------
 * x: [d0..d(b-1) | db..] viewed as [N, D] (b = begin_norm_axis);
 * scale, bias: [D] -> y: like x; mean, variance: [N] (the biased variance,
 * without epsilon, as Paddle saves them for the grad op) */

pe_status pe_layer_norm_dims(const pe_op_ctx *ctx, const pe_tensor *x, int64_t *rows, int64_t *cols) {
    if (!x) return pe_ctx_error(ctx, PE_ERR_INVALID, "X must be given");
    const char *xname = pe_ctx_in_name(ctx, "X", 0);
    char xs[128];
    pe_dims_str(x->ndim, x->dims, xs, sizeof xs);
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; float32 or float64 expected", xname,
                            pe_dtype_name(x->dtype));
    int64_t b = pe_ctx_int(ctx, "begin_norm_axis");
    if (b < 0 || b >= x->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "begin_norm_axis %lld is outside [0, %d) for X '%s' %s",
                            (long long)b, x->ndim, xname, xs);
    *rows = pe_dims_prod(x->dims, 0, (int)b);
    *cols = pe_dims_prod(x->dims, (int)b, x->ndim);
    const char *slots[2] = {"Scale", "Bias"};
    for (int i = 0; i < 2; i++) {
        const pe_tensor *t = pe_ctx_in(ctx, slots[i]);
        if (!t) continue;
        if (t->dtype != x->dtype || pe_tensor_numel(t) != *cols || (t->ndim != 1 && t->ndim != 2)) {
            char ts[128];
            pe_dims_str(t->ndim, t->dims, ts, sizeof ts);
            return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is %s %s; X '%s' %s with begin_norm_axis %lld needs "
                                "%s [%lld]", slots[i], pe_ctx_in_name(ctx, slots[i], 0), pe_dtype_name(t->dtype), ts,
                                xname, xs, (long long)b, pe_dtype_name(x->dtype), (long long)*cols);
        }
    }
    return PE_OK;
}

pe_status pe_infer_layer_norm(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    int64_t rows, cols;
    PE_CHECK(pe_layer_norm_dims(ctx, x, &rows, &cols));
    PE_CHECK(set_like(ctx, "Y", x));
    const char *slots[2] = {"Mean", "Variance"};
    for (int i = 0; i < 2; i++) {
        pe_tensor *t = pe_ctx_out(ctx, slots[i]);
        if (!t) return pe_ctx_error(ctx, PE_ERR_INVALID, "%s must be given", slots[i]);
        pe_status st = pe_tensor_set_meta(t, x->dtype, 1, &rows);
        if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    }
    return PE_OK;
}

/* x, scale?, bias?, mean [N], variance [N], Y@GRAD like x -> X@GRAD, Scale@GRAD, Bias@GRAD */
pe_status pe_infer_layer_norm_grad(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    int64_t rows, cols;
    PE_CHECK(pe_layer_norm_dims(ctx, x, &rows, &cols));
    PE_CHECK(pe_infer_check_grad(ctx, "Y@GRAD", pe_ctx_in(ctx, "Y@GRAD"), x->dtype, x->ndim, x->dims));
    const char *stats[2] = {"Mean", "Variance"};
    for (int i = 0; i < 2; i++) {
        const pe_tensor *t = pe_ctx_in(ctx, stats[i]);
        if (!t || t->dtype != x->dtype || pe_tensor_numel(t) != rows)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' must be the forward's %s [%lld]", stats[i],
                                t ? pe_ctx_in_name(ctx, stats[i], 0) : "(none)", pe_dtype_name(x->dtype),
                                (long long)rows);
    }
    PE_CHECK(set_like(ctx, "X@GRAD", x));
    const char *slots[2] = {"Scale", "Bias"};
    for (int i = 0; i < 2; i++) {
        char gslot[32];
        snprintf(gslot, sizeof gslot, "%s@GRAD", slots[i]);
        if (!pe_ctx_out(ctx, gslot)) continue;
        const pe_tensor *p = pe_ctx_in(ctx, slots[i]);
        if (!p) return pe_ctx_error(ctx, PE_ERR_INVALID, "%s is wanted but %s is not given", gslot, slots[i]);
        PE_CHECK(set_like(ctx, gslot, p));
    }
    return PE_OK;
}
