/* graph/check.c — the semantic check every program load runs
 * (pe_program_check): a program that passes can be handed to the executor
 * and the passes without further validation of its structure.
 *
 * What it checks, in order, stopping at the first problem:
 *   blocks  idx equals the position; parent_idx is -1 for block 0 and an
 *           earlier block otherwise;
 *   vars    a name, unique in its block; a valid dtype; 0..8 dims, each -1
 *           (unknown) or >= 0;
 *   ops     a type in the op registry (ops/ops.def); every input and output
 *           slot known to that type, not repeated, with the registry's
 *           arity (ONE: exactly 1 arg, OPTIONAL: 0..1, MANY: >= 1, ANY:
 *           >= 0; a missing ONE/MANY slot is an error); every arg a var
 *           declared in the op's block or an ancestor (PE_EMPTY_VAR stands
 *           for "no var" in slots that may be empty); attrs named in the
 *           registry (the op's own or the common ones like op_role), not
 *           repeated, of the registry's type (INT/LONG and INTS/LONGS are
 *           interchangeable), required attrs present, block attrs naming
 *           another existing block; no output naming one of the op's
 *           inputs unless ops.def declares that in-place pair (arg k of In
 *           is arg k of Out), and no var named by two outputs;
 *   order   no op reads a non-persistable var that only later ops write: such
 *           a backward data edge is a cycle (or a use before definition).
 *           Vars no op writes are feeds; persistables carry state across runs.
 *
 * How: one open-addressing hash map per block from var name to var, and one
 * per block from var name to the first op writing it, so the check is linear
 * in the size of the program. The registry belongs to the ops stage, a later
 * one: its facts come through the lookup table that stage installs
 * (graph/op_lookup.h). Messages name the source, block, op index, op
 * type, slot and var: "mlp.pe: block 0 op 3 (mul): input X 'fc_0.tmp' is not
 * a declared variable".
 */
#include "graph/op_lookup.h"
#include "pe/program.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- name -> int map; keys are borrowed from the program --------------- */

typedef struct name_map {
    const char **keys;
    int *vals;
    size_t mask;
} name_map;

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool map_init(name_map *m, int n) {
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap <<= 1;
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = calloc(cap, sizeof *m->vals);
    m->mask = cap - 1;
    return m->keys && m->vals;
}

static void map_free(name_map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* Value slot of key, inserted (with value `val`) when absent; *found tells
 * which. The map never fills: it is sized for at most half its capacity. */
static int *map_put(name_map *m, const char *key, int val, bool *found) {
    size_t i = (size_t)hash_name(key) & m->mask;
    while (m->keys[i]) {
        if (!strcmp(m->keys[i], key)) {
            *found = true;
            return &m->vals[i];
        }
        i = (i + 1) & m->mask;
    }
    m->keys[i] = key;
    m->vals[i] = val;
    *found = false;
    return &m->vals[i];
}

static int map_get(const name_map *m, const char *key) {
    size_t i = (size_t)hash_name(key) & m->mask;
    while (m->keys[i]) {
        if (!strcmp(m->keys[i], key)) return m->vals[i];
        i = (i + 1) & m->mask;
    }
    return -1;
}

/* ---- the op registry, as the ops stage installed it -------------------- */

/* Set once by a constructor of the ops stage (ops/op_describe.c), before
 * main; read-only afterwards. */
static const pe_op_lookup *g_op_lookup;

void pe_graph_set_op_lookup(const pe_op_lookup *l) { g_op_lookup = l; }

const pe_op_lookup *pe_graph_op_lookup(void) { return g_op_lookup; }

/* ---- the checker ------------------------------------------------------- */

typedef struct checker {
    const pe_program *p;
    const char *what;
    name_map *vars; /* per block: var name -> index in block->vars */
    const pe_op_lookup *ops; /* the op registry, installed by the ops stage */
} checker;

#define OP_FMT "%s: block %d op %d (%s): "
#define OP_ARGS(ck, bi, oi, op) (ck)->what, (bi), (oi), (op)->type

/* A var visible from block bi (its own or an ancestor's), or NULL. */
static const pe_var *find_var(const checker *ck, int bi, const char *name) {
    while (bi >= 0) {
        int i = map_get(&ck->vars[bi], name);
        if (i >= 0) return &ck->p->blocks[bi].vars[i];
        bi = ck->p->blocks[bi].parent_idx; /* checked: < bi */
    }
    return NULL;
}

static pe_status check_blocks(const checker *ck) {
    const pe_program *p = ck->p;
    if (p->n_blocks < 1 || !p->blocks) return pe_error(PE_ERR_INVALID, "%s: the program has no blocks", ck->what);
    for (int bi = 0; bi < p->n_blocks; bi++) {
        const pe_block *b = &p->blocks[bi];
        if (b->idx != bi)
            return pe_error(PE_ERR_INVALID, "%s: block %d says its idx is %d (it must equal its position)", ck->what, bi,
                            b->idx);
        if (bi == 0 && b->parent_idx != -1)
            return pe_error(PE_ERR_INVALID, "%s: block 0 has parent_idx %d (the global block has none: -1)", ck->what,
                            b->parent_idx);
        if (bi > 0 && (b->parent_idx < 0 || b->parent_idx >= bi))
            return pe_error(PE_ERR_INVALID, "%s: block %d has parent_idx %d (it must be an earlier block, 0..%d)",
                            ck->what, bi, b->parent_idx, bi - 1);
        if (b->n_vars < 0 || b->n_ops < 0 || (b->n_vars && !b->vars) || (b->n_ops && !b->ops))
            return pe_error(PE_ERR_INVALID, "%s: block %d has a malformed var or op list", ck->what, bi);
    }
    return PE_OK;
}

static pe_status check_vars(const checker *ck, int bi) {
    const pe_block *b = &ck->p->blocks[bi];
    name_map *m = &ck->vars[bi];
    if (!map_init(m, b->n_vars)) return pe_error(PE_ERR_NOMEM, "%s: out of memory checking block %d", ck->what, bi);
    for (int i = 0; i < b->n_vars; i++) {
        const pe_var *v = &b->vars[i];
        if (!v->name || !*v->name)
            return pe_error(PE_ERR_INVALID, "%s: block %d var %d has an empty name", ck->what, bi, i);
        /* a control character in a name would reach terminals and logs raw (an escape sequence, a line break) */
        for (const unsigned char *c = (const unsigned char *)v->name; *c; c++)
            if (*c < 0x20 || *c == 0x7f)
                return pe_error(PE_ERR_INVALID, "%s: block %d var %d: its name has control character 0x%02x at byte %d",
                                ck->what, bi, i, *c, (int)(c - (const unsigned char *)v->name));
        bool found;
        int *first = map_put(m, v->name, i, &found);
        if (found)
            return pe_error(PE_ERR_INVALID, "%s: block %d: var '%s' is declared twice (vars %d and %d)", ck->what, bi,
                            v->name, *first, i);
        if (!pe_dtype_valid((int)v->dtype))
            return pe_error(PE_ERR_INVALID, "%s: block %d: var '%s' has invalid dtype %d (valid: 0..%d)", ck->what, bi,
                            v->name, (int)v->dtype, PE_DTYPE_COUNT - 1);
        if (v->ndim < 0 || v->ndim > 8)
            return pe_error(PE_ERR_INVALID, "%s: block %d: var '%s' has %d dims (0..8 allowed)", ck->what, bi,
                            v->name, v->ndim);
        for (int d = 0; d < v->ndim; d++)
            if (v->dims[d] < -1)
                return pe_error(PE_ERR_INVALID,
                                "%s: block %d: var '%s' has dim %d = %lld (a dim is -1 for unknown, or >= 0)",
                                ck->what, bi, v->name, d, (long long)v->dims[d]);
    }
    return PE_OK;
}

/* Slot k of op type ot (an input or output slot): its spec. */
static pe_op_slot_desc spec_slot(const pe_op_lookup *l, int ot, bool is_input, int k) {
    pe_op_slot_desc d = {"", PE_SLOT_ANY};
    if (is_input) l->input(ot, k, &d);
    else l->output(ot, k, &d);
    return d;
}

/* "X, Y, Bias" — the slot names of a spec, for messages. */
static void slot_list(char *buf, size_t n, const pe_op_lookup *l, int ot, bool is_input, int n_spec) {
    buf[0] = '\0';
    if (n_spec == 0) snprintf(buf, n, "none");
    for (int i = 0; i < n_spec; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", i ? ", " : "", spec_slot(l, ot, is_input, i).name);
    }
}

static const char *arity_text(int arity) {
    switch (arity) {
    case PE_SLOT_ONE: return "exactly one var";
    case PE_SLOT_OPTIONAL: return "at most one var";
    case PE_SLOT_MANY: return "one or more vars";
    default: return "any number of vars";
    }
}

static pe_status check_slots(const checker *ck, int bi, int oi, const pe_op *op, int ot, const pe_op_desc *info,
                             bool is_input) {
    const pe_op_lookup *l = ck->ops;
    const pe_slot *slots = is_input ? op->inputs : op->outputs;
    int n = is_input ? op->n_inputs : op->n_outputs;
    int n_spec = is_input ? info->n_inputs : info->n_outputs;
    const char *dir = is_input ? "input" : "output";
    if (n < 0 || (n && !slots)) return pe_error(PE_ERR_INVALID, OP_FMT "malformed %s list", OP_ARGS(ck, bi, oi, op), dir);
    for (int s = 0; s < n; s++) {
        const pe_slot *sl = &slots[s];
        if (!sl->name) return pe_error(PE_ERR_INVALID, OP_FMT "%s slot %d has no name", OP_ARGS(ck, bi, oi, op), dir, s);
        int k = 0;
        while (k < n_spec && strcmp(spec_slot(l, ot, is_input, k).name, sl->name)) k++;
        if (k == n_spec) {
            char names[256];
            slot_list(names, sizeof names, l, ot, is_input, n_spec);
            return pe_error(PE_ERR_INVALID, OP_FMT "%s has no %s slot '%s' (its %ss: %s)", OP_ARGS(ck, bi, oi, op),
                            op->type, dir, sl->name, dir, names);
        }
        for (int t = 0; t < s; t++)
            if (!strcmp(slots[t].name, sl->name))
                return pe_error(PE_ERR_INVALID, OP_FMT "%s slot %s appears twice", OP_ARGS(ck, bi, oi, op), dir,
                                sl->name);
        int arity = spec_slot(l, ot, is_input, k).arity;
        bool ok = sl->n_args >= 0 && (sl->n_args == 0 || sl->args);
        if (ok && arity == PE_SLOT_ONE) ok = sl->n_args == 1;
        if (ok && arity == PE_SLOT_OPTIONAL) ok = sl->n_args <= 1;
        if (ok && arity == PE_SLOT_MANY) ok = sl->n_args >= 1;
        if (!ok)
            return pe_error(PE_ERR_INVALID, OP_FMT "%s %s takes %s, got %d", OP_ARGS(ck, bi, oi, op), dir, sl->name,
                            arity_text(arity), sl->n_args);
        for (int a = 0; a < sl->n_args; a++) {
            const char *arg = sl->args[a];
            if (!arg || !*arg)
                return pe_error(PE_ERR_INVALID, OP_FMT "%s %s arg %d is empty", OP_ARGS(ck, bi, oi, op), dir,
                                sl->name, a);
            if (!strcmp(arg, PE_EMPTY_VAR)) {
                if (arity == PE_SLOT_ONE)
                    return pe_error(PE_ERR_INVALID,
                                    OP_FMT "%s %s is required, but its arg is " PE_EMPTY_VAR " (no var)",
                                    OP_ARGS(ck, bi, oi, op), dir, sl->name);
                continue;
            }
            if (!find_var(ck, bi, arg))
                return pe_error(PE_ERR_INVALID, OP_FMT "%s %s '%s' is not a declared variable",
                                OP_ARGS(ck, bi, oi, op), dir, sl->name, arg);
        }
    }
    for (int k = 0; k < n_spec; k++) {
        pe_op_slot_desc sk = spec_slot(l, ot, is_input, k);
        if (sk.arity != PE_SLOT_ONE && sk.arity != PE_SLOT_MANY) continue;
        int s = 0;
        while (s < n && strcmp(slots[s].name, sk.name)) s++;
        if (s == n)
            return pe_error(PE_ERR_INVALID, OP_FMT "required %s %s is missing", OP_ARGS(ck, bi, oi, op), dir,
                            sk.name);
    }
    return PE_OK;
}

static bool attr_type_fits(pe_attr_type want, pe_attr_type got) {
    if (want == got) return true;
    bool want_int = want == PE_ATTR_INT || want == PE_ATTR_LONG, got_int = got == PE_ATTR_INT || got == PE_ATTR_LONG;
    bool want_ints = want == PE_ATTR_INTS || want == PE_ATTR_LONGS,
         got_ints = got == PE_ATTR_INTS || got == PE_ATTR_LONGS;
    return (want_int && got_int) || (want_ints && got_ints);
}

static pe_status check_attrs(const checker *ck, int bi, int oi, const pe_op *op, int ot, const pe_op_desc *info) {
    const pe_op_lookup *l = ck->ops;
    if (op->n_attrs < 0 || (op->n_attrs && !op->attrs))
        return pe_error(PE_ERR_INVALID, OP_FMT "malformed attr list", OP_ARGS(ck, bi, oi, op));
    for (int k = 0; k < op->n_attrs; k++) {
        const pe_attr *a = &op->attrs[k];
        if (!a->name || !*a->name)
            return pe_error(PE_ERR_INVALID, OP_FMT "attr %d has no name", OP_ARGS(ck, bi, oi, op), k);
        if ((int)a->type < 0 || a->type >= PE_ATTR_TYPE_COUNT)
            return pe_error(PE_ERR_INVALID, OP_FMT "attr '%s' has invalid type %d", OP_ARGS(ck, bi, oi, op), a->name,
                            (int)a->type);
        /* Known names are distinct, so an op with many attrs fails the
         * "known" test below long before this loop gets expensive. */
        for (int j = 0; j < k; j++)
            if (!strcmp(op->attrs[j].name, a->name))
                return pe_error(PE_ERR_INVALID, OP_FMT "attr '%s' appears twice", OP_ARGS(ck, bi, oi, op), a->name);
        bool list = a->type == PE_ATTR_INTS || a->type == PE_ATTR_LONGS || a->type == PE_ATTR_BOOLS ||
                    a->type == PE_ATTR_FLOATS || a->type == PE_ATTR_STRINGS;
        if (list) {
            const void *arr = a->type == PE_ATTR_FLOATS ? (const void *)a->floats
                              : a->type == PE_ATTR_STRINGS ? (const void *)a->strings
                                                           : (const void *)a->ints;
            bool ok = a->n >= 0 && (a->n == 0 || arr);
            for (int e = 0; ok && a->type == PE_ATTR_STRINGS && e < a->n; e++) ok = a->strings[e] != NULL;
            if (!ok)
                return pe_error(PE_ERR_INVALID, OP_FMT "attr '%s' (%s) has a malformed value list",
                                OP_ARGS(ck, bi, oi, op), a->name, pe_attr_type_name(a->type));
        }
        if (a->type == PE_ATTR_BLOCK) {
            if (a->i < 0 || a->i >= ck->p->n_blocks)
                return pe_error(PE_ERR_INVALID, OP_FMT "attr '%s' refers to block %lld, but the program has %d block%s",
                                OP_ARGS(ck, bi, oi, op), a->name, (long long)a->i, ck->p->n_blocks,
                                ck->p->n_blocks == 1 ? "" : "s");
            if (a->i == bi)
                return pe_error(PE_ERR_INVALID, OP_FMT "attr '%s' refers to the op's own block %d",
                                OP_ARGS(ck, bi, oi, op), a->name, bi);
        }
        pe_op_attr_desc ai;
        if (!l->find_attr(ot, a->name, &ai) && !l->common_attr(a->name, &ai)) {
            char names[512] = "";
            for (int j = 0; j < info->n_attrs; j++) {
                pe_op_attr_desc aj = {.name = ""};
                l->attr(ot, j, &aj);
                size_t len = strlen(names);
                snprintf(names + len, sizeof names - len, "%s%s", j ? ", " : "", aj.name);
            }
            return pe_error(PE_ERR_INVALID, OP_FMT "'%s' is not an attr of %s (its attrs: %s; and the common op_role, "
                            "op_role_var, op_namescope, op_callstack, op_device, with_quant_attr)",
                            OP_ARGS(ck, bi, oi, op), a->name, op->type, info->n_attrs ? names : "none");
        }
        if (!attr_type_fits(ai.type, a->type))
            return pe_error(PE_ERR_INVALID, OP_FMT "attr '%s' is %s, but %s expects %s", OP_ARGS(ck, bi, oi, op),
                            a->name, pe_attr_type_name(a->type), op->type, pe_attr_type_name(ai.type));
    }
    for (int j = 0; j < info->n_attrs; j++) {
        pe_op_attr_desc aj;
        if (l->attr(ot, j, &aj) && aj.required && !pe_op_attr(op, aj.name))
            return pe_error(PE_ERR_INVALID, OP_FMT "required attr '%s' (%s) is missing", OP_ARGS(ck, bi, oi, op),
                            aj.name, pe_attr_type_name(aj.type));
    }
    return PE_OK;
}

/* Spec index of slot `name` of op type ot (check_slots has made sure it is
 * one). */
static int spec_index(const pe_op_lookup *l, int ot, bool is_input, int n_spec, const char *name) {
    int k = 0;
    while (k < n_spec && strcmp(spec_slot(l, ot, is_input, k).name, name)) k++;
    return k;
}

/* "Param>ParamOut, Grad>..." — the in-place pairs of op type ot, for messages. */
static void inplace_list(char *buf, size_t n, const pe_op_lookup *l, int ot, const pe_op_desc *info) {
    buf[0] = '\0';
    for (int i = 0; i < info->n_inputs; i++)
        for (int o = 0; o < info->n_outputs; o++)
            if (l->inplace(ot, i, o)) {
                size_t len = strlen(buf);
                snprintf(buf + len, n - len, "%s%s>%s", len ? ", " : "", spec_slot(l, ot, true, i).name,
                         spec_slot(l, ot, false, o).name);
            }
    if (!buf[0]) snprintf(buf, n, "none");
}

/* Aliasing: an output arg naming one of the op's inputs is accepted only
 * where ops.def declares that in-place pair for that position (In's k-th arg
 * is Out's k-th arg) — the pairs whose kernel reads each value before it
 * overwrites it. Any other alias, like softmax_with_cross_entropy's Softmax
 * = Logits, lets the kernel read what it has already written: the program
 * would run and give a wrong result. A var named by two outputs (two slots,
 * or twice in one slot) has no defined value: refused too. Runs after
 * check_slots, so slots are known and args declared. */
static pe_status check_alias(checker *ck, int bi, int oi, const pe_op *op, int ot, const pe_op_desc *info) {
    int n_in = 0, n_out = 0;
    for (int s = 0; s < op->n_inputs; s++) n_in += op->inputs[s].n_args;
    for (int s = 0; s < op->n_outputs; s++) n_out += op->outputs[s].n_args;
    if (n_out == 0) return PE_OK;
    /* Small ops (nearly all) compare pairwise; wide ones (merged optimizers,
     * sum over many grads) count and find through maps, so the check stays
     * linear in the op's size. */
    bool wide = n_in + n_out > 32;
    name_map ins = {0}, outs = {0};
    if (wide && (!map_init(&ins, n_in) || !map_init(&outs, n_out))) {
        map_free(&ins);
        map_free(&outs);
        return pe_error(PE_ERR_NOMEM, "%s: out of memory checking block %d op %d", ck->what, bi, oi);
    }
    for (int s = 0; wide && s < op->n_inputs; s++) /* ins: name -> occurrences among the inputs */
        for (int a = 0; a < op->inputs[s].n_args; a++) {
            bool found;
            int *n = map_put(&ins, op->inputs[s].args[a], 1, &found);
            if (found) ++*n;
        }
    pe_status st = PE_OK;
    for (int s = 0; s < op->n_outputs && st == PE_OK; s++) {
        const pe_slot *os = &op->outputs[s];
        int ko = spec_index(ck->ops, ot, false, info->n_outputs, os->name);
        for (int a = 0; a < os->n_args && st == PE_OK; a++) {
            const char *arg = os->args[a];
            if (!strcmp(arg, PE_EMPTY_VAR)) continue;
            /* written twice? (outs: name -> (slot, arg) of its first output) */
            int ps = -1, pa = -1;
            if (wide) {
                bool found;
                int *first = map_put(&outs, arg, s, &found);
                if (found) ps = *first;
                for (int b = 0; found && b < op->outputs[ps].n_args && pa < 0; b++)
                    if (!strcmp(op->outputs[ps].args[b], arg)) pa = b;
            } else {
                for (int t = 0; t <= s && ps < 0; t++)
                    for (int b = 0; b < (t < s ? op->outputs[t].n_args : a); b++)
                        if (!strcmp(op->outputs[t].args[b], arg)) {
                            ps = t, pa = b;
                            break;
                        }
            }
            if (ps >= 0) {
                st = ps == s ? pe_error(PE_ERR_INVALID, OP_FMT "output %s names '%s' twice (args %d and %d): an op "
                                        "writes a var once", OP_ARGS(ck, bi, oi, op), os->name, arg, pa, a)
                             : pe_error(PE_ERR_INVALID, OP_FMT "outputs %s and %s both name '%s': an op writes a "
                                        "var once", OP_ARGS(ck, bi, oi, op), op->outputs[ps].name, os->name, arg);
                break;
            }
            /* Also an input? Then each of its occurrences among the inputs
             * must be a declared partner: arg a of an input slot paired
             * with this output slot. */
            int count = 0, partners = 0;
            if (wide) count = map_get(&ins, arg) > 0 ? map_get(&ins, arg) : 0;
            for (int t = 0; !wide && t < op->n_inputs; t++)
                for (int b = 0; b < op->inputs[t].n_args; b++) count += !strcmp(op->inputs[t].args[b], arg);
            if (count == 0) continue;
            for (int t = 0; t < op->n_inputs; t++)
                if (a < op->inputs[t].n_args && !strcmp(op->inputs[t].args[a], arg) &&
                    ck->ops->inplace(ot, spec_index(ck->ops, ot, true, info->n_inputs, op->inputs[t].name), ko))
                    partners++;
            if (count == partners) continue;
            /* the first occurrence that is not a partner, for the message */
            for (int t = 0; t < op->n_inputs && st == PE_OK; t++) {
                const pe_slot *is = &op->inputs[t];
                int ki = spec_index(ck->ops, ot, true, info->n_inputs, is->name);
                for (int b = 0; b < is->n_args && st == PE_OK; b++) {
                    if (strcmp(is->args[b], arg) || (b == a && ck->ops->inplace(ot, ki, ko))) continue;
                    char pairs[256];
                    inplace_list(pairs, sizeof pairs, ck->ops, ot, info);
                    if (ck->ops->inplace(ot, ki, ko))
                        st = pe_error(PE_ERR_INVALID, OP_FMT "output %s arg %d '%s' is input %s arg %d: %s>%s is in "
                                      "place only arg by arg (output %s arg k may be input %s arg k)",
                                      OP_ARGS(ck, bi, oi, op), os->name, a, arg, is->name, b, is->name, os->name,
                                      os->name, is->name);
                    else
                        st = pe_error(PE_ERR_INVALID, OP_FMT "output %s '%s' is also its input %s, but %s does "
                                      "not declare %s>%s in place (its in-place pairs: %s), so its kernel may read "
                                      "what it has already overwritten: write the output to a new var",
                                      OP_ARGS(ck, bi, oi, op), os->name, arg, is->name, op->type, is->name,
                                      os->name, pairs);
                }
            }
        }
    }
    map_free(&ins);
    map_free(&outs);
    return st;
}

static pe_status check_op(checker *ck, int bi, int oi) {
    const pe_op *op = &ck->p->blocks[bi].ops[oi];
    if (!op->type || !*op->type)
        return pe_error(PE_ERR_INVALID, "%s: block %d op %d has no type", ck->what, bi, oi);
    int ot = ck->ops->find(op->type);
    pe_op_desc info;
    if (ot < 0 || !ck->ops->get(ot, &info))
        return pe_error(PE_ERR_INVALID, OP_FMT "unknown op type '%s' (not in ops/ops.def)", OP_ARGS(ck, bi, oi, op),
                        op->type);
    PE_CHECK(check_slots(ck, bi, oi, op, ot, &info, true));
    PE_CHECK(check_slots(ck, bi, oi, op, ot, &info, false));
    PE_CHECK(check_alias(ck, bi, oi, op, ot, &info));
    return check_attrs(ck, bi, oi, op, ot, &info);
}

/* Backward data edges: op i reading a non-persistable var whose first
 * writer in this block comes after i. Runs after check_op, so every op is
 * well-formed and every arg declared. */
static pe_status check_order(const checker *ck, int bi) {
    const pe_block *b = &ck->p->blocks[bi];
    int n_out = 0;
    for (int i = 0; i < b->n_ops; i++)
        for (int s = 0; s < b->ops[i].n_outputs; s++) n_out += b->ops[i].outputs[s].n_args;
    name_map first;
    if (!map_init(&first, n_out)) {
        map_free(&first);
        return pe_error(PE_ERR_NOMEM, "%s: out of memory checking block %d", ck->what, bi);
    }
    for (int i = 0; i < b->n_ops; i++)
        for (int s = 0; s < b->ops[i].n_outputs; s++)
            for (int a = 0; a < b->ops[i].outputs[s].n_args; a++) {
                bool found;
                map_put(&first, b->ops[i].outputs[s].args[a], i, &found);
            }
    pe_status st = PE_OK;
    for (int i = 0; i < b->n_ops && st == PE_OK; i++) {
        const pe_op *op = &b->ops[i];
        for (int s = 0; s < op->n_inputs && st == PE_OK; s++)
            for (int a = 0; a < op->inputs[s].n_args && st == PE_OK; a++) {
                const char *arg = op->inputs[s].args[a];
                if (!strcmp(arg, PE_EMPTY_VAR)) continue;
                int w = map_get(&first, arg);
                if (w <= i) continue; /* fed (-1), written before, or in place */
                const pe_var *v = find_var(ck, bi, arg);
                if (v && v->persistable) continue;
                st = pe_error(PE_ERR_INVALID,
                              OP_FMT "input %s '%s' is read before it is written: the first op writing it is op %d "
                              "(%s), a later one, so the graph has a cycle (a non-persistable var must be fed or "
                              "written by an earlier op)",
                              OP_ARGS(ck, bi, i, op), op->inputs[s].name, arg, w, b->ops[w].type);
            }
    }
    map_free(&first);
    return st;
}

pe_status pe_program_check(const pe_program *p, const char *what) {
    if (!what || !*what) what = "program";
    if (!p) return pe_error(PE_ERR_INVALID, "%s: the program is NULL", what);
    checker ck = {p, what, NULL, pe_graph_op_lookup()};
    if (!ck.ops)
        return pe_error(PE_ERR_INTERNAL, "%s: cannot check the program: no op registry is linked (the ops stage "
                        "installs it)", what);
    PE_CHECK(check_blocks(&ck));
    for (int k = 0; k < 2; k++) { /* an inference model's feed / fetch names: vars of block 0 */
        char *const *v = k ? p->fetch_names : p->feed_names;
        for (int i = 0; i < (k ? p->n_fetch_names : p->n_feed_names); i++)
            if (!pe_block_find_var(&p->blocks[0], v[i]))
                return pe_error(PE_ERR_INVALID, "%s: %s name '%s' (inference model %s list) is not a variable of "
                                "block 0", what, k ? "fetch" : "feed", v[i], k ? "fetch" : "feed");
    }
    ck.vars = calloc((size_t)p->n_blocks, sizeof *ck.vars);
    if (!ck.vars) return pe_error(PE_ERR_NOMEM, "%s: out of memory checking the program", what);
    pe_status st = PE_OK;
    for (int bi = 0; bi < p->n_blocks && st == PE_OK; bi++) st = check_vars(&ck, bi);
    for (int bi = 0; bi < p->n_blocks && st == PE_OK; bi++)
        for (int oi = 0; oi < p->blocks[bi].n_ops && st == PE_OK; oi++) st = check_op(&ck, bi, oi);
    for (int bi = 0; bi < p->n_blocks && st == PE_OK; bi++) st = check_order(&ck, bi);
    for (int bi = 0; bi < p->n_blocks; bi++) map_free(&ck.vars[bi]);
    free(ck.vars);
    return st;
}
