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
    int64_t n, c, h, w;      /* Input: [N, C, H, W] */
    int64_t m, kh, kw;       /* Filter: [M, C/groups, kh, kw] */
    int64_t groups;
    int64_t sh, sw;          /* strides */
    int64_t dh, dw;          /* dilations (1 = dense) */
    int64_t pt, pb, pl, pr;  /* paddings: top, bottom, left, right */
    int64_t oh, ow;          /* Output: [N, M, oh, ow] */
    bool has_bias;
} pe_conv_geom;

typedef struct pe_pool_geom {
    int64_t n, c, h, w;      /* X: [N, C, H, W] */
    int64_t kh, kw;          /* window (adaptive: the output size) */
    int64_t sh, sw;
    int64_t pt, pb, pl, pr;
    int64_t oh, ow;          /* Out: [N, C, oh, ow] */
    bool is_max, exclusive, adaptive;
} pe_pool_geom;

/* Validate inputs/attrs of a conv2d / pool2d op and compute the geometry.
 * Errors (PE_ERR_INVALID, PE_ERR_UNSUPPORTED for NHWC) go through pe_ctx_error. */
pe_status pe_conv_geom_get(const pe_op_ctx *ctx, pe_conv_geom *g);
pe_status pe_pool_geom_get(const pe_op_ctx *ctx, pe_pool_geom *g);
/* conv2d_transpose (Input [N, Cin, H, W], Filter [Cin, Cout/groups, kh, kw],
 * Output [N, Cout, OH, OW]) as the conv2d whose Input@GRAD it is: *g is that
 * conv2d's geometry, so g->c = Cout, g->h/w = OH/OW (its Input), g->m = Cin,
 * g->oh/ow = H/W (its Output). The forward is conv2d's backward-data, the
 * gradients conv2d's forward (Input@GRAD) and backward-weights (Filter@GRAD). */
pe_status pe_conv_transpose_geom_get(const pe_op_ctx *ctx, pe_conv_geom *g);

#ifdef __cplusplus
}
#endif

#endif
