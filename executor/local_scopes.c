/* executor/local_scopes.c — the scopes a ParallelExecutor runs in.
 *
 * Each place has a scope (place 0: the caller's scope, which holds the
 * persistables; place i > 0: a child scope holding replicas broadcast from
 * place 0) and a local execution scope for temporaries (a child of the
 * place scope, dropped every num_iteration_per_drop_scope runs or on
 * demand). With share_vars_from the place scopes are children of the
 * source's place scopes instead, so the new executor reads the source's
 * parameters by name without copying. One op context per handle resolves
 * its tensors in the local scope once; contexts live as long as the local
 * scopes.
 *
 * Why apart from the run: scopes, their layout (buckets, coalesced
 * gradients, arenas) and the contexts pointing into them are made and
 * dropped together; the run only uses them.
 */
#include "executor/pe_internal.h"

#include <stdlib.h>

pe_status pe_pe_make_place_scopes(pe_parallel_executor *pe, pe_scope *scope) {
    const pe_parallel_executor *src = pe->opt.share_vars_from;
    pe->global = scope;
    for (int p = 0; p < pe->n; p++) {
        if (src) pe->place_scope[p] = pe_scope_new(src->place_scope[p]);
        else pe->place_scope[p] = p == 0 ? scope : pe_scope_new(scope);
        pe->owns_place_scope[p] = src || p > 0;
        if (!pe->place_scope[p]) return pe_error(PE_ERR_NOMEM, "out of memory creating the scope of place %d", p);
    }
    return PE_OK;
}

void pe_pe_free_place_scopes(pe_parallel_executor *pe) {
    for (int p = 0; p < pe->n; p++)
        if (pe->owns_place_scope[p]) pe_scope_free(pe->place_scope[p]);
}

/* The persistables of the caller's scope, copied from place 0 to every
 * place (the sharded optimizer's state is shared instead:
 * pe_pe_share_sharded_state). Nothing to do with share_vars_from. */
pe_status pe_pe_broadcast_persistables(pe_parallel_executor *pe) {
    if (pe->opt.share_vars_from) return PE_OK;
    char pb[32];
    const pe_block *b = &pe->prog->blocks[0];
    for (int i = 0; i < b->n_vars; i++) {
        const pe_var *v = &b->vars[i];
        if (!v->persistable) continue;
        const pe_tensor *t = pe_scope_find_var(pe->global, v->name);
        if (!t || !t->buf) continue; /* created by the program itself */
        bool shared = pe_place_eq(t->place, pe->places[0]) && pe_pe_is_sharded_state(pe, v->name);
        for (int p = 0; p < pe->n && !shared; p++) {
            if (p == 0 && pe_place_eq(t->place, pe->places[0])) continue;
            pe_tensor *d = pe_scope_var(pe->place_scope[p], v->name);
            if (!d) return pe_error(PE_ERR_NOMEM, "out of memory");
            pe_status st = pe_tensor_copy(d, t, pe->places[p]);
            if (st != PE_OK) return pe_error_wrap(st, "broadcasting '%s' to %s", v->name, pe_pe_place_name(pe, p, pb));
        }
    }
    return PE_OK;
}

void pe_pe_release_ctxs(pe_parallel_executor *pe) {
    if (pe->ctxs)
        for (int h = 0; h < pe->g->n_h; h++) pe_op_ctx_release(&pe->ctxs[h]);
    pe->prepared = false;
}

void pe_drop_local_exe_scopes(pe_parallel_executor *pe) {
    if (!pe) return;
    pe_pe_release_ctxs(pe);
    pe_mem_arenas_release(pe->arenas);
    for (int p = 0; p < pe->n; p++) {
        pe_scope_free(pe->local[p]);
        pe->local[p] = NULL;
    }
    pe_pe_free_buckets(pe);
    pe_pe_free_opt_mem(pe);
    pe_pe_free_gather_mem(pe);
}

/* The local scopes' own storage, plus what their vars view: the memory
 * plan's arenas, the gradient buckets and the coalesced optimizer gradients
 * (each byte once). */
size_t pe_local_exe_scopes_bytes(const pe_parallel_executor *pe) {
    size_t total = pe_mem_arenas_bytes(pe->arenas) + pe_pe_bucket_bytes(pe);
    for (int p = 0; p < pe->n; p++)
        if (pe->local[p]) total += pe_scope_bytes(pe->local[p]);
    return total;
}

int pe_device_count(const pe_parallel_executor *pe) { return pe->n; }

pe_scope *pe_place_scope(const pe_parallel_executor *pe, int i) {
    return i >= 0 && i < pe->n ? pe->place_scope[i] : NULL;
}

/* Local scopes with every non-persistable var of the program pre-created
 * (so op contexts can resolve feeds before the first feed arrives). */
pe_status pe_pe_ensure_local(pe_parallel_executor *pe) {
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
    PE_CHECK(pe_pe_lay_out_buckets(pe));
    return pe_pe_lay_out_opt_grads(pe);
}

pe_status pe_pe_ensure_prepared(pe_parallel_executor *pe) {
    if (pe->prepared) return PE_OK;
    char pb[32];
    for (int h = 0; h < pe->g->n_h; h++) {
        const pe_handle *hd = &pe->g->h[h];
        if (hd->kind != PE_HANDLE_OP && hd->kind != PE_HANDLE_OPT_SHARD) continue;
        int p = hd->place; /* a shard runs with its place's tensors */
        const pe_op *op = &pe->g->progs[p]->blocks[0].ops[hd->op_idx];
        pe_status st = pe_op_ctx_init(&pe->ctxs[h], op, pe->local[p], pe->places[p]);
        /* declared meta checked on plain ops; a shard's views are ranges */
        if (st == PE_OK && hd->kind == PE_HANDLE_OP) st = pe_op_ctx_declare(&pe->ctxs[h], op, pe->g->progs[p], 0);
        if (st != PE_OK) {
            pe_pe_release_ctxs(pe);
            return pe_error_wrap(st, "preparing op %d (%s) on %s", hd->op_idx, op->type, pe_pe_place_name(pe, p, pb));
        }
        pe->ctxs[h].svc = &pe->svc[p];
        pe->ctxs[h].num_threads = pe->kernel_threads;
        pe->ctxs[h].program_seed = (uint64_t)pe->prog->random_seed;
    }
    pe->prepared = true;
    return PE_OK;
}
