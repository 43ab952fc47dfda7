/* executor/scheduler.c — dependency-counting scheduler on a persistent
 * thread pool.
 *
 * Each run copies every handle's predecessor count into an atomic
 * `pending` array and queues the handles with none. A worker runs a handle,
 * then decrements its successors' counts: the first successor that becomes
 * ready it runs itself (no queue round trip, warm caches), the others go to
 * the shared queue in one locked push. Each handle is queued at most once
 * per run, so the queue is a flat array with head/tail indices.
 *
 * The calling thread works too: it takes the first ready handle itself,
 * wakes the pool for the others, and then takes queued handles until the
 * run is over, sleeping only while the queue is empty. Why: on a host
 * whose cores are all busy every hand-off between threads is a wait in
 * the kernel's run queue (~1.3 ms measured on the 2-core benchmark host,
 * /proc/<tid>/schedstat; docs/benchmarks.md, "The scheduler's hand-offs"),
 * and a caller that slept through the run paid two per step (wake a
 * worker to start, be woken at the end) before any op ran or after the
 * last one; now the step starts on the thread that is already running and,
 * when the caller runs the last handle, ends there.
 *
 * Failure: the first error (status + message, copied out of the worker's
 * thread-local buffer) is kept and a cancel flag is set; handles that start
 * afterwards are skipped but still complete, so the run always drains and
 * returns — nothing hangs, and the next run starts clean. An interrupt
 * (pe_interrupt, runtime/interrupt.c) is such a failure: before starting a
 * handle a worker compares the interrupt count with the run's mark, and a
 * difference records PE_ERR_CANCELLED ("run interrupted"); handles already
 * running, and collectives already issued, finish as they would.
 *
 * Asynchronous handles (collectives): a handle function may start its work
 * and return PE_SCHED_PENDING; whoever finishes the work (a communication
 * thread, a collective's completion callback on another pool thread)
 * calls pe_sched_done, which does what a worker does after a synchronous
 * handle (record the error, release the successors, count it completed),
 * except that every ready successor goes to the queue: the completing
 * thread is not necessarily ours. So no pool thread ever blocks on a
 * collective, and synchronous handles pay one compare for it.
 */
#include "executor/scheduler.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pe_sched {
    int n_threads;
    int omp_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;
    bool shutdown;
    /* the current run (guarded by mu where not atomic) */
    const pe_ssa_graph *g;
    pe_sched_fn fn;
    void *user;
    _Atomic int *pending;
    int cap_pending;
    int *queue;
    int head, tail;
    _Atomic int completed;
    _Atomic bool cancelled;
    unsigned intr_mark; /* pe_interrupt_mark() at the run's start */
    bool running;
    pe_status err;
    char err_msg[2048];
};

static void record_error(pe_sched *s, pe_status st) {
    pthread_mutex_lock(&s->mu);
    if (s->err == PE_OK) {
        s->err = st;
        snprintf(s->err_msg, sizeof s->err_msg, "%s", pe_last_error());
    }
    pthread_mutex_unlock(&s->mu);
    atomic_store(&s->cancelled, true);
}

/* Handle h is finished: decrement its successors' counts; the first that
 * becomes ready goes to *next (the caller runs it: no queue round trip,
 * warm caches) unless next is NULL, the others to the queue in one locked
 * push. Then counts h as completed and wakes the caller after the last. */
static void finish(pe_sched *s, int h, int *next) {
    const pe_ssa_graph *g = s->g;
    int ready[64], n_ready = 0;
    const pe_handle *ph = &g->h[h];
    for (int i = 0; i < ph->n_succ; i++) {
        int v = ph->succ[i];
        if (atomic_fetch_sub_explicit(&s->pending[v], 1, memory_order_acq_rel) != 1) continue;
        if (next && *next < 0) {
            *next = v;
        } else {
            ready[n_ready++] = v;
            if (n_ready == (int)(sizeof ready / sizeof ready[0])) {
                pthread_mutex_lock(&s->mu);
                for (int k = 0; k < n_ready; k++) s->queue[s->tail++] = ready[k];
                pthread_cond_broadcast(&s->cv_work);
                pthread_mutex_unlock(&s->mu);
                n_ready = 0;
            }
        }
    }
    if (n_ready) {
        pthread_mutex_lock(&s->mu);
        for (int k = 0; k < n_ready; k++) s->queue[s->tail++] = ready[k];
        if (n_ready == 1) pthread_cond_signal(&s->cv_work);
        else pthread_cond_broadcast(&s->cv_work);
        pthread_mutex_unlock(&s->mu);
    }
    /* n_h is read before the count: once another thread's increment is
     * the last, the run returns and the caller may free the graph */
    int n_h = g->n_h;
    if (atomic_fetch_add_explicit(&s->completed, 1, memory_order_acq_rel) + 1 == n_h) {
        /* the last handle: wake the caller (under the lock, so the wake
         * cannot fall between its check and its wait) */
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv_done);
        pthread_mutex_unlock(&s->mu);
    }
}

static void run_chain(pe_sched *s, int h) {
    while (h >= 0) {
        if (!atomic_load_explicit(&s->cancelled, memory_order_acquire)) {
            pe_status st = __builtin_expect(pe_interrupted_since(s->intr_mark), 0) ? pe_interrupted_error()
                                                                                   : s->fn(s->user, h);
            /* started, finishes later through pe_sched_done (maybe already
             * has, from inside fn): h is no longer this thread's */
            if (st == PE_SCHED_PENDING) return;
            if (st != PE_OK) record_error(s, st);
        }
        int next = -1;
        finish(s, h, &next);
        h = next;
    }
}

void pe_sched_done(pe_sched *s, int h, pe_status st) {
    if (st != PE_OK) record_error(s, st);
    finish(s, h, NULL);
}

static void *worker(void *arg) {
    pe_sched *s = arg;
    /* OpenMP's per-thread state, now rather than at some later step (the
     * empty asm keeps the compiler from dropping the empty regions) */
    _Pragma("omp parallel num_threads(1)") { __asm__ __volatile__(""); }
    if (s->omp_threads > 1) {
        _Pragma("omp parallel num_threads(s->omp_threads)") { __asm__ __volatile__(""); }
    }
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->shutdown && !(s->running && s->head < s->tail)) pthread_cond_wait(&s->cv_work, &s->mu);
        if (s->shutdown) break;
        int h = s->queue[s->head++];
        pthread_mutex_unlock(&s->mu);
        run_chain(s, h);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

pe_sched *pe_sched_new(int num_threads, int omp_threads) {
    pe_sched *s = calloc(1, sizeof *s);
    if (!s) {
        pe_error(PE_ERR_NOMEM, "out of memory creating the scheduler");
        return NULL;
    }
    s->n_threads = num_threads < 1 ? 1 : num_threads;
    s->omp_threads = omp_threads < 1 ? 1 : omp_threads;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    s->threads = calloc((size_t)s->n_threads, sizeof *s->threads);
    if (!s->threads) {
        pe_sched_free(s);
        pe_error(PE_ERR_NOMEM, "out of memory creating the scheduler");
        return NULL;
    }
    for (int i = 0; i < s->n_threads; i++) {
        if (pthread_create(&s->threads[i], NULL, worker, s) != 0) {
            s->n_threads = i;
            pe_sched_free(s);
            pe_error(PE_ERR_DEVICE, "cannot start scheduler thread %d", i);
            return NULL;
        }
    }
    return s;
}

void pe_sched_free(pe_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->shutdown = true;
    pthread_cond_broadcast(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; s->threads && i < s->n_threads; i++) pthread_join(s->threads[i], NULL);
    free(s->threads);
    free((void *)s->pending);
    free(s->queue);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    free(s);
}

int pe_sched_threads(const pe_sched *s) { return s->n_threads; }

pe_status pe_sched_run(pe_sched *s, const pe_ssa_graph *g, pe_sched_fn fn, void *user, unsigned intr_mark) {
    if (g->n_h == 0) return PE_OK;
    if (g->n_h > s->cap_pending) {
        _Atomic int *np = malloc(sizeof *np * (size_t)g->n_h);
        int *nq = malloc(sizeof *nq * (size_t)g->n_h);
        if (!np || !nq) {
            free((void *)np);
            free(nq);
            return pe_error(PE_ERR_NOMEM, "out of memory preparing a run of %d handles", g->n_h);
        }
        free((void *)s->pending);
        free(s->queue);
        s->pending = np;
        s->queue = nq;
        s->cap_pending = g->n_h;
    }
    pthread_mutex_lock(&s->mu);
    s->g = g;
    s->fn = fn;
    s->user = user;
    s->intr_mark = intr_mark;
    s->head = s->tail = 0;
    s->err = PE_OK;
    s->err_msg[0] = '\0';
    atomic_store(&s->completed, 0);
    atomic_store(&s->cancelled, false);
    for (int i = 0; i < g->n_h; i++) {
        atomic_store_explicit(&s->pending[i], g->h[i].n_deps, memory_order_relaxed);
        if (g->h[i].n_deps == 0) s->queue[s->tail++] = i;
    }
    s->running = true;
    /* the caller takes the first ready handle and wakes the pool for the
     * rest, then takes from the queue until the run ends, sleeping only
     * while the queue is empty */
    int h = s->head < s->tail ? s->queue[s->head++] : -1;
    if (s->tail - s->head == 1) pthread_cond_signal(&s->cv_work);
    else if (s->tail - s->head > 1) pthread_cond_broadcast(&s->cv_work);
    for (;;) {
        pthread_mutex_unlock(&s->mu);
        run_chain(s, h);
        pthread_mutex_lock(&s->mu);
        while (atomic_load(&s->completed) < g->n_h && s->head == s->tail) pthread_cond_wait(&s->cv_done, &s->mu);
        if (atomic_load(&s->completed) >= g->n_h) break;
        h = s->queue[s->head++];
    }
    s->running = false;
    pe_status st = s->err;
    pthread_mutex_unlock(&s->mu);
    if (st != PE_OK) return pe_error(st, "%s", s->err_msg);
    return PE_OK;
}
