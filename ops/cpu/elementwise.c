/* ops/cpu/elementwise.c — CPU kernels of the elementwise family:
 * elementwise_{add,sub,mul,div,max,min,pow,mod,floordiv} with Paddle
 * broadcasting, the compare ops (bool Out) and logical ops, where, relu,
 * sigmoid, tanh, scale and cast, and their gradients (elementwise_*_grad,
 * where_grad, relu/sigmoid/tanh_grad from Out, cast_grad).
 *
 * How: the binary ops build the broadcast plan of ops/elementwise.h and run
 * one of five loops (same shape, scalar Y, row bias [N,D]+[D], channel bias
 * [N,C,HW]+[C], general strided); each loop is a plain contiguous loop the
 * compiler vectorizes, split over ctx->num_threads OpenMP threads once the
 * output is large enough to pay for the fork (ops/cpu/par.h: the decision
 * is taken in C, so small ops never enter an OpenMP region). The loops are
 * generated per dtype by macros so fp32/fp64/int32/int64 share one source
 * of truth.
 *
 * Gradients of the binary ops reuse the same plan: an operand that was not
 * broadcast gets its gradient element by element; a broadcast operand gets
 * the sum of the contributions over its broadcast dims. Every such sum runs
 * over the output in a fixed order (in double) chosen from the shapes
 * alone, never from the thread count, so gradients are bitwise identical
 * for any ctx->num_threads.
 *
 * Defined results where C leaves behaviour undefined (so no input crashes):
 *  - integer add/sub/mul wrap around (two's complement), as numpy and torch;
 *  - integer division truncates toward zero (C, Paddle); x / 0 == 0 for
 *    integers, and INT_MIN / -1 wraps to INT_MIN;
 *  - integer elementwise_mod / floordiv by 0 is refused (an error naming Y,
 *    as Paddle throws); x % -1 == 0 and x // -1 wraps like x / -1;
 *  - integer pow is llrint(pow(double, double)) saturated to the type;
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
#include "ops/cpu/fused_act.h"
#include "ops/cpu/par.h"

#include <math.h>
#include <stdint.h>
#include <string.h>


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

/* Paddle's functors: max is a > b ? a : b, min a < b ? a : b; integer pow
 * rounds the double result (llrint(pow(a, b)), saturated here); mod takes
 * the sign of the divisor (Python's %, fmod for floats); floordiv rounds
 * toward -inf (Python's //: the float form is Paddle's and torch's, from
 * fmod), as Paddle >= 2.6 and its docs; Paddle 2.0-2.5 kernels truncated
 * (std::trunc(a / b)), which differs for operands of opposite signs. Integer x % -1 is 0 and x // -1 wraps; a zero integer divisor never
 * reaches these (ew_binary refuses it). */
#define FMAX(a, b) ((a) > (b) ? (a) : (b))
#define FMIN(a, b) ((a) < (b) ? (a) : (b))

static inline int64_t sat_i64(double v);
static inline int32_t sat_i32(double v);
static inline int32_t pow_i32(int32_t a, int32_t b) { return sat_i32(rint(pow((double)a, (double)b))); }
static inline int64_t pow_i64(int64_t a, int64_t b) { return sat_i64(rint(pow((double)a, (double)b))); }

#define EW_INT_DIVMOD(T, S)                                                          \
    static inline T mod_##S(T a, T b) {                                              \
        if (b == 0 || b == -1) return 0;                                             \
        T r = a % b;                                                                 \
        return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;                           \
    }                                                                                \
    static inline T floordiv_##S(T a, T b) {                                         \
        if (b == 0) return 0;                                                        \
        if (b == -1) return div_##S(a, b);                                           \
        return a % b != 0 && ((a < 0) != (b < 0)) ? a / b - 1 : a / b;               \
    }
EW_INT_DIVMOD(int32_t, i32)
EW_INT_DIVMOD(int64_t, i64)

#define EW_FLOAT_DIVMOD(T, S, FMOD, FLOOR, COPYSIGN)                                  \
    static inline T mod_##S(T a, T b) {                                               \
        T r = FMOD(a, b);                                                             \
        return r != 0 && ((b < 0) != (r < 0)) ? r + b : r;                            \
    }                                                                                 \
    static inline T floordiv_##S(T a, T b) {                                          \
        if (b == 0) return a / b;                                                     \
        T m = FMOD(a, b), d = (a - m) / b;                                            \
        if (m != 0 && ((b < 0) != (m < 0))) d -= 1;                                   \
        if (d == 0) return COPYSIGN(0, a / b);                                        \
        T f = FLOOR(d);                                                               \
        return d - f > (T)0.5 ? f + 1 : f;                                            \
    }
EW_FLOAT_DIVMOD(float, f32s, fmodf, floorf, copysignf)
EW_FLOAT_DIVMOD(double, f64s, fmod, floor, copysign)

/* Compare ops (Paddle's: float equality is |a - b| < 1e-8, exact on inf,
 * false on NaN); bool operands compare as 0/1. Logical ops read bools. */
#define CMP_EQ_F(a, b) ((uint8_t)(isinf(a) || isinf(b) ? (a) == (b) : fabs((double)(a) - (double)(b)) < 1e-8))
#define CMP_NE_F(a, b) ((uint8_t)!CMP_EQ_F(a, b))
#define CMP_EQ(a, b) ((uint8_t)((a) == (b)))
#define CMP_NE(a, b) ((uint8_t)((a) != (b)))
#define CMP_LT(a, b) ((uint8_t)((a) < (b)))
#define CMP_LE(a, b) ((uint8_t)((a) <= (b)))
#define CMP_GT(a, b) ((uint8_t)((a) > (b)))
#define CMP_GE(a, b) ((uint8_t)((a) >= (b)))
#define B01(v) ((v) != 0)
#define CMP_EQ_B(a, b) CMP_EQ(B01(a), B01(b))
#define CMP_NE_B(a, b) CMP_NE(B01(a), B01(b))
#define CMP_LT_B(a, b) CMP_LT(B01(a), B01(b))
#define CMP_LE_B(a, b) CMP_LE(B01(a), B01(b))
#define CMP_GT_B(a, b) CMP_GT(B01(a), B01(b))
#define CMP_GE_B(a, b) CMP_GE(B01(a), B01(b))
#define LOG_AND(a, b) ((uint8_t)(B01(a) && B01(b)))
#define LOG_OR(a, b) ((uint8_t)(B01(a) || B01(b)))
#define LOG_XOR(a, b) ((uint8_t)(B01(a) != B01(b)))

/* ---- binary loops ---------------------------------------------------------- */

/* One function per (op, dtype): runs the plan's loop with OP(a, b); x, y
 * are T, out is TO (T, or uint8_t for the bool results of compare ops). */
#define EW_BINARY(NAME, T, OP) EW_BINARY_TO(NAME, T, T, OP)
#define EW_BINARY_TO(NAME, T, TO, OP)                                                             \
    static void NAME(const pe_bcast_plan *pl, const void *xv, const void *yv, void *ov, int nt) { \
        const T *x = xv, *y = yv;                                                                 \
        TO *out = ov;                                                                             \
        const int64_t numel = pl->numel;                                                          \
        const int par = numel >= PE_PAR_MIN && nt > 1;                                            \
        switch (pl->kind) {                                                                       \
        case PE_BCAST_SAME: /* x, y, out: [numel] */                                              \
            PE_PAR_FOR(par, i, numel, out[i] = OP(x[i], y[i]););                                  \
            break;                                                                                \
        case PE_BCAST_SCALAR_Y: { /* x, out: [numel]; y: [1] */                                   \
            const T b = y[0];                                                                     \
            PE_PAR_FOR(par, i, numel, out[i] = OP(x[i], b););                                     \
            break;                                                                                \
        }                                                                                         \
        case PE_BCAST_ROW: { /* x, out: [pre, n]; y: [n] */                                       \
            const int64_t n = pl->n;                                                              \
            PE_PAR_FOR(par, r, pl->pre, {                                                         \
                const T *xr = x + r * n;                                                          \
                TO *orow = out + r * n;                                                           \
                for (int64_t c = 0; c < n; c++) orow[c] = OP(xr[c], y[c]);                        \
            });                                                                                   \
            break;                                                                                \
        }                                                                                         \
        case PE_BCAST_MID: { /* x, out: [pre, n, post]; y: [n] */                                 \
            const int64_t n = pl->n, post = pl->post;                                             \
            PE_PAR_FOR(par, rc, pl->pre * pl->n, {                                                \
                const T b = y[rc % n];                                                            \
                const T *xr = x + rc * post;                                                      \
                TO *orow = out + rc * post;                                                       \
                for (int64_t k = 0; k < post; k++) orow[k] = OP(xr[k], b);                        \
            });                                                                                   \
            break;                                                                                \
        }                                                                                         \
        default: { /* general: out [dims...], strided reads, rows of the last dim */              \
            const int nd = pl->ndim;                                                              \
            const int64_t inner = pl->dims[nd - 1];                                               \
            const int64_t xs = pl->x_strides[nd - 1], ys = pl->y_strides[nd - 1];                 \
            PE_PAR_FOR(par, r, inner ? numel / inner : 0, {                                       \
                int64_t xo, yo;                                                                   \
                pe_bcast_row_offsets(pl, r, &xo, &yo);                                            \
                const T *xr = x + xo, *yr = y + yo;                                               \
                TO *orow = out + r * inner;                                                       \
                if (xs == 1 && ys == 1)                                                           \
                    for (int64_t j = 0; j < inner; j++) orow[j] = OP(xr[j], yr[j]);               \
                else if (xs == 1 && ys == 0)                                                      \
                    for (int64_t j = 0; j < inner; j++) orow[j] = OP(xr[j], yr[0]);               \
                else if (xs == 0 && ys == 1)                                                      \
                    for (int64_t j = 0; j < inner; j++) orow[j] = OP(xr[0], yr[j]);               \
                else                                                                              \
                    for (int64_t j = 0; j < inner; j++) orow[j] = OP(xr[j * xs], yr[j * ys]);     \
            });                                                                                   \
            break;                                                                                \
        }                                                                                         \
        }                                                                                         \
    }

EW_BINARY(add_f32, float, FADD)
EW_BINARY(sub_f32, float, FSUB)
EW_BINARY(mul_f32, float, FMUL)
EW_BINARY(div_f32, float, FDIV)
EW_BINARY(max_f32, float, FMAX)
EW_BINARY(min_f32, float, FMIN)
EW_BINARY(pow_f32, float, powf)
EW_BINARY(mod_f32, float, mod_f32s)
EW_BINARY(floordiv_f32, float, floordiv_f32s)
EW_BINARY(add_f64, double, FADD)
EW_BINARY(sub_f64, double, FSUB)
EW_BINARY(mul_f64, double, FMUL)
EW_BINARY(div_f64, double, FDIV)
EW_BINARY(max_f64, double, FMAX)
EW_BINARY(min_f64, double, FMIN)
EW_BINARY(pow_f64, double, pow)
EW_BINARY(mod_f64, double, mod_f64s)
EW_BINARY(floordiv_f64, double, floordiv_f64s)
EW_BINARY(add_s32, int32_t, add_i32)
EW_BINARY(sub_s32, int32_t, sub_i32)
EW_BINARY(mul_s32, int32_t, mul_i32)
EW_BINARY(div_s32, int32_t, div_i32)
EW_BINARY(max_s32, int32_t, FMAX)
EW_BINARY(min_s32, int32_t, FMIN)
EW_BINARY(pow_s32, int32_t, pow_i32)
EW_BINARY(mod_s32, int32_t, mod_i32)
EW_BINARY(floordiv_s32, int32_t, floordiv_i32)
EW_BINARY(add_s64, int64_t, add_i64)
EW_BINARY(sub_s64, int64_t, sub_i64)
EW_BINARY(mul_s64, int64_t, mul_i64)
EW_BINARY(div_s64, int64_t, div_i64)
EW_BINARY(max_s64, int64_t, FMAX)
EW_BINARY(min_s64, int64_t, FMIN)
EW_BINARY(pow_s64, int64_t, pow_i64)
EW_BINARY(mod_s64, int64_t, mod_i64)
EW_BINARY(floordiv_s64, int64_t, floordiv_i64)

typedef void (*ew_binary_fn)(const pe_bcast_plan *, const void *, const void *, void *, int);
enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_MAX, EW_MIN, EW_POW, EW_MOD, EW_FLOORDIV, EW_OP_COUNT };

/* [dtype][op]; rows follow pe_dtype FP32, FP64, INT32, INT64. */
static const ew_binary_fn k_binary[4][EW_OP_COUNT] = {
    {add_f32, sub_f32, mul_f32, div_f32, max_f32, min_f32, pow_f32, mod_f32, floordiv_f32},
    {add_f64, sub_f64, mul_f64, div_f64, max_f64, min_f64, pow_f64, mod_f64, floordiv_f64},
    {add_s32, sub_s32, mul_s32, div_s32, max_s32, min_s32, pow_s32, mod_s32, floordiv_s32},
    {add_s64, sub_s64, mul_s64, div_s64, max_s64, min_s64, pow_s64, mod_s64, floordiv_s64},
};

/* Compare ops: x, y of T (bool inputs read any non-zero byte as 1), out bool. */
EW_BINARY_TO(eq_f32, float, uint8_t, CMP_EQ_F)
EW_BINARY_TO(ne_f32, float, uint8_t, CMP_NE_F)
EW_BINARY_TO(lt_f32, float, uint8_t, CMP_LT)
EW_BINARY_TO(le_f32, float, uint8_t, CMP_LE)
EW_BINARY_TO(gt_f32, float, uint8_t, CMP_GT)
EW_BINARY_TO(ge_f32, float, uint8_t, CMP_GE)
EW_BINARY_TO(eq_f64, double, uint8_t, CMP_EQ_F)
EW_BINARY_TO(ne_f64, double, uint8_t, CMP_NE_F)
EW_BINARY_TO(lt_f64, double, uint8_t, CMP_LT)
EW_BINARY_TO(le_f64, double, uint8_t, CMP_LE)
EW_BINARY_TO(gt_f64, double, uint8_t, CMP_GT)
EW_BINARY_TO(ge_f64, double, uint8_t, CMP_GE)
EW_BINARY_TO(eq_s32, int32_t, uint8_t, CMP_EQ)
EW_BINARY_TO(ne_s32, int32_t, uint8_t, CMP_NE)
EW_BINARY_TO(lt_s32, int32_t, uint8_t, CMP_LT)
EW_BINARY_TO(le_s32, int32_t, uint8_t, CMP_LE)
EW_BINARY_TO(gt_s32, int32_t, uint8_t, CMP_GT)
EW_BINARY_TO(ge_s32, int32_t, uint8_t, CMP_GE)
EW_BINARY_TO(eq_s64, int64_t, uint8_t, CMP_EQ)
EW_BINARY_TO(ne_s64, int64_t, uint8_t, CMP_NE)
EW_BINARY_TO(lt_s64, int64_t, uint8_t, CMP_LT)
EW_BINARY_TO(le_s64, int64_t, uint8_t, CMP_LE)
EW_BINARY_TO(gt_s64, int64_t, uint8_t, CMP_GT)
EW_BINARY_TO(ge_s64, int64_t, uint8_t, CMP_GE)
EW_BINARY_TO(eq_b, uint8_t, uint8_t, CMP_EQ_B)
EW_BINARY_TO(ne_b, uint8_t, uint8_t, CMP_NE_B)
EW_BINARY_TO(lt_b, uint8_t, uint8_t, CMP_LT_B)
EW_BINARY_TO(le_b, uint8_t, uint8_t, CMP_LE_B)
EW_BINARY_TO(gt_b, uint8_t, uint8_t, CMP_GT_B)
EW_BINARY_TO(ge_b, uint8_t, uint8_t, CMP_GE_B)
/* Logical ops: bool x, y -> bool out. */
EW_BINARY(and_b, uint8_t, LOG_AND)
EW_BINARY(or_b, uint8_t, LOG_OR)
EW_BINARY(xor_b, uint8_t, LOG_XOR)

enum { CMP_EQ_OP, CMP_NE_OP, CMP_LT_OP, CMP_LE_OP, CMP_GT_OP, CMP_GE_OP, CMP_OP_COUNT };
/* [dtype][op]; rows FP32, FP64, INT32, INT64, BOOL. */
static const ew_binary_fn k_compare[5][CMP_OP_COUNT] = {
    {eq_f32, ne_f32, lt_f32, le_f32, gt_f32, ge_f32}, {eq_f64, ne_f64, lt_f64, le_f64, gt_f64, ge_f64},
    {eq_s32, ne_s32, lt_s32, le_s32, gt_s32, ge_s32}, {eq_s64, ne_s64, lt_s64, le_s64, gt_s64, ge_s64},
    {eq_b, ne_b, lt_b, le_b, gt_b, ge_b},
};

/* Integer mod / floordiv by zero is refused (Paddle throws, C is undefined). */
static bool has_int_zero(const pe_tensor *y) {
    const int64_t n = pe_tensor_numel(y);
    if (y->dtype == PE_DTYPE_INT32) {
        const int32_t *v = pe_tensor_data(y);
        for (int64_t i = 0; i < n; i++)
            if (!v[i]) return true;
    } else if (y->dtype == PE_DTYPE_INT64) {
        const int64_t *v = pe_tensor_data(y);
        for (int64_t i = 0; i < n; i++)
            if (!v[i]) return true;
    }
    return false;
}

/* X [..], Y [..] -> Out [broadcast] with fn; out_dt is the dtype Out must have. */
static pe_status ew_binary_run(const pe_op_ctx *ctx, ew_binary_fn fn, pe_dtype out_dt) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    pe_bcast_plan pl;
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s", pe_last_error());
    if (!fn || y->dtype != x->dtype || out->dtype != out_dt || pe_tensor_numel(out) != pl.numel)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (pl.numel == 0) return PE_OK;
    fn(&pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), ctx->num_threads);
    return PE_OK;
}

static pe_status ew_binary(const pe_op_ctx *ctx, int op) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    if ((op == EW_MOD || op == EW_FLOORDIV) && pe_tensor_numel(pe_ctx_out(ctx, "Out")) > 0 && has_int_zero(y))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Y '%s' holds a 0: integer division by zero",
                            pe_ctx_in_name(ctx, "Y", 0));
    return ew_binary_run(ctx, x->dtype <= PE_DTYPE_INT64 ? k_binary[x->dtype][op] : NULL, x->dtype);
}

static pe_status ew_compare(const pe_op_ctx *ctx, int op) {
    const pe_dtype dt = pe_ctx_in(ctx, "X")->dtype;
    const int row = dt <= PE_DTYPE_INT64 ? (int)dt : dt == PE_DTYPE_BOOL ? 4 : -1;
    return ew_binary_run(ctx, row >= 0 ? k_compare[row][op] : NULL, PE_DTYPE_BOOL);
}

/* X [..], Y [..] -> Out [broadcast]; see ops/elementwise.h. */
pe_status pe_cpu_elementwise_add(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_ADD); }
pe_status pe_cpu_elementwise_sub(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_SUB); }
pe_status pe_cpu_elementwise_mul(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_MUL); }
pe_status pe_cpu_elementwise_div(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_DIV); }
pe_status pe_cpu_elementwise_max(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_MAX); }
pe_status pe_cpu_elementwise_min(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_MIN); }
pe_status pe_cpu_elementwise_pow(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_POW); }
pe_status pe_cpu_elementwise_mod(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_MOD); }
pe_status pe_cpu_elementwise_floordiv(const pe_op_ctx *ctx) { return ew_binary(ctx, EW_FLOORDIV); }

/* X [..], Y [..] (same dtype) -> Out [broadcast] bool */
pe_status pe_cpu_equal(const pe_op_ctx *ctx) { return ew_compare(ctx, CMP_EQ_OP); }
pe_status pe_cpu_not_equal(const pe_op_ctx *ctx) { return ew_compare(ctx, CMP_NE_OP); }
pe_status pe_cpu_less_than(const pe_op_ctx *ctx) { return ew_compare(ctx, CMP_LT_OP); }
pe_status pe_cpu_less_equal(const pe_op_ctx *ctx) { return ew_compare(ctx, CMP_LE_OP); }
pe_status pe_cpu_greater_than(const pe_op_ctx *ctx) { return ew_compare(ctx, CMP_GT_OP); }
pe_status pe_cpu_greater_equal(const pe_op_ctx *ctx) { return ew_compare(ctx, CMP_GE_OP); }

/* X [..] bool, Y [..] bool -> Out [broadcast] bool (logical ops broadcast with axis -1) */
static pe_status ew_logical(const pe_op_ctx *ctx, ew_binary_fn fn) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    pe_bcast_plan pl;
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, -1, &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s", pe_last_error());
    if (x->dtype != PE_DTYPE_BOOL || y->dtype != PE_DTYPE_BOOL || out->dtype != PE_DTYPE_BOOL ||
        pe_tensor_numel(out) != pl.numel)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (pl.numel == 0) return PE_OK;
    fn(&pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), ctx->num_threads);
    return PE_OK;
}

pe_status pe_cpu_logical_and(const pe_op_ctx *ctx) { return ew_logical(ctx, and_b); }
pe_status pe_cpu_logical_or(const pe_op_ctx *ctx) { return ew_logical(ctx, or_b); }
pe_status pe_cpu_logical_xor(const pe_op_ctx *ctx) { return ew_logical(ctx, xor_b); }

/* X [..] bool -> Out [..] bool */
pe_status pe_cpu_logical_not(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (x->dtype != PE_DTYPE_BOOL || out->dtype != PE_DTYPE_BOOL || pe_tensor_numel(out) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    const uint8_t *xd = n ? pe_tensor_data(x) : NULL;
    uint8_t *od = n ? pe_tensor_data(out) : NULL;
    const int nt = ctx->num_threads;
    PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, od[i] = (uint8_t)!xd[i];);
    return PE_OK;
}

/* ---- where: Condition [..] bool, X [..], Y [..] -> Out [..] (no broadcasting) ----- */

/* The selection moves bits: one loop per element size serves every dtype. */
#define WHERE_LOOP(T)                                                                    \
    {                                                                                    \
        const T *a = xv, *b = yv;                                                        \
        T *o = ov;                                                                       \
        PE_PAR_FOR(par, i, n, o[i] = c[i] ? a[i] : b[i];);                               \
    }

#define WHERE_GRAD_LOOP(T)                                                                \
    {                                                                                     \
        const T *gd = pe_tensor_data(g);                                                  \
        T *gx = dxd, *gy = dyd;                                                           \
        if (gx) PE_PAR_FOR(par, i, n, gx[i] = cd[i] ? gd[i] : 0;);                        \
        if (gy) PE_PAR_FOR(par, i, n, gy[i] = cd[i] ? 0 : gd[i];);                        \
    }

static void where_select(size_t es, const uint8_t *c, const void *xv, const void *yv, void *ov, int64_t n, int nt) {
    const int par = n >= PE_PAR_MIN && nt > 1;
    if (es == 8) WHERE_LOOP(uint64_t)
    else WHERE_LOOP(uint32_t)
}

pe_status pe_cpu_where(const pe_op_ctx *ctx) {
    const pe_tensor *c = pe_ctx_in(ctx, "Condition"), *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(out);
    const size_t es = pe_dtype_size(x->dtype);
    if (c->dtype != PE_DTYPE_BOOL || y->dtype != x->dtype || out->dtype != x->dtype || (es != 4 && es != 8) ||
        pe_tensor_numel(c) != n || pe_tensor_numel(x) != n || pe_tensor_numel(y) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    where_select(es, pe_tensor_data(c), pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), n,
                 ctx->num_threads);
    return PE_OK;
}

/* Condition [..], Out@GRAD [..] -> X@GRAD? [..] (g where c, else 0), Y@GRAD? [..] (the rest).
 * X and Y are read for their meta only; integer 0 has the bits of float 0. */
pe_status pe_cpu_where_grad(const pe_op_ctx *ctx) {
    const pe_tensor *c = pe_ctx_in(ctx, "Condition"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    const int64_t n = pe_tensor_numel(g);
    const size_t es = pe_dtype_size(g->dtype);
    if (c->dtype != PE_DTYPE_BOOL || pe_tensor_numel(c) != n || (es != 4 && es != 8) ||
        (dx && (dx->dtype != g->dtype || pe_tensor_numel(dx) != n)) ||
        (dy && (dy->dtype != g->dtype || pe_tensor_numel(dy) != n)))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    const uint8_t *cd = pe_tensor_data(c);
    void *dxd = dx ? pe_tensor_data(dx) : NULL, *dyd = dy ? pe_tensor_data(dy) : NULL;
    const int nt = ctx->num_threads, par = n >= PE_PAR_MIN && nt > 1;
    if (es == 8) WHERE_GRAD_LOOP(uint64_t)
    else WHERE_GRAD_LOOP(uint32_t)
    return PE_OK;
}

/* ---- activations: x [numel] -> out [numel], fp32/fp64 ---------------------- */

/* The expressions are ops/cpu/fused_act.h's, shared with the fused kernels. */
#define EW_UNARY(NAME, T, F)                                            \
    static void NAME(const T *x, T *out, int64_t n, int nt) {           \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, out[i] = F(x[i]);); \
    }

EW_UNARY(relu_f32, float, PE_FUSED_RELU)
EW_UNARY(relu_f64, double, PE_FUSED_RELU)
EW_UNARY(sigmoid_f32_loop, float, pe_fused_sigmoid_f32)
EW_UNARY(sigmoid_f64_loop, double, pe_fused_sigmoid_f64)
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

#define EW_SCALE(NAME, T, ADD, MUL)                                                \
    static void NAME(const T *x, T *out, int64_t n, T s, T b, int after, int nt) { \
        const int par = n >= PE_PAR_MIN && nt > 1;                                 \
        if (after) PE_PAR_FOR(par, i, n, out[i] = ADD(MUL(s, x[i]), b););          \
        else PE_PAR_FOR(par, i, n, out[i] = MUL(s, ADD(x[i], b)););                \
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

#define CAST_LOOP(S, LOAD, D, CONV)                      \
    {                                                    \
        const S *s = xd;                                 \
        D *d = od;                                       \
        PE_PAR_FOR(par, i, n, d[i] = CONV(LOAD(s[i]));); \
    }                                                    \
    break;

#define LOAD_F(v) ((double)(v))
#define LOAD_I(v) ((int64_t)(v))
#define LOAD_B(v) ((int64_t)((v) != 0))

#define CAST_FROM(S, LOAD, P)                                    \
    switch (dst) {                                               \
    case PE_DTYPE_FP32: CAST_LOOP(S, LOAD, float, P##_TO_F32)    \
    case PE_DTYPE_FP64: CAST_LOOP(S, LOAD, double, P##_TO_F64)   \
    case PE_DTYPE_INT32: CAST_LOOP(S, LOAD, int32_t, P##_TO_I32) \
    case PE_DTYPE_INT64: CAST_LOOP(S, LOAD, int64_t, P##_TO_I64) \
    case PE_DTYPE_UINT8: CAST_LOOP(S, LOAD, uint8_t, P##_TO_U8)  \
    case PE_DTYPE_BOOL: CAST_LOOP(S, LOAD, uint8_t, P##_TO_BOOL) \
    default: return PE_ERR_UNSUPPORTED;                          \
    }                                                            \
    break;

static pe_status cast_loop(pe_dtype src, pe_dtype dst, const void *xd, void *od, int64_t n, int nt) {
    const int par = n >= PE_PAR_MIN && nt > 1;
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

/* ---- gradients of the binary ops --------------------------------------------- */

/* Contribution of one output element to dX / dY: g = dOut, a = x, b = y. */
/* (every operand is named, so the generic loops need no per-op variants) */
#define GX_ADD(g, a, b) ((void)(a), (void)(b), (g))
#define GY_ADD(g, a, b) ((void)(a), (void)(b), (g))
#define GY_SUB(g, a, b) ((void)(a), (void)(b), -(g))
#define GX_MUL(g, a, b) ((void)(a), (g) * (b))
#define GY_MUL(g, a, b) ((void)(b), (g) * (a))
#define GX_DIV(g, a, b) ((void)(a), (g) / (b))
#define GY_DIV(g, a, b) (-(g) * (a) / ((b) * (b)))

/* Paddle's MaxGradDx/Dy, MinGradDx/Dy: a tie sends the gradient to Y. */
#define GX_MAX(g, a, b) ((a) > (b) ? (g) : 0)
#define GY_MAX(g, a, b) ((a) <= (b) ? (g) : 0)
#define GX_MIN(g, a, b) ((a) < (b) ? (g) : 0)
#define GY_MIN(g, a, b) ((a) >= (b) ? (g) : 0)
#define GX_POW(g, a, b) ((g) * (b) * pow((a), (b) - 1))
#define GY_POW(g, a, b) ((g) * log(a) * pow((a), (b)))

#define PE_GRAD_TILE 256        /* columns of dY summed together (stack accumulators) */
#define PE_GRAD_MAX_BLOCKS 256  /* whole-tensor sums: at most this many partials */
#define PE_GRAD_MIN_BLOCK 4096  /* ... of at least this many elements */

/* One function per (op, dtype, side). side 0 fills dX (X's shape), side 1
 * fills dY. d[t] = sum over the output elements that read element t of the
 * side's operand of G(dout, x, y); when the operand is not broadcast the sum
 * has one term. General plan only (any kind is also a valid general plan). */
#define EW_GRAD_GENERAL(NAME, T, G, SIDE)                                                              \
    static void NAME(const pe_bcast_plan *pl, const T *x, const T *y, const T *g, T *dst, int nt) {    \
        const int nd = pl->ndim;                                                                       \
        const int64_t *ts = SIDE ? pl->y_strides : pl->x_strides;                                      \
        int64_t ostr[PE_MAX_DIMS];                                                                     \
        int kept[PE_MAX_DIMS], red[PE_MAX_DIMS], nk = 0, nr = 0;                                       \
        int64_t nkept = 1, nred = 1, s = 1;                                                            \
        for (int d = nd - 1; d >= 0; d--) { ostr[d] = s; s *= pl->dims[d]; }                           \
        for (int d = 0; d < nd; d++) {                                                                 \
            if (ts[d]) { kept[nk++] = d; nkept *= pl->dims[d]; }                                       \
            else { red[nr++] = d; nred *= pl->dims[d]; }                                               \
        }                                                                                              \
        const int par = pl->numel >= PE_PAR_MIN && nt > 1;                                             \
        if (nr == 0) { /* not broadcast: dst has out's layout */                                       \
            PE_PAR_FOR(par, t, nkept, {                                                                \
                int64_t oo, xo, yo;                                                                    \
                pe_bcast_offsets(pl, kept, nk, ostr, t, &oo, &xo, &yo);                                    \
                dst[SIDE ? yo : xo] = G(g[oo], x[xo], y[yo]);                                          \
            });                                                                                        \
            return;                                                                                    \
        }                                                                                              \
        /* innermost reduced dim walked directly, the other reduced dims by index */                   \
        const int last = red[nr - 1];                                                                  \
        const int64_t ln = pl->dims[last], lo = ostr[last];                                            \
        const int64_t lx = pl->x_strides[last], ly = pl->y_strides[last];                              \
        const int64_t nouter = nred / ln;                                                              \
        PE_PAR_FOR(par && nkept > 1, t, nkept, {                                                       \
            int64_t ob, xb, yb;                                                                        \
            pe_bcast_offsets(pl, kept, nk, ostr, t, &ob, &xb, &yb);                                        \
            double acc = 0;                                                                            \
            for (int64_t r = 0; r < nouter; r++) {                                                     \
                int64_t oo, xo, yo;                                                                    \
                pe_bcast_offsets(pl, red, nr - 1, ostr, r, &oo, &xo, &yo);                                 \
                const T *gp = g + ob + oo, *xp = x + xb + xo, *yp = y + yb + yo;                       \
                for (int64_t j = 0; j < ln; j++) acc += (double)G(gp[j * lo], xp[j * lx], yp[j * ly]); \
            }                                                                                          \
            dst[SIDE ? yb : xb] = (T)acc;                                                              \
        });                                                                                            \
    }

/* dX, dY (either may be NULL) for one (op, dtype): fast paths for the plan
 * kinds where X is not broadcast, the general loops otherwise. */
#define EW_GRAD(NAME, T, GX, GY)                                                                       \
    EW_GRAD_GENERAL(NAME##_gx, T, GX, 0)                                                               \
    EW_GRAD_GENERAL(NAME##_gy, T, GY, 1)                                                               \
    static void NAME(const pe_bcast_plan *pl, const T *x, const T *y, const T *g, T *dx, T *dy,        \
                     int nt) {                                                                         \
        const int64_t numel = pl->numel;                                                               \
        const int par = numel >= PE_PAR_MIN && nt > 1;                                                 \
        switch (pl->kind) {                                                                            \
        case PE_BCAST_SAME: /* all [numel] */                                                          \
            if (dx) PE_PAR_FOR(par, i, numel, dx[i] = GX(g[i], x[i], y[i]););                          \
            if (dy) PE_PAR_FOR(par, i, numel, dy[i] = GY(g[i], x[i], y[i]););                          \
            return;                                                                                    \
        case PE_BCAST_SCALAR_Y: { /* x, g, dx: [numel]; y, dy: [1] */                                  \
            const T b = y[0];                                                                          \
            if (dx) PE_PAR_FOR(par, i, numel, dx[i] = GX(g[i], x[i], b););                             \
            if (dy) { /* fixed blocks: the same partial sums for any thread count */                   \
                int64_t bs = (numel + PE_GRAD_MAX_BLOCKS - 1) / PE_GRAD_MAX_BLOCKS;                    \
                if (bs < PE_GRAD_MIN_BLOCK) bs = PE_GRAD_MIN_BLOCK;                                    \
                const int64_t nb = (numel + bs - 1) / bs;                                              \
                double part[PE_GRAD_MAX_BLOCKS];                                                       \
                PE_PAR_FOR(par && nb > 1, k, nb, {                                                     \
                    const int64_t e = (k + 1) * bs < numel ? (k + 1) * bs : numel;                     \
                    double acc = 0;                                                                    \
                    for (int64_t i = k * bs; i < e; i++) acc += (double)GY(g[i], x[i], b);             \
                    part[k] = acc;                                                                     \
                });                                                                                    \
                double acc = 0;                                                                        \
                for (int64_t k = 0; k < nb; k++) acc += part[k];                                       \
                dy[0] = (T)acc;                                                                        \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        case PE_BCAST_ROW: { /* x, g, dx: [pre, n]; y, dy: [n] */                                      \
            const int64_t pre = pl->pre, n = pl->n;                                                    \
            if (dx) PE_PAR_FOR(par, r, pre, {                                                          \
                for (int64_t c = 0; c < n; c++) dx[r * n + c] = GX(g[r * n + c], x[r * n + c], y[c]);  \
            });                                                                                        \
            if (dy) { /* column tiles; each column summed over rows in order */                        \
                const int64_t ntile = (n + PE_GRAD_TILE - 1) / PE_GRAD_TILE;                           \
                PE_PAR_FOR(par && ntile > 1, tl, ntile, {                                              \
                    const int64_t c0 = tl * PE_GRAD_TILE;                                              \
                    const int64_t w = n - c0 < PE_GRAD_TILE ? n - c0 : PE_GRAD_TILE;                   \
                    double acc[PE_GRAD_TILE];                                                          \
                    for (int64_t c = 0; c < w; c++) acc[c] = 0;                                        \
                    for (int64_t r = 0; r < pre; r++) {                                                \
                        const T *gr = g + r * n + c0, *xr = x + r * n + c0;                            \
                        for (int64_t c = 0; c < w; c++) acc[c] += (double)GY(gr[c], xr[c], y[c0 + c]); \
                    }                                                                                  \
                    for (int64_t c = 0; c < w; c++) dy[c0 + c] = (T)acc[c];                            \
                });                                                                                    \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        case PE_BCAST_MID: { /* x, g, dx: [pre, n, post]; y, dy: [n] */                                \
            const int64_t pre = pl->pre, n = pl->n, post = pl->post;                                   \
            if (dx) PE_PAR_FOR(par, rc, pre * n, {                                                     \
                const T b = y[rc % n];                                                                 \
                for (int64_t k = 0; k < post; k++)                                                     \
                    dx[rc * post + k] = GX(g[rc * post + k], x[rc * post + k], b);                     \
            });                                                                                        \
            if (dy) PE_PAR_FOR(par && n > 1, c, n, {                                                   \
                const T b = y[c];                                                                      \
                double acc = 0;                                                                        \
                for (int64_t p = 0; p < pre; p++) {                                                    \
                    const T *gr = g + (p * n + c) * post, *xr = x + (p * n + c) * post;                \
                    PE_LANE_SUM(acc, post, k, GY(gr[k], xr[k], b));                                    \
                }                                                                                      \
                dy[c] = (T)acc;                                                                        \
            });                                                                                        \
            return;                                                                                    \
        }                                                                                              \
        default:                                                                                       \
            if (dx) NAME##_gx(pl, x, y, g, dx, nt);                                                    \
            if (dy) NAME##_gy(pl, x, y, g, dy, nt);                                                    \
            return;                                                                                    \
        }                                                                                              \
    }

EW_GRAD(add_grad_f32, float, GX_ADD, GY_ADD)
EW_GRAD(sub_grad_f32, float, GX_ADD, GY_SUB)
EW_GRAD(mul_grad_f32, float, GX_MUL, GY_MUL)
EW_GRAD(div_grad_f32, float, GX_DIV, GY_DIV)
EW_GRAD(add_grad_f64, double, GX_ADD, GY_ADD)
EW_GRAD(sub_grad_f64, double, GX_ADD, GY_SUB)
EW_GRAD(mul_grad_f64, double, GX_MUL, GY_MUL)
EW_GRAD(div_grad_f64, double, GX_DIV, GY_DIV)
EW_GRAD(max_grad_f32, float, GX_MAX, GY_MAX)
EW_GRAD(min_grad_f32, float, GX_MIN, GY_MIN)
EW_GRAD(pow_grad_f32, float, GX_POW, GY_POW)
EW_GRAD(max_grad_f64, double, GX_MAX, GY_MAX)
EW_GRAD(min_grad_f64, double, GX_MIN, GY_MIN)
EW_GRAD(pow_grad_f64, double, GX_POW, GY_POW)

typedef void (*ew_grad_f32)(const pe_bcast_plan *, const float *, const float *, const float *, float *, float *, int);
typedef void (*ew_grad_f64)(const pe_bcast_plan *, const double *, const double *, const double *, double *, double *,
                            int);
/* [op], EW_ADD .. EW_POW (mod and floordiv have no gradient) */
static const ew_grad_f32 k_grad_f32[EW_POW + 1] = {add_grad_f32, sub_grad_f32, mul_grad_f32, div_grad_f32,
                                                   max_grad_f32, min_grad_f32, pow_grad_f32};
static const ew_grad_f64 k_grad_f64[EW_POW + 1] = {add_grad_f64, sub_grad_f64, mul_grad_f64, div_grad_f64,
                                                   max_grad_f64, min_grad_f64, pow_grad_f64};

/* X [..], Y [..], Out@GRAD [broadcast] -> X@GRAD [X's dims]?, Y@GRAD [Y's dims]? */
static pe_status ew_binary_grad(const pe_op_ctx *ctx, int op) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    pe_bcast_plan pl;
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s", pe_last_error());
    if (y->dtype != x->dtype || g->dtype != x->dtype || pe_tensor_numel(g) != pl.numel ||
        (dx && (dx->dtype != x->dtype || pe_tensor_numel(dx) != pe_tensor_numel(x))) ||
        (dy && (dy->dtype != y->dtype || pe_tensor_numel(dy) != pe_tensor_numel(y))))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (pl.numel == 0) { /* nothing reaches X or Y: their gradients are zero */
        if (dx) memset(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx));
        if (dy) memset(pe_tensor_data(dy), 0, pe_tensor_nbytes(dy));
        return PE_OK;
    }
    if (x->dtype == PE_DTYPE_FP32)
        k_grad_f32[op](&pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(g), dx ? pe_tensor_data(dx) : NULL,
                       dy ? pe_tensor_data(dy) : NULL, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64)
        k_grad_f64[op](&pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(g), dx ? pe_tensor_data(dx) : NULL,
                       dy ? pe_tensor_data(dy) : NULL, ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

pe_status pe_cpu_elementwise_add_grad(const pe_op_ctx *ctx) { return ew_binary_grad(ctx, EW_ADD); }
pe_status pe_cpu_elementwise_sub_grad(const pe_op_ctx *ctx) { return ew_binary_grad(ctx, EW_SUB); }
pe_status pe_cpu_elementwise_mul_grad(const pe_op_ctx *ctx) { return ew_binary_grad(ctx, EW_MUL); }
pe_status pe_cpu_elementwise_div_grad(const pe_op_ctx *ctx) { return ew_binary_grad(ctx, EW_DIV); }
pe_status pe_cpu_elementwise_max_grad(const pe_op_ctx *ctx) { return ew_binary_grad(ctx, EW_MAX); }
pe_status pe_cpu_elementwise_min_grad(const pe_op_ctx *ctx) { return ew_binary_grad(ctx, EW_MIN); }
pe_status pe_cpu_elementwise_pow_grad(const pe_op_ctx *ctx) { return ew_binary_grad(ctx, EW_POW); }

/* ---- activation gradients from Out: out, dout, dx [numel] ------------------------ */

PE_FUSED_ACT_GRAD_LOOP(relu_grad_f32, float, PE_FUSED_RELU_G)
PE_FUSED_ACT_GRAD_LOOP(relu_grad_f64, double, PE_FUSED_RELU_G)
PE_FUSED_ACT_GRAD_LOOP(sigmoid_grad_f32, float, PE_FUSED_SIGMOID_G)
PE_FUSED_ACT_GRAD_LOOP(sigmoid_grad_f64, double, PE_FUSED_SIGMOID_G)
PE_FUSED_ACT_GRAD_LOOP(tanh_grad_f32, float, PE_FUSED_TANH_G)
PE_FUSED_ACT_GRAD_LOOP(tanh_grad_f64, double, PE_FUSED_TANH_G)

typedef void (*ew_act_grad_f32)(const float *, const float *, float *, int64_t, int);
typedef void (*ew_act_grad_f64)(const double *, const double *, double *, int64_t, int);

/* Out [..], Out@GRAD [..] -> X@GRAD [..] */
static pe_status ew_act_grad(const pe_op_ctx *ctx, ew_act_grad_f32 f32, ew_act_grad_f64 f64) {
    const pe_tensor *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(o);
    if (g->dtype != o->dtype || dx->dtype != o->dtype || pe_tensor_numel(g) != n || pe_tensor_numel(dx) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    if (o->dtype == PE_DTYPE_FP32) f32(pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(dx), n, ctx->num_threads);
    else if (o->dtype == PE_DTYPE_FP64) f64(pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(dx), n, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(o->dtype));
    return PE_OK;
}

pe_status pe_cpu_relu_grad(const pe_op_ctx *ctx) { return ew_act_grad(ctx, relu_grad_f32, relu_grad_f64); }
pe_status pe_cpu_sigmoid_grad(const pe_op_ctx *ctx) { return ew_act_grad(ctx, sigmoid_grad_f32, sigmoid_grad_f64); }
pe_status pe_cpu_tanh_grad(const pe_op_ctx *ctx) { return ew_act_grad(ctx, tanh_grad_f32, tanh_grad_f64); }

/* ---- cast_grad: Out@GRAD [..] (Out's dtype) -> X@GRAD [..] (X's dtype) ------------ */

pe_status pe_cpu_cast_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(g);
    if (dx->dtype != x->dtype || pe_tensor_numel(dx) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    if (g->dtype == dx->dtype) {
        memmove(pe_tensor_data(dx), pe_tensor_data(g), pe_tensor_nbytes(g));
        return PE_OK;
    }
    if (cast_loop(g->dtype, dx->dtype, pe_tensor_data(g), pe_tensor_data(dx), n, ctx->num_threads) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "cast from %s to %s is not supported", pe_dtype_name(g->dtype),
                            pe_dtype_name(dx->dtype));
    return PE_OK;
}
