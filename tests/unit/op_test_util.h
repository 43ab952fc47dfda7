/* tests/unit/op_test_util.h — helpers for kernel unit tests (header-only).
 *
 *     pe_program *p = pe_program_new();
 *     pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, (double[]){1,2,3,4,5,6});
 *     tu_declare(p, "x", x);
 *     pe_op *op = pe_block_add_op(&p->blocks[0], "relu");
 *     pe_op_add_input(op, "X", "x");
 *     pe_op_add_output(op, "Out", "y");
 *     pe_tensor *y = pe_tensor_new();
 *     assert_int_equal(tu_run(p, (pe_feed[]){{"x", x}}, 1, (const char*[]){"y"}, 1, &y), PE_OK);
 *     tu_assert_close(y, (double[]){0,2,0,4,0,6}, 6, 1e-6);
 */
#ifndef PE_TEST_OP_TEST_UTIL_H
#define PE_TEST_OP_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <cmocka.h>

#include "pe/pe.h"

/* New CPU tensor of dtype dt with values converted from doubles (NULL = zeros). */
static inline pe_tensor *tu_tensor(pe_dtype dt, int ndim, const int64_t *dims, const double *vals) {
    pe_tensor *t = pe_tensor_new();
    assert_non_null(t);
    assert_int_equal(pe_tensor_resize(t, dt, ndim, dims, pe_place_cpu(0)), PE_OK);
    int64_t n = pe_tensor_numel(t);
    void *d = pe_tensor_data(t);
    for (int64_t i = 0; i < n; i++) {
        double v = vals ? vals[i] : 0.0;
        switch (dt) {
        case PE_DTYPE_FP32: ((float *)d)[i] = (float)v; break;
        case PE_DTYPE_FP64: ((double *)d)[i] = v; break;
        case PE_DTYPE_INT32: ((int32_t *)d)[i] = (int32_t)v; break;
        case PE_DTYPE_INT64: ((int64_t *)d)[i] = (int64_t)v; break;
        case PE_DTYPE_UINT8: case PE_DTYPE_BOOL: ((uint8_t *)d)[i] = (uint8_t)v; break;
        default: fail_msg("tu_tensor: unsupported dtype");
        }
    }
    return t;
}

/* Element i of t as a double. */
static inline double tu_get(const pe_tensor *t, int64_t i) {
    const void *d = pe_tensor_data(t);
    switch (t->dtype) {
    case PE_DTYPE_FP32: return ((const float *)d)[i];
    case PE_DTYPE_FP64: return ((const double *)d)[i];
    case PE_DTYPE_INT32: return ((const int32_t *)d)[i];
    case PE_DTYPE_INT64: return (double)((const int64_t *)d)[i];
    case PE_DTYPE_UINT8: case PE_DTYPE_BOOL: return ((const uint8_t *)d)[i];
    default: fail_msg("tu_get: unsupported dtype"); return 0;
    }
}

/* Declares var `name` in block 0 with t's dtype and dims. */
static inline pe_var *tu_declare(pe_program *p, const char *name, const pe_tensor *t) {
    pe_var *v = pe_block_add_var(&p->blocks[0], name, t->dtype, t->ndim, t->dims);
    assert_non_null(v);
    return v;
}

/* Runs block 0 of p once on cpu:0 in a fresh scope; fetch_out[i] receive copies. */
static inline pe_status tu_run(const pe_program *p, const pe_feed *feeds, int n_feeds,
                               const char *const *fetch, int n_fetch, pe_tensor **fetch_out) {
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_non_null(scope);
    assert_non_null(ex);
    pe_status st = pe_executor_run(ex, p, 0, scope, feeds, n_feeds, fetch, n_fetch, fetch_out);
    if (st != PE_OK) print_message("tu_run: %s\n", pe_last_error());
    pe_executor_free(ex);
    pe_scope_free(scope);
    return st;
}

/* Asserts t has n elements each within tol (abs + rel) of want. */
static inline void tu_assert_close(const pe_tensor *t, const double *want, int64_t n, double tol) {
    assert_int_equal(pe_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        double g = tu_get(t, i);
        if (!(fabs(g - want[i]) <= tol * (1.0 + fabs(want[i]))))
            fail_msg("element %lld: got %.9g want %.9g", (long long)i, g, want[i]);
    }
}

static inline void tu_assert_dims(const pe_tensor *t, int ndim, const int64_t *dims) {
    assert_int_equal(t->ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(t->dims[i], dims[i]);
}

#endif
