/* ops/math.c — shape inference of the math family. (PLACEHOLDER: being written) */
#include "ops/op.h"

pe_status pe_infer_mul(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_matmul(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
