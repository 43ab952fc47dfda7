/* tests/unit/mpi_test.h — main() of a cmocka test that every process of
 * `mpirun -np N` runs (tests/unit/run_mpi.sh), header-only:
 *
 *     #ifdef PE_WITH_MPI
 *     #include "tests/unit/mpi_test.h"
 *     static void test_x(void **state) { ... g_rank, g_size ... }
 *     PE_MPI_TEST_MAIN(cmocka_unit_test(test_x))
 *     #else
 *     PE_MPI_TEST_SKIPPED("test_name")
 *     #endif
 *
 * MPI with MPI_THREAD_MULTIPLE (PE's progress threads call MPI), one
 * OpenMP thread per process; g_rank / g_size: this process in
 * MPI_COMM_WORLD. Built without MPI: a SKIPPED line and exit 77 (ctest:
 * skipped). */
#ifndef PE_TEST_MPI_TEST_H
#define PE_TEST_MPI_TEST_H

#include <stdio.h>

#ifdef PE_WITH_MPI
#include <mpi.h>
#include <omp.h>

static int g_rank, g_size;

#define PE_MPI_TEST_MAIN(...)                                                                                    \
    int main(void) {                                                                                             \
        int provided;                                                                                            \
        MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);                                             \
        MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);                                                                  \
        MPI_Comm_size(MPI_COMM_WORLD, &g_size);                                                                  \
        omp_set_num_threads(1);                                                                                  \
        const struct CMUnitTest tests[] = {__VA_ARGS__};                                                         \
        int rc = cmocka_run_group_tests(tests, NULL, NULL);                                                      \
        MPI_Finalize();                                                                                          \
        return rc;                                                                                               \
    }
#endif

#define PE_MPI_TEST_SKIPPED(name)                                                                                \
    int main(void) {                                                                                             \
        printf("[  SKIPPED ] " name ": PE was built without MPI\n");                                            \
        return 77;                                                                                               \
    }

#endif
