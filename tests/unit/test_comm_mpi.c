/* tests/unit/test_comm_mpi.c — the MPI backend (runtime/comm/mpi.c) against
 * the conformance harness (tests/unit/comm_harness.h), one rank per
 * process. Every process runs this program under mpirun:
 *
 *     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *       mpirun --oversubscribe -np 3 --mca btl self,vader build/bin/test_comm_mpi
 *
 * (ctest runs it with -np 2 and -np 3 through tests/unit/run_mpi.sh.) Each
 * process prepares every rank's inputs, drives its own rank and checks its
 * results bit for bit against the sequential sum in rank order:
 *   - the ladder (every collective at 1, 7, 4097, 65537 elements, every sum
 *     dtype, twice, issued from one thread and waited out of order), with
 *     the default 4 MiB chunks and again with 64 KiB chunks and a window of
 *     2 (many chunks per collective, reduce_scatter's packing); all ranks
 *     run on this machine, so allreduce goes through shared memory: the
 *     small-chunk ladder runs once more with PE_MPI_SHM=0 (allreduce over
 *     MPI's own transfers, as across machines);
 *   - a 16 MiB fp32 allreduce, twice;
 *   - callbacks (exactly once, registered before and after completion, on
 *     a work freed while pending);
 *   - ranks that issue late (the others asleep on their bells, woken by
 *     the late rank's moves);
 *   - errors every rank sees: one rank's bad root or dtype, sizes that
 *     differ, calls issued in different orders — every rank's call or work
 *     fails with a message, nothing hangs, and the communicator works after;
 *   - the two-level composition with 1 and 2 places per process (driven
 *     by threads, as in one process) over the MPI communicator, the whole
 *     ladder (reduce and reduce_scatter(v) to global ranks included) and
 *     the error cases, checked against the fixed-order sum (places, then
 *     processes);
 *   - NCCL ranks spanning the processes (one GPU each; skipped without
 *     enough GPUs);
 *   - a collective only rank 0 issues: its work fails after PE_MPI_TIMEOUT
 *     (1 s here) with a message, and the communicator refuses new calls.
 * Built without MPI, it prints a SKIPPED line and exits 77 (ctest: skipped).
 */
#ifdef PE_WITH_MPI
#include "tests/unit/comm_harness.h"
#include "tests/unit/gpu_skip.h"

#include <mpi.h>
#include <time.h>

static pe_comm *new_mpi(void) {
    pe_comm *c = NULL;
    if (pe_comm_mpi_new(&c) != PE_OK) fail_msg("pe_comm_mpi_new: %s", pe_last_error());
    return c;
}

static void world_mpi(world *w, pe_comm *c) {
    memset(w, 0, sizeof *w);
    w->name = "mpi";
    w->size = w->P = pe_comm_size(c);
    w->lo = pe_comm_rank(c);
    w->hi = w->lo + 1;
    w->rank[w->lo] = c;
}

static void test_mpi_basics(void **state) {
    (void)state;
    pe_comm *c = new_mpi();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    assert_int_equal(pe_comm_rank(c), rank);
    assert_int_equal(pe_comm_size(c), size);
    assert_string_equal(pe_comm_backend(c), "mpi");
    if (size > MAX_RANKS / 2) fail_msg("run with at most %d processes", MAX_RANKS / 2);
    /* two communicators at once, each with its own order: interleaved */
    pe_comm *d = new_mpi();
    int64_t x[3] = {rank, 1, 2}, y[3] = {10 * rank, 3, 4};
    pe_work *wx, *wy;
    assert_int_equal(pe_comm_allreduce(d, y, 3, PE_DTYPE_INT64, 1, &wy), PE_OK);
    assert_int_equal(pe_comm_allreduce(c, x, 3, PE_DTYPE_INT64, 1, &wx), PE_OK);
    assert_int_equal(pe_work_wait(wx), PE_OK);
    assert_int_equal(pe_work_wait(wy), PE_OK);
    pe_work_free(wx);
    pe_work_free(wy);
    assert_true(x[0] == size * (size - 1) / 2 && x[1] == size && x[2] == 2 * size);
    assert_true(y[0] == 10 * x[0] && y[1] == 3 * size && y[2] == 4 * size);
    pe_comm_free(d);
    pe_comm_free(c);
}

static void test_mpi_ladder(void **state) {
    (void)state;
    world w;
    world_mpi(&w, new_mpi());
    run_ladder(&w);
    pe_comm_free(w.rank[w.lo]);
}

static void test_mpi_ladder_small_chunks(void **state) {
    (void)state;
    setenv("PE_MPI_CHUNK_BYTES", "65536", 1);
    setenv("PE_MPI_WINDOW", "2", 1);
    world w;
    world_mpi(&w, new_mpi());
    unsetenv("PE_MPI_CHUNK_BYTES");
    unsetenv("PE_MPI_WINDOW");
    run_ladder(&w);
    pe_comm_free(w.rank[w.lo]);
}

/* The same over MPI's transfers only (PE_MPI_SHM=0: no shared memory,
 * as when the ranks run on different machines). */
static void test_mpi_ladder_no_shm(void **state) {
    (void)state;
    setenv("PE_MPI_SHM", "0", 1);
    setenv("PE_MPI_CHUNK_BYTES", "65536", 1);
    setenv("PE_MPI_WINDOW", "2", 1);
    world w;
    world_mpi(&w, new_mpi());
    unsetenv("PE_MPI_SHM");
    unsetenv("PE_MPI_CHUNK_BYTES");
    unsetenv("PE_MPI_WINDOW");
    run_ladder(&w);
    pe_comm_free(w.rank[w.lo]);
}

/* 16 MiB of fp32 per rank (4 chunks), twice: the same bits both times. */
static void test_mpi_allreduce_16mb(void **state) {
    (void)state;
    world w;
    world_mpi(&w, new_mpi());
    tcase c = {.op = PE_COLL_ALLREDUCE, .dt = PE_DTYPE_FP32, .count = 4 << 20};
    run_batch(&w, &c, 1, true, 7, 1);
    run_batch(&w, &c, 1, false, 7, 2);
    pe_comm_free(w.rank[w.lo]);
}

static void wait_calls(cb_count *cb, int want) {
    for (int i = 0; i < 60000 && atomic_load(&cb->calls) < want; i++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&cb->calls), want);
}

static void test_mpi_callbacks(void **state) {
    (void)state;
    pe_comm *c = new_mpi();
    int me = pe_comm_rank(c), n = pe_comm_size(c);
    int32_t v[5], u[5];
    for (int i = 0; i < 5; i++) v[i] = u[i] = me * 10 + i;
    cb_count cb[3];
    memset(cb, 0, sizeof cb);
    pe_work *w0, *w1;
    /* registered at once (most likely still pending), then waited */
    assert_int_equal(pe_comm_allreduce(c, v, 5, PE_DTYPE_INT32, 1, &w0), PE_OK);
    pe_work_on_done(w0, count_cb, &cb[0]);
    /* freed while pending: its callback still runs */
    assert_int_equal(pe_comm_allreduce(c, u, 5, PE_DTYPE_INT32, 2, &w1), PE_OK);
    pe_work_on_done(w1, count_cb, &cb[1]);
    pe_work_free(w1);
    assert_int_equal(pe_work_wait(w0), PE_OK);
    wait_calls(&cb[0], 1);
    wait_calls(&cb[1], 1);
    assert_int_equal(atomic_load(&cb[1].status), PE_OK);
    pe_status st = PE_ERR_INTERNAL;
    assert_true(pe_work_test(w0, &st));
    assert_int_equal(st, PE_OK);
    pe_work_free(w0);
    /* registered after completion: runs now, on this thread */
    pe_work *w2;
    assert_int_equal(pe_comm_barrier(c, 3, &w2), PE_OK);
    assert_int_equal(pe_work_wait(w2), PE_OK);
    pe_work_on_done(w2, count_cb, &cb[2]);
    assert_int_equal(atomic_load(&cb[2].calls), 1);
    pe_work_free(w2);
    for (int i = 0; i < 5; i++) {
        int32_t want = 10 * n * (n - 1) / 2 + n * i;
        assert_int_equal(v[i], want);
        assert_int_equal(u[i], want);
    }
    wait_calls(&cb[0], 1); /* still exactly once */
    pe_comm_free(c);
}

static void test_mpi_errors(void **state) {
    (void)state;
    world w;
    pe_comm *c = new_mpi();
    world_mpi(&w, c);
    int me = w.lo, n = w.size;
    errors_on(&w);
    /* every rank's call fails alike: nothing is sent, nothing waits */
    float x[4] = {0};
    pe_work *wk;
    char want[128];
    assert_int_equal(pe_comm_reduce(c, x, 4, PE_DTYPE_FP16, 0, 1, &wk), PE_ERR_UNSUPPORTED);
    snprintf(want, sizeof want, "mpi rank %d/%d: reduce of 4 float16 elements to root 0", me, n);
    if (!strstr(pe_last_error(), want)) fail_msg("'%s' lacks '%s'", pe_last_error(), want);
    assert_null(wk);
    assert_int_equal(pe_comm_broadcast(c, x, 4, PE_DTYPE_FP32, n, 2, &wk), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "is not a rank"));
    assert_int_equal(pe_comm_allgather(c, x, x, 4, (pe_dtype)99, 3, &wk), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "is not a PE dtype"));
    /* issued in different orders: both collectives fail on every rank */
    if (n > 1) {
        double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
        pe_work *wa, *wb;
        if (me == 0) {
            assert_int_equal(pe_comm_allreduce(c, a, 4, PE_DTYPE_FP64, 21, &wa), PE_OK);
            assert_int_equal(pe_comm_allreduce(c, b, 4, PE_DTYPE_FP64, 22, &wb), PE_OK);
        } else {
            assert_int_equal(pe_comm_allreduce(c, b, 4, PE_DTYPE_FP64, 22, &wb), PE_OK);
            assert_int_equal(pe_comm_allreduce(c, a, 4, PE_DTYPE_FP64, 21, &wa), PE_OK);
        }
        assert_int_equal(pe_work_wait(wa), PE_ERR_INVALID);
        assert_non_null(strstr(pe_last_error(), "in the same order"));
        assert_int_equal(pe_work_wait(wb), PE_ERR_INVALID);
        assert_non_null(strstr(pe_last_error(), "in the same order"));
        for (int i = 0; i < 4; i++) assert_true(a[i] == i + 1 && b[i] == i + 5); /* untouched */
        pe_work_free(wa);
        pe_work_free(wb);
    }
    /* and the communicator still works */
    tcase t = {.op = PE_COLL_ALLREDUCE, .dt = PE_DTYPE_FP32, .count = 33};
    run_batch(&w, &t, 1, true, 11, 30);
    pe_comm_free(c);
}

/* The two-level composition, 1 and 2 places per process, over MPI (with
 * one place each its sums are the sequential sums in rank order). */
static void test_hier_over_mpi(void **state) {
    (void)state;
    pe_comm *outer = new_mpi();
    int me = pe_comm_rank(outer), n = pe_comm_size(outer);
    for (int P = 1; P <= 2; P++) {
        world w;
        memset(&w, 0, sizeof w);
        w.name = "hier";
        w.R = n;
        w.P = P;
        w.size = P * n;
        w.lo = P * me;
        w.hi = P * me + P;
        assert_int_equal(pe_comm_hier_new(outer, P, 1, &w.rank[w.lo]), PE_OK);
        for (int r = w.lo; r < w.hi; r++) {
            assert_int_equal(pe_comm_rank(w.rank[r]), r);
            assert_int_equal(pe_comm_size(w.rank[r]), P * n);
        }
        run_ladder(&w);
        errors_on(&w);
        for (int r = w.lo; r < w.hi; r++) pe_comm_free(w.rank[r]);
    }
    pe_comm_free(outer);
}

/* A collective no peer joins: rank 0's work fails within PE_MPI_TIMEOUT
 * (1 s here) instead of hanging, and its communicator refuses new calls. */
/* NCCL ranks spanning processes (the executor's CUDA world across
 * trainers): the id from rank 0 over MPI, one GPU per process, an fp32
 * allreduce and a broadcast on device buffers checked exactly (the values
 * are small multiples of 0.5: every sum order gives the same bits). Needs
 * as many GPUs as processes: skipped, visibly, elsewhere. */
static void test_nccl_across_processes(void **state) {
    (void)state;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    TU_NEED_GPUS(size, "test_comm_mpi: one GPU per process");
#ifdef PE_WITH_NCCL
    pe_nccl_id id;
    memset(&id, 0, sizeof id);
    if (rank == 0 && pe_nccl_get_id(&id) != PE_OK) fail_msg("pe_nccl_get_id: %s", pe_last_error());
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    pe_comm *r = NULL;
    if (pe_comm_nccl_rank_new(&id, rank, size, rank, &r) != PE_OK) fail_msg("nccl rank: %s", pe_last_error());
    assert_int_equal(pe_comm_rank(r), rank);
    assert_int_equal(pe_comm_size(r), size);
    enum { N = 4099 };
    float host[N];
    for (int i = 0; i < N; i++) host[i] = (float)rank + 0.5f * (float)(i % 64);
    pe_place dev = pe_place_cuda(rank), cpu = pe_place_cpu(0);
    void *d = pe_cuda_malloc(rank, sizeof host);
    assert_non_null(d);
    assert_int_equal(pe_cuda_memcpy(d, dev, host, cpu, sizeof host), PE_OK);
    pe_work *w;
    assert_int_equal(pe_comm_allreduce(r, d, N, PE_DTYPE_FP32, 1, &w), PE_OK);
    assert_int_equal(pe_work_wait(w), PE_OK);
    pe_work_free(w);
    assert_int_equal(pe_cuda_memcpy(host, cpu, d, dev, sizeof host), PE_OK);
    for (int i = 0; i < N; i++)
        if (host[i] != (float)(size * (size - 1) / 2) + (float)size * 0.5f * (float)(i % 64))
            fail_msg("allreduce element %d: %g", i, host[i]);
    int root = size - 1;
    for (int i = 0; i < N; i++) host[i] = (float)(rank * 1000 + i);
    assert_int_equal(pe_cuda_memcpy(d, dev, host, cpu, sizeof host), PE_OK);
    assert_int_equal(pe_comm_broadcast(r, d, N, PE_DTYPE_FP32, root, 2, &w), PE_OK);
    assert_int_equal(pe_work_wait(w), PE_OK);
    pe_work_free(w);
    assert_int_equal(pe_cuda_memcpy(host, cpu, d, dev, sizeof host), PE_OK);
    for (int i = 0; i < N; i++)
        if (host[i] != (float)(root * 1000 + i)) fail_msg("broadcast element %d: %g", i, host[i]);
    pe_cuda_free(rank, d);
    pe_comm_free(r);
#endif
}

/* Ranks that come late: rank r issues each of 6 allreduces (4 chunks of
 * 64 KiB each) r x 20 ms after the one before, so the ranks ahead wait on
 * every header and every chunk's phases, past their short poll, asleep on
 * their bell (runtime/comm/mpi.c, progress_main), and the late rank's
 * moves must wake them. Sums in rank order, bit for bit. */
static void test_mpi_late_ranks(void **state) {
    (void)state;
    setenv("PE_MPI_CHUNK_BYTES", "65536", 1);
    pe_comm *c = new_mpi();
    unsetenv("PE_MPI_CHUNK_BYTES");
    const int me = pe_comm_rank(c), n = pe_comm_size(c);
    enum { OPS = 6, COUNT = 65536 };
    int32_t *v = malloc(sizeof *v * OPS * COUNT);
    assert_non_null(v);
    pe_work *w[OPS];
    for (int k = 0; k < OPS; k++) {
        struct timespec ts = {0, me * 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        for (int i = 0; i < COUNT; i++) v[k * COUNT + i] = (me + 1) * (i % 1000) + k;
        assert_int_equal(pe_comm_allreduce(c, v + k * COUNT, COUNT, PE_DTYPE_INT32, 40 + k, &w[k]), PE_OK);
    }
    for (int k = 0; k < OPS; k++) {
        if (pe_work_wait(w[k]) != PE_OK) fail_msg("allreduce %d: %s", k, pe_last_error());
        pe_work_free(w[k]);
        for (int i = 0; i < COUNT; i++) {
            const int32_t want = n * (n + 1) / 2 * (i % 1000) + n * k;
            if (v[k * COUNT + i] != want)
                fail_msg("allreduce %d, element %d: %d, not %d", k, i, v[k * COUNT + i], want);
        }
    }
    free(v);
    pe_comm_free(c);
}

static void test_mpi_no_progress_timeout(void **state) {
    (void)state;
    setenv("PE_MPI_TIMEOUT", "1", 1);
    pe_comm *c = new_mpi();
    unsetenv("PE_MPI_TIMEOUT");
    if (pe_comm_rank(c) == 0 && pe_comm_size(c) > 1) {
        pe_work *w;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(pe_comm_barrier(c, 5, &w), PE_OK);
        assert_int_equal(pe_work_wait(w), PE_ERR_IO);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (!strstr(pe_last_error(), "no progress for 1 s")) fail_msg("'%s'", pe_last_error());
        assert_true(t1.tv_sec - t0.tv_sec < 20);
        pe_work_free(w);
        assert_int_equal(pe_comm_barrier(c, 6, &w), PE_ERR_IO);
        assert_non_null(strstr(pe_last_error(), "unusable"));
    }
    MPI_Barrier(MPI_COMM_WORLD); /* the others wait for rank 0's timeout */
    pe_comm_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpi_basics),
        cmocka_unit_test(test_mpi_ladder),
        cmocka_unit_test(test_mpi_ladder_small_chunks),
        cmocka_unit_test(test_mpi_ladder_no_shm),
        cmocka_unit_test(test_mpi_allreduce_16mb),
        cmocka_unit_test(test_mpi_callbacks),
        cmocka_unit_test(test_mpi_late_ranks),
        cmocka_unit_test(test_mpi_errors),
        cmocka_unit_test(test_hier_over_mpi),
        cmocka_unit_test(test_nccl_across_processes),
        cmocka_unit_test(test_mpi_no_progress_timeout), /* last: leaves a request pending on rank 0 */
    };
    return TU_RUN_GROUP(tests);
}

#else
#include <stdio.h>

int main(void) {
    printf("[  SKIPPED ] test_comm_mpi: PE was built without MPI (-DPE_WITH_MPI=OFF, or MPI not found)\n");
    return 77;
}

#endif
