/* ops/cpu/optimizer.h — what the single and the merged optimizer kernels
 * share (internal): the size from which an update forks OpenMP threads, and
 * the [1] scalars (learning rate, beta powers) read and written in double.
 *
 *     double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate"));
 *     pe_opt_set_scalar(beta1_pow_out, b1p * b1);
 */
#ifndef PE_OPS_CPU_OPTIMIZER_H
#define PE_OPS_CPU_OPTIMIZER_H

#include "pe/tensor.h"

/* Below this many elements an update stays on the calling thread. */
#define OPT_PAR_MIN 32768

/* t: [1] float32 or float64 (checked by infer). */
static inline double pe_opt_scalar(const pe_tensor *t) {
    const void *d = pe_tensor_data(t);
    return t->dtype == PE_DTYPE_FP32 ? (double)*(const float *)d : *(const double *)d;
}

static inline void pe_opt_set_scalar(pe_tensor *t, double v) {
    void *d = pe_tensor_data(t);
    if (t->dtype == PE_DTYPE_FP32) *(float *)d = (float)v;
    else *(double *)d = v;
}

#endif
