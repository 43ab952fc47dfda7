/* ops/cpu/tensor.c — CPU kernels of the tensor family. (PLACEHOLDER: being written) */
#include "ops/op.h"

pe_status pe_cpu_reshape2(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_cpu_transpose2(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_cpu_concat(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_cpu_fill_constant(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
