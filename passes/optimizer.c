/* passes/optimizer.c — pe_optimizer_minimize: Paddle's Optimizer.minimize
 * as a program transformation (API in include/pe/optimizer.h).
 *
 * What it appends to block 0 of `main`, after pe_append_backward's
 * gradient ops, in Paddle's order (apply_gradients: clip, then
 * regularization, then the optimization pass):
 *   1. clip_by_global_norm over every parameter gradient, in place
 *      (when clip_global_norm > 0) — the grads are read after the
 *      multi-device pass's allreduce, so the norm is the global one; or,
 *      per gradient, clip_by_global_norm over that one gradient (clip_norm
 *      > 0: Paddle's clip_by_norm, x * max / max(||x||, max)) or clip
 *      (clip_by_value) into <grad>@CLIP_k, which the next steps read;
 *   2. per parameter with an L2 coefficient c (its pe_param_config l2, or
 *      the optimizer's weight_decay): scale(param, c) -> <param>_l2_decay_k,
 *      and with an L1 coefficient d (l1, or l1_decay): sign(param) ->
 *      <param>_l1_sign_k, scale(that, d) -> <param>_l1_decay_k; then
 *      sum(grad, the terms) -> <grad>@DECAYED_k, which the optimizer reads
 *      (Paddle's L2DecayRegularizer / L1DecayRegularizer; torch's
 *      weight_decay: g + c * p, applied after gradient clipping as torch
 *      users do);
 *   3. per parameter with lr_mult != 1: scale(lr, lr_mult) -> <param>_lr_k;
 *   4. one sgd / momentum / adam / adagrad / rmsprop / adamax / adamw / lamb
 *      op per parameter, its outputs aliasing its inputs (ParamOut = Param,
 *      ...). adamw's decoupled decay (with_decay) and lamb's weight_decay
 *      are off for the params in o->no_decay (Paddle's apply_decay_param_fun
 *      / exclude_from_weight_decay_fn, evaluated in Python).
 * A parameter that is the table of a lookup_table(_v2) op with is_sparse
 * (Paddle's SelectedRows gradient) is updated with its dense gradient, zero
 * in the rows no id looked up: Paddle's update of a sparse table for every
 * optimizer here, except the cases check_sparse_table refuses.
 * Every added op has op_role = optimize; the per-parameter ones (2-4) also
 * carry op_role_var = [param, grad] (grad = the name append_backward gave),
 * which the multi-device pass uses to run a parameter's optimizer only on
 * its owner place under the `reduce` strategy. The clip op has no
 * op_role_var: it spans all parameters and runs on every place.
 *
 * State: the learning rate is a persistable fp32 [1] var learning_rate_k
 * (or the caller's lr_var); accumulators are persistable vars named as
 * Paddle's unique_name does (<param>_velocity_0, <param>_moment1_0,
 * <param>_moment2_0, <param>_beta1_pow_acc_0, <param>_beta2_pow_acc_0;
 * adagrad <param>_moment_0 (= initial_accumulator_value); rmsprop
 * <param>_momentum_0, _mean_square_0, _mean_grad_0; adamax <param>_moment_0,
 * _inf_norm_0, _beta1_pow_acc_0 (= beta1); the suffix grows when a name is taken in main or startup), with the param's
 * dtype ([1] for the beta powers). Each is declared in both programs and
 * initialized in `startup` by fill_constant (lr; zeros; beta1 / beta2).
 *
 * The pass works on copies of both programs and swaps them in only on
 * success, so a failure leaves main and startup unchanged.
 */
#include "pe/optimizer.h"
#include "pe/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 512

void pe_optimizer_default(pe_optimizer *o, pe_optimizer_kind kind, double learning_rate) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->learning_rate = learning_rate;
    o->momentum = 0.9;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->epsilon = kind == PE_OPT_ADAGRAD || kind == PE_OPT_RMSPROP || kind == PE_OPT_LAMB ? 1e-6 : 1e-8;
    if (kind == PE_OPT_RMSPROP) o->momentum = 0.0;
    o->rho = 0.95;
    o->coeff = 0.01;
    o->lr_ratio = 1.0;
}

typedef struct {
    pe_program *main, *startup;
    const pe_optimizer *o;
} mctx;

static pe_block *mblk(const mctx *m) { return &m->main->blocks[0]; }
static pe_block *sblk(const mctx *m) { return &m->startup->blocks[0]; }

/* base_k with the smallest k free in both programs (Paddle's unique_name). */
static pe_status unique_name(const mctx *m, const char *base, char *out) {
    for (int k = 0; k < 1000000; k++) {
        int r = snprintf(out, NAME_MAX_LEN, "%s_%d", base, k);
        if (r < 0 || r >= NAME_MAX_LEN)
            return pe_error(PE_ERR_INVALID, "minimize: var name '%s_%d' is too long", base, k);
        if (!pe_block_find_var(mblk(m), out) && !pe_block_find_var(sblk(m), out)) return PE_OK;
    }
    return pe_error(PE_ERR_INTERNAL, "minimize: no free name for '%s'", base);
}

/* Declares `name` in block b; persistable state also gets stop_gradient. */
static pe_status declare(pe_block *b, const char *name, pe_dtype dt, int ndim, const int64_t *dims, bool persistable) {
    pe_var *v = pe_block_add_var(b, name, dt, ndim, dims);
    if (!v) return pe_error(PE_ERR_NOMEM, "minimize: out of memory declaring '%s'", name);
    v->persistable = persistable;
    v->stop_gradient = true;
    return PE_OK;
}

/* A persistable var in main and startup, set to `value` by startup. */
static pe_status add_state(const mctx *m, const char *name, pe_dtype dt, int ndim, const int64_t *dims, double value) {
    PE_CHECK(declare(mblk(m), name, dt, ndim, dims, true));
    PE_CHECK(declare(sblk(m), name, dt, ndim, dims, true));
    pe_op *op = pe_block_add_op(sblk(m), "fill_constant");
    if (!op) return pe_error(PE_ERR_NOMEM, "minimize: out of memory");
    PE_CHECK(pe_op_add_output(op, "Out", name));
    PE_CHECK(pe_op_set_longs(op, "shape", dims, ndim));
    PE_CHECK(pe_op_set_int(op, "dtype", dt));
    return pe_op_set_float(op, "value", value);
}

/* Appends an op of `type` to main with op_role optimize and, when param is
 * given, op_role_var [param, grad]. Borrowed; valid until the next add. */
static pe_status add_op(const mctx *m, const char *type, const char *param, const char *grad, pe_op **out) {
    pe_op *op = pe_block_add_op(mblk(m), type);
    if (!op) return pe_error(PE_ERR_NOMEM, "minimize: out of memory adding %s", type);
    PE_CHECK(pe_op_set_int(op, "op_role", PE_ROLE_OPTIMIZE));
    if (param) {
        const char *rv[2] = {param, grad};
        PE_CHECK(pe_op_set_strings(op, "op_role_var", rv, 2));
    }
    *out = op;
    return PE_OK;
}

static pe_status check_optimizer(const pe_optimizer *o) {
    if ((int)o->kind < 0 || o->kind >= PE_OPT_KIND_COUNT)
        return pe_error(PE_ERR_INVALID, "minimize: unknown optimizer kind %d (expected 0 sgd, 1 momentum, 2 adam, "
                        "3 adagrad, 4 rmsprop, 5 adamax, 6 adamw, 7 lamb)", (int)o->kind);
    if (!o->lr_var && !isfinite(o->learning_rate))
        return pe_error(PE_ERR_INVALID, "minimize: learning_rate = %g; it must be finite", o->learning_rate);
    if (o->kind == PE_OPT_MOMENTUM && !isfinite(o->momentum))
        return pe_error(PE_ERR_INVALID, "minimize: momentum = %g; it must be finite", o->momentum);
    static const char *const kname[PE_OPT_KIND_COUNT] = {"sgd", "momentum", "adam", "adagrad", "rmsprop",
                                                          "adamax", "adamw", "lamb"};
    const char *kn = kname[o->kind];
    if (o->kind == PE_OPT_ADAM || o->kind == PE_OPT_ADAMAX || o->kind == PE_OPT_ADAMW || o->kind == PE_OPT_LAMB) {
        if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
            return pe_error(PE_ERR_INVALID, "minimize: %s beta1 = %g, beta2 = %g; each must be in [0, 1)", kn, o->beta1,
                            o->beta2);
    }
    if (o->kind >= PE_OPT_ADAM && (!(o->epsilon >= 0) || !isfinite(o->epsilon)))
        return pe_error(PE_ERR_INVALID, "minimize: %s epsilon = %g; it must be finite and >= 0", kn, o->epsilon);
    if (o->kind == PE_OPT_ADAGRAD && !isfinite(o->initial_accumulator_value))
        return pe_error(PE_ERR_INVALID, "minimize: adagrad initial_accumulator_value = %g; it must be finite",
                        o->initial_accumulator_value);
    if (o->kind == PE_OPT_RMSPROP && (!isfinite(o->rho) || !isfinite(o->momentum)))
        return pe_error(PE_ERR_INVALID, "minimize: rmsprop rho = %g, momentum = %g; they must be finite", o->rho,
                        o->momentum);
    if ((o->kind == PE_OPT_ADAMW || o->kind == PE_OPT_LAMB) && (!isfinite(o->coeff) || !isfinite(o->lr_ratio)))
        return pe_error(PE_ERR_INVALID, "minimize: %s coeff = %g, lr_ratio = %g; they must be finite", kn, o->coeff,
                        o->lr_ratio);
    if (o->n_no_decay > 0 && !o->no_decay)
        return pe_error(PE_ERR_INVALID, "minimize: n_no_decay = %d but no_decay is NULL", o->n_no_decay);
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return pe_error(PE_ERR_INVALID, "minimize: weight_decay = %g; it must be finite and >= 0", o->weight_decay);
    if (!(o->clip_global_norm >= 0) || !isfinite(o->clip_global_norm))
        return pe_error(PE_ERR_INVALID, "minimize: clip_global_norm = %g; it must be finite and >= 0 (0 = no clipping)",
                        o->clip_global_norm);
    if (!(o->l1_decay >= 0) || !isfinite(o->l1_decay))
        return pe_error(PE_ERR_INVALID, "minimize: l1_decay = %g; it must be finite and >= 0", o->l1_decay);
    if (!(o->clip_norm >= 0) || !isfinite(o->clip_norm))
        return pe_error(PE_ERR_INVALID, "minimize: clip_norm = %g; it must be finite and >= 0 (0 = no clipping)",
                        o->clip_norm);
    if (o->clip_by_value && (!isfinite(o->clip_min) || !isfinite(o->clip_max) || !(o->clip_min <= o->clip_max)))
        return pe_error(PE_ERR_INVALID, "minimize: clip by value to [%g, %g]; the bounds must be finite and min <= max",
                        o->clip_min, o->clip_max);
    if ((o->clip_global_norm > 0) + (o->clip_norm > 0) + o->clip_by_value > 1)
        return pe_error(PE_ERR_INVALID, "minimize: clip_global_norm = %g, clip_norm = %g, clip_by_value = %s: choose "
                        "one way to clip the gradients", o->clip_global_norm, o->clip_norm,
                        o->clip_by_value ? "true" : "false");
    return PE_OK;
}

static pe_status check_configs(const pe_program *main, const pe_param_config *cfg, int n_cfg) {
    if (n_cfg > 0 && !cfg) return pe_error(PE_ERR_INVALID, "minimize: n_cfg = %d but cfg is NULL", n_cfg);
    for (int i = 0; i < n_cfg; i++) {
        const char *n = cfg[i].name;
        if (!n || !pe_block_find_var(&main->blocks[0], n))
            return pe_error(PE_ERR_NOT_FOUND, "minimize: param config %d names '%s', which is not a variable of block 0", i,
                            n ? n : "(null)");
        for (int j = 0; j < i; j++)
            if (!strcmp(cfg[j].name, n))
                return pe_error(PE_ERR_INVALID, "minimize: param configs %d and %d both name '%s'", j, i, n);
        if (!(cfg[i].lr_mult >= 0) || !isfinite(cfg[i].lr_mult))
            return pe_error(PE_ERR_INVALID, "minimize: param config '%s': lr_mult = %g; it must be finite and >= 0", n,
                            cfg[i].lr_mult);
        if (!isfinite(cfg[i].l2))
            return pe_error(PE_ERR_INVALID, "minimize: param config '%s': l2 = %g; it must be finite (< 0 = the optimizer's "
                            "weight_decay)", n, cfg[i].l2);
        if (!isfinite(cfg[i].l1))
            return pe_error(PE_ERR_INVALID, "minimize: param config '%s': l1 = %g; it must be finite (<= 0 with l2 < 0 = "
                            "the optimizer's decay)", n, cfg[i].l1);
    }
    return PE_OK;
}

/* The caller's lr_var: a float var of block 0 with one element. */
static pe_status check_lr_var(const pe_program *main, const char *name) {
    const pe_var *v = pe_program_find_var(main, 0, name);
    if (!v) return pe_error(PE_ERR_NOT_FOUND, "minimize: lr_var '%s' is not a variable of block 0", name);
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->dims[i];
    if ((v->dtype != PE_DTYPE_FP32 && v->dtype != PE_DTYPE_FP64) || n != 1) {
        char db[96];
        return pe_error(PE_ERR_INVALID, "minimize: lr_var '%s' is %s %s; it must be float32/float64 with 1 element", name,
                        pe_dtype_name(v->dtype), pe_dims_str(v->ndim, v->dims, db, sizeof db));
    }
    return PE_OK;
}

/* The learning-rate var: the caller's (checked up front) or a new persistable one. */
static pe_status learning_rate_var(const mctx *m, char *lr) {
    const pe_optimizer *o = m->o;
    if (o->lr_var) {
        snprintf(lr, NAME_MAX_LEN, "%s", o->lr_var);
        return PE_OK;
    }
    PE_CHECK(unique_name(m, "learning_rate", lr));
    return add_state(m, lr, PE_DTYPE_FP32, 1, (const int64_t[]){1}, o->learning_rate);
}

/* lr_mult and the L2 / L1 coefficients of `param`: its own regularizer
 * (l2 >= 0 or l1 > 0) replaces the optimizer's, as Paddle's does. */
static void param_settings(const mctx *m, const pe_param_config *cfg, int n_cfg, const char *param, double *lr_mult,
                           double *l2, double *l1) {
    *lr_mult = 1.0;
    *l2 = m->o->weight_decay;
    *l1 = m->o->l1_decay;
    for (int i = 0; i < n_cfg; i++)
        if (!strcmp(cfg[i].name, param)) {
            *lr_mult = cfg[i].lr_mult;
            if (cfg[i].l2 >= 0 || cfg[i].l1 > 0) {
                *l2 = cfg[i].l2 > 0 ? cfg[i].l2 : 0.0;
                *l1 = cfg[i].l1 > 0 ? cfg[i].l1 : 0.0;
            }
        }
}

/* The lookup_table / lookup_table_v2 op (any block) whose table W is
 * `param` and that asks for a sparse (is_sparse) or distributed
 * (is_distributed) gradient, or NULL. */
static const pe_op *sparse_lookup(const pe_program *p, const char *param, bool *distributed) {
    const pe_op *found = NULL;
    *distributed = false;
    for (int b = 0; b < p->n_blocks; b++)
        for (int k = 0; k < p->blocks[b].n_ops; k++) {
            const pe_op *op = &p->blocks[b].ops[k];
            if (strcmp(op->type, "lookup_table") && strcmp(op->type, "lookup_table_v2")) continue;
            const char *w = pe_op_input1(op, "W");
            if (!w || strcmp(w, param)) continue;
            const pe_attr *sp = pe_op_attr(op, "is_sparse"), *di = pe_op_attr(op, "is_distributed");
            if (di && di->i) {
                *distributed = true;
                return op;
            }
            if (sp && sp->i && !found) found = op;
        }
    return found;
}

/* A sparse table (is_sparse: Paddle's SelectedRows gradient, the looked-up
 * rows only) is trained here with the dense gradient of the whole table,
 * zero in the rows no id looked up. That is Paddle's update when the param
 * has a regularizer (L2Decay / L1Decay: Paddle sums the SelectedRows
 * gradient with the decay of the whole table into a dense gradient), and
 * without one for sgd and adagrad (their sparse kernels change only the
 * looked-up rows; a zero gradient leaves a row unchanged), momentum, adam
 * (lazy_mode off: Python refuses lazy_mode), rmsprop, adamw and lamb (their
 * sparse kernels update every row, absent rows with a zero gradient).
 * Refused where the dense update is not Paddle's: is_distributed tables
 * (parameter-server tables), adamax without a regularizer (Paddle's adamax
 * has no sparse kernel; the dense one moves rows no id looked up), adagrad
 * with epsilon = 0 and initial_accumulator_value = 0 without a regularizer
 * (never looked-up rows become 0 / 0 = NaN; Paddle's sparse kernel leaves
 * them), and clipping by value to a range without 0 (Paddle clips the
 * looked-up rows only; the dense zeros would be clipped to it). */
static pe_status check_sparse_table(const mctx *m, const char *param, double l2, double l1) {
    bool distributed;
    const pe_op *op = sparse_lookup(m->main, param, &distributed);
    if (!op) return PE_OK;
    const pe_optimizer *o = m->o;
    if (distributed)
        return pe_error(PE_ERR_UNSUPPORTED, "minimize: parameter '%s' is the table of a %s op with is_distributed=true "
                        "(Paddle's table split over parameter servers); PE has no distributed tables: use "
                        "is_distributed=False", param, op->type);
    if (o->clip_by_value && (o->clip_min > 0 || o->clip_max < 0))
        return pe_error(PE_ERR_UNSUPPORTED, "minimize: parameter '%s' is a sparse table (%s is_sparse=true) and the "
                        "gradients are clipped by value to [%g, %g]: Paddle clips the looked-up rows only, PE's dense "
                        "gradient would clip the zero rows too; use a range holding 0 or is_sparse=False", param,
                        op->type, o->clip_min, o->clip_max);
    if (l2 > 0 || l1 > 0) return PE_OK; /* Paddle's gradient is dense too */
    if (o->kind == PE_OPT_ADAMAX)
        return pe_error(PE_ERR_UNSUPPORTED, "minimize: parameter '%s' is a sparse table (%s is_sparse=true) updated by "
                        "adamax without a regularizer: Paddle's adamax has no sparse gradient kernel, and the dense "
                        "update moves rows no id looked up; use is_sparse=False, or a regularizer (L2Decay / L1Decay, "
                        "which makes Paddle's gradient dense)", param, op->type);
    if (o->kind == PE_OPT_ADAGRAD && o->epsilon == 0 && o->initial_accumulator_value == 0)
        return pe_error(PE_ERR_UNSUPPORTED, "minimize: parameter '%s' is a sparse table (%s is_sparse=true) updated by "
                        "adagrad with epsilon = 0 and initial_accumulator_value = 0 and no regularizer: Paddle's "
                        "sparse update leaves the rows no id looked up, the dense one makes them 0 / 0 = NaN; use "
                        "epsilon > 0", param, op->type);
    return PE_OK;
}

/* The optimizer op of one parameter, with its accumulators. */
static pe_status add_update(const mctx *m, const pe_var *pv, const char *grad, const char *final_grad, const char *lr) {
    const pe_optimizer *o = m->o;
    char param[NAME_MAX_LEN], base[NAME_MAX_LEN + 32];
    char acc[4][NAME_MAX_LEN];
    snprintf(param, sizeof param, "%s", pv->name); /* pv moves when vars are added */
    pe_dtype dt = pv->dtype;
    int ndim = pv->ndim;
    int64_t dims[8];
    memcpy(dims, pv->dims, sizeof dims);
    const int64_t one[1] = {1};
    pe_op *op = NULL;
    switch (o->kind) {
    case PE_OPT_SGD:
        PE_CHECK(add_op(m, "sgd", param, grad, &op));
        break;
    case PE_OPT_MOMENTUM:
        snprintf(base, sizeof base, "%s_velocity", param);
        PE_CHECK(unique_name(m, base, acc[0]));
        PE_CHECK(add_state(m, acc[0], dt, ndim, dims, 0.0));
        PE_CHECK(add_op(m, "momentum", param, grad, &op));
        PE_CHECK(pe_op_add_input(op, "Velocity", acc[0]));
        PE_CHECK(pe_op_add_output(op, "VelocityOut", acc[0]));
        PE_CHECK(pe_op_set_float(op, "mu", o->momentum));
        PE_CHECK(pe_op_set_bool(op, "use_nesterov", o->use_nesterov));
        break;
    case PE_OPT_ADAGRAD:
        snprintf(base, sizeof base, "%s_moment", param);
        PE_CHECK(unique_name(m, base, acc[0]));
        PE_CHECK(add_state(m, acc[0], dt, ndim, dims, o->initial_accumulator_value));
        PE_CHECK(add_op(m, "adagrad", param, grad, &op));
        PE_CHECK(pe_op_add_input(op, "Moment", acc[0]));
        PE_CHECK(pe_op_add_output(op, "MomentOut", acc[0]));
        PE_CHECK(pe_op_set_float(op, "epsilon", o->epsilon));
        break;
    case PE_OPT_RMSPROP: {
        static const char *const suffix[3] = {"_momentum", "_mean_square", "_mean_grad"};
        static const char *const in_slot[3] = {"Moment", "MeanSquare", "MeanGrad"};
        static const char *const out_slot[3] = {"MomentOut", "MeanSquareOut", "MeanGradOut"};
        for (int i = 0; i < 3; i++) {
            snprintf(base, sizeof base, "%s%s", param, suffix[i]);
            PE_CHECK(unique_name(m, base, acc[i]));
            PE_CHECK(add_state(m, acc[i], dt, ndim, dims, 0.0));
        }
        PE_CHECK(add_op(m, "rmsprop", param, grad, &op));
        for (int i = 0; i < 3; i++) {
            PE_CHECK(pe_op_add_input(op, in_slot[i], acc[i]));
            PE_CHECK(pe_op_add_output(op, out_slot[i], acc[i]));
        }
        PE_CHECK(pe_op_set_float(op, "epsilon", o->epsilon));
        PE_CHECK(pe_op_set_float(op, "decay", o->rho));
        PE_CHECK(pe_op_set_float(op, "momentum", o->momentum));
        PE_CHECK(pe_op_set_bool(op, "centered", o->centered));
        break;
    }
    case PE_OPT_ADAMAX: {
        static const char *const suffix[3] = {"_moment", "_inf_norm", "_beta1_pow_acc"};
        static const char *const in_slot[3] = {"Moment", "InfNorm", "Beta1Pow"};
        static const char *const out_slot[3] = {"MomentOut", "InfNormOut", "Beta1PowOut"};
        for (int i = 0; i < 3; i++) {
            snprintf(base, sizeof base, "%s%s", param, suffix[i]);
            PE_CHECK(unique_name(m, base, acc[i]));
            if (i < 2) PE_CHECK(add_state(m, acc[i], dt, ndim, dims, 0.0));
            else PE_CHECK(add_state(m, acc[i], dt, 1, one, o->beta1));
        }
        PE_CHECK(add_op(m, "adamax", param, grad, &op));
        for (int i = 0; i < 3; i++) {
            PE_CHECK(pe_op_add_input(op, in_slot[i], acc[i]));
            PE_CHECK(pe_op_add_output(op, out_slot[i], acc[i]));
        }
        PE_CHECK(pe_op_set_float(op, "beta1", o->beta1));
        PE_CHECK(pe_op_set_float(op, "beta2", o->beta2));
        PE_CHECK(pe_op_set_float(op, "epsilon", o->epsilon));
        break;
    }
    default: { /* ADAM, ADAMW, LAMB: adam's slots */
        static const char *const suffix[4] = {"_moment1", "_moment2", "_beta1_pow_acc", "_beta2_pow_acc"};
        static const char *const in_slot[4] = {"Moment1", "Moment2", "Beta1Pow", "Beta2Pow"};
        static const char *const out_slot[4] = {"Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"};
        for (int i = 0; i < 4; i++) {
            snprintf(base, sizeof base, "%s%s", param, suffix[i]);
            PE_CHECK(unique_name(m, base, acc[i]));
            if (i < 2) PE_CHECK(add_state(m, acc[i], dt, ndim, dims, 0.0));
            else PE_CHECK(add_state(m, acc[i], dt, 1, one, i == 2 ? o->beta1 : o->beta2));
        }
        bool decay = o->kind != PE_OPT_ADAM;
        for (int i = 0; decay && i < o->n_no_decay; i++)
            if (o->no_decay[i] && !strcmp(o->no_decay[i], param)) decay = false;
        PE_CHECK(add_op(m, o->kind == PE_OPT_ADAM ? "adam" : o->kind == PE_OPT_ADAMW ? "adamw" : "lamb", param, grad, &op));
        if (o->kind == PE_OPT_ADAMW) {
            PE_CHECK(pe_op_set_float(op, "coeff", o->coeff));
            PE_CHECK(pe_op_set_float(op, "lr_ratio", o->lr_ratio));
            PE_CHECK(pe_op_set_bool(op, "with_decay", decay));
        } else if (o->kind == PE_OPT_LAMB) {
            PE_CHECK(pe_op_set_float(op, "weight_decay", decay ? o->coeff : 0.0));
        }
        for (int i = 0; i < 4; i++) {
            PE_CHECK(pe_op_add_input(op, in_slot[i], acc[i]));
            PE_CHECK(pe_op_add_output(op, out_slot[i], acc[i]));
        }
        PE_CHECK(pe_op_set_float(op, "beta1", o->beta1));
        PE_CHECK(pe_op_set_float(op, "beta2", o->beta2));
        PE_CHECK(pe_op_set_float(op, "epsilon", o->epsilon));
    }
    }
    PE_CHECK(pe_op_add_input(op, "Param", param));
    PE_CHECK(pe_op_add_input(op, "Grad", final_grad));
    PE_CHECK(pe_op_add_input(op, "LearningRate", lr));
    return pe_op_add_output(op, "ParamOut", param);
}

/* Everything after append_backward, on the working copies. */
static pe_status build(const mctx *m, const pe_param_grad *pg, int n, const pe_param_config *cfg, int n_cfg) {
    const pe_optimizer *o = m->o;
    char lr[NAME_MAX_LEN];
    /* params first: accumulators need fully known float dims */
    for (int i = 0; i < n; i++) {
        const pe_var *pv = pe_block_find_var(mblk(m), pg[i].param);
        if (!pv) return pe_error(PE_ERR_NOT_FOUND, "minimize: parameter '%s' is not a variable of block 0", pg[i].param);
        if (pv->dtype != PE_DTYPE_FP32 && pv->dtype != PE_DTYPE_FP64)
            return pe_error(PE_ERR_INVALID, "minimize: parameter '%s' has dtype %s; optimizers update float32/float64 params",
                            pg[i].param, pe_dtype_name(pv->dtype));
        for (int d = 0; d < pv->ndim; d++)
            if (pv->dims[d] < 0) {
                char db[96];
                return pe_error(PE_ERR_INVALID, "minimize: parameter '%s' has dims %s; parameters need fully known dims",
                                pg[i].param, pe_dims_str(pv->ndim, pv->dims, db, sizeof db));
            }
    }
    PE_CHECK(learning_rate_var(m, lr));
    pe_dtype lr_dt = pe_program_find_var(m->main, 0, lr)->dtype;

    if (o->clip_global_norm > 0) {
        pe_op *op = NULL;
        PE_CHECK(add_op(m, "clip_by_global_norm", NULL, NULL, &op));
        for (int i = 0; i < n; i++) {
            PE_CHECK(pe_op_add_input(op, "X", pg[i].grad));
            PE_CHECK(pe_op_add_output(op, "Out", pg[i].grad));
        }
        PE_CHECK(pe_op_set_float(op, "max_global_norm", o->clip_global_norm));
    }

    for (int i = 0; i < n; i++) {
        const char *param = pg[i].param, *grad = pg[i].grad;
        const pe_var *pv = pe_block_find_var(mblk(m), param);
        double lr_mult, l2, l1;
        param_settings(m, cfg, n_cfg, param, &lr_mult, &l2, &l1);
        PE_CHECK(check_sparse_table(m, param, l2, l1));
        char final_grad[NAME_MAX_LEN], plr[NAME_MAX_LEN], base[NAME_MAX_LEN + 32];
        snprintf(final_grad, sizeof final_grad, "%s", grad);
        snprintf(plr, sizeof plr, "%s", lr);
        pe_op *op = NULL;
        const pe_dtype dt = pv->dtype;
        const int ndim = pv->ndim;
        int64_t dims[8];
        memcpy(dims, pv->dims, sizeof dims);
        if (o->clip_norm > 0 || o->clip_by_value) {
            /* this gradient alone: by its norm (the global-norm op over one var) or by value */
            char clipped[NAME_MAX_LEN];
            snprintf(base, sizeof base, "%s@CLIP", grad);
            PE_CHECK(unique_name(m, base, clipped));
            PE_CHECK(declare(mblk(m), clipped, dt, ndim, dims, false));
            PE_CHECK(add_op(m, o->clip_by_value ? "clip" : "clip_by_global_norm", param, grad, &op));
            PE_CHECK(pe_op_add_input(op, "X", grad));
            PE_CHECK(pe_op_add_output(op, "Out", clipped));
            if (o->clip_by_value) {
                PE_CHECK(pe_op_set_float(op, "min", o->clip_min));
                PE_CHECK(pe_op_set_float(op, "max", o->clip_max));
            } else {
                PE_CHECK(pe_op_set_float(op, "max_global_norm", o->clip_norm));
            }
            snprintf(final_grad, sizeof final_grad, "%s", clipped);
        }
        if (l2 > 0 || l1 > 0) {
            char l2_term[NAME_MAX_LEN], l1_sign[NAME_MAX_LEN], l1_term[NAME_MAX_LEN], decayed[NAME_MAX_LEN];
            if (l2 > 0) {
                snprintf(base, sizeof base, "%s_l2_decay", param);
                PE_CHECK(unique_name(m, base, l2_term));
                PE_CHECK(declare(mblk(m), l2_term, dt, ndim, dims, false));
                PE_CHECK(add_op(m, "scale", param, grad, &op));
                PE_CHECK(pe_op_add_input(op, "X", param));
                PE_CHECK(pe_op_add_output(op, "Out", l2_term));
                PE_CHECK(pe_op_set_float(op, "scale", l2));
            }
            if (l1 > 0) {
                snprintf(base, sizeof base, "%s_l1_sign", param);
                PE_CHECK(unique_name(m, base, l1_sign));
                PE_CHECK(declare(mblk(m), l1_sign, dt, ndim, dims, false));
                snprintf(base, sizeof base, "%s_l1_decay", param);
                PE_CHECK(unique_name(m, base, l1_term));
                PE_CHECK(declare(mblk(m), l1_term, dt, ndim, dims, false));
                PE_CHECK(add_op(m, "sign", param, grad, &op));
                PE_CHECK(pe_op_add_input(op, "X", param));
                PE_CHECK(pe_op_add_output(op, "Out", l1_sign));
                PE_CHECK(add_op(m, "scale", param, grad, &op));
                PE_CHECK(pe_op_add_input(op, "X", l1_sign));
                PE_CHECK(pe_op_add_output(op, "Out", l1_term));
                PE_CHECK(pe_op_set_float(op, "scale", l1));
            }
            snprintf(base, sizeof base, "%s@DECAYED", grad);
            PE_CHECK(unique_name(m, base, decayed));
            PE_CHECK(declare(mblk(m), decayed, dt, ndim, dims, false));
            PE_CHECK(add_op(m, "sum", param, grad, &op));
            PE_CHECK(pe_op_add_input(op, "X", final_grad));
            if (l2 > 0) PE_CHECK(pe_op_add_input(op, "X", l2_term));
            if (l1 > 0) PE_CHECK(pe_op_add_input(op, "X", l1_term));
            PE_CHECK(pe_op_add_output(op, "Out", decayed));
            snprintf(final_grad, sizeof final_grad, "%s", decayed);
        }
        pv = pe_block_find_var(mblk(m), param);
        if (lr_mult != 1.0) {
            snprintf(base, sizeof base, "%s_lr", param);
            PE_CHECK(unique_name(m, base, plr));
            PE_CHECK(declare(mblk(m), plr, lr_dt, 1, (const int64_t[]){1}, false));
            PE_CHECK(add_op(m, "scale", param, grad, &op));
            PE_CHECK(pe_op_add_input(op, "X", lr));
            PE_CHECK(pe_op_add_output(op, "Out", plr));
            PE_CHECK(pe_op_set_float(op, "scale", lr_mult));
            pv = pe_block_find_var(mblk(m), param);
        }
        PE_CHECK(add_update(m, pv, grad, final_grad, plr));
    }
    return PE_OK;
}

static void swap_programs(pe_program *a, pe_program *b) {
    pe_program t = *a;
    *a = *b;
    *b = t;
}

pe_status pe_optimizer_minimize(const pe_optimizer *o, pe_program *main, pe_program *startup, const char *loss,
                                const char *const *params, int n_params, const char *const *no_grad, int n_no_grad,
                                const pe_param_config *cfg, int n_cfg, pe_param_grad **out, int *n_out) {
    if (out) *out = NULL;
    if (n_out) *n_out = 0;
    if (!o || !main || !startup || !loss)
        return pe_error(PE_ERR_INVALID, "minimize: NULL %s",
                        !o ? "optimizer" : !main ? "main program" : !startup ? "startup program" : "loss");
    PE_CHECK(check_optimizer(o));
    PE_CHECK(check_configs(main, cfg, n_cfg));
    if (o->lr_var) PE_CHECK(check_lr_var(main, o->lr_var));
    pe_program *wm = pe_program_clone(main), *ws = pe_program_clone(startup);
    if (!wm || !ws) {
        pe_program_free(wm);
        pe_program_free(ws);
        return pe_error(PE_ERR_NOMEM, "minimize: out of memory copying the programs");
    }
    mctx m = {.main = wm, .startup = ws, .o = o};
    pe_param_grad *pg = NULL;
    int n = 0;
    pe_status st = pe_append_backward(wm, loss, params, n_params, no_grad, n_no_grad, &pg, &n);
    if (st == PE_OK && n == 0)
        st = pe_error(PE_ERR_INVALID, "minimize: loss '%s' depends on no trainable parameter (none is_parameter without "
                      "stop_gradient, or all in no_grad)", loss);
    if (st == PE_OK) st = build(&m, pg, n, cfg, n_cfg);
    if (st == PE_OK) {
        swap_programs(main, wm);
        swap_programs(startup, ws);
    }
    pe_program_free(wm);
    pe_program_free(ws);
    if (st != PE_OK || !out) {
        pe_param_grads_free(pg, n);
        return st;
    }
    *out = pg;
    *n_out = n;
    return PE_OK;
}
