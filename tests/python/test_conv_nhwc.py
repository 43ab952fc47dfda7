"""tests/python/test_conv_nhwc.py — BuildStrategy.conv_nhwc and fuse_conv_bias from Python.

A fluid CNN (conv2d + bias + relu, batch_norm, max pool, conv2d, fc) trained
by a ParallelExecutor on 1 and 2 CPU places with the layout pass and the conv
bias fusion on (the defaults), each alone, and both off: the losses and
parameters agree to float32 tolerance, two runs with them on give the same bits, a fetched conv output comes back NCHW
with the NCHW run's values, and `conv_nhwc` is a BuildStrategy field Paddle
scripts can set. The C side (structure, edges, batch_norm, float64): tests/unit/test_conv_nhwc.c.
"""
import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.layer_helper import LayerHelper
from pe.utils import unique_name

pe.enable_static()

STEPS = 4


def _program(bn, hw=12):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [-1, 3, hw, hw], "float32")
        y = pe.static.data("y", [-1, 1], "int64")
        h = fluid.layers.conv2d(x, 8, 3, padding=1, act=None if bn else "relu",
                                param_attr=pe.ParamAttr(name="c0.w"), bias_attr=pe.ParamAttr(name="c0.b"))
        if bn:
            h = fluid.layers.batch_norm(h, act="relu", param_attr=pe.ParamAttr(name="bn.s"),
                                        bias_attr=pe.ParamAttr(name="bn.b"), moving_mean_name="bn.m",
                                        moving_variance_name="bn.v")
        conv_out = h
        h = fluid.layers.pool2d(h, 2, "max", 2)
        h = fluid.layers.conv2d(h, 8, 3, padding=1, act="relu", param_attr=pe.ParamAttr(name="c1.w"),
                                bias_attr=pe.ParamAttr(name="c1.b"))
        h = fluid.layers.fc(h, 5, param_attr=pe.ParamAttr(name="out.w"), bias_attr=pe.ParamAttr(name="out.b"))
        loss = pe.mean(fluid.layers.softmax_with_cross_entropy(h, y))
        pe.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    params = sorted(v.name for v in main.global_block().all_parameters())
    return main, startup, loss, conv_out.name, params


def _train(monkeypatch, places, on, bn=False, fetch_conv=False, bias=None, hw=12):
    monkeypatch.setenv("CPU_NUM", str(places))
    main, startup, loss, conv_name, params = _program(bn, hw)
    scope = pe.static.Scope()
    pe.static.Executor(pe.CPUPlace()).run(startup, scope=scope)
    rs = np.random.RandomState(3)
    for name in params:  # the same start either way
        t = scope.find_var(name).get_tensor()
        shape = np.array(t).shape
        t.set(((rs.rand(*shape) - 0.5) * 0.6).astype(np.float32), pe.CPUPlace())
    bs = pe.static.BuildStrategy()
    assert bs.conv_nhwc is True and bs.fuse_conv_bias is True  # PE's defaults
    bs.conv_nhwc = on
    bs.fuse_conv_bias = on if bias is None else bias
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope, build_strategy=bs)
    rs = np.random.RandomState(5)
    losses, conv = [], None
    for k in range(STEPS):
        feed = {"x": rs.rand(8, 3, hw, hw).astype(np.float32), "y": rs.randint(0, 5, (8, 1)).astype(np.int64)}
        fetch = [loss, conv_name] if fetch_conv and k == STEPS - 1 else [loss]
        out = pexe.run(fetch, feed=feed)
        losses.append(np.array(out[0]))
        if len(out) > 1:
            conv = np.array(out[1])
    return np.array(losses), [np.array(scope.find_var(n).get_tensor()) for n in params], conv


@pytest.mark.parametrize("places,bn,nhwc,bias", [(1, False, True, True), (2, False, True, True), (1, True, True, True),
                                                 (1, False, True, False), (2, False, False, True)],
                         ids=["1place", "2places", "1place-bn", "nhwc-only", "bias-fusion-only-2places"])
def test_nhwc_trains_like_nchw(monkeypatch, places, bn, nhwc, bias):
    ref_l, ref_p, _ = _train(monkeypatch, places, False, bn)
    got_l, got_p, _ = _train(monkeypatch, places, nhwc, bn, bias=bias)
    again_l, again_p, _ = _train(monkeypatch, places, nhwc, bn, bias=bias)
    np.testing.assert_allclose(got_l, ref_l, rtol=1e-4, atol=1e-6)
    for a, b in zip(got_p, ref_p):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert np.array_equal(got_l, again_l)
    for a, b in zip(got_p, again_p):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("hw", [12, 8], ids=["12x12", "8x8-same-dims-either-layout"])
def test_fetched_conv_output_stays_nchw(monkeypatch, hw):
    """hw 8: the conv output is [8, 8, 8, 8], the same dims in NCHW and NHWC (a fetch must not go by dims)."""
    _, _, ref = _train(monkeypatch, 1, False, fetch_conv=True, hw=hw)
    _, _, got = _train(monkeypatch, 1, True, fetch_conv=True, hw=hw)
    assert got.shape == (8, 8, hw, hw)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_conv_nhwc_field():
    bs = pe.static.BuildStrategy()
    bs.conv_nhwc = False
    bs.fuse_conv_bias = False
    assert bs.conv_nhwc is False and bs.fuse_conv_bias is False
    bs = fluid.BuildStrategy()
    assert bs.conv_nhwc is True and bs.fuse_conv_bias is True


# ---- data_format="NHWC" from the Python APIs: the same numbers as NCHW on transposed data ----

def _layer_program(fmt):
    """conv (bias, relu) -> batch_norm -> max pool -> conv -> global avg pool -> fc, in layout fmt."""
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        shape = [-1, 10, 10, 3] if fmt == "NHWC" else [-1, 3, 10, 10]
        x = pe.static.data("x", shape, "float32")
        y = pe.static.data("y", [-1, 1], "int64")
        h = fluid.layers.conv2d(x, 6, 3, padding=1, act="relu", param_attr=pe.ParamAttr(name="c0.w"),
                                bias_attr=pe.ParamAttr(name="c0.b"), data_format=fmt)
        h = fluid.layers.batch_norm(h, param_attr=pe.ParamAttr(name="bn.s"), bias_attr=pe.ParamAttr(name="bn.b"),
                                    moving_mean_name="bn.m", moving_variance_name="bn.v", data_layout=fmt)
        h = fluid.layers.pool2d(h, 2, "max", 2, data_format=fmt)
        w1 = LayerHelper("c1").create_parameter(pe.ParamAttr(name="c1.w"), [4, 6, 3, 3], "float32",
                                                default_initializer=pe.nn.initializer.Constant(0.05))
        h = pe.nn.functional.conv2d(h, w1, stride=1, padding=1, data_format=fmt)  # the functional form
        h = fluid.layers.pool2d(h, global_pooling=True, pool_type="avg", data_format=fmt)
        h = fluid.layers.fc(h, 5, param_attr=pe.ParamAttr(name="out.w"), bias_attr=pe.ParamAttr(name="out.b"))
        loss = pe.mean(fluid.layers.softmax_with_cross_entropy(h, y))
        pe.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("parallel", [False, True], ids=["Executor", "ParallelExecutor"])
def test_static_layers_take_nhwc(monkeypatch, parallel):
    monkeypatch.setenv("CPU_NUM", "1")
    rs = np.random.RandomState(7)
    xs = rs.rand(3, 4, 3, 10, 10).astype(np.float32)
    ys = rs.randint(0, 5, (3, 4, 1)).astype(np.int64)
    results = {}
    for fmt in ("NCHW", "NHWC"):
        main, startup, loss = _layer_program(fmt)
        scope = pe.static.Scope()
        exe = pe.static.Executor(pe.CPUPlace())
        exe.run(startup, scope=scope)
        init = np.random.RandomState(1)
        names = sorted(v.name for v in main.global_block().all_parameters())
        for name in names:
            t = scope.find_var(name).get_tensor()
            t.set(((init.rand(*np.array(t).shape) - 0.5) * 0.6).astype(np.float32), pe.CPUPlace())
        run = (pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope).run
               if parallel else lambda fetch_list, feed: exe.run(main, feed=feed, fetch_list=fetch_list, scope=scope))
        losses = []
        for x, y in zip(xs, ys):
            x = x.transpose(0, 2, 3, 1).copy() if fmt == "NHWC" else x
            losses.append(float(np.array(run(fetch_list=[loss], feed={"x": x, "y": y})[0]).mean()))
        results[fmt] = losses, {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    (l0, p0), (l1, p1) = results["NCHW"], results["NHWC"]
    np.testing.assert_allclose(l1, l0, rtol=1e-5)
    for n in p0:
        np.testing.assert_allclose(p1[n], p0[n], rtol=1e-4, atol=1e-6, err_msg=n)


def test_eager_layers_take_nhwc():
    pe.disable_static()
    try:
        pe.seed(3)
        nets = {}
        for fmt in ("NCHW", "NHWC"):
            nets[fmt] = pe.nn.Sequential(pe.nn.Conv2D(3, 6, 3, padding=1, data_format=fmt), pe.nn.ReLU(),
                                         pe.nn.BatchNorm2D(6, data_format=fmt), pe.nn.MaxPool2D(2, data_format=fmt),
                                         pe.nn.AvgPool2D(2, data_format=fmt))
        nets["NHWC"].set_state_dict(nets["NCHW"].state_dict())
        x = np.random.RandomState(2).rand(4, 3, 8, 8).astype(np.float32)
        outs, grads = {}, {}
        for fmt, xin in (("NCHW", x), ("NHWC", x.transpose(0, 2, 3, 1).copy())):
            out = nets[fmt](pe.to_tensor(xin))
            (out * out).sum().backward()
            outs[fmt] = out.numpy() if fmt == "NCHW" else out.numpy().transpose(0, 3, 1, 2)
            grads[fmt] = {n: p.grad.numpy() for n, p in nets[fmt].named_parameters()}
        np.testing.assert_allclose(outs["NHWC"], outs["NCHW"], rtol=1e-5, atol=1e-6)
        for n, ref in grads["NCHW"].items():  # float32, other summation orders: judged on the gradient's scale
            np.testing.assert_allclose(grads["NHWC"][n], ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max(), err_msg=n)
    finally:
        pe.enable_static()


def test_nhwc_refusals():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [-1, 8, 8, 3], "float32")
        with pytest.raises(pe.UnsupportedError, match="conv2d_transpose: data_format must be 'NCHW'"):
            fluid.layers.conv2d_transpose(x, 4, filter_size=3, data_format="NHWC")
        with pytest.raises(pe.UnsupportedError, match="data_format must be 'NCHW' or 'NHWC', got 'NCWH'"):
            fluid.layers.conv2d(x, 4, 3, data_format="NCWH")
