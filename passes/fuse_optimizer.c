/* passes/fuse_optimizer.c — BuildStrategy.fuse_all_optimizer_ops.
 *
 * Every run of optimizer ops of one type (sgd, momentum, adam, adagrad,
 * rmsprop, adamax, adamw, lamb), with equal attrs (mu, use_nesterov /
 * beta1, beta2, epsilon / ...) and params of one dtype, becomes one
 * merged_<type> op (Paddle's
 * merged_momentum / merged_adam slots: each slot lists the vars of all the
 * members in order; LearningRate lists one var, or one per param when they
 * differ, e.g. per-parameter lr_mult). Which op types, their merged
 * partners, which inputs members may share and the attrs that must be equal
 * are the registry's facts (ops/ops.def PE_OPT, pe_op_info), not a table
 * here. Its kernel updates every parameter in
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

/* The facts of an optimizer type come from the registry (ops.def PE_OPT):
 * its merged partner, the inputs members may share (LearningRate); every
 * other input and every output lists one var per member, and every attr
 * must be equal across members. NULL for any other op. */
static const pe_op_info *kind_of(const pe_op *op) {
    const pe_op_info *info = pe_op_info_find(op->type);
    return pe_op_info_is_optimizer(info) ? info : NULL;
}

/* Attr value as a double (absent: NaN, so two absent attrs compare by flag). */
static bool attr_equal(const pe_op *a, const pe_op *b, const char *name) {
    const pe_attr *x = pe_op_attr(a, name), *y = pe_op_attr(b, name);
    if (!x || !y) return !x && !y;
    if (x->type != y->type) return false;
    return x->type == PE_ATTR_FLOAT ? x->f == y->f : x->i == y->i;
}

/* A member: every slot has exactly one arg (the dispensable outputs, adam's
 * pow outputs, may be absent, but all members must agree). */
static bool well_formed(const pe_op *op, const pe_op_info *k) {
    for (int s = 0; s < k->n_inputs; s++)
        if (!pe_fuse_in(op, k->inputs[s].name)) return false;
    for (int s = 0; s < k->n_outputs; s++) {
        const pe_slot *sl = pe_op_output(op, k->outputs[s].name);
        if (sl && sl->n_args > 0 && !pe_fuse_arg(sl)) return false;
        if (!sl && k->outputs[s].arity != PE_ARITY_OPTIONAL) return false;
    }
    return true;
}

static bool compatible(const pe_block *b, const pe_op *x, const pe_op *y, const pe_op_info *k) {
    for (int a = 0; a < k->n_attrs; a++)
        if (!attr_equal(x, y, k->attrs[a].name)) return false;
    for (int s = 0; s < k->n_outputs; s++)
        if (!pe_fuse_out(x, k->outputs[s].name) != !pe_fuse_out(y, k->outputs[s].name)) return false;
    const pe_var *px = pe_block_find_var(b, pe_fuse_in(x, "Param")), *py = pe_block_find_var(b, pe_fuse_in(y, "Param"));
    return px && py && px->dtype == py->dtype;
}

/* reads / writes of a member set */
static pe_status collect(const pe_block *b, const int *mem, int n, const pe_op_info *k, pe_strlist *r, pe_strlist *w) {
    for (int i = 0; i < n; i++) {
        const pe_op *op = &b->ops[mem[i]];
        for (int s = 0; s < k->n_inputs; s++) PE_CHECK(pe_strlist_add(r, pe_fuse_in(op, k->inputs[s].name)));
        for (int s = 0; s < k->n_outputs; s++) PE_CHECK(pe_strlist_add(w, pe_fuse_out(op, k->outputs[s].name)));
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
static pe_status safe_group(const pe_block *b, const int *mem, int n, const pe_op_info *k, bool *ok) {
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

/* Replaces the members (ascending indices) by one merged op: its inputs are
 * the per-member slots (each listing the members' vars in order), then the
 * shared ones (one var when all members name the same, else one each), its
 * outputs the members' outputs, its attrs the first member's. */
static pe_status merge(pe_block *b, int *mem, int n, const pe_op_info *k) {
    pe_strlist args = {0}, rv = {0}, shared[PE_MAX_SLOTS] = {{0}};
    pe_status st = PE_OK;
    /* copy every name first: the block is edited below */
    for (int i = 0; i < n && st == PE_OK; i++) {
        const pe_op *op = &b->ops[mem[i]];
        for (int s = 0; s < k->n_inputs && st == PE_OK; s++)
            st = pe_strlist_add(pe_op_info_shared_input(k, s) ? &shared[s] : &args, pe_fuse_in(op, k->inputs[s].name));
        for (int s = 0; s < k->n_outputs && st == PE_OK; s++) st = pe_strlist_add(&args, pe_fuse_out(op, k->outputs[s].name));
        const pe_attr *a = pe_op_attr(op, "op_role_var");
        if (a && a->type == PE_ATTR_STRINGS)
            for (int j = 0; j < a->n && st == PE_OK; j++) st = pe_strlist_add(&rv, a->strings[j]);
    }
    /* attrs of the first member (equal across members), by value */
    const pe_op *f = &b->ops[mem[0]];
    saved_attr saved[PE_MAX_ATTRS];
    int n_saved = 0;
    for (int a = 0; a < k->n_attrs; a++) {
        const pe_attr *x = pe_op_attr(f, k->attrs[a].name);
        if (x) saved[n_saved++] = (saved_attr){k->attrs[a].name, x->type, x->f, x->i};
    }
    int role = pe_fuse_op_role(f);
    pe_op *op;
    int pos;
    if (st == PE_OK) st = pe_fuse_replace(b, mem, n, pe_op_info_get(k->merged_id)->name, &op, &pos);
    int n_in = 0;
    for (int s = 0; s < k->n_inputs; s++) n_in += !pe_op_info_shared_input(k, s);
    const int per = n_in + k->n_outputs;
    for (int s = 0, j = 0; s < k->n_inputs && st == PE_OK; s++) {
        if (pe_op_info_shared_input(k, s)) continue;
        for (int i = 0; i < n && st == PE_OK; i++) st = pe_op_add_input(op, k->inputs[s].name, args.s[i * per + j]);
        j++;
    }
    for (int s = 0; s < k->n_inputs && st == PE_OK; s++) {
        if (!pe_op_info_shared_input(k, s)) continue;
        bool one = true;
        for (int i = 1; i < n; i++) one = one && !strcmp(shared[s].s[i], shared[s].s[0]);
        for (int i = 0; i < (one ? 1 : n) && st == PE_OK; i++) st = pe_op_add_input(op, k->inputs[s].name, shared[s].s[i]);
    }
    for (int s = 0; s < k->n_outputs && st == PE_OK; s++)
        for (int i = 0; i < n && st == PE_OK; i++)
            if (args.s[i * per + n_in + s]) st = pe_op_add_output(op, k->outputs[s].name, args.s[i * per + n_in + s]);
    for (int a = 0; a < n_saved && st == PE_OK; a++) {
        if (saved[a].type == PE_ATTR_FLOAT) st = pe_op_set_float(op, saved[a].name, saved[a].f);
        else if (saved[a].type == PE_ATTR_BOOL) st = pe_op_set_bool(op, saved[a].name, saved[a].i != 0);
        else st = pe_op_set_int(op, saved[a].name, saved[a].i);
    }
    if (st == PE_OK) st = pe_op_set_int(op, "op_role", role);
    if (st == PE_OK && rv.n) st = pe_op_set_strings(op, "op_role_var", (const char *const *)rv.s, rv.n);
    pe_strlist_free(&args);
    pe_strlist_free(&rv);
    for (int s = 0; s < PE_MAX_SLOTS; s++) pe_strlist_free(&shared[s]);
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
        const pe_op_info *k = kind_of(&b->ops[start]);
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
