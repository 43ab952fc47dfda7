/* ops/nn.h — conv2d / pool2d geometry shared by shape inference (ops/nn.c)
 * and the kernels (ops/cpu/nn.c) (internal).
 *
 *     pe_conv_geom g;
 *     PE_CHECK(pe_conv_geom_get(ctx, &g));   // validated; errors name op, vars, shapes
 *     // output: [g.n, g.m, g.oh, g.ow]
 *
 * Both read the op's attrs with Paddle's rules (2- or 4-value paddings,
 * padding_algorithm SAME/VALID, global/adaptive pooling, ceil_mode), so the
 * kernel never disagrees with infer about the output size.
 */
#ifndef PE_OPS_NN_H
#define PE_OPS_NN_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_conv_geom {
    int64_t n, c, h, w;      /* Input: [N, C, H, W] (nhwc: stored [N, H, W, C]) */
    int64_t m, kh, kw;       /* Filter: [M, C/groups, kh, kw] */
    int64_t groups;
    int64_t sh, sw;          /* strides */
    int64_t dh, dw;          /* dilations (1 = dense) */
    int64_t pt, pb, pl, pr;  /* paddings: top, bottom, left, right */
    int64_t oh, ow;          /* Output: [N, M, oh, ow] (nhwc: [N, oh, ow, M]) */
    bool has_bias;
    bool nhwc;               /* data_format NHWC: Input, Output and their gradients are [N, H, W, C];
                              * Filter stays [M, C/groups, kh, kw] (Paddle's rule) */
} pe_conv_geom;

typedef struct pe_pool_geom {
    int64_t n, c, h, w;      /* X: [N, C, H, W] (nhwc: stored [N, H, W, C]) */
    int64_t kh, kw;          /* window (adaptive: the output size) */
    int64_t sh, sw;
    int64_t pt, pb, pl, pr;
    int64_t oh, ow;          /* Out: [N, C, oh, ow] (nhwc: [N, oh, ow, C]) */
    bool is_max, exclusive, adaptive;
    bool nhwc;               /* data_format NHWC */
} pe_pool_geom;

/* The stored dims of a [n, c, h, w] activation in the op's layout. */
static inline void pe_nn_act_dims(bool nhwc, int64_t n, int64_t c, int64_t h, int64_t w, int64_t d[4]) {
    d[0] = n;
    d[1] = nhwc ? h : c;
    d[2] = nhwc ? w : h;
    d[3] = nhwc ? c : w;
}

/* Validate inputs/attrs of a conv2d / pool2d op and compute the geometry.
 * data_format NCHW (or AnyLayout, or empty) and NHWC; errors (PE_ERR_INVALID,
 * PE_ERR_UNSUPPORTED for another layout) go through pe_ctx_error. */
pe_status pe_conv_geom_get(const pe_op_ctx *ctx, pe_conv_geom *g);
pe_status pe_pool_geom_get(const pe_op_ctx *ctx, pe_pool_geom *g);
/* conv2d_transpose (Input [N, Cin, H, W], Filter [Cin, Cout/groups, kh, kw],
 * Output [N, Cout, OH, OW]) as the conv2d whose Input@GRAD it is: *g is that
 * conv2d's geometry, so g->c = Cout, g->h/w = OH/OW (its Input), g->m = Cin,
 * g->oh/ow = H/W (its Output). The forward is conv2d's backward-data, the
 * gradients conv2d's forward (Input@GRAD) and backward-weights (Filter@GRAD). */
pe_status pe_conv_transpose_geom_get(const pe_op_ctx *ctx, pe_conv_geom *g);   /* NCHW only */
/* batch_norm(_grad)'s data_layout for X (rank 2..5, checked before): NCHW /
 * AnyLayout / "" -> *nhwc false, *c = dims[1]; NHWC -> channels last (*nhwc
 * for rank >= 3; a 2-D X is [N, C] either way), *c = dims[rank - 1]. */
pe_status pe_bn_layout(const pe_op_ctx *ctx, const pe_tensor *x, bool *nhwc, int64_t *c);

#ifdef __cplusplus
}
#endif

#endif
