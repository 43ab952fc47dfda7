/* benchmarks/bench_memory.c — memory of a training step with and without
 * the static memory plan (issue 5, point 3).
 *
 *   bench_memory [mlp|cnn|all] [--batch 128] [--places 1] [--steps 8] [--examples DIR]
 *
 * Trains examples/<model>_train.pe (forward, backward, momentum; float32)
 * after its startup program, with BuildStrategy enable_inplace /
 * memory_optimize off, each alone, and both, and measures with the place
 * allocators' counters (pe_alloc_get_stats, the bytes PE's tensors hold):
 *
 *   step_peak_bytes  the peak of bytes in use during the steps, above what
 *                    was in use once the executor was built (parameters,
 *                    velocities, learning rate): temporaries, the fed
 *                    batch's per-place copy and the fetched loss — the
 *                    memory a training step adds. Summed over places.
 *   run_peak_bytes   the peak over the whole run above what was in use
 *                    before the startup program ran (parameters and
 *                    optimizer state included): what `torch_memory.py`
 *                    measures for PyTorch. Summed over places.
 *   ms_per_step      median step time after 2 warm-up steps.
 *   allocs_per_step  system allocations per steady-state step.
 *   workspace_bytes  of those bytes, the places' oneDNN workspaces
 *                    (scratchpads and blocked-layout copies,
 *                    ops/cpu/dnnl_util.c) at the end of the steps.
 *
 * And with the whole process's heap (benchmarks/heap_count.c, linked in:
 * every malloc of the process, whoever makes it; what
 * `LD_PRELOAD=build/lib/libpe_heap_count.so torch_memory.py` measures for
 * PyTorch), from before the startup program:
 *   heap_run_peak_bytes  the peak of live heap bytes over the run;
 *   heap_held_bytes      live heap bytes after the steps;
 *   heap_outside_bytes   heap_held_bytes minus what PE's allocators hold
 *                        then above their start: bytes PE's counters do
 *                        not see (primitive objects, JIT code, graph,
 *                        scopes).
 *   heap_allocs_per_step allocating calls per steady-state step, PE's and
 *                        everyone's (oneDNN's argument maps, ...).
 *
 * Each configuration ends by emptying oneDNN's primitive cache and
 * workspaces (pe_dnnl_cache_clear), so the next starts from nothing.
 *
 * Prints `key=value` lines; docs/benchmarks.md records them with the
 * command. Random inputs of a fixed seed; the figures do not depend on them.
 */
#include "benchmarks/bench_util.h"
#include "ops/cpu/dnnl_util.h"
#include "pe/pe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int64_t step_peak, run_peak, allocs_per_step, workspace;
    int64_t heap_run_peak, heap_held, heap_outside, heap_allocs_per_step;
    double ms;
} result;

/* benchmarks/heap_count.c (absent in sanitizer builds: the figures are -1) */
int64_t pe_heap_live(void) __attribute__((weak));
int64_t pe_heap_peak(void) __attribute__((weak));
int64_t pe_heap_calls(void) __attribute__((weak));
void pe_heap_reset_peak(void) __attribute__((weak));
static bool heap_counted(void) { return pe_heap_live && pe_heap_peak && pe_heap_calls && pe_heap_reset_peak; }

static int64_t n_allocs(int places) {
    int64_t s = 0;
    for (int p = 0; p < places; p++) s += pe_alloc_get_stats(pe_place_cpu(p)).n_allocs;
    return s;
}

/* Sum over places of (peak since the last reset - in use at that reset). */
static int64_t peaks_above(const int64_t *at_reset, int places) {
    int64_t s = 0;
    for (int p = 0; p < places; p++) s += pe_alloc_get_stats(pe_place_cpu(p)).peak_bytes - at_reset[p];
    return s;
}

static void reset_peaks(int64_t *at_reset, int places) {
    for (int p = 0; p < places; p++) {
        pe_alloc_reset_peak(pe_place_cpu(p));
        at_reset[p] = pe_alloc_get_stats(pe_place_cpu(p)).bytes_in_use;
    }
}

static int run(const char *dir, const char *model, int places, int batch, int steps, bool inplace, bool memopt,
               result *r) {
    char path[4096], spath[4096];
    snprintf(path, sizeof path, "%s/%s_train.pe", dir, model);
    snprintf(spath, sizeof spath, "%s/%s_startup.pe", dir, model);
    pe_program *prog = NULL, *startup = NULL;
    if (pe_program_load_file(path, &prog) != PE_OK || pe_program_load_file(spath, &startup) != PE_OK)
        return bench_die("loading the example programs (run scripts/make_train_examples.py)");
    bool cnn = !strcmp(model, "cnn");
    const char *xname = cnn ? "img" : "x";
    pe_tensor *x = pe_tensor_new(), *y = pe_tensor_new(), *loss = pe_tensor_new();
    int64_t xd[4] = {batch, 1, 28, 28}, x2[2] = {batch, 784}, yd[2] = {batch, 1};
    if (pe_tensor_resize(x, PE_DTYPE_FP32, cnn ? 4 : 2, cnn ? xd : x2, pe_place_cpu(0)) != PE_OK ||
        pe_tensor_resize(y, PE_DTYPE_INT64, 2, yd, pe_place_cpu(0)) != PE_OK)
        return bench_die("feeds");
    uint64_t s = 42;
    float *xf = pe_tensor_data(x);
    for (int64_t i = 0; i < pe_tensor_numel(x); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        xf[i] = (float)(s >> 40) / (float)(1 << 24);
    }
    for (int i = 0; i < batch; i++) ((int64_t *)pe_tensor_data(y))[i] = (int64_t)((i * 7919) % 10);

    int64_t at_reset[64] = {0}, start[64] = {0};
    reset_peaks(start, places);
    int64_t heap0 = 0;
    if (heap_counted()) {
        heap0 = pe_heap_live();
        pe_heap_reset_peak();
    }
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    if (pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL) != PE_OK) return bench_die("startup");
    pe_place pl[64];
    for (int p = 0; p < places; p++) pl[p] = pe_place_cpu(p);
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.build_strategy.enable_inplace = inplace;
    o.build_strategy.memory_optimize = memopt;
    pe_parallel_executor *pe;
    if (pe_parallel_executor_new(pl, places, prog, scope, &o, &pe) != PE_OK) return bench_die("ParallelExecutor");
    /* built: parameters, velocities and their replicas are in use */
    int64_t built[64];
    for (int p = 0; p < places; p++) built[p] = pe_alloc_get_stats(pe_place_cpu(p)).bytes_in_use;
    int64_t run_peak_until_built = peaks_above(start, places);
    reset_peaks(at_reset, places);
    pe_feed feed[2] = {{xname, x}, {"label", y}};
    const char *fetch[] = {"loss"};
    double *t = calloc((size_t)steps, sizeof *t);
    int64_t allocs0 = 0, calls0 = 0;
    for (int i = 0; i < steps; i++) {
        if (i == 2) {
            allocs0 = n_allocs(places);
            calls0 = heap_counted() ? pe_heap_calls() : 0;
        }
        double t0 = bench_now();
        if (pe_run(pe, feed, 2, fetch, 1, true, &loss) != PE_OK) return bench_die("step");
        t[i] = bench_now() - t0;
    }
    r->allocs_per_step = steps > 2 ? (n_allocs(places) - allocs0) / (steps - 2) : 0;
    r->heap_run_peak = r->heap_held = r->heap_outside = r->heap_allocs_per_step = -1;
    if (heap_counted()) {
        int64_t pe_held = 0;
        for (int p = 0; p < places; p++) pe_held += pe_alloc_get_stats(pe_place_cpu(p)).bytes_in_use - start[p];
        r->heap_run_peak = pe_heap_peak() - heap0;
        r->heap_held = pe_heap_live() - heap0;
        r->heap_outside = r->heap_held - pe_held;
        r->heap_allocs_per_step = steps > 2 ? (pe_heap_calls() - calls0) / (steps - 2) : 0;
    }
    r->workspace = 0;
    for (int p = 0; p < places; p++) {
        size_t ws;
        pe_dnnl_workspace_stats(pe_place_cpu(p), NULL, &ws);
        r->workspace += (int64_t)ws;
    }
    r->step_peak = peaks_above(at_reset, places);
    /* the run's peak above what was in use before the startup program */
    int64_t base = 0;
    for (int p = 0; p < places; p++) base += built[p] - start[p];
    r->run_peak = base + r->step_peak > run_peak_until_built ? base + r->step_peak : run_peak_until_built;
    r->ms = (steps > 2 ? bench_median(t + 2, steps - 2) : t[0]) * 1e3; /* after 2 warm-up steps */
    free(t);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(loss);
    pe_program_free(prog);
    pe_program_free(startup);
    pe_dnnl_cache_clear();
    return 0;
}

int main(int argc, char **argv) {
    const char *which = "all", *dir = "examples";
    int batch = 128, places = 1, steps = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--places") && i + 1 < argc) places = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--examples") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "mlp") || !strcmp(argv[i], "cnn") || !strcmp(argv[i], "all")) which = argv[i];
        else {
            fprintf(stderr, "usage: bench_memory [mlp|cnn|all] [--batch B] [--places N] [--steps S] [--examples DIR]\n");
            return 2;
        }
    }
    if (batch < places || places < 1 || places > 64 || steps < 3) {
        fprintf(stderr, "bench_memory: need 1 <= places <= 64, batch >= places, steps >= 3\n");
        return 2;
    }
    const char *models[2] = {"mlp", "cnn"};
    static const char *const names[4] = {"off", "inplace", "memory_optimize", "both"};
    for (int m = 0; m < 2; m++) {
        if (strcmp(which, "all") && strcmp(which, models[m])) continue;
        result r[4];
        for (int c = 0; c < 4; c++) {
            if (run(dir, models[m], places, batch, steps, c & 1, c & 2, &r[c])) return 1;
            printf("model=%s places=%d batch=%d config=%s step_peak_bytes=%lld run_peak_bytes=%lld ms_per_step=%.2f "
                   "allocs_per_step=%lld workspace_bytes=%lld heap_run_peak_bytes=%lld heap_held_bytes=%lld "
                   "heap_outside_bytes=%lld heap_allocs_per_step=%lld\n",
                   models[m], places, batch, names[c], (long long)r[c].step_peak, (long long)r[c].run_peak, r[c].ms,
                   (long long)r[c].allocs_per_step, (long long)r[c].workspace, (long long)r[c].heap_run_peak,
                   (long long)r[c].heap_held, (long long)r[c].heap_outside, (long long)r[c].heap_allocs_per_step);
        }
        printf("model=%s places=%d batch=%d step_peak_ratio_both_vs_off=%.3f run_peak_ratio_both_vs_off=%.3f\n",
               models[m], places, batch, (double)r[3].step_peak / (double)r[0].step_peak,
               (double)r[3].run_peak / (double)r[0].run_peak);
        fflush(stdout);
    }
    return 0;
}
