/* ops/cpu/activation.c — CPU kernels of leaky_relu, gelu, log_softmax,
 * dropout and their gradients (fp32 and fp64).
 *
 * How: element-wise loops generated per dtype by macros (the libm function
 * of the dtype: expf/exp, erff/erf, tanhf/tanh), forked over OpenMP threads
 * only for large tensors (ops/cpu/par.h). log_softmax views X as
 * [pre, D, post] around the axis like softmax (ops/cpu/reduce.c): rows when
 * post == 1, tiles of columns otherwise, sums in double in the order of D,
 * so results do not depend on the thread count.
 *
 * Formulas:
 *   leaky_relu  out = x > 0 ? x : alpha x         dx = x > 0 ? g : alpha g
 *   gelu        out = x/2 (1 + erf(x / sqrt 2))   dx = g (Phi(x) + x phi(x))
 *   gelu approx out = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
 *               dx = g (1/2 (1 + t) + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2)), t = tanh u
 *   log_softmax out = (x - max) - log sum exp(x - max)  dx = g - exp(out) sum_D g
 *   dropout     see ops/activation.c for the random stream; mask = u >= p
 *               with u a 32-bit uniform, train: out = x mask (downgrade_in_infer)
 *               or x mask / (1 - p) (upscale_in_train, 0 when p == 1);
 *               test: out = x (1 - p) or x. dx uses the same factors.
 */
#include "ops/cpu/par.h"
#include "ops/op.h"
#include "runtime/rng.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PE_ACT_TILE 256 /* log_softmax: columns of `post` handled together */

static pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

/* ---- leaky_relu / gelu: x [numel] -> out [numel]; grads from x ------------------ */

#define LEAKY(T, x, a) ((x) > 0 ? (x) : (T)(a) * (x))
#define LEAKY_G(T, x, g, a) ((x) > 0 ? (g) : (T)(a) * (g))

#define K_SQRT1_2 0.70710678118654752440     /* 1 / sqrt(2) */
#define K_INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi) */
#define K_SQRT_2_PI 0.79788456080286535588   /* sqrt(2 / pi) */
#define K_GELU_C 0.044715

#define ACT_FNS(SUF, T, ERF, EXP, TANH)                                                                \
    static inline T gelu_##SUF(T x, int approx) {                                                      \
        if (approx) {                                                                                  \
            const T u = (T)K_SQRT_2_PI * (x + (T)K_GELU_C * x * x * x);                                \
            return (T)0.5 * x * (1 + TANH(u));                                                         \
        }                                                                                              \
        return (T)0.5 * x * (1 + ERF(x * (T)K_SQRT1_2));                                               \
    }                                                                                                  \
    static inline T gelu_grad_##SUF(T x, T g, int approx) {                                            \
        if (approx) {                                                                                  \
            const T u = (T)K_SQRT_2_PI * (x + (T)K_GELU_C * x * x * x);                                \
            const T t = TANH(u);                                                                       \
            const T du = (T)K_SQRT_2_PI * (1 + 3 * (T)K_GELU_C * x * x);                               \
            return g * ((T)0.5 * (1 + t) + (T)0.5 * x * (1 - t * t) * du);                             \
        }                                                                                              \
        const T cdf = (T)0.5 * (1 + ERF(x * (T)K_SQRT1_2));                                            \
        const T pdf = (T)K_INV_SQRT_2PI * EXP((T)-0.5 * x * x);                                        \
        return g * (cdf + x * pdf);                                                                    \
    }                                                                                                  \
    static void leaky_##SUF(const T *x, T *out, int64_t n, double a, int nt) {                         \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, out[i] = LEAKY(T, x[i], a););                      \
    }                                                                                                  \
    static void leaky_grad_##SUF(const T *x, const T *g, T *dx, int64_t n, double a, int nt) {         \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, dx[i] = LEAKY_G(T, x[i], g[i], a););               \
    }                                                                                                  \
    static void gelu_loop_##SUF(const T *x, T *out, int64_t n, int approx, int nt) {                   \
        PE_PAR_FOR(n >= PE_PAR_MIN / 8 && nt > 1, i, n, out[i] = gelu_##SUF(x[i], approx););           \
    }                                                                                                  \
    static void gelu_grad_loop_##SUF(const T *x, const T *g, T *dx, int64_t n, int approx, int nt) {   \
        PE_PAR_FOR(n >= PE_PAR_MIN / 8 && nt > 1, i, n, dx[i] = gelu_grad_##SUF(x[i], g[i], approx);); \
    }
ACT_FNS(f32, float, erff, expf, tanhf)
ACT_FNS(f64, double, erf, exp, tanh)

/* X [..] -> Out [..] */
pe_status pe_cpu_leaky_relu(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n) return internal_mismatch(ctx);
    const double a = pe_ctx_float(ctx, "alpha");
    if (n == 0) return PE_OK;
    if (x->dtype == PE_DTYPE_FP32) leaky_f32(pe_tensor_data(x), pe_tensor_data(out), n, a, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64) leaky_f64(pe_tensor_data(x), pe_tensor_data(out), n, a, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

pe_status pe_cpu_gelu(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n) return internal_mismatch(ctx);
    const int approx = pe_ctx_bool(ctx, "approximate");
    if (n == 0) return PE_OK;
    if (x->dtype == PE_DTYPE_FP32) gelu_loop_f32(pe_tensor_data(x), pe_tensor_data(out), n, approx, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64) gelu_loop_f64(pe_tensor_data(x), pe_tensor_data(out), n, approx, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* X [..], Out@GRAD [..] -> X@GRAD [..] */
static pe_status x_grad_args(const pe_op_ctx *ctx, const pe_tensor **x, const pe_tensor **g, pe_tensor **dx) {
    *x = pe_ctx_in(ctx, "X");
    *g = pe_ctx_in(ctx, "Out@GRAD");
    *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(*x);
    if ((*g)->dtype != (*x)->dtype || (*dx)->dtype != (*x)->dtype || pe_tensor_numel(*g) != n ||
        pe_tensor_numel(*dx) != n)
        return internal_mismatch(ctx);
    if ((*x)->dtype != PE_DTYPE_FP32 && (*x)->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name((*x)->dtype));
    return PE_OK;
}

pe_status pe_cpu_leaky_relu_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x, *g;
    pe_tensor *dx;
    PE_CHECK(x_grad_args(ctx, &x, &g, &dx));
    const int64_t n = pe_tensor_numel(x);
    const double a = pe_ctx_float(ctx, "alpha");
    if (x->dtype == PE_DTYPE_FP32)
        leaky_grad_f32(pe_tensor_data(x), pe_tensor_data(g), pe_tensor_data(dx), n, a, ctx->num_threads);
    else
        leaky_grad_f64(pe_tensor_data(x), pe_tensor_data(g), pe_tensor_data(dx), n, a, ctx->num_threads);
    return PE_OK;
}

pe_status pe_cpu_gelu_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x, *g;
    pe_tensor *dx;
    PE_CHECK(x_grad_args(ctx, &x, &g, &dx));
    const int64_t n = pe_tensor_numel(x);
    const int approx = pe_ctx_bool(ctx, "approximate");
    if (x->dtype == PE_DTYPE_FP32)
        gelu_grad_loop_f32(pe_tensor_data(x), pe_tensor_data(g), pe_tensor_data(dx), n, approx, ctx->num_threads);
    else
        gelu_grad_loop_f64(pe_tensor_data(x), pe_tensor_data(g), pe_tensor_data(dx), n, approx, ctx->num_threads);
    return PE_OK;
}

/* ---- log_softmax along axis: x, out [pre, D, post] -------------------------------- */

#define LOG_SOFTMAX_LOOP(SUF, T, EXP, LOG)                                                                  \
    static void log_softmax_##SUF(const T *x, T *out, int64_t pre, int64_t D, int64_t post, int nt) {       \
        const int par = pre * D * post >= PE_PAR_MIN / 4 && nt > 1;                                         \
        if (post == 1) {                                                                                    \
            PE_PAR_FOR(par, p, pre, {                                                                       \
                const T *xr = x + p * D;                                                                    \
                T *orow = out + p * D;                                                                      \
                T m = xr[0];                                                                                \
                for (int64_t j = 1; j < D; j++) m = xr[j] > m ? xr[j] : m;                                  \
                double s = 0;                                                                               \
                for (int64_t j = 0; j < D; j++) s += EXP(xr[j] - m);                                        \
                const T ls = (T)LOG(s); /* (x - max) - log s: exact shift first */                          \
                for (int64_t j = 0; j < D; j++) orow[j] = (xr[j] - m) - ls;                                 \
            });                                                                                             \
            return;                                                                                         \
        }                                                                                                   \
        const int64_t ntc = (post + PE_ACT_TILE - 1) / PE_ACT_TILE;                                         \
        PE_PAR_FOR(par, pt, pre * ntc, {                                                                    \
            const int64_t p = pt / ntc, q0 = (pt % ntc) * PE_ACT_TILE;                                      \
            const int64_t w = post - q0 < PE_ACT_TILE ? post - q0 : PE_ACT_TILE;                            \
            const T *xb = x + p * D * post + q0;                                                            \
            T *ob = out + p * D * post + q0;                                                                \
            T m[PE_ACT_TILE];                                                                               \
            double s[PE_ACT_TILE];                                                                          \
            for (int64_t q = 0; q < w; q++) { m[q] = xb[q]; s[q] = 0; }                                     \
            for (int64_t j = 1; j < D; j++)                                                                 \
                for (int64_t q = 0; q < w; q++) m[q] = xb[j * post + q] > m[q] ? xb[j * post + q] : m[q];   \
            for (int64_t j = 0; j < D; j++)                                                                 \
                for (int64_t q = 0; q < w; q++) s[q] += EXP(xb[j * post + q] - m[q]);                       \
            for (int64_t q = 0; q < w; q++) s[q] = LOG(s[q]);                                               \
            for (int64_t j = 0; j < D; j++)                                                                 \
                for (int64_t q = 0; q < w; q++) ob[j * post + q] = (xb[j * post + q] - m[q]) - (T)s[q];     \
        });                                                                                                 \
    }                                                                                                       \
    /* dx = g - exp(out) * sum_D g */                                                                       \
    static void log_softmax_grad_##SUF(const T *o, const T *g, T *dx, int64_t pre, int64_t D, int64_t post, \
                                       int nt) {                                                            \
        const int par = pre * D * post >= PE_PAR_MIN / 4 && nt > 1;                                         \
        if (post == 1) {                                                                                    \
            PE_PAR_FOR(par, p, pre, {                                                                       \
                const T *orow = o + p * D, *grow = g + p * D;                                               \
                T *drow = dx + p * D;                                                                       \
                double s = 0;                                                                               \
                for (int64_t j = 0; j < D; j++) s += grow[j];                                               \
                for (int64_t j = 0; j < D; j++) drow[j] = grow[j] - EXP(orow[j]) * (T)s;                    \
            });                                                                                             \
            return;                                                                                         \
        }                                                                                                   \
        const int64_t ntc = (post + PE_ACT_TILE - 1) / PE_ACT_TILE;                                         \
        PE_PAR_FOR(par, pt, pre * ntc, {                                                                    \
            const int64_t p = pt / ntc, q0 = (pt % ntc) * PE_ACT_TILE;                                      \
            const int64_t w = post - q0 < PE_ACT_TILE ? post - q0 : PE_ACT_TILE;                            \
            const int64_t base = p * D * post + q0;                                                         \
            double s[PE_ACT_TILE];                                                                          \
            for (int64_t q = 0; q < w; q++) s[q] = 0;                                                       \
            for (int64_t j = 0; j < D; j++)                                                                 \
                for (int64_t q = 0; q < w; q++) s[q] += g[base + j * post + q];                             \
            for (int64_t j = 0; j < D; j++)                                                                 \
                for (int64_t q = 0; q < w; q++) {                                                           \
                    const int64_t i = base + j * post + q;                                                  \
                    dx[i] = g[i] - EXP(o[i]) * (T)s[q];                                                     \
                }                                                                                           \
        });                                                                                                 \
    }
LOG_SOFTMAX_LOOP(f32, float, expf, log)
LOG_SOFTMAX_LOOP(f64, double, exp, log)

static void axis_view(const pe_tensor *t, int64_t axis, int64_t *pre, int64_t *d, int64_t *post) {
    if (axis < 0) axis += t->ndim;
    *pre = pe_dims_prod(t->dims, 0, (int)axis);
    *d = t->dims[axis];
    *post = pe_dims_prod(t->dims, (int)axis + 1, t->ndim);
}

pe_status pe_cpu_log_softmax(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t axis = pe_ctx_int(ctx, "axis");
    if (out->dtype != x->dtype || pe_tensor_numel(out) != pe_tensor_numel(x) || axis < -x->ndim || axis >= x->ndim)
        return internal_mismatch(ctx);
    if (pe_tensor_numel(x) == 0) return PE_OK;
    int64_t pre, d, post;
    axis_view(x, axis, &pre, &d, &post);
    void *xd = pe_tensor_data(x), *od = pe_tensor_data(out);
    if (x->dtype == PE_DTYPE_FP32) log_softmax_f32(xd, od, pre, d, post, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64) log_softmax_f64(xd, od, pre, d, post, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

pe_status pe_cpu_log_softmax_grad(const pe_op_ctx *ctx) {
    const pe_tensor *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(o), axis = pe_ctx_int(ctx, "axis");
    if (g->dtype != o->dtype || dx->dtype != o->dtype || pe_tensor_numel(g) != n || pe_tensor_numel(dx) != n ||
        axis < -o->ndim || axis >= o->ndim)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    int64_t pre, d, post;
    axis_view(o, axis, &pre, &d, &post);
    if (o->dtype == PE_DTYPE_FP32)
        log_softmax_grad_f32(pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(dx), pre, d, post, ctx->num_threads);
    else if (o->dtype == PE_DTYPE_FP64)
        log_softmax_grad_f64(pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(dx), pre, d, post, ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(o->dtype));
    return PE_OK;
}

/* ---- dropout: x [numel] -> out [numel], mask [numel] uint8 ---------------------------- */

/* Element i is kept when word i % 4 of Philox block (i / 4, step) is >= thr. */
static void dropout_mask(uint64_t key, uint64_t step, uint64_t thr, uint8_t *mask, int64_t n, int nt) {
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    const int64_t nb = (n + 3) / 4;
    PE_PAR_FOR(n >= PE_PAR_MIN / 4 && nt > 1, b, nb, {
        const uint32_t c[4] = {(uint32_t)b, (uint32_t)((uint64_t)b >> 32), (uint32_t)step, (uint32_t)(step >> 32)};
        uint32_t w[4];
        pe_philox4x32_10(c, k, w);
        const int64_t e = 4 * b + 4 < n ? 4 : n - 4 * b;
        for (int64_t j = 0; j < e; j++) mask[4 * b + j] = (uint64_t)w[j] >= thr;
    });
}

/* Out = x * mask * factor (mask NULL: all kept). */
#define DROPOUT_APPLY(SUF, T)                                                                               \
    static void dropout_apply_##SUF(const T *x, const uint8_t *mask, T *out, int64_t n, double f, int nt) { \
        const T ft = (T)f;                                                                                  \
        const int par = n >= PE_PAR_MIN && nt > 1;                                                          \
        if (mask) PE_PAR_FOR(par, i, n, out[i] = mask[i] ? x[i] * ft : (T)0;);                              \
        else PE_PAR_FOR(par, i, n, out[i] = x[i] * ft;);                                                    \
    }
DROPOUT_APPLY(f32, float)
DROPOUT_APPLY(f64, double)

/* The factor kept elements are multiplied by (train) or every element (test). */
static double dropout_factor(const pe_op_ctx *ctx, bool is_test) {
    const double p = pe_ctx_float(ctx, "dropout_prob");
    const bool upscale = !strcmp(pe_ctx_string(ctx, "dropout_implementation"), "upscale_in_train");
    if (is_test) return upscale ? 1.0 : 1.0 - p;
    return upscale ? (p < 1 ? 1.0 / (1.0 - p) : 0.0) : 1.0;
}

static pe_status apply(const pe_op_ctx *ctx, const pe_tensor *x, const uint8_t *mask, pe_tensor *out, double f) {
    const int64_t n = pe_tensor_numel(x);
    void *xd = pe_tensor_data(x), *od = pe_tensor_data(out);
    if (x->dtype == PE_DTYPE_FP32) dropout_apply_f32(xd, mask, od, n, f, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64) dropout_apply_f64(xd, mask, od, n, f, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* X [..], Step? [1] -> Out [..], Mask? [..] uint8, StepOut? [1] = Step + 1 (training) */
pe_status pe_cpu_dropout(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *step_in = pe_ctx_in(ctx, "Step");
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *mask = pe_ctx_out(ctx, "Mask"), *step_out = pe_ctx_out(ctx, "StepOut");
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n || (mask && pe_tensor_numel(mask) != n))
        return internal_mismatch(ctx);
    const bool is_test = pe_ctx_bool(ctx, "is_test");
    uint64_t step = 0;
    if (step_in)
        step = step_in->dtype == PE_DTYPE_INT64 ? (uint64_t) * (const int64_t *)pe_tensor_data(step_in)
                                                : (uint64_t)(int64_t) * (const int32_t *)pe_tensor_data(step_in);
    if (is_test) {
        if (mask && n) memset(pe_tensor_data(mask), 1, (size_t)n);
        if (step_out && step_out != step_in)
            memcpy(pe_tensor_data(step_out), pe_tensor_data(step_in), pe_tensor_nbytes(step_in));
        return n ? apply(ctx, x, NULL, out, dropout_factor(ctx, true)) : PE_OK;
    }
    if (n && !mask)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "output Mask is required in training mode (is_test = false)");
    if (n) {
        const double p = pe_ctx_float(ctx, "dropout_prob");
        const double t = ceil(p * 4294967296.0);
        const uint64_t thr = t >= 4294967296.0 ? UINT64_C(4294967296) : (uint64_t)t;
        const int64_t seed = pe_ctx_bool(ctx, "fix_seed") ? pe_ctx_int(ctx, "seed") : 0;
        /* Each place draws its own stream (place 0 keeps the one-place
         * stream): data-parallel replicas must not share one mask pattern. */
        const uint64_t key = pe_rng_key(ctx->program_seed, seed, pe_ctx_out_name(ctx, "Out", 0)) ^
                             (uint64_t)ctx->place.id * UINT64_C(0x9E3779B97F4A7C15);
        uint8_t *m = pe_tensor_data(mask);
        dropout_mask(key, step, thr, m, n, ctx->num_threads);
        PE_CHECK(apply(ctx, x, m, out, dropout_factor(ctx, false)));
    }
    if (step_out) {
        if (step_out->dtype == PE_DTYPE_INT64) *(int64_t *)pe_tensor_data(step_out) = (int64_t)(step + 1);
        else *(int32_t *)pe_tensor_data(step_out) = (int32_t)(uint32_t)(step + 1);
    }
    return PE_OK;
}

/* Mask? [..], Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_cpu_dropout_grad(const pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD"), *mask = pe_ctx_in(ctx, "Mask");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(g);
    const bool is_test = pe_ctx_bool(ctx, "is_test");
    if (dx->dtype != g->dtype || pe_tensor_numel(dx) != n || (!is_test && (!mask || pe_tensor_numel(mask) != n)))
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    return apply(ctx, g, is_test ? NULL : pe_tensor_data(mask), dx, dropout_factor(ctx, is_test));
}
