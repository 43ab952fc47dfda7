/* tests/unit/test_ops_math.c — mul, matmul and matmul_v2 against naive
 * reference loops computed here: shapes, transposes, batch broadcasting,
 * 1-D operands, alpha, empty tensors, errors, and thread-count invariance. */
#include "tests/unit/op_test_util.h"

#include <stdlib.h>
#include <string.h>

/* Deterministic inputs in [-1, 1). */
static double *rand_vals(int64_t n, unsigned seed) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    assert_non_null(v);
    uint64_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    }
    return v;
}

/* Runs block 0 with `nt` kernel threads (0 = executor default); fetch 1 var. */
static pe_status run_nt(const pe_program *p, const pe_feed *feeds, int nf, const char *fetch, pe_tensor *out, int nt) {
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_non_null(scope);
    assert_non_null(ex);
    if (nt > 0) pe_executor_set_num_threads(ex, nt);
    pe_status st = pe_executor_run(ex, p, 0, scope, feeds, nf, &fetch, 1, &out);
    pe_executor_free(ex);
    pe_scope_free(scope);
    return st;
}

/* Program: out = <type>(x, y) with x, y declared from the tensors. */
static pe_program *binary_prog(const char *type, const pe_tensor *x, const pe_tensor *y, pe_op **op_out) {
    pe_program *p = pe_program_new();
    assert_non_null(p);
    tu_declare(p, "x", x);
    tu_declare(p, "y", y);
    pe_op *op = pe_block_add_op(&p->blocks[0], type);
    assert_non_null(op);
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Y", "y");
    pe_op_add_output(op, "Out", "out");
    pe_block_add_var(&p->blocks[0], "out", x->dtype, 0, NULL);
    *op_out = op;
    return p;
}

/* ---- mul ---------------------------------------------------------------- */

static void test_mul_3d_x_num_col_dims_2(void **state) {
    (void)state;
    for (int dti = 0; dti < 2; dti++) {
        pe_dtype dt = dti ? PE_DTYPE_FP64 : PE_DTYPE_FP32;
        double *xv = rand_vals(24, 1), *yv = rand_vals(20, 2);
        pe_tensor *x = tu_tensor(dt, 3, (int64_t[]){2, 3, 4}, xv);
        pe_tensor *y = tu_tensor(dt, 2, (int64_t[]){4, 5}, yv);
        pe_op *op;
        pe_program *p = binary_prog("mul", x, y, &op);
        pe_op_set_int(op, "x_num_col_dims", 2);
        pe_tensor *out = pe_tensor_new();
        assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", out, 0), PE_OK);
        tu_assert_dims(out, 3, (int64_t[]){2, 3, 5});
        double want[30];
        for (int m = 0; m < 6; m++)
            for (int n = 0; n < 5; n++) {
                double s = 0;
                for (int k = 0; k < 4; k++) s += xv[m * 4 + k] * yv[k * 5 + n];
                want[m * 5 + n] = s;
            }
        tu_assert_close(out, want, 30, dti ? 1e-12 : 1e-5);
        pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(out);
        pe_program_free(p);
        free(xv); free(yv);
    }
}

static void test_mul_y_num_col_dims(void **state) {
    (void)state;
    /* x: [3, 2, 2] with x_num_col_dims 1 -> [3, 4]; y: [2, 2, 5] with y_num_col_dims 2 -> [4, 5] */
    double *xv = rand_vals(12, 3), *yv = rand_vals(20, 4);
    pe_tensor *x = tu_tensor(PE_DTYPE_FP64, 3, (int64_t[]){3, 2, 2}, xv);
    pe_tensor *y = tu_tensor(PE_DTYPE_FP64, 3, (int64_t[]){2, 2, 5}, yv);
    pe_op *op;
    pe_program *p = binary_prog("mul", x, y, &op);
    pe_op_set_int(op, "y_num_col_dims", 2);
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", out, 0), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){3, 5});
    double want[15];
    for (int m = 0; m < 3; m++)
        for (int n = 0; n < 5; n++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += xv[m * 4 + k] * yv[k * 5 + n];
            want[m * 5 + n] = s;
        }
    tu_assert_close(out, want, 15, 1e-12);
    pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(out);
    pe_program_free(p);
    free(xv); free(yv);
}

static void test_mul_errors(void **state) {
    (void)state;
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){2, 3, 4}, NULL);
    pe_tensor *y = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){5, 6}, NULL);
    pe_op *op;
    pe_program *p = binary_prog("mul", x, y, &op);
    pe_tensor *out = pe_tensor_new();
    /* x flattens to [2, 12], y to [5, 6]: 12 != 5 */
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", out, 0), PE_ERR_INVALID);
    const char *e = pe_last_error();
    assert_non_null(strstr(e, "mul"));
    assert_non_null(strstr(e, "'x'"));
    assert_non_null(strstr(e, "'y'"));
    assert_non_null(strstr(e, "[2, 3, 4]"));
    assert_non_null(strstr(e, "[5, 6]"));
    /* x_num_col_dims out of range */
    pe_op_set_int(&p->blocks[0].ops[0], "x_num_col_dims", 3);
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", out, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "x_num_col_dims"));
    pe_program_free(p);
    /* dtype mismatch */
    pe_tensor *y64 = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){12, 2}, NULL);
    p = binary_prog("mul", x, y64, &op);
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y64}}, 2, "out", out, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "float64"));
    pe_program_free(p);
    pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(y64); pe_tensor_free(out);
}

/* ---- matmul reference ----------------------------------------------------- */

/* numpy matmul of x (dims xd, rank xr) and y, with transposes of the last two
 * dims (ignored for 1-D operands) and alpha; writes out dims and values. */
static void ref_matmul(const double *x, int xr, const int64_t *xd, const double *y, int yr, const int64_t *yd,
                       bool tx, bool ty, double alpha, double *out, int *or_, int64_t *od) {
    bool x1 = xr == 1, y1 = yr == 1;
    int64_t xrow = x1 ? 1 : xd[xr - 2], xcol = xd[xr - 1];
    int64_t yrow = y1 ? yd[0] : yd[yr - 2], ycol = y1 ? 1 : yd[yr - 1];
    if (x1) tx = false;
    if (y1) ty = false;
    int64_t M = tx ? xcol : xrow, K = tx ? xrow : xcol, N = ty ? yrow : ycol;
    int xb = xr > 2 ? xr - 2 : 0, yb = yr > 2 ? yr - 2 : 0, nb = xb > yb ? xb : yb;
    int64_t bd[8];
    for (int a = 0; a < nb; a++) {
        int ix = a - (nb - xb), iy = a - (nb - yb);
        int64_t dx = ix >= 0 ? xd[ix] : 1, dy = iy >= 0 ? yd[iy] : 1;
        bd[a] = dx == 1 ? dy : dx;
    }
    int64_t nbatch = 1;
    for (int a = 0; a < nb; a++) nbatch *= bd[a];
    for (int64_t b = 0; b < nbatch; b++) {
        /* batch coordinates -> x and y matrix indices */
        int64_t rem = b, xi = 0, yi = 0, sx = 1, sy = 1;
        for (int a = nb - 1; a >= 0; a--) {
            int64_t c = rem % bd[a];
            rem /= bd[a];
            int ix = a - (nb - xb), iy = a - (nb - yb);
            int64_t dx = ix >= 0 ? xd[ix] : 1, dy = iy >= 0 ? yd[iy] : 1;
            xi += (dx == 1 ? 0 : c) * sx;
            yi += (dy == 1 ? 0 : c) * sy;
            sx *= dx;
            sy *= dy;
        }
        const double *xm = x + xi * M * K, *ym = y + yi * K * N;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (tx ? xm[k * M + m] : xm[m * K + k]) * (ty ? ym[n * K + k] : ym[k * N + n]);
                out[(b * M + m) * N + n] = alpha * s;
            }
    }
    *or_ = 0;
    for (int a = 0; a < nb; a++) od[(*or_)++] = bd[a];
    if (!x1) od[(*or_)++] = M;
    if (!y1) od[(*or_)++] = N;
    if (x1 && y1) od[(*or_)++] = 1;
}

/* Runs matmul or matmul_v2 on random x, y of the given dims and checks it. */
static void check_matmul(const char *type, pe_dtype dt, int xr, const int64_t *xd, int yr, const int64_t *yd,
                         bool tx, bool ty, double alpha, int nt) {
    int64_t nx = 1, ny = 1;
    for (int i = 0; i < xr; i++) nx *= xd[i];
    for (int i = 0; i < yr; i++) ny *= yd[i];
    double *xv = rand_vals(nx, (unsigned)(nx + 7)), *yv = rand_vals(ny, (unsigned)(ny + 13));
    pe_tensor *x = tu_tensor(dt, xr, xd, xv), *y = tu_tensor(dt, yr, yd, yv);
    pe_op *op;
    pe_program *p = binary_prog(type, x, y, &op);
    bool v2 = !strcmp(type, "matmul_v2");
    pe_op_set_bool(op, v2 ? "trans_x" : "transpose_X", tx);
    pe_op_set_bool(op, v2 ? "trans_y" : "transpose_Y", ty);
    if (!v2) pe_op_set_float(op, "alpha", alpha);
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", out, nt), PE_OK);
    double *want = malloc(sizeof(double) * 4096);
    int orank;
    int64_t od[8];
    ref_matmul(xv, xr, xd, yv, yr, yd, tx, ty, v2 ? 1.0 : alpha, want, &orank, od);
    tu_assert_dims(out, orank, od);
    int64_t no = 1;
    for (int i = 0; i < orank; i++) no *= od[i];
    assert_true(no <= 4096);
    tu_assert_close(out, want, no, dt == PE_DTYPE_FP64 ? 1e-12 : 1e-5);
    free(want); free(xv); free(yv);
    pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(out);
    pe_program_free(p);
}

static void test_matmul_transposes(void **state) {
    (void)state;
    const char *types[2] = {"matmul", "matmul_v2"};
    for (int t = 0; t < 2; t++)
        for (int dti = 0; dti < 2; dti++)
            for (int tx = 0; tx < 2; tx++)
                for (int ty = 0; ty < 2; ty++) {
                    /* op(x): [3, 4], op(y): [4, 5] */
                    int64_t xd[2] = {tx ? 4 : 3, tx ? 3 : 4}, yd[2] = {ty ? 5 : 4, ty ? 4 : 5};
                    check_matmul(types[t], dti ? PE_DTYPE_FP64 : PE_DTYPE_FP32, 2, xd, 2, yd, tx, ty, 1.0, 0);
                    /* batched, same batch dims: [2, 3, ...] */
                    int64_t xb[4] = {2, 3, xd[0], xd[1]}, yb[4] = {2, 3, yd[0], yd[1]};
                    check_matmul(types[t], dti ? PE_DTYPE_FP64 : PE_DTYPE_FP32, 4, xb, 4, yb, tx, ty, 1.0, 0);
                }
}

static void test_matmul_broadcast_batches(void **state) {
    (void)state;
    for (int tx = 0; tx < 2; tx++)
        for (int ty = 0; ty < 2; ty++) {
            int64_t x0 = tx ? 4 : 3, x1 = tx ? 3 : 4, y0 = ty ? 5 : 4, y1 = ty ? 4 : 5;
            /* [2, 1, M, K] x [3, K, N] -> [2, 3, M, N] */
            check_matmul("matmul_v2", PE_DTYPE_FP32, 4, (int64_t[]){2, 1, x0, x1}, 3, (int64_t[]){3, y0, y1}, tx, ty, 1, 0);
            /* [M, K] x [2, 3, K, N]: x broadcast to every batch */
            check_matmul("matmul_v2", PE_DTYPE_FP64, 2, (int64_t[]){x0, x1}, 4, (int64_t[]){2, 3, y0, y1}, tx, ty, 1, 0);
            /* [2, 3, M, K] x [K, N]: y shared (the folded single-GEMM path when !tx) */
            check_matmul("matmul", PE_DTYPE_FP32, 4, (int64_t[]){2, 3, x0, x1}, 2, (int64_t[]){y0, y1}, tx, ty, 1, 0);
            /* [4, 1, M, K] x [1, 5, K, N], 2 threads, 20 small GEMMs split across threads */
            check_matmul("matmul", PE_DTYPE_FP64, 4, (int64_t[]){4, 1, x0, x1}, 4, (int64_t[]){1, 5, y0, y1}, tx, ty, 1, 2);
        }
}

static void test_matmul_vectors(void **state) {
    (void)state;
    /* [K] x [K] -> [1] */
    check_matmul("matmul_v2", PE_DTYPE_FP32, 1, (int64_t[]){7}, 1, (int64_t[]){7}, false, false, 1, 0);
    /* [K] x [K, N] -> [N]; flags on a vector are ignored, on the matrix applied */
    check_matmul("matmul_v2", PE_DTYPE_FP64, 1, (int64_t[]){4}, 2, (int64_t[]){4, 5}, true, false, 1, 0);
    check_matmul("matmul_v2", PE_DTYPE_FP64, 1, (int64_t[]){4}, 2, (int64_t[]){5, 4}, false, true, 1, 0);
    /* [M, K] x [K] -> [M] */
    check_matmul("matmul", PE_DTYPE_FP32, 2, (int64_t[]){3, 4}, 1, (int64_t[]){4}, false, false, 1, 0);
    check_matmul("matmul", PE_DTYPE_FP32, 2, (int64_t[]){4, 3}, 1, (int64_t[]){4}, true, true, 1, 0);
    /* batched: [2, 3, M, K] x [K] -> [2, 3, M];  [K] x [2, K, N] -> [2, N] */
    check_matmul("matmul_v2", PE_DTYPE_FP32, 4, (int64_t[]){2, 3, 3, 4}, 1, (int64_t[]){4}, false, false, 1, 0);
    check_matmul("matmul_v2", PE_DTYPE_FP32, 1, (int64_t[]){4}, 3, (int64_t[]){2, 4, 5}, false, false, 1, 0);
}

static void test_matmul_alpha(void **state) {
    (void)state;
    check_matmul("matmul", PE_DTYPE_FP32, 2, (int64_t[]){3, 4}, 2, (int64_t[]){4, 5}, false, false, 0.5, 0);
    check_matmul("matmul", PE_DTYPE_FP64, 3, (int64_t[]){2, 4, 3}, 3, (int64_t[]){2, 5, 4}, true, true, -2.5, 0);
    check_matmul("matmul", PE_DTYPE_FP32, 3, (int64_t[]){2, 3, 4}, 2, (int64_t[]){4, 5}, false, false, 3.0, 0);
}

static void test_matmul_empty(void **state) {
    (void)state;
    /* M = 0 */
    check_matmul("matmul_v2", PE_DTYPE_FP32, 2, (int64_t[]){0, 4}, 2, (int64_t[]){4, 3}, false, false, 1, 0);
    /* batch 0 */
    check_matmul("matmul_v2", PE_DTYPE_FP32, 3, (int64_t[]){0, 2, 4}, 2, (int64_t[]){4, 3}, false, false, 1, 0);
    /* K = 0: an empty sum gives zeros */
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 0}, NULL);
    pe_tensor *y = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){0, 3}, NULL);
    pe_op *op;
    pe_program *p = binary_prog("matmul", x, y, &op);
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", out, 0), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){2, 3});
    tu_assert_close(out, (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
    pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(out);
    pe_program_free(p);
    /* mul with M = 0 */
    x = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){0, 2, 2}, NULL);
    y = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 3}, NULL);
    p = binary_prog("mul", x, y, &op);
    out = pe_tensor_new();
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", out, 0), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){0, 3});
    pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(out);
    pe_program_free(p);
}

static void test_matmul_errors(void **state) {
    (void)state;
    struct { int xr; int64_t xd[4]; int yr; int64_t yd[4]; bool tx; const char *want; } cases[] = {
        {2, {3, 4}, 2, {5, 6}, false, "contraction sizes 4 and 5"},
        {2, {4, 3}, 2, {3, 6}, true, "(transposed)"}, /* op(x) [3, 4] x [3, 6] */
        {3, {2, 3, 4}, 3, {3, 4, 5}, false, "do not broadcast"},
        {1, {4}, 1, {5}, false, "contraction sizes 4 and 5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_tensor *x = tu_tensor(PE_DTYPE_FP32, cases[i].xr, cases[i].xd, NULL);
        pe_tensor *y = tu_tensor(PE_DTYPE_FP32, cases[i].yr, cases[i].yd, NULL);
        pe_op *op;
        pe_program *p = binary_prog("matmul_v2", x, y, &op);
        pe_op_set_bool(op, "trans_x", cases[i].tx);
        pe_tensor *out = pe_tensor_new();
        assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", out, 0), PE_ERR_INVALID);
        const char *e = pe_last_error();
        if (!strstr(e, cases[i].want) || !strstr(e, "matmul_v2") || !strstr(e, "'x'") || !strstr(e, "'y'"))
            fail_msg("case %zu: unexpected message: %s", i, e);
        pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(out);
        pe_program_free(p);
    }
    /* int32 operands are refused */
    pe_tensor *x = tu_tensor(PE_DTYPE_INT32, 2, (int64_t[]){2, 2}, NULL);
    pe_op *op;
    pe_program *p = binary_prog("matmul", x, x, &op);
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", x}}, 2, "out", out, 0), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "int32"));
    pe_tensor_free(x); pe_tensor_free(out);
    pe_program_free(p);
}

/* Same inputs, 1 vs 4 kernel threads: bitwise-identical results. */
static void test_matmul_thread_invariance(void **state) {
    (void)state;
    struct { const char *type; int xr; int64_t xd[3]; int yr; int64_t yd[3]; } cases[] = {
        {"mul", 2, {96, 200}, 2, {200, 130}},                 /* one GEMM, OpenBLAS threads */
        {"matmul_v2", 3, {16, 24, 40}, 3, {16, 40, 20}},      /* small batches across threads */
        {"matmul_v2", 3, {3, 150, 120}, 3, {3, 120, 110}},    /* big batches, threaded GEMMs */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t nx = 1, ny = 1;
        for (int i = 0; i < cases[c].xr; i++) nx *= cases[c].xd[i];
        for (int i = 0; i < cases[c].yr; i++) ny *= cases[c].yd[i];
        double *xv = rand_vals(nx, 5), *yv = rand_vals(ny, 6);
        pe_tensor *x = tu_tensor(PE_DTYPE_FP32, cases[c].xr, cases[c].xd, xv);
        pe_tensor *y = tu_tensor(PE_DTYPE_FP32, cases[c].yr, cases[c].yd, yv);
        pe_op *op;
        pe_program *p = binary_prog(cases[c].type, x, y, &op);
        pe_tensor *o1 = pe_tensor_new(), *o4 = pe_tensor_new();
        assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", o1, 1), PE_OK);
        assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", o4, 4), PE_OK);
        assert_int_equal(pe_tensor_nbytes(o1), pe_tensor_nbytes(o4));
        assert_true(pe_tensor_nbytes(o1) > 0);
        assert_memory_equal(pe_tensor_data(o1), pe_tensor_data(o4), pe_tensor_nbytes(o1));
        pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(o1); pe_tensor_free(o4);
        pe_program_free(p);
        free(xv); free(yv);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mul_3d_x_num_col_dims_2),
        cmocka_unit_test(test_mul_y_num_col_dims),
        cmocka_unit_test(test_mul_errors),
        cmocka_unit_test(test_matmul_transposes),
        cmocka_unit_test(test_matmul_broadcast_batches),
        cmocka_unit_test(test_matmul_vectors),
        cmocka_unit_test(test_matmul_alpha),
        cmocka_unit_test(test_matmul_empty),
        cmocka_unit_test(test_matmul_errors),
        cmocka_unit_test(test_matmul_thread_invariance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
