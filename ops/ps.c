/* ops/ps.c — shape inference of the parameter-server ops (send, recv,
 * send_barrier, fetch_barrier, listen_and_serv; rows in ops/ops.def,
 * kernels in ops/cpu/ps.c, the server loop in executor/pserver.c).
 *
 * Their Out vars (and X of the barriers) only order the ops in the program,
 * as Paddle's dummy vars do: each gets an empty fp32 [0] tensor. recv's Out
 * takes the shape of its declaration when that is fixed (so the ops after
 * it see it before the first step); the value that arrives sets the rest.
 */
#include "ops/op.h"

#include <string.h>

/* Out*: dependency vars: fp32 [0] */
pe_status pe_infer_ps_dummy(pe_op_ctx *ctx) {
    const int64_t zero[1] = {0};
    for (int k = 0; k < pe_ctx_n_out(ctx, "Out"); k++) {
        pe_tensor *o = pe_ctx_out_at(ctx, "Out", k);
        if (o) PE_CHECK(pe_infer_set_meta(ctx, o, PE_DTYPE_FP32, 1, zero));
    }
    return PE_OK;
}

/* Out[i]: the declared meta when every dim is fixed, else what came last */
pe_status pe_infer_recv(pe_op_ctx *ctx) {
    int n = pe_ctx_n_out(ctx, "Out"), ne = 0, nv = 0;
    pe_ctx_strings(ctx, "epmap", &ne);
    pe_ctx_strings(ctx, "varnames", &nv);
    if (ne != n)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "epmap has %d endpoints for %d outputs Out (one per Out)", ne, n);
    if (nv != 0 && nv != n)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "varnames has %d names for %d outputs Out (one per Out, or none)",
                            nv, n);
    for (int k = 0; k < n; k++) {
        pe_tensor *o = pe_ctx_out_at(ctx, "Out", k);
        const pe_var *v = ctx->out_decl ? ctx->out_decl[k] : NULL;
        if (!o || !v || v->ndim <= 0) continue;
        bool fixed = true;
        for (int d = 0; d < v->ndim; d++) fixed &= v->dims[d] >= 0;
        if (fixed) PE_CHECK(pe_infer_set_meta(ctx, o, v->dtype, v->ndim, v->dims));
    }
    return PE_OK;
}
