/* ops/cpu/norm.c — CPU kernels of group_norm, instance_norm and their
 * grads, float32 and float64.
 *
 * X is viewed as [N, G, M] with M = C/G * S (instance_norm: G = C). For each
 * (n, g): mean and the biased variance over its M values (in double),
 * xhat = (x - mean) * inv, inv = 1 / sqrt(var + eps), Y = xhat * Scale[c] +
 * Bias[c] (1 and 0 when absent). group_norm saves Mean / Variance [N, G]
 * (the variance itself), instance_norm SavedMean / SavedVariance [N * C]
 * (the latter inv), as Paddle does.
 * Grads, per (n, g), with dyh = dy * Scale[c]:
 *   X@GRAD = inv * (dyh - sum(dyh) / M - xhat * sum(dyh * xhat) / M),
 * and per channel Scale@GRAD = sum over n, s of dy * xhat, Bias@GRAD = sum dy.
 * Every (n, g) group, and every channel of the parameter gradients, belongs
 * to one thread: results do not depend on the thread count.
 */
#include "ops/cpu/par.h"
#include "ops/norm.h"

#include <math.h>
#include <string.h>

#define PE_GNORM_LOOPS(T, SUF)                                                                                \
    /* x: [N, C, S], scale?, bias?: [C] -> y like x; mean, var: [N * G] (var: variance or, instance,     \
     * inverse std; each NULL: not kept) */                                                                 \
    static void gnorm_fwd_##SUF(const pe_gnorm_geom *g, const T *x, const T *scale, const T *bias, T *y,     \
                                T *mean, T *var, int nt) {                                                  \
        const int64_t cg = g->groups ? g->c / g->groups : 0, M = cg * g->s;                                 \
        PE_PAR_FOR(g->n * g->c * g->s >= PE_PAR_MIN && nt > 1, ng, g->n * g->groups, {                      \
            const T *xp = x + ng * M;                                                                        \
            T *yp = y + ng * M;                                                                              \
            double sum = 0, sq = 0;                                                                          \
            for (int64_t i = 0; i < M; i++) sum += xp[i];                                                    \
            const double mu = M ? sum / (double)M : 0;                                                       \
            for (int64_t i = 0; i < M; i++) sq += ((double)xp[i] - mu) * ((double)xp[i] - mu);               \
            const double v = M ? sq / (double)M : 0, inv = 1.0 / sqrt(v + g->eps);                           \
            const int64_t c0 = ng % g->groups * cg;                                                          \
            for (int64_t ci = 0; ci < cg; ci++) {                                                            \
                const double a = (scale ? (double)scale[c0 + ci] : 1.0) * inv;                               \
                const double b = (bias ? (double)bias[c0 + ci] : 0.0) - mu * a;                              \
                for (int64_t s = 0; s < g->s; s++) yp[ci * g->s + s] = (T)(xp[ci * g->s + s] * a + b);       \
            }                                                                                                \
            if (mean) mean[ng] = (T)mu;                                                                      \
            if (var) var[ng] = (T)(g->instance ? inv : v);                                                   \
        });                                                                                                  \
    }                                                                                                        \
                                                                                                             \
    /* x, dy: [N, C, S]; mean, stat: [N * G] (stat: variance, or inverse std for instance_norm) ->        \
     * dx?, dscale?, dbias? */                                                                              \
    static void gnorm_bwd_##SUF(const pe_gnorm_geom *g, const T *x, const T *scale, const T *mean,          \
                                const T *stat, const T *dy, T *dx, T *dscale, T *dbias, int nt) {            \
        const int64_t cg = g->groups ? g->c / g->groups : 0, M = cg * g->s;                                 \
        const bool par = g->n * g->c * g->s >= PE_PAR_MIN && nt > 1;                                        \
        if (dx) {                                                                                            \
            PE_PAR_FOR(par, ng, g->n * g->groups, {                                                          \
                const T *xp = x + ng * M, *dyp = dy + ng * M;                                                \
                T *dxp = dx + ng * M;                                                                        \
                const double mu = mean[ng];                                                                  \
                const double inv = g->instance ? (double)stat[ng] : 1.0 / sqrt((double)stat[ng] + g->eps);   \
                const int64_t c0 = ng % g->groups * cg;                                                      \
                double s1 = 0, s2 = 0;                                                                       \
                for (int64_t ci = 0; ci < cg; ci++) {                                                        \
                    const double sc = scale ? (double)scale[c0 + ci] : 1.0;                                  \
                    for (int64_t s = 0; s < g->s; s++) {                                                     \
                        const int64_t i = ci * g->s + s;                                                     \
                        const double d = dyp[i] * sc;                                                        \
                        s1 += d;                                                                             \
                        s2 += d * ((double)xp[i] - mu) * inv;                                                \
                    }                                                                                        \
                }                                                                                            \
                s1 /= (double)M;                                                                             \
                s2 /= (double)M;                                                                             \
                for (int64_t ci = 0; ci < cg; ci++) {                                                        \
                    const double sc = scale ? (double)scale[c0 + ci] : 1.0;                                  \
                    for (int64_t s = 0; s < g->s; s++) {                                                     \
                        const int64_t i = ci * g->s + s;                                                     \
                        dxp[i] = (T)(inv * (dyp[i] * sc - s1 - ((double)xp[i] - mu) * inv * s2));            \
                    }                                                                                        \
                }                                                                                            \
            });                                                                                              \
        }                                                                                                    \
        if (dscale || dbias) {                                                                               \
            PE_PAR_FOR(par, c, g->c, {                                                                       \
                double sdy = 0, sdyx = 0;                                                                    \
                for (int64_t n = 0; n < g->n; n++) {                                                         \
                    const int64_t ng = n * g->groups + c / cg;                                               \
                    const double mu = mean[ng];                                                              \
                    const double inv = g->instance ? (double)stat[ng] : 1.0 / sqrt((double)stat[ng] + g->eps); \
                    const T *xp = x + (n * g->c + c) * g->s, *dyp = dy + (n * g->c + c) * g->s;              \
                    for (int64_t s = 0; s < g->s; s++) {                                                     \
                        sdy += dyp[s];                                                                       \
                        sdyx += dyp[s] * ((double)xp[s] - mu) * inv;                                         \
                    }                                                                                        \
                }                                                                                            \
                if (dscale) dscale[c] = (T)sdyx;                                                             \
                if (dbias) dbias[c] = (T)sdy;                                                                \
            });                                                                                              \
        }                                                                                                    \
    }

PE_GNORM_LOOPS(float, f32)
PE_GNORM_LOOPS(double, f64)

static void *data_or_null(const pe_tensor *t) { return t ? pe_tensor_data(t) : NULL; }

/* X: [N, C, ...], Scale?, Bias?: [C] -> Y like X; Mean, Variance: [N, G] (group_norm) or
 * SavedMean?, SavedVariance?: [N * C] (instance_norm) */
pe_status pe_cpu_gnorm(const pe_op_ctx *ctx) {
    pe_gnorm_geom g;
    PE_CHECK(pe_gnorm_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    void *mean = data_or_null(pe_ctx_out(ctx, g.instance ? "SavedMean" : "Mean"));
    void *var = data_or_null(pe_ctx_out(ctx, g.instance ? "SavedVariance" : "Variance"));
    void *sc = data_or_null(pe_ctx_in(ctx, "Scale")), *bi = data_or_null(pe_ctx_in(ctx, "Bias"));
    void *y = pe_tensor_data(pe_ctx_out(ctx, "Y"));
    const int nt = pe_kernel_threads(ctx);
    if (x->dtype == PE_DTYPE_FP64) gnorm_fwd_f64(&g, pe_tensor_data(x), sc, bi, y, mean, var, nt);
    else gnorm_fwd_f32(&g, pe_tensor_data(x), sc, bi, y, mean, var, nt);
    return PE_OK;
}

/* X, Scale?, Bias?: [C], the statistics ([N, G] or [N * C]), Y@GRAD like X ->
 * X@GRAD? like X, Scale@GRAD?, Bias@GRAD?: [C] */
pe_status pe_cpu_gnorm_grad(const pe_op_ctx *ctx) {
    pe_gnorm_geom g;
    PE_CHECK(pe_gnorm_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const void *mean = pe_tensor_data(pe_ctx_in(ctx, g.instance ? "SavedMean" : "Mean"));
    const void *stat = pe_tensor_data(pe_ctx_in(ctx, g.instance ? "SavedVariance" : "Variance"));
    const void *sc = data_or_null(pe_ctx_in(ctx, "Scale")), *dy = pe_tensor_data(pe_ctx_in(ctx, "Y@GRAD"));
    void *dx = data_or_null(pe_ctx_out(ctx, "X@GRAD")), *ds = data_or_null(pe_ctx_out(ctx, "Scale@GRAD"));
    void *db = data_or_null(pe_ctx_out(ctx, "Bias@GRAD"));
    const int nt = pe_kernel_threads(ctx);
    if (x->dtype == PE_DTYPE_FP64) gnorm_bwd_f64(&g, pe_tensor_data(x), sc, mean, stat, dy, dx, ds, db, nt);
    else gnorm_bwd_f32(&g, pe_tensor_data(x), sc, mean, stat, dy, dx, ds, db, nt);
    return PE_OK;
}
