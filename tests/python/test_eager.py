"""tests/python/test_eager.py — eager mode (pe.disable_static, pe.eager).

Each op of the table runs eagerly and in a static program on the same
inputs: forward values and gradients (backward() vs pe.static.gradients)
must be the same bits (one registry, one set of kernels), and agree with
torch autograd. Then: the tape's rules (stop_gradient, no_grad, detach,
accumulation, retain_graph), a small MLP trained eagerly with SGD, errors.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_eager.py
"""
import numpy as np
import pytest

import pe
from pe.utils import unique_name

torch = pytest.importorskip("torch")

RS = np.random.RandomState(11)


def _f32(*shape, positive=False):
    a = RS.randn(*shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


@pytest.fixture(autouse=True)
def static_after():
    """Every test leaves PE in its default (static) mode."""
    yield
    pe.enable_static()


X34, Y34, Y4, P34 = _f32(3, 4), _f32(3, 4), _f32(4), _f32(3, 4, positive=True)
A45 = _f32(4, 5)
LOGITS, LABEL = _f32(4, 5), RS.randint(0, 5, size=(4, 1)).astype(np.int64)

# name, fn (works on static Variables and eager tensors alike), inputs, torch fn,
# indices of inputs that get gradients
CASES = [
    ("add_bcast", lambda x, y: x + y, [X34, Y4], lambda x, y: x + y, [0, 1]),
    ("sub", lambda x, y: x - y, [X34, Y34], lambda x, y: x - y, [0, 1]),
    ("mul", lambda x, y: x * y, [X34, Y34], lambda x, y: x * y, [0, 1]),
    ("div", lambda x, y: x / y, [X34, P34], lambda x, y: x / y, [0, 1]),
    ("mul_self", lambda x: x * x, [X34], lambda x: x * x, [0]),
    ("scalars", lambda x: (x * 2.0 + 1.0) / 4.0 - 3.0, [X34], lambda x: (x * 2.0 + 1.0) / 4.0 - 3.0, [0]),
    ("rsub", lambda x: 1.0 - x, [X34], lambda x: 1.0 - x, [0]),
    ("neg", lambda x: -x, [X34], lambda x: -x, [0]),
    ("pow", lambda x: pe.pow(x, 3.0), [P34], lambda x: x ** 3.0, [0]),
    ("matmul", lambda x, y: pe.matmul(x, y), [X34, A45], lambda x, y: x @ y, [0, 1]),
    ("relu", lambda x: pe.nn.functional.relu(x), [X34], torch.relu, [0]),
    ("sigmoid", lambda x: pe.sigmoid(x), [X34], torch.sigmoid, [0]),
    ("tanh", lambda x: pe.tanh(x), [X34], torch.tanh, [0]),
    ("exp", lambda x: pe.exp(x), [X34], torch.exp, [0]),
    ("log", lambda x: pe.log(x), [P34], torch.log, [0]),
    ("sqrt", lambda x: pe.sqrt(x), [P34], torch.sqrt, [0]),
    ("square", lambda x: pe.square(x), [X34], torch.square, [0]),
    ("abs", lambda x: pe.abs(x), [X34], torch.abs, [0]),
    ("softmax", lambda x: pe.nn.functional.softmax(x), [X34], lambda x: torch.softmax(x, -1), [0]),
    ("mean_all", lambda x: pe.mean(x), [X34], lambda x: x.mean().reshape(1), [0]),
    ("mean_axis", lambda x: pe.mean(x, axis=1), [X34], lambda x: x.mean(1), [0]),
    ("sum_keepdim", lambda x: pe.sum(x, axis=0, keepdim=True), [X34], lambda x: x.sum(0, keepdim=True), [0]),
    ("reshape", lambda x: pe.reshape(x, [2, 6]), [X34], lambda x: x.reshape(2, 6), [0]),
    ("transpose", lambda x: pe.transpose(x, [1, 0]), [X34], lambda x: x.t(), [0]),
    ("concat", lambda x, y: pe.concat([x, y], axis=0), [X34, Y34], lambda x, y: torch.cat([x, y], 0), [0, 1]),
    ("mlp_chain", lambda x, y: pe.tanh(pe.matmul(x, y)) * 0.5, [X34, A45],
     lambda x, y: torch.tanh(x @ y) * 0.5, [0, 1]),
    ("cross_entropy", lambda x, lab: pe.nn.functional.cross_entropy(x, lab), [LOGITS, LABEL],
     lambda x, lab: torch.nn.functional.cross_entropy(x, lab[:, 0]).reshape(1), [0]),
]


def _static(fn, inputs, grad_idx):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        vs = []
        for i, a in enumerate(inputs):
            v = pe.static.data("in%d" % i, list(a.shape), str(a.dtype))
            v.stop_gradient = i not in grad_idx
            vs.append(v)
        out = fn(*vs)
        g = pe.static.data("g", [-1], "float32")  # fed with out's shape: the upstream gradient
        loss = pe.sum(out * pe.reshape(g, out.shape))
        grads = pe.static.gradients(loss, [vs[i] for i in grad_idx])
    exe = pe.static.Executor()
    scope = pe.static.Scope()
    exe.run(startup, scope=scope)
    return main, exe, scope, out, grads


@pytest.mark.parametrize("name,fn,inputs,tfn,grad_idx", CASES, ids=[c[0] for c in CASES])
def test_op_matches_static_and_torch(name, fn, inputs, tfn, grad_idx):
    # eager
    pe.disable_static()
    assert pe.in_dynamic_mode()
    ts = [pe.to_tensor(a, stop_gradient=i not in grad_idx) for i, a in enumerate(inputs)]
    out = fn(*ts)
    gval = RS.randn(*out.shape).astype(np.float32)
    loss = pe.sum(out * pe.to_tensor(gval))
    loss.backward()
    e_out = out.numpy()
    e_grads = [ts[i].grad.numpy() for i in grad_idx]
    for i, t in enumerate(ts):
        if i not in grad_idx:
            assert t.grad is None
    # static: same ops, same kernels
    pe.enable_static()
    main, exe, scope, s_out, s_grads = _static(fn, inputs, grad_idx)
    feed = {"in%d" % i: a for i, a in enumerate(inputs)}
    feed["g"] = gval.reshape(-1)
    res = exe.run(main, feed=feed, fetch_list=[s_out] + list(s_grads), scope=scope)
    np.testing.assert_array_equal(e_out, res[0], err_msg="%s forward: eager and static bits differ" % name)
    for k, (eg, sg) in enumerate(zip(e_grads, res[1:])):
        np.testing.assert_array_equal(eg, sg, err_msg="%s grad of input %d: eager and static differ" % (name, k))
    # torch autograd
    tts = [torch.tensor(a, requires_grad=i in grad_idx) for i, a in enumerate(inputs)]
    tout = tfn(*tts)
    (tout * torch.tensor(gval)).sum().backward()
    np.testing.assert_allclose(e_out, tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    for i, eg in zip(grad_idx, e_grads):
        np.testing.assert_allclose(eg, tts[i].grad.numpy(), rtol=1e-4, atol=1e-5, err_msg="%s grad %d" % (name, i))


@pytest.mark.parametrize("op,tfn", [
    ("less_than", np.less), ("less_equal", np.less_equal), ("greater_than", np.greater),
    ("greater_equal", np.greater_equal), ("equal", np.equal), ("not_equal", np.not_equal)])
def test_comparisons(op, tfn):
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    y = np.array([[3, 2, 1], [4, 0, 9]], np.float32)
    pe.disable_static()
    out = getattr(pe, op)(pe.to_tensor(x), pe.to_tensor(y))
    assert out.dtype == "bool" and out.stop_gradient
    np.testing.assert_array_equal(out.numpy(), tfn(x, y))
    sym = {"less_than": "<", "less_equal": "<=", "greater_than": ">", "greater_equal": ">=", "equal": "==",
           "not_equal": "!="}[op]
    np.testing.assert_array_equal(eval("a %s b" % sym, {"a": pe.to_tensor(x), "b": pe.to_tensor(y)}).numpy(),
                                  tfn(x, y))


def test_modes():
    assert not pe.in_dynamic_mode()  # static is the default
    pe.disable_static()
    assert pe.in_dynamic_mode()
    z = pe.zeros([2, 3])
    assert isinstance(z, pe.eager.Tensor) and z.shape == [2, 3] and z.dtype == "float32"
    pe.enable_static()
    assert not pe.in_dynamic_mode()
    assert not isinstance(pe.zeros([2, 3]), pe.eager.Tensor)  # a static Variable again
    # eager tensors on a GPU: test_eager_cuda.py


def test_creation_and_numpy_interop():
    pe.disable_static()
    t = pe.to_tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t.dtype == "float32" and t.shape == [2, 2] and t.stop_gradient
    assert pe.to_tensor([1, 2]).dtype == "int64"
    assert pe.to_tensor(np.ones(3, np.float64)).dtype == "float64"
    np.testing.assert_array_equal(np.asarray(t), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(pe.full([2], 7, "int32").numpy(), [7, 7])
    np.testing.assert_array_equal(pe.ones([3], "float64").numpy(), np.ones(3))
    np.testing.assert_array_equal(pe.arange(5).numpy(), np.arange(5))
    np.testing.assert_allclose(pe.arange(0.0, 1.0, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    pe.seed(5)
    a, b = pe.randn([1000]), pe.rand([1000])
    pe.seed(5)
    np.testing.assert_array_equal(pe.randn([1000]).numpy(), a.numpy())  # pe.seed makes them reproducible
    assert abs(a.numpy().mean()) < 0.15 and 0.8 < a.numpy().std() < 1.2
    assert b.numpy().min() >= 0 and b.numpy().max() < 1 and 0.4 < b.numpy().mean() < 0.6
    assert not np.array_equal(pe.randn([1000]).numpy(), a.numpy())
    # numpy on the left defers to the tensor's reflected operator
    r = np.float32(2.0) * t
    assert isinstance(r, pe.eager.Tensor)
    np.testing.assert_array_equal(r.numpy(), [[2, 4], [6, 8]])


def test_stop_gradient_no_grad_detach():
    pe.disable_static()
    w = pe.to_tensor(np.ones([3, 2], np.float32), stop_gradient=False)
    x = pe.to_tensor(np.full([4, 3], 2.0, np.float32))  # stop_gradient True: no grad
    y = pe.mean(x @ w)
    assert not y.stop_gradient
    y.backward()
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), np.full([3, 2], 2.0 * 4 / 8))
    with pe.no_grad():
        z = pe.mean(x @ w)
    assert z.stop_gradient and z.is_leaf
    d = (x @ w).detach()
    assert d.stop_gradient and d.is_leaf
    # a stop_gradient intermediate cuts the graph there
    w.clear_grad()
    assert w.grad is None
    h = x @ w
    h.stop_gradient = True
    k = pe.to_tensor(np.ones([4, 2], np.float32), stop_gradient=False)
    pe.mean(h * k).backward()
    assert w.grad is None and k.grad is not None


def test_accumulation_and_retain_graph():
    pe.disable_static()
    a = pe.to_tensor(np.array([1.0, 2.0, 3.0], np.float32), stop_gradient=False)
    y = pe.sum(a * a + a)    # two paths into a: contributions summed
    y.backward(retain_graph=True)
    np.testing.assert_array_equal(a.grad.numpy(), 2 * a.numpy() + 1)
    y.backward()             # accumulates into .grad
    np.testing.assert_array_equal(a.grad.numpy(), 2 * (2 * a.numpy() + 1))
    with pytest.raises(pe.InvalidArgumentError, match="freed by an earlier backward"):
        y.backward()
    with pytest.raises(pe.InvalidArgumentError, match="give grad_tensor"):
        (a * 2.0).backward()
    g = pe.to_tensor(np.array([1.0, 0.0, 2.0], np.float32))
    a.clear_grad()
    (a * 3.0).backward(g)
    np.testing.assert_array_equal(a.grad.numpy(), [3, 0, 6])
    # an output no gradient reaches gets zeros (softmax_with_cross_entropy's Softmax)
    lg = pe.to_tensor(LOGITS, stop_gradient=False)
    loss, sm = pe.eager.softmax_with_cross_entropy(lg, pe.to_tensor(LABEL), return_softmax=True)
    pe.mean(loss).backward()
    t = torch.tensor(LOGITS, requires_grad=True)
    torch.nn.functional.cross_entropy(t, torch.tensor(LABEL[:, 0])).backward()
    np.testing.assert_allclose(lg.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_mlp_trains_with_sgd():
    pe.disable_static()
    pe.seed(3)
    rs = np.random.RandomState(0)
    xs = rs.randn(64, 8).astype(np.float32)
    ys = (xs[:, :3].argmax(1)).reshape(-1, 1).astype(np.int64)  # learnable labels
    x, y = pe.to_tensor(xs), pe.to_tensor(ys)
    params = [pe.randn([8, 16]) * 0.3, pe.zeros([16]), pe.randn([16, 3]) * 0.3, pe.zeros([3])]
    for p in params:
        p.stop_gradient = False
    losses = []
    for _ in range(40):
        w1, b1, w2, b2 = params
        logits = pe.matmul(pe.nn.functional.relu(pe.matmul(x, w1) + b1), w2) + b2
        loss = pe.nn.functional.cross_entropy(logits, y)
        losses.append(float(loss))
        loss.backward()
        with pe.no_grad():
            new = [p - 0.5 * p.grad for p in params]
        for p in new:
            p.stop_gradient = False
        params = new
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(np.isfinite(losses))


def test_errors_name_op_and_input():
    pe.disable_static()
    x = pe.to_tensor(np.ones([2, 3], np.float32))
    bad = pe.to_tensor(np.ones([3, 2], np.int64))
    with pytest.raises(pe.InvalidArgumentError, match=r"op matmul_v2 .*Y '%s' has dtype int64" % bad.name):
        pe.matmul(x, bad)
    with pytest.raises(pe.InvalidArgumentError, match=r"op elementwise_add .*int64"):
        x + pe.to_tensor(np.ones([3], np.int64))
    with pytest.raises(pe.InvalidArgumentError, match="matmul_v2"):
        pe.matmul(x, x)  # inner dims differ
    with pytest.raises(TypeError, match="pe.eager.Tensor"):
        pe.eager.relu(np.ones(3))
    with pytest.raises(pe.InvalidArgumentError, match="op relu has no attr 'alpha'"):
        pe.eager.run_op("relu", {"X": x}, {"Out": 1}, {"alpha": 1.0})
    with pytest.raises(pe.InvalidArgumentError, match="op scale: attr 'scale' must be float"):
        pe.eager.run_op("scale", {"X": x}, {"Out": 1}, {"scale": "big"})
    with pytest.raises(pe.InvalidArgumentError, match="op matmul_v2: input Y takes exactly one tensor"):
        pe.eager.run_op("matmul_v2", {"X": x}, {"Out": 1})
    with pytest.raises(pe.InvalidArgumentError, match="op relu has no input slot 'Z'"):
        pe.eager.run_op("relu", {"X": x, "Z": x}, {"Out": 1})
    with pytest.raises(pe.NotFoundError, match="unknown op type 'no_such_op'"):
        pe.eager.run_op("no_such_op", {"X": x}, {"Out": 1})


def test_grad_ops_come_from_the_grad_makers():
    """The C entry point returns the grad maker's ops: matmul_v2 -> matmul_v2_grad wired
    X, Y, Out@GRAD -> X@GRAD, Y@GRAD; an input without needs_grad gets no gradient slot."""
    from pe import _core
    ops = _core.eager_grad_ops("matmul_v2", [("X", ["a"]), ("Y", ["b"])], [("Out", ["c"])], {"trans_x": False},
                               [("a", "float32", [2, 3], True), ("b", "float32", [3, 4], False),
                                ("c", "float32", [2, 4], False)])
    assert len(ops) == 1
    typ, ins, outs, attrs = ops[0]
    assert typ == "matmul_v2_grad"
    assert dict(ins) == {"X": ["a"], "Y": ["b"], "Out@GRAD": ["c@GRAD"]}
    assert dict(outs) == {"X@GRAD": ["a@GRAD"]}
    assert attrs["trans_x"] is False
    # x * x: two contributions to one var
    ops = _core.eager_grad_ops("elementwise_mul", [("X", ["a"]), ("Y", ["a"])], [("Out", ["c"])], {},
                               [("a", "float32", [3], True), ("c", "float32", [3], False)])
    assert dict(ops[0][2]) == {"X@GRAD": ["a@GRAD"], "Y@GRAD": ["a@GRAD@RENAME@1"]}
    with pytest.raises(pe.UnsupportedError, match="op less_than has no gradient"):
        _core.eager_grad_ops("less_than", [("X", ["a"]), ("Y", ["b"])], [("Out", ["c"])], {},
                             [("a", "float32", [3], True), ("b", "float32", [3], True), ("c", "bool", [3], False)])


def test_static_only_functions_refuse_eager_tensors():
    pe.disable_static()
    x = pe.to_tensor(np.ones([2, 3], np.float32))
    with pytest.raises(pe.UnsupportedError, match=r"pe.flatten has no eager form yet .*pe.matmul"):
        pe.flatten(x)
    with pytest.raises(pe.UnsupportedError, match="pe.stack has no eager form yet"):
        pe.stack([x, x])
    pe.enable_static()
    with pytest.raises(pe.UnsupportedError, match="pe.flatten has no eager form yet"):
        pe.flatten(x)  # an eager tensor in static mode
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup):  # static mode: the static builders as before
        v = pe.static.data("v", [2, 3], "float32")
        assert list(pe.flatten(v).shape) == [6]


def test_tensor_api_extras():
    pe.disable_static()
    x = pe.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3), stop_gradient=False)
    np.testing.assert_array_equal(x.T.numpy(), np.arange(6).reshape(2, 3).T)
    assert x.ndim == 2 and len(x) == 2 and x.size == 6 and x.is_leaf
    assert pe.mean(x).item() == 2.5 and float(pe.sum(x)) == 15.0
    assert (x.astype("int64")).dtype == "int64"

    @pe.no_grad()
    def f(t):
        return t * 2.0
    assert f(x).stop_gradient
    assert not (x * 2.0).stop_gradient
    y = x.reshape([3, 2]).transpose([1, 0]).exp().log().sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.ones([2, 3]), rtol=1e-6)


def _generic(op_type, inputs, attrs):
    """The op through _core.eager_run (no prepared op): the reference path."""
    return pe.eager.autograd._run_op(op_type, inputs, {"Out": 1}, attrs)["Out"][0]


@pytest.mark.parametrize("sym,op_type,attrs", [
    ("+", "elementwise_add", {"axis": -1}), ("-", "elementwise_sub", {"axis": -1}),
    ("*", "elementwise_mul", {"axis": -1}), ("/", "elementwise_div", {"axis": -1}),
    ("@", "matmul_v2", {"trans_x": False, "trans_y": False})])
def test_fast_path_operators_are_the_generic_ops(sym, op_type, attrs):
    """The operators run as prepared ops from C (core_eager_tensor.c): the same
    bits as the op through eager_run, forward and gradients, and x op x (one
    tensor twice) differentiates both operands."""
    pe.disable_static()
    a_np, b_np = (_f32(3, 3), _f32(3, 3, positive=True))
    fns = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
           "@": lambda a, b: a @ b}
    a = pe.to_tensor(a_np, stop_gradient=False)
    b = pe.to_tensor(b_np, stop_gradient=False)
    out = fns[sym](a, b)
    ref = _generic(op_type, {"X": a, "Y": b}, attrs)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    assert not out.stop_gradient and out._node is not None
    out.sum().backward()
    ga, gb = a.grad.numpy(), b.grad.numpy()
    a.clear_grad(), b.clear_grad()
    ref.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ga)
    np.testing.assert_array_equal(b.grad.numpy(), gb)
    # one tensor on both sides
    x = pe.to_tensor(b_np, stop_gradient=False)
    fns[sym](x, x).sum().backward()
    tx = torch.tensor(b_np, requires_grad=True)
    {"+": lambda t: t + t, "-": lambda t: t - t, "*": lambda t: t * t, "/": lambda t: t / t,
     "@": lambda t: t @ t}[sym](tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    # no input needs a gradient, or inside no_grad: nothing recorded
    c = fns[sym](pe.to_tensor(a_np), pe.to_tensor(b_np))
    assert c.stop_gradient and c._node is None
    with pe.no_grad():
        d = fns[sym](a, b)
    assert d.stop_gradient and d._node is None
    np.testing.assert_array_equal(d.numpy(), ref.numpy())


def test_fast_path_errors_and_fallbacks():
    """An op the fast path cannot run goes back to the Python rules: numbers
    (scale ops), numpy arrays (refused), a failing op (the error names the
    tensors, as eager_run's does)."""
    pe.disable_static()
    a, b = pe.to_tensor(_f32(2, 3)), pe.to_tensor(_f32(4, 5))
    a.name, b.name = "left", "right"
    with pytest.raises(pe.InvalidArgumentError, match="'left'.*'right'|'right'.*'left'"):
        a @ b
    with pytest.raises(pe.InvalidArgumentError, match="op elementwise_add"):
        a + b
    np.testing.assert_array_equal((a + 2).numpy(), a.numpy() + np.float32(2))
    np.testing.assert_array_equal((2 - a).numpy(), np.float32(2) - a.numpy())
    np.testing.assert_allclose((1 / pe.to_tensor(P34)).numpy(), 1 / P34, rtol=1e-6)
    with pytest.raises(TypeError, match="matmul: x must be a pe.eager.Tensor, got int"):
        pe.matmul(1, a)
    # the prepared unary ops (activations, reductions, reshape, ...) check their tensor alike
    with pytest.raises(TypeError, match="relu: x must be a pe.eager.Tensor, got NoneType"):
        pe.nn.functional.relu(None)
    with pytest.raises(TypeError, match="reshape: x must be a pe.eager.Tensor, got list"):
        pe.eager.reshape([1.0], [1])
    # a prepared op made by hand: its layout checked when made, its arguments at each call
    op = pe._core.EagerOp("relu", [("X", 1)], [("Out", 1)])
    with pytest.raises(TypeError, match="op relu: input 0 must be a pe.eager.Tensor or None, got int"):
        op(1)
    with pytest.raises(pe.InvalidArgumentError, match="op relu takes 1 input tensors, got 2"):
        op(a, a)
    with pytest.raises(pe.InvalidArgumentError, match="op relu: raw\\(\\) input 0 is a int"):
        op.raw(1)
    for bad in ([("X", 10 ** 9)], "garbage", [("X",)]):
        with pytest.raises(pe.InvalidArgumentError, match="EagerOp: inputs must be"):
            pe._core.EagerOp("relu", bad, [("Out", 1)])
    with pytest.raises(pe.InvalidArgumentError, match="op relu has no attr 'nope'"):
        pe._core.EagerOp("relu", [("X", 1)], [("Out", 1)], {"nope": 1})
    with pytest.raises(pe.InternalError, match="eager tensor without a value"):
        op(pe._core.EagerTensor.__new__(pe._core.EagerTensor))
    # ... and give the bits of the op through run_op, attrs and all
    y = pe.to_tensor(_f32(2, 3, 4))
    for got, op_type, outs, attrs in [
            (pe.nn.functional.softmax(y, axis=1), "softmax", {"Out": 1}, {"axis": 1}),
            (y.sum(axis=[0, 2], keepdim=True), "reduce_sum", {"Out": 1}, {"dim": [0, 2], "keep_dim": True,
                                                                          "reduce_all": False}),
            (pe.reshape(y, [4, -1]), "reshape2", {"Out": 1, "XShape": 1}, {"shape": [4, -1]}),
            (pe.transpose(y, [2, 0, 1]), "transpose2", {"Out": 1, "XShape": 1}, {"axis": [2, 0, 1]}),
            (pe.scale(y, 2.0, 1.0), "scale", {"Out": 1}, {"scale": 2.0, "bias": 1.0, "bias_after_scale": True}),
            (-y, "scale", {"Out": 1}, {"scale": -1.0, "bias": 0.0, "bias_after_scale": True})]:
        ref = pe.eager.autograd._run_op(op_type, {"X": y}, outs, attrs)["Out"][0]
        assert got.shape == ref.shape, op_type
        np.testing.assert_array_equal(got.numpy(), ref.numpy(), err_msg=op_type)
    with pytest.raises(TypeError):
        a + np.ones((2, 3), np.float32)
    # run_op's cache of prepared ops keys on the attr types: 1.0 for an int attr is refused every time
    x = pe.to_tensor(_f32(2, 3))
    pe.eager.run_op("elementwise_add", {"X": x, "Y": x}, {"Out": 1}, {"axis": 1})
    with pytest.raises(pe.InvalidArgumentError, match="attr 'axis' must be int"):
        pe.eager.run_op("elementwise_add", {"X": x, "Y": x}, {"Out": 1}, {"axis": 1.0})


def test_tensor_fields_live_in_the_c_base():
    """Tensor's fields (name, stop_gradient, grad, _version, _t) are the C
    base's: settable, a name made only when asked, the value type-checked."""
    pe.disable_static()
    t = pe.to_tensor(X34)
    assert isinstance(t, pe.eager.Tensor) and isinstance(t, pe._core.EagerTensor)
    n1, n2 = t.name, pe.to_tensor(X34).name
    assert n1.startswith("eager_tmp_") and n1 != n2 and t.name == n1
    t.name = "mine"
    assert t.name == "mine"
    with pytest.raises(TypeError):
        t.name = 3
    t.stop_gradient = 0
    assert t.stop_gradient is False
    t.grad = None
    t._version += 2
    assert t._version == 2
    with pytest.raises(TypeError, match="wraps a pe._core.Tensor"):
        t._t = np.zeros(3)
    with pytest.raises(TypeError, match="wraps a pe._core.Tensor"):
        pe.eager.Tensor(np.zeros(3))
    t.extra = 5   # a Python attribute beside the C fields
    assert t.extra == 5


def test_no_grad_is_per_thread():
    """pe.no_grad() in one thread leaves another recording (the C fast path
    keeps the switch per thread, as the Python one)."""
    import threading
    pe.disable_static()
    a = pe.to_tensor(X34, stop_gradient=False)
    entered, done, out = threading.Event(), threading.Event(), {}

    def other():
        entered.wait(10)
        out["t"] = a * a
        done.set()

    th = threading.Thread(target=other)
    th.start()
    with pe.no_grad():
        entered.set()
        assert done.wait(10)
        assert (a * a)._node is None
    th.join(10)
    assert out["t"]._node is not None and not out["t"].stop_gradient


def test_unknown_dtype_names_it_and_the_dtypes_pe_has():
    """Every API that takes a dtype reads it through framework.convert_dtype:
    an unknown name is a TypeError naming it and the supported ones (the
    eager functions used to raise KeyError 'complex64')."""
    pe.disable_static()
    t = pe.to_tensor(np.ones(2, np.float32))
    for fn in (lambda: pe.cast(t, "complex64"), lambda: t.astype("complex64"), lambda: pe.full([1], 0, "complex64"),
               lambda: pe.to_tensor([1], dtype="complex64"), lambda: pe.randn([2], "complex64")):
        with pytest.raises(TypeError, match=r"unknown dtype 'complex64' \(PE has float32, .*, bfloat16\)"):
            fn()
    assert pe.cast(t, "bool_").dtype == "bool" and pe.cast(t, "paddle.int64").dtype == "int64"
    assert pe.cast(t, "Float64").dtype == "float64" and pe.cast(t, np.int32).dtype == "int32"
    with pytest.raises(TypeError, match="dtype complex64 has no PE equivalent"):
        pe.cast(t, np.complex64)
    pe.enable_static()
    with pe.static.program_guard(pe.static.Program(), pe.static.Program()):
        with pytest.raises(TypeError, match=r"unknown dtype 'complex64' \(PE has float32"):
            pe.cast(pe.static.data("v", [2], "float32"), "complex64")


def test_static_only_functional_and_run_op_inputs():
    """pe.nn.functional's functions without an eager form raise UnsupportedError
    naming themselves in eager mode (interpolate used to say 'x must be a
    Variable'); run_op names the slot of an input that is not a tensor."""
    pe.disable_static()
    x = pe.to_tensor(np.ones((1, 1, 2, 2), np.float32))
    for fn, name in [(lambda: pe.nn.functional.interpolate(x, scale_factor=2), "interpolate"),
                     (lambda: pe.nn.functional.upsample(x, size=[4, 4]), "upsample"),
                     (lambda: pe.nn.functional.leaky_relu(x), "leaky_relu"),
                     (lambda: pe.nn.functional.conv2d_transpose(x, x), "conv2d_transpose")]:
        with pytest.raises(pe.UnsupportedError, match=r"pe.nn.functional.%s has no eager form yet .*conv2d" % name):
            fn()
    with pytest.raises(TypeError, match=r"run_op\(relu\): input X must be a pe.eager.Tensor, .*got ndarray"):
        pe.eager.run_op("relu", {"X": np.ones(3, np.float32)}, {"Out": 1})
    with pytest.raises(TypeError, match=r"run_op\(concat\): input X\[1\] must be a pe.eager.Tensor, .*got list"):
        pe.eager.run_op("concat", {"X": [x, [1.0]]}, {"Out": 1}, {"axis": 0})
    pe.enable_static()
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup):  # static mode: the builders as before
        v = pe.static.data("v", [1, 1, 2, 2], "float32")
        assert list(pe.nn.functional.interpolate(v, scale_factor=2).shape) == [1, 1, 4, 4]
