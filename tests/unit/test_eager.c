/* tests/unit/test_eager.c — the eager entry points of pe/eager.h: one op run
 * on tensors gives the executor's bits for the same op in a program; slots,
 * attrs and dtypes are checked with messages naming the op and the arg;
 * pe_eager_grad_ops returns the grad maker's ops with the documented names;
 * an output may be its input only as a declared in-place pair (ParamOut =
 * Param), with the bits of the out-of-place run; a prepared op runs with
 * pe_eager_run's bits and checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "pe/pe.h"

static pe_tensor *filled(pe_dtype dt, int64_t r, int64_t c, float base) {
    pe_tensor *t = pe_tensor_new();
    int64_t dims[2] = {r, c};
    assert_int_equal(pe_tensor_resize(t, dt, 2, dims, pe_place_cpu(0)), PE_OK);
    if (dt == PE_DTYPE_FP32) {
        float *p = pe_tensor_data(t);
        for (int64_t i = 0; i < r * c; i++) p[i] = base + 0.37f * (float)i - 0.01f * (float)(i * i);
    }
    return t;
}

static void test_run_matches_executor(void **state) {
    (void)state;
    pe_tensor *x = filled(PE_DTYPE_FP32, 3, 4, 0.5f), *y = filled(PE_DTYPE_FP32, 4, 2, -1.0f), *out = pe_tensor_new();
    const char *xn = "x", *yn = "y";
    pe_eager_args in[] = {{"X", 1, &x, &xn}, {"Y", 1, &y, &yn}};
    pe_eager_args o[] = {{"Out", 1, &out, NULL}};
    int op = pe_op_type_find("matmul_v2");
    assert_true(op >= 0);
    assert_int_equal(pe_eager_run(op, in, 2, o, 1, NULL, 0, pe_place_cpu(0), 1, 0), PE_OK);
    assert_int_equal(out->ndim, 2);
    assert_int_equal(out->dims[0], 3);
    assert_int_equal(out->dims[1], 2);

    /* the same op in a program, run by the executor */
    pe_program *p = pe_program_new();
    int64_t xd[2] = {3, 4}, yd[2] = {4, 2}, od[2] = {3, 2};
    pe_block_add_var(&p->blocks[0], "x", PE_DTYPE_FP32, 2, xd);
    pe_block_add_var(&p->blocks[0], "y", PE_DTYPE_FP32, 2, yd);
    pe_block_add_var(&p->blocks[0], "out", PE_DTYPE_FP32, 2, od);
    pe_op *m = pe_block_add_op(&p->blocks[0], "matmul_v2");
    pe_op_add_input(m, "X", "x");
    pe_op_add_input(m, "Y", "y");
    pe_op_add_output(m, "Out", "out");
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, 1);
    pe_feed feeds[] = {{"x", x}, {"y", y}};
    const char *fetch[] = {"out"};
    pe_tensor *sout = pe_tensor_new();
    assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 2, fetch, 1, &sout), PE_OK);
    assert_memory_equal(pe_tensor_data(out), pe_tensor_data(sout), 6 * sizeof(float));

    /* a wrong dtype: the op's own infer message, naming the op and the input */
    pe_tensor *bad = filled(PE_DTYPE_INT64, 4, 2, 0), *o2 = pe_tensor_new();
    const char *bn = "labels";
    pe_eager_args in2[] = {{"X", 1, &x, &xn}, {"Y", 1, &bad, &bn}};
    pe_eager_args out2[] = {{"Out", 1, &o2, NULL}};
    assert_int_equal(pe_eager_run(op, in2, 2, out2, 1, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "op matmul_v2"));
    assert_non_null(strstr(pe_last_error(), "'labels'"));

    /* slots and attrs against the registry */
    assert_int_equal(pe_eager_run(op, in, 1, o, 1, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "op matmul_v2: input Y takes exactly one tensor"));
    pe_eager_args badslot[] = {{"X", 1, &x, NULL}, {"Z", 1, &y, NULL}};
    assert_int_equal(pe_eager_run(op, badslot, 2, o, 1, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "op matmul_v2 has no input slot 'Z'"));
    pe_attr a = {.name = "trans_x", .type = PE_ATTR_INT, .i = 1};
    assert_int_equal(pe_eager_run(op, in, 2, o, 1, &a, 1, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "attr 'trans_x' is int, the registry's type is bool"));
    pe_eager_args self[] = {{"Out", 1, &x, NULL}};
    assert_int_equal(pe_eager_run(op, in, 2, self, 1, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "is also input"));

    pe_tensor_free(sout);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(p);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(out);
    pe_tensor_free(bad);
    pe_tensor_free(o2);
}

static void test_grad_ops(void **state) {
    (void)state;
    pe_program *src = pe_program_new();
    pe_op *mul = pe_block_add_op(&src->blocks[0], "elementwise_mul");
    pe_op_add_input(mul, "X", "a");
    pe_op_add_input(mul, "Y", "a");
    pe_op_add_output(mul, "Out", "c");
    int64_t d[1] = {3};
    pe_eager_var vars[] = {{"a", PE_DTYPE_FP32, 1, d, true}, {"c", PE_DTYPE_FP32, 1, d, false}};
    pe_program *g = NULL;
    assert_int_equal(pe_eager_grad_ops(mul, vars, 2, &g), PE_OK);
    const pe_block *b = &g->blocks[0];
    assert_int_equal(b->n_ops, 1);
    assert_string_equal(b->ops[0].type, "elementwise_mul_grad");
    assert_string_equal(pe_op_input1(&b->ops[0], "Out@GRAD"), "c@GRAD");
    assert_string_equal(pe_op_output1(&b->ops[0], "X@GRAD"), "a@GRAD");
    assert_string_equal(pe_op_output1(&b->ops[0], "Y@GRAD"), "a@GRAD@RENAME@1");
    pe_program_free(g);
    /* an op without a grad maker */
    pe_op *lt = pe_block_add_op(&src->blocks[0], "less_than");
    pe_op_add_input(lt, "X", "a");
    pe_op_add_input(lt, "Y", "a");
    pe_op_add_output(lt, "Out", "c");
    assert_int_equal(pe_eager_grad_ops(lt, vars, 2, &g), PE_ERR_UNSUPPORTED);
    assert_null(g);
    assert_non_null(strstr(pe_last_error(), "op less_than has no gradient"));
    pe_program_free(src);
}

/* momentum with ParamOut = Param and VelocityOut = Velocity (ops.def's
 * in-place pairs) updates the tensors themselves, with the bits of the run
 * into new tensors; other aliasing is refused naming the slots. */
static void test_run_in_place(void **state) {
    (void)state;
    int op = pe_op_type_find("momentum");
    assert_true(op >= 0);
    pe_tensor *p = filled(PE_DTYPE_FP32, 3, 4, 0.5f), *g = filled(PE_DTYPE_FP32, 3, 4, -0.2f);
    pe_tensor *v = filled(PE_DTYPE_FP32, 3, 4, 0.1f), *lr = filled(PE_DTYPE_FP32, 1, 1, 0.0f);
    *(float *)pe_tensor_data(lr) = 0.05f;
    pe_tensor *po = pe_tensor_new(), *vo = pe_tensor_new();
    pe_eager_args in[] = {{"Param", 1, &p, NULL}, {"Grad", 1, &g, NULL}, {"Velocity", 1, &v, NULL},
                          {"LearningRate", 1, &lr, NULL}};
    pe_eager_args fresh[] = {{"ParamOut", 1, &po, NULL}, {"VelocityOut", 1, &vo, NULL}};
    assert_int_equal(pe_eager_run(op, in, 4, fresh, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_OK);
    void *pdata = pe_tensor_data(p);
    pe_eager_args same[] = {{"ParamOut", 1, &p, NULL}, {"VelocityOut", 1, &v, NULL}};
    assert_int_equal(pe_eager_run(op, in, 4, same, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_OK);
    assert_ptr_equal(pe_tensor_data(p), pdata); /* the parameter's own storage */
    assert_memory_equal(pe_tensor_data(p), pe_tensor_data(po), 12 * sizeof(float));
    assert_memory_equal(pe_tensor_data(v), pe_tensor_data(vo), 12 * sizeof(float));

    /* Grad is no in-place partner of ParamOut */
    pe_eager_args bad[] = {{"ParamOut", 1, &g, NULL}, {"VelocityOut", 1, &vo, NULL}};
    assert_int_equal(pe_eager_run(op, in, 4, bad, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "output ParamOut:0 is also input Grad:0, but Grad>ParamOut is no in-place pair"));
    /* one tensor for two outputs */
    pe_eager_args twice[] = {{"ParamOut", 1, &po, NULL}, {"VelocityOut", 1, &po, NULL}};
    assert_int_equal(pe_eager_run(op, in, 4, twice, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "outputs ParamOut:0 and VelocityOut:0 are one tensor"));

    pe_tensor *ts[] = {p, g, v, lr, po, vo};
    for (int i = 0; i < 6; i++) pe_tensor_free(ts[i]);
}

/* merged_momentum over 40 parameters in place: the many-args path of the
 * alias check (sorted screen, then the pairwise scan for the message) and
 * of pe_op_run's in-place test. Each parameter gets the single op's bits;
 * a ParamOut given the wrong Param, the same VelocityOut twice and a Grad
 * as ParamOut are refused with the pairwise scan's messages. */
static void test_run_in_place_many(void **state) {
    (void)state;
    enum { N = 40 };
    int mop = pe_op_type_find("merged_momentum"), op = pe_op_type_find("momentum");
    assert_true(mop >= 0 && op >= 0);
    pe_tensor *p[N], *g[N], *v[N], *pr[N], *vr[N];
    pe_tensor *lr = filled(PE_DTYPE_FP32, 1, 1, 0.05f);
    for (int k = 0; k < N; k++) {
        p[k] = filled(PE_DTYPE_FP32, 1 + k % 3, 5, 0.01f * (float)k);
        g[k] = filled(PE_DTYPE_FP32, 1 + k % 3, 5, -0.2f + 0.003f * (float)k);
        v[k] = filled(PE_DTYPE_FP32, 1 + k % 3, 5, 0.1f);
        pr[k] = pe_tensor_new(), vr[k] = pe_tensor_new();
        pe_eager_args in1[] = {{"Param", 1, &p[k], NULL}, {"Grad", 1, &g[k], NULL}, {"Velocity", 1, &v[k], NULL},
                               {"LearningRate", 1, &lr, NULL}};
        pe_eager_args out1[] = {{"ParamOut", 1, &pr[k], NULL}, {"VelocityOut", 1, &vr[k], NULL}};
        assert_int_equal(pe_eager_run(op, in1, 4, out1, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_OK);
    }
    pe_eager_args in[] = {{"Param", N, p, NULL}, {"Grad", N, g, NULL}, {"Velocity", N, v, NULL},
                          {"LearningRate", 1, &lr, NULL}};
    pe_tensor *po[N], *vo[N];
    memcpy(po, p, sizeof po);
    memcpy(vo, v, sizeof vo);
    pe_eager_args outs[] = {{"ParamOut", N, po, NULL}, {"VelocityOut", N, vo, NULL}};
    po[7] = p[8]; /* ParamOut:7 is Param:8: a pair slot, another arg */
    assert_int_equal(pe_eager_run(mop, in, 4, outs, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "output ParamOut:7 is input Param:8: Param>ParamOut is in place only arg by arg"));
    po[7] = p[7], vo[30] = v[3];
    assert_int_equal(pe_eager_run(mop, in, 4, outs, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "outputs VelocityOut:3 and VelocityOut:30 are one tensor"));
    vo[30] = v[30], po[12] = g[12];
    assert_int_equal(pe_eager_run(mop, in, 4, outs, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "output ParamOut:12 is also input Grad:12, but Grad>ParamOut is no in-place pair"));
    po[12] = p[12];
    assert_int_equal(pe_eager_run(mop, in, 4, outs, 2, NULL, 0, pe_place_cpu(0), 1, 0), PE_OK);
    for (int k = 0; k < N; k++) {
        assert_memory_equal(pe_tensor_data(p[k]), pe_tensor_data(pr[k]), pe_tensor_nbytes(pr[k]));
        assert_memory_equal(pe_tensor_data(v[k]), pe_tensor_data(vr[k]), pe_tensor_nbytes(vr[k]));
        pe_tensor *ts[] = {p[k], g[k], v[k], pr[k], vr[k]};
        for (int i = 0; i < 5; i++) pe_tensor_free(ts[i]);
    }
    pe_tensor_free(lr);
}

/* pe_op_type_reads_input: false only for ops.def's "-In" slots (dims and
 * dtype read, not data): what the eager tape's version check skips. */
static void test_reads_input(void **state) {
    (void)state;
    int add_g = pe_op_type_find("elementwise_add_grad"), mm_g = pe_op_type_find("matmul_v2_grad");
    assert_true(add_g >= 0 && mm_g >= 0);
    pe_op_slot_desc sd;
    assert_true(pe_op_type_input(add_g, 0, &sd));
    assert_string_equal(sd.name, "X");
    assert_false(pe_op_type_reads_input(add_g, 0));      /* "-X" */
    assert_true(pe_op_type_input(add_g, 2, &sd));
    assert_string_equal(sd.name, "Out@GRAD");
    assert_true(pe_op_type_reads_input(add_g, 2));
    assert_true(pe_op_type_reads_input(mm_g, 0));        /* matmul's gradient reads X's values */
    assert_false(pe_op_type_reads_input(mm_g, 99));
    assert_false(pe_op_type_reads_input(-1, 0));
}

/* Inputs on another place than the op's are refused before any kernel
 * runs, naming the op, the input and both places; a GPU place this process
 * does not see is refused naming it. (The CUDA tensor is a CPU one
 * labelled cuda:0 for the call: the check reads only the label.) */
static void test_places_checked(void **state) {
    (void)state;
    pe_tensor *x = filled(PE_DTYPE_FP32, 2, 2, 1.0f), *y = filled(PE_DTYPE_FP32, 2, 2, 2.0f), *out = pe_tensor_new();
    const char *xn = "x", *yn = "y";
    pe_eager_args in[] = {{"X", 1, &x, &xn}, {"Y", 1, &y, &yn}};
    pe_eager_args o[] = {{"Out", 1, &out, NULL}};
    int add = pe_op_type_find("elementwise_add");
    pe_place cpu = y->place;
    y->place = pe_place_cuda(0);
    assert_int_equal(pe_eager_run(add, in, 2, o, 1, NULL, 0, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "op elementwise_add: input Y:0 ('y') is on cuda:0, the op runs on cpu:0"));
    y->place = cpu;
    assert_null(out->buf);                                   /* nothing ran */
    /* every CPU place reads the one host memory */
    assert_int_equal(pe_eager_run(add, in, 2, o, 1, NULL, 0, pe_place_cpu(1), 1, 0), PE_OK);
    assert_int_equal(pe_eager_run(add, in, 2, o, 1, NULL, 0, pe_place_cuda(63), 1, 0), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "op elementwise_add: place cuda:63: "));
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(out);
}

/* A prepared op (pe_eager_prepare) gives pe_eager_run's bits run after run;
 * its layout and attrs are checked once, when it is made (the same
 * messages), and each run still checks what the tensors bring: an absent
 * arity-one arg, an output that is an input, the places. The attrs are
 * copied: the caller's may go away. */
static void test_prepared(void **state) {
    (void)state;
    int mm = pe_op_type_find("matmul_v2");
    pe_eager_args lay_in[] = {{"X", 1, NULL, NULL}, {"Y", 1, NULL, NULL}};
    pe_eager_args lay_out[] = {{"Out", 1, NULL, NULL}};
    pe_attr ty = {.name = strdup("trans_y"), .type = PE_ATTR_BOOL, .i = 1};
    pe_eager_prep *p = NULL;
    assert_int_equal(pe_eager_prepare(mm, lay_in, 2, lay_out, 1, &ty, 1, &p), PE_OK);
    free(ty.name); /* copied */
    assert_int_equal(pe_eager_prep_arity(p, false), 2);
    assert_int_equal(pe_eager_prep_arity(p, true), 1);
    assert_string_equal(pe_eager_prep_op(p), "matmul_v2");

    pe_tensor *x = filled(PE_DTYPE_FP32, 3, 4, 0.5f), *y = filled(PE_DTYPE_FP32, 2, 4, -1.0f);
    pe_tensor *ref = pe_tensor_new();
    pe_attr ty2 = {.name = "trans_y", .type = PE_ATTR_BOOL, .i = 1};
    pe_eager_args in[] = {{"X", 1, &x, NULL}, {"Y", 1, &y, NULL}};
    pe_eager_args o[] = {{"Out", 1, &ref, NULL}};
    assert_int_equal(pe_eager_run(mm, in, 2, o, 1, &ty2, 1, pe_place_cpu(0), 1, 0), PE_OK);
    for (int run = 0; run < 3; run++) {
        pe_tensor *out = pe_tensor_new();
        pe_tensor *ins[] = {x, y}, *outs[] = {out};
        assert_int_equal(pe_eager_run_prepared(p, ins, outs, pe_place_cpu(0), 1, 0), PE_OK);
        assert_int_equal(out->ndim, 2);
        assert_int_equal(out->dims[0], 3);
        assert_int_equal(out->dims[1], 2);
        assert_memory_equal(pe_tensor_data(out), pe_tensor_data(ref), 6 * sizeof(float));
        pe_tensor_free(out);
    }
    /* per run: the tensors' own checks */
    pe_tensor *out = pe_tensor_new();
    pe_tensor *absent[] = {x, NULL}, *outs[] = {out};
    assert_int_equal(pe_eager_run_prepared(p, absent, outs, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "op matmul_v2: input Y takes exactly one tensor, got 0"));
    pe_tensor *self_out[] = {x}, *xy[] = {x, y};
    assert_int_equal(pe_eager_run_prepared(p, xy, self_out, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "output Out:0 is also input X:0"));
    pe_tensor *bad = filled(PE_DTYPE_FP32, 2, 3, 0.0f), *xb[] = {x, bad};
    assert_int_equal(pe_eager_run_prepared(p, xb, outs, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "op matmul_v2"));
    assert_non_null(strstr(pe_last_error(), "'Y:0'"));      /* a prepared run names args <slot>:<k> */
    y->place = pe_place_cuda(0);
    assert_int_equal(pe_eager_run_prepared(p, xy, outs, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "input Y:0 ('Y:0') is on cuda:0, the op runs on cpu:0"));
    y->place = pe_place_cpu(0);
    pe_eager_prep_free(p);

    /* the layout and attrs, checked when it is made */
    pe_eager_args badslot[] = {{"X", 1, NULL, NULL}, {"Z", 1, NULL, NULL}};
    assert_int_equal(pe_eager_prepare(mm, badslot, 2, lay_out, 1, NULL, 0, &p), PE_ERR_INVALID);
    assert_null(p);
    assert_non_null(strstr(pe_last_error(), "op matmul_v2 has no input slot 'Z'"));
    assert_int_equal(pe_eager_prepare(mm, lay_in, 1, lay_out, 1, NULL, 0, &p), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "op matmul_v2: input Y takes exactly one tensor"));
    pe_attr wrong = {.name = "trans_x", .type = PE_ATTR_INT, .i = 1};
    assert_int_equal(pe_eager_prepare(mm, lay_in, 2, lay_out, 1, &wrong, 1, &p), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "attr 'trans_x' is int, the registry's type is bool"));
    assert_int_equal(pe_eager_prepare(9999999, lay_in, 2, lay_out, 1, NULL, 0, &p), PE_ERR_NOT_FOUND);
    assert_int_equal(pe_eager_run_prepared(NULL, xy, outs, pe_place_cpu(0), 1, 0), PE_ERR_INVALID);
    pe_eager_prep_free(NULL);
    pe_tensor *ts[] = {x, y, ref, out, bad};
    for (int i = 0; i < 5; i++) pe_tensor_free(ts[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_matches_executor),
        cmocka_unit_test(test_grad_ops),
        cmocka_unit_test(test_run_in_place),
        cmocka_unit_test(test_run_in_place_many),
        cmocka_unit_test(test_reads_input),
        cmocka_unit_test(test_places_checked),
        cmocka_unit_test(test_prepared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
