#!/usr/bin/env bash
# scripts/test_gpu.sh — every CUDA test and the GPU benchmark, on a machine with a GPU.
#
#     scripts/test_gpu.sh                      # builds build-gpu/ here (scripts/setup.sh first)
#     PE_GPU_BUNDLE=.gpu/bundle.tar.xz scripts/test_gpu.sh
#         # a CUDA build packed elsewhere by scripts/gpu_bundle.sh, for a GPU
#         # machine without PE's Debian packages; the Python extension is
#         # linked here against this machine's python3
#
# Steps (each logs to $PE_GPU_LOGS, default gpu-logs/; a summary at the end):
#   unit      the CUDA unit tests (test_cuda_places, test_cuda, test_block_cache,
#             test_staging, and the NCCL collectives of test_comm /
#             test_comm_conformance)
#   backend   tests/ops/test_backend_ops.py: every op's CUDA kernel against
#             its CPU kernel, forward and backward, and determinism
#             (PE_GPU_BACKEND_K=EXPR passes -k EXPR: a subset of the rows)
#   train     tests/python/test_cuda_train.py (MLP and CNN, 20 steps, CUDA vs
#             CPU, 1 and 2 GPUs) and the seed-003 examples with use_cuda = True
#   eager     tests/python/test_eager_cuda.py: eager mode on cuda:0 against
#             cpu (the eager op table with gradients, nn training), and
#             tests/ops/test_eager_ops.py with every row eager vs static,
#             both on cuda:0
#   bench     benchmarks/bench_gpu.py: PE vs PyTorch on this GPU
#   ops       with PE_GPU_OPS=1 also the op conformance suites (tests/ops) with
#             every op on cuda:0 (the backend step already checks each CUDA
#             run against the same PyTorch references)
#   mpi       when build-gpu has the MPI backend (-DPE_WITH_MPI=ON; a bundle
#             brings Open MPI along, scripts/gpu_mpi_env.sh): test_comm_mpi on
#             2 and 3 processes, the allreduce benchmark, and the MLP and CNN
#             as 2 processes x 1 place (not bound to cores: each process's
#             progress thread may take a spare one) with the timeline and
#             its report (hidden / comm), against 1 process x 2 places: what
#             the 2-core CI machine cannot show (docs/benchmarks.md,
#             "Timeline"); timelines in $PE_GPU_LOGS
# PE_GPU_STEPS="unit backend" runs only the steps named.
# PE_GPU_STEP_TIMEOUT=S stops a step after S seconds (SIGINT: pytest still
# prints what failed so far). Needs python3 with numpy, torch and pytest (pytest-xdist when present runs
# the op suites in parallel). Exits non-zero when any step failed; tests
# that need more GPUs than the machine has are skipped, and listed (-rs).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
logs=${PE_GPU_LOGS:-$root/gpu-logs}
PY=${PE_GPU_PYTHON:-python3}
mkdir -p "$logs"
step() { printf '\n==== %s ====\n' "$*"; }

if [ -n "${PE_GPU_BUNDLE:-}" ]; then
  step "unpack $PE_GPU_BUNDLE into build-gpu/"
  rm -rf build-gpu && mkdir -p build-gpu && tar -C build-gpu -xJf "$PE_GPU_BUNDLE" || exit 1
  export LD_LIBRARY_PATH="$root/build-gpu/deps:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  step "Python extension for $($PY -c 'import sys; print(sys.version.split()[0])')"
  out=build-gpu/python/pe
  mkdir -p "$out" && cp -r bindings/python/pe/. "$out/" && find "$out" -name '*.c' -o -name '*.h' | xargs rm -f
  so=$($PY -c 'import sysconfig; print("_core" + sysconfig.get_config_var("EXT_SUFFIX"))')
  pyinc=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  npinc=$($PY -c 'import numpy; print(numpy.get_include())')
  mpi=(); [ -e build-gpu/deps/libmpi.so ] && mpi=(-DPE_WITH_MPI=1)   # a build with the MPI backend
  gcc -O2 -fPIC -shared -DPE_WITH_CUDA=1 -DPE_WITH_NCCL=1 "${mpi[@]}" -Iinclude -I. -I"$pyinc" -I"$npinc" \
    bindings/python/pe/*.c \
    -Wl,--whole-archive build-gpu/lib/libpe_executor.a build-gpu/lib/libpe_passes.a build-gpu/lib/libpe_ops.a \
    build-gpu/lib/libpe_graph.a build-gpu/lib/libpe_runtime.a -Wl,--no-whole-archive \
    -Lbuild-gpu/deps -L/usr/local/cuda/lib64 -ldnnl -lopenblas -lcjson -lflatbuffers -lgomp \
    -lcudart -lcublas -lcudnn -lnccl ${mpi:+-lmpi} -lstdc++ -lm -lpthread -o "$out/$so" ||
    echo "test_gpu: the Python extension did not build: the Python API tests will fail"
else
  step "setup and build (build-gpu/)"
  scripts/setup.sh || exit 1
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_WERROR=ON -DPE_WITH_CUDA=ON >/dev/null || exit 1
  cmake --build build-gpu -j"$(nproc)" || exit 1
fi
export PE_BIN_DIR="$root/build-gpu/bin" PYTHONPATH="$root/build-gpu/python:${PYTHONPATH:-}"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>/dev/null | tee "$logs/gpus.txt"

xdist=()
$PY -c 'import xdist' 2>/dev/null && xdist=(-n "$(nproc)")
declare -A result
run() { # name command...
  local name=$1; shift
  case " ${PE_GPU_STEPS:-unit train eager bench backend ops mpi} " in *" $name "*) ;; *) return 0 ;; esac
  step "$name"
  local t=()
  [ -n "${PE_GPU_STEP_TIMEOUT:-}" ] && [ "$(type -t "$1")" != function ] && t=(timeout -s INT -k 20 "$PE_GPU_STEP_TIMEOUT")
  "${t[@]}" "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  result[$name]=$rc
  return 0
}
unit() {
  local rc=0
  for t in test_cuda_places test_cuda test_block_cache test_staging test_comm test_comm_conformance; do
    [ -x "build-gpu/bin/$t" ] || continue
    echo "--- $t"
    "build-gpu/bin/$t"; r=$?
    [ $r -eq 0 ] || [ $r -eq 77 ] || rc=1
  done
  return $rc
}
run unit unit
mpi() {
  if [ ! -x build-gpu/bin/test_comm_mpi ]; then
    echo "[  SKIPPED ] mpi: build-gpu has no MPI backend (configure it with -DPE_WITH_MPI=ON)"
    return 0
  fi
  if [ -n "${PE_GPU_BUNDLE:-}" ] && [ -x build-gpu/ompi/bin/orterun ]; then
    . scripts/gpu_mpi_env.sh build-gpu || return 1
  fi
  command -v mpirun >/dev/null || { echo "mpi: no mpirun here, and the bundle brought none"; return 1; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local rc=0 m steps
  for np in 2 3; do
    echo "--- test_comm_mpi, $np processes"
    mpirun --oversubscribe -np $np --mca btl self,vader build-gpu/bin/test_comm_mpi || rc=1
  done
  echo "--- bench_comm_mpi"
  mpirun -np 2 --bind-to none --mca btl self,vader build-gpu/bin/bench_comm_mpi 15 || rc=1
  for m in mlp cnn; do
    steps=60; [ $m = cnn ] && steps=30
    echo "--- $m: 2 processes x 1 place, then 1 process x 2 places"
    OMP_NUM_THREADS=1 mpirun -np 2 --bind-to none --mca btl self,vader -x OMP_NUM_THREADS \
      build-gpu/bin/bench_timeline $m 1 $steps "$logs/tl_${m}_2x1" || rc=1
    $PY scripts/timeline_report.py "$logs/tl_${m}_2x1.rank*.json" --skip 5 || rc=1
    OMP_NUM_THREADS=1 build-gpu/bin/bench_timeline $m 2 $steps "$logs/tl_${m}_2p" || rc=1
  done
  return $rc
}
run train $PY -m pytest -q -rs -p no:cacheprovider tests/python/test_cuda_train.py \
  tests/python/test_api_paddle_examples.py -k "${PE_GPU_TRAIN_K:-cuda}"
run eager env PE_TEST_PLACES=cuda:0 $PY -m pytest -q -rs -p no:cacheprovider "${xdist[@]}" \
  tests/python/test_eager_cuda.py tests/ops/test_eager_ops.py
run bench $PY benchmarks/bench_gpu.py --out "$logs/bench_gpu.md" ${PE_GPU_BENCH_ARGS:-}
run backend $PY -m pytest -q -rs -p no:cacheprovider "${xdist[@]}" tests/ops/test_backend_ops.py \
  ${PE_GPU_BACKEND_K:+-k "$PE_GPU_BACKEND_K"}
run mpi mpi
steps=${PE_GPU_STEPS:-unit train eager bench backend mpi}
if [ "${PE_GPU_OPS:-0}" = 1 ]; then
  run ops env PE_TEST_PLACES=cuda:0 $PY -m pytest -q -rs -p no:cacheprovider "${xdist[@]}" \
    tests/ops/test_forward_ops.py tests/ops/test_grad_ops.py
  case " $steps " in *" ops "*) ;; *) steps="$steps ops" ;; esac
fi

step "summary"
fail=0
for k in $steps; do
  printf '%-8s %s\n' "$k" "$([ "${result[$k]:-1}" = 0 ] && echo passed || echo "FAILED (${result[$k]:-not run})")"
  [ "${result[$k]:-1}" = 0 ] || fail=1
done | tee "$logs/summary.txt"
grep -q FAILED "$logs/summary.txt" && exit 1
exit 0
