/* graph/program.c — building, editing, cloning and freeing the program IR.
 *
 * The IR owns every string and array it points to; these helpers are the
 * only code that allocates inside it, so pe_program_free can free it all.
 * Vars and ops live in growable arrays: pointers returned by the add
 * functions stay valid until the next add to the same block.
 *
 * Each block keeps a name -> var index (a hash map whose keys borrow the
 * vars' names) so that finding a var is O(1) and building, cloning or
 * checking a program of 100k ops is linear: pe_block_add_var extends it,
 * pe_block_remove_var and the loader rebuild it (pe_block_reindex). Finding
 * never writes it (threads may look vars up in a shared program); a block
 * whose index does not cover its vars (no memory for it) is searched
 * linearly, with the same result.
 */
#include "graph/internal.h"
#include "graph/strmap.h"
#include "pe/program.h"

#include <stdlib.h>
#include <string.h>

static const char *const k_attr_type_names[PE_ATTR_TYPE_COUNT] = {
    "int", "float", "string", "bool", "long", "ints", "floats", "strings", "bools", "longs", "block",
};

const char *pe_attr_type_name(pe_attr_type t) {
    return (int)t >= 0 && t < PE_ATTR_TYPE_COUNT ? k_attr_type_names[t] : "invalid";
}

static void attr_free(pe_attr *a) {
    free(a->name);
    free(a->s);
    free(a->ints);
    free(a->floats);
    if (a->strings)
        for (int i = 0; i < a->n; i++) free(a->strings[i]);
    free(a->strings);
    memset(a, 0, sizeof *a);
}

static void slots_free(pe_slot *s, int n) {
    for (int i = 0; i < n; i++) {
        free(s[i].name);
        for (int k = 0; k < s[i].n_args; k++) free(s[i].args[k]);
        free(s[i].args);
    }
    free(s);
}

static void op_free(pe_op *op) {
    free(op->type);
    slots_free(op->inputs, op->n_inputs);
    slots_free(op->outputs, op->n_outputs);
    for (int i = 0; i < op->n_attrs; i++) attr_free(&op->attrs[i]);
    free(op->attrs);
    memset(op, 0, sizeof *op);
}

struct pe_var_index {
    pe_strmap map; /* var name (borrowed from vars[i].name) -> i */
    int n;         /* vars indexed: 0..n-1 */
};

static void index_free(pe_block *b) {
    if (!b->index) return;
    pe_strmap_free(&b->index->map);
    free(b->index);
    b->index = NULL;
}

/* Adds vars[ix->n..n_vars) to the index; drops the index when out of memory. */
static void index_extend(pe_block *b) {
    struct pe_var_index *ix = b->index;
    for (; ix->n < b->n_vars; ix->n++)
        if (pe_strmap_get(&ix->map, b->vars[ix->n].name) < 0 && pe_strmap_put(&ix->map, b->vars[ix->n].name, ix->n)) {
            index_free(b);
            return;
        }
}

void pe_block_reindex(pe_block *b) {
    index_free(b);
    if (!(b->index = calloc(1, sizeof *b->index))) return;
    index_extend(b);
}

static void block_free(pe_block *b) {
    index_free(b);
    for (int i = 0; i < b->n_vars; i++) free(b->vars[i].name);
    free(b->vars);
    for (int i = 0; i < b->n_ops; i++) op_free(&b->ops[i]);
    free(b->ops);
}

static void names_free(char **v, int n) {
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

void pe_program_free(pe_program *p) {
    if (!p) return;
    for (int i = 0; i < p->n_blocks; i++) block_free(&p->blocks[i]);
    free(p->blocks);
    names_free(p->feed_names, p->n_feed_names);
    names_free(p->fetch_names, p->n_fetch_names);
    free(p);
}

static char **names_dup(const char *const *v, int n) {
    char **c = calloc((size_t)(n > 0 ? n : 1), sizeof *c);
    for (int i = 0; c && i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            names_free(c, i);
            return NULL;
        }
    return c;
}

pe_status pe_program_set_io(pe_program *p, const char *const *feeds, int n_feeds, const char *const *fetches,
                            int n_fetches) {
    if (!p || p->n_blocks < 1 || n_feeds < 0 || n_fetches < 0 || (n_feeds && !feeds) || (n_fetches && !fetches))
        return pe_error(PE_ERR_INVALID, "pe_program_set_io: bad argument");
    for (int k = 0; k < 2; k++) {
        const char *const *v = k ? fetches : feeds;
        for (int i = 0; i < (k ? n_fetches : n_feeds); i++)
            if (!v[i] || !pe_block_find_var(&p->blocks[0], v[i]))
                return pe_error(PE_ERR_NOT_FOUND, "pe_program_set_io: %s var '%s' is not a variable of block 0",
                                k ? "fetch" : "feed", v[i] ? v[i] : "(null)");
    }
    char **nf = names_dup(feeds, n_feeds), **nt = names_dup(fetches, n_fetches);
    if (!nf || !nt) {
        names_free(nf, n_feeds);
        names_free(nt, n_fetches);
        return pe_error(PE_ERR_NOMEM, "pe_program_set_io: out of memory");
    }
    names_free(p->feed_names, p->n_feed_names);
    names_free(p->fetch_names, p->n_fetch_names);
    p->feed_names = nf;
    p->n_feed_names = n_feeds;
    p->fetch_names = nt;
    p->n_fetch_names = n_fetches;
    return PE_OK;
}

pe_program *pe_program_new(void) {
    pe_program *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (!pe_program_add_block(p, -1)) {
        free(p);
        return NULL;
    }
    return p;
}

pe_block *pe_program_add_block(pe_program *p, int parent_idx) {
    pe_block *nb = realloc(p->blocks, sizeof *nb * (size_t)(p->n_blocks + 1));
    if (!nb) return NULL;
    p->blocks = nb;
    pe_block *b = &p->blocks[p->n_blocks];
    memset(b, 0, sizeof *b);
    b->idx = p->n_blocks;
    b->parent_idx = parent_idx;
    p->n_blocks++;
    return b;
}

pe_var *pe_block_find_var(const pe_block *b, const char *name) {
    const struct pe_var_index *ix = b->index;
    if (ix && ix->n == b->n_vars) {
        int i = pe_strmap_get(&ix->map, name);
        return i >= 0 ? &b->vars[i] : NULL;
    }
    for (int i = 0; i < b->n_vars; i++)
        if (!strcmp(b->vars[i].name, name)) return &b->vars[i];
    return NULL;
}

pe_var *pe_program_find_var(const pe_program *p, int block_idx, const char *name) {
    while (block_idx >= 0 && block_idx < p->n_blocks) {
        pe_var *v = pe_block_find_var(&p->blocks[block_idx], name);
        if (v) return v;
        int parent = p->blocks[block_idx].parent_idx;
        if (parent >= block_idx) break; /* malformed; the checker reports it */
        block_idx = parent;
    }
    return NULL;
}

pe_var *pe_block_add_var(pe_block *b, const char *name, pe_dtype dt, int ndim, const int64_t *dims) {
    if (pe_block_find_var(b, name) || ndim < 0 || ndim > 8) return NULL;
    if (b->n_vars == b->cap_vars) {
        int cap = b->cap_vars ? b->cap_vars * 2 : 16;
        pe_var *nv = realloc(b->vars, sizeof *nv * (size_t)cap);
        if (!nv) return NULL;
        b->vars = nv;
        b->cap_vars = cap;
    }
    pe_var *v = &b->vars[b->n_vars];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name) return NULL;
    v->dtype = dt;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->dims[i] = dims[i];
    b->n_vars++;
    if (b->index && b->index->n == b->n_vars - 1)
        index_extend(b);
    else
        pe_block_reindex(b);
    return v;
}

bool pe_block_remove_var(pe_block *b, const char *name) {
    pe_var *v = pe_block_find_var(b, name);
    if (!v) return false;
    int i = (int)(v - b->vars);
    free(v->name);
    memmove(&b->vars[i], &b->vars[i + 1], sizeof *b->vars * (size_t)(b->n_vars - i - 1));
    b->n_vars--;
    pe_block_reindex(b); /* the later vars moved */
    return true;
}

pe_op *pe_block_insert_op(pe_block *b, int pos, const char *type) {
    if (pos < 0 || pos > b->n_ops) return NULL;
    if (b->n_ops == b->cap_ops) {
        int cap = b->cap_ops ? b->cap_ops * 2 : 16;
        pe_op *no = realloc(b->ops, sizeof *no * (size_t)cap);
        if (!no) return NULL;
        b->ops = no;
        b->cap_ops = cap;
    }
    char *t = strdup(type);
    if (!t) return NULL;
    memmove(&b->ops[pos + 1], &b->ops[pos], sizeof *b->ops * (size_t)(b->n_ops - pos));
    pe_op *op = &b->ops[pos];
    memset(op, 0, sizeof *op);
    op->type = t;
    b->n_ops++;
    return op;
}

pe_op *pe_block_add_op(pe_block *b, const char *type) { return pe_block_insert_op(b, b->n_ops, type); }

void pe_block_remove_op(pe_block *b, int pos) {
    if (pos < 0 || pos >= b->n_ops) return;
    op_free(&b->ops[pos]);
    memmove(&b->ops[pos], &b->ops[pos + 1], sizeof *b->ops * (size_t)(b->n_ops - pos - 1));
    b->n_ops--;
}

static pe_status slot_add(pe_slot **slots, int *n, const char *slot, const char *arg) {
    pe_slot *s = NULL;
    for (int i = 0; i < *n; i++)
        if (!strcmp((*slots)[i].name, slot)) s = &(*slots)[i];
    if (!s) {
        pe_slot *ns = realloc(*slots, sizeof *ns * (size_t)(*n + 1));
        if (!ns) return pe_error(PE_ERR_NOMEM, "out of memory adding slot '%s'", slot);
        *slots = ns;
        s = &ns[*n];
        memset(s, 0, sizeof *s);
        s->name = strdup(slot);
        if (!s->name) return pe_error(PE_ERR_NOMEM, "out of memory adding slot '%s'", slot);
        (*n)++;
    }
    if (!arg) return PE_OK; /* an empty slot */
    char **na = realloc(s->args, sizeof *na * (size_t)(s->n_args + 1));
    if (!na) return pe_error(PE_ERR_NOMEM, "out of memory adding arg '%s'", arg);
    s->args = na;
    s->args[s->n_args] = strdup(arg);
    if (!s->args[s->n_args]) return pe_error(PE_ERR_NOMEM, "out of memory adding arg '%s'", arg);
    s->n_args++;
    return PE_OK;
}

pe_status pe_op_add_input(pe_op *op, const char *slot, const char *arg) {
    return slot_add(&op->inputs, &op->n_inputs, slot, arg);
}
pe_status pe_op_add_output(pe_op *op, const char *slot, const char *arg) {
    return slot_add(&op->outputs, &op->n_outputs, slot, arg);
}

static const pe_slot *slot_find(const pe_slot *s, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s[i].name, name)) return &s[i];
    return NULL;
}
const pe_slot *pe_op_input(const pe_op *op, const char *slot) { return slot_find(op->inputs, op->n_inputs, slot); }
const pe_slot *pe_op_output(const pe_op *op, const char *slot) { return slot_find(op->outputs, op->n_outputs, slot); }
const char *pe_op_input1(const pe_op *op, const char *slot) {
    const pe_slot *s = pe_op_input(op, slot);
    return s && s->n_args ? s->args[0] : NULL;
}
const char *pe_op_output1(const pe_op *op, const char *slot) {
    const pe_slot *s = pe_op_output(op, slot);
    return s && s->n_args ? s->args[0] : NULL;
}

const pe_attr *pe_op_attr(const pe_op *op, const char *name) {
    for (int i = 0; i < op->n_attrs; i++)
        if (!strcmp(op->attrs[i].name, name)) return &op->attrs[i];
    return NULL;
}

/* Returns a cleared attr slot named `name` (replacing an existing one). */
static pe_attr *attr_slot(pe_op *op, const char *name) {
    for (int i = 0; i < op->n_attrs; i++)
        if (!strcmp(op->attrs[i].name, name)) {
            attr_free(&op->attrs[i]);
            op->attrs[i].name = strdup(name);
            return op->attrs[i].name ? &op->attrs[i] : NULL;
        }
    pe_attr *na = realloc(op->attrs, sizeof *na * (size_t)(op->n_attrs + 1));
    if (!na) return NULL;
    op->attrs = na;
    pe_attr *a = &na[op->n_attrs];
    memset(a, 0, sizeof *a);
    a->name = strdup(name);
    if (!a->name) return NULL;
    op->n_attrs++;
    return a;
}

static pe_status set_scalar(pe_op *op, const char *name, pe_attr_type t, int64_t i, double f) {
    pe_attr *a = attr_slot(op, name);
    if (!a) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    a->type = t;
    a->i = i;
    a->f = f;
    return PE_OK;
}

pe_status pe_op_set_int(pe_op *op, const char *name, int64_t v) { return set_scalar(op, name, PE_ATTR_INT, v, 0); }
pe_status pe_op_set_long(pe_op *op, const char *name, int64_t v) { return set_scalar(op, name, PE_ATTR_LONG, v, 0); }
pe_status pe_op_set_float(pe_op *op, const char *name, double v) { return set_scalar(op, name, PE_ATTR_FLOAT, 0, v); }
pe_status pe_op_set_bool(pe_op *op, const char *name, bool v) { return set_scalar(op, name, PE_ATTR_BOOL, v, 0); }
pe_status pe_op_set_block(pe_op *op, const char *name, int idx) { return set_scalar(op, name, PE_ATTR_BLOCK, idx, 0); }

pe_status pe_op_set_string(pe_op *op, const char *name, const char *v) {
    pe_attr *a = attr_slot(op, name);
    if (!a) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    a->type = PE_ATTR_STRING;
    a->s = strdup(v ? v : "");
    return a->s ? PE_OK : pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
}

static pe_status set_int_list(pe_op *op, const char *name, pe_attr_type t, const int64_t *v, int n) {
    pe_attr *a = attr_slot(op, name);
    if (!a) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    a->type = t;
    a->n = n;
    a->ints = malloc(sizeof *a->ints * (size_t)(n + 1));
    if (!a->ints) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    for (int i = 0; i < n; i++) a->ints[i] = t == PE_ATTR_BOOLS ? v[i] != 0 : v[i];
    return PE_OK;
}

pe_status pe_op_set_ints(pe_op *op, const char *name, const int64_t *v, int n) { return set_int_list(op, name, PE_ATTR_INTS, v, n); }
pe_status pe_op_set_longs(pe_op *op, const char *name, const int64_t *v, int n) { return set_int_list(op, name, PE_ATTR_LONGS, v, n); }
pe_status pe_op_set_bools(pe_op *op, const char *name, const int64_t *v, int n) { return set_int_list(op, name, PE_ATTR_BOOLS, v, n); }

pe_status pe_op_set_floats(pe_op *op, const char *name, const double *v, int n) {
    pe_attr *a = attr_slot(op, name);
    if (!a) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    a->type = PE_ATTR_FLOATS;
    a->n = n;
    a->floats = malloc(sizeof *a->floats * (size_t)(n + 1));
    if (!a->floats) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    for (int i = 0; i < n; i++) a->floats[i] = v[i];
    return PE_OK;
}

pe_status pe_op_set_strings(pe_op *op, const char *name, const char *const *v, int n) {
    pe_attr *a = attr_slot(op, name);
    if (!a) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    a->type = PE_ATTR_STRINGS;
    a->strings = calloc((size_t)n + 1, sizeof *a->strings);
    if (!a->strings) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    a->n = n;
    for (int i = 0; i < n; i++) {
        a->strings[i] = strdup(v[i]);
        if (!a->strings[i]) return pe_error(PE_ERR_NOMEM, "out of memory setting attr '%s'", name);
    }
    return PE_OK;
}

pe_status pe_op_set_attr(pe_op *op, const pe_attr *src) {
    switch (src->type) {
    case PE_ATTR_INT: case PE_ATTR_LONG: case PE_ATTR_BOOL: case PE_ATTR_BLOCK: case PE_ATTR_FLOAT:
        return set_scalar(op, src->name, src->type, src->i, src->f);
    case PE_ATTR_STRING: return pe_op_set_string(op, src->name, src->s);
    case PE_ATTR_INTS: case PE_ATTR_LONGS: case PE_ATTR_BOOLS:
        return set_int_list(op, src->name, src->type, src->ints, src->n);
    case PE_ATTR_FLOATS: return pe_op_set_floats(op, src->name, src->floats, src->n);
    case PE_ATTR_STRINGS: return pe_op_set_strings(op, src->name, (const char *const *)src->strings, src->n);
    default: return pe_error(PE_ERR_INVALID, "attr '%s' has invalid type %d", src->name, (int)src->type);
    }
}

pe_program *pe_program_clone(const pe_program *p) {
    pe_program *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->random_seed = p->random_seed;
    c->version = p->version;
    for (int bi = 0; bi < p->n_blocks; bi++) {
        const pe_block *b = &p->blocks[bi];
        pe_block *nb = pe_program_add_block(c, b->parent_idx);
        if (!nb) goto fail;
        for (int i = 0; i < b->n_vars; i++) {
            const pe_var *v = &b->vars[i];
            pe_var *nv = pe_block_add_var(nb, v->name, v->dtype, v->ndim, v->dims);
            if (!nv) goto fail;
            nv->persistable = v->persistable;
            nv->is_parameter = v->is_parameter;
            nv->stop_gradient = v->stop_gradient;
            nv->channels_last = v->channels_last;
        }
        for (int i = 0; i < b->n_ops; i++) {
            const pe_op *op = &b->ops[i];
            pe_op *no = pe_block_add_op(nb, op->type);
            if (!no) goto fail;
            for (int s = 0; s < op->n_inputs; s++) {
                if (slot_add(&no->inputs, &no->n_inputs, op->inputs[s].name, NULL)) goto fail;
                for (int k = 0; k < op->inputs[s].n_args; k++)
                    if (pe_op_add_input(no, op->inputs[s].name, op->inputs[s].args[k])) goto fail;
            }
            for (int s = 0; s < op->n_outputs; s++) {
                if (slot_add(&no->outputs, &no->n_outputs, op->outputs[s].name, NULL)) goto fail;
                for (int k = 0; k < op->outputs[s].n_args; k++)
                    if (pe_op_add_output(no, op->outputs[s].name, op->outputs[s].args[k])) goto fail;
            }
            for (int a = 0; a < op->n_attrs; a++)
                if (pe_op_set_attr(no, &op->attrs[a])) goto fail;
        }
    }
    if ((p->n_feed_names || p->n_fetch_names) &&
        pe_program_set_io(c, (const char *const *)p->feed_names, p->n_feed_names,
                          (const char *const *)p->fetch_names, p->n_fetch_names) != PE_OK)
        goto fail;
    return c;
fail:
    pe_program_free(c);
    return NULL;
}
