/* tests/unit/test_fusion.c — the fusion passes (issue 5, point 2) and the
 * pass manager (point 1).
 *
 *  - structure: each pass on small programs gives fewer ops and the right
 *    fused op, respects protected and persistable vars, fuses nothing when
 *    an intermediate is used elsewhere, keeps op_role_var pairs;
 *  - numbers, op by op: a program of unfused ops with its backward and the
 *    same program after the pass give bitwise-identical outputs and
 *    gradients (fc with every activation and a 3-D input, add+act over
 *    every broadcast kind, with and without each operand's gradient);
 *  - training: the MLP and the CNN (float64) trained with momentum on 1 and
 *    3 places under every combination of fuse_gemm_epilogue,
 *    fuse_elewise_add_act_ops and fuse_all_optimizer_ops end with
 *    parameters allclose (rtol 1e-5) to the run with every switch off (in
 *    fact bitwise: the fused kernels do the same arithmetic); sgd and adam
 *    (with per-parameter learning rates) through the merged optimizer ops;
 *  - a fetch of a var a fusion removed still works (the executor switches
 *    to the graph it built at construction with the removed vars kept) and
 *    gives the unfused value; no training calls the pass manager after the
 *    executor's construction (pe_pass_manager_calls);
 *  - pe_build_program (the program-level passes alone, pe.jit's fusion of
 *    a traced forward + backward): a fused copy, the input untouched, the
 *    report's counts, protected vars kept, clear errors;
 *  - DOT dumps: debug_graphviz_path writes one file per pass and the final
 *    SSA graph, each a non-empty "digraph" with balanced braces;
 *  - collectives start as soon as their gradients are ready: on 2 places,
 *    no allreduce, fuse_all_reduce_ops bucket or sharded update of the
 *    later layers depends on the op that makes the last gradient.
 */
#include "tests/unit/models.h"
#include "graph/program_dot.h"
#include "passes/fuse.h"
#include "passes/pass_manager.h"
#include "pe/build.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- program helpers ------------------------------------------------------ */

static int count_ops(const pe_program *p, const char *type) {
    int n = 0;
    for (int i = 0; i < p->blocks[0].n_ops; i++) n += !strcmp(p->blocks[0].ops[i].type, type);
    return n;
}

static const pe_op *find_op(const pe_program *p, const char *type) {
    for (int i = 0; i < p->blocks[0].n_ops; i++)
        if (!strcmp(p->blocks[0].ops[i].type, type)) return &p->blocks[0].ops[i];
    return NULL;
}

static bool has_role_var(const pe_op *op, const char *name) {
    const pe_attr *a = pe_op_attr(op, "op_role_var");
    for (int i = 0; a && i < a->n; i++)
        if (!strcmp(a->strings[i], name)) return true;
    return false;
}

typedef pe_status (*pass_fn)(pe_program *, const pe_fuse_opts *, int *);

/* Runs a pass with the given protected names; returns the fused count. */
static int run_pass(pass_fn f, pe_program *p, const char *const *protect, int n_protect) {
    pe_strmap m = {0};
    for (int i = 0; i < n_protect; i++) assert_int_equal(pe_strmap_put(&m, protect[i], 1), 0);
    pe_fuse_opts o = {.protect = &m};
    int n = -1;
    if (f(p, &o, &n) != PE_OK) fail_msg("pass: %s", pe_last_error());
    pe_strmap_free(&m);
    assert_int_equal(pe_program_check(p, "fused program"), PE_OK);
    return n;
}

/* Deterministic values in [-1, 1) (xorshift). */
static pe_tensor *rnd(pe_dtype dt, int ndim, const int64_t *dims, uint64_t seed) {
    pe_tensor *t = tu_tensor(dt, ndim, dims, NULL);
    int64_t n = pe_tensor_numel(t);
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (seed * 0xBF58476D1CE4E5B9ull);
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        double v = (double)(s >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
        if (dt == PE_DTYPE_FP32) ((float *)pe_tensor_data(t))[i] = (float)v;
        else ((double *)pe_tensor_data(t))[i] = v;
    }
    return t;
}

/* out -> loss = mean(out * r): a non-uniform gradient reaches out. */
static void add_loss(pe_program *p, const char *out, pe_dtype dt, int ndim, const int64_t *dims) {
    tm_var(p, "r", dt, ndim, dims);
    tm_var(p, "weighted", dt, ndim, dims);
    tm_var(p, "loss", dt, 1, (int64_t[]){1});
    tm_op2(p, "elementwise_mul", out, "r", "weighted");
    pe_op *m = pe_block_add_op(&p->blocks[0], "mean");
    pe_op_add_input(m, "X", "weighted");
    pe_op_add_output(m, "Out", "loss");
}

static void backward(pe_program *p, const char *const *wrt, int n) {
    if (pe_append_backward(p, "loss", wrt, n, NULL, 0, NULL, NULL) != PE_OK) fail_msg("backward: %s", pe_last_error());
}

/* Runs p and q (p after a pass) on the same feeds; every fetch must be
 * bitwise equal. */
static void assert_same_results(const pe_program *p, const pe_program *q, const pe_feed *feeds, int n_feeds,
                                const char *const *fetch, int n_fetch) {
    pe_tensor *a[8], *b[8];
    for (int i = 0; i < n_fetch; i++) {
        a[i] = pe_tensor_new();
        b[i] = pe_tensor_new();
    }
    assert_int_equal(tu_run(p, feeds, n_feeds, fetch, n_fetch, a), PE_OK);
    assert_int_equal(tu_run(q, feeds, n_feeds, fetch, n_fetch, b), PE_OK);
    for (int i = 0; i < n_fetch; i++) {
        assert_int_equal(a[i]->dtype, b[i]->dtype);
        assert_int_equal(pe_tensor_numel(a[i]), pe_tensor_numel(b[i]));
        if (memcmp(pe_tensor_data(a[i]), pe_tensor_data(b[i]), pe_tensor_nbytes(a[i]))) {
            for (int64_t e = 0; e < pe_tensor_numel(a[i]); e++)
                if (tu_get(a[i], e) != tu_get(b[i], e))
                    fail_msg("fetch '%s'[%lld]: unfused %.17g, fused %.17g", fetch[i], (long long)e, tu_get(a[i], e),
                             tu_get(b[i], e));
        }
        pe_tensor_free(a[i]);
        pe_tensor_free(b[i]);
    }
}

/* ---- fc --------------------------------------------------------------------- */

/* out = act(x w + b); x: [rows..., K] with x_num_col_dims = xcd; the
 * product a mul or (xcd = xnd - 1) a matmul_v2, as eager Linear traces. */
static pe_program *fc_program_of(const char *gemm, pe_dtype dt, int xnd, const int64_t *xdims, int xcd, int64_t n,
                                 const char *act) {
    pe_program *p = pe_program_new();
    int64_t k = 1, od[4];
    for (int i = xcd; i < xnd; i++) k *= xdims[i];
    for (int i = 0; i < xcd; i++) od[i] = xdims[i];
    od[xcd] = n;
    tm_var(p, "x", dt, xnd, xdims);
    tm_var(p, "w", dt, 2, (int64_t[]){k, n});
    tm_var(p, "b", dt, 1, (int64_t[]){n});
    tm_var(p, "t1", dt, xcd + 1, od);
    tm_var(p, "t2", dt, xcd + 1, od);
    pe_op *m = tm_op2(p, gemm, "x", "w", "t1");
    if (!strcmp(gemm, "mul")) pe_op_set_int(m, "x_num_col_dims", xcd);
    tm_op2(p, "elementwise_add", "t1", "b", "t2");
    const char *out = "t2";
    if (act) {
        tm_var(p, "out", dt, xcd + 1, od);
        tm_op2(p, act, "t2", NULL, "out");
        out = "out";
    }
    add_loss(p, out, dt, xcd + 1, od);
    return p;
}

static pe_program *fc_program(pe_dtype dt, int xnd, const int64_t *xdims, int xcd, int64_t n, const char *act) {
    return fc_program_of("mul", dt, xnd, xdims, xcd, n, act);
}

static void check_fc_numbers_of(const char *gemm, pe_dtype dt, int xnd, const int64_t *xdims, int xcd, int64_t n,
                                const char *act, bool x_grad) {
    pe_program *p = fc_program_of(gemm, dt, xnd, xdims, xcd, n, act);
    const char *wrt[3] = {"w", "b", "x"};
    backward(p, wrt, x_grad ? 3 : 2);
    pe_program *q = pe_program_clone(p);
    int before = q->blocks[0].n_ops;
    assert_int_equal(run_pass(pe_fuse_fc, q, NULL, 0), 1);
    assert_int_equal(count_ops(q, "fc"), 1);
    assert_int_equal(count_ops(q, "fc_grad"), 1);
    assert_int_equal(count_ops(q, "mul") + count_ops(q, "mul_grad") + count_ops(q, "matmul_v2") +
                         count_ops(q, "matmul_v2_grad") + count_ops(q, "elementwise_add") +
                         count_ops(q, "elementwise_add_grad"), 0);
    assert_int_equal(q->blocks[0].n_ops, before - (act ? 4 : 2));
    assert_null(pe_block_find_var(&q->blocks[0], "t1"));
    int64_t k = 1, od[4];
    for (int i = xcd; i < xnd; i++) k *= xdims[i];
    for (int i = 0; i < xcd; i++) od[i] = xdims[i];
    od[xcd] = n;
    pe_tensor *x = rnd(dt, xnd, xdims, 1), *w = rnd(dt, 2, (int64_t[]){k, n}, 2), *b = rnd(dt, 1, &n, 3);
    pe_tensor *r = rnd(dt, xcd + 1, od, 4);
    pe_feed feeds[4] = {{"x", x}, {"w", w}, {"b", b}, {"r", r}};
    const char *fetch[4] = {act ? "out" : "t2", "w@GRAD", "b@GRAD", "x@GRAD"};
    assert_same_results(p, q, feeds, 4, fetch, x_grad ? 4 : 3);
    pe_tensor_free(x); pe_tensor_free(w); pe_tensor_free(b); pe_tensor_free(r);
    pe_program_free(p);
    pe_program_free(q);
}

static void check_fc_numbers(pe_dtype dt, int xnd, const int64_t *xdims, int xcd, int64_t n, const char *act,
                             bool x_grad) {
    check_fc_numbers_of("mul", dt, xnd, xdims, xcd, n, act, x_grad);
    if (xcd == xnd - 1) check_fc_numbers_of("matmul_v2", dt, xnd, xdims, xcd, n, act, x_grad);
}

static void test_fc_numbers(void **state) {
    (void)state;
    const char *acts[4] = {NULL, "relu", "sigmoid", "tanh"};
    for (int dti = 0; dti < 2; dti++) {
        pe_dtype dt = dti ? PE_DTYPE_FP64 : PE_DTYPE_FP32;
        for (int a = 0; a < 4; a++) {
            check_fc_numbers(dt, 2, (int64_t[]){6, 10}, 1, 7, acts[a], true);
            check_fc_numbers(dt, 2, (int64_t[]){5, 9}, 1, 300, acts[a], false); /* two bias tiles */
            check_fc_numbers(dt, 3, (int64_t[]){2, 3, 8}, 2, 5, acts[a], true);
        }
    }
    /* large enough for the threaded element passes (the executor's kernels get cores/places threads) */
    check_fc_numbers(PE_DTYPE_FP32, 2, (int64_t[]){256, 64}, 1, 200, "relu", true);
}

static void test_fc_structure(void **state) {
    (void)state;
    /* forward only */
    pe_program *p = fc_program(PE_DTYPE_FP32, 2, (int64_t[]){-1, 4}, 1, 3, "relu");
    assert_int_equal(run_pass(pe_fuse_fc, p, NULL, 0), 1);
    const pe_op *fc = find_op(p, "fc");
    assert_non_null(fc);
    assert_string_equal(pe_op_input1(fc, "Input"), "x");
    assert_string_equal(pe_op_input1(fc, "W"), "w");
    assert_string_equal(pe_op_input1(fc, "Bias"), "b");
    assert_string_equal(pe_op_output1(fc, "Out"), "out");
    assert_string_equal(pe_op_attr(fc, "activation_type")->s, "relu");
    assert_null(pe_block_find_var(&p->blocks[0], "t1"));
    assert_null(pe_block_find_var(&p->blocks[0], "t2"));
    assert_int_equal(count_ops(p, "relu"), 0);
    pe_program_free(p);

    /* op_role_var of the fused grad lists both parameters */
    p = fc_program(PE_DTYPE_FP32, 2, (int64_t[]){-1, 4}, 1, 3, "tanh");
    const char *wrt[2] = {"w", "b"};
    backward(p, wrt, 2);
    assert_int_equal(run_pass(pe_fuse_fc, p, NULL, 0), 1);
    const pe_op *g = find_op(p, "fc_grad");
    assert_non_null(g);
    assert_true(has_role_var(g, "w") && has_role_var(g, "w@GRAD") && has_role_var(g, "b") && has_role_var(g, "b@GRAD"));
    assert_null(pe_op_output(g, "Input@GRAD")); /* x needs no gradient */
    assert_int_equal(pe_op_attr(g, "op_role")->i, PE_ROLE_BACKWARD);
    pe_program_free(p);

    /* protected t2 (a fetch target): fc without the activation, tanh stays */
    p = fc_program(PE_DTYPE_FP32, 2, (int64_t[]){-1, 4}, 1, 3, "tanh");
    backward(p, wrt, 2);
    const char *prot[1] = {"t2"};
    assert_int_equal(run_pass(pe_fuse_fc, p, prot, 1), 1);
    assert_int_equal(count_ops(p, "tanh"), 1);
    assert_int_equal(count_ops(p, "tanh_grad"), 1);
    assert_string_equal(pe_op_attr(find_op(p, "fc"), "activation_type")->s, "");
    assert_string_equal(pe_op_output1(find_op(p, "fc"), "Out"), "t2");
    assert_non_null(pe_block_find_var(&p->blocks[0], "t2"));
    pe_program_free(p);

    /* protected t1: nothing fused */
    p = fc_program(PE_DTYPE_FP32, 2, (int64_t[]){-1, 4}, 1, 3, "relu");
    backward(p, wrt, 2);
    int n_ops = p->blocks[0].n_ops;
    prot[0] = "t1";
    assert_int_equal(run_pass(pe_fuse_fc, p, prot, 1), 0);
    assert_int_equal(p->blocks[0].n_ops, n_ops);
    pe_program_free(p);

    /* persistable t1: nothing fused */
    p = fc_program(PE_DTYPE_FP32, 2, (int64_t[]){-1, 4}, 1, 3, "relu");
    pe_block_find_var(&p->blocks[0], "t1")->persistable = true;
    assert_int_equal(run_pass(pe_fuse_fc, p, NULL, 0), 0);
    pe_program_free(p);

    /* t1 read by another op: nothing fused */
    p = fc_program(PE_DTYPE_FP32, 2, (int64_t[]){-1, 4}, 1, 3, "relu");
    tm_var(p, "t1s", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});
    tm_op2(p, "scale", "t1", NULL, "t1s");
    assert_int_equal(run_pass(pe_fuse_fc, p, NULL, 0), 0);
    assert_int_equal(count_ops(p, "mul"), 1);
    pe_program_free(p);

    /* a bias that is not a row ([1] broadcast): not an fc */
    p = pe_program_new();
    tm_var(p, "x", PE_DTYPE_FP32, 2, (int64_t[]){-1, 4});
    tm_var(p, "w", PE_DTYPE_FP32, 2, (int64_t[]){4, 3});
    tm_var(p, "b", PE_DTYPE_FP32, 1, (int64_t[]){1});
    tm_var(p, "t1", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});
    tm_var(p, "t2", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});
    tm_op2(p, "mul", "x", "w", "t1");
    tm_op2(p, "elementwise_add", "t1", "b", "t2");
    assert_int_equal(run_pass(pe_fuse_fc, p, NULL, 0), 0);
    pe_program_free(p);

    /* matmul_v2 (eager Linear, to_static's traces): fused with its grads;
     * not with a transposed operand (x^T w is not fc's GEMM) */
    p = fc_program_of("matmul_v2", PE_DTYPE_FP32, 3, (int64_t[]){-1, 5, 4}, 2, 3, "relu");
    const char *wrt3[3] = {"w", "b", "x"};
    backward(p, wrt3, 3);
    assert_int_equal(run_pass(pe_fuse_fc, p, NULL, 0), 1);
    assert_int_equal(pe_op_attr(find_op(p, "fc"), "in_num_col_dims")->i, 2);
    assert_int_equal(pe_op_attr(find_op(p, "fc_grad"), "in_num_col_dims")->i, 2);
    assert_int_equal(count_ops(p, "matmul_v2_grad"), 0);
    pe_program_free(p);
    for (int t = 0; t < 2; t++) {
        p = fc_program_of("matmul_v2", PE_DTYPE_FP32, 2, (int64_t[]){4, 4}, 1, 4, NULL);
        pe_op_set_bool(&p->blocks[0].ops[0], t ? "trans_y" : "trans_x", true);
        assert_int_equal(run_pass(pe_fuse_fc, p, NULL, 0), 0);
        assert_int_equal(count_ops(p, "matmul_v2"), 1);
        pe_program_free(p);
    }
}

static void test_build_program(void **state) {
    (void)state;
    pe_program *p = fc_program_of("matmul_v2", PE_DTYPE_FP32, 2, (int64_t[]){-1, 4}, 1, 3, "relu");
    const char *wrt[2] = {"w", "b"};
    backward(p, wrt, 2);
    int n_ops = p->blocks[0].n_ops;
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.build_strategy.fuse_elewise_add_act_ops = false;
    pe_build_opts bo = {.n_places = 1, .bs = &o.build_strategy};
    pe_program *q = NULL;
    pe_build_report r;
    assert_int_equal(pe_build_program(p, &bo, &q, &r), PE_OK);
    assert_int_equal(p->blocks[0].n_ops, n_ops); /* the input is not touched */
    assert_int_equal(count_ops(q, "fc"), 1);
    assert_int_equal(count_ops(q, "fc_grad"), 1);
    assert_int_equal(r.n_ops, q->blocks[0].n_ops);
    assert_int_equal(r.n_handles, 0);
    bool seen = false;
    for (int i = 0; i < r.n; i++) {
        if (!strcmp(r.s[i].name, "fuse_gemm_epilogue")) seen = r.s[i].n_fused == 1;
        assert_string_not_equal(r.s[i].name, "multi_device");
    }
    assert_true(seen);
    pe_program_free(q);
    /* a protected intermediate (a fetch) stays: fc without the activation */
    const char *prot[1] = {"t2"};
    bo.protect = prot;
    bo.n_protect = 1;
    assert_int_equal(pe_build_program(p, &bo, &q, NULL), PE_OK);
    assert_non_null(pe_block_find_var(&q->blocks[0], "t2"));
    assert_int_equal(count_ops(q, "relu"), 1);
    pe_program_free(q);
    assert_int_equal(pe_build_program(p, NULL, &q, NULL), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "pe_build_program"));
    pe_program_free(p);
}

/* ---- elementwise add + act -------------------------------------------------- */

static void check_ea(pe_dtype dt, const char *act, int xnd, const int64_t *xd, int ynd, const int64_t *yd, int axis,
                     int ond, const int64_t *od, bool gx, bool gy, bool expect_keep_g) {
    pe_program *p = pe_program_new();
    tm_var(p, "a", dt, xnd, xd);
    tm_var(p, "y", dt, ynd, yd);
    tm_var(p, "t", dt, ond, od);
    tm_var(p, "out", dt, ond, od);
    pe_op *add = tm_op2(p, "elementwise_add", "a", "y", "t");
    pe_op_set_int(add, "axis", axis);
    tm_op2(p, act, "t", NULL, "out");
    add_loss(p, "out", dt, ond, od);
    const char *wrt[2];
    int n = 0;
    if (gx) wrt[n++] = "a";
    if (gy) wrt[n++] = "y";
    backward(p, wrt, n);
    pe_program *q = pe_program_clone(p);
    int before = q->blocks[0].n_ops;
    assert_int_equal(run_pass(pe_fuse_elewise_add_act, q, NULL, 0), 1);
    assert_int_equal(q->blocks[0].n_ops, before - 2);
    const pe_op *f = find_op(q, "fused_elemwise_activation"), *g = find_op(q, "fused_elemwise_activation_grad");
    assert_non_null(f);
    assert_non_null(g);
    const pe_attr *fl = pe_op_attr(f, "functor_list");
    assert_int_equal(fl->n, 2);
    assert_string_equal(fl->strings[0], act);
    assert_string_equal(fl->strings[1], "elementwise_add");
    assert_int_equal(pe_op_output(g, "IntermediateOut@GRAD") != NULL, expect_keep_g);
    assert_null(pe_block_find_var(&q->blocks[0], "t"));
    pe_tensor *a = rnd(dt, xnd, xd, 11), *y = rnd(dt, ynd, yd, 12), *r = rnd(dt, ond, od, 13);
    pe_feed feeds[3] = {{"a", a}, {"y", y}, {"r", r}};
    const char *fetch[3] = {"out", gx ? "a@GRAD" : "y@GRAD", "y@GRAD"};
    assert_same_results(p, q, feeds, 3, fetch, gx && gy ? 3 : 2);
    pe_tensor_free(a); pe_tensor_free(y); pe_tensor_free(r);
    pe_program_free(p);
    pe_program_free(q);
}

static void test_elewise_add_act_numbers(void **state) {
    (void)state;
    const char *acts[3] = {"relu", "sigmoid", "tanh"};
    for (int dti = 0; dti < 2; dti++) {
        pe_dtype dt = dti ? PE_DTYPE_FP64 : PE_DTYPE_FP32;
        for (int ai = 0; ai < 3; ai++) {
            const char *a = acts[ai];
            int64_t s46[2] = {4, 6};
            check_ea(dt, a, 2, s46, 2, s46, -1, 2, s46, true, true, false);                  /* same shape */
            check_ea(dt, a, 2, (int64_t[]){5, 7}, 1, (int64_t[]){7}, -1, 2, (int64_t[]){5, 7}, true, true, false); /* row */
            check_ea(dt, a, 2, (int64_t[]){5, 300}, 1, (int64_t[]){300}, -1, 2, (int64_t[]){5, 300}, true, true, false);
            check_ea(dt, a, 4, (int64_t[]){2, 3, 4, 5}, 1, (int64_t[]){3}, 1, 4, (int64_t[]){2, 3, 4, 5}, true, true,
                     false);                                                                   /* channel */
            check_ea(dt, a, 2, (int64_t[]){6, 5}, 1, (int64_t[]){1}, -1, 2, (int64_t[]){6, 5}, true, true, false); /* scalar */
            check_ea(dt, a, 2, (int64_t[]){4, 1}, 2, (int64_t[]){4, 6}, -1, 2, (int64_t[]){4, 6}, true, true, false); /* x bcast */
            check_ea(dt, a, 2, (int64_t[]){5, 7}, 1, (int64_t[]){7}, -1, 2, (int64_t[]){5, 7}, false, true, true); /* only bias */
            check_ea(dt, a, 2, (int64_t[]){3, 1}, 2, (int64_t[]){1, 4}, -1, 2, (int64_t[]){3, 4}, true, true, true); /* both */
        }
    }
    /* large: threaded passes, many scalar-sum blocks */
    check_ea(PE_DTYPE_FP32, "relu", 2, (int64_t[]){300, 400}, 1, (int64_t[]){1}, -1, 2, (int64_t[]){300, 400}, true,
             true, false);
    check_ea(PE_DTYPE_FP64, "tanh", 2, (int64_t[]){300, 400}, 1, (int64_t[]){400}, -1, 2, (int64_t[]){300, 400}, false,
             true, true);
}

static void test_elewise_add_act_structure(void **state) {
    (void)state;
    /* t fetched (protected): nothing fused */
    pe_program *p = pe_program_new();
    int64_t d[2] = {-1, 4};
    tm_var(p, "a", PE_DTYPE_FP32, 2, d);
    tm_var(p, "y", PE_DTYPE_FP32, 1, (int64_t[]){4});
    tm_var(p, "t", PE_DTYPE_FP32, 2, d);
    tm_var(p, "out", PE_DTYPE_FP32, 2, d);
    tm_op2(p, "elementwise_add", "a", "y", "t");
    tm_op2(p, "relu", "t", NULL, "out");
    pe_program *q = pe_program_clone(p);
    const char *prot[1] = {"t"};
    assert_int_equal(run_pass(pe_fuse_elewise_add_act, q, prot, 1), 0);
    assert_int_equal(q->blocks[0].n_ops, 2);
    pe_program_free(q);
    /* t also read by a second op: nothing fused */
    q = pe_program_clone(p);
    tm_var(q, "t2", PE_DTYPE_FP32, 2, d);
    tm_op2(q, "scale", "t", NULL, "t2");
    assert_int_equal(run_pass(pe_fuse_elewise_add_act, q, NULL, 0), 0);
    pe_program_free(q);
    /* forward only: fused, no grad op */
    assert_int_equal(run_pass(pe_fuse_elewise_add_act, p, NULL, 0), 1);
    assert_int_equal(p->blocks[0].n_ops, 1);
    assert_string_equal(p->blocks[0].ops[0].type, "fused_elemwise_activation");
    pe_program_free(p);
}

/* ---- models ---------------------------------------------------------------- */

/* The models of tests/unit/models.h in float64 (biases start at 0.01). */
static tm_model make_mlp(pe_optimizer_kind kind, bool lr_mult) {
    tm_model m = tm_model_new(PE_DTYPE_FP64, 0.01, false);
    tm_mlp(&m, 128, "relu", 64, "tanh");
    pe_param_config cfg[1] = {{"fc_0.b_0", 2.0, -1.0, 0.0}};
    tm_minimize(&m, kind, kind == PE_OPT_ADAM ? 0.01 : 0.05, lr_mult ? cfg : NULL, lr_mult ? 1 : 0);
    return m;
}

static tm_model make_cnn(void) {
    tm_model m = tm_model_new(PE_DTYPE_FP64, 0.01, false);
    tm_cnn(&m, "img", 64);
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    return m;
}

enum { SW_FC = 1, SW_EA = 2, SW_OPT = 4 };

/* shard_optimizer off: on several places it would take precedence over
 * fuse_all_optimizer_ops, which these tests look at (test_strategies.c
 * trains every combination of the two) */
static void set_switches(pe_build_strategy *bs, int sw) {
    bs->fuse_gemm_epilogue = sw & SW_FC;
    bs->fuse_elewise_add_act_ops = sw & SW_EA;
    bs->fuse_all_optimizer_ops = sw & SW_OPT;
    bs->shard_optimizer = false;
}

/* Trains `steps` steps; params_out[i] (new tensors) get the parameters. */
static void train(const tm_model *m, int places, int sw, int steps, pe_tensor **params_out, const char *dot,
                  const char *extra_fetch, pe_tensor *extra_out) {
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m->startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[3] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    set_switches(&o.build_strategy, sw);
    o.build_strategy.debug_graphviz_path = dot;
    pe_parallel_executor *pe;
    long builds = pe_pass_manager_calls();
    if (pe_parallel_executor_new(pl, places, m->main, scope, &o, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    /* the executor builds its graphs at construction (a second one when a
     * fusion removed vars a run may fetch), and never while it runs */
    assert_true(pe_pass_manager_calls() > builds);
    builds = pe_pass_manager_calls();
    const char *fetch[2] = {"loss", extra_fetch};
    pe_tensor *outs[2] = {pe_tensor_new(), extra_out};
    for (int step = 0; step < steps; step++) {
        pe_tensor *x, *y;
        tm_batch(m, step, 12, &x, &y);
        pe_feed feed[2] = {{m->input, x}, {"label", y}};
        if (pe_run(pe, feed, 2, fetch, extra_fetch && step == steps - 1 ? 2 : 1, true, outs) != PE_OK)
            fail_msg("switches %d, %d places, step %d: %s", sw, places, step, pe_last_error());
        pe_tensor_free(x);
        pe_tensor_free(y);
    }
    if (pe_pass_manager_calls() != builds)
        fail_msg("switches %d, %d places: the pass manager ran %ld times during the runs", sw, places,
                 pe_pass_manager_calls() - builds);
    tm_fetch_params(m, pe, params_out);
    pe_tensor_free(outs[0]);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
}

/* allclose(rtol 1e-5, atol 1e-12); returns whether all are bitwise equal */
static bool assert_params_close(const tm_model *m, pe_tensor **a, pe_tensor **b, const char *what) {
    bool bitwise = true;
    for (int i = 0; i < m->n_params; i++) {
        int64_t n = pe_tensor_numel(a[i]);
        assert_int_equal(n, pe_tensor_numel(b[i]));
        for (int64_t e = 0; e < n; e++) {
            double x = tu_get(a[i], e), y = tu_get(b[i], e);
            if (fabs(x - y) > 1e-5 * fabs(y) + 1e-12)
                fail_msg("%s: %s[%lld]: fused %.17g vs unfused %.17g", what, m->params[i], (long long)e, x, y);
            bitwise = bitwise && x == y;
        }
    }
    return bitwise;
}

/* Every switch combination on 1 and 3 places vs all switches off. */
static void check_training(tm_model *m, const char *name, int steps, int first_sw) {
    for (int places = 1; places <= 3; places += 2) {
        pe_tensor *ref[16], *got[16];
        train(m, places, 0, steps, ref, NULL, NULL, NULL);
        for (int sw = first_sw; sw < 8; sw++) {
            char what[96];
            snprintf(what, sizeof what, "%s places=%d fc=%d elewise=%d opt=%d", name, places, !!(sw & SW_FC),
                     !!(sw & SW_EA), !!(sw & SW_OPT));
            train(m, places, sw, steps, got, NULL, NULL, NULL);
            bool bitwise = assert_params_close(m, got, ref, what);
            print_message("%s: allclose%s\n", what, bitwise ? ", bitwise equal" : "");
            tm_free_params(m, got);
        }
        tm_free_params(m, ref);
    }
}

/* The passes really fire on the model (fewer ops, the fused types). */
static void check_fires(const tm_model *m, int sw, const char *fused_type, int min_fused) {
    pe_build_strategy bs;
    memset(&bs, 0, sizeof bs);
    set_switches(&bs, sw);
    pe_pass_opts po = {.n_places = 1, .loss_name = "loss", .bs = &bs};
    pe_ssa_graph *g;
    pe_pass_result res;
    assert_int_equal(pe_pass_manager_run(m->main, &po, &g, &res), PE_OK);
    assert_true(g->progs[0]->blocks[0].n_ops < m->main->blocks[0].n_ops);
    assert_true(count_ops(g->progs[0], fused_type) >= min_fused);
    assert_true(res.n >= 2);
    assert_true(res.s[0].n_fused >= 1);
    pe_ssa_graph_free(g);
}

static void test_train_mlp(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_MOMENTUM, false);
    check_fires(&m, SW_FC, "fc", 3);
    check_fires(&m, SW_FC, "fc_grad", 3);
    check_fires(&m, SW_EA, "fused_elemwise_activation", 2);
    check_fires(&m, SW_OPT, "merged_momentum", 1);
    check_training(&m, "mlp momentum", 6, 1);
    tm_model_free(&m);
}

static void test_train_cnn(void **state) {
    (void)state;
    tm_model m = make_cnn();
    check_fires(&m, SW_FC, "fc_grad", 2);
    check_training(&m, "cnn momentum", 4, 1);
    tm_model_free(&m);
}

/* sgd, adam and the other optimizers with a merged form (per-parameter
 * learning rate: the merged op gets one LearningRate per param) through
 * merged_<type>. */
static void test_train_sgd_adam(void **state) {
    (void)state;
    const pe_optimizer_kind kinds[] = {PE_OPT_SGD,    PE_OPT_ADAM,  PE_OPT_ADAGRAD, PE_OPT_RMSPROP,
                                       PE_OPT_ADAMAX, PE_OPT_ADAMW, PE_OPT_LAMB};
    const char *names[] = {"sgd", "adam", "adagrad", "rmsprop", "adamax", "adamw", "lamb"};
    for (int k = 0; k < 7; k++) {
        char merged[32];
        snprintf(merged, sizeof merged, "merged_%s", names[k]);
        tm_model m = make_mlp(kinds[k], true);
        check_fires(&m, SW_OPT, merged, 1);
        pe_build_strategy bs;
        memset(&bs, 0, sizeof bs);
        bs.fuse_all_optimizer_ops = true;
        pe_pass_opts po = {.n_places = 1, .loss_name = "loss", .bs = &bs};
        pe_ssa_graph *g;
        assert_int_equal(pe_pass_manager_run(m.main, &po, &g, NULL), PE_OK);
        const pe_op *mo = find_op(g->progs[0], merged);
        assert_int_equal(pe_op_input(mo, "Param")->n_args, 6);
        assert_int_equal(pe_op_input(mo, "LearningRate")->n_args, 6); /* fc_0.b_0 has lr_mult 2 */
        pe_ssa_graph_free(g);
        for (int places = 1; places <= 3; places += 2) {
            pe_tensor *ref[16], *got[16];
            train(&m, places, 0, 5, ref, NULL, NULL, NULL);
            train(&m, places, SW_OPT | SW_FC, 5, got, NULL, NULL, NULL);
            assert_true(assert_params_close(&m, got, ref, names[k]));
            tm_free_params(&m, got);
            tm_free_params(&m, ref);
        }
        tm_model_free(&m);
    }
}

/* reduce strategy on several places: fuse_all_optimizer_ops is not applied */
static void test_optimizer_reduce_strategy(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_MOMENTUM, false);
    pe_build_strategy bs;
    memset(&bs, 0, sizeof bs);
    bs.fuse_all_optimizer_ops = true;
    bs.reduce_strategy = PE_REDUCE_REDUCE;
    pe_pass_opts po = {.n_places = 2, .loss_name = "loss", .bs = &bs};
    pe_ssa_graph *g;
    pe_pass_result res;
    assert_int_equal(pe_pass_manager_run(m.main, &po, &g, &res), PE_OK);
    assert_int_equal(count_ops(g->progs[0], "merged_momentum"), 0);
    assert_int_equal(count_ops(g->progs[0], "momentum"), 6);
    assert_true(res.s[0].skipped);
    pe_ssa_graph_free(g);
    /* the user's program is never touched by the passes */
    bs.reduce_strategy = PE_REDUCE_ALL_REDUCE;
    bs.fuse_gemm_epilogue = true;
    int n_ops = m.main->blocks[0].n_ops;
    assert_int_equal(pe_pass_manager_run(m.main, &po, &g, NULL), PE_OK);
    assert_int_equal(m.main->blocks[0].n_ops, n_ops);
    assert_int_equal(count_ops(m.main, "fc"), 0);
    pe_ssa_graph_free(g);
    tm_model_free(&m);
}

/* A fetch of a var removed by fusion: the executor runs the graph it built
 * at construction with the removed vars kept (train() checks that no pass
 * runs during the runs). */
static void test_fetch_fused_var(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_MOMENTUM, false);
    pe_tensor *ref[16], *got[16];
    pe_tensor *a = pe_tensor_new(), *b = pe_tensor_new();
    train(&m, 3, 0, 3, ref, NULL, "fc_0.tmp_0", a);
    train(&m, 3, SW_FC | SW_EA | SW_OPT, 3, got, NULL, "fc_0.tmp_0", b);
    assert_int_equal(pe_tensor_numel(a), 12 * 128);
    assert_int_equal(pe_tensor_numel(b), pe_tensor_numel(a));
    assert_memory_equal(pe_tensor_data(a), pe_tensor_data(b), pe_tensor_nbytes(a));
    assert_params_close(&m, got, ref, "fetch of a fused var");
    tm_free_params(&m, got);
    tm_free_params(&m, ref);
    pe_tensor_free(a);
    pe_tensor_free(b);
    tm_model_free(&m);
}

/* ---- DOT dumps ------------------------------------------------------------------ */

static void assert_dot(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("DOT file '%s' was not written", path);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    int depth = 0, min = 0;
    long total = (long)n;
    while (n > 0) {
        for (size_t i = 0; i < n; i++) {
            depth += buf[i] == '{';
            depth -= buf[i] == '}';
            if (depth < min) min = depth;
        }
        n = fread(buf, 1, sizeof buf - 1, f);
        total += (long)n;
    }
    fclose(f);
    assert_true(total > 20);
    assert_int_equal(depth, 0);
    assert_int_equal(min, 0);
    f = fopen(path, "rb");
    n = fread(buf, 1, 16, f);
    fclose(f);
    buf[n] = '\0';
    if (strncmp(buf, "digraph", 7)) fail_msg("'%s' does not start with 'digraph'", path);
}

static void test_dot_dumps(void **state) {
    (void)state;
    char dir[] = "/tmp/pe_fusion_dotXXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], p2[320];
    snprintf(path, sizeof path, "%s/g.dot", dir);
    tm_model m = make_mlp(PE_OPT_MOMENTUM, false);
    pe_tensor *got[16];
    train(&m, 3, SW_FC | SW_EA | SW_OPT, 1, got, path, NULL, NULL);
    tm_free_params(&m, got);
    static const char *const files[] = {"00_input", "01_fuse_gemm_epilogue", "02_fuse_elewise_add_act_ops",
                                        "03_fuse_all_optimizer_ops", "04_multi_device"};
    assert_dot(path);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p2, sizeof p2, "%s.%s.dot", path, files[i]);
        assert_dot(p2);
        unlink(p2);
    }
    /* program graphs name ops as boxes and vars as ellipses */
    snprintf(p2, sizeof p2, "%s/p.dot", dir);
    assert_int_equal(pe_program_write_dot(m.main, p2, "t\"itle"), PE_OK);
    FILE *f = fopen(p2, "rb");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "shape=box"));
    assert_non_null(strstr(buf, "shape=ellipse"));
    assert_non_null(strstr(buf, "t\\\"itle"));
    unlink(p2);
    unlink(path);
    rmdir(dir);
    tm_model_free(&m);
}

/* ---- collectives start as soon as their gradients are ready ---------------------- */

static bool handles_grad(const pe_handle *h, const char *grad) {
    if (h->kind == PE_HANDLE_ALLREDUCE_FUSED) {
        for (int k = 0; k < h->n_vars; k++)
            if (!strcmp(h->vars[k], grad)) return true;
        return false;
    }
    return !strcmp(h->var, grad);
}

/* Marks in `seen` every handle reachable from `from`. */
static void mark_reachable(const pe_ssa_graph *g, int from, char *seen) {
    int *stack = malloc(sizeof *stack * (size_t)g->n_h), top = 0;
    assert_non_null(stack);
    stack[top++] = from;
    seen[from] = 1;
    while (top) {
        int h = stack[--top];
        for (int i = 0; i < g->h[h].n_succ; i++)
            if (!seen[g->h[h].succ[i]]) {
                seen[g->h[h].succ[i]] = 1;
                stack[top++] = g->h[h].succ[i];
            }
    }
    free(stack);
}

/* The gradient exchange of the later layers must not wait for the end of
 * the backward pass: no allreduce, gradient bucket or sharded update that
 * does not carry fc_0.w_0@GRAD (the last gradient made) is reachable from
 * the ops that make it, with plain allreduces, with fuse_all_reduce_ops
 * buckets and with shard_optimizer. */
static void test_collectives_start_when_their_gradients_are_ready(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_MOMENTUM, false);
    const char *last = "fc_0.w_0@GRAD";
    for (int mode = 0; mode < 3; mode++) {
        pe_build_strategy bs;
        memset(&bs, 0, sizeof bs);
        bs.fuse_all_reduce_ops = mode == 1;
        bs.fuse_grad_size_in_MB = 0.5;          /* fc_0.w_0's gradient (0.8 MB) alone */
        bs.fuse_first_grad_size_in_MB = 0.01;
        bs.shard_optimizer = mode == 2;
        pe_pass_opts po = {.n_places = 2, .loss_name = "loss", .bs = &bs};
        pe_ssa_graph *g;
        assert_int_equal(pe_pass_manager_run(m.main, &po, &g, NULL), PE_OK);
        char *late = calloc((size_t)g->n_h, 1);
        assert_non_null(late);
        for (int h = 0; h < g->n_h; h++) {
            const pe_handle *hd = &g->h[h];
            if (hd->kind != PE_HANDLE_OP) continue;
            const pe_op *op = &g->progs[hd->place]->blocks[0].ops[hd->op_idx];
            for (int s2 = 0; s2 < op->n_outputs; s2++)
                for (int k = 0; k < op->outputs[s2].n_args; k++)
                    if (!strcmp(op->outputs[s2].args[k], last)) mark_reachable(g, h, late);
        }
        int checked = 0, carrying = 0;
        const pe_handle_kind kind = mode == 0 ? PE_HANDLE_ALLREDUCE : mode == 1 ? PE_HANDLE_ALLREDUCE_FUSED : PE_HANDLE_OPT_SHARD;
        for (int h = 0; h < g->n_h; h++) {
            const pe_handle *hd = &g->h[h];
            if (hd->kind != kind) continue;
            if (handles_grad(hd, last)) { /* the control: these do wait for it */
                assert_true(late[h]);
                carrying++;
                continue;
            }
            if (late[h]) fail_msg("mode %d: the collective of '%s' waits for %s", mode, hd->var, last);
            checked++;
        }
        assert_true(carrying >= 1);
        assert_true(checked >= (mode == 1 ? 2 : 5)); /* the other 5 gradients (in >= 2 buckets) */
        free(late);
        pe_ssa_graph_free(g);
    }
    tm_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fc_structure),
        cmocka_unit_test(test_fc_numbers),
        cmocka_unit_test(test_build_program),
        cmocka_unit_test(test_elewise_add_act_structure),
        cmocka_unit_test(test_elewise_add_act_numbers),
        cmocka_unit_test(test_optimizer_reduce_strategy),
        cmocka_unit_test(test_train_sgd_adam),
        cmocka_unit_test(test_train_mlp),
        cmocka_unit_test(test_train_cnn),
        cmocka_unit_test(test_fetch_fused_var),
        cmocka_unit_test(test_dot_dumps),
        cmocka_unit_test(test_collectives_start_when_their_gradients_are_ready),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
