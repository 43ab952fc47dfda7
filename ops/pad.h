/* ops/pad.h — the padding plan of pad, pad2d, pad3d and their grads
 * (internal), shared by shape inference (ops/pad.c) and the CPU kernels
 * (ops/cpu/pad.c) so the two can never disagree.
 *
 *     pe_pad_plan pp;
 *     PE_CHECK(pe_pad_plan_make(ctx, x->ndim, x->dims, &pp));
 *     // out dim i = pp.xd[i] + pp.before[i] + pp.after[i]; out index o of dim i
 *     // reads x index pe_pad_src(&pp, i, o) (-1: the constant pad_value)
 */
#ifndef PE_OPS_PAD_H
#define PE_OPS_PAD_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { PE_PAD_CONSTANT = 0, PE_PAD_REFLECT, PE_PAD_EDGE, PE_PAD_CIRCULAR };

typedef struct pe_pad_plan {
    int n;                          /* rank of X and Out */
    int mode;                       /* PE_PAD_* */
    double value;                   /* the constant (mode constant) */
    int64_t xd[PE_MAX_DIMS], od[PE_MAX_DIMS];
    int64_t before[PE_MAX_DIMS], after[PE_MAX_DIMS];
} pe_pad_plan;

/* pad (pad_grad): attr paddings = 2 x rank values (before, after per dim),
 * pad_value; pad2d (_grad): X [N, C, H, W] (data_format NCHW / NHWC),
 * paddings [top, bottom, left, right], mode constant / reflect / edge,
 * pad_value; pad3d (_grad): X [N, C, D, H, W] (NCDHW / NDHWC), paddings
 * [left, right, top, bottom, front, back], mode constant / reflect /
 * replicate / circular, value. Paddings must be >= 0; reflect needs each pad
 * < the dim, edge / replicate / circular a dim > 0 where it pads. Fails
 * naming the op, the attr and X. */
pe_status pe_pad_plan_make(const pe_op_ctx *ctx, int ndim, const int64_t *xdims, pe_pad_plan *pp);

/* Host and device (ops/cuda/pad.cu runs the same mapping). */
#ifdef __CUDACC__
#define PE_PAD_HD __host__ __device__
#else
#define PE_PAD_HD
#endif

/* The X index that Out index o of dim i reads, or -1 (the constant). */
static inline PE_PAD_HD int64_t pe_pad_src(const pe_pad_plan *pp, int i, int64_t o) {
    const int64_t d = pp->xd[i];
    int64_t s = o - pp->before[i];
    if (s >= 0 && s < d) return s;
    switch (pp->mode) {
    case PE_PAD_REFLECT:
        s = s < 0 ? -s : 2 * (d - 1) - s;
        return s;
    case PE_PAD_EDGE: return s < 0 ? 0 : d - 1;
    case PE_PAD_CIRCULAR: return ((s % d) + d) % d;
    default: return -1;
    }
}

#ifdef __cplusplus
}
#endif

#endif
