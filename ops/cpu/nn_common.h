/* ops/cpu/nn_common.h — what the CPU nn kernels (nn.c) and their gradients
 * (nn_grad.c) share (internal, header-only).
 *
 * What: pooling's window of one output row or column, which windows oneDNN
 * cannot take, its end padding and plain memory descriptors for oneDNN;
 * conv2d's cache key; batch_norm's oneDNN geometry (cache key, plain data /
 * per-channel memory descriptors).
 * How: static inline helpers; the window is the one formula both the
 * forward loops and the backward loops call.
 * Why: the backward kernels must be the exact adjoint of the forward ones
 * (same windows, same batch_norm layouts); one copy keeps them so.
 */
#ifndef PE_OPS_CPU_NN_COMMON_H
#define PE_OPS_CPU_NN_COMMON_H

#include "ops/cpu/dnnl_util.h"
#include "ops/cpu/par.h"
#include "ops/nn.h"
#include "ops/op.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline int64_t pe_i64_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pe_i64_max(int64_t a, int64_t b) { return a > b ? a : b; }

static inline void *pe_data_or_null(const pe_tensor *t) { return t ? pe_tensor_data(t) : NULL; }

/* conv2d's computations on an explicit geometry (nn.c, nn_grad.c): conv2d and
 * conv2d_grad run them on their own geometry, conv2d_transpose(_grad)
 * (deconv.c) on the conv2d it is the input gradient of. dt: float32 (oneDNN,
 * the loops when it has no implementation) or float64 (the loops). Each
 * *_workspace grows *bytes to what the matching call needs (the memory plan). */
pe_status pe_nn_conv_fwd_workspace(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, size_t *bytes);
pe_status pe_nn_conv_fwd(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, const void *x, const void *w,
                         const void *b, void *y);
pe_status pe_nn_conv_bwd_workspace(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, bool data, bool weights,
                                   bool bias, size_t *bytes);
pe_status pe_nn_conv_bwd_data(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, const void *dy,
                              const void *w, void *dx);
pe_status pe_nn_conv_bwd_weights(const pe_op_ctx *ctx, const pe_conv_geom *g, pe_dtype dt, const void *x,
                                 const void *dy, void *dw, void *db);

/* data_format NHWC runs on oneDNN (float32) and on the NHWC loops of
 * max-pool backward; the other direct loops are NCHW: the error for the
 * cases that would need them (float64, windows oneDNN does not take). */
static inline pe_status pe_nn_nhwc_unsupported(const pe_op_ctx *ctx, pe_dtype dt, const char *why) {
    return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "data_format NHWC is supported for float32 on oneDNN only; %s (%s): "
                        "use NCHW", why, pe_dtype_name(dt));
}

/* Runs key's cached primitive (built by `build` when new) in the op's
 * planned workspace (ctx->workspace) or the place's pool; *fallback when
 * oneDNN has no implementation for it (remembered in the cache). */
static inline pe_status pe_nn_dnnl_run(const pe_op_ctx *ctx, const pe_dnnl_key *key, pe_dnnl_build_fn build,
                                       const void *geom, void *const *handles, bool *fallback) {
    pe_status st = pe_dnnl_run_cached(key, ctx->place, pe_kernel_threads(ctx), ctx->workspace, ctx->workspace_bytes,
                                      build, geom, handles, fallback);
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    return PE_OK;
}

/* The same entry checked out for the caller's own run (NULL: no oneDNN). */
static inline pe_status pe_nn_dnnl_acquire(const pe_op_ctx *ctx, const pe_dnnl_key *key, pe_dnnl_build_fn build,
                                           const void *geom, pe_dnnl_entry **e) {
    pe_status st = pe_dnnl_acquire_built(key, ctx->place, pe_kernel_threads(ctx), ctx->workspace,
                                         ctx->workspace_bytes, build, geom, e);
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    return PE_OK;
}

/* For a pe_workspace_fn: *bytes grows to key's workspace (the primitive is
 * built now, with the thread count the op will run with). */
static inline pe_status pe_nn_dnnl_workspace(const pe_op_ctx *ctx, const pe_dnnl_key *key, pe_dnnl_build_fn build,
                                             const void *geom, size_t *bytes) {
    size_t b = 0;
    pe_status st = pe_dnnl_workspace_bytes(key, ctx->place, pe_kernel_threads(ctx), build, geom, &b);
    if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    if (b > *bytes) *bytes = b;
    return PE_OK;
}

/* The input rows [*a0, *a1) of output row o (for columns pass the w fields):
 * adaptive: [o*in/out, ceil((o+1)*in/out)); else the k-window at o*s - p
 * clipped to [0, in) (empty, a0 == a1, when it lies wholly in the padding). */
static inline void pe_pool_window(bool adaptive, int64_t o, int64_t in, int64_t out, int64_t s, int64_t k, int64_t p,
                                  int64_t *a0, int64_t *a1) {
    if (adaptive) {
        *a0 = o * in / out;
        *a1 = ((o + 1) * in + out - 1) / out;
        return;
    }
    int64_t lo = o * s - p, hi = pe_i64_min(lo + k, in);
    lo = pe_i64_max(lo, 0);
    *a0 = lo;
    *a1 = pe_i64_max(hi, lo);
}

/* A window with no input cell (wholly in the padding; ceil_mode can make
 * one) has Paddle-specific values: such pools stay on the direct loops. */
static inline bool pe_pool_empty_window(const pe_pool_geom *g) {
    return !g->adaptive && (g->pt >= g->kh || g->pl >= g->kw || (g->oh - 1) * g->sh - g->pt >= g->h ||
                            (g->ow - 1) * g->sw - g->pl >= g->w);
}

/* Pooling as oneDNN takes it. oneDNN wants in + pad_l + pad_r - k =
 * (out - 1) * stride exactly (up to the floor); the results do not depend on
 * the bottom/right padding beyond that (max ignores padding, avg divides by
 * kh*kw or by the valid cells), so pb/pr are the smallest non-negative
 * paddings giving `out`. */
typedef struct pe_pool_dnnl_geom {
    const pe_pool_geom *g;
    int64_t pb, pr; /* bottom/right padding */
} pe_pool_dnnl_geom;

static inline pe_pool_dnnl_geom pe_pool_dnnl_geom_make(const pe_pool_geom *g) {
    pe_pool_dnnl_geom pg = {g, pe_i64_max(0, (g->oh - 1) * g->sh + g->kh - g->h - g->pt),
                            pe_i64_max(0, (g->ow - 1) * g->sw + g->kw - g->w - g->pl)};
    return pg;
}

/* src: x [N, C, H, W], dst: out [N, C, oh, ow], both plain: nchw, or nhwc
 * (stored [N, H, W, C]) for data_format NHWC. */
static inline pe_status pe_pool_mds(const pe_pool_geom *g, dnnl_memory_desc_t *src, dnnl_memory_desc_t *dst) {
    const int64_t sd[4] = {g->n, g->c, g->h, g->w}, dd[4] = {g->n, g->c, g->oh, g->ow};
    const dnnl_format_tag_t tag = g->nhwc ? dnnl_nhwc : dnnl_nchw;
    PE_CHECK(pe_dnnl_md_plain(src, 4, sd, tag));
    return pe_dnnl_md_plain(dst, 4, dd, tag);
}

/* The cache key of kind (PE_DNNL_CONV, _CONV_BWD_DATA, _CONV_BWD_WEIGHTS) for g. */
/* Pooling's oneDNN cache key (kind: PE_DNNL_POOL or PE_DNNL_POOL_BWD). */
static inline void pe_pool_key(pe_dnnl_key *key, int kind, const pe_pool_geom *g, const pe_pool_dnnl_geom *pg) {
    pe_dnnl_key_init(key, kind);
    const int64_t kv[] = {g->n, g->c, g->h, g->w, g->kh, g->kw, g->sh, g->sw, g->pt, pg->pb, g->pl, pg->pr,
                          g->is_max, g->exclusive, g->nhwc};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) pe_dnnl_key_add(key, kv[i]);
}

static inline void pe_conv_key(pe_dnnl_key *key, int kind, const pe_conv_geom *g, bool with_bias) {
    pe_dnnl_key_init(key, kind);
    const int64_t kv[] = {g->n, g->c, g->h, g->w, g->m, g->kh, g->kw, g->groups, g->sh, g->sw,
                          g->dh, g->dw, g->pt, g->pb, g->pl, g->pr, with_bias, g->nhwc};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) pe_dnnl_key_add(key, kv[i]);
}

/* batch_norm (forward and backward) as oneDNN sees it: x [N, C, ...] of
 * 2..5 dims (logical order; nhwc: stored channels last), batch or global
 * statistics, epsilon. */
typedef struct pe_bn_geom {
    int ndim;
    int64_t dims[5];
    bool global;
    bool nhwc;
    float eps;
} pe_bn_geom;

/* Element (n, c, s) of a [N, C, S] tensor, or of [N, S, C] (cl: channels last). */
static inline int64_t pe_bn_index(bool cl, int64_t n, int64_t c, int64_t s, int64_t C, int64_t S) {
    return cl ? (n * S + s) * C + c : (n * C + c) * S + s;
}

/* X: [N, C, ...] with C channels. No batch to normalise over: an empty X,
 * or training statistics over a single value per channel (N = 1 and
 * nothing but C; the kernels copy X to Y, Paddle's behaviour). */
static inline bool pe_bn_nothing_to_normalise(const pe_tensor *x, int64_t C, bool global) {
    const int64_t numel = pe_tensor_numel(x), N = x->dims[0];
    return numel == 0 || (!global && N * (numel / (N * C)) == 1);
}

static inline pe_bn_geom pe_bn_geom_make(const pe_tensor *x, bool nhwc, bool global, double eps) {
    pe_bn_geom g = {.ndim = x->ndim, .global = global, .nhwc = nhwc, .eps = (float)eps};
    memcpy(g.dims, x->dims, (size_t)x->ndim * sizeof g.dims[0]);
    if (nhwc) { /* [N, spatial..., C] -> [N, C, spatial...] */
        g.dims[1] = x->dims[x->ndim - 1];
        for (int i = 2; i < x->ndim; i++) g.dims[i] = x->dims[i - 1];
    }
    return g;
}

/* The cache key of kind (PE_DNNL_BNORM / PE_DNNL_BNORM_BWD) for g. */
static inline void pe_bn_key(pe_dnnl_key *key, int kind, const pe_bn_geom *g) {
    pe_dnnl_key_init(key, kind);
    pe_dnnl_key_add(key, g->ndim);
    for (int i = 0; i < g->ndim; i++) pe_dnnl_key_add(key, g->dims[i]);
    uint32_t eps_bits;
    memcpy(&eps_bits, &g->eps, sizeof eps_bits);
    pe_dnnl_key_add(key, g->global);
    pe_dnnl_key_add(key, g->nhwc);
    pe_dnnl_key_add(key, eps_bits);
}

/* data: x's plain layout (nc / ncw / nchw / ncdhw, or channels last: nwc /
 * nhwc / ndhwc); chan: [C]. */
static inline pe_status pe_bn_mds(const pe_bn_geom *g, dnnl_memory_desc_t *data, dnnl_memory_desc_t *chan) {
    static const dnnl_format_tag_t tags[2][6] = {
        {dnnl_format_tag_undef, dnnl_format_tag_undef, dnnl_nc, dnnl_ncw, dnnl_nchw, dnnl_ncdhw},
        {dnnl_format_tag_undef, dnnl_format_tag_undef, dnnl_nc, dnnl_nwc, dnnl_nhwc, dnnl_ndhwc}};
    const int64_t cd[1] = {g->dims[1]};
    PE_CHECK(pe_dnnl_md_plain(data, g->ndim, g->dims, tags[g->nhwc][g->ndim]));
    return pe_dnnl_md_plain(chan, 1, cd, dnnl_x);
}

#endif
