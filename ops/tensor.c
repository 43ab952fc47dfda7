/* ops/tensor.c — shape inference of the tensor family (and the grad maker
 * of the reshaping ops; the others' are wired in ops.def):
 * reshape2, transpose2, concat, split, slice, flatten_contiguous_range,
 * flatten2, squeeze2, unsqueeze2 (and their grads), fill_constant,
 * assign_value, stack / unstack (each the other's gradient).
 *
 * Paddle's semantics: reshape2's shape attr copies an input dim where it
 * holds 0 and infers one -1; reshape2/transpose2 also produce XShape,
 * [0, x.dims...] with no data, which Paddle's grad ops read the input shape
 * from; concat takes a negative axis; fill_constant's str_value (when not
 * empty) overrides value so that inf/nan and exact 64-bit integers survive
 * the float attr. Every attr is validated here, so kernels trust the metas.
 *
 * The reshaping ops (reshape2, flatten*, squeeze2, unsqueeze2) share one
 * grad op form, Paddle's: <op>_grad(XShape, Out@GRAD) -> X@GRAD, a copy
 * whose shape comes from XShape (from X itself when the forward op has no
 * XShape output). split's gradient is a concat and concat's a split.
 */
#include "ops/tensor.h"
#include "ops/grad.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* XShape: [0, x.dims...] of x's dtype; numel 0, so no data. */
static pe_status set_xshape(pe_op_ctx *ctx, const pe_tensor *x) {
    pe_tensor *xs = pe_ctx_out(ctx, "XShape");
    if (!xs) return PE_OK;
    if (x->ndim + 1 > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "XShape of X '%s' would have rank %d > %d",
                            pe_ctx_in_name(ctx, "X", 0), x->ndim + 1, PE_MAX_DIMS);
    int64_t d[PE_MAX_DIMS];
    d[0] = 0;
    for (int i = 0; i < x->ndim; i++) d[i + 1] = x->dims[i];
    return pe_infer_set_meta(ctx, xs, x->dtype, x->ndim + 1, d);
}

/* x: [d...] -> out: shape (0 = copy x's dim there, one -1 inferred) */
pe_status pe_infer_reshape2(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!x || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Out must be given");
    int n;
    const int64_t *shape = pe_ctx_ints(ctx, "shape", &n);
    char xs[128];
    pe_dims_str(x->ndim, x->dims, xs, sizeof xs);
    const char *xname = pe_ctx_in_name(ctx, "X", 0);
    if (n > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "shape has %d entries; at most %d allowed", n, PE_MAX_DIMS);
    int64_t d[PE_MAX_DIMS];
    int infer_at = -1;
    int64_t known = 1;
    for (int i = 0; i < n; i++) {
        int64_t s = shape[i];
        if (s == 0) {
            if (i >= x->ndim)
                return pe_ctx_error(ctx, PE_ERR_INVALID,
                                    "shape[%d] = 0 copies X's dim %d, but X '%s' %s has rank %d", i, i,
                                    xname, xs, x->ndim);
            s = x->dims[i];
        } else if (s == -1) {
            if (infer_at >= 0)
                return pe_ctx_error(ctx, PE_ERR_INVALID, "shape has more than one -1 (at %d and %d)", infer_at, i);
            infer_at = i;
            continue;
        } else if (s < 0) {
            return pe_ctx_error(ctx, PE_ERR_INVALID, "shape[%d] = %lld; dims must be > 0, 0 (copy) or -1 (infer)",
                                i, (long long)s);
        }
        d[i] = s;
        if (__builtin_mul_overflow(known, s, &known))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "shape's dims up to shape[%d] = %lld multiply past 2^63 "
                                "elements (X '%s' %s)", i, (long long)s, xname, xs);
    }
    int64_t numel = pe_tensor_numel(x);
    if (infer_at >= 0) {
        if (known == 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "cannot infer the -1 in shape: the other dims multiply to 0 (X '%s' %s)", xname, xs);
        if (numel % known != 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "X '%s' %s has %lld elements, not a multiple of %lld (the product of shape's "
                                "other dims), so the -1 at %d cannot be inferred",
                                xname, xs, (long long)numel, (long long)known, infer_at);
        d[infer_at] = numel / known;
        known *= d[infer_at];
    }
    if (known != numel) {
        char ss[160];
        size_t k = (size_t)snprintf(ss, sizeof ss, "[");
        for (int i = 0; i < n && k < sizeof ss; i++)
            k += (size_t)snprintf(ss + k, sizeof ss - k, i ? ", %lld" : "%lld", (long long)shape[i]);
        if (k < sizeof ss) snprintf(ss + k, sizeof ss - k, "]");
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "cannot reshape X '%s' %s (%lld elements) to shape %s (%lld elements)", xname, xs,
                            (long long)numel, ss, (long long)known);
    }
    PE_CHECK(set_xshape(ctx, x));
    return pe_infer_set_meta(ctx, out, x->dtype, n, d);
}

/* x: [d0, ..., d(r-1)] -> out: [d(axis[0]), ..., d(axis[r-1])] */
pe_status pe_infer_transpose2(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!x || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Out must be given");
    int n;
    const int64_t *axis = pe_ctx_ints(ctx, "axis", &n);
    char xs[128];
    pe_dims_str(x->ndim, x->dims, xs, sizeof xs);
    if (n != x->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "axis has %d entries but X '%s' %s has rank %d", n,
                            pe_ctx_in_name(ctx, "X", 0), xs, x->ndim);
    bool seen[PE_MAX_DIMS] = {false};
    int64_t d[PE_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int64_t a = axis[i] < 0 ? axis[i] + n : axis[i];
        if (a < 0 || a >= n)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "axis[%d] = %lld is out of range for rank %d", i,
                                (long long)axis[i], n);
        if (seen[a])
            return pe_ctx_error(ctx, PE_ERR_INVALID, "axis repeats dim %lld: not a permutation of 0..%d",
                                (long long)a, n - 1);
        seen[a] = true;
        d[i] = x->dims[a];
    }
    PE_CHECK(set_xshape(ctx, x));
    return pe_infer_set_meta(ctx, out, x->dtype, n, d);
}

/* xs: [..., a_i, ...] (equal except on axis) -> d: [..., sum a_i, ...] */
static pe_status concat_dims(pe_op_ctx *ctx, int64_t *d) {
    int nx = pe_ctx_n_in(ctx, "X");
    if (nx < 1) return pe_ctx_error(ctx, PE_ERR_INVALID, "needs at least one X");
    const pe_tensor *x0 = pe_ctx_in_at(ctx, "X", 0);
    for (int i = 0; i < nx; i++)
        if (!pe_ctx_in_at(ctx, "X", i))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "input X[%d] is empty (%s)", i, PE_EMPTY_VAR);
    int r = x0->ndim;
    int64_t axis = pe_ctx_int(ctx, "axis");
    if (r == 0 || axis < -r || axis >= r)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "axis %lld is out of range for inputs of rank %d",
                            (long long)axis, r);
    if (axis < 0) axis += r;
    memcpy(d, x0->dims, sizeof(int64_t) * PE_MAX_DIMS);
    d[axis] = 0;
    char s0[128], si[128];
    pe_dims_str(r, x0->dims, s0, sizeof s0);
    for (int i = 0; i < nx; i++) {
        const pe_tensor *xi = pe_ctx_in_at(ctx, "X", i);
        pe_dims_str(xi->ndim, xi->dims, si, sizeof si);
        if (xi->dtype != x0->dtype)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "X[%d] '%s' has dtype %s but X[0] '%s' has %s", i,
                                pe_ctx_in_name(ctx, "X", i), pe_dtype_name(xi->dtype),
                                pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x0->dtype));
        bool ok = xi->ndim == r;
        for (int a = 0; ok && a < r; a++) ok = a == axis || xi->dims[a] == x0->dims[a];
        if (!ok)
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "X[%d] '%s' %s does not match X[0] '%s' %s outside axis %lld", i,
                                pe_ctx_in_name(ctx, "X", i), si, pe_ctx_in_name(ctx, "X", 0), s0,
                                (long long)axis);
        d[axis] += xi->dims[axis];
    }
    return PE_OK;
}

/* xs: [..., a_i, ...] (equal except on axis) -> out: [..., sum a_i, ...] */
pe_status pe_infer_concat(pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!out) return pe_ctx_error(ctx, PE_ERR_INVALID, "Out must be given");
    int64_t d[PE_MAX_DIMS];
    PE_CHECK(concat_dims(ctx, d));
    const pe_tensor *x0 = pe_ctx_in_at(ctx, "X", 0);
    return pe_infer_set_meta(ctx, out, x0->dtype, x0->ndim, d);
}

/* Validates a shape:longs attr (dims >= 0, rank <= PE_MAX_DIMS). */
static pe_status shape_attr(const pe_op_ctx *ctx, int64_t *d, int *nd) {
    int n;
    const int64_t *shape = pe_ctx_ints(ctx, "shape", &n);
    if (n > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "shape has %d entries; at most %d allowed", n, PE_MAX_DIMS);
    for (int i = 0; i < n; i++) {
        if (shape[i] < 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "shape[%d] = %lld; dims must be >= 0", i, (long long)shape[i]);
        d[i] = shape[i];
    }
    *nd = n;
    return PE_OK;
}

/* A value representable in dtype dt (integers: finite, in range). */
static pe_status check_value_fits(const pe_op_ctx *ctx, pe_dtype dt, double v, const char *what) {
    double lo, hi;
    switch (dt) {
    case PE_DTYPE_INT32: lo = -2147483648.0; hi = 2147483647.0; break;
    case PE_DTYPE_INT64: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    case PE_DTYPE_UINT8: lo = 0; hi = 255; break;
    default: return PE_OK; /* float and bool (nonzero = true) take any value */
    }
    if (!(v >= lo && v <= hi) || (dt == PE_DTYPE_INT64 && v >= 9223372036854775808.0))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s %g does not fit dtype %s", what, v, pe_dtype_name(dt));
    return PE_OK;
}

static pe_status check_dtype_attr(const pe_op_ctx *ctx, pe_dtype *dt) {
    int64_t v = pe_ctx_int(ctx, "dtype");
    if (v < 0 || v > PE_DTYPE_BOOL)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "dtype = %lld; expected 0 float32, 1 float64, 2 int32, 3 int64, 4 uint8 or 5 bool",
                            (long long)v);
    *dt = (pe_dtype)v;
    return PE_OK;
}

/* Parses str_value: an integer literal exactly (for int dtypes), otherwise
 * strtod's syntax, which includes "inf", "-inf" and "nan". */
pe_status pe_fill_constant_value(const pe_op_ctx *ctx, pe_dtype dt, double *val, int64_t *ival, bool *is_int) {
    const char *s = pe_ctx_string(ctx, "str_value");
    *is_int = false;
    if (!*s) {
        *val = pe_ctx_float(ctx, "value");
    } else {
        char *end;
        if (dt == PE_DTYPE_BOOL && (!strcasecmp(s, "true") || !strcasecmp(s, "false"))) {
            *val = !strcasecmp(s, "true");
            return PE_OK;
        }
        if (dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64 || dt == PE_DTYPE_UINT8) {
            errno = 0;
            long long iv = strtoll(s, &end, 10);
            while (*end == ' ') end++;
            if (end != s && !*end && errno == 0) {
                *ival = iv;
                *val = (double)iv;
                *is_int = true;
                if ((dt == PE_DTYPE_INT32 && (iv < INT32_MIN || iv > INT32_MAX)) ||
                    (dt == PE_DTYPE_UINT8 && (iv < 0 || iv > 255)))
                    return pe_ctx_error(ctx, PE_ERR_INVALID, "str_value '%s' does not fit dtype %s", s,
                                        pe_dtype_name(dt));
                return PE_OK;
            }
        }
        *val = strtod(s, &end);
        while (*end == ' ') end++;
        if (end == s || *end)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "str_value '%s' is not a number", s);
    }
    return check_value_fits(ctx, dt, *val, "value");
}

/* () -> out: shape, filled with value (or str_value) */
pe_status pe_infer_fill_constant(pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!out) return pe_ctx_error(ctx, PE_ERR_INVALID, "Out must be given");
    pe_dtype dt = PE_DTYPE_FP32;
    PE_CHECK(check_dtype_attr(ctx, &dt));
    int64_t d[PE_MAX_DIMS];
    int nd = 0;
    PE_CHECK(shape_attr(ctx, d, &nd));
    double v;
    int64_t iv;
    bool is_int;
    PE_CHECK(pe_fill_constant_value(ctx, dt, &v, &iv, &is_int));
    return pe_infer_set_meta(ctx, out, dt, nd, d);
}

/* () -> out: shape, holding the literal values of the attr matching dtype */
pe_status pe_infer_assign_value(pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!out) return pe_ctx_error(ctx, PE_ERR_INVALID, "Out must be given");
    pe_dtype dt = PE_DTYPE_FP32;
    PE_CHECK(check_dtype_attr(ctx, &dt));
    int64_t d[PE_MAX_DIMS];
    int nd = 0;
    PE_CHECK(shape_attr(ctx, d, &nd));
    const char *attr = dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64 ? "fp32_values"
                       : dt == PE_DTYPE_INT64                     ? "int64_values"
                                                                  : "int32_values";
    int n;
    if (!strcmp(attr, "fp32_values")) {
        (void)pe_ctx_floats(ctx, attr, &n);
    } else {
        const int64_t *vals = pe_ctx_ints(ctx, attr, &n);
        for (int i = 0; i < n; i++) PE_CHECK(check_value_fits(ctx, dt, (double)vals[i], attr));
    }
    int64_t numel = pe_dims_prod(d, 0, nd);
    if (numel != n)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s has %d values but shape holds %lld elements (dtype %s)",
                            attr, n, (long long)numel, pe_dtype_name(dt));
    return pe_infer_set_meta(ctx, out, dt, nd, d);
}

/* ---- split ------------------------------------------------------------------ */

pe_status pe_split_plan_make(const pe_op_ctx *ctx, const char *slot, const pe_tensor *x, int n_parts,
                             pe_split_plan *sp) {
    memset(sp, 0, sizeof *sp);
    char xs[128];
    pe_dims_str(x->ndim, x->dims, xs, sizeof xs);
    const char *xname = pe_ctx_in_name(ctx, slot, 0);
    int64_t axis = pe_ctx_int(ctx, "axis"), num = pe_ctx_int(ctx, "num");
    int r = x->ndim, ns;
    const int64_t *sec = pe_ctx_ints(ctx, "sections", &ns);
    if (r == 0 || axis < -r || axis >= r)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "axis %lld is out of range for %s '%s' %s", (long long)axis, slot,
                            xname, xs);
    if (axis < 0) axis += r;
    sp->axis = (int)axis;
    int64_t dim = x->dims[axis];
    if (num > 0) {
        if (dim % num != 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "num = %lld does not divide dim %lld (axis %lld) of %s '%s' %s",
                                (long long)num, (long long)dim, (long long)axis, slot, xname, xs);
        sp->n = (int)num;
        sp->each = dim / num;
    } else if (num < 0 || ns == 0) {
        return pe_ctx_error(ctx, PE_ERR_INVALID, "num = %lld and sections is empty: give num > 0 or sections",
                            (long long)num);
    } else {
        int64_t known = 0;
        int infer_at = -1;
        for (int i = 0; i < ns; i++) {
            if (sec[i] == -1) {
                if (infer_at >= 0)
                    return pe_ctx_error(ctx, PE_ERR_INVALID, "sections has more than one -1 (at %d and %d)", infer_at, i);
                infer_at = i;
            } else if (sec[i] < 0) {
                return pe_ctx_error(ctx, PE_ERR_INVALID, "sections[%d] = %lld; sizes must be >= 0 or -1 (inferred)", i,
                                    (long long)sec[i]);
            } else {
                known += sec[i];
            }
        }
        if (infer_at >= 0 ? known > dim : known != dim)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "sections add up to %lld%s but dim %lld (axis %lld) of %s '%s' %s is %lld",
                                (long long)known, infer_at >= 0 ? " without the -1" : "", (long long)axis, (long long)axis,
                                slot, xname, xs, (long long)dim);
        sp->n = ns;
        sp->sections = sec;
        sp->inferred = dim - known;
    }
    if (n_parts != sp->n)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' %s splits into %d parts but the op has %d of them", slot,
                            xname, xs, sp->n, n_parts);
    return PE_OK;
}

/* Size of part k. A num split of an empty axis has parts of size 0, so the
 * kind of plan is told by `sections`, never by `each`. */
int64_t pe_split_size(const pe_split_plan *sp, int k) {
    if (!sp->sections) return sp->each;
    return sp->sections[k] == -1 ? sp->inferred : sp->sections[k];
}

/* x: [..., d, ...] -> out_k: [..., s_k, ...] along axis, sum s_k = d */
pe_status pe_infer_split(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    if (!x) return pe_ctx_error(ctx, PE_ERR_INVALID, "X must be given");
    int n = pe_ctx_n_out(ctx, "Out");
    pe_split_plan sp;
    PE_CHECK(pe_split_plan_make(ctx, "X", x, n, &sp));
    int64_t d[PE_MAX_DIMS];
    memcpy(d, x->dims, sizeof d);
    for (int k = 0; k < n; k++) {
        pe_tensor *o = pe_ctx_out_at(ctx, "Out", k);
        if (!o) continue;
        d[sp.axis] = pe_split_size(&sp, k);
        PE_CHECK(pe_infer_set_meta(ctx, o, x->dtype, x->ndim, d));
    }
    return PE_OK;
}

/* Out@GRAD_k: [..., s_k, ...] -> X@GRAD: [..., sum s_k, ...] (a concat) */
pe_status pe_infer_split_grad(pe_op_ctx *ctx) {
    int n = pe_ctx_n_in(ctx, "Out@GRAD");
    const pe_tensor *g0 = n > 0 ? pe_ctx_in_at(ctx, "Out@GRAD", 0) : NULL;
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    if (!g0 || !dx) return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD and X@GRAD must be given");
    int r = g0->ndim;
    int64_t axis = pe_ctx_int(ctx, "axis");
    if (r == 0 || axis < -r || axis >= r)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, r);
    if (axis < 0) axis += r;
    int64_t d[PE_MAX_DIMS];
    memcpy(d, g0->dims, sizeof d);
    d[axis] = 0;
    for (int k = 0; k < n; k++) {
        const pe_tensor *g = pe_ctx_in_at(ctx, "Out@GRAD", k);
        bool ok = g && g->ndim == r && g->dtype == g0->dtype;
        for (int a = 0; ok && a < r; a++) ok = a == axis || g->dims[a] == g0->dims[a];
        if (!ok)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD[%d] '%s' does not match Out@GRAD[0] '%s' outside axis %lld",
                                k, pe_ctx_in_name(ctx, "Out@GRAD", k), pe_ctx_in_name(ctx, "Out@GRAD", 0),
                                (long long)axis);
        d[axis] += g->dims[axis];
    }
    return pe_infer_set_meta(ctx, dx, g0->dtype, r, d);
}

/* ---- concat_grad -------------------------------------------------------------- */

/* X_i: [..., a_i, ...], Out@GRAD: [..., sum a_i, ...] -> X@GRAD_i like X_i (absent ones skipped) */
pe_status pe_infer_concat_grad(pe_op_ctx *ctx) {
    int64_t d[PE_MAX_DIMS];
    PE_CHECK(concat_dims(ctx, d));
    const pe_tensor *x0 = pe_ctx_in_at(ctx, "X", 0), *g = pe_ctx_in(ctx, "Out@GRAD");
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x0->dtype, x0->ndim, d));
    int n = pe_ctx_n_out(ctx, "X@GRAD");
    if (n > pe_ctx_n_in(ctx, "X"))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%d X@GRAD for %d X", n, pe_ctx_n_in(ctx, "X"));
    for (int i = 0; i < n; i++) {
        pe_tensor *dx = pe_ctx_out_at(ctx, "X@GRAD", i);
        const pe_tensor *x = pe_ctx_in_at(ctx, "X", i);
        if (dx) PE_CHECK(pe_infer_set_meta(ctx, dx, x->dtype, x->ndim, x->dims));
    }
    return PE_OK;
}

/* ---- stack / unstack (and unstack_grad / stack_grad) -------------------------- */

/* The new axis of the whole, of rank r: attr axis in [-r, r). */
static pe_status stack_axis(const pe_op_ctx *ctx, int r, const char *whole, int *axis) {
    int64_t a = pe_ctx_int(ctx, "axis");
    if (a < -r || a >= r)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr axis = %lld is out of range for %s of rank %d (expected %d..%d)",
                            (long long)a, whole, r, -r, r - 1);
    *axis = (int)(a < 0 ? a + r : a);
    return PE_OK;
}

/* parts_i: [d...] (all alike) -> whole: [d...] with n inserted at axis (stack, unstack_grad) */
pe_status pe_infer_stack(pe_op_ctx *ctx) {
    const char *whole, *parts;
    pe_stack_slots(ctx, &whole, &parts);
    const int n = pe_ctx_n_in(ctx, parts);
    if (n < 1) return pe_ctx_error(ctx, PE_ERR_INVALID, "needs at least one %s", parts);
    const pe_tensor *x0 = pe_ctx_in_at(ctx, parts, 0);
    char s0[128], si[128];
    for (int i = 0; i < n; i++) {
        const pe_tensor *xi = pe_ctx_in_at(ctx, parts, i);
        if (!xi) return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s[%d] is empty (%s)", parts, i, PE_EMPTY_VAR);
        if (xi->dtype != x0->dtype || xi->ndim != x0->ndim ||
            memcmp(xi->dims, x0->dims, sizeof(int64_t) * (size_t)x0->ndim) != 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "%s[%d] '%s' is %s %s but %s[0] '%s' is %s %s (all must match)",
                                parts, i, pe_ctx_in_name(ctx, parts, i), pe_dtype_name(xi->dtype),
                                pe_dims_str(xi->ndim, xi->dims, si, sizeof si), parts, pe_ctx_in_name(ctx, parts, 0),
                                pe_dtype_name(x0->dtype), pe_dims_str(x0->ndim, x0->dims, s0, sizeof s0));
    }
    const int r = x0->ndim + 1;
    if (r > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "%s would have rank %d > %d", whole, r, PE_MAX_DIMS);
    int axis = 0;
    PE_CHECK(stack_axis(ctx, r, whole, &axis));
    int64_t d[PE_MAX_DIMS];
    for (int k = 0, j = 0; k < r; k++) d[k] = k == axis ? n : x0->dims[j++];
    return pe_infer_set_out(ctx, whole, x0->dtype, r, d);
}

/* whole: [pre..., n, post...] -> parts_i: [pre..., post...], i < n (unstack: num = n;
 * stack_grad: absent parts skipped) */
pe_status pe_infer_unstack(pe_op_ctx *ctx) {
    const char *whole, *parts;
    pe_stack_slots(ctx, &whole, &parts);
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, whole, &x));
    int axis = 0;
    PE_CHECK(stack_axis(ctx, x->ndim, whole, &axis));
    const int n = pe_ctx_n_out(ctx, parts);
    char xs[128];
    if (n != x->dims[axis] || (ctx->info->id == PE_OP_unstack && pe_ctx_int(ctx, "num") != x->dims[axis]))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' %s has %lld along axis %d, but there are %d %s outputs%s",
                            whole, pe_ctx_in_name(ctx, whole, 0), pe_dims_str(x->ndim, x->dims, xs, sizeof xs),
                            (long long)x->dims[axis], axis, n, parts,
                            ctx->info->id == PE_OP_unstack ? " (and attr num must be that length too)" : "");
    int64_t d[PE_MAX_DIMS];
    for (int k = 0, j = 0; k < x->ndim; k++)
        if (k != axis) d[j++] = x->dims[k];
    for (int i = 0; i < n; i++) {
        pe_tensor *y = pe_ctx_out_at(ctx, parts, i);
        if (y) PE_CHECK(pe_infer_set_meta(ctx, y, x->dtype, x->ndim - 1, d));
    }
    return PE_OK;
}

/* ---- reshaping ops' gradients --------------------------------------------------- */

/* XShape: [0, d...] (or X: [d...]), Out@GRAD: any shape of prod(d) elements -> X@GRAD: [d...] */
pe_status pe_infer_xshape_grad(pe_op_ctx *ctx) {
    const pe_tensor *xs = pe_ctx_in(ctx, "XShape"), *x = pe_ctx_in(ctx, "X"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    if (!g || !dx) return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD and X@GRAD must be given");
    int64_t d[PE_MAX_DIMS];
    int nd = 0;
    if (xs) {
        if (xs->ndim < 1 || xs->dims[0] != 0)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "XShape '%s' is not an XShape ([0, dims of X...])",
                                pe_ctx_in_name(ctx, "XShape", 0));
        nd = xs->ndim - 1;
        memcpy(d, xs->dims + 1, sizeof(int64_t) * (size_t)nd);
    } else if (x) {
        nd = x->ndim;
        memcpy(d, x->dims, sizeof(int64_t) * (size_t)nd);
    } else {
        return pe_ctx_error(ctx, PE_ERR_INVALID, "needs XShape (or X) for the shape of X@GRAD");
    }
    if (pe_dims_prod(d, 0, nd) != pe_tensor_numel(g)) {
        char ds[128], gs[128];
        pe_dims_str(nd, d, ds, sizeof ds);
        pe_dims_str(g->ndim, g->dims, gs, sizeof gs);
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD '%s' %s does not have the %lld elements of X %s",
                            pe_ctx_in_name(ctx, "Out@GRAD", 0), gs, (long long)pe_dims_prod(d, 0, nd), ds);
    }
    return pe_infer_set_meta(ctx, dx, g->dtype, nd, d);
}

/* reshape2 / flatten_contiguous_range / flatten2 / squeeze2 / unsqueeze2
 * -> <op>_grad(XShape (or X), Out@GRAD) -> X@GRAD */
pe_status pe_grad_xshape_op(pe_grad_ctx *g) {
    char type[64];
    snprintf(type, sizeof type, "%s_grad", pe_grad_fwd(g)->type);
    PE_CHECK(pe_grad_new_op(g, type));
    const pe_slot *xs = pe_op_output(pe_grad_fwd(g), "XShape");
    if (xs && xs->n_args == 1 && strcmp(xs->args[0], PE_EMPTY_VAR) != 0)
        PE_CHECK(pe_grad_fwd_output(g, "XShape", "XShape"));
    else
        PE_CHECK(pe_grad_fwd_input(g, "X", "X"));
    PE_CHECK(pe_grad_out_grad(g, "Out", "Out@GRAD"));
    return pe_grad_in_grad(g, "X", "X@GRAD");
}

/* Out@GRAD: [d(axis[0]), ..., d(axis[r-1])] -> X@GRAD: [d0, ..., d(r-1)] */
pe_status pe_infer_transpose2_grad(pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    if (!g || !dx) return pe_ctx_error(ctx, PE_ERR_INVALID, "Out@GRAD and X@GRAD must be given");
    int n;
    const int64_t *axis = pe_ctx_ints(ctx, "axis", &n);
    if (n != g->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "axis has %d entries but Out@GRAD '%s' has rank %d", n,
                            pe_ctx_in_name(ctx, "Out@GRAD", 0), g->ndim);
    bool seen[PE_MAX_DIMS] = {false};
    int64_t d[PE_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int64_t a = axis[i] < 0 ? axis[i] + n : axis[i];
        if (a < 0 || a >= n || seen[a])
            return pe_ctx_error(ctx, PE_ERR_INVALID, "axis is not a permutation of 0..%d", n - 1);
        seen[a] = true;
        d[a] = g->dims[i];
    }
    const pe_tensor *xs = pe_ctx_in(ctx, "XShape");
    if (xs && (xs->ndim != n + 1 || memcmp(xs->dims + 1, d, sizeof(int64_t) * (size_t)n)))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "XShape '%s' does not match Out@GRAD '%s' and axis",
                            pe_ctx_in_name(ctx, "XShape", 0), pe_ctx_in_name(ctx, "Out@GRAD", 0));
    return pe_infer_set_meta(ctx, dx, g->dtype, n, d);
}

/* ---- flatten_contiguous_range, flatten2, squeeze2, unsqueeze2 ------------------- */

/* x: [d0, ..., d(r-1)] -> out: [d0.., prod(d[start..stop]), ..d(r-1)] */
pe_status pe_infer_flatten_contiguous_range(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!x || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Out must be given");
    int r = x->ndim;
    int64_t s = pe_ctx_int(ctx, "start_axis"), e = pe_ctx_int(ctx, "stop_axis"), d[PE_MAX_DIMS];
    int nd = 0;
    if (r == 0) { /* a scalar flattens to [1] */
        d[nd++] = 1;
    } else {
        int64_t s0 = s < 0 ? s + r : s, e0 = e < 0 ? e + r : e;
        if (s0 < 0 || s0 >= r || e0 < 0 || e0 >= r || s0 > e0) {
            char xs[128];
            pe_dims_str(r, x->dims, xs, sizeof xs);
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "start_axis %lld / stop_axis %lld do not name a range of X '%s' %s (rank %d)",
                                (long long)s, (long long)e, pe_ctx_in_name(ctx, "X", 0), xs, r);
        }
        for (int i = 0; i < s0; i++) d[nd++] = x->dims[i];
        d[nd++] = pe_dims_prod(x->dims, (int)s0, (int)e0 + 1);
        for (int i = (int)e0 + 1; i < r; i++) d[nd++] = x->dims[i];
    }
    PE_CHECK(set_xshape(ctx, x));
    return pe_infer_set_meta(ctx, out, x->dtype, nd, d);
}

/* x: [d0, ..., d(r-1)] -> out: [prod(d[:axis]), prod(d[axis:])] */
pe_status pe_infer_flatten2(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!x || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Out must be given");
    int64_t axis = pe_ctx_int(ctx, "axis");
    if (axis < 0 || axis > x->ndim)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "axis %lld is outside [0, %d] for X '%s' of rank %d", (long long)axis,
                            x->ndim, pe_ctx_in_name(ctx, "X", 0), x->ndim);
    int64_t d[2] = {pe_dims_prod(x->dims, 0, (int)axis), pe_dims_prod(x->dims, (int)axis, x->ndim)};
    PE_CHECK(set_xshape(ctx, x));
    return pe_infer_set_meta(ctx, out, x->dtype, 2, d);
}

/* x: [d...] -> out: d without the size-1 dims named in axes (all size-1 dims
 * when axes is empty; a named dim that is not 1 stays, as Paddle 2); a result
 * with no dims left is [1], as Paddle's squeeze2 */
pe_status pe_infer_squeeze2(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!x || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Out must be given");
    int n, r = x->ndim;
    const int64_t *axes = pe_ctx_ints(ctx, "axes", &n);
    bool drop[PE_MAX_DIMS] = {false};
    for (int i = 0; i < r; i++) drop[i] = n == 0 && x->dims[i] == 1;
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "axes[%d] = %lld is out of range for X '%s' of rank %d", i,
                                (long long)axes[i], pe_ctx_in_name(ctx, "X", 0), r);
        if (x->dims[a] == 1) drop[a] = true;
    }
    int64_t d[PE_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < r; i++)
        if (!drop[i]) d[nd++] = x->dims[i];
    if (nd == 0) d[nd++] = 1;
    PE_CHECK(set_xshape(ctx, x));
    return pe_infer_set_meta(ctx, out, x->dtype, nd, d);
}

/* x: [d...] -> out: d with a 1 inserted at each of axes, in order (an axis
 * counts in the rank reached so far; negative = from the end), as Paddle */
pe_status pe_infer_unsqueeze2(pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!x || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "X and Out must be given");
    int n, r = x->ndim;
    const int64_t *axes = pe_ctx_ints(ctx, "axes", &n);
    if (r + n > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' of rank %d with %d new axes exceeds rank %d",
                            pe_ctx_in_name(ctx, "X", 0), r, n, PE_MAX_DIMS);
    /* is1[i]: output axis i is a new axis (Paddle's marking algorithm) */
    bool is1[PE_MAX_DIMS + 1] = {false};
    int cur = r;
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + cur + 1 : axes[i];
        if (a < 0 || a > cur)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "axes[%d] = %lld is out of range for rank %d", i,
                                (long long)axes[i], cur);
        for (int j = cur; j >= a; j--)
            if (is1[j]) {
                is1[j + 1] = true;
                is1[j] = false;
            }
        is1[a] = true;
        cur++;
    }
    int64_t d[PE_MAX_DIMS];
    for (int i = 0, k = 0; i < r + n; i++) d[i] = is1[i] ? 1 : x->dims[k++];
    PE_CHECK(set_xshape(ctx, x));
    return pe_infer_set_meta(ctx, out, x->dtype, r + n, d);
}

/* ---- slice ---------------------------------------------------------------------- */

pe_status pe_slice_plan_make(const pe_op_ctx *ctx, const char *slot, const pe_tensor *in, pe_slice_plan *sp) {
    int na, ns, ne, nd;
    const int64_t *axes = pe_ctx_ints(ctx, "axes", &na), *starts = pe_ctx_ints(ctx, "starts", &ns);
    const int64_t *ends = pe_ctx_ints(ctx, "ends", &ne), *dec = pe_ctx_ints(ctx, "decrease_axis", &nd);
    int r = in->ndim;
    char is[128];
    pe_dims_str(r, in->dims, is, sizeof is);
    const char *iname = pe_ctx_in_name(ctx, slot, 0);
    if (ns != na || ne != na)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "axes, starts and ends must have the same length (%d, %d, %d)", na,
                            ns, ne);
    sp->r = r;
    for (int a = 0; a < r; a++) {
        sp->start[a] = 0;
        sp->dims[a] = in->dims[a];
    }
    bool seen[PE_MAX_DIMS] = {false};
    for (int i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r)
            return pe_ctx_error(ctx, PE_ERR_INVALID, "axes[%d] = %lld is out of range for %s '%s' %s", i,
                                (long long)axes[i], slot, iname, is);
        if (seen[a]) return pe_ctx_error(ctx, PE_ERR_INVALID, "axes names dim %lld twice", (long long)a);
        seen[a] = true;
        int64_t dim = in->dims[a], s = starts[i], e = ends[i];
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        s = s < 0 ? 0 : s > dim ? dim : s;
        e = e < 0 ? 0 : e > dim ? dim : e;
        sp->start[a] = s;
        sp->dims[a] = e > s ? e - s : 0;
    }
    bool drop[PE_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        int64_t a = dec[i] < 0 ? dec[i] + r : dec[i];
        if (a < 0 || a >= r || !seen[a] || sp->dims[a] != 1)
            return pe_ctx_error(ctx, PE_ERR_INVALID,
                                "decrease_axis[%d] = %lld must name a sliced axis of size 1 (%s '%s' %s)", i,
                                (long long)dec[i], slot, iname, is);
        drop[a] = true;
    }
    sp->out_ndim = 0;
    for (int a = 0; a < r; a++)
        if (!drop[a]) sp->out_dims[sp->out_ndim++] = sp->dims[a];
    if (sp->out_ndim == 0) sp->out_dims[sp->out_ndim++] = 1;
    return PE_OK;
}

/* input: [d...] -> out: the region [start_a, start_a + len_a) of each sliced
 * axis, decrease_axis dims removed */
pe_status pe_infer_slice(pe_op_ctx *ctx) {
    const pe_tensor *in = pe_ctx_in(ctx, "Input");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!in || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "Input and Out must be given");
    pe_slice_plan sp;
    PE_CHECK(pe_slice_plan_make(ctx, "Input", in, &sp));
    return pe_infer_set_meta(ctx, out, in->dtype, sp.out_ndim, sp.out_dims);
}

/* Input: [d...], Out@GRAD: like Out -> Input@GRAD: [d...] (zeros outside the region) */
pe_status pe_infer_slice_grad(pe_op_ctx *ctx) {
    const pe_tensor *in = pe_ctx_in(ctx, "Input"), *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Input@GRAD");
    if (!in || !dx) return pe_ctx_error(ctx, PE_ERR_INVALID, "Input and Input@GRAD must be given");
    pe_slice_plan sp;
    PE_CHECK(pe_slice_plan_make(ctx, "Input", in, &sp));
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, in->dtype, sp.out_ndim, sp.out_dims));
    return pe_infer_set_meta(ctx, dx, in->dtype, in->ndim, in->dims);
}

void pe_transpose_plan_make(int r, const int64_t *xd, const int64_t *axis, pe_transpose_plan *t) {
    int newidx[PE_MAX_DIMS], nk = 0;
    int64_t d2[PE_MAX_DIMS];
    for (int a = 0; a < r; a++) {
        newidx[a] = xd[a] == 1 ? -1 : nk;
        if (xd[a] != 1) d2[nk++] = xd[a];
    }
    int p2[PE_MAX_DIMS], r2 = 0;
    for (int j = 0; j < r; j++) {
        int a = (int)(axis[j] < 0 ? axis[j] + r : axis[j]);
        if (newidx[a] >= 0) p2[r2++] = newidx[a];
    }
    /* groups in output order: first input axis and merged size */
    int gfirst[PE_MAX_DIMS], ng = 0;
    int64_t gsize[PE_MAX_DIMS];
    for (int j = 0; j < r2; j++) {
        if (ng && p2[j] == p2[j - 1] + 1) {
            gsize[ng - 1] *= d2[p2[j]];
        } else {
            gfirst[ng] = p2[j];
            gsize[ng] = d2[p2[j]];
            ng++;
        }
    }
    /* input order of the groups = order of their first input axes */
    t->r = ng;
    for (int g = 0; g < ng; g++) {
        int rank = 0;
        for (int h = 0; h < ng; h++) rank += gfirst[h] < gfirst[g];
        t->perm[g] = rank;
        t->in_dims[rank] = gsize[g];
    }
}
