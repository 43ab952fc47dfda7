/* ops/fused.c — shape inference of the fused ops the fusion passes emit
 * (passes/fuse_*.c): fc / fc_grad, fused_elemwise_activation(_grad),
 * merged_sgd / merged_momentum / merged_adam (also merged_adamw's and
 * merged_lamb's) / merged_adagrad / merged_rmsprop / merged_adamax. Kernels: ops/cpu/fused_fc.c,
 * ops/cpu/fused_elemwise.c, ops/cpu/fused_optimizer.c.
 *
 * Slots and attrs are Paddle's where Paddle has the op (fc,
 * fused_elemwise_activation, merged_momentum, merged_adam); fc_grad and
 * merged_sgd are PE's, named in the same style. Every check here is one the
 * kernels then rely on, and every message names the op, the slot, the var
 * and the shapes involved.
 */
#include "ops/elementwise.h"
#include "ops/op.h"

#include <math.h>
#include <string.h>

static pe_status out_like(pe_op_ctx *ctx, const char *oslot, int k, const pe_tensor *like) {
    pe_tensor *o = pe_ctx_out_at(ctx, oslot, k);
    return o && o != like ? pe_infer_set_meta(ctx, o, like->dtype, like->ndim, like->dims) : PE_OK;
}

static bool same_dims(int an, const int64_t *a, int bn, const int64_t *b) {
    if (an != bn) return false;
    for (int i = 0; i < an; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* Input `slot` (arg k) exists and is float of dtype dt (dt < 0: any float). */
static pe_status need_float(pe_op_ctx *ctx, const char *slot, int k, int dt, const pe_tensor **out) {
    const pe_tensor *t = pe_ctx_in_at(ctx, slot, k);
    if (!t) return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s[%d] must be given", slot, k);
    if (!pe_dtype_is_float(t->dtype) || (dt >= 0 && (int)t->dtype != dt))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s[%d] '%s' has dtype %s; %s expected", slot, k,
                            pe_ctx_in_name(ctx, slot, k), pe_dtype_name(t->dtype),
                            dt >= 0 ? pe_dtype_name((pe_dtype)dt) : "float32 or float64");
    *out = t;
    return PE_OK;
}

/* ---- fc --------------------------------------------------------------------
 * input: [M..., K...] (in_num_col_dims leading dims are M), w: [K, N],
 * bias: [N] or [1, N] -> out: [M..., N] = act(input W + bias) */

static bool fc_act_ok(const char *a) {
    return !*a || !strcmp(a, "identity") || !strcmp(a, "relu") || !strcmp(a, "sigmoid") || !strcmp(a, "tanh");
}

/* Checks Input, W, Bias and the attrs; fills Out's dims. */
static pe_status fc_plan(pe_op_ctx *ctx, int *on, int64_t *od) {
    const pe_tensor *x = NULL, *w = NULL;
    PE_CHECK(need_float(ctx, "Input", 0, -1, &x));
    PE_CHECK(need_float(ctx, "W", 0, (int)x->dtype, &w));
    int64_t ncd = pe_ctx_int(ctx, "in_num_col_dims");
    const char *act = pe_ctx_string(ctx, "activation_type");
    char xs[128], ws[128];
    pe_dims_str(x->ndim, x->dims, xs, sizeof xs);
    pe_dims_str(w->ndim, w->dims, ws, sizeof ws);
    if (!fc_act_ok(act))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "activation_type '%s' is not supported (\"\", identity, relu, "
                            "sigmoid, tanh)", act);
    if (ncd < 1 || ncd >= x->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "in_num_col_dims = %lld must be in [1, rank(Input) - 1] for Input "
                            "'%s' %s", (long long)ncd, pe_ctx_in_name(ctx, "Input", 0), xs);
    if (w->ndim != 2 || pe_dims_prod(x->dims, (int)ncd, x->ndim) != w->dims[0])
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Input '%s' %s flattens to [%lld, %lld] (in_num_col_dims %lld); W "
                            "'%s' is %s, [%lld, N] expected", pe_ctx_in_name(ctx, "Input", 0), xs,
                            (long long)pe_dims_prod(x->dims, 0, (int)ncd),
                            (long long)pe_dims_prod(x->dims, (int)ncd, x->ndim), (long long)ncd,
                            pe_ctx_in_name(ctx, "W", 0), ws,
                            (long long)pe_dims_prod(x->dims, (int)ncd, x->ndim));
    const pe_tensor *b = pe_ctx_in(ctx, "Bias");
    if (b) {
        const pe_tensor *bt;
        PE_CHECK(need_float(ctx, "Bias", 0, (int)x->dtype, &bt));
        bool ok = (b->ndim == 1 && b->dims[0] == w->dims[1]) ||
                  (b->ndim == 2 && b->dims[0] == 1 && b->dims[1] == w->dims[1]);
        if (!ok) {
            char bs[128];
            return pe_ctx_error(ctx, PE_ERR_INVALID, "Bias '%s' is %s; [%lld] or [1, %lld] expected (W '%s' %s)",
                                pe_ctx_in_name(ctx, "Bias", 0), pe_dims_str(b->ndim, b->dims, bs, sizeof bs),
                                (long long)w->dims[1], (long long)w->dims[1], pe_ctx_in_name(ctx, "W", 0), ws);
        }
    }
    *on = 0;
    for (int i = 0; i < ncd; i++) od[(*on)++] = x->dims[i];
    od[(*on)++] = w->dims[1];
    return PE_OK;
}

pe_status pe_infer_fc(pe_op_ctx *ctx) {
    int on;
    int64_t od[PE_MAX_DIMS];
    PE_CHECK(fc_plan(ctx, &on, od));
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!out) return pe_ctx_error(ctx, PE_ERR_INVALID, "output Out must be given");
    return pe_infer_set_meta(ctx, out, pe_ctx_in(ctx, "Input")->dtype, on, od);
}

/* input, w, bias as fc; out, out@grad: fc's Out
 * -> input@grad, w@grad, bias@grad: their inputs' dims; preact@grad: Out's */
pe_status pe_infer_fc_grad(pe_op_ctx *ctx) {
    int on;
    int64_t od[PE_MAX_DIMS];
    PE_CHECK(fc_plan(ctx, &on, od));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *g;
    PE_CHECK(need_float(ctx, "Out@GRAD", 0, (int)x->dtype, &g));
    char gs[128], es[128];
    if (!same_dims(g->ndim, g->dims, on, od))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD '%s' is %s but fc's Out is %s",
                            pe_ctx_in_name(ctx, "Out@GRAD", 0), pe_dims_str(g->ndim, g->dims, gs, sizeof gs),
                            pe_dims_str(on, od, es, sizeof es));
    const char *act = pe_ctx_string(ctx, "activation_type");
    bool has_act = *act && strcmp(act, "identity");
    if (has_act) {
        const pe_tensor *o;
        if (!pe_ctx_in(ctx, "Out"))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "activation_type '%s' needs input Out (the gradient is taken "
                                "from the activation's output)", act);
        PE_CHECK(need_float(ctx, "Out", 0, (int)x->dtype, &o));
        if (!same_dims(o->ndim, o->dims, on, od))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "Out '%s' is %s; %s expected", pe_ctx_in_name(ctx, "Out", 0),
                                pe_dims_str(o->ndim, o->dims, gs, sizeof gs), pe_dims_str(on, od, es, sizeof es));
        if (!pe_ctx_out(ctx, "PreAct@GRAD") && (pe_ctx_out(ctx, "Input@GRAD") || pe_ctx_out(ctx, "W@GRAD")))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "activation_type '%s' with Input@GRAD or W@GRAD needs output "
                                "PreAct@GRAD (the buffer of the pre-activation gradient)", act);
    }
    if (pe_ctx_out(ctx, "Bias@GRAD") && !pe_ctx_in(ctx, "Bias"))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Bias@GRAD is requested but input Bias is not given");
    PE_CHECK(out_like(ctx, "Input@GRAD", 0, x));
    PE_CHECK(out_like(ctx, "W@GRAD", 0, pe_ctx_in(ctx, "W")));
    if (pe_ctx_in(ctx, "Bias")) PE_CHECK(out_like(ctx, "Bias@GRAD", 0, pe_ctx_in(ctx, "Bias")));
    pe_tensor *pre = pe_ctx_out(ctx, "PreAct@GRAD");
    return pre ? pe_infer_set_meta(ctx, pre, x->dtype, on, od) : PE_OK;
}

/* ---- fused_elemwise_activation ------------------------------------------
 * x, y: broadcastable (elementwise_add's rules and axis)
 * -> out = act(x + y), intermediate_out = x + y: [broadcast shape] */

/* functor_list must be [relu|sigmoid|tanh, elementwise_add]. */
static pe_status check_functors(const pe_op_ctx *ctx) {
    int n = 0;
    const char *const *f = pe_ctx_strings(ctx, "functor_list", &n);
    bool ok = n == 2 && !strcmp(f[1], "elementwise_add") &&
              (!strcmp(f[0], "relu") || !strcmp(f[0], "sigmoid") || !strcmp(f[0], "tanh"));
    if (ok) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "functor_list [%s%s%s] is not supported: [relu|sigmoid|tanh, "
                        "elementwise_add] (act(X + Y)) is", n > 0 ? f[0] : "", n > 1 ? ", " : "", n > 1 ? f[1] : "");
}

static pe_status fea_plan(pe_op_ctx *ctx, pe_bcast_plan *pl) {
    PE_CHECK(check_functors(ctx));
    const pe_tensor *x = NULL, *y = NULL;
    PE_CHECK(need_float(ctx, "X", 0, -1, &x));
    PE_CHECK(need_float(ctx, "Y", 0, (int)x->dtype, &y));
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s', Y '%s': %s", pe_ctx_in_name(ctx, "X", 0),
                            pe_ctx_in_name(ctx, "Y", 0), pe_last_error());
    return PE_OK;
}

pe_status pe_infer_fused_elemwise_activation(pe_op_ctx *ctx) {
    pe_bcast_plan pl;
    PE_CHECK(fea_plan(ctx, &pl));
    pe_dtype dt = pe_ctx_in(ctx, "X")->dtype;
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *mid = pe_ctx_out(ctx, "IntermediateOut");
    if (!out) return pe_ctx_error(ctx, PE_ERR_INVALID, "output Out must be given");
    PE_CHECK(pe_infer_set_meta(ctx, out, dt, pl.out_ndim, pl.out_dims));
    return mid ? pe_infer_set_meta(ctx, mid, dt, pl.out_ndim, pl.out_dims) : PE_OK;
}

/* x, y, out, out@grad -> x@grad: x's dims, y@grad: y's dims,
 * intermediate_out@grad: out's dims */
pe_status pe_infer_fused_elemwise_activation_grad(pe_op_ctx *ctx) {
    pe_bcast_plan pl;
    PE_CHECK(fea_plan(ctx, &pl));
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *o, *g;
    PE_CHECK(need_float(ctx, "Out", 0, (int)x->dtype, &o));
    PE_CHECK(need_float(ctx, "Out@GRAD", 0, (int)x->dtype, &g));
    char a[128], b[128], c[128];
    if (!same_dims(o->ndim, o->dims, pl.out_ndim, pl.out_dims) || !same_dims(g->ndim, g->dims, o->ndim, o->dims))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Out '%s' is %s and Out@GRAD '%s' is %s; X + Y is %s",
                            pe_ctx_in_name(ctx, "Out", 0), pe_dims_str(o->ndim, o->dims, a, sizeof a),
                            pe_ctx_in_name(ctx, "Out@GRAD", 0), pe_dims_str(g->ndim, g->dims, b, sizeof b),
                            pe_dims_str(pl.out_ndim, pl.out_dims, c, sizeof c));
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    pe_tensor *dm = pe_ctx_out(ctx, "IntermediateOut@GRAD");
    /* the pre-activation gradient needs a buffer of Out's size: one of these */
    bool buffer = dm || (dx && pe_tensor_numel(x) == pl.numel) || (dy && pe_tensor_numel(y) == pl.numel);
    if ((dx || dy) && !buffer)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Y are both broadcast: output IntermediateOut@GRAD must be "
                            "given (the buffer of the pre-activation gradient)");
    PE_CHECK(out_like(ctx, "X@GRAD", 0, x));
    PE_CHECK(out_like(ctx, "Y@GRAD", 0, y));
    return dm ? pe_infer_set_meta(ctx, dm, x->dtype, pl.out_ndim, pl.out_dims) : PE_OK;
}

/* ---- merged optimizers ----------------------------------------------------
 * k = 0..n-1: param_k, grad_k (, velocity_k | moment1_k, moment2_k): [d_k...];
 * lr: one [1] var or one per param; beta{1,2}pow_k: [1]
 * -> every *Out_k: the meta of its input */

static pe_status check_count(pe_op_ctx *ctx, const char *slot, int n, bool in, bool allow_one, bool allow_zero) {
    int c = in ? pe_ctx_n_in(ctx, slot) : pe_ctx_n_out(ctx, slot);
    if (c == n || (allow_one && c == 1) || (allow_zero && c == 0)) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s has %d vars but Param has %d; one per Param%s expected", slot, c, n,
                        allow_one ? " (or a single shared one)" : allow_zero ? " (or none)" : "");
}

static pe_status check_scalar_at(pe_op_ctx *ctx, const char *slot, int k) {
    const pe_tensor *t = NULL;
    PE_CHECK(need_float(ctx, slot, k, -1, &t));
    if (pe_tensor_numel(t) != 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s[%d] '%s' has %lld elements; a float scalar [1] expected", slot, k,
                            pe_ctx_in_name(ctx, slot, k), (long long)pe_tensor_numel(t));
    return PE_OK;
}

/* `slots` (NULL-terminated) must each have n vars like Param_k; outputs
 * `outs` get their input's meta. */
static pe_status merged_infer(pe_op_ctx *ctx, const char *const *likes, const char *const *outs,
                              const char *const *out_src, const char *const *scalars, const char *const *opt_outs,
                              const char *const *opt_src) {
    int n = pe_ctx_n_in(ctx, "Param");
    for (int s = 0; likes[s]; s++) PE_CHECK(check_count(ctx, likes[s], n, true, false, false));
    PE_CHECK(check_count(ctx, "LearningRate", n, true, true, false));
    for (int s = 0; scalars && scalars[s]; s++) PE_CHECK(check_count(ctx, scalars[s], n, true, false, false));
    for (int s = 0; outs[s]; s++) PE_CHECK(check_count(ctx, outs[s], n, false, false, false));
    for (int s = 0; opt_outs && opt_outs[s]; s++) PE_CHECK(check_count(ctx, opt_outs[s], n, false, false, true));
    pe_dtype dt = PE_DTYPE_FP32;
    for (int k = 0; k < n; k++) {
        const pe_tensor *p;
        PE_CHECK(need_float(ctx, "Param", k, k ? (int)dt : -1, &p));
        dt = p->dtype;
        for (int s = 0; likes[s]; s++) {
            const pe_tensor *t;
            PE_CHECK(need_float(ctx, likes[s], k, (int)p->dtype, &t));
            if (!same_dims(t->ndim, t->dims, p->ndim, p->dims)) {
                char a[128], b[128];
                return pe_ctx_error(ctx, PE_ERR_INVALID, "%s[%d] '%s' is %s but Param[%d] '%s' is %s; they must match",
                                    likes[s], k, pe_ctx_in_name(ctx, likes[s], k), pe_dims_str(t->ndim, t->dims, a, sizeof a),
                                    k, pe_ctx_in_name(ctx, "Param", k), pe_dims_str(p->ndim, p->dims, b, sizeof b));
            }
        }
        for (int s = 0; scalars && scalars[s]; s++) PE_CHECK(check_scalar_at(ctx, scalars[s], k));
        for (int s = 0; outs[s]; s++) PE_CHECK(out_like(ctx, outs[s], k, pe_ctx_in_at(ctx, out_src[s], k)));
        for (int s = 0; opt_outs && opt_outs[s]; s++)
            if (pe_ctx_n_out(ctx, opt_outs[s])) PE_CHECK(out_like(ctx, opt_outs[s], k, pe_ctx_in_at(ctx, opt_src[s], k)));
    }
    for (int k = 0; k < pe_ctx_n_in(ctx, "LearningRate"); k++) PE_CHECK(check_scalar_at(ctx, "LearningRate", k));
    return PE_OK;
}

pe_status pe_infer_merged_sgd(pe_op_ctx *ctx) {
    static const char *const likes[] = {"Grad", NULL}, *const outs[] = {"ParamOut", NULL}, *const src[] = {"Param"};
    return merged_infer(ctx, likes, outs, src, NULL, NULL, NULL);
}

pe_status pe_infer_merged_momentum(pe_op_ctx *ctx) {
    static const char *const likes[] = {"Grad", "Velocity", NULL};
    static const char *const outs[] = {"ParamOut", "VelocityOut", NULL}, *const src[] = {"Param", "Velocity"};
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    return merged_infer(ctx, likes, outs, src, NULL, NULL, NULL);
}

pe_status pe_infer_merged_adam(pe_op_ctx *ctx) {
    static const char *const likes[] = {"Grad", "Moment1", "Moment2", NULL};
    static const char *const outs[] = {"ParamOut", "Moment1Out", "Moment2Out", NULL};
    static const char *const src[] = {"Param", "Moment1", "Moment2"};
    static const char *const scalars[] = {"Beta1Pow", "Beta2Pow", NULL};
    static const char *const opt_outs[] = {"Beta1PowOut", "Beta2PowOut", NULL}, *const opt_src[] = {"Beta1Pow", "Beta2Pow"};
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    return merged_infer(ctx, likes, outs, src, scalars, opt_outs, opt_src);
}

pe_status pe_infer_merged_adagrad(pe_op_ctx *ctx) {
    static const char *const likes[] = {"Grad", "Moment", NULL};
    static const char *const outs[] = {"ParamOut", "MomentOut", NULL}, *const src[] = {"Param", "Moment"};
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    return merged_infer(ctx, likes, outs, src, NULL, NULL, NULL);
}

/* MeanGrad / MeanGradOut: one per Param, or none (centered = false) */
pe_status pe_infer_merged_rmsprop(pe_op_ctx *ctx) {
    static const char *const likes[] = {"Grad", "MeanSquare", "Moment", NULL};
    static const char *const likes_c[] = {"Grad", "MeanSquare", "Moment", "MeanGrad", NULL};
    static const char *const outs[] = {"ParamOut", "MomentOut", "MeanSquareOut", NULL};
    static const char *const outs_c[] = {"ParamOut", "MomentOut", "MeanSquareOut", "MeanGradOut", NULL};
    static const char *const src[] = {"Param", "Moment", "MeanSquare", "MeanGrad"};
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    const bool mg = pe_ctx_n_in(ctx, "MeanGrad") > 0;
    if (pe_ctx_bool(ctx, "centered") && !mg)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "centered = true needs one MeanGrad and MeanGradOut per Param");
    if (mg && pe_ctx_n_out(ctx, "MeanGradOut") == 0)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "MeanGrad is given but MeanGradOut is not; give both or neither");
    return merged_infer(ctx, mg ? likes_c : likes, mg ? outs_c : outs, src, NULL, NULL, NULL);
}

pe_status pe_infer_merged_adamax(pe_op_ctx *ctx) {
    static const char *const likes[] = {"Grad", "Moment", "InfNorm", NULL};
    static const char *const outs[] = {"ParamOut", "MomentOut", "InfNormOut", NULL};
    static const char *const src[] = {"Param", "Moment", "InfNorm"};
    static const char *const scalars[] = {"Beta1Pow", NULL};
    static const char *const opt_outs[] = {"Beta1PowOut", NULL}, *const opt_src[] = {"Beta1Pow"};
    PE_CHECK(pe_optimizer_check_attrs(ctx));
    return merged_infer(ctx, likes, outs, src, scalars, opt_outs, opt_src);
}
