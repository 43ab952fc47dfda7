#!/usr/bin/env bash
# tests/integration/test_big_program.sh — a program of 100,000 ops through
# `pe run` and `pe train`, each under a deadline.
#
# The program: x[2,4] -> mul(w[4,4]) -> 100,000 `scale` ops -> mean = loss.
# Loading, checking, cloning, autodiff (another 100,000 ops) and the
# executors' set-up must be linear in the program's size: with a linear
# name search per op they took 67 s (`pe run`) and 6 min 48 s (`pe train`)
# on this machine; linear, about 3 s and 2 s. The deadline (60 s each,
# generous for sanitizer builds) is not a speed measurement: it fails only
# for a quadratic step. Also checks the results: the fetch is x @ w (every
# scale is 1), the loss falls after an sgd step.
set -u

PE="${PE_BIN_DIR:?set PE_BIN_DIR to the directory holding pe}/pe"
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
LIMIT=${PE_BIG_PROGRAM_LIMIT:-60}
T="$(mktemp -d "${TMPDIR:-/tmp}/pe_big.XXXXXX")"
trap 'rm -rf "$T"' EXIT

n_pass=0
n_fail=0
pass() { echo "ok   $1"; n_pass=$((n_pass + 1)); }
fail() { echo "FAIL $1: $2"; n_fail=$((n_fail + 1)); }

"$PY" - "$T" <<'PYEOF'
import json, os, sys
import numpy as np
t, N = sys.argv[1], 100000
def var(n, dims, pers=False):
    return {"name": n, "dtype": "FP32", "dims": dims, "persistable": pers, "is_parameter": pers,
            "stop_gradient": False}
vs = [var("x", [-1, 4]), var("w", [4, 4], True), var("h", [-1, 4])]
ops = [{"type": "mul", "inputs": [{"name": "X", "args": ["x"]}, {"name": "Y", "args": ["w"]}],
        "outputs": [{"name": "Out", "args": ["h"]}], "attrs": []}]
prev = "h"
for i in range(N):
    vs.append(var("t%d" % i, [-1, 4]))
    ops.append({"type": "scale", "inputs": [{"name": "X", "args": [prev]}],
                "outputs": [{"name": "Out", "args": ["t%d" % i]}],
                "attrs": [{"name": "scale", "type": "FLOAT", "f": 1.0}]})
    prev = "t%d" % i
vs.append(var("loss", []))
ops.append({"type": "mean", "inputs": [{"name": "X", "args": [prev]}], "outputs": [{"name": "Out", "args": ["loss"]}],
            "attrs": []})
prog = lambda v, o: {"version": 1, "random_seed": 0, "blocks": [{"idx": 0, "parent_idx": -1, "vars": v, "ops": o}]}
json.dump(prog(vs, ops), open(os.path.join(t, "big.json"), "w"))
json.dump(prog([var("w", [4, 4], True)], [{"type": "fill_constant", "inputs": [],
          "outputs": [{"name": "Out", "args": ["w"]}], "attrs": [{"name": "shape", "type": "LONGS", "ints": [4, 4]},
          {"name": "dtype", "type": "INT", "i": 0}, {"name": "value", "type": "FLOAT", "f": 0.5}]}]),
          open(os.path.join(t, "startup.json"), "w"))
os.makedirs(os.path.join(t, "data"))
x = np.arange(8, dtype=np.float32).reshape(2, 4)
np.save(os.path.join(t, "data", "x_0.npy"), x)
np.save(os.path.join(t, "x.npy"), x)
np.save(os.path.join(t, "w.npy"), np.full((4, 4), 0.5, np.float32))
PYEOF

# pe run: feed x and w (persistable, fed directly), fetch the last scale
start=$(date +%s)
if timeout "$LIMIT" "$PE" run "$T/big.json" --feed x="$T/x.npy" --feed w="$T/w.npy" --fetch t99999 \
        --out "$T/out" >"$T/run.log" 2>&1; then
    if "$PY" -c "
import numpy as np, sys
x = np.load('$T/x.npy'); got = np.load('$T/out/t99999.npy')
sys.exit(0 if np.array_equal(got, x @ np.full((4, 4), 0.5, np.float32)) else 1)"; then
        pass "pe run: 100,000 ops in $(( $(date +%s) - start )) s, fetch = x @ w"
    else
        fail "pe run" "wrong fetch"
    fi
else
    fail "pe run" "exit $? within ${LIMIT} s: $(tail -3 "$T/run.log")"
fi

# pe train: autodiff appends 100,000 grad ops; two sgd steps
start=$(date +%s)
if timeout "$LIMIT" "$PE" train "$T/big.json" --startup "$T/startup.json" --loss loss --optimizer sgd --lr 0.01 \
        --data "$T/data" --steps 2 --log "$T/loss.npy" >"$T/train.log" 2>&1; then
    if "$PY" -c "
import numpy as np, sys
l = np.load('$T/loss.npy'); sys.exit(0 if len(l) == 2 and l[1] < l[0] else 1)"; then
        pass "pe train: 100,000 ops (+ their gradients) in $(( $(date +%s) - start )) s, the loss falls"
    else
        fail "pe train" "the loss log is wrong: $(cat "$T/train.log" | tail -3)"
    fi
else
    fail "pe train" "exit $? within ${LIMIT} s: $(tail -3 "$T/train.log")"
fi

echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
