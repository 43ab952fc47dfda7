/* ops/cpu/gemm.h — the one GEMM of the CPU kernels (internal).
 *
 *     pe_cpu_gemm(ctx->place, PE_DTYPE_FP32, false, true, m, n, k, 1.0, a, b, 0.0, c);
 *
 * C[m, n] = alpha * op(A) op(B) + beta * C, row-major, no leading-dimension
 * padding: A is stored [m, k] ([k, m] when ta), B [k, n] ([n, k] when tb),
 * C [m, n]. Float32 or float64. place (a CPU place): whose workspace pool
 * lends oneDNN its scratchpad. Runs on the calling thread's OpenMP setting
 * (omp_get_max_threads(); one thread inside a parallel region), which the
 * kernels set to ctx->num_threads around the call (ops/cpu/math.c). A
 * float32 product has the same bits for every thread count (ops/cpu/gemm.c
 * says how); a float64 one is OpenBLAS's threaded dgemm.
 */
#ifndef PE_OPS_CPU_GEMM_H
#define PE_OPS_CPU_GEMM_H

#include "pe/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void pe_cpu_gemm(pe_place place, pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, const void *b, double beta, void *c);

/* The same product with the caller's scratch: ws (ws_bytes, borrowed; NULL
 * or too small: the place's pool lends it) holds the scratch a float32
 * forward product cut along K needs — pe_cpu_gemm_scratch_bytes of the same
 * arguments, 0 for every other product. A kernel passes its planned
 * workspace (ctx->workspace), so the memory plan places these bytes over
 * dead activations instead of the pool keeping them for the whole run. */
void pe_cpu_gemm_ws(pe_place place, void *ws, size_t ws_bytes, pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                    int64_t k, double alpha, const void *a, const void *b, double beta, void *c);
size_t pe_cpu_gemm_scratch_bytes(pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                                 double beta);

/* pe_blas_coretype_hint's rule (pe/ops.h), on given CPU facts: tested. */
const char *pe_cpu_blas_coretype_for(bool intel, int family, int model, bool avx512, bool avx2);

#endif
