/* graph/ssa_graph.h — the multi-device SSA graph the ParallelExecutor runs.
 *
 * One op handle per (op, place), plus collective handles spanning places
 * (allreduce of a gradient; reduce to an owner place and broadcast back
 * for the `reduce` strategy; sharded allreduce + optimizer update; the
 * collective ops a program carries, c_allreduce_sum and its kin). Vars are versioned per place: every write
 * creates a new version whose producer is the writing handle, so the
 * dependencies are exact: read-after-write, and write-after-read/write on
 * the previous version. Built by passes/multi_device.c; scheduled by
 * executor/scheduler.c; freed and written as DOT by graph/ssa_graph.c.
 */
#ifndef PE_GRAPH_SSA_GRAPH_H
#define PE_GRAPH_SSA_GRAPH_H

#include "pe/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The per-place [1] float64 var the loss-gradient seed (a fill_constant)
 * reads its value from: passes/multi_device.c declares it and wires it as
 * the seed's ValueTensor; the executor sets it before every run to the
 * place's gradient scale (BuildStrategy.gradient_scale_strategy). */
#define PE_LOSS_SCALE_VAR "@LOSS_SCALE@"

typedef enum pe_handle_kind {
    PE_HANDLE_OP = 0,
    PE_HANDLE_ALLREDUCE, /* var on every place = sum over places */
    PE_HANDLE_REDUCE,    /* var on root = sum over places */
    PE_HANDLE_BCAST,     /* var on every place = var on root */
    PE_HANDLE_ALLREDUCE_FUSED, /* one allreduce over a bucket of gradients (vars), laid out
                                * contiguously per place by the executor */
    PE_HANDLE_OPT_SHARD, /* shard `root` of n_shards of an optimizer op (op_idx) on CPU places
                          * (BuildStrategy.shard_optimizer): allreduce of its gradient `var`
                          * over that element range, then the op's update of the range, once,
                          * into every place's parameter and accumulators */
    PE_HANDLE_JOIN,      /* no work: completes when an op's shards have (the new versions of
                          * the vars they write are its) */
    /* shard_optimizer across trainers (the shards are global ranks: shard s of n_shards
     * runs on trainer s / places, place s % places, an OPT_SHARD handle whose `place`
     * is that place here):
     * SHARD_SUM, before the op's shards: the gradient `var` reduce-scattered over every
     * rank of every trainer, each shard's range summed into its owner's copy;
     * SHARD_GATHER, after them (the op's JOIN): the updated ranges of the parameter and
     * the accumulators all-gathered from their owners to every trainer */
    PE_HANDLE_SHARD_SUM,
    PE_HANDLE_SHARD_GATHER,
    PE_HANDLE_ALLGATHER, /* a program's c_allgather (op_idx): vars[0] (Out) on every place = var
                          * (X) of every rank of the world, in rank order along axis 0 */
    PE_HANDLE_SCATTER,   /* a program's c_scatter (op_idx): vars[0] (Out) of rank r = rows chunk r
                          * of var (X) of rank `root` */
    PE_HANDLE_KIND_COUNT
} pe_handle_kind;

typedef struct pe_ssa_var {
    const char *name;  /* borrowed from the place's program */
    int place;
    int version;
    int producer;      /* handle id, -1 = initial value (feed, parameter) */
} pe_ssa_var;

typedef struct pe_handle {
    pe_handle_kind kind;
    int place;         /* OP: place index; OPT_SHARD: the place that runs it; collectives: -1 */
    int op_idx;        /* OP: op index in block 0 of progs[place]; ALLREDUCE / REDUCE / BCAST /
                        * ALLGATHER / SCATTER: the program's collective op (c_allreduce_sum, ...;
                        * ops/collective.h) they run (pe_handle_is_program_collective), whose
                        * world_root (and root) is a rank of the world (trainers x places) and which
                        * reads and writes var (ALLGATHER, SCATTER: reads var, writes vars[0]) on
                        * every place; -1 for the gradients' collectives */
    const char *var;   /* collectives: the var (borrowed); ALLREDUCE_FUSED: the first */
    const char **vars; /* ALLREDUCE_FUSED: the bucket's vars in layout order; ALLGATHER, SCATTER:
                        * the op's Out (array owned, names borrowed) */
    int n_vars;
    int64_t bucket_bytes; /* ALLREDUCE_FUSED: bytes of the bucket (per place) */
    int root;          /* REDUCE / BCAST: owner place (-1: a place of another trainer; a program's
                        * op: its world_root); OPT_SHARD / JOIN: shard index (JOIN: 0; across
                        * trainers: the global rank that owns the shard) */
    int world_root;    /* REDUCE / BCAST / SCATTER: the owner's global rank (trainer x places +
                        * place), the root of the collective; = root within one process */
    int n_shards;      /* OPT_SHARD / JOIN: shards of the op (shard i runs with place i's tensors) */
    int *succ;         /* handles that depend on this one */
    int n_succ, cap_succ;
    int n_deps;        /* number of predecessors */
} pe_handle;

typedef struct pe_ssa_graph {
    int n_places;
    pe_program **progs;      /* per place, owned: the program as that place runs it */
    pe_handle *h;
    int n_h, cap_h;
    pe_ssa_var *vars;
    int n_vars, cap_vars;
    int loss_grad_op;        /* op index of the loss-gradient seed in each prog, -1 = none */
    int n_param_grads;       /* gradients exchanged between places */
    int n_buckets;           /* ALLREDUCE_FUSED handles (fuse_all_reduce_ops) */
    int n_sharded_ops;       /* optimizer ops run as OPT_SHARD handles (shard_optimizer) */
    int n_fuse_grads;        /* fuse_all_reduce_ops: the gradients it planned buckets for, */
    int n_fuse_sharded;      /* and those of them summed inside sharded updates instead */
} pe_ssa_graph;

/* A program's collective op (c_allreduce_sum, ...) run as this handle,
 * not one of the gradients' collectives. */
static inline bool pe_handle_is_program_collective(const pe_handle *h) {
    return h->op_idx >= 0 && (h->kind == PE_HANDLE_ALLREDUCE || h->kind == PE_HANDLE_REDUCE ||
                              h->kind == PE_HANDLE_BCAST || h->kind == PE_HANDLE_ALLGATHER ||
                              h->kind == PE_HANDLE_SCATTER);
}

void pe_ssa_graph_free(pe_ssa_graph *g); /* accepts NULL */
/* Handle `to` waits for handle `from` (no-op when from < 0, from == to or
 * the edge exists). The caller keeps the graph acyclic. -1: out of memory. */
int pe_ssa_graph_add_edge(pe_ssa_graph *g, int from, int to);
/* One fixed topological order of the handles into order[0, n_h): Kahn's
 * algorithm taking the lowest-numbered ready handle first, so it is the
 * handle order itself whenever every edge goes from a lower handle to a
 * higher one (as the multi-device pass creates them), and departs from it
 * only where a later edge goes back (memory_optimize's early updates). The
 * order enable_sequential_execution runs. PE_ERR_INTERNAL on a cycle. */
pe_status pe_ssa_graph_topo_order(const pe_ssa_graph *g, int *order);
/* Writes the graph as Graphviz DOT (atomic). */
pe_status pe_ssa_graph_write_dot(const pe_ssa_graph *g, const char *path);

#ifdef __cplusplus
}
#endif
#endif
