#!/usr/bin/env bash
# tests/unit/run_mpi.sh NP PROGRAM [SKIP_REASON] — runs PROGRAM as NP MPI
# processes on this machine, for ctest (test_comm_mpi_np2, _np3).
#
# mpirun --oversubscribe (more processes than cores is fine here), shared
# memory only (--mca btl self,vader), in the environment of
# tests/unit/mpi_env.sh (as root, vader's single-copy off, PE_MPI_TIMEOUT
# 60, no ASan leak check), under `timeout` (PE_MPI_TEST_LIMIT seconds,
# default 100) so a hang ends as a failure. Exit 77 (ctest: skipped) with a
# visible line when SKIP_REASON is set or mpirun is missing.
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
. "$(dirname "$0")/mpi_env.sh"
exec timeout -k 5 "${PE_MPI_TEST_LIMIT:-100}" mpirun --oversubscribe -np "$np" --mca btl self,vader "$prog"
