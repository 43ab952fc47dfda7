/* ops/cpu/dnnl_util.h — the oneDNN glue shared by the CPU kernels (internal).
 *
 *     static pe_status conv_build(pe_dnnl_entry *e, const void *geom, int nt) {
 *         PE_CHECK(pe_dnnl_entry_init(e, &conv_desc, nt));                  // the primitive
 *         PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_SRC, &src_md, PE_DNNL_IN));  // handle 0
 *         PE_CHECK(pe_dnnl_entry_bind(e, DNNL_ARG_DST, &dst_md, PE_DNNL_OUT)); // handle 1
 *         return PE_OK;
 *     }
 *     pe_dnnl_key key;
 *     pe_dnnl_key_init(&key, PE_DNNL_CONV);
 *     pe_dnnl_key_add(&key, n); ...                    // every shape/attr that matters
 *     bool fallback;
 *     PE_CHECK(pe_dnnl_run_cached(&key, ctx->place, nt, conv_build, &geom, (void *[]){x, y}, &fallback));
 *     if (fallback) ...own loops...;
 *
 * One CPU engine for the process. A *cache entry* owns everything needed to
 * run one primitive without allocating: the primitive, a stream, a memory
 * object per bound argument (its data handle is set to the tensor's data on
 * every run), and — when oneDNN prefers a blocked layout for an argument —
 * the reorder between the plain NCHW tensor and a copy in that layout.
 * Entries are per place and checked out while a kernel runs, so two places,
 * or two independent ops of one place, running ops with the same key get
 * two entries; in the steady state every key has as many entries per place
 * as ever ran at once there, and no run creates a primitive or allocates. The cache is a
 * mutex-protected LRU list, bounded.
 *
 * The data an entry needs only while it runs — oneDNN's scratchpad (user
 * mode), the blocked-layout copies and the kernel's buffer
 * (pe_dnnl_entry_reserve) — is one workspace, attached at checkout and
 * given back at release. Under the memory plan it is the op's slot in the
 * place's arena (ctx->workspace, sized at plan time by the op's
 * pe_workspace_fn through pe_dnnl_workspace_bytes); without one (or when
 * the slot is smaller than the entry needs), a block of the running place's
 * pool: blocks from pe_place_alloc (counted in pe_alloc_get_stats, under
 * PE's memory budget), as many per place as ran at once, each the size of
 * the largest workspace it served (pe_dnnl_workspace_stats).
 */
#ifndef PE_OPS_CPU_DNNL_UTIL_H
#define PE_OPS_CPU_DNNL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>

#include "pe/dtype.h"
#include "pe/status.h"

#define PE_DNNL_KEY_MAX 40
#define PE_DNNL_MAX_BIND 10

enum { PE_DNNL_CONV = 1, PE_DNNL_POOL, PE_DNNL_BNORM,
       PE_DNNL_CONV_BWD_DATA, PE_DNNL_CONV_BWD_WEIGHTS, PE_DNNL_POOL_BWD, PE_DNNL_BNORM_BWD, PE_DNNL_MATMUL };
enum { PE_DNNL_IN = 0, PE_DNNL_OUT = 1 };

typedef struct pe_dnnl_key {
    int n;
    int64_t v[PE_DNNL_KEY_MAX];
} pe_dnnl_key;

typedef struct pe_dnnl_entry pe_dnnl_entry;

void pe_dnnl_key_init(pe_dnnl_key *k, int kind);
/* Appends a value; PE_ASSERT on overflow (keys are fixed-size by design). */
void pe_dnnl_key_add(pe_dnnl_key *k, int64_t v);

/* The process-wide CPU engine (created once). NULL + error message on failure. */
dnnl_engine_t pe_dnnl_engine(void);

/* Creates the primitive descriptor (user-mode scratchpad) and the primitive
 * from an op descriptor (dnnl_convolution_desc_t, ...) with n_threads OpenMP
 * threads (oneDNN sizes its work split at creation). When oneDNN has no
 * implementation the entry is marked unsupported (see below) and
 * PE_ERR_UNSUPPORTED returned; PE_ERR_DEVICE on other oneDNN failures. */
pe_status pe_dnnl_entry_init(pe_dnnl_entry *e, const void *op_desc, int n_threads);
/* The same for a backward primitive: fwd_desc is the matching forward
 * (training) op descriptor; its primitive descriptor is the hint oneDNN
 * wants for backward primitives (layouts, workspace) and lives as long as
 * the entry. */
pe_status pe_dnnl_entry_init_bwd(pe_dnnl_entry *e, const void *op_desc, const void *fwd_desc, int n_threads);
/* Binds primitive argument `arg` to the next run handle. user_md describes
 * the tensor as stored (plain); when the primitive wants another layout the
 * entry gets a copy in that layout (a part of its workspace) and a reorder
 * (before the run for inputs, after it for outputs). Marks the entry ready. */
pe_status pe_dnnl_entry_bind(pe_dnnl_entry *e, int arg, const dnnl_memory_desc_t *user_md, int dir);
/* An "unsupported" entry is a cached negative answer: oneDNN cannot run this
 * key, the kernel uses its own loops. Release it like any other entry.
 * set_unsupported marks the entry and returns PE_ERR_UNSUPPORTED. */
int pe_dnnl_entry_unsupported(const pe_dnnl_entry *e);
pe_status pe_dnnl_entry_set_unsupported(pe_dnnl_entry *e);
/* At build: `bytes` of the entry's workspace for the kernel's own use
 * (once per entry). After checkout: pe_dnnl_entry_buffer is where they are,
 * valid until pe_dnnl_release (contents not kept between checkouts). */
void pe_dnnl_entry_reserve(pe_dnnl_entry *e, size_t bytes);
void *pe_dnnl_entry_buffer(pe_dnnl_entry *e);
/* Runs: handles[i] is the data of the i-th bound argument (the workspace
 * parts are the attached block's). Sets the calling
 * thread's OpenMP thread count to n_threads for the run (oneDNN is the
 * OpenMP build, its parallel regions follow the caller's setting), restores it. */
pe_status pe_dnnl_entry_run(pe_dnnl_entry *e, void *const *handles, int n_threads);
/* Returns the entry to the cache (inserting a new one) and its workspace
 * block to the pool. */
void pe_dnnl_release(pe_dnnl_entry *e);
/* Destroys an entry whose initialisation failed (never cached). */
void pe_dnnl_discard(pe_dnnl_entry *e);

/* A plain f32 memory descriptor (tag: dnnl_nchw, dnnl_x, ...; or
 * dnnl_format_tag_any to let a primitive choose). */
pe_status pe_dnnl_md_plain(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag);

/* The whole acquire / build-on-miss / run / release sequence of the usage
 * example above: `build` fills a new entry (init + binds) from `geom`;
 * handles[i] is the data of the i-th bound argument; the workspace comes
 * from `place`'s pool (a CPU place: the kernel's ctx->place). *fallback is
 * set (and nothing run) when oneDNN has no implementation for the key — an
 * answer remembered in the cache — so the caller runs its own loops. Errors
 * carry a message (pe_last_error) for the caller to wrap. */
typedef pe_status (*pe_dnnl_build_fn)(pe_dnnl_entry *e, const void *geom, int n_threads);
/* ws, ws_bytes: the op's planned workspace (ctx->workspace, borrowed for
 * the call), used when it holds the entry's; NULL / 0: the place's pool. */
pe_status pe_dnnl_run_cached(const pe_dnnl_key *key, pe_place place, int n_threads, void *ws, size_t ws_bytes,
                             pe_dnnl_build_fn build, const void *geom, void *const *handles, bool *fallback);

/* Its acquire / build-on-miss half, for a caller that keeps the entry checked
 * out around its own run (to use the entry's buffer): *out is the ready entry
 * with its workspace attached (pe_dnnl_release it after the run), or NULL —
 * nothing checked out — when oneDNN has no implementation for the key. */
pe_status pe_dnnl_acquire_built(const pe_dnnl_key *key, pe_place place, int n_threads, void *ws, size_t ws_bytes,
                                pe_dnnl_build_fn build, const void *geom, pe_dnnl_entry **out);

/* The workspace bytes key's primitive needs on place with n_threads (0 when
 * oneDNN has no implementation for it): builds the entry on a miss and
 * leaves it in the cache, so the first run finds it. For the kernels'
 * pe_workspace_fn (the memory plan). */
pe_status pe_dnnl_workspace_bytes(const pe_dnnl_key *key, pe_place place, int n_threads, pe_dnnl_build_fn build,
                                  const void *geom, size_t *bytes);

/* A block of at least `bytes` of place's workspace pool for a kernel's own
 * temporary data (its contents not kept between acquisitions): *data until
 * pe_dnnl_scratch_release(*handle). Counted like the entries' workspaces. */
pe_status pe_dnnl_scratch_acquire(pe_place place, size_t bytes, void **data, void **handle);
void pe_dnnl_scratch_release(void *handle);

/* Frees every entry and workspace block not checked out (tests; memory
 * pressure). */
void pe_dnnl_cache_clear(void);
/* Cached entries and the number of primitives created since start. */
void pe_dnnl_cache_stats(int *n_entries, int64_t *n_created);
/* The workspace pool of a CPU place: its blocks and their bytes (all of
 * them in pe_alloc_get_stats(place)). */
void pe_dnnl_workspace_stats(pe_place place, int *n_blocks, size_t *bytes);

/* "dnnl_unimplemented" etc. */
const char *pe_dnnl_status_str(dnnl_status_t s);

#endif
