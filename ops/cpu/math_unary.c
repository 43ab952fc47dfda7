/* ops/cpu/math_unary.c — CPU kernels of the elementwise math ops and the
 * later activations and their gradients (fp32 and fp64): exp, log, sqrt,
 * rsqrt, square, abs, sign, floor, ceil, round, pow, clip, relu6, elu,
 * softplus, swish, hard_sigmoid, selu (shape inference: ops/math_unary.c).
 *
 * How: one table below, a row per op: its (at most two) float attrs a and b,
 * the forward expression of v = x[i], and the gradient expression of g =
 * dout[i] and v = the element of the input the grad op reads (X or Out, as
 * in Paddle: ops.def wires it). Each row expands to fp32 and fp64 loops
 * forked over OpenMP threads only for large tensors (ops/cpu/par.h) and to
 * the kernels pe_cpu_<op> and pe_cpu_<op>_grad; <tgmath.h> picks the libm
 * function of the element type (expf for float, exp for double), so one
 * expression serves both dtypes and fp64 never goes through fp32.
 *
 * Formulas (Paddle 2.x's functors; the attrs' defaults are in ops.def):
 *   exp        out = e^x                      dx = g out
 *   log        out = ln x                     dx = g / x
 *   sqrt       out = sqrt x                   dx = g / (2 out)
 *   rsqrt      out = 1 / sqrt x               dx = -g out^3 / 2
 *   square     out = x^2                      dx = 2 g x
 *   abs        out = |x|                      dx = g sign(x)
 *   sign       out = sign(x) (0 at 0)         dx: a scale op by 0 (ops/math_unary.c)
 *   floor, ceil, round (half away from 0)     dx = 0 g
 *   pow        out = x^factor                 dx = g factor x^(factor - 1)
 *   clip       out = min(max(x, min), max)    dx = min < x < max ? g : 0
 *   relu6      out = min(max(x, 0), threshold)  dx = 0 < out < threshold ? g : 0
 *   elu        out = x > 0 ? x : alpha (e^x - 1)  dx = x > 0 ? g : g alpha e^x
 *   softplus   out = beta x > threshold ? x : ln(1 + e^(beta x)) / beta
 *              dx = beta x > threshold ? g : g sigmoid(beta x)
 *   swish      out = x s, s = sigmoid(beta x) dx = g (beta out + s (1 - beta out)) = g s (1 + beta x (1 - s))
 *   hard_sigmoid out = min(max(slope x + offset, 0), 1)  dx = 0 < out < 1 ? g slope : 0
 *   selu       out = scale (x > 0 ? x : alpha (e^x - 1))
 *              dx = out > 0 ? g scale : g (out + scale alpha)
 */
#include "ops/cpu/par.h"
#include "ops/op.h"

#include <stdint.h>
#include <tgmath.h>

typedef void (*mu_fwd_fn)(const void *x, void *out, int64_t n, double a, double b, int nt);
typedef void (*mu_grad_fn)(const void *v, const void *g, void *dx, int64_t n, double a, double b, int nt);

static pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

static double attr_or_0(const pe_op_ctx *ctx, const char *name) { return name ? pe_ctx_float(ctx, name) : 0.0; }

/* X [..] -> Out [..]; a, b: the values of attrs an, bn (NULL: unused) */
static pe_status mu_fwd(const pe_op_ctx *ctx, const char *an, const char *bn, mu_fwd_fn f32, mu_fwd_fn f64) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n) return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    mu_fwd_fn f = x->dtype == PE_DTYPE_FP32 ? f32 : x->dtype == PE_DTYPE_FP64 ? f64 : NULL;
    if (!f) return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    f(pe_tensor_data(x), pe_tensor_data(out), n, attr_or_0(ctx, an), attr_or_0(ctx, bn), ctx->num_threads);
    return PE_OK;
}

/* vslot [..] (X or Out; NULL: none), Out@GRAD [..] -> X@GRAD [..] */
static pe_status mu_grad(const pe_op_ctx *ctx, const char *vslot, const char *an, const char *bn, mu_grad_fn f32,
                         mu_grad_fn f64) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD"), *v = vslot ? pe_ctx_in(ctx, vslot) : g;
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(g);
    if (!v || v->dtype != g->dtype || dx->dtype != g->dtype || pe_tensor_numel(v) != n || pe_tensor_numel(dx) != n)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    mu_grad_fn f = g->dtype == PE_DTYPE_FP32 ? f32 : g->dtype == PE_DTYPE_FP64 ? f64 : NULL;
    if (!f) return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(g->dtype));
    f(pe_tensor_data(v), pe_tensor_data(g), pe_tensor_data(dx), n, attr_or_0(ctx, an), attr_or_0(ctx, bn),
      ctx->num_threads);
    return PE_OK;
}

/* The loops of one op for element type T (named `real` in the expressions). */
#define MU_FWD_LOOP(NAME, SUF, T, FWD)                                                               \
    static void NAME##_##SUF(const void *xp, void *op, int64_t n, double a_, double b_, int nt) {    \
        typedef T real;                                                                              \
        const real *x = xp;                                                                          \
        real *out = op;                                                                              \
        const real a = (real)a_, b = (real)b_;                                                       \
        (void)a, (void)b;                                                                            \
        PE_PAR_FOR(n >= PE_PAR_MIN / 4 && nt > 1, i, n, {                                            \
            const real v = x[i];                                                                     \
            out[i] = (real)(FWD);                                                                    \
        });                                                                                          \
    }
#define MU_GRAD_LOOP(NAME, SUF, T, GRAD)                                                                       \
    static void NAME##_grad_##SUF(const void *vp, const void *gp, void *dp, int64_t n, double a_, double b_,   \
                                  int nt) {                                                                    \
        typedef T real;                                                                                        \
        const real *vv = vp, *gg = gp;                                                                         \
        real *dx = dp;                                                                                         \
        const real a = (real)a_, b = (real)b_;                                                                 \
        (void)a, (void)b;                                                                                      \
        PE_PAR_FOR(n >= PE_PAR_MIN / 4 && nt > 1, i, n, {                                                      \
            const real v = vv[i], g = gg[i];                                                                   \
            (void)v;                                                                                           \
            dx[i] = (real)(GRAD);                                                                              \
        });                                                                                                    \
    }

/* An op without a grad kernel (sign): forward only. */
#define MU_FWD_OP(NAME, AN, BN, FWD)                                                                          \
    MU_FWD_LOOP(NAME, f32, float, FWD)                                                                        \
    MU_FWD_LOOP(NAME, f64, double, FWD)                                                                       \
    pe_status pe_cpu_##NAME(const pe_op_ctx *ctx) { return mu_fwd(ctx, AN, BN, NAME##_f32, NAME##_f64); }

/* An op and its grad op reading VSLOT ("X", "Out" or NULL: only Out@GRAD). */
#define MU_OP(NAME, AN, BN, FWD, VSLOT, GRAD)                                                                 \
    MU_FWD_OP(NAME, AN, BN, FWD)                                                                              \
    MU_GRAD_LOOP(NAME, f32, float, GRAD)                                                                      \
    MU_GRAD_LOOP(NAME, f64, double, GRAD)                                                                     \
    pe_status pe_cpu_##NAME##_grad(const pe_op_ctx *ctx) {                                                    \
        return mu_grad(ctx, VSLOT, AN, BN, NAME##_grad_f32, NAME##_grad_f64);                                 \
    }

#define SIGN(v) ((real)((v) > 0) - (real)((v) < 0))
#define CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))
#define SIGMOID(u) (1 / (1 + exp(-(u))))

/*     op            attr a       attr b       out = f(v = x)                       grad reads  dx = f(v, g) */
MU_OP(exp,          NULL,        NULL,        exp(v),                              "Out", g * v)
MU_OP(log,          NULL,        NULL,        log(v),                              "X",   g / v)
MU_OP(sqrt,         NULL,        NULL,        sqrt(v),                             "Out", (real)0.5 * g / v)
MU_OP(rsqrt,        NULL,        NULL,        1 / sqrt(v),                         "Out", (real)-0.5 * g * v * v * v)
MU_OP(square,       NULL,        NULL,        v * v,                               "X",   g * 2 * v)
MU_OP(abs,          NULL,        NULL,        fabs(v),                             "X",   g * SIGN(v))
MU_FWD_OP(sign,     NULL,        NULL,        SIGN(v))
MU_OP(floor,        NULL,        NULL,        floor(v),                            NULL,  0 * g)
MU_OP(ceil,         NULL,        NULL,        ceil(v),                             NULL,  0 * g)
MU_OP(round,        NULL,        NULL,        round(v),                            NULL,  0 * g)
MU_OP(pow,          "factor",    NULL,        pow(v, a),                           "X",   g * a * pow(v, a - 1))
MU_OP(clip,         "min",       "max",       CLAMP(v, a, b),                      "X",   v > a && v < b ? g : 0)
MU_OP(relu6,        "threshold", NULL,        CLAMP(v, 0, a),                      "Out", v > 0 && v < a ? g : 0)
MU_OP(elu,          "alpha",     NULL,        v > 0 ? v : a * expm1(v),            "X",   v > 0 ? g : g * a * exp(v))
MU_OP(softplus,     "beta",      "threshold", v * a > b ? v : log1p(exp(v * a)) / a,
                                                                                   "X",   v * a > b ? g : g * SIGMOID(v * a))
MU_OP(swish,        "beta",      NULL,        v * SIGMOID(a * v),                  "X",
      g * SIGMOID(a * v) * (1 + a * v * (1 - SIGMOID(a * v))))
MU_OP(hard_sigmoid, "slope",     "offset",    CLAMP(a * v + b, 0, 1),              "Out", v > 0 && v < 1 ? g * a : 0)
MU_OP(selu,         "scale",     "alpha",     v > 0 ? a * v : a * b * expm1(v),    "Out",
      v > 0 ? g * a : g * (v + a * b))
