/* tests/unit/test_grad_math.c — gradients of the math family: autodiff
 * (grad maker + grad kernel through pe_gradients) against central finite
 * differences in fp64 (tests/unit/grad_check.h), one table row per case:
 * mul with x_num_col_dims 2 on 3-D input and y_num_col_dims 2, matmul_v2
 * and matmul (alpha) in all four transpose combinations, batched, with
 * broadcast batch dims on either side (the gradient of the broadcast
 * operand sums its batches), with 1-D operands; lookup_table_v2 with
 * repeated ids and padding_idx, lookup_table (v1); layer_norm with
 * begin_norm_axis 1 and 2, with and without Scale/Bias. Then targeted
 * checks: lookup_table_v2's W@GRAD rows against sums computed here, an
 * input that needs no gradient (its slot is @EMPTY@), fp32 gradients
 * against fp64 ones, and large inputs whose gradients must be bitwise
 * equal on 1 and 2 threads. */
#include "tests/unit/grad_check.h"

#include <string.h>

#define D(...) (int64_t[]){__VA_ARGS__}
#define NDIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define RAND(seed, ...) gc_rand(NDIMS(__VA_ARGS__), D(__VA_ARGS__), seed)

static pe_tensor *ids64(int ndim, const int64_t *dims, const double *vals) {
    return tu_tensor(PE_DTYPE_INT64, ndim, dims, vals);
}

/* ---- attrs -------------------------------------------------------------------- */

static void xn2(pe_op *op) { pe_op_set_int(op, "x_num_col_dims", 2); }
static void yn2(pe_op *op) { pe_op_set_int(op, "y_num_col_dims", 2); }
static void tx(pe_op *op) { pe_op_set_bool(op, "trans_x", true); }
static void ty(pe_op *op) { pe_op_set_bool(op, "trans_y", true); }
static void txy(pe_op *op) { tx(op); ty(op); }
static void v1_alpha(pe_op *op) { pe_op_set_float(op, "alpha", 0.7); }
static void v1_tx(pe_op *op) { v1_alpha(op); pe_op_set_bool(op, "transpose_X", true); }
static void v1_ty(pe_op *op) { v1_alpha(op); pe_op_set_bool(op, "transpose_Y", true); }
static void v1_txy(pe_op *op) { v1_tx(op); pe_op_set_bool(op, "transpose_Y", true); }
static void pad4(pe_op *op) { pe_op_set_long(op, "padding_idx", 4); }
static void bna2(pe_op *op) { pe_op_set_int(op, "begin_norm_axis", 2); }
static void bna1_eps(pe_op *op) { pe_op_set_float(op, "epsilon", 1e-3); }

/* ---- the table ---------------------------------------------------------------- */

typedef gc_case (*case_fn)(void);

#define BIN(NAME, OP, X, Y, ATTRS)                                                           \
    static gc_case NAME(void) {                                                              \
        return (gc_case){.op = OP, .in = {{"X", X, true}, {"Y", Y, true}}, .n_in = 2,        \
                         .out = {"Out"}, .n_out = 1, .set_attrs = ATTRS};                    \
    }

BIN(mul_2d, "mul", RAND(1, 3, 4), RAND(2, 4, 5), NULL)
BIN(mul_x3d_xn2, "mul", RAND(3, 2, 3, 4), RAND(4, 4, 5), xn2)
BIN(mul_y3d_yn2, "mul", RAND(5, 3, 6), RAND(6, 2, 3, 5), yn2)
BIN(mul_x4d_flat, "mul", RAND(7, 2, 2, 3, 2), RAND(8, 12, 3), NULL) /* X [2, 12] */

/* matmul_v2: transposes (stored shapes follow the flags) */
BIN(mm_nn, "matmul_v2", RAND(10, 3, 4), RAND(11, 4, 5), NULL)
BIN(mm_tn, "matmul_v2", RAND(12, 4, 3), RAND(13, 4, 5), tx)
BIN(mm_nt, "matmul_v2", RAND(14, 3, 4), RAND(15, 5, 4), ty)
BIN(mm_tt, "matmul_v2", RAND(16, 4, 3), RAND(17, 5, 4), txy)
/* batched, same batch dims */
BIN(mm_batched, "matmul_v2", RAND(18, 2, 3, 4), RAND(19, 2, 4, 5), NULL)
BIN(mm_batched_tt, "matmul_v2", RAND(20, 2, 4, 3), RAND(21, 2, 5, 4), txy)
/* Y shared by every batch: the folded [B*M, K] GEMM, and with trans_y */
BIN(mm_fold, "matmul_v2", RAND(22, 2, 3, 4), RAND(23, 4, 5), NULL)
BIN(mm_fold_ty, "matmul_v2", RAND(24, 2, 3, 4), RAND(25, 5, 4), ty)
BIN(mm_shared_y_tx, "matmul_v2", RAND(26, 2, 4, 3), RAND(27, 4, 5), tx)
/* X broadcast over Y's batches */
BIN(mm_x_bcast, "matmul_v2", RAND(28, 3, 4), RAND(29, 2, 4, 5), NULL)
/* both broadcast: [2, 1] x [3] batch dims -> [2, 3] */
BIN(mm_two_way, "matmul_v2", RAND(30, 2, 1, 3, 4), RAND(31, 3, 4, 2), NULL)
BIN(mm_two_way_tt, "matmul_v2", RAND(32, 2, 1, 4, 3), RAND(33, 3, 2, 4), txy)
BIN(mm_y_size1_batch, "matmul_v2", RAND(34, 3, 2, 4), RAND(35, 1, 4, 3), NULL)
/* 1-D operands (a vector's transpose flag is ignored) */
BIN(mm_vec_mat, "matmul_v2", RAND(36, 4), RAND(37, 4, 5), NULL)
BIN(mm_mat_vec, "matmul_v2", RAND(38, 3, 4), RAND(39, 4), NULL)
BIN(mm_vec_vec, "matmul_v2", RAND(40, 4), RAND(41, 4), NULL)
BIN(mm_batch_vec, "matmul_v2", RAND(42, 2, 3, 4), RAND(43, 4), NULL)
BIN(mm_vec_batch_ty, "matmul_v2", RAND(44, 4), RAND(45, 2, 5, 4), ty)
/* matmul (v1): alpha with every transpose, batched broadcast */
BIN(mm1_nn, "matmul", RAND(50, 3, 4), RAND(51, 4, 5), v1_alpha)
BIN(mm1_tn, "matmul", RAND(52, 4, 3), RAND(53, 4, 5), v1_tx)
BIN(mm1_nt, "matmul", RAND(54, 3, 4), RAND(55, 5, 4), v1_ty)
BIN(mm1_tt, "matmul", RAND(56, 4, 3), RAND(57, 5, 4), v1_txy)
BIN(mm1_bcast, "matmul", RAND(58, 2, 1, 3, 4), RAND(59, 3, 4, 2), v1_alpha)
BIN(mm1_fold, "matmul", RAND(60, 3, 2, 4), RAND(61, 4, 2), v1_alpha)

static gc_case emb_v2(void) { /* ids [2, 3] with id 1 three times and padding id 4 twice */
    return (gc_case){.op = "lookup_table_v2",
                     .in = {{"W", RAND(70, 6, 3), true},
                            {"Ids", ids64(2, D(2, 3), (double[]){1, 4, 1, 0, 4, 1}), false}},
                     .n_in = 2, .out = {"Out"}, .n_out = 1, .set_attrs = pad4};
}
static gc_case emb_v2_nopad(void) { /* ids [5], default padding_idx (none) */
    return (gc_case){.op = "lookup_table_v2",
                     .in = {{"W", RAND(71, 4, 2), true}, {"Ids", ids64(1, D(5), (double[]){3, 3, 0, 2, 3}), false}},
                     .n_in = 2, .out = {"Out"}, .n_out = 1};
}
static gc_case emb_v1(void) { /* ids [4, 1] -> out [4, D] */
    return (gc_case){.op = "lookup_table",
                     .in = {{"W", RAND(72, 5, 3), true},
                            {"Ids", ids64(2, D(4, 1), (double[]){2, 4, 2, 1}), false}},
                     .n_in = 2, .out = {"Out"}, .n_out = 1, .set_attrs = pad4};
}

#define LN_EXTRA .extra_out = {"Mean", "Variance"}, .n_extra_out = 2
static gc_case ln_axis1(void) {
    return (gc_case){.op = "layer_norm",
                     .in = {{"X", RAND(80, 2, 3, 4), true}, {"Scale", RAND(81, 12), true}, {"Bias", RAND(82, 12), true}},
                     .n_in = 3, .out = {"Y"}, .n_out = 1, LN_EXTRA, .set_attrs = bna1_eps};
}
static gc_case ln_axis2(void) {
    return (gc_case){.op = "layer_norm",
                     .in = {{"X", RAND(83, 2, 3, 4), true}, {"Scale", RAND(84, 4), true}, {"Bias", RAND(85, 4), true}},
                     .n_in = 3, .out = {"Y"}, .n_out = 1, LN_EXTRA, .set_attrs = bna2};
}
static gc_case ln_plain(void) {
    return (gc_case){.op = "layer_norm", .in = {{"X", RAND(86, 3, 5), true}}, .n_in = 1, .out = {"Y"}, .n_out = 1,
                     LN_EXTRA};
}
static gc_case ln_plain_axis2(void) {
    return (gc_case){.op = "layer_norm", .in = {{"X", RAND(87, 2, 2, 3), true}}, .n_in = 1, .out = {"Y"},
                     .n_out = 1, LN_EXTRA, .set_attrs = bna2};
}
static gc_case ln_scale_only(void) {
    return (gc_case){.op = "layer_norm", .in = {{"X", RAND(88, 4, 3), true}, {"Scale", RAND(89, 3), true}},
                     .n_in = 2, .out = {"Y"}, .n_out = 1, LN_EXTRA};
}
static gc_case ln_fixed_params(void) { /* Scale/Bias given but not differentiated */
    return (gc_case){.op = "layer_norm",
                     .in = {{"X", RAND(90, 3, 4), true}, {"Scale", RAND(91, 4), false}, {"Bias", RAND(92, 4), false}},
                     .n_in = 3, .out = {"Y"}, .n_out = 1, LN_EXTRA};
}
static gc_case ln_params_only(void) { /* only Scale/Bias differentiated */
    return (gc_case){.op = "layer_norm",
                     .in = {{"X", RAND(93, 3, 4), false}, {"Scale", RAND(94, 4), true}, {"Bias", RAND(95, 4), true}},
                     .n_in = 3, .out = {"Y"}, .n_out = 1, LN_EXTRA};
}
static gc_case mul_y_fixed(void) { /* Y needs no gradient: Y@GRAD is @EMPTY@ */
    return (gc_case){.op = "mul", .in = {{"X", RAND(96, 3, 4), true}, {"Y", RAND(97, 4, 2), false}}, .n_in = 2,
                     .out = {"Out"}, .n_out = 1};
}
static gc_case mm_x_fixed(void) {
    return (gc_case){.op = "matmul_v2", .in = {{"X", RAND(98, 2, 3, 4), false}, {"Y", RAND(99, 4, 2), true}},
                     .n_in = 2, .out = {"Out"}, .n_out = 1};
}

static const case_fn k_cases[] = {
    mul_2d, mul_x3d_xn2, mul_y3d_yn2, mul_x4d_flat, mul_y_fixed,
    mm_nn, mm_tn, mm_nt, mm_tt, mm_batched, mm_batched_tt, mm_fold, mm_fold_ty, mm_shared_y_tx, mm_x_bcast,
    mm_two_way, mm_two_way_tt, mm_y_size1_batch, mm_vec_mat, mm_mat_vec, mm_vec_vec, mm_batch_vec, mm_vec_batch_ty,
    mm_x_fixed,
    mm1_nn, mm1_tn, mm1_nt, mm1_tt, mm1_bcast, mm1_fold,
    emb_v2, emb_v2_nopad, emb_v1,
    ln_axis1, ln_axis2, ln_plain, ln_plain_axis2, ln_scale_only, ln_fixed_params, ln_params_only,
};

static void test_finite_differences(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        gc_case c = k_cases[i]();
        gc_check(&c);
    }
}

/* ---- targeted checks ------------------------------------------------------------ */

/* Builds `op` over the given inputs (declared from their tensors), a loss
 * sum(mean(out * r)) with r all ones (so d loss / d out = 1 / numel(out)),
 * runs pe_gradients and fetches the gradients of the `diff` inputs. */
typedef struct {
    const char *slot;
    pe_tensor *value;
    bool diff;
} in_t;

static void grads(const char *type, void (*attrs)(pe_op *), const in_t *in, int n_in, const char *out_slot,
                  const char *const *extra_outs, int n_extra, int nt, pe_tensor **g) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    char names[8][32];
    pe_op *op = pe_block_add_op(b, type);
    for (int i = 0; i < n_in; i++) {
        snprintf(names[i], sizeof names[i], "in_%s", in[i].slot);
        pe_var *v = tu_declare(p, names[i], in[i].value);
        v->stop_gradient = !in[i].diff;
        pe_op_add_input(&b->ops[0], in[i].slot, names[i]);
    }
    pe_block_add_var(b, "out", in[0].value->dtype, 0, NULL);
    pe_op_add_output(&b->ops[0], out_slot, "out");
    for (int k = 0; k < n_extra; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "extra_%d", k);
        pe_block_add_var(b, nm, in[0].value->dtype, 0, NULL);
        pe_op_add_output(&b->ops[0], extra_outs[k], nm);
    }
    if (attrs) attrs(&b->ops[0]);
    (void)op;
    pe_block_add_var(b, "loss", in[0].value->dtype, 1, D(1));
    op = pe_block_add_op(b, "reduce_sum");
    pe_op_add_input(op, "X", "out");
    pe_op_add_output(op, "Out", "loss");
    pe_op_set_bool(op, "reduce_all", true);
    const char *targets[] = {"loss"}, *srcs[8];
    int nd = 0;
    for (int i = 0; i < n_in; i++)
        if (in[i].diff) srcs[nd++] = names[i];
    char *gn[8] = {0};
    assert_int_equal(pe_gradients(p, targets, 1, srcs, nd, gn), PE_OK);
    pe_feed feeds[8];
    for (int i = 0; i < n_in; i++) feeds[i] = (pe_feed){names[i], in[i].value};
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, nt);
    for (int j = 0; j < nd; j++) g[j] = pe_tensor_new();
    pe_status st = pe_executor_run(ex, p, 0, scope, feeds, n_in, (const char *const *)gn, nd, g);
    if (st != PE_OK) fail_msg("%s: %s", type, pe_last_error());
    pe_executor_free(ex);
    pe_scope_free(scope);
    for (int j = 0; j < nd; j++) free(gn[j]);
    pe_program_free(p);
}

/* loss = sum(lookup_table_v2(W, ids)): W@GRAD row v = number of ids == v
 * (0 for the padding row), in every column. */
static void test_embedding_grad_rows(void **state) {
    (void)state;
    double idv[] = {2, 0, 2, 5, 2, 3, 0, 5};
    pe_tensor *w = RAND(100, 6, 4);
    in_t in[] = {{"W", w, true}, {"Ids", ids64(2, D(2, 4), idv), false}};
    pe_tensor *g;
    grads("lookup_table_v2", pad4, in, 2, "Out", NULL, 0, 1, &g);
    tu_assert_dims(g, 2, D(6, 4));
    double want[6] = {2, 0, 3, 1, 0, 2}; /* id 4 (padding) never occurs here, row 1 unused */
    for (int v = 0; v < 6; v++)
        for (int j = 0; j < 4; j++) assert_true(tu_get(g, v * 4 + j) == want[v]);
    pe_tensor_free(g);
    /* padding row: ids hitting padding_idx contribute nothing */
    double idp[] = {4, 4, 1, 4};
    pe_tensor_free(in[1].value);
    in[1].value = ids64(1, D(4), idp);
    grads("lookup_table_v2", pad4, in, 2, "Out", NULL, 0, 1, &g);
    for (int v = 0; v < 6; v++)
        for (int j = 0; j < 4; j++) assert_true(tu_get(g, v * 4 + j) == (v == 1 ? 1.0 : 0.0));
    pe_tensor_free(g);
    pe_tensor_free(in[1].value);
    pe_tensor_free(w);
}

static pe_tensor *to_dtype(const pe_tensor *t, pe_dtype dt) {
    pe_tensor *o = tu_tensor(dt, t->ndim, t->dims, NULL);
    for (int64_t i = 0; i < pe_tensor_numel(t); i++) {
        if (dt == PE_DTYPE_FP32) ((float *)pe_tensor_data(o))[i] = (float)tu_get(t, i);
        else if (dt == PE_DTYPE_FP64) ((double *)pe_tensor_data(o))[i] = tu_get(t, i);
        else ((int64_t *)pe_tensor_data(o))[i] = (int64_t)tu_get(t, i);
    }
    return o;
}

/* fp32 copy of an fp64 tensor, which is freed. */
static pe_tensor *f32(pe_tensor *t) {
    pe_tensor *o = to_dtype(t, PE_DTYPE_FP32);
    pe_tensor_free(t);
    return o;
}

/* The fp32 kernels give the fp64 gradients to fp32 precision. */
static void check_fp32(const char *type, void (*attrs)(pe_op *), in_t *in, int n_in, const char *out_slot,
                       const char *const *extra, int n_extra) {
    pe_tensor *g64[4], *g32[4];
    in_t in32[4];
    int nd = 0;
    for (int i = 0; i < n_in; i++) {
        in32[i] = in[i];
        if (in[i].value->dtype == PE_DTYPE_FP64) in32[i].value = to_dtype(in[i].value, PE_DTYPE_FP32);
        nd += in[i].diff;
    }
    grads(type, attrs, in, n_in, out_slot, extra, n_extra, 1, g64);
    grads(type, attrs, in32, n_in, out_slot, extra, n_extra, 1, g32);
    for (int j = 0; j < nd; j++) {
        assert_int_equal(g32[j]->dtype, PE_DTYPE_FP32);
        assert_int_equal(pe_tensor_numel(g32[j]), pe_tensor_numel(g64[j]));
        double mx = 0;
        for (int64_t i = 0; i < pe_tensor_numel(g64[j]); i++) mx = fmax(mx, fabs(tu_get(g64[j], i)));
        for (int64_t i = 0; i < pe_tensor_numel(g64[j]); i++) {
            double a = tu_get(g32[j], i), e = tu_get(g64[j], i);
            if (!(fabs(a - e) <= 1e-4 * fabs(e) + 1e-5 * mx))
                fail_msg("%s grad %d [%lld]: fp32 %.9g, fp64 %.9g", type, j, (long long)i, a, e);
        }
        pe_tensor_free(g64[j]);
        pe_tensor_free(g32[j]);
    }
    for (int i = 0; i < n_in; i++) {
        if (in32[i].value != in[i].value) pe_tensor_free(in32[i].value);
        pe_tensor_free(in[i].value);
    }
}

static void test_fp32_matches_fp64(void **state) {
    (void)state;
    const char *ln_extra[] = {"Mean", "Variance"};
    check_fp32("mul", xn2, (in_t[]){{"X", RAND(110, 2, 3, 8), true}, {"Y", RAND(111, 8, 5), true}}, 2, "Out", NULL, 0);
    check_fp32("matmul_v2", txy, (in_t[]){{"X", RAND(112, 2, 1, 6, 3), true}, {"Y", RAND(113, 3, 4, 6), true}}, 2,
               "Out", NULL, 0);
    check_fp32("matmul", v1_alpha, (in_t[]){{"X", RAND(114, 3, 5, 6), true}, {"Y", RAND(115, 6, 4), true}}, 2, "Out",
               NULL, 0);
    check_fp32("lookup_table_v2", pad4,
               (in_t[]){{"W", RAND(116, 7, 5), true}, {"Ids", ids64(2, D(3, 2), (double[]){4, 1, 6, 1, 0, 1}), false}},
               2, "Out", NULL, 0);
    /* a non-uniform upstream gradient: layer_norm then multiply by a fixed tensor would
     * need two ops; instead Scale makes dY * scale non-uniform per column */
    check_fp32("layer_norm", NULL,
               (in_t[]){{"X", RAND(117, 6, 10), true}, {"Scale", RAND(118, 10), true}, {"Bias", RAND(119, 10), true}},
               3, "Y", ln_extra, 2);
}

/* Large inputs: gradients bitwise equal on 1 and 2 threads (the parallel
 * paths own disjoint output ranges and sum in a fixed order). */
static void check_threads(const char *type, void (*attrs)(pe_op *), in_t *in, int n_in, const char *out_slot,
                          const char *const *extra, int n_extra) {
    pe_tensor *g1[4], *g2[4];
    int nd = 0;
    for (int i = 0; i < n_in; i++) nd += in[i].diff;
    grads(type, attrs, in, n_in, out_slot, extra, n_extra, 1, g1);
    grads(type, attrs, in, n_in, out_slot, extra, n_extra, 2, g2);
    for (int j = 0; j < nd; j++) {
        assert_int_equal(pe_tensor_nbytes(g1[j]), pe_tensor_nbytes(g2[j]));
        if (memcmp(pe_tensor_data(g1[j]), pe_tensor_data(g2[j]), pe_tensor_nbytes(g1[j])) != 0)
            fail_msg("%s: gradient %d differs between 1 and 2 threads", type, j);
        pe_tensor_free(g1[j]);
        pe_tensor_free(g2[j]);
    }
    for (int i = 0; i < n_in; i++) pe_tensor_free(in[i].value);
}

static void test_thread_invariance(void **state) {
    (void)state;
    const char *ln_extra[] = {"Mean", "Variance"};
    /* 4096 ids over a 300-row table: many repeats per row */
    double *idv = malloc(4096 * sizeof *idv);
    assert_non_null(idv);
    for (int i = 0; i < 4096; i++) idv[i] = (double)((i * 7919) % 300);
    pe_tensor *w32 = f32(RAND(120, 300, 16));
    check_threads("lookup_table_v2", pad4, (in_t[]){{"W", w32, true}, {"Ids", ids64(2, D(64, 64), idv), false}}, 2,
                  "Out", NULL, 0);
    free(idv);
    pe_tensor *x32 = f32(RAND(121, 128, 600));
    pe_tensor *s32 = f32(RAND(122, 600)), *b32 = f32(RAND(123, 600));
    check_threads("layer_norm", NULL, (in_t[]){{"X", x32, true}, {"Scale", s32, true}, {"Bias", b32, true}}, 3, "Y",
                  ln_extra, 2);
    /* many small batched GEMMs (batches across threads) and a broadcast Y (summed in order) */
    check_threads("matmul_v2", NULL, (in_t[]){{"X", RAND(124, 64, 8, 8), true}, {"Y", RAND(125, 1, 8, 8), true}}, 2,
                  "Out", NULL, 0);
    check_threads("matmul_v2", ty, (in_t[]){{"X", RAND(126, 64, 8, 8), true}, {"Y", RAND(127, 64, 8, 8), true}}, 2,
                  "Out", NULL, 0);
    /* the MLP's second layer on 64 rows: dX = dOut Y^T and dY = X^T dOut split over the threads by
     * PE (ops/cpu/gemm.c) */
    check_threads("mul", NULL, (in_t[]){{"X", f32(RAND(128, 64, 512)), true}, {"Y", f32(RAND(129, 512, 256)), true}},
                  2, "Out", NULL, 0);
}

/* Gradient ops reject an Out@GRAD of the wrong shape with a message. */
static void test_grad_shape_errors(void **state) {
    (void)state;
    pe_program *p = pe_program_new();
    pe_tensor *x = RAND(130, 3, 4), *y = RAND(131, 4, 5), *g = RAND(132, 3, 4);
    tu_declare(p, "x", x);
    tu_declare(p, "y", y);
    tu_declare(p, "g", g);
    pe_block_add_var(&p->blocks[0], "dx", PE_DTYPE_FP64, 0, NULL);
    pe_op *op = pe_block_add_op(&p->blocks[0], "matmul_v2_grad");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Y", "y");
    pe_op_add_input(op, "Out@GRAD", "g");
    pe_op_add_output(op, "X@GRAD", "dx");
    pe_tensor *dx = pe_tensor_new();
    pe_feed f[] = {{"x", x}, {"y", y}, {"g", g}};
    assert_int_not_equal(tu_run(p, f, 3, (const char *[]){"dx"}, 1, &dx), PE_OK);
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
        cmocka_unit_test(test_embedding_grad_rows),
        cmocka_unit_test(test_fp32_matches_fp64),
        cmocka_unit_test(test_thread_invariance),
        cmocka_unit_test(test_grad_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
