/* ops/cpu/loss.c — CPU kernels of softmax_with_cross_entropy,
 * cross_entropy, square_error_cost and their gradients (fp32 and fp64).
 *
 * How: the class dim is viewed as the middle of [pre, D, post] (post == 1
 * for the usual [N, D] logits); each of the pre * post rows is independent,
 * so rows are split over OpenMP threads for large inputs (ops/cpu/par.h)
 * with results independent of the thread count. Sums over D run in double.
 * Hard labels are validated in one serial pass before anything is written,
 * so a bad label is an error naming the row and the value, never an
 * out-of-bounds read.
 *
 * Formulas (row r, classes j, g = upstream gradient of the row's loss):
 *   softmax_with_cross_entropy: lse = max + log sum exp(x - max),
 *     softmax_j = exp(x_j - lse); hard loss = lse - x_label (0 when the
 *     label is ignore_index); soft loss = sum_j label_j (lse - x_j).
 *     grad: hard (softmax_j - [j == label]) g, 0 for ignored rows;
 *     soft (softmax_j sum_k label_k - label_j) g (Paddle's softmax_j -
 *     label_j when the labels sum to 1, exact otherwise).
 *   cross_entropy: hard y = -log x_label (0 when ignored), grad -g / x_label
 *     at the label only; soft y = -sum_j label_j log x_j, grad -g label_j / x_j.
 *   square_error_cost: out = (x - y)^2, dx = 2 (x - y) g, dy = -dx.
 */
#include "ops/cpu/par.h"
#include "ops/op.h"

#include <math.h>
#include <stdint.h>

static pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

static inline int64_t label_at(const pe_tensor *lab, int64_t i) {
    return lab->dtype == PE_DTYPE_INT64 ? ((const int64_t *)pe_tensor_data(lab))[i]
                                        : ((const int32_t *)pe_tensor_data(lab))[i];
}

/* Every hard label is in [0, D) or ignore_index. */
static pe_status check_labels(const pe_op_ctx *ctx, const pe_tensor *lab, int64_t rows, int64_t D, int64_t ignore) {
    for (int64_t r = 0; r < rows; r++) {
        const int64_t l = label_at(lab, r);
        if (l != ignore && (l < 0 || l >= D))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "Label '%s' element %lld is %lld, outside the %lld classes [0, %lld) "
                                "and not ignore_index (%lld)", pe_ctx_in_name(ctx, "Label", 0), (long long)r,
                                (long long)l, (long long)D, (long long)D, (long long)ignore);
    }
    return PE_OK;
}

/* [pre, D, post] around the normalized `axis` attr of t. */
static void class_view(const pe_op_ctx *ctx, const pe_tensor *t, int64_t *pre, int64_t *D, int64_t *post) {
    int64_t a = pe_ctx_int(ctx, "axis");
    if (a < 0) a += t->ndim;
    *pre = pe_dims_prod(t->dims, 0, (int)a);
    *D = t->dims[a];
    *post = pe_dims_prod(t->dims, (int)a + 1, t->ndim);
}

/* ---- softmax_with_cross_entropy ------------------------------------------------------ */

/* x, sm [pre, D, post]; loss [pre, post]; lab: hard [pre, post] or soft [pre, D, post] */
#define SWCE(SUF, T, EXP)                                                                                   \
    static void swce_##SUF(const T *x, const pe_tensor *lab, T *sm, T *loss, int64_t pre, int64_t D,        \
                           int64_t post, bool soft, int64_t ignore, int nt) {                               \
        const T *ls = soft ? (const T *)pe_tensor_data(lab) : NULL;                                         \
        PE_PAR_FOR(pre * D * post >= PE_PAR_MIN / 4 && nt > 1, r, pre * post, {                             \
            const int64_t base = (r / post) * D * post + r % post;                                          \
            const T *xr = x + base;                                                                         \
            T *sr = sm + base;                                                                              \
            T m = xr[0];                                                                                    \
            for (int64_t j = 1; j < D; j++) m = xr[j * post] > m ? xr[j * post] : m;                        \
            double s = 0;                                                                                   \
            for (int64_t j = 0; j < D; j++) {                                                               \
                const T e = EXP(xr[j * post] - m);                                                          \
                sr[j * post] = e;                                                                           \
                s += e;                                                                                     \
            }                                                                                               \
            const T inv = (T)(1.0 / s);                                                                     \
            for (int64_t j = 0; j < D; j++) sr[j * post] *= inv;                                            \
            const double lse = (double)m + log(s);                                                          \
            if (soft) {                                                                                     \
                const T *lr = ls + base;                                                                    \
                double acc = 0;                                                                             \
                for (int64_t j = 0; j < D; j++) acc += (double)lr[j * post] * (lse - (double)xr[j * post]); \
                loss[r] = (T)acc;                                                                           \
            } else {                                                                                        \
                const int64_t l = label_at(lab, r);                                                         \
                loss[r] = l == ignore ? (T)0 : (T)(lse - (double)xr[l * post]);                             \
            }                                                                                               \
        });                                                                                                 \
    }                                                                                                       \
    static void swce_grad_##SUF(const T *sm, const pe_tensor *lab, const T *g, T *dx, int64_t pre,          \
                                int64_t D, int64_t post, bool soft, int64_t ignore, int nt) {               \
        const T *ls = soft ? (const T *)pe_tensor_data(lab) : NULL;                                         \
        PE_PAR_FOR(pre * D * post >= PE_PAR_MIN && nt > 1, r, pre * post, {                                 \
            const int64_t base = (r / post) * D * post + r % post;                                          \
            const T *sr = sm + base;                                                                        \
            T *dr = dx + base;                                                                              \
            const T gr = g[r];                                                                              \
            if (soft) {                                                                                     \
                const T *lr = ls + base;                                                                    \
                double tot = 0;                                                                             \
                for (int64_t j = 0; j < D; j++) tot += lr[j * post];                                        \
                const T st = (T)tot;                                                                        \
                for (int64_t j = 0; j < D; j++) dr[j * post] = (sr[j * post] * st - lr[j * post]) * gr;     \
            } else {                                                                                        \
                const int64_t l = label_at(lab, r);                                                         \
                if (l == ignore) {                                                                          \
                    for (int64_t j = 0; j < D; j++) dr[j * post] = 0;                                       \
                } else {                                                                                    \
                    for (int64_t j = 0; j < D; j++) dr[j * post] = sr[j * post] * gr;                       \
                    dr[l * post] -= gr;                                                                     \
                }                                                                                           \
            }                                                                                               \
        });                                                                                                 \
    }
SWCE(f32, float, expf)
SWCE(f64, double, exp)

/* Logits [pre, D, post], Label -> Softmax [pre, D, post], Loss [pre, 1, post] */
pe_status pe_cpu_softmax_with_cross_entropy(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Logits"), *lab = pe_ctx_in(ctx, "Label");
    pe_tensor *sm = pe_ctx_out(ctx, "Softmax"), *loss = pe_ctx_out(ctx, "Loss");
    int64_t pre, D, post;
    class_view(ctx, x, &pre, &D, &post);
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    const int64_t ignore = pe_ctx_int(ctx, "ignore_index");
    if (sm->dtype != x->dtype || loss->dtype != x->dtype || pe_tensor_numel(sm) != pe_tensor_numel(x) ||
        pe_tensor_numel(loss) != pre * post || pe_tensor_numel(lab) != (soft ? pre * D * post : pre * post))
        return internal_mismatch(ctx);
    if (pre * post == 0) return PE_OK;
    if (D == 0) return pe_ctx_error(ctx, PE_ERR_INVALID, "Logits '%s' has no classes (dim %lld is 0)",
                                    pe_ctx_in_name(ctx, "Logits", 0), (long long)pe_ctx_int(ctx, "axis"));
    if (!soft) PE_CHECK(check_labels(ctx, lab, pre * post, D, ignore));
    if (x->dtype == PE_DTYPE_FP32)
        swce_f32(pe_tensor_data(x), lab, pe_tensor_data(sm), pe_tensor_data(loss), pre, D, post, soft, ignore,
                 ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64)
        swce_f64(pe_tensor_data(x), lab, pe_tensor_data(sm), pe_tensor_data(loss), pre, D, post, soft, ignore,
                 ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* Label, Softmax [pre, D, post], Loss@GRAD [pre, post] -> Logits@GRAD [pre, D, post] */
pe_status pe_cpu_softmax_with_cross_entropy_grad(const pe_op_ctx *ctx) {
    const pe_tensor *sm = pe_ctx_in(ctx, "Softmax"), *lab = pe_ctx_in(ctx, "Label"), *g = pe_ctx_in(ctx, "Loss@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Logits@GRAD");
    int64_t pre, D, post;
    class_view(ctx, sm, &pre, &D, &post);
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    const int64_t ignore = pe_ctx_int(ctx, "ignore_index");
    if (g->dtype != sm->dtype || dx->dtype != sm->dtype || pe_tensor_numel(dx) != pe_tensor_numel(sm) ||
        pe_tensor_numel(g) != pre * post || pe_tensor_numel(lab) != (soft ? pre * D * post : pre * post))
        return internal_mismatch(ctx);
    if (pre * post * D == 0) return PE_OK;
    if (!soft) PE_CHECK(check_labels(ctx, lab, pre * post, D, ignore));
    if (sm->dtype == PE_DTYPE_FP32)
        swce_grad_f32(pe_tensor_data(sm), lab, pe_tensor_data(g), pe_tensor_data(dx), pre, D, post, soft, ignore,
                      ctx->num_threads);
    else if (sm->dtype == PE_DTYPE_FP64)
        swce_grad_f64(pe_tensor_data(sm), lab, pe_tensor_data(g), pe_tensor_data(dx), pre, D, post, soft, ignore,
                      ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(sm->dtype));
    return PE_OK;
}

/* ---- cross_entropy: x [rows, D] probabilities -> y [rows] ----------------------------- */

#define XENT(SUF, T)                                                                                   \
    static void xent_##SUF(const T *x, const pe_tensor *lab, T *y, int64_t rows, int64_t D, bool soft, \
                           int64_t ignore, int nt) {                                                   \
        const T *ls = soft ? (const T *)pe_tensor_data(lab) : NULL;                                    \
        PE_PAR_FOR(rows * D >= PE_PAR_MIN / 4 && nt > 1, r, rows, {                                    \
            const T *xr = x + r * D;                                                                   \
            if (soft) {                                                                                \
                double acc = 0;                                                                        \
                for (int64_t j = 0; j < D; j++) acc -= (double)ls[r * D + j] * log((double)xr[j]);     \
                y[r] = (T)acc;                                                                         \
            } else {                                                                                   \
                const int64_t l = label_at(lab, r);                                                    \
                y[r] = l == ignore ? (T)0 : (T)-log((double)xr[l]);                                    \
            }                                                                                          \
        });                                                                                            \
    }                                                                                                  \
    static void xent_grad_##SUF(const T *x, const pe_tensor *lab, const T *g, T *dx, int64_t rows,     \
                                int64_t D, bool soft, int64_t ignore, int nt) {                        \
        const T *ls = soft ? (const T *)pe_tensor_data(lab) : NULL;                                    \
        PE_PAR_FOR(rows * D >= PE_PAR_MIN && nt > 1, r, rows, {                                        \
            const T *xr = x + r * D;                                                                   \
            T *dr = dx + r * D;                                                                        \
            if (soft) {                                                                                \
                for (int64_t j = 0; j < D; j++) dr[j] = -g[r] * ls[r * D + j] / xr[j];                 \
            } else {                                                                                   \
                const int64_t l = label_at(lab, r);                                                    \
                for (int64_t j = 0; j < D; j++) dr[j] = 0;                                             \
                if (l != ignore) dr[l] = -g[r] / xr[l];                                                \
            }                                                                                          \
        });                                                                                            \
    }
XENT(f32, float)
XENT(f64, double)

/* X [.., D], Label -> Y [.., 1] */
pe_status pe_cpu_cross_entropy(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *lab = pe_ctx_in(ctx, "Label");
    pe_tensor *y = pe_ctx_out(ctx, "Y");
    const int64_t D = x->ndim ? x->dims[x->ndim - 1] : 0, n = pe_tensor_numel(x);
    const int64_t rows = D ? n / D : pe_tensor_numel(y);
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    const int64_t ignore = pe_ctx_int(ctx, "ignore_index");
    if (y->dtype != x->dtype || pe_tensor_numel(y) != rows || pe_tensor_numel(lab) != (soft ? n : rows))
        return internal_mismatch(ctx);
    if (rows == 0) return PE_OK;
    if (D == 0) return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has no classes (its last dim is 0)",
                                    pe_ctx_in_name(ctx, "X", 0));
    if (!soft) PE_CHECK(check_labels(ctx, lab, rows, D, ignore));
    if (x->dtype == PE_DTYPE_FP32)
        xent_f32(pe_tensor_data(x), lab, pe_tensor_data(y), rows, D, soft, ignore, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64)
        xent_f64(pe_tensor_data(x), lab, pe_tensor_data(y), rows, D, soft, ignore, ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* X [.., D], Label, Y@GRAD [.., 1] -> X@GRAD [.., D] */
pe_status pe_cpu_cross_entropy_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *lab = pe_ctx_in(ctx, "Label"), *g = pe_ctx_in(ctx, "Y@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t D = x->ndim ? x->dims[x->ndim - 1] : 0, n = pe_tensor_numel(x);
    const int64_t rows = D ? n / D : 0;
    const bool soft = pe_ctx_bool(ctx, "soft_label");
    const int64_t ignore = pe_ctx_int(ctx, "ignore_index");
    if (g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(dx) != n || (D && pe_tensor_numel(g) != rows) ||
        (D && pe_tensor_numel(lab) != (soft ? n : rows)))
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    if (!soft) PE_CHECK(check_labels(ctx, lab, rows, D, ignore));
    if (x->dtype == PE_DTYPE_FP32)
        xent_grad_f32(pe_tensor_data(x), lab, pe_tensor_data(g), pe_tensor_data(dx), rows, D, soft, ignore,
                      ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64)
        xent_grad_f64(pe_tensor_data(x), lab, pe_tensor_data(g), pe_tensor_data(dx), rows, D, soft, ignore,
                      ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* ---- square_error_cost: x, y, out [numel] --------------------------------------------- */

#define SEC(SUF, T)                                                                                   \
    static void sec_##SUF(const T *x, const T *y, T *out, int64_t n, int nt) {                        \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, {                                                 \
            const T d = x[i] - y[i];                                                                  \
            out[i] = d * d;                                                                           \
        });                                                                                           \
    }                                                                                                 \
    static void sec_grad_##SUF(const T *x, const T *y, const T *g, T *dx, T *dy, int64_t n, int nt) { \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, {                                                 \
            const T d = 2 * (x[i] - y[i]) * g[i];                                                     \
            if (dx) dx[i] = d;                                                                        \
            if (dy) dy[i] = -d;                                                                       \
        });                                                                                           \
    }
SEC(f32, float)
SEC(f64, double)

pe_status pe_cpu_square_error_cost(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x);
    if (y->dtype != x->dtype || out->dtype != x->dtype || pe_tensor_numel(y) != n || pe_tensor_numel(out) != n)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    void *xd = pe_tensor_data(x), *yd = pe_tensor_data(y), *od = pe_tensor_data(out);
    if (x->dtype == PE_DTYPE_FP32) sec_f32(xd, yd, od, n, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64) sec_f64(xd, yd, od, n, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

pe_status pe_cpu_square_error_cost_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    const int64_t n = pe_tensor_numel(x);
    if (y->dtype != x->dtype || g->dtype != x->dtype || pe_tensor_numel(y) != n || pe_tensor_numel(g) != n ||
        (dx && (dx->dtype != x->dtype || pe_tensor_numel(dx) != n)) ||
        (dy && (dy->dtype != x->dtype || pe_tensor_numel(dy) != n)))
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    void *dxd = dx ? pe_tensor_data(dx) : NULL, *dyd = dy ? pe_tensor_data(dy) : NULL;
    if (x->dtype == PE_DTYPE_FP32)
        sec_grad_f32(pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(g), dxd, dyd, n, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64)
        sec_grad_f64(pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(g), dxd, dyd, n, ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}
