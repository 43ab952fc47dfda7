/* executor/pserver.c — the parameter server's loop: what the Executor runs
 * for a block holding `listen_and_serv` (Paddle's pserver program).
 *
 *     trainer t:  SEND g.. ─► held per (grad, trainer) ─┐  each part summed once every live trainer's is in;
 *                                                       │  a block whose gradients are all in: run now
 *                 SEND_BARRIER ───────────────────────► all live trainers in?
 *                                                       ├─ the parts left: sum in trainer order, x 1/n
 *                                                       ├─ lr-decay block once, the other optimize blocks
 *                 ◄──────────────────────────── ACK ────┘  (in parallel after the first step)
 *                 GET p ─► the scope's p now;  FETCH_BARRIER ─► ACK;  COMPLETE ─► leaves
 *
 * Sync mode (Paddle's): a step's update runs when every trainer still in
 * the job has sent its barrier; each gradient block is the sum of the
 * trainers' blocks in trainer-id order (so a run is repeatable bit for
 * bit), scaled by 1 / (trainers that sent it). The received data frames
 * are summed where ZeroMQ put them (zero-copy), tile by tile on the loop's
 * threads (the same bits with any count). A gradient comes in parts of
 * PE_PS_PART bytes (transport.h), and each part is summed as soon as
 * every live trainer's is in, while the later parts are on the wire: the
 * barriers find only the last part left to sum (sum_ahead). Should a
 * trainer leave or be lost after that (or break the parts rule), the sums
 * made with its parts are redone without them (the parts are held until
 * the step ends). An optimize block whose gradients have all come in from
 * every live trainer and been summed runs then too, before the barriers
 * (update_ahead; the lr-decay block first, once a step): that update is
 * the step's, and a trainer lost after it still counts in it. A trainer's
 * GETs come after its barrier's reply and before its next barrier on the same
 * connection, so FETCH_BARRIER needs no waiting: its reply confirms the
 * trainer's fetches were served; for the same reason a GET is answered
 * from the parameter's own buffer (no copy): the next update cannot start
 * before the trainer has the value and sends its next barrier. Async mode runs a gradient's block as it
 * arrives (unscaled, as Paddle does); barriers are answered at once.
 *
 * Lifecycle and faults: a trainer that sends COMPLETE (exe.close()) has
 * left; barriers stop waiting for it. A trainer whose connection closes
 * without COMPLETE (killed, or exited without close()) is lost: logged on
 * stderr and dropped from the fan-in (stop_on_lost_trainer: the loop
 * fails instead). A trainer that never shows up within PE_PS_TRAINER_WAIT
 * seconds (default 600) counts as lost. The loop returns when every trainer
 * has left or been lost: OK when at least one left normally (then it waits,
 * at most 2 s, for the trainers to close their connections, so the last
 * ACKs are delivered before the socket goes). A malformed
 * message is answered with ERROR, logged and ignored. pe_interrupt (Ctrl-C)
 * stops the loop within 200 ms.
 *
 * Only persistable vars of the program's global block can be fetched.
 * Gradients must be declared there: what arrives is checked against the
 * declaration (dtype and dims) before it is held.
 */
#include "executor/pserver.h"
#include "ops/op.h"
#include "runtime/comm/comm.h"
#include "runtime/internal.h"
#include "runtime/transport/transport.h"

#include <malloc.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every step ZeroMQ receives each trainer's gradient blocks into fresh
 * buffers (one per message) and frees them after the sum. When a block
 * came as one message, glibc served its buffer (over 32 MB) with mmap
 * whatever M_MMAP_THRESHOLD says, so each step mapped, page-faulted and
 * unmapped it again: the 10M-parameter sync step of
 * benchmarks/bench_pserver.py spent ~40% of its pserver time in page
 * faults. Parts of 1 MiB (transport.h) are below that bound, but glibc's
 * own threshold starts at 128 KB and may trim the heap. A process that
 * runs the loop serves: keep freed memory in the heap
 * for the next step instead (no mmap, no trimming, one arena so the
 * I/O thread reuses what the loop freed). PE_PS_MALLOC=default keeps
 * glibc's behaviour. */
static void tune_malloc(void) {
    static bool done;
    if (done) return;
    done = true;
    const char *v = getenv("PE_PS_MALLOC");
    if (v && !strcmp(v, "default")) return;
#ifdef __GLIBC__
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_ARENA_MAX, 1);
#endif
}

enum { T_UNSEEN = 0, T_ACTIVE, T_DONE, T_LOST };

/* One trainer's gradient of this step as its parts arrive (a SEND of more
 * than PE_PS_PART bytes comes as one message per part, in order). */
typedef struct held_grad {
    pe_ps_event *parts;         /* [n]: the parts' messages, data frames kept until the step ends */
    int n, cap;
} held_grad;

/* Bytes of hg's gradient received so far (its parts come in order). */
static uint64_t held_got(const held_grad *hg) {
    const pe_ps_hdr *last = hg->n ? &hg->parts[hg->n - 1].hdr : NULL;
    return last ? last->offset + pe_ps_frame_bytes(last) : 0;
}
/* Every part is in (and acknowledged). */
static bool held_whole(const held_grad *hg) { return hg->n && held_got(hg) == hg->parts[0].hdr.nbytes; }

typedef struct grad_slot {
    const char *name;
    int block;                  /* optimize block index */
    const pe_var *decl;
    held_grad *held;            /* [fanin]: this step's gradient per trainer (n 0: none) */
    /* sync mode sums the parts as they arrive: parts [0, summed) of the
     * scope var hold the sum over the sum_n live trainers, made while the
     * set of trainers was the loop's `epoch` (otherwise it is redone) */
    int summed, sum_n;
    unsigned sum_epoch;
    int updated;                /* steps + 1 when its optimize block ran early this step (update_ahead) */
} grad_slot;

typedef struct serve {
    const pe_program *prog;
    pe_scope *scope;
    pe_place place;
    int threads;
    pe_ps_server *srv;
    char ep[208];
    int fanin;
    bool sync, stop_on_lost;
    int lr_block;
    int n_grads;
    grad_slot *grads;
    int n_blocks;               /* optimize_blocks */
    const int64_t *blocks;
    pe_executor **bex;          /* per program block: its executor (lazily made) */
    int *state;                 /* [fanin] */
    unsigned epoch;             /* changes whenever held parts are dropped outside a step's end */
    uint32_t *refused;          /* [fanin]: seq + 1 of the last SEND refused (its later parts: dropped) */
    int *tr;                    /* [fanin] scratch: the trainers of a sum */
    const void **data;          /* [fanin] scratch: their parts' data */
    pe_ps_event *barrier;       /* [fanin]: the pending SEND_BARRIER (kind NONE: none) */
    int steps;
    int lr_ran;                 /* steps + 1 when the lr-decay block ran this step */
    pe_status early_st;         /* an update run ahead failed: the step's barriers get its message */
    char early_msg[1024];
    int n_done, n_lost;
} serve;

static const pe_attr *attr(const pe_op *op, const char *name) { return pe_op_attr(op, name); }

static pe_status run_block(serve *s, int b) {
    if (!s->bex[b]) {
        s->bex[b] = pe_executor_new(s->place);
        if (!s->bex[b]) return pe_error_wrap(PE_ERR_INTERNAL, "pserver %s: executor for block %d", s->ep, b);
    }
    pe_status st = pe_executor_run(s->bex[b], s->prog, b, s->scope, NULL, 0, NULL, 0, NULL);
    return st == PE_OK ? PE_OK : pe_error_wrap(st, "pserver %s: optimize block %d", s->ep, b);
}

/* Runs blocks bl[0..n) of one step: in order the first time (their
 * executors create what they need in the scope), then in parallel. */
static pe_status run_blocks(serve *s, const int *bl, int n) {
    if (n <= 1 || s->steps == 0 || s->threads <= 1) {
        for (int i = 0; i < n; i++) PE_CHECK(run_block(s, bl[i]));
        return PE_OK;
    }
    pe_status first = PE_OK;
    char msg[1024] = "";
    for (int i = 0; i < n; i++) pe_executor_set_num_threads(s->bex[bl[i]], 1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(s->threads < n ? s->threads : n)
    for (int i = 0; i < n; i++) {
        pe_status st = run_block(s, bl[i]);
        if (st != PE_OK) {
#pragma omp critical(pe_pserver_err)
            if (first == PE_OK) {
                first = st;
                snprintf(msg, sizeof msg, "%s", pe_last_error());
            }
        }
    }
    return first == PE_OK ? PE_OK : pe_error(first, "%s", msg);
}

static void reply_error(serve *s, const pe_ps_event *ev, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Answers a request with ERROR. A refused SEND's later parts are dropped
 * unanswered (on_request): one reply per request. */
static void reply_error(serve *s, const pe_ps_event *ev, const char *fmt, ...) {
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    pe_ps_reply_error(s->srv, ev, m);
    if (ev->hdr.trainer_id < s->fanin) s->refused[ev->hdr.trainer_id] = ev->hdr.seq + 1u;
}

static grad_slot *find_grad(serve *s, const char *name) {
    for (int i = 0; i < s->n_grads; i++)
        if (!strcmp(s->grads[i].name, name)) return &s->grads[i];
    return NULL;
}

#define SUM_TILE 4096 /* elements: a tile of the sum stays in L1 while it is added to and scaled */

/* o[b..e) = (d[0] + d[1] + ... + d[n-1]) * scale for float32 / float64,
 * the adds in trainer order, tile by tile (vectorized adds of
 * runtime/comm; the tile is still in L1 for the next add and the scale):
 * the same bits as one element at a time. scale 1 multiplies nothing. */
static void sum_scaled(void *o, const void *const *d, int n, int64_t b, int64_t e, pe_dtype dt, double scale) {
    const size_t es = pe_dtype_size(dt);
    for (int64_t t0 = b; t0 < e; t0 += SUM_TILE) {
        const int64_t tm = e - t0 < SUM_TILE ? e - t0 : SUM_TILE;
        const size_t off = (size_t)t0 * es;
        char *ot = (char *)o + off;
        if (n == 1) memcpy(ot, (const char *)d[0] + off, (size_t)tm * es);
        else pe_comm_combine_to(ot, (const char *)d[0] + off, (const char *)d[1] + off, tm, dt, PE_RED_SUM);
        for (int k = 2; k < n; k++) pe_comm_add(ot, (const char *)d[k] + off, tm, dt);
        if (scale == 1.0) continue; /* x 1 is exact */
        if (dt == PE_DTYPE_FP32) {
            float *x = (float *)ot;
            const float sc = (float)scale;
            for (int64_t i = 0; i < tm; i++) x[i] *= sc;
        } else {
            double *x = (double *)ot;
            for (int64_t i = 0; i < tm; i++) x[i] *= scale;
        }
    }
}

/* o[0..m) = sum_k d[k][0..m) * scale on `threads` threads (ranges of
 * whole tiles: the same bits whatever the count). */
static void sum_threads(int threads, void *o, const void *const *d, int n, int64_t m, pe_dtype dt, double scale) {
    const int64_t tiles = (m + SUM_TILE - 1) / SUM_TILE;
    const int nt = threads > 1 && m > 16 * SUM_TILE ? threads : 1;
    if (nt == 1) {
        sum_scaled(o, d, n, 0, m, dt, scale);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int w = 0; w < nt; w++) {
        const int64_t b = tiles * w / nt * SUM_TILE, e = tiles * (w + 1) / nt * SUM_TILE;
        sum_scaled(o, d, n, b, e < m ? e : m, dt, scale);
    }
}

static bool same_meta(const pe_ps_hdr *a, const pe_ps_hdr *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof a->dims);
}

/* Writes parts [from, parts) of sum_k g's gradient from trainer tr[k] x
 * scale into the scope var g->name (sized by the first part's header when
 * from is 0), on `threads` threads; every trainer's gradient has those
 * parts, of the same meta. */
static pe_status reduce_into(serve *s, grad_slot *g, const int *tr, int n, int from, int parts, double scale,
                             int threads) {
    const pe_ps_hdr *h = &g->held[tr[0]].parts[0].hdr;
    pe_tensor *t = pe_scope_find_var(s->scope, g->name);
    if (!t) return pe_error(PE_ERR_INTERNAL, "pserver %s: gradient var '%s' is not in the scope", s->ep, g->name);
    if (from == 0) PE_CHECK(pe_tensor_resize(t, h->dtype, h->ndim, h->dims, s->place));
    const bool fp = h->dtype == PE_DTYPE_FP32 || h->dtype == PE_DTYPE_FP64;
    if (!fp && (n != 1 || scale != 1.0))
        return pe_error(PE_ERR_INVALID, "pserver %s: gradient '%s' is %s; only float32 / float64 gradients are summed",
                        s->ep, g->name, pe_dtype_name(h->dtype));
    const size_t es = pe_dtype_size(h->dtype);
    for (int p = from; p < parts; p++) {
        const pe_ps_hdr *hp = &g->held[tr[0]].parts[p].hdr;
        const uint64_t len = pe_ps_frame_bytes(hp);
        char *o = (char *)pe_tensor_data(t) + hp->offset;
        for (int k = 0; k < n; k++) s->data[k] = g->held[tr[k]].parts[p].data;
        if (fp) sum_threads(threads, o, s->data, n, (int64_t)(len / es), h->dtype, scale);
        else if (len) memcpy(o, s->data[0], len);
    }
    return PE_OK;
}

/* Sync mode, as parts arrive: sums the parts every live trainer has sent
 * (in trainer order, x 1 / trainers: what try_step would write), so only
 * the last parts are left when the barriers come. Nothing until every
 * trainer has shown up; a float gradient only; any doubt (shapes that
 * differ, a failure) leaves the work to try_step, which reports it. */
static void sum_ahead(serve *s, grad_slot *g) {
    if (g->sum_epoch != s->epoch) g->summed = 0, g->sum_epoch = s->epoch;
    int n = 0, ready = INT32_MAX;
    const pe_ps_hdr *h0 = NULL;
    for (int t = 0; t < s->fanin; t++) {
        if (s->state[t] == T_UNSEEN) return;
        if (s->state[t] != T_ACTIVE) continue;
        const held_grad *hg = &g->held[t];
        if (!hg->n || (h0 && !same_meta(h0, &hg->parts[0].hdr))) return;
        h0 = &hg->parts[0].hdr;
        s->tr[n++] = t;
        if (hg->n < ready) ready = hg->n;
    }
    if (!n || (h0->dtype != PE_DTYPE_FP32 && h0->dtype != PE_DTYPE_FP64) || (g->summed && g->sum_n != n)) return;
    /* on the loop's thread alone: the others' cores move the parts still coming in */
    if (ready > g->summed && reduce_into(s, g, s->tr, n, g->summed, ready, 1.0 / n, 1) == PE_OK)
        g->summed = ready, g->sum_n = n;
}

static int live(const serve *s) {
    int n = 0;
    for (int t = 0; t < s->fanin; t++) n += s->state[t] == T_UNSEEN || s->state[t] == T_ACTIVE;
    return n;
}

/* Sync mode: once every live trainer's gradients of an optimize block are
 * in and summed, the block runs at once (the lr-decay block first, once a
 * step) instead of after the barriers: its update is then this step's,
 * whoever leaves before the barriers. Every trainer has its last value of
 * the block's parameters by then (it sent this step's gradient after its
 * GETs), so nothing served is changed under a trainer. A failure is the
 * step's: its barriers are answered with it (try_step). */
static void update_ahead(serve *s, grad_slot *g) {
    if (s->early_st != PE_OK || g->updated == s->steps + 1) return;
    int live_n = 0;
    for (int t = 0; t < s->fanin; t++) live_n += s->state[t] == T_ACTIVE;
    for (int j = 0; j < s->n_grads; j++) {
        const grad_slot *o = &s->grads[j];
        if (o->block != g->block) continue;
        if (o->sum_epoch != s->epoch || o->sum_n != live_n || !live_n) return;
        for (int t = 0; t < s->fanin; t++)
            if (s->state[t] == T_ACTIVE && (!held_whole(&o->held[t]) || o->summed != o->held[t].n)) return;
    }
    pe_status st = PE_OK;
    if (s->lr_block >= 0 && s->lr_ran != s->steps + 1) {
        st = run_block(s, s->lr_block);
        s->lr_ran = s->steps + 1;
    }
    if (st == PE_OK) st = run_block(s, g->block);
    for (int j = 0; j < s->n_grads; j++)
        if (s->grads[j].block == g->block) s->grads[j].updated = s->steps + 1;
    if (st != PE_OK) {
        s->early_st = st;
        snprintf(s->early_msg, sizeof s->early_msg, "%s", pe_last_error());
    }
}

static void held_clear(held_grad *hg) {
    for (int i = 0; i < hg->n; i++) pe_ps_event_release(&hg->parts[i]);
    hg->n = 0;
}

/* Drops what trainer t sent this step; sums made ahead may hold its parts. */
static void drop_held(serve *s, int t) {
    for (int i = 0; i < s->n_grads; i++) held_clear(&s->grads[i].held[t]);
    s->barrier[t].kind = PE_PS_EV_NONE;
    s->epoch++;
}

/* Sync mode: when every live trainer has sent its barrier, run the step. */
static pe_status try_step(serve *s) {
    int waiting = 0;
    for (int t = 0; t < s->fanin; t++) {
        if (s->state[t] == T_UNSEEN) return PE_OK;
        if (s->state[t] == T_ACTIVE) {
            if (s->barrier[t].kind != PE_PS_EV_REQUEST) return PE_OK;
            waiting++;
        }
    }
    if (!waiting) return PE_OK;
    pe_status st = PE_OK;
    int *bl = malloc(sizeof *bl * (size_t)(s->n_blocks + s->n_grads + 1));
    int nb = 0;
    if (!bl) st = pe_error(PE_ERR_NOMEM, "pserver %s: out of memory", s->ep);
    for (int i = 0; st == PE_OK && i < s->n_grads; i++) {
        grad_slot *g = &s->grads[i];
        int n = 0;
        const pe_ps_hdr *h = NULL;
        for (int t = 0; t < s->fanin; t++)
            if (held_whole(&g->held[t])) {
                if (h && !same_meta(h, &g->held[t].parts[0].hdr)) {
                    st = pe_error(PE_ERR_INVALID, "pserver %s: trainers sent gradient '%s' with different shapes "
                                  "(trainer %d's differs from trainer %d's)", s->ep, g->name, t, s->tr[0]);
                    break;
                }
                h = &g->held[t].parts[0].hdr;
                s->tr[n++] = t;
            }
        /* a block updated ahead is this step's update (all its gradients were in), whoever left since */
        if (st != PE_OK || !n || g->updated == s->steps + 1) continue;
        /* the parts summed ahead over these trainers stand (same set: no trainer came or went since) */
        const int from = g->sum_epoch == s->epoch && g->sum_n == n ? g->summed : 0;
        st = reduce_into(s, g, s->tr, n, from, g->held[s->tr[0]].n, 1.0 / n, s->threads);
        bool dup = false;
        for (int j = 0; j < nb; j++) dup |= bl[j] == g->block;
        if (!dup) bl[nb++] = g->block;
    }
    /* optimize blocks no gradient names run every step */
    for (int i = 0; st == PE_OK && i < s->n_blocks; i++) {
        bool named = false, dup = false;
        for (int j = 0; j < s->n_grads; j++) named |= s->grads[j].block == (int)s->blocks[i];
        for (int j = 0; j < nb; j++) dup |= bl[j] == (int)s->blocks[i];
        if (!named && !dup) bl[nb++] = (int)s->blocks[i];
    }
    if (st == PE_OK && s->early_st != PE_OK) st = pe_error(s->early_st, "%s", s->early_msg);
    if (st == PE_OK && s->lr_block >= 0 && s->lr_ran != s->steps + 1) st = run_block(s, s->lr_block);
    if (st == PE_OK) st = run_blocks(s, bl, nb);
    char msg[1024];
    if (st != PE_OK) snprintf(msg, sizeof msg, "%s", pe_last_error());
    for (int t = 0; t < s->fanin; t++) {
        if (s->barrier[t].kind == PE_PS_EV_REQUEST) {
            if (st == PE_OK) pe_ps_reply_ack(s->srv, &s->barrier[t]);
            else pe_ps_reply_error(s->srv, &s->barrier[t], msg);
        }
        drop_held(s, t);
    }
    s->steps++;
    s->early_st = PE_OK;
    free(bl);
    return st == PE_OK ? PE_OK : pe_error(st, "%s", msg);
}

static pe_status on_lost(serve *s, int t, const char *why) {
    if (t < 0 || t >= s->fanin || s->state[t] == T_DONE || s->state[t] == T_LOST) return PE_OK;
    s->state[t] = T_LOST;
    s->n_lost++;
    drop_held(s, t);
    fprintf(stderr, "pserver %s: trainer %d lost: %s; %s\n", s->ep, t, why,
            s->stop_on_lost ? "stopping (stop_on_lost_trainer)" : "dropped from the fan-in, the others go on");
    fflush(stderr);
    if (s->stop_on_lost)
        return pe_error(PE_ERR_IO, "pserver %s: trainer %d lost (%s) and stop_on_lost_trainer is set", s->ep, t, why);
    return s->sync ? try_step(s) : PE_OK;
}

static pe_status on_send(serve *s, pe_ps_event *ev) {
    const pe_ps_hdr *h = &ev->hdr;
    const int t = h->trainer_id;
    grad_slot *g = find_grad(s, h->name);
    if (!g) {
        reply_error(s, ev, "pserver %s has no gradient '%s' (grad_to_block_id names %d gradient(s), e.g. '%s')",
                    s->ep, h->name, s->n_grads, s->n_grads ? s->grads[0].name : "");
        return PE_OK;
    }
    if (g->decl && !pe_var_meta_agrees(g->decl, h->dtype, h->ndim, h->dims)) {
        char a[128], b[128];
        reply_error(s, ev, "pserver %s: gradient '%s' from trainer %d is %s %s, the pserver program declares %s %s",
                    s->ep, h->name, t, pe_dtype_name(h->dtype), pe_dims_str(h->ndim, h->dims, a, sizeof a),
                    pe_dtype_name(g->decl->dtype), pe_dims_str(g->decl->ndim, g->decl->dims, b, sizeof b));
        return PE_OK;
    }
    held_grad *hg = &g->held[t];
    const bool whole = held_whole(hg);
    if (h->offset == 0 && whole) {
        reply_error(s, ev, "pserver %s: trainer %d sent gradient '%s' twice in one step", s->ep, t, h->name);
        return PE_OK;
    }
    if (h->offset == 0 ? hg->n > 0
                       : !hg->n || whole || hg->parts[0].hdr.seq != h->seq || h->offset != held_got(hg) ||
                             !same_meta(h, &hg->parts[0].hdr)) {
        reply_error(s, ev, "pserver %s: trainer %d sent the part of gradient '%s' at byte %llu (request %u) where %s",
                    s->ep, t, h->name, (unsigned long long)h->offset, h->seq,
                    !hg->n ? "no part of it had come" : whole ? "all of it had come" : "another part was next");
        if (hg->n && !whole) held_clear(hg), s->epoch++;
        return PE_OK;
    }
    if (hg->n == hg->cap) {
        const int cap = hg->cap ? 2 * hg->cap : 8;
        pe_ps_event *np = realloc(hg->parts, sizeof *np * (size_t)cap);
        if (!np) {
            reply_error(s, ev, "pserver %s: out of memory holding gradient '%s' from trainer %d", s->ep, h->name, t);
            if (hg->n) held_clear(hg), s->epoch++;
            return PE_OK;
        }
        hg->parts = np, hg->cap = cap;
    }
    hg->parts[hg->n++] = *ev; /* keeps the data frame */
    ev->msg_ = NULL;
    const bool now_whole = held_whole(hg);
    if (s->sync) {
        if (now_whole) pe_ps_reply_ack(s->srv, ev);
        sum_ahead(s, g);
        if (now_whole && g->summed == hg->n) update_ahead(s, g); /* else a later part completes the block */
        return PE_OK;
    }
    if (!now_whole) return PE_OK;
    /* async: the gradient's update runs as it arrives, unscaled */
    s->tr[0] = t;
    pe_status st = reduce_into(s, g, s->tr, 1, 0, hg->n, 1.0, s->threads);
    held_clear(hg);
    if (st == PE_OK) st = run_block(s, g->block);
    if (st != PE_OK) {
        pe_ps_reply_error(s->srv, ev, pe_last_error());
        return st;
    }
    s->steps++;
    pe_ps_reply_ack(s->srv, ev);
    return PE_OK;
}

static pe_status on_get(serve *s, const pe_ps_event *ev) {
    const pe_var *v = pe_block_find_var(&s->prog->blocks[0], ev->hdr.name);
    const pe_tensor *t = v && v->persistable ? pe_scope_find_var(s->scope, ev->hdr.name) : NULL;
    if (!t || !t->buf) {
        reply_error(s, ev, "pserver %s has no %s '%s'%s", s->ep, v && !v->persistable ? "persistable var" : "var",
                    ev->hdr.name, t ? " value yet (did its startup program run?)" : "");
        return PE_OK;
    }
    /* sync mode: no update before this trainer's next barrier, sent once it has the value: no copy */
    if ((s->sync ? pe_ps_reply_value_shared(s->srv, ev, t) : pe_ps_reply_value(s->srv, ev, t)) != PE_OK) {
        fprintf(stderr, "%s\n", pe_last_error());
        fflush(stderr);
    }
    return PE_OK;
}

static pe_status on_request(serve *s, pe_ps_event *ev) {
    int t = ev->hdr.trainer_id;
    if (t >= s->fanin) {
        reply_error(s, ev, "pserver %s serves %d trainer(s) (Fanin); trainer id %d is out of range", s->ep, s->fanin,
                    t);
        return PE_OK;
    }
    if (ev->hdr.type == PE_PS_SEND && ev->hdr.offset && s->refused[t] == ev->hdr.seq + 1u)
        return PE_OK; /* a part of a SEND answered with ERROR already */
    if (s->state[t] == T_DONE || s->state[t] == T_LOST) {
        reply_error(s, ev, "pserver %s: trainer %d has %s", s->ep, t,
                    s->state[t] == T_DONE ? "already left (exe.close())" : "been dropped as lost");
        return PE_OK;
    }
    s->state[t] = T_ACTIVE;
    switch (ev->hdr.type) {
    case PE_PS_SEND: return on_send(s, ev);
    case PE_PS_GET: return on_get(s, ev);
    case PE_PS_FETCH_BARRIER: pe_ps_reply_ack(s->srv, ev); return PE_OK;
    case PE_PS_SEND_BARRIER:
        if (!s->sync) {
            pe_ps_reply_ack(s->srv, ev);
            return PE_OK;
        }
        if (s->barrier[t].kind == PE_PS_EV_REQUEST) {
            reply_error(s, ev, "pserver %s: trainer %d sent two barriers in one step", s->ep, t);
            return PE_OK;
        }
        s->barrier[t] = *ev;
        s->barrier[t].msg_ = NULL, s->barrier[t].data = NULL;
        return try_step(s);
    case PE_PS_COMPLETE:
        s->state[t] = T_DONE;
        s->n_done++;
        drop_held(s, t);
        pe_ps_reply_ack(s->srv, ev);
        return s->sync ? try_step(s) : PE_OK;
    default: reply_error(s, ev, "pserver %s: unexpected %s", s->ep, pe_ps_type_name(ev->hdr.type)); return PE_OK;
    }
}

static pe_status setup(serve *s, const pe_op *op) {
    const pe_attr *a;
    const char *ep = (a = attr(op, "endpoint")) && a->s ? a->s : NULL;
    if (!ep || !*ep) return pe_error(PE_ERR_INVALID, "listen_and_serv: attr endpoint (ip:port) is required");
    s->fanin = (a = attr(op, "Fanin")) ? (int)a->i : 1;
    s->sync = (a = attr(op, "sync_mode")) ? a->i != 0 : true;
    s->stop_on_lost = (a = attr(op, "stop_on_lost_trainer")) ? a->i != 0 : false;
    s->lr_block = (a = attr(op, "lr_decay_block_id")) ? (int)a->i : -1;
    if (s->fanin < 1 || s->fanin > 4096)
        return pe_error(PE_ERR_INVALID, "listen_and_serv at %s: Fanin %d (the trainer count) must be in 1..4096", ep,
                        s->fanin);
    const int nb = s->prog->n_blocks;
    if (s->lr_block >= nb || s->lr_block == 0)
        return pe_error(PE_ERR_INVALID, "listen_and_serv at %s: lr_decay_block_id %d is not a sub-block (the program "
                        "has %d blocks)", ep, s->lr_block, nb);
    a = attr(op, "optimize_blocks");
    s->n_blocks = a ? a->n : 0;
    s->blocks = a ? a->ints : NULL;
    for (int i = 0; i < s->n_blocks; i++)
        if (s->blocks[i] <= 0 || s->blocks[i] >= nb)
            return pe_error(PE_ERR_INVALID, "listen_and_serv at %s: optimize_blocks[%d] = %lld is not a sub-block (the "
                            "program has %d blocks)", ep, i, (long long)s->blocks[i], nb);
    a = attr(op, "grad_to_block_id");
    s->n_grads = a ? a->n : 0;
    s->grads = calloc((size_t)(s->n_grads ? s->n_grads : 1), sizeof *s->grads);
    s->state = calloc((size_t)s->fanin, sizeof *s->state);
    s->barrier = calloc((size_t)s->fanin, sizeof *s->barrier);
    s->bex = calloc((size_t)nb, sizeof *s->bex);
    s->refused = calloc((size_t)s->fanin, sizeof *s->refused);
    s->tr = calloc((size_t)s->fanin, sizeof *s->tr);
    s->data = calloc((size_t)s->fanin, sizeof *s->data);
    if (!s->grads || !s->state || !s->barrier || !s->bex || !s->refused || !s->tr || !s->data)
        return pe_error(PE_ERR_NOMEM, "pserver %s: out of memory", ep);
    for (int i = 0; i < s->n_grads; i++) {
        grad_slot *g = &s->grads[i];
        const char *e = a->strings[i], *colon = strrchr(e, ':');
        char *end;
        long b = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || colon == e || !colon[1] || *end || b <= 0 || b >= nb)
            return pe_error(PE_ERR_INVALID, "listen_and_serv at %s: grad_to_block_id[%d] = '%s' is not "
                            "\"GRAD:BLOCK\" with BLOCK a sub-block (1..%d)", ep, i, e, nb - 1);
        char *name = strndup(e, (size_t)(colon - e));
        g->name = name;
        g->block = (int)b;
        g->held = calloc((size_t)s->fanin, sizeof *g->held);
        if (!name || !g->held) return pe_error(PE_ERR_NOMEM, "pserver %s: out of memory", ep);
        g->decl = pe_block_find_var(&s->prog->blocks[0], name);
        if (!g->decl)
            return pe_error(PE_ERR_INVALID, "listen_and_serv at %s: gradient '%s' (grad_to_block_id) is not declared "
                            "in the pserver program's global block", ep, name);
        if (!pe_scope_find_var(s->scope, name) && !pe_scope_var(s->scope, name))
            return pe_error(PE_ERR_NOMEM, "pserver %s: out of memory creating '%s'", ep, name);
    }
    s->srv = pe_ps_server_new(ep, s->ep, sizeof s->ep);
    if (!s->srv) return pe_error_wrap(PE_ERR_IO, "listen_and_serv");
    fprintf(stderr, "pserver %s: listening (%d trainer%s, %s mode, %d gradient block%s)\n", s->ep, s->fanin,
            s->fanin == 1 ? "" : "s", s->sync ? "sync" : "async", s->n_grads, s->n_grads == 1 ? "" : "s");
    fflush(stderr);
    return PE_OK;
}

static void teardown(serve *s) {
    for (int i = 0; s->grads && i < s->n_grads; i++) {
        for (int t = 0; s->grads[i].held && t < s->fanin; t++) {
            held_clear(&s->grads[i].held[t]);
            free(s->grads[i].held[t].parts);
        }
        free(s->grads[i].held);
        free((char *)s->grads[i].name);
    }
    for (int b = 0; s->bex && b < s->prog->n_blocks; b++) pe_executor_free(s->bex[b]);
    free(s->grads), free(s->state), free(s->barrier), free(s->bex);
    free(s->refused), free(s->tr), free((void *)s->data);
    pe_ps_server_free(s->srv);
}

pe_status pe_pserver_serve(pe_place place, int threads, const pe_program *prog, int block_idx, pe_scope *scope,
                           const pe_op *op) {
    const pe_block *b = &prog->blocks[block_idx];
    if (b->n_ops != 1)
        return pe_error(PE_ERR_INVALID, "block %d holds listen_and_serv and %d other op(s): a pserver program's block "
                        "runs the server loop alone (DistributeTranspiler.get_pserver_program)", block_idx,
                        b->n_ops - 1);
    const unsigned mark = pe_interrupt_mark();
    tune_malloc();
    serve s;
    memset(&s, 0, sizeof s);
    s.prog = prog, s.scope = scope, s.place = place, s.threads = threads > 0 ? threads : 1;
    pe_status st = setup(&s, op);
    const double t0 = pe_now_s(), join_wait = pe_env_number("PE_PS_TRAINER_WAIT", 600, 1e-3, 1e9);
    while (st == PE_OK && live(&s) > 0) {
        if (pe_interrupted_since(mark)) {
            st = pe_interrupted_error();
            break;
        }
        pe_ps_event ev;
        st = pe_ps_server_poll(s.srv, 200, &ev);
        if (st != PE_OK) break;
        switch (ev.kind) {
        case PE_PS_EV_REQUEST: st = on_request(&s, &ev); break;
        case PE_PS_EV_LOST:
            st = on_lost(&s, ev.hdr.trainer_id, "its connection closed without COMPLETE (the process ended or stopped "
                         "answering heartbeats; exe.close() was not called)");
            break;
        case PE_PS_EV_BAD:
            fprintf(stderr, "pserver %s: ignored a malformed message: %s\n", s.ep, ev.error);
            fflush(stderr);
            break;
        case PE_PS_EV_NONE:
            if (pe_now_s() - t0 > join_wait)
                for (int t = 0; st == PE_OK && t < s.fanin; t++)
                    if (s.state[t] == T_UNSEEN) {
                        char why[128];
                        snprintf(why, sizeof why, "it never connected within %.0f s (PE_PS_TRAINER_WAIT)", join_wait);
                        st = on_lost(&s, t, why);
                    }
            break;
        }
        pe_ps_event_release(&ev);
    }
    if (st == PE_OK && s.n_done == 0)
        st = pe_error(PE_ERR_IO, "pserver %s: every trainer (%d) was lost; none left with exe.close()", s.ep, s.fanin);
    if (st == PE_OK) {
        /* the last COMPLETE's ACK is queued: let it reach its trainer before the socket goes */
        pe_ps_server_drain(s.srv, 2000);
        fprintf(stderr, "pserver %s: done after %d step%s (%d trainer%s left, %d lost)\n", s.ep, s.steps,
                s.steps == 1 ? "" : "s", s.n_done, s.n_done == 1 ? "" : "s", s.n_lost);
        fflush(stderr);
    }
    teardown(&s);
    return st;
}
