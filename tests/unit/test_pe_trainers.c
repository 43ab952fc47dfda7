/* tests/unit/test_pe_trainers.c — the ParallelExecutor across processes
 * (num_trainers > 1, executor/trainers.c), one trainer per MPI process:
 *
 *     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *       mpirun --oversubscribe -np 3 --mca btl self,vader build/bin/test_pe_trainers
 *
 * (ctest runs it with -np 2 and -np 3 through tests/unit/run_mpi.sh.)
 *   - R trainers x 1 place, each fed its shard of the global batch, train
 *     the MLP (float32, momentum) to the same bits as one process with R
 *     places on the whole batch (the sums are in the same order: places,
 *     then processes), with per-gradient allreduce and with
 *     fuse_all_reduce_ops buckets; the trainers start from different seeds
 *     and end identical (the persistables come from trainer 0);
 *   - R trainers x 2 places (float64) match one process with 2R places
 *     (allclose: the sums are grouped per process);
 *   - fuse_all_reduce_ops buckets, reduce_strategy reduce (owners among
 *     the global ranks), shard_optimizer (shards over the global ranks) and
 *     merged optimizer ops, R x 1 and R x 2, MLP (momentum; adam in
 *     float64) and CNN: every persistable of the caller's scope
 *     (parameters, velocities, moments: what a checkpoint saves) allclose
 *     to one process with
 *     R x P places, the same bits on every trainer and run to run;
 *   - shard_optimizer with the gradient fetched: it comes back summed over
 *     the world, and training is unchanged;
 *   - a wrong num_trainers, trainer ids that are not the ranks, and a
 *     program that differs on one trainer are errors on every trainer,
 *     naming the problem, and nothing hangs;
 *   - with ExecutionStrategy.timeline_path each trainer writes
 *     <prefix>.rank<trainer_id>.json: pid = its rank, process "trainer N",
 *     ops and the allreduces (completed in the MPI progress thread's
 *     callbacks) of every step (the file's checks: test_timeline.c).
 */
#ifdef PE_WITH_MPI
#include "tests/unit/models.h"
#include "tests/unit/mpi_test.h"

#include <math.h>
#include <unistd.h>

enum { STEPS = 6, PER_PLACE = 4 };

static tm_model model(pe_dtype dt, uint64_t startup_seed, int hidden) {
    tm_model m = tm_model_new(dt, 0.0, false);
    tm_mlp(&m, hidden, "relu", 16, "tanh");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    m.startup->random_seed = (int64_t)startup_seed; /* the main program's seed stays: programs must agree */
    return m;
}

typedef struct {
    int places;       /* per process */
    int trainers;     /* num_trainers (1: one process on the whole batch) */
    int trainer_id;
    bool buckets;     /* fuse_all_reduce_ops */
    bool reduce;      /* reduce_strategy reduce */
    bool no_shard;    /* shard_optimizer off (default on) */
    bool merge;       /* fuse_all_optimizer_ops */
    const char *fetch_grad; /* also fetched every step, into grad_out (place after place) */
    pe_tensor *grad_out;
    int64_t row0, rows; /* this process's rows of each global batch */
    const char *timeline; /* ExecutionStrategy.timeline_path (NULL: off) */
} run_cfg;

/* Every persistable of the main program as the caller's scope holds it
 * after the run (parameters, velocities, learning rate): what a
 * checkpoint saves. */
typedef struct {
    int n;
    const char *name[64];
    pe_tensor *t[64];
} state;

static void capture(const tm_model *m, pe_parallel_executor *pe, state *s) {
    const pe_block *b = &m->main->blocks[0];
    s->n = 0;
    for (int i = 0; i < b->n_vars && s->n < 64; i++) {
        const pe_tensor *t = b->vars[i].persistable ? pe_scope_find_var(pe_place_scope(pe, 0), b->vars[i].name) : NULL;
        if (!t || !t->buf) continue;
        s->name[s->n] = b->vars[i].name;
        s->t[s->n] = pe_tensor_new();
        assert_int_equal(pe_tensor_copy(s->t[s->n], t, pe_place_cpu(0)), PE_OK);
        s->n++;
    }
}

static void state_free(state *s) {
    for (int i = 0; i < s->n; i++) pe_tensor_free(s->t[i]);
    s->n = 0;
}

/* Trains STEPS steps; params_out gets place 0's parameters. Returns the
 * construction's status (the run must then succeed). */
static pe_status train_state(const tm_model *m, const run_cfg *c, pe_tensor **params_out, state *st_out) {
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m->startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[8];
    for (int i = 0; i < 8; i++) pl[i] = pe_place_cpu(i);
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.num_trainers = c->trainers;
    o.trainer_id = c->trainer_id;
    o.build_strategy.fuse_all_reduce_ops = c->buckets;
    o.build_strategy.reduce_strategy = c->reduce ? PE_REDUCE_REDUCE : PE_REDUCE_ALL_REDUCE;
    if (c->no_shard) o.build_strategy.shard_optimizer = false; /* else its gradients stay out of buckets */
    o.build_strategy.shard_across_trainers = !c->no_shard;     /* sharded across the trainers too */
    o.build_strategy.fuse_all_optimizer_ops = c->merge;
    o.exec_strategy.num_threads = 2 * c->places;
    o.exec_strategy.timeline_path = c->timeline;
    pe_parallel_executor *pe;
    pe_status st = pe_parallel_executor_new(pl, c->places, m->main, scope, &o, &pe);
    if (st == PE_OK) {
        const char *fetch[] = {"loss", c->fetch_grad};
        pe_tensor *loss = pe_tensor_new(), *outs[2] = {loss, c->grad_out};
        int64_t global = (int64_t)g_size * c->places * PER_PLACE;
        for (int step = 0; step < STEPS; step++) {
            pe_tensor *x, *y;
            tm_batch(m, step, global, &x, &y);
            /* this process's rows of the global batch, as views */
            pe_tensor xs = *x, ys = *y;
            size_t xrow = pe_tensor_nbytes(x) / (size_t)global, yrow = pe_tensor_nbytes(y) / (size_t)global;
            xs.dims[0] = ys.dims[0] = c->rows;
            xs.offset += (size_t)c->row0 * xrow;
            ys.offset += (size_t)c->row0 * yrow;
            pe_feed feed[2] = {{m->input, &xs}, {"label", &ys}};
            if (pe_run(pe, feed, 2, fetch, c->fetch_grad ? 2 : 1, true, outs) != PE_OK)
                fail_msg("rank %d step %d: %s", g_rank, step, pe_last_error());
            pe_tensor_free(x);
            pe_tensor_free(y);
        }
        if (params_out) tm_fetch_params(m, pe, params_out);
        if (st_out) capture(m, pe, st_out);
        pe_tensor_free(loss);
        pe_parallel_executor_free(pe);
    }
    pe_executor_free(ex);
    pe_scope_free(scope);
    return st;
}

static pe_status train(const tm_model *m, const run_cfg *c, pe_tensor **params_out) {
    return train_state(m, c, params_out, NULL);
}

static uint64_t params_hash(const tm_model *m, pe_tensor **p) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < m->n_params; i++) {
        const unsigned char *b = pe_tensor_data(p[i]);
        for (size_t k = 0; k < pe_tensor_nbytes(p[i]); k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    return h;
}

static void assert_same_on_every_rank(uint64_t h, const char *what) {
    uint64_t all[64];
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < g_size; r++)
        if (all[r] != h) fail_msg("%s: rank %d's parameters differ from rank %d's", what, r, g_rank);
}

/* R x 1 place == 1 process x R places, bitwise; identical on every rank. */
static void test_bitwise_with_one_place_each(void **state) {
    (void)state;
    for (int buckets = 0; buckets < 2; buckets++) {
        tm_model ref_m = model(PE_DTYPE_FP32, 7, 32);
        tm_model m = model(PE_DTYPE_FP32, 7 + (uint64_t)g_rank, 32); /* other seeds: trainer 0's values win */
        pe_tensor *ref[16], *got[16];
        run_cfg one = {.places = g_size, .trainers = 1, .buckets = buckets, .row0 = 0,
                       .rows = (int64_t)g_size * PER_PLACE};
        run_cfg dist = {.places = 1, .trainers = g_size, .trainer_id = g_rank, .buckets = buckets,
                        .row0 = (int64_t)g_rank * PER_PLACE, .rows = PER_PLACE};
        assert_int_equal(train(&ref_m, &one, ref), PE_OK);
        if (train(&m, &dist, got) != PE_OK) fail_msg("rank %d: %s", g_rank, pe_last_error());
        for (int i = 0; i < m.n_params; i++)
            if (pe_tensor_nbytes(got[i]) != pe_tensor_nbytes(ref[i]) ||
                memcmp(pe_tensor_data(got[i]), pe_tensor_data(ref[i]), pe_tensor_nbytes(ref[i])))
                fail_msg("rank %d, %s: %s differs from one process with %d places", g_rank,
                         buckets ? "buckets" : "per gradient", m.params[i], g_size);
        assert_same_on_every_rank(params_hash(&m, got), "R x 1 place");
        tm_free_params(&m, got);
        tm_free_params(&ref_m, ref);
        tm_model_free(&m);
        tm_model_free(&ref_m);
    }
}

/* R x 2 places (float64) ~ 1 process x 2R places. */
static void test_two_places_each(void **state) {
    (void)state;
    if (2 * g_size > 8) return;
    tm_model m = model(PE_DTYPE_FP64, 11, 24);
    pe_tensor *ref[16], *got[16];
    run_cfg one = {.places = 2 * g_size, .trainers = 1, .row0 = 0, .rows = (int64_t)g_size * 2 * PER_PLACE};
    run_cfg dist = {.places = 2, .trainers = g_size, .trainer_id = g_rank, .row0 = (int64_t)g_rank * 2 * PER_PLACE,
                    .rows = 2 * PER_PLACE};
    assert_int_equal(train(&m, &one, ref), PE_OK);
    if (train(&m, &dist, got) != PE_OK) fail_msg("rank %d: %s", g_rank, pe_last_error());
    for (int i = 0; i < m.n_params; i++)
        for (int64_t e = 0; e < pe_tensor_numel(ref[i]); e++) {
            double a = tu_get(got[i], e), b = tu_get(ref[i], e);
            if (fabs(a - b) > 1e-12 * fabs(b) + 1e-15)
                fail_msg("rank %d: %s[%lld] = %.17g, one process %.17g", g_rank, m.params[i], (long long)e, a, b);
        }
    assert_same_on_every_rank(params_hash(&m, got), "R x 2 places");
    tm_free_params(&m, got);
    tm_free_params(&m, ref);
    tm_model_free(&m);
}

static uint64_t state_hash(const state *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < s->n; i++) {
        const unsigned char *b = pe_tensor_data(s->t[i]);
        for (size_t k = 0; k < pe_tensor_nbytes(s->t[i]); k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    return h;
}

/* got ~ want, var by var (rtol; fp64 tighter), naming the first difference. */
static void assert_state_close(const state *got, const state *want, double rtol, const char *what) {
    if (got->n != want->n) fail_msg("rank %d, %s: %d persistables, the reference %d", g_rank, what, got->n, want->n);
    for (int i = 0; i < want->n; i++) {
        if (strcmp(got->name[i], want->name[i]) || pe_tensor_numel(got->t[i]) != pe_tensor_numel(want->t[i]))
            fail_msg("rank %d, %s: persistable %d is '%s', the reference's '%s'", g_rank, what, i, got->name[i],
                     want->name[i]);
        double scale = 0;
        for (int64_t e = 0; e < pe_tensor_numel(want->t[i]); e++) scale = fmax(scale, fabs(tu_get(want->t[i], e)));
        for (int64_t e = 0; e < pe_tensor_numel(want->t[i]); e++) {
            double a = tu_get(got->t[i], e), b = tu_get(want->t[i], e);
            if (!(fabs(a - b) <= rtol * fabs(b) + rtol * 1e-2 * scale))
                fail_msg("rank %d, %s: %s[%lld] = %.9g, one process %.9g", g_rank, what, want->name[i], (long long)e,
                         a, b);
        }
    }
}

/* fuse_all_reduce_ops buckets, the reduce strategy, the sharded optimizer
 * and merged optimizer ops (alone and with reduce, where they are not
 * applied) across R trainers x P places (1 and 2), MLP (64 hidden: its
 * first weight splits into 3 shards) with momentum and adam (its beta
 * powers too; in float64: adam's m / sqrt(v) turns float32 rounding of
 * near-zero gradients, summed per process with 2 places, into 1e-4
 * relative), CNN, float32 and float64: every
 * persistable of the caller's scope (parameters, velocities: what a
 * checkpoint saves) ~ one process with R x P places and all_reduce on the
 * global batch (allclose), the same bits on every trainer, and the same
 * bits run to run. */
static void test_strategies(void **state_) {
    (void)state_;
    static const struct { bool cnn; pe_dtype dt; pe_optimizer_kind opt; } models[] = {
        {false, PE_DTYPE_FP32, PE_OPT_MOMENTUM}, {true, PE_DTYPE_FP32, PE_OPT_MOMENTUM},
        {false, PE_DTYPE_FP64, PE_OPT_MOMENTUM}, {false, PE_DTYPE_FP64, PE_OPT_ADAM}};
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++)
        for (int P = 1; P <= 2; P++) {
            if (P * g_size > 8) continue;
            tm_model m = tm_model_new(models[mi].dt, 0.0, false);
            if (models[mi].cnn) tm_cnn(&m, "img", 16);
            else tm_mlp(&m, 64, "relu", 16, "tanh");
            tm_minimize(&m, models[mi].opt, models[mi].opt == PE_OPT_ADAM ? 0.01 : 0.05, NULL, 0);
            double rtol = models[mi].dt == PE_DTYPE_FP64 ? 1e-11 : 1e-5;
            state ref, got, again;
            run_cfg one = {.places = P * g_size, .trainers = 1, .row0 = 0, .rows = (int64_t)g_size * P * PER_PLACE};
            assert_int_equal(train_state(&m, &one, NULL, &ref), PE_OK);
            static const char *const modes[] = {"buckets", "reduce", "shard_optimizer", "merged optimizer ops",
                                                "reduce + merged optimizer ops"};
            for (int mode = 0; mode < 5; mode++) {
                run_cfg dist = {.places = P, .trainers = g_size, .trainer_id = g_rank, .buckets = mode == 0,
                                .no_shard = mode == 0 || mode == 3, .reduce = mode == 1 || mode == 4,
                                .merge = mode >= 3, .row0 = (int64_t)g_rank * P * PER_PLACE, .rows = P * PER_PLACE};
                char what[160];
                snprintf(what, sizeof what, "%s %s %s, %d trainers x %d places, %s", models[mi].cnn ? "CNN" : "MLP",
                         pe_dtype_name(models[mi].dt), models[mi].opt == PE_OPT_ADAM ? "adam" : "momentum", g_size,
                         P, modes[mode]);
                if (train_state(&m, &dist, NULL, &got) != PE_OK) fail_msg("rank %d, %s: %s", g_rank, what, pe_last_error());
                assert_state_close(&got, &ref, rtol, what);
                assert_same_on_every_rank(state_hash(&got), what);
                assert_int_equal(train_state(&m, &dist, NULL, &again), PE_OK);
                if (state_hash(&again) != state_hash(&got)) fail_msg("rank %d, %s: not bitwise repeatable", g_rank, what);
                state_free(&got);
                state_free(&again);
            }
            state_free(&ref);
            tm_model_free(&m);
        }
}

/* shard_optimizer across trainers with the gradient fetched every step:
 * it comes back summed over the world (an allreduce instead of the
 * reduce-scatter), and training is unchanged. */
static void test_fetch_sharded_gradient(void **state_) {
    (void)state_;
    tm_model m = tm_model_new(PE_DTYPE_FP64, 0.0, false);
    tm_mlp(&m, 64, "relu", 16, "tanh");
    tm_minimize(&m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    const char *grad = "fc_0.w_0" PE_GRAD_SUFFIX;
    state ref, got;
    run_cfg one = {.places = g_size, .trainers = 1, .rows = (int64_t)g_size * PER_PLACE, .fetch_grad = grad,
                   .grad_out = pe_tensor_new()};
    run_cfg dist = {.places = 1, .trainers = g_size, .trainer_id = g_rank, .row0 = (int64_t)g_rank * PER_PLACE,
                    .rows = PER_PLACE, .fetch_grad = grad, .grad_out = pe_tensor_new()};
    assert_int_equal(train_state(&m, &one, NULL, &ref), PE_OK);
    if (train_state(&m, &dist, NULL, &got) != PE_OK) fail_msg("rank %d: %s", g_rank, pe_last_error());
    assert_state_close(&got, &ref, 1e-11, "shard_optimizer, gradient fetched");
    int64_t n = pe_tensor_numel(dist.grad_out); /* one place: its copy */
    assert_int_equal(n, 784 * 64);
    for (int64_t e = 0; e < n; e++) {
        double a = tu_get(dist.grad_out, e), b = tu_get(one.grad_out, e); /* the reference's place 0 */
        if (!(fabs(a - b) <= 1e-11 * fabs(b) + 1e-15))
            fail_msg("rank %d: fetched %s[%lld] = %.17g, one process %.17g", g_rank, grad, (long long)e, a, b);
    }
    state_free(&got);
    state_free(&ref);
    pe_tensor_free(one.grad_out);
    pe_tensor_free(dist.grad_out);
    tm_model_free(&m);
}

/* Every trainer gets the error, none hangs. */
static void expect_error(const tm_model *m, int trainers, int trainer_id, const char *needle) {
    pe_tensor *p[16];
    run_cfg c = {.places = 1, .trainers = trainers, .trainer_id = trainer_id, .row0 = 0, .rows = PER_PLACE};
    if (train(m, &c, p) == PE_OK) fail_msg("rank %d: no error (expected '%s')", g_rank, needle);
    if (!strstr(pe_last_error(), needle)) fail_msg("rank %d: '%s' does not say '%s'", g_rank, pe_last_error(), needle);
}

static void test_world_mismatches(void **state) {
    (void)state;
    tm_model m = model(PE_DTYPE_FP32, 7, 32);
    expect_error(&m, g_size + 1, g_rank, "processes were launched");
    expect_error(&m, g_size, (g_rank + 1) % g_size, "trainer_id must be its rank");
    tm_model other = model(PE_DTYPE_FP32, 7, g_rank == g_size - 1 ? 48 : 32); /* the last trainer's differs */
    expect_error(&other, g_size, g_rank, "runs another program than trainer 0");
    tm_model_free(&other);
    tm_model_free(&m);
}

/* Each trainer's own timeline file: its rank as pid, its ops and collectives. */
static void test_timeline_per_rank(void **state) {
    (void)state;
    tm_model m = model(PE_DTYPE_FP32, 7, 32);
    char prefix[128], file[160], want[128];
    snprintf(prefix, sizeof prefix, "/tmp/pe_test_trainers_tl.%d", (int)getpid());
    snprintf(file, sizeof file, "%s.rank%d.json", prefix, g_rank);
    run_cfg c = {.places = 1, .trainers = g_size, .trainer_id = g_rank, .row0 = (int64_t)g_rank * PER_PLACE,
                 .rows = PER_PLACE, .timeline = prefix, .no_shard = true}; /* its gradients allreduced */
    pe_tensor *p[16];
    if (train(&m, &c, p) != PE_OK) fail_msg("rank %d: %s", g_rank, pe_last_error());
    FILE *f = fopen(file, "rb");
    if (!f) fail_msg("rank %d: no timeline file %s", g_rank, file);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    unlink(file);
    buf[n] = '\0';
    snprintf(want, sizeof want, "\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"trainer %d\"}", g_rank,
             g_rank);
    if (!strstr(buf, want)) fail_msg("rank %d: %s does not name the process: %.200s", g_rank, file, buf);
    snprintf(want, sizeof want, "\"steps\":%d,", STEPS);
    assert_non_null(strstr(buf, want));
    assert_non_null(strstr(buf, "\"cat\":\"op\",\"name\":\"fc_grad\"")); /* fuse_gemm_epilogue: on by default */
    assert_non_null(strstr(buf, "\"cat\":\"comm\",\"name\":\"allreduce\""));
    for (int r = 0; r < g_size; r++) { /* only its own events */
        snprintf(want, sizeof want, "{\"ph\":\"X\",\"pid\":%d,", r);
        if ((r == g_rank) != (strstr(buf, want) != NULL)) fail_msg("rank %d: events of pid %d in %s?", g_rank, r, file);
    }
    tm_free_params(&m, p);
    tm_model_free(&m);
}

PE_MPI_TEST_MAIN(cmocka_unit_test(test_bitwise_with_one_place_each), cmocka_unit_test(test_two_places_each),
                 cmocka_unit_test(test_strategies), cmocka_unit_test(test_fetch_sharded_gradient),
                 cmocka_unit_test(test_world_mismatches), cmocka_unit_test(test_timeline_per_rank))
#else
#include "tests/unit/mpi_test.h"
PE_MPI_TEST_SKIPPED("test_pe_trainers")
#endif
