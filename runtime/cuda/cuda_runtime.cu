/* runtime/cuda/cuda_runtime.cu — the CUDA place: device memory, one stream per
 * device, copies between places, device count.
 *
 * How: thin wrappers over the CUDA runtime API. Every call that needs a device
 * makes it current for the duration of the call only (a guard saves and
 * restores the thread's current device), so PE never leaves a thread on a
 * device the caller did not choose. Each device gets one non-blocking stream,
 * created on first use under a mutex; all PE kernels and copies of a place go
 * to that stream, so they run in program order without touching the legacy
 * default stream. Copies are issued on the stream of the device side. Between
 * host and device they go through the device's pinned staging ring
 * (runtime/staging.h: 4 chunks of 4 MiB, page-locked): host-to-device returns
 * once the host bytes are in a chunk — the DMA runs while the host goes on
 * (the next feed, the next place), ordered before the kernels queued after
 * it — and device-to-host pipelines chunk DMAs with the host memcpy and
 * returns with the destination complete. So the caller's (pageable, possibly
 * freed right after) host buffer is never read after pe_cuda_memcpy returns.
 * PE_CUDA_PINNED=0 (or no pinned memory) takes the synchronous path: one
 * cudaMemcpyAsync from pageable memory, then a stream synchronize.
 *
 * Device memory goes through one caching allocator per device
 * (runtime/block_cache.c): a freed block goes back to the cache, not to
 * cudaFree, and the next allocation of its size class takes it, so the
 * steady state of a training loop calls cudaMalloc never. Reuse without a
 * synchronization is safe because every kernel and copy of a device runs on
 * its one stream, in issue order. pe_cuda_empty_cache hands the cached
 * blocks back (after draining the stream).
 *
 * Why: runtime/alloc.c and runtime/tensor.c stay plain C and call these
 * functions through runtime/internal.h; a machine without a driver or GPU
 * sees 0 devices (not an error), so a CUDA build still runs everything on CPU.
 * Byte accounting stays in runtime/alloc.c (one place for CPU and CUDA).
 */
#include "runtime/cuda/cuda_internal.h"
#include "runtime/block_cache.h"
#include "runtime/staging.h"

#include <cstring>
#include <mutex>

namespace {

std::once_flag g_count_once;
int g_device_count = 0;

std::mutex g_stream_mu;
cudaStream_t g_streams[PE_MAX_PLACES];

/* PE_OK when `device` is a visible CUDA device; otherwise a message naming
 * the place, what was being done and how many devices there are. */
pe_status check_device(int device, const char *what) {
    int n = pe_cuda_device_count();
    if (device < 0 || device >= n || device >= PE_MAX_PLACES)
        return pe_error(PE_ERR_INVALID, "cannot %s cuda:%d: %d CUDA device(s) visible%s", what, device, n,
                        n == 0 ? " (no GPU or no CUDA driver on this machine)" : "");
    return PE_OK;
}

pe_status get_stream(int device, cudaStream_t *out) {
    *out = nullptr;
    PE_CHECK(check_device(device, "use a stream on"));
    std::lock_guard<std::mutex> lock(g_stream_mu);
    if (!g_streams[device]) {
        pe_cuda_device_scope g(device);
        if (!g.ok()) return PE_ERR_DEVICE;
        cudaStream_t s = nullptr;
        cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return pe_error(PE_ERR_DEVICE, "cannot create a stream on cuda:%d: %s", device,
                            cudaGetErrorString(e));
        }
        g_streams[device] = s;
    }
    *out = g_streams[device];
    return PE_OK;
}

/* The cache's raw allocator: cudaMalloc on the device (ctx = device id). */
void *raw_alloc(void *ctx, size_t bytes) {
    int device = (int)(intptr_t)ctx;
    pe_cuda_device_scope g(device);
    if (!g.ok()) return nullptr;
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        pe_error(e == cudaErrorMemoryAllocation ? PE_ERR_NOMEM : PE_ERR_DEVICE,
                 "cannot allocate %zu bytes on cuda:%d: %s", bytes, device, cudaGetErrorString(e));
        return nullptr;
    }
    return p;
}

/* cudaFree after the device's stream has drained (kernels queued there may
 * still use the block). */
void raw_free(void *ctx, void *ptr, size_t) {
    int device = (int)(intptr_t)ctx;
    pe_cuda_device_scope g(device);
    cudaStream_t s = nullptr;
    {
        std::lock_guard<std::mutex> lock(g_stream_mu);
        s = g_streams[device];
    }
    cudaError_t e = s ? cudaStreamSynchronize(s) : cudaSuccess;
    if (e != cudaSuccess && e != cudaErrorCudartUnloading) {
        (void)cudaGetLastError();
        pe_log(PE_LOG_ERROR, "cuda:%d: pending work failed before a free: %s", device, cudaGetErrorString(e));
    }
    e = cudaFree(ptr);
    /* At process exit the runtime may be torn down first; the memory goes
     * with the context, nothing to report. */
    if (e != cudaSuccess && e != cudaErrorCudartUnloading) {
        (void)cudaGetLastError();
        pe_log(PE_LOG_ERROR, "cudaFree on cuda:%d failed: %s", device, cudaGetErrorString(e));
    }
}

std::mutex g_cache_mu;
pe_block_cache *g_cache[PE_MAX_PLACES];

/* The device's cache, made on first use (kept until the process ends: a
 * tensor may be freed during exit, after any teardown would have run). */
pe_block_cache *cache_of(int device) {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    if (!g_cache[device]) {
        char name[16];
        snprintf(name, sizeof name, "cuda:%d", device);
        g_cache[device] = pe_block_cache_new(raw_alloc, raw_free, (void *)(intptr_t)device, name);
        if (!g_cache[device]) pe_error(PE_ERR_NOMEM, "cannot make the memory cache of cuda:%d", device);
    }
    return g_cache[device];
}

/* ---- pinned staging (runtime/staging.h): ctx = device id ---- */

void *pinned_alloc(void *ctx, size_t bytes) {
    pe_cuda_device_scope g((int)(intptr_t)ctx);
    void *p = nullptr;
    cudaError_t e = g.ok() ? cudaHostAlloc(&p, bytes, cudaHostAllocPortable) : cudaErrorInvalidDevice;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        pe_error(PE_ERR_NOMEM, "cudaHostAlloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
        return nullptr;
    }
    return p;
}

void pinned_free(void *, void *p) {
    cudaError_t e = cudaFreeHost(p);
    if (e != cudaSuccess && e != cudaErrorCudartUnloading) (void)cudaGetLastError();
}

void *event_new(void *ctx) {
    pe_cuda_device_scope g((int)(intptr_t)ctx);
    cudaEvent_t ev = nullptr;
    cudaError_t e = g.ok() ? cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) : cudaErrorInvalidDevice;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        pe_error(PE_ERR_DEVICE, "cudaEventCreate: %s", cudaGetErrorString(e));
        return nullptr;
    }
    return (void *)ev;
}

void event_free(void *, void *ev) {
    if (cudaEventDestroy(static_cast<cudaEvent_t>(ev)) != cudaSuccess) (void)cudaGetLastError();
}

pe_status staged_copy(void *ctx, void *dst, const void *src, size_t bytes, int to_device) {
    int device = (int)(intptr_t)ctx;
    cudaStream_t s = nullptr;
    PE_CHECK(get_stream(device, &s));
    pe_cuda_device_scope g(device);
    if (!g.ok()) return PE_ERR_DEVICE;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pe_error(PE_ERR_DEVICE, "cudaMemcpyAsync on cuda:%d: %s", device, cudaGetErrorString(e));
    }
    return PE_OK;
}

pe_status event_record(void *ctx, void *ev) {
    int device = (int)(intptr_t)ctx;
    cudaStream_t s = nullptr;
    PE_CHECK(get_stream(device, &s));
    pe_cuda_device_scope g(device);
    cudaError_t e = g.ok() ? cudaEventRecord(static_cast<cudaEvent_t>(ev), s) : cudaErrorInvalidDevice;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pe_error(PE_ERR_DEVICE, "cudaEventRecord on cuda:%d: %s", device, cudaGetErrorString(e));
    }
    return PE_OK;
}

pe_status event_wait(void *ctx, void *ev) {
    cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(ev));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pe_error(PE_ERR_DEVICE, "cuda:%d: a kernel or copy on the stream failed: %s", (int)(intptr_t)ctx,
                        cudaGetErrorString(e));
    }
    return PE_OK;
}

const pe_staging_ops g_staging_ops = {pinned_alloc, pinned_free, event_new, event_free,
                                      staged_copy,  event_record, event_wait};
std::mutex g_staging_mu;
pe_staging *g_staging[PE_MAX_PLACES];
bool g_staging_off[PE_MAX_PLACES];

/* The device's staging ring (4 chunks of 4 MiB), made on first use; NULL
 * when PE_CUDA_PINNED=0 or pinned memory cannot be had (then copies take the
 * synchronous path through pageable memory; logged once). */
pe_staging *staging_of(int device) {
    static int enabled = -1;
    std::lock_guard<std::mutex> lock(g_staging_mu);
    if (enabled < 0) {
        const char *v = getenv("PE_CUDA_PINNED");
        enabled = !(v && v[0] == '0' && !v[1]);
    }
    if (!enabled || g_staging_off[device]) return nullptr;
    if (!g_staging[device]) {
        char name[16];
        snprintf(name, sizeof name, "cuda:%d", device);
        g_staging[device] = pe_staging_new(&g_staging_ops, (void *)(intptr_t)device, (size_t)4 << 20, 4, name);
        if (!g_staging[device]) g_staging_off[device] = true;
    }
    return g_staging[device];
}

/* A pinned-memory failure turns staging off for the device (logged once);
 * any other failure is the copy's error. */
bool staging_unavailable(int device, pe_status st) {
    if (st != PE_ERR_NOMEM) return false;
    std::lock_guard<std::mutex> lock(g_staging_mu);
    if (!g_staging_off[device])
        pe_log(PE_LOG_WARN, "cuda:%d: no pinned staging memory (%s): host copies go through pageable memory", device,
               pe_last_error());
    g_staging_off[device] = true;
    return true;
}

const char *kind_name(cudaMemcpyKind k) {
    switch (k) {
    case cudaMemcpyHostToDevice: return "host-to-device";
    case cudaMemcpyDeviceToHost: return "device-to-host";
    case cudaMemcpyDeviceToDevice: return "device-to-device";
    default: return "host-to-host";
    }
}

} // namespace

extern "C" {

int pe_cuda_device_count(void) {
    std::call_once(g_count_once, [] {
        int n = 0;
        /* No driver, driver too old, or no GPU: the runtime reports an error;
         * for PE that simply means there are no CUDA places. */
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            (void)cudaGetLastError();
            n = 0;
        }
        g_device_count = n < 0 ? 0 : n;
    });
    return g_device_count;
}

void *pe_cuda_malloc(int device, size_t bytes) {
    if (check_device(device, "allocate on") != PE_OK) return nullptr;
    pe_block_cache *c = cache_of(device);
    return c ? pe_block_cache_alloc(c, bytes) : nullptr;
}

void pe_cuda_free(int device, void *ptr) {
    if (!ptr) return;
    if (check_device(device, "free memory on") != PE_OK) {
        pe_log(PE_LOG_ERROR, "%s", pe_last_error());
        return;
    }
    pe_block_cache *c = cache_of(device);
    if (c) pe_block_cache_free(c, ptr);
}

size_t pe_cuda_empty_cache(int device) {
    if (check_device(device, "empty the memory cache of") != PE_OK) return 0;
    pe_block_cache *c = cache_of(device);
    return c ? pe_block_cache_release(c) : 0;
}

pe_status pe_cuda_memory_stats(int device, pe_cuda_mem_stats *out) {
    memset(out, 0, sizeof *out);
    PE_CHECK(check_device(device, "read the memory statistics of"));
    pe_block_cache *c = cache_of(device);
    if (!c) return PE_ERR_NOMEM;
    pe_block_cache_stats s = pe_block_cache_get_stats(c);
    out->held = s.held;
    out->in_use = s.in_use;
    out->cached = s.cached;
    out->peak_held = s.peak_held;
    out->cuda_mallocs = s.raw_allocs;
    out->cuda_frees = s.raw_frees;
    out->cache_hits = s.hits;
    return PE_OK;
}

void *pe_cuda_stream(int device) {
    cudaStream_t s = nullptr;
    if (get_stream(device, &s) != PE_OK) return nullptr;
    return (void *)s;
}

pe_status pe_cuda_sync(int device) {
    cudaStream_t s = nullptr;
    PE_CHECK(get_stream(device, &s));
    pe_cuda_device_scope g(device);
    if (!g.ok()) return PE_ERR_DEVICE;
    cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pe_error(PE_ERR_DEVICE, "cuda:%d: a kernel or copy on the stream failed: %s", device,
                        cudaGetErrorString(e));
    }
    return PE_OK;
}

pe_status pe_cuda_memcpy(void *dst, pe_place dst_place, const void *src, pe_place src_place, size_t bytes) {
    char db[32], sb[32];
    if (!bytes) return PE_OK;
    bool dst_dev = dst_place.kind == PE_PLACE_CUDA, src_dev = src_place.kind == PE_PLACE_CUDA;
    pe_place_str(dst_place, db, sizeof db);
    pe_place_str(src_place, sb, sizeof sb);
    if (!dst || !src)
        return pe_error(PE_ERR_INVALID, "copying %zu bytes from %s to %s: NULL %s pointer", bytes, sb, db,
                        dst ? "source" : "destination");
    cudaMemcpyKind kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                  : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    if (kind == cudaMemcpyHostToHost) {
        memcpy(dst, src, bytes);
        return PE_OK;
    }
    /* The copy runs on the stream of the device side (the destination for
     * device-to-device), after everything already queued there. */
    int dev = dst_dev ? dst_place.id : src_place.id;
    cudaStream_t s = nullptr;
    pe_status st = get_stream(dev, &s);
    if (st != PE_OK) return pe_error_wrap(st, "copying %zu bytes from %s to %s", bytes, sb, db);
    cudaError_t e = cudaSuccess;
    if (kind == cudaMemcpyDeviceToDevice && dst_place.id != src_place.id) {
        /* Another device's stream may still be writing src: drain it first. */
        st = pe_cuda_sync(src_place.id);
        if (st != PE_OK) return pe_error_wrap(st, "copying %zu bytes from %s to %s", bytes, sb, db);
        pe_cuda_device_scope g(dev);
        if (!g.ok()) return pe_error_wrap(PE_ERR_DEVICE, "copying %zu bytes from %s to %s", bytes, sb, db);
        e = cudaMemcpyPeerAsync(dst, dst_place.id, src, src_place.id, bytes, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    } else {
        /* Host <-> device through the pinned ring: a host-to-device copy
         * returns once the source is staged (its DMA ordered before the
         * device's next kernels); device-to-host returns complete. */
        if (kind != cudaMemcpyDeviceToDevice) {
            pe_staging *ring = staging_of(dev);
            if (ring) {
                st = kind == cudaMemcpyHostToDevice ? pe_staging_to_device(ring, dst, src, bytes)
                                                    : pe_staging_to_host(ring, dst, src, bytes);
                if (st == PE_OK) return PE_OK;
                if (!staging_unavailable(dev, st))
                    return pe_error_wrap(st, "%s copy of %zu bytes from %s to %s", kind_name(kind), bytes, sb, db);
            }
        }
        pe_cuda_device_scope g(dev);
        if (!g.ok()) return pe_error_wrap(PE_ERR_DEVICE, "copying %zu bytes from %s to %s", bytes, sb, db);
        e = cudaMemcpyAsync(dst, src, bytes, kind, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pe_error(PE_ERR_DEVICE, "%s copy of %zu bytes from %s to %s failed: %s", kind_name(kind), bytes,
                        sb, db, cudaGetErrorString(e));
    }
    return PE_OK;
}

} // extern "C"
