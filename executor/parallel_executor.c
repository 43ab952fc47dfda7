/* executor/parallel_executor.c — the ParallelExecutor (DESIGN.md §4):
 * construction, the run body, and the table from handle kind to the
 * function that runs it.
 *
 * Construction decides everything a run needs: the build passes
 * (passes/pass_manager.c: fusion, then the multi-device pass) turn the
 * program into an SSA graph over the N places; when a fusion pass removed
 * vars of the program, a second graph is built with those vars kept, for a
 * run that fetches one (so pe_run never calls the pass manager); the memory
 * plan of each graph (executor/memory_plan/) is made run by run from the
 * feed shapes; place scopes and the broadcast of persistables
 * (local_scopes.c), the collectives (runtime/comm), the scheduler's pool.
 *
 * A run: feeds split along axis 0 (feed_fetch.c), each place's loss-gradient
 * scale written into its [1] PE_LOSS_SCALE_VAR tensor (the seed op reads it;
 * the program is never written), the graph run on the scheduler's thread pool
 * (op handles call the kernels with cores/places OpenMP threads each;
 * collective handles call runtime/comm: grad_buckets.c, opt_shard.c), then
 * fetches concatenated along axis 0 in place order. pe_run (dict feed) and
 * pe_run_list (one dict per place) share one body.
 *
 * Strategy values out of range are refused at construction
 * (pe_pe_options_check), never clamped. With check_nan_inf
 * (FLAGS_check_nan_inf) the run hands the scheduler run_handle_checked,
 * which checks what each handle wrote (executor/nan_inf.c); with it off
 * the handles run exactly as before. The timeline (timeline_path /
 * PE_TIMELINE) works the same way: run_handle_timed around the handle, a
 * step span around the run, nothing at all when it is off.
 *
 * enable_sequential_execution runs no pool: the handles one after another
 * on the calling thread, in the graph's one topological order
 * (pe_ssa_graph_topo_order: the handle order, except where an edge added
 * later goes back — memory_optimize's early updates move an optimizer op
 * up), so every edge holds, and with it the memory plan made from them.
 */
#include "executor/nan_inf.h"
#include "executor/pe_internal.h"
#include "passes/pass_manager.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pe_pe_options_default(pe_pe_options *o) {
    memset(o, 0, sizeof *o);
    o->exec_strategy.num_iteration_per_drop_scope = 100;
    o->exec_strategy.num_iteration_per_run = 1;
    o->build_strategy.reduce_strategy = PE_REDUCE_ALL_REDUCE;
    o->build_strategy.gradient_scale_strategy = PE_GRAD_SCALE_BATCH_SHARE;
    o->build_strategy.fuse_grad_size_in_MB = 25;
    o->build_strategy.fuse_first_grad_size_in_MB = 1;
    o->build_strategy.shard_optimizer = true;
    o->build_strategy.conv_nhwc = true;
    o->build_strategy.fuse_conv_bias = true;
    /* On by default in PE (Paddle: off): the fused ops compute the unfused
     * ops' arithmetic bit for bit, with one op and one pass over the output
     * fewer per layer (docs/guide.md, BuildStrategy). */
    o->build_strategy.fuse_gemm_epilogue = true;
    o->build_strategy.fuse_elewise_add_act_ops = true;
    o->num_trainers = 1;
}

int pe_cpu_place_count(void) {
    const char *e = getenv("CPU_NUM");
    if (!e || !*e) {
        static int warned;
        /* The one place's kernels get every OpenMP thread, so the cores are busy
         * either way unless OMP_NUM_THREADS=1: only then is CPU_NUM the way to use
         * them. Which layout is faster depends on the model (docs/benchmarks.md:
         * the MLP on 1 place, the CNN about even). */
        const int procs = omp_get_num_procs(), threads = pe_mp_kernel_threads(1);
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED) && procs > 1) {
            if (threads > 1)
                pe_log(PE_LOG_WARN, "CPU_NUM is not set: using 1 CPU place, its kernels on %d threads "
                       "(CPU_NUM=%d would make %d data-parallel places of 1 thread each)", threads, procs, procs);
            else
                pe_log(PE_LOG_WARN, "CPU_NUM is not set: using 1 CPU place of 1 thread (OMP_NUM_THREADS=1) on a "
                       "machine with %d cores; set CPU_NUM=%d to train data-parallel on all of them", procs, procs);
        }
        return 1;
    }
    char *end;
    long v = strtol(e, &end, 10);
    if (*end || v < 1 || v > PE_MAX_PLACES) {
        pe_error(PE_ERR_INVALID, "CPU_NUM='%s' is not a place count (an integer from 1 to %d)", e, PE_MAX_PLACES);
        return -1;
    }
    return (int)v;
}

/* ---- handles: kind -> run function ---------------------------------------- */

static pe_status run_op(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    pe_status st = pe_op_run(&pe->ctxs[h]);
    if (st == PE_OK) return PE_OK;
    char pb[32];
    const char *msg = pe_last_error();
    /* kernel messages already name the op and place; add the op index */
    if (!strstr(msg, pe_pe_place_name(pe, hd->place, pb)))
        return pe_error_wrap(st, "op %d (%s) on %s", hd->op_idx, pe->ctxs[h].info->name, pb);
    return pe_error_wrap(st, "op %d", hd->op_idx);
}

static pe_status run_join(pe_parallel_executor *pe, int h) {
    (void)pe;
    (void)h;
    return PE_OK;
}

typedef pe_status (*handle_fn)(pe_parallel_executor *pe, int h);

static const handle_fn k_handle_run[PE_HANDLE_KIND_COUNT] = {
    [PE_HANDLE_OP] = run_op,
    [PE_HANDLE_ALLREDUCE] = pe_pe_run_collective,
    [PE_HANDLE_REDUCE] = pe_pe_run_collective,
    [PE_HANDLE_BCAST] = pe_pe_run_collective,
    [PE_HANDLE_ALLREDUCE_FUSED] = pe_pe_run_bucket,
    [PE_HANDLE_OPT_SHARD] = pe_pe_run_opt_shard,
    [PE_HANDLE_JOIN] = run_join,
    [PE_HANDLE_SHARD_SUM] = pe_pe_run_shard_sum,
    [PE_HANDLE_SHARD_GATHER] = pe_pe_run_shard_gather,
    [PE_HANDLE_ALLGATHER] = pe_pe_run_allgather,
    [PE_HANDLE_SCATTER] = pe_pe_run_scatter,
};

/* check_nan_inf: what handle h wrote (a collective that completes later is
 * checked by its callback: grad_buckets.c:coll_done). */
static pe_status check_nan_inf(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    switch (hd->kind) {
    case PE_HANDLE_OP: return pe_nan_inf_check_op(&pe->ctxs[h], hd->op_idx);
    case PE_HANDLE_OPT_SHARD: return pe_pe_check_opt_shard(pe, h);
    case PE_HANDLE_JOIN: return PE_OK;
    default: return pe_pe_check_collective(pe, h);
    }
}

static pe_status run_handle(void *user, int h) {
    pe_parallel_executor *pe = user;
    return k_handle_run[pe->g->h[h].kind](pe, h);
}

/* run_handle, then check_nan_inf: the function a run hands the scheduler
 * when the switch is on, so a run with it off costs nothing per handle. */
static pe_status run_handle_checked(void *user, int h) {
    pe_status st = run_handle(user, h);
    return st == PE_OK ? check_nan_inf(user, h) : st;
}

/* The timeline on: the handle between two clock reads (executor/timeline.c).
 * A collective that completes later is recorded by its callback
 * (grad_buckets.c:coll_done), from the start kept here before the issue. */
static pe_status run_handle_timed(void *user, int h) {
    pe_parallel_executor *pe = user;
    const int64_t t0 = pe_timeline_now();
    pe->coll_done[h].t0 = t0;
    pe_status st = pe->check_nan_inf ? run_handle_checked(pe, h) : run_handle(pe, h);
    if (st != PE_SCHED_PENDING) pe_timeline_handle(pe->tl, pe->g, h, t0, pe_timeline_now());
    return st;
}

/* ---- construction ------------------------------------------------------ */

static void free_variant(pe_graph_variant *v) {
    pe_mem_arenas_free(v->arenas);
    pe_ssa_graph_free(v->g);
    free(v->order);
    v->arenas = NULL;
    v->g = NULL;
    v->order = NULL;
}

void pe_parallel_executor_free(pe_parallel_executor *pe) {
    if (!pe) return;
    if (pe->tl && pe_timeline_steps(pe->tl) > 0 && pe_timeline_write(pe->tl, NULL) != PE_OK)
        pe_log(PE_LOG_WARN, "ParallelExecutor: %s", pe_last_error());
    pe_timeline_free(pe->tl);
    pe_sched_free(pe->sched);
    pe_drop_local_exe_scopes(pe);
    pe_pe_free_feed_views(pe);
    free(pe->shared_state);
    free(pe->ctxs);
    free(pe->coll_done);
    pe_pe_free_place_scopes(pe);
    pe_pe_free_comm(pe);
    for (int i = 0; i < 2; i++) free_variant(&pe->variants[i]);
    free(pe);
}

/* One graph to run (the build passes on a copy of the main program, keeping
 * `protect`) and its memory plan. DOT dumps for the first graph only when
 * debug_graphviz_path is set (<path>.<nn>_<pass>.dot per pass, the final SSA
 * graph at <path>). */
static pe_status build_variant(const pe_parallel_executor *pe, const char *const *protect, int n_protect, bool dump,
                               pe_graph_variant *out) {
    const char *path = dump ? pe->opt.build_strategy.debug_graphviz_path : NULL;
    char prefix[4096];
    if (path && snprintf(prefix, sizeof prefix, "%s.", path) >= (int)sizeof prefix)
        return pe_error(PE_ERR_INVALID, "debug_graphviz_path '%s' is too long", path);
    pe_build_strategy bs = pe->opt.build_strategy;
    if (pe->places[0].kind != PE_PLACE_CPU) {
        bs.shard_optimizer = false; /* CPU places share the state */
        bs.conv_nhwc = false;       /* the CUDA kernels are NCHW (cuDNN picks its own algorithms) */
        bs.fuse_conv_bias = false;  /* (oneDNN's epilogue; the CUDA path keeps its bias add) */
    }
    pe_pass_opts po = {.n_places = pe->n, .n_trainers = pe->opt.num_trainers,
                       .trainer_id = pe->opt.trainer_id, .loss_name = pe->opt.loss_name, .bs = &bs, .protect = protect,
                       .n_protect = n_protect, .dump_prefix = path ? prefix : NULL, .final_dot = path,
                       .quiet = !dump /* the graph with the fused vars kept: the first build reported */};
    PE_CHECK(pe_pass_manager_run(pe->prog, &po, &out->g, NULL));
    if (pe->opt.num_trainers > 1) PE_CHECK(pe_pe_chain_collectives(out->g)); /* one issue order on every trainer */
    if (pe->sequential) {
        /* One handle after another in a topological order, never the bare
         * handle order: an edge added after the handles were made may go
         * back (memory_optimize on one place runs each optimizer op before
         * the next backward op), and the memory plan below is sound only for
         * orders that keep every edge. */
        if (!(out->order = malloc(sizeof *out->order * (size_t)(out->g->n_h ? out->g->n_h : 1))))
            return pe_error(PE_ERR_NOMEM, "out of memory ordering the ParallelExecutor's graph");
        PE_CHECK(pe_ssa_graph_topo_order(out->g, out->order));
    }
    if (bs.memory_optimize || bs.enable_inplace) {
        PE_CHECK(pe_mem_arenas_new(out->g, pe->places, bs.memory_optimize, bs.enable_inplace,
                                   pe->kernel_threads, &out->arenas));
        PE_CHECK(pe_mem_arenas_protect(out->arenas, PE_LOSS_SCALE_VAR));
    }
    return pe_pe_protect_buckets((pe_parallel_executor *)pe, out->arenas, out->g);
}

/* Whether the passes changed var `name` of the main program in graph block
 * gb: removed (a fusion) or stored channels last (conv_nhwc): a fetch of it
 * needs the graph built with it protected. */
static bool var_changed(const pe_block *b, const pe_block *gb, const char *name) {
    const pe_var *g = pe_block_find_var(gb, name);
    if (!g) return pe_block_find_var(b, name) != NULL; /* not in the main program either: fetch_one names it */
    return g->channels_last;
}

/* The graphs to run: the program as the passes make it and, when a pass
 * removed some of its vars or changed their layout, the program with those
 * vars kept as they are (for a run that fetches one). */
static pe_status build_graphs(pe_parallel_executor *pe) {
    PE_CHECK(build_variant(pe, NULL, 0, true, &pe->variants[0]));
    const pe_block *b = &pe->prog->blocks[0], *gb = &pe->variants[0].g->progs[0]->blocks[0];
    const char **removed = calloc((size_t)(b->n_vars ? b->n_vars : 1), sizeof *removed);
    if (!removed) return pe_error(PE_ERR_NOMEM, "out of memory building the ParallelExecutor's graphs");
    int n = 0;
    for (int i = 0; i < b->n_vars; i++)
        if (var_changed(b, gb, b->vars[i].name)) removed[n++] = b->vars[i].name;
    pe_status st = n ? build_variant(pe, removed, n, false, &pe->variants[1]) : PE_OK;
    free(removed);
    pe->g = pe->variants[0].g;
    pe->arenas = pe->variants[0].arenas;
    pe->order = pe->variants[0].order;
    return st;
}

/* What the places hold of the graph in use: contexts, the sharded state
 * and the coalesced optimizer state. */
static pe_status adopt_graph(pe_parallel_executor *pe) {
    size_t n_h = (size_t)(pe->g->n_h ? pe->g->n_h : 1);
    free(pe->ctxs);
    free(pe->coll_done);
    pe->ctxs = calloc(n_h, sizeof *pe->ctxs);
    pe->coll_done = calloc(n_h, sizeof *pe->coll_done);
    if (!pe->ctxs || !pe->coll_done) return pe_error(PE_ERR_NOMEM, "out of memory");
    for (int h = 0; h < pe->g->n_h; h++) pe->coll_done[h] = (pe_coll_done){pe, h, 0};
    free(pe->shared_state);
    pe->shared_state = NULL;
    pe->n_shared_state = 0;
    return pe_pe_collect_sharded_state(pe);
}

/* A fetch of a var a pass removed or re-laid-out (var_changed): from now
 * on run the graph built with it kept. Local scopes are dropped (they hold
 * the old graph's temporaries). */
static pe_status select_graph(pe_parallel_executor *pe, const char *const *fetch, int n_fetch) {
    const pe_graph_variant *keep = &pe->variants[1];
    const pe_block *b = &pe->prog->blocks[0];
    for (int i = 0; i < n_fetch; i++) {
        if (!var_changed(b, &pe->g->progs[0]->blocks[0], fetch[i])) continue;
        if (!keep->g || pe->g == keep->g || var_changed(b, &keep->g->progs[0]->blocks[0], fetch[i]))
            return PE_OK; /* fetch_one names the var */
        pe_log(PE_LOG_INFO, "fetch '%s' was removed or re-laid-out (NHWC) by a build pass: running the graph built "
               "with those vars kept", fetch[i]);
        pe_drop_local_exe_scopes(pe);
        pe_pe_free_feed_views(pe);
        pe->g = keep->g;
        pe->arenas = keep->arenas;
        pe->order = keep->order;
        PE_CHECK(adopt_graph(pe));
        PE_CHECK(pe_pe_coalesce_optimizer_state(pe));
        PE_CHECK(pe_pe_share_sharded_state(pe));
        const char *path = pe->opt.build_strategy.debug_graphviz_path;
        return path ? pe_ssa_graph_write_dot(pe->g, path) : PE_OK;
    }
    return PE_OK;
}

/* The runtime services each place's kernels see (ctx->svc): the place's
 * rank of the collectives for ops that talk to other places; the CUDA
 * stream and handles come with the CUDA backend. Contexts are remade
 * after a change (they borrow the struct, which stays put). */
static void set_services(pe_parallel_executor *pe) {
    for (int p = 0; p < pe->n; p++) pe->svc[p] = (pe_place_services){.comm = pe->comm ? pe->comm->ranks[p] : NULL};
}

static pe_status check_places(const pe_place *places, int n_places) {
    char pb[32], qb[32];
    for (int i = 0; i < n_places; i++) {
        if (places[i].kind != places[0].kind)
            return pe_error(PE_ERR_INVALID, "ParallelExecutor: places mix CPU and CUDA (%s and %s)",
                            pe_place_str(places[0], pb, sizeof pb), pe_place_str(places[i], qb, sizeof qb));
        if (places[i].kind == PE_PLACE_CUDA) {
#ifdef PE_WITH_CUDA
            if (places[i].id < 0 || places[i].id >= pe_cuda_device_count())
                return pe_error(PE_ERR_INVALID, "ParallelExecutor: %s does not exist (%d CUDA devices visible)",
                                pe_place_str(places[i], pb, sizeof pb), pe_cuda_device_count());
#else
            return pe_error(PE_ERR_UNSUPPORTED, "ParallelExecutor: %s requested but PE was built without CUDA",
                            pe_place_str(places[i], pb, sizeof pb));
#endif
        }
    }
    return PE_OK;
}

/* The strategy values a run can use: everything else is refused here,
 * naming the field, the value and what is allowed (nothing is clamped). */
pe_status pe_pe_options_check(const pe_pe_options *o) {
    const pe_exec_strategy *es = &o->exec_strategy;
    const pe_build_strategy *bs = &o->build_strategy;
    if (es->num_threads < 0 || es->num_threads > PE_MAX_NUM_THREADS)
        return pe_error(PE_ERR_INVALID, "ExecutionStrategy.num_threads = %d is out of range: allowed 0 (automatic: "
                        "places - 1 on CPU, at least 1; places x 4 on CUDA) or 1 to %d", es->num_threads,
                        PE_MAX_NUM_THREADS);
    if (es->num_iteration_per_drop_scope < 0)
        return pe_error(PE_ERR_INVALID, "ExecutionStrategy.num_iteration_per_drop_scope = %d is out of range: allowed "
                        "0 (never drop the local scopes) or a positive count of runs",
                        es->num_iteration_per_drop_scope);
    if (es->num_iteration_per_run < 1)
        return pe_error(PE_ERR_INVALID, "ExecutionStrategy.num_iteration_per_run = %d is out of range: allowed a "
                        "positive count of iterations (1 or more)", es->num_iteration_per_run);
    const struct { const char *name; double v; } sizes[] = {
        {"fuse_grad_size_in_MB", bs->fuse_grad_size_in_MB},
        {"fuse_first_grad_size_in_MB", bs->fuse_first_grad_size_in_MB}};
    for (int i = 0; i < 2; i++)
        if (!isfinite(sizes[i].v) || sizes[i].v <= 0)
            return pe_error(PE_ERR_INVALID, "BuildStrategy.%s = %g is out of range: allowed a finite size in MB "
                            "greater than 0", sizes[i].name, sizes[i].v);
    if ((unsigned)bs->reduce_strategy >= PE_REDUCE_COUNT)
        return pe_error(PE_ERR_INVALID, "BuildStrategy.reduce_strategy = %d is out of range: allowed %d (all_reduce) "
                        "or %d (reduce)", (int)bs->reduce_strategy, PE_REDUCE_ALL_REDUCE, PE_REDUCE_REDUCE);
    if ((unsigned)bs->gradient_scale_strategy >= PE_GRAD_SCALE_COUNT)
        return pe_error(PE_ERR_INVALID, "BuildStrategy.gradient_scale_strategy = %d is out of range: allowed %d "
                        "(batch_share), %d (coeff_num_device), %d (one) or %d (customized)",
                        (int)bs->gradient_scale_strategy, PE_GRAD_SCALE_BATCH_SHARE, PE_GRAD_SCALE_COEFF_NUM_DEVICE,
                        PE_GRAD_SCALE_ONE, PE_GRAD_SCALE_CUSTOMIZED);
    return PE_OK;
}

/* ExecutionStrategy.timeline_path, else PE_TIMELINE: the recorder. With
 * PE_TIMELINE every executor of the process after the first gets its own
 * file (".pe<k>" in the name), so an eval executor never overwrites the
 * training one's. */
static pe_status make_timeline(pe_parallel_executor *pe) {
    const char *path = pe->opt.exec_strategy.timeline_path;
    int instance = 0;
    if (!path || !*path) {
        static _Atomic int n_env;
        path = getenv("PE_TIMELINE");
        if (!path || !*path) return PE_OK;
        instance = atomic_fetch_add(&n_env, 1);
    }
    const int rank = pe->opt.num_trainers > 1 ? pe->opt.trainer_id : 0;
    pe_status st = pe_timeline_new(path, instance, rank, pe->n, pe->places, 0, &pe->tl);
    return st == PE_OK ? PE_OK : pe_error_wrap(st, "ExecutionStrategy.timeline_path / PE_TIMELINE");
}

pe_status pe_pe_write_timeline(pe_parallel_executor *pe, const char *path) {
    if (!pe) return pe_error(PE_ERR_INVALID, "pe_pe_write_timeline: NULL executor");
    if (!pe->tl)
        return pe_error(PE_ERR_INVALID, "ParallelExecutor: the timeline is off: set ExecutionStrategy.timeline_path "
                        "or PE_TIMELINE=<dir-or-prefix> before constructing the executor");
    return pe_timeline_write(pe->tl, path);
}

const char *pe_pe_timeline_path(const pe_parallel_executor *pe) {
    return pe && pe->tl ? pe_timeline_path(pe->tl) : NULL;
}

pe_status pe_parallel_executor_new(const pe_place *places, int n_places, const pe_program *main_program,
                                   pe_scope *scope, const pe_pe_options *opt, pe_parallel_executor **out) {
    *out = NULL;
    if (!places || !main_program || !scope)
        return pe_error(PE_ERR_INVALID, "ParallelExecutor: places, main_program and scope are required");
    if (n_places < 1 || n_places > PE_MAX_PLACES)
        return pe_error(PE_ERR_INVALID, "ParallelExecutor: %d places (1 to %d supported)", n_places, PE_MAX_PLACES);
    pe_pe_options o;
    if (opt) o = *opt;
    else pe_pe_options_default(&o);
    PE_CHECK(pe_pe_options_check(&o));
    if (o.num_trainers < 1)
        return pe_error(PE_ERR_INVALID, "ParallelExecutor: num_trainers=%d (1 = this process only)", o.num_trainers);
    PE_CHECK(check_places(places, n_places));
    for (int i = 0; i < main_program->blocks[0].n_ops; i++) {
        const int id = pe_op_type_id(main_program->blocks[0].ops[i].type);
        if (id == PE_OP_send || id == PE_OP_recv || id == PE_OP_send_barrier || id == PE_OP_fetch_barrier ||
            id == PE_OP_listen_and_serv)
            return pe_error(PE_ERR_UNSUPPORTED, "ParallelExecutor: op %d is %s: parameter-server programs "
                            "(DistributeTranspiler's trainer and pserver programs) run on the single-place Executor "
                            "(fluid.Executor(place).run(program))", i, main_program->blocks[0].ops[i].type);
    }
    const pe_parallel_executor *src = o.share_vars_from;
    if (src && (!src->built || src->n != n_places))
        return pe_error(PE_ERR_INVALID,
                        src->built ? "ParallelExecutor: share_vars_from has %d places, this executor %d: they must match"
                                   : "ParallelExecutor: share_vars_from executor was never built (%d/%d places): "
                                     "construct and run it first",
                        src->n, n_places);
    if (o.loss_name && !pe_program_find_var(main_program, 0, o.loss_name))
        return pe_error(PE_ERR_NOT_FOUND, "ParallelExecutor: loss_name '%s' is not a variable of the main program",
                        o.loss_name);
    pe_parallel_executor *pe = calloc(1, sizeof *pe);
    if (!pe) return pe_error(PE_ERR_NOMEM, "out of memory creating a ParallelExecutor");
    pe->n = n_places;
    memcpy(pe->places, places, sizeof *places * (size_t)n_places);
    pe->prog = main_program;
    pe->opt = o;
    pe->check_nan_inf = o.exec_strategy.check_nan_inf || pe_flag_check_nan_inf();
    /* Intra-op threads: the OpenMP budget (OMP_NUM_THREADS, default the
     * cores) shared by the places, never more threads than that in total. */
    pe->kernel_threads = pe_mp_kernel_threads(n_places);
    /* One CPU place whose kernels already fork a team over every core runs
     * its ops one after another (the automatic pool only): a second thread
     * taking handles starts another op's team beside the first, more
     * threads than cores, and each team waits at its barriers for a member
     * that the other team's threads preempted. The MLP of the main job, 1
     * place, kernels on 2 threads: 47,000-50,000 samples/s pooled,
     * 75,000-78,000 sequential, the same bits (docs/benchmarks.md, "Small
     * per-place batches"). Across processes the pool stays: it overlaps the
     * collectives with the backward pass. */
    pe->sequential = o.build_strategy.enable_sequential_execution ||
                     (places[0].kind == PE_PLACE_CPU && n_places == 1 && pe->kernel_threads > 1 &&
                      o.exec_strategy.num_threads == 0 && o.num_trainers <= 1);
    /* The collectives first: across processes, every trainer checks the
     * world before anything can fail on one trainer alone. A collective
     * runs on a scheduler thread while the other places keep computing: it
     * gets one place's share of the OpenMP budget. (More threads would
     * oversubscribe the cores, and libgomp's idle team threads spin for a
     * while after each region, stealing the other places' cores: 2 places
     * on 2 cores trained the MLP slower than one.) */
    pe_status st = pe_pe_make_comm(pe);
    if (st != PE_OK || (st = make_timeline(pe)) != PE_OK) goto fail;
    set_services(pe);
    if ((st = build_graphs(pe)) != PE_OK || (st = adopt_graph(pe)) != PE_OK ||
        (st = pe_pe_make_place_scopes(pe, scope)) != PE_OK || (st = pe_pe_broadcast_persistables(pe)) != PE_OK)
        goto fail;
    /* Automatic pool on CPU: places - 1 workers (at least 1), which with
     * the calling thread (it runs handles too, executor/scheduler.c) is
     * one thread per place. More threads than that only queue behind the
     * working ones: every wake-up of the pool (a broadcast when several
     * handles become ready) puts the spare workers on the run queue,
     * where they preempt a place's kernel and find nothing to do. The MLP
     * on 2 places on 2 cores, with places x 2 (the earlier default, 5
     * threads): 48,700 samples/s, busy 1.47 CPUs with 0.60 CPUs' worth of
     * its own threads waiting; with 1 worker: 66,600, busy 1.87, waiting
     * 0.01 (docs/benchmarks.md, "Why PE's MLP kept one core busy"). No
     * handle blocks a pool thread (collectives return PE_SCHED_PENDING),
     * so any pool size runs every graph. */
    int nt = o.exec_strategy.num_threads;
    if (nt == 0) nt = places[0].kind == PE_PLACE_CUDA ? n_places * 4 : (n_places > 1 ? n_places - 1 : 1);
    if (!pe->sequential && !(pe->sched = pe_sched_new(nt, pe->kernel_threads))) { st = PE_ERR_NOMEM; goto fail; }
    if ((st = pe_pe_broadcast_from_trainer0(pe)) != PE_OK) goto fail;
    if ((st = pe_pe_coalesce_optimizer_state(pe)) != PE_OK || (st = pe_pe_share_sharded_state(pe)) != PE_OK) goto fail;
    pe->built = true;
    *out = pe;
    return PE_OK;
fail:
    pe_parallel_executor_free(pe);
    return st;
}

pe_status pe_pe_replace_comm(pe_parallel_executor *pe, pe_comm_group *g) {
    if (!g || g->n_places != pe->n) {
        int n = g ? g->n_places : 0;
        pe_group_free(g);
        return pe_error(PE_ERR_INVALID, "ParallelExecutor: collectives for %d places, the executor has %d", n, pe->n);
    }
    pe_group_free(pe->comm);
    pe->comm = g;
    set_services(pe);
    return PE_OK;
}

/* ---- run ------------------------------------------------------------- */

/* Place p's share of the loss gradient (of the global batch across
 * trainers), into its PE_LOSS_SCALE_VAR. */
static pe_status set_loss_scale(pe_parallel_executor *pe) {
    if (pe->g->loss_grad_op < 0) return PE_OK;
    /* rows of every place of every trainer (batch_share only: across
     * processes it is an exchange) */
    int64_t total = 0;
    if (pe->opt.build_strategy.gradient_scale_strategy == PE_GRAD_SCALE_BATCH_SHARE)
        PE_CHECK(pe_pe_global_rows(pe, &total));
    const int world = pe_pe_world_places(pe);
    for (int p = 0; p < pe->n; p++) {
        double s;
        switch (pe->opt.build_strategy.gradient_scale_strategy) {
        case PE_GRAD_SCALE_COEFF_NUM_DEVICE: s = 1.0 / world; break;
        case PE_GRAD_SCALE_ONE: s = 1.0; break;
        default: s = total > 0 ? (double)pe->rows[p] / (double)total : 1.0 / world; break;
        }
        pe_tensor *t = pe_scope_var(pe->local[p], PE_LOSS_SCALE_VAR);
        if (!t) return pe_error(PE_ERR_NOMEM, "out of memory setting the loss scale");
        PE_CHECK(pe_tensor_resize(t, PE_DTYPE_FP64, 1, (int64_t[]){1}, pe->places[p]));
        PE_CHECK(pe_memcpy_places(pe_tensor_data(t), pe->places[p], &s, pe_place_cpu(0), sizeof s));
    }
    return PE_OK;
}

/* The memory plan of this run's feed shapes: fed and fetched names are
 * never placed in the arenas (executor/memory_plan/). */
static pe_status plan_memory(pe_parallel_executor *pe, const pe_feed *const *feeds, const int *n_feeds, int n_lists,
                             const char *const *fetch, int n_fetch) {
    if (!pe->arenas) return PE_OK;
    for (int l = 0; l < n_lists; l++)
        for (int i = 0; i < n_feeds[l]; i++) PE_CHECK(pe_mem_arenas_protect(pe->arenas, feeds[l][i].name));
    for (int i = 0; i < n_fetch; i++) PE_CHECK(pe_mem_arenas_protect(pe->arenas, fetch[i]));
    return pe_mem_arenas_prepare(pe->arenas, pe->local);
}

/* Each op's workspace in this run's memory plan (ctx->workspace; NULL for
 * the ops it gives none, which then use the kernel's own pool). */
static void apply_workspaces(pe_parallel_executor *pe) {
    const pe_mem_plan *mp = pe->arenas ? pe_mem_arenas_plan(pe->arenas) : NULL;
    if (!mp) return;
    for (int h = 0; h < pe->g->n_h; h++) {
        pe->ctxs[h].workspace = NULL;
        pe->ctxs[h].workspace_bytes = 0;
    }
    for (int p = 0; p < mp->n_places; p++)
        for (int i = 0; i < mp->place[p].n_ws; i++) {
            const pe_mp_ws_plan *w = &mp->place[p].ws[i];
            pe->ctxs[w->handle].workspace = pe_mem_arenas_workspace(pe->arenas, p, w, &pe->ctxs[w->handle].workspace_bytes);
        }
}

/* The graph, num_iteration_per_run times; an interrupt requested after
 * intr_mark (pe/interrupt.h) stops it before the next handle. */
static pe_status run_graph(pe_parallel_executor *pe, unsigned intr_mark) {
    PE_CHECK(pe_pe_ensure_prepared(pe));
    apply_workspaces(pe);
    const pe_sched_fn fn = pe->tl ? run_handle_timed : pe->check_nan_inf ? run_handle_checked : run_handle;
    for (int r = 0; r < pe->opt.exec_strategy.num_iteration_per_run; r++) {
        if (pe->sched) {
            PE_CHECK(pe_sched_run(pe->sched, pe->g, fn, pe, intr_mark));
        } else {
            for (int k = 0; k < pe->g->n_h; k++) {
                if (pe_interrupted_since(intr_mark)) return pe_interrupted_error();
                PE_CHECK(fn(pe, pe->order[k]));
            }
        }
    }
    return PE_OK;
}

static const char k_fetch_hint[] =
    ". Likely reasons: the name is misspelled; it belongs to another program (the startup program, or the "
    "training program when running a test clone); or it is a gradient of a var that gets none (stop_gradient, no "
    "path to the loss)";

/* One run: a dict feed (feeds == NULL) or a list feed of one dict per place. */
static pe_status run(pe_parallel_executor *pe, const pe_feed *feed, int n_feed, const pe_feed *const *feeds,
                     const int *n_feeds, const char *const *fetch, int n_fetch, bool merged, pe_tensor **out) {
    const unsigned intr_mark = pe_interrupt_mark();
    const int64_t t0 = pe->tl ? pe_timeline_now() : 0;
    PE_CHECK(pe_fetch_check_names(pe->prog, 0, fetch, n_fetch, k_fetch_hint));
    PE_CHECK(select_graph(pe, fetch, n_fetch));
    PE_CHECK(pe_pe_ensure_local(pe));
    pe_status st = feeds ? pe_pe_feed_list(pe, feeds, n_feeds) : pe_pe_feed_dict(pe, feed, n_feed);
    if (st == PE_OK) st = set_loss_scale(pe);
    if (st == PE_OK) st = pe_pe_share_sharded_state(pe);
    if (st == PE_OK) st = feeds ? plan_memory(pe, feeds, n_feeds, pe->n, fetch, n_fetch)
                                : plan_memory(pe, &feed, &n_feed, 1, fetch, n_fetch);
    pe->run_fetch = fetch;
    pe->run_n_fetch = n_fetch;
    if (st == PE_OK) st = run_graph(pe, intr_mark);
    if (st == PE_OK && (st = pe_pe_fetch(pe, fetch, n_fetch, merged, out)) == PE_OK) {
        pe->iter++;
        int k = pe->opt.exec_strategy.num_iteration_per_drop_scope;
        if (k > 0 && pe->iter % k == 0) pe_drop_local_exe_scopes(pe);
    }
    /* the end of a run, failed or not: nothing keeps the caller's fetch
     * list or feed data */
    pe->run_fetch = NULL;
    pe->run_n_fetch = 0;
    pe_pe_release_feed_views(pe);
    if (pe->tl) pe_timeline_step(pe->tl, t0, pe_timeline_now(), st == PE_OK);
    return st;
}

pe_status pe_run(pe_parallel_executor *pe, const pe_feed *feed, int n_feed, const char *const *fetch, int n_fetch,
                 bool return_merged, pe_tensor **fetch_out) {
    if (!pe) return pe_error(PE_ERR_INVALID, "pe_run: NULL executor");
    return run(pe, feed, n_feed, NULL, NULL, fetch, n_fetch, return_merged, fetch_out);
}

pe_status pe_run_take(pe_parallel_executor *pe, const pe_feed *feed, int n_feed, const char *const *fetch, int n_fetch,
                      pe_tensor **fetch_out) {
    if (!pe) return pe_error(PE_ERR_INVALID, "pe_run_take: NULL executor");
    pe->fetch_take = true;
    pe_status st = run(pe, feed, n_feed, NULL, NULL, fetch, n_fetch, true, fetch_out);
    pe->fetch_take = false;
    return st;
}

pe_status pe_run_list(pe_parallel_executor *pe, const pe_feed *const *feeds, const int *n_feeds, int n_lists,
                      const char *const *fetch, int n_fetch, bool return_merged, pe_tensor **fetch_out) {
    if (!pe) return pe_error(PE_ERR_INVALID, "pe_run: NULL executor");
    if (n_lists != pe->n)
        return pe_error(PE_ERR_INVALID, "list feed has %d entries but the executor has %d places: give one dict per place",
                        n_lists, pe->n);
    return run(pe, NULL, 0, feeds, n_feeds, fetch, n_fetch, return_merged, fetch_out);
}
