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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one op -------------------------------------------------------------- */

static const pe_eager_args *find_args(const pe_eager_args *a, int n, const char *slot) {
    for (int i = 0; i < n; i++)
        if (a[i].slot && !strcmp(a[i].slot, slot)) return &a[i];
    return NULL;
}

/* Every given slot is one of the op's, at most once, with an arity it takes. */
static pe_status check_slots(const pe_op_info *info, const pe_eager_args *a, int n, bool inputs) {
    const char *kind = inputs ? "input" : "output";
    int n_slots = inputs ? info->n_inputs : info->n_outputs;
    const pe_slot_info *slots = inputs ? info->inputs : info->outputs;
    for (int i = 0; i < n; i++) {
        if (!a[i].slot) return pe_error(PE_ERR_INVALID, "op %s: %s slot %d has no name", info->name, kind, i);
        if (a[i].n < 0 || (a[i].n > 0 && !a[i].t))
            return pe_error(PE_ERR_INVALID, "op %s: %s slot %s: %d args without tensors", info->name, kind,
                            a[i].slot, a[i].n);
        int at = -1;
        for (int k = 0; k < n_slots; k++)
            if (!strcmp(slots[k].name, a[i].slot)) at = k;
        if (at < 0) return pe_error(PE_ERR_INVALID, "op %s has no %s slot '%s'", info->name, kind, a[i].slot);
        for (int j = 0; j < i; j++)
            if (!strcmp(a[j].slot, a[i].slot))
                return pe_error(PE_ERR_INVALID, "op %s: %s slot %s is given twice", info->name, kind, a[i].slot);
    }
    for (int k = 0; k < n_slots; k++) {
        const pe_eager_args *s = find_args(a, n, slots[k].name);
        int given = 0;
        for (int j = 0; s && j < s->n; j++) given += s->t[j] != NULL;
        int ar = slots[k].arity, cnt = s ? s->n : 0;
        if ((ar == PE_ARITY_ONE && (cnt != 1 || given != 1)) || (ar == PE_ARITY_OPTIONAL && cnt > 1) ||
            (ar == PE_ARITY_MANY && cnt < 1))
            return pe_error(PE_ERR_INVALID, "op %s: %s %s takes %s, got %d", info->name, kind, slots[k].name,
                            ar == PE_ARITY_ONE ? "exactly one tensor"
                            : ar == PE_ARITY_OPTIONAL ? "at most one tensor"
                                                      : "one or more tensors",
                            given);
    }
    return PE_OK;
}

static bool is_inplace_pair(const pe_op_info *info, const char *in_slot, const char *out_slot) {
    for (int p = 0; p < info->n_inplace; p++)
        if (!strcmp(info->inputs[info->inplace[p][0]].name, in_slot) &&
            !strcmp(info->outputs[info->inplace[p][1]].name, out_slot))
            return true;
    return false;
}

/* An output tensor is a fresh one, or written in place: then every input
 * arg holding it is its declared partner (ops.def "In>Out", the k-th arg of
 * In with the k-th of Out: ParamOut = Param), as the semantic check
 * (graph/check.c) wants of a program, and no other output holds it. */
static pe_status check_aliases(const pe_op_info *info, const pe_eager_args *ins, int n_ins,
                               const pe_eager_args *outs, int n_outs) {
    for (int i = 0; i < n_outs; i++)
        for (int k = 0; k < outs[i].n; k++) {
            const pe_tensor *t = outs[i].t[k];
            if (!t) continue;
            for (int j = 0; j <= i; j++)
                for (int m = 0; m < (j < i ? outs[j].n : k); m++)
                    if (outs[j].t[m] == t)
                        return pe_error(PE_ERR_INVALID, "op %s: outputs %s:%d and %s:%d are one tensor (an op "
                                        "writes a tensor once)", info->name, outs[j].slot, m, outs[i].slot, k);
            for (int j = 0; j < n_ins; j++)
                for (int m = 0; m < ins[j].n; m++) {
                    if (ins[j].t[m] != t || (m == k && is_inplace_pair(info, ins[j].slot, outs[i].slot))) continue;
                    if (is_inplace_pair(info, ins[j].slot, outs[i].slot))
                        return pe_error(PE_ERR_INVALID, "op %s: output %s:%d is input %s:%d: %s>%s is in place "
                                        "only arg by arg (output %s arg k may be input %s arg k)", info->name,
                                        outs[i].slot, k, ins[j].slot, m, ins[j].slot, outs[i].slot, outs[i].slot,
                                        ins[j].slot);
                    return pe_error(PE_ERR_INVALID, "op %s: output %s:%d is also input %s:%d, but %s>%s is no "
                                    "in-place pair of the op (ops/ops.def): its kernel may read what it has "
                                    "already overwritten; give a new output tensor",
                                    info->name, outs[i].slot, k, ins[j].slot, m, ins[j].slot, outs[i].slot);
                }
        }
    return PE_OK;
}

/* Every input arg whose data the kernel reads lives on the op's place: a
 * kernel on cuda:0 cannot read host memory nor cuda:1's, nor a CPU kernel
 * device memory (the static executors place every var; eager callers move
 * tensors). */
static pe_status check_places(const pe_op_info *info, const pe_eager_args *ins, int n_ins, pe_place place) {
    for (int j = 0; j < n_ins; j++) {
        int slot = -1;
        for (int i = 0; i < info->n_inputs; i++)
            if (!strcmp(info->inputs[i].name, ins[j].slot)) slot = i;
        if (slot < 0 || info->no_buffer[slot]) continue;
        for (int k = 0; k < ins[j].n; k++) {
            const pe_tensor *t = ins[j].t[k];
            if (!t || !t->buf || (t->place.kind == place.kind && (place.kind == PE_PLACE_CPU || t->place.id == place.id)))
                continue; /* host memory is one for every CPU place */
            char tp[32], op[32];
            return pe_error(PE_ERR_INVALID, "op %s: input %s:%d ('%s') is on %s, the op runs on %s: eager ops take "
                            "their inputs on the place they run on (copy the tensor there first)", info->name,
                            ins[j].slot, k, ins[j].names && ins[j].names[k] ? ins[j].names[k] : "?",
                            pe_place_str(t->place, tp, sizeof tp), pe_place_str(place, op, sizeof op));
        }
    }
    return PE_OK;
}

/* Every given attr is the op's own or a common one, with the registry's type. */
static pe_status check_attrs(const pe_op_info *info, const pe_attr *attrs, int n) {
    for (int i = 0; i < n; i++) {
        if (!attrs[i].name) return pe_error(PE_ERR_INVALID, "op %s: attr %d has no name", info->name, i);
        const pe_attr_info *ai = pe_op_info_attr(info, attrs[i].name);
        if (!ai) ai = pe_common_attr(attrs[i].name);
        if (!ai) return pe_error(PE_ERR_INVALID, "op %s has no attr '%s'", info->name, attrs[i].name);
        if (ai->type != attrs[i].type)
            return pe_error(PE_ERR_INVALID, "op %s: attr '%s' is %s, the registry's type is %s", info->name,
                            attrs[i].name, pe_attr_type_name(attrs[i].type), pe_attr_type_name(ai->type));
    }
    return PE_OK;
}

static pe_status fill(pe_op_ctx *ctx, const pe_op_info *info, const pe_eager_args *a, int n, bool inputs,
                      pe_tensor ***tp, const char ***np, char **nbuf) {
    int n_slots = inputs ? info->n_inputs : info->n_outputs;
    for (int i = 0; i < n_slots; i++) {
        const char *slot = inputs ? info->inputs[i].name : info->outputs[i].name;
        const pe_eager_args *s = find_args(a, n, slot);
        if (!s || s->n == 0) continue;
        if (inputs) {
            ctx->in[i] = *tp, ctx->in_names[i] = *np, ctx->n_in[i] = s->n;
        } else {
            ctx->out[i] = *tp, ctx->out_names[i] = *np, ctx->n_out[i] = s->n;
        }
        for (int k = 0; k < s->n; k++) {
            *(*tp)++ = s->t[k];
            if (!s->t[k]) {
                *(*np)++ = PE_EMPTY_VAR;
            } else if (s->names && s->names[k]) {
                *(*np)++ = s->names[k];
            } else { /* "<slot>:<k>" in the context's own storage */
                int w = snprintf(*nbuf, 64, "%.40s:%d", slot, k);
                *(*np)++ = *nbuf;
                *nbuf += w + 1;
            }
        }
    }
    return PE_OK;
}

pe_status pe_eager_run(int op, const pe_eager_args *ins, int n_ins, const pe_eager_args *outs, int n_outs,
                       const pe_attr *attrs, int n_attrs, pe_place place, int num_threads, uint64_t seed) {
    const pe_op_info *info = op >= 0 && op < pe_op_info_count() ? pe_op_info_get(op) : NULL;
    if (!info) return pe_error(PE_ERR_NOT_FOUND, "eager: no op type with index %d in the registry", op);
    if (n_ins < 0 || n_outs < 0 || n_attrs < 0 || (n_ins && !ins) || (n_outs && !outs) || (n_attrs && !attrs))
        return pe_error(PE_ERR_INVALID, "op %s: bad argument counts", info->name);
    PE_CHECK(check_slots(info, ins, n_ins, true));
    PE_CHECK(check_slots(info, outs, n_outs, false));
    PE_CHECK(check_attrs(info, attrs, n_attrs));
    int total = 0;
    for (int i = 0; i < n_ins; i++) total += ins[i].n;
    for (int i = 0; i < n_outs; i++) total += outs[i].n;
    PE_CHECK(check_aliases(info, ins, n_ins, outs, n_outs));
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
    PE_CHECK(check_places(info, ins, n_ins, place));

    pe_op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.info = info;
    ctx.place = place;
    ctx.num_threads = num_threads > 0 ? num_threads : omp_get_max_threads();
    ctx.program_seed = seed;
    size_t cnt = (size_t)(total ? total : 1);
    char *mem = calloc(1, cnt * (sizeof(pe_tensor *) + sizeof(char *) + 64));
    if (!mem) return pe_error(PE_ERR_NOMEM, "op %s: out of memory", info->name);
    ctx.storage = mem;
    pe_tensor **tp = (pe_tensor **)mem;
    const char **np = (const char **)(mem + cnt * sizeof(pe_tensor *));
    char *nbuf = mem + cnt * (sizeof(pe_tensor *) + sizeof(char *));
    fill(&ctx, info, ins, n_ins, true, &tp, &np, &nbuf);
    fill(&ctx, info, outs, n_outs, false, &tp, &np, &nbuf);
    pe_status st = PE_OK;
    for (int i = 0; st == PE_OK && i < info->n_attrs; i++) {
        const pe_attr *a = NULL;
        for (int k = 0; k < n_attrs; k++)
            if (!strcmp(attrs[k].name, info->attrs[i].name)) { a = &attrs[k]; break; }
        if (!a && info->attrs[i].required)
            st = pe_error(PE_ERR_INVALID, "op %s: required attr '%s' is missing", info->name, info->attrs[i].name);
        ctx.attrs[i] = a ? a : &info->attrs[i].def;
    }
    if (st == PE_OK) st = pe_op_run(&ctx);
    pe_op_ctx_release(&ctx);
    return st;
}

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
