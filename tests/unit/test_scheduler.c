/* tests/unit/test_scheduler.c — the dependency-counting scheduler
 * (executor/scheduler.c) with asynchronous handles.
 *
 * Graphs are built here by hand (a layered DAG with fan-in and fan-out).
 * Some handles are asynchronous: they start work and return
 * PE_SCHED_PENDING, and the work is finished later by pe_sched_done from
 * another thread — a "completer" thread that finishes them in LIFO order,
 * or the completion callback of a real in-process allreduce whose last
 * rank runs on another pool thread, or the handle itself before it
 * returns. Checked: every handle runs once, after all its predecessors
 * have finished; errors from asynchronous handles come back with their
 * message; a failure while asynchronous handles are pending cancels the
 * rest and the run still drains; hundreds of runs on 1..4 threads;
 * pe_interrupt from another thread stops a run (PE_ERR_CANCELLED) and
 * reaches only the runs in progress.
 */
#include "tests/unit/op_test_util.h"
#include "executor/scheduler.h"
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- graphs ------------------------------------------------------------------- */

/* layers of `width` handles; handle j of layer l depends on handles j and
 * (j + 1) % width of layer l - 1 (and on all of them every 4th layer). */
static pe_ssa_graph *layered(int layers, int width) {
    pe_ssa_graph *g = calloc(1, sizeof *g);
    assert_non_null(g);
    g->n_h = layers * width;
    g->h = calloc((size_t)g->n_h, sizeof *g->h);
    assert_non_null(g->h);
    for (int l = 1; l < layers; l++)
        for (int j = 0; j < width; j++) {
            int v = l * width + j;
            for (int i = 0; i < width; i++) {
                if (!(l % 4 == 0 || i == j || i == (j + 1) % width)) continue;
                pe_handle *u = &g->h[(l - 1) * width + i];
                if (u->n_succ == u->cap_succ) {
                    u->cap_succ = u->cap_succ ? 2 * u->cap_succ : 4;
                    u->succ = realloc(u->succ, sizeof *u->succ * (size_t)u->cap_succ);
                    assert_non_null(u->succ);
                }
                u->succ[u->n_succ++] = v;
                g->h[v].n_deps++;
            }
        }
    return g;
}

static void graph_free(pe_ssa_graph *g) {
    for (int i = 0; i < g->n_h; i++) free(g->h[i].succ);
    free(g->h);
    free(g);
}

/* ---- a completer thread -------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int items[4096], n;
    pe_status st[4096];
    bool stop;
    pe_sched *s;
    pthread_t t;
} completer;

static void *completer_main(void *arg) {
    completer *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && c->n == 0) pthread_cond_wait(&c->cv, &c->mu);
        if (c->n == 0 && c->stop) break;
        int h = c->items[--c->n]; /* LIFO: finishes out of start order */
        pe_status st = c->st[c->n];
        pthread_mutex_unlock(&c->mu);
        if (st != PE_OK) pe_error(st, "async handle %d failed on the completer", h);
        pe_sched_done(c->s, h, st);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void completer_post(completer *c, int h, pe_status st) {
    pthread_mutex_lock(&c->mu);
    c->st[c->n] = st;
    c->items[c->n++] = h;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void completer_start(completer *c, pe_sched *s) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->s = s;
    assert_int_equal(pthread_create(&c->t, NULL, completer_main, c), 0);
}

static void completer_stop(completer *c) {
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->t, NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* ---- the handle function -------------------------------------------------------- */

enum { SYNC, ASYNC_COMPLETER, ASYNC_INLINE, ASYNC_COMM, SYNC_SLOW };

typedef struct {
    pe_sched *s;
    const pe_ssa_graph *g;
    completer *comp;
    int *mode;            /* [n_h] */
    int **preds;          /* [n_h][n_deps] */
    _Atomic int *runs;    /* times started */
    _Atomic int *done;    /* finished */
    _Atomic int order_bad;
    int fail_h;           /* -1: none */
    pe_status fail_st;
    bool fail_async;
    pe_comm *rank[2];     /* ASYNC_COMM: handle h is rank h % 2 of tag h / 2 */
    int32_t val[4096];
} ctx;

typedef struct {
    ctx *x;
    int h;
} comm_done_arg;

static comm_done_arg g_args[4096];

static void mark_done(ctx *x, int h) { atomic_store(&x->done[h], 1); }

static void comm_cb(pe_work *w, pe_status st, void *user) {
    comm_done_arg *a = user;
    mark_done(a->x, a->h);
    if (st != PE_OK) pe_error(st, "%s", pe_work_message(w));
    pe_work_free(w);
    pe_sched_done(a->x->s, a->h, st);
}

static pe_status handle_fn(void *user, int h) {
    ctx *x = user;
    atomic_fetch_add(&x->runs[h], 1);
    for (int i = 0; i < x->g->h[h].n_deps; i++)
        if (!atomic_load(&x->done[x->preds[h][i]])) atomic_store(&x->order_bad, h + 1);
    bool fail = h == x->fail_h;
    switch (x->mode[h]) {
    case ASYNC_COMPLETER:
        /* mark before posting: once posted, successors may start */
        mark_done(x, h);
        completer_post(x->comp, h, fail ? x->fail_st : PE_OK);
        return PE_SCHED_PENDING;
    case ASYNC_INLINE:
        mark_done(x, h);
        if (fail) pe_error(x->fail_st, "async handle %d failed inline", h);
        pe_sched_done(x->s, h, fail ? x->fail_st : PE_OK);
        return PE_SCHED_PENDING;
    case ASYNC_COMM: {
        pe_work *w;
        x->val[h] = h;
        g_args[h] = (comm_done_arg){x, h};
        pe_status st = pe_comm_allreduce(x->rank[h % 2], &x->val[h], 1, PE_DTYPE_INT32, (uint64_t)(h / 2), &w);
        if (st != PE_OK) return st;
        pe_work_on_done(w, comm_cb, &g_args[h]);
        return PE_SCHED_PENDING;
    }
    case SYNC_SLOW: {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
        /* fall through */
    default:
        mark_done(x, h);
        if (fail) return pe_error(x->fail_st, "sync handle %d failed", h);
        return PE_OK;
    }
}

/* preds from succ lists */
static int **preds_of(const pe_ssa_graph *g) {
    int **p = calloc((size_t)g->n_h, sizeof *p), *fill = calloc((size_t)g->n_h, sizeof *fill);
    assert_non_null(p);
    assert_non_null(fill);
    for (int i = 0; i < g->n_h; i++) p[i] = calloc((size_t)g->h[i].n_deps + 1, sizeof **p);
    for (int u = 0; u < g->n_h; u++)
        for (int k = 0; k < g->h[u].n_succ; k++) {
            int v = g->h[u].succ[k];
            p[v][fill[v]++] = u;
        }
    free(fill);
    return p;
}

typedef struct {
    pe_ssa_graph *g;
    ctx x;
    int **preds;
} fixture;

static void fixture_init(fixture *f, int layers, int width, pe_sched *s, completer *c) {
    memset(f, 0, sizeof *f);
    f->g = layered(layers, width);
    f->preds = preds_of(f->g);
    f->x.s = s;
    f->x.g = f->g;
    f->x.comp = c;
    f->x.preds = f->preds;
    f->x.mode = calloc((size_t)f->g->n_h, sizeof *f->x.mode);
    f->x.runs = calloc((size_t)f->g->n_h, sizeof *f->x.runs);
    f->x.done = calloc((size_t)f->g->n_h, sizeof *f->x.done);
    assert_non_null(f->x.mode);
    f->x.fail_h = -1;
}

static void fixture_reset(fixture *f) {
    for (int i = 0; i < f->g->n_h; i++) {
        atomic_store(&f->x.runs[i], 0);
        atomic_store(&f->x.done[i], 0);
    }
    atomic_store(&f->x.order_bad, 0);
}

static void fixture_free(fixture *f) {
    for (int i = 0; i < f->g->n_h; i++) free(f->preds[i]);
    free(f->preds);
    free(f->x.mode);
    free((void *)f->x.runs);
    free((void *)f->x.done);
    graph_free(f->g);
}

/* ---- tests ------------------------------------------------------------------------- */

/* Mixed sync / async handles, many runs, 1..4 pool threads. */
static void test_async_many_runs(void **state) {
    (void)state;
    uint64_t rng = 12345;
    for (int threads = 1; threads <= 4; threads++) {
        pe_sched *s = pe_sched_new(threads, 1);
        assert_non_null(s);
        completer c;
        completer_start(&c, s);
        fixture f;
        fixture_init(&f, 12, 6, s, &c);
        for (int run = 0; run < 100; run++) {
            fixture_reset(&f);
            for (int i = 0; i < f.g->n_h; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                f.x.mode[i] = (int)((rng >> 33) % 3); /* SYNC, ASYNC_COMPLETER, ASYNC_INLINE */
            }
            assert_int_equal(pe_sched_run(s, f.g, handle_fn, &f.x, pe_interrupt_mark()), PE_OK);
            if (atomic_load(&f.x.order_bad)) fail_msg("handle %d ran before a predecessor finished", f.x.order_bad - 1);
            for (int i = 0; i < f.g->n_h; i++)
                if (atomic_load(&f.x.runs[i]) != 1) fail_msg("run %d: handle %d ran %d times", run, i, f.x.runs[i]);
        }
        fixture_free(&f);
        completer_stop(&c);
        pe_sched_free(s);
    }
}

/* Async handles completed by a real in-process allreduce: the pair (2k,
 * 2k+1) are the two ranks of tag k; the later one finishes both, so one
 * handle's completion comes from another pool thread's call. */
static void test_async_collectives(void **state) {
    (void)state;
    pe_sched *s = pe_sched_new(3, 1);
    assert_non_null(s);
    fixture f;
    fixture_init(&f, 8, 4, s, NULL);
    assert_int_equal(pe_comm_inproc_world_new(2, 1, f.x.rank), PE_OK);
    for (int run = 0; run < 50; run++) {
        fixture_reset(&f);
        for (int i = 0; i < f.g->n_h; i++) f.x.mode[i] = ASYNC_COMM;
        assert_int_equal(pe_sched_run(s, f.g, handle_fn, &f.x, pe_interrupt_mark()), PE_OK);
        for (int i = 0; i < f.g->n_h; i++) {
            int pair = i ^ 1;
            if (f.x.val[i] != i + pair) fail_msg("handle %d: allreduce gave %d, want %d", i, f.x.val[i], i + pair);
        }
    }
    pe_comm_free(f.x.rank[0]);
    pe_comm_free(f.x.rank[1]);
    fixture_free(&f);
    pe_sched_free(s);
}

/* An async handle's error comes back with its message; later handles
 * are cancelled, the run drains, and the next run is clean. */
static void test_async_errors_and_cancel(void **state) {
    (void)state;
    for (int threads = 1; threads <= 3; threads += 2) {
        pe_sched *s = pe_sched_new(threads, 1);
        completer c;
        completer_start(&c, s);
        fixture f;
        fixture_init(&f, 10, 4, s, &c);
        for (int variant = 0; variant < 3; variant++) {
            fixture_reset(&f);
            for (int i = 0; i < f.g->n_h; i++) f.x.mode[i] = i % 2 ? ASYNC_COMPLETER : SYNC;
            /* 0: async failure on the completer; 1: inline async failure;
             * 2: sync failure while async handles are pending */
            f.x.fail_h = variant == 2 ? 4 * 4 + 2 : 4 * 4 + 1;
            if (variant == 1) f.x.mode[f.x.fail_h] = ASYNC_INLINE;
            f.x.fail_st = PE_ERR_DEVICE;
            pe_status st = pe_sched_run(s, f.g, handle_fn, &f.x, pe_interrupt_mark());
            assert_int_equal(st, PE_ERR_DEVICE);
            char want[64];
            snprintf(want, sizeof want, "handle %d failed", f.x.fail_h);
            if (!strstr(pe_last_error(), want)) fail_msg("message '%s' lacks '%s'", pe_last_error(), want);
            /* the last layer depends on everything: it was cancelled */
            for (int i = f.g->n_h - 4; i < f.g->n_h; i++) assert_int_equal(atomic_load(&f.x.runs[i]), 0);
            for (int i = 0; i < f.g->n_h; i++) assert_true(atomic_load(&f.x.runs[i]) <= 1);
            /* and the scheduler is fine afterwards */
            fixture_reset(&f);
            f.x.fail_h = -1;
            assert_int_equal(pe_sched_run(s, f.g, handle_fn, &f.x, pe_interrupt_mark()), PE_OK);
            for (int i = 0; i < f.g->n_h; i++) assert_int_equal(atomic_load(&f.x.runs[i]), 1);
        }
        fixture_free(&f);
        completer_stop(&c);
        pe_sched_free(s);
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *interrupter(void *arg) {
    struct timespec d = {0, *(long *)arg};
    nanosleep(&d, NULL);
    pe_interrupt();
    return NULL;
}

/* pe_interrupt from another thread, while slow sync handles and async ones
 * (finished by the completer) run: the run returns PE_ERR_CANCELLED
 * ("run interrupted") long before its end, the handles not started stay
 * so, it drains, and the next run is whole; an interrupt made before a
 * run's mark does not touch it. */
static void test_interrupt(void **state) {
    (void)state;
    for (int threads = 1; threads <= 3; threads += 2) {
        pe_sched *s = pe_sched_new(threads, 1);
        completer c;
        completer_start(&c, s);
        fixture f;
        fixture_init(&f, 100, 4, s, &c);
        for (int i = 0; i < f.g->n_h; i++) f.x.mode[i] = i % 3 == 2 ? ASYNC_COMPLETER : SYNC_SLOW;
        /* a whole run: ~270 slow handles of 1 ms over `threads` threads */
        fixture_reset(&f);
        double t0 = now_s();
        assert_int_equal(pe_sched_run(s, f.g, handle_fn, &f.x, pe_interrupt_mark()), PE_OK);
        double whole = now_s() - t0;
        for (int rep = 0; rep < 3; rep++) {
            fixture_reset(&f);
            long delay_ns = 20 * 1000000L;
            pthread_t t;
            unsigned mark = pe_interrupt_mark();
            assert_int_equal(pthread_create(&t, NULL, interrupter, &delay_ns), 0);
            t0 = now_s();
            pe_status st = pe_sched_run(s, f.g, handle_fn, &f.x, mark);
            double took = now_s() - t0;
            pthread_join(t, NULL);
            assert_int_equal(st, PE_ERR_CANCELLED);
            if (!strstr(pe_last_error(), "run interrupted")) fail_msg("message '%s'", pe_last_error());
            for (int i = f.g->n_h - 4; i < f.g->n_h; i++) assert_int_equal(atomic_load(&f.x.runs[i]), 0);
            for (int i = 0; i < f.g->n_h; i++) assert_true(atomic_load(&f.x.runs[i]) <= 1);
            if (took > 0.5 * whole + 0.02)
                fail_msg("%d threads: the interrupted run took %.3f s of a whole run's %.3f s", threads, took, whole);
            /* the interrupt is spent: the next run is whole */
            fixture_reset(&f);
            assert_int_equal(pe_sched_run(s, f.g, handle_fn, &f.x, pe_interrupt_mark()), PE_OK);
            for (int i = 0; i < f.g->n_h; i++) assert_int_equal(atomic_load(&f.x.runs[i]), 1);
        }
        fixture_free(&f);
        completer_stop(&c);
        pe_sched_free(s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_many_runs),
        cmocka_unit_test(test_async_collectives),
        cmocka_unit_test(test_async_errors_and_cancel),
        cmocka_unit_test(test_interrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
