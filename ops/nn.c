/* ops/nn.c — shape inference of the nn family (conv2d / depthwise_conv2d,
 * conv2d_transpose, pool2d, batch_norm) and of their gradient ops, and
 * batch_norm's grad maker (ops/grad.h; the others are wired in ops.def,
 * PE_GRAD_WIRE).
 *
 * How: pe_conv_geom_get / pe_pool_geom_get turn the op's inputs and attrs
 * into one validated geometry struct (ops/nn.h) using Paddle's rules:
 *   - paddings: 2 values [ph, pw] (symmetric) or 4 [top, bottom, left, right];
 *   - padding_algorithm SAME: out = ceil(in / stride), the total padding
 *     max((out-1)*stride + k - in, 0) split with the smaller half first, and
 *     (conv) dilations reset to 1; VALID: paddings 0;
 *   - conv: out = (in + p0 + p1 - (d*(k-1)+1)) / stride + 1;
 *   - conv2d_transpose: out = (in - 1) * stride - p0 - p1 + d*(k-1)+1, plus
 *     output_padding (< stride) or output_size (in [out, out + stride)); its
 *     geometry is that of the conv2d whose input gradient it is;
 *   - pool: same with d = 1, rounded up when ceil_mode; global_pooling uses
 *     the whole plane (ksize = [H, W], paddings 0); adaptive: out = ksize.
 * The kernels call the same functions, so infer and kernel never disagree.
 *
 * The gradient ops (conv2d_grad, pool2d_grad, batch_norm_grad) carry the
 * forward op's inputs under the same slot names and its attrs, so their
 * inference re-derives the same geometry and checks the incoming gradient
 * against it; each requested gradient gets the meta of its forward input.
 *
 * Why: every shape error is caught here, before allocation, with a message
 * naming the op, the vars and their shapes.
 */
#include "ops/nn.h"
#include "ops/grad.h"

#include <string.h>

#define DIMS(t, buf) pe_dims_str((t)->ndim, (t)->dims, buf, sizeof buf)

static bool layout_is_nchw(const char *s) {
    return !s[0] || !strcmp(s, "NCHW") || !strcmp(s, "AnyLayout");
}

/* data_format: *nhwc = false for NCHW / AnyLayout / "", true for NHWC
 * (where the op has it: allow_nhwc), else an error naming the value. */
static pe_status read_layout(const pe_op_ctx *ctx, bool allow_nhwc, bool *nhwc) {
    const char *s = pe_ctx_string(ctx, "data_format");
    *nhwc = false;
    if (layout_is_nchw(s)) return PE_OK;
    if (allow_nhwc && !strcmp(s, "NHWC")) {
        *nhwc = true;
        return PE_OK;
    }
    return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "data_format '%s' is not supported (%s)", s,
                        allow_nhwc ? "NCHW or NHWC" : "only NCHW");
}

/* A 2-value int list attr (strides, dilations, ksize) into out; each >= min. */
static pe_status read_pair(const pe_op_ctx *ctx, const char *name, int64_t min, int64_t out[2]) {
    int n = 0;
    const int64_t *v = pe_ctx_ints(ctx, name, &n);
    if (n != 2) return pe_ctx_error(ctx, PE_ERR_INVALID, "attr %s must have 2 values (height, width), got %d", name, n);
    for (int i = 0; i < 2; i++) {
        if (v[i] < min)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr %s = [%lld, %lld]: each value must be >= %lld", name,
                                (long long)v[0], (long long)v[1], (long long)min);
        out[i] = v[i];
    }
    return PE_OK;
}

/* paddings -> p[4] = [top, bottom, left, right]. */
static pe_status read_paddings(const pe_op_ctx *ctx, int64_t p[4]) {
    int n = 0;
    const int64_t *v = pe_ctx_ints(ctx, "paddings", &n);
    if (n == 2) {
        p[0] = p[1] = v[0];
        p[2] = p[3] = v[1];
    } else if (n == 4) {
        memcpy(p, v, 4 * sizeof *p);
    } else {
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "attr paddings must have 2 values [pad_h, pad_w] or 4 [top, bottom, left, right], got %d", n);
    }
    for (int i = 0; i < 4; i++)
        if (p[i] < 0) return pe_ctx_error(ctx, PE_ERR_INVALID, "attr paddings has a negative value %lld", (long long)p[i]);
    return PE_OK;
}

/* padding_algorithm: EXPLICIT keeps p; SAME recomputes p from in/k/s (and
 * resets dil to 1 when given, as Paddle's conv does); VALID zeroes p. */
static pe_status apply_padding_algorithm(const pe_op_ctx *ctx, const int64_t in[2], const int64_t k[2],
                                         const int64_t s[2], int64_t p[4], int64_t *dil) {
    const char *alg = pe_ctx_string(ctx, "padding_algorithm");
    if (!strcmp(alg, "EXPLICIT") || !alg[0]) return PE_OK;
    if (!strcmp(alg, "VALID")) {
        memset(p, 0, 4 * sizeof *p);
        return PE_OK;
    }
    if (!strcmp(alg, "SAME")) {
        for (int i = 0; i < 2; i++) {
            int64_t out = (in[i] + s[i] - 1) / s[i];
            int64_t sum = (out - 1) * s[i] + k[i] - in[i];
            if (sum < 0) sum = 0;
            p[2 * i] = sum / 2;
            p[2 * i + 1] = sum - sum / 2;
            if (dil) dil[i] = 1;
        }
        return PE_OK;
    }
    return pe_ctx_error(ctx, PE_ERR_INVALID, "attr padding_algorithm must be EXPLICIT, SAME or VALID, got '%s'", alg);
}

static int64_t window_out(int64_t in, int64_t k_eff, int64_t p0, int64_t p1, int64_t s, bool ceil_mode) {
    int64_t span = in + p0 + p1 - k_eff; /* >= 0, checked by the caller */
    return (ceil_mode ? span + s - 1 : span) / s + 1;
}

/* ---- conv2d ------------------------------------------------------------- */

/* The checks conv2d and conv2d_transpose share: the layout (NHWC where
 * nhwc is non-NULL), 4-D Input and Filter (filter_dims: how the op lays out
 * its Filter), float Input, Filter of its dtype. */
static pe_status conv_check_tensors(const pe_op_ctx *ctx, const char *filter_dims, bool *nhwc) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter");
    const char *xn = pe_ctx_in_name(ctx, "Input", 0), *fn = pe_ctx_in_name(ctx, "Filter", 0);
    char xs[128], fs[128];
    bool is_nhwc;
    PE_CHECK(read_layout(ctx, nhwc != NULL, &is_nhwc));
    if (nhwc) *nhwc = is_nhwc;
    if (x->ndim != 4)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Input '%s' must be 4-D %s, got %s", xn,
                            is_nhwc ? "[N, H, W, C]" : "[N, C, H, W]", DIMS(x, xs));
    if (f->ndim != 4)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Filter '%s' must be 4-D %s, got %s", fn, filter_dims, DIMS(f, fs));
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "Input '%s' has dtype %s; %s supports float32 and float64", xn,
                            pe_dtype_name(x->dtype), ctx->info->name);
    if (f->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Filter '%s' has dtype %s but Input '%s' has %s", fn,
                            pe_dtype_name(f->dtype), xn, pe_dtype_name(x->dtype));
    return PE_OK;
}

pe_status pe_conv_geom_get(const pe_op_ctx *ctx, pe_conv_geom *g) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter"), *b = pe_ctx_in(ctx, "Bias");
    const char *xn = pe_ctx_in_name(ctx, "Input", 0), *fn = pe_ctx_in_name(ctx, "Filter", 0);
    char xs[128], fs[128], bs[128];
    memset(g, 0, sizeof *g);
    PE_CHECK(conv_check_tensors(ctx, "[M, C/groups, kh, kw]", &g->nhwc));
    g->n = x->dims[0];
    g->c = x->dims[g->nhwc ? 3 : 1]; g->h = x->dims[g->nhwc ? 1 : 2]; g->w = x->dims[g->nhwc ? 2 : 3];
    g->m = f->dims[0]; g->kh = f->dims[2]; g->kw = f->dims[3];
    g->groups = pe_ctx_int(ctx, "groups");
    if (g->groups < 1) return pe_ctx_error(ctx, PE_ERR_INVALID, "attr groups must be >= 1, got %lld", (long long)g->groups);
    if (g->c % g->groups)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Input '%s' %s has C=%lld channels, not divisible by groups=%lld", xn,
                            DIMS(x, xs), (long long)g->c, (long long)g->groups);
    if (g->m % g->groups)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "Filter '%s' %s has M=%lld output channels, not divisible by groups=%lld", fn, DIMS(f, fs),
                            (long long)g->m, (long long)g->groups);
    if (f->dims[1] * g->groups != g->c)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "channel mismatch: Input '%s' %s has C=%lld channels but Filter '%s' %s with groups=%lld "
                            "expects C = Filter dim 1 * groups = %lld",
                            xn, DIMS(x, xs), (long long)g->c, fn, DIMS(f, fs), (long long)g->groups,
                            (long long)(f->dims[1] * g->groups));
    if (g->m < 1 || g->kh < 1 || g->kw < 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Filter '%s' %s has an empty dimension", fn, DIMS(f, fs));
    if (b) {
        if (pe_tensor_numel(b) != g->m || b->dtype != x->dtype)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "Bias '%s' %s (%s) must have M=%lld elements of dtype %s",
                                pe_ctx_in_name(ctx, "Bias", 0), DIMS(b, bs), pe_dtype_name(b->dtype), (long long)g->m,
                                pe_dtype_name(x->dtype));
        g->has_bias = true;
    }
    int64_t s[2], d[2], p[4];
    PE_CHECK(read_pair(ctx, "strides", 1, s));
    PE_CHECK(read_pair(ctx, "dilations", 1, d));
    PE_CHECK(read_paddings(ctx, p));
    const int64_t in[2] = {g->h, g->w}, k[2] = {g->kh, g->kw};
    PE_CHECK(apply_padding_algorithm(ctx, in, k, s, p, d));
    g->sh = s[0]; g->sw = s[1]; g->dh = d[0]; g->dw = d[1];
    g->pt = p[0]; g->pb = p[1]; g->pl = p[2]; g->pr = p[3];
    int64_t keh = g->dh * (g->kh - 1) + 1, kew = g->dw * (g->kw - 1) + 1;
    if (keh > g->h + g->pt + g->pb || kew > g->w + g->pl + g->pr)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "Filter '%s' %s (dilated extent %lldx%lld) is larger than the padded Input '%s' %s "
                            "(padded plane %lldx%lld): the output would be empty",
                            fn, DIMS(f, fs), (long long)keh, (long long)kew, xn, DIMS(x, xs),
                            (long long)(g->h + g->pt + g->pb), (long long)(g->w + g->pl + g->pr));
    g->oh = window_out(g->h, keh, g->pt, g->pb, g->sh, false);
    g->ow = window_out(g->w, kew, g->pl, g->pr, g->sw, false);
    return PE_OK;
}

pe_status pe_infer_conv2d(pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_geom_get(ctx, &g));
    int64_t dims[4];
    pe_nn_act_dims(g.nhwc, g.n, g.m, g.oh, g.ow, dims);
    pe_status st = pe_tensor_set_meta(pe_ctx_out(ctx, "Output"), pe_ctx_in(ctx, "Input")->dtype, 4, dims);
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    return PE_OK;
}

/* ---- conv2d_transpose --------------------------------------------------- */

/* An optional 2-value int list attr (output_padding, output_size): *given = false when empty. */
static pe_status read_opt_pair(const pe_op_ctx *ctx, const char *name, int64_t out[2], bool *given) {
    int n = 0;
    const int64_t *v = pe_ctx_ints(ctx, name, &n);
    *given = n > 0;
    out[0] = out[1] = 0;
    if (!n) return PE_OK;
    if (n != 2) return pe_ctx_error(ctx, PE_ERR_INVALID, "attr %s must be empty or have 2 values (height, width), got %d", name, n);
    out[0] = v[0];
    out[1] = v[1];
    return PE_OK;
}

/* Paddle's rule: OH = (H - 1) * sh - pt - pb + dh * (kh - 1) + 1, plus output_padding, or
 * output_size when given (it must lie in [OH, OH + sh)). */
pe_status pe_conv_transpose_geom_get(const pe_op_ctx *ctx, pe_conv_geom *g) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter");
    const char *xn = pe_ctx_in_name(ctx, "Input", 0), *fn = pe_ctx_in_name(ctx, "Filter", 0);
    char xs[128], fs[128];
    memset(g, 0, sizeof *g);
    PE_CHECK(conv_check_tensors(ctx, "[C_in, C_out/groups, kh, kw]", NULL));
    g->groups = pe_ctx_int(ctx, "groups");
    if (g->groups < 1) return pe_ctx_error(ctx, PE_ERR_INVALID, "attr groups must be >= 1, got %lld", (long long)g->groups);
    if (f->dims[0] != x->dims[1])
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "channel mismatch: Input '%s' %s has C=%lld channels but Filter '%s' %s has dim 0 = %lld "
                            "(it must be C_in)",
                            xn, DIMS(x, xs), (long long)x->dims[1], fn, DIMS(f, fs), (long long)f->dims[0]);
    if (x->dims[1] % g->groups)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Input '%s' %s has C=%lld channels, not divisible by groups=%lld", xn,
                            DIMS(x, xs), (long long)x->dims[1], (long long)g->groups);
    if (f->dims[1] < 1 || f->dims[2] < 1 || f->dims[3] < 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Filter '%s' %s of Input '%s' %s has an empty dimension", fn,
                            DIMS(f, fs), xn, DIMS(x, xs));
    /* the conv2d this is the input gradient of: its Input is our Output, its Output our Input */
    g->n = x->dims[0]; g->m = x->dims[1]; g->oh = x->dims[2]; g->ow = x->dims[3];
    g->c = f->dims[1] * g->groups; g->kh = f->dims[2]; g->kw = f->dims[3];
    int64_t s[2], d[2], p[4], op[2], os[2];
    bool has_op, has_os;
    PE_CHECK(read_pair(ctx, "strides", 1, s));
    PE_CHECK(read_pair(ctx, "dilations", 1, d));
    PE_CHECK(read_paddings(ctx, p));
    PE_CHECK(read_opt_pair(ctx, "output_padding", op, &has_op));
    PE_CHECK(read_opt_pair(ctx, "output_size", os, &has_os));
    const int64_t in[2] = {g->oh, g->ow}, k[2] = {g->kh, g->kw};
    PE_CHECK(apply_padding_algorithm(ctx, in, k, s, p, d));
    g->sh = s[0]; g->sw = s[1]; g->dh = d[0]; g->dw = d[1];
    g->pt = p[0]; g->pb = p[1]; g->pl = p[2]; g->pr = p[3];
    int64_t out[2];
    for (int i = 0; i < 2; i++) {
        const int64_t base = (in[i] - 1) * s[i] - p[2 * i] - p[2 * i + 1] + d[i] * (k[i] - 1) + 1;
        if (base < 1)
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "Input '%s' %s with Filter '%s' %s, strides [%lld, %lld] and paddings [%lld, %lld, "
                                "%lld, %lld] gives an empty output",
                                xn, DIMS(x, xs), fn, DIMS(f, fs), (long long)s[0], (long long)s[1], (long long)p[0],
                                (long long)p[1], (long long)p[2], (long long)p[3]);
        if (op[i] < 0 || op[i] >= s[i])
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "attr output_padding = [%lld, %lld]: each value must be in [0, stride) (strides [%lld, "
                                "%lld])",
                                (long long)op[0], (long long)op[1], (long long)s[0], (long long)s[1]);
        out[i] = base + op[i];
        if (has_os) {
            if (os[i] < base || os[i] >= base + s[i])
                return pe_ctx_error(ctx, PE_ERR_INVALID,
                                    "attr output_size = [%lld, %lld]: dim %d must be in [%lld, %lld) for Input '%s' %s "
                                    "and these strides / paddings",
                                    (long long)os[0], (long long)os[1], i, (long long)base, (long long)(base + s[i]), xn,
                                    DIMS(x, xs));
            out[i] = os[i];
        }
    }
    g->h = out[0];
    g->w = out[1];
    return PE_OK;
}

pe_status pe_infer_conv2d_transpose(pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_transpose_geom_get(ctx, &g));
    const int64_t dims[4] = {g.n, g.c, g.h, g.w};
    return pe_infer_set_out(ctx, "Output", pe_ctx_in(ctx, "Input")->dtype, 4, dims);
}

/* ---- pool2d ------------------------------------------------------------- */

pe_status pe_pool_geom_get(const pe_op_ctx *ctx, pe_pool_geom *g) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const char *xn = pe_ctx_in_name(ctx, "X", 0);
    char xs[128];
    const char *type = pe_ctx_string(ctx, "pooling_type");
    memset(g, 0, sizeof *g);
    PE_CHECK(read_layout(ctx, true, &g->nhwc));
    if (x->ndim != 4)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' must be 4-D %s, got %s", xn,
                            g->nhwc ? "[N, H, W, C]" : "[N, C, H, W]", DIMS(x, xs));
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; pool2d supports float32 and float64", xn,
                            pe_dtype_name(x->dtype));
    if (!strcmp(type, "max")) g->is_max = true;
    else if (strcmp(type, "avg"))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr pooling_type must be 'max' or 'avg', got '%s'", type);
    g->n = x->dims[0];
    g->c = x->dims[g->nhwc ? 3 : 1]; g->h = x->dims[g->nhwc ? 1 : 2]; g->w = x->dims[g->nhwc ? 2 : 3];
    bool global = pe_ctx_bool(ctx, "global_pooling"), ceil_mode = pe_ctx_bool(ctx, "ceil_mode");
    g->adaptive = pe_ctx_bool(ctx, "adaptive");
    g->exclusive = pe_ctx_bool(ctx, "exclusive");
    int64_t k[2], s[2], p[4];
    PE_CHECK(read_pair(ctx, "ksize", global ? 0 : 1, k));
    PE_CHECK(read_pair(ctx, "strides", 1, s));
    PE_CHECK(read_paddings(ctx, p));
    const int64_t in[2] = {g->h, g->w};
    PE_CHECK(apply_padding_algorithm(ctx, in, k, s, p, NULL));
    if (global) {
        k[0] = g->h;
        k[1] = g->w;
    }
    if (global || g->adaptive) memset(p, 0, sizeof p);
    g->kh = k[0]; g->kw = k[1]; g->sh = s[0]; g->sw = s[1];
    g->pt = p[0]; g->pb = p[1]; g->pl = p[2]; g->pr = p[3];
    if (g->adaptive) {
        if (g->kh < 1 || g->kw < 1)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "adaptive pool2d of X '%s' %s: output size ksize = [%lld, %lld] must be positive",
                                xn, DIMS(x, xs), (long long)g->kh, (long long)g->kw);
        if (g->h < 1 || g->w < 1)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "adaptive pool2d of X '%s' %s: empty input plane", xn, DIMS(x, xs));
        g->oh = g->kh;
        g->ow = g->kw;
        return PE_OK;
    }
    if (g->kh < 1 || g->kw < 1 || g->kh > g->h + g->pt + g->pb || g->kw > g->w + g->pl + g->pr)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "pool window %lldx%lld does not fit the padded X '%s' %s (padded plane %lldx%lld): the "
                            "output would be empty",
                            (long long)g->kh, (long long)g->kw, xn, DIMS(x, xs), (long long)(g->h + g->pt + g->pb),
                            (long long)(g->w + g->pl + g->pr));
    g->oh = window_out(g->h, g->kh, g->pt, g->pb, g->sh, ceil_mode);
    g->ow = window_out(g->w, g->kw, g->pl, g->pr, g->sw, ceil_mode);
    return PE_OK;
}

pe_status pe_infer_pool2d(pe_op_ctx *ctx) {
    pe_pool_geom g;
    PE_CHECK(pe_pool_geom_get(ctx, &g));
    int64_t dims[4];
    pe_nn_act_dims(g.nhwc, g.n, g.c, g.oh, g.ow, dims);
    pe_status st = pe_tensor_set_meta(pe_ctx_out(ctx, "Out"), pe_ctx_in(ctx, "X")->dtype, 4, dims);
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    return PE_OK;
}

/* ---- batch_norm --------------------------------------------------------- */

pe_status pe_bn_layout(const pe_op_ctx *ctx, const pe_tensor *x, bool *nhwc, int64_t *c) {
    const char *s = pe_ctx_string(ctx, "data_layout");
    if (layout_is_nchw(s)) *nhwc = false;
    else if (!strcmp(s, "NHWC")) *nhwc = x->ndim > 2;
    else return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "data_layout '%s' is not supported (NCHW or NHWC)", s);
    *c = x->dims[*nhwc ? x->ndim - 1 : 1];
    return PE_OK;
}

/* X: [N, C, ...] (rank 2..5; NHWC: [N, ..., C]); Scale, Bias, Mean, Variance: [C] ->
 * Y like X; MeanOut, VarianceOut, SavedMean, SavedVariance: [C]. */
pe_status pe_infer_batch_norm(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const char *xn = pe_ctx_in_name(ctx, "X", 0);
    char xs[128], ps[128];
    if (x->ndim < 2 || x->ndim > 5)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' must have rank 2 to 5 ([N, C, ...]), got %s", xn, DIMS(x, xs));
    bool nhwc;
    int64_t c;
    PE_CHECK(pe_bn_layout(ctx, x, &nhwc, &c));
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; batch_norm supports float32 and float64",
                            xn, pe_dtype_name(x->dtype));
    double eps = pe_ctx_float(ctx, "epsilon");
    if (!(eps >= 0)) return pe_ctx_error(ctx, PE_ERR_INVALID, "attr epsilon must be >= 0, got %g", eps);
    static const char *const params[4] = {"Scale", "Bias", "Mean", "Variance"};
    for (int i = 0; i < 4; i++) {
        const pe_tensor *t = pe_ctx_in(ctx, params[i]);
        if (t->ndim != 1 || t->dims[0] != c || t->dtype != x->dtype)
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "%s '%s' is %s %s; X '%s' %s needs a 1-D [%lld] tensor of dtype %s (one per channel)",
                                params[i], pe_ctx_in_name(ctx, params[i], 0), pe_dtype_name(t->dtype), DIMS(t, ps), xn,
                                DIMS(x, xs), (long long)c, pe_dtype_name(x->dtype));
    }
    pe_status st = pe_tensor_set_meta(pe_ctx_out(ctx, "Y"), x->dtype, x->ndim, x->dims);
    static const char *const outs[4] = {"MeanOut", "VarianceOut", "SavedMean", "SavedVariance"};
    for (int i = 0; i < 4 && st == PE_OK; i++) {
        pe_tensor *t = pe_ctx_out(ctx, outs[i]);
        if (t) st = pe_tensor_set_meta(t, x->dtype, 1, &c);
    }
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    return PE_OK;
}

/* ---- gradient ops: shape inference ------------------------------------- */

/* The gradient `gslot` (dims must be `dims`, dtype `dt`) of a forward output. */
static pe_status check_out_grad(pe_op_ctx *ctx, const char *gslot, pe_dtype dt, int nd, const int64_t *dims) {
    const pe_tensor *d = pe_ctx_in(ctx, gslot);
    if (!d) return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s is missing", gslot);
    return pe_infer_check_grad(ctx, gslot, d, dt, nd, dims);
}

/* Output gslot (when requested) gets the meta of input `like`. */
static pe_status grad_like(pe_op_ctx *ctx, const char *gslot, const char *like) {
    pe_tensor *o = pe_ctx_out(ctx, gslot);
    if (!o) return PE_OK;
    const pe_tensor *t = pe_ctx_in(ctx, like);
    if (!t)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "output %s '%s' is requested but input %s is absent", gslot,
                            pe_ctx_out_name(ctx, gslot, 0), like);
    pe_status st = pe_tensor_set_meta(o, t->dtype, t->ndim, t->dims);
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    return PE_OK;
}

/* Input, Filter, Bias?, Output@GRAD: [N, M, oh, ow] (NHWC: [N, oh, ow, M]) ->
 * Input@GRAD?, Filter@GRAD?, Bias@GRAD? like Input, Filter, Bias. */
pe_status pe_infer_conv2d_grad(pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_geom_get(ctx, &g));
    int64_t dims[4];
    pe_nn_act_dims(g.nhwc, g.n, g.m, g.oh, g.ow, dims);
    PE_CHECK(check_out_grad(ctx, "Output@GRAD", pe_ctx_in(ctx, "Input")->dtype, 4, dims));
    PE_CHECK(grad_like(ctx, "Input@GRAD", "Input"));
    PE_CHECK(grad_like(ctx, "Filter@GRAD", "Filter"));
    return grad_like(ctx, "Bias@GRAD", "Bias");
}

/* Input, Filter, Output@GRAD: [N, Cout, OH, OW] -> Input@GRAD?, Filter@GRAD? like Input, Filter. */
pe_status pe_infer_conv2d_transpose_grad(pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_transpose_geom_get(ctx, &g));
    const int64_t dims[4] = {g.n, g.c, g.h, g.w};
    PE_CHECK(check_out_grad(ctx, "Output@GRAD", pe_ctx_in(ctx, "Input")->dtype, 4, dims));
    PE_CHECK(grad_like(ctx, "Input@GRAD", "Input"));
    return grad_like(ctx, "Filter@GRAD", "Filter");
}

/* X, Out, Out@GRAD: [N, C, oh, ow] (NHWC: [N, oh, ow, C]) -> X@GRAD like X. */
pe_status pe_infer_pool2d_grad(pe_op_ctx *ctx) {
    pe_pool_geom g;
    PE_CHECK(pe_pool_geom_get(ctx, &g));
    int64_t dims[4];
    pe_nn_act_dims(g.nhwc, g.n, g.c, g.oh, g.ow, dims);
    const pe_dtype dt = pe_ctx_in(ctx, "X")->dtype;
    PE_CHECK(check_out_grad(ctx, "Out", dt, 4, dims));
    PE_CHECK(check_out_grad(ctx, "Out@GRAD", dt, 4, dims));
    return grad_like(ctx, "X@GRAD", "X");
}

/* X: [N, C, ...], Scale, Bias: [C], SavedMean/SavedVariance (training) or
 * Mean/Variance (is_test / use_global_stats): [C], Y@GRAD like X ->
 * X@GRAD?, Scale@GRAD?, Bias@GRAD? like X, Scale, Bias. */
pe_status pe_infer_batch_norm_grad(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const char *xn = pe_ctx_in_name(ctx, "X", 0);
    char xs[128], ps[128];
    if (x->ndim < 2 || x->ndim > 5)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' must have rank 2 to 5 ([N, C, ...]), got %s", xn, DIMS(x, xs));
    bool nhwc;
    int64_t c;
    PE_CHECK(pe_bn_layout(ctx, x, &nhwc, &c));
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; batch_norm supports float32 and float64",
                            xn, pe_dtype_name(x->dtype));
    const bool global = pe_ctx_bool(ctx, "is_test") || pe_ctx_bool(ctx, "use_global_stats");
    const char *stats[2] = {global ? "Mean" : "SavedMean", global ? "Variance" : "SavedVariance"};
    const char *params[4] = {"Scale", "Bias", stats[0], stats[1]};
    for (int i = 0; i < 4; i++) {
        const pe_tensor *t = pe_ctx_in(ctx, params[i]);
        if (!t)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s is missing (needed %s)", params[i],
                                global ? "with is_test / use_global_stats" : "in training mode");
        if (t->ndim != 1 || t->dims[0] != c || t->dtype != x->dtype)
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "%s '%s' is %s %s; X '%s' %s needs a 1-D [%lld] tensor of dtype %s (one per channel)",
                                params[i], pe_ctx_in_name(ctx, params[i], 0), pe_dtype_name(t->dtype), DIMS(t, ps), xn,
                                DIMS(x, xs), (long long)c, pe_dtype_name(x->dtype));
    }
    PE_CHECK(check_out_grad(ctx, "Y@GRAD", x->dtype, x->ndim, x->dims));
    PE_CHECK(grad_like(ctx, "X@GRAD", "X"));
    PE_CHECK(grad_like(ctx, "Scale@GRAD", "Scale"));
    return grad_like(ctx, "Bias@GRAD", "Bias");
}

/* ---- grad makers --------------------------------------------------------- */

static bool fwd_bool(const pe_op *op, const char *name) {
    const pe_attr *a = pe_op_attr(op, name);
    return a && (a->type == PE_ATTR_BOOL || a->type == PE_ATTR_INT || a->type == PE_ATTR_LONG) && a->i != 0;
}

/* batch_norm: Y = Scale * (X - mean) / sqrt(var + eps) + Bias ->
 * batch_norm_grad(X, Scale, Bias, SavedMean, SavedVariance | Mean, Variance, Y@GRAD)
 *   -> X@GRAD, Scale@GRAD, Bias@GRAD.
 * Training uses the batch statistics the forward saved; is_test /
 * use_global_stats uses the running Mean/Variance (constants: no gradient).
 * MeanOut/VarianceOut/Saved* carry no gradient. */
pe_status pe_grad_batch_norm(pe_grad_ctx *g) {
    const pe_op *f = pe_grad_fwd(g);
    const bool global = fwd_bool(f, "is_test") || fwd_bool(f, "use_global_stats");
    if (!global && (!pe_op_output1(f, "SavedMean") || !pe_op_output1(f, "SavedVariance")))
        return pe_error(PE_ERR_INVALID,
                        "batch_norm (Y '%s') in training mode needs its SavedMean and SavedVariance outputs for the "
                        "gradient; add them to the op",
                        pe_op_output1(f, "Y") ? pe_op_output1(f, "Y") : "?");
    PE_CHECK(pe_grad_new_op(g, "batch_norm_grad"));
    PE_CHECK(pe_grad_fwd_input(g, "X", "X"));
    PE_CHECK(pe_grad_fwd_input(g, "Scale", "Scale"));
    PE_CHECK(pe_grad_fwd_input(g, "Bias", "Bias"));
    if (global) {
        PE_CHECK(pe_grad_fwd_input(g, "Mean", "Mean"));
        PE_CHECK(pe_grad_fwd_input(g, "Variance", "Variance"));
    } else {
        PE_CHECK(pe_grad_fwd_output(g, "SavedMean", "SavedMean"));
        PE_CHECK(pe_grad_fwd_output(g, "SavedVariance", "SavedVariance"));
    }
    PE_CHECK(pe_grad_out_grad(g, "Y", "Y@GRAD"));
    PE_CHECK(pe_grad_in_grad(g, "X", "X@GRAD"));
    PE_CHECK(pe_grad_in_grad(g, "Scale", "Scale@GRAD"));
    return pe_grad_in_grad(g, "Bias", "Bias@GRAD");
}
