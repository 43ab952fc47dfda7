"""tests/python/test_train_cli.py — `pe train`: flags, data layout, exit codes.

Runs the `pe` binary on the training examples (examples/*_forward.json)
with small Fashion-MNIST batches and checks: the data layout (batch files
cycle; rows must agree), the log (float64 [steps]), --steps 0 --save, the
usage errors (exit 2 + usage line) and bad inputs (exit 1, exactly one
`pe: error:` line, never a signal), --params with a checkpoint from
`pe train` and with one holding the model only, --lr overriding a resumed
checkpoint, --fetch/--out, --places cpu:2 against one place (even and
uneven splits), sgd / nesterov / weight decay / clipping against PyTorch,
checkpoints that round-trip byte for byte (save, load, save) and clear
errors for truncated or mismatched ones (missing, extra, wrong dtype or shape),
and that the committed examples are what scripts/make_examples.py writes.

    PE_BIN_DIR=build/bin /usr/bin/python3 -m pytest -q tests/python/test_train_cli.py
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import make_examples  # noqa: E402
from pe_json import pe_bin  # noqa: E402
from train_ref import (EXAMPLES, fashion_mnist, make_batches, read_safetensors, torch_model,  # noqa: E402
                       torch_train, write_batches)

torch.set_num_threads(1)

MLP = os.path.join(EXAMPLES, "mlp_forward.pe")
MLP_S = os.path.join(EXAMPLES, "mlp_forward_startup.pe")
MOM = ["--optimizer", "momentum", "--lr", "0.05", "--momentum", "0.9"]


def pe(*args, env=None):
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(env or {})
    r = subprocess.run([pe_bin()] + [str(a) for a in args], capture_output=True, text=True, timeout=300, env=e)
    assert r.returncode >= 0, "pe died with signal %d: %s" % (-r.returncode, r.stderr)
    return r


def ok(*args):
    r = pe(*args)
    assert r.returncode == 0, "pe %s failed (%d): %s" % (" ".join(map(str, args)), r.returncode, r.stderr)
    return r


def fails(code, *args, contains=()):
    r = pe(*args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, "expected exit %d, got %d: %s" % (code, r.returncode, r.stderr)
    assert lines and lines[0].startswith("pe: error: "), r.stderr
    if code == 1:
        assert len(lines) == 1, "exit 1 must print exactly one line: %r" % r.stderr
    else:
        assert any(l.startswith("usage: pe train") for l in lines), r.stderr
    for c in contains:
        assert c in lines[0], "%r not in %r" % (c, lines[0])
    return lines[0]


def train(data, *extra, startup=MLP_S, steps=4):
    args = ["train", MLP, "--loss", "loss", "--data", data, "--steps", steps] + list(extra)
    if startup:
        args += ["--startup", startup]
    return ok(*args)


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    if not os.path.exists(pe_bin()):
        pytest.fail("pe binary not found at %s (set PE_BIN_DIR or build into build/)" % pe_bin())
    images, labels = fashion_mnist("train")
    b = make_batches("mlp", images, labels, 8, 32)
    d = tmp_path_factory.mktemp("mlp32")
    write_batches(str(d), "mlp", b)
    return str(d), b


def test_log_and_steady_state(batches, tmp_path):
    d, _ = batches
    r = train(d, *MOM, "--log", tmp_path / "l.npy", "--print-every", 2, steps=6)
    log = np.load(tmp_path / "l.npy")
    assert log.dtype == np.float64 and log.shape == (6,)
    assert np.all(np.isfinite(log)) and abs(log[0] - np.log(10)) < 0.2, log
    out = r.stdout.splitlines()
    steps = [l.split()[1] for l in out if l.startswith("step ")]
    assert steps == ["1/6", "2/6", "4/6", "6/6"], out
    assert any(l.startswith("steady state: ") and "median over steps 4-6" in l for l in out), out
    for l in out:
        if l.startswith("step 6/6"):
            assert abs(float(l.split()[3]) - log[5]) < 1e-5


def test_batches_cycle(batches, tmp_path):
    """3 batches, 7 steps: step s reads batch s mod 3. With a tiny learning
    rate the weights barely move, so the loss repeats with period 3."""
    d, b = batches
    small = tmp_path / "three"
    write_batches(str(small), "mlp", b[:3])
    train(str(small), "--optimizer", "sgd", "--lr", "1e-9", "--log", tmp_path / "l.npy", steps=7)
    log = np.load(tmp_path / "l.npy")
    np.testing.assert_allclose(log[3:6], log[0:3], rtol=1e-6)
    np.testing.assert_allclose(log[6], log[0], rtol=1e-6)
    assert abs(log[1] - log[0]) > 1e-3 and abs(log[2] - log[1]) > 1e-3
    # --first-step 2 starts at batch 2
    train(str(small), "--optimizer", "sgd", "--lr", "1e-9", "--log", tmp_path / "f.npy", "--first-step", 2, steps=2)
    np.testing.assert_allclose(np.load(tmp_path / "f.npy"), log[[2, 3]], rtol=1e-6)


def test_steps0_save_and_resume(batches, tmp_path):
    d, _ = batches
    t = tmp_path
    ok("train", MLP, "--startup", MLP_S, "--loss", "loss", *MOM, "--steps", 0, "--save", t / "init.st")
    init = read_safetensors(str(t / "init.st"))
    for p in ("fc_0.w_0", "fc_0.b_0", "fc_2.w_0", "fc_0.w_0_velocity_0", "learning_rate_0"):
        assert p in init, sorted(init)
    assert init["fc_0.w_0"].shape == (784, 512) and not init["fc_0.w_0_velocity_0"].any()
    assert abs(init["learning_rate_0"][0] - 0.05) < 1e-8
    # 6 steps in one run == 2 + 4 resumed, bit for bit
    train(d, *MOM, "--log", t / "full.npy", "--save", t / "full.st", steps=6)
    train(d, *MOM, "--log", t / "a.npy", "--save", t / "a.st", steps=2)
    train(d, *MOM, "--log", t / "b.npy", "--save", t / "b.st", "--params", t / "a.st", "--first-step", 2,
          startup=None, steps=4)
    assert np.array_equal(np.concatenate([np.load(t / "a.npy"), np.load(t / "b.npy")]), np.load(t / "full.npy"))
    assert open(t / "b.st", "rb").read() == open(t / "full.st", "rb").read()
    # --lr on resume overrides the checkpoint's learning rate; without it the checkpoint's is kept
    train(d, "--optimizer", "momentum", "--lr", "0.01", "--params", t / "a.st", "--save", t / "c.st",
          startup=None, steps=1)
    assert abs(read_safetensors(str(t / "c.st"))["learning_rate_0"][0] - 0.01) < 1e-9
    train(d, "--optimizer", "momentum", "--params", t / "a.st", "--save", t / "e.st", startup=None, steps=1)
    assert abs(read_safetensors(str(t / "e.st"))["learning_rate_0"][0] - 0.05) < 1e-8


@pytest.mark.parametrize("model,opt", [("mlp", MOM), ("cnn", ["--optimizer", "adam", "--lr", "0.001"])])
def test_checkpoint_roundtrip_bitwise(model, opt, tmp_path):
    """save -> load into a fresh scope -> save again gives the same file, byte
    for byte (parameters, optimizer state, learning rate, beta powers), and
    numpy reads back what PE holds."""
    prog = os.path.join(EXAMPLES, "%s_forward.pe" % model)
    start = os.path.join(EXAMPLES, "%s_forward_startup.pe" % model)
    images, labels = fashion_mnist("t10k")
    write_batches(str(tmp_path / "d"), model, make_batches(model, images, labels, 2, 16))
    t = tmp_path
    ok("train", prog, "--startup", start, "--loss", "loss", *opt, "--steps", 2, "--data", t / "d", "--save", t / "a.st")
    ok("train", prog, "--params", t / "a.st", "--loss", "loss", *opt[:2], "--steps", 0, "--save", t / "b.st")
    a, b = open(t / "a.st", "rb").read(), open(t / "b.st", "rb").read()
    assert a == b, "re-saving a loaded checkpoint changed it (%d vs %d bytes)" % (len(a), len(b))
    ck = read_safetensors(str(t / "a.st"))
    assert any(k.endswith(("_velocity_0", "_moment2_0")) for k in ck) and "learning_rate_0" in ck
    assert all(np.all(np.isfinite(v)) for v in ck.values())
    # and it is what training continues from: 1 more step from a == 1 more step from b
    for src, dst in (("a.st", "a1.st"), ("b.st", "b1.st")):
        ok("train", prog, "--params", t / src, "--loss", "loss", *opt[:2], "--steps", 1, "--data", t / "d",
           "--save", t / dst)
    assert open(t / "a1.st", "rb").read() == open(t / "b1.st", "rb").read()


def write_safetensors(path, tensors):
    names = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64"}
    header, off, blobs = {}, 0, []
    for k, v in tensors.items():
        b = np.ascontiguousarray(v).tobytes()
        header[k] = {"dtype": names[v.dtype], "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def test_params_model_only(batches, tmp_path):
    """A checkpoint with the model's parameters only: fine with --startup
    (fresh optimizer state), an error naming --startup without it."""
    d, _ = batches
    t = tmp_path
    ok("train", MLP, "--startup", MLP_S, "--loss", "loss", *MOM, "--steps", 0, "--save", t / "init.st")
    full = read_safetensors(str(t / "init.st"))
    model = {k: v for k, v in full.items() if k.startswith("fc_") and "velocity" not in k}
    rng = np.random.default_rng(0)
    model = {k: (v + rng.normal(0, 0.01, v.shape)).astype(v.dtype) for k, v in model.items()}
    write_safetensors(t / "model.st", model)
    train(d, *MOM, "--params", t / "model.st", "--save", t / "out.st", steps=0)
    out = read_safetensors(str(t / "out.st"))
    for k, v in model.items():
        assert np.array_equal(out[k], v), k
    assert not out["fc_0.w_0_velocity_0"].any()
    line = fails(1, "train", MLP, "--loss", "loss", *MOM, "--steps", 1, "--data", d, "--params", t / "model.st")
    assert "--startup" in line
    # a parameter missing, a wrong shape, an unknown tensor: errors naming it
    part = dict(model)
    del part["fc_1.b_0"]
    write_safetensors(t / "part.st", part)
    fails(1, "train", MLP, "--startup", MLP_S, "--loss", "loss", *MOM, "--steps", 0, "--params", t / "part.st",
          contains=("fc_1.b_0",))
    bad = dict(model, **{"fc_1.b_0": np.zeros(7, np.float32)})
    write_safetensors(t / "shape.st", bad)
    fails(1, "train", MLP, "--startup", MLP_S, "--loss", "loss", *MOM, "--steps", 0, "--params", t / "shape.st",
          contains=("fc_1.b_0",))
    wrong_dt = dict(model, **{"fc_1.b_0": model["fc_1.b_0"].astype(np.float64)})
    write_safetensors(t / "dtype.st", wrong_dt)
    fails(1, "train", MLP, "--startup", MLP_S, "--loss", "loss", *MOM, "--steps", 0, "--params", t / "dtype.st",
          contains=("fc_1.b_0", "float64"))
    extra = dict(model, bogus=np.zeros(3, np.float32))
    write_safetensors(t / "extra.st", extra)
    fails(1, "train", MLP, "--startup", MLP_S, "--loss", "loss", *MOM, "--steps", 0, "--params", t / "extra.st",
          contains=("bogus",))
    # a checkpoint of another optimizer (momentum's velocities) for sgd
    fails(1, "train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", 0,
          "--params", t / "init.st", contains=("velocity", "another --optimizer"))
    (t / "trunc.st").write_bytes(open(t / "init.st", "rb").read()[:1000])
    fails(1, "train", MLP, "--startup", MLP_S, "--loss", "loss", *MOM, "--steps", 0, "--params", t / "trunc.st",
          contains=("trunc.st",))


def test_fetch_and_out(batches, tmp_path):
    d, _ = batches
    r = train(d, *MOM, "--fetch", "acc", "--out", tmp_path / "o", steps=3)
    acc = np.load(tmp_path / "o" / "acc.npy")
    assert acc.shape == (1,) and 0 <= acc[0] <= 1
    assert " acc " in [l for l in r.stdout.splitlines() if l.startswith("step 3/3")][0]


def test_places_2_equals_1(batches, tmp_path):
    """Two places (batch_share gradient scaling) train like one place on the
    whole batch, for even (32 = 16 + 16) and uneven (31 = 15 + 16) splits."""
    d, b = batches
    odd = tmp_path / "odd"
    write_batches(str(odd), "mlp", [(x[:31], y[:31]) for x, y in b])
    for data in (d, str(odd)):
        logs = []
        for places in ("cpu:1", "cpu:2"):
            f = tmp_path / ("%s_%s.npy" % (os.path.basename(data), places[-1]))
            train(data, "--optimizer", "sgd", "--lr", "0.05", "--places", places, "--log", f, steps=8)
            logs.append(np.load(f))
        np.testing.assert_allclose(logs[1], logs[0], rtol=1e-5)


def test_sgd_nesterov_decay_clip_vs_torch(batches, tmp_path):
    """The optimizer flags reach the program: sgd, and momentum with
    --nesterov --weight-decay --clip-norm, against torch.optim.SGD (after
    torch.nn.utils.clip_grad_norm_) over 8 steps, float32."""
    d, b = batches
    t = tmp_path
    ok("train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", 0, "--save", t / "i.st")
    init = read_safetensors(str(t / "i.st"))
    runs = [(["--optimizer", "sgd", "--lr", "0.1"], dict(lr=0.1), None),
            (MOM + ["--nesterov", "--weight-decay", "0.01", "--clip-norm", "0.5"],
             dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01), 0.5)]
    for flags, topt, clip in runs:
        train(d, *flags, "--log", t / "l.npy", steps=8)
        got = np.load(t / "l.npy")
        net = torch_model("mlp", init)
        opt = torch.optim.SGD(net.parameters(), **topt)
        if clip:
            # clip between backward and step: wrap step
            step = opt.step
            opt.step = lambda: (torch.nn.utils.clip_grad_norm_(net.parameters(), clip), step())
        ref = torch_train(net, opt, b, 8)
        np.testing.assert_allclose(got, ref, rtol=1e-4, err_msg=" ".join(flags))


USAGE = [
    (["train"], "missing PROGRAM"),
    (["train", MLP, "--startup", MLP_S, "--optimizer", "sgd", "--steps", "1", "--data", "."], "--loss"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--steps", "1", "--data", "."], "--optimizer"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--data", "."], "--steps"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", "1"], "--data"),
    (["train", MLP, "--loss", "loss", "--optimizer", "sgd", "--steps", "0"], "--startup"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "rmsprop", "--steps", "0"], "rmsprop"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "adam", "--momentum", "0.9", "--steps", "0"],
     "--momentum"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--nesterov", "--steps", "0"],
     "--nesterov"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "momentum", "--beta1", "0.8", "--steps", "0"],
     "--beta1"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--lr", "abc", "--steps", "0"], "abc"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--lr", "-1", "--steps", "0"], "--lr"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", "-3"], "--steps"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", "0",
      "--weight-decay", "-1"], "--weight-decay"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", "0", "--places", "tpu:0"],
     "tpu:0"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", "0", "--bogus"], "--bogus"),
    (["train", MLP, MLP, "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", "0"], "unexpected"),
    (["train", MLP, "--startup", MLP_S, "--loss", "loss", "--loss", "x", "--optimizer", "sgd", "--steps", "0"],
     "twice"),
]


@pytest.mark.parametrize("args,what", USAGE, ids=[str(i) for i in range(len(USAGE))])
def test_usage_errors(args, what):
    line = fails(2, *args)
    assert what in line, line


def test_bad_inputs(batches, tmp_path):
    d, b = batches
    t = tmp_path
    base = ["train", MLP, "--startup", MLP_S, "--optimizer", "sgd", "--steps", 2]
    fails(1, *base, "--loss", "loss", "--data", t / "nope", contains=("nope",))
    empty = t / "empty"
    empty.mkdir()
    fails(1, *base, "--loss", "loss", "--data", empty, contains=("x_0.npy",))
    fails(1, *base, "--loss", "nosuchvar", "--data", d, contains=("nosuchvar",))
    fails(1, *base, "--loss", "fc_0.tmp_0", "--data", d, contains=("one element",))
    fails(1, *base, "--loss", "label", "--data", d, contains=("float",))
    fails(1, *base, "--loss", "loss", "--data", d, "--fetch", "zz", contains=("zz",))
    fails(1, "train", t / "missing.pe", "--startup", MLP_S, "--loss", "loss", "--optimizer", "sgd", "--steps", 0,
          contains=("missing.pe",))
    # rows disagree within a batch
    rows = t / "rows"
    write_batches(str(rows), "mlp", [(b[0][0], b[0][1][:30])])
    fails(1, *base, "--loss", "loss", "--data", rows, contains=("rows",))
    # wrong dtype of a batch file: named with the declaration
    dt = t / "dtype"
    write_batches(str(dt), "mlp", [(b[0][0].astype(np.float64), b[0][1])])
    fails(1, *base, "--loss", "loss", "--data", dt, contains=("x_0.npy", "float64"))
    # a truncated batch file
    tr = t / "trunc"
    write_batches(str(tr), "mlp", b[:1])
    raw = open(tr / "x_0.npy", "rb").read()
    open(tr / "x_0.npy", "wb").write(raw[:len(raw) // 2])
    fails(1, *base, "--loss", "loss", "--data", tr, contains=("x_0.npy",))
    # fewer rows than places
    one = t / "one"
    write_batches(str(one), "mlp", [(b[0][0][:1], b[0][1][:1])])
    fails(1, *base, "--loss", "loss", "--data", one, "--places", "cpu:2", contains=("rows",))


def test_forward_examples_are_generated(tmp_path):
    """examples/*_forward*.json are what scripts/make_examples.py writes, and the
    .pe files are `pe convert` of them."""
    for name, build in make_examples.TRAIN_MODELS.items():
        m = build()
        for kind, prog in (("forward", m.main), ("forward_startup", m.startup)):
            base = os.path.join(EXAMPLES, "%s_%s" % (name, kind))
            assert open(base + ".json").read() == prog.to_json(), \
                "%s.json is stale: run /usr/bin/python3 scripts/make_examples.py" % base
            out = tmp_path / ("%s_%s.pe" % (name, kind))
            ok("convert", base + ".json", out)
            assert open(out, "rb").read() == open(base + ".pe", "rb").read(), \
                "%s.pe is not `pe convert` of the .json: run /usr/bin/python3 scripts/make_examples.py" % base
