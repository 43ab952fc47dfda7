/* tests/unit/models.h — the MLP and CNN training programs that several
 * executor tests train (header-only, next to op_test_util.h).
 *
 * What: builders for Paddle-style layers (fc = mul + elementwise_add [+ act],
 * conv2d + relu + pool2d, softmax_with_cross_entropy + mean), the two models
 * made of them, the optimizer step, the deterministic class-dependent batches
 * they train on, a whole training run (tm_train), and copying the trained
 * parameters back from place 0:
 *
 *     tm_model m = tm_model_new(PE_DTYPE_FP64, 0.0, false);
 *     tm_mlp(&m, 128, "relu", 64, "tanh");   // x [N, 784] -> 10 classes, "loss"
 *     tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
 *     pe_tensor *x, *y;
 *     tm_batch(&m, step, 12, &x, &y);        // feed {m.input, x}, {"label", y}
 *
 * How: a tm_model carries both programs, its parameter names and the few
 * choices in which the tests' models differ (float dtype, the constant
 * initializer's value for the biases, whether the bias add names axis = 1);
 * layer sizes and activations are arguments. Every step asserts with cmocka.
 * Why: test_pe_equivalence, test_fusion and test_memory_plan train the same
 * models; one copy keeps their programs alike and their fixes in one place.
 */
#ifndef PE_TEST_MODELS_H
#define PE_TEST_MODELS_H

#include "tests/unit/op_test_util.h"

#include <stdbool.h>
#include <string.h>

typedef struct {
    pe_program *main, *startup;
    char params[16][64]; /* parameter names, in creation order */
    int n_params;
    bool cnn;            /* input [N, 1, 28, 28] (else x [N, 784]) */
    const char *input;   /* name of the fed input var */
    pe_dtype dt;         /* float dtype of every var but the label */
    double bias_init;    /* value of the constant initializer (the biases) */
    bool bias_axis;      /* the bias add carries axis = 1 (else its default, -1) */
} tm_model;

static inline void tm_var(pe_program *p, const char *name, pe_dtype dt, int ndim, const int64_t *dims) {
    assert_non_null(pe_block_add_var(&p->blocks[0], name, dt, ndim, dims));
}

/* out = type(X = x, Y = y); y may be NULL. */
static inline pe_op *tm_op2(pe_program *p, const char *type, const char *x, const char *y, const char *out) {
    pe_op *op = pe_block_add_op(&p->blocks[0], type);
    pe_op_add_input(op, "X", x);
    if (y) pe_op_add_input(op, "Y", y);
    pe_op_add_output(op, "Out", out);
    return op;
}

static inline pe_op *tm_op1(pe_program *p, const char *type, const char *x, const char *out) {
    return tm_op2(p, type, x, NULL, out);
}

static inline tm_model tm_model_new(pe_dtype dt, double bias_init, bool bias_axis) {
    tm_model m;
    memset(&m, 0, sizeof m);
    m.main = pe_program_new();
    m.startup = pe_program_new();
    assert_non_null(m.main);
    assert_non_null(m.startup);
    m.input = "x";
    m.dt = dt;
    m.bias_init = bias_init;
    m.bias_axis = bias_axis;
    return m;
}

static inline void tm_model_free(tm_model *m) {
    pe_program_free(m->main);
    pe_program_free(m->startup);
}

/* A persistable parameter initialized by the startup program. */
static inline void tm_param(tm_model *m, const char *name, int ndim, const int64_t *dims, pe_init_kind kind) {
    pe_var *v = pe_block_add_var(&m->main->blocks[0], name, m->dt, ndim, dims);
    assert_non_null(v);
    assert_true(m->n_params < 16);
    v->persistable = v->is_parameter = true;
    pe_initializer init = {.kind = kind, .value = m->bias_init};
    assert_int_equal(pe_startup_init_var(m->startup, v, &init), PE_OK);
    snprintf(m->params[m->n_params++], 64, "%s", name);
}

/* out = act(x @ w + b), Paddle's layer names; x: [N, in], out: [N, out]; act NULL = none. */
static inline void tm_fc(tm_model *m, const char *x, int64_t in, int64_t out, const char *name, const char *act) {
    char w[64], b[64], t0[64], t1[64], o[64];
    snprintf(w, 64, "%s.w_0", name);
    snprintf(b, 64, "%s.b_0", name);
    snprintf(t0, 64, "%s.tmp_0", name);
    snprintf(t1, 64, "%s.tmp_1", name);
    snprintf(o, 64, "%s.out", name);
    tm_param(m, w, 2, (int64_t[]){in, out}, PE_INIT_XAVIER_UNIFORM);
    tm_param(m, b, 1, (int64_t[]){out}, PE_INIT_CONSTANT);
    tm_var(m->main, t0, m->dt, 2, (int64_t[]){-1, out});
    tm_var(m->main, t1, m->dt, 2, (int64_t[]){-1, out});
    tm_var(m->main, o, m->dt, 2, (int64_t[]){-1, out});
    tm_op2(m->main, "mul", x, w, t0);
    pe_op *op = tm_op2(m->main, "elementwise_add", t0, b, act ? t1 : o);
    if (m->bias_axis) pe_op_set_int(op, "axis", 1);
    if (act) tm_op1(m->main, act, t1, o);
}

/* out = conv2d_3x3_pad1(x, w), no bias. */
static inline void tm_conv3x3(tm_model *m, const char *x, const char *w, const char *out) {
    pe_op *op = pe_block_add_op(&m->main->blocks[0], "conv2d");
    pe_op_add_input(op, "Input", x);
    pe_op_add_input(op, "Filter", w);
    pe_op_add_output(op, "Output", out);
    pe_op_set_ints(op, "paddings", (int64_t[]){1, 1}, 2);
}

/* out = pool2d_max_2x2(x). */
static inline void tm_maxpool2x2(tm_model *m, const char *x, const char *out) {
    pe_op *op = tm_op1(m->main, "pool2d", x, out);
    pe_op_set_ints(op, "ksize", (int64_t[]){2, 2}, 2);
    pe_op_set_ints(op, "strides", (int64_t[]){2, 2}, 2);
}

/* out = pool2d_max_2x2(relu(conv2d_3x3_pad1(x, w))); x: [N, cin, hw, hw], out: [N, cout, hw/2, hw/2] */
static inline void tm_conv_pool(tm_model *m, const char *x, int64_t cin, int64_t cout, int64_t hw, const char *name) {
    char w[64], c[64], r[64], o[64];
    snprintf(w, 64, "%s.w_0", name);
    snprintf(c, 64, "%s.conv", name);
    snprintf(r, 64, "%s.relu", name);
    snprintf(o, 64, "%s.out", name);
    tm_param(m, w, 4, (int64_t[]){cout, cin, 3, 3}, PE_INIT_KAIMING_UNIFORM);
    tm_var(m->main, c, m->dt, 4, (int64_t[]){-1, cout, hw, hw});
    tm_var(m->main, r, m->dt, 4, (int64_t[]){-1, cout, hw, hw});
    tm_var(m->main, o, m->dt, 4, (int64_t[]){-1, cout, hw / 2, hw / 2});
    tm_conv3x3(m, x, w, c);
    tm_op1(m->main, "relu", c, r);
    tm_maxpool2x2(m, r, o);
}

/* loss = mean(softmax_with_cross_entropy(logits, label)); logits: [N, 10], label: [N, 1] int64 */
static inline void tm_loss(tm_model *m, const char *logits) {
    tm_var(m->main, "label", PE_DTYPE_INT64, 2, (int64_t[]){-1, 1});
    tm_var(m->main, "softmax", m->dt, 2, (int64_t[]){-1, 10});
    tm_var(m->main, "ce", m->dt, 2, (int64_t[]){-1, 1});
    tm_var(m->main, "loss", m->dt, 1, (int64_t[]){1});
    pe_op *op = pe_block_add_op(&m->main->blocks[0], "softmax_with_cross_entropy");
    pe_op_add_input(op, "Logits", logits);
    pe_op_add_input(op, "Label", "label");
    pe_op_add_output(op, "Softmax", "softmax");
    pe_op_add_output(op, "Loss", "ce");
    tm_op1(m->main, "mean", "ce", "loss");
}

/* MLP (seed 7): x [N, 784] -> fc_0 [N, h0] act0 -> fc_1 [N, h1] act1 -> fc_2 [N, 10] -> loss. */
static inline void tm_mlp(tm_model *m, int64_t h0, const char *act0, int64_t h1, const char *act1) {
    m->cnn = false;
    m->main->random_seed = m->startup->random_seed = 7;
    tm_var(m->main, m->input, m->dt, 2, (int64_t[]){-1, 784});
    tm_fc(m, m->input, 784, h0, "fc_0", act0);
    tm_fc(m, "fc_0.out", h0, h1, "fc_1", act1);
    tm_fc(m, "fc_1.out", h1, 10, "fc_2", NULL);
    tm_loss(m, "fc_2.out");
}

/* CNN (seed 11): input [N, 1, 28, 28] -> conv_0 [N, 8, 14, 14] -> conv_1 [N, 16, 7, 7]
 * -> flat [N, 784] -> fc_0 [N, hidden] relu -> fc_1 [N, 10] -> loss. */
static inline void tm_cnn(tm_model *m, const char *input, int64_t hidden) {
    m->cnn = true;
    m->input = input;
    m->main->random_seed = m->startup->random_seed = 11;
    tm_var(m->main, input, m->dt, 4, (int64_t[]){-1, 1, 28, 28});
    tm_conv_pool(m, input, 1, 8, 28, "conv_0");
    tm_conv_pool(m, "conv_0.out", 8, 16, 14, "conv_1");
    tm_var(m->main, "flat", m->dt, 2, (int64_t[]){-1, 16 * 7 * 7});
    tm_var(m->main, "flat.xshape", m->dt, 5, (int64_t[]){0, -1, 16, 7, 7});
    pe_op *op = tm_op1(m->main, "reshape2", "conv_1.out", "flat");
    pe_op_add_output(op, "XShape", "flat.xshape");
    pe_op_set_ints(op, "shape", (int64_t[]){-1, 16 * 7 * 7}, 2);
    tm_fc(m, "flat", 16 * 7 * 7, hidden, "fc_0", "relu");
    tm_fc(m, "fc_0.out", hidden, 10, "fc_1", NULL);
    tm_loss(m, "fc_1.out");
}

/* Appends the backward and the optimizer ops (momentum: mu 0.9) minimizing "loss". */
static inline void tm_minimize(tm_model *m, pe_optimizer_kind kind, double lr, const pe_param_config *cfg,
                               int n_cfg) {
    pe_optimizer opt;
    pe_optimizer_default(&opt, kind, lr);
    opt.momentum = 0.9;
    if (pe_optimizer_minimize(&opt, m->main, m->startup, "loss", NULL, 0, NULL, 0, cfg, n_cfg, NULL, NULL) != PE_OK)
        fail_msg("minimize: %s", pe_last_error());
}

/* Deterministic batch `step` into caller-made tensors x [rows, ...784 features] and
 * y [rows, 1] int64: a class-dependent pattern plus noise, so training makes progress. */
static inline void tm_fill_batch(int step, pe_tensor *x, pe_tensor *y) {
    int64_t rows = x->dims[0], feat = rows > 0 ? pe_tensor_numel(x) / rows : 0;
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(step + 1);
    for (int64_t r = 0; r < rows; r++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        int cls = (int)(s % 10);
        ((int64_t *)pe_tensor_data(y))[r] = cls;
        for (int64_t j = 0; j < feat; j++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            double v = ((j % 10) == cls ? 0.8 : 0.0) + (double)(s >> 40) / (double)(1 << 24) * 0.4;
            if (x->dtype == PE_DTYPE_FP64) ((double *)pe_tensor_data(x))[r * feat + j] = v;
            else ((float *)pe_tensor_data(x))[r * feat + j] = (float)v;
        }
    }
}

/* A new (zero) input tensor of m's shape with `rows` rows. */
static inline pe_tensor *tm_batch_x(const tm_model *m, int64_t rows) {
    return m->cnn ? tu_tensor(m->dt, 4, (int64_t[]){rows, 1, 28, 28}, NULL)
                  : tu_tensor(m->dt, 2, (int64_t[]){rows, 784}, NULL);
}

/* New tensors *x, *y holding batch `step` of `rows` rows. */
static inline void tm_batch(const tm_model *m, int step, int64_t rows, pe_tensor **x, pe_tensor **y) {
    *x = tm_batch_x(m, rows);
    *y = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){rows, 1}, NULL);
    tm_fill_batch(step, *x, *y);
}

/* out[i] (new tensors) = the parameters as place 0 holds them. */
static inline void tm_fetch_params(const tm_model *m, pe_parallel_executor *pe, pe_tensor **out) {
    for (int i = 0; i < m->n_params; i++) {
        out[i] = pe_tensor_new();
        assert_int_equal(pe_tensor_copy(out[i], pe_scope_find_var(pe_place_scope(pe, 0), m->params[i]), pe_place_cpu(0)),
                         PE_OK);
    }
}

/* Trains m `steps` steps (batches of `rows` rows, fetching the loss) on
 * `places` CPU places with options o (loss_name "loss"), from a fresh scope
 * its startup program initialised; out[i] (new tensors) get the parameters
 * as place 0 holds them. `what` starts the failure messages. */
static inline void tm_train(const tm_model *m, int places, pe_pe_options *o, int steps, int64_t rows, const char *what,
                            pe_tensor **out) {
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m->startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[PE_MAX_PLACES];
    for (int p = 0; p < places; p++) pl[p] = pe_place_cpu(p);
    o->loss_name = "loss";
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, places, m->main, scope, o, &pe) != PE_OK) fail_msg("%s: %s", what, pe_last_error());
    const char *fetch[] = {"loss"};
    pe_tensor *loss = pe_tensor_new();
    for (int s = 0; s < steps; s++) {
        pe_tensor *x, *y;
        tm_batch(m, s, rows, &x, &y);
        pe_feed feed[2] = {{m->input, x}, {"label", y}};
        if (pe_run(pe, feed, 2, fetch, 1, true, &loss) != PE_OK) fail_msg("%s step %d: %s", what, s, pe_last_error());
        pe_tensor_free(x);
        pe_tensor_free(y);
    }
    tm_fetch_params(m, pe, out);
    pe_tensor_free(loss);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
}

static inline void tm_free_params(const tm_model *m, pe_tensor **p) {
    for (int i = 0; i < m->n_params; i++) pe_tensor_free(p[i]);
}

#endif
