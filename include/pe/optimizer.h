/* pe/optimizer.h — optimizers and initializers as program transformations.
 *
 *     pe_optimizer opt;
 *     pe_optimizer_default(&opt, PE_OPT_MOMENTUM, 0.1);
 *     opt.momentum = 0.9;
 *     opt.weight_decay = 1e-4;                      // L2
 *     opt.clip_global_norm = 5.0;                   // 0 = no clipping
 *     pe_param_grad *pg; int n;
 *     if (pe_optimizer_minimize(&opt, main, startup, "loss", NULL, 0, NULL, 0, NULL, 0, &pg, &n) != PE_OK)
 *         fprintf(stderr, "%s\n", pe_last_error());
 *
 *     pe_initializer init = {.kind = PE_INIT_XAVIER_UNIFORM};
 *     pe_startup_init_var(startup, pe_program_find_var(main, 0, "fc_0.w_0"), &init);
 *
 * minimize = Paddle's Optimizer.minimize: append_backward (pe/passes.h),
 * then, in Paddle's (and torch's) order, gradient clipping (by global norm:
 * one clip_by_global_norm op, in place on the gradients; by each
 * gradient's norm or by value: one clip_by_global_norm or clip op per
 * gradient into a new var <grad>@CLIP_k; at most one of the three), L2 and
 * L1 weight decay (scale, and sign + scale for L1, + sum into a new var
 * <grad>@DECAYED_k), a per-param lr (scale)
 * when lr_mult != 1, and one optimizer op per parameter (sgd / momentum /
 * adam / adagrad / rmsprop / adamax / adamw / lamb, learning rate as a persistable variable, outputs aliasing inputs).
 * Accumulators (<param>_velocity_0, _moment1_0, _moment2_0,
 * _beta1_pow_acc_0, _beta2_pow_acc_0; adagrad _moment_0; rmsprop
 * _momentum_0, _mean_square_0, _mean_grad_0; adamax _moment_0,
 * _inf_norm_0, _beta1_pow_acc_0: Paddle's names and initial values) and the learning rate
 * (learning_rate_0) are declared persistable in `main` and `startup` and
 * initialized by fill_constant ops appended to `startup`. Every op added
 * has op_role optimize; the per-parameter ones carry op_role_var
 * [param, grad] (grad as append_backward named it), which the multi-device
 * pass relies on; the clip op, spanning all parameters, carries none (so
 * under the `reduce` strategy, where non-owner places hold partial
 * gradients, clipping by global norm is not supported: a ParallelExecutor
 * over several places refuses it with an error).
 * The table of a lookup_table(_v2) op with is_sparse=true (Paddle's sparse,
 * SelectedRows, gradient) gets the dense gradient of the whole table: the
 * same update as Paddle's (with a regularizer Paddle's gradient is dense
 * too; without one the rows no id looked up get a zero gradient, which
 * leaves them as Paddle's sparse kernels do, or updates them as Paddle's
 * momentum / adam / rmsprop / adamw / lamb sparse kernels do). Refused
 * (PE_ERR_UNSUPPORTED, naming the parameter) where it would differ:
 * is_distributed tables, adamax without a regularizer (no sparse kernel in
 * Paddle), adagrad with epsilon = 0 and initial_accumulator_value = 0
 * without a regularizer, clipping by value to a range without 0.
 * minimize is atomic: on error main and startup are unchanged. It fails
 * when no parameter gets a gradient.
 */
#ifndef PE_OPTIMIZER_H
#define PE_OPTIMIZER_H

#include "pe/passes.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

typedef enum pe_optimizer_kind {
    PE_OPT_SGD = 0, PE_OPT_MOMENTUM, PE_OPT_ADAM, PE_OPT_ADAGRAD, PE_OPT_RMSPROP, PE_OPT_ADAMAX, PE_OPT_ADAMW,
    PE_OPT_LAMB, PE_OPT_KIND_COUNT
} pe_optimizer_kind;

typedef struct pe_optimizer {
    pe_optimizer_kind kind;
    double learning_rate;     /* initial value of the learning-rate var */
    const char *lr_var;       /* existing persistable [1] var to use; NULL = create one */
    double momentum;          /* MOMENTUM (default 0.9), RMSPROP (default 0) */
    bool use_nesterov;
    double beta1, beta2;      /* ADAM, ADAMAX, ADAMW, LAMB (0.9, 0.999) */
    double epsilon;           /* 1e-8; ADAGRAD, RMSPROP, LAMB: 1e-6 (Paddle's defaults) */
    double weight_decay;      /* L2 coefficient (added to the gradient); 0 = none */
    double l1_decay;          /* L1 coefficient: grad += l1_decay * sign(param) (Paddle's L1Decay); 0 = none */
    double clip_global_norm;  /* clip gradients by global norm; 0 = none */
    double clip_norm;         /* clip each gradient by its own L2 norm (Paddle's ClipGradByNorm); 0 = none */
    bool clip_by_value;       /* clip each gradient element to [clip_min, clip_max] (ClipGradByValue) */
    double clip_min, clip_max;
    double initial_accumulator_value; /* ADAGRAD: Moment's initial value (0) */
    double rho;               /* RMSPROP: decay of the mean square (0.95) */
    bool centered;            /* RMSPROP: divide by the centered second moment */
    double coeff;             /* ADAMW: decoupled decay p -= lr * coeff * p; LAMB: lamb_weight_decay (0.01) */
    double lr_ratio;          /* ADAMW: its learning rate is lr * lr_ratio (1) */
    const char *const *no_decay; /* ADAMW, LAMB: params that get no coeff decay (borrowed) */
    int n_no_decay;
} pe_optimizer;

/* Per-parameter settings (Paddle's ParamAttr): learning-rate multiplier
 * (taken literally: 0 freezes the param, so set it to 1 for "unchanged")
 * and the param's own regularizer, which replaces the optimizer's (both
 * kinds, as Paddle's ParamAttr.regularizer does) when l2 >= 0 or l1 > 0:
 * L2 coefficient l2 and L1 coefficient l1 (l2 < 0 and l1 <= 0 = the
 * optimizer's weight_decay and l1_decay). name must be a var of main's
 * block 0; names must not repeat. */
typedef struct pe_param_config {
    const char *name;
    double lr_mult;
    double l2;
    double l1;
} pe_param_config;

void pe_optimizer_default(pe_optimizer *o, pe_optimizer_kind kind, double learning_rate);

/* params/no_grad as pe_append_backward. out (may be NULL) owned by caller. */
pe_status pe_optimizer_minimize(const pe_optimizer *o, pe_program *main, pe_program *startup, const char *loss,
                                const char *const *params, int n_params, const char *const *no_grad, int n_no_grad,
                                const pe_param_config *cfg, int n_cfg, pe_param_grad **out, int *n_out);

typedef enum pe_init_kind {
    PE_INIT_CONSTANT = 0, PE_INIT_UNIFORM, PE_INIT_NORMAL, PE_INIT_TRUNCATED_NORMAL,
    PE_INIT_XAVIER_UNIFORM, PE_INIT_XAVIER_NORMAL, PE_INIT_KAIMING_UNIFORM, PE_INIT_KAIMING_NORMAL,
    PE_INIT_ASSIGN, PE_INIT_KIND_COUNT
} pe_init_kind;

typedef struct pe_initializer {
    pe_init_kind kind;
    double value;             /* CONSTANT */
    double low, high;         /* UNIFORM */
    double mean, std;         /* NORMAL, TRUNCATED_NORMAL */
    int64_t fan_in, fan_out;  /* XAVIER/KAIMING; 0 = from the var's shape as Paddle does */
    const double *values;     /* ASSIGN: numel values (borrowed) */
    int64_t n_values;
    int seed;                 /* 0 = derived from the program seed and the var name */
} pe_initializer;

/* Declares `var` (persistable, same dtype/shape) in startup if needed and
 * appends the op that initializes it. */
pe_status pe_startup_init_var(pe_program *startup, const pe_var *var, const pe_initializer *init);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
