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

char *pe_dims_str(int ndim, const int64_t *dims, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
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
    return pe_memcpy_places(pe_tensor_data(dst), dst_place, pe_tensor_data(src), src->place,
                            pe_tensor_nbytes(src));
}
