/* executor/parallel_executor.c — the ParallelExecutor (DESIGN.md §4).
 *
 * Construction: the multi-device pass turns the program into an SSA graph
 * over N places; each place gets a scope (place 0: the caller's scope,
 * which holds the persistables; place i > 0: a child scope holding replicas
 * broadcast from place 0) and a local execution scope for temporaries
 * (child of the place scope; dropped every num_iteration_per_drop_scope runs
 * or on demand). With share_vars_from, the place scopes are children of the
 * source's place scopes instead, so the new executor reads the source's
 * parameters by name without copying.
 *
 * A run: split the feeds along axis 0 (contiguous, earlier places take the
 * extra rows), set each place's loss-gradient scale, run the graph on the
 * scheduler's thread pool (op handles call the kernels with cores/places
 * OpenMP threads each; collective handles call runtime/comm), then
 * concatenate fetches along axis 0 in place order.
 */
#include "pe/parallel_executor.h"
#include "executor/memory_plan/arena.h"
#include "executor/scheduler.h"
#include "ops/op.h"
#include "passes/multi_device.h"
#include "passes/pass_manager.h"
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct pe_parallel_executor {
    int n;
    pe_place places[PE_MAX_PLACES];
    const pe_program *prog;
    pe_pe_options opt;
    pe_scope *global;
    pe_scope *place_scope[PE_MAX_PLACES];
    bool owns_place_scope[PE_MAX_PLACES];
    pe_scope *local[PE_MAX_PLACES];
    pe_ssa_graph *g;
    pe_op_ctx *ctxs;        /* per handle; valid while prepared */
    bool prepared;
    pe_sched *sched;
    pe_comm *comm;
    int kernel_threads;
    int64_t iter;
    int64_t rows[PE_MAX_PLACES];
    bool built;
    char **protect;         /* fetched vars the fusion passes keep (grows on demand) */
    int n_protect;
    pe_mem_arenas *arenas;  /* memory plan (memory_optimize / enable_inplace); NULL = off */
    void **bucket_mem;      /* fuse_all_reduce_ops: [handle * n + place] contiguous gradients, or NULL */
    struct { pe_place place; void *ptr; size_t bytes; } *opt_mem; /* coalesced optimizer gradients */
    int n_opt_mem;
    int bucket_slots;       /* n_h * n when bucket_mem is allocated */
    const char *const *run_fetch; /* the current run's fetch list (borrowed during the run) */
    int run_n_fetch;
    struct feed_view *views; /* zero-copy feeds: one reusable buffer header per (place, var) */
    const char **shared_state; /* shard_optimizer: vars the places share (names borrowed from the graph) */
    int n_shared_state;
    int n_views, cap_views;
};

static void free_feed_views(pe_parallel_executor *pe);

/* A fed var's view into the caller's tensor: `buf` (external, the
 * executor's reference) is lent to the var for one run. written: some op of
 * the program writes the var (then it is copied, not viewed). */
struct feed_view {
    int place;
    char *name;
    pe_buffer *buf;
    bool written;
};

void pe_pe_options_default(pe_pe_options *o) {
    memset(o, 0, sizeof *o);
    o->exec_strategy.num_iteration_per_drop_scope = 100;
    o->exec_strategy.num_iteration_per_run = 1;
    o->build_strategy.reduce_strategy = PE_REDUCE_ALL_REDUCE;
    o->build_strategy.gradient_scale_strategy = PE_GRAD_SCALE_BATCH_SHARE;
    o->build_strategy.fuse_grad_size_in_MB = 25;
    o->build_strategy.fuse_first_grad_size_in_MB = 1;
    o->build_strategy.shard_optimizer = true;
    o->num_trainers = 1;
}

int pe_cpu_place_count(void) {
    const char *e = getenv("CPU_NUM");
    if (!e || !*e) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED) && omp_get_num_procs() > 1)
            pe_log(PE_LOG_WARN, "CPU_NUM is not set: using 1 CPU place on a machine with %d cores; "
                   "set CPU_NUM=%d to train data-parallel on all of them", omp_get_num_procs(), omp_get_num_procs());
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

static const char *place_name(pe_place p, char *buf) { return pe_place_str(p, buf, 32); }

/* ---- scopes -------------------------------------------------------------- */

static void release_ctxs(pe_parallel_executor *pe) {
    if (pe->ctxs)
        for (int h = 0; h < pe->g->n_h; h++) pe_op_ctx_release(&pe->ctxs[h]);
    pe->prepared = false;
}

/* ---- gradient buckets (fuse_all_reduce_ops) ------------------------------
 * Each ALLREDUCE_FUSED handle's gradients are laid out back to back in one
 * buffer per place; every gradient var of the local scope becomes a view
 * (pe_buffer_wrap, refcount 1, so kernels write in place) at its offset, and
 * the handle reduces the whole buffer with one collective call. The buffers
 * live with the local scopes. */

static void free_buckets(pe_parallel_executor *pe) {
    if (!pe->bucket_mem) return;
    for (int h = 0; h < pe->bucket_slots / (pe->n ? pe->n : 1); h++) {
        const pe_handle *hd = h < pe->g->n_h ? &pe->g->h[h] : NULL;
        for (int p = 0; p < pe->n; p++) {
            void *m = pe->bucket_mem[h * pe->n + p];
            if (m && hd) pe_place_free(pe->places[p], m, (size_t)hd->bucket_bytes);
        }
    }
    free(pe->bucket_mem);
    pe->bucket_mem = NULL;
    pe->bucket_slots = 0;
}

/* Bytes of a bucketed gradient, from its (fully known) declaration. */
static size_t grad_bytes(const pe_program *p, const char *name, const pe_var **v) {
    *v = pe_program_find_var(p, 0, name);
    return *v ? (size_t)pe_dims_prod((*v)->dims, 0, (*v)->ndim) * pe_dtype_size((*v)->dtype) : 0;
}

/* Makes local var `names[k]` of place p a view (pe_buffer_wrap, refcount 1,
 * so kernels write in place) of its declared size at the next offset of
 * `base`, in order. Used for allreduce buckets and coalesced gradients. */
static pe_status lay_out_views(pe_parallel_executor *pe, int p, const char *const *names, int n, char *base) {
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        const pe_var *v;
        size_t bytes = grad_bytes(pe->g->progs[p], names[k], &v);
        pe_tensor *t = pe_scope_var(pe->local[p], names[k]);
        pe_buffer *b = t && v ? pe_buffer_wrap(pe->places[p], base + off, bytes) : NULL;
        if (!b) return pe_error(PE_ERR_NOMEM, "out of memory laying out gradient '%s'", names[k]);
        pe_tensor_clear(t);
        PE_CHECK(pe_tensor_set_meta(t, v->dtype, v->ndim, v->dims));
        t->buf = b;
        t->offset = 0;
        t->place = pe->places[p];
        off += bytes;
    }
    return PE_OK;
}

static pe_status lay_out_buckets(pe_parallel_executor *pe) {
    if (!pe->g->n_buckets || pe->bucket_mem) return PE_OK;
    pe->bucket_mem = calloc((size_t)pe->g->n_h * (size_t)pe->n, sizeof *pe->bucket_mem);
    if (!pe->bucket_mem) return pe_error(PE_ERR_NOMEM, "out of memory laying out gradient buckets");
    pe->bucket_slots = pe->g->n_h * pe->n;
    for (int h = 0; h < pe->g->n_h; h++) {
        const pe_handle *hd = &pe->g->h[h];
        if (hd->kind != PE_HANDLE_ALLREDUCE_FUSED) continue;
        size_t total = (size_t)hd->bucket_bytes;
        for (int p = 0; p < pe->n; p++) {
            char *base = pe_place_alloc(pe->places[p], total);
            if (!base) return pe_error_wrap(PE_ERR_NOMEM, "gradient bucket of %zu bytes", total);
            pe->bucket_mem[h * pe->n + p] = base;
            PE_CHECK(lay_out_views(pe, p, hd->vars, hd->n_vars, base));
        }
    }
    return PE_OK;
}

/* ---- coalesced optimizer state (fuse_all_optimizer_ops) --------------------
 * A merged_sgd / merged_momentum / merged_adam op's parameters, accumulators
 * and gradients are laid out back to back per place, so its kernel runs one
 * flat loop over one contiguous buffer (ops/cpu/fused_optimizer.c falls back
 * to per-parameter pieces whenever a var has left its place, e.g. after a
 * user wrote a parameter). Persistables move into one ref-counted buffer
 * (each tensor holds a reference at its offset, so the caller's scope stays
 * valid after the executor is gone); gradients, which live in the local
 * scopes, become views into executor-owned memory freed with them. Gradients
 * already laid out in allreduce buckets stay there. */

static pe_status coalesce_persistables(pe_parallel_executor *pe, int p, const pe_op *op, const char *slot) {
    const pe_slot *s = pe_op_input(op, slot);
    if (!s || s->n_args < 2) return PE_OK;
    size_t total = 0;
    pe_tensor *t0 = NULL;
    for (int k = 0; k < s->n_args; k++) {
        pe_tensor *t = pe_scope_find_local_var(pe->place_scope[p], s->args[k]);
        if (!t || !t->buf || (t0 && (t->dtype != t0->dtype || !pe_place_eq(t->place, t0->place)))) return PE_OK;
        if (!t0) t0 = t;
        total += pe_tensor_nbytes(t);
    }
    pe_buffer *b = pe_buffer_new(pe->places[p], total);
    if (!b) return pe_error_wrap(PE_ERR_NOMEM, "coalescing %s of %s", slot, op->type);
    size_t off = 0;
    for (int k = 0; k < s->n_args; k++) {
        pe_tensor *t = pe_scope_find_local_var(pe->place_scope[p], s->args[k]);
        size_t bytes = pe_tensor_nbytes(t);
        pe_status st = pe_memcpy_places((char *)b->data + off, pe->places[p], pe_tensor_data(t), t->place, bytes);
        if (st != PE_OK) {
            pe_buffer_release(b);
            return st;
        }
        pe_buffer_retain(b);
        pe_buffer_release(t->buf);
        t->buf = b;
        t->offset = off;
        t->place = pe->places[p];
        off += bytes;
    }
    pe_buffer_release(b);
    return PE_OK;
}

/* The per-element state of each merged op (its per-element in-place inputs:
 * Param, Velocity, Moment1, Moment2; ops.def PE_OPT). */
static pe_status coalesce_optimizer_state(pe_parallel_executor *pe) {
    if (!pe->opt.build_strategy.fuse_all_optimizer_ops || pe->opt.share_vars_from) return PE_OK;
    for (int p = 0; p < pe->n; p++) {
        const pe_block *b = &pe->g->progs[p]->blocks[0];
        for (int i = 0; i < b->n_ops; i++) {
            const pe_op_info *info = pe_op_info_find(b->ops[i].type);
            for (int k = 0; pe_op_info_is_merged(info) && k < info->n_elem_pairs; k++)
                PE_CHECK(coalesce_persistables(pe, p, &b->ops[i], info->inputs[info->elem_pairs[k][0]].name));
        }
    }
    return PE_OK;
}

static void free_opt_mem(pe_parallel_executor *pe) {
    for (int i = 0; i < pe->n_opt_mem; i++) pe_place_free(pe->opt_mem[i].place, pe->opt_mem[i].ptr, pe->opt_mem[i].bytes);
    free(pe->opt_mem);
    pe->opt_mem = NULL;
    pe->n_opt_mem = 0;
}

/* After the local scopes are made: each merged op's gradients as views into
 * one block per place (unless a gradient is already in an allreduce bucket). */
static pe_status lay_out_opt_grads(pe_parallel_executor *pe) {
    if (!pe->opt.build_strategy.fuse_all_optimizer_ops || pe->opt_mem) return PE_OK;
    for (int p = 0; p < pe->n; p++) {
        const pe_block *b = &pe->g->progs[p]->blocks[0];
        for (int i = 0; i < b->n_ops; i++) {
            const pe_slot *s = pe_op_info_is_merged(pe_op_info_find(b->ops[i].type)) ? pe_op_input(&b->ops[i], "Grad") : NULL;
            if (!s || s->n_args < 2) continue;
            size_t total = 0;
            bool ok = true;
            for (int k = 0; k < s->n_args && ok; k++) {
                const pe_var *v = pe_program_find_var(pe->g->progs[p], 0, s->args[k]);
                const pe_tensor *t = pe_scope_find_local_var(pe->local[p], s->args[k]);
                ok = v && t && !(t->buf && t->buf->external) && v->dtype == pe_program_find_var(pe->g->progs[p], 0, s->args[0])->dtype;
                for (int d = 0; ok && v && d < v->ndim; d++) ok = v->dims[d] >= 0;
                if (ok) total += (size_t)pe_dims_prod(v->dims, 0, v->ndim) * pe_dtype_size(v->dtype);
            }
            if (!ok || !total) continue;
            void *mem = pe_place_alloc(pe->places[p], total);
            void *grown = mem ? realloc(pe->opt_mem, sizeof *pe->opt_mem * (size_t)(pe->n_opt_mem + 1)) : NULL;
            if (!grown) {
                pe_place_free(pe->places[p], mem, total);
                return pe_error(PE_ERR_NOMEM, "out of memory coalescing the gradients of %s", b->ops[i].type);
            }
            pe->opt_mem = grown;
            pe->opt_mem[pe->n_opt_mem].place = pe->places[p];
            pe->opt_mem[pe->n_opt_mem].ptr = mem;
            pe->opt_mem[pe->n_opt_mem].bytes = total;
            pe->n_opt_mem++;
            PE_CHECK(lay_out_views(pe, p, (const char *const *)s->args, s->n_args, mem));
        }
    }
    return PE_OK;
}

/* Bucketed and coalesced gradients stay out of the memory plan's arenas. */
static pe_status protect_buckets(pe_parallel_executor *pe) {
    for (int h = 0; pe->arenas && h < pe->g->n_h; h++)
        for (int k = 0; k < pe->g->h[h].n_vars; k++) PE_CHECK(pe_mem_arenas_protect(pe->arenas, pe->g->h[h].vars[k]));
    const pe_block *b = &pe->g->progs[0]->blocks[0];
    for (int i = 0; pe->arenas && pe->opt.build_strategy.fuse_all_optimizer_ops && i < b->n_ops; i++) {
        const pe_slot *s = pe_op_info_is_merged(pe_op_info_find(b->ops[i].type)) ? pe_op_input(&b->ops[i], "Grad") : NULL;
        for (int k = 0; s && k < s->n_args; k++) PE_CHECK(pe_mem_arenas_protect(pe->arenas, s->args[k]));
    }
    return PE_OK;
}

void pe_drop_local_exe_scopes(pe_parallel_executor *pe) {
    if (!pe) return;
    release_ctxs(pe);
    pe_mem_arenas_release(pe->arenas);
    for (int p = 0; p < pe->n; p++) {
        pe_scope_free(pe->local[p]);
        pe->local[p] = NULL;
    }
    free_buckets(pe);
    free_opt_mem(pe);
}

/* The local scopes' own storage, plus what their vars view: the memory
 * plan's arenas, the gradient buckets and the coalesced optimizer gradients
 * (each byte once). */
size_t pe_local_exe_scopes_bytes(const pe_parallel_executor *pe) {
    size_t total = pe_mem_arenas_bytes(pe->arenas);
    for (int p = 0; p < pe->n; p++)
        if (pe->local[p]) total += pe_scope_bytes(pe->local[p]);
    for (int h = 0; pe->bucket_mem && h < pe->g->n_h; h++)
        for (int p = 0; p < pe->n; p++)
            if (pe->bucket_mem[h * pe->n + p]) total += (size_t)pe->g->h[h].bucket_bytes;
    for (int i = 0; i < pe->n_opt_mem; i++) total += pe->opt_mem[i].bytes;
    return total;
}

int pe_device_count(const pe_parallel_executor *pe) { return pe->n; }

pe_scope *pe_place_scope(const pe_parallel_executor *pe, int i) {
    return i >= 0 && i < pe->n ? pe->place_scope[i] : NULL;
}

/* Local scopes with every non-persistable var of the program pre-created
 * (so op contexts can resolve feeds before the first feed arrives). */
static pe_status ensure_local(pe_parallel_executor *pe) {
    for (int p = 0; p < pe->n; p++) {
        if (pe->local[p]) continue;
        pe->local[p] = pe_scope_new(pe->place_scope[p]);
        if (!pe->local[p]) return pe_error(PE_ERR_NOMEM, "out of memory creating the local scope of place %d", p);
        const pe_block *b = &pe->g->progs[p]->blocks[0];
        for (int i = 0; i < b->n_vars; i++) {
            const pe_var *v = &b->vars[i];
            pe_scope *s = v->persistable ? pe->place_scope[p] : pe->local[p];
            if (v->persistable && pe_scope_find_var(s, v->name)) continue;
            if (!pe_scope_var(s, v->name)) return pe_error(PE_ERR_NOMEM, "out of memory creating var '%s'", v->name);
        }
    }
    PE_CHECK(lay_out_buckets(pe));
    return lay_out_opt_grads(pe);
}

static pe_status ensure_prepared(pe_parallel_executor *pe) {
    if (pe->prepared) return PE_OK;
    char pb[32];
    for (int h = 0; h < pe->g->n_h; h++) {
        const pe_handle *hd = &pe->g->h[h];
        if (hd->kind != PE_HANDLE_OP && hd->kind != PE_HANDLE_OPT_SHARD) continue;
        int p = hd->kind == PE_HANDLE_OP ? hd->place : hd->root; /* shard i runs with place i's tensors */
        const pe_op *op = &pe->g->progs[p]->blocks[0].ops[hd->op_idx];
        pe_status st = pe_op_ctx_init(&pe->ctxs[h], op, pe->local[p], pe->places[p]);
        if (st != PE_OK) {
            release_ctxs(pe);
            return pe_error_wrap(st, "preparing op %d (%s) on %s", hd->op_idx, op->type,
                                 place_name(pe->places[p], pb));
        }
        pe->ctxs[h].num_threads = pe->kernel_threads;
        pe->ctxs[h].program_seed = (uint64_t)pe->prog->random_seed;
    }
    pe->prepared = true;
    return PE_OK;
}

/* ---- handle execution -------------------------------------------------- */

static pe_status run_bucket(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    void *bufs[PE_MAX_PLACES];
    char pb[32];
    const pe_var *v;
    pe_dtype dt = PE_DTYPE_FP32;
    for (int p = 0; p < pe->n; p++) {
        char *base = pe->bucket_mem[h * pe->n + p];
        size_t off = 0;
        for (int k = 0; k < hd->n_vars; k++) {
            const pe_tensor *t = pe_scope_find_var(pe->local[p], hd->vars[k]);
            size_t bytes = grad_bytes(pe->g->progs[p], hd->vars[k], &v);
            /* a kernel that resized the gradient moved it out of its bucket */
            if (!t || pe_tensor_data(t) != base + off || pe_tensor_nbytes(t) != bytes)
                return pe_error(PE_ERR_INTERNAL, "allreduce bucket: gradient '%s' on %s is not at its place in "
                                "the bucket (its shape differs from its declaration?)", hd->vars[k],
                                place_name(pe->places[p], pb));
            dt = t->dtype;
            off += bytes;
        }
        bufs[p] = base;
    }
    pe_status st = pe_comm_allreduce(pe->comm, bufs, hd->bucket_bytes / (int64_t)pe_dtype_size(dt), dt);
    return st == PE_OK ? PE_OK : pe_error_wrap(st, "allreduce of the bucket of %d gradients from '%s'", hd->n_vars, hd->var);
}

static pe_status run_collective(pe_parallel_executor *pe, const pe_handle *hd) {
    void *bufs[PE_MAX_PLACES];
    const pe_tensor *t0 = NULL;
    char pb[32];
    for (int p = 0; p < pe->n; p++) {
        const pe_tensor *t = pe_scope_find_var(pe->local[p], hd->var);
        if (!t || (!t->buf && pe_tensor_numel(t) > 0))
            return pe_error(PE_ERR_NOT_FOUND, "%s of '%s': the var has no value on %s",
                            hd->kind == PE_HANDLE_BCAST ? "broadcast" : "allreduce", hd->var,
                            place_name(pe->places[p], pb));
        if (!t0) t0 = t;
        if (t->dtype != t0->dtype || pe_tensor_numel(t) != pe_tensor_numel(t0))
            return pe_error(PE_ERR_INVALID, "allreduce of '%s': %s has %lld elements of %s, place 0 has %lld of %s",
                            hd->var, place_name(pe->places[p], pb), (long long)pe_tensor_numel(t),
                            pe_dtype_name(t->dtype), (long long)pe_tensor_numel(t0), pe_dtype_name(t0->dtype));
        bufs[p] = pe_tensor_data(t);
    }
    int64_t numel = pe_tensor_numel(t0);
    pe_status st;
    switch (hd->kind) {
    case PE_HANDLE_ALLREDUCE: st = pe_comm_allreduce(pe->comm, bufs, numel, t0->dtype); break;
    case PE_HANDLE_REDUCE: st = pe_comm_reduce(pe->comm, bufs, numel, t0->dtype, hd->root); break;
    default: st = pe_comm_broadcast(pe->comm, bufs, numel, t0->dtype, hd->root); break;
    }
    return st == PE_OK ? PE_OK : pe_error_wrap(st, "collective on '%s'", hd->var);
}

/* ---- sharded optimizer updates (shard_optimizer) -------------------------
 * Shard i of k of an optimizer op owns elements [b, e) of its parameter
 * (k equal ranges, multiples of 16 elements so no two shards write one
 * cache line): it sums that range of the gradient over the places into
 * place i's copy (every place's when the run fetches the gradient: nothing
 * else reads it, shard_count in passes/multi_device.c), runs the op's
 * kernel once on views of that range of place i's tensors
 * (whole tensors for the scalar slots: LearningRate, Beta1Pow, ...), and
 * copies the range of every per-element output to each place whose storage
 * is not the same memory (the places share it unless something replaced a
 * buffer, e.g. a feed of the parameter). Place i's scalar outputs (adam's
 * powers) are advanced by shard i; shard 0 also sets them on the places
 * beyond k. */

#define SHARD_TILE_ELEMS 16384 /* per kernel thread: a tile's 5 arrays fit a core's L2 */

/* True when the current run fetches `name`. */
static bool is_fetched(const pe_parallel_executor *pe, const char *name) {
    for (int i = 0; i < pe->run_n_fetch; i++)
        if (!strcmp(pe->run_fetch[i], name)) return true;
    return false;
}

/* `t` restricted to elements [b, e) as a 1-D view (no reference taken). */
static void range_view(pe_tensor *view, const pe_tensor *t, int64_t b, int64_t e) {
    *view = *t;
    view->ndim = 1;
    view->dims[0] = e - b;
    view->offset = t->offset + (size_t)b * pe_dtype_size(t->dtype);
}

static pe_status run_opt_shard(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    pe_op_ctx *c = &pe->ctxs[h];
    const pe_op_info *info = c->info;
    const int s = hd->root, k = hd->n_shards;
    char pb[32];
    /* What the op's infer checks, read-only (the shards of one op run
     * concurrently and must not write shared tensor metadata): every input
     * has a value, the per-element ones as many elements as the parameter,
     * of its dtype; the scalar ones at least one element. */
    const pe_tensor *param = pe_ctx_in(c, "Param");
    const int64_t n = param ? pe_tensor_numel(param) : 0;
    for (int i = 0; i < info->n_inputs; i++)
        for (int a = 0; a < c->n_in[i]; a++) {
            const pe_tensor *t = c->in[i][a];
            if (!t) continue;
            bool elem = pe_op_info_elem_input(info, i);
            if (!t->buf || (elem ? pe_tensor_numel(t) != n || t->dtype != param->dtype : pe_tensor_numel(t) < 1))
                return pe_error(PE_ERR_INVALID, "op %s: input %s '%s' on %s %s", info->name, info->inputs[i].name,
                                c->in_names[i][a], place_name(pe->places[s], pb),
                                !t->buf ? "has no value"
                                : elem  ? "does not have the parameter's element count and dtype"
                                        : "is empty");
        }
    const size_t es = pe_dtype_size(param->dtype);
    const int64_t per = ((n + k - 1) / k + 15) / 16 * 16;
    const int64_t b = per * s < n ? per * s : n, e = b + per < n ? b + per : n;
    if (b >= e) return PE_OK;

    /* 1+2. tile by tile (each tile's arrays stay in this core's cache): the
     * gradient's tile summed over the places into place s's copy (into
     * every place's when the run fetches the gradient), then the update of
     * the tile on views of place s's tensors */
    char *gbase[PE_MAX_PLACES];
    void *bufs[PE_MAX_PLACES];
    for (int p = 0; p < pe->n; p++) {
        const pe_tensor *g = pe_scope_find_var(pe->local[p], hd->var);
        if (!g || !g->buf || pe_tensor_numel(g) != n || g->dtype != param->dtype)
            return pe_error(PE_ERR_INVALID, "op %s: gradient '%s' on %s has %lld elements of %s, parameter '%s' %lld of %s",
                            info->name, hd->var, place_name(pe->places[p], pb), g ? (long long)pe_tensor_numel(g) : 0LL,
                            g ? pe_dtype_name(g->dtype) : "-", pe_ctx_in_name(c, "Param", 0), (long long)n,
                            pe_dtype_name(param->dtype));
        gbase[p] = pe_tensor_data(g);
    }
    for (int i = 0; i < info->n_outputs; i++)
        if (c->n_out[i] == 1 && c->out[i][0] && pe_op_info_elem_output(info, i) &&
            (pe_tensor_numel(c->out[i][0]) != n || !c->out[i][0]->buf || c->out[i][0]->dtype != param->dtype))
            return pe_error(PE_ERR_INVALID, "op %s: output %s '%s' on %s is not laid out like parameter '%s'", info->name,
                            info->outputs[i].name, c->out_names[i][0], place_name(pe->places[s], pb),
                            pe_ctx_in_name(c, "Param", 0));
    const bool fetched = is_fetched(pe, hd->var);
    int64_t tile = SHARD_TILE_ELEMS * (int64_t)pe->kernel_threads;
    pe_op_ctx v = *c;
    pe_tensor views[2 * PE_MAX_SLOTS];
    pe_tensor *vin[PE_MAX_SLOTS], *vout[PE_MAX_SLOTS];
    /* The scalar outputs (adam's beta powers) alias their inputs and the
     * kernel advances them on every call: every tile writes them into
     * scratch, so every tile reads the step's values, and the real ones
     * are set once at the end. */
    _Alignas(64) char scratch[PE_MAX_SLOTS][64];
    pe_buffer sbuf[PE_MAX_SLOTS];
    pe_tensor stens[PE_MAX_SLOTS], *sout[PE_MAX_SLOTS];
    for (int i = 0; i < info->n_outputs; i++) {
        const pe_tensor *o = c->n_out[i] == 1 ? c->out[i][0] : NULL;
        if (!o || pe_op_info_elem_output(info, i)) continue;
        if (pe_tensor_nbytes(o) > sizeof scratch[i]) {
            tile = e - b; /* one call: nothing to keep apart */
            continue;
        }
        sbuf[i] = (pe_buffer){.data = scratch[i], .bytes = sizeof scratch[i], .place = o->place, .refcount = 1, .external = true};
        stens[i] = *o;
        stens[i].buf = &sbuf[i];
        stens[i].offset = 0;
        sout[i] = &stens[i];
        v.out[i] = &sout[i];
    }
    for (int64_t t0 = b; t0 < e; t0 += tile) {
        const int64_t t1 = t0 + tile < e ? t0 + tile : e;
        for (int p = 0; p < pe->n; p++) bufs[p] = gbase[p] + (size_t)t0 * es;
        pe_status st = fetched ? pe_comm_allreduce(pe->comm, bufs, t1 - t0, param->dtype)
                               : pe_comm_reduce(pe->comm, bufs, t1 - t0, param->dtype, s);
        if (st != PE_OK)
            return pe_error_wrap(st, "summing '%s' over the places (elements %lld..%lld)", hd->var, (long long)t0,
                                 (long long)t1);
        int nv = 0;
        for (int i = 0; i < info->n_inputs; i++)
            if (c->n_in[i] == 1 && c->in[i][0] && pe_op_info_elem_input(info, i)) {
                range_view(&views[nv], c->in[i][0], t0, t1);
                vin[i] = &views[nv++];
                v.in[i] = &vin[i];
            }
        for (int i = 0; i < info->n_outputs; i++)
            if (c->n_out[i] == 1 && c->out[i][0] && pe_op_info_elem_output(info, i)) {
                range_view(&views[nv], c->out[i][0], t0, t1);
                vout[i] = &views[nv++];
                v.out[i] = &vout[i];
            }
        PE_CHECK(info->kernels[PE_PLACE_CPU](&v));
    }
    for (int i = 0; i < info->n_outputs; i++)
        if (v.out[i] == &sout[i]) memcpy(pe_tensor_data(c->out[i][0]), scratch[i], pe_tensor_nbytes(c->out[i][0]));

    /* 3. the range to the places that do not share the storage; 4. scalar
     * outputs to the places without a shard of their own */
    for (int i = 0; i < info->n_outputs; i++) {
        if (c->n_out[i] != 1 || !c->out[i][0]) continue;
        bool elem = pe_op_info_elem_output(info, i);
        if (!elem && s != 0) continue;
        const pe_tensor *src = c->out[i][0];
        const char *src_data = (const char *)pe_tensor_data(src) + (elem ? (size_t)b * es : 0);
        size_t bytes = elem ? (size_t)(e - b) * es : pe_tensor_nbytes(src);
        for (int q = elem ? 0 : k; q < pe->n; q++) {
            if (q == s) continue;
            pe_tensor *d = pe_scope_find_var(pe->local[q], c->out_names[i][0]);
            if (!d || !d->buf || pe_tensor_nbytes(d) != pe_tensor_nbytes(src))
                return pe_error(PE_ERR_INVALID, "op %s: '%s' on %s does not match its value on %s", info->name,
                                c->out_names[i][0], place_name(pe->places[q], pb), place_name(pe->places[s], pb + 16));
            char *dst = (char *)pe_tensor_data(d) + (elem ? (size_t)b * es : 0);
            if (dst != src_data) memcpy(dst, src_data, bytes);
        }
    }
    return PE_OK;
}

/* shard_optimizer: true when `name` is a parameter or accumulator a sharded
 * update writes; places 1..N-1 then take place 0's storage of it instead of
 * a copy (one copy of the model state, no copy-back after each update). */
/* shard_optimizer: the parameters and accumulators sharded updates write
 * (names borrowed from place 0's program), collected once. */
static pe_status collect_sharded_state(pe_parallel_executor *pe) {
    for (int h = 0; h < pe->g->n_h; h++) {
        const pe_handle *hd = &pe->g->h[h];
        if (hd->kind != PE_HANDLE_OPT_SHARD || hd->root != 0) continue;
        const pe_op *op = &pe->g->progs[0]->blocks[0].ops[hd->op_idx];
        const pe_op_info *info = pe_op_info_find(op->type);
        for (int k = 0; k < info->n_elem_pairs; k++) {
            const char *name = pe_op_input1(op, info->inputs[info->elem_pairs[k][0]].name);
            if (!name) continue;
            const char **grown = realloc(pe->shared_state, sizeof *grown * (size_t)(pe->n_shared_state + 1));
            if (!grown) return pe_error(PE_ERR_NOMEM, "out of memory listing the sharded optimizer state");
            pe->shared_state = grown;
            pe->shared_state[pe->n_shared_state++] = name;
        }
    }
    return PE_OK;
}

static bool is_sharded_state(const pe_parallel_executor *pe, const char *name) {
    for (int i = 0; i < pe->n_shared_state; i++)
        if (!strcmp(pe->shared_state[i], name)) return true;
    return false;
}

/* Places 1..N-1 take place 0's storage of the sharded state: at
 * construction (instead of a copy), and before each run again if something
 * replaced a buffer since (a checkpoint loaded or a value set into the
 * scope after construction, a persistable feed). Place 0's value is the
 * parameter's value, as for fetches; the places stay one copy. */
static pe_status share_sharded_state(pe_parallel_executor *pe) {
    if (pe->opt.share_vars_from || pe->places[0].kind != PE_PLACE_CPU) return PE_OK;
    for (int i = 0; i < pe->n_shared_state; i++) {
        const pe_tensor *t0 = pe_scope_find_var(pe->place_scope[0], pe->shared_state[i]);
        if (!t0 || !t0->buf || t0->place.kind != PE_PLACE_CPU) continue;
        for (int p = 1; p < pe->n; p++) {
            pe_tensor *d = pe_scope_var(pe->place_scope[p], pe->shared_state[i]);
            if (!d) return pe_error(PE_ERR_NOMEM, "out of memory sharing '%s'", pe->shared_state[i]);
            if (d->buf == t0->buf && d->offset == t0->offset) continue;
            pe_tensor_share(d, t0);
            d->place = pe->places[p];
        }
    }
    return PE_OK;
}

static pe_status run_handle(void *user, int h) {
    pe_parallel_executor *pe = user;
    const pe_handle *hd = &pe->g->h[h];
    if (hd->kind == PE_HANDLE_ALLREDUCE_FUSED) return run_bucket(pe, h);
    if (hd->kind == PE_HANDLE_OPT_SHARD) return run_opt_shard(pe, h);
    if (hd->kind == PE_HANDLE_JOIN) return PE_OK;
    if (hd->kind != PE_HANDLE_OP) return run_collective(pe, hd);
    pe_status st = pe_op_run(&pe->ctxs[h]);
    if (st != PE_OK) {
        char pb[32];
        const char *msg = pe_last_error();
        /* kernel messages already name the op and place; add the op index */
        if (!strstr(msg, place_name(pe->places[hd->place], pb)))
            return pe_error_wrap(st, "op %d (%s) on %s", hd->op_idx, pe->ctxs[h].info->name, pb);
        return pe_error_wrap(st, "op %d", hd->op_idx);
    }
    return PE_OK;
}

/* ---- construction ------------------------------------------------------ */

void pe_parallel_executor_free(pe_parallel_executor *pe) {
    if (!pe) return;
    pe_sched_free(pe->sched);
    pe_drop_local_exe_scopes(pe);
    free_feed_views(pe);
    free(pe->shared_state);
    pe_mem_arenas_free(pe->arenas);
    free(pe->ctxs);
    for (int i = 0; i < pe->n_protect; i++) free(pe->protect[i]);
    free(pe->protect);
    for (int p = 0; p < pe->n; p++)
        if (pe->owns_place_scope[p]) pe_scope_free(pe->place_scope[p]);
    pe_comm_free(pe->comm);
    pe_ssa_graph_free(pe->g);
    free(pe);
}


/* The graph to run: the build passes (passes/pass_manager.c: fusion, then
 * the multi-device pass, ...) on a copy of the main program, keeping the
 * vars in pe->protect; DOT dumps when debug_graphviz_path is set
 * (<path>.<nn>_<pass>.dot per pass, the final SSA graph at <path>). */
static pe_status build_graph(const pe_parallel_executor *pe, pe_ssa_graph **out) {
    const char *path = pe->opt.build_strategy.debug_graphviz_path;
    char prefix[4096];
    if (path && snprintf(prefix, sizeof prefix, "%s.", path) >= (int)sizeof prefix)
        return pe_error(PE_ERR_INVALID, "debug_graphviz_path '%s' is too long", path);
    pe_build_strategy bs = pe->opt.build_strategy;
    if (pe->places[0].kind != PE_PLACE_CPU) bs.shard_optimizer = false; /* in-process CPU collectives only */
    pe_pass_opts po = {.n_places = pe->n, .loss_name = pe->opt.loss_name, .bs = &bs,
                       .protect = (const char *const *)pe->protect, .n_protect = pe->n_protect,
                       .dump_prefix = path ? prefix : NULL, .final_dot = path};
    return pe_pass_manager_run(pe->prog, &po, out, NULL);
}

/* The loss-gradient seed gets a "value" attr (set per run by set_loss_scale). */
static pe_status init_loss_grad(pe_parallel_executor *pe) {
    if (pe->g->loss_grad_op < 0) return PE_OK;
    for (int p = 0; p < pe->n; p++) {
        pe_op *op = &pe->g->progs[p]->blocks[0].ops[pe->g->loss_grad_op];
        if (!pe_op_attr(op, "value")) PE_CHECK(pe_op_set_float(op, "value", 1.0));
    }
    return PE_OK;
}

pe_status pe_parallel_executor_new(const pe_place *places, int n_places, const pe_program *main_program,
                                   pe_scope *scope, const pe_pe_options *opt, pe_parallel_executor **out) {
    *out = NULL;
    char pb[32];
    if (!places || !main_program || !scope)
        return pe_error(PE_ERR_INVALID, "ParallelExecutor: places, main_program and scope are required");
    if (n_places < 1 || n_places > PE_MAX_PLACES)
        return pe_error(PE_ERR_INVALID, "ParallelExecutor: %d places (1 to %d supported)", n_places, PE_MAX_PLACES);
    pe_pe_options o;
    if (opt) o = *opt;
    else pe_pe_options_default(&o);
    if (o.num_trainers > 1)
        return pe_error(PE_ERR_UNSUPPORTED, "ParallelExecutor: num_trainers=%d needs the multi-process (MPI/NCCL) "
                        "backend, which this build does not have yet; use num_trainers=1", o.num_trainers);
    for (int i = 0; i < n_places; i++) {
        if (places[i].kind != places[0].kind)
            return pe_error(PE_ERR_INVALID, "ParallelExecutor: places mix CPU and CUDA (%s and %s)",
                            place_name(places[0], pb), place_name(places[i], pb + 16));
        if (places[i].kind == PE_PLACE_CUDA) {
#ifdef PE_WITH_CUDA
            if (places[i].id < 0 || places[i].id >= pe_cuda_device_count())
                return pe_error(PE_ERR_INVALID, "ParallelExecutor: %s does not exist (%d CUDA devices visible)",
                                place_name(places[i], pb), pe_cuda_device_count());
#else
            return pe_error(PE_ERR_UNSUPPORTED, "ParallelExecutor: %s requested but PE was built without CUDA",
                            place_name(places[i], pb));
#endif
        }
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
    pe->global = scope;
    pe_status st = build_graph(pe, &pe->g);
    if (st != PE_OK || (st = init_loss_grad(pe)) != PE_OK) goto fail;
    if ((o.build_strategy.memory_optimize || o.build_strategy.enable_inplace) &&
        (st = pe_mem_arenas_new(pe->g, pe->places, o.build_strategy.memory_optimize, o.build_strategy.enable_inplace,
                                &pe->arenas)) != PE_OK)
        goto fail;
    if ((st = protect_buckets(pe)) != PE_OK) goto fail;
    pe->ctxs = calloc((size_t)(pe->g->n_h ? pe->g->n_h : 1), sizeof *pe->ctxs);
    if (!pe->ctxs) { st = pe_error(PE_ERR_NOMEM, "out of memory"); goto fail; }
    /* scopes and the broadcast of persistables from place 0 */
    for (int p = 0; p < n_places; p++) {
        if (src) pe->place_scope[p] = pe_scope_new(src->place_scope[p]);
        else pe->place_scope[p] = p == 0 ? scope : pe_scope_new(scope);
        pe->owns_place_scope[p] = src || p > 0;
        if (!pe->place_scope[p]) { st = pe_error(PE_ERR_NOMEM, "out of memory creating the scope of place %d", p); goto fail; }
    }
    if ((st = collect_sharded_state(pe)) != PE_OK) goto fail;
    if (!src) {
        const pe_block *b = &main_program->blocks[0];
        for (int i = 0; i < b->n_vars; i++) {
            const pe_var *v = &b->vars[i];
            if (!v->persistable) continue;
            const pe_tensor *t = pe_scope_find_var(scope, v->name);
            if (!t || !t->buf) continue; /* created by the program itself */
            /* shared, not copied: share_sharded_state below */
            bool shared = pe_place_eq(t->place, places[0]) && is_sharded_state(pe, v->name);
            for (int p = 0; p < n_places; p++) {
                if (p == 0 && pe_place_eq(t->place, places[0])) continue;
                if (shared) continue;
                pe_tensor *d = pe_scope_var(pe->place_scope[p], v->name);
                if (!d) { st = pe_error(PE_ERR_NOMEM, "out of memory"); goto fail; }
                if ((st = pe_tensor_copy(d, t, places[p])) != PE_OK) {
                    st = pe_error_wrap(st, "broadcasting '%s' to %s", v->name, place_name(places[p], pb));
                    goto fail;
                }
            }
        }
    }
    /* Intra-op threads: the OpenMP budget (OMP_NUM_THREADS, default the
     * cores) shared by the places, never more threads than that in total. */
    int cores = omp_get_max_threads();
    pe->kernel_threads = cores / n_places > 0 ? cores / n_places : 1;
    int nt = o.exec_strategy.num_threads;
    if (nt <= 0) nt = n_places * (places[0].kind == PE_PLACE_CUDA ? 4 : 2);
    if (!o.build_strategy.enable_sequential_execution && !(pe->sched = pe_sched_new(nt))) { st = PE_ERR_NOMEM; goto fail; }
    /* A collective runs on a scheduler thread while the other places keep
     * computing: it gets one place's share of the OpenMP budget. (More
     * threads would oversubscribe the cores, and libgomp's idle team
     * threads spin for a while after each region, stealing the other
     * places' cores: 2 places on 2 cores trained the MLP slower than one.) */
    if (!(pe->comm = pe_comm_new_for_places(places, n_places, pe->kernel_threads))) {
        st = pe_error_wrap(PE_ERR_UNSUPPORTED, "ParallelExecutor: collectives for %s", place_name(places[0], pb));
        goto fail;
    }
    if ((st = coalesce_optimizer_state(pe)) != PE_OK || (st = share_sharded_state(pe)) != PE_OK) goto fail;
    pe->built = true;
    *out = pe;
    return PE_OK;
fail:
    pe_parallel_executor_free(pe);
    return st;
}

/* ---- feeds ------------------------------------------------------------- */

static pe_status check_feed_decl(const pe_parallel_executor *pe, const pe_feed *f, const pe_var **out) {
    const pe_var *v = pe_program_find_var(pe->prog, 0, f->name);
    if (!v) return pe_error(PE_ERR_NOT_FOUND, "feed '%s' is not a variable of the program", f->name);
    if (!f->tensor || (!f->tensor->buf && pe_tensor_numel(f->tensor) != 0))
        return pe_error(PE_ERR_INVALID, "feed '%s' has no data", f->name);
    if (f->tensor->dtype != v->dtype)
        return pe_error(PE_ERR_INVALID, "feed '%s' has dtype %s, the program declares %s", f->name,
                        pe_dtype_name(f->tensor->dtype), pe_dtype_name(v->dtype));
    *out = v;
    return PE_OK;
}

/* Checks a per-place piece against the declaration (rank and fixed dims). */
static pe_status check_piece(const pe_var *v, const char *name, int ndim, const int64_t *dims, int place) {
    bool ok = ndim == v->ndim;
    for (int i = 0; ok && i < v->ndim; i++) ok = v->dims[i] < 0 || v->dims[i] == dims[i];
    if (ok) return PE_OK;
    char a[128], b[128];
    return pe_error(PE_ERR_INVALID, "feed '%s' on place %d has shape %s, the program declares %s (-1 = any)", name,
                    place, pe_dims_str(ndim, dims, a, sizeof a), pe_dims_str(v->ndim, v->dims, b, sizeof b));
}

/* ---- zero-copy feeds -------------------------------------------------------
 * A fed (non-persistable) var of a CPU place is not copied: for the run it
 * becomes a view of the caller's rows (the caller keeps the tensor alive
 * and unchanged until pe_run returns, as with any argument), and when the
 * run ends the var is emptied, so nothing refers to the caller's memory
 * afterwards (a feed lasts for its run). Fed vars are never in the memory
 * plan's arenas and no op writes a fed var in place; a var some op of the
 * program writes as an output is copied instead, so the caller's data is
 * never written. The view headers are the executor's, reused from run to
 * run: no allocation per step. Saves the per-place copy of the batch (its
 * bytes and its memcpy). */

static struct feed_view *find_view(pe_parallel_executor *pe, int p, const char *name) {
    for (int i = 0; i < pe->n_views; i++)
        if (pe->views[i].place == p && !strcmp(pe->views[i].name, name)) return &pe->views[i];
    if (pe->n_views == pe->cap_views) {
        int cap = pe->cap_views ? 2 * pe->cap_views : 8;
        struct feed_view *nv = realloc(pe->views, sizeof *nv * (size_t)cap);
        if (!nv) return NULL;
        pe->views = nv;
        pe->cap_views = cap;
    }
    struct feed_view *fv = &pe->views[pe->n_views];
    fv->place = p;
    fv->name = strdup(name);
    fv->buf = pe_buffer_wrap(pe->places[p], NULL, 0);
    fv->written = false;
    const pe_block *b = &pe->g->progs[p]->blocks[0];
    for (int i = 0; i < b->n_ops && !fv->written; i++)
        for (int s = 0; s < b->ops[i].n_outputs && !fv->written; s++)
            for (int k = 0; k < b->ops[i].outputs[s].n_args && !fv->written; k++)
                fv->written = !strcmp(b->ops[i].outputs[s].args[k], name);
    if (!fv->name || !fv->buf) {
        free(fv->name);
        pe_buffer_release(fv->buf);
        return NULL;
    }
    pe->n_views++;
    return fv;
}

/* Empties every var that holds a view of the caller's data. */
static void release_feed_views(pe_parallel_executor *pe) {
    for (int i = 0; i < pe->n_views; i++) {
        struct feed_view *fv = &pe->views[i];
        if (fv->buf->refcount > 1 && pe->local[fv->place]) {
            pe_tensor *d = pe_scope_find_local_var(pe->local[fv->place], fv->name);
            if (d && d->buf == fv->buf) pe_tensor_clear(d);
        }
        fv->buf->data = NULL;
        fv->buf->bytes = 0;
    }
}

/* The end of a run, failed or not: nothing keeps the caller's fetch list or
 * feed data. */
static void end_run(pe_parallel_executor *pe) {
    pe->run_fetch = NULL;
    pe->run_n_fetch = 0;
    release_feed_views(pe);
}

static void free_feed_views(pe_parallel_executor *pe) {
    for (int i = 0; i < pe->n_views; i++) {
        free(pe->views[i].name);
        pe_buffer_release(pe->views[i].buf);
    }
    free(pe->views);
    pe->views = NULL;
    pe->n_views = pe->cap_views = 0;
}

/* rows < 0: all of src (a persistable, or a list feed's tensor) */
static pe_status feed_to(pe_parallel_executor *pe, int p, const char *name, const pe_tensor *src, int64_t row0,
                         int64_t rows, bool persistable) {
    pe_tensor *d = persistable ? pe_scope_var(pe->place_scope[p], name) : pe_scope_var(pe->local[p], name);
    if (!d) return pe_error(PE_ERR_NOMEM, "out of memory feeding '%s'", name);
    if (persistable) return pe_tensor_copy(d, src, pe->places[p]);
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, src->dims, sizeof dims);
    if (rows < 0) row0 = 0, rows = src->ndim ? src->dims[0] : 1;
    if (src->ndim) dims[0] = rows;
    size_t row_bytes = (size_t)pe_dims_prod(src->dims, 1, src->ndim) * pe_dtype_size(src->dtype);
    const char *rows_data = (const char *)pe_tensor_data(src) + (size_t)row0 * row_bytes;
    struct feed_view *fv = NULL;
    if (pe->places[p].kind == PE_PLACE_CPU && src->place.kind == PE_PLACE_CPU && src->buf) {
        if (!(fv = find_view(pe, p, name))) return pe_error(PE_ERR_NOMEM, "out of memory feeding '%s'", name);
        if (fv->written) fv = NULL;
    }
    if (fv) {
        if (d->buf != fv->buf) {
            pe_tensor_clear(d);
            pe_buffer_retain(fv->buf);
            d->buf = fv->buf;
        }
        fv->buf->data = (void *)rows_data;
        fv->buf->bytes = (size_t)rows * row_bytes;
        d->offset = 0;
        d->place = pe->places[p];
        return pe_tensor_set_meta(d, src->dtype, src->ndim, dims);
    }
    if (d->buf && (d->buf->refcount > 1 || d->buf->external)) pe_tensor_clear(d);
    PE_CHECK(pe_tensor_resize(d, src->dtype, src->ndim, dims, pe->places[p]));
    return pe_memcpy_places(pe_tensor_data(d), pe->places[p], rows_data, src->place, (size_t)rows * row_bytes);
}

static pe_status feed_dict(pe_parallel_executor *pe, const pe_feed *feed, int n_feed) {
    bool rows_set = false;
    for (int p = 0; p < pe->n; p++) pe->rows[p] = 1;
    for (int i = 0; i < n_feed; i++) {
        const pe_var *v;
        PE_CHECK(check_feed_decl(pe, &feed[i], &v));
        const pe_tensor *t = feed[i].tensor;
        if (v->persistable) {
            for (int p = 0; p < pe->n; p++) PE_CHECK(feed_to(pe, p, feed[i].name, t, 0, -1, true));
            continue;
        }
        if (t->ndim < 1)
            return pe_error(PE_ERR_INVALID, "feed '%s' is a scalar and cannot be split along axis 0 across %d places",
                            feed[i].name, pe->n);
        int64_t rows = t->dims[0];
        if (rows < pe->n) {
            if (pe->places[0].kind == PE_PLACE_CPU)
                return pe_error(PE_ERR_INVALID,
                                "feed '%s' has %lld rows, fewer than the %d places (CPU_NUM=%d): each place needs at "
                                "least one row; feed a larger batch or lower CPU_NUM",
                                feed[i].name, (long long)rows, pe->n, pe->n);
            return pe_error(PE_ERR_INVALID, "feed '%s' has %lld rows, fewer than the %d places: each place needs at least one row",
                            feed[i].name, (long long)rows, pe->n);
        }
        int64_t base = rows / pe->n, extra = rows % pe->n, row0 = 0;
        for (int p = 0; p < pe->n; p++) {
            int64_t r = base + (p < extra);
            int64_t dims[PE_MAX_DIMS];
            memcpy(dims, t->dims, sizeof dims);
            dims[0] = r;
            PE_CHECK(check_piece(v, feed[i].name, t->ndim, dims, p));
            PE_CHECK(feed_to(pe, p, feed[i].name, t, row0, r, false));
            if (!rows_set) pe->rows[p] = r;
            row0 += r;
        }
        rows_set = true;
    }
    return PE_OK;
}

/* ---- fetches ----------------------------------------------------------- */

static pe_status check_fetch_names(const pe_parallel_executor *pe, const char *const *fetch, int n_fetch) {
    for (int i = 0; i < n_fetch; i++)
        if (!pe_program_find_var(pe->prog, 0, fetch[i]))
            return pe_error(PE_ERR_NOT_FOUND,
                            "fetch '%s' is not a variable of the program. Likely reasons: the name is misspelled; it "
                            "belongs to another program (the startup program, or the training program when running "
                            "a test clone); or it is a gradient of a var that gets none (stop_gradient, no path to "
                            "the loss)",
                            fetch[i]);
    return PE_OK;
}

static pe_status fetch_one(pe_parallel_executor *pe, const char *name, bool merged, pe_tensor **out) {
    const pe_var *v = pe_program_find_var(pe->prog, 0, name);
    const pe_tensor *t[PE_MAX_PLACES] = {0};
    char pb[32];
    for (int p = 0; p < pe->n; p++) {
        t[p] = pe_scope_find_var(pe->local[p], name);
        if (!t[p] || (!t[p]->buf && pe_tensor_numel(t[p]) != 0))
            return pe_error(PE_ERR_NOT_FOUND, "fetch '%s' has no value on %s after the run (no op computes it and it "
                            "was not fed)", name, place_name(pe->places[p], pb));
    }
    if (!merged) {
        for (int p = 0; p < pe->n; p++) PE_CHECK(pe_tensor_copy(out[p], t[p], pe_place_cpu(0)));
        return PE_OK;
    }
    if ((v && v->persistable) || pe->n == 1) return pe_tensor_copy(out[0], t[0], pe_place_cpu(0));
    int64_t rows = 0;
    int ndim = t[0]->ndim ? t[0]->ndim : 1;
    for (int p = 0; p < pe->n; p++) {
        bool ok = t[p]->dtype == t[0]->dtype && (t[p]->ndim ? t[p]->ndim : 1) == ndim;
        for (int d = 1; ok && d < t[p]->ndim; d++) ok = t[p]->dims[d] == t[0]->dims[d];
        if (!ok) {
            char a[128], b[128];
            return pe_error(PE_ERR_INVALID, "fetch '%s': cannot concatenate along axis 0: place 0 has %s %s, place %d "
                            "has %s %s (use return_merged=false)", name, pe_dtype_name(t[0]->dtype),
                            pe_dims_str(t[0]->ndim, t[0]->dims, a, sizeof a), p, pe_dtype_name(t[p]->dtype),
                            pe_dims_str(t[p]->ndim, t[p]->dims, b, sizeof b));
        }
        rows += t[p]->ndim ? t[p]->dims[0] : 1;
    }
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, t[0]->dims, sizeof dims);
    dims[0] = rows;
    pe_tensor *o = out[0];
    if (o->buf && o->buf->refcount > 1) pe_tensor_clear(o);
    PE_CHECK(pe_tensor_resize(o, t[0]->dtype, ndim, dims, pe_place_cpu(0)));
    size_t off = 0;
    for (int p = 0; p < pe->n; p++) {
        size_t bytes = pe_tensor_nbytes(t[p]);
        PE_CHECK(pe_memcpy_places((char *)pe_tensor_data(o) + off, pe_place_cpu(0), pe_tensor_data(t[p]), t[p]->place, bytes));
        off += bytes;
    }
    return PE_OK;
}

/* ---- run ------------------------------------------------------------- */

/* A fetch of a var that a fusion pass removed (it is in the main program
 * but not in the graph): rebuild the graph with the var kept, once per such
 * name. Local scopes are dropped (they hold the old graph's temporaries). */
static pe_status ensure_fetchable(pe_parallel_executor *pe, const char *const *fetch, int n_fetch) {
    bool rebuild = false;
    for (int i = 0; i < n_fetch; i++) {
        if (pe_block_find_var(&pe->g->progs[0]->blocks[0], fetch[i])) continue;
        char **np = realloc(pe->protect, sizeof *np * (size_t)(pe->n_protect + 1));
        if (!np) return pe_error(PE_ERR_NOMEM, "out of memory");
        pe->protect = np;
        if (!(np[pe->n_protect] = strdup(fetch[i]))) return pe_error(PE_ERR_NOMEM, "out of memory");
        pe->n_protect++;
        pe_log(PE_LOG_INFO, "fetch '%s' was removed by a fusion pass: rebuilding the graph with it kept", fetch[i]);
        rebuild = true;
    }
    if (!rebuild) return PE_OK;
    pe_ssa_graph *g;
    PE_CHECK(build_graph(pe, &g));
    pe_op_ctx *ctxs = calloc((size_t)(g->n_h ? g->n_h : 1), sizeof *ctxs);
    if (!ctxs) {
        pe_ssa_graph_free(g);
        return pe_error(PE_ERR_NOMEM, "out of memory");
    }
    /* everything derived from the old graph (as in the constructor) */
    pe_drop_local_exe_scopes(pe);
    free(pe->ctxs);
    pe->ctxs = ctxs;
    pe_ssa_graph_free(pe->g);
    pe->g = g;
    if (pe->arenas) { /* the memory plan borrows the graph: plan the new one */
        pe_mem_arenas_free(pe->arenas);
        pe->arenas = NULL;
        PE_CHECK(pe_mem_arenas_new(pe->g, pe->places, pe->opt.build_strategy.memory_optimize,
                                   pe->opt.build_strategy.enable_inplace, &pe->arenas));
        PE_CHECK(protect_buckets(pe));
    }
    PE_CHECK(coalesce_optimizer_state(pe));
    return init_loss_grad(pe);
}

static void set_loss_scale(pe_parallel_executor *pe) {
    if (pe->g->loss_grad_op < 0) return;
    int64_t total = 0;
    for (int p = 0; p < pe->n; p++) total += pe->rows[p];
    for (int p = 0; p < pe->n; p++) {
        double s;
        switch (pe->opt.build_strategy.gradient_scale_strategy) {
        case PE_GRAD_SCALE_COEFF_NUM_DEVICE: s = 1.0 / pe->n; break;
        case PE_GRAD_SCALE_ONE: s = 1.0; break;
        default: s = total > 0 ? (double)pe->rows[p] / (double)total : 1.0 / pe->n; break;
        }
        /* the attr exists (ensured at construction): update in place so the
         * prepared op contexts, which point at it, see the new value */
        pe_attr *a = (pe_attr *)pe_op_attr(&pe->g->progs[p]->blocks[0].ops[pe->g->loss_grad_op], "value");
        a->f = s;
    }
}

/* The memory plan of this run's feed shapes: fed and fetched names are
 * never placed in the arenas (executor/memory_plan/plan.c, executor/memory_plan/arena.c). */
static pe_status plan_memory(pe_parallel_executor *pe, const pe_feed *const *feeds, const int *n_feeds, int n_lists,
                             const char *const *fetch, int n_fetch) {
    if (!pe->arenas) return PE_OK;
    for (int l = 0; l < n_lists; l++)
        for (int i = 0; i < n_feeds[l]; i++) PE_CHECK(pe_mem_arenas_protect(pe->arenas, feeds[l][i].name));
    for (int i = 0; i < n_fetch; i++) PE_CHECK(pe_mem_arenas_protect(pe->arenas, fetch[i]));
    return pe_mem_arenas_prepare(pe->arenas, pe->local);
}

static pe_status run_graph(pe_parallel_executor *pe) {
    PE_CHECK(ensure_prepared(pe));
    set_loss_scale(pe);
    int reps = pe->opt.exec_strategy.num_iteration_per_run > 0 ? pe->opt.exec_strategy.num_iteration_per_run : 1;
    for (int r = 0; r < reps; r++) {
        if (pe->sched) {
            PE_CHECK(pe_sched_run(pe->sched, pe->g, run_handle, pe));
        } else {
            for (int h = 0; h < pe->g->n_h; h++) PE_CHECK(run_handle(pe, h));
        }
    }
    return PE_OK;
}

static pe_status finish(pe_parallel_executor *pe, const char *const *fetch, int n_fetch, bool merged, pe_tensor **out) {
    for (int i = 0; i < n_fetch; i++) PE_CHECK(fetch_one(pe, fetch[i], merged, merged ? &out[i] : &out[i * pe->n]));
    pe->iter++;
    int k = pe->opt.exec_strategy.num_iteration_per_drop_scope;
    if (k > 0 && pe->iter % k == 0) pe_drop_local_exe_scopes(pe);
    return PE_OK;
}

pe_status pe_run(pe_parallel_executor *pe, const pe_feed *feed, int n_feed, const char *const *fetch, int n_fetch,
                 bool return_merged, pe_tensor **fetch_out) {
    if (!pe) return pe_error(PE_ERR_INVALID, "pe_run: NULL executor");
    PE_CHECK(check_fetch_names(pe, fetch, n_fetch));
    PE_CHECK(ensure_fetchable(pe, fetch, n_fetch));
    PE_CHECK(ensure_local(pe));
    pe_status st = feed_dict(pe, feed, n_feed);
    if (st == PE_OK) st = share_sharded_state(pe);
    if (st == PE_OK) st = plan_memory(pe, &feed, &n_feed, 1, fetch, n_fetch);
    pe->run_fetch = fetch;
    pe->run_n_fetch = n_fetch;
    if (st == PE_OK) st = run_graph(pe);
    if (st == PE_OK) st = finish(pe, fetch, n_fetch, return_merged, fetch_out);
    end_run(pe);
    return st;
}

/* List feed: feeds[p] as given on place p. */
static pe_status feed_list(pe_parallel_executor *pe, const pe_feed *const *feeds, const int *n_feeds) {
    for (int p = 0; p < pe->n; p++) {
        pe->rows[p] = 1;
        for (int i = 0; i < n_feeds[p]; i++) {
            const pe_feed *f = &feeds[p][i];
            const pe_var *v;
            PE_CHECK(check_feed_decl(pe, f, &v));
            if (!v->persistable) PE_CHECK(check_piece(v, f->name, f->tensor->ndim, f->tensor->dims, p));
            PE_CHECK(feed_to(pe, p, f->name, f->tensor, 0, -1, v->persistable));
            if (i == 0 && f->tensor->ndim > 0) pe->rows[p] = f->tensor->dims[0];
        }
    }
    return PE_OK;
}

pe_status pe_run_list(pe_parallel_executor *pe, const pe_feed *const *feeds, const int *n_feeds, int n_lists,
                      const char *const *fetch, int n_fetch, bool return_merged, pe_tensor **fetch_out) {
    if (!pe) return pe_error(PE_ERR_INVALID, "pe_run: NULL executor");
    if (n_lists != pe->n)
        return pe_error(PE_ERR_INVALID, "list feed has %d entries but the executor has %d places: give one dict per place",
                        n_lists, pe->n);
    PE_CHECK(check_fetch_names(pe, fetch, n_fetch));
    PE_CHECK(ensure_fetchable(pe, fetch, n_fetch));
    PE_CHECK(ensure_local(pe));
    pe_status st = feed_list(pe, feeds, n_feeds);
    if (st == PE_OK) st = share_sharded_state(pe);
    if (st == PE_OK) st = plan_memory(pe, feeds, n_feeds, n_lists, fetch, n_fetch);
    pe->run_fetch = fetch;
    pe->run_n_fetch = n_fetch;
    if (st == PE_OK) st = run_graph(pe);
    if (st == PE_OK) st = finish(pe, fetch, n_fetch, return_merged, fetch_out);
    end_run(pe);
    return st;
}
