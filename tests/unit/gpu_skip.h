/* tests/unit/gpu_skip.h — skipping a cmocka test, visibly, when the machine
 * (or the build) has fewer CUDA GPUs than it needs (header-only).
 *
 *     static void test_allreduce_nccl(void **state) {
 *         TU_NEED_GPUS(2, "test_comm");   // prints a SKIPPED line, then skip()
 *         ...
 *     }
 *
 * The SKIPPED line names the test, the reason (no GPU here, or PE built
 * without CUDA), the file, and the device counts, so a CPU-only run shows
 * what it did not exercise. Used by test_cuda.c and test_comm.c.
 */
#ifndef PE_TEST_GPU_SKIP_H
#define PE_TEST_GPU_SKIP_H

#include "tests/unit/op_test_util.h"
#include "runtime/internal.h"

#include <stdio.h>

static inline int tu_gpu_count(void) {
#ifdef PE_WITH_CUDA
    return pe_cuda_device_count();
#else
    return 0;
#endif
}

#ifdef PE_WITH_CUDA
#define TU_NO_GPU_REASON "no CUDA GPU on this machine"
#else
#define TU_NO_GPU_REASON "PE was built without CUDA"
#endif

#define TU_NEED_GPUS(n, file)                                                                  \
    do {                                                                                       \
        if (tu_gpu_count() < (n)) {                                                            \
            printf("SKIPPED: %s: " TU_NO_GPU_REASON " (%s; %d device(s), %d needed)\n", __func__, \
                   (file), tu_gpu_count(), (n));                                               \
            fflush(stdout);                                                                    \
            skip();                                                                            \
        }                                                                                      \
    } while (0)

#endif
