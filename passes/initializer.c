/* passes/initializer.c — pe_startup_init_var: the op that initializes one
 * variable, appended to a startup program (Paddle's Initializer classes).
 *
 * How: the var is declared in block 0 of the startup program (persistable,
 * with the dtype, dims and flags of the given var) and one op writing it is
 * appended: fill_constant (CONSTANT), uniform_random (UNIFORM,
 * XAVIER_UNIFORM, KAIMING_UNIFORM), gaussian_random (NORMAL, XAVIER_NORMAL,
 * KAIMING_NORMAL), truncated_gaussian_random (TRUNCATED_NORMAL) or
 * assign_value (ASSIGN). Xavier/Kaiming are not ops of their own: their
 * bound or std comes from the fans, computed here as Paddle's _compute_fans
 * (scalar: 1, 1; 1-D [n]: n, n; 2-D [in, out]: in, out; conv [M, C, k...]:
 * C * prod(k), M * prod(k)) unless the initializer gives them:
 *   XAVIER_UNIFORM   U(-a, a), a = sqrt(6 / (fan_in + fan_out))
 *   XAVIER_NORMAL    N(0, s),  s = sqrt(2 / (fan_in + fan_out))
 *   KAIMING_UNIFORM  U(-a, a), a = sqrt(6 / fan_in)
 *   KAIMING_NORMAL   N(0, s),  s = sqrt(2 / fan_in)
 * The initializer's seed becomes the op's seed attr (0 = derived by the
 * random ops from the program seed and the output var name).
 * Everything is validated here, so a bad initializer fails when the startup
 * program is built, naming the var, not when it runs.
 */
#include "pe/optimizer.h"
#include "pe/tensor.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_name(pe_init_kind k) {
    static const char *const names[PE_INIT_KIND_COUNT] = {
        "CONSTANT", "UNIFORM", "NORMAL", "TRUNCATED_NORMAL", "XAVIER_UNIFORM",
        "XAVIER_NORMAL", "KAIMING_UNIFORM", "KAIMING_NORMAL", "ASSIGN"};
    return names[k];
}

/* Paddle's _compute_fans. */
static void compute_fans(const pe_var *v, double *fan_in, double *fan_out) {
    if (v->ndim == 0) {
        *fan_in = *fan_out = 1;
    } else if (v->ndim == 1) {
        *fan_in = *fan_out = (double)v->dims[0];
    } else if (v->ndim == 2) {
        *fan_in = (double)v->dims[0];
        *fan_out = (double)v->dims[1];
    } else {
        double rf = 1;
        for (int i = 2; i < v->ndim; i++) rf *= (double)v->dims[i];
        *fan_in = (double)v->dims[1] * rf;
        *fan_out = (double)v->dims[0] * rf;
    }
}

/* The startup copy of v: declared persistable with v's dtype, dims and
 * flags, or an existing declaration that must agree. */
static pe_status declare(pe_program *startup, const pe_var *v) {
    pe_block *b = &startup->blocks[0];
    pe_var *s = pe_block_find_var(b, v->name);
    if (s) {
        bool same = s->dtype == v->dtype && s->ndim == v->ndim;
        for (int i = 0; same && i < v->ndim; i++) same = s->dims[i] == v->dims[i];
        if (!same) {
            char a[96], c[96];
            return pe_error(PE_ERR_INVALID,
                            "startup_init_var: '%s' is already declared in the startup program as %s %s, "
                            "but the var to initialize is %s %s",
                            v->name, pe_dtype_name(s->dtype), pe_dims_str(s->ndim, s->dims, a, sizeof a),
                            pe_dtype_name(v->dtype), pe_dims_str(v->ndim, v->dims, c, sizeof c));
        }
    } else {
        s = pe_block_add_var(b, v->name, v->dtype, v->ndim, v->dims);
        if (!s) return pe_error(PE_ERR_NOMEM, "startup_init_var: out of memory declaring '%s'", v->name);
        s->is_parameter = v->is_parameter;
        s->stop_gradient = v->stop_gradient;
    }
    s->persistable = true;
    return PE_OK;
}

/* ASSIGN: the values as assign_value attrs for v's dtype (exact, or an error). */
static pe_status set_assign_values(pe_op *op, const pe_var *v, const pe_initializer *init, int64_t numel) {
    if (!init->values || init->n_values != numel)
        return pe_error(PE_ERR_INVALID, "startup_init_var: ASSIGN for '%s' has %lld values; the var holds %lld",
                        v->name, init->values ? (long long)init->n_values : 0LL, (long long)numel);
    if (numel > INT32_MAX)
        return pe_error(PE_ERR_UNSUPPORTED, "startup_init_var: ASSIGN for '%s': %lld values is too many", v->name,
                        (long long)numel);
    int n = (int)numel;
    if (v->dtype == PE_DTYPE_FP32 || v->dtype == PE_DTYPE_FP64) return pe_op_set_floats(op, "fp32_values", init->values, n);
    if (v->dtype != PE_DTYPE_INT32 && v->dtype != PE_DTYPE_INT64 && v->dtype != PE_DTYPE_UINT8 && v->dtype != PE_DTYPE_BOOL)
        return pe_error(PE_ERR_UNSUPPORTED, "startup_init_var: ASSIGN for '%s': dtype %s is not supported", v->name,
                        pe_dtype_name(v->dtype));
    int64_t *iv = malloc(sizeof *iv * (size_t)(n ? n : 1));
    if (!iv) return pe_error(PE_ERR_NOMEM, "startup_init_var: out of memory");
    for (int i = 0; i < n; i++) {
        double x = init->values[i];
        /* exactly representable integers only: 2^63 bounds the int64 range */
        if (!(x == floor(x)) || !(fabs(x) < 9223372036854775808.0)) {
            free(iv);
            return pe_error(PE_ERR_INVALID, "startup_init_var: ASSIGN for '%s' (dtype %s): value %d = %g is not an integer",
                            v->name, pe_dtype_name(v->dtype), i, x);
        }
        bool fits = v->dtype == PE_DTYPE_INT64 ? true
                    : v->dtype == PE_DTYPE_INT32 ? x >= INT32_MIN && x <= INT32_MAX
                    : v->dtype == PE_DTYPE_UINT8 ? x >= 0 && x <= 255
                                                 : x == 0 || x == 1;
        if (!fits) {
            free(iv);
            return pe_error(PE_ERR_INVALID, "startup_init_var: ASSIGN for '%s': value %d = %g does not fit dtype %s",
                            v->name, i, x, pe_dtype_name(v->dtype));
        }
        iv[i] = (int64_t)x;
    }
    pe_status st = v->dtype == PE_DTYPE_INT64 ? pe_op_set_longs(op, "int64_values", iv, n) : pe_op_set_ints(op, "int32_values", iv, n);
    free(iv);
    return st;
}

pe_status pe_startup_init_var(pe_program *startup, const pe_var *var, const pe_initializer *init) {
    if (!startup || !var || !init)
        return pe_error(PE_ERR_INVALID, "startup_init_var: NULL %s", !startup ? "startup program" : !var ? "var" : "initializer");
    if ((int)init->kind < 0 || init->kind >= PE_INIT_KIND_COUNT)
        return pe_error(PE_ERR_INVALID, "startup_init_var: '%s': unknown initializer kind %d (expected 0..%d)", var->name,
                        (int)init->kind, PE_INIT_KIND_COUNT - 1);
    const char *kn = kind_name(init->kind);
    char db[96];
    for (int i = 0; i < var->ndim; i++)
        if (var->dims[i] < 0)
            return pe_error(PE_ERR_INVALID,
                            "startup_init_var: '%s' has dims %s; a var initialized by the startup program needs "
                            "fully known dims (dim %d is %lld)",
                            var->name, pe_dims_str(var->ndim, var->dims, db, sizeof db), i, (long long)var->dims[i]);
    int64_t numel = pe_dims_prod(var->dims, 0, var->ndim);
    bool random = init->kind != PE_INIT_CONSTANT && init->kind != PE_INIT_ASSIGN;
    if (random && var->dtype != PE_DTYPE_FP32 && var->dtype != PE_DTYPE_FP64)
        return pe_error(PE_ERR_INVALID, "startup_init_var: '%s' has dtype %s; %s draws float32/float64 values", var->name,
                        pe_dtype_name(var->dtype), kn);

    /* distribution parameters */
    const char *type = NULL;
    double a = 0, b = 0; /* (min, max) or (mean, std) */
    switch (init->kind) {
    case PE_INIT_CONSTANT:
        type = "fill_constant";
        break;
    case PE_INIT_ASSIGN:
        type = "assign_value";
        break;
    case PE_INIT_UNIFORM:
        type = "uniform_random";
        a = init->low;
        b = init->high;
        if (!isfinite(a) || !isfinite(b) || !(a < b))
            return pe_error(PE_ERR_INVALID, "startup_init_var: UNIFORM for '%s': low = %g, high = %g; need finite low < high",
                            var->name, a, b);
        break;
    case PE_INIT_NORMAL:
    case PE_INIT_TRUNCATED_NORMAL:
        type = init->kind == PE_INIT_NORMAL ? "gaussian_random" : "truncated_gaussian_random";
        a = init->mean;
        b = init->std;
        if (!isfinite(a) || !isfinite(b) || b < 0)
            return pe_error(PE_ERR_INVALID, "startup_init_var: %s for '%s': mean = %g, std = %g; need finite values, std >= 0",
                            kn, var->name, a, b);
        break;
    default: { /* Xavier / Kaiming */
        double fi, fo;
        compute_fans(var, &fi, &fo);
        if (init->fan_in < 0 || init->fan_out < 0)
            return pe_error(PE_ERR_INVALID, "startup_init_var: %s for '%s': fan_in = %lld, fan_out = %lld; fans must be >= 0 "
                            "(0 = from the shape)", kn, var->name, (long long)init->fan_in, (long long)init->fan_out);
        if (init->fan_in > 0) fi = (double)init->fan_in;
        if (init->fan_out > 0) fo = (double)init->fan_out;
        bool xavier = init->kind == PE_INIT_XAVIER_UNIFORM || init->kind == PE_INIT_XAVIER_NORMAL;
        bool uniform = init->kind == PE_INIT_XAVIER_UNIFORM || init->kind == PE_INIT_KAIMING_UNIFORM;
        double fans = xavier ? fi + fo : fi;
        if (!(fans > 0))
            return pe_error(PE_ERR_INVALID, "startup_init_var: %s for '%s' (dims %s): fan_in%s is 0; give the fans explicitly "
                            "or a shape without zero dims", kn, var->name, pe_dims_str(var->ndim, var->dims, db, sizeof db),
                            xavier ? " + fan_out" : "");
        if (uniform) {
            type = "uniform_random";
            b = sqrt(6.0 / fans);
            a = -b;
        } else {
            type = "gaussian_random";
            a = 0;
            b = sqrt(2.0 / fans);
        }
    }
    }

    /* op first (so a failure leaves the startup program unchanged), then the declaration */
    pe_block *blk = &startup->blocks[0];
    pe_op *op = pe_block_add_op(blk, type);
    if (!op) return pe_error(PE_ERR_NOMEM, "startup_init_var: out of memory");
    pe_status st = pe_op_add_output(op, "Out", var->name);
    if (st == PE_OK) st = pe_op_set_longs(op, "shape", var->dims, var->ndim);
    if (st == PE_OK) st = pe_op_set_int(op, "dtype", var->dtype);
    if (st == PE_OK) {
        switch (init->kind) {
        case PE_INIT_CONSTANT: st = pe_op_set_float(op, "value", init->value); break;
        case PE_INIT_ASSIGN: st = set_assign_values(op, var, init, numel); break;
        default:
            st = pe_op_set_int(op, "seed", init->seed);
            if (st == PE_OK) st = pe_op_set_float(op, !strcmp(type, "uniform_random") ? "min" : "mean", a);
            if (st == PE_OK) st = pe_op_set_float(op, !strcmp(type, "uniform_random") ? "max" : "std", b);
        }
    }
    if (st == PE_OK) st = declare(startup, var);
    if (st != PE_OK) {
        pe_block_remove_op(blk, blk->n_ops - 1);
        return st;
    }
    return PE_OK;
}
