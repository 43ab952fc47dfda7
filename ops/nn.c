/* ops/nn.c — shape inference of the nn family. (PLACEHOLDER: being written) */
#include "ops/op.h"

pe_status pe_infer_conv2d(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_pool2d(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_batch_norm(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
