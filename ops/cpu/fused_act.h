/* ops/cpu/fused_act.h — the activations of the fused CPU kernels and their
 * gradients from Out (internal).
 *
 *     float y = PE_FUSED_RELU(v);                 // v < 0 ? 0 : v (NaN passes)
 *     float d = PE_FUSED_SIGMOID_G(out, dout);    // dout * out * (1 - out)
 *
 * These are the exact expressions of ops/cpu/elementwise.c (relu, sigmoid,
 * tanh and their _grad kernels): a fused op must give the bits the unfused
 * ops give, and test_fusion.c compares them bitwise. Change both together.
 */
#ifndef PE_OPS_CPU_FUSED_ACT_H
#define PE_OPS_CPU_FUSED_ACT_H

#include <math.h>
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

#define PE_FUSED_RELU(v) ((v) < 0 ? 0 : (v))
static inline float pe_fused_sigmoid_f32(float v) {
    const float e = expf(-fabsf(v));
    return v >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
static inline double pe_fused_sigmoid_f64(double v) {
    const double e = exp(-fabs(v));
    return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

#define PE_FUSED_RELU_G(o, g) ((o) > 0 ? (g) : 0)
#define PE_FUSED_SIGMOID_G(o, g) ((g) * (o) * (1 - (o)))
#define PE_FUSED_TANH_G(o, g) ((g) * (1 - (o) * (o)))

#endif
