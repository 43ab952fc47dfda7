/* tests/unit/test_bitwise_baseline.c — training results are bitwise what
 * they were before the architecture change (issue "Architecture for
 * distribution": stage libraries, executor split, comm backend interface).
 *
 * What: the MLP and the CNN of tests/unit/models.h (float32, momentum) train
 * 12 steps on 1 and 3 CPU places under three build strategies (the default;
 * every fusion, fuse_all_reduce_ops and the memory plan on; the sharded
 * optimizer off with the reduce strategy), with 13 rows per batch (an uneven
 * split on 3 places). A 64-bit FNV-1a hash of every parameter's bytes and of
 * each step's fetched loss must equal the hash the pre-change build printed
 * (commit f640488, `PE_PRINT_HASHES=1 build/bin/test_bitwise_baseline`),
 * with one OpenMP thread per kernel.
 *
 * The batch reaches the 3 places as a list feed of the pieces 5, 4, 4: the
 * split the hashes were recorded with, when a dict feed gave the extra rows
 * to the first places. A dict feed now gives them to the last places (4, 4,
 * 5, as Paddle does; issue 11 item 8, tests/unit/test_parallel_executor.c),
 * which changes the bits of the 3-place runs (measured: both 3-place hashes
 * differ); the list feed keeps this test about the executor's arithmetic.
 *
 * Why keyed by CPU: OpenBLAS and oneDNN pick their kernels by the CPU they
 * run on, so the bits are a property of the build *and* the CPU. The hashes
 * were recorded on one CPU kind (kCore / kIsa below); on another the test
 * prints a visible line and checks only that two runs give identical bits.
 */
#include "tests/unit/models.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

char *openblas_get_corename(void);

enum { STEPS = 12, ROWS = 13 };

typedef struct {
    const char *name;
    bool cnn;
    int places;
    int strategy; /* 0 default, 1 all fusions + memory plan, 2 no shard + reduce */
    uint64_t hash; /* recorded before the change */
} bb_case;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void strategy(pe_pe_options *o, int s) {
    pe_pe_options_default(o);
    o->loss_name = "loss";
    o->exec_strategy.num_threads = 3;
    pe_build_strategy *bs = &o->build_strategy;
    if (s == 1) {
        bs->fuse_elewise_add_act_ops = bs->fuse_all_optimizer_ops = bs->fuse_all_reduce_ops = true;
        bs->memory_optimize = bs->enable_inplace = true;
    } else if (s == 2) {
        bs->shard_optimizer = false;
        bs->reduce_strategy = PE_REDUCE_REDUCE;
    }
}

/* dst = rows [first, first + n) of src, sharing its buffer */
static void rows_view(pe_tensor *dst, const pe_tensor *src, int64_t first, int64_t n) {
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, src->dims, sizeof dims);
    dims[0] = n;
    pe_tensor_share(dst, src);
    dst->offset += (size_t)first * (size_t)pe_dims_prod(src->dims, 1, src->ndim) * pe_dtype_size(src->dtype);
    assert_int_equal(pe_tensor_set_meta(dst, src->dtype, src->ndim, dims), PE_OK);
}

static uint64_t train_hash(bool cnn, int places, int s) {
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, false);
    if (cnn) tm_cnn(&m, "img", 32);
    else tm_mlp(&m, 128, "relu", 64, "tanh");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m.startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[3] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2)};
    pe_pe_options o;
    strategy(&o, s);
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, places, m.main, scope, &o, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    const char *fetch[] = {"loss"};
    pe_tensor *loss = pe_tensor_new();
    uint64_t h = 0xcbf29ce484222325ull;
    for (int step = 0; step < STEPS; step++) {
        pe_tensor *x, *y;
        tm_batch(&m, step, ROWS, &x, &y);
        pe_feed feed[2] = {{m.input, x}, {"label", y}};
        /* the pieces the hashes were recorded with: the first ROWS % places places take a row more */
        pe_tensor *px[3], *py[3];
        pe_feed pf[3][2];
        const pe_feed *lists[3] = {pf[0], pf[1], pf[2]};
        int n_feeds[3] = {2, 2, 2};
        for (int p = 0, row0 = 0; p < places; p++) {
            int r = ROWS / places + (p < ROWS % places);
            px[p] = pe_tensor_new();
            py[p] = pe_tensor_new();
            rows_view(px[p], x, row0, r);
            rows_view(py[p], y, row0, r);
            pf[p][0] = (pe_feed){m.input, px[p]};
            pf[p][1] = (pe_feed){"label", py[p]};
            row0 += r;
        }
        pe_status st = places > 1 ? pe_run_list(pe, lists, n_feeds, places, fetch, 1, true, &loss)
                                  : pe_run(pe, feed, 2, fetch, 1, true, &loss);
        for (int p = 0; p < places; p++) {
            pe_tensor_free(px[p]);
            pe_tensor_free(py[p]);
        }
        if (st != PE_OK) fail_msg("step %d: %s", step, pe_last_error());
        h = fnv(h, pe_tensor_data(loss), pe_tensor_nbytes(loss));
        pe_tensor_free(x);
        pe_tensor_free(y);
    }
    pe_tensor *params[16];
    tm_fetch_params(&m, pe, params);
    for (int i = 0; i < m.n_params; i++) h = fnv(h, pe_tensor_data(params[i]), pe_tensor_nbytes(params[i]));
    tm_free_params(&m, params);
    pe_tensor_free(loss);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
    tm_model_free(&m);
    return h;
}

/* Recorded with the pre-change build on this CPU kind. */
static const char *const kCore = "Cooperlake";
static const int kIsa = 231;
static bb_case k_cases[] = {
    {"mlp, 1 place, default", false, 1, 0, 0xf3b61234a37c70a2ull},
    {"mlp, 3 places, default", false, 3, 0, 0x105f8b5ff0349f81ull},
    {"cnn, 1 place, default", true, 1, 0, 0xdeec817828c786afull},
    {"cnn, 3 places, default", true, 3, 0, 0x4ae2d34fe21ed832ull},
    {"mlp, 1 place, fusions + memory plan", false, 1, 1, 0xf3b61234a37c70a2ull},
    {"mlp, 3 places, fusions + memory plan", false, 3, 1, 0x105f8b5ff0349f81ull},
    {"cnn, 1 place, fusions + memory plan", true, 1, 1, 0xdeec817828c786afull},
    {"cnn, 3 places, fusions + memory plan", true, 3, 1, 0x4ae2d34fe21ed832ull},
    {"mlp, 3 places, reduce, no shard", false, 3, 2, 0x105f8b5ff0349f81ull},
    {"cnn, 3 places, reduce, no shard", true, 3, 2, 0x4ae2d34fe21ed832ull},
};

static void test_hashes(void **state) {
    (void)state;
    omp_set_num_threads(1); /* kernels get 1 thread (as ctest runs them): a place's GEMM split is part of the bits */
    const char *core = openblas_get_corename();
    int isa = (int)dnnl_get_effective_cpu_isa();
    bool print = getenv("PE_PRINT_HASHES") != NULL;
    bool same_cpu = core && !strcmp(core, kCore) && isa == kIsa;
    if (print) printf("static const char *const kCore = \"%s\";\nstatic const int kIsa = %d;\n", core ? core : "", isa);
    else if (!same_cpu)
        printf("[  SKIPPED ] hashes were recorded on OpenBLAS core %s / oneDNN isa %d; this CPU is %s / %d: "
               "checking run-to-run identity only\n", kCore, kIsa, core ? core : "?", isa);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const bb_case *c = &k_cases[i];
        uint64_t h = train_hash(c->cnn, c->places, c->strategy);
        if (print) {
            printf("    {\"%s\", %s, %d, %d, 0x%016llxull},\n", c->name, c->cnn ? "true" : "false", c->places,
                   c->strategy, (unsigned long long)h);
            continue;
        }
        if (same_cpu) {
            if (h != c->hash)
                fail_msg("%s: parameters and losses hash to 0x%016llx, before the change 0x%016llx", c->name,
                         (unsigned long long)h, (unsigned long long)c->hash);
        } else if (train_hash(c->cnn, c->places, c->strategy) != h) {
            fail_msg("%s: two identical trainings differ", c->name);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_hashes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
