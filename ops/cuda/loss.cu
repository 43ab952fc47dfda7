/* ops/cuda/loss.cu — CUDA kernels of the loss family:
 * softmax_with_cross_entropy, cross_entropy, square_error_cost, cos_sim,
 * sigmoid_cross_entropy_with_logits, label_smooth and their gradients, on
 * float32 and float64 — the attrs, formulas and edge cases of
 * ops/cpu/loss.c (its header lists the formulas).
 *
 * How: the class dim is the middle of [pre, D, post]. softmax_with_cross_
 * entropy runs a block per row when the classes are last and many (max,
 * sum of exp and the soft loss as fixed-order shared-memory trees), else a
 * thread per (pre, post) row doing the CPU's loop; the gradients, and every
 * other op, are one thread per element, with the per-row sums they need
 * (soft-label totals, cos_sim's dot products and norms, the broadcast Y's
 * gradient, sigmoid_cross_entropy's normalizer count) from the fixed-order
 * engine of ops/cuda/reduce_kernels.cuh. Sums run in double where the CPU's
 * do; a*b + c the CPU rounds twice is rounded twice here (__dmul_rn etc.).
 *
 * Hard labels are checked like the CPU's check_labels, before anything is
 * written: a kernel records the first row whose label is neither in
 * [0, D) nor ignore_index, and one 8-byte copy back (a synchronization of
 * the place's stream, the only one in this file) turns it into the same
 * error, naming the row and the value.
 *
 * Why: issue 14 — the losses close every training program; on a GPU place
 * they and their gradients must not fall back to the CPU.
 */
#include "ops/cuda/reduce_kernels.cuh"

#include <cmath>
#include <cstring>

namespace {

pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

bool is_float(pe_dtype dt) { return dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64; }

pe_status bad_dtype(const pe_op_ctx *ctx, pe_dtype dt) {
    return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(dt));
}

__device__ __forceinline__ float ex(float v) { return expf(v); }
__device__ __forceinline__ double ex(double v) { return exp(v); }

struct cmax_f {
    template <typename T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};
struct cadd_f {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};

/* ---- hard label check ----------------------------------------------------- */

/* lab [rows]: *bad = the first row whose label is outside [0, D) and not ignore. */
template <typename L>
__global__ void k_check_labels(const L *lab, int64_t rows, int64_t D, int64_t ignore, unsigned long long *bad) {
    PE_CUDA_LOOP(r, rows) {
        const int64_t l = (int64_t)lab[r];
        if (l != ignore && (l < 0 || l >= D)) atomicMin(bad, (unsigned long long)r);
    }
}

/* Every hard label is in [0, D) or ignore_index (else the CPU's error). */
pe_status check_labels(const pe_op_ctx *ctx, const pe_tensor *lab, int64_t rows, int64_t D, int64_t ignore,
                       cudaStream_t s) {
    if (lab->dtype != PE_DTYPE_INT64 && lab->dtype != PE_DTYPE_INT32) return internal_mismatch(ctx);
    if (rows == 0) return PE_OK;
    pe_cuda_temp tmp(ctx, sizeof(unsigned long long));
    if (!tmp.ok(sizeof(unsigned long long))) return PE_ERR_NOMEM;
    unsigned long long *bad = tmp.get<unsigned long long>();
    PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(bad, 0xFF, sizeof *bad, s), "cudaMemsetAsync"));
    const bool l64 = lab->dtype == PE_DTYPE_INT64;
    if (l64)
        k_check_labels<<<pe_cuda_blocks(rows), PE_CUDA_THREADS, 0, s>>>((const int64_t *)pe_tensor_data(lab), rows, D,
                                                                         ignore, bad);
    else
        k_check_labels<<<pe_cuda_blocks(rows), PE_CUDA_THREADS, 0, s>>>((const int32_t *)pe_tensor_data(lab), rows, D,
                                                                         ignore, bad);
    PE_CHECK(pe_cuda_check_launch(ctx));
    unsigned long long row = 0;
    PE_CHECK(pe_cuda_check(ctx, cudaMemcpyAsync(&row, bad, sizeof row, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync"));
    PE_CHECK(pe_cuda_check(ctx, cudaStreamSynchronize(s), "checking the labels (cudaStreamSynchronize)"));
    if (row == ~0ull) return PE_OK;
    /* the error path: read the offending value */
    unsigned char b[8] = {0};
    const size_t es = l64 ? 8 : 4;
    PE_CHECK(pe_cuda_check(ctx, cudaMemcpyAsync(b, (const char *)pe_tensor_data(lab) + (size_t)row * es, es,
                                                cudaMemcpyDeviceToHost, s),
                           "cudaMemcpyAsync"));
    PE_CHECK(pe_cuda_check(ctx, cudaStreamSynchronize(s), "cudaStreamSynchronize"));
    int64_t l = 0;
    if (l64) memcpy(&l, b, 8);
    else {
        int32_t v;
        memcpy(&v, b, 4);
        l = v;
    }
    return pe_ctx_error(ctx, PE_ERR_INVALID, "Label '%s' element %lld is %lld, outside the %lld classes [0, %lld) "
                        "and not ignore_index (%lld)", pe_ctx_in_name(ctx, "Label", 0), (long long)row, (long long)l,
                        (long long)D, (long long)D, (long long)ignore);
}

template <typename L> __device__ __forceinline__ int64_t lab_at(const L *lab, int64_t r) { return (int64_t)lab[r]; }

/* [pre, D, post] around the normalized `axis` attr of t. */
void class_view(const pe_op_ctx *ctx, const pe_tensor *t, int64_t *pre, int64_t *D, int64_t *post) {
    int64_t a = pe_ctx_int(ctx, "axis");
    if (a < 0) a += t->ndim;
    *pre = pe_dims_prod(t->dims, 0, (int)a);
    *D = t->dims[a];
    *post = pe_dims_prod(t->dims, (int)a + 1, t->ndim);
}

/* ---- softmax_with_cross_entropy ------------------------------------------- */

/* x, sm [rows, D]; loss [rows]; hard [rows] or soft [rows, D] (the other null): a block per row */
template <typename T, typename L>
__global__ void k_swce_block(const T *x, const L *hard, const T *soft, T *sm, T *loss, int64_t rows, int64_t D,
                             int64_t ignore) {
    __shared__ double sh[PE_CUDA_THREADS];
    T *shm = (T *)sh;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * D;
        T *sr = sm + r * D;
        T m = xr[0];
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) m = xr[j] > m ? xr[j] : m;
        m = pe_cuda_block_all(m, shm, cmax_f{});
        double s = 0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const T e = ex(xr[j] - m);
            sr[j] = e;
            s += e;
        }
        s = pe_cuda_block_all(s, sh, cadd_f{});
        const T inv = (T)(1.0 / s);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) sr[j] *= inv;
        const double lse = (double)m + log(s);
        if (soft) {
            const T *lr = soft + r * D;
            double acc = 0;
            for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
                acc += __dmul_rn((double)lr[j], lse - (double)xr[j]);
            acc = pe_cuda_block_all(acc, sh, cadd_f{});
            if (threadIdx.x == 0) loss[r] = (T)acc;
        } else if (threadIdx.x == 0) {
            const int64_t l = lab_at(hard, r);
            loss[r] = l == ignore ? (T)0 : (T)(lse - (double)xr[l]);
        }
    }
}

/* x, sm [pre, D, post]; loss [pre, post]: a thread per (pre, post) row, the CPU's loop */
template <typename T, typename L>
__global__ void k_swce_col(const T *x, const L *hard, const T *soft, T *sm, T *loss, int64_t pre, int64_t D,
                           int64_t post, int64_t ignore) {
    PE_CUDA_LOOP(r, pre * post) {
        const int64_t base = (r / post) * D * post + r % post;
        const T *xr = x + base;
        T *sr = sm + base;
        T m = xr[0];
        for (int64_t j = 1; j < D; j++) m = xr[j * post] > m ? xr[j * post] : m;
        double s = 0;
        for (int64_t j = 0; j < D; j++) {
            const T e = ex(xr[j * post] - m);
            sr[j * post] = e;
            s += e;
        }
        const T inv = (T)(1.0 / s);
        for (int64_t j = 0; j < D; j++) sr[j * post] *= inv;
        const double lse = (double)m + log(s);
        if (soft) {
            const T *lr = soft + base;
            double acc = 0;
            for (int64_t j = 0; j < D; j++) acc += __dmul_rn((double)lr[j * post], lse - (double)xr[j * post]);
            loss[r] = (T)acc;
        } else {
            const int64_t l = lab_at(hard, r);
            loss[r] = l == ignore ? (T)0 : (T)(lse - (double)xr[l * post]);
        }
    }
}

/* sm, dx [pre, D, post]; lab, g [pre, post]: dx = sm g - [j == label] g, 0 for ignored rows (dx may be sm) */
template <typename T, typename L>
__global__ void k_swce_grad_hard(const T *sm, const L *lab, const T *g, T *dx, int64_t n, int64_t D, int64_t post,
                                 int64_t ignore) {
    PE_CUDA_LOOP(e, n) {
        const int64_t q = e % post, pj = e / post, j = pj % D, r = (pj / D) * post + q;
        const int64_t l = lab_at(lab, r);
        if (l == ignore) {
            dx[e] = (T)0;
        } else {
            const T gr = g[r];
            T t = pe_cuda_mul_rn(sm[e], gr);
            if (j == l) t -= gr;
            dx[e] = t;
        }
    }
}

/* sm, lab, dx [pre, D, post]; g, st [pre, post]: dx = (sm st - lab) g, st = (T)sum_D lab (dx may be sm) */
template <typename T>
__global__ void k_swce_grad_soft(const T *sm, const T *lab, const T *g, const T *st, T *dx, int64_t n, int64_t D,
                                 int64_t post) {
    PE_CUDA_LOOP(e, n) {
        const int64_t q = e % post, r = (e / post / D) * post + q;
        dx[e] = (pe_cuda_mul_rn(sm[e], st[r]) - lab[e]) * g[r];
    }
}

/* st[o, i] = (T) sum_m lab[o, m, i] in double */
template <typename T> struct label_total_op {
    using acc_t = double;
    const T *lab;
    T *st;
    int64_t D, post;
    __device__ double init() const { return 0; }
    __device__ double load(int64_t o, int64_t m, int64_t i) const { return (double)lab[(o * D + m) * post + i]; }
    __device__ double comb(double a, double b) const { return a + b; }
    __device__ void store(int64_t o, int64_t i, double a) const { st[o * post + i] = (T)a; }
};

/* ---- cross_entropy: x [rows, D] probabilities ----------------------------- */

template <typename T, typename L>
__global__ void k_xent_hard(const T *x, const L *lab, T *y, int64_t rows, int64_t D, int64_t ignore) {
    PE_CUDA_LOOP(r, rows) {
        const int64_t l = lab_at(lab, r);
        y[r] = l == ignore ? (T)0 : (T)-log((double)x[r * D + l]);
    }
}

/* y[o] = -sum_j lab[o, j] log x[o, j] (double) */
template <typename T> struct xent_soft_op {
    using acc_t = double;
    const T *x, *lab;
    T *y;
    int64_t D;
    __device__ double init() const { return 0; }
    __device__ double load(int64_t o, int64_t m, int64_t) const {
        return __dmul_rn((double)lab[o * D + m], log((double)x[o * D + m]));
    }
    __device__ double comb(double a, double b) const { return a + b; }
    __device__ void store(int64_t o, int64_t, double a) const { y[o] = (T)(-a); }
};

/* x, dx [rows, D]; g [rows]: soft -g lab / x; hard -g / x at the label, else 0 */
template <typename T, typename L>
__global__ void k_xent_grad(const T *x, const L *hard, const T *soft, const T *g, T *dx, int64_t n, int64_t D,
                            int64_t ignore) {
    PE_CUDA_LOOP(e, n) {
        const int64_t r = e / D, j = e % D;
        if (soft) {
            dx[e] = -g[r] * soft[e] / x[e];
        } else {
            const int64_t l = lab_at(hard, r);
            dx[e] = l != ignore && j == l ? -g[r] / x[e] : (T)0;
        }
    }
}

/* ---- square_error_cost ------------------------------------------------------ */

template <typename T> __global__ void k_sec(const T *x, const T *y, T *out, int64_t n) {
    PE_CUDA_LOOP(i, n) {
        const T d = x[i] - y[i];
        out[i] = d * d;
    }
}

template <typename T> __global__ void k_sec_grad(const T *x, const T *y, const T *g, T *dx, T *dy, int64_t n) {
    PE_CUDA_LOOP(i, n) {
        const T d = 2 * (x[i] - y[i]) * g[i];
        if (dx) dx[i] = d;
        if (dy) dy[i] = -d;
    }
}

/* ---- cos_sim: x [n, d], y [m, d] (m = n or 1) ------------------------------ */

struct dot3 {
    double xx, yy, xy;
};

template <typename T> struct cos_sim_op {
    using acc_t = dot3;
    const T *x, *y;
    T *out, *xn, *yn;
    int64_t d;
    bool y1; /* Y is one row, broadcast */
    __device__ dot3 init() const { return dot3{0, 0, 0}; }
    __device__ dot3 load(int64_t r, int64_t j, int64_t) const {
        const double a = x[r * d + j], b = y[(y1 ? 0 : r) * d + j];
        return dot3{__dmul_rn(a, a), __dmul_rn(b, b), __dmul_rn(a, b)};
    }
    __device__ dot3 comb(dot3 p, dot3 q) const { return dot3{p.xx + q.xx, p.yy + q.yy, p.xy + q.xy}; }
    __device__ void store(int64_t r, int64_t, dot3 s) const {
        const double a = sqrt(s.xx), b = sqrt(s.yy);
        xn[r] = (T)a;
        if (!y1 || r == 0) yn[y1 ? 0 : r] = (T)b;
        out[r] = (T)(s.xy / (a * b));
    }
};

/* yn[0] = |y[0, :]| (Y one row and X empty) */
template <typename T> struct ynorm_op {
    using acc_t = double;
    const T *y;
    T *yn;
    __device__ double init() const { return 0; }
    __device__ double load(int64_t, int64_t j, int64_t) const { return __dmul_rn((double)y[j], (double)y[j]); }
    __device__ double comb(double a, double b) const { return a + b; }
    __device__ void store(int64_t, int64_t, double a) const { yn[0] = (T)sqrt(a); }
};

/* dx [n, d] (and dy [n, d] when Y is not broadcast) */
template <typename T>
__global__ void k_cos_sim_grad(const T *x, const T *y, const T *out, const T *xn, const T *yn, const T *g, T *dx,
                               T *dy, int64_t n, int64_t d, bool y1) {
    PE_CUDA_LOOP(e, n * d) {
        const int64_t r = e / d, j = e % d, yrow = y1 ? 0 : r;
        const T xv = x[e], yv = y[yrow * d + j];
        const double a = xn[r], b = yn[yrow], o = out[r], gr = g[r];
        if (dx) dx[e] = (T)(gr * (yv / (a * b) - o * xv / (a * a)));
        if (dy && !y1) dy[e] = (T)(gr * (xv / (a * b) - o * yv / (b * b)));
    }
}

/* dy[j] = sum_r g[r] (x[r, j] / (xn[r] yn) - out[r] y[j] / yn^2) (Y broadcast: one row) */
template <typename T> struct cos_sim_dy1_op {
    using acc_t = double;
    const T *x, *y, *out, *xn, *yn, *g;
    T *dy;
    int64_t d;
    __device__ double init() const { return 0; }
    __device__ double load(int64_t, int64_t r, int64_t j) const {
        const double a = xn[r], b = yn[0];
        return __dmul_rn((double)g[r], x[r * d + j] / (a * b) - (double)out[r] * y[j] / (b * b));
    }
    __device__ double comb(double a, double b) const { return a + b; }
    __device__ void store(int64_t, int64_t j, double a) const { dy[j] = (T)a; }
};

/* ---- sigmoid_cross_entropy_with_logits -------------------------------------- */

/* *cnt = number of elements with (int64)label != ignore */
template <typename T> struct count_op {
    using acc_t = unsigned long long;
    const T *l;
    int64_t ignore;
    long long *cnt;
    __device__ acc_t init() const { return 0; }
    __device__ acc_t load(int64_t, int64_t i, int64_t) const { return (int64_t)l[i] != ignore ? 1ull : 0ull; }
    __device__ acc_t comb(acc_t a, acc_t b) const { return a + b; }
    __device__ void store(int64_t, int64_t, acc_t a) const { *cnt = (long long)a; }
};

/* 1 / max(count, 1e-5) with normalize, else 1 */
__device__ __forceinline__ double sigce_inv(const long long *cnt) {
    if (!cnt) return 1.0;
    return 1.0 / (*cnt > 0 ? (double)*cnt : 1e-5);
}

template <typename T>
__global__ void k_sigce(const T *x, const T *l, T *out, int64_t n, int64_t ignore, const long long *cnt) {
    const double inv = sigce_inv(cnt);
    PE_CUDA_LOOP(i, n) {
        const double v = x[i], lv = l[i];
        out[i] = (int64_t)l[i] == ignore ? (T)0
                                         : (T)(((v > 0 ? v : 0) - __dmul_rn(v, lv) + log1p(exp(-fabs(v)))) * inv);
    }
}

/* dx may be g */
template <typename T>
__global__ void k_sigce_grad(const T *x, const T *l, const T *g, T *dx, int64_t n, int64_t ignore,
                             const long long *cnt) {
    const double inv = sigce_inv(cnt);
    PE_CUDA_LOOP(i, n) {
        const double sg = 1.0 / (1.0 + exp(-(double)x[i]));
        dx[i] = (int64_t)l[i] == ignore ? (T)0 : (T)((sg - (double)l[i]) * (double)g[i] * inv);
    }
}

/* X, Label [n] (+ Out@GRAD) -> Out / X@GRAD; the normalizer counted on the device first. */
template <bool Grad> pe_status sigce_run(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *lab = pe_ctx_in(ctx, "Label");
    const pe_tensor *g = Grad ? pe_ctx_in(ctx, "Out@GRAD") : nullptr;
    pe_tensor *out = pe_ctx_out(ctx, Grad ? "X@GRAD" : "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x), ignore = pe_ctx_int(ctx, "ignore_index");
    const bool norm = pe_ctx_bool(ctx, "normalize");
    if (lab->dtype != x->dtype || out->dtype != x->dtype || pe_tensor_numel(lab) != n || pe_tensor_numel(out) != n ||
        (g && (g->dtype != x->dtype || pe_tensor_numel(g) != n)))
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const size_t cb = norm ? sizeof(long long) : 0;
    pe_cuda_temp tmp(ctx, cb);
    if (!tmp.ok(cb)) return PE_ERR_NOMEM;
    long long *cnt = norm ? tmp.get<long long>() : nullptr;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)pe_tensor_data(x), *lp = (const T *)pe_tensor_data(lab);
        if (norm) PE_CHECK(pe_cuda_red_run(ctx, count_op<T>{lp, ignore, cnt}, 1, n, 1, s));
        if (Grad)
            k_sigce_grad<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
                xp, lp, (const T *)pe_tensor_data(g), (T *)pe_tensor_data(out), n, ignore, cnt);
        else
            k_sigce<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(xp, lp, (T *)pe_tensor_data(out), n, ignore, cnt);
    });
    return pe_cuda_check_launch(ctx);
}

/* ---- label_smooth ----------------------------------------------------------- */

template <typename T> __global__ void k_lsmooth(const T *x, const T *p, T *out, int64_t n, int64_t d, double eps) {
    PE_CUDA_LOOP(i, n) {
        const double prior = p ? (double)p[i % d] : 1.0 / (double)d;
        out[i] = (T)__dadd_rn(__dmul_rn(1.0 - eps, (double)x[i]), __dmul_rn(eps, prior));
    }
}

template <typename T> __global__ void k_lsmooth_grad(const T *g, T *dx, int64_t n, double eps) {
    PE_CUDA_LOOP(i, n) dx[i] = (T)((1.0 - eps) * (double)g[i]);
}

} // namespace

extern "C" {

/* Logits [pre, D, post], Label (hard [pre, post] int, or soft [pre, D, post])
 * -> Softmax [pre, D, post], Loss [pre, 1, post] */
pe_status pe_cuda_softmax_with_cross_entropy(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Logits"), *lab = pe_ctx_in(ctx, "Label");
    pe_tensor *sm = pe_ctx_out(ctx, "Softmax"), *loss = pe_ctx_out(ctx, "Loss");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int64_t pre, D, post;
    class_view(ctx, x, &pre, &D, &post);
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    const int64_t ignore = pe_ctx_int(ctx, "ignore_index");
    if (sm->dtype != x->dtype || loss->dtype != x->dtype || pe_tensor_numel(sm) != pe_tensor_numel(x) ||
        pe_tensor_numel(loss) != pre * post || pe_tensor_numel(lab) != (soft ? pre * D * post : pre * post) ||
        (soft && lab->dtype != x->dtype))
        return internal_mismatch(ctx);
    if (pre * post == 0) return PE_OK;
    if (D == 0) return pe_ctx_error(ctx, PE_ERR_INVALID, "Logits '%s' has no classes (dim %lld is 0)",
                                    pe_ctx_in_name(ctx, "Logits", 0), (long long)pe_ctx_int(ctx, "axis"));
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (!soft) PE_CHECK(check_labels(ctx, lab, pre * post, D, ignore, s));
    const bool block = post == 1 && D >= 128;
    const bool l64 = lab->dtype == PE_DTYPE_INT64;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Logits", T, {
        const T *xp = (const T *)pe_tensor_data(x);
        const T *sl = soft ? (const T *)pe_tensor_data(lab) : nullptr;
        T *sp = (T *)pe_tensor_data(sm), *lp = (T *)pe_tensor_data(loss);
        const void *hl = soft ? nullptr : pe_tensor_data(lab);
        if (block && (soft || l64))
            k_swce_block<T, int64_t><<<pe_cuda_red_grid(pre), PE_CUDA_THREADS, 0, s>>>(xp, (const int64_t *)hl, sl, sp,
                                                                                      lp, pre, D, ignore);
        else if (block)
            k_swce_block<T, int32_t><<<pe_cuda_red_grid(pre), PE_CUDA_THREADS, 0, s>>>(xp, (const int32_t *)hl, sl, sp,
                                                                                      lp, pre, D, ignore);
        else if (soft || l64)
            k_swce_col<T, int64_t><<<pe_cuda_blocks(pre * post), PE_CUDA_THREADS, 0, s>>>(
                xp, (const int64_t *)hl, sl, sp, lp, pre, D, post, ignore);
        else
            k_swce_col<T, int32_t><<<pe_cuda_blocks(pre * post), PE_CUDA_THREADS, 0, s>>>(
                xp, (const int32_t *)hl, sl, sp, lp, pre, D, post, ignore);
    });
    return pe_cuda_check_launch(ctx);
}

/* Label, Softmax [pre, D, post], Loss@GRAD [pre, post] -> Logits@GRAD [pre, D, post] */
pe_status pe_cuda_softmax_with_cross_entropy_grad(const pe_op_ctx *ctx) {
    const pe_tensor *sm = pe_ctx_in(ctx, "Softmax"), *lab = pe_ctx_in(ctx, "Label"), *g = pe_ctx_in(ctx, "Loss@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Logits@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    int64_t pre, D, post;
    class_view(ctx, sm, &pre, &D, &post);
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    const int64_t ignore = pe_ctx_int(ctx, "ignore_index");
    if (g->dtype != sm->dtype || dx->dtype != sm->dtype || pe_tensor_numel(dx) != pe_tensor_numel(sm) ||
        pe_tensor_numel(g) != pre * post || pe_tensor_numel(lab) != (soft ? pre * D * post : pre * post) ||
        (soft && lab->dtype != sm->dtype))
        return internal_mismatch(ctx);
    const int64_t n = pre * post * D;
    if (n == 0) return PE_OK;
    if (!is_float(sm->dtype)) return bad_dtype(ctx, sm->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (!soft) PE_CHECK(check_labels(ctx, lab, pre * post, D, ignore, s));
    const size_t tb = soft ? (size_t)(pre * post) * pe_dtype_size(sm->dtype) : 0;
    pe_cuda_temp tmp(ctx, tb);
    if (!tmp.ok(tb)) return PE_ERR_NOMEM;
    PE_CUDA_FLOAT_TYPES(ctx, sm->dtype, "Softmax", T, {
        const T *sp = (const T *)pe_tensor_data(sm), *gp = (const T *)pe_tensor_data(g);
        T *dp = (T *)pe_tensor_data(dx);
        const unsigned nb = pe_cuda_blocks(n);
        if (soft) {
            const T *lp = (const T *)pe_tensor_data(lab);
            T *st = tmp.get<T>();
            PE_CHECK(pe_cuda_red_run(ctx, label_total_op<T>{lp, st, D, post}, pre, D, post, s));
            k_swce_grad_soft<T><<<nb, PE_CUDA_THREADS, 0, s>>>(sp, lp, gp, st, dp, n, D, post);
        } else if (lab->dtype == PE_DTYPE_INT64) {
            k_swce_grad_hard<T, int64_t><<<nb, PE_CUDA_THREADS, 0, s>>>(sp, (const int64_t *)pe_tensor_data(lab), gp,
                                                                        dp, n, D, post, ignore);
        } else {
            k_swce_grad_hard<T, int32_t><<<nb, PE_CUDA_THREADS, 0, s>>>(sp, (const int32_t *)pe_tensor_data(lab), gp,
                                                                        dp, n, D, post, ignore);
        }
    });
    return pe_cuda_check_launch(ctx);
}

/* X [.., D] probabilities, Label -> Y [.., 1] */
pe_status pe_cuda_cross_entropy(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *lab = pe_ctx_in(ctx, "Label");
    pe_tensor *y = pe_ctx_out(ctx, "Y");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t D = x->ndim ? x->dims[x->ndim - 1] : 0, n = pe_tensor_numel(x);
    const int64_t rows = D ? n / D : pe_tensor_numel(y);
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    const int64_t ignore = pe_ctx_int(ctx, "ignore_index");
    if (y->dtype != x->dtype || pe_tensor_numel(y) != rows || pe_tensor_numel(lab) != (soft ? n : rows) ||
        (soft && lab->dtype != x->dtype))
        return internal_mismatch(ctx);
    if (rows == 0) return PE_OK;
    if (D == 0) return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has no classes (its last dim is 0)",
                                    pe_ctx_in_name(ctx, "X", 0));
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (!soft) PE_CHECK(check_labels(ctx, lab, rows, D, ignore, s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)pe_tensor_data(x);
        T *yp = (T *)pe_tensor_data(y);
        if (soft)
            PE_CHECK(pe_cuda_red_run(ctx, xent_soft_op<T>{xp, (const T *)pe_tensor_data(lab), yp, D}, rows, D, 1, s));
        else if (lab->dtype == PE_DTYPE_INT64)
            k_xent_hard<T, int64_t><<<pe_cuda_blocks(rows), PE_CUDA_THREADS, 0, s>>>(
                xp, (const int64_t *)pe_tensor_data(lab), yp, rows, D, ignore);
        else
            k_xent_hard<T, int32_t><<<pe_cuda_blocks(rows), PE_CUDA_THREADS, 0, s>>>(
                xp, (const int32_t *)pe_tensor_data(lab), yp, rows, D, ignore);
    });
    return pe_cuda_check_launch(ctx);
}

/* X [.., D], Label, Y@GRAD [.., 1] -> X@GRAD [.., D] */
pe_status pe_cuda_cross_entropy_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *lab = pe_ctx_in(ctx, "Label"), *g = pe_ctx_in(ctx, "Y@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t D = x->ndim ? x->dims[x->ndim - 1] : 0, n = pe_tensor_numel(x);
    const int64_t rows = D ? n / D : 0;
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    const int64_t ignore = pe_ctx_int(ctx, "ignore_index");
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(dx) != n || (D && pe_tensor_numel(g) != rows) ||
        (D && pe_tensor_numel(lab) != (soft ? n : rows)) || (soft && lab->dtype != x->dtype))
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (!soft) PE_CHECK(check_labels(ctx, lab, rows, D, ignore, s));
    const bool l64 = lab->dtype == PE_DTYPE_INT64;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)pe_tensor_data(x), *gp = (const T *)pe_tensor_data(g);
        const T *sl = soft ? (const T *)pe_tensor_data(lab) : nullptr;
        const void *hl = soft ? nullptr : pe_tensor_data(lab);
        T *dp = (T *)pe_tensor_data(dx);
        if (soft || l64)
            k_xent_grad<T, int64_t><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(xp, (const int64_t *)hl, sl, gp, dp,
                                                                                   n, D, ignore);
        else
            k_xent_grad<T, int32_t><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(xp, (const int32_t *)hl, sl, gp, dp,
                                                                                   n, D, ignore);
    });
    return pe_cuda_check_launch(ctx);
}

/* X, Y [..] -> Out = (X - Y)^2 */
pe_status pe_cuda_square_error_cost(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (y->dtype != x->dtype || out->dtype != x->dtype || pe_tensor_numel(y) != n || pe_tensor_numel(out) != n)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
                        k_sec<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
                            (const T *)pe_tensor_data(x), (const T *)pe_tensor_data(y), (T *)pe_tensor_data(out), n));
    return pe_cuda_check_launch(ctx);
}

/* X, Y, Out@GRAD [..] -> X@GRAD? = 2 (X - Y) Out@GRAD, Y@GRAD? = -X@GRAD */
pe_status pe_cuda_square_error_cost_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x);
    if (y->dtype != x->dtype || g->dtype != x->dtype || pe_tensor_numel(y) != n || pe_tensor_numel(g) != n ||
        (dx && (dx->dtype != x->dtype || pe_tensor_numel(dx) != n)) ||
        (dy && (dy->dtype != x->dtype || pe_tensor_numel(dy) != n)))
        return internal_mismatch(ctx);
    if (n == 0 || (!dx && !dy)) return PE_OK;
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
                        k_sec_grad<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
                            (const T *)pe_tensor_data(x), (const T *)pe_tensor_data(y), (const T *)pe_tensor_data(g),
                            dx ? (T *)pe_tensor_data(dx) : nullptr, dy ? (T *)pe_tensor_data(dy) : nullptr, n));
    return pe_cuda_check_launch(ctx);
}

/* X [N, ..], Y [M, ..] (M = N or 1) -> Out [N, 1], XNorm [N, 1], YNorm [M, 1] */
pe_status pe_cuda_cos_sim(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *xn = pe_ctx_out(ctx, "XNorm"), *yn = pe_ctx_out(ctx, "YNorm");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (x->ndim < 1 || y->ndim < 1) return internal_mismatch(ctx);
    const int64_t n = x->dims[0], m = y->dims[0], d = pe_dims_prod(x->dims, 1, x->ndim);
    if (y->dtype != x->dtype || out->dtype != x->dtype || pe_tensor_numel(out) != n || pe_tensor_numel(xn) != n ||
        pe_tensor_numel(yn) != m || pe_tensor_numel(y) != m * d)
        return internal_mismatch(ctx);
    if (n == 0 && m == 0) return PE_OK;
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)pe_tensor_data(x), *yp = (const T *)pe_tensor_data(y);
        T *ynp = (T *)pe_tensor_data(yn);
        if (n > 0)
            PE_CHECK(pe_cuda_red_run(ctx,
                                     cos_sim_op<T>{xp, yp, (T *)pe_tensor_data(out), (T *)pe_tensor_data(xn), ynp, d,
                                                   m == 1},
                                     n, d, 1, s));
        else if (m == 1)
            PE_CHECK(pe_cuda_red_run(ctx, ynorm_op<T>{yp, ynp}, 1, d, 1, s));
    });
    return pe_cuda_check_launch(ctx);
}

/* X, Y, Out, XNorm, YNorm, Out@GRAD -> X@GRAD?, Y@GRAD? */
pe_status pe_cuda_cos_sim_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *out = pe_ctx_in(ctx, "Out");
    const pe_tensor *xn = pe_ctx_in(ctx, "XNorm"), *yn = pe_ctx_in(ctx, "YNorm"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    if (x->ndim < 1 || y->ndim < 1) return internal_mismatch(ctx);
    const int64_t n = x->dims[0], m = y->dims[0], d = pe_dims_prod(x->dims, 1, x->ndim);
    if (g->dtype != x->dtype || pe_tensor_numel(g) != n || pe_tensor_numel(out) != n || pe_tensor_numel(xn) != n ||
        pe_tensor_numel(yn) != m || (dx && (dx->dtype != x->dtype || pe_tensor_numel(dx) != n * d)) ||
        (dy && (dy->dtype != x->dtype || pe_tensor_numel(dy) != m * d)))
        return internal_mismatch(ctx);
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    if (!dx && !dy) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (n * d == 0) { /* the CPU zeroes Y@GRAD first */
        if (dy && pe_tensor_nbytes(dy))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dy), 0, pe_tensor_nbytes(dy), s),
                                   "cudaMemsetAsync"));
        return PE_OK;
    }
    const bool y1 = m == 1;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        const T *xp = (const T *)pe_tensor_data(x), *yp = (const T *)pe_tensor_data(y);
        const T *op = (const T *)pe_tensor_data(out), *xnp = (const T *)pe_tensor_data(xn);
        const T *ynp = (const T *)pe_tensor_data(yn), *gp = (const T *)pe_tensor_data(g);
        T *dxp = dx ? (T *)pe_tensor_data(dx) : nullptr, *dyp = dy ? (T *)pe_tensor_data(dy) : nullptr;
        if (dxp || (dyp && !y1))
            k_cos_sim_grad<T><<<pe_cuda_blocks(n * d), PE_CUDA_THREADS, 0, s>>>(xp, yp, op, xnp, ynp, gp, dxp, dyp, n,
                                                                                d, y1);
        if (dyp && y1)
            PE_CHECK(pe_cuda_red_run(ctx, cos_sim_dy1_op<T>{xp, yp, op, xnp, ynp, gp, dyp, d}, 1, n, d, s));
    });
    return pe_cuda_check_launch(ctx);
}

/* X, Label [..] -> Out [..] */
pe_status pe_cuda_sigmoid_cross_entropy_with_logits(const pe_op_ctx *ctx) { return sigce_run<false>(ctx); }
/* X, Label, Out@GRAD [..] -> X@GRAD [..] (may be Out@GRAD) */
pe_status pe_cuda_sigmoid_cross_entropy_with_logits_grad(const pe_op_ctx *ctx) { return sigce_run<true>(ctx); }

/* X [.., D], PriorDist? [D] -> Out = (1 - eps) X + eps PriorDist (eps / D without it) */
pe_status pe_cuda_label_smooth(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *p = pe_ctx_in(ctx, "PriorDist");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(x), d = x->ndim ? x->dims[x->ndim - 1] : 1;
    const double eps = pe_ctx_float(ctx, "epsilon");
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n || (p && (p->dtype != x->dtype || pe_tensor_numel(p) != d)))
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    if (!is_float(x->dtype)) return bad_dtype(ctx, x->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
                        k_lsmooth<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
                            (const T *)pe_tensor_data(x), p ? (const T *)pe_tensor_data(p) : nullptr,
                            (T *)pe_tensor_data(out), n, d, eps));
    return pe_cuda_check_launch(ctx);
}

/* Out@GRAD [..] -> X@GRAD = (1 - eps) Out@GRAD (may be Out@GRAD) */
pe_status pe_cuda_label_smooth_grad(const pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int64_t n = pe_tensor_numel(g);
    if (dx->dtype != g->dtype || pe_tensor_numel(dx) != n) return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    if (!is_float(g->dtype)) return bad_dtype(ctx, g->dtype);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const double eps = pe_ctx_float(ctx, "epsilon");
    PE_CUDA_FLOAT_TYPES(ctx, g->dtype, "Out@GRAD", T,
                        k_lsmooth_grad<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(
                            (const T *)pe_tensor_data(g), (T *)pe_tensor_data(dx), n, eps));
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
