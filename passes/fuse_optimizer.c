/* passes/fuse_optimizer.c — BuildStrategy.fuse_all_optimizer_ops.
 *
 * Every run of sgd / momentum / adam ops of one type, with equal attrs
 * (mu, use_nesterov / beta1, beta2, epsilon) and params of one dtype,
 * becomes one merged_sgd / merged_momentum / merged_adam op (Paddle's
 * merged_momentum / merged_adam slots: each slot lists the vars of all the
 * members in order; LearningRate lists one var, or one per param when they
 * differ, e.g. per-parameter lr_mult). Its kernel updates every parameter in
 * one call, over one parallel region spanning all the elements — the same
 * per-element arithmetic as the single ops, so results are bitwise equal.
 *
 * What was chosen instead of Paddle's coalesce_tensor: the parameters,
 * gradients and moments are NOT moved into one contiguous buffer. They stay
 * separate tensors addressed by name (the allreduce buckets of
 * fuse_all_reduce_ops and the memory planner own buffer layout), and the
 * merged kernel walks the list. The saving is in op launches and parallel
 * regions: one per optimizer type instead of one per parameter.
 *
 * A member is taken into the group only when moving the earlier members to
 * its position is safe (passes/fuse.h): an op between them that reads an
 * updated param (a later layer's weight decay term reads its own param, not
 * these) or writes an input ends the group, and a new one starts. The
 * `reduce` strategy runs each parameter's optimizer only on the place that
 * owns it, so the pass manager does not run this pass under `reduce` on
 * several places (Paddle restricts it to AllReduce as well).
 */
#include "passes/fuse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *type, *merged;
    const char *const *in_slots;   /* per member, one var each (besides LearningRate) */
    const char *const *out_slots;
    const char *const *attrs;      /* attrs that must be equal */
} opt_kind;

static const char *const k_sgd_in[] = {"Param", "Grad", NULL};
static const char *const k_sgd_out[] = {"ParamOut", NULL};
static const char *const k_sgd_attrs[] = {NULL};
static const char *const k_mom_in[] = {"Param", "Grad", "Velocity", NULL};
static const char *const k_mom_out[] = {"ParamOut", "VelocityOut", NULL};
static const char *const k_mom_attrs[] = {"mu", "use_nesterov", NULL};
static const char *const k_adam_in[] = {"Param", "Grad", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow", NULL};
static const char *const k_adam_out[] = {"ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut", NULL};
static const char *const k_adam_attrs[] = {"beta1", "beta2", "epsilon", NULL};

static const opt_kind k_kinds[] = {
    {"sgd", "merged_sgd", k_sgd_in, k_sgd_out, k_sgd_attrs},
    {"momentum", "merged_momentum", k_mom_in, k_mom_out, k_mom_attrs},
    {"adam", "merged_adam", k_adam_in, k_adam_out, k_adam_attrs},
};

static const opt_kind *kind_of(const pe_op *op) {
    for (size_t k = 0; k < sizeof k_kinds / sizeof k_kinds[0]; k++)
        if (!strcmp(op->type, k_kinds[k].type)) return &k_kinds[k];
    return NULL;
}

/* Attr value as a double (absent: NaN, so two absent attrs compare by flag). */
static bool attr_equal(const pe_op *a, const pe_op *b, const char *name) {
    const pe_attr *x = pe_op_attr(a, name), *y = pe_op_attr(b, name);
    if (!x || !y) return !x && !y;
    if (x->type != y->type) return false;
    return x->type == PE_ATTR_FLOAT ? x->f == y->f : x->i == y->i;
}

/* A member: every slot has exactly one arg (the dispensable adam pow
 * outputs may be absent, but all members must agree). */
static bool well_formed(const pe_op *op, const opt_kind *k) {
    for (int s = 0; k->in_slots[s]; s++)
        if (!pe_fuse_in(op, k->in_slots[s])) return false;
    if (!pe_fuse_in(op, "LearningRate")) return false;
    for (int s = 0; k->out_slots[s]; s++) {
        const pe_slot *sl = pe_op_output(op, k->out_slots[s]);
        if (sl && sl->n_args > 0 && !pe_fuse_arg(sl)) return false;
        if (!sl && strncmp(k->out_slots[s], "Beta", 4)) return false;
    }
    return true;
}

static bool compatible(const pe_block *b, const pe_op *x, const pe_op *y, const opt_kind *k) {
    for (int a = 0; k->attrs[a]; a++)
        if (!attr_equal(x, y, k->attrs[a])) return false;
    for (int s = 0; k->out_slots[s]; s++)
        if (!pe_fuse_out(x, k->out_slots[s]) != !pe_fuse_out(y, k->out_slots[s])) return false;
    const pe_var *px = pe_block_find_var(b, pe_fuse_in(x, "Param")), *py = pe_block_find_var(b, pe_fuse_in(y, "Param"));
    return px && py && px->dtype == py->dtype;
}

/* reads / writes of a member set */
static pe_status collect(const pe_block *b, const int *mem, int n, const opt_kind *k, pe_strlist *r, pe_strlist *w) {
    for (int i = 0; i < n; i++) {
        const pe_op *op = &b->ops[mem[i]];
        for (int s = 0; k->in_slots[s]; s++) PE_CHECK(pe_strlist_add(r, pe_fuse_in(op, k->in_slots[s])));
        PE_CHECK(pe_strlist_add(r, pe_fuse_in(op, "LearningRate")));
        for (int s = 0; k->out_slots[s]; s++) PE_CHECK(pe_strlist_add(w, pe_fuse_out(op, k->out_slots[s])));
    }
    return PE_OK;
}

static bool listed(const pe_strlist *l, int from, int to, const char *s) {
    for (int i = from; i < to; i++)
        if (l->s[i] && s && !strcmp(l->s[i], s)) return true;
    return false;
}

/* mem[n-1] joins mem[0..n-2]: the merged kernel updates all members at
 * once, so the newcomer must not read what an earlier member writes (a
 * shared pow accumulator, the same param twice), nor write what an earlier
 * member reads or writes; and the ops in between must allow the move. */
static pe_status safe_group(const pe_block *b, const int *mem, int n, const opt_kind *k, bool *ok) {
    pe_strlist r = {0}, w = {0};
    pe_status st = collect(b, mem, n - 1, k, &r, &w);
    int r_old = r.n, w_old = w.n;
    if (st == PE_OK) st = collect(b, mem + n - 1, 1, k, &r, &w);
    *ok = st == PE_OK;
    for (int i = r_old; i < r.n && *ok; i++) *ok = !listed(&w, 0, w_old, r.s[i]);
    for (int i = w_old; i < w.n && *ok; i++) *ok = !listed(&w, 0, w_old, w.s[i]) && !listed(&r, 0, r_old, w.s[i]);
    *ok = *ok && pe_fuse_can_merge(b, mem, n);
    pe_strlist_free(&r);
    pe_strlist_free(&w);
    return st;
}

typedef struct {
    const char *name;
    pe_attr_type type;
    double f;
    int64_t i;
} saved_attr;

/* Replaces the members (ascending indices) by one merged op. */
static pe_status merge(pe_block *b, int *mem, int n, const opt_kind *k) {
    pe_strlist args = {0}, rv = {0}, lr = {0};
    pe_status st = PE_OK;
    /* copy every name first: the block is edited below */
    for (int i = 0; i < n && st == PE_OK; i++) {
        const pe_op *op = &b->ops[mem[i]];
        for (int s = 0; k->in_slots[s] && st == PE_OK; s++) st = pe_strlist_add(&args, pe_fuse_in(op, k->in_slots[s]));
        for (int s = 0; k->out_slots[s] && st == PE_OK; s++) st = pe_strlist_add(&args, pe_fuse_out(op, k->out_slots[s]));
        if (st == PE_OK) st = pe_strlist_add(&lr, pe_fuse_in(op, "LearningRate"));
        const pe_attr *a = pe_op_attr(op, "op_role_var");
        if (a && a->type == PE_ATTR_STRINGS)
            for (int j = 0; j < a->n && st == PE_OK; j++) st = pe_strlist_add(&rv, a->strings[j]);
    }
    bool one_lr = true;
    for (int i = 1; i < lr.n; i++) one_lr = one_lr && !strcmp(lr.s[i], lr.s[0]);
    /* attrs of the first member (equal across members), by value */
    const pe_op *f = &b->ops[mem[0]];
    int n_in = 0, n_out = 0;
    while (k->in_slots[n_in]) n_in++;
    while (k->out_slots[n_out]) n_out++;
    saved_attr saved[4];
    int n_saved = 0;
    for (int a = 0; k->attrs[a] && n_saved < 4; a++) {
        const pe_attr *x = pe_op_attr(f, k->attrs[a]);
        if (x) saved[n_saved++] = (saved_attr){k->attrs[a], x->type, x->f, x->i};
    }
    int role = pe_fuse_op_role(f);
    pe_op *op;
    int pos;
    if (st == PE_OK) st = pe_fuse_replace(b, mem, n, k->merged, &op, &pos);
    int per = n_in + n_out;
    for (int s = 0; s < n_in && st == PE_OK; s++)
        for (int i = 0; i < n && st == PE_OK; i++) st = pe_op_add_input(op, k->in_slots[s], args.s[i * per + s]);
    for (int i = 0; i < (one_lr ? 1 : n) && st == PE_OK; i++) st = pe_op_add_input(op, "LearningRate", lr.s[i]);
    for (int s = 0; s < n_out && st == PE_OK; s++)
        for (int i = 0; i < n && st == PE_OK; i++)
            if (args.s[i * per + n_in + s]) st = pe_op_add_output(op, k->out_slots[s], args.s[i * per + n_in + s]);
    for (int a = 0; a < n_saved && st == PE_OK; a++) {
        if (saved[a].type == PE_ATTR_FLOAT) st = pe_op_set_float(op, saved[a].name, saved[a].f);
        else if (saved[a].type == PE_ATTR_BOOL) st = pe_op_set_bool(op, saved[a].name, saved[a].i != 0);
        else st = pe_op_set_int(op, saved[a].name, saved[a].i);
    }
    if (st == PE_OK) st = pe_op_set_int(op, "op_role", role);
    if (st == PE_OK && rv.n) st = pe_op_set_strings(op, "op_role_var", (const char *const *)rv.s, rv.n);
    pe_strlist_free(&args);
    pe_strlist_free(&rv);
    pe_strlist_free(&lr);
    return st;
}

pe_status pe_fuse_all_optimizer_ops(pe_program *p, const pe_fuse_opts *o, int *n_fused) {
    (void)o; /* optimizer ops write persistables only: nothing to protect */
    *n_fused = 0;
    pe_block *b = &p->blocks[0];
    int *mem = malloc(sizeof *mem * (size_t)(b->n_ops ? b->n_ops : 1));
    if (!mem) return pe_error(PE_ERR_NOMEM, "fuse_all_optimizer_ops pass: out of memory");
    pe_status st = PE_OK;
    /* one group at a time: the first unmerged optimizer op and every later
     * compatible one that can join it safely; merged ops are not re-grouped */
    for (int start = 0; start < b->n_ops && st == PE_OK; start++) {
        const opt_kind *k = kind_of(&b->ops[start]);
        if (!k || !well_formed(&b->ops[start], k)) continue;
        int n = 0;
        mem[n++] = start;
        for (int j = start + 1; j < b->n_ops && st == PE_OK; j++) {
            const pe_op *op = &b->ops[j];
            if (kind_of(op) != k || !well_formed(op, k) || !compatible(b, &b->ops[start], op, k)) continue;
            mem[n] = j;
            bool ok = false;
            st = safe_group(b, mem, n + 1, k, &ok);
            if (ok) n++;
        }
        if (st != PE_OK || n < 2) continue;
        st = merge(b, mem, n, k);
        if (st == PE_OK) (*n_fused)++;
        start = -1; /* indices moved: rescan (merged ops are not optimizer types) */
    }
    free(mem);
    return st == PE_OK ? PE_OK : pe_error_wrap(st, "fuse_all_optimizer_ops pass");
}
