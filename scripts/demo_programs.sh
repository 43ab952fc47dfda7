#!/usr/bin/env bash
# scripts/demo_programs.sh — the example-program demo: set up, build, and run
# the example programs on real Fashion-MNIST test images with `pe run`.
# (The main demo, scripts/demo.sh, trains a model; this one shows the engine
# and the `pe` tool on the static example programs.)
#
# What it does: scripts/setup.sh (Debian packages), a build into build/,
# then converts the first N images of the Fashion-MNIST test set
# (/usr/share/datasets/fashion-mnist, idx format, gzip) to .npy and runs
# examples/mlp_infer.pe and examples/cnn_infer.pe (each with its startup
# program) on them, printing the predicted classes and probabilities.
#
# The example parameters come from the startup programs (random, fixed
# seeds) — the models are untrained, so the predictions are meaningless; the
# demo shows the engine computing, not a classifier (scripts/demo.sh trains).
#
#   scripts/demo_programs.sh [N]     N images (default 8)
#   PE_BUILD_DIR=DIR                 build directory (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
PY=/usr/bin/python3
n=${1:-8}
data=/usr/share/datasets/fashion-mnist

step() { printf '\n==== %s ====\n' "$*"; }

step "setup"
scripts/setup.sh

bdir=${PE_BUILD_DIR:-build}
step "build ($bdir/)"
scripts/build.sh "$bdir"
pe=$(cd "$bdir" && pwd)/bin/pe

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step "data: the first $n Fashion-MNIST test images -> .npy"
$PY - "$data" "$work" "$n" <<'EOF'
import gzip, struct, sys
import numpy as np
data, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(data + "/t10k-images-idx3-ubyte.gz") as f:
    magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
    assert magic == 2051, "not an idx3 image file"
    n = min(n, count)
    img = np.frombuffer(f.read(n * rows * cols), np.uint8).reshape(n, 1, rows, cols)
with gzip.open(data + "/t10k-labels-idx1-ubyte.gz") as f:
    magic, count = struct.unpack(">II", f.read(8))
    assert magic == 2049, "not an idx1 label file"
    labels = np.frombuffer(f.read(n), np.uint8).astype(np.int64)
x = img.astype(np.float32) / 255.0                       # pixels in [0, 1]
np.save(work + "/img.npy", x)                            # CNN input [N, 1, 28, 28]
np.save(work + "/x.npy", x.reshape(n, rows * cols))      # MLP input [N, 784]
np.save(work + "/labels.npy", labels)
print("%d images %dx%d, labels %s" % (n, rows, cols, labels.tolist()))
EOF

for model in mlp cnn; do
  step "$model: pe inspect examples/${model}_infer.pe"
  "$pe" inspect "examples/${model}_infer.pe"

  input=x; [ "$model" = cnn ] && input=img
  step "$model: pe run examples/${model}_infer.pe --startup examples/${model}_infer_startup.pe"
  "$pe" run "examples/${model}_infer.pe" --startup "examples/${model}_infer_startup.pe" \
    --feed "$input=$work/$input.npy" --fetch prob --out "$work/$model"
done

step "what they computed"
$PY - "$work" <<'EOF'
import sys
import numpy as np
work = sys.argv[1]
names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
labels = np.load(work + "/labels.npy")
probs = {m: np.load("%s/%s/prob.npy" % (work, m)) for m in ("mlp", "cnn")}
print("%-3s %-12s | %-26s | %-26s" % ("#", "true class", "MLP: predicted (prob)", "CNN: predicted (prob)"))
for i, y in enumerate(labels):
    cols = []
    for m in ("mlp", "cnn"):
        p = probs[m][i]
        k = int(p.argmax())
        cols.append("%-12s (%.3f)" % (names[k], p[k]))
    print("%-3d %-12s | %-26s | %-26s" % (i, names[y], cols[0], cols[1]))
for m in ("mlp", "cnn"):
    p = probs[m]
    print("%s: prob rows sum to %.6f..%.6f; max prob %.3f (uniform would be 0.100); "
          "accuracy %d/%d" % (m.upper(), p.sum(1).min(), p.sum(1).max(), p.max(),
                              int((p.argmax(1) == labels).sum()), len(labels)))
print("\nNOTE: the parameters are the random initial values of the startup programs\n"
      "(untrained), so these predictions are meaningless -- about 1 in 10 right by\n"
      "chance. The demo shows PE running the programs; tests/python/test_examples.py\n"
      "checks that the numbers match PyTorch within 1e-5.")
EOF
