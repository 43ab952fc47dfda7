/* ops/cuda/fused_optimizer.cu — CUDA kernels of merged_sgd, merged_momentum,
 * merged_adam, merged_adagrad, merged_rmsprop, merged_adamax, merged_adamw
 * and merged_lamb: n parameters updated in one op call (CPU kernels in
 * ops/cpu/fused_optimizer.c, shape inference in ops/fused.c).
 *
 * How: the code of the single ops (ops/cuda/optimizer.cuh) run over every
 * Param_k: the parameters are laid end to end in one virtual index space
 * and updated OPT_PACK (16) at a time by one grid-stride launch each, their
 * pointers and the device addresses of their scalars (LearningRate: one
 * shared var or one per parameter; Beta1Pow / Beta2Pow: one per parameter)
 * passed by value. Per parameter this is the single op's arithmetic, so the
 * results are bitwise those of the single CUDA ops (and of the CPU kernels).
 * Each member's powers are read by its update and advanced by a launch
 * after every update of the op (the pass never merges ops that share a
 * power). merged_lamb runs member by member (its trust ratio is per
 * parameter), as on the CPU.
 *
 * Why: n-1 launches fewer per step for a model of n parameters; no host
 * synchronization (nothing is read on the host, no device array is built).
 */
#include "ops/cuda/optimizer.cuh"

extern "C" {

pe_status pe_cuda_merged_sgd(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_SGD); }
pe_status pe_cuda_merged_momentum(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_MOMENTUM); }
pe_status pe_cuda_merged_adam(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAM); }
pe_status pe_cuda_merged_adagrad(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAGRAD); }
pe_status pe_cuda_merged_rmsprop(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_RMSPROP); }
pe_status pe_cuda_merged_adamax(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAMAX); }
pe_status pe_cuda_merged_adamw(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAMW); }
pe_status pe_cuda_merged_lamb(const pe_op_ctx *ctx) { return lamb_run(ctx); }

} // extern "C"
