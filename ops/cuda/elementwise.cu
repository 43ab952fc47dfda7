/* ops/cuda/elementwise.cu — CUDA kernels of the elementwise family:
 * elementwise_add/sub/mul/div (Paddle `axis` broadcasting) and scale on
 * fp32, fp64, int32, int64; relu, sigmoid, tanh on fp32 and fp64 — the
 * dtypes of the CPU kernels (ops/cpu/elementwise.c).
 *
 * How: broadcasting is not re-derived here. The same pe_bcast_plan the CPU
 * kernels use (ops/elementwise.h) is built on the host and passed to the
 * kernel by value; its fast kinds (same shape, scalar Y, row bias,
 * per-channel) get index-arithmetic-free or one-div kernels, everything else
 * the general strided loop the plan describes. All kernels are grid-stride
 * loops with 64-bit indices, launched on the place's stream
 * (pe_cuda_stream) with the place's device current; launch errors are
 * checked right away (cudaGetLastError) and returned through pe_ctx_error.
 * Execution errors surface at the next synchronization (the fetch copy).
 *
 * Numerics follow the CPU kernels: integer add/sub/mul wrap, integer x/0
 * is 0, IEEE float division, scale as two separately
 * rounded operations (__fmul_rn/__fadd_rn: nvcc would otherwise contract
 * x*s+b into an FMA and differ from the CPU in the last bit), and the
 * precise expf/tanhf (PE does not build with --use_fast_math).
 *
 * Why: the elementwise and activation ops are the CUDA seam of issue 2 —
 * enough for an MLP's bias + activation to run on a GPU place, compared with
 * the CPU kernels wherever a GPU exists (tests/unit/test_cuda.c).
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
template <typename T, typename Op>
__global__ void k_binary_same(const T *x, const T *y, T *out, int64_t numel, Op op) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = op(x[i], y[i]);
}

/* x, out: [numel]; y: [1] */
template <typename T, typename Op>
__global__ void k_binary_scalar_y(const T *x, const T *y, T *out, int64_t numel, Op op) {
    const T b = y[0];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = op(x[i], b);
}

/* x, out: [pre, n, post]; y: [n] (ROW is post == 1) */
template <typename T, typename Op>
__global__ void k_binary_mid(const T *x, const T *y, T *out, int64_t numel, int64_t n,
                             int64_t post, Op op) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = op(x[i], y[(i / post) % n]);
}

/* out: row-major [plan.dims]; x and y read through plan.x_strides/y_strides
 * (0 = broadcast along that dim). */
template <typename T, typename Op>
__global__ void k_binary_general(const T *x, const T *y, T *out, pe_bcast_plan pl, Op op) {
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

template <typename T, typename Op>
void launch_binary(const pe_bcast_plan &pl, const void *xv, const void *yv, void *ov, cudaStream_t s, Op op) {
    const T *x = (const T *)xv, *y = (const T *)yv;
    T *out = (T *)ov;
    unsigned g = pe_cuda_blocks(pl.numel);
    switch (pl.kind) {
    case PE_BCAST_SAME:
        k_binary_same<T, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl.numel, op);
        break;
    case PE_BCAST_SCALAR_Y:
        k_binary_scalar_y<T, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl.numel, op);
        break;
    case PE_BCAST_ROW:
        k_binary_mid<T, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl.numel, pl.n, 1, op);
        break;
    case PE_BCAST_MID:
        k_binary_mid<T, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl.numel, pl.n, pl.post, op);
        break;
    default:
        k_binary_general<T, Op><<<g, PE_CUDA_THREADS, 0, s>>>(x, y, out, pl, op);
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

} // extern "C"
