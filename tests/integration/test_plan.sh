#!/usr/bin/env bash
# tests/integration/test_plan.sh — `pe plan` end to end.
#
# On examples/mlp_train.pe and cnn_train.pe (forward + backward + momentum):
# one "place=<i> peak_bytes_no_reuse=<n> peak_bytes_reuse=<n>" line per
# place; peak_bytes_no_reuse equals the sum of the temporaries' declared
# sizes computed here in Python from the JSON form (each non-persistable
# var that is not fed or fetched, -1 = the place's rows, 64-byte aligned):
# an independent check of the planner's shape inference and of what it
# places; the plan is smaller (at most 60% for the CNN; on one place below
# the parameter gradients' bytes for the MLP); --no-reuse
# --no-inplace gives no saving; --strategy plans the fused graph; usage and
# file errors exit 2 / 1 with one "pe: error:" line.
set -u

PE="${PE_BIN_DIR:?set PE_BIN_DIR to the directory holding pe}/pe"
SRC="${PE_SOURCE_DIR:?set PE_SOURCE_DIR to the source tree}"
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
T="$(mktemp -d "${TMPDIR:-/tmp}/pe_plan.XXXXXX")"
trap 'rm -rf "$T"' EXIT

n_pass=0
n_fail=0
pass() { echo "ok   $1"; n_pass=$((n_pass + 1)); }
fail() { echo "FAIL $1: $2"; n_fail=$((n_fail + 1)); }

# expected NAME PLACES BATCH FETCH...: "<no_reuse place 0> <no_reuse place 1> ..."
expected() {
    "$PY" - "$@" <<'EOF'
import json, sys
path, places, batch, fetch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), set(sys.argv[4:])
b = json.load(open(path))["blocks"][0]
size = {"FP32": 4, "FP64": 8, "INT32": 4, "INT64": 8, "UINT8": 1, "BOOL": 1}
decl = {v["name"]: v for v in b["vars"]}
# fed: read before any op writes it
written, fed = set(), set()
for op in b["ops"]:
    for s in op.get("inputs", []):
        for a in s["args"]:
            if a not in written: fed.add(a)
    for s in op.get("outputs", []):
        written.update(s["args"])
out = []
for p in range(places):
    rows = batch // places + (p >= places - batch % places)  # the last places take the extra rows
    total = 0
    for n in sorted(written):
        v = decl.get(n)
        if v is None or v.get("persistable") or n in fed or n in fetch:
            continue
        numel = 1
        for d in v["dims"]:
            numel *= rows if d < 0 else d
        nbytes = numel * size[v["dtype"]]
        if nbytes:
            total += (nbytes + 63) // 64 * 64
    out.append(str(total))
print(" ".join(out))
EOF
}

for model in mlp cnn; do
    prog="$SRC/examples/${model}_train.pe"
    for places in 1 3; do
        name="$model places=$places"
        # the passes off: the expected bytes are the JSON program's vars (the layout pass adds its
        # transposes' vars, the fusions drop the conv, fc and add outputs)
        "$PE" plan "$prog" --places "cpu:$places" --batch 128 --fetch loss --strategy conv_nhwc=0,fuse_conv_bias=0,fuse_gemm_epilogue=0,fuse_elewise_add_act_ops=0 \
            >"$T/out" 2>"$T/err"
        rc=$?
        if [ $rc -ne 0 ]; then fail "$name" "exit $rc: $(cat "$T/err")"; continue; fi
        if [ "$(wc -l <"$T/out")" -ne "$places" ] ||
            grep -qvE '^place=[0-9]+ peak_bytes_no_reuse=[0-9]+ peak_bytes_reuse=[0-9]+$' "$T/out"; then
            fail "$name" "output format: $(cat "$T/out")"
            continue
        fi
        want=$(expected "$SRC/examples/${model}_train.json" "$places" 128 loss)
        got=$(sed -E 's/.*peak_bytes_no_reuse=([0-9]+).*/\1/' "$T/out" | tr '\n' ' ' | sed 's/ $//')
        if [ "$got" != "$want" ]; then fail "$name" "no_reuse $got, expected (from the JSON) $want"; continue; fi
        # with the plan: smaller; the CNN at most 60% (activations dominate)
        ok=$(awk -v m="$model" -F'[= ]' '{ nr = $4; r = $6; if (!(r < nr) || (m == "cnn" && r > 0.6 * nr)) bad = 1 }
                 END { print bad ? "no" : "yes" }' "$T/out")
        if [ "$ok" != yes ]; then fail "$name" "plan not smaller: $(cat "$T/out")"; continue; fi
        pass "$name: $(tr '\n' ';' <"$T/out")"
    done
done

# one place with memory_optimize: each momentum op runs right after its
# gradient, so the gradients do not all live at once: the plan's peak is
# below the bytes of the parameter gradients alone (2,143,272 for the MLP)
# (unfused: the fused fc_grad keeps its layer's output and output gradient
# alive through its GEMMs, 264 KB more here: docs/guide.md, BuildStrategy)
peak=$("$PE" plan "$SRC/examples/mlp_train.pe" --places cpu:1 --batch 128 --fetch loss \
    --strategy fuse_gemm_epilogue=0,fuse_elewise_add_act_ops=0 | sed -E 's/.*peak_bytes_reuse=//')
grads=$("$PY" -c "
import json
b = json.load(open('$SRC/examples/mlp_train.json'))['blocks'][0]
n = 0
for v in b['vars']:
    if v['name'].endswith('@GRAD') and v['name'][:-5] in {w['name'] for w in b['vars'] if w.get('is_parameter')}:
        k = 4
        for d in v['dims']: k *= d
        n += k
print(n)")
if [ -n "$peak" ] && [ "$peak" -lt "$grads" ]; then
    pass "updates run early: peak $peak < parameter gradients $grads"
else
    fail "updates run early" "peak '$peak', parameter gradients '$grads'"
fi

# the same program from its JSON form and with the startup's shapes
"$PE" plan "$SRC/examples/mlp_train.pe" --places cpu:3 --batch 128 --fetch loss >"$T/a" 2>&1
"$PE" plan "$SRC/examples/mlp_train.json" --places cpu:3 --batch 128 --fetch loss \
    --startup "$SRC/examples/mlp_startup.pe" >"$T/b" 2>&1
if cmp -s "$T/a" "$T/b"; then pass ".pe = .json + --startup"; else fail ".pe = .json" "$(cat "$T/a" "$T/b")"; fi

# both switches off: no saving
"$PE" plan "$SRC/examples/cnn_train.pe" --places cpu:1 --batch 16 --no-reuse --no-inplace >"$T/out" 2>&1
if grep -qE '^place=0 peak_bytes_no_reuse=([0-9]+) peak_bytes_reuse=\1$' "$T/out"; then
    pass "--no-reuse --no-inplace: $(cat "$T/out")"
else
    fail "--no-reuse --no-inplace" "$(cat "$T/out")"
fi
# in place only helps, reuse helps more
nr=$("$PE" plan "$SRC/examples/cnn_train.pe" --places cpu:1 --batch 16 --no-reuse | sed -E 's/.*reuse=//')
ni=$("$PE" plan "$SRC/examples/cnn_train.pe" --places cpu:1 --batch 16 --no-inplace | sed -E 's/.*reuse=//')
all=$(sed -E 's/.*no_reuse=([0-9]+).*/\1/' "$T/out")
if [ "$nr" -lt "$all" ] && [ "$ni" -lt "$nr" ]; then pass "in place only $nr, reuse only $ni, none $all"; else fail "switches" "$nr $ni $all"; fi

# --strategy: the plan of the fused graph (fc ops leave fewer temporaries);
# memory switches set to 0 there give no saving; a bad key is a usage error
"$PE" plan "$SRC/examples/mlp_train.pe" --places cpu:2 --batch 64 --loss loss --fetch loss \
    --strategy fuse_gemm_epilogue=0,fuse_elewise_add_act_ops=0 >"$T/plain" 2>&1
"$PE" plan "$SRC/examples/mlp_train.pe" --places cpu:2 --batch 64 --loss loss --fetch loss \
    --strategy fuse_gemm_epilogue=1,fuse_elewise_add_act_ops=1,fuse_all_optimizer_ops=1 >"$T/fused" 2>&1
pn=$(head -1 "$T/plain" | sed -E 's/.*no_reuse=([0-9]+).*/\1/')
fn=$(head -1 "$T/fused" | sed -E 's/.*no_reuse=([0-9]+).*/\1/')
if [ "$(wc -l <"$T/fused")" -eq 2 ] && [ -n "$fn" ] && [ "$fn" -lt "$pn" ]; then
    pass "--strategy fusion: no_reuse $pn -> $fn"
else
    fail "--strategy fusion" "$(cat "$T/plain" "$T/fused")"
fi
# fuse_all_reduce_ops: the gradients live in buckets, outside the arena
"$PE" plan "$SRC/examples/mlp_train.pe" --places cpu:2 --batch 64 --loss loss --fetch loss \
    --strategy fuse_all_reduce_ops=1,shard_optimizer=0 >"$T/buck" 2>&1
"$PE" plan "$SRC/examples/mlp_train.pe" --places cpu:2 --batch 64 --loss loss --fetch loss --activations \
    --strategy shard_optimizer=0 >"$T/act" 2>&1
if [ "$(wc -l <"$T/buck")" -eq 2 ] && cmp -s "$T/buck" "$T/act"; then
    pass "fuse_all_reduce_ops: gradients out of the plan ($(head -1 "$T/buck"))"
else
    fail "fuse_all_reduce_ops" "$(cat "$T/buck" "$T/act")"
fi
"$PE" plan "$SRC/examples/cnn_train.pe" --places cpu:1 --batch 16 --strategy memory_optimize=0,enable_inplace=0 >"$T/out" 2>&1
if grep -qE '^place=0 peak_bytes_no_reuse=([0-9]+) peak_bytes_reuse=\1$' "$T/out"; then
    pass "--strategy memory_optimize=0,enable_inplace=0: $(cat "$T/out")"
else
    fail "--strategy switches off" "$(cat "$T/out")"
fi

# --verbose: every planned var with its offset; a fetched var is not among them
"$PE" plan "$SRC/examples/mlp_train.pe" --places cpu:1 --batch 8 --fetch fc_1.tmp_2 --verbose >"$T/out" 2>&1
if grep -q ' in-place$' "$T/out" && grep -qE '^  fc_0.tmp_2 +offset=[0-9]+ +bytes=16384' "$T/out" &&
    ! grep -qE '^  fc_1.tmp_2 ' "$T/out"; then
    pass "--verbose lists planned vars, not the fetched one"
else
    fail "--verbose" "$(head -20 "$T/out")"
fi

# the default graph's fc_grad writes its pre-activation gradient over the output gradient
"$PE" plan "$SRC/examples/mlp_train.pe" --places cpu:1 --batch 8 --fetch loss --verbose >"$T/out" 2>&1
if grep -qE '^  fc_0\.tmp_1@GRAD +offset=[0-9]+ +bytes=16384 +in-place$' "$T/out" &&
    grep -qE '^  fc_1\.tmp_1@GRAD +offset=[0-9]+ +bytes=8192 +in-place$' "$T/out"; then
    pass "fc_grad: PreAct@GRAD in place of Out@GRAD"
else
    fail "fc_grad in place" "$(grep GRAD "$T/out")"
fi

# errors: usage (2) and bad input (1), one "pe: error:" line first
check_err() { # NAME WANT_RC ARGS...
    local name="$1" want="$2"
    shift 2
    "$PE" plan "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ $rc -eq "$want" ] && [ "$(grep -c '^pe: error:' "$T/err")" -eq 1 ]; then
        pass "$name -> $rc: $(head -1 "$T/err")"
    else
        fail "$name" "exit $rc (want $want): $(cat "$T/err")"
    fi
}
check_err "no --batch" 2 "$SRC/examples/mlp_train.pe" --places cpu:2
check_err "batch < places" 2 "$SRC/examples/mlp_train.pe" --places cpu:4 --batch 3
check_err "bad --places" 2 "$SRC/examples/mlp_train.pe" --places gpu:2 --batch 8
check_err "bad --strategy key" 2 "$SRC/examples/mlp_train.pe" --places cpu:1 --batch 8 --strategy fuse_everything=1
check_err "unknown --loss" 1 "$SRC/examples/mlp_train.pe" --places cpu:1 --batch 8 --loss nope
check_err "missing file" 1 "$T/nope.pe" --places cpu:1 --batch 8
check_err "unknown --fetch" 1 "$SRC/examples/mlp_train.pe" --places cpu:1 --batch 8 --fetch nope
printf '{"version": 1, "blocks": [{"idx": 0, "parent_idx": -1, "vars": [
  {"name": "x", "dtype": "FP32", "dims": [-1, -1]}, {"name": "y", "dtype": "FP32", "dims": [-1, -1]}],
  "ops": [{"type": "relu", "inputs": [{"name": "X", "args": ["x"]}], "outputs": [{"name": "Out", "args": ["y"]}]}]}]}' \
    >"$T/two_unknown.json"
check_err "fed var with two -1 dims" 1 "$T/two_unknown.json" --places cpu:1 --batch 8

echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
