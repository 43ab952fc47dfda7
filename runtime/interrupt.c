/* runtime/interrupt.c — the process-wide interrupt request (pe/interrupt.h).
 *
 * A counter, not a flag: pe_interrupt() adds one, a run notes the count at
 * its start (pe_interrupt_mark) and stops once the count differs
 * (pe_interrupted_since). So a request reaches every run in progress, in
 * any thread, and no run has to clear anything (clearing a flag at a run's
 * start would drop a request meant for another executor's run). One
 * lock-free atomic add: safe in a signal handler.
 */
#include "pe/interrupt.h"
#include "runtime/internal.h"

#include <stdatomic.h>

static _Atomic unsigned g_interrupts;

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "pe_interrupt must be lock-free to be async-signal-safe");

void pe_interrupt(void) { atomic_fetch_add_explicit(&g_interrupts, 1, memory_order_relaxed); }

unsigned pe_interrupt_mark(void) { return atomic_load_explicit(&g_interrupts, memory_order_relaxed); }

bool pe_interrupted_since(unsigned mark) {
    return atomic_load_explicit(&g_interrupts, memory_order_relaxed) != mark;
}

pe_status pe_interrupted_error(void) {
    return pe_error(PE_ERR_CANCELLED, "run interrupted (pe_interrupt, e.g. Ctrl-C): it stopped between ops, so "
                                      "this step may be partly applied (some parameters updated, others not)");
}
