/* ops/cuda/interp.cu — CUDA kernels of nearest_interp_v2,
 * bilinear_interp_v2 and their grads, float32 and float64 (NCHW), with the
 * CPU kernels' formulas (ops/cpu/interp.c, Paddle's interpolate_v2):
 * the ratio in the tensor's dtype (computed on the host exactly as on CPU),
 * the source taps (i0, i1, w0, w1) per output index, the value as the same
 * double expression, each product and sum rounded on its own
 * (__dmul_rn / __dadd_rn: nvcc would contract into FMAs and differ from
 * the CPU in the last bit). Nearest runs the same expression with w1 = 0,
 * as the CPU does.
 *
 * How: the forward is one thread per Out element. The grads are inverted:
 * the taps of every output row / column go to a small table, and for each X
 * index the range of output indices whose taps can reach it (taps are
 * monotone in the output index: a binary search); one thread per X@GRAD
 * element then sums, from 0 and in the dtype, the contributions
 * (T)(dy * wy * wx) in the CPU's order — output row, output column, then the
 * taps 00, 01, 10, 11. No atomics: a run repeats bit for bit and equals the
 * CPU.
 *
 * Why: up-sampling heads (FPN, segmentation) need the GPU place with
 * deterministic gradients.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/interp.h"

namespace {

/* One dim's source taps of an output index: x[i0] * w0 + x[i1] * w1 (nearest: w1 = 0). */
struct tap {
    int64_t i0, i1;
    double w0, w1;
};

/* The CPU's ratio_f32 / ratio_f64 (host). */
template <typename T> T ratio(int64_t in, int64_t out, double scale, bool align_corners) {
    if (out <= 1) return (T)0;
    if (align_corners) return (T)(in - 1) / (T)(out - 1);
    return scale > 0 ? (T)(1.0 / scale) : (T)in / (T)out;
}

/* The CPU's tap_f32 / tap_f64: output index k of a dim of `in` source elements. */
template <typename T> __device__ tap make_tap(const pe_interp_geom &g, T r, int64_t k, int64_t in) {
    tap t = {0, 0, 1.0, 0.0};
    if (!g.bilinear) {
        const T rk = r * (T)k;
        int64_t i = g.align_corners ? (int64_t)((double)rk + 0.5) : (int64_t)rk;
        t.i0 = t.i1 = i < in - 1 ? i : in - 1;
        return t;
    }
    const bool half = g.align_mode == 0 && !g.align_corners;
    double s = half ? __dadd_rn(__dmul_rn((double)r, (double)k + 0.5), -0.5) : (double)(r * (T)k);
    int64_t i0 = (int64_t)s;
    if (i0 < 0) i0 = 0;
    if (half && s < 0) s = 0;
    if (i0 > in - 1) i0 = in - 1;
    t.i0 = i0;
    t.i1 = i0 + 1 < in - 1 ? i0 + 1 : in - 1;
    t.w1 = s - (double)i0;
    t.w0 = 1.0 - t.w1;
    return t;
}

/* x: [N, C, H, W] -> y: [N, C, oh, ow] */
template <typename T>
__global__ void k_interp(pe_interp_geom g, T rh, T rw, const T *x, T *y, int64_t total) {
    PE_CUDA_LOOP(e, total) {
        const int64_t ox = e % g.ow, oy = (e / g.ow) % g.oh, nc = e / (g.ow * g.oh);
        const tap ty = make_tap<T>(g, rh, oy, g.h), tx = make_tap<T>(g, rw, ox, g.w);
        const T *xp = x + nc * g.h * g.w;
        const double x00 = xp[ty.i0 * g.w + tx.i0], x01 = xp[ty.i0 * g.w + tx.i1];
        const double x10 = xp[ty.i1 * g.w + tx.i0], x11 = xp[ty.i1 * g.w + tx.i1];
        const double a = __dadd_rn(__dmul_rn(tx.w0, x00), __dmul_rn(tx.w1, x01));
        const double b = __dadd_rn(__dmul_rn(tx.w0, x10), __dmul_rn(tx.w1, x11));
        y[e] = (T)__dadd_rn(__dmul_rn(ty.w0, a), __dmul_rn(ty.w1, b));
    }
}

/* -> taps: [oh + ow], the rows' taps then the columns' */
template <typename T>
__global__ void k_taps(pe_interp_geom g, T rh, T rw, tap *taps) {
    PE_CUDA_LOOP(k, g.oh + g.ow) {
        taps[k] = k < g.oh ? make_tap<T>(g, rh, k, g.h) : make_tap<T>(g, rw, k - g.oh, g.w);
    }
}

/* taps: [out] of one dim -> range: [in][2], for source index i the output
 * indices [lo, hi) whose i0 lies in [i - 1, i] (i0 is non-decreasing in the
 * output index; i1 = min(i0 + 1, in - 1) reaches i only from there). */
__global__ void k_ranges(const tap *taps, int64_t out, int64_t in, int64_t *range) {
    PE_CUDA_LOOP(i, in) {
        int64_t lo = 0, hi = out;
        while (lo < hi) { /* first k with i0 >= i - 1 */
            const int64_t m = lo + (hi - lo) / 2;
            if (taps[m].i0 < i - 1) lo = m + 1;
            else hi = m;
        }
        range[2 * i] = lo;
        hi = out;
        while (lo < hi) { /* first k with i0 > i */
            const int64_t m = lo + (hi - lo) / 2;
            if (taps[m].i0 <= i) lo = m + 1;
            else hi = m;
        }
        range[2 * i + 1] = lo;
    }
}

/* Which taps of t reach source index i: bit 0 i0, bit 1 i1 (bilinear only). */
__device__ inline int reach(const tap &t, int64_t i, bool bilinear) {
    return (t.i0 == i ? 1 : 0) | (bilinear && t.i1 == i ? 2 : 0);
}

/* dy: [N, C, oh, ow]; taps: [oh + ow]; ry: [H][2], rx: [W][2] -> dx: [N, C, H, W] */
template <typename T>
__global__ void k_interp_grad(pe_interp_geom g, const tap *taps, const int64_t *ry, const int64_t *rx, const T *dy,
                              T *dx, int64_t total) {
    const tap *ty_all = taps, *tx_all = taps + g.oh;
    PE_CUDA_LOOP(e, total) {
        const int64_t ix = e % g.w, iy = (e / g.w) % g.h, nc = e / (g.w * g.h);
        const T *yp = dy + nc * g.oh * g.ow;
        T acc = 0;
        for (int64_t oy = ry[2 * iy]; oy < ry[2 * iy + 1]; oy++) {
            const tap ty = ty_all[oy];
            const int my = reach(ty, iy, g.bilinear);
            if (!my) continue;
            for (int64_t ox = rx[2 * ix]; ox < rx[2 * ix + 1]; ox++) {
                const tap tx = tx_all[ox];
                const int mx = reach(tx, ix, g.bilinear);
                if (!mx) continue;
                const double d = yp[oy * g.ow + ox];
                if (!g.bilinear) {
                    acc += (T)d;
                    continue;
                }
                const double wy[2] = {ty.w0, ty.w1}, wx[2] = {tx.w0, tx.w1};
                for (int sy = 0; sy < 2; sy++) {
                    if (!(my >> sy & 1)) continue;
                    for (int sx = 0; sx < 2; sx++)
                        if (mx >> sx & 1) acc += (T)(__dmul_rn(__dmul_rn(d, wy[sy]), wx[sx]));
                }
            }
        }
        dx[e] = acc;
    }
}

template <typename T>
pe_status interp_grad(const pe_op_ctx *ctx, const pe_interp_geom &g, const T *dy, T *dx, int64_t total,
                      cudaStream_t s) {
    const T rh = ratio<T>(g.h, g.oh, g.scale_h, g.align_corners);
    const T rw = ratio<T>(g.w, g.ow, g.scale_w, g.align_corners);
    const size_t tb = (size_t)(g.oh + g.ow) * sizeof(tap), rb = (size_t)(g.h + g.w) * 2 * sizeof(int64_t);
    pe_cuda_temp tmp(ctx, tb + rb);
    if (!tmp.ok(tb + rb)) return PE_ERR_NOMEM;
    tap *taps = tmp.get<tap>();
    int64_t *ry = (int64_t *)(tmp.get<char>() + tb), *rx = ry + 2 * g.h;
    k_taps<T><<<pe_cuda_blocks(g.oh + g.ow), PE_CUDA_THREADS, 0, s>>>(g, rh, rw, taps);
    k_ranges<<<pe_cuda_blocks(g.h), PE_CUDA_THREADS, 0, s>>>(taps, g.oh, g.h, ry);
    k_ranges<<<pe_cuda_blocks(g.w), PE_CUDA_THREADS, 0, s>>>(taps + g.oh, g.ow, g.w, rx);
    k_interp_grad<T><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(g, taps, ry, rx, dy, dx, total);
    return pe_cuda_check_launch(ctx);
}

} // namespace

extern "C" {

/* X: [N, C, H, W] -> Out: [N, C, oh, ow] (nearest_interp_v2, bilinear_interp_v2) */
pe_status pe_cuda_interp(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *y = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_interp_geom g;
    PE_CHECK(pe_interp_geom_get(ctx, x->ndim, x->dims, &g));
    const int64_t total = pe_tensor_numel(y);
    if (total == 0) return PE_OK;
    if (y->dtype != x->dtype || total != g.n * g.c * g.oh * g.ow)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_interp<T><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(
            g, ratio<T>(g.h, g.oh, g.scale_h, g.align_corners), ratio<T>(g.w, g.ow, g.scale_w, g.align_corners),
            (const T *)pe_tensor_data(x), (T *)pe_tensor_data(y), total));
    return pe_cuda_check_launch(ctx);
}

/* X (dims only): [N, C, H, W], Out@GRAD: [N, C, oh, ow] -> X@GRAD: [N, C, H, W] */
pe_status pe_cuda_interp_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *dy = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_interp_geom g;
    PE_CHECK(pe_interp_geom_get(ctx, x->ndim, x->dims, &g));
    if (!dx || pe_tensor_numel(dx) == 0) return PE_OK;
    const int64_t total = pe_tensor_numel(dx);
    if (dx->dtype != x->dtype || dy->dtype != x->dtype || total != g.n * g.c * g.h * g.w ||
        pe_tensor_numel(dy) != g.n * g.c * g.oh * g.ow)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        PE_CHECK(interp_grad<T>(ctx, g, (const T *)pe_tensor_data(dy), (T *)pe_tensor_data(dx), total, s)));
    return PE_OK;
}

} // extern "C"
