/* passes/multi_device.c — the multi-device pass: one program becomes an
 * SSA graph over N places.
 *
 * Each place gets its own copy of the program (so per-place attrs such as
 * the loss-gradient scale can differ) and one op handle per op. After the
 * op that produces a parameter's final gradient (found through its
 * op_role_var attr, set by the autodiff pass — never by guessing from
 * names) a collective handle is inserted: an allreduce across places, or,
 * for the `reduce` strategy, a reduce to the parameter's owner place
 * (chosen greedily to balance bytes over the places of every trainer:
 * a global rank), whose optimizer ops then run only there, followed by a
 * broadcast of the updated parameter and of the optimizer's persistable
 * state (velocity, moments, beta powers) from the owner — so every place,
 * place 0 included (the caller's scope: checkpoints), holds current
 * values.
 *
 * shard_optimizer (CPU places, all_reduce): an sgd / momentum / adam op
 * (an optimizer op of the registry, ops.def PE_OPT, whose per-element slots
 * say what splits) whose gradient nothing else reads, and whose parameter
 * and accumulators nothing else writes, becomes k = min(places, numel / SHARD_MIN_ELEMS)
 * OPT_SHARD handles instead of one op handle per place plus an allreduce:
 * shard i allreduces its element range of the gradient and runs the
 * update of that range once (with place i's tensors), for every place —
 * the places share the parameter's storage (executor/parallel_executor.c)
 * or get the range copied. The shards wait for every place's gradient and
 * every reader of the old values; a JOIN handle after them produces the
 * new versions. Per element the arithmetic is the op's own, so the
 * parameters are bitwise those of the unsharded graph. Sharded gradients
 * stay out of fuse_all_reduce_ops buckets (the pass manager does not merge
 * optimizer ops on several places while shard_optimizer is on). Across
 * trainers the shards are the global ranks of every trainer: a SHARD_SUM
 * (reduce-scatter of the gradient over the world) comes first, then this
 * trainer's shards, then a SHARD_GATHER (all-gather of the updated ranges)
 * in place of the JOIN; ops with whole in-place outputs (adam's beta
 * powers) stay unsharded there.
 *
 * Collective ops of the program (c_allreduce_sum, c_broadcast, ...;
 * ops/collective.h), over a world of more than one rank: each place runs
 * the op's kernel (Out = X), then one collective handle of the op
 * (op_idx) reduces, broadcasts or sums Out across the world; c_allgather
 * is one ALLGATHER handle instead (X of every place -> Out of every
 * place), c_scatter one SCATTER handle. They read and write their var on every place: the root is a
 * rank of the world, which may be another process's place. With one rank
 * the kernel is the whole op. c_identity and the c_sync_* ops are plain
 * ops (Out = X).
 *
 * Dependencies come from versioned vars per place: a read depends on the
 * producer of the current version; a write depends on that producer and on
 * every reader of the current version, then starts a new version. Handles
 * are created op by op (all places of op i, then its collectives), so every
 * edge made here goes from a lower handle to a higher one; the early
 * updates of memory_optimize (below) add edges that go back, so what runs
 * the handles one by one (enable_sequential_execution) runs them in
 * pe_ssa_graph_topo_order, never in the bare handle order.
 */
#include "passes/multi_device.h"
#include "passes/fuse_all_reduce.h"
#include "ops/collective.h"
#include "ops/op.h"
#include "graph/strmap.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int ssa;          /* current version (index into g->vars) */
    int *readers;     /* handles reading the current version */
    int n_readers, cap_readers;
} vstate;

typedef struct {
    pe_strmap map;    /* name -> index into st */
    vstate *st;
    int n, cap;
} place_state;

#define OOM() pe_error(PE_ERR_NOMEM, "multi_device pass: out of memory")

static int add_handle(pe_ssa_graph *g, pe_handle_kind kind, int place, int op_idx, const char *var, int root) {
    if (g->n_h == g->cap_h) {
        int cap = g->cap_h ? g->cap_h * 2 : 256;
        pe_handle *nh = realloc(g->h, sizeof *nh * (size_t)cap);
        if (!nh) return -1;
        g->h = nh;
        g->cap_h = cap;
    }
    pe_handle *h = &g->h[g->n_h];
    memset(h, 0, sizeof *h);
    h->kind = kind;
    h->place = place;
    h->op_idx = op_idx;
    h->var = var;
    h->root = root;
    return g->n_h++;
}


static int new_version(pe_ssa_graph *g, const char *name, int place, int version, int producer) {
    if (g->n_vars == g->cap_vars) {
        int cap = g->cap_vars ? g->cap_vars * 2 : 256;
        pe_ssa_var *nv = realloc(g->vars, sizeof *nv * (size_t)cap);
        if (!nv) return -1;
        g->vars = nv;
        g->cap_vars = cap;
    }
    g->vars[g->n_vars] = (pe_ssa_var){name, place, version, producer};
    return g->n_vars++;
}

static vstate *state_of(pe_ssa_graph *g, place_state *ps, const char *name, int place) {
    int i = pe_strmap_get(&ps->map, name);
    if (i >= 0) return &ps->st[i];
    if (ps->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 128;
        vstate *ns = realloc(ps->st, sizeof *ns * (size_t)cap);
        if (!ns) return NULL;
        ps->st = ns;
        ps->cap = cap;
    }
    vstate *s = &ps->st[ps->n];
    memset(s, 0, sizeof *s);
    s->ssa = new_version(g, name, place, 0, -1);
    if (s->ssa < 0 || pe_strmap_put(&ps->map, name, ps->n) != 0) return NULL;
    ps->n++;
    return s;
}

static int read_var(pe_ssa_graph *g, place_state *ps, const char *name, int place, int h) {
    vstate *s = state_of(g, ps, name, place);
    if (!s || pe_ssa_graph_add_edge(g, g->vars[s->ssa].producer, h) != 0) return -1;
    if (s->n_readers == s->cap_readers) {
        int cap = s->cap_readers ? s->cap_readers * 2 : 4;
        int *nr = realloc(s->readers, sizeof *nr * (size_t)cap);
        if (!nr) return -1;
        s->readers = nr;
        s->cap_readers = cap;
    }
    s->readers[s->n_readers++] = h;
    return 0;
}

static int write_var(pe_ssa_graph *g, place_state *ps, const char *name, int place, int h) {
    vstate *s = state_of(g, ps, name, place);
    if (!s) return -1;
    for (int i = 0; i < s->n_readers; i++)
        if (pe_ssa_graph_add_edge(g, s->readers[i], h) != 0) return -1;
    if (pe_ssa_graph_add_edge(g, g->vars[s->ssa].producer, h) != 0) return -1;
    int v = new_version(g, name, place, g->vars[s->ssa].version + 1, h);
    if (v < 0) return -1;
    s->ssa = v;
    s->n_readers = 0;
    return 0;
}

static int op_role(const pe_op *op) {
    const pe_attr *a = pe_op_attr(op, "op_role");
    return a ? (int)a->i : PE_ROLE_FORWARD;
}

/* op_role_var pairs of a backward op (param, grad, ...), or NULL. */
static const pe_attr *role_vars(const pe_op *op) {
    const pe_attr *a = pe_op_attr(op, "op_role_var");
    return a && a->type == PE_ATTR_STRINGS && a->n >= 2 ? a : NULL;
}

static int64_t var_bytes(const pe_program *p, const char *name) {
    const pe_var *v = pe_program_find_var(p, 0, name);
    if (!v) return 0;
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->dims[i] > 0 ? v->dims[i] : 1;
    return n * (int64_t)pe_dtype_size(v->dtype);
}

static pe_status add_op_handles(pe_ssa_graph *g, place_state *ps, int op_idx, const bool *skip) {
    for (int p = 0; p < g->n_places; p++) {
        if (skip && skip[p]) continue;
        const pe_op *op = &g->progs[p]->blocks[0].ops[op_idx];
        int h = add_handle(g, PE_HANDLE_OP, p, op_idx, NULL, -1);
        if (h < 0) return OOM();
        for (int s = 0; s < op->n_inputs; s++)
            for (int k = 0; k < op->inputs[s].n_args; k++)
                if (strcmp(op->inputs[s].args[k], PE_EMPTY_VAR) && read_var(g, &ps[p], op->inputs[s].args[k], p, h))
                    return OOM();
        for (int s = 0; s < op->n_outputs; s++)
            for (int k = 0; k < op->outputs[s].n_args; k++)
                if (strcmp(op->outputs[s].args[k], PE_EMPTY_VAR) && write_var(g, &ps[p], op->outputs[s].args[k], p, h))
                    return OOM();
    }
    return PE_OK;
}

/* Place here of global rank r (-1: a place of another trainer). */
static int local_place(int r, int first, int n_places) { return r >= first && r < first + n_places ? r - first : -1; }

/* root: the owner place here (-1: none here); world_root: its global rank. */
static pe_status add_collective(pe_ssa_graph *g, place_state *ps, pe_handle_kind kind, const char *var, int root,
                                int world_root) {
    int h = add_handle(g, kind, -1, -1, var, root);
    if (h < 0) return OOM();
    g->h[h].world_root = world_root;
    for (int p = 0; p < g->n_places; p++)
        if (kind != PE_HANDLE_BCAST || p == root)
            if (read_var(g, &ps[p], var, p, h)) return OOM();
    for (int p = 0; p < g->n_places; p++)
        if ((kind == PE_HANDLE_REDUCE && p == root) || (kind == PE_HANDLE_BCAST && p != root) ||
            kind == PE_HANDLE_ALLREDUCE)
            if (write_var(g, &ps[p], var, p, h)) return OOM();
    return PE_OK;
}

/* The collective of program op op_idx on `var`: reads and writes it on
 * every place (a root is a rank of the world, maybe another process's). */
static pe_status add_op_collective(pe_ssa_graph *g, place_state *ps, pe_handle_kind kind, int op_idx, const char *var,
                                   int root) {
    int h = add_handle(g, kind, -1, op_idx, var, root);
    if (h < 0) return OOM();
    g->h[h].world_root = root; /* (and root: the global rank too; the handle touches every place) */
    for (int p = 0; p < g->n_places; p++)
        if (read_var(g, &ps[p], var, p, h)) return OOM();
    for (int p = 0; p < g->n_places; p++)
        if (write_var(g, &ps[p], var, p, h)) return OOM();
    return PE_OK;
}

/* c_allgather (c_scatter) over several ranks: X of every place -> Out
 * (vars[0]) of every place, instead of the op's handles. */
static pe_status add_allgather(pe_ssa_graph *g, place_state *ps, int op_idx, pe_handle_kind kind, int root) {
    const pe_op *op = &g->progs[0]->blocks[0].ops[op_idx];
    const char *x = pe_op_input1(op, "X"), *out = pe_op_output1(op, "Out");
    if (!x || !out || !strcmp(x, PE_EMPTY_VAR) || !strcmp(out, PE_EMPTY_VAR))
        return pe_error(PE_ERR_INVALID, "op %s (block 0 op %d): X and Out must be given", op->type, op_idx);
    if (!strcmp(x, out))
        return pe_error(PE_ERR_INVALID, "op %s (block 0 op %d): Out '%s' is X; Out has %s X's rows, so it must be "
                        "another var", op->type, op_idx, out, kind == PE_HANDLE_ALLGATHER ? "nranks times" : "1/nranks of");
    const char **own = malloc(sizeof *own);
    if (!own) return OOM();
    own[0] = out;
    int h = add_handle(g, kind, -1, op_idx, x, root);
    if (h >= 0) g->h[h].world_root = root;
    if (h < 0) {
        free(own);
        return OOM();
    }
    g->h[h].vars = own;
    g->h[h].n_vars = 1;
    for (int p = 0; p < g->n_places; p++)
        if (read_var(g, &ps[p], x, p, h)) return OOM();
    for (int p = 0; p < g->n_places; p++)
        if (write_var(g, &ps[p], out, p, h)) return OOM();
    return PE_OK;
}

/* One allreduce over a bucket of gradients: reads and writes every one of
 * them on every place, so it waits for all their producers. */
static pe_status add_fused(pe_ssa_graph *g, place_state *ps, const char **vars, int n, int64_t bytes) {
    const char **own = malloc(sizeof *own * (size_t)n);
    if (!own) return OOM();
    memcpy(own, vars, sizeof *own * (size_t)n);
    int h = add_handle(g, PE_HANDLE_ALLREDUCE_FUSED, -1, -1, vars[0], 0);
    if (h < 0) {
        free(own);
        return OOM();
    }
    g->h[h].vars = own;
    g->h[h].n_vars = n;
    g->h[h].bucket_bytes = bytes;
    for (int p = 0; p < g->n_places; p++)
        for (int k = 0; k < n; k++)
            if (read_var(g, &ps[p], vars[k], p, h)) return OOM();
    for (int p = 0; p < g->n_places; p++)
        for (int k = 0; k < n; k++)
            if (write_var(g, &ps[p], vars[k], p, h)) return OOM();
    g->n_buckets++;
    return PE_OK;
}

/* The gradients exchanged, in production order, with their buckets
 * (fuse_all_reduce_ops). bucket[k] < 0: a plain allreduce. */
static bool sharded_grad(const pe_block *b, const int *n_shards, const char *grad);

static pe_status plan_buckets(const pe_program *p, const pe_build_strategy *bs, const int *n_shards,
                              pe_grad_info **grads_out, int **bucket_out, int *n_out) {
    const pe_block *b = &p->blocks[0];
    int n = 0, cap = 16;
    pe_grad_info *grads = malloc(sizeof *grads * (size_t)cap);
    if (!grads) return OOM();
    for (int i = 0; i < b->n_ops; i++) {
        const pe_attr *rv = role_vars(&b->ops[i]);
        int role = op_role(&b->ops[i]);
        if (!rv || !(role & PE_ROLE_BACKWARD) || (role & PE_ROLE_OPTIMIZE)) continue;
        for (int k = 0; k + 1 < rv->n; k += 2) {
            if (n == cap) {
                pe_grad_info *ng = realloc(grads, sizeof *ng * (size_t)(cap *= 2));
                if (!ng) {
                    free(grads);
                    return OOM();
                }
                grads = ng;
            }
            const pe_var *v = pe_program_find_var(p, 0, rv->strings[k + 1]);
            int64_t bytes = v ? (int64_t)pe_dtype_size(v->dtype) : -1;
            for (int d = 0; v && d < v->ndim; d++) bytes = v->dims[d] > 0 ? bytes * v->dims[d] : -1;
            /* unknown size, or summed by its optimizer's shards: a bucket of its own (-1) */
            if (bytes < 0 || sharded_grad(b, n_shards, rv->strings[k + 1])) bytes = -1;
            grads[n++] = (pe_grad_info){rv->strings[k + 1], bytes, v ? v->dtype : PE_DTYPE_FP32};
        }
    }
    int *bucket = malloc(sizeof *bucket * (size_t)(n ? n : 1));
    if (!bucket) {
        free(grads);
        return OOM();
    }
    double mb = 1024.0 * 1024.0;
    pe_fuse_all_reduce_plan(grads, n, (int64_t)(bs->fuse_first_grad_size_in_MB * mb),
                            (int64_t)(bs->fuse_grad_size_in_MB * mb), bucket);
    *grads_out = grads;
    *bucket_out = bucket;
    *n_out = n;
    return PE_OK;
}

/* ---- shard_optimizer ---------------------------------------------------- */

/* Below this many elements an update is not split (one shard). */
#define SHARD_MIN_ELEMS 16384

static int64_t static_numel(const pe_program *p, const char *name) {
    const pe_var *v = pe_program_find_var(p, 0, name);
    if (!v) return -1;
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) {
        if (v->dims[i] < 0) return -1;
        n *= v->dims[i];
    }
    return n;
}

static bool op_reads(const pe_op *op, const char *name) {
    for (int s = 0; s < op->n_inputs; s++)
        for (int k = 0; k < op->inputs[s].n_args; k++)
            if (!strcmp(op->inputs[s].args[k], name)) return true;
    return false;
}

static bool op_writes(const pe_op *op, const char *name) {
    for (int s = 0; s < op->n_outputs; s++)
        for (int k = 0; k < op->outputs[s].n_args; k++)
            if (!strcmp(op->outputs[s].args[k], name)) return true;
    return false;
}

static bool is_exchanged_grad(const pe_block *b, const char *grad) {
    for (int i = 0; i < b->n_ops; i++) {
        const pe_attr *rv = role_vars(&b->ops[i]);
        int role = op_role(&b->ops[i]);
        if (!rv || !(role & PE_ROLE_BACKWARD) || (role & PE_ROLE_OPTIMIZE)) continue;
        for (int k = 0; k + 1 < rv->n; k += 2)
            if (!strcmp(rv->strings[k + 1], grad)) return true;
    }
    return false;
}

/* Shards of optimizer op i (0 = not sharded): an optimizer op over one
 * parameter (ops.def PE_OPT) that updates its parameter and accumulators (its
 * per-element in-place pairs) in place, whose gradient is an exchanged one
 * that only it reads (after its last writer), and only it writes the
 * per-element vars, and that no op outside the backward rewrites (global-norm
 * clipping does, in place, from the summed gradients). Across trainers
 * (cross) the shards are the world's ranks, and an op with whole in-place outputs (adam's beta powers, which
 * every place advances) is not sharded; nor is lamb (its trust ratio spans the
 * whole parameter). */
static int shard_count(const pe_program *p, int i, int n_places, bool cross) {
    const pe_block *b = &p->blocks[0];
    const pe_op *op = &b->ops[i];
    const pe_op_info *info = pe_op_info_find(op->type);
    if (!pe_op_info_is_optimizer(info) || !(op_role(op) & PE_ROLE_OPTIMIZE)) return 0;
    /* lamb's trust ratio ||p|| / ||r|| needs the whole parameter: a shard sees
     * only its range, so lamb runs unsharded on every place (exact, as without
     * shard_optimizer) */
    if (pe_op_type_id(op->type) == PE_OP_lamb) return 0;
    const char *grad = pe_op_input1(op, "Grad"), *param = pe_op_input1(op, "Param");
    if (!grad || !param || !is_exchanged_grad(b, grad)) return 0;
    int64_t n = static_numel(p, param);
    if (n <= 0 || static_numel(p, grad) != n) return 0;
    const char *mine[PE_MAX_SLOTS];
    int n_mine = 0;
    for (int k = 0; k < info->n_elem_pairs; k++) {
        const char *in = pe_op_input1(op, info->inputs[info->elem_pairs[k][0]].name),
                   *out = pe_op_output1(op, info->outputs[info->elem_pairs[k][1]].name);
        if (!in && !out) continue;
        if (!in || !out || strcmp(in, out) || static_numel(p, in) != n) return 0;
        const pe_var *v = pe_program_find_var(p, 0, in);
        if (!v || !v->persistable) return 0;
        mine[n_mine++] = in;
    }
    /* the whole in-place outputs (adam's beta powers) must alias their inputs */
    for (int k = 0; k < info->n_inplace; k++) {
        if (pe_op_info_elem_output(info, info->inplace[k][1])) continue;
        const char *out = pe_op_output1(op, info->outputs[info->inplace[k][1]].name),
                   *in = pe_op_input1(op, info->inputs[info->inplace[k][0]].name);
        if (out && strcmp(out, PE_EMPTY_VAR) && (!in || strcmp(in, out) || cross)) return 0;
    }
    int last_write = -1;
    for (int j = 0; j < b->n_ops; j++)
        if (j != i && op_writes(&b->ops[j], grad)) {
            /* a non-backward writer (clip_by_global_norm, in place after the
             * exchange) must read the summed gradient, which the shards would
             * only sum later: such an update is not sharded */
            if (!(op_role(&b->ops[j]) & PE_ROLE_BACKWARD)) return 0;
            last_write = j;
        }
    if (last_write > i) return 0;
    for (int j = 0; j < b->n_ops; j++) {
        if (j == i) continue;
        if (j > last_write && op_reads(&b->ops[j], grad)) return 0;
        for (int k = 0; k < n_mine; k++)
            if (op_writes(&b->ops[j], mine[k])) return 0;
    }
    int64_t k = n / SHARD_MIN_ELEMS;
    return k < 1 ? 1 : k > n_places ? n_places : (int)k;
}

/* The op's outputs and its gradient get new versions on every place,
 * written by handle h. */
static pe_status write_outputs(pe_ssa_graph *g, place_state *ps, int op_idx, int h) {
    for (int p = 0; p < g->n_places; p++) {
        const pe_op *op = &g->progs[p]->blocks[0].ops[op_idx];
        for (int a = 0; a < op->n_outputs; a++)
            for (int j = 0; j < op->outputs[a].n_args; j++)
                if (strcmp(op->outputs[a].args[j], PE_EMPTY_VAR) && write_var(g, &ps[p], op->outputs[a].args[j], p, h))
                    return OOM();
        /* the gradient was summed in place */
        if (write_var(g, &ps[p], g->h[h].var, p, h)) return OOM();
    }
    return PE_OK;
}

/* Handles for a sharded optimizer op: k shards reading every input on every
 * place (so each waits for all places' gradients) and ordered after every
 * reader of the vars they overwrite, then a JOIN that writes the new
 * versions (shards of one op run concurrently: they touch disjoint
 * ranges). Across trainers (first: the global rank of place 0 here) the
 * shards are global ranks: a SHARD_SUM reduce-scatters the gradient over
 * the world first, this trainer's shards (if any) follow, and a
 * SHARD_GATHER all-gathers the updated ranges in place of the JOIN. */
static pe_status add_opt_shards(pe_ssa_graph *g, place_state *ps, int op_idx, int k, bool cross, int first_rank) {
    const pe_op *op0 = &g->progs[0]->blocks[0].ops[op_idx];
    const char *grad = pe_op_input1(op0, "Grad");
    int sum = -1;
    if (cross) {
        sum = add_handle(g, PE_HANDLE_SHARD_SUM, -1, op_idx, grad, 0);
        if (sum < 0) return OOM();
        g->h[sum].n_shards = k;
        for (int p = 0; p < g->n_places; p++)
            if (read_var(g, &ps[p], grad, p, sum)) return OOM();
        for (int p = 0; p < g->n_places; p++)
            if (write_var(g, &ps[p], grad, p, sum)) return OOM();
    }
    int first = g->n_h;
    int s0 = cross ? first_rank : 0, s1 = cross ? first_rank + g->n_places : k;
    for (int s = s0; s < s1 && s < k; s++) {
        int h = add_handle(g, PE_HANDLE_OPT_SHARD, s - s0, op_idx, grad, s);
        if (h < 0) return OOM();
        g->h[h].n_shards = k;
        for (int p = 0; p < g->n_places; p++) {
            const pe_op *op = &g->progs[p]->blocks[0].ops[op_idx];
            for (int a = 0; a < op->n_inputs; a++)
                for (int j = 0; j < op->inputs[a].n_args; j++)
                    if (strcmp(op->inputs[a].args[j], PE_EMPTY_VAR) && read_var(g, &ps[p], op->inputs[a].args[j], p, h))
                        return OOM();
            for (int a = 0; a < op->n_outputs; a++)
                for (int j = 0; j < op->outputs[a].n_args; j++) {
                    const char *name = op->outputs[a].args[j];
                    if (!strcmp(name, PE_EMPTY_VAR)) continue;
                    vstate *st = state_of(g, &ps[p], name, p);
                    if (!st || pe_ssa_graph_add_edge(g, g->vars[st->ssa].producer, h)) return OOM();
                    for (int r = 0; r < st->n_readers; r++)
                        if (st->readers[r] < first && pe_ssa_graph_add_edge(g, st->readers[r], h)) return OOM();
                }
        }
    }
    g->n_sharded_ops++;
    if (k == 1 && !cross) return write_outputs(g, ps, op_idx, first); /* the one shard writes the new versions */
    int join = add_handle(g, cross ? PE_HANDLE_SHARD_GATHER : PE_HANDLE_JOIN, -1, op_idx, grad, 0);
    if (join < 0) return OOM();
    g->h[join].n_shards = k;
    for (int h = first; h < join; h++)
        if (pe_ssa_graph_add_edge(g, h, join)) return OOM();
    if (pe_ssa_graph_add_edge(g, sum, join)) return OOM(); /* no shard here: after the sum */
    return write_outputs(g, ps, op_idx, join);
}

/* ---- memory_optimize on one place: updates early -------------------------
 * An optimizer op needs only its gradient, but nothing in the graph makes
 * it run before the rest of the backward pass, so the memory plan must
 * keep every parameter gradient alive until the end of the backward pass
 * (PyTorch holds them all until optimizer.step() too). With the memory plan
 * on one place (no collectives to wait for), each optimizer op gets an edge
 * to the first backward op after its gradient's producer: the update runs
 * right away and its gradient's bytes serve the gradients that follow (for
 * the MLP, fc_0.w's gradient reuses fc_1.w's). An edge that would close a
 * cycle (a later backward op reading the parameter) is not added. The
 * edges go from a higher handle to a lower one: sequential execution runs
 * the graph's topological order (graph/ssa_graph.h), not the handle order,
 * which would update after the gradient's bytes were reused. */

static bool reaches(const pe_ssa_graph *g, int from, int to, unsigned char *seen, int *stack) {
    memset(seen, 0, (size_t)g->n_h);
    int top = 0;
    stack[top++] = from;
    seen[from] = 1;
    while (top) {
        int h = stack[--top];
        if (h == to) return true;
        for (int i = 0; i < g->h[h].n_succ; i++) {
            int v = g->h[h].succ[i];
            if (!seen[v]) {
                seen[v] = 1;
                stack[top++] = v;
            }
        }
    }
    return false;
}

static pe_status order_updates_early(pe_ssa_graph *g) {
    const pe_block *b = &g->progs[0]->blocks[0];
    int *handle_of = malloc(sizeof *handle_of * (size_t)(b->n_ops ? b->n_ops : 1));
    unsigned char *seen = malloc((size_t)(g->n_h ? g->n_h : 1));
    int *stack = malloc(sizeof *stack * (size_t)(g->n_h ? g->n_h : 1));
    pe_status st = PE_OK;
    if (!handle_of || !seen || !stack) {
        st = OOM();
        goto done;
    }
    for (int i = 0; i < b->n_ops; i++) handle_of[i] = -1;
    for (int h = 0; h < g->n_h; h++)
        if (g->h[h].kind == PE_HANDLE_OP) handle_of[g->h[h].op_idx] = h;
    for (int i = 0; i < b->n_ops; i++) {
        const pe_op *op = &b->ops[i];
        const char *grad = pe_op_input1(op, "Grad");
        if (!(op_role(op) & PE_ROLE_OPTIMIZE) || !grad || handle_of[i] < 0) continue;
        int producer = -1;
        for (int j = i - 1; j >= 0 && producer < 0; j--)
            if (op_writes(&b->ops[j], grad)) producer = j;
        if (producer < 0) continue;
        for (int j = producer + 1; j < b->n_ops; j++) {
            int role = op_role(&b->ops[j]);
            if (!(role & PE_ROLE_BACKWARD) || (role & PE_ROLE_OPTIMIZE) || handle_of[j] < 0) continue;
            if (!reaches(g, handle_of[j], handle_of[i], seen, stack) && pe_ssa_graph_add_edge(g, handle_of[i], handle_of[j])) st = OOM();
            break;
        }
        if (st != PE_OK) break;
    }
done:
    free(handle_of);
    free(seen);
    free(stack);
    return st;
}

/* True when the optimizer op that reads `grad` runs as shards (n_shards
 * per op of b, may be NULL). */
static bool sharded_grad(const pe_block *b, const int *n_shards, const char *grad) {
    for (int i = 0; n_shards && i < b->n_ops; i++) {
        const char *g = n_shards[i] > 0 ? pe_op_input1(&b->ops[i], "Grad") : NULL;
        if (g && !strcmp(g, grad)) return true;
    }
    return false;
}

pe_status pe_multi_device_build(const pe_program *prog, int n_places, const char *loss_name,
                                const pe_build_strategy *bs, pe_ssa_graph **out) {
    return pe_multi_device_build_world(prog, n_places, 1, 0, loss_name, bs, out);
}

/* The optimizer state a reduce-strategy owner broadcasts after its update:
 * the persistable outputs of param's optimizer ops other than the
 * parameter (momentum's velocity, adam's moments and beta powers), each
 * once, in op and slot order. */
static pe_status add_state_broadcasts(pe_ssa_graph *g, place_state *ps, const char *param, int root, int world_root) {
    const pe_block *b = &g->progs[0]->blocks[0];
    const char *done[4 * PE_MAX_SLOTS];
    int n_done = 0;
    for (int i = 0; i < b->n_ops; i++) {
        const pe_attr *rv = role_vars(&b->ops[i]);
        if (!rv || !(op_role(&b->ops[i]) & PE_ROLE_OPTIMIZE) || strcmp(rv->strings[0], param)) continue;
        for (int s = 0; s < b->ops[i].n_outputs; s++)
            for (int k = 0; k < b->ops[i].outputs[s].n_args; k++) {
                const char *name = b->ops[i].outputs[s].args[k];
                const pe_var *v = pe_block_find_var(b, name);
                bool seen = !strcmp(name, param);
                for (int j = 0; j < n_done && !seen; j++) seen = !strcmp(done[j], name);
                if (seen || !v || !v->persistable || n_done == (int)(sizeof done / sizeof done[0])) continue;
                done[n_done++] = name;
                PE_CHECK(add_collective(g, ps, PE_HANDLE_BCAST, name, root, world_root));
            }
    }
    return PE_OK;
}

pe_status pe_multi_device_build_world(const pe_program *prog, int n_places, int n_trainers, int trainer_id,
                                      const char *loss_name, const pe_build_strategy *bs, pe_ssa_graph **out) {
    /* places of every process: a gradient is exchanged when it has more
     * than one (one place of several processes too) */
    const int world = n_places * (n_trainers > 1 ? n_trainers : 1);
    *out = NULL;
    if (n_places < 1) return pe_error(PE_ERR_INVALID, "multi_device pass: %d places", n_places);
    pe_ssa_graph *g = calloc(1, sizeof *g);
    place_state *ps = calloc((size_t)n_places, sizeof *ps);
    bool *skip = calloc((size_t)n_places, sizeof *skip);
    char **owned_params = NULL;
    int *owner = NULL, n_params = 0;
    pe_grad_info *fgrads = NULL; /* fuse_all_reduce_ops */
    int *fbucket = NULL, n_fgrads = 0, k_grad = 0;
    const char **fvars = NULL;
    int *n_shards = NULL; /* shard_optimizer: per op of block 0 */
    pe_status st = PE_OK;
    if (!g || !ps || !skip) { st = OOM(); goto done; }
    g->n_places = n_places;
    g->loss_grad_op = -1;
    g->progs = calloc((size_t)n_places, sizeof *g->progs);
    if (!g->progs) { st = OOM(); goto done; }
    for (int p = 0; p < n_places; p++)
        if (!(g->progs[p] = pe_program_clone(prog))) { st = OOM(); goto done; }

    /* The loss-gradient seed: scaled per place at run time, or removed when
     * the user feeds loss@GRAD (customized). */
    if (loss_name) {
        char lg[512];
        snprintf(lg, sizeof lg, "%s" PE_GRAD_SUFFIX, loss_name);
        const pe_block *b = &g->progs[0]->blocks[0];
        for (int i = 0; i < b->n_ops; i++) {
            const char *o = pe_op_output1(&b->ops[i], "Out");
            if (op_role(&b->ops[i]) == (PE_ROLE_BACKWARD | PE_ROLE_LOSS) && o && !strcmp(o, lg)) {
                g->loss_grad_op = i;
                break;
            }
        }
        if (g->loss_grad_op >= 0 && bs->gradient_scale_strategy == PE_GRAD_SCALE_CUSTOMIZED) {
            for (int p = 0; p < n_places; p++) pe_block_remove_op(&g->progs[p]->blocks[0], g->loss_grad_op);
            g->loss_grad_op = -1;
        }
        /* the seed's value: a [1] float64 var per place the executor sets
         * before each run (the place's share of the batch) */
        for (int p = 0; g->loss_grad_op >= 0 && p < n_places && st == PE_OK; p++) {
            pe_block *bp = &g->progs[p]->blocks[0];
            pe_var *v = pe_block_add_var(bp, PE_LOSS_SCALE_VAR, PE_DTYPE_FP64, 1, (int64_t[]){1});
            if (v) v->stop_gradient = true;
            if (!v || pe_op_add_input(&bp->ops[g->loss_grad_op], "ValueTensor", PE_LOSS_SCALE_VAR) != PE_OK) st = OOM();
        }
        if (st != PE_OK) goto done;
    }

    const pe_block *b0 = &g->progs[0]->blocks[0];
    bool reduce = bs->reduce_strategy == PE_REDUCE_REDUCE && world > 1;
    const int first = n_trainers > 1 ? trainer_id * n_places : 0; /* global rank of place 0 */
    /* Global-norm clipping needs every gradient summed on every place; the
     * reduce strategy leaves partial sums on non-owner places, so each place
     * would clip with a different norm. Refuse rather than train wrongly.
     * (A per-gradient clip, ClipGradByNorm's clip_by_global_norm over one
     * gradient, carries op_role_var and runs on the owner, which holds the
     * whole sum.) */
    for (int i = 0; reduce && i < b0->n_ops; i++)
        if (pe_op_type_id(b0->ops[i].type) == PE_OP_clip_by_global_norm && !role_vars(&b0->ops[i])) {
            st = pe_error(PE_ERR_UNSUPPORTED,
                          "reduce_strategy 'reduce' cannot run clip_by_global_norm (block 0 op %d): each place "
                          "holds only its own parameters' summed gradients, so the global norm would differ per "
                          "place; use reduce_strategy all_reduce with gradient clipping", i);
            goto done;
        }
    /* sync_batch_norm: PE has no cross-place batch norm. On one place the
     * batch statistics are the whole batch's (honoured), and a batch_norm in
     * inference (is_test, use_global_stats) uses none; on several, each
     * place would normalize with its own rows' statistics, which is not
     * what the switch asks for: refuse rather than train differently. */
    for (int i = 0; bs->sync_batch_norm && world > 1 && i < b0->n_ops; i++) {
        const pe_attr *test = pe_op_attr(&b0->ops[i], "is_test"), *glob = pe_op_attr(&b0->ops[i], "use_global_stats");
        if (pe_op_type_id(b0->ops[i].type) == PE_OP_batch_norm && !(test && test->i) && !(glob && glob->i)) {
            st = pe_error(PE_ERR_UNSUPPORTED,
                          "BuildStrategy.sync_batch_norm: batch_norm (block 0 op %d) would normalize with the "
                          "statistics of its place's rows only, not of the whole batch over the %d places: PE "
                          "has no synchronized batch norm; run on one place or set sync_batch_norm off", i, world);
            goto done;
        }
    }
    if (reduce) {
        /* owners: greedy byte balance over parameters in gradient order,
         * among the global ranks (the same choice in every process) */
        int64_t *load = calloc((size_t)world, sizeof *load);
        if (!load) { st = OOM(); goto done; }
        for (int i = 0; i < b0->n_ops && st == PE_OK; i++) {
            const pe_attr *rv = role_vars(&b0->ops[i]);
            if (!rv || !(op_role(&b0->ops[i]) & PE_ROLE_BACKWARD)) continue;
            for (int k = 0; k + 1 < rv->n; k += 2) {
                char **np = realloc(owned_params, sizeof *np * (size_t)(n_params + 1));
                int *no = realloc(owner, sizeof *no * (size_t)(n_params + 1));
                if (np) owned_params = np;
                if (no) owner = no;
                if (!np || !no) { st = OOM(); break; }
                int best = 0;
                for (int p = 1; p < world; p++)
                    if (load[p] < load[best]) best = p;
                load[best] += var_bytes(prog, rv->strings[k]);
                owned_params[n_params] = rv->strings[k];
                owner[n_params] = best;
                n_params++;
            }
        }
        free(load);
        if (st != PE_OK) goto done;
    }

    /* shard_optimizer: shards per optimizer op (0 = not sharded); their
     * gradients are summed by the shards (no allreduce, no bucket) */
    bool shard = bs->shard_optimizer && !reduce && world > 1 && (n_trainers <= 1 || bs->shard_across_trainers);
    if (shard) {
        if (!(n_shards = calloc((size_t)b0->n_ops, sizeof *n_shards))) { st = OOM(); goto done; }
        for (int i = 0; i < b0->n_ops; i++) n_shards[i] = shard_count(g->progs[0], i, world, n_trainers > 1);
    }
    /* (the pass manager warns when fuse_all_reduce_ops does not apply: reduce, sharded gradients) */
    bool fuse = bs->fuse_all_reduce_ops && !reduce && world > 1;
    if (fuse) {
        if ((st = plan_buckets(g->progs[0], bs, n_shards, &fgrads, &fbucket, &n_fgrads)) != PE_OK) goto done;
        g->n_fuse_grads = n_fgrads;
        for (int k = 0; k < n_fgrads; k++) g->n_fuse_sharded += sharded_grad(b0, n_shards, fgrads[k].grad);
        if (!(fvars = malloc(sizeof *fvars * (size_t)(n_fgrads ? n_fgrads : 1)))) { st = OOM(); goto done; }
    }
    for (int i = 0; i < b0->n_ops; i++) {
        const pe_op *op = &b0->ops[i];
        int role = op_role(op);
        const pe_attr *rv = role_vars(op);
        if (n_shards && n_shards[i] > 0) {
            if ((st = add_opt_shards(g, ps, i, n_shards[i], n_trainers > 1, first)) != PE_OK) goto done;
            continue;
        }
        memset(skip, 0, sizeof *skip * (size_t)n_places);
        if (reduce && (role & PE_ROLE_OPTIMIZE) && rv) {
            /* optimizer of one parameter: only on its owner (maybe on no
             * place here) */
            for (int j = 0; j < n_params; j++)
                if (!strcmp(owned_params[j], rv->strings[0]))
                    for (int p = 0; p < n_places; p++) skip[p] = first + p != owner[j];
        }
        pe_collective co;
        bool coll = pe_collective_of(op, &co);
        if (coll && (st = pe_collective_check(op, world)) != PE_OK) goto done;
        if (coll && world > 1 && (co.kind == PE_COLLECTIVE_ALLGATHER || co.kind == PE_COLLECTIVE_SCATTER)) {
            pe_handle_kind k = co.kind == PE_COLLECTIVE_SCATTER ? PE_HANDLE_SCATTER : PE_HANDLE_ALLGATHER;
            if ((st = add_allgather(g, ps, i, k, co.root)) != PE_OK) goto done;
            continue;
        }
        if ((st = add_op_handles(g, ps, i, skip)) != PE_OK) goto done;
        if (coll && world > 1 && co.kind != PE_COLLECTIVE_LOCAL) {
            static const pe_handle_kind k_kind[] = {[PE_COLLECTIVE_ALLREDUCE] = PE_HANDLE_ALLREDUCE,
                                                    [PE_COLLECTIVE_BROADCAST] = PE_HANDLE_BCAST,
                                                    [PE_COLLECTIVE_REDUCE] = PE_HANDLE_REDUCE};
            const char *out = pe_op_output1(op, "Out");
            if (!out || !strcmp(out, PE_EMPTY_VAR)) {
                st = pe_error(PE_ERR_INVALID, "op %s (block 0 op %d): Out must be given", op->type, i);
                goto done;
            }
            if ((st = add_op_collective(g, ps, k_kind[co.kind], i, out, co.root)) != PE_OK) goto done;
        }
        if (!rv || !(role & PE_ROLE_BACKWARD) || (role & PE_ROLE_OPTIMIZE) || world == 1) continue;
        for (int k = 0; k + 1 < rv->n; k += 2) {
            /* borrow the name from place 0's program (outlives the graph's use) */
            const char *grad = rv->strings[k + 1];
            if (fuse && k_grad < n_fgrads && fbucket[k_grad] >= 0) {
                /* a bucket's allreduce comes after its last gradient */
                int bk = fbucket[k_grad], last = k_grad;
                while (last + 1 < n_fgrads && fbucket[last + 1] == bk) last++;
                if (last == k_grad) {
                    int nv = 0;
                    int64_t bytes = 0;
                    for (int j = 0; j < n_fgrads; j++)
                        if (fbucket[j] == bk) {
                            fvars[nv++] = fgrads[j].grad;
                            bytes += fgrads[j].bytes;
                        }
                    st = add_fused(g, ps, fvars, nv, bytes);
                }
            } else if (!reduce) {
                /* unless the optimizer's shards sum it */
                if (!sharded_grad(b0, n_shards, grad)) st = add_collective(g, ps, PE_HANDLE_ALLREDUCE, grad, 0, 0);
            } else {
                int root = 0;
                for (int j = 0; j < n_params; j++)
                    if (!strcmp(owned_params[j], rv->strings[k])) root = owner[j];
                st = add_collective(g, ps, PE_HANDLE_REDUCE, grad, local_place(root, first, n_places), root);
            }
            if (st != PE_OK) goto done;
            g->n_param_grads++;
            k_grad++;
        }
    }
    for (int j = 0; reduce && j < n_params && st == PE_OK; j++) {
        int root = local_place(owner[j], first, n_places);
        st = add_collective(g, ps, PE_HANDLE_BCAST, owned_params[j], root, owner[j]);
        if (st == PE_OK) st = add_state_broadcasts(g, ps, owned_params[j], root, owner[j]);
    }
    if (st == PE_OK && world == 1 && bs->memory_optimize) st = order_updates_early(g);

done:
    if (ps)
        for (int p = 0; p < n_places; p++) {
            for (int i = 0; i < ps[p].n; i++) free(ps[p].st[i].readers);
            free(ps[p].st);
            pe_strmap_free(&ps[p].map);
        }
    free(ps);
    free(skip);
    free(owned_params);
    free(owner);
    free(fgrads);
    free(fbucket);
    free(fvars);
    free(n_shards);
    if (st != PE_OK) {
        pe_ssa_graph_free(g);
        return st;
    }
    *out = g;
    return PE_OK;
}
