/* ops/cpu/fused_elemwise.c — CPU kernels of fused_elemwise_activation and
 * its grad for functor_list [relu|sigmoid|tanh, elementwise_add], i.e.
 * out = act(x + y) with elementwise_add's broadcasting (shape inference in
 * ops/fused.c; emitted by passes/fuse_elewise_add_act.c).
 *
 * Forward: one pass per broadcast kind (same shape, scalar y, row bias,
 * channel bias, general strided) computing x + y and the activation
 * together; the sum is written to IntermediateOut only when that output is
 * given. Backward: one pass computing the pre-activation gradient
 * dT = act'(out) * dOut into a buffer of the output's size (IntermediateOut
 * @GRAD when given, else X@GRAD or Y@GRAD, whichever has the output's size),
 * then the other operand's gradient: a copy when it is not broadcast, else
 * the sum of dT over its broadcast dims.
 *
 * Bitwise equal to elementwise_add + act and act_grad + elementwise_add_grad:
 * the activation expressions and gradient loops are ops/cpu/fused_act.h's,
 * which ops/cpu/elementwise.c uses too, and every broadcast sum adds the same terms in the
 * same order, in double, as elementwise_add_grad (rows in order for a row
 * bias, fixed 4096+-element blocks for a scalar, the output's index order
 * otherwise) — orders fixed by the shapes alone, so the results do not
 * depend on the thread count either.
 */
#include "ops/cpu/fused_act.h"
#include "ops/cpu/par.h"
#include "ops/elementwise.h"
#include "ops/op.h"

#include <string.h>

#define FEA_TILE 256         /* as elementwise_add_grad's PE_GRAD_TILE */
#define FEA_MAX_BLOCKS 256   /* as PE_GRAD_MAX_BLOCKS */
#define FEA_MIN_BLOCK 4096   /* as PE_GRAD_MIN_BLOCK */

static int act_of(const pe_op_ctx *ctx) {
    int n = 0;
    const char *const *f = pe_ctx_strings(ctx, "functor_list", &n);
    return n == 2 ? pe_fused_act_parse(f[0]) : -1;
}

/* ---- forward ------------------------------------------------------------- */

#define FEA_ELEM(T, ACT, i, v)             \
    do {                             \
        const T v_ = (v);            \
        if (mid) mid[i] = v_;        \
        out[i] = ACT(v_);            \
    } while (0)

#define FEA_FWD(NAME, T, ACT)                                                                          \
    static void NAME(const pe_bcast_plan *pl, const T *x, const T *y, T *out, T *mid, int nt) {       \
        const int64_t numel = pl->numel;                                                               \
        const int par = numel >= PE_PAR_MIN && nt > 1;                                                 \
        switch (pl->kind) {                                                                            \
        case PE_BCAST_SAME: /* x, y, out: [numel] */                                                   \
            PE_PAR_FOR(par, i, numel, FEA_ELEM(T, ACT, i, x[i] + y[i]););                                      \
            break;                                                                                     \
        case PE_BCAST_SCALAR_Y: { /* y: [1] */                                                         \
            const T b = y[0];                                                                          \
            PE_PAR_FOR(par, i, numel, FEA_ELEM(T, ACT, i, x[i] + b););                                         \
            break;                                                                                     \
        }                                                                                              \
        case PE_BCAST_ROW: { /* x, out: [pre, n]; y: [n] */                                            \
            const int64_t n = pl->n;                                                                   \
            PE_PAR_FOR(par, r, pl->pre, {                                                              \
                for (int64_t c = 0; c < n; c++) FEA_ELEM(T, ACT, r * n + c, x[r * n + c] + y[c]); });          \
            break;                                                                                     \
        }                                                                                              \
        case PE_BCAST_MID: { /* x, out: [pre, n, post]; y: [n] */                                      \
            const int64_t n = pl->n, post = pl->post;                                                  \
            PE_PAR_FOR(par, rc, pl->pre * n, {                                                         \
                const T b = y[rc % n];                                                                 \
                for (int64_t k = 0; k < post; k++) FEA_ELEM(T, ACT, rc * post + k, x[rc * post + k] + b); });  \
            break;                                                                                     \
        }                                                                                              \
        default: { /* general: rows of the last dim, strided reads */                                  \
            const int nd = pl->ndim;                                                                   \
            const int64_t inner = pl->dims[nd - 1];                                                    \
            const int64_t xs = pl->x_strides[nd - 1], ys = pl->y_strides[nd - 1];                      \
            PE_PAR_FOR(par, r, inner ? numel / inner : 0, {                                            \
                int64_t xo, yo;                                                                        \
                pe_bcast_row_offsets(pl, r, &xo, &yo);                                                 \
                for (int64_t j = 0; j < inner; j++)                                                    \
                    FEA_ELEM(T, ACT, r * inner + j, x[xo + j * xs] + y[yo + j * ys]); });                      \
            break;                                                                                     \
        }                                                                                              \
        }                                                                                              \
    }

#define RELU_F(v) PE_FUSED_RELU(v)
FEA_FWD(fwd_relu_f32, float, RELU_F)
FEA_FWD(fwd_relu_f64, double, RELU_F)
FEA_FWD(fwd_sigmoid_f32, float, pe_fused_sigmoid_f32)
FEA_FWD(fwd_sigmoid_f64, double, pe_fused_sigmoid_f64)
FEA_FWD(fwd_tanh_f32, float, tanhf)
FEA_FWD(fwd_tanh_f64, double, tanh)

typedef void (*fwd_f32)(const pe_bcast_plan *, const float *, const float *, float *, float *, int);
typedef void (*fwd_f64)(const pe_bcast_plan *, const double *, const double *, double *, double *, int);
static const fwd_f32 k_fwd_f32[4] = {NULL, fwd_relu_f32, fwd_sigmoid_f32, fwd_tanh_f32};
static const fwd_f64 k_fwd_f64[4] = {NULL, fwd_relu_f64, fwd_sigmoid_f64, fwd_tanh_f64};

/* x, y: broadcastable -> out = act(x + y), intermediate_out = x + y (optional) */
pe_status pe_cpu_fused_elemwise_activation(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *mid = pe_ctx_out(ctx, "IntermediateOut");
    int act = act_of(ctx);
    pe_bcast_plan pl;
    if (act <= PE_FACT_NONE ||
        pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK ||
        pe_tensor_numel(out) != pl.numel || (mid && pe_tensor_numel(mid) != pl.numel))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (pl.numel == 0) return PE_OK;
    if (x->dtype == PE_DTYPE_FP32)
        k_fwd_f32[act](&pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), mid ? pe_tensor_data(mid) : NULL,
                       ctx->num_threads);
    else
        k_fwd_f64[act](&pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), mid ? pe_tensor_data(mid) : NULL,
                       ctx->num_threads);
    return PE_OK;
}

/* ---- backward -------------------------------------------------------------- */

PE_FUSED_ACT_GRAD_LOOP(dt_relu_f32, float, PE_FUSED_RELU_G)
PE_FUSED_ACT_GRAD_LOOP(dt_relu_f64, double, PE_FUSED_RELU_G)
PE_FUSED_ACT_GRAD_LOOP(dt_sigmoid_f32, float, PE_FUSED_SIGMOID_G)
PE_FUSED_ACT_GRAD_LOOP(dt_sigmoid_f64, double, PE_FUSED_SIGMOID_G)
PE_FUSED_ACT_GRAD_LOOP(dt_tanh_f32, float, PE_FUSED_TANH_G)
PE_FUSED_ACT_GRAD_LOOP(dt_tanh_f64, double, PE_FUSED_TANH_G)

typedef void (*dt_f32)(const float *, const float *, float *, int64_t, int);
typedef void (*dt_f64)(const double *, const double *, double *, int64_t, int);
static const dt_f32 k_dt_f32[4] = {NULL, dt_relu_f32, dt_sigmoid_f32, dt_tanh_f32};
static const dt_f64 k_dt_f64[4] = {NULL, dt_relu_f64, dt_sigmoid_f64, dt_tanh_f64};

/* dst (the side's operand shape) = sum of dt over the side's broadcast dims. */
#define FEA_REDUCE(NAME, T)                                                                            \
    static void NAME(const pe_bcast_plan *pl, int side, const T *dt, T *dst, int nt) {                \
        const int64_t numel = pl->numel;                                                               \
        const int par = numel >= PE_PAR_MIN && nt > 1;                                                 \
        if (side && pl->kind == PE_BCAST_SCALAR_Y) { /* fixed blocks, partials summed in order */      \
            int64_t bs = (numel + FEA_MAX_BLOCKS - 1) / FEA_MAX_BLOCKS;                                \
            if (bs < FEA_MIN_BLOCK) bs = FEA_MIN_BLOCK;                                                \
            const int64_t nb = (numel + bs - 1) / bs;                                                  \
            double part[FEA_MAX_BLOCKS];                                                               \
            PE_PAR_FOR(par && nb > 1, k, nb, {                                                         \
                const int64_t e = (k + 1) * bs < numel ? (k + 1) * bs : numel;                         \
                double acc = 0;                                                                        \
                for (int64_t i = k * bs; i < e; i++) acc += (double)dt[i];                             \
                part[k] = acc; });                                                                     \
            double acc = 0;                                                                            \
            for (int64_t k = 0; k < nb; k++) acc += part[k];                                           \
            dst[0] = (T)acc;                                                                           \
            return;                                                                                    \
        }                                                                                              \
        if (side && pl->kind == PE_BCAST_ROW) { /* column tiles, rows in order */                      \
            const int64_t pre = pl->pre, n = pl->n, ntile = (n + FEA_TILE - 1) / FEA_TILE;             \
            PE_PAR_FOR(par && ntile > 1, tl, ntile, {                                                  \
                const int64_t c0 = tl * FEA_TILE, w = n - c0 < FEA_TILE ? n - c0 : FEA_TILE;           \
                double acc[FEA_TILE];                                                                  \
                for (int64_t c = 0; c < w; c++) acc[c] = 0;                                            \
                for (int64_t r = 0; r < pre; r++)                                                      \
                    for (int64_t c = 0; c < w; c++) acc[c] += (double)dt[r * n + c0 + c];              \
                for (int64_t c = 0; c < w; c++) dst[c0 + c] = (T)acc[c]; });                           \
            return;                                                                                    \
        }                                                                                              \
        if (side && pl->kind == PE_BCAST_MID) { /* per channel: rows in order, PE_LANE_SUM */            \
            const int64_t pre = pl->pre, n = pl->n, post = pl->post;                                   \
            PE_PAR_FOR(par && n > 1, c, n, {                                                           \
                double acc = 0;                                                                        \
                for (int64_t p = 0; p < pre; p++) {                                                    \
                    const T *dr = dt + (p * n + c) * post;                                             \
                    PE_LANE_SUM(acc, post, k, dr[k]);                                                  \
                }                                                                                      \
                dst[c] = (T)acc; });                                                                   \
            return;                                                                                    \
        }                                                                                              \
        /* general: kept dims index the result, reduced dims summed in output order */                 \
        const int nd = pl->ndim;                                                                       \
        const int64_t *ts = side ? pl->y_strides : pl->x_strides;                                      \
        int64_t ostr[PE_MAX_DIMS];                                                                     \
        int kept[PE_MAX_DIMS], red[PE_MAX_DIMS], nk = 0, nr = 0;                                       \
        int64_t nkept = 1, nred = 1, s = 1;                                                            \
        for (int d = nd - 1; d >= 0; d--) { ostr[d] = s; s *= pl->dims[d]; }                           \
        for (int d = 0; d < nd; d++) {                                                                 \
            if (ts[d]) { kept[nk++] = d; nkept *= pl->dims[d]; }                                       \
            else { red[nr++] = d; nred *= pl->dims[d]; }                                               \
        }                                                                                              \
        if (nr == 0) return; /* not broadcast: the caller copies */                                    \
        const int last = red[nr - 1];                                                                  \
        const int64_t ln = pl->dims[last], lo = ostr[last], nouter = nred / ln;                        \
        PE_PAR_FOR(par && nkept > 1, t, nkept, {                                                       \
            int64_t ob, xb, yb;                                                                        \
            pe_bcast_offsets(pl, kept, nk, ostr, t, &ob, &xb, &yb);                                        \
            double acc = 0;                                                                            \
            for (int64_t r = 0; r < nouter; r++) {                                                     \
                int64_t oo, xo, yo;                                                                    \
                pe_bcast_offsets(pl, red, nr - 1, ostr, r, &oo, &xo, &yo);                                 \
                const T *gp = dt + ob + oo;                                                            \
                for (int64_t j = 0; j < ln; j++) acc += (double)gp[j * lo];                            \
            }                                                                                          \
            dst[side ? yb : xb] = (T)acc; });                                                          \
    }
FEA_REDUCE(reduce_f32, float)
FEA_REDUCE(reduce_f64, double)

/* x, y, out, out@grad -> x@grad?, y@grad?, intermediate_out@grad? */
pe_status pe_cpu_fused_elemwise_activation_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    const pe_tensor *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    pe_tensor *dm = pe_ctx_out(ctx, "IntermediateOut@GRAD");
    int act = act_of(ctx);
    pe_bcast_plan pl;
    if (act <= PE_FACT_NONE ||
        pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK ||
        pe_tensor_numel(g) != pl.numel || pe_tensor_numel(o) != pl.numel)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    const int64_t numel = pl.numel;
    if (numel == 0) { /* nothing reaches X or Y */
        if (dx) memset(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx));
        if (dy) memset(pe_tensor_data(dy), 0, pe_tensor_nbytes(dy));
        return PE_OK;
    }
    const bool xfull = pe_tensor_numel(x) == numel, yfull = pe_tensor_numel(y) == numel;
    pe_tensor *buf = dm ? dm : (dx && xfull) ? dx : (dy && yfull) ? dy : NULL;
    if (!buf) {
        if (!dx && !dy) return PE_OK;
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "no buffer for the pre-activation gradient (infer checks this)");
    }
    const int nt = ctx->num_threads;
    const bool f32 = x->dtype == PE_DTYPE_FP32;
    if (f32) k_dt_f32[act](pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(buf), numel, nt);
    else k_dt_f64[act](pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(buf), numel, nt);
    for (int side = 0; side < 2; side++) {
        pe_tensor *d = side ? dy : dx;
        if (!d || d == buf) continue;
        if (side ? yfull : xfull) {
            memcpy(pe_tensor_data(d), pe_tensor_data(buf), pe_tensor_nbytes(buf));
        } else if (f32) {
            reduce_f32(&pl, side, pe_tensor_data(buf), pe_tensor_data(d), nt);
        } else {
            reduce_f64(&pl, side, pe_tensor_data(buf), pe_tensor_data(d), nt);
        }
    }
    return PE_OK;
}
