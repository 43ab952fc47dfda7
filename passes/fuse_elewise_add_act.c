/* passes/fuse_elewise_add_act.c — BuildStrategy.fuse_elewise_add_act_ops:
 * Paddle's fuse_elewise_add_act_pass for the act(x + y) form.
 *
 * Pattern (forward), t intermediate:
 *     t   = elementwise_add(a, b)           any broadcast, any axis
 *     out = relu|sigmoid|tanh(t)
 *  -> out = fused_elemwise_activation(X a, Y b;
 *                                     functor_list [act, elementwise_add], axis)
 * and, when the program has its backward:
 *     g      = act_grad(Out out, Out@GRAD g_out)
 *     ga, gb = elementwise_add_grad(X a, Y b, Out@GRAD g)
 *  -> ga, gb, [g] = fused_elemwise_activation_grad(X a, Y b, Out out, Out@GRAD g_out)
 * g is kept as IntermediateOut@GRAD only when the kernel needs a buffer for
 * the pre-activation gradient: when neither ga nor gb is certainly of the
 * output's shape (declared dims equal), e.g. no gradient for a and b a bias.
 * IntermediateOut is never saved (save_intermediate_out false): the act
 * gradients from Out do not need it. The x + act(y) form (Paddle's other
 * functor order) is not fused.
 *
 * Safety rules as every fusion pass (passes/fuse.h); the backward is fused
 * all or nothing.
 */
#include "passes/fuse.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    int add, act, act_grad, add_grad; /* grads -1 = no backward */
    bool keep_g;
} ea_match;

static bool streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* Declared dims of a and b are equal (and fully comparable). */
static bool same_decl(const pe_block *b, const char *x, const char *y) {
    const pe_var *u = x ? pe_block_find_var(b, x) : NULL, *v = y ? pe_block_find_var(b, y) : NULL;
    if (!u || !v || u->ndim != v->ndim) return false;
    for (int i = 0; i < u->ndim; i++)
        if (u->dims[i] != v->dims[i]) return false;
    return true;
}

static bool match(const pe_program *p, const pe_use_index *ix, const pe_fuse_opts *o, int i, void *mv) {
    ea_match *m = mv;
    const pe_block *b = &p->blocks[0];
    const pe_op *add = &b->ops[i];
    if (pe_op_type_id(add->type) != PE_OP_elementwise_add) return false;
    const char *a = pe_fuse_in(add, "X"), *y = pe_fuse_in(add, "Y"), *t = pe_fuse_out(add, "Out");
    if (!a || !y || !t) return false;
    const pe_var_uses *ut = pe_uses_get(ix, t);
    if (!ut || ut->n_readers != 1) return false;
    *m = (ea_match){.add = i, .act = ut->readers[0], .act_grad = -1, .add_grad = -1};
    const pe_op *act = &b->ops[m->act];
    if (!pe_fuse_is_act(pe_op_type_id(act->type)) || !streq(pe_fuse_in(act, "X"), t)) return false;
    const char *out = pe_fuse_out(act, "Out");
    if (!out) return false;
    int64_t axis = pe_fuse_attr_int(add, "axis", -1);

    m->act_grad = pe_fuse_reader_of(b, ix, out, pe_op_info_find(act->type)->grad_op_id, "Out");
    const char *g = m->act_grad >= 0 ? pe_fuse_out(&b->ops[m->act_grad], "X@GRAD") : NULL;
    m->add_grad = pe_fuse_reader_of(b, ix, g, PE_OP_elementwise_add_grad, "Out@GRAD");
    if (m->act_grad >= 0) {
        if (m->add_grad < 0) return false;
        const pe_op *ag = &b->ops[m->add_grad];
        if (!streq(pe_fuse_in(ag, "X"), a) || !streq(pe_fuse_in(ag, "Y"), y) ||
            pe_fuse_attr_int(ag, "axis", -1) != axis || m->add_grad < m->act_grad || m->act > m->act_grad)
            return false;
        int bwd[2] = {m->act_grad, m->add_grad};
        if (!pe_fuse_is_intermediate(p, ix, NULL, g, bwd, 2)) return false;
        const char *ga = pe_fuse_out(ag, "X@GRAD"), *gb = pe_fuse_out(ag, "Y@GRAD");
        m->keep_g = !((ga && same_decl(b, a, t)) || (gb && same_decl(b, y, t)));
        if (!m->keep_g && !pe_fuse_is_intermediate(p, ix, o, g, bwd, 2)) m->keep_g = true;
        if (!pe_fuse_in(&b->ops[m->act_grad], "Out@GRAD") || !pe_fuse_can_merge(b, bwd, 2)) return false;
    } else if (m->add_grad >= 0) {
        return false;
    }
    int all[4] = {m->add, m->act, m->act_grad, m->add_grad};
    if (!pe_fuse_is_intermediate(p, ix, o, t, all, m->act_grad >= 0 ? 4 : 2)) return false;
    return pe_fuse_can_merge(b, all, 2);
}

static pe_status add_role_vars(pe_strlist *l, const pe_op *op) {
    const pe_attr *a = pe_op_attr(op, "op_role_var");
    if (!a || a->type != PE_ATTR_STRINGS) return PE_OK;
    for (int i = 0; i < a->n; i++) PE_CHECK(pe_strlist_add(l, a->strings[i]));
    return PE_OK;
}

enum { N_A, N_Y, N_T, N_OUT, N_ACT, N_GOUT, N_G, N_GA, N_GB, N_COUNT };

static pe_status set_common(pe_op *op, const char *act, int64_t axis, int role) {
    const char *fl[2] = {act, "elementwise_add"};
    PE_CHECK(pe_op_set_strings(op, "functor_list", fl, 2));
    PE_CHECK(pe_op_set_int(op, "axis", axis));
    return pe_op_set_int(op, "op_role", role);
}

static pe_status apply(pe_program *p, const void *mv) {
    const ea_match *m = mv;
    pe_block *b = &p->blocks[0];
    const pe_op *add = &b->ops[m->add], *act = &b->ops[m->act];
    const pe_op *acg = m->act_grad >= 0 ? &b->ops[m->act_grad] : NULL;
    const pe_op *adg = m->add_grad >= 0 ? &b->ops[m->add_grad] : NULL;
    const char *names[N_COUNT] = {
        pe_fuse_in(add, "X"), pe_fuse_in(add, "Y"), pe_fuse_out(add, "Out"), pe_fuse_out(act, "Out"), act->type,
        acg ? pe_fuse_in(acg, "Out@GRAD") : NULL, acg ? pe_fuse_out(acg, "X@GRAD") : NULL,
        adg ? pe_fuse_out(adg, "X@GRAD") : NULL, adg ? pe_fuse_out(adg, "Y@GRAD") : NULL,
    };
    int64_t axis = pe_fuse_attr_int(add, "axis", -1);
    int fwd_role = pe_fuse_op_role(add), bwd_role = adg ? pe_fuse_op_role(adg) : PE_ROLE_BACKWARD;
    pe_strlist nm = {0}, rv = {0};
    pe_status st = PE_OK;
    for (int k = 0; k < N_COUNT && st == PE_OK; k++) st = pe_strlist_add(&nm, names[k]);
    if (st == PE_OK && acg) st = add_role_vars(&rv, acg);
    if (st == PE_OK && adg) st = add_role_vars(&rv, adg);
    char **n = nm.s;
    pe_op *op;
    int pos;
    if (st == PE_OK && adg) {
        int bm[2] = {m->act_grad, m->add_grad};
        st = pe_fuse_replace(b, bm, 2, "fused_elemwise_activation_grad", &op, &pos);
        if (st == PE_OK) st = pe_op_add_input(op, "X", n[N_A]);
        if (st == PE_OK) st = pe_op_add_input(op, "Y", n[N_Y]);
        if (st == PE_OK) st = pe_op_add_input(op, "Out", n[N_OUT]);
        if (st == PE_OK) st = pe_op_add_input(op, "Out@GRAD", n[N_GOUT]);
        if (st == PE_OK && n[N_GA]) st = pe_op_add_output(op, "X@GRAD", n[N_GA]);
        if (st == PE_OK && n[N_GB]) st = pe_op_add_output(op, "Y@GRAD", n[N_GB]);
        if (st == PE_OK && m->keep_g) st = pe_op_add_output(op, "IntermediateOut@GRAD", n[N_G]);
        if (st == PE_OK) st = set_common(op, n[N_ACT], axis, bwd_role);
        if (st == PE_OK && rv.n) st = pe_op_set_strings(op, "op_role_var", (const char *const *)rv.s, rv.n);
    }
    if (st == PE_OK) {
        int fm[2] = {m->add, m->act};
        st = pe_fuse_replace(b, fm, 2, "fused_elemwise_activation", &op, &pos);
        if (st == PE_OK) st = pe_op_add_input(op, "X", n[N_A]);
        if (st == PE_OK) st = pe_op_add_input(op, "Y", n[N_Y]);
        if (st == PE_OK) st = pe_op_add_output(op, "Out", n[N_OUT]);
        if (st == PE_OK) st = set_common(op, n[N_ACT], axis, fwd_role);
    }
    if (st == PE_OK) {
        pe_fuse_drop_var(p, n[N_T]);
        if (n[N_G] && !m->keep_g) pe_fuse_drop_var(p, n[N_G]);
    }
    pe_strlist_free(&nm);
    pe_strlist_free(&rv);
    return st;
}

pe_status pe_fuse_elewise_add_act(pe_program *p, const pe_fuse_opts *o, int *n_fused) {
    ea_match m;
    return pe_fuse_each(p, o, "fuse_elewise_add_act_ops", match, apply, &m, sizeof m, n_fused);
}
