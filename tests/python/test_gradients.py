"""tests/python/test_gradients.py — pe.static.gradients / fluid.gradients /
fluid.backward.append_backward against torch.autograd.grad.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_gradients.py
"""
import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.utils import unique_name

torch = pytest.importorskip("torch")

RS = np.random.RandomState(7)
XV = RS.randn(5, 4).astype(np.float32)
SEED = RS.randn(5, 3).astype(np.float32)


def build(fn):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 4], "float32")
        x.stop_gradient = False
        h = pe.tanh(pe.static.nn.fc(x, 3))
        out = fn(main, x, h)
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    w = np.array(scope.find_var("fc_0.w_0").get_tensor())
    b = np.array(scope.find_var("fc_0.b_0").get_tensor())
    return main, scope, exe, out, w, b


def torch_graph(w, b, seed=None):
    x = torch.tensor(XV.astype(np.float64), requires_grad=True)
    tw = torch.tensor(w.astype(np.float64), requires_grad=True)
    tb = torch.tensor(b.astype(np.float64), requires_grad=True)
    h = torch.tanh(x @ tw + tb)
    return x, tw, tb, h


def run(main, scope, exe, fetch, feed=None):
    f = {"x": XV}
    f.update(feed or {})
    return exe.run(main, feed=f, fetch_list=fetch, scope=scope)


def test_one_target_matches_torch():
    def fn(main, x, h):
        loss = pe.mean(h)
        w = main.global_block().var("fc_0.w_0")
        return pe.static.gradients(loss, [x, w])
    main, scope, exe, (gx, gw), w, b = build(fn)
    px, pw = run(main, scope, exe, [gx, gw])
    x, tw, tb, h = torch_graph(w, b)
    tx, tww = torch.autograd.grad(h.mean(), [x, tw])
    np.testing.assert_allclose(px, tx.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(pw, tww.numpy(), rtol=1e-4, atol=1e-6)


def test_two_targets_are_summed():
    def fn(main, x, h):
        t1 = pe.mean(h)
        t2 = pe.sum(h * h)
        return pe.static.gradients([t1, t2], [x])
    main, scope, exe, (gx,), w, b = build(fn)
    px, = run(main, scope, exe, [gx])
    x, tw, tb, h = torch_graph(w, b)
    tx, = torch.autograd.grad(h.mean() + (h * h).sum(), [x])
    np.testing.assert_allclose(px, tx.numpy(), rtol=1e-4, atol=1e-6)


def test_target_depending_on_another_target():
    def fn(main, x, h):
        t2 = pe.mean(h)
        return fluid.gradients([h, t2], x)  # h's ones plus mean's contribution
    main, scope, exe, (gx,), w, b = build(fn)
    px, = run(main, scope, exe, [gx])
    x, tw, tb, h = torch_graph(w, b)
    tx, = torch.autograd.grad(h.sum() + h.mean(), [x])
    np.testing.assert_allclose(px, tx.numpy(), rtol=1e-4, atol=1e-6)


def test_target_gradients_replace_the_ones():
    def fn(main, x, h):
        s = pe.static.data("seed", [None, 3], "float32")
        return pe.static.gradients([h], [x], target_gradients=[s])
    main, scope, exe, (gx,), w, b = build(fn)
    px, = run(main, scope, exe, [gx], {"seed": SEED})
    x, tw, tb, h = torch_graph(w, b)
    tx, = torch.autograd.grad(h, [x], grad_outputs=torch.tensor(SEED.astype(np.float64)))
    np.testing.assert_allclose(px, tx.numpy(), rtol=1e-4, atol=1e-6)


def test_target_gradients_none_entry_is_ones():
    def fn(main, x, h):
        s = pe.static.data("seed", [None, 3], "float32")
        t2 = pe.mean(h)
        return pe.static.gradients([h, t2], [x], target_gradients=[s, None])
    main, scope, exe, (gx,), w, b = build(fn)
    px, = run(main, scope, exe, [gx], {"seed": SEED})
    x, tw, tb, h = torch_graph(w, b)
    tx, = torch.autograd.grad((h * torch.tensor(SEED.astype(np.float64))).sum() + h.mean(), [x])
    np.testing.assert_allclose(px, tx.numpy(), rtol=1e-4, atol=1e-6)


def test_unreached_input_gets_none_and_no_grad_set():
    def fn(main, x, h):
        other = pe.static.data("other", [None, 4], "float32")
        other.stop_gradient = False
        loss = pe.mean(h)
        w = main.global_block().var("fc_0.w_0")
        b = main.global_block().var("fc_0.b_0")
        return pe.static.gradients(loss, [x, other, w, b], no_grad_set={w})
    main, scope, exe, (gx, go, gw, gb), w, b = build(fn)
    assert go is None and gw is None
    px, pb = run(main, scope, exe, [gx, gb], {"other": XV})
    x, tw, tb, h = torch_graph(w, b)
    tx, tbb = torch.autograd.grad(h.mean(), [x, tb])
    np.testing.assert_allclose(px, tx.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(pb, tbb.numpy(), rtol=1e-4, atol=1e-6)


def test_target_gradients_errors():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 4], "float32")
        x.stop_gradient = False
        h = pe.tanh(pe.static.nn.fc(x, 3))
        bad = pe.static.data("bad", [None, 2], "float32")
        with pytest.raises(ValueError, match="1 entries for 2 targets"):
            pe.static.gradients([h, pe.mean(h)], [x], target_gradients=[bad])
        with pytest.raises(pe.InvalidArgumentError, match="target_gradients var 'bad'.*target"):
            pe.static.gradients([h], [x], target_gradients=[bad])
        with pytest.raises(TypeError, match="target_gradients entries"):
            pe.static.gradients([h], [x], target_gradients=[np.ones((5, 3))])


def test_fluid_append_backward():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 3, act="tanh"))
        pairs = fluid.backward.append_backward(loss)
        assert sorted(p.name for p, g in pairs) == ["fc_0.b_0", "fc_0.w_0"]
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    w = np.array(scope.find_var("fc_0.w_0").get_tensor())
    b = np.array(scope.find_var("fc_0.b_0").get_tensor())
    got = exe.run(main, feed={"x": XV}, fetch_list=[g for p, g in pairs], scope=scope)
    x, tw, tb, h = torch_graph(w, b)
    want = dict(zip(["fc_0.w_0", "fc_0.b_0"], torch.autograd.grad(h.mean(), [tw, tb])))
    for (p, g), v in zip(pairs, got):
        np.testing.assert_allclose(v, want[p.name].numpy(), rtol=1e-4, atol=1e-6)
