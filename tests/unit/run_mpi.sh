#!/usr/bin/env bash
# tests/unit/run_mpi.sh NP PROGRAM [SKIP_REASON] — runs PROGRAM as NP MPI
# processes on this machine, for ctest (test_comm_mpi_np2, _np3).
#
# mpirun --oversubscribe (more processes than cores is fine here), shared
# memory only (--mca btl self,vader; single-copy off: containers often
# forbid process_vm_readv), as root when we are root, under `timeout`
# (PE_MPI_TEST_LIMIT seconds, default 100) so a hang ends as a failure. PE_MPI_TIMEOUT (seconds without progress before
# PE fails the pending collectives) is 60 here; ASan's leak check is off
# (see below). Exit 77 (ctest: skipped)
# with a visible line when SKIP_REASON is set or mpirun is missing.
set -u
np=$1
prog=$2
skip=${3:-}
name=$(basename "$prog")
if [ -n "$skip" ]; then
    echo "[  SKIPPED ] $name -np $np: $skip"
    exit 77
fi
if ! command -v mpirun >/dev/null 2>&1; then
    echo "[  SKIPPED ] $name -np $np: mpirun not found (openmpi-bin; scripts/setup.sh installs it)"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export PE_MPI_TIMEOUT=${PE_MPI_TIMEOUT:-60}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# ASan builds: Open MPI's own allocations (in plugins it unloads, so no
# suppression can name them) read as leaks at exit; leak checking is off
# for these tests, every other ASan/UBSan check stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# TSan builds: Open MPI's internal handoffs are invisible to TSan
# (tests/unit/tsan_mpi.supp says which accesses are ignored).
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$(cd "$(dirname "$0")" && pwd)/tsan_mpi.supp"
exec timeout -k 5 "${PE_MPI_TEST_LIMIT:-100}" mpirun --oversubscribe -np "$np" --mca btl self,vader "$prog"
