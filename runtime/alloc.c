/* runtime/alloc.c — place allocators with byte accounting.
 *
 * CPU memory is 64-byte aligned (cache line / AVX-512) and counted per place:
 * bytes in use, peak, and the number of system allocations, which tests use
 * to show that steady-state runs do not allocate. CUDA memory goes through
 * runtime/cuda/ when PE is built with CUDA.
 */
#include "runtime/internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

typedef struct {
    _Atomic int64_t in_use, peak, n_allocs, n_frees;
} place_stats;

static place_stats g_stats[PE_PLACE_KIND_COUNT][PE_MAX_PLACES];

static place_stats *stats_of(pe_place p) {
    int id = p.id < 0 ? 0 : (p.id >= PE_MAX_PLACES ? PE_MAX_PLACES - 1 : p.id);
    return &g_stats[p.kind == PE_PLACE_CUDA ? PE_PLACE_CUDA : PE_PLACE_CPU][id];
}

static void account(pe_place p, int64_t delta) {
    place_stats *s = stats_of(p);
    int64_t now = atomic_fetch_add(&s->in_use, delta) + delta;
    if (delta > 0) {
        atomic_fetch_add(&s->n_allocs, 1);
        int64_t pk = atomic_load(&s->peak);
        while (now > pk && !atomic_compare_exchange_weak(&s->peak, &pk, now)) {}
    } else {
        atomic_fetch_add(&s->n_frees, 1);
    }
}

void *pe_place_alloc(pe_place place, size_t bytes) {
    char pb[32];
    size_t n = bytes ? bytes : 1;
    void *p = NULL;
    if (place.kind == PE_PLACE_CPU) {
        /* A request beyond the machine's memory (a hostile program's shape)
         * is refused here, before the C allocator (or a sanitizer's) sees it. */
        static size_t g_phys;
        size_t phys = __atomic_load_n(&g_phys, __ATOMIC_RELAXED);
        if (!phys) {
            phys = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
            __atomic_store_n(&g_phys, phys, __ATOMIC_RELAXED);
        }
        if (bytes > phys || bytes > SIZE_MAX - 64) {
            pe_error(PE_ERR_NOMEM, "cannot allocate %zu bytes on %s: more than the machine's memory (%zu bytes)",
                     bytes, pe_place_str(place, pb, sizeof pb), phys);
            return NULL;
        }
        n = (n + 63) & ~(size_t)63;
        p = aligned_alloc(64, n);
        if (!p) {
            pe_error(PE_ERR_NOMEM, "out of memory allocating %zu bytes on %s", bytes,
                     pe_place_str(place, pb, sizeof pb));
            return NULL;
        }
    } else {
#ifdef PE_WITH_CUDA
        p = pe_cuda_malloc(place.id, n);
        if (!p) return NULL;
#else
        pe_error(PE_ERR_UNSUPPORTED, "cannot allocate on %s: PE was built without CUDA",
                 pe_place_str(place, pb, sizeof pb));
        return NULL;
#endif
    }
    account(place, (int64_t)bytes);
    return p;
}

void pe_place_free(pe_place place, void *ptr, size_t bytes) {
    if (!ptr) return;
    if (place.kind == PE_PLACE_CPU) {
        free(ptr);
    } else {
#ifdef PE_WITH_CUDA
        pe_cuda_free(place.id, ptr);
#endif
    }
    account(place, -(int64_t)bytes);
}

pe_alloc_stats pe_alloc_get_stats(pe_place place) {
    place_stats *s = stats_of(place);
    pe_alloc_stats r = {atomic_load(&s->in_use), atomic_load(&s->peak),
                        atomic_load(&s->n_allocs), atomic_load(&s->n_frees)};
    return r;
}

void pe_alloc_reset_peak(pe_place place) {
    place_stats *s = stats_of(place);
    atomic_store(&s->peak, atomic_load(&s->in_use));
}

pe_status pe_memcpy_places(void *dst, pe_place dst_place, const void *src, pe_place src_place, size_t bytes) {
    if (!bytes) return PE_OK;
    if (dst_place.kind == PE_PLACE_CPU && src_place.kind == PE_PLACE_CPU) {
        memcpy(dst, src, bytes);
        return PE_OK;
    }
#ifdef PE_WITH_CUDA
    return pe_cuda_memcpy(dst, dst_place, src, src_place, bytes);
#else
    return pe_error(PE_ERR_UNSUPPORTED, "cannot copy to/from a CUDA place: PE was built without CUDA");
#endif
}

/* ---- files ------------------------------------------------------------ */

pe_status pe_read_file(const char *path, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return pe_error(PE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return pe_error(PE_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return pe_error(PE_ERR_NOMEM, "out of memory reading '%s' (%zu bytes)", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(buf);
        return pe_error(PE_ERR_IO, "short read on '%s' (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return PE_OK;
}

pe_status pe_write_file_atomic(const char *path, const void *data, size_t size) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return pe_error(PE_ERR_INVALID, "path too long: '%s'", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return pe_error(PE_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = size;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return pe_error(PE_ERR_IO, "write to '%s' failed: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return pe_error(PE_ERR_IO, "cannot flush '%s': %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return pe_error(PE_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(e));
    }
    return PE_OK;
}
