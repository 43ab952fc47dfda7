/* ops/cuda/reduce.cu — CUDA kernels of the reduction family: mean, sum,
 * softmax, arg_max, top_k, accuracy, reduce_{sum,mean,max,min,prod,any,all}
 * and the grads mean_grad, sum_grad, softmax_grad, reduce_{sum,mean,max,
 * min,prod}_grad — the dtypes, attrs and formulas of ops/cpu/reduce.c.
 *
 * How: the reduced dims come from the same pe_reduce_view the CPU kernels
 * and shape inference use (ops/reduce.h). One reduced block is
 * [pre, D, post] and goes through the fixed-order engine of
 * ops/cuda/reduce_kernels.cuh (a block per row, a thread per column, a
 * chunked two-pass form for long rows with few outputs); several reduced
 * blocks get a thread per output walking its elements in the CPU's
 * row-major order. softmax / softmax_grad run a block per row when the
 * class axis is last and long, else a thread per (pre, post) column.
 * arg_max and top_k order as on CPU: NaN above everything, then larger
 * values, then the lower index (the order is total, so the result does not
 * depend on how the work is split); top_k with k <= 16 selects k times per
 * row with a block, larger k keeps the CPU's heap in the output row, one
 * thread per row.
 *
 * Numerics: float32 sums accumulate in double as on CPU (integer sums in
 * uint64_t, wrapping); the CPU sums sequentially, the GPU in a tree, so
 * float64 results may differ in the last bits (float32 results round the
 * same double sums). max / min propagate NaN, prod of floats runs in double,
 * of integers wraps.
 *
 * Why: issue 14 — the reductions and softmax are in every model's loss and
 * metric path; without them a GPU place falls back op by op.
 */
#include "ops/cuda/reduce_kernels.cuh"
#include "ops/reduce.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace {

pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

pe_status bad_dtype(const pe_op_ctx *ctx, pe_dtype dt) {
    return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(dt));
}

template <typename T> __device__ __forceinline__ bool is_nan(T v) {
    if constexpr (std::is_floating_point<T>::value) return isnan(v);
    else return false;
}

/* ---- fold kinds: init / pre / comb / fin --------------------------------- */

/* Sum: floats in double, scaled by `scale` (the mean's 1 / count) or divided
 * by `div` (mean's / n) at the end; integers in uint64_t, wrapping. */
template <typename T> struct kind_sum {
    using acc_t = typename std::conditional<std::is_integral<T>::value, unsigned long long, double>::type;
    double scale, div;
    __device__ acc_t init() const { return 0; }
    __device__ acc_t pre(T v) const { return (acc_t)v; }
    __device__ acc_t comb(acc_t a, acc_t b) const { return a + b; }
    __device__ T fin(acc_t a) const {
        if constexpr (std::is_integral<T>::value) return (T)a;
        else return div != 0 ? (T)(a / div) : (T)(a * scale);
    }
};

/* max / min: NaN wins (torch.amax); `id` the lowest / highest value. */
template <typename T, bool Max> struct kind_ext {
    using acc_t = T;
    T id;
    __device__ acc_t init() const { return id; }
    __device__ acc_t pre(T v) const { return v; }
    __device__ acc_t comb(acc_t a, acc_t x) const {
        if (is_nan(x)) return x;
        return (Max ? x > a : x < a) ? x : a;
    }
    __device__ T fin(acc_t a) const { return a; }
};

/* prod: floats in double, integers in their unsigned type (wrapping). */
template <typename T> struct prod_acc { using type = double; };
template <> struct prod_acc<int32_t> { using type = uint32_t; };
template <> struct prod_acc<int64_t> { using type = unsigned long long; };
template <typename T> struct kind_prod {
    using acc_t = typename prod_acc<T>::type;
    __device__ acc_t init() const { return 1; }
    __device__ acc_t pre(T v) const { return (acc_t)v; }
    __device__ acc_t comb(acc_t a, acc_t b) const { return a * b; }
    __device__ T fin(acc_t a) const { return (T)a; }
};

/* any / all over bool bytes. */
template <bool Any> struct kind_bool {
    using acc_t = unsigned;
    __device__ acc_t init() const { return Any ? 0u : 1u; }
    __device__ acc_t pre(uint8_t v) const { return v != 0; }
    __device__ acc_t comb(acc_t a, acc_t b) const { return Any ? (a | b) : (a & b); }
    __device__ uint8_t fin(acc_t a) const { return (uint8_t)a; }
};

/* A kind over x [outer, mid, inner] -> out [outer, inner], for the engine. */
template <typename T, typename K> struct simple_op {
    using acc_t = typename K::acc_t;
    K k;
    const T *x;
    T *out;
    int64_t mid, inner;
    __device__ acc_t init() const { return k.init(); }
    __device__ acc_t load(int64_t o, int64_t m, int64_t i) const { return k.pre(x[(o * mid + m) * inner + i]); }
    __device__ acc_t comb(acc_t a, acc_t b) const { return k.comb(a, b); }
    __device__ void store(int64_t o, int64_t i, acc_t a) const { out[o * inner + i] = k.fin(a); }
};

/* ---- the general view: several reduced blocks ----------------------------- */

/* The kept and the reduced merged dims of a pe_reduce_view with x's strides. */
struct gview {
    int nk, nr;
    int64_t kdims[PE_MAX_DIMS], kstr[PE_MAX_DIMS];
    int64_t rdims[PE_MAX_DIMS], rstr[PE_MAX_DIMS];
    int64_t out_numel, count;
};

gview make_gview(const pe_reduce_view &v) {
    gview g = {};
    int64_t xstr[PE_MAX_DIMS], s = 1;
    for (int d = v.n - 1; d >= 0; d--) {
        xstr[d] = s;
        s *= v.dims[d];
    }
    for (int d = 0; d < v.n; d++) {
        if (v.red[d]) {
            g.rdims[g.nr] = v.dims[d];
            g.rstr[g.nr++] = xstr[d];
        } else {
            g.kdims[g.nk] = v.dims[d];
            g.kstr[g.nk++] = xstr[d];
        }
    }
    g.out_numel = v.out_numel;
    g.count = v.count;
    return g;
}

/* Offset of row-major multi-index `lin` over dims[0..n) with strides str. */
__device__ __forceinline__ int64_t goff(const int64_t *dims, const int64_t *str, int n, int64_t lin) {
    int64_t o = 0;
    for (int j = n - 1; j >= 0; j--) {
        o += (lin % dims[j]) * str[j];
        lin /= dims[j];
    }
    return o;
}

/* x [view] -> out [kept]: out[t] folds its elements in row-major order. */
template <typename T, typename K>
__global__ void k_fold_general(K k, const T *x, T *out, gview g) {
    const int64_t ln = g.nr ? g.rdims[g.nr - 1] : 1, ls = g.nr ? g.rstr[g.nr - 1] : 0;
    const int64_t nouter = g.count / ln;
    const int nrm = g.nr ? g.nr - 1 : 0;
    PE_CUDA_LOOP(t, g.out_numel) {
        const int64_t base = goff(g.kdims, g.kstr, g.nk, t);
        typename K::acc_t a = k.init();
        for (int64_t r = 0; r < nouter; r++) {
            const T *xr = x + base + goff(g.rdims, g.rstr, nrm, r);
            for (int64_t j = 0; j < ln; j++) a = k.comb(a, k.pre(xr[j * ls]));
        }
        out[t] = k.fin(a);
    }
}

/* out[0..n) = v */
template <typename T> __global__ void k_fill(T *out, int64_t n, T v) {
    PE_CUDA_LOOP(i, n) out[i] = v;
}

/* x [view] -> out [kept] with kind k (the view has count > 0). */
template <typename T, typename K>
pe_status fold_launch(const pe_op_ctx *ctx, const K &k, const pe_reduce_view &v, const void *xd, void *od,
                      cudaStream_t s) {
    const T *x = (const T *)xd;
    T *out = (T *)od;
    if (v.simple) return pe_cuda_red_run(ctx, simple_op<T, K>{k, x, out, v.d, v.post}, v.pre, v.d, v.post, s);
    k_fold_general<T, K><<<pe_cuda_blocks(v.out_numel), PE_CUDA_THREADS, 0, s>>>(k, x, out, make_gview(v));
    return PE_OK;
}

/* The view of X under the op's dim / reduce_all attrs (ops/reduce.h). */
pe_status x_view(const pe_op_ctx *ctx, const pe_tensor *x, pe_reduce_view *v) {
    bool red[PE_MAX_DIMS];
    PE_CHECK(pe_reduce_flags(ctx, x->ndim, x->dims, red));
    pe_reduce_view_make(x->ndim, x->dims, red, v);
    return PE_OK;
}

bool is_reduced(const pe_tensor *t, const pe_tensor *x, const pe_reduce_view *v) {
    return t->dtype == x->dtype && pe_tensor_numel(t) == v->out_numel;
}

enum fold_kind { F_SUM, F_MEAN, F_MAX, F_MIN, F_PROD, F_ANY, F_ALL };

/* reduce_{sum,mean,max,min,prod,any,all}: X [..] -> Out [kept dims]. */
pe_status fold_run(const pe_op_ctx *ctx, fold_kind kind) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_reduce_view v;
    PE_CHECK(x_view(ctx, x, &v));
    if (!is_reduced(out, x, &v)) return internal_mismatch(ctx);
    const pe_dtype dt = x->dtype;
    const bool boolean = kind == F_ANY || kind == F_ALL;
    const bool ok = boolean ? dt == PE_DTYPE_BOOL
                            : (dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 ||
                               (kind != F_MEAN && (dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64)));
    if (!ok) return bad_dtype(ctx, dt);
    if (v.out_numel == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const void *xd = pe_tensor_data(x);
    void *od = pe_tensor_data(out);
    const unsigned g = pe_cuda_blocks(v.out_numel);
    if (v.count == 0) { /* empty reduction: sum 0, mean NaN, prod 1, any 0, all 1 (max / min refused by infer) */
        const double e = kind == F_MEAN ? NAN : (kind == F_PROD || kind == F_ALL) ? 1.0 : 0.0;
        switch (dt) {
        case PE_DTYPE_FP32: k_fill<float><<<g, PE_CUDA_THREADS, 0, s>>>((float *)od, v.out_numel, (float)e); break;
        case PE_DTYPE_FP64: k_fill<double><<<g, PE_CUDA_THREADS, 0, s>>>((double *)od, v.out_numel, e); break;
        case PE_DTYPE_INT32: k_fill<int32_t><<<g, PE_CUDA_THREADS, 0, s>>>((int32_t *)od, v.out_numel, (int32_t)e); break;
        case PE_DTYPE_INT64: k_fill<int64_t><<<g, PE_CUDA_THREADS, 0, s>>>((int64_t *)od, v.out_numel, (int64_t)e); break;
        default: k_fill<uint8_t><<<g, PE_CUDA_THREADS, 0, s>>>((uint8_t *)od, v.out_numel, (uint8_t)e); break;
        }
        return pe_cuda_check_launch(ctx);
    }
    const double scale = kind == F_MEAN ? 1.0 / (double)v.count : 1.0;
    switch (kind) {
    case F_SUM:
    case F_MEAN:
        PE_CUDA_NUM_TYPES(ctx, dt, "X", T, PE_CHECK((fold_launch<T>(ctx, kind_sum<T>{scale, 0.0}, v, xd, od, s))));
        break;
    case F_MAX:
        PE_CUDA_NUM_TYPES(ctx, dt, "X", T,
                          PE_CHECK((fold_launch<T>(ctx, kind_ext<T, true>{std::numeric_limits<T>::has_infinity
                                                                              ? -std::numeric_limits<T>::infinity()
                                                                              : std::numeric_limits<T>::lowest()},
                                                   v, xd, od, s))));
        break;
    case F_MIN:
        PE_CUDA_NUM_TYPES(ctx, dt, "X", T,
                          PE_CHECK((fold_launch<T>(ctx, kind_ext<T, false>{std::numeric_limits<T>::has_infinity
                                                                               ? std::numeric_limits<T>::infinity()
                                                                               : std::numeric_limits<T>::max()},
                                                   v, xd, od, s))));
        break;
    case F_PROD:
        PE_CUDA_NUM_TYPES(ctx, dt, "X", T, PE_CHECK((fold_launch<T>(ctx, kind_prod<T>{}, v, xd, od, s))));
        break;
    case F_ANY: PE_CHECK((fold_launch<uint8_t>(ctx, kind_bool<true>{}, v, xd, od, s))); break;
    case F_ALL: PE_CHECK((fold_launch<uint8_t>(ctx, kind_bool<false>{}, v, xd, od, s))); break;
    }
    return pe_cuda_check_launch(ctx);
}

/* ---- grads of the reduce ops: dx[e] from x[e] and its output's t ---------- */

/* Maps x element e to its output element t: [pre, D, post] (simple) or the
 * merged dims with the output's strides (0 for the reduced ones). */
struct tmap {
    bool simple;
    int64_t d, post;
    int n;
    int64_t dims[PE_MAX_DIMS], gstr[PE_MAX_DIMS];
    __device__ int64_t operator()(int64_t e) const {
        if (simple) return (e / (d * post)) * post + e % post;
        int64_t go = 0, rem = e;
        for (int k = n - 1; k >= 0; k--) {
            go += (rem % dims[k]) * gstr[k];
            rem /= dims[k];
        }
        return go;
    }
};

tmap make_tmap(const pe_reduce_view &v) {
    tmap m = {};
    m.simple = v.simple;
    m.d = v.d > 0 ? v.d : 1;
    m.post = v.post > 0 ? v.post : 1;
    m.n = v.n;
    int64_t s = 1;
    for (int k = v.n - 1; k >= 0; k--) {
        m.dims[k] = v.dims[k];
        m.gstr[k] = v.red[k] ? 0 : s;
        if (!v.red[k]) s *= v.dims[k];
    }
    return m;
}

enum grad_kind { G_SCALE, G_EQ, G_PROD };

/* x, dx [numel]; o, g [out_numel] (o unused by G_SCALE) */
template <typename T, grad_kind K>
__global__ void k_reduce_grad(const T *x, const T *o, const T *g, T *dx, int64_t numel, tmap map, T sc) {
    PE_CUDA_LOOP(e, numel) {
        const int64_t t = map(e);
        if constexpr (K == G_SCALE) dx[e] = g[t] * sc;
        else if constexpr (K == G_EQ) dx[e] = x[e] == o[t] ? g[t] : (T)0;
        else dx[e] = g[t] * o[t] / x[e];
    }
}

pe_status reduce_grad_run(const pe_op_ctx *ctx, grad_kind kind, bool mean) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD");
    const pe_tensor *o = kind == G_SCALE ? nullptr : pe_ctx_in(ctx, "Out");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_reduce_view v;
    PE_CHECK(x_view(ctx, x, &v));
    if (!is_reduced(g, x, &v) || (o && !is_reduced(o, x, &v)) || dx->dtype != x->dtype ||
        pe_tensor_numel(dx) != pe_tensor_numel(x))
        return internal_mismatch(ctx);
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64) return bad_dtype(ctx, x->dtype);
    const int64_t n = pe_tensor_numel(x);
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const double scale = mean ? 1.0 / (double)v.count : 1.0;
    const tmap map = make_tmap(v);
    const unsigned nb = pe_cuda_blocks(n);
    const void *xd = kind == G_SCALE ? nullptr : pe_tensor_data(x), *od = o ? pe_tensor_data(o) : nullptr;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)xd, *op = (const T *)od, *gp = (const T *)pe_tensor_data(g);
        T *dp = (T *)pe_tensor_data(dx);
        if (kind == G_SCALE)
            k_reduce_grad<T, G_SCALE><<<nb, PE_CUDA_THREADS, 0, s>>>(xp, op, gp, dp, n, map, (T)scale);
        else if (kind == G_EQ)
            k_reduce_grad<T, G_EQ><<<nb, PE_CUDA_THREADS, 0, s>>>(xp, op, gp, dp, n, map, (T)0);
        else
            k_reduce_grad<T, G_PROD><<<nb, PE_CUDA_THREADS, 0, s>>>(xp, op, gp, dp, n, map, (T)0);
    });
    return pe_cuda_check_launch(ctx);
}

/* ---- sum: out = x_0 + x_1 + ... (input order), up to SUM_PER_LAUNCH inputs
 * per launch; later launches add onto out (the same left-to-right order). */

#define SUM_PER_LAUNCH 32

template <typename T> struct sum_args {
    const T *x[SUM_PER_LAUNCH];
    int m;
};

template <typename T> __device__ __forceinline__ T sadd(T a, T b) {
    if constexpr (std::is_integral<T>::value)
        return (T)((typename std::make_unsigned<T>::type)a + (typename std::make_unsigned<T>::type)b);
    else return a + b;
}

/* x_k, out [n]; first: out = x_0 + ..., else out += x_0 + ... (in order).
 * Reads every input of element i before writing out[i], so out may be x_0. */
template <typename T> __global__ void k_sum(sum_args<T> a, T *out, int64_t n, bool first) {
    PE_CUDA_LOOP(i, n) {
        T acc = first ? a.x[0][i] : sadd(out[i], a.x[0][i]);
        for (int k = 1; k < a.m; k++) acc = sadd(acc, a.x[k][i]);
        out[i] = acc;
    }
}

template <typename T>
void sum_launch(const void *const *xs, int m, void *od, int64_t n, cudaStream_t s) {
    for (int b = 0; b < m; b += SUM_PER_LAUNCH) {
        sum_args<T> a = {};
        a.m = m - b < SUM_PER_LAUNCH ? m - b : SUM_PER_LAUNCH;
        for (int k = 0; k < a.m; k++) a.x[k] = (const T *)xs[b + k];
        k_sum<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(a, (T *)od, n, b == 0);
    }
}

/* ---- softmax along an axis: [pre, D, post] -------------------------------- */

/* The CPU's per-row steps: m = max, e_j = exp(x_j - m) in T, s = sum e_j in
 * double, out_j = e_j * (T)(1 / s). */
__device__ __forceinline__ float ex(float v) { return expf(v); }
__device__ __forceinline__ double ex(double v) { return exp(v); }

struct cmax_f {
    template <typename T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};
struct cadd_f {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};

/* x, out [rows, D]: a block per row */
template <typename T> __global__ void k_softmax_block(const T *x, T *out, int64_t rows, int64_t D) {
    __shared__ double sh[PE_CUDA_THREADS];
    T *shm = (T *)sh;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * D;
        T *orow = out + r * D;
        T m = xr[0];
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) m = xr[j] > m ? xr[j] : m;
        m = pe_cuda_block_all(m, shm, cmax_f{});
        double sum = 0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const T e = ex(xr[j] - m);
            orow[j] = e;
            sum += e;
        }
        sum = pe_cuda_block_all(sum, sh, cadd_f{});
        const T inv = (T)(1.0 / sum);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) orow[j] *= inv;
    }
}

/* x, out [pre, D, post]: a thread per (pre, post) column */
template <typename T> __global__ void k_softmax_col(const T *x, T *out, int64_t pre, int64_t D, int64_t post) {
    PE_CUDA_LOOP(r, pre * post) {
        const int64_t base = (r / post) * D * post + r % post;
        const T *xr = x + base;
        T *orow = out + base;
        T m = xr[0];
        for (int64_t j = 1; j < D; j++) m = xr[j * post] > m ? xr[j * post] : m;
        double sum = 0;
        for (int64_t j = 0; j < D; j++) {
            const T e = ex(xr[j * post] - m);
            orow[j * post] = e;
            sum += e;
        }
        const T inv = (T)(1.0 / sum);
        for (int64_t j = 0; j < D; j++) orow[j * post] *= inv;
    }
}

/* o, g, dx [rows, D]: dx = o * (g - (T)sum(o * g)); dx may be g. */
template <typename T> __global__ void k_softmax_grad_block(const T *o, const T *g, T *dx, int64_t rows, int64_t D) {
    __shared__ double sh[PE_CUDA_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *orow = o + r * D, *grow = g + r * D;
        T *drow = dx + r * D;
        double sum = 0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) sum += __dmul_rn((double)orow[j], (double)grow[j]);
        sum = pe_cuda_block_all(sum, sh, cadd_f{});
        const T st = (T)sum;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) drow[j] = orow[j] * (grow[j] - st);
    }
}

template <typename T>
__global__ void k_softmax_grad_col(const T *o, const T *g, T *dx, int64_t pre, int64_t D, int64_t post) {
    PE_CUDA_LOOP(r, pre * post) {
        const int64_t base = (r / post) * D * post + r % post;
        double sum = 0;
        for (int64_t j = 0; j < D; j++) sum += __dmul_rn((double)o[base + j * post], (double)g[base + j * post]);
        const T st = (T)sum;
        for (int64_t j = 0; j < D; j++) {
            const int64_t i = base + j * post;
            dx[i] = o[i] * (g[i] - st);
        }
    }
}

/* [pre, D, post] around the normalized axis; false when axis is out of range. */
bool split_axis(const pe_tensor *t, int64_t axis, int64_t *pre, int64_t *d, int64_t *post) {
    if (axis < 0) axis += t->ndim;
    if (axis < 0 || axis >= t->ndim) return false;
    *pre = pe_dims_prod(t->dims, 0, (int)axis);
    *d = t->dims[axis];
    *post = pe_dims_prod(t->dims, (int)axis + 1, t->ndim);
    return true;
}

/* ---- arg_max / top_k order: NaN first, then larger, then lower index ------ */

template <typename T> struct vi {
    T v;
    int64_t i; /* -1: none */
};

/* (a) ranks above (b) (both present) */
template <typename T> __device__ __forceinline__ bool ranks_above(T va, int64_t ia, T vb, int64_t ib) {
    if (is_nan(va)) return !is_nan(vb) || ia < ib;
    return !is_nan(vb) && (va > vb || (va == vb && ia < ib));
}

struct cbest_f {
    template <typename T> __device__ vi<T> operator()(vi<T> a, vi<T> b) const {
        if (b.i < 0) return a;
        if (a.i < 0) return b;
        return ranks_above(b.v, b.i, a.v, a.i) ? b : a;
    }
};

/* x [pre, D, post] -> out [pre, post]: a thread per column, the CPU's loop */
template <typename T, typename O>
__global__ void k_argmax_col(const T *x, O *out, int64_t pre, int64_t D, int64_t post) {
    PE_CUDA_LOOP(r, pre * post) {
        const T *xr = x + (r / post) * D * post + r % post;
        T best = xr[0];
        int64_t bi = 0;
        for (int64_t j = 1; j < D; j++) {
            const T v = xr[j * post];
            if (!is_nan(best) && (v > best || is_nan(v))) {
                best = v;
                bi = j;
            }
        }
        out[r] = (O)bi;
    }
}

/* x [rows, D] -> out [rows]: a block per row */
template <typename T, typename O> __global__ void k_argmax_block(const T *x, O *out, int64_t rows, int64_t D) {
    __shared__ vi<T> sh[PE_CUDA_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * D;
        vi<T> b = {T(0), -1};
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const T v = xr[j];
            if (b.i < 0 || (!is_nan(b.v) && (v > b.v || is_nan(v)))) b = {v, j};
        }
        b = pe_cuda_block_all(b, sh, cbest_f{});
        if (threadIdx.x == 0) out[r] = (O)b.i;
    }
}

/* x [rows, D] -> vals, idx [rows, k] (k <= 16): a block per row selects k
 * times the best element ranking below the previous pick. */
template <typename T>
__global__ void k_topk_select(const T *x, T *vals, int64_t *idx, int64_t rows, int64_t D, int64_t k) {
    __shared__ vi<T> sh[PE_CUDA_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * D;
        vi<T> prev = {T(0), -1};
        for (int64_t t = 0; t < k; t++) {
            vi<T> b = {T(0), -1};
            for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
                const T v = xr[j];
                if (prev.i >= 0 && !ranks_above(prev.v, prev.i, v, j)) continue;
                if (b.i < 0 || ranks_above(v, j, b.v, b.i)) b = {v, j};
            }
            prev = pe_cuda_block_all(b, sh, cbest_f{});
            if (threadIdx.x == 0) {
                vals[r * k + t] = prev.v;
                idx[r * k + t] = prev.i;
            }
        }
    }
}

/* Min-heap on rank (root = lowest-ranked) over v[0..n), ix[0..n): the CPU's. */
template <typename T> __device__ void topk_sift(T *v, int64_t *ix, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, rr = l + 1, w = i;
        if (l < n && ranks_above(v[w], ix[w], v[l], ix[l])) w = l;
        if (rr < n && ranks_above(v[w], ix[w], v[rr], ix[rr])) w = rr;
        if (w == i) return;
        T tv = v[i];
        v[i] = v[w];
        v[w] = tv;
        int64_t ti = ix[i];
        ix[i] = ix[w];
        ix[w] = ti;
        i = w;
    }
}

/* x [rows, D] -> vals, idx [rows, k]: a thread per row, the heap in the output row */
template <typename T>
__global__ void k_topk_heap(const T *x, T *vals, int64_t *idx, int64_t rows, int64_t D, int64_t k) {
    PE_CUDA_LOOP(r, rows) {
        const T *xr = x + r * D;
        T *v = vals + r * k;
        int64_t *ix = idx + r * k;
        for (int64_t j = 0; j < k; j++) {
            v[j] = xr[j];
            ix[j] = j;
        }
        for (int64_t i = k / 2 - 1; i >= 0; i--) topk_sift(v, ix, k, i);
        for (int64_t j = k; j < D; j++)
            if (ranks_above(xr[j], j, v[0], ix[0])) {
                v[0] = xr[j];
                ix[0] = j;
                topk_sift(v, ix, k, 0);
            }
        for (int64_t n = k - 1; n > 0; n--) {
            T tv = v[0];
            v[0] = v[n];
            v[n] = tv;
            int64_t ti = ix[0];
            ix[0] = ix[n];
            ix[n] = ti;
            topk_sift(v, ix, n, 0);
        }
    }
}

/* ---- accuracy: one block counts the rows whose label is among their k indices */

template <typename I, typename L>
__global__ void k_accuracy(const I *idx, const L *lab, int64_t n, int64_t k, float *acc, int32_t *cor, int32_t *tot) {
    __shared__ unsigned long long sh[PE_CUDA_THREADS];
    unsigned long long c = 0;
    for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
        const int64_t want = (int64_t)lab[r];
        for (int64_t j = 0; j < k; j++)
            if ((int64_t)idx[r * k + j] == want) {
                c++;
                break;
            }
    }
    c = pe_cuda_block_all(c, sh, cadd_f{});
    if (threadIdx.x == 0) {
        *acc = n ? (float)((double)c / (double)n) : 0.0f;
        if (cor) *cor = (int32_t)c;
        if (tot) *tot = (int32_t)n;
    }
}

/* ---- mean_grad: dx = dout / numel ----------------------------------------- */

template <typename T> __global__ void k_mean_grad(const T *g, T *dx, int64_t n) {
    const T v = (T)((double)g[0] / (double)n);
    PE_CUDA_LOOP(i, n) dx[i] = v;
}

} // namespace

extern "C" {

/* X [..] -> Out [1] = sum(X) / numel (in double); NaN for an empty X. */
pe_status pe_cuda_mean(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (out->dtype != x->dtype || pe_tensor_numel(out) != 1) return internal_mismatch(ctx);
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64) return bad_dtype(ctx, x->dtype);
    const int64_t n = pe_tensor_numel(x);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        T *od = (T *)pe_tensor_data(out);
        if (n == 0) k_fill<T><<<1, 1, 0, s>>>(od, 1, (T)NAN);
        else
            PE_CHECK(pe_cuda_red_run(ctx, simple_op<T, kind_sum<T>>{kind_sum<T>{1.0, (double)n}, (const T *)pe_tensor_data(x), od, n, 1},
                                     1, n, 1, s));
    });
    return pe_cuda_check_launch(ctx);
}

/* X_0..X_{m-1} [..] (absent ones skipped) -> Out [..], added in input order. */
pe_status pe_cuda_sum(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    enum { MAX_IN = 1024 };
    const void *xs[MAX_IN];
    int m = 0;
    for (int k = 0; k < pe_ctx_n_in(ctx, "X"); k++) {
        const pe_tensor *t = pe_ctx_in_at(ctx, "X", k);
        if (!t) continue;
        if (t->dtype != out->dtype || pe_tensor_numel(t) != pe_tensor_numel(out)) return internal_mismatch(ctx);
        if (m == MAX_IN) return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "more than %d inputs", (int)MAX_IN);
        xs[m++] = pe_tensor_data(t);
    }
    const int64_t n = pe_tensor_numel(out);
    if (m == 0) return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_NUM_TYPES(ctx, out->dtype, "Out", T, sum_launch<T>(xs, m, pe_tensor_data(out), n, s));
    return pe_cuda_check_launch(ctx);
}

/* X [pre, D, post] (axis) -> Out: softmax along axis. */
pe_status pe_cuda_softmax(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (out->dtype != x->dtype || pe_tensor_numel(out) != pe_tensor_numel(x)) return internal_mismatch(ctx);
    int64_t pre, d, post;
    if (!split_axis(x, pe_ctx_int(ctx, "axis"), &pre, &d, &post))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis is out of range");
    if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64) return bad_dtype(ctx, x->dtype);
    if (pe_tensor_numel(x) == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)pe_tensor_data(x);
        T *op = (T *)pe_tensor_data(out);
        if (post == 1 && d >= 128)
            k_softmax_block<T><<<pe_cuda_red_grid(pre), PE_CUDA_THREADS, 0, s>>>(xp, op, pre, d);
        else
            k_softmax_col<T><<<pe_cuda_blocks(pre * post), PE_CUDA_THREADS, 0, s>>>(xp, op, pre, d, post);
    });
    return pe_cuda_check_launch(ctx);
}

/* Out, Out@GRAD [pre, D, post] -> X@GRAD = Out * (Out@GRAD - sum_D(Out * Out@GRAD)). */
pe_status pe_cuda_softmax_grad(const pe_op_ctx *ctx) {
    const pe_tensor *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(o);
    if (g->dtype != o->dtype || dx->dtype != o->dtype || pe_tensor_numel(g) != n || pe_tensor_numel(dx) != n)
        return internal_mismatch(ctx);
    int64_t pre, d, post;
    if (!split_axis(o, pe_ctx_int(ctx, "axis"), &pre, &d, &post))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis is out of range");
    if (n == 0) return PE_OK;
    if (o->dtype != PE_DTYPE_FP32 && o->dtype != PE_DTYPE_FP64) return bad_dtype(ctx, o->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, o->dtype, "Out", T, {
        const T *op = (const T *)pe_tensor_data(o), *gp = (const T *)pe_tensor_data(g);
        T *dp = (T *)pe_tensor_data(dx);
        if (post == 1 && d >= 128)
            k_softmax_grad_block<T><<<pe_cuda_red_grid(pre), PE_CUDA_THREADS, 0, s>>>(op, gp, dp, pre, d);
        else
            k_softmax_grad_col<T><<<pe_cuda_blocks(pre * post), PE_CUDA_THREADS, 0, s>>>(op, gp, dp, pre, d, post);
    });
    return pe_cuda_check_launch(ctx);
}

/* X [pre, D, post] -> Out [pre, post] int32/int64: first index of the max (NaN largest). */
pe_status pe_cuda_arg_max(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int64_t pre, d, post;
    if (pe_ctx_bool(ctx, "flatten") || x->ndim == 0) {
        pre = 1;
        d = pe_tensor_numel(x);
        post = 1;
    } else if (!split_axis(x, pe_ctx_int(ctx, "axis"), &pre, &d, &post)) {
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis is out of range");
    }
    if (out->dtype != PE_DTYPE_INT32 && out->dtype != PE_DTYPE_INT64) return internal_mismatch(ctx);
    if (pe_tensor_numel(out) != pre * post) return internal_mismatch(ctx);
    if (pre * post == 0) return PE_OK;
    if (d == 0) return pe_ctx_error(ctx, PE_ERR_INVALID, "arg_max over an empty axis");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const bool o64 = out->dtype == PE_DTYPE_INT64;
    const bool block = post == 1 && d >= 128;
    PE_CUDA_NUM_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)pe_tensor_data(x);
        void *op = pe_tensor_data(out);
        if (block && o64)
            k_argmax_block<T, int64_t><<<pe_cuda_red_grid(pre), PE_CUDA_THREADS, 0, s>>>(xp, (int64_t *)op, pre, d);
        else if (block)
            k_argmax_block<T, int32_t><<<pe_cuda_red_grid(pre), PE_CUDA_THREADS, 0, s>>>(xp, (int32_t *)op, pre, d);
        else if (o64)
            k_argmax_col<T, int64_t><<<pe_cuda_blocks(pre * post), PE_CUDA_THREADS, 0, s>>>(xp, (int64_t *)op, pre, d,
                                                                                           post);
        else
            k_argmax_col<T, int32_t><<<pe_cuda_blocks(pre * post), PE_CUDA_THREADS, 0, s>>>(xp, (int32_t *)op, pre, d,
                                                                                           post);
    });
    return pe_cuda_check_launch(ctx);
}

/* X [.., D] -> Out [.., k] (descending rank), Indices [.., k] int64. */
pe_status pe_cuda_top_k(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *vals = pe_ctx_out(ctx, "Out"), *idx = pe_ctx_out(ctx, "Indices");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (x->ndim == 0) return internal_mismatch(ctx);
    const int64_t D = x->dims[x->ndim - 1], k = pe_ctx_int(ctx, "k");
    const int64_t rows = D ? pe_tensor_numel(x) / D : 0;
    if (k < 1 || k > D || vals->dtype != x->dtype || idx->dtype != PE_DTYPE_INT64 ||
        pe_tensor_numel(vals) != rows * k || pe_tensor_numel(idx) != rows * k)
        return internal_mismatch(ctx);
    if (rows == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_NUM_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)pe_tensor_data(x);
        T *vp = (T *)pe_tensor_data(vals);
        int64_t *ip = (int64_t *)pe_tensor_data(idx);
        if (k <= 16)
            k_topk_select<T><<<pe_cuda_red_grid(rows), PE_CUDA_THREADS, 0, s>>>(xp, vp, ip, rows, D, k);
        else
            k_topk_heap<T><<<pe_cuda_blocks(rows), PE_CUDA_THREADS, 0, s>>>(xp, vp, ip, rows, D, k);
    });
    return pe_cuda_check_launch(ctx);
}

/* Indices [N, k], Label [N] -> Accuracy [1] fp32, Correct? [1], Total? [1] int32. */
pe_status pe_cuda_accuracy(const pe_op_ctx *ctx) {
    const pe_tensor *idx = pe_ctx_in(ctx, "Indices"), *lab = pe_ctx_in(ctx, "Label");
    pe_tensor *acc = pe_ctx_out(ctx, "Accuracy");
    pe_tensor *cor = pe_ctx_out(ctx, "Correct"), *tot = pe_ctx_out(ctx, "Total");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (idx->ndim != 2 || acc->dtype != PE_DTYPE_FP32) return internal_mismatch(ctx);
    const int64_t n = idx->dims[0], k = idx->dims[1];
    if (pe_tensor_numel(lab) != n) return internal_mismatch(ctx);
    if ((idx->dtype != PE_DTYPE_INT32 && idx->dtype != PE_DTYPE_INT64) ||
        (lab->dtype != PE_DTYPE_INT32 && lab->dtype != PE_DTYPE_INT64))
        return internal_mismatch(ctx);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    float *ap = (float *)pe_tensor_data(acc);
    int32_t *cp = cor ? (int32_t *)pe_tensor_data(cor) : nullptr, *tp = tot ? (int32_t *)pe_tensor_data(tot) : nullptr;
    const void *id = pe_tensor_data(idx), *ld = pe_tensor_data(lab);
    const bool i64 = idx->dtype == PE_DTYPE_INT64, l64 = lab->dtype == PE_DTYPE_INT64;
    if (i64 && l64)
        k_accuracy<<<1, PE_CUDA_THREADS, 0, s>>>((const int64_t *)id, (const int64_t *)ld, n, k, ap, cp, tp);
    else if (i64)
        k_accuracy<<<1, PE_CUDA_THREADS, 0, s>>>((const int64_t *)id, (const int32_t *)ld, n, k, ap, cp, tp);
    else if (l64)
        k_accuracy<<<1, PE_CUDA_THREADS, 0, s>>>((const int32_t *)id, (const int64_t *)ld, n, k, ap, cp, tp);
    else
        k_accuracy<<<1, PE_CUDA_THREADS, 0, s>>>((const int32_t *)id, (const int32_t *)ld, n, k, ap, cp, tp);
    return pe_cuda_check_launch(ctx);
}

pe_status pe_cuda_reduce_sum(const pe_op_ctx *ctx) { return fold_run(ctx, F_SUM); }
pe_status pe_cuda_reduce_mean(const pe_op_ctx *ctx) { return fold_run(ctx, F_MEAN); }
pe_status pe_cuda_reduce_max(const pe_op_ctx *ctx) { return fold_run(ctx, F_MAX); }
pe_status pe_cuda_reduce_min(const pe_op_ctx *ctx) { return fold_run(ctx, F_MIN); }
pe_status pe_cuda_reduce_prod(const pe_op_ctx *ctx) { return fold_run(ctx, F_PROD); }
pe_status pe_cuda_reduce_any(const pe_op_ctx *ctx) { return fold_run(ctx, F_ANY); }
pe_status pe_cuda_reduce_all(const pe_op_ctx *ctx) { return fold_run(ctx, F_ALL); }

/* X [..], Out@GRAD [kept] -> X@GRAD [X] = Out@GRAD broadcast back (times 1 / count for mean). */
pe_status pe_cuda_reduce_sum_grad(const pe_op_ctx *ctx) { return reduce_grad_run(ctx, G_SCALE, false); }
pe_status pe_cuda_reduce_mean_grad(const pe_op_ctx *ctx) { return reduce_grad_run(ctx, G_SCALE, true); }
/* X, Out, Out@GRAD -> X@GRAD = Out@GRAD where X == Out (every tie), else 0. */
pe_status pe_cuda_reduce_max_grad(const pe_op_ctx *ctx) { return reduce_grad_run(ctx, G_EQ, false); }
pe_status pe_cuda_reduce_min_grad(const pe_op_ctx *ctx) { return reduce_grad_run(ctx, G_EQ, false); }
/* X, Out, Out@GRAD -> X@GRAD = Out@GRAD * Out / X (inf / NaN at X = 0, as Paddle's). */
pe_status pe_cuda_reduce_prod_grad(const pe_op_ctx *ctx) { return reduce_grad_run(ctx, G_PROD, false); }

/* X [..], Out@GRAD [1] -> X@GRAD [X] = Out@GRAD / numel. */
pe_status pe_cuda_mean_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(g) != 1 || pe_tensor_numel(dx) != n)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
                        k_mean_grad<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
                            (const T *)pe_tensor_data(g), (T *)pe_tensor_data(dx), n));
    return pe_cuda_check_launch(ctx);
}

/* Out@GRAD [..] -> every present X@GRAD_k = Out@GRAD (a device copy unless it is the same buffer). */
pe_status pe_cuda_sum_grad(const pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    for (int k = 0; k < pe_ctx_n_out(ctx, "X@GRAD"); k++) {
        pe_tensor *dx = pe_ctx_out_at(ctx, "X@GRAD", k);
        if (!dx) continue;
        if (dx->dtype != g->dtype || pe_tensor_numel(dx) != pe_tensor_numel(g)) return internal_mismatch(ctx);
        const size_t bytes = pe_tensor_nbytes(g);
        if (bytes && pe_tensor_data(dx) != pe_tensor_data(g))
            PE_CHECK(pe_cuda_check(ctx, cudaMemcpyAsync(pe_tensor_data(dx), pe_tensor_data(g), bytes,
                                                         cudaMemcpyDeviceToDevice, s),
                                   "cudaMemcpyAsync"));
    }
    return PE_OK;
}

} // extern "C"
