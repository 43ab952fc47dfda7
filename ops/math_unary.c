/* ops/math_unary.c — shape inference of the elementwise math ops and the
 * later activations (exp, log, sqrt, rsqrt, square, abs, sign, floor, ceil,
 * round, pow, clip, relu6, elu, softplus, swish, hard_sigmoid, selu) and
 * their gradients, plus sign's grad maker. Kernels: ops/cpu/math_unary.c.
 *
 * Every op maps X [..] float32/float64 to Out of X's meta. The grad ops read
 * what Paddle's read (ops.def wires them): X, Out, both (elu) or neither
 * (floor/ceil/round, whose gradient is 0); one infer function checks
 * whichever of X and Out the op declares against Out@GRAD. sign's gradient
 * is Paddle's: a `scale` op by 0 of Out@GRAD (SignGradMaker).
 */
#include "ops/grad.h"
#include "ops/op.h"

static pe_status need_float(pe_op_ctx *ctx, const char *slot, const pe_tensor *t) {
    if (pe_dtype_is_float(t->dtype)) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has dtype %s (expected float32 or float64)", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype));
}

/* clip, clip_grad (both read X): min <= max, as Paddle's kernel requires. */
static pe_status check_clip(pe_op_ctx *ctx) {
    const double lo = pe_ctx_float(ctx, "min"), hi = pe_ctx_float(ctx, "max");
    if (lo <= hi) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "attr min = %g is greater than attr max = %g (expected min <= max) "
                        "for X '%s'", lo, hi, pe_ctx_in_name(ctx, "X", 0));
}

/* X [..] float -> Out [..] */
pe_status pe_infer_math_unary(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(need_float(ctx, "X", x));
    if (ctx->info->id == PE_OP_clip) PE_CHECK(check_clip(ctx));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* X? [..], Out? [..] (those the op declares), Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_infer_math_unary_grad(pe_op_ctx *ctx) {
    pe_tensor *g;
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(need_float(ctx, "Out@GRAD", g));
    static const char *const slots[] = {"X", "Out"};
    for (int i = 0; i < 2; i++) {
        if (pe_op_info_input_index(ctx->info, slots[i]) < 0) continue;
        pe_tensor *t;
        PE_CHECK(pe_infer_need_in(ctx, slots[i], &t));
        PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, t->dtype, t->ndim, t->dims));
    }
    if (ctx->info->id == PE_OP_clip_grad) PE_CHECK(check_clip(ctx));
    return pe_infer_set_out(ctx, "X@GRAD", g->dtype, g->ndim, g->dims);
}

/* ---- grad makers -------------------------------------------------------------- */

/* sign: X@GRAD = scale(Out@GRAD, 0) (Paddle's SignGradMaker). */
pe_status pe_grad_sign_op(pe_grad_ctx *g) {
    PE_CHECK(pe_grad_new_op(g, "scale"));
    PE_CHECK(pe_op_set_float(pe_grad_cur_op(g), "scale", 0.0));
    PE_CHECK(pe_grad_out_grad(g, "Out", "X"));
    return pe_grad_in_grad(g, "X", "Out");
}
