#!/usr/bin/env bash
# benchmarks/peers/setup.sh — a venv with the peers PE is measured against:
# PyTorch 2.x and PaddlePaddle 3.x (CPU) from PyPI, with numpy.
#
#     benchmarks/peers/setup.sh            # makes benchmarks/peers/.venv (or $PE_PEERS_VENV)
#     benchmarks/peers/.venv/bin/python -c 'import torch, paddle'
#
# Only the benchmarks use it (bench_trainers.py --torch2-python, ...); the
# README's commands, the engine and its tests use Debian's packages only.
# Idempotent: a venv that already imports both is left as it is. Needs
# PyPI (PyTorch's Linux wheels from PyPI bring their CUDA libraries: a few
# GB of disk); set PE_PEERS="torch" or "paddle" to install one of them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${PE_PEERS_VENV:-$here/.venv}
peers=${PE_PEERS:-"torch paddle"}
py=/usr/bin/python3

want_import() {
    local mods=()
    for p in $peers; do mods+=("$p"); done
    (IFS=,; echo "${mods[*]}")
}

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import $(want_import)" 2>/dev/null; then
    echo "peers: $venv ready ($("$venv/bin/python" -c "import sys; mods=[__import__(m) for m in sys.argv[1:]]; print(', '.join(m.__name__ + ' ' + m.__version__ for m in mods))" $peers))"
    exit 0
fi
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
pkgs=(numpy)
for p in $peers; do
    case $p in
        torch) pkgs+=("torch>=2,<3") ;;
        paddle) pkgs+=("paddlepaddle>=3,<4") ;;
        *) echo "peers: unknown peer '$p' (torch, paddle)" >&2; exit 2 ;;
    esac
done
"$venv/bin/python" -m pip install --quiet "${pkgs[@]}"
"$venv/bin/python" -c "import sys; mods=[__import__(m) for m in sys.argv[1:]]; print('peers: ' + ', '.join(m.__name__ + ' ' + m.__version__ for m in mods))" $peers
