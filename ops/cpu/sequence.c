/* ops/cpu/sequence.c — CPU kernels of the sequence (LoD) ops: sequence_pool,
 * sequence_softmax, sequence_expand, sequence_mask, sequence_conv and their
 * gradients (shape inference and the LoD rules: ops/sequence.c).
 *
 * One loop over the sequences of the LoD's last level (sequence_expand: Y's
 * ref_level), forked over threads by sequence when there is enough work;
 * each sequence writes its own output rows, so the result never depends on
 * the thread count. Sums run in row order. An empty sequence pools to
 * pad_value (MaxIndex -1) and gets no gradient, as Paddle's.
 *
 * sequence_conv is Paddle's im2col (each row's context window, rows outside
 * its sequence zero) times Filter, computed directly without the column
 * matrix: a context row outside the sequence is skipped (it adds zero).
 * Each output element is one sum in the dtype in a fixed order, the order
 * ops/cuda/sequence.cu's kernels use too: Out[t, :] over (j, d) ascending
 * (the inner loop runs along Out's row, so it vectorizes), X@GRAD[r, d] over
 * j then the filter column n, Filter@GRAD[j * D + d, :] over the rows t in
 * order. Threads split sequences (Out, X@GRAD) or Filter rows
 * (Filter@GRAD): the result never depends on the thread count.
 */
#include "ops/cpu/par.h"
#include "ops/sequence.h"

#include <math.h>
#include <string.h>

/* ---- sequence_pool: X [N, D] (D = product of the dims after the first) ---- */

#define SEQPOOL_FWD(NAME, T)                                                                              \
    static void NAME(int type, const int64_t *off, int64_t ns, int64_t d, const T *x, T *out, int32_t *mi,  \
                     T pad, int nt) {                                                                     \
        PE_PAR_FOR(ns * d >= PE_PAR_MIN && nt > 1, s, ns, {                                               \
            const int64_t b = off[s], e = off[s + 1], len = e - b;                                        \
            T *o = out + s * d;                                                                           \
            for (int64_t k = 0; k < d; k++) {                                                             \
                if (!len) {                                                                               \
                    o[k] = pad;                                                                           \
                    if (mi) mi[s * d + k] = -1;                                                           \
                    continue;                                                                             \
                }                                                                                         \
                if (type == PE_SEQPOOL_LAST) { o[k] = x[(e - 1) * d + k]; continue; }                     \
                if (type == PE_SEQPOOL_FIRST) { o[k] = x[b * d + k]; continue; }                          \
                if (type == PE_SEQPOOL_MAX) {                                                             \
                    T m = x[b * d + k];                                                                   \
                    int64_t at = b;                                                                       \
                    for (int64_t r = b + 1; r < e; r++)                                                   \
                        if (x[r * d + k] > m) m = x[r * d + k], at = r;                                   \
                    o[k] = m;                                                                             \
                    if (mi) mi[s * d + k] = (int32_t)at;                                                  \
                    continue;                                                                             \
                }                                                                                         \
                T acc = 0;                                                                                \
                for (int64_t r = b; r < e; r++) acc += x[r * d + k];                                      \
                if (type == PE_SEQPOOL_AVERAGE) acc /= (T)len;                                            \
                else if (type == PE_SEQPOOL_SQRT) acc /= (T)sqrt((double)len);                            \
                o[k] = acc;                                                                               \
            }                                                                                             \
        });                                                                                               \
    }
SEQPOOL_FWD(seqpool_f32, float)
SEQPOOL_FWD(seqpool_f64, double)

pe_status pe_cpu_sequence_pool(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *mi = pe_ctx_out(ctx, "MaxIndex");
    int type = 0;
    PE_CHECK(pe_seqpool_type(ctx, &type));
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    const int64_t d = pe_dims_prod(x->dims, 1, x->ndim);
    int32_t *mip = type == PE_SEQPOOL_MAX && mi ? pe_tensor_data(mi) : NULL;
    const int nt = pe_kernel_threads(ctx);
    const double pad = pe_ctx_float(ctx, "pad_value");
    if (x->dtype == PE_DTYPE_FP32)
        seqpool_f32(type, off, n - 1, d, pe_tensor_data(x), pe_tensor_data(out), mip, (float)pad, nt);
    else
        seqpool_f64(type, off, n - 1, d, pe_tensor_data(x), pe_tensor_data(out), mip, pad, nt);
    return PE_OK;
}

/* X@GRAD [N, D] from Out@GRAD [sequences, D]: every row of a sequence gets
 * g (SUM), g / len (AVERAGE), g / sqrt(len) (SQRT); MAX the row MaxIndex
 * names, LAST / FIRST that row; every other element 0. */
#define SEQPOOL_BWD(NAME, T)                                                                               \
    static void NAME(int type, const int64_t *off, int64_t ns, int64_t d, const T *g, const int32_t *mi,     \
                     T *gx, int64_t rows, int nt) {                                                        \
        memset(gx, 0, sizeof(T) * (size_t)(rows * d));                                                     \
        PE_PAR_FOR(ns * d >= PE_PAR_MIN && nt > 1, s, ns, {                                                \
            const int64_t b = off[s], e = off[s + 1], len = e - b;                                         \
            const T *gs = g + s * d;                                                                       \
            if (len) {                                                                                     \
                if (type == PE_SEQPOOL_LAST || type == PE_SEQPOOL_FIRST) {                                 \
                    const int64_t r = type == PE_SEQPOOL_LAST ? e - 1 : b;                                 \
                    for (int64_t k = 0; k < d; k++) gx[r * d + k] = gs[k];                                 \
                } else if (type == PE_SEQPOOL_MAX) {                                                       \
                    for (int64_t k = 0; k < d; k++) {                                                      \
                        const int64_t r = mi[s * d + k];                                                   \
                        if (r >= b && r < e) gx[r * d + k] = gs[k];                                        \
                    }                                                                                      \
                } else {                                                                                   \
                    const T sc = type == PE_SEQPOOL_SUM ? (T)1                                             \
                                 : type == PE_SEQPOOL_AVERAGE ? (T)1 / (T)len                              \
                                                                : (T)1 / (T)sqrt((double)len);             \
                    for (int64_t r = b; r < e; r++)                                                        \
                        for (int64_t k = 0; k < d; k++)                                                    \
                            gx[r * d + k] = type == PE_SEQPOOL_SUM ? gs[k]                                 \
                                            : type == PE_SEQPOOL_AVERAGE ? gs[k] / (T)len                  \
                                                                         : gs[k] * sc;                     \
                }                                                                                          \
            }                                                                                              \
        });                                                                                                \
    }
SEQPOOL_BWD(seqpool_grad_f32, float)
SEQPOOL_BWD(seqpool_grad_f64, double)

pe_status pe_cpu_sequence_pool_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD"), *mi = pe_ctx_in(ctx, "MaxIndex");
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (!gx) return PE_OK;
    int type = 0;
    PE_CHECK(pe_seqpool_type(ctx, &type));
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    const int64_t d = pe_dims_prod(x->dims, 1, x->ndim);
    const int32_t *mip = type == PE_SEQPOOL_MAX ? pe_tensor_data(mi) : NULL;
    const int nt = pe_kernel_threads(ctx);
    if (x->dtype == PE_DTYPE_FP32)
        seqpool_grad_f32(type, off, n - 1, d, pe_tensor_data(g), mip, pe_tensor_data(gx), x->dims[0], nt);
    else
        seqpool_grad_f64(type, off, n - 1, d, pe_tensor_data(g), mip, pe_tensor_data(gx), x->dims[0], nt);
    return PE_OK;
}

/* ---- sequence_softmax: X [N] (or [N, 1]), softmax within each sequence ---- */

#define SEQSOFTMAX(NAME, T)                                                                         \
    static void NAME(const int64_t *off, int64_t ns, const T *x, T *out, int nt) {                   \
        PE_PAR_FOR(off[ns] >= PE_PAR_MIN && nt > 1, s, ns, {                                         \
            const int64_t b = off[s], e = off[s + 1];                                               \
            if (e > b) {                                                                            \
                T m = x[b];                                                                         \
                for (int64_t r = b + 1; r < e; r++) m = x[r] > m ? x[r] : m;                        \
                T sum = 0;                                                                          \
                for (int64_t r = b; r < e; r++) sum += (out[r] = (T)exp((double)(x[r] - m)));       \
                for (int64_t r = b; r < e; r++) out[r] /= sum;                                      \
            }                                                                                       \
        });                                                                                         \
    }
SEQSOFTMAX(seqsoftmax_f32, float)
SEQSOFTMAX(seqsoftmax_f64, double)

pe_status pe_cpu_sequence_softmax(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    if (x->dtype == PE_DTYPE_FP32) seqsoftmax_f32(off, n - 1, pe_tensor_data(x), pe_tensor_data(out), pe_kernel_threads(ctx));
    else seqsoftmax_f64(off, n - 1, pe_tensor_data(x), pe_tensor_data(out), pe_kernel_threads(ctx));
    return PE_OK;
}

/* dX[r] = Out[r] * (dOut[r] - sum over the sequence of dOut * Out) */
#define SEQSOFTMAX_BWD(NAME, T)                                                                     \
    static void NAME(const int64_t *off, int64_t ns, const T *o, const T *g, T *gx, int nt) {        \
        PE_PAR_FOR(off[ns] >= PE_PAR_MIN && nt > 1, s, ns, {                                         \
            const int64_t b = off[s], e = off[s + 1];                                               \
            T dot = 0;                                                                              \
            for (int64_t r = b; r < e; r++) dot += g[r] * o[r];                                     \
            for (int64_t r = b; r < e; r++) gx[r] = o[r] * (g[r] - dot);                            \
        });                                                                                         \
    }
SEQSOFTMAX_BWD(seqsoftmax_grad_f32, float)
SEQSOFTMAX_BWD(seqsoftmax_grad_f64, double)

pe_status pe_cpu_sequence_softmax_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (!gx) return PE_OK;
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    if (x->dtype == PE_DTYPE_FP32)
        seqsoftmax_grad_f32(off, n - 1, pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(gx), pe_kernel_threads(ctx));
    else
        seqsoftmax_grad_f64(off, n - 1, pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(gx), pe_kernel_threads(ctx));
    return PE_OK;
}

/* ---- sequence_expand: X's sequence i (rows xo[i]..xo[i+1], or row i) copied
 * r_i = yo[i+1] - yo[i] times, in order ---- */

pe_status pe_cpu_sequence_expand(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t *yo, *xo;
    int64_t ny;
    PE_CHECK(pe_seq_expand_levels(ctx, x, y, &yo, &ny, &xo));
    const size_t row = (size_t)pe_dims_prod(x->dims, 1, x->ndim) * pe_dtype_size(x->dtype);
    const char *xp = pe_tensor_data(x);
    char *op = pe_tensor_data(out);
    int64_t at = 0;
    for (int64_t i = 0; i + 1 < ny; i++) {
        const int64_t b = xo ? xo[i] : i, len = xo ? xo[i + 1] - xo[i] : 1;
        for (int64_t r = 0; r < yo[i + 1] - yo[i]; r++, at += len)
            if (len) memcpy(op + (size_t)at * row, xp + (size_t)b * row, (size_t)len * row);
    }
    return PE_OK;
}

#define SEQEXPAND_BWD(NAME, T)                                                                             \
    static void NAME(const int64_t *yo, int64_t ny, const int64_t *xo, int64_t d, const T *g, T *gx) {     \
        int64_t at = 0;                                                                                    \
        for (int64_t i = 0; i + 1 < ny; i++) {                                                             \
            const int64_t b = xo ? xo[i] : i, len = xo ? xo[i + 1] - xo[i] : 1;                            \
            T *dst = gx + b * d;                                                                           \
            for (int64_t k = 0; k < len * d; k++) dst[k] = 0;                                              \
            for (int64_t r = 0; r < yo[i + 1] - yo[i]; r++, at += len)                                     \
                for (int64_t k = 0; k < len * d; k++) dst[k] += g[at * d + k];                             \
        }                                                                                                  \
    }
SEQEXPAND_BWD(seqexpand_grad_f32, float)
SEQEXPAND_BWD(seqexpand_grad_f64, double)

pe_status pe_cpu_sequence_expand_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (!gx) return PE_OK;
    const int64_t *yo, *xo;
    int64_t ny;
    PE_CHECK(pe_seq_expand_levels(ctx, x, y, &yo, &ny, &xo));
    const int64_t d = pe_dims_prod(x->dims, 1, x->ndim);
    if (x->dtype == PE_DTYPE_FP32) seqexpand_grad_f32(yo, ny, xo, d, pe_tensor_data(g), pe_tensor_data(gx));
    else seqexpand_grad_f64(yo, ny, xo, d, pe_tensor_data(g), pe_tensor_data(gx));
    return PE_OK;
}

/* ---- sequence_mask: Y[i, j] = j < X[i] ---- */

#define SEQMASK_STORE(T)                                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                                      \
        const int64_t len = x32 ? x32[i] : x64[i];                                                         \
        for (int64_t j = 0; j < m; j++) ((T *)yp)[i * m + j] = (T)(j < len);                               \
    }

pe_status pe_cpu_sequence_mask(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *y = pe_ctx_out(ctx, "Y");
    const int64_t n = pe_tensor_numel(x), m = y->dims[y->ndim - 1];
    const int32_t *x32 = x->dtype == PE_DTYPE_INT32 ? pe_tensor_data(x) : NULL;
    const int64_t *x64 = x->dtype == PE_DTYPE_INT64 ? pe_tensor_data(x) : NULL;
    void *yp = pe_tensor_data(y);
    switch (y->dtype) {
    case PE_DTYPE_FP32: SEQMASK_STORE(float) break;
    case PE_DTYPE_FP64: SEQMASK_STORE(double) break;
    case PE_DTYPE_INT32: SEQMASK_STORE(int32_t) break;
    case PE_DTYPE_INT64: SEQMASK_STORE(int64_t) break;
    case PE_DTYPE_UINT8:
    case PE_DTYPE_BOOL: SEQMASK_STORE(uint8_t) break;
    default:
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "Y has dtype %s (the kernel writes float32, float64, int32, "
                            "int64, uint8, bool)", pe_dtype_name(y->dtype));
    }
    return PE_OK;
}

/* ---- sequence_conv: Out[t, n] = sum over j < len, d < D, with r = t + start + j
 * in t's sequence, of X[r, d] * Filter[j * D + d, n] ---- */

#define SEQCONV_FWD(NAME, T)                                                                               \
    static void NAME(const pe_seqconv_geom *g, const T *x, const T *f, T *out, int nt) {                    \
        const int64_t d = g->d, n = g->n, len = g->len, start = g->start, ns = g->n_off - 1;                \
        const int64_t *off = g->off;                                                                        \
        PE_PAR_FOR(g->rows * len * d * n >= PE_PAR_MIN && nt > 1, s, ns, {                                 \
            const int64_t b = off[s], e = off[s + 1];                                                       \
            for (int64_t t = b; t < e; t++) {                                                               \
                T *o = out + t * n;                                                                         \
                for (int64_t k = 0; k < n; k++) o[k] = 0;                                                   \
                for (int64_t j = 0; j < len; j++) {                                                         \
                    const int64_t r = t + start + j;                                                        \
                    if (r < b || r >= e) continue;                                                          \
                    for (int64_t c = 0; c < d; c++) {                                                       \
                        const T xv = x[r * d + c];                                                          \
                        const T *fr = f + (j * d + c) * n;                                                  \
                        for (int64_t k = 0; k < n; k++) o[k] += xv * fr[k];                                 \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
        });                                                                                                 \
    }
SEQCONV_FWD(seqconv_f32, float)
SEQCONV_FWD(seqconv_f64, double)

pe_status pe_cpu_sequence_conv(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *f = pe_ctx_in(ctx, "Filter");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    pe_seqconv_geom g;
    PE_CHECK(pe_seqconv_geom_get(ctx, x, f, &g));
    if (g.rows * g.n == 0) return PE_OK;
    const int nt = pe_kernel_threads(ctx);
    if (x->dtype == PE_DTYPE_FP32) seqconv_f32(&g, pe_tensor_data(x), pe_tensor_data(f), pe_tensor_data(out), nt);
    else seqconv_f64(&g, pe_tensor_data(x), pe_tensor_data(f), pe_tensor_data(out), nt);
    return PE_OK;
}

/* X@GRAD[r, c] = sum over j < len (t = r - start - j in r's sequence), then n < N, of
 * Out@GRAD[t, n] * Filter[j * D + c, n];
 * Filter@GRAD[j * D + c, k] = sum over the rows t (in order) whose context row
 * r = t + start + j lies in t's sequence, of X[r, c] * Out@GRAD[t, k] */
#define SEQCONV_BWD(NAME, T)                                                                               \
    static void NAME(const pe_seqconv_geom *g, const T *x, const T *f, const T *dout, T *gx, T *gf, int nt) {  \
        const int64_t d = g->d, n = g->n, len = g->len, start = g->start, ns = g->n_off - 1;                \
        const int64_t *off = g->off;                                                                        \
        const bool par = g->rows * len * d * n >= PE_PAR_MIN && nt > 1;                                     \
        if (gx)                                                                                             \
            PE_PAR_FOR(par, s, ns, {                                                                        \
                const int64_t b = off[s], e = off[s + 1];                                                   \
                for (int64_t r = b; r < e; r++)                                                             \
                    for (int64_t c0 = 0; c0 < d; c0 += 8) { /* 8 sums at a time: independent chains */      \
                        const int64_t cn = d - c0 < 8 ? d - c0 : 8;                                         \
                        T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                \
                        for (int64_t j = 0; j < len; j++) {                                                 \
                            const int64_t t = r - start - j;                                                \
                            if (t < b || t >= e) continue;                                                  \
                            const T *gr = dout + t * n, *f0 = f + (j * d + c0) * n;                         \
                            if (cn == 8)                                                                    \
                                for (int64_t k = 0; k < n; k++) {                                           \
                                    const T gv = gr[k];                                                     \
                                    for (int i = 0; i < 8; i++) acc[i] += gv * f0[i * n + k];               \
                                }                                                                           \
                            else                                                                            \
                                for (int64_t k = 0; k < n; k++)                                             \
                                    for (int64_t i = 0; i < cn; i++) acc[i] += gr[k] * f0[i * n + k];       \
                        }                                                                                   \
                        for (int64_t i = 0; i < cn; i++) gx[r * d + c0 + i] = acc[i];                       \
                    }                                                                                       \
            });                                                                                             \
        if (gf)                                                                                             \
            PE_PAR_FOR(par, q, len * d, {                                                                   \
                const int64_t j = q / d, c = q % d;                                                         \
                T *o = gf + q * n;                                                                          \
                for (int64_t k = 0; k < n; k++) o[k] = 0;                                                   \
                for (int64_t s = 0; s < ns; s++) {                                                          \
                    const int64_t b = off[s], e = off[s + 1];                                               \
                    for (int64_t t = b; t < e; t++) {                                                       \
                        const int64_t r = t + start + j;                                                    \
                        if (r < b || r >= e) continue;                                                      \
                        const T xv = x[r * d + c];                                                          \
                        const T *gr = dout + t * n;                                                         \
                        for (int64_t k = 0; k < n; k++) o[k] += xv * gr[k];                                 \
                    }                                                                                       \
                }                                                                                           \
            });                                                                                             \
    }
SEQCONV_BWD(seqconv_grad_f32, float)
SEQCONV_BWD(seqconv_grad_f64, double)

pe_status pe_cpu_sequence_conv_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *f = pe_ctx_in(ctx, "Filter"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD"), *gf = pe_ctx_out(ctx, "Filter@GRAD");
    if (!gx && !gf) return PE_OK;
    pe_seqconv_geom sg;
    PE_CHECK(pe_seqconv_geom_get(ctx, x, f, &sg));
    const int nt = pe_kernel_threads(ctx);
    if (x->dtype == PE_DTYPE_FP32)
        seqconv_grad_f32(&sg, pe_tensor_data(x), pe_tensor_data(f), pe_tensor_data(g), gx ? pe_tensor_data(gx) : NULL,
                         gf ? pe_tensor_data(gf) : NULL, nt);
    else
        seqconv_grad_f64(&sg, pe_tensor_data(x), pe_tensor_data(f), pe_tensor_data(g), gx ? pe_tensor_data(gx) : NULL,
                         gf ? pe_tensor_data(gf) : NULL, nt);
    return PE_OK;
}
