/* runtime/cuda/handles.cu — the per-device library handles: one cuBLAS and
 * one cuDNN handle per GPU, bound to the place's stream.
 *
 * How: created on first use under a mutex, kept for the life of the process
 * (the driver frees them with the context at exit). cuBLAS runs with
 * CUBLAS_DEFAULT_MATH — full float32 products, no TF32 — so float32 GEMMs
 * match the CPU kernels up to summation order; PE_CUDA_TF32=1 turns TF32 on
 * (faster on Ampere and newer, ~1e-3 relative error). cuBLAS is safe to call
 * from several threads on one handle and stream; cuDNN is not, so its
 * callers hold the device's cuDNN lock (pe_cuda_dnn_lock) while they use it.
 *
 * Why: the kernels of ops/cuda/ ask for a handle by device id; handle
 * creation costs milliseconds and allocates device memory, so it happens
 * once per device, not per op.
 */
#include "runtime/cuda/cuda_internal.h"

#include <cublas_v2.h>
#include <cudnn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace {

std::mutex g_mu;
cublasHandle_t g_blas[PE_MAX_PLACES];
cudnnHandle_t g_dnn[PE_MAX_PLACES];
std::mutex g_dnn_mu[PE_MAX_PLACES];

bool tf32_enabled() {
    const char *v = getenv("PE_CUDA_TF32");
    return v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on"));
}

/* The device's stream, with an error naming the device when there is none. */
cudaStream_t stream_of(int device, const char *lib) {
    cudaStream_t s = (cudaStream_t)pe_cuda_stream(device);
    if (!s) pe_error_wrap(PE_ERR_DEVICE, "cannot create the %s handle of cuda:%d", lib, device);
    return s;
}

} // namespace

extern "C" {

void *pe_cuda_blas(int device) {
    if (device < 0 || device >= PE_MAX_PLACES || device >= pe_cuda_device_count()) {
        pe_error(PE_ERR_INVALID, "no cuBLAS handle for cuda:%d: %d CUDA device(s) visible", device,
                 pe_cuda_device_count());
        return nullptr;
    }
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_blas[device]) return g_blas[device];
    cudaStream_t s = stream_of(device, "cuBLAS");
    if (!s) return nullptr;
    pe_cuda_device_scope dev(device);
    if (!dev.ok()) return nullptr;
    cublasHandle_t h = nullptr;
    cublasStatus_t st = cublasCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        pe_error(PE_ERR_DEVICE, "cublasCreate on cuda:%d failed: %s", device, cublasGetStatusString(st));
        return nullptr;
    }
    st = cublasSetStream(h, s);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasSetMathMode(h, tf32_enabled() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(h);
        pe_error(PE_ERR_DEVICE, "setting up the cuBLAS handle of cuda:%d failed: %s", device,
                 cublasGetStatusString(st));
        return nullptr;
    }
    g_blas[device] = h;
    return h;
}

void *pe_cuda_dnn(int device) {
    if (device < 0 || device >= PE_MAX_PLACES || device >= pe_cuda_device_count()) {
        pe_error(PE_ERR_INVALID, "no cuDNN handle for cuda:%d: %d CUDA device(s) visible", device,
                 pe_cuda_device_count());
        return nullptr;
    }
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_dnn[device]) return g_dnn[device];
    cudaStream_t s = stream_of(device, "cuDNN");
    if (!s) return nullptr;
    pe_cuda_device_scope dev(device);
    if (!dev.ok()) return nullptr;
    cudnnHandle_t h = nullptr;
    cudnnStatus_t st = cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
        pe_error(PE_ERR_DEVICE, "cudnnCreate on cuda:%d failed: %s", device, cudnnGetErrorString(st));
        return nullptr;
    }
    st = cudnnSetStream(h, s);
    if (st != CUDNN_STATUS_SUCCESS) {
        cudnnDestroy(h);
        pe_error(PE_ERR_DEVICE, "binding the cuDNN handle of cuda:%d to its stream failed: %s", device,
                 cudnnGetErrorString(st));
        return nullptr;
    }
    g_dnn[device] = h;
    return h;
}

void pe_cuda_dnn_lock(int device) {
    if (device >= 0 && device < PE_MAX_PLACES) g_dnn_mu[device].lock();
}

void pe_cuda_dnn_unlock(int device) {
    if (device >= 0 && device < PE_MAX_PLACES) g_dnn_mu[device].unlock();
}

} // extern "C"
