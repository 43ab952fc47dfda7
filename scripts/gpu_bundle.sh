#!/bin/sh
# scripts/gpu_bundle.sh — pack a CUDA build of PE for a GPU machine that lacks
# PE's Debian packages (a lent machine with the CUDA toolkit but no apt).
#
#     scripts/gpu_bundle.sh [BUILD_DIR] [OUT]      # defaults: build-gpu .gpu/bundle.tar.xz
#     # there:  PE_GPU_BUNDLE=.gpu/bundle.tar.xz scripts/test_gpu.sh
#
# Build BUILD_DIR first, with at least the programs scripts/test_gpu.sh runs:
#     cmake -S . -B build-gpu -DPE_WERROR=ON -DPE_WITH_MPI=ON -DPE_WITH_ZMQ=OFF \
#           -DPE_BUILD_PYTHON=OFF -DCMAKE_CUDA_ARCHITECTURES=90      # the GPU's arch
#     cmake --build build-gpu --target pe_tool test_cuda test_cuda_places \
#           test_block_cache test_staging test_comm test_comm_conformance bench_nccl \
#           test_comm_mpi bench_comm_mpi bench_timeline           # the `mpi` step
# The bundle holds BUILD_DIR's bin/ and lib/ (PE's programs and static
# libraries, for the Python extension that scripts/test_gpu.sh links there
# against that machine's Python) and the shared libraries they need that are
# not part of CUDA or glibc (oneDNN, OpenBLAS, cJSON, flatbuffers, OpenMP,
# gfortran), found with ldd. CUDA's own libraries (cudart, cuBLAS, cuDNN,
# NCCL) come from the GPU machine, whose driver they must match.
#
# Open MPI, when BUILD_DIR's programs link it (-DPE_WITH_MPI=ON; the GPU
# machines have no MPI): the bundle also holds this machine's Open MPI 4.1
# (mpirun/orterun, orted, its libraries and components under ompi/, the
# help texts) and the PMIx it uses (pmix/), with their libraries in deps/;
# scripts/gpu_mpi_env.sh points a shell there (OPAL_PREFIX,
# PMIX_INSTALL_PREFIX, PATH), and scripts/test_gpu.sh's `mpi` step uses it.
# Checked here with the system's Open MPI hidden (bind mounts in a mount
# namespace): test_comm_mpi and bench_timeline ran on 2 processes.
set -eu
build=${1:-build-gpu}
out=${2:-.gpu/bundle.tar.xz}
[ -x "$build/bin/pe" ] || { echo "gpu_bundle: $build/bin/pe not found: build it first" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/deps" "$(dirname "$out")"
cp -a "$build/bin" "$build/lib" "$stage/"
# Debug sections are most of the size; the travelling bundle goes without them.
strip --strip-debug "$stage"/bin/* "$stage"/lib/*.a 2>/dev/null || true
# Open MPI (and its PMIx) when the programs link it: the tree mirrors /usr so
# that OPAL_PREFIX=<bundle>/ompi relocates every path Open MPI derives from it
ompi_libs=
if for f in "$build"/bin/*; do ldd "$f" 2>/dev/null; done | grep -q 'libmpi\.so'; then
    arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
    ompi=$(dirname "$(dirname "$(readlink -f "$(command -v orterun || command -v mpirun)")")")   # /usr
    mkdir -p "$stage/ompi/bin" "$stage/ompi/lib/$arch" "$stage/ompi/share"
    cp -L "$ompi/bin/orterun" "$ompi/bin/orted" "$stage/ompi/bin/"
    ln -s orterun "$stage/ompi/bin/mpirun"
    cp -a "$ompi/lib/$arch/openmpi" "$stage/ompi/lib/$arch/"
    cp -a "$ompi/share/openmpi" "$stage/ompi/share/"
    [ -d "$ompi/lib/$arch/pmix2" ] && cp -a "$ompi/lib/$arch/pmix2" "$stage/pmix"
    ompi_libs=$(ls "$stage"/ompi/bin/orte* "$stage"/ompi/bin/orted "$stage"/ompi/lib/$arch/openmpi/lib/openmpi3/*.so \
                "$stage"/pmix/lib/*.so* "$stage"/pmix/lib/pmix/*.so 2>/dev/null || true)
    rm -rf "$stage/ompi/lib/$arch/openmpi/include" "$stage/pmix/include"
fi
for f in "$build"/bin/* $ompi_libs; do ldd "$f" 2>/dev/null; done | awk '/=> \//{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so|/libcud|/libcublas|/libnccl|/libnvrtc|/libnvJitLink' |
    while read -r lib; do cp -L "$lib" "$stage/deps/"; done
# The extension links these by name (-ldnnl ...): give each its plain .so name too.
for f in "$stage"/deps/*.so.*; do
    base=$(basename "$f"); plain=${base%%.so.*}.so
    [ -e "$stage/deps/$plain" ] || ln -s "$base" "$stage/deps/$plain"
done
tar -C "$stage" -cJf "$out" . 
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1))"
