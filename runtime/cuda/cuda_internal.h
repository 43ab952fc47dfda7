/* runtime/cuda/cuda_internal.h — helpers shared by PE's .cu files (C++ only).
 *
 *     pe_cuda_device_scope dev(ctx->place.id);      // make the place's GPU current
 *     if (!dev.ok()) return pe_ctx_error(ctx, PE_ERR_DEVICE, "%s", pe_last_error());
 *     my_kernel<<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, stream>>>(...);
 *
 * Kernel launches go to the thread's current device, so every launch and
 * every runtime call that needs a device makes it current for its own scope
 * only and restores the caller's device afterwards (RAII). Kept header-only
 * so the .cu files of ops/cuda and runtime/cuda share it without another C API.
 */
#ifndef PE_RUNTIME_CUDA_INTERNAL_H
#define PE_RUNTIME_CUDA_INTERNAL_H

#ifndef __CUDACC__
#error "runtime/cuda/cuda_internal.h is for .cu files only"
#endif

#include "runtime/internal.h"

#include <cuda_runtime.h>

#define PE_CUDA_THREADS 256

/* Blocks of PE_CUDA_THREADS for n elements with grid-stride loops (n > 0). */
static inline unsigned pe_cuda_blocks(int64_t n) {
    int64_t b = (n + PE_CUDA_THREADS - 1) / PE_CUDA_THREADS;
    return (unsigned)(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

/* Makes `device` current until the end of the scope, then restores the
 * thread's previous device. ok() is false (and pe_last_error() says why)
 * when the device cannot be selected. */
class pe_cuda_device_scope {
public:
    explicit pe_cuda_device_scope(int device) {
        if (cudaGetDevice(&prev_) != cudaSuccess) {
            (void)cudaGetLastError();
            prev_ = -1;
        }
        if (prev_ == device) {
            ok_ = true;
            return;
        }
        cudaError_t e = cudaSetDevice(device);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            pe_error(PE_ERR_DEVICE, "cannot select cuda:%d: %s", device, cudaGetErrorString(e));
            return;
        }
        ok_ = true;
        switched_ = true;
    }
    ~pe_cuda_device_scope() {
        if (switched_ && prev_ >= 0) (void)cudaSetDevice(prev_);
    }
    pe_cuda_device_scope(const pe_cuda_device_scope &) = delete;
    pe_cuda_device_scope &operator=(const pe_cuda_device_scope &) = delete;
    bool ok() const { return ok_; }

private:
    int prev_ = -1;
    bool ok_ = false;
    bool switched_ = false;
};

#endif
