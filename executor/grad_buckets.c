/* executor/grad_buckets.c — gradients laid out for few, large collectives,
 * and the collectives of single vars.
 *
 * fuse_all_reduce_ops: each ALLREDUCE_FUSED handle's gradients are laid out
 * back to back in one buffer per place; every gradient var of the local
 * scope becomes a view (pe_buffer_wrap, refcount 1, so kernels write in
 * place) at its offset, and the handle reduces the whole buffer with one
 * collective call. The buffers live with the local scopes.
 *
 * fuse_all_optimizer_ops: a merged_sgd / merged_momentum / merged_adam op's
 * parameters, accumulators and gradients are laid out back to back per
 * place, so its kernel runs one flat loop over one contiguous buffer
 * (ops/cpu/fused_optimizer.c falls back to per-parameter pieces whenever a
 * var has left its place, e.g. after a user wrote a parameter).
 * Persistables move into one ref-counted buffer (each tensor holds a
 * reference at its offset, so the caller's scope stays valid after the
 * executor is gone); gradients, which live in the local scopes, become
 * views into executor-owned memory freed with them. Gradients already laid
 * out in allreduce buckets stay there.
 *
 * Why here and not in a pass: the layout is memory of the local scopes,
 * made when they are (first run, after a drop), from the graph's buckets.
 */
#include "executor/nan_inf.h"
#include "executor/pe_internal.h"
#include "ops/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pe_pe_free_buckets(pe_parallel_executor *pe) {
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

pe_status pe_pe_lay_out_buckets(pe_parallel_executor *pe) {
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

/* merged_sgd / merged_momentum / merged_adam (ops.def) */
static bool is_merged_opt(const pe_op *op) { return pe_op_info_is_merged(pe_op_info_find(op->type)); }

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

pe_status pe_pe_coalesce_optimizer_state(pe_parallel_executor *pe) {
    if (!pe->opt.build_strategy.fuse_all_optimizer_ops || pe->opt.share_vars_from) return PE_OK;
    for (int p = 0; p < pe->n; p++) {
        const pe_block *b = &pe->g->progs[p]->blocks[0];
        for (int i = 0; i < b->n_ops; i++) {
            /* the per-element slots of ops.def (Param, Velocity, Moment1, Moment2) */
            const pe_op_info *info = pe_op_info_find(b->ops[i].type);
            for (int k = 0; pe_op_info_is_merged(info) && k < info->n_elem_pairs; k++)
                PE_CHECK(coalesce_persistables(pe, p, &b->ops[i], info->inputs[info->elem_pairs[k][0]].name));
        }
    }
    return PE_OK;
}

void pe_pe_free_opt_mem(pe_parallel_executor *pe) {
    for (int i = 0; i < pe->n_opt_mem; i++) pe_place_free(pe->opt_mem[i].place, pe->opt_mem[i].ptr, pe->opt_mem[i].bytes);
    free(pe->opt_mem);
    pe->opt_mem = NULL;
    pe->n_opt_mem = 0;
}

/* After the local scopes are made: each merged op's gradients as views into
 * one block per place (unless a gradient is already in an allreduce bucket). */
pe_status pe_pe_lay_out_opt_grads(pe_parallel_executor *pe) {
    if (!pe->opt.build_strategy.fuse_all_optimizer_ops || pe->opt_mem) return PE_OK;
    for (int p = 0; p < pe->n; p++) {
        const pe_block *b = &pe->g->progs[p]->blocks[0];
        for (int i = 0; i < b->n_ops; i++) {
            const pe_slot *s = is_merged_opt(&b->ops[i]) ? pe_op_input(&b->ops[i], "Grad") : NULL;
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

/* Bucketed and coalesced gradients of graph g stay out of its arenas. */
pe_status pe_pe_protect_buckets(pe_parallel_executor *pe, pe_mem_arenas *arenas, const pe_ssa_graph *g) {
    for (int h = 0; arenas && h < g->n_h; h++)
        for (int k = 0; k < g->h[h].n_vars; k++) PE_CHECK(pe_mem_arenas_protect(arenas, g->h[h].vars[k]));
    const pe_block *b = &g->progs[0]->blocks[0];
    for (int i = 0; arenas && pe->opt.build_strategy.fuse_all_optimizer_ops && i < b->n_ops; i++) {
        const pe_slot *s = is_merged_opt(&b->ops[i]) ? pe_op_input(&b->ops[i], "Grad") : NULL;
        for (int k = 0; s && k < s->n_args; k++) PE_CHECK(pe_mem_arenas_protect(arenas, s->args[k]));
    }
    return PE_OK;
}

/* Bytes of the buckets and coalesced gradients (all places). */
size_t pe_pe_bucket_bytes(const pe_parallel_executor *pe) {
    size_t total = 0;
    for (int h = 0; pe->bucket_mem && h < pe->g->n_h; h++)
        for (int p = 0; p < pe->n; p++)
            if (pe->bucket_mem[h * pe->n + p]) total += (size_t)pe->g->h[h].bucket_bytes;
    for (int i = 0; i < pe->n_opt_mem; i++) total += pe->opt_mem[i].bytes;
    return total;
}

/* ---- the collectives ----------------------------------------------------
 * Issued through the place group (runtime/comm/comm.h). The in-process
 * group sums on the calling thread (pe->comm->direct: the pool thread does
 * the work, it waits for nothing). A backend that completes later (NCCL,
 * across processes) gets a work whose callback tells the scheduler
 * (pe_sched_done): the handle returns PE_SCHED_PENDING and no pool thread
 * blocks in the call. Without a scheduler (enable_sequential_execution) the
 * run waits for the work.
 *
 * A program's collective ops (pe_handle_is_program_collective:
 * c_allreduce_max, c_broadcast,
 * c_allgather, ...; ops/collective.h) run the same way, with the op's
 * reduction and root; their root is a rank of the world (trainer x places
 * + place), which the group of a multi-trainer executor spans. */

/* What handle h exchanges, for messages. */
static const char *coll_what(const pe_parallel_executor *pe, int h, char *buf, size_t n) {
    const pe_handle *hd = &pe->g->h[h];
    if (hd->kind == PE_HANDLE_ALLREDUCE_FUSED)
        snprintf(buf, n, "allreduce of the bucket of %d gradients from '%s'", hd->n_vars, hd->var);
    else if (hd->kind == PE_HANDLE_SHARD_SUM)
        snprintf(buf, n, "reduce-scatter of '%s' over the %d shards of op %d", hd->var, hd->n_shards, hd->op_idx);
    else if (hd->kind == PE_HANDLE_SHARD_GATHER)
        snprintf(buf, n, "all-gather of the %d shards of op %d (gradient '%s')", hd->n_shards, hd->op_idx, hd->var);
    else if (pe_handle_is_program_collective(hd))
        snprintf(buf, n, "op %s (block 0 op %d) on '%s'", pe->g->progs[0]->blocks[0].ops[hd->op_idx].type,
                 hd->op_idx, hd->kind == PE_HANDLE_ALLGATHER || hd->kind == PE_HANDLE_SCATTER ? hd->vars[0] : hd->var);
    else snprintf(buf, n, "collective on '%s'", hd->var);
    return buf;
}

/* What follows a collective's success: the all-gather's copies out, the
 * nan/inf check when the handle returns pending (a handle that returns
 * PE_OK is checked by the run: parallel_executor.c:run_handle_checked). */
static pe_status after_collective(pe_parallel_executor *pe, int h, bool check) {
    if (pe->g->h[h].kind == PE_HANDLE_SHARD_GATHER) pe_pe_unpack_shard_gather(pe, h);
    return check && pe->check_nan_inf ? pe_pe_check_collective(pe, h) : PE_OK;
}

static void coll_done(pe_work *w, pe_status st, void *user) {
    pe_coll_done *d = user;
    if (d->pe->tl) pe_timeline_handle(d->pe->tl, d->pe->g, d->h, d->t0, pe_timeline_now());
    if (st != PE_OK) {
        char what[512];
        pe_error(st, "%s: %s", coll_what(d->pe, d->h, what, sizeof what), pe_work_message(w));
    } else {
        st = after_collective(d->pe, d->h, true);
    }
    pe_sched_done(d->pe->sched, d->h, st);
}

pe_status pe_pe_await_work(pe_parallel_executor *pe, int h, pe_status st, pe_work *w) {
    char what[512];
    if (st != PE_OK) return pe_error_wrap(st, "%s", coll_what(pe, h, what, sizeof what));
    if (!pe->sched) {
        st = pe_work_wait(w);
        if (st != PE_OK) pe_error(st, "%s: %s", coll_what(pe, h, what, sizeof what), pe_work_message(w));
        pe_work_free(w);
        return st == PE_OK ? after_collective(pe, h, false) : st;
    }
    pe_work_on_done(w, coll_done, &pe->coll_done[h]);
    pe_work_free(w); /* a pending work frees itself when done; its callback still runs */
    return PE_SCHED_PENDING;
}

static pe_status issue(pe_parallel_executor *pe, int h, const pe_coll_args *a, const void *const *sends,
                       void *const *bufs) {
    char what[512];
    pe_status st;
    if (pe->comm->direct) {
        st = pe_group_run(pe->comm, a, sends, bufs, NULL);
        return st == PE_OK ? PE_OK : pe_error_wrap(st, "%s", coll_what(pe, h, what, sizeof what));
    }
    pe_work *w = NULL;
    st = pe_group_run(pe->comm, a, sends, bufs, &w);
    return pe_pe_await_work(pe, h, st, w);
}

pe_status pe_pe_run_bucket(pe_parallel_executor *pe, int h) {
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
                                pe_pe_place_name(pe, p, pb));
            dt = t->dtype;
            off += bytes;
        }
        bufs[p] = base;
    }
    pe_coll_args a = {.op = PE_COLL_ALLREDUCE, .count = hd->bucket_bytes / (int64_t)pe_dtype_size(dt), .dt = dt};
    return issue(pe, h, &a, NULL, bufs);
}

pe_status pe_pe_run_collective(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    void *bufs[PE_MAX_PLACES];
    const pe_tensor *t0 = NULL;
    char pb[32], who[512];
    if (pe_handle_is_program_collective(hd)) coll_what(pe, h, who, sizeof who); /* a program's op: name it */
    else
        snprintf(who, sizeof who, "%s of '%s'", hd->kind == PE_HANDLE_BCAST    ? "broadcast"
                                                : hd->kind == PE_HANDLE_REDUCE ? "reduce"
                                                                               : "allreduce", hd->var);
    for (int p = 0; p < pe->n; p++) {
        const pe_tensor *t = pe_scope_find_var(pe->local[p], hd->var);
        if (!t || (!t->buf && pe_tensor_numel(t) > 0))
            return pe_error(PE_ERR_NOT_FOUND, "%s: the var has no value on %s", who, pe_pe_place_name(pe, p, pb));
        if (!t0) t0 = t;
        if (t->dtype != t0->dtype || pe_tensor_numel(t) != pe_tensor_numel(t0))
            return pe_error(PE_ERR_INVALID, "%s: %s has %lld elements of %s, place 0 has %lld of %s (every place "
                            "must pass the same shape: a batch split unevenly across the places?)", who,
                            pe_pe_place_name(pe, p, pb), (long long)pe_tensor_numel(t), pe_dtype_name(t->dtype),
                            (long long)pe_tensor_numel(t0), pe_dtype_name(t0->dtype));
        bufs[p] = pe_tensor_data(t);
    }
    pe_coll op = hd->kind == PE_HANDLE_ALLREDUCE ? PE_COLL_ALLREDUCE
                 : hd->kind == PE_HANDLE_REDUCE  ? PE_COLL_REDUCE
                                                 : PE_COLL_BROADCAST;
    pe_coll_args a = {.op = op, .count = pe_tensor_numel(t0), .dt = t0->dtype, .root = hd->world_root};
    pe_collective co;
    if (pe_handle_is_program_collective(hd) && pe_collective_of(&pe->g->progs[0]->blocks[0].ops[hd->op_idx], &co))
        a.red = co.red;
    return issue(pe, h, &a, NULL, bufs);
}

/* *x = X (var) of handle h's op on place p, or an error naming the op. */
static pe_status coll_input(pe_parallel_executor *pe, int h, int p, const pe_tensor **x) {
    const char *name = pe->g->h[h].var;
    *x = pe_scope_find_var(pe->local[p], name);
    if (*x && ((*x)->buf || pe_tensor_numel(*x) == 0)) return PE_OK;
    char pb[32], what[512];
    return pe_error(PE_ERR_NOT_FOUND, "%s: X '%s' has no value on %s", coll_what(pe, h, what, sizeof what), name,
                    pe_pe_place_name(pe, p, pb));
}

/* c_allgather over the world: X (var) of every place -> Out (vars[0]) of
 * every place, [world * rows, d...], allocated here on each place. */
pe_status pe_pe_run_allgather(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    void *bufs[PE_MAX_PLACES];
    const void *sends[PE_MAX_PLACES];
    const pe_tensor *x0 = NULL;
    char pb[32], what[512];
    const int world = pe_comm_size(pe->comm->ranks[0]);
    for (int p = 0; p < pe->n; p++) {
        const pe_tensor *x;
        PE_CHECK(coll_input(pe, h, p, &x));
        if (!x0) x0 = x;
        if (x->ndim < 1 || x->dtype != x0->dtype || x->ndim != x0->ndim ||
            pe_tensor_numel(x) != pe_tensor_numel(x0) || x->dims[0] != x0->dims[0])
            return pe_error(PE_ERR_INVALID, "%s: X '%s' on %s is %s of %lld elements (rank %d), place 0's %s of "
                            "%lld (rank %d): every rank gathers the same shape", coll_what(pe, h, what, sizeof what),
                            hd->var, pe_pe_place_name(pe, p, pb), pe_dtype_name(x->dtype),
                            (long long)pe_tensor_numel(x), x->ndim, pe_dtype_name(x0->dtype),
                            (long long)pe_tensor_numel(x0), x0->ndim);
        pe_tensor *out = pe_scope_var(pe->local[p], hd->vars[0]);
        int64_t dims[PE_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) dims[d] = x->dims[d];
        dims[0] *= world;
        if (!out) return pe_error(PE_ERR_NOMEM, "%s: out of memory", coll_what(pe, h, what, sizeof what));
        pe_status st = pe_tensor_resize(out, x->dtype, x->ndim, dims, pe->places[p]);
        if (st != PE_OK) return pe_error_wrap(st, "%s: Out on %s", coll_what(pe, h, what, sizeof what),
                                              pe_pe_place_name(pe, p, pb));
        sends[p] = pe_tensor_data(x);
        bufs[p] = pe_tensor_data(out);
    }
    pe_coll_args a = {.op = PE_COLL_ALLGATHER, .count = pe_tensor_numel(x0), .dt = x0->dtype};
    return issue(pe, h, &a, sends, bufs);
}

/* c_scatter over the world: every place's Out (vars[0]) = its rows chunk
 * of X (var) of rank `root`. X is copied into a scratch var of the local
 * scope ("<Out>@SCATTER", kept run to run) on the root's place, the
 * scratch is broadcast from the root, and Out is a view of this rank's
 * chunk of it: no place's X changes, and no copy after the broadcast. */
pe_status pe_pe_run_scatter(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    void *bufs[PE_MAX_PLACES];
    const pe_tensor *x0 = NULL;
    char pb[32], what[512], name[512];
    const int world = pe_comm_size(pe->comm->ranks[0]);
    const int g0 = pe->outer ? pe_comm_rank(pe->outer) * pe->n : 0; /* this process's first rank */
    snprintf(name, sizeof name, "%s@SCATTER", hd->vars[0]);
    for (int p = 0; p < pe->n; p++) {
        const pe_tensor *x;
        PE_CHECK(coll_input(pe, h, p, &x));
        if (!x0) x0 = x;
        if (x->ndim < 1 || x->dims[0] % world || x->dtype != x0->dtype || pe_tensor_numel(x) != pe_tensor_numel(x0))
            return pe_error(PE_ERR_INVALID, "%s: X '%s' on %s is %s of %lld rows and %lld elements, place 0's %s of "
                            "%lld elements: every rank passes the same shape, whose rows split into %d equal chunks",
                            coll_what(pe, h, what, sizeof what), hd->var, pe_pe_place_name(pe, p, pb),
                            pe_dtype_name(x->dtype), (long long)(x->ndim ? x->dims[0] : 0),
                            (long long)pe_tensor_numel(x), pe_dtype_name(x0->dtype), (long long)pe_tensor_numel(x0),
                            world);
        pe_tensor *scratch = pe_scope_var(pe->local[p], name), *out = pe_scope_var(pe->local[p], hd->vars[0]);
        if (!scratch || !out) return pe_error(PE_ERR_NOMEM, "%s: out of memory", coll_what(pe, h, what, sizeof what));
        pe_tensor_clear(out); /* last run's view: the scratch stays unshared, so resizing keeps its bytes */
        pe_status st = pe_tensor_resize(scratch, x->dtype, x->ndim, x->dims, pe->places[p]);
        if (st == PE_OK && g0 + p == hd->root)
            st = pe_memcpy_places(pe_tensor_data(scratch), pe->places[p], pe_tensor_data(x), x->place,
                                  pe_tensor_nbytes(x));
        if (st != PE_OK) return pe_error_wrap(st, "%s: on %s", coll_what(pe, h, what, sizeof what),
                                              pe_pe_place_name(pe, p, pb));
        /* Out: rows chunk g0 + p of the scratch */
        int64_t dims[PE_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) dims[d] = x->dims[d];
        dims[0] /= world;
        pe_tensor_share(out, scratch);
        PE_CHECK(pe_tensor_set_meta(out, x->dtype, x->ndim, dims));
        out->offset += (size_t)(g0 + p) * pe_tensor_nbytes(out);
        bufs[p] = pe_tensor_data(scratch);
    }
    pe_coll_args a = {.op = PE_COLL_BROADCAST, .count = pe_tensor_numel(x0), .dt = x0->dtype, .root = hd->root};
    return issue(pe, h, &a, NULL, bufs);
}

/* check_nan_inf: what handle h's collective wrote — the summed gradients
 * on every place (a reduce: on its root). */
pe_status pe_pe_check_collective(pe_parallel_executor *pe, int h) {
    const pe_handle *hd = &pe->g->h[h];
    if (hd->kind == PE_HANDLE_SHARD_GATHER) return PE_OK; /* each shard checked its range where it ran */
    const bool fused = hd->kind == PE_HANDLE_ALLREDUCE_FUSED;
    const char *who = hd->kind == PE_HANDLE_REDUCE      ? "reduce"
                      : hd->kind == PE_HANDLE_BCAST     ? "broadcast"
                      : hd->kind == PE_HANDLE_ALLGATHER ? "allgather"
                      : hd->kind == PE_HANDLE_SCATTER   ? "scatter"
                                                        : "allreduce";
    /* a reduce writes its root only: a place, or for a program's op a rank
     * of the world (this process's places start at trainer x places) */
    int root = hd->root;
    if (pe_handle_is_program_collective(hd)) root = hd->world_root - (pe->outer ? pe_comm_rank(pe->outer) * pe->n : 0);
    for (int p = 0; p < pe->n; p++) {
        if (hd->kind == PE_HANDLE_REDUCE && p != root) continue;
        for (int k = 0; k < (fused ? hd->n_vars : 1); k++) {
            const char *name = fused                                                                ? hd->vars[k]
                               : hd->kind == PE_HANDLE_ALLGATHER || hd->kind == PE_HANDLE_SCATTER ? hd->vars[0]
                                                                                                  : hd->var;
            const pe_tensor *t = pe_scope_find_var(pe->local[p], name);
            if (t) PE_CHECK(pe_nan_inf_check(t, 0, -1, -1, who, pe->places[p], NULL, name));
        }
    }
    return PE_OK;
}
