/* benchmarks/bench_executor.c — executor micro-benchmarks (issue 4 (b), (c)).
 *
 *   bench_executor overhead [N_OPS]   per-op cost of a chain of N tiny ops
 *                                      (scale on a [1] tensor), single-place
 *                                      executor vs ParallelExecutor (1 place)
 *   bench_executor allreduce [MB]      in-process allreduce of MB across 2
 *                                      places vs memcpy of the same bytes
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
#include <time.h>

static int overhead(int n_ops) {
    pe_program *p = pe_program_new();
    char a[32], b[32];
    pe_block_add_var(&p->blocks[0], "v0", PE_DTYPE_FP32, 1, (int64_t[]){1});
    for (int i = 0; i < n_ops; i++) {
        snprintf(a, sizeof a, "v%d", i);
        snprintf(b, sizeof b, "v%d", i + 1);
        pe_block_add_var(&p->blocks[0], b, PE_DTYPE_FP32, 1, (int64_t[]){1});
        pe_op *op = pe_block_add_op(&p->blocks[0], "scale");
        pe_op_add_input(op, "X", a);
        pe_op_add_output(op, "Out", b);
        pe_op_set_float(op, "scale", 1.0001);
    }
    pe_tensor *x = pe_tensor_new();
    pe_tensor_resize(x, PE_DTYPE_FP32, 1, (int64_t[]){1}, pe_place_cpu(0));
    *(float *)pe_tensor_data(x) = 1;
    pe_feed feed = {"v0", x};
    snprintf(b, sizeof b, "v%d", n_ops);
    const char *fetch[] = {b};
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
    double ex_us = bench_median(t, reps) / n_ops * 1e6;
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
        pe_us[k] = bench_median(t, reps) / n_ops * 1e6;
        pe_parallel_executor_free(pe);
        pe_scope_free(s2);
    }
    printf("ops=%d\nexecutor_us_per_op=%.3f\nparallel_executor_us_per_op_1thread=%.3f\n"
           "parallel_executor_us_per_op_2threads=%.3f\n", n_ops, ex_us, pe_us[0], pe_us[1]);
    pe_executor_free(ex);
    pe_scope_free(s);
    pe_tensor_free(x);
    pe_tensor_free(out);
    pe_program_free(p);
    return 0;
}

static int allreduce(int mb) {
    int64_t numel = (int64_t)mb * 1024 * 1024 / 4;
    size_t bytes = (size_t)numel * 4;
    float *b0 = pe_place_alloc(pe_place_cpu(0), bytes), *b1 = pe_place_alloc(pe_place_cpu(1), bytes);
    float *c = pe_place_alloc(pe_place_cpu(0), bytes);
    if (!b0 || !b1 || !c) return bench_die("alloc");
    for (int64_t i = 0; i < numel; i++) b0[i] = b1[i] = c[i] = 1.0f;
    void *bufs[2] = {b0, b1};
    pe_comm_group *comm = pe_comm_inproc_new(2, 2);
    double t[9];
    for (int r = 0; r < 9; r++) {
        double t0 = bench_now();
        pe_group_allreduce(comm, bufs, numel, PE_DTYPE_FP32);
        t[r] = bench_now() - t0;
    }
    double ar = bench_median(t, 9);
    for (int r = 0; r < 9; r++) {
        double t0 = bench_now();
        memcpy(c, b0, bytes);
        t[r] = bench_now() - t0;
    }
    double mc = bench_median(t, 9);
    /* algorithm bandwidth: bytes of the buffer / time (NCCL's algbw) */
    printf("allreduce_mb=%d\nallreduce_s=%.4f\nmemcpy_s=%.4f\nallreduce_GBps=%.2f\nmemcpy_GBps=%.2f\n"
           "allreduce_vs_memcpy=%.2f\n", mb, ar, mc, bytes / ar / 1e9, bytes / mc / 1e9, mc / ar);
    pe_group_free(comm);
    pe_place_free(pe_place_cpu(0), b0, bytes);
    pe_place_free(pe_place_cpu(1), b1, bytes);
    pe_place_free(pe_place_cpu(0), c, bytes);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "overhead")) return overhead(argc > 2 ? atoi(argv[2]) : 10000);
    if (argc >= 2 && !strcmp(argv[1], "allreduce")) return allreduce(argc > 2 ? atoi(argv[2]) : 100);
    fprintf(stderr, "usage: bench_executor overhead [N_OPS] | allreduce [MB]\n");
    return 2;
}
