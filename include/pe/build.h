/* pe/build.h — the build passes on their own: the graph a ParallelExecutor
 * would run for a program and a BuildStrategy, with what each pass did and
 * Graphviz DOT dumps, without running anything (`pe graph`).
 *
 *     pe_pe_options o;
 *     pe_pe_options_default(&o);                       // the executor's defaults
 *     o.build_strategy.fuse_gemm_epilogue = true;
 *     pe_build_opts bo = {.n_places = 2, .loss_name = "loss", .bs = &o.build_strategy,
 *                         .dump_prefix = "passes/", .final_dot = "mlp.dot"};
 *     pe_build_report r;
 *     if (pe_build_graph(prog, &bo, &r) != PE_OK) ...   // message names the pass
 *     for (int i = 0; i < r.n; i++)
 *         printf("%s: %d -> %d\n", r.s[i].name, r.s[i].ops_before, r.s[i].ops_after);
 *
 * The passes run in BuildStrategy order on a clone of the program (the
 * caller's is never touched) — fuse_gemm_epilogue, fuse_elewise_add_act_ops,
 * fuse_all_optimizer_ops, each when its switch is on — then the multi-device
 * pass (the SSA graph over the places), then the SSA-graph passes
 * (fuse_all_reduce_ops). With dump_prefix, "<prefix>00_input.dot" is the
 * program before the first pass and "<prefix><nn>_<pass>.dot" the graph
 * after pass nn; with final_dot the final graph is written there.
 */
#ifndef PE_BUILD_H
#define PE_BUILD_H

#include "pe/program.h"
#include "pe/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

typedef struct pe_build_opts {
    int n_places;                        /* CPU places the graph spans (>= 1) */
    const char *loss_name;               /* may be NULL (inference); borrowed */
    const pe_build_strategy *bs;         /* NULL = all switches off; borrowed */
    const char *const *protect;          /* vars no pass may remove (fetch targets); borrowed */
    int n_protect;                       /* persistables and loss_name always stay */
    const char *dump_prefix;             /* NULL = no per-pass dumps */
    const char *final_dot;               /* NULL = no final graph dump */
} pe_build_opts;

#define PE_BUILD_MAX_PASSES 16

typedef struct pe_build_pass_stat {
    const char *name;                    /* static string: "fuse_gemm_epilogue", "multi_device", ... */
    int ops_before, ops_after;           /* ops of block 0 (multi_device: ops -> handles) */
    int n_fused;                         /* patterns / groups rewritten (program passes) */
    bool skipped;                        /* switch on but the pass does not apply (reason logged) */
} pe_build_pass_stat;

typedef struct pe_build_report {
    int n;                               /* passes run, in order */
    pe_build_pass_stat s[PE_BUILD_MAX_PASSES];
    int n_handles;                       /* handles of the final graph */
    int n_ops;                           /* ops of block 0 of the program place 0 runs */
} pe_build_report;

/* Runs the build passes for prog (borrowed) and drops the graph; report
 * (caller's, may be NULL) gets what each pass did. Failures name the pass. */
pe_status pe_build_graph(const pe_program *prog, const pe_build_opts *o, pe_build_report *report);

/* The program-level passes only (the fusions, in the same order, with the
 * same safety rules: protect and persistables stay), no places and no SSA
 * graph: *out (owned by the caller, pe_program_free) is the rewritten copy
 * of prog, which is not touched. o->n_places only decides which passes
 * apply; final_dot is not written. report->n_handles is 0 and n_ops the
 * rewritten program's ops of block 0. For a caller that splits or saves the
 * fused program itself (pe.jit fuses a traced forward + backward before
 * cutting it into its two programs). */
pe_status pe_build_program(const pe_program *prog, const pe_build_opts *o, pe_program **out,
                           pe_build_report *report);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
