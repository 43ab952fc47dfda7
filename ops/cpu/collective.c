/* ops/cpu/collective.c — one place's part of a collective op (see
 * ops/collective.c): Out = X. The exchange between places is not a
 * kernel's job: the multi-device pass makes it a collective handle of the
 * graph, which runs after this copy (on Out) or, for c_allgather over
 * several ranks, instead of it. On a world of one rank this is the op.
 */
#include "ops/op.h"

#include <string.h>

/* X: [d...] -> Out: [d...] (nothing to do in place) */
static void copy_one(const pe_tensor *x, pe_tensor *out) {
    if (!x || !out) return;
    void *d = pe_tensor_data(out);
    const void *s = pe_tensor_data(x);
    size_t n = pe_tensor_nbytes(x);
    if (d != s && n) memcpy(d, s, n);
}

/* c_allreduce_*, c_broadcast, c_reduce_*, c_identity */
pe_status pe_cpu_c_collective(const pe_op_ctx *ctx) {
    copy_one(pe_ctx_in(ctx, "X"), pe_ctx_out(ctx, "Out"));
    return PE_OK;
}

/* c_allgather and c_scatter on one rank: X: [n, d...] -> Out: [n, d...] */
pe_status pe_cpu_c_allgather(const pe_op_ctx *ctx) {
    int64_t nranks = pe_ctx_int(ctx, "nranks");
    if (nranks != 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "nranks %lld, but this place runs the op alone (a world of one "
                            "rank: a single-place Executor); run it through a ParallelExecutor of %lld ranks",
                            (long long)nranks, (long long)nranks);
    copy_one(pe_ctx_in(ctx, "X"), pe_ctx_out(ctx, "Out"));
    return PE_OK;
}

/* c_sync_calc_stream / c_sync_comm_stream: nothing to wait for on a CPU */
pe_status pe_cpu_c_sync(const pe_op_ctx *ctx) {
    for (int k = 0; k < pe_ctx_n_in(ctx, "X"); k++) copy_one(pe_ctx_in_at(ctx, "X", k), pe_ctx_out_at(ctx, "Out", k));
    return PE_OK;
}
