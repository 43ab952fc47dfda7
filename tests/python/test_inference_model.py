"""tests/python/test_inference_model.py — save_inference_model /
load_inference_model (pe.static and fluid.io), the saved files through
`pe run`, and pe.static.load of a training checkpoint into a
clone(for_test=True).

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_inference_model.py
"""
import json
import os
import re
import struct
import subprocess

import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.utils import unique_name

RS = np.random.RandomState(3)
XS = [RS.randn(8, 6).astype(np.float32) for _ in range(4)]
YS = [RS.randint(0, 3, size=(8, 1)).astype(np.int64) for _ in range(4)]
XT = RS.randn(5, 6).astype(np.float32)


def pe_bin():
    return os.path.join(os.environ.get("PE_BIN_DIR", "build/bin"), "pe")


def train_mlp():
    """A 2-layer MLP with batch norm, dropout and softmax, trained 4 Adam steps."""
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 6], "float32")
        y = pe.static.data("y", [None, 1], "int64")
        h = pe.static.nn.batch_norm(pe.static.nn.fc(x, 8), act="relu")
        h = pe.nn.functional.dropout(h, 0.2)
        logits = pe.static.nn.fc(h, 3)
        prob = pe.nn.functional.softmax(logits)
        loss = pe.mean(pe.nn.functional.cross_entropy(logits, y))
        pe.optimizer.Adam(learning_rate=0.01).minimize(loss)
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    for xv, yv in zip(XS, YS):
        exe.run(main, feed={"x": xv, "y": yv}, fetch_list=[loss], scope=scope)
    return main, scope, exe, x, prob, loss


@pytest.fixture(scope="module")
def trained():
    return train_mlp()


def forward(main, scope, exe, prob):
    test = main.clone(for_test=True)  # still computes the loss: y is fed
    return exe.run(test, feed={"x": XT, "y": np.zeros((5, 1), np.int64)}, fetch_list=[prob.name], scope=scope)[0]


def safetensors_names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return sorted(k for k in h if k != "__metadata__")


def test_static_save_load_inference_model(trained, tmp_path):
    main, scope, exe, x, prob, loss = trained
    want = forward(main, scope, exe, prob)
    prefix = str(tmp_path / "mlp")
    pe.static.save_inference_model(prefix, [x], [prob], exe, program=main, scope=scope)
    assert os.path.exists(prefix + ".pe") and os.path.exists(prefix + ".safetensors")
    fresh = pe.static.Scope()
    prog, feeds, fetches = pe.static.load_inference_model(prefix, exe, scope=fresh)
    assert feeds == ["x"] and [v.name for v in fetches] == [prob.name]
    got, = exe.run(prog, feed={"x": XT}, fetch_list=fetches, scope=fresh)
    np.testing.assert_array_equal(got, want)


def test_pruned_to_the_feed_fetch_path(trained, tmp_path):
    main, scope, exe, x, prob, loss = trained
    prefix = str(tmp_path / "mlp")
    pe.static.save_inference_model(prefix, [x], [prob], exe, program=main, scope=scope)
    prog, _, _ = pe.static.load_inference_model(prefix, exe, scope=pe.static.Scope())
    g = prog.global_block()
    types = [op.type for op in g.ops]
    assert not any(t.endswith("_grad") or t in ("adam", "cross_entropy", "cross_entropy2", "mean",
                                                 "softmax_with_cross_entropy", "fill_any_like", "fill_constant")
                   for t in types), types
    assert all(not (int(op.attr("op_role") or 0) & 3) for op in g.ops)
    names = set(g.vars)
    assert "y" not in names and loss.name not in names
    assert not any("@GRAD" in n or "moment" in n or "beta" in n or "learning_rate" in n for n in names), names
    params = {p.name for p in main.all_parameters()}
    persist = sorted(v.name for v in g.vars.values() if v.persistable)
    assert safetensors_names(prefix + ".safetensors") == persist
    assert set(persist) == params  # batch norm's moving mean and variance (w_1, w_2) included
    assert {"batch_norm_0.w_1", "batch_norm_0.w_2"} <= params
    assert all(op.attr("is_test") for op in g.ops if op.type in ("batch_norm", "dropout"))


def test_fluid_save_load_inference_model(trained, tmp_path):
    main, scope, exe, x, prob, loss = trained
    want = forward(main, scope, exe, prob)
    fexe = fluid.Executor(fluid.CPUPlace())
    names = fluid.io.save_inference_model(str(tmp_path / "m"), ["x"], [prob], fexe, main_program=main, scope=scope)
    assert names == [prob.name]
    assert sorted(os.listdir(tmp_path / "m")) == ["__model__.pe", "__params__.safetensors"]
    fresh = fluid.Scope()
    prog, feeds, fetches = fluid.io.load_inference_model(str(tmp_path / "m"), fexe, scope=fresh)
    got, = fexe.run(prog, feed={feeds[0]: XT}, fetch_list=fetches, scope=fresh)
    np.testing.assert_array_equal(got, want)
    fluid.io.save_inference_model(str(tmp_path / "n"), ["x"], [prob], fexe, main_program=main, scope=scope,
                                  model_filename="model.pe", params_filename="w.safetensors")
    prog2, _, fetches2 = fluid.io.load_inference_model(str(tmp_path / "n"), fexe, model_filename="model.pe",
                                                      params_filename="w.safetensors", scope=fluid.Scope())
    assert [v.name for v in fetches2] == [prob.name]
    fluid.io.save_inference_model(str(tmp_path / "p"), ["x"], [prob], fexe, main_program=main, scope=scope,
                                  program_only=True)
    assert os.listdir(tmp_path / "p") == ["__model__.pe"]


def test_pe_run_the_saved_model(trained, tmp_path):
    main, scope, exe, x, prob, loss = trained
    want = forward(main, scope, exe, prob)
    prefix = str(tmp_path / "mlp")
    pe.static.save_inference_model(prefix, [x], [prob], exe, program=main, scope=scope)
    np.save(str(tmp_path / "x.npy"), XT)
    out = tmp_path / "out"
    r = subprocess.run([pe_bin(), "run", prefix + ".pe", "--params", prefix + ".safetensors", "--feed",
                        "x=%s" % (tmp_path / "x.npy"), "--out", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert prob.name in r.stdout  # fetched without --fetch: the model records its fetch vars
    got = np.load(str(out / (prob.name + ".npy")))
    np.testing.assert_array_equal(got, want)
    r = subprocess.run([pe_bin(), "inspect", prefix + ".pe"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "inference model feed: x\n" in r.stdout and "inference model fetch: %s\n" % prob.name in r.stdout


C_MAIN = r"""
#include "pe/pe.h"
#include <stdio.h>
/* infer MODEL.pe PARAMS.safetensors X.npy OUT.npy: the guide's C snippet (guide §7) */
int main(int argc, char **argv) {
    if (argc != 5) return 2;
    pe_program *p = NULL;
    pe_scope *s = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_tensor *x = pe_tensor_new(), *out = pe_tensor_new();
    if (pe_program_load_file(argv[1], &p) || pe_checkpoint_load(argv[2], p, s) || pe_npy_load(argv[3], x)) {
        fprintf(stderr, "%s\n", pe_last_error());
        return 1;
    }
    if (p->n_feed_names != 1 || p->n_fetch_names != 1) return 3;
    pe_feed feed = {p->feed_names[0], x};
    const char *fetch[] = {p->fetch_names[0]};
    if (pe_executor_run(ex, p, 0, s, &feed, 1, fetch, 1, &out) != PE_OK || pe_npy_save(argv[4], out) != PE_OK) {
        fprintf(stderr, "%s\n", pe_last_error());
        return 1;
    }
    pe_tensor_free(x);
    pe_tensor_free(out);
    pe_executor_free(ex);
    pe_scope_free(s);
    pe_program_free(p);
    return 0;
}
"""


def test_c_api_runs_the_saved_model(trained, tmp_path):
    """pe_program_load_file + pe_checkpoint_load + pe_executor_run with the recorded names."""
    import shutil
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    lib = os.path.join(os.path.dirname(os.path.abspath(pe_bin())), "..", "lib")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not os.path.exists(os.path.join(lib, "libpe.so")):
        pytest.skip("no C compiler or no build/lib/libpe.so")
    main, scope, exe, x, prob, loss = trained
    want = forward(main, scope, exe, prob)
    prefix = str(tmp_path / "mlp")
    pe.static.save_inference_model(prefix, [x], [prob], exe, program=main, scope=scope)
    (tmp_path / "main.c").write_text(C_MAIN)
    exe_path = str(tmp_path / "infer")
    r = subprocess.run([cc, "-std=c11", "-I", os.path.join(root, "include"), str(tmp_path / "main.c"), "-L", lib,
                        "-lpe", "-Wl,-rpath," + os.path.abspath(lib), "-o", exe_path], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    np.save(str(tmp_path / "x.npy"), XT)
    r = subprocess.run([exe_path, prefix + ".pe", prefix + ".safetensors", str(tmp_path / "x.npy"),
                        str(tmp_path / "o.npy")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(str(tmp_path / "o.npy")), want)


def test_inference_model_errors(trained, tmp_path):
    main, scope, exe, x, prob, loss = trained
    p = str(tmp_path / "bad")
    with pytest.raises(ValueError, match="feed var nope is not a variable of the program"):
        pe.static.save_inference_model(p, ["nope"], [prob], exe, program=main, scope=scope)
    with pytest.raises(ValueError, match="fetch var zz is not a variable"):
        pe.static.save_inference_model(p, [x], ["zz"], exe, program=main, scope=scope)
    with pytest.raises(ValueError, match=r"not reachable from the feed vars \['x'\].*reads y"):
        pe.static.save_inference_model(p, [x], [loss], exe, program=main, scope=scope)
    with pytest.raises(ValueError, match="fetch_vars must be a non-empty list"):
        pe.static.save_inference_model(p, [x], [], exe, program=main, scope=scope)
    with pytest.raises(TypeError, match="executor must be"):
        pe.static.save_inference_model(p, [x], [prob], None, program=main, scope=scope)
    assert not os.path.exists(p + ".pe")
    with pytest.raises(pe.NotFoundError, match="no file"):
        pe.static.load_inference_model(p, exe)
    # a plain program (no fetch names) is not an inference model
    pe.static.save(main, str(tmp_path / "plain"), scope=scope)
    with pytest.raises(pe.InvalidArgumentError, match="not an inference model"):
        pe.static.load_inference_model(str(tmp_path / "plain"), exe, scope=pe.static.Scope())


def test_load_training_checkpoint_into_test_clone(trained, tmp_path):
    main, scope, exe, x, prob, loss = trained
    want = forward(main, scope, exe, prob)
    path = str(tmp_path / "ckpt")
    pe.static.save(main, path, scope=scope)  # params + Adam moments, beta pows, learning rate
    test = main.clone(for_test=True)
    extra = sorted(set(safetensors_names(path + ".safetensors")) -
                   {v.name for v in test.global_block().vars.values() if v.persistable})
    assert extra  # the optimizer state is not in the inference clone
    fresh = pe.static.Scope()
    pe.static.load(test, path, scope=fresh)
    got, = exe.run(test, feed={"x": XT, "y": np.zeros((5, 1), np.int64)}, fetch_list=[prob.name], scope=fresh)
    np.testing.assert_array_equal(got, want)
    assert fresh.find_var(extra[0]) is None  # skipped, not loaded
    with pytest.raises(pe.InvalidArgumentError, match="%d tensors of the checkpoint are not persistable vars of "
                       "the program: " % len(extra)) as e:
        pe.static.load(test, path, scope=pe.static.Scope(), strict=True)
    named = re.findall(r"'([^']+)'", str(e.value).split("the program: ")[1])
    assert len(named) == min(12, len(extra)) and set(named) <= set(extra)
    # a var the program needs is always an error naming it
    with pe.static.program_guard(test, pe.static.Program()):
        test.global_block().create_parameter("extra_w", [2], "float32")
    with pytest.raises(pe.NotFoundError, match="'extra_w' of the program is missing"):
        pe.static.load(test, path, scope=pe.static.Scope())


def test_program_state_into_test_clone(trained, tmp_path):
    main, scope, exe, x, prob, loss = trained
    want = forward(main, scope, exe, prob)
    path = str(tmp_path / "ckpt")
    pe.static.save(main, path, scope=scope)
    state = pe.static.load_program_state(path)
    assert set(state) == set(safetensors_names(path + ".safetensors"))
    test = main.clone(for_test=True)
    fresh = pe.static.Scope()
    pe.static.set_program_state(test, state, scope=fresh)  # the optimizer state is skipped
    got, = exe.run(test, feed={"x": XT, "y": np.zeros((5, 1), np.int64)}, fetch_list=[prob.name], scope=fresh)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(pe.InvalidArgumentError, match="vars of the state are not persistables of the program"):
        pe.static.set_program_state(test, state, scope=pe.static.Scope(), strict=True)
    part = {k: v for k, v in state.items() if k != "fc_0.w_0"}
    with pytest.raises(pe.NotFoundError, match="fc_0.w_0 is missing"):
        pe.static.set_program_state(test, part, scope=pe.static.Scope())
    part["fc_0.w_0"] = np.zeros((2, 2), np.float32)
    with pytest.raises(pe.InvalidArgumentError, match=r"fc_0.w_0: the state holds float32 \[2, 2\]"):
        pe.static.set_program_state(test, part, scope=pe.static.Scope())
    only = pe.static.load_program_state(path, var_list=["fc_0.b_0"])
    assert list(only) == ["fc_0.b_0"]
    with pytest.raises(pe.NotFoundError, match="var nope is not in"):
        pe.static.load_program_state(path, var_list=["nope"])
