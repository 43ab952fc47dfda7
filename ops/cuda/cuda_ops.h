/* ops/cuda/cuda_ops.h — what every CUDA kernel file of ops/cuda/ shares (C++ only).
 *
 *     pe_status pe_cuda_foo(const pe_op_ctx *ctx) {
 *         const pe_tensor *x = pe_ctx_in(ctx, "X");
 *         pe_tensor *out = pe_ctx_out(ctx, "Out");
 *         PE_CHECK(pe_cuda_check_inputs(ctx));          // every input on ctx->place
 *         int64_t n = pe_tensor_numel(x);
 *         if (n == 0) return PE_OK;
 *         pe_cuda_device_scope dev(ctx->place.id);
 *         cudaStream_t s;
 *         PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
 *         PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
 *             k_foo<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(...));
 *         return pe_cuda_check_launch(ctx);
 *     }
 *
 * Conventions (every file of ops/cuda/ follows them):
 * - One stream per place (pe_cuda_stream): every kernel, cuBLAS and cuDNN
 *   call of a place goes to it, so ops run in program order and a buffer
 *   freed to the caching allocator may be reused by the next op at once.
 * - Grid-stride loops with 64-bit indices (PE_CUDA_LOOP), PE_CUDA_THREADS per
 *   block, pe_cuda_blocks(n) blocks.
 * - Deterministic: no floating-point atomics; every sum runs in a fixed
 *   order (ops/cuda/reduce_kernels.cuh), so a run repeats bit for bit.
 * - Numerics of the CPU kernel (ops/cpu/<family>.c): the same formulas, the
 *   same dtype list, the same attrs; precise libm (no --use_fast_math);
 *   __fmul_rn/__fadd_rn where nvcc would contract into an FMA and the
 *   CPU result matters to the last bit.
 * - Scratch on the device: pe_cuda_temp (the caching allocator; returned at
 *   the end of the scope, stream-ordered, no synchronization).
 * - Host reads of device data are a synchronization: avoid them in kernels;
 *   where an op must (a shape tensor, an error flag), one pe_cuda_memcpy
 *   to the host, with an error that says what was being read.
 * - Errors through pe_ctx_error (names op and place) — launch failures via
 *   pe_cuda_check_launch right after the launches.
 */
#ifndef PE_OPS_CUDA_OPS_H
#define PE_OPS_CUDA_OPS_H

#include "ops/op.h"
#include "runtime/cuda/cuda_internal.h"

#include <cstdint>
#include <type_traits>

/* for (int64_t i = first index of this thread; i < n; i += all threads) */
#define PE_CUDA_LOOP(i, n)                                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n);                  \
         i += (int64_t)gridDim.x * blockDim.x)

/* Runs `...` with T bound to the C++ type of dtype dt (float32/float64), or
 * returns an UNSUPPORTED error naming the slot when dt is another dtype. */
#define PE_CUDA_FLOAT_TYPES(ctx, dt, slot, T, ...)                                                           \
    do {                                                                                                     \
        switch (dt) {                                                                                        \
        case PE_DTYPE_FP32: { using T = float; __VA_ARGS__; } break;                                         \
        case PE_DTYPE_FP64: { using T = double; __VA_ARGS__; } break;                                        \
        default:                                                                                             \
            return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "%s has dtype %s; supported: float32, float64",     \
                                slot, pe_dtype_name(dt));                                                    \
        }                                                                                                    \
    } while (0)

/* Likewise for float32, float64, int32, int64. */
#define PE_CUDA_NUM_TYPES(ctx, dt, slot, T, ...)                                                             \
    do {                                                                                                     \
        switch (dt) {                                                                                        \
        case PE_DTYPE_FP32: { using T = float; __VA_ARGS__; } break;                                         \
        case PE_DTYPE_FP64: { using T = double; __VA_ARGS__; } break;                                        \
        case PE_DTYPE_INT32: { using T = int32_t; __VA_ARGS__; } break;                                      \
        case PE_DTYPE_INT64: { using T = int64_t; __VA_ARGS__; } break;                                      \
        default:                                                                                             \
            return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED,                                                     \
                                "%s has dtype %s; supported: float32, float64, int32, int64", slot,          \
                                pe_dtype_name(dt));                                                          \
        }                                                                                                    \
    } while (0)

/* Likewise for any dtype PE has (bool as bool, uint8, int8, int16 ...):
 * for copies, gathers and other ops that only move elements. */
#define PE_CUDA_ALL_TYPES(ctx, dt, slot, T, ...)                                                             \
    do {                                                                                                     \
        switch (pe_dtype_size(dt)) {                                                                         \
        case 1: { using T = uint8_t; __VA_ARGS__; } break;                                                   \
        case 2: { using T = uint16_t; __VA_ARGS__; } break;                                                  \
        case 4: { using T = uint32_t; __VA_ARGS__; } break;                                                  \
        case 8: { using T = uint64_t; __VA_ARGS__; } break;                                                  \
        default:                                                                                             \
            return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "%s has dtype %s, which no CUDA kernel moves",      \
                                slot, pe_dtype_name(dt));                                                    \
        }                                                                                                    \
    } while (0)


/* The place's stream, with the place's device made current by `dev`. */
static inline pe_status pe_cuda_place_stream(const pe_op_ctx *ctx, const pe_cuda_device_scope &dev,
                                             cudaStream_t *s) {
    if (!dev.ok()) return pe_ctx_error(ctx, PE_ERR_DEVICE, "%s", pe_last_error());
    *s = ctx->svc && ctx->svc->stream ? (cudaStream_t)ctx->svc->stream : (cudaStream_t)pe_cuda_stream(ctx->place.id);
    if (!*s) return pe_ctx_error(ctx, PE_ERR_DEVICE, "%s", pe_last_error());
    return PE_OK;
}

/* The error of the last launch (cudaGetLastError), as the op's error. */
static inline pe_status pe_cuda_check_launch(const pe_op_ctx *ctx) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return pe_ctx_error(ctx, PE_ERR_DEVICE, "kernel launch failed: %s", cudaGetErrorString(e));
    return PE_OK;
}

/* A CUDA runtime call's result as the op's error, naming what was done. */
static inline pe_status pe_cuda_check(const pe_op_ctx *ctx, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return PE_OK;
    (void)cudaGetLastError();
    return pe_ctx_error(ctx, PE_ERR_DEVICE, "%s failed: %s", what, cudaGetErrorString(e));
}

/* t lives on the op's place (a CPU tensor handed to a CUDA kernel would be
 * read as a device pointer). */
static inline pe_status pe_cuda_check_on_place(const pe_op_ctx *ctx, const pe_tensor *t, const char *slot,
                                               const char *name) {
    char want[32], got[32];
    if (t && t->buf && !pe_place_eq(t->buf->place, ctx->place))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s '%s' is on %s, the op runs on %s (copy it to the place first)",
                            slot, name ? name : "?", pe_place_str(t->buf->place, got, sizeof got),
                            pe_place_str(ctx->place, want, sizeof want));
    return PE_OK;
}

/* Every input of the op lives on its place. */
static inline pe_status pe_cuda_check_inputs(const pe_op_ctx *ctx) {
    for (int i = 0; i < ctx->info->n_inputs; i++)
        for (int j = 0; j < ctx->n_in[i]; j++)
            PE_CHECK(pe_cuda_check_on_place(ctx, ctx->in[i][j], ctx->info->inputs[i].name, ctx->in_names[i][j]));
    return PE_OK;
}

/* Device scratch of `bytes` on the op's place for the current scope, from the
 * caching allocator. ok() false: the op's error is set (the allocator's
 * message, naming the op). Returned at the end of the scope; kernels queued
 * on the place's stream that use it run before any later user of the block. */
class pe_cuda_temp {
public:
    pe_cuda_temp(const pe_op_ctx *ctx, size_t bytes) : place_(ctx->place) {
        if (!bytes) return;
        p_ = pe_cuda_malloc(place_.id, bytes);
        if (!p_) pe_ctx_error(ctx, PE_ERR_NOMEM, "device scratch of %zu bytes: %s", bytes, pe_last_error());
    }
    ~pe_cuda_temp() {
        if (p_) pe_cuda_free(place_.id, p_);
    }
    pe_cuda_temp(const pe_cuda_temp &) = delete;
    pe_cuda_temp &operator=(const pe_cuda_temp &) = delete;
    bool ok(size_t bytes_asked) const { return !bytes_asked || p_; }
    template <typename T = void> T *get() const { return (T *)p_; }

private:
    pe_place place_;
    void *p_ = nullptr;
};

#endif
