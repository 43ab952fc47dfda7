"""tests/python/test_autograd.py — pe.autograd: PyLayer and backward().

- seed 001's cus_tanh (a PyLayer whose backward is dy * (1 - y^2)) gives the
  gradients of the built-in tanh, through a Linear layer too;
- several Tensor arguments (positional and keyword) and outputs, a non-Tensor
  argument, an output no gradient reaches (zeros by default, None with
  set_materialize_grads(False)), a None gradient for an argument, an output
  that is an argument, mark_non_differentiable, a non-Tensor output (no
  gradient for it);
- an output made outside forward keeps its own graph; no node under no_grad
  or when no argument needs a gradient; backward twice
  needs retain_graph; the errors: wrong gradient count, shape or dtype, a
  PyLayer inside to_static;
- pe.autograd.backward on several tensors accumulates into the leaves.
The distributed use of PyLayer (seed 001's no_sync + fused_allreduce_gradients
example) is in test_data_parallel.py.
"""
import os
import sys

import numpy as np
import pytest

import pe
from pe.autograd import PyLayer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_scripts"))
from data_parallel import cus_tanh  # noqa: E402  (seed 001's PyLayer, as the 2-rank test runs it)

RS = np.random.RandomState(7)


@pytest.fixture(autouse=True)
def eager():
    pe.disable_static()
    yield
    pe.enable_static()


def _t(a, grad=True):
    t = pe.to_tensor(np.asarray(a, np.float32))
    t.stop_gradient = not grad
    return t


def test_cus_tanh_gives_tanh_gradients():
    a = RS.randn(3, 4)
    x, x2 = _t(a), _t(a)
    y = cus_tanh.apply(x)
    assert not y.stop_gradient
    (y * 3).sum().backward()
    (pe.tanh(x2) * 3).sum().backward()
    np.testing.assert_array_equal(y.numpy(), pe.tanh(_t(a, False)).numpy())
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_through_a_layer_the_parameters_get_gradients():
    pe.seed(3)
    lin = pe.nn.Linear(4, 2)
    w0, b0 = lin.weight.numpy(), lin.bias.numpy()
    x = _t(RS.randn(5, 4), grad=False)
    lin(cus_tanh.apply(x)).mean().backward()
    h = np.tanh(x.numpy())
    np.testing.assert_allclose(lin.weight.grad.numpy(), h.T @ np.full((5, 2), 0.1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full(2, 0.5), rtol=1e-6)
    assert x.grad is None
    # and the input's gradient flows back through the PyLayer when it needs one
    x.stop_gradient = False
    lin.clear_gradients()
    lin(cus_tanh.apply(x)).mean().backward()
    want = (np.full((5, 2), 0.1) @ w0.T) * (1 - h ** 2)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-7)
    assert b0.shape == (2,)


class MulAdd(PyLayer):
    """(x * y * alpha, x + z): three Tensor arguments (z by keyword), a float."""

    @staticmethod
    def forward(ctx, x, y, alpha, z=None):
        ctx.save_for_backward(x, y)
        ctx.alpha = alpha
        return x * y * alpha, x + z

    @staticmethod
    def backward(ctx, d_prod, d_sum):
        x, y = ctx.saved_tensor()
        return d_prod * y * ctx.alpha + d_sum, d_prod * x * ctx.alpha, d_sum


def test_several_arguments_and_outputs():
    a, b, c = RS.randn(2, 3), RS.randn(2, 3), RS.randn(2, 3)
    x, y, z = _t(a), _t(b), _t(c)
    p, s = MulAdd.apply(x, y, 0.5, z=z)
    (p.sum() * 2 + s.sum() * 3).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * b * 0.5 + 3, rtol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), 2 * a * 0.5, rtol=1e-6)
    np.testing.assert_allclose(z.grad.numpy(), np.full((2, 3), 3.0), rtol=1e-6)


class Seen(PyLayer):
    """Records what backward received."""
    got = None

    @staticmethod
    def forward(ctx, x, materialize=True):
        ctx.set_materialize_grads(materialize)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, d0, d1):
        Seen.got = (d0, d1)
        return d0 * 2 if d1 is None else d0 * 2 + d1 * 3


def test_an_output_no_gradient_reaches_gets_zeros_or_none():
    x = _t(RS.randn(2, 2))
    a, _ = Seen.apply(x)
    a.sum().backward()
    d0, d1 = Seen.got
    np.testing.assert_array_equal(d1.numpy(), np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 2.0, np.float32))
    x2 = _t(RS.randn(2, 2))
    a, _ = Seen.apply(x2, materialize=False)
    a.sum().backward()
    assert Seen.got[1] is None
    np.testing.assert_array_equal(x2.grad.numpy(), np.full((2, 2), 2.0, np.float32))


class FirstOnly(PyLayer):
    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, d):
        return d, None


def test_a_none_gradient_leaves_that_argument_without_one():
    x, y = _t(RS.randn(3)), _t(RS.randn(3))
    FirstOnly.apply(x, y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3, np.float32))
    assert y.grad is None


class Identity(PyLayer):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, d):
        return d * 5


def test_an_output_that_is_the_argument_is_a_tensor_of_its_own():
    x = _t(RS.randn(2))
    y = Identity.apply(x)
    assert y is not x and x.is_leaf
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(2, 5.0, np.float32))


class NonDiff(PyLayer):
    @staticmethod
    def forward(ctx, x):
        idx = x * 0
        ctx.mark_non_differentiable(idx)
        return x * 2, idx

    @staticmethod
    def backward(ctx, d, d_idx):
        return d * 2


def test_mark_non_differentiable():
    x = _t(RS.randn(3))
    y, idx = NonDiff.apply(x)
    assert not y.stop_gradient and idx.stop_gradient
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 2.0, np.float32))


def test_no_node_without_a_gradient_to_make():
    x = _t(RS.randn(3), grad=False)
    assert cus_tanh.apply(x).stop_gradient
    x = _t(RS.randn(3))
    with pe.no_grad():
        y = cus_tanh.apply(x)
    assert y.stop_gradient
    with pytest.raises(pe.InvalidArgumentError, match="stop_gradient=True"):
        y.sum().backward()


def test_backward_twice_needs_retain_graph():
    x = _t(RS.randn(1))
    y = cus_tanh.apply(x)   # the PyLayer's node is the root
    y.backward(retain_graph=True)
    g1 = x.grad.numpy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * g1, rtol=1e-6)
    with pytest.raises(pe.InvalidArgumentError, match=r"graph of op PyLayer\(cus_tanh\) was freed"):
        y.backward()


def _doubling(name, grad):
    """A PyLayer `name`: forward x * 2, backward grad(d)."""
    return type(name, (PyLayer,), {"forward": staticmethod(lambda ctx, x: x * 2),
                                   "backward": staticmethod(lambda ctx, d: grad(d))})


TooMany = _doubling("TooMany", lambda d: (d, d))
WrongShape = _doubling("WrongShape", lambda d: pe.reshape(d, [6]))
WrongDtype = _doubling("WrongDtype", lambda d: pe.cast(d, "float64"))


def test_errors_name_the_layer_and_the_argument():
    with pytest.raises(pe.InvalidArgumentError, match=r"PyLayer TooMany: backward returned 2 gradient\(s\); forward "
                                                      r"took 1 Tensor argument\(s\)"):
        TooMany.apply(_t(RS.randn(2, 3))).sum().backward()
    with pytest.raises(pe.InvalidArgumentError, match=r"PyLayer WrongShape: backward's gradient 0 is float32 \[6\]; "
                                                      r"Tensor argument 0 \('x'\) of forward is float32 \[2, 3\]"):
        WrongShape.apply(_t(RS.randn(2, 3))).sum().backward()
    with pytest.raises(pe.InvalidArgumentError, match=r"gradient 0 is float64 \[2, 3\]"):
        WrongDtype.apply(_t(RS.randn(2, 3))).sum().backward()


class BadZ(PyLayer):
    @staticmethod
    def forward(ctx, x, y, alpha, z=None):
        return x * y * alpha + z

    @staticmethod
    def backward(ctx, d):
        return d, d, pe.reshape(d, [6])


class BadStar(PyLayer):
    @staticmethod
    def forward(ctx, *xs):
        return xs[0] + xs[1]

    @staticmethod
    def backward(ctx, d):
        return d, pe.cast(d, "float64")


def test_errors_name_the_parameter_a_tensor_came_through():
    # a keyword argument after a non-Tensor one, and the second of *xs
    x, y, z = (_t(RS.randn(2, 3)) for _ in range(3))
    with pytest.raises(pe.InvalidArgumentError, match=r"gradient 2 is float32 \[6\]; Tensor argument 2 \('z'\) of "
                                                      r"forward is float32 \[2, 3\]"):
        BadZ.apply(x, y, 0.5, z=z).sum().backward()
    with pytest.raises(pe.InvalidArgumentError, match=r"gradient 1 is float64 \[2, 3\]; Tensor argument 1 "
                                                      r"\('xs\[1\]'\) of forward"):
        BadStar.apply(x, y).sum().backward()


def test_to_static_refuses_a_pylayer():
    class Net(pe.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = pe.nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(cus_tanh.apply(x))

    net = pe.jit.to_static(Net())
    with pytest.raises(pe.UnsupportedError, match=r"PyLayer cus_tanh has a Python backward"):
        net(_t(RS.randn(4, 3), grad=False))


def test_autograd_backward_on_several_tensors():
    x = _t(RS.randn(3))
    a, b = (x * 2).sum(), (x * x).sum()
    pe.autograd.backward([a, b])
    np.testing.assert_allclose(x.grad.numpy(), 2 + 2 * x.numpy(), rtol=1e-6)
    y = _t(RS.randn(2))
    out = y * 3
    pe.autograd.backward(out, pe.to_tensor(np.array([1.0, 2.0], np.float32)))
    np.testing.assert_array_equal(y.grad.numpy(), np.array([3.0, 6.0], np.float32))
    with pytest.raises(pe.InvalidArgumentError, match=r"2 tensor\(s\) and 1 grad_tensor\(s\)"):
        pe.autograd.backward([a, b], [None])


def test_an_output_made_outside_forward_keeps_its_own_graph():
    w = _t(RS.randn(2))
    h = w * 3   # a tensor with a history, returned by forward

    class Capture(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return h

        @staticmethod
        def backward(ctx, d):
            return d * 7

    x = _t(RS.randn(2))
    y = Capture.apply(x)
    assert y is not h
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(2, 7.0, np.float32))
    assert w.grad is None
    h.sum().backward()   # h's own graph is intact
    np.testing.assert_array_equal(w.grad.numpy(), np.full(2, 3.0, np.float32))


def test_backward_gets_a_gradient_per_tensor_output_only():
    class WithCount(PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x * 2, 3   # a Tensor and a number

        @staticmethod
        def backward(ctx, *grads):
            assert len(grads) == 1
            return grads[0] * 2

    x = _t(RS.randn(2))
    y, n = WithCount.apply(x)
    assert n == 3
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(2, 2.0, np.float32))
