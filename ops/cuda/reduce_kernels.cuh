/* ops/cuda/reduce_kernels.cuh — the fixed-order reduction engine of
 * ops/cuda/reduce.cu and ops/cuda/loss.cu (C++ only, header-only).
 *
 * A reduction is [outer, mid, inner] -> [outer, inner] with an "Op" that
 * says how to read, combine and store (so one engine serves sums in double,
 * max / min with NaN, integer products, dot products of two tensors, label
 * counts):
 *
 *     struct Op {
 *         using acc_t = ...;                                       // POD
 *         __device__ acc_t init() const;                           // empty value
 *         __device__ acc_t load(int64_t o, int64_t m, int64_t i) const;
 *         __device__ acc_t comb(acc_t a, acc_t b) const;           // a first
 *         __device__ void store(int64_t o, int64_t i, acc_t a) const;
 *     };
 *     PE_CHECK(pe_cuda_red_run(ctx, op, outer, mid, inner, s));
 *
 * Order: fixed by the shape alone (never by the device or timing), so a run
 * repeats bit for bit. inner == 1: a block per row (thread t folds m = t,
 * t + 256, ... in order, then a shared-memory tree) or a thread per row for
 * short rows; inner > 1: a thread per output walking mid (adjacent threads
 * read adjacent elements). Long rows with few outputs are cut into chunks
 * of fixed length whose partials (acc_t scratch) a second pass folds in
 * chunk order, so a single [1e8] sum still fills the GPU.
 */
#ifndef PE_OPS_CUDA_REDUCE_KERNELS_CUH
#define PE_OPS_CUDA_REDUCE_KERNELS_CUH

#include "ops/cuda/cuda_ops.h"

#define PE_RED_BLOCK_CHUNK 16384 /* inner == 1: elements of a row per block in the split pass */
#define PE_RED_THREAD_CHUNK 512  /* inner > 1: elements of mid per thread in the split pass */

/* One block per (row o, chunk c): folds m in [c*chunk, min(mid, (c+1)*chunk)).
 * part == nullptr: op.store(o, 0, value) (nch == 1); else part[o*nch + c]. */
template <typename Op>
__global__ void pe_cuda_k_red_block(Op op, int64_t outer, int64_t mid, int64_t nch, int64_t chunk,
                                    typename Op::acc_t *part) {
    using A = typename Op::acc_t;
    __shared__ A sh[PE_CUDA_THREADS];
    for (int64_t it = blockIdx.x; it < outer * nch; it += gridDim.x) {
        const int64_t o = it / nch, c = it % nch;
        const int64_t m0 = c * chunk, m1 = m0 + chunk < mid ? m0 + chunk : mid;
        A a = op.init();
        for (int64_t m = m0 + threadIdx.x; m < m1; m += blockDim.x) a = op.comb(a, op.load(o, m, 0));
        sh[threadIdx.x] = a;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) sh[threadIdx.x] = op.comb(sh[threadIdx.x], sh[threadIdx.x + w]);
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            if (part) part[it] = sh[0];
            else op.store(o, 0, sh[0]);
        }
        __syncthreads();
    }
}

/* One thread per (o, chunk c, i), folding its chunk of mid in order.
 * part == nullptr: op.store(o, i, value) (nch == 1); else part[(o*nch + c)*inner + i]. */
template <typename Op>
__global__ void pe_cuda_k_red_thread(Op op, int64_t outer, int64_t mid, int64_t inner, int64_t nch, int64_t chunk,
                                     typename Op::acc_t *part) {
    using A = typename Op::acc_t;
    PE_CUDA_LOOP(idx, outer * nch * inner) {
        const int64_t i = idx % inner, oc = idx / inner, c = oc % nch, o = oc / nch;
        const int64_t m0 = c * chunk, m1 = m0 + chunk < mid ? m0 + chunk : mid;
        A a = op.init();
        for (int64_t m = m0; m < m1; m++) a = op.comb(a, op.load(o, m, i));
        if (part) part[idx] = a;
        else op.store(o, i, a);
    }
}

/* The second pass: reads the partials [outer, nch, inner] of the first. */
template <typename Op> struct pe_cuda_red_part {
    using acc_t = typename Op::acc_t;
    Op op;
    const acc_t *part;
    int64_t nch, inner;
    __device__ acc_t init() const { return op.init(); }
    __device__ acc_t load(int64_t o, int64_t c, int64_t i) const { return part[(o * nch + c) * inner + i]; }
    __device__ acc_t comb(acc_t a, acc_t b) const { return op.comb(a, b); }
    __device__ void store(int64_t o, int64_t i, acc_t a) const { op.store(o, i, a); }
};

static inline unsigned pe_cuda_red_grid(int64_t items) {
    return (unsigned)(items < 1 ? 1 : (items > 65535 ? 65535 : items));
}

/* One pass, no split. */
template <typename Op>
static inline void pe_cuda_red_once(const Op &op, int64_t outer, int64_t mid, int64_t inner, cudaStream_t s) {
    if (inner == 1 && mid >= 128)
        pe_cuda_k_red_block<Op><<<pe_cuda_red_grid(outer), PE_CUDA_THREADS, 0, s>>>(op, outer, mid, 1, mid > 0 ? mid : 1,
                                                                                    nullptr);
    else
        pe_cuda_k_red_thread<Op><<<pe_cuda_blocks(outer * inner), PE_CUDA_THREADS, 0, s>>>(
            op, outer, mid, inner, 1, mid > 0 ? mid : 1, nullptr);
}

/* [outer, mid, inner] -> op.store for each of the outer * inner outputs
 * (mid == 0: every output gets op.init()). Launches on s; the caller checks
 * the launch (pe_cuda_check_launch). Fails only when the scratch of the
 * split pass cannot be had. */
template <typename Op>
static inline pe_status pe_cuda_red_run(const pe_op_ctx *ctx, const Op &op, int64_t outer, int64_t mid, int64_t inner,
                                        cudaStream_t s) {
    using A = typename Op::acc_t;
    const int64_t nout = outer * inner;
    if (nout == 0) return PE_OK;
    const bool split_rows = inner == 1 && nout < 256 && mid >= 2 * PE_RED_BLOCK_CHUNK;
    const bool split_cols = inner > 1 && nout < 8192 && mid >= 4 * PE_RED_THREAD_CHUNK;
    if (!split_rows && !split_cols) {
        pe_cuda_red_once(op, outer, mid, inner, s);
        return PE_OK;
    }
    const int64_t chunk = split_rows ? PE_RED_BLOCK_CHUNK : PE_RED_THREAD_CHUNK;
    const int64_t nch = (mid + chunk - 1) / chunk;
    const size_t bytes = (size_t)(nout * nch) * sizeof(A);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    A *part = tmp.get<A>();
    if (split_rows)
        pe_cuda_k_red_block<Op><<<pe_cuda_red_grid(outer * nch), PE_CUDA_THREADS, 0, s>>>(op, outer, mid, nch, chunk,
                                                                                         part);
    else
        pe_cuda_k_red_thread<Op><<<pe_cuda_blocks(nout * nch), PE_CUDA_THREADS, 0, s>>>(op, outer, mid, inner, nch,
                                                                                        chunk, part);
    pe_cuda_red_part<Op> p2{op, part, nch, inner};
    pe_cuda_red_once(p2, outer, nch, inner, s);
    return PE_OK;
}

/* The block's fold of every thread's v (tree in shared memory sh[blockDim.x],
 * a fixed order), returned to every thread. Every thread of the block must call it. */
template <typename A, typename C>
static __device__ __forceinline__ A pe_cuda_block_all(A v, A *sh, C comb) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] = comb(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    A r = sh[0];
    __syncthreads();
    return r;
}

/* Products and sums rounded separately where the CPU kernel writes a*b + c
 * (nvcc would contract them into one FMA). */
static __device__ __forceinline__ float pe_cuda_mul_rn(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ double pe_cuda_mul_rn(double a, double b) { return __dmul_rn(a, b); }

#endif
