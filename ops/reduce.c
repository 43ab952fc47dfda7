/* ops/reduce.c — shape inference of the reduce family. (PLACEHOLDER: being written) */
#include "ops/op.h"

pe_status pe_infer_mean(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_sum(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_arg_max(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_top_k(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
pe_status pe_infer_accuracy(pe_op_ctx *ctx) { return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "not implemented yet"); }
