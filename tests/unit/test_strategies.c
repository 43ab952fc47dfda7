/* tests/unit/test_strategies.c — every combination of the BuildStrategy
 * switches trains to the same parameters (issue 5): fuse_gemm_epilogue (fc),
 * fuse_elewise_add_act_ops, fuse_all_optimizer_ops, fuse_all_reduce_ops,
 * enable_inplace, memory_optimize and shard_optimizer — all 128
 * combinations — for the MLP and
 * the CNN on 1 and 3 places, compared with the run with every switch off
 * (float64, so any difference is a bug, not rounding: allclose rtol 1e-5).
 * Small caps make fuse_all_reduce_ops form several buckets. Also: the fused
 * optimizer's coalesced buffer, the reduce strategy refusing clipping, and
 * sync_batch_norm refusing a training batch_norm on several places. */
#include "tests/unit/models.h"

#include <stdio.h>

#define STEPS 4
#define ROWS 9 /* splits 3,3,3 */

static void train(const tm_model *m, int places, unsigned mask, pe_tensor **out) {
    pe_pe_options o;
    pe_pe_options_default(&o);
    pe_build_strategy *bs = &o.build_strategy;
    bs->fuse_gemm_epilogue = mask & 1;
    bs->fuse_elewise_add_act_ops = mask & 2;
    bs->fuse_all_optimizer_ops = mask & 4;
    bs->fuse_all_reduce_ops = mask & 8;
    bs->enable_inplace = mask & 16;
    bs->memory_optimize = mask & 32;
    bs->shard_optimizer = mask & 64;
    bs->fuse_grad_size_in_MB = 0.05;
    bs->fuse_first_grad_size_in_MB = 0.001;
    char what[32];
    snprintf(what, sizeof what, "switches 0x%x", mask);
    tm_train(m, places, &o, STEPS, ROWS, what, out);
}

static void check(bool cnn) {
    tm_model m = tm_model_new(PE_DTYPE_FP64, 0.0, true);
    if (cnn) tm_cnn(&m, "img", 32);
    else tm_mlp(&m, 64, "relu", 32, "tanh");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    for (int places = 1; places <= 3; places += 2) {
        pe_tensor *ref[16], *got[16];
        train(&m, places, 0, ref);
        for (unsigned mask = 1; mask < 128; mask++) {
            train(&m, places, mask, got);
            for (int i = 0; i < m.n_params; i++)
                for (int64_t e = 0; e < pe_tensor_numel(ref[i]); e++) {
                    double a = tu_get(got[i], e), b = tu_get(ref[i], e);
                    if (fabs(a - b) > 1e-5 * fabs(b) + 1e-12)
                        fail_msg("%s places=%d switches 0x%x: %s[%lld] %.12g vs all off %.12g", cnn ? "cnn" : "mlp",
                                 places, mask, m.params[i], (long long)e, a, b);
                }
            tm_free_params(&m, got);
        }
        tm_free_params(&m, ref);
    }
    tm_model_free(&m);
}

static void test_mlp_all_switch_combinations(void **state) {
    (void)state;
    check(false);
}

static void test_cnn_all_switch_combinations(void **state) {
    (void)state;
    check(true);
}

/* fuse_all_optimizer_ops coalesces each place's parameters (and velocities)
 * into one buffer, in parameter order, and still trains to the same bits. */
static void test_fused_optimizer_coalesces_parameters(void **state) {
    (void)state;
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, true);
    tm_mlp(&m, 64, "relu", 32, "tanh");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    pe_tensor *ref[16];
    train(&m, 2, 0, ref);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m.startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.build_strategy.fuse_all_optimizer_ops = true;
    o.build_strategy.shard_optimizer = false; /* which would take precedence on 2 places */
    pe_parallel_executor *pe;
    assert_int_equal(pe_parallel_executor_new(pl, 2, m.main, scope, &o, &pe), PE_OK);
    for (int p = 0; p < 2; p++)
        for (int i = 1; i < m.n_params; i++) {
            const pe_tensor *a = pe_scope_find_var(pe_place_scope(pe, p), m.params[i - 1]);
            const pe_tensor *b = pe_scope_find_var(pe_place_scope(pe, p), m.params[i]);
            assert_ptr_equal((const char *)pe_tensor_data(a) + pe_tensor_nbytes(a), pe_tensor_data(b));
        }
    const char *fetch[] = {"loss"};
    pe_tensor *loss = pe_tensor_new();
    for (int s = 0; s < STEPS; s++) {
        pe_tensor *x, *y;
        tm_batch(&m, s, ROWS, &x, &y);
        pe_feed feed[2] = {{m.input, x}, {"label", y}};
        assert_int_equal(pe_run(pe, feed, 2, fetch, 1, true, &loss), PE_OK);
        pe_tensor_free(x);
        pe_tensor_free(y);
    }
    pe_tensor *got[16];
    tm_fetch_params(&m, pe, got);
    for (int i = 0; i < m.n_params; i++)
        assert_memory_equal(pe_tensor_data(got[i]), pe_tensor_data(ref[i]), pe_tensor_nbytes(ref[i]));
    tm_free_params(&m, got);
    tm_free_params(&m, ref);
    pe_tensor_free(loss);
    pe_parallel_executor_free(pe);
    /* the parameters outlive the executor in the caller's scope */
    for (int i = 0; i < m.n_params; i++) assert_non_null(pe_tensor_data(pe_scope_find_var(scope, m.params[i])));
    pe_executor_free(ex);
    pe_scope_free(scope);
    tm_model_free(&m);
}

/* The reduce strategy with global-norm clipping is refused, not run wrong. */
static void test_reduce_with_clipping_is_an_error(void **state) {
    (void)state;
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, true);
    tm_mlp(&m, 16, "relu", 8, "relu");
    pe_optimizer opt;
    pe_optimizer_default(&opt, PE_OPT_SGD, 0.1);
    opt.clip_global_norm = 1.0;
    assert_int_equal(pe_optimizer_minimize(&opt, m.main, m.startup, "loss", NULL, 0, NULL, 0, NULL, 0, NULL, NULL), PE_OK);
    pe_scope *scope = pe_scope_new(NULL);
    pe_place pl[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.build_strategy.reduce_strategy = PE_REDUCE_REDUCE;
    pe_parallel_executor *pe = NULL;
    assert_int_equal(pe_parallel_executor_new(pl, 2, m.main, scope, &o, &pe), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "clip_by_global_norm"));
    assert_null(pe);
    /* one place has nothing to reduce: fine */
    assert_int_equal(pe_parallel_executor_new(pl, 1, m.main, scope, &o, &pe), PE_OK);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    tm_model_free(&m);
}

/* sync_batch_norm: PE has no cross-place batch norm. A training batch_norm
 * on 2 places is refused naming the op; on 1 place, in inference
 * (is_test), or with the switch off, the executor is built. */
static void test_sync_batch_norm(void **state) {
    (void)state;
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, true);
    tm_var(m.main, m.input, m.dt, 2, (int64_t[]){-1, 8});
    const char *stats[] = {"bn.scale", "bn.bias", "bn.mean", "bn.var"};
    for (int i = 0; i < 4; i++) tm_param(&m, stats[i], 1, (int64_t[]){8}, PE_INIT_CONSTANT);
    tm_var(m.main, "bn.y", m.dt, 2, (int64_t[]){-1, 8});
    pe_op *bn = pe_block_add_op(&m.main->blocks[0], "batch_norm");
    pe_op_add_input(bn, "X", m.input);
    pe_op_add_input(bn, "Scale", "bn.scale");
    pe_op_add_input(bn, "Bias", "bn.bias");
    pe_op_add_input(bn, "Mean", "bn.mean");
    pe_op_add_input(bn, "Variance", "bn.var");
    pe_op_add_output(bn, "Y", "bn.y");
    pe_scope *scope = pe_scope_new(NULL);
    pe_place pl[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.build_strategy.sync_batch_norm = true;
    pe_parallel_executor *pe = NULL;
    assert_int_equal(pe_parallel_executor_new(pl, 2, m.main, scope, &o, &pe), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "BuildStrategy.sync_batch_norm: batch_norm (block 0 op 0)"));
    assert_null(pe);
    /* one place: the statistics are the whole batch's */
    assert_int_equal(pe_parallel_executor_new(pl, 1, m.main, scope, &o, &pe), PE_OK);
    pe_parallel_executor_free(pe);
    /* inference: no batch statistics */
    pe_op_set_int(&m.main->blocks[0].ops[0], "is_test", 1);
    assert_int_equal(pe_parallel_executor_new(pl, 2, m.main, scope, &o, &pe), PE_OK);
    pe_parallel_executor_free(pe);
    /* the switch off: per-place statistics, as before */
    pe_op_set_int(&m.main->blocks[0].ops[0], "is_test", 0);
    o.build_strategy.sync_batch_norm = false;
    assert_int_equal(pe_parallel_executor_new(pl, 2, m.main, scope, &o, &pe), PE_OK);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    tm_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_all_switch_combinations),
        cmocka_unit_test(test_cnn_all_switch_combinations),
        cmocka_unit_test(test_fused_optimizer_coalesces_parameters),
        cmocka_unit_test(test_reduce_with_clipping_is_an_error),
        cmocka_unit_test(test_sync_batch_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
