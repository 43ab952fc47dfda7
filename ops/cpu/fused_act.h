/* ops/cpu/fused_act.h — the activations of the fused CPU kernels and their
 * gradients from Out (internal).
 *
 *     float y = PE_FUSED_RELU(v);                 // v < 0 ? 0 : v (NaN passes)
 *     float d = PE_FUSED_SIGMOID_G(out, dout);    // dout * out * (1 - out)
 *
 * The one copy of these expressions: ops/cpu/elementwise.c (relu, sigmoid,
 * tanh and their _grad kernels) and the fused kernels all use them, since a
 * fused op must give the bits the unfused ops give (test_fusion.c compares
 * them bitwise).
 */
#ifndef PE_OPS_CPU_FUSED_ACT_H
#define PE_OPS_CPU_FUSED_ACT_H

#include "ops/cpu/par.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef enum { PE_FACT_NONE = 0, PE_FACT_RELU, PE_FACT_SIGMOID, PE_FACT_TANH } pe_fused_act;

/* "" and "identity" -> NONE; unknown names -> -1 (infer rejects them first) */
static inline int pe_fused_act_parse(const char *s) {
    if (!*s || !strcmp(s, "identity")) return PE_FACT_NONE;
    if (!strcmp(s, "relu")) return PE_FACT_RELU;
    if (!strcmp(s, "sigmoid")) return PE_FACT_SIGMOID;
    if (!strcmp(s, "tanh")) return PE_FACT_TANH;
    return -1;
}

#define PE_FUSED_RELU(v) ((v) < 0 ? 0 : (v)) /* NaN passes through */
static inline float pe_fused_sigmoid_f32(float v) {
    const float e = expf(-fabsf(v)); /* in (0, 1]: never overflows */
    return v >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
static inline double pe_fused_sigmoid_f64(double v) {
    const double e = exp(-fabs(v));
    return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* Pass values, not array reads: `g` is evaluated only when o > 0, and a
 * conditional load compiles to a branch per element (see the loop below). */
#define PE_FUSED_RELU_G(o, g) ((o) > 0 ? (g) : 0)
#define PE_FUSED_SIGMOID_G(o, g) ((g) * (o) * (1 - (o)))
#define PE_FUSED_TANH_G(o, g) ((g) * (1 - (o) * (o)))

/* static void NAME(o, dout, dx, n, nt): dx[i] = G(o[i], dout[i]) over [n],
 * OpenMP-parallel when n is large (ops/cpu/par.h). Both inputs are loaded
 * before G: PE_FUSED_RELU_G's `o > 0 ? g : 0` with g[i] inside the ternary
 * compiled to a branch per element (a conditional load), mispredicted on
 * every other element of a ReLU mask: 2.7 ns per element instead of a
 * vector blend. dx may be dout itself (in place): element i is read before
 * it is written, so iterations are independent. */
#define PE_FUSED_ACT_GRAD_LOOP(NAME, T, G)                                                            \
    static void NAME(const T *o, const T *g, T *dx, int64_t n, int nt) {                              \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, const T o_ = o[i]; const T g_ = g[i]; dx[i] = G(o_, g_);); \
    }

#endif
