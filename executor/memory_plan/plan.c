/* executor/memory_plan/plan.c — the static memory plan: liveness, in-place reuse
 * and one arena per place (issue 5, point 3).
 *
 * What: every non-persistable temporary of a place (not fed, not fetched,
 * not read before it is written, not in a gradient bucket of
 * fuse_all_reduce_ops, which the executor lays out) gets an offset in that
 * place's arena, so
 * that steady-state training touches one allocation per place and the
 * bytes of dead activations are reused by later ones.
 *
 * How: the scheduler runs a place's handles concurrently in dependency
 * order, not in one fixed sequence, so "A is dead when B is born" must hold
 * in every execution: every access of A (reads, writes, the collectives
 * exchanging it) must happen-before B's first write — a path in the SSA
 * handle DAG, looked up in a reachability closure (one bit per handle
 * pair). Two tensors for which neither holds may be live at the same time
 * and never share bytes. Exceptions, both from the op registry (ops.def):
 * an in-place pair "X>Out" lets the op that reads A last write B exactly
 * over A (its kernel is written for that aliasing); an input marked "-X"
 * (the kernel reads its dims and dtype only, e.g. X of elementwise_add_grad)
 * is not an access, since the tensor struct keeps the dims while its bytes
 * go to others.
 *
 * Placement: each tensor gets the best fit (smallest gap that holds it,
 * lowest address on ties) among the gaps between the bytes of the tensors
 * it may be live with — those intervals sorted by address and coalesced
 * are the free list — else the end of the arena, which grows. Two orders
 * are tried and the smaller arena kept: tensors by first writer (each goes
 * in place of its input when allowed), and greedy by size (in-place chains
 * grouped, largest group first), which keeps large long-lived tensors such
 * as weight gradients from fragmenting the arena. No dependency edge is
 * added, so the plan never changes what may run concurrently.
 *
 * Workspaces: an op whose kernel needs scratch for one call (ops.def
 * PE_CPU_WS: oneDNN's scratchpad and blocked-layout copies of conv2d,
 * pool2d, batch_norm and their gradients) gets it here too, as a tensor
 * whose only access is that op — live while the op runs, so it shares
 * bytes with whatever the DAG orders before or after the op (with reuse
 * only: without it each would hold bytes of its own for the whole step,
 * more than the kernels' pool, which serves them then). Its size is
 * the kernel's pe_workspace_fn for the inferred shapes and the executor's
 * threads per kernel (oneDNN sizes its scratchpad by thread).
 *
 * Sizes come from static shape inference: every op's infer function runs,
 * in topological order, over meta-only tensors in a scratch scope, starting
 * from the shapes of the feeds and persistables (the caller's meta_fn), so
 * the plan is made before the first run, for the actual batch (and LoD: a
 * sequence op's rows come from its input's LoD, carried from the feeds). The
 * executor caches one plan per feed-shape signature (executor/memory_plan/arena.c).
 *
 * This file is the graph front end and the plan; the DAG solver is
 * executor/memory_plan/solver.c.
 *
 * Why this way: sound under concurrency without serialising the graph;
 * best fit over a coalesced free list is what caching allocators do, and
 * in-place pairs come from the single op registry, never a second list.
 */
#include "executor/memory_plan/plan.h"
#include "graph/strmap.h"
#include "ops/op.h"
#include "pe/scope.h"
#include "runtime/internal.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM() pe_error(PE_ERR_NOMEM, "memory plan: out of memory")

/* ---- the graph front end ------------------------------------------------ */

typedef struct {
    const char *name;     /* borrowed from the place's program */
    const pe_var *decl;   /* NULL: not declared in block 0 */
    int *acc;             /* accessing handles, in topological order, distinct */
    int n_acc, cap_acc;
    int first_writer;     /* -1: never written */
    bool touched;         /* some handle reads or writes it */
    bool bucketed;        /* in a gradient bucket (fuse_all_reduce_ops): laid out elsewhere */
    bool read_first;      /* the first access reads it (a feed / live-in) */
    int inplace_of;       /* var index (same place), -1 */
} mp_var;

typedef struct {
    pe_strmap map;        /* name -> index into vars */
    mp_var *vars;
    int n_vars, cap_vars;
    int *ops;             /* OP handles of the place, topological order */
    int n_ops;
    int *inputs;          /* vars read before written (non-persistable) */
    int n_inputs;
} mp_place;

struct pe_mp_graph {
    const pe_ssa_graph *g;
    pe_mp_reach *reach;
    int n_places;
    mp_place *pl;
};

void pe_mp_graph_free(pe_mp_graph *mg) {
    if (!mg) return;
    for (int p = 0; mg->pl && p < mg->n_places; p++) {
        mp_place *pl = &mg->pl[p];
        for (int i = 0; i < pl->n_vars; i++) free(pl->vars[i].acc);
        free(pl->vars);
        free(pl->ops);
        free(pl->inputs);
        pe_strmap_free(&pl->map);
    }
    free(mg->pl);
    pe_mp_reach_free(mg->reach);
    free(mg);
}

static int var_index(pe_mp_graph *mg, int p, const char *name) {
    mp_place *pl = &mg->pl[p];
    int i = pe_strmap_get(&pl->map, name);
    if (i >= 0) return i;
    if (pl->n_vars == pl->cap_vars) {
        int cap = pl->cap_vars ? pl->cap_vars * 2 : 64;
        mp_var *nv = realloc(pl->vars, sizeof *nv * (size_t)cap);
        if (!nv) return -1;
        pl->vars = nv;
        pl->cap_vars = cap;
    }
    mp_var *v = &pl->vars[pl->n_vars];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->decl = pe_program_find_var(mg->g->progs[p], 0, name);
    v->first_writer = -1;
    v->inplace_of = -1;
    if (pe_strmap_put(&pl->map, name, pl->n_vars) != 0) return -1;
    return pl->n_vars++;
}

/* Handle h reads (write = false) or writes the var `name` of place p;
 * data = false: a read of its dims and dtype only ("-X" in ops.def), which
 * makes it an input when it comes first but does not keep its bytes. */
static int touch(pe_mp_graph *mg, int p, const char *name, int h, bool write, bool data) {
    if (!strcmp(name, PE_EMPTY_VAR)) return 0;
    int i = var_index(mg, p, name);
    if (i < 0) return -1;
    mp_var *v = &mg->pl[p].vars[i];
    if (!v->touched) v->read_first = !write;
    v->touched = true;
    if (!data) return 0;
    if (write && v->first_writer < 0) v->first_writer = h;
    if (v->n_acc && v->acc[v->n_acc - 1] == h) return 0;
    if (v->n_acc == v->cap_acc) {
        int cap = v->cap_acc ? v->cap_acc * 2 : 4;
        int *na = realloc(v->acc, sizeof *na * (size_t)cap);
        if (!na) return -1;
        v->acc = na;
        v->cap_acc = cap;
    }
    v->acc[v->n_acc++] = h;
    return 0;
}

static const pe_op *handle_op(const pe_ssa_graph *g, int h) {
    return &g->progs[g->h[h].place]->blocks[0].ops[g->h[h].op_idx];
}

static bool is_temp(const mp_var *v) {
    return v->decl && !v->decl->persistable && !v->read_first && v->first_writer >= 0 && !v->bucketed;
}

pe_status pe_mp_graph_new(const pe_ssa_graph *g, pe_mp_graph **out) {
    *out = NULL;
    pe_mp_graph *mg = calloc(1, sizeof *mg);
    if (!mg) return OOM();
    mg->g = g;
    mg->n_places = g->n_places;
    mg->pl = calloc((size_t)g->n_places, sizeof *mg->pl);
    if (!mg->pl) {
        pe_mp_graph_free(mg);
        return OOM();
    }
    pe_status st = pe_mp_reach_from_graph(g, &mg->reach);
    if (st != PE_OK) {
        pe_mp_graph_free(mg);
        return st;
    }
    for (int p = 0; p < g->n_places; p++) {
        mg->pl[p].ops = malloc(sizeof(int) * (size_t)(g->n_h ? g->n_h : 1));
        if (!mg->pl[p].ops) {
            pe_mp_graph_free(mg);
            return OOM();
        }
    }
    /* accesses in topological order; a handle's reads before its writes */
    for (int pos = 0; pos < g->n_h; pos++) {
        int h = pe_mp_topo_node(mg->reach, pos);
        const pe_handle *hd = &g->h[h];
        int rc = 0;
        if (hd->kind == PE_HANDLE_OP) {
            int p = hd->place;
            const pe_op *op = handle_op(g, h);
            const pe_op_info *info = pe_op_info_find(op->type);
            mg->pl[p].ops[mg->pl[p].n_ops++] = h;
            for (int s = 0; s < op->n_inputs && !rc; s++) {
                int si = info ? pe_op_info_input_index(info, op->inputs[s].name) : -1;
                bool data = si < 0 || !info->no_buffer[si];
                for (int k = 0; k < op->inputs[s].n_args && !rc; k++)
                    rc = touch(mg, p, op->inputs[s].args[k], h, false, data);
            }
            for (int s = 0; s < op->n_outputs && !rc; s++)
                for (int k = 0; k < op->outputs[s].n_args && !rc; k++)
                    rc = touch(mg, p, op->outputs[s].args[k], h, true, true);
        } else if (hd->kind == PE_HANDLE_ALLREDUCE_FUSED) {
            /* a gradient bucket: the executor lays its vars out contiguously
             * outside the arena; the handle reads and writes all of them */
            for (int p = 0; p < g->n_places && !rc; p++)
                for (int k = 0; k < hd->n_vars && !rc; k++) {
                    rc = touch(mg, p, hd->vars[k], h, false, true);
                    if (!rc) rc = touch(mg, p, hd->vars[k], h, true, true);
                    int i = rc ? -1 : pe_strmap_get(&mg->pl[p].map, hd->vars[k]);
                    if (i >= 0) mg->pl[p].vars[i].bucketed = true;
                }
        } else if (hd->kind == PE_HANDLE_OPT_SHARD) {
            /* reads every input of the op on every place and writes its
             * outputs and the gradient (summed in place) on every place */
            for (int p = 0; p < g->n_places && !rc; p++) {
                const pe_op *op = &g->progs[p]->blocks[0].ops[hd->op_idx];
                for (int s = 0; s < op->n_inputs && !rc; s++)
                    for (int k = 0; k < op->inputs[s].n_args && !rc; k++)
                        rc = touch(mg, p, op->inputs[s].args[k], h, false, true);
                for (int s = 0; s < op->n_outputs && !rc; s++)
                    for (int k = 0; k < op->outputs[s].n_args && !rc; k++)
                        rc = touch(mg, p, op->outputs[s].args[k], h, true, true);
                if (!rc) rc = touch(mg, p, hd->var, h, true, true);
            }
        } else if (hd->kind == PE_HANDLE_JOIN || hd->kind == PE_HANDLE_SHARD_GATHER) {
            /* no data of the plan's (the gather moves persistables) */
        } else if (hd->kind == PE_HANDLE_ALLGATHER || hd->kind == PE_HANDLE_SCATTER) {
            /* a program's c_allgather / c_scatter: reads X, writes Out
             * (allocated by the executor, outside the arena) */
            for (int p = 0; p < g->n_places && !rc; p++) {
                rc = touch(mg, p, hd->var, h, false, true);
                if (!rc) rc = touch(mg, p, hd->vars[0], h, true, true);
                int i = rc ? -1 : pe_strmap_get(&mg->pl[p].map, hd->vars[0]);
                if (i >= 0) mg->pl[p].vars[i].bucketed = true;
            }
        } else {
            /* a program's collective op reads and writes its var on every
             * place: its root is a rank of the world */
            bool prog = pe_handle_is_program_collective(hd);
            for (int p = 0; p < g->n_places && !rc; p++) {
                bool rd = prog || hd->kind != PE_HANDLE_BCAST || p == hd->root;
                bool wr = prog || hd->kind == PE_HANDLE_ALLREDUCE || hd->kind == PE_HANDLE_SHARD_SUM ||
                          (hd->kind == PE_HANDLE_REDUCE && p == hd->root) ||
                          (hd->kind == PE_HANDLE_BCAST && p != hd->root);
                if (rd) rc = touch(mg, p, hd->var, h, false, true);
                if (wr && !rc) rc = touch(mg, p, hd->var, h, true, true);
            }
        }
        if (rc) {
            pe_mp_graph_free(mg);
            return OOM();
        }
    }
    /* in-place pairs (ops.def "X>Out"): Out may take X's bytes when the op
     * writes Out first */
    for (int p = 0; p < g->n_places; p++) {
        mp_place *pl = &mg->pl[p];
        for (int k = 0; k < pl->n_ops; k++) {
            int h = pl->ops[k];
            const pe_op *op = handle_op(g, h);
            const pe_op_info *info = pe_op_info_find(op->type);
            if (!info) continue;
            for (int q = 0; q < info->n_inplace; q++) {
                const pe_slot *in = pe_op_input(op, info->inputs[info->inplace[q][0]].name);
                const pe_slot *o = pe_op_output(op, info->outputs[info->inplace[q][1]].name);
                if (!in || !o) continue;
                for (int a = 0; a < in->n_args && a < o->n_args; a++) {
                    if (!strcmp(in->args[a], PE_EMPTY_VAR) || !strcmp(o->args[a], PE_EMPTY_VAR) ||
                        !strcmp(in->args[a], o->args[a]))
                        continue;
                    int xi = pe_strmap_get(&pl->map, in->args[a]), oi = pe_strmap_get(&pl->map, o->args[a]);
                    if (xi < 0 || oi < 0) continue;
                    if (pl->vars[oi].first_writer == h && pl->vars[oi].inplace_of < 0) pl->vars[oi].inplace_of = xi;
                }
            }
        }
        pl->inputs = malloc(sizeof(int) * (size_t)(pl->n_vars ? pl->n_vars : 1));
        if (!pl->inputs) {
            pe_mp_graph_free(mg);
            return OOM();
        }
        for (int i = 0; i < pl->n_vars; i++)
            if (pl->vars[i].read_first && !(pl->vars[i].decl && pl->vars[i].decl->persistable))
                pl->inputs[pl->n_inputs++] = i;
    }
    *out = mg;
    return PE_OK;
}

int pe_mp_graph_n_inputs(const pe_mp_graph *mg, int place) { return mg->pl[place].n_inputs; }

const char *pe_mp_graph_input(const pe_mp_graph *mg, int place, int i) {
    return mg->pl[place].vars[mg->pl[place].inputs[i]].name;
}

bool pe_mp_graph_is_temp(const pe_mp_graph *mg, int place, const char *name) {
    int i = pe_strmap_get(&mg->pl[place].map, name);
    return i >= 0 && is_temp(&mg->pl[place].vars[i]);
}

/* ---- static shape inference and the plan --------------------------------- */

int pe_mp_kernel_threads(int n_places) {
    const int cores = omp_get_max_threads();
    return n_places > 0 && cores / n_places > 0 ? cores / n_places : 1;
}

void pe_mem_plan_free(pe_mem_plan *p) {
    if (!p) return;
    for (int i = 0; p->place && i < p->n_places; i++) {
        free(p->place[i].vars);
        free(p->place[i].ws);
    }
    free(p->place);
    free(p);
}

/* The meta of var `name` in the scratch scope, when it does not hold it
 * yet: feeds and persistables come from meta_fn; the Out of a program's
 * c_allgather (an ALLGATHER handle, no op of this place) is its X's with
 * nranks times the rows, a c_scatter's with 1/nranks of them. */
static pe_status seed_var(const pe_mp_graph *mg, int p, const char *name, pe_scope *scratch, pe_mp_meta_fn fn,
                          void *user) {
    if (!strcmp(name, PE_EMPTY_VAR) || pe_scope_find_local_var(scratch, name)) return PE_OK;
    int i = pe_strmap_get(&mg->pl[p].map, name);
    int w = i >= 0 ? mg->pl[p].vars[i].first_writer : -1;
    const pe_handle *hd = w >= 0 ? &mg->g->h[w] : NULL;
    if (hd && (hd->kind == PE_HANDLE_ALLGATHER || hd->kind == PE_HANDLE_SCATTER)) {
        PE_CHECK(seed_var(mg, p, hd->var, scratch, fn, user));
        const pe_tensor *x = pe_scope_find_local_var(scratch, hd->var);
        const pe_attr *nr = pe_op_attr(&mg->g->progs[p]->blocks[0].ops[hd->op_idx], "nranks");
        int64_t dims[PE_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) dims[d] = x->dims[d];
        if (x->ndim > 0 && nr && nr->i > 0) dims[0] = hd->kind == PE_HANDLE_SCATTER ? dims[0] / nr->i : dims[0] * nr->i;
        pe_tensor *t = pe_scope_var(scratch, name);
        if (!t) return OOM();
        return pe_tensor_set_meta(t, x->dtype, x->ndim, dims);
    }
    pe_tensor *t = pe_scope_var(scratch, name);
    if (!t) return OOM();
    return fn(user, p, name, pe_program_find_var(mg->g->progs[p], 0, name), t);
}

/* Meta of every var op h reads that the scratch scope does not hold yet. */
static pe_status seed_inputs(const pe_mp_graph *mg, int p, const pe_op *op, pe_scope *scratch, pe_mp_meta_fn fn,
                             void *user) {
    for (int s = 0; s < op->n_inputs; s++)
        for (int k = 0; k < op->inputs[s].n_args; k++) PE_CHECK(seed_var(mg, p, op->inputs[s].args[k], scratch, fn, user));
    return PE_OK;
}

/* Shapes of every var of place p (in the scratch scope), and ws[k]: the
 * workspace bytes of the place's k-th op's kernel for those shapes. */
static pe_status infer_place(const pe_mp_graph *mg, int p, pe_place place, int threads, pe_scope *scratch,
                             pe_mp_meta_fn fn, void *user, size_t *ws) {
    const mp_place *pl = &mg->pl[p];
    for (int k = 0; k < pl->n_ops; k++) {
        const pe_op *op = handle_op(mg->g, pl->ops[k]);
        PE_CHECK(seed_inputs(mg, p, op, scratch, fn, user));
        pe_op_ctx ctx;
        pe_status st = pe_op_ctx_init(&ctx, op, scratch, place);
        if (st != PE_OK) return pe_error_wrap(st, "memory plan, shape inference on place %d", p);
        ctx.num_threads = threads;
        const char *what = "shape inference";
        st = pe_op_infer(&ctx);
        ws[k] = 0;
        pe_workspace_fn wfn = ctx.info->workspace[place.kind];
        if (st == PE_OK && wfn) {
            what = "workspace size";
            st = wfn(&ctx, &ws[k]);
        }
        pe_op_ctx_release(&ctx);
        if (st != PE_OK)
            return pe_error_wrap(st, "memory plan, %s of op %d (%s) on place %d", what, mg->g->h[pl->ops[k]].op_idx,
                                 op->type, p);
    }
    return PE_OK;
}

/* The solver's tensors: the temporaries (t[0, n)), then the ops'
 * workspaces (ws[k] > 0: one tensor that the op's handle alone touches). */
static pe_status plan_place(const pe_mp_graph *mg, int p, pe_scope *scratch, const pe_strmap *prot, bool reuse,
                            bool inplace, const size_t *ws, pe_mp_place_plan *out) {
    const mp_place *pl = &mg->pl[p];
    const size_t cap = (size_t)pl->n_vars + (size_t)pl->n_ops + 1;
    int *idx = malloc(sizeof *idx * cap);                                       /* tensor -> var */
    int *tix = malloc(sizeof *tix * (size_t)(pl->n_vars ? pl->n_vars : 1));     /* var -> tensor or -1 */
    pe_mp_tensor *t = calloc(cap, sizeof *t);
    if (!idx || !tix || !t) {
        free(idx);
        free(tix);
        free(t);
        return OOM();
    }
    int n = 0;
    for (int i = 0; i < pl->n_vars; i++) {
        tix[i] = -1;
        const mp_var *v = &pl->vars[i];
        if (!is_temp(v) || pe_strmap_get(prot, v->name) >= 0) continue;
        const pe_tensor *m = pe_scope_find_local_var(scratch, v->name);
        int64_t bytes = m ? (int64_t)pe_tensor_nbytes(m) : 0;
        if (bytes <= 0) continue; /* no data (XShape): nothing to place */
        tix[i] = n;
        idx[n] = i;
        t[n] = (pe_mp_tensor){.bytes = bytes, .first_writer = v->first_writer, .access = v->acc,
                              .n_access = v->n_acc, .inplace_of = -1};
        n++;
    }
    for (int k = 0; k < n; k++) {
        int src = pl->vars[idx[k]].inplace_of;
        t[k].inplace_of = src >= 0 ? tix[src] : -1;
    }
    const int n_tmp = n;
    for (int k = 0; reuse && k < pl->n_ops; k++) {
        if (!ws[k]) continue;
        idx[n] = k;
        t[n++] = (pe_mp_tensor){.bytes = (int64_t)ws[k], .first_writer = pl->ops[k], .access = &pl->ops[k],
                                .n_access = 1, .inplace_of = -1};
    }
    pe_status st = pe_mp_solve(mg->reach, t, n, reuse, inplace, &out->stats);
    if (st == PE_OK) {
        out->vars = malloc(sizeof *out->vars * (size_t)(n_tmp ? n_tmp : 1));
        out->ws = malloc(sizeof *out->ws * (size_t)(n - n_tmp ? n - n_tmp : 1));
        if (!out->vars || !out->ws) st = OOM();
    }
    if (st == PE_OK) {
        for (int k = 0; k < n_tmp; k++)
            out->vars[k] = (pe_mp_var_plan){pl->vars[idx[k]].name, t[k].offset, pe_mp_align_up(t[k].bytes), t[k].inplaced};
        out->n_vars = n_tmp;
        for (int k = n_tmp; k < n; k++) {
            out->ws[k - n_tmp] = (pe_mp_ws_plan){pl->ops[idx[k]], t[k].offset, pe_mp_align_up(t[k].bytes)};
            /* "without reuse" stays the temporaries' figure: without a plan
             * the workspaces are the kernels' pool, not one buffer each */
            out->stats.no_reuse_bytes -= pe_mp_align_up(t[k].bytes);
        }
        out->n_ws = n - n_tmp;
    }
    free(idx);
    free(tix);
    free(t);
    return st;
}

pe_status pe_mp_plan_build(const pe_mp_graph *mg, const pe_place *places, pe_mp_meta_fn meta_fn, void *user,
                           const char *const *protect, int n_protect, bool reuse, bool inplace, int kernel_threads,
                           pe_mem_plan **out) {
    *out = NULL;
    pe_strmap prot = {0};
    for (int i = 0; i < n_protect; i++)
        if (pe_strmap_put(&prot, protect[i], i) != 0) {
            pe_strmap_free(&prot);
            return OOM();
        }
    pe_mem_plan *plan = calloc(1, sizeof *plan);
    if (plan) plan->place = calloc((size_t)mg->n_places, sizeof *plan->place);
    if (!plan || !plan->place) {
        free(plan);
        pe_strmap_free(&prot);
        return OOM();
    }
    plan->n_places = mg->n_places;
    pe_status st = PE_OK;
    for (int p = 0; p < mg->n_places && st == PE_OK; p++) {
        pe_scope *scratch = pe_scope_new(NULL);
        size_t *ws = malloc(sizeof *ws * (size_t)(mg->pl[p].n_ops + 1));
        if (!scratch || !ws) {
            pe_scope_free(scratch);
            free(ws);
            st = OOM();
            break;
        }
        st = infer_place(mg, p, places ? places[p] : pe_place_cpu(p), kernel_threads > 0 ? kernel_threads : 1, scratch,
                         meta_fn, user, ws);
        if (st == PE_OK) st = plan_place(mg, p, scratch, &prot, reuse, inplace, ws, &plan->place[p]);
        pe_scope_free(scratch);
        free(ws);
    }
    pe_strmap_free(&prot);
    if (st != PE_OK) {
        pe_mem_plan_free(plan);
        return st;
    }
    *out = plan;
    return PE_OK;
}
