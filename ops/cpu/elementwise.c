/* ops/cpu/elementwise.c — CPU kernels of the elementwise family:
 * elementwise_{add,sub,mul,div} with Paddle broadcasting, relu, sigmoid,
 * tanh, scale and cast.
 *
 * How: the binary ops build the broadcast plan of ops/elementwise.h and run
 * one of five loops (same shape, scalar Y, row bias [N,D]+[D], channel bias
 * [N,C,HW]+[C], general strided); each loop is a plain contiguous loop the
 * compiler vectorizes, split over ctx->num_threads OpenMP threads once the
 * output is large enough to pay for the fork. The loops are generated per
 * dtype by macros so fp32/fp64/int32/int64 share one source of truth.
 *
 * Defined results where C leaves behaviour undefined (so no input crashes):
 *  - integer add/sub/mul wrap around (two's complement), as numpy and torch;
 *  - integer division truncates toward zero (C, Paddle); x / 0 == 0 for
 *    integers, and INT_MIN / -1 wraps to INT_MIN;
 *  - scale on integers casts scale and bias to the integer type first
 *    (Paddle's kernel: scale 2.5 acts as 2);
 *  - cast float -> int truncates toward zero; NaN -> 0, values beyond the
 *    target range saturate (float -> uint8 goes through int64, then wraps
 *    modulo 256 like numpy on x86); int -> narrower int wraps; -> bool is
 *    x != 0 (NaN -> true); bool inputs read any non-zero byte as 1.
 * Float ops follow IEEE: x / 0.0 is +-inf or NaN, relu(NaN) = NaN.
 */
#include "ops/elementwise.h"
#include "ops/op.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Below this many output elements loops stay on the calling thread. */
#define PE_EW_PAR_MIN 32768

/* ---- scalar ops per dtype ------------------------------------------------ */

#define FADD(a, b) ((a) + (b))
#define FSUB(a, b) ((a) - (b))
#define FMUL(a, b) ((a) * (b))
#define FDIV(a, b) ((a) / (b))

static inline int32_t add_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static inline int32_t sub_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static inline int32_t mul_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
static inline int32_t div_i32(int32_t a, int32_t b) {
    return b == 0 ? 0 : b == -1 ? (int32_t)(0u - (uint32_t)a) : a / b;
}
static inline int64_t add_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t sub_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t mul_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t div_i64(int64_t a, int64_t b) {
    return b == 0 ? 0 : b == -1 ? (int64_t)(UINT64_C(0) - (uint64_t)a) : a / b;
}

/* ---- binary loops ---------------------------------------------------------- */

/* One function per (op, dtype): runs the plan's loop with OP(a, b). */
#define EW_BINARY(NAME, T, OP)                                                                  \
    static void NAME(const pe_bcast_plan *pl, const void *xv, const void *yv, void *ov, int nt) { \
        const T *x = xv, *y = yv;                                                                \
        T *out = ov;                                                                             \
        const int64_t numel = pl->numel;                                                         \
        const int par = numel > PE_EW_PAR_MIN;                                                   \
        switch (pl->kind) {                                                                      \
        case PE_BCAST_SAME: { /* x, y, out: [numel] */                                           \
            _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")                 \
            for (int64_t i = 0; i < numel; i++) out[i] = OP(x[i], y[i]);                         \
            break;                                                                               \
        }                                                                                        \
        case PE_BCAST_SCALAR_Y: { /* x, out: [numel]; y: [1] */                                  \
            const T b = y[0];                                                                    \
            _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")                 \
            for (int64_t i = 0; i < numel; i++) out[i] = OP(x[i], b);                            \
            break;                                                                               \
        }                                                                                        \
        case PE_BCAST_ROW: { /* x, out: [pre, n]; y: [n] */                                      \
            const int64_t pre = pl->pre, n = pl->n;                                              \
            _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")                 \
            for (int64_t r = 0; r < pre; r++) {                                                  \
                const T *xr = x + r * n;                                                         \
                T *orow = out + r * n;                                                           \
                for (int64_t c = 0; c < n; c++) orow[c] = OP(xr[c], y[c]);                       \
            }                                                                                    \
            break;                                                                               \
        }                                                                                        \
        case PE_BCAST_MID: { /* x, out: [pre, n, post]; y: [n] */                                \
            const int64_t n = pl->n, post = pl->post, rows = pl->pre * pl->n;                    \
            _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")                 \
            for (int64_t rc = 0; rc < rows; rc++) {                                              \
                const T b = y[rc % n];                                                           \
                const T *xr = x + rc * post;                                                     \
                T *orow = out + rc * post;                                                       \
                for (int64_t k = 0; k < post; k++) orow[k] = OP(xr[k], b);                       \
            }                                                                                    \
            break;                                                                               \
        }                                                                                        \
        default: { /* general: out [dims...], strided reads, rows of the last dim */             \
            const int nd = pl->ndim;                                                             \
            const int64_t inner = pl->dims[nd - 1];                                              \
            const int64_t xs = pl->x_strides[nd - 1], ys = pl->y_strides[nd - 1];                \
            const int64_t rows = inner ? numel / inner : 0;                                      \
            _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")                 \
            for (int64_t r = 0; r < rows; r++) {                                                 \
                int64_t xo = 0, yo = 0, rem = r;                                                 \
                for (int d = nd - 2; d >= 0; d--) {                                              \
                    const int64_t i = rem % pl->dims[d];                                         \
                    rem /= pl->dims[d];                                                          \
                    xo += i * pl->x_strides[d];                                                  \
                    yo += i * pl->y_strides[d];                                                  \
                }                                                                                \
                const T *xr = x + xo, *yr = y + yo;                                              \
                T *orow = out + r * inner;                                                       \
                if (xs == 1 && ys == 1)                                                          \
                    for (int64_t j = 0; j < inner; j++) orow[j] = OP(xr[j], yr[j]);              \
                else if (xs == 1 && ys == 0)                                                     \
                    for (int64_t j = 0; j < inner; j++) orow[j] = OP(xr[j], yr[0]);              \
                else if (xs == 0 && ys == 1)                                                     \
                    for (int64_t j = 0; j < inner; j++) orow[j] = OP(xr[0], yr[j]);              \
                else                                                                             \
                    for (int64_t j = 0; j < inner; j++) orow[j] = OP(xr[j * xs], yr[j * ys]);    \
            }                                                                                    \
            break;                                                                               \
        }                                                                                        \
        }                                                                                        \
    }

EW_BINARY(add_f32, float, FADD)
EW_BINARY(sub_f32, float, FSUB)
EW_BINARY(mul_f32, float, FMUL)
EW_BINARY(div_f32, float, FDIV)
EW_BINARY(add_f64, double, FADD)
EW_BINARY(sub_f64, double, FSUB)
EW_BINARY(mul_f64, double, FMUL)
EW_BINARY(div_f64, double, FDIV)
EW_BINARY(add_s32, int32_t, add_i32)
EW_BINARY(sub_s32, int32_t, sub_i32)
EW_BINARY(mul_s32, int32_t, mul_i32)
EW_BINARY(div_s32, int32_t, div_i32)
EW_BINARY(add_s64, int64_t, add_i64)
EW_BINARY(sub_s64, int64_t, sub_i64)
EW_BINARY(mul_s64, int64_t, mul_i64)
EW_BINARY(div_s64, int64_t, div_i64)

typedef void (*ew_binary_fn)(const pe_bcast_plan *, const void *, const void *, void *, int);
enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV };

/* [dtype][op]; rows follow pe_dtype FP32, FP64, INT32, INT64. */
static const ew_binary_fn k_binary[4][4] = {
    {add_f32, sub_f32, mul_f32, div_f32},
    {add_f64, sub_f64, mul_f64, div_f64},
    {add_s32, sub_s32, mul_s32, div_s32},
    {add_s64, sub_s64, mul_s64, div_s64},
};

static pe_status ew_binary(const pe_op_ctx *ctx, int op) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    pe_bcast_plan pl;
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s", pe_last_error());
    if (x->dtype > PE_DTYPE_INT64 || y->dtype != x->dtype || out->dtype != x->dtype ||
        pe_tensor_numel(out) != pl.numel)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (pl.numel == 0) return PE_OK;
    k_binary[x->dtype][op](&pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), ctx->num_threads);
    return PE_OK;
}

/* X [..], Y [..] -> Out [broadcast]; see ops/elementwise.h. */
pe_status pe_cpu_elementwise_add(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_ADD); }
pe_status pe_cpu_elementwise_sub(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_SUB); }
pe_status pe_cpu_elementwise_mul(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_MUL); }
pe_status pe_cpu_elementwise_div(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_DIV); }

/* ---- activations: x [numel] -> out [numel], fp32/fp64 ---------------------- */

#define RELU(v) ((v) < 0 ? 0 : (v)) /* NaN passes through */
static inline float sigmoid_f32(float v) {
    const float e = expf(-fabsf(v)); /* in (0, 1]: never overflows */
    return v >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
static inline double sigmoid_f64(double v) {
    const double e = exp(-fabs(v));
    return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

#define EW_UNARY(NAME, T, F)                                                     \
    static void NAME(const T *x, T *out, int64_t n, int nt) {                    \
        const int par = n > PE_EW_PAR_MIN;                                       \
        _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")     \
        for (int64_t i = 0; i < n; i++) out[i] = F(x[i]);                        \
    }

EW_UNARY(relu_f32, float, RELU)
EW_UNARY(relu_f64, double, RELU)
EW_UNARY(sigmoid_f32_loop, float, sigmoid_f32)
EW_UNARY(sigmoid_f64_loop, double, sigmoid_f64)
EW_UNARY(tanh_f32, float, tanhf)
EW_UNARY(tanh_f64, double, tanh)

typedef void (*ew_unary_f32)(const float *, float *, int64_t, int);
typedef void (*ew_unary_f64)(const double *, double *, int64_t, int);

static pe_status ew_unary(const pe_op_ctx *ctx, ew_unary_f32 f32, ew_unary_f64 f64) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    if (x->dtype == PE_DTYPE_FP32) f32(pe_tensor_data(x), pe_tensor_data(out), n, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64) f64(pe_tensor_data(x), pe_tensor_data(out), n, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

pe_status pe_cpu_relu(const pe_op_ctx *ctx) { return ew_unary(ctx, relu_f32, relu_f64); }
pe_status pe_cpu_sigmoid(const pe_op_ctx *ctx) { return ew_unary(ctx, sigmoid_f32_loop, sigmoid_f64_loop); }
pe_status pe_cpu_tanh(const pe_op_ctx *ctx) { return ew_unary(ctx, tanh_f32, tanh_f64); }

/* ---- scale: out = s*x + b (bias_after_scale) or s*(x + b) ------------------ */

/* Saturating, NaN-safe float -> integer conversions (C leaves these undefined). */
static inline int64_t sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
static inline int32_t sat_i32(double v) {
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}

#define EW_SCALE(NAME, T, ADD, MUL)                                                              \
    static void NAME(const T *x, T *out, int64_t n, T s, T b, int after, int nt) {               \
        const int par = n > PE_EW_PAR_MIN;                                                       \
        if (after) {                                                                             \
            _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")                 \
            for (int64_t i = 0; i < n; i++) out[i] = ADD(MUL(s, x[i]), b);                       \
        } else {                                                                                 \
            _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")                 \
            for (int64_t i = 0; i < n; i++) out[i] = MUL(s, ADD(x[i], b));                       \
        }                                                                                        \
    }

EW_SCALE(scale_f32, float, FADD, FMUL)
EW_SCALE(scale_f64, double, FADD, FMUL)
EW_SCALE(scale_s32, int32_t, add_i32, mul_i32)
EW_SCALE(scale_s64, int64_t, add_i64, mul_i64)

/* x [..] -> out [..], same dtype. */
pe_status pe_cpu_scale(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    const double s = pe_ctx_float(ctx, "scale"), b = pe_ctx_float(ctx, "bias");
    const int after = pe_ctx_bool(ctx, "bias_after_scale");
    const int nt = ctx->num_threads;
    if (n == 0) return PE_OK;
    void *xd = pe_tensor_data(x), *od = pe_tensor_data(out);
    switch (x->dtype) {
    case PE_DTYPE_FP32: scale_f32(xd, od, n, (float)s, (float)b, after, nt); break;
    case PE_DTYPE_FP64: scale_f64(xd, od, n, s, b, after, nt); break;
    case PE_DTYPE_INT32: scale_s32(xd, od, n, sat_i32(s), sat_i32(b), after, nt); break;
    case PE_DTYPE_INT64: scale_s64(xd, od, n, sat_i64(s), sat_i64(b), after, nt); break;
    default: return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    }
    return PE_OK;
}

/* ---- cast: x [..] of dtype A -> out [..] of dtype B (six dtypes) ----------- */

/* Conversions from a float source (v is double). */
#define F_TO_F32(v) ((float)(v))
#define F_TO_F64(v) ((double)(v))
#define F_TO_I32(v) sat_i32(v)
#define F_TO_I64(v) sat_i64(v)
#define F_TO_U8(v) ((uint8_t)(uint64_t)sat_i64(v))
#define F_TO_BOOL(v) ((uint8_t)((v) != 0))
/* Conversions from an integer source (v is int64_t). */
#define I_TO_F32(v) ((float)(v))
#define I_TO_F64(v) ((double)(v))
#define I_TO_I32(v) ((int32_t)(uint32_t)(uint64_t)(v))
#define I_TO_I64(v) ((int64_t)(v))
#define I_TO_U8(v) ((uint8_t)(uint64_t)(v))
#define I_TO_BOOL(v) ((uint8_t)((v) != 0))

#define CAST_LOOP(S, LOAD, D, CONV)                                                  \
    {                                                                                \
        const S *s = xd;                                                             \
        D *d = od;                                                                   \
        _Pragma("omp parallel for num_threads(nt) if(par) schedule(static)")         \
        for (int64_t i = 0; i < n; i++) d[i] = CONV(LOAD(s[i]));                     \
    }                                                                                \
    break;

#define LOAD_F(v) ((double)(v))
#define LOAD_I(v) ((int64_t)(v))
#define LOAD_B(v) ((int64_t)((v) != 0))

#define CAST_FROM(S, LOAD, P)                                       \
    switch (dst) {                                                  \
    case PE_DTYPE_FP32: CAST_LOOP(S, LOAD, float, P##_TO_F32)       \
    case PE_DTYPE_FP64: CAST_LOOP(S, LOAD, double, P##_TO_F64)      \
    case PE_DTYPE_INT32: CAST_LOOP(S, LOAD, int32_t, P##_TO_I32)    \
    case PE_DTYPE_INT64: CAST_LOOP(S, LOAD, int64_t, P##_TO_I64)    \
    case PE_DTYPE_UINT8: CAST_LOOP(S, LOAD, uint8_t, P##_TO_U8)     \
    case PE_DTYPE_BOOL: CAST_LOOP(S, LOAD, uint8_t, P##_TO_BOOL)    \
    default: return PE_ERR_UNSUPPORTED;                             \
    }                                                               \
    break;

static pe_status cast_loop(pe_dtype src, pe_dtype dst, const void *xd, void *od, int64_t n, int nt) {
    const int par = n > PE_EW_PAR_MIN;
    switch (src) {
    case PE_DTYPE_FP32: CAST_FROM(float, LOAD_F, F)
    case PE_DTYPE_FP64: CAST_FROM(double, LOAD_F, F)
    case PE_DTYPE_INT32: CAST_FROM(int32_t, LOAD_I, I)
    case PE_DTYPE_INT64: CAST_FROM(int64_t, LOAD_I, I)
    case PE_DTYPE_UINT8: CAST_FROM(uint8_t, LOAD_I, I)
    case PE_DTYPE_BOOL: CAST_FROM(uint8_t, LOAD_B, I)
    default: return PE_ERR_UNSUPPORTED;
    }
    return PE_OK;
}

pe_status pe_cpu_cast(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (pe_tensor_numel(out) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    if (x->dtype == out->dtype && x->dtype != PE_DTYPE_BOOL) {
        memmove(pe_tensor_data(out), pe_tensor_data(x), pe_tensor_nbytes(x));
        return PE_OK;
    }
    if (cast_loop(x->dtype, out->dtype, pe_tensor_data(x), pe_tensor_data(out), n, ctx->num_threads) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "cast from %s to %s is not supported",
                            pe_dtype_name(x->dtype), pe_dtype_name(out->dtype));
    return PE_OK;
}
