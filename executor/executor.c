/* executor/executor.c — the single-place executor.
 *
 * Prepares one op context per op of the block (tensor pointers resolved
 * from the scopes once) and caches them while (program, block, scope) stay
 * the same, so a steady-state run is: copy feeds in, for each op
 * infer -> (re)size outputs (no allocation once sizes are stable) -> kernel,
 * copy fetches out. Every op's inferred outputs are checked against the
 * program's declarations (pe_op_ctx_declare: a declared dtype or fixed dim
 * the op contradicts is an error, for temporaries, persistables and startup
 * programs alike). Temporaries live in a local child scope; persistables are
 * created in the caller's scope before the first run so that startup
 * programs and optimizers write where later runs read. With
 * FLAGS_check_nan_inf (or pe_executor_set_check_nan_inf) every op's
 * floating-point outputs are checked after its kernel (executor/nan_inf.c).
 * pe_interrupt (pe/interrupt.h) is checked before every op: an interrupted
 * run returns PE_ERR_CANCELLED after the op in progress.
 * Collective ops (c_allreduce_sum, ...) see a world of one rank: Out = X.
 * A block holding listen_and_serv (a pserver program) runs the parameter
 * server's loop instead (executor/pserver.c) until its trainers have left.
 */
#include "pe/executor.h"
#include "executor/feed_fetch.h"
#include "executor/nan_inf.h"
#include "executor/pserver.h"
#include "ops/collective.h"
#include "ops/op.h"
#include "runtime/internal.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pe_executor {
    pe_place place;
    int num_threads;
    bool check_nan_inf;
    /* cache of the prepared block */
    const pe_program *prog;
    int block_idx;
    pe_scope *scope;
    pe_scope *local;
    pe_op_ctx *ctxs;
    int n_ctxs;
};

pe_executor *pe_executor_new(pe_place place) {
    char pb[32];
    if (place.kind != PE_PLACE_CPU) {
#ifndef PE_WITH_CUDA
        pe_error(PE_ERR_UNSUPPORTED, "cannot create an executor on %s: PE was built without CUDA",
                 pe_place_str(place, pb, sizeof pb));
        return NULL;
#else
        if (place.id < 0 || place.id >= pe_cuda_device_count()) {
            pe_error(PE_ERR_INVALID, "cannot create an executor on %s: %d CUDA device(s) visible",
                     pe_place_str(place, pb, sizeof pb), pe_cuda_device_count());
            return NULL;
        }
#endif
    }
    pe_executor *ex = calloc(1, sizeof *ex);
    if (!ex) {
        pe_error(PE_ERR_NOMEM, "out of memory creating an executor");
        return NULL;
    }
    ex->place = place;
    ex->num_threads = omp_get_max_threads();
    ex->check_nan_inf = pe_flag_check_nan_inf();
    return ex;
}

static void drop_prepared(pe_executor *ex) {
    for (int i = 0; i < ex->n_ctxs; i++) pe_op_ctx_release(&ex->ctxs[i]);
    free(ex->ctxs);
    ex->ctxs = NULL;
    ex->n_ctxs = 0;
    ex->prog = NULL;
}

void pe_executor_drop_local_scope(pe_executor *ex) {
    if (!ex) return;
    drop_prepared(ex);
    pe_scope_free(ex->local);
    ex->local = NULL;
    ex->scope = NULL;
}

void pe_executor_free(pe_executor *ex) {
    if (!ex) return;
    pe_executor_drop_local_scope(ex);
    free(ex);
}

void pe_executor_set_num_threads(pe_executor *ex, int n) {
    ex->num_threads = n > 0 ? n : 1;
    for (int i = 0; i < ex->n_ctxs; i++) ex->ctxs[i].num_threads = ex->num_threads;
}

void pe_executor_set_check_nan_inf(pe_executor *ex, bool on) { ex->check_nan_inf = on; }

static pe_status prepare(pe_executor *ex, const pe_program *prog, int block_idx, pe_scope *scope) {
    if (ex->prog == prog && ex->block_idx == block_idx && ex->scope == scope) return PE_OK;
    pe_executor_drop_local_scope(ex);
    const pe_block *b = &prog->blocks[block_idx];
    /* Persistables belong to the caller's scope. */
    for (int i = 0; i < b->n_vars; i++)
        if (b->vars[i].persistable && !pe_scope_find_var(scope, b->vars[i].name) &&
            !pe_scope_var(scope, b->vars[i].name))
            return pe_error(PE_ERR_NOMEM, "out of memory creating var '%s'", b->vars[i].name);
    ex->local = pe_scope_new(scope);
    ex->ctxs = calloc((size_t)(b->n_ops ? b->n_ops : 1), sizeof *ex->ctxs);
    if (!ex->local || !ex->ctxs) {
        pe_executor_drop_local_scope(ex);
        return pe_error(PE_ERR_NOMEM, "out of memory preparing block %d", block_idx);
    }
    /* Feed targets must exist before contexts resolve inputs: create every
     * non-persistable var of the block in the local scope. */
    for (int i = 0; i < b->n_vars; i++)
        if (!b->vars[i].persistable && !pe_scope_find_var(scope, b->vars[i].name) &&
            !pe_scope_var(ex->local, b->vars[i].name)) {
            pe_executor_drop_local_scope(ex);
            return pe_error(PE_ERR_NOMEM, "out of memory creating var '%s'", b->vars[i].name);
        }
    for (int i = 0; i < b->n_ops; i++) {
        /* a collective op runs over a world of one rank here (ops/collective.h) */
        pe_status st = pe_collective_check(&b->ops[i], 1);
        if (st == PE_OK) st = pe_op_ctx_init(&ex->ctxs[i], &b->ops[i], ex->local, ex->place);
        if (st == PE_OK) st = pe_op_ctx_declare(&ex->ctxs[i], &b->ops[i], prog, block_idx);
        if (st != PE_OK) {
            pe_executor_drop_local_scope(ex);
            return pe_error_wrap(st, "block %d op %d", block_idx, i);
        }
        ex->ctxs[i].num_threads = ex->num_threads;
        ex->ctxs[i].program_seed = (uint64_t)prog->random_seed;
        ex->n_ctxs = i + 1;
    }
    ex->prog = prog;
    ex->block_idx = block_idx;
    ex->scope = scope;
    return PE_OK;
}

pe_status pe_executor_run(pe_executor *ex, const pe_program *prog, int block_idx, pe_scope *scope,
                          const pe_feed *feeds, int n_feeds, const char *const *fetch, int n_fetch,
                          pe_tensor **fetch_out) {
    const unsigned intr_mark = pe_interrupt_mark();
    if (!ex || !prog || !scope) return pe_error(PE_ERR_INVALID, "pe_executor_run: NULL executor, program or scope");
    if (block_idx < 0 || block_idx >= prog->n_blocks)
        return pe_error(PE_ERR_INVALID, "block %d does not exist (the program has %d)", block_idx, prog->n_blocks);
    for (int i = 0; i < n_feeds; i++) {
        const pe_var *v;
        const pe_tensor *t = feeds[i].tensor;
        PE_CHECK(pe_feed_check_decl(prog, block_idx, &feeds[i], &v));
        PE_CHECK(pe_feed_check_piece(v, feeds[i].name, t->ndim, t->dims, -1));
    }
    PE_CHECK(pe_fetch_check_names(prog, block_idx, fetch, n_fetch,
                                  " (check the name; a var removed by a pass or only in another block cannot be "
                                  "fetched)"));
    if (ex->prog != prog || ex->block_idx != block_idx || ex->scope != scope) {
        /* a pserver program: its block runs the server loop (executor/pserver.c) */
        const pe_block *b = &prog->blocks[block_idx];
        for (int i = 0; i < b->n_ops; i++)
            if (pe_op_type_id(b->ops[i].type) == PE_OP_listen_and_serv) {
                if (n_feeds || n_fetch)
                    return pe_error(PE_ERR_INVALID, "a pserver program (listen_and_serv) takes no feeds or fetches");
                pe_executor_drop_local_scope(ex);
                return pe_pserver_serve(ex->place, ex->num_threads, prog, block_idx, scope, &b->ops[i]);
            }
    }
    PE_CHECK(prepare(ex, prog, block_idx, scope));
    for (int i = 0; i < n_feeds; i++) {
        pe_tensor *dst = pe_scope_find_var(ex->local, feeds[i].name);
        if (!dst) dst = pe_scope_var(ex->local, feeds[i].name);
        if (!dst) return pe_error(PE_ERR_NOMEM, "out of memory feeding '%s'", feeds[i].name);
        pe_status st = pe_tensor_copy(dst, feeds[i].tensor, ex->place);
        if (st != PE_OK) return pe_error_wrap(st, "feeding '%s'", feeds[i].name);
    }
    for (int i = 0; i < ex->n_ctxs; i++) {
        if (__builtin_expect(pe_interrupted_since(intr_mark), 0)) return pe_interrupted_error();
        pe_status st = pe_op_run(&ex->ctxs[i]);
        if (st != PE_OK) return pe_error_wrap(st, "block %d op %d", block_idx, i);
        if (__builtin_expect(ex->check_nan_inf, 0)) PE_CHECK(pe_nan_inf_check_op(&ex->ctxs[i], i));
    }
    for (int i = 0; i < n_fetch; i++) {
        const pe_tensor *src;
        PE_CHECK(pe_fetch_value(ex->local, fetch[i], "", &src));
        PE_CHECK(pe_tensor_copy(fetch_out[i], src, pe_place_cpu(0)));
    }
    return PE_OK;
}
