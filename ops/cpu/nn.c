/* ops/cpu/nn.c — CPU kernels of the nn family. (PLACEHOLDER: being written) */
#include "ops/op.h"

pe_status pe_cpu_conv2d(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_cpu_pool2d(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_cpu_batch_norm(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
