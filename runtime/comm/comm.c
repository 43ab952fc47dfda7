/* runtime/comm/comm.c — groups (one thread driving the ranks of every
 * place of this process) and the choice of backend for a set of places.
 *
 *     pe_comm_group *g = pe_comm_new_for_places(places, n, threads);
 *     pe_group_allreduce(g, bufs, numel, PE_DTYPE_FP32);
 *
 * A group call issues every rank's part of one collective with one fresh
 * tag (inside the backend's group_begin/group_end, which NCCL needs when one
 * thread drives several devices) and waits for all of them, or returns one
 * work that completes when all have. The in-process backend also offers a
 * direct path for the blocking calls: the calling thread runs the whole
 * collective with no rendezvous, as fast as the pre-rank API was.
 *
 * All CPU places share one address space: the in-process backend
 * (runtime/comm/inproc.c). Two or more CUDA places: NCCL
 * (runtime/comm/nccl.cu), one communicator per device, when PE was built
 * with CUDA and NCCL. A single place of any kind: the in-process backend,
 * whose collectives over one place are no-ops that never read the buffer.
 * Anything else (mixed kinds, a device twice, a device that is not
 * visible, a build without NCCL) gets NULL and a message naming the place
 * and the reason, so the executor fails at construction instead of at the
 * first gradient. A multi-process backend (MPI) will be chosen here too.
 */
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- groups ------------------------------------------------------------------ */

/* Group tags live in the upper half of the tag space, apart from the tags a
 * caller of the rank API picks for the same ranks. */
#define GROUP_TAG_BIT (1ull << 63)

pe_comm_group *pe_comm_group_new(pe_comm **ranks, int n) {
    pe_comm_group *g = calloc(1, sizeof *g);
    pe_comm **r = malloc(sizeof *r * (size_t)(n > 0 ? n : 1));
    if (!g || !r) {
        free(g);
        free(r);
        for (int i = 0; i < n; i++) pe_comm_free(ranks[i]);
        pe_error(PE_ERR_NOMEM, "out of memory creating a group of %d ranks", n);
        return NULL;
    }
    memcpy(r, ranks, sizeof *r * (size_t)n);
    g->ops = ranks[0]->ops;
    g->n_places = n;
    g->ranks = r;
    return g;
}

void pe_group_free(pe_comm_group *g) {
    if (!g) return;
    for (int i = 0; i < g->n_places; i++) pe_comm_free(g->ranks[i]);
    free(g->ranks);
    free(g);
}

/* The group's own argument checks, with the messages of the place API
 * (formatted only on failure: this runs before every group collective). */
static pe_status group_check(const pe_comm_group *g, pe_coll op, int64_t numel, pe_dtype dt, int root, pe_red red) {
    bool sum_ok = dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 || dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64;
    /* root: a rank of the group's world (its places; across processes
     * the global rank) */
    int size = pe_comm_size(g->ranks[0]);
    bool root_ok = op == PE_COLL_ALLREDUCE || (root >= 0 && root < size);
    bool moves = op == PE_COLL_BROADCAST || op == PE_COLL_ALLGATHER;
    bool red_ok = moves || (unsigned)red < PE_RED_COUNT;
    if ((sum_ok || moves) && pe_dtype_valid((int)dt) && root_ok && red_ok) return PE_OK;
    char desc[160];
    snprintf(desc, sizeof desc, "%s: %s of %lld %s elements over %d places", g->ops->name, pe_coll_name(op),
             (long long)numel, pe_dtype_name(dt), g->n_places);
    if (!moves && !sum_ok)
        return pe_error(PE_ERR_UNSUPPORTED, "%s: dtype %s is not supported (float32, float64, int32, int64)", desc,
                        pe_dtype_name(dt));
    if (!pe_dtype_valid((int)dt)) return pe_error(PE_ERR_INVALID, "%s: dtype %d is not a PE dtype", desc, (int)dt);
    if (!red_ok) return pe_error(PE_ERR_INVALID, "%s: reduction %d is not sum, max, min or prod", desc, (int)red);
    return pe_error(PE_ERR_INVALID, "%s: root %d is not a place (0..%d)", desc, root, size - 1);
}

typedef struct {
    pe_work w;
    _Atomic int left;
    _Atomic int failed; /* first failing part claims it */
} group_work;

static void finish_group(group_work *gw) {
    char msg[sizeof gw->w.msg];
    snprintf(msg, sizeof msg, "%s", gw->w.msg);
    pe_work_complete(&gw->w, gw->w.st, msg);
}

static void group_part_done(pe_work *part, pe_status st, void *user) {
    group_work *gw = user;
    if (st != PE_OK && atomic_exchange(&gw->failed, 1) == 0) {
        snprintf(gw->w.msg, sizeof gw->w.msg, "%s", part->msg);
        gw->w.st = st; /* read by the last part's thread (ordered by `left`) */
    }
    pe_work_free(part);
    if (atomic_fetch_sub(&gw->left, 1) == 1) finish_group(gw);
}

/* Nothing to exchange: one place, and no other process behind it (a
 * two-level group of one place per process still talks to the others). */
static bool group_alone(const pe_comm_group *g) { return pe_comm_size(g->ranks[0]) == 1; }

/* One group collective: every place's part (send/counts: reduce_scatter;
 * send: allgather's inputs, NULL = in place). */
typedef struct {
    pe_coll op;
    void *const *bufs;
    const void *const *send;
    const int64_t *counts;
    int64_t numel;
    pe_dtype dt;
    int root;
    pe_red red; /* allreduce, reduce */
} group_args;

static pe_status group_start(pe_comm_group *g, const group_args *c, pe_work **out) {
    pe_coll op = c->op;
    void *const *bufs = c->bufs;
    int64_t numel = c->numel;
    pe_dtype dt = c->dt;
    int root = c->root;
    *out = NULL;
    PE_CHECK(group_check(g, op, numel, dt, root, c->red));
    /* (a reduce-scatter or an all-gather alone still copies: through its rank) */
    if ((group_alone(g) || numel <= 0) && op != PE_COLL_REDUCE_SCATTER && op != PE_COLL_ALLGATHER) {
        *out = pe_work_new_done(PE_OK);
        return *out ? PE_OK : pe_error(PE_ERR_NOMEM, "out of memory for a work");
    }
    group_work *gw = malloc(sizeof *gw);
    if (!gw) return pe_error(PE_ERR_NOMEM, "out of memory for a work");
    pe_work_init_once(&gw->w, NULL);
    pe_work_reset(&gw->w);
    atomic_store(&gw->failed, 0);
    /* one count for the issuing loop itself, so no part completes the group early */
    atomic_store(&gw->left, g->n_places + 1);
    uint64_t tag = GROUP_TAG_BIT | atomic_fetch_add(&g->next_tag, 1);
    pe_status st = g->ops->group_begin ? g->ops->group_begin(g->ranks[0]) : PE_OK;
    int issued = 0;
    for (int i = 0; i < g->n_places && st == PE_OK; i++) {
        pe_work *part = NULL;
        switch (op) {
        case PE_COLL_ALLREDUCE: st = pe_comm_allreduce_red(g->ranks[i], bufs[i], numel, dt, c->red, tag, &part); break;
        case PE_COLL_REDUCE: st = pe_comm_reduce_red(g->ranks[i], bufs[i], numel, dt, root, c->red, tag, &part); break;
        case PE_COLL_REDUCE_SCATTER:
            st = pe_comm_reduce_scatterv(g->ranks[i], c->send[i], bufs[i], c->counts, dt, tag, &part);
            break;
        case PE_COLL_ALLGATHER:
            st = pe_comm_allgather(g->ranks[i], c->send ? c->send[i] : NULL, bufs[i], numel, dt, tag, &part);
            break;
        default: st = pe_comm_broadcast(g->ranks[i], bufs[i], numel, dt, root, tag, &part); break;
        }
        if (st != PE_OK) break;
        issued++;
        pe_work_on_done(part, group_part_done, gw);
    }
    if (g->ops->group_end) {
        pe_status est = g->ops->group_end(g->ranks[0]);
        if (st == PE_OK) st = est;
    }
    if (st != PE_OK && issued == 0) {
        pe_work_destroy(&gw->w);
        free(gw);
        return st;
    }
    if (st != PE_OK) {
        /* Parts never issued count as done; the issued ones finish or fail
         * on their own (in-process: they wait for the missing ranks, so a
         * group whose backend refuses a rank mid-way can hang; the checks
         * above catch every argument error before anything is issued). */
        gw->w.st = st;
        atomic_store(&gw->failed, 1);
        snprintf(gw->w.msg, sizeof gw->w.msg, "%s", pe_last_error());
        atomic_fetch_sub(&gw->left, g->n_places - issued);
    }
    *out = &gw->w;
    if (atomic_fetch_sub(&gw->left, 1) == 1) finish_group(gw);
    return PE_OK;
}

pe_status pe_group_start(pe_comm_group *g, pe_coll op, void *const *bufs, int64_t numel, pe_dtype dt, int root,
                         pe_work **out) {
    *out = NULL;
    if (op != PE_COLL_ALLREDUCE && op != PE_COLL_REDUCE && op != PE_COLL_BROADCAST)
        return pe_error(PE_ERR_UNSUPPORTED, "%s: group %s: only allreduce, reduce and broadcast", g->ops->name,
                        pe_coll_name(op));
    group_args c = {.op = op, .bufs = bufs, .numel = numel, .dt = dt, .root = root};
    return group_start(g, &c, out);
}

pe_status pe_group_start_reduce_scatterv(pe_comm_group *g, const void *const *send, void *const *recv,
                                         const int64_t *counts, pe_dtype dt, pe_work **out) {
    int64_t total = 0;
    for (int r = 0; r < pe_comm_size(g->ranks[0]); r++) total += counts[r];
    group_args c = {.op = PE_COLL_REDUCE_SCATTER, .bufs = recv, .send = send, .counts = counts, .numel = total,
                    .dt = dt};
    return group_start(g, &c, out);
}

pe_status pe_group_start_allgather(pe_comm_group *g, void *const *recv, int64_t count, pe_dtype dt, pe_work **out) {
    group_args c = {.op = PE_COLL_ALLGATHER, .bufs = recv, .numel = count, .dt = dt};
    return group_start(g, &c, out);
}

pe_status pe_group_run(pe_comm_group *g, const pe_coll_args *a, const void *const *sends, void *const *bufs,
                       pe_work **out) {
    pe_coll op = a->op;
    if (op != PE_COLL_ALLREDUCE && op != PE_COLL_REDUCE && op != PE_COLL_BROADCAST && op != PE_COLL_ALLGATHER) {
        if (out) *out = NULL;
        return pe_error(PE_ERR_UNSUPPORTED, "%s: group %s: only allreduce, reduce, broadcast and allgather",
                        g->ops->name, pe_coll_name(op));
    }
    group_args c = {.op = op, .bufs = bufs, .send = sends, .numel = a->count, .dt = a->dt, .root = a->root,
                    .red = a->red};
    if (out) return group_start(g, &c, out);
    PE_CHECK(group_check(g, op, a->count, a->dt, a->root, a->red));
    if ((group_alone(g) && op != PE_COLL_ALLGATHER) || a->count <= 0) return PE_OK;
    if (g->direct) {
        pe_coll_args d = *a;
        d.recv = bufs[0];
        pe_status st;
        if (g->direct(g, &d, sends, bufs, &st)) return st;
    }
    pe_work *w;
    PE_CHECK(group_start(g, &c, &w));
    pe_status st = pe_work_wait(w);
    pe_work_free(w);
    return st;
}

static pe_status group_call(pe_comm_group *g, pe_coll op, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    pe_coll_args a = {.op = op, .count = numel, .dt = dt, .root = root};
    return pe_group_run(g, &a, NULL, bufs, NULL);
}

pe_status pe_group_allreduce(pe_comm_group *g, void *const *bufs, int64_t numel, pe_dtype dt) {
    return group_call(g, PE_COLL_ALLREDUCE, bufs, numel, dt, 0);
}

pe_status pe_group_reduce(pe_comm_group *g, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    return group_call(g, PE_COLL_REDUCE, bufs, numel, dt, root);
}

pe_status pe_group_broadcast(pe_comm_group *g, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    return group_call(g, PE_COLL_BROADCAST, bufs, numel, dt, root);
}

/* ---- the backend for a set of places ------------------------------------------- */

pe_comm_group *pe_comm_new_for_places(const pe_place *places, int n, int threads) {
    char pb[32], qb[32];
    if (!places || n < 1 || n > PE_MAX_PLACES) {
        pe_error(PE_ERR_INVALID, "collectives need 1..%d places (got %d%s)", PE_MAX_PLACES, n,
                 places ? "" : ", places is NULL");
        return NULL;
    }
    for (int i = 1; i < n; i++)
        if (places[i].kind != places[0].kind) {
            pe_error(PE_ERR_UNSUPPORTED,
                     "collectives across %s and %s: all places of one executor must be of one kind",
                     pe_place_str(places[0], pb, sizeof pb), pe_place_str(places[i], qb, sizeof qb));
            return NULL;
        }
    if (places[0].kind != PE_PLACE_CPU && places[0].kind != PE_PLACE_CUDA) {
        pe_error(PE_ERR_INVALID, "collectives on place kind %d: not a CPU or CUDA place", (int)places[0].kind);
        return NULL;
    }
    /* One place moves no data (the in-process backend never touches the
     * buffer then), so a single GPU needs neither NCCL nor a communicator. */
    if (places[0].kind == PE_PLACE_CPU || n == 1) return pe_comm_inproc_new(n, threads);
#ifdef PE_WITH_CUDA
    int visible = pe_cuda_device_count();
    int devices[PE_MAX_PLACES];
    for (int i = 0; i < n; i++) {
        if (places[i].id < 0 || places[i].id >= visible) {
            pe_error(PE_ERR_INVALID, "collectives on %s: %d CUDA device(s) visible%s",
                     pe_place_str(places[i], pb, sizeof pb), visible,
                     visible == 0 ? " (no GPU or no CUDA driver on this machine)" : "");
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (places[j].id == places[i].id) {
                pe_error(PE_ERR_INVALID, "collectives on %s: places %d and %d are the same GPU (NCCL needs one "
                         "rank per device)", pe_place_str(places[i], pb, sizeof pb), j, i);
                return NULL;
            }
        devices[i] = places[i].id;
    }
#ifdef PE_WITH_NCCL
    (void)threads;
    return pe_comm_nccl_new(devices, n);
#else
    (void)threads;
    (void)devices;
    pe_error(PE_ERR_UNSUPPORTED, "collectives on %s: PE was built without NCCL (nccl.h / libnccl not found "
             "under the CUDA toolkit)", pe_place_str(places[0], pb, sizeof pb));
    return NULL;
#endif
#else
    (void)threads;
    pe_error(PE_ERR_UNSUPPORTED, "collectives on %s: PE was built without CUDA",
             pe_place_str(places[0], pb, sizeof pb));
    return NULL;
#endif
}
