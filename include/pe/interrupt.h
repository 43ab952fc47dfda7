/* pe/interrupt.h — stopping runs in progress (Ctrl-C).
 *
 *     static void on_sigint(int sig) { (void)sig; pe_interrupt(); }
 *     ...
 *     signal(SIGINT, on_sigint);
 *     pe_status st = pe_run(train, feed, 2, fetch, 1, true, &loss);
 *     if (st == PE_ERR_CANCELLED) fprintf(stderr, "%s\n", pe_last_error());  // "run interrupted ..."
 *
 * pe_interrupt() asks every run in progress in this process (pe_run,
 * pe_run_list, pe_executor_run) to stop: each stops starting ops (the
 * ParallelExecutor's scheduler checks before every handle, the
 * single-place executor between ops), waits for the handles already
 * running, collectives already issued included, and returns
 * PE_ERR_CANCELLED with the message "run interrupted (pe_interrupt) ...".
 * A run stops within one op's time. A request reaches only the runs in
 * progress when it is made: a run started afterwards runs normally, so
 * there is nothing to clear.
 *
 * After an interrupted run the executor is usable for the next run, and
 * its scopes are consistent (every var holds a whole tensor), but the step
 * may be partly applied: some parameters updated by it, others not, and
 * with num_iteration_per_run > 1 some iterations done. Restore a
 * checkpoint when that matters. Across processes (num_trainers > 1) only
 * this process stops: the other trainers wait in their next collective and
 * fail there (their timeout, or mpirun ending the job), so interrupt every
 * trainer (mpirun forwards Ctrl-C to all ranks).
 *
 * Async-signal-safe (one lock-free atomic add): call it from a signal
 * handler or from any thread.
 */
#ifndef PE_INTERRUPT_H
#define PE_INTERRUPT_H

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

void pe_interrupt(void);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
