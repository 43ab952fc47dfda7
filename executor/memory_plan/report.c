/* executor/memory_plan/report.c — pe/plan.h: the memory plan as a report
 * for callers outside the library (the `pe plan` tool).
 *
 * How: the build passes (passes/pass_manager.c) give the SSA graph, the
 * planner's graph front end and solver (plan.c) plan every place with the
 * caller's feed shapes, exactly as the ParallelExecutor plans its arenas;
 * the report keeps the graph (whose programs own the var names) and the
 * plan, and exposes per-place figures in public structs.
 */
#include "pe/plan.h"
#include "executor/memory_plan/plan.h"
#include "passes/pass_manager.h"

#include <stdlib.h>

struct pe_plan {
    pe_ssa_graph *g;
    pe_mp_graph *mg;
    pe_mem_plan *mp;
    pe_plan_place *place;  /* [mp->n_places] */
    pe_plan_var *vars;     /* every place's vars, place after place */
    pe_plan_workspace *ws; /* every place's workspaces, likewise */
};

void pe_plan_free(pe_plan *plan) {
    if (!plan) return;
    free(plan->vars);
    free(plan->ws);
    free(plan->place);
    pe_mem_plan_free(plan->mp);
    pe_mp_graph_free(plan->mg);
    pe_ssa_graph_free(plan->g);
    free(plan);
}

int pe_plan_n_places(const pe_plan *plan) { return plan->mp->n_places; }

const pe_plan_place *pe_plan_place_at(const pe_plan *plan, int place) {
    return place >= 0 && place < plan->mp->n_places ? &plan->place[place] : NULL;
}

/* The public view of the planner's result. */
static pe_status fill_report(pe_plan *plan) {
    const pe_mem_plan *mp = plan->mp;
    size_t n_vars = 0, n_ws = 0;
    for (int p = 0; p < mp->n_places; p++) {
        n_vars += (size_t)mp->place[p].n_vars;
        n_ws += (size_t)mp->place[p].n_ws;
    }
    plan->place = calloc(mp->n_places ? (size_t)mp->n_places : 1, sizeof *plan->place);
    plan->vars = calloc(n_vars ? n_vars : 1, sizeof *plan->vars);
    plan->ws = calloc(n_ws ? n_ws : 1, sizeof *plan->ws);
    if (!plan->place || !plan->vars || !plan->ws) return pe_error(PE_ERR_NOMEM, "out of memory");
    pe_plan_var *v = plan->vars;
    pe_plan_workspace *w = plan->ws;
    for (int p = 0; p < mp->n_places; p++) {
        const pe_mp_place_plan *pp = &mp->place[p];
        plan->place[p] = (pe_plan_place){.no_reuse_bytes = pp->stats.no_reuse_bytes,
                                         .arena_bytes = pp->stats.arena_bytes,
                                         .n_inplace = pp->stats.n_inplace,
                                         .n_shared = pp->stats.n_shared,
                                         .n_vars = pp->n_vars,
                                         .vars = v,
                                         .n_workspaces = pp->n_ws,
                                         .workspaces = w};
        for (int i = 0; i < pp->n_vars; i++)
            *v++ = (pe_plan_var){pp->vars[i].name, pp->vars[i].offset, pp->vars[i].bytes, pp->vars[i].inplaced};
        for (int i = 0; i < pp->n_ws; i++) {
            const pe_handle *hd = &plan->g->h[pp->ws[i].handle];
            *w++ = (pe_plan_workspace){hd->op_idx, plan->g->progs[p]->blocks[0].ops[hd->op_idx].type, pp->ws[i].offset,
                                       pp->ws[i].bytes};
        }
    }
    return PE_OK;
}

pe_status pe_plan_new(const pe_program *prog, const pe_plan_opts *o, pe_plan **out) {
    *out = NULL;
    if (!prog || !o || !o->meta || o->n_protect < 0 || o->n_exclude < 0)
        return pe_error(PE_ERR_INVALID, "pe_plan_new: bad argument");
    pe_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return pe_error(PE_ERR_NOMEM, "out of memory");
    pe_pass_opts po = {.n_places = o->n_places, .loss_name = o->loss_name, .bs = o->bs,
                       .protect = o->protect, .n_protect = o->n_protect};
    pe_status st = pe_pass_manager_run(prog, &po, &plan->g, NULL);
    if (st == PE_OK) st = pe_mp_graph_new(plan->g, &plan->mg);
    /* The plan leaves out the protected vars, then the excluded ones. */
    int n_prot = o->n_protect + o->n_exclude;
    const char **prot = malloc(sizeof *prot * (size_t)(n_prot + 1));
    if (st == PE_OK && !prot) st = pe_error(PE_ERR_NOMEM, "out of memory");
    for (int i = 0; prot && i < o->n_protect; i++) prot[i] = o->protect[i];
    for (int i = 0; prot && i < o->n_exclude; i++) prot[o->n_protect + i] = o->exclude[i];
    bool reuse = o->bs && o->bs->memory_optimize, inplace = o->bs && o->bs->enable_inplace;
    if (st == PE_OK)
        st = pe_mp_plan_build(plan->mg, NULL, o->meta, o->user, prot, n_prot, reuse, inplace,
                              pe_mp_kernel_threads(o->n_places), &plan->mp);
    free(prot);
    if (st == PE_OK) st = fill_report(plan);
    if (st != PE_OK) {
        pe_plan_free(plan);
        return st;
    }
    *out = plan;
    return PE_OK;
}
