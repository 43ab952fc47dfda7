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
 *
 * A tensor may carry a LoD (level of detail, Paddle 1.x): per level, the
 * offsets of its sequences, e.g. rows 0..5 as sequences [0,2) [2,5) is one
 * level {0, 2, 5}. It is metadata like dims, owned by the tensor:
 *
 *     const int64_t off[] = {0, 2, 5};
 *     const int64_t *levels[] = {off};
 *     int64_t n[] = {3};
 *     pe_tensor_set_lod(t, 1, levels, n);     // copied; t keeps its own
 *     int64_t k; const int64_t *o = pe_tensor_lod(t, 0, &k);  // borrowed, k == 3
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

#define PE_MAX_LOD_LEVELS 8

/* An immutable, ref-counted LoD: tensors that share it (pe_tensor_share,
 * pe_tensor_copy, an op's output taking its input's) hold a reference;
 * setting a new one replaces the reference, never edits it. offsets[l]
 * has n_offsets[l] entries: 0, non-decreasing, and the last is the number
 * of sequences of level l + 1 (n_offsets[l + 1] - 1), or for the last
 * level the tensor's rows (dims[0]). */
typedef struct pe_lod {
    int refcount;           /* atomic */
    int n_levels;           /* 1..PE_MAX_LOD_LEVELS */
    int64_t n_offsets[PE_MAX_LOD_LEVELS];
    int64_t *offsets[PE_MAX_LOD_LEVELS]; /* into the same allocation */
} pe_lod;

typedef struct pe_tensor {
    pe_dtype dtype;
    int ndim;
    int64_t dims[PE_MAX_DIMS];
    pe_place place;
    pe_buffer *buf;         /* owned reference, may be NULL (no storage yet) */
    size_t offset;          /* byte offset of element 0 inside buf */
    pe_lod *lod;            /* owned reference, NULL: no LoD (a plain tensor) */
} pe_tensor;

/* Empty fp32 scalar-less tensor without storage. Owned by caller. */
pe_tensor *pe_tensor_new(void);
void pe_tensor_free(pe_tensor *t); /* accepts NULL */

/* Sets dtype/dims/place and ensures storage of the right size; keeps the
 * current buffer when it is large enough, on the same place and not shared. */
pe_status pe_tensor_resize(pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims, pe_place place);
/* Sets metadata only (no storage change). Validates ndim/dims. */
pe_status pe_tensor_set_meta(pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims);
/* Makes dst refer to src's storage and metadata, LoD included (buffer
 * and LoD refcounts +1). */
void pe_tensor_share(pe_tensor *dst, const pe_tensor *src);
/* Deep copy into dst (resized to match, on dst_place); dst gets src's LoD
 * (or none when src has none). */
pe_status pe_tensor_copy(pe_tensor *dst, const pe_tensor *src, pe_place dst_place);
/* Drops the storage reference (metadata, LoD included, stays). */
void pe_tensor_clear(pe_tensor *t);

/* ---- LoD (sequence offsets) ------------------------------------------- */

/* Sets t's LoD to a copy of n_levels offset lists (offsets[l]: n_offsets[l]
 * entries; borrowed, copied). n_levels == 0 removes it. Fails (t unchanged)
 * unless each level starts at 0, never decreases, has at least one entry,
 * and ends at the number of sequences of the level below it; the last
 * level's end is checked against the rows by pe_tensor_check_lod. */
pe_status pe_tensor_set_lod(pe_tensor *t, int n_levels, const int64_t *const *offsets, const int64_t *n_offsets);
/* Removes t's LoD (accepts a tensor without one). */
void pe_tensor_clear_lod(pe_tensor *t);
/* dst's LoD becomes src's (a reference, refcount +1; none when src has none). */
void pe_tensor_share_lod(pe_tensor *dst, const pe_tensor *src);
/* Levels of t's LoD (0: none). */
static inline int pe_tensor_lod_levels(const pe_tensor *t) { return t->lod ? t->lod->n_levels : 0; }
/* Offsets of level `level` (borrowed, valid while t keeps this LoD), their
 * count in *n; NULL and *n = 0 when t has no such level. */
const int64_t *pe_tensor_lod(const pe_tensor *t, int level, int64_t *n);
/* Whether t's LoD fits its rows: the last level ends at dims[0]. `what`
 * names the tensor in the error ("feed 'x'"). OK when t has no LoD. */
pe_status pe_tensor_check_lod(const pe_tensor *t, const char *what);
/* Whether a and b hold equal LoDs (both none is equal). */
bool pe_lod_equal(const pe_lod *a, const pe_lod *b);
/* A hash of t's LoD (0: none), for caches keyed by shapes. */
int64_t pe_tensor_lod_hash(const pe_tensor *t);

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
