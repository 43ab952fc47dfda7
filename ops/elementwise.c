/* ops/elementwise.c — shape inference of the elementwise family. (PLACEHOLDER: being written) */
#include "ops/op.h"

pe_status pe_infer_elementwise(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_unary(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_cast(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
