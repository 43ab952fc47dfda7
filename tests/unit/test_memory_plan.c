/* tests/unit/test_memory_plan.c — the static memory plan (issue 5, point 3).
 *
 * - The solver on seeded random DAGs: two tensors that share bytes are
 *   ordered by the DAG (checked against a closure computed here by
 *   Floyd-Warshall), and in simulated concurrent executions (3 workers,
 *   random durations) no two tensors that are live at the same time
 *   overlap; the arena never exceeds the sum of the sizes.
 * - Hand-made cases with known answers: a chain (reuse -> 2 slots, in
 *   place -> 1), a diamond (concurrent branches never share), best fit over
 *   coalesced gaps.
 * - The graph front end on a real program: in-place where the input dies
 *   (relu, elementwise_add), not where it lives on or is fed; fetched and
 *   persistable vars are never placed.
 * - The executor: MLP and CNN training (float64) with memory_optimize /
 *   enable_inplace on vs off, alone and with every fusion switch on, on 1
 *   and 3 places: parameters allclose 1e-5 to the run with all switches off;
 *   re-planning when the batch size changes (and the cached plan when it
 *   comes back); a fetch list that changes between runs; no system
 *   allocation per step in the steady state (pe_alloc_get_stats n_allocs);
 *   a lower measured peak with the plan.
 * - Sequential execution: the graph's topological order (the handle order
 *   unless an edge goes back; a cycle refused), and training with
 *   enable_sequential_execution gives the bits of the scheduler's run for
 *   every memory and fusion switch (memory_optimize's early updates go back).
 */
#include "tests/unit/models.h"

#include "executor/memory_plan/arena.h"
#include "graph/ssa_graph.h"
#include "executor/memory_plan/plan.h"
#include "ops/cpu/dnnl_util.h"
#include "passes/multi_device.h"

#include <stdlib.h>
#include <string.h>

/* ---- random DAGs ---------------------------------------------------------- */

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int rnd_int(uint64_t *s, int n) { return (int)(rnd(s) % (uint64_t)n); }

typedef struct {
    int n;
    int **succ;
    int *n_succ;
    bool *R;            /* R[i * n + j]: path i -> j of >= 1 edge (Floyd-Warshall) */
} dag;

static dag make_dag(int n, int p_edge_pct, uint64_t *s) {
    dag d = {n, calloc((size_t)n, sizeof(int *)), calloc((size_t)n, sizeof(int)), calloc((size_t)n * n, 1)};
    /* a random permutation decides the node ids, so ids are not a topological order */
    int *perm = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = rnd_int(s, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < n; i++) d.succ[i] = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (rnd_int(s, 100) < p_edge_pct || (j == i + 1 && rnd_int(s, 100) < 30)) {
                int u = perm[i], v = perm[j];
                d.succ[u][d.n_succ[u]++] = v;
                d.R[u * n + v] = true;
            }
    for (int k = 0; k < n; k++)
        for (int i = 0; i < n; i++)
            if (d.R[i * n + k])
                for (int j = 0; j < n; j++)
                    if (d.R[k * n + j]) d.R[i * n + j] = true;
    free(perm);
    return d;
}

static void dag_free(dag *d) {
    for (int i = 0; i < d->n; i++) free(d->succ[i]);
    free(d->succ);
    free(d->n_succ);
    free(d->R);
}

typedef struct {
    pe_mp_tensor *t;
    int **acc;
    int n;
} tensors;

/* Tensors whose accesses follow their first writer (as in an SSA graph);
 * some are written by an op that also reads another tensor, declared
 * in place of it. */
static tensors make_tensors(const dag *d, int n, uint64_t *s) {
    tensors ts = {calloc((size_t)n, sizeof(pe_mp_tensor)), calloc((size_t)n, sizeof(int *)), n};
    for (int i = 0; i < n; i++) {
        int *acc = malloc(sizeof(int) * (size_t)d->n);
        int na = 0, fw = rnd_int(s, d->n), src = -1;
        if (i > 0 && rnd_int(s, 100) < 40) {
            /* written by a later accessor of an earlier tensor, maybe in place of it */
            src = rnd_int(s, i);
            const pe_mp_tensor *a = &ts.t[src];
            if (a->n_access > 1) fw = a->access[1 + rnd_int(s, a->n_access - 1)];
            else src = -1;
        }
        acc[na++] = fw;
        for (int v = 0; v < d->n; v++)
            if (d->R[fw * d->n + v] && rnd_int(s, 100) < 12) acc[na++] = v;
        ts.acc[i] = acc;
        ts.t[i] = (pe_mp_tensor){.bytes = 1 + rnd_int(s, 20000), .first_writer = fw, .access = acc, .n_access = na,
                                 .inplace_of = src >= 0 && rnd_int(s, 100) < 70 ? src : -1};
    }
    return ts;
}

static void tensors_free(tensors *ts) {
    for (int i = 0; i < ts->n; i++) free(ts->acc[i]);
    free(ts->acc);
    free(ts->t);
}

static int64_t al(int64_t b) { return (b + 63) / 64 * 64; }

static bool overlap(const pe_mp_tensor *a, const pe_mp_tensor *b) {
    return a->offset < b->offset + al(b->bytes) && b->offset < a->offset + al(a->bytes);
}

/* Every access of a before b's first write (or b written in place of a there). */
static bool ordered(const dag *d, const tensors *ts, int ia, int ib) {
    const pe_mp_tensor *a = &ts->t[ia], *b = &ts->t[ib];
    for (int k = 0; k < a->n_access; k++) {
        int x = a->access[k];
        if (x == b->first_writer) {
            if (!(b->inplaced && b->inplace_of == ia)) return false;
        } else if (!d->R[x * d->n + b->first_writer]) {
            return false;
        }
    }
    return true;
}

/* One concurrent execution: `workers` run ready nodes (picked at random)
 * for random durations. start/end per node. */
static void simulate(const dag *d, int workers, uint64_t *s, int64_t *start, int64_t *end) {
    int n = d->n;
    int *deps = calloc((size_t)n, sizeof(int)), *ready = malloc(sizeof(int) * (size_t)n);
    int *running = malloc(sizeof(int) * (size_t)n);
    int n_ready = 0, n_running = 0, done = 0;
    for (int u = 0; u < n; u++)
        for (int k = 0; k < d->n_succ[u]; k++) deps[d->succ[u][k]]++;
    for (int u = 0; u < n; u++)
        if (!deps[u]) ready[n_ready++] = u;
    int64_t now = 0;
    while (done < n) {
        while (n_running < workers && n_ready) {
            int k = rnd_int(s, n_ready), u = ready[k];
            ready[k] = ready[--n_ready];
            start[u] = now;
            end[u] = now + 1 + rnd_int(s, 10);
            running[n_running++] = u;
        }
        assert_true(n_running > 0);
        int best = 0;
        for (int k = 1; k < n_running; k++)
            if (end[running[k]] < end[running[best]]) best = k;
        int u = running[best];
        running[best] = running[--n_running];
        now = end[u];
        done++;
        for (int k = 0; k < d->n_succ[u]; k++)
            if (--deps[d->succ[u][k]] == 0) ready[n_ready++] = d->succ[u][k];
    }
    free(deps);
    free(ready);
    free(running);
}

/* Live interval of tensor i: from its first writer's start to the end of
 * its last access; `skip` (a node) left out of the end. */
static void live(const tensors *ts, int i, const int64_t *start, const int64_t *end, int skip, int64_t *lo,
                 int64_t *hi) {
    const pe_mp_tensor *t = &ts->t[i];
    *lo = start[t->first_writer];
    *hi = *lo;
    for (int k = 0; k < t->n_access; k++)
        if (t->access[k] != skip && end[t->access[k]] > *hi) *hi = end[t->access[k]];
}

static void check_solution(const dag *d, const tensors *ts, const pe_mp_stats *st, uint64_t *s) {
    int64_t sum = 0;
    for (int i = 0; i < ts->n; i++) {
        const pe_mp_tensor *t = &ts->t[i];
        sum += al(t->bytes);
        assert_true(t->offset >= 0 && t->offset % 64 == 0);
        assert_true(t->offset + al(t->bytes) <= st->arena_bytes);
        if (t->inplaced) assert_int_equal(t->offset, ts->t[t->inplace_of].offset);
    }
    assert_int_equal(st->no_reuse_bytes, sum);
    assert_true(st->arena_bytes <= sum); /* the peak never exceeds the sum of the sizes */
    /* sharing only between ordered tensors (closure computed independently) */
    for (int i = 0; i < ts->n; i++)
        for (int j = i + 1; j < ts->n; j++)
            if (overlap(&ts->t[i], &ts->t[j]) && !ordered(d, ts, i, j) && !ordered(d, ts, j, i))
                fail_msg("tensors %d and %d share bytes [%lld, +%lld) / [%lld, +%lld) but the DAG does not order them",
                         i, j, (long long)ts->t[i].offset, (long long)ts->t[i].bytes, (long long)ts->t[j].offset,
                         (long long)ts->t[j].bytes);
    /* executions: tensors live at the same time never overlap */
    int64_t *start = malloc(sizeof(int64_t) * (size_t)d->n), *end = malloc(sizeof(int64_t) * (size_t)d->n);
    for (int run = 0; run < 8; run++) {
        simulate(d, 3, s, start, end);
        for (int i = 0; i < ts->n; i++)
            for (int j = 0; j < ts->n; j++) {
                if (i == j || !overlap(&ts->t[i], &ts->t[j])) continue;
                const pe_mp_tensor *b = &ts->t[j];
                int64_t alo, ahi, blo, bhi;
                /* j written in place of i: i may be read by that op only */
                int skip = b->inplaced && b->inplace_of == i ? b->first_writer : -1;
                live(ts, i, start, end, skip, &alo, &ahi);
                live(ts, j, start, end, -1, &blo, &bhi);
                if (skip >= 0) {
                    if (ahi > blo) fail_msg("run %d: tensor %d (in place of %d) starts at %lld, %d lives until %lld", run, j, i,
                                            (long long)blo, i, (long long)ahi);
                } else if (i < j && ahi > blo && bhi > alo && !(ts->t[i].inplaced && ts->t[i].inplace_of == j)) {
                    fail_msg("run %d: tensors %d [%lld, %lld) and %d [%lld, %lld) are live together and share bytes",
                             run, i, (long long)alo, (long long)ahi, j, (long long)blo, (long long)bhi);
                }
            }
    }
    free(start);
    free(end);
}

static void test_random_dags(void **state) {
    (void)state;
    uint64_t s = 0x5EED1234ABCDull;
    int64_t total_arena = 0, total_sum = 0;
    int n_inplace = 0, n_shared = 0, n_by_size = 0, n_modes = 0;
    for (int trial = 0; trial < 60; trial++) {
        int n = 8 + rnd_int(&s, 60);
        dag d = make_dag(n, 2 + rnd_int(&s, 15), &s);
        pe_mp_reach *r;
        assert_int_equal(pe_mp_reach_new(n, (const int *const *)d.succ, d.n_succ, &r), PE_OK);
        /* the library's closure agrees with Floyd-Warshall */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) assert_int_equal(pe_mp_reaches(r, i, j), d.R[i * n + j]);
        tensors ts = make_tensors(&d, 5 + rnd_int(&s, 80), &s);
        int64_t plain = 0;
        for (int mode = 0; mode < 4; mode++) {
            bool reuse = mode & 1, inplace = mode & 2;
            pe_mp_stats st;
            assert_int_equal(pe_mp_solve(r, ts.t, ts.n, reuse, inplace, &st), PE_OK);
            check_solution(&d, &ts, &st, &s);
            if (mode == 0) {
                plain = st.arena_bytes;
                assert_int_equal(st.arena_bytes, st.no_reuse_bytes); /* nothing shared */
                for (int i = 0; i < ts.n; i++) assert_false(ts.t[i].inplaced);
            } else {
                assert_true(st.arena_bytes <= plain);
            }
            if (!inplace)
                for (int i = 0; i < ts.n; i++) assert_false(ts.t[i].inplaced);
            if (reuse) {
                n_by_size += st.by_size;
                n_modes++;
            }
            if (mode == 3) {
                total_arena += st.arena_bytes;
                total_sum += st.no_reuse_bytes;
                n_inplace += st.n_inplace;
                n_shared += st.n_shared;
            }
        }
        tensors_free(&ts);
        pe_mp_reach_free(r);
        dag_free(&d);
    }
    /* the tests above must have exercised both kinds of reuse */
    print_message("random DAGs: arena %lld of %lld bytes, %d in place, %d shared; greedy by size won %d of %d\n",
                  (long long)total_arena, (long long)total_sum, n_inplace, n_shared, n_by_size, n_modes);
    /* both placement orders were chosen somewhere */
    assert_true(n_by_size > 0 && n_by_size < n_modes);
    assert_true(n_inplace > 20);
    assert_true(n_shared > 20);
    assert_true(total_arena < total_sum);
}

static void test_cycle_rejected(void **state) {
    (void)state;
    int s0[] = {1}, s1[] = {2}, s2[] = {0};
    const int *succ[] = {s0, s1, s2};
    int n_succ[] = {1, 1, 1};
    pe_mp_reach *r;
    assert_int_equal(pe_mp_reach_new(3, succ, n_succ, &r), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "cycle"));
}

/* ---- hand-made cases with known answers ----------------------------------- */

static void solve_small(int n_nodes, const int *const *succ, const int *n_succ, pe_mp_tensor *t, int n, bool reuse,
                        bool inplace, pe_mp_stats *st) {
    pe_mp_reach *r;
    assert_int_equal(pe_mp_reach_new(n_nodes, succ, n_succ, &r), PE_OK);
    assert_int_equal(pe_mp_solve(r, t, n, reuse, inplace, st), PE_OK);
    pe_mp_reach_free(r);
}

/* chain 0 -> 1 -> ... -> 5; tensor i written by node i, read by node i+1 */
static void test_chain(void **state) {
    (void)state;
    int s[6][1] = {{1}, {2}, {3}, {4}, {5}, {0}};
    const int *succ[6] = {s[0], s[1], s[2], s[3], s[4], s[5]};
    int n_succ[6] = {1, 1, 1, 1, 1, 0};
    int acc[5][2];
    pe_mp_tensor t[5];
    for (int i = 0; i < 5; i++) {
        acc[i][0] = i;
        acc[i][1] = i + 1;
        t[i] = (pe_mp_tensor){.bytes = 1000, .first_writer = i, .access = acc[i], .n_access = 2,
                              .inplace_of = i ? i - 1 : -1};
    }
    pe_mp_stats st;
    solve_small(6, succ, n_succ, t, 5, false, false, &st);
    assert_int_equal(st.arena_bytes, 5 * 1024);
    solve_small(6, succ, n_succ, t, 5, true, false, &st);
    assert_int_equal(st.arena_bytes, 2 * 1024); /* i and i+1 meet at node i+1 */
    assert_int_equal(st.n_inplace, 0);
    solve_small(6, succ, n_succ, t, 5, false, true, &st);
    assert_int_equal(st.arena_bytes, 1024); /* every op writes over its dying input */
    assert_int_equal(st.n_inplace, 4);
    solve_small(6, succ, n_succ, t, 5, true, true, &st);
    assert_int_equal(st.arena_bytes, 1024);
    /* a larger output cannot go in place of a smaller input */
    t[3].bytes = 3000;
    solve_small(6, succ, n_succ, t, 5, false, true, &st);
    assert_false(t[3].inplaced);
    assert_true(t[4].inplaced); /* 1000 bytes fit into 3000 */
}

/* 0 -> {1, 2} -> 3: nodes 1 and 2 may run at the same time */
static void test_diamond(void **state) {
    (void)state;
    int s0[] = {1, 2}, s1[] = {3}, s2[] = {3};
    const int *succ[4] = {s0, s1, s2, NULL};
    int n_succ[4] = {2, 1, 1, 0};
    int a1[] = {1}, a2[] = {2};
    pe_mp_tensor t[2] = {{.bytes = 4096, .first_writer = 1, .access = a1, .n_access = 1, .inplace_of = -1},
                         {.bytes = 4096, .first_writer = 2, .access = a2, .n_access = 1, .inplace_of = -1}};
    pe_mp_stats st;
    solve_small(4, succ, n_succ, t, 2, true, true, &st);
    assert_int_equal(st.arena_bytes, 8192);
    assert_false(overlap(&t[0], &t[1]));
    /* ordered 1 -> 2: the second takes the first's bytes */
    int s1b[] = {2, 3};
    succ[1] = s1b;
    n_succ[1] = 2;
    solve_small(4, succ, n_succ, t, 2, true, true, &st);
    assert_int_equal(st.arena_bytes, 4096);
    assert_int_equal(t[0].offset, t[1].offset);
}

/* node 0 writes A B C E; node 1 reads them (A, B, E die); C lives to node 3;
 * node 2 writes D then F. Free gaps at node 2: [0, 3072) = A + B
 * coalesced, [7168, 8192) = E. D (3072) fits only the coalesced gap; F
 * (1024) fits E's gap exactly (best fit, not the first gap). */
static void test_best_fit_coalescing(void **state) {
    (void)state;
    int s0[] = {1}, s1[] = {2}, s2[] = {3};
    const int *succ[4] = {s0, s1, s2, NULL};
    int n_succ[4] = {1, 1, 1, 0};
    int a01[] = {0, 1}, a03[] = {0, 3}, a23[] = {2, 3};
    pe_mp_tensor t[6] = {
        {.bytes = 2048, .first_writer = 0, .access = a01, .n_access = 2, .inplace_of = -1}, /* A */
        {.bytes = 1024, .first_writer = 0, .access = a01, .n_access = 2, .inplace_of = -1}, /* B */
        {.bytes = 4096, .first_writer = 0, .access = a03, .n_access = 2, .inplace_of = -1}, /* C */
        {.bytes = 1024, .first_writer = 0, .access = a01, .n_access = 2, .inplace_of = -1}, /* E */
        {.bytes = 3072, .first_writer = 2, .access = a23, .n_access = 2, .inplace_of = -1}, /* D */
        {.bytes = 1000, .first_writer = 2, .access = a23, .n_access = 2, .inplace_of = -1}, /* F */
    };
    pe_mp_stats st;
    solve_small(4, succ, n_succ, t, 6, true, false, &st);
    assert_int_equal(t[0].offset, 0);
    assert_int_equal(t[1].offset, 2048);
    assert_int_equal(t[2].offset, 3072);
    assert_int_equal(t[3].offset, 7168);
    assert_int_equal(t[4].offset, 0);
    assert_int_equal(t[5].offset, 7168);
    assert_int_equal(st.arena_bytes, 8192);
    assert_int_equal(st.no_reuse_bytes, 2048 + 1024 + 4096 + 1024 + 3072 + 1024);
}

/* ---- the graph front end on a real program ------------------------------- */

/* x(fed) -scale-> a -relu-> b -relu-> c; d = c + b; e = d + w (w persistable); loss = mean(e) */
static pe_program *inplace_program(void) {
    pe_program *p = pe_program_new();
    int64_t d2[2] = {-1, 16};
    const char *names[] = {"x", "a", "b", "c", "d", "e"};
    for (int i = 0; i < 6; i++) tm_var(p, names[i], PE_DTYPE_FP64, 2, d2);
    tm_var(p, "w", PE_DTYPE_FP64, 1, (int64_t[]){16});
    pe_program_find_var(p, 0, "w")->persistable = true;
    tm_var(p, "loss", PE_DTYPE_FP64, 1, (int64_t[]){1});
    pe_op *op = tm_op2(p, "scale", "x", NULL, "a");
    pe_op_set_float(op, "scale", 2.0);
    pe_op_set_float(op, "bias", -0.5);
    tm_op2(p, "relu", "a", NULL, "b");
    tm_op2(p, "relu", "b", NULL, "c");
    tm_op2(p, "elementwise_add", "c", "b", "d");
    op = tm_op2(p, "elementwise_add", "d", "w", "e");
    pe_op_set_int(op, "axis", 1);
    tm_op2(p, "mean", "e", NULL, "loss");
    return p;
}

typedef struct {
    int64_t rows;
} rows_user;

static pe_status rows_meta(void *user, int place, const char *name, const pe_var *decl, pe_tensor *meta) {
    (void)place;
    (void)name;
    int64_t dims[PE_MAX_DIMS];
    for (int i = 0; i < decl->ndim; i++) dims[i] = decl->dims[i] < 0 ? ((rows_user *)user)->rows : decl->dims[i];
    return pe_tensor_set_meta(meta, decl->dtype, decl->ndim, dims);
}

static const pe_mp_var_plan *find_planned(const pe_mp_place_plan *pp, const char *name) {
    for (int i = 0; i < pp->n_vars; i++)
        if (!strcmp(pp->vars[i].name, name)) return &pp->vars[i];
    return NULL;
}

static pe_mem_plan *plan_program(const pe_program *p, int places, int64_t rows, const char *const *protect,
                                 int n_protect, bool reuse, bool inplace, pe_ssa_graph **g_out, pe_mp_graph **mg_out) {
    pe_build_strategy bs;
    memset(&bs, 0, sizeof bs);
    assert_int_equal(pe_multi_device_build(p, places, NULL, &bs, g_out), PE_OK);
    assert_int_equal(pe_mp_graph_new(*g_out, mg_out), PE_OK);
    rows_user u = {rows};
    pe_mem_plan *plan;
    if (pe_mp_plan_build(*mg_out, NULL, rows_meta, &u, protect, n_protect, reuse, inplace, 1, &plan) != PE_OK)
        fail_msg("%s", pe_last_error());
    return plan;
}

static void test_inplace_pairs(void **state) {
    (void)state;
    pe_program *p = inplace_program();
    const char *prot[] = {"loss"};
    pe_ssa_graph *g;
    pe_mp_graph *mg;
    pe_mem_plan *plan = plan_program(p, 1, 8, prot, 1, false, true, &g, &mg);
    const pe_mp_place_plan *pp = &plan->place[0];
    assert_int_equal(pp->n_vars, 5); /* a b c d e: not x (fed), w (persistable), loss (fetched) */
    assert_null(find_planned(pp, "x"));
    assert_null(find_planned(pp, "w"));
    assert_null(find_planned(pp, "loss"));
    const pe_mp_var_plan *a = find_planned(pp, "a"), *b = find_planned(pp, "b"), *c = find_planned(pp, "c"),
                         *d = find_planned(pp, "d"), *e = find_planned(pp, "e");
    assert_false(a->inplaced);               /* x is fed: never written over */
    assert_true(b->inplaced);                /* a dies at the relu */
    assert_int_equal(b->offset, a->offset);
    assert_false(c->inplaced);               /* b is read again by the add */
    assert_true(c->offset != b->offset);
    assert_true(d->inplaced);                /* c (X) dies at the add */
    assert_int_equal(d->offset, c->offset);
    assert_true(e->inplaced);
    assert_int_equal(e->bytes, 8 * 16 * 8);
    assert_int_equal(pp->stats.n_inplace, 3);
    assert_int_equal(pp->stats.arena_bytes, 2 * 8 * 16 * 8);
    assert_int_equal(pp->stats.no_reuse_bytes, 5 * 8 * 16 * 8);
    pe_mem_plan_free(plan);
    /* without enable_inplace nothing is written in place */
    plan = pe_mp_plan_build(mg, NULL, rows_meta, &(rows_user){8}, prot, 1, true, false, 1, &plan) == PE_OK ? plan : NULL;
    assert_non_null(plan);
    for (int i = 0; i < plan->place[0].n_vars; i++) assert_false(plan->place[0].vars[i].inplaced);
    pe_mem_plan_free(plan);
    /* a fetched intermediate is never placed, and nothing goes in place of it */
    const char *prot2[] = {"loss", "b"};
    assert_int_equal(pe_mp_plan_build(mg, NULL, rows_meta, &(rows_user){8}, prot2, 2, true, true, 1, &plan), PE_OK);
    assert_null(find_planned(&plan->place[0], "b"));
    assert_false(find_planned(&plan->place[0], "c")->inplaced);
    pe_mem_plan_free(plan);
    pe_mp_graph_free(mg);
    pe_ssa_graph_free(g);
    pe_program_free(p);
}

/* ---- training models (float64) -------------------------------------------- */

static pe_dtype g_dt = PE_DTYPE_FP64;

/* The models of tests/unit/models.h (input "x", biases start at 0.01, the
 * bias adds name axis 1), trained with momentum (lr 0.05, mu 0.9). */
static tm_model make_mlp(void) {
    tm_model m = tm_model_new(g_dt, 0.01, true);
    tm_mlp(&m, 128, "relu", 64, "relu");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    return m;
}

static tm_model make_cnn(void) {
    tm_model m = tm_model_new(g_dt, 0.01, true);
    tm_cnn(&m, "x", 32);
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    return m;
}

typedef struct {
    pe_scope *scope;
    pe_executor *ex;
    pe_parallel_executor *pe;
} trainer;

static bool g_fusion; /* the fusion switches of BuildStrategy, all on or all off */
static bool g_reduce; /* reduce_strategy = reduce (optimizers on owner places, broadcasts) */
static bool g_seq;    /* enable_sequential_execution */

static trainer trainer_new(const tm_model *m, int places, bool inplace, bool memopt) {
    trainer t = {pe_scope_new(NULL), pe_executor_new(pe_place_cpu(0)), NULL};
    assert_int_equal(pe_executor_run(t.ex, m->startup, 0, t.scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[4] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2), pe_place_cpu(3)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.build_strategy.enable_inplace = inplace;
    o.build_strategy.memory_optimize = memopt;
    o.build_strategy.fuse_gemm_epilogue = o.build_strategy.fuse_elewise_add_act_ops = g_fusion;
    o.build_strategy.fuse_all_optimizer_ops = o.build_strategy.fuse_all_reduce_ops = g_fusion;
    o.build_strategy.reduce_strategy = g_reduce ? PE_REDUCE_REDUCE : PE_REDUCE_ALL_REDUCE;
    o.build_strategy.enable_sequential_execution = g_seq;
    if (pe_parallel_executor_new(pl, places, m->main, t.scope, &o, &t.pe) != PE_OK) fail_msg("%s", pe_last_error());
    return t;
}

static void trainer_free(trainer *t) {
    pe_parallel_executor_free(t->pe);
    pe_executor_free(t->ex);
    pe_scope_free(t->scope);
}

static void step(trainer *t, pe_tensor *x, pe_tensor *y, const char *const *fetch, int n_fetch, pe_tensor **out) {
    pe_feed feed[2] = {{"x", x}, {"label", y}};
    if (pe_run(t->pe, feed, 2, fetch, n_fetch, true, out) != PE_OK) fail_msg("%s", pe_last_error());
}

static void assert_close(const pe_tensor *a, const pe_tensor *b, double rtol, double atol, const char *what) {
    assert_int_equal(pe_tensor_numel(a), pe_tensor_numel(b));
    for (int64_t e = 0; e < pe_tensor_numel(a); e++) {
        double x = tu_get(a, e), y = tu_get(b, e);
        if (!(fabs(x - y) <= rtol * fabs(y) + atol)) fail_msg("%s[%lld]: %.12g vs %.12g", what, (long long)e, x, y);
    }
}

/* Trains `steps` steps; copies the parameters (place 0) into out. */
static void train(const tm_model *m, int places, bool inplace, bool memopt, int rows, int steps, pe_tensor **out) {
    trainer t = trainer_new(m, places, inplace, memopt);
    pe_tensor *x = tm_batch_x(m, rows), *y = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){rows, 1}, NULL);
    pe_tensor *loss = pe_tensor_new();
    const char *fetch[] = {"loss"};
    for (int s = 0; s < steps; s++) {
        tm_fill_batch(s, x, y);
        step(&t, x, y, fetch, 1, &loss);
    }
    tm_fetch_params(m, t.pe, out);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(loss);
    trainer_free(&t);
}

static void check_training(bool cnn) {
    tm_model m = cnn ? make_cnn() : make_mlp();
    int steps = cnn ? 6 : 10;
    for (int places = 1; places <= 3; places += 2) {
        pe_tensor *ref[16], *got[16];
        g_fusion = false;
        train(&m, places, false, false, 12, steps, ref);
        /* memory switches alone, with every fusion switch on, and (3 places)
         * both memory switches under the reduce strategy */
        for (int mode = 1; mode < (places > 1 ? 9 : 8); mode++) {
            bool inplace = mode & 1 || mode == 8, memopt = mode & 2 || mode == 8;
            g_fusion = mode & 4;
            g_reduce = mode == 8;
            train(&m, places, inplace, memopt, 12, steps, got);
            for (int i = 0; i < m.n_params; i++) {
                char what[192];
                snprintf(what, sizeof what, "%s places=%d enable_inplace=%d memory_optimize=%d fusion=%d reduce=%d %s",
                         cnn ? "cnn" : "mlp", places, inplace, memopt, g_fusion, g_reduce, m.params[i]);
                assert_close(got[i], ref[i], 1e-5, 1e-10, what);
                pe_tensor_free(got[i]);
            }
        }
        for (int i = 0; i < m.n_params; i++) pe_tensor_free(ref[i]);
    }
    g_fusion = g_reduce = false;
    tm_model_free(&m);
}

static void test_mlp_training_equivalence(void **state) {
    (void)state;
    check_training(false);
}

static void test_cnn_training_equivalence(void **state) {
    (void)state;
    check_training(true);
}

/* ---- sequential execution under the plan ---------------------------------
 * enable_sequential_execution runs the handles one by one on the calling
 * thread. memory_optimize on one place adds an edge from each optimizer op
 * to the next backward op (passes/multi_device.c: updates early), from a
 * higher handle to a lower one, and the plan gives the next gradient the
 * updated gradient's bytes: run in the bare handle order, the update read a
 * gradient already overwritten (the losses differed from the second step
 * on). The topological order the executor runs keeps every edge; here the
 * order itself, then training: sequential gives the bits of the scheduler's
 * run for every memory and fusion switch, on 1 and 3 places. */

static pe_ssa_graph *edge_graph(int n, const int (*edges)[2], int n_edges) {
    pe_ssa_graph *g = calloc(1, sizeof *g);
    assert_non_null(g);
    g->h = calloc((size_t)n, sizeof *g->h);
    assert_non_null(g->h);
    g->n_h = g->cap_h = n;
    for (int h = 0; h < n; h++) g->h[h] = (pe_handle){.kind = PE_HANDLE_JOIN, .place = -1, .op_idx = -1};
    for (int e = 0; e < n_edges; e++) assert_int_equal(pe_ssa_graph_add_edge(g, edges[e][0], edges[e][1]), 0);
    return g;
}

static void test_topo_order(void **state) {
    (void)state;
    int order[6];
    /* forward edges only: the handle order itself */
    static const int fwd[][2] = {{0, 2}, {1, 2}, {2, 5}, {3, 4}};
    pe_ssa_graph *g = edge_graph(6, fwd, 4);
    assert_int_equal(pe_ssa_graph_topo_order(g, order), PE_OK);
    for (int k = 0; k < 6; k++) assert_int_equal(order[k], k);
    pe_ssa_graph_free(g);
    /* 0 a gradient's producer, 1 and 2 backward ops, 3 its update with the
     * early edge 3 -> 2, 4 the end: the update runs before 2 */
    static const int back[][2] = {{0, 1}, {1, 2}, {0, 3}, {3, 2}, {2, 4}, {3, 4}};
    g = edge_graph(5, back, 6);
    assert_int_equal(pe_ssa_graph_topo_order(g, order), PE_OK);
    static const int want[] = {0, 1, 3, 2, 4};
    for (int k = 0; k < 5; k++) assert_int_equal(order[k], want[k]);
    pe_ssa_graph_free(g);
    static const int cyc[][2] = {{0, 1}, {1, 2}, {2, 1}};
    g = edge_graph(3, cyc, 3);
    assert_int_equal(pe_ssa_graph_topo_order(g, order), PE_ERR_INTERNAL);
    assert_non_null(strstr(pe_last_error(), "cycle"));
    pe_ssa_graph_free(g);
}

static void check_sequential(bool cnn) {
    tm_model m = cnn ? make_cnn() : make_mlp();
    for (int places = 1; places <= 3; places += 2)
        for (int mode = 0; mode < 8; mode++) {
            bool inplace = mode & 1, memopt = mode & 2;
            pe_tensor *ref[16], *got[16];
            g_fusion = mode & 4;
            g_seq = false;
            train(&m, places, inplace, memopt, 12, 4, ref);
            g_seq = true;
            train(&m, places, inplace, memopt, 12, 4, got);
            for (int i = 0; i < m.n_params; i++) {
                assert_int_equal(pe_tensor_numel(got[i]), pe_tensor_numel(ref[i]));
                for (int64_t e = 0; e < pe_tensor_numel(ref[i]); e++)
                    if (memcmp(&((const double *)pe_tensor_data(got[i]))[e],
                               &((const double *)pe_tensor_data(ref[i]))[e], sizeof(double)))
                        fail_msg("%s places=%d enable_inplace=%d memory_optimize=%d fusion=%d: sequential %s[%lld] "
                                 "%.17g, the scheduler's run %.17g", cnn ? "cnn" : "mlp", places, inplace, memopt,
                                 g_fusion, m.params[i], (long long)e, tu_get(got[i], e), tu_get(ref[i], e));
                pe_tensor_free(got[i]);
                pe_tensor_free(ref[i]);
            }
        }
    g_fusion = g_seq = false;
    tm_model_free(&m);
}

static void test_mlp_sequential_same_bits(void **state) {
    (void)state;
    check_sequential(false);
}

static void test_cnn_sequential_same_bits(void **state) {
    (void)state;
    check_sequential(true);
}

/* fp32 CNN: its convolutions and pooling run on oneDNN. Under the
 * memory plan every oneDNN workspace (scratchpads, blocked-layout copies) is
 * its op's slot in the place's arena: with the workspace pool emptied first,
 * training on 2 places takes no block from it, and gives the parameters of
 * training without the plan, bit for bit (the same primitives, other bytes). */
static void test_cnn_workspaces_in_plan(void **state) {
    (void)state;
    g_dt = PE_DTYPE_FP32;
    tm_model m = make_cnn();
    pe_tensor *ref[16], *got[16];
    int nb;
    size_t bytes;
    train(&m, 2, false, false, 12, 4, ref); /* no plan: the pool serves */
    pe_dnnl_workspace_stats(pe_place_cpu(0), &nb, &bytes);
    assert_true(nb > 0 && bytes > 0);       /* so the check below can fail */
    pe_dnnl_cache_clear();
    for (int p = 0; p < 2; p++) {
        pe_dnnl_workspace_stats(pe_place_cpu(p), &nb, &bytes);
        assert_int_equal(nb, 0);
    }
    train(&m, 2, true, true, 12, 4, got);
    for (int p = 0; p < 2; p++) {
        pe_dnnl_workspace_stats(pe_place_cpu(p), &nb, &bytes);
        if (nb) fail_msg("cpu:%d: %d oneDNN workspace blocks (%zu bytes) outside the memory plan", p, nb, bytes);
    }
    for (int i = 0; i < m.n_params; i++) {
        assert_close(got[i], ref[i], 0, 0, m.params[i]);
        pe_tensor_free(got[i]);
        pe_tensor_free(ref[i]);
    }
    tm_model_free(&m);
    g_dt = PE_DTYPE_FP64;
}

/* The scratch of a float32 forward product cut along K (ops/cpu/gemm.c:
 * [128, 784] x [784, 512]) is fc's / mul's planned workspace: with the plan
 * the place's pool stays empty, and the parameters are the same bits as the
 * pool's run. Both the unfused graph (mul) and the fused one (fc). */
static void test_gemm_scratch_in_plan(void **state) {
    (void)state;
    g_dt = PE_DTYPE_FP32;
    tm_model m = tm_model_new(g_dt, 0.01, true);
    tm_mlp(&m, 512, "relu", 64, "relu");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    for (int fused = 0; fused < 2; fused++) {
        g_fusion = fused;
        pe_tensor *ref[16], *got[16];
        int nb;
        size_t bytes;
        pe_dnnl_cache_clear();
        train(&m, 1, false, false, 128, 3, ref); /* no plan: the pool lends the scratch */
        pe_dnnl_workspace_stats(pe_place_cpu(0), &nb, &bytes);
        if (!(nb > 0 && bytes >= 128 * 512 * sizeof(float))) /* so the check below can fail */
            fail_msg("fused=%d: no K-split scratch in the pool (%d blocks, %zu bytes)", fused, nb, bytes);
        pe_dnnl_cache_clear();
        train(&m, 1, true, true, 128, 3, got);
        pe_dnnl_workspace_stats(pe_place_cpu(0), &nb, &bytes);
        if (nb) fail_msg("fused=%d: %d oneDNN workspace blocks (%zu bytes) outside the memory plan", fused, nb, bytes);
        for (int i = 0; i < m.n_params; i++) {
            assert_close(got[i], ref[i], 0, 0, m.params[i]);
            pe_tensor_free(got[i]);
            pe_tensor_free(ref[i]);
        }
    }
    g_fusion = false;
    tm_model_free(&m);
    g_dt = PE_DTYPE_FP64;
}

/* ---- re-planning, fetch changes, allocations, measured peak ---------------- */

/* batch 8, 8, 5, 8, 5: two plans (the third and fifth runs find the cached
 * ones); a fetch of an intermediate re-plans and gives the same values as
 * the run without the plan; every loss matches the reference run. */
static void test_replan_and_fetch_changes(void **state) {
    (void)state;
    tm_model m = make_mlp();
    trainer ref = trainer_new(&m, 3, false, false), opt = trainer_new(&m, 3, true, true);
    int rows[6] = {8, 8, 5, 8, 5, 8};
    pe_tensor *lr[2] = {pe_tensor_new(), pe_tensor_new()}, *lo[2] = {pe_tensor_new(), pe_tensor_new()};
    for (int s = 0; s < 6; s++) {
        pe_tensor *x = tm_batch_x(&m, rows[s]), *y = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){rows[s], 1}, NULL);
        tm_fill_batch(s, x, y);
        /* from step 4 on, also fetch an intermediate activation */
        const char *fetch[2] = {"loss", "fc_0.out"};
        int nf = s >= 4 ? 2 : 1;
        step(&ref, x, y, fetch, nf, lr);
        step(&opt, x, y, fetch, nf, lo);
        for (int k = 0; k < nf; k++) assert_close(lo[k], lr[k], 1e-12, 1e-14, fetch[k]);
        pe_tensor_free(x);
        pe_tensor_free(y);
    }
    pe_tensor_free(lr[0]);
    pe_tensor_free(lr[1]);
    pe_tensor_free(lo[0]);
    pe_tensor_free(lo[1]);
    trainer_free(&ref);
    trainer_free(&opt);
    tm_model_free(&m);
}

/* The arena manager directly: plan count per signature, re-plan on a new
 * protected name, the plan places nothing protected or persistable. */
static void test_plan_cache(void **state) {
    (void)state;
    tm_model m = make_mlp();
    pe_build_strategy bs;
    memset(&bs, 0, sizeof bs);
    pe_ssa_graph *g;
    assert_int_equal(pe_multi_device_build(m.main, 2, "loss", &bs, &g), PE_OK);
    pe_place places[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_mem_arenas *ma;
    assert_int_equal(pe_mem_arenas_new(g, places, true, true, 1, &ma), PE_OK);
    pe_scope *global = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m.startup, 0, global, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_scope *local[2] = {pe_scope_new(global), pe_scope_new(global)};
    int rows[5] = {4, 4, 7, 4, 7}, want_plans[5] = {1, 1, 2, 2, 2};
    for (int s = 0; s < 5; s++) {
        for (int p = 0; p < 2; p++) {
            pe_tensor *x = pe_scope_var(local[p], "x"), *y = pe_scope_var(local[p], "label");
            assert_int_equal(pe_tensor_resize(x, g_dt, 2, (int64_t[]){rows[s], 784}, places[p]), PE_OK);
            assert_int_equal(pe_tensor_resize(y, PE_DTYPE_INT64, 2, (int64_t[]){rows[s], 1}, places[p]), PE_OK);
        }
        assert_int_equal(pe_mem_arenas_protect(ma, "x"), PE_OK);
        assert_int_equal(pe_mem_arenas_protect(ma, "label"), PE_OK);
        assert_int_equal(pe_mem_arenas_protect(ma, "loss"), PE_OK);
        assert_int_equal(pe_mem_arenas_prepare(ma, local), PE_OK);
        assert_int_equal(pe_mem_arenas_n_plans(ma), want_plans[s]);
        const pe_mem_plan *plan = pe_mem_arenas_plan(ma);
        for (int p = 0; p < 2; p++) {
            const pe_mp_place_plan *pp = &plan->place[p];
            assert_true(pp->n_vars > 10);
            assert_true(pp->stats.arena_bytes < pp->stats.no_reuse_bytes);
            for (int i = 0; i < pp->n_vars; i++) {
                const pe_var *v = pe_program_find_var(m.main, 0, pp->vars[i].name);
                assert_non_null(v);
                assert_false(v->persistable);
                assert_true(strcmp(v->name, "x") && strcmp(v->name, "label") && strcmp(v->name, "loss"));
                /* the var is a view into the arena, sized by the plan */
                const pe_tensor *t = pe_scope_find_local_var(local[p], v->name);
                assert_non_null(t);
                assert_true(t->buf->external);
                assert_int_equal(t->buf->bytes, pp->vars[i].bytes);
            }
            /* the mul output of the first layer: [rows/place, 128] doubles */
            const pe_mp_var_plan *vp = find_planned(pp, "fc_0.tmp_0");
            assert_non_null(vp);
            assert_int_equal(vp->bytes, (rows[s] * 128 * 8 + 63) / 64 * 64);
            /* the bias add writes over it: its other reader, elementwise_add_grad,
             * reads only its dims ("-X" in ops.def); the relu then writes over that */
            assert_true(find_planned(pp, "fc_0.tmp_1")->inplaced);
            assert_int_equal(find_planned(pp, "fc_0.tmp_1")->offset, vp->offset);
            assert_true(find_planned(pp, "fc_0.out")->inplaced);
        }
    }
    /* a var whose buffer another var shares (laid out elsewhere, as a
     * gradient bucket would be) is left alone by the next install */
    pe_mem_arenas_release(ma);
    for (int p = 0; p < 2; p++) {
        pe_scope_free(local[p]);
        local[p] = pe_scope_new(global);
        pe_tensor *x = pe_scope_var(local[p], "x"), *y = pe_scope_var(local[p], "label");
        assert_int_equal(pe_tensor_resize(x, g_dt, 2, (int64_t[]){4, 784}, places[p]), PE_OK);
        assert_int_equal(pe_tensor_resize(y, PE_DTYPE_INT64, 2, (int64_t[]){4, 1}, places[p]), PE_OK);
    }
    pe_tensor *bucket = tu_tensor(g_dt, 1, (int64_t[]){784 * 128}, NULL);
    pe_tensor *wg = pe_scope_var(local[0], "fc_0.w_0@GRAD");
    pe_tensor_share(wg, bucket);
    assert_int_equal(pe_mem_arenas_prepare(ma, local), PE_OK);
    assert_non_null(find_planned(&pe_mem_arenas_plan(ma)->place[0], "fc_0.w_0@GRAD"));
    assert_ptr_equal(wg->buf, bucket->buf);
    assert_true(pe_scope_find_local_var(local[1], "fc_0.w_0@GRAD")->buf->external); /* place 1: in the arena */
    pe_tensor_free(bucket);
    /* a new protected name that was placed: re-plan without it */
    assert_non_null(find_planned(&pe_mem_arenas_plan(ma)->place[0], "fc_1.out"));
    assert_int_equal(pe_mem_arenas_protect(ma, "fc_1.out"), PE_OK);
    assert_int_equal(pe_mem_arenas_prepare(ma, local), PE_OK);
    assert_int_equal(pe_mem_arenas_n_plans(ma), 3);
    assert_null(find_planned(&pe_mem_arenas_plan(ma)->place[0], "fc_1.out"));
    assert_null(find_planned(&pe_mem_arenas_plan(ma)->place[1], "fc_1.out"));
    /* protecting a feed or a persistable does not re-plan */
    assert_int_equal(pe_mem_arenas_protect(ma, "fc_0.w_0"), PE_OK);
    assert_int_equal(pe_mem_arenas_prepare(ma, local), PE_OK);
    assert_int_equal(pe_mem_arenas_n_plans(ma), 3);
    pe_mem_arenas_release(ma);
    for (int p = 0; p < 2; p++) pe_scope_free(local[p]);
    pe_mem_arenas_free(ma);
    pe_scope_free(global);
    pe_executor_free(ex);
    pe_ssa_graph_free(g);
    tm_model_free(&m);
}

static int64_t allocs(int places) {
    int64_t n = 0;
    for (int p = 0; p < places; p++) n += pe_alloc_get_stats(pe_place_cpu(p)).n_allocs;
    return n;
}

static void steady_state(bool cnn, int places) {
    tm_model m = cnn ? make_cnn() : make_mlp();
    trainer t = trainer_new(&m, places, true, true);
    int rows = 12;
    pe_tensor *x = tm_batch_x(&m, rows), *y = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){rows, 1}, NULL);
    pe_tensor *loss = pe_tensor_new();
    const char *fetch[] = {"loss"};
    for (int s = 0; s < 3; s++) {
        tm_fill_batch(s, x, y);
        step(&t, x, y, fetch, 1, &loss);
    }
    int64_t before = allocs(places);
    for (int s = 3; s < 9; s++) {
        tm_fill_batch(s, x, y);
        step(&t, x, y, fetch, 1, &loss);
    }
    int64_t after = allocs(places);
    if (after != before)
        fail_msg("%s on %d places: %lld system allocations in 6 steady-state steps", cnn ? "cnn" : "mlp", places,
                 (long long)(after - before));
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(loss);
    trainer_free(&t);
    tm_model_free(&m);
}

static void test_no_allocation_per_step(void **state) {
    (void)state;
    steady_state(false, 1);
    steady_state(false, 3);
    steady_state(true, 1);
    steady_state(true, 3);
}

/* bytes_in_use above the baseline at the peak of one training step */
static int64_t step_peak(bool inplace, bool memopt) {
    tm_model m = make_mlp();
    trainer t = trainer_new(&m, 1, inplace, memopt);
    int rows = 64;
    pe_tensor *x = tm_batch_x(&m, rows), *y = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){rows, 1}, NULL);
    pe_tensor *loss = pe_tensor_new();
    const char *fetch[] = {"loss"};
    pe_place p0 = pe_place_cpu(0);
    tm_fill_batch(0, x, y);
    pe_drop_local_exe_scopes(t.pe);
    int64_t base = pe_alloc_get_stats(p0).bytes_in_use;
    pe_alloc_reset_peak(p0);
    step(&t, x, y, fetch, 1, &loss);
    int64_t peak = pe_alloc_get_stats(p0).peak_bytes - base;
    /* what the local scopes hold is what the step left allocated (but the
     * fetched loss, one small allocation), each byte counted once: arena
     * views and the viewed feed are not counted twice */
    int64_t held = pe_alloc_get_stats(p0).bytes_in_use - base, local = (int64_t)pe_local_exe_scopes_bytes(t.pe);
    if (local > held || held - local > 256)
        fail_msg("inplace=%d memory_optimize=%d: local scopes report %lld bytes, the step left %lld allocated", inplace,
                 memopt, (long long)local, (long long)held);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(loss);
    trainer_free(&t);
    tm_model_free(&m);
    return peak;
}

static void test_measured_peak_lower(void **state) {
    (void)state;
    int64_t off = step_peak(false, false), inplace = step_peak(true, false), memopt = step_peak(false, true),
            both = step_peak(true, true);
    print_message("MLP step peak above baseline: off %lld, inplace %lld, memory_optimize %lld, both %lld bytes\n",
                  (long long)off, (long long)inplace, (long long)memopt, (long long)both);
    assert_true(inplace < off);
    assert_true(memopt < off);
    assert_true(both <= memopt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_dags),
        cmocka_unit_test(test_cycle_rejected),
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_diamond),
        cmocka_unit_test(test_best_fit_coalescing),
        cmocka_unit_test(test_inplace_pairs),
        cmocka_unit_test(test_plan_cache),
        cmocka_unit_test(test_replan_and_fetch_changes),
        cmocka_unit_test(test_no_allocation_per_step),
        cmocka_unit_test(test_measured_peak_lower),
        cmocka_unit_test(test_mlp_training_equivalence),
        cmocka_unit_test(test_cnn_training_equivalence),
        cmocka_unit_test(test_cnn_workspaces_in_plan),
        cmocka_unit_test(test_gemm_scratch_in_plan),
        cmocka_unit_test(test_topo_order),
        cmocka_unit_test(test_mlp_sequential_same_bits),
        cmocka_unit_test(test_cnn_sequential_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
