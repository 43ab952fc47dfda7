/* ops/cuda/math.cu — CUDA kernels of the math family: mul, matmul,
 * matmul_v2 and their grads (float32, float64), lookup_table(_v2) (any
 * dtype of W) and its grad (float32, float64), layer_norm and its grad
 * (float32, float64) — the ops and dtypes of ops/cpu/math.c.
 *
 * GEMMs: cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx) on the place's
 * handle (pe_cuda_blas, bound to the place's stream; TF32 off unless
 * PE_CUDA_TF32=1), CUBLAS_COMPUTE_32F / _64F. cuBLAS is column-major: a
 * row-major C[m, n] = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T,
 * so gemm() below swaps the operands and keeps the CPU kernel's leading
 * dimensions. The GEMM choices are the CPU kernel's: one GEMM when the
 * batches fold into [nb*M, K] x [K, N]; otherwise strided-batched GEMMs
 * over the trailing batch axes on which both operands step through their
 * matrices uniformly (one matrix per batch, or one for all: stride 0),
 * looped over the leading axes at the offsets pe_matmul_x_batch /
 * pe_matmul_y_batch give (numpy broadcasting of both operands' batch dims;
 * the fully uniform case is a single batched GEMM). The gradient of a
 * broadcast operand (one matrix used by several batches) is the sum of the
 * per-batch products added into it with beta = 1: a batched GEMM only spans
 * batches that write distinct matrices, and the loop adds the rest one GEMM
 * after the other on the stream, so every matrix receives its products in
 * batch order — the CPU's fixed order, deterministic.
 *
 * lookup_table: the CPU kernel fails on an id outside [0, V); here a small
 * kernel finds the first such position (integer atomicMin, deterministic)
 * and one 8-byte read brings it to the host (a synchronization of the
 * stream, the price of the CPU's error). The gradient is deterministic
 * without float atomics: (id, position) pairs are sorted by id with CUB's
 * stable radix sort, so each id's positions are in ids order; then every
 * element of W@GRAD finds its id's segment by binary search and sums those
 * dOut rows in that order, in the table's type from 0 — the CPU's sum, bit
 * for bit. padding_idx rows and unused rows are 0.
 *
 * layer_norm: one block per row, per-row mean and variance (two passes) and
 * the dX sums in double through a fixed-order tree reduction in shared
 * memory; Scale@GRAD and Bias@GRAD are column sums in double over row
 * chunks, then over the chunks in order (a single chunk — the CPU's
 * sequential order — when D is large). Products that nvcc would contract
 * into FMAs are written with __dmul_rn so the formulas round as on CPU.
 *
 * Why: GEMM-based layers (fc / mul, attention matmuls), embeddings and
 * layer_norm are the bulk of a transformer's ops; with these a model's
 * forward and backward stay on the GPU.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/math.h"

#include <cublas_v2.h>
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cstring>

namespace {

/* ---- GEMM through cuBLAS ------------------------------------------------- */

cublasHandle_t blas_handle(const pe_op_ctx *ctx) {
    if (ctx->svc && ctx->svc->blas) return (cublasHandle_t)ctx->svc->blas;
    return (cublasHandle_t)pe_cuda_blas(ctx->place.id);
}

/* cuBLAS takes int sizes: refuse larger matrices instead of overflowing. */
pe_status check_blas_size(const pe_op_ctx *ctx, int64_t m, int64_t n, int64_t k) {
    const int64_t lim = INT_MAX;
    if (m > lim || n > lim || k > lim)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "GEMM [%lld x %lld] x [%lld x %lld] exceeds cuBLAS's 32-bit sizes",
                            (long long)m, (long long)k, (long long)k, (long long)n);
    return PE_OK;
}

/* The GEMMs of one op: handle, stream, dtype. */
struct blas_ctx {
    const pe_op_ctx *ctx;
    cublasHandle_t h;
    cudaStream_t s;
    pe_dtype dt;
};

/* C[m, n] = alpha * op(A) op(B) + beta * C, row-major, beta 0 or 1, for
 * `count` matrices at element strides sa, sb, sc (count 1: strides unused).
 * A is stored [m, k] ([k, m] when ta), B [k, n] ([n, k] when tb) — the CPU
 * gemm()'s arguments. k == 0: C = 0 (beta 0) or unchanged (beta 1). */
pe_status gemm(const blas_ctx &b, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
               int64_t sa, const void *bm, int64_t sb, double beta, void *c, int64_t sc, int64_t count) {
    if (m == 0 || n == 0 || count == 0) return PE_OK;
    const size_t es = pe_dtype_size(b.dt);
    if (k == 0) {
        if (beta != 0.0) return PE_OK;
        if (count == 1 || sc == m * n)
            return pe_cuda_check(b.ctx, cudaMemsetAsync(c, 0, (size_t)(m * n * count) * es, b.s), "cudaMemsetAsync");
        for (int64_t i = 0; i < count; i++)
            PE_CHECK(pe_cuda_check(b.ctx, cudaMemsetAsync((char *)c + (size_t)(i * sc) * es, 0, (size_t)(m * n) * es,
                                                          b.s), "cudaMemsetAsync"));
        return PE_OK;
    }
    if (count > INT_MAX)
        return pe_ctx_error(b.ctx, PE_ERR_UNSUPPORTED, "%lld batched GEMMs exceed cuBLAS's 32-bit batch count",
                            (long long)count);
    if (!b.h) return pe_ctx_error(b.ctx, PE_ERR_DEVICE, "no cuBLAS handle: %s", pe_last_error());
    const int lda = (int)(ta ? m : k), ldb = (int)(tb ? k : n), ldc = (int)n;
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const bool f32 = b.dt == PE_DTYPE_FP32;
    const float af = (float)alpha, bf = (float)beta;
    const void *pa = f32 ? (const void *)&af : (const void *)&alpha, *pb = f32 ? (const void *)&bf : (const void *)&beta;
    const cudaDataType_t ty = f32 ? CUDA_R_32F : CUDA_R_64F;
    const cublasComputeType_t ct = f32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F;
    /* column-major: C^T [n, m] = op(B)^T [n, k] op(A)^T [k, m] */
    cublasStatus_t st;
    if (count == 1)
        st = cublasGemmEx(b.h, opb, opa, (int)n, (int)m, (int)k, pa, bm, ty, ldb, a, ty, lda, pb, c, ty, ldc, ct,
                          CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmStridedBatchedEx(b.h, opb, opa, (int)n, (int)m, (int)k, pa, bm, ty, ldb, (long long)sb, a, ty,
                                        lda, (long long)sa, pb, c, ty, ldc, (long long)sc, (int)count, ct,
                                        CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return pe_ctx_error(b.ctx, PE_ERR_DEVICE, "%s (%s) [%lld x %lld] x [%lld x %lld]%s failed: %s",
                            count == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx", f32 ? "float32" : "float64",
                            (long long)m, (long long)k, (long long)k, (long long)n, count == 1 ? "" : " batched",
                            cublasGetStatusString(st));
    return PE_OK;
}

pe_status blas_begin(const pe_op_ctx *ctx, const pe_cuda_device_scope &dev, pe_dtype dt, blas_ctx *b) {
    b->ctx = ctx;
    b->dt = dt;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &b->s));
    b->h = blas_handle(ctx);
    if (!b->h) return pe_ctx_error(ctx, PE_ERR_DEVICE, "no cuBLAS handle: %s", pe_last_error());
    return PE_OK;
}

/* The float dtype of the GEMM operands (infer checked them; a kernel called
 * directly gets a clear error instead of a wrong-typed GEMM). */
pe_status check_gemm_dtype(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *y) {
    if ((x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64) || y->dtype != x->dtype)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' is %s and Y '%s' is %s; float32 or float64 pairs only",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype), pe_ctx_in_name(ctx, "Y", 0),
                            pe_dtype_name(y->dtype));
    return PE_OK;
}

/* ---- matmul helpers ----------------------------------------------------- */

/* The output batches as [outer, inner]: the trailing batch axes from
 * `first` on form one strided-batched GEMM of `inner` matrices, the leading
 * ones a loop of `outer` such GEMMs. Over the inner axes each operand steps
 * through its matrices uniformly: one matrix per batch (x_step: the x
 * matrix of inner batch i is base + i) or one for all (stride 0). */
struct batch_split {
    int64_t outer, inner;
    bool x_step, y_step;
};

/* The largest inner block where both operands are uniform and, for
 * distinct_x (distinct_y), x (y) steps — the matrices the batches write are
 * then distinct within one batched GEMM, so a gradient added into a
 * broadcast operand with beta = 1 has no two writers at once, and the outer
 * loop adds the rest in batch order (the CPU's). Size-1 axes are neutral. */
batch_split split_batches(const pe_matmul_plan *p, bool distinct_x, bool distinct_y) {
    batch_split sp = {p->n_batch, 1, false, false};
    for (int first = 0; first <= p->batch_ndim; first++) {
        bool xz = true, xnz = true, yz = true, ynz = true;
        int64_t inner = 1;
        for (int a = first; a < p->batch_ndim; a++) {
            if (p->batch_dims[a] == 1) continue;
            inner *= p->batch_dims[a];
            if (p->x_bstride[a]) xz = false;
            else xnz = false;
            if (p->y_bstride[a]) yz = false;
            else ynz = false;
        }
        if ((xz || xnz) && (yz || ynz) && (!distinct_x || xnz) && (!distinct_y || ynz)) {
            sp.inner = inner;
            sp.outer = inner ? p->n_batch / inner : 0;
            sp.x_step = xnz && inner > 1;
            sp.y_step = ynz && inner > 1;
            return sp;
        }
    }
    return sp; /* not reached: first == batch_ndim always fits */
}

/* dX of `count` batches (element strides sg, sy, sd):
 *   op(X) = X:   dX [rows, k] = alpha * dOut [rows, n] op(Y)^T [n, k]
 *   op(X) = X^T: dX [k, m]    = alpha * op(Y) [k, n] dOut^T [n, m] */
pe_status matmul_dx(const blas_ctx &b, const pe_matmul_plan *p, int64_t rows, const void *g, int64_t sg,
                    const void *y, int64_t sy, double beta, void *dx, int64_t sd, int64_t count) {
    if (!p->trans_x) return gemm(b, false, !p->trans_y, rows, p->k, p->n, p->alpha, g, sg, y, sy, beta, dx, sd, count);
    return gemm(b, p->trans_y, true, p->k, p->m, p->n, p->alpha, y, sy, g, sg, beta, dx, sd, count);
}

/* dY of `count` batches:
 *   op(Y) = Y:   dY [k, n] = alpha * op(X)^T [k, rows] dOut [rows, n]
 *   op(Y) = Y^T: dY [n, k] = alpha * dOut^T [n, rows] op(X) [rows, k] */
pe_status matmul_dy(const blas_ctx &b, const pe_matmul_plan *p, int64_t rows, const void *x, int64_t sx,
                    const void *g, int64_t sg, double beta, void *dy, int64_t sd, int64_t count) {
    if (!p->trans_y) return gemm(b, !p->trans_x, false, p->k, p->n, rows, p->alpha, x, sx, g, sg, beta, dy, sd, count);
    return gemm(b, true, p->trans_x, p->n, p->k, rows, p->alpha, g, sg, x, sx, beta, dy, sd, count);
}

/* ---- lookup_table kernels ---------------------------------------------- */

/* ids: [n] -> *bad = min position whose id is outside [0, V) (unchanged if none) */
template <typename I>
__global__ void k_check_ids(const I *ids, int64_t n, int64_t V, unsigned long long *bad) {
    PE_CUDA_LOOP(i, n) {
        const int64_t id = (int64_t)ids[i];
        if (id < 0 || id >= V) atomicMin(bad, (unsigned long long)i);
    }
}

/* w: [V, D], ids: [n] (valid) -> out: [n, D]; padding_idx rows are 0 */
template <typename T, typename I>
__global__ void k_lookup(const T *w, const I *ids, T *out, int64_t n, int64_t D, int64_t pad) {
    PE_CUDA_LOOP(idx, n * D) {
        const int64_t i = idx / D, j = idx - i * D;
        const int64_t id = (int64_t)ids[i];
        out[idx] = id == pad ? (T)0 : w[id * D + j];
    }
}

/* ids: [n] -> keys: [n] (the ids, range-checked), vals: [n] = 0..n-1 */
template <typename I, typename U>
__global__ void k_embed_keys(const I *ids, U *keys, U *vals, int64_t n, int64_t V, unsigned long long *bad) {
    PE_CUDA_LOOP(i, n) {
        const int64_t id = (int64_t)ids[i];
        if (id < 0 || id >= V) atomicMin(bad, (unsigned long long)i);
        keys[i] = (U)(id < 0 ? 0 : id);
        vals[i] = (U)i;
    }
}

/* First index of sorted keys [n] with key >= r. */
template <typename U> __device__ int64_t first_at_least(const U *keys, int64_t n, uint64_t r) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)keys[mid] < r) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* keys, pos: [n] sorted by id (stable: positions ascending within an id),
 * g: [n, D] -> dw: [V, D], dw[r, j] = sum in ids order of g[pos, j] over the
 * positions of id r, from 0 in T (the CPU's sum); padding_idx row 0. */
template <typename T, typename U>
__global__ void k_embed_grad(const U *keys, const U *pos, const T *g, T *dw, int64_t n, int64_t V, int64_t D,
                             int64_t pad) {
    PE_CUDA_LOOP(idx, V * D) {
        const int64_t r = idx / D, j = idx - r * D;
        T acc = (T)0;
        if (r != pad) {
            const int64_t lo = first_at_least(keys, n, (uint64_t)r), hi = first_at_least(keys, n, (uint64_t)r + 1);
            for (int64_t q = lo; q < hi; q++) acc += g[(int64_t)pos[q] * D + j];
        }
        dw[idx] = acc;
    }
}

/* Reads the first bad position (ULLONG_MAX: none) of a check kernel: a
 * synchronization of the stream; on a bad id, the error names it. */
template <typename I>
pe_status ids_verdict(const pe_op_ctx *ctx, cudaStream_t s, const unsigned long long *bad_d, const pe_tensor *ids,
                      int64_t V) {
    unsigned long long bad = 0;
    PE_CHECK(pe_cuda_check(ctx, cudaMemcpyAsync(&bad, bad_d, sizeof bad, cudaMemcpyDeviceToHost, s),
                           "reading the id check from the device"));
    PE_CHECK(pe_cuda_check(ctx, cudaStreamSynchronize(s), "cudaStreamSynchronize after the id check"));
    if (bad == ULLONG_MAX) return PE_OK;
    I id = 0;
    PE_CHECK(pe_cuda_check(ctx, cudaMemcpyAsync(&id, (const I *)pe_tensor_data(ids) + bad, sizeof id,
                                                cudaMemcpyDeviceToHost, s), "reading the bad id from the device"));
    PE_CHECK(pe_cuda_check(ctx, cudaStreamSynchronize(s), "cudaStreamSynchronize"));
    return pe_ctx_error(ctx, PE_ERR_INVALID, "Ids '%s'[%lld] = %lld is outside the table [0, %lld) of W '%s'",
                        pe_ctx_in_name(ctx, "Ids", 0), (long long)bad, (long long)id, (long long)V,
                        pe_ctx_in_name(ctx, "W", 0));
}

/* The Ids dtype (infer checked it). */
pe_status check_ids_dtype(const pe_op_ctx *ctx, const pe_tensor *ids) {
    if (ids->dtype != PE_DTYPE_INT64 && ids->dtype != PE_DTYPE_INT32)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Ids '%s' has dtype %s; int64 or int32 expected",
                            pe_ctx_in_name(ctx, "Ids", 0), pe_dtype_name(ids->dtype));
    return PE_OK;
}

/* Checks every id on the device (n > 0). */
template <typename I>
pe_status check_ids(const pe_op_ctx *ctx, cudaStream_t s, const pe_tensor *ids, int64_t n, int64_t V) {
    pe_cuda_temp bad(ctx, sizeof(unsigned long long));
    if (!bad.ok(sizeof(unsigned long long))) return PE_ERR_NOMEM;
    PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(bad.get(), 0xff, sizeof(unsigned long long), s), "cudaMemsetAsync"));
    k_check_ids<I><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((const I *)pe_tensor_data(ids), n, V,
                                                                  bad.get<unsigned long long>());
    PE_CHECK(pe_cuda_check_launch(ctx));
    return ids_verdict<I>(ctx, s, bad.get<unsigned long long>(), ids, V);
}

size_t align_up(size_t v) { return (v + 255) & ~(size_t)255; }

/* W@GRAD for ids of type I, keys/positions of type U (n > 0, V > 0). */
template <typename I, typename U>
pe_status embed_grad(const pe_op_ctx *ctx, cudaStream_t s, const pe_tensor *ids, const pe_tensor *g, pe_tensor *dw,
                     int64_t n, int64_t V, int64_t D, int64_t pad) {
    if (n > INT_MAX)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "%lld ids exceed the sort's 32-bit item count", (long long)n);
    int end_bit = 1;
    while (end_bit < (int)(8 * sizeof(U)) && ((uint64_t)(V - 1) >> end_bit) != 0) end_bit++;
    size_t sort_bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const U *)nullptr, (U *)nullptr,
                                                    (const U *)nullptr, (U *)nullptr, (int)n, 0, end_bit, s);
    PE_CHECK(pe_cuda_check(ctx, e, "cub::DeviceRadixSort::SortPairs (size query)"));
    const size_t arr = align_up((size_t)n * sizeof(U));
    const size_t bytes = 256 + 4 * arr + align_up(sort_bytes);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    char *base = tmp.get<char>();
    unsigned long long *bad = (unsigned long long *)base;
    U *keys_in = (U *)(base + 256), *keys_out = (U *)(base + 256 + arr);
    U *vals_in = (U *)(base + 256 + 2 * arr), *vals_out = (U *)(base + 256 + 3 * arr);
    void *sort_tmp = base + 256 + 4 * arr;
    PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(bad, 0xff, sizeof *bad, s), "cudaMemsetAsync"));
    k_embed_keys<I, U><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((const I *)pe_tensor_data(ids), keys_in,
                                                                      vals_in, n, V, bad);
    PE_CHECK(pe_cuda_check_launch(ctx));
    PE_CHECK(ids_verdict<I>(ctx, s, bad, ids, V));
    if (D == 0) return PE_OK;
    e = cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, (const U *)keys_in, keys_out, (const U *)vals_in,
                                        vals_out, (int)n, 0, end_bit, s);
    PE_CHECK(pe_cuda_check(ctx, e, "cub::DeviceRadixSort::SortPairs"));
    PE_CUDA_FLOAT_TYPES(ctx, dw->dtype, "W@GRAD", T,
        k_embed_grad<T, U><<<pe_cuda_blocks(V * D), PE_CUDA_THREADS, 0, s>>>(
            keys_out, vals_out, (const T *)pe_tensor_data(g), (T *)pe_tensor_data(dw), n, V, D, pad));
    return pe_cuda_check_launch(ctx);
}

/* ---- layer_norm kernels ------------------------------------------------- */

/* Tree sum of v over the block (blockDim.x a power of two <= PE_CUDA_THREADS)
 * in a fixed order; every thread gets the result. */
__device__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

/* x: [N, D], scale?, bias?: [D] -> y: [N, D], mean, var: [N]; one block per row */
template <typename T>
__global__ void k_ln_fwd(const T *x, const T *scale, const T *bias, T *y, T *mean, T *var, int64_t N, int64_t D,
                         double eps) {
    __shared__ double sh[PE_CUDA_THREADS];
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        const T *xr = x + i * D;
        T *yr = y + i * D;
        double s = 0, q = 0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += (double)xr[j];
        s = block_sum(s, sh);
        const double mu = D ? s / (double)D : 0.0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const double d = (double)xr[j] - mu;
            q += __dmul_rn(d, d);
        }
        q = block_sum(q, sh);
        const double v = D ? q / (double)D : 0.0, rs = 1.0 / sqrt(v + eps);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            double h = __dmul_rn((double)xr[j] - mu, rs);
            if (scale) h = __dmul_rn(h, (double)scale[j]);
            if (bias) h = __dadd_rn(h, (double)bias[j]);
            yr[j] = (T)h;
        }
        if (threadIdx.x == 0) {
            mean[i] = (T)mu;
            var[i] = (T)v;
        }
    }
}

/* x, dy: [N, D], scale?: [D], mean, var: [N] -> dx: [N, D]; one block per row:
 * dx = rs * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale */
template <typename T>
__global__ void k_ln_bwd_dx(const T *x, const T *scale, const T *mean, const T *var, const T *dy, T *dx, int64_t N,
                            int64_t D, double eps) {
    __shared__ double sh[PE_CUDA_THREADS];
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        const T *xr = x + i * D, *gr = dy + i * D;
        T *dr = dx + i * D;
        const double mu = (double)mean[i], rs = 1.0 / sqrt((double)var[i] + eps);
        double a = 0, c = 0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const double gj = scale ? __dmul_rn((double)gr[j], (double)scale[j]) : (double)gr[j];
            a += gj;
            c += __dmul_rn(__dmul_rn(gj, (double)xr[j] - mu), rs);
        }
        a = block_sum(a, sh);
        c = block_sum(c, sh);
        a = D ? a / (double)D : 0.0;
        c = D ? c / (double)D : 0.0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const double gj = scale ? __dmul_rn((double)gr[j], (double)scale[j]) : (double)gr[j];
            dr[j] = (T)__dmul_rn(rs, gj - a - __dmul_rn(__dmul_rn((double)xr[j] - mu, rs), c));
        }
    }
}

/* Partial column sums over row chunk ch of `rows` rows, in row order, in double:
 * ps[ch, j] = sum dy[i, j] * (x[i, j] - mean[i]) * rs[i], pb[ch, j] = sum dy[i, j] */
template <typename T>
__global__ void k_ln_bwd_cols(const T *x, const T *mean, const T *var, const T *dy, double *ps, double *pb,
                              int64_t N, int64_t D, int64_t nchunk, int64_t rows, double eps) {
    PE_CUDA_LOOP(idx, nchunk * D) {
        const int64_t ch = idx / D, j = idx - ch * D;
        const int64_t r0 = ch * rows, r1 = r0 + rows < N ? r0 + rows : N;
        double as = 0, ab = 0;
        for (int64_t i = r0; i < r1; i++) {
            const double mu = (double)mean[i], rs = 1.0 / sqrt((double)var[i] + eps);
            const double gv = (double)dy[i * D + j];
            as += __dmul_rn(__dmul_rn(gv, (double)x[i * D + j] - mu), rs);
            ab += gv;
        }
        ps[idx] = as;
        pb[idx] = ab;
    }
}

/* ps, pb: [nchunk, D] -> dscale?, dbias?: [D], the chunks summed in order */
template <typename T>
__global__ void k_ln_bwd_cols_final(const double *ps, const double *pb, T *dscale, T *dbias, int64_t D,
                                    int64_t nchunk) {
    PE_CUDA_LOOP(j, D) {
        double as = 0, ab = 0;
        for (int64_t c = 0; c < nchunk; c++) {
            as += ps[c * D + j];
            ab += pb[c * D + j];
        }
        if (dscale) dscale[j] = (T)as;
        if (dbias) dbias[j] = (T)ab;
    }
}

/* Threads per row block: a power of two, fewer for short rows. */
unsigned ln_threads(int64_t D) {
    unsigned t = 32;
    while (t < PE_CUDA_THREADS && (int64_t)t < D) t *= 2;
    return t;
}

unsigned row_blocks(int64_t N) { return (unsigned)(N < 65535 ? (N < 1 ? 1 : N) : 65535); }

} // namespace

extern "C" {

/* ---- mul ------------------------------------------------------------------ */

/* x: [M..., K...] as [M, K]; y: [K..., N...] as [K, N] -> out: [M..., N...] */
pe_status pe_cuda_mul(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    PE_CHECK(check_gemm_dtype(ctx, x, y));
    int xn = (int)pe_ctx_int(ctx, "x_num_col_dims"), yn = (int)pe_ctx_int(ctx, "y_num_col_dims");
    int64_t m = pe_dims_prod(x->dims, 0, xn), k = pe_dims_prod(x->dims, xn, x->ndim);
    int64_t n = pe_dims_prod(y->dims, yn, y->ndim);
    PE_CHECK(check_blas_size(ctx, m, n, k));
    if (m == 0 || n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    blas_ctx b;
    PE_CHECK(blas_begin(ctx, dev, x->dtype, &b));
    PE_CHECK(gemm(b, false, false, m, n, k, 1.0, pe_tensor_data(x), 0, pe_tensor_data(y), 0, 0.0,
                  pe_tensor_data(out), 0, 1));
    return pe_cuda_check_launch(ctx);
}

/* x: [M, K], y: [K, N] (flattened), Out@GRAD: [M, N]
 * -> X@GRAD = dOut Y^T: [M, K], Y@GRAD = X^T dOut: [K, N] */
pe_status pe_cuda_mul_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    PE_CHECK(check_gemm_dtype(ctx, x, y));
    int xn = (int)pe_ctx_int(ctx, "x_num_col_dims"), yn = (int)pe_ctx_int(ctx, "y_num_col_dims");
    int64_t m = pe_dims_prod(x->dims, 0, xn), k = pe_dims_prod(x->dims, xn, x->ndim);
    int64_t n = pe_dims_prod(y->dims, yn, y->ndim);
    PE_CHECK(check_blas_size(ctx, m, n, k));
    if (!dx && !dy) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    blas_ctx b;
    PE_CHECK(blas_begin(ctx, dev, x->dtype, &b));
    if (dx)
        PE_CHECK(gemm(b, false, true, m, k, n, 1.0, pe_tensor_data(g), 0, pe_tensor_data(y), 0, 0.0,
                      pe_tensor_data(dx), 0, 1));
    if (dy)
        PE_CHECK(gemm(b, true, false, k, n, m, 1.0, pe_tensor_data(x), 0, pe_tensor_data(g), 0, 0.0,
                      pe_tensor_data(dy), 0, 1));
    return pe_cuda_check_launch(ctx);
}

/* ---- matmul / matmul_v2 ---------------------------------------------------- */

/* x: [bx..., M, K] (K, M if transposed; [K] for a vector), y: [by..., K, N]
 * -> out: [broadcast(bx, by)..., M, N] = alpha * op(x) op(y) */
pe_status pe_cuda_matmul(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    PE_CHECK(check_gemm_dtype(ctx, x, y));
    pe_matmul_plan p;
    PE_CHECK(pe_matmul_plan_make(ctx, x, y, &p));
    const int64_t m = p.m, n = p.n, k = p.k, nb = p.n_batch;
    if (nb == 0 || m == 0 || n == 0) return PE_OK;
    const size_t es = pe_dtype_size(x->dtype);
    const char *xd = (const char *)pe_tensor_data(x), *yd = (const char *)pe_tensor_data(y);
    char *od = (char *)pe_tensor_data(out);
    pe_cuda_device_scope dev(ctx->place.id);
    blas_ctx b;
    PE_CHECK(blas_begin(ctx, dev, x->dtype, &b));
    const bool y_shared = p.batch_ndim == 0 || pe_dims_prod(y->dims, 0, y->ndim) == k * n;
    if (nb == 1 || (y_shared && p.x_full && !p.trans_x)) {
        /* one GEMM: [nb*M, K] x [K, N] (x's batches are consecutive row blocks) */
        PE_CHECK(check_blas_size(ctx, nb * m, n, k));
        PE_CHECK(gemm(b, p.trans_x, p.trans_y, nb * m, n, k, p.alpha, xd, 0, yd, 0, 0.0, od, 0, 1));
        return pe_cuda_check_launch(ctx);
    }
    PE_CHECK(check_blas_size(ctx, m, n, k));
    /* strided-batched GEMMs over the inner batch axes, a loop over the outer ones */
    const batch_split sp = split_batches(&p, false, false);
    const int64_t xm = m * k, ym = k * n, om = m * n; /* elements per matrix */
    for (int64_t o = 0; o < sp.outer; o++) {
        const int64_t b0 = o * sp.inner;
        PE_CHECK(gemm(b, p.trans_x, p.trans_y, m, n, k, p.alpha, xd + (size_t)(pe_matmul_x_batch(&p, b0) * xm) * es,
                      sp.x_step ? xm : 0, yd + (size_t)(pe_matmul_y_batch(&p, b0) * ym) * es, sp.y_step ? ym : 0,
                      0.0, od + (size_t)(b0 * om) * es, om, sp.inner));
    }
    return pe_cuda_check_launch(ctx);
}

/* x: [bx..., M, K] (or transposed, or [K]), y: [by..., K, N], Out@GRAD: [bcast..., M, N]
 * -> X@GRAD like x, Y@GRAD like y (broadcast batch dims summed in batch order) */
pe_status pe_cuda_matmul_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    PE_CHECK(check_gemm_dtype(ctx, x, y));
    pe_matmul_plan p;
    PE_CHECK(pe_matmul_plan_make(ctx, x, y, &p));
    const int64_t m = p.m, n = p.n, k = p.k, nb = p.n_batch;
    if (!dx && !dy) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    blas_ctx b;
    PE_CHECK(blas_begin(ctx, dev, x->dtype, &b));
    if (nb == 0 || m == 0 || n == 0) { /* empty product: zero gradients */
        if (dx && pe_tensor_nbytes(dx))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx), b.s),
                                   "cudaMemsetAsync"));
        if (dy && pe_tensor_nbytes(dy))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dy), 0, pe_tensor_nbytes(dy), b.s),
                                   "cudaMemsetAsync"));
        return PE_OK;
    }
    const size_t es = pe_dtype_size(x->dtype);
    const char *xd = (const char *)pe_tensor_data(x), *yd = (const char *)pe_tensor_data(y);
    const char *gd = (const char *)pe_tensor_data(g);
    const bool y_shared = p.batch_ndim == 0 || pe_dims_prod(y->dims, 0, y->ndim) == k * n;
    if (nb == 1 || (y_shared && p.x_full && !p.trans_x)) {
        /* as the forward: x's batches are consecutive row blocks [nb*M, K] sharing one Y */
        PE_CHECK(check_blas_size(ctx, nb * m, n, k));
        if (dx) PE_CHECK(matmul_dx(b, &p, nb * m, gd, 0, yd, 0, 0.0, pe_tensor_data(dx), 0, 1));
        if (dy) PE_CHECK(matmul_dy(b, &p, nb * m, xd, 0, gd, 0, 0.0, pe_tensor_data(dy), 0, 1));
        return pe_cuda_check_launch(ctx);
    }
    PE_CHECK(check_blas_size(ctx, m, n, k));
    const int64_t xm = m * k, ym = k * n, gm = m * n; /* elements per matrix */
    /* Each operand's gradient: strided-batched GEMMs over inner batch axes
     * where it has one matrix per batch, a loop over the outer ones; a
     * broadcast operand (not full) is zeroed first and its products added
     * with beta = 1, each of its matrices receiving them in batch order. */
    if (dx) {
        char *dd = (char *)pe_tensor_data(dx);
        if (!p.x_full && pe_tensor_nbytes(dx))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(dd, 0, pe_tensor_nbytes(dx), b.s), "cudaMemsetAsync"));
        const batch_split sp = split_batches(&p, true, false);
        for (int64_t o = 0; o < sp.outer; o++) {
            const int64_t b0 = o * sp.inner;
            PE_CHECK(matmul_dx(b, &p, m, gd + (size_t)(b0 * gm) * es, gm,
                               yd + (size_t)(pe_matmul_y_batch(&p, b0) * ym) * es, sp.y_step ? ym : 0,
                               p.x_full ? 0.0 : 1.0, dd + (size_t)(pe_matmul_x_batch(&p, b0) * xm) * es, xm,
                               sp.inner));
        }
    }
    if (dy) {
        char *dd = (char *)pe_tensor_data(dy);
        if (!p.y_full && pe_tensor_nbytes(dy))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(dd, 0, pe_tensor_nbytes(dy), b.s), "cudaMemsetAsync"));
        const batch_split sp = split_batches(&p, false, true);
        for (int64_t o = 0; o < sp.outer; o++) {
            const int64_t b0 = o * sp.inner;
            PE_CHECK(matmul_dy(b, &p, m, xd + (size_t)(pe_matmul_x_batch(&p, b0) * xm) * es, sp.x_step ? xm : 0,
                               gd + (size_t)(b0 * gm) * es, gm, p.y_full ? 0.0 : 1.0,
                               dd + (size_t)(pe_matmul_y_batch(&p, b0) * ym) * es, ym, sp.inner));
        }
    }
    return pe_cuda_check_launch(ctx);
}

/* ---- lookup_table / lookup_table_v2 ----------------------------------------- */

/* w: [V, D], ids: [n...] -> out: [n..., D]; out row i = w row ids[i] (zeros for padding_idx) */
pe_status pe_cuda_lookup_table(const pe_op_ctx *ctx) {
    const pe_tensor *w = pe_ctx_in(ctx, "W"), *ids = pe_ctx_in(ctx, "Ids");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    PE_CHECK(check_ids_dtype(ctx, ids));
    const int64_t V = w->dims[0], D = w->dims[1], n = pe_tensor_numel(ids), pad = pe_ctx_int(ctx, "padding_idx");
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const bool i64 = ids->dtype == PE_DTYPE_INT64;
    if (i64) PE_CHECK(check_ids<int64_t>(ctx, s, ids, n, V));
    else PE_CHECK(check_ids<int32_t>(ctx, s, ids, n, V));
    if (D == 0) return PE_OK;
    const unsigned nblk = pe_cuda_blocks(n * D);
    PE_CUDA_ALL_TYPES(ctx, w->dtype, "W", T, {
        if (i64)
            k_lookup<T, int64_t><<<nblk, PE_CUDA_THREADS, 0, s>>>((const T *)pe_tensor_data(w),
                                                                   (const int64_t *)pe_tensor_data(ids),
                                                                   (T *)pe_tensor_data(out), n, D, pad);
        else
            k_lookup<T, int32_t><<<nblk, PE_CUDA_THREADS, 0, s>>>((const T *)pe_tensor_data(w),
                                                                   (const int32_t *)pe_tensor_data(ids),
                                                                   (T *)pe_tensor_data(out), n, D, pad);
    });
    return pe_cuda_check_launch(ctx);
}

/* w: [V, D], ids: [n...], Out@GRAD: [n..., D] -> W@GRAD: [V, D] (dense; padding row 0) */
pe_status pe_cuda_lookup_table_grad(const pe_op_ctx *ctx) {
    const pe_tensor *w = pe_ctx_in(ctx, "W"), *ids = pe_ctx_in(ctx, "Ids"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dw = pe_ctx_out(ctx, "W@GRAD");
    if (!dw) return PE_OK;
    PE_CHECK(pe_cuda_check_inputs(ctx));
    PE_CHECK(check_ids_dtype(ctx, ids));
    if (dw->dtype != PE_DTYPE_FP32 && dw->dtype != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "W '%s' has dtype %s; gradients need float32 or float64",
                            pe_ctx_in_name(ctx, "W", 0), pe_dtype_name(dw->dtype));
    const int64_t V = w->dims[0], D = w->dims[1], n = pe_tensor_numel(ids), pad = pe_ctx_int(ctx, "padding_idx");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (n == 0) { /* no ids: a zero gradient */
        if (pe_tensor_nbytes(dw))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dw), 0, pe_tensor_nbytes(dw), s),
                                   "cudaMemsetAsync"));
        return PE_OK;
    }
    const bool i64 = ids->dtype == PE_DTYPE_INT64;
    if (V <= 0) { /* every id is outside an empty table: the CPU's error */
        if (i64) return check_ids<int64_t>(ctx, s, ids, n, V);
        return check_ids<int32_t>(ctx, s, ids, n, V);
    }
    const bool narrow = (uint64_t)V <= UINT32_MAX && (uint64_t)n <= UINT32_MAX;
    if (i64)
        return narrow ? embed_grad<int64_t, uint32_t>(ctx, s, ids, g, dw, n, V, D, pad)
                      : embed_grad<int64_t, uint64_t>(ctx, s, ids, g, dw, n, V, D, pad);
    return narrow ? embed_grad<int32_t, uint32_t>(ctx, s, ids, g, dw, n, V, D, pad)
                  : embed_grad<int32_t, uint64_t>(ctx, s, ids, g, dw, n, V, D, pad);
}

/* ---- layer_norm ------------------------------------------------------------- */

/* x: [N, D] (N = prod(dims[:begin_norm_axis])), scale?, bias?: [D]
 * -> y: like x, mean, variance: [N] (statistics in double, two passes) */
pe_status pe_cuda_layer_norm(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *sc = pe_ctx_in(ctx, "Scale"), *bi = pe_ctx_in(ctx, "Bias");
    pe_tensor *y = pe_ctx_out(ctx, "Y"), *mean = pe_ctx_out(ctx, "Mean"), *var = pe_ctx_out(ctx, "Variance");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int64_t N, D;
    PE_CHECK(pe_layer_norm_dims(ctx, x, &N, &D));
    const double eps = pe_ctx_float(ctx, "epsilon");
    if (N == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_ln_fwd<T><<<row_blocks(N), ln_threads(D), 0, s>>>(
            (const T *)pe_tensor_data(x), sc ? (const T *)pe_tensor_data(sc) : nullptr,
            bi ? (const T *)pe_tensor_data(bi) : nullptr, (T *)pe_tensor_data(y), (T *)pe_tensor_data(mean),
            (T *)pe_tensor_data(var), N, D, eps));
    return pe_cuda_check_launch(ctx);
}

/* x: [N, D], scale?: [D], mean, variance: [N], Y@GRAD: like x
 * -> X@GRAD: like x, Scale@GRAD, Bias@GRAD: [D] */
pe_status pe_cuda_layer_norm_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *sc = pe_ctx_in(ctx, "Scale"), *dy = pe_ctx_in(ctx, "Y@GRAD");
    const pe_tensor *mean = pe_ctx_in(ctx, "Mean"), *var = pe_ctx_in(ctx, "Variance");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *ds = pe_ctx_out(ctx, "Scale@GRAD"), *db = pe_ctx_out(ctx, "Bias@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int64_t N, D;
    PE_CHECK(pe_layer_norm_dims(ctx, x, &N, &D));
    const double eps = pe_ctx_float(ctx, "epsilon");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (dx && N > 0 && D > 0)
        PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
            k_ln_bwd_dx<T><<<row_blocks(N), ln_threads(D), 0, s>>>(
                (const T *)pe_tensor_data(x), sc ? (const T *)pe_tensor_data(sc) : nullptr,
                (const T *)pe_tensor_data(mean), (const T *)pe_tensor_data(var), (const T *)pe_tensor_data(dy),
                (T *)pe_tensor_data(dx), N, D, eps));
    if ((ds || db) && D > 0) {
        /* row chunks so that about 64K threads sum columns; 1 chunk (the CPU's order) for wide rows */
        int64_t nchunk = (INT64_C(65536) + D - 1) / D;
        if (nchunk > N) nchunk = N;
        if (nchunk < 1) nchunk = 1;
        const int64_t rows = N > 0 ? (N + nchunk - 1) / nchunk : 0;
        const size_t bytes = (size_t)(2 * nchunk * D) * sizeof(double);
        pe_cuda_temp tmp(ctx, bytes);
        if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
        double *ps = tmp.get<double>(), *pb = ps + nchunk * D;
        PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
            k_ln_bwd_cols<T><<<pe_cuda_blocks(nchunk * D), PE_CUDA_THREADS, 0, s>>>(
                (const T *)pe_tensor_data(x), (const T *)pe_tensor_data(mean), (const T *)pe_tensor_data(var),
                (const T *)pe_tensor_data(dy), ps, pb, N, D, nchunk, rows, eps);
            k_ln_bwd_cols_final<T><<<pe_cuda_blocks(D), PE_CUDA_THREADS, 0, s>>>(
                ps, pb, ds ? (T *)pe_tensor_data(ds) : nullptr, db ? (T *)pe_tensor_data(db) : nullptr, D, nchunk);
        });
    }
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
