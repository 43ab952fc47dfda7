/* runtime/staging.h — pinned host staging for copies between the host and a
 * GPU: a ring of page-locked chunks per device, so a feed's host-to-device
 * copy returns as soon as its bytes are in a chunk (the DMA runs on the
 * device's stream while the host goes on), and a large copy in either
 * direction pipelines the host memcpy of one chunk with the DMA of the next.
 *
 *     pe_staging *s = pe_staging_new(&ops, ctx, 4 << 20, 4, "cuda:0");
 *     pe_staging_to_device(s, dev_dst, host_src, n);  // host_src may be freed on return
 *     pe_staging_to_host(s, host_dst, dev_src, n);    // host_dst complete on return
 *     pe_staging_destroy(s);                          // waits for the copies in flight
 *
 * How: each slot is one chunk of pinned memory (allocated on first use) and
 * one event. A chunk is written by the host only after its event says the
 * copy that last read it (to device) or wrote it (to host) has completed; the
 * copies themselves go to the device's one stream, in issue order after the
 * kernels already queued there, so a later kernel sees the fed bytes and a
 * read-back sees the kernels' results. Thread-safe: one mutex per ring (the
 * copies of one device go to one stream anyway).
 *
 * Plain C over callbacks (pinned allocation, async copy, event record/wait),
 * so tests/unit/test_staging.c checks the ordering on the CPU with a fake
 * stream that performs copies late; runtime/cuda/cuda_runtime.cu supplies
 * the CUDA ones. */
#ifndef PE_RUNTIME_STAGING_H
#define PE_RUNTIME_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_staging_ops {
    /* Page-locked host memory of `bytes`; NULL (with pe_error set) on failure. */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
    /* An event; NULL (with pe_error set) on failure. */
    void *(*event_new)(void *ctx);
    void (*event_free)(void *ctx, void *ev);
    /* Queue a copy of `bytes` from src to dst on the device's stream
     * (to_device: host chunk -> device, else device -> host chunk). */
    pe_status (*copy_async)(void *ctx, void *dst, const void *src, size_t bytes, int to_device);
    /* Record `ev` after everything queued so far; block until it completed. */
    pe_status (*record)(void *ctx, void *ev);
    pe_status (*wait)(void *ctx, void *ev);
} pe_staging_ops;

typedef struct pe_staging pe_staging;

typedef struct pe_staging_stats {
    uint64_t to_device_bytes, to_host_bytes;
    uint64_t chunks;       /* chunk copies issued */
    uint64_t waits;        /* times the host waited for a slot's copy */
    size_t pinned;         /* pinned bytes held */
} pe_staging_stats;

/* `ops` and `ctx` are borrowed (must outlive the ring); `name` is copied and
 * names the ring in messages. chunk > 0 bytes per slot, 1 <= slots <= 64.
 * NULL on no memory or bad arguments (pe_error says which). */
pe_staging *pe_staging_new(const pe_staging_ops *ops, void *ctx, size_t chunk, int slots, const char *name);
/* Waits for the copies in flight, then frees the chunks and events. Accepts NULL. */
void pe_staging_destroy(pe_staging *s);
/* Copies `bytes` from host `src` to device `dst`. Returns once src has been
 * read (into the chunks); the DMA may still be in flight, ordered before
 * whatever is queued on the device's stream next. */
pe_status pe_staging_to_device(pe_staging *s, void *dst, const void *src, size_t bytes);
/* Copies `bytes` from device `src` (after the work queued on its stream) to
 * host `dst`; dst is complete on return. */
pe_status pe_staging_to_host(pe_staging *s, void *dst, const void *src, size_t bytes);
/* Blocks until every copy issued through the ring has completed. */
pe_status pe_staging_drain(pe_staging *s);
pe_staging_stats pe_staging_get_stats(pe_staging *s);

#ifdef __cplusplus
}
#endif
#endif
