/* runtime/comm/hier.c — two-level collectives: places inside a process,
 * then processes.
 *
 * A process with P places and an outer communicator (one rank per process,
 * any backend: in-process ranks simulating processes in tests, MPI later)
 * gets P place-ranks of global rank proc * P + place out of R * P. Each
 * collective is a short chain of steps, each a collective of its own:
 *
 *   allreduce:  inner reduce to place 0 (place order), outer allreduce on
 *               place 0 (process order), inner broadcast from place 0
 *   broadcast:  inner broadcast from the root place (root's process; the
 *               others: of nothing), outer broadcast from the root's
 *               process on place 0, inner broadcast from place 0 (the
 *               other processes; the root's: of nothing)
 *   allgather:  inner allgather into this process's block, outer allgather
 *               of the blocks on place 0, inner broadcast from place 0
 *   barrier:    inner barrier, outer barrier on place 0, inner barrier
 *
 * Every sum is in a fixed order (places of a process in order, then
 * processes in order), so a given process x place layout is bitwise
 * repeatable. Steps chain through work callbacks: no call blocks and no
 * thread waits; the step that completes last runs the next step's call.
 * A step that fails still issues the later steps, marked failed, so every
 * rank of the collective ends with an error instead of waiting forever.
 * Inner tags are tag * 4 + step (the low 62 bits of a tag must differ
 * between collectives in flight); outer calls use the tag itself.
 */
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STEPS 3

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

typedef struct {
    pe_work *w; /* the caller's */
    hier_shared *sh;
    pe_comm view; /* the calling rank, for messages (it may be freed first) */
    pe_coll_args call; /* the caller's, for messages */
    pe_coll_args steps[MAX_STEPS];
    pe_comm *on[MAX_STEPS]; /* NULL: this place skips the step */
    int n_steps, next;
    pe_status st;
    char msg[512];
} hier_op;

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

/* Issues the next steps; each that completes at once continues here. */
static void advance(hier_op *op) {
    while (op->next < op->n_steps) {
        int k = op->next++;
        pe_comm *c = op->on[k];
        if (!c || atomic_load(&op->sh->closing)) continue;
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
    free(op);
    pe_work_complete(w, st, st != PE_OK ? msg : NULL);
}

static pe_coll_args step(pe_coll coll, const void *send, void *recv, int64_t count, int size, pe_dtype dt, int root,
                         uint64_t tag) {
    pe_coll_args a = {.op = coll, .send = send, .recv = recv, .count = count, .dt = dt, .root = root, .tag = tag};
    if (coll == PE_COLL_ALLGATHER) a.total = count * size;
    return a;
}

static pe_status hier_start(pe_comm *c, const pe_coll_args *a, pe_work **out) {
    hier_rank *r = (hier_rank *)c;
    hier_shared *sh = r->sh;
    int P = sh->P, R = sh->outer->size, proc = sh->outer->rank, place = r->place;
    pe_comm *in = sh->inner[place], *out0 = place == 0 ? sh->outer : NULL;
    uint64_t t = a->tag * 4;
    char desc[192];
    if (a->op == PE_COLL_REDUCE || a->op == PE_COLL_REDUCE_SCATTER) {
        if (a->err != PE_OK) return a->err;
        return pe_error(PE_ERR_UNSUPPORTED, "%s: not implemented by the two-level composition (allreduce, "
                        "broadcast, allgather, barrier)", pe_coll_desc(c, a, desc, sizeof desc));
    }
    hier_op *op = calloc(1, sizeof *op);
    if (!op || !(op->w = pe_work_new(NULL))) {
        free(op);
        return pe_error(PE_ERR_NOMEM, "%s: out of memory", pe_coll_desc(c, a, desc, sizeof desc));
    }
    op->sh = sh;
    op->view = *c;
    int64_t n = a->count;
    size_t es = pe_dtype_size(a->dt);
    switch (a->op) {
    case PE_COLL_ALLREDUCE:
        op->steps[0] = step(PE_COLL_REDUCE, NULL, a->recv, n, P, a->dt, 0, t);
        op->steps[1] = step(PE_COLL_ALLREDUCE, NULL, a->recv, n, R, a->dt, 0, a->tag);
        op->steps[2] = step(PE_COLL_BROADCAST, NULL, a->recv, n, P, a->dt, 0, t + 2);
        op->on[0] = in, op->on[1] = out0, op->on[2] = in;
        break;
    case PE_COLL_BROADCAST: {
        int rp = a->root / P, rl = a->root % P;
        /* Every place takes part in both inner steps (the one it does not
         * need moves no data), so a rank whose root is wrong meets its
         * process's places at the same steps and they all fail together. */
        op->steps[0] = step(PE_COLL_BROADCAST, NULL, a->recv, proc == rp ? n : 0, P, a->dt, proc == rp ? rl : 0, t);
        op->steps[1] = step(PE_COLL_BROADCAST, NULL, a->recv, n, R, a->dt, rp, a->tag);
        op->steps[2] = step(PE_COLL_BROADCAST, NULL, a->recv, proc == rp ? 0 : n, P, a->dt, 0, t + 2);
        op->on[0] = in, op->on[1] = out0, op->on[2] = in;
    } break;
    case PE_COLL_ALLGATHER: {
        char *block = (char *)a->recv + (size_t)proc * (size_t)P * (size_t)n * es;
        op->steps[0] = step(PE_COLL_ALLGATHER, a->send, block, n, P, a->dt, 0, t);
        op->steps[1] = step(PE_COLL_ALLGATHER, block, a->recv, n * P, R, a->dt, 0, a->tag);
        op->steps[2] = step(PE_COLL_BROADCAST, NULL, a->recv, n * P * R, P, a->dt, 0, t + 2);
        op->on[0] = in, op->on[1] = out0, op->on[2] = in;
    } break;
    default: /* barrier */
        op->steps[0] = step(PE_COLL_BARRIER, NULL, NULL, 0, P, PE_DTYPE_UINT8, 0, t);
        op->steps[1] = step(PE_COLL_BARRIER, NULL, NULL, 0, R, PE_DTYPE_UINT8, 0, a->tag);
        op->steps[2] = step(PE_COLL_BARRIER, NULL, NULL, 0, P, PE_DTYPE_UINT8, 0, t + 2);
        op->on[0] = in, op->on[1] = out0, op->on[2] = in;
        break;
    }
    op->n_steps = 3;
    op->call = *a;
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
