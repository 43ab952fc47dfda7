"""tests/python/test_examples.py — the example programs run by `pe run` match PyTorch.

For each example in examples/ (an MLP and a small CNN, each an inference
program plus a startup program, in both .json and .pe form) this runs

    pe run examples/<m>_infer.<ext> --startup examples/<m>_infer_startup.<ext> \
        --feed <input>=batch.npy --fetch prob --fetch <logits> --fetch <every param>

on a seeded random batch, then recomputes the forward pass in PyTorch
(float64) from the fetched parameters and requires prob and the logits to
agree within 1e-5 (the issue's bound). It also checks that prob rows are
distributions, that the parameters are what the startup program says
(uniform_random within [min, max), fill_constant exact), that the .json and
.pe forms give bit-identical results, and that the committed files are what
scripts/make_examples.py generates.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from pe_json import pe_bin, run_pe  # noqa: E402
import make_examples  # noqa: E402

EX = os.path.join(REPO, "examples")
TOL = 1e-5


def load(name):
    with open(os.path.join(EX, name + ".json")) as f:
        return json.load(f)


def params_of(model):
    return [v["name"] for v in load(model + "_infer")["blocks"][0]["vars"] if v.get("is_parameter")]


def mlp_forward(x, p):
    h = torch.relu(x @ p["fc_0.w_0"] + p["fc_0.b_0"])
    h = torch.relu(h @ p["fc_1.w_0"] + p["fc_1.b_0"])
    return h @ p["fc_2.w_0"] + p["fc_2.b_0"]


def cnn_forward(img, p):
    h = F.conv2d(img, p["conv2d_0.w_0"], padding=2)
    h = F.batch_norm(h, p["batch_norm_0.w_1"], p["batch_norm_0.w_2"], p["batch_norm_0.w_0"],
                     p["batch_norm_0.b_0"], training=False, eps=1e-5)
    h = F.max_pool2d(torch.relu(h), 2, 2)
    h = F.conv2d(h, p["conv2d_1.w_0"], p["conv2d_1.b_0"], padding=2)
    h = F.max_pool2d(torch.relu(h), 2, 2)
    h = h.reshape(h.shape[0], -1)
    h = torch.relu(h @ p["fc_0.w_0"] + p["fc_0.b_0"])
    return h @ p["fc_1.w_0"] + p["fc_1.b_0"]


# model -> (input var, input shape without batch, logits var, reference forward)
MODELS = {
    "mlp": ("x", [784], "fc_2.tmp_1", mlp_forward),
    "cnn": ("img", [1, 28, 28], "fc_1.tmp_1", cnn_forward),
}


def make_batch(model, n):
    rng = np.random.default_rng(1000 + n + (0 if model == "mlp" else 1))
    inp, shape = MODELS[model][0], MODELS[model][1]
    return {inp: rng.random([n] + shape, dtype=np.float32)}  # pixels in [0, 1)


def run_example(model, ext, batch):
    params = params_of(model)
    logits = MODELS[model][2]
    return run_pe(os.path.join(EX, "%s_infer.%s" % (model, ext)), batch, ["prob", logits] + params,
                  startup=os.path.join(EX, "%s_infer_startup.%s" % (model, ext)))


@pytest.fixture(scope="module", autouse=True)
def _need_pe():
    if not os.path.exists(pe_bin()):
        pytest.fail("pe binary not found at %s (set PE_BIN_DIR or build into build/)" % pe_bin())


@pytest.mark.parametrize("ext", ["json", "pe"])
@pytest.mark.parametrize("n", [1, 7])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_matches_torch(model, n, ext):
    batch = make_batch(model, n)
    got = run_example(model, ext, batch)
    inp, _, logits_name, forward = MODELS[model]
    p = {k: torch.from_numpy(got[k]).double() for k in params_of(model)}
    with torch.no_grad():
        logits = forward(torch.from_numpy(batch[inp]).double(), p)
        prob = torch.softmax(logits, -1)
    for name, want in (("prob", prob), (logits_name, logits)):
        g = got[name]
        assert g.dtype == np.float32 and list(g.shape) == list(want.shape), \
            "%s: %s is %s %s, expected float32 %s" % (model, name, g.dtype, list(g.shape), list(want.shape))
        err = np.abs(g.astype(np.float64) - want.numpy())
        lim = TOL + TOL * np.abs(want.numpy())
        assert (err <= lim).all(), "%s batch %d (%s): %s differs from PyTorch by up to %.3g (bound 1e-5)" % (
            model, n, ext, name, err.max())
    pr = got["prob"].astype(np.float64)
    assert (pr >= 0).all() and np.allclose(pr.sum(1), 1.0, rtol=0, atol=TOL), \
        "%s: prob rows are not distributions: sums %s" % (model, pr.sum(1))
    # Random weights give near-uniform but not identical scores: the model is not degenerate.
    assert np.ptp(got[logits_name], axis=1).min() > 1e-4, "%s: logits are constant across classes" % model


@pytest.mark.parametrize("model", sorted(MODELS))
def test_params_follow_startup(model):
    got = run_example(model, "json", make_batch(model, 1))
    for op in load(model + "_infer_startup")["blocks"][0]["ops"]:
        attrs = {a["name"]: a for a in op["attrs"]}
        name = op["outputs"][0]["args"][0]
        v = got[name]
        assert list(v.shape) == attrs["shape"]["ints"], "%s: %s dims %s" % (model, name, list(v.shape))
        if op["type"] == "fill_constant":
            assert (v == np.float32(attrs["value"]["f"])).all(), "%s: %s is not its constant" % (model, name)
        else:
            lo, hi = attrs["min"]["f"], attrs["max"]["f"]
            assert v.min() >= np.float32(lo) and v.max() <= np.float32(hi), \
                "%s: %s outside [%g, %g): %g..%g" % (model, name, lo, hi, v.min(), v.max())
            assert v.std() > 0.2 * (hi - lo) / np.sqrt(12), "%s: %s is not spread over its range" % (model, name)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_json_and_pe_identical(model):
    batch = make_batch(model, 3)
    a, b = run_example(model, "json", batch), run_example(model, "pe", batch)
    for k in a:
        assert np.array_equal(a[k], b[k]), "%s: %s differs between the .json and .pe forms" % (model, k)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_committed_files_are_fresh(model, tmp_path):
    m = make_examples.MODELS[model]()
    for kind, prog in (("infer", m.main), ("infer_startup", m.startup)):
        src = os.path.join(EX, "%s_%s" % (model, kind))
        with open(src + ".json") as f:
            assert f.read() == prog.to_json(), \
                "%s.json is stale: run /usr/bin/python3 scripts/make_examples.py" % src
        out = tmp_path / ("%s_%s.pe" % (model, kind))
        r = subprocess.run([pe_bin(), "convert", src + ".json", str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(src + ".pe", "rb") as f:
            assert f.read() == out.read_bytes(), \
                "%s.pe is not `pe convert` of the .json: run /usr/bin/python3 scripts/make_examples.py" % src


def test_train_examples_are_fresh():
    """examples/<m>_train + <m>_startup are what scripts/make_train_examples.py writes."""
    build = os.path.dirname(os.path.dirname(pe_bin()))
    r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make_train_examples.py"), "--check",
                        "--build", build], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("model", sorted(MODELS))
def test_startup_initializes_every_persistable(model):
    """<m>_startup initializes every persistable var of the training program (parameters, the
    learning rate, the momentum velocities) and <m>_infer_startup every one of the inference program."""
    for prog, startup in (("_train", "_startup"), ("_infer", "_infer_startup")):
        want = {v["name"] for v in load(model + prog)["blocks"][0]["vars"] if v.get("persistable")}
        got = {a for op in load(model + startup)["blocks"][0]["ops"] for o in op["outputs"] for a in o["args"]}
        assert want and want <= got, "%s%s.json leaves %s uninitialized" % (model, startup, sorted(want - got))
        if prog == "_train":
            assert any(n.endswith("_velocity_0") for n in want), "%s_train has no momentum velocities" % model
