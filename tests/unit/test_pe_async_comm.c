/* tests/unit/test_pe_async_comm.c — the ParallelExecutor's collectives
 * through work handles: a handle returns PE_SCHED_PENDING and the work's
 * callback tells the scheduler (pe_sched_done), or, without a scheduler,
 * the run waits for the work.
 *
 * The executor's place group is replaced by one over in-process rank
 * communicators (pe_comm_inproc_world_new + pe_comm_group_new), which has no
 * direct path: every collective goes through the rendezvous, a work and
 * its callback, the way NCCL and the multi-process backends complete. The
 * MLP (float32, momentum) trained on 3 places must give the same bits as
 * with the default group, with per-var allreduce, fuse_all_reduce_ops
 * buckets, the reduce strategy, and sequential execution (the run waits
 * for each work). (Completion from another thread and errors of pending
 * handles: tests/unit/test_scheduler.c.)
 */
#include "tests/unit/models.h"
#include "executor/pe_internal.h"

#include <omp.h>

enum { PLACES = 3, STEPS = 8, ROWS = 13 };

typedef struct {
    bool ranks;      /* a group over rank communicators (the asynchronous path) */
    bool buckets;    /* fuse_all_reduce_ops */
    bool reduce;     /* reduce_strategy reduce */
    bool sequential; /* enable_sequential_execution */
} cfg;

static void train(const cfg *c, pe_tensor **params) {
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, false);
    tm_mlp(&m, 64, "relu", 32, "tanh");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m.startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[PLACES] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.exec_strategy.num_threads = 3;
    o.build_strategy.shard_optimizer = false; /* its tiles sum through the group synchronously */
    o.build_strategy.fuse_all_reduce_ops = c->buckets;
    o.build_strategy.reduce_strategy = c->reduce ? PE_REDUCE_REDUCE : PE_REDUCE_ALL_REDUCE;
    o.build_strategy.enable_sequential_execution = c->sequential;
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, PLACES, m.main, scope, &o, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    if (c->ranks) {
        pe_comm *ranks[PLACES];
        assert_int_equal(pe_comm_inproc_world_new(PLACES, 1, ranks), PE_OK);
        pe_comm_group *g = pe_comm_group_new(ranks, PLACES);
        assert_non_null(g);
        assert_null(g->direct);
        assert_int_equal(pe_pe_replace_comm(pe, g), PE_OK);
    }
    const char *fetch[] = {"loss"};
    pe_tensor *loss = pe_tensor_new();
    for (int step = 0; step < STEPS; step++) {
        pe_tensor *x, *y;
        tm_batch(&m, step, ROWS, &x, &y);
        pe_feed feed[2] = {{m.input, x}, {"label", y}};
        if (pe_run(pe, feed, 2, fetch, 1, true, &loss) != PE_OK) fail_msg("step %d: %s", step, pe_last_error());
        pe_tensor_free(x);
        pe_tensor_free(y);
    }
    tm_fetch_params(&m, pe, params);
    pe_tensor_free(loss);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
    tm_model_free(&m);
}

static void check(const cfg *async, const char *what) {
    cfg direct = *async;
    direct.ranks = false;
    pe_tensor *a[16], *b[16];
    train(&direct, a);
    train(async, b);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(pe_tensor_nbytes(a[i]), pe_tensor_nbytes(b[i]));
        if (memcmp(pe_tensor_data(a[i]), pe_tensor_data(b[i]), pe_tensor_nbytes(a[i])))
            fail_msg("%s: parameter %d differs from the direct group's", what, i);
        pe_tensor_free(a[i]);
        pe_tensor_free(b[i]);
    }
}

static void test_same_bits_through_works(void **state) {
    (void)state;
    check(&(cfg){.ranks = true}, "allreduce per gradient");
    check(&(cfg){.ranks = true, .buckets = true}, "fuse_all_reduce_ops buckets");
    check(&(cfg){.ranks = true, .reduce = true}, "reduce strategy");
    check(&(cfg){.ranks = true, .sequential = true}, "sequential execution");
}

/* A group over rank communicators of another size is refused. */
static void test_replace_checks_places(void **state) {
    (void)state;
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, false);
    tm_mlp(&m, 8, "relu", 8, "relu");
    pe_scope *scope = pe_scope_new(NULL);
    pe_place pl[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_parallel_executor *pe;
    assert_int_equal(pe_parallel_executor_new(pl, 2, m.main, scope, NULL, &pe), PE_OK);
    assert_int_equal(pe_pe_replace_comm(pe, pe_comm_inproc_new(3, 1)), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "collectives for 3 places, the executor has 2"));
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    tm_model_free(&m);
}

/* Every op's context carries its place's services: the place's rank of
 * the collectives (for ops that talk to other places). */
static void test_kernels_get_their_place_services(void **state) {
    (void)state;
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, false);
    tm_mlp(&m, 8, "relu", 8, "relu");
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m.startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[PLACES] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2)};
    pe_parallel_executor *pe;
    assert_int_equal(pe_parallel_executor_new(pl, PLACES, m.main, scope, NULL, &pe), PE_OK);
    pe_tensor *x, *y, *out = pe_tensor_new();
    tm_batch(&m, 0, 6, &x, &y);
    pe_feed feed[2] = {{m.input, x}, {"label", y}};
    const char *fetch[] = {"loss"};
    assert_int_equal(pe_run(pe, feed, 2, fetch, 1, true, &out), PE_OK);
    int n_ops = 0;
    for (int h = 0; h < pe->g->n_h; h++) {
        if (pe->g->h[h].kind != PE_HANDLE_OP) continue;
        const pe_op_ctx *c = &pe->ctxs[h];
        assert_non_null(c->svc);
        assert_non_null(c->svc->comm);
        assert_int_equal(pe_comm_rank(c->svc->comm), pe->g->h[h].place);
        assert_int_equal(pe_comm_size(c->svc->comm), PLACES);
        n_ops++;
    }
    assert_true(n_ops > 0);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(out);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
    tm_model_free(&m);
}

int main(void) {
    omp_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits_through_works),
        cmocka_unit_test(test_replace_checks_places),
        cmocka_unit_test(test_kernels_get_their_place_services),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
