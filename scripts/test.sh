#!/usr/bin/env bash
# scripts/test.sh — the test command (README, .ci/run).
#
# Installs what is missing (scripts/setup.sh), builds build/ with
# -Wall -Wextra -Werror (CUDA sources included when nvcc exists), runs ctest
# and pytest, then the ASan/UBSan build of the test suite, the TSan build of
# the scheduler tests and a short libFuzzer run of every parser. Exits non-zero on any failure.
#
#   PE_TEST_QUICK=1   skip the sanitizer build and the fuzz run (developer loop)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
PY=/usr/bin/python3

step() { printf '\n==== %s ====\n' "$*"; }

step "setup"
scripts/setup.sh

step "build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_WERROR=ON >/dev/null
cmake --build build -j"$jobs"

step "ctest (build/)"
# Kernels get one thread each while tests run two at a time.
(cd build && OMP_NUM_THREADS=1 ctest --output-on-failure -j"$jobs" --timeout 600)

step "pytest"
if ls tests/python/test_*.py tests/ops/test_*.py >/dev/null 2>&1; then
  PE_BIN_DIR="$root/build/bin" PYTHONPATH="$root/build/python:${PYTHONPATH:-}" \
    OMP_NUM_THREADS=1 $PY -m pytest -q -p no:cacheprovider tests/python tests/ops
else
  echo "no Python tests yet"
fi

if [ "${PE_TEST_QUICK:-0}" = 1 ]; then
  echo "PE_TEST_QUICK=1: skipping the sanitizer build and the fuzz run"
  exit 0
fi

step "ASan/UBSan build (build-asan/) and ctest"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPE_SANITIZE=address -DPE_WITH_CUDA=OFF \
  -DPE_BUILD_PYTHON=OFF >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=1 \
  ctest --output-on-failure -j"$jobs" --timeout 900)

step "TSan build (build-tsan/): the scheduler, collectives, ParallelExecutor, memory plan, sharded optimizer and pserver transport tests"
# test_memory_plan trains with the memory plan on 1 and 3 places: two ops the
# scheduler may run at once writing shared arena bytes would be a race here;
# test_shard_optimizer runs the shards of one update at once on shared storage;
# test_comm_conformance and test_scheduler complete collectives and handles
# from other threads than the ones that started them; test_pe_async_comm runs
# the executor's collectives through works and their callbacks;
# test_comm_mpi (run by ctest under mpirun -np 2 and 3, and across two
# network namespaces over TCP) completes works on the MPI backend's progress
# thread; test_pe_trainers trains across MPI
# processes (collectives completing through works); test_world calls the
# process world from two threads at once; test_check_nan_inf reads
# each shard's range of shared storage while the other shards update theirs,
# and checks sums inside those callbacks; test_timeline records handles from
# every pool thread and from collectives' callbacks into one array;
# test_transport runs a pserver (its loop or a test's server thread) and a
# trainer client in one process over loopback; test_staging and
# test_block_cache (the GPU's pinned staging ring and caching allocator,
# CPU-tested) feed one ring / allocate from one cache from several threads
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DPE_SANITIZE=thread -DPE_WITH_CUDA=OFF \
  -DPE_BUILD_PYTHON=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target test_parallel_executor test_memory_plan test_shard_optimizer test_comm \
  test_comm_conformance test_scheduler test_pe_async_comm test_comm_mpi test_pe_trainers test_check_nan_inf test_world \
  test_timeline test_transport test_staging test_block_cache
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/../tests/unit/tsan.supp \
  OMP_NUM_THREADS=1 \
  ctest --output-on-failure --timeout 900 -R 'parallel_executor|scheduler|memory_plan|shard_optimizer|test_comm|pe_async_comm|pe_trainers|check_nan_inf|test_world|timeline|test_transport|test_staging|test_block_cache')

if [ -x tests/fuzz/run_short.sh ]; then
  step "short fuzz run"
  tests/fuzz/run_short.sh
fi

step "all tests passed"
