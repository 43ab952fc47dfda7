/* tests/unit/test_ops_tensor.c — reshape2, transpose2, concat,
 * fill_constant, assign_value: shapes and values against reference index
 * loops written here, XShape, dtypes, attr errors; split, slice,
 * flatten_contiguous_range, flatten2, squeeze2 and unsqueeze2 against
 * hand-computed shapes and values (Paddle's rules: sections with -1, clamped
 * and negative slice bounds, decrease_axis, unsqueeze's insertion order).
 * (Gradients: test_grad_tensor.c.) */
#include "tests/unit/op_test_util.h"

#include <stdlib.h>
#include <string.h>

static pe_status run_nt(const pe_program *p, const pe_feed *feeds, int nf, const char *const *fetch, int nfetch,
                        pe_tensor **out, int nt) {
    tu_declare_outputs((pe_program *)(uintptr_t)p, feeds, nf); /* the test's own program */
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_non_null(scope);
    assert_non_null(ex);
    if (nt > 0) pe_executor_set_num_threads(ex, nt);
    pe_status st = pe_executor_run(ex, p, 0, scope, feeds, nf, fetch, nfetch, out);
    pe_executor_free(ex);
    pe_scope_free(scope);
    return st;
}

static double *iota(int64_t n) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 37) % 1000) - 500.0;
    return v;
}

/* Program with one op `type`: X <- "x" (declared from t), Out -> "out", XShape -> "xs" when asked. */
static pe_program *unary_prog(const char *type, const pe_tensor *t, bool xshape, pe_op **op) {
    pe_program *p = pe_program_new();
    tu_declare(p, "x", t);
    *op = pe_block_add_op(&p->blocks[0], type);
    pe_op_add_input(*op, "X", "x");
    pe_op_add_output(*op, "Out", "out");
    pe_block_add_var(&p->blocks[0], "out", t->dtype, 0, NULL);
    if (xshape) {
        pe_op_add_output(*op, "XShape", "xs");
        pe_block_add_var(&p->blocks[0], "xs", t->dtype, 0, NULL);
    }
    return p;
}

/* ---- reshape2 ------------------------------------------------------------ */

static void check_reshape(const int64_t *shape, int n, int want_rank, const int64_t *want) {
    double *v = iota(24);
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){2, 3, 4}, v);
    pe_op *op;
    pe_program *p = unary_prog("reshape2", x, true, &op);
    pe_op_set_ints(op, "shape", shape, n);
    pe_tensor *out = pe_tensor_new(), *xs = pe_tensor_new();
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"out", "xs"}, 2,
                            (pe_tensor *[]){out, xs}, 0), PE_OK);
    tu_assert_dims(out, want_rank, want);
    tu_assert_close(out, v, 24, 0);
    tu_assert_dims(xs, 4, (int64_t[]){0, 2, 3, 4});
    assert_int_equal(pe_tensor_numel(xs), 0);
    pe_tensor_free(x); pe_tensor_free(out); pe_tensor_free(xs);
    pe_program_free(p);
    free(v);
}

static void test_reshape2(void **state) {
    (void)state;
    check_reshape((int64_t[]){0, -1}, 2, 2, (int64_t[]){2, 12});
    check_reshape((int64_t[]){-1, 0, 2}, 3, 3, (int64_t[]){4, 3, 2});
    check_reshape((int64_t[]){4, 6}, 2, 2, (int64_t[]){4, 6});
    check_reshape((int64_t[]){0, 0, 0}, 3, 3, (int64_t[]){2, 3, 4});
    check_reshape((int64_t[]){24}, 1, 1, (int64_t[]){24});
    check_reshape((int64_t[]){1, 2, 1, 3, -1}, 5, 5, (int64_t[]){1, 2, 1, 3, 4});
}

static void test_reshape2_without_xshape_and_empty(void **state) {
    (void)state;
    pe_tensor *x = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){0, 6}, NULL);
    pe_op *op;
    pe_program *p = unary_prog("reshape2", x, false, &op);
    pe_op_set_ints(op, "shape", (int64_t[]){0, 2, 3}, 3);
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"out"}, 1, &out, 0), PE_OK);
    tu_assert_dims(out, 3, (int64_t[]){0, 2, 3});
    pe_tensor_free(x); pe_tensor_free(out);
    pe_program_free(p);
}

static void test_reshape2_errors(void **state) {
    (void)state;
    struct { int64_t shape[4]; int n; const char *want; } cases[] = {
        {{-1, -1}, 2, "more than one -1"},
        {{5, 5}, 2, "cannot reshape"},
        {{5, -1}, 2, "not a multiple of 5"},
        {{0, 0, 0, 0}, 4, "has rank 3"},
        {{2, -2, 6}, 3, "shape[1] = -2"},
        {{0, 0, -1}, 3, NULL}, /* valid: [2, 3, 4] */
    };
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){2, 3, 4}, NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_op *op;
        pe_program *p = unary_prog("reshape2", x, false, &op);
        pe_op_set_ints(op, "shape", cases[i].shape, cases[i].n);
        pe_tensor *out = pe_tensor_new();
        pe_status st = run_nt(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"out"}, 1, &out, 0);
        if (cases[i].want) {
            assert_int_equal(st, PE_ERR_INVALID);
            const char *e = pe_last_error();
            if (!strstr(e, cases[i].want) || !strstr(e, "reshape2"))
                fail_msg("case %zu: unexpected message: %s", i, e);
        } else {
            assert_int_equal(st, PE_OK);
            tu_assert_dims(out, 3, (int64_t[]){2, 3, 4});
        }
        pe_tensor_free(out);
        pe_program_free(p);
    }
    pe_tensor_free(x);
}

/* ---- transpose2 ---------------------------------------------------------- */

/* out[j-coords] = x[coords permuted], reference by coordinates */
static void ref_transpose(const double *x, int r, const int64_t *d, const int64_t *perm, double *out, int64_t *od) {
    int64_t n = 1, istr[8];
    for (int a = r - 1; a >= 0; a--) { istr[a] = n; n *= d[a]; }
    for (int j = 0; j < r; j++) od[j] = d[perm[j] < 0 ? perm[j] + r : perm[j]];
    for (int64_t o = 0; o < n; o++) {
        int64_t rem = o, off = 0;
        for (int j = r - 1; j >= 0; j--) {
            int64_t c = rem % od[j];
            rem /= od[j];
            off += c * istr[perm[j] < 0 ? perm[j] + r : perm[j]];
        }
        out[o] = x[off];
    }
}

static void check_transpose(pe_dtype dt, int r, const int64_t *d, const int64_t *perm, int nt) {
    int64_t n = 1;
    for (int a = 0; a < r; a++) n *= d[a];
    double *v = iota(n), *want = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (dt == PE_DTYPE_UINT8 || dt == PE_DTYPE_BOOL)
        for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7) % 256 % (dt == PE_DTYPE_BOOL ? 2 : 256));
    pe_tensor *x = tu_tensor(dt, r, d, v);
    pe_op *op;
    pe_program *p = unary_prog("transpose2", x, true, &op);
    pe_op_set_ints(op, "axis", perm, r);
    pe_tensor *out = pe_tensor_new(), *xs = pe_tensor_new();
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"out", "xs"}, 2,
                            (pe_tensor *[]){out, xs}, nt), PE_OK);
    int64_t od[8];
    ref_transpose(v, r, d, perm, want, od);
    tu_assert_dims(out, r, od);
    tu_assert_close(out, want, n, 0);
    assert_int_equal(xs->ndim, r + 1);
    assert_int_equal(xs->dims[0], 0);
    pe_tensor_free(x); pe_tensor_free(out); pe_tensor_free(xs);
    pe_program_free(p);
    free(v); free(want);
}

static void test_transpose2(void **state) {
    (void)state;
    const int64_t d3[3] = {2, 3, 4};
    const int64_t perms3[][3] = {{0, 1, 2}, {1, 2, 0}, {2, 1, 0}, {0, 2, 1}, {2, 0, 1}, {1, 0, 2}, {-1, 0, -2}};
    for (size_t i = 0; i < sizeof perms3 / sizeof perms3[0]; i++) {
        check_transpose(PE_DTYPE_FP32, 3, d3, perms3[i], 0);
        check_transpose(PE_DTYPE_INT64, 3, d3, perms3[i], 0);
        check_transpose(PE_DTYPE_UINT8, 3, d3, perms3[i], 0);
    }
    /* NCHW -> NHWC and back, with a size-1 dim */
    check_transpose(PE_DTYPE_FP32, 4, (int64_t[]){2, 3, 1, 5}, (int64_t[]){0, 2, 3, 1}, 0);
    check_transpose(PE_DTYPE_FP64, 4, (int64_t[]){2, 1, 5, 3}, (int64_t[]){0, 3, 1, 2}, 0);
    /* 5-D mixed */
    check_transpose(PE_DTYPE_FP32, 5, (int64_t[]){2, 3, 2, 4, 3}, (int64_t[]){4, 1, 3, 0, 2}, 0);
    /* 2-D with partial tiles, and large enough to go parallel */
    check_transpose(PE_DTYPE_FP32, 2, (int64_t[]){37, 70}, (int64_t[]){1, 0}, 1);
    check_transpose(PE_DTYPE_FP32, 2, (int64_t[]){300, 211}, (int64_t[]){1, 0}, 4);
    check_transpose(PE_DTYPE_BOOL, 3, (int64_t[]){50, 40, 33}, (int64_t[]){2, 0, 1}, 4);
    check_transpose(PE_DTYPE_INT32, 3, (int64_t[]){64, 33, 40}, (int64_t[]){1, 0, 2}, 4); /* row copies */
    /* empty */
    check_transpose(PE_DTYPE_FP32, 3, (int64_t[]){2, 0, 3}, (int64_t[]){2, 1, 0}, 0);
}

static void test_transpose2_errors(void **state) {
    (void)state;
    struct { int64_t axis[4]; int n; const char *want; } cases[] = {
        {{0, 1}, 2, "has rank 3"},
        {{0, 1, 1}, 3, "not a permutation"},
        {{0, 1, 3}, 3, "out of range"},
        {{0, -4, 1}, 3, "out of range"},
    };
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){2, 3, 4}, NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_op *op;
        pe_program *p = unary_prog("transpose2", x, false, &op);
        pe_op_set_ints(op, "axis", cases[i].axis, cases[i].n);
        pe_tensor *out = pe_tensor_new();
        assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"out"}, 1, &out, 0), PE_ERR_INVALID);
        if (!strstr(pe_last_error(), cases[i].want)) fail_msg("case %zu: %s", i, pe_last_error());
        pe_tensor_free(out);
        pe_program_free(p);
    }
    pe_tensor_free(x);
}

/* ---- concat -------------------------------------------------------------- */

/* Concatenates three inputs whose dims are base with `sizes[i]` on `axis`. */
static void check_concat(pe_dtype dt, int r, const int64_t *base, int axis_attr, const int64_t *sizes, int nt) {
    int axis = axis_attr < 0 ? axis_attr + r : axis_attr;
    pe_program *p = pe_program_new();
    pe_op *op = pe_block_add_op(&p->blocks[0], "concat");
    pe_tensor *xs[3];
    double *vals[3];
    pe_feed feeds[3];
    char names[3][8];
    int64_t od[8];
    memcpy(od, base, sizeof(int64_t) * (size_t)r);
    od[axis] = 0;
    for (int i = 0; i < 3; i++) {
        int64_t d[8];
        memcpy(d, base, sizeof(int64_t) * (size_t)r);
        d[axis] = sizes[i];
        od[axis] += sizes[i];
        int64_t n = 1;
        for (int a = 0; a < r; a++) n *= d[a];
        vals[i] = iota(n);
        for (int64_t k = 0; k < n; k++)
            vals[i][k] = dt == PE_DTYPE_UINT8 ? (double)((k * 7 + i * 50) % 256) : vals[i][k] + 1000.0 * i;
        xs[i] = tu_tensor(dt, r, d, vals[i]);
        snprintf(names[i], sizeof names[i], "x%d", i);
        tu_declare(p, names[i], xs[i]);
        pe_op_add_input(op, "X", names[i]);
        feeds[i] = (pe_feed){names[i], xs[i]};
    }
    pe_op_add_output(op, "Out", "out");
    pe_op_set_int(op, "axis", axis_attr);
    pe_block_add_var(&p->blocks[0], "out", dt, 0, NULL);
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(run_nt(p, feeds, 3, (const char *[]){"out"}, 1, &out, nt), PE_OK);
    tu_assert_dims(out, r, od);
    /* reference: walk output coordinates, find the input along axis */
    int64_t n = 1;
    for (int a = 0; a < r; a++) n *= od[a];
    double *want = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t o = 0; o < n; o++) {
        int64_t c[8], rem = o;
        for (int a = r - 1; a >= 0; a--) { c[a] = rem % od[a]; rem /= od[a]; }
        int i = 0;
        while (c[axis] >= sizes[i]) c[axis] -= sizes[i++];
        int64_t off = 0;
        for (int a = 0; a < r; a++) off = off * (a == axis ? sizes[i] : base[a]) + c[a];
        want[o] = vals[i][off];
    }
    tu_assert_close(out, want, n, 0);
    for (int i = 0; i < 3; i++) { pe_tensor_free(xs[i]); free(vals[i]); }
    pe_tensor_free(out);
    free(want);
    pe_program_free(p);
}

static void test_concat_each_axis(void **state) {
    (void)state;
    const int64_t base[3] = {2, 3, 4};
    for (int axis = -3; axis < 3; axis++) {
        check_concat(PE_DTYPE_FP32, 3, base, axis, (int64_t[]){1, 2, 3}, 0);
        check_concat(PE_DTYPE_INT64, 3, base, axis, (int64_t[]){2, 0, 1}, 0); /* an empty input */
    }
    check_concat(PE_DTYPE_FP64, 2, (int64_t[]){400, 30}, 1, (int64_t[]){10, 20, 30}, 4); /* parallel rows */
    check_concat(PE_DTYPE_UINT8, 1, (int64_t[]){5}, 0, (int64_t[]){3, 4, 5}, 0);
}

static void test_concat_errors(void **state) {
    (void)state;
    pe_tensor *a = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL);
    pe_tensor *b = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 4}, NULL);
    pe_tensor *c = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){2, 3}, NULL);
    struct { const pe_tensor *second; int axis; const char *want; } cases[] = {
        {b, 0, "does not match"}, {c, 0, "dtype float64"}, {a, 2, "out of range"}, {a, -3, "out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_program *p = pe_program_new();
        tu_declare(p, "a", a);
        tu_declare(p, "b", cases[i].second);
        pe_op *op = pe_block_add_op(&p->blocks[0], "concat");
        pe_op_add_input(op, "X", "a");
        pe_op_add_input(op, "X", "b");
        pe_op_add_output(op, "Out", "out");
        pe_op_set_int(op, "axis", cases[i].axis);
        pe_block_add_var(&p->blocks[0], "out", PE_DTYPE_FP32, 0, NULL);
        pe_tensor *out = pe_tensor_new();
        assert_int_equal(run_nt(p, (pe_feed[]){{"a", a}, {"b", cases[i].second}}, 2, (const char *[]){"out"}, 1,
                                &out, 0), PE_ERR_INVALID);
        if (!strstr(pe_last_error(), cases[i].want) || !strstr(pe_last_error(), "concat"))
            fail_msg("case %zu: %s", i, pe_last_error());
        pe_tensor_free(out);
        pe_program_free(p);
    }
    pe_tensor_free(a); pe_tensor_free(b); pe_tensor_free(c);
}

/* ---- fill_constant, assign_value ------------------------------------------ */

/* Runs a no-input op built by the caller; returns the status, output in *out. */
static pe_status run_source(pe_program *p, pe_tensor *out) {
    pe_block_add_var(&p->blocks[0], "out", PE_DTYPE_FP32, 0, NULL);
    return run_nt(p, NULL, 0, (const char *[]){"out"}, 1, &out, 0);
}

static pe_program *fill_prog(int dtype, double value, const char *str_value) {
    pe_program *p = pe_program_new();
    pe_op *op = pe_block_add_op(&p->blocks[0], "fill_constant");
    pe_op_add_output(op, "Out", "out");
    pe_op_set_longs(op, "shape", (int64_t[]){2, 3}, 2);
    pe_op_set_int(op, "dtype", dtype);
    pe_op_set_float(op, "value", value);
    if (str_value) pe_op_set_string(op, "str_value", str_value);
    return p;
}

static void test_fill_constant_dtypes(void **state) {
    (void)state;
    const pe_dtype dts[] = {PE_DTYPE_FP32, PE_DTYPE_FP64, PE_DTYPE_INT32, PE_DTYPE_INT64, PE_DTYPE_UINT8, PE_DTYPE_BOOL};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        double v = dts[i] == PE_DTYPE_BOOL ? 1 : dts[i] == PE_DTYPE_FP32 || dts[i] == PE_DTYPE_FP64 ? 2.5 : 7;
        pe_program *p = fill_prog(dts[i], v, NULL);
        pe_tensor *out = pe_tensor_new();
        assert_int_equal(run_source(p, out), PE_OK);
        assert_int_equal(out->dtype, dts[i]);
        tu_assert_dims(out, 2, (int64_t[]){2, 3});
        tu_assert_close(out, (double[]){v, v, v, v, v, v}, 6, 0);
        pe_tensor_free(out);
        pe_program_free(p);
    }
    /* empty shape dim */
    pe_program *p = fill_prog(PE_DTYPE_FP32, 1, NULL);
    pe_op_set_longs(&p->blocks[0].ops[0], "shape", (int64_t[]){4, 0}, 2);
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(run_source(p, out), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){4, 0});
    pe_tensor_free(out);
    pe_program_free(p);
}

static void test_fill_constant_str_value(void **state) {
    (void)state;
    struct { int dtype; const char *s; double want; } ok[] = {
        {PE_DTYPE_FP32, "inf", INFINITY}, {PE_DTYPE_FP64, "-inf", -INFINITY}, {PE_DTYPE_FP32, "0.25e-2", 0.0025f},
        {PE_DTYPE_INT32, "-12", -12}, {PE_DTYPE_BOOL, "false", 0}, {PE_DTYPE_BOOL, "1.0", 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        pe_program *p = fill_prog(ok[i].dtype, 99.0, ok[i].s); /* str_value overrides value */
        pe_tensor *out = pe_tensor_new();
        assert_int_equal(run_source(p, out), PE_OK);
        for (int k = 0; k < 6; k++)
            if (tu_get(out, k) != ok[i].want) fail_msg("case %zu: got %g", i, tu_get(out, k));
        pe_tensor_free(out);
        pe_program_free(p);
    }
    /* nan */
    pe_program *p = fill_prog(PE_DTYPE_FP32, 0, "nan");
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(run_source(p, out), PE_OK);
    assert_true(isnan(tu_get(out, 5)));
    pe_program_free(p);
    /* int64 beyond 2^53 is exact through str_value */
    p = fill_prog(PE_DTYPE_INT64, 0, "9007199254740993");
    assert_int_equal(run_source(p, out), PE_OK);
    assert_true(((int64_t *)pe_tensor_data(out))[3] == INT64_C(9007199254740993));
    pe_program_free(p);
    /* errors */
    struct { int dtype; double value; const char *s; const char *want; } bad[] = {
        {PE_DTYPE_FP32, 0, "abc", "not a number"}, {PE_DTYPE_FP32, 0, "1.5x", "not a number"},
        {PE_DTYPE_INT32, 3e9, NULL, "does not fit"}, {PE_DTYPE_UINT8, 0, "256", "does not fit"},
        {PE_DTYPE_INT64, 0, "nan", "does not fit"}, {9, 0, NULL, "dtype = 9"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = fill_prog(bad[i].dtype, bad[i].value, bad[i].s);
        assert_int_equal(run_source(p, out), PE_ERR_INVALID);
        if (!strstr(pe_last_error(), bad[i].want) || !strstr(pe_last_error(), "fill_constant"))
            fail_msg("case %zu: %s", i, pe_last_error());
        pe_program_free(p);
    }
    p = fill_prog(PE_DTYPE_FP32, 0, NULL);
    pe_op_set_longs(&p->blocks[0].ops[0], "shape", (int64_t[]){2, -1}, 2);
    assert_int_equal(run_source(p, out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "shape[1] = -1"));
    pe_program_free(p);
    pe_tensor_free(out);
}

static void test_assign_value(void **state) {
    (void)state;
    pe_tensor *out = pe_tensor_new();
    /* fp32 and fp64 from fp32_values */
    for (int dt = PE_DTYPE_FP32; dt <= PE_DTYPE_FP64; dt++) {
        pe_program *p = pe_program_new();
        pe_op *op = pe_block_add_op(&p->blocks[0], "assign_value");
        pe_op_add_output(op, "Out", "out");
        pe_op_set_longs(op, "shape", (int64_t[]){2, 2}, 2);
        pe_op_set_int(op, "dtype", dt);
        pe_op_set_floats(op, "fp32_values", (double[]){0.5, -1.25, 3, 1e-7}, 4);
        assert_int_equal(run_source(p, out), PE_OK);
        assert_int_equal(out->dtype, dt);
        tu_assert_dims(out, 2, (int64_t[]){2, 2});
        tu_assert_close(out, (double[]){0.5, -1.25, 3, 1e-7}, 4, dt == PE_DTYPE_FP64 ? 0 : 1e-7);
        pe_program_free(p);
    }
    /* int64 exact, int32 */
    pe_program *p = pe_program_new();
    pe_op *op = pe_block_add_op(&p->blocks[0], "assign_value");
    pe_op_add_output(op, "Out", "out");
    pe_op_set_longs(op, "shape", (int64_t[]){3}, 1);
    pe_op_set_int(op, "dtype", PE_DTYPE_INT64);
    pe_op_set_longs(op, "int64_values", (int64_t[]){INT64_C(1) << 60, -5, 0}, 3);
    assert_int_equal(run_source(p, out), PE_OK);
    assert_true(((int64_t *)pe_tensor_data(out))[0] == (INT64_C(1) << 60));
    assert_true(((int64_t *)pe_tensor_data(out))[1] == -5);
    pe_program_free(p);
    p = pe_program_new();
    op = pe_block_add_op(&p->blocks[0], "assign_value");
    pe_op_add_output(op, "Out", "out");
    pe_op_set_longs(op, "shape", (int64_t[]){1, 3}, 2);
    pe_op_set_int(op, "dtype", PE_DTYPE_INT32);
    pe_op_set_ints(op, "int32_values", (int64_t[]){4, -3, 2}, 3);
    assert_int_equal(run_source(p, out), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){1, 3});
    tu_assert_close(out, (double[]){4, -3, 2}, 3, 0);
    /* wrong count */
    pe_op_set_longs(&p->blocks[0].ops[0], "shape", (int64_t[]){2, 3}, 2);
    assert_int_equal(run_source(p, out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "int32_values has 3 values but shape holds 6"));
    pe_program_free(p);
    pe_tensor_free(out);
}

/* ---- split ---------------------------------------------------------------- */

/* x [2, 6] = iota; split into n outputs with attrs; returns the status. */
static pe_status run_split(const pe_tensor *x, int n, void (*attrs)(pe_op *), pe_tensor **outs) {
    pe_program *p = pe_program_new();
    tu_declare(p, "x", x);
    pe_op *op = pe_block_add_op(&p->blocks[0], "split");
    pe_op_add_input(op, "X", "x");
    char names[4][16];
    const char *fetch[4];
    for (int k = 0; k < n; k++) {
        snprintf(names[k], sizeof names[k], "o%d", k);
        fetch[k] = names[k];
        pe_block_add_var(&p->blocks[0], names[k], x->dtype, 0, NULL);
        pe_op_add_output(&p->blocks[0].ops[0], "Out", names[k]);
    }
    attrs(&p->blocks[0].ops[0]);
    pe_status st = run_nt(p, (pe_feed[]){{"x", x}}, 1, fetch, n, outs, 0);
    pe_program_free(p);
    return st;
}

static void split_num3_ax1(pe_op *op) { pe_op_set_int(op, "num", 3); pe_op_set_int(op, "axis", 1); }
static void split_sec_m1(pe_op *op) { pe_op_set_ints(op, "sections", (int64_t[]){1, -1, 2}, 3); pe_op_set_int(op, "axis", -1); }
static void split_num2_ax0(pe_op *op) { pe_op_set_int(op, "num", 2); }
static void split_num4_ax1(pe_op *op) { pe_op_set_int(op, "num", 4); pe_op_set_int(op, "axis", 1); }
static void split_sec_bad(pe_op *op) { pe_op_set_ints(op, "sections", (int64_t[]){1, 2, 2}, 3); pe_op_set_int(op, "axis", 1); }

static void test_split(void **state) {
    (void)state;
    /* x = [[0 1 2 3 4 5], [6 7 8 9 10 11]] */
    pe_tensor *x = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){2, 6}, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    pe_tensor *o[3] = {pe_tensor_new(), pe_tensor_new(), pe_tensor_new()};
    assert_int_equal(run_split(x, 3, split_num3_ax1, o), PE_OK);
    for (int k = 0; k < 3; k++) tu_assert_dims(o[k], 2, (int64_t[]){2, 2});
    tu_assert_close(o[0], (double[]){0, 1, 6, 7}, 4, 0);
    tu_assert_close(o[1], (double[]){2, 3, 8, 9}, 4, 0);
    tu_assert_close(o[2], (double[]){4, 5, 10, 11}, 4, 0);
    /* sections (1, -1, 2) on axis -1: the -1 is 3 */
    assert_int_equal(run_split(x, 3, split_sec_m1, o), PE_OK);
    tu_assert_dims(o[0], 2, (int64_t[]){2, 1});
    tu_assert_dims(o[1], 2, (int64_t[]){2, 3});
    tu_assert_dims(o[2], 2, (int64_t[]){2, 2});
    tu_assert_close(o[0], (double[]){0, 6}, 2, 0);
    tu_assert_close(o[1], (double[]){1, 2, 3, 7, 8, 9}, 6, 0);
    tu_assert_close(o[2], (double[]){4, 5, 10, 11}, 4, 0);
    /* axis 0 */
    assert_int_equal(run_split(x, 2, split_num2_ax0, o), PE_OK);
    tu_assert_close(o[0], (double[]){0, 1, 2, 3, 4, 5}, 6, 0);
    tu_assert_close(o[1], (double[]){6, 7, 8, 9, 10, 11}, 6, 0);
    /* errors */
    assert_int_equal(run_split(x, 3, split_num4_ax1, o), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "num = 4 does not divide dim 6"));
    assert_int_equal(run_split(x, 3, split_sec_bad, o), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "sections add up to 5"));
    assert_int_equal(run_split(x, 2, split_num3_ax1, o), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "splits into 3 parts but the op has 2"));
    for (int k = 0; k < 3; k++) pe_tensor_free(o[k]);
    pe_tensor_free(x);
}

/* ---- slice ------------------------------------------------------------------ */

typedef struct {
    int n;
    int64_t axes[3], starts[3], ends[3];
    int nd;
    int64_t dec[2];
} slice_attrs;

static pe_status run_slice(const pe_tensor *x, const slice_attrs *a, pe_tensor *out, int nt) {
    pe_program *p = pe_program_new();
    tu_declare(p, "x", x);
    pe_op *op = pe_block_add_op(&p->blocks[0], "slice");
    pe_op_add_input(op, "Input", "x");
    pe_op_add_output(op, "Out", "out");
    pe_block_add_var(&p->blocks[0], "out", x->dtype, 0, NULL);
    pe_op_set_ints(op, "axes", a->axes, a->n);
    pe_op_set_ints(op, "starts", a->starts, a->n);
    pe_op_set_ints(op, "ends", a->ends, a->n);
    if (a->nd) pe_op_set_ints(op, "decrease_axis", a->dec, a->nd);
    pe_status st = run_nt(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"out"}, 1, &out, nt);
    pe_program_free(p);
    return st;
}

static void test_slice(void **state) {
    (void)state;
    /* x [3, 4]: x[i][j] = 10 i + j */
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 4}, (double[]){0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23});
    pe_tensor *out = pe_tensor_new();
    /* x[1:3, 1:3] */
    assert_int_equal(run_slice(x, &(slice_attrs){2, {0, 1}, {1, 1}, {3, 3}, 0, {0}}, out, 0), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){2, 2});
    tu_assert_close(out, (double[]){11, 12, 21, 22}, 4, 0);
    /* negative bounds, out-of-range end clamped: x[-2:100, -3:-1] = x[1:3, 1:3] */
    assert_int_equal(run_slice(x, &(slice_attrs){2, {0, 1}, {-2, -3}, {100, -1}, 0, {0}}, out, 0), PE_OK);
    tu_assert_close(out, (double[]){11, 12, 21, 22}, 4, 0);
    /* start below -dim clamps to 0, negative axis: x[:, -100:2] */
    assert_int_equal(run_slice(x, &(slice_attrs){1, {-1}, {-100}, {2}, 0, {0}}, out, 0), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){3, 2});
    tu_assert_close(out, (double[]){0, 1, 10, 11, 20, 21}, 6, 0);
    /* decrease_axis: x[2, 1:] -> [3] */
    assert_int_equal(run_slice(x, &(slice_attrs){2, {0, 1}, {2, 1}, {3, 4}, 1, {0}}, out, 0), PE_OK);
    tu_assert_dims(out, 1, (int64_t[]){3});
    tu_assert_close(out, (double[]){21, 22, 23}, 3, 0);
    /* every axis decreased: [1] */
    assert_int_equal(run_slice(x, &(slice_attrs){2, {0, 1}, {1, 3}, {2, 4}, 2, {0, 1}}, out, 0), PE_OK);
    tu_assert_dims(out, 1, (int64_t[]){1});
    tu_assert_close(out, (double[]){13}, 1, 0);
    /* end <= start: an empty axis, as numpy */
    assert_int_equal(run_slice(x, &(slice_attrs){1, {1}, {3}, {1}, 0, {0}}, out, 0), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){3, 0});
    /* errors */
    assert_int_equal(run_slice(x, &(slice_attrs){1, {2}, {0}, {1}, 0, {0}}, out, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "axes[0] = 2 is out of range"));
    assert_int_equal(run_slice(x, &(slice_attrs){1, {1}, {0}, {2}, 1, {1}}, out, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "decrease_axis[0] = 1 must name a sliced axis of size 1"));
    pe_tensor_free(x);
    /* a big 3-D slice, 1 vs 2 threads, against an index loop */
    int64_t d0 = 40, d1 = 50, d2 = 60;
    double *v = iota(d0 * d1 * d2);
    x = tu_tensor(PE_DTYPE_FP64, 3, (int64_t[]){d0, d1, d2}, v);
    slice_attrs a = {2, {0, 2}, {5, -50}, {-5, 55}, 0, {0}};
    pe_tensor *o2 = pe_tensor_new();
    assert_int_equal(run_slice(x, &a, out, 1), PE_OK);
    assert_int_equal(run_slice(x, &a, o2, 2), PE_OK);
    tu_assert_dims(out, 3, (int64_t[]){30, 50, 45});
    for (int64_t i = 0; i < 30; i++)
        for (int64_t j = 0; j < 50; j++)
            for (int64_t k = 0; k < 45; k++)
                assert_true(tu_get(out, (i * 50 + j) * 45 + k) == v[((i + 5) * d1 + j) * d2 + k + 10]);
    assert_memory_equal(pe_tensor_data(out), pe_tensor_data(o2), pe_tensor_nbytes(out));
    free(v);
    pe_tensor_free(o2);
    pe_tensor_free(out);
    pe_tensor_free(x);
}

/* ---- flatten, squeeze, unsqueeze ----------------------------------------------- */

typedef struct {
    const char *type;
    int xr;
    int64_t xd[5];
    const char *attr;      /* ints attr name, or int attrs via a/b names */
    int na;
    int64_t av[3];
    const char *ia, *ib;   /* int attrs */
    int64_t iav, ibv;
    int want_r;
    int64_t want[6];
} shape_case;

static void test_flatten_squeeze_unsqueeze(void **state) {
    (void)state;
    shape_case cases[] = {
        {"flatten_contiguous_range", 4, {2, 3, 4, 5}, NULL, 0, {0}, "start_axis", "stop_axis", 1, 2, 3, {2, 12, 5}},
        {"flatten_contiguous_range", 4, {2, 3, 4, 5}, NULL, 0, {0}, NULL, NULL, 0, 0, 2, {2, 60}},
        {"flatten_contiguous_range", 4, {2, 3, 4, 5}, NULL, 0, {0}, "start_axis", "stop_axis", 0, -1, 1, {120}},
        {"flatten_contiguous_range", 3, {2, 3, 4}, NULL, 0, {0}, "start_axis", "stop_axis", -2, -2, 3, {2, 3, 4}},
        {"flatten2", 4, {2, 3, 4, 5}, NULL, 0, {0}, "axis", NULL, 2, 0, 2, {6, 20}},
        {"flatten2", 3, {2, 3, 4}, NULL, 0, {0}, "axis", NULL, 0, 0, 2, {1, 24}},
        {"squeeze2", 4, {1, 3, 1, 4}, "axes", 0, {0}, NULL, NULL, 0, 0, 2, {3, 4}},
        {"squeeze2", 4, {1, 3, 1, 4}, "axes", 1, {-2}, NULL, NULL, 0, 0, 3, {1, 3, 4}},
        {"squeeze2", 3, {1, 3, 4}, "axes", 2, {0, 1}, NULL, NULL, 0, 0, 2, {3, 4}}, /* dim 1 is 3: kept */
        {"squeeze2", 2, {1, 1}, "axes", 0, {0}, NULL, NULL, 0, 0, 1, {1}},
        {"unsqueeze2", 2, {3, 4}, "axes", 3, {0, 2, -1}, NULL, NULL, 0, 0, 5, {1, 3, 1, 4, 1}},
        {"unsqueeze2", 2, {3, 4}, "axes", 2, {1, 1}, NULL, NULL, 0, 0, 4, {3, 1, 1, 4}},
        {"unsqueeze2", 1, {5}, "axes", 1, {-1}, NULL, NULL, 0, 0, 2, {5, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        shape_case *sc = &cases[c];
        int64_t n = 1;
        for (int i = 0; i < sc->xr; i++) n *= sc->xd[i];
        double *v = iota(n);
        pe_tensor *x = tu_tensor(PE_DTYPE_FP32, sc->xr, sc->xd, v);
        pe_op *op;
        pe_program *p = unary_prog(sc->type, x, true, &op);
        if (sc->attr && sc->na) pe_op_set_ints(op, sc->attr, sc->av, sc->na);
        if (sc->ia) pe_op_set_int(op, sc->ia, sc->iav);
        if (sc->ib) pe_op_set_int(op, sc->ib, sc->ibv);
        pe_tensor *out = pe_tensor_new(), *xs = pe_tensor_new();
        if (run_nt(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"out", "xs"}, 2, (pe_tensor *[]){out, xs}, 0) != PE_OK)
            fail_msg("case %zu (%s): %s", c, sc->type, pe_last_error());
        tu_assert_dims(out, sc->want_r, sc->want);
        tu_assert_close(out, v, n, 0);
        int64_t xsd[6] = {0};
        memcpy(xsd + 1, sc->xd, sizeof(int64_t) * (size_t)sc->xr);
        tu_assert_dims(xs, sc->xr + 1, xsd);
        pe_tensor_free(x); pe_tensor_free(out); pe_tensor_free(xs);
        pe_program_free(p);
        free(v);
    }
}

static void test_flatten_squeeze_errors(void **state) {
    (void)state;
    struct { const char *type, *attr; int64_t v[2]; int n; const char *want; } cases[] = {
        {"flatten_contiguous_range", "start_axis", {3}, 1, "do not name a range"},
        {"flatten2", "axis", {4}, 1, "axis 4 is outside [0, 3]"},
        {"squeeze2", "axes", {3}, 1, "axes[0] = 3 is out of range"},
        {"unsqueeze2", "axes", {0, 5}, 2, "axes[1] = 5 is out of range for rank 4"},
    };
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){2, 1, 3}, NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_op *op;
        pe_program *p = unary_prog(cases[i].type, x, false, &op);
        if (!strcmp(cases[i].attr, "axes")) pe_op_set_ints(op, "axes", cases[i].v, cases[i].n);
        else pe_op_set_int(op, cases[i].attr, cases[i].v[0]);
        pe_tensor *out = pe_tensor_new();
        assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"out"}, 1, &out, 0), PE_ERR_INVALID);
        if (!strstr(pe_last_error(), cases[i].want)) fail_msg("case %zu: unexpected message: %s", i, pe_last_error());
        pe_tensor_free(out);
        pe_program_free(p);
    }
    pe_tensor_free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reshape2),
        cmocka_unit_test(test_reshape2_without_xshape_and_empty),
        cmocka_unit_test(test_reshape2_errors),
        cmocka_unit_test(test_transpose2),
        cmocka_unit_test(test_transpose2_errors),
        cmocka_unit_test(test_concat_each_axis),
        cmocka_unit_test(test_concat_errors),
        cmocka_unit_test(test_fill_constant_dtypes),
        cmocka_unit_test(test_fill_constant_str_value),
        cmocka_unit_test(test_assign_value),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_flatten_squeeze_unsqueeze),
        cmocka_unit_test(test_flatten_squeeze_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
