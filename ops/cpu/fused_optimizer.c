/* ops/cpu/fused_optimizer.c — CPU kernels of merged_sgd, merged_momentum
 * and merged_adam: n parameters updated in one op call (shape inference in
 * ops/fused.c; emitted by passes/fuse_optimizer.c).
 *
 * How: the parameters are laid end to end in one virtual index space of
 * T = sum of their sizes (nothing is copied: they stay separate tensors).
 * When T is large, one OpenMP region splits [0, T) into equal contiguous
 * ranges, one per thread, and each thread runs the single-op element loop
 * (`omp simd`) on every piece of a parameter its range covers; small
 * updates stay on the calling thread. Per parameter this is the arithmetic
 * of ops/cpu/optimizer.c exactly — the per-step scalars computed in double
 * and rounded to the param dtype, every input of element i read before
 * element i is written (outputs alias inputs) — so the results are bitwise
 * those of the single ops, for any thread count. What is saved: n-1 kernel
 * launches and n-1 parallel regions per step, and no thread idles on a
 * small parameter.
 *
 * merged_adam: each parameter's Beta1Pow / Beta2Pow are read (for its
 * lr_t and epsilon term) before any element is touched and advanced after
 * all elements are done, as the single adam op does. The pass never merges
 * adam ops that share a pow accumulator (that would need the sequential
 * order), and infer checks every pow is a scalar.
 */
#include "ops/op.h"
#include "ops/cpu/par.h"
#include "ops/cpu/optimizer.h"

#include <math.h>
#include <omp.h>
#include <string.h>

static double lr_of(const pe_op_ctx *ctx, int k) {
    return pe_opt_scalar(pe_ctx_in_at(ctx, "LearningRate", pe_ctx_n_in(ctx, "LearningRate") > 1 ? k : 0));
}

/* Runs body(k, begin, end) for every piece [begin, end) of parameter k that
 * falls in the calling thread's share of the virtual index space. */
typedef void (*piece_fn)(const pe_op_ctx *ctx, int k, int64_t b, int64_t e, const void *arg);

/* True when every var of slot `slot` (input or output) lies right after the
 * previous one in memory: the ParallelExecutor coalesces the parameters,
 * their accumulators and gradients of a merged optimizer op into one buffer
 * per place (executor/parallel_executor.c, fuse_all_optimizer_ops). */
static bool contiguous(const pe_op_ctx *ctx, const char *slot, bool out) {
    const int n = out ? pe_ctx_n_out(ctx, slot) : pe_ctx_n_in(ctx, slot);
    for (int k = 1; k < n; k++) {
        const pe_tensor *a = out ? pe_ctx_out_at(ctx, slot, k - 1) : pe_ctx_in_at(ctx, slot, k - 1);
        const pe_tensor *b = out ? pe_ctx_out_at(ctx, slot, k) : pe_ctx_in_at(ctx, slot, k);
        if (!a || !b || (const char *)pe_tensor_data(a) + pe_tensor_nbytes(a) != (const char *)pe_tensor_data(b))
            return false;
    }
    return true;
}

/* The whole op is one flat update over one contiguous buffer when every data
 * slot (the per-element slots of ops.def PE_OPT) is contiguous and the
 * per-parameter scalars of the other inputs (learning rate; adam's beta
 * powers) are equal: piece 0 then spans all parameters — the same
 * per-element arithmetic with the same scalars, so the same bits. */
static bool flat(const pe_op_ctx *ctx) {
    const pe_op_info *info = ctx->info;
    for (int i = 0; i < info->n_inputs; i++)
        if (pe_op_info_elem_input(info, i) && !contiguous(ctx, info->inputs[i].name, false)) return false;
    for (int i = 0; i < info->n_outputs; i++)
        if (pe_op_info_elem_output(info, i) && !contiguous(ctx, info->outputs[i].name, true)) return false;
    for (int i = 0; i < info->n_inputs; i++) {
        const char *s = info->inputs[i].name;
        for (int k = 1; !pe_op_info_elem_input(info, i) && k < pe_ctx_n_in(ctx, s); k++)
            if (pe_opt_scalar(pe_ctx_in_at(ctx, s, k)) != pe_opt_scalar(pe_ctx_in_at(ctx, s, 0))) return false;
    }
    return true;
}

static void for_pieces(const pe_op_ctx *ctx, piece_fn f, const void *arg) {
    const int n0 = pe_ctx_n_in(ctx, "Param");
    int64_t total = 0;
    for (int k = 0; k < n0; k++) total += pe_tensor_numel(pe_ctx_in_at(ctx, "Param", k));
    const int nt = pe_kernel_threads(ctx);
    if (n0 > 1 && flat(ctx)) { /* one loop over the contiguous buffer, as piece 0 */
        if (total < OPT_PAR_MIN || nt == 1) {
            f(ctx, 0, 0, total, arg);
            return;
        }
        #pragma omp parallel num_threads(nt)
        {
            const int t = omp_get_thread_num(), tn = omp_get_num_threads();
            f(ctx, 0, total * t / tn, total * (t + 1) / tn, arg);
        }
        return;
    }
    const int n = n0;
    if (total < OPT_PAR_MIN || nt == 1) {
        for (int k = 0; k < n; k++) f(ctx, k, 0, pe_tensor_numel(pe_ctx_in_at(ctx, "Param", k)), arg);
        return;
    }
    #pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), tn = omp_get_num_threads();
        const int64_t lo = total * t / tn, hi = total * (t + 1) / tn;
        int64_t base = 0;
        for (int k = 0; k < n && base < hi; k++) {
            const int64_t len = pe_tensor_numel(pe_ctx_in_at(ctx, "Param", k));
            const int64_t b = lo > base ? lo - base : 0, e = hi < base + len ? hi - base : len;
            if (b < e) f(ctx, k, b, e, arg);
            base += len;
        }
    }
}

#define DATA(slot, k) pe_tensor_data(pe_ctx_in_at(ctx, slot, k))
#define ODATA(slot, k) pe_tensor_data(pe_ctx_out_at(ctx, slot, k))

/* ---- merged_sgd: p_k -= lr_k g_k ------------------------------------------ */

#define SGD_PIECE(NAME, T)                                                             \
    static void NAME(const pe_op_ctx *ctx, int k, int64_t b, int64_t e, const void *arg) { \
        (void)arg;                                                                     \
        const T lr = (T)lr_of(ctx, k);                                                 \
        const T *p = DATA("Param", k), *g = DATA("Grad", k);                           \
        T *po = ODATA("ParamOut", k);                                                  \
        _Pragma("omp simd")                                                            \
        for (int64_t i = b; i < e; i++) po[i] = p[i] - lr * g[i];                      \
    }
SGD_PIECE(sgd_piece_f32, float)
SGD_PIECE(sgd_piece_f64, double)

pe_status pe_cpu_merged_sgd(const pe_op_ctx *ctx) {
    for_pieces(ctx, pe_ctx_in(ctx, "Param")->dtype == PE_DTYPE_FP32 ? sgd_piece_f32 : sgd_piece_f64, NULL);
    return PE_OK;
}

/* ---- merged_momentum: v = mu v + g; p -= lr (g + mu v) | lr v -------------- */

typedef struct {
    double mu;
    bool nesterov;
} mom_arg;

#define MOM_PIECE(NAME, T)                                                                           \
    static void NAME(const pe_op_ctx *ctx, int k, int64_t b, int64_t e, const void *arg) {           \
        const mom_arg *a = arg;                                                                      \
        const T lr = (T)lr_of(ctx, k), mu = (T)a->mu;                                                \
        const T *p = DATA("Param", k), *g = DATA("Grad", k), *v = DATA("Velocity", k);               \
        T *po = ODATA("ParamOut", k), *vo = ODATA("VelocityOut", k);                                 \
        if (a->nesterov) {                                                                           \
            _Pragma("omp simd")                                                                      \
            for (int64_t i = b; i < e; i++) {                                                        \
                const T gi = g[i]; const T pi = p[i]; const T vi = v[i] * mu + gi;                   \
                vo[i] = vi; po[i] = pi - (gi + vi * mu) * lr;                                        \
            }                                                                                        \
        } else {                                                                                     \
            _Pragma("omp simd")                                                                      \
            for (int64_t i = b; i < e; i++) {                                                        \
                const T gi = g[i]; const T pi = p[i]; const T vi = v[i] * mu + gi;                   \
                vo[i] = vi; po[i] = pi - lr * vi;                                                    \
            }                                                                                        \
        }                                                                                            \
    }
MOM_PIECE(mom_piece_f32, float)
MOM_PIECE(mom_piece_f64, double)

pe_status pe_cpu_merged_momentum(const pe_op_ctx *ctx) {
    mom_arg a = {pe_ctx_float(ctx, "mu"), pe_ctx_bool(ctx, "use_nesterov")};
    for_pieces(ctx, pe_ctx_in(ctx, "Param")->dtype == PE_DTYPE_FP32 ? mom_piece_f32 : mom_piece_f64, &a);
    return PE_OK;
}

/* ---- merged_adam ------------------------------------------------------------ */

typedef struct {
    double b1, b2, eps;
} adam_arg;

#define ADAM_PIECE(NAME, T, SQRT)                                                                    \
    static void NAME(const pe_op_ctx *ctx, int k, int64_t b, int64_t e, const void *arg) {           \
        const adam_arg *a = arg;                                                                     \
        const double lr = lr_of(ctx, k);                                                             \
        const double b1p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta1Pow", k));                            \
        const double b2p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta2Pow", k));                             \
        const T lr_t = (T)(lr * sqrt(1.0 - b2p) / (1.0 - b1p)), eps_t = (T)(a->eps * sqrt(1.0 - b2p)); \
        const T b1 = (T)a->b1, b2 = (T)a->b2, c1 = (T)(1.0 - a->b1), c2 = (T)(1.0 - a->b2);          \
        const T *p = DATA("Param", k), *g = DATA("Grad", k);                                         \
        const T *m1 = DATA("Moment1", k), *m2 = DATA("Moment2", k);                                  \
        T *po = ODATA("ParamOut", k), *m1o = ODATA("Moment1Out", k), *m2o = ODATA("Moment2Out", k);  \
        _Pragma("omp simd")                                                                          \
        for (int64_t i = b; i < e; i++) {                                                            \
            const T gi = g[i]; const T pi = p[i];                                                    \
            const T x = b1 * m1[i] + c1 * gi; const T y = b2 * m2[i] + c2 * gi * gi;                 \
            m1o[i] = x; m2o[i] = y; po[i] = pi - lr_t * (x / (SQRT(y) + eps_t));                     \
        }                                                                                            \
    }
ADAM_PIECE(adam_piece_f32, float, sqrtf)
ADAM_PIECE(adam_piece_f64, double, sqrt)

pe_status pe_cpu_merged_adam(const pe_op_ctx *ctx) {
    adam_arg a = {pe_ctx_float(ctx, "beta1"), pe_ctx_float(ctx, "beta2"), pe_ctx_float(ctx, "epsilon")};
    const int n = pe_ctx_n_in(ctx, "Param");
    for (int k = 0; k < n; k++) {
        double b1p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta1Pow", k)), b2p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta2Pow", k));
        if (!(b1p < 1.0) || !(b2p < 1.0) || !(b1p >= 0.0) || !(b2p >= 0.0))
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "Beta1Pow[%d] '%s' = %g, Beta2Pow[%d] '%s' = %g; they must be in [0, 1) (the startup "
                                "program initializes them to beta1 and beta2)",
                                k, pe_ctx_in_name(ctx, "Beta1Pow", k), b1p, k, pe_ctx_in_name(ctx, "Beta2Pow", k), b2p);
    }
    for_pieces(ctx, pe_ctx_in(ctx, "Param")->dtype == PE_DTYPE_FP32 ? adam_piece_f32 : adam_piece_f64, &a);
    /* every pow read above and in the pieces before this point: advance them */
    const bool out1 = pe_ctx_n_out(ctx, "Beta1PowOut") > 0, out2 = pe_ctx_n_out(ctx, "Beta2PowOut") > 0;
    for (int k = 0; k < n; k++) {
        double b1p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta1Pow", k)), b2p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta2Pow", k));
        if (out1) pe_opt_set_scalar(pe_ctx_out_at(ctx, "Beta1PowOut", k), b1p * a.b1);
        if (out2) pe_opt_set_scalar(pe_ctx_out_at(ctx, "Beta2PowOut", k), b2p * a.b2);
    }
    return PE_OK;
}
