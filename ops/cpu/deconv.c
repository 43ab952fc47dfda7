/* ops/cpu/deconv.c — CPU kernels of conv2d_transpose and conv2d_transpose_grad.
 *
 * How: a transposed convolution is the input gradient of the convolution
 * whose Input has conv2d_transpose's Output shape (pe_conv_transpose_geom_get
 * returns that conv2d's geometry, Filter [Cin, Cout/groups, kh, kw] being its
 * [M, C/groups, kh, kw] filter as is). So
 *   Output       = conv2d backward-data (Output@GRAD := Input, Filter),
 *   Input@GRAD   = conv2d forward       (Input := Output@GRAD, Filter),
 *   Filter@GRAD  = conv2d backward-weights (Input := Output@GRAD, Output@GRAD := Input),
 * each through nn.c / nn_grad.c's functions: oneDNN's primitives for float32
 * (oneDNN's own deconvolution primitive is these same convolution kernels run
 * the other way), the direct loops for float64 and unimplemented cases, the
 * cached entries and the op's planned workspace as conv2d uses them.
 */
#include "ops/nn.h"
#include "ops/cpu/nn_common.h"

pe_status pe_cpu_conv2d_transpose_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    pe_conv_geom g;
    *bytes = 0;
    PE_CHECK(pe_conv_transpose_geom_get(ctx, &g));
    return pe_nn_conv_bwd_workspace(ctx, &g, pe_ctx_in(ctx, "Input")->dtype, true, false, false, bytes);
}

/* Input: [N, Cin, H, W], Filter: [Cin, Cout/groups, kh, kw] -> Output: [N, Cout, OH, OW] */
pe_status pe_cpu_conv2d_transpose(const pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_transpose_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter");
    return pe_nn_conv_bwd_data(ctx, &g, x->dtype, pe_tensor_data(x), pe_tensor_data(f),
                               pe_tensor_data(pe_ctx_out(ctx, "Output")));
}

pe_status pe_cpu_conv2d_transpose_grad_workspace(const pe_op_ctx *ctx, size_t *bytes) {
    pe_conv_geom g;
    *bytes = 0;
    PE_CHECK(pe_conv_transpose_geom_get(ctx, &g));
    const pe_dtype dt = pe_ctx_in(ctx, "Input")->dtype;
    if (pe_ctx_out(ctx, "Input@GRAD")) PE_CHECK(pe_nn_conv_fwd_workspace(ctx, &g, dt, bytes));
    return pe_nn_conv_bwd_workspace(ctx, &g, dt, false, pe_ctx_out(ctx, "Filter@GRAD") != NULL, false, bytes);
}

/* Input: [N, Cin, H, W], Filter: [Cin, Cout/groups, kh, kw], Output@GRAD: [N, Cout, OH, OW] ->
 * Input@GRAD?: [N, Cin, H, W], Filter@GRAD?: [Cin, Cout/groups, kh, kw] */
pe_status pe_cpu_conv2d_transpose_grad(const pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_transpose_geom_get(ctx, &g));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter"), *dy = pe_ctx_in(ctx, "Output@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Input@GRAD"), *df = pe_ctx_out(ctx, "Filter@GRAD");
    if (dx) PE_CHECK(pe_nn_conv_fwd(ctx, &g, x->dtype, pe_tensor_data(dy), pe_tensor_data(f), NULL, pe_tensor_data(dx)));
    if (df)
        PE_CHECK(pe_nn_conv_bwd_weights(ctx, &g, x->dtype, pe_tensor_data(dy), pe_tensor_data(x), pe_tensor_data(df),
                                        NULL));
    return PE_OK;
}
