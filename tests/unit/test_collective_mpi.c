/* tests/unit/test_collective_mpi.c — the collective ops a program carries
 * (ops/collective.c) across processes: R trainers (MPI processes) x P
 * places, ParallelExecutor(num_trainers=R, trainer_id=rank), global rank
 * = trainer x P + place:
 *
 *     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *       mpirun --oversubscribe -np 2 --mca btl self,vader build/bin/test_collective_mpi
 *
 * (ctest: -np 2 and -np 3 through tests/unit/run_mpi.sh.) Every process
 * runs the program of collective_case.h on 1 and on 2 places, with roots
 * on another process than the first, and checks its places' results by
 * hand (c_allreduce_sum/max/min/prod, c_broadcast, c_allgather,
 * c_reduce_sum, c_identity, c_sync_*); a root outside the world is an
 * error on every trainer at construction, and nothing hangs. */
#ifdef PE_WITH_MPI
#include "tests/unit/collective_case.h"
#include "tests/unit/mpi_test.h"

static pe_status make_pe(const pe_program *p, int n, pe_scope *scope, pe_parallel_executor **pe) {
    pe_place pl[4];
    for (int i = 0; i < 4; i++) pl[i] = pe_place_cpu(i);
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.num_trainers = g_size;
    o.trainer_id = g_rank;
    o.exec_strategy.num_threads = n;
    return pe_parallel_executor_new(pl, n, p, scope, &o, pe);
}

static void run_world(int n, int root, int reduce_root, int runs) {
    int world = g_size * n;
    pe_program *p = cc_program(world, root, reduce_root);
    pe_scope *scope = pe_scope_new(NULL);
    pe_parallel_executor *pe;
    if (make_pe(p, n, scope, &pe) != PE_OK) fail_msg("rank %d, %d places: %s", g_rank, n, pe_last_error());
    cc_run(pe, g_rank * n, n, world, root, reduce_root, runs);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

static void test_one_place_each(void **state) {
    (void)state;
    run_world(1, g_size - 1, 0, 2);
    run_world(1, 0, g_size - 1, 1);
}

static void test_two_places_each(void **state) {
    (void)state;
    int world = 2 * g_size;
    run_world(2, world - 1, 1, 2);  /* the last process's second place; the first's second */
    run_world(2, 2, world - 2, 1);  /* the second process's first place */
}

static void test_root_outside_the_world(void **state) {
    (void)state;
    pe_program *p = pe_program_new();
    cc_var(p, "x", -1);
    cc_var(p, "y", -1);
    cc_op(p, "c_broadcast", "x", "y", "root", 2 * g_size);
    pe_scope *scope = pe_scope_new(NULL);
    pe_parallel_executor *pe = NULL;
    if (make_pe(p, 2, scope, &pe) == PE_OK) fail_msg("rank %d: built; want an error", g_rank);
    tu_assert_error_has("c_broadcast", "is not a rank of the world", NULL);
    pe_scope_free(scope);
    pe_program_free(p);
    MPI_Barrier(MPI_COMM_WORLD);
}

PE_MPI_TEST_MAIN(cmocka_unit_test(test_one_place_each), cmocka_unit_test(test_two_places_each),
                 cmocka_unit_test(test_root_outside_the_world))
#else
#include "tests/unit/mpi_test.h"
PE_MPI_TEST_SKIPPED("test_collective_mpi")
#endif
