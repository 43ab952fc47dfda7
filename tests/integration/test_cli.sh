#!/usr/bin/env bash
# tests/integration/test_cli.sh — the `pe` command-line tool end to end.
#
# Drives $PE_BIN_DIR/pe on small hand-written JSON programs in a temp dir:
# help and usage exit codes, convert round trips (.json -> .pe -> .json),
# a run with a numeric check against numpy, a run on an empty batch,
# startup / checkpoint flags, and hostile inputs (missing, truncated,
# bit-flipped, random and empty program and .npy files, wrong feeds, unknown
# fetches, an empty batch on 2 places), each of which must exit 1
# with exactly one stderr line "pe: error: ..." naming the problem — and
# never a signal (exit code >= 128), which matters most in the ASan build.
# Inputs are generated with /usr/bin/python3 + numpy (the python3 first on
# PATH has no numpy). Prints one line per case and "N passed, M failed".
set -u

PE="${PE_BIN_DIR:?set PE_BIN_DIR to the directory holding pe}/pe"
SRC="${PE_SOURCE_DIR:?set PE_SOURCE_DIR to the source tree}"
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
# In the ASan build, let an impossible allocation (a corrupted dim asking for
# terabytes) return NULL as the real allocator does, so the test sees PE's
# out-of-memory error instead of ASan's abort; ASan then prints one
# "failed to allocate" warning, which pe_ drops from the captured stderr.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
T="$(mktemp -d "${TMPDIR:-/tmp}/pe_cli.XXXXXX")"
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1

n_pass=0
n_fail=0
RC=0

# pe_ ARGS...: runs pe, stdout -> $T/out, stderr -> $T/err, exit code -> $RC.
pe_() {
    "$PE" "$@" >"$T/out" 2>"$T/err.raw"
    RC=$?
    grep -aEv '^==[0-9]+==WARNING: AddressSanitizer failed to allocate' "$T/err.raw" >"$T/err"
}
pass() { echo "ok   $1"; n_pass=$((n_pass + 1)); }
fail() {
    echo "FAIL $1: $2"
    sed -n '1,6s/^/       stderr| /p' "$T/err"
    n_fail=$((n_fail + 1))
}
no_signal() { [ "$RC" -lt 128 ]; }

# expect_ok NAME ARGS...: exit 0, nothing on stderr.
expect_ok() {
    local name="$1"; shift
    pe_ "$@"
    if [ "$RC" -ne 0 ]; then fail "$name" "exit $RC, want 0"; return 1; fi
    if [ -s "$T/err" ]; then fail "$name" "unexpected stderr"; return 1; fi
    pass "$name"
}

# expect_error NAME REGEX ARGS...: exit 1, stderr is exactly one line that
# starts with "pe: error: " and matches REGEX (grep -E -i).
expect_error() {
    local name="$1" re="$2"; shift 2
    pe_ "$@"
    if ! no_signal; then fail "$name" "killed by a signal (exit $RC)"; return 1; fi
    if [ "$RC" -ne 1 ]; then fail "$name" "exit $RC, want 1"; return 1; fi
    local lines
    lines=$(wc -l <"$T/err")
    if [ "$lines" -ne 1 ]; then fail "$name" "$lines stderr lines, want 1"; return 1; fi
    if ! grep -aq '^pe: error: ' "$T/err"; then fail "$name" "stderr does not start with 'pe: error: '"; return 1; fi
    if ! grep -aEqi -- "$re" "$T/err"; then fail "$name" "stderr does not match /$re/"; return 1; fi
    pass "$name"
}

# expect_usage NAME ARGS...: exit 2, a "pe: error:" line and a "usage:" line.
expect_usage() {
    local name="$1"; shift
    pe_ "$@"
    if [ "$RC" -ne 2 ]; then fail "$name" "exit $RC, want 2"; return 1; fi
    if ! head -1 "$T/err" | grep -aq '^pe: error: '; then fail "$name" "first stderr line is not 'pe: error: ...'"; return 1; fi
    if ! grep -q '^usage: ' "$T/err"; then fail "$name" "no usage line on stderr"; return 1; fi
    pass "$name"
}

# expect_rejected_or_ok NAME ARGS...: for corrupted inputs that may still be
# valid after a flip: exit 0, or exit 1 with one "pe: error:" line; never a
# signal. Sets REJECTED=1 when it exited 1.
REJECTED=0
expect_rejected_or_ok() {
    local name="$1"; shift
    pe_ "$@"
    REJECTED=0
    if ! no_signal; then fail "$name" "killed by a signal (exit $RC)"; return 1; fi
    case "$RC" in
    0) pass "$name (accepted: the flip left a valid file)" ;;
    1)
        if [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -aq '^pe: error: ' "$T/err"; then
            fail "$name" "exit 1 without exactly one 'pe: error:' line"; return 1
        fi
        REJECTED=1
        pass "$name (rejected: $(head -c 100 "$T/err" | tr -c '[:print:]' '?'))" ;;
    *) fail "$name" "exit $RC, want 0 or 1" ;;
    esac
}

# ---- inputs -----------------------------------------------------------------

# main.json: out = relu(x + y), y broadcast over the rows of x; also a var
# whose name holds a '/', to check fetch file-name sanitizing.
cat >main.json <<'EOF'
{
  "version": 1,
  "random_seed": 0,
  "blocks": [{
    "idx": 0, "parent_idx": -1,
    "vars": [
      {"name": "x", "dtype": "FP32", "dims": [-1, 3]},
      {"name": "y", "dtype": "FP32", "dims": [3]},
      {"name": "s", "dtype": "FP32", "dims": [-1, 3]},
      {"name": "relu/out", "dtype": "FP32", "dims": [-1, 3]}
    ],
    "ops": [
      {"type": "elementwise_add",
       "inputs": [{"name": "X", "args": ["x"]}, {"name": "Y", "args": ["y"]}],
       "outputs": [{"name": "Out", "args": ["s"]}],
       "attrs": [{"name": "axis", "type": "INT", "i": -1}]},
      {"type": "relu",
       "inputs": [{"name": "X", "args": ["s"]}],
       "outputs": [{"name": "Out", "args": ["relu/out"]}]}
    ]
  }]
}
EOF

# startup.json fills the parameter b; param.json computes out = relu(x + b).
cat >startup.json <<'EOF'
{
  "version": 1,
  "blocks": [{
    "idx": 0, "parent_idx": -1,
    "vars": [{"name": "b", "dtype": "FP32", "dims": [3], "persistable": true, "is_parameter": true}],
    "ops": [
      {"type": "fill_constant", "inputs": [],
       "outputs": [{"name": "Out", "args": ["b"]}],
       "attrs": [{"name": "shape", "type": "LONGS", "ints": [3]},
                 {"name": "dtype", "type": "INT", "i": 0},
                 {"name": "value", "type": "FLOAT", "f": -0.25}]}
    ]
  }]
}
EOF
cat >param.json <<'EOF'
{
  "version": 1,
  "blocks": [{
    "idx": 0, "parent_idx": -1,
    "vars": [
      {"name": "x", "dtype": "FP32", "dims": [-1, 3]},
      {"name": "b", "dtype": "FP32", "dims": [3], "persistable": true, "is_parameter": true},
      {"name": "s", "dtype": "FP32", "dims": [-1, 3]},
      {"name": "out", "dtype": "FP32", "dims": [-1, 3]}
    ],
    "ops": [
      {"type": "elementwise_add",
       "inputs": [{"name": "X", "args": ["x"]}, {"name": "Y", "args": ["b"]}],
       "outputs": [{"name": "Out", "args": ["s"]}]},
      {"type": "relu",
       "inputs": [{"name": "X", "args": ["s"]}],
       "outputs": [{"name": "Out", "args": ["out"]}]}
    ]
  }]
}
EOF

"$PY" - <<'EOF' || { echo "FAIL: cannot generate inputs with /usr/bin/python3 + numpy"; exit 1; }
import numpy as np
rng = np.random.default_rng(7)
np.save("x.npy", rng.standard_normal((4, 3)).astype(np.float32))
np.save("y.npy", rng.standard_normal(3).astype(np.float32))
np.save("x_f64.npy", rng.standard_normal((4, 3)))              # wrong dtype
np.save("x_i32.npy", np.arange(12, dtype=np.int32).reshape(4, 3))
np.save("x_shape.npy", rng.standard_normal((4, 5)).astype(np.float32))  # wrong shape
np.save("x_rank.npy", rng.standard_normal(12).astype(np.float32))       # wrong rank
np.save("x_big.npy", rng.standard_normal((50, 3)).astype(np.float32))
EOF

# corrupt.py MODE SRC DST SEED: truncate / flip bits / random bytes.
cat >corrupt.py <<'EOF'
import random, sys
mode, src, dst, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = random.Random(seed)
data = bytearray(open(src, "rb").read()) if src != "-" else bytearray()
if mode == "truncate":          # keep a prefix (seed picks how much)
    data = data[: max(1, len(data) * (seed % 9 + 1) // 10)]
elif mode == "flip":            # flip 1..4 random bits
    for _ in range(r.randint(1, 4)):
        i = r.randrange(len(data))
        data[i] ^= 1 << r.randrange(8)
elif mode == "flip_head":       # flip 1..3 bits in the first 64 bytes (headers, offsets)
    for _ in range(r.randint(1, 3)):
        i = r.randrange(min(64, len(data)))
        data[i] ^= 1 << r.randrange(8)
elif mode == "random":
    data = bytearray(r.getrandbits(8) for _ in range(r.choice([1, 7, 64, 500, 4096])))
    if seed % 2:                # some random files carry the right magic
        magic = b"\x93NUMPY" if dst.endswith(".npy") else b"\x10\x00\x00\x00PEPG"
        data[: len(magic)] = magic
open(dst, "wb").write(bytes(data))
EOF

# ---- help, version, usage ---------------------------------------------------

expect_ok "pe --help" --help
grep -q 'usage: pe COMMAND' "$T/out" || fail "pe --help lists usage" "no usage line on stdout"
expect_ok "pe --version" --version
grep -Eq '^pe [0-9]+\.[0-9]+\.[0-9]+' "$T/out" || fail "pe --version prints a version" "got: $(cat "$T/out")"
expect_ok "pe help" help
for c in run inspect convert; do
    expect_ok "pe help $c" help "$c"
    grep -q "^usage: pe $c" "$T/out" || fail "pe help $c shows its usage" "no 'usage: pe $c' line"
    expect_ok "pe $c --help" "$c" --help
    expect_ok "pe $c -h" "$c" -h
done
expect_usage "no command" 
expect_usage "unknown command" frobnicate
expect_usage "unknown top-level option" --frobnicate
expect_usage "help of an unknown command" help frobnicate
expect_usage "run: unknown flag" run main.json --frobnicate
expect_usage "run: missing PROGRAM" run --fetch x
expect_usage "run: two programs" run main.json main.json
expect_usage "run: --feed without '='" run main.json --feed x.npy --fetch s
expect_usage "run: --feed with empty name" run main.json --feed =x.npy
expect_usage "run: --feed with empty file" run main.json --feed x=
expect_usage "run: --feed missing value" run main.json --feed
expect_usage "run: --fetch missing value" run main.json --fetch
expect_usage "run: --fetch followed by a flag" run main.json --fetch --out d
expect_usage "run: --out given twice" run main.json --out a --out b
expect_usage "run: same feed twice" run main.json --feed x=x.npy --feed x=x.npy
expect_usage "run: --lod naming no feed" run main.json --feed x=x.npy --lod y=0,4
expect_usage "run: --lod without '='" run main.json --feed x=x.npy --lod x
expect_usage "run: --lod given twice" run main.json --feed x=x.npy --lod x=0,4 --lod x=0,1,4
expect_usage "run: --places cpu:65 (more than 64 places)" run main.json --places cpu:65
expect_usage "run: --places cpu:-2" run main.json --places cpu:-2
if nvidia-smi -L >/dev/null 2>&1; then
    pass "run: --places cuda:0 without a GPU (a GPU is here: not applicable)"
else
    expect_error "run: --places cuda:0 without a GPU" "cuda:0.*(CUDA device|without CUDA)" run main.json --places cuda:0
fi
expect_usage "run: --places tpu:0" run main.json --places tpu:0
expect_usage "run: --places garbage" run main.json --places banana
expect_usage "inspect: missing PROGRAM" inspect
expect_usage "inspect: unknown flag" inspect main.json --all
expect_usage "convert: missing OUT" convert main.json
expect_usage "convert: bad output extension" convert main.json out.txt
expect_usage "convert: three arguments" convert main.json a.pe b.pe

# ---- convert round trip -----------------------------------------------------

expect_ok "convert json -> pe" convert main.json main.pe
expect_ok "convert pe -> json" convert main.pe back.json
expect_ok "convert json -> json" convert main.json direct.json
expect_ok "convert back.json -> pe" convert back.json back.pe
if "$PY" - <<'EOF'; then pass "round trip: json -> pe -> json equals json -> json"; else fail "round trip" "JSON differs"; fi
import json, sys
a, b = json.load(open("back.json")), json.load(open("direct.json"))
sys.exit(0 if a == b and a["blocks"][0]["ops"][1]["type"] == "relu" else 1)
EOF
if cmp -s main.pe back.pe; then pass "round trip: .pe bytes stable"; else fail "round trip" "main.pe and back.pe differ"; fi
expect_ok "inspect main.json" inspect main.json
sed 1d "$T/out" >inspect_json.txt
expect_ok "inspect main.pe" inspect main.pe
sed 1d "$T/out" >inspect_pe.txt
if cmp -s inspect_json.txt inspect_pe.txt; then pass "inspect: .json and .pe agree"; else fail "inspect" ".json and .pe listings differ"; fi
if grep -q 'elementwise_add' inspect_json.txt && grep -q 'X=\[x\] Y=\[y\] -> Out=\[s\]' inspect_json.txt &&
    grep -Eq 'relu/out +float32 +\[-1, 3\]' inspect_json.txt; then
    pass "inspect: lists ops with slots and vars with shapes"
else
    fail "inspect" "listing lacks ops/slots/vars"; cat inspect_json.txt
fi
expect_ok "inspect param.json" inspect param.json
if grep -Eq '^parameters: 3 in 1 var, 12 bytes' "$T/out"; then pass "inspect: parameter count and bytes"; else
    fail "inspect: parameter count" "got: $(grep parameters "$T/out")"; fi

# ---- run end to end with a numeric check ------------------------------------

check_out() { # check_out NAME FILE: FILE == relu(x + y)
    if "$PY" - "$2" <<'EOF'; then pass "$1"; else fail "$1" "values differ from numpy"; fi
import sys, numpy as np
x, y = np.load("x.npy"), np.load("y.npy")
got = np.load(sys.argv[1])
want = np.maximum(x + y, 0)
sys.exit(0 if got.dtype == np.float32 and got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=1e-7) else 1)
EOF
}
if expect_ok "run main.json" run main.json --feed x=x.npy --feed y=y.npy --fetch relu/out --fetch s --out res; then
    check_out "run: relu(x + y) matches numpy" res/relu_out.npy
    if [ -f res/s.npy ] && [ ! -e res/relu ]; then pass "run: fetch names sanitized for files ('/' -> '_')"; else
        fail "run: sanitized names" "expected res/relu_out.npy and res/s.npy"; fi
    if grep -q '^relu/out: float32 \[4, 3\]' "$T/out"; then pass "run: prints a fetch summary"; else
        fail "run: summary" "stdout: $(head -3 "$T/out")"; fi
fi
if expect_ok "run main.pe (--flag=value forms)" run main.pe --feed=x=x.npy --feed=y=y.npy --fetch=relu/out --out=res2 --places=cpu:1; then
    check_out "run main.pe: same values" res2/relu_out.npy
fi
# LoD feeds (--lod): checked against the rows, invalid offsets named; a valid one runs
expect_error "run: --lod not covering the rows" "feed 'x': its LoD's last level ends at 3, but the tensor has 4 rows" \
    run main.json --feed x=x.npy --feed y=y.npy --lod x=0,1,3 --fetch s --out lod1
expect_error "run: --lod decreasing" "--lod x=0,3,2,4: LoD level 0 decreases at entry 2" \
    run main.json --feed x=x.npy --feed y=y.npy --lod x=0,3,2,4 --fetch s --out lod2
expect_error "run: --lod not numbers" "--lod x=0,a: 'a' is not a list of offsets" \
    run main.json --feed x=x.npy --feed y=y.npy --lod x=0,a --fetch s --out lod3
if expect_ok "run: --lod with two levels" run main.json --feed x=x.npy --feed y=y.npy --lod x=0,1,2/0,1,4 --fetch relu/out --out lod4; then
    check_out "run: --lod changes no values" lod4/relu_out.npy
fi
# Several CPU places through the ParallelExecutor: the example MLP on 5 rows
# (split 2,3 and 1,2,2) gives what one place gives, concatenated in order.
EX="$PE_SOURCE_DIR/examples"
"$PY" -c "import numpy as np; np.save('x5.npy', np.random.RandomState(3).rand(5, 784).astype('float32'))"
expect_ok "run the MLP example on one place" run "$EX/mlp_infer.pe" --startup "$EX/mlp_infer_startup.pe" --feed x=x5.npy --fetch prob --out mp1
for n in 2 3; do
    if expect_ok "run the MLP example with --places cpu:$n" run "$EX/mlp_infer.pe" --startup "$EX/mlp_infer_startup.pe" --feed x=x5.npy --fetch prob --out "mp$n" --places "cpu:$n"; then
        if "$PY" -c "import sys, numpy as np; a, b = np.load('mp1/prob.npy'), np.load('mp$n/prob.npy'); sys.exit(0 if a.shape == b.shape == (5, 10) and np.allclose(a, b, rtol=1e-5, atol=1e-7) else 1)"; then
            pass "--places cpu:$n: same [5, 10] result as one place"
        else fail "--places cpu:$n" "result differs from one place"; fi
    fi
done
expect_error "run --places cpu:8 with 5 rows" "'x'.*5 rows.*8 places.*CPU_NUM" run "$EX/mlp_infer.pe" --startup "$EX/mlp_infer_startup.pe" --feed x=x5.npy --fetch prob --places cpu:8
expect_error "run --places cpu:2: a broadcast feed is split too" "feed 'y' on place 0 has shape \\[1\\]" run main.json --feed x=x.npy --feed y=y.npy --fetch relu/out --places cpu:2
if expect_ok "run: default --out is the current dir" run main.json --feed x=x.npy --feed y=y.npy --fetch relu/out; then
    check_out "run: ./relu_out.npy" relu_out.npy
fi
expect_ok "run: bigger batch (summary shows min/max/mean)" run main.json --feed x=x_big.npy --feed y=y.npy --fetch s --out big
grep -q 'values: min' "$T/out" || fail "run: summary of a large fetch" "no min/max line"

# Startup program, --save and --params (fill_constant in the startup program).
if expect_ok "run with --startup and --save" run param.json --startup startup.json --feed x=x.npy --fetch out --out p1 --save ck.safetensors; then
    if "$PY" - <<'EOF'; then pass "run --startup: relu(x - 0.25) matches numpy"; else fail "run --startup" "values differ"; fi
import sys, numpy as np
got, x = np.load("p1/out.npy"), np.load("x.npy")
sys.exit(0 if np.allclose(got, np.maximum(x - 0.25, 0), rtol=1e-6, atol=1e-7) else 1)
EOF
    if "$PY" - <<'EOF'; then pass "--save wrote a safetensors file holding b"; else fail "--save" "bad safetensors file"; fi
import json, struct, sys, numpy as np
raw = open("ck.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
b = h["b"]
data = np.frombuffer(raw[8 + n + b["data_offsets"][0]: 8 + n + b["data_offsets"][1]], dtype="<f4")
sys.exit(0 if b["dtype"] == "F32" and b["shape"] == [3] and np.all(data == -0.25) else 1)
EOF
    if expect_ok "run with --params (no startup)" run param.json --params ck.safetensors --feed x=x.npy --fetch out --out p2; then
        if cmp -s p1/out.npy p2/out.npy; then pass "--params gives the same result as --startup"; else
            fail "--params" "p1/out.npy and p2/out.npy differ"; fi
    fi
fi
expect_error "run: missing --params file" 'nope\.safetensors' run param.json --params nope.safetensors --feed x=x.npy --fetch out
sed 's/"shape", "type": "LONGS", "ints": \[3\]/"shape", "type": "LONGS", "ints": [5]/' startup.json >startup5.json
expect_error "run: startup program sets a parameter of the wrong shape" "'b'.*\\[5\\].*\\[3\\]" run param.json --startup startup5.json --feed x=x.npy --fetch out
expect_error "run: parameter never initialized" "'b'.*(--startup|--params)" run param.json --feed x=x.npy --fetch out
if [ -f ck.safetensors ]; then
    "$PY" corrupt.py truncate ck.safetensors ck_trunc.safetensors 5
    expect_error "run: truncated --params checkpoint" 'ck_trunc\.safetensors' run param.json --params ck_trunc.safetensors --feed x=x.npy --fetch out
    "$PY" corrupt.py random - ck_rand.safetensors 4
    expect_error "run: random-bytes --params checkpoint" 'ck_rand\.safetensors' run param.json --params ck_rand.safetensors --feed x=x.npy --fetch out
    sed 's/"dims": \[3\], "persistable"/"dims": [4], "persistable"/' param.json >param4.json
    expect_error "run: --params shape mismatch names the var" "'b'.*shape|shape.*'b'" run param4.json --params ck.safetensors --feed x=x.npy --fetch out
fi

# ---- hostile programs -------------------------------------------------------

expect_error "missing program file" 'nope\.json' run nope.json --fetch s
expect_error "missing program file (inspect)" 'nope\.pe' inspect nope.pe
expect_error "missing program file (convert)" 'nope\.pe' convert nope.pe x.json
: >empty.pe
expect_error "empty program file" 'empty\.pe' run empty.pe --fetch s
expect_error "empty program file (inspect)" 'empty\.pe' inspect empty.pe
expect_error "directory as program" "regular file|directory" inspect "$T"
for seed in 1 4 7; do
    "$PY" corrupt.py truncate main.pe trunc_$seed.pe $seed
    expect_error "truncated program .pe (seed $seed)" "trunc_$seed\.pe" run trunc_$seed.pe --feed x=x.npy --feed y=y.npy --fetch s
    "$PY" corrupt.py truncate main.json trunc_$seed.json $seed
    expect_error "truncated program .json (seed $seed)" "trunc_$seed\.json" inspect trunc_$seed.json
done
n_rej=0
for seed in $(seq 1 12); do
    "$PY" corrupt.py flip main.pe flip_$seed.pe $seed
    expect_rejected_or_ok "bit-flipped program .pe (seed $seed)" run flip_$seed.pe --feed x=x.npy --feed y=y.npy --fetch s --out flipout
    n_rej=$((n_rej + REJECTED))
    "$PY" corrupt.py flip_head main.pe fliph_$seed.pe $seed
    expect_rejected_or_ok "bit-flipped program header (seed $seed)" inspect fliph_$seed.pe
    n_rej=$((n_rej + REJECTED))
    "$PY" corrupt.py flip main.json flip_$seed.json $seed
    expect_rejected_or_ok "bit-flipped program .json (seed $seed)" run flip_$seed.json --feed x=x.npy --feed y=y.npy --fetch s --out flipout
    n_rej=$((n_rej + REJECTED))
done
if [ "$n_rej" -ge 12 ]; then pass "bit flips: $n_rej of 36 corrupted programs rejected"; else
    fail "bit flips" "only $n_rej of 36 corrupted programs rejected"; fi
for seed in 1 2 3 4 5 6; do
    "$PY" corrupt.py random - rand_$seed.pe $seed
    expect_error "random-bytes program (seed $seed)" "rand_$seed\.pe" run rand_$seed.pe --fetch s
done

# ---- hostile .npy feeds -----------------------------------------------------

: >empty.npy
expect_error "empty npy" 'empty\.npy' run main.json --feed x=empty.npy --feed y=y.npy --fetch s
for seed in 1 3 5 8; do
    "$PY" corrupt.py truncate x.npy trunc_$seed.npy $seed
    expect_error "truncated npy (seed $seed)" "trunc_$seed\.npy" run main.json --feed x=trunc_$seed.npy --feed y=y.npy --fetch s
done
n_rej=0
for seed in $(seq 1 10); do
    "$PY" corrupt.py flip_head x.npy fliph_$seed.npy $seed
    expect_rejected_or_ok "bit-flipped npy header (seed $seed)" run main.json --feed x=fliph_$seed.npy --feed y=y.npy --fetch s --out flipout
    n_rej=$((n_rej + REJECTED))
    "$PY" corrupt.py flip x.npy flip_$seed.npy $seed
    expect_rejected_or_ok "bit-flipped npy (seed $seed)" run main.json --feed x=flip_$seed.npy --feed y=y.npy --fetch s --out flipout
    n_rej=$((n_rej + REJECTED))
done
if [ "$n_rej" -ge 5 ]; then pass "npy bit flips: $n_rej of 20 corrupted files rejected"; else
    fail "npy bit flips" "only $n_rej of 20 corrupted files rejected"; fi
for seed in 1 2 3 4 5 6; do
    "$PY" corrupt.py random - rand_$seed.npy $seed
    expect_error "random-bytes npy (seed $seed)" "rand_$seed\.npy" run main.json --feed x=rand_$seed.npy --feed y=y.npy --fetch s
done
expect_error "missing npy file" 'nope\.npy' run main.json --feed x=nope.npy --feed y=y.npy --fetch s

# ---- wrong feeds and fetches ------------------------------------------------

expect_error "wrong feed dtype (float64)" "'x'.*(dtype|float64)" run main.json --feed x=x_f64.npy --feed y=y.npy --fetch s
expect_error "wrong feed dtype (int32)" "'x'.*(dtype|int32)" run main.json --feed x=x_i32.npy --feed y=y.npy --fetch s
expect_error "wrong feed shape" "'x'.*shape" run main.json --feed x=x_shape.npy --feed y=y.npy --fetch s
expect_error "wrong feed rank" "'x'.*shape" run main.json --feed x=x_rank.npy --feed y=y.npy --fetch s
expect_error "feed name not in program" "'nosuch'" run main.json --feed x=x.npy --feed y=y.npy --feed nosuch=x.npy --fetch s
expect_error "missing feed (declared input never fed)" "'y'.*(fed|feed)" run main.json --feed x=x.npy --fetch s
expect_error "no feeds at all" "'x'.*(fed|feed)" run main.json --fetch s
expect_error "unknown fetch name" "'nosuch'" run main.json --feed x=x.npy --feed y=y.npy --fetch nosuch
expect_error "fetches colliding after sanitizing" "relu_out" run main.json --feed x=x.npy --feed y=y.npy --fetch relu/out --fetch relu_out
: >not_a_dir
expect_error "--out is a file" 'not_a_dir' run main.json --feed x=x.npy --feed y=y.npy --fetch s --out not_a_dir
expect_error "convert to an unwritable path" 'no_such_dir' convert main.json no_such_dir/x.pe

# An empty batch (0 rows) through split (num = 2), concat, reduce_mean and a
# [0, 3] fill_constant (the fuzz seed tests/fuzz/corpus/program/empty_dims.pe):
# empty parts, a NaN mean over 0 rows, as torch.mean; on 2 places it is
# the "fewer rows than places" error.
"$PY" -c "import numpy as np; np.save('x0.npy', np.zeros((0, 4), np.float32))"
if expect_ok "run on an empty batch" run "$SRC/tests/fuzz/corpus/program/empty_dims.pe" --feed x=x0.npy \
    --fetch a --fetch m --fetch z; then
    "$PY" -c "
import numpy as np
a, m, z = np.load('a.npy'), np.load('m.npy'), np.load('z.npy')
assert a.shape == (0, 4) and z.shape == (0, 3) and m.shape == (4,) and np.isnan(m).all(), (a.shape, m, z.shape)
" && pass "empty batch results (empty parts, NaN mean)" || fail "empty batch results" "see above"
fi
expect_error "empty batch on 2 places" "'x' has 0 rows, fewer than the 2 places" \
    run "$SRC/tests/fuzz/corpus/program/empty_dims.pe" --feed x=x0.npy --fetch m --places cpu:2

echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
