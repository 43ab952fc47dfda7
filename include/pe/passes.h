/* pe/passes.h — graph passes over a program.
 *
 *     // forward program with loss "loss"; parameters are the is_parameter vars
 *     pe_param_grad *pg; int n;
 *     if (pe_append_backward(prog, "loss", NULL, 0, NULL, 0, &pg, &n) != PE_OK)
 *         fprintf(stderr, "%s\n", pe_last_error());
 *     for (int i = 0; i < n; i++) printf("%s -> %s\n", pg[i].param, pg[i].grad);
 *     pe_param_grads_free(pg, n);
 *
 * pe_append_backward has Paddle's meaning: it appends to block 0 the
 * gradient ops of every op between the parameters and the loss, in reverse
 * order; `loss@GRAD` is filled with ones by an op whose op_role is
 * loss|backward; a var used by several ops gets its gradient contributions
 * summed; stop_gradient vars and the no-grad set get no gradient; every
 * backward op has op_role backward, and the op producing a parameter's final
 * gradient carries op_role_var = [param, grad, ...] so later passes find
 * parameter gradients without guessing from names.
 */
#ifndef PE_PASSES_H
#define PE_PASSES_H

#include "pe/program.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

typedef struct pe_param_grad {
    char *param;   /* owned */
    char *grad;    /* owned */
} pe_param_grad;

/* params: the parameters to differentiate (NULL/0 = every is_parameter var
 * without stop_gradient). no_grad: vars that get no gradient. *out (owned by
 * caller, pe_param_grads_free) lists (param, grad) for every parameter the
 * loss depends on, in program declaration order. out may be NULL. */
pe_status pe_append_backward(pe_program *p, const char *loss, const char *const *params, int n_params,
                             const char *const *no_grad, int n_no_grad, pe_param_grad **out, int *n_out);
void pe_param_grads_free(pe_param_grad *pg, int n); /* accepts NULL */

/* Appends the ops computing d(sum of targets)/d(inputs) to block 0 (each
 * target's gradient seeded with ones). grad_names[i] (caller-allocated array
 * of n_inputs, each entry owned by the caller, free()) is the gradient var
 * of inputs[i], or NULL when inputs[i] does not affect the targets. */
pe_status pe_gradients(pe_program *p, const char *const *targets, int n_targets,
                       const char *const *inputs, int n_inputs, char **grad_names);
/* pe_gradients with Paddle's target_gradients and no_grad_set:
 * target_grads[i] (NULL array, or a NULL entry: ones) is the var holding the
 * gradient of targets[i] (the target's dtype and shape), copied into
 * targets[i]@GRAD by an `assign`; no_grad vars get no gradient (an input in
 * no_grad gets NULL). Several targets: their gradients are summed. */
pe_status pe_gradients_seeded(pe_program *p, const char *const *targets, const char *const *target_grads,
                              int n_targets, const char *const *inputs, int n_inputs, const char *const *no_grad,
                              int n_no_grad, char **grad_names);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
