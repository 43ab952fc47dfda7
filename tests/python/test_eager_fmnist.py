"""tests/python/test_eager_fmnist.py — eager training reaches the static program's accuracy on Fashion-MNIST.

An MLP (784-128-10, relu) and a small CNN (conv 3x3 -> relu -> max pool ->
linear) are trained with Adam on the first STEPS batches of Fashion-MNIST
(Debian's /usr/share/datasets/fashion-mnist, same batches in the same
order) three ways from the same initial weights:

  static     the model written with the fluid API (fluid.layers.fc /
             conv2d / pool2d, softmax_with_cross_entropy + mean,
             pe.optimizer.Adam.minimize) and run by the Executor;
  eager      the pe.nn Layer in eager mode, pe.optimizer.Adam's eager step;
  to_static  pe.jit.to_static of the same Layer (default passes), the same
             eager optimizer step.

Then each is scored on the first N_TEST test images. What holds, and is
asserted: the three runs take the same steps bit for bit — the same losses,
the same parameters after the last step, the same test logits, so the same
test accuracy to the image. Nothing is approximate here because nothing
computes differently: an eager op is one pe_eager_run call of the
registry's CPU kernel (the Executor's kernel), to_static runs the traced
program on the static engine, and the static fc's `mul` and the Layer's
`matmul_v2` reach the same GEMM; to_static's fusion of bias add + relu
(fused_elemwise_activation) computes the same float per element. The
training did something: the losses halve and the accuracy is far above
chance (about 83% for the MLP, 80% for the CNN).

    PE_BIN_DIR=build/bin PYTHONPATH=build/python OMP_NUM_THREADS=1 \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_eager_fmnist.py
"""
import os
import sys

import numpy as np
import pytest

import pe
import pe.fluid as fluid
import pe.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from train_ref import FMNIST_DIR, fashion_mnist  # noqa: E402

BATCH = 64
N_TEST = 2000
LR = 1e-3

pytestmark = pytest.mark.skipif(not os.path.isdir(FMNIST_DIR), reason="no Fashion-MNIST at " + FMNIST_DIR)


@pytest.fixture(scope="module")
def data():
    x, y = fashion_mnist("train")
    tx, ty = fashion_mnist("test")
    return ((x.astype(np.float32) / np.float32(255.0)), y.astype(np.int64),
            (tx[:N_TEST].astype(np.float32) / np.float32(255.0)), ty[:N_TEST].astype(np.int64))


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(nn.functional.relu(self.fc1(x)))


class CNN(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(1, 8, 3, padding=1)
        self.pool = nn.MaxPool2D(2)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(self.flat(self.pool(nn.functional.relu(self.conv(x)))))


KINDS = {"mlp": (MLP, [784], 300), "cnn": (CNN, [1, 28, 28], 120)}   # Layer, sample shape, steps


def _static_logits(kind, x, layer):
    """The fluid-API twin of `layer`; its parameters take the Layer's names."""
    attr = lambda p: pe.ParamAttr(name=p.name)  # noqa: E731
    if kind == "mlp":
        h = fluid.layers.fc(x, 128, param_attr=attr(layer.fc1.weight), bias_attr=attr(layer.fc1.bias), act="relu")
        return fluid.layers.fc(h, 10, param_attr=attr(layer.fc2.weight), bias_attr=attr(layer.fc2.bias))
    h = fluid.layers.conv2d(x, 8, 3, padding=1, param_attr=attr(layer.conv.weight), bias_attr=attr(layer.conv.bias),
                            act="relu")
    h = fluid.layers.pool2d(h, 2, "max", 2)
    h = fluid.layers.flatten(h, 1)
    return fluid.layers.fc(h, 10, param_attr=attr(layer.fc.weight), bias_attr=attr(layer.fc.bias))


def _train_static(kind, layer, init, batches, test_x):
    pe.enable_static()
    try:
        main, startup = pe.static.Program(), pe.static.Program()
        with pe.static.program_guard(main, startup):
            x = pe.static.data("x", [-1] + KINDS[kind][1], "float32")
            y = pe.static.data("y", [-1, 1], "int64")
            logits = _static_logits(kind, x, layer)
            test_prog = main.clone(for_test=True)   # the forward alone
            loss = pe.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
            pe.optimizer.Adam(learning_rate=LR).minimize(loss)
        scope = pe.static.Scope()
        exe = pe.static.Executor(pe.CPUPlace())
        exe.run(startup, scope=scope)
        for name, v in init.items():
            scope.find_var(name).get_tensor().set(v, pe.CPUPlace())
        losses = []
        for xb, yb in batches:
            losses.append(float(exe.run(main, feed={"x": xb, "y": yb.reshape(-1, 1)}, fetch_list=[loss],
                                        scope=scope)[0]))
        out, = exe.run(test_prog, feed={"x": test_x}, fetch_list=[logits], scope=scope)
        params = {n: np.array(scope.find_var(n).get_tensor()) for n in init}
        return losses, params, out
    finally:
        pe.disable_static()


def _train_eager(model, batches, test_x):
    opt = pe.optimizer.Adam(learning_rate=LR, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for xb, yb in batches:
        loss = loss_fn(model(pe.to_tensor(xb)), pe.to_tensor(yb))
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    model.eval()
    with pe.no_grad():
        out = model(pe.to_tensor(test_x)).numpy()
    return losses, {p.name: p.numpy() for p in model.parameters()}, out


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_eager_reaches_static_accuracy(kind, data):
    x, y, tx, ty = data
    cls, shape, steps = KINDS[kind]
    batches = [(x[k * BATCH:(k + 1) * BATCH].reshape([BATCH] + shape), y[k * BATCH:(k + 1) * BATCH])
               for k in range(steps)]
    test_x = tx.reshape([-1] + shape)
    pe.disable_static()
    pe.seed(5)
    eager_m = cls()
    init = {p.name: p.numpy() for p in eager_m.parameters()}
    jit_m = cls()
    jit_m.set_state_dict({k: v.numpy() for k, v in eager_m.state_dict().items()})
    jit_m = pe.jit.to_static(jit_m)

    runs = {"static": _train_static(kind, eager_m, init, batches, test_x),
            "eager": _train_eager(eager_m, batches, test_x)}
    jl, jp, jo = _train_eager(jit_m, batches, test_x)
    runs["to_static"] = (jl, {n: jp[p.name] for n, p in zip(init, jit_m.parameters())}, jo)

    acc = {k: float((np.argmax(r[2], 1) == ty).mean()) for k, r in runs.items()}
    sl, sp, so = runs["static"]
    assert acc["static"] > 0.7, "static %s reached %.1f%% after %d steps" % (kind, acc["static"] * 100, steps)
    assert sl[-1] < sl[0] / 2
    for k in ("eager", "to_static"):
        losses, params, out = runs[k]
        assert acc[k] == acc["static"], "%s %s: test accuracy %.2f%%, static %.2f%%" % (
            k, kind, acc[k] * 100, acc["static"] * 100)
        np.testing.assert_array_equal(losses, sl, err_msg="%s %s: losses differ from the static run's" % (k, kind))
        for n in init:
            np.testing.assert_array_equal(params[n], sp[n], err_msg="%s %s: parameter %s" % (k, kind, n))
        np.testing.assert_array_equal(out, so, err_msg="%s %s: test logits" % (k, kind))
    # the parameters moved away from the initial values
    assert all(not np.allclose(sp[n], init[n]) for n in init)
