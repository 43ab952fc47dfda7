/* executor/feed_fetch.c — feeds in, fetches out (DESIGN.md §4).
 *
 * Dict feeds are split along axis 0 into contiguous pieces, one per place
 * (sizes differ by at most one, the last places take the extra rows);
 * list feeds go to their place as given; a persistable feed is copied to
 * every place. On CPU places a fed var is a view of the caller's rows for
 * the run (below). Fetches are concatenated along axis 0 in place order
 * (persistables once, from place 0), or returned per place.
 *
 * A feed with a LoD (sequences) is split by whole top-level sequences, not
 * rows (Paddle's SplitLoDTensor): place p takes the p-th contiguous share
 * of the sequences (the same sizes rule as rows), with their rows and their
 * LoD rebased to 0, and its batch share (the loss gradient's weight) is its
 * number of sequences. A merged fetch whose pieces carry LoDs of one depth
 * gets their concatenation, each piece's offsets shifted by the rows before
 * it.
 *
 * The checks of a feed against its declaration and of fetch names are
 * shared with the single-place executor (executor/executor.c), so both
 * report a wrong feed with the same words.
 */
#include "executor/pe_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A fed var's view into the caller's tensor: `buf` (external, the
 * executor's reference) is lent to the var for one run. written: some op of
 * the program writes the var (then it is copied, not viewed). */
struct feed_view {
    int place;
    char *name;
    pe_buffer *buf;
    bool written;
};

/* ---- checks (shared with the single-place executor) ---------------------- */

/* The feed names a var of block `block` and has data of its dtype. */
pe_status pe_feed_check_decl(const pe_program *prog, int block, const pe_feed *f, const pe_var **out) {
    const pe_var *v = pe_program_find_var(prog, block, f->name);
    if (!v) return pe_error(PE_ERR_NOT_FOUND, "feed '%s' is not a variable of the program", f->name);
    if (!f->tensor || (!f->tensor->buf && pe_tensor_numel(f->tensor) != 0))
        return pe_error(PE_ERR_INVALID, "feed '%s' has no data", f->name);
    if (f->tensor->dtype != v->dtype)
        return pe_error(PE_ERR_INVALID, "feed '%s' has dtype %s, the program declares %s", f->name,
                        pe_dtype_name(f->tensor->dtype), pe_dtype_name(v->dtype));
    if (f->tensor->lod) {
        char what[300];
        snprintf(what, sizeof what, "feed '%s'", f->name);
        PE_CHECK(pe_tensor_check_lod(f->tensor, what));
    }
    *out = v;
    return PE_OK;
}

/* Checks a (per-place) piece against the declaration (rank and fixed
 * dims); place < 0: the single-place executor (no place in the message). */
pe_status pe_feed_check_piece(const pe_var *v, const char *name, int ndim, const int64_t *dims, int place) {
    bool ok = ndim == v->ndim;
    for (int i = 0; ok && i < v->ndim; i++) ok = v->dims[i] < 0 || v->dims[i] == dims[i];
    if (ok) return PE_OK;
    char a[128], b[128], on[32] = "";
    if (place >= 0) snprintf(on, sizeof on, " on place %d", place);
    return pe_error(PE_ERR_INVALID, "feed '%s'%s has shape %s, the program declares %s (-1 = any)", name, on,
                    pe_dims_str(ndim, dims, a, sizeof a), pe_dims_str(v->ndim, v->dims, b, sizeof b));
}

/* Every fetch names a var of block `block`; `hint` ends the message. */
pe_status pe_fetch_check_names(const pe_program *prog, int block, const char *const *fetch, int n_fetch,
                               const char *hint) {
    for (int i = 0; i < n_fetch; i++)
        if (!pe_program_find_var(prog, block, fetch[i]))
            return pe_error(PE_ERR_NOT_FOUND, "fetch '%s' is not a variable of the program%s", fetch[i], hint);
    return PE_OK;
}

/* *out = the fetched var's value in s; `where` (e.g. " on cpu:1") names the place. */
pe_status pe_fetch_value(const pe_scope *s, const char *name, const char *where, const pe_tensor **out) {
    const pe_tensor *t = pe_scope_find_var(s, name);
    if (!t || (!t->buf && pe_tensor_numel(t) != 0))
        return pe_error(PE_ERR_NOT_FOUND, "fetch '%s' has no value%s after the run (no op computes it and it "
                        "was not fed)", name, where);
    *out = t;
    return PE_OK;
}

/* Part i of n: contiguous pieces in order, sizes differing by at most one,
 * the last rows % n parts taking one row more (3 rows on 2: [0], [1, 2];
 * 5 on 4: 1, 1, 1, 2), as Paddle splits a feed (seed 003). The one rule for
 * the places of a process and for the trainers of a job. */
int64_t pe_batch_shard(int64_t rows, int n, int i, int64_t *first) {
    if (n < 1 || i < 0 || i >= n || rows < 0) {
        if (first) *first = 0;
        return 0;
    }
    int64_t base = rows / n, extra = rows % n, plain = n - extra; /* parts 0..plain-1 take base rows */
    if (first) *first = (int64_t)i * base + (i > plain ? i - plain : 0);
    return base + (i >= plain);
}

/* ---- zero-copy feeds -------------------------------------------------------
 * A fed (non-persistable) var of a CPU place is not copied: for the run it
 * becomes a view of the caller's rows (the caller keeps the tensor alive
 * and unchanged until pe_run returns, as with any argument), and when the
 * run ends the var is emptied, so nothing refers to the caller's memory
 * afterwards (a feed lasts for its run). Fed vars are never in the memory
 * plan's arenas and no op writes a fed var in place; a var some op of the
 * program writes as an output is copied instead, so the caller's data is
 * never written. The view headers are the executor's, reused from run to
 * run: no allocation per step. Saves the per-place copy of the batch (its
 * bytes and its memcpy). */

static struct feed_view *find_view(pe_parallel_executor *pe, int p, const char *name) {
    for (int i = 0; i < pe->n_views; i++)
        if (pe->views[i].place == p && !strcmp(pe->views[i].name, name)) return &pe->views[i];
    if (pe->n_views == pe->cap_views) {
        int cap = pe->cap_views ? 2 * pe->cap_views : 8;
        struct feed_view *nv = realloc(pe->views, sizeof *nv * (size_t)cap);
        if (!nv) return NULL;
        pe->views = nv;
        pe->cap_views = cap;
    }
    struct feed_view *fv = &pe->views[pe->n_views];
    fv->place = p;
    fv->name = strdup(name);
    fv->buf = pe_buffer_wrap(pe->places[p], NULL, 0);
    fv->written = false;
    const pe_block *b = &pe->g->progs[p]->blocks[0];
    for (int i = 0; i < b->n_ops && !fv->written; i++)
        for (int s = 0; s < b->ops[i].n_outputs && !fv->written; s++)
            for (int k = 0; k < b->ops[i].outputs[s].n_args && !fv->written; k++)
                fv->written = !strcmp(b->ops[i].outputs[s].args[k], name);
    if (!fv->name || !fv->buf) {
        free(fv->name);
        pe_buffer_release(fv->buf);
        return NULL;
    }
    pe->n_views++;
    return fv;
}

/* Empties every var that holds a view of the caller's data. */
void pe_pe_release_feed_views(pe_parallel_executor *pe) {
    for (int i = 0; i < pe->n_views; i++) {
        struct feed_view *fv = &pe->views[i];
        if (fv->buf->refcount > 1 && pe->local[fv->place]) {
            pe_tensor *d = pe_scope_find_local_var(pe->local[fv->place], fv->name);
            if (d && d->buf == fv->buf) pe_tensor_clear(d);
        }
        fv->buf->data = NULL;
        fv->buf->bytes = 0;
    }
}

void pe_pe_free_feed_views(pe_parallel_executor *pe) {
    for (int i = 0; i < pe->n_views; i++) {
        free(pe->views[i].name);
        pe_buffer_release(pe->views[i].buf);
    }
    free(pe->views);
    pe->views = NULL;
    pe->n_views = pe->cap_views = 0;
}

/* The LoD of top-level sequences [s0, s1) of src, rebased to 0, into d;
 * *row0 / *rows: the rows they cover. */
static pe_status lod_piece(pe_tensor *d, const pe_tensor *src, int64_t s0, int64_t s1, int64_t *row0,
                           int64_t *rows) {
    const pe_lod *l = src->lod;
    const int64_t *offs[PE_MAX_LOD_LEVELS];
    int64_t n[PE_MAX_LOD_LEVELS];
    int64_t *store[PE_MAX_LOD_LEVELS] = {0};
    pe_status st = PE_OK;
    int64_t a = s0, b = s1;
    for (int k = 0; k < l->n_levels; k++) {
        n[k] = b - a + 1;
        if (!(store[k] = malloc(sizeof(int64_t) * (size_t)n[k]))) {
            st = pe_error(PE_ERR_NOMEM, "out of memory splitting a LoD");
            break;
        }
        for (int64_t i = 0; i < n[k]; i++) store[k][i] = l->offsets[k][a + i] - l->offsets[k][a];
        offs[k] = store[k];
        int64_t na = l->offsets[k][a], nb = l->offsets[k][b];
        a = na, b = nb;
    }
    if (st == PE_OK) {
        *row0 = a;
        *rows = b - a;
        st = pe_tensor_set_lod(d, l->n_levels, offs, n);
    }
    for (int k = 0; k < l->n_levels; k++) free(store[k]);
    return st;
}

/* rows < 0: all of src (a persistable, or a list feed's tensor); seq1 > seq0:
 * src has a LoD and the piece is its top-level sequences [seq0, seq1) (row0
 * and rows are then theirs). */
static pe_status feed_to(pe_parallel_executor *pe, int p, const char *name, const pe_tensor *src, int64_t row0,
                         int64_t rows, bool persistable, int64_t seq0, int64_t seq1) {
    pe_tensor *d = persistable ? pe_scope_var(pe->place_scope[p], name) : pe_scope_var(pe->local[p], name);
    if (!d) return pe_error(PE_ERR_NOMEM, "out of memory feeding '%s'", name);
    if (persistable) return pe_tensor_copy(d, src, pe->places[p]);
    if (src->lod && seq1 > seq0) PE_CHECK(lod_piece(d, src, seq0, seq1, &row0, &rows));
    else if (src->lod && rows < 0) pe_tensor_share_lod(d, src);
    else pe_tensor_clear_lod(d);
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, src->dims, sizeof dims);
    if (rows < 0) row0 = 0, rows = src->ndim ? src->dims[0] : 1;
    if (src->ndim) dims[0] = rows;
    size_t row_bytes = (size_t)pe_dims_prod(src->dims, 1, src->ndim) * pe_dtype_size(src->dtype);
    const char *rows_data = (const char *)pe_tensor_data(src) + (size_t)row0 * row_bytes;
    struct feed_view *fv = NULL;
    if (pe->places[p].kind == PE_PLACE_CPU && src->place.kind == PE_PLACE_CPU && src->buf) {
        if (!(fv = find_view(pe, p, name))) return pe_error(PE_ERR_NOMEM, "out of memory feeding '%s'", name);
        if (fv->written) fv = NULL;
    }
    if (fv) {
        if (d->buf != fv->buf) {
            pe_tensor_clear(d);
            pe_buffer_retain(fv->buf);
            d->buf = fv->buf;
        }
        fv->buf->data = (void *)rows_data;
        fv->buf->bytes = (size_t)rows * row_bytes;
        d->offset = 0;
        d->place = pe->places[p];
        return pe_tensor_set_meta(d, src->dtype, src->ndim, dims);
    }
    if (d->buf && (d->buf->refcount > 1 || d->buf->external)) pe_tensor_clear(d);
    PE_CHECK(pe_tensor_resize(d, src->dtype, src->ndim, dims, pe->places[p]));
    return pe_memcpy_places(pe_tensor_data(d), pe->places[p], rows_data, src->place, (size_t)rows * row_bytes);
}

pe_status pe_pe_feed_dict(pe_parallel_executor *pe, const pe_feed *feed, int n_feed) {
    bool rows_set = false;
    for (int p = 0; p < pe->n; p++) pe->rows[p] = 1;
    for (int i = 0; i < n_feed; i++) {
        const pe_var *v;
        PE_CHECK(pe_feed_check_decl(pe->prog, 0, &feed[i], &v));
        const pe_tensor *t = feed[i].tensor;
        if (v->persistable) {
            for (int p = 0; p < pe->n; p++) PE_CHECK(feed_to(pe, p, feed[i].name, t, 0, -1, true, 0, 0));
            continue;
        }
        if (t->lod) {
            /* whole top-level sequences per place */
            int64_t nseq = t->lod->n_offsets[0] - 1;
            if (nseq < pe->n && pe->n > 1)
                return pe_error(PE_ERR_INVALID,
                                "feed '%s' holds %lld sequences (its LoD's top level), fewer than the %d places: "
                                "a LoD feed is split by whole sequences and each place needs at least one",
                                feed[i].name, (long long)nseq, pe->n);
            for (int p = 0; p < pe->n; p++) {
                int64_t s0, ns = pe_batch_shard(nseq, pe->n, p, &s0);
                if (pe->n == 1) {
                    PE_CHECK(pe_feed_check_piece(v, feed[i].name, t->ndim, t->dims, p));
                    PE_CHECK(feed_to(pe, p, feed[i].name, t, 0, -1, false, 0, 0));
                    if (!rows_set) pe->rows[p] = nseq;
                    continue;
                }
                PE_CHECK(feed_to(pe, p, feed[i].name, t, 0, 0, false, s0, s0 + ns));
                const pe_tensor *d = pe_scope_find_local_var(pe->local[p], feed[i].name);
                PE_CHECK(pe_feed_check_piece(v, feed[i].name, d->ndim, d->dims, p));
                if (!rows_set) pe->rows[p] = ns; /* the batch share of a LoD feed: its sequences */
            }
            rows_set = true;
            continue;
        }
        if (t->ndim < 1)
            return pe_error(PE_ERR_INVALID, "feed '%s' is a scalar and cannot be split along axis 0 across %d places",
                            feed[i].name, pe->n);
        int64_t rows = t->dims[0];
        /* One place takes the whole batch, an empty one included (as the
         * Executor: the mean loss of 0 rows is NaN, the gradients are 0);
         * over several places an empty share is an error. */
        if (rows < pe->n && pe->n > 1) {
            if (pe->places[0].kind == PE_PLACE_CPU)
                return pe_error(PE_ERR_INVALID,
                                "feed '%s' has %lld rows, fewer than the %d places (CPU_NUM=%d): each place needs at "
                                "least one row; feed a larger batch or lower CPU_NUM",
                                feed[i].name, (long long)rows, pe->n, pe->n);
            return pe_error(PE_ERR_INVALID, "feed '%s' has %lld rows, fewer than the %d places: each place needs at least one row",
                            feed[i].name, (long long)rows, pe->n);
        }
        for (int p = 0; p < pe->n; p++) {
            int64_t row0, r = pe_batch_shard(rows, pe->n, p, &row0);
            int64_t dims[PE_MAX_DIMS];
            memcpy(dims, t->dims, sizeof dims);
            dims[0] = r;
            PE_CHECK(pe_feed_check_piece(v, feed[i].name, t->ndim, dims, p));
            PE_CHECK(feed_to(pe, p, feed[i].name, t, row0, r, false, 0, 0));
            if (!rows_set) pe->rows[p] = r;
        }
        rows_set = true;
    }
    return PE_OK;
}

/* List feed: feeds[p] as given on place p. */
pe_status pe_pe_feed_list(pe_parallel_executor *pe, const pe_feed *const *feeds, const int *n_feeds) {
    for (int p = 0; p < pe->n; p++) {
        pe->rows[p] = 1;
        for (int i = 0; i < n_feeds[p]; i++) {
            const pe_feed *f = &feeds[p][i];
            const pe_var *v;
            PE_CHECK(pe_feed_check_decl(pe->prog, 0, f, &v));
            if (!v->persistable) PE_CHECK(pe_feed_check_piece(v, f->name, f->tensor->ndim, f->tensor->dims, p));
            PE_CHECK(feed_to(pe, p, f->name, f->tensor, 0, -1, v->persistable, 0, 0));
            if (i == 0 && f->tensor->ndim > 0) pe->rows[p] = f->tensor->dims[0];
        }
    }
    return PE_OK;
}

/* ---- fetches ----------------------------------------------------------- */

/* o's LoD: the pieces' LoDs concatenated (each level's offsets shifted by
 * the pieces before it), when every piece has one of the same depth; else
 * none. */
static pe_status merge_lods(pe_tensor *o, const pe_tensor *const *t, int n) {
    pe_tensor_clear_lod(o);
    int levels = pe_tensor_lod_levels(t[0]);
    for (int p = 1; p < n; p++)
        if (pe_tensor_lod_levels(t[p]) != levels) levels = 0;
    if (!levels) return PE_OK;
    int64_t *store[PE_MAX_LOD_LEVELS] = {0}, cnt[PE_MAX_LOD_LEVELS];
    const int64_t *offs[PE_MAX_LOD_LEVELS];
    pe_status st = PE_OK;
    for (int k = 0; k < levels && st == PE_OK; k++) {
        int64_t total = 1;
        for (int p = 0; p < n; p++) total += t[p]->lod->n_offsets[k] - 1;
        if (!(store[k] = malloc(sizeof(int64_t) * (size_t)total))) {
            st = pe_error(PE_ERR_NOMEM, "out of memory merging LoDs");
            break;
        }
        int64_t m = 0, base = 0;
        store[k][m++] = 0;
        for (int p = 0; p < n; p++) {
            const int64_t *src = t[p]->lod->offsets[k];
            int64_t c = t[p]->lod->n_offsets[k];
            for (int64_t i = 1; i < c; i++) store[k][m++] = base + src[i];
            base += src[c - 1];
        }
        cnt[k] = m;
        offs[k] = store[k];
    }
    if (st == PE_OK) st = pe_tensor_set_lod(o, levels, offs, cnt);
    for (int k = 0; k < levels; k++) free(store[k]);
    return st;
}

static pe_status fetch_one(pe_parallel_executor *pe, const char *name, bool merged, pe_tensor **out) {
    const pe_var *v = pe_program_find_var(pe->prog, 0, name);
    const pe_tensor *t[PE_MAX_PLACES] = {0};
    char where[40] = " on ";
    for (int p = 0; p < pe->n; p++) {
        pe_pe_place_name(pe, p, where + 4);
        PE_CHECK(pe_fetch_value(pe->local[p], name, where, &t[p]));
    }
    if (!merged) {
        for (int p = 0; p < pe->n; p++) PE_CHECK(pe_tensor_copy(out[p], t[p], pe_place_cpu(0)));
        return PE_OK;
    }
    if (pe->fetch_take && pe->n == 1 && !(v && v->persistable) && t[0]->place.kind == PE_PLACE_CPU && t[0]->buf &&
        __atomic_load_n(&t[0]->buf->refcount, __ATOMIC_ACQUIRE) == 1 && !t[0]->buf->external) {
        /* pe_run_take: out takes the var's buffer, the var keeps none (its op allocates again next run) */
        pe_tensor *var = pe_scope_find_var(pe->local[0], name);
        if (var == t[0]) {
            pe_tensor_share(out[0], var);
            pe_tensor_clear(var);
            return PE_OK;
        }
    }
    if ((v && v->persistable) || pe->n == 1) return pe_tensor_copy(out[0], t[0], pe_place_cpu(0));
    int64_t rows = 0;
    int ndim = t[0]->ndim ? t[0]->ndim : 1;
    for (int p = 0; p < pe->n; p++) {
        bool ok = t[p]->dtype == t[0]->dtype && (t[p]->ndim ? t[p]->ndim : 1) == ndim;
        for (int d = 1; ok && d < t[p]->ndim; d++) ok = t[p]->dims[d] == t[0]->dims[d];
        if (!ok) {
            char a[128], b[128];
            return pe_error(PE_ERR_INVALID, "fetch '%s': cannot concatenate along axis 0: place 0 has %s %s, place %d "
                            "has %s %s (use return_merged=false)", name, pe_dtype_name(t[0]->dtype),
                            pe_dims_str(t[0]->ndim, t[0]->dims, a, sizeof a), p, pe_dtype_name(t[p]->dtype),
                            pe_dims_str(t[p]->ndim, t[p]->dims, b, sizeof b));
        }
        rows += t[p]->ndim ? t[p]->dims[0] : 1;
    }
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, t[0]->dims, sizeof dims);
    dims[0] = rows;
    pe_tensor *o = out[0];
    if (o->buf && o->buf->refcount > 1) pe_tensor_clear(o);
    PE_CHECK(pe_tensor_resize(o, t[0]->dtype, ndim, dims, pe_place_cpu(0)));
    size_t off = 0;
    for (int p = 0; p < pe->n; p++) {
        size_t bytes = pe_tensor_nbytes(t[p]);
        PE_CHECK(pe_memcpy_places((char *)pe_tensor_data(o) + off, pe_place_cpu(0), pe_tensor_data(t[p]), t[p]->place, bytes));
        off += bytes;
    }
    return merge_lods(o, t, pe->n);
}

pe_status pe_pe_fetch(pe_parallel_executor *pe, const char *const *fetch, int n_fetch, bool merged, pe_tensor **out) {
    for (int i = 0; i < n_fetch; i++) PE_CHECK(fetch_one(pe, fetch[i], merged, merged ? &out[i] : &out[i * pe->n]));
    return PE_OK;
}
