/* passes/fuse_fc.c — the fc fusion pass (BuildStrategy.fuse_gemm_epilogue,
 * Paddle's name for this training-time fusion; the fused ops are Paddle's
 * `fc` and a matching `fc_grad`).
 *
 * Pattern (forward), with t1 and t2 intermediates:
 *     t1 = mul(x, w)                    w: [K, N], y_num_col_dims 1
 *          or matmul_v2(x, w)           no transposes, x of rank >= 2
 *     t2 = elementwise_add(t1, b)       b: [N], axis -1 or x_num_col_dims
 *     t3 = relu|sigmoid|tanh(t2)        optional
 *  -> t3 = fc(Input x, W w, Bias b; in_num_col_dims, activation_type)
 * and, when the program has the backward of that pattern:
 *     g2 = act_grad(Out t3, Out@GRAD g3)                         optional
 *     g1, gb = elementwise_add_grad(X t1, Y b, Out@GRAD g2)
 *     gx, gw = mul_grad(X x, Y w, Out@GRAD g1)         (matmul_v2_grad)
 *  -> gx, gw, gb, g2 = fc_grad(Input x, W w, Bias b, Out t3, Out@GRAD g3)
 * where g2 (PreAct@GRAD) stays as the buffer of the pre-activation
 * gradient the GEMMs read; t1, t2 and g1 disappear. Without an activation,
 * t2 is fc's Out and fc_grad reads t2's gradient directly.
 *
 * Matching is by dataflow (which op reads which var), never by var names.
 * A pattern whose backward is only partly there (some grad op missing or
 * wired differently) is left alone, as is one whose intermediates are used
 * anywhere else, fetched, protected or persistable. The activation is fused
 * only when t2 has no other reader; otherwise mul + add still become fc.
 */
#include "passes/fuse.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    int mul, add, act;               /* forward ops; act -1 = none */
    int act_grad, add_grad, mul_grad; /* -1 = no backward */
    int64_t xcd;                     /* fc's in_num_col_dims */
} fc_match;

static bool streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* The x_num_col_dims fc takes for this mul / mul_grad / matmul_v2 /
 * matmul_v2_grad, or false when the op is not one plain GEMM of x's rows
 * by a [K, N] matrix. mul: y_num_col_dims 1. matmul_v2 (what eager
 * Linear layers and to_static's traced programs record): no transposes and
 * x of rank >= 2, whose leading dims are then rows (ops/cpu/math.c runs it
 * as the one GEMM [rows, K] x [K, N], as mul does). */
static bool gemm_cols(const pe_block *b, const pe_op *op, int64_t *xcd) {
    int id = pe_op_type_id(op->type);
    if (id == PE_OP_mul || id == PE_OP_mul_grad) {
        *xcd = pe_fuse_attr_int(op, "x_num_col_dims", 1);
        return pe_fuse_attr_int(op, "y_num_col_dims", 1) == 1;
    }
    if (pe_fuse_attr_int(op, "trans_x", 0) || pe_fuse_attr_int(op, "trans_y", 0)) return false;
    const pe_var *xv = pe_block_find_var(b, pe_fuse_in(op, "X"));
    if (!xv || xv->ndim < 2) return false;
    *xcd = xv->ndim - 1;
    return true;
}

static bool match(const pe_program *p, const pe_use_index *ix, const pe_fuse_opts *o, int i, void *mv) {
    fc_match *m = mv;
    const pe_block *b = &p->blocks[0];
    const pe_op *mul = &b->ops[i];
    int mul_id = pe_op_type_id(mul->type);
    if (mul_id != PE_OP_mul && mul_id != PE_OP_matmul_v2) return false;
    const char *x = pe_fuse_in(mul, "X"), *w = pe_fuse_in(mul, "Y"), *t1 = pe_fuse_out(mul, "Out");
    if (!x || !w || !t1) return false;
    int64_t xcd;
    if (!gemm_cols(b, mul, &xcd)) return false;
    const pe_var *wv = pe_block_find_var(b, w), *t1v = pe_block_find_var(b, t1);
    if (!wv || wv->ndim != 2 || wv->dims[1] <= 0 || !t1v || t1v->ndim != xcd + 1) return false;

    *m = (fc_match){.mul = i, .add = -1, .act = -1, .act_grad = -1, .add_grad = -1, .mul_grad = -1, .xcd = xcd};
    m->add = pe_fuse_reader_of(b, ix, t1, PE_OP_elementwise_add, "X");
    if (m->add < 0) return false;
    const pe_op *add = &b->ops[m->add];
    const char *bias = pe_fuse_in(add, "Y"), *t2 = pe_fuse_out(add, "Out");
    int64_t axis = pe_fuse_attr_int(add, "axis", -1);
    const pe_var *bv = bias ? pe_block_find_var(b, bias) : NULL;
    if (!t2 || !bv || bv->ndim != 1 || bv->dims[0] != wv->dims[1] || (axis != -1 && axis != xcd)) return false;

    /* the activation: the only reader of t2 */
    const pe_var_uses *u2 = pe_uses_get(ix, t2);
    if (u2 && u2->n_readers == 1 && pe_fuse_is_act(pe_op_type_id(b->ops[u2->readers[0]].type)) &&
        streq(pe_fuse_in(&b->ops[u2->readers[0]], "X"), t2)) {
        int fwd2[2] = {m->add, u2->readers[0]};
        if (pe_fuse_is_intermediate(p, ix, o, t2, fwd2, 2)) m->act = u2->readers[0];
    }
    const char *out = m->act >= 0 ? pe_fuse_out(&b->ops[m->act], "Out") : t2;
    if (!out) return false;

    /* the backward, all or nothing */
    const char *g_pre = NULL; /* gradient reaching t2 */
    if (m->act >= 0) {
        m->act_grad = pe_fuse_reader_of(b, ix, out, pe_op_info_find(b->ops[m->act].type)->grad_op_id, "Out");
        if (m->act_grad >= 0) g_pre = pe_fuse_out(&b->ops[m->act_grad], "X@GRAD");
    }
    m->add_grad = pe_fuse_reader_of(b, ix, t1, PE_OP_elementwise_add_grad, "X");
    bool any_bwd = m->act_grad >= 0 || m->add_grad >= 0;
    if (any_bwd) {
        if (m->add_grad < 0 || (m->act >= 0 && m->act_grad < 0)) return false;
        const pe_op *ag = &b->ops[m->add_grad];
        if (!streq(pe_fuse_in(ag, "Y"), bias) || pe_fuse_attr_int(ag, "axis", -1) != axis) return false;
        if (m->act >= 0 && !streq(pe_fuse_in(ag, "Out@GRAD"), g_pre)) return false;
        const char *g1 = pe_fuse_out(ag, "X@GRAD");
        m->mul_grad = pe_fuse_reader_of(b, ix, g1, pe_op_info_find(mul->type)->grad_op_id, "Out@GRAD");
        if (m->mul_grad < 0) return false;
        const pe_op *mg = &b->ops[m->mul_grad];
        int64_t gcd;
        if (!streq(pe_fuse_in(mg, "X"), x) || !streq(pe_fuse_in(mg, "Y"), w) || !gemm_cols(b, mg, &gcd) || gcd != xcd)
            return false;
        int bwd[3] = {m->add_grad, m->mul_grad, m->act_grad};
        int nb = m->act >= 0 ? 3 : 2;
        if (!pe_fuse_is_intermediate(p, ix, o, g1, bwd, 2)) return false;
        /* g2 stays (PreAct@GRAD) but must not be read or written elsewhere */
        if (m->act >= 0 && !pe_fuse_is_intermediate(p, ix, NULL, g_pre, bwd, nb)) return false;
        if (m->mul_grad < m->add_grad || (m->act >= 0 && m->add_grad < m->act_grad)) return false;
    }
    int all[6] = {m->mul, m->add, m->act, m->act_grad, m->add_grad, m->mul_grad}, n_all = 0;
    for (int k = 0; k < 6; k++)
        if (all[k] >= 0) all[n_all++] = all[k];
    if (!pe_fuse_is_intermediate(p, ix, o, t1, all, n_all)) return false;
    if (m->act >= 0 && !pe_fuse_is_intermediate(p, ix, o, t2, all, n_all)) return false;
    int last_fwd = m->act >= 0 ? m->act : m->add;
    if (any_bwd && (last_fwd > m->add_grad || (m->act_grad >= 0 && last_fwd > m->act_grad))) return false;

    int fm[3] = {m->mul, m->add, m->act};
    if (!pe_fuse_can_merge(b, fm, m->act >= 0 ? 3 : 2)) return false;
    if (any_bwd) {
        const char *g_out = m->act >= 0 ? pe_fuse_in(&b->ops[m->act_grad], "Out@GRAD")
                                        : pe_fuse_in(&b->ops[m->add_grad], "Out@GRAD");
        int bm[3] = {m->add_grad, m->mul_grad, m->act_grad};
        if (!g_out || !pe_fuse_can_merge(b, bm, m->act >= 0 ? 3 : 2)) return false;
    }
    return true;
}

/* Appends every op_role_var string of op to l. */
static pe_status add_role_vars(pe_strlist *l, const pe_op *op) {
    const pe_attr *a = pe_op_attr(op, "op_role_var");
    if (!a || a->type != PE_ATTR_STRINGS) return PE_OK;
    for (int i = 0; i < a->n; i++) PE_CHECK(pe_strlist_add(l, a->strings[i]));
    return PE_OK;
}

/* Names of a match, copied before the block is edited. */
enum { N_X, N_W, N_B, N_OUT, N_T1, N_T2, N_ACT, N_GOUT, N_GPRE, N_G1, N_GX, N_GW, N_GB, N_COUNT };

static pe_status apply(pe_program *p, const void *mv) {
    const fc_match *m = mv;
    pe_block *b = &p->blocks[0];
    const pe_op *mul = &b->ops[m->mul], *add = &b->ops[m->add];
    const pe_op *act = m->act >= 0 ? &b->ops[m->act] : NULL;
    const pe_op *acg = m->act_grad >= 0 ? &b->ops[m->act_grad] : NULL;
    const pe_op *adg = m->add_grad >= 0 ? &b->ops[m->add_grad] : NULL;
    const pe_op *mlg = m->mul_grad >= 0 ? &b->ops[m->mul_grad] : NULL;
    const char *names[N_COUNT] = {
        pe_fuse_in(mul, "X"), pe_fuse_in(mul, "Y"), pe_fuse_in(add, "Y"),
        act ? pe_fuse_out(act, "Out") : pe_fuse_out(add, "Out"),
        pe_fuse_out(mul, "Out"), pe_fuse_out(add, "Out"), act ? act->type : "",
        acg ? pe_fuse_in(acg, "Out@GRAD") : adg ? pe_fuse_in(adg, "Out@GRAD") : NULL,
        acg ? pe_fuse_out(acg, "X@GRAD") : NULL,
        adg ? pe_fuse_out(adg, "X@GRAD") : NULL,
        mlg ? pe_fuse_out(mlg, "X@GRAD") : NULL, mlg ? pe_fuse_out(mlg, "Y@GRAD") : NULL,
        adg ? pe_fuse_out(adg, "Y@GRAD") : NULL,
    };
    pe_strlist nm = {0}, rv = {0};
    pe_status st = PE_OK;
    for (int k = 0; k < N_COUNT && st == PE_OK; k++) st = pe_strlist_add(&nm, names[k]);
    if (st == PE_OK && acg) st = add_role_vars(&rv, acg);
    if (st == PE_OK && adg) st = add_role_vars(&rv, adg);
    if (st == PE_OK && mlg) st = add_role_vars(&rv, mlg);
    const int64_t xcd = m->xcd;
    int fwd_role = pe_fuse_op_role(mul), bwd_role = mlg ? pe_fuse_op_role(mlg) : PE_ROLE_BACKWARD;
    char **n = nm.s;
    pe_op *op;
    int pos;
    /* backward first: its ops all come after the forward ones */
    if (st == PE_OK && mlg) {
        int bm[3] = {m->add_grad, m->mul_grad, m->act_grad};
        st = pe_fuse_replace(b, bm, acg ? 3 : 2, "fc_grad", &op, &pos);
        if (st == PE_OK) st = pe_op_add_input(op, "Input", n[N_X]);
        if (st == PE_OK) st = pe_op_add_input(op, "W", n[N_W]);
        if (st == PE_OK) st = pe_op_add_input(op, "Bias", n[N_B]);
        if (st == PE_OK && acg) st = pe_op_add_input(op, "Out", n[N_OUT]);
        if (st == PE_OK) st = pe_op_add_input(op, "Out@GRAD", n[N_GOUT]);
        if (st == PE_OK && n[N_GX]) st = pe_op_add_output(op, "Input@GRAD", n[N_GX]);
        if (st == PE_OK && n[N_GW]) st = pe_op_add_output(op, "W@GRAD", n[N_GW]);
        if (st == PE_OK && n[N_GB]) st = pe_op_add_output(op, "Bias@GRAD", n[N_GB]);
        if (st == PE_OK && acg) st = pe_op_add_output(op, "PreAct@GRAD", n[N_GPRE]);
        if (st == PE_OK) st = pe_op_set_int(op, "in_num_col_dims", xcd);
        if (st == PE_OK) st = pe_op_set_string(op, "activation_type", n[N_ACT]);
        if (st == PE_OK) st = pe_op_set_int(op, "op_role", bwd_role);
        if (st == PE_OK && rv.n) st = pe_op_set_strings(op, "op_role_var", (const char *const *)rv.s, rv.n);
    }
    if (st == PE_OK) {
        int fm[3] = {m->mul, m->add, m->act};
        st = pe_fuse_replace(b, fm, m->act >= 0 ? 3 : 2, "fc", &op, &pos);
        if (st == PE_OK) st = pe_op_add_input(op, "Input", n[N_X]);
        if (st == PE_OK) st = pe_op_add_input(op, "W", n[N_W]);
        if (st == PE_OK) st = pe_op_add_input(op, "Bias", n[N_B]);
        if (st == PE_OK) st = pe_op_add_output(op, "Out", n[N_OUT]);
        if (st == PE_OK) st = pe_op_set_int(op, "in_num_col_dims", xcd);
        if (st == PE_OK) st = pe_op_set_string(op, "activation_type", n[N_ACT]);
        if (st == PE_OK) st = pe_op_set_int(op, "op_role", fwd_role);
    }
    if (st == PE_OK) {
        pe_fuse_drop_var(p, n[N_T1]);
        if (m->act >= 0) pe_fuse_drop_var(p, n[N_T2]);
        if (n[N_G1]) pe_fuse_drop_var(p, n[N_G1]);
    }
    pe_strlist_free(&nm);
    pe_strlist_free(&rv);
    return st;
}

pe_status pe_fuse_fc(pe_program *p, const pe_fuse_opts *o, int *n_fused) {
    fc_match m;
    return pe_fuse_each(p, o, "fuse_gemm_epilogue", match, apply, &m, sizeof m, n_fused);
}
