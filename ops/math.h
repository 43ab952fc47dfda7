/* ops/math.h — the matmul plan shared by shape inference (ops/math.c) and
 * the kernels (ops/cpu/math.c, later ops/cuda/math.cu), internal to PE;
 * also layer_norm's shape check.
 *
 *     pe_matmul_plan p;
 *     PE_CHECK(pe_matmul_plan_make(ctx, x, y, &p));
 *     // out batch b (row-major index over p.batch_dims) multiplies
 *     // x matrix pe_matmul_x_batch(&p, b) by y matrix pe_matmul_y_batch(&p, b)
 *
 * One place decides numpy's matmul rules (1-D promotion, batch broadcasting,
 * transposes) so infer and every kernel agree.
 */
#ifndef PE_OPS_MATH_H
#define PE_OPS_MATH_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_matmul_plan {
    bool trans_x, trans_y;      /* effective (ignored for 1-D operands) */
    double alpha;               /* matmul's alpha; 1 for matmul_v2 */
    int64_t m, k, n;            /* one GEMM: op(X) [m, k] x op(Y) [k, n] -> [m, n] */
    int batch_ndim;             /* broadcast batch dims of the output */
    int64_t batch_dims[PE_MAX_DIMS];
    int64_t x_bstride[PE_MAX_DIMS]; /* per batch axis, in matrices; 0 = broadcast */
    int64_t y_bstride[PE_MAX_DIMS];
    int64_t n_batch;            /* prod(batch_dims) */
    bool x_full, y_full;        /* operand has one matrix per output batch, in order */
    int out_ndim;
    int64_t out_dims[PE_MAX_DIMS];
} pe_matmul_plan;

/* Reads the attrs (transpose_X/transpose_Y/alpha for matmul, trans_x/trans_y
 * for matmul_v2) and the shapes of x and y; fails via pe_ctx_error naming
 * the vars and shapes when they do not fit. */
pe_status pe_matmul_plan_make(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *y,
                              pe_matmul_plan *p);

/* Index of the x (y) matrix used by output batch b. */
int64_t pe_matmul_x_batch(const pe_matmul_plan *p, int64_t b);
int64_t pe_matmul_y_batch(const pe_matmul_plan *p, int64_t b);

/* layer_norm: checks X (fp32/fp64), begin_norm_axis and the Scale/Bias
 * shapes; X viewed as [*rows, *cols] around begin_norm_axis. */
pe_status pe_layer_norm_dims(const pe_op_ctx *ctx, const pe_tensor *x, int64_t *rows, int64_t *cols);

#ifdef __cplusplus
}
#endif

#endif
