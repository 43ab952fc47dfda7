/* executor/opt_shard.c — shard_optimizer: each optimizer update runs once,
 * split into one element range per place (OPT_SHARD handles).
 *
 * Shard i of k of an optimizer op owns elements [b, e) of its parameter
 * (k equal ranges, multiples of 16 elements so no two shards write one
 * cache line): it sums that range of the gradient over the places, tile
 * by tile, into a tile on its stack that the update reads (into place i's
 * copy of the gradient when the run checks it for NaN / Inf, into every
 * place's when the run fetches it: nothing else reads it, shard_count in
 * passes/multi_device.c), runs the op's kernel once on views of that range
 * of place i's tensors
 * (whole tensors for the scalar slots: LearningRate, Beta1Pow, ...), and
 * copies the range of every per-element output to each place whose storage
 * is not the same memory (the places share it unless something replaced a
 * buffer, e.g. a feed of the parameter). Place i's scalar outputs (adam's
 * powers) are advanced by shard i; shard 0 also sets them on the places
 * beyond k.
 *
 * The exchange is a reduce-scatter (each shard's range of the gradient
 * summed tile by tile, so the tile is still in cache for the update: read
 * straight from the places' gradients, or through the place group of
 * runtime/comm into its place's when the sum must stay) and an all-gather of
 * the updated ranges, which in-process places skip by sharing the storage.
 *
 * Across trainers the shards are the world's global ranks (shard s runs on
 * trainer s / places, place s % places) and each half is one collective
 * handle of its own, in the chain every trainer issues alike: SHARD_SUM
 * reduce-scatters the whole gradient over every rank (runtime/comm/hier.c:
 * places, then processes; each place's range lands in place in its
 * gradient: an allreduce instead when the run fetches the gradient), this
 * trainer's shards update their ranges (no exchange of their own; the
 * places of a process still share the state's storage), and SHARD_GATHER
 * packs each local shard's ranges of the parameter and the accumulators
 * (velocity, moments: the checkpoint must see them) into one buffer of
 * `per` elements per var per rank, all-gathers it in place, and copies
 * the other ranks' ranges out when it completes. Ops with whole in-place
 * outputs (adam's beta powers) are not sharded across trainers
 * (passes/multi_device.c).
 *
 * Why in the executor: the split is of tensors at run time (views of
 * element ranges), not of the program; the pass (passes/multi_device.c)
 * only decides which ops shard and makes their handles.
 */
#include "executor/nan_inf.h"
#include "executor/pe_internal.h"

#include <stdlib.h>
#include <string.h>

#define SHARD_TILE_ELEMS 16384 /* per kernel thread: a tile's 5 arrays fit a core's L2 */
#define SHARD_SUM_TILE_ELEMS 4096 /* summed into a stack tile: 16 KiB, in L1 for the update */

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

/* Shard s of k of a parameter of n elements: elements [*b, *e), k equal
 * ranges of multiples of 16 elements (empty for the last shards of a small
 * parameter). */
static void shard_range(int64_t n, int s, int k, int64_t *b, int64_t *e) {
    const int64_t per = ((n + k - 1) / k + 15) / 16 * 16;
    *b = per * s < n ? per * s : n;
    *e = *b + per < n ? *b + per : n;
}

/* The input slot of `c` that reads the gradient `var` (one tensor), or -1. */
static int grad_slot(const pe_op_ctx *c, const char *var) {
    for (int i = 0; i < c->info->n_inputs; i++)
        if (c->n_in[i] == 1 && c->in[i][0] && pe_op_info_elem_input(c->info, i) && !strcmp(c->in_names[i][0], var))
            return i;
    return -1;
}

pe_status pe_pe_run_opt_shard(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    pe_op_ctx *c = &pe->ctxs[h];
    const pe_op_info *info = c->info;
    /* shard s (a global rank across trainers) runs on place me */
    const int s = hd->root, k = hd->n_shards, me = hd->place;
    const bool summed = pe->opt.num_trainers > 1; /* by the SHARD_SUM before it */
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
                                c->in_names[i][a], pe_pe_place_name(pe, me, pb),
                                !t->buf ? "has no value"
                                : elem  ? "does not have the parameter's element count and dtype"
                                        : "is empty");
        }
    const size_t es = pe_dtype_size(param->dtype);
    int64_t b, e;
    shard_range(n, s, k, &b, &e);
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
                            info->name, hd->var, pe_pe_place_name(pe, p, pb), g ? (long long)pe_tensor_numel(g) : 0LL,
                            g ? pe_dtype_name(g->dtype) : "-", pe_ctx_in_name(c, "Param", 0), (long long)n,
                            pe_dtype_name(param->dtype));
        gbase[p] = pe_tensor_data(g);
    }
    for (int i = 0; i < info->n_outputs; i++)
        if (c->n_out[i] == 1 && c->out[i][0] && pe_op_info_elem_output(info, i) &&
            (pe_tensor_numel(c->out[i][0]) != n || !c->out[i][0]->buf || c->out[i][0]->dtype != param->dtype))
            return pe_error(PE_ERR_INVALID, "op %s: output %s '%s' on %s is not laid out like parameter '%s'", info->name,
                            info->outputs[i].name, c->out_names[i][0], pe_pe_place_name(pe, me, pb),
                            pe_ctx_in_name(c, "Param", 0));
    const bool fetched = is_fetched(pe, hd->var);
    int64_t tile = SHARD_TILE_ELEMS * (int64_t)pe->kernel_threads;
    bool one_call = false;
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
            one_call = true;
            continue;
        }
        sbuf[i] = (pe_buffer){.data = scratch[i], .bytes = sizeof scratch[i], .place = o->place, .refcount = 1, .external = true};
        stens[i] = *o;
        stens[i].buf = &sbuf[i];
        stens[i].offset = 0;
        sout[i] = &stens[i];
        v.out[i] = &sout[i];
    }
    /* The summed tile straight into a scratch tile the update reads
     * (gsum), when nothing reads the summed gradient afterwards (not
     * fetched, not checked for NaN / Inf), the places are this process's,
     * the parameter is float32 and the update runs on one kernel thread in
     * tiles (a larger tile would be forked): the same sums in the same rank
     * order as the reduce (bitwise the same update), without writing the
     * sum back into place s's gradient and reading it again; with tiles
     * of 4,096 elements (16 KiB: the sum is still in L1 for the update)
     * the 2-place MLP step took 0.3-1.8% less than with 16,384 in two
     * series of alternating rounds (issue 17 item 3, docs/benchmarks.md). */
    _Alignas(64) char gsum[SHARD_SUM_TILE_ELEMS * sizeof(float)];
    int gslot = -1;
    if (!summed && !fetched && !pe->check_nan_inf && pe->n >= 2 && param->dtype == PE_DTYPE_FP32 &&
        pe->kernel_threads == 1 && !one_call && (gslot = grad_slot(c, hd->var)) >= 0)
        tile = SHARD_SUM_TILE_ELEMS;
    pe_buffer gsum_buf;
    for (int64_t t0 = b; t0 < e; t0 += tile) {
        const int64_t t1 = t0 + tile < e ? t0 + tile : e;
        for (int p = 0; p < pe->n; p++) bufs[p] = gbase[p] + (size_t)t0 * es;
        /* the reduce-scatter half: shard s's range summed into place s (or into gsum) */
        pe_status st = PE_OK;
        if (gslot >= 0) {
            pe_comm_combine_to(gsum, bufs[0], bufs[1], t1 - t0, param->dtype, PE_RED_SUM);
            for (int p = 2; p < pe->n; p++) pe_comm_add(gsum, bufs[p], t1 - t0, param->dtype);
        } else if (!summed) {
            st = fetched ? pe_group_allreduce(pe->comm, bufs, t1 - t0, param->dtype)
                         : pe_group_reduce(pe->comm, bufs, t1 - t0, param->dtype, s);
        }
        if (st != PE_OK)
            return pe_error_wrap(st, "summing '%s' over the places (elements %lld..%lld)", hd->var, (long long)t0,
                                 (long long)t1);
        int nv = 0;
        for (int i = 0; i < info->n_inputs; i++)
            if (c->n_in[i] == 1 && c->in[i][0] && pe_op_info_elem_input(info, i)) {
                range_view(&views[nv], c->in[i][0], t0, t1);
                if (i == gslot) {
                    gsum_buf = (pe_buffer){.data = gsum, .bytes = sizeof gsum, .place = c->in[i][0]->place,
                                           .refcount = 1, .external = true};
                    views[nv].buf = &gsum_buf;
                    views[nv].offset = 0;
                }
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

    /* 3. the all-gather half: the range to the places that do not share
     * the storage (in-process places share it, so this copies only after a
     * buffer was replaced); 4. scalar outputs to the places without a shard
     * of their own */
    for (int i = 0; i < info->n_outputs; i++) {
        if (c->n_out[i] != 1 || !c->out[i][0]) continue;
        bool elem = pe_op_info_elem_output(info, i);
        if (!elem && s != 0) continue;
        const pe_tensor *src = c->out[i][0];
        const char *src_data = (const char *)pe_tensor_data(src) + (elem ? (size_t)b * es : 0);
        size_t bytes = elem ? (size_t)(e - b) * es : pe_tensor_nbytes(src);
        for (int q = elem ? 0 : k; q < pe->n; q++) {
            if (q == me) continue;
            pe_tensor *d = pe_scope_find_var(pe->local[q], c->out_names[i][0]);
            if (!d || !d->buf || pe_tensor_nbytes(d) != pe_tensor_nbytes(src))
                return pe_error(PE_ERR_INVALID, "op %s: '%s' on %s does not match its value on %s", info->name,
                                c->out_names[i][0], pe_pe_place_name(pe, q, pb), pe_pe_place_name(pe, me, pb + 16));
            char *dst = (char *)pe_tensor_data(d) + (elem ? (size_t)b * es : 0);
            if (dst != src_data) memcpy(dst, src_data, bytes);
        }
    }
    return PE_OK;
}

/* check_nan_inf: what shard h wrote — its range of the summed gradient on
 * its place, then its range of every per-element output and its place's
 * scalar outputs (no other shard writes them). */
pe_status pe_pe_check_opt_shard(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    const pe_op_ctx *c = &pe->ctxs[h];
    const pe_op_info *info = c->info;
    const pe_tensor *param = pe_ctx_in(c, "Param");
    int64_t b, e;
    shard_range(param ? pe_tensor_numel(param) : 0, hd->root, hd->n_shards, &b, &e);
    if (b >= e) return PE_OK;
    const pe_place place = pe->places[hd->place];
    const pe_tensor *g = pe_scope_find_var(pe->local[hd->place], hd->var);
    if (g) PE_CHECK(pe_nan_inf_check(g, b, e, -1, "allreduce", place, NULL, hd->var));
    for (int i = 0; i < info->n_outputs; i++) {
        if (c->n_out[i] != 1 || !c->out[i][0]) continue;
        bool elem = pe_op_info_elem_output(info, i);
        PE_CHECK(pe_nan_inf_check(c->out[i][0], elem ? b : 0, elem ? e : -1, hd->op_idx, info->name, place,
                                  info->outputs[i].name, c->out_names[i][0]));
    }
    return PE_OK;
}

/* shard_optimizer: the parameters and accumulators sharded updates write
 * (names borrowed from place 0's program), collected once. */
pe_status pe_pe_collect_sharded_state(pe_parallel_executor *pe) {
    int last_op = -1; /* an op's handles are consecutive (across trainers a trainer may have no shard of it) */
    for (int h = 0; h < pe->g->n_h; h++) {
        const pe_handle *hd = &pe->g->h[h];
        if ((hd->kind != PE_HANDLE_OPT_SHARD && hd->kind != PE_HANDLE_SHARD_GATHER) || hd->op_idx == last_op) continue;
        last_op = hd->op_idx;
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

bool pe_pe_is_sharded_state(const pe_parallel_executor *pe, const char *name) {
    for (int i = 0; i < pe->n_shared_state; i++)
        if (!strcmp(pe->shared_state[i], name)) return true;
    return false;
}

/* Places 1..N-1 take place 0's storage of the sharded state: at
 * construction (instead of a copy), and before each run again if something
 * replaced a buffer since (a checkpoint loaded or a value set into the
 * scope after construction, a persistable feed). Place 0's value is the
 * parameter's value, as for fetches; the places stay one copy. */
pe_status pe_pe_share_sharded_state(pe_parallel_executor *pe) {
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

/* ---- across trainers: the two halves as collectives ----------------------- */

/* The op's per-element state (Param, Velocity, Moment1, ...: its elem
 * pairs' inputs) in slot order; returns the count. */
static int shard_vars(const pe_parallel_executor *pe, const pe_handle *hd, const char **names) {
    const pe_op *op = &pe->g->progs[0]->blocks[0].ops[hd->op_idx];
    const pe_op_info *info = pe_op_info_find(op->type);
    int n = 0;
    for (int k = 0; info && k < info->n_elem_pairs; k++) {
        const char *name = pe_op_input1(op, info->inputs[info->elem_pairs[k][0]].name);
        if (name) names[n++] = name;
    }
    return n;
}

/* The gradient of handle h on every place (its data in g[p]), all of one
 * element count and dtype. */
static pe_status shard_grads(pe_parallel_executor *pe, const pe_handle *hd, char **g, int64_t *n, pe_dtype *dt) {
    char pb[32];
    for (int p = 0; p < pe->n; p++) {
        const pe_tensor *t = pe_scope_find_var(pe->local[p], hd->var);
        if (!t || !t->buf || (p > 0 && (pe_tensor_numel(t) != *n || t->dtype != *dt)))
            return pe_error(PE_ERR_INVALID, "reduce-scatter of the shards of op %d: gradient '%s' on %s %s",
                            hd->op_idx, hd->var, pe_pe_place_name(pe, p, pb),
                            !t || !t->buf ? "has no value" : "differs from place 0's in element count or dtype");
        *n = pe_tensor_numel(t);
        *dt = t->dtype;
        g[p] = pe_tensor_data(t);
    }
    return PE_OK;
}

pe_status pe_pe_run_shard_sum(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    char *g[PE_MAX_PLACES];
    void *recv[PE_MAX_PLACES];
    int64_t n = 0;
    pe_dtype dt = PE_DTYPE_FP32;
    PE_CHECK(shard_grads(pe, hd, g, &n, &dt));
    pe_work *w = NULL;
    if (is_fetched(pe, hd->var)) { /* the run reads the whole sum */
        pe_status st = pe_group_start(pe->comm, PE_COLL_ALLREDUCE, (void *const *)g, n, dt, 0, &w);
        return pe_pe_await_work(pe, h, st, w);
    }
    const int world = pe_pe_world_places(pe), first = pe->opt.trainer_id * pe->n;
    int64_t *counts = malloc(sizeof *counts * (size_t)world), b, e;
    if (!counts) return pe_error(PE_ERR_NOMEM, "out of memory summing the shards of '%s'", hd->var);
    for (int r = 0; r < world; r++) {
        shard_range(n, r, hd->n_shards, &b, &e);
        counts[r] = r < hd->n_shards ? e - b : 0;
    }
    for (int p = 0; p < pe->n; p++) {
        shard_range(n, first + p, hd->n_shards, &b, &e);
        recv[p] = g[p] + (size_t)(first + p < hd->n_shards ? b : 0) * pe_dtype_size(dt); /* in place */
    }
    pe_status st = pe_group_start_reduce_scatterv(pe->comm, (const void *const *)g, recv, counts, dt, &w);
    free(counts);
    return pe_pe_await_work(pe, h, st, w);
}

/* Handle h's exchange buffer: per elements of each of nv vars for every
 * rank of the world, made on first use (freed with the local scopes). */
static char *gather_mem(pe_parallel_executor *pe, int h, size_t bytes) {
    if (!pe->gather_mem) {
        if (!(pe->gather_mem = calloc((size_t)pe->g->n_h, sizeof *pe->gather_mem))) return NULL;
        pe->n_gather_mem = pe->g->n_h;
    }
    if (!pe->gather_mem[h]) pe->gather_mem[h] = malloc(bytes ? bytes : 1);
    return pe->gather_mem[h];
}

void pe_pe_free_gather_mem(pe_parallel_executor *pe) {
    for (int h = 0; h < pe->n_gather_mem; h++) free(pe->gather_mem[h]);
    free(pe->gather_mem);
    pe->gather_mem = NULL;
    pe->n_gather_mem = 0;
}

/* Var v of place p's state, and the buffer layout: per elements of each
 * of nv vars per rank. */
typedef struct {
    const char *names[PE_MAX_SLOTS];
    int nv;
    int64_t n, per;
    size_t es;
} gather_layout;

static pe_status layout_of(pe_parallel_executor *pe, const pe_handle *hd, gather_layout *l) {
    char pb[32];
    l->nv = shard_vars(pe, hd, l->names);
    const pe_tensor *t0 = l->nv ? pe_scope_find_var(pe->local[0], l->names[0]) : NULL;
    if (!t0 || !t0->buf)
        return pe_error(PE_ERR_INVALID, "all-gather of the shards of op %d: its parameter has no value on %s",
                        hd->op_idx, pe_pe_place_name(pe, 0, pb));
    l->n = pe_tensor_numel(t0);
    l->es = pe_dtype_size(t0->dtype);
    int64_t b, e;
    shard_range(l->n, 0, hd->n_shards, &b, &e);
    l->per = e - b;
    for (int p = 0; p < pe->n; p++)
        for (int v = 0; v < l->nv; v++) {
            const pe_tensor *t = pe_scope_find_var(pe->local[p], l->names[v]);
            if (!t || !t->buf || pe_tensor_numel(t) != l->n || t->dtype != t0->dtype)
                return pe_error(PE_ERR_INVALID, "all-gather of the shards of op %d: '%s' on %s is not laid out like "
                                "parameter '%s'", hd->op_idx, l->names[v], pe_pe_place_name(pe, p, pb), l->names[0]);
        }
    return PE_OK;
}

/* Copies rank r's ranges between the exchange buffer and place p's vars
 * (to_buf: pack; else unpack, skipping places that share place 0's). */
static void copy_ranges(pe_parallel_executor *pe, const pe_handle *hd, const gather_layout *l, char *buf, int r,
                        int p, bool to_buf) {
    int64_t b, e;
    shard_range(l->n, r, hd->n_shards, &b, &e);
    for (int v = 0; v < l->nv && b < e; v++) {
        char *var = pe_tensor_data(pe_scope_find_var(pe->local[p], l->names[v]));
        char *var0 = pe_tensor_data(pe_scope_find_var(pe->local[0], l->names[v]));
        char *slot = buf + (size_t)(((int64_t)r * l->nv + v) * l->per) * l->es;
        if (!to_buf && p > 0 && var == var0) continue; /* place 0's storage, written already */
        var += (size_t)b * l->es;
        if (to_buf) memcpy(slot, var, (size_t)(e - b) * l->es);
        else memcpy(var, slot, (size_t)(e - b) * l->es);
    }
}

pe_status pe_pe_run_shard_gather(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    gather_layout l;
    PE_CHECK(layout_of(pe, hd, &l));
    const int world = pe_pe_world_places(pe), first = pe->opt.trainer_id * pe->n;
    char *buf = gather_mem(pe, h, (size_t)(l.per * l.nv * world) * l.es);
    if (!buf) return pe_error(PE_ERR_NOMEM, "out of memory gathering the shards of op %d", hd->op_idx);
    void *recv[PE_MAX_PLACES];
    for (int p = 0; p < pe->n; p++) {
        if (first + p < hd->n_shards) copy_ranges(pe, hd, &l, buf, first + p, p, true);
        recv[p] = buf; /* the places share it: each one's part is its own */
    }
    pe_work *w = NULL;
    const pe_tensor *t0 = pe_scope_find_var(pe->local[0], l.names[0]);
    pe_status st = pe_group_start_allgather(pe->comm, recv, l.per * l.nv, t0->dtype, &w);
    return pe_pe_await_work(pe, h, st, w);
}

void pe_pe_unpack_shard_gather(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    gather_layout l;
    if (layout_of(pe, hd, &l) != PE_OK) return; /* checked before the all-gather */
    const int first = pe->opt.trainer_id * pe->n;
    for (int r = 0; r < hd->n_shards; r++)
        if (r < first || r >= first + pe->n)
            for (int p = 0; p < pe->n; p++) copy_ranges(pe, hd, &l, pe->gather_mem[h], r, p, false);
}
