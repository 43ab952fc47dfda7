/* ops/cuda/random.cu — CUDA kernels of the random ops: uniform_random,
 * gaussian_random, truncated_gaussian_random (fp32, fp64).
 *
 * How: element i of Out is a pure function of (stream key, i) — the same
 * Philox4x32-10 block and the same map to a uniform, normal or truncated
 * normal as the CPU kernels (ops/cpu/random.c), called from the shared
 * inline core runtime/rng_core.h. The key is derived on the host exactly as
 * on the CPU (pe_rng_key of the program seed, the seed attr, the Out var's
 * name) and passed by value; one grid-stride thread per element. The
 * scaling is done in double and rounded once to the output dtype, the
 * product and sum rounded separately (__dmul_rn/__dadd_rn) as the CPU does
 * them; a uniform fp32 draw that rounds up to max becomes the largest float
 * below max (computed on the host, as on the CPU).
 *
 * Why: a seed gives the same values on a GPU place as on the CPU, so a
 * program initializes its parameters identically wherever it runs. Uniforms
 * are bit-identical; normals go through the device's log/cos/sqrt, which may
 * differ from glibc's in the last double bit (fp32 outputs: practically never
 * visible).
 */
#include "ops/cuda/cuda_ops.h"
#include "runtime/rng.h"
#include "runtime/rng_core.h"

#include <cmath>

namespace {

/* out: [n] ~ U[lo, hi): v = lo + w u rounded to T; v >= hi -> top */
template <typename T>
__global__ void k_uniform(T *out, int64_t n, uint64_t key, double lo, double w, double hi, T top) {
    PE_CUDA_LOOP(i, n) {
        uint32_t b[4];
        pe_rng_core_block(key, (uint64_t)i, b);
        const T v = (T)__dadd_rn(lo, __dmul_rn(w, pe_rng_core_uniform(b)));
        out[i] = (double)v >= hi ? top : v;
    }
}

/* out: [n] = mean + sd z rounded to T, z standard normal (Truncated: to [-2, 2]) */
template <typename T, bool Truncated>
__global__ void k_normal(T *out, int64_t n, uint64_t key, double mean, double sd) {
    PE_CUDA_LOOP(i, n) {
        uint32_t b[4];
        pe_rng_core_block(key, (uint64_t)i, b);
        const double z = Truncated ? pe_rng_core_truncated_normal(b) : pe_rng_core_normal(b);
        out[i] = (T)__dadd_rn(mean, __dmul_rn(sd, z));
    }
}

/* The CPU kernels' stream key. */
uint64_t stream_key(const pe_op_ctx *ctx) {
    return pe_rng_key(ctx->program_seed, pe_ctx_int(ctx, "seed"), pe_ctx_out_name(ctx, "Out", 0));
}

template <bool Truncated> pe_status fill_normal(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(out);
    if (n == 0) return PE_OK;
    const uint64_t key = stream_key(ctx);
    const double mean = pe_ctx_float(ctx, "mean"), sd = pe_ctx_float(ctx, "std");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CUDA_FLOAT_TYPES(ctx, out->dtype, "Out", T,
        k_normal<T, Truncated><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((T *)pe_tensor_data(out), n, key, mean,
                                                                             sd));
    return pe_cuda_check_launch(ctx);
}

} // namespace

extern "C" {

/* () -> Out: [shape...] ~ U[min, max) */
pe_status pe_cuda_uniform_random(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(out);
    if (n == 0) return PE_OK;
    const uint64_t key = stream_key(ctx);
    const double lo = pe_ctx_float(ctx, "min"), hi = pe_ctx_float(ctx, "max"), w = hi - lo;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const unsigned g = pe_cuda_blocks(n);
    if (out->dtype == PE_DTYPE_FP32) {
        /* the largest float below max: the value a draw rounding up to max takes */
        float top = (float)hi;
        if ((double)top >= hi) top = std::nextafter(top, -INFINITY);
        k_uniform<float><<<g, PE_CUDA_THREADS, 0, s>>>((float *)pe_tensor_data(out), n, key, lo, w, hi, top);
    } else if (out->dtype == PE_DTYPE_FP64) {
        k_uniform<double><<<g, PE_CUDA_THREADS, 0, s>>>((double *)pe_tensor_data(out), n, key, lo, w, hi,
                                                        std::nextafter(hi, -INFINITY));
    } else {
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "Out has dtype %s; supported: float32, float64",
                            pe_dtype_name(out->dtype));
    }
    return pe_cuda_check_launch(ctx);
}

/* () -> Out: [shape...] ~ N(mean, std^2) (Box-Muller) */
pe_status pe_cuda_gaussian_random(const pe_op_ctx *ctx) { return fill_normal<false>(ctx); }

/* () -> Out: [shape...] ~ N(mean, std^2) restricted to [mean - 2 std, mean + 2 std] */
pe_status pe_cuda_truncated_gaussian_random(const pe_op_ctx *ctx) { return fill_normal<true>(ctx); }

} // extern "C"
