/* tests/unit/gpu_skip.h — skipping a cmocka test, visibly, when the machine
 * (or the build) has fewer CUDA GPUs than it needs (header-only).
 *
 *     static void test_allreduce_nccl(void **state) {
 *         TU_NEED_GPUS(2, "test_comm");   // prints a SKIPPED line, then skip()
 *         ...
 *     }
 *
 *     int main(void) {
 *         const struct CMUnitTest tests[] = {...};
 *         return TU_RUN_GROUP(tests);      // 77 when every test skipped
 *     }
 *
 * The SKIPPED line names the test, the reason (no GPU here, or PE built
 * without CUDA), the file, and the device counts, so a CPU-only run shows
 * what it did not exercise. TU_RUN_GROUP counts those skips: a binary whose
 * every test skipped exits 77, which ctest (SKIP_RETURN_CODE 77, set for
 * every unit test in CMakeLists.txt) reports as "Skipped", not "Passed"; a
 * binary that ran some tests exits as cmocka says and prints how many it
 * skipped. Used by test_cuda.c, test_comm.c and test_comm_conformance.c.
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

/* Tests of this binary skipped for want of a GPU (or of NCCL). */
static int tu_gpu_skipped;

/* Skips the current test for want of GPU support, counted; fmt: the reason. */
#define TU_SKIP_GPU(...)                                                                       \
    do {                                                                                       \
        printf("SKIPPED: " __VA_ARGS__);                                                       \
        printf("\n");                                                                          \
        fflush(stdout);                                                                        \
        tu_gpu_skipped++;                                                                      \
        skip();                                                                                \
    } while (0)

#define TU_NEED_GPUS(n, file)                                                                  \
    do {                                                                                       \
        if (tu_gpu_count() < (n))                                                              \
            TU_SKIP_GPU("%s: " TU_NO_GPU_REASON " (%s; %d device(s), %d needed)", __func__,     \
                        (file), tu_gpu_count(), (n));                                          \
    } while (0)

/* Runs the group; 77 (ctest: skipped) when every test skipped for want of a
 * GPU, else cmocka's result, after a line saying how many skipped. */
static inline int tu_run_group(const char *name, const struct CMUnitTest *tests, size_t n) {
    int rc = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
    if (rc == 0 && n > 0 && (size_t)tu_gpu_skipped == n) {
        printf("[  SKIPPED ] %s: all %zu tests need a GPU: " TU_NO_GPU_REASON " (exit 77)\n", name, n);
        return 77;
    }
    if (tu_gpu_skipped)
        printf("[  SKIPPED ] %s: %d of %zu tests skipped for want of a GPU (SKIPPED lines above)\n", name,
               tu_gpu_skipped, n);
    return rc;
}
#define TU_RUN_GROUP(tests) tu_run_group(__FILE__, (tests), sizeof(tests) / sizeof((tests)[0]))

#endif
