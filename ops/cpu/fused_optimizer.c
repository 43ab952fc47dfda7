/* ops/cpu/fused_optimizer.c — CPU kernels of merged_sgd, merged_momentum,
 * merged_adam, merged_adagrad, merged_rmsprop, merged_adamax, merged_adamw
 * and merged_lamb: n parameters updated in one op call (shape inference in
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
 * order), and infer checks every pow is a scalar. merged_adamax / merged_adamw
 * likewise. merged_lamb runs member by member (its trust ratio is per
 * parameter): only the op launches are saved.
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
        PE_MOMENTUM_RANGE(T, b, e, a->nesterov);                                                     \
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

/* ---- merged_adagrad, merged_rmsprop, merged_adamax, merged_adamw: the element
 * updates of ops/cpu/optimizer.h (PE_*_ELEM), as the single kernels run them */

#define ADAGRAD_PIECE(NAME, T, SQRT)                                                                 \
    static void NAME(const pe_op_ctx *ctx, int k, int64_t b, int64_t e, const void *arg) {           \
        (void)arg;                                                                                   \
        const T lr = (T)lr_of(ctx, k), eps = (T)pe_ctx_float(ctx, "epsilon");                        \
        const T *p = DATA("Param", k), *g = DATA("Grad", k), *m = DATA("Moment", k);                 \
        T *po = ODATA("ParamOut", k), *mo = ODATA("MomentOut", k);                                   \
        _Pragma("omp simd")                                                                          \
        for (int64_t i = b; i < e; i++) PE_ADAGRAD_ELEM(T, SQRT, i)                                  \
    }
ADAGRAD_PIECE(adagrad_piece_f32, float, sqrtf)
ADAGRAD_PIECE(adagrad_piece_f64, double, sqrt)

pe_status pe_cpu_merged_adagrad(const pe_op_ctx *ctx) {
    for_pieces(ctx, pe_ctx_in(ctx, "Param")->dtype == PE_DTYPE_FP32 ? adagrad_piece_f32 : adagrad_piece_f64, NULL);
    return PE_OK;
}

#define RMSPROP_PIECE(NAME, T, SQRT)                                                                 \
    static void NAME(const pe_op_ctx *ctx, int k, int64_t b, int64_t e, const void *arg) {           \
        (void)arg;                                                                                   \
        const T lr = (T)lr_of(ctx, k), eps = (T)pe_ctx_float(ctx, "epsilon"), mu = (T)pe_ctx_float(ctx, "momentum"); \
        const double rho_d = pe_ctx_float(ctx, "decay");                                             \
        const T rho = (T)rho_d, c_rho = (T)(1.0 - rho_d);                                            \
        const T *p = DATA("Param", k), *g = DATA("Grad", k), *ms = DATA("MeanSquare", k), *mom = DATA("Moment", k); \
        T *po = ODATA("ParamOut", k), *mso = ODATA("MeanSquareOut", k), *momo = ODATA("MomentOut", k); \
        if (pe_ctx_bool(ctx, "centered")) {                                                          \
            const T *mg = DATA("MeanGrad", k);                                                       \
            T *mgo = ODATA("MeanGradOut", k);                                                        \
            _Pragma("omp simd")                                                                      \
            for (int64_t i = b; i < e; i++) PE_RMSPROP_CENTERED_ELEM(T, SQRT, i)                     \
        } else {                                                                                     \
            _Pragma("omp simd")                                                                      \
            for (int64_t i = b; i < e; i++) PE_RMSPROP_ELEM(T, SQRT, i)                              \
        }                                                                                            \
    }
RMSPROP_PIECE(rmsprop_piece_f32, float, sqrtf)
RMSPROP_PIECE(rmsprop_piece_f64, double, sqrt)

pe_status pe_cpu_merged_rmsprop(const pe_op_ctx *ctx) {
    for_pieces(ctx, pe_ctx_in(ctx, "Param")->dtype == PE_DTYPE_FP32 ? rmsprop_piece_f32 : rmsprop_piece_f64, NULL);
    /* not centered: each MeanGradOut keeps its MeanGrad (as the single op) */
    for (int k = 0; !pe_ctx_bool(ctx, "centered") && k < pe_ctx_n_in(ctx, "MeanGrad") && k < pe_ctx_n_out(ctx, "MeanGradOut"); k++) {
        const pe_tensor *mg = pe_ctx_in_at(ctx, "MeanGrad", k);
        pe_tensor *mgo = pe_ctx_out_at(ctx, "MeanGradOut", k);
        if (mg && mgo && pe_tensor_data(mgo) != pe_tensor_data(mg) && pe_tensor_nbytes(mg))
            memcpy(pe_tensor_data(mgo), pe_tensor_data(mg), pe_tensor_nbytes(mg));
    }
    return PE_OK;
}

static pe_status check_pows(const pe_op_ctx *ctx, const char *slot) {
    for (int k = 0; k < pe_ctx_n_in(ctx, slot); k++) {
        double v = pe_opt_scalar(pe_ctx_in_at(ctx, slot, k));
        if (!(v >= 0.0 && v < 1.0))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "%s[%d] '%s' = %g; it must be in [0, 1) (the startup program "
                                "initializes it to the beta)", slot, k, pe_ctx_in_name(ctx, slot, k), v);
    }
    return PE_OK;
}

/* advances each member's pow by beta, after every element is done */
static void advance_pows(const pe_op_ctx *ctx, const char *in, const char *out, double beta) {
    if (pe_ctx_n_out(ctx, out) == 0) return;
    for (int k = 0; k < pe_ctx_n_in(ctx, in); k++)
        pe_opt_set_scalar(pe_ctx_out_at(ctx, out, k), pe_opt_scalar(pe_ctx_in_at(ctx, in, k)) * beta);
}

#define ADAMAX_PIECE(NAME, T, FABS)                                                                  \
    static void NAME(const pe_op_ctx *ctx, int k, int64_t b, int64_t e, const void *arg) {           \
        (void)arg;                                                                                   \
        const double b1_d = pe_ctx_float(ctx, "beta1");                                              \
        const double b1p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta1Pow", k));                         \
        const T lr_t = (T)(lr_of(ctx, k) / (1.0 - b1p)), b1 = (T)b1_d, c1 = (T)(1.0 - b1_d);         \
        const T b2 = (T)pe_ctx_float(ctx, "beta2"), eps = (T)pe_ctx_float(ctx, "epsilon");           \
        const T *p = DATA("Param", k), *g = DATA("Grad", k), *m = DATA("Moment", k), *u = DATA("InfNorm", k); \
        T *po = ODATA("ParamOut", k), *mo = ODATA("MomentOut", k), *uo = ODATA("InfNormOut", k);     \
        _Pragma("omp simd")                                                                          \
        for (int64_t i = b; i < e; i++) PE_ADAMAX_ELEM(T, FABS, i)                                   \
    }
ADAMAX_PIECE(adamax_piece_f32, float, fabsf)
ADAMAX_PIECE(adamax_piece_f64, double, fabs)

pe_status pe_cpu_merged_adamax(const pe_op_ctx *ctx) {
    PE_CHECK(check_pows(ctx, "Beta1Pow"));
    for_pieces(ctx, pe_ctx_in(ctx, "Param")->dtype == PE_DTYPE_FP32 ? adamax_piece_f32 : adamax_piece_f64, NULL);
    advance_pows(ctx, "Beta1Pow", "Beta1PowOut", pe_ctx_float(ctx, "beta1"));
    return PE_OK;
}

#define ADAMW_PIECE(NAME, T, SQRT)                                                                   \
    static void NAME(const pe_op_ctx *ctx, int k, int64_t b, int64_t e, const void *arg) {           \
        const adam_arg *a = arg;                                                                     \
        const double lr = lr_of(ctx, k) * pe_ctx_float(ctx, "lr_ratio");                             \
        const double b1p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta1Pow", k));                         \
        const double b2p = pe_opt_scalar(pe_ctx_in_at(ctx, "Beta2Pow", k));                         \
        const T lr_t = (T)(lr * sqrt(1.0 - b2p) / (1.0 - b1p)), eps_t = (T)(a->eps * sqrt(1.0 - b2p)); \
        const T dc = (T)(pe_ctx_bool(ctx, "with_decay") ? lr * pe_ctx_float(ctx, "coeff") : 0.0);    \
        const T b1 = (T)a->b1, b2 = (T)a->b2, c1 = (T)(1.0 - a->b1), c2 = (T)(1.0 - a->b2);          \
        const T *p = DATA("Param", k), *g = DATA("Grad", k);                                         \
        const T *m1 = DATA("Moment1", k), *m2 = DATA("Moment2", k);                                  \
        T *po = ODATA("ParamOut", k), *m1o = ODATA("Moment1Out", k), *m2o = ODATA("Moment2Out", k);  \
        _Pragma("omp simd")                                                                          \
        for (int64_t i = b; i < e; i++) PE_ADAMW_ELEM(T, SQRT, i)                                    \
    }
ADAMW_PIECE(adamw_piece_f32, float, sqrtf)
ADAMW_PIECE(adamw_piece_f64, double, sqrt)

pe_status pe_cpu_merged_adamw(const pe_op_ctx *ctx) {
    adam_arg a = {pe_ctx_float(ctx, "beta1"), pe_ctx_float(ctx, "beta2"), pe_ctx_float(ctx, "epsilon")};
    PE_CHECK(check_pows(ctx, "Beta1Pow"));
    PE_CHECK(check_pows(ctx, "Beta2Pow"));
    for_pieces(ctx, pe_ctx_in(ctx, "Param")->dtype == PE_DTYPE_FP32 ? adamw_piece_f32 : adamw_piece_f64, &a);
    advance_pows(ctx, "Beta1Pow", "Beta1PowOut", a.b1);
    advance_pows(ctx, "Beta2Pow", "Beta2PowOut", a.b2);
    return PE_OK;
}

/* ---- merged_lamb: the trust ratio is per parameter, so member by member
 * (pe_cpu_lamb_param, the single op's code), never as one flat buffer */
pe_status pe_cpu_merged_lamb(const pe_op_ctx *ctx) {
    PE_CHECK(check_pows(ctx, "Beta1Pow"));
    PE_CHECK(check_pows(ctx, "Beta2Pow"));
    const double b1 = pe_ctx_float(ctx, "beta1"), b2 = pe_ctx_float(ctx, "beta2");
    for (int k = 0; k < pe_ctx_n_in(ctx, "Param"); k++)
        pe_cpu_lamb_param(pe_ctx_out_at(ctx, "ParamOut", k), pe_ctx_out_at(ctx, "Moment1Out", k),
                          pe_ctx_out_at(ctx, "Moment2Out", k), pe_ctx_in_at(ctx, "Param", k),
                          pe_ctx_in_at(ctx, "Grad", k), pe_ctx_in_at(ctx, "Moment1", k),
                          pe_ctx_in_at(ctx, "Moment2", k), lr_of(ctx, k),
                          pe_opt_scalar(pe_ctx_in_at(ctx, "Beta1Pow", k)),
                          pe_opt_scalar(pe_ctx_in_at(ctx, "Beta2Pow", k)), b1, b2, pe_ctx_float(ctx, "epsilon"),
                          pe_ctx_float(ctx, "weight_decay"), pe_kernel_threads(ctx));
    advance_pows(ctx, "Beta1Pow", "Beta1PowOut", b1);
    advance_pows(ctx, "Beta2Pow", "Beta2PowOut", b2);
    return PE_OK;
}
