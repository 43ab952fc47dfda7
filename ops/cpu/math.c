/* ops/cpu/math.c — CPU kernels of the math family. (PLACEHOLDER: being written) */
#include "ops/op.h"

pe_status pe_cpu_mul(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_cpu_matmul(const pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
