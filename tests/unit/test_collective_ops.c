/* tests/unit/test_collective_ops.c — the collective ops a program carries
 * (ops/collective.c: c_allreduce_sum/max/min/prod, c_broadcast,
 * c_allgather, c_scatter, c_reduce_sum/min, c_identity, c_sync_*), in one
 * process:
 *   - a ParallelExecutor on 1, 2 and 3 CPU places runs the program of
 *     collective_case.h (every op, Out != X and in place) and every place
 *     fetches the hand-computed results; again with fewer pool threads
 *     than places (places share threads: no kernel waits for another
 *     place), with sequential execution, and over several runs;
 *   - the single-place Executor: a world of one rank, Out = X;
 *   - errors, clear and at construction: ring_id != 0, a root or root_id
 *     outside the world, c_allgather's nranks not the world, c_allgather
 *     in place; a gradient through c_allreduce_max (no grad maker);
 *   - c_identity's gradient is a c_allreduce_sum across places.
 * Across processes: test_collective_mpi.c. */
#include "tests/unit/collective_case.h"

#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#include "pe/passes.h"

typedef struct {
    int threads;      /* ExecutionStrategy.num_threads (0: default) */
    bool sequential;  /* enable_sequential_execution */
    bool memory;      /* memory_optimize */
} cc_cfg;

static pe_status make_pe(const pe_program *p, int n, pe_scope *scope, const cc_cfg *c, pe_parallel_executor **pe) {
    pe_place pl[4];
    for (int i = 0; i < 4; i++) pl[i] = pe_place_cpu(i);
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.exec_strategy.num_threads = c->threads;
    o.build_strategy.enable_sequential_execution = c->sequential;
    o.build_strategy.memory_optimize = c->memory;
    return pe_parallel_executor_new(pl, n, p, scope, &o, pe);
}

/* n places; root / reduce_root ranks; runs `runs` times. */
static void run_world(int n, int root, int reduce_root, const cc_cfg *c, int runs) {
    pe_program *p = cc_program(n, root, reduce_root);
    pe_scope *scope = pe_scope_new(NULL);
    pe_parallel_executor *pe;
    if (make_pe(p, n, scope, c, &pe) != PE_OK) fail_msg("%d places: %s", n, pe_last_error());
    cc_run(pe, 0, n, n, root, reduce_root, runs);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

static void test_one_place(void **state) {
    (void)state;
    run_world(1, 0, 0, &(cc_cfg){0}, 2);
}

static void test_two_places(void **state) {
    (void)state;
    run_world(2, 1, 0, &(cc_cfg){0}, 3);
    run_world(2, 0, 1, &(cc_cfg){.threads = 1}, 2); /* both places on one pool thread */
    run_world(2, 1, 1, &(cc_cfg){.sequential = true}, 2);
}

static void test_three_places(void **state) {
    (void)state;
    run_world(3, 2, 1, &(cc_cfg){0}, 3);
    run_world(3, 0, 2, &(cc_cfg){.threads = 2, .memory = true}, 2);
}

/* The timeline names a program's collectives by op type, on each place's comm track. */
static void test_timeline(void **state) {
    (void)state;
    char prefix[128], file[160];
    snprintf(prefix, sizeof prefix, "/tmp/pe_test_collective_tl.%d", (int)getpid());
    pe_program *p = cc_program(2, 1, 0);
    pe_scope *scope = pe_scope_new(NULL);
    pe_place pl[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.exec_strategy.timeline_path = prefix;
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, 2, p, scope, &o, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    cc_run(pe, 0, 2, 2, 1, 0, 1);
    snprintf(file, sizeof file, "%s", pe_pe_timeline_path(pe));
    assert_int_equal(pe_pe_write_timeline(pe, NULL), PE_OK);
    FILE *f = fopen(file, "rb");
    if (!f) fail_msg("no timeline file %s", file);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *want[] = {"\"cat\":\"comm\",\"name\":\"c_allreduce_max\"", "\"cat\":\"comm\",\"name\":\"c_broadcast\"",
                          "\"name\":\"c_allgather\",\"args\":{\"var\":\"x\",\"out\":\"gather\"",
                          "\"cat\":\"op\",\"name\":\"c_allreduce_prod\"",
                          "\"name\":\"c_scatter\",\"args\":{\"var\":\"z\",\"out\":\"scat\""};
    for (int i = 0; i < 5; i++)
        if (!strstr(buf, want[i])) fail_msg("%s lacks %s", file, want[i]);
    pe_parallel_executor_free(pe); /* writes the file once more */
    unlink(file);
    pe_scope_free(scope);
    pe_program_free(p);
}

/* The single-place Executor: every collective over one rank is Out = X. */
static void test_executor_world_of_one(void **state) {
    (void)state;
    pe_program *p = cc_program(1, 0, 0);
    pe_tensor *x = cc_input(0), *z = cc_zinput(0, 1);
    pe_tensor *out[CC_N_FETCH];
    for (int k = 0; k < CC_N_FETCH; k++) out[k] = pe_tensor_new();
    assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}, {"z", z}}, 2, k_cc_fetch, CC_N_FETCH, out), PE_OK);
    cc_check(out, 0, 1, 1, 0, 0);
    for (int k = 0; k < CC_N_FETCH; k++) pe_tensor_free(out[k]);
    pe_tensor_free(x);
    pe_tensor_free(z);
    pe_program_free(p);
}

/* A one-op program x -> out with one int attr. */
static pe_program *one_op(const char *type, const char *attr, int v, const char *out) {
    pe_program *p = pe_program_new();
    cc_var(p, "x", -1);
    if (strcmp(out, "x")) cc_var(p, out, -1);
    cc_op(p, type, "x", out, attr, v);
    return p;
}

/* Building a ParallelExecutor on n places fails naming each needle. */
static void expect_build_error(pe_program *p, int n, const char *a, const char *b) {
    pe_scope *scope = pe_scope_new(NULL);
    pe_parallel_executor *pe = NULL;
    if (make_pe(p, n, scope, &(cc_cfg){0}, &pe) == PE_OK) fail_msg("built; want an error with '%s'", a);
    tu_assert_error_has(a, b, NULL);
    assert_null(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

static void test_errors(void **state) {
    (void)state;
    expect_build_error(one_op("c_allreduce_sum", "ring_id", 1, "y"), 2, "c_allreduce_sum", "ring_id 1");
    expect_build_error(one_op("c_sync_comm_stream", "ring_id", 3, "y"), 2, "c_sync_comm_stream", "ring_id 3");
    expect_build_error(one_op("c_broadcast", "root", 2, "y"), 2, "c_broadcast", "root 2 is not a rank");
    expect_build_error(one_op("c_broadcast", "root", -1, "y"), 3, "c_broadcast", "root -1");
    expect_build_error(one_op("c_reduce_sum", "root_id", 3, "y"), 3, "c_reduce_sum", "root_id 3");
    expect_build_error(one_op("c_allgather", "nranks", 3, "y"), 2, "c_allgather", "nranks 3");
    expect_build_error(one_op("c_allgather", "nranks", 2, "x"), 2, "c_allgather", "must be another var");
    expect_build_error(one_op("c_scatter", "nranks", 3, "y"), 2, "c_scatter", "nranks 3");
    /* the single-place Executor: a world of one rank */
    pe_tensor *x = cc_input(0), *y = pe_tensor_new();
    pe_program *p = one_op("c_broadcast", "root", 1, "y");
    assert_int_not_equal(tu_run(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"y"}, 1, &y), PE_OK);
    tu_assert_error_has("c_broadcast", "root 1", NULL);
    pe_program_free(p);
    p = one_op("c_allgather", "nranks", 2, "y");
    assert_int_not_equal(tu_run(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"y"}, 1, &y), PE_OK);
    tu_assert_error_has("c_allgather", "nranks 2", NULL);
    pe_program_free(p);
    p = one_op("c_identity", "ring_id", 2, "y");
    assert_int_not_equal(tu_run(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"y"}, 1, &y), PE_OK);
    tu_assert_error_has("c_identity", "ring_id 2", NULL);
    pe_program_free(p);
    pe_tensor_free(x);
    pe_tensor_free(y);
}

/* Every place must pass the same shape: an uneven split of a dict feed
 * (3 rows on 2 places) is an error naming the op, not a hang. */
static void test_uneven_split(void **state) {
    (void)state;
    pe_program *p = one_op("c_allreduce_max", NULL, 0, "y");
    pe_scope *scope = pe_scope_new(NULL);
    pe_parallel_executor *pe;
    if (make_pe(p, 2, scope, &(cc_cfg){0}, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, CC_COLS}, NULL), *y = pe_tensor_new();
    assert_int_not_equal(pe_run(pe, (pe_feed[]){{"x", x}}, 1, (const char *[]){"y"}, 1, true, &y), PE_OK);
    tu_assert_error_has("op c_allreduce_max (block 0 op 0) on 'y': cpu:1 has ", " elements of float32, place 0 has ",
                        "split unevenly");
    /* the executor stays usable */
    pe_tensor *x4 = cc_input(0);
    if (pe_run(pe, (pe_feed[]){{"x", x4}}, 1, (const char *[]){"y"}, 1, true, &y) != PE_OK)
        fail_msg("%s", pe_last_error());
    tu_assert_dims(y, 2, (int64_t[]){CC_ROWS, CC_COLS});
    pe_tensor_free(x4);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

/* A gradient that must flow through an op without a grad maker is an
 * error naming it; c_identity's is a c_allreduce_sum. */
static void test_gradients(void **state) {
    (void)state;
    pe_program *p = one_op("c_allreduce_max", NULL, 0, "y");
    pe_block_find_var(&p->blocks[0], "x")->stop_gradient = false;
    char *g[1] = {NULL};
    assert_int_not_equal(pe_gradients(p, (const char *[]){"y"}, 1, (const char *[]){"x"}, 1, g), PE_OK);
    tu_assert_error_has("c_allreduce_max", NULL, NULL);
    free(g[0]);
    pe_program_free(p);

    /* y = c_identity(x); loss-like z = y (fetched gradient of x = c_allreduce_sum(y@GRAD)) */
    p = one_op("c_identity", NULL, 0, "y");
    pe_block_find_var(&p->blocks[0], "x")->stop_gradient = false;
    assert_int_equal(pe_gradients(p, (const char *[]){"y"}, 1, (const char *[]){"x"}, 1, g), PE_OK);
    assert_non_null(g[0]);
    const pe_block *b = &p->blocks[0];
    bool found = false;
    for (int i = 0; i < b->n_ops; i++) found = found || !strcmp(b->ops[i].type, "c_allreduce_sum");
    assert_true(found);
    /* on 2 places: y@GRAD is 1 per element on each place, so x@GRAD = 2 */
    pe_scope *scope = pe_scope_new(NULL);
    pe_parallel_executor *pe;
    if (make_pe(p, 2, scope, &(cc_cfg){0}, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, CC_COLS}, NULL), *gx = pe_tensor_new();
    const char *fetch[] = {g[0]};
    if (pe_run(pe, (pe_feed[]){{"x", x}}, 1, fetch, 1, true, &gx) != PE_OK) fail_msg("%s", pe_last_error());
    tu_assert_dims(gx, 2, (int64_t[]){4, CC_COLS});
    for (int i = 0; i < 4 * CC_COLS; i++) assert_true(tu_get(gx, i) == 2.0);
    pe_tensor_free(x);
    pe_tensor_free(gx);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    free(g[0]);
    pe_program_free(p);
}

int main(void) {
    omp_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_place),
        cmocka_unit_test(test_two_places),
        cmocka_unit_test(test_three_places),
        cmocka_unit_test(test_executor_world_of_one),
        cmocka_unit_test(test_timeline),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_uneven_split),
        cmocka_unit_test(test_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
