/* executor/scheduler.h — runs an SSA graph on a persistent thread pool
 * by dependency counting (internal). */
#ifndef PE_EXECUTOR_SCHEDULER_H
#define PE_EXECUTOR_SCHEDULER_H

#include "graph/ssa_graph.h"

typedef struct pe_sched pe_sched;
/* Runs handle h; called from pool threads, never twice at once for one h. */
typedef pe_status (*pe_sched_fn)(void *user, int h);

/* A pool of num_threads workers (>= 1), alive until pe_sched_free. */
pe_sched *pe_sched_new(int num_threads);
void pe_sched_free(pe_sched *s); /* accepts NULL */
/* Runs every handle of g once, each after its predecessors. The first
 * failure cancels the handles not yet started (the graph still drains, so
 * nothing waits forever) and is returned with its message on the calling
 * thread. One run at a time per scheduler. */
pe_status pe_sched_run(pe_sched *s, const pe_ssa_graph *g, pe_sched_fn fn, void *user);
int pe_sched_threads(const pe_sched *s);

#endif
