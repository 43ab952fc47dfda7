/* executor/timeline.h — the ParallelExecutor's timeline recorder
 * (internal; the switch is ExecutionStrategy.timeline_path or PE_TIMELINE,
 * the flush pe_pe_write_timeline in pe/parallel_executor.h).
 *
 *     pe_timeline *tl;
 *     pe_timeline_new("/tmp/run", 0, 0, n_places, places, 0, &tl);   // -> /tmp/run.rank0.json
 *     int64_t t0 = pe_timeline_now();
 *     ... run handle h of graph g ...
 *     pe_timeline_handle(tl, g, h, t0, pe_timeline_now());         // any thread
 *     pe_timeline_step(tl, t_run0, pe_timeline_now(), true);       // the run's thread
 *     pe_timeline_write(tl, NULL);                                 // between runs
 *     pe_timeline_free(tl);
 *
 * Recording appends to one preallocated array (an atomic index; no lock)
 * and keeps the graph and handle, not strings: names are looked up when
 * the file is written, so the graph must outlive the timeline's last write.
 */
#ifndef PE_EXECUTOR_TIMELINE_H
#define PE_EXECUTOR_TIMELINE_H

#include "graph/ssa_graph.h"
#include "pe/device.h"
#include "pe/status.h"

#include <stdint.h>
#include <time.h>

typedef struct pe_timeline pe_timeline;

/* Events kept per timeline unless PE_TIMELINE_MAX_EVENTS says otherwise
 * (32 bytes each in memory, touched only as far as used; ~150 in the file):
 * the MLP on 2 places makes ~70 a step, so ~3,700 steps fit. */
#define PE_TIMELINE_DEFAULT_MAX_EVENTS (1 << 18)

/* CLOCK_MONOTONIC in ns: one clock for every thread and, on one machine,
 * every process (so the ranks' files line up). */
static inline int64_t pe_timeline_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The file of rank `rank` for a path prefix: <prefix>.rank<N>.json (a
 * trailing ".json" of the prefix dropped), or <dir>/timeline.rank<N>.json
 * when the prefix is a directory or ends with '/'; instance k > 0 adds
 * ".pe<k>" before ".rank" (the k-th other executor of a process). Written
 * into buf (n bytes); PE_ERR_INVALID when empty or too long. */
pe_status pe_timeline_file_name(const char *prefix, int instance, int rank, char *buf, size_t n);

/* A recorder for one executor: rank is the trace's pid, places name the
 * tracks (copied). The file is pe_timeline_file_name(prefix, instance, rank).
 * max_events 0: PE_TIMELINE_MAX_EVENTS from the environment, else the
 * default. *out owned by the caller. */
pe_status pe_timeline_new(const char *prefix, int instance, int rank, int n_places, const pe_place *places, int64_t max_events,
                          pe_timeline **out);
void pe_timeline_free(pe_timeline *tl); /* accepts NULL; writes nothing */
const char *pe_timeline_path(const pe_timeline *tl); /* borrowed */

/* Handle h of g ran from t0 to t1 (ns, pe_timeline_now). An op handle goes
 * on its place's track, a collective on the comm track of every place it
 * spans (an optimizer shard: of its place), a join nowhere. Any thread;
 * past the cap the event is counted as dropped. */
void pe_timeline_handle(pe_timeline *tl, const pe_ssa_graph *g, int h, int64_t t0, int64_t t1);
/* One run of the executor, t0 to t1, on the "steps" track; the next run's
 * handles belong to the next step. The run's thread, between runs. */
void pe_timeline_step(pe_timeline *tl, int64_t t0, int64_t t1, bool ok);
/* Writes every event so far as Chrome trace-event JSON to path (NULL: the
 * timeline's own file), atomically. Not while a run is going on. */
pe_status pe_timeline_write(pe_timeline *tl, const char *path);
/* Runs recorded so far. */
int64_t pe_timeline_steps(const pe_timeline *tl);

#endif
