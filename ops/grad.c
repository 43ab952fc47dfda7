/* ops/grad.c — the helpers of ops/grad.h that grad makers wire their
 * backward ops with.
 *
 * What: each grad maker (ops/ops.def PE_GRAD) appends the backward op(s) of
 * one forward op through these helpers, so naming, zero-filling of outputs
 * no gradient reaches, stop_gradient/no_grad handling and op_role are done
 * in one place.
 *
 * How: the context (ops/grad_ctx.h) holds the program, the forward op and
 * the current backward op; what only the autodiff pass knows (which vars
 * need a gradient, the names of gradients and of their contributions) comes
 * from the pass's driver callbacks. The pass itself (passes/backward.c)
 * decides which ops to differentiate and folds contributions.
 *
 * Why here: grad makers are per-op facts of the ops stage; the pass that
 * drives them is a later stage, so they must not call into it.
 */
#include "ops/grad_ctx.h"

#include <stdio.h>
#include <string.h>

static pe_block *blk(const pe_grad_ctx *g) { return &g->p->blocks[0]; }

static bool is_float(pe_dtype dt) {
    return dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 || dt == PE_DTYPE_FP16 || dt == PE_DTYPE_BF16;
}

pe_status pe_grad_declare_like(pe_grad_ctx *g, const char *name, const char *like) {
    pe_block *b = blk(g);
    if (pe_block_find_var(b, name)) return PE_OK;
    const pe_var *v = pe_program_find_var(g->p, 0, like);
    if (!v) return pe_error(PE_ERR_NOT_FOUND, "append_backward: var '%s' is not declared", like);
    pe_dtype dt = v->dtype;
    int ndim = v->ndim;
    int64_t dims[8];
    memcpy(dims, v->dims, sizeof dims);
    pe_var *nv = pe_block_add_var(b, name, dt, ndim, dims);
    if (!nv) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory declaring '%s'", name);
    nv->stop_gradient = true;
    return PE_OK;
}

static pe_status set_role(pe_op *op, int role) { return pe_op_set_int(op, "op_role", role); }

const pe_op *pe_grad_fwd(const pe_grad_ctx *g) { return &blk(g)->ops[g->fwd_idx]; }

pe_op *pe_grad_cur_op(pe_grad_ctx *g) { return g->cur_idx >= 0 ? &blk(g)->ops[g->cur_idx] : NULL; }

pe_status pe_grad_new_op(pe_grad_ctx *g, const char *type) {
    pe_block *b = blk(g);
    pe_op *op = pe_block_add_op(b, type);
    if (!op) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory adding %s", type);
    g->cur_idx = b->n_ops - 1;
    const pe_op *f = pe_grad_fwd(g);
    op = pe_grad_cur_op(g);
    for (int i = 0; i < f->n_attrs; i++) {
        const char *n = f->attrs[i].name;
        if (!strcmp(n, "op_role") || !strcmp(n, "op_role_var")) continue;
        PE_CHECK(pe_op_set_attr(op, &f->attrs[i]));
    }
    return set_role(op, PE_ROLE_BACKWARD);
}

static const pe_slot *fwd_in(const pe_grad_ctx *g, const char *fslot) { return pe_op_input(pe_grad_fwd(g), fslot); }
static const pe_slot *fwd_out(const pe_grad_ctx *g, const char *fslot) { return pe_op_output(pe_grad_fwd(g), fslot); }

static pe_status add_args(pe_grad_ctx *g, bool as_input, const char *gslot, const pe_slot *s) {
    if (!s) return PE_OK;
    for (int k = 0; k < s->n_args; k++) {
        pe_op *op = pe_grad_cur_op(g);
        PE_CHECK(as_input ? pe_op_add_input(op, gslot, s->args[k]) : pe_op_add_output(op, gslot, s->args[k]));
    }
    return PE_OK;
}

pe_status pe_grad_fwd_input(pe_grad_ctx *g, const char *fslot, const char *gslot) {
    return add_args(g, true, gslot, fwd_in(g, fslot));
}

pe_status pe_grad_fwd_output(pe_grad_ctx *g, const char *fslot, const char *gslot) {
    return add_args(g, true, gslot, fwd_out(g, fslot));
}

pe_status pe_grad_out_grad(pe_grad_ctx *g, const char *fslot, const char *gslot) {
    const pe_slot *s = fwd_out(g, fslot);
    if (!s) return PE_OK;
    char name[512];
    for (int k = 0; k < s->n_args; k++) {
        /* copy: inserting ops may move the forward op */
        char var[512];
        snprintf(var, sizeof var, "%s", fwd_out(g, fslot)->args[k]);
        const pe_var *v = pe_program_find_var(g->p, 0, var);
        if (!v || !is_float(v->dtype)) {
            PE_CHECK(pe_op_add_input(pe_grad_cur_op(g), gslot, PE_EMPTY_VAR));
            continue;
        }
        bool reached;
        PE_CHECK(g->drv->out_grad(g, var, name, sizeof name, &reached));
        if (!reached) {
            /* No gradient reaches this output: zeros, inserted before the grad op. */
            PE_CHECK(pe_grad_declare_like(g, name, var));
            pe_op *z = pe_block_insert_op(blk(g), g->cur_idx, "fill_any_like");
            if (!z) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
            PE_CHECK(pe_op_add_input(z, "X", var));
            PE_CHECK(pe_op_add_output(z, "Out", name));
            PE_CHECK(pe_op_set_float(z, "value", 0.0));
            PE_CHECK(set_role(z, PE_ROLE_BACKWARD));
            g->cur_idx++;
        }
        PE_CHECK(pe_op_add_input(pe_grad_cur_op(g), gslot, name));
    }
    return PE_OK;
}

bool pe_grad_needs(const pe_grad_ctx *g, const char *fslot, int k) {
    const pe_slot *s = fwd_in(g, fslot);
    if (!s || k >= s->n_args) return false;
    return g->drv->needs(g, s->args[k]);
}

pe_status pe_grad_in_grad(pe_grad_ctx *g, const char *fslot, const char *gslot) {
    const pe_slot *s = fwd_in(g, fslot);
    if (!s) return PE_OK;
    int any = 0;
    for (int k = 0; k < s->n_args; k++) any += pe_grad_needs(g, fslot, k);
    if (!any) return PE_OK;
    char name[512], var[512];
    for (int k = 0; k < fwd_in(g, fslot)->n_args; k++) {
        if (!pe_grad_needs(g, fslot, k)) {
            PE_CHECK(pe_op_add_output(pe_grad_cur_op(g), gslot, PE_EMPTY_VAR));
            continue;
        }
        snprintf(var, sizeof var, "%s", fwd_in(g, fslot)->args[k]);
        PE_CHECK(g->drv->new_contrib(g, var, name, sizeof name));
        PE_CHECK(pe_grad_declare_like(g, name, var));
        PE_CHECK(pe_op_add_output(pe_grad_cur_op(g), gslot, name));
    }
    return PE_OK;
}
