/* benchmarks/bench_timeline.c — a training run with the timeline on, for
 * benchmark (d): how much communication the backward pass hides.
 *
 *   bench_timeline MODEL PLACES STEPS PREFIX [BATCH]
 *   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *     mpirun --oversubscribe -np 2 build/bin/bench_timeline MODEL 1 STEPS PREFIX [BATCH]
 *
 * Trains examples/<MODEL>_train.pe (mlp or cnn: forward, backward, momentum)
 * on PLACES CPU places for STEPS steps of a global batch of BATCH rows
 * (default 128; under mpirun each of the R processes feeds BATCH / R of
 * them, num_trainers = R, trainer_id = its rank, from Open MPI's
 * OMPI_COMM_WORLD_SIZE / _RANK), with ExecutionStrategy.timeline_path =
 * PREFIX, and writes PREFIX.rank<N>.json. BENCH_STRATEGY=noshard|fuse as in
 * bench_scaling; nchw: the CNN build passes off (conv_nhwc, fuse_conv_bias),
 * the per-op time of the graph as written; unfused: fuse_gemm_epilogue and
 * fuse_elewise_add_act_ops off (mul, elementwise_add, relu and their grads as
 * ops of their own). Then scripts/timeline_report.py PREFIX.rank*.json prints
 * the hidden fraction. Run from the repository root.
 */
#include "benchmarks/bench_util.h"
#include "pe/pe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

int main(int argc, char **argv) {
    if (argc < 5 || (strcmp(argv[1], "mlp") && strcmp(argv[1], "cnn")) || atoi(argv[2]) < 1 || atoi(argv[3]) < 1) {
        fprintf(stderr, "usage: bench_timeline mlp|cnn PLACES STEPS PREFIX [BATCH]\n");
        return 2;
    }
    const char *model = argv[1], *prefix = argv[4];
    const int places = atoi(argv[2]), steps = atoi(argv[3]), batch = argc > 5 ? atoi(argv[5]) : 128;
    const int trainers = env_int("OMPI_COMM_WORLD_SIZE", 1), rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    const int rows = batch / trainers;
    if (places > PE_MAX_PLACES || rows < places) {
        fprintf(stderr, "bench_timeline: %d rows per process for %d places\n", rows, places);
        return 2;
    }
    char path[256], spath[256];
    snprintf(path, sizeof path, "examples/%s_train.pe", model);
    snprintf(spath, sizeof spath, "examples/%s_startup.pe", model);
    pe_program *prog, *startup;
    if (pe_program_load_file(path, &prog) != PE_OK || pe_program_load_file(spath, &startup) != PE_OK)
        return bench_die("loading the example programs (run from the repository root)");
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    if (pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL) != PE_OK) return bench_die("startup");
    pe_place pl[PE_MAX_PLACES];
    for (int p = 0; p < places; p++) pl[p] = pe_place_cpu(p);
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.num_trainers = trainers;
    o.trainer_id = rank;
    o.exec_strategy.timeline_path = prefix;
    const char *strat = getenv("BENCH_STRATEGY");
    if (strat && !strcmp(strat, "noshard")) o.build_strategy.shard_optimizer = false;
    if (strat && !strcmp(strat, "fuse")) o.build_strategy.fuse_all_reduce_ops = true;
    if (strat && !strcmp(strat, "unfused")) o.build_strategy.fuse_gemm_epilogue = o.build_strategy.fuse_elewise_add_act_ops = false;
    if (strat && !strcmp(strat, "nchw")) o.build_strategy.conv_nhwc = o.build_strategy.fuse_conv_bias = false;
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, places, prog, scope, &o, &pe) != PE_OK) return bench_die("ParallelExecutor");
    /* a fixed batch: this rank's rows of a deterministic global one */
    const bool cnn = !strcmp(model, "cnn");
    pe_tensor *x = pe_tensor_new(), *y = pe_tensor_new(), *loss = pe_tensor_new();
    int64_t xd[4] = {rows, 1, 28, 28}, yd[2] = {rows, 1};
    if (pe_tensor_resize(x, PE_DTYPE_FP32, cnn ? 4 : 2, cnn ? xd : (int64_t[]){rows, 784}, pe_place_cpu(0)) != PE_OK ||
        pe_tensor_resize(y, PE_DTYPE_INT64, 2, yd, pe_place_cpu(0)) != PE_OK)
        return bench_die("feeds");
    float *xv = pe_tensor_data(x);
    int64_t *yv = pe_tensor_data(y), off = (int64_t)rank * rows * 784;
    for (int64_t i = 0; i < pe_tensor_numel(x); i++) xv[i] = (float)(((off + i) * 2654435761u) % 1000) / 1000.0f;
    for (int i = 0; i < rows; i++) yv[i] = (rank * rows + i) % 10;
    pe_feed feed[2] = {{cnn ? "img" : "x", x}, {"label", y}};
    const char *fetch[] = {"loss"};
    double *t = malloc(sizeof *t * (size_t)steps);
    for (int s = 0; s < steps; s++) {
        double t0 = bench_now();
        if (pe_run(pe, feed, 2, fetch, 1, true, &loss) != PE_OK) return bench_die("pe_run");
        t[s] = bench_now() - t0;
    }
    if (pe_pe_write_timeline(pe, NULL) != PE_OK) return bench_die("writing the timeline");
    printf("rank %d of %d: %s, %d place(s), %d rows, %d steps, median %.3f ms/step, timeline %s\n", rank, trainers,
           model, places, rows, steps, 1e3 * bench_median(t, steps), pe_pe_timeline_path(pe));
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
