"""tests/python/test_hostile_inputs.py — inputs a probe of the API and the
`pe` tool found mishandled, each now a clear error (none crashes, hangs or
reads wrong data):

- scatter_grad with mismatched shapes aborted (its check named scatter's X
  slot, which scatter_grad has not);
- `pe train --first-step` near LONG_MAX overflowed into a division by zero;
- a FIFO given as a program, feed or checkpoint blocked in open() forever;
- a raw NUL byte in a safetensors header cut the name or value short;
- a negative value after a flag was reported as a missing value;
- error messages that printed one dims buffer twice (the Logits of
  softmax_with_cross_entropy's label check), a contradictory .npy shape
  message, a reduce gradient given a bool Out, a reshape whose dims
  overflow int64, and `pe run --backward` asked for a gradient it cannot
  make (a stop_gradient data var).
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import pe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pe_json import pe_bin  # noqa: E402
from train_ref import EXAMPLES  # noqa: E402

MLP = os.path.join(EXAMPLES, "mlp_forward.pe")
MLP_S = os.path.join(EXAMPLES, "mlp_forward_startup.pe")


def cli(*args, timeout=60):
    r = subprocess.run([pe_bin()] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode >= 0, "pe died with signal %d: %s" % (-r.returncode, r.stderr)
    return r


def _t(a):
    return pe.to_tensor(np.asarray(a))


def test_scatter_grad_with_mismatched_shapes_is_an_error():
    ins = {"Ids": [_t(np.array([0, 1, 2], np.int64))], "Updates": [_t(np.zeros((3, 1, 3), np.float32))],
           "Out@GRAD": [_t(np.zeros((3, 1), np.float32))]}
    with pytest.raises(pe.InvalidArgumentError, match=r"scatter_grad.*Updates '.*' is float32 \[3, 1, 3\], expected "
                                                      r"float32 \[3, 1\] \(one row of Out@GRAD"):
        pe.eager.run_op("scatter_grad", ins, {"X@GRAD": 1, "Updates@GRAD": 1}, {})


def test_train_first_step_overflow_is_a_usage_error(tmp_path):
    r = cli("train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--data", tmp_path,
            "--steps", 2, "--first-step", 2**63 - 1)
    assert r.returncode == 2 and "--first-step 9223372036854775807 + --steps 2 overflows" in r.stderr, r.stderr


@pytest.mark.parametrize("flag", ["--steps", "--first-step", "--print-every"])
def test_a_negative_value_is_refused_as_a_value(tmp_path, flag):
    r = cli("train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--data", tmp_path, flag, -3)
    assert r.returncode == 2 and "%s '-3' is not an integer >= 0" % flag in r.stderr, r.stderr


def test_a_fifo_is_not_a_regular_file(tmp_path):
    fifo = str(tmp_path / "prog.pe")
    os.mkfifo(fifo)
    r = cli("run", fifo, timeout=30)
    assert r.returncode != 0 and "'%s' is not a regular file" % fifo in r.stderr, r.stderr
    with pytest.raises(pe.IOError, match="is not a regular file"):
        pe.static.load_program(fifo)
    st = str(tmp_path / "w.safetensors")
    os.mkfifo(st)
    with pytest.raises(pe.IOError, match="is not a regular file"):
        pe.load(st)


def _safetensors(header, data=b""):
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize("where", ["name", "dtype value", "metadata"])
def test_a_raw_nul_in_a_safetensors_header_is_refused(tmp_path, where):
    entry = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    header = {"w": entry, "__metadata__": {"format": "pt"}}
    raw = _safetensors(header, b"\0\0\0\0")
    old, new = {"name": (b'"w"', b'"w\0x"'), "dtype value": (b'"F32"', b'"F32\0"'),
                "metadata": (b'"pt"', b'"p\0"')}[where]
    bad = raw.replace(old, new)
    bad = struct.pack("<Q", struct.unpack("<Q", bad[:8])[0] + len(new) - len(old)) + bad[8:]
    path = tmp_path / "m.safetensors"
    path.write_bytes(raw)
    assert float(np.asarray(pe.load(str(path))["w"])[0]) == 0.0   # the file without the NUL loads
    path.write_bytes(bad)
    with pytest.raises(pe.FormatError, match=r"safetensors header has a NUL byte at header byte \d+"):
        pe.load(str(path))


def test_npy_shape_without_its_comma_says_so(tmp_path):
    head = b"{'descr': '<f4', 'fortran_order': False, 'shape': (3), }"
    head += b" " * (64 - 10 - len(head) - 1) + b"\n"
    path = tmp_path / "x.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + b"\0" * 12)
    r = cli("run", MLP, "--startup", MLP_S, "--feed", "x=%s" % path, "--fetch", "loss")
    assert r.returncode != 0 and "shape (3) at header offset" in r.stderr and "written (3,)" in r.stderr, r.stderr


def test_softmax_cross_entropy_label_error_shows_both_shapes():
    logits, label = _t(np.zeros((3, 10), np.float32)), _t(np.zeros((5, 1), np.int64))
    with pytest.raises(pe.InvalidArgumentError, match=r"hard Label '.*' is int64 \[5, 1\], expected int64 \(or int32\) "
                                                      r"\[3, 1\], Logits '.*' \[3, 10\] with dim 1"):
        pe.eager.run_op("softmax_with_cross_entropy", {"Logits": [logits], "Label": [label]},
                        {"Softmax": 1, "Loss": 1}, {"axis": -1})


def test_reduce_max_grad_checks_the_forward_out():
    x, g = _t(np.ones((2, 3), np.float32)), _t(np.ones((2,), np.float32))
    out = _t(np.ones((2,), bool))
    with pytest.raises(pe.InvalidArgumentError, match=r"reduce_max_grad.*Out '.*' is bool \[2\], expected float32 "
                                                      r"with 2 elements"):
        pe.eager.run_op("reduce_max_grad", {"X": [x], "Out": [out], "Out@GRAD": [g]}, {"X@GRAD": 1},
                        {"dim": [1], "keep_dim": False, "reduce_all": False})


def test_reshape_whose_dims_overflow():
    x = _t(np.zeros((2, 2), np.float32))
    with pytest.raises(pe.InvalidArgumentError, match=r"shape's dims up to shape\[2\] = 4 multiply past "
                                                      r"2\^63"):
        pe.eager.run_op("reshape2", {"X": [x]}, {"Out": 1, "XShape": 1}, {"shape": [2**31, 2**31, 4]})


def test_run_backward_says_why_a_data_var_has_no_gradient(tmp_path):
    pe.enable_static()
    try:
        main, startup = pe.static.Program(), pe.static.Program()
        with pe.static.program_guard(main, startup):
            x = pe.static.data("x", [-1, 4], "float32")   # a data var: stop_gradient
            loss = pe.mean(pe.static.nn.fc(x, 2))
        w = main.all_parameters()[0].name   # fc_<k>.w_0: k counts the fc layers built in this process
        (tmp_path / "p.json").write_text(main.to_json())
        (tmp_path / "s.json").write_text(startup.to_json())
    finally:
        pe.disable_static()
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    feed = ["--startup", tmp_path / "s.json", "--feed", "x=%s" % (tmp_path / "x.npy"), "--backward", loss.name]
    r = cli("run", tmp_path / "p.json", *feed, "--fetch", "x@GRAD", "--out", tmp_path)
    assert r.returncode != 0 and "gives 'x' no gradient: it is stop_gradient" in r.stderr, r.stderr
    r = cli("run", tmp_path / "p.json", *feed, "--fetch", w + "@GRAD", "--out", tmp_path)
    assert r.returncode == 0, r.stderr   # a parameter's gradient is made


def test_a_control_character_in_a_var_name_is_refused(tmp_path):
    prog = {"version": 1, "blocks": [{"idx": 0, "parent_idx": -1, "vars": [
        {"name": "x\u001b[2J", "dtype": "FP32", "dims": [2]}], "ops": []}]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(prog))
    r = cli("inspect", path)
    assert r.returncode != 0 and "its name has control character 0x1b at byte 1" in r.stderr, r.stderr
    assert "\x1b" not in r.stdout + r.stderr
