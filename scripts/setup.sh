#!/usr/bin/env bash
# scripts/setup.sh — installs the Debian packages PE needs (DESIGN.md §5).
# Idempotent and quick: checks with dpkg first and only calls apt-get for
# what is missing.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang libclang-rt-14-dev libomp-14-dev
  libflatbuffers-dev flatbuffers-compiler
  libopenblas-openmp-dev libdnnl-dev libcjson-dev libcmocka-dev
  libopenmpi-dev openmpi-bin
  libzmq3-dev
  python3 python3-dev python3-numpy python3-pytest python3-torch python3-pip
  python3-matplotlib python3-venv python3-wheel python3-setuptools
  dataset-fashion-mnist
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
