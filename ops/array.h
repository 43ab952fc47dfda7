/* ops/array.h — the broadcast plan of tile / expand_v2 and their grads
 * (internal), shared by shape inference (ops/array.c) and the CPU kernels
 * (ops/cpu/array.c) so the two can never disagree.
 *
 *     pe_tile_plan tp;
 *     PE_CHECK(pe_tile_plan_make(ctx, x, &tp));  // from repeat_times or shape
 *     // x viewed as [tp.xd...] (rank tp.n, leading 1s added), out as [tp.od...],
 *     // out[c] = x[c_i % xd_i ...]
 */
#ifndef PE_OPS_ARRAY_H
#define PE_OPS_ARRAY_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_tile_plan {
    int n;                         /* rank of Out */
    int64_t xd[PE_MAX_DIMS];       /* X's dims, 1s prepended to rank n */
    int64_t od[PE_MAX_DIMS];       /* Out's dims: xd[i] * repeats, or the broadcast dim */
} pe_tile_plan;

/* tile (tile_grad): attr repeat_times (each > 0; the shorter of it and X's
 * dims gets leading 1s); expand_v2 (expand_v2_grad): attr shape (at least
 * X's rank; -1 keeps X's dim, a dim of X that is 1 broadcasts to any size,
 * others must match). Fails naming the op, X and the attr. */
pe_status pe_tile_plan_make(const pe_op_ctx *ctx, const pe_tensor *x, pe_tile_plan *tp);

#ifdef __cplusplus
}
#endif
#endif
