/* tests/unit/test_check_nan_inf.c — FLAGS_check_nan_inf
 * (ExecutionStrategy.check_nan_inf, pe_executor_set_check_nan_inf): a NaN
 * (0/0), +Inf (a product that overflows float32) or -Inf (a scale that
 * does) fails the
 * run with the op's type and index, the place, the output slot and var,
 * the element and what it holds — on 1 and 3 places and with the
 * single-place executor; the same programs run without error when the
 * switch is off; the collectives' sums are checked (an allreduce that
 * overflows, with and without the sharded optimizer, completing at once or
 * through a work's callback on another thread); a training run with
 * the switch on gives the bits of the run with it off; the runtime scan
 * finds the first non-finite value of every float dtype. (PE has no log or
 * exp op; 0/0 and overflowing products make the same values.) */
#include "tests/unit/models.h"
#include "executor/pe_internal.h"
#include "runtime/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* a = scale(x, 1) (op 0), out = <type>(a, a) or scale(a, -1e37) (op 1); x [-1, 4] float32. */
static pe_program *make_prog(const char *type) {
    pe_program *p = pe_program_new();
    tm_var(p, "x", PE_DTYPE_FP32, 2, (int64_t[]){-1, 4});
    tm_var(p, "a", PE_DTYPE_FP32, 2, (int64_t[]){-1, 4});
    tm_var(p, "out", PE_DTYPE_FP32, 2, (int64_t[]){-1, 4});
    pe_op *op = tm_op1(p, "scale", "x", "a");
    pe_op_set_float(op, "scale", 1.0);
    if (!strcmp(type, "scale")) pe_op_set_float(tm_op1(p, "scale", "a", "out"), "scale", -1e37);
    else tm_op2(p, type, "a", "a", "out");
    return p;
}

/* 3 rows of ones (a / a, a * a, -1e37 a all finite), but for x[row, col] = bad. */
static pe_tensor *rows_with(int row, int col, double bad) {
    double v[12];
    for (int i = 0; i < 12; i++) v[i] = 1.0;
    v[row * 4 + col] = bad;
    return tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 4}, v);
}

typedef struct {
    const char *type;
    double bad;
    const char *what;
} nan_case;

static const nan_case k_cases[] = {
    {"elementwise_div", 0.0, "NaN"}, {"elementwise_mul", 1e20, "+Inf"}, {"scale", 100.0, "-Inf"}};

static pe_status run_pe(pe_program *p, int places, bool check, pe_tensor *x, pe_tensor *out) {
    pe_place pl[3] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2)};
    pe_scope *scope = pe_scope_new(NULL);
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.exec_strategy.check_nan_inf = check;
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, places, p, scope, &o, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    pe_feed feed = {"x", x};
    const char *fetch[] = {"out"};
    pe_status st = pe_run(pe, &feed, 1, fetch, 1, true, &out);
    /* the executor stays usable: a finite batch runs */
    pe_tensor *ok = rows_with(0, 0, 1.0);
    pe_feed feed_ok = {"x", ok};
    if (pe_run(pe, &feed_ok, 1, fetch, 1, true, &out) != PE_OK) fail_msg("%s", pe_last_error());
    pe_tensor_free(ok);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    return st;
}

static void test_parallel_executor_names_the_op(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof k_cases / sizeof *k_cases; c++) {
        pe_program *p = make_prog(k_cases[c].type);
        const char *type = k_cases[c].type;
        pe_tensor *x = rows_with(2, 1, k_cases[c].bad), *out = pe_tensor_new();
        for (int places = 1; places <= 3; places += 2) {
            /* 3 rows: on 3 places row 2 is place 2's element 1; on 1 place element 9 */
            char want[256];
            snprintf(want, sizeof want, "op 1 (%s) on cpu:%d: output Out 'out' has %s at element %d (FLAGS_check_nan_inf)",
                     type, places == 3 ? 2 : 0, k_cases[c].what, places == 3 ? 1 : 9);
            assert_int_equal(run_pe(p, places, true, x, out), PE_ERR_INVALID);
            assert_string_equal(pe_last_error(), want);
            /* off: the same program runs and returns the non-finite value */
            assert_int_equal(run_pe(p, places, false, x, out), PE_OK);
        }
        pe_tensor_free(x);
        pe_tensor_free(out);
        pe_program_free(p);
    }
}

static void test_single_place_executor(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof k_cases / sizeof *k_cases; c++) {
        pe_program *p = make_prog(k_cases[c].type);
        const char *type = k_cases[c].type;
        pe_tensor *x = rows_with(1, 3, k_cases[c].bad), *out = pe_tensor_new();
        pe_scope *scope = pe_scope_new(NULL);
        pe_executor *ex = pe_executor_new(pe_place_cpu(0));
        pe_feed feed = {"x", x};
        const char *fetch[] = {"out"};
        assert_int_equal(pe_executor_run(ex, p, 0, scope, &feed, 1, fetch, 1, &out), PE_OK);
        int64_t i;
        assert_int_equal(pe_find_nonfinite(pe_tensor_data(out), PE_DTYPE_FP32, 12, &i) != PE_FINITE, 1);
        assert_int_equal(i, 7);
        pe_executor_set_check_nan_inf(ex, true);
        char want[256];
        snprintf(want, sizeof want, "op 1 (%s) on cpu:0: output Out 'out' has %s at element 7 (FLAGS_check_nan_inf)",
                 type, k_cases[c].what);
        assert_int_equal(pe_executor_run(ex, p, 0, scope, &feed, 1, fetch, 1, &out), PE_ERR_INVALID);
        assert_string_equal(pe_last_error(), want);
        pe_executor_free(ex);
        pe_scope_free(scope);
        pe_tensor_free(x);
        pe_tensor_free(out);
        pe_program_free(p);
    }
}

/* w@GRAD = mean(x) per place (x [-1, 1]), allreduced across the places;
 * with `sgd` also w -= lr * w@GRAD (sharded or not). 3e38 on each of 3
 * places is finite; their sum is +Inf. `ranks`: over a group of rank
 * communicators, whose works complete through callbacks (the check then
 * runs in the callback: grad_buckets.c:coll_done). */
static void check_allreduce_overflow(bool sgd, bool shard, bool ranks) {
    pe_program *p = pe_program_new();
    tm_var(p, "x", PE_DTYPE_FP32, 2, (int64_t[]){-1, 1});
    tm_var(p, "w@GRAD", PE_DTYPE_FP32, 1, (int64_t[]){1});
    pe_var *w = pe_block_add_var(&p->blocks[0], "w", PE_DTYPE_FP32, 1, (int64_t[]){1});
    pe_var *lr = pe_block_add_var(&p->blocks[0], "lr", PE_DTYPE_FP32, 1, (int64_t[]){1});
    w->persistable = w->is_parameter = lr->persistable = true;
    pe_op *op = tm_op1(p, "mean", "x", "w@GRAD");
    pe_op_set_int(op, "op_role", PE_ROLE_BACKWARD);
    const char *rv[] = {"w", "w@GRAD"};
    pe_op_set_strings(op, "op_role_var", rv, 2);
    if (sgd) {
        op = pe_block_add_op(&p->blocks[0], "sgd");
        pe_op_add_input(op, "Param", "w");
        pe_op_add_input(op, "Grad", "w@GRAD");
        pe_op_add_input(op, "LearningRate", "lr");
        pe_op_add_output(op, "ParamOut", "w");
        pe_op_set_int(op, "op_role", PE_ROLE_OPTIMIZE);
        pe_op_set_strings(op, "op_role_var", rv, 2);
    }
    pe_scope *scope = pe_scope_new(NULL);
    pe_tensor *one = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, (double[]){1});
    assert_int_equal(pe_tensor_copy(pe_scope_var(scope, "w"), one, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_tensor_copy(pe_scope_var(scope, "lr"), one, pe_place_cpu(0)), PE_OK);
    pe_place pl[3] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.exec_strategy.check_nan_inf = true;
    o.build_strategy.shard_optimizer = shard;
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, 3, p, scope, &o, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    if (ranks) {
        pe_comm *r[3];
        assert_int_equal(pe_comm_inproc_world_new(3, 1, r), PE_OK);
        pe_comm_group *g = pe_comm_group_new(r, 3);
        assert_non_null(g);
        assert_int_equal(pe_pe_replace_comm(pe, g), PE_OK);
    }
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 1}, (double[]){3e38, 3e38, 3e38});
    pe_feed feed = {"x", x};
    assert_int_equal(pe_run(pe, &feed, 1, NULL, 0, true, NULL), PE_ERR_INVALID);
    const char *m = pe_last_error();
    if (!strstr(m, "allreduce on cpu:") || !strstr(m, ": output 'w@GRAD' has +Inf at element 0 (FLAGS_check_nan_inf)"))
        fail_msg("sgd %d shard %d ranks %d: %s", sgd, shard, ranks, m);
    pe_tensor_free(x);
    pe_tensor_free(one);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

static void test_collective_sums_are_checked(void **state) {
    (void)state;
    check_allreduce_overflow(false, false, false);
    check_allreduce_overflow(true, false, false);
    check_allreduce_overflow(true, true, false);
    check_allreduce_overflow(false, false, true);
    check_allreduce_overflow(true, false, true);
}

/* The MLP trained 4 steps with the switch on and off: the same bits. */
static void train(const tm_model *m, int places, bool check, pe_tensor **params) {
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.exec_strategy.check_nan_inf = check;
    tm_train(m, places, &o, 4, 9, check ? "check_nan_inf on" : "check_nan_inf off", params);
}

static void test_training_bits_unchanged(void **state) {
    (void)state;
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, true);
    tm_mlp(&m, 64, "relu", 32, "tanh");
    tm_minimize(&m, PE_OPT_ADAM, 0.01, NULL, 0);
    for (int places = 1; places <= 3; places += 2) {
        pe_tensor *off[16], *on[16];
        train(&m, places, false, off);
        train(&m, places, true, on);
        for (int i = 0; i < m.n_params; i++) {
            assert_int_equal(pe_tensor_nbytes(on[i]), pe_tensor_nbytes(off[i]));
            assert_memory_equal(pe_tensor_data(on[i]), pe_tensor_data(off[i]), pe_tensor_nbytes(off[i]));
        }
        tm_free_params(&m, off);
        tm_free_params(&m, on);
    }
    tm_model_free(&m);
}

/* The scan: the first non-finite value of each float dtype, past the first
 * block, and nothing for finite values and integers. */
static void test_scan_every_float_dtype(void **state) {
    (void)state;
    enum { N = 3000 };
    static float f[N];
    static double d[N];
    static uint16_t h[N], bf[N];
    for (int i = 0; i < N; i++) f[i] = 1.5f, d[i] = -2.5, h[i] = 0x3c00, bf[i] = 0x3f80; /* 1.0 in fp16 / bf16 */
    int64_t i = -1;
    assert_int_equal(pe_find_nonfinite(f, PE_DTYPE_FP32, N, &i), PE_FINITE);
    assert_int_equal(pe_find_nonfinite(d, PE_DTYPE_FP64, N, &i), PE_FINITE);
    assert_int_equal(pe_find_nonfinite(h, PE_DTYPE_FP16, N, &i), PE_FINITE);
    assert_int_equal(pe_find_nonfinite(bf, PE_DTYPE_BF16, N, &i), PE_FINITE);
    f[2500] = -INFINITY, f[2900] = NAN;
    assert_int_equal(pe_find_nonfinite(f, PE_DTYPE_FP32, N, &i), PE_NEG_INF);
    assert_int_equal(i, 2500);
    d[1030] = NAN, d[2000] = INFINITY;
    assert_int_equal(pe_find_nonfinite(d, PE_DTYPE_FP64, N, &i), PE_NAN);
    assert_int_equal(i, 1030);
    h[1500] = 0x7c00; /* +Inf */
    assert_int_equal(pe_find_nonfinite(h, PE_DTYPE_FP16, N, &i), PE_POS_INF);
    assert_int_equal(i, 1500);
    bf[7] = 0xffc1; /* a NaN */
    assert_int_equal(pe_find_nonfinite(bf, PE_DTYPE_BF16, N, &i), PE_NAN);
    assert_int_equal(i, 7);
    int32_t ints[4] = {-1, -1, -1, -1}; /* all bits set: not a float */
    assert_int_equal(pe_find_nonfinite(ints, PE_DTYPE_INT32, 4, &i), PE_FINITE);
    assert_string_equal(pe_nonfinite_name(PE_NEG_INF), "-Inf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parallel_executor_names_the_op),
        cmocka_unit_test(test_single_place_executor),
        cmocka_unit_test(test_collective_sums_are_checked),
        cmocka_unit_test(test_training_bits_unchanged),
        cmocka_unit_test(test_scan_every_float_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
