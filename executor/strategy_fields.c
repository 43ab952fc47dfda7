/* executor/strategy_fields.c — the strategy fields by Paddle's names, one
 * table for every front end (pe/parallel_executor.h, pe_strategy_fields).
 *
 * What: each field of pe_exec_strategy and pe_build_strategy that a user
 * sets by name — its name, which struct, its kind (bool, int, double, or an
 * enum with its value names) and where it lives.
 * Who reads it: the Python binding (_core's strategy dicts in both
 * directions: the values a BuildStrategy / ExecutionStrategy sends, and
 * the defaults those classes start from, pe_pe_options_default's), and the
 * `pe` tools' --strategy parser (tools/args.c).
 * And Paddle's switches PE has nothing to map onto (pe_strategy_refused_fields):
 * only their default is accepted, any other value refused with the words
 * here, by the Python setters and `pe --strategy` alike.
 * Why: the fields and their defaults used to be written three times (C, the
 * Python classes, the CLI) and nothing checked they agreed; a new switch is
 * now one row here and its default one line in pe_pe_options_default.
 */
#include "pe/parallel_executor.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const k_reduce_names[] = {"all_reduce", "reduce"};
static const char *const k_scale_names[] = {"batch_share", "coeff_num_device", "one", "customized"};
_Static_assert(sizeof k_reduce_names / sizeof k_reduce_names[0] == PE_REDUCE_COUNT, "one name per reduce strategy");
_Static_assert(sizeof k_scale_names / sizeof k_scale_names[0] == PE_GRAD_SCALE_COUNT, "one name per scale strategy");

#define EXEC(name, kind) {#name, false, kind, offsetof(pe_exec_strategy, name), NULL, 0}
#define BUILD(name, kind) {#name, true, kind, offsetof(pe_build_strategy, name), NULL, 0}
#define BUILD_ENUM(name, names) \
    {#name, true, PE_FIELD_ENUM, offsetof(pe_build_strategy, name), names, sizeof names / sizeof names[0]}

const pe_strategy_field pe_strategy_fields[] = {
    EXEC(num_threads, PE_FIELD_INT),
    EXEC(num_iteration_per_drop_scope, PE_FIELD_INT),
    EXEC(num_iteration_per_run, PE_FIELD_INT),
    EXEC(check_nan_inf, PE_FIELD_BOOL),
    BUILD_ENUM(reduce_strategy, k_reduce_names),
    BUILD_ENUM(gradient_scale_strategy, k_scale_names),
    BUILD(conv_nhwc, PE_FIELD_BOOL),
    BUILD(fuse_conv_bias, PE_FIELD_BOOL),
    BUILD(fuse_gemm_epilogue, PE_FIELD_BOOL),
    BUILD(fuse_elewise_add_act_ops, PE_FIELD_BOOL),
    BUILD(fuse_all_optimizer_ops, PE_FIELD_BOOL),
    BUILD(fuse_all_reduce_ops, PE_FIELD_BOOL),
    BUILD(fuse_grad_size_in_MB, PE_FIELD_DOUBLE),
    BUILD(fuse_first_grad_size_in_MB, PE_FIELD_DOUBLE),
    BUILD(enable_inplace, PE_FIELD_BOOL),
    BUILD(memory_optimize, PE_FIELD_BOOL),
    BUILD(enable_sequential_execution, PE_FIELD_BOOL),
    BUILD(shard_optimizer, PE_FIELD_BOOL),
    BUILD(shard_across_trainers, PE_FIELD_BOOL),
    BUILD(sync_batch_norm, PE_FIELD_BOOL),
    {NULL, false, PE_FIELD_BOOL, 0, NULL, 0},
};

#define FUSIONS "its fusion passes: fuse_gemm_epilogue, fuse_elewise_add_act_ops, fuse_all_optimizer_ops, fuse_all_reduce_ops"

const pe_strategy_refused pe_strategy_refused_fields[] = {
    {"use_thread_barrier", false, true, 0, "PE's scheduler has no thread-barrier mode (Paddle's, for asynchronous "
                                     "parameter-server training): every run returns only after all of its ops "
                                     "finished"},
    {"allow_op_delay", false, true, 0, "PE does not delay communication ops: each collective starts as soon as its inputs "
                                 "are ready"},
    {"use_experimental_executor", false, true, 0, "PE has one scheduler (a dependency-counting thread pool, what Paddle's "
                                            "experimental FastThreadedSSAGraphExecutor is); there is no other to "
                                            "choose"},
    {"fuse_bn_act_ops", true, true, 0, "PE has no batch_norm + activation fusion (" FUSIONS ")"},
    {"fuse_bn_add_act_ops", true, true, 0, "PE has no batch_norm + elementwise_add + activation fusion (" FUSIONS ")"},
    {"fuse_relu_depthwise_conv", true, true, 0, "PE has no relu + depthwise_conv2d fusion"},
    {"fuse_broadcast_ops", true, true, 0, "PE has no fused broadcast: with reduce_strategy Reduce each owner broadcasts "
                                    "its updated parameters one collective each"},
    {"enable_auto_fusion", true, true, 0, "PE has no automatic fusion of elementwise subgraphs (Paddle's fusion_group)"},
    {"enable_addto", true, true, 0, "PE has no in-place (addto) gradient accumulation; its memory reuse is enable_inplace "
                              "and memory_optimize"},
    {"remove_unnecessary_lock", true, true, 1, "PE's collectives take no per-variable locks to keep"},
    {"cache_runtime_context", true, true, 0, "PE has no per-op runtime-context cache to switch on"},
    {"fix_op_run_order", true, true, 0, "PE's scheduler runs ops as their inputs become ready (collectives in one order on "
                                  "every place and trainer); for a fixed op order use enable_sequential_execution"},
    {"allow_cuda_graph_capture", true, true, 0, "PE does not capture CUDA graphs"},
    {"nccl_comm_num", true, false, 1, "PE runs each place's collectives on one communicator, in one order (only 1 is "
                                "accepted)"},
    {NULL, false, false, 0, NULL},
};

const pe_strategy_field *pe_strategy_field_find(const char *name) {
    for (const pe_strategy_field *f = pe_strategy_fields; name && f->name; f++)
        if (!strcmp(f->name, name)) return f;
    return NULL;
}

void *pe_strategy_field_ptr(const pe_strategy_field *f, pe_exec_strategy *es, pe_build_strategy *bs) {
    return (char *)(f->build ? (void *)bs : (void *)es) + f->offset;
}

void pe_strategy_field_names(const pe_strategy_field *f, char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < f->n_names && len < n; i++) {
        const char *sep = i == 0 ? "" : i == f->n_names - 1 ? " or " : ", ";
        int r = snprintf(buf + len, n - len, "%s%s", sep, f->names[i]);
        if (r < 0) break;
        len += (size_t)r;
    }
}
