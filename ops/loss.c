/* ops/loss.c — shape inference of the loss ops and their grad ops:
 * softmax_with_cross_entropy, cross_entropy, square_error_cost (Paddle's
 * names, slots and attrs; their gradients are wired in ops.def, PE_GRAD_WIRE).
 *
 *   softmax_with_cross_entropy  Logits [.., D, ..] (class dim at `axis`),
 *       Label: hard int64/int32 with Logits' dims and 1 at axis (or the axis
 *       dropped), or soft (soft_label) float with Logits' dims
 *       -> Softmax [Logits], Loss [Logits' dims with 1 at axis].
 *       Rows whose hard label is ignore_index get loss 0 and gradient 0.
 *       The gradient flows to Logits from Loss only (Paddle's rule: a
 *       gradient arriving at Softmax is not propagated).
 *   cross_entropy  X probabilities [.., D], Label hard [.., 1] / [..] or
 *       soft [.., D] -> Y [.., 1]; Y = -log X[label] or -sum Label log X.
 *   square_error_cost  X [..], Y [..] (same dims) -> Out = (X - Y)^2.
 *   cos_sim  X [N, ..], Y [N or 1, ..] (the same dims after the first)
 *       -> Out [N, 1] = X.Y / (|X| |Y|) per row (Y's one row broadcast),
 *       XNorm [N, 1], YNorm [N or 1, 1]; no epsilon (a zero row gives NaN,
 *       as Paddle's). The gradient reads the norms and Out.
 *   sigmoid_cross_entropy_with_logits  X [..], Label [..] (same float dtype
 *       and dims) -> Out = max(x, 0) - x label + log(1 + exp(-|x|)), 0 where
 *       (int)label == ignore_index; normalize divides by the number of the
 *       other elements (at least 1e-5), as Paddle's.
 *   label_smooth  X [.., D], PriorDist? (D values) -> Out = (1 - epsilon) X
 *       + epsilon PriorDist (epsilon / D without one); its gradient is
 *       (1 - epsilon) Out@GRAD.
 */
#include "ops/grad.h"
#include "ops/op.h"

#include <stdio.h>

static bool dims_eq(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* Checks Label against X (class dim `axis` of X, already normalized):
 * soft: X's dtype and dims; hard: int64/int32 with X's dims and 1 at axis,
 * or X's dims without axis. */
static pe_status check_label(pe_op_ctx *ctx, const char *xslot, const pe_tensor *x, int axis, const pe_tensor *lab) {
    char a[160], b[160], c[160];
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    if (soft) {
        if (lab->dtype == x->dtype && dims_eq(lab->ndim, lab->dims, x->ndim, x->dims)) return PE_OK;
        return pe_ctx_error(ctx, PE_ERR_INVALID, "soft Label '%s' is %s %s, expected %s %s (like %s '%s')",
                            pe_ctx_in_name(ctx, "Label", 0), pe_dtype_name(lab->dtype),
                            pe_dims_str(lab->ndim, lab->dims, a, sizeof a), pe_dtype_name(x->dtype),
                            pe_dims_str(x->ndim, x->dims, b, sizeof b), xslot, pe_ctx_in_name(ctx, xslot, 0));
    }
    int64_t one[PE_MAX_DIMS], drop[PE_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        one[i] = i == axis ? 1 : x->dims[i];
        if (i != axis) drop[nd++] = x->dims[i];
    }
    bool ok = (lab->dtype == PE_DTYPE_INT64 || lab->dtype == PE_DTYPE_INT32) &&
              (dims_eq(lab->ndim, lab->dims, x->ndim, one) || (nd > 0 && dims_eq(lab->ndim, lab->dims, nd, drop)));
    if (ok) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "hard Label '%s' is %s %s, expected int64 (or int32) %s, %s '%s' %s with "
                        "dim %d set to 1 (or dropped); set soft_label for probability labels",
                        pe_ctx_in_name(ctx, "Label", 0), pe_dtype_name(lab->dtype),
                        pe_dims_str(lab->ndim, lab->dims, a, sizeof a), pe_dims_str(x->ndim, one, b, sizeof b), xslot,
                        pe_ctx_in_name(ctx, xslot, 0), pe_dims_str(x->ndim, x->dims, c, sizeof c), axis);
}

static pe_status need_float(pe_op_ctx *ctx, const char *slot, const pe_tensor *t) {
    if (pe_dtype_is_float(t->dtype) && t->ndim > 0) return PE_OK;
    char a[160];
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is %s %s (expected float32 or float64 of rank >= 1)", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, a, sizeof a));
}

/* Normalized axis attr of rank r, or an error. */
static pe_status get_axis(pe_op_ctx *ctx, const char *slot, const pe_tensor *t, int *axis) {
    int64_t a = pe_ctx_int(ctx, "axis");
    if (a < -t->ndim || a >= t->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis = %lld is out of range for %s '%s' of rank %d",
                            (long long)a, slot, pe_ctx_in_name(ctx, slot, 0), t->ndim);
    *axis = (int)(a < 0 ? a + t->ndim : a);
    return PE_OK;
}

/* Logits [..], Label -> Softmax [Logits], Loss [Logits with 1 at axis] */
pe_status pe_infer_softmax_with_cross_entropy(pe_op_ctx *ctx) {
    pe_tensor *x, *lab;
    PE_CHECK(pe_infer_need_in(ctx, "Logits", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Label", &lab));
    PE_CHECK(need_float(ctx, "Logits", x));
    int axis = 0;
    PE_CHECK(get_axis(ctx, "Logits", x, &axis));
    PE_CHECK(check_label(ctx, "Logits", x, axis, lab));
    int64_t ld[PE_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) ld[i] = i == axis ? 1 : x->dims[i];
    PE_CHECK(pe_infer_set_out(ctx, "Softmax", x->dtype, x->ndim, x->dims));
    return pe_infer_set_out(ctx, "Loss", x->dtype, x->ndim, ld);
}

/* Label, Softmax [..], Loss@GRAD [Loss] -> Logits@GRAD [Softmax] */
pe_status pe_infer_softmax_with_cross_entropy_grad(pe_op_ctx *ctx) {
    pe_tensor *sm, *lab, *g;
    PE_CHECK(pe_infer_need_in(ctx, "Softmax", &sm));
    PE_CHECK(pe_infer_need_in(ctx, "Label", &lab));
    PE_CHECK(pe_infer_need_in(ctx, "Loss@GRAD", &g));
    PE_CHECK(need_float(ctx, "Softmax", sm));
    int axis = 0;
    PE_CHECK(get_axis(ctx, "Softmax", sm, &axis));
    PE_CHECK(check_label(ctx, "Softmax", sm, axis, lab));
    if (g->dtype != sm->dtype || pe_tensor_numel(g) * sm->dims[axis] != pe_tensor_numel(sm))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Loss@GRAD '%s' (%s, %lld elements) does not match Softmax '%s'",
                            pe_ctx_in_name(ctx, "Loss@GRAD", 0), pe_dtype_name(g->dtype),
                            (long long)pe_tensor_numel(g), pe_ctx_in_name(ctx, "Softmax", 0));
    return pe_infer_set_out(ctx, "Logits@GRAD", sm->dtype, sm->ndim, sm->dims);
}

/* X [.., D], Label -> Y [.., 1] */
pe_status pe_infer_cross_entropy(pe_op_ctx *ctx) {
    pe_tensor *x, *lab;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Label", &lab));
    PE_CHECK(need_float(ctx, "X", x));
    PE_CHECK(check_label(ctx, "X", x, x->ndim - 1, lab));
    int64_t yd[PE_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) yd[i] = i == x->ndim - 1 ? 1 : x->dims[i];
    return pe_infer_set_out(ctx, "Y", x->dtype, x->ndim, yd);
}

/* X [.., D], Label, Y@GRAD [.., 1] -> X@GRAD [X] */
pe_status pe_infer_cross_entropy_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *lab, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Label", &lab));
    PE_CHECK(pe_infer_need_in(ctx, "Y@GRAD", &g));
    PE_CHECK(need_float(ctx, "X", x));
    PE_CHECK(check_label(ctx, "X", x, x->ndim - 1, lab));
    if (g->dtype != x->dtype || pe_tensor_numel(g) * x->dims[x->ndim - 1] != pe_tensor_numel(x))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Y@GRAD '%s' (%s, %lld elements) does not match X '%s'",
                            pe_ctx_in_name(ctx, "Y@GRAD", 0), pe_dtype_name(g->dtype), (long long)pe_tensor_numel(g),
                            pe_ctx_in_name(ctx, "X", 0));
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}

/* X and Y of square_error_cost(_grad): same float dtype and dims. */
static pe_status sec_inputs(pe_op_ctx *ctx, pe_tensor **x, pe_tensor **y) {
    PE_CHECK(pe_infer_need_in(ctx, "X", x));
    PE_CHECK(pe_infer_need_in(ctx, "Y", y));
    PE_CHECK(need_float(ctx, "X", *x));
    char a[160], b[160];
    if ((*y)->dtype != (*x)->dtype || !dims_eq((*x)->ndim, (*x)->dims, (*y)->ndim, (*y)->dims))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is %s %s but Y '%s' is %s %s (they must match; reshape the "
                            "label to the prediction's shape)", pe_ctx_in_name(ctx, "X", 0), pe_dtype_name((*x)->dtype),
                            pe_dims_str((*x)->ndim, (*x)->dims, a, sizeof a), pe_ctx_in_name(ctx, "Y", 0),
                            pe_dtype_name((*y)->dtype), pe_dims_str((*y)->ndim, (*y)->dims, b, sizeof b));
    return PE_OK;
}

/* X [..], Y [..] (same dims and float dtype) -> Out [..] */
pe_status pe_infer_square_error_cost(pe_op_ctx *ctx) {
    pe_tensor *x, *y;
    PE_CHECK(sec_inputs(ctx, &x, &y));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* X, Y, Out@GRAD [..] -> X@GRAD?, Y@GRAD? [..] */
pe_status pe_infer_square_error_cost_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *y, *g;
    PE_CHECK(sec_inputs(ctx, &x, &y));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (g->dtype != x->dtype || !dims_eq(g->ndim, g->dims, x->ndim, x->dims)) {
        char a[160];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD '%s' is %s %s, expected X's dtype and dims",
                            pe_ctx_in_name(ctx, "Out@GRAD", 0), pe_dtype_name(g->dtype),
                            pe_dims_str(g->ndim, g->dims, a, sizeof a));
    }
    PE_CHECK(pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims));
    return pe_infer_set_out(ctx, "Y@GRAD", y->dtype, y->ndim, y->dims);
}

/* ---- cos_sim ------------------------------------------------------------------------ */

/* Input `slot` (present) must be dtype dt with dims (nd, d): "<slot> '<v>' is <dt> <dims>, expected <what> <dims>". */
static pe_status need_meta(pe_op_ctx *ctx, const char *slot, pe_dtype dt, int nd, const int64_t *d, const char *what) {
    pe_tensor *t;
    PE_CHECK(pe_infer_need_in(ctx, slot, &t));
    if (t->dtype == dt && dims_eq(t->ndim, t->dims, nd, d)) return PE_OK;
    char a[160], b[160];
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is %s %s, expected %s %s (%s '%s')", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, a, sizeof a),
                        pe_dtype_name(dt), pe_dims_str(nd, d, b, sizeof b), what, pe_ctx_in_name(ctx, "X", 0));
}

/* X [N, ..] rank >= 2 float, Y [N or 1, ..] with X's dtype and trailing dims. */
static pe_status cos_sim_inputs(pe_op_ctx *ctx, pe_tensor **x, pe_tensor **y) {
    PE_CHECK(pe_infer_need_in(ctx, "X", x));
    PE_CHECK(pe_infer_need_in(ctx, "Y", y));
    PE_CHECK(need_float(ctx, "X", *x));
    const pe_tensor *a = *x, *b = *y;
    bool ok = a->ndim >= 2 && b->dtype == a->dtype && b->ndim == a->ndim && (b->dims[0] == a->dims[0] || b->dims[0] == 1);
    for (int i = 1; ok && i < a->ndim; i++) ok = a->dims[i] == b->dims[i];
    if (ok) return PE_OK;
    char as[160], bs[160];
    return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is %s %s and Y '%s' is %s %s (expected X of rank >= 2 and Y "
                        "of its dtype and dims, or with 1 as the first dim)", pe_ctx_in_name(ctx, "X", 0),
                        pe_dtype_name(a->dtype), pe_dims_str(a->ndim, a->dims, as, sizeof as),
                        pe_ctx_in_name(ctx, "Y", 0), pe_dtype_name(b->dtype),
                        pe_dims_str(b->ndim, b->dims, bs, sizeof bs));
}

/* X [N, ..], Y [M, ..] (M = N or 1) -> Out [N, 1], XNorm [N, 1], YNorm [M, 1] */
pe_status pe_infer_cos_sim(pe_op_ctx *ctx) {
    pe_tensor *x, *y;
    PE_CHECK(cos_sim_inputs(ctx, &x, &y));
    const int64_t nd[2] = {x->dims[0], 1}, md[2] = {y->dims[0], 1};
    PE_CHECK(pe_infer_set_out(ctx, "Out", x->dtype, 2, nd));
    PE_CHECK(pe_infer_set_out(ctx, "XNorm", x->dtype, 2, nd));
    return pe_infer_set_out(ctx, "YNorm", x->dtype, 2, md);
}

/* X, Y, Out, XNorm, YNorm, Out@GRAD [N, 1] -> X@GRAD? [X], Y@GRAD? [Y] */
pe_status pe_infer_cos_sim_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *y;
    PE_CHECK(cos_sim_inputs(ctx, &x, &y));
    const int64_t nd[2] = {x->dims[0], 1}, md[2] = {y->dims[0], 1};
    PE_CHECK(need_meta(ctx, "Out", x->dtype, 2, nd, "the forward output of X"));
    PE_CHECK(need_meta(ctx, "XNorm", x->dtype, 2, nd, "the forward output of X"));
    PE_CHECK(need_meta(ctx, "YNorm", x->dtype, 2, md, "the forward output of X"));
    PE_CHECK(need_meta(ctx, "Out@GRAD", x->dtype, 2, nd, "the forward output of X"));
    PE_CHECK(pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims));
    return pe_infer_set_out(ctx, "Y@GRAD", y->dtype, y->ndim, y->dims);
}

/* ---- sigmoid_cross_entropy_with_logits ------------------------------------------------ */

/* X [..], Label [..] (same float dtype and dims) -> Out [..] */
pe_status pe_infer_sigmoid_cross_entropy_with_logits(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(need_float(ctx, "X", x));
    PE_CHECK(need_meta(ctx, "Label", x->dtype, x->ndim, x->dims, "one probability per logit of X"));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* X, Label, Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_infer_sigmoid_cross_entropy_with_logits_grad(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(need_float(ctx, "X", x));
    PE_CHECK(need_meta(ctx, "Label", x->dtype, x->ndim, x->dims, "one probability per logit of X"));
    PE_CHECK(need_meta(ctx, "Out@GRAD", x->dtype, x->ndim, x->dims, "the forward output of X"));
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}

/* ---- label_smooth ----------------------------------------------------------------------- */

/* X [.., D], PriorDist? (D values, X's dtype) -> Out [X] */
pe_status pe_infer_label_smooth(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(need_float(ctx, "X", x));
    const pe_tensor *p = pe_ctx_in(ctx, "PriorDist");
    if (p && (p->dtype != x->dtype || pe_tensor_numel(p) != x->dims[x->ndim - 1])) {
        char a[160], b[160];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "PriorDist '%s' is %s %s, expected %lld values of %s (the last dim "
                            "of X '%s' %s)", pe_ctx_in_name(ctx, "PriorDist", 0), pe_dtype_name(p->dtype),
                            pe_dims_str(p->ndim, p->dims, a, sizeof a), (long long)x->dims[x->ndim - 1],
                            pe_dtype_name(x->dtype), pe_ctx_in_name(ctx, "X", 0),
                            pe_dims_str(x->ndim, x->dims, b, sizeof b));
    }
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_infer_label_smooth_grad(pe_op_ctx *ctx) {
    pe_tensor *g;
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(need_float(ctx, "Out@GRAD", g));
    return pe_infer_set_out(ctx, "X@GRAD", g->dtype, g->ndim, g->dims);
}
