/* ops/interp.c — shape inference of nearest_interp_v2, bilinear_interp_v2
 * and their grads (kernels: ops/cpu/interp.c; the geometry: ops/interp.h).
 *
 * Paddle 2.x's ops (X; attrs data_layout, out_h, out_w, scale,
 * interp_method, align_corners, align_mode); the optional OutSize /
 * SizeTensor / Scale tensor inputs are not declared: the attrs carry the
 * sizes. NCHW only. The grads (X for its dims, Out@GRAD) give X@GRAD.
 */
#include "ops/interp.h"

#include <string.h>

pe_status pe_interp_geom_get(const pe_op_ctx *ctx, int ndim, const int64_t *xdims, pe_interp_geom *g) {
    const char *xn = pe_ctx_in_name(ctx, "X", 0);
    char xs[128];
    pe_dims_str(ndim, xdims, xs, sizeof xs);
    memset(g, 0, sizeof *g);
    const char *layout = pe_ctx_string(ctx, "data_layout");
    if (layout[0] && strcmp(layout, "NCHW") && strcmp(layout, "AnyLayout"))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "data_layout '%s' is not supported yet (only NCHW)", layout);
    if (ndim != 4)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' must be 4-D [N, C, H, W], got %s", xn, xs);
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; float32 or float64 expected", xn,
                            pe_dtype_name(x->dtype));
    g->bilinear = ctx->info->id == PE_OP_bilinear_interp_v2 || ctx->info->id == PE_OP_bilinear_interp_v2_grad;
    g->n = xdims[0]; g->c = xdims[1]; g->h = xdims[2]; g->w = xdims[3];
    g->align_corners = pe_ctx_bool(ctx, "align_corners");
    g->align_mode = (int)pe_ctx_int(ctx, "align_mode");
    if (g->align_mode != 0 && g->align_mode != 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr align_mode must be 0 or 1, got %d", g->align_mode);
    int ns = 0;
    const double *sc = pe_ctx_floats(ctx, "scale", &ns);
    g->scale_h = g->scale_w = -1;
    if (ns > 0) {
        if (ns > 2) return pe_ctx_error(ctx, PE_ERR_INVALID, "attr scale must have 1 or 2 values, got %d", ns);
        g->scale_h = sc[0];
        g->scale_w = sc[ns - 1];
        if (!(g->scale_h > 0) || !(g->scale_w > 0))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr scale = [%g, %g]: each value must be > 0", g->scale_h,
                                g->scale_w);
        g->oh = (int64_t)((double)g->h * g->scale_h);
        g->ow = (int64_t)((double)g->w * g->scale_w);
        if (g->oh < 1 || g->ow < 1)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr scale = [%g, %g] makes X '%s' %s an empty output %lldx%lld",
                                g->scale_h, g->scale_w, xn, xs, (long long)g->oh, (long long)g->ow);
    } else {
        g->oh = pe_ctx_int(ctx, "out_h");
        g->ow = pe_ctx_int(ctx, "out_w");
        if (g->oh < 1 || g->ow < 1)
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "attrs out_h = %lld, out_w = %lld: each must be >= 1 (or give attr scale)",
                                (long long)g->oh, (long long)g->ow);
    }
    if ((g->h < 1 || g->w < 1) && g->n * g->c > 0)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' %s has an empty plane: nothing to interpolate from", xn, xs);
    return PE_OK;
}

/* X: [N, C, H, W] -> Out: [N, C, oh, ow] */
pe_status pe_infer_interp(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_interp_geom g;
    PE_CHECK(pe_interp_geom_get(ctx, x->ndim, x->dims, &g));
    const int64_t dims[4] = {g.n, g.c, g.oh, g.ow};
    return pe_infer_set_out(ctx, "Out", x->dtype, 4, dims);
}

/* X (dims only), Out@GRAD: [N, C, oh, ow] -> X@GRAD like X */
pe_status pe_infer_interp_grad(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_interp_geom g;
    PE_CHECK(pe_interp_geom_get(ctx, x->ndim, x->dims, &g));
    const int64_t dims[4] = {g.n, g.c, g.oh, g.ow};
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", pe_ctx_in(ctx, "Out@GRAD"), x->dtype, 4, dims));
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}
