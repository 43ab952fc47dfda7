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

/* acc += sum over k in [0, n) of (double)(term), where `term` may use k.
 * Eight independent double lanes (lane k % 8), folded in a fixed tree at the
 * end: the same bits for a given n whatever the thread count, and 8 chains
 * instead of one serial dependency, so the loop vectorizes. Every kernel
 * that must agree bitwise with another (a fused op and the ops it replaces)
 * sums through this one macro. */
#define PE_LANE_SUM(acc, n, k, term)                                                  \
    do {                                                                              \
        double pe_l_[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                   \
        const int64_t pe_n_ = (n);                                                    \
        int64_t k = 0;                                                                \
        for (; k + 8 <= pe_n_; k += 8) {                                              \
            const int64_t pe_k0_ = k;                                                 \
            for (int pe_j_ = 0; pe_j_ < 8; pe_j_++) {                                 \
                k = pe_k0_ + pe_j_;                                                   \
                pe_l_[pe_j_] += (double)(term);                                       \
            }                                                                         \
            k = pe_k0_;                                                               \
        }                                                                             \
        for (; k < pe_n_; k++) pe_l_[k & 7] += (double)(term);                        \
        (acc) += ((pe_l_[0] + pe_l_[1]) + (pe_l_[2] + pe_l_[3])) +                    \
                 ((pe_l_[4] + pe_l_[5]) + (pe_l_[6] + pe_l_[7]));                     \
    } while (0)

#endif
