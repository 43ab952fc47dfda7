/* executor/memory_plan/plan.h — the static memory plan (internal).
 *
 * Two layers:
 *
 * 1. A solver over an abstract DAG (tested on random DAGs): tensors with a
 *    size, the node that first writes them and every node that touches
 *    them get offsets in one arena. Nodes run concurrently in dependency
 *    order, so two tensors may share bytes only when the DAG orders them:
 *    every access of A happens-before the first write of B (a path in the
 *    DAG), or B is written in place of A by the op that reads A last.
 *
 *        pe_mp_reach *r;  pe_mp_reach_new(n_nodes, succ, n_succ, &r);
 *        pe_mp_tensor t[] = {{.bytes = 4096, .first_writer = 0, .access = acc0, .n_access = 2,
 *                             .inplace_of = -1}, ...};
 *        pe_mp_stats st;  pe_mp_solve(r, t, n, true, true, &st);   // t[i].offset set
 *
 * 2. The graph front end: per place of a multi-device SSA graph, the
 *    non-persistable temporaries (not fed, fetched or read before written),
 *    their accessors (op handles and collectives; an input ops.def marks
 *    "-X", whose data the kernel never reads, is not an access), in-place
 *    pairs from ops.def, and their sizes from static shape inference (every op's infer
 *    over meta-only tensors, starting from the feed and persistable shapes).
 *
 *        pe_mp_graph *mg;  pe_mp_graph_new(ssa_graph, &mg);      // once per graph
 *        pe_mem_plan *plan;
 *        pe_mp_plan_build(mg, places, meta_fn, user, protect, n_protect, true, true, threads, &plan);  // per feed shapes
 *        for each place p, plan->place[p].vars[i]: name -> offset, bytes in p's arena
 *                          plan->place[p].ws[i]: op handle -> offset, bytes of its kernel's workspace
 */
#ifndef PE_EXECUTOR_MEMORY_PLAN_PLAN_H
#define PE_EXECUTOR_MEMORY_PLAN_PLAN_H

#include "graph/ssa_graph.h"
#include "pe/tensor.h"

#define PE_MP_ALIGN 64

/* b rounded up to a multiple of PE_MP_ALIGN. */
static inline int64_t pe_mp_align_up(int64_t b) { return (b + PE_MP_ALIGN - 1) / PE_MP_ALIGN * PE_MP_ALIGN; }

/* ---- reachability over a DAG ------------------------------------------- */

typedef struct pe_mp_reach pe_mp_reach;

/* succ[u][0..n_succ[u]) are u's successors. Fails (PE_ERR_INVALID) on a
 * cycle. *out owned by the caller (pe_mp_reach_free). */
pe_status pe_mp_reach_new(int n_nodes, const int *const *succ, const int *n_succ, pe_mp_reach **out);
/* The same over the handles of an SSA graph. */
pe_status pe_mp_reach_from_graph(const pe_ssa_graph *g, pe_mp_reach **out);
void pe_mp_reach_free(pe_mp_reach *r); /* accepts NULL */
/* A path from -> to of at least one edge (so never from == to). */
bool pe_mp_reaches(const pe_mp_reach *r, int from, int to);
/* Position of node in one fixed topological order, and the node at a position. */
int pe_mp_topo_pos(const pe_mp_reach *r, int node);
int pe_mp_topo_node(const pe_mp_reach *r, int pos);
int pe_mp_n_nodes(const pe_mp_reach *r);

/* ---- the solver ---------------------------------------------------------- */

typedef struct pe_mp_tensor {
    int64_t bytes;       /* in: size (> 0); rounded up to PE_MP_ALIGN */
    int first_writer;    /* in: node writing it first (an element of access) */
    const int *access;   /* in: every node that reads or writes it (borrowed) */
    int n_access;
    int inplace_of;      /* in: tensor whose bytes it may take over at first_writer, -1 = none */
    int64_t offset;      /* out: byte offset in the arena */
    bool inplaced;       /* out: it took over inplace_of's bytes */
} pe_mp_tensor;

typedef struct pe_mp_stats {
    int64_t arena_bytes;     /* peak with the plan (the arena size) */
    int64_t no_reuse_bytes;  /* sum of the aligned sizes: every tensor its own bytes */
    int n_inplace;           /* tensors written in place of an input */
    int n_shared;            /* other tensors placed over a dead tensor's bytes */
    bool by_size;            /* the greedy-by-size order gave the smaller arena */
} pe_mp_stats;

/* Places the tensors. reuse: a tensor may take bytes of tensors ordered
 * before it (best fit over the address-ordered, coalesced free gaps);
 * otherwise each gets fresh bytes at the end. inplace: a tensor may take
 * over its in-place input when the op writing it is that input's last
 * access. Two placement orders are tried — by first writer, and greedy by
 * size (in-place chains as groups, largest first) — and the smaller arena
 * is kept. */
pe_status pe_mp_solve(const pe_mp_reach *r, pe_mp_tensor *t, int n, bool reuse, bool inplace, pe_mp_stats *st);

/* ---- the graph front end ------------------------------------------------ */

typedef struct pe_mp_graph pe_mp_graph;

/* Analyses g (borrowed; must outlive the result): reachability, accessors
 * and in-place pairs of every var per place, the vars read before written. */
pe_status pe_mp_graph_new(const pe_ssa_graph *g, pe_mp_graph **out);
void pe_mp_graph_free(pe_mp_graph *mg); /* accepts NULL */
/* Non-persistable vars of place p read before any op writes them (feeds). */
int pe_mp_graph_n_inputs(const pe_mp_graph *mg, int place);
const char *pe_mp_graph_input(const pe_mp_graph *mg, int place, int i);
/* True when `name` is a non-persistable var of place p's program that is
 * written before it is read (a temporary the plan would place). */
bool pe_mp_graph_is_temp(const pe_mp_graph *mg, int place, const char *name);

/* Fills the meta (dtype, dims) of a var the program reads before writing
 * it (a feed) or of a persistable; decl is its declaration or NULL. */
typedef pe_status (*pe_mp_meta_fn)(void *user, int place, const char *name, const pe_var *decl, pe_tensor *meta);

typedef struct pe_mp_var_plan {
    const char *name;   /* borrowed from the graph's program */
    int64_t offset;     /* in the place's arena */
    int64_t bytes;      /* aligned size */
    bool inplaced;
} pe_mp_var_plan;

/* The scratch of one op's kernel (its pe_workspace_fn, ops/op.h), placed
 * like a temporary that only that op touches: live while it runs. */
typedef struct pe_mp_ws_plan {
    int handle;         /* the op handle (index in the SSA graph) */
    int64_t offset;     /* in the place's arena */
    int64_t bytes;      /* aligned size (>= what the kernel asked for) */
} pe_mp_ws_plan;

typedef struct pe_mp_place_plan {
    pe_mp_var_plan *vars;
    int n_vars;
    pe_mp_ws_plan *ws;
    int n_ws;
    pe_mp_stats stats;  /* arena_bytes: vars and workspaces; no_reuse_bytes: the vars' sum */
} pe_mp_place_plan;

typedef struct pe_mem_plan {
    int n_places;
    pe_mp_place_plan *place;
} pe_mem_plan;

/* Plans every place: shapes by static inference from meta_fn's shapes;
 * places: the graph's places (NULL = cpu:0..N-1); protect: names never
 * placed (fed and fetched vars); kernel_threads: the OpenMP threads each
 * kernel will run with (an op's workspace depends on it: oneDNN splits
 * its work by thread). With reuse, ops whose kernel has a pe_workspace_fn
 * get their workspace placed too (building their oneDNN primitives now). *out owned
 * by the caller (pe_mem_plan_free). Errors name the op, var and place. */
pe_status pe_mp_plan_build(const pe_mp_graph *mg, const pe_place *places, pe_mp_meta_fn meta_fn, void *user,
                           const char *const *protect, int n_protect, bool reuse, bool inplace, int kernel_threads,
                           pe_mem_plan **out);
void pe_mem_plan_free(pe_mem_plan *p); /* accepts NULL */

/* The OpenMP threads each kernel of an executor over n_places places runs
 * with: the OpenMP budget (OMP_NUM_THREADS, default the cores) shared by
 * the places, at least 1. The executor and `pe plan` both use it, so the
 * report plans the workspaces the executor will. */
int pe_mp_kernel_threads(int n_places);

#endif
