"""tests/python/test_eager_nn.py — pe.nn layers, pe.optimizer step() and pe.save/pe.load in eager mode.

Each layer's forward and the gradients of its parameters (and input) agree
with torch.nn holding the same weights; an MLP and a small CNN trained a
few seeded batches with SGD / Momentum / Adam / AdamW end with PyTorch's
parameters; state dicts round-trip through pe.save / pe.load; train() and
eval() switch dropout and batch norm.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_eager_nn.py
"""
import os

import numpy as np
import pytest

import pe
import pe.nn as nn
from pe.utils import unique_name

torch = pytest.importorskip("torch")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def eager():
    pe.disable_static()
    pe.seed(7)
    yield
    pe.enable_static()


def _rs(seed=0):
    return np.random.RandomState(seed)


def _t(a, grad=False):
    return torch.tensor(np.array(a), requires_grad=grad)


def _copy_params(layer, tlayer, transpose_weight=False):
    """Copies the PE layer's parameters into the torch layer (same names)."""
    with torch.no_grad():
        for name, p in layer.named_parameters():
            a = p.numpy()
            if transpose_weight and name.endswith("weight") and a.ndim == 2:
                a = a.T
            dict(tlayer.named_parameters())[name].copy_(torch.tensor(np.ascontiguousarray(a)))


def _run_both(layer, tlayer, x, transpose_weight=False, rtol=1e-5, atol=1e-5, x_grad=True):
    """Forward of both on x, backward of sum(out * g); compares out, the input
    gradient and every parameter gradient."""
    _copy_params(layer, tlayer, transpose_weight)
    xe = pe.to_tensor(x, stop_gradient=not x_grad)
    out = layer(xe)
    g = _rs(5).randn(*out.shape).astype(np.float32)
    pe.sum(out * pe.to_tensor(g)).backward()
    xt = _t(x, x_grad)
    tout = tlayer(xt)
    (tout * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=atol)
    if x_grad:
        np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)
    tparams = dict(tlayer.named_parameters())
    for name, p in layer.named_parameters():
        tg = tparams[name].grad.numpy()
        if transpose_weight and name.endswith("weight") and tg.ndim == 2:
            tg = tg.T
        np.testing.assert_allclose(p.grad.numpy(), tg, rtol=rtol, atol=atol, err_msg=name)
    return out


def test_linear():
    layer = nn.Linear(6, 4)
    assert layer.weight.shape == [6, 4] and layer.bias.shape == [4]
    assert not layer.weight.stop_gradient
    np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(4))
    _run_both(layer, torch.nn.Linear(6, 4), _rs(1).randn(3, 6).astype(np.float32), transpose_weight=True)


@pytest.mark.parametrize("kw", [dict(stride=1, padding=1), dict(stride=2, padding=0, groups=2),
                                dict(stride=1, padding=2, dilation=2)])
def test_conv2d(kw):
    layer = nn.Conv2D(4, 6, 3, **kw)
    tl = torch.nn.Conv2d(4, 6, 3, **kw)
    _run_both(layer, tl, _rs(2).randn(2, 4, 7, 7).astype(np.float32), rtol=1e-4, atol=1e-5)


def test_pools_and_activations():
    x = _rs(3).randn(2, 3, 6, 6).astype(np.float32)
    _run_both(nn.MaxPool2D(2), torch.nn.MaxPool2d(2), x)
    _run_both(nn.MaxPool2D(3, stride=2, padding=1), torch.nn.MaxPool2d(3, stride=2, padding=1), x)
    _run_both(nn.AvgPool2D(2), torch.nn.AvgPool2d(2), x)
    _run_both(nn.AvgPool2D(3, stride=1, padding=1), torch.nn.AvgPool2d(3, stride=1, padding=1,
                                                                      count_include_pad=False), x)
    v = _rs(4).randn(3, 5).astype(np.float32)
    for layer, tl in [(nn.ReLU(), torch.nn.ReLU()), (nn.Sigmoid(), torch.nn.Sigmoid()), (nn.Tanh(), torch.nn.Tanh()),
                      (nn.GELU(), torch.nn.GELU()), (nn.GELU(approximate=True), torch.nn.GELU(approximate="tanh")),
                      (nn.Softmax(), torch.nn.Softmax(-1)), (nn.Softmax(axis=0), torch.nn.Softmax(0))]:
        _run_both(layer, tl, v)
    _run_both(nn.Flatten(), torch.nn.Flatten(), x)
    out = _run_both(nn.Flatten(0, 2), torch.nn.Flatten(0, 2), x)
    assert out.shape == [36, 6]


def test_batch_norm_train_and_eval():
    layer = nn.BatchNorm2D(3)
    tl = torch.nn.BatchNorm2d(3, momentum=0.1)  # torch's momentum = 1 - Paddle's
    with torch.no_grad():
        tl.weight.copy_(torch.tensor([1.5, 0.5, 2.0]))
        tl.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    layer.set_state_dict({"weight": np.array([1.5, 0.5, 2.0], np.float32),
                          "bias": np.array([0.1, -0.2, 0.3], np.float32),
                          "_mean": np.zeros(3, np.float32), "_variance": np.ones(3, np.float32)})
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    assert list(layer.state_dict()) == ["weight", "bias", "_mean", "_variance"]
    x = (_rs(6).randn(4, 3, 5, 5) * 2 + 1).astype(np.float32)
    for step in range(2):  # training: batch statistics; the running ones move
        _run_both(layer, tl, x + step, rtol=1e-4, atol=1e-4)
        layer.clear_gradients()
        tl.zero_grad()
    # running mean: momentum 0.9 of PE = torch's 0.1
    np.testing.assert_allclose(layer._mean.numpy(), tl.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    xs = [x, x + 1]
    want_var = np.ones(3)
    for b in xs:
        want_var = 0.9 * want_var + 0.1 * b.transpose(1, 0, 2, 3).reshape(3, -1).var(1)  # Paddle: biased
    np.testing.assert_allclose(layer._variance.numpy(), want_var, rtol=1e-4)
    # eval: the running statistics normalize, and they stay put
    layer.eval()
    m, v = layer._mean.numpy(), layer._variance.numpy()
    out = layer(pe.to_tensor(x)).numpy()
    want = (x - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5) * \
        np.array([1.5, 0.5, 2.0])[None, :, None, None] + np.array([0.1, -0.2, 0.3])[None, :, None, None]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(layer._mean.numpy(), m)
    assert not layer.training
    layer.train()
    layer(pe.to_tensor(x))
    assert not np.array_equal(layer._mean.numpy(), m)


def test_layer_norm():
    layer = nn.LayerNorm([4, 5])
    tl = torch.nn.LayerNorm([4, 5])
    with torch.no_grad():
        tl.weight.uniform_(0.5, 1.5)
        tl.bias.uniform_(-0.5, 0.5)
    layer.set_state_dict({"weight": tl.weight.detach().numpy().reshape(-1),
                          "bias": tl.bias.detach().numpy().reshape(-1)})
    x = _rs(7).randn(3, 4, 5).astype(np.float32)
    xe = pe.to_tensor(x, stop_gradient=False)
    out = layer(xe)
    g = _rs(8).randn(3, 4, 5).astype(np.float32)
    pe.sum(out * pe.to_tensor(g)).backward()
    xt = _t(x, True)
    tout = tl(xt)
    (tout * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.weight.grad.numpy(), tl.weight.grad.numpy().reshape(-1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.numpy(), tl.bias.grad.numpy().reshape(-1), rtol=1e-4, atol=1e-5)


def test_embedding():
    layer = nn.Embedding(10, 4, padding_idx=0)
    tl = torch.nn.Embedding(10, 4, padding_idx=0)
    ids = np.array([[1, 0, 3], [9, 3, 0]], np.int64)
    _copy_params(layer, tl)
    out = layer(pe.to_tensor(ids))
    g = _rs(9).randn(2, 3, 4).astype(np.float32)
    pe.sum(out * pe.to_tensor(g)).backward()
    tout = tl(torch.tensor(ids))
    (tout * torch.tensor(g)).sum().backward()
    want = layer.weight.numpy()[ids]
    want[ids == 0] = 0
    np.testing.assert_allclose(out.numpy(), want)
    np.testing.assert_allclose(layer.weight.grad.numpy(), tl.weight.grad.numpy(), rtol=1e-6)
    assert np.all(layer.weight.grad.numpy()[0] == 0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(reduction):
    rs = _rs(10)
    x, y = rs.randn(6, 5).astype(np.float32), rs.randn(6, 5).astype(np.float32)
    for layer, tl in [(nn.MSELoss(reduction), torch.nn.MSELoss(reduction=reduction)),
                      (nn.L1Loss(reduction), torch.nn.L1Loss(reduction=reduction))]:
        xe = pe.to_tensor(x, stop_gradient=False)
        loss = layer(xe, pe.to_tensor(y))
        pe.sum(loss).backward()
        xt = _t(x, True)
        tloss = tl(xt, torch.tensor(y))
        tloss.sum().backward()
        np.testing.assert_allclose(loss.numpy().reshape(-1), tloss.detach().numpy().reshape(-1), rtol=1e-5)
        np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-7)
    lab = rs.randint(0, 5, size=6).astype(np.int64)
    for lab_pe in (lab, lab.reshape(6, 1)):  # Paddle 2.x takes [N] and [N, 1] hard labels
        xe = pe.to_tensor(x, stop_gradient=False)
        loss = nn.CrossEntropyLoss(reduction=reduction)(xe, pe.to_tensor(lab_pe))
        pe.sum(loss).backward()
        xt = _t(x, True)
        tloss = torch.nn.CrossEntropyLoss(reduction=reduction)(xt, torch.tensor(lab))
        tloss.sum().backward()
        np.testing.assert_allclose(loss.numpy().reshape(-1), tloss.detach().numpy().reshape(-1), rtol=1e-5)
        np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-7)


def test_dropout_train_eval():
    layer = nn.Dropout(0.25)
    x = pe.ones([200, 50])
    out = layer(x).numpy()
    kept = out != 0
    assert 0.7 < kept.mean() < 0.8
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)  # upscale_in_train
    assert not np.array_equal(layer(x).numpy(), out)  # a fresh mask per call
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), np.ones([200, 50]))
    seq = nn.Sequential(nn.Linear(50, 50), nn.Dropout(0.5))
    seq.eval()
    assert not seq[1].training
    a, b = seq(x).numpy(), seq(x).numpy()
    np.testing.assert_array_equal(a, b)
    seq.train()
    assert seq[1].training and seq.training
    # the gradient flows through the kept elements only, scaled
    xg = pe.ones([20, 10])
    xg.stop_gradient = False
    d = nn.Dropout(0.5)(xg)
    pe.sum(d).backward()
    np.testing.assert_allclose(xg.grad.numpy(), (d.numpy() != 0) * 2.0)


def test_layer_api():
    class Net(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(3, 4)
            self.blocks = nn.LayerList([nn.Linear(4, 4) for _ in range(2)])
            self.scale = self.create_parameter([1], default_initializer=nn.initializer.Constant(2.0))
            self.add_sublayer("act", nn.Tanh())
            self.add_parameter("extra", self.create_parameter([2, 2]))
            self.note = "not registered"

        def forward(self, x):
            h = self.fc1(x)
            for b in self.blocks:
                h = self.act(b(h))
            return h * self.scale

    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "extra", "fc1.weight", "fc1.bias", "blocks.0.weight", "blocks.0.bias",
                     "blocks.1.weight", "blocks.1.bias"]
    assert len(net.parameters()) == 8 and len(net.parameters(include_sublayers=False)) == 2
    assert [n for n, _ in net.named_sublayers()] == ["fc1", "blocks", "blocks.0", "blocks.1", "act"]
    assert len(net.sublayers()) == 5 and net.sublayers(include_self=True)[0] is net
    assert net.note == "not registered" and "note" not in net.state_dict()
    np.testing.assert_array_equal(net.scale.numpy(), [2.0])
    out = net(pe.randn([5, 3]))
    pe.mean(out).backward()
    assert all(p.grad is not None for n, p in net.named_parameters() if n != "extra")
    assert net.extra.grad is None
    # reassigning replaces the registration
    net.fc1 = nn.Linear(3, 4)
    assert len(net.parameters()) == 8
    # ParamAttr: the initializer and name, trainable=False
    lin = nn.Linear(2, 3, weight_attr=pe.ParamAttr(name="w_fixed", initializer=nn.initializer.Constant(0.5)),
                    bias_attr=False)
    assert lin.bias is None and lin.weight.name == "w_fixed"
    np.testing.assert_array_equal(lin.weight.numpy(), np.full([2, 3], 0.5))
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    assert nn.Linear(2, 3, weight_attr="my_w").weight.name == "my_w"
    with pytest.raises(TypeError, match="weight_attr / bias_attr must be"):
        nn.Linear(2, 3, weight_attr=3)
    frozen = nn.Linear(2, 3, weight_attr=pe.ParamAttr(trainable=False))
    assert frozen.weight.stop_gradient and len(frozen.parameters()) == 2 and "weight" in frozen.state_dict()
    o = pe.optimizer.SGD(learning_rate=1.0, parameters=frozen.parameters())
    w0 = frozen.weight.numpy()
    pe.mean(frozen(pe.ones([1, 2]))).backward()
    o.step()
    np.testing.assert_array_equal(frozen.weight.numpy(), w0)  # not trained
    assert frozen.weight.grad is None and frozen.bias.grad is not None
    # an intermediate assigned in forward is no parameter
    h = lin.weight * 2.0
    net.h = h
    assert len(net.parameters()) == 8 and net.h is h
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        net.nope


def test_initializers_match_static_rng():
    """The eager initializers run the op the static startup program gets: the same seed, the same bits."""
    init = nn.initializer.XavierUniform(seed=123)
    lin = nn.Linear(16, 8, weight_attr=pe.ParamAttr(initializer=init))
    conv = nn.Conv2D(3, 4, 3, weight_attr=pe.ParamAttr(initializer=nn.initializer.Normal(0.0, 0.1, seed=9)))
    pe.enable_static()
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        w = startup.global_block().create_parameter("w", [16, 8], "float32")
        init(w, startup)
        c = startup.global_block().create_parameter("c", [4, 3, 3, 3], "float32")
        nn.initializer.Normal(0.0, 0.1, seed=9)(c, startup)
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    np.testing.assert_array_equal(lin.weight.numpy(), np.array(scope.find_var("w").get_tensor()))
    np.testing.assert_array_equal(conv.weight.numpy(), np.array(scope.find_var("c").get_tensor()))
    pe.disable_static()
    # the defaults: Linear XavierUniform (limit sqrt(6 / (in + out))), Conv2D Normal(0, sqrt(2 / fan_in))
    big = nn.Linear(200, 300)
    lim = np.sqrt(6.0 / 500)
    assert big.weight.numpy().min() >= -lim and big.weight.numpy().max() <= lim
    assert abs(big.weight.numpy().std() - lim / np.sqrt(3)) < 0.05 * lim
    cv = nn.Conv2D(16, 64, 3)
    assert abs(cv.weight.numpy().std() - np.sqrt(2.0 / (16 * 9))) < 0.05 * np.sqrt(2.0 / (16 * 9))
    # pe.seed makes initialization reproducible
    pe.seed(11)
    a = nn.Linear(5, 5).weight.numpy()
    pe.seed(11)
    np.testing.assert_array_equal(nn.Linear(5, 5).weight.numpy(), a)


# ---- training vs PyTorch -------------------------------------------------------------

def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def _torch_mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3))


def _cnn():
    # no bias before batch norm: its gradient is 0 up to rounding, which Adam would amplify
    return nn.Sequential(nn.Conv2D(2, 4, 3, padding=1, bias_attr=False), nn.BatchNorm2D(4), nn.ReLU(), nn.MaxPool2D(2),
                         nn.Conv2D(4, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 2 * 2, 3))


def _torch_cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 4, 3), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 2 * 2, 3))


OPTS = {
    "SGD": (lambda ps: pe.optimizer.SGD(learning_rate=0.1, parameters=ps),
            lambda ps: torch.optim.SGD(ps, lr=0.1)),
    "Momentum": (lambda ps: pe.optimizer.Momentum(learning_rate=0.05, momentum=0.9, parameters=ps),
                 lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9)),
    "Adam": (lambda ps: pe.optimizer.Adam(learning_rate=0.01, parameters=ps),
             lambda ps: torch.optim.Adam(ps, lr=0.01, eps=1e-8)),
    "AdamW": (lambda ps: pe.optimizer.AdamW(learning_rate=0.01, weight_decay=0.05, parameters=ps),
              lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05, eps=1e-8)),
    "Nesterov": (lambda ps: pe.optimizer.Momentum(learning_rate=0.05, momentum=0.9, use_nesterov=True, parameters=ps),
                 lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True)),
    "SGD_l2": (lambda ps: pe.optimizer.SGD(learning_rate=0.1, parameters=ps, weight_decay=0.01),
               lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=0.01)),
}


def _copy_model(model, tmodel):
    """PE model -> torch model, by position (Linear weights transposed)."""
    with torch.no_grad():
        for p, (tn, tp) in zip(model.parameters(), tmodel.named_parameters()):
            a = p.numpy()
            if a.ndim == 2:
                a = a.T
            tp.copy_(torch.tensor(np.ascontiguousarray(a)))


@pytest.mark.parametrize("opt", sorted(OPTS))
@pytest.mark.parametrize("arch", ["mlp", "cnn"])
def test_training_matches_torch(opt, arch):
    rs = _rs(21)
    if arch == "mlp":
        model, tmodel = _mlp(), _torch_mlp()
        xs = [rs.randn(16, 8).astype(np.float32) for _ in range(4)]
    else:
        model, tmodel = _cnn(), _torch_cnn()
        xs = [rs.randn(6, 2, 8, 8).astype(np.float32) for _ in range(4)]
    ys = [rs.randint(0, 3, size=len(x)).astype(np.int64) for x in xs]
    _copy_model(model, tmodel)
    tmodel.train()
    mk, tmk = OPTS[opt]
    o, to = mk(model.parameters()), tmk(tmodel.parameters())
    loss_fn, tloss_fn = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    losses = []
    for x, y in zip(xs, ys):
        loss = loss_fn(model(pe.to_tensor(x)), pe.to_tensor(y))
        loss.backward()
        o.step()
        o.clear_grad()
        tloss = tloss_fn(tmodel(torch.tensor(x)), torch.tensor(y))
        to.zero_grad()
        tloss.backward()
        to.step()
        np.testing.assert_allclose(float(loss), float(tloss), rtol=1e-5)
        losses.append(float(loss))
    assert all(p.grad is None for p in model.parameters())  # clear_grad
    for p, (tn, tp) in zip(model.parameters(), tmodel.named_parameters()):
        a = tp.detach().numpy()
        np.testing.assert_allclose(p.numpy(), a.T if a.ndim == 2 else a, rtol=1e-5, atol=1e-6,
                                   err_msg="%s %s after %d steps" % (opt, tn, len(xs)))
    if arch == "cnn":
        bn = model[1]
        np.testing.assert_allclose(bn._mean.numpy(), tmodel[1].running_mean.numpy(), rtol=1e-5, atol=1e-6)


def test_optimizer_modes_and_errors():
    lin = nn.Linear(2, 2)
    with pytest.raises(pe.InvalidArgumentError, match="eager mode needs parameters="):
        pe.optimizer.SGD(learning_rate=0.1)
    with pytest.raises(pe.UnsupportedError, match="Adagrad has no eager step"):
        pe.optimizer.Adagrad(learning_rate=0.1, parameters=lin.parameters())
    with pytest.raises(TypeError, match=r"parameters\[0\] must be a pe.eager.Tensor"):
        pe.optimizer.SGD(learning_rate=0.1, parameters=[np.ones(2)])
    # no grad yet: step() changes nothing
    o = pe.optimizer.Momentum(learning_rate=0.1, parameters=lin.parameters())
    w0 = lin.weight.numpy()
    o.step()
    np.testing.assert_array_equal(lin.weight.numpy(), w0)
    # minimize(loss) in eager mode = step() with the grads backward() left
    loss = pe.mean(lin(pe.ones([3, 2])))
    loss.backward()
    g = lin.weight.grad.numpy()
    o.minimize(loss)
    np.testing.assert_allclose(lin.weight.numpy(), w0 - 0.1 * g, rtol=1e-6)
    # grad clipping by global norm, then the op
    lin2 = nn.Linear(2, 2)
    w0 = lin2.weight.numpy()
    o2 = pe.optimizer.SGD(learning_rate=1.0, parameters=lin2.parameters(),
                          grad_clip=nn.ClipGradByGlobalNorm(0.01))
    pe.mean(lin2(pe.ones([3, 2]) * 100.0)).backward()
    gs = [p.grad.numpy() for p in lin2.parameters()]
    norm = np.sqrt(sum((g_ ** 2).sum() for g_ in gs))
    o2.step()
    np.testing.assert_allclose(lin2.weight.numpy(), w0 - gs[0] * 0.01 / norm, rtol=1e-5, atol=1e-7)
    # static mode keeps the static optimizers' behaviour
    pe.enable_static()
    with pytest.raises(pe.UnsupportedError, match="Optimizer.step is eager-only"):
        pe.optimizer.SGD(learning_rate=0.1).step()
    with pytest.raises(pe.UnsupportedError, match="pe.nn.Linear is an eager-mode layer"):
        nn.Linear(2, 2)


@pytest.mark.parametrize("opt", ["SGD", "Momentum", "Adam"])
def test_step_updates_in_place(opt):
    """step() writes each parameter and accumulator in place (the static
    ops' ParamOut = Param): the same Parameter objects and storage, numpy
    views of it follow, copies taken before do not; the values are those of
    the update into new tensors (the op run out of place, bit for bit)."""
    lin = nn.Linear(3, 2)
    o = OPTS[opt][0](lin.parameters())
    w = lin.weight
    raw = w._t
    view = w._t.numpy(copy=False)   # a view of the parameter's storage
    before = w.numpy()              # a copy
    x = pe.to_tensor(_rs(70).randn(4, 3).astype(np.float32))
    accs = None
    for k in range(2):
        pe.mean(lin(x)).backward()
        g = w.grad.numpy()
        ins = {"Param": w.detach(), "Grad": w.grad, "LearningRate": o._lr_tensor()}
        st = pe.eager.optimizer._state(o, w)
        ins.update({s: t.detach() for s, t in st.items()})
        outs = {"ParamOut": 1}
        outs.update({s + "Out": 1 for s in st})
        want = pe.eager.autograd.run_op(o._kind, ins, outs, pe.eager.optimizer._attrs(o, w))["ParamOut"][0].numpy()
        o.step()
        o.clear_grad()
        assert lin.weight is w and lin.parameters()[0] is w and w._t is raw
        np.testing.assert_array_equal(w.numpy(), want)
        np.testing.assert_array_equal(view, want)
        now = {n: (t, t._t) for n, t in o.state_dict().items()}
        if accs is None:
            accs = now
        else:   # the accumulators too keep their objects and storage
            assert sorted(now) == sorted(accs)
            assert all(now[n][0] is a and now[n][1] is r for n, (a, r) in accs.items())
        assert np.abs(g).sum() > 0
    assert not np.array_equal(before, w.numpy())
    assert w._version == 2


@pytest.mark.parametrize("opt", ["SGD", "Momentum", "Adam", "AdamW"])
def test_step_groups_match_single_ops(opt):
    """step() runs one merged_<kind> op per (dtype, attrs) group: float32 and
    float64 parameters in one optimizer, AdamW's decayed and undecayed ones,
    give each single op's values bit for bit; a parameter listed twice is
    updated twice, in order, as the single ops did."""
    rs = _rs(71)
    lin = nn.Linear(3, 2)
    p64 = pe.to_tensor(rs.randn(2, 3), stop_gradient=False)   # float64
    params = lin.parameters() + [p64]
    kw = {"apply_decay_param_fun": lambda n: n.endswith(".w_0")} if opt == "AdamW" else {}
    o = OPTS[opt][0](params) if not kw else pe.optimizer.AdamW(learning_rate=0.01, weight_decay=0.05,
                                                                  parameters=params, **kw)
    x = pe.to_tensor(rs.randn(4, 3).astype(np.float32))
    for _ in range(2):
        pe.mean(lin(x)).backward()
        pe.mean(p64 * p64).backward()
        want = []
        for p in params:
            st = {s: t.detach() for s, t in pe.eager.optimizer._state(o, p).items()}
            ins = {"Param": p.detach(), "Grad": p.grad, "LearningRate": o._lr_tensor()}
            ins.update(st)
            outs = {"ParamOut": 1}
            outs.update({s + "Out": 1 for s in st})
            got = pe.eager.autograd.run_op(o._kind, ins, outs, pe.eager.optimizer._attrs(o, p))
            want.append({k: v[0].numpy() for k, v in got.items()})
        o.step()
        for p, w in zip(params, want):
            np.testing.assert_array_equal(p.numpy(), w["ParamOut"], err_msg="%s %s" % (opt, p.name))
            for s, t in pe.eager.optimizer._state(o, p).items():
                np.testing.assert_array_equal(t.numpy(), w[s + "Out"], err_msg="%s %s %s" % (opt, p.name, s))
        o.clear_grad()
    assert p64.dtype == "float64" and lin.weight.dtype == "float32"
    # listed twice: two updates of the same gradient, as two single ops in a row
    w = nn.Linear(2, 2).weight
    o2 = pe.optimizer.SGD(learning_rate=0.1, parameters=[w, w])
    w0 = w.numpy()
    pe.mean(pe.matmul(pe.ones([3, 2]), w)).backward()
    g = w.grad.numpy()
    o2.step()
    np.testing.assert_array_equal(w.numpy(), (w0 - np.float32(0.1) * g) - np.float32(0.1) * g)


def test_backward_refuses_values_changed_by_step():
    """A tensor the tape saved that a step() changed since: backward() raises
    naming the tensor and the op, before it accumulates anything."""
    lin = nn.Linear(3, 2)
    o = pe.optimizer.SGD(learning_rate=0.1, parameters=lin.parameters())
    x = pe.to_tensor(_rs(71).randn(4, 3).astype(np.float32))
    loss = pe.mean(lin(x))
    loss.backward(retain_graph=True)
    o.step()
    g = lin.weight.grad.numpy()
    with pytest.raises(pe.InvalidArgumentError,
                       match=r"backward\(\): tensor '%s' \[3, 2\], saved by op \w+ for the backward pass, was "
                             r"modified by an in-place operation \(an optimizer step\) since it was saved \(version "
                             r"1, saved at version 0\).*call backward\(\) before step\(\)" % lin.weight.name):
        loss.backward()
    np.testing.assert_array_equal(lin.weight.grad.numpy(), g)   # nothing accumulated
    # forward, step (with the last pass's gradients), backward: refused too
    o.clear_grad()
    pe.mean(lin(x)).backward()
    loss = pe.mean(lin(x))
    o.step()
    with pytest.raises(pe.InvalidArgumentError, match="modified by an in-place operation"):
        loss.backward()
    # a forward after the step records the new versions
    o.clear_grad()
    loss = pe.mean(lin(x))
    loss.backward(retain_graph=True)
    loss.backward()
    o.step()


# ---- state dicts ------------------------------------------------------------------------

def test_state_dict_save_load_round_trip(tmp_path):
    model = _cnn()
    model(pe.to_tensor(_rs(30).randn(4, 2, 8, 8).astype(np.float32)))  # moves the batch-norm statistics
    sd = model.state_dict()
    assert "1._mean" in sd and "1._variance" in sd and "0.weight" in sd
    path = str(tmp_path / "cnn.pdparams")
    pe.save(sd, path)
    loaded = pe.load(path)
    assert sorted(loaded) == sorted(sd)
    assert all(isinstance(v, pe.eager.Tensor) for v in loaded.values())
    other = _cnn()
    assert not np.array_equal(other[0].weight.numpy(), model[0].weight.numpy())
    missing, unexpected = other.set_state_dict(loaded)
    assert missing == [] and unexpected == []
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[k].numpy(), v.numpy(), err_msg=k)
    model.eval()
    other.eval()
    x = pe.to_tensor(_rs(31).randn(2, 2, 8, 8).astype(np.float32))
    np.testing.assert_array_equal(other(x).numpy(), model(x).numpy())
    # the file is plain safetensors: torch-readable names and values
    pe.enable_static()
    arrays = pe.load(path)
    assert isinstance(arrays["0.weight"], np.ndarray)
    np.testing.assert_array_equal(arrays["0.weight"], sd["0.weight"].numpy())
    pe.disable_static()
    # errors name the entry; nothing is set then
    bad = dict(loaded)
    bad["0.weight"] = np.zeros([1, 2], np.float32)
    del bad["7.bias"]
    w = other[0].weight.numpy()
    with pytest.raises(pe.InvalidArgumentError, match=r"0.weight is float32 \[1, 2\].*7.bias is missing|"
                                                      r"7.bias is missing.*0.weight is float32 \[1, 2\]"):
        other.set_state_dict(bad)
    np.testing.assert_array_equal(other[0].weight.numpy(), w)
    with pytest.raises(pe.NotFoundError, match="no file"):
        pe.load(str(tmp_path / "absent.pdparams"))
    with pytest.raises(pe.UnsupportedError, match=r"'a/b' is a object; a saved dict holds tensors"):
        pe.save({"a": {"b": object()}}, str(tmp_path / "x"))


def test_save_load_plain_values_and_nested_tensors(tmp_path):
    """Numbers, str, bool, None, lists and dicts (tensors inside too) go
    through pe.save / pe.load beside the tensors, as JSON in the header's
    metadata; the top-level tensors stay plain safetensors entries."""
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    inner = np.array([1, 2], np.int64)
    obj = {"w": pe.to_tensor(w), "epoch": 7, "rate": 0.25, "best": float("inf"), "name": 'a "b"\n\u00e9',
           "done": False, "none": None, "sched": {"last_epoch": 3, "last_lr": 0.05},
           "nested": {"m": {"t": pe.to_tensor(inner)}, "l": [1, (2, 3.5), None, inner]}}
    path = str(tmp_path / "state.pd")
    pe.save(obj, path)
    got = pe.load(path)
    assert list(got) == ["w", "epoch", "rate", "best", "name", "done", "none", "sched", "nested"]
    np.testing.assert_array_equal(got["w"].numpy(), w)
    assert got["epoch"] == 7 and type(got["epoch"]) is int
    assert got["rate"] == 0.25 and got["best"] == float("inf") and got["name"] == 'a "b"\n\u00e9'
    assert got["done"] is False and got["none"] is None and got["sched"] == {"last_epoch": 3, "last_lr": 0.05}
    assert isinstance(got["nested"]["m"]["t"], pe.eager.Tensor)
    np.testing.assert_array_equal(got["nested"]["m"]["t"].numpy(), inner)
    lst = got["nested"]["l"]
    assert lst[:3] == [1, [2, 3.5], None]  # a tuple comes back as a list (JSON)
    np.testing.assert_array_equal(lst[3].numpy(), inner)
    # the nested tensors are entries of their own, named by their path
    pe.enable_static()
    try:
        arrays = pe.load(path)
        assert isinstance(arrays["nested"]["m"]["t"], np.ndarray)
    finally:
        pe.disable_static()
    sc = pe._core.Scope()
    assert pe._core.safetensors_read(path, sc, "absent") is None
    assert sorted(sc.local_var_names()) == ["nested/l/3", "nested/m/t", "w"]
    # errors: nothing written
    bad = str(tmp_path / "bad.pd")
    with pytest.raises(TypeError, match=r"dict keys must be str, got 1 in 'a'"):
        pe.save({"a": {1: 2}}, bad)
    with pytest.raises(pe.InvalidArgumentError, match=r"key '__pe_tensor__' in 'a' is PE's marker"):
        pe.save({"a": {"__pe_tensor__": "x"}}, bad)
    with pytest.raises(pe.InvalidArgumentError, match=r"'a/b' is both a key and the path of a nested tensor"):
        pe.save({"a": {"b": inner}, "a/b": inner}, bad)
    loop = {}
    loop["self"] = loop
    with pytest.raises(pe.InvalidArgumentError, match=r"'loop' nests too deeply or contains itself"):
        pe.save({"loop": loop}, bad)
    assert not os.path.exists(bad)


def _st_file(path, header, data=b""):
    import json
    import struct
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


@pytest.mark.parametrize("objects,match", [
    ("{not json", r"metadata 'pe.objects' is not valid JSON"),
    ("[1, 2]", r"metadata 'pe.objects' is not a JSON object"),
    ('{"a": {"__pe_tensor__": "gone"}}', r"metadata 'pe.objects' names tensor 'gone', which the file does not hold"),
    ('{"a": {"__pe_tensor__": 3}}', r"a nested tensor's marker must be"),
    ('{"a": {"__pe_tensor__": "t", "x": 1}}', r"a nested tensor's marker must be"),
    ('{"t": 1}', r"'t' is both a tensor and a value of metadata 'pe.objects'"),
    ("[" * 100000 + "]" * 100000, r"metadata 'pe.objects' (is not valid JSON|is not a JSON object|nests too deeply)"),
    ('{"a": ' + "[" * 100000 + "]" * 100000 + "}", r"metadata 'pe.objects' (is not valid JSON|nests too deeply)"),
])
def test_load_hostile_objects(tmp_path, objects, match):
    """A file whose "pe.objects" metadata is not what pe.save writes: a
    FormatError naming the file and what is wrong, never a crash."""
    path = str(tmp_path / "hostile.pd")
    _st_file(path, {"__metadata__": {"pe.objects": objects},
                    "t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0\0\0\0")
    with pytest.raises(pe.FormatError, match=match) as e:
        pe.load(path)
    assert path in str(e.value)


def test_resume_training_with_a_scheduler(tmp_path):
    """Paddle's checkpoint: the optimizer's state_dict carries the
    scheduler's under "LR_Scheduler"; saved and loaded with the model's, the
    resumed run takes the same rates and steps, bit for bit."""
    rs = _rs(51)
    data = [(rs.randn(8, 8).astype(np.float32), rs.randint(0, 3, size=8).astype(np.int64)) for _ in range(6)]

    def train(model, opt, sched, batches, rates):
        for x, y in batches:
            nn.CrossEntropyLoss()(model(pe.to_tensor(x)), pe.to_tensor(y)).backward()
            rates.append(opt.get_lr())
            opt.step()
            opt.clear_grad()
            sched.step()

    def make(model):
        sched = pe.optimizer.lr.MultiStepDecay(0.1, milestones=[2, 4], gamma=0.5)
        return sched, pe.optimizer.Momentum(learning_rate=sched, momentum=0.9, parameters=model.parameters())
    a = _mlp()
    sa, oa = make(a)
    ra = []
    train(a, oa, sa, data[:3], ra)
    osd = oa.state_dict()
    assert osd["LR_Scheduler"] == {"last_epoch": 3, "last_lr": 0.05}
    pe.save(a.state_dict(), str(tmp_path / "m.pdparams"))
    pe.save(osd, str(tmp_path / "m.pdopt"))
    b = _mlp()
    for pa, pb in zip(a.parameters(), b.parameters()):
        pb.name = pa.name
    sb, ob = make(b)
    b.set_state_dict(pe.load(str(tmp_path / "m.pdparams")))
    ob.set_state_dict(pe.load(str(tmp_path / "m.pdopt")))
    assert sb.last_epoch == 3 and ob.get_lr() == 0.05
    rb = []
    train(a, oa, sa, data[3:], ra)
    train(b, ob, sb, data[3:], rb)
    assert ra == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025] and rb == ra[3:]
    for pa, pb in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(pb.numpy(), pa.numpy())


def test_adamw_apply_decay_param_fun():
    """Decay only the weights (Paddle's apply_decay_param_fun) = torch param groups."""
    model, tmodel = _mlp(), _torch_mlp()
    _copy_model(model, tmodel)
    o = pe.optimizer.AdamW(learning_rate=0.01, weight_decay=0.1, parameters=model.parameters(),
                           apply_decay_param_fun=lambda n: n.endswith(".w_0"))
    tps = list(tmodel.named_parameters())
    to = torch.optim.AdamW([{"params": [p for n, p in tps if n.endswith("weight")], "weight_decay": 0.1},
                            {"params": [p for n, p in tps if n.endswith("bias")], "weight_decay": 0.0}], lr=0.01)
    rs = _rs(40)
    for _ in range(3):
        x, y = rs.randn(8, 8).astype(np.float32), rs.randint(0, 3, size=8).astype(np.int64)
        nn.CrossEntropyLoss()(model(pe.to_tensor(x)), pe.to_tensor(y)).backward()
        o.step()
        o.clear_grad()
        to.zero_grad()
        torch.nn.CrossEntropyLoss()(tmodel(torch.tensor(x)), torch.tensor(y)).backward()
        to.step()
    for p, (tn, tp) in zip(model.parameters(), tps):
        a = tp.detach().numpy()
        np.testing.assert_allclose(p.numpy(), a.T if a.ndim == 2 else a, rtol=1e-5, atol=1e-6, err_msg=tn)


def test_resume_training_from_saved_states(tmp_path):
    """Model and optimizer state dicts through pe.save / pe.load: the resumed run
    takes the same steps, bit for bit."""
    rs = _rs(50)
    data = [(rs.randn(8, 8).astype(np.float32), rs.randint(0, 3, size=8).astype(np.int64)) for _ in range(4)]

    def train(model, opt, batches):
        for x, y in batches:
            nn.CrossEntropyLoss()(model(pe.to_tensor(x)), pe.to_tensor(y)).backward()
            opt.step()
            opt.clear_grad()

    a = _mlp()
    oa = pe.optimizer.Adam(learning_rate=0.01, parameters=a.parameters())
    train(a, oa, data[:2])
    osd = oa.state_dict()
    assert len(osd) == 4 * len(a.parameters())
    w0 = a[0].weight.name
    assert {w0 + "_moment1_0", w0 + "_moment2_0", w0 + "_beta1_pow_acc_0", w0 + "_beta2_pow_acc_0"} <= set(osd)
    np.testing.assert_allclose(osd[w0 + "_beta1_pow_acc_0"].numpy(), [0.9 ** 3], rtol=1e-6)  # beta1, two steps
    pe.save(a.state_dict(), str(tmp_path / "m.pdparams"))
    pe.save(osd, str(tmp_path / "m.pdopt"))
    b = _mlp()
    ob = pe.optimizer.Adam(learning_rate=0.01, parameters=b.parameters())
    # the accumulators are keyed by parameter name: rename b's parameters as a's
    for pa, pb in zip(a.parameters(), b.parameters()):
        pb.name = pa.name
    b.set_state_dict(pe.load(str(tmp_path / "m.pdparams")))
    ob.set_state_dict(pe.load(str(tmp_path / "m.pdopt")))
    train(a, oa, data[2:])
    train(b, ob, data[2:])
    for pa, pb in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(pb.numpy(), pa.numpy())
    with pytest.raises(pe.InvalidArgumentError, match="no_such is no accumulator of this Adam's parameters"):
        ob.set_state_dict({"no_such": np.zeros(1, np.float32)})
    with pytest.raises(pe.InvalidArgumentError, match=r"Adam.set_state_dict: the state holds an LR_Scheduler but "
                                                      r"this optimizer's learning rate is a number"):
        ob.set_state_dict({"LR_Scheduler": {"last_epoch": 1, "last_lr": 0.1}})
    with pytest.raises(pe.InvalidArgumentError, match=r"_moment1_0 is float32 \[2\], the accumulator is float32"):
        ob.set_state_dict({w0 + "_moment1_0": np.zeros(2, np.float32)})


def test_static_l1_loss_and_functional_dispatch():
    """pe.nn.functional.l1_loss builds ops in static mode; the layer functions stay static builders there."""
    x = _rs(60).randn(4, 3).astype(np.float32)
    y = _rs(61).randn(4, 3).astype(np.float32)
    e = pe.nn.functional.l1_loss(pe.to_tensor(x), pe.to_tensor(y), reduction="sum")
    pe.enable_static()
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        xv = pe.static.data("x", [4, 3], "float32")
        yv = pe.static.data("y", [4, 3], "float32")
        loss = pe.nn.functional.l1_loss(xv, yv)
    other = pe.static.Program()
    with pe.static.program_guard(other, pe.static.Program()), unique_name.guard():
        w = other.global_block().create_parameter("w", [3, 2], "float32")
        lin = pe.nn.functional.linear(pe.static.data("x", [4, 3], "float32"), w)
        assert not isinstance(lin, pe.eager.Tensor) and list(lin.shape) == [4, 2]
        assert [op.type for op in other.global_block().ops] == ["matmul_v2"]
    exe = pe.static.Executor()
    scope = pe.static.Scope()
    exe.run(startup, scope=scope)
    got, = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(np.asarray(got).reshape(-1), [np.abs(x - y).mean()], rtol=1e-6)
    np.testing.assert_allclose(float(e), np.abs(x - y).sum(), rtol=1e-5)


@pytest.mark.parametrize("opt", ["SGD", "Momentum", "Adam", "AdamW"])
def test_optimizer_refuses_non_finite_learning_rate_and_bad_grads(opt):
    """A NaN or infinite learning rate is refused when the optimizer is made
    (and by set_lr), as minimize refuses it, not left to turn the weights
    into NaN; a .grad that is not a tensor of the parameter's shape and dtype is refused when set."""
    lin = nn.Linear(2, 2)
    cls = getattr(pe.optimizer, opt)
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(pe.InvalidArgumentError, match=r"%s: learning_rate = (nan|-?inf); it must be finite" % opt):
            cls(learning_rate=bad, parameters=lin.parameters())
    o = cls(learning_rate=0.1, parameters=lin.parameters())
    with pytest.raises(pe.InvalidArgumentError, match="learning_rate = nan; it must be finite"):
        o.set_lr(float("nan"))
    assert o.get_lr() == 0.1
    w0 = lin.weight.numpy()
    with pytest.raises(TypeError, match=r"Tensor.grad must be a Tensor or None, not numpy.ndarray"):
        lin.weight.grad = np.ones((2, 2), np.float32)
    for bad, what in ((pe.to_tensor(np.ones((2, 3), np.float32)), r"\[2, 3\] float32 on cpu:0"),
                      (pe.to_tensor(np.ones((2, 2), np.float64)), r"\[2, 2\] float64 on cpu:0")):
        with pytest.raises(ValueError, match=r"Tensor.grad of '%s': the gradient assigned is %s, the tensor "
                           r"\[2, 2\] float32 on cpu:0" % (lin.weight.name, what)):
            lin.weight.grad = bad
    assert lin.weight.grad is None
    o.step()  # no gradient: nothing to do
    np.testing.assert_array_equal(lin.weight.numpy(), w0)
    lin.weight.grad = pe.to_tensor(np.ones((2, 2), np.float32))
    o.step()
    assert not np.array_equal(lin.weight.numpy(), w0)
    pe.enable_static()
    with pytest.raises(pe.InvalidArgumentError, match="learning_rate = nan; it must be finite"):
        cls(learning_rate=float("nan"))


@pytest.mark.parametrize("opt, kw, msg", [
    ("Momentum", {"momentum": float("nan")}, "Momentum: momentum = nan; it must be finite"),
    ("Adam", {"beta1": 1.5}, r"Adam: beta1 = 1.5; it must be in \[0, 1\)"),
    ("AdamW", {"beta2": -0.1}, r"AdamW: beta2 = -0.1; it must be in \[0, 1\)"),
    ("Adam", {"epsilon": -1e-8}, "Adam: epsilon = -1e-08; it must be finite and >= 0"),
    ("Adamax", {"epsilon": float("inf")}, "Adamax: epsilon = inf; it must be finite and >= 0"),
    ("RMSProp", {"rho": float("nan"), "learning_rate": 0.1}, "RMSProp: rho = nan; it must be finite"),
    ("Adagrad", {"epsilon": float("nan"), "learning_rate": 0.1}, "Adagrad: epsilon = nan; it must be finite"),
    ("Lamb", {"beta1": 1.0}, r"Lamb: beta1 = 1.0; it must be in \[0, 1\)"),
])
def test_optimizer_refuses_bad_hyperparameters_when_made(opt, kw, msg):
    """What the update ops would refuse at the first step (their attribute
    check) is refused when the optimizer is made, in both modes (eager: the
    optimizers that have an eager step)."""
    if opt in ("Momentum", "Adam", "AdamW"):
        with pytest.raises(pe.InvalidArgumentError, match=msg):
            getattr(pe.optimizer, opt)(parameters=nn.Linear(2, 2).parameters(), **kw)
    pe.enable_static()
    try:
        with pytest.raises(pe.InvalidArgumentError, match=msg):
            getattr(pe.optimizer, opt)(**kw)
    finally:
        pe.disable_static()


def test_conv_pool_size_arguments_must_be_positive():
    x = pe.to_tensor(np.ones((1, 4, 8, 8), np.float32))
    with pytest.raises(pe.InvalidArgumentError, match="Conv2D stride must be positive, got 0"):
        nn.Conv2D(4, 4, 3, stride=0)
    with pytest.raises(pe.InvalidArgumentError, match=r"Conv2D dilation must be positive, got \[1, 0\]"):
        nn.Conv2D(4, 4, 3, dilation=(1, 0))
    with pytest.raises(pe.InvalidArgumentError, match="Conv2D groups must be a positive int, got 0"):
        nn.Conv2D(4, 4, 3, groups=0)
    with pytest.raises(pe.InvalidArgumentError, match="max_pool2d stride must be positive"):
        nn.MaxPool2D(2, stride=0)(x)
    with pytest.raises(pe.InvalidArgumentError, match="conv2d groups must be a positive int"):
        pe.nn.functional.conv2d(x, pe.to_tensor(np.ones((4, 4, 3, 3), np.float32)), groups=0)


def test_embedding_padding_idx_range():
    """padding_idx must be in [-num_embeddings, num_embeddings) (Paddle's rule);
    a negative one counts from the end, in the layer and the functional form."""
    for bad in (5, 9, -6):
        with pytest.raises(pe.InvalidArgumentError, match=r"Embedding: padding_idx must be in \[-5, 5\) for 5 "
                                                          r"embeddings, got %d" % bad):
            nn.Embedding(5, 3, padding_idx=bad)
    assert nn.Embedding(5, 3, padding_idx=-2)._padding_idx == 3 and nn.Embedding(5, 3)._padding_idx is None
    w = pe.to_tensor(np.ones((5, 3), np.float32))
    out = pe.nn.functional.embedding(pe.to_tensor(np.array([4, 0])), w, padding_idx=-1)
    np.testing.assert_array_equal(out.numpy(), [[0, 0, 0], [1, 1, 1]])
    with pytest.raises(pe.InvalidArgumentError, match=r"embedding: padding_idx must be in \[-5, 5\)"):
        pe.nn.functional.embedding(pe.to_tensor(np.array([1])), w, padding_idx=5)
    pe.enable_static()
    import pe.fluid as fluid
    with pe.static.program_guard(pe.static.Program(), pe.static.Program()):
        ids = pe.static.data("ids", [2, 1], "int64")
        with pytest.raises(pe.InvalidArgumentError, match=r"embedding: padding_idx must be in \[-10, 10\).*got 10"):
            pe.static.nn.embedding(ids, [10, 3], padding_idx=10)
        with pytest.raises(pe.InvalidArgumentError, match=r"fluid.layers.embedding: padding_idx .*got -11"):
            fluid.layers.embedding(ids, [10, 3], padding_idx=-11)
        pe.static.nn.embedding(ids, [10, 3], padding_idx=-1)
        assert ids.block.ops[-1].attr("padding_idx") == 9
