/* ops/cuda/fused_elemwise.cu — CUDA kernels of fused_elemwise_activation and
 * its grad for functor_list [relu|sigmoid|tanh, elementwise_add]: out =
 * act(x + y) with elementwise_add's broadcasting (shape inference in
 * ops/fused.c; the CPU kernels in ops/cpu/fused_elemwise.c), float32 and
 * float64.
 *
 * How: the forward is one grid-stride pass over the output reading x and y
 * through the pe_bcast_plan of ops/elementwise.h (the same plan the CPU
 * builds), writing x + y to IntermediateOut when given and act(x + y) to
 * Out. The backward computes dT = act'(out) * dOut into a buffer of the
 * output's size (IntermediateOut@GRAD when given, else X@GRAD or Y@GRAD,
 * whichever has the output's size — the CPU kernel's choice), then the
 * other operand's gradient: a device copy when it is not broadcast, else
 * the sum of dT over its broadcast dims. The act' expressions and the
 * broadcast sum are elementwise.cu's (relu/sigmoid/tanh_grad and
 * elementwise_add_grad's dX/dY: double accumulation, a fixed order), called
 * through the two host launchers it exports, so the fused op gives what
 * elementwise_add + act and act_grad + elementwise_add_grad give on CUDA.
 *
 * Why: passes/fuse_elewise_add_act.c emits this op for bias + activation;
 * without a CUDA kernel a fused program could not run on a GPU place.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/elementwise.h"

#include <cstring>

/* Defined in ops/cuda/elementwise.cu (host launchers on stream s; the caller
 * checks the launch; an error status has set the op's error). */
pe_status pe_cuda_ew_sum_to_side(const pe_op_ctx *ctx, const pe_bcast_plan *pl, int side, bool f64, const void *g,
                                 void *dst, cudaStream_t s);
void pe_cuda_act_grad_launch(int act, bool f64, const void *o, const void *g, void *dx, int64_t n, cudaStream_t s);

namespace {

/* ops/cpu/fused_act.h's numbering: 1 relu, 2 sigmoid, 3 tanh. */
enum { FEA_RELU = 1, FEA_SIGMOID = 2, FEA_TANH = 3 };

/* functor_list [act, elementwise_add] -> FEA_*; -1 otherwise (infer refuses it first). */
int act_of(const pe_op_ctx *ctx) {
    int n = 0;
    const char *const *f = pe_ctx_strings(ctx, "functor_list", &n);
    if (n != 2) return -1;
    if (!strcmp(f[0], "relu")) return FEA_RELU;
    if (!strcmp(f[0], "sigmoid")) return FEA_SIGMOID;
    if (!strcmp(f[0], "tanh")) return FEA_TANH;
    return -1;
}

/* The activations of ops/cpu/fused_act.h (and elementwise.cu's relu,
 * sigmoid, tanh): relu lets NaN through, sigmoid in the overflow-free form. */
struct act_relu {
    template <typename T> __device__ T operator()(T v) const { return v < (T)0 ? (T)0 : v; }
};
struct act_sigmoid {
    __device__ float operator()(float v) const {
        const float e = expf(-fabsf(v));
        return v >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
    __device__ double operator()(double v) const {
        const double e = exp(-fabs(v));
        return v >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    }
};
struct act_tanh {
    __device__ float operator()(float v) const { return tanhf(v); }
    __device__ double operator()(double v) const { return tanh(v); }
};

/* Offsets in x and y of output element i under the plan. */
__device__ inline void plan_offsets(const pe_bcast_plan &pl, int64_t i, int64_t *xo, int64_t *yo) {
    switch (pl.kind) {
    case PE_BCAST_SAME: *xo = i; *yo = i; return;
    case PE_BCAST_SCALAR_Y: *xo = i; *yo = 0; return;
    case PE_BCAST_ROW: *xo = i; *yo = i % pl.n; return;
    case PE_BCAST_MID: *xo = i; *yo = (i / pl.post) % pl.n; return;
    default: {
        int64_t rest = i, xa = 0, ya = 0;
        for (int d = pl.ndim - 1; d >= 0; d--) {
            const int64_t id = rest % pl.dims[d];
            rest /= pl.dims[d];
            xa += id * pl.x_strides[d];
            ya += id * pl.y_strides[d];
        }
        *xo = xa;
        *yo = ya;
    }
    }
}

/* x, y: broadcast per pl -> out, mid (may be NULL): [pl.numel]; mid = x + y, out = act(x + y) */
template <typename T, typename Act>
__global__ void k_fea_fwd(const T *x, const T *y, T *out, T *mid, pe_bcast_plan pl, Act act) {
    PE_CUDA_LOOP(i, pl.numel) {
        int64_t xo, yo;
        plan_offsets(pl, i, &xo, &yo);
        const T v = x[xo] + y[yo];
        if (mid) mid[i] = v;
        out[i] = act(v);
    }
}

template <typename T>
void launch_fwd(int act, const pe_bcast_plan &pl, const void *x, const void *y, void *out, void *mid,
                cudaStream_t s) {
    const unsigned g = pe_cuda_blocks(pl.numel);
    const T *xp = (const T *)x, *yp = (const T *)y;
    T *op = (T *)out, *mp = (T *)mid;
    if (act == FEA_RELU) k_fea_fwd<<<g, PE_CUDA_THREADS, 0, s>>>(xp, yp, op, mp, pl, act_relu{});
    else if (act == FEA_SIGMOID) k_fea_fwd<<<g, PE_CUDA_THREADS, 0, s>>>(xp, yp, op, mp, pl, act_sigmoid{});
    else k_fea_fwd<<<g, PE_CUDA_THREADS, 0, s>>>(xp, yp, op, mp, pl, act_tanh{});
}

pe_status check_float(const pe_op_ctx *ctx, const pe_tensor *x) {
    if (x->dtype == PE_DTYPE_FP32 || x->dtype == PE_DTYPE_FP64) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' has dtype %s; supported: float32, float64",
                        pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
}

} // namespace

extern "C" {

/* X, Y: broadcastable -> Out = act(X + Y), IntermediateOut = X + Y (optional): [broadcast] */
pe_status pe_cuda_fused_elemwise_activation(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    pe_tensor *out = pe_ctx_out(ctx, "Out"), *mid = pe_ctx_out(ctx, "IntermediateOut");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int act = act_of(ctx);
    pe_bcast_plan pl;
    if (act < FEA_RELU ||
        pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK ||
        y->dtype != x->dtype || out->dtype != x->dtype || pe_tensor_numel(out) != pl.numel ||
        (mid && (mid->dtype != x->dtype || pe_tensor_numel(mid) != pl.numel)))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    PE_CHECK(check_float(ctx, x));
    if (pl.numel == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    void *md = mid ? pe_tensor_data(mid) : nullptr;
    if (x->dtype == PE_DTYPE_FP32)
        launch_fwd<float>(act, pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), md, s);
    else
        launch_fwd<double>(act, pl, pe_tensor_data(x), pe_tensor_data(y), pe_tensor_data(out), md, s);
    return pe_cuda_check_launch(ctx);
}

/* X, Y, Out, Out@GRAD -> X@GRAD? [X's dims], Y@GRAD? [Y's dims],
 * IntermediateOut@GRAD? [Out's dims]. X and Y are read for their dims only. */
pe_status pe_cuda_fused_elemwise_activation_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *y = pe_ctx_in(ctx, "Y");
    const pe_tensor *o = pe_ctx_in(ctx, "Out"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD"), *dy = pe_ctx_out(ctx, "Y@GRAD");
    pe_tensor *dm = pe_ctx_out(ctx, "IntermediateOut@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int act = act_of(ctx);
    pe_bcast_plan pl;
    if (act < FEA_RELU ||
        pe_bcast_plan_make(x->ndim, x->dims, y->ndim, y->dims, (int)pe_ctx_int(ctx, "axis"), &pl) != PE_OK ||
        pe_tensor_numel(g) != pl.numel || pe_tensor_numel(o) != pl.numel || o->dtype != x->dtype ||
        g->dtype != x->dtype || (dx && dx->dtype != x->dtype) || (dy && dy->dtype != x->dtype) ||
        (dm && (dm->dtype != x->dtype || pe_tensor_numel(dm) != pl.numel)))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    PE_CHECK(check_float(ctx, x));
    const int64_t numel = pl.numel;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (numel == 0) { /* nothing reaches X or Y: their gradients are zero */
        if (dx && pe_tensor_nbytes(dx))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dx), 0, pe_tensor_nbytes(dx), s),
                                   "cudaMemsetAsync"));
        if (dy && pe_tensor_nbytes(dy))
            PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dy), 0, pe_tensor_nbytes(dy), s),
                                   "cudaMemsetAsync"));
        return PE_OK;
    }
    const bool xfull = pe_tensor_numel(x) == numel, yfull = pe_tensor_numel(y) == numel;
    pe_tensor *buf = dm ? dm : (dx && xfull) ? dx : (dy && yfull) ? dy : nullptr;
    if (!buf) {
        if (!dx && !dy) return PE_OK;
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "no buffer for the pre-activation gradient (infer checks this)");
    }
    const bool f64 = x->dtype == PE_DTYPE_FP64;
    pe_cuda_act_grad_launch(act, f64, pe_tensor_data(o), pe_tensor_data(g), pe_tensor_data(buf), numel, s);
    PE_CHECK(pe_cuda_check_launch(ctx));
    for (int side = 0; side < 2; side++) {
        pe_tensor *d = side ? dy : dx;
        if (!d || d == buf) continue;
        if (side ? yfull : xfull) {
            PE_CHECK(pe_cuda_check(ctx,
                                   cudaMemcpyAsync(pe_tensor_data(d), pe_tensor_data(buf), pe_tensor_nbytes(buf),
                                                   cudaMemcpyDeviceToDevice, s),
                                   "cudaMemcpyAsync"));
        } else {
            PE_CHECK(pe_cuda_ew_sum_to_side(ctx, &pl, side, f64, pe_tensor_data(buf), pe_tensor_data(d), s));
            PE_CHECK(pe_cuda_check_launch(ctx));
        }
    }
    return PE_OK;
}

} // extern "C"
