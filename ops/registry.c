/* ops/registry.c — the op registry built from ops/ops.def, op contexts, and
 * the infer -> allocate -> kernel sequence every executor uses.
 *
 * The slot and attr specs of ops.def are strings parsed once at first use
 * (pthread_once) into pe_op_info tables; a bad spec is a PE bug and asserts.
 * The derived facts are parsed in the same pass, after every op: the
 * PE_GRAD_WIRE wiring (checked against the slots of the op and of its grad
 * op) and the optimizer facts of the PE_OPT table (given to the op and to its
 * merged partner alike, so both answer pe_op_info_elem_input the same way).
 * Attr accessors resolve to the op's own attr or the registry default, so
 * kernels never handle a missing attr. The program checker has already
 * verified attr types, so accessors only assert.
 */
#include "ops/op.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name, *ins, *outs, *attrs, *inplace;
    pe_infer_fn infer;
    pe_grad_fn grad;
    int grad_op;                        /* PE_GRAD_WIRE: the grad op's id, else -1 */
    const char *grad_ins, *grad_outs;   /* PE_GRAD_WIRE: the wiring, else NULL */
    struct { pe_kernel_fn fn; pe_workspace_fn ws; } cpu;
    pe_kernel_fn cuda;
} op_spec;

#define PE_GRAD(fn) fn, -1, NULL, NULL
#define PE_NO_GRAD NULL, -1, NULL, NULL
#define PE_GRAD_WIRE(type, ins, outs) pe_grad_wired, PE_OP_##type, ins, outs
#ifdef PE_WITH_CUDA
#define PE_CUDA(fn) fn
#else
#define PE_CUDA(fn) NULL
#endif
#define PE_NO_CUDA NULL
#define PE_CPU_WS(kernel, wsfn) kernel, .ws = wsfn
static const op_spec k_specs[] = {
#define PE_OP(name, ins, outs, attrs, infer, grad, inplace, cpu, cuda) \
    {#name, ins, outs, attrs, inplace, infer, grad, {.fn = cpu}, cuda},
#include "ops/ops.def"
#undef PE_OP
};
#undef PE_CPU_WS
#undef PE_CUDA
#undef PE_NO_CUDA
#undef PE_GRAD
#undef PE_NO_GRAD
#undef PE_GRAD_WIRE

/* The optimizer facts (second table of ops.def). */
typedef struct {
    int id, merged;
    const char *elem, *shared;
} opt_spec;

static const opt_spec k_opts[] = {
#define PE_OPT(name, merged, elem, shared) {PE_OP_##name, PE_OP_##merged, elem, shared},
#include "ops/ops.def"
#undef PE_OPT
};

static pe_op_info g_infos[PE_OP_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Attrs any op may carry, as in Paddle's OpProtoAndCheckerMaker. */
static pe_attr_info g_common[6];
static int g_n_common;

/* Parsed spec storage: strings are duplicated once and live for the process. */
static char *dup_range(const char *b, const char *e) {
    char *s = malloc((size_t)(e - b) + 1);
    PE_ASSERT(s);
    memcpy(s, b, (size_t)(e - b));
    s[e - b] = '\0';
    return s;
}

/* The next space-separated token of a spec at *p: [*b, *e); false at the end. */
static bool next_token(const char **p, const char **b, const char **e) {
    while (**p == ' ') (*p)++;
    if (!**p) return false;
    *b = *p;
    while (**p && **p != ' ') (*p)++;
    *e = *p;
    return true;
}

static int slot_index(const pe_slot_info *slots, int n, const char *b, const char *e) {
    for (int i = 0; i < n; i++)
        if (strlen(slots[i].name) == (size_t)(e - b) && !strncmp(slots[i].name, b, (size_t)(e - b))) return i;
    return -1;
}

static int parse_slots(const char *spec, pe_slot_info *out) {
    int n = 0;
    const char *p = spec, *b, *e;
    while (next_token(&p, &b, &e)) {
        int arity = PE_ARITY_ONE;
        if (e - b >= 2 && e[-2] == '*' && e[-1] == '?') { arity = PE_ARITY_ANY; e -= 2; }
        else if (e[-1] == '*') { arity = PE_ARITY_MANY; e--; }
        else if (e[-1] == '?') { arity = PE_ARITY_OPTIONAL; e--; }
        PE_ASSERT(n < PE_MAX_SLOTS);
        out[n].name = dup_range(b, e);
        out[n].arity = arity;
        n++;
    }
    return n;
}

static bool parse_attr_type(const char *s, size_t len, pe_attr_type *t) {
    for (int i = 0; i < PE_ATTR_TYPE_COUNT; i++) {
        const char *n = pe_attr_type_name((pe_attr_type)i);
        if (strlen(n) == len && !strncmp(n, s, len)) { *t = (pe_attr_type)i; return true; }
    }
    return false;
}

/* Parses a default value string into a. */
static void parse_default(pe_attr *a, const char *v) {
    switch (a->type) {
    case PE_ATTR_INT: case PE_ATTR_LONG: case PE_ATTR_BLOCK:
        a->i = strtoll(v, NULL, 10); break;
    case PE_ATTR_BOOL:
        a->i = !strcmp(v, "true") || !strcmp(v, "1"); break;
    case PE_ATTR_FLOAT:
        a->f = strtod(v, NULL); break;
    case PE_ATTR_STRING:
        a->s = strdup(v); PE_ASSERT(a->s); break;
    case PE_ATTR_INTS: case PE_ATTR_LONGS: case PE_ATTR_BOOLS: case PE_ATTR_FLOATS: case PE_ATTR_STRINGS: {
        int n = 0;
        if (*v) { n = 1; for (const char *c = v; *c; c++) n += *c == ','; }
        a->n = n;
        if (a->type == PE_ATTR_FLOATS) a->floats = calloc((size_t)n + 1, sizeof(double));
        else if (a->type == PE_ATTR_STRINGS) a->strings = calloc((size_t)n + 1, sizeof(char *));
        else a->ints = calloc((size_t)n + 1, sizeof(int64_t));
        const char *c = v;
        for (int k = 0; k < n; k++) {
            const char *e = strchr(c, ',');
            if (!e) e = c + strlen(c);
            char *item = dup_range(c, e);
            if (a->type == PE_ATTR_FLOATS) a->floats[k] = strtod(item, NULL);
            else if (a->type == PE_ATTR_STRINGS) a->strings[k] = strdup(item);
            else if (a->type == PE_ATTR_BOOLS) a->ints[k] = !strcmp(item, "true") || !strcmp(item, "1");
            else a->ints[k] = strtoll(item, NULL, 10);
            free(item);
            c = *e ? e + 1 : e;
        }
        break;
    }
    default: break;
    }
}

static int parse_attrs(const char *spec, pe_attr_info *out, int max) {
    int n = 0;
    const char *p = spec, *b, *e;
    while (next_token(&p, &b, &e)) {
        const char *colon = memchr(b, ':', (size_t)(e - b));
        PE_ASSERT(colon);
        const char *eq = memchr(colon, '=', (size_t)(e - colon));
        PE_ASSERT(n < max);
        pe_attr_info *ai = &out[n++];
        memset(ai, 0, sizeof *ai);
        ai->name = dup_range(b, colon);
        const char *te = eq ? eq : e;
        PE_ASSERT(parse_attr_type(colon + 1, (size_t)(te - colon - 1), &ai->type));
        ai->def.name = (char *)ai->name;
        ai->def.type = ai->type;
        ai->required = eq == NULL;
        char *v = eq ? dup_range(eq + 1, e) : strdup("");
        parse_default(&ai->def, v);
        free(v);
    }
    return n;
}

static bool ends_grad(const char *b, const char *e) {
    size_t n = strlen(PE_GRAD_SUFFIX);
    return (size_t)(e - b) > n && !strncmp(e - n, PE_GRAD_SUFFIX, n);
}

/* PE_GRAD_WIRE input token: "F@GRAD" (gradient of forward output F) or the
 * name of a forward input or output slot (never both). */
static void wire_in(pe_op_info *info, const pe_op_info *go, const char *b, const char *e) {
    int gi = slot_index(go->inputs, go->n_inputs, b, e);
    PE_ASSERT(gi >= 0 && info->n_grad_wire < 2 * PE_MAX_SLOTS);
    int kind, fi;
    if (ends_grad(b, e)) {
        kind = PE_WIRE_OUT_GRAD;
        fi = slot_index(info->outputs, info->n_outputs, b, e - strlen(PE_GRAD_SUFFIX));
        PE_ASSERT(fi >= 0);
    } else {
        int ii = slot_index(info->inputs, info->n_inputs, b, e), oi = slot_index(info->outputs, info->n_outputs, b, e);
        PE_ASSERT((ii >= 0) != (oi >= 0));
        kind = ii >= 0 ? PE_WIRE_FWD_INPUT : PE_WIRE_FWD_OUTPUT;
        fi = ii >= 0 ? ii : oi;
    }
    info->grad_wire[info->n_grad_wire].kind = kind;
    info->grad_wire[info->n_grad_wire].fslot = kind == PE_WIRE_FWD_INPUT ? info->inputs[fi].name : info->outputs[fi].name;
    info->grad_wire[info->n_grad_wire].gslot = go->inputs[gi].name;
    info->n_grad_wire++;
}

/* PE_GRAD_WIRE output token: "F@GRAD", the gradients of forward input F. */
static void wire_out(pe_op_info *info, const pe_op_info *go, const char *b, const char *e) {
    int gi = slot_index(go->outputs, go->n_outputs, b, e);
    PE_ASSERT(gi >= 0 && ends_grad(b, e) && info->n_grad_wire < 2 * PE_MAX_SLOTS);
    int fi = slot_index(info->inputs, info->n_inputs, b, e - strlen(PE_GRAD_SUFFIX));
    PE_ASSERT(fi >= 0);
    info->grad_wire[info->n_grad_wire].kind = PE_WIRE_IN_GRAD;
    info->grad_wire[info->n_grad_wire].fslot = info->inputs[fi].name;
    info->grad_wire[info->n_grad_wire].gslot = go->outputs[gi].name;
    info->n_grad_wire++;
}

/* PE_OPT per-element token: "In>Out" (an in-place pair of the op) or "In". */
static void elem_slot(pe_op_info *info, const char *b, const char *e) {
    const char *gt = memchr(b, '>', (size_t)(e - b));
    int ii = slot_index(info->inputs, info->n_inputs, b, gt ? gt : e);
    PE_ASSERT(ii >= 0);
    info->elem_in_mask |= 1u << ii;
    if (!gt) return;
    int oi = slot_index(info->outputs, info->n_outputs, gt + 1, e);
    bool inplace = false;
    for (int k = 0; k < info->n_inplace; k++) inplace |= info->inplace[k][0] == ii && info->inplace[k][1] == oi;
    PE_ASSERT(oi >= 0 && inplace && info->n_elem_pairs < PE_MAX_SLOTS);
    info->elem_out_mask |= 1u << oi;
    info->elem_pairs[info->n_elem_pairs][0] = ii;
    info->elem_pairs[info->n_elem_pairs][1] = oi;
    info->n_elem_pairs++;
}

static void shared_slot(pe_op_info *info, const char *b, const char *e) {
    int ii = slot_index(info->inputs, info->n_inputs, b, e);
    PE_ASSERT(ii >= 0);
    info->shared_in_mask |= 1u << ii;
}

/* After every op is parsed: the wiring of PE_GRAD_WIRE ops, the optimizer facts. */
static void init_facts(void) {
    const char *p, *b, *e;
    for (int i = 0; i < PE_OP_COUNT; i++) {
        const op_spec *s = &k_specs[i];
        if (s->grad_op < 0) continue;
        g_infos[i].grad_op_id = s->grad_op;
        for (p = s->grad_ins; next_token(&p, &b, &e);) wire_in(&g_infos[i], &g_infos[s->grad_op], b, e);
        for (p = s->grad_outs; next_token(&p, &b, &e);) wire_out(&g_infos[i], &g_infos[s->grad_op], b, e);
    }
    for (size_t k = 0; k < sizeof k_opts / sizeof k_opts[0]; k++) {
        const opt_spec *o = &k_opts[k];
        g_infos[o->id].merged_id = o->merged;
        g_infos[o->merged].fused_from_id = o->id;
        const int ids[2] = {o->id, o->merged};
        for (int j = 0; j < 2; j++) {
            for (p = o->elem; next_token(&p, &b, &e);) elem_slot(&g_infos[ids[j]], b, e);
            for (p = o->shared; next_token(&p, &b, &e);) shared_slot(&g_infos[ids[j]], b, e);
        }
    }
}

static void init_registry(void) {
    g_n_common = parse_attrs("op_role:int=0 op_role_var:strings= op_namescope:string= "
                             "op_callstack:strings= op_device:string= with_quant_attr:bool=false",
                             g_common, 6);
    for (int i = 0; i < PE_OP_COUNT; i++) {
        const op_spec *s = &k_specs[i];
        pe_op_info *info = &g_infos[i];
        info->id = i;
        info->name = s->name;
        info->n_inputs = parse_slots(s->ins, info->inputs);
        info->n_outputs = parse_slots(s->outs, info->outputs);
        info->n_attrs = parse_attrs(s->attrs, info->attrs, PE_MAX_ATTRS);
        info->infer = s->infer;
        info->grad = s->grad;
        info->kernels[PE_PLACE_CPU] = s->cpu.fn;
        info->workspace[PE_PLACE_CPU] = s->cpu.ws;
        info->kernels[PE_PLACE_CUDA] = s->cuda;
        info->grad_op_id = info->merged_id = info->fused_from_id = -1;
        /* inplace pairs "X>Out Y>Out2"; "-X": X's data is never read */
        const char *p = s->inplace, *b, *e;
        while (next_token(&p, &b, &e)) {
            if (*b == '-') {
                int ii = slot_index(info->inputs, info->n_inputs, b + 1, e);
                PE_ASSERT(ii >= 0);
                info->no_buffer[ii] = true;
                continue;
            }
            const char *gt = memchr(b, '>', (size_t)(e - b));
            PE_ASSERT(gt);
            int ii = slot_index(info->inputs, info->n_inputs, b, gt), oi = slot_index(info->outputs, info->n_outputs, gt + 1, e);
            PE_ASSERT(ii >= 0 && oi >= 0 && info->n_inplace < PE_MAX_SLOTS);
            info->inplace[info->n_inplace][0] = ii;
            info->inplace[info->n_inplace][1] = oi;
            info->n_inplace++;
        }
    }
    init_facts();
}

static void ensure_init(void) { pthread_once(&g_once, init_registry); }

const pe_op_info *pe_op_info_find(const char *type) {
    ensure_init();
    if (!type) return NULL;
    for (int i = 0; i < PE_OP_COUNT; i++)
        if (!strcmp(g_infos[i].name, type)) return &g_infos[i];
    return NULL;
}

const pe_op_info *pe_op_info_get(int id) {
    ensure_init();
    return id >= 0 && id < PE_OP_COUNT ? &g_infos[id] : NULL;
}

int pe_op_info_count(void) { return PE_OP_COUNT; }

int pe_op_type_id(const char *type) {
    const pe_op_info *info = pe_op_info_find(type);
    return info ? info->id : -1;
}

int pe_op_info_input_index(const pe_op_info *info, const char *slot) {
    for (int i = 0; i < info->n_inputs; i++)
        if (!strcmp(info->inputs[i].name, slot)) return i;
    return -1;
}

int pe_op_info_output_index(const pe_op_info *info, const char *slot) {
    for (int i = 0; i < info->n_outputs; i++)
        if (!strcmp(info->outputs[i].name, slot)) return i;
    return -1;
}

const pe_attr_info *pe_op_info_attr(const pe_op_info *info, const char *name) {
    for (int i = 0; i < info->n_attrs; i++)
        if (!strcmp(info->attrs[i].name, name)) return &info->attrs[i];
    return NULL;
}

const pe_attr_info *pe_common_attr(const char *name) {
    ensure_init();
    for (int i = 0; i < g_n_common; i++)
        if (!strcmp(g_common[i].name, name)) return &g_common[i];
    return NULL;
}

/* ---- op context ------------------------------------------------------- */

static const pe_slot *find_slot(const pe_slot *slots, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(slots[i].name, name)) return &slots[i];
    return NULL;
}

pe_status pe_op_ctx_init(pe_op_ctx *ctx, const pe_op *op, pe_scope *scope, pe_place place) {
    memset(ctx, 0, sizeof *ctx);
    const pe_op_info *info = pe_op_info_find(op->type);
    if (!info) return pe_error(PE_ERR_NOT_FOUND, "unknown op type '%s'", op->type);
    ctx->info = info;
    ctx->place = place;
    ctx->num_threads = 1;
    /* One allocation for all tensor pointer arrays. */
    int total = 0;
    for (int i = 0; i < op->n_inputs; i++) total += op->inputs[i].n_args;
    for (int i = 0; i < op->n_outputs; i++) total += op->outputs[i].n_args;
    size_t bytes = (size_t)(total ? total : 1) * (sizeof(pe_tensor *) + sizeof(char *));
    char *mem = calloc(1, bytes);
    if (!mem) return pe_error(PE_ERR_NOMEM, "op %s: out of memory", op->type);
    ctx->storage = mem;
    pe_tensor **tp = (pe_tensor **)mem;
    const char **np = (const char **)(mem + (size_t)(total ? total : 1) * sizeof(pe_tensor *));
    char pb[32];
    for (int i = 0; i < info->n_inputs; i++) {
        const pe_slot *s = find_slot(op->inputs, op->n_inputs, info->inputs[i].name);
        if (!s) continue;
        ctx->in[i] = tp;
        ctx->in_names[i] = np;
        ctx->n_in[i] = s->n_args;
        for (int k = 0; k < s->n_args; k++) {
            if (!strcmp(s->args[k], PE_EMPTY_VAR)) { /* absent arg of a duplicable slot */
                *tp++ = NULL;
                *np++ = s->args[k];
                continue;
            }
            pe_tensor *t = pe_scope_find_var(scope, s->args[k]);
            if (!t) {
                pe_op_ctx_release(ctx);
                return pe_error(PE_ERR_NOT_FOUND,
                                "op %s on %s: input %s '%s' is not in the scope (not fed, not "
                                "initialized by the startup program, and not produced by an "
                                "earlier op)",
                                op->type, pe_place_str(place, pb, sizeof pb), info->inputs[i].name,
                                s->args[k]);
            }
            *tp++ = t;
            *np++ = s->args[k];
        }
    }
    for (int i = 0; i < info->n_outputs; i++) {
        const pe_slot *s = find_slot(op->outputs, op->n_outputs, info->outputs[i].name);
        if (!s) continue;
        ctx->out[i] = tp;
        ctx->out_names[i] = np;
        ctx->n_out[i] = s->n_args;
        for (int k = 0; k < s->n_args; k++) {
            if (!strcmp(s->args[k], PE_EMPTY_VAR)) { /* gradient not needed */
                *tp++ = NULL;
                *np++ = s->args[k];
                continue;
            }
            pe_tensor *t = pe_scope_find_var(scope, s->args[k]);
            if (!t) t = pe_scope_var(scope, s->args[k]);
            if (!t) {
                pe_op_ctx_release(ctx);
                return pe_error(PE_ERR_NOMEM, "op %s: out of memory creating output '%s'", op->type, s->args[k]);
            }
            *tp++ = t;
            *np++ = s->args[k];
        }
    }
    for (int i = 0; i < info->n_attrs; i++) {
        const pe_attr *a = NULL;
        for (int k = 0; k < op->n_attrs; k++)
            if (!strcmp(op->attrs[k].name, info->attrs[i].name)) { a = &op->attrs[k]; break; }
        if (!a && info->attrs[i].required) {
            pe_op_ctx_release(ctx);
            return pe_error(PE_ERR_INVALID, "op %s: required attr '%s' is missing", op->type, info->attrs[i].name);
        }
        ctx->attrs[i] = a ? a : &info->attrs[i].def;
    }
    return PE_OK;
}

void pe_op_ctx_release(pe_op_ctx *ctx) {
    free(ctx->storage);
    ctx->storage = NULL;
    free(ctx->out_decl);
    ctx->out_decl = NULL;
}

pe_status pe_op_ctx_declare(pe_op_ctx *ctx, const pe_op *op, const pe_program *prog, int block_idx) {
    const pe_op_info *info = ctx->info;
    int n = 0;
    for (int i = 0; i < info->n_outputs; i++) n += ctx->n_out[i];
    free(ctx->out_decl);
    ctx->out_decl = calloc((size_t)(n ? n : 1), sizeof *ctx->out_decl);
    if (!ctx->out_decl) return pe_error(PE_ERR_NOMEM, "op %s: out of memory", op->type);
    n = 0;
    for (int i = 0; i < info->n_outputs; i++)
        for (int j = 0; j < ctx->n_out[i]; j++, n++)
            if (ctx->out[i][j]) ctx->out_decl[n] = pe_program_find_var(prog, block_idx, ctx->out_names[i][j]);
    return PE_OK;
}

/* dims without its 1s, into out; returns the count */
static int drop_ones(int ndim, const int64_t *dims, int64_t *out) {
    int k = 0;
    for (int i = 0; i < ndim; i++)
        if (dims[i] != 1) out[k++] = dims[i];
    return k;
}

bool pe_var_meta_agrees(const pe_var *v, pe_dtype dt, int ndim, const int64_t *dims) {
    if (v->dtype != dt) return false;
    if (v->ndim == 0) return true;
    int64_t a[PE_MAX_DIMS], b[PE_MAX_DIMS];
    if (v->ndim == ndim) {
        for (int i = 0; i < ndim; i++)
            if (v->dims[i] >= 0 && v->dims[i] != dims[i]) return false;
        return true;
    }
    if (v->ndim > PE_MAX_DIMS || ndim > PE_MAX_DIMS) return false;
    int na = drop_ones(v->ndim, v->dims, a), nb = drop_ones(ndim, dims, b);
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] >= 0 && a[i] != b[i]) return false;
    return true;
}

/* The outputs' inferred meta against their declarations (pe_op_ctx_declare). */
static pe_status check_declared(const pe_op_ctx *ctx) {
    const pe_op_info *info = ctx->info;
    int n = 0;
    for (int i = 0; i < info->n_outputs; i++)
        for (int j = 0; j < ctx->n_out[i]; j++, n++) {
            const pe_var *v = ctx->out_decl[n];
            const pe_tensor *t = ctx->out[i][j];
            if (!v || !t || pe_var_meta_agrees(v, t->dtype, t->ndim, t->dims)) continue;
            char pb[32], a[128], b[128];
            return pe_error(PE_ERR_INVALID,
                            "op %s on %s: output %s '%s' is %s %s, but the program declares it %s %s (a declared "
                            "-1 matches any size, dims of 1 are ignored, a declared [] matches any shape): fix "
                            "the declaration or the op's inputs and attrs",
                            info->name, pe_place_str(ctx->place, pb, sizeof pb), info->outputs[i].name,
                            ctx->out_names[i][j], pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, a, sizeof a),
                            pe_dtype_name(v->dtype), pe_dims_str(v->ndim, v->dims, b, sizeof b));
        }
    return PE_OK;
}

/* Whether output slot `o` arg `k`, tensor t, is also an input. Its in-place
 * pair's arg k is tried first (ParamOut[k] = Param[k]): a merged optimizer
 * op has ~500 outputs and ~700 inputs, and the plain scan made pe_op_run
 * quadratic in them. */
static bool is_input(const pe_op_ctx *ctx, int o, int k, const pe_tensor *t) {
    const pe_op_info *info = ctx->info;
    for (int p = 0; p < info->n_inplace; p++)
        if (info->inplace[p][1] == o && k < ctx->n_in[info->inplace[p][0]] && ctx->in[info->inplace[p][0]][k] == t)
            return true;
    for (int i = 0; i < info->n_inputs; i++)
        for (int j = 0; j < ctx->n_in[i]; j++)
            if (ctx->in[i][j] == t) return true;
    return false;
}

pe_status pe_op_infer(pe_op_ctx *ctx) {
    const pe_op_info *info = ctx->info;
    pe_tensor src = {0}; /* holds a reference to the first input LoD */
    for (int i = 0; i < info->n_inputs && !src.lod; i++)
        for (int j = 0; j < ctx->n_in[i] && !src.lod; j++)
            if (ctx->in[i][j] && ctx->in[i][j]->lod) pe_tensor_share_lod(&src, ctx->in[i][j]);
    for (int i = 0; i < info->n_outputs; i++)
        for (int j = 0; j < ctx->n_out[i]; j++) {
            pe_tensor *t = ctx->out[i][j];
            if (t && t->lod && !is_input(ctx, i, j, t)) pe_tensor_clear_lod(t);
        }
    ctx->lod_set = false;
    pe_status st = info->infer(ctx);
    if (st == PE_OK && src.lod && !ctx->lod_set) {
        const pe_lod *l = src.lod;
        int64_t rows = l->offsets[l->n_levels - 1][l->n_offsets[l->n_levels - 1] - 1];
        for (int i = 0; i < info->n_outputs; i++)
            for (int j = 0; j < ctx->n_out[i]; j++) {
                pe_tensor *t = ctx->out[i][j];
                /* an output written in place (ParamOut = Param) keeps what it had */
                if (t && !t->lod && t->ndim >= 1 && t->dims[0] == rows && !is_input(ctx, i, j, t))
                    pe_tensor_share_lod(t, &src);
            }
    }
    pe_tensor_clear_lod(&src);
    return st;
}

pe_status pe_op_run(pe_op_ctx *ctx) {
    const pe_op_info *info = ctx->info;
    char pb[32];
    pe_kernel_fn k = info->kernels[ctx->place.kind];
    if (!k)
        return pe_error(PE_ERR_UNSUPPORTED, "op %s has no kernel for %s", info->name,
                        pe_place_str(ctx->place, pb, sizeof pb));
    for (int i = 0; i < info->n_inputs; i++)
        for (int j = 0; j < ctx->n_in[i]; j++) {
            const pe_tensor *t = ctx->in[i][j];
            if (!t) continue;
            if (!t->buf && pe_tensor_numel(t) != 0)
                return pe_error(PE_ERR_INVALID,
                                "op %s on %s: input %s '%s' has no value (it was declared but never "
                                "fed or computed)",
                                info->name, pe_place_str(ctx->place, pb, sizeof pb), info->inputs[i].name,
                                ctx->in_names[i][j]);
        }
    PE_CHECK(pe_op_infer(ctx));
    if (ctx->out_decl) PE_CHECK(check_declared(ctx));
    for (int i = 0; i < info->n_outputs; i++)
        for (int j = 0; j < ctx->n_out[i]; j++) {
            pe_tensor *t = ctx->out[i][j];
            if (!t) continue;
            /* An output that is also an input (ParamOut = Param, MeanOut =
             * Mean) keeps its buffer even when shared: detaching it would
             * hand the kernel uninitialised memory as its input. It cannot
             * grow (X [3] += Y [2, 3] in place): its input value would be
             * lost, so that is an error, not a reallocation. */
            if (t->buf && pe_place_eq(t->buf->place, ctx->place) && is_input(ctx, i, j, t)) {
                if (t->offset + pe_tensor_nbytes(t) <= t->buf->bytes) continue;
                char ds[128];
                return pe_error(PE_ERR_INVALID,
                                "op %s on %s: output %s '%s' is also its input, and its inferred shape %s %s needs "
                                "%zu bytes where its input value has %zu: an output written in place cannot grow "
                                "(write it to a new var)",
                                info->name, pe_place_str(ctx->place, pb, sizeof pb), info->outputs[i].name,
                                ctx->out_names[i][j], pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, ds, sizeof ds),
                                pe_tensor_nbytes(t), t->buf->bytes - t->offset);
            }
            pe_status st = pe_tensor_resize(t, t->dtype, t->ndim, t->dims, ctx->place);
            if (st != PE_OK)
                return pe_error_wrap(st, "op %s on %s: output %s '%s'", info->name,
                                     pe_place_str(ctx->place, pb, sizeof pb), info->outputs[i].name,
                                     ctx->out_names[i][j]);
        }
    return k(ctx);
}

/* ---- accessors -------------------------------------------------------- */

static int in_idx(const pe_op_ctx *ctx, const char *slot) {
    int i = pe_op_info_input_index(ctx->info, slot);
    PE_ASSERT(i >= 0);
    return i;
}

static int out_idx(const pe_op_ctx *ctx, const char *slot) {
    int i = pe_op_info_output_index(ctx->info, slot);
    PE_ASSERT(i >= 0);
    return i;
}

pe_tensor *pe_ctx_in_at(const pe_op_ctx *ctx, const char *slot, int k) {
    int i = in_idx(ctx, slot);
    return k < ctx->n_in[i] ? ctx->in[i][k] : NULL;
}
pe_tensor *pe_ctx_in(const pe_op_ctx *ctx, const char *slot) { return pe_ctx_in_at(ctx, slot, 0); }
int pe_ctx_n_in(const pe_op_ctx *ctx, const char *slot) { return ctx->n_in[in_idx(ctx, slot)]; }
pe_tensor *pe_ctx_out_at(const pe_op_ctx *ctx, const char *slot, int k) {
    int i = out_idx(ctx, slot);
    return k < ctx->n_out[i] ? ctx->out[i][k] : NULL;
}
pe_tensor *pe_ctx_out(const pe_op_ctx *ctx, const char *slot) { return pe_ctx_out_at(ctx, slot, 0); }
int pe_ctx_n_out(const pe_op_ctx *ctx, const char *slot) { return ctx->n_out[out_idx(ctx, slot)]; }
const char *pe_ctx_in_name(const pe_op_ctx *ctx, const char *slot, int k) {
    int i = in_idx(ctx, slot);
    return k < ctx->n_in[i] ? ctx->in_names[i][k] : "";
}
const char *pe_ctx_out_name(const pe_op_ctx *ctx, const char *slot, int k) {
    int i = out_idx(ctx, slot);
    return k < ctx->n_out[i] ? ctx->out_names[i][k] : "";
}

static const pe_attr *ctx_attr(const pe_op_ctx *ctx, const char *name) {
    for (int i = 0; i < ctx->info->n_attrs; i++)
        if (!strcmp(ctx->info->attrs[i].name, name)) return ctx->attrs[i];
    PE_ASSERT(!"attr not in the op's registry spec");
    return NULL;
}

int64_t pe_ctx_int(const pe_op_ctx *ctx, const char *name) { return ctx_attr(ctx, name)->i; }
double pe_ctx_float(const pe_op_ctx *ctx, const char *name) { return ctx_attr(ctx, name)->f; }
bool pe_ctx_bool(const pe_op_ctx *ctx, const char *name) { return ctx_attr(ctx, name)->i != 0; }
const char *pe_ctx_string(const pe_op_ctx *ctx, const char *name) {
    const char *s = ctx_attr(ctx, name)->s;
    return s ? s : "";
}
const int64_t *pe_ctx_ints(const pe_op_ctx *ctx, const char *name, int *n) {
    const pe_attr *a = ctx_attr(ctx, name);
    *n = a->n;
    return a->ints;
}
const double *pe_ctx_floats(const pe_op_ctx *ctx, const char *name, int *n) {
    const pe_attr *a = ctx_attr(ctx, name);
    *n = a->n;
    return a->floats;
}
const char *const *pe_ctx_strings(const pe_op_ctx *ctx, const char *name, int *n) {
    const pe_attr *a = ctx_attr(ctx, name);
    *n = a->n;
    return (const char *const *)a->strings;
}

pe_status pe_ctx_error(const pe_op_ctx *ctx, pe_status st, const char *fmt, ...) {
    char msg[1024], pb[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *out = "";
    for (int i = 0; i < ctx->info->n_outputs && !*out; i++)
        if (ctx->n_out[i]) out = ctx->out_names[i][0];
    return pe_error(st, "op %s (output '%s') on %s: %s", ctx->info->name, out,
                    pe_place_str(ctx->place, pb, sizeof pb), msg);
}

pe_status pe_infer_same(pe_op_ctx *ctx, const char *in_slot, const char *out_slot) {
    const pe_tensor *x = pe_ctx_in(ctx, in_slot);
    for (int k = 0; k < pe_ctx_n_out(ctx, out_slot); k++) {
        pe_status st = pe_tensor_set_meta(pe_ctx_out_at(ctx, out_slot, k), x->dtype, x->ndim, x->dims);
        if (st != PE_OK) return pe_ctx_error(ctx, st, "%s", pe_last_error());
    }
    return PE_OK;
}

pe_status pe_infer_need_in(pe_op_ctx *ctx, const char *slot, pe_tensor **t) {
    *t = pe_ctx_in(ctx, slot);
    if (!*t) return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s is required but absent", slot);
    return PE_OK;
}

pe_status pe_infer_set_out(pe_op_ctx *ctx, const char *slot, pe_dtype dt, int ndim, const int64_t *dims) {
    for (int k = 0; k < pe_ctx_n_out(ctx, slot); k++) {
        pe_tensor *o = pe_ctx_out_at(ctx, slot, k);
        if (!o) continue;
        if (pe_tensor_set_meta(o, dt, ndim, dims) != PE_OK)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "output %s '%s': %s", slot, pe_ctx_out_name(ctx, slot, k),
                                pe_last_error());
    }
    return PE_OK;
}

pe_status pe_infer_set_meta(pe_op_ctx *ctx, pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims) {
    pe_status st = pe_tensor_set_meta(t, dt, ndim, dims);
    return st == PE_OK ? PE_OK : pe_ctx_error(ctx, st, "%s", pe_last_error());
}

pe_status pe_infer_check_grad(const pe_op_ctx *ctx, const char *slot, const pe_tensor *g, pe_dtype dt, int ndim,
                              const int64_t *dims) {
    if (!g) return pe_ctx_error(ctx, PE_ERR_INVALID, "%s must be given", slot);
    bool ok = g->dtype == dt && g->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = g->dims[i] == dims[i];
    if (ok) return PE_OK;
    char gs[128], ws[128];
    pe_dims_str(g->ndim, g->dims, gs, sizeof gs);
    pe_dims_str(ndim, dims, ws, sizeof ws);
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' is %s %s; the forward output is %s %s", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(g->dtype), gs, pe_dtype_name(dt), ws);
}
