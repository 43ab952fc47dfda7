/* ops/cpu/par.h — when a CPU kernel forks OpenMP threads (internal).
 *
 *     const int nt = ctx->num_threads;   // the name `nt` is part of the macro
 *     PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, { out[i] = f(x[i]); });
 *
 * Why a macro and not `#pragma omp parallel for if(par)`: entering an
 * `omp parallel` construct costs about a microsecond on a thread that is not
 * the process's main thread even when its if() clause is false, and the
 * ParallelExecutor runs every kernel on a pool thread with a per-op overhead
 * target of ~1 µs. So the decision is taken in plain C and the serial branch
 * contains no OpenMP construct at all. Both branches run the same body, with
 * a static schedule, so results never depend on which branch ran as long as
 * each iteration writes its own elements.
 */
#ifndef PE_OPS_CPU_PAR_H
#define PE_OPS_CPU_PAR_H

#include "ops/op.h"

#include <stdint.h>

/* The thread count a kernel may fork: ctx->num_threads, at least 1. */
static inline int pe_kernel_threads(const pe_op_ctx *ctx) { return ctx->num_threads > 0 ? ctx->num_threads : 1; }

/* Below this many elements of work a loop stays on the calling thread. */
#define PE_PAR_MIN 32768

/* for (int64_t i = 0; i < n; i++) body — forked over `nt` threads when `par`. */
#define PE_PAR_FOR(par, i, n, ...)                                              \
    do {                                                                        \
        const int64_t pe_par_n_ = (n);                                          \
        if (par) {                                                              \
            _Pragma("omp parallel for num_threads(nt) schedule(static)")        \
            for (int64_t i = 0; i < pe_par_n_; i++) { __VA_ARGS__ }             \
        } else {                                                                \
            for (int64_t i = 0; i < pe_par_n_; i++) { __VA_ARGS__ }             \
        }                                                                       \
    } while (0)

#endif
