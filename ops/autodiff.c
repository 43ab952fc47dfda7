/* ops/autodiff.c — shape inference of the ops the autodiff pass emits
 * besides the per-op grad ops: fill_any_like seeds target gradients with
 * ones and stands in zeros for outputs no gradient reaches. */
#include "ops/op.h"

/* fill_any_like: X [any] -> Out [same dims], dtype of X unless attr dtype >= 0. */
pe_status pe_infer_fill_any_like(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    int64_t dt = pe_ctx_int(ctx, "dtype");
    if (dt >= 0 && !pe_dtype_valid((int)dt))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr dtype %lld is not a valid dtype", (long long)dt);
    return pe_infer_set_meta(ctx, pe_ctx_out(ctx, "Out"), dt >= 0 ? (pe_dtype)dt : x->dtype, x->ndim, x->dims);
}
