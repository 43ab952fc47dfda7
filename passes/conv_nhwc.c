/* passes/conv_nhwc.c — BuildStrategy.conv_nhwc: a CPU CNN's activations
 * stay in NHWC across its conv / pool / activation / bias-add ops and their
 * gradients; layout changes only at the edges.
 *
 * Why: oneDNN's fast float32 convolutions (brgemm, AVX-512 / AVX2) want
 * NHWC activations (its own choice for these layers when asked for "any"),
 * so NCHW tensors were reordered into a copy before every convolution and
 * its output reordered back after it, forward and backward: ~2 ms of a 12 ms
 * step of the benchmark CNN (docs/benchmarks.md, "CNN layouts"). NHWC is a
 * plain layout (no padding), so every buffer keeps its size and the memory
 * plan, the allocator and the in-place rules see nothing new.
 *
 * What (block 0 of the pass manager's clone):
 *  - the layout ops: conv2d, depthwise_conv2d, pool2d, batch_norm and their
 *    _grad ops, float32, 4-D, NCHW (pool2d: not adaptive, no ceil_mode) —
 *    all switched to data_format / data_layout NHWC;
 *  - the layout-free ops that follow them: activations (relu, sigmoid,
 *    tanh, leaky_relu, relu6, gelu, swish, elu and their _grad ops) and sum
 *    (every arg the same shape), elementwise_add(_grad) of two same-shaped
 *    4-D tensors or of a 4-D tensor and a bias on axis 1 (-> axis 3) —
 *    switched when one of their activations is NHWC, until nothing changes;
 *  - a var is NHWC when a switched op reads or writes it as an activation,
 *    it is a 4-D float32 var declared in block 0 and written there, and it is
 *    not persistable, not protected (fetch targets, the loss) and not read by
 *    another block: feeds and fetches stay NCHW. Its declared dims become
 *    [N, H, W, C].
 *  - an op whose arg is in the other layout than the op wants (a switched
 *    op reading the fed image; reshape2 reading the last pool's output, and
 *    reshape2_grad writing its gradient) gets a transpose2 into / out of a new
 *    var `<var>@NHWC.<k>` / `<var>@NCHW.<k>` right before / after it, with the
 *    op's op_role; later readers wanting that layout read the same copy
 *    until the var is written again (the image is transposed once for the
 *    conv and its gradient).
 * n_fused = the layout ops switched.
 *
 * Results: the same arithmetic in another memory order — oneDNN's NHWC
 * kernels sum in another order than its blocked ones, so the bits differ
 * from the NCHW program's (within float tolerance) and are repeatable run
 * to run; pool2d_grad's NHWC loop gives the NCHW loop's bits.
 */
#include "passes/fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_NONE, K_LAYOUT, K_FREE, K_BIAS_ADD } op_kind;

/* The activation slots of a layout op (NULL-terminated; inputs then outputs). */
typedef struct {
    int id;
    const char *attr;           /* the op's layout attr */
    const char *in[4], *out[2];
} layout_slots;

static const char *const k_free_types[] = {"relu", "sigmoid", "tanh", "leaky_relu", "relu6", "gelu", "swish", "elu",
                                           "relu_grad", "sigmoid_grad", "tanh_grad", "leaky_relu_grad",
                                           "relu6_grad", "gelu_grad", "swish_grad", "elu_grad", "sum"};

static const layout_slots *layout_of(int id) {
    static const layout_slots t[] = {
        {PE_OP_conv2d, "data_format", {"Input"}, {"Output"}},
        {PE_OP_depthwise_conv2d, "data_format", {"Input"}, {"Output"}},
        {PE_OP_conv2d_grad, "data_format", {"Input", "Output@GRAD"}, {"Input@GRAD"}},
        {PE_OP_depthwise_conv2d_grad, "data_format", {"Input", "Output@GRAD"}, {"Input@GRAD"}},
        {PE_OP_pool2d, "data_format", {"X"}, {"Out"}},
        {PE_OP_pool2d_grad, "data_format", {"X", "Out", "Out@GRAD"}, {"X@GRAD"}},
        {PE_OP_batch_norm, "data_layout", {"X"}, {"Y"}},
        {PE_OP_batch_norm_grad, "data_layout", {"X", "Y@GRAD"}, {"X@GRAD"}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].id == id) return &t[i];
    return NULL;
}

static bool streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

static const pe_var *decl(const pe_block *b, const char *name) {
    return name && strcmp(name, PE_EMPTY_VAR) ? pe_block_find_var(b, name) : NULL;
}

static bool is_act4(const pe_block *b, const char *name) {
    const pe_var *v = decl(b, name);
    return v && v->ndim == 4 && v->dtype == PE_DTYPE_FP32;
}

static bool nchw_attr(const pe_op *op, const char *name) {
    const pe_attr *a = pe_op_attr(op, name);
    return !a || !a->s || !a->s[0] || streq(a->s, "NCHW") || streq(a->s, "AnyLayout");
}

static bool bool_attr(const pe_op *op, const char *name) {
    const pe_attr *a = pe_op_attr(op, name);
    return a && a->i;
}

/* Same declared dims (4-D). */
static bool same4(const pe_block *b, const char *x, const char *y) {
    const pe_var *u = decl(b, x), *v = decl(b, y);
    if (!u || !v || u->ndim != 4 || v->ndim != 4) return false;
    for (int i = 0; i < 4; i++)
        if (u->dims[i] != v->dims[i]) return false;
    return true;
}

/* Whether arg `name` in slot `slot` of op (kind k) is one of its activations. */
static bool is_act_slot(const pe_block *b, const pe_op *op, op_kind k, bool input, const char *slot) {
    if (k == K_LAYOUT) {
        const layout_slots *ls = layout_of(pe_op_type_id(op->type));
        const char *const *s = input ? ls->in : ls->out;
        for (int i = 0; s[i]; i++)
            if (!strcmp(s[i], slot)) return true;
        return false;
    }
    if (k == K_FREE) return true;
    if (k == K_BIAS_ADD) { /* a same-shape add: every slot; a bias add: all but Y, Y@GRAD */
        const char *x = pe_fuse_in(op, "X"), *y = pe_fuse_in(op, "Y");
        if (same4(b, x, y)) return true;
        return strcmp(slot, "Y") && strcmp(slot, "Y@GRAD");
    }
    return false;
}

/* Every arg of op's activation slots (as kind k reads them) is a declared
 * 4-D float32 var: an undeclared one could not be given its NHWC edge. */
static bool acts_declared(const pe_block *b, const pe_op *op, op_kind k) {
    for (int side = 0; side < 2; side++) {
        const int n = side ? op->n_outputs : op->n_inputs;
        const pe_slot *slots = side ? op->outputs : op->inputs;
        for (int i = 0; i < n; i++) {
            if (!is_act_slot(b, op, k, side == 0, slots[i].name)) continue;
            for (int a = 0; a < slots[i].n_args; a++)
                if (strcmp(slots[i].args[a], PE_EMPTY_VAR) && !is_act4(b, slots[i].args[a])) return false;
        }
    }
    return true;
}

/* The op's kind from its type, attrs and the declarations of its main operands. */
static op_kind kind_of(const pe_block *b, const pe_op *op) {
    const int id = pe_op_type_id(op->type);
    const layout_slots *ls = layout_of(id);
    if (ls) {
        const char *x = pe_fuse_in(op, ls->in[0]);
        if (!nchw_attr(op, ls->attr) || !is_act4(b, x)) return K_NONE;
        if ((id == PE_OP_pool2d || id == PE_OP_pool2d_grad) && (bool_attr(op, "adaptive") || bool_attr(op, "ceil_mode")))
            return K_NONE; /* NHWC pooling has no loops for these (ops/cpu/nn.c) */
        return K_LAYOUT;
    }
    if (id == PE_OP_elementwise_add || id == PE_OP_elementwise_add_grad) {
        const char *x = pe_fuse_in(op, "X"), *y = pe_fuse_in(op, "Y");
        const int64_t axis = pe_fuse_attr_int(op, "axis", -1);
        if (!is_act4(b, x)) return K_NONE;
        if (same4(b, x, y) && (axis == -1 || axis == 0)) return K_BIAS_ADD;
        const pe_var *yv = decl(b, y);
        if (yv && yv->ndim == 1 && axis == 1) return K_BIAS_ADD;
        return K_NONE;
    }
    for (size_t i = 0; i < sizeof k_free_types / sizeof k_free_types[0]; i++)
        if (!strcmp(op->type, k_free_types[i])) {
            /* every arg a 4-D float32 var of one shape (sum: its inputs and output) */
            const char *first = NULL;
            for (int s = 0; s < op->n_inputs + op->n_outputs; s++) {
                const pe_slot *sl = s < op->n_inputs ? &op->inputs[s] : &op->outputs[s - op->n_inputs];
                for (int a = 0; a < sl->n_args; a++) {
                    if (!first) first = sl->args[a];
                    if (!is_act4(b, sl->args[a]) || !same4(b, first, sl->args[a])) return K_NONE;
                }
            }
            return first ? K_FREE : K_NONE;
        }
    return K_NONE;
}

/* kind_of, with every activation a layout op or bias add reads or writes declared. */
static op_kind classify(const pe_block *b, const pe_op *op) {
    const op_kind k = kind_of(b, op);
    return (k == K_LAYOUT || k == K_BIAS_ADD) && !acts_declared(b, op, k) ? K_NONE : k;
}

typedef struct {
    const pe_program *p;
    const pe_use_index *ix;
    const pe_fuse_opts *o;
    pe_strmap nhwc;   /* var name (the block's decl name) -> 1 */
} layout_state;

/* May `name` be stored NHWC? (See the file comment.) */
static bool may_switch(const layout_state *s, const char *name) {
    const pe_block *b = &s->p->blocks[0];
    const pe_var *v = decl(b, name);
    if (!v || v->ndim != 4 || v->dtype != PE_DTYPE_FP32 || v->persistable) return false;
    if (s->o && s->o->protect && pe_strmap_get(s->o->protect, name) >= 0) return false;
    const pe_var_uses *u = pe_uses_get(s->ix, name);
    return u && u->n_writers > 0 && !u->foreign;
}

static bool is_nhwc(const layout_state *s, const char *name) {
    const pe_var *v = decl(&s->p->blocks[0], name);
    return v && pe_strmap_get(&s->nhwc, v->name) >= 0;
}

/* Marks every switchable activation of op NHWC; *any: one of them already was. */
static pe_status mark_op(layout_state *s, const pe_op *op, op_kind k, bool *changed, bool *any) {
    const pe_block *b = &s->p->blocks[0];
    for (int side = 0; side < 2; side++) {
        const int n = side ? op->n_outputs : op->n_inputs;
        const pe_slot *slots = side ? op->outputs : op->inputs;
        for (int i = 0; i < n; i++) {
            if (!is_act_slot(b, op, k, side == 0, slots[i].name)) continue;
            for (int a = 0; a < slots[i].n_args; a++) {
                const char *name = slots[i].args[a];
                if (any && is_nhwc(s, name)) *any = true;
                if (!changed || is_nhwc(s, name) || !may_switch(s, name)) continue;
                if (pe_strmap_put(&s->nhwc, decl(b, name)->name, 1) != 0) return pe_error(PE_ERR_NOMEM, "out of memory");
                *changed = true;
            }
        }
    }
    return PE_OK;
}

/* transpose2 from -> to at pos (to NHWC or back), with the op_role of the op it serves. */
static pe_status add_transpose(pe_block *b, int pos, const char *from, const char *to, bool to_nhwc, int role) {
    static const int64_t to_nhwc_axis[4] = {0, 2, 3, 1}, to_nchw_axis[4] = {0, 3, 1, 2};
    pe_op *t = pe_block_insert_op(b, pos, "transpose2");
    if (!t) return pe_error(PE_ERR_NOMEM, "pass conv_nhwc: out of memory adding a transpose of '%s'", from);
    PE_CHECK(pe_op_add_input(t, "X", from));
    PE_CHECK(pe_op_add_output(t, "Out", to));
    PE_CHECK(pe_op_set_ints(t, "axis", to_nhwc ? to_nhwc_axis : to_nchw_axis, 4));
    return pe_op_set_int(t, "op_role", role);
}

/* A new var for `name` in layout nhwc (the other one): `<name>@NHWC.<k>` / `<name>@NCHW.<k>`. */
static pe_status edge_var(pe_block *b, const char *name, bool nhwc, int *counter, char *out, size_t cap) {
    const pe_var *v = pe_block_find_var(b, name); /* still declared [N, C, H, W] (step 4 permutes) */
    const int64_t *d = v->dims;
    const int64_t nd[4] = {d[0], nhwc ? d[2] : d[1], nhwc ? d[3] : d[2], nhwc ? d[1] : d[3]};
    const pe_dtype dt = v->dtype;
    do {
        if (snprintf(out, cap, "%s@%s.%d", name, nhwc ? "NHWC" : "NCHW", (*counter)++) >= (int)cap)
            return pe_error(PE_ERR_INVALID, "pass conv_nhwc: var name '%s' is too long", name);
    } while (pe_block_find_var(b, out));
    if (!pe_block_add_var(b, out, dt, 4, nd)) return pe_error(PE_ERR_NOMEM, "pass conv_nhwc: out of memory");
    return PE_OK;
}

static pe_status set_arg(pe_slot *s, int a, const char *name) {
    char *dup = strdup(name);
    if (!dup) return pe_error(PE_ERR_NOMEM, "pass conv_nhwc: out of memory");
    free(s->args[a]);
    s->args[a] = dup;
    return PE_OK;
}

/* The copies made so far: var -> its copy in layout nhwc (valid until the var is written again). */
typedef struct {
    pe_strlist vars, copies;
    bool *nhwc;
    int cap;
} edge_cache;

static const char *cache_find(const edge_cache *c, const char *var, bool nhwc) {
    for (int k = c->vars.n - 1; k >= 0; k--)
        if (c->vars.s[k] && !strcmp(c->vars.s[k], var) && c->nhwc[k] == nhwc) return c->copies.s[k];
    return NULL;
}

static void cache_forget(edge_cache *c, const char *var) {
    for (int k = 0; k < c->vars.n; k++)
        if (c->vars.s[k] && !strcmp(c->vars.s[k], var)) {
            free(c->vars.s[k]);
            c->vars.s[k] = NULL;
        }
}

static pe_status cache_add(edge_cache *c, const char *var, bool nhwc, const char *copy) {
    if (c->vars.n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 16;
        bool *n = realloc(c->nhwc, (size_t)cap * sizeof *n);
        if (!n) return pe_error(PE_ERR_NOMEM, "pass conv_nhwc: out of memory");
        c->nhwc = n;
        c->cap = cap;
    }
    c->nhwc[c->vars.n] = nhwc;
    PE_CHECK(pe_strlist_add(&c->copies, copy));
    return pe_strlist_add(&c->vars, var);
}

static void cache_free(edge_cache *c) {
    pe_strlist_free(&c->vars);
    pe_strlist_free(&c->copies);
    free(c->nhwc);
}

pe_status pe_conv_nhwc(pe_program *p, const pe_fuse_opts *o, int *n_fused) {
    *n_fused = 0;
    pe_block *b = &p->blocks[0];
    const int n_ops = b->n_ops;
    if (!n_ops) return PE_OK;
    op_kind *kind = calloc((size_t)n_ops, sizeof *kind);
    bool *sw = calloc((size_t)n_ops, sizeof *sw);
    pe_use_index ix = {0};
    layout_state s = {.p = p, .ix = &ix, .o = o};
    pe_status st = kind && sw ? pe_uses_build(p, &ix) : pe_error(PE_ERR_NOMEM, "pass conv_nhwc: out of memory");

    /* 1. the layout ops and their activations */
    bool changed = false;
    for (int i = 0; i < n_ops && st == PE_OK; i++) {
        kind[i] = classify(b, &b->ops[i]);
        if (kind[i] != K_LAYOUT) continue;
        sw[i] = true;
        (*n_fused)++;
        st = mark_op(&s, &b->ops[i], kind[i], &changed, NULL);
    }
    /* 2. the layout-free ops next to them, until nothing changes (each pass switches one op at least) */
    for (int round = 0; changed && round <= n_ops && st == PE_OK; round++) {
        changed = false;
        for (int i = 0; i < n_ops && st == PE_OK; i++) {
            if (sw[i] || kind[i] == K_NONE || kind[i] == K_LAYOUT) continue;
            bool any = false;
            st = mark_op(&s, &b->ops[i], kind[i], NULL, &any);
            if (st != PE_OK || !any) continue;
            sw[i] = true;
            changed = true;
            bool more = false;
            st = mark_op(&s, &b->ops[i], kind[i], &more, NULL);
        }
    }

    /* 3. edges and attrs, in program order; pos is op i's position once the transposes before it are in.
     * A var's copy in the other layout serves every later reader until an op writes the var again. */
    int counter = 0, inserted = 0;
    char tmp[1024];
    edge_cache cache = {0};
    for (int i = 0; i < n_ops && st == PE_OK; i++) {
        int pos = i + inserted, after = 0; /* after: transposes inserted after the op */
        const int role = (int)pe_fuse_attr_int(&b->ops[pos], "op_role", PE_ROLE_FORWARD);
        for (int side = 0; side < 2 && st == PE_OK; side++) {
            const int n = side ? b->ops[pos].n_outputs : b->ops[pos].n_inputs;
            for (int si = 0; si < n && st == PE_OK; si++) {
                for (int a = 0; st == PE_OK; a++) {
                    pe_op *op = &b->ops[pos]; /* the block's op array moves as ops go in */
                    pe_slot *sl = side ? &op->outputs[si] : &op->inputs[si];
                    if (a >= sl->n_args) break;
                    const bool want = sw[i] && is_act_slot(b, op, kind[i], side == 0, sl->name);
                    const char *name = sl->args[a];
                    if (side == 1) cache_forget(&cache, name); /* written again: its copies are stale */
                    if (!decl(b, name) || is_nhwc(&s, name) == want) continue;
                    const char *have = side == 0 ? cache_find(&cache, name, want) : NULL;
                    if (have) { /* an earlier copy in this layout */
                        st = set_arg(sl, a, have);
                        continue;
                    }
                    char *orig = strdup(name);
                    if (!orig) { st = pe_error(PE_ERR_NOMEM, "pass conv_nhwc: out of memory"); break; }
                    st = edge_var(b, orig, want, &counter, tmp, sizeof tmp);
                    if (st == PE_OK) st = set_arg(sl, a, tmp);
                    if (st == PE_OK && side == 0) { /* convert before the op */
                        st = add_transpose(b, pos, orig, tmp, want, role);
                        pos++;
                        inserted++;
                    } else if (st == PE_OK) {       /* convert after it */
                        st = add_transpose(b, pos + 1 + after, tmp, orig, !want, role);
                        after++;
                        inserted++;
                    }
                    if (st == PE_OK) st = cache_add(&cache, orig, want, tmp);
                    free(orig);
                }
            }
        }
        if (st != PE_OK || !sw[i]) continue;
        pe_op *op = &b->ops[pos];
        if (kind[i] == K_LAYOUT) st = pe_op_set_string(op, layout_of(pe_op_type_id(op->type))->attr, "NHWC");
        else if (kind[i] == K_BIAS_ADD && pe_fuse_attr_int(op, "axis", -1) == 1) st = pe_op_set_int(op, "axis", 3);
    }
    cache_free(&cache);

    /* 4. the switched vars' declarations: [N, C, H, W] -> [N, H, W, C] */
    for (int v = 0; v < b->n_vars && st == PE_OK; v++) {
        pe_var *var = &b->vars[v];
        if (pe_strmap_get(&s.nhwc, var->name) < 0) continue;
        const int64_t c = var->dims[1];
        var->dims[1] = var->dims[2];
        var->dims[2] = var->dims[3];
        var->dims[3] = c;
        var->channels_last = true; /* what the executor reads: a fetch of it needs the NCHW graph */
    }
    pe_strmap_free(&s.nhwc);
    pe_uses_free(&ix);
    free(kind);
    free(sw);
    return st;
}
