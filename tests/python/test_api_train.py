"""tests/python/test_api_train.py — training an MLP through the Python API.

- pe.optimizer.SGD / Momentum / Adam lower the loss of an MLP on a learnable
  synthetic task (and reach a high training accuracy).
- The same program trained with the single-place Executor, a
  ParallelExecutor on 1 place, on 2 places (CPU_NUM) and through
  CompiledProgram.with_data_parallel ends with allclose parameters (PE's
  batch_share gradient scaling makes N places equal one place on the whole
  batch).
- PyTorch, started from the same initial weights and fed the same batches,
  ends with the same parameters (SGD, Momentum with L2 weight decay and
  global-norm clipping, Adam), so the Python API, the C passes and the
  kernels agree with an independent implementation.
- Building the same model twice (unique_name.guard, same random_seed) gives
  the same names and the same initial weights.
"""
import numpy as np
import pytest
import torch

import pe
from pe.utils import unique_name

pe.enable_static()

N, D, H1, H2, C, BATCH, STEPS = 64, 20, 32, 16, 3, 32, 8


def data():
    rng = np.random.RandomState(0)
    x = rng.randn(N, D).astype(np.float32)
    y = np.argmax(x @ rng.randn(D, C), 1).astype(np.int64)[:, None]
    return x, y


def build(make_opt, seed=7):
    main, startup = pe.static.Program(), pe.static.Program()
    startup.random_seed = seed
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, D], "float32")
        y = pe.static.data("y", [None, 1], "int64")
        h = pe.static.nn.fc(x, H1, activation="relu")
        h = pe.static.nn.fc(h, H2, activation="tanh")
        logits = pe.static.nn.fc(h, C)
        loss = pe.nn.functional.cross_entropy(logits, y)
        acc = pe.metric.accuracy(pe.nn.functional.softmax(logits), y)
        make_opt().minimize(loss)
    return main, startup, loss, acc


PARAMS = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0", "fc_2.w_0", "fc_2.b_0"]


def params(scope):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in PARAMS}


def batches():
    x, y = data()
    for s in range(STEPS):
        i = (s * BATCH) % N
        yield x[i:i + BATCH], y[i:i + BATCH]


def train(make_opt, mode, monkeypatch=None):
    """Trains STEPS steps; returns (initial params, final params, losses)."""
    main, startup, loss, acc = build(make_opt)
    scope = pe.static.Scope()
    exe = pe.static.Executor(pe.CPUPlace())
    exe.run(startup, scope=scope)
    init = params(scope)
    losses = []
    if mode == "exe":
        run = lambda feed: exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]  # noqa: E731
    elif mode in ("pe1", "pe2"):
        monkeypatch.setenv("CPU_NUM", mode[-1])
        pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope)
        assert pexe.device_count == int(mode[-1])
        run = lambda feed: pexe.run([loss.name], feed=feed)[0]  # noqa: E731
    elif mode == "compiled2":
        comp = pe.static.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                                   places=pe.static.cpu_places(2))
        run = lambda feed: exe.run(comp, feed=feed, fetch_list=[loss], scope=scope)[0]  # noqa: E731
    else:
        raise ValueError(mode)
    for xb, yb in batches():
        losses.append(float(np.mean(run({"x": xb, "y": yb}))))
    return init, params(scope), losses


OPTS = {
    "sgd": lambda: pe.optimizer.SGD(learning_rate=0.2),
    "momentum": lambda: pe.optimizer.Momentum(learning_rate=0.05, momentum=0.9, weight_decay=1e-3,
                                              grad_clip=pe.nn.ClipGradByGlobalNorm(1.0)),
    "adam": lambda: pe.optimizer.Adam(learning_rate=0.01),
}


@pytest.mark.parametrize("opt", sorted(OPTS))
def test_loss_goes_down(opt):
    main, startup, loss, acc = build(OPTS[opt])
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    x, y = data()
    first = None
    for _ in range(40):
        lv, av = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss, acc], scope=scope)
        first = float(lv[0]) if first is None else first
    assert float(lv[0]) < 0.6 * first, (first, float(lv[0]))
    assert float(av[0]) > 0.8


def test_same_build_same_names_and_weights():
    a_main, a_start, *_ = build(OPTS["adam"])
    b_main, b_start, *_ = build(OPTS["adam"])
    assert a_main.to_json() == b_main.to_json() and a_start.to_json() == b_start.to_json()
    sa, sb = pe.static.Scope(), pe.static.Scope()
    pe.static.Executor().run(a_start, scope=sa)
    pe.static.Executor().run(b_start, scope=sb)
    for n, v in params(sa).items():
        np.testing.assert_array_equal(v, params(sb)[n])
    c_main, c_start, *_ = build(OPTS["adam"], seed=8)
    sc = pe.static.Scope()
    pe.static.Executor().run(c_start, scope=sc)
    assert not np.array_equal(params(sc)["fc_0.w_0"], params(sa)["fc_0.w_0"])


@pytest.mark.parametrize("opt", sorted(OPTS))
def test_one_and_two_places_agree(opt, monkeypatch):
    init, ref, ref_losses = train(OPTS[opt], "exe")
    for mode in ("pe1", "pe2", "compiled2"):
        init_m, got, losses = train(OPTS[opt], mode, monkeypatch)
        for n in PARAMS:
            np.testing.assert_array_equal(init_m[n], init[n])
            np.testing.assert_allclose(got[n], ref[n], rtol=1e-5, atol=1e-6, err_msg="%s %s %s" % (opt, mode, n))
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert not np.allclose(ref["fc_0.w_0"], init["fc_0.w_0"])  # training moved the weights


def torch_train(opt, init):
    p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in init.items()}
    plist = [p[n] for n in PARAMS]
    if opt == "sgd":
        o = torch.optim.SGD(plist, lr=0.2)
    elif opt == "momentum":
        o = torch.optim.SGD(plist, lr=0.05, momentum=0.9, weight_decay=1e-3)
    else:
        o = torch.optim.Adam(plist, lr=0.01)
    for xb, yb in batches():
        x = torch.tensor(xb, dtype=torch.float64)
        h = torch.relu(x @ p["fc_0.w_0"] + p["fc_0.b_0"])
        h = torch.tanh(h @ p["fc_1.w_0"] + p["fc_1.b_0"])
        logits = h @ p["fc_2.w_0"] + p["fc_2.b_0"]
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(yb[:, 0]))
        o.zero_grad()
        loss.backward()
        if opt == "momentum":
            torch.nn.utils.clip_grad_norm_(plist, 1.0)
        o.step()
    return {n: t.detach().numpy() for n, t in p.items()}


@pytest.mark.parametrize("opt", sorted(OPTS))
def test_matches_pytorch_from_same_init(opt, monkeypatch):
    init, got, _ = train(OPTS[opt], "pe2", monkeypatch)
    want = torch_train(opt, init)
    for n in PARAMS:
        np.testing.assert_allclose(got[n], want[n], rtol=2e-4, atol=2e-5, err_msg="%s %s" % (opt, n))


def test_param_attr_learning_rate_and_trainable():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 4], "float32")
        h = pe.static.nn.fc(x, 3, weight_attr=pe.ParamAttr(name="frozen_w", trainable=False,
                                                           initializer=pe.nn.initializer.Constant(0.5)))
        out = pe.static.nn.fc(h, 2, weight_attr=pe.ParamAttr(learning_rate=0.0))
        loss = pe.mean(out)
        _, pairs = pe.optimizer.SGD(learning_rate=0.1).minimize(loss)
    names = {p.name for p, g in pairs}
    assert "frozen_w" not in names and "fc_1.w_0" in names
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    w0 = np.array(scope.find_var("fc_1.w_0").get_tensor())
    b0 = np.array(scope.find_var("fc_1.b_0").get_tensor())
    exe.run(main, feed={"x": np.ones((4, 4), np.float32)}, fetch_list=[loss], scope=scope)
    np.testing.assert_array_equal(np.array(scope.find_var("frozen_w").get_tensor()), np.full((4, 3), 0.5))
    np.testing.assert_array_equal(np.array(scope.find_var("fc_1.w_0").get_tensor()), w0)  # lr multiplier 0
    assert not np.array_equal(np.array(scope.find_var("fc_1.b_0").get_tensor()), b0)


def test_append_backward_and_gradients():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        x.stop_gradient = False
        out = pe.static.nn.fc(x, 2, bias_attr=False)
        loss = pe.mean(out * out)
        pairs = pe.static.append_backward(loss)
        assert [p.name for p, g in pairs] == ["fc_0.w_0"]
        assert pairs[0][1].name == "fc_0.w_0@GRAD"
    main2, startup2 = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main2, startup2), unique_name.guard():
        x2 = pe.static.data("x", [None, 3], "float32")
        x2.stop_gradient = False
        out2 = pe.static.nn.fc(x2, 2, bias_attr=False)
        dx, = pe.static.gradients([pe.sum(out2)], [x2])
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    xv = np.random.RandomState(3).randn(4, 3).astype(np.float32)
    gw, = exe.run(main, feed={"x": xv}, fetch_list=[pairs[0][1]], scope=scope)
    w = np.array(scope.find_var("fc_0.w_0").get_tensor()).astype(np.float64)
    np.testing.assert_allclose(gw, 2 * xv.T.astype(np.float64) @ (xv @ w) / 8, rtol=1e-4, atol=1e-6)
    scope2 = pe.static.Scope()
    exe.run(startup2, scope=scope2)
    gx, = exe.run(main2, feed={"x": xv}, fetch_list=[dx], scope=scope2)
    w2 = np.array(scope2.find_var("fc_0.w_0").get_tensor())
    np.testing.assert_allclose(gx, np.tile(w2.sum(1), (4, 1)), rtol=1e-5, atol=1e-6)


def build_cnn(bn):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        img = pe.static.data("img", [None, 1, 12, 12], "float32")
        y = pe.static.data("y", [None, 1], "int64")
        h = pe.static.nn.conv2d(img, 4, 3, padding=1, act=None if bn else "relu", bias_attr=False if bn else None)
        if bn:
            h = pe.static.nn.batch_norm(h, act="relu")
        h = pe.nn.functional.max_pool2d(h, 2, 2)
        h = pe.static.nn.conv2d(h, 8, 3, padding=1, act="relu")
        h = pe.flatten(pe.nn.functional.avg_pool2d(h, 2), 1)
        loss = pe.nn.functional.cross_entropy(pe.static.nn.fc(h, 2), y)
        pe.optimizer.Adam(learning_rate=0.01).minimize(loss)
    return main, startup, loss


def cnn_data():
    rng = np.random.RandomState(4)
    x = rng.randn(32, 1, 12, 12).astype(np.float32)
    y = (x[:, 0, :6].mean((1, 2)) > x[:, 0, 6:].mean((1, 2))).astype(np.int64)[:, None]
    return x, y


CNN_PARAMS = ["conv2d_0.w_0", "conv2d_0.b_0", "conv2d_1.w_0", "conv2d_1.b_0", "fc_0.w_0", "fc_0.b_0"]


@pytest.mark.parametrize("places", ["1", "2"])
def test_cnn_matches_pytorch(places, monkeypatch):
    """A small CNN (conv, max/avg pool, flatten, fc; Adam) on 1 and 2 places ends where torch ends."""
    monkeypatch.setenv("CPU_NUM", places)
    x, y = cnn_data()
    main, startup, loss = build_cnn(bn=False)
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    init = {n: np.array(scope.find_var(n).get_tensor()) for n in CNN_PARAMS}
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope)
    losses = [float(np.mean(pexe.run([loss], feed={"img": x, "y": y})[0])) for _ in range(5)]
    p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in init.items()}
    o = torch.optim.Adam([p[n] for n in CNN_PARAMS], lr=0.01)
    X, Y = torch.tensor(x, dtype=torch.float64), torch.tensor(y[:, 0])
    for _ in range(5):
        h = torch.relu(torch.nn.functional.conv2d(X, p["conv2d_0.w_0"], p["conv2d_0.b_0"], padding=1))
        h = torch.nn.functional.max_pool2d(h, 2, 2)
        h = torch.relu(torch.nn.functional.conv2d(h, p["conv2d_1.w_0"], p["conv2d_1.b_0"], padding=1))
        h = torch.nn.functional.avg_pool2d(h, 2).reshape(32, -1)
        tl = torch.nn.functional.cross_entropy(h @ p["fc_0.w_0"] + p["fc_0.b_0"], Y)
        o.zero_grad()
        tl.backward()
        o.step()
    for n in CNN_PARAMS:
        np.testing.assert_allclose(np.array(scope.find_var(n).get_tensor()), p[n].detach().numpy(), rtol=1e-3,
                                   atol=1e-5, err_msg=n)
    assert losses[-1] < losses[0]


def test_cnn_with_batch_norm_trains(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    x, y = cnn_data()
    main, startup, loss = build_cnn(bn=True)
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope)
    losses = [float(np.mean(pexe.run([loss], feed={"img": x, "y": y})[0])) for _ in range(25)]
    assert losses[-1] < 0.6 * losses[0], losses
    mean = np.array(scope.find_var("batch_norm_0.w_1").get_tensor())
    assert np.abs(mean).max() > 0  # running statistics were updated
