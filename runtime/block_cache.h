/* runtime/block_cache.h — a caching allocator over a raw allocator (one per
 * GPU: cudaMalloc / cudaFree), so a training loop's steady state asks the
 * driver for nothing.
 *
 *     pe_block_cache *c = pe_block_cache_new(raw_alloc, raw_free, ctx, "cuda:0");
 *     void *p = pe_block_cache_alloc(c, bytes);   // a cached block when one fits
 *     pe_block_cache_free(c, p);                  // back to the cache, not the driver
 *     pe_block_cache_release(c);                  // cached blocks back to the driver
 *
 * Sizes are rounded to a class (512 B steps up to 1 MiB, 1 MiB steps above);
 * a request takes the smallest cached block of its class or, above 1 MiB, one
 * at most 1/8 + 1 MiB larger, else a new raw block. When the raw allocator
 * fails, every cached block is released and the request tried once more.
 * Blocks are never split or merged: a training step allocates the same sizes
 * every step, which this serves exactly. Thread-safe (one mutex per cache).
 * Reuse without synchronization is the caller's contract: every user of a
 * block runs in one stream order (a GPU's compute stream), so a block freed
 * by one op and handed to the next is written only after the first is done.
 * Plain C with the raw allocator as callbacks, so tests/unit/test_block_cache.c
 * checks the bookkeeping on the CPU. */
#ifndef PE_RUNTIME_BLOCK_CACHE_H
#define PE_RUNTIME_BLOCK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raw allocator: NULL on failure (with pe_error set); free gets the size
 * the block was allocated with. */
typedef void *(*pe_raw_alloc_fn)(void *ctx, size_t bytes);
typedef void (*pe_raw_free_fn)(void *ctx, void *ptr, size_t bytes);

typedef struct pe_block_cache pe_block_cache;

typedef struct pe_block_cache_stats {
    size_t held;          /* bytes of raw blocks held: in use + cached */
    size_t in_use;        /* bytes of blocks handed out (rounded sizes) */
    size_t cached;        /* bytes of free blocks kept for reuse */
    size_t peak_held;
    uint64_t raw_allocs;  /* calls of the raw allocator that succeeded */
    uint64_t raw_frees;
    uint64_t hits;        /* requests served from the cache */
} pe_block_cache_stats;

/* `name` (copied) names the cache in messages ("cuda:0"). NULL on no memory. */
pe_block_cache *pe_block_cache_new(pe_raw_alloc_fn alloc, pe_raw_free_fn free_fn, void *ctx, const char *name);
/* Releases every block (in use or cached) to the raw allocator. Accepts NULL. */
void pe_block_cache_destroy(pe_block_cache *c);
/* A block of at least `bytes` (0 is taken as 1); NULL + message on failure. */
void *pe_block_cache_alloc(pe_block_cache *c, size_t bytes);
/* Back to the cache. NULL is a no-op; a pointer this cache did not hand out
 * is logged as an error and left alone. */
void pe_block_cache_free(pe_block_cache *c, void *ptr);
/* Cached (free) blocks back to the raw allocator; returns the bytes released. */
size_t pe_block_cache_release(pe_block_cache *c);
pe_block_cache_stats pe_block_cache_get_stats(pe_block_cache *c);
/* The size class a request of `bytes` is rounded to. */
size_t pe_block_cache_round(size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
