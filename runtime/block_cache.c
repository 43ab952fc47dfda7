/* runtime/block_cache.c — the caching allocator of runtime/block_cache.h.
 *
 * How: blocks handed out live in an open-addressing hash (pointer -> size),
 * so a free needs only the pointer; free blocks sit in an array sorted by
 * size, searched by bisection for the smallest that fits. Everything under
 * one mutex: allocations are per op, not per element, so contention is low.
 */
#include "runtime/block_cache.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_LIMIT ((size_t)1 << 20) /* 1 MiB */
#define SMALL_STEP ((size_t)512)
#define LARGE_STEP ((size_t)1 << 20)

typedef struct blk {
    void *ptr;
    size_t size;
} blk;

struct pe_block_cache {
    pthread_mutex_t mu;
    pe_raw_alloc_fn raw_alloc;
    pe_raw_free_fn raw_free;
    void *ctx;
    char name[32];
    blk *used;      /* hash table, ptr NULL = empty, (void *)1 = deleted */
    size_t used_cap, used_n, used_tomb;
    blk *free_;     /* sorted by size */
    size_t free_n, free_cap;
    pe_block_cache_stats st;
};

#define TOMB ((void *)1)

size_t pe_block_cache_round(size_t bytes) {
    if (!bytes) bytes = 1;
    size_t step = bytes <= SMALL_LIMIT ? SMALL_STEP : LARGE_STEP;
    if (bytes > SIZE_MAX - step) return 0;
    return (bytes + step - 1) / step * step;
}

static size_t hash_ptr(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* Rebuilds the used table with capacity cap (a power of two). */
static int used_rehash(pe_block_cache *c, size_t cap) {
    blk *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < c->used_cap; i++) {
        void *p = c->used[i].ptr;
        if (!p || p == TOMB) continue;
        size_t h = hash_ptr(p, cap);
        while (t[h].ptr) h = (h + 1) & (cap - 1);
        t[h] = c->used[i];
    }
    free(c->used);
    c->used = t;
    c->used_cap = cap;
    c->used_tomb = 0;
    return 0;
}

static int used_put(pe_block_cache *c, void *p, size_t size) {
    if ((c->used_n + c->used_tomb + 1) * 2 > c->used_cap &&
        used_rehash(c, c->used_cap ? ((c->used_n + 1) * 4 > c->used_cap ? c->used_cap * 2 : c->used_cap) : 64))
        return -1;
    size_t h = hash_ptr(p, c->used_cap);
    while (c->used[h].ptr && c->used[h].ptr != TOMB) h = (h + 1) & (c->used_cap - 1);
    if (c->used[h].ptr == TOMB) c->used_tomb--;
    c->used[h].ptr = p;
    c->used[h].size = size;
    c->used_n++;
    return 0;
}

/* Removes p; its size in *size. -1 when p is not in the table. */
static int used_take(pe_block_cache *c, void *p, size_t *size) {
    if (!c->used_cap) return -1;
    size_t h = hash_ptr(p, c->used_cap);
    for (size_t k = 0; k < c->used_cap && c->used[h].ptr; k++, h = (h + 1) & (c->used_cap - 1))
        if (c->used[h].ptr == p) {
            *size = c->used[h].size;
            c->used[h].ptr = TOMB;
            c->used_n--;
            c->used_tomb++;
            return 0;
        }
    return -1;
}

/* First index of free_ whose size is >= size. */
static size_t free_lower(const pe_block_cache *c, size_t size) {
    size_t lo = 0, hi = c->free_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->free_[mid].size < size) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int free_put(pe_block_cache *c, void *p, size_t size) {
    if (c->free_n == c->free_cap) {
        size_t cap = c->free_cap ? c->free_cap * 2 : 64;
        blk *t = realloc(c->free_, cap * sizeof *t);
        if (!t) return -1;
        c->free_ = t;
        c->free_cap = cap;
    }
    size_t i = free_lower(c, size);
    memmove(c->free_ + i + 1, c->free_ + i, (c->free_n - i) * sizeof *c->free_);
    c->free_[i] = (blk){p, size};
    c->free_n++;
    return 0;
}

pe_block_cache *pe_block_cache_new(pe_raw_alloc_fn alloc, pe_raw_free_fn free_fn, void *ctx, const char *name) {
    pe_block_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->raw_alloc = alloc;
    c->raw_free = free_fn;
    c->ctx = ctx;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "device");
    return c;
}

static size_t release_locked(pe_block_cache *c) {
    size_t n = 0;
    for (size_t i = 0; i < c->free_n; i++) {
        c->raw_free(c->ctx, c->free_[i].ptr, c->free_[i].size);
        n += c->free_[i].size;
        c->st.raw_frees++;
    }
    c->free_n = 0;
    c->st.cached = 0;
    c->st.held -= n;
    return n;
}

void pe_block_cache_destroy(pe_block_cache *c) {
    if (!c) return;
    release_locked(c);
    for (size_t i = 0; i < c->used_cap; i++)
        if (c->used[i].ptr && c->used[i].ptr != TOMB) c->raw_free(c->ctx, c->used[i].ptr, c->used[i].size);
    free(c->used);
    free(c->free_);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void *pe_block_cache_alloc(pe_block_cache *c, size_t bytes) {
    size_t size = pe_block_cache_round(bytes);
    if (!size) {
        pe_error(PE_ERR_NOMEM, "cannot allocate %zu bytes on %s: too large", bytes, c->name);
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    size_t i = free_lower(c, size);
    size_t slack = size <= SMALL_LIMIT ? 0 : size / 8 + LARGE_STEP;
    void *p = NULL;
    if (i < c->free_n && c->free_[i].size - size <= slack) {
        p = c->free_[i].ptr;
        size = c->free_[i].size;
        memmove(c->free_ + i, c->free_ + i + 1, (c->free_n - i - 1) * sizeof *c->free_);
        c->free_n--;
        c->st.cached -= size;
        c->st.hits++;
    } else {
        p = c->raw_alloc(c->ctx, size);
        if (!p && c->free_n) { /* give the cached blocks back and try once more */
            release_locked(c);
            p = c->raw_alloc(c->ctx, size);
        }
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            return NULL; /* raw_alloc set the message */
        }
        c->st.raw_allocs++;
        c->st.held += size;
        if (c->st.held > c->st.peak_held) c->st.peak_held = c->st.held;
    }
    if (used_put(c, p, size)) {
        /* no host memory for the bookkeeping: hand the block back */
        if (free_put(c, p, size) == 0) c->st.cached += size;
        else {
            c->raw_free(c->ctx, p, size);
            c->st.held -= size;
            c->st.raw_frees++;
        }
        pthread_mutex_unlock(&c->mu);
        pe_error(PE_ERR_NOMEM, "cannot allocate %zu bytes on %s: no host memory for the allocator's table", bytes,
                 c->name);
        return NULL;
    }
    c->st.in_use += size;
    pthread_mutex_unlock(&c->mu);
    return p;
}

void pe_block_cache_free(pe_block_cache *c, void *ptr) {
    if (!c || !ptr) return;
    pthread_mutex_lock(&c->mu);
    size_t size = 0;
    if (used_take(c, ptr, &size)) {
        pthread_mutex_unlock(&c->mu);
        pe_log(PE_LOG_ERROR, "%s: freeing %p, which this allocator did not hand out (or freed twice); ignored",
               c->name, ptr);
        return;
    }
    c->st.in_use -= size;
    if (free_put(c, ptr, size) == 0) {
        c->st.cached += size;
    } else { /* no host memory to remember it: give it back to the driver */
        c->raw_free(c->ctx, ptr, size);
        c->st.held -= size;
        c->st.raw_frees++;
    }
    pthread_mutex_unlock(&c->mu);
}

size_t pe_block_cache_release(pe_block_cache *c) {
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    size_t n = release_locked(c);
    pthread_mutex_unlock(&c->mu);
    return n;
}

pe_block_cache_stats pe_block_cache_get_stats(pe_block_cache *c) {
    pe_block_cache_stats s = {0};
    if (!c) return s;
    pthread_mutex_lock(&c->mu);
    s = c->st;
    pthread_mutex_unlock(&c->mu);
    return s;
}
