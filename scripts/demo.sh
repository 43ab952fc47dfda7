#!/usr/bin/env bash
# scripts/demo.sh — the main job: set up, build, and train a model on
# Fashion-MNIST with PE's Python API, on all cores.
#
# What it does: scripts/setup.sh (Debian packages, incl. dataset-fashion-mnist),
# a build into build/ (the engine, the `pe` tool and the Python package in
# build/python), then examples/train_fashion_mnist.py with its defaults: the
# MLP (784-512-256-10) trained data-parallel over CPU_NUM places (default:
# every core), a progress bar per epoch, an evaluation on the 10,000 test
# images after each epoch and a checkpoint per epoch in build/checkpoints,
# where the run also leaves metrics.jsonl and the picture of its curves,
# training.png (train loss, accuracy, throughput; README shows it).
# The last line of the output is the job's `test_accuracy=<value>`.
#
#   scripts/demo.sh                    the default MLP run (see README.md for its time)
#   scripts/demo.sh --model cnn        any train_fashion_mnist.py options pass through
#   PE_BUILD_DIR=DIR                   build directory (default build)
#   CPU_NUM=N                          places (default: all cores)
#
# The older demo that runs the static example programs with `pe run` is
# scripts/demo_programs.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3

step() { printf '\n==== %s ====\n' "$*"; }

step "setup"
scripts/setup.sh

bdir=${PE_BUILD_DIR:-build}
step "build ($bdir/)"
scripts/build.sh "$bdir"
bdir=$(cd "$bdir" && pwd)

step "train: examples/train_fashion_mnist.py $*"
PYTHONPATH="$bdir/python${PYTHONPATH:+:$PYTHONPATH}" \
  exec $PY examples/train_fashion_mnist.py --ckpt-dir "$bdir/checkpoints" "$@"
