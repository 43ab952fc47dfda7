/* passes/pass_manager.c — runs the build passes in the order BuildStrategy
 * implies (contract in passes/pass_manager.h).
 *
 * How: the program-level passes live in one table, in order, each with the
 * switch that turns it on; they edit a clone of the caller's program. Then
 * the multi-device pass turns that program into the SSA graph the executor
 * runs; SSA-graph passes follow it. Each step can be dumped as DOT so a user
 * (debug_graphviz_path, `pe graph --dump-dir`) sees what every pass did.
 *
 * Why a table: the order is the contract (fusion first, on one program,
 * where patterns are easy to see; then replication over places; then the
 * passes that need the per-place schedule), and a new pass is one row.
 */
#include "passes/pass_manager.h"
#include "graph/program_dot.h"
#include "passes/fuse.h"
#include "passes/multi_device.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef pe_status (*program_pass_fn)(pe_program *p, const pe_fuse_opts *o, int *n_fused);

typedef struct {
    const char *name;
    size_t flag;            /* offsetof the bool switch in pe_build_strategy */
    program_pass_fn fn;
    bool silent_when_idle;  /* nothing changed: no log line, no record, no dump (a default-on pass) */
} program_pass;

/* Program-level passes, in order. The layout first: the fusions then see
 * the ops it switched (a bias add on axis 3); the conv bias before
 * fuse_elewise_add_act_ops, which would take the add into add + relu. fc before fuse_elewise_add_act_ops:
 * it consumes mul + add + act patterns that the other would take half of. */
static const program_pass k_program_passes[] = {
    {"conv_nhwc", offsetof(pe_build_strategy, conv_nhwc), pe_conv_nhwc, true},
    {"fuse_conv_bias", offsetof(pe_build_strategy, fuse_conv_bias), pe_fuse_conv_bias, true},
    {"fuse_gemm_epilogue", offsetof(pe_build_strategy, fuse_gemm_epilogue), pe_fuse_fc, false},
    {"fuse_elewise_add_act_ops", offsetof(pe_build_strategy, fuse_elewise_add_act_ops), pe_fuse_elewise_add_act, false},
    {"fuse_all_optimizer_ops", offsetof(pe_build_strategy, fuse_all_optimizer_ops), pe_fuse_all_optimizer_ops, false},
};

static bool switch_on(const pe_build_strategy *bs, size_t off) { return bs && *(const bool *)((const char *)bs + off); }

/* "<prefix><nn>_<name>.dot" */
static pe_status dump_path(const pe_pass_opts *o, int nn, const char *name, char *buf, size_t n) {
    int r = snprintf(buf, n, "%s%02d_%s.dot", o->dump_prefix, nn, name);
    if (r < 0 || (size_t)r >= n)
        return pe_error(PE_ERR_INVALID, "debug graphviz path '%s' is too long", o->dump_prefix);
    return PE_OK;
}

static pe_status dump_program(const pe_pass_opts *o, int nn, const char *name, const pe_program *p) {
    if (!o->dump_prefix) return PE_OK;
    char path[4096], title[256];
    PE_CHECK(dump_path(o, nn, name, path, sizeof path));
    snprintf(title, sizeof title, "%s %s: %d ops", nn ? "after" : "program", name, p->blocks[0].n_ops);
    return pe_program_write_dot(p, path, title);
}

static pe_status dump_graph(const pe_pass_opts *o, int nn, const char *name, const pe_ssa_graph *g) {
    if (!o->dump_prefix) return PE_OK;
    char path[4096];
    PE_CHECK(dump_path(o, nn, name, path, sizeof path));
    return pe_ssa_graph_write_dot(g, path);
}

static void record(pe_pass_result *res, const char *name, int before, int after, int n_fused, bool skipped) {
    if (!res || res->n >= PE_MAX_PASSES) return;
    res->s[res->n++] = (pe_pass_stat){name, before, after, n_fused, skipped};
}

static long g_calls;

long pe_pass_manager_calls(void) { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }

static const pe_build_strategy k_all_off; /* o->bs NULL: every switch off */

/* The program-level passes on a clone of prog: *out (caller frees) is the
 * rewritten program; *nn counts the dumps written. */
static pe_status run_program_passes(const pe_program *prog, const pe_pass_opts *o, pe_program **out, int *nn,
                                    pe_pass_result *res) {
    *out = NULL;
    if (res) memset(res, 0, sizeof *res);
    if (!prog || prog->n_blocks < 1) return pe_error(PE_ERR_INVALID, "pass manager: no program");
    const pe_build_strategy *bs = o->bs ? o->bs : &k_all_off;
    pe_strmap protect = {0};
    pe_program *p = pe_program_clone(prog);
    pe_status st = p ? PE_OK : pe_error(PE_ERR_NOMEM, "pass manager: out of memory copying the program");
    for (int i = 0; i < o->n_protect && st == PE_OK; i++)
        if (o->protect[i] && pe_strmap_put(&protect, o->protect[i], 1) != 0) st = pe_error(PE_ERR_NOMEM, "out of memory");
    if (st == PE_OK && o->loss_name && pe_strmap_put(&protect, o->loss_name, 1) != 0)
        st = pe_error(PE_ERR_NOMEM, "out of memory");
    pe_fuse_opts fo = {.protect = &protect};
    if (st == PE_OK) st = dump_program(o, (*nn)++, "input", p);

    const int world = o->n_places * (o->n_trainers > 1 ? o->n_trainers : 1); /* places of every trainer */
    for (size_t k = 0; k < sizeof k_program_passes / sizeof k_program_passes[0] && st == PE_OK; k++) {
        const program_pass *pp = &k_program_passes[k];
        if (!switch_on(bs, pp->flag)) continue;
        int before = p->blocks[0].n_ops, n_fused = 0;
        if (pp->fn == pe_fuse_all_optimizer_ops && bs->reduce_strategy == PE_REDUCE_REDUCE && world > 1) {
            /* the reduce strategy runs each parameter's optimizer on its owner place only */
            if (!o->quiet)
                pe_log(PE_LOG_WARN, "BuildStrategy.fuse_all_optimizer_ops works with reduce_strategy all_reduce only "
                       "(reduce runs each optimizer op on the parameter's owner place): not applied");
            record(res, pp->name, before, before, 0, true);
            continue;
        }
        if (pp->fn == pe_fuse_all_optimizer_ops && bs->shard_optimizer && world > 1 &&
            (o->n_trainers <= 1 || bs->shard_across_trainers)) {
            /* the sharded update (passes/multi_device.c) already runs each update once, split over
             * the places; merged ops would run every update on every place */
            if (!o->quiet)
                pe_log(PE_LOG_INFO, "BuildStrategy.fuse_all_optimizer_ops: not applied, shard_optimizer runs each "
                       "update once over the %d places (set shard_optimizer off to merge the optimizer ops)", world);
            record(res, pp->name, before, before, 0, true);
            continue;
        }
        st = pp->fn(p, &fo, &n_fused);
        if (st != PE_OK) break;
        if (pp->silent_when_idle && !n_fused) continue; /* on by default: no line, no dump for a program without convs */
        pe_log(PE_LOG_INFO, "pass %s: %d fused, %d -> %d ops", pp->name, n_fused, before, p->blocks[0].n_ops);
        record(res, pp->name, before, p->blocks[0].n_ops, n_fused, false);
        st = dump_program(o, (*nn)++, pp->name, p);
    }

    pe_strmap_free(&protect);
    if (st != PE_OK) {
        pe_program_free(p);
        return st;
    }
    *out = p;
    return PE_OK;
}

pe_status pe_pass_manager_program(const pe_program *prog, const pe_pass_opts *o, pe_program **out,
                                  pe_pass_result *res) {
    int nn = 0;
    return run_program_passes(prog, o, out, &nn, res);
}

pe_status pe_pass_manager_run(const pe_program *prog, const pe_pass_opts *o, pe_ssa_graph **out,
                              pe_pass_result *res) {
    __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
    *out = NULL;
    const pe_build_strategy *bs = o->bs ? o->bs : &k_all_off;
    const int world = o->n_places * (o->n_trainers > 1 ? o->n_trainers : 1); /* places of every trainer */
    int nn = 0;
    pe_program *p = NULL;
    pe_status st = run_program_passes(prog, o, &p, &nn, res);

    /* ---- program -> SSA graph over the places ---- */
    pe_ssa_graph *g = NULL;
    if (st == PE_OK) st = pe_multi_device_build_world(p, o->n_places, o->n_trainers, o->trainer_id, o->loss_name, bs, &g);
    if (st == PE_OK && bs->fuse_all_reduce_ops && !o->quiet && world > 1) {
        if (bs->reduce_strategy == PE_REDUCE_REDUCE)
            pe_log(PE_LOG_WARN, "BuildStrategy.fuse_all_reduce_ops works with reduce_strategy all_reduce only: "
                   "not applied");
        else if (g->n_fuse_sharded)
            /* the sharded update sums each place's range of the gradient inside the update: there is no
             * allreduce of it to put in a bucket */
            pe_log(PE_LOG_WARN, "BuildStrategy.fuse_all_reduce_ops: %d of the %d gradients are summed inside "
                   "shard_optimizer's sharded updates (each range's reduce-scatter fused with its update: no "
                   "allreduce left to bucket), %d go in buckets; set shard_optimizer off to bucket them all",
                   g->n_fuse_sharded, g->n_fuse_grads, g->n_fuse_grads - g->n_fuse_sharded);
    }
    if (st == PE_OK) {
        record(res, "multi_device", p->blocks[0].n_ops, g->n_h, 0, false);
        st = dump_graph(o, nn++, "multi_device", g);
    }

    /* ---- SSA-graph passes ----
     * fuse_all_reduce_ops (gradient buckets, passes/fuse_all_reduce.c) is
     * applied inside the multi-device pass, which creates the collective
     * handles; the memory plan (enable_inplace / memory_optimize) runs in
     * the executor at the first run, when the feed shapes are known.
     * Passes that transform `g` itself run here, called as
     *     if (st == PE_OK && bs-><switch>) { st = <pass>(g, ...);
     *         record(res, "<name>", ...); st = dump_graph(o, nn++, "<name>", g); }
     * so the dumps stay numbered in execution order. */

    if (st == PE_OK && o->final_dot) st = pe_ssa_graph_write_dot(g, o->final_dot);
    pe_program_free(p); /* the graph holds its own per-place copies */
    if (st != PE_OK) {
        pe_ssa_graph_free(g);
        return st;
    }
    *out = g;
    return PE_OK;
}
