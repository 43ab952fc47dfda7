/* tests/unit/test_ops_math.c — mul, matmul and matmul_v2 against naive
 * reference loops computed here: shapes, transposes, batch broadcasting,
 * 1-D operands, alpha, empty tensors, errors, and thread-count invariance;
 * lookup_table(_v2) and layer_norm forward against hand-computed values,
 * their attrs and errors. (Gradients: test_grad_math.c.) */
#include "tests/unit/op_test_util.h"
#include "ops/cpu/gemm.h"

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

/* Same inputs, 1 vs 2, 3, 4 and 8 kernel threads: bitwise-identical
 * results. OpenBLAS's own threads block K differently from its
 * single-threaded driver: [64, 784] x [784, 512] (the MLP's first layer on
 * 64 rows) differs between 1 and 2 threads, and X^T Y with X, Y
 * [5000, 16] between 1 and 8 (benchmarks/bench_gemm.c), when OpenBLAS
 * threads them, which ops/cpu/gemm.c avoids by splitting C itself (one
 * single-threaded call per block). Products of 2^23 multiply-adds or more
 * run on oneDNN's matmul in blocks fixed by the shape (the cases marked
 * `big`: the two forward products also cut along K); they are also checked
 * against a float64 product. */
static void test_matmul_thread_invariance(void **state) {
    (void)state;
    struct { const char *type; int xr; int64_t xd[3]; int yr; int64_t yd[3]; bool tx, big; } cases[] = {
        {"mul", 2, {96, 200}, 2, {200, 130}, false, false},              /* one GEMM, one block (small) */
        {"matmul_v2", 3, {16, 24, 40}, 3, {16, 40, 20}, false, false},   /* small batches across threads */
        {"matmul_v2", 3, {3, 150, 120}, 3, {3, 120, 110}, false, false}, /* big batches, threaded GEMMs */
        {"mul", 2, {64, 784}, 2, {784, 512}, false, true},               /* the MLP's first layer, 64 rows */
        {"matmul_v2", 2, {5000, 16}, 2, {5000, 16}, true, false},        /* X^T Y, long K */
        {"mul", 2, {128, 784}, 2, {784, 512}, false, true},              /* the MLP's first layer, 128 rows */
        {"matmul_v2", 2, {5000, 64}, 2, {5000, 48}, true, true},         /* X^T Y, long K, one oneDNN block */
        {"matmul_v2", 2, {300, 96}, 2, {300, 1000}, true, true},         /* X^T Y, the weight gradient's form */
    };
    const int nts[] = {2, 3, 4, 8};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t nx = 1, ny = 1;
        for (int i = 0; i < cases[c].xr; i++) nx *= cases[c].xd[i];
        for (int i = 0; i < cases[c].yr; i++) ny *= cases[c].yd[i];
        double *xv = rand_vals(nx, 5), *yv = rand_vals(ny, 6);
        pe_tensor *x = tu_tensor(PE_DTYPE_FP32, cases[c].xr, cases[c].xd, xv);
        pe_tensor *y = tu_tensor(PE_DTYPE_FP32, cases[c].yr, cases[c].yd, yv);
        pe_op *op;
        pe_program *p = binary_prog(cases[c].type, x, y, &op);
        if (cases[c].tx) pe_op_set_bool(op, "trans_x", true);
        pe_tensor *o1 = pe_tensor_new();
        assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", o1, 1), PE_OK);
        assert_true(pe_tensor_nbytes(o1) > 0);
        if (cases[c].big) { /* against float64: C[i, j] = sum_k op(X)[i, k] Y[k, j] */
            const int64_t kk = cases[c].tx ? cases[c].xd[0] : cases[c].xd[1];
            const int64_t mm = nx / kk, nn = ny / kk;
            const float *ov = pe_tensor_data(o1);
            for (int64_t i = 0; i < mm; i += 7)
                for (int64_t j = 0; j < nn; j += 5) {
                    double ref = 0, mag = 0;
                    for (int64_t q = 0; q < kk; q++) {
                        const double t = xv[cases[c].tx ? q * mm + i : i * kk + q] * yv[q * nn + j];
                        ref += t;
                        mag += fabs(t);
                    }
                    if (fabs(ov[i * nn + j] - ref) > 1e-5 * mag + 1e-6)
                        fail_msg("case %zu: C[%lld, %lld] = %g, float64 %g", c, (long long)i, (long long)j,
                                 ov[i * nn + j], ref);
                }
        }
        for (size_t t = 0; t < sizeof nts / sizeof nts[0]; t++) {
            pe_tensor *on = pe_tensor_new();
            assert_int_equal(run_nt(p, (pe_feed[]){{"x", x}, {"y", y}}, 2, "out", on, nts[t]), PE_OK);
            assert_int_equal(pe_tensor_nbytes(o1), pe_tensor_nbytes(on));
            if (memcmp(pe_tensor_data(o1), pe_tensor_data(on), pe_tensor_nbytes(o1)))
                fail_msg("case %zu (%s): 1 and %d threads differ", c, cases[c].type, nts[t]);
            pe_tensor_free(on);
        }
        pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(o1);
        pe_program_free(p);
        free(xv); free(yv);
    }
}

/* ---- lookup_table / lookup_table_v2 --------------------------------------- */

/* out = <type>(w, ids) with padding_idx `pad` (-1 = none). */
static pe_status run_lookup(const char *type, const pe_tensor *w, const pe_tensor *ids, int64_t pad, pe_tensor *out) {
    pe_program *p = pe_program_new();
    tu_declare(p, "w", w);
    tu_declare(p, "ids", ids);
    pe_op *op = pe_block_add_op(&p->blocks[0], type);
    pe_op_add_input(op, "W", "w");
    pe_op_add_input(op, "Ids", "ids");
    pe_op_add_output(op, "Out", "out");
    pe_op_set_long(op, "padding_idx", pad);
    pe_block_add_var(&p->blocks[0], "out", w->dtype, 0, NULL);
    pe_status st = run_nt(p, (pe_feed[]){{"w", w}, {"ids", ids}}, 2, "out", out, 0);
    pe_program_free(p);
    return st;
}

static void test_lookup_table_values(void **state) {
    (void)state;
    /* w: [4, 2], row v = (10v, 10v + 1) */
    double wv[] = {0, 1, 10, 11, 20, 21, 30, 31};
    for (int dti = 0; dti < 2; dti++) {
        pe_dtype dt = dti ? PE_DTYPE_FP64 : PE_DTYPE_FP32;
        pe_tensor *w = tu_tensor(dt, 2, (int64_t[]){4, 2}, wv);
        /* v2: ids [2, 3] -> out [2, 3, 2]; id 2 is padding */
        pe_tensor *ids = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){2, 3}, (double[]){3, 2, 0, 1, 1, 2});
        pe_tensor *out = pe_tensor_new();
        assert_int_equal(run_lookup("lookup_table_v2", w, ids, 2, out), PE_OK);
        tu_assert_dims(out, 3, (int64_t[]){2, 3, 2});
        tu_assert_close(out, (double[]){30, 31, 0, 0, 0, 1, 10, 11, 10, 11, 0, 0}, 12, 0);
        /* no padding: row 2 itself */
        assert_int_equal(run_lookup("lookup_table_v2", w, ids, -1, out), PE_OK);
        tu_assert_close(out, (double[]){30, 31, 20, 21, 0, 1, 10, 11, 10, 11, 20, 21}, 12, 0);
        pe_tensor_free(ids);
        /* v1: int32 ids [3, 1] -> out [3, 2] */
        ids = tu_tensor(PE_DTYPE_INT32, 2, (int64_t[]){3, 1}, (double[]){1, 3, 1});
        assert_int_equal(run_lookup("lookup_table", w, ids, -1, out), PE_OK);
        tu_assert_dims(out, 2, (int64_t[]){3, 2});
        tu_assert_close(out, (double[]){10, 11, 30, 31, 10, 11}, 6, 0);
        pe_tensor_free(ids);
        pe_tensor_free(out);
        pe_tensor_free(w);
    }
}

static void test_lookup_table_errors(void **state) {
    (void)state;
    pe_tensor *w = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL);
    pe_tensor *out = pe_tensor_new();
    pe_tensor *ids = tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){3}, (double[]){0, 4, 1});
    assert_int_equal(run_lookup("lookup_table_v2", w, ids, -1, out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "'ids'[1] = 4 is outside the table [0, 4)"));
    pe_tensor_free(ids);
    ids = tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){2}, (double[]){0, -1});
    assert_int_equal(run_lookup("lookup_table_v2", w, ids, -1, out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "= -1 is outside"));
    assert_int_equal(run_lookup("lookup_table_v2", w, ids, 4, out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "padding_idx 4"));
    /* v1 wants [..., 1] ids */
    assert_int_equal(run_lookup("lookup_table", w, ids, -1, out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "[..., 1]"));
    pe_tensor_free(ids);
    ids = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    assert_int_equal(run_lookup("lookup_table_v2", w, ids, -1, out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "int64 or int32"));
    pe_tensor_free(ids);
    pe_tensor_free(w);
    pe_tensor_free(out);
}

/* ---- layer_norm ------------------------------------------------------------- */

/* y, mean, var = layer_norm(x, scale?, bias?); fetched into outs[0..2]. */
static pe_status run_layer_norm(const pe_tensor *x, const pe_tensor *scale, const pe_tensor *bias, int bna, double eps,
                                pe_tensor **outs) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    tu_declare(p, "x", x);
    pe_op *op = pe_block_add_op(b, "layer_norm");
    pe_op_add_input(op, "X", "x");
    pe_feed feeds[3] = {{"x", x}};
    int nf = 1;
    if (scale) {
        tu_declare(p, "s", scale);
        pe_op_add_input(&b->ops[0], "Scale", "s");
        feeds[nf++] = (pe_feed){"s", scale};
    }
    if (bias) {
        tu_declare(p, "b", bias);
        pe_op_add_input(&b->ops[0], "Bias", "b");
        feeds[nf++] = (pe_feed){"b", bias};
    }
    const char *names[] = {"y", "m", "v"}, *slots[] = {"Y", "Mean", "Variance"};
    for (int i = 0; i < 3; i++) {
        pe_block_add_var(b, names[i], x->dtype, 0, NULL);
        pe_op_add_output(&b->ops[0], slots[i], names[i]);
    }
    pe_op_set_int(&b->ops[0], "begin_norm_axis", bna);
    pe_op_set_float(&b->ops[0], "epsilon", eps);
    pe_status st = tu_run(p, feeds, nf, names, 3, outs);
    pe_program_free(p);
    return st;
}

static void test_layer_norm_values(void **state) {
    (void)state;
    for (int dti = 0; dti < 2; dti++) {
        pe_dtype dt = dti ? PE_DTYPE_FP64 : PE_DTYPE_FP32;
        /* rows (1, 3) and (2, 6): mean 2 and 4, variance 1 and 4 -> normalized (-1, 1) each */
        pe_tensor *x = tu_tensor(dt, 2, (int64_t[]){2, 2}, (double[]){1, 3, 2, 6});
        pe_tensor *s = tu_tensor(dt, 1, (int64_t[]){2}, (double[]){2, 0.5});
        pe_tensor *b = tu_tensor(dt, 1, (int64_t[]){2}, (double[]){1, -1});
        pe_tensor *o[3] = {pe_tensor_new(), pe_tensor_new(), pe_tensor_new()};
        assert_int_equal(run_layer_norm(x, s, b, 1, 0.0, o), PE_OK);
        tu_assert_dims(o[0], 2, (int64_t[]){2, 2});
        tu_assert_close(o[0], (double[]){-1, -0.5, -1, -0.5}, 4, 1e-6);
        tu_assert_dims(o[1], 1, (int64_t[]){2});
        tu_assert_close(o[1], (double[]){2, 4}, 2, 1e-6);
        tu_assert_close(o[2], (double[]){1, 4}, 2, 1e-6);
        /* no Scale / Bias; epsilon 0.25 enters the denominator: (x - mu) / sqrt(var + 0.25) */
        assert_int_equal(run_layer_norm(x, NULL, NULL, 1, 0.25, o), PE_OK);
        double a = 1 / sqrt(1.25), c = 2 / sqrt(4.25);
        tu_assert_close(o[0], (double[]){-a, a, -c, c}, 4, 1e-6);
        tu_assert_close(o[2], (double[]){1, 4}, 2, 1e-6); /* variance saved without epsilon */
        pe_tensor_free(x);
        /* [1, 2, 2] with begin_norm_axis 2 normalizes the same rows; with 1 all four values:
         * mean 3, variance (4 + 0 + 1 + 9) / 4 = 3.5 */
        x = tu_tensor(dt, 3, (int64_t[]){1, 2, 2}, (double[]){1, 3, 2, 6});
        assert_int_equal(run_layer_norm(x, s, b, 2, 0.0, o), PE_OK);
        tu_assert_dims(o[0], 3, (int64_t[]){1, 2, 2});
        tu_assert_close(o[0], (double[]){-1, -0.5, -1, -0.5}, 4, 1e-6);
        tu_assert_close(o[1], (double[]){2, 4}, 2, 1e-6);
        assert_int_equal(run_layer_norm(x, NULL, NULL, 1, 0.0, o), PE_OK);
        double r = 1 / sqrt(3.5);
        tu_assert_close(o[0], (double[]){-2 * r, 0, -1 * r, 3 * r}, 4, 1e-6);
        tu_assert_dims(o[1], 1, (int64_t[]){1});
        tu_assert_close(o[1], (double[]){3}, 1, 1e-6);
        tu_assert_close(o[2], (double[]){3.5}, 1, 1e-6);
        for (int i = 0; i < 3; i++) pe_tensor_free(o[i]);
        pe_tensor_free(x);
        pe_tensor_free(s);
        pe_tensor_free(b);
    }
}

static void test_layer_norm_errors(void **state) {
    (void)state;
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){2, 3, 4}, NULL);
    pe_tensor *s = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
    pe_tensor *o[3] = {pe_tensor_new(), pe_tensor_new(), pe_tensor_new()};
    assert_int_equal(run_layer_norm(x, s, NULL, 1, 1e-5, o), PE_ERR_INVALID); /* needs [12] */
    assert_non_null(strstr(pe_last_error(), "Scale 's'"));
    assert_non_null(strstr(pe_last_error(), "[12]"));
    assert_int_equal(run_layer_norm(x, s, NULL, 2, 1e-5, o), PE_OK);
    assert_int_equal(run_layer_norm(x, NULL, NULL, 3, 1e-5, o), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "begin_norm_axis 3"));
    pe_tensor *xi = tu_tensor(PE_DTYPE_INT32, 2, (int64_t[]){2, 2}, NULL);
    assert_int_equal(run_layer_norm(xi, NULL, NULL, 1, 1e-5, o), PE_ERR_UNSUPPORTED);
    for (int i = 0; i < 3; i++) pe_tensor_free(o[i]);
    pe_tensor_free(x);
    pe_tensor_free(xi);
    pe_tensor_free(s);
}

/* The OPENBLAS_CORETYPE hint (pe/ops.h): SkylakeX / Haswell on the Intel
 * models newer than OpenBLAS 0.3.21, nothing elsewhere; the kernels OpenBLAS
 * runs here have a name. */
static void test_blas_coretype_hint(void **state) {
    (void)state;
    assert_string_equal(pe_cpu_blas_coretype_for(true, 6, 207, true, true), "SkylakeX");
    assert_string_equal(pe_cpu_blas_coretype_for(true, 6, 143, true, true), "SkylakeX");
    assert_string_equal(pe_cpu_blas_coretype_for(true, 6, 173, false, true), "Haswell");
    assert_null(pe_cpu_blas_coretype_for(true, 6, 174, false, false)); /* nothing better to pick */
    assert_null(pe_cpu_blas_coretype_for(true, 6, 85, true, true));    /* Skylake-SP: OpenBLAS knows it */
    assert_null(pe_cpu_blas_coretype_for(false, 6, 207, true, true));  /* not Intel */
    assert_null(pe_cpu_blas_coretype_for(true, 15, 207, true, true));
    const char *h = pe_blas_coretype_hint();  /* this machine: whatever it is, one of those answers */
    assert_true(!h || !strcmp(h, "SkylakeX") || !strcmp(h, "Haswell"));
    assert_true(strlen(pe_blas_core()) > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_coretype_hint),
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
        cmocka_unit_test(test_lookup_table_values),
        cmocka_unit_test(test_lookup_table_errors),
        cmocka_unit_test(test_layer_norm_values),
        cmocka_unit_test(test_layer_norm_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
