/* ops/cpu/dnnl_util.c — one oneDNN CPU engine and a cache of ready-to-run
 * primitives (see dnnl_util.h for the contract).
 *
 * How: entries live on a doubly linked LRU list under one mutex. Lookup is a
 * linear scan comparing (key, place, thread count) of free entries — the
 * list is short (one entry per distinct op shape per place and concurrent
 * user) and the scan is cheap next to any convolution. Entries are per
 * place so that places running the same shapes at the same time never
 * find each other's entry busy and make another at some later step: how
 * many entries a key has is fixed by the first step, the steady state
 * creates none (oneDNN's primitive cache, on by default, gives equal
 * primitives one implementation, so a place's copy costs little). A miss
 * returns a fresh, unlinked entry that the kernel fills (primitive
 * descriptor, primitive, argument bindings); release links it in. Beyond PE_DNNL_CACHE_CAP entries the least recently
 * used free entry is destroyed.
 *
 * Memory: an entry allocates no data buffer. Its scratchpad (oneDNN's user
 * mode: the size is queried from the primitive descriptor and the buffer
 * passed as DNNL_ARG_SCRATCHPAD), its blocked-layout copies of reordered
 * arguments and its small kernel buffer are offsets in one *workspace* of
 * e->ws_bytes, which exists only while the entry is checked out. Under the
 * memory plan it is the op's own slot of the place's arena: the op's
 * pe_workspace_fn asked pe_dnnl_workspace_bytes at plan time (which builds
 * the entry then), the plan placed that many bytes live during the op only,
 * and the kernel passes ctx->workspace to acquire. Otherwise acquire
 * attaches a block of the calling place's workspace pool, release gives it
 * back. The pool holds a few blocks per CPU place, allocated with
 * pe_place_alloc (so they are the place's bytes in pe_alloc_get_stats, under
 * its memory budget) and grown to the largest need seen; a place running its
 * ops one at a time holds one block, the size of its largest primitive's
 * workspace, shared by every conv, pool and batch-norm it runs. Nothing
 * activation-sized is allocated by oneDNN or held per entry.
 *
 * Why this way: building a oneDNN primitive costs 10 µs to milliseconds (JIT
 * code generation), and the kernel contract forbids allocation in the steady
 * state; keeping the primitive and its memory objects per entry gives both.
 * The buffers are only live during a run, so holding them per entry (the
 * sum over every cached primitive, outside PE's counters) would cost far
 * more than one per-place workspace (the max); an entry in use by one thread
 * has its own block, so it shares nothing mutable with another.
 */
#include "ops/cpu/dnnl_util.h"
#include "pe/device.h"
#include "pe/tensor.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl_debug.h>

#define PE_DNNL_CACHE_CAP 512

typedef struct pe_dnnl_binding {
    int arg, dir;
    dnnl_memory_t user;        /* plain layout; data handle = the tensor's data per run */
    dnnl_memory_t inner;       /* the primitive's layout (NULL: same as user); data in the workspace */
    dnnl_primitive_t reorder;  /* user -> inner (inputs) or inner -> user (outputs) */
    size_t inner_off;          /* inner's bytes: this offset in the workspace */
} pe_dnnl_binding;

/* A block of a place's workspace pool (g_mu guards busy and the lists). */
typedef struct ws_block {
    void *p;
    size_t bytes;
    int busy;
    struct ws_block *next;
} ws_block;

struct pe_dnnl_entry {
    pe_dnnl_key key;
    int n_threads;
    int place_id;              /* the CPU place it serves */
    int ready, linked, busy;
    int unsupported;           /* negative entry: oneDNN cannot run this key */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_desc_t hint; /* forward pd of a backward primitive, or NULL */
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    dnnl_memory_t scratch;     /* data: the workspace at scratch_off */
    size_t scratch_off;
    size_t ws_bytes;           /* the workspace this entry needs (64-byte aligned parts) */
    size_t buf_off, buf_bytes; /* pe_dnnl_entry_reserve's part of it */
    ws_block *ws;              /* the pool block attached while checked out, or NULL */
    char *ws_data;             /* the attached workspace (the block's or the caller's planned
                                * bytes); NULL when not checked out or ws_bytes == 0 */
    int n_bind;
    pe_dnnl_binding bind[PE_DNNL_MAX_BIND];
    int n_args;
    dnnl_exec_arg_t args[PE_DNNL_MAX_BIND + 1];
    pe_dnnl_entry *prev, *next;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pe_dnnl_entry *g_head, *g_tail; /* head = most recently used */
static int g_count;
static int64_t g_created;
static ws_block *g_ws[PE_MAX_PLACES]; /* per CPU place id */

static pthread_once_t g_engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static dnnl_status_t g_engine_st;

static void engine_init(void) { g_engine_st = dnnl_engine_create(&g_engine, dnnl_cpu, 0); }

const char *pe_dnnl_status_str(dnnl_status_t s) { return dnnl_status2str(s); }

dnnl_engine_t pe_dnnl_engine(void) {
    pthread_once(&g_engine_once, engine_init);
    if (g_engine_st != dnnl_success) {
        pe_error(PE_ERR_DEVICE, "oneDNN: cannot create the CPU engine (%s)", dnnl_status2str(g_engine_st));
        return NULL;
    }
    return g_engine;
}

void pe_dnnl_key_init(pe_dnnl_key *k, int kind) {
    k->n = 0;
    pe_dnnl_key_add(k, kind);
}

void pe_dnnl_key_add(pe_dnnl_key *k, int64_t v) {
    PE_ASSERT(k->n < PE_DNNL_KEY_MAX);
    k->v[k->n++] = v;
}

static int key_eq(const pe_dnnl_key *a, const pe_dnnl_key *b) {
    return a->n == b->n && memcmp(a->v, b->v, (size_t)a->n * sizeof a->v[0]) == 0;
}

/* ---- list (g_mu held) --------------------------------------------------- */

static void list_unlink(pe_dnnl_entry *e) {
    if (e->prev) e->prev->next = e->next; else g_head = e->next;
    if (e->next) e->next->prev = e->prev; else g_tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_push_front(pe_dnnl_entry *e) {
    e->prev = NULL;
    e->next = g_head;
    if (g_head) g_head->prev = e; else g_tail = e;
    g_head = e;
}

static void entry_destroy(pe_dnnl_entry *e) {
    if (!e) return;
    for (int i = 0; i < e->n_bind; i++) {
        pe_dnnl_binding *b = &e->bind[i];
        if (b->reorder) dnnl_primitive_destroy(b->reorder);
        if (b->inner) dnnl_memory_destroy(b->inner);
        if (b->user) dnnl_memory_destroy(b->user);
    }
    if (e->scratch) dnnl_memory_destroy(e->scratch);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->pd) dnnl_primitive_desc_destroy(e->pd);
    if (e->hint) dnnl_primitive_desc_destroy(e->hint);
    if (e->stream) dnnl_stream_destroy(e->stream);
    free(e);
}

/* ---- checkout ----------------------------------------------------------- */

static pe_status entry_acquire(const pe_dnnl_key *key, int place_id, int n_threads, pe_dnnl_entry **out) {
    *out = NULL;
    pthread_mutex_lock(&g_mu);
    for (pe_dnnl_entry *e = g_head; e; e = e->next) {
        if (e->busy || e->n_threads != n_threads || e->place_id != place_id || !key_eq(&e->key, key)) continue;
        e->busy = 1;
        list_unlink(e);
        list_push_front(e);
        pthread_mutex_unlock(&g_mu);
        *out = e;
        return PE_OK;
    }
    pthread_mutex_unlock(&g_mu);

    dnnl_engine_t eng = pe_dnnl_engine();
    if (!eng) return PE_ERR_DEVICE;
    pe_dnnl_entry *e = calloc(1, sizeof *e);
    if (!e) return pe_error(PE_ERR_NOMEM, "oneDNN cache: out of memory");
    e->key = *key;
    e->n_threads = n_threads;
    e->place_id = place_id;
    e->busy = 1;
    dnnl_status_t s = dnnl_stream_create(&e->stream, eng, dnnl_stream_default_flags);
    if (s != dnnl_success) {
        free(e);
        return pe_error(PE_ERR_DEVICE, "oneDNN: cannot create a stream (%s)", dnnl_status2str(s));
    }
    *out = e;
    return PE_OK;
}

int pe_dnnl_entry_unsupported(const pe_dnnl_entry *e) { return e->unsupported; }

pe_status pe_dnnl_entry_set_unsupported(pe_dnnl_entry *e) {
    e->unsupported = 1;
    e->ready = 1;
    return pe_error(PE_ERR_UNSUPPORTED, "oneDNN has no implementation for this configuration");
}

void pe_dnnl_release(pe_dnnl_entry *e) {
    if (!e) return;
    if (!e->ready) {
        pe_dnnl_discard(e);
        return;
    }
    pe_dnnl_entry *evicted = NULL;
    pthread_mutex_lock(&g_mu);
    if (e->ws) e->ws->busy = 0;
    e->ws = NULL;
    e->ws_data = NULL;
    e->busy = 0;
    if (!e->linked) {
        e->linked = 1;
        list_push_front(e);
        g_count++;
    }
    for (pe_dnnl_entry *v = g_tail; v && g_count > PE_DNNL_CACHE_CAP;) {
        pe_dnnl_entry *prev = v->prev;
        if (!v->busy) {
            list_unlink(v);
            g_count--;
            v->next = evicted; /* reuse the link for the free list */
            evicted = v;
        }
        v = prev;
    }
    pthread_mutex_unlock(&g_mu);
    while (evicted) {
        pe_dnnl_entry *next = evicted->next;
        entry_destroy(evicted);
        evicted = next;
    }
}

void pe_dnnl_discard(pe_dnnl_entry *e) {
    if (!e) return;
    PE_ASSERT(!e->linked && !e->ws);
    entry_destroy(e);
}

void pe_dnnl_cache_clear(void) {
    pe_dnnl_entry *dead = NULL;
    pthread_mutex_lock(&g_mu);
    for (pe_dnnl_entry *v = g_head; v;) {
        pe_dnnl_entry *next = v->next;
        if (!v->busy) {
            list_unlink(v);
            g_count--;
            v->next = dead;
            dead = v;
        }
        v = next;
    }
    ws_block *free_blocks[PE_MAX_PLACES] = {0};
    for (int id = 0; id < PE_MAX_PLACES; id++) {
        for (ws_block **pb = &g_ws[id]; *pb;) {
            ws_block *b = *pb;
            if (b->busy) {
                pb = &b->next;
                continue;
            }
            *pb = b->next;
            b->next = free_blocks[id];
            free_blocks[id] = b;
        }
    }
    pthread_mutex_unlock(&g_mu);
    while (dead) {
        pe_dnnl_entry *next = dead->next;
        entry_destroy(dead);
        dead = next;
    }
    for (int id = 0; id < PE_MAX_PLACES; id++)
        while (free_blocks[id]) {
            ws_block *next = free_blocks[id]->next;
            pe_place_free(pe_place_cpu(id), free_blocks[id]->p, free_blocks[id]->bytes);
            free(free_blocks[id]);
            free_blocks[id] = next;
        }
}

void pe_dnnl_workspace_stats(pe_place place, int *n_blocks, size_t *bytes) {
    int n = 0;
    size_t total = 0;
    pthread_mutex_lock(&g_mu);
    if (place.kind == PE_PLACE_CPU && place.id >= 0 && place.id < PE_MAX_PLACES)
        for (const ws_block *b = g_ws[place.id]; b; b = b->next) {
            n++;
            total += b->bytes;
        }
    pthread_mutex_unlock(&g_mu);
    if (n_blocks) *n_blocks = n;
    if (bytes) *bytes = total;
}

/* ---- the workspace pool ------------------------------------------------- */

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* A part of `bytes` of e's workspace: its offset. */
static size_t ws_reserve(pe_dnnl_entry *e, size_t bytes) {
    size_t off = e->ws_bytes;
    e->ws_bytes += round64(bytes);
    return off;
}

/* A free block of place's pool of at least `need` bytes, marked busy: the
 * smallest that fits, else the largest free one grown, else a new one.
 * Growing happens in the first steps only: in the steady state each block
 * has reached the largest need of the ops that use it. */
static pe_status ws_take(pe_place place, size_t need, ws_block **out) {
    ws_block *fit = NULL, *largest = NULL;
    pthread_mutex_lock(&g_mu);
    for (ws_block *b = g_ws[place.id]; b; b = b->next) {
        if (b->busy) continue;
        if (b->bytes >= need && (!fit || b->bytes < fit->bytes)) fit = b;
        if (!largest || b->bytes > largest->bytes) largest = b;
    }
    ws_block *b = fit ? fit : largest;
    if (b) b->busy = 1;
    pthread_mutex_unlock(&g_mu);
    bool fresh = false;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b) return pe_error(PE_ERR_NOMEM, "oneDNN workspace: out of memory");
        b->busy = 1;
        fresh = true;
    }
    if (b->bytes < need) {
        pe_place_free(place, b->p, b->bytes);
        b->p = pe_place_alloc(place, need);
        b->bytes = b->p ? need : 0;
    }
    pthread_mutex_lock(&g_mu);
    if (fresh) {
        b->next = g_ws[place.id];
        g_ws[place.id] = b;
    }
    if (!b->p) b->busy = 0;
    pthread_mutex_unlock(&g_mu);
    if (!b->p) {
        char why[512];
        snprintf(why, sizeof why, "%s", pe_last_error());
        return pe_error(PE_ERR_NOMEM, "oneDNN workspace of %zu bytes: %s", need, why);
    }
    *out = b;
    return PE_OK;
}

/* Attaches e's workspace: the caller's planned bytes (ext, ext_bytes: the
 * op's slot in the memory plan's arena) when they hold e->ws_bytes, else a
 * block of place's pool (ws_take). */
static pe_status ws_attach(pe_dnnl_entry *e, pe_place place, void *ext, size_t ext_bytes) {
    if (!e->ws_bytes) return PE_OK;
    if (ext && ext_bytes >= e->ws_bytes) {
        e->ws_data = ext;
        return PE_OK;
    }
    PE_CHECK(ws_take(place, e->ws_bytes, &e->ws));
    e->ws_data = e->ws->p;
    return PE_OK;
}

pe_status pe_dnnl_scratch_acquire(pe_place place, size_t bytes, void **data, void **handle) {
    ws_block *b;
    PE_CHECK(ws_take(place, round64(bytes ? bytes : 1), &b));
    *data = b->p;
    *handle = b;
    return PE_OK;
}

void pe_dnnl_scratch_release(void *handle) {
    if (!handle) return;
    pthread_mutex_lock(&g_mu);
    ((ws_block *)handle)->busy = 0;
    pthread_mutex_unlock(&g_mu);
}

void pe_dnnl_cache_stats(int *n_entries, int64_t *n_created) {
    pthread_mutex_lock(&g_mu);
    if (n_entries) *n_entries = g_count;
    if (n_created) *n_created = g_created;
    pthread_mutex_unlock(&g_mu);
}

/* ---- building ----------------------------------------------------------- */

static pe_status entry_init(pe_dnnl_entry *e, const void *op_desc, const void *fwd_desc, int n_threads) {
    PE_ASSERT(e && !e->pd && !e->hint);
    dnnl_engine_t eng = pe_dnnl_engine();
    if (!eng) return PE_ERR_DEVICE;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_status_t s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (s != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return pe_error(PE_ERR_DEVICE, "oneDNN: cannot create primitive attributes (%s)", dnnl_status2str(s));
    }
    /* oneDNN reads omp_get_max_threads() when it plans the work split. */
    int saved = omp_get_max_threads();
    omp_set_num_threads(n_threads);
    if (fwd_desc) s = dnnl_primitive_desc_create(&e->hint, fwd_desc, NULL, eng, NULL);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&e->pd, op_desc, attr, eng, e->hint);
    dnnl_primitive_attr_destroy(attr);
    if (s == dnnl_success) s = dnnl_primitive_create(&e->prim, e->pd);
    omp_set_num_threads(saved);
    if (s == dnnl_unimplemented) return pe_dnnl_entry_set_unsupported(e);
    if (s != dnnl_success) return pe_error(PE_ERR_DEVICE, "oneDNN: cannot create the primitive (%s)", dnnl_status2str(s));
    __atomic_add_fetch(&g_created, 1, __ATOMIC_RELAXED);

    /* The scratchpad is a part of the workspace: a memory object without
     * data here, pointed at the attached block on every run. */
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd) > 0) {
        s = dnnl_memory_create(&e->scratch, smd, eng, DNNL_MEMORY_NONE);
        if (s != dnnl_success)
            return pe_error(PE_ERR_DEVICE, "oneDNN: cannot describe a scratchpad of %zu bytes (%s)",
                            dnnl_memory_desc_get_size(smd), dnnl_status2str(s));
        e->scratch_off = ws_reserve(e, dnnl_memory_desc_get_size(smd));
        e->args[e->n_args++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    }
    return PE_OK;
}

pe_status pe_dnnl_entry_init(pe_dnnl_entry *e, const void *op_desc, int n_threads) {
    return entry_init(e, op_desc, NULL, n_threads);
}

pe_status pe_dnnl_entry_init_bwd(pe_dnnl_entry *e, const void *op_desc, const void *fwd_desc, int n_threads) {
    return entry_init(e, op_desc, fwd_desc, n_threads);
}

pe_status pe_dnnl_md_plain(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag) {
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(md, nd, d, dnnl_f32, tag);
    if (s != dnnl_success) return pe_error(PE_ERR_DEVICE, "oneDNN: bad memory descriptor (%s)", dnnl_status2str(s));
    return PE_OK;
}

pe_status pe_dnnl_entry_bind(pe_dnnl_entry *e, int arg, const dnnl_memory_desc_t *user_md, int dir) {
    PE_ASSERT(e && e->prim && e->n_bind < PE_DNNL_MAX_BIND);
    dnnl_engine_t eng = pe_dnnl_engine();
    if (!eng) return PE_ERR_DEVICE;
    const dnnl_memory_desc_t *pmd = dnnl_primitive_desc_query_md(e->pd, dnnl_query_exec_arg_md, arg);
    /* The descriptor may be oneDNN's cached one, shared with another place's
     * entry built at the same time: it is read through oneDNN's functions
     * only (oneDNN synchronizes its cache itself; see tests/unit/tsan.supp). */
    if (!pmd || dnnl_memory_desc_get_size(pmd) == 0)
        return pe_error(PE_ERR_INTERNAL, "oneDNN primitive has no argument %d", arg);
    pe_dnnl_binding *b = &e->bind[e->n_bind++];
    b->arg = arg;
    b->dir = dir;
    dnnl_status_t s = dnnl_memory_create(&b->user, user_md, eng, DNNL_MEMORY_NONE);
    if (s == dnnl_success && !dnnl_memory_desc_equal(user_md, pmd)) {
        /* the copy in the primitive's layout: a part of the workspace */
        s = dnnl_memory_create(&b->inner, pmd, eng, DNNL_MEMORY_NONE);
        b->inner_off = ws_reserve(e, dnnl_memory_desc_get_size(pmd));
        dnnl_primitive_desc_t rpd = NULL;
        if (s == dnnl_success)
            s = dir == PE_DNNL_IN ? dnnl_reorder_primitive_desc_create(&rpd, user_md, eng, pmd, eng, NULL)
                                  : dnnl_reorder_primitive_desc_create(&rpd, pmd, eng, user_md, eng, NULL);
        if (s == dnnl_success) s = dnnl_primitive_create(&b->reorder, rpd);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    if (s != dnnl_success)
        return pe_error(PE_ERR_DEVICE, "oneDNN: cannot bind argument %d (%s)", arg, dnnl_status2str(s));
    e->args[e->n_args++] = (dnnl_exec_arg_t){arg, b->inner ? b->inner : b->user};
    e->ready = 1;
    return PE_OK;
}

void pe_dnnl_entry_reserve(pe_dnnl_entry *e, size_t bytes) {
    PE_ASSERT(!e->ws && e->buf_bytes == 0);
    e->buf_off = ws_reserve(e, bytes);
    e->buf_bytes = bytes;
}

void *pe_dnnl_entry_buffer(pe_dnnl_entry *e) {
    PE_ASSERT(e->buf_bytes > 0 && e->ws_data);
    return e->ws_data + e->buf_off;
}

/* ---- running ------------------------------------------------------------ */

static dnnl_status_t run_reorder(pe_dnnl_entry *e, const pe_dnnl_binding *b) {
    dnnl_memory_t from = b->dir == PE_DNNL_IN ? b->user : b->inner;
    dnnl_memory_t to = b->dir == PE_DNNL_IN ? b->inner : b->user;
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(b->reorder, e->stream, 2, a);
}

pe_status pe_dnnl_entry_run(pe_dnnl_entry *e, void *const *handles, int n_threads) {
    PE_ASSERT(e && e->ready && !e->unsupported);
    /* oneDNN here is the OpenMP build: its parallel regions use the calling
     * thread's OpenMP thread count, so the kernel's budget (ctx->num_threads)
     * is set on this thread for the run and restored afterwards. */
    int saved = omp_get_max_threads();
    if (saved != n_threads) omp_set_num_threads(n_threads);
    PE_ASSERT(e->ws_data || !e->ws_bytes);
    char *ws = e->ws_data;
    dnnl_status_t s = dnnl_success;
    for (int i = 0; i < e->n_bind && s == dnnl_success; i++)
        s = dnnl_memory_set_data_handle(e->bind[i].user, handles[i]);
    /* the workspace parts (set every run: the block may differ; oneDNN
     * zero-fills a blocked layout's padding on set) */
    for (int i = 0; i < e->n_bind && s == dnnl_success; i++)
        if (e->bind[i].inner) s = dnnl_memory_set_data_handle(e->bind[i].inner, ws + e->bind[i].inner_off);
    if (s == dnnl_success && e->scratch) s = dnnl_memory_set_data_handle(e->scratch, ws + e->scratch_off);
    for (int i = 0; i < e->n_bind && s == dnnl_success; i++)
        if (e->bind[i].reorder && e->bind[i].dir == PE_DNNL_IN) s = run_reorder(e, &e->bind[i]);
    if (s == dnnl_success) s = dnnl_primitive_execute(e->prim, e->stream, e->n_args, e->args);
    for (int i = 0; i < e->n_bind && s == dnnl_success; i++)
        if (e->bind[i].reorder && e->bind[i].dir == PE_DNNL_OUT) s = run_reorder(e, &e->bind[i]);
    if (s == dnnl_success) s = dnnl_stream_wait(e->stream);
    if (saved != n_threads) omp_set_num_threads(saved);
    if (s != dnnl_success) return pe_error(PE_ERR_DEVICE, "oneDNN: execution failed (%s)", dnnl_status2str(s));
    return PE_OK;
}

/* Checks out key's entry for place, building it on a miss; *out = NULL
 * (nothing checked out) when oneDNN has no implementation for it. */
static pe_status acquire_ready(const pe_dnnl_key *key, pe_place place, int n_threads, pe_dnnl_build_fn build,
                               const void *geom, pe_dnnl_entry **out) {
    pe_dnnl_entry *e = NULL;
    *out = NULL;
    if (place.kind != PE_PLACE_CPU || place.id < 0 || place.id >= PE_MAX_PLACES) {
        char pb[32];
        return pe_error(PE_ERR_INVALID, "oneDNN: %s is not a CPU place", pe_place_str(place, pb, sizeof pb));
    }
    PE_CHECK(entry_acquire(key, place.id, n_threads, &e));
    if (!e->ready) {
        pe_status st = build(e, geom, n_threads);
        if (st != PE_OK && !pe_dnnl_entry_unsupported(e)) {
            pe_dnnl_discard(e);
            return st;
        }
    }
    if (pe_dnnl_entry_unsupported(e)) {
        pe_dnnl_release(e);
        return PE_OK;
    }
    *out = e;
    return PE_OK;
}

pe_status pe_dnnl_workspace_bytes(const pe_dnnl_key *key, pe_place place, int n_threads, pe_dnnl_build_fn build,
                                  const void *geom, size_t *bytes) {
    pe_dnnl_entry *e;
    *bytes = 0;
    PE_CHECK(acquire_ready(key, place, n_threads, build, geom, &e));
    if (e) *bytes = e->ws_bytes;
    pe_dnnl_release(e);
    return PE_OK;
}

pe_status pe_dnnl_acquire_built(const pe_dnnl_key *key, pe_place place, int n_threads, void *ws, size_t ws_bytes,
                                pe_dnnl_build_fn build, const void *geom, pe_dnnl_entry **out) {
    pe_dnnl_entry *e;
    *out = NULL;
    PE_CHECK(acquire_ready(key, place, n_threads, build, geom, &e));
    if (!e) return PE_OK;
    pe_status st = ws_attach(e, place, ws, ws_bytes);
    if (st != PE_OK) {
        pe_dnnl_release(e);
        return st;
    }
    *out = e;
    return PE_OK;
}

pe_status pe_dnnl_run_cached(const pe_dnnl_key *key, pe_place place, int n_threads, void *ws, size_t ws_bytes,
                             pe_dnnl_build_fn build, const void *geom, void *const *handles, bool *fallback) {
    pe_dnnl_entry *e;
    *fallback = false;
    PE_CHECK(pe_dnnl_acquire_built(key, place, n_threads, ws, ws_bytes, build, geom, &e));
    *fallback = e == NULL;
    if (!e) return PE_OK;
    pe_status st = pe_dnnl_entry_run(e, handles, n_threads);
    pe_dnnl_release(e);
    return st;
}
