/* executor/eager.c — eager mode's entry points (pe/eager.h): one op of the
 * registry run on tensors, and the backward ops of one forward op.
 *
 * What: pe_eager_run fills an op context (ops/op.h) straight from the
 * caller's tensors and attrs — no program, no scope — and calls pe_op_run:
 * the static engine's infer -> allocate -> kernel, so eager results are the
 * static engine's bits. pe_eager_grad_ops runs the op's grad maker on a
 * one-op program through the grad makers' driver (ops/grad_ctx.h).
 *
 * How: the context's pointer arrays live in one allocation (ctx.storage,
 * freed by pe_op_ctx_release); the registry entry is looked up by index
 * (the caller keeps the index per op type), so a call does no string
 * lookups of the op type. The grad driver here answers needs() from the
 * caller's flags, names output gradients "v@GRAD" (always "reached": the
 * caller provides zeros for an output no gradient reached) and numbers the
 * contributions to each input as the autodiff pass does.
 *
 * Why here: running ops is the executor's stage; the grad makers are the
 * ops stage's, driven here as passes/backward.c drives them.
 */
#include "pe/eager.h"
#include "pe/device.h"
#include "ops/grad_ctx.h"
#include "ops/op.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one op -------------------------------------------------------------- */

/* What a call's slots resolve to: per caller slot i (the order the caller
 * gave), its registry slot and arg count. pe_eager_run fills one on the
 * stack per call; a prepared op keeps one (plus its own attr copies and
 * default arg names) for every run. */
struct pe_eager_prep {
    const pe_op_info *info;
    int n_ins, n_outs;                       /* caller slots */
    int in_reg[PE_MAX_SLOTS], out_reg[PE_MAX_SLOTS];
    int in_n[PE_MAX_SLOTS], out_n[PE_MAX_SLOTS];
    int n_in_args, n_out_args;               /* sum of in_n / out_n */
    const pe_attr *attrs[PE_MAX_ATTRS];      /* per info->attrs[i]: given or the default */
    /* prepared ops only (NULL for pe_eager_run's stack copy) */
    pe_program *own;                         /* one op holding the copies of the attrs */
    const char **names;                      /* "<slot>:<k>" per arg: inputs, then outputs */
};

/* Every given slot is one of the op's, at most once, with an arity it takes
 * (counted in args; whether an arity-one arg is present is checked per run). */
static pe_status check_slots(const pe_op_info *info, const pe_eager_args *a, int n, bool inputs, int *reg,
                             int *counts, int *total) {
    const char *kind = inputs ? "input" : "output";
    int n_slots = inputs ? info->n_inputs : info->n_outputs;
    const pe_slot_info *slots = inputs ? info->inputs : info->outputs;
    /* at most n_slots entries get past the unknown / twice checks: reg[] cannot overflow */
    int given[PE_MAX_SLOTS] = {0};
    bool seen[PE_MAX_SLOTS] = {false};
    *total = 0;
    for (int i = 0; i < n; i++) {
        if (!a[i].slot) return pe_error(PE_ERR_INVALID, "op %s: %s slot %d has no name", info->name, kind, i);
        if (a[i].n < 0 || a[i].n > 100000)
            return pe_error(PE_ERR_INVALID, "op %s: %s slot %s: %d args", info->name, kind, a[i].slot, a[i].n);
        int at = -1;
        for (int k = 0; k < n_slots; k++)
            if (!strcmp(slots[k].name, a[i].slot)) at = k;
        if (at < 0) return pe_error(PE_ERR_INVALID, "op %s has no %s slot '%s'", info->name, kind, a[i].slot);
        if (seen[at]) return pe_error(PE_ERR_INVALID, "op %s: %s slot %s is given twice", info->name, kind, a[i].slot);
        seen[at] = true;
        reg[i] = at;
        counts[i] = a[i].n;
        *total += a[i].n;
        for (int j = 0; a[i].t && j < a[i].n; j++) given[at] += a[i].t[j] != NULL;
        if (!a[i].t) given[at] = a[i].n; /* a layout (pe_eager_prepare): presence is checked per run */
    }
    for (int k = 0; k < n_slots; k++) {
        int cnt = 0;
        for (int i = 0; i < n; i++)
            if (reg[i] == k) cnt = a[i].n;
        int ar = slots[k].arity;
        if ((ar == PE_ARITY_ONE && (cnt != 1 || given[k] != 1)) || (ar == PE_ARITY_OPTIONAL && cnt > 1) ||
            (ar == PE_ARITY_MANY && cnt < 1))
            return pe_error(PE_ERR_INVALID, "op %s: %s %s takes %s, got %d", info->name, kind, slots[k].name,
                            ar == PE_ARITY_ONE ? "exactly one tensor"
                            : ar == PE_ARITY_OPTIONAL ? "at most one tensor"
                                                      : "one or more tensors",
                            given[k]);
    }
    return PE_OK;
}

static bool is_inplace_pair(const pe_op_info *info, int in_reg, int out_reg) {
    for (int p = 0; p < info->n_inplace; p++)
        if (info->inplace[p][0] == in_reg && info->inplace[p][1] == out_reg) return true;
    return false;
}

/* Every given attr is the op's own or a common one, with the registry's
 * type; p->attrs gets the given value or the default of each of the op's. */
static pe_status resolve_attrs(pe_eager_prep *p, const pe_attr *attrs, int n) {
    const pe_op_info *info = p->info;
    for (int i = 0; i < n; i++) {
        if (!attrs[i].name) return pe_error(PE_ERR_INVALID, "op %s: attr %d has no name", info->name, i);
        const pe_attr_info *ai = pe_op_info_attr(info, attrs[i].name);
        if (!ai) ai = pe_common_attr(attrs[i].name);
        if (!ai) return pe_error(PE_ERR_INVALID, "op %s has no attr '%s'", info->name, attrs[i].name);
        if (ai->type != attrs[i].type)
            return pe_error(PE_ERR_INVALID, "op %s: attr '%s' is %s, the registry's type is %s", info->name,
                            attrs[i].name, pe_attr_type_name(attrs[i].type), pe_attr_type_name(ai->type));
    }
    for (int i = 0; i < info->n_attrs; i++) {
        const pe_attr *a = NULL;
        for (int k = 0; k < n; k++)
            if (!strcmp(attrs[k].name, info->attrs[i].name)) { a = &attrs[k]; break; }
        if (!a && info->attrs[i].required)
            return pe_error(PE_ERR_INVALID, "op %s: required attr '%s' is missing", info->name, info->attrs[i].name);
        p->attrs[i] = a ? a : &info->attrs[i].def;
    }
    return PE_OK;
}

static pe_status prep_init(pe_eager_prep *p, int op, const pe_eager_args *ins, int n_ins, const pe_eager_args *outs,
                           int n_outs, const pe_attr *attrs, int n_attrs) {
    memset(p, 0, sizeof *p);
    const pe_op_info *info = op >= 0 && op < pe_op_info_count() ? pe_op_info_get(op) : NULL;
    if (!info) return pe_error(PE_ERR_NOT_FOUND, "eager: no op type with index %d in the registry", op);
    p->info = info;
    if (n_ins < 0 || n_outs < 0 || n_attrs < 0 || (n_ins && !ins) || (n_outs && !outs) || (n_attrs && !attrs))
        return pe_error(PE_ERR_INVALID, "op %s: bad argument counts", info->name);
    PE_CHECK(check_slots(info, ins, n_ins, true, p->in_reg, p->in_n, &p->n_in_args));
    PE_CHECK(check_slots(info, outs, n_outs, false, p->out_reg, p->out_n, &p->n_out_args));
    p->n_ins = n_ins;
    p->n_outs = n_outs;
    return resolve_attrs(p, attrs, n_attrs);
}

/* "<slot>:<k>" into b (48 bytes: the slot cut at 36 chars), the default name
 * of an arg the caller did not name; written by hand, as pe_dims_str is:
 * snprintf was most of a call's own cost for an op of many args. */
static void arg_name(char *b, const char *slot, int k) {
    size_t n = 0;
    while (n < 36 && slot[n]) n++;
    memcpy(b, slot, n);
    b[n++] = ':';
    char d[12];
    int nd = 0;
    unsigned v = (unsigned)k;
    do d[nd++] = (char)('0' + v % 10); while ((v /= 10) && nd < (int)sizeof d);
    while (nd) b[n++] = d[--nd];
    b[n] = 0;
}

/* One arg of a call, for the sorted alias scan. */
typedef struct {
    const pe_tensor *t;
    int out;   /* 0: input, 1: output */
    int reg;   /* registry slot */
    int k;     /* arg index in its slot */
} alias_arg;

static int alias_arg_cmp(const void *a, const void *b) {
    const alias_arg *x = a, *y = b;
    if (x->t != y->t) return (uintptr_t)x->t < (uintptr_t)y->t ? -1 : 1;
    return y->out - x->out; /* the output (at most one if fine) first in its group */
}

/* Whether the call may alias wrongly, in O(N log N) over its N args: sorted by
 * tensor, a group of equal tensors is fine when it holds no output, or one
 * output and only inputs that are its in-place pair at the same arg index.
 * 1: maybe (the exact scan names the pair), 0: no, -1: out of memory. */
static int may_alias(const pe_eager_prep *p, pe_tensor *const *const *in, pe_tensor *const *const *out) {
    const int total = p->n_in_args + p->n_out_args;
    alias_arg *a = malloc((size_t)total * sizeof *a);
    if (!a) return -1;
    int n = 0;
    for (int io = 0; io < 2; io++)
        for (int i = 0; i < (io ? p->n_outs : p->n_ins); i++)
            for (int k = 0; k < (io ? p->out_n[i] : p->in_n[i]); k++) {
                const pe_tensor *t = io ? out[i][k] : in[i][k];
                if (t) a[n++] = (alias_arg){t, io, io ? p->out_reg[i] : p->in_reg[i], k};
            }
    qsort(a, (size_t)n, sizeof *a, alias_arg_cmp);
    int bad = 0;
    for (int g = 0, e; g < n && !bad; g = e) {
        for (e = g + 1; e < n && a[e].t == a[g].t; e++) {
        }
        if (e - g < 2 || !a[g].out) continue; /* one arg, or inputs only */
        for (int m = g + 1; m < e && !bad; m++)
            bad = a[m].out || a[m].k != a[g].k || !is_inplace_pair(p->info, a[m].reg, a[g].reg);
    }
    free(a);
    return bad;
}

/* An output tensor is a fresh one, or written in place: then every input
 * arg holding it is its declared partner (ops.def "In>Out", the k-th arg of
 * In with the k-th of Out: ParamOut = Param), as the semantic check
 * (graph/check.c) wants of a program, and no other output holds it.
 * in[i] / out[i]: the args of caller slot i. A call of many args (a merged
 * optimizer op over every parameter: ~1,000) is screened by the sorted scan
 * first; the pairwise scan, which names the offending pair, runs when the
 * screen finds something or the call is small. */
static pe_status check_aliases(const pe_eager_prep *p, pe_tensor *const *const *in, pe_tensor *const *const *out) {
    const pe_op_info *info = p->info;
    if ((int64_t)p->n_out_args * (p->n_out_args + p->n_in_args) > 4096) {
        int r = may_alias(p, in, out);
        if (r < 0) return pe_error(PE_ERR_NOMEM, "op %s: out of memory", info->name);
        if (r == 0) return PE_OK;
    }
    for (int i = 0; i < p->n_outs; i++)
        for (int k = 0; k < p->out_n[i]; k++) {
            const pe_tensor *t = out[i][k];
            if (!t) continue;
            const char *os = info->outputs[p->out_reg[i]].name;
            for (int j = 0; j <= i; j++)
                for (int m = 0; m < (j < i ? p->out_n[j] : k); m++)
                    if (out[j][m] == t)
                        return pe_error(PE_ERR_INVALID, "op %s: outputs %s:%d and %s:%d are one tensor (an op "
                                        "writes a tensor once)", info->name, info->outputs[p->out_reg[j]].name, m,
                                        os, k);
            for (int j = 0; j < p->n_ins; j++)
                for (int m = 0; m < p->in_n[j]; m++) {
                    if (in[j][m] != t) continue;
                    bool pair = is_inplace_pair(info, p->in_reg[j], p->out_reg[i]);
                    if (pair && m == k) continue;
                    const char *is = info->inputs[p->in_reg[j]].name;
                    if (pair)
                        return pe_error(PE_ERR_INVALID, "op %s: output %s:%d is input %s:%d: %s>%s is in place "
                                        "only arg by arg (output %s arg k may be input %s arg k)", info->name,
                                        os, k, is, m, is, os, os, is);
                    return pe_error(PE_ERR_INVALID, "op %s: output %s:%d is also input %s:%d, but %s>%s is no "
                                    "in-place pair of the op (ops/ops.def): its kernel may read what it has "
                                    "already overwritten; give a new output tensor",
                                    info->name, os, k, is, m, is, os);
                }
        }
    return PE_OK;
}

/* Every input arg whose data the kernel reads lives on the op's place: a
 * kernel on cuda:0 cannot read host memory nor cuda:1's, nor a CPU kernel
 * device memory (the static executors place every var; eager callers move
 * tensors). Arity-one args are present. */
static pe_status check_inputs(const pe_eager_prep *p, pe_tensor *const *const *in, const char *const *const *names,
                              pe_place place) {
    const pe_op_info *info = p->info;
    for (int j = 0, at = 0; j < p->n_ins; at += p->in_n[j], j++) {
        int slot = p->in_reg[j];
        for (int k = 0; k < p->in_n[j]; k++) {
            const pe_tensor *t = in[j][k];
            if (!t && info->inputs[slot].arity == PE_ARITY_ONE)
                return pe_error(PE_ERR_INVALID, "op %s: input %s takes exactly one tensor, got 0", info->name,
                                info->inputs[slot].name);
            if (info->no_buffer[slot] || !t || !t->buf ||
                (t->place.kind == place.kind && (place.kind == PE_PLACE_CPU || t->place.id == place.id)))
                continue; /* host memory is one for every CPU place */
            char tp[32], op[32];
            return pe_error(PE_ERR_INVALID, "op %s: input %s:%d ('%s') is on %s, the op runs on %s: eager ops take "
                            "their inputs on the place they run on (copy the tensor there first)", info->name,
                            info->inputs[slot].name, k,
                            names && names[j] && names[j][k] ? names[j][k] : p->names ? p->names[at + k] : "?",
                            pe_place_str(t->place, tp, sizeof tp), pe_place_str(place, op, sizeof op));
        }
    }
    return PE_OK;
}

/* Runs p on the args of each caller slot (in[i], out[i]; names[i] or
 * out_names[i] NULL: "<slot>:<k>"). */
static pe_status run(const pe_eager_prep *p, pe_tensor *const *const *in, const char *const *const *in_names,
                     pe_tensor *const *const *out, const char *const *const *out_names, pe_place place,
                     int num_threads, uint64_t seed) {
    const pe_op_info *info = p->info;
    PE_CHECK(check_aliases(p, in, out));
    if (place.kind == PE_PLACE_CUDA) { /* asked of the runtime only for GPU places: CPU ops stay off it */
#ifdef PE_WITH_CUDA
        const int gpus = pe_cuda_device_count();
#else
        const int gpus = 0;
#endif
        if (place.id < 0 || place.id >= gpus)
            return pe_error(PE_ERR_UNSUPPORTED, "op %s: place cuda:%d: %d CUDA device(s) visible to this process%s",
                            info->name, place.id, gpus, gpus ? "" : " (a build without CUDA, or no GPU)");
    }
    PE_CHECK(check_inputs(p, in, in_names, place));
    for (int i = 0; i < p->n_outs; i++)
        for (int k = 0; k < p->out_n[i]; k++)
            if (!out[i][k] && info->outputs[p->out_reg[i]].arity == PE_ARITY_ONE)
                return pe_error(PE_ERR_INVALID, "op %s: output %s takes exactly one tensor, got 0", info->name,
                                info->outputs[p->out_reg[i]].name);

    pe_op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.info = info;
    ctx.place = place;
    ctx.num_threads = num_threads > 0 ? num_threads : omp_get_max_threads();
    ctx.program_seed = seed;
    /* names: the caller's, else the prepared "<slot>:<k>", else made here */
    enum { NBUF = 16 };
    char nbuf[NBUF][48];
    const char *nstack[NBUF];
    const char **made = NULL;
    int n_made = 0, total = p->n_in_args + p->n_out_args;
    if (!p->names && total > NBUF) {
        made = calloc((size_t)total, sizeof *made + 48);
        if (!made) return pe_error(PE_ERR_NOMEM, "op %s: out of memory", info->name);
    }
    char *mbuf = made ? (char *)(made + total) : NULL;
    int at = 0;
    for (int io = 0; io < 2; io++) {
        int n = io ? p->n_outs : p->n_ins;
        for (int i = 0; i < n; i++) {
            int reg = io ? p->out_reg[i] : p->in_reg[i], cnt = io ? p->out_n[i] : p->in_n[i];
            pe_tensor *const *ts = io ? out[i] : in[i];
            const char *const *given = io ? (out_names ? out_names[i] : NULL) : (in_names ? in_names[i] : NULL);
            const char **nm;
            if (given) {
                nm = (const char **)given;
            } else if (p->names) {
                nm = &p->names[at];
            } else {
                nm = made ? &made[n_made] : &nstack[n_made];
                const char *slot = io ? info->outputs[reg].name : info->inputs[reg].name;
                for (int k = 0; k < cnt; k++, n_made++) {
                    char *b = made ? mbuf + (size_t)n_made * 48 : nbuf[n_made];
                    arg_name(b, slot, k);
                    nm[k] = b;
                }
            }
            if (io) {
                ctx.out[reg] = (pe_tensor **)ts, ctx.out_names[reg] = nm, ctx.n_out[reg] = cnt;
            } else {
                ctx.in[reg] = (pe_tensor **)ts, ctx.in_names[reg] = nm, ctx.n_in[reg] = cnt;
            }
            at += cnt;
        }
    }
    memcpy((void *)ctx.attrs, p->attrs, sizeof p->attrs);
    pe_status st = pe_op_run(&ctx);
    pe_op_ctx_release(&ctx);
    free(made);
    return st;
}

pe_status pe_eager_run(int op, const pe_eager_args *ins, int n_ins, const pe_eager_args *outs, int n_outs,
                       const pe_attr *attrs, int n_attrs, pe_place place, int num_threads, uint64_t seed) {
    pe_eager_prep p;
    PE_CHECK(prep_init(&p, op, ins, n_ins, outs, n_outs, attrs, n_attrs));
    for (int io = 0; io < 2; io++)
        for (int i = 0; i < (io ? n_outs : n_ins); i++) {
            const pe_eager_args *a = io ? &outs[i] : &ins[i];
            if (a->n > 0 && !a->t)
                return pe_error(PE_ERR_INVALID, "op %s: %s slot %s: %d args without tensors", p.info->name,
                                io ? "output" : "input", a->slot, a->n);
        }
    pe_tensor *const *in[PE_MAX_SLOTS], *const *out[PE_MAX_SLOTS];
    const char *const *in_names[PE_MAX_SLOTS], *const *out_names[PE_MAX_SLOTS];
    for (int i = 0; i < n_ins; i++) in[i] = ins[i].t, in_names[i] = ins[i].names;
    for (int i = 0; i < n_outs; i++) out[i] = outs[i].t, out_names[i] = outs[i].names;
    return run(&p, in, in_names, out, out_names, place, num_threads, seed);
}

pe_status pe_eager_prepare(int op, const pe_eager_args *ins, int n_ins, const pe_eager_args *outs, int n_outs,
                           const pe_attr *attrs, int n_attrs, pe_eager_prep **out) {
    *out = NULL;
    pe_eager_prep tmp;
    PE_CHECK(prep_init(&tmp, op, ins, n_ins, outs, n_outs, attrs, n_attrs));
    const pe_op_info *info = tmp.info;
    int total = tmp.n_in_args + tmp.n_out_args;
    pe_eager_prep *p = calloc(1, sizeof *p);
    pe_program *own = pe_program_new();
    pe_op *holder = own ? pe_block_add_op(&own->blocks[0], info->name) : NULL;
    char *nb = calloc((size_t)(total ? total : 1), sizeof(char *) + 48);
    pe_status st = p && holder && nb ? PE_OK : pe_error(PE_ERR_NOMEM, "op %s: out of memory", info->name);
    for (int i = 0; st == PE_OK && i < n_attrs; i++) st = pe_op_set_attr(holder, &attrs[i]);
    if (st != PE_OK) {
        free(p);
        free(nb);
        pe_program_free(own);
        return st;
    }
    *p = tmp;
    p->own = own;
    for (int i = 0; i < info->n_attrs; i++) /* point at the copies */
        for (int k = 0; k < holder->n_attrs; k++)
            if (!strcmp(holder->attrs[k].name, info->attrs[i].name)) p->attrs[i] = &holder->attrs[k];
    p->names = (const char **)nb;
    char *buf = nb + (size_t)(total ? total : 1) * sizeof(char *);
    int at = 0;
    for (int io = 0; io < 2; io++)
        for (int i = 0; i < (io ? p->n_outs : p->n_ins); i++) {
            const char *slot = io ? info->outputs[p->out_reg[i]].name : info->inputs[p->in_reg[i]].name;
            for (int k = 0; k < (io ? p->out_n[i] : p->in_n[i]); k++, at++) {
                arg_name(buf + (size_t)at * 48, slot, k);
                p->names[at] = buf + (size_t)at * 48;
            }
        }
    *out = p;
    return PE_OK;
}

pe_status pe_eager_run_prepared(const pe_eager_prep *p, pe_tensor *const *ins, pe_tensor *const *outs,
                                pe_place place, int num_threads, uint64_t seed) {
    if (!p) return pe_error(PE_ERR_INVALID, "eager: no prepared op");
    pe_tensor *const *in[PE_MAX_SLOTS], *const *out[PE_MAX_SLOTS];
    int at = 0;
    for (int i = 0; i < p->n_ins; i++) in[i] = ins + at, at += p->in_n[i];
    at = 0;
    for (int i = 0; i < p->n_outs; i++) out[i] = outs + at, at += p->out_n[i];
    return run(p, in, NULL, out, NULL, place, num_threads, seed);
}

void pe_eager_prep_free(pe_eager_prep *p) {
    if (!p) return;
    pe_program_free(p->own);
    free((void *)p->names);
    free(p);
}

int pe_eager_prep_arity(const pe_eager_prep *p, bool outputs) {
    return p ? (outputs ? p->n_out_args : p->n_in_args) : 0;
}

const char *pe_eager_prep_op(const pe_eager_prep *p) { return p ? p->info->name : ""; }

/* ---- the backward ops of one forward op ------------------------------------ */

typedef struct eager_grad {
    const pe_eager_var *vars;
    int n_vars;
    int *n_contrib;     /* per vars[i]: contributions named so far */
} eager_grad;

static int var_at(const eager_grad *e, const char *var) {
    for (int i = 0; i < e->n_vars; i++)
        if (!strcmp(e->vars[i].name, var)) return i;
    return -1;
}

static bool drv_needs(const pe_grad_ctx *gc, const char *var) {
    const eager_grad *e = gc->user;
    int i = var_at(e, var);
    return i >= 0 && e->vars[i].needs_grad;
}

static pe_status drv_out_grad(pe_grad_ctx *gc, const char *var, char *name, size_t n, bool *reached) {
    (void)gc;
    snprintf(name, n, "%s" PE_GRAD_SUFFIX, var);
    *reached = true;
    return PE_OK;
}

static pe_status drv_new_contrib(pe_grad_ctx *gc, const char *var, char *name, size_t n) {
    eager_grad *e = gc->user;
    int i = var_at(e, var);
    if (i < 0) return pe_error(PE_ERR_INVALID, "eager grad: var '%s' was not given", var);
    int k = e->n_contrib[i]++;
    if (k == 0)
        snprintf(name, n, "%s" PE_GRAD_SUFFIX, var);
    else
        snprintf(name, n, "%s" PE_GRAD_SUFFIX "@RENAME@%d", var, k);
    return PE_OK;
}

static const pe_grad_driver k_eager_driver = {drv_needs, drv_out_grad, drv_new_contrib};

pe_status pe_eager_grad_ops(const pe_op *fwd, const pe_eager_var *vars, int n_vars, pe_program **out) {
    *out = NULL;
    const pe_op_info *info = fwd && fwd->type ? pe_op_info_find(fwd->type) : NULL;
    if (!info) return pe_error(PE_ERR_NOT_FOUND, "eager grad: unknown op type '%s'", fwd && fwd->type ? fwd->type : "");
    if (!info->grad) return pe_error(PE_ERR_UNSUPPORTED, "op %s has no gradient (no grad maker in ops.def)", info->name);
    pe_program *p = pe_program_new();
    if (!p) return pe_error(PE_ERR_NOMEM, "eager grad: out of memory");
    pe_block *b = &p->blocks[0];
    pe_status st = PE_OK;
    for (int i = 0; st == PE_OK && i < n_vars; i++) {
        if (pe_block_find_var(b, vars[i].name)) continue;
        if (!pe_block_add_var(b, vars[i].name, vars[i].dtype, vars[i].ndim, vars[i].dims))
            st = pe_error(PE_ERR_INVALID, "op %s: cannot declare var '%s' (rank %d)", info->name, vars[i].name,
                          vars[i].ndim);
    }
    pe_op *op = st == PE_OK ? pe_block_add_op(b, fwd->type) : NULL;
    if (st == PE_OK && !op) st = pe_error(PE_ERR_NOMEM, "eager grad: out of memory");
    for (int i = 0; st == PE_OK && i < fwd->n_inputs; i++)
        for (int k = 0; st == PE_OK && k < fwd->inputs[i].n_args; k++)
            st = pe_op_add_input(op, fwd->inputs[i].name, fwd->inputs[i].args[k]);
    for (int i = 0; st == PE_OK && i < fwd->n_outputs; i++)
        for (int k = 0; st == PE_OK && k < fwd->outputs[i].n_args; k++)
            st = pe_op_add_output(op, fwd->outputs[i].name, fwd->outputs[i].args[k]);
    for (int i = 0; st == PE_OK && i < fwd->n_attrs; i++) st = pe_op_set_attr(op, &fwd->attrs[i]);
    eager_grad e = {.vars = vars, .n_vars = n_vars, .n_contrib = calloc((size_t)(n_vars > 0 ? n_vars : 1), sizeof(int))};
    if (st == PE_OK && !e.n_contrib) st = pe_error(PE_ERR_NOMEM, "eager grad: out of memory");
    if (st == PE_OK) {
        pe_grad_ctx g = {.p = p, .fwd_idx = 0, .cur_idx = -1, .drv = &k_eager_driver, .user = &e};
        st = info->grad(&g);
    }
    free(e.n_contrib);
    if (st != PE_OK) {
        pe_program_free(p);
        return st;
    }
    pe_block_remove_op(&p->blocks[0], 0); /* the forward op: only its backward ops are returned */
    *out = p;
    return PE_OK;
}
