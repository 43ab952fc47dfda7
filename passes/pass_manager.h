/* passes/pass_manager.h — runs the build passes in BuildStrategy order
 * (internal; used by the ParallelExecutor, pe/build.h (passes/build.c) and
 * pe/plan.h (executor/memory_plan/report.c)).
 *
 *     pe_pass_opts po = {.n_places = 2, .loss_name = "loss", .bs = &bs,
 *                        .protect = fetch, .n_protect = n_fetch,
 *                        .dump_prefix = "/tmp/g.dot.", .final_dot = "/tmp/g.dot"};
 *     pe_ssa_graph *g;
 *     pe_pass_result res;
 *     PE_CHECK(pe_pass_manager_run(prog, &po, &g, &res));
 *
 * Order: the program-level passes on a clone of `prog` (the caller's
 * program is never touched) — fuse_gemm_epilogue (fc), then
 * fuse_elewise_add_act_ops, then fuse_all_optimizer_ops, each only when its
 * switch is on — then the multi-device pass (program -> SSA graph over the
 * places), then the SSA-graph passes (the place where fuse_all_reduce_ops
 * and the memory plan hook in, see passes/pass_manager.c).
 *
 * Dumps: with dump_prefix, "<prefix>00_input.dot" is the program before the
 * first pass and "<prefix><nn>_<pass>.dot" the graph after pass nn (program
 * graphs for the program passes, the SSA graph from multi_device on); with
 * final_dot, the final SSA graph is also written there.
 */
#ifndef PE_PASSES_PASS_MANAGER_H
#define PE_PASSES_PASS_MANAGER_H

#include "graph/ssa_graph.h"
#include "pe/strategy.h"

typedef struct pe_pass_opts {
    int n_places;
    int n_trainers;                      /* processes the collectives span (0 or 1: this one) */
    int trainer_id;                      /* this process among them (0..n_trainers-1) */
    const char *loss_name;               /* may be NULL (inference) */
    const pe_build_strategy *bs;         /* NULL = all switches off */
    const char *const *protect;          /* vars no pass may remove (fetch targets); */
    int n_protect;                       /* persistables and loss_name always stay */
    const char *dump_prefix;             /* NULL = no per-pass dumps */
    const char *final_dot;               /* NULL = no final SSA graph dump */
    bool quiet;                          /* no warnings or info about switches that do not apply (a
                                          * second build of the same program, already reported) */
} pe_pass_opts;

#define PE_MAX_PASSES 16

typedef struct pe_pass_stat {
    const char *name;                    /* static string */
    int ops_before, ops_after;           /* ops of block 0 (per place for SSA passes: handles) */
    int n_fused;                         /* patterns / groups rewritten (program passes) */
    bool skipped;                        /* switch on but the pass does not apply (reason logged) */
} pe_pass_stat;

typedef struct pe_pass_result {
    int n;
    pe_pass_stat s[PE_MAX_PASSES];
} pe_pass_result;

/* Runs the passes; *out (owned by the caller, pe_ssa_graph_free) is the
 * graph to execute. res may be NULL. Failures name the pass. */
pe_status pe_pass_manager_run(const pe_program *prog, const pe_pass_opts *o, pe_ssa_graph **out,
                              pe_pass_result *res);

/* The program-level passes only (fusions; no places, no SSA graph): *out
 * (owned by the caller, pe_program_free) is the rewritten clone of prog.
 * n_places / n_trainers only decide which passes apply (merged optimizer
 * ops). Not counted by pe_pass_manager_calls. */
pe_status pe_pass_manager_program(const pe_program *prog, const pe_pass_opts *o, pe_program **out,
                                  pe_pass_result *res);

/* How many times pe_pass_manager_run was called in this process (any
 * thread): the tests' proof that the executor builds only at construction. */
long pe_pass_manager_calls(void);

#endif
