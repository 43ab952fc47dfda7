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
#pragma GCC visibility push(default)

typedef enum pe_reduce_strategy { PE_REDUCE_ALL_REDUCE = 0, PE_REDUCE_REDUCE, PE_REDUCE_COUNT } pe_reduce_strategy;

typedef enum pe_grad_scale {
    PE_GRAD_SCALE_BATCH_SHARE = 0,  /* place i: rows_i / total_rows (default) */
    PE_GRAD_SCALE_COEFF_NUM_DEVICE, /* 1 / places (Paddle's default) */
    PE_GRAD_SCALE_ONE,              /* 1 */
    PE_GRAD_SCALE_CUSTOMIZED,       /* the user feeds loss@GRAD */
    PE_GRAD_SCALE_COUNT
} pe_grad_scale;

/* pe_parallel_executor_new refuses values out of these ranges, naming the
 * field, the value and what is allowed (pe_pe_options_check). */
#define PE_MAX_NUM_THREADS 1024 /* ExecutionStrategy.num_threads: 0 (automatic) or 1..1024 */

typedef struct pe_exec_strategy {
    int num_threads;                  /* scheduler pool; 0 = places-1, at least 1 (CPU), places*4 (CUDA); at most
                                       * PE_MAX_NUM_THREADS. 0 on one CPU place with kernels on more than one
                                       * OpenMP thread and num_trainers 1: no pool, the ops in sequence */
    int num_iteration_per_drop_scope; /* local scopes dropped after every k-th run (default 100; 0 = never) */
    int num_iteration_per_run;        /* the graph runs k times per pe_run (default 1; >= 1) */
    bool check_nan_inf;               /* every floating-point output of every op and collective checked
                                       * for NaN / Inf; the first fails the run naming the op, place,
                                       * output and element (default off; FLAGS_check_nan_inf=1 in the
                                       * environment turns it on too) */
    const char *timeline_path;        /* borrowed (copied at construction); NULL or "" = off unless
                                       * PE_TIMELINE is set. A path prefix or a directory: each run's
                                       * op handles, collectives and step are recorded and written as
                                       * a Chrome trace to <prefix>.rank<N>.json (a directory:
                                       * <dir>/timeline.rank<N>.json; N = trainer_id, 0 for one
                                       * process) at pe_parallel_executor_free and on
                                       * pe_pe_write_timeline (docs/guide.md, Timeline) */
} pe_exec_strategy;

typedef struct pe_build_strategy {
    pe_reduce_strategy reduce_strategy;
    pe_grad_scale gradient_scale_strategy;
    bool conv_nhwc;                   /* CPU places (default on): float32 conv2d / pool2d chains, the
                                       * activations and bias adds between them and their gradients
                                       * run NHWC (oneDNN's layout for them: no reorder per op),
                                       * transposes only where a feed, a fetch or another op meets
                                       * them (passes/conv_nhwc.c). Other bits than NCHW (float
                                       * tolerance), repeatable */
    bool fuse_conv_bias;              /* CPU places (default on): conv2d + its bias elementwise_add (+ their
                                       * grads) -> conv2d with Bias (oneDNN adds it in the primitive and
                                       * sums its gradient with the weights'; passes/fuse_conv_bias.c) */
    bool fuse_gemm_epilogue;          /* (default on; Paddle: off) mul + bias add [+ act] (+ their
                                       * grads) -> fc / fc_grad: the same bits, fewer passes */
    bool fuse_elewise_add_act_ops;    /* (default on; Paddle: off) add + act (+ grads) -> one op */
    bool fuse_all_optimizer_ops;
    bool fuse_all_reduce_ops;         /* gradients in contiguous buckets, one allreduce each */
    double fuse_grad_size_in_MB;      /* bucket capacity (default 25; finite, > 0) */
    double fuse_first_grad_size_in_MB; /* capacity of the first bucket filled in the backward
                                       * pass — the last layers' gradients — so communication
                                       * starts early (default 1; finite, > 0) */
    bool enable_inplace;
    bool memory_optimize;
    bool shard_optimizer;             /* CPU places, all_reduce (default on): the places share one
                                       * copy of each parameter and its optimizer accumulators,
                                       * and every sgd / momentum / adam update runs once, split
                                       * into one element range per place (each range's gradient
                                       * allreduce fused into it), instead of N times. Same bits. */
    bool shard_across_trainers;       /* num_trainers > 1: shard_optimizer applies across the
                                       * trainers only when this is set too (default off). Across
                                       * processes a sharded update costs two collectives (a
                                       * reduce-scatter and an all-gather, chained) instead of one
                                       * allreduce, which pays only where the optimizer's work
                                       * outweighs a collective's fixed cost (docs/benchmarks.md:
                                       * the MLP ran at half the speed with it) */
    bool enable_sequential_execution;
    bool sync_batch_norm;             /* Paddle's cross-place batch norm, which PE does not have: on
                                       * one place (one trainer) batch_norm already normalizes with
                                       * the whole batch's statistics and the switch is honoured; on
                                       * several, building a program with a batch_norm op fails
                                       * (PE_ERR_UNSUPPORTED naming the op) instead of training
                                       * with per-place statistics (default off) */
    const char *debug_graphviz_path;  /* borrowed; NULL = none */
} pe_build_strategy;

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
