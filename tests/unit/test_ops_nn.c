/* tests/unit/test_ops_nn.c — conv2d, pool2d and batch_norm kernels against
 * naive reference loops written here (double precision, padded-buffer
 * formulation, independent of ops/nn.c), on seeded random inputs with odd
 * shapes; expected output sizes are worked out by hand in each case.
 * Also: shape/attr errors, in-place running statistics, and that a steady
 * state run creates no oneDNN primitive and allocates nothing. */
#include "tests/unit/op_test_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/dnnl_util.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double *rand_vals(int64_t n, uint64_t seed, double lo, double hi) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (double)(rng_next(&seed) >> 11) / 9007199254740992.0;
    return v;
}

/* Rounds through the tensor's dtype so the reference sees what the kernel sees. */
static pe_tensor *mk_tensor(pe_dtype dt, int nd, const int64_t *dims, double *vals) {
    pe_tensor *t = tu_tensor(dt, nd, dims, vals);
    int64_t n = pe_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) vals[i] = tu_get(t, i);
    return t;
}

static double tol_for(pe_dtype dt) { return dt == PE_DTYPE_FP64 ? 1e-11 : 2e-5; }

static void set_pair(pe_op *op, const char *name, int64_t a, int64_t b) {
    assert_int_equal(pe_op_set_ints(op, name, (int64_t[]){a, b}, 2), PE_OK);
}

/* ---- conv2d ------------------------------------------------------------- */

typedef struct conv_case {
    const char *what;
    pe_dtype dt;
    int64_t n, c, h, w, m, kh, kw, groups;
    int64_t sh, sw, dh, dw;     /* attrs */
    int n_pad;
    int64_t pad[4];
    const char *alg;            /* padding_algorithm (NULL: default) */
    bool bias;
    int64_t oh, ow;             /* expected output size, by hand */
    int64_t rpt, rpb, rpl, rpr; /* effective paddings for the reference, by hand */
    int64_t rdh, rdw;           /* effective dilations for the reference */
} conv_case;

/* y[n][m][oy][ox] = b[m] + sum over the group's channels and the window of the
 * zero-padded input; written over an explicitly padded copy of x. */
static void ref_conv(const conv_case *k, const double *x, const double *w, const double *b, double *y) {
    const int64_t hp = k->h + k->rpt + k->rpb, wp = k->w + k->rpl + k->rpr;
    const int64_t cg = k->c / k->groups, mg = k->m / k->groups;
    double *xp = calloc((size_t)(k->n * k->c * hp * wp), sizeof *xp);
    assert_non_null(xp);
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t c = 0; c < k->c; c++)
            for (int64_t i = 0; i < k->h; i++)
                for (int64_t j = 0; j < k->w; j++)
                    xp[((n * k->c + c) * hp + i + k->rpt) * wp + j + k->rpl] = x[((n * k->c + c) * k->h + i) * k->w + j];
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t m = 0; m < k->m; m++)
            for (int64_t oy = 0; oy < k->oh; oy++)
                for (int64_t ox = 0; ox < k->ow; ox++) {
                    double acc = b ? b[m] : 0;
                    int64_t g = m / mg;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t a = 0; a < k->kh; a++)
                            for (int64_t bb = 0; bb < k->kw; bb++) {
                                int64_t py = oy * k->sh + a * k->rdh, px = ox * k->sw + bb * k->rdw;
                                assert_true(py < hp && px < wp);
                                acc += xp[((n * k->c + g * cg + ci) * hp + py) * wp + px] *
                                       w[((m * cg + ci) * k->kh + a) * k->kw + bb];
                            }
                    y[((n * k->m + m) * k->oh + oy) * k->ow + ox] = acc;
                }
    free(xp);
}

static pe_op *conv_program(pe_program *p, const conv_case *k, pe_tensor *x, pe_tensor *f, pe_tensor *b) {
    tu_declare(p, "x", x);
    tu_declare(p, "w", f);
    if (b) tu_declare(p, "b", b);
    pe_block_add_var(&p->blocks[0], "y", k->dt, 4, (int64_t[]){k->n, k->m, k->oh, k->ow});
    pe_op *op = pe_block_add_op(&p->blocks[0], "conv2d");
    pe_op_add_input(op, "Input", "x");
    pe_op_add_input(op, "Filter", "w");
    if (b) pe_op_add_input(op, "Bias", "b");
    pe_op_add_output(op, "Output", "y");
    set_pair(op, "strides", k->sh, k->sw);
    set_pair(op, "dilations", k->dh, k->dw);
    assert_int_equal(pe_op_set_ints(op, "paddings", k->pad, k->n_pad), PE_OK);
    pe_op_set_int(op, "groups", k->groups);
    if (k->alg) pe_op_set_string(op, "padding_algorithm", k->alg);
    return op;
}

static void run_conv_case(const conv_case *k, uint64_t seed) {
    print_message("conv2d case: %s\n", k->what);
    const int64_t xd[4] = {k->n, k->c, k->h, k->w}, wd[4] = {k->m, k->c / k->groups, k->kh, k->kw};
    const int64_t nx = k->n * k->c * k->h * k->w, nw = wd[0] * wd[1] * wd[2] * wd[3], ny = k->n * k->m * k->oh * k->ow;
    double *xv = rand_vals(nx, seed, -1, 1), *wv = rand_vals(nw, seed + 1, -1, 1), *bv = rand_vals(k->m, seed + 2, -1, 1);
    double *want = malloc((size_t)ny * sizeof *want);
    pe_tensor *x = mk_tensor(k->dt, 4, xd, xv), *f = mk_tensor(k->dt, 4, wd, wv);
    pe_tensor *b = k->bias ? mk_tensor(k->dt, 1, &k->m, bv) : NULL;
    ref_conv(k, xv, wv, k->bias ? bv : NULL, want);

    pe_program *p = pe_program_new();
    conv_program(p, k, x, f, b);
    pe_feed feeds[3] = {{"x", x}, {"w", f}, {"b", b}};
    pe_tensor *y = pe_tensor_new();
    assert_int_equal(tu_run(p, feeds, b ? 3 : 2, (const char *[]){"y"}, 1, &y), PE_OK);
    tu_assert_dims(y, 4, (int64_t[]){k->n, k->m, k->oh, k->ow});
    assert_int_equal(y->dtype, k->dt);
    tu_assert_close(y, want, ny, tol_for(k->dt));

    pe_tensor_free(y);
    pe_program_free(p);
    pe_tensor_free(x);
    pe_tensor_free(f);
    pe_tensor_free(b);
    free(xv); free(wv); free(bv); free(want);
}

static const conv_case conv_cases[] = {
    /* 3x3, pad 1: H 7 -> 7, W 5 -> 5 */
    {"3x3 pad 1 bias", PE_DTYPE_FP32, 2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 2, {1, 1}, NULL, true, 7, 5, 1, 1, 1, 1, 1, 1},
    /* depthwise x2, k 3x2, stride [2,1], dil [2,1], pad [1,0,2,1]:
     * H: extent 2*2+1=5, (7+1+0-5)/2+1 = 2; W: extent 2, (5+2+1-2)/1+1 = 7 */
    {"depthwise asym pad dilated", PE_DTYPE_FP32, 2, 3, 7, 5, 6, 3, 2, 3, 2, 1, 2, 1, 4, {1, 0, 2, 1}, NULL, true, 2, 7,
     1, 0, 2, 1, 2, 1},
    /* SAME, stride 2, k 3 (dilation 2 is reset to 1): H 7 -> 4, pad sum 3*2+3-7=2 -> 1,1;
     * W 5 -> 3, pad sum 2*2+3-5=2 -> 1,1 */
    {"SAME stride 2", PE_DTYPE_FP32, 2, 3, 7, 5, 4, 3, 3, 1, 2, 2, 2, 2, 2, {0, 0}, "SAME", false, 4, 3, 1, 1, 1, 1, 1, 1},
    /* SAME, stride 1, k 2x4: pad sums 1 and 3 -> [0,1] and [1,2] */
    {"SAME even kernel", PE_DTYPE_FP32, 1, 2, 6, 5, 3, 2, 4, 1, 1, 1, 1, 1, 2, {3, 3}, "SAME", true, 6, 5, 0, 1, 1, 2, 1, 1},
    /* VALID ignores paddings: 7-3+1 = 5, 5-3+1 = 3 */
    {"VALID", PE_DTYPE_FP32, 2, 3, 7, 5, 2, 3, 3, 1, 1, 1, 1, 1, 2, {5, 5}, "VALID", true, 5, 3, 0, 0, 0, 0, 1, 1},
    /* groups 3, C 6 -> M 3, stride 3: (7+2-3)/3+1 = 3, (5+2-3)/3+1 = 2 */
    {"groups 3 stride 3", PE_DTYPE_FP32, 2, 6, 7, 5, 3, 3, 3, 3, 3, 3, 1, 1, 2, {1, 1}, NULL, false, 3, 2, 1, 1, 1, 1, 1, 1},
    /* wider layers (oneDNN blocked layouts + reorders): 12x12 pad 1 -> 12x12 */
    {"C16 M32 3x3", PE_DTYPE_FP32, 2, 16, 12, 11, 32, 3, 3, 1, 1, 1, 1, 1, 2, {1, 1}, NULL, true, 12, 11, 1, 1, 1, 1, 1, 1},
    {"depthwise C16 stride 2", PE_DTYPE_FP32, 2, 16, 12, 11, 16, 3, 3, 16, 2, 2, 1, 1, 2, {1, 1}, NULL, true, 6, 6, 1, 1,
     1, 1, 1, 1},
    /* 1x1, stride 2, no pad: (7-1)/2+1 = 4, (5-1)/2+1 = 3 */
    {"1x1 stride 2", PE_DTYPE_FP32, 3, 8, 7, 5, 5, 1, 1, 1, 2, 2, 1, 1, 2, {0, 0}, NULL, true, 4, 3, 0, 0, 0, 0, 1, 1},
    /* float64: direct loops */
    {"fp64 3x3 pad 1 bias", PE_DTYPE_FP64, 2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 2, {1, 1}, NULL, true, 7, 5, 1, 1, 1, 1, 1,
     1},
    {"fp64 depthwise asym pad dilated", PE_DTYPE_FP64, 2, 3, 7, 5, 6, 3, 2, 3, 2, 1, 2, 1, 4, {1, 0, 2, 1}, NULL, true, 2,
     7, 1, 0, 2, 1, 2, 1},
    {"fp64 SAME stride 2", PE_DTYPE_FP64, 2, 3, 7, 5, 4, 3, 3, 1, 2, 2, 2, 2, 2, {0, 0}, "SAME", false, 4, 3, 1, 1, 1, 1,
     1, 1},
};

static void test_conv2d_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) run_conv_case(&conv_cases[i], 100 + i);
}

/* Expects the single-op program to fail with st and a message containing `needle`. */
static void expect_fail(pe_program *p, const pe_feed *feeds, int n_feeds, const char *fetch, pe_status st,
                        const char *needle) {
    pe_tensor *y = pe_tensor_new();
    pe_status got = tu_run(p, feeds, n_feeds, &fetch, 1, &y);
    if (got != st || !strstr(pe_last_error(), needle))
        fail_msg("expected %s with '%s', got %s: %s", pe_status_name(st), needle, pe_status_name(got), pe_last_error());
    pe_tensor_free(y);
}

static void conv_error(const conv_case *k, int64_t fc, const char *df, pe_status st, const char *needle) {
    const int64_t xd[4] = {k->n, k->c, k->h, k->w}, wd[4] = {k->m, fc, k->kh, k->kw};
    pe_tensor *x = tu_tensor(k->dt, 4, xd, NULL), *f = tu_tensor(k->dt, 4, wd, NULL);
    pe_program *p = pe_program_new();
    pe_op *op = conv_program(p, k, x, f, NULL);
    if (df) pe_op_set_string(op, "data_format", df);
    expect_fail(p, (pe_feed[]){{"x", x}, {"w", f}}, 2, "y", st, needle);
    pe_program_free(p);
    pe_tensor_free(x);
    pe_tensor_free(f);
}

static void test_conv2d_errors(void **state) {
    (void)state;
    conv_case k = conv_cases[0];
    /* Filter dim 1 = 2 but C = 3 with groups 1 */
    conv_error(&k, 2, NULL, PE_ERR_INVALID, "channel mismatch");
    /* groups 2 does not divide C 3 */
    k.groups = 2;
    conv_error(&k, 1, NULL, PE_ERR_INVALID, "not divisible by groups=2");
    /* groups 2 divides C 4 but not M 3 */
    k.c = 4; k.m = 3;
    conv_error(&k, 2, NULL, PE_ERR_INVALID, "M=3 output channels, not divisible");
    /* 9x9 kernel on a 7x5 plane padded by 1 */
    k = conv_cases[0];
    k.kh = 9; k.kw = 9;
    conv_error(&k, 3, NULL, PE_ERR_INVALID, "larger than the padded Input");
    /* dilation 5 makes a 3x3 kernel span 11 rows > 7 + 2 */
    k = conv_cases[0];
    k.dh = 5;
    conv_error(&k, 3, NULL, PE_ERR_INVALID, "dilated extent 11x3");
    k = conv_cases[0];
    conv_error(&k, 3, "NDHWC", PE_ERR_UNSUPPORTED, "data_format 'NDHWC' is not supported (NCHW or NHWC)");
    k.n_pad = 3;
    conv_error(&k, 3, NULL, PE_ERR_INVALID, "paddings must have 2 values");
    k = conv_cases[0];
    k.alg = "FULL";
    conv_error(&k, 3, NULL, PE_ERR_INVALID, "padding_algorithm");
    k = conv_cases[0];
    k.sh = 0;
    conv_error(&k, 3, NULL, PE_ERR_INVALID, "strides");
    /* Filter of rank 3 */
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 4, (int64_t[]){1, 3, 5, 5}, NULL);
    pe_tensor *f = tu_tensor(PE_DTYPE_FP32, 3, (int64_t[]){4, 3, 3}, NULL);
    pe_program *p = pe_program_new();
    tu_declare(p, "x", x);
    tu_declare(p, "w", f);
    pe_block_add_var(&p->blocks[0], "y", PE_DTYPE_FP32, 4, (int64_t[]){1, 4, 3, 3});
    pe_op *op = pe_block_add_op(&p->blocks[0], "conv2d");
    pe_op_add_input(op, "Input", "x");
    pe_op_add_input(op, "Filter", "w");
    pe_op_add_output(op, "Output", "y");
    expect_fail(p, (pe_feed[]){{"x", x}, {"w", f}}, 2, "y", PE_ERR_INVALID, "Filter 'w' must be 4-D");
    pe_program_free(p);
    pe_tensor_free(x);
    pe_tensor_free(f);
}

/* ---- pool2d ------------------------------------------------------------- */

typedef struct pool_case {
    const char *what;
    pe_dtype dt;
    const char *type;
    int64_t n, c, h, w, kh, kw, sh, sw;
    int n_pad;
    int64_t pad[4];
    const char *alg;
    bool global, ceil_mode, exclusive, adaptive;
    int64_t oh, ow;             /* by hand */
    int64_t rkh, rkw, rpt, rpl; /* effective window and top/left padding for the reference */
} pool_case;

/* Paddle's pool2d: window rows [oy*sh - pt, +kh) clipped to the input (padding
 * never enters max; avg divides by the clipped count when exclusive, else by
 * kh*kw); adaptive windows [floor(i*H/oh), ceil((i+1)*H/oh)). An empty
 * window gives 0 for avg and the lowest finite value for max. */
static void ref_pool(const pool_case *k, const double *x, double *y) {
    const bool is_max = !strcmp(k->type, "max");
    for (int64_t nc = 0; nc < k->n * k->c; nc++)
        for (int64_t oy = 0; oy < k->oh; oy++)
            for (int64_t ox = 0; ox < k->ow; ox++) {
                int64_t y0, y1, x0, x1;
                if (k->adaptive) {
                    y0 = (int64_t)floor((double)(oy * k->h) / (double)k->oh);
                    y1 = (int64_t)ceil((double)((oy + 1) * k->h) / (double)k->oh);
                    x0 = (int64_t)floor((double)(ox * k->w) / (double)k->ow);
                    x1 = (int64_t)ceil((double)((ox + 1) * k->w) / (double)k->ow);
                } else {
                    y0 = oy * k->sh - k->rpt; y1 = y0 + k->rkh;
                    x0 = ox * k->sw - k->rpl; x1 = x0 + k->rkw;
                }
                double acc = is_max ? -(k->dt == PE_DTYPE_FP64 ? 1.7976931348623157e308 : 3.4028234663852886e38) : 0;
                int64_t cnt = 0;
                for (int64_t i = y0; i < y1; i++)
                    for (int64_t j = x0; j < x1; j++) {
                        if (i < 0 || i >= k->h || j < 0 || j >= k->w) continue;
                        double v = x[(nc * k->h + i) * k->w + j];
                        if (is_max) acc = v > acc ? v : acc;
                        else acc += v;
                        cnt++;
                    }
                if (!is_max) {
                    int64_t div = (k->exclusive || k->adaptive) ? cnt : k->rkh * k->rkw;
                    acc = div ? acc / (double)div : 0;
                }
                y[(nc * k->oh + oy) * k->ow + ox] = acc;
            }
}

static pe_op *pool_program(pe_program *p, const pool_case *k, pe_tensor *x) {
    tu_declare(p, "x", x);
    pe_block_add_var(&p->blocks[0], "y", k->dt, 4, (int64_t[]){k->n, k->c, k->oh, k->ow});
    pe_op *op = pe_block_add_op(&p->blocks[0], "pool2d");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "y");
    pe_op_set_string(op, "pooling_type", k->type);
    set_pair(op, "ksize", k->kh, k->kw);
    set_pair(op, "strides", k->sh, k->sw);
    assert_int_equal(pe_op_set_ints(op, "paddings", k->pad, k->n_pad), PE_OK);
    if (k->alg) pe_op_set_string(op, "padding_algorithm", k->alg);
    pe_op_set_bool(op, "global_pooling", k->global);
    pe_op_set_bool(op, "ceil_mode", k->ceil_mode);
    pe_op_set_bool(op, "exclusive", k->exclusive);
    pe_op_set_bool(op, "adaptive", k->adaptive);
    return op;
}

static void run_pool_case(const pool_case *k, uint64_t seed) {
    print_message("pool2d case: %s\n", k->what);
    const int64_t xd[4] = {k->n, k->c, k->h, k->w};
    const int64_t nx = k->n * k->c * k->h * k->w, ny = k->n * k->c * k->oh * k->ow;
    double *xv = rand_vals(nx, seed, -2, 2), *want = malloc((size_t)ny * sizeof *want);
    pe_tensor *x = mk_tensor(k->dt, 4, xd, xv);
    ref_pool(k, xv, want);
    pe_program *p = pe_program_new();
    pool_program(p, k, x);
    pe_tensor *y = pe_tensor_new();
    assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}}, 1, (const char *[]){"y"}, 1, &y), PE_OK);
    tu_assert_dims(y, 4, (int64_t[]){k->n, k->c, k->oh, k->ow});
    tu_assert_close(y, want, ny, tol_for(k->dt));
    pe_tensor_free(y);
    pe_program_free(p);
    pe_tensor_free(x);
    free(xv);
    free(want);
}

static const pool_case pool_cases[] = {
    /* max 3x3 s2 p1: (7+2-3)/2+1 = 4, (5+2-3)/2+1 = 3 */
    {"max 3x3 s2 p1", PE_DTYPE_FP32, "max", 2, 3, 7, 5, 3, 3, 2, 2, 2, {1, 1}, NULL, false, false, true, false, 4, 3, 3,
     3, 1, 1},
    /* avg 2x3 s2, pad [1,0,0,2]: (7+1-2)/2+1 = 4, (5+2-3)/2+1 = 3 */
    {"avg exclusive asym pad", PE_DTYPE_FP32, "avg", 2, 3, 7, 5, 2, 3, 2, 2, 4, {1, 0, 0, 2}, NULL, false, false, true,
     false, 4, 3, 2, 3, 1, 0},
    {"avg include asym pad", PE_DTYPE_FP32, "avg", 2, 3, 7, 5, 2, 3, 2, 2, 4, {1, 0, 0, 2}, NULL, false, false, false,
     false, 4, 3, 2, 3, 1, 0},
    {"max asym pad", PE_DTYPE_FP32, "max", 2, 3, 7, 5, 2, 3, 2, 2, 4, {1, 0, 0, 2}, NULL, false, false, true, false, 4,
     3, 2, 3, 1, 0},
    /* 2x2 s2: floor 3x2, ceil (7-2+1)/2+1 = 4, (5-2+1)/2+1 = 3 */
    {"max floor mode", PE_DTYPE_FP32, "max", 2, 3, 7, 5, 2, 2, 2, 2, 2, {0, 0}, NULL, false, false, true, false, 3, 2, 2,
     2, 0, 0},
    {"max ceil mode", PE_DTYPE_FP32, "max", 2, 3, 7, 5, 2, 2, 2, 2, 2, {0, 0}, NULL, false, true, true, false, 4, 3, 2,
     2, 0, 0},
    {"avg include ceil mode", PE_DTYPE_FP32, "avg", 2, 3, 7, 5, 2, 2, 2, 2, 2, {0, 0}, NULL, false, true, false, false,
     4, 3, 2, 2, 0, 0},
    {"avg exclusive ceil mode", PE_DTYPE_FP32, "avg", 2, 3, 7, 5, 2, 2, 2, 2, 2, {0, 0}, NULL, false, true, true, false,
     4, 3, 2, 2, 0, 0},
    /* ceil mode whose last window lies in the padding: H 5, k 2, s 3, p 1:
     * (5+2-2+2)/3+1 = 3, last window rows [5, 7) -> empty */
    {"avg ceil empty window", PE_DTYPE_FP32, "avg", 1, 2, 5, 5, 2, 2, 3, 3, 2, {1, 1}, NULL, false, true, true, false, 3,
     3, 2, 2, 1, 1},
    {"max ceil empty window", PE_DTYPE_FP32, "max", 1, 2, 5, 5, 2, 2, 3, 3, 2, {1, 1}, NULL, false, true, true, false, 3,
     3, 2, 2, 1, 1},
    /* global: the whole 7x5 plane, paddings ignored */
    {"global avg", PE_DTYPE_FP32, "avg", 2, 3, 7, 5, 2, 2, 1, 1, 2, {1, 1}, NULL, true, false, false, false, 1, 1, 7, 5,
     0, 0},
    {"global max", PE_DTYPE_FP32, "max", 2, 3, 7, 5, 2, 2, 1, 1, 2, {1, 1}, NULL, true, false, true, false, 1, 1, 7, 5,
     0, 0},
    /* adaptive: output = ksize; windows floor/ceil, overlapping when 7 -> 4 */
    {"adaptive avg 3x2", PE_DTYPE_FP32, "avg", 2, 3, 7, 5, 3, 2, 1, 1, 2, {0, 0}, NULL, false, false, true, true, 3, 2, 0,
     0, 0, 0},
    {"adaptive max 4x4", PE_DTYPE_FP32, "max", 2, 3, 7, 5, 4, 4, 1, 1, 2, {0, 0}, NULL, false, false, true, true, 4, 4, 0,
     0, 0, 0},
    /* SAME, k 3, s 2: H 7 -> 4 (pad 1,1), W 5 -> 3 (pad 1,1) */
    {"avg SAME", PE_DTYPE_FP32, "avg", 2, 3, 7, 5, 3, 3, 2, 2, 2, {0, 0}, "SAME", false, false, true, false, 4, 3, 3, 3,
     1, 1},
    /* VALID: (7-3)/2+1 = 3, (5-3)/2+1 = 2 */
    {"max VALID", PE_DTYPE_FP32, "max", 2, 3, 7, 5, 3, 3, 2, 2, 2, {2, 2}, "VALID", false, false, true, false, 3, 2, 3, 3,
     0, 0},
    /* a bigger plane (oneDNN jit paths) */
    {"max 3x3 s2 p1 C16", PE_DTYPE_FP32, "max", 2, 16, 17, 13, 3, 3, 2, 2, 2, {1, 1}, NULL, false, false, true, false,
     9, 7, 3, 3, 1, 1},
    {"avg 3x3 s1 p1 C16", PE_DTYPE_FP32, "avg", 2, 16, 17, 13, 3, 3, 1, 1, 2, {1, 1}, NULL, false, false, true, false,
     17, 13, 3, 3, 1, 1},
    /* float64 loops */
    {"fp64 avg include asym pad", PE_DTYPE_FP64, "avg", 2, 3, 7, 5, 2, 3, 2, 2, 4, {1, 0, 0, 2}, NULL, false, false,
     false, false, 4, 3, 2, 3, 1, 0},
    {"fp64 max ceil mode", PE_DTYPE_FP64, "max", 2, 3, 7, 5, 2, 2, 2, 2, 2, {0, 0}, NULL, false, true, true, false, 4, 3,
     2, 2, 0, 0},
    {"fp64 adaptive avg 3x2", PE_DTYPE_FP64, "avg", 2, 3, 7, 5, 3, 2, 1, 1, 2, {0, 0}, NULL, false, false, true, true, 3,
     2, 0, 0, 0, 0},
    {"fp64 global max", PE_DTYPE_FP64, "max", 2, 3, 7, 5, 2, 2, 1, 1, 2, {1, 1}, NULL, true, false, true, false, 1, 1,
     7, 5, 0, 0},
};

static void test_pool2d_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) run_pool_case(&pool_cases[i], 300 + i);
}

static void pool_error(const pool_case *k, const char *df, pe_status st, const char *needle) {
    pe_tensor *x = tu_tensor(k->dt, 4, (int64_t[]){k->n, k->c, k->h, k->w}, NULL);
    pe_program *p = pe_program_new();
    pe_op *op = pool_program(p, k, x);
    if (df) pe_op_set_string(op, "data_format", df);
    expect_fail(p, (pe_feed[]){{"x", x}}, 1, "y", st, needle);
    pe_program_free(p);
    pe_tensor_free(x);
}

static void test_pool2d_errors(void **state) {
    (void)state;
    pool_case k = pool_cases[0];
    k.kh = 10; /* 10 > 7 + 1 + 1 */
    pool_error(&k, NULL, PE_ERR_INVALID, "pool window 10x3 does not fit the padded X 'x' [2, 3, 7, 5]");
    k = pool_cases[0];
    k.type = "sum";
    pool_error(&k, NULL, PE_ERR_INVALID, "pooling_type");
    k = pool_cases[0];
    pool_error(&k, "NDHWC", PE_ERR_UNSUPPORTED, "data_format 'NDHWC' is not supported (NCHW or NHWC)");
    k.adaptive = true;
    k.kh = 0;
    pool_error(&k, NULL, PE_ERR_INVALID, "ksize");
    k = pool_cases[0];
    k.n_pad = 1;
    pool_error(&k, NULL, PE_ERR_INVALID, "paddings");
}

/* ---- batch_norm --------------------------------------------------------- */

typedef struct bn_case {
    const char *what;
    pe_dtype dt;
    int nd;
    int64_t dims[5];
    bool is_test, use_global;
    double eps, momentum;
} bn_case;

typedef struct bn_ref {
    double *y, *mean_out, *var_out, *saved_mean, *saved_var;
} bn_ref;

/* Paddle: training normalises with the batch mean and biased batch variance;
 * running stats move by (1 - momentum) toward them; SavedVariance = 1/std. */
static void ref_bn(const bn_case *k, const double *x, const double *scale, const double *bias, const double *mean,
                   const double *var, bn_ref *r) {
    const int64_t n = k->dims[0], c = k->dims[1];
    int64_t s = 1;
    for (int i = 2; i < k->nd; i++) s *= k->dims[i];
    const bool global = k->is_test || k->use_global;
    for (int64_t ch = 0; ch < c; ch++) {
        double mu = mean[ch], v = var[ch];
        if (!global) {
            double sum = 0, sq = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < s; j++) sum += x[(i * c + ch) * s + j];
            mu = sum / (double)(n * s);
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < s; j++) sq += (x[(i * c + ch) * s + j] - mu) * (x[(i * c + ch) * s + j] - mu);
            v = sq / (double)(n * s);
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < s; j++)
                r->y[(i * c + ch) * s + j] = (x[(i * c + ch) * s + j] - mu) / sqrt(v + k->eps) * scale[ch] + bias[ch];
        r->mean_out[ch] = global ? mean[ch] : k->momentum * mean[ch] + (1 - k->momentum) * mu;
        r->var_out[ch] = global ? var[ch] : k->momentum * var[ch] + (1 - k->momentum) * v;
        r->saved_mean[ch] = mu;
        r->saved_var[ch] = 1 / sqrt(v + k->eps);
    }
}

typedef struct bn_io {
    double *x, *scale, *bias, *mean, *var;
    pe_tensor *tx, *tscale, *tbias, *tmean, *tvar;
} bn_io;

static void bn_io_init(bn_io *io, const bn_case *k, uint64_t seed) {
    const int64_t c = k->dims[1];
    int64_t nx = 1;
    for (int i = 0; i < k->nd; i++) nx *= k->dims[i];
    io->x = rand_vals(nx, seed, -3, 5);
    io->scale = rand_vals(c, seed + 1, 0.5, 1.5);
    io->bias = rand_vals(c, seed + 2, -1, 1);
    io->mean = rand_vals(c, seed + 3, -1, 1);
    io->var = rand_vals(c, seed + 4, 0.5, 2);
    io->tx = mk_tensor(k->dt, k->nd, k->dims, io->x);
    io->tscale = mk_tensor(k->dt, 1, &c, io->scale);
    io->tbias = mk_tensor(k->dt, 1, &c, io->bias);
    io->tmean = mk_tensor(k->dt, 1, &c, io->mean);
    io->tvar = mk_tensor(k->dt, 1, &c, io->var);
}

static void bn_io_free(bn_io *io) {
    free(io->x); free(io->scale); free(io->bias); free(io->mean); free(io->var);
    pe_tensor_free(io->tx); pe_tensor_free(io->tscale); pe_tensor_free(io->tbias);
    pe_tensor_free(io->tmean); pe_tensor_free(io->tvar);
}

/* batch_norm op over x/scale/bias/mean/var; outputs named by `outs` (MeanOut,
 * VarianceOut, SavedMean, SavedVariance; NULL = not connected). */
static pe_op *bn_program(pe_program *p, const bn_case *k, const bn_io *io, const char *const outs[4]) {
    tu_declare(p, "x", io->tx);
    tu_declare(p, "scale", io->tscale);
    tu_declare(p, "bias", io->tbias);
    pe_var *vm = tu_declare(p, "mean", io->tmean);
    pe_var *vv = tu_declare(p, "var", io->tvar);
    vm->persistable = vv->persistable = true;
    pe_block_add_var(&p->blocks[0], "y", k->dt, k->nd, k->dims);
    static const char *const slots[4] = {"MeanOut", "VarianceOut", "SavedMean", "SavedVariance"};
    pe_op *op = pe_block_add_op(&p->blocks[0], "batch_norm");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Scale", "scale");
    pe_op_add_input(op, "Bias", "bias");
    pe_op_add_input(op, "Mean", "mean");
    pe_op_add_input(op, "Variance", "var");
    pe_op_add_output(op, "Y", "y");
    for (int i = 0; i < 4; i++) {
        if (!outs[i]) continue;
        if (!pe_program_find_var(p, 0, outs[i])) pe_block_add_var(&p->blocks[0], outs[i], k->dt, 1, &k->dims[1]);
        pe_op_add_output(op, slots[i], outs[i]);
    }
    pe_op_set_float(op, "epsilon", k->eps);
    pe_op_set_float(op, "momentum", k->momentum);
    pe_op_set_bool(op, "is_test", k->is_test);
    pe_op_set_bool(op, "use_global_stats", k->use_global);
    return op;
}

static int64_t numel_of(const bn_case *k) {
    int64_t n = 1;
    for (int i = 0; i < k->nd; i++) n *= k->dims[i];
    return n;
}

/* Separate MeanOut/VarianceOut vars: every output against the reference. */
static void run_bn_case(const bn_case *k, uint64_t seed) {
    print_message("batch_norm case: %s\n", k->what);
    const int64_t c = k->dims[1], nx = numel_of(k);
    bn_io io;
    bn_io_init(&io, k, seed);
    bn_ref r = {malloc((size_t)nx * sizeof(double)), malloc((size_t)c * sizeof(double)),
                malloc((size_t)c * sizeof(double)), malloc((size_t)c * sizeof(double)),
                malloc((size_t)c * sizeof(double))};
    ref_bn(k, io.x, io.scale, io.bias, io.mean, io.var, &r);
    pe_program *p = pe_program_new();
    bn_program(p, k, &io, (const char *const[]){"mo", "vo", "sm", "sv"});
    const char *fetch[5] = {"y", "mo", "vo", "sm", "sv"};
    pe_tensor *out[5];
    for (int i = 0; i < 5; i++) out[i] = pe_tensor_new();
    pe_feed feeds[5] = {{"x", io.tx}, {"scale", io.tscale}, {"bias", io.tbias}, {"mean", io.tmean}, {"var", io.tvar}};
    assert_int_equal(tu_run(p, feeds, 5, fetch, 5, out), PE_OK);
    const double tol = k->dt == PE_DTYPE_FP64 ? 1e-11 : 1e-5;
    tu_assert_dims(out[0], k->nd, k->dims);
    tu_assert_close(out[0], r.y, nx, tol);
    tu_assert_close(out[1], r.mean_out, c, tol);
    tu_assert_close(out[2], r.var_out, c, tol);
    tu_assert_close(out[3], r.saved_mean, c, tol);
    tu_assert_close(out[4], r.saved_var, c, tol);
    for (int i = 0; i < 5; i++) pe_tensor_free(out[i]);
    pe_program_free(p);
    bn_io_free(&io);
    free(r.y); free(r.mean_out); free(r.var_out); free(r.saved_mean); free(r.saved_var);
}

static const bn_case bn_cases[] = {
    {"train NCHW", PE_DTYPE_FP32, 4, {2, 3, 7, 5}, false, false, 1e-5, 0.9},
    {"test NCHW", PE_DTYPE_FP32, 4, {2, 3, 7, 5}, true, false, 1e-5, 0.9},
    {"use_global_stats while training", PE_DTYPE_FP32, 4, {2, 3, 7, 5}, false, true, 1e-3, 0.9},
    {"train [N, C]", PE_DTYPE_FP32, 2, {5, 3}, false, false, 1e-5, 0.8},
    {"test [N, C]", PE_DTYPE_FP32, 2, {5, 3}, true, false, 1e-5, 0.8},
    {"train rank 3", PE_DTYPE_FP32, 3, {3, 4, 9}, false, false, 1e-4, 0.99},
    {"train C40", PE_DTYPE_FP32, 4, {4, 40, 6, 5}, false, false, 1e-5, 0.9},
    {"fp64 train NCHW", PE_DTYPE_FP64, 4, {2, 3, 7, 5}, false, false, 1e-5, 0.9},
    {"fp64 test NCHW", PE_DTYPE_FP64, 4, {2, 3, 7, 5}, true, false, 1e-5, 0.9},
    {"fp64 train [N, C]", PE_DTYPE_FP64, 2, {5, 3}, false, false, 1e-5, 0.8},
};

static void test_batch_norm_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++) run_bn_case(&bn_cases[i], 500 + i);
}

/* MeanOut/VarianceOut are Mean/Variance (Paddle's in-place form) and Saved*
 * are not connected: two training steps move the running stats twice. */
static void run_bn_inplace(pe_dtype dt) {
    const bn_case k = {"in-place", dt, 4, {2, 3, 7, 5}, false, false, 1e-5, 0.9};
    const int64_t c = 3, nx = numel_of(&k);
    bn_io io;
    bn_io_init(&io, &k, 77);
    bn_ref r1 = {malloc((size_t)nx * sizeof(double)), malloc(3 * sizeof(double)), malloc(3 * sizeof(double)),
                 malloc(3 * sizeof(double)), malloc(3 * sizeof(double))};
    bn_ref r2 = {malloc((size_t)nx * sizeof(double)), malloc(3 * sizeof(double)), malloc(3 * sizeof(double)),
                 malloc(3 * sizeof(double)), malloc(3 * sizeof(double))};
    ref_bn(&k, io.x, io.scale, io.bias, io.mean, io.var, &r1);
    ref_bn(&k, io.x, io.scale, io.bias, r1.mean_out, r1.var_out, &r2);

    pe_program *p = pe_program_new();
    bn_program(p, &k, &io, (const char *const[]){"mean", "var", NULL, NULL});
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_tensor_copy(pe_scope_var(scope, "mean"), io.tmean, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_tensor_copy(pe_scope_var(scope, "var"), io.tvar, pe_place_cpu(0)), PE_OK);
    pe_feed feeds[3] = {{"x", io.tx}, {"scale", io.tscale}, {"bias", io.tbias}};
    const char *fetch[3] = {"y", "mean", "var"};
    pe_tensor *out[3] = {pe_tensor_new(), pe_tensor_new(), pe_tensor_new()};
    const double tol = dt == PE_DTYPE_FP64 ? 1e-11 : 1e-5;
    assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 3, fetch, 3, out), PE_OK);
    tu_assert_close(out[0], r1.y, nx, tol);
    tu_assert_close(out[1], r1.mean_out, c, tol);
    tu_assert_close(out[2], r1.var_out, c, tol);
    assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 3, fetch, 3, out), PE_OK);
    tu_assert_close(out[0], r2.y, nx, tol); /* same batch: same Y */
    tu_assert_close(out[1], r2.mean_out, c, tol);
    tu_assert_close(out[2], r2.var_out, c, tol);
    for (int i = 0; i < 3; i++) pe_tensor_free(out[i]);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(p);
    bn_io_free(&io);
    bn_ref *rs[2] = {&r1, &r2};
    for (int i = 0; i < 2; i++) {
        free(rs[i]->y); free(rs[i]->mean_out); free(rs[i]->var_out); free(rs[i]->saved_mean); free(rs[i]->saved_var);
    }
}

static void test_batch_norm_inplace_running_stats(void **state) {
    (void)state;
    run_bn_inplace(PE_DTYPE_FP32);
    run_bn_inplace(PE_DTYPE_FP64);
}

/* N*H*W == 1 in training: Paddle passes X through and keeps the stats. */
static void test_batch_norm_single_value(void **state) {
    (void)state;
    const bn_case k = {"single", PE_DTYPE_FP32, 4, {1, 3, 1, 1}, false, false, 1e-5, 0.9};
    bn_io io;
    bn_io_init(&io, &k, 9);
    pe_program *p = pe_program_new();
    bn_program(p, &k, &io, (const char *const[]){"mo", "vo", "sm", "sv"});
    const char *fetch[4] = {"y", "mo", "vo", "sm"};
    pe_tensor *out[4] = {pe_tensor_new(), pe_tensor_new(), pe_tensor_new(), pe_tensor_new()};
    pe_feed feeds[5] = {{"x", io.tx}, {"scale", io.tscale}, {"bias", io.tbias}, {"mean", io.tmean}, {"var", io.tvar}};
    assert_int_equal(tu_run(p, feeds, 5, fetch, 4, out), PE_OK);
    tu_assert_close(out[0], io.x, 3, 0);
    tu_assert_close(out[1], io.mean, 3, 0);
    tu_assert_close(out[2], io.var, 3, 0);
    tu_assert_close(out[3], (double[]){0, 0, 0}, 3, 0);
    for (int i = 0; i < 4; i++) pe_tensor_free(out[i]);
    pe_program_free(p);
    bn_io_free(&io);
}

static void bn_error(const bn_case *k, const int64_t *scale_dims, const char *layout, pe_status st,
                     const char *needle) {
    bn_io io;
    bn_io_init(&io, k, 1);
    if (scale_dims) {
        pe_tensor_free(io.tscale);
        io.tscale = tu_tensor(k->dt, 1, scale_dims, NULL);
    }
    pe_program *p = pe_program_new();
    pe_op *op = bn_program(p, k, &io, (const char *const[]){"mean", "var", NULL, NULL});
    if (layout) pe_op_set_string(op, "data_layout", layout);
    pe_feed feeds[5] = {{"x", io.tx}, {"scale", io.tscale}, {"bias", io.tbias}, {"mean", io.tmean}, {"var", io.tvar}};
    expect_fail(p, feeds, 5, "y", st, needle);
    pe_program_free(p);
    bn_io_free(&io);
}

static void test_batch_norm_errors(void **state) {
    (void)state;
    const bn_case k = bn_cases[0];
    bn_error(&k, (int64_t[]){4}, NULL, PE_ERR_INVALID, "Scale 'scale' is float32 [4]; X 'x' [2, 3, 7, 5] needs a 1-D [3]");
    bn_error(&k, NULL, "NHWC", PE_ERR_INVALID, "needs a 1-D [5] tensor"); /* NHWC: the channels are the last dim */
    bn_error(&k, NULL, "NDHWC", PE_ERR_UNSUPPORTED, "data_layout 'NDHWC' is not supported (NCHW or NHWC)");
    const bn_case k1 = {"rank 1", PE_DTYPE_FP32, 1, {6}, false, false, 1e-5, 0.9};
    bn_error(&k1, NULL, NULL, PE_ERR_INVALID, "rank 2 to 5");
}

/* ---- steady state, threads ---------------------------------------------- */

/* conv -> batch_norm -> pool, run three times: the second and third runs
 * create no oneDNN primitive and allocate nothing. */
static void test_steady_state_no_rebuild(void **state) {
    (void)state;
    const conv_case *k = &conv_cases[6]; /* C16 M32 */
    double *xv = rand_vals(2 * 16 * 12 * 11, 1, -1, 1), *wv = rand_vals(32 * 16 * 9, 2, -1, 1);
    double *ones = rand_vals(32, 3, 1, 1), *zeros = rand_vals(32, 4, 0, 0);
    pe_tensor *x = mk_tensor(PE_DTYPE_FP32, 4, (int64_t[]){2, 16, 12, 11}, xv);
    pe_tensor *f = mk_tensor(PE_DTYPE_FP32, 4, (int64_t[]){32, 16, 3, 3}, wv);
    pe_tensor *sc = mk_tensor(PE_DTYPE_FP32, 1, (int64_t[]){32}, ones);
    pe_tensor *bi = mk_tensor(PE_DTYPE_FP32, 1, (int64_t[]){32}, zeros);
    pe_program *p = pe_program_new();
    conv_program(p, k, x, f, NULL);
    tu_declare(p, "scale", sc);
    tu_declare(p, "bias", bi);
    pe_var *vm = tu_declare(p, "mean", bi), *vv = tu_declare(p, "var", sc);
    vm->persistable = vv->persistable = true;
    pe_block_add_var(&p->blocks[0], "z", PE_DTYPE_FP32, 4, (int64_t[]){2, 32, 12, 11});
    pe_block_add_var(&p->blocks[0], "out", PE_DTYPE_FP32, 4, (int64_t[]){2, 32, 6, 6});
    pe_op *bn = pe_block_add_op(&p->blocks[0], "batch_norm");
    pe_op_add_input(bn, "X", "y");
    pe_op_add_input(bn, "Scale", "scale");
    pe_op_add_input(bn, "Bias", "bias");
    pe_op_add_input(bn, "Mean", "mean");
    pe_op_add_input(bn, "Variance", "var");
    pe_op_add_output(bn, "Y", "z");
    pe_op_add_output(bn, "MeanOut", "mean");
    pe_op_add_output(bn, "VarianceOut", "var");
    pe_op *pool = pe_block_add_op(&p->blocks[0], "pool2d");
    pe_op_add_input(pool, "X", "z");
    pe_op_add_output(pool, "Out", "out");
    set_pair(pool, "ksize", 3, 3);
    set_pair(pool, "strides", 2, 2);
    set_pair(pool, "paddings", 1, 1);

    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_tensor_copy(pe_scope_var(scope, "mean"), bi, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_tensor_copy(pe_scope_var(scope, "var"), sc, pe_place_cpu(0)), PE_OK);
    pe_feed feeds[4] = {{"x", x}, {"w", f}, {"scale", sc}, {"bias", bi}};
    const char *fetch[1] = {"out"};
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 4, fetch, 1, &out), PE_OK);
    int64_t created1, created3;
    pe_dnnl_cache_stats(NULL, &created1);
    pe_alloc_stats a1 = pe_alloc_get_stats(pe_place_cpu(0));
    for (int i = 0; i < 2; i++) assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 4, fetch, 1, &out), PE_OK);
    pe_dnnl_cache_stats(NULL, &created3);
    pe_alloc_stats a3 = pe_alloc_get_stats(pe_place_cpu(0));
    assert_int_equal(created3, created1);
    assert_int_equal(a3.n_allocs, a1.n_allocs);
    tu_assert_dims(out, 4, (int64_t[]){2, 32, 6, 6});
    pe_tensor_free(out);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(p);
    pe_tensor_free(x); pe_tensor_free(f); pe_tensor_free(sc); pe_tensor_free(bi);
    free(xv); free(wv); free(ones); free(zeros);
}

/* Results must not depend on the kernel's thread count. */
static void test_thread_count_invariance(void **state) {
    (void)state;
    const conv_case *k = &conv_cases[6];
    double *xv = rand_vals(2 * 16 * 12 * 11, 11, -1, 1), *wv = rand_vals(32 * 16 * 9, 12, -1, 1);
    pe_tensor *x = mk_tensor(PE_DTYPE_FP32, 4, (int64_t[]){2, 16, 12, 11}, xv);
    pe_tensor *f = mk_tensor(PE_DTYPE_FP32, 4, (int64_t[]){32, 16, 3, 3}, wv);
    pe_program *p = pe_program_new();
    conv_program(p, k, x, f, NULL);
    pe_block_add_var(&p->blocks[0], "out", PE_DTYPE_FP32, 4, (int64_t[]){2, 32, 12, 11});
    pe_block_add_var(&p->blocks[0], "sm", PE_DTYPE_FP32, 1, (int64_t[]){32});
    pe_block_add_var(&p->blocks[0], "pooled", PE_DTYPE_FP32, 4, (int64_t[]){2, 32, 6, 6});
    double *ones = rand_vals(32, 3, 1, 1), *zeros = rand_vals(32, 4, 0, 0);
    pe_tensor *sc = mk_tensor(PE_DTYPE_FP32, 1, (int64_t[]){32}, ones), *bi = mk_tensor(PE_DTYPE_FP32, 1, (int64_t[]){32}, zeros);
    tu_declare(p, "scale", sc);
    tu_declare(p, "bias", bi);
    tu_declare(p, "mean", bi);
    tu_declare(p, "var", sc);
    pe_op *bn = pe_block_add_op(&p->blocks[0], "batch_norm");
    pe_op_add_input(bn, "X", "y");
    pe_op_add_input(bn, "Scale", "scale");
    pe_op_add_input(bn, "Bias", "bias");
    pe_op_add_input(bn, "Mean", "mean");
    pe_op_add_input(bn, "Variance", "var");
    pe_op_add_output(bn, "Y", "out");
    pe_op_add_output(bn, "SavedMean", "sm");
    pe_op *pool = pe_block_add_op(&p->blocks[0], "pool2d");
    pe_op_add_input(pool, "X", "out");
    pe_op_add_output(pool, "Out", "pooled");
    pe_op_set_string(pool, "pooling_type", "avg");
    set_pair(pool, "ksize", 3, 3);
    set_pair(pool, "strides", 2, 2);
    set_pair(pool, "paddings", 1, 1);
    pe_feed feeds[6] = {{"x", x}, {"w", f}, {"scale", sc}, {"bias", bi}, {"mean", bi}, {"var", sc}};
    const char *fetch[4] = {"y", "out", "sm", "pooled"};
    pe_tensor *r1[4], *r2[4];
    for (int t = 1; t <= 2; t++) {
        pe_tensor **r = t == 1 ? r1 : r2;
        for (int i = 0; i < 4; i++) r[i] = pe_tensor_new();
        pe_scope *scope = pe_scope_new(NULL);
        pe_executor *ex = pe_executor_new(pe_place_cpu(0));
        pe_executor_set_num_threads(ex, t);
        assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 6, fetch, 4, r), PE_OK);
        pe_executor_free(ex);
        pe_scope_free(scope);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pe_tensor_nbytes(r1[i]), pe_tensor_nbytes(r2[i]));
        if (memcmp(pe_tensor_data(r1[i]), pe_tensor_data(r2[i]), pe_tensor_nbytes(r1[i])))
            fail_msg("fetch '%s' differs between 1 and 2 threads", fetch[i]);
        pe_tensor_free(r1[i]);
        pe_tensor_free(r2[i]);
    }
    pe_program_free(p);
    pe_tensor_free(x); pe_tensor_free(f); pe_tensor_free(sc); pe_tensor_free(bi);
    free(xv); free(wv); free(ones); free(zeros);
}

/* Several threads run the same conv -> pool program at once (as places of
 * a parallel executor do), each alternating between its own two inputs:
 * cache entries are checked out per user, so every run matches that input's
 * single-run result bitwise (a shared entry would mix handles and leave
 * results of another thread or of the previous step behind). */
typedef struct conc_arg {
    pthread_barrier_t *start;
    const pe_program *p;
    pe_feed feeds[2][2];
    pe_tensor *want[2];
    int bad;
} conc_arg;

static void *conc_worker(void *vp) {
    conc_arg *a = vp;
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, 1);
    pe_tensor *out = pe_tensor_new();
    const char *fetch[1] = {"out"};
    pthread_barrier_wait(a->start);
    for (int i = 0; i < 60; i++) {
        const pe_tensor *want = a->want[i & 1];
        if (pe_executor_run(ex, a->p, 0, scope, a->feeds[i & 1], 2, fetch, 1, &out) != PE_OK ||
            pe_tensor_nbytes(out) != pe_tensor_nbytes(want) ||
            memcmp(pe_tensor_data(out), pe_tensor_data(want), pe_tensor_nbytes(out)))
            a->bad++;
    }
    pe_tensor_free(out);
    pe_executor_free(ex);
    pe_scope_free(scope);
    return NULL;
}

static void test_concurrent_runs(void **state) {
    (void)state;
    conv_case k = conv_cases[6]; /* C16 -> M32 3x3 pad 1 on 24x23 -> [2, 32, 24, 23] */
    k.h = k.oh = 24;
    k.w = k.ow = 23;
    k.bias = false;
    enum { NT = 4 };
    const int64_t nx = 2 * 16 * 24 * 23;
    double *wv = rand_vals(32 * 16 * 9, 22, -1, 1);
    pe_tensor *f = mk_tensor(PE_DTYPE_FP32, 4, (int64_t[]){32, 16, 3, 3}, wv);
    pe_tensor *xs[2 * NT];
    for (int i = 0; i < 2 * NT; i++) {
        double *xv = rand_vals(nx, 30 + i, -1, 1);
        xs[i] = mk_tensor(PE_DTYPE_FP32, 4, (int64_t[]){2, 16, 24, 23}, xv);
        free(xv);
    }
    pe_program *p = pe_program_new();
    conv_program(p, &k, xs[0], f, NULL);
    pe_block_add_var(&p->blocks[0], "out", PE_DTYPE_FP32, 4, (int64_t[]){2, 32, 12, 11});
    pe_op *pool = pe_block_add_op(&p->blocks[0], "pool2d");
    pe_op_add_input(pool, "X", "y");
    pe_op_add_output(pool, "Out", "out");
    pe_op_set_string(pool, "pooling_type", "avg");
    set_pair(pool, "ksize", 2, 2);
    set_pair(pool, "strides", 2, 2);
    pthread_t th[NT];
    conc_arg args[NT];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, NT), 0);
    for (int i = 0; i < NT; i++) {
        args[i] = (conc_arg){&start, p, {{{"x", xs[2 * i]}, {"w", f}}, {{"x", xs[2 * i + 1]}, {"w", f}}},
                             {pe_tensor_new(), pe_tensor_new()}, 0};
        for (int j = 0; j < 2; j++)
            assert_int_equal(tu_run(p, args[i].feeds[j], 2, (const char *[]){"out"}, 1, &args[i].want[j]), PE_OK);
    }
    for (int i = 0; i < NT; i++) assert_int_equal(pthread_create(&th[i], NULL, conc_worker, &args[i]), 0);
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < NT; i++) {
        assert_int_equal(args[i].bad, 0);
        pe_tensor_free(args[i].want[0]);
        pe_tensor_free(args[i].want[1]);
    }
    for (int i = 0; i < 2 * NT; i++) pe_tensor_free(xs[i]);
    pe_program_free(p);
    pe_tensor_free(f);
    free(wv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d_cases),
        cmocka_unit_test(test_conv2d_errors),
        cmocka_unit_test(test_pool2d_cases),
        cmocka_unit_test(test_pool2d_errors),
        cmocka_unit_test(test_batch_norm_cases),
        cmocka_unit_test(test_batch_norm_inplace_running_stats),
        cmocka_unit_test(test_batch_norm_single_value),
        cmocka_unit_test(test_batch_norm_errors),
        cmocka_unit_test(test_steady_state_no_rebuild),
        cmocka_unit_test(test_thread_count_invariance),
        cmocka_unit_test(test_concurrent_runs),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pe_dnnl_cache_clear();
    return rc;
}
