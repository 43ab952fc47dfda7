/* runtime/comm/hier.c — two-level collectives: places inside a process,
 * then processes.
 *
 * A process with P places and an outer communicator (one rank per process,
 * any backend: in-process ranks simulating processes in tests, MPI across
 * processes) gets P place-ranks of global rank proc * P + place out of
 * R * P. Each collective is a short chain of steps, each a collective of
 * its own (or a local copy by place 0), with exactly ONE outer call, made
 * by place 0:
 *
 *   allreduce:  inner reduce to place 0 (place order), outer allreduce on
 *               place 0 (process order), inner broadcast from place 0
 *   broadcast:  inner broadcast from the root place (root's process; the
 *               others: of nothing), outer broadcast from the root's
 *               process on place 0, inner broadcast from place 0 (the
 *               other processes; the root's: of nothing)
 *   allgather:  inner allgather into this process's block, outer allgather
 *               of the blocks on place 0, inner broadcast from place 0
 *   reduce, reduce_scatter(v):
 *               inner allgather of the places' output pointers (the places
 *               share one address space), inner reduce-scatter of the
 *               whole input to place 0's scratch (place order; the other
 *               places' buffers are only read), outer reduce to the root's
 *               process / outer reduce_scatterv of the processes' blocks
 *               (process order) on place 0, place 0 copies each place's
 *               part of the result to its output, inner barrier (no
 *               place's work completes before its output is written)
 *   barrier:    inner barrier, outer barrier on place 0, inner barrier
 *
 * Every sum is in one fixed order: per element, the places of a process
 * summed left to right in place order (s_k = x_kP + x_kP+1 + ...), then
 * the processes' sums left to right in process order (s_0 + s_1 + ...).
 * So a given process x place layout is bitwise repeatable, every rank
 * gets the same bits, and with one place per process the result equals
 * the sequential sum in global rank order (what the in-process backend
 * computes for the same ranks); with P > 1 places it is that sum grouped
 * by process. Steps chain through work callbacks: no call blocks and no
 * thread waits; the step that completes last runs the next step's call.
 * A step that fails still issues the later steps, marked failed, so every
 * rank of the collective ends with an error instead of waiting forever.
 * Allreduce, reduce and reduce_scatter carry the caller's reduction (sum,
 * max, min, prod; pe_red) to each of their combining steps.
 * Inner tags are tag * 4 + step (the low 62 bits of a tag must differ
 * between collectives in flight); outer calls use the tag itself. The one
 * outer call is issued when the first inner step completes, i.e. when the
 * last place joins it: a process whose places issue their collectives in
 * one order issues the outer calls in that order (what MPI needs).
 */
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STEPS 5

typedef struct {
    pe_comm *outer; /* borrowed */
    pe_comm **inner; /* [P], owned */
    int P;
    _Atomic int live;
    _Atomic bool closing; /* being freed: pending chains issue nothing more */
} hier_shared;

typedef struct {
    pe_comm base;
    hier_shared *sh;
    int place;
} hier_rank;

typedef struct hier_op hier_op;
typedef void (*local_fn)(hier_op *op);

struct hier_op {
    pe_work *w; /* the caller's */
    hier_shared *sh;
    pe_comm view; /* the calling rank, for messages (it may be freed first) */
    pe_coll_args call; /* the caller's, for messages (counts: not kept) */
    pe_coll_args steps[MAX_STEPS];
    pe_comm *on[MAX_STEPS]; /* NULL: this place skips the step (or runs local[k]) */
    local_fn local[MAX_STEPS]; /* a step of place 0 alone: a copy, no collective */
    int n_steps, next;
    pe_status st;
    char msg[512];
    /* reduce, reduce_scatter: every place's output (allgathered), the
     * place's own, its parts of the result, place 0's scratch */
    int64_t ptr_mine, *ptrs; /* [P] */
    int64_t *part;           /* [P] elements of each place's output */
    int64_t *blocks;         /* [R] elements of each process's block (reduce_scatter) */
    int64_t *inner_counts;   /* [P] step 1's parts: all to place 0 */
    char *scratch;           /* place 0: the process's sum, then its block */
    size_t scratch_off;      /* where the block starts in scratch */
};

static void advance(hier_op *op);

static void step_done(pe_work *sub, pe_status st, void *user) {
    hier_op *op = user;
    if (st != PE_OK && op->st == PE_OK) {
        op->st = st;
        snprintf(op->msg, sizeof op->msg, "%s", pe_work_message(sub));
    }
    pe_work_free(sub);
    advance(op);
}

static void op_free(hier_op *op) {
    free(op->ptrs);
    free(op->scratch);
    free(op);
}

/* Issues the next steps; each that completes at once continues here. */
static void advance(hier_op *op) {
    while (op->next < op->n_steps) {
        int k = op->next++;
        pe_comm *c = op->on[k];
        if (atomic_load(&op->sh->closing)) continue;
        if (!c) {
            if (op->local[k] && op->st == PE_OK) op->local[k](op);
            continue;
        }
        pe_coll_args a = op->steps[k];
        if (op->st != PE_OK) {
            /* tell this step's other ranks, then go on to the next */
            a.err = op->st;
            a.err_msg = op->msg;
            pe_work *w = NULL;
            if (c->ops->start(c, &a, &w) == PE_OK) pe_work_free(w);
            continue;
        }
        pe_work *w = NULL;
        pe_status st = c->ops->start(c, &a, &w);
        if (st != PE_OK) {
            op->st = st;
            snprintf(op->msg, sizeof op->msg, "%s", pe_last_error());
            continue;
        }
        pe_work_on_done(w, step_done, op); /* may run step_done -> advance now */
        return;
    }
    pe_work *w = op->w;
    pe_status st = op->st;
    char msg[sizeof op->msg + 200], desc[192];
    if (st != PE_OK) {
        snprintf(msg, sizeof msg, "%s: %s", pe_coll_desc(&op->view, &op->call, desc, sizeof desc), op->msg);
    }
    op_free(op);
    pe_work_complete(w, st, st != PE_OK ? msg : NULL);
}

static bool sum_ok_dtype(pe_dtype dt) {
    return dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 || dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64;
}

static pe_coll_args step(pe_coll coll, const void *send, void *recv, int64_t count, int size, pe_dtype dt, int root,
                         uint64_t tag) {
    pe_coll_args a = {.op = coll, .send = send, .recv = recv, .count = count, .dt = dt, .root = root, .tag = tag};
    if (coll == PE_COLL_ALLGATHER) a.total = count * size;
    return a;
}

/* Place 0, after the outer step: each place's part of the result (in
 * scratch from scratch_off, in place order) to that place's output. */
static void copy_parts(hier_op *op) {
    size_t es = pe_dtype_size(op->call.dt), off = op->scratch_off;
    for (int p = 0; p < op->sh->P; p++) {
        size_t bytes = (size_t)op->part[p] * es;
        if (bytes) memcpy((void *)(intptr_t)op->ptrs[p], op->scratch + off, bytes);
        off += bytes;
    }
}

/* reduce and reduce_scatter(v): counts[R * P] (reduce: all of the buffer
 * to the root, nothing to the others). See the top of the file. */
static pe_status plan_scatter(hier_op *op, const pe_coll_args *a, const int64_t *counts, pe_comm *in, pe_comm *out0,
                              uint64_t t) {
    hier_shared *sh = op->sh;
    int P = sh->P, R = sh->outer->size, proc = sh->outer->rank, place = op->view.rank % P;
    size_t es = pe_dtype_size(a->dt);
    op->ptrs = calloc((size_t)(3 * P + R), sizeof *op->ptrs);
    if (!op->ptrs) return PE_ERR_NOMEM;
    op->part = op->ptrs + P;
    op->inner_counts = op->part + P;
    op->blocks = op->inner_counts + P;
    int64_t total = 0;
    uint64_t h = 0xcbf29ce484222325ull; /* the counts' hash: places that disagree on them fail at step 1 */
    for (int r = 0; r < R * P; r++) {
        op->blocks[r / P] += counts[r];
        if (r / P == proc) op->part[r % P] = counts[r];
        total += counts[r];
        h = (h ^ (uint64_t)counts[r]) * 0x100000001b3ull;
    }
    bool reduce = a->op == PE_COLL_REDUCE;
    int64_t mine = reduce ? a->count : op->blocks[proc];
    if (place == 0) {
        op->scratch_off = reduce ? 0 : (size_t)total * es;
        op->scratch = malloc((size_t)(total + (reduce ? 0 : mine)) * es + 1);
        if (!op->scratch) return PE_ERR_NOMEM;
    }
    op->ptr_mine = (int64_t)(intptr_t)a->recv;
    op->inner_counts[0] = total;
    op->steps[0] = step(PE_COLL_ALLGATHER, &op->ptr_mine, op->ptrs, 1, P, PE_DTYPE_INT64, 0, t);
    /* step 1: every place's whole input summed into place 0's scratch (a
     * reduce-scatter whose only non-empty part is place 0's) */
    op->steps[1] = (pe_coll_args){.op = PE_COLL_REDUCE_SCATTER, .send = reduce ? a->recv : a->send,
                                  .recv = place == 0 ? op->scratch : NULL, .count = place == 0 ? total : 0,
                                  .counts = op->inner_counts, .total = total, .dt = a->dt,
                                  .root = reduce ? a->root : (int)(h >> 33), .tag = t + 1, .red = a->red};
    if (reduce) {
        op->steps[2] = step(PE_COLL_REDUCE, NULL, op->scratch, total, R, a->dt, a->root / P, a->tag);
        op->steps[2].red = a->red;
    } else {
        op->steps[2] = (pe_coll_args){.op = PE_COLL_REDUCE_SCATTER, .send = op->scratch,
                                      .recv = op->scratch ? op->scratch + op->scratch_off : NULL, .count = mine,
                                      .counts = op->blocks, .total = total, .dt = a->dt, .tag = a->tag,
                                      .red = a->red};
    }
    op->steps[4] = step(PE_COLL_BARRIER, NULL, NULL, 0, P, PE_DTYPE_UINT8, 0, t + 2);
    op->on[0] = in, op->on[1] = in, op->on[2] = out0, op->on[4] = in;
    op->local[3] = place == 0 && (!reduce || proc == a->root / P) ? copy_parts : NULL;
    op->n_steps = 5;
    return PE_OK;
}

static pe_status hier_start(pe_comm *c, const pe_coll_args *a, pe_work **out) {
    hier_rank *r = (hier_rank *)c;
    hier_shared *sh = r->sh;
    int P = sh->P, R = sh->outer->size, proc = sh->outer->rank, place = r->place;
    pe_comm *in = sh->inner[place], *out0 = place == 0 ? sh->outer : NULL;
    uint64_t t = a->tag * 4;
    char desc[192];
    hier_op *op = calloc(1, sizeof *op);
    if (!op || !(op->w = pe_work_new(NULL))) {
        free(op);
        return pe_error(PE_ERR_NOMEM, "%s: out of memory", pe_coll_desc(c, a, desc, sizeof desc));
    }
    op->sh = sh;
    op->view = *c;
    op->call = *a;
    op->call.counts = NULL;
    int64_t n = a->count;
    size_t es = pe_dtype_size(a->dt);
    pe_status st = PE_OK;
    switch (a->op) {
    case PE_COLL_ALLREDUCE:
        op->steps[0] = step(PE_COLL_REDUCE, NULL, a->recv, n, P, a->dt, 0, t);
        op->steps[1] = step(PE_COLL_ALLREDUCE, NULL, a->recv, n, R, a->dt, 0, a->tag);
        op->steps[2] = step(PE_COLL_BROADCAST, NULL, a->recv, n, P, a->dt, 0, t + 2);
        op->steps[0].red = op->steps[1].red = a->red;
        break;
    case PE_COLL_BROADCAST: {
        int rp = a->root / P, rl = a->root % P;
        /* Every place takes part in both inner steps (the one it does not
         * need moves no data), so a rank whose root is wrong meets its
         * process's places at the same steps and they all fail together. */
        op->steps[0] = step(PE_COLL_BROADCAST, NULL, a->recv, proc == rp ? n : 0, P, a->dt, proc == rp ? rl : 0, t);
        op->steps[1] = step(PE_COLL_BROADCAST, NULL, a->recv, n, R, a->dt, rp, a->tag);
        op->steps[2] = step(PE_COLL_BROADCAST, NULL, a->recv, proc == rp ? 0 : n, P, a->dt, 0, t + 2);
    } break;
    case PE_COLL_ALLGATHER: {
        char *block = (char *)a->recv + (size_t)proc * (size_t)P * (size_t)n * es;
        op->steps[0] = step(PE_COLL_ALLGATHER, a->send, block, n, P, a->dt, 0, t);
        op->steps[1] = step(PE_COLL_ALLGATHER, block, a->recv, n * P, R, a->dt, 0, a->tag);
        op->steps[2] = step(PE_COLL_BROADCAST, NULL, a->recv, n * P * R, P, a->dt, 0, t + 2);
    } break;
    case PE_COLL_REDUCE:
    case PE_COLL_REDUCE_SCATTER: {
        /* a failed own check may leave root or counts unusable: then the
         * shape of a reduce to rank 0 carries the error through the steps */
        int W = R * P;
        int64_t small[64], *counts = W <= 64 ? small : calloc((size_t)W, sizeof *counts);
        if (!counts) {
            st = PE_ERR_NOMEM;
            break;
        }
        pe_coll_args b = *a;
        if (a->err != PE_OK) b = (pe_coll_args){.op = PE_COLL_REDUCE, .dt = a->dt, .tag = a->tag};
        if (!sum_ok_dtype(b.dt)) b.dt = PE_DTYPE_FP32;
        for (int k = 0; k < W; k++)
            counts[k] = b.op == PE_COLL_REDUCE ? (k == b.root ? b.count : 0) : b.counts[k];
        op->call.dt = b.dt; /* copy_parts' element size */
        st = plan_scatter(op, &b, counts, in, out0, t);
        if (counts != small) free(counts);
    } break;
    default: /* barrier */
        op->steps[0] = step(PE_COLL_BARRIER, NULL, NULL, 0, P, PE_DTYPE_UINT8, 0, t);
        op->steps[1] = step(PE_COLL_BARRIER, NULL, NULL, 0, R, PE_DTYPE_UINT8, 0, a->tag);
        op->steps[2] = step(PE_COLL_BARRIER, NULL, NULL, 0, P, PE_DTYPE_UINT8, 0, t + 2);
        break;
    }
    if (st != PE_OK) {
        pe_work_free(op->w); /* never completed: both references dropped here */
        pe_work_free(op->w);
        op_free(op);
        return pe_error(PE_ERR_NOMEM, "%s: out of memory", pe_coll_desc(c, a, desc, sizeof desc));
    }
    if (!op->n_steps) {
        op->on[0] = in, op->on[1] = out0, op->on[2] = in;
        op->n_steps = 3;
    }
    if (a->err != PE_OK) {
        op->st = a->err;
        snprintf(op->msg, sizeof op->msg, "%s", a->err_msg ? a->err_msg : "");
    }
    *out = op->w;
    advance(op);
    return PE_OK;
}

static void hier_free(pe_comm *c) {
    hier_rank *r = (hier_rank *)c;
    hier_shared *sh = r->sh;
    free(r);
    if (atomic_fetch_sub(&sh->live, 1) != 1) return;
    /* freeing the inner ranks cancels collectives still pending there */
    atomic_store(&sh->closing, true);
    for (int p = 0; p < sh->P; p++) pe_comm_free(sh->inner[p]);
    free(sh->inner);
    free(sh);
}

static const pe_comm_ops k_hier_ops = {"hier", hier_start, NULL, NULL, hier_free};

pe_status pe_comm_hier_new(pe_comm *outer, int n_places, int threads, pe_comm **ranks_out) {
    if (!outer || n_places < 1 || !ranks_out)
        return pe_error(PE_ERR_INVALID, "two-level collectives need an outer communicator and at least one place "
                        "(got %d places%s)", n_places, outer ? "" : ", outer is NULL");
    hier_shared *sh = calloc(1, sizeof *sh);
    pe_comm **inner = calloc((size_t)n_places, sizeof *inner);
    if (!sh || !inner) {
        free(sh);
        free(inner);
        return pe_error(PE_ERR_NOMEM, "out of memory creating two-level collectives over %d places", n_places);
    }
    pe_status st = pe_comm_inproc_world_new(n_places, threads, inner);
    if (st != PE_OK) {
        free(sh);
        free(inner);
        return st;
    }
    sh->outer = outer;
    sh->inner = inner;
    sh->P = n_places;
    atomic_store(&sh->live, n_places);
    for (int p = 0; p < n_places; p++) {
        hier_rank *r = calloc(1, sizeof *r);
        if (!r) {
            /* the ranks made so far free the shared part with the last */
            atomic_store(&sh->live, p);
            if (p == 0) {
                for (int q = 0; q < n_places; q++) pe_comm_free(inner[q]);
                free(inner);
                free(sh);
            }
            for (int q = 0; q < p; q++) pe_comm_free(ranks_out[q]);
            return pe_error(PE_ERR_NOMEM, "out of memory creating two-level collectives over %d places", n_places);
        }
        r->base.ops = &k_hier_ops;
        r->base.rank = outer->rank * n_places + p;
        r->base.size = outer->size * n_places;
        r->sh = sh;
        r->place = p;
        ranks_out[p] = &r->base;
    }
    return PE_OK;
}
