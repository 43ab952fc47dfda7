/* tests/unit/test_op_registry.c — the facts ops/ops.def gives pe_op_info
 * beyond slots and attrs: the PE_GRAD_WIRE wiring (kinds, order, slots of
 * the grad op), the optimizer facts of the PE_OPT table (per-element slots,
 * in-place pairs, shared inputs, merged partners, alike for an op and its
 * merged form), op ids by type, and what an op context holds (attrs through
 * the accessors, no runtime services by default). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "ops/op.h"

static const pe_op_info *info_of(const char *type) {
    const pe_op_info *info = pe_op_info_find(type);
    assert_non_null(info);
    return info;
}

static void expect_wire(const pe_op_info *info, int i, int kind, const char *fslot, const char *gslot) {
    assert_true(i < info->n_grad_wire);
    assert_int_equal(info->grad_wire[i].kind, kind);
    assert_string_equal(info->grad_wire[i].fslot, fslot);
    assert_string_equal(info->grad_wire[i].gslot, gslot);
}

static void test_grad_wire(void **state) {
    (void)state;
    const pe_op_info *relu = info_of("relu");
    assert_int_equal(relu->grad_op_id, PE_OP_relu_grad);
    assert_true(relu->grad == pe_grad_wired);
    assert_int_equal(relu->n_grad_wire, 3);
    expect_wire(relu, 0, PE_WIRE_FWD_OUTPUT, "Out", "Out");
    expect_wire(relu, 1, PE_WIRE_OUT_GRAD, "Out", "Out@GRAD");
    expect_wire(relu, 2, PE_WIRE_IN_GRAD, "X", "X@GRAD");
    /* the order of ops.def, not the grad op's slot order (Output@GRAD before Bias there) */
    const pe_op_info *conv = info_of("conv2d");
    assert_int_equal(conv->n_grad_wire, 7);
    expect_wire(conv, 2, PE_WIRE_FWD_INPUT, "Bias", "Bias");
    expect_wire(conv, 3, PE_WIRE_OUT_GRAD, "Output", "Output@GRAD");
    expect_wire(conv, 6, PE_WIRE_IN_GRAD, "Bias", "Bias@GRAD");
    /* hand-written makers stay, not-differentiable ops have none */
    assert_int_equal(info_of("batch_norm")->grad_op_id, -1);
    assert_non_null(info_of("batch_norm")->grad);
    assert_null(info_of("top_k")->grad);
    /* collectives: c_identity and c_allreduce_sum are each other's gradient, the rest have none */
    assert_true(info_of("c_identity")->grad == pe_grad_c_identity);
    assert_true(info_of("c_allreduce_sum")->grad == pe_grad_c_allreduce_sum);
    assert_null(info_of("c_allreduce_max")->grad);
    assert_null(info_of("c_broadcast")->grad);
    assert_null(info_of("c_allgather")->grad);
    /* every wired op: a grad op of the registry whose slots it names */
    for (int id = 0; id < pe_op_info_count(); id++) {
        const pe_op_info *f = pe_op_info_get(id);
        if (f->grad_op_id < 0) continue;
        const pe_op_info *g = pe_op_info_get(f->grad_op_id);
        assert_non_null(g);
        assert_true(f->n_grad_wire > 0);
        for (int i = 0; i < f->n_grad_wire; i++) {
            bool out = f->grad_wire[i].kind == PE_WIRE_IN_GRAD;
            int gi = out ? pe_op_info_output_index(g, f->grad_wire[i].gslot) : pe_op_info_input_index(g, f->grad_wire[i].gslot);
            assert_true(gi >= 0);
        }
    }
}

static void test_optimizer_facts(void **state) {
    (void)state;
    const char *const opt[] = {"sgd", "momentum", "adam"};
    const int merged[] = {PE_OP_merged_sgd, PE_OP_merged_momentum, PE_OP_merged_adam};
    for (int k = 0; k < 3; k++) {
        const pe_op_info *o = info_of(opt[k]), *m = pe_op_info_get(merged[k]);
        assert_true(pe_op_info_is_optimizer(o) && !pe_op_info_is_merged(o));
        assert_true(pe_op_info_is_merged(m) && !pe_op_info_is_optimizer(m));
        assert_int_equal(o->merged_id, merged[k]);
        assert_int_equal(m->fused_from_id, o->id);
        /* the merged op answers alike, slot by slot name */
        const pe_op_info *both[2] = {o, m};
        for (int j = 0; j < 2; j++) {
            const pe_op_info *x = both[j];
            assert_true(pe_op_info_elem_input(x, pe_op_info_input_index(x, "Param")));
            assert_true(pe_op_info_elem_input(x, pe_op_info_input_index(x, "Grad")));
            assert_false(pe_op_info_elem_input(x, pe_op_info_input_index(x, "LearningRate")));
            assert_true(pe_op_info_shared_input(x, pe_op_info_input_index(x, "LearningRate")));
            assert_false(pe_op_info_shared_input(x, pe_op_info_input_index(x, "Param")));
            assert_true(pe_op_info_elem_output(x, pe_op_info_output_index(x, "ParamOut")));
            assert_int_equal(x->elem_pairs[0][0], pe_op_info_input_index(x, "Param"));
            assert_int_equal(x->elem_pairs[0][1], pe_op_info_output_index(x, "ParamOut"));
        }
    }
    const pe_op_info *adam = info_of("adam");
    assert_int_equal(adam->n_elem_pairs, 3);
    assert_true(pe_op_info_elem_input(adam, pe_op_info_input_index(adam, "Moment2")));
    assert_false(pe_op_info_elem_input(adam, pe_op_info_input_index(adam, "Beta1Pow")));
    assert_false(pe_op_info_elem_output(adam, pe_op_info_output_index(adam, "Beta1PowOut")));
    assert_int_equal(info_of("momentum")->n_elem_pairs, 2);
    assert_int_equal(info_of("sgd")->n_elem_pairs, 1);
    const pe_op_info *relu = info_of("relu");
    assert_false(pe_op_info_is_optimizer(relu) || pe_op_info_is_merged(relu));
    assert_int_equal(relu->elem_in_mask | relu->elem_out_mask | relu->shared_in_mask, 0);
    assert_false(pe_op_info_elem_input(relu, -1));
}

static void test_type_id(void **state) {
    (void)state;
    assert_int_equal(pe_op_type_id("sgd"), PE_OP_sgd);
    assert_int_equal(pe_op_type_id("relu_grad"), PE_OP_relu_grad);
    assert_int_equal(pe_op_type_id("no_such_op"), -1);
    assert_int_equal(pe_op_type_id(NULL), -1);
}

/* The context copies what kernels read: a strings attr through pe_ctx_strings,
 * the type through info; no runtime services unless the executor sets them. */
static void test_context(void **state) {
    (void)state;
    pe_program *p = pe_program_new();
    pe_op *op = pe_block_add_op(&p->blocks[0], "fused_elemwise_activation");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Y", "y");
    pe_op_add_output(op, "Out", "out");
    const char *fl[2] = {"relu", "elementwise_add"};
    assert_int_equal(pe_op_set_strings(op, "functor_list", fl, 2), PE_OK);
    pe_scope *s = pe_scope_new(NULL);
    assert_non_null(pe_scope_var(s, "x"));
    assert_non_null(pe_scope_var(s, "y"));
    pe_op_ctx ctx;
    assert_int_equal(pe_op_ctx_init(&ctx, op, s, pe_place_cpu(0)), PE_OK);
    assert_string_equal(ctx.info->name, "fused_elemwise_activation");
    assert_null(ctx.svc);
    int n = 0;
    const char *const *f = pe_ctx_strings(&ctx, "functor_list", &n);
    assert_int_equal(n, 2);
    assert_string_equal(f[0], "relu");
    assert_string_equal(f[1], "elementwise_add");
    assert_string_equal(pe_ctx_out_name(&ctx, "Out", 0), "out");
    pe_op_ctx_release(&ctx);
    pe_scope_free(s);
    pe_program_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_wire),
        cmocka_unit_test(test_optimizer_facts),
        cmocka_unit_test(test_type_id),
        cmocka_unit_test(test_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
