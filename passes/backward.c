/* passes/backward.c — autodiff: append_backward and gradients.
 *
 * How: (1) forward sweep — a var "requires grad" when it is a chosen
 * parameter/input or a float output of an op with such an input (minus
 * stop_gradient and the no-grad set); (2) backward sweep from the targets —
 * an op is differentiated when one of its outputs reaches a target and one
 * of its inputs requires grad; (3) reverse walk over those ops calling each
 * op's grad maker (ops/ops.def PE_GRAD). The makers wire their ops with the
 * helpers of ops/grad.h (ops/grad.c), which ask this pass — through the
 * driver callbacks of ops/grad_ctx.h — which vars need a gradient and how
 * gradients and their contributions are named.
 *
 * Gradient accumulation: every contribution to d/dv gets its own var
 * (v@GRAD, v@GRAD@RENAME@1, ...). Because ops are visited in reverse, all
 * contributions to v exist when v's producer is reached; there, before the
 * producer's grad op consumes v@GRAD, a `sum` op folds the contributions
 * into v@GRAD (leaves — parameters, feeds — are folded at the end). This is
 * Paddle's scheme, and it keeps each grad var written exactly once.
 *
 * The bookkeeping (vars requiring grad, vars reaching a target, the
 * no-grad set, the contributions) is kept in name sets with a hash index,
 * so the pass is linear in the size of the program (100k ops included).
 */
#include "pe/passes.h"
#include "graph/strmap.h"
#include "pe/tensor.h"
#include "ops/grad_ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAD_ROLE_LOSS (PE_ROLE_BACKWARD | PE_ROLE_LOSS)

typedef struct {
    char *var;
    int n;            /* contributions so far */
    bool folded;      /* v@GRAD final (summed or single) */
} contrib_t;

/* A set of var names in insertion order (v[0..n)), owned, with a hash
 * index whose keys borrow v[i]. */
typedef struct name_set {
    char **v;
    int n, cap;
    pe_strmap idx;
} name_set;

static bool set_has(const name_set *s, const char *x) { return pe_strmap_get(&s->idx, x) >= 0; }

static pe_status set_add(name_set *s, const char *x) {
    if (set_has(s, x)) return PE_OK;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        char **nv = realloc(s->v, sizeof *nv * (size_t)cap);
        if (!nv) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
        s->v = nv;
        s->cap = cap;
    }
    if (!(s->v[s->n] = strdup(x)) || pe_strmap_put(&s->idx, s->v[s->n], s->n)) {
        free(s->v[s->n]);
        return pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
    }
    s->n++;
    return PE_OK;
}

static void set_free(name_set *s) {
    for (int i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    pe_strmap_free(&s->idx);
    memset(s, 0, sizeof *s);
}

/* The pass's state; gc is what the grad makers see (ops/grad_ctx.h), its
 * driver callbacks below answer from this state. */
typedef struct autodiff {
    pe_grad_ctx gc;
    name_set req;     /* vars requiring grad */
    name_set nograd;
    contrib_t *c;
    int n_c, cap_c;
    pe_strmap c_idx;  /* c[i].var -> i */
} autodiff;

static pe_block *blk(const autodiff *g) { return &g->gc.p->blocks[0]; }

static bool is_float(pe_dtype dt) {
    return dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 || dt == PE_DTYPE_FP16 || dt == PE_DTYPE_BF16;
}

static contrib_t *contrib(autodiff *g, const char *var, bool create) {
    int at = pe_strmap_get(&g->c_idx, var);
    if (at >= 0) return &g->c[at];
    if (!create) return NULL;
    if (g->n_c == g->cap_c) {
        int cap = g->cap_c ? g->cap_c * 2 : 32;
        contrib_t *nc = realloc(g->c, sizeof *nc * (size_t)cap);
        if (!nc) return NULL;
        g->c = nc;
        g->cap_c = cap;
    }
    contrib_t *c = &g->c[g->n_c];
    c->var = strdup(var);
    if (!c->var || pe_strmap_put(&g->c_idx, c->var, g->n_c)) {
        free(c->var);
        return NULL;
    }
    c->n = 0;
    c->folded = false;
    g->n_c++;
    return c;
}

/* Var names are bounded by the program checker; a name that does not fit
 * is truncated consistently (and then fails as an undeclared var). */
static void grad_name(const char *var, int k, char *buf, size_t n) {
    int r = k == 0 ? snprintf(buf, n, "%s" PE_GRAD_SUFFIX, var)
                   : snprintf(buf, n, "%s" PE_GRAD_SUFFIX "@RENAME@%d", var, k);
    if (r < 0 || (size_t)r >= n) buf[n - 1] = '\0';
}

static pe_status set_role(pe_op *op, int role) { return pe_op_set_int(op, "op_role", role); }

/* Emits `sum` of v's contributions into v@GRAD at position pos (or appends
 * when pos < 0); a single contribution is already v@GRAD. */
static pe_status fold(autodiff *g, contrib_t *c, int pos) {
    if (c->folded) return PE_OK;
    c->folded = true;
    if (c->n <= 1) return PE_OK;
    pe_block *b = blk(g);
    pe_op *op = pos < 0 ? pe_block_add_op(b, "sum") : pe_block_insert_op(b, pos, "sum");
    if (!op) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
    char name[512];
    for (int k = 0; k < c->n; k++) {
        grad_name(c->var, k, name, sizeof name);
        PE_CHECK(pe_op_add_input(op, "X", name));
    }
    grad_name(c->var, 0, name, sizeof name);
    PE_CHECK(pe_op_add_output(op, "Out", name));
    return set_role(op, PE_ROLE_BACKWARD);
}

/* ---- the driver of the grad makers' helpers (ops/grad.c) --------------- */

static bool drv_needs(const pe_grad_ctx *gc, const char *var) {
    const autodiff *g = gc->user;
    return set_has(&g->req, var) && !set_has(&g->nograd, var);
}

static pe_status drv_out_grad(pe_grad_ctx *gc, const char *var, char *name, size_t n, bool *reached) {
    autodiff *g = gc->user;
    contrib_t *c = contrib(g, var, true);
    if (!c) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
    grad_name(var, 0, name, n);
    *reached = c->n != 0;
    if (!*reached) { /* the zeros the helper inserts are var's gradient */
        c->n = 1;
        c->folded = true;
    }
    return PE_OK;
}

static pe_status drv_new_contrib(pe_grad_ctx *gc, const char *var, char *name, size_t n) {
    autodiff *g = gc->user;
    contrib_t *c = contrib(g, var, true);
    if (!c) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
    grad_name(var, c->n, name, n);
    c->n++;
    return PE_OK;
}

static const pe_grad_driver k_driver = {drv_needs, drv_out_grad, drv_new_contrib};

/* ---- the pass ------------------------------------------------------------ */

/* Whether one of the op's args in the slots (inputs or outputs) is in set. */
static bool op_uses(const pe_slot *slots, int n_slots, const name_set *set) {
    for (int i = 0; i < n_slots; i++)
        for (int k = 0; k < slots[i].n_args; k++)
            if (set_has(set, slots[i].args[k])) return true;
    return false;
}

static bool op_reads(const pe_op *op, const name_set *set) { return op_uses(op->inputs, op->n_inputs, set); }
static bool op_writes(const pe_op *op, const name_set *set) { return op_uses(op->outputs, op->n_outputs, set); }

static void ctx_free(autodiff *g) {
    set_free(&g->req);
    set_free(&g->nograd);
    for (int i = 0; i < g->n_c; i++) free(g->c[i].var);
    free(g->c);
    pe_strmap_free(&g->c_idx);
}

/* A given seed (the gradient of a target) must be a float var of the
 * target's dtype and shape (-1 matching any size). */
static pe_status check_seed(const pe_program *p, const char *target, const pe_var *tv, const char *seed) {
    const pe_var *s = pe_program_find_var(p, 0, seed);
    char s1[160], s2[160];
    if (!s)
        return pe_error(PE_ERR_NOT_FOUND, "gradients: target_gradients var '%s' (for target '%s') is not a "
                        "variable of block 0", seed, target);
    bool ok = s->dtype == tv->dtype && s->ndim == tv->ndim;
    for (int d = 0; ok && d < s->ndim; d++) ok = s->dims[d] < 0 || tv->dims[d] < 0 || s->dims[d] == tv->dims[d];
    if (!ok)
        return pe_error(PE_ERR_INVALID, "gradients: target_gradients var '%s' is %s %s, its target '%s' is %s %s "
                        "(a target's gradient has the target's dtype and shape)", seed, pe_dtype_name(s->dtype),
                        pe_dims_str(s->ndim, s->dims, s1, sizeof s1), target, pe_dtype_name(tv->dtype),
                        pe_dims_str(tv->ndim, tv->dims, s2, sizeof s2));
    return PE_OK;
}

/* The shared core: targets (gradient = ones, or seeds[i] when given),
 * sources = vars whose gradients are wanted. */
static pe_status run_backward(autodiff *g, const char *const *targets, const char *const *seeds, int n_targets,
                              const char *const *sources, int n_sources, const char *const *no_grad,
                              int n_no_grad) {
    pe_program *p = g->gc.p;
    pe_block *b = blk(g);
    int n_fwd = b->n_ops;
    for (int i = 0; i < n_targets; i++) {
        const pe_var *v = pe_program_find_var(p, 0, targets[i]);
        if (!v) return pe_error(PE_ERR_NOT_FOUND, "append_backward: target '%s' is not a variable of block 0", targets[i]);
        if (!is_float(v->dtype))
            return pe_error(PE_ERR_INVALID, "append_backward: target '%s' has dtype %s; gradients need a float target",
                            targets[i], pe_dtype_name(v->dtype));
        for (int j = 0; j < i; j++)
            if (!strcmp(targets[j], targets[i]))
                return pe_error(PE_ERR_INVALID, "gradients: target '%s' is given twice", targets[i]);
        if (seeds && seeds[i]) PE_CHECK(check_seed(p, targets[i], v, seeds[i]));
    }
    for (int i = 0; i < n_no_grad; i++) PE_CHECK(set_add(&g->nograd, no_grad[i]));
    name_set src = {0};
    pe_status st = PE_OK;
    for (int i = 0; i < n_sources && st == PE_OK; i++) st = set_add(&src, sources[i]);
    for (int i = 0; i < b->n_vars && st == PE_OK; i++)
        if (b->vars[i].stop_gradient && !set_has(&src, b->vars[i].name)) st = set_add(&g->nograd, b->vars[i].name);
    set_free(&src);
    PE_CHECK(st);
    /* (1) forward sweep */
    for (int i = 0; i < n_sources; i++)
        if (!set_has(&g->nograd, sources[i])) PE_CHECK(set_add(&g->req, sources[i]));
    for (int i = 0; i < n_fwd; i++) {
        const pe_op *op = &b->ops[i];
        if (!op_reads(op, &g->req)) continue;
        for (int s = 0; s < op->n_outputs; s++)
            for (int k = 0; k < op->outputs[s].n_args; k++) {
                const char *o = op->outputs[s].args[k];
                const pe_var *v = pe_program_find_var(p, 0, o);
                if (v && is_float(v->dtype) && !set_has(&g->nograd, o)) PE_CHECK(set_add(&g->req, o));
            }
    }
    /* (2) backward sweep: vars that reach a target */
    name_set reach = {0};
    for (int i = 0; i < n_targets && st == PE_OK; i++) st = set_add(&reach, targets[i]);
    bool *active = calloc((size_t)(n_fwd ? n_fwd : 1), sizeof *active);
    if (!active) st = pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
    for (int i = n_fwd - 1; i >= 0 && st == PE_OK; i--) {
        const pe_op *op = &b->ops[i];
        if (!op_writes(op, &reach) || !op_reads(op, &g->req)) continue;
        active[i] = true;
        for (int s = 0; s < op->n_inputs && st == PE_OK; s++)
            for (int k = 0; k < op->inputs[s].n_args && st == PE_OK; k++)
                st = set_add(&reach, op->inputs[s].args[k]);
    }
    set_free(&reach);
    /* seeds: target@GRAD = ones_like(target), or assign(seeds[i]). A seed is
     * a first contribution, not yet final: a target that another target
     * depends on gets the other's contributions summed in (fold). */
    for (int i = 0; i < n_targets && st == PE_OK; i++) {
        char name[512];
        grad_name(targets[i], 0, name, sizeof name);
        if ((st = pe_grad_declare_like(&g->gc, name, targets[i])) != PE_OK) break;
        bool given = seeds && seeds[i];
        pe_op *op = pe_block_add_op(b, given ? "assign" : "fill_any_like");
        if (!op) { st = pe_error(PE_ERR_NOMEM, "append_backward: out of memory"); break; }
        if ((st = pe_op_add_input(op, "X", given ? seeds[i] : targets[i])) || (st = pe_op_add_output(op, "Out", name)) ||
            (!given && (st = pe_op_set_float(op, "value", 1.0))) || (st = set_role(op, GRAD_ROLE_LOSS)))
            break;
        contrib_t *c = contrib(g, targets[i], true);
        if (!c) { st = pe_error(PE_ERR_NOMEM, "append_backward: out of memory"); break; }
        c->n = 1;
        c->folded = false;
    }
    /* (3) reverse walk */
    for (int i = n_fwd - 1; i >= 0 && st == PE_OK; i--) {
        if (!active[i]) continue;
        bool has_grad = false; /* b->ops[i] re-read each time: fold() may grow (move) b->ops */
        for (int s = 0; s < b->ops[i].n_outputs && st == PE_OK; s++)
            for (int k = 0; k < b->ops[i].outputs[s].n_args && st == PE_OK; k++) {
                contrib_t *c = contrib(g, b->ops[i].outputs[s].args[k], false);
                if (c && c->n) {
                    has_grad = true;
                    st = fold(g, c, -1);
                }
            }
        if (st != PE_OK || !has_grad) continue;
        const pe_op_info *info = pe_op_info_find(b->ops[i].type);
        if (!info) { st = pe_error(PE_ERR_NOT_FOUND, "append_backward: unknown op type '%s'", b->ops[i].type); break; }
        if (!info->grad) {
            st = pe_error(PE_ERR_UNSUPPORTED,
                          "append_backward: block 0 op %d (%s) has no gradient, but the target depends "
                          "on its output '%s' and its input needs a gradient; put that input in "
                          "no_grad_set or set stop_gradient on it",
                          i, info->name, b->ops[i].n_outputs && b->ops[i].outputs[0].n_args ? b->ops[i].outputs[0].args[0] : "");
            break;
        }
        g->gc.fwd_idx = i;
        g->gc.cur_idx = -1;
        st = info->grad(&g->gc);
        if (st != PE_OK) st = pe_error_wrap(st, "append_backward: gradient of block 0 op %d (%s)", i, info->name);
    }
    free(active);
    /* leaves: fold at the end */
    for (int i = 0; i < g->n_c && st == PE_OK; i++)
        if (g->c[i].n > 1 && !g->c[i].folded) st = fold(g, &g->c[i], -1);
    return st;
}

/* Marks op_role_var on the op writing each parameter's final gradient. */
static pe_status mark_role_var(autodiff *g, const char *param, const char *grad) {
    pe_block *b = blk(g);
    for (int i = b->n_ops - 1; i >= 0; i--) {
        pe_op *op = &b->ops[i];
        for (int s = 0; s < op->n_outputs; s++)
            for (int k = 0; k < op->outputs[s].n_args; k++) {
                if (strcmp(op->outputs[s].args[k], grad)) continue;
                const pe_attr *a = pe_op_attr(op, "op_role_var");
                int n = a && a->type == PE_ATTR_STRINGS ? a->n : 0;
                const char **vals = malloc(sizeof *vals * (size_t)(n + 2));
                if (!vals) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
                for (int j = 0; j < n; j++) vals[j] = a->strings[j];
                vals[n] = param;
                vals[n + 1] = grad;
                /* copy strings first: set_strings replaces the attr being read */
                char **copy = calloc((size_t)n + 2, sizeof *copy);
                pe_status st = PE_OK;
                for (int j = 0; j < n + 2 && copy; j++)
                    if (!(copy[j] = strdup(vals[j]))) st = PE_ERR_NOMEM;
                if (!copy || st != PE_OK) st = pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
                else st = pe_op_set_strings(op, "op_role_var", (const char *const *)copy, n + 2);
                for (int j = 0; copy && j < n + 2; j++) free(copy[j]);
                free(copy);
                free(vals);
                return st;
            }
    }
    return PE_OK;
}

pe_status pe_append_backward(pe_program *p, const char *loss, const char *const *params, int n_params,
                             const char *const *no_grad, int n_no_grad, pe_param_grad **out, int *n_out) {
    if (out) *out = NULL;
    if (n_out) *n_out = 0;
    if (!p || !loss) return pe_error(PE_ERR_INVALID, "append_backward: NULL program or loss");
    pe_block *b = &p->blocks[0];
    name_set plist = {0};
    pe_status st = PE_OK;
    if (n_params > 0) {
        for (int i = 0; i < n_params && st == PE_OK; i++) {
            if (!pe_block_find_var(b, params[i]))
                st = pe_error(PE_ERR_NOT_FOUND, "append_backward: parameter '%s' is not a variable of block 0", params[i]);
            else st = set_add(&plist, params[i]);
        }
    } else {
        for (int i = 0; i < b->n_vars && st == PE_OK; i++)
            if (b->vars[i].is_parameter && !b->vars[i].stop_gradient) st = set_add(&plist, b->vars[i].name);
    }
    autodiff g = {.gc = {.p = p, .cur_idx = -1, .drv = &k_driver}};
    g.gc.user = &g;
    int np = plist.n;
    if (st == PE_OK) st = run_backward(&g, &loss, NULL, 1, (const char *const *)plist.v, np, no_grad, n_no_grad);
    pe_param_grad *res = NULL;
    int nres = 0;
    if (st == PE_OK) res = calloc((size_t)(np ? np : 1), sizeof *res);
    if (st == PE_OK && !res) st = pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
    for (int i = 0; i < np && st == PE_OK; i++) {
        contrib_t *c = contrib(&g, plist.v[i], false);
        if (!c || !c->n) continue;
        char name[512];
        grad_name(plist.v[i], 0, name, sizeof name);
        st = mark_role_var(&g, plist.v[i], name);
        res[nres].param = strdup(plist.v[i]);
        res[nres].grad = strdup(name);
        nres++;
        if (!res[nres - 1].param || !res[nres - 1].grad) st = pe_error(PE_ERR_NOMEM, "append_backward: out of memory");
    }
    ctx_free(&g);
    set_free(&plist);
    if (st != PE_OK || !out) {
        pe_param_grads_free(res, nres);
        return st;
    }
    *out = res;
    *n_out = nres;
    return PE_OK;
}

void pe_param_grads_free(pe_param_grad *pg, int n) {
    if (!pg) return;
    for (int i = 0; i < n; i++) {
        free(pg[i].param);
        free(pg[i].grad);
    }
    free(pg);
}

pe_status pe_gradients(pe_program *p, const char *const *targets, int n_targets, const char *const *inputs,
                       int n_inputs, char **grad_names) {
    return pe_gradients_seeded(p, targets, NULL, n_targets, inputs, n_inputs, NULL, 0, grad_names);
}

pe_status pe_gradients_seeded(pe_program *p, const char *const *targets, const char *const *target_grads,
                              int n_targets, const char *const *inputs, int n_inputs, const char *const *no_grad,
                              int n_no_grad, char **grad_names) {
    if (!p || n_targets <= 0) return pe_error(PE_ERR_INVALID, "gradients: no targets");
    for (int i = 0; i < n_inputs; i++) grad_names[i] = NULL;
    for (int i = 0; i < n_inputs; i++)
        if (!pe_program_find_var(p, 0, inputs[i]))
            return pe_error(PE_ERR_NOT_FOUND, "gradients: input '%s' is not a variable of block 0", inputs[i]);
    autodiff g = {.gc = {.p = p, .cur_idx = -1, .drv = &k_driver}};
    g.gc.user = &g;
    pe_status st = run_backward(&g, targets, target_grads, n_targets, inputs, n_inputs, no_grad, n_no_grad);
    for (int i = 0; i < n_inputs && st == PE_OK; i++) {
        contrib_t *c = contrib(&g, inputs[i], false);
        if (!c || !c->n || set_has(&g.nograd, inputs[i])) continue;
        char name[512];
        grad_name(inputs[i], 0, name, sizeof name);
        grad_names[i] = strdup(name);
        if (!grad_names[i]) st = pe_error(PE_ERR_NOMEM, "gradients: out of memory");
    }
    ctx_free(&g);
    if (st != PE_OK)
        for (int i = 0; i < n_inputs; i++) { free(grad_names[i]); grad_names[i] = NULL; }
    return st;
}
