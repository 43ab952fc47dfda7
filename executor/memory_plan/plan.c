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
 * Sizes come from static shape inference: every op's infer function runs,
 * in topological order, over meta-only tensors in a scratch scope, starting
 * from the shapes of the feeds and persistables (the caller's meta_fn), so
 * the plan is made before the first run, for the actual batch. The
 * executor caches one plan per feed-shape signature (executor/memory_plan/arena.c).
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM() pe_error(PE_ERR_NOMEM, "memory plan: out of memory")

static int64_t align_up(int64_t b) { return (b + PE_MP_ALIGN - 1) / PE_MP_ALIGN * PE_MP_ALIGN; }

/* ---- reachability -------------------------------------------------------- */

struct pe_mp_reach {
    int n;
    int words;          /* uint64 words per row */
    uint64_t *bits;     /* row u: nodes reachable from u by >= 1 edge */
    int *pos;           /* node -> topological position */
    int *order;         /* position -> node */
};

void pe_mp_reach_free(pe_mp_reach *r) {
    if (!r) return;
    free(r->bits);
    free(r->pos);
    free(r->order);
    free(r);
}

pe_status pe_mp_reach_new(int n, const int *const *succ, const int *n_succ, pe_mp_reach **out) {
    *out = NULL;
    pe_mp_reach *r = calloc(1, sizeof *r);
    int *indeg = calloc((size_t)(n ? n : 1), sizeof *indeg);
    if (!r || !indeg) {
        free(r);
        free(indeg);
        return OOM();
    }
    r->n = n;
    r->words = (n + 63) / 64;
    r->bits = calloc((size_t)n * (size_t)(r->words ? r->words : 1), sizeof *r->bits);
    r->pos = malloc(sizeof *r->pos * (size_t)(n ? n : 1));
    r->order = malloc(sizeof *r->order * (size_t)(n ? n : 1));
    if (!r->bits || !r->pos || !r->order) {
        free(indeg);
        pe_mp_reach_free(r);
        return OOM();
    }
    for (int u = 0; u < n; u++)
        for (int k = 0; k < n_succ[u]; k++) {
            int v = succ[u][k];
            if (v < 0 || v >= n) {
                free(indeg);
                pe_mp_reach_free(r);
                return pe_error(PE_ERR_INVALID, "memory plan: edge %d -> %d leaves the %d nodes", u, v, n);
            }
            indeg[v]++;
        }
    /* Kahn's algorithm, smallest node id first among the ready ones (a FIFO
     * over ids keeps the graph's own creation order when it is valid). */
    int head = 0, tail = 0;
    for (int u = 0; u < n; u++)
        if (!indeg[u]) r->order[tail++] = u;
    while (head < tail) {
        int u = r->order[head++];
        for (int k = 0; k < n_succ[u]; k++)
            if (--indeg[succ[u][k]] == 0) r->order[tail++] = succ[u][k];
    }
    free(indeg);
    if (tail != n) {
        pe_mp_reach_free(r);
        return pe_error(PE_ERR_INVALID, "memory plan: the handle graph has a cycle (%d of %d handles ordered)", tail, n);
    }
    for (int i = 0; i < n; i++) r->pos[r->order[i]] = i;
    /* reverse topological order: row(u) = OR over successors v of {v} + row(v) */
    for (int i = n - 1; i >= 0; i--) {
        int u = r->order[i];
        uint64_t *ru = r->bits + (size_t)u * (size_t)r->words;
        for (int k = 0; k < n_succ[u]; k++) {
            int v = succ[u][k];
            const uint64_t *rv = r->bits + (size_t)v * (size_t)r->words;
            ru[v >> 6] |= UINT64_C(1) << (v & 63);
            for (int w = 0; w < r->words; w++) ru[w] |= rv[w];
        }
    }
    *out = r;
    return PE_OK;
}

pe_status pe_mp_reach_from_graph(const pe_ssa_graph *g, pe_mp_reach **out) {
    int n = g->n_h;
    const int **succ = malloc(sizeof *succ * (size_t)(n ? n : 1));
    int *n_succ = malloc(sizeof *n_succ * (size_t)(n ? n : 1));
    if (!succ || !n_succ) {
        free(succ);
        free(n_succ);
        return OOM();
    }
    for (int i = 0; i < n; i++) {
        succ[i] = g->h[i].succ;
        n_succ[i] = g->h[i].n_succ;
    }
    pe_status st = pe_mp_reach_new(n, succ, n_succ, out);
    free(succ);
    free(n_succ);
    return st;
}

bool pe_mp_reaches(const pe_mp_reach *r, int from, int to) {
    return (r->bits[(size_t)from * (size_t)r->words + (size_t)(to >> 6)] >> (to & 63)) & 1;
}

int pe_mp_topo_pos(const pe_mp_reach *r, int node) { return r->pos[node]; }
int pe_mp_topo_node(const pe_mp_reach *r, int pos) { return r->order[pos]; }
int pe_mp_n_nodes(const pe_mp_reach *r) { return r->n; }

/* ---- the solver ---------------------------------------------------------- */

/* May b take bytes of a? Every access of a happens-before b's first write.
 * With at_fw, b's first writer may itself be an access of a (b written in
 * place of a: then b must cover exactly a's bytes from its start). */
static bool before(const pe_mp_reach *r, const pe_mp_tensor *t, int ia, int ib, bool at_fw) {
    const pe_mp_tensor *a = &t[ia], *b = &t[ib];
    int fw = b->first_writer;
    for (int k = 0; k < a->n_access; k++) {
        int x = a->access[k];
        if (x == fw) {
            if (!at_fw) return false;
        } else if (!pe_mp_reaches(r, x, fw)) {
            return false;
        }
    }
    return true;
}

typedef struct {
    int64_t lo, hi;
} interval;

static int cmp_interval(const void *x, const void *y) {
    const interval *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Is [off, off + bytes) free of every interval? */
static bool fits_at(const interval *iv, int n, int64_t off, int64_t bytes) {
    for (int i = 0; i < n; i++)
        if (iv[i].lo < off + bytes && off < iv[i].hi) return false;
    return true;
}

/* Best fit: the occupied intervals sorted by address and coalesced leave
 * gaps (the address-ordered free list) inside [0, arena); the smallest gap
 * that holds `need` wins (lowest address on ties); when none does, the
 * bytes after the last occupied interval (the arena grows by less when
 * that interval ends inside it). */
static int64_t best_fit(interval *iv, int n_iv, int64_t arena, int64_t need) {
    qsort(iv, (size_t)n_iv, sizeof *iv, cmp_interval);
    int64_t best = -1, best_size = 0, cursor = 0;
    for (int i = 0; i <= n_iv; i++) {
        int64_t gap_end = i < n_iv ? iv[i].lo : arena;
        if (gap_end - cursor >= need && (best < 0 || gap_end - cursor < best_size)) {
            best = cursor;
            best_size = gap_end - cursor;
        }
        if (i < n_iv && iv[i].hi > cursor) cursor = iv[i].hi;
    }
    return best >= 0 ? best : cursor;
}

typedef struct {
    const pe_mp_reach *r;
    const pe_mp_tensor *t;
    int n;
    bool reuse, inplace;
    int64_t *size;      /* aligned sizes */
    uint8_t *conflict;  /* [a * n + b]: a and b may be live at the same time */
    int *order;         /* tensors by their first writer's topological position */
    interval *iv;       /* scratch */
} solver;

static bool conflict(const solver *s, int a, int b) { return s->conflict[(size_t)a * (size_t)s->n + (size_t)b]; }

static _Thread_local const solver *g_sort;

static int cmp_first_writer(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    int pa = pe_mp_topo_pos(g_sort->r, g_sort->t[a].first_writer);
    int pb = pe_mp_topo_pos(g_sort->r, g_sort->t[b].first_writer);
    if (pa != pb) return pa < pb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Can b go in place of src (b's declared in-place input)? src's accesses
 * end at b's first writer, b is no larger. */
static bool inplace_ok(const solver *s, int src, int b) {
    return src >= 0 && src < s->n && src != b && s->size[src] >= s->size[b] && before(s->r, s->t, src, b, true);
}

/* Order 1: tensors in the order they are born (first writer); each goes in
 * place of its input when that input dies there and nothing else live
 * overlaps it, else best fit among the bytes of tensors live with it. */
static int64_t place_in_order(solver *s, int64_t *off, int *inpl) {
    int64_t arena = 0;
    for (int i = 0; i < s->n; i++) off[i] = -1;
    for (int oi = 0; oi < s->n; oi++) {
        int b = s->order[oi];
        int64_t need = s->size[b];
        int src = s->inplace ? s->t[b].inplace_of : -1;
        int n_iv = 0;
        bool src_ok = inplace_ok(s, src, b) && off[src] >= 0;
        for (int oj = 0; oj < oi; oj++) {
            int a = s->order[oj];
            if (a != src && conflict(s, a, b)) s->iv[n_iv++] = (interval){off[a], off[a] + s->size[a]};
        }
        inpl[b] = -1;
        if (src_ok && fits_at(s->iv, n_iv, off[src], need)) {
            off[b] = off[src];
            inpl[b] = src;
        } else {
            if (src >= 0 && off[src] >= 0 && conflict(s, src, b))
                s->iv[n_iv++] = (interval){off[src], off[src] + s->size[src]};
            off[b] = s->reuse ? best_fit(s->iv, n_iv, arena, need) : arena;
        }
        if (off[b] + need > arena) arena = off[b] + need;
    }
    return arena;
}

static _Thread_local const int64_t *g_gsize;
static _Thread_local const int *g_groot;

static int cmp_group_size(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    if (g_gsize[a] != g_gsize[b]) return g_gsize[a] > g_gsize[b] ? -1 : 1;
    return cmp_first_writer(&g_groot[a], &g_groot[b]);
}

/* Order 2 (greedy by size): in-place chains first become groups sharing
 * one offset; groups are then placed largest first, each by best fit
 * among the groups it may be live with. Large long-lived tensors (weight
 * gradients) then sit low and small ones fill the gaps, where order 1 can
 * fragment the arena. */
static pe_status place_by_size(solver *s, int64_t *off, int *inpl, int64_t *arena_out) {
    int n = s->n;
    int *grp = malloc(sizeof *grp * (size_t)n), *tail = malloc(sizeof *tail * (size_t)n);
    int *root = malloc(sizeof *root * (size_t)n), *gorder = malloc(sizeof *gorder * (size_t)n);
    int64_t *gsize = malloc(sizeof *gsize * (size_t)n), *goff = malloc(sizeof *goff * (size_t)n);
    uint8_t *gconf = NULL;
    int ng = 0;
    pe_status st = PE_OK;
    if (!grp || !tail || !root || !gorder || !gsize || !goff) {
        st = OOM();
        goto done;
    }
    for (int oi = 0; oi < n; oi++) {
        int b = s->order[oi];
        int src = s->inplace ? s->t[b].inplace_of : -1;
        inpl[b] = -1;
        bool join = inplace_ok(s, src, b) && tail[grp[src]] == src;
        for (int m = 0; join && m < oi; m++) { /* no other member of src's group may be live with b */
            int a = s->order[m];
            if (a != src && grp[a] == grp[src] && conflict(s, a, b)) join = false;
        }
        if (join) {
            grp[b] = grp[src];
            tail[grp[b]] = b;
            inpl[b] = src;
        } else {
            grp[b] = ng;
            tail[ng] = b;
            root[ng] = b;
            gsize[ng] = s->size[b];
            ng++;
        }
    }
    gconf = calloc((size_t)ng * (size_t)ng, 1);
    if (!gconf) {
        st = OOM();
        goto done;
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (grp[a] != grp[b] && conflict(s, a, b))
                gconf[(size_t)grp[a] * (size_t)ng + (size_t)grp[b]] = gconf[(size_t)grp[b] * (size_t)ng + (size_t)grp[a]] = 1;
    for (int g = 0; g < ng; g++) {
        gorder[g] = g;
        goff[g] = -1;
    }
    g_gsize = gsize;
    g_groot = root;
    qsort(gorder, (size_t)ng, sizeof *gorder, cmp_group_size);
    int64_t arena = 0;
    for (int k = 0; k < ng; k++) {
        int g = gorder[k], n_iv = 0;
        for (int j = 0; j < k; j++) {
            int h = gorder[j];
            if (gconf[(size_t)g * (size_t)ng + (size_t)h]) s->iv[n_iv++] = (interval){goff[h], goff[h] + gsize[h]};
        }
        goff[g] = s->reuse ? best_fit(s->iv, n_iv, arena, gsize[g]) : arena;
        if (goff[g] + gsize[g] > arena) arena = goff[g] + gsize[g];
    }
    for (int b = 0; b < n; b++) off[b] = goff[grp[b]];
    *arena_out = arena;
done:
    free(grp);
    free(tail);
    free(root);
    free(gorder);
    free(gsize);
    free(goff);
    free(gconf);
    return st;
}

pe_status pe_mp_solve(const pe_mp_reach *r, pe_mp_tensor *t, int n, bool reuse, bool inplace, pe_mp_stats *st) {
    memset(st, 0, sizeof *st);
    if (n == 0) return PE_OK;
    for (int i = 0; i < n; i++)
        if (t[i].bytes <= 0 || t[i].first_writer < 0 || t[i].first_writer >= r->n || t[i].n_access < 1)
            return pe_error(PE_ERR_INVALID, "memory plan: tensor %d has %lld bytes, first writer %d and %d accesses",
                            i, (long long)t[i].bytes, t[i].first_writer, t[i].n_access);
    solver s = {r, t, n, reuse, inplace, NULL, NULL, NULL, NULL};
    s.size = malloc(sizeof *s.size * (size_t)n);
    s.conflict = calloc((size_t)n * (size_t)n, 1);
    s.order = malloc(sizeof *s.order * (size_t)n);
    s.iv = malloc(sizeof *s.iv * (size_t)n);
    int64_t *off1 = malloc(sizeof *off1 * (size_t)n), *off2 = malloc(sizeof *off2 * (size_t)n);
    int *in1 = malloc(sizeof *in1 * (size_t)n), *in2 = malloc(sizeof *in2 * (size_t)n);
    pe_status rc = PE_OK;
    if (!s.size || !s.conflict || !s.order || !s.iv || !off1 || !off2 || !in1 || !in2) {
        rc = OOM();
        goto done;
    }
    for (int i = 0; i < n; i++) {
        s.size[i] = align_up(t[i].bytes);
        s.order[i] = i;
        st->no_reuse_bytes += s.size[i];
    }
    /* two tensors may be live at the same time unless one's accesses all
     * happen-before the other's first write */
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (!before(r, t, a, b, false) && !before(r, t, b, a, false))
                s.conflict[(size_t)a * (size_t)n + (size_t)b] = s.conflict[(size_t)b * (size_t)n + (size_t)a] = 1;
    g_sort = &s;
    qsort(s.order, (size_t)n, sizeof *s.order, cmp_first_writer);
    int64_t a1 = place_in_order(&s, off1, in1), a2 = 0;
    if ((rc = place_by_size(&s, off2, in2, &a2)) != PE_OK) goto done;
    bool by_size = a2 < a1;
    st->arena_bytes = by_size ? a2 : a1;
    st->by_size = by_size;
    for (int i = 0; i < n; i++) {
        t[i].offset = by_size ? off2[i] : off1[i];
        t[i].inplaced = (by_size ? in2[i] : in1[i]) >= 0;
        st->n_inplace += t[i].inplaced;
    }
    /* shared: a tensor (not in place) over bytes an earlier-born one used */
    for (int ob = 0; ob < n; ob++) {
        int b = s.order[ob];
        if (t[b].inplaced) continue;
        for (int oa = 0; oa < ob; oa++) {
            int a = s.order[oa];
            if (t[a].offset < t[b].offset + s.size[b] && t[b].offset < t[a].offset + s.size[a]) {
                st->n_shared++;
                break;
            }
        }
    }
done:
    free(s.size);
    free(s.conflict);
    free(s.order);
    free(s.iv);
    free(off1);
    free(off2);
    free(in1);
    free(in2);
    return rc;
}

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
        } else if (hd->kind == PE_HANDLE_JOIN) {
            /* no data */
        } else {
            for (int p = 0; p < g->n_places && !rc; p++) {
                bool rd = hd->kind != PE_HANDLE_BCAST || p == hd->root;
                bool wr = hd->kind == PE_HANDLE_ALLREDUCE || (hd->kind == PE_HANDLE_REDUCE && p == hd->root) ||
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

void pe_mem_plan_free(pe_mem_plan *p) {
    if (!p) return;
    for (int i = 0; p->place && i < p->n_places; i++) free(p->place[i].vars);
    free(p->place);
    free(p);
}

/* Meta of every var op h reads that the scratch scope does not hold yet:
 * feeds and persistables come from meta_fn. */
static pe_status seed_inputs(const pe_mp_graph *mg, int p, const pe_op *op, pe_scope *scratch, pe_mp_meta_fn fn,
                             void *user) {
    for (int s = 0; s < op->n_inputs; s++)
        for (int k = 0; k < op->inputs[s].n_args; k++) {
            const char *name = op->inputs[s].args[k];
            if (!strcmp(name, PE_EMPTY_VAR) || pe_scope_find_local_var(scratch, name)) continue;
            pe_tensor *t = pe_scope_var(scratch, name);
            if (!t) return OOM();
            const pe_var *decl = pe_program_find_var(mg->g->progs[p], 0, name);
            PE_CHECK(fn(user, p, name, decl, t));
        }
    return PE_OK;
}

static pe_status infer_place(const pe_mp_graph *mg, int p, pe_place place, pe_scope *scratch, pe_mp_meta_fn fn,
                             void *user) {
    const mp_place *pl = &mg->pl[p];
    for (int k = 0; k < pl->n_ops; k++) {
        const pe_op *op = handle_op(mg->g, pl->ops[k]);
        PE_CHECK(seed_inputs(mg, p, op, scratch, fn, user));
        pe_op_ctx ctx;
        pe_status st = pe_op_ctx_init(&ctx, op, scratch, place);
        if (st != PE_OK) return pe_error_wrap(st, "memory plan, shape inference on place %d", p);
        st = ctx.info->infer(&ctx);
        pe_op_ctx_release(&ctx);
        if (st != PE_OK)
            return pe_error_wrap(st, "memory plan, shape inference of op %d (%s) on place %d", mg->g->h[pl->ops[k]].op_idx,
                                 op->type, p);
    }
    return PE_OK;
}

static pe_status plan_place(const pe_mp_graph *mg, int p, pe_scope *scratch, const pe_strmap *prot, bool reuse,
                            bool inplace, pe_mp_place_plan *out) {
    const mp_place *pl = &mg->pl[p];
    int *idx = malloc(sizeof *idx * (size_t)(pl->n_vars ? pl->n_vars : 1));     /* tensor -> var */
    int *tix = malloc(sizeof *tix * (size_t)(pl->n_vars ? pl->n_vars : 1));     /* var -> tensor or -1 */
    pe_mp_tensor *t = calloc((size_t)(pl->n_vars ? pl->n_vars : 1), sizeof *t);
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
    pe_status st = pe_mp_solve(mg->reach, t, n, reuse, inplace, &out->stats);
    if (st == PE_OK) {
        out->vars = malloc(sizeof *out->vars * (size_t)(n ? n : 1));
        if (!out->vars) st = OOM();
    }
    if (st == PE_OK) {
        for (int k = 0; k < n; k++)
            out->vars[k] = (pe_mp_var_plan){pl->vars[idx[k]].name, t[k].offset, align_up(t[k].bytes), t[k].inplaced};
        out->n_vars = n;
    }
    free(idx);
    free(tix);
    free(t);
    return st;
}

pe_status pe_mp_plan_build(const pe_mp_graph *mg, const pe_place *places, pe_mp_meta_fn meta_fn, void *user,
                           const char *const *protect, int n_protect, bool reuse, bool inplace, pe_mem_plan **out) {
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
        if (!scratch) {
            st = OOM();
            break;
        }
        st = infer_place(mg, p, places ? places[p] : pe_place_cpu(p), scratch, meta_fn, user);
        if (st == PE_OK) st = plan_place(mg, p, scratch, &prot, reuse, inplace, &plan->place[p]);
        pe_scope_free(scratch);
    }
    pe_strmap_free(&prot);
    if (st != PE_OK) {
        pe_mem_plan_free(plan);
        return st;
    }
    *out = plan;
    return PE_OK;
}
