"""tests/python/test_eager_cuda.py — eager mode on CUDA places.

pe.set_device("gpu:0") / pe.disable_static(pe.CUDAPlace(0)) make eager
tensors and run eager ops on the GPU through the same registry as the
static engine (the op's CUDA kernel). Checked here against the same eager
code on cpu:0: every op of test_eager's table (forward and gradients), the
creation and copy API (to_tensor(place=), .cuda(), .cpu(), .place,
detach), a mixed-place op refused naming the op, the input and both
places, the random ops' bits (one counter-based generator for both
places), pe.nn MLP and CNN training with every eager optimizer (GPU vs CPU
allclose, two GPU runs bit-identical), state dicts and pe.save / pe.load.

Without a GPU the GPU tests skip visibly; the refusals of a GPU place that
is not there run everywhere.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q -rs tests/python/test_eager_cuda.py
"""
import numpy as np
import pytest

import pe
from pe import nn

from test_eager import CASES, RS  # noqa: E402  (the eager op table: tests/python is on sys.path under pytest)

torch = pytest.importorskip("torch")

GPUS = pe.device.cuda.device_count()


def need_gpu():
    if GPUS < 1:
        pytest.skip("SKIPPED: needs a GPU: %s" % ("this PE build has no CUDA" if not pe.is_compiled_with_cuda()
                                                 else "no GPU visible"))


# ---- everywhere ------------------------------------------------------------------------

def test_device_names_and_refusals():
    assert pe.get_device() == "cpu"
    assert pe.set_device("cpu") == pe.CPUPlace()
    with pytest.raises(pe.InvalidArgumentError, match="expected 'cpu', 'gpu' or 'gpu:N'"):
        pe.set_device("tpu:0")
    with pytest.raises(pe.InvalidArgumentError, match="place must be pe.CPUPlace"):
        pe.disable_static(3)
    bad = "gpu:%d" % GPUS   # one past the last GPU (gpu:0 on a machine without one)
    for call in (lambda: pe.set_device(bad), lambda: pe.disable_static(pe.CUDAPlace(GPUS)),
                 lambda: pe.to_tensor([1.0], place=bad)):
        with pytest.raises(pe.DeviceError, match=r"%d CUDA device\(s\) visible" % GPUS):
            call()
    assert pe.get_device() == "cpu"   # a refused set_device changes nothing
    pe.disable_static()
    x = pe.to_tensor([1.0, 2.0])
    assert x.place == pe.CPUPlace() and x.cpu() is x


# ---- on a GPU ----------------------------------------------------------------------------

@pytest.fixture
def gpu():
    need_gpu()
    pe.disable_static()
    yield pe.CUDAPlace(0)
    pe.set_device("cpu")


def test_tensors_on_the_gpu(gpu):
    pe.set_device("gpu")
    assert pe.get_device() == "gpu:0"
    a = RS.randn(3, 4).astype(np.float32)
    x = pe.to_tensor(a, stop_gradient=False)
    assert x.place == gpu
    np.testing.assert_array_equal(x.numpy(), a)
    y = x * 2.0 + 1.0
    assert y.place == gpu
    np.testing.assert_array_equal(y.numpy(), a * 2.0 + 1.0)
    c = y.cpu()
    assert c.place == pe.CPUPlace() and c.is_leaf and not c.stop_gradient
    np.testing.assert_array_equal(c.numpy(), y.numpy())
    back = c.cuda()
    assert back.place == gpu
    np.testing.assert_array_equal(back.numpy(), a * 2.0 + 1.0)
    d = y.detach()
    assert d.place == gpu and d.stop_gradient
    pe.set_device("cpu")
    z = pe.to_tensor(a, place="gpu:0")
    assert z.place == gpu and pe.to_tensor(a).place == pe.CPUPlace()


def test_mixed_places_refused(gpu):
    a = pe.to_tensor(np.ones([2, 2], np.float32), place=gpu)
    b = pe.to_tensor(np.ones([2, 2], np.float32))
    with pytest.raises(pe.InvalidArgumentError,
                       match=r"op elementwise_add: input (X|Y):0 \('eager_tmp_\d+'\) is on cuda:0, the op runs on cpu:0"):
        a + b
    pe.set_device("gpu:0")
    with pytest.raises(pe.InvalidArgumentError, match=r"is on cpu:0, the op runs on cuda:0"):
        a + b
    np.testing.assert_array_equal((a + b.cuda()).numpy(), np.full([2, 2], 2, np.float32))


def _run_case(fn, inputs, grad_idx, gval):
    ts = [pe.to_tensor(a, stop_gradient=i not in grad_idx) for i, a in enumerate(inputs)]
    out = fn(*ts)
    loss = pe.sum(out * pe.to_tensor(gval))
    loss.backward()
    return out, [ts[i].grad for i in grad_idx]


@pytest.mark.parametrize("name,fn,inputs,tfn,grad_idx", CASES, ids=[c[0] for c in CASES])
def test_op_on_gpu_matches_cpu(gpu, name, fn, inputs, tfn, grad_idx):
    pe.set_device("cpu")
    with pe.no_grad():
        shape = fn(*[pe.to_tensor(a) for a in inputs]).shape
    gval = np.random.RandomState(5).randn(*shape).astype(np.float32)   # the upstream gradient
    c_out, c_grads = _run_case(fn, inputs, grad_idx, gval)
    pe.set_device("gpu:0")
    g_out, g_grads = _run_case(fn, inputs, grad_idx, gval)
    assert g_out.place == gpu and all(g.place == gpu for g in g_grads)
    np.testing.assert_allclose(g_out.numpy(), c_out.numpy(), rtol=1e-5, atol=1e-6, err_msg=name + " forward")
    for k, (g, c) in enumerate(zip(g_grads, c_grads)):
        np.testing.assert_allclose(g.numpy(), c.numpy(), rtol=1e-5, atol=1e-6, err_msg="%s grad %d" % (name, k))


def test_random_ops_same_bits_on_both_places(gpu):
    draws = {}
    for dev in ("cpu", "gpu:0"):
        pe.set_device(dev)
        pe.seed(123)
        draws[dev] = (pe.randn([64, 33]).numpy(), pe.rand([17]).numpy(), nn.Linear(20, 30).weight.numpy())
    for c, g in zip(draws["cpu"], draws["gpu:0"]):
        np.testing.assert_array_equal(c, g)


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def _cnn():
    return nn.Sequential(nn.Conv2D(2, 4, 3, padding=1, bias_attr=False), nn.BatchNorm2D(4), nn.ReLU(), nn.MaxPool2D(2),
                         nn.Conv2D(4, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 2 * 2, 3))


OPTS = {
    "SGD": lambda ps: pe.optimizer.SGD(learning_rate=0.1, parameters=ps),
    "Momentum": lambda ps: pe.optimizer.Momentum(learning_rate=0.05, momentum=0.9, parameters=ps),
    "Adam": lambda ps: pe.optimizer.Adam(learning_rate=0.01, parameters=ps),
    "AdamW": lambda ps: pe.optimizer.AdamW(learning_rate=0.01, weight_decay=0.01, parameters=ps),
}


def _train(dev, model, opt_name, steps=6):
    pe.set_device(dev)
    pe.seed(7)
    net = _mlp() if model == "mlp" else _cnn()
    opt = OPTS[opt_name](net.parameters())
    rs = np.random.RandomState(3)
    shape = [16, 8] if model == "mlp" else [16, 2, 6, 6]
    losses = []
    for _ in range(steps):
        x = pe.to_tensor(rs.randn(*shape).astype(np.float32))
        y = pe.to_tensor(rs.randint(0, 3, size=[16, 1]).astype(np.int64))
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses, {k: v.numpy() for k, v in net.state_dict().items()}, net


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("opt_name", sorted(OPTS))
def test_training_on_gpu_matches_cpu(gpu, model, opt_name):
    c_losses, c_state, _ = _train("cpu", model, opt_name)
    g_losses, g_state, net = _train("gpu:0", model, opt_name)
    assert all(p.place == gpu for p in net.parameters())
    np.testing.assert_allclose(g_losses, c_losses, rtol=1e-4, atol=1e-5)
    assert c_losses[-1] < c_losses[0]
    for k in c_state:
        np.testing.assert_allclose(g_state[k], c_state[k], rtol=1e-3, atol=1e-4, err_msg=k)
    again, again_state, _ = _train("gpu:0", model, opt_name)
    assert again == g_losses, "two GPU runs differ"
    for k in g_state:
        np.testing.assert_array_equal(again_state[k], g_state[k], err_msg=k)


def test_state_dict_and_save_load_keep_the_place(gpu, tmp_path):
    pe.set_device("gpu:0")
    pe.seed(1)
    net = _mlp()
    state = net.state_dict()
    path = str(tmp_path / "mlp.pdparams")
    pe.save(state, path)
    pe.seed(2)
    other = _mlp()
    other.set_state_dict(pe.load(path))
    for k, v in other.state_dict().items():
        assert v.place == gpu, k
        np.testing.assert_array_equal(v.numpy(), state[k].numpy())
    x = pe.to_tensor(np.ones([2, 8], np.float32))
    np.testing.assert_array_equal(other(x).numpy(), net(x).numpy())
