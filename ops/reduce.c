/* ops/reduce.c — shape inference of the reductions: mean, sum, arg_max,
 * top_k, accuracy, reduce_sum / mean / max / min / prod / any / all over
 * dims (any / all: bool -> bool; max / min refuse an empty reduction, as
 * torch.amax does; softmax keeps X's
 * shape and is checked by pe_infer_unary in ops/elementwise.c, where ops.def
 * routes it) and the shape inference of the grad ops of mean, sum, softmax,
 * reduce_sum / mean / max / min / prod (their grad makers are wired in
 * ops.def).
 *
 * Shapes follow Paddle before 0-D tensors existed: a full reduction gives
 * shape [1], never rank 0, so per-place results concatenate along axis 0.
 * Each function checks dtypes, ranks and attrs up front so the kernels in
 * ops/cpu/reduce.c only ever see inputs they have a loop for.
 */
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/reduce.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static pe_status bad_dtype(pe_op_ctx *ctx, const char *slot, const pe_tensor *t, const char *want) {
    return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s '%s' has dtype %s (expected %s)", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype), want);
}

/* X [..] -> Out [1] */
pe_status pe_infer_mean(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (!pe_dtype_is_float(x->dtype)) return bad_dtype(ctx, "X", x, "float32 or float64");
    const int64_t one = 1;
    return pe_infer_set_out(ctx, "Out", x->dtype, 1, &one);
}

/* X_0 [..], ..., X_{n-1} [..] (same dims and dtype) -> Out [..]. Absent
 * (@EMPTY@) args are skipped; at least one must be present. */
pe_status pe_infer_sum(pe_op_ctx *ctx) {
    const pe_tensor *first = NULL;
    int first_k = -1;
    char a[160], b[160];
    for (int k = 0; k < pe_ctx_n_in(ctx, "X"); k++) {
        const pe_tensor *t = pe_ctx_in_at(ctx, "X", k);
        if (!t) continue;
        if (!first) {
            first = t;
            first_k = k;
            if (!pe_dtype_is_num(t->dtype))
                return pe_ctx_error(ctx, PE_ERR_INVALID, "input X[%d] '%s' has dtype %s (expected float32, "
                                    "float64, int32 or int64)", k, pe_ctx_in_name(ctx, "X", k), pe_dtype_name(t->dtype));
            continue;
        }
        if (t->dtype != first->dtype)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "input X[%d] '%s' is %s but X[%d] '%s' is %s (all inputs must "
                                "have the same dtype)", k, pe_ctx_in_name(ctx, "X", k), pe_dtype_name(t->dtype),
                                first_k, pe_ctx_in_name(ctx, "X", first_k), pe_dtype_name(first->dtype));
        bool same = t->ndim == first->ndim;
        for (int i = 0; same && i < t->ndim; i++) same = t->dims[i] == first->dims[i];
        if (!same)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "input X[%d] '%s' has shape %s but X[%d] '%s' has shape %s (all "
                                "inputs must have the same shape)", k, pe_ctx_in_name(ctx, "X", k),
                                pe_dims_str(t->ndim, t->dims, a, sizeof a), first_k,
                                pe_ctx_in_name(ctx, "X", first_k), pe_dims_str(first->ndim, first->dims, b, sizeof b));
    }
    if (!first) return pe_ctx_error(ctx, PE_ERR_INVALID, "needs at least one input X (all are absent)");
    return pe_infer_set_out(ctx, "Out", first->dtype, first->ndim, first->dims);
}

/* X [d_0, .., d_{r-1}] -> Out: X's dims without `axis` (kept as 1 with
 * keepdims); flatten: [1] (all-ones of rank r with keepdims). A rank-0
 * result becomes [1]. Out dtype: attr dtype, 2 int32 or 3 int64 (-1 = int64). */
pe_status pe_infer_arg_max(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (!pe_dtype_is_num(x->dtype)) return bad_dtype(ctx, "X", x, "float32, float64, int32 or int64");
    const int64_t dt = pe_ctx_int(ctx, "dtype");
    if (dt != PE_DTYPE_INT32 && dt != PE_DTYPE_INT64 && dt != -1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr dtype = %lld is not an index type (expected 2 int32 or 3 int64)",
                            (long long)dt);
    const pe_dtype odt = dt == PE_DTYPE_INT32 ? PE_DTYPE_INT32 : PE_DTYPE_INT64;
    const bool keep = pe_ctx_bool(ctx, "keepdims"), flat = pe_ctx_bool(ctx, "flatten");
    const int r = x->ndim;
    char xs[160];
    int64_t od[PE_MAX_DIMS];
    int on = 0;
    int64_t d; /* length of the reduced axis */
    if (flat) {
        d = pe_tensor_numel(x);
        if (keep) for (on = 0; on < r; on++) od[on] = 1;
    } else {
        int64_t axis = pe_ctx_int(ctx, "axis");
        if (r == 0 || axis < -r || axis >= r)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis = %lld is out of range for X '%s' of shape %s "
                                "(expected %d..%d)", (long long)axis, pe_ctx_in_name(ctx, "X", 0),
                                pe_dims_str(r, x->dims, xs, sizeof xs), -r, r - 1);
        if (axis < 0) axis += r;
        d = x->dims[axis];
        for (int i = 0; i < r; i++) {
            if (i != axis) od[on++] = x->dims[i];
            else if (keep) od[on++] = 1;
        }
    }
    if (d == 0 && (flat || pe_dims_prod(od, 0, on) > 0))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' of shape %s is empty along the reduced axis (arg_max of "
                            "nothing)", pe_ctx_in_name(ctx, "X", 0), pe_dims_str(r, x->dims, xs, sizeof xs));
    if (odt == PE_DTYPE_INT32 && d > INT32_MAX)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "axis length %lld does not fit the int32 output (use dtype 3, int64)",
                            (long long)d);
    if (on == 0) od[on++] = 1;
    return pe_infer_set_out(ctx, "Out", odt, on, od);
}

/* X [.., D] -> Out [.., k] (X's dtype), Indices [.., k] int64. */
pe_status pe_infer_top_k(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (!pe_dtype_is_num(x->dtype)) return bad_dtype(ctx, "X", x, "float32, float64, int32 or int64");
    char xs[160];
    if (x->ndim == 0)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is rank 0 (top_k needs a last axis)", pe_ctx_in_name(ctx, "X", 0));
    const int64_t k = pe_ctx_int(ctx, "k"), d = x->dims[x->ndim - 1];
    if (k < 1 || k > d)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr k = %lld is out of range for X '%s' of shape %s (expected 1..%lld, "
                            "the last dim)", (long long)k, pe_ctx_in_name(ctx, "X", 0),
                            pe_dims_str(x->ndim, x->dims, xs, sizeof xs), (long long)d);
    int64_t od[PE_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) od[i] = x->dims[i];
    od[x->ndim - 1] = k;
    PE_CHECK(pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, od));
    return pe_infer_set_out(ctx, "Indices", PE_DTYPE_INT64, x->ndim, od);
}

/* Out [N, k], Indices [N, k] int32/int64, Label [N, 1] or [N] int32/int64 ->
 * Accuracy [1] fp32, Correct [1] int32, Total [1] int32. */
pe_status pe_infer_accuracy(pe_op_ctx *ctx) {
    pe_tensor *out, *idx, *lab;
    PE_CHECK(pe_infer_need_in(ctx, "Out", &out));
    PE_CHECK(pe_infer_need_in(ctx, "Indices", &idx));
    PE_CHECK(pe_infer_need_in(ctx, "Label", &lab));
    char a[160], b[160];
    if (idx->dtype != PE_DTYPE_INT64 && idx->dtype != PE_DTYPE_INT32)
        return bad_dtype(ctx, "Indices", idx, "int64 or int32");
    if (lab->dtype != PE_DTYPE_INT64 && lab->dtype != PE_DTYPE_INT32)
        return bad_dtype(ctx, "Label", lab, "int64 or int32");
    if (idx->ndim != 2)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Indices '%s' has shape %s (expected rank 2: [N, k])",
                            pe_ctx_in_name(ctx, "Indices", 0), pe_dims_str(idx->ndim, idx->dims, a, sizeof a));
    bool same = out->ndim == 2 && out->dims[0] == idx->dims[0] && out->dims[1] == idx->dims[1];
    if (!same)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Out '%s' has shape %s but Indices '%s' has shape %s (they must match)",
                            pe_ctx_in_name(ctx, "Out", 0), pe_dims_str(out->ndim, out->dims, a, sizeof a),
                            pe_ctx_in_name(ctx, "Indices", 0), pe_dims_str(idx->ndim, idx->dims, b, sizeof b));
    bool lab_ok = (lab->ndim == 2 && lab->dims[1] == 1) || lab->ndim == 1;
    if (!lab_ok || lab->dims[0] != idx->dims[0])
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Label '%s' has shape %s (expected [%lld, 1] to match Indices '%s' %s)",
                            pe_ctx_in_name(ctx, "Label", 0), pe_dims_str(lab->ndim, lab->dims, a, sizeof a),
                            (long long)idx->dims[0], pe_ctx_in_name(ctx, "Indices", 0),
                            pe_dims_str(idx->ndim, idx->dims, b, sizeof b));
    if (idx->dims[0] > INT32_MAX)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%lld rows do not fit the int32 Total", (long long)idx->dims[0]);
    const int64_t one = 1;
    PE_CHECK(pe_infer_set_out(ctx, "Accuracy", PE_DTYPE_FP32, 1, &one));
    PE_CHECK(pe_infer_set_out(ctx, "Correct", PE_DTYPE_INT32, 1, &one));
    return pe_infer_set_out(ctx, "Total", PE_DTYPE_INT32, 1, &one);
}

/* ---- reduce_sum / mean / max / min / prod / any / all ------------------------------------------------- */

pe_status pe_reduce_flags(const pe_op_ctx *ctx, int ndim, const int64_t *x_dims, bool *red) {
    int n = 0;
    const int64_t *dims = pe_ctx_ints(ctx, "dim", &n);
    const bool all = pe_ctx_bool(ctx, "reduce_all") || n == 0;
    for (int i = 0; i < ndim; i++) red[i] = all;
    if (all) return PE_OK;
    for (int k = 0; k < n; k++) {
        int64_t d = dims[k];
        if (d < -ndim || d >= ndim) {
            char xs[160];
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr dim[%d] = %lld is out of range for X '%s' of shape %s "
                                "(expected %d..%d)", k, (long long)d, pe_ctx_in_name(ctx, "X", 0),
                                pe_dims_str(ndim, x_dims, xs, sizeof xs), -ndim, ndim - 1);
        }
        red[d < 0 ? d + ndim : d] = true;
    }
    return PE_OK;
}

void pe_reduce_view_make(int ndim, const int64_t *dims, const bool *red, pe_reduce_view *v) {
    memset(v, 0, sizeof *v);
    v->count = 1;
    v->out_numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (red[i]) v->count *= dims[i];
        else v->out_numel *= dims[i];
        if (dims[i] == 1) continue;
        if (v->n > 0 && v->red[v->n - 1] == red[i]) {
            v->dims[v->n - 1] *= dims[i];
        } else {
            v->dims[v->n] = dims[i];
            v->red[v->n] = red[i];
            v->n++;
        }
    }
    int nred = 0;
    for (int i = 0; i < v->n; i++) nred += v->red[i];
    v->simple = nred <= 1;
    v->pre = 1;
    v->d = 1;
    v->post = 1;
    if (!v->simple) return;
    int r = -1;
    for (int i = 0; i < v->n; i++)
        if (v->red[i]) r = i;
    if (r < 0) { /* nothing reduced (or only size-1 dims): a copy */
        v->pre = v->out_numel;
        return;
    }
    v->pre = pe_dims_prod(v->dims, 0, r);
    v->d = v->dims[r];
    v->post = pe_dims_prod(v->dims, r + 1, v->n);
}

/* Out's dims: X's without the reduced dims (kept as 1 with keep_dim); [1] when none is left. */
static int reduce_out_dims(const pe_tensor *x, const bool *red, bool keep, int64_t *od) {
    int on = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (!red[i]) od[on++] = x->dims[i];
        else if (keep) od[on++] = 1;
    }
    if (on == 0) od[on++] = 1;
    return on;
}

/* X [..] -> Out: X's dims reduced over attr dim (or all). */
pe_status pe_infer_reduce(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    const int id = ctx->info->id;
    if (id == PE_OP_reduce_any || id == PE_OP_reduce_all) {
        if (x->dtype != PE_DTYPE_BOOL) return bad_dtype(ctx, "X", x, "bool");
    } else if (id == PE_OP_reduce_mean ? !pe_dtype_is_float(x->dtype) : !pe_dtype_is_num(x->dtype)) {
        return bad_dtype(ctx, "X", x, id == PE_OP_reduce_mean ? "float32 or float64" : "float32, float64, int32 or int64");
    }
    bool red[PE_MAX_DIMS];
    PE_CHECK(pe_reduce_flags(ctx, x->ndim, x->dims, red));
    if (id == PE_OP_reduce_max || id == PE_OP_reduce_min) {
        pe_reduce_view v;
        pe_reduce_view_make(x->ndim, x->dims, red, &v);
        if (v.count == 0 && v.out_numel > 0) {
            char xs[160];
            return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' of shape %s is empty along the reduced dims (%s of no "
                                "elements has no value)", pe_ctx_in_name(ctx, "X", 0),
                                pe_dims_str(x->ndim, x->dims, xs, sizeof xs), ctx->info->name);
        }
    }
    int64_t od[PE_MAX_DIMS];
    int on = reduce_out_dims(x, red, pe_ctx_bool(ctx, "keep_dim"), od);
    return pe_infer_set_out(ctx, "Out", x->dtype, on, od);
}

/* ---- grad ops: shape inference ---------------------------------------------- */

static pe_status check_grad(pe_op_ctx *ctx, const char *slot, const pe_tensor *g, pe_dtype dt, int64_t numel,
                            const char *of) {
    if (g->dtype == dt && pe_tensor_numel(g) == numel) return PE_OK;
    char a[160];
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is %s %s, expected %s with %lld elements (the gradient of %s)",
                        slot, pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(g->dtype),
                        pe_dims_str(g->ndim, g->dims, a, sizeof a), pe_dtype_name(dt), (long long)numel, of);
}

/* mean_grad: X [..], Out@GRAD [1] -> X@GRAD [X] */
pe_status pe_infer_mean_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (!pe_dtype_is_float(x->dtype)) return bad_dtype(ctx, "X", x, "float32 or float64");
    PE_CHECK(check_grad(ctx, "Out@GRAD", g, x->dtype, 1, "Out [1]"));
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}

/* sum_grad: Out@GRAD [..] -> X@GRAD_k [..] for every present k */
pe_status pe_infer_sum_grad(pe_op_ctx *ctx) {
    pe_tensor *g;
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (!pe_dtype_is_float(g->dtype)) return bad_dtype(ctx, "Out@GRAD", g, "float32 or float64");
    return pe_infer_set_out(ctx, "X@GRAD", g->dtype, g->ndim, g->dims);
}

/* softmax_grad: Out [..], Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_infer_softmax_grad(pe_op_ctx *ctx) {
    pe_tensor *o, *g;
    PE_CHECK(pe_infer_need_in(ctx, "Out", &o));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (!pe_dtype_is_float(o->dtype)) return bad_dtype(ctx, "Out", o, "float32 or float64");
    int64_t axis = pe_ctx_int(ctx, "axis");
    if (o->ndim == 0 || axis < -o->ndim || axis >= o->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis = %lld is out of range for Out '%s' of rank %d",
                            (long long)axis, pe_ctx_in_name(ctx, "Out", 0), o->ndim);
    PE_CHECK(check_grad(ctx, "Out@GRAD", g, o->dtype, pe_tensor_numel(o), "Out"));
    return pe_infer_set_out(ctx, "X@GRAD", o->dtype, o->ndim, o->dims);
}

/* reduce_{sum,mean,max,min,prod}_grad: X [..], (Out [reduced],) Out@GRAD [reduced] -> X@GRAD [X] */
pe_status pe_infer_reduce_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (!pe_dtype_is_float(x->dtype)) return bad_dtype(ctx, "X", x, "float32 or float64");
    bool red[PE_MAX_DIMS];
    PE_CHECK(pe_reduce_flags(ctx, x->ndim, x->dims, red));
    int64_t od[PE_MAX_DIMS];
    int on = reduce_out_dims(x, red, pe_ctx_bool(ctx, "keep_dim"), od);
    PE_CHECK(check_grad(ctx, "Out@GRAD", g, x->dtype, pe_dims_prod(od, 0, on), "Out"));
    /* max, min and prod read the forward's Out too */
    const pe_tensor *o = pe_op_info_input_index(ctx->info, "Out") >= 0 ? pe_ctx_in(ctx, "Out") : NULL;
    if (o && (o->dtype != x->dtype || pe_tensor_numel(o) != pe_dims_prod(od, 0, on))) {
        char a[160];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Out '%s' is %s %s, expected %s with %lld elements (the forward's "
                            "result: X reduced)", pe_ctx_in_name(ctx, "Out", 0), pe_dtype_name(o->dtype),
                            pe_dims_str(o->ndim, o->dims, a, sizeof a), pe_dtype_name(x->dtype),
                            (long long)pe_dims_prod(od, 0, on));
    }
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}
