/* tests/unit/test_backward.c — the autodiff pass: structure of the
 * appended ops (roles, op_role_var, summed contributions, stop_gradient,
 * no-grad set), gradients of a small graph with a shared var against
 * finite differences, and its errors. */
#include "tests/unit/op_test_util.h"

#include <stdlib.h>
#include <string.h>

static void add_op2(pe_program *p, const char *type, const char *x, const char *y, const char *out) {
    pe_op *op = pe_block_add_op(&p->blocks[0], type);
    pe_op_add_input(op, "X", x);
    if (y) pe_op_add_input(op, "Y", y);
    pe_op_add_output(op, "Out", out);
}

/* h = relu(x + w); u = h * w; loss = mean(u): w is used twice. */
static pe_program *make(bool stop_x) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    int64_t d[2] = {3, 4};
    pe_var *x = pe_block_add_var(b, "x", PE_DTYPE_FP64, 2, d);
    x->stop_gradient = stop_x;
    pe_var *w = pe_block_add_var(b, "w", PE_DTYPE_FP64, 2, d);
    w->persistable = w->is_parameter = true;
    pe_block_add_var(b, "s", PE_DTYPE_FP64, 2, d);
    pe_block_add_var(b, "h", PE_DTYPE_FP64, 2, d);
    pe_block_add_var(b, "u", PE_DTYPE_FP64, 2, d);
    pe_block_add_var(b, "loss", PE_DTYPE_FP64, 1, (int64_t[]){1});
    add_op2(p, "elementwise_add", "x", "w", "s");
    add_op2(p, "relu", "s", NULL, "h");
    add_op2(p, "elementwise_mul", "h", "w", "u");
    add_op2(p, "mean", "u", NULL, "loss");
    return p;
}

static int count_ops(const pe_program *p, const char *type) {
    int n = 0;
    for (int i = 0; i < p->blocks[0].n_ops; i++) n += !strcmp(p->blocks[0].ops[i].type, type);
    return n;
}

static void test_structure(void **state) {
    (void)state;
    pe_program *p = make(true);
    pe_param_grad *pg;
    int n;
    assert_int_equal(pe_append_backward(p, "loss", NULL, 0, NULL, 0, &pg, &n), PE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(pg[0].param, "w");
    assert_string_equal(pg[0].grad, "w@GRAD");
    /* x stops gradients: no x@GRAD anywhere */
    assert_null(pe_block_find_var(&p->blocks[0], "x@GRAD"));
    /* w gets two contributions, summed */
    assert_non_null(pe_block_find_var(&p->blocks[0], "w@GRAD@RENAME@1"));
    assert_int_equal(count_ops(p, "sum"), 1);
    /* roles: the seed is loss|backward, every appended op backward, and the
     * op producing w@GRAD carries op_role_var [w, w@GRAD] */
    const pe_block *b = &p->blocks[0];
    bool seen_seed = false, seen_role_var = false;
    for (int i = 4; i < b->n_ops; i++) {
        const pe_attr *r = pe_op_attr(&b->ops[i], "op_role");
        assert_non_null(r);
        if (!strcmp(b->ops[i].type, "fill_any_like") && r->i == (PE_ROLE_BACKWARD | PE_ROLE_LOSS)) seen_seed = true;
        else assert_int_equal(r->i, PE_ROLE_BACKWARD);
        const pe_attr *rv = pe_op_attr(&b->ops[i], "op_role_var");
        if (rv) {
            assert_int_equal(rv->n, 2);
            assert_string_equal(rv->strings[0], "w");
            assert_string_equal(rv->strings[1], "w@GRAD");
            assert_string_equal(pe_op_output1(&b->ops[i], "Out"), "w@GRAD");
            seen_role_var = true;
        }
    }
    assert_true(seen_seed);
    assert_true(seen_role_var);
    assert_int_equal(pe_program_check(p, "<backward>"), PE_OK);
    pe_param_grads_free(pg, n);
    pe_program_free(p);
}

/* d loss / d w against finite differences, through the executor. */
static void test_values(void **state) {
    (void)state;
    pe_program *p = make(false);
    pe_program *fwd = pe_program_clone(p);
    const char *targets[] = {"loss"}, *inputs[] = {"x", "w"};
    char *grads[2];
    assert_int_equal(pe_gradients(p, targets, 1, inputs, 2, grads), PE_OK);
    assert_string_equal(grads[0], "x@GRAD");
    double xv[12], wv[12];
    for (int i = 0; i < 12; i++) {
        xv[i] = (i % 5) * 0.3 - 0.55;
        wv[i] = (i % 7) * 0.2 - 0.5;
    }
    pe_tensor *x = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){3, 4}, xv);
    pe_tensor *w = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){3, 4}, wv);
    pe_feed feeds[2] = {{"x", x}, {"w", w}};
    const char *fetch[] = {grads[0], grads[1]};
    pe_tensor *g[2] = {pe_tensor_new(), pe_tensor_new()};
    assert_int_equal(tu_run(p, feeds, 2, fetch, 2, g), PE_OK);
    for (int k = 0; k < 2; k++) {
        double *v = pe_tensor_data(k ? w : x);
        for (int e = 0; e < 12; e++) {
            double keep = v[e], eps = 1e-6, l[2];
            for (int s = 0; s < 2; s++) {
                v[e] = keep + (s ? -eps : eps);
                pe_tensor *lt = pe_tensor_new();
                const char *lf[] = {"loss"};
                assert_int_equal(tu_run(fwd, feeds, 2, lf, 1, &lt), PE_OK);
                l[s] = tu_get(lt, 0);
                pe_tensor_free(lt);
            }
            v[e] = keep;
            double num = (l[0] - l[1]) / (2 * eps);
            if (fabs(num - tu_get(g[k], e)) > 1e-7) fail_msg("grad %d[%d]: %g vs %g", k, e, tu_get(g[k], e), num);
        }
    }
    for (int k = 0; k < 2; k++) { pe_tensor_free(g[k]); free(grads[k]); }
    pe_tensor_free(x);
    pe_tensor_free(w);
    pe_program_free(fwd);
    pe_program_free(p);
}

/* pe_gradients_seeded: d(sum v * u)/dx with a fed seed v for target u
 * (u = relu(x + w) * w, so x@GRAD = v * w * (x + w > 0)); w in no_grad
 * gets NULL; a seed of another shape is refused naming it. */
static void test_seeded(void **state) {
    (void)state;
    pe_program *p = make(false);
    pe_block_add_var(&p->blocks[0], "v", PE_DTYPE_FP64, 2, (int64_t[]){3, 4});
    pe_block_add_var(&p->blocks[0], "v_bad", PE_DTYPE_FP64, 2, (int64_t[]){4, 3});
    const char *targets[] = {"u"}, *seeds[] = {"v"}, *bad[] = {"v_bad"}, *inputs[] = {"x", "w"}, *nog[] = {"w"};
    char *grads[2];
    pe_program *q = pe_program_clone(p);
    assert_int_equal(pe_gradients_seeded(q, targets, bad, 1, inputs, 2, NULL, 0, grads), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "'v_bad'"));
    pe_program_free(q);
    assert_int_equal(pe_gradients_seeded(p, targets, seeds, 1, inputs, 2, nog, 1, grads), PE_OK);
    assert_string_equal(grads[0], "x@GRAD");
    assert_null(grads[1]);
    assert_int_equal(count_ops(p, "assign"), 1);
    assert_int_equal(count_ops(p, "fill_any_like"), 0);
    double xv[12], wv[12], vv[12];
    for (int i = 0; i < 12; i++) {
        xv[i] = (i % 5) * 0.3 - 0.55;
        wv[i] = (i % 7) * 0.2 - 0.5;
        vv[i] = i * 0.25 - 1;
    }
    pe_tensor *x = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){3, 4}, xv);
    pe_tensor *w = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){3, 4}, wv);
    pe_tensor *v = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){3, 4}, vv);
    pe_feed feeds[3] = {{"x", x}, {"w", w}, {"v", v}};
    const char *fetch[] = {"x@GRAD"};
    pe_tensor *g = pe_tensor_new();
    assert_int_equal(tu_run(p, feeds, 3, fetch, 1, &g), PE_OK);
    for (int e = 0; e < 12; e++) {
        double want = vv[e] * wv[e] * (xv[e] + wv[e] > 0 ? 1 : 0);
        if (fabs(tu_get(g, e) - want) > 1e-12) fail_msg("x@GRAD[%d]: %g vs %g", e, tu_get(g, e), want);
    }
    free(grads[0]);
    pe_tensor_free(g);
    pe_tensor_free(x);
    pe_tensor_free(w);
    pe_tensor_free(v);
    pe_program_free(p);
}

static void test_no_grad_set_and_errors(void **state) {
    (void)state;
    pe_program *p = make(false);
    const char *nog[] = {"s"};
    pe_param_grad *pg;
    int n;
    /* blocking s cuts the path x -> loss through s; w still reaches via u */
    assert_int_equal(pe_append_backward(p, "loss", NULL, 0, nog, 1, &pg, &n), PE_OK);
    assert_null(pe_block_find_var(&p->blocks[0], "x@GRAD"));
    assert_null(pe_block_find_var(&p->blocks[0], "w@GRAD@RENAME@1"));
    assert_int_equal(n, 1);
    pe_param_grads_free(pg, n);
    pe_program_free(p);
    p = make(false);
    assert_int_equal(pe_append_backward(p, "nope", NULL, 0, NULL, 0, NULL, NULL), PE_ERR_NOT_FOUND);
    assert_non_null(strstr(pe_last_error(), "nope"));
    pe_program_free(p);
    /* an op without a gradient on the path */
    p = pe_program_new();
    pe_block *b = &p->blocks[0];
    pe_var *w = pe_block_add_var(b, "w", PE_DTYPE_FP32, 2, (int64_t[]){2, 3});
    w->is_parameter = w->persistable = true;
    pe_block_add_var(b, "t", PE_DTYPE_FP32, 2, (int64_t[]){2, 3});
    pe_block_add_var(b, "loss", PE_DTYPE_FP32, 1, (int64_t[]){1});
    pe_op *op = pe_block_add_op(b, "top_k");
    pe_op_add_input(op, "X", "w");
    pe_op_add_output(op, "Out", "t");
    pe_block_add_var(b, "idx", PE_DTYPE_INT64, 2, (int64_t[]){2, 1});
    pe_op_add_output(op, "Indices", "idx");
    add_op2(p, "mean", "t", NULL, "loss");
    assert_int_equal(pe_append_backward(p, "loss", NULL, 0, NULL, 0, NULL, NULL), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "top_k"));
    assert_non_null(strstr(pe_last_error(), "no gradient"));
    pe_program_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_seeded),
        cmocka_unit_test(test_no_grad_set_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
