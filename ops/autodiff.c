/* ops/autodiff.c — shape inference of the ops the autodiff pass emits
 * besides the per-op grad ops: fill_any_like seeds target gradients with
 * ones and stands in zeros for outputs no gradient reaches. */
#include "ops/op.h"

/* fill_any_like: X [any] (dims only), ValueTensor [1] float (optional) ->
 * Out [same dims], dtype of X unless attr dtype >= 0. The value is attr
 * value, or ValueTensor's when given: the ParallelExecutor seeds each
 * place's loss gradient from a per-place [1] tensor it sets every run
 * (PE_LOSS_SCALE_VAR), so the program is never rewritten between runs. */
pe_status pe_infer_fill_any_like(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const pe_tensor *vt = pe_ctx_in(ctx, "ValueTensor");
    int64_t dt = pe_ctx_int(ctx, "dtype");
    if (dt >= 0 && !pe_dtype_valid((int)dt))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr dtype %lld is not a valid dtype", (long long)dt);
    if (vt && (pe_tensor_numel(vt) != 1 || !pe_dtype_is_float(vt->dtype)))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "ValueTensor '%s' must hold one float32 or float64 value (it is %s "
                            "with %lld elements)", pe_ctx_in_name(ctx, "ValueTensor", 0), pe_dtype_name(vt->dtype),
                            (long long)pe_tensor_numel(vt));
    return pe_infer_set_meta(ctx, pe_ctx_out(ctx, "Out"), dt >= 0 ? (pe_dtype)dt : x->dtype, x->ndim, x->dims);
}
