/* tests/unit/test_comm_conformance.c — every backend of the rank API
 * (runtime/comm/comm.h) against one set of cases.
 *
 * A world is `size` rank communicators of one backend: in-process ranks,
 * the two-level composition (R simulated processes x P places, the outer
 * communicator another in-process world), and NCCL where GPUs exist. The
 * harness prepares every rank's inputs and the expected outputs on the
 * main thread (sums in a fixed order: places of a process in order, then
 * processes — for a one-level world simply rank order 0..N-1), then drives
 * the world two ways:
 *   - threads: each rank on its own pthread, issuing a batch of cases with
 *     consecutive tags and waiting for them in reverse order;
 *   - driver: one thread issues every rank's calls (last rank first) and
 *     waits for the works in a scrambled order, as the executor's group does;
 *     and the group helpers themselves (pe_group_start, pe_group_allreduce,
 *     ...) over in-process and two-level ranks.
 * Results must equal the expectation bit for bit (memcmp), on every run
 * (each ladder runs twice). Sizes: 1, 7, 4097, 65537 and more elements
 * (chunk and tile edges), 1..4 ranks, a 64 MB fp32 allreduce on 2 ranks.
 * Also: callbacks (exactly once, before and after completion), works
 * freed before completion, tags reused, and errors — a bad root or dtype
 * on one rank, counts that differ between the ranks of one tag — end with
 * a clear message on every rank, never a hang. A backend that must skip
 * (NCCL without a GPU) prints a visible "[  SKIPPED ]" line. The harness
 * (worlds, data, drivers, the ladder, the error cases) lives in
 * tests/unit/comm_harness.h, shared with test_comm_mpi.c (MPI, one rank
 * per process).
 */
#include "tests/unit/comm_harness.h"

/* ---- worlds ------------------------------------------------------------------- */

static void world_inproc(world *w, int n, int threads) {
    memset(w, 0, sizeof *w);
    w->name = "inproc";
    w->size = n;
    w->P = n;
    w->hi = n;
    assert_int_equal(pe_comm_inproc_world_new(n, threads, w->rank), PE_OK);
    for (int r = 0; r < n; r++) {
        assert_int_equal(pe_comm_rank(w->rank[r]), r);
        assert_int_equal(pe_comm_size(w->rank[r]), n);
        assert_string_equal(pe_comm_backend(w->rank[r]), "inproc");
    }
}

static void world_hier(world *w, int R, int P, int threads) {
    memset(w, 0, sizeof *w);
    w->name = "hier";
    w->R = R;
    w->P = P;
    w->size = R * P;
    w->hi = R * P;
    assert_int_equal(pe_comm_inproc_world_new(R, threads, w->outer), PE_OK);
    for (int p = 0; p < R; p++) assert_int_equal(pe_comm_hier_new(w->outer[p], P, threads, &w->rank[p * P]), PE_OK);
    for (int r = 0; r < w->size; r++) {
        assert_int_equal(pe_comm_rank(w->rank[r]), r);
        assert_int_equal(pe_comm_size(w->rank[r]), R * P);
    }
}

static void world_free(world *w) {
    for (int r = 0; r < w->size; r++) pe_comm_free(w->rank[r]);
    for (int p = 0; p < w->R; p++) pe_comm_free(w->outer[p]);
}

/* ---- in-process and two-level ladders ---------------------------------------------------- */

static void test_inproc_ladder(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) {
        world w;
        world_inproc(&w, n, n == 3 ? 2 : 1);
        run_ladder(&w);
        world_free(&w);
    }
}

static void test_hier_ladder(void **state) {
    (void)state;
    static const int layouts[][2] = {{2, 2}, {2, 1}, {1, 3}, {3, 2}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        world w;
        world_hier(&w, layouts[i][0], layouts[i][1], 1);
        run_ladder(&w);
        world_free(&w);
    }
}

/* 64 MB of fp32 per rank, 2 ranks on threads, 2 OpenMP threads. */
static void test_inproc_allreduce_64mb(void **state) {
    (void)state;
    world w;
    world_inproc(&w, 2, 2);
    tcase c = {.op = PE_COLL_ALLREDUCE, .dt = PE_DTYPE_FP32, .count = 16 << 20};
    run_batch(&w, &c, 1, true, 7, 1);
    world_free(&w);
}

/* ---- groups: one thread, every rank's buffer --------------------------------------------------- */

/* pe_group_* over a world's ranks (not the in-process fast path): the
 * non-blocking start waited out of order, and the blocking calls. */
static void group_cases(world *w) {
    pe_comm_group *g = pe_comm_group_new(w->rank, w->size); /* owns the ranks now */
    assert_non_null(g);
    assert_int_equal(g->n_places, w->size);
    static const int64_t sizes[] = {1, 7, 4097, 65537};
    for (int op = PE_COLL_ALLREDUCE; op <= PE_COLL_BROADCAST; op++) {
        prepared pr[4];
        pe_work *wk[4];
        for (int k = 0; k < 4; k++) {
            tcase c = {.op = (pe_coll)op, .dt = k % 2 ? PE_DTYPE_FP64 : PE_DTYPE_FP32, .count = sizes[k],
                       .root = (k + 1) % w->size};
            prepare(&pr[k], w, c, 50 + (uint64_t)k);
            assert_int_equal(pe_group_start(g, c.op, pr[k].buf, c.count, c.dt, c.root, &wk[k]), PE_OK);
        }
        for (int k = 3; k >= 0; k--) {
            assert_int_equal(pe_work_wait(wk[k]), PE_OK);
            pe_work_free(wk[k]);
        }
        /* the blocking calls on fresh copies of the first case */
        prepared b;
        prepare(&b, w, pr[0].c, 50);
        pe_status st = op == PE_COLL_ALLREDUCE ? pe_group_allreduce(g, b.buf, b.c.count, b.c.dt)
                       : op == PE_COLL_REDUCE  ? pe_group_reduce(g, b.buf, b.c.count, b.c.dt, b.c.root)
                                               : pe_group_broadcast(g, b.buf, b.c.count, b.c.dt, b.c.root);
        assert_int_equal(st, PE_OK);
        char why[512];
        for (int r = 0; r < w->size; r++) {
            for (int k = 0; k < 4; k++)
                if (!check(&pr[k], r, w->name, why, sizeof why)) fail_msg("group start: %s", why);
            if (!check(&b, r, w->name, why, sizeof why)) fail_msg("group call: %s", why);
        }
        for (int k = 0; k < 4; k++) release(&pr[k]);
        release(&b);
    }
    /* pe_group_run: a reduction other than sum (blocking), allgather from
     * inputs apart (a work) */
    for (int k = 0; k < 2; k++) {
        tcase c = k == 0 ? (tcase){.op = PE_COLL_ALLREDUCE, .dt = PE_DTYPE_FP32, .count = 4097, .red = PE_RED_MIN}
                         : (tcase){.op = PE_COLL_ALLGATHER, .dt = PE_DTYPE_INT64, .count = 7};
        prepared b;
        prepare(&b, w, c, 60 + (uint64_t)k);
        pe_coll_args a = {.op = c.op, .count = c.count, .dt = c.dt, .red = c.red};
        pe_work *wk = NULL;
        assert_int_equal(pe_group_run(g, &a, (const void *const *)b.in, b.buf, k ? &wk : NULL), PE_OK);
        if (wk) {
            assert_int_equal(pe_work_wait(wk), PE_OK);
            pe_work_free(wk);
        }
        char why[512];
        for (int r = 0; r < w->size; r++)
            if (!check(&b, r, w->name, why, sizeof why)) fail_msg("pe_group_run: %s", why);
        release(&b);
    }
    /* the place API's messages */
    float x[4] = {0}, *bufs[MAX_RANKS];
    for (int r = 0; r < w->size; r++) bufs[r] = x;
    assert_int_equal(pe_group_broadcast(g, (void *const *)bufs, 4, PE_DTYPE_FP32, w->size), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "is not a place"));
    pe_group_free(g);
    for (int p = 0; p < w->R; p++) pe_comm_free(w->outer[p]);
}

static void test_group_driver(void **state) {
    (void)state;
    world w;
    world_inproc(&w, 3, 1);
    group_cases(&w);
    world_hier(&w, 2, 2, 1);
    group_cases(&w);
    /* the in-process group's own (fast-path) ranks, started non-blocking */
    pe_comm_group *g = pe_comm_inproc_new(2, 1);
    assert_non_null(g);
    int64_t a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
    void *bufs[2] = {a, b};
    pe_work *wk;
    assert_int_equal(pe_group_start(g, PE_COLL_ALLREDUCE, bufs, 3, PE_DTYPE_INT64, 0, &wk), PE_OK);
    assert_int_equal(pe_work_wait(wk), PE_OK);
    pe_work_free(wk);
    for (int i = 0; i < 3; i++) assert_true(a[i] == 11 * (i + 1) && b[i] == a[i]);
    pe_group_free(g);
}

/* ---- callbacks and work lifetime ------------------------------------------------------------ */

static void test_callbacks_and_lifetime(void **state) {
    (void)state;
    world w;
    world_inproc(&w, 3, 1);
    int32_t v[3][5];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 5; i++) v[r][i] = r * 10 + i;
    pe_work *wk[3];
    cb_count cb[3];
    memset(cb, 0, sizeof cb);
    /* rank 0 and 1 pending, callbacks registered before completion */
    for (int r = 0; r < 2; r++) {
        assert_int_equal(pe_comm_allreduce(w.rank[r], v[r], 5, PE_DTYPE_INT32, 42, &wk[r]), PE_OK);
        assert_false(pe_work_test(wk[r], NULL));
        pe_work_on_done(wk[r], count_cb, &cb[r]);
        assert_int_equal(atomic_load(&cb[r].calls), 0);
    }
    pe_work_free(wk[1]); /* freed while pending: its callback still runs */
    assert_int_equal(pe_comm_allreduce(w.rank[2], v[2], 5, PE_DTYPE_INT32, 42, &wk[2]), PE_OK);
    pe_status st = PE_ERR_INTERNAL;
    assert_true(pe_work_test(wk[2], &st)); /* the last rank ran it */
    assert_int_equal(st, PE_OK);
    assert_int_equal(atomic_load(&cb[0].calls), 1);
    assert_int_equal(atomic_load(&cb[1].calls), 1);
    pe_work_on_done(wk[2], count_cb, &cb[2]); /* after completion: now */
    assert_int_equal(atomic_load(&cb[2].calls), 1);
    assert_int_equal(pe_work_wait(wk[0]), PE_OK);
    assert_int_equal(atomic_load(&cb[0].calls), 1);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 5; i++) assert_int_equal(v[r][i], 30 + 3 * i);
    pe_work_free(wk[0]);
    pe_work_free(wk[2]);
    /* the tag is free again: reuse it */
    pe_work *b[3];
    for (int r = 0; r < 3; r++) assert_int_equal(pe_comm_barrier(w.rank[r], 42, &b[r]), PE_OK);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(pe_work_wait(b[r]), PE_OK);
        pe_work_free(b[r]);
    }
    /* a tag still pending on this rank is refused */
    assert_int_equal(pe_comm_barrier(w.rank[0], 43, &b[0]), PE_OK);
    assert_int_equal(pe_comm_barrier(w.rank[0], 43, &b[1]), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "already has a pending collective"));
    assert_int_equal(pe_comm_barrier(w.rank[1], 43, &b[1]), PE_OK);
    assert_int_equal(pe_comm_barrier(w.rank[2], 43, &b[2]), PE_OK);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(pe_work_wait(b[r]), PE_OK);
        pe_work_free(b[r]);
    }
    world_free(&w);
}


static void test_errors(void **state) {
    (void)state;
    world w;
    world_inproc(&w, 3, 1);
    errors_on(&w);
    /* the message names backend, rank, op, dtype and sizes */
    float x[4];
    pe_work *wk;
    assert_int_equal(pe_comm_reduce(w.rank[1], x, 4, PE_DTYPE_FP16, 0, 1, &wk), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "inproc rank 1/3: reduce of 4 float16 elements to root 0"));
    world_free(&w);
    world_hier(&w, 2, 2, 1);
    errors_on(&w);
    /* a collective only some ranks joined, its work already dropped:
     * freeing the world cancels it (no leak, no use after free) */
    double y[4] = {0};
    assert_int_equal(pe_comm_allreduce(w.rank[0], y, 4, PE_DTYPE_FP64, 99, &wk), PE_OK);
    assert_false(pe_work_test(wk, NULL));
    pe_work_free(wk);
    world_free(&w);
    pe_comm *one[1];
    assert_int_equal(pe_comm_inproc_world_new(0, 1, one), PE_ERR_INVALID);
    assert_int_equal(pe_comm_allreduce(NULL, x, 4, PE_DTYPE_FP32, 0, &wk), PE_ERR_INVALID);
    assert_null(wk);
}

/* ---- NCCL ---------------------------------------------------------------------------------- */

static void test_nccl_conformance(void **state) {
    (void)state;
    if (tu_gpu_count() < 1) TU_SKIP_GPU("NCCL conformance: no CUDA device (%s)", TU_NO_GPU_REASON);
#ifndef PE_WITH_NCCL
    TU_SKIP_GPU("NCCL conformance: PE was built with CUDA but without NCCL");
#else
    int gmax = tu_gpu_count() < 4 ? tu_gpu_count() : 4;
    for (int n = 1; n <= gmax; n++) {
        int devices[4] = {0, 1, 2, 3};
        pe_comm_group *g = pe_comm_nccl_new(devices, n);
        if (!g) fail_msg("NCCL over %d GPUs: %s", n, pe_last_error());
        world w;
        memset(&w, 0, sizeof w);
        w.name = "nccl";
        w.size = n;
        w.P = n;
        w.hi = n;
        w.device = true;
        for (int r = 0; r < n; r++) w.rank[r] = g->ranks[r];
        /* NCCL matches by order: one thread issues every rank's calls */
        tcase cases[128];
        int m = ladder(&w, cases, 128, true);
        for (int k = 0; k < m; k += 6)
            run_batch(&w, cases + k, m - k < 6 ? m - k : 6, false, 1000 + (uint64_t)k, 100 + (uint64_t)k);
        pe_group_free(g);
    }
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inproc_ladder),
        cmocka_unit_test(test_hier_ladder),
        cmocka_unit_test(test_inproc_allreduce_64mb),
        cmocka_unit_test(test_group_driver),
        cmocka_unit_test(test_callbacks_and_lifetime),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nccl_conformance),
    };
    return TU_RUN_GROUP(tests);
}
