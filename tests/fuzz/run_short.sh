#!/usr/bin/env bash
# tests/fuzz/run_short.sh — a short libFuzzer run of every parser.
#
# Configures build-fuzz/ with clang, ASan+UBSan and libFuzzer
# (-DPE_BUILD_FUZZ=ON), builds every tests/fuzz/fuzz_<name>.c, and runs each
# for its share of PE_FUZZ_TOTAL_SECONDS (default 90: the CI run stays about
# a minute and a half however many targets there are; at least 10 s each),
# or PE_FUZZ_SECONDS each when set, on a temporary copy of its seed corpus
# tests/fuzz/corpus/<name>/ (the committed corpus is never modified). Runs
# the targets one after another. Exits non-zero if any target crashes, leaks,
# times out or runs out of memory; the reproducer is kept under
# build-fuzz/artifacts/<target>/. scripts/test.sh calls this; docs/fuzzing.md
# explains it and gives the long-run commands.
#
#   PE_FUZZ_TOTAL_SECONDS=90  run time of all targets together (split evenly)
#   PE_FUZZ_SECONDS=...       run time per target (overrides the total)
#   PE_FUZZ_BUILD_DIR=...  build directory (default build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
bdir=${PE_FUZZ_BUILD_DIR:-build-fuzz}
case "$bdir" in /*) ;; *) bdir="$root/$bdir" ;; esac
jobs=$(nproc)

for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "run_short.sh: $tool not found (scripts/setup.sh installs it)" >&2; exit 1; }
done

targets=()
for src in tests/fuzz/fuzz_*.c; do
  [ -e "$src" ] || continue
  targets+=("$(basename "$src" .c)")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "run_short.sh: no tests/fuzz/fuzz_*.c targets" >&2
  exit 1
fi
total=${PE_FUZZ_TOTAL_SECONDS:-90}
secs=${PE_FUZZ_SECONDS:-$(( total / ${#targets[@]} ))}
[ "$secs" -ge 10 ] || secs=10

echo "fuzz: configuring $bdir (clang, ASan+UBSan, libFuzzer)"
cmake -S . -B "$bdir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPE_BUILD_FUZZ=ON -DPE_SANITIZE=address \
  -DPE_WITH_CUDA=OFF -DPE_BUILD_TESTS=OFF -DPE_BUILD_PYTHON=OFF >/dev/null
echo "fuzz: building ${targets[*]}"
cmake --build "$bdir" -j"$jobs" --target "${targets[@]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/pe-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  corpus="$work/$name"
  mkdir -p "$corpus"
  if [ -d "tests/fuzz/corpus/$name" ]; then
    cp -R "tests/fuzz/corpus/$name/." "$corpus/"
  else
    echo "fuzz: warning: no seed corpus tests/fuzz/corpus/$name/ for $t" >&2
  fi
  artifacts="$bdir/artifacts/$t"
  mkdir -p "$artifacts"
  echo "fuzz: $t for ${secs}s on $(ls "$corpus" | wc -l) seeds"
  log="$work/$t.log"
  rc=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} OMP_NUM_THREADS=1 \
    "$bdir/bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1 || rc=$?
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)" "$log" || true
  if [ $rc -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); reproducers in $artifacts:" >&2
    grep -E "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY|Test unit written" "$log" >&2 || true
    tail -n 60 "$log" >&2
    failed+=("$t")
  else
    echo "fuzz: $t ok"
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: failures in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${secs}s without a crash or leak"
