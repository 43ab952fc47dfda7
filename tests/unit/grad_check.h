/* tests/unit/grad_check.h — gradient checks for one op (header-only).
 *
 *     static void attrs(pe_op *op) { pe_op_set_int(op, "axis", 1); }
 *     gc_case c = {
 *         .op = "elementwise_add",
 *         .in = {{"X", gc_rand(2, (int64_t[]){3, 4}, 1), true},
 *                {"Y", gc_rand(1, (int64_t[]){4}, 2), true}},
 *         .n_in = 2, .out = {"Out"}, .n_out = 1, .set_attrs = attrs,
 *     };
 *     gc_check(&c);       // fp64: autodiff vs central finite differences
 *
 * The loss is L = sum_k mean(out_k * R_k) with fixed random R_k, so every
 * output gets a non-trivial upstream gradient. The autodiff pass
 * (pe_gradients) builds the backward ops through each op's grad maker; the
 * check compares every gradient element with (L(x+e) - L(x-e)) / 2e.
 */
#ifndef PE_TEST_GRAD_CHECK_H
#define PE_TEST_GRAD_CHECK_H

#include "tests/unit/op_test_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct gc_input {
    const char *slot;
    pe_tensor *value;    /* owned by the case; freed by gc_check */
    bool diff;           /* check the gradient of this input */
} gc_input;

typedef struct gc_case {
    const char *op;
    gc_input in[8];
    int n_in;
    const char *out[6];  /* output slots whose (float) values enter the loss */
    int n_out;
    const char *extra_out[6]; /* output slots that exist but stay out of the loss */
    int n_extra_out;
    void (*set_attrs)(pe_op *op);
    double eps;          /* default 1e-6 */
    double tol;          /* default 1e-6 (abs + rel) */
    int max_elems;       /* per input, default 40 (spread over the tensor) */
} gc_case;

static inline uint64_t gc_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

/* fp64 tensor with values uniform in [-1, 1) from seed. */
static inline pe_tensor *gc_rand(int ndim, const int64_t *dims, uint64_t seed) {
    pe_tensor *t = tu_tensor(PE_DTYPE_FP64, ndim, dims, NULL);
    uint64_t s = seed * 2654435761u + 88172645463325252ull;
    double *d = pe_tensor_data(t);
    for (int64_t i = 0; i < pe_tensor_numel(t); i++) d[i] = (double)(gc_next(&s) >> 11) / 9007199254740992.0 * 2 - 1;
    return t;
}

static inline void gc_name(char *buf, size_t n, const char *prefix, const char *slot) {
    snprintf(buf, n, "%s_%s", prefix, slot);
}

/* Builds the forward program (op + loss); returns the loss var name. */
static inline pe_program *gc_forward(const gc_case *c, pe_tensor **out_vals) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    char name[128];
    for (int i = 0; i < c->n_in; i++) {
        gc_name(name, sizeof name, "in", c->in[i].slot);
        pe_var *v = pe_block_add_var(b, name, c->in[i].value->dtype, c->in[i].value->ndim, c->in[i].value->dims);
        assert_non_null(v);
        v->stop_gradient = !c->in[i].diff;
    }
    pe_op *op = pe_block_add_op(b, c->op);
    for (int i = 0; i < c->n_in; i++) {
        gc_name(name, sizeof name, "in", c->in[i].slot);
        pe_op_add_input(op, c->in[i].slot, name);
    }
    for (int k = 0; k < c->n_out + c->n_extra_out; k++) {
        const char *slot = k < c->n_out ? c->out[k] : c->extra_out[k - c->n_out];
        gc_name(name, sizeof name, "out", slot);
        pe_dtype dt = out_vals && out_vals[k] ? out_vals[k]->dtype : PE_DTYPE_FP64;
        int nd = out_vals && out_vals[k] ? out_vals[k]->ndim : 0;
        pe_block_add_var(b, name, dt, nd, out_vals && out_vals[k] ? out_vals[k]->dims : NULL);
        pe_op_add_output(op, slot, name);
    }
    if (c->set_attrs) c->set_attrs(&b->ops[0]);
    if (!out_vals) return p;
    /* loss = sum_k mean(out_k * r_k) */
    pe_op *sum = NULL;
    char prod[128], m[128], r[128];
    for (int k = 0; k < c->n_out; k++) {
        gc_name(name, sizeof name, "out", c->out[k]);
        gc_name(r, sizeof r, "r", c->out[k]);
        gc_name(prod, sizeof prod, "prod", c->out[k]);
        gc_name(m, sizeof m, "mean", c->out[k]);
        pe_var *rv = pe_block_add_var(b, r, PE_DTYPE_FP64, out_vals[k]->ndim, out_vals[k]->dims);
        rv->stop_gradient = true;
        pe_block_add_var(b, prod, PE_DTYPE_FP64, out_vals[k]->ndim, out_vals[k]->dims);
        pe_block_add_var(b, m, PE_DTYPE_FP64, 1, (int64_t[]){1});
        op = pe_block_add_op(b, "elementwise_mul");
        pe_op_add_input(op, "X", name);
        pe_op_add_input(op, "Y", r);
        pe_op_add_output(op, "Out", prod);
        op = pe_block_add_op(b, "mean");
        pe_op_add_input(op, "X", prod);
        pe_op_add_output(op, "Out", m);
    }
    pe_block_add_var(b, "loss", PE_DTYPE_FP64, 1, (int64_t[]){1});
    sum = pe_block_add_op(b, "sum");
    for (int k = 0; k < c->n_out; k++) {
        gc_name(m, sizeof m, "mean", c->out[k]);
        pe_op_add_input(sum, "X", m);
    }
    pe_op_add_output(sum, "Out", "loss");
    return p;
}

static inline double gc_loss(pe_executor *ex, pe_program *p, pe_scope *s, pe_feed *feeds, int n) {
    const char *fetch[] = {"loss"};
    pe_tensor *l = pe_tensor_new();
    tu_declare_outputs(p, feeds, n);
    pe_status st = pe_executor_run(ex, p, 0, s, feeds, n, fetch, 1, &l);
    if (st != PE_OK) fail_msg("forward run failed: %s", pe_last_error());
    double v = tu_get(l, 0);
    pe_tensor_free(l);
    return v;
}

static inline void gc_check(gc_case *c) {
    double eps = c->eps > 0 ? c->eps : 1e-6, tol = c->tol > 0 ? c->tol : 1e-6;
    int max_elems = c->max_elems > 0 ? c->max_elems : 40;
    int n_outs = c->n_out + c->n_extra_out;
    char name[128];
    /* 1. output shapes */
    pe_program *p0 = gc_forward(c, NULL);
    pe_feed feeds[16];
    char in_names[8][128], r_names[6][128];
    for (int i = 0; i < c->n_in; i++) {
        gc_name(in_names[i], sizeof in_names[i], "in", c->in[i].slot);
        feeds[i] = (pe_feed){in_names[i], c->in[i].value};
    }
    char out_names[12][128];
    const char *fetch[12];
    pe_tensor *outs[12];
    for (int k = 0; k < n_outs; k++) {
        gc_name(out_names[k], sizeof out_names[k], "out", k < c->n_out ? c->out[k] : c->extra_out[k - c->n_out]);
        fetch[k] = out_names[k];
        outs[k] = pe_tensor_new();
    }
    assert_int_equal(tu_run(p0, feeds, c->n_in, fetch, n_outs, outs), PE_OK);
    pe_program_free(p0);
    /* 2. program with loss + backward */
    pe_program *fwd = gc_forward(c, outs);
    pe_program *p = pe_program_clone(fwd);
    const char *targets[] = {"loss"};
    const char *inputs[8];
    char *grads[8] = {0};
    int n_diff = 0, diff_idx[8];
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].diff) { inputs[n_diff] = in_names[i]; diff_idx[n_diff++] = i; }
    if (pe_gradients(p, targets, 1, inputs, n_diff, grads) != PE_OK) fail_msg("gradients: %s", pe_last_error());
    pe_tensor *rs[6];
    int n_feeds = c->n_in;
    for (int k = 0; k < c->n_out; k++) {
        rs[k] = gc_rand(outs[k]->ndim, outs[k]->dims, 1000 + (uint64_t)k);
        gc_name(r_names[k], sizeof r_names[k], "r", c->out[k]);
        feeds[n_feeds++] = (pe_feed){r_names[k], rs[k]};
    }
    pe_tensor *g[8];
    const char *gf[8];
    for (int j = 0; j < n_diff; j++) {
        if (!grads[j]) fail_msg("input %s got no gradient", inputs[j]);
        gf[j] = grads[j];
        g[j] = pe_tensor_new();
    }
    assert_int_equal(tu_run(p, feeds, n_feeds, gf, n_diff, g), PE_OK);
    /* 3. central differences on the forward-only program */
    pe_scope *s = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    for (int j = 0; j < n_diff; j++) {
        pe_tensor *x = c->in[diff_idx[j]].value;
        assert_int_equal(x->dtype, PE_DTYPE_FP64);
        double *xd = pe_tensor_data(x);
        int64_t n = pe_tensor_numel(x);
        tu_assert_dims(g[j], x->ndim, x->dims);
        int64_t step = n > max_elems ? n / max_elems : 1;
        for (int64_t e = 0; e < n; e += step) {
            double keep = xd[e];
            xd[e] = keep + eps;
            double lp = gc_loss(ex, fwd, s, feeds, n_feeds);
            xd[e] = keep - eps;
            double lm = gc_loss(ex, fwd, s, feeds, n_feeds);
            xd[e] = keep;
            double num = (lp - lm) / (2 * eps), ana = tu_get(g[j], e);
            if (!(fabs(num - ana) <= tol * (1 + fabs(num))))
                fail_msg("%s: d loss / d %s[%lld]: autodiff %.10g, finite differences %.10g", c->op, inputs[j],
                         (long long)e, ana, num);
        }
        (void)name;
    }
    pe_executor_free(ex);
    pe_scope_free(s);
    for (int j = 0; j < n_diff; j++) { pe_tensor_free(g[j]); free(grads[j]); }
    for (int k = 0; k < c->n_out; k++) pe_tensor_free(rs[k]);
    for (int k = 0; k < n_outs; k++) pe_tensor_free(outs[k]);
    for (int i = 0; i < c->n_in; i++) pe_tensor_free(c->in[i].value);
    pe_program_free(p);
    pe_program_free(fwd);
}

#endif
