/* tests/unit/test_conv_nhwc.c — BuildStrategy.conv_nhwc (passes/conv_nhwc.c):
 * a float32 CNN's conv / pool / activation / bias-add chain and its
 * gradients run NHWC, with transposes only at the edges; and
 * BuildStrategy.fuse_conv_bias (passes/fuse_conv_bias.c), the bias add
 * folded into the convolution.
 *
 * What: the CNN of tests/unit/models.h with a bias add (axis 1) after each
 * convolution, trained with momentum:
 *  - structure: the pass switches the 2 conv2d, 2 pool2d and their grads
 *    (8), the bias adds go to axis 3, and only the fed image and the
 *    flatten's var and gradient get transposes;
 *  - numbers: 8 steps on 1 and 3 places with either pass or both give
 *    parameters allclose to the NCHW run without them (float32, another
 *    summation order), and two runs give the same bits;
 *  - fuse_conv_bias: both convs take their bias and its gradient, in NCHW
 *    and after the layout pass;
 *  - a fetched intermediate (conv_0's relu output) stays NCHW, allclose to
 *    the NCHW run's value;
 *  - the same with a batch_norm after each bias add (one place: several
 *    places refuse a training batch_norm, sync_batch_norm's rule);
 *  - float64 programs are left alone (the NHWC kernels are oneDNN's float32).
 */
#include "tests/unit/models.h"
#include "passes/pass_manager.h"

#include <math.h>
#include <string.h>

/* y = batch_norm(x) over [-1, c, hw, hw] (training; the running stats updated in place). */
static void add_bn(tm_model *m, const char *x, const char *y, int64_t c, int64_t hw, const char *name) {
    static const char *const params[4] = {"scale", "bias", "mean", "var"};
    static const char *const slots[4] = {"Scale", "Bias", "Mean", "Variance"};
    char n[4][64], sm[64], sv[64];
    pe_op *op;
    for (int i = 0; i < 4; i++) {
        snprintf(n[i], sizeof n[i], "%.40s.%s", name, params[i]);
        const double v = m->bias_init;
        m->bias_init = i == 0 || i == 3 ? 1.0 : 0.0;
        tm_param(m, n[i], 1, (int64_t[]){c}, PE_INIT_CONSTANT);
        m->bias_init = v;
    }
    snprintf(sm, sizeof sm, "%.40s.saved_mean", name);
    snprintf(sv, sizeof sv, "%.40s.saved_var", name);
    tm_var(m->main, sm, m->dt, 1, (int64_t[]){c});
    tm_var(m->main, sv, m->dt, 1, (int64_t[]){c});
    tm_var(m->main, y, m->dt, 4, (int64_t[]){-1, c, hw, hw});
    op = pe_block_add_op(&m->main->blocks[0], "batch_norm");
    pe_op_add_input(op, "X", x);
    for (int i = 0; i < 4; i++) pe_op_add_input(op, slots[i], n[i]);
    pe_op_add_output(op, "Y", y);
    pe_op_add_output(op, "MeanOut", n[2]);
    pe_op_add_output(op, "VarianceOut", n[3]);
    pe_op_add_output(op, "SavedMean", sm);
    pe_op_add_output(op, "SavedVariance", sv);
    /* the running stats are not trained: only the scale and bias (the first two) stay parameters */
    pe_block_find_var(&m->main->blocks[0], n[2])->is_parameter = false;
    pe_block_find_var(&m->main->blocks[0], n[3])->is_parameter = false;
}

/* conv2d 3x3 pad 1 + bias (axis 1) [+ batch_norm] + relu + max pool 2x2, as
 * fluid.layers.conv2d(act="relu") + pool2d. */
static void conv_bias_pool(tm_model *m, const char *x, int64_t cin, int64_t cout, int64_t hw, const char *name,
                           bool bn) {
    char w[64], b[64], c[64], a[64], r[64], o[64];
    snprintf(w, 64, "%s.w_0", name);
    snprintf(b, 64, "%s.b_0", name);
    snprintf(c, 64, "%s.conv", name);
    snprintf(a, 64, "%s.add", name);
    snprintf(r, 64, "%s.relu", name);
    snprintf(o, 64, "%s.out", name);
    tm_param(m, w, 4, (int64_t[]){cout, cin, 3, 3}, PE_INIT_KAIMING_UNIFORM);
    tm_param(m, b, 1, (int64_t[]){cout}, PE_INIT_CONSTANT);
    tm_var(m->main, c, m->dt, 4, (int64_t[]){-1, cout, hw, hw});
    tm_var(m->main, a, m->dt, 4, (int64_t[]){-1, cout, hw, hw});
    tm_var(m->main, r, m->dt, 4, (int64_t[]){-1, cout, hw, hw});
    tm_var(m->main, o, m->dt, 4, (int64_t[]){-1, cout, hw / 2, hw / 2});
    tm_conv3x3(m, x, w, c);
    pe_op *op = tm_op2(m->main, "elementwise_add", c, b, a);
    pe_op_set_int(op, "axis", 1);
    if (bn) {
        char nrm[64], bnn[64];
        snprintf(nrm, 64, "%.40s.bn_out", name);
        snprintf(bnn, 64, "%.40s.bn", name);
        add_bn(m, a, nrm, cout, hw, bnn);
        tm_op1(m->main, "relu", nrm, r);
    } else {
        tm_op1(m->main, "relu", a, r);
    }
    tm_maxpool2x2(m, r, o);
}

static tm_model make_cnn(pe_dtype dt, bool bn) {
    tm_model m = tm_model_new(dt, 0.01, false);
    m.cnn = true;
    m.input = "img";
    m.main->random_seed = m.startup->random_seed = 11;
    tm_var(m.main, "img", dt, 4, (int64_t[]){-1, 1, 28, 28});
    conv_bias_pool(&m, "img", 1, 8, 28, "conv_0", bn);
    conv_bias_pool(&m, "conv_0.out", 8, 16, 14, "conv_1", bn);
    tm_var(m.main, "flat", dt, 2, (int64_t[]){-1, 16 * 7 * 7});
    tm_var(m.main, "flat.xshape", dt, 5, (int64_t[]){0, -1, 16, 7, 7});
    pe_op *op = tm_op1(m.main, "reshape2", "conv_1.out", "flat");
    pe_op_add_output(op, "XShape", "flat.xshape");
    pe_op_set_ints(op, "shape", (int64_t[]){-1, 16 * 7 * 7}, 2);
    tm_fc(&m, "flat", 16 * 7 * 7, 32, "fc_0", "relu");
    tm_fc(&m, "fc_0.out", 32, 10, "fc_1", NULL);
    tm_loss(&m, "fc_1.out");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    return m;
}

static const char *str_attr(const pe_op *op, const char *name) {
    const pe_attr *a = pe_op_attr(op, name);
    return a && a->s ? a->s : "";
}

static int64_t int_attr(const pe_op *op, const char *name) {
    const pe_attr *a = pe_op_attr(op, name);
    return a ? a->i : -100;
}

/* ops of `type` in p (with data_format NHWC when nhwc) */
static int count(const pe_program *p, const char *type, bool nhwc) {
    int n = 0;
    for (int i = 0; i < p->blocks[0].n_ops; i++) {
        const pe_op *op = &p->blocks[0].ops[i];
        if (!strcmp(op->type, type) && (!nhwc || !strcmp(str_attr(op, "data_format"), "NHWC"))) n++;
    }
    return n;
}

static pe_ssa_graph *build2(const tm_model *m, bool on, bool bias, pe_pass_result *res) {
    pe_build_strategy bs;
    memset(&bs, 0, sizeof bs);
    bs.conv_nhwc = on;
    bs.fuse_conv_bias = bias;
    pe_pass_opts po = {.n_places = 1, .loss_name = "loss", .bs = &bs};
    pe_ssa_graph *g = NULL;
    if (pe_pass_manager_run(m->main, &po, &g, res) != PE_OK) fail_msg("%s", pe_last_error());
    return g;
}

static pe_ssa_graph *build(const tm_model *m, bool on, pe_pass_result *res) { return build2(m, on, false, res); }

static void test_structure(void **state) {
    (void)state;
    tm_model m = make_cnn(PE_DTYPE_FP32, false);
    pe_pass_result res;
    pe_ssa_graph *g = build(&m, true, &res);
    const pe_program *p = g->progs[0];
    assert_true(res.n >= 2);
    assert_string_equal(res.s[0].name, "conv_nhwc");
    assert_int_equal(res.s[0].n_fused, 8);
    assert_int_equal(count(p, "conv2d", true), 2);
    assert_int_equal(count(p, "conv2d_grad", true), 2);
    assert_int_equal(count(p, "pool2d", true), 2);
    assert_int_equal(count(p, "pool2d_grad", true), 2);
    int bias3 = 0, bias3_grad = 0;
    for (int i = 0; i < p->blocks[0].n_ops; i++) {
        const pe_op *op = &p->blocks[0].ops[i];
        const char *x = pe_op_input1(op, "X");
        if (!x || strncmp(x, "conv_", 5)) continue;
        if (!strcmp(op->type, "elementwise_add")) bias3 += int_attr(op, "axis") == 3;
        if (!strcmp(op->type, "elementwise_add_grad")) bias3_grad += int_attr(op, "axis") == 3;
    }
    assert_int_equal(bias3, 2);
    assert_int_equal(bias3_grad, 2);
    /* the edges: the image into conv_0 (its forward; its grad reads it too), conv_1.out out to the
     * reshape and its gradient back in; nothing between the layers */
    const int nt = count(p, "transpose2", false);
    print_message("transposes: %d, ops %d -> %d\n", nt, res.s[0].ops_before, res.s[0].ops_after);
    assert_true(nt >= 3 && nt <= 5);
    assert_int_equal(res.s[0].ops_after - res.s[0].ops_before, nt);
    /* declared dims of a switched var: [N, H, W, C] */
    const pe_var *v = pe_block_find_var(&p->blocks[0], "conv_0.relu");
    assert_non_null(v);
    assert_int_equal(v->dims[1], 28);
    assert_int_equal(v->dims[3], 8);
    assert_true(v->channels_last); /* what a fetch of it is decided by (not its dims, which may read alike) */
    assert_false(pe_block_find_var(&p->blocks[0], "img")->channels_last);
    pe_ssa_graph_free(g);

    g = build(&m, false, &res); /* off: nothing switched, no pass line */
    assert_int_equal(count(g->progs[0], "transpose2", false), 0);
    assert_string_equal(res.s[0].name, "multi_device");
    pe_ssa_graph_free(g);
    tm_model_free(&m);
}

/* sw: bit 0 conv_nhwc, bit 1 fuse_conv_bias */
static void train(const tm_model *m, int places, int sw, pe_tensor **out) {
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.build_strategy.conv_nhwc = sw & 1;
    o.build_strategy.fuse_conv_bias = sw & 2;
    char what[64];
    snprintf(what, sizeof what, "conv_nhwc=%d fuse_conv_bias=%d", sw & 1, !!(sw & 2));
    tm_train(m, places, &o, 8, 12, what, out);
}

/* got allclose to ref (rtol 1e-4, atol 1e-5: float32 in another summation
 * order), parameter by parameter; returns the largest |difference|. */
static double assert_params_allclose(const tm_model *m, pe_tensor **got, pe_tensor **ref, const char *what) {
    double worst = 0;
    for (int i = 0; i < m->n_params; i++) {
        const int64_t n = pe_tensor_numel(ref[i]);
        assert_int_equal(n, pe_tensor_numel(got[i]));
        for (int64_t e = 0; e < n; e++) {
            const double x = tu_get(got[i], e), y = tu_get(ref[i], e), d = fabs(x - y);
            if (d > 1e-4 * fabs(y) + 1e-5)
                fail_msg("%s: %s[%lld]: %.9g vs NCHW unfused %.9g", what, m->params[i], (long long)e, x, y);
            if (d > worst) worst = d;
        }
    }
    return worst;
}

/* Every combination of conv_nhwc and fuse_conv_bias against both off. */
static void check_training(bool bn) {
    tm_model m = make_cnn(PE_DTYPE_FP32, bn);
    for (int places = 1; places <= (bn ? 1 : 3); places += 2) { /* batch_norm on several places: sync_batch_norm's rule */
        pe_tensor *ref[16], *got[16], *again[16];
        train(&m, places, 0, ref);
        for (int sw = 1; sw < 4; sw++) {
            train(&m, places, sw, got);
            train(&m, places, sw, again);
            char what[64];
            snprintf(what, sizeof what, "switches %d, %d places", sw, places);
            const double worst = assert_params_allclose(&m, got, ref, what);
            for (int i = 0; i < m.n_params; i++)
                assert_memory_equal(pe_tensor_data(got[i]), pe_tensor_data(again[i]),
                                    (size_t)pe_tensor_numel(got[i]) * sizeof(float));
            print_message("%s, %d place(s), conv_nhwc=%d fuse_conv_bias=%d: allclose to both off (max |diff| %.3g), "
                          "bitwise repeatable\n", bn ? "with batch_norm" : "conv + bias", places, sw & 1, !!(sw & 2), worst);
            tm_free_params(&m, got);
            tm_free_params(&m, again);
        }
        tm_free_params(&m, ref);
    }
    tm_model_free(&m);
}

static void test_training(void **state) {
    (void)state;
    check_training(false);
    check_training(true);
}

/* conv_0.relu fetched: NCHW [rows, 8, 28, 28] with the pass on, the NCHW run's values */
static void fetch_relu(const tm_model *m, bool on, pe_tensor *out) {
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m->startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.build_strategy.conv_nhwc = on;
    pe_place pl[1] = {pe_place_cpu(0)};
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, 1, m->main, scope, &o, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    pe_tensor *x, *y;
    tm_batch(m, 0, 6, &x, &y);
    pe_feed feed[2] = {{"img", x}, {"label", y}};
    const char *fetch[2] = {"loss", "conv_0.relu"};
    pe_tensor *outs[2] = {pe_tensor_new(), out};
    if (pe_run(pe, feed, 2, fetch, 2, true, outs) != PE_OK) fail_msg("%s", pe_last_error());
    pe_tensor_free(outs[0]);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
}

static void test_fetch_stays_nchw(void **state) {
    (void)state;
    tm_model m = make_cnn(PE_DTYPE_FP32, false);
    pe_tensor *a = pe_tensor_new(), *b = pe_tensor_new();
    fetch_relu(&m, false, a);
    fetch_relu(&m, true, b);
    assert_int_equal(b->ndim, 4);
    assert_int_equal(b->dims[1], 8);
    assert_int_equal(b->dims[3], 28);
    for (int64_t e = 0; e < pe_tensor_numel(a); e++)
        if (fabs(tu_get(a, e) - tu_get(b, e)) > 1e-5 * fabs(tu_get(a, e)) + 1e-6)
            fail_msg("conv_0.relu[%lld]: %.9g vs %.9g", (long long)e, tu_get(b, e), tu_get(a, e));
    pe_tensor_free(a);
    pe_tensor_free(b);
    tm_model_free(&m);
}

/* an undeclared activation (conv_1's pre-bias gradient): the ops reading or
 * writing it stay NCHW (no edge could be given to it), the rest switches */
static void test_undeclared_activation(void **state) {
    (void)state;
    tm_model m = make_cnn(PE_DTYPE_FP32, false);
    assert_true(pe_block_remove_var(&m.main->blocks[0], "conv_1.conv@GRAD"));
    pe_pass_result res;
    pe_ssa_graph *g = build(&m, true, &res);
    assert_int_equal(res.s[0].n_fused, 7); /* conv_1's conv2d_grad not switched */
    assert_int_equal(count(g->progs[0], "conv2d_grad", true), 1);
    pe_ssa_graph_free(g);
    pe_tensor *ref[16], *got[16];
    train(&m, 1, 0, ref);
    train(&m, 1, 1, got);
    assert_params_allclose(&m, got, ref, "conv_1's gradient ops NCHW, the rest NHWC");
    tm_free_params(&m, ref);
    tm_free_params(&m, got);
    tm_model_free(&m);
}

/* with batch_norm between the bias add and the relu: the norms and their grads switch too (12) */
static void test_structure_bn(void **state) {
    (void)state;
    tm_model m = make_cnn(PE_DTYPE_FP32, true);
    pe_pass_result res;
    pe_ssa_graph *g = build(&m, true, &res);
    assert_int_equal(res.s[0].n_fused, 12);
    int bn = 0;
    for (int i = 0; i < g->progs[0]->blocks[0].n_ops; i++) {
        const pe_op *op = &g->progs[0]->blocks[0].ops[i];
        if (!strncmp(op->type, "batch_norm", 10)) bn += !strcmp(str_attr(op, "data_layout"), "NHWC");
    }
    assert_int_equal(bn, 4);
    const int nt = count(g->progs[0], "transpose2", false);
    assert_true(nt >= 3 && nt <= 5);
    pe_ssa_graph_free(g);
    tm_model_free(&m);
}

/* fuse_conv_bias: each conv takes its bias (forward and gradient); the bias adds are gone */
static void test_conv_bias_fused(void **state) {
    (void)state;
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        tm_model m = make_cnn(PE_DTYPE_FP32, false);
        pe_pass_result res;
        pe_ssa_graph *g = build2(&m, nhwc, true, &res);
        const pe_program *p = g->progs[0];
        const int k = nhwc; /* fuse_conv_bias's row in the report */
        assert_string_equal(res.s[k].name, "fuse_conv_bias");
        assert_int_equal(res.s[k].n_fused, 2);
        int with_bias = 0, grad_bias = 0;
        for (int i = 0; i < p->blocks[0].n_ops; i++) {
            const pe_op *op = &p->blocks[0].ops[i];
            if (!strcmp(op->type, "conv2d")) with_bias += pe_op_input1(op, "Bias") != NULL;
            if (!strcmp(op->type, "conv2d_grad")) grad_bias += pe_op_output1(op, "Bias@GRAD") != NULL;
            const char *x = pe_op_input1(op, "X");
            if (x && !strncmp(op->type, "elementwise_add", 15)) assert_true(strncmp(x, "conv_", 5) != 0);
        }
        assert_int_equal(with_bias, 2);
        assert_int_equal(grad_bias, 2);
        assert_null(pe_block_find_var(&p->blocks[0], "conv_0.conv")); /* the pre-bias output is gone */
        pe_ssa_graph_free(g);
        tm_model_free(&m);
    }
}

static void test_fp64_untouched(void **state) {
    (void)state;
    tm_model m = make_cnn(PE_DTYPE_FP64, false);
    pe_pass_result res;
    pe_ssa_graph *g = build(&m, true, &res);
    assert_string_equal(res.s[0].name, "multi_device"); /* nothing switched: no line */
    assert_int_equal(count(g->progs[0], "transpose2", false), 0);
    assert_int_equal(count(g->progs[0], "conv2d", true), 0);
    pe_ssa_graph_free(g);
    tm_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_structure_bn),
        cmocka_unit_test(test_undeclared_activation),
        cmocka_unit_test(test_conv_bias_fused),
        cmocka_unit_test(test_training),
        cmocka_unit_test(test_fetch_stays_nchw),
        cmocka_unit_test(test_fp64_untouched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
