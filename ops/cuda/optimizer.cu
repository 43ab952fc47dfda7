/* ops/cuda/optimizer.cu — CUDA kernels of the optimizer ops: sgd, momentum,
 * adam, adagrad, rmsprop, adamax, adamw, lamb, clip_by_global_norm (CPU
 * kernels in ops/cpu/optimizer.c, shape inference in ops/optimizer.c).
 *
 * How: the element updates, the launch and the beta-power advance are
 * shared with the merged ops (ops/cuda/optimizer.cuh; a single op is a
 * merged op of one parameter). LearningRate and the beta powers are device
 * tensors read inside the kernels (never on the host: no synchronization
 * per step); the per-step scalars (lr_t, the epsilon term, 1 - beta) are
 * computed in double and rounded to the param dtype as on the CPU, and the
 * element formulas are the CPU's expression trees with every product
 * rounded on its own, so an update is bitwise the CPU's. Outputs alias
 * inputs (ParamOut = Param, ...): every element is read before it is
 * written, and the powers are advanced by a launch after the update.
 *
 * lamb and clip_by_global_norm sum squares in double (as the CPU) in a
 * fixed order (per-block tree sums, then a one-block sum of the partials):
 * a run repeats bit for bit; the order differs from the CPU's 8-lane
 * chunks, so the norm can differ from the CPU's in the last bits of the
 * double (an update then rarely differs by one ulp of the param dtype).
 *
 * Why: the optimizer is the last op of every training step on a GPU place;
 * nothing of it may bounce through the host.
 */
#include "ops/cuda/optimizer.cuh"

namespace {

/* ---- clip_by_global_norm -------------------------------------------------
 * norm = sqrt(sum_k sum_i x_k[i]^2);  out_k = x_k * (M / max(norm, M)).
 * Per X_k: norm_blocks(n_k) blocks write their partial sums to row k of
 * part [n, NORM_BLOCKS] (zeroed first); one block sums row by row (fixed
 * order, k ascending, as the CPU's total) and writes the scale; the scale
 * launches read it from the device. */

/* x: [n] -> part[blockIdx.x] = sum of x^2 over the block's elements (double) */
template <typename T>
__global__ void k_sumsq(const T *x, int64_t n, double *part) {
    __shared__ double sh[PE_CUDA_THREADS];
    double a = 0;
    PE_CUDA_LOOP(i, n) a += __dmul_rn((double)x[i], (double)x[i]);
    a = block_sum(a, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = a;
}

/* part: [n, NORM_BLOCKS] -> scale: [1] = M / max(sqrt(total), M) (a NaN norm: 1) */
__global__ void k_clip_scale(const double *part, int n, double max_norm, double *scale) {
    __shared__ double sh[PE_CUDA_THREADS];
    double total = 0;
    for (int k = 0; k < n; k++) {
        const double s = block_sum(part[(size_t)k * NORM_BLOCKS + threadIdx.x], sh);
        total += s;
    }
    if (threadIdx.x == 0) {
        const double norm = sqrt(total);
        *scale = max_norm / (norm > max_norm ? norm : max_norm);
    }
}

/* x: [n] -> o: [n] = x * (T)scale (o may be x: then nothing to do at scale 1) */
template <typename T>
__global__ void k_clip_apply(T *o, const T *x, int64_t n, const double *scale_d) {
    const double sd = *scale_d;
    if (sd == 1.0 && (const T *)o == x) return;
    const T sc = (T)sd;
    PE_CUDA_LOOP(i, n) o[i] = x[i] * sc;
}

} // namespace

extern "C" {

/* param, grad: [n]; lr: [1] -> param_out: [n] */
pe_status pe_cuda_sgd(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_SGD); }
/* param, grad, velocity: [n]; lr: [1] -> param_out, velocity_out: [n] */
pe_status pe_cuda_momentum(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_MOMENTUM); }
/* param, grad, moment1, moment2: [n]; lr, beta1_pow, beta2_pow: [1]
 * -> param_out, moment1_out, moment2_out: [n]; beta1_pow_out, beta2_pow_out: [1] */
pe_status pe_cuda_adam(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAM); }
pe_status pe_cuda_adamw(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAMW); }
/* param, grad, moment: [n]; lr: [1] -> param_out, moment_out: [n] */
pe_status pe_cuda_adagrad(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAGRAD); }
/* param, grad, mean_square, moment (, mean_grad): [n]; lr: [1]
 * -> param_out, moment_out, mean_square_out (, mean_grad_out): [n] */
pe_status pe_cuda_rmsprop(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_RMSPROP); }
/* param, grad, moment, inf_norm: [n]; lr, beta1_pow: [1]
 * -> param_out, moment_out, inf_norm_out: [n]; beta1_pow_out: [1] */
pe_status pe_cuda_adamax(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAMAX); }
/* adam's slots -> adam's outputs (trust ratio over the whole parameter) */
pe_status pe_cuda_lamb(const pe_op_ctx *ctx) { return lamb_run(ctx); }

/* x_k: [n_k] -> out_k: [n_k] (float32 / float64 each) */
pe_status pe_cuda_clip_by_global_norm(const pe_op_ctx *ctx) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int n = pe_ctx_n_in(ctx, "X");
    const double max_norm = pe_ctx_float(ctx, "max_global_norm");
    for (int k = 0; k < n; k++) {
        const pe_tensor *x = pe_ctx_in_at(ctx, "X", k);
        if (x->dtype != PE_DTYPE_FP32 && x->dtype != PE_DTYPE_FP64)
            return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X[%d] '%s' has dtype %s; supported: float32, float64", k,
                                pe_ctx_in_name(ctx, "X", k), pe_dtype_name(x->dtype));
    }
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const size_t bytes = ((size_t)n * NORM_BLOCKS + 1) * sizeof(double);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    double *part = tmp.get<double>(), *scale = part + (size_t)n * NORM_BLOCKS;
    PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(part, 0, (size_t)n * NORM_BLOCKS * sizeof(double), s),
                           "zeroing the partial sums"));
    for (int k = 0; k < n; k++) {
        const pe_tensor *x = pe_ctx_in_at(ctx, "X", k);
        const int64_t m = pe_tensor_numel(x);
        if (m == 0) continue;
        double *row = part + (size_t)k * NORM_BLOCKS;
        if (x->dtype == PE_DTYPE_FP32)
            k_sumsq<float><<<norm_blocks(m), PE_CUDA_THREADS, 0, s>>>((const float *)pe_tensor_data(x), m, row);
        else
            k_sumsq<double><<<norm_blocks(m), PE_CUDA_THREADS, 0, s>>>((const double *)pe_tensor_data(x), m, row);
    }
    k_clip_scale<<<1, PE_CUDA_THREADS, 0, s>>>(part, n, max_norm, scale);
    for (int k = 0; k < n; k++) {
        const pe_tensor *x = pe_ctx_in_at(ctx, "X", k);
        pe_tensor *o = pe_ctx_out_at(ctx, "Out", k);
        const int64_t m = pe_tensor_numel(x);
        if (m == 0) continue;
        if (x->dtype == PE_DTYPE_FP32)
            k_clip_apply<float><<<pe_cuda_blocks(m), PE_CUDA_THREADS, 0, s>>>(
                (float *)pe_tensor_data(o), (const float *)pe_tensor_data(x), m, scale);
        else
            k_clip_apply<double><<<pe_cuda_blocks(m), PE_CUDA_THREADS, 0, s>>>(
                (double *)pe_tensor_data(o), (const double *)pe_tensor_data(x), m, scale);
    }
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
