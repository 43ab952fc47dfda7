/* executor/scheduler.h — runs an SSA graph on a persistent thread pool
 * by dependency counting (internal). */
#ifndef PE_EXECUTOR_SCHEDULER_H
#define PE_EXECUTOR_SCHEDULER_H

#include "graph/ssa_graph.h"

typedef struct pe_sched pe_sched;
/* Runs handle h; called from pool threads, never twice at once for one h.
 * Returns PE_OK / an error when h is finished, or PE_SCHED_PENDING when it
 * started work that finishes later: then exactly one pe_sched_done(s, h,
 * status) must follow, from any thread (also from inside fn itself). */
typedef pe_status (*pe_sched_fn)(void *user, int h);

/* "Started; pe_sched_done will say when it has finished." Not a pe_status
 * any PE function returns. */
#define PE_SCHED_PENDING ((pe_status)0x5ced)

/* A pool of num_threads workers (>= 1), alive until pe_sched_free. Each
 * worker starts by opening an empty OpenMP parallel region of omp_threads
 * threads (the kernels' count), so that OpenMP's per-thread state (libgomp
 * allocates a thread's team and pool on its first region) exists before
 * the first run instead of appearing at whichever step a worker first runs
 * a kernel. */
pe_sched *pe_sched_new(int num_threads, int omp_threads);
void pe_sched_free(pe_sched *s); /* accepts NULL */
/* Runs every handle of g once, each after its predecessors. The first
 * failure cancels the handles not yet started (the graph still drains, so
 * nothing waits forever) and is returned with its message on the calling
 * thread. An interrupt requested after intr_mark (pe_interrupt_mark(),
 * runtime/internal.h) is such a failure: PE_ERR_CANCELLED, "run
 * interrupted". One run at a time per scheduler. The calling thread runs
 * handles too (fn is called from it as from the pool threads). */
pe_status pe_sched_run(pe_sched *s, const pe_ssa_graph *g, pe_sched_fn fn, void *user, unsigned intr_mark);
int pe_sched_threads(const pe_sched *s);
/* Handle h of the current run, which returned PE_SCHED_PENDING, has
 * finished with st (its message in this thread's pe_last_error() when st
 * != PE_OK): its successors become ready; an error cancels the rest of the
 * run as a synchronous failure does. Any thread; once per pending handle,
 * before the run returns (the run waits for it). */
void pe_sched_done(pe_sched *s, int h, pe_status st);

#endif
