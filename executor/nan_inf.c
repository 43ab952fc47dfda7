/* executor/nan_inf.c — FLAGS_check_nan_inf (ExecutionStrategy.check_nan_inf):
 * every floating-point output of an op, or of a collective, checked for
 * NaN and infinities after it ran; the first one fails the run with a
 * message naming the op (type and index), its place, the output slot and
 * var, the element and what it holds.
 *
 * How: runtime/nan_inf.c scans the values; this file only walks an op
 * context's outputs and words the error. The executors call it behind one
 * flag test per op, so with the switch off a run does what it did before
 * (same bits, same speed).
 */
#include "executor/nan_inf.h"
#include "runtime/internal.h"

#include <stdio.h>

pe_status pe_nan_inf_check(const pe_tensor *t, int64_t b, int64_t e, int op_idx, const char *who, pe_place place,
                           const char *slot, const char *name) {
    int64_t i = 0;
    pe_nonfinite k;
    PE_CHECK(pe_tensor_find_nonfinite(t, b, e, &i, &k));
    if (k == PE_FINITE) return PE_OK;
    char pb[32], op[96] = "";
    if (op_idx >= 0) snprintf(op, sizeof op, "op %d (%s)", op_idx, who);
    return pe_error(PE_ERR_INVALID, "%s on %s: output %s%s'%s' has %s at element %lld (FLAGS_check_nan_inf)",
                    op_idx >= 0 ? op : who, pe_place_str(place, pb, sizeof pb), slot ? slot : "", slot ? " " : "", name,
                    pe_nonfinite_name(k), (long long)i);
}

pe_status pe_nan_inf_check_op(const pe_op_ctx *ctx, int op_idx) {
    const pe_op_info *info = ctx->info;
    for (int i = 0; i < info->n_outputs; i++)
        for (int j = 0; j < ctx->n_out[i]; j++)
            if (ctx->out[i][j])
                PE_CHECK(pe_nan_inf_check(ctx->out[i][j], 0, -1, op_idx, info->name, ctx->place, info->outputs[i].name,
                                          ctx->out_names[i][j]));
    return PE_OK;
}
