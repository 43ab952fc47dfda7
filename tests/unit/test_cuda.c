/* tests/unit/test_cuda.c — the CUDA place and the CUDA elementwise kernels.
 *
 * Where a GPU exists: allocator accounting on cuda:0, host<->device and
 * device<->device round-trips, one stream per device, and every op with a
 * CUDA kernel (ops.def PE_CUDA) run through the executor on cuda:0 on random
 * inputs (broadcasting cases and odd shapes included; every dtype the CPU
 * kernel takes), compared with the same program on cpu:0: 1e-6 relative
 * for fp32, 1e-12 for fp64, exact for integers. Also: a CUDA kernel given
 * a CPU tensor fails cleanly, and a second run allocates nothing. Every
 * test needs a GPU: without one (or in a build without CUDA) each prints a
 * visible "SKIPPED: ..." line and the binary exits 77, which ctest reports
 * as skipped. What runs everywhere (an unusable CUDA place gives clear
 * errors) is tests/unit/test_cuda_places.c.
 */
#include "tests/unit/gpu_skip.h"
#include "ops/op.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [lo, hi) from a fixed-seed xorshift64*: reproducible cases. */
static double rnd(double lo, double hi) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    uint64_t r = g_rng * 0x2545f4914f6cdd1dull;
    return lo + (hi - lo) * (double)(r >> 11) / 9007199254740992.0;
}

/* Random CPU tensor: floats in [-4, 4), integers in [-1000, 1000);
 * `away_from_zero` (divisors) keeps |v| in [0.5, 3) or integers in [1, 9]. */
static pe_tensor *rand_tensor(pe_dtype dt, int ndim, const int64_t *dims, bool away_from_zero) {
    pe_tensor *t = tu_tensor(dt, ndim, dims, NULL);
    int64_t n = pe_tensor_numel(t);
    bool is_int = dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64;
    for (int64_t i = 0; i < n; i++) {
        double sign = rnd(0, 1) < 0.5 ? -1 : 1, v;
        if (is_int) v = away_from_zero ? sign * floor(rnd(1, 10)) : floor(rnd(-1000, 1000));
        else v = away_from_zero ? sign * rnd(0.5, 3.0) : rnd(-4.0, 4.0);
        switch (dt) {
        case PE_DTYPE_FP32: ((float *)pe_tensor_data(t))[i] = (float)v; break;
        case PE_DTYPE_FP64: ((double *)pe_tensor_data(t))[i] = v; break;
        case PE_DTYPE_INT32: ((int32_t *)pe_tensor_data(t))[i] = (int32_t)v; break;
        default: ((int64_t *)pe_tensor_data(t))[i] = (int64_t)v; break;
        }
    }
    return t;
}

/* Runs block 0 of p on `place` in a fresh scope and fetches "out" into *out. */
static pe_status run_on(pe_place place, const pe_program *p, const pe_feed *feeds, int n_feeds, pe_tensor *out) {
    pe_scope *scope = pe_scope_new(NULL);
    assert_non_null(scope);
    pe_executor *ex = pe_executor_new(place);
    if (!ex) fail_msg("pe_executor_new: %s", pe_last_error());
    const char *fetch[] = {"out"};
    pe_status st = pe_executor_run(ex, p, 0, scope, feeds, n_feeds, fetch, 1, &out);
    if (st != PE_OK) print_message("run_on: %s\n", pe_last_error());
    pe_executor_free(ex);
    pe_scope_free(scope);
    return st;
}

/* Asserts same dtype and dims, and |g - w| <= tol * (1 + |w|) everywhere. */
static void assert_tensors_close(const pe_tensor *got, const pe_tensor *want, double tol, const char *what) {
    assert_int_equal(got->dtype, want->dtype);
    assert_true(pe_place_eq(got->place, pe_place_cpu(0)));
    tu_assert_dims(got, want->ndim, want->dims);
    int64_t n = pe_tensor_numel(want);
    for (int64_t i = 0; i < n; i++) {
        double g = tu_get(got, i), w = tu_get(want, i);
        if (!(fabs(g - w) <= tol * (1.0 + fabs(w))))
            fail_msg("%s: element %lld: cuda %.17g, cpu %.17g", what, (long long)i, g, w);
    }
}

/* Waits for cuda:0's stream (the GPU tests only run in CUDA builds). */
static pe_status sync0(void) {
#ifdef PE_WITH_CUDA
    return pe_cuda_sync(0);
#else
    return PE_ERR_UNSUPPORTED;
#endif
}

/* fp32: 1e-6 relative; fp64: 1e-12; integers: exact. */
static double tol_of(pe_dtype dt) {
    return dt == PE_DTYPE_FP32 ? 1e-6 : dt == PE_DTYPE_FP64 ? 1e-12 : 0.0;
}

/* ---- GPU only -------------------------------------------------------------- */

static void test_cuda_alloc_accounting(void **state) {
    (void)state;
    TU_NEED_GPUS(1, "test_cuda");
    pe_place p = pe_place_cuda(0);
    pe_alloc_stats s0 = pe_alloc_get_stats(p);
    void *a = pe_place_alloc(p, 1000);
    if (!a) fail_msg("pe_place_alloc(cuda:0): %s", pe_last_error());
    assert_int_equal((uintptr_t)a % 64, 0);
    void *b = pe_place_alloc(p, 24);
    assert_non_null(b);
    pe_alloc_stats s1 = pe_alloc_get_stats(p);
    assert_int_equal(s1.bytes_in_use - s0.bytes_in_use, 1024);
    assert_int_equal(s1.n_allocs - s0.n_allocs, 2);
    assert_true(s1.peak_bytes >= s1.bytes_in_use);
    pe_place_free(p, a, 1000);
    pe_place_free(p, b, 24);
    pe_alloc_stats s2 = pe_alloc_get_stats(p);
    assert_int_equal(s2.bytes_in_use, s0.bytes_in_use);
    assert_int_equal(s2.n_frees - s0.n_frees, 2);
    /* CUDA bytes are not counted on the CPU place of the same id. */
    pe_alloc_stats c0 = pe_alloc_get_stats(pe_place_cpu(0));
    pe_tensor *t = pe_tensor_new();
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP64, 2, (int64_t[]){3, 5}, p), PE_OK);
    assert_true(pe_place_eq(t->place, p));
    assert_int_equal(pe_alloc_get_stats(p).bytes_in_use - s0.bytes_in_use, 120);
    assert_int_equal(pe_alloc_get_stats(pe_place_cpu(0)).bytes_in_use, c0.bytes_in_use);
    pe_tensor_free(t);
    assert_int_equal(pe_alloc_get_stats(p).bytes_in_use, s0.bytes_in_use);
}

static void test_cuda_copy_roundtrip(void **state) {
    (void)state;
    TU_NEED_GPUS(1, "test_cuda");
    pe_place g0 = pe_place_cuda(0);
    pe_tensor *h = rand_tensor(PE_DTYPE_FP64, 2, (int64_t[]){7, 13}, false);
    pe_tensor *d = pe_tensor_new(), *d2 = pe_tensor_new(), *back = pe_tensor_new();
    assert_int_equal(pe_tensor_copy(d, h, g0), PE_OK);                  /* H2D */
    assert_true(pe_place_eq(d->place, g0));
    assert_int_equal(pe_tensor_copy(d2, d, g0), PE_OK);                 /* D2D */
    assert_ptr_not_equal(pe_tensor_data(d2), pe_tensor_data(d));
    assert_int_equal(pe_tensor_copy(back, d2, pe_place_cpu(0)), PE_OK); /* D2H */
    tu_assert_dims(back, 2, (int64_t[]){7, 13});
    assert_memory_equal(pe_tensor_data(back), pe_tensor_data(h), pe_tensor_nbytes(h));
    /* A sub-range at an odd byte offset, through the place-to-place copy. */
    unsigned char src[37], dst[37] = {0};
    for (int i = 0; i < 37; i++) src[i] = (unsigned char)(i * 7 + 1);
    assert_int_equal(pe_memcpy_places((char *)pe_tensor_data(d) + 3, g0, src, pe_place_cpu(0), 37), PE_OK);
    assert_int_equal(pe_memcpy_places(dst, pe_place_cpu(0), (char *)pe_tensor_data(d) + 3, g0, 37), PE_OK);
    assert_memory_equal(dst, src, 37);
    assert_int_equal(sync0(), PE_OK);
    if (tu_gpu_count() >= 2) { /* peer copy cuda:0 -> cuda:1 -> host */
        pe_tensor *d1 = pe_tensor_new(), *back1 = pe_tensor_new();
        assert_int_equal(pe_tensor_copy(d1, d2, pe_place_cuda(1)), PE_OK);
        assert_int_equal(pe_tensor_copy(back1, d1, pe_place_cpu(0)), PE_OK);
        assert_memory_equal(pe_tensor_data(back1), pe_tensor_data(h), pe_tensor_nbytes(h));
        pe_tensor_free(d1);
        pe_tensor_free(back1);
    }
    pe_tensor_free(h);
    pe_tensor_free(d);
    pe_tensor_free(d2);
    pe_tensor_free(back);
}

#ifdef PE_WITH_CUDA
static void *stream_of_0(void *arg) {
    *(void **)arg = pe_cuda_stream(0);
    return NULL;
}
#endif

static void test_cuda_stream_per_device(void **state) {
    (void)state;
    TU_NEED_GPUS(1, "test_cuda");
#ifdef PE_WITH_CUDA
    /* Lazily created once, under concurrency: every thread sees the same stream. */
    enum { T = 8 };
    pthread_t th[T];
    void *got[T];
    for (int i = 0; i < T; i++) assert_int_equal(pthread_create(&th[i], NULL, stream_of_0, &got[i]), 0);
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    void *s = pe_cuda_stream(0);
    assert_non_null(s);
    for (int i = 0; i < T; i++) assert_ptr_equal(got[i], s);
    if (tu_gpu_count() >= 2) assert_ptr_not_equal(pe_cuda_stream(1), s);
    assert_int_equal(pe_cuda_sync(0), PE_OK);
#endif
}

/* Binary cases: X dims, Y dims, axis, the expected Out dims. */
typedef struct {
    int xn; int64_t xd[4];
    int yn; int64_t yd[4];
    int axis;
    int on; int64_t od[4];
} bin_case;

static const bin_case k_bin_cases[] = {
    {2, {3, 4}, 2, {3, 4}, -1, 2, {3, 4}},                   /* same shape */
    {1, {1023}, 1, {1023}, -1, 1, {1023}},                   /* odd length */
    {2, {5, 7}, 1, {1}, -1, 2, {5, 7}},                      /* scalar Y */
    {2, {257, 129}, 1, {129}, -1, 2, {257, 129}},            /* row bias, many blocks */
    {4, {2, 3, 4, 5}, 1, {3}, 1, 4, {2, 3, 4, 5}},           /* per-channel, axis 1 */
    {3, {2, 3, 4}, 2, {3, 4}, 1, 3, {2, 3, 4}},              /* trailing block, axis 1 */
    {3, {2, 1, 4}, 2, {3, 1}, -1, 3, {2, 3, 4}},             /* both broadcast */
    {2, {6, 1}, 2, {1, 7}, -1, 2, {6, 7}},                   /* outer product shape */
    {2, {2, 3}, 2, {3, 1}, 1, 2, {2, 3}},                    /* Paddle: trailing 1 dropped */
    {3, {1, 5, 1}, 3, {4, 5, 3}, -1, 3, {4, 5, 3}},          /* X broadcast */
};

static void run_binary_cases(const char *type) {
    static const pe_dtype dts[] = {PE_DTYPE_FP32, PE_DTYPE_FP64, PE_DTYPE_INT32, PE_DTYPE_INT64};
    bool div = !strcmp(type, "elementwise_div");
    for (size_t c = 0; c < sizeof k_bin_cases / sizeof k_bin_cases[0]; c++)
        for (int k = 0; k < 4; k++) {
            const bin_case *bc = &k_bin_cases[c];
            pe_dtype dt = dts[k];
            pe_tensor *x = rand_tensor(dt, bc->xn, bc->xd, false);
            pe_tensor *y = rand_tensor(dt, bc->yn, bc->yd, div);
            pe_program *p = pe_program_new();
            tu_declare(p, "x", x);
            tu_declare(p, "y", y);
            assert_non_null(pe_block_add_var(&p->blocks[0], "out", dt, bc->on, bc->od));
            pe_op *op = pe_block_add_op(&p->blocks[0], type);
            assert_int_equal(pe_op_add_input(op, "X", "x"), PE_OK);
            assert_int_equal(pe_op_add_input(op, "Y", "y"), PE_OK);
            assert_int_equal(pe_op_add_output(op, "Out", "out"), PE_OK);
            assert_int_equal(pe_op_set_int(op, "axis", bc->axis), PE_OK);
            pe_feed feeds[] = {{"x", x}, {"y", y}};
            pe_tensor *want = pe_tensor_new(), *got = pe_tensor_new();
            assert_int_equal(run_on(pe_place_cpu(0), p, feeds, 2, want), PE_OK);
            tu_assert_dims(want, bc->on, bc->od);
            assert_int_equal(run_on(pe_place_cuda(0), p, feeds, 2, got), PE_OK);
            char what[96];
            snprintf(what, sizeof what, "%s %s case %zu", type, pe_dtype_name(dt), c);
            assert_tensors_close(got, want, tol_of(dt), what);
            pe_tensor_free(want);
            pe_tensor_free(got);
            pe_program_free(p);
            pe_tensor_free(x);
            pe_tensor_free(y);
        }
}

static void test_cuda_elementwise_add(void **state) { (void)state; TU_NEED_GPUS(1, "test_cuda"); run_binary_cases("elementwise_add"); }
static void test_cuda_elementwise_sub(void **state) { (void)state; TU_NEED_GPUS(1, "test_cuda"); run_binary_cases("elementwise_sub"); }
static void test_cuda_elementwise_mul(void **state) { (void)state; TU_NEED_GPUS(1, "test_cuda"); run_binary_cases("elementwise_mul"); }
static void test_cuda_elementwise_div(void **state) { (void)state; TU_NEED_GPUS(1, "test_cuda"); run_binary_cases("elementwise_div"); }

/* Unary cases: op, X dims, scale attrs (scale ops only). */
typedef struct {
    const char *type;
    int xn; int64_t xd[4];
    double scale, bias;
    bool bias_after_scale;
} un_case;

static const un_case k_un_cases[] = {
    {"relu", 3, {3, 5, 7}, 0, 0, true},
    {"relu", 1, {100003}, 0, 0, true},
    {"sigmoid", 2, {37, 129}, 0, 0, true},
    {"sigmoid", 1, {1}, 0, 0, true},
    {"tanh", 2, {37, 129}, 0, 0, true},
    {"tanh", 4, {2, 3, 5, 7}, 0, 0, true},
    {"scale", 2, {37, 129}, 2.5, -0.75, true},
    {"scale", 2, {37, 129}, -0.3, 1.25, false},
    {"scale", 3, {4, 5, 6}, 3.0, -2.0, false},
    {"scale", 1, {5}, 1.0, 0.0, true},
};

static void test_cuda_unary_ops(void **state) {
    (void)state;
    TU_NEED_GPUS(1, "test_cuda");
    static const pe_dtype dts[] = {PE_DTYPE_FP32, PE_DTYPE_FP64, PE_DTYPE_INT32, PE_DTYPE_INT64};
    for (size_t c = 0; c < sizeof k_un_cases / sizeof k_un_cases[0]; c++)
        for (int k = 0; k < 4; k++) {
            const un_case *uc = &k_un_cases[c];
            pe_dtype dt = dts[k];
            if (k >= 2 && strcmp(uc->type, "scale")) continue; /* activations: floats only */
            pe_tensor *x = rand_tensor(dt, uc->xn, uc->xd, false);
            pe_program *p = pe_program_new();
            tu_declare(p, "x", x);
            assert_non_null(pe_block_add_var(&p->blocks[0], "out", dt, uc->xn, uc->xd));
            pe_op *op = pe_block_add_op(&p->blocks[0], uc->type);
            assert_int_equal(pe_op_add_input(op, "X", "x"), PE_OK);
            assert_int_equal(pe_op_add_output(op, "Out", "out"), PE_OK);
            if (!strcmp(uc->type, "scale")) {
                assert_int_equal(pe_op_set_float(op, "scale", uc->scale), PE_OK);
                assert_int_equal(pe_op_set_float(op, "bias", uc->bias), PE_OK);
                assert_int_equal(pe_op_set_bool(op, "bias_after_scale", uc->bias_after_scale), PE_OK);
            }
            pe_feed feeds[] = {{"x", x}};
            pe_tensor *want = pe_tensor_new(), *got = pe_tensor_new();
            assert_int_equal(run_on(pe_place_cpu(0), p, feeds, 1, want), PE_OK);
            assert_int_equal(run_on(pe_place_cuda(0), p, feeds, 1, got), PE_OK);
            char what[96];
            snprintf(what, sizeof what, "%s %s case %zu", uc->type, pe_dtype_name(dt), c);
            assert_tensors_close(got, want, tol_of(dt), what);
            pe_tensor_free(want);
            pe_tensor_free(got);
            pe_program_free(p);
            pe_tensor_free(x);
        }
}

/* An MLP-style chain on cuda:0 (bias add -> relu -> scale -> sigmoid),
 * run twice with one executor: same result as on cpu:0, and the second
 * run allocates nothing on the GPU. */
static void test_cuda_executor_chain_steady_state(void **state) {
    (void)state;
    TU_NEED_GPUS(1, "test_cuda");
    pe_tensor *x = rand_tensor(PE_DTYPE_FP32, 2, (int64_t[]){16, 33}, false);
    pe_tensor *b = rand_tensor(PE_DTYPE_FP32, 1, (int64_t[]){33}, false);
    pe_program *p = pe_program_new();
    pe_block *blk = &p->blocks[0];
    tu_declare(p, "x", x);
    tu_declare(p, "b", b);
    const char *chain[][3] = {{"elementwise_add", "x", "h1"}, {"relu", "h1", "h2"},
                              {"scale", "h2", "h3"}, {"sigmoid", "h3", "out"}};
    for (int i = 0; i < 4; i++) {
        assert_non_null(pe_block_add_var(blk, chain[i][2], PE_DTYPE_FP32, 2, (int64_t[]){16, 33}));
        pe_op *op = pe_block_add_op(blk, chain[i][0]);
        assert_int_equal(pe_op_add_input(op, "X", chain[i][1]), PE_OK);
        if (i == 0) assert_int_equal(pe_op_add_input(op, "Y", "b"), PE_OK);
        if (i == 2) assert_int_equal(pe_op_set_float(op, "scale", 0.5), PE_OK);
        assert_int_equal(pe_op_add_output(op, "Out", chain[i][2]), PE_OK);
    }
    pe_feed feeds[] = {{"x", x}, {"b", b}};
    const char *fetch[] = {"out"};
    pe_tensor *want = pe_tensor_new(), *got = pe_tensor_new();
    assert_int_equal(run_on(pe_place_cpu(0), p, feeds, 2, want), PE_OK);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cuda(0));
    if (!ex) fail_msg("pe_executor_new(cuda:0): %s", pe_last_error());
    assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 2, fetch, 1, &got), PE_OK);
    assert_tensors_close(got, want, 1e-6, "chain, first run");
    pe_alloc_stats s0 = pe_alloc_get_stats(pe_place_cuda(0));
    assert_int_equal(pe_executor_run(ex, p, 0, scope, feeds, 2, fetch, 1, &got), PE_OK);
    assert_tensors_close(got, want, 1e-6, "chain, second run");
    assert_int_equal(pe_alloc_get_stats(pe_place_cuda(0)).n_allocs, s0.n_allocs);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_tensor_free(want);
    pe_tensor_free(got);
    pe_program_free(p);
    pe_tensor_free(x);
    pe_tensor_free(b);
}

/* A CUDA kernel handed a CPU tensor fails with a message naming both places
 * instead of reading host memory as device memory. */
static void test_cuda_kernel_rejects_cpu_input(void **state) {
    (void)state;
    TU_NEED_GPUS(1, "test_cuda");
    pe_program *p = pe_program_new();
    pe_op *op = pe_block_add_op(&p->blocks[0], "relu");
    assert_int_equal(pe_op_add_input(op, "X", "x"), PE_OK);
    assert_int_equal(pe_op_add_output(op, "Out", "out"), PE_OK);
    pe_scope *scope = pe_scope_new(NULL);
    pe_tensor *x = pe_scope_var(scope, "x");
    assert_int_equal(pe_tensor_resize(x, PE_DTYPE_FP32, 1, (int64_t[]){8}, pe_place_cpu(0)), PE_OK);
    memset(pe_tensor_data(x), 0, pe_tensor_nbytes(x));
    pe_op_ctx ctx;
    assert_int_equal(pe_op_ctx_init(&ctx, &p->blocks[0].ops[0], scope, pe_place_cuda(0)), PE_OK);
    assert_int_equal(pe_op_run(&ctx), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "cpu:0"));
    assert_non_null(strstr(pe_last_error(), "cuda:0"));
    pe_op_ctx_release(&ctx);
    assert_int_equal(sync0(), PE_OK); /* nothing bad was queued */
    pe_scope_free(scope);
    pe_program_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_alloc_accounting),
        cmocka_unit_test(test_cuda_copy_roundtrip),
        cmocka_unit_test(test_cuda_stream_per_device),
        cmocka_unit_test(test_cuda_elementwise_add),
        cmocka_unit_test(test_cuda_elementwise_sub),
        cmocka_unit_test(test_cuda_elementwise_mul),
        cmocka_unit_test(test_cuda_elementwise_div),
        cmocka_unit_test(test_cuda_unary_ops),
        cmocka_unit_test(test_cuda_executor_chain_steady_state),
        cmocka_unit_test(test_cuda_kernel_rejects_cpu_input),
    };
    return TU_RUN_GROUP(tests);
}
