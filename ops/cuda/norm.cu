/* ops/cuda/norm.cu — CUDA kernels of group_norm, instance_norm and their
 * grads, float32 and float64, with the CPU kernels' formulas (ops/cpu/norm.c;
 * geometry ops/norm.h): X viewed as [N, G, M], M = C/G * S; per (n, g) the
 * mean and the biased variance in double, inv = 1 / sqrt(var + eps),
 * Y = x * a + b with a = Scale[c] * inv, b = Bias[c] - mean * a;
 * group_norm keeps Mean / Variance [N, G], instance_norm SavedMean /
 * SavedVariance [N * C] (the latter inv). Grads per (n, g), dyh = dy * Scale[c]:
 *   X@GRAD = inv * (dyh - sum(dyh) / M - xhat * sum(dyh * xhat) / M),
 * and per channel Scale@GRAD = sum dy * xhat, Bias@GRAD = sum dy.
 *
 * How: one block per (n, g) group (the statistics and X@GRAD) or per channel
 * (Scale@GRAD, Bias@GRAD), grid-stride over them; each thread accumulates
 * its strided elements in double, then a shared-memory tree: a fixed order,
 * so a run repeats bit for bit (sums may differ from the CPU's serial ones in
 * the last bits of double). The elementwise expressions are rounded one
 * operation at a time (__dmul_rn / __dadd_rn / __dsub_rn) as the CPU computes
 * them, never contracted into FMAs.
 *
 * Why: GAN / detection / style-transfer nets normalise with these on the GPU
 * place.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/norm.h"

namespace {

/* Sums a and b over the block (blockDim.x == PE_CUDA_THREADS) in a fixed
 * tree order; every thread gets the totals. */
__device__ void block_sum2(double &a, double &b, double (*sh)[PE_CUDA_THREADS]) {
    const int t = threadIdx.x;
    sh[0][t] = a;
    sh[1][t] = b;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (t < w) {
            sh[0][t] += sh[0][t + w];
            sh[1][t] += sh[1][t + w];
        }
        __syncthreads();
    }
    a = sh[0][0];
    b = sh[1][0];
    __syncthreads();
}

/* x: [N, C, S], scale?, bias?: [C] -> y like x; mean?, var?: [N * G] (var: the variance, or
 * for instance_norm 1 / sqrt(var + eps)) */
template <typename T>
__global__ void k_gnorm_fwd(pe_gnorm_geom g, const T *x, const T *scale, const T *bias, T *y, T *mean, T *var) {
    __shared__ double sh[2][PE_CUDA_THREADS];
    const int64_t cg = g.c / g.groups, M = cg * g.s, NG = g.n * g.groups;
    for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
        const T *xp = x + ng * M;
        T *yp = y + ng * M;
        double sum = 0, unused = 0;
        for (int64_t i = threadIdx.x; i < M; i += blockDim.x) sum += (double)xp[i];
        block_sum2(sum, unused, sh);
        const double mu = M ? sum / (double)M : 0;
        double sq = 0;
        for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
            const double d = (double)xp[i] - mu;
            sq = __dadd_rn(sq, __dmul_rn(d, d));
        }
        unused = 0;
        block_sum2(sq, unused, sh);
        const double v = M ? sq / (double)M : 0, inv = 1.0 / sqrt(v + g.eps);
        const int64_t c0 = ng % g.groups * cg;
        for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
            const int64_t c = c0 + i / g.s;
            const double a = (scale ? (double)scale[c] : 1.0) * inv;
            const double b = __dsub_rn(bias ? (double)bias[c] : 0.0, __dmul_rn(mu, a));
            yp[i] = (T)__dadd_rn(__dmul_rn((double)xp[i], a), b);
        }
        if (threadIdx.x == 0) {
            if (mean) mean[ng] = (T)mu;
            if (var) var[ng] = (T)(g.instance ? inv : v);
        }
    }
}

/* The group's inverse std from the saved statistic. */
template <typename T> __device__ inline double inv_std(const pe_gnorm_geom &g, const T *stat, int64_t ng) {
    return g.instance ? (double)stat[ng] : 1.0 / sqrt((double)stat[ng] + g.eps);
}

/* x, dy: [N, C, S]; scale?: [C]; mean, stat: [N * G] -> dx like x */
template <typename T>
__global__ void k_gnorm_dx(pe_gnorm_geom g, const T *x, const T *scale, const T *mean, const T *stat, const T *dy,
                           T *dx) {
    __shared__ double sh[2][PE_CUDA_THREADS];
    const int64_t cg = g.c / g.groups, M = cg * g.s, NG = g.n * g.groups;
    for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
        const T *xp = x + ng * M, *dyp = dy + ng * M;
        T *dxp = dx + ng * M;
        const double mu = mean[ng], inv = inv_std(g, stat, ng);
        const int64_t c0 = ng % g.groups * cg;
        double s1 = 0, s2 = 0;
        for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
            const double sc = scale ? (double)scale[c0 + i / g.s] : 1.0;
            const double d = (double)dyp[i] * sc;
            s1 += d;
            s2 = __dadd_rn(s2, __dmul_rn(__dmul_rn(d, (double)xp[i] - mu), inv));
        }
        block_sum2(s1, s2, sh);
        s1 /= (double)M;
        s2 /= (double)M;
        for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
            const double sc = scale ? (double)scale[c0 + i / g.s] : 1.0;
            const double t = __dsub_rn(__dsub_rn(__dmul_rn((double)dyp[i], sc), s1),
                                       __dmul_rn(__dmul_rn((double)xp[i] - mu, inv), s2));
            dxp[i] = (T)__dmul_rn(inv, t);
        }
    }
}

/* x, dy: [N, C, S]; mean, stat: [N * G] -> dscale?, dbias?: [C] */
template <typename T>
__global__ void k_gnorm_dparam(pe_gnorm_geom g, const T *x, const T *mean, const T *stat, const T *dy, T *dscale,
                               T *dbias) {
    __shared__ double sh[2][PE_CUDA_THREADS];
    const int64_t cg = g.c / g.groups, NS = g.n * g.s;
    for (int64_t c = blockIdx.x; c < g.c; c += gridDim.x) {
        double sdy = 0, sdyx = 0;
        for (int64_t t = threadIdx.x; t < NS; t += blockDim.x) {
            const int64_t n = t / g.s, s = t % g.s, ng = n * g.groups + c / cg;
            const double mu = mean[ng], inv = inv_std(g, stat, ng);
            const int64_t i = (n * g.c + c) * g.s + s;
            const double d = dy[i];
            sdy += d;
            sdyx = __dadd_rn(sdyx, __dmul_rn(__dmul_rn(d, (double)x[i] - mu), inv));
        }
        block_sum2(sdy, sdyx, sh);
        if (threadIdx.x == 0) {
            if (dscale) dscale[c] = (T)sdyx;
            if (dbias) dbias[c] = (T)sdy;
        }
    }
}

template <typename T> const T *cdata_or_null(const pe_tensor *t) { return t ? (const T *)pe_tensor_data(t) : nullptr; }
template <typename T> T *data_or_null(pe_tensor *t) { return t ? (T *)pe_tensor_data(t) : nullptr; }

} // namespace

extern "C" {

/* X: [N, C, ...], Scale?, Bias?: [C] -> Y like X; Mean, Variance: [N, G] (group_norm) or
 * SavedMean?, SavedVariance?: [N * C] (instance_norm) */
pe_status pe_cuda_gnorm(const pe_op_ctx *ctx) {
    pe_gnorm_geom g;
    PE_CHECK(pe_gnorm_geom_get(ctx, &g));
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const int64_t ng = g.n * g.groups;
    if (ng == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    pe_tensor *mean = pe_ctx_out(ctx, g.instance ? "SavedMean" : "Mean");
    pe_tensor *var = pe_ctx_out(ctx, g.instance ? "SavedVariance" : "Variance");
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
        k_gnorm_fwd<T><<<pe_cuda_blocks(ng * PE_CUDA_THREADS), PE_CUDA_THREADS, 0, s>>>(
            g, (const T *)pe_tensor_data(x), cdata_or_null<T>(pe_ctx_in(ctx, "Scale")),
            cdata_or_null<T>(pe_ctx_in(ctx, "Bias")), (T *)pe_tensor_data(pe_ctx_out(ctx, "Y")),
            data_or_null<T>(mean), data_or_null<T>(var)));
    return pe_cuda_check_launch(ctx);
}

/* X, Scale?, Bias?: [C], the statistics ([N, G] or [N * C]), Y@GRAD like X ->
 * X@GRAD? like X, Scale@GRAD?, Bias@GRAD?: [C] */
pe_status pe_cuda_gnorm_grad(const pe_op_ctx *ctx) {
    pe_gnorm_geom g;
    PE_CHECK(pe_gnorm_geom_get(ctx, &g));
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const pe_tensor *mean = pe_ctx_in(ctx, g.instance ? "SavedMean" : "Mean");
    const pe_tensor *stat = pe_ctx_in(ctx, g.instance ? "SavedVariance" : "Variance");
    const pe_tensor *dy = pe_ctx_in(ctx, "Y@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *ds = pe_ctx_out(ctx, "Scale@GRAD"), *db = pe_ctx_out(ctx, "Bias@GRAD");
    const int64_t ng = g.n * g.groups;
    const bool want_dx = dx && pe_tensor_numel(x) > 0 && ng > 0, want_dp = (ds || db) && g.c > 0;
    if (!want_dx && !want_dp) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        const T *xd = (const T *)pe_tensor_data(x), *md = (const T *)pe_tensor_data(mean);
        const T *sd = (const T *)pe_tensor_data(stat), *dyd = (const T *)pe_tensor_data(dy);
        if (want_dx)
            k_gnorm_dx<T><<<pe_cuda_blocks(ng * PE_CUDA_THREADS), PE_CUDA_THREADS, 0, s>>>(
                g, xd, cdata_or_null<T>(pe_ctx_in(ctx, "Scale")), md, sd, dyd, (T *)pe_tensor_data(dx));
        if (want_dp)
            k_gnorm_dparam<T><<<pe_cuda_blocks(g.c * PE_CUDA_THREADS), PE_CUDA_THREADS, 0, s>>>(
                g, xd, md, sd, dyd, data_or_null<T>(ds), data_or_null<T>(db));
    });
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
