/* ops/tensor.h — helpers shared by the tensor family's inference
 * (ops/tensor.c) and kernels (ops/cpu/tensor.c), internal to PE: the
 * fill value of fill_constant, slice's clamped region, split's part sizes,
 * the slots of stack / unstack and their grads.
 */
#ifndef PE_OPS_TENSOR_H
#define PE_OPS_TENSOR_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fill_constant's fill value for dtype dt: str_value when non-empty (an
 * integer literal parsed exactly into *ival with *is_int set, for integer
 * dtypes; else strtod's syntax incl. "inf", "-inf", "nan"; "true"/"false"
 * for bool), otherwise the float attr `value`. Fails via pe_ctx_error when
 * the text is not a number or the value does not fit dt. */
pe_status pe_fill_constant_value(const pe_op_ctx *ctx, pe_dtype dt, double *val, int64_t *ival, bool *is_int);

/* slice's region of Input: per input axis a, out dim dims[a] starting at
 * start[a] (a full axis has start 0 and dims[a] = Input's dim). */
typedef struct pe_slice_plan {
    int r;                          /* rank of Input */
    int64_t start[PE_MAX_DIMS];
    int64_t dims[PE_MAX_DIMS];      /* before decrease_axis */
    int out_ndim;                   /* after decrease_axis ([1] when all go) */
    int64_t out_dims[PE_MAX_DIMS];
} pe_slice_plan;

/* Validates axes/starts/ends/decrease_axis against `in` (slot `slot`) and
 * clamps starts/ends as Paddle and numpy do (negative counts from the end,
 * out-of-range bounds clamp to [0, dim], end <= start gives an empty axis). */
pe_status pe_slice_plan_make(const pe_op_ctx *ctx, const char *slot, const pe_tensor *in, pe_slice_plan *sp);

/* stack and unstack_grad join the parts (inputs) along a new axis into the
 * whole (output); unstack and stack_grad cut the whole (input) into the
 * parts (outputs). The slots of each of the four ops. */
static inline void pe_stack_slots(const pe_op_ctx *ctx, const char **whole, const char **parts) {
    switch (ctx->info->id) {
    case PE_OP_stack: *whole = "Y"; *parts = "X"; break;
    case PE_OP_unstack_grad: *whole = "X@GRAD"; *parts = "Y@GRAD"; break;
    case PE_OP_unstack: *whole = "X"; *parts = "Y"; break;
    default: *whole = "Y@GRAD"; *parts = "X@GRAD"; break; /* stack_grad */
    }
}

/* split: parts of x along `axis` (normalized), from num (equal parts) or
 * sections (one -1 inferred). */
typedef struct pe_split_plan {
    int axis;
    int n;                          /* number of parts */
    int64_t each;                   /* sections == NULL (num): every part has this size, 0 included */
    const int64_t *sections;        /* else: sizes, the -1 one is `inferred` */
    int64_t inferred;
} pe_split_plan;

/* Validates num/sections/axis against x (slot `slot`) and n_parts outputs. */
pe_status pe_split_plan_make(const pe_op_ctx *ctx, const char *slot, const pe_tensor *x, int n_parts,
                             pe_split_plan *sp);
int64_t pe_split_size(const pe_split_plan *sp, int k);

/* transpose2's permutation with size-1 dims dropped and output axes whose
 * input axes are adjacent and in order merged: [N, C, H, W] perm
 * (0, 2, 3, 1) -> [N, C, H*W] perm (0, 2, 1). Shared by the CPU and CUDA
 * kernels. */
typedef struct pe_transpose_plan {
    int r;                       /* rank after simplification */
    int64_t in_dims[PE_MAX_DIMS];
    int perm[PE_MAX_DIMS];       /* out axis j = in axis perm[j] */
} pe_transpose_plan;
/* x dims xd[r], axis[r] (negative counts from the end; validated by infer) */
void pe_transpose_plan_make(int r, const int64_t *xd, const int64_t *axis, pe_transpose_plan *t);

#ifdef __cplusplus
}
#endif
#endif
