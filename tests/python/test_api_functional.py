"""tests/python/test_api_functional.py — pe.*, pe.nn.functional and pe.static.nn against PyTorch.

One program per group of functions is built through the Python API, run
once by the Executor on seeded random inputs, and every fetched result is
compared with PyTorch (float64) computed from the same inputs and
parameters; the shapes the Python layer declared for the outputs must be
the shapes the engine produced (-1 = any). Also checks Paddle's naming of
layer outputs and that the gradient of a composite expression matches
torch.autograd.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import pe
import pe.nn.functional as F
from pe.utils import unique_name

pe.enable_static()

RTOL, ATOL = 1e-4, 1e-5


def run(build, feeds):
    """build() -> {key: Variable}; returns ({key: result}, {key: Variable}, scope)."""
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        outs = build()
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    keys = list(outs)
    vals = exe.run(main, feed=feeds, fetch_list=[outs[k] for k in keys], scope=scope)
    for k, v in zip(keys, vals):
        declared = outs[k].shape
        assert len(declared) == v.ndim and all(d in (-1, g) for d, g in zip(declared, v.shape)), (
            k, declared, v.shape)
    return dict(zip(keys, vals)), outs, scope


def t(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64) if np.asarray(a).dtype.kind == "f" else torch.tensor(a)


def close(got, want, key):
    np.testing.assert_allclose(got, np.asarray(want, dtype=np.float64), rtol=RTOL, atol=ATOL, err_msg=key)


def test_activations_and_losses():
    rng = np.random.RandomState(0)
    xv = rng.randn(6, 5).astype(np.float32)
    yv = rng.randn(6, 5).astype(np.float32)
    lab = rng.randint(0, 5, (6, 1)).astype(np.int64)

    def build():
        x = pe.static.data("x", [None, 5], "float32")
        y = pe.static.data("y", [None, 5], "float32")
        label = pe.static.data("label", [None, 1], "int64")
        sm = F.softmax(x)
        return {"relu": F.relu(x), "sigmoid": F.sigmoid(x), "tanh": F.tanh(x), "gelu": F.gelu(x),
                "gelu_tanh": F.gelu(x, approximate=True), "leaky": F.leaky_relu(x, 0.1), "softmax": sm,
                "softmax0": F.softmax(x, axis=0), "log_softmax": F.log_softmax(x), "ce": F.cross_entropy(x, label),
                "ce_none": F.cross_entropy(x, label, reduction="none"),
                "ce_sum": F.cross_entropy(x, label, reduction="sum"),
                "ce_prob": F.cross_entropy(sm, label, use_softmax=False),
                "swce": F.softmax_with_cross_entropy(x, label), "mse": F.mse_loss(x, y),
                "mse_sum": F.mse_loss(x, y, reduction="sum"), "acc": pe.metric.accuracy(sm, label, k=2)}

    r, _, _ = run(build, {"x": xv, "y": yv, "label": lab})
    x, y, lb = t(xv), t(yv), torch.tensor(lab[:, 0])
    close(r["relu"], torch.relu(x), "relu")
    close(r["sigmoid"], torch.sigmoid(x), "sigmoid")
    close(r["tanh"], torch.tanh(x), "tanh")
    close(r["gelu"], TF.gelu(x), "gelu")
    close(r["gelu_tanh"], TF.gelu(x, approximate="tanh"), "gelu_tanh")
    close(r["leaky"], TF.leaky_relu(x, 0.1), "leaky")
    close(r["softmax"], torch.softmax(x, -1), "softmax")
    close(r["softmax0"], torch.softmax(x, 0), "softmax0")
    close(r["log_softmax"], torch.log_softmax(x, -1), "log_softmax")
    close(r["ce"], [TF.cross_entropy(x, lb)], "ce")
    close(r["ce_none"], TF.cross_entropy(x, lb, reduction="none")[:, None], "ce_none")
    close(r["ce_sum"], [TF.cross_entropy(x, lb, reduction="sum")], "ce_sum")
    close(r["ce_prob"], [TF.cross_entropy(x, lb)], "ce_prob")
    close(r["swce"], TF.cross_entropy(x, lb, reduction="none")[:, None], "swce")
    close(r["mse"], [TF.mse_loss(x, y)], "mse")
    close(r["mse_sum"], [TF.mse_loss(x, y, reduction="sum")], "mse_sum")
    top2 = torch.topk(x, 2, -1).indices
    close(r["acc"], [(top2 == lb[:, None]).any(1).double().mean()], "acc")


def test_tensor_functions():
    rng = np.random.RandomState(1)
    av = rng.randn(2, 3, 4).astype(np.float32)
    bv = rng.randn(2, 4, 5).astype(np.float32)
    cv = rng.randn(3, 4).astype(np.float32)

    def build():
        a = pe.static.data("a", [None, 3, 4], "float32")
        b = pe.static.data("b", [None, 4, 5], "float32")
        c = pe.static.data("c", [3, 4], "float32")
        extra = {}
        if pe.framework.has_op("split") and pe.framework.has_op("slice"):
            parts = pe.split(a, [1, -1], axis=1)
            extra = {"split0": parts[0], "split1": parts[1], "slice": pe.slice(a, [1, 2], [1, -3], [3, 100])}
        return {**extra, "mean": pe.mean(a), "mean_ax": pe.mean(a, axis=[1, 2]), "mean_keep": pe.mean(a, axis=-1, keepdim=True),
                "sum": pe.sum(a), "sum_ax": pe.sum(a, axis=1), "matmul": pe.matmul(a, b),
                "matmul_t": pe.matmul(c, a, transpose_x=True), "reshape": pe.reshape(a, [0, -1]),
                "transpose": pe.transpose(a, [2, 0, 1]), "concat": pe.concat([a, a * 2.0], axis=2),
                "flatten": pe.flatten(a, start_axis=1), "flatten_all": pe.flatten(a),
                "cast": pe.cast(a, "float64"), "argmax": pe.argmax(a, axis=2), "argmax_all": pe.argmax(a),
                "add": pe.add(a, c), "sub": pe.subtract(a, c), "mul": pe.multiply(a, c), "div": pe.divide(a, c + 5.0),
                "ops": (a + 1.0) * 2.0 - a / 4.0, "rops": 3.0 - a, "rdiv": 1.0 / (c * c + 1.0), "neg": -c,
                "scale": pe.scale(a, 2.0, 1.0), "unsqueeze": pe.unsqueeze(c, [0]), "squeeze": pe.squeeze(pe.unsqueeze(c, 1)),
                "full": pe.full([2, 2], 3.5), "topk": pe.topk(c, 2)[0]}

    r, outs, _ = run(build, {"a": av, "b": bv, "c": cv})
    a, b, c = t(av), t(bv), t(cv)
    close(r["mean"], [a.mean()], "mean")
    close(r["mean_ax"], a.mean((1, 2)), "mean_ax")
    close(r["mean_keep"], a.mean(-1, keepdim=True), "mean_keep")
    close(r["sum"], [a.sum()], "sum")
    close(r["sum_ax"], a.sum(1), "sum_ax")
    close(r["matmul"], a @ b, "matmul")
    close(r["matmul_t"], c.T @ a, "matmul_t")
    close(r["reshape"], a.reshape(2, -1), "reshape")
    close(r["transpose"], a.permute(2, 0, 1), "transpose")
    close(r["concat"], torch.cat([a, a * 2], 2), "concat")
    close(r["flatten"], a.reshape(2, -1), "flatten")
    close(r["flatten_all"], a.reshape(-1), "flatten_all")
    assert r["cast"].dtype == np.float64
    close(r["cast"], a, "cast")
    assert r["argmax"].dtype == np.int64
    np.testing.assert_array_equal(r["argmax"], a.argmax(2).numpy())
    np.testing.assert_array_equal(r["argmax_all"].reshape(-1), [a.argmax().item()])
    close(r["add"], a + c, "add")
    close(r["sub"], a - c, "sub")
    close(r["mul"], a * c, "mul")
    close(r["div"], a / (c + 5), "div")
    close(r["ops"], (a + 1) * 2 - a / 4, "ops")
    close(r["rops"], 3 - a, "rops")
    close(r["rdiv"], 1 / (c * c + 1), "rdiv")
    close(r["neg"], -c, "neg")
    close(r["scale"], a * 2 + 1, "scale")
    close(r["unsqueeze"], c[None], "unsqueeze")
    close(r["squeeze"], c, "squeeze")
    if "slice" in r:
        close(r["split0"], a[:, :1], "split0")
        close(r["split1"], a[:, 1:], "split1")
        close(r["slice"], a[:, 1:3, 1:], "slice")
    close(r["full"], np.full((2, 2), 3.5), "full")
    close(r["topk"], torch.topk(c, 2, -1).values, "topk")
    assert outs["mean"].name == "mean_0.tmp_0" and outs["matmul"].name.startswith("matmul_v2_")


def test_conv_pool_norm_embedding_layers():
    rng = np.random.RandomState(2)
    img = rng.randn(2, 3, 9, 9).astype(np.float32)
    ids = rng.randint(0, 10, (2, 4)).astype(np.int64)
    seq = rng.randn(2, 4, 6).astype(np.float32)

    def build():
        x = pe.static.data("img", [None, 3, 9, 9], "float32")
        i = pe.static.data("ids", [None, 4], "int64")
        s = pe.static.data("seq", [None, 4, 6], "float32")
        conv = pe.static.nn.conv2d(x, 4, 3, stride=2, padding=1, act="relu")
        conv_nb = pe.static.nn.conv2d(x, 2, [3, 2], padding="SAME", bias_attr=False)
        w = conv.block.var("conv2d_0.w_0")
        return {"conv": conv, "conv_nb": conv_nb, "fconv": F.conv2d(x, w, stride=1, padding=0, dilation=2),
                "maxp": F.max_pool2d(x, 3, stride=2, padding=1), "avgp": F.avg_pool2d(x, 2),
                "avgp_ceil": F.avg_pool2d(x, 2, ceil_mode=True, exclusive=True),
                "bn": pe.static.nn.batch_norm(x, is_test=True), "emb": pe.static.nn.embedding(i, [10, 5]),
                "ln": F.layer_norm(s, [6]), "linear": F.linear(s, pe.static.nn.fc(s, 3, num_flatten_dims=2).block.var(
                    "fc_0.w_0"))}

    if not all(pe.framework.has_op(o) for o in ("lookup_table_v2", "layer_norm")):
        pytest.skip("this build lacks lookup_table_v2 or layer_norm")
    r, outs, scope = run(build, {"img": img, "ids": ids, "seq": seq})
    g = lambda n: t(np.array(scope.find_var(n).get_tensor()))  # noqa: E731
    x = t(img)
    close(r["conv"], torch.relu(TF.conv2d(x, g("conv2d_0.w_0"), g("conv2d_0.b_0"), stride=2, padding=1)), "conv")
    xp = TF.pad(x, (0, 1, 1, 1))  # SAME for a [3, 2] kernel, stride 1: rows 1+1, cols 0+1
    close(r["conv_nb"], TF.conv2d(xp, g("conv2d_1.w_0")), "conv_nb")
    close(r["fconv"], TF.conv2d(x, g("conv2d_0.w_0"), dilation=2), "fconv")
    close(r["maxp"], TF.max_pool2d(x, 3, 2, 1), "maxp")
    close(r["avgp"], TF.avg_pool2d(x, 2), "avgp")
    close(r["avgp_ceil"], TF.avg_pool2d(x, 2, ceil_mode=True), "avgp_ceil")
    close(r["bn"], TF.batch_norm(x, g("batch_norm_0.w_1"), g("batch_norm_0.w_2"), g("batch_norm_0.w_0"),
                                 g("batch_norm_0.b_0"), training=False, eps=1e-5), "bn")
    close(r["emb"], g("embedding_0.w_0")[torch.tensor(ids)], "emb")
    close(r["ln"], TF.layer_norm(t(seq), [6], eps=1e-5), "ln")
    close(r["linear"], t(seq) @ g("fc_0.w_0"), "linear")
    assert outs["conv"].name == "conv2d_0.tmp_2" and outs["bn"].name == "batch_norm_0.tmp_2"
    # conv2d's default initializer is Normal(0, sqrt(2 / (k*k*C))): check the spread is in that range
    std = float(g("conv2d_0.w_0").std())
    assert 0.4 * (2.0 / 27) ** 0.5 < std < 1.6 * (2.0 / 27) ** 0.5


def test_gradient_of_composite_matches_autograd():
    rng = np.random.RandomState(3)
    xv = rng.randn(5, 4).astype(np.float32)
    wv = rng.randn(4, 3).astype(np.float32)

    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 4], "float32")
        x.stop_gradient = False
        w = pe.static.data("w", [4, 3], "float32")
        w.stop_gradient = False
        h = F.gelu(pe.matmul(x, w))
        z = pe.mean(pe.sum(F.log_softmax(h) * h, axis=1) + pe.mean(pe.transpose(pe.reshape(h, [0, 3, 1]), [0, 2, 1])))
        gx, gw = pe.static.gradients([z], [x, w])
    exe = pe.static.Executor()
    got_x, got_w = exe.run(main, feed={"x": xv, "w": wv}, fetch_list=[gx, gw], scope=pe.static.Scope())
    X = torch.tensor(xv, dtype=torch.float64, requires_grad=True)
    W = torch.tensor(wv, dtype=torch.float64, requires_grad=True)
    H = TF.gelu(X @ W)
    Z = ((torch.log_softmax(H, 1) * H).sum(1) + H.mean()).mean()
    Z.backward()
    close(got_x, X.grad, "dx")
    close(got_w, W.grad, "dw")


def test_math_functions_and_later_activations():
    """pe.exp ... pe.clip and F.relu6 ... F.selu: values and Paddle's attrs, and the
    gradient of their sum through the grad ops (sign/floor/ceil/round: 0)."""
    rng = np.random.RandomState(4)
    xv = rng.uniform(-4, 4, (6, 5)).astype(np.float32)
    pv = rng.uniform(0.2, 4, (6, 5)).astype(np.float32)

    def fns(x, p):
        return {"exp": pe.exp(x), "log": pe.log(p), "sqrt": pe.sqrt(p), "rsqrt": pe.rsqrt(p),
                "square": pe.square(x), "abs": pe.abs(x), "sign": pe.sign(x), "floor": pe.floor(x),
                "ceil": pe.ceil(x), "round": pe.round(x), "pow": pe.pow(p, 1.5), "clip": pe.clip(x, -1.0, 2.0),
                "clip_min": pe.clip(x, min=0.5), "relu6": F.relu6(x * 2), "elu": F.elu(x, 0.5),
                "softplus": F.softplus(x, beta=2, threshold=3), "swish": F.swish(x),
                "hardsigmoid": F.hardsigmoid(x), "selu": F.selu(x)}

    def ref(x, p):
        return {"exp": torch.exp(x), "log": torch.log(p), "sqrt": torch.sqrt(p), "rsqrt": torch.rsqrt(p),
                "square": x * x, "abs": x.abs(), "sign": x.sign(), "floor": x.floor(), "ceil": x.ceil(),
                "round": x.sign() * (x.abs() + 0.5).floor(), "pow": p ** 1.5, "clip": x.clamp(-1.0, 2.0),
                "clip_min": x.clamp(min=0.5), "relu6": TF.relu6(x * 2), "elu": TF.elu(x, 0.5),
                "softplus": TF.softplus(x, 2, 3), "swish": TF.silu(x),
                "hardsigmoid": (x * 0.1666667 + 0.5).clamp(0, 1), "selu": TF.selu(x)}

    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 5], "float32")
        p = pe.static.data("p", [None, 5], "float32")
        x.stop_gradient = p.stop_gradient = False
        outs = fns(x, p)
        total = pe.mean(sum(pe.sum(v) for v in outs.values()))
        gx, gp = pe.static.gradients([total], [x, p])
    keys = list(outs)
    assert [main.global_block().ops[i].type for i in range(2)] == ["exp", "log"]
    attrs = {}
    for op in main.global_block().ops:
        attrs.setdefault(op.type, op.all_attrs())  # the first op of each type
    assert attrs["pow"]["factor"] == 1.5 and attrs["clip"]["min"] == -1.0 and attrs["clip"]["max"] == 2.0
    assert attrs["relu6"]["threshold"] == 6.0 and abs(attrs["hard_sigmoid"]["slope"] - 0.1666667) < 1e-9
    vals = pe.static.Executor().run(main, feed={"x": xv, "p": pv}, fetch_list=[outs[k] for k in keys] + [gx, gp],
                                    scope=pe.static.Scope())
    X = torch.tensor(xv, dtype=torch.float64, requires_grad=True)
    P = torch.tensor(pv, dtype=torch.float64, requires_grad=True)
    want = ref(X, P)
    for k, v in zip(keys, vals):
        assert list(v.shape) == [6, 5], k
        close(v, want[k].detach(), k)
    sum(w.sum() for w in want.values()).div(1).backward()
    close(vals[-2], X.grad, "dx")
    close(vals[-1], P.grad, "dp")
    with pytest.raises(pe.InvalidArgumentError, match="selu: scale must be greater than 1.0"):
        with pe.static.program_guard(pe.static.Program(), pe.static.Program()):
            F.selu(pe.static.data("a", [2], "float32"), scale=0.5)


def test_binary_compare_logical_and_where():
    """pe.maximum ... pe.where: values against torch, bool results, Paddle's op
    names, and the gradients (max/min ties to y, as Paddle; where to x / y)."""
    rng = np.random.RandomState(5)
    xv = rng.randint(-3, 4, (6, 5)).astype(np.float32)  # ties for max/min/equal
    yv = rng.randint(-3, 4, (5,)).astype(np.float32)
    pv = rng.uniform(0.5, 2, (6, 5)).astype(np.float32)
    iv = rng.randint(-20, 20, (6, 5)).astype(np.int64)
    jv = (rng.randint(1, 6, (5,)) * rng.choice([-1, 1], 5)).astype(np.int64)

    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 5], "float32")
        y = pe.static.data("y", [5], "float32")
        p = pe.static.data("p", [None, 5], "float32")
        i = pe.static.data("i", [None, 5], "int64")
        j = pe.static.data("j", [5], "int64")
        x.stop_gradient = y.stop_gradient = p.stop_gradient = False
        gt = pe.greater_than(x, y)
        outs = {"maximum": pe.maximum(x, y), "minimum": pe.minimum(x, y), "pow": pe.pow(p, y),
                "pow_op": p ** y, "mod": pe.mod(i, j), "remainder": pe.remainder(x, y + 10.0),
                "floor_divide": pe.floor_divide(i, j), "floordiv_op": i // j, "mod_op": i % j,
                "equal": pe.equal(x, y), "not_equal": pe.not_equal(x, y), "less_than": pe.less_than(x, y),
                "less_equal": pe.less_equal(x, y), "greater_than": gt, "greater_equal": pe.greater_equal(x, y),
                "lt_op": x < y, "ge_op": x >= 0.5,
                "logical_and": pe.logical_and(gt, pe.less_than(x, p)), "logical_or": pe.logical_or(gt, x > p),
                "logical_xor": pe.logical_xor(gt, x > p), "logical_not": pe.logical_not(gt),
                "where": pe.where(gt, x, p), "where_bcast": pe.where(gt, x, y)}
        grad_keys = ["maximum", "minimum", "pow", "where", "where_bcast"]
        total = pe.mean(sum(pe.sum(outs[k] * (n + 1.0)) for n, k in enumerate(grad_keys)))
        gx, gy, gp = pe.static.gradients([total], [x, y, p])
    types = [op.type for op in main.global_block().ops]
    for op in ("elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod", "elementwise_floordiv",
               "equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal", "logical_and",
               "logical_or", "logical_xor", "logical_not", "where"):
        assert op in types, op
    keys = list(outs)
    vals = pe.static.Executor().run(main, feed={"x": xv, "y": yv, "p": pv, "i": iv, "j": jv},
                                    fetch_list=[outs[k] for k in keys] + [gx, gy, gp], scope=pe.static.Scope())
    X, Y, P = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (xv, yv, pv))
    I, J = torch.tensor(iv), torch.tensor(jv)
    G = X > Y
    want = {"maximum": torch.where(X > Y, X, Y), "minimum": torch.where(X < Y, X, Y), "pow": P ** Y,
            "pow_op": P ** Y, "mod": torch.remainder(I, J), "remainder": torch.remainder(X, Y + 10.0),
            "floor_divide": torch.div(I, J, rounding_mode="floor"), "floordiv_op": torch.div(I, J, rounding_mode="floor"),
            "mod_op": torch.remainder(I, J), "equal": X == Y, "not_equal": X != Y, "less_than": X < Y,
            "less_equal": X <= Y, "greater_than": G, "greater_equal": X >= Y, "lt_op": X < Y, "ge_op": X >= 0.5,
            "logical_and": G & (X < P), "logical_or": G | (X > P), "logical_xor": G ^ (X > P),
            "logical_not": ~G, "where": torch.where(G, X, P), "where_bcast": torch.where(G, X, Y)}
    for k, v in zip(keys, vals):
        w = want[k].detach()
        if w.dtype == torch.bool:
            assert v.dtype == np.bool_ and outs[k].dtype == "bool", k
            np.testing.assert_array_equal(v, w.numpy(), err_msg=k)
        elif w.dtype == torch.int64:
            assert v.dtype == np.int64, k
            np.testing.assert_array_equal(v, w.numpy(), err_msg=k)
        else:
            close(v, w, k)
    total_t = sum((want[k] * (n + 1.0)).sum() for n, k in enumerate(grad_keys)) / 1.0
    total_t.backward()
    close(vals[-3], X.grad, "dx")
    close(vals[-2], Y.grad, "dy")
    close(vals[-1], P.grad, "dp")


def test_reductions_max_min_prod_any_all():
    """pe.max / min / prod / any / all: Paddle's reduce ops and attrs, values, and the
    gradients of max (to the maximum) and prod against autograd."""
    rng = np.random.RandomState(5)
    xv = (rng.uniform(0.5, 1.5, (4, 3, 5)) * rng.choice([-1, 1], (4, 3, 5))).astype(np.float32)
    bv = rng.rand(4, 3, 5) < 0.7
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3, 5], "float32")
        b = pe.static.data("b", [None, 3, 5], "bool")
        x.stop_gradient = False
        outs = {"max": pe.max(x), "max1": pe.max(x, axis=1), "min_keep": pe.min(x, axis=[0, 2], keepdim=True),
                "prod": pe.prod(x, axis=-1), "any": pe.any(b, axis=0), "all": pe.all(b),
                "all_keep": pe.all(b, axis=(1, 2), keepdim=True)}
        total = pe.sum(outs["max1"]) + pe.sum(outs["prod"])
        gx, = pe.static.gradients([total], [x])
    ops = [op.type for op in main.global_block().ops]
    assert ops[:7] == ["reduce_max", "reduce_max", "reduce_min", "reduce_prod", "reduce_any", "reduce_all",
                       "reduce_all"]
    assert [list(outs[k].shape) for k in ("max", "max1", "min_keep", "prod", "any", "all", "all_keep")] == [
        [1], [-1, 5], [1, 3, 1], [-1, 3], [3, 5], [1], [-1, 1, 1]]
    assert outs["any"].dtype == "bool" and outs["all"].dtype == "bool"
    keys = list(outs)
    vals = pe.static.Executor().run(main, feed={"x": xv, "b": bv}, fetch_list=[outs[k] for k in keys] + [gx],
                                    scope=pe.static.Scope())
    got = dict(zip(keys, vals))
    X = torch.tensor(xv, dtype=torch.float64, requires_grad=True)
    close(got["max"], [X.max().item()], "max")
    close(got["max1"], X.amax(1).detach(), "max1")
    close(got["min_keep"], X.amin((0, 2), keepdim=True).detach(), "min_keep")
    close(got["prod"], X.prod(-1).detach(), "prod")
    np.testing.assert_array_equal(got["any"], bv.any(0))
    np.testing.assert_array_equal(got["all"], [bv.all()])
    np.testing.assert_array_equal(got["all_keep"], bv.all((1, 2), keepdims=True))
    (X.amax(1).sum() + X.prod(-1).sum()).backward()
    close(vals[-1], X.grad, "dx")


def test_stack_tile_expand_cumsum_assign_shape_increment():
    """pe.stack / unstack / expand / tile / cumsum / assign / shape / increment: Paddle's ops and
    attrs, values, declared shapes, and the gradients of the differentiable ones against autograd
    (a flattened cumsum's gradient has x's dims)."""
    rng = np.random.RandomState(6)
    av, bv, cv = (rng.randn(2, 3).astype(np.float32) for _ in range(3))
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        a, b = pe.static.data("a", [2, 3], "float32"), pe.static.data("b", [2, 3], "float32")
        c = pe.static.data("c", [None, 3], "float32")
        for v in (a, b, c):
            v.stop_gradient = False
        counter = pe.full([1], 5, "int64")
        outs = {"stack": pe.stack([a, b], axis=1), "unstack0": pe.unstack(a, axis=1)[0],
                "expand": pe.expand(pe.unsqueeze(a, 1), [2, 4, 3]), "tile": pe.tile(b, [2, 1]),
                "cumsum": pe.cumsum(c, axis=0), "cumsum_flat": pe.cumsum(a), "assign": pe.assign(c),
                "shape": pe.shape(c), "counter": pe.increment(counter, 2)}
        total = pe.sum(outs["stack"] * 2) + pe.sum(outs["unstack0"]) + pe.sum(outs["expand"])
        total = total + pe.sum(outs["tile"] * outs["tile"]) + pe.sum(outs["cumsum"] * outs["assign"])
        total = total + pe.sum(outs["cumsum_flat"] * outs["cumsum_flat"])
        ga, gb, gc = pe.static.gradients([total], [a, b, c])
    ops = [op.type for op in main.global_block().ops]
    for op in ("stack", "unstack", "expand_v2", "tile", "cumsum", "assign", "shape", "increment"):
        assert op in ops, op
    assert outs["counter"] is counter
    assert [list(outs[k].shape) for k in ("stack", "unstack0", "expand", "tile", "cumsum", "cumsum_flat", "shape")] == [
        [2, 2, 3], [2], [2, 4, 3], [4, 3], [-1, 3], [6], [2]]
    keys = list(outs)
    vals = pe.static.Executor().run(main, feed={"a": av, "b": bv, "c": cv},
                                    fetch_list=[outs[k] for k in keys] + [ga, gb, gc], scope=pe.static.Scope())
    got = dict(zip(keys, vals))
    A, B, C = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (av, bv, cv))
    want = {"stack": torch.stack([A, B], 1), "unstack0": A[:, 0], "expand": A.unsqueeze(1).expand(2, 4, 3),
            "tile": B.repeat(2, 1), "cumsum": C.cumsum(0), "cumsum_flat": A.reshape(-1).cumsum(0), "assign": C}
    for k, w in want.items():
        close(got[k], w.detach(), k)
    np.testing.assert_array_equal(got["shape"], np.array([2, 3], np.int32))
    assert got["shape"].dtype == np.int32
    np.testing.assert_array_equal(got["counter"], [7])
    (want["stack"].sum() * 2 + want["unstack0"].sum() + want["expand"].sum() + (want["tile"] ** 2).sum()
     + (want["cumsum"] * C).sum() + (want["cumsum_flat"] ** 2).sum()).backward()
    close(vals[-3], A.grad, "da")
    close(vals[-2], B.grad, "db")
    close(vals[-1], C.grad, "dc")


def test_gather_scatter_one_hot_cos_bce_label_smooth_pad():
    """pe.gather / gather_nd / scatter and F.one_hot / cosine_similarity /
    binary_cross_entropy_with_logits / label_smooth / pad: Paddle's ops, values and declared
    shapes against torch, and the gradients of a loss through all of them against autograd."""
    rng = np.random.RandomState(7)
    xv = rng.randn(5, 4).astype(np.float32)
    uv = rng.randn(3, 4).astype(np.float32)
    iv = np.array([4, 0, 4, 2], np.int64)
    sv = np.array([3, 1, 3], np.int64)
    ndv = np.array([[0, 1], [4, 3], [0, 1]], np.int64)
    lv = rng.rand(5, 4).astype(np.float32)
    cv = np.array([2, 0, 1, 2, 1], np.int64)
    img = rng.randn(2, 3, 4, 5).astype(np.float32)
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x, u = pe.static.data("x", [5, 4], "float32"), pe.static.data("u", [3, 4], "float32")
        i, s = pe.static.data("i", [4], "int64"), pe.static.data("s", [3], "int64")
        nd, lab = pe.static.data("nd", [3, 2], "int64"), pe.static.data("lab", [5, 4], "float32")
        c, im = pe.static.data("c", [5], "int64"), pe.static.data("im", [2, 3, 4, 5], "float32")
        for v in (x, u, im):
            v.stop_gradient = False
        outs = {"gather": pe.gather(x, i), "gather1": pe.gather(x, pe.static.data("i1", [2], "int32"), axis=1),
                "gather_nd": pe.gather_nd(x, nd), "scatter": pe.scatter(x, s, u),
                "scatter_add": pe.scatter(x, s, u, overwrite=False), "one_hot": F.one_hot(c, 3),
                "cos": F.cosine_similarity(x, lab), "bce": F.binary_cross_entropy_with_logits(x, lab),
                "bce_none": F.binary_cross_entropy_with_logits(x, lab, reduction="none"),
                "smooth": F.label_smooth(lab, epsilon=0.2), "pad_c": F.pad(x, [1, 0, 2, 3], value=0.5),
                "pad_reflect": F.pad(im, [1, 2, 2, 1], mode="reflect"),
                "pad_rep_nhwc": F.pad(im, [1, 1, 0, 2], mode="replicate", data_format="NHWC")}
        total = (pe.sum(outs["gather"] * outs["gather"]) + pe.sum(outs["gather_nd"]) + pe.sum(outs["scatter_add"] * 3)
                 + pe.sum(outs["cos"]) + outs["bce"] + pe.sum(outs["pad_c"] * outs["pad_c"])
                 + pe.sum(outs["pad_reflect"] * outs["pad_reflect"]) + pe.sum(outs["pad_rep_nhwc"]))
        gx, gu, gim = pe.static.gradients([total], [x, u, im])
    ops = {op.type for op in main.global_block().ops}
    for op in ("gather", "gather_nd", "scatter", "one_hot_v2", "sigmoid_cross_entropy_with_logits", "label_smooth",
               "pad", "pad3d"):
        assert op in ops, op
    keys = list(outs)
    feeds = {"x": xv, "u": uv, "i": iv, "s": sv, "nd": ndv, "lab": lv, "c": cv, "im": img,
             "i1": np.array([3, 1], np.int32)}
    vals = pe.static.Executor().run(main, feed=feeds, fetch_list=[outs[k] for k in keys] + [gx, gu, gim],
                                    scope=pe.static.Scope())
    got = dict(zip(keys, vals))
    for k in keys:
        d = outs[k].shape
        assert len(d) == got[k].ndim and all(a in (-1, b) for a, b in zip(d, got[k].shape)), (k, d, got[k].shape)
    X, U, IM = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (xv, uv, img))
    L = torch.tensor(lv, dtype=torch.float64)
    S = torch.tensor(sv)
    over = X.clone()
    for k in range(3):
        over[S[k]] = U[k]
    want = {"gather": X[torch.tensor(iv)], "gather1": X[:, [3, 1]], "gather_nd": X[ndv[:, 0], ndv[:, 1]],
            "scatter": over, "scatter_add": X.index_fill(0, S, 0).index_add(0, S, U),
            "one_hot": TF.one_hot(torch.tensor(cv), 3).double(), "cos": TF.cosine_similarity(X, L, dim=1, eps=1e-8),
            "bce": TF.binary_cross_entropy_with_logits(X, L),
            "bce_none": TF.binary_cross_entropy_with_logits(X, L, reduction="none"), "smooth": 0.8 * L + 0.2 / 4,
            "pad_c": TF.pad(X, [2, 3, 1, 0], value=0.5), "pad_reflect": TF.pad(IM, [1, 2, 2, 1], mode="reflect"),
            "pad_rep_nhwc": TF.pad(IM.movedim(-1, 1), [1, 1, 0, 2], mode="replicate").movedim(1, -1)}
    for k, w in want.items():
        close(got[k], w.detach(), k)
    assert got["one_hot"].dtype == np.float32
    tot = ((want["gather"] ** 2).sum() + want["gather_nd"].sum() + (want["scatter_add"] * 3).sum() + want["cos"].sum()
           + want["bce"] + (want["pad_c"] ** 2).sum() + (want["pad_reflect"] ** 2).sum() + want["pad_rep_nhwc"].sum())
    tot.backward()
    close(vals[-3], X.grad, "dx")
    close(vals[-2], U.grad, "du")
    close(vals[-1], IM.grad, "dim")


def test_index_and_pad_api_errors():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [5, 4], "float32")
        with pytest.raises(TypeError, match="gather: index must be int32 or int64"):
            pe.gather(x, x)
        with pytest.raises(pe.InvalidArgumentError, match="gather: axis 2 is out of range"):
            pe.gather(x, pe.static.data("i", [2], "int64"), axis=2)
        with pytest.raises(TypeError, match="one_hot: x must be int32 or int64"):
            F.one_hot(x, 3)
        with pytest.raises(pe.InvalidArgumentError, match="pad: x of shape"):
            F.pad(x, [1, 1], mode="reflect")
        with pytest.raises(pe.InvalidArgumentError, match="pad: mode 'wrap'"):
            F.pad(x, [1, 1], mode="wrap")


def test_bce_with_logits_weights():
    """weight and pos_weight as Paddle 2.x (the loss times 1 + (pos_weight - 1) label): torch's
    formula for hard 0/1 labels; reductions sum / none."""
    rng = np.random.RandomState(8)
    xv = rng.randn(6, 3).astype(np.float32)
    lv = rng.randint(0, 2, (6, 3)).astype(np.float32)
    wv, pv = rng.rand(6, 3).astype(np.float32), (rng.rand(3) * 3).astype(np.float32)

    def build():
        x, lab = pe.static.data("x", [6, 3], "float32"), pe.static.data("lab", [6, 3], "float32")
        w, pw = pe.static.data("w", [6, 3], "float32"), pe.static.data("pw", [3], "float32")
        return {"sum": F.binary_cross_entropy_with_logits(x, lab, weight=w, pos_weight=pw, reduction="sum"),
                "none": F.binary_cross_entropy_with_logits(x, lab, pos_weight=pw, reduction="none")}
    got, _, _ = run(build, {"x": xv, "lab": lv, "w": wv, "pw": pv})
    X, L, W, P = (torch.tensor(v, dtype=torch.float64) for v in (xv, lv, wv, pv))
    close(got["sum"], TF.binary_cross_entropy_with_logits(X, L, weight=W, pos_weight=P, reduction="sum"), "sum")
    close(got["none"], TF.binary_cross_entropy_with_logits(X, L, pos_weight=P, reduction="none"), "none")


def test_conv_transpose_interpolate_group_instance_norm():
    """F.conv2d_transpose (output_padding, output_size, groups, bias), F.conv2d with groups == C
    (Paddle 2.x: the depthwise_conv2d op), F.interpolate / upsample (nearest, bilinear with and
    without align_corners, scale_factor), F.group_norm, F.instance_norm; static.nn's
    conv2d_transpose, group_norm and instance_norm layers with their parameters."""
    rng = np.random.RandomState(7)
    img = rng.randn(2, 4, 5, 6).astype(np.float32)
    wt = rng.randn(4, 3, 3, 3).astype(np.float32)
    wg = rng.randn(4, 2, 3, 3).astype(np.float32)
    wd = rng.randn(8, 1, 3, 3).astype(np.float32)
    bv = rng.randn(3).astype(np.float32)
    sv, gv = rng.randn(4).astype(np.float32), rng.randn(4).astype(np.float32)

    def build():
        x = pe.static.data("img", [None, 4, 5, 6], "float32")
        w = pe.static.data("wt", [4, 3, 3, 3], "float32")
        w2 = pe.static.data("wg", [4, 2, 3, 3], "float32")
        w3 = pe.static.data("wd", [8, 1, 3, 3], "float32")
        b = pe.static.data("bv", [3], "float32")
        s = pe.static.data("sv", [4], "float32")
        g = pe.static.data("gv", [4], "float32")
        return {"ct": F.conv2d_transpose(x, w, b, stride=2, padding=1, output_padding=1),
                "ct_size": F.conv2d_transpose(x, w, stride=2, padding=1, output_size=[10, 11]),
                "ct_groups": F.conv2d_transpose(x, w2, stride=[1, 2], groups=2, dilation=2),
                "dw": F.conv2d(x, w3, padding=1, groups=4),
                "near": F.interpolate(x, size=[10, 9]), "near_sc": F.upsample(x, scale_factor=2),
                "bil": F.interpolate(x, size=[7, 11], mode="bilinear"),
                "bil_ac": F.interpolate(x, scale_factor=[2, 1.5], mode="bilinear", align_corners=True),
                "gn": F.group_norm(x, 2, weight=s, bias=g), "gn_plain": F.group_norm(x, 4, epsilon=1e-3),
                "in": F.instance_norm(x, weight=s, bias=g),
                "l_ct": pe.static.nn.conv2d_transpose(x, 6, filter_size=4, stride=2, padding=1, act="relu"),
                "l_gn": pe.static.nn.group_norm(x, 2), "l_in": pe.static.nn.instance_norm(x)}

    r, outs, scope = run(build, {"img": img, "wt": wt, "wg": wg, "wd": wd, "bv": bv, "sv": sv, "gv": gv})
    types = [op.type for op in outs["dw"].block.ops]
    assert "depthwise_conv2d" in types and "conv2d" not in types
    x = t(img)
    close(r["ct"], TF.conv_transpose2d(x, t(wt), t(bv), stride=2, padding=1, output_padding=1), "ct")
    assert r["ct_size"].shape == (2, 3, 10, 11)
    close(r["ct_size"], TF.conv_transpose2d(x, t(wt), stride=2, padding=1, output_padding=[1, 0]), "ct_size")
    close(r["ct_groups"], TF.conv_transpose2d(x, t(wg), stride=[1, 2], groups=2, dilation=2), "ct_groups")
    close(r["dw"], TF.conv2d(x, t(wd), padding=1, groups=4), "dw")
    close(r["near"], TF.interpolate(x, size=[10, 9], mode="nearest"), "near")
    close(r["near_sc"], TF.interpolate(x, scale_factor=2, mode="nearest"), "near_sc")
    close(r["bil"], TF.interpolate(x, size=[7, 11], mode="bilinear", align_corners=False), "bil")
    close(r["bil_ac"], TF.interpolate(x, size=[10, 9], mode="bilinear", align_corners=True), "bil_ac")
    close(r["gn"], TF.group_norm(x, 2, t(sv), t(gv), eps=1e-5), "gn")
    close(r["gn_plain"], TF.group_norm(x, 4, eps=1e-3), "gn_plain")
    close(r["in"], TF.instance_norm(x, weight=t(sv), bias=t(gv), eps=1e-5), "in")
    p = lambda n: t(np.array(scope.find_var(n).get_tensor()))  # noqa: E731
    # the functional calls above took conv2d_transpose_0..2, group_norm_0..1 and instance_norm_0
    close(r["l_ct"], torch.relu(TF.conv_transpose2d(x, p("conv2d_transpose_3.w_0"), p("conv2d_transpose_3.b_0"),
                                                    stride=2, padding=1)), "l_ct")
    assert list(p("conv2d_transpose_3.w_0").shape) == [4, 6, 4, 4]
    close(r["l_gn"], TF.group_norm(x, 2, p("group_norm_2.w_0"), p("group_norm_2.b_0")), "l_gn")
    close(r["l_in"], TF.instance_norm(x, weight=p("instance_norm_1.w_0"), bias=p("instance_norm_1.b_0")), "l_in")


def test_conv_transpose_interpolate_norm_gradients():
    """Gradients through conv2d_transpose, bilinear interpolation and group_norm together match
    torch.autograd."""
    rng = np.random.RandomState(8)
    img = rng.randn(2, 4, 3, 3).astype(np.float32)
    wt = rng.randn(4, 2, 3, 3).astype(np.float32)

    def build():
        x = pe.static.data("img", [2, 4, 3, 3], "float32")
        x.stop_gradient = False
        w = pe.static.data("wt", [4, 2, 3, 3], "float32")
        w.stop_gradient = False
        y = F.group_norm(F.interpolate(F.conv2d_transpose(x, w, stride=2), size=[5, 6], mode="bilinear"), 2)
        loss = pe.mean(y * y * y)
        gx, gw = pe.static.gradients([loss], [x, w])
        return {"loss": loss, "gx": gx, "gw": gw}

    r, _, _ = run(build, {"img": img, "wt": wt})
    x, w = t(img).requires_grad_(), t(wt).requires_grad_()
    y = TF.group_norm(TF.interpolate(TF.conv_transpose2d(x, w, stride=2), size=[5, 6], mode="bilinear",
                                     align_corners=False), 2)
    loss = (y ** 3).mean()
    gx, gw = torch.autograd.grad(loss, [x, w])
    close(r["loss"], loss.detach(), "loss")
    close(r["gx"], gx, "gx")
    close(r["gw"], gw, "gw")


def test_conv_pool_size_arguments_must_be_positive():
    """A stride, dilation, kernel size or groups <= 0 is an InvalidArgumentError
    (a ValueError) naming the layer and the argument, not a ZeroDivisionError
    from the output-shape arithmetic."""
    import pe.fluid as fluid
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 4, 8, 8], "float32")
        w = pe.static.data("w", [4, 4, 3, 3], "float32")
        for fn, match in [
                (lambda: pe.static.nn.conv2d(x, 4, 3, stride=0), "conv2d stride must be positive, got 0"),
                (lambda: pe.static.nn.conv2d(x, 4, 3, dilation=[1, 0]), r"conv2d dilation must be positive, got \[1, 0\]"),
                (lambda: pe.static.nn.conv2d(x, 4, 0), "conv2d filter_size must be positive"),
                (lambda: pe.static.nn.conv2d(x, 4, 3, groups=0), "conv2d groups must be a positive int, got 0"),
                (lambda: pe.static.nn.conv2d_transpose(x, 4, filter_size=3, stride=0),
                 "conv2d_transpose stride must be positive"),
                (lambda: pe.static.nn.conv2d_transpose(x, 4, output_size=16, dilation=0),
                 "conv2d_transpose dilation must be positive"),
                (lambda: F.conv2d(x, w, stride=(2, -1)), r"conv2d stride must be positive, got \[2, -1\]"),
                (lambda: F.conv2d(x, w, groups=-2), "conv2d groups must be a positive int, got -2"),
                (lambda: F.conv2d_transpose(x, w, stride=0), "conv2d_transpose stride must be positive"),
                (lambda: F.conv2d_transpose(x, w, groups=0), "conv2d_transpose groups must be a positive int"),
                (lambda: F.max_pool2d(x, 2, stride=0), "max_pool2d stride must be positive"),
                (lambda: F.avg_pool2d(x, 0), "avg_pool2d kernel_size must be positive"),
                (lambda: fluid.layers.pool2d(x, 2, pool_stride=0), "pool2d stride must be positive")]:
            with pytest.raises(pe.InvalidArgumentError, match=match):
                fn()
    assert issubclass(pe.InvalidArgumentError, ValueError)
