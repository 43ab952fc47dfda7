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

/* Device memory goes through one caching allocator per GPU: freed blocks
 * stay with PE for the next allocation of their size (no cudaMalloc in a
 * training loop's steady state). */
typedef struct pe_cuda_mem_stats {
    size_t held;           /* bytes PE holds from the driver: in use + cached */
    size_t in_use;         /* bytes of live blocks (sizes rounded up to 512 B / 1 MiB steps) */
    size_t cached;         /* bytes of free blocks kept for reuse */
    size_t peak_held;
    uint64_t cuda_mallocs; /* cudaMalloc calls so far */
    uint64_t cuda_frees;
    uint64_t cache_hits;   /* allocations served from the cache */
} pe_cuda_mem_stats;
/* Statistics of cuda:device's cache; an error naming the device when it is
 * not visible. */
pe_status pe_cuda_memory_stats(int device, pe_cuda_mem_stats *out);
/* Hands cuda:device's cached blocks back to the driver (after its stream
 * drains); returns the bytes released. */
size_t pe_cuda_empty_cache(int device);
#endif

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
