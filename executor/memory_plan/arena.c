/* executor/memory_plan/arena.c — applies the static memory plan to the local
 * scopes of a ParallelExecutor: one arena per place, planned temporaries as
 * views into it, plans cached per feed-shape signature.
 *
 * How: before each run (after the feeds are in place) the signature — the
 * dtype, dims and LoD of every var each place reads before writing — is looked
 * up among the cached plans (at most PE_MEM_PLAN_CACHE, least recently used
 * evicted); a miss runs the planner (executor/memory_plan/plan.c) with shapes read
 * from the scopes. Switching plans detaches the views of vars that are no
 * longer planned (copying their bytes out, so a var that is now fed keeps
 * its fed value), grows an arena that is too small, and points every
 * planned var at its offset: pe_buffer_wrap of the arena bytes, one wrapper
 * per var, refcount 1, which pe_tensor_resize keeps when the size fits —
 * so kernels write into the arena and the steady state allocates nothing.
 * Runs with the same signature cost one lookup per fed var.
 *
 * Why: the plan depends on the batch (feed shapes), which is only known at
 * the first run, and a training loop alternating batch sizes (the last
 * partial batch) must not re-plan every time.
 */
#include "executor/memory_plan/arena.h"
#include "graph/strmap.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PE_MEM_PLAN_CACHE 8
#define SIG_WIDTH (3 + PE_MAX_DIMS) /* dtype, ndim, dims, LoD hash (0: none) */
#define OOM() pe_error(PE_ERR_NOMEM, "memory plan: out of memory")

typedef struct {
    int64_t *sig;
    pe_mem_plan *plan;
    uint64_t id, last_used;
} cache_entry;

typedef struct {
    const char *name;   /* borrowed from the graph */
    pe_tensor *t;       /* in the local scope (valid while views_valid) */
    pe_buffer *wrap;    /* the view we installed (owned by t while t holds it) */
} view;

struct pe_mem_arenas {
    const pe_ssa_graph *g;
    pe_mp_graph *mg;
    int n;
    const pe_place *places;
    bool reuse, inplace;
    int kernel_threads;
    /* protected names (owned copies) */
    char **prot;
    int n_prot, cap_prot;
    pe_strmap prot_map;
    bool stale;         /* a protected name was a planned temporary: re-plan */
    cache_entry cache[PE_MEM_PLAN_CACHE];
    int n_cache;
    uint64_t tick, next_id;
    int n_plans;
    int sig_len;
    int64_t *sig;       /* scratch: the current run's signature */
    pe_buffer *arena[PE_MAX_PLACES];
    /* installed views */
    bool views_valid;
    uint64_t applied_id;
    const pe_mem_plan *applied;
    view *views[PE_MAX_PLACES];
    int n_views[PE_MAX_PLACES];
};

pe_status pe_mem_arenas_new(const pe_ssa_graph *g, const pe_place *places, bool reuse, bool inplace,
                            int kernel_threads, pe_mem_arenas **out) {
    *out = NULL;
    if (g->n_places > PE_MAX_PLACES)
        return pe_error(PE_ERR_INVALID, "memory plan: %d places (at most %d)", g->n_places, PE_MAX_PLACES);
    pe_mem_arenas *a = calloc(1, sizeof *a);
    if (!a) return OOM();
    a->g = g;
    a->n = g->n_places;
    a->places = places;
    a->reuse = reuse;
    a->inplace = inplace;
    a->kernel_threads = kernel_threads;
    a->next_id = 1;
    pe_status st = pe_mp_graph_new(g, &a->mg);
    if (st != PE_OK) {
        free(a);
        return st;
    }
    for (int p = 0; p < a->n; p++) a->sig_len += pe_mp_graph_n_inputs(a->mg, p) * SIG_WIDTH;
    a->sig = calloc((size_t)(a->sig_len ? a->sig_len : 1), sizeof *a->sig);
    if (!a->sig) {
        pe_mem_arenas_free(a);
        return OOM();
    }
    *out = a;
    return PE_OK;
}

static void drop_cache(pe_mem_arenas *a) {
    for (int i = 0; i < a->n_cache; i++) {
        free(a->cache[i].sig);
        pe_mem_plan_free(a->cache[i].plan);
    }
    a->n_cache = 0;
    a->applied = NULL; /* the installed views stay recorded in a->views */
}

void pe_mem_arenas_release(pe_mem_arenas *a) {
    if (!a) return;
    for (int p = 0; p < a->n; p++) {
        free(a->views[p]);
        a->views[p] = NULL;
        a->n_views[p] = 0;
        pe_buffer_release(a->arena[p]);
        a->arena[p] = NULL;
    }
    a->views_valid = false;
    a->applied_id = 0;
}

void pe_mem_arenas_free(pe_mem_arenas *a) {
    if (!a) return;
    pe_mem_arenas_release(a);
    drop_cache(a);
    for (int i = 0; i < a->n_prot; i++) free(a->prot[i]);
    free(a->prot);
    pe_strmap_free(&a->prot_map);
    free(a->sig);
    pe_mp_graph_free(a->mg);
    free(a);
}

const pe_mem_plan *pe_mem_arenas_plan(const pe_mem_arenas *a) { return a ? a->applied : NULL; }
int pe_mem_arenas_n_plans(const pe_mem_arenas *a) { return a ? a->n_plans : 0; }

pe_status pe_mem_arenas_protect(pe_mem_arenas *a, const char *name) {
    if (pe_strmap_get(&a->prot_map, name) >= 0) return PE_OK;
    if (a->n_prot == a->cap_prot) {
        int cap = a->cap_prot ? a->cap_prot * 2 : 16;
        char **np = realloc(a->prot, sizeof *np * (size_t)cap);
        if (!np) return OOM();
        a->prot = np;
        a->cap_prot = cap;
    }
    char *copy = strdup(name);
    if (!copy) return OOM();
    a->prot[a->n_prot] = copy;
    if (pe_strmap_put(&a->prot_map, copy, a->n_prot) != 0) {
        free(copy);
        return OOM();
    }
    a->n_prot++;
    for (int p = 0; p < a->n && !a->stale; p++) a->stale = pe_mp_graph_is_temp(a->mg, p, name);
    return PE_OK;
}

static void make_signature(pe_mem_arenas *a, pe_scope *const *local) {
    int64_t *s = a->sig;
    for (int p = 0; p < a->n; p++)
        for (int i = 0; i < pe_mp_graph_n_inputs(a->mg, p); i++, s += SIG_WIDTH) {
            const pe_tensor *t = pe_scope_find_var(local[p], pe_mp_graph_input(a->mg, p, i));
            memset(s, 0, sizeof *s * SIG_WIDTH);
            if (!t || !t->buf) {
                s[1] = -1;
                continue;
            }
            s[0] = t->dtype;
            s[1] = t->ndim;
            for (int d = 0; d < t->ndim; d++) s[2 + d] = t->dims[d];
            s[2 + PE_MAX_DIMS] = pe_tensor_lod_hash(t);
        }
}

typedef struct {
    pe_mem_arenas *a;
    pe_scope *const *local;
} meta_user;

/* Shapes of the vars a place reads before writing: what the scopes hold
 * (feeds, parameters), else the declaration when it has no -1. */
static pe_status scope_meta(void *user, int p, const char *name, const pe_var *decl, pe_tensor *meta) {
    meta_user *u = user;
    const pe_tensor *t = pe_scope_find_var(u->local[p], name);
    if (t && t->buf) {
        pe_tensor_share_lod(meta, t); /* rows of sequence ops' outputs come from it */
        return pe_tensor_set_meta(meta, t->dtype, t->ndim, t->dims);
    }
    bool known = decl != NULL;
    for (int d = 0; known && d < decl->ndim; d++) known = decl->dims[d] >= 0;
    char pb[32];
    if (!known)
        return pe_error(PE_ERR_NOT_FOUND,
                        "memory plan: var '%s' on %s is read before any op writes it, but it has no value: feed it "
                        "(or initialize it with the startup program)",
                        name, pe_place_str(u->a->places[p], pb, sizeof pb));
    return pe_tensor_set_meta(meta, decl->dtype, decl->ndim, decl->dims);
}

static cache_entry *find_plan(pe_mem_arenas *a) {
    for (int i = 0; i < a->n_cache; i++)
        if (!memcmp(a->cache[i].sig, a->sig, sizeof *a->sig * (size_t)a->sig_len)) return &a->cache[i];
    return NULL;
}

static pe_status new_plan(pe_mem_arenas *a, pe_scope *const *local, cache_entry **out) {
    meta_user u = {a, local};
    pe_mem_plan *plan;
    PE_CHECK(pe_mp_plan_build(a->mg, a->places, scope_meta, &u, (const char *const *)a->prot, a->n_prot, a->reuse,
                              a->inplace, a->kernel_threads, &plan));
    int64_t *sig = malloc(sizeof *sig * (size_t)(a->sig_len ? a->sig_len : 1));
    if (!sig) {
        pe_mem_plan_free(plan);
        return OOM();
    }
    memcpy(sig, a->sig, sizeof *sig * (size_t)a->sig_len);
    int slot = a->n_cache;
    if (slot == PE_MEM_PLAN_CACHE) { /* evict the least recently used one that is not installed */
        slot = -1;
        for (int i = 0; i < a->n_cache; i++)
            if (a->cache[i].id != a->applied_id && (slot < 0 || a->cache[i].last_used < a->cache[slot].last_used))
                slot = i;
        free(a->cache[slot].sig);
        pe_mem_plan_free(a->cache[slot].plan);
    } else {
        a->n_cache++;
    }
    a->cache[slot] = (cache_entry){sig, plan, a->next_id++, 0};
    a->n_plans++;
    char buf[64];
    for (int p = 0; p < plan->n_places; p++)
        pe_log(PE_LOG_DEBUG,
               "memory plan for %s: %d temporaries and %d op workspaces, %lld bytes without reuse, %lld with (%d in "
               "place)",
               pe_place_str(a->places[p], buf, sizeof buf), plan->place[p].n_vars, plan->place[p].n_ws,
               (long long)plan->place[p].stats.no_reuse_bytes, (long long)plan->place[p].stats.arena_bytes,
               plan->place[p].stats.n_inplace);
    *out = &a->cache[slot];
    return PE_OK;
}

/* A view that is no longer planned becomes a var with its own bytes,
 * keeping its contents (it may hold a feed written before this run). */
static pe_status detach(view *v) {
    pe_tensor *t = v->t;
    if (t->buf != v->wrap) return PE_OK; /* it already left the arena */
    size_t bytes = pe_tensor_nbytes(t);
    pe_buffer *own = pe_buffer_new(t->place, bytes);
    if (!own) return pe_error_wrap(PE_ERR_NOMEM, "memory plan: detaching '%s' from the arena", v->name);
    if (bytes <= v->wrap->bytes) {
        pe_status st = pe_memcpy_places(own->data, t->place, v->wrap->data, t->place, bytes);
        if (st != PE_OK) {
            pe_buffer_release(own);
            return pe_error_wrap(st, "memory plan: detaching '%s' from the arena", v->name);
        }
    }
    pe_buffer_release(t->buf);
    t->buf = own;
    t->offset = 0;
    return PE_OK;
}

static bool in_buffer(const pe_buffer *arena, const void *p) {
    return arena && (const char *)p >= (const char *)arena->data &&
           (const char *)p < (const char *)arena->data + arena->bytes;
}

/* After a failed install: no local tensor may keep a view into an arena
 * that is about to go; the planned ones lose their (temporary) bytes. */
static void scrub(pe_scope *local, const view *v, int n, const pe_buffer *a0, const pe_buffer *a1) {
    for (int k = 0; k < n; k++) {
        pe_tensor *t = pe_scope_find_local_var(local, v[k].name);
        if (t && t->buf && t->buf->external && (in_buffer(a0, t->buf->data) || in_buffer(a1, t->buf->data)))
            pe_tensor_clear(t);
    }
}

static pe_status install(pe_mem_arenas *a, pe_scope *const *local, const cache_entry *e) {
    const pe_mem_plan *plan = e->plan;
    /* 1. old views that the new plan does not place keep their bytes */
    if (a->views_valid) {
        for (int p = 0; p < a->n; p++) {
            pe_strmap keep = {0};
            const pe_mp_place_plan *pp = &plan->place[p];
            for (int i = 0; i < pp->n_vars; i++)
                if (pe_strmap_put(&keep, pp->vars[i].name, i) != 0) {
                    pe_strmap_free(&keep);
                    return OOM();
                }
            pe_status st = PE_OK;
            for (int k = 0; k < a->n_views[p] && st == PE_OK; k++)
                if (pe_strmap_get(&keep, a->views[p][k].name) < 0) st = detach(&a->views[p][k]);
            pe_strmap_free(&keep);
            PE_CHECK(st);
        }
    }
    pe_buffer *old[PE_MAX_PLACES] = {0};
    view *nv[PE_MAX_PLACES] = {0};
    int nn[PE_MAX_PLACES] = {0};
    pe_status st = PE_OK;
    for (int p = 0; p < a->n && st == PE_OK; p++) {
        const pe_mp_place_plan *pp = &plan->place[p];
        /* 2. an arena large enough (the old one lives until every view
         *    into it is re-pointed) */
        size_t need = (size_t)pp->stats.arena_bytes;
        if (need && (!a->arena[p] || a->arena[p]->bytes < need)) {
            pe_buffer *nb = pe_buffer_new(a->places[p], need);
            if (!nb) {
                st = pe_error_wrap(PE_ERR_NOMEM, "memory plan: arena of %zu bytes", need);
                break;
            }
            old[p] = a->arena[p];
            a->arena[p] = nb;
        }
        if (!(nv[p] = malloc(sizeof *nv[p] * (size_t)(pp->n_vars ? pp->n_vars : 1)))) {
            st = OOM();
            break;
        }
        /* 3. every planned var points at its offset */
        for (int i = 0; i < pp->n_vars; i++) {
            const pe_mp_var_plan *vp = &pp->vars[i];
            pe_tensor *t = pe_scope_find_local_var(local[p], vp->name);
            if (!t) t = pe_scope_var(local[p], vp->name);
            /* a var someone else laid out (its own buffer shared with another
             * var, e.g. a gradient bucket) keeps it; its slot stays unused */
            if (t && t->buf && !t->buf->external && __atomic_load_n(&t->buf->refcount, __ATOMIC_ACQUIRE) > 1)
                continue;
            pe_buffer *w = t ? pe_buffer_wrap(a->places[p], (char *)a->arena[p]->data + vp->offset, (size_t)vp->bytes)
                             : NULL;
            if (!w) {
                st = OOM();
                break;
            }
            pe_buffer_release(t->buf);
            t->buf = w;
            t->offset = 0;
            t->place = a->places[p];
            nv[p][nn[p]++] = (view){vp->name, t, w};
        }
    }
    for (int p = 0; p < a->n; p++) {
        if (st != PE_OK) {
            if (a->views_valid) scrub(local[p], a->views[p], a->n_views[p], old[p], a->arena[p]);
            scrub(local[p], nv[p], nn[p], old[p], a->arena[p]);
            free(nv[p]);
            nv[p] = NULL;
            nn[p] = 0;
        }
        free(a->views[p]);
        a->views[p] = nv[p];
        a->n_views[p] = nn[p];
        pe_buffer_release(old[p]);
    }
    a->views_valid = st == PE_OK;
    a->applied = st == PE_OK ? plan : NULL;
    a->applied_id = st == PE_OK ? e->id : 0;
    return st;
}

pe_status pe_mem_arenas_prepare(pe_mem_arenas *a, pe_scope *const *local) {
    if (a->stale) drop_cache(a); /* a newly protected name was placed by the cached plans */
    a->stale = false;
    make_signature(a, local);
    cache_entry *e = find_plan(a);
    if (!e) PE_CHECK(new_plan(a, local, &e));
    e->last_used = ++a->tick;
    if (a->views_valid && a->applied_id == e->id) return PE_OK;
    return install(a, local, e);
}

void *pe_mem_arenas_workspace(const pe_mem_arenas *a, int p, const pe_mp_ws_plan *w, size_t *bytes) {
    *bytes = 0;
    if (!a->views_valid || !a->arena[p] || w->offset + w->bytes > (int64_t)a->arena[p]->bytes) return NULL;
    *bytes = (size_t)w->bytes;
    return (char *)a->arena[p]->data + w->offset;
}

size_t pe_mem_arenas_bytes(const pe_mem_arenas *a) {
    size_t total = 0;
    for (int p = 0; a && p < a->n; p++)
        if (a->arena[p]) total += a->arena[p]->bytes;
    return total;
}
