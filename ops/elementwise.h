/* ops/elementwise.h — the broadcast plan of the elementwise_* ops (internal).
 *
 *     pe_bcast_plan pl;
 *     if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, axis, &pl) != PE_OK)
 *         return pe_ctx_error(ctx, PE_ERR_INVALID, "%s", pe_last_error());
 *     switch (pl.kind) {
 *     case PE_BCAST_SAME:     // out[i] = x[i] op y[i],                      i < numel
 *     case PE_BCAST_SCALAR_Y: // out[i] = x[i] op y[0]
 *     case PE_BCAST_ROW:      // out[r*n + c] = x[r*n + c] op y[c],          r < pre, c < n
 *     case PE_BCAST_MID:      // out[(r*n + c)*post + k] = x[same] op y[c],  k < post
 *     case PE_BCAST_GENERAL:  // strides below
 *     }
 *
 * One plan serves the CPU kernels (ops/cpu/elementwise.c) and the CUDA
 * kernels (ops/cuda/elementwise.cu): shape inference builds it to get Out's
 * dims, kernels build it again (cheap, no allocation) to pick a loop. It is a
 * plain C struct so nvcc host code can use it as is.
 *
 * Semantics (Paddle's elementwise broadcasting, a superset of numpy's):
 *  - same dims: no broadcast, `axis` ignored;
 *  - ranks differ, or equal ranks with an explicit axis: the lower-rank
 *    operand (Y when ranks are equal) is aligned with the other starting at
 *    dim `axis`; axis = -1 means trailing alignment (axis = |x.ndim -
 *    y.ndim|). Trailing size-1 dims of the aligned operand that would run
 *    past the end are dropped, as Paddle does (X [2,3], Y [3,1], axis=1 is
 *    Y [3]). Missing dims count as 1. axis < -1 is an error;
 *  - then numpy's rule per dim: equal, or one of the two is 1 (broadcast);
 *    both operands may broadcast (X [N,1] + Y [1,D] -> [N,D]).
 *
 * Every kind also fills the GENERAL fields (ndim, dims, x_strides,
 * y_strides), so a consumer that only implements the general loop is still
 * correct; the kinds are fast paths. The general iteration space is the
 * output with size-1 dims removed and adjacent dims merged where neither
 * operand changes broadcast status, so it is usually rank 1-3.
 */
#ifndef PE_OPS_ELEMENTWISE_H
#define PE_OPS_ELEMENTWISE_H

#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pe_bcast_kind {
    PE_BCAST_SAME = 0,  /* x, y, out all [numel] (also numel 0 and all-ones shapes) */
    PE_BCAST_SCALAR_Y,  /* x, out [numel]; y one element */
    PE_BCAST_ROW,       /* x, out [pre, n]; y [n]: a bias added to every row ([N,D] + [D]) */
    PE_BCAST_MID,       /* x, out [pre, n, post]; y [n]: per-channel ([N,C,H,W] + [C], axis 1) */
    PE_BCAST_GENERAL,   /* anything else (x broadcast, both broadcast, ...) */
    PE_BCAST_KIND_COUNT
} pe_bcast_kind;

typedef struct pe_bcast_plan {
    /* The output shape: what Out gets. */
    int out_ndim;
    int64_t out_dims[PE_MAX_DIMS];
    int64_t numel;               /* elements of out (0 for an empty output) */

    pe_bcast_kind kind;
    int64_t pre, n, post;        /* SAME/SCALAR_Y: numel,1,1; ROW: post == 1; MID: all used */

    /* General iteration space (valid for every kind): out is the row-major
     * array [dims[0], ..., dims[ndim-1]] (same element order as out_dims);
     * the element at multi-index (i_0, ..., i_{ndim-1}) reads
     *     x[sum_d i_d * x_strides[d]]  and  y[sum_d i_d * y_strides[d]]
     * (strides in elements; 0 = broadcast along that dim). ndim may be 0
     * (a single element, all offsets 0). */
    int ndim;
    int64_t dims[PE_MAX_DIMS];
    int64_t x_strides[PE_MAX_DIMS];
    int64_t y_strides[PE_MAX_DIMS];
} pe_bcast_plan;

/* Builds the plan for X of rank x_ndim / dims x_dims and Y likewise, with
 * Paddle's `axis` attr. No allocation; thread-safe. On incompatible shapes
 * returns PE_ERR_INVALID and sets the error message (shapes, axis, the
 * offending dim) — callers wrap it with the op and var names. */
pe_status pe_bcast_plan_make(int x_ndim, const int64_t *x_dims, int y_ndim, const int64_t *y_dims,
                             int axis, pe_bcast_plan *plan);

/* Name of a kind ("same", "scalar_y", "row", "mid", "general"), for logs and tests. */
const char *pe_bcast_kind_name(pe_bcast_kind kind);

/* Offsets in x and y of the start of row r of the general iteration space
 * (rows of the last plan dim; r over the product of the others). */
static inline void pe_bcast_row_offsets(const pe_bcast_plan *pl, int64_t r, int64_t *xo, int64_t *yo) {
    int64_t xa = 0, ya = 0;
    for (int d = pl->ndim - 2; d >= 0; d--) {
        const int64_t i = r % pl->dims[d];
        r /= pl->dims[d];
        xa += i * pl->x_strides[d];
        ya += i * pl->y_strides[d];
    }
    *xo = xa;
    *yo = ya;
}

/* Offsets in out (row-major strides ostr) and in x, y of the multi-index
 * `lin` over the plan dims `which` (row-major in that order). */
static inline void pe_bcast_offsets(const pe_bcast_plan *pl, const int *which, int nw, const int64_t *ostr,
                                    int64_t lin, int64_t *oo, int64_t *xo, int64_t *yo) {
    int64_t o = 0, xa = 0, ya = 0;
    for (int j = nw - 1; j >= 0; j--) {
        const int d = which[j];
        const int64_t i = lin % pl->dims[d];
        lin /= pl->dims[d];
        o += i * ostr[d];
        xa += i * pl->x_strides[d];
        ya += i * pl->y_strides[d];
    }
    *oo = o;
    *xo = xa;
    *yo = ya;
}

#ifdef __cplusplus
}
#endif
#endif
