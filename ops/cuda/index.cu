/* ops/cuda/index.cu — CUDA kernels of the index family: gather, gather_nd,
 * scatter, one_hot, one_hot_v2 and the grads of the first three
 * (gather_grad, gather_nd_grad, scatter_grad), with the dtypes, attrs and
 * errors of the CPU kernels (ops/cpu/index.c; semantics in ops/index.c).
 *
 * How:
 * - Index validation: before anything is written (as on CPU) a check kernel
 *   looks at every index and keeps, with an integer atomicMin, the first bad
 *   one in the CPU's check order; one read back on the op's stream (a
 *   synchronization) and, only when one is bad, a second read of its value
 *   give the CPU's error (op, var, element, value, allowed range).
 * - The forward movers (gather, gather_nd, scatter_grad's Updates@GRAD) are
 *   one thread per output element, any dtype (moved by size).
 * - Every accumulation (gather_grad, gather_nd_grad, scatter with overwrite
 *   = false) is inverted: the index positions are stably radix-sorted by
 *   value (cub::DeviceRadixSort, keys = the indices, values = positions), so
 *   the positions naming destination row j are perm[off[j] .. off[j+1]) in
 *   increasing order; each destination element then sums its contributors
 *   itself, starting from 0, in the CPU's order (the index order). No
 *   atomics on data: a run repeats bit for bit and equals the CPU's serial
 *   loop. scatter with overwrite takes the last position of the group (the
 *   later of duplicate ids wins, as on CPU).
 * - scatter_grad's X@GRAD: the rows named in Ids are marked (a byte each,
 *   every writer writes 1), then Out@GRAD is copied with those rows zeroed.
 *
 * Why: embedding-style lookups and their sparse gradients must run on the
 * GPU place without round trips, and must stay deterministic.
 */
#include "ops/cuda/cuda_ops.h"

#include <cub/device/device_radix_sort.cuh>

#include <cstdio>
#include <memory>

namespace {

pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

/* Runs `...` with I bound to the index type of t (int32 or int64). */
#define PE_IDX_TYPES(ctx, t, slot, I, ...)                                                                     \
    do {                                                                                                       \
        switch ((t)->dtype) {                                                                                  \
        case PE_DTYPE_INT32: { using I = int32_t; __VA_ARGS__; } break;                                        \
        case PE_DTYPE_INT64: { using I = int64_t; __VA_ARGS__; } break;                                        \
        default:                                                                                               \
            return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has dtype %s (expected int32 or int64 indices)",  \
                                slot, pe_ctx_in_name(ctx, slot, 0), pe_dtype_name((t)->dtype));                \
        }                                                                                                      \
    } while (0)

/* Integer sums wrap (computed unsigned, where overflow is defined), as the CPU's do in practice. */
template <typename T> __device__ inline T add_wrap(T a, T b) {
    if constexpr (std::is_integral<T>::value)
        return (T)((typename std::make_unsigned<T>::type)a + (typename std::make_unsigned<T>::type)b);
    else return a + b;
}

/* Copies `bytes` from the device to the host on the op's stream (after the
 * kernels queued before it) and waits. */
pe_status read_back(const pe_op_ctx *ctx, cudaStream_t s, void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    return pe_cuda_check(ctx, e, "reading the index check back");
}

/* ---- index validation ---------------------------------------------------- */

struct bounds_arg {
    int64_t v[PE_MAX_DIMS];
};

/* idx: [m, k] with column j in [0, b.v[j]) -> *flag = the smallest j * m + r
 * over bad elements (r, j): the CPU checks column by column, rows in order. */
template <typename I>
__global__ void k_check(const I *idx, int64_t m, int64_t k, bounds_arg b, unsigned long long *flag) {
    PE_CUDA_LOOP(e, m * k) {
        const int64_t r = e / k, j = e % k, v = (int64_t)idx[e];
        if (v < 0 || v >= b.v[j]) atomicMin(flag, (unsigned long long)(j * m + r));
    }
}

struct bad_index {
    bool any;
    int64_t elem, value, col; /* flat element of the index tensor, its value, its column */
};

/* Checks index tensor t viewed as [m, k] against bounds b (one per column);
 * *bad says whether (and where) the first bad one in the CPU's order is. */
pe_status find_bad_index(const pe_op_ctx *ctx, cudaStream_t s, const pe_tensor *t, const char *slot, int64_t m,
                         int64_t k, const bounds_arg &b, bad_index *bad) {
    bad->any = false;
    if (m * k == 0) return PE_OK;
    pe_cuda_temp flag(ctx, sizeof(unsigned long long));
    if (!flag.ok(sizeof(unsigned long long))) return PE_ERR_NOMEM;
    unsigned long long *f = flag.get<unsigned long long>();
    PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(f, 0xff, sizeof *f, s), "clearing the index check"));
    PE_IDX_TYPES(ctx, t, slot, I,
                 k_check<I><<<pe_cuda_blocks(m * k), PE_CUDA_THREADS, 0, s>>>((const I *)pe_tensor_data(t), m, k,
                                                                               b, f));
    PE_CHECK(pe_cuda_check_launch(ctx));
    unsigned long long key = 0;
    PE_CHECK(read_back(ctx, s, &key, f, sizeof key));
    if (key == ~0ull) return PE_OK;
    const int64_t col = (int64_t)key / m, r = (int64_t)key % m;
    bad->any = true;
    bad->col = col;
    bad->elem = r * k + col;
    const size_t es = pe_dtype_size(t->dtype);
    int64_t v64 = 0;
    int32_t v32 = 0;
    void *v = t->dtype == PE_DTYPE_INT64 ? (void *)&v64 : (void *)&v32;
    PE_CHECK(read_back(ctx, s, v, (const char *)pe_tensor_data(t) + (size_t)bad->elem * es, es));
    bad->value = t->dtype == PE_DTYPE_INT64 ? v64 : (int64_t)v32;
    return PE_OK;
}

/* The CPU's check_range: every element of index slot `slot` ([m] or, with
 * per_dim, [m, k] against X's first k dims) is in range, else its error. */
pe_status check_range(const pe_op_ctx *ctx, cudaStream_t s, const char *slot, const pe_tensor *t, int64_t m,
                      int64_t k, const bounds_arg &b, const char *what, bool per_dim, const char *xslot) {
    bad_index bad;
    PE_CHECK(find_bad_index(ctx, s, t, slot, m, k, b, &bad));
    if (!bad.any) return PE_OK;
    char w[64];
    if (per_dim) snprintf(w, sizeof w, "dim %lld of", (long long)bad.col);
    else snprintf(w, sizeof w, "%s", what);
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' element %lld is %lld, outside [0, %lld) (%s %s '%s')", slot,
                        pe_ctx_in_name(ctx, slot, 0), (long long)bad.elem, (long long)bad.value,
                        (long long)b.v[bad.col], w, xslot, pe_ctx_in_name(ctx, xslot, 0));
}

bounds_arg one_bound(int64_t bound) {
    bounds_arg b = {};
    b.v[0] = bound;
    return b;
}

/* ---- grouping index positions by value (stable) --------------------------- */

/* out: [n] = 0, 1, .., n-1 */
__global__ void k_iota(int64_t *out, int64_t n) {
    PE_CUDA_LOOP(i, n) out[i] = i;
}

/* keys: [n] sorted -> off: [nkeys + 1], off[j] = the first position with key >= j */
template <typename K>
__global__ void k_offsets(const K *keys, int64_t n, int64_t *off, int64_t nkeys) {
    PE_CUDA_LOOP(j, nkeys + 1) {
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if ((int64_t)keys[mid] < j) lo = mid + 1;
            else hi = mid;
        }
        off[j] = lo;
    }
}

size_t align_up(size_t v) { return (v + 255) & ~(size_t)255; }

/* The positions 0..n-1 of n keys in [0, nkeys) grouped by key: group j is
 * perm[off[j] .. off[j+1]), positions increasing within it (a stable radix
 * sort). Scratch lives as long as the object. */
class key_groups {
public:
    const int64_t *perm = nullptr, *off = nullptr;

    /* keys: device [n] (unsigned view of validated indices), nkeys >= 1. */
    template <typename K>
    pe_status build(const pe_op_ctx *ctx, cudaStream_t s, const K *keys, int64_t n, int64_t nkeys) {
        int bits = 1;
        while (bits < (int)(sizeof(K) * 8) && ((uint64_t)(nkeys - 1) >> bits) != 0) bits++;
        size_t cub_bytes = 0;
        if (n > 0) {
            cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, (const K *)nullptr, (K *)nullptr,
                                                            (const int64_t *)nullptr, (int64_t *)nullptr, n, 0,
                                                            bits, s);
            PE_CHECK(pe_cuda_check(ctx, e, "sizing the index sort"));
        }
        const size_t b_keys = align_up((size_t)n * sizeof(K)), b_pos = align_up((size_t)n * sizeof(int64_t));
        const size_t b_off = align_up((size_t)(nkeys + 1) * sizeof(int64_t));
        const size_t total = b_keys + 2 * b_pos + b_off + align_up(cub_bytes);
        tmp_.reset(new pe_cuda_temp(ctx, total));
        if (!tmp_->ok(total)) return PE_ERR_NOMEM;
        char *p = tmp_->get<char>();
        K *keys_out = (K *)p;
        int64_t *pos_in = (int64_t *)(p + b_keys), *pos_out = (int64_t *)(p + b_keys + b_pos);
        int64_t *offs = (int64_t *)(p + b_keys + 2 * b_pos);
        void *cub_tmp = p + b_keys + 2 * b_pos + b_off;
        perm = pos_out;
        off = offs;
        if (n == 0)
            return pe_cuda_check(ctx, cudaMemsetAsync(offs, 0, (size_t)(nkeys + 1) * sizeof(int64_t), s),
                                 "clearing the index groups");
        k_iota<<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(pos_in, n);
        PE_CHECK(pe_cuda_check_launch(ctx));
        cudaError_t e = cub::DeviceRadixSort::SortPairs(cub_tmp, cub_bytes, keys, keys_out, (const int64_t *)pos_in,
                                                        pos_out, n, 0, bits, s);
        PE_CHECK(pe_cuda_check(ctx, e, "sorting the indices"));
        k_offsets<K><<<pe_cuda_blocks(nkeys + 1), PE_CUDA_THREADS, 0, s>>>(keys_out, n, offs, nkeys);
        return pe_cuda_check_launch(ctx);
    }

    /* keys = the values of index tensor t (int32 / int64, validated >= 0). */
    pe_status build_from(const pe_op_ctx *ctx, cudaStream_t s, const pe_tensor *t, int64_t n, int64_t nkeys) {
        if (t->dtype == PE_DTYPE_INT64) return build(ctx, s, (const uint64_t *)pe_tensor_data(t), n, nkeys);
        return build(ctx, s, (const uint32_t *)pe_tensor_data(t), n, nkeys);
    }

private:
    std::unique_ptr<pe_cuda_temp> tmp_;
};

enum group_mode { G_SUM, G_SUM_OR_KEEP, G_LAST_OR_KEEP };

/* src: [pre, n, row]; groups (perm/off) of the n positions by destination ->
 * dst: [pre, nkeys, row]: G_SUM the group's src rows summed from 0 in
 * position order; G_SUM_OR_KEEP likewise, keep[] where the group is empty;
 * G_LAST_OR_KEEP the group's last src row, keep[] where empty (keep may be dst). */
template <typename T, group_mode M>
__global__ void k_group_rows(const T *src, const int64_t *perm, const int64_t *off, const T *keep, T *dst,
                             int64_t nkeys, int64_t n, int64_t row, int64_t total) {
    PE_CUDA_LOOP(e, total) {
        const int64_t q = e % row, r = e / row, j = r % nkeys, p = r / nkeys;
        const int64_t lo = off[j], hi = off[j + 1];
        if constexpr (M == G_LAST_OR_KEEP) {
            dst[e] = lo == hi ? keep[e] : src[(p * n + perm[hi - 1]) * row + q];
        } else {
            T acc = 0;
            for (int64_t t = lo; t < hi; t++) acc = add_wrap(acc, src[(p * n + perm[t]) * row + q]);
            dst[e] = M == G_SUM_OR_KEEP && lo == hi ? keep[e] : acc;
        }
    }
}

/* ---- movers --------------------------------------------------------------- */

/* x: [pre, d, post], idx: [n] -> out: [pre, n, post] */
template <typename T, typename I>
__global__ void k_gather(const T *x, const I *idx, T *out, int64_t d, int64_t n, int64_t post, int64_t total) {
    PE_CUDA_LOOP(e, total) {
        const int64_t q = e % post, r = e / post, i = r % n, p = r / n;
        out[e] = x[(p * d + (int64_t)idx[i]) * post + q];
    }
}

/* x: [d0..d(r-1)] (dims in xd), idx: [m, k] -> out: [m, slice] */
template <typename T, typename I>
__global__ void k_gather_nd(const T *x, const I *idx, T *out, bounds_arg xd, int64_t k, int64_t slice,
                            int64_t total) {
    PE_CUDA_LOOP(e, total) {
        const int64_t q = e % slice, r = e / slice;
        int64_t lin = 0;
        for (int64_t j = 0; j < k; j++) lin = lin * xd.v[j] + (int64_t)idx[r * k + j];
        out[e] = x[lin * slice + q];
    }
}

/* idx: [m, k] -> lin: [m], the row-major index of each tuple in X's first k dims */
template <typename I>
__global__ void k_nd_rows(const I *idx, uint64_t *lin, bounds_arg xd, int64_t k, int64_t m) {
    PE_CUDA_LOOP(r, m) {
        int64_t l = 0;
        for (int64_t j = 0; j < k; j++) l = l * xd.v[j] + (int64_t)idx[r * k + j];
        lin[r] = (uint64_t)l;
    }
}

/* ids: [n] -> mark[ids[i]] = 1 (every writer writes the same byte value) */
template <typename I>
__global__ void k_mark(const I *ids, unsigned char *mark, int64_t n) {
    PE_CUDA_LOOP(i, n) mark[ids[i]] = 1;
}

/* g: [d0, row], mark: [d0] -> dx: g with the marked rows zeroed (dx may be g) */
template <typename T>
__global__ void k_zero_marked(const T *g, const unsigned char *mark, T *dx, int64_t row, int64_t total) {
    PE_CUDA_LOOP(e, total) dx[e] = mark[e / row] ? (T)0 : g[e];
}

/* x: [m] -> out: [m, depth], 1 at column x[i] (a row of zeros when outside [0, depth)) */
template <typename T, typename I>
__global__ void k_one_hot(const I *x, T *out, int64_t depth, int64_t total) {
    PE_CUDA_LOOP(e, total) out[e] = (int64_t)x[e / depth] == e % depth ? (T)1 : (T)0;
}

/* [pre, d, post] around the normalized axis attr of x. */
void axis_view(const pe_op_ctx *ctx, const pe_tensor *x, int64_t *pre, int64_t *d, int64_t *post) {
    int64_t a = pe_ctx_int(ctx, "axis");
    if (a < 0) a += x->ndim;
    *pre = pe_dims_prod(x->dims, 0, (int)a);
    *d = x->dims[a];
    *post = pe_dims_prod(x->dims, (int)a + 1, x->ndim);
}

/* gather_nd's view: Index [m, k], X's first k dims as bounds, slice = prod(X dims k..). */
void nd_view(const pe_tensor *x, const pe_tensor *idx, int64_t *m, int64_t *k, int64_t *slice, bounds_arg *b) {
    *k = idx->dims[idx->ndim - 1];
    *m = *k ? pe_tensor_numel(idx) / *k : pe_dims_prod(idx->dims, 0, idx->ndim - 1);
    *slice = pe_dims_prod(x->dims, (int)*k, x->ndim);
    *b = bounds_arg{};
    for (int64_t j = 0; j < *k; j++) b->v[j] = x->dims[j];
}

} // namespace

extern "C" {

/* X: [pre, d, post], Index: [n] -> Out: [pre, n, post] (any dtype) */
pe_status pe_cuda_gather(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *idx = pe_ctx_in(ctx, "Index");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int64_t pre, d, post;
    axis_view(ctx, x, &pre, &d, &post);
    const int64_t n = pe_tensor_numel(idx), total = pe_tensor_numel(out);
    if (out->dtype != x->dtype || total != pre * n * post) return internal_mismatch(ctx);
    if (n == 0 && total == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(check_range(ctx, s, "Index", idx, n, 1, one_bound(d), "the gathered axis of", false, "X"));
    if (total == 0) return PE_OK;
    PE_IDX_TYPES(ctx, idx, "Index", I,
        PE_CUDA_ALL_TYPES(ctx, x->dtype, "X", T,
            k_gather<T, I><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(
                (const T *)pe_tensor_data(x), (const I *)pe_tensor_data(idx), (T *)pe_tensor_data(out), d, n, post,
                total)));
    return pe_cuda_check_launch(ctx);
}

/* X (dims only): [pre, d, post], Index: [n], Out@GRAD: [pre, n, post] -> X@GRAD: [pre, d, post]
 * (float32, float64; duplicate indices sum in index order) */
pe_status pe_cuda_gather_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *idx = pe_ctx_in(ctx, "Index"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int64_t pre, d, post;
    axis_view(ctx, x, &pre, &d, &post);
    const int64_t n = pe_tensor_numel(idx), total = pe_tensor_numel(dx);
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(g) != pre * n * post ||
        total != pre * d * post)
        return internal_mismatch(ctx);
    if (n == 0 && total == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(check_range(ctx, s, "Index", idx, n, 1, one_bound(d), "the gathered axis of", false, "X"));
    if (total == 0) return PE_OK;
    key_groups kg;
    PE_CHECK(kg.build_from(ctx, s, idx, n, d));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_group_rows<T, G_SUM><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(
            (const T *)pe_tensor_data(g), kg.perm, kg.off, nullptr, (T *)pe_tensor_data(dx), d, n, post, total));
    return pe_cuda_check_launch(ctx);
}

/* X: [d0..d(r-1)], Index: [m, k] -> Out: [m, prod(d(k)..)] (any dtype) */
pe_status pe_cuda_gather_nd(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *idx = pe_ctx_in(ctx, "Index");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (out->dtype != x->dtype) return internal_mismatch(ctx);
    int64_t m, k, slice;
    bounds_arg b;
    nd_view(x, idx, &m, &k, &slice, &b);
    const int64_t total = pe_tensor_numel(out);
    if (m * k == 0 && total == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(check_range(ctx, s, "Index", idx, m, k, b, "", true, "X"));
    if (total != m * slice) return internal_mismatch(ctx);
    if (total == 0) return PE_OK;
    PE_IDX_TYPES(ctx, idx, "Index", I,
        PE_CUDA_ALL_TYPES(ctx, x->dtype, "X", T,
            k_gather_nd<T, I><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(
                (const T *)pe_tensor_data(x), (const I *)pe_tensor_data(idx), (T *)pe_tensor_data(out), b, k, slice,
                total)));
    return pe_cuda_check_launch(ctx);
}

/* X (dims only), Index: [m, k], Out@GRAD: [m, slice] -> X@GRAD like X
 * (float32, float64; tuples naming the same slice sum in row order) */
pe_status pe_cuda_gather_nd_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *idx = pe_ctx_in(ctx, "Index"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t total = pe_tensor_numel(dx);
    if (g->dtype != x->dtype || dx->dtype != x->dtype || total != pe_tensor_numel(x)) return internal_mismatch(ctx);
    int64_t m, k, slice;
    bounds_arg b;
    nd_view(x, idx, &m, &k, &slice, &b);
    if (m * k == 0 && total == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(check_range(ctx, s, "Index", idx, m, k, b, "", true, "X"));
    if (pe_tensor_numel(g) != m * slice) return internal_mismatch(ctx);
    if (total == 0) return PE_OK;
    const int64_t nkeys = total / slice; /* prod(X dims ..k) >= 1 */
    pe_cuda_temp lin(ctx, (size_t)m * sizeof(uint64_t));
    if (!lin.ok((size_t)m * sizeof(uint64_t))) return PE_ERR_NOMEM;
    if (m > 0) {
        PE_IDX_TYPES(ctx, idx, "Index", I,
            k_nd_rows<I><<<pe_cuda_blocks(m), PE_CUDA_THREADS, 0, s>>>((const I *)pe_tensor_data(idx),
                                                                         lin.get<uint64_t>(), b, k, m));
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    key_groups kg;
    PE_CHECK(kg.build(ctx, s, (const uint64_t *)lin.get<uint64_t>(), m, nkeys));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_group_rows<T, G_SUM><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(
            (const T *)pe_tensor_data(g), kg.perm, kg.off, nullptr, (T *)pe_tensor_data(dx), nkeys, m, slice, total));
    return pe_cuda_check_launch(ctx);
}

/* X: [d0, row], Ids: [n], Updates: [n, row] -> Out: [d0, row] (Out may be X).
 * overwrite: the later of duplicate ids wins (any dtype); else the named rows
 * are the sums of their updates in id order (float32, float64, int32, int64). */
pe_status pe_cuda_scatter(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *ids = pe_ctx_in(ctx, "Ids"), *upd = pe_ctx_in(ctx, "Updates");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(ids), d0 = x->ndim ? x->dims[0] : 0;
    const int64_t row = x->ndim ? pe_dims_prod(x->dims, 1, x->ndim) : 0, total = pe_tensor_numel(out);
    if (out->dtype != x->dtype || upd->dtype != x->dtype || total != pe_tensor_numel(x) ||
        pe_tensor_numel(upd) != n * row)
        return internal_mismatch(ctx);
    const bool overwrite = pe_ctx_bool(ctx, "overwrite");
    if (!overwrite && x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64 && x->dtype != PE_DTYPE_INT32 &&
        x->dtype != PE_DTYPE_INT64 && n * row != 0)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported with overwrite = false (float32, "
                            "float64, int32, int64)", pe_dtype_name(x->dtype));
    if (n == 0 && total == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(check_range(ctx, s, "Ids", ids, n, 1, one_bound(d0), "the rows of", false, "X"));
    if (total == 0) return PE_OK;
    void *od = pe_tensor_data(out);
    const void *xd = pe_tensor_data(x);
    if (n * row == 0) {
        if (od == xd) return PE_OK;
        return pe_cuda_check(ctx, cudaMemcpyAsync(od, xd, pe_tensor_nbytes(x), cudaMemcpyDeviceToDevice, s),
                             "copying X to Out");
    }
    key_groups kg;
    PE_CHECK(kg.build_from(ctx, s, ids, n, d0));
    if (overwrite)
        PE_CUDA_ALL_TYPES(ctx, x->dtype, "X", T,
            k_group_rows<T, G_LAST_OR_KEEP><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(
                (const T *)pe_tensor_data(upd), kg.perm, kg.off, (const T *)xd, (T *)od, d0, n, row, total));
    else
        PE_CUDA_NUM_TYPES(ctx, x->dtype, "X", T,
            k_group_rows<T, G_SUM_OR_KEEP><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(
                (const T *)pe_tensor_data(upd), kg.perm, kg.off, (const T *)xd, (T *)od, d0, n, row, total));
    return pe_cuda_check_launch(ctx);
}

/* Ids: [n], Updates (dims only), Out@GRAD: [d0, row] -> X@GRAD? = Out@GRAD with the rows in Ids
 * zeroed, Updates@GRAD? [n, row] = Out@GRAD[Ids] */
pe_status pe_cuda_scatter_grad(const pe_op_ctx *ctx) {
    const pe_tensor *ids = pe_ctx_in(ctx, "Ids"), *upd = pe_ctx_in(ctx, "Updates"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *du = pe_ctx_out(ctx, "Updates@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(ids), d0 = g->ndim ? g->dims[0] : 0;
    const int64_t row = g->ndim ? pe_dims_prod(g->dims, 1, g->ndim) : 0;
    if (pe_tensor_numel(upd) != n * row ||
        (dx && (dx->dtype != g->dtype || pe_tensor_numel(dx) != pe_tensor_numel(g))) ||
        (du && (du->dtype != g->dtype || pe_tensor_numel(du) != n * row)))
        return internal_mismatch(ctx);
    const int64_t ndx = dx ? pe_tensor_numel(dx) : 0, ndu = du ? pe_tensor_numel(du) : 0;
    if (n == 0 && ndx == 0 && ndu == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(check_range(ctx, s, "Ids", ids, n, 1, one_bound(d0), "the rows of", false, "Out@GRAD"));
    if (ndx > 0) {
        pe_cuda_temp mark(ctx, (size_t)d0);
        if (!mark.ok((size_t)d0)) return PE_ERR_NOMEM;
        PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(mark.get(), 0, (size_t)d0, s), "clearing the row marks"));
        if (n > 0) {
            PE_IDX_TYPES(ctx, ids, "Ids", I,
                k_mark<I><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((const I *)pe_tensor_data(ids),
                                                                          mark.get<unsigned char>(), n));
            PE_CHECK(pe_cuda_check_launch(ctx));
        }
        PE_CUDA_ALL_TYPES(ctx, g->dtype, "Out@GRAD", T,
            k_zero_marked<T><<<pe_cuda_blocks(ndx), PE_CUDA_THREADS, 0, s>>>(
                (const T *)pe_tensor_data(g), mark.get<unsigned char>(), (T *)pe_tensor_data(dx), row, ndx));
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    if (ndu > 0) {
        PE_IDX_TYPES(ctx, ids, "Ids", I,
            PE_CUDA_ALL_TYPES(ctx, g->dtype, "Out@GRAD", T,
                k_gather<T, I><<<pe_cuda_blocks(ndu), PE_CUDA_THREADS, 0, s>>>(
                    (const T *)pe_tensor_data(g), (const I *)pe_tensor_data(ids), (T *)pe_tensor_data(du), d0, n,
                    row, ndu)));
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    return PE_OK;
}

/* X: int [m] -> Out: [m, depth] of attr dtype (one_hot and one_hot_v2) */
pe_status pe_cuda_one_hot(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t depth = pe_ctx_int(ctx, "depth"), m = pe_tensor_numel(x);
    if (pe_tensor_numel(out) != m * depth) return internal_mismatch(ctx);
    if (m * depth == 0) return PE_OK; /* depth >= 1 (infer): no index to check */
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (!pe_ctx_bool(ctx, "allow_out_of_range")) {
        bad_index bad;
        PE_CHECK(find_bad_index(ctx, s, x, "X", m, 1, one_bound(depth), &bad));
        if (bad.any)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' element %lld is %lld, outside [0, depth = %lld) (set "
                                "allow_out_of_range to give such rows all zeros)", pe_ctx_in_name(ctx, "X", 0),
                                (long long)bad.elem, (long long)bad.value, (long long)depth);
    }
    const int64_t total = m * depth;
    PE_IDX_TYPES(ctx, x, "X", I,
        PE_CUDA_NUM_TYPES(ctx, out->dtype, "Out", T,
            k_one_hot<T, I><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>((const I *)pe_tensor_data(x),
                                                                              (T *)pe_tensor_data(out), depth,
                                                                              total)));
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
