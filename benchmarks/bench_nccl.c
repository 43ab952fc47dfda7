/* benchmarks/bench_nccl.c — allreduce over the visible GPUs through PE's NCCL
 * backend (runtime/comm/nccl.cu), with nccl-tests' bus bandwidth.
 *
 *     build-gpu/bin/bench_nccl [reps]          # every visible GPU, one place each
 *     CUDA_VISIBLE_DEVICES=0,1 build-gpu/bin/bench_nccl
 *
 * For 1, 16, 64 and 256 MB of fp32 per GPU: pe_group_allreduce over the
 * places cuda:0..n-1 (one NCCL communicator per GPU, driven by one thread in
 * a group call), the time from the call to the sum being complete on every
 * GPU (pe_group_allreduce returns after its work completes), median of
 * `reps` (default 20; 5 at 256 MB) after one warm-up. Prints key=value lines:
 * ms, algbw = bytes / time and busbw = algbw * 2 (n - 1) / n, the figure
 * nccl-tests' all_reduce_perf prints (the load on the busiest link, which
 * a ring allreduce keeps equal to the links' bandwidth). Also checks the sum
 * (every element = the sum over GPUs of what each held) so a fast wrong
 * answer cannot pass. Fewer than two GPUs, or a build without CUDA / NCCL:
 * prints why and exits 0 (scripts/test_gpu.sh runs it everywhere it runs).
 */
#include "benchmarks/bench_util.h"
#include "runtime/comm/comm.h"
#include "pe/device.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(PE_WITH_CUDA) && defined(PE_WITH_NCCL)

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int reps_arg = argc > 1 ? atoi(argv[1]) : 20;
    int n = pe_cuda_device_count();
    if (n > PE_MAX_PLACES) n = PE_MAX_PLACES;
    if (n < 2) {
        printf("bench=nccl skipped: %d GPU(s) visible, an allreduce needs 2 or more\n", n);
        return 0;
    }
    pe_place places[PE_MAX_PLACES];
    for (int i = 0; i < n; i++) places[i] = pe_place_cuda(i);
    pe_comm_group *g = pe_comm_new_for_places(places, n, 1);
    if (!g) return bench_die("pe_comm_new_for_places");
    printf("bench=nccl gpus=%d\n", n);
    static const int mbs[] = {1, 16, 64, 256};
    for (size_t s = 0; s < sizeof mbs / sizeof mbs[0]; s++) {
        size_t bytes = (size_t)mbs[s] << 20;
        int64_t count = (int64_t)(bytes / sizeof(float));
        int reps = mbs[s] >= 256 && reps_arg > 5 ? 5 : reps_arg;
        if (reps > 64) reps = 64;
        void *bufs[PE_MAX_PLACES];
        float *host = malloc(bytes), *back = malloc(bytes);
        if (!host || !back) return bench_die("malloc");
        for (int i = 0; i < n; i++) {
            if (!(bufs[i] = pe_cuda_malloc(i, bytes))) return bench_die("pe_cuda_malloc");
        }
        double t[64];
        for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
            for (int i = 0; i < n; i++) { /* GPU i holds i + 1 (small integers: sums are exact) */
                for (int64_t k = 0; k < count; k++) host[k] = (float)(i + 1);
                if (pe_cuda_memcpy(bufs[i], places[i], host, pe_place_cpu(0), bytes) != PE_OK)
                    return bench_die("pe_cuda_memcpy");
            }
            double t0 = bench_now();
            if (pe_group_allreduce(g, bufs, count, PE_DTYPE_FP32) != PE_OK) return bench_die("pe_group_allreduce");
            for (int i = 0; i < n; i++)
                if (pe_cuda_sync(i) != PE_OK) return bench_die("pe_cuda_sync");
            double dt = bench_now() - t0;
            if (r >= 0) t[r] = dt;
        }
        const float want = (float)n * (float)(n + 1) / 2.0f;
        for (int i = 0; i < n; i++) {
            if (pe_cuda_memcpy(back, pe_place_cpu(0), bufs[i], places[i], bytes) != PE_OK)
                return bench_die("pe_cuda_memcpy back");
            for (int64_t k = 0; k < count; k += 4099)
                if (back[k] != want) {
                    fprintf(stderr, "bench_nccl: cuda:%d element %lld is %g, expected %g\n", i, (long long)k,
                            (double)back[k], (double)want);
                    return 1;
                }
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp_d);
        double med = t[reps / 2], algbw = (double)bytes / med / 1e9;
        printf("mb=%d reps=%d ms=%.3f algbw_GBps=%.2f busbw_GBps=%.2f\n", mbs[s], reps, 1e3 * med, algbw,
               algbw * 2.0 * (n - 1) / n);
        for (int i = 0; i < n; i++) pe_cuda_free(i, bufs[i]);
        free(host);
        free(back);
    }
    pe_group_free(g);
    return 0;
}

#else

int main(void) {
    printf("bench=nccl skipped: PE was built without CUDA and NCCL\n");
    return 0;
}

#endif
