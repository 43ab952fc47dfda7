/* ops/cuda/array.cu — CUDA kernels of tile, expand_v2 and their grads,
 * cumsum, assign, shape and increment (ops/cpu/array.c), and of
 * fill_any_like (ops/cpu/autodiff.c), with the CPU kernels' dtypes.
 *
 * How: tile / expand_v2 use the shared pe_tile_plan (ops/array.h): one
 * thread per Out element reads X at the multi-index c_i % xd_i (every
 * dtype, by element size). Their grads (float32, float64) give each X@GRAD
 * element the sum of its copies in Out@GRAD, accumulated in the element's
 * type: one thread per X element walking the copies in Out's row-major
 * order — the CPU kernel's order, so the result is the same bit for bit —
 * or, when X is small and its copies many, one block per X element with a
 * fixed-shape tree (deterministic, not the CPU's order). cumsum views X as
 * [pre, d, post]: one thread per column scans it in order like the CPU
 * (floats in double, integers wrapping in the unsigned type); when the
 * columns are few and long, each is cut into chunks that are summed, offset
 * by the sums of the chunks before them (a fixed, sequential order), and
 * rescanned — deterministic, and for integers equal to the CPU's. assign is
 * a device-to-device copy (nothing in place); shape writes Input's dims
 * (passed by value) into the int32 device Out; increment is one thread;
 * fill_any_like reads its ValueTensor on the device (the per-place loss
 * scale), so it never synchronizes.
 *
 * Why: these are the ops of a fluid training loop besides the math (loop
 * counter, loss-gradient seed, broadcast of a bias, running sums); every
 * one keeps to the place's stream and none reads device data on the host.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/array.h"

#include <cstring>

namespace {

pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

/* ---- tile / expand_v2 ------------------------------------------------------ */

/* The plan with X's row-major strides, by value for the kernels. */
struct tile_k {
    int n;
    int64_t xd[PE_MAX_DIMS], od[PE_MAX_DIMS], xstr[PE_MAX_DIMS];
};

tile_k tile_kernel_plan(const pe_tile_plan &tp) {
    tile_k p;
    memset(&p, 0, sizeof p);
    p.n = tp.n;
    int64_t s = 1;
    for (int i = tp.n - 1; i >= 0; i--) {
        p.xd[i] = tp.xd[i];
        p.od[i] = tp.od[i];
        p.xstr[i] = s;
        s *= tp.xd[i];
    }
    return p;
}

/* x: [xd...] -> out: [od...], out[c] = x[c_i % xd_i ...] */
template <typename T>
__global__ void k_tile(const T *x, T *out, int64_t total, tile_k p) {
    PE_CUDA_LOOP(i, total) {
        int64_t rem = i, off = 0;
        for (int j = p.n - 1; j >= 0; j--) {
            const int64_t c = rem % p.od[j];
            rem /= p.od[j];
            off += (c % p.xd[j]) * p.xstr[j];
        }
        out[i] = x[off];
    }
}

/* The copies of an X element in Out: X's multi-index e_j sits at Out offset
 * base(e) = sum e_j * ostr_j, its copies at base + sum k_j * step_j for
 * k_j < rep_j (the dims with rep_j > 1 only, Out's order). */
struct tile_grad_k {
    int n;                        /* rank of X (padded) */
    int64_t xd[PE_MAX_DIMS];
    int64_t ostr[PE_MAX_DIMS];    /* Out's row-major strides */
    int nr;                       /* dims with copies */
    int64_t rep[PE_MAX_DIMS];     /* od / xd of those dims */
    int64_t step[PE_MAX_DIMS];    /* xd * ostr of those dims */
    int64_t reps;                 /* prod rep: copies per X element */
};

__device__ int64_t tile_grad_base(const tile_grad_k &p, int64_t e) {
    int64_t rem = e, off = 0;
    for (int j = p.n - 1; j >= 0; j--) {
        off += (rem % p.xd[j]) * p.ostr[j];
        rem /= p.xd[j];
    }
    return off;
}

/* g: [od...] -> dx: [xd...], dx[e] = the sum of e's copies in Out's
 * row-major order (the CPU kernel's), one thread per X element. */
template <typename T>
__global__ void k_tile_grad_seq(const T *g, T *dx, int64_t nx, tile_grad_k p) {
    PE_CUDA_LOOP(e, nx) {
        int64_t off = tile_grad_base(p, e), k[PE_MAX_DIMS];
        for (int j = 0; j < p.nr; j++) k[j] = 0;
        T acc = 0;
        for (int64_t m = 0; m < p.reps; m++) {
            acc += g[off];
            for (int j = p.nr - 1; j >= 0; j--) { /* odometer over the copies, last dim fastest */
                if (++k[j] < p.rep[j]) {
                    off += p.step[j];
                    break;
                }
                off -= (p.rep[j] - 1) * p.step[j];
                k[j] = 0;
            }
        }
        dx[e] = acc;
    }
}

/* Likewise, one block per X element: threads stride over the copies, then a
 * tree in shared memory (a fixed order: the same result every run). */
template <typename T>
__global__ void k_tile_grad_block(const T *g, T *dx, int64_t nx, tile_grad_k p) {
    __shared__ T sh[PE_CUDA_THREADS];
    for (int64_t e = blockIdx.x; e < nx; e += gridDim.x) {
        const int64_t base = tile_grad_base(p, e);
        T acc = 0;
        for (int64_t m = threadIdx.x; m < p.reps; m += blockDim.x) {
            int64_t rem = m, off = base;
            for (int j = p.nr - 1; j >= 0; j--) {
                off += (rem % p.rep[j]) * p.step[j];
                rem /= p.rep[j];
            }
            acc += g[off];
        }
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) dx[e] = sh[0];
        __syncthreads();
    }
}

/* ---- cumsum --------------------------------------------------------------- */

/* The scan of x: [pre, d, post] along d; column q (of pre * post) starts at
 * (q / post) * d * post + q % post, position k of it is element
 * base + (rev ? d - 1 - k : k) * post. */
struct scan_k {
    int64_t pre, d, post, cols;
    bool rev, excl;
    int64_t len, chunks; /* chunked: positions per chunk, chunks per column */
};

__device__ inline int64_t scan_base(const scan_k &p, int64_t q) { return (q / p.post) * p.d * p.post + q % p.post; }
__device__ inline int64_t scan_at(const scan_k &p, int64_t base, int64_t k) {
    return base + (p.rev ? p.d - 1 - k : k) * p.post;
}

/* Scans positions [k0, k1) of column q starting from s (writes out). */
template <typename T, typename Acc>
__device__ void scan_run(const T *x, T *out, const scan_k &p, int64_t q, int64_t k0, int64_t k1, Acc s) {
    const int64_t base = scan_base(p, q);
    for (int64_t k = k0; k < k1; k++) {
        const int64_t i = scan_at(p, base, k);
        const Acc v = (Acc)x[i];
        if (p.excl) {
            out[i] = (T)s;
            s += v;
        } else {
            s += v;
            out[i] = (T)s;
        }
    }
}

/* x, out: [pre, d, post]; one thread per column, in order (the CPU kernel) */
template <typename T, typename Acc>
__global__ void k_cumsum_cols(const T *x, T *out, scan_k p) {
    PE_CUDA_LOOP(q, p.cols) scan_run<T, Acc>(x, out, p, q, 0, p.d, (Acc)0);
}

/* chunk sums: part[c * cols + q] = sum of chunk c of column q */
template <typename T, typename Acc>
__global__ void k_cumsum_chunk_sums(const T *x, Acc *part, scan_k p) {
    PE_CUDA_LOOP(t, p.chunks * p.cols) {
        const int64_t c = t / p.cols, q = t % p.cols, base = scan_base(p, q);
        const int64_t k0 = c * p.len, k1 = k0 + p.len < p.d ? k0 + p.len : p.d;
        Acc s = 0;
        for (int64_t k = k0; k < k1; k++) s += (Acc)x[scan_at(p, base, k)];
        part[t] = s;
    }
}

/* part[c * cols + q] <- the sum of chunks 0..c-1 of column q (in order) */
template <typename Acc>
__global__ void k_cumsum_chunk_offsets(Acc *part, scan_k p) {
    PE_CUDA_LOOP(q, p.cols) {
        Acc run = 0;
        for (int64_t c = 0; c < p.chunks; c++) {
            const Acc v = part[c * p.cols + q];
            part[c * p.cols + q] = run;
            run += v;
        }
    }
}

/* each chunk rescanned from its offset */
template <typename T, typename Acc>
__global__ void k_cumsum_chunk_scan(const T *x, T *out, const Acc *part, scan_k p) {
    PE_CUDA_LOOP(t, p.chunks * p.cols) {
        const int64_t c = t / p.cols, q = t % p.cols;
        const int64_t k0 = c * p.len, k1 = k0 + p.len < p.d ? k0 + p.len : p.d;
        scan_run<T, Acc>(x, out, p, q, k0, k1, part[t]);
    }
}

template <typename T, typename Acc>
pe_status launch_cumsum(const pe_op_ctx *ctx, const void *xv, void *ov, scan_k p, cudaStream_t s) {
    const T *x = (const T *)xv;
    T *out = (T *)ov;
    if (p.cols >= 8192 || p.d <= 1024) {
        k_cumsum_cols<T, Acc><<<pe_cuda_blocks(p.cols), PE_CUDA_THREADS, 0, s>>>(x, out, p);
        return pe_cuda_check_launch(ctx);
    }
    /* few long columns: about 64K chunks of at least 128 positions */
    int64_t chunks = (65536 + p.cols - 1) / p.cols, most = (p.d + 127) / 128;
    if (chunks > most) chunks = most;
    if (chunks < 1) chunks = 1;
    p.len = (p.d + chunks - 1) / chunks;
    p.chunks = (p.d + p.len - 1) / p.len;
    const size_t bytes = sizeof(Acc) * (size_t)(p.chunks * p.cols);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    Acc *part = tmp.get<Acc>();
    const unsigned g = pe_cuda_blocks(p.chunks * p.cols);
    k_cumsum_chunk_sums<T, Acc><<<g, PE_CUDA_THREADS, 0, s>>>(x, part, p);
    k_cumsum_chunk_offsets<Acc><<<pe_cuda_blocks(p.cols), PE_CUDA_THREADS, 0, s>>>(part, p);
    k_cumsum_chunk_scan<T, Acc><<<g, PE_CUDA_THREADS, 0, s>>>(x, out, part, p);
    return pe_cuda_check_launch(ctx);
}

/* ---- shape, increment, fill_any_like ---------------------------------------- */

struct dims_k {
    int32_t d[PE_MAX_DIMS];
};

/* out: int32 [n] = d */
__global__ void k_shape(int32_t *out, int n, dims_k d) {
    PE_CUDA_LOOP(i, n) out[i] = d.d[i];
}

/* x, out: [1]; floats add the double step (float32: in double, then rounded),
 * integers add the step's integer part wrapping around (computed in the
 * unsigned type, as the CPU kernel) */
template <typename T>
__global__ void k_increment(const T *x, T *out, double step, uint64_t istep) {
    if (blockIdx.x || threadIdx.x) return;
    if constexpr (std::is_same<T, float>::value) out[0] = (float)((double)x[0] + step);
    else if constexpr (std::is_same<T, double>::value) out[0] = x[0] + step;
    else {
        using U = typename std::make_unsigned<T>::type;
        out[0] = (T)((U)x[0] + (U)istep);
    }
}

/* out: [n] <- the value (ValueTensor's [1] on the device when vt, else attr v),
 * converted as the CPU kernel does; Kind 0: a C cast, 1: uint8 ((int)v, 0 for
 * 0), 2: bool (v != 0) */
template <typename T, int Kind>
__global__ void k_fill_any_like(T *out, int64_t n, const void *vt, bool vt64, double v) {
    if (vt) v = vt64 ? *(const double *)vt : (double)*(const float *)vt;
    T c;
    if constexpr (Kind == 1) c = v != 0 ? (T)(int)v : (T)0;
    else if constexpr (Kind == 2) c = v != 0 ? (T)1 : (T)0;
    else c = (T)v;
    PE_CUDA_LOOP(i, n) out[i] = c;
}

} // namespace

extern "C" {

/* x [xd...] -> out [od...] (tile, expand_v2) */
pe_status pe_cuda_tile(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_tile_plan tp;
    PE_CHECK(pe_tile_plan_make(ctx, x, &tp));
    if (out->dtype != x->dtype || pe_tensor_numel(out) != pe_dims_prod(tp.od, 0, tp.n)) return internal_mismatch(ctx);
    const int64_t n = pe_tensor_numel(out);
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const tile_k p = tile_kernel_plan(tp); /* n == 0 (a scalar): the one element */
    PE_CUDA_ALL_TYPES(ctx, x->dtype, "X", T,
        k_tile<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((const T *)pe_tensor_data(x), (T *)pe_tensor_data(out),
                                                               n, p));
    return pe_cuda_check_launch(ctx);
}

/* x [xd...] (dims only), dout [od...] -> dx [xd...] = the sum of dout over the copies */
pe_status pe_cuda_tile_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_tile_plan tp;
    PE_CHECK(pe_tile_plan_make(ctx, x, &tp));
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(g) != pe_dims_prod(tp.od, 0, tp.n) ||
        pe_tensor_numel(dx) != pe_tensor_numel(x))
        return internal_mismatch(ctx);
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    const int64_t nx = pe_tensor_numel(dx);
    if (nx == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (pe_tensor_numel(g) == 0) /* no copies: zeros */
        return pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx), s), "cudaMemsetAsync");
    if (tp.n == 0) /* a scalar: its one copy */
        return pe_cuda_check(ctx, cudaMemcpyAsync(pe_tensor_data(dx), pe_tensor_data(g), pe_tensor_nbytes(g),
                                                  cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    tile_grad_k p;
    memset(&p, 0, sizeof p);
    p.n = tp.n;
    p.reps = 1;
    int64_t os = 1;
    for (int i = tp.n - 1; i >= 0; i--) {
        p.xd[i] = tp.xd[i];
        p.ostr[i] = os;
        os *= tp.od[i];
    }
    for (int i = 0; i < tp.n; i++) /* od is a multiple of xd (tile: repeats; expand_v2: xd 1 or od) */
        if (tp.od[i] != tp.xd[i]) {
            p.rep[p.nr] = tp.od[i] / tp.xd[i];
            p.step[p.nr] = tp.xd[i] * p.ostr[i];
            p.reps *= p.rep[p.nr];
            p.nr++;
        }
    const bool block = nx < 65536 && p.reps >= 64;
    const void *gd = pe_tensor_data(g);
    void *dd = pe_tensor_data(dx);
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        if (block)
            k_tile_grad_block<T><<<pe_cuda_blocks(nx * PE_CUDA_THREADS), PE_CUDA_THREADS, 0, s>>>((const T *)gd,
                                                                                                 (T *)dd, nx, p);
        else
            k_tile_grad_seq<T><<<pe_cuda_blocks(nx), PE_CUDA_THREADS, 0, s>>>((const T *)gd, (T *)dd, nx, p);
    });
    return pe_cuda_check_launch(ctx);
}

/* x, out [pre, d, post] (flatten: [1, numel, 1]) scanned along d */
pe_status pe_cuda_cumsum(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n) return internal_mismatch(ctx);
    scan_k p;
    memset(&p, 0, sizeof p);
    p.pre = 1;
    p.d = n;
    p.post = 1;
    if (!pe_ctx_bool(ctx, "flatten") && x->ndim > 0) {
        int64_t a = pe_ctx_int(ctx, "axis");
        if (a < 0) a += x->ndim;
        p.pre = pe_dims_prod(x->dims, 0, (int)a);
        p.d = x->dims[a];
        p.post = pe_dims_prod(x->dims, (int)a + 1, x->ndim);
    }
    if (n == 0) return PE_OK;
    p.cols = p.pre * p.post;
    p.rev = pe_ctx_bool(ctx, "reverse");
    p.excl = pe_ctx_bool(ctx, "exclusive");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const void *xd = pe_tensor_data(x);
    void *od = pe_tensor_data(out);
    switch (x->dtype) {
    case PE_DTYPE_FP32: return launch_cumsum<float, double>(ctx, xd, od, p, s);
    case PE_DTYPE_FP64: return launch_cumsum<double, double>(ctx, xd, od, p, s);
    case PE_DTYPE_INT32: return launch_cumsum<int32_t, uint32_t>(ctx, xd, od, p, s);
    case PE_DTYPE_INT64: return launch_cumsum<int64_t, uint64_t>(ctx, xd, od, p, s);
    default: return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    }
}

/* x -> out, a copy (nothing when in place) */
pe_status pe_cuda_assign(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (out->dtype != x->dtype || pe_tensor_nbytes(out) != pe_tensor_nbytes(x)) return internal_mismatch(ctx);
    const size_t n = pe_tensor_nbytes(x);
    if (!n || pe_tensor_data(out) == pe_tensor_data(x)) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    return pe_cuda_check(ctx, cudaMemcpyAsync(pe_tensor_data(out), pe_tensor_data(x), n, cudaMemcpyDeviceToDevice, s),
                         "cudaMemcpyAsync");
}

/* input [d...] (dims only) -> out int32 [rank] = d, on the device */
pe_status pe_cuda_shape(const pe_op_ctx *ctx) {
    const pe_tensor *in = pe_ctx_in(ctx, "Input");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (out->dtype != PE_DTYPE_INT32 || pe_tensor_numel(out) != in->ndim) return internal_mismatch(ctx);
    dims_k d;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < in->ndim; i++) {
        if (in->dims[i] > INT32_MAX)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "dim %d of Input '%s' (%lld) does not fit the int32 Out", i,
                                pe_ctx_in_name(ctx, "Input", 0), (long long)in->dims[i]);
        d.d[i] = (int32_t)in->dims[i];
    }
    if (in->ndim == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    k_shape<<<1, PE_CUDA_THREADS, 0, s>>>((int32_t *)pe_tensor_data(out), in->ndim, d);
    return pe_cuda_check_launch(ctx);
}

/* x [1] -> out [1] = x + step (in place when out is x) */
pe_status pe_cuda_increment(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (out->dtype != x->dtype || pe_tensor_numel(out) != 1 || pe_tensor_numel(x) != 1) return internal_mismatch(ctx);
    const double step = pe_ctx_float(ctx, "step");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const void *xd = pe_tensor_data(x);
    void *od = pe_tensor_data(out);
    switch (x->dtype) {
    case PE_DTYPE_FP32: k_increment<<<1, 1, 0, s>>>((const float *)xd, (float *)od, step, 0); break;
    case PE_DTYPE_FP64: k_increment<<<1, 1, 0, s>>>((const double *)xd, (double *)od, step, 0); break;
    case PE_DTYPE_INT32:
        k_increment<<<1, 1, 0, s>>>((const int32_t *)xd, (int32_t *)od, step, (uint64_t)(uint32_t)(int64_t)step);
        break;
    case PE_DTYPE_INT64:
        k_increment<<<1, 1, 0, s>>>((const int64_t *)xd, (int64_t *)od, step, (uint64_t)(int64_t)step);
        break;
    default: return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    }
    return pe_cuda_check_launch(ctx);
}

/* out: [any] <- value, or ValueTensor [1] (float32/64, checked by infer; read on the device) */
pe_status pe_cuda_fill_any_like(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const pe_tensor *vt = pe_ctx_in(ctx, "ValueTensor");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const double v = pe_ctx_float(ctx, "value");
    const void *vd = vt ? pe_tensor_data(vt) : NULL;
    const bool vt64 = vt && vt->dtype == PE_DTYPE_FP64;
    const int64_t n = pe_tensor_numel(out);
    void *d = pe_tensor_data(out);
    switch (out->dtype) {
    case PE_DTYPE_FP32: case PE_DTYPE_FP64: case PE_DTYPE_INT32: case PE_DTYPE_INT64:
    case PE_DTYPE_UINT8: case PE_DTYPE_BOOL: break;
    default: return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "dtype %s is not supported", pe_dtype_name(out->dtype));
    }
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const unsigned g = pe_cuda_blocks(n);
    switch (out->dtype) {
    case PE_DTYPE_FP32: k_fill_any_like<float, 0><<<g, PE_CUDA_THREADS, 0, s>>>((float *)d, n, vd, vt64, v); break;
    case PE_DTYPE_FP64: k_fill_any_like<double, 0><<<g, PE_CUDA_THREADS, 0, s>>>((double *)d, n, vd, vt64, v); break;
    case PE_DTYPE_INT32: k_fill_any_like<int32_t, 0><<<g, PE_CUDA_THREADS, 0, s>>>((int32_t *)d, n, vd, vt64, v); break;
    case PE_DTYPE_INT64: k_fill_any_like<int64_t, 0><<<g, PE_CUDA_THREADS, 0, s>>>((int64_t *)d, n, vd, vt64, v); break;
    case PE_DTYPE_UINT8: k_fill_any_like<uint8_t, 1><<<g, PE_CUDA_THREADS, 0, s>>>((uint8_t *)d, n, vd, vt64, v); break;
    default: k_fill_any_like<uint8_t, 2><<<g, PE_CUDA_THREADS, 0, s>>>((uint8_t *)d, n, vd, vt64, v); break;
    }
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
