/* ops/cuda/pad.cu — CUDA kernels of pad, pad2d, pad3d (float32, float64,
 * int32, int64) and their grads (float32, float64), as the CPU kernels
 * (ops/cpu/pad.c) compute them.
 *
 * How: the plan is the CPU's (pe_pad_plan_make, ops/pad.h), built on the
 * host and passed to the kernels by value; the forward runs one thread per
 * Out element and maps each index through pe_pad_src (host and device).
 * The grads are inverted: one thread per X@GRAD element enumerates the Out
 * elements that read it — per dim at most three runs of Out indices
 * (constant: the element itself; reflect: its mirror images; edge /
 * replicate: a border run; circular: every period) — in Out's row-major
 * order and sums them from 0 in the dtype, which is the order and the
 * arithmetic of the CPU's serial scatter-add. No atomics: a run repeats bit
 * for bit and equals the CPU.
 *
 * Why: pad / pad2d / pad3d sit in front of convolutions (reflect padding in
 * image nets) and must run on the GPU place with deterministic gradients.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/pad.h"

namespace {

pe_status internal_mismatch(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
}

/* x: [pp.xd] -> out: [pp.od]; an Out element whose index in some dim maps to
 * no X index (the constant border) is v. */
template <typename T>
__global__ void k_pad(pe_pad_plan pp, const T *x, T *out, T v, int64_t total) {
    PE_CUDA_LOOP(e, total) {
        int64_t rest = e, off = 0, stride = 1;
        bool inside = true;
        for (int i = pp.n - 1; i >= 0; i--) {
            const int64_t o = rest % pp.od[i];
            rest /= pp.od[i];
            const int64_t s = pe_pad_src(&pp, i, o);
            if (s < 0) {
                inside = false;
                break;
            }
            off += s * stride;
            stride *= pp.xd[i];
        }
        out[e] = inside ? x[off] : v;
    }
}

/* The Out indices of one dim that read X index s: up to three runs
 * start + t * step (t < count), increasing, the runs in increasing order. */
struct runs {
    int64_t start[3], step[3], count[3];
    int n;
    int64_t total;
};

__device__ void add_run(runs *r, int64_t start, int64_t step, int64_t count) {
    if (count <= 0) return;
    r->start[r->n] = start;
    r->step[r->n] = step;
    r->count[r->n] = count;
    r->n++;
    r->total += count;
}

/* The inverse of pe_pad_src for dim i (s in [0, xd[i])). */
__device__ runs readers(const pe_pad_plan &pp, int i, int64_t s) {
    runs r;
    r.n = 0;
    r.total = 0;
    const int64_t d = pp.xd[i], b = pp.before[i], a = pp.after[i], od = pp.od[i];
    switch (pp.mode) {
    case PE_PAD_REFLECT:
        if (s >= 1 && s <= b) add_run(&r, b - s, 1, 1);           /* left mirror: o - b = -s */
        add_run(&r, b + s, 1, 1);
        if (s <= d - 2 && s >= d - 1 - a) add_run(&r, b + 2 * (d - 1) - s, 1, 1); /* right: o - b = 2(d-1) - s */
        break;
    case PE_PAD_EDGE: {
        const int64_t lo = s == 0 ? 0 : b + s, hi = s == d - 1 ? od : b + s + 1;
        add_run(&r, lo, 1, hi - lo);
        break;
    }
    case PE_PAD_CIRCULAR: {
        const int64_t o0 = (b + s) % d;                          /* o = b + s (mod d) */
        add_run(&r, o0, d, o0 < od ? (od - 1 - o0) / d + 1 : 0);
        break;
    }
    default: add_run(&r, b + s, 1, 1); break;
    }
    return r;
}

/* g: [pp.od] -> dx: [pp.xd], each element the sum (from 0, in Out's row-major
 * order) of the g elements that read it */
template <typename T>
__global__ void k_pad_grad(pe_pad_plan pp, const T *g, T *dx, int64_t total) {
    PE_CUDA_LOOP(e, total) {
        runs r[PE_MAX_DIMS];
        int64_t ostride[PE_MAX_DIMS];
        int64_t rest = e, os = 1, count = 1;
        for (int i = pp.n - 1; i >= 0; i--) {
            const int64_t s = rest % pp.xd[i];
            rest /= pp.xd[i];
            r[i] = readers(pp, i, s);
            ostride[i] = os;
            os *= pp.od[i];
            count *= r[i].total;
        }
        T acc = 0;
        for (int64_t t = 0; t < count; t++) {
            int64_t tr = t, off = 0;
            for (int i = pp.n - 1; i >= 0; i--) {
                int64_t ti = tr % r[i].total;
                tr /= r[i].total;
                int k = 0;
                while (ti >= r[i].count[k]) ti -= r[i].count[k++];
                off += (r[i].start[k] + ti * r[i].step[k]) * ostride[i];
            }
            acc += g[off];
        }
        dx[e] = acc;
    }
}

} // namespace

extern "C" {

/* X [xd..] -> Out [od..] (pad, pad2d, pad3d) */
pe_status pe_cuda_pad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_pad_plan pp;
    PE_CHECK(pe_pad_plan_make(ctx, x->ndim, x->dims, &pp));
    const int64_t total = pe_tensor_numel(out);
    if (out->dtype != x->dtype || total != pe_dims_prod(pp.od, 0, pp.n)) return internal_mismatch(ctx);
    if (total == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (pp.n == 0)
        return pe_cuda_check(ctx, cudaMemcpyAsync(pe_tensor_data(out), pe_tensor_data(x), pe_tensor_nbytes(x),
                                                  cudaMemcpyDeviceToDevice, s),
                             "copying X to Out");
    PE_CUDA_NUM_TYPES(ctx, x->dtype, "X", T,
        k_pad<T><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(pp, (const T *)pe_tensor_data(x),
                                                                    (T *)pe_tensor_data(out), (T)pp.value, total));
    return pe_cuda_check_launch(ctx);
}

/* Out@GRAD [od..] -> X@GRAD [xd..] (pad_grad, pad2d_grad, pad3d_grad; the plan from X@GRAD's dims) */
pe_status pe_cuda_pad_grad(const pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_pad_plan pp;
    PE_CHECK(pe_pad_plan_make(ctx, dx->ndim, dx->dims, &pp));
    const int64_t total = pe_tensor_numel(dx);
    if (g->dtype != dx->dtype || pe_tensor_numel(g) != pe_dims_prod(pp.od, 0, pp.n)) return internal_mismatch(ctx);
    if (total == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    if (pp.n == 0)
        return pe_cuda_check(ctx, cudaMemcpyAsync(pe_tensor_data(dx), pe_tensor_data(g), pe_tensor_nbytes(g),
                                                  cudaMemcpyDeviceToDevice, s),
                             "copying Out@GRAD to X@GRAD");
    PE_CUDA_FLOAT_TYPES(ctx, g->dtype, "Out@GRAD", T,
        k_pad_grad<T><<<pe_cuda_blocks(total), PE_CUDA_THREADS, 0, s>>>(pp, (const T *)pe_tensor_data(g),
                                                                         (T *)pe_tensor_data(dx), total));
    return pe_cuda_check_launch(ctx);
}

} // extern "C"
