/* ops/norm.c — shape inference of group_norm, instance_norm and their grads
 * (kernels: ops/cpu/norm.c).
 *
 * X: [N, C, ...] (rank >= 2, NCHW), Scale? and Bias?: [C]. group_norm
 * normalises each of the `groups` groups of C / groups channels of every
 * sample (Mean, Variance: [N, groups], the biased variance); instance_norm
 * each channel of every sample (SavedMean, SavedVariance: [N * C], the
 * latter 1 / sqrt(var + epsilon), as Paddle saves them).
 */
#include "ops/norm.h"

#include <string.h>

pe_status pe_gnorm_geom_get(const pe_op_ctx *ctx, pe_gnorm_geom *g) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const char *xn = pe_ctx_in_name(ctx, "X", 0);
    char xs[128], ts[128];
    pe_dims_str(x->ndim, x->dims, xs, sizeof xs);
    memset(g, 0, sizeof *g);
    const int id = ctx->info->id;
    g->instance = id == PE_OP_instance_norm || id == PE_OP_instance_norm_grad;
    if (!g->instance) {
        const char *layout = pe_ctx_string(ctx, "data_layout");
        if (layout[0] && strcmp(layout, "NCHW") && strcmp(layout, "AnyLayout"))
            return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "data_layout '%s' is not supported yet (only NCHW)", layout);
    }
    if (x->ndim < 2)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' must have rank >= 2 ([N, C, ...]), got %s", xn, xs);
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; float32 or float64 expected", xn,
                            pe_dtype_name(x->dtype));
    g->n = x->dims[0];
    g->c = x->dims[1];
    g->s = pe_dims_prod(x->dims, 2, x->ndim);
    g->eps = pe_ctx_float(ctx, "epsilon");
    if (!(g->eps >= 0)) return pe_ctx_error(ctx, PE_ERR_INVALID, "attr epsilon must be >= 0, got %g", g->eps);
    g->groups = g->instance ? g->c : pe_ctx_int(ctx, "groups");
    if (!g->instance && (g->groups < 1 || g->c % g->groups))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr groups = %lld must be >= 1 and divide X '%s' %s's C = %lld",
                            (long long)g->groups, xn, xs, (long long)g->c);
    static const char *const params[2] = {"Scale", "Bias"};
    for (int i = 0; i < 2; i++) {
        const pe_tensor *t = pe_ctx_in(ctx, params[i]);
        if (!t) continue;
        if (pe_tensor_numel(t) != g->c || t->ndim != 1 || t->dtype != x->dtype) {
            pe_dims_str(t->ndim, t->dims, ts, sizeof ts);
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "%s '%s' is %s %s; X '%s' %s needs a 1-D [%lld] tensor of dtype %s (one per channel)",
                                params[i], pe_ctx_in_name(ctx, params[i], 0), pe_dtype_name(t->dtype), ts, xn, xs,
                                (long long)g->c, pe_dtype_name(x->dtype));
        }
    }
    return PE_OK;
}

/* The statistics' dims: group_norm [N, groups], instance_norm [N * C]. */
static int stat_dims(const pe_gnorm_geom *g, int64_t d[2]) {
    if (g->instance) {
        d[0] = g->n * g->c;
        return 1;
    }
    d[0] = g->n;
    d[1] = g->groups;
    return 2;
}

/* X: [N, C, ...], Scale?, Bias?: [C] -> Y like X; Mean, Variance: [N, groups] (group_norm) or
 * SavedMean?, SavedVariance?: [N * C] (instance_norm) */
pe_status pe_infer_gnorm(pe_op_ctx *ctx) {
    pe_gnorm_geom g;
    PE_CHECK(pe_gnorm_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    PE_CHECK(pe_infer_set_out(ctx, "Y", x->dtype, x->ndim, x->dims));
    int64_t d[2];
    const int nd = stat_dims(&g, d);
    PE_CHECK(pe_infer_set_out(ctx, g.instance ? "SavedMean" : "Mean", x->dtype, nd, d));
    return pe_infer_set_out(ctx, g.instance ? "SavedVariance" : "Variance", x->dtype, nd, d);
}

/* X, Scale?, Bias?, the forward's statistics, Y@GRAD like X -> X@GRAD?, Scale@GRAD?, Bias@GRAD? */
pe_status pe_infer_gnorm_grad(pe_op_ctx *ctx) {
    pe_gnorm_geom g;
    PE_CHECK(pe_gnorm_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    PE_CHECK(pe_infer_check_grad(ctx, "Y@GRAD", pe_ctx_in(ctx, "Y@GRAD"), x->dtype, x->ndim, x->dims));
    int64_t d[2];
    const int nd = stat_dims(&g, d);
    const char *stats[2] = {g.instance ? "SavedMean" : "Mean", g.instance ? "SavedVariance" : "Variance"};
    for (int i = 0; i < 2; i++) {
        const pe_tensor *t = pe_ctx_in(ctx, stats[i]);
        if (!t || t->dtype != x->dtype || pe_tensor_numel(t) != pe_dims_prod(d, 0, nd))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' must be the forward's %s [%lld] statistics", stats[i],
                                t ? pe_ctx_in_name(ctx, stats[i], 0) : "(none)", pe_dtype_name(x->dtype),
                                (long long)pe_dims_prod(d, 0, nd));
    }
    PE_CHECK(pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims));
    static const char *const params[2] = {"Scale", "Bias"}, *const gslots[2] = {"Scale@GRAD", "Bias@GRAD"};
    for (int i = 0; i < 2; i++) {
        if (!pe_ctx_out(ctx, gslots[i])) continue;
        const pe_tensor *p = pe_ctx_in(ctx, params[i]);
        if (!p) return pe_ctx_error(ctx, PE_ERR_INVALID, "%s is wanted but %s is not given", gslots[i], params[i]);
        PE_CHECK(pe_infer_set_out(ctx, gslots[i], p->dtype, p->ndim, p->dims));
    }
    return PE_OK;
}
