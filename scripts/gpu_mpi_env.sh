# scripts/gpu_mpi_env.sh — source it to use the Open MPI that scripts/gpu_bundle.sh
# packed (for a GPU machine without MPI):
#
#     . scripts/gpu_mpi_env.sh [DIR]      # DIR: where the bundle was unpacked (default build-gpu)
#     mpirun --oversubscribe -np 2 DIR/bin/test_comm_mpi
#
# Open MPI relocates every path it derives from its prefix to OPAL_PREFIX
# (its components, help texts), PMIx likewise to PMIX_INSTALL_PREFIX; the
# libraries come from DIR/deps. Also what running as root needs, and no
# warnings for components whose libraries (InfiniBand, UCX, ...) the
# machine lacks: on one machine only shared memory (vader) is used.
_pe_b=$(cd "${1:-build-gpu}" && pwd) || return 1
if [ ! -x "$_pe_b/ompi/bin/orterun" ]; then
  echo "gpu_mpi_env: $_pe_b/ompi/bin/orterun not found: the bundle has no Open MPI (build with -DPE_WITH_MPI=ON)" >&2
  return 1
fi
export OPAL_PREFIX="$_pe_b/ompi" PMIX_INSTALL_PREFIX="$_pe_b/pmix"
export PATH="$_pe_b/ompi/bin:$PATH" LD_LIBRARY_PATH="$_pe_b/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mca_base_component_show_load_errors=0
unset _pe_b
