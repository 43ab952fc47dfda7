/* benchmarks/bench_scaling.c — data-parallel scaling (issue 4 (a)).
 *
 *   bench_scaling [mlp|cnn|all] [BATCH] [STEPS]
 *
 * Trains examples/<model>_train.pe (forward + backward + momentum) with a
 * batch of BATCH rows (default 128) on 1 CPU place with 1 OpenMP thread,
 * and on 2 CPU places with 1 thread each (the batch split 64/64, gradients
 * allreduced; with BENCH_PER_PLACE=1 the 2 places get 2 x BATCH rows,
 * BATCH each), and prints samples/s for both and their ratio
 * (`scaling_<model>=<x>`; target >= 1.8). Both trainers are built first
 * and then take turns, 5 steps each (so a busy host slows both alike);
 * after 3 warm-up steps each, the median of STEPS (default 20) timings of
 * each. Run from the repository root.
 */
#include "benchmarks/bench_util.h"
#include "pe/pe.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One trainer: the model's programs, a scope with its parameters and a
 * ParallelExecutor on n places, with a fixed batch to feed. */
typedef struct {
    pe_program *prog, *startup;
    pe_scope *scope;
    pe_executor *ex;
    pe_parallel_executor *pe;
    pe_tensor *x, *y, *loss;
    pe_feed feed[2];
} trainer;

static void trainer_free(trainer *t) {
    pe_tensor_free(t->x);
    pe_tensor_free(t->y);
    pe_tensor_free(t->loss);
    pe_parallel_executor_free(t->pe);
    pe_executor_free(t->ex);
    pe_scope_free(t->scope);
    pe_program_free(t->prog);
    pe_program_free(t->startup);
}

/* n places sharing `threads` OpenMP threads (the executor gives each place
 * threads / n for its kernels). */
static int trainer_init(trainer *t, const char *model, int n, int threads, int batch) {
    memset(t, 0, sizeof *t);
    char path[256], spath[256];
    snprintf(path, sizeof path, "examples/%s_train.pe", model);
    snprintf(spath, sizeof spath, "examples/%s_startup.pe", model);
    if (pe_program_load_file(path, &t->prog) != PE_OK || pe_program_load_file(spath, &t->startup) != PE_OK)
        return bench_die("loading the example programs (run from the repository root)");
    bool cnn = !strcmp(model, "cnn");
    omp_set_num_threads(threads);
    t->scope = pe_scope_new(NULL);
    t->ex = pe_executor_new(pe_place_cpu(0));
    if (pe_executor_run(t->ex, t->startup, 0, t->scope, NULL, 0, NULL, 0, NULL) != PE_OK) return bench_die("startup");
    pe_place places[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.exec_strategy.num_iteration_per_drop_scope = 0;
    /* BENCH_STRATEGY=reduce|fuse|noshard: the reduce strategy, fuse_all_reduce_ops + fusion, or
     * shard_optimizer off */
    const char *strat = getenv("BENCH_STRATEGY");
    if (strat && !strcmp(strat, "reduce")) o.build_strategy.reduce_strategy = PE_REDUCE_REDUCE;
    if (strat && !strcmp(strat, "noshard")) o.build_strategy.shard_optimizer = false;
    if (strat && !strcmp(strat, "fuse")) {
        o.build_strategy.fuse_all_reduce_ops = o.build_strategy.fuse_all_optimizer_ops = true;
        o.build_strategy.fuse_gemm_epilogue = o.build_strategy.fuse_elewise_add_act_ops = true;
    }
    if (pe_parallel_executor_new(places, n, t->prog, t->scope, &o, &t->pe) != PE_OK) return bench_die("ParallelExecutor");
    t->x = pe_tensor_new(), t->y = pe_tensor_new(), t->loss = pe_tensor_new();
    int64_t xd[4] = {batch, 1, 28, 28}, xm[2] = {batch, 784}, yd[2] = {batch, 1};
    if (pe_tensor_resize(t->x, PE_DTYPE_FP32, cnn ? 4 : 2, cnn ? xd : xm, pe_place_cpu(0)) != PE_OK ||
        pe_tensor_resize(t->y, PE_DTYPE_INT64, 2, yd, pe_place_cpu(0)) != PE_OK)
        return bench_die("feeds");
    float *xv = pe_tensor_data(t->x);
    int64_t *yv = pe_tensor_data(t->y);
    for (int64_t i = 0; i < pe_tensor_numel(t->x); i++) xv[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    for (int i = 0; i < batch; i++) yv[i] = i % 10;
    t->feed[0] = (pe_feed){cnn ? "img" : "x", t->x};
    t->feed[1] = (pe_feed){"label", t->y};
    return 0;
}

/* Seconds for one training step. */
static int trainer_step(trainer *t, double *sec) {
    const char *fetch[] = {"loss"};
    double t0 = bench_now();
    if (pe_run(t->pe, t->feed, 2, fetch, 1, true, &t->loss) != PE_OK) return bench_die("pe_run");
    *sec = bench_now() - t0;
    return 0;
}

/* The two trainers take turns, BLOCK steps each, so that whatever else the
 * host runs meanwhile slows both alike; medians of STEPS steps each. (Turns
 * of one step slowed both by ~7%: each step then starts with the other
 * trainer's data in the caches.) */
#define BLOCK 5
static int bench(const char *model, int batch, int steps) {
    trainer one, two;
    /* BENCH_PER_PLACE=1: BATCH rows per place (2 places get 2 x BATCH), else BATCH split */
    const bool per_place = getenv("BENCH_PER_PLACE") && !strcmp(getenv("BENCH_PER_PLACE"), "1");
    const int batch2 = per_place ? 2 * batch : batch;
    if (trainer_init(&one, model, 1, 1, batch) || trainer_init(&two, model, 2, 2, batch2)) return 1;
    double *t1 = malloc(sizeof *t1 * (size_t)steps), *t2 = malloc(sizeof *t2 * (size_t)steps), d;
    for (int s = 0; s < 3; s++)
        if (trainer_step(&one, &d) || trainer_step(&two, &d)) return 1;
    for (int s = 0; s < steps; s += BLOCK) {
        for (int k = s; k < s + BLOCK && k < steps; k++)
            if (trainer_step(&one, &t1[k])) return 1;
        for (int k = s; k < s + BLOCK && k < steps; k++)
            if (trainer_step(&two, &t2[k])) return 1;
    }
    double a = bench_median(t1, steps), b = bench_median(t2, steps);
    printf("%s: 1 place x 1 thread, batch %d: %.1f samples/s (%.2f ms/step); 2 places x 1 thread, batch %d: %.1f "
           "samples/s (%.2f ms/step)\nscaling_%s=%.2f\n",
           model, batch, batch / a, a * 1e3, batch2, batch2 / b, b * 1e3, model, (batch2 / b) / (batch / a));
    free(t1);
    free(t2);
    trainer_free(&one);
    trainer_free(&two);
    return 0;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int batch = argc > 2 ? atoi(argv[2]) : 128, steps = argc > 3 ? atoi(argv[3]) : 20;
    if (batch < 2 || steps < 1 || (strcmp(which, "mlp") && strcmp(which, "cnn") && strcmp(which, "all"))) {
        fprintf(stderr, "usage: bench_scaling [mlp|cnn|all] [BATCH>=2] [STEPS>=1]\n");
        return 2;
    }
    int rc = 0;
    if (!strcmp(which, "mlp") || !strcmp(which, "all")) rc |= bench("mlp", batch, steps);
    if (!strcmp(which, "cnn") || !strcmp(which, "all")) rc |= bench("cnn", batch, steps);
    return rc;
}
