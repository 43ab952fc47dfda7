/* ops/optimizer.c — shape inference of the optimizer ops: sgd, momentum,
 * adam (also adamw's and lamb's: the same slots), adagrad, rmsprop, adamax
 * and clip_by_global_norm (kernels in ops/cpu/optimizer.c; the pass
 * that emits them is passes/optimizer.c).
 *
 * Paddle's slots and meaning. Every output normally aliases its input
 * (ParamOut = Param, VelocityOut = Velocity, ...): the optimizer updates
 * persistable state in place, so an output gets exactly its input's meta.
 * Checked here, so the kernels trust the metas: Param is fp32 or fp64; Grad
 * and every accumulator (Velocity, Moment*, MeanSquare, MeanGrad, InfNorm) have Param's dtype and
 * dims; LearningRate, Beta1Pow and Beta2Pow are fp32/fp64 with one element
 * (their dtype may differ from Param's: the kernels read them as doubles).
 * Messages name the op, the slot, the var and both shapes.
 */
#include "ops/op.h"

#include <math.h>
#include <string.h>

static pe_status set_meta(pe_op_ctx *ctx, pe_tensor *t, const pe_tensor *like) {
    return pe_infer_set_meta(ctx, t, like->dtype, like->ndim, like->dims);
}

static bool same_dims(const pe_tensor *a, const pe_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

/* Input `slot` must be given. */
static pe_status need(pe_op_ctx *ctx, const char *slot, const pe_tensor **t) {
    *t = pe_ctx_in(ctx, slot);
    if (!*t) return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s must be given", slot);
    return PE_OK;
}

/* Param: fp32/fp64 tensor. */
static pe_status check_param(pe_op_ctx *ctx, const pe_tensor **param) {
    PE_CHECK(need(ctx, "Param", param));
    if (!pe_dtype_is_float((*param)->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Param '%s' has dtype %s; optimizers update float32/float64 params",
                            pe_ctx_in_name(ctx, "Param", 0), pe_dtype_name((*param)->dtype));
    return PE_OK;
}

/* Input `slot` has Param's dtype and dims. */
static pe_status check_like_param(pe_op_ctx *ctx, const char *slot, const pe_tensor *param) {
    const pe_tensor *t;
    PE_CHECK(need(ctx, slot, &t));
    if (t->dtype != param->dtype || !same_dims(t, param)) {
        char a[96], b[96];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is %s %s but Param '%s' is %s %s; they must match", slot,
                            pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, a, sizeof a),
                            pe_ctx_in_name(ctx, "Param", 0), pe_dtype_name(param->dtype),
                            pe_dims_str(param->ndim, param->dims, b, sizeof b));
    }
    return PE_OK;
}

/* Input `slot` is a float scalar (one element, any rank). */
static pe_status check_scalar(pe_op_ctx *ctx, const char *slot) {
    const pe_tensor *t;
    PE_CHECK(need(ctx, slot, &t));
    if (!pe_dtype_is_float(t->dtype) || pe_tensor_numel(t) != 1) {
        char a[96];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is %s %s; it must be a float32/float64 tensor of 1 element",
                            slot, pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype),
                            pe_dims_str(t->ndim, t->dims, a, sizeof a));
    }
    return PE_OK;
}

/* Output `oslot` (if given) gets the meta of input `islot`. */
static pe_status out_like(pe_op_ctx *ctx, const char *oslot, const char *islot) {
    pe_tensor *o = pe_ctx_out(ctx, oslot);
    return o ? set_meta(ctx, o, pe_ctx_in(ctx, islot)) : PE_OK;
}

/* param, grad: [d...]; lr: [1] -> param_out: [d...] */
pe_status pe_infer_sgd(pe_op_ctx *ctx) {
    const pe_tensor *param;
    PE_CHECK(check_param(ctx, &param));
    PE_CHECK(check_like_param(ctx, "Grad", param));
    PE_CHECK(check_scalar(ctx, "LearningRate"));
    return out_like(ctx, "ParamOut", "Param");
}

/* The hyperparameter attrs an optimizer op (or its merged form) carries,
 * checked alike for both: mu, decay and momentum finite, beta1 / beta2 in
 * [0, 1), epsilon finite and >= 0 — whichever of them the op has. */
pe_status pe_optimizer_check_attrs(const pe_op_ctx *ctx) {
    const pe_op_info *info = ctx->info;
    if (pe_op_info_attr(info, "mu")) {
        double mu = pe_ctx_float(ctx, "mu");
        if (!isfinite(mu)) return pe_ctx_error(ctx, PE_ERR_INVALID, "mu = %g; it must be finite", mu);
    }
    if (pe_op_info_attr(info, "beta1")) {
        double b1 = pe_ctx_float(ctx, "beta1"), b2 = pe_ctx_float(ctx, "beta2");
        if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "beta1 = %g, beta2 = %g; each must be in [0, 1)", b1, b2);
    }
    if (pe_op_info_attr(info, "epsilon")) {
        double eps = pe_ctx_float(ctx, "epsilon");
        if (!(eps >= 0) || !isfinite(eps))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "epsilon = %g; it must be finite and >= 0", eps);
    }
    if (pe_op_info_attr(info, "decay")) {
        double rho = pe_ctx_float(ctx, "decay"), mu = pe_ctx_float(ctx, "momentum");
        if (!isfinite(rho) || !isfinite(mu))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "decay = %g, momentum = %g; they must be finite", rho, mu);
    }
    return PE_OK;
}

/* param, grad, velocity: [d...]; lr: [1] -> param_out, velocity_out: [d...] */
pe_status pe_infer_momentum(pe_op_ctx *ctx) {
    const pe_tensor *param;
    PE_CHECK(check_param(ctx, &param));
    PE_CHECK(check_like_param(ctx, "Grad", param));
    PE_CHECK(check_like_param(ctx, "Velocity", param));
    PE_CHECK(check_scalar(ctx, "LearningRate"));
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    PE_CHECK(out_like(ctx, "ParamOut", "Param"));
    return out_like(ctx, "VelocityOut", "Velocity");
}

/* param, grad, moment1, moment2: [d...]; lr, beta1_pow, beta2_pow: [1]
 * -> param_out, moment1_out, moment2_out: [d...]; beta{1,2}_pow_out: [1] */
pe_status pe_infer_adam(pe_op_ctx *ctx) {
    const pe_tensor *param;
    PE_CHECK(check_param(ctx, &param));
    PE_CHECK(check_like_param(ctx, "Grad", param));
    PE_CHECK(check_like_param(ctx, "Moment1", param));
    PE_CHECK(check_like_param(ctx, "Moment2", param));
    PE_CHECK(check_scalar(ctx, "LearningRate"));
    PE_CHECK(check_scalar(ctx, "Beta1Pow"));
    PE_CHECK(check_scalar(ctx, "Beta2Pow"));
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    PE_CHECK(out_like(ctx, "ParamOut", "Param"));
    PE_CHECK(out_like(ctx, "Moment1Out", "Moment1"));
    PE_CHECK(out_like(ctx, "Moment2Out", "Moment2"));
    PE_CHECK(out_like(ctx, "Beta1PowOut", "Beta1Pow"));
    return out_like(ctx, "Beta2PowOut", "Beta2Pow");
}

/* x_k: [d_k...] (k = 0..n-1) -> out_k: [d_k...] */
pe_status pe_infer_clip_by_global_norm(pe_op_ctx *ctx) {
    int n = pe_ctx_n_in(ctx, "X");
    if (pe_ctx_n_out(ctx, "Out") != n)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%d inputs X but %d outputs Out; one Out per X", n,
                            pe_ctx_n_out(ctx, "Out"));
    double m = pe_ctx_float(ctx, "max_global_norm");
    if (!(m > 0) || !isfinite(m))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "max_global_norm = %g; it must be finite and > 0", m);
    for (int k = 0; k < n; k++) {
        const pe_tensor *x = pe_ctx_in_at(ctx, "X", k);
        pe_tensor *o = pe_ctx_out_at(ctx, "Out", k);
        if (!x || !o)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "X[%d] '%s' / Out[%d] '%s': every pair must name a var", k,
                                pe_ctx_in_name(ctx, "X", k), k, pe_ctx_out_name(ctx, "Out", k));
        if (!pe_dtype_is_float(x->dtype))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "X[%d] '%s' has dtype %s; gradients must be float32/float64", k,
                                pe_ctx_in_name(ctx, "X", k), pe_dtype_name(x->dtype));
        for (int j = 0; j < n; j++)
            if (j != k && pe_ctx_in_at(ctx, "X", j) == o)
                return pe_ctx_error(ctx, PE_ERR_INVALID, "Out[%d] '%s' is X[%d]; Out[k] may alias only X[k]", k,
                                    pe_ctx_out_name(ctx, "Out", k), j);
        if (o != x) PE_CHECK(set_meta(ctx, o, x));
    }
    return PE_OK;
}

/* param, grad, moment: [d...]; lr: [1] -> param_out, moment_out: [d...] */
pe_status pe_infer_adagrad(pe_op_ctx *ctx) {
    const pe_tensor *param;
    PE_CHECK(check_param(ctx, &param));
    PE_CHECK(check_like_param(ctx, "Grad", param));
    PE_CHECK(check_like_param(ctx, "Moment", param));
    PE_CHECK(check_scalar(ctx, "LearningRate"));
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    PE_CHECK(out_like(ctx, "ParamOut", "Param"));
    return out_like(ctx, "MomentOut", "Moment");
}

/* param, grad, mean_square, moment (, mean_grad): [d...]; lr: [1]
 * -> param_out, moment_out, mean_square_out (, mean_grad_out): [d...] */
pe_status pe_infer_rmsprop(pe_op_ctx *ctx) {
    const pe_tensor *param;
    PE_CHECK(check_param(ctx, &param));
    PE_CHECK(check_like_param(ctx, "Grad", param));
    PE_CHECK(check_like_param(ctx, "MeanSquare", param));
    PE_CHECK(check_like_param(ctx, "Moment", param));
    PE_CHECK(check_scalar(ctx, "LearningRate"));
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    if (pe_ctx_bool(ctx, "centered")) {
        if (!pe_ctx_in(ctx, "MeanGrad") || !pe_ctx_out(ctx, "MeanGradOut"))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "centered = true needs input MeanGrad and output MeanGradOut "
                                "(MeanGrad '%s', MeanGradOut '%s')", pe_ctx_in_name(ctx, "MeanGrad", 0),
                                pe_ctx_out_name(ctx, "MeanGradOut", 0));
    }
    if (pe_ctx_in(ctx, "MeanGrad")) PE_CHECK(check_like_param(ctx, "MeanGrad", param));
    PE_CHECK(out_like(ctx, "ParamOut", "Param"));
    PE_CHECK(out_like(ctx, "MomentOut", "Moment"));
    PE_CHECK(out_like(ctx, "MeanSquareOut", "MeanSquare"));
    return pe_ctx_in(ctx, "MeanGrad") ? out_like(ctx, "MeanGradOut", "MeanGrad") : PE_OK;
}

/* param, grad, moment, inf_norm: [d...]; lr, beta1_pow: [1]
 * -> param_out, moment_out, inf_norm_out: [d...]; beta1_pow_out: [1] */
pe_status pe_infer_adamax(pe_op_ctx *ctx) {
    const pe_tensor *param;
    PE_CHECK(check_param(ctx, &param));
    PE_CHECK(check_like_param(ctx, "Grad", param));
    PE_CHECK(check_like_param(ctx, "Moment", param));
    PE_CHECK(check_like_param(ctx, "InfNorm", param));
    PE_CHECK(check_scalar(ctx, "LearningRate"));
    PE_CHECK(check_scalar(ctx, "Beta1Pow"));
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    PE_CHECK(out_like(ctx, "ParamOut", "Param"));
    PE_CHECK(out_like(ctx, "MomentOut", "Moment"));
    PE_CHECK(out_like(ctx, "InfNormOut", "InfNorm"));
    return out_like(ctx, "Beta1PowOut", "Beta1Pow");
}
