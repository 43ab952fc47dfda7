/* ops/cpu/autodiff.c — CPU kernels of the autodiff support ops. */
#include "ops/op.h"

#include <string.h>

/* out: [any] <- value, or ValueTensor [1] (float32/64, checked by infer) */
pe_status pe_cpu_fill_any_like(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const pe_tensor *vt = pe_ctx_in(ctx, "ValueTensor");
    double v = !vt                            ? pe_ctx_float(ctx, "value")
               : vt->dtype == PE_DTYPE_FP64 ? *(const double *)pe_tensor_data(vt)
                                            : *(const float *)pe_tensor_data(vt);
    int64_t n = pe_tensor_numel(out);
    void *d = pe_tensor_data(out);
    switch (out->dtype) {
    case PE_DTYPE_FP32: for (int64_t i = 0; i < n; i++) ((float *)d)[i] = (float)v; break;
    case PE_DTYPE_FP64: for (int64_t i = 0; i < n; i++) ((double *)d)[i] = v; break;
    case PE_DTYPE_INT32: for (int64_t i = 0; i < n; i++) ((int32_t *)d)[i] = (int32_t)v; break;
    case PE_DTYPE_INT64: for (int64_t i = 0; i < n; i++) ((int64_t *)d)[i] = (int64_t)v; break;
    case PE_DTYPE_UINT8: case PE_DTYPE_BOOL: memset(d, v != 0 ? (out->dtype == PE_DTYPE_BOOL ? 1 : (int)v) : 0, (size_t)n); break;
    default: return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "dtype %s is not supported", pe_dtype_name(out->dtype));
    }
    return PE_OK;
}
