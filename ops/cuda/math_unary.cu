/* ops/cuda/math_unary.cu — CUDA kernels of the elementwise math ops and the
 * later activations and their gradients (fp32 and fp64, the CPU kernels'
 * dtypes): exp, log, sqrt, rsqrt, square, abs, sign, floor, ceil, round,
 * pow, clip, relu6, elu, softplus, swish, hard_sigmoid, selu (formulas and
 * which tensor each grad op reads: ops/cpu/math_unary.c).
 *
 * How: one functor per op below, a row of the CPU table: fwd(v = x[i], a, b)
 * and grad(v, g = dout[i], a, b), where a and b are the op's (at most two)
 * float attrs rounded to the element type on the host, and v of the grad is
 * the element of the tensor the grad op reads (X, Out, or Out@GRAD itself
 * for floor/ceil/round). Each expression is the CPU one operation for
 * operation, in the same order and element type (the float libm functions
 * for fp32, as <tgmath.h> picks them on the CPU); every sum whose operand is
 * a product or a libm result is rounded separately (__fadd_rn and friends)
 * so nvcc cannot contract it into an FMA the CPU does not do. One
 * grid-stride kernel per direction serves every op; Out may alias X and
 * X@GRAD may alias Out@GRAD (ops.def's in-place pairs): each element is read
 * before it is written by the same thread.
 *
 * Why: the CPU kernels are the reference (tests/ops compare the places), so
 * the device computes the same formulas rather than cheaper equivalents; the
 * remaining differences are the device libm's (expf, powf, ...: within a few
 * ulp of glibc's).
 */
#include "ops/cuda/cuda_ops.h"

namespace {

/* ---- separately rounded arithmetic and the libm of the element type ----- */

__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }

__device__ inline float m_exp(float v) { return expf(v); }
__device__ inline double m_exp(double v) { return exp(v); }
__device__ inline float m_log(float v) { return logf(v); }
__device__ inline double m_log(double v) { return log(v); }
__device__ inline float m_sqrt(float v) { return sqrtf(v); }
__device__ inline double m_sqrt(double v) { return sqrt(v); }
__device__ inline float m_fabs(float v) { return fabsf(v); }
__device__ inline double m_fabs(double v) { return fabs(v); }
__device__ inline float m_floor(float v) { return floorf(v); }
__device__ inline double m_floor(double v) { return floor(v); }
__device__ inline float m_ceil(float v) { return ceilf(v); }
__device__ inline double m_ceil(double v) { return ceil(v); }
__device__ inline float m_round(float v) { return roundf(v); } /* half away from 0, as C's round */
__device__ inline double m_round(double v) { return round(v); }
__device__ inline float m_pow(float v, float e) { return powf(v, e); }
__device__ inline double m_pow(double v, double e) { return pow(v, e); }
__device__ inline float m_expm1(float v) { return expm1f(v); }
__device__ inline double m_expm1(double v) { return expm1(v); }
__device__ inline float m_log1p(float v) { return log1pf(v); }
__device__ inline double m_log1p(double v) { return log1p(v); }

/* The CPU's SIGN(v): 1, -1 or 0 (0 for 0 and NaN). */
template <typename T> __device__ inline T sign_of(T v) { return (T)(v > (T)0) - (T)(v < (T)0); }
/* The CPU's CLAMP(v, lo, hi): NaN passes through. */
template <typename T> __device__ inline T clamp(T v, T lo, T hi) { return v < lo ? lo : v > hi ? hi : v; }
/* The CPU's SIGMOID(u) = 1 / (1 + e^-u). */
template <typename T> __device__ inline T sigmoid(T u) { return (T)1 / add_rn((T)1, m_exp(-u)); }

/* ---- the table: out = fwd(v = x, a, b); dx = grad(v, g, a, b) ----------- */

struct op_exp {
    template <typename T> __device__ static T fwd(T v, T, T) { return m_exp(v); }
    template <typename T> __device__ static T grad(T v, T g, T, T) { return g * v; } /* v = Out */
};
struct op_log {
    template <typename T> __device__ static T fwd(T v, T, T) { return m_log(v); }
    template <typename T> __device__ static T grad(T v, T g, T, T) { return g / v; } /* v = X */
};
struct op_sqrt {
    template <typename T> __device__ static T fwd(T v, T, T) { return m_sqrt(v); }
    template <typename T> __device__ static T grad(T v, T g, T, T) { return (T)0.5 * g / v; } /* v = Out */
};
struct op_rsqrt {
    template <typename T> __device__ static T fwd(T v, T, T) { return (T)1 / m_sqrt(v); }
    template <typename T> __device__ static T grad(T v, T g, T, T) { return (T)-0.5 * g * v * v * v; } /* v = Out */
};
struct op_square {
    template <typename T> __device__ static T fwd(T v, T, T) { return v * v; }
    template <typename T> __device__ static T grad(T v, T g, T, T) { return g * (T)2 * v; } /* v = X */
};
struct op_abs {
    template <typename T> __device__ static T fwd(T v, T, T) { return m_fabs(v); }
    template <typename T> __device__ static T grad(T v, T g, T, T) { return g * sign_of(v); } /* v = X */
};
struct op_sign {
    template <typename T> __device__ static T fwd(T v, T, T) { return sign_of(v); }
};
/* floor, ceil, round: dx = 0 g (NaN where g is NaN or inf, as on the CPU) */
struct op_floor {
    template <typename T> __device__ static T fwd(T v, T, T) { return m_floor(v); }
    template <typename T> __device__ static T grad(T, T g, T, T) { return (T)0 * g; }
};
struct op_ceil {
    template <typename T> __device__ static T fwd(T v, T, T) { return m_ceil(v); }
    template <typename T> __device__ static T grad(T, T g, T, T) { return (T)0 * g; }
};
struct op_round {
    template <typename T> __device__ static T fwd(T v, T, T) { return m_round(v); }
    template <typename T> __device__ static T grad(T, T g, T, T) { return (T)0 * g; }
};
/* a = factor */
struct op_pow {
    template <typename T> __device__ static T fwd(T v, T a, T) { return m_pow(v, a); }
    template <typename T> __device__ static T grad(T v, T g, T a, T) { return g * a * m_pow(v, a - (T)1); } /* v = X */
};
/* a = min, b = max */
struct op_clip {
    template <typename T> __device__ static T fwd(T v, T a, T b) { return clamp(v, a, b); }
    template <typename T> __device__ static T grad(T v, T g, T a, T b) { return v > a && v < b ? g : (T)0; } /* v = X */
};
/* a = threshold */
struct op_relu6 {
    template <typename T> __device__ static T fwd(T v, T a, T) { return clamp(v, (T)0, a); }
    template <typename T> __device__ static T grad(T v, T g, T a, T) { return v > (T)0 && v < a ? g : (T)0; } /* v = Out */
};
/* a = alpha */
struct op_elu {
    template <typename T> __device__ static T fwd(T v, T a, T) { return v > (T)0 ? v : a * m_expm1(v); }
    template <typename T> __device__ static T grad(T v, T g, T a, T) { return v > (T)0 ? g : g * a * m_exp(v); } /* v = X */
};
/* a = beta, b = threshold */
struct op_softplus {
    template <typename T> __device__ static T fwd(T v, T a, T b) {
        return v * a > b ? v : m_log1p(m_exp(v * a)) / a;
    }
    template <typename T> __device__ static T grad(T v, T g, T a, T b) { /* v = X */
        return v * a > b ? g : g * sigmoid(v * a);
    }
};
/* a = beta; dx = g s (1 + beta x (1 - s)), s = sigmoid(beta x) */
struct op_swish {
    template <typename T> __device__ static T fwd(T v, T a, T) { return v * sigmoid(a * v); }
    template <typename T> __device__ static T grad(T v, T g, T a, T) { /* v = X */
        const T s = sigmoid(a * v);
        return g * s * add_rn((T)1, mul_rn(a * v, (T)1 - s));
    }
};
/* a = slope, b = offset */
struct op_hard_sigmoid {
    template <typename T> __device__ static T fwd(T v, T a, T b) { return clamp(add_rn(mul_rn(a, v), b), (T)0, (T)1); }
    template <typename T> __device__ static T grad(T v, T g, T a, T) { return v > (T)0 && v < (T)1 ? g * a : (T)0; } /* v = Out */
};
/* a = scale, b = alpha */
struct op_selu {
    template <typename T> __device__ static T fwd(T v, T a, T b) { return v > (T)0 ? a * v : a * b * m_expm1(v); }
    template <typename T> __device__ static T grad(T v, T g, T a, T b) { /* v = Out */
        return v > (T)0 ? g * a : g * add_rn(v, mul_rn(a, b));
    }
};

/* x, out: [n] */
template <typename T, typename Op> __global__ void k_fwd(const T *x, T *out, int64_t n, T a, T b) {
    PE_CUDA_LOOP(i, n) out[i] = Op::template fwd<T>(x[i], a, b);
}

/* v, g, dx: [n] */
template <typename T, typename Op> __global__ void k_grad(const T *v, const T *g, T *dx, int64_t n, T a, T b) {
    PE_CUDA_LOOP(i, n) dx[i] = Op::template grad<T>(v[i], g[i], a, b);
}

/* ---- host side ----------------------------------------------------------- */

pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

double attr_or_0(const pe_op_ctx *ctx, const char *name) { return name ? pe_ctx_float(ctx, name) : 0.0; }

/* X [..] -> Out [..]; a, b: the values of attrs an, bn (NULL: unused) */
template <typename Op> pe_status mu_fwd(const pe_op_ctx *ctx, const char *an, const char *bn) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n) return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    const double a = attr_or_0(ctx, an), b = attr_or_0(ctx, bn);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_fwd<T, Op><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
            (const T *)pe_tensor_data(x), (T *)pe_tensor_data(out), n, (T)a, (T)b));
    return pe_cuda_check_launch(ctx);
}

/* vslot [..] (X or Out; NULL: none, v = Out@GRAD), Out@GRAD [..] -> X@GRAD [..] */
template <typename Op> pe_status mu_grad(const pe_op_ctx *ctx, const char *vslot, const char *an, const char *bn) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD"), *v = vslot ? pe_ctx_in(ctx, vslot) : g;
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(g);
    if (!v || v->dtype != g->dtype || dx->dtype != g->dtype || pe_tensor_numel(v) != n || pe_tensor_numel(dx) != n)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    const double a = attr_or_0(ctx, an), b = attr_or_0(ctx, bn);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, g->dtype, "Out@GRAD", T,
        k_grad<T, Op><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
            (const T *)pe_tensor_data(v), (const T *)pe_tensor_data(g), (T *)pe_tensor_data(dx), n, (T)a, (T)b));
    return pe_cuda_check_launch(ctx);
}

} // namespace

/* The kernels of one op (forward only: sign) and of its grad op reading VSLOT. */
#define MU_CUDA_FWD(NAME, AN, BN) \
    extern "C" pe_status pe_cuda_##NAME(const pe_op_ctx *ctx) { return mu_fwd<op_##NAME>(ctx, AN, BN); }
#define MU_CUDA_OP(NAME, AN, BN, VSLOT)                                                                       \
    MU_CUDA_FWD(NAME, AN, BN)                                                                                 \
    extern "C" pe_status pe_cuda_##NAME##_grad(const pe_op_ctx *ctx) {                                        \
        return mu_grad<op_##NAME>(ctx, VSLOT, AN, BN);                                                        \
    }

/*         op            attr a       attr b       grad reads */
MU_CUDA_OP(exp,          NULL,        NULL,        "Out")
MU_CUDA_OP(log,          NULL,        NULL,        "X")
MU_CUDA_OP(sqrt,         NULL,        NULL,        "Out")
MU_CUDA_OP(rsqrt,        NULL,        NULL,        "Out")
MU_CUDA_OP(square,       NULL,        NULL,        "X")
MU_CUDA_OP(abs,          NULL,        NULL,        "X")
MU_CUDA_FWD(sign,        NULL,        NULL)
MU_CUDA_OP(floor,        NULL,        NULL,        NULL)
MU_CUDA_OP(ceil,         NULL,        NULL,        NULL)
MU_CUDA_OP(round,        NULL,        NULL,        NULL)
MU_CUDA_OP(pow,          "factor",    NULL,        "X")
MU_CUDA_OP(clip,         "min",       "max",       "X")
MU_CUDA_OP(relu6,        "threshold", NULL,        "Out")
MU_CUDA_OP(elu,          "alpha",     NULL,        "X")
MU_CUDA_OP(softplus,     "beta",      "threshold", "X")
MU_CUDA_OP(swish,        "beta",      NULL,        "X")
MU_CUDA_OP(hard_sigmoid, "slope",     "offset",    "Out")
MU_CUDA_OP(selu,         "scale",     "alpha",     "Out")
