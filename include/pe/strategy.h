/* pe/strategy.h — how a program is built and run on several places:
 * BuildStrategy (the build passes) and ExecutionStrategy (the scheduler).
 *
 *     pe_pe_options opt;
 *     pe_pe_options_default(&opt);                  // defaults of both (pe/parallel_executor.h)
 *     opt.build_strategy.reduce_strategy = PE_REDUCE_REDUCE;
 *     opt.build_strategy.fuse_all_reduce_ops = true;
 *     opt.build_strategy.fuse_grad_size_in_MB = 32;
 *     opt.exec_strategy.num_threads = 4;
 *
 * Plain values, no functions: the build passes (passes/) read a
 * pe_build_strategy without depending on the executor, and
 * pe/parallel_executor.h carries both in pe_pe_options. Strings are borrowed.
 */
#ifndef PE_STRATEGY_H
#define PE_STRATEGY_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pe_reduce_strategy { PE_REDUCE_ALL_REDUCE = 0, PE_REDUCE_REDUCE } pe_reduce_strategy;

typedef enum pe_grad_scale {
    PE_GRAD_SCALE_BATCH_SHARE = 0,  /* place i: rows_i / total_rows (default) */
    PE_GRAD_SCALE_COEFF_NUM_DEVICE, /* 1 / places (Paddle's default) */
    PE_GRAD_SCALE_ONE,              /* 1 */
    PE_GRAD_SCALE_CUSTOMIZED        /* the user feeds loss@GRAD */
} pe_grad_scale;

typedef struct pe_exec_strategy {
    int num_threads;                  /* scheduler pool; 0 = places*2 (CPU), places*4 (CUDA) */
    int num_iteration_per_drop_scope; /* default 100 */
    int num_iteration_per_run;        /* default 1 */
} pe_exec_strategy;

typedef struct pe_build_strategy {
    pe_reduce_strategy reduce_strategy;
    pe_grad_scale gradient_scale_strategy;
    bool fuse_gemm_epilogue;          /* mul + bias add [+ act] (+ their grads) -> fc / fc_grad */
    bool fuse_elewise_add_act_ops;
    bool fuse_all_optimizer_ops;
    bool fuse_all_reduce_ops;         /* gradients in contiguous buckets, one allreduce each */
    double fuse_grad_size_in_MB;      /* bucket capacity (default 25) */
    double fuse_first_grad_size_in_MB; /* capacity of the first bucket filled in the backward
                                       * pass — the last layers' gradients — so communication
                                       * starts early (default 1) */
    bool enable_inplace;
    bool memory_optimize;
    bool shard_optimizer;             /* CPU places, all_reduce (default on): the places share one
                                       * copy of each parameter and its optimizer accumulators,
                                       * and every sgd / momentum / adam update runs once, split
                                       * into one element range per place (each range's gradient
                                       * allreduce fused into it), instead of N times. Same bits. */
    bool enable_sequential_execution;
    const char *debug_graphviz_path;  /* borrowed; NULL = none */
} pe_build_strategy;

#ifdef __cplusplus
}
#endif
#endif
