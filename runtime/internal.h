/* runtime/internal.h — runtime pieces shared inside PE, not public API. */
#ifndef PE_RUNTIME_INTERNAL_H
#define PE_RUNTIME_INTERNAL_H

#include "pe/device.h"
#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PE_MAX_PLACES: pe/device.h */

/* CUDA runtime seam (runtime/cuda/). Only defined when PE_WITH_CUDA. */
#ifdef PE_WITH_CUDA
void *pe_cuda_malloc(int device, size_t bytes);          /* NULL + message on failure */
void pe_cuda_free(int device, void *ptr);
pe_status pe_cuda_memcpy(void *dst, pe_place dst_place, const void *src, pe_place src_place, size_t bytes);
/* pe_cuda_device_count: pe/device.h */
void *pe_cuda_stream(int device);   /* cudaStream_t of the place (non-blocking); NULL + message when unusable */
pe_status pe_cuda_sync(int device);
#endif

/* pe_memcpy_places (copies bytes between any two places): pe/device.h */

/* Reads a whole file into a malloc'ed buffer (caller frees). Errors name the path. */
pe_status pe_read_file(const char *path, void **data, size_t *size);
/* Writes atomically: path.tmp.<pid>, fsync, rename. Errors name the path. */
pe_status pe_write_file_atomic(const char *path, const void *data, size_t size);

#ifdef __cplusplus
}
#endif
#endif
