/* tools/cmd_plan.c — `pe plan`: the static memory plan of a program.
 *
 *     pe plan examples/mlp_train.pe --places cpu:2 --batch 128
 *     place=0 peak_bytes_no_reuse=3337216 peak_bytes_reuse=2277760
 *     place=1 peak_bytes_no_reuse=3337216 peak_bytes_reuse=2277760
 *
 * Builds the graph the ParallelExecutor would run — the build passes (the
 * fusion passes --strategy turns on, then the multi-device pass) over N CPU
 * places — gives
 * every var the program reads before writing it (the feeds) the batch
 * split the executor would use (B rows over N places, the last places take
 * the extra rows: pe_batch_shard) in its -1 axis 0, infers every temporary's shape, and
 * runs the memory planner (pe_plan_new, pe/plan.h) as the ParallelExecutor
 * would with enable_inplace and memory_optimize on (--strategy may set any
 * BuildStrategy field, as for `pe graph`; --loss names the loss). Per place it prints
 * the bytes the temporaries take without reuse (each its own allocation,
 * as without the plan) and with the plan (the arena). Parameter shapes come
 * from their declarations, or from the scope after --startup S when given.
 * --fetch NAME protects NAME (fetched vars are never reused), --no-inplace
 * and --no-reuse turn the two halves of the plan off, --activations leaves
 * the parameter gradients (op_role_var) out of both figures (they are
 * model-sized, not batch-sized, and fuse_all_reduce_ops keeps them in
 * gradient buckets), --verbose lists every planned var with its offset.
 */
#include "tool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct plan_args {
    const char *program, *startup, *loss;
    pe_build_strategy bs;
    int n_places;
    int64_t batch;
    const char **fetch;   /* [argc] */
    int n_fetch;
    bool no_inplace, no_reuse, verbose, activations;
} plan_args;

static int parse_int(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < lo || n > hi)
        return pe_tool_usage_error("plan", "%s '%s' is not an integer from %lld to %lld", flag, v, (long long)lo,
                                   (long long)hi);
    *out = n;
    return PE_EXIT_OK;
}

static int parse_args(int argc, char **argv, plan_args *a) {
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        int r;
        int prc;
        if (pe_tool_program_arg("plan", arg, &only_pos, &a->program, &prc)) {
            if (prc != PE_EXIT_OK) return prc;
            continue;
        }
        if (!strcmp(arg, "--no-inplace")) { a->no_inplace = true; continue; }
        if (!strcmp(arg, "--no-reuse")) { a->no_reuse = true; continue; }
        if (!strcmp(arg, "--verbose")) { a->verbose = true; continue; }
        if (!strcmp(arg, "--activations")) { a->activations = true; continue; }
        if (pe_tool_places_flag("plan", argc, argv, &i, NULL, &a->n_places, &r) ||
            pe_tool_strategy_flag("plan", argc, argv, &i, &a->bs, &r)) {
            if (r != PE_EXIT_OK) return r;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--loss", &v)) != 0) {
            if (r < 0 || !*v) return pe_tool_usage_error("plan", "--loss needs a var name");
            a->loss = v;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--startup", &v)) != 0) {
            if (r < 0 || !*v) return pe_tool_usage_error("plan", "--startup needs a program file");
            if (a->startup) return pe_tool_usage_error("plan", "--startup given twice");
            a->startup = v;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--batch", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error("plan", "--batch needs a value");
            int rc = parse_int("--batch", v, 1, INT64_C(1) << 40, &a->batch);
            if (rc != PE_EXIT_OK) return rc;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--fetch", &v)) != 0) {
            if (r < 0 || !*v) return pe_tool_usage_error("plan", "--fetch needs a var name");
            a->fetch[a->n_fetch++] = v;
            continue;
        }
        return pe_tool_usage_error("plan", "unknown flag '%s'", arg);
    }
    if (a->no_inplace) a->bs.enable_inplace = false;
    if (a->no_reuse) a->bs.memory_optimize = false;
    if (!a->program) return pe_tool_usage_error("plan", "missing PROGRAM");
    if (!a->n_places) return pe_tool_usage_error("plan", "missing --places cpu:N");
    if (!a->batch) return pe_tool_usage_error("plan", "missing --batch B");
    if (a->batch < a->n_places)
        return pe_tool_usage_error("plan", "--batch %lld is smaller than the %d places: each place needs a row",
                                   (long long)a->batch, a->n_places);
    return PE_EXIT_OK;
}

typedef struct {
    const plan_args *a;
    pe_scope *scope;   /* after --startup, or NULL */
} meta_user;

/* Feeds: the declaration with axis 0 = the place's rows; persistables: the
 * startup scope's tensor, else the declaration. */
static pe_status tool_meta(void *user, int place, const char *name, const pe_var *decl, pe_tensor *meta) {
    meta_user *u = user;
    if (decl && decl->persistable && u->scope) {
        const pe_tensor *t = pe_scope_find_var(u->scope, name);
        if (t && t->buf) return pe_tensor_set_meta(meta, t->dtype, t->ndim, t->dims);
    }
    if (!decl)
        return pe_error(PE_ERR_NOT_FOUND, "var '%s' is read before any op writes it but is not declared in block 0",
                        name);
    int64_t rows = pe_batch_shard(u->a->batch, u->a->n_places, place, NULL);
    int64_t dims[PE_MAX_DIMS];
    char db[128];
    for (int d = 0; d < decl->ndim; d++) {
        dims[d] = decl->dims[d];
        if (dims[d] >= 0) continue;
        if (d == 0 && !decl->persistable) {
            dims[d] = rows;
            continue;
        }
        return pe_error(PE_ERR_INVALID,
                        "var '%s' is declared %s: only axis 0 of a fed var may be -1 (the batch)%s", name,
                        pe_dims_str(decl->ndim, decl->dims, db, sizeof db),
                        decl->persistable ? "; a persistable needs its shape (or --startup)" : "");
    }
    return pe_tensor_set_meta(meta, decl->dtype, decl->ndim, dims);
}

/* The names the plan leaves out: --fetch, and with --activations every
 * parameter gradient (the grad of each op_role_var pair). Borrowed. */
static const char **protected_names(const plan_args *a, const pe_program *prog, int *n) {
    const pe_block *b = &prog->blocks[0];
    int cap = a->n_fetch + 1;
    for (int i = 0; a->activations && i < b->n_ops; i++) {
        const pe_attr *rv = pe_op_attr(&b->ops[i], "op_role_var");
        if (rv && rv->type == PE_ATTR_STRINGS) cap += rv->n / 2;
    }
    const char **names = malloc(sizeof *names * (size_t)cap);
    if (!names) return NULL;
    *n = 0;
    for (int i = 0; i < a->n_fetch; i++) names[(*n)++] = a->fetch[i];
    for (int i = 0; a->activations && i < b->n_ops; i++) {
        const pe_attr *rv = pe_op_attr(&b->ops[i], "op_role_var");
        if (rv && rv->type == PE_ATTR_STRINGS)
            for (int k = 0; k + 1 < rv->n; k += 2) names[(*n)++] = rv->strings[k + 1];
    }
    return names;
}

static int plan_program(const plan_args *a, const pe_program *prog, pe_scope *scope) {
    pe_plan *plan = NULL;
    meta_user u = {a, scope};
    int n_prot = 0;
    const char **prot = protected_names(a, prog, &n_prot);
    pe_status st = PE_OK;
    if (!prot) st = pe_error(PE_ERR_NOMEM, "out of memory");
    /* protected_names lists the fetches first: the passes keep those too. */
    pe_plan_opts po = {.n_places = a->n_places, .loss_name = a->loss, .bs = &a->bs, .protect = a->fetch,
                       .n_protect = a->n_fetch, .exclude = prot ? prot + a->n_fetch : NULL,
                       .n_exclude = prot ? n_prot - a->n_fetch : 0, .meta = tool_meta, .user = &u};
    if (st == PE_OK) st = pe_plan_new(prog, &po, &plan);
    free(prot);
    int rc = PE_EXIT_OK;
    if (st != PE_OK) {
        rc = pe_tool_fail_status(st, "planning %s", a->program);
    } else {
        for (int p = 0; p < pe_plan_n_places(plan); p++) {
            const pe_plan_place *pp = pe_plan_place_at(plan, p);
            printf("place=%d peak_bytes_no_reuse=%" PRId64 " peak_bytes_reuse=%" PRId64 "\n", p,
                   pp->no_reuse_bytes, pp->arena_bytes);
            if (!a->verbose) continue;
            printf("  %d temporaries, %d written in place of an input, %d over dead bytes\n", pp->n_vars,
                   pp->n_inplace, pp->n_shared);
            for (int i = 0; i < pp->n_vars; i++)
                printf("  %-40s offset=%-10" PRId64 " bytes=%-10" PRId64 "%s\n", pp->vars[i].name, pp->vars[i].offset,
                       pp->vars[i].bytes, pp->vars[i].inplaced ? " in-place" : "");
            if (pp->n_workspaces) printf("  %d op workspaces (kernel scratch, live while the op runs)\n", pp->n_workspaces);
            for (int i = 0; i < pp->n_workspaces; i++) {
                char what[96];
                snprintf(what, sizeof what, "op %d (%s) workspace", pp->workspaces[i].op_index, pp->workspaces[i].op_type);
                printf("  %-40s offset=%-10" PRId64 " bytes=%-10" PRId64 "\n", what, pp->workspaces[i].offset,
                       pp->workspaces[i].bytes);
            }
        }
    }
    pe_plan_free(plan);
    return rc;
}

int pe_cmd_plan(int argc, char **argv) {
    plan_args a;
    memset(&a, 0, sizeof a);
    pe_pe_options defaults; /* the executor's BuildStrategy defaults */
    pe_pe_options_default(&defaults);
    a.bs = defaults.build_strategy;
    a.bs.enable_inplace = a.bs.memory_optimize = true;
    a.fetch = calloc((size_t)argc + 1, sizeof *a.fetch);
    if (!a.fetch) return pe_tool_fail("out of memory");
    int rc = parse_args(argc, argv, &a);
    if (rc != PE_EXIT_OK) {
        free(a.fetch);
        return rc;
    }
    pe_program *prog = NULL, *startup = NULL;
    pe_scope *scope = NULL;
    pe_executor *ex = NULL;
    pe_status st = pe_program_load_file(a.program, &prog);
    if (st != PE_OK) {
        rc = pe_tool_fail_file(st, a.program);
        goto done;
    }
    if (a.loss && !pe_program_find_var(prog, 0, a.loss)) {
        rc = pe_tool_fail("--loss '%s' is not a var of block 0 of %s", a.loss, a.program);
        goto done;
    }
    for (int i = 0; i < a.n_fetch; i++)
        if (!pe_program_find_var(prog, 0, a.fetch[i])) {
            rc = pe_tool_fail("--fetch '%s' is not a var of block 0 of %s", a.fetch[i], a.program);
            goto done;
        }
    if (a.startup) {
        if ((st = pe_program_load_file(a.startup, &startup)) != PE_OK) {
            rc = pe_tool_fail_file(st, a.startup);
            goto done;
        }
        scope = pe_scope_new(NULL);
        ex = scope ? pe_executor_new(pe_place_cpu(0)) : NULL;
        if (!ex) {
            rc = pe_tool_fail("out of memory");
            goto done;
        }
        if ((st = pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL)) != PE_OK) {
            rc = pe_tool_fail_status(st, "running the startup program %s", a.startup);
            goto done;
        }
    }
    rc = plan_program(&a, prog, scope);
done:
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(startup);
    pe_program_free(prog);
    free(a.fetch);
    return rc;
}
