/* ops/cpu/nn_grad.c — CPU kernels of the nn gradient ops: conv2d_grad,
 * pool2d_grad, batch_norm_grad.
 *
 * How: float32 goes through oneDNN backward primitives, cached like the
 * forward ones (dnnl_util.c; each backward primitive keeps the forward
 * primitive descriptor oneDNN takes as its hint):
 *   - conv2d_grad: convolution_backward_data for Input@GRAD and
 *     convolution_backward_weights (with the bias gradient when requested)
 *     for Filter@GRAD, each with oneDNN's preferred layouts and reorders;
 *   - pool2d_grad avg: pooling_backward on the plain layout, with the same
 *     bottom/right padding adjustment as the forward kernel;
 *   - batch_norm_grad: batch_normalization_backward with scale and shift.
 * float64 (gradient checks), max pooling, adaptive pooling, windows lying
 * wholly in the padding, a batch_norm_grad without X@GRAD and anything
 * oneDNN reports as unimplemented run direct OpenMP loops written once as a
 * macro template for float and double (PE_NN_GRAD_LOOPS), each the exact
 * adjoint of the forward loops in nn.c.
 *
 * Max pooling backward recomputes each window's argmax from X (first
 * maximum in row-major order wins ties, as Paddle and PyTorch do) instead
 * of keeping a oneDNN workspace from the forward: no state between the ops,
 * and the tie rule is ours rather than the primitive's. Out is an input of
 * pool2d_grad for Paddle compatibility and shape checking only.
 *
 * batch_norm_grad, training: with xhat = (x - mean) * inv (mean and inv =
 * 1/sqrt(var + eps) from SavedMean/SavedVariance, the batch statistics),
 * M = N*spatial, per channel:
 *   Bias@GRAD = sum dy,  Scale@GRAD = sum dy * xhat,
 *   X@GRAD = scale * inv * (dy - sum(dy)/M - xhat * sum(dy*xhat)/M).
 * is_test / use_global_stats: mean, var are the running Mean/Variance
 * (constants), X@GRAD = scale * inv * dy. oneDNN takes the variance, so the
 * saved inverse std is turned back into var = 1/inv^2 - eps per channel.
 * When the forward had nothing to normalise over (training with M == 1:
 * Y = X), X@GRAD = Y@GRAD and the parameter gradients are 0.
 *
 * Outputs whose arg is @EMPTY@ (NULL tensors) are not computed. Loops give
 * every output element to one thread (gather form), so they are
 * deterministic for any thread count.
 */
#include "ops/nn.h"
#include "ops/cpu/dnnl_util.h"
#include "ops/cpu/nn_common.h"

#include <math.h>
#include <string.h>

static void zero_if(pe_tensor *t) {
    if (t) memset(pe_tensor_data(t), 0, pe_tensor_nbytes(t));
}

/* ---- direct loops (float and double) ------------------------------------ */

/* The max pooling backward's fast case: 2x2 windows, stride 2, no padding,
 * X exactly tiled by the windows. */
static bool pool_is_max2x2(const pe_pool_geom *g) {
    return g->is_max && !g->adaptive && g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->pt == 0 &&
           g->pl == 0 && g->h == 2 * g->oh && g->w == 2 * g->ow;
}

#define PE_NN_GRAD_LOOPS(T, SUF)                                                                           \
    /* dy: [N, M, oh, ow], w: [M, C/groups, kh, kw] -> dx: [N, C, H, W] */                                \
    static void conv_bwd_data_##SUF(const pe_conv_geom *g, const T *dy, const T *w, T *dx, int nt) {       \
        const int64_t cg = g->c / g->groups, mg = g->m / g->groups, khw = g->kh * g->kw;                  \
        _Pragma("omp parallel for collapse(2) schedule(static) num_threads(nt)")                          \
        for (int64_t n = 0; n < g->n; n++)                                                                 \
            for (int64_t c = 0; c < g->c; c++) {                                                           \
                const int64_t m0 = (c / cg) * mg, ci = c % cg;                                             \
                T *dxp = dx + (n * g->c + c) * g->h * g->w;                                                \
                for (int64_t iy = 0; iy < g->h; iy++)                                                      \
                    for (int64_t ix = 0; ix < g->w; ix++) {                                                \
                        double acc = 0;                                                                    \
                        for (int64_t m = m0; m < m0 + mg; m++) {                                           \
                            const T *dyp = dy + (n * g->m + m) * g->oh * g->ow;                            \
                            const T *wp = w + (m * cg + ci) * khw;                                         \
                            for (int64_t ky = 0; ky < g->kh; ky++) {                                       \
                                const int64_t ty = iy + g->pt - ky * g->dh;                                \
                                if (ty < 0 || ty % g->sh) continue;                                        \
                                const int64_t oy = ty / g->sh;                                             \
                                if (oy >= g->oh) continue;                                                 \
                                for (int64_t kx = 0; kx < g->kw; kx++) {                                   \
                                    const int64_t tx = ix + g->pl - kx * g->dw;                            \
                                    if (tx < 0 || tx % g->sw) continue;                                    \
                                    const int64_t ox = tx / g->sw;                                         \
                                    if (ox >= g->ow) continue;                                             \
                                    acc += (double)dyp[oy * g->ow + ox] * wp[ky * g->kw + kx];             \
                                }                                                                          \
                            }                                                                              \
                        }                                                                                  \
                        dxp[iy * g->w + ix] = (T)acc;                                                      \
                    }                                                                                      \
            }                                                                                              \
    }                                                                                                      \
                                                                                                           \
    /* x: [N, C, H, W], dy: [N, M, oh, ow] -> dw: [M, C/groups, kh, kw] (NULL: skip), db: [M] (NULL:     \
     * skip) */                                                                                            \
    static void conv_bwd_weights_##SUF(const pe_conv_geom *g, const T *x, const T *dy, T *dw, T *db,       \
                                       int nt) {                                                           \
        const int64_t cg = g->c / g->groups, mg = g->m / g->groups, khw = g->kh * g->kw;                  \
        const int64_t plane = g->oh * g->ow;                                                               \
        if (dw) {                                                                                          \
            _Pragma("omp parallel for schedule(static) num_threads(nt)")                                  \
            for (int64_t e = 0; e < g->m * cg * khw; e++) {                                                \
                const int64_t m = e / (cg * khw), ci = e / khw % cg, ky = e % khw / g->kw, kx = e % g->kw; \
                const int64_t c = (m / mg) * cg + ci;                                                      \
                double acc = 0;                                                                            \
                for (int64_t n = 0; n < g->n; n++) {                                                       \
                    const T *xp = x + (n * g->c + c) * g->h * g->w;                                        \
                    const T *dyp = dy + (n * g->m + m) * plane;                                            \
                    for (int64_t oy = 0; oy < g->oh; oy++) {                                               \
                        const int64_t iy = oy * g->sh - g->pt + ky * g->dh;                                \
                        if (iy < 0 || iy >= g->h) continue;                                                \
                        for (int64_t ox = 0; ox < g->ow; ox++) {                                           \
                            const int64_t ix = ox * g->sw - g->pl + kx * g->dw;                            \
                            if (ix < 0 || ix >= g->w) continue;                                            \
                            acc += (double)dyp[oy * g->ow + ox] * xp[iy * g->w + ix];                      \
                        }                                                                                  \
                    }                                                                                      \
                }                                                                                          \
                dw[e] = (T)acc;                                                                            \
            }                                                                                              \
        }                                                                                                  \
        if (db) {                                                                                          \
            _Pragma("omp parallel for schedule(static) num_threads(nt)")                                  \
            for (int64_t m = 0; m < g->m; m++) {                                                           \
                double acc = 0;                                                                            \
                for (int64_t n = 0; n < g->n; n++) {                                                       \
                    const T *dyp = dy + (n * g->m + m) * plane;                                            \
                    for (int64_t i = 0; i < plane; i++) acc += dyp[i];                                     \
                }                                                                                          \
                db[m] = (T)acc;                                                                            \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
                                                                                                           \
    /* 2x2 max pooling, stride 2, no padding, H = 2 oh, W = 2 ow (the common case): the windows tile   \
     * x, so each dx cell is written once, branch-free: the window's first maximum in row-major order   \
     * (a strict > keeps the earlier one, as the general loop) gets 0 + dy, the others 0 (the same bits \
     * as the general loop's memset and +=, -0.0 included). The general loop's data-dependent branch    \
     * per cell was mispredicted about half the time: 15% of a CNN training step. */                   \
    static void pool_bwd_max2x2_##SUF(const pe_pool_geom *g, const T *x, const T *dy, T *dx, int nt) {    \
        const int64_t oh = g->oh, ow = g->ow, w = g->w;                                                    \
        _Pragma("omp parallel for schedule(static) num_threads(nt) if (nt > 1)")                          \
        for (int64_t nc = 0; nc < g->n * g->c; nc++) {                                                     \
            for (int64_t oy = 0; oy < oh; oy++) {                                                          \
                const T *r0 = x + (nc * g->h + 2 * oy) * w, *r1 = r0 + w;                                  \
                T *d0 = dx + (nc * g->h + 2 * oy) * w, *d1 = d0 + w;                                       \
                const T *dyr = dy + (nc * oh + oy) * ow;                                                   \
                for (int64_t ox = 0; ox < ow; ox++) {                                                      \
                    const T a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], e = r1[2 * ox + 1];        \
                    T best = a;                                                                            \
                    int k = 0;                                                                             \
                    k = b > best ? 1 : k; best = b > best ? b : best;                                      \
                    k = c > best ? 2 : k; best = c > best ? c : best;                                      \
                    k = e > best ? 3 : k;                                                                  \
                    const T d = (T)0 + dyr[ox];                                                            \
                    d0[2 * ox] = k == 0 ? d : (T)0;                                                        \
                    d0[2 * ox + 1] = k == 1 ? d : (T)0;                                                    \
                    d1[2 * ox] = k == 2 ? d : (T)0;                                                        \
                    d1[2 * ox + 1] = k == 3 ? d : (T)0;                                                    \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
                                                                                                           \
    /* x: [N, C, H, W], dy: [N, C, oh, ow] -> dx: [N, C, H, W]. Max: each window's gradient goes to    \
     * its first maximum; avg: spread over the window's cells with the forward divisor. */               \
    static void pool_bwd_##SUF(const pe_pool_geom *g, const T *x, const T *dy, T *dx, int nt) {           \
        if (pool_is_max2x2(g)) {                                                                           \
            pool_bwd_max2x2_##SUF(g, x, dy, dx, nt);                                                       \
            return;                                                                                        \
        }                                                                                                  \
        _Pragma("omp parallel for schedule(static) num_threads(nt)")                                      \
        for (int64_t nc = 0; nc < g->n * g->c; nc++) {                                                     \
            const T *xp = x + nc * g->h * g->w;                                                            \
            const T *dyp = dy + nc * g->oh * g->ow;                                                        \
            T *dxp = dx + nc * g->h * g->w;                                                                \
            memset(dxp, 0, (size_t)(g->h * g->w) * sizeof(T));                                             \
            for (int64_t oy = 0; oy < g->oh; oy++) {                                                       \
                int64_t h0, h1;                                                                            \
                pe_pool_window(g->adaptive, oy, g->h, g->oh, g->sh, g->kh, g->pt, &h0, &h1);               \
                for (int64_t ox = 0; ox < g->ow; ox++) {                                                   \
                    int64_t w0, w1;                                                                        \
                    pe_pool_window(g->adaptive, ox, g->w, g->ow, g->sw, g->kw, g->pl, &w0, &w1);           \
                    if (h1 <= h0 || w1 <= w0) continue; /* window wholly in the padding */                 \
                    const T d = dyp[oy * g->ow + ox];                                                      \
                    if (g->is_max) {                                                                       \
                        int64_t arg = h0 * g->w + w0;                                                      \
                        T best = xp[arg];                                                                  \
                        for (int64_t iy = h0; iy < h1; iy++)                                               \
                            for (int64_t ix = w0; ix < w1; ix++)                                           \
                                if (xp[iy * g->w + ix] > best) {                                           \
                                    best = xp[iy * g->w + ix];                                             \
                                    arg = iy * g->w + ix;                                                  \
                                }                                                                          \
                        dxp[arg] += d;                                                                     \
                    } else {                                                                               \
                        const int64_t cnt = (g->exclusive || g->adaptive) ? (h1 - h0) * (w1 - w0)          \
                                                                          : g->kh * g->kw;                 \
                        const T share = d / (T)cnt;                                                        \
                        for (int64_t iy = h0; iy < h1; iy++)                                               \
                            for (int64_t ix = w0; ix < w1; ix++) dxp[iy * g->w + ix] += share;             \
                    }                                                                                      \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
                                                                                                           \
    /* x, dy: [N, C, S] (cl: [N, S, C]); scale, mean: [C]; stat: [C] = inverse std (training) or running var \
     * (global) -> dx: like x, dscale, dbias: [C] (each NULL: skip). See the file comment. */            \
    static void bn_bwd_##SUF(const T *x, const T *dy, int64_t N, int64_t C, int64_t S, bool cl,            \
                             const T *scale, const T *mean, const T *stat, bool global, double eps, T *dx,  \
                             T *dscale, T *dbias, int nt) {                                                 \
        const double M = (double)(N * S);                                                                  \
        _Pragma("omp parallel for schedule(static) num_threads(nt)")                                      \
        for (int64_t c = 0; c < C; c++) {                                                                  \
            const double mu = mean[c], inv = global ? 1.0 / sqrt((double)stat[c] + eps) : (double)stat[c]; \
            double sdy = 0, sdyx = 0;                                                                      \
            for (int64_t n = 0; n < N; n++)                                                                \
                for (int64_t s = 0; s < S; s++) {                                                          \
                    const int64_t i = pe_bn_index(cl, n, c, s, C, S);                                                 \
                    sdy += dy[i];                                                                          \
                    sdyx += (double)dy[i] * (x[i] - mu);                                                   \
                }                                                                                          \
            sdyx *= inv; /* sum dy * xhat */                                                               \
            if (dbias) dbias[c] = (T)sdy;                                                                  \
            if (dscale) dscale[c] = (T)sdyx;                                                               \
            if (!dx) continue;                                                                             \
            const double a = scale[c] * inv, mdy = global ? 0 : sdy / M, mdyx = global ? 0 : sdyx / M;     \
            for (int64_t n = 0; n < N; n++)                                                                \
                for (int64_t s = 0; s < S; s++) {                                                          \
                    const int64_t i = pe_bn_index(cl, n, c, s, C, S);                                                 \
                    dx[i] = (T)(a * (dy[i] - mdy - (x[i] - mu) * inv * mdyx));                             \
                }                                                                                          \
        }                                                                                                  \
    }

PE_NN_GRAD_LOOPS(float, f32)
PE_NN_GRAD_LOOPS(double, f64)

/* ---- conv2d_grad -------------------------------------------------------- */

typedef struct conv_bwd_geom {
    const pe_conv_geom *g;
    bool with_bias;            /* backward weights: also the bias gradient */
} conv_bwd_geom;

/* The descriptors both conv backward primitives share: plain user layouts,
 * "any" layouts for the primitive, and the forward (training) hint. */
typedef struct conv_mds {
    dnnl_memory_desc_t src, wei, dst, bia, src_any, wei_any, dst_any;
    dnnl_dims_t strides, dil, pad_l, pad_r;
    dnnl_convolution_desc_t fwd;
} conv_mds;

static pe_status conv_mds_init(conv_mds *d, const pe_conv_geom *g, bool with_bias) {
    const int64_t sd[4] = {g->n, g->c, g->h, g->w}, dd[4] = {g->n, g->m, g->oh, g->ow}, bd[1] = {g->m};
    const int64_t wd1[4] = {g->m, g->c, g->kh, g->kw};
    const int64_t wdg[5] = {g->groups, g->m / g->groups, g->c / g->groups, g->kh, g->kw};
    const bool grouped = g->groups > 1;
    const dnnl_format_tag_t act = g->nhwc ? dnnl_nhwc : dnnl_nchw, act_any = g->nhwc ? dnnl_nhwc : dnnl_format_tag_any;
    PE_CHECK(pe_dnnl_md_plain(&d->src, 4, sd, act));
    PE_CHECK(pe_dnnl_md_plain(&d->dst, 4, dd, act));
    PE_CHECK(pe_dnnl_md_plain(&d->bia, 1, bd, dnnl_x));
    PE_CHECK(grouped ? pe_dnnl_md_plain(&d->wei, 5, wdg, dnnl_goihw) : pe_dnnl_md_plain(&d->wei, 4, wd1, dnnl_oihw));
    PE_CHECK(pe_dnnl_md_plain(&d->src_any, 4, sd, act_any));
    PE_CHECK(pe_dnnl_md_plain(&d->dst_any, 4, dd, act_any));
    PE_CHECK(grouped ? pe_dnnl_md_plain(&d->wei_any, 5, wdg, dnnl_format_tag_any)
                     : pe_dnnl_md_plain(&d->wei_any, 4, wd1, dnnl_format_tag_any));
    d->strides[0] = g->sh; d->strides[1] = g->sw;
    d->dil[0] = g->dh - 1; d->dil[1] = g->dw - 1;
    d->pad_l[0] = g->pt; d->pad_l[1] = g->pl;
    d->pad_r[0] = g->pb; d->pad_r[1] = g->pr;
    dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(
        &d->fwd, dnnl_forward_training, dnnl_convolution_direct, &d->src_any, &d->wei_any, with_bias ? &d->bia : NULL,
        &d->dst_any, d->strides, d->dil, d->pad_l, d->pad_r);
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: convolution descriptor rejected (%s)", pe_dnnl_status_str(s));
    return PE_OK;
}

/* handles: Output@GRAD, Filter -> Input@GRAD */
static pe_status conv_bwd_data_build(pe_dnnl_entry *e, const void *geom, int nt) {
    const conv_bwd_geom *cg = geom;
    conv_mds d;
    PE_CHECK(conv_mds_init(&d, cg->g, false));
    dnnl_convolution_desc_t bd;
    dnnl_status_t s = dnnl_dilated_convolution_backward_data_desc_init(
        &bd, dnnl_convolution_direct, &d.src_any, &d.wei_any, &d.dst_any, d.strides, d.dil, d.pad_l, d.pad_r);
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: convolution backward-data descriptor rejected (%s)",
                        pe_dnnl_status_str(s));
    PE_CHECK(pe_dnnl_entry_init_bwd(e, &bd, &d.fwd, nt));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_DST, &d.dst, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_WEIGHTS, &d.wei, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_SRC, &d.src, PE_DNNL_OUT));
    return PE_OK;
}

/* handles: Input, Output@GRAD -> Filter@GRAD [, Bias@GRAD] */
static pe_status conv_bwd_weights_build(pe_dnnl_entry *e, const void *geom, int nt) {
    const conv_bwd_geom *cg = geom;
    conv_mds d;
    PE_CHECK(conv_mds_init(&d, cg->g, cg->with_bias));
    dnnl_convolution_desc_t bd;
    dnnl_status_t s = dnnl_dilated_convolution_backward_weights_desc_init(
        &bd, dnnl_convolution_direct, &d.src_any, &d.wei_any, cg->with_bias ? &d.bia : NULL, &d.dst_any, d.strides,
        d.dil, d.pad_l, d.pad_r);
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: convolution backward-weights descriptor rejected (%s)",
                        pe_dnnl_status_str(s));
    PE_CHECK(pe_dnnl_entry_init_bwd(e, &bd, &d.fwd, nt));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SRC, &d.src, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_DST, &d.dst, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_WEIGHTS, &d.wei, PE_DNNL_OUT));
    if (cg->with_bias) PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_BIAS, &d.bia, PE_DNNL_OUT));
    return PE_OK;
}

/* The oneDNN keys of conv2d_grad's two primitives (the bias gradient rides
 * along with the weights when both are wanted). */
static conv_bwd_geom conv_bwd_data_key(const pe_conv_geom *g, pe_dnnl_key *key) {
    pe_conv_key(key, PE_DNNL_CONV_BWD_DATA, g, false);
    return (conv_bwd_geom){g, false};
}

static conv_bwd_geom conv_bwd_weights_key(const pe_conv_geom *g, bool with_bias, pe_dnnl_key *key) {
    pe_conv_key(key, PE_DNNL_CONV_BWD_WEIGHTS, g, with_bias);
    return (conv_bwd_geom){g, with_bias};
}

/* The larger of the wanted primitives' workspaces (they run one after the
 * other, in the same bytes); fp64 and empty batches run the loops. */
pe_status pe_nn_conv_bwd_workspace(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, bool data, bool weights,
                                   bool bias, size_t *bytes) {
    pe_dnnl_key key;
    if (g->n * g->m * g->oh * g->ow == 0 || dt == PE_DTYPE_FP64) return PE_OK;
    if (data) {
        const conv_bwd_geom cg = conv_bwd_data_key(g, &key);
        PE_CHECK(pe_nn_dnnl_workspace(ctx, &key, conv_bwd_data_build, &cg, bytes));
    }
    if (weights) {
        const conv_bwd_geom cg = conv_bwd_weights_key(g, bias, &key);
        PE_CHECK(pe_nn_dnnl_workspace(ctx, &key, conv_bwd_weights_build, &cg, bytes));
    }
    return PE_OK;
}

/* dy: [N, oh, ow, M] -> db: [M], summed in the order of the NCHW loops
 * (n, then the plane) in double, as conv_bwd_weights does. */
static void bias_grad_nhwc_f32(const pe_conv_geom *g, const float *dy, float *db) {
    const int64_t plane = g->oh * g->ow;
    for (int64_t m = 0; m < g->m; m++) {
        double acc = 0;
        for (int64_t n = 0; n < g->n; n++)
            for (int64_t p = 0; p < plane; p++) acc += dy[(n * plane + p) * g->m + m];
        db[m] = (float)acc;
    }
}

/* dy: [N, M, oh, ow], w: [M, C/groups, kh, kw] -> dx: [N, C, H, W] (0 when dy is empty) */
pe_status pe_nn_conv_bwd_data(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, const void *dy,
                              const void *w, void *dx) {
    const int nt = pe_kernel_threads(ctx);
    const size_t esz = dt == PE_DTYPE_FP64 ? sizeof(double) : sizeof(float);
    if (g->n * g->m * g->oh * g->ow == 0) { /* empty batch: nothing flows back */
        memset(dx, 0, (size_t)(g->n * g->c * g->h * g->w) * esz);
        return PE_OK;
    }
    if (g->nhwc && dt == PE_DTYPE_FP64) return pe_nn_nhwc_unsupported(ctx, dt, "conv2d_grad");
    if (dt == PE_DTYPE_FP64) {
        conv_bwd_data_f64(g, dy, w, dx, nt);
        return PE_OK;
    }
    pe_dnnl_key key;
    bool fallback;
    const conv_bwd_geom cg = conv_bwd_data_key(g, &key);
    void *const h[3] = {(void *)dy, (void *)w, dx};
    PE_CHECK(pe_nn_dnnl_run(ctx, &key, conv_bwd_data_build, &cg, h, &fallback));
    if (fallback && g->nhwc) return pe_nn_nhwc_unsupported(ctx, dt, "oneDNN has no convolution for this geometry");
    if (fallback) conv_bwd_data_f32(g, dy, w, dx, nt);
    return PE_OK;
}

/* x: [N, C, H, W], dy: [N, M, oh, ow] -> dw?: [M, C/groups, kh, kw], db?: [M] (0 when dy is empty) */
pe_status pe_nn_conv_bwd_weights(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, const void *x,
                                 const void *dy, void *dw, void *db) {
    const int nt = pe_kernel_threads(ctx);
    const size_t esz = dt == PE_DTYPE_FP64 ? sizeof(double) : sizeof(float);
    if (g->n * g->m * g->oh * g->ow == 0) {
        if (dw) memset(dw, 0, (size_t)(g->m * (g->c / g->groups) * g->kh * g->kw) * esz);
        if (db) memset(db, 0, (size_t)g->m * esz);
        return PE_OK;
    }
    if (g->nhwc && dt == PE_DTYPE_FP64) return pe_nn_nhwc_unsupported(ctx, dt, "conv2d_grad");
    if (dt == PE_DTYPE_FP64) {
        if (dw || db) conv_bwd_weights_f64(g, x, dy, dw, db, nt);
        return PE_OK;
    }
    if (!dw && g->nhwc) {
        if (db) bias_grad_nhwc_f32(g, dy, db);
        return PE_OK;
    }
    if (!dw) {
        if (db) conv_bwd_weights_f32(g, x, dy, NULL, db, nt);
        return PE_OK;
    }
    pe_dnnl_key key;
    bool fallback;
    const conv_bwd_geom cg = conv_bwd_weights_key(g, db != NULL, &key);
    void *const h[4] = {(void *)x, (void *)dy, dw, db};
    PE_CHECK(pe_nn_dnnl_run(ctx, &key, conv_bwd_weights_build, &cg, h, &fallback));
    if (fallback && g->nhwc) return pe_nn_nhwc_unsupported(ctx, dt, "oneDNN has no convolution for this geometry");
    if (fallback) conv_bwd_weights_f32(g, x, dy, dw, db, nt);
    return PE_OK;
}

pe_status pe_cpu_conv2d_grad_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    pe_conv_geom g;
    *bytes = 0;
    PE_CHECK(pe_conv_geom_get(ctx, &g));
    return pe_nn_conv_bwd_workspace(ctx, &g, pe_ctx_in(ctx, "Input")->dtype, pe_ctx_out(ctx, "Input@GRAD") != NULL,
                                    pe_ctx_out(ctx, "Filter@GRAD") != NULL, pe_ctx_out(ctx, "Bias@GRAD") != NULL,
                                    bytes);
}

/* Input: [N, C, H, W], Filter: [M, C/groups, kh, kw], Bias?: [M], Output@GRAD: [N, M, oh, ow] ->
 * Input@GRAD?: [N, C, H, W], Filter@GRAD?: [M, C/groups, kh, kw], Bias@GRAD?: [M] */
pe_status pe_cpu_conv2d_grad(const pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter"), *dy = pe_ctx_in(ctx, "Output@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Input@GRAD"), *df = pe_ctx_out(ctx, "Filter@GRAD");
    pe_tensor *db = pe_ctx_out(ctx, "Bias@GRAD");
    if (dx) PE_CHECK(pe_nn_conv_bwd_data(ctx, &g, x->dtype, pe_tensor_data(dy), pe_tensor_data(f), pe_tensor_data(dx)));
    if (df || db)
        PE_CHECK(pe_nn_conv_bwd_weights(ctx, &g, x->dtype, pe_tensor_data(x), pe_tensor_data(dy), pe_data_or_null(df),
                                        pe_data_or_null(db)));
    return PE_OK;
}

/* ---- pool2d_grad -------------------------------------------------------- */

/* handles: Out@GRAD -> X@GRAD (average pooling only: max needs no workspace here) */
static pe_status pool_bwd_build(pe_dnnl_entry *e, const void *geom, int nt) {
    const pe_pool_dnnl_geom *pg = geom;
    const pe_pool_geom *g = pg->g;
    dnnl_memory_desc_t src, dst;
    PE_CHECK(pe_pool_mds(g, &src, &dst));
    const dnnl_alg_kind_t alg = g->exclusive ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_avg_include_padding;
    dnnl_dims_t strides = {g->sh, g->sw}, kernel = {g->kh, g->kw}, dil = {0, 0};
    dnnl_dims_t pad_l = {g->pt, g->pl}, pad_r = {pg->pb, pg->pr};
    dnnl_pooling_v2_desc_t fd, bd;
    dnnl_status_t s = dnnl_pooling_v2_forward_desc_init(&fd, dnnl_forward_training, alg, &src, &dst, strides, kernel,
                                                        dil, pad_l, pad_r);
    if (s == dnnl_success)
        s = dnnl_pooling_v2_backward_desc_init(&bd, alg, &src, &dst, strides, kernel, dil, pad_l, pad_r);
    if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) return pe_dnnl_entry_set_unsupported(e);
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: pooling backward descriptor rejected (%s)", pe_dnnl_status_str(s));
    PE_CHECK(pe_dnnl_entry_init_bwd(e, &bd, &fd, nt));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_DST, &dst, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_SRC, &src, PE_DNNL_OUT));
    return PE_OK;
}

/* Max pooling's gradient on NHWC tensors, float32: x [N, H, W, C], dy
 * [N, oh, ow, C] -> dx [N, H, W, C]. The NCHW loops' rule and order (each
 * window's gradient to its first maximum in row-major order, a strict >;
 * windows added in (oy, ox) order onto zeros), so the bits are the NCHW
 * kernel's transposed; channels innermost, in blocks of POOL_NHWC_CB, so the
 * comparisons vectorize. One thread per image. */
enum { POOL_NHWC_CB = 64 };

/* The 2x2 / stride 2 windows tiling the plane (pool_is_max2x2): each cell
 * written once, no zeroing, no scatter; the channels vectorize. The same
 * choice and bits as pool_bwd_max2x2 (NCHW). */
static void pool_bwd_max2x2_nhwc_f32(const pe_pool_geom *g, const float *x, const float *dy, float *dx, int nt) {
    const int64_t C = g->c, W = g->w, oh = g->oh, ow = g->ow;
    _Pragma("omp parallel for schedule(static) num_threads(nt) if (nt > 1)")
    for (int64_t row = 0; row < g->n * oh; row++) { /* (n, oy) */
        const int64_t n = row / oh, oy = row % oh;
        const int64_t r0 = (n * g->h + 2 * oy) * W, r1 = r0 + W; /* cells of the window's two input rows */
        for (int64_t ox = 0; ox < ow; ox++) {
            const float *xa = x + (r0 + 2 * ox) * C, *xb = xa + C, *xc = x + (r1 + 2 * ox) * C, *xe = xc + C;
            float *da = dx + (r0 + 2 * ox) * C, *db = da + C, *dc = dx + (r1 + 2 * ox) * C, *de = dc + C;
            const float *d = dy + (row * ow + ox) * C;
            _Pragma("omp simd")
            for (int64_t c = 0; c < C; c++) {
                const float a = xa[c], b = xb[c], cc = xc[c], e = xe[c];
                float best = a;
                int k = 0;
                k = b > best ? 1 : k; best = b > best ? b : best;
                k = cc > best ? 2 : k; best = cc > best ? cc : best;
                k = e > best ? 3 : k;
                const float v = 0.0f + d[c];
                da[c] = k == 0 ? v : 0.0f;
                db[c] = k == 1 ? v : 0.0f;
                dc[c] = k == 2 ? v : 0.0f;
                de[c] = k == 3 ? v : 0.0f;
            }
        }
    }
}

static void pool_bwd_max_nhwc_f32(const pe_pool_geom *g, const float *x, const float *dy, float *dx, int nt) {
    if (pool_is_max2x2(g)) {
        pool_bwd_max2x2_nhwc_f32(g, x, dy, dx, nt);
        return;
    }
    const int64_t C = g->c, H = g->h, W = g->w;
    _Pragma("omp parallel for schedule(static) num_threads(nt) if (nt > 1)")
    for (int64_t n = 0; n < g->n; n++) {
        const float *xn = x + n * H * W * C;
        float *dxn = dx + n * H * W * C;
        memset(dxn, 0, (size_t)(H * W * C) * sizeof(float));
        float best[POOL_NHWC_CB];
        int64_t arg[POOL_NHWC_CB];
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t h0, h1;
            pe_pool_window(false, oy, H, g->oh, g->sh, g->kh, g->pt, &h0, &h1);
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t w0, w1;
                pe_pool_window(false, ox, W, g->ow, g->sw, g->kw, g->pl, &w0, &w1);
                if (h1 <= h0 || w1 <= w0) continue; /* wholly in the padding (not routed here) */
                const float *dyp = dy + ((n * g->oh + oy) * g->ow + ox) * C;
                for (int64_t c0 = 0; c0 < C; c0 += POOL_NHWC_CB) {
                    const int64_t cb = pe_i64_min(POOL_NHWC_CB, C - c0);
                    const int64_t first = h0 * W + w0;
                    for (int64_t c = 0; c < cb; c++) {
                        best[c] = xn[first * C + c0 + c];
                        arg[c] = first;
                    }
                    for (int64_t iy = h0; iy < h1; iy++)
                        for (int64_t ix = w0; ix < w1; ix++) {
                            const int64_t cell = iy * W + ix;
                            const float *xc = xn + cell * C + c0;
                            for (int64_t c = 0; c < cb; c++) {
                                const bool gt = xc[c] > best[c];
                                best[c] = gt ? xc[c] : best[c];
                                arg[c] = gt ? cell : arg[c];
                            }
                        }
                    for (int64_t c = 0; c < cb; c++) dxn[arg[c] * C + c0 + c] += dyp[c0 + c];
                }
            }
        }
    }
}

/* Whether pool2d_grad runs on oneDNN for ctx's shapes (geometry and key in
 * *pg, *key): the forward kernel's routing, plus max pooling on the loops. */
static bool pool_bwd_on_dnnl(const pe_op_ctx *ctx, const pe_pool_geom *g, pe_pool_dnnl_geom *pg, pe_dnnl_key *key) {
    if (!pe_ctx_out(ctx, "X@GRAD") || pe_tensor_numel(pe_ctx_in(ctx, "Out@GRAD")) == 0 ||
        pe_ctx_in(ctx, "X")->dtype == PE_DTYPE_FP64 || g->is_max || g->adaptive || pe_pool_empty_window(g))
        return false;
    *pg = pe_pool_dnnl_geom_make(g);
    pe_pool_key(key, PE_DNNL_POOL_BWD, g, pg);
    return true;
}

pe_status pe_cpu_pool2d_grad_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    pe_pool_geom g;
    pe_pool_dnnl_geom pg;
    pe_dnnl_key key;
    *bytes = 0;
    PE_CHECK(pe_pool_geom_get(ctx, &g));
    return pool_bwd_on_dnnl(ctx, &g, &pg, &key) ? pe_nn_dnnl_workspace(ctx, &key, pool_bwd_build, &pg, bytes) : PE_OK;
}

/* X: [N, C, H, W], Out, Out@GRAD: [N, C, oh, ow] -> X@GRAD: [N, C, H, W] (NHWC: each [N, H, W, C]) */
pe_status pe_cpu_pool2d_grad(const pe_op_ctx *ctx) {
    pe_pool_geom g;
    PE_CHECK(pe_pool_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *dy = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    if (!dx) return PE_OK;
    if (pe_tensor_numel(dy) == 0) {
        zero_if(dx);
        return PE_OK;
    }
    const int nt = pe_kernel_threads(ctx);
    pe_pool_dnnl_geom pg;
    pe_dnnl_key key;
    if (!pool_bwd_on_dnnl(ctx, &g, &pg, &key)) {
        if (g.nhwc && g.is_max && x->dtype == PE_DTYPE_FP32 && !g.adaptive && !pe_pool_empty_window(&g)) {
            pool_bwd_max_nhwc_f32(&g, pe_tensor_data(x), pe_tensor_data(dy), pe_tensor_data(dx), nt);
            return PE_OK;
        }
        if (g.nhwc) return pe_nn_nhwc_unsupported(ctx, x->dtype, "pool2d_grad: adaptive, float64 or an all-padding window");
        if (x->dtype == PE_DTYPE_FP64) pool_bwd_f64(&g, pe_tensor_data(x), pe_tensor_data(dy), pe_tensor_data(dx), nt);
        else pool_bwd_f32(&g, pe_tensor_data(x), pe_tensor_data(dy), pe_tensor_data(dx), nt);
        return PE_OK;
    }
    void *const h[2] = {pe_tensor_data(dy), pe_tensor_data(dx)};
    bool fallback;
    PE_CHECK(pe_nn_dnnl_run(ctx, &key, pool_bwd_build, &pg, h, &fallback));
    if (fallback && g.nhwc) return pe_nn_nhwc_unsupported(ctx, x->dtype, "oneDNN has no pooling for this geometry");
    if (fallback) pool_bwd_f32(&g, pe_tensor_data(x), pe_tensor_data(dy), pe_tensor_data(dx), nt);
    return PE_OK;
}

/* ---- batch_norm_grad ---------------------------------------------------- */

/* handles: X, mean, variance, Y@GRAD, Scale, Bias -> X@GRAD, Scale@GRAD, Bias@GRAD
 * (oneDNN wants the shift as an input too, though the gradients do not use it) */
static pe_status bn_bwd_build(pe_dnnl_entry *e, const void *geom, int nt) {
    const pe_bn_geom *b = geom;
    dnnl_memory_desc_t data, chan;
    PE_CHECK(pe_bn_mds(b, &data, &chan));
    const unsigned flags = dnnl_use_scale | dnnl_use_shift | (b->global ? dnnl_use_global_stats : 0);
    dnnl_batch_normalization_desc_t fd, bd;
    dnnl_status_t s = dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &data, b->eps, flags);
    if (s == dnnl_success) s = dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &data, &data, b->eps, flags);
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: batch normalization backward descriptor rejected (%s)",
                        pe_dnnl_status_str(s));
    PE_CHECK(pe_dnnl_entry_init_bwd(e, &bd, &fd, nt));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SRC, &data, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_MEAN, &chan, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_VARIANCE, &chan, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_DST, &data, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SCALE, &chan, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SHIFT, &chan, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_SRC, &data, PE_DNNL_OUT));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_SCALE, &chan, PE_DNNL_OUT));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DIFF_SHIFT, &chan, PE_DNNL_OUT));
    /* variance (training), and the parameter gradients nobody asked for */
    pe_dnnl_entry_reserve(e, 3 * (size_t)b->dims[1] * sizeof(float));
    return PE_OK;
}

/* Whether batch_norm_grad runs on oneDNN for ctx's shapes (geometry and
 * key in *bg, *key): fp32, something was normalised, X@GRAD wanted (X's
 * layout: nhwc, C channels). */
static bool bn_bwd_on_dnnl(const pe_op_ctx *ctx, bool nhwc, int64_t C, pe_bn_geom *bg, pe_dnnl_key *key) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const bool global = pe_ctx_bool(ctx, "is_test") || pe_ctx_bool(ctx, "use_global_stats");
    if (x->dtype == PE_DTYPE_FP64 || !pe_ctx_out(ctx, "X@GRAD") || pe_bn_nothing_to_normalise(x, C, global))
        return false;
    *bg = pe_bn_geom_make(x, nhwc, global, pe_ctx_float(ctx, "epsilon"));
    pe_bn_key(key, PE_DNNL_BNORM_BWD, bg);
    return true;
}

pe_status pe_cpu_batch_norm_grad_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    pe_bn_geom bg;
    pe_dnnl_key key;
    bool nhwc;
    int64_t C;
    *bytes = 0;
    PE_CHECK(pe_bn_layout(ctx, pe_ctx_in(ctx, "X"), &nhwc, &C));
    return bn_bwd_on_dnnl(ctx, nhwc, C, &bg, &key) ? pe_nn_dnnl_workspace(ctx, &key, bn_bwd_build, &bg, bytes) : PE_OK;
}

/* X: [N, C, ...], Scale, Bias: [C], SavedMean/SavedVariance (training) or
 * Mean/Variance (global): [C], Y@GRAD: like X ->
 * X@GRAD?: like X, Scale@GRAD?, Bias@GRAD?: [C] (see the file comment). */
pe_status pe_cpu_batch_norm_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *scale = pe_ctx_in(ctx, "Scale"), *dy = pe_ctx_in(ctx, "Y@GRAD");
    const pe_tensor *bias = pe_ctx_in(ctx, "Bias");
    const bool global = pe_ctx_bool(ctx, "is_test") || pe_ctx_bool(ctx, "use_global_stats");
    const pe_tensor *mean = pe_ctx_in(ctx, global ? "Mean" : "SavedMean");
    const pe_tensor *stat = pe_ctx_in(ctx, global ? "Variance" : "SavedVariance");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dscale = pe_ctx_out(ctx, "Scale@GRAD");
    pe_tensor *dbias = pe_ctx_out(ctx, "Bias@GRAD");
    const double eps = pe_ctx_float(ctx, "epsilon");
    const int nt = pe_kernel_threads(ctx);
    bool nhwc;
    int64_t C;
    PE_CHECK(pe_bn_layout(ctx, x, &nhwc, &C));
    const int64_t N = x->dims[0];
    const int64_t S = (N * C) != 0 ? pe_tensor_numel(x) / (N * C) : 0;

    if (pe_bn_nothing_to_normalise(x, C, global)) {
        /* The forward was Y = X (nothing to normalise over). */
        if (dx && pe_tensor_numel(x)) memcpy(pe_tensor_data(dx), pe_tensor_data(dy), pe_tensor_nbytes(dy));
        zero_if(dscale);
        zero_if(dbias);
        return PE_OK;
    }
    if (x->dtype == PE_DTYPE_FP64 || !dx) {
        if (x->dtype == PE_DTYPE_FP64)
            bn_bwd_f64(pe_tensor_data(x), pe_tensor_data(dy), N, C, S, nhwc, pe_tensor_data(scale), pe_tensor_data(mean),
                       pe_tensor_data(stat), global, eps, pe_data_or_null(dx), pe_data_or_null(dscale), pe_data_or_null(dbias),
                       nt);
        else
            bn_bwd_f32(pe_tensor_data(x), pe_tensor_data(dy), N, C, S, nhwc, pe_tensor_data(scale), pe_tensor_data(mean),
                       pe_tensor_data(stat), global, eps, NULL, pe_data_or_null(dscale), pe_data_or_null(dbias), nt);
        return PE_OK;
    }

    pe_bn_geom bg;
    pe_dnnl_key key;
    pe_dnnl_entry *e = NULL;
    if (bn_bwd_on_dnnl(ctx, nhwc, C, &bg, &key)) PE_CHECK(pe_nn_dnnl_acquire(ctx, &key, bn_bwd_build, &bg, &e));
    if (!e) {
        bn_bwd_f32(pe_tensor_data(x), pe_tensor_data(dy), N, C, S, nhwc, pe_tensor_data(scale), pe_tensor_data(mean),
                   pe_tensor_data(stat), global, eps, pe_tensor_data(dx), pe_data_or_null(dscale), pe_data_or_null(dbias),
                   nt);
        return PE_OK;
    }
    /* The buffer is the entry's: it stays checked out until the run is done. */
    float *buf = pe_dnnl_entry_buffer(e);
    const float *var = pe_tensor_data(stat);
    if (!global) {
        const float *inv = var;
        for (int64_t c = 0; c < C; c++) buf[c] = (float)(1.0 / ((double)inv[c] * inv[c]) - eps);
        var = buf;
    }
    void *const h[9] = {pe_tensor_data(x), pe_tensor_data(mean), (void *)var, pe_tensor_data(dy),
                        pe_tensor_data(scale), pe_tensor_data(bias), pe_tensor_data(dx), dscale ? pe_tensor_data(dscale) : buf + C,
                        dbias ? pe_tensor_data(dbias) : buf + 2 * C};
    pe_status st = pe_dnnl_entry_run(e, h, nt);
    pe_dnnl_release(e);
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    return PE_OK;
}
