/* ops/cuda/elementwise.cu — CUDA kernels of the elementwise family, the
 * dtypes of the CPU kernels (ops/cpu/elementwise.c):
 *  - elementwise_add/sub/mul/div/max/min/pow/mod/floordiv (Paddle `axis`
 *    broadcasting) and scale on fp32, fp64, int32, int64;
 *  - the compare ops (equal ... greater_equal; those four dtypes and bool,
 *    bool Out), logical_and/or/xor (bool, axis -1) and logical_not;
 *  - where (no broadcasting; any 4- or 8-byte dtype) and where_grad;
 *  - relu, sigmoid, tanh and their gradients from Out (fp32, fp64);
 *  - cast and cast_grad between fp32, fp64, int32, int64, uint8, bool;
 *  - elementwise_{add,sub,mul,div,max,min,pow}_grad (fp32, fp64).
 *
 * How: broadcasting is not re-derived here. The same pe_bcast_plan the CPU
 * kernels use (ops/elementwise.h) is built on the host and passed to the
 * kernel by value; its fast kinds (same shape, scalar Y, row bias,
 * per-channel) get index-arithmetic-free or one-div kernels, everything else
 * the general strided loop the plan describes. The gradient of a broadcast
 * operand is the sum of its terms over its broadcast dims (the plan dims
 * where its stride is 0), accumulated in double as on the CPU, in an order
 * fixed by the shapes alone: one thread per element for short sums or many
 * elements, else one block per element (a fixed tree in shared memory),
 * split into parts added in order when few elements have long sums — no
 * atomics, so a run repeats bit for bit. All kernels are grid-stride
 * loops with 64-bit indices, launched on the place's stream with the
 * place's device current; launch errors are checked right away
 * (cudaGetLastError) and returned through pe_ctx_error. Execution errors
 * surface at the next synchronization (the fetch copy).
 *
 * Numerics follow the CPU kernels: integer add/sub/mul wrap, integer x/0
 * is 0, IEEE float division, scale as two separately rounded operations,
 * and every product that feeds a sum rounded on its own (__fmul_rn /
 * __dmul_rn: nvcc would otherwise contract into an FMA and differ from the
 * CPU in the last bit); the precise expf/tanhf (PE does not build with
 * --use_fast_math); float32 pow through double (glibc's powf is correctly
 * rounded in practice, CUDA's powf is not); integer mod/floordiv by 0
 * refused like the CPU kernel, which needs a read of a device flag (a
 * stream synchronization, for integer mod/floordiv only).
 *
 * Why: the elementwise and activation ops are the CUDA seam of issue 2 —
 * enough for an MLP's bias + activation to run on a GPU place, compared with
 * the CPU kernels wherever a GPU exists (tests/unit/test_cuda.c); issue 14
 * adds the rest of the family and the gradients so training runs there too.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/elementwise.h"

#include <limits>
#include <type_traits>

namespace {

/* ---- binary ops ---------------------------------------------------------- */

/* Integer add/sub/mul wrap around (two's complement) like the CPU kernels:
 * computed in the unsigned type, where overflow is defined. */
template <typename T> using uns_t = typename std::make_unsigned<T>::type;

struct op_add {
    template <typename T> __device__ T operator()(T a, T b) const {
        if constexpr (std::is_integral<T>::value) return (T)((uns_t<T>)a + (uns_t<T>)b);
        else return a + b;
    }
};
struct op_sub {
    template <typename T> __device__ T operator()(T a, T b) const {
        if constexpr (std::is_integral<T>::value) return (T)((uns_t<T>)a - (uns_t<T>)b);
        else return a - b;
    }
};
struct op_mul {
    template <typename T> __device__ T operator()(T a, T b) const {
        if constexpr (std::is_integral<T>::value) return (T)((uns_t<T>)a * (uns_t<T>)b);
        else return a * b;
    }
};
/* Integer division truncates; x / 0 == 0 and MIN / -1 wraps to MIN (as on CPU). */
struct op_div {
    template <typename T> __device__ T operator()(T a, T b) const {
        if constexpr (std::is_integral<T>::value)
            return b == 0 ? (T)0 : b == (T)-1 ? (T)((uns_t<T>)0 - (uns_t<T>)a) : (T)(a / b);
        else return a / b;
    }
};

/* x, y, out: [numel] */
template <typename T, typename TO, typename Op>
__global__ void k_binary_same(const T *x, const T *y, TO *out, int64_t numel, Op op) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = op(x[i], y[i]);
}

/* x, out: [numel]; y: [1] */
template <typename T, typename TO, typename Op>
__global__ void k_binary_scalar_y(const T *x, const T *y, TO *out, int64_t numel, Op op) {
    const T b = y[0];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = op(x[i], b);
}

/* x, out: [pre, n, post]; y: [n] (ROW is post == 1) */
template <typename T, typename TO, typename Op>
__global__ void k_binary_mid(const T *x, const T *y, TO *out, int64_t numel, int64_t n,
                             int64_t post, Op op) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = op(x[i], y[(i / post) % n]);
}

/* out: row-major [plan.dims]; x and y read through plan.x_strides/y_strides
 * (0 = broadcast along that dim). */
template <typename T, typename TO, typename Op>
__global__ void k_binary_general(const T *x, const T *y, TO *out, pe_bcast_plan pl, Op op) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < pl.numel; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rest = i, xo = 0, yo = 0;
        for (int d = pl.ndim - 1; d >= 0; d--) {
            int64_t id = rest % pl.dims[d];
            rest /= pl.dims[d];
            xo += id * pl.x_strides[d];
            yo += id * pl.y_strides[d];
        }
        out[i] = op(x[xo], y[yo]);
    }
}

/* ---- unary ops ----------------------------------------------------------- */

/* Same formulas as ops/cpu/elementwise.c: relu lets NaN (and -0.0) through,
 * sigmoid uses the overflow-free form with exp(-|v|). */
struct op_relu {
    template <typename T> __device__ T operator()(T v) const { return v < (T)0 ? (T)0 : v; }
};
struct op_sigmoid {
    __device__ float operator()(float v) const {
        const float e = expf(-fabsf(v));
        return v >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
    __device__ double operator()(double v) const {
        const double e = exp(-fabs(v));
        return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    }
};
struct op_tanh {
    __device__ float operator()(float v) const { return tanhf(v); }
    __device__ double operator()(double v) const { return tanh(v); }
};
/* Paddle's scale: bias_after_scale ? s*x + b : s*(x + b), with s and b in
 * the tensor's type (integers: saturated on the host, wrapping arithmetic). */
template <typename T>
struct op_scale {
    T s, b;
    bool after;
    __device__ T operator()(T v) const {
        if constexpr (std::is_same<T, float>::value)
            return after ? __fadd_rn(__fmul_rn(s, v), b) : __fmul_rn(s, __fadd_rn(v, b));
        else if constexpr (std::is_same<T, double>::value)
            return after ? __dadd_rn(__dmul_rn(s, v), b) : __dmul_rn(s, __dadd_rn(v, b));
        else
            return after ? op_add{}(op_mul{}(s, v), b) : op_mul{}(s, op_add{}(v, b));
    }
};

/* x, out: [numel] */
template <typename T, typename Op>
__global__ void k_unary(const T *x, T *out, int64_t numel, Op op) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = op(x[i]);
}

/* ---- host side ----------------------------------------------------------- */

/* TO: the output's element type (T, or uint8_t for the bool results of the
 * compare and logical ops). */
template <typename T, typename TO = T, typename Op>
void launch_binary(const pe_bcast_plan &pl, const void *xv, const void *yv, void *ov, cudaStream_t s, Op op) {
    const T *x = (const T *)xv, *y = (const T *)yv;
    TO *out = (TO *)ov;
    unsigned g = pe_cuda_blocks(pl.numel);
    switch (pl.kind) {
    case PE_BCAST_SAME:
        k_binary_same<T, TO, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl.numel, op);
        break;
    case PE_BCAST_SCALAR_Y:
        k_binary_scalar_y<T, TO, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl.numel, op);
        break;
    case PE_BCAST_ROW:
        k_binary_mid<T, TO, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl.numel, pl.n, 1, op);
        break;
    case PE_BCAST_MID:
        k_binary_mid<T, TO, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl.numel, pl.n, pl.post, op);
        break;
    default:
        k_binary_general<T, TO, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl, op);
        break;
    }
}

/* X: any shape, Y: broadcastable to X per `axis` -> Out: the plan's shape.
 * float32, float64, int32, int64 (the CPU kernels' dtypes). */
template <typename Op>
pe_status run_binary(const pe_op_ctx *ctx, Op op) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const char *xn = pe_ctx_in_name(ctx, "X", 0), *yn = pe_ctx_in_name(ctx, "Y", 0);
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64 && x->dtype != PE_DTYPE_INT32 &&
        x->dtype != PE_DTYPE_INT64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; supported: float32, float64, int32, int64",
                            xn, pe_dtype_name(x->dtype));
    if (y->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is %s but Y '%s' is %s", xn, pe_dtype_name(x->dtype), yn,
                            pe_dtype_name(y->dtype));
    PE_CHECK(pe_cuda_check_on_place(ctx, x, "X", xn));
    PE_CHECK(pe_cuda_check_on_place(ctx, y, "Y", yn));
    pe_bcast_plan pl;
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s', Y '%s': %s", xn, yn, pe_last_error());
    if (pe_tensor_numel(out) != pl.numel || out->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "Out has %lld elements of %s, the broadcast gives %lld of %s",
                            (long long)pe_tensor_numel(out), pe_dtype_name(out->dtype), (long long)pl.numel,
                            pe_dtype_name(x->dtype));
    if (pl.numel == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const void *xd = pe_tensor_data(x), *yd = pe_tensor_data(y);
    void *od = pe_tensor_data(out);
    switch (x->dtype) {
    case PE_DTYPE_FP32: launch_binary<float>(pl, xd, yd, od, s, op); break;
    case PE_DTYPE_FP64: launch_binary<double>(pl, xd, yd, od, s, op); break;
    case PE_DTYPE_INT32: launch_binary<int32_t>(pl, xd, yd, od, s, op); break;
    default: launch_binary<int64_t>(pl, xd, yd, od, s, op); break;
    }
    return pe_cuda_check_launch(ctx);
}

/* X: any shape -> Out: same shape. make_op(T{}) gives the functor for dtype
 * T; Ints allows int32/int64 (scale) besides float32/float64. */
template <bool Ints, typename MakeOp>
pe_status run_unary(const pe_op_ctx *ctx, MakeOp make_op) {
    const bool ints = Ints;
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const char *xn = pe_ctx_in_name(ctx, "X", 0);
    bool ok = x->dtype == PE_DTYPE_FP32 || x->dtype == PE_DTYPE_FP64 ||
              (ints && (x->dtype == PE_DTYPE_INT32 || x->dtype == PE_DTYPE_INT64));
    if (!ok)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; supported: float32, float64%s", xn,
                            pe_dtype_name(x->dtype), ints ? ", int32, int64" : "");
    PE_CHECK(pe_cuda_check_on_place(ctx, x, "X", xn));
    int64_t n = pe_tensor_numel(x);
    if (pe_tensor_numel(out) != n || out->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "Out has %lld elements of %s, X '%s' has %lld of %s",
                            (long long)pe_tensor_numel(out), pe_dtype_name(out->dtype), xn, (long long)n,
                            pe_dtype_name(x->dtype));
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    unsigned g = pe_cuda_blocks(n);
    const void *xd = pe_tensor_data(x);
    void *od = pe_tensor_data(out);
    switch (x->dtype) {
    case PE_DTYPE_FP32:
        k_unary<<<g, PE_CUDA_THREADS, 0, s>>>((const float *)xd, (float *)od, n, make_op(float{}));
        break;
    case PE_DTYPE_FP64:
        k_unary<<<g, PE_CUDA_THREADS, 0, s>>>((const double *)xd, (double *)od, n, make_op(double{}));
        break;
    default:
        if constexpr (Ints) {
            if (x->dtype == PE_DTYPE_INT32)
                k_unary<<<g, PE_CUDA_THREADS, 0, s>>>((const int32_t *)xd, (int32_t *)od, n, make_op(int32_t{}));
            else
                k_unary<<<g, PE_CUDA_THREADS, 0, s>>>((const int64_t *)xd, (int64_t *)od, n, make_op(int64_t{}));
        }
        break;
    }
    return pe_cuda_check_launch(ctx);
}

/* Saturating, NaN-safe double -> integer (the CPU kernel's sat_i32/sat_i64). */
template <typename T> T sat_int(double v) {
    const double lo = (double)std::numeric_limits<T>::min(), hi = (double)std::numeric_limits<T>::max();
    if (v != v) return 0;
    if (v >= hi) return std::numeric_limits<T>::max();
    if (v <= lo) return std::numeric_limits<T>::min();
    return (T)v;
}

/* The scale functor for dtype T from the op's attrs. */
template <typename T> op_scale<T> make_scale(double s, double b, bool after) {
    if constexpr (std::is_integral<T>::value) return op_scale<T>{sat_int<T>(s), sat_int<T>(b), after};
    else return op_scale<T>{(T)s, (T)b, after};
}

/* ---- max, min, pow, mod, floordiv ---------------------------------------- */

/* Paddle's functors, as ops/cpu/elementwise.c: max is a > b ? a : b, min
 * a < b ? a : b (NaN in a picks b). Float pow: powf is glibc's, computed in
 * double and rounded once; pow in double rounded to float is that value in
 * all but the rarest midpoint cases (CUDA's powf is 2 ulp). Integer pow is
 * rint(pow(double, double)) saturated to the type. */
struct op_max {
    template <typename T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct op_min {
    template <typename T> __device__ T operator()(T a, T b) const { return a < b ? a : b; }
};

/* Saturating, NaN-safe double -> integer (the CPU kernel's sat_i32/sat_i64). */
__device__ inline int64_t d_sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
__device__ inline int32_t d_sat_i32(double v) {
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}

struct op_pow {
    __device__ float operator()(float a, float b) const { return (float)pow((double)a, (double)b); }
    __device__ double operator()(double a, double b) const { return pow(a, b); }
    __device__ int32_t operator()(int32_t a, int32_t b) const { return d_sat_i32(rint(pow((double)a, (double)b))); }
    __device__ int64_t operator()(int64_t a, int64_t b) const { return d_sat_i64(rint(pow((double)a, (double)b))); }
};

/* mod takes the sign of the divisor (Python's %; fmod for floats); floordiv
 * rounds toward -inf (Python's //, the float form from fmod as Paddle >= 2.6
 * and torch). Integer x % -1 == 0, x // -1 wraps like x / -1; a zero integer
 * divisor is refused on the host before the launch (as the CPU kernel does),
 * the 0 results below only keep the device code defined. */
struct op_mod {
    template <typename T> __device__ T operator()(T a, T b) const {
        if constexpr (std::is_integral<T>::value) {
            if (b == 0 || b == -1) return 0;
            T r = a % b;
            return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
        } else {
            T r = fmod(a, b);
            return r != 0 && ((b < 0) != (r < 0)) ? r + b : r;
        }
    }
};
struct op_floordiv {
    template <typename T> __device__ T operator()(T a, T b) const {
        if constexpr (std::is_integral<T>::value) {
            if (b == 0) return 0;
            if (b == -1) return op_div{}(a, b);
            return a % b != 0 && ((a < 0) != (b < 0)) ? a / b - 1 : a / b;
        } else {
            if (b == 0) return a / b;
            T m = fmod(a, b), d = (a - m) / b;
            if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
            if (d == 0) return copysign((T)0, a / b);
            T f = floor(d);
            return d - f > (T)0.5 ? f + 1 : f;
        }
    }
};

/* ---- compare and logical ops (bool Out) --------------------------------- */

/* Paddle's: float equality is |a - b| < 1e-8 (in double), exact on inf,
 * false on NaN; bool operands compare as 0/1 (cmp_on_bool). */
struct cmp_eq {
    template <typename T> __device__ uint8_t operator()(T a, T b) const {
        if constexpr (std::is_floating_point<T>::value)
            return (uint8_t)(isinf(a) || isinf(b) ? a == b : fabs((double)a - (double)b) < 1e-8);
        else return (uint8_t)(a == b);
    }
};
struct cmp_ne {
    template <typename T> __device__ uint8_t operator()(T a, T b) const { return (uint8_t)!cmp_eq{}(a, b); }
};
struct cmp_lt {
    template <typename T> __device__ uint8_t operator()(T a, T b) const { return (uint8_t)(a < b); }
};
struct cmp_le {
    template <typename T> __device__ uint8_t operator()(T a, T b) const { return (uint8_t)(a <= b); }
};
struct cmp_gt {
    template <typename T> __device__ uint8_t operator()(T a, T b) const { return (uint8_t)(a > b); }
};
struct cmp_ge {
    template <typename T> __device__ uint8_t operator()(T a, T b) const { return (uint8_t)(a >= b); }
};
/* Bool inputs read any non-zero byte as 1. */
template <typename Cmp> struct cmp_on_bool {
    Cmp cmp;
    __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return cmp((uint8_t)(a != 0), (uint8_t)(b != 0)); }
};
struct log_and {
    __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return (uint8_t)(a != 0 && b != 0); }
};
struct log_or {
    __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return (uint8_t)(a != 0 || b != 0); }
};
struct log_xor {
    __device__ uint8_t operator()(uint8_t a, uint8_t b) const { return (uint8_t)((a != 0) != (b != 0)); }
};

/* ---- host side of the binary ops beyond add/sub/mul/div ------------------- */

/* y: [n] -> *flag = 1 when some y[i] == 0 (every writer stores 1: no race on the value). */
template <typename T> __global__ void k_any_zero(const T *y, int64_t n, int *flag) {
    PE_CUDA_LOOP(i, n) {
        if (y[i] == 0) *flag = 1;
    }
}

/* Integer elementwise_mod / floordiv by 0 is refused, as on the CPU (Paddle
 * throws): a flag computed on the device and read back — a synchronization
 * of the stream, only for integer mod/floordiv. */
pe_status refuse_int_zero(const pe_op_ctx *ctx, const pe_tensor *y, cudaStream_t s) {
    if (y->dtype != PE_DTYPE_INT32 && y->dtype != PE_DTYPE_INT64) return PE_OK;
    const int64_t n = pe_tensor_numel(y);
    if (n == 0) return PE_OK;
    pe_cuda_temp tmp(ctx, sizeof(int));
    if (!tmp.ok(sizeof(int))) return PE_ERR_NOMEM;
    int *flag = tmp.get<int>(), host = 0;
    PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(flag, 0, sizeof(int), s), "cudaMemsetAsync"));
    if (y->dtype == PE_DTYPE_INT32)
        k_any_zero<<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((const int32_t *)pe_tensor_data(y), n, flag);
    else
        k_any_zero<<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((const int64_t *)pe_tensor_data(y), n, flag);
    PE_CHECK(pe_cuda_check_launch(ctx));
    PE_CHECK(pe_cuda_check(ctx, cudaMemcpyAsync(&host, flag, sizeof(int), cudaMemcpyDeviceToHost, s),
                           "cudaMemcpyAsync"));
    PE_CHECK(pe_cuda_check(ctx, cudaStreamSynchronize(s), "cudaStreamSynchronize"));
    if (host)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Y '%s' holds a 0: integer division by zero",
                            pe_ctx_in_name(ctx, "Y", 0));
    return PE_OK;
}

/* X, Y (one dtype of {float32, float64, int32, int64, and bool when Bool}),
 * broadcast per `axis` (-1 for the logical ops, which have no attr) ->
 * Out (uint8_t bool when ToBool, else X's dtype). make_op(T{}) gives the
 * functor for element type T. */
template <bool ToBool, bool Bool, bool Nums, typename MakeOp>
pe_status run_binary_to(const pe_op_ctx *ctx, int axis, bool refuse_zero, MakeOp make_op) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const char *xn = pe_ctx_in_name(ctx, "X", 0), *yn = pe_ctx_in_name(ctx, "Y", 0);
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_dtype dt = x->dtype;
    const bool num = dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 || dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64;
    if (!((Nums && num) || (Bool && dt == PE_DTYPE_BOOL)))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; supported: %s", xn, pe_dtype_name(dt),
                            Nums ? (Bool ? "float32, float64, int32, int64, bool" : "float32, float64, int32, int64")
                                 : "bool");
    if (y->dtype != dt)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is %s but Y '%s' is %s", xn, pe_dtype_name(dt), yn,
                            pe_dtype_name(y->dtype));
    pe_bcast_plan pl;
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, axis, &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s', Y '%s': %s", xn, yn, pe_last_error());
    const pe_dtype odt = ToBool ? PE_DTYPE_BOOL : dt;
    if (pe_tensor_numel(out) != pl.numel || out->dtype != odt)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "Out has %lld elements of %s, the broadcast gives %lld of %s",
                            (long long)pe_tensor_numel(out), pe_dtype_name(out->dtype), (long long)pl.numel,
                            pe_dtype_name(odt));
    if (pl.numel == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (refuse_zero) PE_CHECK(refuse_int_zero(ctx, y, s));
    const void *xd = pe_tensor_data(x), *yd = pe_tensor_data(y);
    void *od = pe_tensor_data(out);
    using TB = uint8_t; /* bool storage */
    switch (dt) {
    case PE_DTYPE_FP32:
        if constexpr (Nums) launch_binary<float, std::conditional_t<ToBool, TB, float>>(pl, xd, yd, od, s, make_op(float{}));
        break;
    case PE_DTYPE_FP64:
        if constexpr (Nums) launch_binary<double, std::conditional_t<ToBool, TB, double>>(pl, xd, yd, od, s, make_op(double{}));
        break;
    case PE_DTYPE_INT32:
        if constexpr (Nums) launch_binary<int32_t, std::conditional_t<ToBool, TB, int32_t>>(pl, xd, yd, od, s, make_op(int32_t{}));
        break;
    case PE_DTYPE_INT64:
        if constexpr (Nums) launch_binary<int64_t, std::conditional_t<ToBool, TB, int64_t>>(pl, xd, yd, od, s, make_op(int64_t{}));
        break;
    default: /* bool */
        if constexpr (Bool) launch_binary<TB, TB>(pl, xd, yd, od, s, make_op(bool{}));
        break;
    }
    return pe_cuda_check_launch(ctx);
}

/* The arithmetic ops' functor for T (bool never reaches them). */
template <typename Op> auto arith(Op op) {
    return [op](auto) { return op; };
}
/* A compare functor for T; bool (tagged by a `bool` argument) compares 0/1. */
template <typename Cmp> auto compare() {
    return [](auto t) {
        if constexpr (std::is_same<decltype(t), bool>::value) return cmp_on_bool<Cmp>{Cmp{}};
        else return Cmp{};
    };
}

/* ---- logical_not, where, where_grad, cast ------------------------------- */

/* x: [n] bool -> out: [n] bool */
__global__ void k_logical_not(const uint8_t *x, uint8_t *out, int64_t n) {
    PE_CUDA_LOOP(i, n) out[i] = (uint8_t)!x[i];
}

/* c: [n] bool, x, y, out: [n] (bits of a 4- or 8-byte element) */
template <typename T> __global__ void k_where(const uint8_t *c, const T *x, const T *y, T *out, int64_t n) {
    PE_CUDA_LOOP(i, n) out[i] = c[i] ? x[i] : y[i];
}

/* c, g: [n] -> dx (g where c, else 0), dy (the rest); either may be NULL.
 * Integer 0 has the bits of float 0, so T is the unsigned of the size. */
template <typename T> __global__ void k_where_grad(const uint8_t *c, const T *g, T *dx, T *dy, int64_t n) {
    PE_CUDA_LOOP(i, n) {
        const T v = g[i];
        const bool k = c[i] != 0;
        if (dx) dx[i] = k ? v : (T)0;
        if (dy) dy[i] = k ? (T)0 : v;
    }
}

/* The C type of a dtype of cast (bool as its byte). */
template <int DT> struct dt_type;
template <> struct dt_type<PE_DTYPE_FP32> { using type = float; };
template <> struct dt_type<PE_DTYPE_FP64> { using type = double; };
template <> struct dt_type<PE_DTYPE_INT32> { using type = int32_t; };
template <> struct dt_type<PE_DTYPE_INT64> { using type = int64_t; };
template <> struct dt_type<PE_DTYPE_UINT8> { using type = uint8_t; };
template <> struct dt_type<PE_DTYPE_BOOL> { using type = uint8_t; };

/* The CPU kernel's conversions: a float source goes through double (float
 * -> int truncates, NaN -> 0, saturates; -> uint8 through int64, then wraps
 * mod 256; -> bool is v != 0, NaN -> true); an integer or bool source goes
 * through int64 (bool: any non-zero byte is 1; -> narrower int wraps). */
template <int S, int D> __device__ inline typename dt_type<D>::type cast_one(typename dt_type<S>::type v) {
    using DT = typename dt_type<D>::type;
    if constexpr (S == PE_DTYPE_FP32 || S == PE_DTYPE_FP64) {
        const double f = (double)v;
        if constexpr (D == PE_DTYPE_FP32) return (float)f;
        else if constexpr (D == PE_DTYPE_FP64) return f;
        else if constexpr (D == PE_DTYPE_INT32) return d_sat_i32(f);
        else if constexpr (D == PE_DTYPE_INT64) return d_sat_i64(f);
        else if constexpr (D == PE_DTYPE_UINT8) return (DT)(uint64_t)d_sat_i64(f);
        else return (DT)(f != 0);
    } else {
        const int64_t i = S == PE_DTYPE_BOOL ? (int64_t)(v != 0) : (int64_t)v;
        if constexpr (D == PE_DTYPE_FP32) return (float)i;
        else if constexpr (D == PE_DTYPE_FP64) return (double)i;
        else if constexpr (D == PE_DTYPE_INT32) return (int32_t)(uint32_t)(uint64_t)i;
        else if constexpr (D == PE_DTYPE_INT64) return i;
        else if constexpr (D == PE_DTYPE_UINT8) return (DT)(uint64_t)i;
        else return (DT)(i != 0);
    }
}

/* x: [n] of S -> out: [n] of D */
template <int S, int D>
__global__ void k_cast(const typename dt_type<S>::type *x, typename dt_type<D>::type *out, int64_t n) {
    PE_CUDA_LOOP(i, n) out[i] = cast_one<S, D>(x[i]);
}

template <int S>
bool cast_from(pe_dtype dst, const void *x, void *out, int64_t n, cudaStream_t s) {
    using ST = typename dt_type<S>::type;
    const unsigned g = pe_cuda_blocks(n);
    switch (dst) {
#define PE_CAST_TO(D)                                                                                        \
    case D: k_cast<S, D><<<g, PE_CUDA_THREADS, 0, s>>>((const ST *)x, (typename dt_type<D>::type *)out, n); break;
    PE_CAST_TO(PE_DTYPE_FP32)
    PE_CAST_TO(PE_DTYPE_FP64)
    PE_CAST_TO(PE_DTYPE_INT32)
    PE_CAST_TO(PE_DTYPE_INT64)
    PE_CAST_TO(PE_DTYPE_UINT8)
    PE_CAST_TO(PE_DTYPE_BOOL)
#undef PE_CAST_TO
    default: return false;
    }
    return true;
}

/* x: [n] of src -> out: [n] of dst, the six dtypes of the CPU cast; false
 * for another dtype (nothing launched). */
bool cast_launch(pe_dtype src, pe_dtype dst, const void *x, void *out, int64_t n, cudaStream_t s) {
    switch (src) {
    case PE_DTYPE_FP32: return cast_from<PE_DTYPE_FP32>(dst, x, out, n, s);
    case PE_DTYPE_FP64: return cast_from<PE_DTYPE_FP64>(dst, x, out, n, s);
    case PE_DTYPE_INT32: return cast_from<PE_DTYPE_INT32>(dst, x, out, n, s);
    case PE_DTYPE_INT64: return cast_from<PE_DTYPE_INT64>(dst, x, out, n, s);
    case PE_DTYPE_UINT8: return cast_from<PE_DTYPE_UINT8>(dst, x, out, n, s);
    case PE_DTYPE_BOOL: return cast_from<PE_DTYPE_BOOL>(dst, x, out, n, s);
    default: return false;
    }
}

/* x -> out (n elements): a device copy when the dtypes are equal and
 * `copy_same` (cast copies unless bool -> bool, which normalizes to 0/1;
 * cast_grad always copies), else the conversion kernel. */
pe_status run_cast(const pe_op_ctx *ctx, const pe_tensor *x, pe_tensor *out, bool copy_same) {
    const int64_t n = pe_tensor_numel(x);
    if (pe_tensor_numel(out) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (copy_same && x->dtype == out->dtype) {
        if (pe_tensor_data(out) == pe_tensor_data(x)) return PE_OK;
        return pe_cuda_check(ctx,
                             cudaMemcpyAsync(pe_tensor_data(out), pe_tensor_data(x), pe_tensor_nbytes(x),
                                             cudaMemcpyDeviceToDevice, s),
                             "cudaMemcpyAsync");
    }
    if (!cast_launch(x->dtype, out->dtype, pe_tensor_data(x), pe_tensor_data(out), n, s))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "cast from %s to %s is not supported", pe_dtype_name(x->dtype),
                            pe_dtype_name(out->dtype));
    return pe_cuda_check_launch(ctx);
}

/* ---- activation gradients from Out --------------------------------------- */

/* Products rounded on their own (no FMA contraction), as the CPU computes. */
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }

/* ops/cpu/fused_act.h's PE_FUSED_{RELU,SIGMOID,TANH}_G(o, g). */
struct act_g_relu {
    template <typename T> __device__ T operator()(T o, T g) const { return o > 0 ? g : (T)0; }
};
struct act_g_sigmoid {
    template <typename T> __device__ T operator()(T o, T g) const { return mul_rn(mul_rn(g, o), (T)1 - o); }
};
struct act_g_tanh {
    template <typename T> __device__ T operator()(T o, T g) const { return mul_rn(g, (T)1 - mul_rn(o, o)); }
};

/* o, g, dx: [n]; dx may be g (in place: each element read before written). */
template <typename T, typename G> __global__ void k_act_grad(const T *o, const T *g, T *dx, int64_t n, G f) {
    PE_CUDA_LOOP(i, n) {
        const T o_ = o[i], g_ = g[i];
        dx[i] = f(o_, g_);
    }
}

/* Out [..], Out@GRAD [..] -> X@GRAD [..], float32 / float64. */
template <typename G> pe_status run_act_grad(const pe_op_ctx *ctx, G f) {
    const pe_tensor *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(o);
    if (g->dtype != o->dtype || dx->dtype != o->dtype || pe_tensor_numel(g) != n || pe_tensor_numel(dx) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, o->dtype, "Out", T,
                        k_act_grad<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
                            (const T *)pe_tensor_data(o), (const T *)pe_tensor_data(g), (T *)pe_tensor_data(dx), n, f));
    return pe_cuda_check_launch(ctx);
}

/* ---- gradients of the binary ops ---------------------------------------- */

/* The contribution of one output element to dX or dY: g = dOut, a = x,
 * b = y (ops/cpu/elementwise.c's GX_* / GY_*). rx / ry: whether the
 * functor reads x / y — add and sub read neither (their X and Y may be
 * reused by the memory plan before the op runs: "-X -Y"). The float32
 * pow terms are double, as in C (pow and log of double). */
struct g_pass { /* GX_ADD, GY_ADD */
    static constexpr bool rx = false, ry = false;
    template <typename T> __device__ T operator()(T g, T, T) const { return g; }
};
struct g_neg { /* GY_SUB */
    static constexpr bool rx = false, ry = false;
    template <typename T> __device__ T operator()(T g, T, T) const { return -g; }
};
struct gx_mul {
    static constexpr bool rx = false, ry = true;
    template <typename T> __device__ T operator()(T g, T, T b) const { return mul_rn(g, b); }
};
struct gy_mul {
    static constexpr bool rx = true, ry = false;
    template <typename T> __device__ T operator()(T g, T a, T) const { return mul_rn(g, a); }
};
struct gx_div {
    static constexpr bool rx = false, ry = true;
    template <typename T> __device__ T operator()(T g, T, T b) const { return g / b; }
};
struct gy_div { /* -(g) * (a) / ((b) * (b)) */
    static constexpr bool rx = true, ry = true;
    template <typename T> __device__ T operator()(T g, T a, T b) const { return mul_rn(-g, a) / mul_rn(b, b); }
};
/* Paddle's MaxGradDx/Dy, MinGradDx/Dy: a tie sends the gradient to Y. */
struct gx_max {
    static constexpr bool rx = true, ry = true;
    template <typename T> __device__ T operator()(T g, T a, T b) const { return a > b ? g : (T)0; }
};
struct gy_max {
    static constexpr bool rx = true, ry = true;
    template <typename T> __device__ T operator()(T g, T a, T b) const { return a <= b ? g : (T)0; }
};
struct gx_min {
    static constexpr bool rx = true, ry = true;
    template <typename T> __device__ T operator()(T g, T a, T b) const { return a < b ? g : (T)0; }
};
struct gy_min {
    static constexpr bool rx = true, ry = true;
    template <typename T> __device__ T operator()(T g, T a, T b) const { return a >= b ? g : (T)0; }
};
struct gx_pow { /* (g) * (b) * pow((a), (b) - 1) */
    static constexpr bool rx = true, ry = true;
    template <typename T> __device__ double operator()(T g, T a, T b) const {
        return __dmul_rn((double)mul_rn(g, b), pow((double)a, (double)(b - (T)1)));
    }
};
struct gy_pow { /* (g) * log(a) * pow((a), (b)) */
    static constexpr bool rx = true, ry = true;
    template <typename T> __device__ double operator()(T g, T a, T b) const {
        return __dmul_rn(__dmul_rn((double)g, log((double)a)), pow((double)a, (double)b));
    }
};

/* One side of a binary grad (side 0: dX, 1: dY) over the plan's general
 * iteration space: the side's element at the kept dims (its stride != 0)
 * is the sum, over the reduced dims (stride 0: broadcast), of the terms of
 * the output elements that read it. ostr: out's row-major strides. */
struct grad_side {
    int nd, nk, nr;
    int kept[PE_MAX_DIMS], red[PE_MAX_DIMS];
    int64_t dims[PE_MAX_DIMS], ostr[PE_MAX_DIMS], xs[PE_MAX_DIMS], ys[PE_MAX_DIMS];
    int64_t nkept, nred;
};

grad_side make_grad_side(const pe_bcast_plan &pl, int side) {
    grad_side gs;
    gs.nd = pl.ndim;
    gs.nk = gs.nr = 0;
    gs.nkept = gs.nred = 1;
    int64_t st = 1;
    for (int d = pl.ndim - 1; d >= 0; d--) {
        gs.ostr[d] = st;
        st *= pl.dims[d];
    }
    for (int d = 0; d < pl.ndim; d++) {
        gs.dims[d] = pl.dims[d];
        gs.xs[d] = pl.x_strides[d];
        gs.ys[d] = pl.y_strides[d];
        if ((side ? pl.y_strides[d] : pl.x_strides[d]) != 0) {
            gs.kept[gs.nk++] = d;
            gs.nkept *= pl.dims[d];
        } else {
            gs.red[gs.nr++] = d;
            gs.nred *= pl.dims[d];
        }
    }
    return gs;
}

/* Offsets in out, x, y of the multi-index `lin` over the dims `which`
 * (row-major in that order): pe_bcast_offsets on the device. */
__device__ inline void gs_offsets(const grad_side &gs, const int *which, int nw, int64_t lin, int64_t *oo,
                                  int64_t *xo, int64_t *yo) {
    int64_t o = 0, xa = 0, ya = 0;
    for (int j = nw - 1; j >= 0; j--) {
        const int d = which[j];
        const int64_t i = lin % gs.dims[d];
        lin /= gs.dims[d];
        o += i * gs.ostr[d];
        xa += i * gs.xs[d];
        ya += i * gs.ys[d];
    }
    *oo = o;
    *xo = xa;
    *yo = ya;
}

/* The term of one output element; x and y are read only when G needs them. */
template <typename T, typename G>
__device__ inline auto grad_term(G f, const T *g, const T *x, const T *y, int64_t oo, int64_t xo, int64_t yo) {
    return f(g[oo], G::rx ? x[xo] : (T)0, G::ry ? y[yo] : (T)0);
}

/* Not broadcast: dst[t] = term, t over the side's elements (= out's). */
template <typename T, typename G>
__global__ void k_grad_direct(const T *g, const T *x, const T *y, T *dst, grad_side gs, int side, G f) {
    PE_CUDA_LOOP(t, gs.nkept) {
        int64_t oo, xo, yo;
        gs_offsets(gs, gs.kept, gs.nk, t, &oo, &xo, &yo);
        dst[side ? yo : xo] = (T)grad_term<T>(f, g, x, y, oo, xo, yo);
    }
}

/* Broadcast, one thread per element of the side: the sum over the reduced
 * dims in output order, in double (as the CPU). For many outputs or short
 * sums (adjacent threads read adjacent columns of a row bias). */
template <typename T, typename G>
__global__ void k_grad_sum_thread(const T *g, const T *x, const T *y, T *dst, grad_side gs, int side, G f) {
    PE_CUDA_LOOP(t, gs.nkept) {
        int64_t ob, xb, yb;
        gs_offsets(gs, gs.kept, gs.nk, t, &ob, &xb, &yb);
        double acc = 0;
        for (int64_t r = 0; r < gs.nred; r++) {
            int64_t oo, xo, yo;
            gs_offsets(gs, gs.red, gs.nr, r, &oo, &xo, &yo);
            acc += (double)grad_term<T>(f, g, x, y, ob + oo, xb + xo, yb + yo);
        }
        dst[side ? yb : xb] = (T)acc;
    }
}

/* Broadcast, blocks per element of the side: block (t, p) sums the
 * reduced elements [p * chunk, (p + 1) * chunk) of element t — thread k
 * the ones k, k + blockDim, ... in order, then a fixed tree in shared
 * memory — the same order on every run. One part (gridDim.y == 1): the sum
 * goes to dst; several: to part[t * gridDim.y + p], which k_grad_sum_parts
 * adds in order. For few outputs with long sums (scalar Y, per-channel
 * bias). */
template <typename T, typename G>
__global__ void k_grad_sum_block(const T *g, const T *x, const T *y, T *dst, double *part, int64_t chunk,
                                 grad_side gs, int side, G f) {
    __shared__ double sh[PE_CUDA_THREADS];
    const int64_t p = blockIdx.y, r0 = p * chunk, r1 = r0 + chunk < gs.nred ? r0 + chunk : gs.nred;
    for (int64_t t = blockIdx.x; t < gs.nkept; t += gridDim.x) {
        int64_t ob, xb, yb;
        gs_offsets(gs, gs.kept, gs.nk, t, &ob, &xb, &yb);
        double acc = 0;
        for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
            int64_t oo, xo, yo;
            gs_offsets(gs, gs.red, gs.nr, r, &oo, &xo, &yo);
            acc += (double)grad_term<T>(f, g, x, y, ob + oo, xb + xo, yb + yo);
        }
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            if (gridDim.y == 1) dst[side ? yb : xb] = (T)sh[0];
            else part[t * gridDim.y + p] = sh[0];
        }
        __syncthreads();
    }
}

/* part: [nkept, nparts] -> dst at element t's offset: the parts added in order. */
template <typename T>
__global__ void k_grad_sum_parts(const double *part, int nparts, T *dst, grad_side gs, int side) {
    PE_CUDA_LOOP(t, gs.nkept) {
        int64_t ob, xb, yb;
        gs_offsets(gs, gs.kept, gs.nk, t, &ob, &xb, &yb);
        double acc = 0;
        for (int p = 0; p < nparts; p++) acc += part[t * nparts + p];
        dst[side ? yb : xb] = (T)acc;
    }
}

/* Launches one side's gradient (numel > 0). The kernel and the split of a
 * long sum into parts (scratch from ctx's place) follow from the shapes
 * alone, so the result repeats bit for bit. */
#define PE_GRAD_PART 65536 /* reduced elements per block when an output's sum is split */
template <typename T, typename G>
pe_status launch_grad_side(const pe_op_ctx *ctx, const pe_bcast_plan &pl, int side, const void *g, const void *x,
                           const void *y, void *dst, cudaStream_t s, G f) {
    const grad_side gs = make_grad_side(pl, side);
    const T *gp = (const T *)g, *xp = (const T *)x, *yp = (const T *)y;
    T *dp = (T *)dst;
    if (gs.nr == 0) {
        k_grad_direct<T><<<pe_cuda_blocks(gs.nkept), PE_CUDA_THREADS, 0, s>>>(gp, xp, yp, dp, gs, side, f);
        return PE_OK;
    }
    if (gs.nred <= 64 || gs.nkept >= 16384) {
        k_grad_sum_thread<T><<<pe_cuda_blocks(gs.nkept), PE_CUDA_THREADS, 0, s>>>(gp, xp, yp, dp, gs, side, f);
        return PE_OK;
    }
    /* few outputs (< 128) with long sums: split each sum into parts of PE_GRAD_PART */
    int64_t nparts = gs.nkept < 128 ? (gs.nred + PE_GRAD_PART - 1) / PE_GRAD_PART : 1;
    if (nparts > 1024) nparts = 1024;
    const int64_t chunk = (gs.nred + nparts - 1) / nparts;
    const unsigned nb = (unsigned)(gs.nkept < 65535 ? gs.nkept : 65535);
    if (nparts == 1) {
        k_grad_sum_block<T><<<dim3(nb, 1), PE_CUDA_THREADS, 0, s>>>(gp, xp, yp, dp, nullptr, chunk, gs, side, f);
        return PE_OK;
    }
    const size_t bytes = (size_t)gs.nkept * (size_t)nparts * sizeof(double);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    k_grad_sum_block<T><<<dim3(nb, (unsigned)nparts), PE_CUDA_THREADS, 0, s>>>(gp, xp, yp, dp, tmp.get<double>(),
                                                                               chunk, gs, side, f);
    k_grad_sum_parts<T><<<pe_cuda_blocks(gs.nkept), PE_CUDA_THREADS, 0, s>>>(tmp.get<double>(), (int)nparts, dp,
                                                                            gs, side);
    return PE_OK;
}

/* X [..], Y [..], Out@GRAD [broadcast] -> X@GRAD [X's dims]?, Y@GRAD [Y's dims]?
 * float32 / float64 (the CPU kernel's dtypes). */
template <typename GX, typename GY> pe_status run_binary_grad(const pe_op_ctx *ctx, GX gx, GY gy) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_bcast_plan pl;
    if (pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s', Y '%s': %s", pe_ctx_in_name(ctx, "X", 0),
                            pe_ctx_in_name(ctx, "Y", 0), pe_last_error());
    if (y->dtype != x->dtype || g->dtype != x->dtype || pe_tensor_numel(g) != pl.numel ||
        (dx && (dx->dtype != x->dtype || pe_tensor_numel(dx) != pe_tensor_numel(x))) ||
        (dy && (dy->dtype != y->dtype || pe_tensor_numel(dy) != pe_tensor_numel(y))))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; supported: float32, float64",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    if (!dx && !dy) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (pl.numel == 0) { /* nothing reaches X or Y: their gradients are zero */
        if (dx && pe_tensor_nbytes(dx))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx), s),
                                   "cudaMemsetAsync"));
        if (dy && pe_tensor_nbytes(dy))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dy), 0, pe_tensor_nbytes(dy), s),
                                   "cudaMemsetAsync"));
        return PE_OK;
    }
    const void *xd = pe_tensor_data(x), *yd = pe_tensor_data(y), *gd = pe_tensor_data(g);
    if (x->dtype == PE_DTYPE_FP32) {
        if (dx) PE_CHECK(launch_grad_side<float>(ctx, pl, 0, gd, xd, yd, pe_tensor_data(dx), s, gx));
        if (dy) PE_CHECK(launch_grad_side<float>(ctx, pl, 1, gd, xd, yd, pe_tensor_data(dy), s, gy));
    } else {
        if (dx) PE_CHECK(launch_grad_side<double>(ctx, pl, 0, gd, xd, yd, pe_tensor_data(dx), s, gx));
        if (dy) PE_CHECK(launch_grad_side<double>(ctx, pl, 1, gd, xd, yd, pe_tensor_data(dy), s, gy));
    }
    return pe_cuda_check_launch(ctx);
}

} // namespace

/* For ops/cuda/fused_elemwise.cu: dst (side 0: X's shape, 1: Y's) = the sum
 * of g (the plan's output shape, float32 or float64 as f64 says) over that
 * side's broadcast dims — elementwise_add_grad's dX / dY, same order. Queued
 * on s (scratch from ctx's place); the caller checks the launch. Requires
 * pl.numel > 0. */
pe_status pe_cuda_ew_sum_to_side(const pe_op_ctx *ctx, const pe_bcast_plan *pl, int side, bool f64, const void *g,
                                 void *dst, cudaStream_t s) {
    if (f64) return launch_grad_side<double>(ctx, *pl, side, g, nullptr, nullptr, dst, s, g_pass{});
    return launch_grad_side<float>(ctx, *pl, side, g, nullptr, nullptr, dst, s, g_pass{});
}

/* For ops/cuda/fused_elemwise.cu: dx[i] = act'(out) * g, the expression of
 * relu_grad (act 1), sigmoid_grad (2) or tanh_grad (3) — ops/cpu/fused_act.h's
 * PE_FACT_* numbering — on float32 or float64 as f64 says; dx may be g.
 * Queued on s; the caller checks the launch. Requires n > 0. */
void pe_cuda_act_grad_launch(int act, bool f64, const void *o, const void *g, void *dx, int64_t n, cudaStream_t s) {
    const unsigned b = pe_cuda_blocks(n);
    if (f64) {
        const double *op = (const double *)o, *gp = (const double *)g;
        double *dp = (double *)dx;
        if (act == 1) k_act_grad<<<b, PE_CUDA_THREADS, 0, s>>>(op, gp, dp, n, act_g_relu{});
        else if (act == 2) k_act_grad<<<b, PE_CUDA_THREADS, 0, s>>>(op, gp, dp, n, act_g_sigmoid{});
        else k_act_grad<<<b, PE_CUDA_THREADS, 0, s>>>(op, gp, dp, n, act_g_tanh{});
    } else {
        const float *op = (const float *)o, *gp = (const float *)g;
        float *dp = (float *)dx;
        if (act == 1) k_act_grad<<<b, PE_CUDA_THREADS, 0, s>>>(op, gp, dp, n, act_g_relu{});
        else if (act == 2) k_act_grad<<<b, PE_CUDA_THREADS, 0, s>>>(op, gp, dp, n, act_g_sigmoid{});
        else k_act_grad<<<b, PE_CUDA_THREADS, 0, s>>>(op, gp, dp, n, act_g_tanh{});
    }
}

namespace {

} // namespace

extern "C" {

pe_status pe_cuda_elementwise_add(const pe_op_ctx *ctx) { return run_binary(ctx, op_add{}); }
pe_status pe_cuda_elementwise_sub(const pe_op_ctx *ctx) { return run_binary(ctx, op_sub{}); }
pe_status pe_cuda_elementwise_mul(const pe_op_ctx *ctx) { return run_binary(ctx, op_mul{}); }
pe_status pe_cuda_elementwise_div(const pe_op_ctx *ctx) { return run_binary(ctx, op_div{}); }

/* X: any shape -> Out: same shape (float32, float64, as on CPU). */
pe_status pe_cuda_relu(const pe_op_ctx *ctx) {
    return run_unary<false>(ctx, [](auto) { return op_relu{}; });
}
pe_status pe_cuda_sigmoid(const pe_op_ctx *ctx) {
    return run_unary<false>(ctx, [](auto) { return op_sigmoid{}; });
}
pe_status pe_cuda_tanh(const pe_op_ctx *ctx) {
    return run_unary<false>(ctx, [](auto) { return op_tanh{}; });
}

/* X: any shape -> Out = scale*X + bias (or scale*(X + bias)). */
pe_status pe_cuda_scale(const pe_op_ctx *ctx) {
    const double s = pe_ctx_float(ctx, "scale"), b = pe_ctx_float(ctx, "bias");
    const bool after = pe_ctx_bool(ctx, "bias_after_scale");
    return run_unary<true>(ctx, [=](auto t) { return make_scale<decltype(t)>(s, b, after); });
}

/* X [..], Y [..] (one dtype) -> Out [broadcast]; see ops/elementwise.h.
 * float32, float64, int32, int64. Integer mod / floordiv refuse a 0 in Y. */
pe_status pe_cuda_elementwise_max(const pe_op_ctx *ctx) {
    return run_binary_to<false, false, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, arith(op_max{}));
}
pe_status pe_cuda_elementwise_min(const pe_op_ctx *ctx) {
    return run_binary_to<false, false, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, arith(op_min{}));
}
pe_status pe_cuda_elementwise_pow(const pe_op_ctx *ctx) {
    return run_binary_to<false, false, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, arith(op_pow{}));
}
pe_status pe_cuda_elementwise_mod(const pe_op_ctx *ctx) {
    return run_binary_to<false, false, true>(ctx, (int)pe_ctx_int(ctx, "axis"), true, arith(op_mod{}));
}
pe_status pe_cuda_elementwise_floordiv(const pe_op_ctx *ctx) {
    return run_binary_to<false, false, true>(ctx, (int)pe_ctx_int(ctx, "axis"), true, arith(op_floordiv{}));
}

/* X [..], Y [..] (one dtype: float32, float64, int32, int64, bool) -> Out [broadcast] bool */
pe_status pe_cuda_equal(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, compare<cmp_eq>());
}
pe_status pe_cuda_not_equal(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, compare<cmp_ne>());
}
pe_status pe_cuda_less_than(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, compare<cmp_lt>());
}
pe_status pe_cuda_less_equal(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, compare<cmp_le>());
}
pe_status pe_cuda_greater_than(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, compare<cmp_gt>());
}
pe_status pe_cuda_greater_equal(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, true>(ctx, (int)pe_ctx_int(ctx, "axis"), false, compare<cmp_ge>());
}

/* X [..] bool, Y [..] bool -> Out [broadcast] bool (trailing alignment, axis -1) */
pe_status pe_cuda_logical_and(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, false>(ctx, -1, false, arith(log_and{}));
}
pe_status pe_cuda_logical_or(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, false>(ctx, -1, false, arith(log_or{}));
}
pe_status pe_cuda_logical_xor(const pe_op_ctx *ctx) {
    return run_binary_to<true, true, false>(ctx, -1, false, arith(log_xor{}));
}

/* X [..] bool -> Out [..] bool */
pe_status pe_cuda_logical_not(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (x->dtype != PE_DTYPE_BOOL || out->dtype != PE_DTYPE_BOOL || pe_tensor_numel(out) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    k_logical_not<<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((const uint8_t *)pe_tensor_data(x),
                                                               (uint8_t *)pe_tensor_data(out), n);
    return pe_cuda_check_launch(ctx);
}

/* Condition [..] bool, X [..], Y [..] (one 4- or 8-byte dtype) -> Out [..]; no broadcasting. */
pe_status pe_cuda_where(const pe_op_ctx *ctx) {
    const pe_tensor *c = pe_ctx_in(ctx, "Condition"), *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(out);
    const size_t es = pe_dtype_size(x->dtype);
    if (c->dtype != PE_DTYPE_BOOL || y->dtype != x->dtype || out->dtype != x->dtype || (es != 4 && es != 8) ||
        pe_tensor_numel(c) != n || pe_tensor_numel(x) != n || pe_tensor_numel(y) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const uint8_t *cd = (const uint8_t *)pe_tensor_data(c);
    const unsigned g = pe_cuda_blocks(n);
    if (es == 8)
        k_where<<<g, PE_CUDA_THREADS, 0, s>>>(cd, (const uint64_t *)pe_tensor_data(x),
                                              (const uint64_t *)pe_tensor_data(y), (uint64_t *)pe_tensor_data(out), n);
    else
        k_where<<<g, PE_CUDA_THREADS, 0, s>>>(cd, (const uint32_t *)pe_tensor_data(x),
                                              (const uint32_t *)pe_tensor_data(y), (uint32_t *)pe_tensor_data(out), n);
    return pe_cuda_check_launch(ctx);
}

/* Condition [..], Out@GRAD [..] -> X@GRAD? [..] (g where c, else 0), Y@GRAD? [..] (the rest).
 * X and Y are read for their meta only. */
pe_status pe_cuda_where_grad(const pe_op_ctx *ctx) {
    const pe_tensor *c = pe_ctx_in(ctx, "Condition"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(g);
    const size_t es = pe_dtype_size(g->dtype);
    if (c->dtype != PE_DTYPE_BOOL || pe_tensor_numel(c) != n || (es != 4 && es != 8) ||
        (dx && (dx->dtype != g->dtype || pe_tensor_numel(dx) != n)) ||
        (dy && (dy->dtype != g->dtype || pe_tensor_numel(dy) != n)))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0 || (!dx && !dy)) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const uint8_t *cd = (const uint8_t *)pe_tensor_data(c);
    void *dxd = dx ? pe_tensor_data(dx) : nullptr, *dyd = dy ? pe_tensor_data(dy) : nullptr;
    const unsigned b = pe_cuda_blocks(n);
    if (es == 8)
        k_where_grad<<<b, PE_CUDA_THREADS, 0, s>>>(cd, (const uint64_t *)pe_tensor_data(g), (uint64_t *)dxd,
                                                   (uint64_t *)dyd, n);
    else
        k_where_grad<<<b, PE_CUDA_THREADS, 0, s>>>(cd, (const uint32_t *)pe_tensor_data(g), (uint32_t *)dxd,
                                                   (uint32_t *)dyd, n);
    return pe_cuda_check_launch(ctx);
}

/* X [..] of in dtype -> Out [..] of out_dtype: float32, float64, int32, int64, uint8, bool. */
pe_status pe_cuda_cast(const pe_op_ctx *ctx) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    return run_cast(ctx, x, pe_ctx_out(ctx, "Out"), x->dtype != PE_DTYPE_BOOL);
}

/* Out@GRAD [..] (Out's dtype) -> X@GRAD [..] (X's dtype) */
pe_status pe_cuda_cast_grad(const pe_op_ctx *ctx) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    if (dx->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    return run_cast(ctx, pe_ctx_in(ctx, "Out@GRAD"), dx, true);
}

/* Out [..], Out@GRAD [..] -> X@GRAD [..] (float32, float64) */
pe_status pe_cuda_relu_grad(const pe_op_ctx *ctx) { return run_act_grad(ctx, act_g_relu{}); }
pe_status pe_cuda_sigmoid_grad(const pe_op_ctx *ctx) { return run_act_grad(ctx, act_g_sigmoid{}); }
pe_status pe_cuda_tanh_grad(const pe_op_ctx *ctx) { return run_act_grad(ctx, act_g_tanh{}); }

/* X [..], Y [..], Out@GRAD [broadcast] -> X@GRAD?, Y@GRAD? (float32, float64):
 * a broadcast operand gets the sum over its broadcast dims, in double. */
pe_status pe_cuda_elementwise_add_grad(const pe_op_ctx *ctx) { return run_binary_grad(ctx, g_pass{}, g_pass{}); }
pe_status pe_cuda_elementwise_sub_grad(const pe_op_ctx *ctx) { return run_binary_grad(ctx, g_pass{}, g_neg{}); }
pe_status pe_cuda_elementwise_mul_grad(const pe_op_ctx *ctx) { return run_binary_grad(ctx, gx_mul{}, gy_mul{}); }
pe_status pe_cuda_elementwise_div_grad(const pe_op_ctx *ctx) { return run_binary_grad(ctx, gx_div{}, gy_div{}); }
pe_status pe_cuda_elementwise_max_grad(const pe_op_ctx *ctx) { return run_binary_grad(ctx, gx_max{}, gy_max{}); }
pe_status pe_cuda_elementwise_min_grad(const pe_op_ctx *ctx) { return run_binary_grad(ctx, gx_min{}, gy_min{}); }
pe_status pe_cuda_elementwise_pow_grad(const pe_op_ctx *ctx) { return run_binary_grad(ctx, gx_pow{}, gy_pow{}); }

} // extern "C"
