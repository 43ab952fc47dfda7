/* benchmarks/bench_comm_mpi.c — allreduce across processes: PE's MPI
 * backend (runtime/comm/mpi.c) vs raw MPI_Allreduce vs a local memcpy.
 *
 *     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *       mpirun --oversubscribe -np 2 --mca btl self,vader build/bin/bench_comm_mpi [reps]
 *
 * For 1, 4, 16 and 64 MB of fp32 per rank, in the same run and alternating
 * (so drift hits all three alike): PE's pe_comm_allreduce + pe_work_wait
 * (rank-order sums, bitwise repeatable), MPI_Allreduce(MPI_IN_PLACE,
 * MPI_SUM) (Open MPI's own algorithm, any summation order), and memcpy of
 * the same bytes in one process (the floor: what touching the data once
 * costs). Each timed call starts after an MPI_Barrier; the time is rank 0's
 * (the slowest rank's would differ by the barrier's skew only). Medians of
 * `reps` runs (default 15; 5 at 64 MB). Prints key=value lines: ms, algbw
 * (bytes / time) and busbw (algbw * 2 (n-1) / n, nccl-tests' measure of
 * the link's load) for each.
 */
#include "benchmarks/bench_util.h"
#include "runtime/comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PE_WITH_MPI
#include <mpi.h>

int main(int argc, char **argv) {
    int reps_arg = argc > 1 ? atoi(argv[1]) : 15;
    pe_comm *c;
    if (pe_comm_mpi_new(&c) != PE_OK) return bench_die("pe_comm_mpi_new"); /* initializes MPI */
    int me = pe_comm_rank(c), n = pe_comm_size(c);
    static const int mbs[] = {1, 4, 16, 64};
    if (me == 0) printf("bench=comm_mpi ranks=%d chunk_bytes=%s\n", n, getenv("PE_MPI_CHUNK_BYTES") ? getenv("PE_MPI_CHUNK_BYTES") : "4194304");
    for (size_t s = 0; s < sizeof mbs / sizeof mbs[0]; s++) {
        size_t bytes = (size_t)mbs[s] << 20;
        int64_t count = (int64_t)(bytes / sizeof(float));
        int reps = mbs[s] >= 64 && reps_arg > 5 ? 5 : reps_arg;
        float *buf = malloc(bytes), *src = malloc(bytes), *dst = malloc(bytes);
        if (!buf || !src || !dst) return bench_die("malloc");
        for (int64_t i = 0; i < count; i++) src[i] = (float)((i * 7 + me) % 1000) * 0.001f;
        memset(dst, 0, bytes);
        double t_pe[64], t_mpi[64], t_cpy[64];
        if (reps > 64) reps = 64;
        for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
            memcpy(buf, src, bytes);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = bench_now();
            pe_work *w;
            if (pe_comm_allreduce(c, buf, count, PE_DTYPE_FP32, (uint64_t)r + 10, &w) != PE_OK)
                return bench_die("pe_comm_allreduce");
            if (pe_work_wait(w) != PE_OK) return bench_die("pe_work_wait");
            pe_work_free(w);
            double t1 = bench_now();
            memcpy(buf, src, bytes);
            MPI_Barrier(MPI_COMM_WORLD);
            double t2 = bench_now();
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double t3 = bench_now();
            memcpy(dst, src, bytes);
            double t4 = bench_now();
            if (r >= 0) {
                t_pe[r] = t1 - t0;
                t_mpi[r] = t3 - t2;
                t_cpy[r] = t4 - t3;
            }
        }
        if (me == 0) {
            double pe = bench_median(t_pe, reps), mp = bench_median(t_mpi, reps), cp = bench_median(t_cpy, reps);
            double f = 2.0 * (n - 1) / n, gb = (double)bytes / 1e9;
            printf("mb=%d reps=%d pe_ms=%.3f mpi_ms=%.3f memcpy_ms=%.3f pe_over_mpi=%.2f pe_over_memcpy=%.1f "
                   "pe_algbw_gbs=%.2f mpi_algbw_gbs=%.2f pe_busbw_gbs=%.2f mpi_busbw_gbs=%.2f memcpy_gbs=%.2f\n",
                   mbs[s], reps, pe * 1e3, mp * 1e3, cp * 1e3, pe / mp, pe / cp, gb / pe, gb / mp, gb / pe * f,
                   gb / mp * f, gb / cp);
            fflush(stdout);
        }
        free(buf);
        free(src);
        free(dst);
    }
    pe_comm_free(c);
    return 0;
}

#else

int main(void) {
    printf("bench=comm_mpi skipped=1 reason=\"PE was built without MPI\"\n");
    return 0;
}

#endif
