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
#include <string.h>
#include <cmocka.h>

#include "pe/pe.h"
#include "ops/op.h"

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

/* Output placeholders: a one-op test declares the vars it fetches with an
 * empty shape (any shape) but has to give them some dtype. The executor
 * checks declarations against inference, so this gives each output of
 * block 0's ops that is declared with an empty shape the dtype its op
 * infers from the feeds (the placeholder is "whatever the op gives"). */
static inline void tu_declare_outputs(pe_program *p, const pe_feed *feeds, int n_feeds) {
    pe_scope *s = pe_scope_new(NULL);
    assert_non_null(s);
    for (int i = 0; i < n_feeds; i++) {
        pe_tensor *t = pe_scope_var(s, feeds[i].name);
        assert_non_null(t);
        assert_int_equal(pe_tensor_copy(t, feeds[i].tensor, pe_place_cpu(0)), PE_OK);
    }
    pe_block *b = &p->blocks[0];
    for (int k = 0; k < b->n_ops; k++) {
        pe_op_ctx ctx;
        if (pe_op_ctx_init(&ctx, &b->ops[k], s, pe_place_cpu(0)) != PE_OK) break;
        if (ctx.info->infer(&ctx) == PE_OK)
            for (int i = 0; i < ctx.info->n_outputs; i++)
                for (int j = 0; j < ctx.n_out[i]; j++) {
                    pe_tensor *t = ctx.out[i][j];
                    pe_var *v = t ? pe_block_find_var(b, ctx.out_names[i][j]) : NULL;
                    if (v && v->ndim == 0) v->dtype = t->dtype;
                    /* later ops of the block read it: give it storage */
                    if (t && !t->buf) (void)pe_tensor_resize(t, t->dtype, t->ndim, t->dims, pe_place_cpu(0));
                }
        pe_op_ctx_release(&ctx);
    }
    pe_scope_free(s);
}

/* Runs block 0 of p once on cpu:0 in a fresh scope; fetch_out[i] receive copies. */
static inline pe_status tu_run(const pe_program *p, const pe_feed *feeds, int n_feeds,
                               const char *const *fetch, int n_fetch, pe_tensor **fetch_out) {
    tu_declare_outputs((pe_program *)(uintptr_t)p, feeds, n_feeds); /* the test's own program */
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

/* ---- a one-op program harness ------------------------------------------------
 *
 *     tu_one_op o;
 *     pe_op *op = tu_op_begin(&o, "relu");
 *     tu_op_in(&o, op, "X", "x", x);          // x: ownership taken
 *     tu_op_out(&o, op, "Out", "y");
 *     pe_tensor *y;
 *     assert_int_equal(tu_op_run(&o, "y", &y), PE_OK);
 *     tu_op_end(&o);
 */
typedef struct {
    pe_program *p;
    pe_feed feeds[8];
    pe_tensor *owned[8];
    int nf;
} tu_one_op;

static inline pe_op *tu_op_begin(tu_one_op *o, const char *type) {
    memset(o, 0, sizeof *o);
    o->p = pe_program_new();
    assert_non_null(o->p);
    pe_op *op = pe_block_add_op(&o->p->blocks[0], type);
    assert_non_null(op);
    return op;
}

/* Feeds t (ownership taken) as var `var` into slot `slot`. */
static inline void tu_op_in(tu_one_op *o, pe_op *op, const char *slot, const char *var, pe_tensor *t) {
    if (!pe_block_find_var(&o->p->blocks[0], var)) tu_declare(o->p, var, t);
    assert_int_equal(pe_op_add_input(op, slot, var), PE_OK);
    o->feeds[o->nf].name = var;
    o->feeds[o->nf].tensor = t;
    o->owned[o->nf++] = t;
}

static inline void tu_op_out(tu_one_op *o, pe_op *op, const char *slot, const char *var) {
    if (!pe_block_find_var(&o->p->blocks[0], var))
        assert_non_null(pe_block_add_var(&o->p->blocks[0], var, PE_DTYPE_FP32, 0, NULL));
    assert_int_equal(pe_op_add_output(op, slot, var), PE_OK);
}

/* Runs with `nt` kernel threads; fetches n vars into new tensors outs[i]. */
static inline pe_status tu_op_run_n(tu_one_op *o, int nt, int n, const char *const *vars, pe_tensor **outs) {
    for (int i = 0; i < n; i++) outs[i] = pe_tensor_new();
    tu_declare_outputs(o->p, o->feeds, o->nf);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, nt);
    pe_status st = pe_executor_run(ex, o->p, 0, scope, o->feeds, o->nf, vars, n, outs);
    pe_executor_free(ex);
    pe_scope_free(scope);
    return st;
}

static inline pe_status tu_op_run(tu_one_op *o, const char *var, pe_tensor **out) {
    return tu_op_run_n(o, 1, 1, (const char *[]){var}, out);
}

static inline void tu_op_end(tu_one_op *o) {
    for (int i = 0; i < o->nf; i++) pe_tensor_free(o->owned[i]);
    pe_program_free(o->p);
}

/* Asserts the last error message contains each non-NULL string. */
static inline void tu_assert_error_has(const char *a, const char *b, const char *c) {
    const char *m = pe_last_error();
    if (a && !strstr(m, a)) fail_msg("error '%s' lacks '%s'", m, a);
    if (b && !strstr(m, b)) fail_msg("error '%s' lacks '%s'", m, b);
    if (c && !strstr(m, c)) fail_msg("error '%s' lacks '%s'", m, c);
}

#endif
