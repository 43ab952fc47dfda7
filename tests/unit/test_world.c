/* tests/unit/test_world.c — the public process-world API (pe/world.h,
 * runtime/comm/world.c) across MPI processes, through <pe/pe.h> only:
 *
 *     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *       mpirun --oversubscribe -np 3 build/bin/test_world
 *
 * (ctest runs it with -np 2 and -np 3 through tests/unit/run_mpi.sh.)
 *   - rank and size are MPI_COMM_WORLD's; allreduce of every sum dtype
 *     equals the sequential sum in rank order, bit for bit; reduce at each
 *     root leaves the other ranks' buffers alone; broadcast from each root;
 *     allgather in rank order; barrier;
 *   - one rank's bad root, and ranks passing different counts or dtypes:
 *     every rank's call fails with a message naming the difference, and
 *     the world works after;
 *   - two worlds at once, and the calls of several threads on one world
 *     (serialized inside);
 *   - pe_world_allreduce_start: two started sums in flight across a
 *     blocking allgather, each equal to the blocking sum once waited for;
 *     a started sum whose count differs on one rank fails at the wait on
 *     every rank (naming all_reduce), and the world works after;
 *   - pe_world_free(NULL).
 * Built without MPI: pe_world_available() is false and pe_world_new
 * returns PE_ERR_UNSUPPORTED (checked, then exit 77: skipped).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pe/pe.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pe_world *g_w;
static int R, N;

static pe_world *open_world(void) {
    pe_world *w = NULL;
    if (pe_world_new(&w) != PE_OK) fail_msg("pe_world_new: %s", pe_last_error());
    return w;
}

/* rank r's i-th value: differs per rank, exact in every dtype */
static double val(int r, int i) { return (double)((i % 5) + 1) * (r + 1) - 0.25 * r; }

static void test_rank_size(void **state) {
    (void)state;
    assert_true(pe_world_available());
    assert_true(N >= 2 && R >= 0 && R < N);
    pe_world_free(NULL);
}

static void test_allreduce_in_rank_order(void **state) {
    (void)state;
    enum { K = 37 };
    float f[K], fe[K];
    double d[K], de[K];
    int32_t a[K], ae[K];
    int64_t b[K], be[K];
    for (int i = 0; i < K; i++) {
        f[i] = (float)val(R, i) * 0.1f;
        d[i] = val(R, i) * 0.1;
        a[i] = (int32_t)(val(R, i) * 4);
        b[i] = (int64_t)(val(R, i) * 4) << 33;
        fe[i] = 0, de[i] = 0, ae[i] = 0, be[i] = 0;
        for (int r = 0; r < N; r++) {
            fe[i] += (float)val(r, i) * 0.1f;
            de[i] += val(r, i) * 0.1;
            ae[i] += (int32_t)(val(r, i) * 4);
            be[i] += (int64_t)(val(r, i) * 4) << 33;
        }
    }
    assert_int_equal(pe_world_allreduce(g_w, f, K, PE_DTYPE_FP32), PE_OK);
    assert_int_equal(pe_world_allreduce(g_w, d, K, PE_DTYPE_FP64), PE_OK);
    assert_int_equal(pe_world_allreduce(g_w, a, K, PE_DTYPE_INT32), PE_OK);
    assert_int_equal(pe_world_allreduce(g_w, b, K, PE_DTYPE_INT64), PE_OK);
    assert_memory_equal(f, fe, sizeof f);
    assert_memory_equal(d, de, sizeof d);
    assert_memory_equal(a, ae, sizeof a);
    assert_memory_equal(b, be, sizeof b);
}

static void test_rooted_and_gather(void **state) {
    (void)state;
    for (int root = 0; root < N; root++) {
        double x[3] = {val(R, 0), val(R, 1), val(R, 2)}, sum[3] = {0, 0, 0};
        for (int r = 0; r < N; r++)
            for (int i = 0; i < 3; i++) sum[i] += val(r, i);
        assert_int_equal(pe_world_reduce(g_w, x, 3, PE_DTYPE_FP64, root), PE_OK);
        for (int i = 0; i < 3; i++) assert_true(x[i] == (R == root ? sum[i] : val(R, i)));
        int64_t y[2] = {R, 100 + R};
        assert_int_equal(pe_world_broadcast(g_w, y, 2, PE_DTYPE_INT64, root), PE_OK);
        assert_true(y[0] == root && y[1] == 100 + root);
    }
    int32_t mine[2] = {R, -R}, all[2 * 8];
    assert_true(N <= 8);
    assert_int_equal(pe_world_allgather(g_w, mine, all, 2, PE_DTYPE_INT32), PE_OK);
    for (int r = 0; r < N; r++) assert_true(all[2 * r] == r && all[2 * r + 1] == -r);
    assert_int_equal(pe_world_barrier(g_w), PE_OK);
}

static void still_works(void) {
    float one = 1;
    assert_int_equal(pe_world_allreduce(g_w, &one, 1, PE_DTYPE_FP32), PE_OK);
    assert_true(one == (float)N);
}

static void test_mismatches_fail_everywhere(void **state) {
    (void)state;
    double x[4] = {0};
    /* the last rank passes a root outside the world */
    pe_status st = pe_world_broadcast(g_w, x, 4, PE_DTYPE_FP64, R == N - 1 ? N : 0);
    assert_int_not_equal(st, PE_OK);
    assert_non_null(strstr(pe_last_error(), "broadcast"));
    still_works();
    /* the last rank passes more elements */
    st = pe_world_allreduce(g_w, x, R == N - 1 ? 4 : 3, PE_DTYPE_FP64);
    assert_int_equal(st, PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "all_reduce: "));
    assert_non_null(strstr(pe_last_error(), "elements"));
    still_works();
    /* another dtype */
    st = pe_world_allreduce(g_w, x, 2, R == 0 ? PE_DTYPE_INT64 : PE_DTYPE_FP64);
    assert_int_equal(st, PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "dtype"));
    still_works();
}

static void test_allreduce_start(void **state) {
    (void)state;
    enum { K = 1000 };
    static float a[K], b[K], ae[K];
    double d[3] = {val(R, 0), val(R, 1), val(R, 2)};
    for (int i = 0; i < K; i++) {
        a[i] = (float)val(R, i) * 0.1f;
        b[i] = 2 * a[i];
        ae[i] = 0;
        for (int r = 0; r < N; r++) ae[i] += (float)val(r, i) * 0.1f;
    }
    pe_world_work *wa = NULL, *wb = NULL;
    assert_int_equal(pe_world_allreduce_start(g_w, a, K, PE_DTYPE_FP32, &wa), PE_OK);
    assert_int_equal(pe_world_allreduce_start(g_w, b, K, PE_DTYPE_FP32, &wb), PE_OK);
    assert_non_null(wa);
    int32_t mine = R, all[8];
    assert_true(N <= 8);
    assert_int_equal(pe_world_allgather(g_w, &mine, all, 1, PE_DTYPE_INT32), PE_OK); /* while they move */
    for (int r = 0; r < N; r++) assert_int_equal(all[r], r);
    assert_int_equal(pe_world_work_wait(wb), PE_OK);
    assert_int_equal(pe_world_work_wait(wa), PE_OK);
    assert_true(pe_world_work_test(wa));
    assert_memory_equal(a, ae, sizeof a);
    for (int i = 0; i < K; i++) b[i] /= 2;
    assert_memory_equal(b, ae, sizeof b); /* x2 then /2: exact */
    pe_world_work_free(wa);
    pe_world_work_free(wb);
    /* the last rank starts more elements: every rank's wait fails */
    pe_world_work *wc = NULL;
    assert_int_equal(pe_world_allreduce_start(g_w, d, R == N - 1 ? 3 : 2, PE_DTYPE_FP64, &wc), PE_OK);
    assert_int_equal(pe_world_work_wait(wc), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "all_reduce: "));
    assert_non_null(strstr(pe_last_error(), "elements"));
    pe_world_work_free(wc);
    still_works();
    /* this rank's own bad argument: an error at the start, no work */
    wc = (pe_world_work *)1;
    assert_int_not_equal(pe_world_allreduce_start(g_w, d, 2, PE_DTYPE_BOOL, &wc), PE_OK);
    assert_null(wc);
    pe_world_work_free(NULL);
}

/* Each call sums ones, so however the two threads' calls interleave on
 * each rank (the world pairs the ranks' calls by order), every result is N. */
static void *thread_sums(void *arg) {
    int *bad = arg;
    for (int k = 0; k < 20; k++) {
        int64_t v = 1;
        if (pe_world_allreduce(g_w, &v, 1, PE_DTYPE_INT64) != PE_OK || v != N) (*bad)++;
    }
    return NULL;
}

static void test_two_worlds_and_threads(void **state) {
    (void)state;
    pe_world *w2 = open_world();
    assert_int_equal(pe_world_rank(w2), R);
    int32_t v = 1;
    assert_int_equal(pe_world_allreduce(w2, &v, 1, PE_DTYPE_INT32), PE_OK);
    assert_int_equal(v, N);
    pe_world_free(w2);
    int bad1 = 0, bad2 = 0;
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, thread_sums, &bad1), 0);
    assert_int_equal(pthread_create(&t2, NULL, thread_sums, &bad2), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(bad1 + bad2, 0);
}

int main(void) {
    if (!pe_world_available()) {
        pe_world *w = (pe_world *)1;
        if (pe_world_new(&w) != PE_ERR_UNSUPPORTED || w) return 1;
        printf("[  SKIPPED ] test_world: PE was built without MPI\n");
        return 77;
    }
    g_w = open_world();
    R = pe_world_rank(g_w);
    N = pe_world_size(g_w);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_size),
        cmocka_unit_test(test_allreduce_in_rank_order),
        cmocka_unit_test(test_rooted_and_gather),
        cmocka_unit_test(test_mismatches_fail_everywhere),
        cmocka_unit_test(test_allreduce_start),
        cmocka_unit_test(test_two_worlds_and_threads),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pe_world_free(g_w);
    return rc;
}
