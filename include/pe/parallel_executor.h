/* pe/parallel_executor.h — data-parallel execution on several places.
 *
 *     // startup already run into `scope` with a single-place pe_executor
 *     int n = pe_cpu_place_count();                       // CPU_NUM, default 1
 *     pe_place places[8];
 *     for (int i = 0; i < n; i++) places[i] = pe_place_cpu(i);
 *     pe_pe_options opt;
 *     pe_pe_options_default(&opt);
 *     opt.loss_name = "loss";
 *     pe_parallel_executor *train;
 *     if (pe_parallel_executor_new(places, n, main_prog, scope, &opt, &train) != PE_OK) ...
 *     pe_feed feed[2] = {{"x", x}, {"label", y}};        // split along axis 0
 *     const char *fetch[] = {"loss"};
 *     pe_tensor *loss = pe_tensor_new();                  // shape [n]: one per place
 *     pe_run(train, feed, 2, fetch, 1, true, &loss);
 *
 *     opt.share_vars_from = train;                        // eval reads train's params
 *     pe_parallel_executor *eval;
 *     pe_parallel_executor_new(places, n, test_prog, scope, &opt, &eval);
 *     ...
 *     pe_drop_local_exe_scopes(train);
 *     pe_parallel_executor_free(eval); pe_parallel_executor_free(train);
 *
 * Semantics (DESIGN.md §4): persistables of `scope` are broadcast from place
 * 0 at construction; dict feeds are split along axis 0 into contiguous
 * pieces (the last places take the extra rows: 5 rows on 4 places -> 1,1,1,2;
 * pe_batch_shard);
 * gradients are summed across places (fixed order: bitwise reproducible);
 * fetches are concatenated along axis 0 in place order (persistables come
 * back once, from place 0). The first error on any place stops the run on
 * every place and is returned with the op, place and var names.
 */
#ifndef PE_PARALLEL_EXECUTOR_H
#define PE_PARALLEL_EXECUTOR_H

#include "pe/executor.h"
#include "pe/strategy.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

typedef struct pe_parallel_executor pe_parallel_executor;

typedef struct pe_pe_options {
    const char *loss_name;                        /* NULL: inference only */
    const pe_parallel_executor *share_vars_from;  /* borrowed; must outlive the new one */
    pe_exec_strategy exec_strategy;
    pe_build_strategy build_strategy;
    int num_trainers;                             /* processes (1 = this one) */
    int trainer_id;
} pe_pe_options;

void pe_pe_options_default(pe_pe_options *o);
/* PE_OK when every strategy value is in its range (pe/strategy.h), else
 * PE_ERR_INVALID naming the field, the value and what is allowed.
 * pe_parallel_executor_new makes this check first. */
pe_status pe_pe_options_check(const pe_pe_options *o);

/* The strategy fields a user sets by name (Paddle's), for front ends that
 * take them as text or dicts (the Python binding, `pe --strategy`):
 *
 *     const pe_strategy_field *f = pe_strategy_field_find("fuse_gemm_epilogue");
 *     if (f && f->kind == PE_FIELD_BOOL)
 *         *(bool *)pe_strategy_field_ptr(f, &o.exec_strategy, &o.build_strategy) = false;
 *
 * pe_strategy_fields ends with a NULL name; values and defaults are those
 * of pe_pe_options_default. An enum field is stored as an int (its C enum)
 * and named by names[value]. Strings (debug_graphviz_path) are not in it. */
typedef enum pe_strategy_kind { PE_FIELD_BOOL, PE_FIELD_INT, PE_FIELD_DOUBLE, PE_FIELD_ENUM } pe_strategy_kind;

typedef struct pe_strategy_field {
    const char *name;          /* "fuse_gemm_epilogue" */
    bool build;                /* a pe_build_strategy field; false: pe_exec_strategy */
    pe_strategy_kind kind;     /* BOOL: bool, INT and ENUM: int, DOUBLE: double */
    size_t offset;             /* within its struct */
    const char *const *names;  /* ENUM: the value names by value ("all_reduce", "reduce") */
    int n_names;
} pe_strategy_field;

extern const pe_strategy_field pe_strategy_fields[];
/* Paddle's strategy switches PE has nothing to map onto: a front end
 * accepts the default (Paddle scripts that set it run) and refuses any other
 * value with "<Strategy>.<name> = <v> is not supported: <why>". Ends
 * with a NULL name. */
typedef struct pe_strategy_refused {
    const char *name;
    bool build;                /* BuildStrategy; false: ExecutionStrategy */
    bool boolean;              /* a switch; false: an int (nccl_comm_num) */
    int dflt;                  /* the one value accepted (a switch: 0 / 1) */
    const char *why;
} pe_strategy_refused;

extern const pe_strategy_refused pe_strategy_refused_fields[];

/* NULL when no field has that name. */
const pe_strategy_field *pe_strategy_field_find(const char *name);
/* The field's storage in es or bs (whichever struct it belongs to). */
void *pe_strategy_field_ptr(const pe_strategy_field *f, pe_exec_strategy *es, pe_build_strategy *bs);
/* An enum field's value names as text into buf: "all_reduce or reduce",
 * "a, b, c or d" (truncated to n). */
void pe_strategy_field_names(const pe_strategy_field *f, char *buf, size_t n);

/* CPU_NUM from the environment (default 1, with a warning when unset on a
 * multi-core machine). Invalid values are an error (returns -1 + message). */
int pe_cpu_place_count(void);

/* places: n_places places of one kind (copied). main_program and scope are
 * borrowed and must outlive the executor. *out owned by the caller. */
pe_status pe_parallel_executor_new(const pe_place *places, int n_places, const pe_program *main_program,
                                   pe_scope *scope, const pe_pe_options *opt, pe_parallel_executor **out);
void pe_parallel_executor_free(pe_parallel_executor *pe); /* accepts NULL */

/* Dict feed: each tensor split along axis 0 across places (a persistable var
 * is copied to every place); fewer rows than places is PE_ERR_INVALID, but
 * one place takes any batch, an empty one included (docs/guide.md §5: a NaN
 * mean loss, zero gradients). The feed tensors are borrowed for the call: on
 * CPU places each place reads its rows in place (no copy), so they must
 * stay alive and unchanged until pe_run returns; afterwards the executor
 * holds no reference to them, and the fed vars are empty (a feed lasts for
 * its run). fetch_out: n_fetch caller-owned tensors when return_merged, else
 * n_fetch * n_places ([fetch][place]). */
pe_status pe_run(pe_parallel_executor *pe, const pe_feed *feed, int n_feed, const char *const *fetch, int n_fetch,
                 bool return_merged, pe_tensor **fetch_out);
/* pe_run with return_merged, but on one CPU place a fetched var that is
 * not persistable and whose buffer nobody else holds is handed over rather
 * than copied: fetch_out[i] takes its buffer and the var is left without
 * one (the op that computes it allocates again the next run). For results
 * the caller keeps and the executor recomputes anyway (pe.jit's gradients);
 * others are copied as by pe_run. */
pe_status pe_run_take(pe_parallel_executor *pe, const pe_feed *feed, int n_feed, const char *const *fetch, int n_fetch,
                      pe_tensor **fetch_out);
/* List feed: feeds[i] (n_feeds[i] entries) used as given on place i
 * (borrowed for the call, as with pe_run); n_lists must equal the place
 * count. */
pe_status pe_run_list(pe_parallel_executor *pe, const pe_feed *const *feeds, const int *n_feeds, int n_lists,
                      const char *const *fetch, int n_fetch, bool return_merged, pe_tensor **fetch_out);

/* The rule that splits a batch of `rows` rows into n contiguous parts, in
 * order, sizes differing by at most one, the LAST rows % n parts taking one
 * row more (3 rows on 2: [0], [1, 2]; 5 rows on 4: 1, 1, 1, 2): pe_run's
 * split of a dict feed across places, and the share of a global batch each
 * of num_trainers processes feeds (trainer i of n takes rows [first, first +
 * count)). Returns the count of part i and sets *first (may be NULL); 0 rows
 * for i outside 0..n-1. */
int64_t pe_batch_shard(int64_t rows, int n, int i, int64_t *first);

/* Sums `count` values of dtype `dt` at buf (borrowed) over the trainers of a
 * ParallelExecutor built with num_trainers > 1, in trainer order, so every
 * trainer gets the same bits (e.g. a loss weighted by each trainer's rows,
 * or a fetch gathered by summing zero-padded pieces); with one trainer buf
 * is left as it is. A collective: every trainer calls it, between runs, in
 * the same order with the same count and dtype. */
pe_status pe_trainers_allreduce(pe_parallel_executor *pe, void *buf, int64_t count, pe_dtype dt);

/* Frees every local execution scope (temporaries); the next run recreates them. */
void pe_drop_local_exe_scopes(pe_parallel_executor *pe);
int pe_device_count(const pe_parallel_executor *pe);
/* Bytes held by the local execution scopes of all places. */
size_t pe_local_exe_scopes_bytes(const pe_parallel_executor *pe);
/* The scope of place i (place 0: the scope given at construction, unless
 * share_vars_from). Borrowed. */
pe_scope *pe_place_scope(const pe_parallel_executor *pe, int i);

/* Timeline (ExecutionStrategy.timeline_path or PE_TIMELINE=<dir-or-prefix>
 * in the environment; pe/strategy.h): writes every event recorded so far
 * (all runs since construction) as Chrome trace-event JSON to path
 * (borrowed), or to the executor's own file when path is NULL (atomically;
 * the executor also writes it at free when it ran). Between runs only.
 * PE_ERR_INVALID when the timeline is off. */
pe_status pe_pe_write_timeline(pe_parallel_executor *pe, const char *path);
/* The executor's timeline file, or NULL when the timeline is off. Borrowed,
 * valid until the executor is freed. */
const char *pe_pe_timeline_path(const pe_parallel_executor *pe);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
