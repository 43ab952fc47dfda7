/* pe/tensor.h — tensors on ref-counted buffers, and the allocators behind them.
 *
 *     pe_tensor *t = pe_tensor_new();
 *     int64_t dims[2] = {4, 3};
 *     if (pe_tensor_resize(t, PE_DTYPE_FP32, 2, dims, pe_place_cpu(0)) != PE_OK) ...
 *     float *x = pe_tensor_data(t);           // 4*3 contiguous floats, 64-byte aligned
 *     pe_tensor_free(t);
 *
 * A tensor is dtype + dims (row-major, contiguous, no strides) + a reference
 * to a buffer. Buffers are ref-counted so that scopes and executors can share
 * one allocation (pe_tensor_share); resizing to a size that fits the current
 * buffer keeps it, so steady-state runs do not allocate.
 */
#ifndef PE_TENSOR_H
#define PE_TENSOR_H

#include "pe/dtype.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

#define PE_MAX_DIMS 8

/* ---- allocator -------------------------------------------------------- */

/* 64-byte aligned allocation on a place, with byte accounting.
 * Returns NULL and sets the error message on failure. Owned by the caller;
 * release with pe_place_free(place, ptr, bytes). */
void *pe_place_alloc(pe_place place, size_t bytes);
void pe_place_free(pe_place place, void *ptr, size_t bytes);

typedef struct pe_alloc_stats {
    int64_t bytes_in_use;   /* currently allocated */
    int64_t peak_bytes;     /* high-water mark since start or reset */
    int64_t n_allocs;       /* number of allocation calls (system allocations) */
    int64_t n_frees;
} pe_alloc_stats;

pe_alloc_stats pe_alloc_get_stats(pe_place place);
void pe_alloc_reset_peak(pe_place place);

/* The CPU memory budget: every CPU place's allocations together stay within
 * it; pe_place_alloc refuses a request that would pass it (PE_ERR_NOMEM,
 * naming the budget). Default: PE_MAX_MEMORY (bytes, or "512M", "8G", "50%"
 * of the machine's memory), read once, else 80% of the machine's memory (or
 * of the cgroup's limit when lower). pe_alloc_set_budget(bytes) overrides
 * it for the process (<= 0: back to the default). */
int64_t pe_alloc_budget(void);
void pe_alloc_set_budget(int64_t bytes);
int64_t pe_alloc_cpu_bytes(void); /* bytes all CPU places hold now */

/* ---- buffer ----------------------------------------------------------- */

typedef struct pe_buffer {
    void *data;
    size_t bytes;
    pe_place place;
    int refcount;           /* atomic */
    bool external;          /* data is borrowed, not freed with the buffer */
} pe_buffer;

/* New buffer of `bytes` on place, refcount 1. Owned by caller (pe_buffer_release). */
pe_buffer *pe_buffer_new(pe_place place, size_t bytes);
/* Wraps borrowed memory; the caller keeps it alive while the buffer lives. */
pe_buffer *pe_buffer_wrap(pe_place place, void *data, size_t bytes);
void pe_buffer_retain(pe_buffer *b);
void pe_buffer_release(pe_buffer *b); /* accepts NULL */

/* ---- tensor ----------------------------------------------------------- */

typedef struct pe_tensor {
    pe_dtype dtype;
    int ndim;
    int64_t dims[PE_MAX_DIMS];
    pe_place place;
    pe_buffer *buf;         /* owned reference, may be NULL (no storage yet) */
    size_t offset;          /* byte offset of element 0 inside buf */
} pe_tensor;

/* Empty fp32 scalar-less tensor without storage. Owned by caller. */
pe_tensor *pe_tensor_new(void);
void pe_tensor_free(pe_tensor *t); /* accepts NULL */

/* Sets dtype/dims/place and ensures storage of the right size; keeps the
 * current buffer when it is large enough, on the same place and not shared. */
pe_status pe_tensor_resize(pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims, pe_place place);
/* Sets metadata only (no storage change). Validates ndim/dims. */
pe_status pe_tensor_set_meta(pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims);
/* Makes dst refer to src's storage and metadata (buffer refcount +1). */
void pe_tensor_share(pe_tensor *dst, const pe_tensor *src);
/* Deep copy into dst (resized to match, on dst_place). */
pe_status pe_tensor_copy(pe_tensor *dst, const pe_tensor *src, pe_place dst_place);
/* Drops the storage reference (metadata stays). */
void pe_tensor_clear(pe_tensor *t);

int64_t pe_tensor_numel(const pe_tensor *t);
size_t pe_tensor_nbytes(const pe_tensor *t);
static inline void *pe_tensor_data(const pe_tensor *t) {
    return t->buf ? (char *)t->buf->data + t->offset : NULL;
}
static inline bool pe_tensor_has_data(const pe_tensor *t) { return t->buf != NULL; }
/* Product of dims[begin..end). */
int64_t pe_dims_prod(const int64_t *dims, int begin, int end);
/* Writes "[4, 3]" into buf; returns buf. */
char *pe_dims_str(int ndim, const int64_t *dims, char *buf, size_t n);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
