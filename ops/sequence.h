/* ops/sequence.h — what the sequence (LoD) ops' infer functions and kernels
 * share (ops/sequence.c, ops/cpu/sequence.c, ops/cuda/sequence.cu).
 *
 * A sequence op reads the sequences of a LoD tensor (include/pe/tensor.h):
 * the offsets of one level, rows [off[i], off[i + 1]) being sequence i. The
 * offsets are host metadata of the tensor, never device data: a CUDA kernel
 * gets a device copy of them for its launch.
 */
#ifndef PE_OPS_SEQUENCE_H
#define PE_OPS_SEQUENCE_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sequence_pool's pooltype attr */
enum { PE_SEQPOOL_SUM = 0, PE_SEQPOOL_AVERAGE, PE_SEQPOOL_SQRT, PE_SEQPOOL_MAX, PE_SEQPOOL_LAST, PE_SEQPOOL_FIRST };

/* The pooltype attr as PE_SEQPOOL_*, or an error naming the attr's value. */
pe_status pe_seqpool_type(const pe_op_ctx *ctx, int *type);
/* The last level of input `slot`'s LoD (offsets, *n entries), or an error
 * saying the input has no LoD. */
pe_status pe_seq_last_level(const pe_op_ctx *ctx, const char *slot, const pe_tensor *t, const int64_t **off,
                            int64_t *n);
/* sequence_expand: the repeat counts' level of Y (ref_level resolved) and
 * X's sequences (X's level 0, or one row per sequence when X has no LoD;
 * x_off NULL then). */
pe_status pe_seq_expand_levels(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *y, const int64_t **y_off,
                               int64_t *n_y, const int64_t **x_off);
/* sequence_conv's geometry, checked: X [T, D] (float) with a LoD (off, n_off:
 * its last level), Filter [len * D, N] of X's dtype; contextLength >= 1,
 * contextStride 1 and paddingTrainable false (errors otherwise, naming the
 * attr). Row t of sequence [b, e) reads rows t + start + j (j < len) that
 * lie in [b, e); the others are zeros. */
typedef struct pe_seqconv_geom {
    const int64_t *off;
    int64_t n_off;      /* offsets: n_off - 1 sequences */
    int64_t rows, d, n; /* T, D, N */
    int64_t len, start; /* contextLength, contextStart */
} pe_seqconv_geom;
pe_status pe_seqconv_geom_get(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *f, pe_seqconv_geom *g);

#ifdef __cplusplus
}
#endif
#endif
