/* tests/unit/test_optimizer.c — the optimizer ops (sgd, momentum, adam,
 * clip_by_global_norm) against references computed here over several
 * steps, with outputs aliasing inputs as the optimizer pass emits them;
 * pe_optimizer_minimize's structure (roles, op_role_var, accumulators and
 * their startup initialization) and 20 training steps against a
 * hand-written reference; pe_startup_init_var's distributions (Xavier /
 * Kaiming bounds and stds from the right fans) and errors. */
#include "tests/unit/op_test_util.h"
#include "tests/unit/replicas.h"
#include "pe/optimizer.h"
#include "pe/parallel_executor.h"

#include <stdlib.h>
#include <string.h>

/* ---- small helpers ---------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* uniform in [-1, 1) */
static double urand(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0 * 2 - 1; }

static void fill_rand(double *v, int64_t n, uint64_t seed) {
    uint64_t s = seed * 2654435761u + 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) v[i] = urand(&s);
}

/* Sets scope var `name` to a copy of t. */
static void scope_set(pe_scope *sc, const char *name, const pe_tensor *t) {
    pe_tensor *v = pe_scope_var(sc, name);
    assert_non_null(v);
    assert_int_equal(pe_tensor_copy(v, t, pe_place_cpu(0)), PE_OK);
}

static pe_var *declare(pe_program *p, const char *name, pe_dtype dt, int ndim, const int64_t *dims, bool persistable) {
    pe_var *v = pe_block_add_var(&p->blocks[0], name, dt, ndim, dims);
    assert_non_null(v);
    v->persistable = persistable;
    return v;
}

static double scope_get(pe_scope *sc, const char *name, int64_t i) {
    pe_tensor *t = pe_scope_find_var(sc, name);
    assert_non_null(t);
    return tu_get(t, i);
}

/* max |a_i - b_i| / (1 + |b_i|) over n elements of scope var vs reference */
static void assert_scope_close(pe_scope *sc, const char *name, const double *want, int64_t n, double tol) {
    pe_tensor *t = pe_scope_find_var(sc, name);
    assert_non_null(t);
    tu_assert_close(t, want, n, tol);
}

/* ---- sgd / momentum / adam: several steps, in place --------------------------- */

#define N_ELEMS 37
#define N_STEPS 6

typedef enum { K_SGD, K_MOMENTUM, K_NESTEROV, K_ADAM } kind_t;

/* Builds one optimizer op over persistable state (outputs aliasing inputs)
 * with Grad fed; runs N_STEPS steps (a different grad each step) on
 * `threads` threads and compares every state var with a reference in
 * double after each step. */
static void run_optimizer_case(kind_t kind, pe_dtype dt, int64_t n, int threads, double tol) {
    const int64_t dims[1] = {n}, one[1] = {1};
    /* lr and Beta1Pow are fp32 vars: the reference uses their rounded values */
    const double lr = (float)0.05, mu = 0.8, b1 = 0.85, b2 = 0.99, eps = 1e-6;
    pe_program *p = pe_program_new();
    declare(p, "w", dt, 1, dims, true);
    declare(p, "g", dt, 1, dims, false);
    declare(p, "lr", PE_DTYPE_FP32, 1, one, true);
    pe_op *op = pe_block_add_op(&p->blocks[0], kind == K_SGD ? "sgd" : kind == K_ADAM ? "adam" : "momentum");
    pe_op_add_input(op, "Param", "w");
    pe_op_add_input(op, "Grad", "g");
    pe_op_add_input(op, "LearningRate", "lr");
    pe_op_add_output(op, "ParamOut", "w");
    if (kind == K_MOMENTUM || kind == K_NESTEROV) {
        declare(p, "v", dt, 1, dims, true);
        op = &p->blocks[0].ops[0];
        pe_op_add_input(op, "Velocity", "v");
        pe_op_add_output(op, "VelocityOut", "v");
        pe_op_set_float(op, "mu", mu);
        pe_op_set_bool(op, "use_nesterov", kind == K_NESTEROV);
    } else if (kind == K_ADAM) {
        declare(p, "m1", dt, 1, dims, true);
        declare(p, "m2", dt, 1, dims, true);
        declare(p, "b1p", PE_DTYPE_FP32, 1, one, true);
        declare(p, "b2p", dt, 1, one, true);
        op = &p->blocks[0].ops[0];
        pe_op_add_input(op, "Moment1", "m1");
        pe_op_add_input(op, "Moment2", "m2");
        pe_op_add_input(op, "Beta1Pow", "b1p");
        pe_op_add_input(op, "Beta2Pow", "b2p");
        pe_op_add_output(op, "Moment1Out", "m1");
        pe_op_add_output(op, "Moment2Out", "m2");
        pe_op_add_output(op, "Beta1PowOut", "b1p");
        pe_op_add_output(op, "Beta2PowOut", "b2p");
        pe_op_set_float(op, "beta1", b1);
        pe_op_set_float(op, "beta2", b2);
        pe_op_set_float(op, "epsilon", eps);
    }
    assert_int_equal(pe_program_check(p, "test"), PE_OK);

    double *w = malloc(sizeof(double) * (size_t)n), *v = calloc((size_t)n, sizeof(double));
    double *m1 = calloc((size_t)n, sizeof(double)), *m2 = calloc((size_t)n, sizeof(double));
    double *g = malloc(sizeof(double) * (size_t)n);
    double b1p = b1, b2p = b2;
    fill_rand(w, n, 1);
    pe_scope *sc = pe_scope_new(NULL);
    pe_tensor *t = tu_tensor(dt, 1, dims, w);
    scope_set(sc, "w", t);
    pe_tensor_free(t);
    t = tu_tensor(PE_DTYPE_FP32, 1, one, &lr);
    scope_set(sc, "lr", t);
    pe_tensor_free(t);
    if (kind == K_MOMENTUM || kind == K_NESTEROV) {
        t = tu_tensor(dt, 1, dims, NULL);
        scope_set(sc, "v", t);
        pe_tensor_free(t);
    } else if (kind == K_ADAM) {
        t = tu_tensor(dt, 1, dims, NULL);
        scope_set(sc, "m1", t);
        scope_set(sc, "m2", t);
        pe_tensor_free(t);
        t = tu_tensor(PE_DTYPE_FP32, 1, one, &b1p);
        scope_set(sc, "b1p", t);
        pe_tensor_free(t);
        t = tu_tensor(dt, 1, one, &b2p);
        scope_set(sc, "b2p", t);
        pe_tensor_free(t);
        b1p = (float)b1;
        if (dt == PE_DTYPE_FP32) b2p = (float)b2;
    }
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, threads);
    for (int step = 0; step < N_STEPS; step++) {
        fill_rand(g, n, 100 + (uint64_t)step);
        if (dt == PE_DTYPE_FP32)
            for (int64_t i = 0; i < n; i++) g[i] = (float)g[i];
        pe_tensor *gt = tu_tensor(dt, 1, dims, g);
        pe_feed f = {"g", gt};
        pe_status st = pe_executor_run(ex, p, 0, sc, &f, 1, NULL, 0, NULL);
        if (st != PE_OK) fail_msg("step %d: %s", step, pe_last_error());
        pe_tensor_free(gt);
        /* reference */
        double lr_t = lr * sqrt(1 - b2p) / (1 - b1p), eps_t = eps * sqrt(1 - b2p);
        for (int64_t i = 0; i < n; i++) {
            switch (kind) {
            case K_SGD: w[i] -= lr * g[i]; break;
            case K_MOMENTUM: v[i] = mu * v[i] + g[i]; w[i] -= lr * v[i]; break;
            case K_NESTEROV: v[i] = mu * v[i] + g[i]; w[i] -= lr * (g[i] + mu * v[i]); break;
            case K_ADAM:
                m1[i] = b1 * m1[i] + (1 - b1) * g[i];
                m2[i] = b2 * m2[i] + (1 - b2) * g[i] * g[i];
                w[i] -= lr_t * m1[i] / (sqrt(m2[i]) + eps_t);
                break;
            }
        }
        b1p = (float)(b1p * b1);
        b2p = dt == PE_DTYPE_FP32 ? (float)(b2p * b2) : b2p * b2;
        assert_scope_close(sc, "w", w, n, tol);
        if (kind == K_MOMENTUM || kind == K_NESTEROV) assert_scope_close(sc, "v", v, n, tol);
        if (kind == K_ADAM) {
            assert_scope_close(sc, "m1", m1, n, tol);
            assert_scope_close(sc, "m2", m2, n, tol);
            assert_scope_close(sc, "b1p", &b1p, 1, 1e-6);
            assert_scope_close(sc, "b2p", &b2p, 1, dt == PE_DTYPE_FP64 ? 1e-15 : 1e-6);
        }
    }
    pe_executor_free(ex);
    pe_scope_free(sc);
    pe_program_free(p);
    free(w);
    free(v);
    free(m1);
    free(m2);
    free(g);
}

static void test_sgd(void **state) {
    (void)state;
    run_optimizer_case(K_SGD, PE_DTYPE_FP32, N_ELEMS, 1, 1e-6);
    run_optimizer_case(K_SGD, PE_DTYPE_FP64, N_ELEMS, 1, 1e-14);
}

static void test_momentum(void **state) {
    (void)state;
    run_optimizer_case(K_MOMENTUM, PE_DTYPE_FP32, N_ELEMS, 1, 1e-6);
    run_optimizer_case(K_MOMENTUM, PE_DTYPE_FP64, N_ELEMS, 1, 1e-14);
    run_optimizer_case(K_NESTEROV, PE_DTYPE_FP32, N_ELEMS, 1, 1e-6);
    run_optimizer_case(K_NESTEROV, PE_DTYPE_FP64, N_ELEMS, 1, 1e-14);
}

static void test_adam(void **state) {
    (void)state;
    run_optimizer_case(K_ADAM, PE_DTYPE_FP32, N_ELEMS, 1, 1e-5);
    run_optimizer_case(K_ADAM, PE_DTYPE_FP64, N_ELEMS, 1, 1e-12);
}

/* Above the parallel threshold, on 2 threads. */
static void test_large_parallel(void **state) {
    (void)state;
    run_optimizer_case(K_NESTEROV, PE_DTYPE_FP32, 70001, 2, 1e-6);
    run_optimizer_case(K_ADAM, PE_DTYPE_FP64, 70001, 2, 1e-12);
}

/* ---- adagrad / rmsprop / adamax / adamw / lamb: several steps, in place ------- */

typedef enum { M_ADAGRAD, M_RMSPROP, M_RMSPROP_CENTERED, M_ADAMAX, M_ADAMW, M_LAMB } more_t;

/* Per-element state slot k of `kind` (NULL past the last): input slot, output
 * slot; elem_init is its initial value. */
static const char *const more_slots[6][4] = {
    {"Moment", NULL},
    {"MeanSquare", "Moment", "MeanGrad", NULL},
    {"MeanSquare", "Moment", "MeanGrad", NULL},
    {"Moment", "InfNorm", NULL},
    {"Moment1", "Moment2", NULL},
    {"Moment1", "Moment2", NULL},
};
static const char *const more_type[6] = {"adagrad", "rmsprop", "rmsprop", "adamax", "adamw", "lamb"};

/* The op over fp32/fp64 state (outputs aliasing inputs), N_STEPS steps on
 * `threads` threads, against Paddle's formulas in double after every step. */
static void run_more_case(more_t kind, pe_dtype dt, int64_t n, int threads, double tol) {
    const int64_t dims[1] = {n}, one[1] = {1};
    const double lr = (float)0.05, b1 = 0.85, b2 = 0.99, eps = 1e-6, rho = 0.9, mu = 0.7, coeff = 0.1, init = 0.1;
    const bool pows = kind >= M_ADAMAX, pow2 = kind >= M_ADAMW;
    pe_program *p = pe_program_new();
    declare(p, "w", dt, 1, dims, true);
    declare(p, "g", dt, 1, dims, false);
    declare(p, "lr", PE_DTYPE_FP32, 1, one, true);
    pe_op *op = pe_block_add_op(&p->blocks[0], more_type[kind]);
    pe_op_add_input(op, "Param", "w");
    pe_op_add_input(op, "Grad", "g");
    pe_op_add_input(op, "LearningRate", "lr");
    pe_op_add_output(op, "ParamOut", "w");
    char outs[4][32];
    for (int k = 0; more_slots[kind][k]; k++) {
        declare(p, more_slots[kind][k], dt, 1, dims, true);
        snprintf(outs[k], sizeof outs[k], "%sOut", more_slots[kind][k]);
        op = &p->blocks[0].ops[0];
        pe_op_add_input(op, more_slots[kind][k], more_slots[kind][k]);
        pe_op_add_output(op, outs[k], more_slots[kind][k]);
    }
    if (pows) {
        declare(p, "b1p", dt, 1, one, true);
        op = &p->blocks[0].ops[0];
        pe_op_add_input(op, "Beta1Pow", "b1p");
        pe_op_add_output(op, "Beta1PowOut", "b1p");
    }
    if (pow2) {
        declare(p, "b2p", dt, 1, one, true);
        op = &p->blocks[0].ops[0];
        pe_op_add_input(op, "Beta2Pow", "b2p");
        pe_op_add_output(op, "Beta2PowOut", "b2p");
    }
    op = &p->blocks[0].ops[0];
    pe_op_set_float(op, "epsilon", eps);
    if (kind == M_RMSPROP || kind == M_RMSPROP_CENTERED) {
        pe_op_set_float(op, "decay", rho);
        pe_op_set_float(op, "momentum", mu);
        pe_op_set_bool(op, "centered", kind == M_RMSPROP_CENTERED);
    }
    if (pows) {
        pe_op_set_float(op, "beta1", b1);
        pe_op_set_float(op, "beta2", b2);
    }
    if (kind == M_ADAMW) {
        pe_op_set_float(op, "coeff", coeff);
        pe_op_set_bool(op, "with_decay", true);
    }
    if (kind == M_LAMB) pe_op_set_float(op, "weight_decay", coeff);
    assert_int_equal(pe_program_check(p, "test"), PE_OK);

    double *w = malloc(sizeof(double) * (size_t)n), *g = malloc(sizeof(double) * (size_t)n);
    double *st[3], *r = malloc(sizeof(double) * (size_t)n);
    double b1p = dt == PE_DTYPE_FP32 ? (float)b1 : b1, b2p = dt == PE_DTYPE_FP32 ? (float)b2 : b2;
    fill_rand(w, n, 3);
    pe_scope *sc = pe_scope_new(NULL);
    pe_tensor *t = tu_tensor(dt, 1, dims, w);
    scope_set(sc, "w", t);
    pe_tensor_free(t);
    t = tu_tensor(PE_DTYPE_FP32, 1, one, &lr);
    scope_set(sc, "lr", t);
    pe_tensor_free(t);
    for (int k = 0; k < 3; k++) {
        st[k] = calloc((size_t)n, sizeof(double));
        if (kind == M_ADAGRAD && k == 0)
            for (int64_t i = 0; i < n; i++) st[k][i] = dt == PE_DTYPE_FP32 ? (float)init : init;
        if (!more_slots[kind][k]) continue;
        t = tu_tensor(dt, 1, dims, st[k]);
        scope_set(sc, more_slots[kind][k], t);
        pe_tensor_free(t);
    }
    if (pows) {
        t = tu_tensor(dt, 1, one, &b1p);
        scope_set(sc, "b1p", t);
        pe_tensor_free(t);
    }
    if (pow2) {
        t = tu_tensor(dt, 1, one, &b2p);
        scope_set(sc, "b2p", t);
        pe_tensor_free(t);
    }
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, threads);
    for (int step = 0; step < N_STEPS; step++) {
        fill_rand(g, n, 200 + (uint64_t)step);
        if (dt == PE_DTYPE_FP32)
            for (int64_t i = 0; i < n; i++) g[i] = (float)g[i];
        pe_tensor *gt = tu_tensor(dt, 1, dims, g);
        pe_feed f = {"g", gt};
        pe_status rs = pe_executor_run(ex, p, 0, sc, &f, 1, NULL, 0, NULL);
        if (rs != PE_OK) fail_msg("%s step %d: %s", more_type[kind], step, pe_last_error());
        pe_tensor_free(gt);
        /* reference (Paddle's formulas) */
        double pn = 0, rn = 0;
        for (int64_t i = 0; i < n; i++) {
            double *a = st[0], *b = st[1], *c = st[2];
            switch (kind) {
            case M_ADAGRAD:
                a[i] += g[i] * g[i];
                w[i] -= lr * g[i] / (sqrt(a[i]) + eps);
                break;
            case M_RMSPROP:
                a[i] = rho * a[i] + (1 - rho) * g[i] * g[i];
                b[i] = mu * b[i] + lr * g[i] / sqrt(a[i] + eps);
                w[i] -= b[i];
                break;
            case M_RMSPROP_CENTERED:
                a[i] = rho * a[i] + (1 - rho) * g[i] * g[i];
                c[i] = rho * c[i] + (1 - rho) * g[i];
                b[i] = mu * b[i] + lr * g[i] / sqrt(a[i] - c[i] * c[i] + eps);
                w[i] -= b[i];
                break;
            case M_ADAMAX:
                a[i] = b1 * a[i] + (1 - b1) * g[i];
                b[i] = fmax(b2 * b[i] + eps, fabs(g[i]));
                w[i] -= lr / (1 - b1p) * a[i] / b[i];
                break;
            case M_ADAMW:
                w[i] -= lr * coeff * w[i];
                a[i] = b1 * a[i] + (1 - b1) * g[i];
                b[i] = b2 * b[i] + (1 - b2) * g[i] * g[i];
                w[i] -= lr * sqrt(1 - b2p) / (1 - b1p) * a[i] / (sqrt(b[i]) + eps * sqrt(1 - b2p));
                break;
            case M_LAMB:
                a[i] = b1 * a[i] + (1 - b1) * g[i];
                b[i] = b2 * b[i] + (1 - b2) * g[i] * g[i];
                r[i] = a[i] / (1 - b1p) / (sqrt(b[i] / (1 - b2p)) + eps) + coeff * w[i];
                pn += w[i] * w[i];
                rn += r[i] * r[i];
                break;
            }
        }
        if (kind == M_LAMB) {
            double ratio = pn > 0 && rn > 0 ? sqrt(pn) / sqrt(rn) : 1.0;
            for (int64_t i = 0; i < n; i++) w[i] -= lr * ratio * r[i];
        }
        b1p = dt == PE_DTYPE_FP32 ? (float)(b1p * b1) : b1p * b1;
        b2p = dt == PE_DTYPE_FP32 ? (float)(b2p * b2) : b2p * b2;
        assert_scope_close(sc, "w", w, n, tol);
        for (int k = 0; more_slots[kind][k]; k++) {
            if (kind == M_RMSPROP && k == 2) continue; /* not centered: MeanGrad stays 0 */
            assert_scope_close(sc, more_slots[kind][k], st[k], n, tol);
        }
        if (pows) assert_scope_close(sc, "b1p", &b1p, 1, dt == PE_DTYPE_FP64 ? 1e-15 : 1e-6);
        if (pow2) assert_scope_close(sc, "b2p", &b2p, 1, dt == PE_DTYPE_FP64 ? 1e-15 : 1e-6);
    }
    pe_executor_free(ex);
    pe_scope_free(sc);
    pe_program_free(p);
    free(w);
    free(g);
    free(r);
    for (int k = 0; k < 3; k++) free(st[k]);
}

static void test_more_optimizers(void **state) {
    (void)state;
    for (int k = M_ADAGRAD; k <= M_LAMB; k++) {
        run_more_case((more_t)k, PE_DTYPE_FP32, N_ELEMS, 1, 2e-5);
        run_more_case((more_t)k, PE_DTYPE_FP64, N_ELEMS, 1, 1e-12);
    }
    /* above the parallel threshold, on 2 threads (lamb's norms by chunks) */
    run_more_case(M_LAMB, PE_DTYPE_FP64, 70001, 2, 1e-12);
    run_more_case(M_RMSPROP_CENTERED, PE_DTYPE_FP32, 70001, 2, 2e-5);
}

/* ParamOut a separate var: Param stays, ParamOut gets the update. */
static void test_not_aliased(void **state) {
    (void)state;
    pe_program *p = pe_program_new();
    pe_tensor *w = tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){3}, (double[]){1, 2, 3});
    pe_tensor *g = tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){3}, (double[]){0.5, -1, 2});
    pe_tensor *lr = tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){1}, (double[]){0.1});
    tu_declare(p, "w", w);
    tu_declare(p, "g", g);
    tu_declare(p, "lr", lr);
    tu_declare(p, "w2", w);
    pe_op *op = pe_block_add_op(&p->blocks[0], "sgd");
    pe_op_add_input(op, "Param", "w");
    pe_op_add_input(op, "Grad", "g");
    pe_op_add_input(op, "LearningRate", "lr");
    pe_op_add_output(op, "ParamOut", "w2");
    pe_tensor *out[2] = {pe_tensor_new(), pe_tensor_new()};
    assert_int_equal(tu_run(p, (pe_feed[]){{"w", w}, {"g", g}, {"lr", lr}}, 3, (const char *[]){"w", "w2"}, 2, out), PE_OK);
    tu_assert_close(out[0], (double[]){1, 2, 3}, 3, 0);
    tu_assert_close(out[1], (double[]){0.95, 2.1, 2.8}, 3, 1e-15);
    pe_tensor_free(out[0]);
    pe_tensor_free(out[1]);
    pe_tensor_free(w);
    pe_tensor_free(g);
    pe_tensor_free(lr);
    pe_program_free(p);
}

/* Shape inference names the op and the offending var. */
static void expect_error(pe_program *p, const pe_feed *f, int nf, const char *want1, const char *want2) {
    pe_scope *sc = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_status st = pe_executor_run(ex, p, 0, sc, f, nf, NULL, 0, NULL);
    assert_int_not_equal(st, PE_OK);
    const char *msg = pe_last_error();
    if (!strstr(msg, want1) || !strstr(msg, want2)) fail_msg("message lacks '%s' / '%s': %s", want1, want2, msg);
    pe_executor_free(ex);
    pe_scope_free(sc);
}

static void test_shape_errors(void **state) {
    (void)state;
    pe_tensor *w = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL);
    pe_tensor *g_bad = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL);
    pe_tensor *g_f64 = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){2, 3}, NULL);
    pe_tensor *lr = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, (double[]){0.1});
    pe_tensor *lr2 = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    pe_tensor *v_bad = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){6}, NULL);
    /* momentum: grad shape, grad dtype, velocity shape, lr size */
    struct { const pe_tensor *g, *v, *lr; const char *w1, *w2; } cases[] = {
        {g_bad, w, lr, "momentum", "'the_grad'"},
        {g_f64, w, lr, "momentum", "float64"},
        {w, v_bad, lr, "momentum", "'the_velocity'"},
        {w, w, lr2, "momentum", "'the_lr'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_program *p = pe_program_new();
        tu_declare(p, "the_param", w);
        tu_declare(p, "the_grad", cases[i].g);
        tu_declare(p, "the_velocity", cases[i].v);
        tu_declare(p, "the_lr", cases[i].lr);
        pe_op *op = pe_block_add_op(&p->blocks[0], "momentum");
        pe_op_add_input(op, "Param", "the_param");
        pe_op_add_input(op, "Grad", "the_grad");
        pe_op_add_input(op, "Velocity", "the_velocity");
        pe_op_add_input(op, "LearningRate", "the_lr");
        pe_op_add_output(op, "ParamOut", "the_param");
        pe_op_add_output(op, "VelocityOut", "the_velocity");
        pe_feed f[4] = {{"the_param", w}, {"the_grad", cases[i].g}, {"the_velocity", cases[i].v}, {"the_lr", cases[i].lr}};
        expect_error(p, f, 4, cases[i].w1, cases[i].w2);
        pe_program_free(p);
    }
    /* adam: beta pow of 2 elements; beta pow >= 1 at run time */
    for (int c = 0; c < 2; c++) {
        pe_program *p = pe_program_new();
        tu_declare(p, "p", w);
        tu_declare(p, "g", w);
        tu_declare(p, "m", w);
        tu_declare(p, "lr", lr);
        pe_tensor *bp = c == 0 ? tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, NULL)
                               : tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, (double[]){1.0});
        tu_declare(p, "bpow", bp);
        pe_op *op = pe_block_add_op(&p->blocks[0], "adam");
        const char *ins[][2] = {{"Param", "p"}, {"Grad", "g"}, {"LearningRate", "lr"}, {"Moment1", "m"},
                                {"Moment2", "m"}, {"Beta1Pow", "bpow"}, {"Beta2Pow", "bpow"}};
        for (int k = 0; k < 7; k++) pe_op_add_input(op, ins[k][0], ins[k][1]);
        pe_op_add_output(op, "ParamOut", "p");
        pe_op_add_output(op, "Moment1Out", "m");
        pe_op_add_output(op, "Moment2Out", "m");
        pe_feed f[5] = {{"p", w}, {"g", w}, {"m", w}, {"lr", lr}, {"bpow", bp}};
        expect_error(p, f, 5, "adam", c == 0 ? "Beta1Pow 'bpow'" : "must be in [0, 1)");
        pe_tensor_free(bp);
        pe_program_free(p);
    }
    pe_tensor_free(w);
    pe_tensor_free(g_bad);
    pe_tensor_free(g_f64);
    pe_tensor_free(lr);
    pe_tensor_free(lr2);
    pe_tensor_free(v_bad);
}

/* ---- clip_by_global_norm -------------------------------------------------------- */

/* Two grads (fp32 [n0], fp64 [n1]) clipped to max_norm, x0 in place and x1
 * into a new var; checks against the reference and returns the fp32 result. */
static void run_clip(int64_t n0, int64_t n1, double max_norm, double gain, int threads, pe_tensor **res0) {
    double *a = malloc(sizeof(double) * (size_t)n0), *b = malloc(sizeof(double) * (size_t)n1);
    fill_rand(a, n0, 7);
    fill_rand(b, n1, 8);
    for (int64_t i = 0; i < n0; i++) a[i] = (float)(a[i] * gain);
    for (int64_t i = 0; i < n1; i++) b[i] *= gain;
    double ss = 0;
    for (int64_t i = 0; i < n0; i++) ss += a[i] * a[i];
    for (int64_t i = 0; i < n1; i++) ss += b[i] * b[i];
    double norm = sqrt(ss), scale = max_norm / (norm > max_norm ? norm : max_norm);
    pe_program *p = pe_program_new();
    pe_tensor *x0 = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){n0}, a), *x1 = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){1, n1}, b);
    tu_declare(p, "x0", x0);
    tu_declare(p, "x1", x1);
    tu_declare(p, "y1", x1);
    pe_op *op = pe_block_add_op(&p->blocks[0], "clip_by_global_norm");
    pe_op_add_input(op, "X", "x0");
    pe_op_add_input(op, "X", "x1");
    pe_op_add_output(op, "Out", "x0");
    pe_op_add_output(op, "Out", "y1");
    pe_op_set_float(op, "max_global_norm", max_norm);
    pe_op_set_int(op, "op_role", PE_ROLE_OPTIMIZE);
    assert_int_equal(pe_program_check(p, "clip"), PE_OK);
    pe_tensor *out[3] = {pe_tensor_new(), pe_tensor_new(), pe_tensor_new()};
    pe_scope *sc = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, threads);
    pe_feed f[2] = {{"x0", x0}, {"x1", x1}};
    assert_int_equal(pe_executor_run(ex, p, 0, sc, f, 2, (const char *[]){"x0", "x1", "y1"}, 3, out), PE_OK);
    for (int64_t i = 0; i < n0; i++) a[i] *= scale;
    tu_assert_close(out[0], a, n0, 1e-6);
    tu_assert_close(out[1], b, n1, 0); /* x1 untouched */
    for (int64_t i = 0; i < n1; i++) b[i] *= scale;
    tu_assert_close(out[2], b, n1, 1e-13);
    tu_assert_dims(out[2], 2, (int64_t[]){1, n1});
    if (scale < 1) {
        /* the clipped set has norm max_norm */
        double s2 = 0;
        for (int64_t i = 0; i < n0; i++) s2 += tu_get(out[0], i) * tu_get(out[0], i);
        for (int64_t i = 0; i < n1; i++) s2 += tu_get(out[2], i) * tu_get(out[2], i);
        assert_true(fabs(sqrt(s2) - max_norm) < 1e-5 * max_norm);
    }
    *res0 = out[0];
    pe_tensor_free(out[1]);
    pe_tensor_free(out[2]);
    pe_executor_free(ex);
    pe_scope_free(sc);
    pe_tensor_free(x0);
    pe_tensor_free(x1);
    pe_program_free(p);
    free(a);
    free(b);
}

static void test_clip_by_global_norm(void **state) {
    (void)state;
    pe_tensor *r;
    /* norm of ~sqrt(30/3) ~ 3.2: below 100 (unchanged), above 1 (scaled by ~0.3) */
    run_clip(13, 17, 100.0, 1.0, 1, &r);
    pe_tensor_free(r);
    run_clip(13, 17, 1.0, 1.0, 1, &r);
    pe_tensor_free(r);
    /* large: chunked sums; same bits on 1 and 2 threads */
    pe_tensor *r1, *r2;
    run_clip(100003, 40000, 5.0, 3.0, 1, &r1);
    run_clip(100003, 40000, 5.0, 3.0, 2, &r2);
    assert_memory_equal(pe_tensor_data(r1), pe_tensor_data(r2), pe_tensor_nbytes(r1));
    pe_tensor_free(r1);
    pe_tensor_free(r2);
}

static void test_clip_errors(void **state) {
    (void)state;
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){4}, (double[]){1, 2, 3, 4});
    pe_tensor *xi = tu_tensor(PE_DTYPE_INT32, 1, (int64_t[]){4}, (double[]){1, 2, 3, 4});
    for (int c = 0; c < 3; c++) {
        pe_program *p = pe_program_new();
        tu_declare(p, "gx", x);
        tu_declare(p, "gi", xi);
        tu_declare(p, "gy", x);
        pe_op *op = pe_block_add_op(&p->blocks[0], "clip_by_global_norm");
        pe_op_add_input(op, "X", c == 1 ? "gi" : "gx");
        pe_op_add_output(op, "Out", c == 1 ? "gi" : "gx");
        if (c == 2) pe_op_add_output(op, "Out", "gy");
        pe_op_set_float(op, "max_global_norm", c == 0 ? -1.0 : 1.0);
        expect_error(p, (pe_feed[]){{"gx", x}, {"gi", xi}}, 2, "clip_by_global_norm",
                     c == 0 ? "max_global_norm" : c == 1 ? "'gi'" : "one Out per X");
        pe_program_free(p);
    }
    pe_tensor_free(x);
    pe_tensor_free(xi);
}

/* ---- minimize ------------------------------------------------------------------ */

#define B 8
#define DIN 5
#define DOUT 3

/* x [B, DIN] -> mul(W [DIN, DOUT]) -> elementwise_add(b [DOUT]) = z;
 * loss = mean((z - y)^2). */
static pe_program *make_model(void) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    pe_var *v;
    v = pe_block_add_var(b, "x", PE_DTYPE_FP32, 2, (int64_t[]){-1, DIN});
    v->stop_gradient = true;
    v = pe_block_add_var(b, "y", PE_DTYPE_FP32, 2, (int64_t[]){-1, DOUT});
    v->stop_gradient = true;
    v = pe_block_add_var(b, "W", PE_DTYPE_FP32, 2, (int64_t[]){DIN, DOUT});
    v->persistable = v->is_parameter = true;
    v = pe_block_add_var(b, "b", PE_DTYPE_FP32, 1, (int64_t[]){DOUT});
    v->persistable = v->is_parameter = true;
    pe_block_add_var(b, "h", PE_DTYPE_FP32, 2, (int64_t[]){-1, DOUT});
    pe_block_add_var(b, "z", PE_DTYPE_FP32, 2, (int64_t[]){-1, DOUT});
    pe_block_add_var(b, "d", PE_DTYPE_FP32, 2, (int64_t[]){-1, DOUT});
    pe_block_add_var(b, "sq", PE_DTYPE_FP32, 2, (int64_t[]){-1, DOUT});
    pe_block_add_var(b, "loss", PE_DTYPE_FP32, 1, (int64_t[]){1});
    pe_op *op = pe_block_add_op(b, "mul");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Y", "W");
    pe_op_add_output(op, "Out", "h");
    op = pe_block_add_op(b, "elementwise_add");
    pe_op_add_input(op, "X", "h");
    pe_op_add_input(op, "Y", "b");
    pe_op_add_output(op, "Out", "z");
    op = pe_block_add_op(b, "elementwise_sub");
    pe_op_add_input(op, "X", "z");
    pe_op_add_input(op, "Y", "y");
    pe_op_add_output(op, "Out", "d");
    op = pe_block_add_op(b, "elementwise_mul");
    pe_op_add_input(op, "X", "d");
    pe_op_add_input(op, "Y", "d");
    pe_op_add_output(op, "Out", "sq");
    op = pe_block_add_op(b, "mean");
    pe_op_add_input(op, "X", "sq");
    pe_op_add_output(op, "Out", "loss");
    return p;
}

static int find_op(const pe_program *p, const char *type, int from) {
    const pe_block *b = &p->blocks[0];
    for (int i = from; i < b->n_ops; i++)
        if (!strcmp(b->ops[i].type, type)) return i;
    return -1;
}

static int count_ops(const pe_program *p, const char *type) {
    int n = 0;
    for (int i = find_op(p, type, 0); i >= 0; i = find_op(p, type, i + 1)) n++;
    return n;
}

static int64_t role_of(const pe_op *op) {
    const pe_attr *a = pe_op_attr(op, "op_role");
    return a ? a->i : 0;
}

static void assert_role_var(const pe_op *op, const char *param, const char *grad) {
    const pe_attr *a = pe_op_attr(op, "op_role_var");
    assert_non_null(a);
    assert_int_equal(a->n, 2);
    assert_string_equal(a->strings[0], param);
    assert_string_equal(a->strings[1], grad);
}

/* The startup fill_constant writing `name`, checked for value and persistable declarations. */
static void assert_state(const pe_program *main, const pe_program *startup, const char *name, double value,
                         int ndim, const int64_t *dims) {
    const pe_var *mv = pe_block_find_var(&main->blocks[0], name), *sv = pe_block_find_var(&startup->blocks[0], name);
    if (!mv || !sv) fail_msg("state var '%s' not declared in main and startup", name);
    assert_true(mv->persistable && sv->persistable);
    assert_int_equal(mv->ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(mv->dims[i], dims[i]);
    const pe_block *b = &startup->blocks[0];
    for (int i = 0; i < b->n_ops; i++) {
        const char *o = pe_op_output1(&b->ops[i], "Out");
        if (!o || strcmp(o, name)) continue;
        assert_string_equal(b->ops[i].type, "fill_constant");
        const pe_attr *v = pe_op_attr(&b->ops[i], "value");
        assert_non_null(v);
        assert_true(fabs(v->f - value) < 1e-12);
        return;
    }
    fail_msg("startup does not initialize '%s'", name);
}

typedef struct {
    pe_optimizer opt;
    pe_param_config cfg[2];
    int n_cfg;
} mcase;

/* Reference training in double: same data, same update rules as
 * documented (clip, then L2 decay, then the optimizer). */
static void reference_train(const mcase *mc, double *W, double *bias, int steps, double *losses) {
    const pe_optimizer *o = &mc->opt;
    double vW[DIN * DOUT] = {0}, vb[DOUT] = {0}, m2W[DIN * DOUT] = {0}, m2b[DOUT] = {0};
    double b1p = o->beta1, b2p = o->beta2;
    for (int s = 0; s < steps; s++) {
        double x[B * DIN], y[B * DOUT], gW[DIN * DOUT] = {0}, gb[DOUT] = {0};
        fill_rand(x, B * DIN, 1000 + (uint64_t)s);
        fill_rand(y, B * DOUT, 2000 + (uint64_t)s);
        for (int i = 0; i < B * DIN; i++) x[i] = (float)x[i];
        for (int i = 0; i < B * DOUT; i++) y[i] = (float)y[i];
        double loss = 0;
        for (int r = 0; r < B; r++)
            for (int j = 0; j < DOUT; j++) {
                double z = bias[j];
                for (int k = 0; k < DIN; k++) z += x[r * DIN + k] * W[k * DOUT + j];
                double d = z - y[r * DOUT + j];
                loss += d * d;
                double dz = 2 * d / (B * DOUT);
                gb[j] += dz;
                for (int k = 0; k < DIN; k++) gW[k * DOUT + j] += x[r * DIN + k] * dz;
            }
        losses[s] = loss / (B * DOUT);
        if (o->clip_global_norm > 0) {
            double ss = 0;
            for (int i = 0; i < DIN * DOUT; i++) ss += gW[i] * gW[i];
            for (int j = 0; j < DOUT; j++) ss += gb[j] * gb[j];
            double nrm = sqrt(ss), sc = o->clip_global_norm / (nrm > o->clip_global_norm ? nrm : o->clip_global_norm);
            for (int i = 0; i < DIN * DOUT; i++) gW[i] *= sc;
            for (int j = 0; j < DOUT; j++) gb[j] *= sc;
        }
        for (int which = 0; which < 2; which++) {
            const char *name = which ? "b" : "W";
            double *p = which ? bias : W, *g = which ? gb : gW, *v = which ? vb : vW, *m2 = which ? m2b : m2W;
            int n = which ? DOUT : DIN * DOUT;
            if (o->clip_norm > 0) { /* each gradient by its own norm */
                double ss = 0;
                for (int i = 0; i < n; i++) ss += g[i] * g[i];
                double nrm = sqrt(ss), sc = o->clip_norm / (nrm > o->clip_norm ? nrm : o->clip_norm);
                for (int i = 0; i < n; i++) g[i] *= sc;
            }
            if (o->clip_by_value)
                for (int i = 0; i < n; i++) g[i] = g[i] < o->clip_min ? o->clip_min : g[i] > o->clip_max ? o->clip_max : g[i];
            double lr_mult = 1, l2 = o->weight_decay, l1 = o->l1_decay;
            for (int c = 0; c < mc->n_cfg; c++)
                if (!strcmp(mc->cfg[c].name, name)) {
                    lr_mult = mc->cfg[c].lr_mult;
                    if (mc->cfg[c].l2 >= 0 || mc->cfg[c].l1 > 0) { /* the param's own regularizer replaces the optimizer's */
                        l2 = mc->cfg[c].l2 > 0 ? mc->cfg[c].l2 : 0;
                        l1 = mc->cfg[c].l1 > 0 ? mc->cfg[c].l1 : 0;
                    }
                }
            double lr = o->learning_rate * lr_mult;
            for (int i = 0; i < n; i++) {
                double gi = g[i] + l2 * p[i] + l1 * (p[i] > 0 ? 1.0 : p[i] < 0 ? -1.0 : 0.0);
                if (o->kind == PE_OPT_SGD) {
                    p[i] -= lr * gi;
                } else if (o->kind == PE_OPT_MOMENTUM) {
                    v[i] = o->momentum * v[i] + gi;
                    p[i] -= o->use_nesterov ? lr * (gi + o->momentum * v[i]) : lr * v[i];
                } else {
                    v[i] = o->beta1 * v[i] + (1 - o->beta1) * gi;
                    m2[i] = o->beta2 * m2[i] + (1 - o->beta2) * gi * gi;
                    double lr_t = lr * sqrt(1 - b2p) / (1 - b1p);
                    p[i] -= lr_t * v[i] / (sqrt(m2[i]) + o->epsilon * sqrt(1 - b2p));
                }
            }
        }
        b1p *= o->beta1;
        b2p *= o->beta2;
    }
}

/* minimize + startup + 20 steps vs the reference: on the single-place
 * executor (n_places 0), or on a ParallelExecutor over n_places CPU places
 * (batch split in equal parts; batch_share gradient scaling makes the
 * update the one of the whole batch). */
static void train_and_compare(const mcase *mc, pe_program *main, pe_program *startup, int n_places,
                              pe_reduce_strategy rs) {
    enum { STEPS = 20 };
    pe_scope *sc = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, 1);
    if (pe_executor_run(ex, startup, 0, sc, NULL, 0, NULL, 0, NULL) != PE_OK) fail_msg("startup: %s", pe_last_error());
    double W[DIN * DOUT], bias[DOUT], losses[STEPS];
    for (int i = 0; i < DIN * DOUT; i++) W[i] = scope_get(sc, "W", i);
    for (int j = 0; j < DOUT; j++) bias[j] = scope_get(sc, "b", j);
    reference_train(mc, W, bias, STEPS, losses);
    pe_parallel_executor *pex = NULL;
    if (n_places > 0) {
        pe_place places[4];
        for (int i = 0; i < n_places; i++) places[i] = pe_place_cpu(i);
        pe_pe_options opt;
        pe_pe_options_default(&opt);
        opt.loss_name = "loss";
        opt.build_strategy.reduce_strategy = rs;
        if (pe_parallel_executor_new(places, n_places, main, sc, &opt, &pex) != PE_OK) fail_msg("PE: %s", pe_last_error());
    }
    double first = 0, last = 0;
    for (int s = 0; s < STEPS; s++) {
        double x[B * DIN], y[B * DOUT];
        fill_rand(x, B * DIN, 1000 + (uint64_t)s);
        fill_rand(y, B * DOUT, 2000 + (uint64_t)s);
        pe_tensor *xt = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){B, DIN}, x);
        pe_tensor *yt = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){B, DOUT}, y);
        pe_tensor *lt = pe_tensor_new();
        pe_feed f[2] = {{"x", xt}, {"y", yt}};
        pe_status st = pex ? pe_run(pex, f, 2, (const char *[]){"loss"}, 1, true, &lt)
                           : pe_executor_run(ex, main, 0, sc, f, 2, (const char *[]){"loss"}, 1, &lt);
        if (st != PE_OK) fail_msg("step %d: %s", s, pe_last_error());
        /* one loss per place over equal row counts: their mean is the batch loss */
        double l = 0;
        for (int64_t k = 0; k < pe_tensor_numel(lt); k++) l += tu_get(lt, k);
        l /= (double)pe_tensor_numel(lt);
        if (fabs(l - losses[s]) > 1e-5 * (1 + fabs(losses[s]))) fail_msg("step %d: loss %.9g, reference %.9g", s, l, losses[s]);
        if (s == 0) first = l;
        last = l;
        pe_tensor_free(xt);
        pe_tensor_free(yt);
        pe_tensor_free(lt);
    }
    assert_scope_close(sc, "W", W, DIN * DOUT, 1e-5);
    assert_scope_close(sc, "b", bias, DOUT, 1e-5);
    for (int p = 1; p < n_places; p++) { /* replicas in sync, or one shared buffer (shard_optimizer) */
        tu_assert_replica(pex, p, "W");
        tu_assert_replica(pex, p, "b");
        assert_scope_close(pe_place_scope(pex, p), "W", W, DIN * DOUT, 1e-5);
        assert_scope_close(pe_place_scope(pex, p), "b", bias, DOUT, 1e-5);
    }
    /* the targets are random, so the loss goes down but not to 0 */
    if (!(last < first)) fail_msg("loss did not decrease: %g -> %g", first, last);
    pe_parallel_executor_free(pex);
    pe_executor_free(ex);
    pe_scope_free(sc);
}

/* Startup: W, b from initializers (so train_and_compare starts from them). */
static pe_program *make_startup(const pe_program *main) {
    pe_program *s = pe_program_new();
    s->random_seed = 5;
    pe_initializer wi = {.kind = PE_INIT_XAVIER_UNIFORM};
    pe_initializer bi = {.kind = PE_INIT_CONSTANT, .value = 0.1};
    assert_int_equal(pe_startup_init_var(s, pe_block_find_var(&main->blocks[0], "W"), &wi), PE_OK);
    assert_int_equal(pe_startup_init_var(s, pe_block_find_var(&main->blocks[0], "b"), &bi), PE_OK);
    return s;
}

static void test_minimize_momentum_structure_and_training(void **state) {
    (void)state;
    mcase mc;
    pe_optimizer_default(&mc.opt, PE_OPT_MOMENTUM, 0.05);
    mc.opt.momentum = 0.7;
    mc.opt.use_nesterov = true;
    mc.opt.weight_decay = 0.01;
    mc.cfg[0] = (pe_param_config){.name = "b", .lr_mult = 2.0, .l2 = 0.0};
    mc.n_cfg = 1;
    pe_program *main = make_model(), *startup = make_startup(main);
    int n_fwd = main->blocks[0].n_ops, n_start = startup->blocks[0].n_ops;
    pe_param_grad *pg;
    int n;
    if (pe_optimizer_minimize(&mc.opt, main, startup, "loss", NULL, 0, NULL, 0, mc.cfg, mc.n_cfg, &pg, &n) != PE_OK)
        fail_msg("minimize: %s", pe_last_error());
    assert_int_equal(pe_program_check(main, "main"), PE_OK);
    assert_int_equal(pe_program_check(startup, "startup"), PE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(pg[0].param, "W");
    assert_string_equal(pg[1].param, "b");
    /* structure */
    assert_int_equal(count_ops(main, "momentum"), 2);
    assert_int_equal(count_ops(main, "clip_by_global_norm"), 0);
    assert_state(main, startup, "learning_rate_0", 0.05, 1, (int64_t[]){1});
    assert_state(main, startup, "W_velocity_0", 0.0, 2, (int64_t[]){DIN, DOUT});
    assert_state(main, startup, "b_velocity_0", 0.0, 1, (int64_t[]){DOUT});
    assert_int_equal(startup->blocks[0].n_ops, n_start + 3);
    const pe_block *b = &main->blocks[0];
    int n_opt = 0;
    for (int i = n_fwd; i < b->n_ops; i++) {
        const pe_op *op = &b->ops[i];
        if (role_of(op) != PE_ROLE_OPTIMIZE) continue;
        n_opt++;
        const pe_attr *rv = pe_op_attr(op, "op_role_var");
        assert_non_null(rv);
        int which = !strcmp(rv->strings[0], "b");
        assert_role_var(op, pg[which].param, pg[which].grad);
        if (!strcmp(op->type, "momentum")) {
            assert_string_equal(pe_op_input1(op, "Param"), pg[which].param);
            assert_string_equal(pe_op_output1(op, "ParamOut"), pg[which].param);
            assert_string_equal(pe_op_output1(op, "VelocityOut"), pe_op_input1(op, "Velocity"));
            assert_true(pe_op_attr(op, "use_nesterov")->i == 1);
            assert_true(fabs(pe_op_attr(op, "mu")->f - 0.7) < 1e-12);
            /* W: decayed grad; b (l2 = 0): the raw grad, per-param lr */
            if (which) {
                assert_string_equal(pe_op_input1(op, "Grad"), pg[1].grad);
                assert_string_not_equal(pe_op_input1(op, "LearningRate"), "learning_rate_0");
            } else {
                assert_string_not_equal(pe_op_input1(op, "Grad"), pg[0].grad);
                assert_string_equal(pe_op_input1(op, "LearningRate"), "learning_rate_0");
            }
        }
    }
    /* W: scale + sum + momentum; b: scale (lr) + momentum */
    assert_int_equal(n_opt, 5);
    /* every op after the forward ones is backward or optimize */
    for (int i = n_fwd; i < b->n_ops; i++) {
        int64_t r = role_of(&b->ops[i]);
        assert_true(r == PE_ROLE_OPTIMIZE || (r & PE_ROLE_BACKWARD));
    }
    train_and_compare(&mc, main, startup, 0, PE_REDUCE_ALL_REDUCE);
    /* the same program on 2 places: allreduce, and reduce (each param's
     * optimizer ops only on its owner, then a broadcast) */
    train_and_compare(&mc, main, startup, 2, PE_REDUCE_ALL_REDUCE);
    train_and_compare(&mc, main, startup, 2, PE_REDUCE_REDUCE);
    pe_param_grads_free(pg, n);
    pe_program_free(main);
    pe_program_free(startup);
}

static void test_minimize_adam_clip(void **state) {
    (void)state;
    mcase mc;
    pe_optimizer_default(&mc.opt, PE_OPT_ADAM, 0.02);
    mc.opt.beta1 = 0.8;
    mc.opt.beta2 = 0.95;
    mc.opt.epsilon = 1e-7;
    mc.opt.clip_global_norm = 0.3; /* the gradient norm starts near 1: clipping is active */
    mc.opt.weight_decay = 0.05;
    mc.cfg[0] = (pe_param_config){.name = "W", .lr_mult = 0.5, .l2 = -1};
    mc.n_cfg = 1;
    pe_program *main = make_model(), *startup = make_startup(main);
    /* a var already named learning_rate_0: the pass picks another name */
    pe_block_add_var(&main->blocks[0], "learning_rate_0", PE_DTYPE_FP32, 1, (int64_t[]){1});
    int n_fwd = main->blocks[0].n_ops;
    pe_param_grad *pg;
    int n;
    if (pe_optimizer_minimize(&mc.opt, main, startup, "loss", NULL, 0, NULL, 0, mc.cfg, mc.n_cfg, &pg, &n) != PE_OK)
        fail_msg("minimize: %s", pe_last_error());
    assert_int_equal(pe_program_check(main, "main"), PE_OK);
    assert_int_equal(pe_program_check(startup, "startup"), PE_OK);
    assert_int_equal(count_ops(main, "adam"), 2);
    assert_state(main, startup, "learning_rate_1", 0.02, 1, (int64_t[]){1});
    assert_state(main, startup, "W_moment1_0", 0.0, 2, (int64_t[]){DIN, DOUT});
    assert_state(main, startup, "W_moment2_0", 0.0, 2, (int64_t[]){DIN, DOUT});
    assert_state(main, startup, "W_beta1_pow_acc_0", 0.8, 1, (int64_t[]){1});
    assert_state(main, startup, "W_beta2_pow_acc_0", 0.95, 1, (int64_t[]){1});
    assert_state(main, startup, "b_moment1_0", 0.0, 1, (int64_t[]){DOUT});
    assert_state(main, startup, "b_beta2_pow_acc_0", 0.95, 1, (int64_t[]){1});
    int c = find_op(main, "clip_by_global_norm", n_fwd);
    assert_true(c >= 0);
    const pe_op *clip = &main->blocks[0].ops[c];
    assert_int_equal(role_of(clip), PE_ROLE_OPTIMIZE);
    assert_null(pe_op_attr(clip, "op_role_var"));
    assert_int_equal(pe_op_input(clip, "X")->n_args, 2);
    assert_true(fabs(pe_op_attr(clip, "max_global_norm")->f - 0.3) < 1e-12);
    /* clip before every per-param op, after every backward op */
    for (int i = n_fwd; i < main->blocks[0].n_ops; i++) {
        int64_t r = role_of(&main->blocks[0].ops[i]);
        if (i < c) assert_true(r & PE_ROLE_BACKWARD);
        if (i > c) assert_int_equal(r, PE_ROLE_OPTIMIZE);
    }
    int a = find_op(main, "adam", c);
    const pe_op *adam = &main->blocks[0].ops[a];
    assert_string_equal(pe_op_output1(adam, "Beta1PowOut"), pe_op_input1(adam, "Beta1Pow"));
    assert_string_equal(pe_op_output1(adam, "Moment2Out"), pe_op_input1(adam, "Moment2"));
    train_and_compare(&mc, main, startup, 0, PE_REDUCE_ALL_REDUCE);
    /* 2 places, allreduce: the clip op reads the summed gradients */
    train_and_compare(&mc, main, startup, 2, PE_REDUCE_ALL_REDUCE);
    pe_param_grads_free(pg, n);
    pe_program_free(main);
    pe_program_free(startup);
}

/* Per-gradient clipping (by value; by each gradient's own norm) and L1
 * decay (the optimizer's, and a param's own regularizer replacing it):
 * the ops, then training against the reference on 1 place and on 2 places
 * under both reduce strategies (the per-gradient clip carries op_role_var,
 * so the reduce strategy runs it on the owner, which holds the whole sum). */
static void test_minimize_l1_and_per_gradient_clip(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        mcase mc;
        pe_optimizer_default(&mc.opt, k ? PE_OPT_MOMENTUM : PE_OPT_SGD, 0.05);
        mc.opt.momentum = 0.8;
        if (k) {
            mc.opt.clip_norm = 0.2; /* W's and b's gradient norms start above it */
            mc.opt.weight_decay = 0.01;
            mc.cfg[0] = (pe_param_config){.name = "W", .lr_mult = 1.0, .l2 = -1, .l1 = 0.02}; /* L1 only on W */
        } else {
            mc.opt.clip_by_value = true;
            mc.opt.clip_min = -0.05;
            mc.opt.clip_max = 0.04;
            mc.opt.l1_decay = 0.01;
            mc.cfg[0] = (pe_param_config){.name = "b", .lr_mult = 1.0, .l2 = 0.03}; /* L2 only on b */
        }
        mc.n_cfg = 1;
        pe_program *main = make_model(), *startup = make_startup(main);
        int n_fwd = main->blocks[0].n_ops;
        pe_param_grad *pg;
        int n;
        if (pe_optimizer_minimize(&mc.opt, main, startup, "loss", NULL, 0, NULL, 0, mc.cfg, mc.n_cfg, &pg, &n) != PE_OK)
            fail_msg("minimize: %s", pe_last_error());
        assert_int_equal(pe_program_check(main, "main"), PE_OK);
        const pe_block *b = &main->blocks[0];
        /* one clip per gradient, before its decay, into <grad>@CLIP_0, with op_role_var */
        assert_int_equal(count_ops(main, k ? "clip_by_global_norm" : "clip"), 2);
        assert_int_equal(count_ops(main, "sign"), 1); /* W only: k = 0, b's own L2 replaces the L1; k = 1, W's own L1 */
        for (int i = n_fwd; i < b->n_ops; i++) {
            const pe_op *op = &b->ops[i];
            if (strcmp(op->type, k ? "clip_by_global_norm" : "clip")) continue;
            const pe_attr *rv = pe_op_attr(op, "op_role_var");
            assert_non_null(rv);
            int which = !strcmp(rv->strings[0], "b");
            assert_string_equal(pe_op_input1(op, "X"), pg[which].grad);
            char want[128];
            snprintf(want, sizeof want, "%s@CLIP_0", pg[which].grad);
            assert_string_equal(pe_op_output1(op, "Out"), want);
            const pe_var *cv = pe_block_find_var(b, want);
            assert_non_null(cv);
            assert_false(cv->persistable);
            if (k) assert_true(fabs(pe_op_attr(op, "max_global_norm")->f - 0.2) < 1e-12);
            else assert_true(fabs(pe_op_attr(op, "min")->f + 0.05) < 1e-12 && fabs(pe_op_attr(op, "max")->f - 0.04) < 1e-12);
        }
        int sg = find_op(main, "sign", n_fwd);
        assert_string_equal(pe_op_input1(&b->ops[sg], "X"), "W");
        train_and_compare(&mc, main, startup, 0, PE_REDUCE_ALL_REDUCE);
        train_and_compare(&mc, main, startup, 2, PE_REDUCE_ALL_REDUCE);
        train_and_compare(&mc, main, startup, 2, PE_REDUCE_REDUCE);
        pe_param_grads_free(pg, n);
        pe_program_free(main);
        pe_program_free(startup);
    }
}

static void test_minimize_sgd_errors_leave_programs_unchanged(void **state) {
    (void)state;
    pe_program *main = make_model(), *startup = make_startup(main);
    char *before_m, *before_s, *after_m, *after_s;
    assert_int_equal(pe_program_to_json(main, &before_m), PE_OK);
    assert_int_equal(pe_program_to_json(startup, &before_s), PE_OK);
    pe_optimizer o;
    pe_optimizer_default(&o, PE_OPT_SGD, 0.1);
    struct { pe_optimizer o; pe_param_config cfg; int n_cfg; const char *loss; const char *want; } cases[] = {
        {o, {.name = "nope", .lr_mult = 1}, 1, "loss", "'nope'"},
        {o, {.name = "W", .lr_mult = -1}, 1, "loss", "lr_mult"},
        {o, {0}, 0, "no_such_loss", "no_such_loss"},
        {o, {0}, 0, "loss", "lr_var"},
        {o, {0}, 0, "loss", "unknown optimizer kind"},
        {o, {0}, 0, "loss", "clip_global_norm"},
        {o, {0}, 0, "loss", "beta1"},
        {o, {0}, 0, "loss", "choose one way to clip"},
        {o, {0}, 0, "loss", "clip by value to [0.5, -0.5]"},
        {o, {0}, 0, "loss", "l1_decay"},
    };
    cases[7].o.clip_global_norm = 1;
    cases[7].o.clip_norm = 1;
    cases[8].o.clip_by_value = true;
    cases[8].o.clip_min = 0.5;
    cases[8].o.clip_max = -0.5;
    cases[9].o.l1_decay = -1;
    cases[3].o.lr_var = "x"; /* [-1, 5]: not one element */
    cases[4].o.kind = PE_OPT_KIND_COUNT;
    cases[5].o.clip_global_norm = -1;
    cases[6].o.kind = PE_OPT_ADAM;
    cases[6].o.beta1 = 1.0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_status st = pe_optimizer_minimize(&cases[i].o, main, startup, cases[i].loss, NULL, 0, NULL, 0, &cases[i].cfg,
                                             cases[i].n_cfg, NULL, NULL);
        assert_int_not_equal(st, PE_OK);
        if (!strstr(pe_last_error(), cases[i].want)) fail_msg("case %zu: message lacks '%s': %s", i, cases[i].want, pe_last_error());
        assert_int_equal(pe_program_to_json(main, &after_m), PE_OK);
        assert_int_equal(pe_program_to_json(startup, &after_s), PE_OK);
        assert_string_equal(before_m, after_m);
        assert_string_equal(before_s, after_s);
        free(after_m);
        free(after_s);
    }
    /* SGD with an explicit lr var, fed: no learning_rate_0, one sgd per param */
    pe_var *lv = pe_block_add_var(&main->blocks[0], "my_lr", PE_DTYPE_FP32, 1, (int64_t[]){1});
    lv->persistable = true;
    o.lr_var = "my_lr";
    int n_start = startup->blocks[0].n_ops;
    assert_int_equal(pe_optimizer_minimize(&o, main, startup, "loss", NULL, 0, NULL, 0, NULL, 0, NULL, NULL), PE_OK);
    assert_int_equal(count_ops(main, "sgd"), 2);
    assert_int_equal(startup->blocks[0].n_ops, n_start);
    assert_null(pe_block_find_var(&main->blocks[0], "learning_rate_0"));
    int s = find_op(main, "sgd", 0);
    assert_string_equal(pe_op_input1(&main->blocks[0].ops[s], "LearningRate"), "my_lr");
    free(before_m);
    free(before_s);
    pe_program_free(main);
    pe_program_free(startup);
}

/* ids [B, 1] int64 -> lookup_table_v2(T [6, 2], is_sparse = sparse, is_distributed = dist) -> mean = loss. */
static pe_program *make_lookup_model(bool sparse, bool dist) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    pe_var *v = pe_block_add_var(b, "ids", PE_DTYPE_INT64, 2, (int64_t[]){-1, 1});
    v->stop_gradient = true;
    v = pe_block_add_var(b, "T", PE_DTYPE_FP32, 2, (int64_t[]){6, 2});
    v->persistable = v->is_parameter = true;
    pe_block_add_var(b, "e", PE_DTYPE_FP32, 3, (int64_t[]){-1, 1, 2});
    pe_block_add_var(b, "loss", PE_DTYPE_FP32, 1, (int64_t[]){1});
    pe_op *op = pe_block_add_op(b, "lookup_table_v2");
    pe_op_add_input(op, "W", "T");
    pe_op_add_input(op, "Ids", "ids");
    pe_op_add_output(op, "Out", "e");
    pe_op_set_bool(op, "is_sparse", sparse);
    pe_op_set_bool(op, "is_distributed", dist);
    op = pe_block_add_op(b, "mean");
    pe_op_add_input(op, "X", "e");
    pe_op_add_output(op, "Out", "loss");
    return p;
}

/* A sparse table (is_sparse) trains with its dense gradient; minimize refuses, naming it, the settings where
 * that is not Paddle's update, and leaves the programs unchanged. */
static void test_minimize_sparse_table(void **state) {
    (void)state;
    struct { pe_optimizer_kind kind; bool sparse, dist; double wd, l1, eps, init, cmin, cmax; const char *want; } cases[] = {
        {PE_OPT_ADAMAX, true, false, 0, 0, 1e-8, 0, 0, 0, "parameter 'T' is a sparse table (lookup_table_v2 "
                                                         "is_sparse=true) updated by adamax without a regularizer"},
        {PE_OPT_ADAMAX, true, false, 1e-3, 0, 1e-8, 0, 0, 0, NULL},
        {PE_OPT_ADAMAX, true, false, 0, 1e-3, 1e-8, 0, 0, 0, NULL},
        {PE_OPT_ADAMAX, false, false, 0, 0, 1e-8, 0, 0, 0, NULL},
        {PE_OPT_ADAGRAD, true, false, 0, 0, 0, 0, 0, 0, "updated by adagrad with epsilon = 0"},
        {PE_OPT_ADAGRAD, true, false, 0, 0, 0, 0.1, 0, 0, NULL},
        {PE_OPT_ADAGRAD, true, false, 0, 0, 1e-6, 0, 0, 0, NULL},
        {PE_OPT_SGD, true, false, 0, 0, 0, 0, 0.1, 1, "clipped by value to [0.1, 1]"},
        {PE_OPT_SGD, true, false, 1e-3, 0, 0, 0, -2, -1, "clipped by value to [-2, -1]"},
        {PE_OPT_SGD, true, false, 0, 0, 0, 0, -1, 1, NULL},
        {PE_OPT_SGD, false, false, 0, 0, 0, 0, 0.1, 1, NULL},
        {PE_OPT_SGD, false, true, 0, 0, 0, 0, 0, 0, "parameter 'T' is the table of a lookup_table_v2 op with "
                                                    "is_distributed=true"},
        {PE_OPT_MOMENTUM, true, false, 0, 0, 0, 0, 0, 0, NULL},
        {PE_OPT_ADAM, true, false, 0, 0, 1e-8, 0, 0, 0, NULL},
        {PE_OPT_RMSPROP, true, false, 0, 0, 1e-6, 0, 0, 0, NULL},
        {PE_OPT_ADAMW, true, false, 0, 0, 1e-8, 0, 0, 0, NULL},
        {PE_OPT_LAMB, true, false, 0, 0, 1e-6, 0, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_program *main = make_lookup_model(cases[i].sparse, cases[i].dist), *startup = pe_program_new();
        pe_optimizer o;
        pe_optimizer_default(&o, cases[i].kind, 0.1);
        o.weight_decay = cases[i].wd;
        o.l1_decay = cases[i].l1;
        o.epsilon = cases[i].eps;
        o.initial_accumulator_value = cases[i].init;
        if (cases[i].cmin != 0 || cases[i].cmax != 0) {
            o.clip_by_value = true;
            o.clip_min = cases[i].cmin;
            o.clip_max = cases[i].cmax;
        }
        char *before, *after;
        assert_int_equal(pe_program_to_json(main, &before), PE_OK);
        pe_status st = pe_optimizer_minimize(&o, main, startup, "loss", NULL, 0, NULL, 0, NULL, 0, NULL, NULL);
        if (!cases[i].want) {
            if (st != PE_OK) fail_msg("case %zu: %s", i, pe_last_error());
        } else {
            assert_int_equal(st, PE_ERR_UNSUPPORTED);
            if (!strstr(pe_last_error(), cases[i].want))
                fail_msg("case %zu: message lacks '%s': %s", i, cases[i].want, pe_last_error());
            assert_int_equal(pe_program_to_json(main, &after), PE_OK);
            assert_string_equal(before, after);
            free(after);
        }
        free(before);
        pe_program_free(main);
        pe_program_free(startup);
    }
}

/* ---- initializers ---------------------------------------------------------------- */

/* Runs the startup program and returns a copy of var `name`. */
static pe_tensor *run_startup(const pe_program *s, const char *name) {
    pe_tensor *t = pe_tensor_new();
    pe_scope *sc = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    if (pe_executor_run(ex, s, 0, sc, NULL, 0, (const char *[]){name}, 1, &t) != PE_OK) fail_msg("startup: %s", pe_last_error());
    pe_executor_free(ex);
    pe_scope_free(sc);
    return t;
}

typedef struct {
    pe_init_kind kind;
    int ndim;
    int64_t dims[4];
    int64_t fan_in, fan_out;
    bool uniform;
    double param; /* the bound (uniform) or std (normal) expected */
} icase;

static void check_init_stats(const icase *c) {
    pe_program *main = pe_program_new(), *s = pe_program_new();
    s->random_seed = 11;
    pe_var *v = pe_block_add_var(&main->blocks[0], "w", PE_DTYPE_FP32, c->ndim, c->dims);
    v->persistable = v->is_parameter = true;
    pe_initializer init = {.kind = c->kind, .fan_in = c->fan_in, .fan_out = c->fan_out};
    assert_int_equal(pe_startup_init_var(s, v, &init), PE_OK);
    const pe_var *sv = pe_block_find_var(&s->blocks[0], "w");
    assert_non_null(sv);
    assert_true(sv->persistable && sv->is_parameter);
    assert_int_equal(sv->ndim, c->ndim);
    const pe_op *op = &s->blocks[0].ops[0];
    assert_string_equal(op->type, c->uniform ? "uniform_random" : "gaussian_random");
    /* the op attrs carry the exact bound / std */
    if (c->uniform) {
        assert_true(fabs(pe_op_attr(op, "max")->f - c->param) < 1e-12 && fabs(pe_op_attr(op, "min")->f + c->param) < 1e-12);
    } else {
        assert_true(fabs(pe_op_attr(op, "std")->f - c->param) < 1e-12 && pe_op_attr(op, "mean")->f == 0);
    }
    pe_tensor *t = run_startup(s, "w");
    tu_assert_dims(t, c->ndim, c->dims);
    int64_t n = pe_tensor_numel(t);
    double sum = 0, sq = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = tu_get(t, i);
        sum += x;
        sq += x * x;
        if (fabs(x) > mx) mx = fabs(x);
    }
    double mean = sum / (double)n, var = sq / (double)n - mean * mean;
    double want_var = c->uniform ? c->param * c->param / 3 : c->param * c->param;
    double sd = sqrt(want_var);
    if (fabs(mean) > 5 * sd / sqrt((double)n)) fail_msg("mean %g too far from 0 (std %g, n %lld)", mean, sd, (long long)n);
    if (fabs(var / want_var - 1) > 0.03) fail_msg("variance %g, want %g", var, want_var);
    if (c->uniform) {
        assert_true(mx <= c->param);
        assert_true(mx > 0.99 * c->param);
    } else {
        assert_true(mx > 3 * c->param); /* not truncated */
    }
    pe_tensor_free(t);
    pe_program_free(s);
    pe_program_free(main);
}

static void test_xavier_kaiming(void **state) {
    (void)state;
    icase cases[] = {
        /* 2-D [in, out] */
        {PE_INIT_XAVIER_UNIFORM, 2, {200, 300}, 0, 0, true, sqrt(6.0 / 500)},
        {PE_INIT_XAVIER_NORMAL, 2, {200, 300}, 0, 0, false, sqrt(2.0 / 500)},
        {PE_INIT_KAIMING_UNIFORM, 2, {300, 200}, 0, 0, true, sqrt(6.0 / 300)},
        {PE_INIT_KAIMING_NORMAL, 2, {300, 200}, 0, 0, false, sqrt(2.0 / 300)},
        /* conv [M, C, kh, kw]: fan_in = C*kh*kw, fan_out = M*kh*kw */
        {PE_INIT_KAIMING_UNIFORM, 4, {64, 32, 3, 3}, 0, 0, true, sqrt(6.0 / (32 * 9))},
        {PE_INIT_KAIMING_NORMAL, 4, {64, 32, 5, 5}, 0, 0, false, sqrt(2.0 / (32 * 25))},
        {PE_INIT_XAVIER_UNIFORM, 4, {64, 32, 3, 3}, 0, 0, true, sqrt(6.0 / (32 * 9 + 64 * 9))},
        {PE_INIT_XAVIER_NORMAL, 4, {16, 48, 3, 3}, 0, 0, false, sqrt(2.0 / (48 * 9 + 16 * 9))},
        /* 1-D: fan_in = fan_out = n */
        {PE_INIT_XAVIER_UNIFORM, 1, {50000}, 0, 0, true, sqrt(6.0 / 100000)},
        /* explicit fans override the shape */
        {PE_INIT_XAVIER_UNIFORM, 2, {200, 300}, 10, 30, true, sqrt(6.0 / 40)},
        {PE_INIT_KAIMING_NORMAL, 2, {200, 300}, 7, 0, false, sqrt(2.0 / 7)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_init_stats(&cases[i]);
}

static void test_basic_initializers(void **state) {
    (void)state;
    pe_program *s = pe_program_new();
    pe_var vars[5];
    memset(vars, 0, sizeof vars);
    const char *names[5] = {"c", "u", "n", "t", "a"};
    for (int i = 0; i < 5; i++) {
        vars[i].name = (char *)names[i];
        vars[i].dtype = i == 4 ? PE_DTYPE_FP64 : PE_DTYPE_FP32;
        vars[i].ndim = 2;
        vars[i].dims[0] = i == 4 ? 2 : 100;
        vars[i].dims[1] = i == 4 ? 3 : 400;
    }
    const double vals[6] = {0.1, 1.0 / 3, -2.5e-300, 7, 1e300, -0.0};
    pe_initializer inits[5] = {
        {.kind = PE_INIT_CONSTANT, .value = -1.25},
        {.kind = PE_INIT_UNIFORM, .low = 2, .high = 5, .seed = 42},
        {.kind = PE_INIT_NORMAL, .mean = 1, .std = 0.5},
        {.kind = PE_INIT_TRUNCATED_NORMAL, .mean = -1, .std = 2},
        {.kind = PE_INIT_ASSIGN, .values = vals, .n_values = 6},
    };
    for (int i = 0; i < 5; i++)
        if (pe_startup_init_var(s, &vars[i], &inits[i]) != PE_OK) fail_msg("%s: %s", names[i], pe_last_error());
    assert_int_equal(pe_program_check(s, "startup"), PE_OK);
    assert_int_equal(pe_op_attr(&s->blocks[0].ops[1], "seed")->i, 42);
    int64_t n = 100 * 400;
    pe_tensor *t = run_startup(s, "c");
    for (int64_t i = 0; i < n; i++) assert_true(tu_get(t, i) == -1.25);
    pe_tensor_free(t);
    t = run_startup(s, "u");
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = tu_get(t, i);
        assert_true(x >= 2 && x < 5);
        sum += x;
    }
    assert_true(fabs(sum / (double)n - 3.5) < 0.02);
    pe_tensor_free(t);
    t = run_startup(s, "n");
    sum = 0;
    double sq = 0;
    for (int64_t i = 0; i < n; i++) { double x = tu_get(t, i); sum += x; sq += x * x; }
    double m = sum / (double)n;
    assert_true(fabs(m - 1) < 0.01);
    assert_true(fabs(sqrt(sq / (double)n - m * m) - 0.5) < 0.01);
    pe_tensor_free(t);
    t = run_startup(s, "t");
    for (int64_t i = 0; i < n; i++) {
        double x = tu_get(t, i);
        assert_true(x >= -1 - 4 - 1e-6 && x <= -1 + 4 + 1e-6);
    }
    pe_tensor_free(t);
    t = run_startup(s, "a"); /* fp64: exact */
    tu_assert_dims(t, 2, (int64_t[]){2, 3});
    for (int i = 0; i < 6; i++) assert_memory_equal(&((double *)pe_tensor_data(t))[i], &vals[i], sizeof(double));
    pe_tensor_free(t);
    pe_program_free(s);

    /* ASSIGN to int64: exact integers, beyond 2^53 too */
    s = pe_program_new();
    pe_var iv = {.name = "i", .dtype = PE_DTYPE_INT64, .ndim = 1, .dims = {3}};
    const double ivals[3] = {-3, 9007199254740994.0, 0};
    pe_initializer ai = {.kind = PE_INIT_ASSIGN, .values = ivals, .n_values = 3};
    assert_int_equal(pe_startup_init_var(s, &iv, &ai), PE_OK);
    t = run_startup(s, "i");
    assert_true(((int64_t *)pe_tensor_data(t))[1] == 9007199254740994LL);
    assert_true(((int64_t *)pe_tensor_data(t))[0] == -3);
    pe_tensor_free(t);
    pe_program_free(s);
}

/* Same seed -> same values; seed 0 -> derived from the var name. */
static void test_initializer_seeds(void **state) {
    (void)state;
    pe_var a = {.name = "a", .dtype = PE_DTYPE_FP32, .ndim = 1, .dims = {64}};
    pe_var b = a;
    b.name = "b";
    pe_tensor *r[4];
    for (int k = 0; k < 4; k++) {
        pe_program *s = pe_program_new();
        s->random_seed = 3;
        pe_initializer init = {.kind = PE_INIT_KAIMING_NORMAL, .seed = k < 2 ? 9 : 0};
        assert_int_equal(pe_startup_init_var(s, k % 2 ? &b : &a, &init), PE_OK);
        r[k] = run_startup(s, k % 2 ? "b" : "a");
        pe_program_free(s);
    }
    /* explicit seed: a and b equal; derived: they differ */
    assert_memory_equal(pe_tensor_data(r[0]), pe_tensor_data(r[1]), 64 * 4);
    assert_memory_not_equal(pe_tensor_data(r[2]), pe_tensor_data(r[3]), 64 * 4);
    for (int k = 0; k < 4; k++) pe_tensor_free(r[k]);
}

static void test_initializer_errors(void **state) {
    (void)state;
    pe_var ok = {.name = "w", .dtype = PE_DTYPE_FP32, .ndim = 2, .dims = {4, 5}};
    pe_var batch = {.name = "x", .dtype = PE_DTYPE_FP32, .ndim = 2, .dims = {-1, 5}};
    pe_var ivar = {.name = "k", .dtype = PE_DTYPE_INT32, .ndim = 1, .dims = {3}};
    pe_var zero = {.name = "z", .dtype = PE_DTYPE_FP32, .ndim = 2, .dims = {0, 5}};
    pe_var other = {.name = "w", .dtype = PE_DTYPE_FP64, .ndim = 2, .dims = {4, 5}};
    const double three[3] = {1, 2.5, 3};
    struct { const pe_var *v; pe_initializer init; const char *want; } cases[] = {
        {&ok, {.kind = (pe_init_kind)42}, "unknown initializer kind 42"},
        {&ok, {.kind = (pe_init_kind)-1}, "unknown initializer kind"},
        {&batch, {.kind = PE_INIT_XAVIER_UNIFORM}, "fully known dims"},
        {&batch, {.kind = PE_INIT_CONSTANT}, "'x'"},
        {&ok, {.kind = PE_INIT_UNIFORM, .low = 1, .high = 1}, "low < high"},
        {&ok, {.kind = PE_INIT_NORMAL, .std = -1}, "std >= 0"},
        {&ok, {.kind = PE_INIT_ASSIGN, .values = three, .n_values = 3}, "3 values"},
        {&ok, {.kind = PE_INIT_ASSIGN}, "0 values"},
        {&ivar, {.kind = PE_INIT_ASSIGN, .values = three, .n_values = 3}, "not an integer"},
        {&ivar, {.kind = PE_INIT_KAIMING_NORMAL}, "int32"},
        {&zero, {.kind = PE_INIT_KAIMING_UNIFORM}, "fan_in"},
        {&ok, {.kind = PE_INIT_XAVIER_NORMAL, .fan_in = -2}, "fan_in = -2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pe_program *s = pe_program_new();
        pe_status st = pe_startup_init_var(s, cases[i].v, &cases[i].init);
        assert_int_not_equal(st, PE_OK);
        if (!strstr(pe_last_error(), cases[i].want)) fail_msg("case %zu: message lacks '%s': %s", i, cases[i].want, pe_last_error());
        /* nothing added */
        assert_int_equal(s->blocks[0].n_ops, 0);
        assert_int_equal(s->blocks[0].n_vars, 0);
        pe_program_free(s);
    }
    /* declared already with another dtype */
    pe_program *s = pe_program_new();
    pe_initializer c = {.kind = PE_INIT_CONSTANT};
    assert_int_equal(pe_startup_init_var(s, &ok, &c), PE_OK);
    assert_int_not_equal(pe_startup_init_var(s, &other, &c), PE_OK);
    assert_non_null(strstr(pe_last_error(), "already declared"));
    assert_int_equal(s->blocks[0].n_ops, 1);
    assert_int_equal(pe_startup_init_var(NULL, &ok, &c), PE_ERR_INVALID);
    pe_program_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_momentum),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_large_parallel),
        cmocka_unit_test(test_more_optimizers),
        cmocka_unit_test(test_not_aliased),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_clip_by_global_norm),
        cmocka_unit_test(test_clip_errors),
        cmocka_unit_test(test_minimize_momentum_structure_and_training),
        cmocka_unit_test(test_minimize_adam_clip),
        cmocka_unit_test(test_minimize_l1_and_per_gradient_clip),
        cmocka_unit_test(test_minimize_sgd_errors_leave_programs_unchanged),
        cmocka_unit_test(test_minimize_sparse_table),
        cmocka_unit_test(test_xavier_kaiming),
        cmocka_unit_test(test_basic_initializers),
        cmocka_unit_test(test_initializer_seeds),
        cmocka_unit_test(test_initializer_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
