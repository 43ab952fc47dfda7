/* tests/unit/test_grad_elementwise.c — gradients of the elementwise,
 * activation, reduce and loss families: autodiff (each op's grad maker and
 * grad kernel, through pe_gradients) against central finite differences in
 * fp64 (tests/unit/grad_check.h), one table row per case — every broadcast
 * form of the binary ops (same, scalar, row, channel axis=1, [N,1]+[1,D],
 * lower-rank X, odd shapes), every activation, softmax/log_softmax on inner
 * and middle axes, reduce_sum/mean over one, several, negative and all dims
 * with and without keep_dim, the losses with hard labels (ignore_index
 * rows), [N] labels, soft labels and a middle class axis, and dropout in
 * both modes and implementations. Then targeted checks: fp32 gradients
 * against fp64 ones, cast_grad's dtype, sum_grad with absent inputs and a
 * var used twice, and the broadcast-reduction kernels on large inputs with
 * 1 and 2 threads against a reference loop (bitwise equal across thread
 * counts). */
#include "tests/unit/grad_check.h"

#include <string.h>

/* ---- inputs ------------------------------------------------------------------- */

#define D(...) (int64_t[]){__VA_ARGS__}
#define NDIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
/* fp64 uniform [-1, 1) of the given dims, seeded. */
#define RAND(seed, ...) gc_rand(NDIMS(__VA_ARGS__), D(__VA_ARGS__), seed)

/* t's values mapped to sign(v) * (lo + |v|): away from 0 (divisors, kinks). */
static pe_tensor *away(pe_tensor *t, double lo) {
    double *d = pe_tensor_data(t);
    for (int64_t i = 0; i < pe_tensor_numel(t); i++) d[i] = d[i] < 0 ? d[i] - lo : d[i] + lo;
    return t;
}

/* t's values mapped to (0.1 + |v|) / sum of the row (last dim): probabilities. */
static pe_tensor *probs(pe_tensor *t) {
    double *d = pe_tensor_data(t);
    const int64_t D = t->dims[t->ndim - 1], rows = pe_tensor_numel(t) / D;
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t j = 0; j < D; j++) s += d[r * D + j] = 0.1 + fabs(d[r * D + j]);
        for (int64_t j = 0; j < D; j++) d[r * D + j] /= s;
    }
    return t;
}

static pe_tensor *labels(pe_dtype dt, int ndim, const int64_t *dims, const double *vals) {
    return tu_tensor(dt, ndim, dims, vals);
}

/* ---- attrs -------------------------------------------------------------------- */

static void ax1(pe_op *op) { pe_op_set_int(op, "axis", 1); }
static void ax0(pe_op *op) { pe_op_set_int(op, "axis", 0); }
static void scale_a(pe_op *op) {
    pe_op_set_float(op, "scale", 2.5);
    pe_op_set_float(op, "bias", 0.3);
}
static void scale_b(pe_op *op) {
    scale_a(op);
    pe_op_set_bool(op, "bias_after_scale", false);
}
static void cast64(pe_op *op) { pe_op_set_int(op, "out_dtype", PE_DTYPE_FP64); }
static void alpha(pe_op *op) { pe_op_set_float(op, "alpha", 0.1); }
static void approx(pe_op *op) { pe_op_set_bool(op, "approximate", true); }
static void dims_1(pe_op *op) { pe_op_set_ints(op, "dim", D(1), 1); }
static void dims_02(pe_op *op) { pe_op_set_ints(op, "dim", D(0, 2), 2); }
static void dims_m1_keep(pe_op *op) {
    pe_op_set_ints(op, "dim", D(-1), 1);
    pe_op_set_bool(op, "keep_dim", true);
}
static void dims_12_keep(pe_op *op) {
    pe_op_set_ints(op, "dim", D(1, 2), 2);
    pe_op_set_bool(op, "keep_dim", true);
}
static void dims_13(pe_op *op) { pe_op_set_ints(op, "dim", D(1, 3), 2); }
static void red_all(pe_op *op) { pe_op_set_bool(op, "reduce_all", true); }
static void ignore1(pe_op *op) { pe_op_set_int(op, "ignore_index", 1); }
static void soft(pe_op *op) { pe_op_set_bool(op, "soft_label", true); }
static void soft_ax1(pe_op *op) {
    soft(op);
    ax1(op);
}
static void drop_train(pe_op *op) {
    pe_op_set_float(op, "dropout_prob", 0.4);
    pe_op_set_bool(op, "fix_seed", true);
    pe_op_set_int(op, "seed", 7);
}
static void drop_train_up(pe_op *op) {
    drop_train(op);
    pe_op_set_string(op, "dropout_implementation", "upscale_in_train");
}
static void drop_test(pe_op *op) {
    pe_op_set_float(op, "dropout_prob", 0.4);
    pe_op_set_bool(op, "is_test", true);
}
static void drop_test_up(pe_op *op) {
    drop_test(op);
    pe_op_set_string(op, "dropout_implementation", "upscale_in_train");
}

/* ---- the table ---------------------------------------------------------------- */

typedef gc_case (*case_fn)(void);

#define BIN(NAME, OP, X, Y, ATTRS)                                                           \
    static gc_case NAME(void) {                                                              \
        return (gc_case){.op = OP, .in = {{"X", X, true}, {"Y", Y, true}}, .n_in = 2,        \
                         .out = {"Out"}, .n_out = 1, .set_attrs = ATTRS};                    \
    }
#define UN(NAME, OP, X, ATTRS)                                                               \
    static gc_case NAME(void) {                                                              \
        return (gc_case){.op = OP, .in = {{"X", X, true}}, .n_in = 1, .out = {"Out"},         \
                         .n_out = 1, .set_attrs = ATTRS};                                    \
    }

/* elementwise_*: every plan kind */
#define BIN_FAMILY(OP, P, YF)                                                                \
    BIN(P##_same, OP, RAND(1, 3, 4), YF(RAND(2, 3, 4)), NULL)                                \
    BIN(P##_scalar, OP, RAND(3, 3, 4), YF(RAND(4, 1)), NULL)                                 \
    BIN(P##_row, OP, RAND(5, 4, 5), YF(RAND(6, 5)), NULL)                                    \
    BIN(P##_channel, OP, RAND(7, 2, 3, 2, 2), YF(RAND(8, 3)), ax1)                           \
    BIN(P##_two_way, OP, RAND(9, 3, 1), YF(RAND(10, 1, 4)), NULL)                            \
    BIN(P##_x_low_rank, OP, RAND(11, 4), YF(RAND(12, 3, 4)), NULL)                           \
    BIN(P##_odd_mid, OP, RAND(13, 2, 3, 5), YF(RAND(14, 3, 1)), ax1)                         \
    BIN(P##_odd_general, OP, RAND(15, 2, 1, 5), YF(RAND(16, 2, 3, 1)), NULL)                 \
    BIN(P##_lead, OP, RAND(17, 3, 2, 5), YF(RAND(18, 3)), ax0)

#define IDENT(t) (t)
#define AWAY(t) away(t, 0.5)
BIN_FAMILY("elementwise_add", add, IDENT)
BIN_FAMILY("elementwise_sub", sub, IDENT)
BIN_FAMILY("elementwise_mul", mul, IDENT)
BIN_FAMILY("elementwise_div", div, AWAY)
#define BIN_ROWS(P) P##_same, P##_scalar, P##_row, P##_channel, P##_two_way, P##_x_low_rank, P##_odd_mid, \
                    P##_odd_general, P##_lead

UN(relu_c, "relu", away(RAND(20, 3, 5), 0.01), NULL)
UN(sigmoid_c, "sigmoid", RAND(21, 3, 5), NULL)
UN(tanh_c, "tanh", RAND(22, 2, 3, 2), NULL)
UN(scale_c, "scale", RAND(23, 7), scale_a)
UN(scale_before_c, "scale", RAND(24, 2, 3), scale_b)
UN(cast_c, "cast", RAND(25, 3, 2), cast64)
UN(leaky_c, "leaky_relu", away(RAND(26, 4, 3), 0.01), alpha)
UN(leaky_default_c, "leaky_relu", away(RAND(27, 5), 0.01), NULL)
UN(gelu_c, "gelu", away(RAND(28, 3, 4), 0.0), NULL)
UN(gelu_tanh_c, "gelu", RAND(29, 3, 4), approx)
UN(mean_c, "mean", RAND(30, 3, 4), NULL)
UN(softmax_c, "softmax", RAND(31, 3, 5), NULL)
UN(softmax_mid_c, "softmax", RAND(32, 2, 3, 4), ax1)
UN(log_softmax_c, "log_softmax", RAND(33, 3, 5), NULL)
UN(log_softmax_mid_c, "log_softmax", RAND(34, 2, 3, 4), ax1)
UN(rsum_dim1_c, "reduce_sum", RAND(35, 2, 3, 4), dims_1)
UN(rsum_dims02_c, "reduce_sum", RAND(36, 2, 3, 4), dims_02)
UN(rsum_keep_c, "reduce_sum", RAND(37, 2, 3, 4), dims_m1_keep)
UN(rsum_all_c, "reduce_sum", RAND(38, 2, 3, 4), red_all)
UN(rsum_13_c, "reduce_sum", RAND(39, 2, 3, 2, 4), dims_13)
UN(rmean_dim1_c, "reduce_mean", RAND(40, 2, 3, 4), dims_1)
UN(rmean_12_keep_c, "reduce_mean", RAND(41, 2, 3, 4), dims_12_keep)
UN(rmean_all_c, "reduce_mean", RAND(42, 5, 3), red_all)
UN(rmean_13_c, "reduce_mean", RAND(43, 2, 3, 2, 4), dims_13)

static gc_case swce_hard(void) { /* [N, 1] labels, one row ignored (label 1 == ignore_index) */
    return (gc_case){.op = "softmax_with_cross_entropy",
                     .in = {{"Logits", RAND(50, 4, 5), true},
                            {"Label", labels(PE_DTYPE_INT64, 2, D(4, 1), (double[]){3, 1, 0, 4}), false}},
                     .n_in = 2, .out = {"Loss"}, .n_out = 1, .extra_out = {"Softmax"}, .n_extra_out = 1,
                     .set_attrs = ignore1};
}
static gc_case swce_hard_n(void) { /* [N] int32 labels, default ignore_index */
    return (gc_case){.op = "softmax_with_cross_entropy",
                     .in = {{"Logits", RAND(51, 3, 4), true},
                            {"Label", labels(PE_DTYPE_INT32, 1, D(3), (double[]){2, 0, 3}), false}},
                     .n_in = 2, .out = {"Loss"}, .n_out = 1, .extra_out = {"Softmax"}, .n_extra_out = 1};
}
static gc_case swce_soft(void) { /* soft labels that do not sum to 1: the exact gradient */
    return (gc_case){.op = "softmax_with_cross_entropy",
                     .in = {{"Logits", RAND(52, 3, 4), true}, {"Label", probs(RAND(53, 3, 4)), false}},
                     .n_in = 2, .out = {"Loss"}, .n_out = 1, .extra_out = {"Softmax"}, .n_extra_out = 1,
                     .set_attrs = soft};
}
static gc_case swce_unnormalized(void) {
    pe_tensor *lab = RAND(54, 2, 3);
    for (int64_t i = 0; i < 6; i++) ((double *)pe_tensor_data(lab))[i] = fabs(((double *)pe_tensor_data(lab))[i]);
    return (gc_case){.op = "softmax_with_cross_entropy",
                     .in = {{"Logits", RAND(55, 2, 3), true}, {"Label", lab, false}},
                     .n_in = 2, .out = {"Loss"}, .n_out = 1, .extra_out = {"Softmax"}, .n_extra_out = 1,
                     .set_attrs = soft};
}
static gc_case swce_mid_axis(void) { /* logits [2, 3, 4], class axis 1, labels [2, 1, 4] */
    return (gc_case){.op = "softmax_with_cross_entropy",
                     .in = {{"Logits", RAND(56, 2, 3, 4), true},
                            {"Label", labels(PE_DTYPE_INT64, 3, D(2, 1, 4), (double[]){0, 1, 2, 1, 2, 2, 0, 1}), false}},
                     .n_in = 2, .out = {"Loss"}, .n_out = 1, .extra_out = {"Softmax"}, .n_extra_out = 1,
                     .set_attrs = ax1};
}
static gc_case swce_soft_mid_axis(void) {
    pe_tensor *lab = RAND(57, 2, 3, 2);
    for (int64_t i = 0; i < 12; i++) ((double *)pe_tensor_data(lab))[i] = fabs(((double *)pe_tensor_data(lab))[i]);
    return (gc_case){.op = "softmax_with_cross_entropy",
                     .in = {{"Logits", RAND(58, 2, 3, 2), true}, {"Label", lab, false}},
                     .n_in = 2, .out = {"Loss"}, .n_out = 1, .extra_out = {"Softmax"}, .n_extra_out = 1,
                     .set_attrs = soft_ax1};
}
static gc_case xent_hard(void) {
    return (gc_case){.op = "cross_entropy",
                     .in = {{"X", probs(RAND(60, 4, 3)), true},
                            {"Label", labels(PE_DTYPE_INT64, 2, D(4, 1), (double[]){2, 1, 0, 1}), false}},
                     .n_in = 2, .out = {"Y"}, .n_out = 1, .set_attrs = ignore1};
}
static gc_case xent_soft(void) {
    return (gc_case){.op = "cross_entropy",
                     .in = {{"X", probs(RAND(61, 3, 4)), true}, {"Label", probs(RAND(62, 3, 4)), false}},
                     .n_in = 2, .out = {"Y"}, .n_out = 1, .set_attrs = soft};
}
static gc_case xent_rank3(void) { /* X [2, 2, 3], labels [2, 2] */
    return (gc_case){.op = "cross_entropy",
                     .in = {{"X", probs(RAND(63, 2, 2, 3)), true},
                            {"Label", labels(PE_DTYPE_INT64, 2, D(2, 2), (double[]){0, 2, 1, 1}), false}},
                     .n_in = 2, .out = {"Y"}, .n_out = 1};
}
static gc_case sec_c(void) {
    return (gc_case){.op = "square_error_cost", .in = {{"X", RAND(64, 4, 1), true}, {"Y", RAND(65, 4, 1), true}},
                     .n_in = 2, .out = {"Out"}, .n_out = 1};
}
static gc_case sec_label_fixed(void) {
    return (gc_case){.op = "square_error_cost", .in = {{"X", RAND(66, 2, 3), true}, {"Y", RAND(67, 2, 3), false}},
                     .n_in = 2, .out = {"Out"}, .n_out = 1};
}
#define DROP(NAME, ATTRS, TRAIN)                                                                 \
    static gc_case NAME(void) {                                                                  \
        return (gc_case){.op = "dropout", .in = {{"X", RAND(70, 6, 7), true}}, .n_in = 1,        \
                         .out = {"Out"}, .n_out = 1, .extra_out = {"Mask"}, .n_extra_out = TRAIN, \
                         .set_attrs = ATTRS};                                                    \
    }
DROP(drop_train_c, drop_train, 1)
DROP(drop_train_up_c, drop_train_up, 1)
DROP(drop_test_c, drop_test, 0)
DROP(drop_test_up_c, drop_test_up, 0)

static const case_fn k_cases[] = {
    BIN_ROWS(add), BIN_ROWS(sub), BIN_ROWS(mul), BIN_ROWS(div),
    relu_c, sigmoid_c, tanh_c, scale_c, scale_before_c, cast_c, leaky_c, leaky_default_c, gelu_c, gelu_tanh_c,
    mean_c, softmax_c, softmax_mid_c, log_softmax_c, log_softmax_mid_c,
    rsum_dim1_c, rsum_dims02_c, rsum_keep_c, rsum_all_c, rsum_13_c, rmean_dim1_c, rmean_12_keep_c, rmean_all_c,
    rmean_13_c,
    swce_hard, swce_hard_n, swce_soft, swce_unnormalized, swce_mid_axis, swce_soft_mid_axis,
    xent_hard, xent_soft, xent_rank3, sec_c, sec_label_fixed,
    drop_train_c, drop_train_up_c, drop_test_c, drop_test_up_c,
};

static void test_finite_differences(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        gc_case c = k_cases[i]();
        gc_check(&c);
    }
}

/* ---- targeted checks ------------------------------------------------------------ */

/* d loss / d x for loss = mean(op(x ...) * r) on an ad-hoc program: builds
 * `build`'s forward, appends the loss, runs pe_gradients and fetches the
 * gradients of `xs`. */
typedef void (*build_fn)(pe_program *p, pe_dtype dt);

static void grads_of(build_fn build, pe_dtype dt, const char *const *xs, int nx, pe_tensor *const *xv,
                     const char *out, pe_tensor **g) {
    pe_program *p = pe_program_new();
    build(p, dt);
    pe_block *b = &p->blocks[0];
    const pe_var *ov = pe_block_find_var(b, out);
    assert_non_null(ov);
    pe_block_add_var(b, "loss", dt, 1, D(1));
    pe_op *op = pe_block_add_op(b, "mean");
    pe_op_add_input(op, "X", out);
    pe_op_add_output(op, "Out", "loss");
    char *names[8] = {0};
    const char *targets[] = {"loss"};
    assert_int_equal(pe_gradients(p, targets, 1, xs, nx, names), PE_OK);
    pe_feed feeds[8];
    for (int i = 0; i < nx; i++) feeds[i] = (pe_feed){xs[i], xv[i]};
    const char *fetch[8];
    for (int i = 0; i < nx; i++) {
        assert_non_null(names[i]);
        fetch[i] = names[i];
        g[i] = pe_tensor_new();
    }
    assert_int_equal(tu_run(p, feeds, nx, fetch, nx, g), PE_OK);
    for (int i = 0; i < nx; i++) free(names[i]);
    pe_program_free(p);
}

static pe_tensor *to_dtype(const pe_tensor *t, pe_dtype dt) {
    pe_tensor *o = tu_tensor(dt, t->ndim, t->dims, NULL);
    for (int64_t i = 0; i < pe_tensor_numel(t); i++) {
        if (dt == PE_DTYPE_FP32) ((float *)pe_tensor_data(o))[i] = (float)tu_get(t, i);
        else ((double *)pe_tensor_data(o))[i] = tu_get(t, i);
    }
    return o;
}

/* x [4, 6] -> gelu -> elementwise_mul by y [6] -> softmax -> log -> ... a chain
 * exercising several fp32 grad kernels at once. */
static void build_chain(pe_program *p, pe_dtype dt) {
    pe_block *b = &p->blocks[0];
    pe_block_add_var(b, "x", dt, 2, D(4, 6));
    pe_block_add_var(b, "y", dt, 1, D(6));
    const char *v[] = {"a", "c", "d", "e", "f", "h"};
    for (int i = 0; i < 6; i++) pe_block_add_var(b, v[i], dt, 2, D(4, 6));
    pe_block_add_var(b, "r", dt, 2, D(4, 1));
    pe_block_add_var(b, "lab", PE_DTYPE_INT64, 2, D(4, 1));
    pe_block_add_var(b, "sm", dt, 2, D(4, 6));
    pe_block_add_var(b, "loss_rows", dt, 2, D(4, 1));
    pe_op *op = pe_block_add_op(b, "gelu");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "a");
    op = pe_block_add_op(b, "elementwise_div");
    pe_op_add_input(op, "X", "a");
    pe_op_add_input(op, "Y", "y");
    pe_op_add_output(op, "Out", "c");
    op = pe_block_add_op(b, "tanh");
    pe_op_add_input(op, "X", "c");
    pe_op_add_output(op, "Out", "d");
    op = pe_block_add_op(b, "leaky_relu");
    pe_op_add_input(op, "X", "d");
    pe_op_add_output(op, "Out", "e");
    op = pe_block_add_op(b, "log_softmax");
    pe_op_add_input(op, "X", "e");
    pe_op_add_output(op, "Out", "f");
    op = pe_block_add_op(b, "elementwise_add");
    pe_op_add_input(op, "X", "f");
    pe_op_add_input(op, "Y", "x");
    pe_op_add_output(op, "Out", "h");
    op = pe_block_add_op(b, "reduce_sum");
    pe_op_add_input(op, "X", "h");
    pe_op_add_output(op, "Out", "r");
    pe_op_set_ints(op, "dim", D(1), 1);
    pe_op_set_bool(op, "keep_dim", true);
    op = pe_block_add_op(b, "fill_any_like");
    pe_op_add_input(op, "X", "r");
    pe_op_add_output(op, "Out", "lab");
    pe_op_set_int(op, "dtype", PE_DTYPE_INT64);
    pe_op_set_float(op, "value", 2);
    op = pe_block_add_op(b, "softmax_with_cross_entropy");
    pe_op_add_input(op, "Logits", "h");
    pe_op_add_input(op, "Label", "lab");
    pe_op_add_output(op, "Softmax", "sm");
    pe_op_add_output(op, "Loss", "loss_rows");
    op = pe_block_add_op(b, "elementwise_mul");
    pe_op_add_input(op, "X", "loss_rows");
    pe_op_add_input(op, "Y", "r");
    pe_op_add_output(op, "Out", "out");
    pe_block_add_var(b, "out", dt, 2, D(4, 1));
}

static void test_fp32_matches_fp64(void **state) {
    (void)state;
    pe_tensor *x64 = RAND(90, 4, 6), *y64 = away(RAND(91, 6), 0.5);
    pe_tensor *x32 = to_dtype(x64, PE_DTYPE_FP32), *y32 = to_dtype(y64, PE_DTYPE_FP32);
    const char *xs[] = {"x", "y"};
    pe_tensor *g64[2], *g32[2];
    grads_of(build_chain, PE_DTYPE_FP64, xs, 2, (pe_tensor *[]){x64, y64}, "out", g64);
    grads_of(build_chain, PE_DTYPE_FP32, xs, 2, (pe_tensor *[]){x32, y32}, "out", g32);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(g32[k]->dtype, PE_DTYPE_FP32);
        assert_int_equal(pe_tensor_numel(g32[k]), pe_tensor_numel(g64[k]));
        double mx = 0;
        for (int64_t i = 0; i < pe_tensor_numel(g64[k]); i++) mx = fmax(mx, fabs(tu_get(g64[k], i)));
        assert_true(mx > 1e-3); /* the chain does carry a gradient */
        for (int64_t i = 0; i < pe_tensor_numel(g64[k]); i++) {
            double a = tu_get(g32[k], i), e = tu_get(g64[k], i);
            if (!(fabs(a - e) <= 1e-4 * fabs(e) + 1e-5 * mx))
                fail_msg("grad %s[%lld]: fp32 %.9g, fp64 %.9g", xs[k], (long long)i, a, e);
        }
        pe_tensor_free(g64[k]);
        pe_tensor_free(g32[k]);
    }
    pe_tensor_free(x64);
    pe_tensor_free(y64);
    pe_tensor_free(x32);
    pe_tensor_free(y32);
}

/* x fp32 [3] -> cast fp64 -> mean: x@GRAD is fp32 1/3 each. */
static void build_cast(pe_program *p, pe_dtype dt) {
    (void)dt;
    pe_block *b = &p->blocks[0];
    pe_block_add_var(b, "x", PE_DTYPE_FP32, 1, D(3));
    pe_block_add_var(b, "y", PE_DTYPE_FP64, 1, D(3));
    pe_op *op = pe_block_add_op(b, "cast");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "y");
    pe_op_set_int(op, "out_dtype", PE_DTYPE_FP64); /* in_dtype left at its default (0) */
}

static void test_cast_grad_dtype(void **state) {
    (void)state;
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 1, D(3), (double[]){1, 2, 3});
    const char *xs[] = {"x"};
    pe_tensor *g;
    grads_of(build_cast, PE_DTYPE_FP64, xs, 1, &x, "y", &g);
    assert_int_equal(g->dtype, PE_DTYPE_FP32);
    tu_assert_close(g, (double[]){1.0 / 3, 1.0 / 3, 1.0 / 3}, 3, 1e-7);
    pe_tensor_free(g);
    pe_tensor_free(x);
}

/* out = sum(a, @EMPTY@, b, a): d/da = 2 r/n, d/db = r/n with mean over out * r... here
 * the loss is mean(out), so d/da = 2/n and d/db = 1/n. */
static void build_sum(pe_program *p, pe_dtype dt) {
    pe_block *b = &p->blocks[0];
    pe_block_add_var(b, "a", dt, 2, D(2, 3));
    pe_block_add_var(b, "b", dt, 2, D(2, 3));
    pe_block_add_var(b, "s", dt, 2, D(2, 3));
    pe_op *op = pe_block_add_op(b, "sum");
    pe_op_add_input(op, "X", "a");
    pe_op_add_input(op, "X", PE_EMPTY_VAR);
    pe_op_add_input(op, "X", "b");
    pe_op_add_input(op, "X", "a");
    pe_op_add_output(op, "Out", "s");
}

static void test_sum_grad(void **state) {
    (void)state;
    pe_tensor *a = RAND(92, 2, 3), *b = RAND(93, 2, 3);
    const char *xs[] = {"a", "b"};
    pe_tensor *g[2];
    grads_of(build_sum, PE_DTYPE_FP64, xs, 2, (pe_tensor *[]){a, b}, "s", g);
    double wa[6], wb[6];
    for (int i = 0; i < 6; i++) { wa[i] = 2.0 / 6; wb[i] = 1.0 / 6; }
    tu_assert_close(g[0], wa, 6, 1e-12);
    tu_assert_close(g[1], wb, 6, 1e-12);
    pe_tensor_free(g[0]);
    pe_tensor_free(g[1]);
    pe_tensor_free(a);
    pe_tensor_free(b);
}

/* Runs one elementwise_*_grad op directly with nt threads. */
static void run_ew_grad(const char *type, pe_tensor *x, pe_tensor *y, pe_tensor *g, int axis, int nt, pe_tensor **dx,
                        pe_tensor **dy) {
    pe_program *p = pe_program_new();
    tu_declare(p, "x", x);
    tu_declare(p, "y", y);
    tu_declare(p, "g", g);
    pe_block_add_var(&p->blocks[0], "dx", x->dtype, x->ndim, x->dims);
    pe_block_add_var(&p->blocks[0], "dy", y->dtype, y->ndim, y->dims);
    pe_op *op = pe_block_add_op(&p->blocks[0], type);
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Y", "y");
    pe_op_add_input(op, "Out@GRAD", "g");
    pe_op_add_output(op, "X@GRAD", "dx");
    pe_op_add_output(op, "Y@GRAD", "dy");
    pe_op_set_int(op, "axis", axis);
    pe_scope *s = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, nt);
    *dx = pe_tensor_new();
    *dy = pe_tensor_new();
    const char *fetch[] = {"dx", "dy"};
    pe_tensor *outs[] = {*dx, *dy};
    pe_status st = pe_executor_run(ex, p, 0, s, (pe_feed[]){{"x", x}, {"y", y}, {"g", g}}, 3, fetch, 2, outs);
    if (st != PE_OK) fail_msg("%s", pe_last_error());
    pe_executor_free(ex);
    pe_scope_free(s);
    pe_program_free(p);
}

static pe_tensor *rand32(int ndim, const int64_t *dims, uint64_t seed, double lo) {
    pe_tensor *t = away(gc_rand(ndim, dims, seed), lo), *o = to_dtype(t, PE_DTYPE_FP32);
    pe_tensor_free(t);
    return o;
}

static void assert_bitwise(const pe_tensor *a, const pe_tensor *b) {
    assert_int_equal(pe_tensor_nbytes(a), pe_tensor_nbytes(b));
    assert_memory_equal(pe_tensor_data(a), pe_tensor_data(b), pe_tensor_nbytes(a));
}

/* Large inputs take the threaded branches: results must equal a plain
 * reference loop (within fp32 rounding) and be bitwise equal for 1 and 2
 * threads. Cases: row bias [N,D]+[D], channel [N,C,HW]+[C] axis 1,
 * scalar, two-way [N,1]*[1,D], and a broadcast X. */
static void test_large_reductions_threads(void **state) {
    (void)state;
    struct { const char *op; int xn; int64_t xd[4]; int yn; int64_t yd[4]; int axis; int on; int64_t od[4]; } cs[] = {
        {"elementwise_add_grad", 2, {256, 300}, 1, {300}, -1, 2, {256, 300}},
        {"elementwise_mul_grad", 4, {8, 16, 24, 24}, 1, {16}, 1, 4, {8, 16, 24, 24}},
        {"elementwise_sub_grad", 2, {300, 200}, 1, {1}, -1, 2, {300, 200}},
        {"elementwise_div_grad", 2, {400, 1}, 2, {1, 150}, -1, 2, {400, 150}},
        {"elementwise_mul_grad", 1, {150}, 2, {400, 150}, -1, 2, {400, 150}},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        pe_tensor *x = rand32(cs[c].xn, cs[c].xd, 100 + c, 0.5), *y = rand32(cs[c].yn, cs[c].yd, 200 + c, 0.5);
        pe_tensor *g = rand32(cs[c].on, cs[c].od, 300 + c, 0.0);
        pe_tensor *dx1, *dy1, *dx2, *dy2;
        run_ew_grad(cs[c].op, x, y, g, cs[c].axis, 1, &dx1, &dy1);
        run_ew_grad(cs[c].op, x, y, g, cs[c].axis, 2, &dx2, &dy2);
        assert_bitwise(dx1, dx2);
        assert_bitwise(dy1, dy2);
        /* reference: numpy-style broadcast over the output (trailing alignment, or axis) */
        int on = cs[c].on;
        int64_t xs[4], ys[4], ostr[4], s = 1;
        int xoff = cs[c].axis >= 0 ? cs[c].axis : on - cs[c].xn, yoff = cs[c].axis >= 0 ? cs[c].axis : on - cs[c].yn;
        if (cs[c].xn == on) xoff = 0;
        for (int d = on - 1; d >= 0; d--) { ostr[d] = s; s *= cs[c].od[d]; }
        for (int d = 0; d < on; d++) { xs[d] = 0; ys[d] = 0; }
        s = 1;
        for (int d = cs[c].xn - 1; d >= 0; d--) { if (cs[c].xd[d] > 1) xs[d + xoff] = s; s *= cs[c].xd[d]; }
        s = 1;
        for (int d = cs[c].yn - 1; d >= 0; d--) { if (cs[c].yd[d] > 1) ys[d + yoff] = s; s *= cs[c].yd[d]; }
        const int64_t nx = pe_tensor_numel(x), ny = pe_tensor_numel(y), no = pe_tensor_numel(g);
        double *rx = calloc((size_t)nx, sizeof *rx), *ry = calloc((size_t)ny, sizeof *ry);
        for (int64_t o = 0; o < no; o++) {
            int64_t xo = 0, yo = 0;
            for (int d = 0; d < on; d++) {
                int64_t i = (o / ostr[d]) % cs[c].od[d];
                xo += i * xs[d];
                yo += i * ys[d];
            }
            double gv = tu_get(g, o), xv = tu_get(x, xo), yv = tu_get(y, yo);
            const char *op = cs[c].op + 12; /* "add_grad", ... */
            if (!strncmp(op, "add", 3)) { rx[xo] += gv; ry[yo] += gv; }
            else if (!strncmp(op, "sub", 3)) { rx[xo] += gv; ry[yo] -= gv; }
            else if (!strncmp(op, "mul", 3)) { rx[xo] += gv * yv; ry[yo] += gv * xv; }
            else { rx[xo] += gv / yv; ry[yo] -= gv * xv / (yv * yv); }
        }
        tu_assert_close(dx1, rx, nx, 1e-4);
        tu_assert_close(dy1, ry, ny, 1e-4);
        free(rx);
        free(ry);
        pe_tensor_free(dx1); pe_tensor_free(dy1); pe_tensor_free(dx2); pe_tensor_free(dy2);
        pe_tensor_free(x); pe_tensor_free(y); pe_tensor_free(g);
    }
}

/* An elementwise_*_grad whose Out@GRAD does not have the broadcast shape is
 * a clear error naming the slot. */
static void test_grad_shape_error(void **state) {
    (void)state;
    pe_tensor *x = RAND(94, 3, 4), *y = RAND(95, 4), *g = RAND(96, 3, 5);
    pe_program *p = pe_program_new();
    tu_declare(p, "x", x);
    tu_declare(p, "y", y);
    tu_declare(p, "g", g);
    pe_block_add_var(&p->blocks[0], "dx", PE_DTYPE_FP64, 2, D(3, 4));
    pe_op *op = pe_block_add_op(&p->blocks[0], "elementwise_add_grad");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Y", "y");
    pe_op_add_input(op, "Out@GRAD", "g");
    pe_op_add_output(op, "X@GRAD", "dx");
    pe_tensor *dx = pe_tensor_new();
    assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}, {"y", y}, {"g", g}}, 3, (const char *[]){"dx"}, 1, &dx),
                     PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "Out@GRAD"));
    assert_non_null(strstr(pe_last_error(), "[3, 5]"));
    pe_tensor_free(dx);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(g);
    pe_program_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_fp32_matches_fp64),
        cmocka_unit_test(test_cast_grad_dtype),
        cmocka_unit_test(test_sum_grad),
        cmocka_unit_test(test_large_reductions_threads),
        cmocka_unit_test(test_grad_shape_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
