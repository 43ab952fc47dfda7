/* executor/memory_plan/arena.h — the memory plan applied to a ParallelExecutor's
 * local scopes (internal; see executor/memory_plan/plan.h for the plan itself).
 *
 *     pe_mem_arenas *ma;
 *     pe_mem_arenas_new(graph, places, reuse, inplace, &ma);   // memory_optimize / enable_inplace
 *     // each run, after the feeds are in the local scopes:
 *     pe_mem_arenas_protect(ma, name);            // every feed and fetch name of the run
 *     pe_mem_arenas_prepare(ma, local_scopes);
 *     ... run the graph: planned temporaries are views into one arena per place, and
 *         each op with a workspace gets its slot (pe_mem_arenas_plan's ws[i],
 *         pe_mem_arenas_workspace) as ctx->workspace ...
 *     pe_mem_arenas_release(ma);   // with pe_drop_local_exe_scopes
 *     pe_mem_arenas_free(ma);
 *
 * A plan is made from the feed shapes of the run (static shape inference)
 * and cached per feed-shape signature, so a new batch size re-plans once
 * and an old one finds its plan again. Every name ever fed or fetched is
 * protected from then on (never placed in the arena); a name that was
 * placed before re-plans. Views are pe_buffer_wrap()s of arena bytes, one
 * per var with refcount 1, so pe_tensor_resize keeps them (no allocation in
 * the steady state) and a tensor that outgrows its slot gets its own buffer
 * instead of writing past it.
 */
#ifndef PE_EXECUTOR_MEMORY_PLAN_ARENA_H
#define PE_EXECUTOR_MEMORY_PLAN_ARENA_H

#include "executor/memory_plan/plan.h"
#include "pe/scope.h"

typedef struct pe_mem_arenas pe_mem_arenas;

/* g and places (g->n_places of them) are borrowed and must outlive the
 * result; kernel_threads: each kernel's OpenMP threads (the ops'
 * workspaces are sized for it). *out owned by the caller (pe_mem_arenas_free). */
pe_status pe_mem_arenas_new(const pe_ssa_graph *g, const pe_place *places, bool reuse, bool inplace,
                            int kernel_threads, pe_mem_arenas **out);
void pe_mem_arenas_free(pe_mem_arenas *a); /* accepts NULL; the views' scopes must be gone or released first */
/* A fed or fetched name (copied): never placed in an arena from now on;
 * when a cached plan had placed it, the next prepare re-plans. */
pe_status pe_mem_arenas_protect(pe_mem_arenas *a, const char *name);
/* Before a run: local[p] holds place p's fed vars. Plans (or finds the
 * cached plan) for the feed shapes and points the planned vars of local[p]
 * into place p's arena. */
pe_status pe_mem_arenas_prepare(pe_mem_arenas *a, pe_scope *const *local);
/* Frees the arenas and forgets the views (their scopes are being dropped);
 * cached plans stay. Accepts NULL. */
void pe_mem_arenas_release(pe_mem_arenas *a);
/* After a successful prepare: where the plan put op handle h's workspace
 * (place p's arena), the bytes in *bytes; NULL when h has none. The
 * executor hands it to the kernel as ctx->workspace. */
void *pe_mem_arenas_workspace(const pe_mem_arenas *a, int p, const pe_mp_ws_plan *w, size_t *bytes);
/* Bytes of the arenas currently allocated (all places). */
size_t pe_mem_arenas_bytes(const pe_mem_arenas *a);
/* The plan of the last prepare, or NULL. Borrowed. */
const pe_mem_plan *pe_mem_arenas_plan(const pe_mem_arenas *a);
/* Plans made so far (cache misses), for tests. */
int pe_mem_arenas_n_plans(const pe_mem_arenas *a);

#endif
