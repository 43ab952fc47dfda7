/* ops/reduce.h — the reduced-dims view of reduce_sum / reduce_mean and
 * their grads (internal), shared by shape inference (ops/reduce.c) and the
 * CPU kernels (ops/cpu/reduce.c) so the two can never disagree.
 *
 *     bool red[PE_MAX_DIMS];
 *     PE_CHECK(pe_reduce_flags(ctx, x->ndim, red));   // from dim / reduce_all
 *     pe_reduce_view v;
 *     pe_reduce_view_make(x->ndim, x->dims, red, &v);
 *     if (v.simple)   // x is [pre, d, post], out is [pre, post]
 *     else            // x is [v.dims...], out the row-major product of the kept dims
 *
 * Size-1 dims are dropped and neighbouring dims that are both reduced or
 * both kept are merged, so one reduced block (the usual case: last dim, all
 * dims, spatial dims [2, 3], batch dim 0) is the simple [pre, d, post] form.
 */
#ifndef PE_OPS_REDUCE_H
#define PE_OPS_REDUCE_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_reduce_view {
    int n;                        /* merged dims (0: a single element) */
    int64_t dims[PE_MAX_DIMS];
    bool red[PE_MAX_DIMS];        /* merged dim i is reduced */
    bool simple;                  /* at most one reduced block: pre/d/post valid */
    int64_t pre, d, post;
    int64_t count;                /* elements summed into each output (the mean's divisor) */
    int64_t out_numel;
} pe_reduce_view;

/* red[i] for i < ndim from the attrs dim (negative = from the end), reduce_all
 * (or an empty dim list: everything). Fails naming the op and the bad dim. */
pe_status pe_reduce_flags(const pe_op_ctx *ctx, int ndim, const int64_t *x_dims, bool *red);

void pe_reduce_view_make(int ndim, const int64_t *dims, const bool *red, pe_reduce_view *v);

#ifdef __cplusplus
}
#endif
#endif
