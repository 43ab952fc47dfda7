/* benchmarks/bench_fusion.c — training step time with and without the
 * fusion passes (issue 5: "step time with and without fusion").
 *
 *   bench_fusion [--models mlp,cnn] [--places N] [--batch B] [--steps S] [--reps R] [--examples DIR]
 *
 * For each model (examples/<model>_train.pe: forward, backward, momentum;
 * float32) it builds one ParallelExecutor per BuildStrategy configuration —
 * off, fuse_gemm_epilogue, fuse_elewise_add_act_ops, fuse_all_optimizer_ops,
 * all three — each with its own scope initialized by the same startup
 * program, and trains them on the same batches. Configurations are
 * interleaved step by step (each step runs every configuration once, in
 * rotating order, after 3 warm-up steps) so a noisy neighbour on the shared
 * machine hits all of them alike; the figures are the median and the 10th
 * percentile of the R*S step times. Prints `key=value` lines: ops in the
 * graph (per place), step ms, and the median speedup over `off`; and checks
 * that every configuration ends with the same parameters as `off` (the
 * fused ops are bitwise equal), so the timing compares equal work.
 */
#include "benchmarks/bench_util.h"
#include "pe/pe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N_CFG = 5 };
static const char *const k_cfg_names[N_CFG] = {"off", "fc", "elewise_act", "optimizer", "all"};
static const int k_cfg_bits[N_CFG] = {0, 1, 2, 4, 7};

static void strategy(pe_build_strategy *bs, int bits) {
    bs->fuse_gemm_epilogue = bits & 1;
    bs->fuse_elewise_add_act_ops = bits & 2;
    bs->fuse_all_optimizer_ops = bits & 4;
}

/* Deterministic batch k: class-dependent pattern plus noise. */
static void make_batch(int k, int rows, int64_t feat, pe_tensor *x, pe_tensor *y, bool cnn) {
    int64_t xd[4] = {rows, 784, 0, 0};
    if (cnn) { xd[1] = 1; xd[2] = 28; xd[3] = 28; }
    pe_tensor_resize(x, PE_DTYPE_FP32, cnn ? 4 : 2, xd, pe_place_cpu(0));
    pe_tensor_resize(y, PE_DTYPE_INT64, 2, (int64_t[]){rows, 1}, pe_place_cpu(0));
    float *xv = pe_tensor_data(x);
    int64_t *yv = pe_tensor_data(y);
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(k + 1);
    for (int r = 0; r < rows; r++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        int cls = (int)(s % 10);
        yv[r] = cls;
        for (int64_t j = 0; j < feat; j++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            xv[r * feat + j] = (float)(((j % 10) == cls ? 0.8 : 0.0) + (double)(s >> 40) / (double)(1 << 24) * 0.4);
        }
    }
}

typedef struct {
    pe_scope *scope;
    pe_parallel_executor *pe;
    double *t;   /* step times */
    int n_t;
    int ops;     /* ops per place after the passes */
} cfg_state;

static int run_model(const char *dir, const char *model, int places, int batch, int steps, int reps) {
    char path[1024], spath[1024];
    snprintf(path, sizeof path, "%s/%s_train.pe", dir, model);
    snprintf(spath, sizeof spath, "%s/%s_startup.pe", dir, model);
    pe_program *main_p = NULL, *start_p = NULL;
    if (pe_program_load_file(path, &main_p) != PE_OK || pe_program_load_file(spath, &start_p) != PE_OK)
        return bench_die(path);
    bool cnn = !strcmp(model, "cnn");
    const char *xname = cnn ? "img" : "x";
    pe_place pl[16];
    for (int i = 0; i < places; i++) pl[i] = pe_place_cpu(i);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    cfg_state c[N_CFG];
    memset(c, 0, sizeof c);
    int rc = 0;
    for (int k = 0; k < N_CFG && !rc; k++) {
        c[k].scope = pe_scope_new(NULL);
        if (pe_executor_run(ex, start_p, 0, c[k].scope, NULL, 0, NULL, 0, NULL) != PE_OK) { rc = bench_die("startup"); break; }
        pe_pe_options o;
        pe_pe_options_default(&o);
        o.loss_name = "loss";
        strategy(&o.build_strategy, k_cfg_bits[k]);
        if (pe_parallel_executor_new(pl, places, main_p, c[k].scope, &o, &c[k].pe) != PE_OK) { rc = bench_die("executor"); break; }
        pe_build_opts bo = {.n_places = places, .loss_name = "loss", .bs = &o.build_strategy};
        pe_build_report r;
        if (pe_build_graph(main_p, &bo, &r) != PE_OK) { rc = bench_die("passes"); break; }
        c[k].ops = r.n_ops;
        c[k].t = calloc((size_t)(steps * reps), sizeof *c[k].t);
    }
    pe_tensor *x = pe_tensor_new(), *y = pe_tensor_new(), *loss = pe_tensor_new();
    const char *fetch[1] = {"loss"};
    int64_t feat = 784;
    /* 3 warm-up steps, then steps*reps measured steps; each step runs every
     * configuration once, in rotating order, on the same batch */
    const int total = 3 + steps * reps;
    for (int s = 0; s < total && !rc; s++) {
        make_batch(s, batch, feat, x, y, cnn);
        pe_feed feed[2] = {{xname, x}, {"label", y}};
        for (int j = 0; j < N_CFG && !rc; j++) {
            int k = (j + s) % N_CFG;
            double t0 = bench_now();
            if (pe_run(c[k].pe, feed, 2, fetch, 1, true, &loss) != PE_OK) rc = bench_die("run");
            double t1 = bench_now();
            if (s >= 3) c[k].t[c[k].n_t++] = (t1 - t0) * 1e3;
        }
    }
    /* same parameters in every configuration (the fused ops are bitwise equal) */
    const pe_block *b = &main_p->blocks[0];
    int mismatched = 0;
    for (int i = 0; i < b->n_vars && !rc; i++) {
        if (!b->vars[i].is_parameter) continue;
        const pe_tensor *ref = pe_scope_find_var(c[0].scope, b->vars[i].name);
        for (int k = 1; k < N_CFG; k++) {
            const pe_tensor *t = pe_scope_find_var(c[k].scope, b->vars[i].name);
            if (!ref || !t || memcmp(pe_tensor_data(ref), pe_tensor_data(t), pe_tensor_nbytes(ref))) mismatched++;
        }
    }
    if (!rc) {
        double base = 0;
        for (int k = 0; k < N_CFG; k++) {
            qsort(c[k].t, (size_t)c[k].n_t, sizeof *c[k].t, bench_cmp_d);
            double med = c[k].t[c[k].n_t / 2], p10 = c[k].t[c[k].n_t / 10];
            if (k == 0) base = med;
            printf("model=%s places=%d batch=%d config=%s ops=%d step_ms_median=%.3f step_ms_p10=%.3f "
                   "speedup_vs_off=%.3f\n", model, places, batch, k_cfg_names[k], c[k].ops, med, p10, base / med);
        }
        printf("model=%s params_bitwise_equal_across_configs=%s\n", model, mismatched ? "no" : "yes");
    }
    for (int k = 0; k < N_CFG; k++) {
        pe_parallel_executor_free(c[k].pe);
        pe_scope_free(c[k].scope);
        free(c[k].t);
    }
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_tensor_free(loss);
    pe_executor_free(ex);
    pe_program_free(main_p);
    pe_program_free(start_p);
    return rc ? rc : mismatched ? 2 : 0;
}

int main(int argc, char **argv) {
    const char *models = "mlp,cnn", *dir = "examples";
    int places = 1, batch = 128, steps = 20, reps = 5;
    for (int i = 1; i < argc; i += 2) { /* --flag value pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "bench_fusion: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--models")) models = v;
        else if (!strcmp(a, "--places")) places = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--examples")) dir = v;
        else { fprintf(stderr, "usage: bench_fusion [--models mlp,cnn] [--places N] [--batch B] [--steps S] [--reps R] [--examples DIR]\n"); return 2; }
    }
    if (places < 1 || places > 16 || batch < places || steps < 1 || reps < 1) {
        fprintf(stderr, "bench_fusion: need 1 <= places <= 16, batch >= places, steps >= 1, reps >= 1\n");
        return 2;
    }
    pe_log_set_level(PE_LOG_ERROR);
    int rc = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", models);
    for (char *save = NULL, *m = strtok_r(buf, ",", &save); m && !rc; m = strtok_r(NULL, ",", &save))
        rc = run_model(dir, m, places, batch, steps, reps);
    return rc;
}
