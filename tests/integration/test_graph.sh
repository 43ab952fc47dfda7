#!/usr/bin/env bash
# tests/integration/test_graph.sh — `pe graph` end to end.
#
# On examples/mlp_train.pe and cnn_train.pe: with every switch off the
# graph is the plain multi-device graph (the defaults fuse: see the end);
# fuse_gemm_epilogue fuses each fc layer (3 in the MLP, 2 in the CNN)
# forward and backward, and
# fuse_all_optimizer_ops leaves one merged_momentum; the op counts printed
# per pass are checked against the DOT files themselves (op boxes counted in
# the per-pass program graphs, op handles in the final graph: ops x places);
# --fetch keeps a var from being fused away; every DOT file is a "digraph"
# and, when Graphviz is installed, `dot` parses it; usage and file errors
# exit 2 / 1 with one "pe: error:" line.
set -u

PE="${PE_BIN_DIR:?set PE_BIN_DIR to the directory holding pe}/pe"
SRC="${PE_SOURCE_DIR:?set PE_SOURCE_DIR to the source tree}"
export OMP_NUM_THREADS=1
T="$(mktemp -d "${TMPDIR:-/tmp}/pe_graph.XXXXXX")"
trap 'rm -rf "$T"' EXIT

n_pass=0
n_fail=0
pass() { echo "ok   $1"; n_pass=$((n_pass + 1)); }
fail() { echo "FAIL $1: $2"; n_fail=$((n_fail + 1)); }

is_dot() { # FILE: a digraph, braces balanced, parsed by Graphviz when present
    head -c 7 "$1" | grep -q '^digraph' || return 1
    [ "$(tr -cd '{' <"$1" | wc -c)" -eq "$(tr -cd '}' <"$1" | wc -c)" ] || return 1
    if command -v dot >/dev/null 2>&1; then dot -Tsvg "$1" -o /dev/null 2>/dev/null || return 1; fi
    return 0
}
# op boxes of a program graph / op handles of an SSA graph (lines "opN [..." / "hN [label=\"TYPE")
n_ops() { grep -c '^  op[0-9]* \[shape=box' "$1"; }
n_type() { grep -c "label=\"[0-9]* $2\"" "$1"; }
n_handles() { grep -c "^  h[0-9]* \[label=\"$2\\\\nplace" "$1"; }

for model in mlp cnn; do
    prog="$SRC/examples/${model}_train.pe"
    [ "$model" = mlp ] && n_fc=3 || n_fc=2
    "$PE" graph "$prog" --places cpu:2 --loss loss -o "$T/plain.dot" --dump-dir "$T/plain" \
        --strategy conv_nhwc=0,fuse_conv_bias=0,fuse_gemm_epilogue=0,fuse_elewise_add_act_ops=0 >"$T/out" 2>"$T/err"
    rc=$?
    if [ $rc -eq 0 ] && is_dot "$T/plain.dot" && is_dot "$T/plain/00_input.dot" && is_dot "$T/plain/01_multi_device.dot" \
        && [ "$(n_handles "$T/plain.dot" mul)" -eq $((2 * n_fc)) ]; then
        pass "$model: no switches: $(grep multi_device "$T/out")"
    else
        fail "$model: no switches" "rc $rc, $(cat "$T/out" "$T/err")"
    fi
    ops_in=$(n_ops "$T/plain/00_input.dot")

    "$PE" graph "$prog" --places cpu:2 --loss loss -o "$T/fused.dot" --dump-dir "$T/fused" \
        --strategy conv_nhwc=0,fuse_conv_bias=0,fuse_gemm_epilogue=1,fuse_elewise_add_act_ops=true,fuse_all_optimizer_ops=on,shard_optimizer=0 >"$T/out" 2>"$T/err"
    rc=$?
    d="$T/fused"
    ok=1
    [ $rc -eq 0 ] || ok=0
    for f in "$T/fused.dot" "$d/00_input.dot" "$d/01_fuse_gemm_epilogue.dot" "$d/02_fuse_elewise_add_act_ops.dot" \
        "$d/03_fuse_all_optimizer_ops.dot" "$d/04_multi_device.dot"; do
        is_dot "$f" || { ok=0; echo "  not a valid DOT file: $f"; }
    done
    if [ $ok -eq 1 ]; then
        after_fc=$(n_ops "$d/01_fuse_gemm_epilogue.dot")
        after_opt=$(n_ops "$d/03_fuse_all_optimizer_ops.dot")
        line_fc=$(grep '^pass fuse_gemm_epilogue:' "$T/out")
        line_opt=$(grep '^pass fuse_all_optimizer_ops:' "$T/out")
        [ "$line_fc" = "pass fuse_gemm_epilogue: $n_fc fused, $ops_in -> $after_fc ops" ] || { ok=0; echo "  $line_fc"; }
        [ "$(n_type "$d/01_fuse_gemm_epilogue.dot" fc)" -eq $n_fc ] || ok=0
        [ "$(n_type "$d/01_fuse_gemm_epilogue.dot" fc_grad)" -eq $n_fc ] || ok=0
        [ "$(n_type "$d/01_fuse_gemm_epilogue.dot" mul)" -eq 0 ] || ok=0
        [ "$(n_type "$d/03_fuse_all_optimizer_ops.dot" merged_momentum)" -eq 1 ] || ok=0
        [ "$(n_type "$d/03_fuse_all_optimizer_ops.dot" momentum)" -eq 0 ] || ok=0
        [[ "$line_opt" == *" -> $after_opt ops" ]] || { ok=0; echo "  $line_opt"; }
        [ "$(n_handles "$T/fused.dot" fc)" -eq $((2 * n_fc)) ] || ok=0
        [ "$(n_handles "$T/fused.dot" merged_momentum)" -eq 2 ] || ok=0
    fi
    if [ $ok -eq 1 ]; then
        pass "$model: fused: $line_fc; $line_opt"
    else
        fail "$model: fused" "rc $rc, $(cat "$T/out" "$T/err")"
    fi

    # a fetched intermediate (fc_0's GEMM output) keeps its layer unfused
    t0=$(grep -o 'label="fc_0\.tmp_0' "$T/plain/00_input.dot" | head -1 | cut -d'"' -f2)
    "$PE" graph "$prog" --places cpu:1 --loss loss -o "$T/keep.dot" --dump-dir "$T/keep" \
        --strategy conv_nhwc=0,fuse_conv_bias=0,fuse_gemm_epilogue=1 --fetch "$t0" >"$T/out" 2>"$T/err"
    if [ $? -eq 0 ] && grep -q "pass fuse_gemm_epilogue: $((n_fc - 1)) fused" "$T/out" \
        && [ "$(n_type "$T/keep/01_fuse_gemm_epilogue.dot" mul)" -eq 1 ]; then
        pass "$model: --fetch $t0 keeps fc_0 unfused"
    else
        fail "$model: --fetch" "$(cat "$T/out" "$T/err")"
    fi
done

# the layout pass and the fc / add+act fusions (on by default): the CNN's 2 conv2d, 2 pool2d and their
# grads switch to NHWC, the fed image and the flatten get transposes; the MLP has nothing to switch (no
# line, no dump), and its 3 fc layers fuse
"$PE" graph "$SRC/examples/cnn_train.pe" --places cpu:1 --loss loss -o "$T/nhwc.dot" --dump-dir "$T/nhwc" >"$T/out" 2>"$T/err"
if [ $? -eq 0 ] && grep -q '^pass conv_nhwc: 8 fused' "$T/out" && is_dot "$T/nhwc/01_conv_nhwc.dot" \
    && [ "$(n_type "$T/nhwc/01_conv_nhwc.dot" transpose2)" -ge 2 ] && [ "$(n_type "$T/nhwc/01_conv_nhwc.dot" conv2d)" -eq 2 ] \
    && grep -q '^pass fuse_conv_bias: 2 fused' "$T/out" && is_dot "$T/nhwc/02_fuse_conv_bias.dot"; then
    pass "cnn: $(grep '^pass conv_nhwc' "$T/out"); $(grep '^pass fuse_conv_bias' "$T/out")"
else
    fail "cnn: conv_nhwc" "$(cat "$T/out" "$T/err")"
fi
"$PE" graph "$SRC/examples/mlp_train.pe" --places cpu:1 --loss loss -o "$T/m.dot" --dump-dir "$T/m" >"$T/out" 2>"$T/err"
if [ $? -eq 0 ] && ! grep -q 'conv_nhwc\|fuse_conv_bias' "$T/out" && ! ls "$T/m" | grep -q 'conv' \
    && grep -q '^pass fuse_gemm_epilogue: 3 fused' "$T/out" && is_dot "$T/m/03_multi_device.dot"; then
    pass "mlp: conv_nhwc has nothing to switch: no line, no dump; defaults: $(grep '^pass fuse_gemm' "$T/out")"
else
    fail "mlp: conv_nhwc idle" "$(cat "$T/out" "$T/err")"
fi

# errors: usage (2) and bad input (1), one "pe: error:" line first
check_err() { # NAME WANT_RC ARGS...
    local name="$1" want="$2"
    shift 2
    "$PE" graph "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ $rc -eq "$want" ] && [ "$(grep -c '^pe: error:' "$T/err")" -eq 1 ]; then
        pass "$name -> $rc: $(head -1 "$T/err")"
    else
        fail "$name" "exit $rc (want $want): $(cat "$T/err")"
    fi
}
P="$SRC/examples/mlp_train.pe"
check_err "missing -o" 2 "$P"
check_err "unknown strategy key" 2 "$P" -o "$T/x.dot" --strategy fuse_everything=1
check_err "bad strategy value" 2 "$P" -o "$T/x.dot" --strategy fuse_gemm_epilogue=maybe
check_err "strategy item without =" 2 "$P" -o "$T/x.dot" --strategy fuse_gemm_epilogue
check_err "bad --places" 2 "$P" -o "$T/x.dot" --places gpu:2
# Paddle's switches PE has no mapping for: the default accepted, any other value a usage error saying why
check_err "fuse_bn_act_ops=1" 2 "$P" -o "$T/x.dot" --strategy fuse_bn_act_ops=1
grep -q "BuildStrategy.fuse_bn_act_ops = True is not supported: PE has no batch_norm + activation fusion" "$T/err" &&
    pass "fuse_bn_act_ops=1 says why" || fail "fuse_bn_act_ops=1 says why" "$(cat "$T/err")"
check_err "remove_unnecessary_lock=0" 2 "$P" -o "$T/x.dot" --strategy remove_unnecessary_lock=0
check_err "nccl_comm_num=2" 2 "$P" -o "$T/x.dot" --strategy nccl_comm_num=2
check_err "allow_cuda_graph_capture=1" 2 "$P" -o "$T/x.dot" --strategy allow_cuda_graph_capture=1
if "$PE" graph "$P" --places cpu:2 -o "$T/x.dot" --strategy fuse_bn_act_ops=0,remove_unnecessary_lock=1,nccl_comm_num=1,use_hierarchical_allreduce=1,sync_batch_norm=1,fix_op_run_order=0 >"$T/out" 2>"$T/err"; then
    pass "Paddle's switches at their defaults (sync_batch_norm: no batch_norm in the MLP)"
else
    fail "Paddle's switches at their defaults" "$(cat "$T/err")"
fi
check_err "missing file" 1 "$T/nope.pe" -o "$T/x.dot"
check_err "unknown --fetch" 1 "$P" -o "$T/x.dot" --fetch nope
check_err "unknown --loss" 1 "$P" -o "$T/x.dot" --loss nope
check_err "unwritable -o" 1 "$P" -o "$T/no/such/dir/x.dot"
"$PE" help graph >"$T/out" 2>&1 && grep -q "dump-dir" "$T/out" && pass "help graph" || fail "help graph" "$(cat "$T/out")"

echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
