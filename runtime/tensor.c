/* runtime/tensor.c — ref-counted buffers and contiguous tensors.
 *
 * A tensor keeps its buffer across resizes that fit (capacity reuse), so an
 * executor that runs the same shapes again does no allocation. A shared
 * buffer (refcount > 1) is never resized in place: the tensor detaches and
 * gets its own, so a resize never changes another tensor's data.
 */
#include "runtime/internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pe_buffer *pe_buffer_new(pe_place place, size_t bytes) {
    pe_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        pe_error(PE_ERR_NOMEM, "out of memory allocating a buffer header");
        return NULL;
    }
    b->data = pe_place_alloc(place, bytes);
    if (!b->data) {
        free(b);
        return NULL;
    }
    b->bytes = bytes;
    b->place = place;
    b->refcount = 1;
    return b;
}

pe_buffer *pe_buffer_wrap(pe_place place, void *data, size_t bytes) {
    pe_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        pe_error(PE_ERR_NOMEM, "out of memory allocating a buffer header");
        return NULL;
    }
    b->data = data;
    b->bytes = bytes;
    b->place = place;
    b->refcount = 1;
    b->external = true;
    return b;
}

void pe_buffer_retain(pe_buffer *b) {
    if (b) __atomic_fetch_add(&b->refcount, 1, __ATOMIC_RELAXED);
}

void pe_buffer_release(pe_buffer *b) {
    if (!b) return;
    if (__atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (!b->external) pe_place_free(b->place, b->data, b->bytes);
    free(b);
}

pe_tensor *pe_tensor_new(void) {
    pe_tensor *t = calloc(1, sizeof *t);
    if (!t) pe_error(PE_ERR_NOMEM, "out of memory allocating a tensor");
    return t;
}

void pe_tensor_free(pe_tensor *t) {
    if (!t) return;
    pe_tensor_clear_lod(t);
    pe_buffer_release(t->buf);
    free(t);
}

int64_t pe_dims_prod(const int64_t *dims, int begin, int end) {
    int64_t p = 1;
    for (int i = begin; i < end; i++) p *= dims[i];
    return p;
}

int64_t pe_tensor_numel(const pe_tensor *t) { return pe_dims_prod(t->dims, 0, t->ndim); }

size_t pe_tensor_nbytes(const pe_tensor *t) { return (size_t)pe_tensor_numel(t) * pe_dtype_size(t->dtype); }

const char *pe_tensor_data_problem(const pe_tensor *t, char *buf, size_t n) {
    size_t need = pe_tensor_nbytes(t);
    if (!need) return NULL;
    if (!t->buf || !t->buf->data) {
        snprintf(buf, n, "no data (never initialized?)");
        return buf;
    }
    if (t->offset > t->buf->bytes || t->buf->bytes - t->offset < need) {
        char ds[200];
        snprintf(buf, n, "a buffer of %zu bytes where %s %s needs %zu", t->offset > t->buf->bytes ? 0 :
                 t->buf->bytes - t->offset, pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, ds, sizeof ds),
                 need);
        return buf;
    }
    return NULL;
}

/* "[2, 3]". Written by hand, not with snprintf: many infer functions format
 * their inputs' dims up front for the messages they might give, on every
 * run (an eager op pays it per call); snprintf made that ~3,000
 * instructions per call. Output cut short (still NUL-terminated) when n is
 * too small, as snprintf would. */
char *pe_dims_str(int ndim, const int64_t *dims, char *buf, size_t n) {
    if (!n) return buf;
    size_t k = 0;
#define PUT(c) do { if (k + 1 < n) buf[k++] = (c); } while (0)
    PUT('[');
    for (int i = 0; i < ndim; i++) {
        if (i) {
            PUT(',');
            PUT(' ');
        }
        char d[24];
        int m = 0;
        uint64_t v = dims[i] < 0 ? (uint64_t)0 - (uint64_t)dims[i] : (uint64_t)dims[i];
        do d[m++] = (char)('0' + v % 10); while ((v /= 10) && m < 23);
        if (dims[i] < 0) PUT('-');
        while (m) PUT(d[--m]);
    }
    PUT(']');
#undef PUT
    buf[k] = '\0';
    return buf;
}

pe_status pe_tensor_set_meta(pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims) {
    if (!pe_dtype_valid((int)dt)) return pe_error(PE_ERR_INVALID, "invalid dtype %d", (int)dt);
    if (ndim < 0 || ndim > PE_MAX_DIMS)
        return pe_error(PE_ERR_INVALID, "rank %d is outside 0..%d", ndim, PE_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return pe_error(PE_ERR_INVALID, "negative dimension %lld at axis %d", (long long)dims[i], i);
        if (dims[i] && numel > (INT64_C(1) << 48) / dims[i])
            return pe_error(PE_ERR_INVALID, "tensor too large (dimension %d = %lld)", i, (long long)dims[i]);
        numel *= dims[i];
    }
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
    for (int i = ndim; i < PE_MAX_DIMS; i++) t->dims[i] = 0;
    return PE_OK;
}

pe_status pe_tensor_resize(pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims, pe_place place) {
    PE_CHECK(pe_tensor_set_meta(t, dt, ndim, dims));
    size_t need = pe_tensor_nbytes(t);
    pe_buffer *b = t->buf;
    if (b && pe_place_eq(b->place, place) && t->offset + need <= b->bytes &&
        __atomic_load_n(&b->refcount, __ATOMIC_ACQUIRE) == 1) {
        t->place = place;
        return PE_OK;
    }
    pe_buffer *nb = pe_buffer_new(place, need);
    if (!nb) return pe_error_wrap(PE_ERR_NOMEM, "resizing tensor");
    pe_buffer_release(t->buf);
    t->buf = nb;
    t->offset = 0;
    t->place = place;
    return PE_OK;
}

void pe_tensor_share(pe_tensor *dst, const pe_tensor *src) {
    if (dst == src) return;
    pe_buffer_retain(src->buf);
    pe_buffer_release(dst->buf);
    dst->buf = src->buf;
    dst->offset = src->offset;
    dst->dtype = src->dtype;
    dst->ndim = src->ndim;
    memcpy(dst->dims, src->dims, sizeof dst->dims);
    dst->place = src->place;
    pe_tensor_share_lod(dst, src);
}

void pe_tensor_clear(pe_tensor *t) {
    pe_buffer_release(t->buf);
    t->buf = NULL;
    t->offset = 0;
}

pe_status pe_tensor_copy(pe_tensor *dst, const pe_tensor *src, pe_place dst_place) {
    if (dst == src) return PE_OK;
    if (!src->buf && pe_tensor_numel(src) > 0)
        return pe_error(PE_ERR_INVALID, "copying a tensor that has no data");
    /* Detach first if dst shares storage with src or anyone else. */
    if (dst->buf && __atomic_load_n(&dst->buf->refcount, __ATOMIC_ACQUIRE) > 1) pe_tensor_clear(dst);
    PE_CHECK(pe_tensor_resize(dst, src->dtype, src->ndim, src->dims, dst_place));
    pe_tensor_share_lod(dst, src);
    return pe_memcpy_places(pe_tensor_data(dst), dst_place, pe_tensor_data(src), src->place,
                            pe_tensor_nbytes(src));
}

/* ---- LoD ---------------------------------------------------------------- */

static void lod_release(pe_lod *l) {
    if (l && __atomic_sub_fetch(&l->refcount, 1, __ATOMIC_ACQ_REL) == 0) free(l);
}

void pe_tensor_clear_lod(pe_tensor *t) {
    lod_release(t->lod);
    t->lod = NULL;
}

void pe_tensor_share_lod(pe_tensor *dst, const pe_tensor *src) {
    if (dst == src || dst->lod == src->lod) return;
    if (src->lod) __atomic_fetch_add(&src->lod->refcount, 1, __ATOMIC_RELAXED);
    lod_release(dst->lod);
    dst->lod = src->lod;
}

pe_status pe_tensor_set_lod(pe_tensor *t, int n_levels, const int64_t *const *offsets, const int64_t *n_offsets) {
    if (n_levels == 0) {
        pe_tensor_clear_lod(t);
        return PE_OK;
    }
    if (n_levels < 0 || n_levels > PE_MAX_LOD_LEVELS)
        return pe_error(PE_ERR_INVALID, "LoD: %d levels is outside 0..%d", n_levels, PE_MAX_LOD_LEVELS);
    int64_t total = 0;
    for (int l = 0; l < n_levels; l++) {
        const int64_t *o = offsets[l];
        int64_t n = n_offsets[l];
        if (n < 1 || !o) return pe_error(PE_ERR_INVALID, "LoD level %d is empty: it needs at least the offset 0", l);
        if (o[0] != 0) return pe_error(PE_ERR_INVALID, "LoD level %d starts at %lld, not 0", l, (long long)o[0]);
        for (int64_t i = 1; i < n; i++)
            if (o[i] < o[i - 1])
                return pe_error(PE_ERR_INVALID, "LoD level %d decreases at entry %lld (%lld after %lld)", l,
                                (long long)i, (long long)o[i], (long long)o[i - 1]);
        if (l + 1 < n_levels && o[n - 1] != n_offsets[l + 1] - 1)
            return pe_error(PE_ERR_INVALID,
                            "LoD level %d ends at %lld, but level %d holds %lld sequences: a level's last offset is "
                            "the number of sequences of the level below it",
                            l, (long long)o[n - 1], l + 1, (long long)(n_offsets[l + 1] - 1));
        total += n;
    }
    pe_lod *lod = malloc(sizeof *lod + sizeof(int64_t) * (size_t)total);
    if (!lod) return pe_error(PE_ERR_NOMEM, "out of memory allocating a LoD of %lld offsets", (long long)total);
    memset(lod, 0, sizeof *lod);
    lod->refcount = 1;
    lod->n_levels = n_levels;
    int64_t *p = (int64_t *)(lod + 1);
    for (int l = 0; l < n_levels; l++) {
        lod->offsets[l] = p;
        lod->n_offsets[l] = n_offsets[l];
        memcpy(p, offsets[l], sizeof *p * (size_t)n_offsets[l]);
        p += n_offsets[l];
    }
    lod_release(t->lod);
    t->lod = lod;
    return PE_OK;
}

const int64_t *pe_tensor_lod(const pe_tensor *t, int level, int64_t *n) {
    if (!t->lod || level < 0 || level >= t->lod->n_levels) {
        if (n) *n = 0;
        return NULL;
    }
    if (n) *n = t->lod->n_offsets[level];
    return t->lod->offsets[level];
}

pe_status pe_tensor_check_lod(const pe_tensor *t, const char *what) {
    if (!t->lod) return PE_OK;
    int l = t->lod->n_levels - 1;
    int64_t end = t->lod->offsets[l][t->lod->n_offsets[l] - 1];
    char ds[200];
    if (t->ndim < 1)
        return pe_error(PE_ERR_INVALID, "%s: a LoD needs rows, but the tensor has shape %s", what,
                        pe_dims_str(t->ndim, t->dims, ds, sizeof ds));
    if (end != t->dims[0])
        return pe_error(PE_ERR_INVALID,
                        "%s: its LoD's last level ends at %lld, but the tensor has %lld rows (shape %s): the "
                        "sequences must cover the rows exactly",
                        what, (long long)end, (long long)t->dims[0], pe_dims_str(t->ndim, t->dims, ds, sizeof ds));
    return PE_OK;
}

bool pe_lod_equal(const pe_lod *a, const pe_lod *b) {
    if (a == b) return true;
    if (!a || !b || a->n_levels != b->n_levels) return false;
    for (int l = 0; l < a->n_levels; l++)
        if (a->n_offsets[l] != b->n_offsets[l] ||
            memcmp(a->offsets[l], b->offsets[l], sizeof(int64_t) * (size_t)a->n_offsets[l]))
            return false;
    return true;
}

int64_t pe_tensor_lod_hash(const pe_tensor *t) {
    if (!t->lod) return 0;
    uint64_t h = 1469598103934665603ULL;
    for (int l = 0; l < t->lod->n_levels; l++) {
        h = (h ^ (uint64_t)t->lod->n_offsets[l]) * 1099511628211ULL;
        for (int64_t i = 0; i < t->lod->n_offsets[l]; i++)
            h = (h ^ (uint64_t)t->lod->offsets[l][i]) * 1099511628211ULL;
    }
    return (int64_t)(h | 1); /* never 0 */
}
