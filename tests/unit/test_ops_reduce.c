/* tests/unit/test_ops_reduce.c — CPU kernels and shape inference of mean,
 * sum, softmax, arg_max, top_k and accuracy, run through the executor:
 * hand-checkable values, ties and NaN orders, every axis form, tiles wider
 * than the kernels' stack tiles, thread-count determinism, empty inputs and
 * every error case with its message. */
#include "tests/unit/op_test_util.h"

#include <stdlib.h>
#include <string.h>


/* Deterministic pseudo-random values in [-1, 1). */
static double *rand_vals(int64_t n, unsigned seed) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (double)(s >> 8) / (double)(1u << 23) - 1.0;
    }
    return v;
}

/* Runs a single-input op X -> Out with attrs set by `attrs`; NULL on error. */
static pe_tensor *run_x(const char *type, pe_tensor *x, void (*attrs)(pe_op *), int nt, pe_status *st_out) {
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, type);
    tu_op_in(&o, op, "X", "x", x);
    tu_op_out(&o, op, "Out", "out");
    if (attrs) attrs(op);
    pe_tensor *out;
    pe_status st = tu_op_run_n(&o, nt, 1, (const char *[]){"out"}, &out);
    if (st_out) *st_out = st;
    tu_op_end(&o);
    if (st != PE_OK) {
        pe_tensor_free(out);
        return NULL;
    }
    return out;
}

/* ---- mean ------------------------------------------------------------------ */

static void test_mean(void **state) {
    (void)state;
    pe_tensor *out = run_x("mean", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}), NULL, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 1, (int64_t[]){1});
    assert_int_equal(out->dtype, PE_DTYPE_FP32);
    tu_assert_close(out, (double[]){3.5}, 1, 0);
    pe_tensor_free(out);
    out = run_x("mean", tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){4}, (double[]){0.1, 0.2, 0.3, -1}), NULL, 1, NULL);
    assert_non_null(out);
    assert_int_equal(out->dtype, PE_DTYPE_FP64);
    tu_assert_close(out, (double[]){(0.1 + 0.2 + 0.3 - 1) / 4}, 1, 1e-15);
    pe_tensor_free(out);
    /* empty: NaN, like numpy and torch */
    out = run_x("mean", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){0, 4}, NULL), NULL, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 1, (int64_t[]){1});
    assert_true(isnan(tu_get(out, 0)));
    pe_tensor_free(out);
}

static void test_mean_accuracy_and_determinism(void **state) {
    (void)state;
    /* 3e6 fp32 values: a float accumulator would drift; the result must also be
     * bitwise identical with 1 and 2 threads. */
    const int64_t n = 3000001;
    double *v = rand_vals(n, 3), want = 0;
    for (int64_t i = 0; i < n; i++) {
        v[i] = 0.1 + 0.01 * v[i];
        want += (double)(float)v[i];
    }
    want /= (double)n;
    pe_tensor *o1 = run_x("mean", tu_tensor(PE_DTYPE_FP32, 1, &n, v), NULL, 1, NULL);
    pe_tensor *o2 = run_x("mean", tu_tensor(PE_DTYPE_FP32, 1, &n, v), NULL, 2, NULL);
    assert_non_null(o1);
    assert_non_null(o2);
    tu_assert_close(o1, &want, 1, 1e-7);
    assert_memory_equal(pe_tensor_data(o1), pe_tensor_data(o2), sizeof(float));
    pe_tensor_free(o1);
    pe_tensor_free(o2);
    free(v);
}

static void test_mean_errors(void **state) {
    (void)state;
    pe_status st;
    assert_null(run_x("mean", tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){3}, NULL), NULL, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("mean", "int64", "'x'");
}

/* ---- sum ------------------------------------------------------------------- */

static void test_sum(void **state) {
    (void)state;
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, "sum");
    tu_op_in(&o, op, "X", "a", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 4}));
    tu_op_in(&o, op, "X", "b", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 2}, (double[]){10, 20, 30, 40}));
    tu_op_in(&o, op, "X", "c", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 2}, (double[]){100, 200, 300, 400}));
    tu_op_out(&o, op, "Out", "out");
    pe_tensor *out;
    assert_int_equal(tu_op_run(&o, "out", &out), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){2, 2});
    tu_assert_close(out, (double[]){111, 222, 333, 444}, 4, 0);
    pe_tensor_free(out);
    tu_op_end(&o);

    /* one input: a copy; int32 wraps; @EMPTY@ args are skipped */
    op = tu_op_begin(&o, "sum");
    tu_op_in(&o, op, "X", "a", tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){3}, (double[]){2147483647.0, -5, 7}));
    assert_int_equal(pe_op_add_input(op, "X", PE_EMPTY_VAR), PE_OK);
    tu_op_in(&o, op, "X", "b", tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){3}, (double[]){1, 5, 8}));
    tu_op_out(&o, op, "Out", "out");
    assert_int_equal(tu_op_run(&o, "out", &out), PE_OK);
    assert_int_equal(out->dtype, PE_DTYPE_INT32);
    tu_assert_close(out, (double[]){-2147483648.0, 0, 15}, 3, 0);
    pe_tensor_free(out);
    tu_op_end(&o);

    /* in place: Out is X[1] (Paddle's gradient accumulation) */
    op = tu_op_begin(&o, "sum");
    tu_op_in(&o, op, "X", "a", tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){3}, (double[]){1, 2, 3}));
    tu_op_in(&o, op, "X", "b", tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){3}, (double[]){4, 5, 6}));
    tu_op_out(&o, op, "Out", "b");
    assert_int_equal(tu_op_run(&o, "b", &out), PE_OK);
    tu_assert_close(out, (double[]){5, 7, 9}, 3, 0);
    pe_tensor_free(out);
    tu_op_end(&o);
}

static void test_sum_large_parallel(void **state) {
    (void)state;
    const int64_t n = 100003; /* not a multiple of the kernel's chunk */
    double *a = rand_vals(n, 1), *b = rand_vals(n, 2), *c = rand_vals(n, 3), *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) want[i] = (double)(((float)a[i] + (float)b[i]) + (float)c[i]);
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, "sum");
    tu_op_in(&o, op, "X", "a", tu_tensor(PE_DTYPE_FP32, 1, &n, a));
    tu_op_in(&o, op, "X", "b", tu_tensor(PE_DTYPE_FP32, 1, &n, b));
    tu_op_in(&o, op, "X", "c", tu_tensor(PE_DTYPE_FP32, 1, &n, c));
    tu_op_out(&o, op, "Out", "out");
    pe_tensor *out;
    assert_int_equal(tu_op_run_n(&o, 2, 1, (const char *[]){"out"}, &out), PE_OK);
    tu_assert_close(out, want, n, 0); /* same order of float adds: exact */
    pe_tensor_free(out);
    tu_op_end(&o);
    free(a);
    free(b);
    free(c);
    free(want);
}

static void test_sum_errors(void **state) {
    (void)state;
    tu_one_op o;
    pe_tensor *out;
    pe_op *op = tu_op_begin(&o, "sum");
    tu_op_in(&o, op, "X", "a", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 2}, NULL));
    tu_op_in(&o, op, "X", "b", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL));
    tu_op_out(&o, op, "Out", "out");
    assert_int_equal(tu_op_run(&o, "out", &out), PE_ERR_INVALID);
    tu_assert_error_has("sum", "'b'", "[2, 3]");
    tu_assert_error_has("'a'", "[2, 2]", NULL);
    pe_tensor_free(out);
    tu_op_end(&o);

    op = tu_op_begin(&o, "sum");
    tu_op_in(&o, op, "X", "a", tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL));
    tu_op_in(&o, op, "X", "b", tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){2}, NULL));
    tu_op_out(&o, op, "Out", "out");
    assert_int_equal(tu_op_run(&o, "out", &out), PE_ERR_INVALID);
    tu_assert_error_has("float64", "float32", "'b'");
    pe_tensor_free(out);
    tu_op_end(&o);

    op = tu_op_begin(&o, "sum");
    assert_int_equal(pe_op_add_input(op, "X", PE_EMPTY_VAR), PE_OK);
    tu_op_out(&o, op, "Out", "out");
    assert_int_equal(tu_op_run(&o, "out", &out), PE_ERR_INVALID);
    tu_assert_error_has("sum", "at least one", NULL);
    pe_tensor_free(out);
    tu_op_end(&o);
}

/* ---- softmax ----------------------------------------------------------------- */

static int64_t g_axis;
static void attrs_axis_int(pe_op *op) { pe_op_set_int(op, "axis", g_axis); }

/* Reference softmax of v [pre, D, post] along D, in double. */
static void ref_softmax(const double *v, double *out, int64_t pre, int64_t D, int64_t post) {
    for (int64_t p = 0; p < pre; p++)
        for (int64_t q = 0; q < post; q++) {
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < D; j++) m = fmax(m, v[(p * D + j) * post + q]);
            for (int64_t j = 0; j < D; j++) s += exp(v[(p * D + j) * post + q] - m);
            for (int64_t j = 0; j < D; j++) out[(p * D + j) * post + q] = exp(v[(p * D + j) * post + q] - m) / s;
        }
}

static void test_softmax_values(void **state) {
    (void)state;
    /* [2, 3] axis -1: rows; second row is the first shifted by 1000 (stability) */
    double e1 = exp(1.0), e2 = exp(2.0), s = 1 + e1 + e2;
    g_axis = -1;
    pe_tensor *out = run_x("softmax", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, (double[]){0, 1, 2, 1000, 1001, 1002}),
                           attrs_axis_int, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){2, 3});
    tu_assert_close(out, (double[]){1 / s, e1 / s, e2 / s, 1 / s, e1 / s, e2 / s}, 6, 1e-6);
    pe_tensor_free(out);
    /* axis 0 of [2, 3]: columns (the strided path) */
    g_axis = 0;
    double t = 1 + exp(3.0);
    out = run_x("softmax", tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){2, 3}, (double[]){0, 0, 5, 3, 0, 2}),
                attrs_axis_int, 1, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){1 / t, 0.5, exp(3.0) / t, exp(3.0) / t, 0.5, 1 / t}, 6, 1e-14);
    pe_tensor_free(out);
    /* single-element axis: all ones */
    g_axis = 1;
    out = run_x("softmax", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 1}, (double[]){-5, 0, 7}), attrs_axis_int, 1, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){1, 1, 1}, 3, 0);
    pe_tensor_free(out);
    /* empty */
    g_axis = -1;
    out = run_x("softmax", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){0, 5}, NULL), attrs_axis_int, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){0, 5});
    pe_tensor_free(out);
}

static void test_softmax_shapes_against_reference(void **state) {
    (void)state;
    /* rank 3 and 4, middle axes, post wider than one tile (256), 2 threads */
    struct { int nd; int64_t d[4]; int axis; } cases[] = {
        {3, {2, 5, 300}, 1}, {3, {4, 7, 3}, -2}, {4, {2, 3, 4, 5}, 2}, {4, {2, 3, 4, 5}, 0},
        {2, {70, 1000}, 1}, {3, {3, 129, 131}, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nd = cases[c].nd, a = cases[c].axis < 0 ? cases[c].axis + nd : cases[c].axis;
        int64_t n = pe_dims_prod(cases[c].d, 0, nd);
        double *v = rand_vals(n, (unsigned)c), *want = malloc((size_t)n * sizeof *want);
        for (int64_t i = 0; i < n; i++) v[i] *= 20;
        for (int dt = PE_DTYPE_FP32; dt <= PE_DTYPE_FP64; dt++) {
            if (dt == PE_DTYPE_FP32) /* compare against the fp32-rounded input */
                for (int64_t i = 0; i < n; i++) v[i] = (double)(float)v[i];
            ref_softmax(v, want, pe_dims_prod(cases[c].d, 0, a), cases[c].d[a], pe_dims_prod(cases[c].d, a + 1, nd));
            g_axis = cases[c].axis;
            pe_tensor *out = run_x("softmax", tu_tensor((pe_dtype)dt, nd, cases[c].d, v), attrs_axis_int, 2, NULL);
            assert_non_null(out);
            tu_assert_dims(out, nd, cases[c].d);
            tu_assert_close(out, want, n, dt == PE_DTYPE_FP32 ? 1e-5 : 1e-12);
            pe_tensor_free(out);
        }
        free(v);
        free(want);
    }
}

static void test_softmax_errors(void **state) {
    (void)state;
    pe_status st;
    g_axis = 2;
    assert_null(run_x("softmax", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL), attrs_axis_int, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("softmax", "axis = 2", "[2, 3]");
    g_axis = -3;
    assert_null(run_x("softmax", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL), attrs_axis_int, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    g_axis = -1;
    assert_null(run_x("softmax", tu_tensor(PE_DTYPE_INT32, 2, (int64_t[]){2, 3}, NULL), attrs_axis_int, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("softmax", "int32", NULL);
}

/* ---- arg_max ------------------------------------------------------------------- */

static int64_t g_am_axis, g_am_dtype;
static bool g_am_keep, g_am_flat;
static void attrs_argmax(pe_op *op) {
    pe_op_set_long(op, "axis", g_am_axis);
    pe_op_set_bool(op, "keepdims", g_am_keep);
    pe_op_set_bool(op, "flatten", g_am_flat);
    pe_op_set_int(op, "dtype", g_am_dtype);
}
static pe_tensor *argmax(pe_tensor *x, int64_t axis, bool keep, bool flat, int64_t dt, pe_status *st) {
    g_am_axis = axis;
    g_am_keep = keep;
    g_am_flat = flat;
    g_am_dtype = dt;
    return run_x("arg_max", x, attrs_argmax, 1, st);
}

static void test_arg_max(void **state) {
    (void)state;
    double xv[6] = {1, 5, 5, 7, -1, 7}; /* ties: first index */
    pe_tensor *out = argmax(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, xv), -1, false, false, 3, NULL);
    assert_non_null(out);
    assert_int_equal(out->dtype, PE_DTYPE_INT64);
    tu_assert_dims(out, 1, (int64_t[]){2});
    tu_assert_close(out, (double[]){1, 0}, 2, 0);
    pe_tensor_free(out);
    out = argmax(tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){2, 3}, xv), 0, true, false, 2, NULL);
    assert_non_null(out);
    assert_int_equal(out->dtype, PE_DTYPE_INT32);
    tu_assert_dims(out, 2, (int64_t[]){1, 3});
    tu_assert_close(out, (double[]){1, 0, 1}, 3, 0);
    pe_tensor_free(out);
    out = argmax(tu_tensor(PE_DTYPE_INT32, 2, (int64_t[]){2, 3}, xv), 5, false, true, 3, NULL); /* flatten ignores axis */
    assert_non_null(out);
    tu_assert_dims(out, 1, (int64_t[]){1});
    tu_assert_close(out, (double[]){3}, 1, 0);
    pe_tensor_free(out);
    out = argmax(tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){2, 3}, xv), 0, true, true, 3, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){1, 1});
    tu_assert_close(out, (double[]){3}, 1, 0);
    pe_tensor_free(out);
    /* rank 1 without keepdims: [1], not rank 0 */
    out = argmax(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){4}, (double[]){0, -1, 9, 2}), 0, false, false, 3, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 1, (int64_t[]){1});
    tu_assert_close(out, (double[]){2}, 1, 0);
    pe_tensor_free(out);
    /* NaN is the maximum (first NaN wins), as numpy */
    out = argmax(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){4}, (double[]){0, NAN, 9, NAN}), -1, false, false, 3, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){1}, 1, 0);
    pe_tensor_free(out);
    /* default dtype -1 means int64 (Paddle) */
    out = argmax(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, (double[]){0, 1}), 0, false, false, -1, NULL);
    assert_non_null(out);
    assert_int_equal(out->dtype, PE_DTYPE_INT64);
    pe_tensor_free(out);
    /* empty rows are fine: [0, 3] along axis 1 -> [0] */
    out = argmax(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){0, 3}, NULL), 1, false, false, 3, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 1, (int64_t[]){0});
    pe_tensor_free(out);
}

static void test_arg_max_against_reference(void **state) {
    (void)state;
    /* [3, 40, 300] along axis 1 (post wider than a tile) and axis 2 */
    int64_t d[3] = {3, 40, 300};
    const int64_t n = 3 * 40 * 300;
    double *v = rand_vals(n, 9);
    for (int64_t i = 0; i < n; i++) v[i] = floor(v[i] * 50); /* many ties */
    for (int axis = 1; axis <= 2; axis++) {
        int64_t pre = pe_dims_prod(d, 0, axis), D = d[axis], post = pe_dims_prod(d, axis + 1, 3);
        double *want = malloc((size_t)(pre * post) * sizeof *want);
        for (int64_t p = 0; p < pre; p++)
            for (int64_t q = 0; q < post; q++) {
                int64_t bi = 0;
                for (int64_t j = 1; j < D; j++)
                    if (v[(p * D + j) * post + q] > v[(p * D + bi) * post + q]) bi = j;
                want[p * post + q] = (double)bi;
            }
        pe_tensor *out = argmax(tu_tensor(PE_DTYPE_FP32, 3, d, v), axis, false, false, 3, NULL);
        assert_non_null(out);
        tu_assert_close(out, want, pre * post, 0);
        pe_tensor_free(out);
        free(want);
    }
    free(v);
}

static void test_arg_max_errors(void **state) {
    (void)state;
    pe_status st;
    assert_null(argmax(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL), 2, false, false, 3, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("arg_max", "axis = 2", "[2, 3]");
    assert_null(argmax(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL), -3, false, false, 3, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    assert_null(argmax(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL), 0, false, false, 5, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("dtype = 5", NULL, NULL);
    assert_null(argmax(tu_tensor(PE_DTYPE_BOOL, 1, (int64_t[]){3}, NULL), 0, false, false, 3, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("bool", "'x'", NULL);
    assert_null(argmax(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 0}, NULL), 1, false, false, 3, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("empty", NULL, NULL);
    assert_null(argmax(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){0}, NULL), 0, false, true, 3, &st));
    assert_int_equal(st, PE_ERR_INVALID);
}

/* ---- top_k ---------------------------------------------------------------------- */

static int64_t g_k;
static void attrs_topk(pe_op *op) { pe_op_set_int(op, "k", g_k); }

/* Runs top_k; values and indices into *v and *ix (caller frees). */
static pe_status topk(pe_tensor *x, int64_t k, int nt, pe_tensor **v, pe_tensor **ix) {
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, "top_k");
    tu_op_in(&o, op, "X", "x", x);
    tu_op_out(&o, op, "Out", "vals");
    tu_op_out(&o, op, "Indices", "idx");
    g_k = k;
    attrs_topk(op);
    pe_tensor *outs[2];
    pe_status st = tu_op_run_n(&o, nt, 2, (const char *[]){"vals", "idx"}, outs);
    tu_op_end(&o);
    *v = outs[0];
    *ix = outs[1];
    return st;
}

static void test_top_k(void **state) {
    (void)state;
    pe_tensor *v, *ix;
    assert_int_equal(topk(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 5}, (double[]){1, 9, 3, 9, 5, -1, -2, -3, 0, -1}),
                          3, 1, &v, &ix), PE_OK);
    tu_assert_dims(v, 2, (int64_t[]){2, 3});
    tu_assert_dims(ix, 2, (int64_t[]){2, 3});
    assert_int_equal(v->dtype, PE_DTYPE_FP32);
    assert_int_equal(ix->dtype, PE_DTYPE_INT64);
    tu_assert_close(v, (double[]){9, 9, 5, 0, -1, -1}, 6, 0);
    tu_assert_close(ix, (double[]){1, 3, 4, 3, 0, 4}, 6, 0); /* ties: lower index first */
    pe_tensor_free(v);
    pe_tensor_free(ix);
    /* k == D: a full descending sort; int32 input; rank 3 */
    assert_int_equal(topk(tu_tensor(PE_DTYPE_INT32, 3, (int64_t[]){1, 2, 4}, (double[]){3, 1, 4, 1, 5, 9, 2, 6}),
                          4, 1, &v, &ix), PE_OK);
    tu_assert_dims(v, 3, (int64_t[]){1, 2, 4});
    assert_int_equal(v->dtype, PE_DTYPE_INT32);
    tu_assert_close(v, (double[]){4, 3, 1, 1, 9, 6, 5, 2}, 8, 0);
    tu_assert_close(ix, (double[]){2, 0, 1, 3, 1, 3, 0, 2}, 8, 0);
    pe_tensor_free(v);
    pe_tensor_free(ix);
    /* NaN ranks first; k = 1 */
    assert_int_equal(topk(tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){2, 3}, (double[]){1, NAN, 2, 5, 6, 4}), 2, 1, &v, &ix), PE_OK);
    assert_true(isnan(tu_get(v, 0)));
    assert_int_equal((int)tu_get(ix, 0), 1);
    assert_int_equal((int)tu_get(ix, 1), 2);
    tu_assert_close(ix, (double[]){1, 2, 1, 0}, 4, 0);
    pe_tensor_free(v);
    pe_tensor_free(ix);
    /* empty rows */
    assert_int_equal(topk(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){0, 4}, NULL), 2, 1, &v, &ix), PE_OK);
    tu_assert_dims(v, 2, (int64_t[]){0, 2});
    pe_tensor_free(v);
    pe_tensor_free(ix);
}

static int cmp_desc(const void *a, const void *b) {
    const double *x = a, *y = b; /* {value, index} pairs */
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : 1;
}

static void test_top_k_against_sort(void **state) {
    (void)state;
    const int64_t rows = 200, D = 517;
    double *xv = rand_vals(rows * D, 4);
    for (int64_t i = 0; i < rows * D; i++) xv[i] = floor(xv[i] * 100); /* ties */
    int64_t ks[3] = {1, 37, 517};
    double *pairs = malloc((size_t)D * 2 * sizeof *pairs);
    for (int c = 0; c < 3; c++) {
        int64_t k = ks[c];
        double *wv = malloc((size_t)(rows * k) * sizeof *wv), *wi = malloc((size_t)(rows * k) * sizeof *wi);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < D; j++) { pairs[2 * j] = xv[r * D + j]; pairs[2 * j + 1] = (double)j; }
            qsort(pairs, (size_t)D, 2 * sizeof(double), cmp_desc);
            for (int64_t j = 0; j < k; j++) { wv[r * k + j] = pairs[2 * j]; wi[r * k + j] = pairs[2 * j + 1]; }
        }
        pe_tensor *v, *ix;
        assert_int_equal(topk(tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){rows, D}, xv), k, 2, &v, &ix), PE_OK);
        tu_assert_close(v, wv, rows * k, 0);
        tu_assert_close(ix, wi, rows * k, 0);
        pe_tensor_free(v);
        pe_tensor_free(ix);
        free(wv);
        free(wi);
    }
    free(pairs);
    free(xv);
}

static void test_top_k_errors(void **state) {
    (void)state;
    pe_tensor *v, *ix;
    assert_int_equal(topk(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL), 4, 1, &v, &ix), PE_ERR_INVALID);
    tu_assert_error_has("top_k", "k = 4", "[2, 3]");
    pe_tensor_free(v);
    pe_tensor_free(ix);
    assert_int_equal(topk(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL), 0, 1, &v, &ix), PE_ERR_INVALID);
    tu_assert_error_has("k = 0", NULL, NULL);
    pe_tensor_free(v);
    pe_tensor_free(ix);
    assert_int_equal(topk(tu_tensor(PE_DTYPE_UINT8, 1, (int64_t[]){3}, NULL), 1, 1, &v, &ix), PE_ERR_INVALID);
    tu_assert_error_has("uint8", NULL, NULL);
    pe_tensor_free(v);
    pe_tensor_free(ix);
    assert_int_equal(topk(tu_tensor(PE_DTYPE_FP32, 0, NULL, (double[]){1}), 1, 1, &v, &ix), PE_ERR_INVALID);
    tu_assert_error_has("rank 0", NULL, NULL);
    pe_tensor_free(v);
    pe_tensor_free(ix);
}

/* ---- accuracy -------------------------------------------------------------------- */

/* Runs accuracy; fetches Accuracy, Correct, Total. */
static pe_status accuracy(pe_tensor *out, pe_tensor *idx, pe_tensor *lab, pe_tensor **res) {
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, "accuracy");
    tu_op_in(&o, op, "Out", "topv", out);
    tu_op_in(&o, op, "Indices", "topi", idx);
    tu_op_in(&o, op, "Label", "label", lab);
    tu_op_out(&o, op, "Accuracy", "acc");
    tu_op_out(&o, op, "Correct", "correct");
    tu_op_out(&o, op, "Total", "total");
    pe_status st = tu_op_run_n(&o, 1, 3, (const char *[]){"acc", "correct", "total"}, res);
    tu_op_end(&o);
    return st;
}

static void free3(pe_tensor **r) {
    for (int i = 0; i < 3; i++) pe_tensor_free(r[i]);
}

static void test_accuracy(void **state) {
    (void)state;
    pe_tensor *r[3];
    /* 4 rows, k = 2: rows 0 and 3 have their label among the indices */
    assert_int_equal(accuracy(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 2}, (double[]){3, 1, 0, 2, 5, 6, 7, 7}),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 1}, (double[]){1, 1, 4, 7}), r), PE_OK);
    assert_int_equal(r[0]->dtype, PE_DTYPE_FP32);
    tu_assert_dims(r[0], 1, (int64_t[]){1});
    assert_int_equal(r[1]->dtype, PE_DTYPE_INT32);
    assert_int_equal(r[2]->dtype, PE_DTYPE_INT32);
    tu_assert_close(r[0], (double[]){0.5}, 1, 0);
    tu_assert_close(r[1], (double[]){2}, 1, 0); /* a duplicated hit (row 3) counts once */
    tu_assert_close(r[2], (double[]){4}, 1, 0);
    free3(r);
    /* int32 indices, label [N]; 1 of 3 */
    assert_int_equal(accuracy(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 1}, NULL),
                              tu_tensor(PE_DTYPE_INT32, 2, (int64_t[]){3, 1}, (double[]){0, 1, 2}),
                              tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){3}, (double[]){0, 2, 1}), r), PE_OK);
    tu_assert_close(r[0], (double[]){1.0 / 3.0}, 1, 1e-7);
    tu_assert_close(r[1], (double[]){1}, 1, 0);
    free3(r);
    /* no rows: accuracy 0, not NaN */
    assert_int_equal(accuracy(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){0, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){0, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){0, 1}, NULL), r), PE_OK);
    tu_assert_close(r[0], (double[]){0}, 1, 0);
    tu_assert_close(r[2], (double[]){0}, 1, 0);
    free3(r);
}

static void test_accuracy_optional_outputs(void **state) {
    (void)state;
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, "accuracy");
    tu_op_in(&o, op, "Out", "topv", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 1}, NULL));
    tu_op_in(&o, op, "Indices", "topi", tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){2, 1}, (double[]){4, 5}));
    tu_op_in(&o, op, "Label", "label", tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){2, 1}, (double[]){4, 4}));
    tu_op_out(&o, op, "Accuracy", "acc");
    pe_tensor *acc;
    assert_int_equal(tu_op_run(&o, "acc", &acc), PE_OK);
    tu_assert_close(acc, (double[]){0.5}, 1, 0);
    pe_tensor_free(acc);
    tu_op_end(&o);
}

static void test_accuracy_errors(void **state) {
    (void)state;
    pe_tensor *r[3];
    assert_int_equal(accuracy(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){3, 1}, NULL), r), PE_ERR_INVALID);
    tu_assert_error_has("accuracy", "'label'", "[3, 1]");
    free3(r);
    assert_int_equal(accuracy(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 3}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 1}, NULL), r), PE_ERR_INVALID);
    tu_assert_error_has("'topv'", "'topi'", "[4, 3]");
    free3(r);
    assert_int_equal(accuracy(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL),
                              tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 1}, NULL), r), PE_ERR_INVALID);
    tu_assert_error_has("Indices", "float32", NULL);
    free3(r);
    assert_int_equal(accuracy(tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 2}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 2}, NULL), r), PE_ERR_INVALID);
    tu_assert_error_has("Label", "[4, 2]", NULL);
    free3(r);
    assert_int_equal(accuracy(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){4}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){4}, NULL),
                              tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){4, 1}, NULL), r), PE_ERR_INVALID);
    tu_assert_error_has("rank 2", NULL, NULL);
    free3(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mean),
        cmocka_unit_test(test_mean_accuracy_and_determinism),
        cmocka_unit_test(test_mean_errors),
        cmocka_unit_test(test_sum),
        cmocka_unit_test(test_sum_large_parallel),
        cmocka_unit_test(test_sum_errors),
        cmocka_unit_test(test_softmax_values),
        cmocka_unit_test(test_softmax_shapes_against_reference),
        cmocka_unit_test(test_softmax_errors),
        cmocka_unit_test(test_arg_max),
        cmocka_unit_test(test_arg_max_against_reference),
        cmocka_unit_test(test_arg_max_errors),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_k_against_sort),
        cmocka_unit_test(test_top_k_errors),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_accuracy_optional_outputs),
        cmocka_unit_test(test_accuracy_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
