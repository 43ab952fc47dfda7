/* ops/cpu/optimizer.c — CPU kernels of the optimizer ops: sgd, momentum,
 * adam, adagrad, rmsprop, adamax, adamw, lamb, clip_by_global_norm (shape
 * inference in ops/optimizer.c).
 *
 * Math (Paddle's kernels; lr is the LearningRate input, read as a double):
 *   sgd       p -= lr * g
 *   momentum  v = mu * v + g;  p -= lr * (g + mu * v) (nesterov) or lr * v
 *             (= torch.optim.SGD(momentum=mu, nesterov=..., dampening=0))
 *   adam      lr_t = lr * sqrt(1 - b2pow) / (1 - b1pow)
 *             m1 = b1 * m1 + (1 - b1) * g;  m2 = b2 * m2 + (1 - b2) * g * g
 *             p -= lr_t * m1 / (sqrt(m2) + eps * sqrt(1 - b2pow))
 *             b1pow *= b1;  b2pow *= b2   (= torch.optim.Adam, amsgrad off)
 *   adagrad   m += g^2;  p -= lr * g / (sqrt(m) + eps)
 *   rmsprop   ms = rho ms + (1 - rho) g^2;  centered: mg = rho mg + (1 - rho) g
 *             mom = mu mom + lr g / sqrt(ms [- mg^2] + eps);  p -= mom
 *             (epsilon inside the sqrt: Paddle's, not torch's sqrt(ms) + eps)
 *   adamax    m = b1 m + (1 - b1) g;  u = max(b2 u + eps, |g|)  (torch: max(b2 u, |g| + eps))
 *             p -= lr / (1 - b1pow) * m / u;  b1pow *= b1
 *   adamw     p -= lr' coeff p (with_decay), then adam with lr' = lr * lr_ratio
 *             (Paddle 2.x's AdamW; = torch.optim.AdamW)
 *   lamb      adam's m1, m2;  r = (m1 / (1 - b1pow)) / (sqrt(m2 / (1 - b2pow)) + eps) + wd p
 *             p -= lr * (||p|| > 0 && ||r|| > 0 ? ||p|| / ||r|| : 1) * r  (norms of the whole param)
 *   clip_by_global_norm
 *             norm = sqrt(sum_k sum_i x_k[i]^2);  out_k = x_k * M / max(norm, M)
 *
 * How: the per-step scalars (lr_t, the epsilon term, 1 - beta) are computed
 * once in double and rounded to the param dtype; the element loops run in
 * the param dtype (fp32 or fp64) so they vectorize. Outputs alias inputs
 * (ParamOut = Param, ...): each loop reads every input of element i before
 * writing element i, and the scalar accumulators are read before any write.
 * Element i depends on element i only, so the loops are `omp simd` (safe
 * with the aliasing too). They go to ctx->num_threads OpenMP threads only
 * when large — the branch is in C, because entering an omp region (even
 * `if(0)`) costs ~1 us on a non-main thread, which would dominate the many
 * small per-param updates.
 * The global norm is summed in double over chunks whose bounds depend only
 * on the element count, then in chunk and input order, so it is the same
 * for any thread count.
 */
#include "ops/op.h"
#include "ops/cpu/par.h"
#include "ops/cpu/optimizer.h"

#include <math.h>
#include <string.h>

/* The squared-sum of a tensor this large is split into this many chunks. */
#define NORM_CHUNKS 64


/* for i in [0, n): BODY — on nt OpenMP threads when n is large. */
#define FOR_ELEMS(n, nt, ...)                                                  \
    do {                                                                       \
        const int64_t n_ = (n);                                                \
        const int nt_ = (nt);                                                  \
        if (n_ >= OPT_PAR_MIN && nt_ > 1) {                                    \
            _Pragma("omp parallel for simd num_threads(nt_) schedule(static)") \
            for (int64_t i = 0; i < n_; i++) { __VA_ARGS__ }                   \
        } else {                                                               \
            _Pragma("omp simd")                                                \
            for (int64_t i = 0; i < n_; i++) { __VA_ARGS__ }                   \
        }                                                                      \
    } while (0)

/* ---- sgd: param, grad: [n]; lr: [1] -> param_out: [n] -------------------- */

#define SGD_LOOP(NAME, T)                                                          \
    static void NAME(T *po, const T *p, const T *g, double lr_d, int64_t n, int nt) { \
        const T lr = (T)lr_d;                                                      \
        FOR_ELEMS(n, nt, po[i] = p[i] - lr * g[i];);                               \
    }
SGD_LOOP(sgd_f32, float)
SGD_LOOP(sgd_f64, double)

pe_status pe_cpu_sgd(const pe_op_ctx *ctx) {
    const pe_tensor *p = pe_ctx_in(ctx, "Param"), *g = pe_ctx_in(ctx, "Grad");
    pe_tensor *po = pe_ctx_out(ctx, "ParamOut");
    double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate"));
    int64_t n = pe_tensor_numel(p);
    if (p->dtype == PE_DTYPE_FP32)
        sgd_f32(pe_tensor_data(po), pe_tensor_data(p), pe_tensor_data(g), lr, n, pe_kernel_threads(ctx));
    else
        sgd_f64(pe_tensor_data(po), pe_tensor_data(p), pe_tensor_data(g), lr, n, pe_kernel_threads(ctx));
    return PE_OK;
}

/* ---- momentum: param, grad, velocity: [n]; lr: [1] -> param_out, velocity_out: [n] */

#define MOMENTUM_LOOP(NAME, T)                                                                  \
    static void NAME(T *po, T *vo, const T *p, const T *g, const T *v, double lr_d, double mu_d, \
                     bool nesterov, int64_t n, int nt) {                                        \
        const T lr = (T)lr_d, mu = (T)mu_d;                                                     \
        if (nesterov) {                                                                         \
            FOR_ELEMS(n, nt, PE_MOMENTUM_NESTEROV_ELEM(T, i));                                   \
        } else {                                                                                \
            FOR_ELEMS(n, nt, PE_MOMENTUM_ELEM(T, i));                                            \
        }                                                                                       \
    }
MOMENTUM_LOOP(momentum_f32, float)
MOMENTUM_LOOP(momentum_f64, double)

pe_status pe_cpu_momentum(const pe_op_ctx *ctx) {
    const pe_tensor *p = pe_ctx_in(ctx, "Param"), *g = pe_ctx_in(ctx, "Grad"), *v = pe_ctx_in(ctx, "Velocity");
    pe_tensor *po = pe_ctx_out(ctx, "ParamOut"), *vo = pe_ctx_out(ctx, "VelocityOut");
    double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate"));
    double mu = pe_ctx_float(ctx, "mu");
    bool nesterov = pe_ctx_bool(ctx, "use_nesterov");
    int64_t n = pe_tensor_numel(p);
    if (p->dtype == PE_DTYPE_FP32)
        momentum_f32(pe_tensor_data(po), pe_tensor_data(vo), pe_tensor_data(p), pe_tensor_data(g), pe_tensor_data(v),
                     lr, mu, nesterov, n, pe_kernel_threads(ctx));
    else
        momentum_f64(pe_tensor_data(po), pe_tensor_data(vo), pe_tensor_data(p), pe_tensor_data(g), pe_tensor_data(v),
                     lr, mu, nesterov, n, pe_kernel_threads(ctx));
    return PE_OK;
}

/* ---- adam: param, grad, moment1, moment2: [n]; lr, beta1_pow, beta2_pow: [1]
 *      -> param_out, moment1_out, moment2_out: [n]; beta1_pow_out, beta2_pow_out: [1] */

typedef struct {
    double lr_t, eps_t, b1, b2;
} adam_coef;

#define ADAM_LOOP(NAME, T, SQRT)                                                                    \
    static void NAME(T *po, T *m1o, T *m2o, const T *p, const T *g, const T *m1, const T *m2,        \
                     const adam_coef *c, int64_t n, int nt) {                                        \
        const T lr_t = (T)c->lr_t, eps_t = (T)c->eps_t;                                             \
        const T b1 = (T)c->b1, b2 = (T)c->b2, c1 = (T)(1.0 - c->b1), c2 = (T)(1.0 - c->b2);          \
        FOR_ELEMS(n, nt, const T gi = g[i]; const T pi = p[i];                                      \
                  const T a = b1 * m1[i] + c1 * gi; const T b = b2 * m2[i] + c2 * gi * gi;          \
                  m1o[i] = a; m2o[i] = b; po[i] = pi - lr_t * (a / (SQRT(b) + eps_t)););            \
    }
ADAM_LOOP(adam_f32, float, sqrtf)
ADAM_LOOP(adam_f64, double, sqrt)

pe_status pe_cpu_adam(const pe_op_ctx *ctx) {
    const pe_tensor *p = pe_ctx_in(ctx, "Param"), *g = pe_ctx_in(ctx, "Grad");
    const pe_tensor *m1 = pe_ctx_in(ctx, "Moment1"), *m2 = pe_ctx_in(ctx, "Moment2");
    pe_tensor *po = pe_ctx_out(ctx, "ParamOut"), *m1o = pe_ctx_out(ctx, "Moment1Out"), *m2o = pe_ctx_out(ctx, "Moment2Out");
    pe_tensor *b1po = pe_ctx_out(ctx, "Beta1PowOut"), *b2po = pe_ctx_out(ctx, "Beta2PowOut");
    /* read every scalar before anything is written (the Out scalars alias them) */
    double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate"));
    double b1p = pe_opt_scalar(pe_ctx_in(ctx, "Beta1Pow")), b2p = pe_opt_scalar(pe_ctx_in(ctx, "Beta2Pow"));
    double b1 = pe_ctx_float(ctx, "beta1"), b2 = pe_ctx_float(ctx, "beta2"), eps = pe_ctx_float(ctx, "epsilon");
    if (!(b1p < 1.0) || !(b2p < 1.0) || !(b1p >= 0.0) || !(b2p >= 0.0))
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "Beta1Pow '%s' = %g, Beta2Pow '%s' = %g; they must be in [0, 1) (the startup program "
                            "initializes them to beta1 and beta2)",
                            pe_ctx_in_name(ctx, "Beta1Pow", 0), b1p, pe_ctx_in_name(ctx, "Beta2Pow", 0), b2p);
    adam_coef c = {.lr_t = lr * sqrt(1.0 - b2p) / (1.0 - b1p), .eps_t = eps * sqrt(1.0 - b2p), .b1 = b1, .b2 = b2};
    int64_t n = pe_tensor_numel(p);
    if (p->dtype == PE_DTYPE_FP32)
        adam_f32(pe_tensor_data(po), pe_tensor_data(m1o), pe_tensor_data(m2o), pe_tensor_data(p), pe_tensor_data(g),
                 pe_tensor_data(m1), pe_tensor_data(m2), &c, n, pe_kernel_threads(ctx));
    else
        adam_f64(pe_tensor_data(po), pe_tensor_data(m1o), pe_tensor_data(m2o), pe_tensor_data(p), pe_tensor_data(g),
                 pe_tensor_data(m1), pe_tensor_data(m2), &c, n, pe_kernel_threads(ctx));
    if (b1po) pe_opt_set_scalar(b1po, b1p * b1);
    if (b2po) pe_opt_set_scalar(b2po, b2p * b2);
    return PE_OK;
}

/* ---- clip_by_global_norm: x_k: [n_k] -> out_k: [n_k] -------------------------
 * One op for what Paddle's GradientClipByGlobalNorm emits as a chain of
 * small ops (square, reduce_sum per grad, sum, sqrt, elementwise_max,
 * elementwise_div, elementwise_mul per grad): the same math, one pass over
 * the gradients to sum and one to scale, and no temporaries. */

/* sum of x[i]^2 over [b, e) in double, 8 lanes combined in a fixed order */
#define SUMSQ_RANGE(NAME, T)                                               \
    static double NAME(const T *x, int64_t b, int64_t e) {                 \
        double acc[8] = {0};                                               \
        int64_t i = b;                                                     \
        for (; i + 8 <= e; i += 8)                                         \
            for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j] * (double)x[i + j]; \
        double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])); \
        for (; i < e; i++) s += (double)x[i] * (double)x[i];               \
        return s;                                                          \
    }
SUMSQ_RANGE(sumsq_f32, float)
SUMSQ_RANGE(sumsq_f64, double)

static double sumsq(const pe_tensor *x, int nt) {
    const int64_t n = pe_tensor_numel(x);
    const void *d = pe_tensor_data(x);
    const bool f32 = x->dtype == PE_DTYPE_FP32;
    if (n < OPT_PAR_MIN) return f32 ? sumsq_f32(d, 0, n) : sumsq_f64(d, 0, n);
    /* chunk c covers [c*n/C, (c+1)*n/C): bounds depend on n only */
    double part[NORM_CHUNKS];
    if (nt > 1) {
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int c = 0; c < NORM_CHUNKS; c++) {
            int64_t b = n * c / NORM_CHUNKS, e = n * (c + 1) / NORM_CHUNKS;
            part[c] = f32 ? sumsq_f32(d, b, e) : sumsq_f64(d, b, e);
        }
    } else {
        for (int c = 0; c < NORM_CHUNKS; c++) {
            int64_t b = n * c / NORM_CHUNKS, e = n * (c + 1) / NORM_CHUNKS;
            part[c] = f32 ? sumsq_f32(d, b, e) : sumsq_f64(d, b, e);
        }
    }
    double s = 0;
    for (int c = 0; c < NORM_CHUNKS; c++) s += part[c];
    return s;
}

#define SCALE_LOOP(NAME, T)                                                  \
    static void NAME(T *o, const T *x, double s_d, int64_t n, int nt) {      \
        const T s = (T)s_d;                                                  \
        FOR_ELEMS(n, nt, o[i] = x[i] * s;);                                  \
    }
SCALE_LOOP(scale_f32, float)
SCALE_LOOP(scale_f64, double)

pe_status pe_cpu_clip_by_global_norm(const pe_op_ctx *ctx) {
    const int n = pe_ctx_n_in(ctx, "X"), nt = pe_kernel_threads(ctx);
    const double max_norm = pe_ctx_float(ctx, "max_global_norm");
    double total = 0;
    for (int k = 0; k < n; k++) total += sumsq(pe_ctx_in_at(ctx, "X", k), nt);
    const double norm = sqrt(total);
    /* Paddle: max_norm / elementwise_max(norm, max_norm); a NaN norm compares false -> scale 1 */
    const double scale = max_norm / (norm > max_norm ? norm : max_norm);
    for (int k = 0; k < n; k++) {
        const pe_tensor *x = pe_ctx_in_at(ctx, "X", k);
        pe_tensor *o = pe_ctx_out_at(ctx, "Out", k);
        const void *xd = pe_tensor_data(x);
        void *od = pe_tensor_data(o);
        if (scale == 1.0) {
            if (od != xd && pe_tensor_nbytes(x)) memcpy(od, xd, pe_tensor_nbytes(x));
            continue;
        }
        if (x->dtype == PE_DTYPE_FP32) scale_f32(od, xd, scale, pe_tensor_numel(x), nt);
        else scale_f64(od, xd, scale, pe_tensor_numel(x), nt);
    }
    return PE_OK;
}

/* Beta pows of step t: in [0, 1) (the startup program sets beta1 / beta2). */
static pe_status check_pow(const pe_op_ctx *ctx, const char *slot, double v) {
    if (v >= 0.0 && v < 1.0) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' = %g; it must be in [0, 1) (the startup program initializes it "
                        "to the beta)", slot, pe_ctx_in_name(ctx, slot, 0), v);
}

#define IN(slot) pe_tensor_data(pe_ctx_in(ctx, slot))
#define OUT(slot) pe_tensor_data(pe_ctx_out(ctx, slot))

/* ---- adagrad: param, grad, moment: [n]; lr: [1] -> param_out, moment_out: [n] */

#define ADAGRAD_LOOP(NAME, T, SQRT)                                                                  \
    static void NAME(const pe_op_ctx *ctx, double lr_d, double eps_d, int64_t n, int nt) {           \
        const T lr = (T)lr_d, eps = (T)eps_d;                                                        \
        const T *p = IN("Param"), *g = IN("Grad"), *m = IN("Moment");                                \
        T *po = OUT("ParamOut"), *mo = OUT("MomentOut");                                             \
        FOR_ELEMS(n, nt, PE_ADAGRAD_ELEM(T, SQRT, i));                                               \
    }
ADAGRAD_LOOP(adagrad_f32, float, sqrtf)
ADAGRAD_LOOP(adagrad_f64, double, sqrt)

pe_status pe_cpu_adagrad(const pe_op_ctx *ctx) {
    const pe_tensor *p = pe_ctx_in(ctx, "Param");
    double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate")), eps = pe_ctx_float(ctx, "epsilon");
    (p->dtype == PE_DTYPE_FP32 ? adagrad_f32 : adagrad_f64)(ctx, lr, eps, pe_tensor_numel(p), pe_kernel_threads(ctx));
    return PE_OK;
}

/* ---- rmsprop: param, grad, mean_square, moment (, mean_grad): [n]; lr: [1]
 *      -> param_out, moment_out, mean_square_out (, mean_grad_out): [n] */

#define RMSPROP_LOOP(NAME, T, SQRT)                                                                  \
    static void NAME(const pe_op_ctx *ctx, double lr_d, int64_t n, int nt) {                         \
        const T lr = (T)lr_d, eps = (T)pe_ctx_float(ctx, "epsilon"), mu = (T)pe_ctx_float(ctx, "momentum"); \
        const double rho_d = pe_ctx_float(ctx, "decay");                                             \
        const T rho = (T)rho_d, c_rho = (T)(1.0 - rho_d);                                            \
        const T *p = IN("Param"), *g = IN("Grad"), *ms = IN("MeanSquare"), *mom = IN("Moment");      \
        T *po = OUT("ParamOut"), *mso = OUT("MeanSquareOut"), *momo = OUT("MomentOut");              \
        if (pe_ctx_bool(ctx, "centered")) {                                                          \
            const T *mg = IN("MeanGrad");                                                            \
            T *mgo = OUT("MeanGradOut");                                                             \
            FOR_ELEMS(n, nt, PE_RMSPROP_CENTERED_ELEM(T, SQRT, i));                                  \
        } else {                                                                                     \
            FOR_ELEMS(n, nt, PE_RMSPROP_ELEM(T, SQRT, i));                                           \
        }                                                                                            \
    }
RMSPROP_LOOP(rmsprop_f32, float, sqrtf)
RMSPROP_LOOP(rmsprop_f64, double, sqrt)

pe_status pe_cpu_rmsprop(const pe_op_ctx *ctx) {
    const pe_tensor *p = pe_ctx_in(ctx, "Param");
    double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate"));
    (p->dtype == PE_DTYPE_FP32 ? rmsprop_f32 : rmsprop_f64)(ctx, lr, pe_tensor_numel(p), pe_kernel_threads(ctx));
    /* not centered: MeanGradOut (if any) keeps MeanGrad, as Paddle leaves it */
    const pe_tensor *mg = pe_ctx_in(ctx, "MeanGrad");
    pe_tensor *mgo = pe_ctx_out(ctx, "MeanGradOut");
    if (!pe_ctx_bool(ctx, "centered") && mg && mgo && pe_tensor_data(mgo) != pe_tensor_data(mg) && pe_tensor_nbytes(mg))
        memcpy(pe_tensor_data(mgo), pe_tensor_data(mg), pe_tensor_nbytes(mg));
    return PE_OK;
}

/* ---- adamax: param, grad, moment, inf_norm: [n]; lr, beta1_pow: [1]
 *      -> param_out, moment_out, inf_norm_out: [n]; beta1_pow_out: [1] */

#define ADAMAX_LOOP(NAME, T, FABS)                                                                   \
    static void NAME(const pe_op_ctx *ctx, double lr_t_d, int64_t n, int nt) {                       \
        const double b1_d = pe_ctx_float(ctx, "beta1");                                              \
        const T lr_t = (T)lr_t_d, b1 = (T)b1_d, c1 = (T)(1.0 - b1_d);                                \
        const T b2 = (T)pe_ctx_float(ctx, "beta2"), eps = (T)pe_ctx_float(ctx, "epsilon");           \
        const T *p = IN("Param"), *g = IN("Grad"), *m = IN("Moment"), *u = IN("InfNorm");            \
        T *po = OUT("ParamOut"), *mo = OUT("MomentOut"), *uo = OUT("InfNormOut");                    \
        FOR_ELEMS(n, nt, PE_ADAMAX_ELEM(T, FABS, i));                                                \
    }
ADAMAX_LOOP(adamax_f32, float, fabsf)
ADAMAX_LOOP(adamax_f64, double, fabs)

pe_status pe_cpu_adamax(const pe_op_ctx *ctx) {
    const pe_tensor *p = pe_ctx_in(ctx, "Param");
    pe_tensor *b1po = pe_ctx_out(ctx, "Beta1PowOut");
    double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate")), b1p = pe_opt_scalar(pe_ctx_in(ctx, "Beta1Pow"));
    PE_CHECK(check_pow(ctx, "Beta1Pow", b1p));
    (p->dtype == PE_DTYPE_FP32 ? adamax_f32 : adamax_f64)(ctx, lr / (1.0 - b1p), pe_tensor_numel(p),
                                                          pe_kernel_threads(ctx));
    if (b1po) pe_opt_set_scalar(b1po, b1p * pe_ctx_float(ctx, "beta1"));
    return PE_OK;
}

/* ---- adamw: adam's slots -> adam's outputs ------------------------------------ */

#define ADAMW_LOOP(NAME, T, SQRT)                                                                    \
    static void NAME(const pe_op_ctx *ctx, const adam_coef *c, double dc_d, int64_t n, int nt) {     \
        const T lr_t = (T)c->lr_t, eps_t = (T)c->eps_t, dc = (T)dc_d;                                \
        const T b1 = (T)c->b1, b2 = (T)c->b2, c1 = (T)(1.0 - c->b1), c2 = (T)(1.0 - c->b2);          \
        const T *p = IN("Param"), *g = IN("Grad"), *m1 = IN("Moment1"), *m2 = IN("Moment2");         \
        T *po = OUT("ParamOut"), *m1o = OUT("Moment1Out"), *m2o = OUT("Moment2Out");                 \
        FOR_ELEMS(n, nt, PE_ADAMW_ELEM(T, SQRT, i));                                                 \
    }
ADAMW_LOOP(adamw_f32, float, sqrtf)
ADAMW_LOOP(adamw_f64, double, sqrt)

pe_status pe_cpu_adamw(const pe_op_ctx *ctx) {
    const pe_tensor *p = pe_ctx_in(ctx, "Param");
    pe_tensor *b1po = pe_ctx_out(ctx, "Beta1PowOut"), *b2po = pe_ctx_out(ctx, "Beta2PowOut");
    double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate")) * pe_ctx_float(ctx, "lr_ratio");
    double b1p = pe_opt_scalar(pe_ctx_in(ctx, "Beta1Pow")), b2p = pe_opt_scalar(pe_ctx_in(ctx, "Beta2Pow"));
    double b1 = pe_ctx_float(ctx, "beta1"), b2 = pe_ctx_float(ctx, "beta2"), eps = pe_ctx_float(ctx, "epsilon");
    PE_CHECK(check_pow(ctx, "Beta1Pow", b1p));
    PE_CHECK(check_pow(ctx, "Beta2Pow", b2p));
    adam_coef c = {.lr_t = lr * sqrt(1.0 - b2p) / (1.0 - b1p), .eps_t = eps * sqrt(1.0 - b2p), .b1 = b1, .b2 = b2};
    double dc = pe_ctx_bool(ctx, "with_decay") ? lr * pe_ctx_float(ctx, "coeff") : 0.0;
    (p->dtype == PE_DTYPE_FP32 ? adamw_f32 : adamw_f64)(ctx, &c, dc, pe_tensor_numel(p), pe_kernel_threads(ctx));
    if (b1po) pe_opt_set_scalar(b1po, b1p * b1);
    if (b2po) pe_opt_set_scalar(b2po, b2p * b2);
    return PE_OK;
}

/* ---- lamb: adam's slots -> adam's outputs ---------------------------------------
 * m1 = b1 m1 + (1 - b1) g;  m2 = b2 m2 + (1 - b2) g^2
 * r  = (m1 / (1 - b1pow)) / (sqrt(m2 / (1 - b2pow)) + eps) + wd p
 * p -= lr * (||p|| > 0 && ||r|| > 0 ? ||p|| / ||r|| : 1) * r
 * Pass 1 writes the moments and sums p^2 and r^2 (in double, over
 * NORM_CHUNKS chunks whose bounds depend on n only: the same sums for any
 * thread count); pass 2 recomputes r from the new moments (the same
 * expression, so the same bits) and updates p: no scratch tensor. */

#define LAMB_R(T, SQRT, a, b, pi) ((a) / c1p / (SQRT((b) / c2p) + eps) + wd * (pi))

#define LAMB_PASS1(NAME, T, SQRT)                                                                    \
    static void NAME(T *m1o, T *m2o, const T *p, const T *g, const T *m1, const T *m2, const double *s, \
                     int64_t b, int64_t e, double *pn, double *rn) {                                 \
        const T b1 = (T)s[0], b2 = (T)s[1], c1 = (T)(1.0 - s[0]), c2 = (T)(1.0 - s[1]);              \
        const T c1p = (T)s[2], c2p = (T)s[3], eps = (T)s[4], wd = (T)s[5];                           \
        double sp = 0, sr = 0;                                                                       \
        for (int64_t i = b; i < e; i++) {                                                            \
            const T gi = g[i]; const T pi = p[i];                                                    \
            const T a = b1 * m1[i] + c1 * gi; const T bb = b2 * m2[i] + c2 * gi * gi;                \
            m1o[i] = a; m2o[i] = bb;                                                                 \
            const T r = LAMB_R(T, SQRT, a, bb, pi);                                                  \
            sp += (double)pi * (double)pi; sr += (double)r * (double)r;                              \
        }                                                                                            \
        *pn = sp; *rn = sr;                                                                          \
    }
LAMB_PASS1(lamb1_f32, float, sqrtf)
LAMB_PASS1(lamb1_f64, double, sqrt)

#define LAMB_PASS2(NAME, T, SQRT)                                                                    \
    static void NAME(T *po, const T *p, const T *m1, const T *m2, const double *s, double step_d, int64_t n, \
                     int nt) {                                                                       \
        const T c1p = (T)s[2], c2p = (T)s[3], eps = (T)s[4], wd = (T)s[5], step = (T)step_d;         \
        FOR_ELEMS(n, nt, const T pi = p[i]; po[i] = pi - step * LAMB_R(T, SQRT, m1[i], m2[i], pi););  \
    }
LAMB_PASS2(lamb2_f32, float, sqrtf)
LAMB_PASS2(lamb2_f64, double, sqrt)

void pe_cpu_lamb_param(pe_tensor *po, pe_tensor *m1o, pe_tensor *m2o, const pe_tensor *p, const pe_tensor *g,
                       const pe_tensor *m1, const pe_tensor *m2, double lr, double b1p, double b2p, double b1,
                       double b2, double eps, double wd, int nt) {
    const int64_t n = pe_tensor_numel(p);
    const bool f32 = p->dtype == PE_DTYPE_FP32;
    const double s[6] = {b1, b2, 1.0 - b1p, 1.0 - b2p, eps, wd};
    double pp[NORM_CHUNKS], rr[NORM_CHUNKS];
    const int chunks = n < OPT_PAR_MIN ? 1 : NORM_CHUNKS;
    #define LAMB_CHUNK(c)                                                                                \
        do {                                                                                             \
            int64_t b_ = n * (c) / chunks, e_ = n * ((c) + 1) / chunks;                                  \
            if (f32) lamb1_f32(pe_tensor_data(m1o), pe_tensor_data(m2o), pe_tensor_data(p), pe_tensor_data(g), \
                               pe_tensor_data(m1), pe_tensor_data(m2), s, b_, e_, &pp[c], &rr[c]);       \
            else lamb1_f64(pe_tensor_data(m1o), pe_tensor_data(m2o), pe_tensor_data(p), pe_tensor_data(g), \
                           pe_tensor_data(m1), pe_tensor_data(m2), s, b_, e_, &pp[c], &rr[c]);           \
        } while (0)
    if (chunks > 1 && nt > 1) {
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int c = 0; c < chunks; c++) LAMB_CHUNK(c);
    } else {
        for (int c = 0; c < chunks; c++) LAMB_CHUNK(c);
    }
    #undef LAMB_CHUNK
    double sp = 0, sr = 0;
    for (int c = 0; c < chunks; c++) {
        sp += pp[c];
        sr += rr[c];
    }
    const double pn = sqrt(sp), rn = sqrt(sr);
    const double step = lr * (pn > 0 && rn > 0 ? pn / rn : 1.0);
    if (f32) lamb2_f32(pe_tensor_data(po), pe_tensor_data(p), pe_tensor_data(m1o), pe_tensor_data(m2o), s, step, n, nt);
    else lamb2_f64(pe_tensor_data(po), pe_tensor_data(p), pe_tensor_data(m1o), pe_tensor_data(m2o), s, step, n, nt);
}

pe_status pe_cpu_lamb(const pe_op_ctx *ctx) {
    pe_tensor *b1po = pe_ctx_out(ctx, "Beta1PowOut"), *b2po = pe_ctx_out(ctx, "Beta2PowOut");
    double lr = pe_opt_scalar(pe_ctx_in(ctx, "LearningRate"));
    double b1p = pe_opt_scalar(pe_ctx_in(ctx, "Beta1Pow")), b2p = pe_opt_scalar(pe_ctx_in(ctx, "Beta2Pow"));
    double b1 = pe_ctx_float(ctx, "beta1"), b2 = pe_ctx_float(ctx, "beta2");
    PE_CHECK(check_pow(ctx, "Beta1Pow", b1p));
    PE_CHECK(check_pow(ctx, "Beta2Pow", b2p));
    pe_cpu_lamb_param(pe_ctx_out(ctx, "ParamOut"), pe_ctx_out(ctx, "Moment1Out"), pe_ctx_out(ctx, "Moment2Out"),
                      pe_ctx_in(ctx, "Param"), pe_ctx_in(ctx, "Grad"), pe_ctx_in(ctx, "Moment1"),
                      pe_ctx_in(ctx, "Moment2"), lr, b1p, b2p, b1, b2, pe_ctx_float(ctx, "epsilon"),
                      pe_ctx_float(ctx, "weight_decay"), pe_kernel_threads(ctx));
    if (b1po) pe_opt_set_scalar(b1po, b1p * b1);
    if (b2po) pe_opt_set_scalar(b2po, b2p * b2);
    return PE_OK;
}
