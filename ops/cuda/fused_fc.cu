/* ops/cuda/fused_fc.cu — CUDA kernels of fc and fc_grad (float32, float64;
 * shape inference in ops/fused.c, CPU kernels in ops/cpu/fused_fc.c).
 *
 * fc:      one cuBLAS GEMM (out = input W, on the place's handle, bound to
 *          its stream) and one epilogue kernel over out that adds the bias
 *          row and applies the activation in place.
 * fc_grad: one kernel writing the pre-activation gradient
 *          dT = act'(out) * dOut into PreAct@GRAD, the bias gradient (column
 *          sums of dT) and the two GEMMs dInput = dT W^T, dW = Input^T dT.
 *
 * How: the GEMM is ops/cuda/math.cu's (cuBLAS is column-major, so the
 * row-major C = A B is computed as C^T = B^T A^T with the CPU kernel's
 * leading dimensions; CUBLAS_COMPUTE_32F / _64F, TF32 only when the handle
 * allows it) — kept identical so fc matches mul. The epilogue and the
 * activation gradients are the expressions of ops/cpu/fused_act.h, with the
 * products written as __fmul_rn/__dmul_rn so nvcc does not contract
 * 1 - o*o into an FMA the CPU does not do. The bias gradient sums each
 * column in double as the CPU kernel does: over row chunks in row order,
 * then over the chunks in order (deterministic; one chunk — the CPU's
 * order, bit for bit — when the output is wide).
 *
 * Why: passes/fuse_fc.c emits fc / fc_grad for every mul + bias + act; a
 * fused program on a GPU place needs them.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/cpu/fused_act.h"

#include <cublas_v2.h>

#include <climits>

namespace {

/* C[m, n] = op(A) op(B), beta 0, row-major (A stored [m, k] or [k, m] when
 * ta, B [k, n] or [n, k] when tb): ops/cuda/math.cu's gemm() for the
 * single-matrix case. k == 0: C = 0. */
pe_status gemm(const pe_op_ctx *ctx, cudaStream_t s, pe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
               const void *a, const void *b, void *c) {
    if (m == 0 || n == 0) return PE_OK;
    if (k == 0)
        return pe_cuda_check(ctx, cudaMemsetAsync(c, 0, (size_t)(m * n) * pe_dtype_size(dt), s), "cudaMemsetAsync");
    cublasHandle_t h = ctx->svc && ctx->svc->blas ? (cublasHandle_t)ctx->svc->blas
                                                  : (cublasHandle_t)pe_cuda_blas(ctx->place.id);
    if (!h) return pe_ctx_error(ctx, PE_ERR_DEVICE, "no cuBLAS handle: %s", pe_last_error());
    const int lda = (int)(ta ? m : k), ldb = (int)(tb ? k : n), ldc = (int)n;
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const bool f32 = dt == PE_DTYPE_FP32;
    const float one_f = 1.0f, zero_f = 0.0f;
    const double one_d = 1.0, zero_d = 0.0;
    const void *alpha = f32 ? (const void *)&one_f : (const void *)&one_d;
    const void *beta = f32 ? (const void *)&zero_f : (const void *)&zero_d;
    const cudaDataType_t ty = f32 ? CUDA_R_32F : CUDA_R_64F;
    /* column-major: C^T [n, m] = op(B)^T [n, k] op(A)^T [k, m] */
    cublasStatus_t st = cublasGemmEx(h, opb, opa, (int)n, (int)m, (int)k, alpha, b, ty, ldb, a, ty, lda, beta, c, ty,
                                     ldc, f32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return pe_ctx_error(ctx, PE_ERR_DEVICE, "cublasGemmEx (%s) [%lld x %lld] x [%lld x %lld] failed: %s",
                            f32 ? "float32" : "float64", (long long)m, (long long)k, (long long)k, (long long)n,
                            cublasGetStatusString(st));
    return PE_OK;
}

pe_status check_blas(const pe_op_ctx *ctx, int64_t m, int64_t n, int64_t k) {
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "GEMM [%lld x %lld] x [%lld x %lld] exceeds cuBLAS's 32-bit sizes",
                            (long long)m, (long long)k, (long long)k, (long long)n);
    return PE_OK;
}

/* ---- activations and their gradients from Out (ops/cpu/fused_act.h) ------- */

__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }

struct act_none {
    template <typename T> __device__ T operator()(T v) const { return v; }
    template <typename T> __device__ T grad(T, T g) const { return g; }
};
struct act_relu {
    template <typename T> __device__ T operator()(T v) const { return v < (T)0 ? (T)0 : v; } /* NaN passes */
    template <typename T> __device__ T grad(T o, T g) const { return o > (T)0 ? g : (T)0; }
};
struct act_sigmoid {
    __device__ float operator()(float v) const {
        const float e = expf(-fabsf(v));
        return v >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
    __device__ double operator()(double v) const {
        const double e = exp(-fabs(v));
        return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    }
    template <typename T> __device__ T grad(T o, T g) const { return mul_rn(mul_rn(g, o), (T)1 - o); }
};
struct act_tanh {
    __device__ float operator()(float v) const { return tanhf(v); }
    __device__ double operator()(double v) const { return tanh(v); }
    template <typename T> __device__ T grad(T o, T g) const { return mul_rn(g, (T)1 - mul_rn(o, o)); }
};

/* out: [m, n] = act(out + bias) in place; bias: [n]? */
template <typename T, typename Act>
__global__ void k_fc_epilogue(T *out, const T *bias, int64_t m, int64_t n, Act act) {
    PE_CUDA_LOOP(idx, m * n) {
        T v = out[idx];
        if (bias) v = v + bias[idx % n];
        out[idx] = act(v);
    }
}

/* o, g, pre: [m*n] -> pre = act'(o) * g (pre may be g: element i read before written) */
template <typename T, typename Act>
__global__ void k_fc_dt(const T *o, const T *g, T *pre, int64_t numel, Act act) {
    PE_CUDA_LOOP(i, numel) {
        const T ov = o[i], gv = g[i];
        pre[i] = act.grad(ov, gv);
    }
}

/* o?, g: [m, n] -> part[ch, c] = sum over rows [ch*rows, (ch+1)*rows) in row
 * order, in double, of act.grad(o, g) rounded to T (the CPU's dT value) */
template <typename T, typename Act>
__global__ void k_fc_colsum(const T *o, const T *g, double *part, int64_t m, int64_t n, int64_t nchunk, int64_t rows,
                            Act act) {
    PE_CUDA_LOOP(idx, nchunk * n) {
        const int64_t ch = idx / n, c = idx - ch * n;
        const int64_t r0 = ch * rows, r1 = r0 + rows < m ? r0 + rows : m;
        double acc = 0;
        for (int64_t r = r0; r < r1; r++) {
            const T ov = o ? o[r * n + c] : (T)0, gv = g[r * n + c];
            const T v = act.grad(ov, gv);
            acc += (double)v;
        }
        part[idx] = acc;
    }
}

/* part: [nchunk, n] -> db: [n], the chunks summed in order */
template <typename T>
__global__ void k_fc_colsum_final(const double *part, T *db, int64_t n, int64_t nchunk) {
    PE_CUDA_LOOP(c, n) {
        double acc = 0;
        for (int64_t ch = 0; ch < nchunk; ch++) acc += part[ch * n + c];
        db[c] = (T)acc;
    }
}

template <typename T, typename Act>
void launch_epilogue(T *out, const T *bias, int64_t m, int64_t n, cudaStream_t s, Act act) {
    k_fc_epilogue<T, Act><<<pe_cuda_blocks(m * n), PE_CUDA_THREADS, 0, s>>>(out, bias, m, n, act);
}

/* The fc_grad element work for dtype T and activation Act (m * n > 0):
 * pre (when given) = dT; db (when given) = column sums of dT. */
template <typename T, typename Act>
pe_status fc_dt(const pe_op_ctx *ctx, cudaStream_t s, Act act, const T *o, const T *g, T *pre, T *db, int64_t m,
                int64_t n) {
    if (pre) {
        k_fc_dt<T, Act><<<pe_cuda_blocks(m * n), PE_CUDA_THREADS, 0, s>>>(o, g, pre, m * n, act);
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    if (!db) return PE_OK;
    /* row chunks so that about 64K threads sum columns; 1 chunk (the CPU's order) for wide outputs */
    int64_t nchunk = (INT64_C(65536) + n - 1) / n;
    if (nchunk > m) nchunk = m;
    if (nchunk < 1) nchunk = 1;
    const int64_t rows = (m + nchunk - 1) / nchunk;
    const size_t bytes = (size_t)(nchunk * n) * sizeof(double);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    if (pre) /* sum the dT just written */
        k_fc_colsum<T, act_none><<<pe_cuda_blocks(nchunk * n), PE_CUDA_THREADS, 0, s>>>(
            nullptr, pre, tmp.get<double>(), m, n, nchunk, rows, act_none{});
    else
        k_fc_colsum<T, Act><<<pe_cuda_blocks(nchunk * n), PE_CUDA_THREADS, 0, s>>>(o, g, tmp.get<double>(), m, n,
                                                                                   nchunk, rows, act);
    k_fc_colsum_final<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(tmp.get<double>(), db, n, nchunk);
    return pe_cuda_check_launch(ctx);
}

template <typename T>
pe_status fc_dt_act(const pe_op_ctx *ctx, cudaStream_t s, int act, const pe_tensor *o, const pe_tensor *g,
                    pe_tensor *pre, pe_tensor *db, int64_t m, int64_t n) {
    const T *od = o ? (const T *)pe_tensor_data(o) : nullptr, *gd = (const T *)pe_tensor_data(g);
    T *dbd = db ? (T *)pe_tensor_data(db) : nullptr;
    T *pd = act != PE_FACT_NONE && pre ? (T *)pe_tensor_data(pre) : nullptr;
    switch (act) {
    case PE_FACT_RELU: return fc_dt<T>(ctx, s, act_relu{}, od, gd, pd, dbd, m, n);
    case PE_FACT_SIGMOID: return fc_dt<T>(ctx, s, act_sigmoid{}, od, gd, pd, dbd, m, n);
    case PE_FACT_TANH: return fc_dt<T>(ctx, s, act_tanh{}, od, gd, pd, dbd, m, n);
    default: return fc_dt<T>(ctx, s, act_none{}, od, gd, nullptr, dbd, m, n);
    }
}

} // namespace

extern "C" {

/* input: [M..., K...] as [m, k]; w: [k, n]; bias: [n]? -> out: [m, n] = act(input W + bias) */
pe_status pe_cuda_fc(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *w = pe_ctx_in(ctx, "W"), *b = pe_ctx_in(ctx, "Bias");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int ncd = (int)pe_ctx_int(ctx, "in_num_col_dims");
    int act = pe_fused_act_parse(pe_ctx_string(ctx, "activation_type"));
    int64_t m = pe_dims_prod(x->dims, 0, ncd), k = pe_dims_prod(x->dims, ncd, x->ndim), n = w->dims[1];
    if (act < 0 || pe_tensor_numel(out) != m * n || out->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "Input has dtype %s; supported: float32, float64",
                            pe_dtype_name(x->dtype));
    PE_CHECK(check_blas(ctx, m, n, k));
    if (m * n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(gemm(ctx, s, x->dtype, false, false, m, n, k, pe_tensor_data(x), pe_tensor_data(w), pe_tensor_data(out)));
    if (act == PE_FACT_NONE && !b) return pe_cuda_check_launch(ctx);
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T, {
        T *od = (T *)pe_tensor_data(out);
        const T *bd = b ? (const T *)pe_tensor_data(b) : nullptr;
        switch (act) {
        case PE_FACT_RELU: launch_epilogue(od, bd, m, n, s, act_relu{}); break;
        case PE_FACT_SIGMOID: launch_epilogue(od, bd, m, n, s, act_sigmoid{}); break;
        case PE_FACT_TANH: launch_epilogue(od, bd, m, n, s, act_tanh{}); break;
        default: launch_epilogue(od, bd, m, n, s, act_none{}); break;
        }
    });
    return pe_cuda_check_launch(ctx);
}

/* input: [m, k]; w: [k, n]; bias: [n]?; out, out@grad: [m, n]
 * -> input@grad: [m, k]?, w@grad: [k, n]?, bias@grad: [n]?, preact@grad: [m, n]? */
pe_status pe_cuda_fc_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *w = pe_ctx_in(ctx, "W"), *o = pe_ctx_in(ctx, "Out");
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Input@GRAD"), *dw = pe_ctx_out(ctx, "W@GRAD");
    pe_tensor *db = pe_ctx_out(ctx, "Bias@GRAD"), *pre = pe_ctx_out(ctx, "PreAct@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int ncd = (int)pe_ctx_int(ctx, "in_num_col_dims");
    int act = pe_fused_act_parse(pe_ctx_string(ctx, "activation_type"));
    int64_t m = pe_dims_prod(x->dims, 0, ncd), k = pe_dims_prod(x->dims, ncd, x->ndim), n = w->dims[1];
    if (act < 0 || (act != PE_FACT_NONE && (!o || ((dx || dw) && !pre))))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "Input has dtype %s; supported: float32, float64",
                            pe_dtype_name(x->dtype));
    PE_CHECK(check_blas(ctx, m, n, k));
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const bool f32 = x->dtype == PE_DTYPE_FP32;
    if (m * n > 0) {
        if (f32) PE_CHECK(fc_dt_act<float>(ctx, s, act, o, g, pre, db, m, n));
        else PE_CHECK(fc_dt_act<double>(ctx, s, act, o, g, pre, db, m, n));
    } else if (db && pe_tensor_nbytes(db)) {
        PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(db), 0, pe_tensor_nbytes(db), s), "cudaMemsetAsync"));
    }
    if (pre && act == PE_FACT_NONE && pe_tensor_data(pre) != pe_tensor_data(g) && pe_tensor_nbytes(g))
        /* identity: PreAct@GRAD = Out@GRAD */
        PE_CHECK(pe_cuda_check(ctx, cudaMemcpyAsync(pe_tensor_data(pre), pe_tensor_data(g), pe_tensor_nbytes(g),
                                                    cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"));
    const void *dt = act != PE_FACT_NONE ? (pre ? pe_tensor_data(pre) : nullptr) : pe_tensor_data(g);
    if (dx) PE_CHECK(gemm(ctx, s, x->dtype, false, true, m, k, n, dt, pe_tensor_data(w), pe_tensor_data(dx)));
    if (dw) PE_CHECK(gemm(ctx, s, x->dtype, true, false, k, n, m, pe_tensor_data(x), dt, pe_tensor_data(dw)));
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
