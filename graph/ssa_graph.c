/* graph/ssa_graph.c — the multi-device SSA graph's own functions: freeing
 * it, adding an edge, its one fixed topological order (what
 * enable_sequential_execution runs) and writing it as Graphviz DOT.
 *
 * The graph is built by the multi-device pass (passes/multi_device.c) and
 * run by the executor; what it is lives here, in the graph stage, so that
 * every later stage (passes, executor, the DOT dumps of `pe graph`) uses one
 * definition. The DOT text is built in memory and written atomically.
 */
#include "graph/ssa_graph.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>

#define OOM() pe_error(PE_ERR_NOMEM, "multi_device pass: out of memory")

void pe_ssa_graph_free(pe_ssa_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_h; i++) {
        free(g->h[i].succ);
        free(g->h[i].vars);
    }
    free(g->h);
    free(g->vars);
    if (g->progs)
        for (int p = 0; p < g->n_places; p++) pe_program_free(g->progs[p]);
    free(g->progs);
    free(g);
}

pe_status pe_ssa_graph_write_dot(const pe_ssa_graph *g, const char *path) {
    static const char *const kind_names[PE_HANDLE_KIND_COUNT] = {"op", "allreduce", "reduce", "broadcast",
                                                                 "allreduce (bucket)", "allreduce + update (shard)",
                                                                 "join", "reduce-scatter (shards)",
                                                                 "all-gather (shards)", "allgather", "scatter"};
    size_t cap = 4096 + (size_t)g->n_h * 96, n = 0;
    char *buf = malloc(cap);
    if (!buf) return OOM();
#define EMIT(...)                                                                    \
    do {                                                                             \
        int r_ = snprintf(buf + n, cap - n, __VA_ARGS__);                            \
        if (r_ < 0) break;                                                           \
        if (n + (size_t)r_ >= cap) {                                                 \
            cap = (cap + (size_t)r_) * 2;                                            \
            char *nb_ = realloc(buf, cap);                                           \
            if (!nb_) { free(buf); return OOM(); }                                   \
            buf = nb_;                                                               \
            r_ = snprintf(buf + n, cap - n, __VA_ARGS__);                            \
        }                                                                            \
        n += (size_t)r_;                                                             \
    } while (0)
    EMIT("digraph pe_ssa {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n");
    for (int i = 0; i < g->n_h; i++) {
        const pe_handle *h = &g->h[i];
        if (h->kind == PE_HANDLE_OP)
            EMIT("  h%d [label=\"%s\\nplace %d\"];\n", i, g->progs[h->place]->blocks[0].ops[h->op_idx].type, h->place);
        else if (h->kind == PE_HANDLE_JOIN || h->kind == PE_HANDLE_SHARD_SUM || h->kind == PE_HANDLE_SHARD_GATHER)
            EMIT("  h%d [label=\"%s\\n%s of %s\", style=filled, fillcolor=lightblue];\n", i, kind_names[h->kind],
                 g->progs[0]->blocks[0].ops[h->op_idx].type, h->var);
        else if (h->kind == PE_HANDLE_OPT_SHARD)
            EMIT("  h%d [label=\"%s\\n%s %d/%d of %s\", style=filled, fillcolor=lightblue];\n", i, kind_names[h->kind],
                 g->progs[0]->blocks[0].ops[h->op_idx].type, h->root + 1, h->n_shards, h->var);
        else if (h->kind == PE_HANDLE_ALLREDUCE_FUSED)
            EMIT("  h%d [label=\"%s\\n%d gradients from %s\", style=filled, fillcolor=lightblue];\n", i,
                 kind_names[h->kind], h->n_vars, h->var);
        else if (pe_handle_is_program_collective(h))
            EMIT("  h%d [label=\"%s\\n%s of %s\", style=filled, fillcolor=lightblue];\n", i, kind_names[h->kind],
                 g->progs[0]->blocks[0].ops[h->op_idx].type, h->var);
        else
            EMIT("  h%d [label=\"%s\\n%s\", style=filled, fillcolor=lightblue];\n", i, kind_names[h->kind], h->var);
    }
    for (int i = 0; i < g->n_h; i++)
        for (int k = 0; k < g->h[i].n_succ; k++) EMIT("  h%d -> h%d;\n", i, g->h[i].succ[k]);
    EMIT("}\n");
#undef EMIT
    pe_status st = pe_write_file_atomic(path, buf, n);
    free(buf);
    return st;
}

pe_status pe_ssa_graph_topo_order(const pe_ssa_graph *g, int *order) {
    const int n = g->n_h;
    int *deps = malloc(sizeof *deps * (size_t)(n ? n : 1)), *heap = malloc(sizeof *heap * (size_t)(n ? n : 1));
    if (!deps || !heap) {
        free(deps);
        free(heap);
        return pe_error(PE_ERR_NOMEM, "out of memory ordering the graph's handles");
    }
    int hn = 0, done = 0;
    for (int h = 0; h < n; h++) deps[h] = 0;
    for (int h = 0; h < n; h++)
        for (int i = 0; i < g->h[h].n_succ; i++) deps[g->h[h].succ[i]]++;
    /* a binary min-heap of the ready handles */
    for (int h = 0; h < n; h++) {
        if (deps[h]) continue;
        int i = hn++;
        for (heap[i] = h; i > 0 && heap[(i - 1) / 2] > heap[i]; i = (i - 1) / 2) {
            int t = heap[i];
            heap[i] = heap[(i - 1) / 2];
            heap[(i - 1) / 2] = t;
        }
    }
    while (hn > 0) {
        const int h = heap[0];
        heap[0] = heap[--hn];
        for (int i = 0;;) { /* sift down */
            int l = 2 * i + 1, r = l + 1, m = i;
            if (l < hn && heap[l] < heap[m]) m = l;
            if (r < hn && heap[r] < heap[m]) m = r;
            if (m == i) break;
            int t = heap[i];
            heap[i] = heap[m];
            heap[m] = t;
            i = m;
        }
        order[done++] = h;
        for (int k = 0; k < g->h[h].n_succ; k++) {
            const int v = g->h[h].succ[k];
            if (--deps[v]) continue;
            int i = hn++;
            for (heap[i] = v; i > 0 && heap[(i - 1) / 2] > heap[i]; i = (i - 1) / 2) {
                int t = heap[i];
                heap[i] = heap[(i - 1) / 2];
                heap[(i - 1) / 2] = t;
            }
        }
    }
    free(deps);
    free(heap);
    if (done != n)
        return pe_error(PE_ERR_INTERNAL, "the SSA graph has a cycle (%d of its %d handles can be ordered)", done, n);
    return PE_OK;
}

int pe_ssa_graph_add_edge(pe_ssa_graph *g, int from, int to) {
    if (from < 0 || from == to) return 0;
    pe_handle *f = &g->h[from];
    for (int i = f->n_succ - 1; i >= 0; i--)
        if (f->succ[i] == to) return 0;
    if (f->n_succ == f->cap_succ) {
        int cap = f->cap_succ ? f->cap_succ * 2 : 4;
        int *ns = realloc(f->succ, sizeof *ns * (size_t)cap);
        if (!ns) return -1;
        f->succ = ns;
        f->cap_succ = cap;
    }
    f->succ[f->n_succ++] = to;
    g->h[to].n_deps++;
    return 0;
}
