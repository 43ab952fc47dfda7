/* tests/unit/test_ops_loss.c — forward values of the ops that came with
 * training, against hand-computed numbers: leaky_relu, gelu (erf and tanh
 * forms), log_softmax, softmax_with_cross_entropy (hard labels with an
 * ignored row, [N] labels, soft labels, a middle class axis, huge logits),
 * cross_entropy, square_error_cost, reduce_sum / reduce_mean (one, several,
 * negative and all dims, keep_dim, int64) and dropout (mask statistics,
 * determinism per seed, per step and across thread counts, both
 * implementations in both modes, StepOut, its gradient); plus every error
 * case with its message. Gradients are checked in test_grad_elementwise.c. */
#include "tests/unit/op_test_util.h"

#include <stdlib.h>
#include <string.h>

#define D(...) (int64_t[]){__VA_ARGS__}

/* ---- a one-op program harness ---------------------------------------------------- */

typedef struct {
    pe_program *p;
    pe_op *op;
    pe_feed feeds[8];
    pe_tensor *owned[8];
    int nf;
} h_t;

static void h_begin(h_t *h, const char *type) {
    memset(h, 0, sizeof *h);
    h->p = pe_program_new();
    h->op = pe_block_add_op(&h->p->blocks[0], type);
    assert_non_null(h->op);
}

/* Feeds t (ownership taken) as `var` in `slot`. */
static void h_in(h_t *h, const char *slot, const char *var, pe_tensor *t) {
    if (!pe_block_find_var(&h->p->blocks[0], var)) tu_declare(h->p, var, t);
    assert_int_equal(pe_op_add_input(h->op, slot, var), PE_OK);
    h->feeds[h->nf].name = var;
    h->feeds[h->nf].tensor = t;
    h->owned[h->nf++] = t;
}

static void h_out(h_t *h, const char *slot, const char *var) {
    if (!pe_block_find_var(&h->p->blocks[0], var))
        assert_non_null(pe_block_add_var(&h->p->blocks[0], var, PE_DTYPE_FP32, 0, NULL));
    assert_int_equal(pe_op_add_output(h->op, slot, var), PE_OK);
}

/* Runs with nt threads; outs[i] are new tensors (caller frees). */
static pe_status h_run(h_t *h, int nt, const char *const *fetch, int n, pe_tensor **outs) {
    for (int i = 0; i < n; i++) outs[i] = pe_tensor_new();
    tu_declare_outputs(h->p, h->feeds, h->nf);
    pe_scope *s = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, nt);
    pe_status st = pe_executor_run(ex, h->p, 0, s, h->feeds, h->nf, fetch, n, outs);
    pe_executor_free(ex);
    pe_scope_free(s);
    return st;
}

static pe_tensor *h_run1(h_t *h, const char *var) {
    pe_tensor *o;
    pe_status st = h_run(h, 1, &var, 1, &o);
    if (st != PE_OK) fail_msg("run failed: %s", pe_last_error());
    return o;
}

static void h_end(h_t *h) {
    for (int i = 0; i < h->nf; i++) pe_tensor_free(h->owned[i]);
    pe_program_free(h->p);
}

static void assert_error_has(const char *a, const char *b) {
    const char *m = pe_last_error();
    if (a && !strstr(m, a)) fail_msg("error '%s' lacks '%s'", m, a);
    if (b && !strstr(m, b)) fail_msg("error '%s' lacks '%s'", m, b);
}

static pe_tensor *f32(int nd, const int64_t *dims, const double *v) { return tu_tensor(PE_DTYPE_FP32, nd, dims, v); }
static pe_tensor *f64(int nd, const int64_t *dims, const double *v) { return tu_tensor(PE_DTYPE_FP64, nd, dims, v); }
static pe_tensor *i64(int nd, const int64_t *dims, const double *v) { return tu_tensor(PE_DTYPE_INT64, nd, dims, v); }

/* ---- activations ----------------------------------------------------------------------- */

static void test_leaky_relu(void **state) {
    (void)state;
    h_t h;
    h_begin(&h, "leaky_relu");
    h_in(&h, "X", "x", f32(1, D(5), (double[]){-2, -0.5, 0, 1.5, 3}));
    h_out(&h, "Out", "y");
    pe_op_set_float(h.op, "alpha", 0.1);
    pe_tensor *y = h_run1(&h, "y");
    tu_assert_close(y, (double[]){-0.2, -0.05, 0, 1.5, 3}, 5, 1e-7);
    pe_tensor_free(y);
    h_end(&h);
    /* default alpha 0.02, fp64 */
    h_begin(&h, "leaky_relu");
    h_in(&h, "X", "x", f64(2, D(1, 2), (double[]){-4, 2}));
    h_out(&h, "Out", "y");
    y = h_run1(&h, "y");
    assert_int_equal(y->dtype, PE_DTYPE_FP64);
    tu_assert_close(y, (double[]){-0.08, 2}, 2, 1e-15);
    pe_tensor_free(y);
    h_end(&h);
}

static void test_gelu(void **state) {
    (void)state;
    const double x[] = {-1, 0, 1, 2, -3};
    const double erf_form[] = {-0.15865525393145707, 0.0, 0.8413447460685429, 1.9544997361036416, -0.00404969409489031};
    const double tanh_form[] = {-0.15880800939172324, 0.0, 0.8411919906082768, 1.954597694087775, -0.0036373920817729943};
    for (int approx = 0; approx < 2; approx++)
        for (int dt = 0; dt < 2; dt++) {
            h_t h;
            h_begin(&h, "gelu");
            h_in(&h, "X", "x", dt ? f64(1, D(5), x) : f32(1, D(5), x));
            h_out(&h, "Out", "y");
            pe_op_set_bool(h.op, "approximate", approx);
            pe_tensor *y = h_run1(&h, "y");
            tu_assert_close(y, approx ? tanh_form : erf_form, 5, dt ? 1e-14 : 1e-6);
            pe_tensor_free(y);
            h_end(&h);
        }
}

static void test_log_softmax(void **state) {
    (void)state;
    h_t h;
    h_begin(&h, "log_softmax");
    h_in(&h, "X", "x", f32(2, D(2, 3), (double[]){1, 2, 3, 1001, 1002, 1003}));
    h_out(&h, "Out", "y");
    pe_tensor *y = h_run1(&h, "y");
    const double w[] = {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806};
    tu_assert_close(y, (double[]){w[0], w[1], w[2], w[0], w[1], w[2]}, 6, 1e-6);
    pe_tensor_free(y);
    h_end(&h);
    /* axis 0 of [3, 2]: columns */
    h_begin(&h, "log_softmax");
    h_in(&h, "X", "x", f64(2, D(3, 2), (double[]){1, 5, 2, 5, 3, 5}));
    h_out(&h, "Out", "y");
    pe_op_set_int(h.op, "axis", 0);
    y = h_run1(&h, "y");
    const double l3 = -1.0986122886681098;
    tu_assert_close(y, (double[]){w[0], l3, w[1], l3, w[2], l3}, 6, 1e-14);
    pe_tensor_free(y);
    h_end(&h);
    /* bad axis */
    h_begin(&h, "log_softmax");
    h_in(&h, "X", "x", f32(2, D(2, 3), NULL));
    h_out(&h, "Out", "y");
    pe_op_set_int(h.op, "axis", 2);
    pe_tensor *o;
    const char *f[] = {"y"};
    assert_int_equal(h_run(&h, 1, f, 1, &o), PE_ERR_INVALID);
    assert_error_has("axis = 2", "'x'");
    pe_tensor_free(o);
    h_end(&h);
}

/* ---- losses ------------------------------------------------------------------------------ */

static void test_softmax_with_cross_entropy_hard(void **state) {
    (void)state;
    h_t h;
    h_begin(&h, "softmax_with_cross_entropy");
    h_in(&h, "Logits", "x", f32(2, D(4, 3), (double[]){1, 2, 3, 1, 1, 1, 0, 0, 10, 1000, 0, -1000}));
    h_in(&h, "Label", "lab", i64(2, D(4, 1), (double[]){2, 0, -100, 0}));
    h_out(&h, "Softmax", "sm");
    h_out(&h, "Loss", "loss");
    pe_tensor *o[2];
    assert_int_equal(h_run(&h, 1, (const char *[]){"sm", "loss"}, 2, o), PE_OK);
    tu_assert_dims(o[1], 2, D(4, 1));
    tu_assert_close(o[1], (double[]){0.4076059644443806, 1.0986122886681098, 0, 0}, 4, 1e-6);
    tu_assert_close(o[0], (double[]){0.09003057317038046, 0.24472847105479767, 0.6652409557748219, 1.0 / 3, 1.0 / 3,
                                     1.0 / 3, 4.5395807829510914e-05, 4.5395807829510914e-05, 0.9999092083843409, 1, 0, 0},
                    12, 1e-6);
    pe_tensor_free(o[0]);
    pe_tensor_free(o[1]);
    h_end(&h);
    /* [N] int32 labels, a custom ignore_index, a huge logit gap -> loss 1000, not inf */
    h_begin(&h, "softmax_with_cross_entropy");
    h_in(&h, "Logits", "x", f64(2, D(2, 3), (double[]){1000, 0, -1000, 1, 2, 3}));
    h_in(&h, "Label", "lab", tu_tensor(PE_DTYPE_INT32, 1, D(2), (double[]){1, 7}));
    h_out(&h, "Softmax", "sm");
    h_out(&h, "Loss", "loss");
    pe_op_set_int(h.op, "ignore_index", 7);
    pe_tensor *loss = h_run1(&h, "loss");
    tu_assert_close(loss, (double[]){1000, 0}, 2, 1e-12);
    pe_tensor_free(loss);
    h_end(&h);
}

static void test_softmax_with_cross_entropy_soft_and_axis(void **state) {
    (void)state;
    h_t h;
    h_begin(&h, "softmax_with_cross_entropy");
    h_in(&h, "Logits", "x", f32(2, D(2, 3), (double[]){1, 2, 3, 1, 1, 1}));
    h_in(&h, "Label", "lab", f32(2, D(2, 3), (double[]){0, 0, 1, 0.5, 0.25, 0.25}));
    h_out(&h, "Softmax", "sm");
    h_out(&h, "Loss", "loss");
    pe_op_set_bool(h.op, "soft_label", true);
    pe_tensor *loss = h_run1(&h, "loss");
    tu_assert_close(loss, (double[]){0.4076059644443806, 1.0986122886681098}, 2, 1e-6);
    pe_tensor_free(loss);
    h_end(&h);
    /* class axis 1 of [1, 3, 2]: columns (1,1,1)->label 2 and (1,2,3)->label 2 */
    h_begin(&h, "softmax_with_cross_entropy");
    h_in(&h, "Logits", "x", f64(3, D(1, 3, 2), (double[]){1, 1, 1, 2, 1, 3}));
    h_in(&h, "Label", "lab", i64(3, D(1, 1, 2), (double[]){2, 2}));
    h_out(&h, "Softmax", "sm");
    h_out(&h, "Loss", "loss");
    pe_op_set_int(h.op, "axis", 1);
    pe_tensor *o[2];
    assert_int_equal(h_run(&h, 1, (const char *[]){"sm", "loss"}, 2, o), PE_OK);
    tu_assert_dims(o[1], 3, D(1, 1, 2));
    tu_assert_close(o[1], (double[]){1.0986122886681098, 0.4076059644443806}, 2, 1e-12);
    tu_assert_close(o[0], (double[]){1.0 / 3, 0.09003057317038046, 1.0 / 3, 0.24472847105479767, 1.0 / 3,
                                     0.6652409557748219}, 6, 1e-12);
    pe_tensor_free(o[0]);
    pe_tensor_free(o[1]);
    h_end(&h);
}

static void test_softmax_with_cross_entropy_errors(void **state) {
    (void)state;
    pe_tensor *o[2];
    const char *f[] = {"sm", "loss"};
    h_t h;
    /* label out of range */
    h_begin(&h, "softmax_with_cross_entropy");
    h_in(&h, "Logits", "x", f32(2, D(2, 3), NULL));
    h_in(&h, "Label", "lab", i64(2, D(2, 1), (double[]){1, 3}));
    h_out(&h, "Softmax", "sm");
    h_out(&h, "Loss", "loss");
    assert_int_equal(h_run(&h, 1, f, 2, o), PE_ERR_INVALID);
    assert_error_has("'lab' element 1 is 3", "ignore_index");
    pe_tensor_free(o[0]);
    pe_tensor_free(o[1]);
    h_end(&h);
    /* float labels without soft_label */
    h_begin(&h, "softmax_with_cross_entropy");
    h_in(&h, "Logits", "x", f32(2, D(2, 3), NULL));
    h_in(&h, "Label", "lab", f32(2, D(2, 3), NULL));
    h_out(&h, "Softmax", "sm");
    h_out(&h, "Loss", "loss");
    assert_int_equal(h_run(&h, 1, f, 2, o), PE_ERR_INVALID);
    assert_error_has("hard Label 'lab'", "soft_label");
    pe_tensor_free(o[0]);
    pe_tensor_free(o[1]);
    h_end(&h);
    /* soft labels of the wrong shape */
    h_begin(&h, "softmax_with_cross_entropy");
    h_in(&h, "Logits", "x", f32(2, D(2, 3), NULL));
    h_in(&h, "Label", "lab", f32(2, D(2, 1), NULL));
    h_out(&h, "Softmax", "sm");
    h_out(&h, "Loss", "loss");
    pe_op_set_bool(h.op, "soft_label", true);
    assert_int_equal(h_run(&h, 1, f, 2, o), PE_ERR_INVALID);
    assert_error_has("soft Label 'lab'", "[2, 3]");
    pe_tensor_free(o[0]);
    pe_tensor_free(o[1]);
    h_end(&h);
}

static void test_cross_entropy(void **state) {
    (void)state;
    h_t h;
    h_begin(&h, "cross_entropy");
    h_in(&h, "X", "x", f32(2, D(3, 3), (double[]){0.2, 0.3, 0.5, 0.1, 0.8, 0.1, 0.3, 0.3, 0.4}));
    h_in(&h, "Label", "lab", i64(2, D(3, 1), (double[]){2, 1, 5}));
    h_out(&h, "Y", "y");
    pe_op_set_int(h.op, "ignore_index", 5);
    pe_tensor *y = h_run1(&h, "y");
    tu_assert_dims(y, 2, D(3, 1));
    tu_assert_close(y, (double[]){0.6931471805599453, 0.2231435513142097, 0}, 3, 1e-6);
    pe_tensor_free(y);
    h_end(&h);
    h_begin(&h, "cross_entropy");
    h_in(&h, "X", "x", f64(2, D(2, 3), (double[]){0.2, 0.3, 0.5, 0.1, 0.8, 0.1}));
    h_in(&h, "Label", "lab", f64(2, D(2, 3), (double[]){0, 0, 1, 0.5, 0.5, 0}));
    h_out(&h, "Y", "y");
    pe_op_set_bool(h.op, "soft_label", true);
    y = h_run1(&h, "y");
    tu_assert_close(y, (double[]){0.6931471805599453, 1.2628643221541278}, 2, 1e-14);
    pe_tensor_free(y);
    h_end(&h);
    /* label outside the classes */
    h_begin(&h, "cross_entropy");
    h_in(&h, "X", "x", f32(2, D(1, 3), (double[]){0.2, 0.3, 0.5}));
    h_in(&h, "Label", "lab", i64(1, D(1), (double[]){-1}));
    h_out(&h, "Y", "y");
    pe_tensor *o;
    assert_int_equal(h_run(&h, 1, (const char *[]){"y"}, 1, &o), PE_ERR_INVALID);
    assert_error_has("element 0 is -1", "3 classes");
    pe_tensor_free(o);
    h_end(&h);
}

static void test_square_error_cost(void **state) {
    (void)state;
    h_t h;
    h_begin(&h, "square_error_cost");
    h_in(&h, "X", "x", f32(2, D(3, 1), (double[]){1, 2, 3}));
    h_in(&h, "Y", "y", f32(2, D(3, 1), (double[]){0.5, 2, 5}));
    h_out(&h, "Out", "o");
    pe_tensor *o = h_run1(&h, "o");
    tu_assert_close(o, (double[]){0.25, 0, 4}, 3, 1e-7);
    pe_tensor_free(o);
    h_end(&h);
    /* [N,1] vs [N] is an error, not a silent [N,N] broadcast */
    h_begin(&h, "square_error_cost");
    h_in(&h, "X", "x", f32(2, D(3, 1), NULL));
    h_in(&h, "Y", "y", f32(1, D(3), NULL));
    h_out(&h, "Out", "o");
    assert_int_equal(h_run(&h, 1, (const char *[]){"o"}, 1, &o), PE_ERR_INVALID);
    assert_error_has("[3, 1]", "'y'");
    pe_tensor_free(o);
    h_end(&h);
}

/* ---- reduce_sum / reduce_mean ------------------------------------------------------------ */

static pe_tensor *iota(pe_dtype dt, int nd, const int64_t *dims) {
    pe_tensor *t = tu_tensor(dt, nd, dims, NULL);
    for (int64_t i = 0; i < pe_tensor_numel(t); i++) {
        if (dt == PE_DTYPE_FP32) ((float *)pe_tensor_data(t))[i] = (float)i;
        else if (dt == PE_DTYPE_FP64) ((double *)pe_tensor_data(t))[i] = (double)i;
        else ((int64_t *)pe_tensor_data(t))[i] = i;
    }
    return t;
}

static pe_tensor *reduce(const char *type, pe_dtype dt, const int64_t *dims, int nd, bool keep, bool all,
                         pe_status *st) {
    h_t h;
    h_begin(&h, type);
    h_in(&h, "X", "x", iota(dt, 3, D(2, 3, 4)));
    h_out(&h, "Out", "y");
    if (nd >= 0) pe_op_set_ints(h.op, "dim", dims, nd);
    pe_op_set_bool(h.op, "keep_dim", keep);
    pe_op_set_bool(h.op, "reduce_all", all);
    pe_tensor *y;
    *st = h_run(&h, 1, (const char *[]){"y"}, 1, &y);
    h_end(&h);
    return y;
}

static void test_reduce(void **state) {
    (void)state;
    pe_status st;
    pe_tensor *y = reduce("reduce_sum", PE_DTYPE_FP32, D(1), 1, false, false, &st);
    assert_int_equal(st, PE_OK);
    tu_assert_dims(y, 2, D(2, 4));
    tu_assert_close(y, (double[]){12, 15, 18, 21, 48, 51, 54, 57}, 8, 1e-7);
    pe_tensor_free(y);
    y = reduce("reduce_sum", PE_DTYPE_FP64, D(0, 2), 2, false, false, &st); /* two separate blocks */
    tu_assert_dims(y, 1, D(3));
    tu_assert_close(y, (double[]){60, 92, 124}, 3, 1e-15);
    pe_tensor_free(y);
    y = reduce("reduce_sum", PE_DTYPE_FP32, D(-1), 1, true, false, &st);
    tu_assert_dims(y, 3, D(2, 3, 1));
    tu_assert_close(y, (double[]){6, 22, 38, 54, 70, 86}, 6, 1e-7);
    pe_tensor_free(y);
    y = reduce("reduce_sum", PE_DTYPE_FP32, D(0), 1, false, true, &st); /* reduce_all wins over dim */
    tu_assert_dims(y, 1, D(1));
    tu_assert_close(y, (double[]){276}, 1, 1e-7);
    pe_tensor_free(y);
    y = reduce("reduce_sum", PE_DTYPE_FP32, D(0), 0, true, false, &st); /* empty dim list: all, keep_dim */
    tu_assert_dims(y, 3, D(1, 1, 1));
    tu_assert_close(y, (double[]){276}, 1, 1e-7);
    pe_tensor_free(y);
    y = reduce("reduce_sum", PE_DTYPE_INT64, D(1), 1, false, false, &st);
    assert_int_equal(y->dtype, PE_DTYPE_INT64);
    tu_assert_close(y, (double[]){12, 15, 18, 21, 48, 51, 54, 57}, 8, 0);
    pe_tensor_free(y);
    y = reduce("reduce_sum", PE_DTYPE_FP32, NULL, -1, false, false, &st); /* default dim [0] */
    tu_assert_dims(y, 2, D(3, 4));
    tu_assert_close(y, (double[]){12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34}, 12, 1e-7);
    pe_tensor_free(y);
    y = reduce("reduce_mean", PE_DTYPE_FP64, D(1, 2), 2, false, false, &st);
    tu_assert_dims(y, 1, D(2));
    tu_assert_close(y, (double[]){5.5, 17.5}, 2, 1e-15);
    pe_tensor_free(y);
    y = reduce("reduce_mean", PE_DTYPE_FP32, D(0), 1, false, true, &st);
    tu_assert_close(y, (double[]){11.5}, 1, 1e-7);
    pe_tensor_free(y);
    /* errors */
    y = reduce("reduce_sum", PE_DTYPE_FP32, D(3), 1, false, false, &st);
    assert_int_equal(st, PE_ERR_INVALID);
    assert_error_has("dim[0] = 3", "[2, 3, 4]");
    pe_tensor_free(y);
    y = reduce("reduce_mean", PE_DTYPE_INT64, D(0), 1, false, false, &st);
    assert_int_equal(st, PE_ERR_INVALID);
    assert_error_has("int64", "float32");
    pe_tensor_free(y);
}

/* A large whole-tensor and a strided reduction agree across thread counts
 * and with a double reference. */
static void test_reduce_large_threads(void **state) {
    (void)state;
    const int64_t n0 = 64, n1 = 50, n2 = 40;
    for (int c = 0; c < 3; c++) {
        pe_tensor *outs[2];
        for (int nt = 1; nt <= 2; nt++) {
            h_t h;
            h_begin(&h, "reduce_sum");
            pe_tensor *x = iota(PE_DTYPE_FP32, 3, D(n0, n1, n2));
            float *xd = pe_tensor_data(x);
            for (int64_t i = 0; i < pe_tensor_numel(x); i++) xd[i] = (float)((i * 7919) % 1000) / 1000.0f;
            h_in(&h, "X", "x", x);
            h_out(&h, "Out", "y");
            if (c == 0) pe_op_set_bool(h.op, "reduce_all", true);
            if (c == 1) pe_op_set_ints(h.op, "dim", D(0), 1);
            if (c == 2) pe_op_set_ints(h.op, "dim", D(0, 2), 2);
            assert_int_equal(h_run(&h, nt, (const char *[]){"y"}, 1, &outs[nt - 1]), PE_OK);
            if (nt == 1) { /* reference */
                const int64_t no = pe_tensor_numel(outs[0]);
                double *ref = calloc((size_t)no, sizeof *ref);
                for (int64_t i = 0; i < n0; i++)
                    for (int64_t j = 0; j < n1; j++)
                        for (int64_t k = 0; k < n2; k++) {
                            int64_t o = c == 0 ? 0 : c == 1 ? j * n2 + k : j;
                            ref[o] += tu_get(x, (i * n1 + j) * n2 + k);
                        }
                tu_assert_close(outs[0], ref, no, 1e-6);
                free(ref);
            }
            h_end(&h);
        }
        assert_memory_equal(pe_tensor_data(outs[0]), pe_tensor_data(outs[1]), pe_tensor_nbytes(outs[0]));
        pe_tensor_free(outs[0]);
        pe_tensor_free(outs[1]);
    }
}

/* ---- dropout ------------------------------------------------------------------------------ */

typedef struct {
    double p;
    bool is_test, fix_seed, upscale;
    int64_t seed;
    const char *out_name;
    int64_t step;      /* < 0: no Step input */
    int64_t prog_seed;
    int nt;
} drop_cfg;

/* Runs dropout on x (copied); *out, *mask (NULL when absent) and *step_out are new tensors. */
static pe_status run_dropout(const drop_cfg *c, const pe_tensor *x, pe_tensor **out, pe_tensor **mask,
                             pe_tensor **step_out) {
    h_t h;
    h_begin(&h, "dropout");
    pe_tensor *xc = tu_tensor(x->dtype, x->ndim, x->dims, NULL);
    memcpy(pe_tensor_data(xc), pe_tensor_data(x), pe_tensor_nbytes(x));
    h_in(&h, "X", "x", xc);
    if (c->step >= 0) h_in(&h, "Step", "step", i64(1, D(1), (double[]){(double)c->step}));
    h_out(&h, "Out", c->out_name ? c->out_name : "out");
    h_out(&h, "Mask", "mask");
    if (c->step >= 0) h_out(&h, "StepOut", "step");
    pe_op_set_float(h.op, "dropout_prob", c->p);
    pe_op_set_bool(h.op, "is_test", c->is_test);
    pe_op_set_bool(h.op, "fix_seed", c->fix_seed);
    pe_op_set_int(h.op, "seed", c->seed);
    if (c->upscale) pe_op_set_string(h.op, "dropout_implementation", "upscale_in_train");
    h.p->random_seed = c->prog_seed;
    const char *fetch[3] = {c->out_name ? c->out_name : "out", "mask", "step"};
    pe_tensor *o[3];
    pe_status st = h_run(&h, c->nt ? c->nt : 1, fetch, c->step >= 0 ? 3 : 2, o);
    *out = o[0];
    *mask = o[1];
    if (step_out) *step_out = c->step >= 0 ? o[2] : NULL;
    else if (c->step >= 0) pe_tensor_free(o[2]);
    h_end(&h);
    return st;
}

static pe_tensor *ramp(int64_t n) {
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 1, D(n), NULL);
    for (int64_t i = 0; i < n; i++) ((float *)pe_tensor_data(x))[i] = 1.0f + (float)(i % 17);
    return x;
}

static bool same_bytes(const pe_tensor *a, const pe_tensor *b) {
    return pe_tensor_nbytes(a) == pe_tensor_nbytes(b) && !memcmp(pe_tensor_data(a), pe_tensor_data(b), pe_tensor_nbytes(a));
}

static void test_dropout_mask_and_values(void **state) {
    (void)state;
    const int64_t n = 200000;
    pe_tensor *x = ramp(n);
    for (int up = 0; up < 2; up++) {
        drop_cfg c = {.p = 0.3, .upscale = up, .step = -1};
        pe_tensor *out, *mask;
        assert_int_equal(run_dropout(&c, x, &out, &mask, NULL), PE_OK);
        assert_int_equal(mask->dtype, PE_DTYPE_UINT8);
        tu_assert_dims(mask, 1, D(n));
        int64_t kept = 0;
        const uint8_t *m = pe_tensor_data(mask);
        for (int64_t i = 0; i < n; i++) {
            assert_true(m[i] <= 1);
            kept += m[i];
            double want = m[i] ? tu_get(x, i) * (up ? 1.0 / 0.7 : 1.0) : 0.0;
            if (fabs(tu_get(out, i) - want) > 1e-6 * fabs(want))
                fail_msg("out[%lld] %g want %g", (long long)i, tu_get(out, i), want);
        }
        /* kept ~ Binomial(n, 0.7): sd = sqrt(n 0.21) ~ 205; allow 5 sd */
        assert_true(llabs(kept - (int64_t)(0.7 * n)) < 1025);
        /* neighbours are not correlated: P(both kept) ~ 0.49 */
        int64_t both = 0;
        for (int64_t i = 0; i + 1 < n; i += 2) both += m[i] & m[i + 1];
        assert_true(fabs((double)both / (n / 2) - 0.49) < 0.01);
        pe_tensor_free(out);
        pe_tensor_free(mask);
    }
    /* test mode: downgrade scales by 1 - p, upscale passes through; mask all ones */
    for (int up = 0; up < 2; up++) {
        drop_cfg c = {.p = 0.3, .upscale = up, .is_test = true, .step = -1};
        pe_tensor *out, *mask;
        assert_int_equal(run_dropout(&c, x, &out, &mask, NULL), PE_OK);
        for (int64_t i = 0; i < n; i += 997) {
            assert_true(fabs(tu_get(out, i) - tu_get(x, i) * (up ? 1.0 : 0.7)) < 1e-5);
            assert_int_equal(((uint8_t *)pe_tensor_data(mask))[i], 1);
        }
        pe_tensor_free(out);
        pe_tensor_free(mask);
    }
    /* p = 0 keeps everything, p = 1 (upscale) drops everything without inf/NaN */
    drop_cfg c0 = {.p = 0.0, .step = -1}, c1 = {.p = 1.0, .upscale = true, .step = -1};
    pe_tensor *out, *mask;
    assert_int_equal(run_dropout(&c0, x, &out, &mask, NULL), PE_OK);
    assert_true(same_bytes(out, x));
    pe_tensor_free(out);
    pe_tensor_free(mask);
    assert_int_equal(run_dropout(&c1, x, &out, &mask, NULL), PE_OK);
    for (int64_t i = 0; i < n; i++)
        if (tu_get(out, i) != 0 || ((uint8_t *)pe_tensor_data(mask))[i]) fail_msg("p = 1 kept element %lld", (long long)i);
    pe_tensor_free(out);
    pe_tensor_free(mask);
    pe_tensor_free(x);
}

static void test_dropout_determinism(void **state) {
    (void)state;
    const int64_t n = 100003; /* odd: a partial Philox block at the end */
    pe_tensor *x = ramp(n);
    pe_tensor *o[8], *m[8], *so;
    /* 0: base; 1: same again with 2 threads; 2: other var name; 3: other program seed;
     * 4, 5: fix_seed with seed 5 under two var names; 6: step 1; 7: step 2 */
    drop_cfg cs[8] = {
        {.p = 0.5, .step = -1},
        {.p = 0.5, .step = -1, .nt = 2},
        {.p = 0.5, .step = -1, .out_name = "other"},
        {.p = 0.5, .step = -1, .prog_seed = 11},
        {.p = 0.5, .step = -1, .fix_seed = true, .seed = 5},
        {.p = 0.5, .step = -1, .fix_seed = true, .seed = 5, .out_name = "other"},
        {.p = 0.5, .step = 1},
        {.p = 0.5, .step = 2},
    };
    for (int i = 0; i < 8; i++) {
        assert_int_equal(run_dropout(&cs[i], x, &o[i], &m[i], i >= 6 ? &so : NULL), PE_OK);
        if (i >= 6) { /* StepOut = Step + 1 (the same var) */
            assert_int_equal(so->dtype, PE_DTYPE_INT64);
            assert_int_equal(*(int64_t *)pe_tensor_data(so), cs[i].step + 1);
            pe_tensor_free(so);
        }
    }
    assert_true(same_bytes(m[0], m[1]));  /* thread count does not matter */
    assert_true(same_bytes(o[0], o[1]));
    assert_false(same_bytes(m[0], m[2])); /* the var name keys the stream */
    assert_false(same_bytes(m[0], m[3])); /* so does the program seed */
    assert_true(same_bytes(m[4], m[5]));  /* fix_seed: the seed attr, not the name */
    assert_false(same_bytes(m[0], m[4]));
    assert_false(same_bytes(m[6], m[7])); /* consecutive steps draw different masks */
    assert_false(same_bytes(m[0], m[6]));
    drop_cfg step0 = {.p = 0.5, .step = 0};
    pe_tensor *o0, *m0;
    assert_int_equal(run_dropout(&step0, x, &o0, &m0, NULL), PE_OK);
    assert_true(same_bytes(m0, m[0])); /* no Step input is step 0 */
    pe_tensor_free(o0);
    pe_tensor_free(m0);
    for (int i = 0; i < 8; i++) {
        pe_tensor_free(o[i]);
        pe_tensor_free(m[i]);
    }
    pe_tensor_free(x);
}

/* A persistable Step advanced by the op itself: two runs in one scope draw two
 * different masks, and the counter reads 2 afterwards. */
static void test_dropout_step_state(void **state) {
    (void)state;
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    pe_block_add_var(b, "x", PE_DTYPE_FP32, 1, D(1000));
    pe_var *sv = pe_block_add_var(b, "step", PE_DTYPE_INT64, 1, D(1));
    sv->persistable = true;
    pe_block_add_var(b, "out", PE_DTYPE_FP32, 1, D(1000));
    pe_block_add_var(b, "mask", PE_DTYPE_UINT8, 1, D(1000));
    pe_op *op = pe_block_add_op(b, "dropout");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Step", "step");
    pe_op_add_output(op, "Out", "out");
    pe_op_add_output(op, "Mask", "mask");
    pe_op_add_output(op, "StepOut", "step");
    pe_tensor *x = ramp(1000), *s0 = i64(1, D(1), (double[]){0});
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_tensor *m1 = pe_tensor_new(), *m2 = pe_tensor_new(), *st = pe_tensor_new();
    const char *fm[] = {"mask"};
    assert_int_equal(pe_executor_run(ex, p, 0, scope, (pe_feed[]){{"x", x}, {"step", s0}}, 2, fm, 1, &m1), PE_OK);
    assert_int_equal(pe_executor_run(ex, p, 0, scope, (pe_feed[]){{"x", x}}, 1, fm, 1, &m2), PE_OK);
    assert_false(same_bytes(m1, m2));
    const char *fs[] = {"step"};
    assert_int_equal(pe_executor_run(ex, p, 0, scope, (pe_feed[]){{"x", x}}, 1, fs, 1, &st), PE_OK);
    assert_int_equal(*(int64_t *)pe_tensor_data(st), 3);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_tensor_free(m1);
    pe_tensor_free(m2);
    pe_tensor_free(st);
    pe_tensor_free(x);
    pe_tensor_free(s0);
    pe_program_free(p);
}

/* x -> dropout -> mean: d loss / dx = mask * factor / n. */
static void test_dropout_grad_is_masked(void **state) {
    (void)state;
    for (int up = 0; up < 2; up++) {
        pe_program *p = pe_program_new();
        pe_block *b = &p->blocks[0];
        pe_block_add_var(b, "x", PE_DTYPE_FP32, 2, D(10, 30));
        pe_block_add_var(b, "out", PE_DTYPE_FP32, 2, D(10, 30));
        pe_block_add_var(b, "mask", PE_DTYPE_UINT8, 2, D(10, 30));
        pe_block_add_var(b, "loss", PE_DTYPE_FP32, 1, D(1));
        pe_op *op = pe_block_add_op(b, "dropout");
        pe_op_add_input(op, "X", "x");
        pe_op_add_output(op, "Out", "out");
        pe_op_add_output(op, "Mask", "mask");
        pe_op_set_float(op, "dropout_prob", 0.25);
        if (up) pe_op_set_string(op, "dropout_implementation", "upscale_in_train");
        op = pe_block_add_op(b, "mean");
        pe_op_add_input(op, "X", "out");
        pe_op_add_output(op, "Out", "loss");
        char *gn[1] = {0};
        assert_int_equal(pe_gradients(p, (const char *[]){"loss"}, 1, (const char *[]){"x"}, 1, gn), PE_OK);
        pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, D(10, 30), NULL), *o[2];
        assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"mask", gn[0]}, 2,
                                (o[0] = pe_tensor_new(), o[1] = pe_tensor_new(), o)), PE_OK);
        int kept = 0;
        for (int i = 0; i < 300; i++) {
            const int mk = ((uint8_t *)pe_tensor_data(o[0]))[i];
            kept += mk;
            const double want = mk ? (up ? 1.0 / 0.75 : 1.0) / 300.0 : 0.0;
            assert_true(fabs(tu_get(o[1], i) - want) < 1e-8);
        }
        assert_true(kept > 150 && kept < 300);
        free(gn[0]);
        pe_tensor_free(o[0]);
        pe_tensor_free(o[1]);
        pe_tensor_free(x);
        pe_program_free(p);
    }
}

static void test_dropout_errors(void **state) {
    (void)state;
    h_t h;
    pe_tensor *o[2];
    const char *f[] = {"out", "mask"};
    h_begin(&h, "dropout");
    h_in(&h, "X", "x", f32(1, D(4), NULL));
    h_out(&h, "Out", "out");
    h_out(&h, "Mask", "mask");
    pe_op_set_float(h.op, "dropout_prob", 1.5);
    assert_int_equal(h_run(&h, 1, f, 2, o), PE_ERR_INVALID);
    assert_error_has("dropout_prob = 1.5", "[0, 1]");
    pe_tensor_free(o[0]);
    pe_tensor_free(o[1]);
    h_end(&h);
    h_begin(&h, "dropout");
    h_in(&h, "X", "x", f32(1, D(4), NULL));
    h_out(&h, "Out", "out");
    h_out(&h, "Mask", "mask");
    pe_op_set_string(h.op, "dropout_implementation", "upscale");
    assert_int_equal(h_run(&h, 1, f, 2, o), PE_ERR_INVALID);
    assert_error_has("'upscale'", "upscale_in_train");
    pe_tensor_free(o[0]);
    pe_tensor_free(o[1]);
    h_end(&h);
    /* a float Step */
    h_begin(&h, "dropout");
    h_in(&h, "X", "x", f32(1, D(4), NULL));
    h_in(&h, "Step", "s", f32(1, D(1), NULL));
    h_out(&h, "Out", "out");
    h_out(&h, "Mask", "mask");
    assert_int_equal(h_run(&h, 1, f, 2, o), PE_ERR_INVALID);
    assert_error_has("Step 's'", "int64");
    pe_tensor_free(o[0]);
    pe_tensor_free(o[1]);
    h_end(&h);
    /* training-mode gradient without a Mask output */
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    pe_block_add_var(b, "x", PE_DTYPE_FP32, 1, D(4));
    pe_block_add_var(b, "out", PE_DTYPE_FP32, 1, D(4));
    pe_block_add_var(b, "loss", PE_DTYPE_FP32, 1, D(1));
    pe_op *op = pe_block_add_op(b, "dropout");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "out");
    op = pe_block_add_op(b, "mean");
    pe_op_add_input(op, "X", "out");
    pe_op_add_output(op, "Out", "loss");
    char *gn[1] = {0};
    assert_int_not_equal(pe_gradients(p, (const char *[]){"loss"}, 1, (const char *[]){"x"}, 1, gn), PE_OK);
    assert_error_has("no Mask output", "'out'");
    pe_program_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leaky_relu),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_log_softmax),
        cmocka_unit_test(test_softmax_with_cross_entropy_hard),
        cmocka_unit_test(test_softmax_with_cross_entropy_soft_and_axis),
        cmocka_unit_test(test_softmax_with_cross_entropy_errors),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_square_error_cost),
        cmocka_unit_test(test_reduce),
        cmocka_unit_test(test_reduce_large_threads),
        cmocka_unit_test(test_dropout_mask_and_values),
        cmocka_unit_test(test_dropout_determinism),
        cmocka_unit_test(test_dropout_step_state),
        cmocka_unit_test(test_dropout_grad_is_masked),
        cmocka_unit_test(test_dropout_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
