/* ops/collective.c — Paddle's collective ops, so a program can carry its
 * own collectives: c_allreduce_sum / _max / _min / _prod, c_broadcast,
 * c_allgather, c_scatter, c_reduce_sum / _max / _min / _prod, c_identity,
 * c_sync_calc_stream and c_sync_comm_stream. Shape inference, the grad makers and the facts
 * other stages ask (ops/collective.h).
 *
 * The ranks of a collective are every place of the ParallelExecutor's
 * world: its places, and with num_trainers > 1 every trainer's places
 * (global rank = trainer x places + place). PE has one such ring: ring_id
 * must be 0. A kernel never waits for other places (places may share a
 * pool thread): the multi-device pass (passes/multi_device.c) makes each
 * op a collective handle of the graph, which the executor runs like the
 * gradients' allreduce (executor/grad_buckets.c). What runs as a kernel
 * (ops/cpu/collective.c) is the op's part on one place: Out = X, a copy
 * when they are two vars (c_allreduce_sum with Out != X: the handle then
 * reduces Out). On a single place (the one-place Executor, a world of
 * one rank) that copy is the whole op.
 *
 * Gradients (model parallel's pair): c_identity's gradient is a
 * c_allreduce_sum of Out@GRAD, c_allreduce_sum's a c_identity; the other
 * ops have none (autodiff then says that no gradient flows through them).
 */
#include "ops/collective.h"
#include "ops/grad.h"
#include "ops/op.h"

#include <stdio.h>

/* c_reduce_sum / _max / _min / _prod -> its reduction */
static pe_red reduce_red(int id) {
    return id == PE_OP_c_reduce_max ? PE_RED_MAX : id == PE_OP_c_reduce_min ? PE_RED_MIN
                                                 : id == PE_OP_c_reduce_prod ? PE_RED_PROD
                                                                             : PE_RED_SUM;
}

bool pe_collective_of(const pe_op *op, pe_collective *c) {
    const pe_attr *a;
    *c = (pe_collective){PE_COLLECTIVE_LOCAL, PE_RED_SUM, 0, 1};
    switch (pe_op_type_id(op->type)) {
    case PE_OP_c_identity:
    case PE_OP_c_sync_calc_stream:
    case PE_OP_c_sync_comm_stream: return true;
    case PE_OP_c_allreduce_sum: c->kind = PE_COLLECTIVE_ALLREDUCE; return true;
    case PE_OP_c_allreduce_max: c->kind = PE_COLLECTIVE_ALLREDUCE, c->red = PE_RED_MAX; return true;
    case PE_OP_c_allreduce_min: c->kind = PE_COLLECTIVE_ALLREDUCE, c->red = PE_RED_MIN; return true;
    case PE_OP_c_allreduce_prod: c->kind = PE_COLLECTIVE_ALLREDUCE, c->red = PE_RED_PROD; return true;
    case PE_OP_c_broadcast:
        c->kind = PE_COLLECTIVE_BROADCAST;
        if ((a = pe_op_attr(op, "root"))) c->root = (int)a->i;
        return true;
    case PE_OP_c_reduce_sum:
    case PE_OP_c_reduce_max:
    case PE_OP_c_reduce_min:
    case PE_OP_c_reduce_prod:
        c->kind = PE_COLLECTIVE_REDUCE;
        c->red = reduce_red(pe_op_type_id(op->type));
        if ((a = pe_op_attr(op, "root_id"))) c->root = (int)a->i;
        return true;
    case PE_OP_c_allgather:
    case PE_OP_c_scatter:
        c->kind = pe_op_type_id(op->type) == PE_OP_c_scatter ? PE_COLLECTIVE_SCATTER : PE_COLLECTIVE_ALLGATHER;
        if ((a = pe_op_attr(op, "nranks"))) c->nranks = (int)a->i;
        if ((a = pe_op_attr(op, "root"))) c->root = (int)a->i;
        return true;
    default: return false;
    }
}

/* The checks a single op can make (ring_id, roots >= 0, nranks >= 1);
 * world > 0 adds those against the world. who: "op c_broadcast ...". */
static pe_status check(const char *who, int64_t ring_id, const pe_collective *c, int world) {
    int w = world > 0 ? world : 1;
    if (ring_id != 0)
        return pe_error(PE_ERR_INVALID, "%s: ring_id %lld: PE has one communication ring, ring_id 0 (every place of "
                        "the ParallelExecutor, across its trainers)", who, (long long)ring_id);
    if ((c->kind == PE_COLLECTIVE_BROADCAST || c->kind == PE_COLLECTIVE_REDUCE || c->kind == PE_COLLECTIVE_SCATTER) &&
        (c->root < 0 || (world > 0 && c->root >= world)))
        return pe_error(PE_ERR_INVALID, "%s: %s %d is not a rank of the world (0..%d: %d rank%s, trainers x places)",
                        who, c->kind == PE_COLLECTIVE_REDUCE ? "root_id" : "root", c->root, w - 1, w,
                        w == 1 ? "" : "s");
    if ((c->kind == PE_COLLECTIVE_ALLGATHER || c->kind == PE_COLLECTIVE_SCATTER) &&
        (c->nranks < 1 || (world > 0 && c->nranks != world)))
        return pe_error(PE_ERR_INVALID, "%s: nranks %d: the world has %d rank%s (trainers x places); set nranks to it",
                        who, c->nranks, w, w == 1 ? "" : "s");
    return PE_OK;
}

pe_status pe_collective_check(const pe_op *op, int world) {
    pe_collective c;
    if (!pe_collective_of(op, &c)) return PE_OK;
    const pe_attr *ring = pe_op_attr(op, "ring_id");
    char who[96];
    snprintf(who, sizeof who, "op %s", op->type);
    return check(who, ring ? ring->i : 0, &c, world);
}

/* The attrs the context holds, as a pe_collective (the op is not kept). */
static void from_ctx(const pe_op_ctx *ctx, pe_collective *c) {
    *c = (pe_collective){PE_COLLECTIVE_LOCAL, PE_RED_SUM, 0, 1};
    switch (ctx->info->id) {
    case PE_OP_c_broadcast: c->kind = PE_COLLECTIVE_BROADCAST, c->root = (int)pe_ctx_int(ctx, "root"); break;
    case PE_OP_c_reduce_sum:
    case PE_OP_c_reduce_max:
    case PE_OP_c_reduce_min:
    case PE_OP_c_reduce_prod: c->kind = PE_COLLECTIVE_REDUCE, c->root = (int)pe_ctx_int(ctx, "root_id"); break;
    case PE_OP_c_allgather: c->kind = PE_COLLECTIVE_ALLGATHER, c->nranks = (int)pe_ctx_int(ctx, "nranks"); break;
    case PE_OP_c_scatter:
        c->kind = PE_COLLECTIVE_SCATTER, c->nranks = (int)pe_ctx_int(ctx, "nranks"), c->root = (int)pe_ctx_int(ctx, "root");
        break;
    default: break;
    }
}

/* ring_id and the attrs of the c_* op of ctx (every c_* op has ring_id
 * but c_sync_calc_stream) */
static pe_status check_ctx(pe_op_ctx *ctx) {
    pe_collective c;
    from_ctx(ctx, &c);
    char who[192], pb[32];
    const char *out = pe_ctx_out_name(ctx, "Out", 0);
    snprintf(who, sizeof who, "op %s (output '%s') on %s", ctx->info->name, out ? out : "",
             pe_place_str(ctx->place, pb, sizeof pb));
    return check(who, pe_op_info_attr(ctx->info, "ring_id") ? pe_ctx_int(ctx, "ring_id") : 0, &c, 0);
}

/* c_allreduce_*, c_broadcast, c_reduce_sum, c_identity: X: [d...] -> Out: [d...] */
pe_status pe_infer_c_collective(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(check_ctx(ctx));
    bool moves = ctx->info->id == PE_OP_c_broadcast || ctx->info->id == PE_OP_c_identity;
    if (!moves && !pe_dtype_is_num(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "X '%s' is %s; reductions take float32, float64, int32, int64",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    return pe_infer_same(ctx, "X", "Out");
}

/* c_allgather: X: [n, d...] -> Out: [nranks * n, d...] */
pe_status pe_infer_c_allgather(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(check_ctx(ctx));
    if (x->ndim < 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' is a scalar; c_allgather concatenates along axis 0",
                            pe_ctx_in_name(ctx, "X", 0));
    int64_t dims[PE_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) dims[i] = x->dims[i];
    dims[0] *= pe_ctx_int(ctx, "nranks");
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, dims);
}

/* c_scatter: X: [nranks * n, d...] -> Out: [n, d...] */
pe_status pe_infer_c_scatter(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(check_ctx(ctx));
    int64_t nranks = pe_ctx_int(ctx, "nranks");
    if (x->ndim < 1 || x->dims[0] % nranks)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has %lld rows, not a multiple of nranks %lld (c_scatter gives "
                            "each rank an equal chunk along axis 0)", pe_ctx_in_name(ctx, "X", 0),
                            (long long)(x->ndim ? x->dims[0] : 0), (long long)nranks);
    int64_t dims[PE_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) dims[i] = x->dims[i];
    dims[0] /= nranks;
    return pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, dims);
}

/* c_sync_calc_stream / c_sync_comm_stream: X*: -> Out*: the same, one by one */
pe_status pe_infer_c_sync(pe_op_ctx *ctx) {
    PE_CHECK(check_ctx(ctx));
    int n = pe_ctx_n_in(ctx, "X");
    if (pe_ctx_n_out(ctx, "Out") != n)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%d inputs X but %d outputs Out (one Out per X)", n,
                            pe_ctx_n_out(ctx, "Out"));
    for (int k = 0; k < n; k++) {
        const pe_tensor *x = pe_ctx_in_at(ctx, "X", k);
        pe_tensor *o = pe_ctx_out_at(ctx, "Out", k);
        if (x && o) PE_CHECK(pe_infer_set_meta(ctx, o, x->dtype, x->ndim, x->dims));
    }
    return PE_OK;
}

/* c_identity: X@GRAD = c_allreduce_sum(Out@GRAD) (the model-parallel pair) */
pe_status pe_grad_c_identity(pe_grad_ctx *g) {
    PE_CHECK(pe_grad_new_op(g, "c_allreduce_sum"));
    PE_CHECK(pe_grad_out_grad(g, "Out", "X"));
    return pe_grad_in_grad(g, "X", "Out");
}

/* c_allreduce_sum: X@GRAD = c_identity(Out@GRAD) */
pe_status pe_grad_c_allreduce_sum(pe_grad_ctx *g) {
    PE_CHECK(pe_grad_new_op(g, "c_identity"));
    PE_CHECK(pe_grad_out_grad(g, "Out", "X"));
    return pe_grad_in_grad(g, "X", "Out");
}
