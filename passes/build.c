/* passes/build.c — pe/build.h: the build passes for callers outside the
 * library (the `pe graph` tool), over the pass manager (passes/pass_manager.c).
 *
 * The pass manager hands back the SSA graph and its per-pass statistics;
 * the public API copies the statistics and frees the graph, so the graph's
 * internal layout (graph/ssa_graph.h) stays out of the public headers.
 */
#include "pe/build.h"
#include "passes/pass_manager.h"

_Static_assert(PE_BUILD_MAX_PASSES == PE_MAX_PASSES, "pe/build.h's pass count is the pass manager's");

static pe_pass_opts pass_opts(const pe_build_opts *o) {
    return (pe_pass_opts){.n_places = o->n_places, .loss_name = o->loss_name, .bs = o->bs, .protect = o->protect,
                          .n_protect = o->n_protect, .dump_prefix = o->dump_prefix, .final_dot = o->final_dot};
}

static void copy_stats(const pe_pass_result *res, pe_build_report *report) {
    report->n = res->n;
    for (int i = 0; i < res->n; i++)
        report->s[i] = (pe_build_pass_stat){res->s[i].name, res->s[i].ops_before, res->s[i].ops_after,
                                            res->s[i].n_fused, res->s[i].skipped};
}

pe_status pe_build_graph(const pe_program *prog, const pe_build_opts *o, pe_build_report *report) {
    if (!prog || !o) return pe_error(PE_ERR_INVALID, "pe_build_graph: NULL argument");
    pe_pass_opts po = pass_opts(o);
    pe_ssa_graph *g = NULL;
    pe_pass_result res;
    pe_status st = pe_pass_manager_run(prog, &po, &g, &res);
    if (st == PE_OK && report) {
        copy_stats(&res, report);
        report->n_handles = g->n_h;
        report->n_ops = g->progs[0]->blocks[0].n_ops;
    }
    pe_ssa_graph_free(g);
    return st;
}

pe_status pe_build_program(const pe_program *prog, const pe_build_opts *o, pe_program **out,
                           pe_build_report *report) {
    if (!prog || !o || !out) return pe_error(PE_ERR_INVALID, "pe_build_program: NULL argument");
    pe_pass_opts po = pass_opts(o);
    pe_pass_result res;
    pe_status st = pe_pass_manager_program(prog, &po, out, &res);
    if (st == PE_OK && report) {
        copy_stats(&res, report);
        report->n_handles = 0;
        report->n_ops = (*out)->blocks[0].n_ops;
    }
    return st;
}
