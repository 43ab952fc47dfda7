/* tests/unit/test_grad_tensor.c — gradients of the tensor family against
 * central finite differences in fp64: reshape2 with 0 / -1 (with XShape and
 * without), transpose2 on 4-D inputs, slice with negative and clamped
 * bounds and decrease_axis, flatten_contiguous_range, flatten2, squeeze2,
 * unsqueeze2 (tests/unit/grad_check.h), and — through a local variant of
 * the check that handles duplicable slots — concat of 3 inputs on axis 1
 * and on a negative axis (one input without a gradient) and split by num
 * and by sections (one output unused, so its gradient is zeros). Then the
 * gradient kernels on large inputs: bitwise equal on 1 and 2 threads. */
#include "tests/unit/grad_check.h"

#include <string.h>

#define D(...) (int64_t[]){__VA_ARGS__}
#define NDIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define RAND(seed, ...) gc_rand(NDIMS(__VA_ARGS__), D(__VA_ARGS__), seed)

/* ---- attrs -------------------------------------------------------------------- */

static void shape_0m1(pe_op *op) { pe_op_set_ints(op, "shape", D(0, -1), 2); }
static void shape_m1_0_2(pe_op *op) { pe_op_set_ints(op, "shape", D(-1, 0, 2), 3); }
static void perm_0231(pe_op *op) { pe_op_set_ints(op, "axis", D(0, 2, 3, 1), 4); }
static void perm_3102(pe_op *op) { pe_op_set_ints(op, "axis", D(3, 1, 0, -2), 4); }
static void slice_neg_clamp(pe_op *op) { /* [3, 4, 5]: axis 0 [-2, 100) -> 1..3, axis 2 [1, -1) -> 1..4 */
    pe_op_set_ints(op, "axes", D(0, 2), 2);
    pe_op_set_ints(op, "starts", D(-2, 1), 2);
    pe_op_set_ints(op, "ends", D(100, -1), 2);
}
static void slice_decrease(pe_op *op) { /* [3, 4, 5]: axis 1 [2, 3) dropped, axis -1 [-100, 2) */
    pe_op_set_ints(op, "axes", D(1, -1), 2);
    pe_op_set_ints(op, "starts", D(2, -100), 2);
    pe_op_set_ints(op, "ends", D(3, 2), 2);
    pe_op_set_ints(op, "decrease_axis", D(1), 1);
}
static void slice_inner(pe_op *op) { /* [2, 3, 4]: inner axis only */
    pe_op_set_ints(op, "axes", D(2), 1);
    pe_op_set_ints(op, "starts", D(1), 1);
    pe_op_set_ints(op, "ends", D(3), 1);
}
static void flat_1_2(pe_op *op) {
    pe_op_set_int(op, "start_axis", 1);
    pe_op_set_int(op, "stop_axis", 2);
}
static void flat2_ax2(pe_op *op) { pe_op_set_int(op, "axis", 2); }
static void sq_axes(pe_op *op) { pe_op_set_ints(op, "axes", D(1, -1), 2); }
static void unsq_axes(pe_op *op) { pe_op_set_ints(op, "axes", D(0, 2, -1), 3); }

/* ---- the table (single-arg slots) ----------------------------------------------- */

typedef gc_case (*case_fn)(void);

#define UN(NAME, OP, X, ATTRS, XSHAPE)                                                        \
    static gc_case NAME(void) {                                                              \
        return (gc_case){.op = OP, .in = {{"X", X, true}}, .n_in = 1, .out = {"Out"},         \
                         .n_out = 1, .extra_out = {"XShape"}, .n_extra_out = XSHAPE,          \
                         .set_attrs = ATTRS};                                                 \
    }

UN(reshape_0m1, "reshape2", RAND(1, 2, 3, 4), shape_0m1, 1)
UN(reshape_m1_0_2, "reshape2", RAND(2, 4, 3, 2), shape_m1_0_2, 1)
UN(reshape_no_xshape, "reshape2", RAND(3, 2, 6), shape_m1_0_2, 0) /* grad op reads X's shape */
UN(transpose_0231, "transpose2", RAND(4, 2, 3, 4, 2), perm_0231, 1)
UN(transpose_3102, "transpose2", RAND(5, 2, 3, 2, 4), perm_3102, 1)
UN(transpose_no_xshape, "transpose2", RAND(6, 3, 1, 2, 2), perm_3102, 0)
UN(flatten_1_2, "flatten_contiguous_range", RAND(7, 2, 3, 2, 2), flat_1_2, 1)
UN(flatten_default, "flatten_contiguous_range", RAND(8, 2, 3, 2), NULL, 0)
UN(flatten2_c, "flatten2", RAND(9, 2, 3, 2, 2), flat2_ax2, 1)
UN(squeeze_c, "squeeze2", RAND(10, 3, 1, 4, 1), sq_axes, 1)
UN(squeeze_all_c, "squeeze2", RAND(11, 1, 5, 1), NULL, 0)
UN(unsqueeze_c, "unsqueeze2", RAND(12, 3, 4), unsq_axes, 1)

#define SLICE(NAME, X, ATTRS)                                                                 \
    static gc_case NAME(void) {                                                              \
        return (gc_case){.op = "slice", .in = {{"Input", X, true}}, .n_in = 1, .out = {"Out"}, \
                         .n_out = 1, .set_attrs = ATTRS};                                     \
    }
SLICE(slice_neg_clamp_c, RAND(20, 3, 4, 5), slice_neg_clamp)
SLICE(slice_decrease_c, RAND(21, 3, 4, 5), slice_decrease)
SLICE(slice_inner_c, RAND(22, 2, 3, 4), slice_inner)

static const case_fn k_cases[] = {
    reshape_0m1, reshape_m1_0_2, reshape_no_xshape, transpose_0231, transpose_3102, transpose_no_xshape,
    flatten_1_2, flatten_default, flatten2_c, squeeze_c, squeeze_all_c, unsqueeze_c,
    slice_neg_clamp_c, slice_decrease_c, slice_inner_c,
};

static void test_finite_differences(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        gc_case c = k_cases[i]();
        gc_check(&c);
    }
}

/* ---- duplicable slots: concat's X*, split's Out* ---------------------------------- */

/* The check of grad_check.h for one op whose input slot `in_slot` takes
 * n_in args and whose output slot `out_slot` gives n_out args; outputs
 * listed in `unused` stay out of the loss (their gradient is zeros). */
typedef struct {
    const char *op;
    const char *in_slot;
    pe_tensor *in[4];
    bool diff[4];
    int n_in;
    const char *out_slot;
    int n_out;
    bool unused[4];
    void (*set_attrs)(pe_op *op);
} multi_case;

static pe_program *multi_forward(const multi_case *c, pe_tensor **outs) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    char name[64];
    pe_op *op = pe_block_add_op(b, c->op);
    for (int i = 0; i < c->n_in; i++) {
        snprintf(name, sizeof name, "in_%d", i);
        pe_var *v = tu_declare(p, name, c->in[i]);
        v->stop_gradient = !c->diff[i];
        pe_op_add_input(&b->ops[0], c->in_slot, name);
    }
    for (int k = 0; k < c->n_out; k++) {
        snprintf(name, sizeof name, "out_%d", k);
        if (outs) tu_declare(p, name, outs[k]);
        else pe_block_add_var(b, name, PE_DTYPE_FP64, 0, NULL);
        pe_op_add_output(&b->ops[0], c->out_slot, name);
    }
    if (c->set_attrs) c->set_attrs(&b->ops[0]);
    (void)op;
    if (!outs) return p;
    pe_block_add_var(b, "loss", PE_DTYPE_FP64, 1, D(1));
    pe_op *sum = NULL;
    for (int k = 0; k < c->n_out; k++) {
        if (c->unused[k]) continue;
        char o[32], r[32], pr[32], m[32];
        snprintf(o, sizeof o, "out_%d", k);
        snprintf(r, sizeof r, "r_%d", k);
        snprintf(pr, sizeof pr, "prod_%d", k);
        snprintf(m, sizeof m, "mean_%d", k);
        pe_var *rv = tu_declare(p, r, outs[k]);
        rv->stop_gradient = true;
        tu_declare(p, pr, outs[k]);
        pe_block_add_var(b, m, PE_DTYPE_FP64, 1, D(1));
        op = pe_block_add_op(b, "elementwise_mul");
        pe_op_add_input(op, "X", o);
        pe_op_add_input(op, "Y", r);
        pe_op_add_output(op, "Out", pr);
        op = pe_block_add_op(b, "mean");
        pe_op_add_input(op, "X", pr);
        pe_op_add_output(op, "Out", m);
    }
    sum = pe_block_add_op(b, "sum");
    for (int k = 0; k < c->n_out; k++) {
        if (c->unused[k]) continue;
        snprintf(name, sizeof name, "mean_%d", k);
        pe_op_add_input(sum, "X", name);
    }
    pe_op_add_output(sum, "Out", "loss");
    return p;
}

static void multi_check(multi_case *c) {
    const double eps = 1e-6, tol = 1e-6;
    char in_names[4][16], out_names[4][16], r_names[4][16];
    pe_feed feeds[8];
    const char *fetch[4];
    pe_tensor *outs[4];
    for (int i = 0; i < c->n_in; i++) {
        snprintf(in_names[i], sizeof in_names[i], "in_%d", i);
        feeds[i] = (pe_feed){in_names[i], c->in[i]};
    }
    for (int k = 0; k < c->n_out; k++) {
        snprintf(out_names[k], sizeof out_names[k], "out_%d", k);
        fetch[k] = out_names[k];
        outs[k] = pe_tensor_new();
    }
    pe_program *p0 = multi_forward(c, NULL);
    assert_int_equal(tu_run(p0, feeds, c->n_in, fetch, c->n_out, outs), PE_OK);
    pe_program_free(p0);
    pe_program *fwd = multi_forward(c, outs);
    pe_program *p = pe_program_clone(fwd);
    const char *targets[] = {"loss"}, *srcs[4];
    int idx[4], nd = 0;
    for (int i = 0; i < c->n_in; i++)
        if (c->diff[i]) { srcs[nd] = in_names[i]; idx[nd++] = i; }
    char *gn[4] = {0};
    if (pe_gradients(p, targets, 1, srcs, nd, gn) != PE_OK) fail_msg("gradients: %s", pe_last_error());
    int nf = c->n_in;
    pe_tensor *rs[4] = {0};
    for (int k = 0; k < c->n_out; k++) {
        if (c->unused[k]) continue;
        rs[k] = gc_rand(outs[k]->ndim, outs[k]->dims, 500 + (uint64_t)k);
        snprintf(r_names[k], sizeof r_names[k], "r_%d", k);
        feeds[nf++] = (pe_feed){r_names[k], rs[k]};
    }
    pe_tensor *g[4];
    for (int j = 0; j < nd; j++) g[j] = pe_tensor_new();
    assert_int_equal(tu_run(p, feeds, nf, (const char *const *)gn, nd, g), PE_OK);
    pe_scope *s = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    for (int j = 0; j < nd; j++) {
        pe_tensor *x = c->in[idx[j]];
        tu_assert_dims(g[j], x->ndim, x->dims);
        double *xd = pe_tensor_data(x);
        for (int64_t e = 0; e < pe_tensor_numel(x); e++) {
            double keep = xd[e];
            xd[e] = keep + eps;
            double lp = gc_loss(ex, fwd, s, feeds, nf);
            xd[e] = keep - eps;
            double lm = gc_loss(ex, fwd, s, feeds, nf);
            xd[e] = keep;
            double num = (lp - lm) / (2 * eps), ana = tu_get(g[j], e);
            if (!(fabs(num - ana) <= tol * (1 + fabs(num))))
                fail_msg("%s: d loss / d in_%d[%lld]: autodiff %.10g, finite differences %.10g", c->op, idx[j],
                         (long long)e, ana, num);
        }
        pe_tensor_free(g[j]);
        free(gn[j]);
    }
    pe_executor_free(ex);
    pe_scope_free(s);
    for (int k = 0; k < c->n_out; k++) {
        pe_tensor_free(outs[k]);
        pe_tensor_free(rs[k]);
    }
    for (int i = 0; i < c->n_in; i++) pe_tensor_free(c->in[i]);
    pe_program_free(p);
    pe_program_free(fwd);
}

static void axis1(pe_op *op) { pe_op_set_int(op, "axis", 1); }
static void axis_m1(pe_op *op) { pe_op_set_int(op, "axis", -1); }
static void split_num3(pe_op *op) {
    pe_op_set_int(op, "num", 3);
    pe_op_set_int(op, "axis", 1);
}
static void split_sections(pe_op *op) {
    pe_op_set_ints(op, "sections", D(2, -1, 1), 3);
    pe_op_set_int(op, "axis", -1);
}

static void test_concat_split_finite_differences(void **state) {
    (void)state;
    multi_case c1 = {.op = "concat", .in_slot = "X", .in = {RAND(30, 2, 1, 3), RAND(31, 2, 3, 3), RAND(32, 2, 2, 3)},
                     .diff = {true, true, true}, .n_in = 3, .out_slot = "Out", .n_out = 1, .set_attrs = axis1};
    multi_check(&c1);
    multi_case c2 = {.op = "concat", .in_slot = "X", .in = {RAND(33, 2, 3, 2), RAND(34, 2, 3, 1), RAND(35, 2, 3, 3)},
                     .diff = {true, false, true}, .n_in = 3, .out_slot = "Out", .n_out = 1, .set_attrs = axis_m1};
    multi_check(&c2);
    multi_case c3 = {.op = "split", .in_slot = "X", .in = {RAND(36, 2, 6, 2)}, .diff = {true}, .n_in = 1,
                     .out_slot = "Out", .n_out = 3, .set_attrs = split_num3};
    multi_check(&c3);
    multi_case c4 = {.op = "split", .in_slot = "X", .in = {RAND(37, 3, 2, 6)}, .diff = {true}, .n_in = 1,
                     .out_slot = "Out", .n_out = 3, .unused = {false, true, false}, .set_attrs = split_sections};
    multi_check(&c4);
}

/* ---- large inputs: 1 vs 2 threads --------------------------------------------------- */

/* d loss / d x for loss = sum(op(x) * r) on `nt` threads. */
static pe_tensor *big_grad(const char *type, const char *in_slot, void (*attrs)(pe_op *), pe_tensor *x, int nt) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    tu_declare(p, "x", x);
    pe_op *op = pe_block_add_op(b, type);
    pe_op_add_input(op, in_slot, "x");
    pe_op_add_output(op, "Out", "y");
    pe_block_add_var(b, "y", x->dtype, 0, NULL);
    if (attrs) attrs(op);
    pe_block_add_var(b, "loss", x->dtype, 1, D(1));
    op = pe_block_add_op(b, "reduce_sum");
    pe_op_add_input(op, "X", "y");
    pe_op_add_output(op, "Out", "loss");
    pe_op_set_bool(op, "reduce_all", true);
    char *gn = NULL;
    const char *t[] = {"loss"}, *s[] = {"x"};
    assert_int_equal(pe_gradients(p, t, 1, s, 1, &gn), PE_OK);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, nt);
    pe_tensor *g = pe_tensor_new();
    pe_feed f = {"x", x};
    const char *fetch = gn;
    if (pe_executor_run(ex, p, 0, scope, &f, 1, &fetch, 1, &g) != PE_OK) fail_msg("%s: %s", type, pe_last_error());
    pe_executor_free(ex);
    pe_scope_free(scope);
    free(gn);
    pe_program_free(p);
    return g;
}

static void big_slice(pe_op *op) {
    pe_op_set_ints(op, "axes", D(0, 1), 2);
    pe_op_set_ints(op, "starts", D(3, 5), 2);
    pe_op_set_ints(op, "ends", D(-3, 1000), 2);
}
static void big_perm(pe_op *op) { pe_op_set_ints(op, "axis", D(1, 0, 2), 3); }

static void test_big_thread_invariance(void **state) {
    (void)state;
    pe_tensor *x = RAND(40, 200, 300);
    pe_tensor *x3 = RAND(41, 64, 50, 40);
    struct {
        const char *type, *slot;
        void (*attrs)(pe_op *);
        pe_tensor *x;
    } rows[] = {{"slice", "Input", big_slice, x}, {"transpose2", "X", big_perm, x3}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        pe_tensor *g1 = big_grad(rows[i].type, rows[i].slot, rows[i].attrs, rows[i].x, 1);
        pe_tensor *g2 = big_grad(rows[i].type, rows[i].slot, rows[i].attrs, rows[i].x, 2);
        tu_assert_dims(g1, rows[i].x->ndim, rows[i].x->dims);
        assert_int_equal(pe_tensor_nbytes(g1), pe_tensor_nbytes(g2));
        assert_memory_equal(pe_tensor_data(g1), pe_tensor_data(g2), pe_tensor_nbytes(g1));
        pe_tensor_free(g1);
        pe_tensor_free(g2);
    }
    /* slice's gradient: ones in the region [3, 197) x [5, 300), zeros elsewhere */
    pe_tensor *g = big_grad("slice", "Input", big_slice, x, 2);
    for (int64_t r = 0; r < 200; r++)
        for (int64_t c = 0; c < 300; c++)
            if (tu_get(g, r * 300 + c) != (r >= 3 && r < 197 && c >= 5 ? 1.0 : 0.0))
                fail_msg("slice grad [%lld, %lld] = %g", (long long)r, (long long)c, tu_get(g, r * 300 + c));
    pe_tensor_free(g);
    pe_tensor_free(x);
    pe_tensor_free(x3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_concat_split_finite_differences),
        cmocka_unit_test(test_big_thread_invariance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
