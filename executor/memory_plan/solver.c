/* executor/memory_plan/solver.c — the memory plan's solver: reachability
 * over a DAG and the placement of tensors in one arena (contract in
 * executor/memory_plan/plan.h; the why of it in executor/memory_plan/plan.c).
 *
 * What: pe_mp_reach_* (a bit-set closure: does a path lead from node u to
 * node v, and one fixed topological order) and pe_mp_solve (offsets for
 * tensors so that two of them share bytes only when every access of one
 * happens-before the first write of the other, or the second is written in
 * place of the first). It knows nothing of programs or ops, so it is tested
 * on random DAGs (tests/unit/test_memory_plan.c).
 */
#include "executor/memory_plan/plan.h"
#include "runtime/internal.h"

#include <stdlib.h>
#include <string.h>

#define OOM() pe_error(PE_ERR_NOMEM, "memory plan: out of memory")


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
        s.size[i] = pe_mp_align_up(t[i].bytes);
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
