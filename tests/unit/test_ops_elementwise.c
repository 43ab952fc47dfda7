/* tests/unit/test_ops_elementwise.c — the broadcast plan (ops/elementwise.h)
 * and the CPU kernels of elementwise_{add,sub,mul,div}, relu, sigmoid, tanh,
 * scale and cast, run through the executor: hand-checkable values, every
 * broadcasting form (same, row, channel axis=1, trailing, numpy two-way,
 * scalar-like, lower-rank X), empty and odd shapes, multi-threaded paths
 * against a reference loop, and every error case with its message. */
#include "tests/unit/op_test_util.h"
#include "ops/elementwise.h"

#include <stdlib.h>
#include <string.h>

/* Runs with `nt` kernel threads; fetches `var` into a new tensor (*out). */
static pe_status op_run_nt(tu_one_op *o, int nt, const char *var, pe_tensor **out) {
    return tu_op_run_n(o, nt, 1, (const char *[]){var}, out);
}

/* Runs elementwise `type` on x, y with axis; returns Out (caller frees) or NULL on error. */
static pe_tensor *run_binary(const char *type, pe_tensor *x, pe_tensor *y, int axis, int nt, pe_status *st_out) {
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, type);
    tu_op_in(&o, op, "X", "x", x);
    tu_op_in(&o, op, "Y", "y", y);
    tu_op_out(&o, op, "Out", "out");
    pe_op_set_int(op, "axis", axis);
    pe_tensor *out;
    pe_status st = op_run_nt(&o, nt, "out", &out);
    if (st_out) *st_out = st;
    tu_op_end(&o);
    if (st != PE_OK) {
        pe_tensor_free(out);
        return NULL;
    }
    return out;
}

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

/* ---- plan ------------------------------------------------------------------ */

static void plan(const int64_t *xd, int xn, const int64_t *yd, int yn, int axis, pe_bcast_plan *pl) {
    if (pe_bcast_plan_make(xn, xd, yn, yd, axis, pl) != PE_OK) fail_msg("plan failed: %s", pe_last_error());
}

static void test_plan_kinds(void **state) {
    (void)state;
    pe_bcast_plan pl;
    plan((int64_t[]){2, 3}, 2, (int64_t[]){2, 3}, 2, 5, &pl); /* same dims: axis ignored */
    assert_int_equal(pl.kind, PE_BCAST_SAME);
    assert_int_equal(pl.numel, 6);
    tu_assert_dims(&(pe_tensor){.ndim = pl.out_ndim, .dims = {pl.out_dims[0], pl.out_dims[1]}}, 2, (int64_t[]){2, 3});

    plan((int64_t[]){4, 5}, 2, (int64_t[]){5}, 1, -1, &pl); /* bias over rows */
    assert_int_equal(pl.kind, PE_BCAST_ROW);
    assert_int_equal(pl.pre, 4);
    assert_int_equal(pl.n, 5);
    assert_int_equal(pl.post, 1);

    plan((int64_t[]){2, 3, 4, 5}, 4, (int64_t[]){3}, 1, 1, &pl); /* per-channel, axis 1 */
    assert_int_equal(pl.kind, PE_BCAST_MID);
    assert_int_equal(pl.pre, 2);
    assert_int_equal(pl.n, 3);
    assert_int_equal(pl.post, 20);
    assert_int_equal(pl.out_ndim, 4);

    plan((int64_t[]){2, 3, 4, 5}, 4, (int64_t[]){3, 1, 1}, 3, 1, &pl); /* [C,1,1] at axis 1 */
    assert_int_equal(pl.kind, PE_BCAST_MID);
    assert_int_equal(pl.post, 20);

    plan((int64_t[]){2, 3}, 2, (int64_t[]){3, 1}, 2, 1, &pl); /* trailing 1 of Y dropped (Paddle) */
    assert_int_equal(pl.kind, PE_BCAST_ROW);
    assert_int_equal(pl.out_ndim, 2);

    plan((int64_t[]){2, 3, 4}, 3, (int64_t[]){3, 1, 1}, 3, 1, &pl); /* equal ranks, explicit axis: trimmed */
    assert_int_equal(pl.kind, PE_BCAST_MID);
    assert_int_equal(pl.pre, 2);
    assert_int_equal(pl.n, 3);
    assert_int_equal(pl.post, 4);

    plan((int64_t[]){4, 5}, 2, (int64_t[]){1}, 1, -1, &pl);
    assert_int_equal(pl.kind, PE_BCAST_SCALAR_Y);
    plan((int64_t[]){4, 5}, 2, NULL, 0, -1, &pl); /* rank-0 Y */
    assert_int_equal(pl.kind, PE_BCAST_SCALAR_Y);

    plan((int64_t[]){6, 7}, 2, (int64_t[]){6, 1}, 2, -1, &pl); /* numpy column broadcast */
    assert_int_equal(pl.kind, PE_BCAST_MID);
    assert_int_equal(pl.pre, 1);
    assert_int_equal(pl.n, 6);
    assert_int_equal(pl.post, 7);

    plan((int64_t[]){6, 1}, 2, (int64_t[]){1, 7}, 2, -1, &pl); /* both broadcast */
    assert_int_equal(pl.kind, PE_BCAST_GENERAL);
    assert_int_equal(pl.numel, 42);
    assert_int_equal(pl.out_dims[0], 6);
    assert_int_equal(pl.out_dims[1], 7);

    plan((int64_t[]){3}, 1, (int64_t[]){2, 3}, 2, -1, &pl); /* X of lower rank */
    assert_int_equal(pl.kind, PE_BCAST_GENERAL);
    assert_int_equal(pl.out_ndim, 2);
    assert_int_equal(pl.out_dims[0], 2);

    plan((int64_t[]){0, 3}, 2, (int64_t[]){3}, 1, -1, &pl); /* empty */
    assert_int_equal(pl.numel, 0);
    assert_int_equal(pl.kind, PE_BCAST_SAME);
    assert_int_equal(pl.out_dims[0], 0);
    assert_string_equal(pe_bcast_kind_name(PE_BCAST_MID), "mid");
}

static void test_plan_general_strides(void **state) {
    (void)state;
    pe_bcast_plan pl;
    plan((int64_t[]){2, 1, 4}, 3, (int64_t[]){1, 3, 1}, 3, -1, &pl);
    assert_int_equal(pl.kind, PE_BCAST_GENERAL);
    assert_int_equal(pl.ndim, 3);
    int64_t dims[3] = {2, 3, 4}, xs[3] = {4, 0, 1}, ys[3] = {0, 1, 0};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pl.dims[i], dims[i]);
        assert_int_equal(pl.x_strides[i], xs[i]);
        assert_int_equal(pl.y_strides[i], ys[i]);
    }
    /* Size-1 dims vanish and same-status neighbours merge: [2,1,3,4] + [3,4] -> [2, 12]. */
    plan((int64_t[]){2, 1, 3, 4}, 4, (int64_t[]){3, 4}, 2, -1, &pl);
    assert_int_equal(pl.ndim, 2);
    assert_int_equal(pl.dims[0], 2);
    assert_int_equal(pl.dims[1], 12);
    assert_int_equal(pl.kind, PE_BCAST_ROW);
    assert_int_equal(pl.n, 12);
}

static void test_plan_errors(void **state) {
    (void)state;
    pe_bcast_plan pl;
    assert_int_equal(pe_bcast_plan_make(2, (int64_t[]){2, 3}, 1, (int64_t[]){4}, -1, &pl), PE_ERR_INVALID);
    tu_assert_error_has("[2, 3]", "[4]", "dim 1");
    assert_int_equal(pe_bcast_plan_make(2, (int64_t[]){2, 3}, 1, (int64_t[]){3}, 2, &pl), PE_ERR_INVALID);
    tu_assert_error_has("axis 2", NULL, NULL);
    assert_int_equal(pe_bcast_plan_make(2, (int64_t[]){2, 3}, 1, (int64_t[]){3}, -2, &pl), PE_ERR_INVALID);
    assert_int_equal(pe_bcast_plan_make(2, (int64_t[]){2, 3}, 2, (int64_t[]){2, 1}, 1, &pl), PE_ERR_INVALID);
    tu_assert_error_has("aligned dim 1", "3 in X and 2 in Y", NULL);
    assert_int_equal(pe_bcast_plan_make(2, (int64_t[]){2, 3}, 2, (int64_t[]){3, 2}, 0, &pl), PE_ERR_INVALID);
    /* X aligned trailing inside Y: [1,2,3] vs [2,3,4] mismatch. */
    assert_int_equal(pe_bcast_plan_make(2, (int64_t[]){2, 3}, 3, (int64_t[]){2, 3, 4}, -1, &pl), PE_ERR_INVALID);
    /* Y [4, 2] at axis 2 of X [2, 3, 4] runs past the end (its last dim is not 1). */
    assert_int_equal(pe_bcast_plan_make(3, (int64_t[]){2, 3, 4}, 2, (int64_t[]){4, 2}, 2, &pl), PE_ERR_INVALID);
    tu_assert_error_has("past the last dim", "[2, 3, 4]", "[4, 2]");
}

/* ---- binary kernels ------------------------------------------------------------ */

static void test_add_same_shape(void **state) {
    (void)state;
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
    pe_tensor *y = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, (double[]){10, 20, 30, 40, 50, 60});
    pe_tensor *out = run_binary("elementwise_add", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){2, 3});
    assert_int_equal(out->dtype, PE_DTYPE_FP32);
    tu_assert_close(out, (double[]){11, 22, 33, 44, 55, 66}, 6, 0);
    pe_tensor_free(out);
}

static void test_sub_row_broadcast(void **state) {
    (void)state;
    pe_tensor *x = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
    pe_tensor *y = tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){3}, (double[]){1, 10, 100});
    pe_tensor *out = run_binary("elementwise_sub", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){2, 3});
    tu_assert_close(out, (double[]){0, -8, -97, 3, -5, -94}, 6, 0);
    pe_tensor_free(out);
}

static void test_mul_channel_axis1(void **state) {
    (void)state;
    /* x [2, 3, 2, 2] * y [3] with axis 1: y scales each channel. */
    double xv[24], want[24];
    for (int i = 0; i < 24; i++) xv[i] = i + 1;
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++)
            for (int k = 0; k < 4; k++) want[(n * 3 + c) * 4 + k] = xv[(n * 3 + c) * 4 + k] * (c + 2);
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 4, (int64_t[]){2, 3, 2, 2}, xv);
    pe_tensor *y = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){3}, (double[]){2, 3, 4});
    pe_tensor *out = run_binary("elementwise_mul", x, y, 1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 4, (int64_t[]){2, 3, 2, 2});
    tu_assert_close(out, want, 24, 0);
    pe_tensor_free(out);
    /* same with Y [3, 1, 1] (Paddle keeps trailing 1s of a conv bias) */
    x = tu_tensor(PE_DTYPE_FP32, 4, (int64_t[]){2, 3, 2, 2}, xv);
    y = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){3, 1, 1}, (double[]){2, 3, 4});
    out = run_binary("elementwise_mul", x, y, 1, 1, NULL);
    assert_non_null(out);
    tu_assert_close(out, want, 24, 0);
    pe_tensor_free(out);
}

static void test_axis_middle_not_trailing(void **state) {
    (void)state;
    /* x [2, 3, 4] + y [2, 3] with axis 0: y[i, j] added along the last dim. */
    double xv[24], want[24], yv[6] = {100, 200, 300, 400, 500, 600};
    for (int i = 0; i < 24; i++) { xv[i] = i; want[i] = i + yv[i / 4]; }
    pe_tensor *x = tu_tensor(PE_DTYPE_INT64, 3, (int64_t[]){2, 3, 4}, xv);
    pe_tensor *y = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){2, 3}, yv);
    pe_tensor *out = run_binary("elementwise_add", x, y, 0, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 3, (int64_t[]){2, 3, 4});
    tu_assert_close(out, want, 24, 0);
    pe_tensor_free(out);
}

static void test_div_numpy_two_way(void **state) {
    (void)state;
    /* x [3, 1] / y [1, 4] -> [3, 4] */
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 1}, (double[]){12, 24, 48});
    pe_tensor *y = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){1, 4}, (double[]){1, 2, 3, 4});
    pe_tensor *out = run_binary("elementwise_div", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){3, 4});
    tu_assert_close(out, (double[]){12, 6, 4, 3, 24, 12, 8, 6, 48, 24, 16, 12}, 12, 1e-7);
    pe_tensor_free(out);
}

static void test_scalar_like_and_lower_rank_x(void **state) {
    (void)state;
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 4});
    pe_tensor *y = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, (double[]){0.5});
    pe_tensor *out = run_binary("elementwise_mul", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){2, 2});
    tu_assert_close(out, (double[]){0.5, 1, 1.5, 2}, 4, 0);
    pe_tensor_free(out);
    /* x [3] - y [2, 3]: X is aligned inside Y, Out is [2, 3]. */
    x = tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){3}, (double[]){10, 20, 30});
    y = tu_tensor(PE_DTYPE_INT32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
    out = run_binary("elementwise_sub", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){2, 3});
    assert_int_equal(out->dtype, PE_DTYPE_INT32);
    tu_assert_close(out, (double[]){9, 18, 27, 6, 15, 24}, 6, 0);
    pe_tensor_free(out);
}

static void test_odd_and_empty_shapes(void **state) {
    (void)state;
    /* [1, 1, 1] + [1]: all-ones shapes */
    pe_tensor *x = tu_tensor(PE_DTYPE_FP64, 3, (int64_t[]){1, 1, 1}, (double[]){2});
    pe_tensor *y = tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){1}, (double[]){3});
    pe_tensor *out = run_binary("elementwise_add", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 3, (int64_t[]){1, 1, 1});
    tu_assert_close(out, (double[]){5}, 1, 0);
    pe_tensor_free(out);
    /* [0, 3] + [3] -> [0, 3] */
    x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){0, 3}, NULL);
    y = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
    out = run_binary("elementwise_add", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){0, 3});
    pe_tensor_free(out);
    /* [5, 1, 7] * [1, 3, 1] -> [5, 3, 7]: odd primes, general strided path */
    double *xv = rand_vals(35, 1), *yv = rand_vals(3, 2), want[105];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 7; k++) want[(i * 3 + j) * 7 + k] = xv[i * 7 + k] * yv[j];
    x = tu_tensor(PE_DTYPE_FP64, 3, (int64_t[]){5, 1, 7}, xv);
    y = tu_tensor(PE_DTYPE_FP64, 3, (int64_t[]){1, 3, 1}, yv);
    out = run_binary("elementwise_mul", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 3, (int64_t[]){5, 3, 7});
    tu_assert_close(out, want, 105, 0);
    pe_tensor_free(out);
    free(xv);
    free(yv);
}

static void test_integer_semantics(void **state) {
    (void)state;
    /* Truncating division, x / 0 == 0, INT_MIN / -1 wraps. */
    pe_tensor *x = tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){5}, (double[]){-7, 7, 5, -2147483648.0, 9});
    pe_tensor *y = tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){5}, (double[]){2, -2, 0, -1, 3});
    pe_tensor *out = run_binary("elementwise_div", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){-3, -3, 0, -2147483648.0, 3}, 5, 0);
    pe_tensor_free(out);
    x = tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){3}, (double[]){10, -10, 0});
    y = tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){1}, (double[]){0});
    out = run_binary("elementwise_div", x, y, -1, 1, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){0, 0, 0}, 3, 0);
    pe_tensor_free(out);
    /* int32 overflow wraps (two's complement) instead of being undefined. */
    x = tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){2}, (double[]){2147483647.0, 65536});
    y = tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){2}, (double[]){1, 65536});
    out = run_binary("elementwise_add", x, y, -1, 1, NULL);
    assert_non_null(out);
    assert_int_equal(((int32_t *)pe_tensor_data(out))[0], INT32_MIN);
    pe_tensor_free(out);
    x = tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){2}, (double[]){2147483647.0, 65536});
    y = tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){2}, (double[]){1, 65536});
    out = run_binary("elementwise_mul", x, y, -1, 1, NULL);
    assert_non_null(out);
    assert_int_equal(((int32_t *)pe_tensor_data(out))[1], 0);
    pe_tensor_free(out);
    /* float division by zero is IEEE */
    x = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, (double[]){1, -1});
    y = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, (double[]){0});
    out = run_binary("elementwise_div", x, y, -1, 1, NULL);
    assert_non_null(out);
    assert_true(isinf(tu_get(out, 0)) && tu_get(out, 0) > 0);
    assert_true(isinf(tu_get(out, 1)) && tu_get(out, 1) < 0);
    pe_tensor_free(out);
}

/* Large inputs with 2 threads (parallel branches) against a reference loop, for every fast path. */
static void test_large_parallel_all_kinds(void **state) {
    (void)state;
    struct { int xn; int64_t xd[4]; int yn; int64_t yd[4]; int axis; pe_bcast_kind kind; } cases[] = {
        {2, {300, 257}, 2, {300, 257}, -1, PE_BCAST_SAME},
        {2, {300, 257}, 1, {1}, -1, PE_BCAST_SCALAR_Y},
        {2, {300, 257}, 1, {257}, -1, PE_BCAST_ROW},
        {4, {8, 17, 16, 31}, 1, {17}, 1, PE_BCAST_MID},
        {3, {60, 1, 33}, 3, {1, 41, 33}, -1, PE_BCAST_GENERAL},
        {3, {60, 41, 1}, 2, {41, 33}, -1, PE_BCAST_GENERAL},
    };
    const char *ops[4] = {"elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pe_bcast_plan pl;
        plan(cases[c].xd, cases[c].xn, cases[c].yd, cases[c].yn, cases[c].axis, &pl);
        assert_int_equal(pl.kind, cases[c].kind);
        assert_true(pl.numel > 32768);
        int64_t nx = pe_dims_prod(cases[c].xd, 0, cases[c].xn), ny = pe_dims_prod(cases[c].yd, 0, cases[c].yn);
        double *xv = rand_vals(nx, (unsigned)c + 10), *yv = rand_vals(ny, (unsigned)c + 20);
        for (int64_t i = 0; i < ny; i++) yv[i] += yv[i] >= 0 ? 0.5 : -0.5; /* keep away from 0 for div */
        double *want = malloc((size_t)pl.numel * sizeof *want);
        for (int o = 0; o < 4; o++) {
            /* reference: walk out's multi-index over the padded shapes */
            int r = pl.out_ndim;
            int64_t xp[8], yp[8];
            int xoff = r - cases[c].xn, yoff = cases[c].axis == -1 ? r - cases[c].yn : cases[c].axis;
            for (int d = 0; d < r; d++) {
                xp[d] = d >= xoff ? cases[c].xd[d - xoff] : 1;
                yp[d] = d >= yoff && d - yoff < cases[c].yn ? cases[c].yd[d - yoff] : 1;
            }
            for (int64_t i = 0; i < pl.numel; i++) {
                int64_t rem = i, xi = 0, yi = 0, xm = 1, ym = 1;
                for (int d = r - 1; d >= 0; d--) {
                    int64_t id = rem % pl.out_dims[d];
                    rem /= pl.out_dims[d];
                    xi += (xp[d] == 1 ? 0 : id) * xm;
                    yi += (yp[d] == 1 ? 0 : id) * ym;
                    xm *= xp[d];
                    ym *= yp[d];
                }
                float a = (float)xv[xi], b = (float)yv[yi];
                want[i] = o == 0 ? a + b : o == 1 ? a - b : o == 2 ? a * b : a / b;
            }
            pe_tensor *x = tu_tensor(PE_DTYPE_FP32, cases[c].xn, cases[c].xd, xv);
            pe_tensor *y = tu_tensor(PE_DTYPE_FP32, cases[c].yn, cases[c].yd, yv);
            pe_tensor *out = run_binary(ops[o], x, y, cases[c].axis, 2, NULL);
            assert_non_null(out);
            tu_assert_dims(out, pl.out_ndim, pl.out_dims);
            tu_assert_close(out, want, pl.numel, 1e-6);
            pe_tensor_free(out);
        }
        free(xv);
        free(yv);
        free(want);
    }
}

static void test_binary_errors(void **state) {
    (void)state;
    pe_status st;
    /* incompatible shapes: names the op, both vars and both shapes */
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL);
    pe_tensor *y = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
    assert_null(run_binary("elementwise_add", x, y, -1, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("elementwise_add", "'x'", "'y'");
    tu_assert_error_has("[2, 3]", "[4]", NULL);
    /* dtype mismatch */
    x = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    y = tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){2}, NULL);
    assert_null(run_binary("elementwise_mul", x, y, -1, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("elementwise_mul", "float32", "float64");
    /* unsupported dtype */
    x = tu_tensor(PE_DTYPE_UINT8, 1, (int64_t[]){2}, NULL);
    y = tu_tensor(PE_DTYPE_UINT8, 1, (int64_t[]){2}, NULL);
    assert_null(run_binary("elementwise_sub", x, y, -1, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("uint8", "'x'", NULL);
    /* axis out of range */
    x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL);
    y = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){3}, NULL);
    assert_null(run_binary("elementwise_div", x, y, 3, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("elementwise_div", "axis 3", NULL);
    /* Y [2] at axis 1 of X [2, 3]: dim 1 is 3 vs 2 */
    x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL);
    y = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    assert_null(run_binary("elementwise_add", x, y, 1, 1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
}

/* ---- unary kernels ------------------------------------------------------------ */

static pe_tensor *run_unary(const char *type, pe_tensor *x, void (*attrs)(pe_op *), pe_status *st_out) {
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, type);
    tu_op_in(&o, op, "X", "x", x);
    tu_op_out(&o, op, "Out", "out");
    if (attrs) attrs(op);
    pe_tensor *out;
    pe_status st = tu_op_run(&o, "out", &out);
    if (st_out) *st_out = st;
    tu_op_end(&o);
    if (st != PE_OK) {
        pe_tensor_free(out);
        return NULL;
    }
    return out;
}

static void test_activations(void **state) {
    (void)state;
    double xv[6] = {-3, -0.5, 0, 0.5, 3, 100};
    double relu[6], sig[6], th[6];
    for (int i = 0; i < 6; i++) {
        relu[i] = xv[i] > 0 ? xv[i] : 0;
        sig[i] = 1.0 / (1.0 + exp(-xv[i]));
        th[i] = tanh(xv[i]);
    }
    for (int dt = PE_DTYPE_FP32; dt <= PE_DTYPE_FP64; dt++) {
        double tol = dt == PE_DTYPE_FP32 ? 1e-6 : 1e-14;
        pe_tensor *out = run_unary("relu", tu_tensor((pe_dtype)dt, 2, (int64_t[]){2, 3}, xv), NULL, NULL);
        assert_non_null(out);
        tu_assert_dims(out, 2, (int64_t[]){2, 3});
        assert_int_equal(out->dtype, dt);
        tu_assert_close(out, relu, 6, 0);
        pe_tensor_free(out);
        out = run_unary("sigmoid", tu_tensor((pe_dtype)dt, 2, (int64_t[]){2, 3}, xv), NULL, NULL);
        assert_non_null(out);
        tu_assert_close(out, sig, 6, tol);
        pe_tensor_free(out);
        out = run_unary("tanh", tu_tensor((pe_dtype)dt, 2, (int64_t[]){2, 3}, xv), NULL, NULL);
        assert_non_null(out);
        tu_assert_close(out, th, 6, tol);
        pe_tensor_free(out);
    }
    /* sigmoid never overflows; relu passes NaN through */
    pe_tensor *out = run_unary("sigmoid", tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, (double[]){-1000, 1000}), NULL, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){0, 1}, 2, 0);
    pe_tensor_free(out);
    out = run_unary("relu", tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){2}, (double[]){NAN, -INFINITY}), NULL, NULL);
    assert_non_null(out);
    assert_true(isnan(tu_get(out, 0)));
    assert_true(tu_get(out, 1) == 0);
    pe_tensor_free(out);
    /* large input, 2 threads */
    double *big = rand_vals(70001, 7);
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, "tanh");
    tu_op_in(&o, op, "X", "x", tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){70001}, big));
    tu_op_out(&o, op, "Out", "out");
    assert_int_equal(op_run_nt(&o, 2, "out", &out), PE_OK);
    for (int i = 0; i < 70001; i++) big[i] = tanh(big[i]);
    tu_assert_close(out, big, 70001, 1e-15);
    pe_tensor_free(out);
    tu_op_end(&o);
    free(big);
    /* empty */
    out = run_unary("relu", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 0}, NULL), NULL, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){3, 0});
    pe_tensor_free(out);
}

static void test_activation_errors(void **state) {
    (void)state;
    pe_status st;
    assert_null(run_unary("relu", tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){2}, NULL), NULL, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("relu", "int32", "'x'");
    assert_null(run_unary("tanh", tu_tensor(PE_DTYPE_BOOL, 1, (int64_t[]){2}, NULL), NULL, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("tanh", "bool", NULL);
}

static void attrs_scale_after(pe_op *op) {
    pe_op_set_float(op, "scale", 2.5);
    pe_op_set_float(op, "bias", 1.0);
    pe_op_set_bool(op, "bias_after_scale", true);
}
static void attrs_scale_before(pe_op *op) {
    pe_op_set_float(op, "scale", 2.5);
    pe_op_set_float(op, "bias", 1.0);
    pe_op_set_bool(op, "bias_after_scale", false);
}

static void test_scale(void **state) {
    (void)state;
    double xv[4] = {-2, 0, 1, 4};
    pe_tensor *out = run_unary("scale", tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 2}, xv), attrs_scale_after, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 2, (int64_t[]){2, 2});
    tu_assert_close(out, (double[]){-4, 1, 3.5, 11}, 4, 0);
    pe_tensor_free(out);
    out = run_unary("scale", tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){4}, xv), attrs_scale_before, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){-2.5, 2.5, 5, 12.5}, 4, 0);
    pe_tensor_free(out);
    /* integers: scale and bias are cast to the integer type first (2.5 -> 2), as Paddle */
    out = run_unary("scale", tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){4}, xv), attrs_scale_after, NULL);
    assert_non_null(out);
    assert_int_equal(out->dtype, PE_DTYPE_INT64);
    tu_assert_close(out, (double[]){-3, 1, 3, 9}, 4, 0);
    pe_tensor_free(out);
    out = run_unary("scale", tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){4}, xv), attrs_scale_before, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){-2, 2, 4, 10}, 4, 0);
    pe_tensor_free(out);
    /* defaults: identity */
    out = run_unary("scale", tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){4}, xv), NULL, NULL);
    assert_non_null(out);
    tu_assert_close(out, xv, 4, 0);
    pe_tensor_free(out);
    pe_status st;
    assert_null(run_unary("scale", tu_tensor(PE_DTYPE_UINT8, 1, (int64_t[]){2}, NULL), NULL, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("scale", "uint8", NULL);
}

/* ---- cast ---------------------------------------------------------------------- */

static int g_cast_to;
static void attrs_cast(pe_op *op) { pe_op_set_int(op, "out_dtype", g_cast_to); }

static pe_tensor *run_cast(pe_tensor *x, int to, pe_status *st) {
    g_cast_to = to;
    return run_unary("cast", x, attrs_cast, st);
}

static void test_cast_all_pairs(void **state) {
    (void)state;
    /* values every one of the six dtypes holds exactly */
    double v[4] = {0, 1, 1, 0};
    double w[4] = {0, 1, 7, 42};
    for (int a = PE_DTYPE_FP32; a <= PE_DTYPE_BOOL; a++)
        for (int b = PE_DTYPE_FP32; b <= PE_DTYPE_BOOL; b++) {
            const double *src = a == PE_DTYPE_BOOL ? v : w;
            pe_tensor *out = run_cast(tu_tensor((pe_dtype)a, 2, (int64_t[]){2, 2}, src), b, NULL);
            assert_non_null(out);
            assert_int_equal(out->dtype, b);
            tu_assert_dims(out, 2, (int64_t[]){2, 2});
            double want[4];
            for (int i = 0; i < 4; i++) want[i] = b == PE_DTYPE_BOOL ? (src[i] != 0) : src[i];
            tu_assert_close(out, want, 4, 0);
            pe_tensor_free(out);
        }
}

static void test_cast_conversions(void **state) {
    (void)state;
    double xv[7] = {-2.7, -0.5, 0, 1.5, 300.9, NAN, 1e30};
    pe_tensor *out = run_cast(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){7}, xv), PE_DTYPE_INT32, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){-2, 0, 0, 1, 300, 0, 2147483647.0}, 7, 0); /* trunc, NaN 0, saturate */
    pe_tensor_free(out);
    out = run_cast(tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){7}, xv), PE_DTYPE_INT64, NULL);
    assert_non_null(out);
    assert_int_equal(((int64_t *)pe_tensor_data(out))[0], -2);
    assert_int_equal(((int64_t *)pe_tensor_data(out))[4], 300);
    assert_int_equal(((int64_t *)pe_tensor_data(out))[5], 0);
    assert_int_equal(((int64_t *)pe_tensor_data(out))[6], INT64_MAX);
    pe_tensor_free(out);
    out = run_cast(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){7}, xv), PE_DTYPE_UINT8, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){254, 0, 0, 1, 44, 0, 255}, 7, 0); /* -2 -> 254, 300 -> 44 (mod 256) */
    pe_tensor_free(out);
    out = run_cast(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){7}, xv), PE_DTYPE_BOOL, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){1, 1, 0, 1, 1, 1, 1}, 7, 0); /* NaN != 0 */
    pe_tensor_free(out);
    /* int64 -> int32 wraps; -> uint8 wraps; -> float */
    out = run_cast(tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){3}, (double[]){4294967301.0, -1, 257}), PE_DTYPE_INT32, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){5, -1, 257}, 3, 0);
    pe_tensor_free(out);
    out = run_cast(tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){3}, (double[]){-1, 256, 257}), PE_DTYPE_UINT8, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){255, 0, 1}, 3, 0);
    pe_tensor_free(out);
    out = run_cast(tu_tensor(PE_DTYPE_UINT8, 1, (int64_t[]){2}, (double[]){200, 3}), PE_DTYPE_FP32, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){200, 3}, 2, 0);
    pe_tensor_free(out);
    /* bool input bytes other than 0/1 read as true */
    out = run_cast(tu_tensor(PE_DTYPE_BOOL, 1, (int64_t[]){3}, (double[]){0, 2, 255}), PE_DTYPE_INT64, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){0, 1, 1}, 3, 0);
    pe_tensor_free(out);
    out = run_cast(tu_tensor(PE_DTYPE_BOOL, 1, (int64_t[]){3}, (double[]){0, 2, 255}), PE_DTYPE_BOOL, NULL);
    assert_non_null(out);
    tu_assert_close(out, (double[]){0, 1, 1}, 3, 0);
    pe_tensor_free(out);
    /* empty */
    out = run_cast(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){0}, NULL), PE_DTYPE_INT64, NULL);
    assert_non_null(out);
    tu_assert_dims(out, 1, (int64_t[]){0});
    assert_int_equal(out->dtype, PE_DTYPE_INT64);
    pe_tensor_free(out);
}

static void test_cast_errors(void **state) {
    (void)state;
    pe_status st;
    assert_null(run_cast(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL), PE_DTYPE_FP16, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("cast", "out_dtype", "6");
    assert_null(run_cast(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL), -1, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    assert_null(run_cast(tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL), 99, &st));
    assert_int_equal(st, PE_ERR_INVALID);
    tu_assert_error_has("99", NULL, NULL);
    /* missing required attr out_dtype */
    tu_one_op o;
    pe_op *op = tu_op_begin(&o, "cast");
    tu_op_in(&o, op, "X", "x", tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL));
    tu_op_out(&o, op, "Out", "out");
    pe_tensor *out;
    assert_int_not_equal(tu_op_run(&o, "out", &out), PE_OK);
    tu_assert_error_has("out_dtype", NULL, NULL);
    pe_tensor_free(out);
    tu_op_end(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_kinds),
        cmocka_unit_test(test_plan_general_strides),
        cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_add_same_shape),
        cmocka_unit_test(test_sub_row_broadcast),
        cmocka_unit_test(test_mul_channel_axis1),
        cmocka_unit_test(test_axis_middle_not_trailing),
        cmocka_unit_test(test_div_numpy_two_way),
        cmocka_unit_test(test_scalar_like_and_lower_rank_x),
        cmocka_unit_test(test_odd_and_empty_shapes),
        cmocka_unit_test(test_integer_semantics),
        cmocka_unit_test(test_large_parallel_all_kinds),
        cmocka_unit_test(test_binary_errors),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_activation_errors),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_cast_all_pairs),
        cmocka_unit_test(test_cast_conversions),
        cmocka_unit_test(test_cast_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
