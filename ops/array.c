/* ops/array.c — shape inference of tile, expand_v2, cumsum, assign, shape and
 * increment (and the grads of tile / expand_v2), and the grad makers of
 * cumsum and assign. Kernels: ops/cpu/array.c.
 *
 * Paddle 2.x's semantics: tile repeats X repeat_times[i] times along dim i;
 * expand_v2 broadcasts X's size-1 dims to attr shape (-1 keeps X's dim);
 * both add leading dims as needed, and their gradients sum Out@GRAD back
 * onto X (tile_grad / expand_v2_grad read X for its dims only). cumsum's
 * gradient is Paddle's CumsumGradMaker: a cumsum of Out@GRAD in the other
 * direction (with flatten reshaped back to X's dims); assign's
 * is an assign of Out@GRAD. shape (any dtype) gives Input's dims as int32;
 * increment adds step to a one-element X (the fluid loop counter, in place).
 * The optional tensor inputs (RepeatTimes, Shape, expand_shapes_tensor) are
 * not declared: the attrs carry the values.
 */
#include "ops/array.h"
#include "ops/grad.h"
#include "ops/grad_ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pe_status pe_tile_plan_make(const pe_op_ctx *ctx, const pe_tensor *x, pe_tile_plan *tp) {
    const bool tile = ctx->info->id == PE_OP_tile || ctx->info->id == PE_OP_tile_grad;
    const char *attr = tile ? "repeat_times" : "shape";
    int m = 0;
    const int64_t *v = pe_ctx_ints(ctx, attr, &m);
    const int n = tile && m < x->ndim ? x->ndim : m;
    char xs[160];
    pe_dims_str(x->ndim, x->dims, xs, sizeof xs);
    if (n > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "attr %s has %d entries; at most %d allowed", attr, m, PE_MAX_DIMS);
    if (!tile && m < x->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr shape has %d entries, fewer than the rank of X '%s' %s",
                            m, pe_ctx_in_name(ctx, "X", 0), xs);
    tp->n = n;
    for (int i = 0; i < n; i++) {
        const int xi = i - (n - x->ndim), vi = i - (n - m);
        const int64_t xd = xi >= 0 ? x->dims[xi] : 1, s = vi >= 0 ? v[vi] : 1;
        tp->xd[i] = xd;
        if (tile ? s < 1 : (s < -1 || (s == -1 && xi < 0) || (s != -1 && xd != 1 && s != xd)))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "attr %s[%d] = %lld does not fit X '%s' %s (%s)", attr, vi,
                                (long long)s, pe_ctx_in_name(ctx, "X", 0), xs,
                                tile ? "repeats must be positive"
                                     : "expected X's dim, -1 for it, or any size where X's dim is 1");
        tp->od[i] = tile ? xd * s : s == -1 ? xd : s;
    }
    return PE_OK;
}

/* X [..] -> Out [od...] (tile, expand_v2) */
pe_status pe_infer_tile(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    pe_tile_plan tp;
    PE_CHECK(pe_tile_plan_make(ctx, x, &tp));
    return pe_infer_set_out(ctx, "Out", x->dtype, tp.n, tp.od);
}

static pe_status need_float(pe_op_ctx *ctx, const char *slot, const pe_tensor *t) {
    if (pe_dtype_is_float(t->dtype)) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has dtype %s (expected float32 or float64)", slot,
                        pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype));
}

/* X [..], Out@GRAD [od...] -> X@GRAD [X] (tile_grad, expand_v2_grad) */
pe_status pe_infer_tile_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(need_float(ctx, "X", x));
    pe_tile_plan tp;
    PE_CHECK(pe_tile_plan_make(ctx, x, &tp));
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, tp.n, tp.od));
    return pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims);
}

/* X [..] -> Out [..] (flatten: [numel]); float32, float64, int32, int64 */
pe_status pe_infer_cumsum(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (!pe_dtype_is_num(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected float32, float64, int32 or int64)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    if (pe_ctx_bool(ctx, "flatten")) {
        const int64_t n = pe_tensor_numel(x);
        return pe_infer_set_out(ctx, "Out", x->dtype, 1, &n);
    }
    const int64_t axis = pe_ctx_int(ctx, "axis");
    if (axis < -x->ndim || axis >= x->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis = %lld is out of range for X '%s' of rank %d",
                            (long long)axis, pe_ctx_in_name(ctx, "X", 0), x->ndim);
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* X [..] -> Out [..], any dtype */
pe_status pe_infer_assign(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* Input [d...] (any dtype) -> Out int32 [rank] */
pe_status pe_infer_shape(pe_op_ctx *ctx) {
    pe_tensor *in;
    PE_CHECK(pe_infer_need_in(ctx, "Input", &in));
    const int64_t r = in->ndim;
    return pe_infer_set_out(ctx, "Out", PE_DTYPE_INT32, 1, &r);
}

/* X [1] (one element) -> Out like X; float32, float64, int32, int64 */
pe_status pe_infer_increment(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    char xs[160];
    if (pe_tensor_numel(x) != 1 || !pe_dtype_is_num(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is %s %s (expected one element of float32, float64, int32 "
                            "or int64)", pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype),
                            pe_dims_str(x->ndim, x->dims, xs, sizeof xs));
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims);
}

/* ---- grad makers -------------------------------------------------------------- */

/* cumsum: X@GRAD = cumsum(Out@GRAD) with reverse flipped (Paddle's CumsumGradMaker).
 * With flatten that scan is [numel]: it goes to "<X@GRAD>@FLAT" (declared like
 * Out) and a reshape2_grad (a copy shaped like X) gives X@GRAD X's dims, where
 * Paddle leaves the gradient flat. */
pe_status pe_grad_cumsum_op(pe_grad_ctx *g) {
    PE_CHECK(pe_grad_new_op(g, "cumsum"));
    const pe_attr *rev = pe_op_attr(pe_grad_cur_op(g), "reverse");
    PE_CHECK(pe_op_set_bool(pe_grad_cur_op(g), "reverse", !(rev && rev->i)));
    PE_CHECK(pe_grad_out_grad(g, "Out", "X"));
    PE_CHECK(pe_grad_in_grad(g, "X", "Out"));
    const pe_attr *flat = pe_op_attr(pe_grad_cur_op(g), "flatten");
    pe_slot *o = (pe_slot *)pe_op_output(pe_grad_cur_op(g), "Out");
    if (!flat || !flat->i || !o || o->n_args != 1) return PE_OK;
    char dx[512], tmp[512];
    snprintf(dx, sizeof dx, "%s", o->args[0]);
    if (snprintf(tmp, sizeof tmp, "%s@FLAT", dx) >= (int)sizeof tmp)
        return pe_error(PE_ERR_INVALID, "append_backward: cumsum gradient name '%s' is too long", dx);
    char *t = strdup(tmp);
    if (!t) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory naming '%s'", tmp);
    free(o->args[0]);
    o->args[0] = t;
    PE_CHECK(pe_grad_declare_like(g, tmp, pe_op_output1(pe_grad_fwd(g), "Out")));
    char x[512];
    snprintf(x, sizeof x, "%s", pe_op_input(pe_grad_fwd(g), "X")->args[0]);
    pe_op *r = pe_block_add_op(&g->p->blocks[0], "reshape2_grad"); /* not pe_grad_new_op: no cumsum attrs */
    if (!r) return pe_error(PE_ERR_NOMEM, "append_backward: out of memory adding reshape2_grad");
    g->cur_idx = g->p->blocks[0].n_ops - 1;
    PE_CHECK(pe_op_set_int(r, "op_role", PE_ROLE_BACKWARD));
    PE_CHECK(pe_op_add_input(r, "X", x));
    PE_CHECK(pe_op_add_input(r, "Out@GRAD", tmp));
    return pe_op_add_output(r, "X@GRAD", dx);
}

/* assign: X@GRAD = assign(Out@GRAD) (Paddle's AssignGradMaker). */
pe_status pe_grad_assign_op(pe_grad_ctx *g) {
    PE_CHECK(pe_grad_new_op(g, "assign"));
    PE_CHECK(pe_grad_out_grad(g, "Out", "X"));
    return pe_grad_in_grad(g, "X", "Out");
}
