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
#include <stdint.h>

void pe_cpu_gemm(pe_place place, pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, const void *b, double beta, void *c);

/* pe_blas_coretype_hint's rule (pe/ops.h), on given CPU facts: tested. */
const char *pe_cpu_blas_coretype_for(bool intel, int family, int model, bool avx512, bool avx2);

#endif
