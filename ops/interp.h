/* ops/interp.h — the geometry of nearest_interp_v2 / bilinear_interp_v2 and
 * their grads (internal), shared by shape inference (ops/interp.c) and the
 * CPU kernels (ops/cpu/interp.c).
 *
 *     pe_interp_geom g;
 *     PE_CHECK(pe_interp_geom_get(ctx, x->ndim, x->dims, &g));
 *     // Out: [g.n, g.c, g.oh, g.ow]
 */
#ifndef PE_OPS_INTERP_H
#define PE_OPS_INTERP_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_interp_geom {
    int64_t n, c, h, w;       /* X: [N, C, H, W] */
    int64_t oh, ow;           /* Out: [N, C, oh, ow] */
    double scale_h, scale_w;  /* attr scale (> 0) or -1: the ratio is H/oh */
    bool align_corners;
    int align_mode;           /* bilinear: 0 = half-pixel (unless align_corners), 1 = src = ratio * dst */
    bool bilinear;            /* else nearest */
} pe_interp_geom;

/* X dims (rank 4, NCHW) and the attrs -> g. Paddle's rule: attr scale
 * (1 or 2 values, each > 0) gives oh = (int)(H * scale_h), else out_h /
 * out_w (each >= 1). */
pe_status pe_interp_geom_get(const pe_op_ctx *ctx, int ndim, const int64_t *xdims, pe_interp_geom *g);

#ifdef __cplusplus
}
#endif

#endif
