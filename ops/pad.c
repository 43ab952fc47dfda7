/* ops/pad.c — shape inference of pad, pad2d, pad3d and their grads
 * (kernels: ops/cpu/pad.c; the plan: ops/pad.h).
 *
 * Paddle's ops and attrs: pad (X; paddings = before / after of every dim,
 * pad_value), fluid 1.x's pad2d (NCHW / NHWC; paddings top, bottom, left,
 * right; mode constant / reflect / edge; pad_value) and 2.x's pad3d (NCDHW /
 * NDHWC; paddings left, right, top, bottom, front, back; mode constant /
 * reflect / replicate / circular; value). The optional Paddings tensor
 * inputs are not declared: the attrs carry the values. Gradients: pad_grad
 * (Out@GRAD -> X@GRAD, the slice back, as Paddle's), pad2d_grad / pad3d_grad
 * (X for its dims, Out@GRAD): every Out@GRAD element is added to the X
 * element it was read from (reflect / edge / circular borders accumulate).
 */
#include "ops/pad.h"

#include <string.h>

static pe_status need_attr_len(const pe_op_ctx *ctx, int got, int want, int ndim) {
    if (got == want) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "attr paddings has %d values, expected %d for X '%s' of rank %d", got,
                        want, pe_ctx_in_name(ctx, pe_op_info_input_index(ctx->info, "X") >= 0 ? "X" : "Out@GRAD", 0), ndim);
}

pe_status pe_pad_plan_make(const pe_op_ctx *ctx, int ndim, const int64_t *xdims, pe_pad_plan *pp) {
    const int id = ctx->info->id;
    const char *xslot = pe_op_info_input_index(ctx->info, "X") >= 0 ? "X" : "Out@GRAD";
    int m = 0;
    const int64_t *p = pe_ctx_ints(ctx, "paddings", &m);
    memset(pp, 0, sizeof *pp);
    pp->n = ndim;
    for (int i = 0; i < ndim; i++) pp->xd[i] = xdims[i];
    char xs[160];
    pe_dims_str(ndim, xdims, xs, sizeof xs);
    if (id == PE_OP_pad || id == PE_OP_pad_grad) {
        PE_CHECK(need_attr_len(ctx, m, 2 * ndim, ndim));
        for (int i = 0; i < ndim; i++) {
            pp->before[i] = p[2 * i];
            pp->after[i] = p[2 * i + 1];
        }
        pp->mode = PE_PAD_CONSTANT;
        pp->value = pe_ctx_float(ctx, "pad_value");
    } else {
        const bool three = id == PE_OP_pad3d || id == PE_OP_pad3d_grad;
        const int rank = three ? 5 : 4;
        if (ndim != rank)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has shape %s (expected rank %d, %s)", xslot,
                                pe_ctx_in_name(ctx, xslot, 0), xs, rank, three ? "[N, C, D, H, W]" : "[N, C, H, W]");
        PE_CHECK(need_attr_len(ctx, m, three ? 6 : 4, ndim));
        const char *fmt = pe_ctx_string(ctx, "data_format");
        const bool last = three ? strcmp(fmt, "NDHWC") == 0 : strcmp(fmt, "NHWC") == 0;
        if (!last && strcmp(fmt, three ? "NCDHW" : "NCHW") != 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr data_format = '%s' for X '%s' (expected %s)", fmt,
                                pe_ctx_in_name(ctx, xslot, 0), three ? "NCDHW or NDHWC" : "NCHW or NHWC");
        const int s0 = last ? 1 : 2; /* first spatial dim */
        if (three) {                  /* [left, right, top, bottom, front, back] -> W, H, D */
            for (int k = 0; k < 3; k++) {
                pp->before[s0 + 2 - k] = p[2 * k];
                pp->after[s0 + 2 - k] = p[2 * k + 1];
            }
        } else {                      /* [top, bottom, left, right] -> H, W */
            for (int k = 0; k < 2; k++) {
                pp->before[s0 + k] = p[2 * k];
                pp->after[s0 + k] = p[2 * k + 1];
            }
        }
        const char *mode = pe_ctx_string(ctx, "mode");
        if (strcmp(mode, "constant") == 0) pp->mode = PE_PAD_CONSTANT;
        else if (strcmp(mode, "reflect") == 0) pp->mode = PE_PAD_REFLECT;
        else if (strcmp(mode, three ? "replicate" : "edge") == 0) pp->mode = PE_PAD_EDGE;
        else if (three && strcmp(mode, "circular") == 0) pp->mode = PE_PAD_CIRCULAR;
        else
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr mode = '%s' for X '%s' (expected %s)", mode,
                                pe_ctx_in_name(ctx, xslot, 0),
                                three ? "constant, reflect, replicate or circular" : "constant, reflect or edge");
        pp->value = pe_ctx_float(ctx, three ? "value" : "pad_value");
    }
    for (int i = 0; i < ndim; i++) {
        const int64_t b = pp->before[i], a = pp->after[i], d = xdims[i];
        const char *why = NULL;
        if (b < 0 || a < 0) why = "paddings must be >= 0";
        else if (pp->mode == PE_PAD_REFLECT && (b >= d || a >= d) && (b || a)) why = "reflect needs each pad < the dim";
        else if (pp->mode != PE_PAD_CONSTANT && d == 0 && (b || a)) why = "an empty dim has nothing to repeat";
        if (why)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr paddings gives dim %d of %s '%s' %s the pads %lld and %lld "
                                "(%s)", i, xslot, pe_ctx_in_name(ctx, xslot, 0), xs, (long long)b, (long long)a, why);
        pp->od[i] = d + b + a;
    }
    return PE_OK;
}

/* X [..] -> Out [.., each dim + its pads] (float32, float64, int32, int64) */
pe_status pe_infer_pad(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (!pe_dtype_is_num(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected float32, float64, int32 or int64)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    pe_pad_plan pp;
    PE_CHECK(pe_pad_plan_make(ctx, x->ndim, x->dims, &pp));
    return pe_infer_set_out(ctx, "Out", x->dtype, pp.n, pp.od);
}

/* pad_grad: Out@GRAD [..] -> X@GRAD [.., each dim less its pads] */
pe_status pe_infer_pad_grad(pe_op_ctx *ctx) {
    pe_tensor *g;
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (!pe_dtype_is_float(g->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD '%s' has dtype %s (expected float32 or float64)",
                            pe_ctx_in_name(ctx, "Out@GRAD", 0), pe_dtype_name(g->dtype));
    int m = 0;
    const int64_t *p = pe_ctx_ints(ctx, "paddings", &m);
    PE_CHECK(need_attr_len(ctx, m, 2 * g->ndim, g->ndim));
    int64_t xd[PE_MAX_DIMS];
    for (int i = 0; i < g->ndim; i++) {
        xd[i] = g->dims[i] - p[2 * i] - p[2 * i + 1];
        if (xd[i] < 0 || p[2 * i] < 0 || p[2 * i + 1] < 0) {
            char gs[160];
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr paddings (%lld, %lld) for dim %d do not fit Out@GRAD '%s' %s",
                                (long long)p[2 * i], (long long)p[2 * i + 1], i, pe_ctx_in_name(ctx, "Out@GRAD", 0),
                                pe_dims_str(g->ndim, g->dims, gs, sizeof gs));
        }
    }
    return pe_infer_set_out(ctx, "X@GRAD", g->dtype, g->ndim, xd);
}

/* pad2d_grad / pad3d_grad: X (dims only), Out@GRAD [Out] -> X@GRAD [X] */
pe_status pe_infer_pad_nd_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected float32 or float64)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    pe_pad_plan pp;
    PE_CHECK(pe_pad_plan_make(ctx, x->ndim, x->dims, &pp));
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, pp.n, pp.od));
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}
