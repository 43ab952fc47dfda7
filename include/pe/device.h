/* pe/device.h — devices: copies between places and the GPU count.
 *
 *     float host[4];
 *     if (pe_memcpy_places(host, pe_place_cpu(0), pe_tensor_data(t), t->place, sizeof host) != PE_OK) ...
 *     #ifdef PE_WITH_CUDA
 *     int gpus = pe_cuda_device_count();                 // 0 without a GPU or driver
 *     #endif
 *
 * Implemented by the runtime (runtime/alloc.c, runtime/cuda/).
 */
#ifndef PE_DEVICE_H
#define PE_DEVICE_H

#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* The most places one executor, collective or allocator table spans. */
#define PE_MAX_PLACES 64

/* Copies bytes between any two places (CPU<->CPU is memcpy); dst and src
 * are borrowed. Errors name the places. */
pe_status pe_memcpy_places(void *dst, pe_place dst_place, const void *src, pe_place src_place, size_t bytes);

#ifdef PE_WITH_CUDA
int pe_cuda_device_count(void); /* 0 when no GPU/driver */
#endif

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
