/* ops/grad_ctx.h — the grad makers' context, as the autodiff pass drives it
 * (internal: passes/backward.c and ops/grad.c; grad makers use ops/grad.h).
 *
 *     static const pe_grad_driver drv = {my_needs, my_out_grad, my_new_contrib};
 *     pe_grad_ctx g = {.p = prog, .cur_idx = -1, .drv = &drv, .user = state};
 *     g.fwd_idx = i;                  // the forward op to differentiate
 *     PE_CHECK(info->grad(&g));       // the op's grad maker (ops/ops.def PE_GRAD)
 *
 * The helpers of ops/grad.h (ops/grad.c) add and wire the backward ops; what
 * only the pass knows — which vars need a gradient, how a var's gradient
 * and each contribution to it are named, which contributions exist so far —
 * they ask the driver. The pass folds contributions with `sum` ops itself.
 */
#ifndef PE_OPS_GRAD_CTX_H
#define PE_OPS_GRAD_CTX_H

#include "ops/grad.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_grad_driver {
    /* True when forward input var needs a gradient. */
    bool (*needs)(const pe_grad_ctx *g, const char *var);
    /* The gradient of forward output var (a float var of block 0): its name
     * in name[n], and *reached = whether any gradient reaches var. When none
     * does, the caller inserts zeros under that name and the driver counts
     * them as var's (single, final) gradient. */
    pe_status (*out_grad)(pe_grad_ctx *g, const char *var, char *name, size_t n, bool *reached);
    /* Names a new gradient contribution to var in name[n]. */
    pe_status (*new_contrib)(pe_grad_ctx *g, const char *var, char *name, size_t n);
} pe_grad_driver;

struct pe_grad_ctx {
    pe_program *p;
    int fwd_idx;                /* index of the forward op in block 0 */
    int cur_idx;                /* index of the current grad op, -1 = none */
    const pe_grad_driver *drv;  /* borrowed */
    void *user;                 /* the driver's state */
};

/* Declares `name` in block 0 like var `like` (dtype, dims), not persistable,
 * stop_gradient; nothing when `name` exists. Errors name the vars. */
pe_status pe_grad_declare_like(pe_grad_ctx *g, const char *name, const char *like);

#ifdef __cplusplus
}
#endif
#endif
