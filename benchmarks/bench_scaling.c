/* benchmarks/bench_scaling.c — data-parallel scaling (issue 4 (a)).
 *
 *   bench_scaling [mlp|cnn|all] [BATCH] [STEPS]
 *
 * Trains examples/<model>_train.pe (forward + backward + momentum) with a
 * batch of BATCH rows (default 128) on 1 CPU place with 1 OpenMP thread,
 * then on 2 CPU places with 1 thread each (the batch split 64/64, gradients
 * allreduced), and prints samples/s for both and their ratio
 * (`scaling_<model>=<x>`; target >= 1.8). Steps after 3 warm-up steps,
 * median of STEPS (default 20) timings. Run from the repository root.
 */
#include "pe/pe.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(const char *what) {
    fprintf(stderr, "bench_scaling: %s: %s\n", what, pe_last_error());
    return 1;
}

/* Median seconds per step on n places with `threads` OpenMP threads in all. */
static int time_steps(const char *model, int n, int threads, int batch, int steps, double *sec) {
    char path[256], spath[256];
    snprintf(path, sizeof path, "examples/%s_train.pe", model);
    snprintf(spath, sizeof spath, "examples/%s_startup.pe", model);
    pe_program *prog = NULL, *startup = NULL;
    if (pe_program_load_file(path, &prog) != PE_OK || pe_program_load_file(spath, &startup) != PE_OK)
        return die("loading the example programs (run from the repository root)");
    bool cnn = !strcmp(model, "cnn");
    omp_set_num_threads(threads);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    if (pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL) != PE_OK) return die("startup");
    pe_place places[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.exec_strategy.num_iteration_per_drop_scope = 0;
    /* BENCH_STRATEGY=reduce|fuse: the reduce strategy, or fuse_all_reduce_ops + fusion */
    const char *strat = getenv("BENCH_STRATEGY");
    if (strat && !strcmp(strat, "reduce")) o.build_strategy.reduce_strategy = PE_REDUCE_REDUCE;
    if (strat && !strcmp(strat, "fuse")) {
        o.build_strategy.fuse_all_reduce_ops = o.build_strategy.fuse_all_optimizer_ops = true;
        o.build_strategy.fuse_gemm_epilogue = o.build_strategy.fuse_elewise_add_act_ops = true;
    }
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(places, n, prog, scope, &o, &pe) != PE_OK) return die("ParallelExecutor");
    pe_tensor *x = pe_tensor_new(), *y = pe_tensor_new(), *loss = pe_tensor_new();
    int64_t xd[4] = {batch, 1, 28, 28}, xm[2] = {batch, 784}, yd[2] = {batch, 1};
    pe_tensor_resize(x, PE_DTYPE_FP32, cnn ? 4 : 2, cnn ? xd : xm, pe_place_cpu(0));
    pe_tensor_resize(y, PE_DTYPE_INT64, 2, yd, pe_place_cpu(0));
    float *xv = pe_tensor_data(x);
    int64_t *yv = pe_tensor_data(y);
    for (int64_t i = 0; i < pe_tensor_numel(x); i++) xv[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    for (int i = 0; i < batch; i++) yv[i] = i % 10;
    pe_feed feed[2] = {{cnn ? "img" : "x", x}, {"label", y}};
    const char *fetch[] = {"loss"};
    double *t = malloc(sizeof *t * (size_t)steps);
    for (int s = 0; s < steps + 3; s++) {
        double t0 = now();
        if (pe_run(pe, feed, 2, fetch, 1, true, &loss) != PE_OK) return die("pe_run");
        if (s >= 3) t[s - 3] = now() - t0;
    }
    qsort(t, (size_t)steps, sizeof *t, cmp_d);
    *sec = t[steps / 2];
    free(t);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(loss);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(prog);
    pe_program_free(startup);
    return 0;
}

static int bench(const char *model, int batch, int steps) {
    double one, two;
    if (time_steps(model, 1, 1, batch, steps, &one) || time_steps(model, 2, 2, batch, steps, &two)) return 1;
    printf("%s batch=%d: 1 place x 1 thread %.1f samples/s (%.2f ms/step); 2 places x 1 thread %.1f samples/s "
           "(%.2f ms/step)\nscaling_%s=%.2f\n",
           model, batch, batch / one, one * 1e3, batch / two, two * 1e3, model, one / two);
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
