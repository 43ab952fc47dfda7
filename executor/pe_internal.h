/* executor/pe_internal.h — the ParallelExecutor's state, shared by the files
 * that each do one job of it (internal to executor/).
 *
 *   parallel_executor.c  options, construction (every decision a run needs is
 *                        made here), free, the run body and the table from
 *                        handle kind to its run function
 *   local_scopes.c       place scopes, the broadcast of persistables, local
 *                        execution scopes, op contexts, drop, byte counts
 *   feed_fetch.c         feed checks, split and zero-copy views, fetch merge
 *                        (the checks are shared with the single-place executor)
 *   grad_buckets.c       fuse_all_reduce_ops buckets, coalesced optimizer
 *                        state, the bucket and per-var collectives
 *   opt_shard.c          shard_optimizer: the sharded updates and their
 *                        shared state
 *   trainers.c           num_trainers > 1: the world of processes (MPI),
 *                        its checks, the broadcast from trainer 0, the
 *                        global batch and the collectives' fixed order
 *   timeline.c           the timeline: handle and run spans, the trace file
 *
 * Why one struct in a header: the jobs act on the same per-place scopes and
 * graph; splitting the state would only add getters. Each field notes which
 * file owns it (creates, changes and frees it); the others only read it.
 */
#ifndef PE_EXECUTOR_PE_INTERNAL_H
#define PE_EXECUTOR_PE_INTERNAL_H

#include "executor/feed_fetch.h"
#include "executor/memory_plan/arena.h"
#include "executor/scheduler.h"
#include "executor/timeline.h"
#include "ops/op.h"
#include "pe/parallel_executor.h"
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

struct feed_view; /* feed_fetch.c */

/* What a collective's completion callback needs to tell the scheduler
 * (grad_buckets.c): one per handle of the graph in use. */
typedef struct pe_coll_done {
    pe_parallel_executor *pe;
    int h;
    int64_t t0;             /* timeline on: when the handle started (written before it is issued) */
} pe_coll_done;

/* One built graph with what is derived from it (a second one exists when a
 * fusion pass removed vars: the same program with them kept, for a run
 * that fetches one). Owned by parallel_executor.c. */
typedef struct pe_graph_variant {
    pe_ssa_graph *g;
    pe_mem_arenas *arenas;  /* memory plan (memory_optimize / enable_inplace); NULL = off */
    int *order;             /* pe->sequential: the handles in the order they run
                             * (pe_ssa_graph_topo_order); NULL = the scheduler runs them */
} pe_graph_variant;

struct pe_parallel_executor {
    int n;
    pe_place places[PE_MAX_PLACES];
    const pe_program *prog;
    pe_pe_options opt;
    bool built;
    /* parallel_executor.c: the graph the runs use and its memory plan (a
     * copy of variants[0] or, once a run fetched a var fusion removed,
     * variants[1]: the graph keeping those vars; its g is NULL when fusion
     * removed none) */
    pe_ssa_graph *g;
    pe_mem_arenas *arenas;
    const int *order;       /* its variant's order (pe->sequential), else NULL */
    pe_graph_variant variants[2];
    pe_sched *sched;
    pe_comm_group *comm;    /* the places' collectives (runtime/comm) */
    pe_comm *outer;         /* num_trainers > 1: this process's MPI rank (trainers.c) */
    pe_place_services svc[PE_MAX_PLACES]; /* what each place's kernels get (ctx->svc): its comm rank */
    pe_coll_done *coll_done; /* per handle of g (grad_buckets.c) */
    int kernel_threads;
    bool sequential;        /* no pool: build_strategy.enable_sequential_execution, or the automatic pool
                             * of one multi-threaded CPU place (parallel_executor.c) */
    bool check_nan_inf;     /* exec_strategy.check_nan_inf or FLAGS_check_nan_inf (executor/nan_inf.c) */
    pe_timeline *tl;        /* exec_strategy.timeline_path or PE_TIMELINE (executor/timeline.c); NULL = off */
    int64_t iter;
    /* local_scopes.c */
    pe_scope *global;
    pe_scope *place_scope[PE_MAX_PLACES];
    bool owns_place_scope[PE_MAX_PLACES];
    pe_scope *local[PE_MAX_PLACES];
    pe_op_ctx *ctxs;        /* per handle of g; valid while prepared */
    bool prepared;
    /* feed_fetch.c: rows fed to each place this run (the loss scale) */
    int64_t rows[PE_MAX_PLACES];
    struct feed_view *views; /* zero-copy feeds: one reusable buffer header per (place, var) */
    int n_views, cap_views;
    /* grad_buckets.c */
    void **bucket_mem;      /* fuse_all_reduce_ops: [handle * n + place] contiguous gradients, or NULL */
    int bucket_slots;       /* n_h * n when bucket_mem is allocated */
    struct { pe_place place; void *ptr; size_t bytes; } *opt_mem; /* coalesced optimizer gradients */
    int n_opt_mem;
    /* opt_shard.c */
    char **gather_mem;      /* across trainers: [handle] each SHARD_GATHER's exchange buffer, or NULL */
    int n_gather_mem;
    const char **shared_state; /* vars the places share (names borrowed from the graph) */
    int n_shared_state;
    /* the current run's fetch list (borrowed during the run) */
    const char *const *run_fetch;
    int run_n_fetch;
    /* pe_run_take: fetched buffers are handed over, not copied (feed_fetch.c:fetch_one) */
    bool fetch_take;
};

/* parallel_executor.c: replaces the places' collectives with g (ownership
 * transferred; g->n_places must be the place count), e.g. a group over
 * rank communicators that complete through work callbacks. For tests of
 * the asynchronous path; between runs only. */
pe_status pe_pe_replace_comm(pe_parallel_executor *pe, pe_comm_group *g);

static inline const char *pe_pe_place_name(const pe_parallel_executor *pe, int p, char *buf) {
    return pe_place_str(pe->places[p], buf, 32);
}

/* parallel_executor.c: replaces the places' collectives with g (ownership
 * transferred; g->n_places must be the place count), e.g. a group over
 * rank communicators that complete through work callbacks. For tests of
 * the asynchronous path; between runs only. */
pe_status pe_pe_replace_comm(pe_parallel_executor *pe, pe_comm_group *g);

/* local_scopes.c */
pe_status pe_pe_make_place_scopes(pe_parallel_executor *pe, pe_scope *scope);
pe_status pe_pe_broadcast_persistables(pe_parallel_executor *pe);
pe_status pe_pe_ensure_local(pe_parallel_executor *pe);
pe_status pe_pe_ensure_prepared(pe_parallel_executor *pe);
void pe_pe_release_ctxs(pe_parallel_executor *pe);
void pe_pe_free_place_scopes(pe_parallel_executor *pe);

/* feed_fetch.c (its checks: executor/feed_fetch.h) */
pe_status pe_pe_feed_dict(pe_parallel_executor *pe, const pe_feed *feed, int n_feed);
pe_status pe_pe_feed_list(pe_parallel_executor *pe, const pe_feed *const *feeds, const int *n_feeds);
pe_status pe_pe_fetch(pe_parallel_executor *pe, const char *const *fetch, int n_fetch, bool merged, pe_tensor **out);
void pe_pe_release_feed_views(pe_parallel_executor *pe);
void pe_pe_free_feed_views(pe_parallel_executor *pe);

/* grad_buckets.c */
pe_status pe_pe_lay_out_buckets(pe_parallel_executor *pe);
pe_status pe_pe_lay_out_opt_grads(pe_parallel_executor *pe);
pe_status pe_pe_coalesce_optimizer_state(pe_parallel_executor *pe);
pe_status pe_pe_protect_buckets(pe_parallel_executor *pe, pe_mem_arenas *arenas, const pe_ssa_graph *g);
void pe_pe_free_buckets(pe_parallel_executor *pe);
void pe_pe_free_opt_mem(pe_parallel_executor *pe);
size_t pe_pe_bucket_bytes(const pe_parallel_executor *pe);
pe_status pe_pe_run_bucket(pe_parallel_executor *pe, int h);
pe_status pe_pe_run_collective(pe_parallel_executor *pe, int h);
pe_status pe_pe_run_allgather(pe_parallel_executor *pe, int h); /* a program's c_allgather */
pe_status pe_pe_run_scatter(pe_parallel_executor *pe, int h);   /* a program's c_scatter */
pe_status pe_pe_check_collective(pe_parallel_executor *pe, int h); /* check_nan_inf: its outputs */
/* Handle h's collective started with status st and work w (NULL unless
 * st is PE_OK): PE_SCHED_PENDING and the work's callback tells the
 * scheduler, or without a scheduler the work waited for. */
pe_status pe_pe_await_work(pe_parallel_executor *pe, int h, pe_status st, pe_work *w);

/* trainers.c: across processes (num_trainers > 1) */
pe_status pe_pe_make_comm(pe_parallel_executor *pe);
/* Compares the trainers' views allgathered at construction (all: [R][4] =
 * num_trainers, trainer_id, place count, program hash; borrowed; other
 * processes' bytes): PE_OK, or PE_ERR_INVALID naming the first that differs. */
pe_status pe_pe_check_trainers(const int64_t *all, int R);
void pe_pe_free_comm(pe_parallel_executor *pe);
int pe_pe_world_places(const pe_parallel_executor *pe);
pe_status pe_pe_broadcast_from_trainer0(pe_parallel_executor *pe);
pe_status pe_pe_global_rows(pe_parallel_executor *pe, int64_t *total);
pe_status pe_pe_chain_collectives(pe_ssa_graph *g);

/* opt_shard.c */
pe_status pe_pe_collect_sharded_state(pe_parallel_executor *pe);
bool pe_pe_is_sharded_state(const pe_parallel_executor *pe, const char *name);
pe_status pe_pe_share_sharded_state(pe_parallel_executor *pe);
pe_status pe_pe_run_opt_shard(pe_parallel_executor *pe, int h);
pe_status pe_pe_check_opt_shard(pe_parallel_executor *pe, int h); /* check_nan_inf: its range */
/* across trainers: SHARD_SUM and SHARD_GATHER handles, and the gather's
 * copies out once its all-gather is done */
pe_status pe_pe_run_shard_sum(pe_parallel_executor *pe, int h);
pe_status pe_pe_run_shard_gather(pe_parallel_executor *pe, int h);
void pe_pe_unpack_shard_gather(pe_parallel_executor *pe, int h);
void pe_pe_free_gather_mem(pe_parallel_executor *pe);

#endif
