/* ops/cpu/interp.c — CPU kernels of nearest_interp_v2, bilinear_interp_v2
 * and their grads, float32 and float64 (NCHW).
 *
 * Paddle's formulas (interpolate_v2_op.h). Per spatial dim, with in / out
 * its sizes: ratio = 0 when out == 1, else (in - 1) / (out - 1) with
 * align_corners, else 1 / scale when attr scale is given, else in / out;
 * the ratio is computed in the tensor's dtype (Paddle: always float).
 *   nearest:  src = (int)(ratio * k + 0.5) with align_corners, else
 *             (int)(ratio * k) (floor: PyTorch's legacy "nearest");
 *   bilinear: half-pixel (align_mode 0 without align_corners, PyTorch's
 *             align_corners=False): s = max(ratio * (k + 0.5) - 0.5, 0),
 *             else s = ratio * k; i0 = (int)s, i1 = min(i0 + 1, in - 1),
 *             weights 1 - (s - i0) and s - i0.
 * The grads zero X@GRAD and add each Out@GRAD element to the X elements it
 * was read from with the same weights; every (n, c) plane belongs to one
 * thread, so sums do not depend on the thread count.
 */
#include "ops/cpu/par.h"
#include "ops/interp.h"

#include <string.h>

/* One dim's source taps of output index k: x[i0] * w0 + x[i1] * w1 (nearest: w1 = 0). */
typedef struct tap { int64_t i0, i1; double w0, w1; } tap;

#define PE_INTERP_LOOPS(T, SUF)                                                                               \
    static T ratio_##SUF(int64_t in, int64_t out, double scale, bool align_corners) {                        \
        if (out <= 1) return (T)0;                                                                           \
        if (align_corners) return (T)(in - 1) / (T)(out - 1);                                                \
        return scale > 0 ? (T)(1.0 / scale) : (T)in / (T)out;                                                \
    }                                                                                                        \
                                                                                                             \
    static tap tap_##SUF(const pe_interp_geom *g, T r, int64_t k, int64_t in) {                              \
        tap t = {0, 0, 1.0, 0.0};                                                                            \
        if (!g->bilinear) {                                                                                  \
            const T rk = r * (T)k;                                                                           \
            int64_t i = g->align_corners ? (int64_t)((double)rk + 0.5) : (int64_t)rk;                        \
            t.i0 = t.i1 = i < in - 1 ? i : in - 1;                                                           \
            return t;                                                                                        \
        }                                                                                                    \
        const bool half = g->align_mode == 0 && !g->align_corners;                                          \
        double s = half ? (double)r * ((double)k + 0.5) - 0.5 : (double)(r * (T)k);                          \
        int64_t i0 = (int64_t)s;                                                                             \
        if (i0 < 0) i0 = 0;                                                                                  \
        if (half && s < 0) s = 0;                                                                            \
        if (i0 > in - 1) i0 = in - 1;                                                                        \
        t.i0 = i0;                                                                                           \
        t.i1 = i0 + 1 < in - 1 ? i0 + 1 : in - 1;                                                            \
        t.w1 = s - (double)i0;                                                                               \
        t.w0 = 1.0 - t.w1;                                                                                   \
        return t;                                                                                            \
    }                                                                                                        \
                                                                                                             \
    /* x: [N, C, H, W] -> y: [N, C, oh, ow] */                                                               \
    static void interp_fwd_##SUF(const pe_interp_geom *g, const T *x, T *y, int nt) {                        \
        const T rh = ratio_##SUF(g->h, g->oh, g->scale_h, g->align_corners);                                 \
        const T rw = ratio_##SUF(g->w, g->ow, g->scale_w, g->align_corners);                                 \
        PE_PAR_FOR(g->n * g->c * g->oh * g->ow >= PE_PAR_MIN && nt > 1, nc, g->n * g->c, {                   \
            const T *xp = x + nc * g->h * g->w;                                                              \
            T *yp = y + nc * g->oh * g->ow;                                                                  \
            for (int64_t oy = 0; oy < g->oh; oy++) {                                                         \
                const tap ty = tap_##SUF(g, rh, oy, g->h);                                                   \
                for (int64_t ox = 0; ox < g->ow; ox++) {                                                     \
                    const tap tx = tap_##SUF(g, rw, ox, g->w);                                               \
                    const double v = ty.w0 * (tx.w0 * xp[ty.i0 * g->w + tx.i0] + tx.w1 * xp[ty.i0 * g->w + tx.i1]) + \
                                     ty.w1 * (tx.w0 * xp[ty.i1 * g->w + tx.i0] + tx.w1 * xp[ty.i1 * g->w + tx.i1]); \
                    yp[oy * g->ow + ox] = (T)v;                                                              \
                }                                                                                            \
            }                                                                                                \
        });                                                                                                  \
    }                                                                                                        \
                                                                                                             \
    /* dy: [N, C, oh, ow] -> dx: [N, C, H, W] */                                                             \
    static void interp_bwd_##SUF(const pe_interp_geom *g, const T *dy, T *dx, int nt) {                      \
        const T rh = ratio_##SUF(g->h, g->oh, g->scale_h, g->align_corners);                                 \
        const T rw = ratio_##SUF(g->w, g->ow, g->scale_w, g->align_corners);                                 \
        PE_PAR_FOR(g->n * g->c * g->oh * g->ow >= PE_PAR_MIN && nt > 1, nc, g->n * g->c, {                   \
            T *xp = dx + nc * g->h * g->w;                                                                   \
            const T *yp = dy + nc * g->oh * g->ow;                                                           \
            memset(xp, 0, (size_t)(g->h * g->w) * sizeof(T));                                                \
            for (int64_t oy = 0; oy < g->oh; oy++) {                                                         \
                const tap ty = tap_##SUF(g, rh, oy, g->h);                                                   \
                for (int64_t ox = 0; ox < g->ow; ox++) {                                                     \
                    const tap tx = tap_##SUF(g, rw, ox, g->w);                                               \
                    const double d = yp[oy * g->ow + ox];                                                    \
                    if (!g->bilinear) {                                                                      \
                        xp[ty.i0 * g->w + tx.i0] += (T)d;                                                    \
                        continue;                                                                            \
                    }                                                                                        \
                    xp[ty.i0 * g->w + tx.i0] += (T)(d * ty.w0 * tx.w0);                                      \
                    xp[ty.i0 * g->w + tx.i1] += (T)(d * ty.w0 * tx.w1);                                      \
                    xp[ty.i1 * g->w + tx.i0] += (T)(d * ty.w1 * tx.w0);                                      \
                    xp[ty.i1 * g->w + tx.i1] += (T)(d * ty.w1 * tx.w1);                                      \
                }                                                                                            \
            }                                                                                                \
        });                                                                                                  \
    }

PE_INTERP_LOOPS(float, f32)
PE_INTERP_LOOPS(double, f64)

/* X: [N, C, H, W] -> Out: [N, C, oh, ow] */
pe_status pe_cpu_interp(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_interp_geom g;
    PE_CHECK(pe_interp_geom_get(ctx, x->ndim, x->dims, &g));
    pe_tensor *y = pe_ctx_out(ctx, "Out");
    if (pe_tensor_numel(y) == 0) return PE_OK;
    const int nt = pe_kernel_threads(ctx);
    if (x->dtype == PE_DTYPE_FP64) interp_fwd_f64(&g, pe_tensor_data(x), pe_tensor_data(y), nt);
    else interp_fwd_f32(&g, pe_tensor_data(x), pe_tensor_data(y), nt);
    return PE_OK;
}

/* X (dims only): [N, C, H, W], Out@GRAD: [N, C, oh, ow] -> X@GRAD: [N, C, H, W] */
pe_status pe_cpu_interp_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *dy = pe_ctx_in(ctx, "Out@GRAD");
    pe_interp_geom g;
    PE_CHECK(pe_interp_geom_get(ctx, x->ndim, x->dims, &g));
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    if (!dx || pe_tensor_numel(dx) == 0) return PE_OK;
    const int nt = pe_kernel_threads(ctx);
    if (x->dtype == PE_DTYPE_FP64) interp_bwd_f64(&g, pe_tensor_data(dy), pe_tensor_data(dx), nt);
    else interp_bwd_f32(&g, pe_tensor_data(dy), pe_tensor_data(dx), nt);
    return PE_OK;
}
