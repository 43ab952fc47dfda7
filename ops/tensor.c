/* ops/tensor.c — shape inference of the tensor family: reshape2,
 * transpose2, concat, fill_constant, assign_value.
 *
 * Paddle's semantics: reshape2's shape attr copies an input dim where it
 * holds 0 and infers one -1; reshape2/transpose2 also produce XShape,
 * [0, x.dims...] with no data, which Paddle's grad ops read the input shape
 * from; concat takes a negative axis; fill_constant's str_value (when not
 * empty) overrides value so that inf/nan and exact 64-bit integers survive
 * the float attr. Every attr is validated here, so kernels trust the metas.
 */
#include "ops/tensor.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pe_status set_meta(pe_op_ctx *ctx, pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims) {
    pe_status st = pe_tensor_set_meta(t, dt, ndim, dims);
    return st == PE_OK ? PE_OK : pe_ctx_error(ctx, st, "%s", pe_last_error());
}

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
    return set_meta(ctx, xs, x->dtype, x->ndim + 1, d);
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
        known *= s;
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
    return set_meta(ctx, out, x->dtype, n, d);
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
    return set_meta(ctx, out, x->dtype, n, d);
}

/* xs: [..., a_i, ...] (equal except on axis) -> out: [..., sum a_i, ...] */
pe_status pe_infer_concat(pe_op_ctx *ctx) {
    int nx = pe_ctx_n_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (nx < 1 || !out) return pe_ctx_error(ctx, PE_ERR_INVALID, "needs at least one X and an Out");
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
    int64_t d[PE_MAX_DIMS];
    memcpy(d, x0->dims, sizeof d);
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
    return set_meta(ctx, out, x0->dtype, r, d);
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
    int nd;
    PE_CHECK(shape_attr(ctx, d, &nd));
    double v;
    int64_t iv;
    bool is_int;
    PE_CHECK(pe_fill_constant_value(ctx, dt, &v, &iv, &is_int));
    return set_meta(ctx, out, dt, nd, d);
}

/* () -> out: shape, holding the literal values of the attr matching dtype */
pe_status pe_infer_assign_value(pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!out) return pe_ctx_error(ctx, PE_ERR_INVALID, "Out must be given");
    pe_dtype dt = PE_DTYPE_FP32;
    PE_CHECK(check_dtype_attr(ctx, &dt));
    int64_t d[PE_MAX_DIMS];
    int nd;
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
    return set_meta(ctx, out, dt, nd, d);
}
