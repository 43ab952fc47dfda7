/* benchmarks/bench_executor.c — executor micro-benchmarks (issue 4 (b), (c)).
 *
 *   bench_executor overhead [N_OPS]   per-op cost of N tiny ops (scale on a
 *                                      [1] tensor) in two shapes, a chain (run
 *                                      inline) and a fan (through the queue),
 *                                      single-place executor vs
 *                                      ParallelExecutor (1 place)
 *   bench_executor allreduce [MB]      in-process allreduce of MB across 2
 *                                      places vs memcpy of the same bytes, as
 *                                      training runs it, result checked
 *
 * Prints `key=value` lines; docs/benchmarks.md records them with the command.
 * Timings are medians of repeated runs (the machines are shared and noisy).
 */
#include "benchmarks/bench_util.h"
#include "pe/pe.h"
#include "runtime/comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <time.h>

/* A program of n_ops tiny ops (scale on a [1] tensor) from the fed "v0" to
 * the fetched var *fetch_out. Shapes:
 *   chain: v0 -> v1 -> ... -> vN, each op waiting for the one before; the
 *     scheduler runs each op's one ready successor itself, inline, so the
 *     ops never touch its queue (dependency counting + the op alone).
 *   fan:   v0 -> f1 .. f(N-1) (independent: every one is ready when the run
 *     starts, so every one is queued and popped from the scheduler's shared
 *     queue, lock and all), joined by `sum`s (groups of 1000, then one of
 *     the groups: N/1000 + 1 ops more) into "out", so none is dead code. */
static pe_program *shape_program(const char *shape, int n_ops, char *fetch_out, size_t fetch_size) {
    pe_program *p = pe_program_new();
    pe_block *blk = &p->blocks[0];
    char a[32], b[32];
    pe_block_add_var(blk, "v0", PE_DTYPE_FP32, 1, (int64_t[]){1});
    if (!strcmp(shape, "chain")) {
        for (int i = 0; i < n_ops; i++) {
            snprintf(a, sizeof a, "v%d", i);
            snprintf(b, sizeof b, "v%d", i + 1);
            pe_block_add_var(blk, b, PE_DTYPE_FP32, 1, (int64_t[]){1});
            pe_op *op = pe_block_add_op(blk, "scale");
            pe_op_add_input(op, "X", a);
            pe_op_add_output(op, "Out", b);
            pe_op_set_float(op, "scale", 1.0001);
        }
        snprintf(fetch_out, fetch_size, "v%d", n_ops);
        return p;
    }
    for (int i = 0; i < n_ops; i++) {
        snprintf(b, sizeof b, "f%d", i);
        pe_block_add_var(blk, b, PE_DTYPE_FP32, 1, (int64_t[]){1});
        pe_op *op = pe_block_add_op(blk, "scale");
        pe_op_add_input(op, "X", "v0");
        pe_op_add_output(op, "Out", b);
        pe_op_set_float(op, "scale", 1.0001);
    }
    /* the join: `sum` takes at most 1024 inputs, so groups of 1000, then one
     * sum of the groups' sums (a few ops more, counted by the caller) */
    int groups = (n_ops + 999) / 1000;
    for (int g = 0; g < groups; g++) {
        snprintf(a, sizeof a, "g%d", g);
        pe_block_add_var(blk, a, PE_DTYPE_FP32, 1, (int64_t[]){1});
        pe_op *op = pe_block_add_op(blk, "sum");
        for (int i = g * 1000; i < n_ops && i < (g + 1) * 1000; i++) {
            snprintf(b, sizeof b, "f%d", i);
            pe_op_add_input(op, "X", b);
        }
        pe_op_add_output(op, "Out", a);
    }
    pe_block_add_var(blk, "out", PE_DTYPE_FP32, 1, (int64_t[]){1});
    pe_op *top = pe_block_add_op(blk, "sum"); /* last: ops run in program order on one thread */
    for (int g = 0; g < groups; g++) {
        snprintf(a, sizeof a, "g%d", g);
        pe_op_add_input(top, "X", a);
    }
    pe_op_add_output(top, "Out", "out");
    snprintf(fetch_out, fetch_size, "out");
    return p;
}

/* Per-op cost (µs, median of reps runs) of one shape: the single-place
 * executor, then a ParallelExecutor on 1 place with 1 and 2 scheduler
 * threads. */
static int overhead_shape(const char *shape, int n_ops) {
    char fetch_name[32];
    pe_program *p = shape_program(shape, n_ops, fetch_name, sizeof fetch_name);
    pe_tensor *x = pe_tensor_new();
    pe_tensor_resize(x, PE_DTYPE_FP32, 1, (int64_t[]){1}, pe_place_cpu(0));
    *(float *)pe_tensor_data(x) = 1;
    pe_feed feed = {"v0", x};
    const char *fetch[] = {fetch_name};
    pe_tensor *out = pe_tensor_new();
    double t[15];
    int reps = getenv("PE_BENCH_REPS") ? atoi(getenv("PE_BENCH_REPS")) : 15;
    if (reps < 1 || reps > 15) reps = 15;
    /* single-place executor */
    pe_scope *s = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_executor_set_num_threads(ex, 1);
    if (pe_executor_run(ex, p, 0, s, &feed, 1, fetch, 1, &out) != PE_OK) return bench_die("executor");
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        pe_executor_run(ex, p, 0, s, &feed, 1, fetch, 1, &out);
        t[r] = bench_now() - t0;
    }
    int total_ops = p->blocks[0].n_ops; /* fan: the scale ops and the few sums of the join */
    double ex_us = bench_median(t, reps) / total_ops * 1e6;
    /* ParallelExecutor, one place, 1 and 2 scheduler threads */
    double pe_us[2];
    for (int k = 0; k < 2; k++) {
        pe_pe_options o;
        pe_pe_options_default(&o);
        o.exec_strategy.num_threads = k + 1;
        o.exec_strategy.num_iteration_per_drop_scope = 0;
        pe_place pl = pe_place_cpu(0);
        pe_parallel_executor *pe;
        pe_scope *s2 = pe_scope_new(NULL);
        if (pe_parallel_executor_new(&pl, 1, p, s2, &o, &pe) != PE_OK) return bench_die("ParallelExecutor");
        if (pe_run(pe, &feed, 1, fetch, 1, true, &out) != PE_OK) return bench_die("pe_run");
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now();
            pe_run(pe, &feed, 1, fetch, 1, true, &out);
            t[r] = bench_now() - t0;
        }
        pe_us[k] = bench_median(t, reps) / total_ops * 1e6;
        pe_parallel_executor_free(pe);
        pe_scope_free(s2);
    }
    printf("%s_ops=%d\n%s_executor_us_per_op=%.3f\n%s_parallel_executor_us_per_op_1thread=%.3f\n"
           "%s_parallel_executor_us_per_op_2threads=%.3f\n", shape, total_ops, shape, ex_us, shape, pe_us[0], shape,
           pe_us[1]);
    pe_executor_free(ex);
    pe_scope_free(s);
    pe_tensor_free(x);
    pe_tensor_free(out);
    pe_program_free(p);
    return 0;
}

/* Both shapes: the chain (inline) and the fan (through the queue). */
static int overhead(int n_ops) {
    if (n_ops < 2) n_ops = 2;
    if (overhead_shape("chain", n_ops)) return 1;
    return overhead_shape("fan", n_ops);
}

/* Every element of both places' buffers equals want (exact: sums of small
 * powers of two times 3). Returns the first bad index or -1. */
static int64_t bad_element(float *const *bufs, int64_t numel, float want) {
    for (int p = 0; p < 2; p++)
        for (int64_t i = 0; i < numel; i++)
            if (bufs[p][i] != want) return i;
    return -1;
}

/* The allreduce as a 2-place ParallelExecutor runs it in training: the
 * group pe_comm_new_for_places makes for the places (in-process, direct),
 * called by the scheduler thread whose gradient completed the bucket, with
 * one place's share of the OpenMP budget (parallel_executor.c:
 * omp_get_max_threads() / places, so 1 thread per place on 2 cores).
 * `threads` > 0 overrides that share (the figure before this rule). The
 * result is checked after every run. */
static int allreduce_with(int mb, int threads, const char *label) {
    int64_t numel = (int64_t)mb * 1024 * 1024 / 4;
    size_t bytes = (size_t)numel * 4;
    pe_place places[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    float *b0 = pe_place_alloc(places[0], bytes), *b1 = pe_place_alloc(places[1], bytes);
    float *c = pe_place_alloc(places[0], bytes);
    if (!b0 || !b1 || !c) return bench_die("alloc");
    for (int64_t i = 0; i < numel; i++) {
        b0[i] = 1.0f;
        b1[i] = 2.0f;
        c[i] = 0.0f;
    }
    float *bufs[2] = {b0, b1};
    int share = omp_get_max_threads() / 2 > 0 ? omp_get_max_threads() / 2 : 1;
    int th = threads > 0 ? threads : share;
    pe_comm_group *comm = pe_comm_new_for_places(places, 2, th);
    if (!comm) return bench_die("pe_comm_new_for_places");
    double t[9];
    float want = 3.0f; /* 1 + 2, then doubled by each further allreduce of equal buffers */
    for (int r = 0; r < 9; r++) {
        double t0 = bench_now();
        if (pe_group_allreduce(comm, (void *const *)bufs, numel, PE_DTYPE_FP32) != PE_OK)
            return bench_die("pe_group_allreduce");
        t[r] = bench_now() - t0;
        int64_t bad = bad_element(bufs, numel, want);
        if (bad >= 0) {
            fprintf(stderr, "bench_executor: allreduce run %d: element %lld is %g on place 0, %g on place 1, "
                    "expected %g\n", r, (long long)bad, b0[bad], b1[bad], want);
            return 1;
        }
        want *= 2;
    }
    double ar = bench_median(t, 9);
    for (int r = 0; r < 9; r++) {
        double t0 = bench_now();
        memcpy(c, b0, bytes);
        t[r] = bench_now() - t0;
    }
    double mc = bench_median(t, 9);
    if (memcmp(c, b0, bytes)) return bench_die("memcpy check");
    /* algorithm bandwidth: bytes of the buffer / time (NCCL's algbw) */
    printf("%s_threads=%d\n%s_allreduce_s=%.4f\n%s_memcpy_s=%.4f\n%s_allreduce_GBps=%.2f\n%s_memcpy_GBps=%.2f\n"
           "%s_allreduce_vs_memcpy=%.2f\n", label, th, label, ar, label, mc, label, bytes / ar / 1e9, label,
           bytes / mc / 1e9, label, mc / ar);
    pe_group_free(comm);
    pe_place_free(places[0], b0, bytes);
    pe_place_free(places[1], b1, bytes);
    pe_place_free(places[0], c, bytes);
    return 0;
}

/* The training configuration, then the whole OpenMP budget on the one call
 * (what this benchmark measured before it followed training). */
static int allreduce(int mb) {
    printf("allreduce_mb=%d\nallreduce_checked=1\n", mb);
    if (allreduce_with(mb, 0, "training")) return 1;
    return allreduce_with(mb, omp_get_max_threads(), "all_threads");
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "overhead")) return overhead(argc > 2 ? atoi(argv[2]) : 10000);
    if (argc >= 2 && !strcmp(argv[1], "allreduce")) return allreduce(argc > 2 ? atoi(argv[2]) : 100);
    fprintf(stderr, "usage: bench_executor overhead [N_OPS] | allreduce [MB]\n");
    return 2;
}
