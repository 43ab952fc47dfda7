/* ops/random.c — shape inference of the random ops: uniform_random,
 * gaussian_random, truncated_gaussian_random.
 *
 * They have no inputs: Out gets the shape attr and a float dtype (fp32 or
 * fp64, as Paddle's CPU kernels). The distribution attrs are validated here
 * (min < max as Paddle enforces; std >= 0 and finite parameters), so the
 * kernels in ops/cpu/random.c only draw numbers.
 */
#include "ops/op.h"

#include <math.h>

/* () -> out: [shape...], dtype fp32|fp64 */
pe_status pe_infer_random(pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!out) return pe_ctx_error(ctx, PE_ERR_INVALID, "Out must be given");
    int64_t dt = pe_ctx_int(ctx, "dtype");
    if (dt != PE_DTYPE_FP32 && dt != PE_DTYPE_FP64)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "dtype = %lld; random ops produce 0 (float32) or 1 (float64)",
                            (long long)dt);
    int n;
    const int64_t *shape = pe_ctx_ints(ctx, "shape", &n);
    if (n > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "shape has %d entries; at most %d allowed", n, PE_MAX_DIMS);
    for (int i = 0; i < n; i++)
        if (shape[i] < 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "shape[%d] = %lld; dims must be >= 0", i, (long long)shape[i]);
    if (ctx->info->id == PE_OP_uniform_random) {
        double lo = pe_ctx_float(ctx, "min"), hi = pe_ctx_float(ctx, "max");
        if (!isfinite(lo) || !isfinite(hi) || !(lo < hi))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "min = %g and max = %g: need finite min < max", lo, hi);
    } else {
        double mean = pe_ctx_float(ctx, "mean"), sd = pe_ctx_float(ctx, "std");
        if (!isfinite(mean) || !isfinite(sd) || sd < 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "mean = %g, std = %g: need finite values and std >= 0", mean, sd);
    }
    return pe_infer_set_meta(ctx, out, (pe_dtype)dt, n, shape);
}
