/* ops/grad.h — the contract between the autodiff pass (passes/backward.c)
 * and each op's grad maker (named in ops/ops.def with PE_GRAD(fn), or
 * PE_GRAD_WIRE for the generic one of ops/grad_wire.c). The helpers are
 * implemented in ops/grad.c; the pass drives them through ops/grad_ctx.h.
 *
 * A grad maker appends the backward op(s) of one forward op to the block,
 * wiring them with these helpers, so that naming, gradient accumulation,
 * stop_gradient/no_grad handling and op_role are done in one place:
 *
 *     // mul: Out = X * Y  ->  mul_grad(X, Y, Out@GRAD) -> X@GRAD, Y@GRAD
 *     pe_status pe_grad_mul(pe_grad_ctx *g) {
 *         PE_CHECK(pe_grad_new_op(g, "mul_grad"));        // forward attrs copied
 *         PE_CHECK(pe_grad_fwd_input(g, "X", "X"));
 *         PE_CHECK(pe_grad_fwd_input(g, "Y", "Y"));
 *         PE_CHECK(pe_grad_out_grad(g, "Out", "Out@GRAD"));
 *         PE_CHECK(pe_grad_in_grad(g, "X", "X@GRAD"));
 *         return pe_grad_in_grad(g, "Y", "Y@GRAD");
 *     }
 *
 * pe_grad_in_grad names a fresh contribution var for each forward input
 * that needs a gradient (PE_EMPTY_VAR for those that do not, or omits the
 * slot when none does); the pass sums multiple contributions before the
 * gradient is consumed. pe_grad_out_grad gives the gradient of a forward
 * output, inserting zeros (fill_zeros_like) when no gradient reaches it.
 * Pointers to ops are valid only until the next op is added.
 */
#ifndef PE_OPS_GRAD_H
#define PE_OPS_GRAD_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_grad_ctx pe_grad_ctx;

/* The forward op being differentiated (borrowed; valid until the next add). */
const pe_op *pe_grad_fwd(const pe_grad_ctx *g);
/* Appends a backward op of `type` — it becomes the current op — copying the
 * forward op's attrs and setting op_role = backward. */
pe_status pe_grad_new_op(pe_grad_ctx *g, const char *type);
/* The current op, e.g. to set an extra attr (valid until the next add). */
pe_op *pe_grad_cur_op(pe_grad_ctx *g);
/* current op input slot `gslot` <- the args of forward input slot `fslot`. */
pe_status pe_grad_fwd_input(pe_grad_ctx *g, const char *fslot, const char *gslot);
/* current op input slot `gslot` <- the args of forward output slot `fslot`. */
pe_status pe_grad_fwd_output(pe_grad_ctx *g, const char *fslot, const char *gslot);
/* current op input slot `gslot` <- gradients of forward output slot `fslot`
 * (zeros inserted before the op where no gradient reaches an output). */
pe_status pe_grad_out_grad(pe_grad_ctx *g, const char *fslot, const char *gslot);
/* current op output slot `gslot` <- new gradient contributions for the args
 * of forward input slot `fslot` (PE_EMPTY_VAR for args that need none; the
 * slot is omitted when no arg needs one). */
pe_status pe_grad_in_grad(pe_grad_ctx *g, const char *fslot, const char *gslot);
/* True when arg k of forward input slot `fslot` needs a gradient. */
bool pe_grad_needs(const pe_grad_ctx *g, const char *fslot, int k);

#ifdef __cplusplus
}
#endif
#endif
