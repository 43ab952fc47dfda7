/* ops/activation.c — shape inference of the activation ops that came with
 * training: leaky_relu, gelu, log_softmax, dropout (the older activations
 * relu/sigmoid/tanh live with the elementwise family), and dropout's grad
 * maker (the others' gradients are wired in ops.def, PE_GRAD_WIRE).
 *
 * dropout's random state. The mask of element i is drawn from Philox4x32-10
 * (runtime/rng.h) with the stream key pe_rng_key(program seed, seed attr
 * when fix_seed else 0, name of Out), xor'ed with the place id times the
 * 64-bit golden ratio (so data-parallel places draw different masks and
 * place 0 draws the one-place masks), and the 128-bit counter
 * (i / 4, step): word i % 4 of that block decides element i. `step` is the
 * value of the optional int64 input Step ([1]); the op writes step + 1 to
 * the optional output StepOut, normally the same persistable var, so
 * consecutive training steps draw different masks while every run is a pure
 * function of (program seed, seed attr or var name, step, element index) —
 * the same on any thread count, and saved and restored with
 * the other persistables in a checkpoint, so a resumed run draws the masks
 * the uninterrupted run would have drawn. Without Step the step is 0 and
 * every run draws the same mask (as fix_seed does in Paddle).
 */
#include "ops/grad.h"
#include "ops/op.h"

#include <string.h>

static pe_status need_float(pe_op_ctx *ctx, const char *slot, const pe_tensor *t) {
    if (pe_dtype_is_float(t->dtype)) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s '%s' has dtype %s (expected float32 or float64)", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype));
}

static pe_status check_axis(pe_op_ctx *ctx, const char *slot, const pe_tensor *t) {
    int64_t axis = pe_ctx_int(ctx, "axis");
    if (t->ndim > 0 && axis >= -t->ndim && axis < t->ndim) return PE_OK;
    char xs[160];
    return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis = %lld is out of range for %s '%s' of shape %s (expected %d..%d)",
                        (long long)axis, slot, pe_ctx_in_name(ctx, slot, 0),
                        pe_dims_str(t->ndim, t->dims, xs, sizeof xs), -t->ndim, t->ndim - 1);
}

/* Out@GRAD must be `like`'s dtype and dims. */
static pe_status check_grad(pe_op_ctx *ctx, const pe_tensor *g, const pe_tensor *like, const char *like_slot) {
    bool ok = g->dtype == like->dtype && g->ndim == like->ndim;
    for (int i = 0; ok && i < g->ndim; i++) ok = g->dims[i] == like->dims[i];
    if (ok) return PE_OK;
    char a[160], b[160];
    return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD '%s' is %s %s, expected %s %s (like %s '%s')",
                        pe_ctx_in_name(ctx, "Out@GRAD", 0), pe_dtype_name(g->dtype),
                        pe_dims_str(g->ndim, g->dims, a, sizeof a), pe_dtype_name(like->dtype),
                        pe_dims_str(like->ndim, like->dims, b, sizeof b), like_slot, pe_ctx_in_name(ctx, like_slot, 0));
}

/* leaky_relu, gelu, log_softmax: X [..] float -> Out [..] */
pe_status pe_infer_activation(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(need_float(ctx, "X", x));
    if (ctx->info->id == PE_OP_log_softmax) PE_CHECK(check_axis(ctx, "X", x));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* leaky_relu_grad, gelu_grad: X, Out@GRAD -> X@GRAD; log_softmax_grad: Out, Out@GRAD -> X@GRAD */
pe_status pe_infer_activation_grad(pe_op_ctx *ctx) {
    const char *slot = ctx->info->id == PE_OP_log_softmax_grad ? "Out" : "X";
    pe_tensor *a, *g;
    PE_CHECK(pe_infer_need_in(ctx, slot, &a));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(need_float(ctx, slot, a));
    if (ctx->info->id == PE_OP_log_softmax_grad) PE_CHECK(check_axis(ctx, slot, a));
    PE_CHECK(check_grad(ctx, g, a, slot));
    return pe_infer_set_out(ctx, "X@GRAD", a->dtype, a->ndim, a->dims);
}

/* dropout_prob in [0, 1] and a known dropout_implementation. */
static pe_status check_dropout_attrs(pe_op_ctx *ctx) {
    double p = pe_ctx_float(ctx, "dropout_prob");
    if (!(p >= 0 && p <= 1))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr dropout_prob = %g is outside [0, 1]", p);
    const char *impl = pe_ctx_string(ctx, "dropout_implementation");
    if (strcmp(impl, "downgrade_in_infer") && strcmp(impl, "upscale_in_train"))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr dropout_implementation = '%s' (expected downgrade_in_infer or "
                            "upscale_in_train)", impl);
    return PE_OK;
}

/* X [..] float, Step? [1] int64/int32 -> Out [..], Mask? [..] uint8, StepOut? [1] */
pe_status pe_infer_dropout(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(need_float(ctx, "X", x));
    PE_CHECK(check_dropout_attrs(ctx));
    const pe_tensor *step = pe_ctx_in(ctx, "Step");
    if (step && ((step->dtype != PE_DTYPE_INT64 && step->dtype != PE_DTYPE_INT32) || pe_tensor_numel(step) != 1)) {
        char a[160];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Step '%s' is %s %s (expected one int64 or int32 element)",
                            pe_ctx_in_name(ctx, "Step", 0), pe_dtype_name(step->dtype),
                            pe_dims_str(step->ndim, step->dims, a, sizeof a));
    }
    if (!step && pe_ctx_out(ctx, "StepOut"))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "output StepOut '%s' needs the input Step (the counter it advances)",
                            pe_ctx_out_name(ctx, "StepOut", 0));
    PE_CHECK(pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims));
    PE_CHECK(pe_infer_set_out(ctx, "Mask", PE_DTYPE_UINT8, x->ndim, x->dims));
    if (step) PE_CHECK(pe_infer_set_out(ctx, "StepOut", step->dtype, step->ndim, step->dims));
    return PE_OK;
}

/* Mask? [..] uint8, Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_infer_dropout_grad(pe_op_ctx *ctx) {
    pe_tensor *g;
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(need_float(ctx, "Out@GRAD", g));
    PE_CHECK(check_dropout_attrs(ctx));
    const pe_tensor *m = pe_ctx_in(ctx, "Mask");
    if (!pe_ctx_bool(ctx, "is_test")) {
        if (!m)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "input Mask is required in training mode (is_test = false)");
        bool ok = m->dtype == PE_DTYPE_UINT8 && m->ndim == g->ndim;
        for (int i = 0; ok && i < g->ndim; i++) ok = m->dims[i] == g->dims[i];
        if (!ok) {
            char a[160], b[160];
            return pe_ctx_error(ctx, PE_ERR_INVALID, "Mask '%s' is %s %s, expected uint8 %s (like Out@GRAD '%s')",
                                pe_ctx_in_name(ctx, "Mask", 0), pe_dtype_name(m->dtype),
                                pe_dims_str(m->ndim, m->dims, a, sizeof a), pe_dims_str(g->ndim, g->dims, b, sizeof b),
                                pe_ctx_in_name(ctx, "Out@GRAD", 0));
        }
    }
    return pe_infer_set_out(ctx, "X@GRAD", g->dtype, g->ndim, g->dims);
}

/* ---- grad makers -------------------------------------------------------------- */

/* dropout_grad(Mask (training only), Out@GRAD) -> X@GRAD */
pe_status pe_grad_dropout(pe_grad_ctx *g) {
    const pe_op *f = pe_grad_fwd(g);
    const pe_attr *a = pe_op_attr(f, "is_test");
    const bool is_test = a && a->i != 0;
    const pe_slot *mask = pe_op_output(f, "Mask");
    if (!is_test && (!mask || mask->n_args != 1 || !strcmp(mask->args[0], PE_EMPTY_VAR)))
        return pe_error(PE_ERR_INVALID, "dropout (Out '%s') in training mode has no Mask output; its gradient needs "
                        "the mask (add a uint8 Mask output or set is_test)",
                        pe_op_output1(f, "Out") ? pe_op_output1(f, "Out") : "");
    PE_CHECK(pe_grad_new_op(g, "dropout_grad"));
    if (!is_test) PE_CHECK(pe_grad_fwd_output(g, "Mask", "Mask"));
    PE_CHECK(pe_grad_out_grad(g, "Out", "Out@GRAD"));
    return pe_grad_in_grad(g, "X", "X@GRAD");
}
