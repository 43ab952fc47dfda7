/* ops/tensor.h — helpers shared by the tensor family's inference
 * (ops/tensor.c) and kernels (ops/cpu/tensor.c), internal to PE.
 */
#ifndef PE_OPS_TENSOR_H
#define PE_OPS_TENSOR_H

#include "ops/op.h"

/* fill_constant's fill value for dtype dt: str_value when non-empty (an
 * integer literal parsed exactly into *ival with *is_int set, for integer
 * dtypes; else strtod's syntax incl. "inf", "-inf", "nan"; "true"/"false"
 * for bool), otherwise the float attr `value`. Fails via pe_ctx_error when
 * the text is not a number or the value does not fit dt. */
pe_status pe_fill_constant_value(const pe_op_ctx *ctx, pe_dtype dt, double *val, int64_t *ival, bool *is_int);

#endif
