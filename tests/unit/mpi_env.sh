# tests/unit/mpi_env.sh — sourced by run_mpi.sh and run_netns.sh: the
# environment of a test run under mpirun.
#
# As root when we are root; vader's single-copy off (containers often forbid
# process_vm_readv; harmless where vader is not used); PE_MPI_TIMEOUT
# (seconds without progress before PE fails the pending collectives) 60;
# one OpenMP thread per process. Every process inherits it: the ranks from
# mpirun, or from a remote orted that was started with mpirun's environment.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export PE_MPI_TIMEOUT=${PE_MPI_TIMEOUT:-60}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# ASan builds: Open MPI's own allocations (in plugins it unloads, so no
# suppression can name them) read as leaks at exit; leak checking is off
# for these tests, every other ASan/UBSan check stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# TSan builds: Open MPI's internal handoffs are invisible to TSan
# (tests/unit/tsan.supp says which accesses are ignored).
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/tsan.supp"
