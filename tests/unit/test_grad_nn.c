/* tests/unit/test_grad_nn.c — gradients of conv2d, pool2d and batch_norm.
 *
 * 1. fp64 through the real autodiff pass (pe_gradients + the grad makers in
 *    ops/nn.c) against central finite differences (grad_check.h), on odd
 *    shapes: N=2 C=3 H=7 W=5, depthwise groups, strides, asymmetric
 *    4-value paddings, dilation, SAME/VALID, with and without bias; max/avg
 *    (exclusive or not) pooling with ceil_mode, global and adaptive;
 *    batch_norm in training mode (rank 4 and 2) and with global stats, with
 *    only some inputs differentiable.
 * 2. fp32 (oneDNN backward primitives) against the fp64 loops on the same
 *    fp32-rounded inputs, grad ops run directly, with some outputs
 *    @EMPTY@ (not requested) — rtol 1e-4.
 * 3. Shape errors of the grad ops, the training-mode SavedMean requirement,
 *    and a steady state that creates no oneDNN primitive and allocates
 *    nothing.
 */
#include "tests/unit/grad_check.h"

#include <stdlib.h>
#include <string.h>

#include "ops/cpu/dnnl_util.h"

/* ---- helpers ------------------------------------------------------------ */

static void set_pair(pe_op *op, const char *name, int64_t a, int64_t b) {
    assert_int_equal(pe_op_set_ints(op, name, (int64_t[]){a, b}, 2), PE_OK);
}

static int64_t numel(int nd, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= d[i];
    return n;
}

/* dt tensor with values uniform in [lo, hi) from seed, rounded to fp32 so
 * the fp32 and fp64 runs see the same numbers. */
static pe_tensor *rnd(pe_dtype dt, int nd, const int64_t *dims, uint64_t seed, double lo, double hi) {
    pe_tensor *r = gc_rand(nd, dims, seed); /* [-1, 1) */
    int64_t n = pe_tensor_numel(r);
    double *v = pe_tensor_data(r);
    for (int64_t i = 0; i < n; i++) v[i] = (double)(float)(lo + (hi - lo) * (v[i] + 1) / 2);
    pe_tensor *t = tu_tensor(dt, nd, dims, v);
    pe_tensor_free(r);
    return t;
}

/* Declares var `name` of dtype dt and dims (0 dims: unknown; infer sets them). */
static void decl(pe_program *p, const char *name, pe_dtype dt, int nd, const int64_t *dims) {
    assert_non_null(pe_block_add_var(&p->blocks[0], name, dt, nd, dims));
}

/* |got - want| <= rtol * (1 + |want|) element-wise. */
static void assert_close_t(const pe_tensor *got, const pe_tensor *want, double rtol, const char *what) {
    assert_int_equal(pe_tensor_numel(got), pe_tensor_numel(want));
    for (int64_t i = 0; i < pe_tensor_numel(want); i++) {
        double g = tu_get(got, i), w = tu_get(want, i);
        if (!(fabs(g - w) <= rtol * (1 + fabs(w))))
            fail_msg("%s: element %lld: fp32 %.9g, fp64 %.9g", what, (long long)i, g, w);
    }
}

/* ---- conv2d ------------------------------------------------------------- */

typedef struct gconv {
    const char *what;
    int64_t n, c, h, w, m, kh, kw, groups;
    int64_t sh, sw, dh, dw;
    int n_pad;
    int64_t pad[4];
    const char *alg;
    bool bias;
} gconv;

static const gconv conv_cases[] = {
    {"3x3 pad 1 bias", 2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 2, {1, 1}, NULL, true},
    {"stride 2, asymmetric 4-value paddings", 2, 3, 7, 5, 2, 3, 2, 1, 2, 2, 1, 1, 4, {1, 0, 2, 1}, NULL, false},
    {"dilation 2 bias", 2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 2, 2, 2, {2, 1}, NULL, true},
    {"depthwise groups=3 x2, stride 2", 2, 3, 7, 5, 6, 3, 3, 3, 2, 2, 1, 1, 2, {1, 1}, NULL, true},
    {"groups=3 stride (2,1) dilation (1,2) asym pad", 2, 6, 7, 5, 3, 2, 3, 3, 2, 1, 1, 2, 4, {0, 1, 2, 0}, NULL, false},
    {"SAME stride 2 bias", 2, 3, 7, 5, 4, 3, 3, 1, 2, 2, 1, 1, 2, {0, 0}, "SAME", true},
    {"VALID stride (1,2) dilation 2", 2, 3, 7, 5, 2, 2, 2, 1, 1, 2, 2, 2, 2, {3, 3}, "VALID", false},
    {"1x1 stride 2", 2, 3, 7, 5, 5, 1, 1, 1, 2, 2, 1, 1, 2, {0, 0}, NULL, true},
};

static const gconv *g_conv;

static void conv_attrs_of(pe_op *op, const gconv *k) {
    set_pair(op, "strides", k->sh, k->sw);
    set_pair(op, "dilations", k->dh, k->dw);
    assert_int_equal(pe_op_set_ints(op, "paddings", k->pad, k->n_pad), PE_OK);
    assert_int_equal(pe_op_set_int(op, "groups", k->groups), PE_OK);
    if (k->alg) assert_int_equal(pe_op_set_string(op, "padding_algorithm", k->alg), PE_OK);
}

static void conv_attrs(pe_op *op) { conv_attrs_of(op, g_conv); }

static void test_conv2d_grad_fd(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
        const gconv *k = &conv_cases[i];
        g_conv = k;
        print_message("conv2d: %s\n", k->what);
        gc_case c = {
            .op = "conv2d",
            .in = {{"Input", gc_rand(4, (int64_t[]){k->n, k->c, k->h, k->w}, 10 + i), true},
                   {"Filter", gc_rand(4, (int64_t[]){k->m, k->c / k->groups, k->kh, k->kw}, 20 + i), true},
                   {"Bias", gc_rand(1, (int64_t[]){k->m}, 30 + i), true}},
            .n_in = k->bias ? 3 : 2, .out = {"Output"}, .n_out = 1, .set_attrs = conv_attrs,
        };
        if (!k->bias) pe_tensor_free(c.in[2].value);
        gc_check(&c);
    }
    /* Only the filter differentiable (the input is data): Input@GRAD is @EMPTY@. */
    g_conv = &conv_cases[0];
    gc_case c = {
        .op = "conv2d",
        .in = {{"Input", gc_rand(4, (int64_t[]){2, 3, 7, 5}, 41), false},
               {"Filter", gc_rand(4, (int64_t[]){4, 3, 3, 3}, 42), true},
               {"Bias", gc_rand(1, (int64_t[]){4}, 43), false}},
        .n_in = 3, .out = {"Output"}, .n_out = 1, .set_attrs = conv_attrs,
    };
    gc_check(&c);
}

/* conv2d_grad run directly; mask bit 0/1/2: Input@GRAD / Filter@GRAD / Bias@GRAD requested. */
static void run_conv_grad(pe_dtype dt, const gconv *k, int mask, uint64_t seed, pe_tensor *out[3]) {
    pe_program *p = pe_program_new();
    const int64_t xd[4] = {k->n, k->c, k->h, k->w}, wd[4] = {k->m, k->c / k->groups, k->kh, k->kw}, bd[1] = {k->m};
    pe_tensor *x = rnd(dt, 4, xd, seed, -1, 1), *w = rnd(dt, 4, wd, seed + 1, -1, 1), *b = rnd(dt, 1, bd, seed + 2, -1, 1);
    /* The forward conv gives Output's shape; Output@GRAD is random of that shape. */
    decl(p, "x", dt, 4, xd);
    decl(p, "w", dt, 4, wd);
    decl(p, "b", dt, 1, bd);
    decl(p, "y", dt, 0, NULL);
    pe_op *op = pe_block_add_op(&p->blocks[0], "conv2d");
    pe_op_add_input(op, "Input", "x");
    pe_op_add_input(op, "Filter", "w");
    if (k->bias) pe_op_add_input(op, "Bias", "b");
    pe_op_add_output(op, "Output", "y");
    conv_attrs_of(op, k);
    pe_tensor *y = pe_tensor_new();
    pe_feed feeds[4] = {{"x", x}, {"w", w}, {"b", b}, {"dy", NULL}};
    assert_int_equal(tu_run(p, feeds, 3, (const char *[]){"y"}, 1, &y), PE_OK);
    pe_tensor *dy = rnd(dt, y->ndim, y->dims, seed + 3, -1, 1);
    feeds[3].tensor = dy;
    decl(p, "dy", dt, y->ndim, y->dims);
    decl(p, "dx", dt, 0, NULL);
    decl(p, "dw", dt, 0, NULL);
    decl(p, "db", dt, 0, NULL);
    op = pe_block_add_op(&p->blocks[0], "conv2d_grad");
    pe_op_add_input(op, "Input", "x");
    pe_op_add_input(op, "Filter", "w");
    if (k->bias) pe_op_add_input(op, "Bias", "b");
    pe_op_add_input(op, "Output@GRAD", "dy");
    pe_op_add_output(op, "Input@GRAD", mask & 1 ? "dx" : PE_EMPTY_VAR);
    pe_op_add_output(op, "Filter@GRAD", mask & 2 ? "dw" : PE_EMPTY_VAR);
    if (k->bias) pe_op_add_output(op, "Bias@GRAD", mask & 4 ? "db" : PE_EMPTY_VAR);
    conv_attrs_of(op, k);
    const char *names[3] = {"dx", "dw", "db"};
    const char *fetch[3];
    int nf = 0, idx[3];
    for (int i = 0; i < 3; i++) {
        out[i] = NULL;
        if ((mask >> i) & 1 && (i < 2 || k->bias)) { idx[nf] = i; fetch[nf++] = names[i]; }
    }
    pe_tensor *got[3];
    for (int i = 0; i < nf; i++) got[i] = pe_tensor_new();
    assert_int_equal(tu_run(p, feeds, 4, fetch, nf, got), PE_OK);
    for (int i = 0; i < nf; i++) out[idx[i]] = got[i];
    pe_tensor_free(y); pe_tensor_free(dy); pe_tensor_free(x); pe_tensor_free(w); pe_tensor_free(b);
    pe_program_free(p);
}

static void test_conv2d_grad_fp32_vs_fp64(void **state) {
    (void)state;
    static const gconv big[] = {
        {"C16 M32 3x3 pad 1 bias", 2, 16, 12, 11, 32, 3, 3, 1, 1, 1, 1, 1, 2, {1, 1}, NULL, true},
        {"C8 M16 5x5 stride 2 asym pad", 3, 8, 13, 9, 16, 5, 5, 1, 2, 2, 1, 1, 4, {2, 1, 0, 2}, NULL, true},
        {"depthwise C16 stride 2", 2, 16, 9, 10, 16, 3, 3, 16, 2, 2, 1, 1, 2, {1, 1}, NULL, true},
    };
    static const int masks[] = {7, 1, 2, 4, 6, 3};
    const int nc = (int)(sizeof conv_cases / sizeof conv_cases[0]), nb = (int)(sizeof big / sizeof big[0]);
    for (int i = 0; i < nc + nb; i++) {
        const gconv *k = i < nc ? &conv_cases[i] : &big[i - nc];
        for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
            if (m > 0 && i != 0 && i != nc) continue; /* all masks on two cases, all outputs on the rest */
            pe_tensor *a[3], *b[3];
            run_conv_grad(PE_DTYPE_FP32, k, masks[m], 100 + (uint64_t)i, a);
            run_conv_grad(PE_DTYPE_FP64, k, masks[m], 100 + (uint64_t)i, b);
            for (int j = 0; j < 3; j++) {
                assert_true((a[j] == NULL) == (b[j] == NULL));
                if (!a[j]) continue;
                char what[160];
                snprintf(what, sizeof what, "conv2d_grad %s mask %d output %d", k->what, masks[m], j);
                assert_int_equal(a[j]->dtype, PE_DTYPE_FP32);
                assert_close_t(a[j], b[j], 1e-4, what);
                pe_tensor_free(a[j]);
                pe_tensor_free(b[j]);
            }
        }
    }
}

/* ---- pool2d ------------------------------------------------------------- */

typedef struct gpool {
    const char *what;
    int64_t n, c, h, w;
    const char *type;
    int64_t kh, kw, sh, sw;
    int n_pad;
    int64_t pad[4];
    const char *alg;
    bool global, ceil, exclusive, adaptive;
} gpool;

static const gpool pool_cases[] = {
    {"max 3x3 s2 p1", 2, 3, 7, 5, "max", 3, 3, 2, 2, 2, {1, 1}, NULL, false, false, true, false},
    {"max 2x2 s2 ceil_mode", 2, 3, 7, 5, "max", 2, 2, 2, 2, 2, {0, 0}, NULL, false, true, true, false},
    {"max 3x2 s(2,1) asym pad", 2, 3, 7, 5, "max", 3, 2, 2, 1, 4, {1, 0, 0, 1}, NULL, false, false, true, false},
    {"max VALID 3x3 s2", 2, 3, 7, 5, "max", 3, 3, 2, 2, 2, {1, 1}, "VALID", false, false, true, false},
    {"avg exclusive 3x3 s2 p1", 2, 3, 7, 5, "avg", 3, 3, 2, 2, 2, {1, 1}, NULL, false, false, true, false},
    {"avg inclusive 3x3 s2 p1", 2, 3, 7, 5, "avg", 3, 3, 2, 2, 2, {1, 1}, NULL, false, false, false, false},
    {"avg exclusive ceil_mode 2x2 s2", 2, 3, 7, 5, "avg", 2, 2, 2, 2, 2, {0, 0}, NULL, false, true, true, false},
    {"avg inclusive ceil_mode 3x2 s2 asym pad", 2, 3, 7, 5, "avg", 3, 2, 2, 2, 4, {1, 0, 0, 1}, NULL, false, true, false, false},
    {"avg SAME 3x3 s2", 2, 3, 7, 5, "avg", 3, 3, 2, 2, 2, {0, 0}, "SAME", false, false, true, false},
    {"global max", 2, 3, 7, 5, "max", 1, 1, 1, 1, 2, {0, 0}, NULL, true, false, true, false},
    {"global avg", 2, 3, 7, 5, "avg", 1, 1, 1, 1, 2, {0, 0}, NULL, true, false, true, false},
    {"adaptive avg 3x2", 2, 3, 7, 5, "avg", 3, 2, 1, 1, 2, {0, 0}, NULL, false, false, true, true},
    {"adaptive max 4x3", 2, 3, 7, 5, "max", 4, 3, 1, 1, 2, {0, 0}, NULL, false, false, true, true},
};

static const gpool *g_pool;

static void pool_attrs_of(pe_op *op, const gpool *k) {
    assert_int_equal(pe_op_set_string(op, "pooling_type", k->type), PE_OK);
    set_pair(op, "ksize", k->kh, k->kw);
    set_pair(op, "strides", k->sh, k->sw);
    assert_int_equal(pe_op_set_ints(op, "paddings", k->pad, k->n_pad), PE_OK);
    if (k->alg) assert_int_equal(pe_op_set_string(op, "padding_algorithm", k->alg), PE_OK);
    assert_int_equal(pe_op_set_bool(op, "global_pooling", k->global), PE_OK);
    assert_int_equal(pe_op_set_bool(op, "ceil_mode", k->ceil), PE_OK);
    assert_int_equal(pe_op_set_bool(op, "exclusive", k->exclusive), PE_OK);
    assert_int_equal(pe_op_set_bool(op, "adaptive", k->adaptive), PE_OK);
}

static void pool_attrs(pe_op *op) { pool_attrs_of(op, g_pool); }

static void test_pool2d_grad_fd(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
        const gpool *k = &pool_cases[i];
        g_pool = k;
        print_message("pool2d: %s\n", k->what);
        gc_case c = {
            .op = "pool2d",
            .in = {{"X", gc_rand(4, (int64_t[]){k->n, k->c, k->h, k->w}, 50 + i), true}},
            .n_in = 1, .out = {"Out"}, .n_out = 1, .set_attrs = pool_attrs, .max_elems = 70,
        };
        gc_check(&c);
    }
}

/* x [xd] -> pool2d (max, k x k, stride st, padding pad) -> y; pool2d_grad(x, y,
 * dy) -> dx. Feed x and dy, fetch dx. */
static pe_program *max_pool_grad_prog(pe_dtype dt, const int64_t *xd, const int64_t *yd, int64_t k, int64_t st,
                                      int64_t pad) {
    pe_program *p = pe_program_new();
    decl(p, "x", dt, 4, xd);
    decl(p, "y", dt, 4, yd);
    decl(p, "dy", dt, 4, yd);
    decl(p, "dx", dt, 4, xd);
    pe_op *op = pe_block_add_op(&p->blocks[0], "pool2d");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "y");
    for (int g = 0; g < 2; g++) {
        if (g) {
            op = pe_block_add_op(&p->blocks[0], "pool2d_grad");
            pe_op_add_input(op, "X", "x");
            pe_op_add_input(op, "Out", "y");
            pe_op_add_input(op, "Out@GRAD", "dy");
            pe_op_add_output(op, "X@GRAD", "dx");
        }
        set_pair(op, "ksize", k, k);
        set_pair(op, "strides", st, st);
        set_pair(op, "paddings", pad, pad);
    }
    return p;
}

/* Max pooling with ties: the whole window's gradient goes to its first
 * maximum (row-major), as in Paddle and PyTorch. X is constant per plane. */
static void test_pool2d_grad_max_ties(void **state) {
    (void)state;
    for (int f32 = 0; f32 < 2; f32++) {
        pe_dtype dt = f32 ? PE_DTYPE_FP32 : PE_DTYPE_FP64;
        double xv[20], dyv[6] = {1, 2, 3, 4, 5, 6};
        for (int i = 0; i < 20; i++) xv[i] = 0.5;
        pe_tensor *x = tu_tensor(dt, 4, (int64_t[]){1, 1, 4, 5}, xv);
        pe_tensor *dy = tu_tensor(dt, 4, (int64_t[]){1, 1, 2, 3}, dyv);
        pe_program *p = max_pool_grad_prog(dt, x->dims, dy->dims, 3, 2, 1);
        pe_tensor *dx = pe_tensor_new();
        assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}, {"dy", dy}}, 2, (const char *[]){"dx"}, 1, &dx), PE_OK);
        /* out 2x3; window rows [0,2) [1,4), cols [0,2) [1,4) [3,5); the first
         * cells (0,0) (0,1) (0,3) (1,0) (1,1) (1,3) get dy 1..6. */
        double want[20] = {0};
        want[0] = 1; want[1] = 2; want[3] = 3; want[5] = 4; want[6] = 5; want[8] = 6;
        tu_assert_close(dx, want, 20, 0);
        pe_tensor_free(dx); pe_tensor_free(x); pe_tensor_free(dy);
        pe_program_free(p);
    }
}

/* 2x2 stride-2 max pooling that tiles X takes a branch-free path: it gives
 * the bits of the general loop, which runs when X has a spare row and
 * column (H = 2 oh + 1): ties (first maximum wins), NaN in X (a NaN never
 * beats the first cell, and wins only as the first), and -0.0 in dY. */
static void test_pool2d_grad_max2x2_matches_general(void **state) {
    (void)state;
    for (int f32 = 0; f32 < 2; f32++) {
        pe_dtype dt = f32 ? PE_DTYPE_FP32 : PE_DTYPE_FP64;
        const double vals[] = {-1.0, 0.0, 0.5, 0.5, 2.0, NAN, -0.0};
        double xa[2 * 3 * 8 * 6], xb[2 * 3 * 9 * 7], dyv[2 * 3 * 4 * 3];
        for (int i = 0; i < 2 * 3 * 9 * 7; i++) xb[i] = -3.0;
        for (int nc = 0; nc < 6; nc++)
            for (int r = 0; r < 8; r++)
                for (int c = 0; c < 6; c++) {
                    double v = vals[(nc * 31 + r * 7 + c * 3 + r * c) % 7];
                    xa[(nc * 8 + r) * 6 + c] = v;
                    xb[(nc * 9 + r) * 7 + c] = v;
                }
        for (int i = 0; i < 2 * 3 * 4 * 3; i++) dyv[i] = i % 5 == 0 ? -0.0 : (double)(i + 1) / 8;
        pe_tensor *dx[2];
        for (int k = 0; k < 2; k++) {
            int64_t xd[4] = {2, 3, k ? 9 : 8, k ? 7 : 6};
            pe_tensor *x = tu_tensor(dt, 4, xd, k ? xb : xa);
            pe_tensor *dy = tu_tensor(dt, 4, (int64_t[]){2, 3, 4, 3}, dyv);
            pe_program *p = max_pool_grad_prog(dt, xd, dy->dims, 2, 2, 0);
            dx[k] = pe_tensor_new();
            assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}, {"dy", dy}}, 2, (const char *[]){"dx"}, 1, &dx[k]), PE_OK);
            pe_tensor_free(x); pe_tensor_free(dy);
            pe_program_free(p);
        }
        size_t es = pe_dtype_size(dt);
        for (int nc = 0; nc < 6; nc++)
            for (int r = 0; r < 9; r++)
                for (int c = 0; c < 7; c++) {
                    const char *b = (const char *)pe_tensor_data(dx[1]) + (size_t)((nc * 9 + r) * 7 + c) * es;
                    if (r == 8 || c == 6) { /* the spare row and column: no window */
                        assert_true(tu_get(dx[1], (nc * 9 + r) * 7 + c) == 0);
                        continue;
                    }
                    const char *a = (const char *)pe_tensor_data(dx[0]) + (size_t)((nc * 8 + r) * 6 + c) * es;
                    if (memcmp(a, b, es)) fail_msg("%s nc %d (%d, %d): fast path and general loop differ", f32 ? "f32" : "f64", nc, r, c);
                }
        pe_tensor_free(dx[0]);
        pe_tensor_free(dx[1]);
    }
}

/* pool2d forward + pool2d_grad run directly in dt. */
static pe_tensor *run_pool_grad(pe_dtype dt, const gpool *k, uint64_t seed) {
    pe_program *p = pe_program_new();
    const int64_t xd[4] = {k->n, k->c, k->h, k->w};
    pe_tensor *x = rnd(dt, 4, xd, seed, -1, 1);
    decl(p, "x", dt, 4, xd);
    decl(p, "y", dt, 0, NULL);
    pe_op *op = pe_block_add_op(&p->blocks[0], "pool2d");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "y");
    pool_attrs_of(op, k);
    pe_tensor *y = pe_tensor_new();
    assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"y"}, 1, &y), PE_OK);
    pe_tensor *dy = rnd(dt, 4, y->dims, seed + 1, -1, 1);
    decl(p, "dy", dt, 4, y->dims);
    decl(p, "dx", dt, 0, NULL);
    op = pe_block_add_op(&p->blocks[0], "pool2d_grad");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Out", "y");
    pe_op_add_input(op, "Out@GRAD", "dy");
    pe_op_add_output(op, "X@GRAD", "dx");
    pool_attrs_of(op, k);
    pe_tensor *dx = pe_tensor_new();
    assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}, {"dy", dy}}, 2, (const char *[]){"dx"}, 1, &dx), PE_OK);
    pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(dy);
    pe_program_free(p);
    return dx;
}

static void test_pool2d_grad_fp32_vs_fp64(void **state) {
    (void)state;
    static const gpool big[] = {
        {"avg exclusive 3x3 s2 p1 C16", 2, 16, 12, 11, "avg", 3, 3, 2, 2, 2, {1, 1}, NULL, false, false, true, false},
        {"avg inclusive 2x2 s2 C8", 4, 8, 14, 14, "avg", 2, 2, 2, 2, 2, {0, 0}, NULL, false, false, false, false},
        {"max 2x2 s2 C8", 4, 8, 14, 14, "max", 2, 2, 2, 2, 2, {0, 0}, NULL, false, false, true, false},
    };
    const int nc = (int)(sizeof pool_cases / sizeof pool_cases[0]), nb = (int)(sizeof big / sizeof big[0]);
    for (int i = 0; i < nc + nb; i++) {
        const gpool *k = i < nc ? &pool_cases[i] : &big[i - nc];
        pe_tensor *a = run_pool_grad(PE_DTYPE_FP32, k, 200 + (uint64_t)i);
        pe_tensor *b = run_pool_grad(PE_DTYPE_FP64, k, 200 + (uint64_t)i);
        char what[160];
        snprintf(what, sizeof what, "pool2d_grad %s", k->what);
        assert_int_equal(a->dtype, PE_DTYPE_FP32);
        assert_close_t(a, b, 1e-4, what);
        pe_tensor_free(a);
        pe_tensor_free(b);
    }
}

/* ---- batch_norm --------------------------------------------------------- */

typedef struct gbn {
    const char *what;
    int nd;
    int64_t dims[4];
    bool is_test, use_global_stats;
    bool dx, dscale, dbias; /* which inputs are differentiable */
} gbn;

static const gbn bn_cases[] = {
    {"training rank 4", 4, {2, 3, 7, 5}, false, false, true, true, true},
    {"training rank 2", 2, {5, 4}, false, false, true, true, true},
    {"training rank 3, X only", 3, {3, 2, 4}, false, false, true, false, false},
    {"training rank 4, Scale and Bias only", 4, {2, 3, 3, 2}, false, false, false, true, true},
    {"is_test rank 4", 4, {2, 3, 7, 5}, true, false, true, true, true},
    {"use_global_stats rank 2", 2, {5, 4}, false, true, true, true, true},
};

static const gbn *g_bn;

static void bn_attrs_of(pe_op *op, const gbn *k) {
    assert_int_equal(pe_op_set_bool(op, "is_test", k->is_test), PE_OK);
    assert_int_equal(pe_op_set_bool(op, "use_global_stats", k->use_global_stats), PE_OK);
    assert_int_equal(pe_op_set_float(op, "epsilon", 1e-3), PE_OK);
    assert_int_equal(pe_op_set_float(op, "momentum", 0.8), PE_OK);
}

static void bn_attrs(pe_op *op) { bn_attrs_of(op, g_bn); }

/* Running variance in [0.5, 1.5): positive. */
static pe_tensor *pos_rand(int64_t c, uint64_t seed) {
    pe_tensor *t = gc_rand(1, &c, seed);
    double *v = pe_tensor_data(t);
    for (int64_t i = 0; i < c; i++) v[i] = 1.0 + 0.5 * v[i];
    return t;
}

static void test_batch_norm_grad_fd(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++) {
        const gbn *k = &bn_cases[i];
        g_bn = k;
        print_message("batch_norm: %s\n", k->what);
        const int64_t c = k->dims[1];
        gc_case gc = {
            .op = "batch_norm",
            .in = {{"X", gc_rand(k->nd, k->dims, 60 + i), k->dx},
                   {"Scale", gc_rand(1, &c, 70 + i), k->dscale},
                   {"Bias", gc_rand(1, &c, 80 + i), k->dbias},
                   {"Mean", gc_rand(1, &c, 90 + i), false},
                   {"Variance", pos_rand(c, 95 + i), false}},
            .n_in = 5, .out = {"Y"}, .n_out = 1, .set_attrs = bn_attrs,
            .extra_out = {"MeanOut", "VarianceOut", "SavedMean", "SavedVariance"},
            .n_extra_out = k->is_test ? 0 : 4, .max_elems = 50,
        };
        gc_check(&gc);
    }
}

/* The gradient of a training batch_norm needs the saved batch statistics. */
static void test_batch_norm_grad_needs_saved_stats(void **state) {
    (void)state;
    g_bn = &bn_cases[0];
    const int64_t c = 3;
    pe_tensor *vals[5] = {gc_rand(4, bn_cases[0].dims, 1), gc_rand(1, &c, 2), gc_rand(1, &c, 3), gc_rand(1, &c, 4),
                          pos_rand(c, 5)};
    gc_case gc = {
        .op = "batch_norm",
        .in = {{"X", vals[0], true}, {"Scale", vals[1], true}, {"Bias", vals[2], true}, {"Mean", vals[3], false},
               {"Variance", vals[4], false}},
        .n_in = 5, .out = {"Y"}, .n_out = 1, .set_attrs = bn_attrs,
    };
    /* The forward op alone (no loss ops), differentiated from its output. */
    pe_program *p = gc_forward(&gc, NULL);
    char *grads[1] = {NULL};
    pe_status st = pe_gradients(p, (const char *[]){"out_Y"}, 1, (const char *[]){"in_X"}, 1, grads);
    assert_int_equal(st, PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "SavedMean"));
    assert_null(grads[0]);
    pe_program_free(p);
    for (int i = 0; i < 5; i++) pe_tensor_free(vals[i]);
}

/* batch_norm forward (training: saves the statistics) + batch_norm_grad in
 * dt; mask bits: X@GRAD, Scale@GRAD, Bias@GRAD requested. */
static void run_bn_grad(pe_dtype dt, const gbn *k, int mask, uint64_t seed, pe_tensor *out[3]) {
    pe_program *p = pe_program_new();
    const int64_t c = k->dims[1];
    pe_tensor *x = rnd(dt, k->nd, k->dims, seed, -2, 3), *sc = rnd(dt, 1, &c, seed + 1, 0.5, 1.5);
    pe_tensor *bi = rnd(dt, 1, &c, seed + 2, -1, 1), *mean = rnd(dt, 1, &c, seed + 3, -1, 1);
    pe_tensor *var = rnd(dt, 1, &c, seed + 4, 0.5, 2), *dy = rnd(dt, k->nd, k->dims, seed + 5, -1, 1);
    decl(p, "x", dt, k->nd, k->dims);
    decl(p, "dy", dt, k->nd, k->dims);
    const char *chan[] = {"scale", "bias", "mean", "var", "sm", "sv", "dscale", "dbias"};
    for (int i = 0; i < 8; i++) decl(p, chan[i], dt, 1, &c);
    decl(p, "y", dt, k->nd, k->dims);
    decl(p, "dx", dt, k->nd, k->dims);
    pe_op *op = pe_block_add_op(&p->blocks[0], "batch_norm");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Scale", "scale");
    pe_op_add_input(op, "Bias", "bias");
    pe_op_add_input(op, "Mean", "mean");
    pe_op_add_input(op, "Variance", "var");
    pe_op_add_output(op, "Y", "y");
    pe_op_add_output(op, "SavedMean", "sm");
    pe_op_add_output(op, "SavedVariance", "sv");
    bn_attrs_of(op, k);
    const bool global = k->is_test || k->use_global_stats;
    op = pe_block_add_op(&p->blocks[0], "batch_norm_grad");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Scale", "scale");
    pe_op_add_input(op, "Bias", "bias");
    pe_op_add_input(op, global ? "Mean" : "SavedMean", global ? "mean" : "sm");
    pe_op_add_input(op, global ? "Variance" : "SavedVariance", global ? "var" : "sv");
    pe_op_add_input(op, "Y@GRAD", "dy");
    pe_op_add_output(op, "X@GRAD", mask & 1 ? "dx" : PE_EMPTY_VAR);
    pe_op_add_output(op, "Scale@GRAD", mask & 2 ? "dscale" : PE_EMPTY_VAR);
    pe_op_add_output(op, "Bias@GRAD", mask & 4 ? "dbias" : PE_EMPTY_VAR);
    bn_attrs_of(op, k);
    const char *names[3] = {"dx", "dscale", "dbias"};
    const char *fetch[3];
    int nf = 0, idx[3];
    for (int i = 0; i < 3; i++) {
        out[i] = NULL;
        if ((mask >> i) & 1) { idx[nf] = i; fetch[nf++] = names[i]; }
    }
    pe_tensor *got[3];
    for (int i = 0; i < nf; i++) got[i] = pe_tensor_new();
    pe_feed feeds[] = {{"x", x}, {"scale", sc}, {"bias", bi}, {"mean", mean}, {"var", var}, {"dy", dy}};
    assert_int_equal(tu_run(p, feeds, 6, fetch, nf, got), PE_OK);
    for (int i = 0; i < nf; i++) out[idx[i]] = got[i];
    pe_tensor_free(x); pe_tensor_free(sc); pe_tensor_free(bi); pe_tensor_free(mean); pe_tensor_free(var);
    pe_tensor_free(dy);
    pe_program_free(p);
}

static void test_batch_norm_grad_fp32_vs_fp64(void **state) {
    (void)state;
    static const gbn big[] = {
        {"training C16", 4, {4, 16, 9, 7}, false, false, true, true, true},
        {"is_test C16", 4, {4, 16, 9, 7}, true, false, true, true, true},
    };
    static const int masks[] = {7, 1, 6, 2, 5};
    const int nc = (int)(sizeof bn_cases / sizeof bn_cases[0]), nb = (int)(sizeof big / sizeof big[0]);
    for (int i = 0; i < nc + nb; i++) {
        const gbn *k = i < nc ? &bn_cases[i] : &big[i - nc];
        for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
            pe_tensor *a[3], *b[3];
            run_bn_grad(PE_DTYPE_FP32, k, masks[m], 300 + (uint64_t)i, a);
            run_bn_grad(PE_DTYPE_FP64, k, masks[m], 300 + (uint64_t)i, b);
            for (int j = 0; j < 3; j++) {
                if (!a[j]) continue;
                char what[160];
                snprintf(what, sizeof what, "batch_norm_grad %s mask %d output %d", k->what, masks[m], j);
                assert_close_t(a[j], b[j], 1e-4, what);
                pe_tensor_free(a[j]);
                pe_tensor_free(b[j]);
            }
        }
    }
}

/* ---- errors, steady state ----------------------------------------------- */

static void test_grad_shape_errors(void **state) {
    (void)state;
    const int64_t xd[4] = {2, 3, 7, 5}, wd[4] = {4, 3, 3, 3}, bad[4] = {2, 4, 5, 4};
    pe_tensor *x = rnd(PE_DTYPE_FP32, 4, xd, 1, -1, 1), *w = rnd(PE_DTYPE_FP32, 4, wd, 2, -1, 1);
    pe_tensor *dy = rnd(PE_DTYPE_FP32, 4, bad, 3, -1, 1);
    /* conv2d_grad: Output@GRAD must be [2, 4, 5, 3] (no padding) */
    pe_program *p = pe_program_new();
    decl(p, "x", PE_DTYPE_FP32, 4, xd);
    decl(p, "w", PE_DTYPE_FP32, 4, wd);
    decl(p, "dy", PE_DTYPE_FP32, 4, bad);
    decl(p, "dx", PE_DTYPE_FP32, 4, xd);
    pe_op *op = pe_block_add_op(&p->blocks[0], "conv2d_grad");
    pe_op_add_input(op, "Input", "x");
    pe_op_add_input(op, "Filter", "w");
    pe_op_add_input(op, "Output@GRAD", "dy");
    pe_op_add_output(op, "Input@GRAD", "dx");
    pe_tensor *o = pe_tensor_new();
    assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}, {"w", w}, {"dy", dy}}, 3, (const char *[]){"dx"}, 1, &o),
                     PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "Output@GRAD 'dy'"));
    assert_non_null(strstr(pe_last_error(), "[2, 4, 5, 3]"));
    pe_program_free(p);
    /* pool2d_grad: Out@GRAD of the wrong shape */
    p = pe_program_new();
    decl(p, "x", PE_DTYPE_FP32, 4, xd);
    decl(p, "y", PE_DTYPE_FP32, 0, NULL);
    decl(p, "dy", PE_DTYPE_FP32, 4, bad);
    decl(p, "dx", PE_DTYPE_FP32, 4, xd);
    op = pe_block_add_op(&p->blocks[0], "pool2d");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "y");
    set_pair(op, "ksize", 2, 2);
    set_pair(op, "strides", 2, 2);
    op = pe_block_add_op(&p->blocks[0], "pool2d_grad");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Out", "y");
    pe_op_add_input(op, "Out@GRAD", "dy");
    pe_op_add_output(op, "X@GRAD", "dx");
    set_pair(op, "ksize", 2, 2);
    set_pair(op, "strides", 2, 2);
    assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}, {"dy", dy}}, 2, (const char *[]){"dx"}, 1, &o), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "Out@GRAD 'dy'"));
    pe_program_free(p);
    /* batch_norm_grad in training mode without SavedMean/SavedVariance */
    p = pe_program_new();
    const int64_t c = 3;
    pe_tensor *sc = rnd(PE_DTYPE_FP32, 1, &c, 4, 0.5, 1);
    decl(p, "x", PE_DTYPE_FP32, 4, xd);
    decl(p, "dy", PE_DTYPE_FP32, 4, xd);
    decl(p, "s", PE_DTYPE_FP32, 1, &c);
    decl(p, "dx", PE_DTYPE_FP32, 4, xd);
    op = pe_block_add_op(&p->blocks[0], "batch_norm_grad");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Scale", "s");
    pe_op_add_input(op, "Bias", "s");
    pe_op_add_input(op, "Y@GRAD", "dy");
    pe_op_add_output(op, "X@GRAD", "dx");
    assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}, {"dy", x}, {"s", sc}}, 3, (const char *[]){"dx"}, 1, &o),
                     PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "SavedMean is missing"));
    pe_program_free(p);
    pe_tensor_free(o); pe_tensor_free(x); pe_tensor_free(w); pe_tensor_free(dy); pe_tensor_free(sc);
}

/* conv -> batch_norm -> avg pool and their grad ops (fp32), run three times
 * in one scope: the first run builds one oneDNN primitive per op, the second
 * and third create none and allocate nothing. */
static void test_grad_steady_state(void **state) {
    (void)state;
    const gconv k = {"", 2, 16, 12, 11, 32, 3, 3, 1, 1, 1, 1, 1, 2, {1, 1}, NULL, true};
    const gpool pk = {"", 0, 0, 0, 0, "avg", 3, 3, 2, 2, 2, {1, 1}, NULL, false, false, true, false};
    const gbn bk = {"", 4, {0}, false, false, true, true, true};
    const int64_t xd[4] = {2, 16, 12, 11}, wd[4] = {32, 16, 3, 3}, yd[4] = {2, 32, 12, 11}, od[4] = {2, 32, 6, 6};
    const int64_t c = 32;
    pe_tensor *x = rnd(PE_DTYPE_FP32, 4, xd, 1, -1, 1), *w = rnd(PE_DTYPE_FP32, 4, wd, 2, -1, 1);
    pe_tensor *b = rnd(PE_DTYPE_FP32, 1, &c, 3, -1, 1), *sc = rnd(PE_DTYPE_FP32, 1, &c, 4, 0.5, 1.5);
    pe_tensor *dout = rnd(PE_DTYPE_FP32, 4, od, 5, -1, 1);
    pe_program *p = pe_program_new();
    decl(p, "x", PE_DTYPE_FP32, 4, xd);
    decl(p, "w", PE_DTYPE_FP32, 4, wd);
    decl(p, "dout", PE_DTYPE_FP32, 4, od);
    const char *chan[] = {"b", "scale", "bias", "sm", "sv", "db", "dscale", "dbias"};
    for (int i = 0; i < 8; i++) decl(p, chan[i], PE_DTYPE_FP32, 1, &c);
    pe_var *mv = pe_block_add_var(&p->blocks[0], "mean", PE_DTYPE_FP32, 1, &c);
    pe_var *vv = pe_block_add_var(&p->blocks[0], "var", PE_DTYPE_FP32, 1, &c);
    mv->persistable = vv->persistable = true;
    const char *big[] = {"y", "z", "dy", "dz"};
    for (int i = 0; i < 4; i++) decl(p, big[i], PE_DTYPE_FP32, 4, yd);
    decl(p, "out", PE_DTYPE_FP32, 4, od);
    decl(p, "dx", PE_DTYPE_FP32, 4, xd);
    decl(p, "dw", PE_DTYPE_FP32, 4, wd);
    pe_block *blk = &p->blocks[0];
    pe_op *op = pe_block_add_op(blk, "conv2d");
    pe_op_add_input(op, "Input", "x"); pe_op_add_input(op, "Filter", "w"); pe_op_add_input(op, "Bias", "b");
    pe_op_add_output(op, "Output", "y");
    conv_attrs_of(op, &k);
    op = pe_block_add_op(blk, "batch_norm");
    pe_op_add_input(op, "X", "y"); pe_op_add_input(op, "Scale", "scale"); pe_op_add_input(op, "Bias", "bias");
    pe_op_add_input(op, "Mean", "mean"); pe_op_add_input(op, "Variance", "var");
    pe_op_add_output(op, "Y", "z"); pe_op_add_output(op, "MeanOut", "mean"); pe_op_add_output(op, "VarianceOut", "var");
    pe_op_add_output(op, "SavedMean", "sm"); pe_op_add_output(op, "SavedVariance", "sv");
    bn_attrs_of(op, &bk);
    op = pe_block_add_op(blk, "pool2d");
    pe_op_add_input(op, "X", "z"); pe_op_add_output(op, "Out", "out");
    pool_attrs_of(op, &pk);
    op = pe_block_add_op(blk, "pool2d_grad");
    pe_op_add_input(op, "X", "z"); pe_op_add_input(op, "Out", "out"); pe_op_add_input(op, "Out@GRAD", "dout");
    pe_op_add_output(op, "X@GRAD", "dz");
    pool_attrs_of(op, &pk);
    op = pe_block_add_op(blk, "batch_norm_grad");
    pe_op_add_input(op, "X", "y"); pe_op_add_input(op, "Scale", "scale"); pe_op_add_input(op, "Bias", "bias");
    pe_op_add_input(op, "SavedMean", "sm"); pe_op_add_input(op, "SavedVariance", "sv");
    pe_op_add_input(op, "Y@GRAD", "dz");
    pe_op_add_output(op, "X@GRAD", "dy"); pe_op_add_output(op, "Scale@GRAD", "dscale");
    pe_op_add_output(op, "Bias@GRAD", "dbias");
    bn_attrs_of(op, &bk);
    op = pe_block_add_op(blk, "conv2d_grad");
    pe_op_add_input(op, "Input", "x"); pe_op_add_input(op, "Filter", "w"); pe_op_add_input(op, "Bias", "b");
    pe_op_add_input(op, "Output@GRAD", "dy");
    pe_op_add_output(op, "Input@GRAD", "dx"); pe_op_add_output(op, "Filter@GRAD", "dw");
    pe_op_add_output(op, "Bias@GRAD", "db");
    conv_attrs_of(op, &k);

    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_tensor_copy(pe_scope_var(scope, "mean"), b, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_tensor_copy(pe_scope_var(scope, "var"), sc, pe_place_cpu(0)), PE_OK);
    pe_feed feeds[6] = {{"x", x}, {"w", w}, {"b", b}, {"scale", sc}, {"bias", b}, {"dout", dout}};
    const char *fetch[2] = {"dx", "dw"};
    pe_tensor *outs[2] = {pe_tensor_new(), pe_tensor_new()};
    int64_t created0, created1, created3;
    pe_dnnl_cache_clear();
    pe_dnnl_cache_stats(NULL, &created0);
    assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 6, fetch, 2, outs), PE_OK);
    pe_dnnl_cache_stats(NULL, &created1);
    /* every op ran on oneDNN: 3 forward primitives, pooling / batch-norm
     * backward and the two convolution backward ones */
    assert_int_equal(created1 - created0, 7);
    pe_alloc_stats a1 = pe_alloc_get_stats(pe_place_cpu(0));
    for (int i = 0; i < 2; i++) assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 6, fetch, 2, outs), PE_OK);
    pe_dnnl_cache_stats(NULL, &created3);
    pe_alloc_stats a3 = pe_alloc_get_stats(pe_place_cpu(0));
    assert_int_equal(created3, created1);
    assert_int_equal(a3.n_allocs, a1.n_allocs);
    tu_assert_dims(outs[0], 4, xd);
    tu_assert_dims(outs[1], 4, wd);
    /* the filter gradient is not all zeros */
    double s = 0;
    for (int64_t i = 0; i < numel(4, wd); i++) s += fabs(tu_get(outs[1], i));
    assert_true(s > 0);
    pe_tensor_free(outs[0]); pe_tensor_free(outs[1]);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(p);
    pe_tensor_free(x); pe_tensor_free(w); pe_tensor_free(b); pe_tensor_free(sc); pe_tensor_free(dout);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d_grad_fd),
        cmocka_unit_test(test_conv2d_grad_fp32_vs_fp64),
        cmocka_unit_test(test_pool2d_grad_fd),
        cmocka_unit_test(test_pool2d_grad_max_ties),
        cmocka_unit_test(test_pool2d_grad_max2x2_matches_general),
        cmocka_unit_test(test_pool2d_grad_fp32_vs_fp64),
        cmocka_unit_test(test_batch_norm_grad_fd),
        cmocka_unit_test(test_batch_norm_grad_needs_saved_stats),
        cmocka_unit_test(test_batch_norm_grad_fp32_vs_fp64),
        cmocka_unit_test(test_grad_shape_errors),
        cmocka_unit_test(test_grad_steady_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
