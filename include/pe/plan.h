/* pe/plan.h — the static memory plan of a program, as a report (`pe plan`).
 *
 *     pe_pe_options o;
 *     pe_pe_options_default(&o);
 *     o.build_strategy.enable_inplace = o.build_strategy.memory_optimize = true;
 *     pe_plan_opts po = {.n_places = 2, .loss_name = "loss", .bs = &o.build_strategy,
 *                        .meta = feed_shapes, .user = &batch};
 *     pe_plan *plan;
 *     if (pe_plan_new(prog, &po, &plan) != PE_OK) ...  // message names the op, var and place
 *     for (int p = 0; p < pe_plan_n_places(plan); p++) {
 *         const pe_plan_place *pp = pe_plan_place_at(plan, p);
 *         printf("%lld -> %lld bytes\n", (long long)pp->no_reuse_bytes, (long long)pp->arena_bytes);
 *     }
 *     pe_plan_free(plan);
 *
 * Builds the graph the ParallelExecutor would run (the build passes of
 * pe/build.h over n CPU places), infers every temporary's shape from the
 * shapes `meta` gives the feeds and persistables, and plans each place's
 * arena as the executor does: bs->memory_optimize reuses the bytes of dead
 * temporaries, bs->enable_inplace lets an op write its output over an input
 * it reads last. A temporary is a non-persistable var some op writes before
 * any op reads it. The arena also holds the workspaces of the ops whose
 * kernels need scratch (sized for these shapes and the executor's threads
 * per place; their oneDNN primitives are built to know it).
 */
#ifndef PE_PLAN_H
#define PE_PLAN_H

#include "pe/program.h"
#include "pe/strategy.h"
#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* Sets meta's dtype and dims (pe_tensor_set_meta) for var `name` of place
 * `place` that the program reads before any op writes it (a feed) or that is
 * persistable; decl is its declaration in block 0, or NULL. */
typedef pe_status (*pe_plan_meta_fn)(void *user, int place, const char *name, const pe_var *decl, pe_tensor *meta);

typedef struct pe_plan_opts {
    int n_places;                  /* CPU places (>= 1) */
    const char *loss_name;         /* may be NULL; borrowed */
    const pe_build_strategy *bs;   /* the passes' switches, memory_optimize and enable_inplace; NULL = all off */
    const char *const *protect;    /* vars the passes keep and the plan never places (fetches); borrowed */
    int n_protect;
    const char *const *exclude;    /* further vars the plan never places; borrowed */
    int n_exclude;
    pe_plan_meta_fn meta;          /* required */
    void *user;                    /* passed to meta */
} pe_plan_opts;

typedef struct pe_plan_var {
    const char *name;              /* borrowed from the plan */
    int64_t offset;                /* in the place's arena */
    int64_t bytes;                 /* aligned size */
    bool inplaced;                 /* written over the bytes of an input it reads last */
} pe_plan_var;

/* The scratch of one op's kernel (oneDNN's scratchpad and blocked-layout
 * copies of a conv2d, pool2d, batch_norm or their gradients), live while
 * that op runs. */
typedef struct pe_plan_workspace {
    int op_index;                  /* the op in the place's program (block 0) */
    const char *op_type;           /* borrowed from the plan */
    int64_t offset;                /* in the place's arena */
    int64_t bytes;                 /* aligned size */
} pe_plan_workspace;
typedef struct pe_plan_place {
    int64_t no_reuse_bytes;        /* every temporary its own allocation (no plan; the workspaces
                                    * then come from the kernels' per-place pool, not counted here) */
    int64_t arena_bytes;           /* the arena with the plan: temporaries and workspaces */
    int n_inplace;                 /* temporaries written in place of an input */
    int n_shared;                  /* other temporaries and workspaces placed over dead bytes */
    int n_vars;
    const pe_plan_var *vars;       /* borrowed from the plan */
    int n_workspaces;
    const pe_plan_workspace *workspaces; /* borrowed from the plan */
} pe_plan_place;

typedef struct pe_plan pe_plan;

/* prog and o are borrowed for the call. *out owned by the caller (pe_plan_free). */
pe_status pe_plan_new(const pe_program *prog, const pe_plan_opts *o, pe_plan **out);
void pe_plan_free(pe_plan *plan); /* accepts NULL */
int pe_plan_n_places(const pe_plan *plan);
const pe_plan_place *pe_plan_place_at(const pe_plan *plan, int place); /* borrowed; NULL out of range */

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
