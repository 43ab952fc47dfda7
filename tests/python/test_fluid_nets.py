"""tests/python/test_fluid_nets.py — fluid.nets (Paddle 1.x's composite networks).

Shapes of simple_img_conv_pool / img_conv_group, the recognize_digits CNN
(two simple_img_conv_pool) training on random data with a falling loss,
glu, scaled_dot_product_attention and sequence_conv_pool against numpy, and
the clear errors.
"""
import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.utils import unique_name


def fresh():
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 5
    return main, startup


def run(main, startup, feed, fetch):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return [np.array(o) for o in exe.run(main, feed=feed, fetch_list=fetch, scope=scope)], scope


def test_simple_img_conv_pool_and_img_conv_group_shapes():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        img = fluid.layers.data(name="img", shape=[1, 28, 28], dtype="float32")
        a = fluid.nets.simple_img_conv_pool(img, num_filters=20, filter_size=5, pool_size=2, pool_stride=2,
                                            act="relu")
        b = fluid.nets.simple_img_conv_pool(a, num_filters=8, filter_size=3, pool_size=2, pool_stride=2,
                                            conv_padding=1, pool_type="avg")
        g = fluid.nets.img_conv_group(img, conv_num_filter=[4, 6], pool_size=2, pool_stride=2, conv_act="relu",
                                      conv_with_batchnorm=[False, True], conv_batchnorm_drop_rate=[0.0, 0.5])
        gp = fluid.nets.simple_img_conv_pool(img, 3, 3, pool_size=1, pool_stride=1, global_pooling=True)
    assert list(a.shape) == [-1, 20, 12, 12] and list(b.shape) == [-1, 8, 6, 6]
    assert list(g.shape) == [-1, 6, 14, 14] and list(gp.shape) == [-1, 3, 1, 1]
    types = [op.type for op in main.global_block().ops]
    assert types.count("conv2d") == 5 and types.count("batch_norm") == 1 and types.count("dropout") == 1
    (va, vb, vg), _ = run(main, startup, {"img": np.random.RandomState(0).rand(3, 1, 28, 28).astype("float32")},
                          [a, b, g])
    assert va.shape == (3, 20, 12, 12) and vb.shape == (3, 8, 6, 6) and vg.shape == (3, 6, 14, 14)
    assert (va >= 0).all()


def test_img_conv_group_checks_its_lists():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        img = fluid.layers.data(name="img", shape=[1, 8, 8], dtype="float32")
        with pytest.raises(pe.InvalidArgumentError, match="conv_padding has 1 entries, conv_num_filter has 2"):
            fluid.nets.img_conv_group(img, [4, 4], 2, conv_padding=[1])
        with pytest.raises(pe.InvalidArgumentError, match="conv_num_filter must be a non-empty list"):
            fluid.nets.img_conv_group(img, 4, 2)


def test_recognize_digits_cnn_trains():
    """Paddle's recognize_digits convolutional_neural_network on random 28x28
    images with a learnable label rule: the loss falls."""
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        img = fluid.layers.data(name="img", shape=[1, 28, 28], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        c1 = fluid.nets.simple_img_conv_pool(input=img, filter_size=5, num_filters=20, pool_size=2, pool_stride=2,
                                             act="relu")
        c1 = fluid.layers.batch_norm(c1)
        c2 = fluid.nets.simple_img_conv_pool(input=c1, filter_size=5, num_filters=50, pool_size=2, pool_stride=2,
                                             act="relu")
        pred = fluid.layers.fc(c2, size=10, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=pred, label=label))
        fluid.optimizer.Adam(learning_rate=0.002).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(0)
    x = rng.rand(64, 1, 28, 28).astype("float32")
    y = (x.reshape(64, -1)[:, :392].mean(1) > x.reshape(64, -1)[:, 392:].mean(1)).astype("int64").reshape(64, 1)
    losses = [float(np.ravel(exe.run(main, feed={"img": x, "label": y}, fetch_list=[loss], scope=scope)[0])[0])
              for _ in range(12)]
    assert losses[-1] < 0.6 * losses[0], losses


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_glu_matches_numpy(dim):
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[4, 6, 8], dtype="float32", append_batch_size=False)
        out = fluid.nets.glu(x, dim=dim)
    xv = np.random.RandomState(1).randn(4, 6, 8).astype("float32")
    (got,), _ = run(main, startup, {"x": xv}, [out])
    a, b = np.split(xv, 2, axis=dim)
    np.testing.assert_allclose(got, a * sigmoid(b), rtol=1e-5, atol=1e-6)


def test_glu_refuses_an_odd_dim():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[5], dtype="float32")
        with pytest.raises(pe.InvalidArgumentError, match="dim -1 of x has size 5; it must be even"):
            fluid.nets.glu(x)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("heads", [1, 2])
def test_scaled_dot_product_attention_matches_numpy(heads):
    N, Lq, Lk, D, Dv = 3, 4, 5, 8, 6
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        q = fluid.layers.data(name="q", shape=[Lq, D], dtype="float32")
        k = fluid.layers.data(name="k", shape=[Lk, D], dtype="float32")
        v = fluid.layers.data(name="v", shape=[Lk, Dv], dtype="float32")
        out = fluid.nets.scaled_dot_product_attention(q, k, v, num_heads=heads)
    assert list(out.shape) == [-1, Lq, Dv]
    rng = np.random.RandomState(2)
    feed = {"q": rng.randn(N, Lq, D).astype("float32"), "k": rng.randn(N, Lk, D).astype("float32"),
            "v": rng.randn(N, Lk, Dv).astype("float32")}
    (got,), scope = run(main, startup, feed, [out])
    qv, kv, vv = feed["q"], feed["k"], feed["v"]
    if heads > 1:
        fcs = [p.name for p in main.global_block().all_parameters()]
        ws = {n: np.array(scope.var(n).get_tensor()) for n in fcs}
        w = sorted(n for n in fcs if n.endswith(".w_0"))
        bb = sorted(n for n in fcs if n.endswith(".b_0"))
        assert len(w) == 3 and len(bb) == 3
        qv, kv, vv = [x @ ws[wn] + ws[bn] for x, wn, bn in zip((qv, kv, vv), w, bb)]

    def split(x):
        n, l, d = x.shape
        return x.reshape(n, l, heads, d // heads).transpose(0, 2, 1, 3)
    qh, kh, vh = split(qv), split(kv), split(vv)
    wts = softmax(qh * (D // heads) ** -0.5 @ kh.transpose(0, 1, 3, 2))
    want = (wts @ vh).transpose(0, 2, 1, 3).reshape(N, Lq, Dv)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shapes,kw,match", [
    (([4, 8], [5, 6], [5, 6]), {}, "hidden sizes of queries \\(8\\) and keys \\(6\\) must be the same"),
    (([4, 8], [5, 8], [3, 6]), {}, "same sequence length, got 5 and 3"),
    (([4, 8], [5, 8], [5, 6]), {"num_heads": 4}, "hidden size of values \\(6\\) must be divisible by num_heads"),
    (([4, 8], [5, 8], [5, 6]), {"num_heads": 0}, "num_heads must be an int >= 1, got 0"),
    (([8], [8], [8]), {}, "must be 3-D"),
])
def test_attention_bad_arguments(shapes, kw, match):
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        q, k, v = [fluid.layers.data(name=n, shape=s, dtype="float32") for n, s in zip("qkv", shapes)]
        with pytest.raises(pe.InvalidArgumentError, match=match):
            fluid.nets.scaled_dot_product_attention(q, k, v, **kw)


def test_sequence_conv_pool_vs_numpy():
    """sequence_conv (filter 4: context rows t-2 .. t+1, zeros outside the sequence) + bias + act,
    then one pooled row per sequence."""
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=1)
        out = fluid.nets.sequence_conv_pool(x, 5, 4, param_attr=fluid.ParamAttr(name="w"), act="tanh",
                                            pool_type="sqrt", bias_attr=fluid.ParamAttr(
                                                name="b", initializer=pe.initializer.Uniform(-1, 1)))
    assert [op.type for op in main.global_block().ops] == ["sequence_conv", "elementwise_add", "tanh",
                                                           "sequence_pool"]
    lens = [3, 1, 5]
    xv = np.random.RandomState(1).rand(sum(lens), 3).astype("float32")
    (got,), scope = run(main, startup, {"x": fluid.create_lod_tensor(xv, [lens], fluid.CPUPlace())}, [out])
    w, b = (np.array(scope.find_var(n).get_tensor()) for n in ("w", "b"))
    assert w.shape == (12, 5) and b.shape == (5,)
    want, at = [], 0
    for n in lens:
        seq = xv[at:at + n]
        rows = [np.concatenate([seq[q] if 0 <= q < n else np.zeros(3, "float32") for q in range(t - 2, t + 2)]) @ w
                for t in range(n)]
        want.append(np.tanh(np.stack(rows) + b).sum(0) / np.sqrt(n))
        at += n
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-5, atol=1e-6)
