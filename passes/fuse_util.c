/* passes/fuse_util.c — graph helpers shared by the fusion passes
 * (passes/fuse_*.c, contract in passes/fuse.h): a use index (readers and
 * writers of every var), the intermediate-var and merge-safety checks, and
 * the rewrite that replaces a pattern's ops by one op.
 *
 * The passes rebuild the use index after every rewrite instead of patching
 * it: programs have hundreds of ops, patterns are few, and a fresh index
 * cannot go stale.
 */
#include "passes/fuse.h"

#include <stdlib.h>
#include <string.h>

#define OOM() pe_error(PE_ERR_NOMEM, "fusion pass: out of memory")

static int push_unique(int **arr, int *n, int v) {
    if (*n > 0 && (*arr)[*n - 1] == v) return 0; /* ops are visited in order */
    int *na = realloc(*arr, sizeof *na * (size_t)(*n + 1));
    if (!na) return -1;
    *arr = na;
    na[(*n)++] = v;
    return 0;
}

static pe_var_uses *uses_of(pe_use_index *ix, const char *name) {
    int i = pe_strmap_get(&ix->map, name);
    if (i >= 0) return &ix->u[i];
    if (ix->n == ix->cap) {
        int cap = ix->cap ? ix->cap * 2 : 128;
        pe_var_uses *nu = realloc(ix->u, sizeof *nu * (size_t)cap);
        if (!nu) return NULL;
        ix->u = nu;
        ix->cap = cap;
    }
    memset(&ix->u[ix->n], 0, sizeof ix->u[ix->n]);
    if (pe_strmap_put(&ix->map, name, ix->n) != 0) return NULL;
    return &ix->u[ix->n++];
}

void pe_uses_free(pe_use_index *ix) {
    for (int i = 0; i < ix->n; i++) {
        free(ix->u[i].readers);
        free(ix->u[i].writers);
    }
    free(ix->u);
    pe_strmap_free(&ix->map);
    memset(ix, 0, sizeof *ix);
}

pe_status pe_uses_build(const pe_program *p, pe_use_index *ix) {
    memset(ix, 0, sizeof *ix);
    for (int bi = 0; bi < p->n_blocks; bi++) {
        const pe_block *b = &p->blocks[bi];
        for (int i = 0; i < b->n_ops; i++) {
            const pe_op *op = &b->ops[i];
            for (int io = 0; io < 2; io++) {
                const pe_slot *slots = io ? op->outputs : op->inputs;
                int n_slots = io ? op->n_outputs : op->n_inputs;
                for (int s = 0; s < n_slots; s++)
                    for (int k = 0; k < slots[s].n_args; k++) {
                        const char *name = slots[s].args[k];
                        if (!strcmp(name, PE_EMPTY_VAR)) continue;
                        pe_var_uses *u = uses_of(ix, name);
                        if (!u) goto oom;
                        if (bi > 0) u->foreign = true;
                        else if (io ? push_unique(&u->writers, &u->n_writers, i)
                                    : push_unique(&u->readers, &u->n_readers, i))
                            goto oom;
                    }
            }
        }
    }
    return PE_OK;
oom:
    pe_uses_free(ix);
    return OOM();
}

const pe_var_uses *pe_uses_get(const pe_use_index *ix, const char *name) {
    int i = pe_strmap_get(&ix->map, name);
    return i >= 0 ? &ix->u[i] : NULL;
}

static bool is_member(int op, const int *members, int n) {
    for (int i = 0; i < n; i++)
        if (members[i] == op) return true;
    return false;
}

bool pe_fuse_is_intermediate(const pe_program *p, const pe_use_index *ix, const pe_fuse_opts *o, const char *name,
                             const int *members, int n_members) {
    if (!name) return false;
    if (o && o->protect && pe_strmap_get(o->protect, name) >= 0) return false;
    const pe_var *v = pe_block_find_var(&p->blocks[0], name);
    if (v && v->persistable) return false;
    const pe_var_uses *u = pe_uses_get(ix, name);
    if (!u || u->foreign || u->n_writers != 1 || !is_member(u->writers[0], members, n_members)) return false;
    for (int i = 0; i < u->n_readers; i++)
        if (!is_member(u->readers[i], members, n_members)) return false;
    return true;
}

/* flag bits in the map of members' names */
enum { USE_READ = 1, USE_WRITE = 2 };

static int mark(pe_strmap *m, const pe_slot *slots, int n, int flag) {
    for (int s = 0; s < n; s++)
        for (int a = 0; a < slots[s].n_args; a++) {
            int v = pe_strmap_get(m, slots[s].args[a]);
            if (pe_strmap_put(m, slots[s].args[a], (v < 0 ? 0 : v) | flag) != 0) return -1;
        }
    return 0;
}

bool pe_fuse_can_merge(const pe_block *b, const int *members, int n_members) {
    int lo = members[0], hi = members[0];
    for (int i = 1; i < n_members; i++) {
        if (members[i] < lo) lo = members[i];
        if (members[i] > hi) hi = members[i];
    }
    /* walk [lo, hi): the map holds what the members seen so far read and
     * write; each of them moves past every later non-member op */
    pe_strmap m = {0};
    bool ok = true;
    for (int k = lo; k < hi && ok; k++) {
        const pe_op *op = &b->ops[k];
        if (is_member(k, members, n_members)) {
            ok = mark(&m, op->inputs, op->n_inputs, USE_READ) == 0 && mark(&m, op->outputs, op->n_outputs, USE_WRITE) == 0;
            continue;
        }
        for (int s = 0; s < op->n_outputs && ok; s++)
            for (int a = 0; a < op->outputs[s].n_args && ok; a++)
                ok = pe_strmap_get(&m, op->outputs[s].args[a]) < 0;
        for (int s = 0; s < op->n_inputs && ok; s++)
            for (int a = 0; a < op->inputs[s].n_args && ok; a++) {
                int v = pe_strmap_get(&m, op->inputs[s].args[a]);
                ok = v < 0 || !(v & USE_WRITE);
            }
    }
    pe_strmap_free(&m);
    return ok;
}

static int cmp_int_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

pe_status pe_fuse_replace(pe_block *b, int *members, int n_members, const char *type, pe_op **out, int *pos) {
    qsort(members, (size_t)n_members, sizeof *members, cmp_int_desc);
    int at = members[0] + 1;
    if (!pe_block_insert_op(b, at, type)) return OOM();
    for (int i = 0; i < n_members; i++) pe_block_remove_op(b, members[i]); /* all before `at`: descending */
    at -= n_members;
    *out = &b->ops[at];
    *pos = at;
    return PE_OK;
}

void pe_fuse_drop_var(pe_program *p, const char *name) { pe_block_remove_var(&p->blocks[0], name); }

int pe_fuse_op_role(const pe_op *op) {
    const pe_attr *a = pe_op_attr(op, "op_role");
    return a ? (int)a->i : PE_ROLE_FORWARD;
}

const char *pe_fuse_arg(const pe_slot *s) {
    if (!s || s->n_args != 1 || !strcmp(s->args[0], PE_EMPTY_VAR)) return NULL;
    return s->args[0];
}

const char *pe_fuse_in(const pe_op *op, const char *slot) { return pe_fuse_arg(pe_op_input(op, slot)); }
const char *pe_fuse_out(const pe_op *op, const char *slot) { return pe_fuse_arg(pe_op_output(op, slot)); }

int pe_fuse_reader_of(const pe_block *b, const pe_use_index *ix, const char *var, int type_id, const char *slot) {
    const pe_var_uses *u = var ? pe_uses_get(ix, var) : NULL;
    int found = -1;
    for (int i = 0; u && i < u->n_readers; i++) {
        const pe_op *op = &b->ops[u->readers[i]];
        const char *a = pe_fuse_in(op, slot);
        if (pe_op_type_id(op->type) != type_id || !a || strcmp(a, var)) continue;
        if (found >= 0) return -1;
        found = u->readers[i];
    }
    return found;
}

bool pe_fuse_is_act(int type_id) { return type_id == PE_OP_relu || type_id == PE_OP_sigmoid || type_id == PE_OP_tanh; }

int64_t pe_fuse_attr_int(const pe_op *op, const char *name, int64_t def) {
    const pe_attr *a = pe_op_attr(op, name);
    return a ? a->i : def;
}

pe_status pe_strlist_add(pe_strlist *l, const char *s) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        char **ns = realloc(l->s, sizeof *ns * (size_t)cap);
        if (!ns) return OOM();
        l->s = ns;
        l->cap = cap;
    }
    char *c = NULL;
    if (s && !(c = strdup(s))) return OOM();
    l->s[l->n++] = c;
    return PE_OK;
}

void pe_strlist_free(pe_strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    memset(l, 0, sizeof *l);
}

pe_status pe_fuse_each(pe_program *p, const pe_fuse_opts *o, const char *pass, pe_fuse_match_fn match,
                       pe_fuse_apply_fn apply, void *m, size_t m_size, int *n_fused) {
    *n_fused = 0;
    for (;;) {
        pe_use_index ix;
        PE_CHECK(pe_uses_build(p, &ix));
        bool found = false;
        for (int i = 0; i < p->blocks[0].n_ops && !found; i++) {
            memset(m, 0, m_size);
            found = match(p, &ix, o, i, m);
        }
        pe_uses_free(&ix);
        if (!found) return PE_OK;
        pe_status st = apply(p, m);
        if (st != PE_OK) return pe_error_wrap(st, "%s pass", pass);
        (*n_fused)++;
    }
}
