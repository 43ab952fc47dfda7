/* ops/cuda/activation.cu — CUDA kernels of leaky_relu, gelu, log_softmax,
 * dropout and their gradients (fp32 and fp64, the CPU kernels' dtypes;
 * formulas in ops/cpu/activation.c).
 *
 * How:
 * - leaky_relu, gelu: grid-stride element loops; each expression is the CPU
 *   one operation for operation in the element type (erff/expf/tanhf for
 *   fp32), every sum involving a product or a libm result rounded
 *   separately (__fadd_rn and friends) so nvcc cannot contract it into an
 *   FMA the CPU does not do.
 * - log_softmax: X viewed as [pre, D, post] around the axis. One thread per
 *   (pre, post) column walks D in the CPU's order (max, then the sum of
 *   exp(x - max) in double, then the outputs), so the results are the CPU's
 *   operation for operation. Long rows (post == 1, D >= PE_ACT_ROW_BLOCK)
 *   get a block per row instead: the max is exact in any order, the double
 *   sum runs in a fixed tree order (deterministic, within a double rounding
 *   of the CPU's sequential sum). The grad (dx = g - exp(out) sum_D g) has
 *   the same two shapes; X@GRAD may alias Out@GRAD (each sum is complete
 *   before its column or row is written).
 * - dropout: the mask of element i is word i % 4 of the Philox4x32-10 block
 *   of counter (i / 4, step) under the CPU's key (pe_rng_key of the program
 *   seed, the seed attr when fix_seed, the Out var's name, xor'ed with the
 *   place id times the golden ratio; ops/activation.c), computed by the
 *   shared inline core (runtime/rng_core.h): one thread per Philox block
 *   writes its four mask bytes and outputs. The step is read from the Step
 *   tensor on the device (no host synchronization); StepOut = step + 1 is
 *   written by a one-thread kernel queued after the mask kernel, so Step and
 *   StepOut may be one var.
 *
 * Why: the CPU kernels are the reference (tests/ops compare the places) and
 * a seed must draw the same dropout masks on every place kind: the masks are
 * bit-identical to the CPU's, the other ops differ from it at most by the
 * device libm's last-ulp differences (and, for long log_softmax rows, the
 * order of the double sum).
 */
#include "ops/cuda/cuda_ops.h"
#include "runtime/rng.h"
#include "runtime/rng_core.h"

#include <cmath>
#include <cstring>

/* log_softmax: rows (post == 1) at least this long get a block each. */
#define PE_ACT_ROW_BLOCK 1024

namespace {

/* ---- separately rounded arithmetic and the libm of the element type ----- */

__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }

__device__ inline float m_exp(float v) { return expf(v); }
__device__ inline double m_exp(double v) { return exp(v); }
__device__ inline float m_erf(float v) { return erff(v); }
__device__ inline double m_erf(double v) { return erf(v); }
__device__ inline float m_tanh(float v) { return tanhf(v); }
__device__ inline double m_tanh(double v) { return tanh(v); }

#define K_SQRT1_2 0.70710678118654752440     /* 1 / sqrt(2) */
#define K_INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi) */
#define K_SQRT_2_PI 0.79788456080286535588   /* sqrt(2 / pi) */
#define K_GELU_C 0.044715

/* ---- leaky_relu / gelu: x [n] -> out [n]; grads from x ------------------- */

/* a = alpha */
struct op_leaky {
    template <typename T> __device__ static T fwd(T x, T a, bool) { return x > (T)0 ? x : a * x; }
    template <typename T> __device__ static T grad(T x, T g, T a, bool) { return x > (T)0 ? g : a * g; }
};

/* approx: x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + c x^3); else x/2 (1 + erf(x / sqrt 2)) */
struct op_gelu {
    template <typename T> __device__ static T fwd(T x, T, bool approx) {
        if (approx) {
            const T u = (T)K_SQRT_2_PI * add_rn(x, mul_rn((T)K_GELU_C * x * x, x));
            return (T)0.5 * x * add_rn((T)1, m_tanh(u));
        }
        return (T)0.5 * x * add_rn((T)1, m_erf(x * (T)K_SQRT1_2));
    }
    template <typename T> __device__ static T grad(T x, T g, T, bool approx) {
        if (approx) {
            const T u = (T)K_SQRT_2_PI * add_rn(x, mul_rn((T)K_GELU_C * x * x, x));
            const T t = m_tanh(u);
            const T du = (T)K_SQRT_2_PI * add_rn((T)1, mul_rn((T)3 * (T)K_GELU_C * x, x));
            return g * add_rn(mul_rn((T)0.5, add_rn((T)1, t)),
                              mul_rn((T)0.5 * x * sub_rn((T)1, mul_rn(t, t)), du));
        }
        const T cdf = (T)0.5 * add_rn((T)1, m_erf(x * (T)K_SQRT1_2));
        const T pdf = (T)K_INV_SQRT_2PI * m_exp((T)-0.5 * x * x);
        return g * add_rn(cdf, mul_rn(x, pdf));
    }
};

/* x, out: [n] */
template <typename T, typename Op> __global__ void k_act_fwd(const T *x, T *out, int64_t n, T a, bool flag) {
    PE_CUDA_LOOP(i, n) out[i] = Op::template fwd<T>(x[i], a, flag);
}

/* x, g, dx: [n] */
template <typename T, typename Op>
__global__ void k_act_grad(const T *x, const T *g, T *dx, int64_t n, T a, bool flag) {
    PE_CUDA_LOOP(i, n) dx[i] = Op::template grad<T>(x[i], g[i], a, flag);
}

/* ---- log_softmax: x, out [pre, D, post] ----------------------------------- */

/* One thread per column (p, q): x[p, :, q] -> out[p, :, q], in the CPU's order. */
template <typename T>
__global__ void k_log_softmax_cols(const T *x, T *out, int64_t pre, int64_t D, int64_t post) {
    PE_CUDA_LOOP(idx, pre * post) {
        const int64_t p = idx / post, q = idx % post;
        const T *xc = x + p * D * post + q;
        T *oc = out + p * D * post + q;
        T m = xc[0];
        for (int64_t j = 1; j < D; j++) m = xc[j * post] > m ? xc[j * post] : m;
        double s = 0;
        for (int64_t j = 0; j < D; j++) s = __dadd_rn(s, (double)m_exp(xc[j * post] - m));
        const T ls = (T)log(s); /* (x - max) - log s: exact shift first */
        for (int64_t j = 0; j < D; j++) oc[j * post] = sub_rn(xc[j * post] - m, ls);
    }
}

/* dx = g - exp(out) sum_D g, one thread per column (p, q). */
template <typename T>
__global__ void k_log_softmax_grad_cols(const T *o, const T *g, T *dx, int64_t pre, int64_t D, int64_t post) {
    PE_CUDA_LOOP(idx, pre * post) {
        const int64_t base = (idx / post) * D * post + idx % post;
        double s = 0;
        for (int64_t j = 0; j < D; j++) s = __dadd_rn(s, (double)g[base + j * post]);
        const T st = (T)s;
        for (int64_t j = 0; j < D; j++) {
            const int64_t i = base + j * post;
            dx[i] = sub_rn(g[i], mul_rn(m_exp(o[i]), st));
        }
    }
}

/* Block-wide max of v (a NaN in slot 0 sticks; other NaNs are skipped — rows
 * holding one come out all NaN anyway, through the sum) and block-wide sum
 * in double in a fixed tree order. */
template <typename T> __device__ T block_max(T v, T *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            const T o = sh[threadIdx.x + w];
            sh[threadIdx.x] = o > sh[threadIdx.x] ? o : sh[threadIdx.x];
        }
        __syncthreads();
    }
    const T r = sh[0];
    __syncthreads();
    return r;
}
__device__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

/* One block per row (post == 1): x, out [pre, D]. A row holding NaN comes out
 * all NaN as on the CPU (the sum is NaN whichever max the scan found). */
template <typename T> __global__ void k_log_softmax_rows(const T *x, T *out, int64_t pre, int64_t D) {
    __shared__ T shm[PE_CUDA_THREADS];
    __shared__ double shs[PE_CUDA_THREADS];
    for (int64_t p = blockIdx.x; p < pre; p += gridDim.x) {
        const T *xr = x + p * D;
        T *orow = out + p * D;
        T m = xr[0];
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) m = xr[j] > m ? xr[j] : m;
        if (xr[0] != xr[0]) m = xr[0]; /* the CPU's scan keeps a leading NaN */
        m = block_max(m, shm);
        double s = 0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s = __dadd_rn(s, (double)m_exp(xr[j] - m));
        s = block_sum(s, shs);
        const T ls = (T)log(s);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) orow[j] = sub_rn(xr[j] - m, ls);
    }
}

/* One block per row (post == 1): o, g, dx [pre, D]. */
template <typename T> __global__ void k_log_softmax_grad_rows(const T *o, const T *g, T *dx, int64_t pre, int64_t D) {
    __shared__ double shs[PE_CUDA_THREADS];
    for (int64_t p = blockIdx.x; p < pre; p += gridDim.x) {
        const T *orow = o + p * D, *grow = g + p * D;
        T *drow = dx + p * D;
        double s = 0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s = __dadd_rn(s, (double)grow[j]);
        const T st = (T)block_sum(s, shs); /* every read of the row's g is done: dx may alias g */
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) drow[j] = sub_rn(grow[j], mul_rn(m_exp(orow[j]), st));
    }
}

/* ---- dropout: x [n] -> out [n], mask [n] uint8 ------------------------------ */

/* The step a Step tensor holds (int64 or int32, sign-extended), 0 without one. */
__device__ inline uint64_t read_step(const void *step, bool step64) {
    if (!step) return 0;
    return step64 ? (uint64_t)*(const int64_t *)step : (uint64_t)(int64_t)*(const int32_t *)step;
}

/* Philox block b of counter (b, step) decides elements 4b .. 4b + 3: kept
 * when its word is >= thr; out = kept ? x f : 0. */
template <typename T>
__global__ void k_dropout_train(const T *x, T *out, uint8_t *mask, int64_t n, uint64_t key, const void *step,
                                bool step64, uint64_t thr, T f) {
    const uint64_t st = read_step(step, step64);
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    PE_CUDA_LOOP(b, (n + 3) / 4) {
        const uint32_t c[4] = {(uint32_t)b, (uint32_t)((uint64_t)b >> 32), (uint32_t)st, (uint32_t)(st >> 32)};
        uint32_t w[4];
        pe_rng_core_philox(c, k, w);
        const int64_t e = 4 * b + 4 < n ? 4 : n - 4 * b;
        for (int64_t j = 0; j < e; j++) {
            const int64_t i = 4 * b + j;
            const bool keep = (uint64_t)w[j] >= thr;
            mask[i] = keep;
            out[i] = keep ? x[i] * f : (T)0;
        }
    }
}

/* out = x f where mask is NULL or mask[i] != 0, else 0 (x, mask, out: [n]) */
template <typename T> __global__ void k_dropout_apply(const T *x, const uint8_t *mask, T *out, int64_t n, T f) {
    if (mask) PE_CUDA_LOOP(i, n) out[i] = mask[i] ? x[i] * f : (T)0;
    else PE_CUDA_LOOP(i, n) out[i] = x[i] * f;
}

/* StepOut = Step + 1 (int64, or int32 wrapping), one thread. */
__global__ void k_step_out(const void *step, bool step64, void *out, bool out64) {
    const uint64_t v = read_step(step, step64) + 1;
    if (out64) *(int64_t *)out = (int64_t)v;
    else *(int32_t *)out = (int32_t)(uint32_t)v;
}

/* ---- host side ----------------------------------------------------------- */

pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

/* X [..] -> Out [..] */
template <typename Op> pe_status act_fwd(const pe_op_ctx *ctx, double a, bool flag) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n) return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_act_fwd<T, Op><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
            (const T *)pe_tensor_data(x), (T *)pe_tensor_data(out), n, (T)a, flag));
    return pe_cuda_check_launch(ctx);
}

/* X [..], Out@GRAD [..] -> X@GRAD [..] */
template <typename Op> pe_status act_grad(const pe_op_ctx *ctx, double a, bool flag) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(g) != n || pe_tensor_numel(dx) != n)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_act_grad<T, Op><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
            (const T *)pe_tensor_data(x), (const T *)pe_tensor_data(g), (T *)pe_tensor_data(dx), n, (T)a, flag));
    return pe_cuda_check_launch(ctx);
}

/* t viewed as [pre, D, post] around axis (negative: from the end). */
void axis_view(const pe_tensor *t, int64_t axis, int64_t *pre, int64_t *d, int64_t *post) {
    if (axis < 0) axis += t->ndim;
    *pre = pe_dims_prod(t->dims, 0, (int)axis);
    *d = t->dims[axis];
    *post = pe_dims_prod(t->dims, (int)axis + 1, t->ndim);
}

/* The factor kept elements are multiplied by (train) or every element (test). */
double dropout_factor(const pe_op_ctx *ctx, bool is_test) {
    const double p = pe_ctx_float(ctx, "dropout_prob");
    const bool upscale = !strcmp(pe_ctx_string(ctx, "dropout_implementation"), "upscale_in_train");
    if (is_test) return upscale ? 1.0 : 1.0 - p;
    return upscale ? (p < 1 ? 1.0 / (1.0 - p) : 0.0) : 1.0;
}

/* out = x f (mask NULL) or mask ? x f : 0, on stream s (n > 0). */
pe_status dropout_apply(const pe_op_ctx *ctx, const char *slot, const pe_tensor *x, const uint8_t *mask,
                        pe_tensor *out, double f, cudaStream_t s) {
    const int64_t n = pe_tensor_numel(x);
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, slot, T,
        k_dropout_apply<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
            (const T *)pe_tensor_data(x), mask, (T *)pe_tensor_data(out), n, (T)f));
    return pe_cuda_check_launch(ctx);
}

} // namespace

extern "C" {

/* X [..] -> Out [..] */
pe_status pe_cuda_leaky_relu(const pe_op_ctx *ctx) {
    return act_fwd<op_leaky>(ctx, pe_ctx_float(ctx, "alpha"), false);
}
pe_status pe_cuda_gelu(const pe_op_ctx *ctx) { return act_fwd<op_gelu>(ctx, 0.0, pe_ctx_bool(ctx, "approximate")); }

/* X [..], Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_cuda_leaky_relu_grad(const pe_op_ctx *ctx) {
    return act_grad<op_leaky>(ctx, pe_ctx_float(ctx, "alpha"), false);
}
pe_status pe_cuda_gelu_grad(const pe_op_ctx *ctx) {
    return act_grad<op_gelu>(ctx, 0.0, pe_ctx_bool(ctx, "approximate"));
}

/* X [pre, D, post] (D at axis) -> Out [pre, D, post] */
pe_status pe_cuda_log_softmax(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t axis = pe_ctx_int(ctx, "axis");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (out->dtype != x->dtype || pe_tensor_numel(out) != pe_tensor_numel(x) || axis < -x->ndim || axis >= x->ndim)
        return internal_mismatch(ctx);
    if (pe_tensor_numel(x) == 0) return PE_OK;
    int64_t pre, d, post;
    axis_view(x, axis, &pre, &d, &post);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const void *xd = pe_tensor_data(x);
    void *od = pe_tensor_data(out);
    if (post == 1 && d >= PE_ACT_ROW_BLOCK)
        PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
            k_log_softmax_rows<T><<<pe_cuda_blocks(pre * PE_CUDA_THREADS), PE_CUDA_THREADS, 0, s>>>(
                (const T *)xd, (T *)od, pre, d));
    else
        PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
            k_log_softmax_cols<T><<<pe_cuda_blocks(pre * post), PE_CUDA_THREADS, 0, s>>>(
                (const T *)xd, (T *)od, pre, d, post));
    return pe_cuda_check_launch(ctx);
}

/* Out [pre, D, post], Out@GRAD [pre, D, post] -> X@GRAD [pre, D, post] */
pe_status pe_cuda_log_softmax_grad(const pe_op_ctx *ctx) {
    const pe_tensor *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(o), axis = pe_ctx_int(ctx, "axis");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (g->dtype != o->dtype || dx->dtype != o->dtype || pe_tensor_numel(g) != n || pe_tensor_numel(dx) != n ||
        axis < -o->ndim || axis >= o->ndim)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    int64_t pre, d, post;
    axis_view(o, axis, &pre, &d, &post);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const void *od = pe_tensor_data(o), *gd = pe_tensor_data(g);
    void *dd = pe_tensor_data(dx);
    if (post == 1 && d >= PE_ACT_ROW_BLOCK)
        PE_CUDA_FLOAT_TYPES(ctx, o->dtype, "Out", T,
            k_log_softmax_grad_rows<T><<<pe_cuda_blocks(pre * PE_CUDA_THREADS), PE_CUDA_THREADS, 0, s>>>(
                (const T *)od, (const T *)gd, (T *)dd, pre, d));
    else
        PE_CUDA_FLOAT_TYPES(ctx, o->dtype, "Out", T,
            k_log_softmax_grad_cols<T><<<pe_cuda_blocks(pre * post), PE_CUDA_THREADS, 0, s>>>(
                (const T *)od, (const T *)gd, (T *)dd, pre, d, post));
    return pe_cuda_check_launch(ctx);
}

/* X [..], Step? [1] -> Out [..], Mask? [..] uint8, StepOut? [1] = Step + 1 (training) */
pe_status pe_cuda_dropout(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *step_in = pe_ctx_in(ctx, "Step");
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *mask = pe_ctx_out(ctx, "Mask"), *step_out = pe_ctx_out(ctx, "StepOut");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n || (mask && pe_tensor_numel(mask) != n))
        return internal_mismatch(ctx);
    const bool is_test = pe_ctx_bool(ctx, "is_test");
    const void *step = step_in ? pe_tensor_data(step_in) : nullptr;
    const bool step64 = !step_in || step_in->dtype == PE_DTYPE_INT64;
    if (!is_test && n && !mask)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "output Mask is required in training mode (is_test = false)");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (is_test) {
        if (mask && n)
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(mask), 1, (size_t)n, s), "cudaMemsetAsync"));
        if (step_out && step_in && pe_tensor_data(step_out) != step)
            PE_CHECK(pe_cuda_check(ctx, cudaMemcpyAsync(pe_tensor_data(step_out), step, pe_tensor_nbytes(step_in),
                                                        cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"));
        return n ? dropout_apply(ctx, "X", x, NULL, out, dropout_factor(ctx, true), s) : PE_OK;
    }
    if (n) {
        const double p = pe_ctx_float(ctx, "dropout_prob");
        const double t = ceil(p * 4294967296.0);
        const uint64_t thr = t >= 4294967296.0 ? UINT64_C(4294967296) : (uint64_t)t;
        const int64_t seed = pe_ctx_bool(ctx, "fix_seed") ? pe_ctx_int(ctx, "seed") : 0;
        /* the CPU kernel's key: each place draws its own stream, place 0 the one-place stream */
        const uint64_t key = pe_rng_key(ctx->program_seed, seed, pe_ctx_out_name(ctx, "Out", 0)) ^
                             (uint64_t)ctx->place.id * UINT64_C(0x9E3779B97F4A7C15);
        const double f = dropout_factor(ctx, false);
        uint8_t *m = (uint8_t *)pe_tensor_data(mask);
        PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
            k_dropout_train<T><<<pe_cuda_blocks((n + 3) / 4), PE_CUDA_THREADS, 0, s>>>(
                (const T *)pe_tensor_data(x), (T *)pe_tensor_data(out), m, n, key, step, step64, thr, (T)f));
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    if (step_out) {
        k_step_out<<<1, 1, 0, s>>>(step, step64, pe_tensor_data(step_out), step_out->dtype == PE_DTYPE_INT64);
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    return PE_OK;
}

/* Mask? [..] uint8, Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_cuda_dropout_grad(const pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD"), *mask = pe_ctx_in(ctx, "Mask");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(g);
    const bool is_test = pe_ctx_bool(ctx, "is_test");
    if (dx->dtype != g->dtype || pe_tensor_numel(dx) != n || (!is_test && (!mask || pe_tensor_numel(mask) != n)))
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    return dropout_apply(ctx, "Out@GRAD", g, is_test ? NULL : (const uint8_t *)pe_tensor_data(mask), dx,
                         dropout_factor(ctx, is_test), s);
}

} // extern "C"
