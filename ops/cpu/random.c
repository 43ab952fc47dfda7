/* ops/cpu/random.c — CPU kernels of the random ops.
 *
 * Element i of Out is a pure function of (stream key, i) — Philox4x32-10 in
 * runtime/rng.c, whose header comment gives the exact derivation — so the
 * loops are split across ctx->num_threads OpenMP threads freely (forked only
 * above PAR_ELEMS elements, decided in C: ops/cpu/par.h) and the
 * values are bitwise identical for any thread count and on any machine.
 * The key comes from the program's random_seed and the op's seed attr, or
 * the output var's name when seed is 0, so two random ops of one program
 * draw different streams and a rerun draws the same ones.
 */
#include "ops/op.h"
#include "ops/cpu/par.h"
#include "runtime/rng.h"

#include <math.h>

/* Below this many elements the loop stays on one thread. */
#define PAR_ELEMS 4096

static uint64_t stream_key(const pe_op_ctx *ctx) {
    return pe_rng_key(ctx->program_seed, pe_ctx_int(ctx, "seed"), pe_ctx_out_name(ctx, "Out", 0));
}

/* () -> out: [shape...] ~ U[min, max) */
pe_status pe_cpu_uniform_random(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int64_t n = pe_tensor_numel(out);
    uint64_t key = stream_key(ctx);
    double lo = pe_ctx_float(ctx, "min"), hi = pe_ctx_float(ctx, "max"), w = hi - lo;
    const int nt = pe_kernel_threads(ctx);
    if (out->dtype == PE_DTYPE_FP32) {
        float *o = pe_tensor_data(out);
        /* the largest float below max: the value a draw rounding up to max takes */
        float top = (float)hi;
        if ((double)top >= hi) top = nextafterf(top, -INFINITY);
        PE_PAR_FOR(n > PAR_ELEMS && nt > 1, i, n, {
            float v = (float)(lo + w * pe_rng_uniform(key, (uint64_t)i));
            o[i] = (double)v >= hi ? top : v;
        });
    } else {
        double *o = pe_tensor_data(out), top = nextafter(hi, -INFINITY);
        PE_PAR_FOR(n > PAR_ELEMS && nt > 1, i, n, {
            double v = lo + w * pe_rng_uniform(key, (uint64_t)i);
            o[i] = v >= hi ? top : v;
        });
    }
    return PE_OK;
}

/* out[i] = mean + std * draw(key, i), for both normal distributions below. */
static pe_status fill_normal(const pe_op_ctx *ctx, double (*draw)(uint64_t key, uint64_t i)) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int64_t n = pe_tensor_numel(out);
    uint64_t key = stream_key(ctx);
    double mean = pe_ctx_float(ctx, "mean"), sd = pe_ctx_float(ctx, "std");
    const int nt = pe_kernel_threads(ctx);
    if (out->dtype == PE_DTYPE_FP32) {
        float *o = pe_tensor_data(out);
        PE_PAR_FOR(n > PAR_ELEMS && nt > 1, i, n, { o[i] = (float)(mean + sd * draw(key, (uint64_t)i)); });
    } else {
        double *o = pe_tensor_data(out);
        PE_PAR_FOR(n > PAR_ELEMS && nt > 1, i, n, { o[i] = mean + sd * draw(key, (uint64_t)i); });
    }
    return PE_OK;
}

/* () -> out: [shape...] ~ N(mean, std^2) (Box-Muller) */
pe_status pe_cpu_gaussian_random(const pe_op_ctx *ctx) { return fill_normal(ctx, pe_rng_normal); }

/* () -> out: [shape...] ~ N(mean, std^2) restricted to [mean - 2 std, mean + 2 std]
 * (inverse-CDF of a uniform in [Phi(-2), Phi(2)), as Paddle) */
pe_status pe_cpu_truncated_gaussian_random(const pe_op_ctx *ctx) { return fill_normal(ctx, pe_rng_truncated_normal); }
