/* ops/cpu/nn.c — CPU kernels of the nn family: conv2d (and depthwise_conv2d,
 * the same kernel), pool2d, batch_norm. The convolution itself is
 * pe_nn_conv_fwd on an explicit geometry, which conv2d_transpose's gradient
 * (deconv.c) calls too.
 *
 * How: float32 goes through oneDNN (the CPU counterpart of cuDNN): conv2d
 * lets oneDNN pick its preferred (blocked) layouts and reorders the plain
 * NCHW tensors into copies in the place's oneDNN workspace; pool2d and
 * batch_norm run on the plain layout directly. Primitives and memory objects
 * come from the cache in dnnl_util.c keyed by every shape/attr the primitive
 * depends on plus the thread count, their scratch bytes from the place's
 * workspace pool (PE's allocator), so a steady-state run creates nothing.
 * float64 (used by gradient checks) and the cases oneDNN cannot express —
 * adaptive pooling, windows lying wholly in the padding, any configuration
 * oneDNN reports as unimplemented — run direct OpenMP loops written once as
 * a macro template for float and double (PE_NN_LOOPS below).
 *
 * Semantics follow Paddle's CPU kernels:
 *   - pool2d avg: divisor = valid (non-padding) cells when exclusive or
 *     adaptive, else kh*kw; max ignores padding; a window with no valid cell
 *     (possible with ceil_mode) gives 0 for avg (Paddle: 0/0) and the lowest
 *     finite value for max (Paddle's initial value).
 *   - batch_norm training: normalise with the batch mean and the *biased*
 *     batch variance (sum (x-mean)^2 / (N*H*W)); the running variance is
 *     updated with that same biased variance, as Paddle's CPU kernel does
 *     (PyTorch and cuDNN use the unbiased one for the running update):
 *       MeanOut     = momentum * Mean     + (1 - momentum) * batch_mean
 *       VarianceOut = momentum * Variance + (1 - momentum) * batch_var
 *       SavedMean = batch_mean, SavedVariance = 1 / sqrt(batch_var + eps).
 *     With N*H*W == 1, Y = X and the running stats are left unchanged
 *     (SavedMean = SavedVariance = 0), as in Paddle.
 *   - batch_norm with is_test or use_global_stats: normalise with Mean and
 *     Variance; MeanOut/VarianceOut = Mean/Variance; SavedMean = Mean,
 *     SavedVariance = 1 / sqrt(Variance + eps).
 * MeanOut/VarianceOut are normally the very tensors Mean/Variance (in-place):
 * every update is per channel, read-then-write, and copies are skipped when
 * source and destination coincide.
 *
 * The gradient kernels are in ops/cpu/nn_grad.c.
 *
 * Threads: oneDNN is the OpenMP build; pe_dnnl_entry_run sets the calling
 * thread's OpenMP thread count to ctx->num_threads for the run. The loops
 * use num_threads(ctx->num_threads) and give each output to one thread, so
 * results do not depend on the thread count.
 */
#include "ops/nn.h"
#include "ops/cpu/dnnl_util.h"
#include "ops/cpu/nn_common.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- direct loops (float and double) ------------------------------------ */

#define PE_NN_LOOPS(T, SUF, LOWEST)                                                                       \
    /* x: [N, C, H, W], w: [M, C/groups, kh, kw], b: [M] or NULL -> y: [N, M, oh, ow] */                 \
    static void conv_direct_##SUF(const pe_conv_geom *g, const T *x, const T *w, const T *b, T *y,        \
                                  int nt) {                                                              \
        const int64_t cg = g->c / g->groups, mg = g->m / g->groups, khw = g->kh * g->kw;                 \
        _Pragma("omp parallel for collapse(2) schedule(static) num_threads(nt)")                         \
        for (int64_t n = 0; n < g->n; n++)                                                                \
            for (int64_t m = 0; m < g->m; m++) {                                                          \
                const int64_t c0 = (m / mg) * cg;                                                         \
                const T *wm = w + m * cg * khw;                                                           \
                T *ym = y + (n * g->m + m) * g->oh * g->ow;                                               \
                for (int64_t oy = 0; oy < g->oh; oy++)                                                    \
                    for (int64_t ox = 0; ox < g->ow; ox++) {                                              \
                        T acc = b ? b[m] : (T)0;                                                          \
                        for (int64_t ci = 0; ci < cg; ci++) {                                             \
                            const T *xc = x + (n * g->c + c0 + ci) * g->h * g->w;                         \
                            const T *wc = wm + ci * khw;                                                  \
                            for (int64_t ky = 0; ky < g->kh; ky++) {                                      \
                                const int64_t iy = oy * g->sh - g->pt + ky * g->dh;                       \
                                if (iy < 0 || iy >= g->h) continue;                                       \
                                for (int64_t kx = 0; kx < g->kw; kx++) {                                  \
                                    const int64_t ix = ox * g->sw - g->pl + kx * g->dw;                   \
                                    if (ix < 0 || ix >= g->w) continue;                                   \
                                    acc += xc[iy * g->w + ix] * wc[ky * g->kw + kx];                      \
                                }                                                                         \
                            }                                                                             \
                        }                                                                                 \
                        ym[oy * g->ow + ox] = acc;                                                        \
                    }                                                                                     \
            }                                                                                             \
    }                                                                                                     \
                                                                                                          \
    /* x: [N, C, H, W] -> y: [N, C, oh, ow] */                                                            \
    static void pool_direct_##SUF(const pe_pool_geom *g, const T *x, T *y, int nt) {                      \
        _Pragma("omp parallel for schedule(static) num_threads(nt)")                                     \
        for (int64_t nc = 0; nc < g->n * g->c; nc++) {                                                    \
            const T *xp = x + nc * g->h * g->w;                                                           \
            T *yp = y + nc * g->oh * g->ow;                                                               \
            for (int64_t oy = 0; oy < g->oh; oy++) {                                                      \
                int64_t h0, h1;                                                                           \
                pe_pool_window(g->adaptive, oy, g->h, g->oh, g->sh, g->kh, g->pt, &h0, &h1);              \
                for (int64_t ox = 0; ox < g->ow; ox++) {                                                  \
                    int64_t w0, w1;                                                                       \
                    pe_pool_window(g->adaptive, ox, g->w, g->ow, g->sw, g->kw, g->pl, &w0, &w1);          \
                    T acc = g->is_max ? (LOWEST) : (T)0;                                                  \
                    for (int64_t iy = h0; iy < h1; iy++)                                                  \
                        for (int64_t ix = w0; ix < w1; ix++) {                                            \
                            const T v = xp[iy * g->w + ix];                                               \
                            if (g->is_max) acc = v > acc ? v : acc;                                       \
                            else acc += v;                                                                \
                        }                                                                                 \
                    if (!g->is_max) {                                                                     \
                        const int64_t cnt = (g->exclusive || g->adaptive) ? (h1 - h0) * (w1 - w0)         \
                                                                          : g->kh * g->kw;                \
                        acc = cnt > 0 ? acc / (T)cnt : (T)0;                                              \
                    }                                                                                     \
                    yp[oy * g->ow + ox] = acc;                                                            \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
                                                                                                          \
    /* x: [N, C, S] (cl: [N, S, C]) -> y, and the per-channel statistics outputs (any may be           \
     * NULL; mean_out/var_out may be mean/var themselves: each channel reads                             \
     * its inputs before writing). See the file comment for the formulas. */                             \
    static void bn_direct_##SUF(const T *x, T *y, int64_t N, int64_t C, int64_t S, bool cl, const T *scale, \
                                const T *bias, const T *mean, const T *var, T *mean_out, T *var_out,      \
                                T *saved_mean, T *saved_var, bool global, double momentum, double eps,    \
                                int nt) {                                                                 \
        _Pragma("omp parallel for schedule(static) num_threads(nt)")                                     \
        for (int64_t c = 0; c < C; c++) {                                                                 \
            const double rm = mean[c], rv = var[c];                                                       \
            double mu = rm, v = rv;                                                                       \
            if (!global) {                                                                                \
                double sum = 0, sq = 0;                                                                   \
                for (int64_t n = 0; n < N; n++)                                                           \
                    for (int64_t s = 0; s < S; s++) sum += x[pe_bn_index(cl, n, c, s, C, S)];                        \
                mu = sum / (double)(N * S);                                                               \
                for (int64_t n = 0; n < N; n++)                                                           \
                    for (int64_t s = 0; s < S; s++) {                                                     \
                        const double d = x[pe_bn_index(cl, n, c, s, C, S)] - mu;                                     \
                        sq += d * d;                                                                      \
                    }                                                                                     \
                v = sq / (double)(N * S);                                                                 \
            }                                                                                             \
            const double inv = 1.0 / sqrt(v + eps), a = scale[c] * inv, sh = bias[c] - mu * a;            \
            for (int64_t n = 0; n < N; n++)                                                               \
                for (int64_t s = 0; s < S; s++)                                                           \
                    y[pe_bn_index(cl, n, c, s, C, S)] = (T)(x[pe_bn_index(cl, n, c, s, C, S)] * a + sh);                        \
            if (mean_out) mean_out[c] = (T)(global ? rm : momentum * rm + (1.0 - momentum) * mu);         \
            if (var_out) var_out[c] = (T)(global ? rv : momentum * rv + (1.0 - momentum) * v);            \
            if (saved_mean) saved_mean[c] = (T)mu;                                                        \
            if (saved_var) saved_var[c] = (T)inv;                                                         \
        }                                                                                                 \
    }

PE_NN_LOOPS(float, f32, -FLT_MAX)
PE_NN_LOOPS(double, f64, -DBL_MAX)

/* ---- conv2d ------------------------------------------------------------- */

static pe_status conv_build(pe_dnnl_entry *e, const void *geom, int nt) {
    const pe_conv_geom *g = geom;
    const int64_t sd[4] = {g->n, g->c, g->h, g->w}, dd[4] = {g->n, g->m, g->oh, g->ow}, bd[1] = {g->m};
    const int64_t wd1[4] = {g->m, g->c, g->kh, g->kw};
    const int64_t wdg[5] = {g->groups, g->m / g->groups, g->c / g->groups, g->kh, g->kw};
    const bool grouped = g->groups > 1;
    dnnl_memory_desc_t src, wei, dst, bia, src_any, wei_any, dst_any;
    /* NCHW: oneDNN picks the activations' layouts (copies, reordered); NHWC: the primitive runs on the
     * tensors as they are (oneDNN's brgemm convolutions' own choice for these layers: no reorder) */
    const dnnl_format_tag_t act = g->nhwc ? dnnl_nhwc : dnnl_nchw, act_any = g->nhwc ? dnnl_nhwc : dnnl_format_tag_any;
    PE_CHECK(pe_dnnl_md_plain(&src, 4, sd, act));
    PE_CHECK(pe_dnnl_md_plain(&dst, 4, dd, act));
    PE_CHECK(pe_dnnl_md_plain(&bia, 1, bd, dnnl_x));
    PE_CHECK(grouped ? pe_dnnl_md_plain(&wei, 5, wdg, dnnl_goihw) : pe_dnnl_md_plain(&wei, 4, wd1, dnnl_oihw));
    PE_CHECK(pe_dnnl_md_plain(&src_any, 4, sd, act_any));
    PE_CHECK(pe_dnnl_md_plain(&dst_any, 4, dd, act_any));
    PE_CHECK(grouped ? pe_dnnl_md_plain(&wei_any, 5, wdg, dnnl_format_tag_any) : pe_dnnl_md_plain(&wei_any, 4, wd1, dnnl_format_tag_any));
    dnnl_dims_t strides = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1};
    dnnl_dims_t pad_l = {g->pt, g->pl}, pad_r = {g->pb, g->pr};
    dnnl_convolution_desc_t cd;
    dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                                 &src_any, &wei_any, g->has_bias ? &bia : NULL,
                                                                 &dst_any, strides, dil, pad_l, pad_r);
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: convolution descriptor rejected (%s)", pe_dnnl_status_str(s));
    PE_CHECK(pe_dnnl_entry_init(e, &cd, nt));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SRC, &src, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_WEIGHTS, &wei, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DST, &dst, PE_DNNL_OUT));
    if (g->has_bias) PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_BIAS, &bia, PE_DNNL_IN));
    return PE_OK;
}

/* Whether the convolution g runs on oneDNN (its key in *key): not fp64 (the
 * loops) and not an empty output (nothing to do). */
static bool conv_on_dnnl(const pe_conv_geom *g, pe_dtype dt, pe_dnnl_key *key) {
    if (g->n * g->m * g->oh * g->ow == 0 || dt == PE_DTYPE_FP64) return false;
    pe_conv_key(key, PE_DNNL_CONV, g, g->has_bias);
    return true;
}

pe_status pe_nn_conv_fwd_workspace(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, size_t *bytes) {
    pe_dnnl_key key;
    return conv_on_dnnl(g, dt, &key) ? pe_nn_dnnl_workspace(ctx, &key, conv_build, g, bytes) : PE_OK;
}

/* x: [N, C, H, W], w: [M, C/groups, kh, kw], b: [M] (g->has_bias) -> y: [N, M, oh, ow] */
pe_status pe_nn_conv_fwd(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, const void *x, const void *w,
                         const void *b, void *y) {
    if (g->n * g->m * g->oh * g->ow == 0) return PE_OK;
    const int nt = pe_kernel_threads(ctx);
    pe_dnnl_key key;
    if (!conv_on_dnnl(g, dt, &key)) {
        if (g->nhwc) return pe_nn_nhwc_unsupported(ctx, dt, "conv2d");
        conv_direct_f64(g, x, w, b, y, nt);
        return PE_OK;
    }
    void *const h[4] = {(void *)x, (void *)w, y, (void *)b};
    bool fallback;
    PE_CHECK(pe_nn_dnnl_run(ctx, &key, conv_build, g, h, &fallback));
    if (fallback && g->nhwc) return pe_nn_nhwc_unsupported(ctx, dt, "oneDNN has no convolution for this geometry");
    if (fallback) conv_direct_f32(g, x, w, b, y, nt);
    return PE_OK;
}

pe_status pe_cpu_conv2d_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    pe_conv_geom g;
    *bytes = 0;
    PE_CHECK(pe_conv_geom_get(ctx, &g));
    return pe_nn_conv_fwd_workspace(ctx, &g, pe_ctx_in(ctx, "Input")->dtype, bytes);
}

/* Input: [N, C, H, W], Filter: [M, C/groups, kh, kw], Bias?: [M] -> Output: [N, M, oh, ow]
 * (NHWC: Input [N, H, W, C] -> Output [N, oh, ow, M]) */
pe_status pe_cpu_conv2d(const pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter"), *b = pe_ctx_in(ctx, "Bias");
    return pe_nn_conv_fwd(ctx, &g, x->dtype, pe_tensor_data(x), pe_tensor_data(f), pe_data_or_null(b),
                          pe_tensor_data(pe_ctx_out(ctx, "Output")));
}

/* ---- pool2d ------------------------------------------------------------- */

static pe_status pool_build(pe_dnnl_entry *e, const void *geom, int nt) {
    const pe_pool_dnnl_geom *pg = geom;
    const pe_pool_geom *g = pg->g;
    dnnl_memory_desc_t src, dst;
    PE_CHECK(pe_pool_mds(g, &src, &dst));
    dnnl_alg_kind_t alg = g->is_max ? dnnl_pooling_max
                          : g->exclusive ? dnnl_pooling_avg_exclude_padding
                                         : dnnl_pooling_avg_include_padding;
    dnnl_dims_t strides = {g->sh, g->sw}, kernel = {g->kh, g->kw}, dil = {0, 0};
    dnnl_dims_t pad_l = {g->pt, g->pl}, pad_r = {pg->pb, pg->pr};
    dnnl_pooling_v2_desc_t pd;
    dnnl_status_t s = dnnl_pooling_v2_forward_desc_init(&pd, dnnl_forward_inference, alg, &src, &dst, strides, kernel,
                                                        dil, pad_l, pad_r);
    if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) return pe_dnnl_entry_set_unsupported(e);
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: pooling descriptor rejected (%s)", pe_dnnl_status_str(s));
    PE_CHECK(pe_dnnl_entry_init(e, &pd, nt));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SRC, &src, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DST, &dst, PE_DNNL_OUT));
    return PE_OK;
}

/* Whether pool2d runs on oneDNN for ctx's shapes (geometry and key in *pg,
 * *key): fp32, a non-empty output, windows oneDNN takes (not adaptive, none
 * wholly in the padding). */
static bool pool_on_dnnl(const pe_op_ctx *ctx, const pe_pool_geom *g, pe_pool_dnnl_geom *pg, pe_dnnl_key *key) {
    if (pe_tensor_numel(pe_ctx_out(ctx, "Out")) == 0 || pe_ctx_in(ctx, "X")->dtype == PE_DTYPE_FP64 || g->adaptive ||
        pe_pool_empty_window(g))
        return false;
    *pg = pe_pool_dnnl_geom_make(g);
    pe_pool_key(key, PE_DNNL_POOL, g, pg);
    return true;
}

pe_status pe_cpu_pool2d_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    pe_pool_geom g;
    pe_pool_dnnl_geom pg;
    pe_dnnl_key key;
    *bytes = 0;
    PE_CHECK(pe_pool_geom_get(ctx, &g));
    return pool_on_dnnl(ctx, &g, &pg, &key) ? pe_nn_dnnl_workspace(ctx, &key, pool_build, &pg, bytes) : PE_OK;
}

/* X: [N, C, H, W] -> Out: [N, C, oh, ow] (NHWC: [N, H, W, C] -> [N, oh, ow, C]) */
pe_status pe_cpu_pool2d(const pe_op_ctx *ctx) {
    pe_pool_geom g;
    PE_CHECK(pe_pool_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *y = pe_ctx_out(ctx, "Out");
    if (pe_tensor_numel(y) == 0) return PE_OK;
    const int nt = pe_kernel_threads(ctx);
    pe_pool_dnnl_geom pg;
    pe_dnnl_key key;
    if (!pool_on_dnnl(ctx, &g, &pg, &key)) {
        if (g.nhwc) return pe_nn_nhwc_unsupported(ctx, x->dtype, "pool2d: adaptive, float64 or an all-padding window");
        if (x->dtype == PE_DTYPE_FP64) pool_direct_f64(&g, pe_tensor_data(x), pe_tensor_data(y), nt);
        else pool_direct_f32(&g, pe_tensor_data(x), pe_tensor_data(y), nt);
        return PE_OK;
    }
    void *const h[2] = {pe_tensor_data(x), pe_tensor_data(y)};
    bool fallback;
    PE_CHECK(pe_nn_dnnl_run(ctx, &key, pool_build, &pg, h, &fallback));
    if (fallback && g.nhwc) return pe_nn_nhwc_unsupported(ctx, x->dtype, "oneDNN has no pooling for this geometry");
    if (fallback) pool_direct_f32(&g, pe_tensor_data(x), pe_tensor_data(y), nt);
    return PE_OK;
}

/* ---- batch_norm --------------------------------------------------------- */

static pe_status bn_build(pe_dnnl_entry *e, const void *geom, int nt) {
    const pe_bn_geom *b = geom;
    dnnl_memory_desc_t data, chan;
    PE_CHECK(pe_bn_mds(b, &data, &chan));
    unsigned flags = dnnl_use_scale | dnnl_use_shift | (b->global ? dnnl_use_global_stats : 0);
    dnnl_batch_normalization_desc_t bd;
    dnnl_status_t s = dnnl_batch_normalization_forward_desc_init(
        &bd, b->global ? dnnl_forward_inference : dnnl_forward_training, &data, b->eps, flags);
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: batch normalization descriptor rejected (%s)", pe_dnnl_status_str(s));
    const int stat_dir = b->global ? PE_DNNL_IN : PE_DNNL_OUT;
    PE_CHECK(pe_dnnl_entry_init(e, &bd, nt));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SRC, &data, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SCALE, &chan, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SHIFT, &chan, PE_DNNL_IN));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_MEAN, &chan, stat_dir));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_VARIANCE, &chan, stat_dir));
    PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DST, &data, PE_DNNL_OUT));
    /* Room for the batch statistics when SavedMean/SavedVariance are absent. */
    if (!b->global) pe_dnnl_entry_reserve(e, 2 * (size_t)b->dims[1] * sizeof(float));
    return PE_OK;
}

/* Running-stat update and Saved* outputs after the oneDNN run (training:
 * bmean/bvar hold the batch statistics and may be the Saved* tensors). */
static void bn_stats(int64_t C, bool global, double momentum, double eps, const float *mean, const float *var,
                     const float *bmean, const float *bvar, float *mean_out, float *var_out, float *saved_mean,
                     float *saved_var) {
    for (int64_t c = 0; c < C; c++) {
        const double rm = mean[c], rv = var[c];
        const double mu = global ? rm : bmean[c], v = global ? rv : bvar[c];
        if (mean_out) mean_out[c] = (float)(global ? rm : momentum * rm + (1.0 - momentum) * mu);
        if (var_out) var_out[c] = (float)(global ? rv : momentum * rv + (1.0 - momentum) * v);
        if (saved_mean) saved_mean[c] = (float)mu;
        if (saved_var) saved_var[c] = (float)(1.0 / sqrt(v + eps));
    }
}

/* Whether batch_norm runs on oneDNN for ctx's shapes (geometry and key in
 * *bg, *key): fp32 with something to normalise over (X's layout: nhwc, C channels). */
static bool bn_on_dnnl(const pe_op_ctx *ctx, bool nhwc, int64_t C, pe_bn_geom *bg, pe_dnnl_key *key) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const bool global = pe_ctx_bool(ctx, "is_test") || pe_ctx_bool(ctx, "use_global_stats");
    if (x->dtype == PE_DTYPE_FP64 || pe_bn_nothing_to_normalise(x, C, global)) return false;
    *bg = pe_bn_geom_make(x, nhwc, global, pe_ctx_float(ctx, "epsilon"));
    pe_bn_key(key, PE_DNNL_BNORM, bg);
    return true;
}

pe_status pe_cpu_batch_norm_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    pe_bn_geom bg;
    pe_dnnl_key key;
    bool nhwc;
    int64_t C;
    *bytes = 0;
    PE_CHECK(pe_bn_layout(ctx, pe_ctx_in(ctx, "X"), &nhwc, &C));
    return bn_on_dnnl(ctx, nhwc, C, &bg, &key) ? pe_nn_dnnl_workspace(ctx, &key, bn_build, &bg, bytes) : PE_OK;
}

/* X: [N, C, ...], Scale/Bias/Mean/Variance: [C] -> Y: like X;
 * MeanOut/VarianceOut/SavedMean/SavedVariance: [C] (see the file comment). */
pe_status pe_cpu_batch_norm(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const pe_tensor *scale = pe_ctx_in(ctx, "Scale"), *bias = pe_ctx_in(ctx, "Bias");
    const pe_tensor *mean = pe_ctx_in(ctx, "Mean"), *var = pe_ctx_in(ctx, "Variance");
    pe_tensor *y = pe_ctx_out(ctx, "Y");
    void *mean_out = pe_data_or_null(pe_ctx_out(ctx, "MeanOut")), *var_out = pe_data_or_null(pe_ctx_out(ctx, "VarianceOut"));
    void *saved_mean = pe_data_or_null(pe_ctx_out(ctx, "SavedMean"));
    void *saved_var = pe_data_or_null(pe_ctx_out(ctx, "SavedVariance"));
    const double eps = pe_ctx_float(ctx, "epsilon"), momentum = pe_ctx_float(ctx, "momentum");
    const bool global = pe_ctx_bool(ctx, "is_test") || pe_ctx_bool(ctx, "use_global_stats");
    const bool f64 = x->dtype == PE_DTYPE_FP64;
    const size_t esz = pe_dtype_size(x->dtype);
    const int nt = pe_kernel_threads(ctx);
    bool nhwc;
    int64_t C;
    PE_CHECK(pe_bn_layout(ctx, x, &nhwc, &C));
    const int64_t N = x->dims[0];
    const int64_t S = (N * C) != 0 ? pe_tensor_numel(x) / (N * C) : 0;

    if (pe_bn_nothing_to_normalise(x, C, global)) {
        /* Paddle: Y = X, statistics untouched. */
        if (pe_tensor_data(y) != pe_tensor_data(x)) memcpy(pe_tensor_data(y), pe_tensor_data(x), pe_tensor_nbytes(x));
        if (mean_out && mean_out != pe_tensor_data(mean)) memcpy(mean_out, pe_tensor_data(mean), (size_t)C * esz);
        if (var_out && var_out != pe_tensor_data(var)) memcpy(var_out, pe_tensor_data(var), (size_t)C * esz);
        if (saved_mean) memset(saved_mean, 0, (size_t)C * esz);
        if (saved_var) memset(saved_var, 0, (size_t)C * esz);
        return PE_OK;
    }

    if (f64) {
        bn_direct_f64(pe_tensor_data(x), pe_tensor_data(y), N, C, S, nhwc, pe_tensor_data(scale), pe_tensor_data(bias),
                      pe_tensor_data(mean), pe_tensor_data(var), mean_out, var_out, saved_mean, saved_var, global,
                      momentum, eps, nt);
        return PE_OK;
    }

    pe_bn_geom bg;
    pe_dnnl_key key;
    pe_dnnl_entry *e = NULL;
    if (bn_on_dnnl(ctx, nhwc, C, &bg, &key)) PE_CHECK(pe_nn_dnnl_acquire(ctx, &key, bn_build, &bg, &e));
    if (!e) {
        bn_direct_f32(pe_tensor_data(x), pe_tensor_data(y), N, C, S, nhwc, pe_tensor_data(scale), pe_tensor_data(bias),
                      pe_tensor_data(mean), pe_tensor_data(var), mean_out, var_out, saved_mean, saved_var, global,
                      momentum, eps, nt);
        return PE_OK;
    }
    /* Training: oneDNN writes the batch mean/variance to SavedMean/SavedVariance
     * when present (bn_stats then turns the variance into 1/sqrt(var+eps) in
     * place), else to the entry's buffer. The entry stays checked out until
     * bn_stats has read that buffer. */
    float *bmean = NULL, *bvar = NULL;
    if (!global) {
        float *buf = pe_dnnl_entry_buffer(e);
        bmean = saved_mean ? saved_mean : buf;
        bvar = saved_var ? saved_var : buf + C;
    }
    void *const h[6] = {pe_tensor_data(x), pe_tensor_data(scale), pe_tensor_data(bias),
                        global ? pe_tensor_data(mean) : (void *)bmean, global ? pe_tensor_data(var) : (void *)bvar,
                        pe_tensor_data(y)};
    pe_status st = pe_dnnl_entry_run(e, h, nt);
    if (st == PE_OK)
        bn_stats(C, global, momentum, eps, pe_tensor_data(mean), pe_tensor_data(var), bmean, bvar, mean_out, var_out,
                 saved_mean, saved_var);
    pe_dnnl_release(e);
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    return PE_OK;
}
