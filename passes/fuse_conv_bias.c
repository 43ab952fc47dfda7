/* passes/fuse_conv_bias.c — BuildStrategy.fuse_conv_bias: a convolution's
 * bias add folded into the convolution (oneDNN adds the bias in the
 * primitive and computes its gradient with the weights' gradient).
 *
 * Pattern (forward), c intermediate:
 *     c = conv2d | depthwise_conv2d(Input x, Filter w)          no Bias
 *     o = elementwise_add(X c, Y b)   b: [M], on the channel axis
 *                                     (axis 1 for NCHW; 3 or -1 for NHWC)
 *  -> o = conv2d(Input x, Filter w, Bias b)
 * and, when the program has its backward (gc intermediate):
 *     gc, gb = elementwise_add_grad(X c, Y b, Out@GRAD go)
 *     gx, gw = conv2d_grad(Input x, Filter w, Output@GRAD gc)
 *  -> gx, gw, gb = conv2d_grad(Input x, Filter w, Bias b, Output@GRAD go)
 * The fused ops keep the conv ops' attrs; the backward carries both ops'
 * op_role_var pairs, so the multi-device pass still finds b@GRAD.
 *
 * Why: fluid.layers.conv2d and pe.nn.Conv2D emit the bias as its own
 * elementwise_add, a pass over the activation forward and a reduction over
 * its gradient backward (~1.4 ms of the benchmark CNN's ~10.5 ms step);
 * inside the primitive the bias costs nearly nothing. The bias gradient is
 * then oneDNN's sum (another order than elementwise_add_grad's double
 * accumulation: float tolerance, repeatable).
 *
 * Safety rules as every fusion pass (passes/fuse.h); the backward is fused
 * all or nothing. CPU places only (the executor turns it off elsewhere).
 */
#include "passes/fuse.h"

#include <string.h>

typedef struct {
    int conv, add, add_grad, conv_grad; /* grads -1 = no backward */
} cb_match;

static bool streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

static bool is_conv(int id) { return id == PE_OP_conv2d || id == PE_OP_depthwise_conv2d; }

static bool nhwc_op(const pe_op *op) {
    const pe_attr *a = pe_op_attr(op, "data_format");
    return a && streq(a->s, "NHWC");
}

/* b is a 1-D var of the filter's M channels, added on the channel axis. */
static bool bias_on_channels(const pe_block *b, const pe_op *conv, const pe_op *add) {
    const char *w = pe_fuse_in(conv, "Filter"), *y = pe_fuse_in(add, "Y");
    const pe_var *wv = w ? pe_block_find_var(b, w) : NULL, *yv = y ? pe_block_find_var(b, y) : NULL;
    if (!wv || !yv || wv->ndim != 4 || yv->ndim != 1 || wv->dims[0] < 1 || yv->dims[0] != wv->dims[0]) return false;
    const int64_t axis = pe_fuse_attr_int(add, "axis", -1);
    return nhwc_op(conv) ? axis == 3 || axis == -1 : axis == 1;
}

static bool match(const pe_program *p, const pe_use_index *ix, const pe_fuse_opts *o, int i, void *mv) {
    cb_match *m = mv;
    const pe_block *b = &p->blocks[0];
    const pe_op *conv = &b->ops[i];
    const int cid = pe_op_type_id(conv->type);
    if (!is_conv(cid) || pe_fuse_in(conv, "Bias")) return false;
    const char *x = pe_fuse_in(conv, "Input"), *w = pe_fuse_in(conv, "Filter"), *c = pe_fuse_out(conv, "Output");
    if (!x || !w || !c) return false;
    *m = (cb_match){.conv = i, .add = pe_fuse_reader_of(b, ix, c, PE_OP_elementwise_add, "X"), .add_grad = -1,
                    .conv_grad = -1};
    if (m->add < 0) return false;
    const pe_op *add = &b->ops[m->add];
    if (!bias_on_channels(b, conv, add) || !pe_fuse_out(add, "Out")) return false;
    const char *y = pe_fuse_in(add, "Y");

    m->add_grad = pe_fuse_reader_of(b, ix, c, PE_OP_elementwise_add_grad, "X");
    if (m->add_grad >= 0) {
        const pe_op *ag = &b->ops[m->add_grad];
        const char *gc = pe_fuse_out(ag, "X@GRAD");
        if (!streq(pe_fuse_in(ag, "Y"), y) || pe_fuse_attr_int(ag, "axis", -1) != pe_fuse_attr_int(add, "axis", -1) ||
            !pe_fuse_in(ag, "Out@GRAD") || !gc)
            return false;
        m->conv_grad = pe_fuse_reader_of(b, ix, gc, pe_op_info_find(conv->type)->grad_op_id, "Output@GRAD");
        if (m->conv_grad < 0 || m->conv_grad < m->add_grad) return false;
        const pe_op *cg = &b->ops[m->conv_grad];
        if (!streq(pe_fuse_in(cg, "Input"), x) || !streq(pe_fuse_in(cg, "Filter"), w) || pe_fuse_in(cg, "Bias") ||
            pe_fuse_out(cg, "Bias@GRAD"))
            return false;
        int bwd[2] = {m->add_grad, m->conv_grad};
        if (!pe_fuse_is_intermediate(p, ix, o, gc, bwd, 2) || !pe_fuse_can_merge(b, bwd, 2)) return false;
    }
    int all[4] = {m->conv, m->add, m->add_grad, m->conv_grad};
    if (!pe_fuse_is_intermediate(p, ix, o, c, all, m->add_grad >= 0 ? 4 : 2)) return false;
    return pe_fuse_can_merge(b, all, 2);
}

/* A copy of `from`'s attrs, op_role_var joined with `also`'s, onto `to`. */
static pe_status copy_attrs(pe_op *to, const pe_op *from, const pe_op *also) {
    pe_strlist rv = {0};
    pe_status st = PE_OK;
    for (int k = 0; k < from->n_attrs && st == PE_OK; k++) {
        const pe_attr *a = &from->attrs[k];
        if (!strcmp(a->name, "op_role_var")) continue;
        st = pe_op_set_attr(to, a);
    }
    for (int s = 0; s < 2 && st == PE_OK; s++) {
        const pe_attr *a = pe_op_attr(s ? also : from, "op_role_var");
        if (!a || a->type != PE_ATTR_STRINGS) continue;
        for (int k = 0; k < a->n && st == PE_OK; k++) st = pe_strlist_add(&rv, a->strings[k]);
    }
    if (st == PE_OK && rv.n) st = pe_op_set_strings(to, "op_role_var", (const char *const *)rv.s, rv.n);
    pe_strlist_free(&rv);
    return st;
}

/* Puts the fused op right after member `last` (the later one), built from
 * `conv` (attrs, type, Input, Filter) and the names given; removes both. */
static pe_status replace_pair(pe_block *b, int first, int last, int conv_idx, int other_idx, bool grad,
                              const char *bias, const char *out_or_gout, const char *gx, const char *gw,
                              const char *gb) {
    pe_op *op = pe_block_insert_op(b, last + 1, b->ops[conv_idx].type);
    if (!op) return pe_error(PE_ERR_NOMEM, "fuse_conv_bias pass: out of memory");
    const pe_op *conv = &b->ops[conv_idx], *other = &b->ops[other_idx]; /* after the insert: both precede it */
    pe_status st = pe_op_add_input(op, "Input", pe_fuse_in(conv, "Input"));
    if (st == PE_OK) st = pe_op_add_input(op, "Filter", pe_fuse_in(conv, "Filter"));
    if (st == PE_OK) st = pe_op_add_input(op, "Bias", bias);
    if (grad) {
        if (st == PE_OK) st = pe_op_add_input(op, "Output@GRAD", out_or_gout);
        if (st == PE_OK && gx) st = pe_op_add_output(op, "Input@GRAD", gx);
        if (st == PE_OK && gw) st = pe_op_add_output(op, "Filter@GRAD", gw);
        if (st == PE_OK && gb) st = pe_op_add_output(op, "Bias@GRAD", gb);
    } else if (st == PE_OK) {
        st = pe_op_add_output(op, "Output", out_or_gout);
    }
    if (st == PE_OK) st = copy_attrs(op, conv, other);
    if (st != PE_OK) return st;
    pe_block_remove_op(b, last);
    pe_block_remove_op(b, first);
    return PE_OK;
}

enum { N_BIAS, N_C, N_OUT, N_GOUT, N_GC, N_GX, N_GW, N_GB, N_COUNT };

static pe_status apply(pe_program *p, const void *mv) {
    const cb_match *m = mv;
    pe_block *b = &p->blocks[0];
    const pe_op *add = &b->ops[m->add], *conv = &b->ops[m->conv];
    const pe_op *ag = m->add_grad >= 0 ? &b->ops[m->add_grad] : NULL;
    const pe_op *cg = m->conv_grad >= 0 ? &b->ops[m->conv_grad] : NULL;
    const char *names[N_COUNT] = {
        pe_fuse_in(add, "Y"), pe_fuse_out(conv, "Output"), pe_fuse_out(add, "Out"),
        ag ? pe_fuse_in(ag, "Out@GRAD") : NULL, ag ? pe_fuse_out(ag, "X@GRAD") : NULL,
        cg ? pe_fuse_out(cg, "Input@GRAD") : NULL, cg ? pe_fuse_out(cg, "Filter@GRAD") : NULL,
        ag ? pe_fuse_out(ag, "Y@GRAD") : NULL,
    };
    pe_strlist nm = {0};
    pe_status st = PE_OK;
    for (int k = 0; k < N_COUNT && st == PE_OK; k++) st = pe_strlist_add(&nm, names[k]);
    char **n = nm.s;
    /* the backward first: its members come after the forward's, whose indices it leaves alone */
    if (st == PE_OK && cg)
        st = replace_pair(b, m->add_grad, m->conv_grad, m->conv_grad, m->add_grad, true, n[N_BIAS], n[N_GOUT],
                          n[N_GX], n[N_GW], n[N_GB]);
    if (st == PE_OK)
        st = replace_pair(b, m->conv, m->add, m->conv, m->add, false, n[N_BIAS], n[N_OUT], NULL, NULL, NULL);
    if (st == PE_OK) {
        pe_fuse_drop_var(p, n[N_C]);
        if (n[N_GC]) pe_fuse_drop_var(p, n[N_GC]);
    }
    pe_strlist_free(&nm);
    return st;
}

pe_status pe_fuse_conv_bias(pe_program *p, const pe_fuse_opts *o, int *n_fused) {
    cb_match m;
    return pe_fuse_each(p, o, "fuse_conv_bias", match, apply, &m, sizeof m, n_fused);
}
