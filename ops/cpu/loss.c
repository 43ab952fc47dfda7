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
 *   cos_sim (rows r of X [N, D], Y row r or 0): xn = |x|, yn = |y|,
 *     out = x.y / (xn yn) (sums in double); dx = g (y / (xn yn) - out x / xn^2),
 *     dy = g (x / (xn yn) - out y / yn^2), summed over the rows in row order
 *     when Y is one row broadcast.
 *   sigmoid_cross_entropy_with_logits: out = max(x, 0) - x l + log1p(exp(-|x|)),
 *     dx = (sigmoid(x) - l) g; both 0 where (int)l == ignore_index, both
 *     divided by max(count of the other elements, 1e-5) with normalize.
 *   label_smooth: out = (1 - eps) x + eps p_j (p_j = 1 / D without PriorDist),
 *     dx = (1 - eps) g.
 */
#include "ops/cpu/par.h"
#include "ops/op.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

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

/* ---- cos_sim: x [n, d], y [m, d] (m = n or 1) -> out, xn [n], yn [m] ------------------------ */

#define COS_SIM(SUF, T)                                                                                    \
    static void cos_sim_##SUF(const T *x, const T *y, T *out, T *xn, T *yn, int64_t n, int64_t m, int64_t d, \
                              int nt) {                                                                    \
        PE_PAR_FOR(n * d >= PE_PAR_MIN && nt > 1, r, n, {                                                  \
            const T *xr = x + r * d, *yr = y + (m == 1 ? 0 : r) * d;                                       \
            double xx = 0, yy = 0, xy = 0;                                                                 \
            for (int64_t j = 0; j < d; j++) {                                                              \
                xx += (double)xr[j] * xr[j];                                                               \
                yy += (double)yr[j] * yr[j];                                                               \
                xy += (double)xr[j] * yr[j];                                                               \
            }                                                                                              \
            const double a = sqrt(xx), b = sqrt(yy);                                                       \
            xn[r] = (T)a;                                                                                  \
            if (m != 1 || r == 0) yn[m == 1 ? 0 : r] = (T)b;                                               \
            out[r] = (T)(xy / (a * b));                                                                    \
        });                                                                                                \
        if (n == 0 && m == 1) {                                                                            \
            double yy = 0;                                                                                 \
            for (int64_t j = 0; j < d; j++) yy += (double)y[j] * y[j];                                     \
            yn[0] = (T)sqrt(yy);                                                                           \
        }                                                                                                  \
    }                                                                                                      \
    static void cos_sim_grad_##SUF(const T *x, const T *y, const T *out, const T *xn, const T *yn,          \
                                   const T *g, T *dx, T *dy, int64_t n, int64_t m, int64_t d, int nt) {     \
        PE_PAR_FOR(n * d >= PE_PAR_MIN && nt > 1 && (m != 1 || !dy), r, n, {                              \
            const int64_t yrow = m == 1 ? 0 : r;                                                           \
            const T *xr = x + r * d, *yr = y + yrow * d;                                                   \
            const double a = xn[r], b = yn[yrow], o = out[r], gr = g[r];                                   \
            for (int64_t j = 0; j < d; j++) {                                                              \
                if (dx) dx[r * d + j] = (T)(gr * (yr[j] / (a * b) - o * xr[j] / (a * a)));                 \
                if (dy && m != 1) dy[r * d + j] = (T)(gr * (xr[j] / (a * b) - o * yr[j] / (b * b)));       \
            }                                                                                              \
        });                                                                                                \
        if (dy && m == 1) {                                                                                \
            for (int64_t j = 0; j < d; j++) {                                                              \
                double acc = 0;                                                                            \
                for (int64_t r = 0; r < n; r++) {                                                          \
                    const double a = xn[r], b = yn[0];                                                     \
                    acc += (double)g[r] * (x[r * d + j] / (a * b) - (double)out[r] * y[j] / (b * b));      \
                }                                                                                          \
                dy[j] = (T)acc;                                                                            \
            }                                                                                              \
        }                                                                                                  \
    }
COS_SIM(f32, float)
COS_SIM(f64, double)

/* X [N, ..], Y [M, ..] -> Out [N, 1], XNorm [N, 1], YNorm [M, 1] */
pe_status pe_cpu_cos_sim(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *xn = pe_ctx_out(ctx, "XNorm"), *yn = pe_ctx_out(ctx, "YNorm");
    const int64_t n = x->dims[0], m = y->dims[0], d = pe_dims_prod(x->dims, 1, x->ndim);
    if (y->dtype != x->dtype || out->dtype != x->dtype || pe_tensor_numel(out) != n || pe_tensor_numel(xn) != n ||
        pe_tensor_numel(yn) != m || pe_tensor_numel(y) != m * d)
        return internal_mismatch(ctx);
    if (n == 0 && m == 0) return PE_OK;
    if (x->dtype == PE_DTYPE_FP32)
        cos_sim_f32(pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), pe_tensor_data(xn), pe_tensor_data(yn),
                    n, m, d, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64)
        cos_sim_f64(pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), pe_tensor_data(xn), pe_tensor_data(yn),
                    n, m, d, ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* X, Y, Out, XNorm, YNorm, Out@GRAD -> X@GRAD?, Y@GRAD? */
pe_status pe_cpu_cos_sim_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y"), *out = pe_ctx_in(ctx, "Out");
    const pe_tensor *xn = pe_ctx_in(ctx, "XNorm"), *yn = pe_ctx_in(ctx, "YNorm"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    const int64_t n = x->dims[0], m = y->dims[0], d = pe_dims_prod(x->dims, 1, x->ndim);
    if (g->dtype != x->dtype || pe_tensor_numel(g) != n || pe_tensor_numel(out) != n || pe_tensor_numel(xn) != n ||
        pe_tensor_numel(yn) != m || (dx && (dx->dtype != x->dtype || pe_tensor_numel(dx) != n * d)) ||
        (dy && (dy->dtype != x->dtype || pe_tensor_numel(dy) != m * d)))
        return internal_mismatch(ctx);
    if (dy && pe_tensor_nbytes(dy)) memset(pe_tensor_data(dy), 0, pe_tensor_nbytes(dy));
    if (n * d == 0) return PE_OK;
    void *dxd = dx ? pe_tensor_data(dx) : NULL, *dyd = dy ? pe_tensor_data(dy) : NULL;
    if (x->dtype == PE_DTYPE_FP32)
        cos_sim_grad_f32(pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), pe_tensor_data(xn),
                         pe_tensor_data(yn), pe_tensor_data(g), dxd, dyd, n, m, d, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64)
        cos_sim_grad_f64(pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), pe_tensor_data(xn),
                         pe_tensor_data(yn), pe_tensor_data(g), dxd, dyd, n, m, d, ctx->num_threads);
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* ---- sigmoid_cross_entropy_with_logits: x, label, out [numel] ------------------------------ */

#define SIGCE(SUF, T)                                                                                    \
    static double sigce_norm_##SUF(const T *l, int64_t n, int64_t ignore) {                              \
        int64_t c = 0;                                                                                   \
        for (int64_t i = 0; i < n; i++) c += (int64_t)l[i] != ignore;                                    \
        return c > 0 ? (double)c : 1e-5;                                                                 \
    }                                                                                                    \
    static void sigce_##SUF(const T *x, const T *l, T *out, int64_t n, int64_t ignore, double inv, int nt) { \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, {                                                    \
            const double v = x[i];                                                                       \
            out[i] = (int64_t)l[i] == ignore                                                             \
                         ? (T)0                                                                          \
                         : (T)(((v > 0 ? v : 0) - v * (double)l[i] + log1p(exp(-fabs(v)))) * inv);       \
        });                                                                                              \
    }                                                                                                    \
    static void sigce_grad_##SUF(const T *x, const T *l, const T *g, T *dx, int64_t n, int64_t ignore,   \
                                 double inv, int nt) {                                                   \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, {                                                    \
            const double s = 1.0 / (1.0 + exp(-(double)x[i]));                                           \
            dx[i] = (int64_t)l[i] == ignore ? (T)0 : (T)((s - (double)l[i]) * (double)g[i] * inv);       \
        });                                                                                              \
    }
SIGCE(f32, float)
SIGCE(f64, double)

/* X [..], Label [..] -> Out [..] */
pe_status pe_cpu_sigmoid_cross_entropy_with_logits(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *lab = pe_ctx_in(ctx, "Label");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x), ignore = pe_ctx_int(ctx, "ignore_index");
    const bool norm = pe_ctx_bool(ctx, "normalize");
    if (lab->dtype != x->dtype || out->dtype != x->dtype || pe_tensor_numel(lab) != n || pe_tensor_numel(out) != n)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    if (x->dtype == PE_DTYPE_FP32) {
        const double inv = norm ? 1.0 / sigce_norm_f32(pe_tensor_data(lab), n, ignore) : 1.0;
        sigce_f32(pe_tensor_data(x), pe_tensor_data(lab), pe_tensor_data(out), n, ignore, inv, ctx->num_threads);
    } else if (x->dtype == PE_DTYPE_FP64) {
        const double inv = norm ? 1.0 / sigce_norm_f64(pe_tensor_data(lab), n, ignore) : 1.0;
        sigce_f64(pe_tensor_data(x), pe_tensor_data(lab), pe_tensor_data(out), n, ignore, inv, ctx->num_threads);
    } else {
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    }
    return PE_OK;
}

/* X, Label, Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_cpu_sigmoid_cross_entropy_with_logits_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *lab = pe_ctx_in(ctx, "Label"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(x), ignore = pe_ctx_int(ctx, "ignore_index");
    const bool norm = pe_ctx_bool(ctx, "normalize");
    if (lab->dtype != x->dtype || g->dtype != x->dtype || dx->dtype != x->dtype || pe_tensor_numel(lab) != n ||
        pe_tensor_numel(g) != n || pe_tensor_numel(dx) != n)
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    if (x->dtype == PE_DTYPE_FP32) {
        const double inv = norm ? 1.0 / sigce_norm_f32(pe_tensor_data(lab), n, ignore) : 1.0;
        sigce_grad_f32(pe_tensor_data(x), pe_tensor_data(lab), pe_tensor_data(g), pe_tensor_data(dx), n, ignore, inv,
                       ctx->num_threads);
    } else if (x->dtype == PE_DTYPE_FP64) {
        const double inv = norm ? 1.0 / sigce_norm_f64(pe_tensor_data(lab), n, ignore) : 1.0;
        sigce_grad_f64(pe_tensor_data(x), pe_tensor_data(lab), pe_tensor_data(g), pe_tensor_data(dx), n, ignore, inv,
                       ctx->num_threads);
    } else {
        return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    }
    return PE_OK;
}

/* ---- label_smooth: x, out [rows, d], prior [d] ------------------------------------------------ */

#define LSMOOTH(SUF, T)                                                                                \
    static void lsmooth_##SUF(const T *x, const T *p, T *out, int64_t n, int64_t d, double eps, int nt) { \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, {                                                  \
            out[i] = (T)((1.0 - eps) * (double)x[i] + eps * (p ? (double)p[i % d] : 1.0 / (double)d)); \
        });                                                                                            \
    }                                                                                                  \
    static void lsmooth_grad_##SUF(const T *g, T *dx, int64_t n, double eps, int nt) {                 \
        PE_PAR_FOR(n >= PE_PAR_MIN && nt > 1, i, n, { dx[i] = (T)((1.0 - eps) * (double)g[i]); });    \
    }
LSMOOTH(f32, float)
LSMOOTH(f64, double)

/* X [.., D], PriorDist? [D] -> Out [.., D] */
pe_status pe_cpu_label_smooth(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *p = pe_ctx_in(ctx, "PriorDist");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(x), d = x->ndim ? x->dims[x->ndim - 1] : 1;
    const double eps = pe_ctx_float(ctx, "epsilon");
    if (out->dtype != x->dtype || pe_tensor_numel(out) != n || (p && (p->dtype != x->dtype || pe_tensor_numel(p) != d)))
        return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    const void *pd = p ? pe_tensor_data(p) : NULL;
    if (x->dtype == PE_DTYPE_FP32) lsmooth_f32(pe_tensor_data(x), pd, pe_tensor_data(out), n, d, eps, ctx->num_threads);
    else if (x->dtype == PE_DTYPE_FP64) lsmooth_f64(pe_tensor_data(x), pd, pe_tensor_data(out), n, d, eps, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(x->dtype));
    return PE_OK;
}

/* Out@GRAD [..] -> X@GRAD [..] */
pe_status pe_cpu_label_smooth_grad(const pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    const int64_t n = pe_tensor_numel(g);
    if (dx->dtype != g->dtype || pe_tensor_numel(dx) != n) return internal_mismatch(ctx);
    if (n == 0) return PE_OK;
    const double eps = pe_ctx_float(ctx, "epsilon");
    if (g->dtype == PE_DTYPE_FP32) lsmooth_grad_f32(pe_tensor_data(g), pe_tensor_data(dx), n, eps, ctx->num_threads);
    else if (g->dtype == PE_DTYPE_FP64) lsmooth_grad_f64(pe_tensor_data(g), pe_tensor_data(dx), n, eps, ctx->num_threads);
    else return pe_ctx_error(ctx, PE_ERR_INVALID, "dtype %s is not supported", pe_dtype_name(g->dtype));
    return PE_OK;
}
