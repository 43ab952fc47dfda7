/* ops/cuda/sequence.cu — CUDA kernels of the sequence (LoD) ops:
 * sequence_pool, sequence_softmax, sequence_expand, sequence_mask and their
 * gradients, as the CPU kernels (ops/cpu/sequence.c) compute them.
 *
 * How: the LoD is host metadata of the tensor; each launch gets a device
 * copy of the offsets it needs (pe_cuda_temp, cudaMemcpyAsync on the
 * place's stream: from pageable host memory the call returns once the
 * bytes are staged, so host-built arrays may go right after).
 * sequence_pool runs one thread per (sequence, column) and walks the
 * sequence's rows in order, summing in the dtype like the CPU; its gradient
 * one thread per X@GRAD element, finding the element's sequence by binary
 * search in the offsets. sequence_softmax runs one thread per sequence (the
 * CPU's order: max, exp and sum, divide), its gradient likewise with the
 * products rounded as the CPU's (__fmul_rn: no FMA contraction).
 * sequence_expand copies through a host-built row map (output row -> X
 * row); its gradient sums each X row's copies in order, one thread per
 * element. sequence_mask: one thread per Y element. sequence_conv: one
 * thread per element of Out, X@GRAD and Filter@GRAD, each the CPU's sum in
 * the CPU's order (Out over (j, d), X@GRAD over j then n, Filter@GRAD over
 * the rows in order), products rounded apart (mul_rn), so it equals the
 * CPU bit for bit; a thread finds its row's sequence by binary search. No
 * atomics: a run repeats bit for bit and equals the CPU.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/sequence.h"

#include <vector>

namespace {

/* A device copy of n int64 host values (offsets, maps), ok() false: the op's error is set. */
struct dev_i64 {
    pe_cuda_temp mem;
    size_t bytes;
    pe_status st = PE_OK;
    dev_i64(const pe_op_ctx *ctx, const int64_t *host, int64_t n, cudaStream_t s)
        : mem(ctx, sizeof(int64_t) * (size_t)(n > 0 ? n : 1)), bytes(sizeof(int64_t) * (size_t)(n > 0 ? n : 1)) {
        if (!mem.ok(bytes)) {
            st = PE_ERR_NOMEM;
            return;
        }
        if (n > 0)
            st = pe_cuda_check(ctx, cudaMemcpyAsync(mem.get(), host, sizeof(int64_t) * (size_t)n,
                                                    cudaMemcpyHostToDevice, s),
                               "copying LoD offsets to the device");
    }
    const int64_t *get() const { return mem.get<int64_t>(); }
};

template <typename T> __device__ inline T mul_rn(T a, T b);
template <> __device__ inline float mul_rn<float>(float a, float b) { return __fmul_rn(a, b); }
template <> __device__ inline double mul_rn<double>(double a, double b) { return __dmul_rn(a, b); }

/* the sequence s with off[s] <= r < off[s + 1] (offsets non-decreasing, n entries) */
__device__ inline int64_t seq_of(const int64_t *off, int64_t n, int64_t r) {
    int64_t lo = 0, hi = n - 1; /* answer in [0, n - 2]: last s with off[s] <= r */
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (off[mid] <= r) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* x: [N, d] -> out: [ns, d], mi: [ns, d] (MAX) */
template <typename T>
__global__ void k_seqpool(int type, const int64_t *off, int64_t ns, int64_t d, const T *x, T *out, int32_t *mi,
                          T pad) {
    PE_CUDA_LOOP(idx, ns * d) {
        const int64_t s = idx / d, k = idx % d;
        const int64_t b = off[s], e = off[s + 1], len = e - b;
        if (!len) {
            out[idx] = pad;
            if (mi) mi[idx] = -1;
            continue;
        }
        if (type == PE_SEQPOOL_LAST) { out[idx] = x[(e - 1) * d + k]; continue; }
        if (type == PE_SEQPOOL_FIRST) { out[idx] = x[b * d + k]; continue; }
        if (type == PE_SEQPOOL_MAX) {
            T m = x[b * d + k];
            int64_t at = b;
            for (int64_t r = b + 1; r < e; r++)
                if (x[r * d + k] > m) m = x[r * d + k], at = r;
            out[idx] = m;
            if (mi) mi[idx] = (int32_t)at;
            continue;
        }
        T acc = 0;
        for (int64_t r = b; r < e; r++) acc += x[r * d + k];
        if (type == PE_SEQPOOL_AVERAGE) acc /= (T)len;
        else if (type == PE_SEQPOOL_SQRT) acc /= (T)sqrt((double)len);
        out[idx] = acc;
    }
}

/* g: [ns, d] -> gx: [rows, d] */
template <typename T>
__global__ void k_seqpool_grad(int type, const int64_t *off, int64_t n, int64_t d, const T *g, const int32_t *mi,
                               T *gx, int64_t rows) {
    PE_CUDA_LOOP(idx, rows * d) {
        const int64_t r = idx / d, k = idx % d;
        const int64_t s = seq_of(off, n, r);
        const int64_t b = off[s], e = off[s + 1], len = e - b;
        const T gs = g[s * d + k];
        T v = 0;
        if (type == PE_SEQPOOL_LAST) v = r == e - 1 ? gs : (T)0;
        else if (type == PE_SEQPOOL_FIRST) v = r == b ? gs : (T)0;
        else if (type == PE_SEQPOOL_MAX) v = mi[s * d + k] == r ? gs : (T)0;
        else if (type == PE_SEQPOOL_SUM) v = gs;
        else if (type == PE_SEQPOOL_AVERAGE) v = gs / (T)len;
        else v = mul_rn(gs, (T)1 / (T)sqrt((double)len));
        gx[idx] = v;
    }
}

template <typename T> __global__ void k_seqsoftmax(const int64_t *off, int64_t ns, const T *x, T *out) {
    PE_CUDA_LOOP(s, ns) {
        const int64_t b = off[s], e = off[s + 1];
        if (e <= b) continue;
        T m = x[b];
        for (int64_t r = b + 1; r < e; r++) m = x[r] > m ? x[r] : m;
        T sum = 0;
        for (int64_t r = b; r < e; r++) sum += (out[r] = (T)exp((double)(x[r] - m)));
        for (int64_t r = b; r < e; r++) out[r] /= sum;
    }
}

template <typename T>
__global__ void k_seqsoftmax_grad(const int64_t *off, int64_t ns, const T *o, const T *g, T *gx) {
    PE_CUDA_LOOP(s, ns) {
        const int64_t b = off[s], e = off[s + 1];
        T dot = 0;
        for (int64_t r = b; r < e; r++) dot += mul_rn(g[r], o[r]);
        for (int64_t r = b; r < e; r++) gx[r] = mul_rn(o[r], (T)(g[r] - dot));
    }
}

/* out row i = x row map[i]; rows of `row` elements */
template <typename T> __global__ void k_gather_rows(const int64_t *map, int64_t n, int64_t row, const T *x, T *out) {
    PE_CUDA_LOOP(idx, n * row) out[idx] = x[map[idx / row] * row + idx % row];
}

/* gx row r (X sequence s = seq_of or r, at position j) = sum over s's reps of
 * g[ostart[s] + rep * len + j] */
template <typename T>
__global__ void k_seqexpand_grad(const int64_t *xo, int64_t nx, const int64_t *yo, const int64_t *ostart, int64_t d,
                                 const T *g, T *gx, int64_t rows) {
    PE_CUDA_LOOP(idx, rows * d) {
        const int64_t r = idx / d, k = idx % d;
        const int64_t s = xo ? seq_of(xo, nx, r) : r;
        const int64_t b = xo ? xo[s] : r, len = xo ? xo[s + 1] - xo[s] : 1, j = r - b;
        T acc = 0;
        for (int64_t rep = 0; rep < yo[s + 1] - yo[s]; rep++) acc += g[(ostart[s] + rep * len + j) * d + k];
        gx[idx] = acc;
    }
}

template <typename I, typename T> __global__ void k_seqmask(const I *x, int64_t n, int64_t m, T *y) {
    PE_CUDA_LOOP(idx, n * m) y[idx] = (T)((int64_t)(idx % m) < (int64_t)x[idx / m]);
}

template <typename I> pe_status launch_mask(const pe_op_ctx *ctx, const I *x, int64_t n, int64_t m, pe_tensor *y,
                                            cudaStream_t s) {
    const unsigned bl = pe_cuda_blocks(n * m);
    void *yp = pe_tensor_data(y);
    switch (y->dtype) {
    case PE_DTYPE_FP32: k_seqmask<I, float><<<bl, PE_CUDA_THREADS, 0, s>>>(x, n, m, (float *)yp); break;
    case PE_DTYPE_FP64: k_seqmask<I, double><<<bl, PE_CUDA_THREADS, 0, s>>>(x, n, m, (double *)yp); break;
    case PE_DTYPE_INT32: k_seqmask<I, int32_t><<<bl, PE_CUDA_THREADS, 0, s>>>(x, n, m, (int32_t *)yp); break;
    case PE_DTYPE_INT64: k_seqmask<I, int64_t><<<bl, PE_CUDA_THREADS, 0, s>>>(x, n, m, (int64_t *)yp); break;
    case PE_DTYPE_UINT8:
    case PE_DTYPE_BOOL: k_seqmask<I, uint8_t><<<bl, PE_CUDA_THREADS, 0, s>>>(x, n, m, (uint8_t *)yp); break;
    default:
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "Y has dtype %s (the kernel writes float32, float64, int32, "
                            "int64, uint8, bool)", pe_dtype_name(y->dtype));
    }
    return pe_cuda_check_launch(ctx);
}

/* sequence_conv: out [rows, n], one thread per element; r = t + start + j in t's sequence */
template <typename T>
__global__ void k_seqconv(const int64_t *off, int64_t n_off, int64_t rows, int64_t d, int64_t n, int64_t len,
                          int64_t start, const T *x, const T *f, T *out) {
    PE_CUDA_LOOP(idx, rows * n) {
        const int64_t t = idx / n, k = idx % n;
        const int64_t s = seq_of(off, n_off, t), b = off[s], e = off[s + 1];
        T acc = 0;
        for (int64_t j = 0; j < len; j++) {
            const int64_t r = t + start + j;
            if (r < b || r >= e) continue;
            for (int64_t c = 0; c < d; c++) acc += mul_rn(x[r * d + c], f[(j * d + c) * n + k]);
        }
        out[idx] = acc;
    }
}

/* gx [rows, d]: sum over j (t = r - start - j in r's sequence), then k, of dout[t, k] * f[j * d + c, k] */
template <typename T>
__global__ void k_seqconv_grad_x(const int64_t *off, int64_t n_off, int64_t rows, int64_t d, int64_t n, int64_t len,
                                 int64_t start, const T *f, const T *dout, T *gx) {
    PE_CUDA_LOOP(idx, rows * d) {
        const int64_t r = idx / d, c = idx % d;
        const int64_t s = seq_of(off, n_off, r), b = off[s], e = off[s + 1];
        T acc = 0;
        for (int64_t j = 0; j < len; j++) {
            const int64_t t = r - start - j;
            if (t < b || t >= e) continue;
            for (int64_t k = 0; k < n; k++) acc += mul_rn(dout[t * n + k], f[(j * d + c) * n + k]);
        }
        gx[idx] = acc;
    }
}

/* gf [len * d, n]: sum over the rows t in order (r = t + start + j in t's sequence) of x[r, c] * dout[t, k] */
template <typename T>
__global__ void k_seqconv_grad_f(const int64_t *off, int64_t n_off, int64_t d, int64_t n, int64_t len,
                                 int64_t start, const T *x, const T *dout, T *gf) {
    PE_CUDA_LOOP(idx, len * d * n) {
        const int64_t q = idx / n, k = idx % n, j = q / d, c = q % d;
        T acc = 0;
        for (int64_t s = 0; s + 1 < n_off; s++) {
            const int64_t b = off[s], e = off[s + 1];
            for (int64_t t = b; t < e; t++) {
                const int64_t r = t + start + j;
                if (r < b || r >= e) continue;
                acc += mul_rn(x[r * d + c], dout[t * n + k]);
            }
        }
        gf[idx] = acc;
    }
}

} // namespace

extern "C" {

/* X [N, D...] with LoD -> Out [sequences, D...], MaxIndex (MAX) */
pe_status pe_cuda_sequence_pool(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *mi = pe_ctx_out(ctx, "MaxIndex");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int type = 0;
    PE_CHECK(pe_seqpool_type(ctx, &type));
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    const int64_t d = pe_dims_prod(x->dims, 1, x->ndim), ns = n - 1;
    if (ns * d == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_i64 doff(ctx, off, n, s);
    if (doff.st != PE_OK) return doff.st;
    int32_t *mip = type == PE_SEQPOOL_MAX && mi ? (int32_t *)pe_tensor_data(mi) : nullptr;
    const double pad = pe_ctx_float(ctx, "pad_value");
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_seqpool<T><<<pe_cuda_blocks(ns * d), PE_CUDA_THREADS, 0, s>>>(
            type, doff.get(), ns, d, (const T *)pe_tensor_data(x), (T *)pe_tensor_data(out), mip, (T)pad));
    return pe_cuda_check_launch(ctx);
}

pe_status pe_cuda_sequence_pool_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD"), *mi = pe_ctx_in(ctx, "MaxIndex");
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (!gx) return PE_OK;
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int type = 0;
    PE_CHECK(pe_seqpool_type(ctx, &type));
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    const int64_t d = pe_dims_prod(x->dims, 1, x->ndim), rows = x->dims[0];
    if (rows * d == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_i64 doff(ctx, off, n, s);
    if (doff.st != PE_OK) return doff.st;
    const int32_t *mip = type == PE_SEQPOOL_MAX ? (const int32_t *)pe_tensor_data(mi) : nullptr;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_seqpool_grad<T><<<pe_cuda_blocks(rows * d), PE_CUDA_THREADS, 0, s>>>(
            type, doff.get(), n, d, (const T *)pe_tensor_data(g), mip, (T *)pe_tensor_data(gx), rows));
    return pe_cuda_check_launch(ctx);
}

pe_status pe_cuda_sequence_softmax(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    if (n < 2 || x->dims[0] == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_i64 doff(ctx, off, n, s);
    if (doff.st != PE_OK) return doff.st;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_seqsoftmax<T><<<pe_cuda_blocks(n - 1), PE_CUDA_THREADS, 0, s>>>(
            doff.get(), n - 1, (const T *)pe_tensor_data(x), (T *)pe_tensor_data(out)));
    return pe_cuda_check_launch(ctx);
}

pe_status pe_cuda_sequence_softmax_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (!gx) return PE_OK;
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    if (n < 2 || x->dims[0] == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_i64 doff(ctx, off, n, s);
    if (doff.st != PE_OK) return doff.st;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_seqsoftmax_grad<T><<<pe_cuda_blocks(n - 1), PE_CUDA_THREADS, 0, s>>>(
            doff.get(), n - 1, (const T *)pe_tensor_data(o), (const T *)pe_tensor_data(g), (T *)pe_tensor_data(gx)));
    return pe_cuda_check_launch(ctx);
}

pe_status pe_cuda_sequence_expand(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_on_place(ctx, x, "X", pe_ctx_in_name(ctx, "X", 0)));
    const int64_t *yo, *xo;
    int64_t ny;
    PE_CHECK(pe_seq_expand_levels(ctx, x, y, &yo, &ny, &xo));
    const int64_t rows = out->dims[0], row = pe_dims_prod(x->dims, 1, x->ndim);
    if (rows * row == 0) return PE_OK;
    std::vector<int64_t> map((size_t)rows);
    int64_t at = 0;
    for (int64_t i = 0; i + 1 < ny; i++) {
        const int64_t b = xo ? xo[i] : i, len = xo ? xo[i + 1] - xo[i] : 1;
        for (int64_t r = 0; r < yo[i + 1] - yo[i]; r++)
            for (int64_t j = 0; j < len && at < rows; j++) map[(size_t)at++] = b + j;
    }
    if (at != rows) return pe_ctx_error(ctx, PE_ERR_INTERNAL, "Out has %lld rows, the LoDs give %lld",
                                        (long long)rows, (long long)at);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_i64 dmap(ctx, map.data(), rows, s);
    if (dmap.st != PE_OK) return dmap.st;
    PE_CUDA_ALL_TYPES(ctx, x->dtype, "X", T,
        k_gather_rows<T><<<pe_cuda_blocks(rows * row), PE_CUDA_THREADS, 0, s>>>(
            dmap.get(), rows, row, (const T *)pe_tensor_data(x), (T *)pe_tensor_data(out)));
    return pe_cuda_check_launch(ctx);
}

pe_status pe_cuda_sequence_expand_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (!gx) return PE_OK;
    PE_CHECK(pe_cuda_check_on_place(ctx, g, "Out@GRAD", pe_ctx_in_name(ctx, "Out@GRAD", 0)));
    const int64_t *yo, *xo;
    int64_t ny;
    PE_CHECK(pe_seq_expand_levels(ctx, x, y, &yo, &ny, &xo));
    const int64_t rows = x->dims[0], d = pe_dims_prod(x->dims, 1, x->ndim);
    if (rows * d == 0) return PE_OK;
    std::vector<int64_t> ostart((size_t)ny, 0), yrep((size_t)ny, 0);
    int64_t at = 0;
    for (int64_t i = 0; i + 1 < ny; i++) {
        ostart[(size_t)i] = at;
        at += (yo[i + 1] - yo[i]) * (xo ? xo[i + 1] - xo[i] : 1);
    }
    int64_t nx = 0;
    if (xo) pe_tensor_lod(x, 0, &nx);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_i64 dyo(ctx, yo, ny, s), dst(ctx, ostart.data(), ny, s), dxo(ctx, xo, xo ? nx : 0, s);
    if (dyo.st != PE_OK) return dyo.st;
    if (dst.st != PE_OK) return dst.st;
    if (dxo.st != PE_OK) return dxo.st;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_seqexpand_grad<T><<<pe_cuda_blocks(rows * d), PE_CUDA_THREADS, 0, s>>>(
            xo ? dxo.get() : nullptr, nx, dyo.get(), dst.get(), d, (const T *)pe_tensor_data(g),
            (T *)pe_tensor_data(gx), rows));
    return pe_cuda_check_launch(ctx);
}

pe_status pe_cuda_sequence_mask(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *y = pe_ctx_out(ctx, "Y");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x), m = y->dims[y->ndim - 1];
    if (n * m == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (x->dtype == PE_DTYPE_INT32) return launch_mask(ctx, (const int32_t *)pe_tensor_data(x), n, m, y, s);
    return launch_mask(ctx, (const int64_t *)pe_tensor_data(x), n, m, y, s);
}

/* X [T, D] with LoD, Filter [contextLength * D, N] -> Out [T, N] */
pe_status pe_cuda_sequence_conv(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *f = pe_ctx_in(ctx, "Filter");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_on_place(ctx, x, "X", pe_ctx_in_name(ctx, "X", 0)));
    PE_CHECK(pe_cuda_check_on_place(ctx, f, "Filter", pe_ctx_in_name(ctx, "Filter", 0)));
    pe_seqconv_geom g;
    PE_CHECK(pe_seqconv_geom_get(ctx, x, f, &g));
    if (g.rows * g.n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_i64 doff(ctx, g.off, g.n_off, s);
    if (doff.st != PE_OK) return doff.st;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_seqconv<T><<<pe_cuda_blocks(g.rows * g.n), PE_CUDA_THREADS, 0, s>>>(
            doff.get(), g.n_off, g.rows, g.d, g.n, g.len, g.start, (const T *)pe_tensor_data(x),
            (const T *)pe_tensor_data(f), (T *)pe_tensor_data(out)));
    return pe_cuda_check_launch(ctx);
}

pe_status pe_cuda_sequence_conv_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *f = pe_ctx_in(ctx, "Filter"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD"), *gf = pe_ctx_out(ctx, "Filter@GRAD");
    if (!gx && !gf) return PE_OK;
    PE_CHECK(pe_cuda_check_on_place(ctx, x, "X", pe_ctx_in_name(ctx, "X", 0)));
    PE_CHECK(pe_cuda_check_on_place(ctx, f, "Filter", pe_ctx_in_name(ctx, "Filter", 0)));
    PE_CHECK(pe_cuda_check_on_place(ctx, g, "Out@GRAD", pe_ctx_in_name(ctx, "Out@GRAD", 0)));
    pe_seqconv_geom sg;
    PE_CHECK(pe_seqconv_geom_get(ctx, x, f, &sg));
    const int64_t nx = gx ? sg.rows * sg.d : 0, nf = gf ? sg.len * sg.d * sg.n : 0;
    if (nx == 0 && nf == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_i64 doff(ctx, sg.off, sg.n_off, s);
    if (doff.st != PE_OK) return doff.st;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        if (nx)
            k_seqconv_grad_x<T><<<pe_cuda_blocks(nx), PE_CUDA_THREADS, 0, s>>>(
                doff.get(), sg.n_off, sg.rows, sg.d, sg.n, sg.len, sg.start, (const T *)pe_tensor_data(f),
                (const T *)pe_tensor_data(g), (T *)pe_tensor_data(gx));
        if (nf)
            k_seqconv_grad_f<T><<<pe_cuda_blocks(nf), PE_CUDA_THREADS, 0, s>>>(
                doff.get(), sg.n_off, sg.d, sg.n, sg.len, sg.start, (const T *)pe_tensor_data(x),
                (const T *)pe_tensor_data(g), (T *)pe_tensor_data(gf));
    });
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
