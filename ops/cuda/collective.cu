/* ops/cuda/collective.cu — one CUDA place's part of a collective op (see
 * ops/collective.c and ops/cpu/collective.c): Out = X, a device-to-device copy
 * on the place's stream. The exchange between places is the collective
 * handle the multi-device pass puts in the graph (NCCL on CUDA places,
 * runtime/comm/nccl.cu), which runs after this copy; on a world of one rank
 * this is the op.
 */
#include "ops/cuda/cuda_ops.h"

namespace {

/* X: [d...] -> Out: [d...] (nothing to do in place) */
pe_status copy_one(const pe_op_ctx *ctx, const pe_tensor *x, pe_tensor *out, cudaStream_t s) {
    if (!x || !out) return PE_OK;
    void *d = pe_tensor_data(out);
    const void *src = pe_tensor_data(x);
    size_t n = pe_tensor_nbytes(x);
    if (d == src || !n) return PE_OK;
    return pe_cuda_check(ctx, cudaMemcpyAsync(d, src, n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync X -> Out");
}

pe_status copy_all(const pe_op_ctx *ctx) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    for (int k = 0; k < pe_ctx_n_in(ctx, "X"); k++)
        PE_CHECK(copy_one(ctx, pe_ctx_in_at(ctx, "X", k), pe_ctx_out_at(ctx, "Out", k), s));
    return PE_OK;
}

} // namespace

extern "C" {

/* c_allreduce_*, c_broadcast, c_reduce_*, c_identity */
pe_status pe_cuda_c_collective(const pe_op_ctx *ctx) { return copy_all(ctx); }

/* c_allgather and c_scatter on one rank: X: [n, d...] -> Out: [n, d...] */
pe_status pe_cuda_c_allgather(const pe_op_ctx *ctx) {
    int64_t nranks = pe_ctx_int(ctx, "nranks");
    if (nranks != 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "nranks %lld, but this place runs the op alone (a world of one "
                            "rank: a single-place Executor); run it through a ParallelExecutor of %lld ranks",
                            (long long)nranks, (long long)nranks);
    return copy_all(ctx);
}

/* c_sync_calc_stream / c_sync_comm_stream: PE runs a place's kernels and its
 * collectives in one stream order, so a copy is all there is to do. */
pe_status pe_cuda_c_sync(const pe_op_ctx *ctx) { return copy_all(ctx); }

} // extern "C"
