/* ops/grad_wire.c — the one grad maker of every op whose backward only wires
 * slots (ops.def PE_GRAD_WIRE).
 *
 * The registry has parsed the wiring into pe_op_info.grad_wire, in the order
 * ops.def gives it; this appends the grad op and makes the ops/grad.h calls a
 * hand-written maker would make, in that order, so the backward program is
 * the same op for op, slot for slot. Grad makers that set attrs or decide
 * (dropout, batch_norm, scale, the XShape ops) stay hand-written next to the
 * op's infer function.
 */
#include "ops/grad.h"

pe_status pe_grad_wired(pe_grad_ctx *g) {
    const pe_op_info *info = pe_op_info_find(pe_grad_fwd(g)->type);
    PE_CHECK(pe_grad_new_op(g, pe_op_info_get(info->grad_op_id)->name));
    for (int i = 0; i < info->n_grad_wire; i++) {
        const char *f = info->grad_wire[i].fslot, *s = info->grad_wire[i].gslot;
        switch (info->grad_wire[i].kind) {
        case PE_WIRE_FWD_INPUT: PE_CHECK(pe_grad_fwd_input(g, f, s)); break;
        case PE_WIRE_FWD_OUTPUT: PE_CHECK(pe_grad_fwd_output(g, f, s)); break;
        case PE_WIRE_OUT_GRAD: PE_CHECK(pe_grad_out_grad(g, f, s)); break;
        default: PE_CHECK(pe_grad_in_grad(g, f, s)); break;
        }
    }
    return PE_OK;
}
