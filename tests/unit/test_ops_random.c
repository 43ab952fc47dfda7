/* tests/unit/test_ops_random.c — Philox4x32-10 known answers, the
 * documented key/counter derivation, the random ops' determinism across
 * thread counts, seed sensitivity, and distribution statistics over 100k
 * samples. */
#include "tests/unit/op_test_util.h"
#include "runtime/rng.h"

#include <stdlib.h>
#include <string.h>

#define NS 100000

typedef struct {
    const char *type;
    pe_dtype dtype;
    int64_t seed;
    uint64_t program_seed;
    const char *out;
    double a, b; /* min/max or mean/std */
    int nt;
} rcase;

/* Runs one random op producing NS (or `n`) values into *out. */
static pe_status run_random(const rcase *c, int64_t n, pe_tensor *out) {
    pe_program *p = pe_program_new();
    p->random_seed = (int64_t)c->program_seed;
    pe_op *op = pe_block_add_op(&p->blocks[0], c->type);
    const char *name = c->out ? c->out : "r";
    pe_op_add_output(op, "Out", name);
    pe_block_add_var(&p->blocks[0], name, c->dtype, 1, (int64_t[]){n});
    pe_op_set_longs(op, "shape", (int64_t[]){n}, 1);
    pe_op_set_int(op, "dtype", c->dtype);
    pe_op_set_int(op, "seed", c->seed);
    bool uni = !strcmp(c->type, "uniform_random");
    pe_op_set_float(op, uni ? "min" : "mean", c->a);
    pe_op_set_float(op, uni ? "max" : "std", c->b);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, c->nt > 0 ? c->nt : 1);
    pe_status st = pe_executor_run(ex, p, 0, scope, NULL, 0, (const char *[]){name}, 1, &out);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(p);
    return st;
}

static pe_tensor *draw(const rcase *c) {
    pe_tensor *t = pe_tensor_new();
    assert_int_equal(run_random(c, NS, t), PE_OK);
    assert_int_equal(pe_tensor_numel(t), NS);
    assert_int_equal(t->dtype, c->dtype);
    return t;
}

static bool same_bits(const pe_tensor *a, const pe_tensor *b) {
    return pe_tensor_nbytes(a) == pe_tensor_nbytes(b) &&
           !memcmp(pe_tensor_data(a), pe_tensor_data(b), pe_tensor_nbytes(a));
}

/* ---- generator ------------------------------------------------------------ */

static void test_philox_known_answers(void **state) {
    (void)state;
    /* Random123 kat_vectors for philox4x32_10 */
    struct { uint32_t ctr[4], key[2], want[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        pe_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int k = 0; k < 4; k++)
            if (out[k] != kat[i].want[k]) fail_msg("kat %zu word %d: got %08x want %08x", i, k, out[k], kat[i].want[k]);
    }
}

/* The derivation written at the top of runtime/rng.c, re-implemented here
 * from the text, must match what the op produces. */
static uint64_t doc_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t doc_key(uint64_t program_seed, int64_t seed, const char *name) {
    uint64_t id;
    if (seed) {
        id = (uint64_t)seed;
    } else {
        id = 0xCBF29CE484222325ull;
        for (const char *c = name; *c; c++) id = (id ^ (unsigned char)*c) * 0x100000001B3ull;
    }
    return doc_mix64(doc_mix64(program_seed + 0x9E3779B97F4A7C15ull) ^ id);
}

static void test_documented_derivation(void **state) {
    (void)state;
    assert_true(pe_rng_key(7, 0, "fc_0.w_0") == doc_key(7, 0, "fc_0.w_0"));
    assert_true(pe_rng_key(7, -3, "fc_0.w_0") == doc_key(7, -3, "fc_0.w_0"));
    rcase c = {"uniform_random", PE_DTYPE_FP64, 0, 1234, "fc_0.w_0", -0.5, 2.0, 1};
    pe_tensor *t = pe_tensor_new();
    assert_int_equal(run_random(&c, 1000, t), PE_OK);
    uint64_t key = doc_key(1234, 0, "fc_0.w_0");
    for (uint64_t i = 0; i < 1000; i++) {
        uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), 0, 0}, k[2] = {(uint32_t)key, (uint32_t)(key >> 32)}, w[4];
        pe_philox4x32_10(ctr, k, w);
        double u = (double)((((uint64_t)w[1] << 32) | w[0]) >> 11) * 0x1p-53;
        double want = -0.5 + 2.5 * u;
        if (((double *)pe_tensor_data(t))[i] != want) fail_msg("element %llu differs from the documented value", (unsigned long long)i);
        /* normal: Box-Muller as documented */
        double u1 = (double)(((((uint64_t)w[1] << 32) | w[0]) >> 11) + 1) * 0x1p-53;
        double u2 = (double)((((uint64_t)w[3] << 32) | w[2]) >> 11) * 0x1p-53;
        assert_true(pe_rng_normal(key, i) == sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    pe_tensor_free(t);
}

static void test_inverse_cdf(void **state) {
    (void)state;
    /* reference quantiles of the standard normal */
    struct { double p, z; } q[] = {
        {0.5, 0.0}, {0.975, 1.959963984540054}, {0.025, -1.959963984540054}, {0.8413447460685429, 1.0},
        {1e-10, -6.361340902404056}, {0.9999, 3.719016485455709}, {0.02275013194817921, -2.0},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        if (fabs(pe_normal_inv_cdf(q[i].p) - q[i].z) > 1e-12 * (1 + fabs(q[i].z)))
            fail_msg("inv_cdf(%g) = %.17g, want %.17g", q[i].p, pe_normal_inv_cdf(q[i].p), q[i].z);
}

/* ---- determinism ---------------------------------------------------------- */

static void test_thread_count_invariance(void **state) {
    (void)state;
    const char *types[3] = {"uniform_random", "gaussian_random", "truncated_gaussian_random"};
    for (int t = 0; t < 3; t++)
        for (int d = 0; d < 2; d++)
            for (int seeded = 0; seeded < 2; seeded++) {
                rcase c = {types[t], d ? PE_DTYPE_FP64 : PE_DTYPE_FP32, seeded ? 42 : 0, 5, "w", t ? 0.0 : -1.0, 1.0, 1};
                pe_tensor *a = draw(&c);
                c.nt = 4;
                pe_tensor *b = draw(&c);
                c.nt = 3;
                pe_tensor *e = draw(&c);
                if (!same_bits(a, b) || !same_bits(a, e)) fail_msg("%s dtype %d: values depend on num_threads", types[t], d);
                pe_tensor_free(a); pe_tensor_free(b); pe_tensor_free(e);
            }
}

static void test_seeds(void **state) {
    (void)state;
    rcase base = {"gaussian_random", PE_DTYPE_FP32, 11, 0, "w", 0.0, 1.0, 1};
    pe_tensor *a = draw(&base), *b;
    rcase c = base;
    b = draw(&c);
    assert_true(same_bits(a, b)); /* same seed: same values */
    pe_tensor_free(b);
    c.seed = 12;
    b = draw(&c);
    assert_false(same_bits(a, b)); /* different op seed */
    pe_tensor_free(b);
    c = base;
    c.program_seed = 1;
    b = draw(&c);
    assert_false(same_bits(a, b)); /* different program seed */
    pe_tensor_free(b);
    c = base;
    c.out = "other";
    b = draw(&c);
    assert_true(same_bits(a, b)); /* seed attr set: the var name does not matter */
    pe_tensor_free(b);
    /* seed 0: the output var name selects the stream */
    c = base;
    c.seed = 0;
    pe_tensor *n1 = draw(&c);
    c.out = "other";
    pe_tensor *n2 = draw(&c);
    assert_false(same_bits(n1, n2));
    c.out = "w";
    b = draw(&c);
    assert_true(same_bits(n1, b));
    pe_tensor_free(b); pe_tensor_free(n1); pe_tensor_free(n2);
    /* a prefix of a longer draw: element i does not depend on the size */
    pe_tensor *small = pe_tensor_new();
    assert_int_equal(run_random(&base, 1000, small), PE_OK);
    assert_memory_equal(pe_tensor_data(small), pe_tensor_data(a), 1000 * sizeof(float));
    pe_tensor_free(small);
    pe_tensor_free(a);
}

/* ---- statistics ------------------------------------------------------------ */

static void moments(const pe_tensor *t, double *mean, double *sd, double *lo, double *hi) {
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    int64_t n = pe_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = tu_get(t, i);
        s += v;
        if (v < *lo) *lo = v;
        if (v > *hi) *hi = v;
    }
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double v = tu_get(t, i) - *mean;
        s2 += v * v;
    }
    *sd = sqrt(s2 / (double)(n - 1));
}

static void test_uniform_statistics(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        rcase c = {"uniform_random", d ? PE_DTYPE_FP64 : PE_DTYPE_FP32, 3, 0, "u", -2.0, 6.0, 2};
        pe_tensor *t = draw(&c);
        double mean, sd, lo, hi;
        moments(t, &mean, &sd, &lo, &hi);
        double w = 8.0, want_sd = w / sqrt(12.0);
        assert_true(fabs(mean - 2.0) < 5 * want_sd / sqrt(NS));
        assert_true(fabs(sd / want_sd - 1) < 0.01);
        assert_true(lo >= -2.0 && hi < 6.0);
        assert_true(lo < -1.99 && hi > 5.99);
        /* 16 equal bins, each within 6 sigma of NS/16 */
        int64_t bins[16] = {0};
        for (int64_t i = 0; i < NS; i++) bins[(int)((tu_get(t, i) + 2.0) / w * 16)]++;
        double e = NS / 16.0, s = sqrt(e * (1 - 1 / 16.0));
        for (int k = 0; k < 16; k++)
            if (fabs((double)bins[k] - e) > 6 * s) fail_msg("bin %d holds %lld of %d", k, (long long)bins[k], NS);
        pe_tensor_free(t);
    }
}

static void test_gaussian_statistics(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        rcase c = {"gaussian_random", d ? PE_DTYPE_FP64 : PE_DTYPE_FP32, 0, 9, "g", 1.5, 0.5, 2};
        pe_tensor *t = draw(&c);
        double mean, sd, lo, hi;
        moments(t, &mean, &sd, &lo, &hi);
        assert_true(fabs(mean - 1.5) < 5 * 0.5 / sqrt(NS));
        assert_true(fabs(sd / 0.5 - 1) < 0.01);
        /* tails: P(|z| > 2) = 0.0455, P(|z| > 3) = 0.0027 */
        int64_t beyond2 = 0, beyond3 = 0;
        for (int64_t i = 0; i < NS; i++) {
            double z = fabs(tu_get(t, i) - 1.5) / 0.5;
            beyond2 += z > 2;
            beyond3 += z > 3;
        }
        assert_true(fabs((double)beyond2 / NS - 0.0455) < 0.004);
        assert_true(fabs((double)beyond3 / NS - 0.0027) < 0.001);
        pe_tensor_free(t);
    }
}

static void test_truncated_gaussian_statistics(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        double mean = -1.0, std = 2.0;
        rcase c = {"truncated_gaussian_random", d ? PE_DTYPE_FP64 : PE_DTYPE_FP32, 0, 9, "tg", mean, std, 2};
        pe_tensor *t = draw(&c);
        double m, sd, lo, hi;
        moments(t, &m, &sd, &lo, &hi);
        /* never beyond 2 std, and the tails reach close to it */
        double lim_lo = mean - 2 * std, lim_hi = mean + 2 * std;
        if (d == 0) { lim_lo = (float)lim_lo; lim_hi = (float)lim_hi; }
        assert_true(lo >= lim_lo && hi <= lim_hi);
        assert_true(lo < mean - 1.99 * std && hi > mean + 1.99 * std);
        /* N(0,1) truncated to [-2, 2]: sd = sqrt(1 - 4 phi(2) / (Phi(2) - Phi(-2))) = 0.879626 */
        double want_sd = std * 0.8796256610342398;
        assert_true(fabs(m - mean) < 5 * want_sd / sqrt(NS));
        assert_true(fabs(sd / want_sd - 1) < 0.01);
        pe_tensor_free(t);
    }
}

static void test_random_errors(void **state) {
    (void)state;
    struct { rcase c; const char *want; } bad[] = {
        {{"uniform_random", PE_DTYPE_INT32, 0, 0, "r", -1, 1, 1}, "float32"},
        {{"uniform_random", PE_DTYPE_FP32, 0, 0, "r", 1, 1, 1}, "min < max"},
        {{"uniform_random", PE_DTYPE_FP32, 0, 0, "r", 2, 1, 1}, "min < max"},
        {{"gaussian_random", PE_DTYPE_FP32, 0, 0, "r", 0, -1, 1}, "std >= 0"},
        {{"truncated_gaussian_random", PE_DTYPE_FP64, 0, 0, "r", NAN, 1, 1}, "finite"},
    };
    pe_tensor *t = pe_tensor_new();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pe_status st = run_random(&bad[i].c, 10, t);
        assert_true(st == PE_ERR_INVALID || st == PE_ERR_UNSUPPORTED);
        if (!strstr(pe_last_error(), bad[i].want) || !strstr(pe_last_error(), bad[i].c.type))
            fail_msg("case %zu: %s", i, pe_last_error());
    }
    /* negative dims */
    pe_program *p = pe_program_new();
    pe_op *op = pe_block_add_op(&p->blocks[0], "gaussian_random");
    pe_op_add_output(op, "Out", "r");
    pe_block_add_var(&p->blocks[0], "r", PE_DTYPE_FP32, 0, NULL);
    pe_op_set_longs(op, "shape", (int64_t[]){3, -1}, 2);
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(tu_run(p, NULL, 0, (const char *[]){"r"}, 1, &out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "shape[1] = -1"));
    /* empty output is fine */
    pe_op_set_longs(&p->blocks[0].ops[0], "shape", (int64_t[]){3, 0}, 2);
    assert_int_equal(tu_run(p, NULL, 0, (const char *[]){"r"}, 1, &out), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){3, 0});
    pe_program_free(p);
    pe_tensor_free(out);
    pe_tensor_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_documented_derivation),
        cmocka_unit_test(test_inverse_cdf),
        cmocka_unit_test(test_thread_count_invariance),
        cmocka_unit_test(test_seeds),
        cmocka_unit_test(test_uniform_statistics),
        cmocka_unit_test(test_gaussian_statistics),
        cmocka_unit_test(test_truncated_gaussian_statistics),
        cmocka_unit_test(test_random_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
