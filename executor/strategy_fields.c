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
