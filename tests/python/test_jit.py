"""tests/python/test_jit.py — pe.jit.to_static, pe.jit.save and pe.jit.load for eager pe.nn.Layer models.

An MLP and a small CNN (conv, batch norm, pool, linear): the to_static
forward equals the eager forward; training a few batches through to_static
with SGD / Adam ends with the parameters (and batch-norm statistics) of
the same training in eager mode; jit.save's files run in `pe run` and
through jit.load with the eager outputs; value-dependent control flow and
inputs that contradict the input_spec raise errors naming the layer. The
build passes run on the traced forward + backward as one program before
it is cut in two: matmul_v2 + bias add + act become fc / fc_grad (2-D and
3-D inputs; attention-like matmuls stay), the eager steps bit for bit; with
BuildStrategy() a CNN is NHWC with transposes only at the edges; a pass
that interleaved forward and backward ops falls back to the unfused split.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_jit.py
"""
import contextlib
import os
import subprocess

import numpy as np
import pytest

import pe
import pe.nn as nn
from pe.static import InputSpec


@pytest.fixture(autouse=True)
def eager():
    pe.disable_static()
    pe.seed(11)
    yield
    pe.enable_static()


def pe_bin():
    return os.path.join(os.environ.get("PE_BIN_DIR", "build/bin"), "pe")


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(nn.functional.relu(self.fc1(x)))


class CNN(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2D(4)
        self.pool = nn.MaxPool2D(2)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(self.flat(self.pool(nn.functional.relu(self.bn(self.conv(x))))))


def _make(kind):
    return MLP() if kind == "mlp" else CNN()


def _shape(kind, n):
    return [n, 784] if kind == "mlp" else [n, 1, 8, 8]


def _batches(kind, steps, n=8, seed=0):
    rs = np.random.RandomState(seed)
    return [(rs.rand(*_shape(kind, n)).astype("float32"), rs.randint(0, 10, [n]).astype("int64"))
            for _ in range(steps)]


def _state(model):
    return {k: v.numpy() for k, v in model.state_dict().items()}


def _twins(kind):
    """Two models with the same weights (the second's set from the first's)."""
    a = _make(kind)
    b = _make(kind)
    b.set_state_dict(_state(a))
    return a, b


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_forward_equals_eager(kind):
    model = _make(kind)
    x = pe.to_tensor(np.random.RandomState(1).rand(*_shape(kind, 5)).astype("float32"))
    want = model(x).numpy()
    want_stats = _state(model)
    st = pe.jit.to_static(model)
    assert isinstance(st.forward, pe.jit.StaticFunction)
    np.testing.assert_allclose(st(x).numpy(), want, rtol=1e-5, atol=1e-6)
    # a training-mode call moves batch norm's running statistics once, as the eager call did
    model.set_state_dict(want_stats)
    # another batch size reuses the signature (dim 0 is -1)
    x2 = pe.to_tensor(np.random.RandomState(2).rand(*_shape(kind, 3)).astype("float32"))
    model.eval()
    with pe.no_grad():
        got = st(x2).numpy()
    want2 = st.forward.rollback()(x2).numpy()
    np.testing.assert_allclose(got, want2, rtol=1e-5, atol=1e-6)


def test_batch_norm_statistics_move_once():
    a, b = _twins("cnn")
    x = pe.to_tensor(np.random.RandomState(3).rand(6, 1, 8, 8).astype("float32"))
    a(x)
    pe.jit.to_static(b)(x)
    np.testing.assert_allclose(b.bn._mean.numpy(), a.bn._mean.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b.bn._variance.numpy(), a.bn._variance.numpy(), rtol=1e-6, atol=1e-7)
    assert np.abs(a.bn._mean.numpy()).sum() > 0


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_training_matches_eager(kind, opt_name):
    eager_m, static_m = _twins(kind)
    static_m = pe.jit.to_static(static_m)
    loss_fn = nn.CrossEntropyLoss()
    lr = 0.1 if opt_name == "SGD" else 0.01
    results = []
    for m in (eager_m, static_m):
        opt = getattr(pe.optimizer, opt_name)(learning_rate=lr, parameters=m.parameters())
        losses = []
        for xb, yb in _batches(kind, 4):
            loss = loss_fn(m(pe.to_tensor(xb)), pe.to_tensor(yb))
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        results.append((losses, _state(m)))
    (le, se), (ls, ss) = results
    np.testing.assert_allclose(ls, le, rtol=1e-5)
    assert le[0] != le[-1]
    assert sorted(se) == sorted(ss)
    for k in se:
        np.testing.assert_allclose(ss[k], se[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # the parameters moved: the trained values are not the initial ones
    init = _make(kind)
    assert any(not np.allclose(se[k], v) for k, v in _state(init).items() if k in se)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_without_passes(kind):
    """build_strategy with every pass off (no fusion, no layout pass, no memory
    plan); the training ends with the eager run's values as with the default
    passes."""
    eager_m, static_m = _twins(kind)
    bs = pe.static.BuildStrategy()
    bs.fuse_gemm_epilogue = bs.fuse_elewise_add_act_ops = bs.conv_nhwc = bs.fuse_conv_bias = False
    static_m = pe.jit.to_static(static_m, build_strategy=bs)
    loss_fn = nn.CrossEntropyLoss()
    states = []
    for m in (eager_m, static_m):
        opt = pe.optimizer.Momentum(learning_rate=0.05, momentum=0.9, parameters=m.parameters())
        for xb, yb in _batches(kind, 3, seed=1):
            loss = loss_fn(m(pe.to_tensor(xb)), pe.to_tensor(yb))
            loss.backward()
            opt.step()
            opt.clear_grad()
        states.append(_state(m))
    for k in states[0]:
        np.testing.assert_allclose(states[1][k], states[0][k], rtol=1e-5, atol=1e-6, err_msg=k)
    with pytest.raises(TypeError, match="build_strategy must be a pe.static.BuildStrategy"):
        pe.jit.to_static(MLP(), build_strategy={"fuse_elewise_add_act_ops": True})


def test_step_writes_the_bound_parameters_in_place():
    """After the first call each parameter's storage is its scope var; the
    in-place optimizer step keeps it so (nothing is copied back before the
    next run), and a backward through a call whose parameters a step changed
    since is refused, naming the to_static call."""
    model = pe.jit.to_static(MLP())
    opt = pe.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    (xb, yb), (xb2, yb2) = _batches("mlp", 2)
    x, y = pe.to_tensor(xb), pe.to_tensor(yb)
    loss = loss_fn(model(x), y)
    bound = {p.name: p._t for p in model.parameters()}
    views = model.forward._views
    assert all(views[n] is t for n, t in bound.items())
    loss.backward(retain_graph=True)
    w0 = model.fc1.weight.numpy()
    opt.step()
    assert all(p._t is bound[p.name] for p in model.parameters())
    assert not np.array_equal(model.fc1.weight.numpy(), w0)
    np.testing.assert_array_equal(views[model.fc1.weight.name].numpy(), model.fc1.weight.numpy())
    with pytest.raises(pe.InvalidArgumentError, match=r"tensor 'linear_\d+\.[wb]_0' \[\d+(, \d+)?\], saved by op "
                                                      r"to_static\(MLP.forward\) for the backward pass, was modified by "
                                                      r"an in-place operation \(an optimizer step\)"):
        loss.backward()
    # the next call runs on the stepped values: the same loss as the eager forward
    opt.clear_grad()
    got = float(loss_fn(model(pe.to_tensor(xb2)), pe.to_tensor(yb2)))
    want = float(loss_fn(model.forward.rollback()(pe.to_tensor(xb2)), pe.to_tensor(yb2)))
    assert abs(got - want) <= 1e-5 * abs(want)


def test_gradients_are_taken_from_the_call_scope():
    """backward() takes the gradients out of the pooled call scope without a
    copy (ParallelExecutor.run(take=True)): the next backward in that scope
    computes new ones and leaves the earlier .grad tensors as they were, so
    accumulation over calls (no clear_grad between) and a retained graph's
    second backward give the eager tape's values bit for bit."""
    eager_m, static_m = _twins("mlp")
    static_m = pe.jit.to_static(static_m)
    loss_fn = nn.CrossEntropyLoss()
    (xa, ya), (xb, yb) = _batches("mlp", 2, seed=4)
    held, grads = [], []
    for m in (eager_m, static_m):
        first = None
        for xs, ys, retain in ((xa, ya, True), (xb, yb, False)):
            loss = loss_fn(m(pe.to_tensor(xs)), pe.to_tensor(ys))
            loss.backward(retain_graph=retain)
            if first is None:
                first = m.fc1.weight.grad
                first_value = first.numpy()
                loss.backward()   # the retained graph again: its call scope's backward program runs twice
        held.append((first, first_value))
        grads.append({n: p.grad.numpy() for n, p in m.named_parameters()})
    for (t, v) in held:
        np.testing.assert_array_equal(t.numpy(), v)   # a later backward did not write the taken tensor
    for n in grads[0]:
        np.testing.assert_array_equal(grads[1][n], grads[0][n], err_msg=n)


def test_run_take_hands_over_temporaries_and_copies_persistables():
    """ParallelExecutor.run(take=True): a temporary's buffer goes to the
    fetched tensor (the next run computes into a new one); a persistable var
    keeps its storage and is copied."""
    pe.enable_static()
    prog = pe.static.Program()
    with pe.static.program_guard(prog, pe.static.Program()):
        x = pe.static.data("x", [-1, 3], "float32")
        y = pe.scale(x, scale=2.0)
    acc = prog.global_block().create_var(name="acc", shape=[2, 3], dtype="float32", persistable=True)
    prog.global_block().append_op(type="assign", inputs={"X": [y.name]}, outputs={"Out": [acc.name]}, attrs={})
    pe.disable_static()
    scope = pe.static.Scope()
    run = pe.jit._Runner(prog, scope, pe.jit._default_build_strategy())
    x1, x2 = np.ones([2, 3], "float32"), np.full([2, 3], 5.0, "float32")
    f = pe.to_tensor(x1)._t
    y1, a1 = run.run({"x": f}, [y.name, "acc"], take=True)
    y2, a2 = run.run({"x": pe.to_tensor(x2)._t}, [y.name, "acc"], take=True)
    np.testing.assert_array_equal(y1.numpy(), 2 * x1)
    np.testing.assert_array_equal(a1.numpy(), 2 * x1)
    np.testing.assert_array_equal(y2.numpy(), 2 * x2)
    np.testing.assert_array_equal(scope.find_var("acc").get_tensor().numpy(), 2 * x2)
    assert y1._data_ptr() != y2._data_ptr()
    assert a2._data_ptr() != scope.find_var("acc").get_tensor()._data_ptr()


def test_default_passes_fuse_the_forward(tmp_path):
    bs = pe.jit._default_build_strategy()
    assert bs.fuse_elewise_add_act_ops and bs.memory_optimize and bs.enable_inplace
    bs.debug_graphviz_path = str(tmp_path / "g")
    model = pe.jit.to_static(MLP(), build_strategy=bs)
    with pe.no_grad():
        model(pe.to_tensor(np.ones([2, 784], "float32")))
    # matmul_v2 + bias add (+ relu) -> fc: one with relu, one without
    assert (tmp_path / "g").read_text().count('label="fc\\n') == 2
    assert "fc" not in (tmp_path / "g.00_input.dot").read_text()
    bs.fuse_gemm_epilogue = False
    model = pe.jit.to_static(MLP(), build_strategy=bs)
    with pe.no_grad():
        model(pe.to_tensor(np.ones([2, 784], "float32")))
    assert "fused_elemwise_activation" in (tmp_path / "g").read_text()
    assert "fused_elemwise_activation" not in (tmp_path / "g.00_input.dot").read_text()


def _train_progs(model):
    """The forward and backward programs of a to_static model's training call."""
    (conc,) = model.forward._concrete.values()
    (ent,) = conc.train.values()
    return ent[0], ent[1]


def _train_ops(model):
    """Op types of the forward and backward programs of a to_static model's training call."""
    return tuple([op.type for op in p.global_block().ops] for p in _train_progs(model))


def _same_steps(make, xs, loss_of, steps, opt, seed, build_strategy=None, expect_warning=None):
    """Trains make() eagerly and through to_static from the same seed, steps
    steps on xs; asserts the losses and parameters are bitwise equal; returns
    the to_static model."""
    runs = []
    for mode in ("eager", "to_static"):
        pe.seed(seed)
        net = make()
        if mode == "to_static":
            net = pe.jit.to_static(net, build_strategy=build_strategy)
        o = opt(net.parameters())
        losses = []
        for _ in range(steps):
            warn = expect_warning if mode == "to_static" and not losses else None
            with pytest.warns(RuntimeWarning, match=warn) if warn else contextlib.nullcontext():
                loss = loss_of(net(pe.to_tensor(xs)))
                loss.backward()
            o.step()
            o.clear_grad()
            losses.append(loss.numpy())
        runs.append(losses + [p.numpy() for p in net.parameters()])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    return net


@pytest.mark.parametrize("fuse", [True, False])
def test_training_programs_fused_before_the_split(fuse):
    """The traced forward + backward are fused as one program, then cut in two:
    matmul_v2 + bias add + relu and their grads become fc / fc_grad (as in a
    static program), and the training takes the eager model's steps bit for bit."""
    xs = np.random.RandomState(1).rand(16, 784).astype("float32")
    ys = pe.to_tensor(np.random.RandomState(2).randint(0, 10, [16]).astype("int64"))
    bs = pe.jit._default_build_strategy()
    bs.fuse_gemm_epilogue = fuse
    net = _same_steps(MLP, xs, lambda out: nn.CrossEntropyLoss()(out, ys), 3,
                      lambda ps: pe.optimizer.Adam(learning_rate=1e-3, parameters=ps), 3, bs)
    fwd, bwd = _train_ops(net)
    if fuse:
        assert fwd == ["fc", "fc"], fwd
        assert bwd.count("fc_grad") == 2 and "matmul_v2_grad" not in bwd, bwd
    else:
        assert "fc" not in fwd and "matmul_v2_grad" in bwd


def test_input_gradient_and_decorator():
    class Net(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        @pe.jit.to_static
        def forward(self, x):
            return pe.nn.functional.sigmoid(self.fc(x)) * 2.0

    net = Net()
    xs = np.random.RandomState(4).rand(5, 4).astype("float32")
    x = pe.to_tensor(xs, stop_gradient=False)
    out = net(x)
    g = np.random.RandomState(5).rand(5, 3).astype("float32")
    pe.sum(out * pe.to_tensor(g)).backward()
    # the eager forward of the same layer
    x2 = pe.to_tensor(xs, stop_gradient=False)
    w, b = net.fc.weight.grad.numpy(), net.fc.bias.grad.numpy()
    net.clear_gradients()
    out2 = pe.nn.functional.sigmoid(net.fc(x2)) * 2.0
    pe.sum(out2 * pe.to_tensor(g)).backward()
    np.testing.assert_allclose(out.numpy(), out2.numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w, net.fc.weight.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b, net.fc.bias.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_function_between_eager_ops_and_nested_layers():
    """A to_static function of tensors (reading a Layer's parameters) between
    eager ops: gradients reach the eager ops before it; a to_static sublayer
    inside a to_static layer is traced into the outer program."""
    pre, inner = nn.Linear(6, 4), nn.Linear(4, 3)
    f = pe.jit.to_static(lambda x: inner(x) * 3.0)
    xs = np.random.RandomState(8).rand(5, 6).astype("float32")
    grads = []
    for use_static in (True, False):
        pre.clear_gradients()
        inner.clear_gradients()
        h = pre(pe.to_tensor(xs))
        out = f(h) if use_static else inner(h) * 3.0
        pe.sum(out * out).backward()
        grads.append([p.grad.numpy() for p in pre.parameters() + inner.parameters()])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    class Outer(nn.Layer):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.inner = pe.jit.to_static(nn.Sequential(nn.Linear(3, 3)))

        def forward(self, x):
            return nn.functional.relu(self.inner(self.a(x)))

    o = pe.jit.to_static(Outer())
    x = pe.to_tensor(np.random.RandomState(9).rand(2, 3).astype("float32"))
    got = o(x).numpy()
    conc, = o.forward._concrete.values()
    assert [op.type for op in conc.forward.global_block().ops] == ["matmul_v2", "elementwise_add"] * 2 + ["relu"]
    np.testing.assert_allclose(got, o.forward.rollback()(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_save_run_and_load(kind, tmp_path):
    model = _make(kind)
    for xb, _ in _batches(kind, 2):   # move the batch-norm statistics off their initial values
        model(pe.to_tensor(xb))
    model.eval()
    xs = np.random.RandomState(6).rand(*_shape(kind, 4)).astype("float32")
    want = model(pe.to_tensor(xs)).numpy()
    spec = [InputSpec([None] + _shape(kind, 1)[1:], "float32", "x")]
    prefix = str(tmp_path / "m" / kind)
    raw = [p._t for p in model.parameters()]
    pe.jit.save(model, prefix, input_spec=spec)
    assert os.path.exists(prefix + ".pe") and os.path.exists(prefix + ".safetensors")
    # a layer that is not to_static keeps its own storage
    assert all(p._t is r for p, r in zip(model.parameters(), raw))
    loaded = pe.jit.load(prefix)
    np.testing.assert_allclose(loaded(pe.to_tensor(xs)).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loaded(xs).numpy(), want, rtol=1e-5, atol=1e-6)
    # its state: the weights under their names, batch norm's statistics under the layer's path to them
    sd = loaded.state_dict()
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(sd[p.name].numpy(), p.numpy())
    if kind == "cnn":
        np.testing.assert_array_equal(sd[model.full_name() + ".bn._mean"].numpy(), model.bn._mean.numpy())
    # the same files in the pe tool
    np.save(str(tmp_path / "x.npy"), xs)
    out = tmp_path / "out"
    r = subprocess.run([pe_bin(), "run", prefix + ".pe", "--params", prefix + ".safetensors", "--feed",
                        "x=%s" % (tmp_path / "x.npy"), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fetch = loaded._fetches[0]
    np.testing.assert_allclose(np.load(str(out / (fetch + ".npy"))), want, rtol=1e-5, atol=1e-6)
    # and in static mode's load_inference_model
    pe.enable_static()
    try:
        exe = pe.static.Executor(pe.CPUPlace())
        scope = pe.static.Scope()
        prog, feeds, fetches = pe.static.load_inference_model(prefix, exe, scope=scope)
        got, = exe.run(prog, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    finally:
        pe.disable_static()


def test_save_uses_the_traced_signature(tmp_path):
    model = pe.jit.to_static(MLP())
    xs = np.random.RandomState(7).rand(3, 784).astype("float32")
    want = model(pe.to_tensor(xs)).numpy()
    pe.jit.save(model, str(tmp_path / "mlp"))
    np.testing.assert_allclose(pe.jit.load(str(tmp_path / "mlp"))(pe.to_tensor(xs)).numpy(), want, rtol=1e-5)
    with pytest.raises(pe.InvalidArgumentError, match="give input_spec"):
        pe.jit.save(MLP(), str(tmp_path / "other"))


def test_dropout_draws_a_new_mask_each_call():
    model = pe.jit.to_static(nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.5)))
    x = pe.to_tensor(np.ones([4, 16], "float32"))
    a, b = model(x).numpy(), model(x).numpy()
    assert (a == 0).any() and (b == 0).any()
    assert not np.array_equal(a == 0, b == 0)
    model.eval()
    want = model[0](x).numpy()
    np.testing.assert_allclose(model(x).numpy(), want, rtol=1e-6)


def test_value_dependent_control_flow_is_refused():
    class Branchy(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x)
            if pe.mean(h) > 0:
                return h
            return -h

    m = pe.jit.to_static(Branchy())
    with pytest.raises(pe.UnsupportedError, match=r"to_static\(Branchy.forward\).*reads the value of tensor"):
        m(pe.to_tensor(np.ones([2, 4], "float32")))

    class Numpyish(nn.Layer):
        def forward(self, x):
            return pe.to_tensor(x.numpy() * 2)

    with pytest.raises(pe.UnsupportedError, match=r"Numpyish.forward.*numpy\(\)"):
        pe.jit.to_static(Numpyish())(pe.to_tensor(np.ones([2, 4], "float32")))


def test_sizes_that_follow_the_batch():
    """Declared dims follow the inputs' -1 dims (found by a second trace one
    larger), so a reshape over the batch runs at any batch size; a batch size
    read in Python and baked into an attr is refused at the trace."""
    f = pe.jit.to_static(lambda x: pe.reshape(x, [-1]) * 2.0)
    assert f(pe.to_tensor(np.ones([4, 3], "float32"))).shape == [12]
    np.testing.assert_array_equal(f(pe.to_tensor(np.ones([5, 3], "float32"))).numpy(), np.full([15], 2, "float32"))
    conc, = f._concrete.values()
    b = conc.forward.global_block()
    assert [list(b.var(op.output("Out")[0]).shape) for op in b.ops] == [[-1], [-1]]

    class Baked(nn.Layer):
        def forward(self, x):
            return pe.reshape(x, [x.shape[0], -1])

    with pytest.raises(pe.UnsupportedError, match=r"Baked.forward\): op 0 \(reshape2\) attr shape is \[4, -1\] for "
                                                  r"input shapes \[4, 2, 3\] and \[5, -1\]"):
        pe.jit.to_static(Baked())(pe.to_tensor(np.ones([4, 2, 3], "float32")))
    # fixed sizes in the input_spec: nothing to follow, the same forward traces
    fixed = pe.jit.to_static(Baked(), input_spec=[InputSpec([4, 2, 3], "float32", "x")])
    assert fixed(pe.to_tensor(np.ones([4, 2, 3], "float32"))).shape == [4, 6]


def test_inputs_checked_against_input_spec():
    m = pe.jit.to_static(MLP(), input_spec=[InputSpec([None, 784], "float32", "img")])
    m(pe.to_tensor(np.zeros([2, 784], "float32")))
    with pytest.raises(pe.InvalidArgumentError, match=r"MLP.forward\): input 'img' is float64, its InputSpec says "
                                                      r"float32"):
        m(pe.to_tensor(np.zeros([2, 784], "float64")))
    with pytest.raises(pe.InvalidArgumentError, match=r"input 'img' has shape \[2, 783\], its InputSpec says "
                                                      r"\[-1, 784\]"):
        m(pe.to_tensor(np.zeros([2, 783], "float32")))
    with pytest.raises(pe.InvalidArgumentError, match=r"2 inputs given, input_spec declares 1"):
        m(pe.to_tensor(np.zeros([2, 784], "float32")), pe.to_tensor(np.zeros([2, 784], "float32")))


def test_fuse_program_binding_checks_its_arguments():
    """_core.fuse_program (to_static's fusion before the split): the input
    program untouched, the pass counts reported, bad strategies refused."""
    model = pe.jit.to_static(MLP())
    with pe.no_grad():
        model(pe.to_tensor(np.ones([2, 784], "float32")))
    (conc,) = model.forward._concrete.values()
    core = conc.forward._core_program()
    fused, stats = pe._core.fuse_program(core, build_strategy={"fuse_gemm_epilogue": True}, protect=conc.fetches)
    assert dict(stats)["fuse_gemm_epilogue"] == 2
    assert '"fc"' in fused.to_json() and '"fc"' not in core.to_json()
    with pytest.raises(TypeError, match="fuse_program: exec_strategy / build_strategy must be dicts"):
        pe._core.fuse_program(core, build_strategy=[1])
    with pytest.raises(pe.InvalidArgumentError, match="reduce_strategy"):
        pe._core.fuse_program(core, build_strategy={"reduce_strategy": "sideways"})


def test_fused_linear_on_3d_inputs_and_attention_matmuls_left_alone():
    """A Linear on [B, T, K] inputs becomes fc / fc_grad (in_num_col_dims 2);
    matmuls of two activations (attention-like) stay matmul_v2; the training
    takes the eager steps bit for bit."""
    class Net(nn.Layer):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 16)
            self.b = nn.Linear(16, 4)

        def forward(self, x):
            h = nn.functional.tanh(self.a(x))          # [B, T, 16]
            att = pe.matmul(h, h, transpose_y=True)    # [B, T, T]
            return self.b(pe.matmul(att, h))           # [B, T, 4]

    xs = np.random.RandomState(0).rand(3, 5, 8).astype("float32")
    net = _same_steps(Net, xs, lambda out: (out * out).mean(), 3,
                      lambda ps: pe.optimizer.SGD(learning_rate=0.01, parameters=ps), 1)
    fwd, bwd = _train_ops(net)
    assert fwd == ["fc", "matmul_v2", "matmul_v2", "fc"], fwd
    assert bwd.count("fc_grad") == 2 and bwd.count("matmul_v2_grad") == 2, bwd
    assert [op.attr("in_num_col_dims") for op in _train_progs(net)[0].global_block().ops if op.type == "fc"] == [2, 2]


def test_cnn_with_every_pass_fuses_before_the_split():
    """build_strategy=BuildStrategy() (conv_nhwc and fuse_conv_bias on too):
    the layout pass and the conv bias fusion run on the traced forward +
    backward as one program, so the training programs are NHWC with
    transposes only at their edges and each conv takes its bias; the
    training ends allclose to the eager run (oneDNN's NHWC kernels sum in
    another order: not bitwise)."""
    eager_m, static_m = _twins("cnn")
    static_m = pe.jit.to_static(static_m, build_strategy=pe.static.BuildStrategy())
    loss_fn = nn.CrossEntropyLoss()
    states = []
    for m in (eager_m, static_m):
        opt = pe.optimizer.SGD(learning_rate=0.05, parameters=m.parameters())
        for xb, yb in _batches("cnn", 3, seed=2):
            loss = loss_fn(m(pe.to_tensor(xb)), pe.to_tensor(yb))
            loss.backward()
            opt.step()
            opt.clear_grad()
        states.append(_state(m))
    fwd, bwd = _train_ops(static_m)
    assert fwd.count("transpose2") == 2 and bwd.count("transpose2") == 1, (fwd, bwd)
    assert "elementwise_add" not in fwd and "fc" in fwd and "fc_grad" in bwd, (fwd, bwd)
    conv = [op for op in _train_progs(static_m)[0].global_block().ops if op.type == "conv2d"]
    assert len(conv) == 1 and conv[0].input("Bias") and conv[0].attr("data_format") == "NHWC"
    for k in states[0]:
        np.testing.assert_allclose(states[1][k], states[0][k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_interleaved_fusion_falls_back_to_the_unfused_split(monkeypatch):
    """Should a pass ever put a forward op after a backward one, the traced
    program cannot be cut in two: to_static warns and runs the unfused
    forward and backward programs (the eager steps, bit for bit)."""
    real = pe._core.fuse_program

    def interleaving(program, **kw):
        fused, stats = real(program, **kw)
        p = pe.static.Program.parse_from_string(fused.to_json())
        p.global_block().ops[-1]._attrs["op_role"] = 0   # a "forward" op at the end
        return p._core_program(), stats

    monkeypatch.setattr(pe._core, "fuse_program", interleaving)
    xs = np.random.RandomState(1).rand(8, 784).astype("float32")
    net = _same_steps(MLP, xs, lambda out: (out ** 2).mean(), 2,
                      lambda ps: pe.optimizer.SGD(learning_rate=0.1, parameters=ps), 5, expect_warning="interleaved")
    fwd, bwd = _train_ops(net)
    assert fwd == ["matmul_v2", "elementwise_add", "relu", "matmul_v2", "elementwise_add"], fwd
