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

/* lamb on one parameter (ops/cpu/optimizer.c): also merged_lamb's per member */
void pe_cpu_lamb_param(pe_tensor *po, pe_tensor *m1o, pe_tensor *m2o, const pe_tensor *p, const pe_tensor *g,
                       const pe_tensor *m1, const pe_tensor *m2, double lr, double b1p, double b2p, double b1,
                       double b2, double eps, double wd, int nt);

/* The element updates the single and the merged kernels share, so both do
 * the same arithmetic on element i (bitwise the same results). Each reads
 * every input of element i before writing it (outputs alias inputs). The
 * names are the kernels' locals: arrays p g m ... and outputs po mo ...,
 * scalars already rounded to T. */

/* momentum: v = mu v + g;  p -= lr v, or lr (g + mu v) (nesterov) */
#define PE_MOMENTUM_ELEM(T, i)                                                   \
    { const T gi_ = g[i]; const T pi_ = p[i]; const T vi_ = v[i] * mu + gi_;    \
      vo[i] = vi_; po[i] = pi_ - lr * vi_; }
#define PE_MOMENTUM_NESTEROV_ELEM(T, i)                                          \
    { const T gi_ = g[i]; const T pi_ = p[i]; const T vi_ = v[i] * mu + gi_;    \
      vo[i] = vi_; po[i] = pi_ - (gi_ + vi_ * mu) * lr; }

/* momentum over elements [b, e) (merged_momentum's pieces) */
#define PE_MOMENTUM_RANGE(T, b, e, nesterov)                                                    \
    do {                                                                                        \
        if (nesterov) {                                                                         \
            _Pragma("omp simd") for (int64_t i = (b); i < (e); i++) PE_MOMENTUM_NESTEROV_ELEM(T, i) \
        } else {                                                                                \
            _Pragma("omp simd") for (int64_t i = (b); i < (e); i++) PE_MOMENTUM_ELEM(T, i)      \
        }                                                                                       \
    } while (0)

/* adagrad: m += g^2;  p -= lr * g / (sqrt(m) + eps) */
#define PE_ADAGRAD_ELEM(T, SQRT, i)                                              \
    { const T gi_ = g[i]; const T pi_ = p[i]; const T mi_ = m[i] + gi_ * gi_;    \
      mo[i] = mi_; po[i] = pi_ - lr * gi_ / (SQRT(mi_) + eps); }

/* rmsprop: ms = rho ms + (1 - rho) g^2;  [mg = rho mg + (1 - rho) g]
 * mom = mu mom + lr g / sqrt(ms [- mg^2] + eps);  p -= mom */
#define PE_RMSPROP_ELEM(T, SQRT, i)                                                          \
    { const T gi_ = g[i]; const T pi_ = p[i];                                                \
      const T ms_ = rho * ms[i] + c_rho * gi_ * gi_; const T mom_ = mu * mom[i] + lr * gi_ / SQRT(ms_ + eps); \
      mso[i] = ms_; momo[i] = mom_; po[i] = pi_ - mom_; }
#define PE_RMSPROP_CENTERED_ELEM(T, SQRT, i)                                                 \
    { const T gi_ = g[i]; const T pi_ = p[i];                                                \
      const T ms_ = rho * ms[i] + c_rho * gi_ * gi_; const T mg_ = rho * mg[i] + c_rho * gi_; \
      const T mom_ = mu * mom[i] + lr * gi_ / SQRT(ms_ - mg_ * mg_ + eps);                   \
      mso[i] = ms_; mgo[i] = mg_; momo[i] = mom_; po[i] = pi_ - mom_; }

/* adamax: m = b1 m + (1 - b1) g;  u = max(b2 u + eps, |g|);  p -= lr_t m / u
 * (lr_t = lr / (1 - beta1_pow)) */
#define PE_ADAMAX_ELEM(T, FABS, i)                                                           \
    { const T gi_ = g[i]; const T pi_ = p[i]; const T m_ = b1 * m[i] + c1 * gi_;             \
      const T u0_ = b2 * u[i] + eps; const T ag_ = FABS(gi_); const T u_ = u0_ > ag_ ? u0_ : ag_; \
      mo[i] = m_; uo[i] = u_; po[i] = pi_ - lr_t * (m_ / u_); }

/* adamw: p -= dc p (dc = lr * lr_ratio * coeff, 0 without decay), then adam's
 * step with lr * lr_ratio (lr_t, eps_t as adam's) */
#define PE_ADAMW_ELEM(T, SQRT, i)                                                            \
    { const T gi_ = g[i]; const T p0_ = p[i]; const T pi_ = p0_ - dc * p0_;                  \
      const T a_ = b1 * m1[i] + c1 * gi_; const T b_ = b2 * m2[i] + c2 * gi_ * gi_;          \
      m1o[i] = a_; m2o[i] = b_; po[i] = pi_ - lr_t * (a_ / (SQRT(b_) + eps_t)); }

#endif
