#!/usr/bin/env bash
# benchmarks/compare_builds.sh — the same benchmarks on two builds of PE,
# side by side in one run, taking turns (so a busy host slows both alike).
#
#   benchmarks/compare_builds.sh BASE_REV [ROUNDS]
#
# Builds BASE_REV (a git revision: e.g. the commit before a change) in a
# worktree under ${TMPDIR:-/tmp}/pe-compare-<rev>, and this checkout in
# build/ (RelWithDebInfo, no CUDA for the base), then runs ROUNDS (default 5)
# rounds; each round runs every benchmark on the base build, then on this
# one:
#   bench_scaling all 128 60       data-parallel scaling, 2 places vs 1 (MLP, CNN)
#   bench_executor overhead 10000  scheduler / executor overhead per op (chain, fan)
#   bench_executor allreduce 100   in-process allreduce of 100 MB, 2 places (as
#                                  training runs it, and with every thread;
#                                  a base from before 2026-11-25 has only the
#                                  chain and every-thread keys: mapped)
# and prints, per figure, the median over the rounds of each build, the
# range, and new/base. Figures are higher-is-better except the *_us_per_op
# and *_s ones. Run from anywhere; prints a Markdown table at the end.
set -euo pipefail
base=${1:?usage: compare_builds.sh BASE_REV [ROUNDS]}
rounds=${2:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
rev=$(git -C "$root" rev-parse --short "$base")
bdir=${TMPDIR:-/tmp}/pe-compare-$rev
jobs=$(nproc)

if [ ! -d "$bdir" ]; then git -C "$root" worktree add --detach "$bdir" "$rev" >/dev/null; fi
cmake -S "$bdir" -B "$bdir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_WITH_CUDA=OFF -DPE_BUILD_PYTHON=OFF \
  -DPE_BUILD_TESTS=OFF >/dev/null
cmake --build "$bdir/build" -j"$jobs" --target bench_scaling bench_executor >/dev/null
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j"$jobs" --target bench_scaling bench_executor >/dev/null

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # run <tree> <tag>
  (cd "$1" && OMP_NUM_THREADS=1 build/bin/bench_scaling all 128 60 &&
    OMP_NUM_THREADS=1 build/bin/bench_executor overhead 10000 &&
    build/bin/bench_executor allreduce 100) | grep -E '^[a-z_0-9]+=' >>"$out/$2"
}
for r in $(seq "$rounds"); do
  echo "round $r/$rounds" >&2
  run "$bdir" base
  run "$root" new
done

/usr/bin/python3 - "$out/base" "$out/new" "$rev" <<'EOF'
import statistics, sys
# Keys of bench_executor before 2026-11-25, under today's names: the chain
# was the only overhead shape, and the allreduce gave the call every thread.
OLD = {"executor_us_per_op": "chain_executor_us_per_op",
       "parallel_executor_us_per_op_1thread": "chain_parallel_executor_us_per_op_1thread",
       "parallel_executor_us_per_op_2threads": "chain_parallel_executor_us_per_op_2threads",
       "allreduce_s": "all_threads_allreduce_s", "memcpy_s": "all_threads_memcpy_s",
       "allreduce_GBps": "all_threads_allreduce_GBps", "memcpy_GBps": "all_threads_memcpy_GBps",
       "allreduce_vs_memcpy": "all_threads_allreduce_vs_memcpy"}
SKIP = ("ops", "chain_ops", "fan_ops", "allreduce_mb", "allreduce_checked", "training_threads",
        "all_threads_threads")
def load(p):
    d = {}
    for line in open(p):
        k, v = line.strip().split("=", 1)
        try: d.setdefault(OLD.get(k, k), []).append(float(v))
        except ValueError: pass
    return d
b, n = load(sys.argv[1]), load(sys.argv[2])
print(f"| figure | base {sys.argv[3]} (median, range) | this build (median, range) | this / base |")
print("| --- | --- | --- | --- |")
for k in b:
    if k not in n or k in SKIP: continue
    mb, mn = statistics.median(b[k]), statistics.median(n[k])
    print(f"| {k} | {mb:.3f} ({min(b[k]):.3f}–{max(b[k]):.3f}) | {mn:.3f} ({min(n[k]):.3f}–{max(n[k]):.3f}) | "
          f"{mn / mb if mb else float('nan'):.3f} |")
EOF
