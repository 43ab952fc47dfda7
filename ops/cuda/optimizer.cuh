/* ops/cuda/optimizer.cuh — what the single (ops/cuda/optimizer.cu) and the
 * merged (ops/cuda/fused_optimizer.cu) CUDA optimizer kernels share
 * (internal, C++ only): the element updates, the launch over a pack of
 * parameters and the advance of the beta powers.
 *
 *     pe_status pe_cuda_adam(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAM); }
 *     pe_status pe_cuda_merged_adam(const pe_op_ctx *ctx) { return opt_run(ctx, OPT_ADAM); }
 *
 * How: a single op is a merged op of one parameter. The parameters are laid
 * end to end in one virtual index space (as ops/cpu/fused_optimizer.c does;
 * nothing is copied), OPT_PACK at a time: the pointers of every per-element
 * slot, the prefix offsets and the device addresses of each parameter's
 * scalars (LearningRate, Beta1Pow, Beta2Pow) go to the kernel BY VALUE (a
 * few KiB of kernel parameters: no device scratch, no host synchronization),
 * and one grid-stride launch updates every element of the pack. A thread
 * walks its indices upwards, so it finds the parameter of index i by
 * advancing k, and recomputes the per-parameter scalars (read from the
 * device, in double, rounded to T — the CPU kernels' arithmetic) only when k
 * changes.
 *
 * Numerics are those of ops/cpu/optimizer.c and ops/cpu/optimizer.h to the
 * bit: the same expression trees in the param dtype, each product rounded
 * on its own (mulr: __fmul_rn / __dmul_rn — the CPU build has no FMA, nvcc
 * would otherwise contract a * b + c), IEEE division and sqrt (PE does not
 * build with --use_fast_math). Every input of element i is read before
 * element i is written (outputs alias inputs). The beta powers are advanced
 * by a separate launch after every update of the op, so no element reads an
 * advanced power.
 *
 * Differences from the CPU kernels: the beta powers live on the device, so
 * the CPU's "Beta1Pow must be in [0, 1)" error is not raised (reading them
 * on the host would synchronize the stream every step); an out-of-range
 * power gives what the formula gives (inf / NaN), as Paddle's CUDA kernels.
 */
#ifndef PE_OPS_CUDA_OPTIMIZER_CUH
#define PE_OPS_CUDA_OPTIMIZER_CUH

#include "ops/cuda/cuda_ops.h"

#include <cstring>

namespace {

/* ---- arithmetic of the CPU kernels ------------------------------------------ */

__device__ __forceinline__ float mulr(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mulr(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float sqrtT(float a) { return sqrtf(a); }
__device__ __forceinline__ double sqrtT(double a) { return sqrt(a); }
__device__ __forceinline__ float fabsT(float a) { return fabsf(a); }
__device__ __forceinline__ double fabsT(double a) { return fabs(a); }

/* A [1] float32 / float64 tensor on the device (pe_opt_scalar's device side). */
struct opt_dscalar {
    const void *p;
    int f64;
};
__device__ __forceinline__ double rd_scalar(const opt_dscalar &s) {
    return s.f64 ? *(const double *)s.p : (double)*(const float *)s.p;
}
static inline opt_dscalar opt_scalar_of(const pe_tensor *t) {
    opt_dscalar s = {t ? pe_tensor_data(t) : nullptr, t && t->dtype == PE_DTYPE_FP64};
    return s;
}

/* One parameter's scalars: LearningRate, Beta1Pow, Beta2Pow (p unused: NULL). */
struct opt_scalars {
    opt_dscalar lr, pow1, pow2;
};

/* ---- the pack: up to OPT_PACK parameters of one launch ---------------------- */

#define OPT_PACK 16
#define OPT_SLOTS 9 /* per-element slots of the widest op (centered rmsprop) */

struct opt_pack {
    int n;                                /* parameters in the pack */
    int64_t start[OPT_PACK + 1];          /* parameter k: virtual [start[k], start[k+1]) */
    void *ptr[OPT_PACK][OPT_SLOTS];       /* per parameter, the slots in the op's order */
    opt_scalars sc[OPT_PACK];
};

/* every element of the pack: up(q, i, coef) with q the pointers of its
 * parameter, i the index in it, coef = up.make(scalars) of its parameter */
template <typename Upd>
__global__ void k_opt_pack(const opt_pack pk, Upd up) {
    int k = 0, ck = -1;
    void *q[OPT_SLOTS];
    typename Upd::coef c;
    PE_CUDA_LOOP(i, pk.start[pk.n]) {
        while (i >= pk.start[k + 1]) k++;
        if (k != ck) {
#pragma unroll
            for (int s = 0; s < OPT_SLOTS; s++) q[s] = pk.ptr[k][s];
            c = up.make(pk.sc[k]);
            ck = k;
        }
        up(q, i - pk.start[k], c);
    }
}

/* The op's slot lists: inputs then outputs, in the order the functor reads q. */
struct opt_slots {
    const char *in[OPT_SLOTS];
    const char *out[OPT_SLOTS];
    int n_in, n_out;
    const char *pow1, *pow2; /* the scalar slots besides LearningRate, or NULL */
};

/* Runs up over every Param_k of the op (pack by pack) on stream s. q[0 ..
 * n_in-1] are the inputs, q[n_in ..] the outputs; a slot with no var for
 * parameter k gives NULL. Launch errors are the caller's (pe_cuda_check_launch). */
template <typename Upd>
void opt_launch(const pe_op_ctx *ctx, cudaStream_t s, const opt_slots &sl, const Upd &up) {
    const int n = pe_ctx_n_in(ctx, "Param"), n_lr = pe_ctx_n_in(ctx, "LearningRate");
    opt_pack pk;
    std::memset(&pk, 0, sizeof pk);
    for (int k0 = 0; k0 < n; k0 += OPT_PACK) {
        std::memset(&pk, 0, sizeof pk);
        pk.n = n - k0 < OPT_PACK ? n - k0 : OPT_PACK;
        for (int j = 0; j < pk.n; j++) {
            const int k = k0 + j;
            pk.start[j + 1] = pk.start[j] + pe_tensor_numel(pe_ctx_in_at(ctx, "Param", k));
            for (int a = 0; a < sl.n_in; a++) {
                const pe_tensor *t = pe_ctx_in_at(ctx, sl.in[a], k);
                pk.ptr[j][a] = t ? pe_tensor_data(t) : nullptr;
            }
            for (int a = 0; a < sl.n_out; a++) {
                const pe_tensor *t = pe_ctx_out_at(ctx, sl.out[a], k);
                pk.ptr[j][sl.n_in + a] = t ? pe_tensor_data(t) : nullptr;
            }
            pk.sc[j].lr = opt_scalar_of(pe_ctx_in_at(ctx, "LearningRate", n_lr > 1 ? k : 0));
            if (sl.pow1) pk.sc[j].pow1 = opt_scalar_of(pe_ctx_in_at(ctx, sl.pow1, k));
            if (sl.pow2) pk.sc[j].pow2 = opt_scalar_of(pe_ctx_in_at(ctx, sl.pow2, k));
        }
        const int64_t total = pk.start[pk.n];
        if (total == 0) continue;
        k_opt_pack<Upd><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(pk, up);
    }
}

/* ---- the beta powers: PowOut_k = Pow_k * beta, after the updates ------------ */

#define OPT_POW_PACK 32

struct opt_pow_pack {
    int n;
    opt_dscalar in1[OPT_POW_PACK], in2[OPT_POW_PACK];
    void *out1[OPT_POW_PACK], *out2[OPT_POW_PACK]; /* NULL: not written */
    int out1_f64[OPT_POW_PACK], out2_f64[OPT_POW_PACK];
    double b1, b2;
};

/* every pow is read before its (possibly aliased) output is written */
__global__ void k_opt_pows(const opt_pow_pack pk) {
    const int k = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= pk.n) return;
    const double v1 = pk.in1[k].p ? rd_scalar(pk.in1[k]) : 0.0, v2 = pk.in2[k].p ? rd_scalar(pk.in2[k]) : 0.0;
    if (pk.out1[k]) {
        if (pk.out1_f64[k]) *(double *)pk.out1[k] = v1 * pk.b1;
        else *(float *)pk.out1[k] = (float)(v1 * pk.b1);
    }
    if (pk.out2[k]) {
        if (pk.out2_f64[k]) *(double *)pk.out2[k] = v2 * pk.b2;
        else *(float *)pk.out2[k] = (float)(v2 * pk.b2);
    }
}

/* Beta1PowOut_k = Beta1Pow_k * b1 (and Beta2PowOut_k = Beta2Pow_k * b2 when
 * the op has Beta2Pow: has2) for every parameter whose output is given. */
static inline void opt_advance_pows(const pe_op_ctx *ctx, cudaStream_t s, double b1, bool has2, double b2) {
    const int n = pe_ctx_n_in(ctx, "Param");
    const int n1 = pe_ctx_n_out(ctx, "Beta1PowOut"), n2 = has2 ? pe_ctx_n_out(ctx, "Beta2PowOut") : 0;
    if (n1 == 0 && n2 == 0) return;
    opt_pow_pack pk;
    for (int k0 = 0; k0 < n; k0 += OPT_POW_PACK) {
        std::memset(&pk, 0, sizeof pk);
        pk.n = n - k0 < OPT_POW_PACK ? n - k0 : OPT_POW_PACK;
        pk.b1 = b1;
        pk.b2 = b2;
        bool any = false;
        for (int j = 0; j < pk.n; j++) {
            const int k = k0 + j;
            pe_tensor *o1 = k < n1 ? pe_ctx_out_at(ctx, "Beta1PowOut", k) : nullptr;
            pe_tensor *o2 = k < n2 ? pe_ctx_out_at(ctx, "Beta2PowOut", k) : nullptr;
            if (o1) {
                pk.in1[j] = opt_scalar_of(pe_ctx_in_at(ctx, "Beta1Pow", k));
                pk.out1[j] = pe_tensor_data(o1);
                pk.out1_f64[j] = o1->dtype == PE_DTYPE_FP64;
                any = true;
            }
            if (o2) {
                pk.in2[j] = opt_scalar_of(pe_ctx_in_at(ctx, "Beta2Pow", k));
                pk.out2[j] = pe_tensor_data(o2);
                pk.out2_f64[j] = o2->dtype == PE_DTYPE_FP64;
                any = true;
            }
        }
        if (any) k_opt_pows<<<1, OPT_POW_PACK, 0, s>>>(pk);
    }
}

/* ---- the element updates (ops/cpu/optimizer.c, ops/cpu/optimizer.h) -------- */

#define Q(T, j) ((T *)q[j])

/* sgd: p -= lr * g.  q: Param Grad | ParamOut */
template <typename T> struct sgd_upd {
    struct coef {
        T lr;
    };
    __device__ coef make(const opt_scalars &s) const { return coef{(T)rd_scalar(s.lr)}; }
    __device__ void operator()(void *const *q, int64_t i, const coef &c) const {
        Q(T, 2)[i] = Q(const T, 0)[i] - mulr(c.lr, Q(const T, 1)[i]);
    }
};

/* momentum: v = v mu + g;  p -= (g + v mu) lr (nesterov) | lr v.
 * q: Param Grad Velocity | ParamOut VelocityOut */
template <typename T> struct momentum_upd {
    T mu;
    bool nesterov;
    struct coef {
        T lr;
    };
    __device__ coef make(const opt_scalars &s) const { return coef{(T)rd_scalar(s.lr)}; }
    __device__ void operator()(void *const *q, int64_t i, const coef &c) const {
        const T gi = Q(const T, 1)[i];
        const T pi = Q(const T, 0)[i];
        const T vi = mulr(Q(const T, 2)[i], mu) + gi;
        Q(T, 4)[i] = vi;
        Q(T, 3)[i] = nesterov ? pi - mulr(gi + mulr(vi, mu), c.lr) : pi - mulr(c.lr, vi);
    }
};

/* adam (adamw with dc): lr_t = lr sqrt(1 - b2p) / (1 - b1p), eps_t = eps sqrt(1 - b2p)
 * (lr = LearningRate * lr_ratio for adamw; dc = lr coeff with decay, else 0).
 * q: Param Grad Moment1 Moment2 | ParamOut Moment1Out Moment2Out */
template <typename T, bool W> struct adam_upd {
    T b1, b2, c1, c2;
    double eps, lr_ratio, coeff;
    bool decay; /* adamw's with_decay */
    struct coef {
        T lr_t, eps_t, dc;
    };
    __device__ coef make(const opt_scalars &s) const {
        const double lr0 = rd_scalar(s.lr), b1p = rd_scalar(s.pow1), b2p = rd_scalar(s.pow2);
        const double lr = W ? lr0 * lr_ratio : lr0;
        coef c;
        c.lr_t = (T)(lr * sqrt(1.0 - b2p) / (1.0 - b1p));
        c.eps_t = (T)(eps * sqrt(1.0 - b2p));
        c.dc = (T)(W && decay ? lr * coeff : 0.0);
        return c;
    }
    __device__ void operator()(void *const *q, int64_t i, const coef &c) const {
        const T gi = Q(const T, 1)[i];
        const T p0 = Q(const T, 0)[i];
        const T pi = W ? p0 - mulr(c.dc, p0) : p0;
        const T a = mulr(b1, Q(const T, 2)[i]) + mulr(c1, gi);
        const T b = mulr(b2, Q(const T, 3)[i]) + mulr(mulr(c2, gi), gi);
        Q(T, 5)[i] = a;
        Q(T, 6)[i] = b;
        Q(T, 4)[i] = pi - mulr(c.lr_t, a / (sqrtT(b) + c.eps_t));
    }
};

/* adagrad: m += g^2;  p -= lr g / (sqrt(m) + eps).  q: Param Grad Moment | ParamOut MomentOut */
template <typename T> struct adagrad_upd {
    T eps;
    struct coef {
        T lr;
    };
    __device__ coef make(const opt_scalars &s) const { return coef{(T)rd_scalar(s.lr)}; }
    __device__ void operator()(void *const *q, int64_t i, const coef &c) const {
        const T gi = Q(const T, 1)[i];
        const T pi = Q(const T, 0)[i];
        const T mi = Q(const T, 2)[i] + mulr(gi, gi);
        Q(T, 4)[i] = mi;
        Q(T, 3)[i] = pi - mulr(c.lr, gi) / (sqrtT(mi) + eps);
    }
};

/* rmsprop: ms = rho ms + (1 - rho) g^2;  [mg = rho mg + (1 - rho) g]
 * mom = mu mom + lr g / sqrt(ms [- mg^2] + eps);  p -= mom.
 * q: Param Grad MeanSquare Moment [MeanGrad] | ParamOut MeanSquareOut MomentOut [MeanGradOut] */
template <typename T, bool Centered> struct rmsprop_upd {
    T eps, mu, rho, c_rho;
    struct coef {
        T lr;
    };
    __device__ coef make(const opt_scalars &s) const { return coef{(T)rd_scalar(s.lr)}; }
    __device__ void operator()(void *const *q, int64_t i, const coef &c) const {
        constexpr int O = Centered ? 5 : 4; /* the first output */
        const T gi = Q(const T, 1)[i];
        const T pi = Q(const T, 0)[i];
        const T ms = mulr(rho, Q(const T, 2)[i]) + mulr(mulr(c_rho, gi), gi);
        T den;
        if constexpr (Centered) {
            const T mg = mulr(rho, Q(const T, 4)[i]) + mulr(c_rho, gi);
            Q(T, O + 3)[i] = mg;
            den = sqrtT(ms - mulr(mg, mg) + eps);
        } else {
            den = sqrtT(ms + eps);
        }
        const T mom = mulr(mu, Q(const T, 3)[i]) + mulr(c.lr, gi) / den;
        Q(T, O + 1)[i] = ms;
        Q(T, O + 2)[i] = mom;
        Q(T, O)[i] = pi - mom;
    }
};

/* adamax: m = b1 m + (1 - b1) g;  u = max(b2 u + eps, |g|);  p -= lr_t (m / u),
 * lr_t = lr / (1 - b1p).  q: Param Grad Moment InfNorm | ParamOut MomentOut InfNormOut */
template <typename T> struct adamax_upd {
    T b1, c1, b2, eps;
    struct coef {
        T lr_t;
    };
    __device__ coef make(const opt_scalars &s) const {
        return coef{(T)(rd_scalar(s.lr) / (1.0 - rd_scalar(s.pow1)))};
    }
    __device__ void operator()(void *const *q, int64_t i, const coef &c) const {
        const T gi = Q(const T, 1)[i];
        const T pi = Q(const T, 0)[i];
        const T m = mulr(b1, Q(const T, 2)[i]) + mulr(c1, gi);
        const T u0 = mulr(b2, Q(const T, 3)[i]) + eps;
        const T ag = fabsT(gi);
        const T u = u0 > ag ? u0 : ag;
        Q(T, 5)[i] = m;
        Q(T, 6)[i] = u;
        Q(T, 4)[i] = pi - mulr(c.lr_t, m / u);
    }
};

#undef Q

/* ---- the slot lists and attrs of each op ------------------------------------ */

static const opt_slots SGD_SLOTS = {{"Param", "Grad"}, {"ParamOut"}, 2, 1, nullptr, nullptr};
static const opt_slots MOMENTUM_SLOTS = {{"Param", "Grad", "Velocity"}, {"ParamOut", "VelocityOut"}, 3, 2,
                                        nullptr, nullptr};
static const opt_slots ADAM_SLOTS = {{"Param", "Grad", "Moment1", "Moment2"},
                                     {"ParamOut", "Moment1Out", "Moment2Out"}, 4, 3, "Beta1Pow", "Beta2Pow"};
static const opt_slots ADAGRAD_SLOTS = {{"Param", "Grad", "Moment"}, {"ParamOut", "MomentOut"}, 3, 2, nullptr,
                                       nullptr};
static const opt_slots RMSPROP_SLOTS = {{"Param", "Grad", "MeanSquare", "Moment"},
                                       {"ParamOut", "MeanSquareOut", "MomentOut"}, 4, 3, nullptr, nullptr};
static const opt_slots RMSPROP_C_SLOTS = {{"Param", "Grad", "MeanSquare", "Moment", "MeanGrad"},
                                         {"ParamOut", "MeanSquareOut", "MomentOut", "MeanGradOut"}, 5, 4, nullptr,
                                         nullptr};
static const opt_slots ADAMAX_SLOTS = {{"Param", "Grad", "Moment", "InfNorm"},
                                      {"ParamOut", "MomentOut", "InfNormOut"}, 4, 3, "Beta1Pow", nullptr};

/* The update of every parameter of a sgd / momentum / adam / adamw /
 * adagrad / rmsprop / adamax op or of its merged form (one code for both),
 * then the advance of its beta powers. Param's dtype: float32 / float64
 * (infer checked it and that every slot has it). */
enum opt_kind { OPT_SGD, OPT_MOMENTUM, OPT_ADAM, OPT_ADAMW, OPT_ADAGRAD, OPT_RMSPROP, OPT_ADAMAX };

static inline pe_status opt_run(const pe_op_ctx *ctx, opt_kind kind) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *p = pe_ctx_in(ctx, "Param");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const double b1 = pe_op_info_attr(ctx->info, "beta1") ? pe_ctx_float(ctx, "beta1") : 0.0;
    const double b2 = pe_op_info_attr(ctx->info, "beta2") ? pe_ctx_float(ctx, "beta2") : 0.0;
    const double eps = pe_op_info_attr(ctx->info, "epsilon") ? pe_ctx_float(ctx, "epsilon") : 0.0;
    if (kind == OPT_SGD) {
        PE_CUDA_FLOAT_TYPES(ctx, p->dtype, "Param", T, opt_launch(ctx, s, SGD_SLOTS, sgd_upd<T>{}));
    } else if (kind == OPT_MOMENTUM) {
        const double mu = pe_ctx_float(ctx, "mu");
        const bool nesterov = pe_ctx_bool(ctx, "use_nesterov");
        PE_CUDA_FLOAT_TYPES(ctx, p->dtype, "Param", T,
                            opt_launch(ctx, s, MOMENTUM_SLOTS, momentum_upd<T>{(T)mu, nesterov}));
    } else if (kind == OPT_ADAM || kind == OPT_ADAMW) {
        const bool w = kind == OPT_ADAMW;
        const double lr_ratio = w ? pe_ctx_float(ctx, "lr_ratio") : 1.0;
        const bool decay = w && pe_ctx_bool(ctx, "with_decay");
        const double coeff = w ? pe_ctx_float(ctx, "coeff") : 0.0;
        PE_CUDA_FLOAT_TYPES(ctx, p->dtype, "Param", T, {
            if (w)
                opt_launch(ctx, s, ADAM_SLOTS,
                           adam_upd<T, true>{(T)b1, (T)b2, (T)(1.0 - b1), (T)(1.0 - b2), eps, lr_ratio, coeff, decay});
            else
                opt_launch(ctx, s, ADAM_SLOTS,
                           adam_upd<T, false>{(T)b1, (T)b2, (T)(1.0 - b1), (T)(1.0 - b2), eps, 1.0, 0.0, false});
        });
        opt_advance_pows(ctx, s, b1, true, b2);
    } else if (kind == OPT_ADAGRAD) {
        PE_CUDA_FLOAT_TYPES(ctx, p->dtype, "Param", T, opt_launch(ctx, s, ADAGRAD_SLOTS, adagrad_upd<T>{(T)eps}));
    } else if (kind == OPT_RMSPROP) {
        const double mu = pe_ctx_float(ctx, "momentum"), rho = pe_ctx_float(ctx, "decay");
        const bool centered = pe_ctx_bool(ctx, "centered");
        PE_CUDA_FLOAT_TYPES(ctx, p->dtype, "Param", T, {
            if (centered)
                opt_launch(ctx, s, RMSPROP_C_SLOTS, rmsprop_upd<T, true>{(T)eps, (T)mu, (T)rho, (T)(1.0 - rho)});
            else
                opt_launch(ctx, s, RMSPROP_SLOTS, rmsprop_upd<T, false>{(T)eps, (T)mu, (T)rho, (T)(1.0 - rho)});
        });
        /* not centered: MeanGradOut (if any) keeps MeanGrad, as Paddle leaves it */
        const int n = pe_ctx_n_in(ctx, "Param");
        for (int k = 0; !centered && k < n; k++) {
            const pe_tensor *mg = pe_ctx_in_at(ctx, "MeanGrad", k);
            pe_tensor *mgo = pe_ctx_out_at(ctx, "MeanGradOut", k);
            if (mg && mgo && pe_tensor_data(mgo) != pe_tensor_data(mg) && pe_tensor_nbytes(mg))
                PE_CHECK(pe_cuda_check(ctx,
                                       cudaMemcpyAsync(pe_tensor_data(mgo), pe_tensor_data(mg), pe_tensor_nbytes(mg),
                                                       cudaMemcpyDeviceToDevice, s),
                                       "copying MeanGrad to MeanGradOut"));
        }
    } else { /* adamax */
        PE_CUDA_FLOAT_TYPES(ctx, p->dtype, "Param", T,
                            opt_launch(ctx, s, ADAMAX_SLOTS, adamax_upd<T>{(T)b1, (T)(1.0 - b1), (T)b2, (T)eps}));
        opt_advance_pows(ctx, s, b1, false, 0.0);
    }
    return pe_cuda_check_launch(ctx);
}

/* ---- lamb ----------------------------------------------------------------------
 * Per parameter (the trust ratio spans it): pass 1 writes the moments and
 * sums p^2 and r^2 in double, one partial per block (NORM_BLOCKS at most, a
 * count that depends on n only) in a fixed tree order; a one-block kernel
 * sums the partials (fixed order) and computes the step
 * lr * (||p|| > 0 && ||r|| > 0 ? ||p|| / ||r|| : 1); pass 2 recomputes r
 * from the new moments (the same expression: the same bits) and updates p.
 * The sums are in double like the CPU's, in another (fixed) order: they can
 * differ from the CPU's in the last bits of the double. */

#define NORM_BLOCKS PE_CUDA_THREADS

static inline unsigned norm_blocks(int64_t n) {
    int64_t b = (n + PE_CUDA_THREADS - 1) / PE_CUDA_THREADS;
    return (unsigned)(b < 1 ? 1 : b > NORM_BLOCKS ? NORM_BLOCKS : b);
}

/* sum of v over the block (fixed tree order) into thread 0's return value */
__device__ __forceinline__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

template <typename T> struct lamb_coef {
    T b1, b2, c1, c2, eps, wd;
};

/* r = (m1 / (1 - b1p)) / (sqrt(m2 / (1 - b2p)) + eps) + wd p  (LAMB_R) */
template <typename T>
__device__ __forceinline__ T lamb_r(T a, T b, T pi, T c1p, T c2p, T eps, T wd) {
    return a / c1p / (sqrtT(b / c2p) + eps) + mulr(wd, pi);
}

/* p, g, m1, m2: [n] -> m1o, m2o: [n]; part: [2, gridDim.x] (sum p^2, sum r^2) */
template <typename T>
__global__ void k_lamb_pass1(T *m1o, T *m2o, const T *p, const T *g, const T *m1, const T *m2, int64_t n,
                             opt_dscalar pw1, opt_dscalar pw2, lamb_coef<T> c, double *part) {
    __shared__ double sh[PE_CUDA_THREADS];
    const T c1p = (T)(1.0 - rd_scalar(pw1)), c2p = (T)(1.0 - rd_scalar(pw2));
    double sp = 0, sr = 0;
    PE_CUDA_LOOP(i, n) {
        const T gi = g[i];
        const T pi = p[i];
        const T a = mulr(c.b1, m1[i]) + mulr(c.c1, gi);
        const T bb = mulr(c.b2, m2[i]) + mulr(mulr(c.c2, gi), gi);
        m1o[i] = a;
        m2o[i] = bb;
        const T r = lamb_r(a, bb, pi, c1p, c2p, c.eps, c.wd);
        sp += __dmul_rn((double)pi, (double)pi);
        sr += __dmul_rn((double)r, (double)r);
    }
    sp = block_sum(sp, sh);
    sr = block_sum(sr, sh);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = sp;
        part[gridDim.x + blockIdx.x] = sr;
    }
}

/* part: [2, nb] -> step: [1] = lr * trust ratio (one block of PE_CUDA_THREADS) */
__global__ void k_lamb_step(const double *part, int nb, opt_dscalar lr, double *step) {
    __shared__ double sh[PE_CUDA_THREADS];
    const int t = threadIdx.x;
    const double sp = block_sum(t < nb ? part[t] : 0.0, sh);
    const double sr = block_sum(t < nb ? part[nb + t] : 0.0, sh);
    if (t == 0) {
        const double pn = sqrt(sp), rn = sqrt(sr);
        *step = rd_scalar(lr) * (pn > 0 && rn > 0 ? pn / rn : 1.0);
    }
}

/* p, m1, m2 (the new moments): [n] -> po: [n] */
template <typename T>
__global__ void k_lamb_pass2(T *po, const T *p, const T *m1, const T *m2, int64_t n, opt_dscalar pw1,
                             opt_dscalar pw2, lamb_coef<T> c, const double *step_d) {
    const T c1p = (T)(1.0 - rd_scalar(pw1)), c2p = (T)(1.0 - rd_scalar(pw2)), step = (T)*step_d;
    PE_CUDA_LOOP(i, n) {
        const T pi = p[i];
        po[i] = pi - mulr(step, lamb_r(m1[i], m2[i], pi, c1p, c2p, c.eps, c.wd));
    }
}

/* lamb over every Param_k of a lamb / merged_lamb op, member by member
 * (pe_cpu_lamb_param), then the pows. */
static inline pe_status lamb_run(const pe_op_ctx *ctx) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int n = pe_ctx_n_in(ctx, "Param"), n_lr = pe_ctx_n_in(ctx, "LearningRate");
    const double b1 = pe_ctx_float(ctx, "beta1"), b2 = pe_ctx_float(ctx, "beta2");
    const double eps = pe_ctx_float(ctx, "epsilon"), wd = pe_ctx_float(ctx, "weight_decay");
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    /* scratch: the partials [2, NORM_BLOCKS] and the step, reused member by
     * member (stream order keeps the members apart) */
    const size_t bytes = (2 * NORM_BLOCKS + 1) * sizeof(double);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    double *part = tmp.get<double>(), *step = part + 2 * NORM_BLOCKS;
    for (int k = 0; k < n; k++) {
        const pe_tensor *p = pe_ctx_in_at(ctx, "Param", k);
        const int64_t m = pe_tensor_numel(p);
        const opt_dscalar lr = opt_scalar_of(pe_ctx_in_at(ctx, "LearningRate", n_lr > 1 ? k : 0));
        const opt_dscalar pw1 = opt_scalar_of(pe_ctx_in_at(ctx, "Beta1Pow", k));
        const opt_dscalar pw2 = opt_scalar_of(pe_ctx_in_at(ctx, "Beta2Pow", k));
        if (m == 0) continue;
        const unsigned nb = norm_blocks(m);
        PE_CUDA_FLOAT_TYPES(ctx, p->dtype, "Param", T, {
            const lamb_coef<T> c = {(T)b1, (T)b2, (T)(1.0 - b1), (T)(1.0 - b2), (T)eps, (T)wd};
            T *po = (T *)pe_tensor_data(pe_ctx_out_at(ctx, "ParamOut", k));
            T *m1o = (T *)pe_tensor_data(pe_ctx_out_at(ctx, "Moment1Out", k));
            T *m2o = (T *)pe_tensor_data(pe_ctx_out_at(ctx, "Moment2Out", k));
            const T *pd = (const T *)pe_tensor_data(p);
            const T *g = (const T *)pe_tensor_data(pe_ctx_in_at(ctx, "Grad", k));
            const T *m1 = (const T *)pe_tensor_data(pe_ctx_in_at(ctx, "Moment1", k));
            const T *m2 = (const T *)pe_tensor_data(pe_ctx_in_at(ctx, "Moment2", k));
            k_lamb_pass1<T><<<nb, PE_CUDA_THREADS, 0, s>>>(m1o, m2o, pd, g, m1, m2, m, pw1, pw2, c, part);
            k_lamb_step<<<1, PE_CUDA_THREADS, 0, s>>>(part, (int)nb, lr, step);
            k_lamb_pass2<T><<<pe_cuda_blocks(m), PE_CUDA_THREADS, 0, s>>>(po, pd, m1o, m2o, m, pw1, pw2, c, step);
        });
    }
    opt_advance_pows(ctx, s, b1, true, b2);
    return pe_cuda_check_launch(ctx);
}

} // namespace

#endif
