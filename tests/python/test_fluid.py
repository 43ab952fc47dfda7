"""tests/python/test_fluid.py — pe.fluid: the fluid-era names over PE's engine.

fluid.layers builds the same ops as pe.static (fc, conv/pool/bn, losses),
data() appends the batch dim as fluid did, DataFeeder turns sample tuples
into a feed dict (and names what is wrong), fluid.optimizer takes
regularization= / parameter_list= (L1Decay and L2Decay; fluid.clip's three
clippers, checked against numpy), and DistributeTranspiler's nccl2 mode
(seed 002, trainers= form) trains across 2 MPI processes to the parameters
of one process on the whole batch; its argument errors are clear errors
(pserver mode: test_ps_transpiler.py).
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.utils import unique_name

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "dist_scripts", "fluid_nccl2_train.py")


def fresh():
    return pe.static.Program(), pe.static.Program()


def test_data_appends_batch_dim():
    main, startup = fresh()
    with fluid.program_guard(main, startup):
        a = fluid.layers.data(name="a", shape=[13], dtype="float32")
        b = fluid.layers.data(name="b", shape=[-1, 3], dtype="int64")
        c = fluid.layers.data(name="c", shape=[4], append_batch_size=False)
    assert list(a.shape) == [-1, 13] and list(b.shape) == [-1, 3] and list(c.shape) == [4]
    with fluid.program_guard(main, startup):
        s = fluid.layers.data(name="s", shape=[1], dtype="int64", lod_level=1)
    assert list(s.shape) == [-1, 1] and s.lod_level == 1
    with fluid.program_guard(main, startup), pytest.raises(pe.InvalidArgumentError, match="lod_level"):
        fluid.layers.data(name="s2", shape=[1], dtype="int64", lod_level=-1)


def test_layers_match_static_ops():
    def build(use_fluid):
        main, startup = fresh()
        with fluid.program_guard(main, startup), unique_name.guard():
            if use_fluid:
                img = fluid.layers.data(name="img", shape=[1, 8, 8], dtype="float32")
                lbl = fluid.layers.data(name="lbl", shape=[1], dtype="int64")
                c = fluid.layers.conv2d(img, num_filters=4, filter_size=3, act="relu")
                p = fluid.layers.pool2d(c, pool_size=2, pool_type="max", pool_stride=2)
                bn = fluid.layers.batch_norm(p)
                pred = fluid.layers.fc(bn, size=10, act="softmax")
                loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, lbl))
                fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
            else:
                img = pe.static.data("img", [None, 1, 8, 8], "float32")
                lbl = pe.static.data("lbl", [None, 1], "int64")
                c = pe.static.nn.conv2d(img, num_filters=4, filter_size=3, act="relu")
                p = pe.nn.functional.max_pool2d(c, 2, 2)
                bn = pe.static.nn.batch_norm(p)
                pred = pe.static.nn.fc(bn, 10, activation="softmax")
                loss = pe.mean(pe.nn.functional.cross_entropy(pred, lbl, reduction="none", use_softmax=False))
                pe.optimizer.SGD(learning_rate=0.1).minimize(loss)
        return [op.type for op in main.global_block().ops], main, startup, loss
    ops_f, main, startup, loss = build(True)
    ops_s = build(False)[0]
    assert ops_f == ops_s
    exe = fluid.Executor(fluid.CPUPlace())
    scope = pe.static.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(0)
    feed = {"img": rng.rand(6, 1, 8, 8).astype("float32"), "lbl": rng.randint(0, 10, (6, 1)).astype("int64")}
    first = float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])
    for _ in range(20):
        last = float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])
    assert last < first


def test_global_pooling_and_errors():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        img = fluid.layers.data(name="img", shape=[3, 5, 7], dtype="float32")
        g = fluid.layers.pool2d(img, pool_type="avg", global_pooling=True)
        assert list(g.shape) == [-1, 3, 1, 1]
        with pytest.raises(pe.InvalidArgumentError, match="pool_size"):
            fluid.layers.pool2d(img)
        with pytest.raises(pe.InvalidArgumentError, match="pool_type"):
            fluid.layers.pool2d(img, 2, pool_type="sum")
    exe = fluid.Executor(fluid.CPUPlace())
    x = np.random.RandomState(1).rand(2, 3, 5, 7).astype("float32")
    out, = exe.run(main, feed={"img": x}, fetch_list=[g], scope=pe.static.Scope())
    np.testing.assert_allclose(out, x.mean(axis=(2, 3), keepdims=True), rtol=1e-6)


def test_data_feeder():
    main, startup = fresh()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2, 2], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    feeder = fluid.DataFeeder(feed_list=[x, "y"], place=fluid.CPUPlace(), program=main)
    d = feeder.feed([([1, 2, 3, 4], 0), ([5, 6, 7, 8], 1), ([9, 10, 11, 12], 2)])
    assert d["x"].shape == (3, 2, 2) and d["x"].dtype == np.float32
    assert d["y"].shape == (3, 1) and d["y"].dtype == np.int64 and d["y"][2, 0] == 2
    with pytest.raises(pe.InvalidArgumentError, match="sample 1 has 1 fields"):
        feeder.feed([([1, 2, 3, 4], 0), ([1, 2, 3, 4],)])
    with pytest.raises(pe.InvalidArgumentError, match="'x' expects \\[2, 2\\]"):
        feeder.feed([([1, 2, 3], 0)])
    with pytest.raises(pe.InvalidArgumentError, match="empty"):
        feeder.feed([])
    with pytest.raises(pe.NotFoundError, match="'nope'"):
        fluid.DataFeeder(feed_list=["nope"], place=fluid.CPUPlace(), program=main)


def test_optimizer_fluid_args():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        h = fluid.layers.fc(x, 3)
        loss = fluid.layers.mean(h)
        opt = fluid.optimizer.MomentumOptimizer(learning_rate=0.1, momentum=0.9,
                                                regularization=fluid.regularizer.L2Decay(1e-4))
        opt.minimize(loss, parameter_list=[p.name for p in main.global_block().all_parameters()][:1])
    types = [op.type for op in main.global_block().ops]
    assert types.count("momentum") == 1


def _linear_run(opt_fn, param_attr=None, steps=4):
    """y = x W + b trained with fluid's SGD (opt_fn() gives its keyword args): the losses and the params after
    each step, and the same training in numpy by the documented rules (clip, then decay, then sgd)."""
    rng = np.random.RandomState(3)
    xs = [rng.randn(6, 5).astype("float32") for _ in range(steps)]
    ys = [rng.randn(6, 2).astype("float32") * 4 for _ in range(steps)]
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[5], dtype="float32")
        y = fluid.layers.data(name="y", shape=[2], dtype="float32")
        pred = fluid.layers.fc(x, 2, param_attr=param_attr, bias_attr=fluid.ParamAttr(
            name="b", initializer=pe.nn.initializer.Constant(0.3)))
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(learning_rate=0.1, **opt_fn()).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    wname = main.global_block().all_parameters()[0].name
    with fluid.scope_guard(scope):
        exe.run(startup)
        W0, b0 = np.array(scope.find_var(wname).get_tensor()), np.array(scope.find_var("b").get_tensor())
        got = []
        for xb, yb in zip(xs, ys):
            exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
            got.append((np.array(scope.find_var(wname).get_tensor()), np.array(scope.find_var("b").get_tensor())))
    return main, W0.astype("float64"), b0.astype("float64"), xs, ys, got


def _reference(W, b, xs, ys, clip=None, decay=None):
    out = []
    for xb, yb in zip(xs, ys):
        d = 2 * (xb @ W + b - yb) / yb.size
        grads = {"W": xb.T @ d, "b": d.sum(0)}
        params = {"W": W, "b": b}
        for k in grads:
            g = grads[k]
            if clip is not None:
                g = clip(g)
            if decay is not None:
                g = g + decay(k, params[k])
            grads[k] = g
        W, b = W - 0.1 * grads["W"], b - 0.1 * grads["b"]
        out.append((W, b))
    return out


def _set_clip(clip):
    fluid.clip.set_gradient_clip(clip)   # on the main program being built (the optimizer has no grad_clip)
    return {}


@pytest.mark.parametrize("case", ["l1", "l1_param_l2", "clip_value", "clip_norm", "set_gradient_clip"])
def test_l1_decay_and_per_gradient_clipping(case):
    """fluid.regularizer.L1Decay (grad += c * sign(p)), a ParamAttr regularizer replacing the optimizer's, and
    fluid.clip.GradientClipByValue / GradientClipByNorm (each gradient alone), against numpy."""
    R, C = fluid.regularizer, fluid.clip
    sign = np.sign
    if case == "l1":
        opt, attr = lambda: {"regularization": R.L1DecayRegularizer(0.05)}, None
        kw = {"decay": lambda k, p: 0.05 * sign(p)}
    elif case == "l1_param_l2":   # W's own L2Decay replaces the optimizer's L1Decay; b keeps the L1
        opt, attr = lambda: {"regularization": R.L1Decay(0.05)}, fluid.ParamAttr(regularizer=R.L2Decay(0.2))
        kw = {"decay": lambda k, p: 0.2 * p if k == "W" else 0.05 * sign(p)}
    elif case == "clip_value":
        opt, attr = lambda: {"grad_clip": C.GradientClipByValue(0.5, -0.25)}, None
        kw = {"clip": lambda g: np.clip(g, -0.25, 0.5)}
    elif case == "clip_norm":
        opt, attr = lambda: {"grad_clip": C.GradientClipByNorm(clip_norm=0.5)}, None
        kw = {"clip": lambda g: g * 0.5 / max(np.linalg.norm(g), 0.5)}
    else:
        opt, attr = lambda: _set_clip(C.GradientClipByValue(0.3)), None
        kw = {"clip": lambda g: np.clip(g, -0.3, 0.3)}
    main, W, b, xs, ys, got = _linear_run(opt, attr)
    want = _reference(W, b, xs, ys, **kw)
    for (gw, gb), (ww, wb) in zip(got, want):
        np.testing.assert_allclose(gw, ww, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gb, wb, rtol=1e-5, atol=1e-6)
    types = [op.type for op in main.global_block().ops]
    if "clip" in case:   # the clips are active: some gradient element / norm is over the bound
        assert types.count("clip_by_global_norm" if case == "clip_norm" else "clip") == 2
        assert not np.allclose(want[0][0], _reference(W, b, xs, ys)[0][0])
    else:
        assert types.count("sign") == (2 if case == "l1" else 1)


def test_clip_and_regularizer_errors():
    with pytest.raises(pe.InvalidArgumentError, match="min .* must be <= max"):
        fluid.clip.GradientClipByValue(max=-1.0)
    with pytest.raises(pe.InvalidArgumentError, match="clip_norm must be > 0"):
        fluid.clip.GradientClipByNorm(0)
    with pytest.raises(pe.UnsupportedError, match="need_clip is not supported"):
        fluid.clip.GradientClipByGlobalNorm(1.0, need_clip=lambda p: True)
    with pytest.raises(pe.InvalidArgumentError, match="L1Decay: coeff must be a finite number >= 0"):
        fluid.regularizer.L1Decay(-0.1)
    with pytest.raises(pe.UnsupportedError, match="param_list names 1 of the program's 2 parameters"):
        main, startup = fresh()
        with fluid.program_guard(main, startup):
            fluid.layers.fc(fluid.data(name="x", shape=[2, 3], dtype="float32"), 2)
            fluid.clip.set_gradient_clip(fluid.clip.GradientClipByValue(1.0),
                                         param_list=main.global_block().all_parameters()[:1])
    with pytest.raises(TypeError, match="clip must be a GradientClipByValue"):
        fluid.clip.set_gradient_clip(1.0)
    assert fluid.core.LoDTensor is fluid.LoDTensor
    assert fluid.clip.ClipGradByNorm is fluid.clip.GradientClipByNorm
    assert fluid.regularizer.L1DecayRegularizer is pe.regularizer.L1Decay
    # eager mode applies global-norm clipping and L2 decay only: the others are refused up front
    w = pe.to_tensor(np.ones((2, 2), "float32"), stop_gradient=False)
    with pytest.raises(pe.UnsupportedError, match="eager mode .* L1Decay is for static programs"):
        pe.optimizer.SGD(0.1, parameters=[w], weight_decay=pe.regularizer.L1Decay(0.1))
    with pytest.raises(pe.UnsupportedError, match="ClipGradByValue is for static programs"):
        pe.optimizer.SGD(0.1, parameters=[w], grad_clip=pe.nn.ClipGradByValue(1.0))


def nccl2(trainer_id=0, trainers="127.0.0.1:6170,127.0.0.1:6171", current_endpoint="127.0.0.1:6170", mode="nccl2"):
    main, startup = fresh()
    config = fluid.DistributeTranspilerConfig()
    config.mode = mode
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(trainer_id, program=main, startup_program=startup, trainers=trainers,
                current_endpoint=current_endpoint)
    return t, main


def test_transpiler_nccl2_checks():
    t, main = nccl2()
    assert t.get_trainer_program() is main
    with pytest.raises(pe.InvalidArgumentError, match="trainer_id 2 is not in \\[0, 2\\)"):
        nccl2(trainer_id=2)
    with pytest.raises(pe.InvalidArgumentError, match="current_endpoint '127.0.0.1:6171' is not trainer 0's"):
        nccl2(current_endpoint="127.0.0.1:6171")
    with pytest.raises(pe.InvalidArgumentError, match="comma-separated trainer endpoints"):
        nccl2(trainers=2)
    with pytest.raises(pe.InvalidArgumentError, match="not ip:port"):
        nccl2(trainers="127.0.0.1,127.0.0.1:6171")
    with pytest.raises(pe.InvalidArgumentError, match="repeat"):
        nccl2(trainers="127.0.0.1:6170,127.0.0.1:6170")
    with pytest.raises(pe.InvalidArgumentError, match="pserver mode trainers must be the number of trainers"):
        nccl2(mode="pserver")  # the nccl2 form (an endpoint list) in pserver mode
    with pytest.raises(pe.UnsupportedError, match="mode 'geo' is not implemented"):
        nccl2(mode="geo")
    with pytest.raises(pe.InvalidArgumentError, match="transpiled in nccl2 mode, not pserver mode"):
        t.get_pserver_program("127.0.0.1:6170")
    fresh_t = fluid.DistributeTranspiler()
    with pytest.raises(pe.InvalidArgumentError, match="transpile\\(\\) first"):
        fresh_t.get_trainer_program()


def test_parallel_executor_checks_transpiled_trainers():
    t, main = nccl2(trainer_id=1, current_endpoint="127.0.0.1:6171")
    with fluid.program_guard(main):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
    with pytest.raises(pe.InvalidArgumentError, match="transpiled \\(nccl2 mode\\) for trainer 1 of the 2 trainers"):
        fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main, num_trainers=2, trainer_id=0)
    bs = fluid.BuildStrategy()
    bs.num_trainers, bs.trainer_id = 3, 1
    cp = fluid.CompiledProgram(main, build_strategy=bs).with_data_parallel(loss_name=loss.name)
    with pytest.raises(pe.InvalidArgumentError, match="CompiledProgram: num_trainers=3"):
        fluid.Executor(fluid.CPUPlace()).run(cp, feed={"x": np.zeros((2, 4), "float32")}, fetch_list=[loss])
    with pytest.raises(pe.InvalidArgumentError, match="num_trainers"):
        bs.num_trainers = 0


def _mpirun():
    return shutil.which("mpirun")


@pytest.mark.skipif(not _mpirun(), reason="mpirun not found (openmpi-bin; scripts/setup.sh installs it)")
def test_nccl2_mode_two_processes_match_one():
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", OMP_NUM_THREADS="1", PE_MPI_TIMEOUT="60")
    for k in ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "CPU_NUM"):
        env.pop(k, None)
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        r = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", "--mca", "btl", "self,vader", sys.executable,
                            SCRIPT, d1, "15"], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run([sys.executable, SCRIPT, d2, "15", "--places", "2"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        a, b, ref = (np.load(os.path.join(d, "params.rank%d.npz" % k)) for d, k in ((d1, 0), (d1, 1), (d2, 0)))
        assert sorted(a.files) == sorted(ref.files) and len(a.files) > 2
        for k in a.files:
            if k == "losses":
                continue
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # identical on every trainer
            np.testing.assert_allclose(a[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
        assert a["losses"][-1] < a["losses"][0]


def test_flatten_two_dims():
    main, startup = fresh()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3, 4, 5])
        flat = [fluid.layers.flatten(x, a) for a in (0, 1, 2)]
    assert [list(f.shape) for f in flat] == [[1, -1], [-1, 60], [-1, 20]]
    out, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": np.ones((2, 3, 4, 5), "float32")},
                                                 fetch_list=[flat[2]], scope=pe.static.Scope())
    assert out.shape == (6, 20)


def test_math_layers_ops_and_attrs():
    """fluid.layers' math functions append Paddle's ops with the 1.x defaults and run."""
    main, startup = fresh()
    L = fluid.layers
    with fluid.program_guard(main, startup), unique_name.guard():
        x = L.data(name="x", shape=[4], dtype="float32")
        outs = [L.exp(x), L.log(L.abs(x)), L.sqrt(L.square(x)), L.rsqrt(L.exp(x)), L.sign(x), L.floor(x), L.ceil(x),
                L.round(x), L.pow(x, factor=2.0), L.clip(x, -0.5, 0.5), L.relu6(x), L.elu(x), L.softplus(x),
                L.swish(x), L.hard_sigmoid(x), L.selu(x), L.selu(x, scale=1.5, alpha=0.5)]
    ops = main.global_block().ops
    assert [op.type for op in ops] == ["exp", "abs", "log", "square", "sqrt", "exp", "rsqrt", "sign", "floor",
                                       "ceil", "round", "pow", "clip", "relu6", "elu", "softplus", "swish",
                                       "hard_sigmoid", "selu", "selu"]
    a = {op.type: op.all_attrs() for op in ops}
    assert a["pow"]["factor"] == 2.0 and (a["clip"]["min"], a["clip"]["max"]) == (-0.5, 0.5)
    assert a["relu6"]["threshold"] == 6.0 and a["elu"]["alpha"] == 1.0 and a["swish"]["beta"] == 1.0
    assert (a["hard_sigmoid"]["slope"], a["hard_sigmoid"]["offset"]) == (0.2, 0.5)
    assert ops[-1].all_attrs()["scale"] == 1.5 and ops[-1].all_attrs()["alpha"] == 0.5
    xv = np.array([[-2.5, -0.3, 0.7, 3.5], [1.5, -1.5, 0.2, -7.0]], np.float32)
    vals = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv}, fetch_list=outs, scope=pe.static.Scope())
    np.testing.assert_allclose(vals[0], np.exp(xv), rtol=1e-6)
    np.testing.assert_array_equal(vals[7], [[-3, -0, 1, 4], [2, -2, 0, -7]])  # half away from zero
    np.testing.assert_allclose(vals[14], np.clip(0.2 * xv + 0.5, 0, 1), rtol=1e-6)
    np.testing.assert_allclose(vals[15], np.where(xv > 0, xv, 1.6732632423543772 * np.expm1(xv)) * 1.0507009873554805,
                               rtol=1e-6)


def test_binary_compare_logical_layers():
    """fluid.layers' elementwise_max ... logical_not: Paddle's ops, the 1.x `axis`,
    `cond` / `out` forms, and values; fluid.layers.where(condition) is where_index."""
    main, startup = fresh()
    L = fluid.layers
    with fluid.program_guard(main, startup), unique_name.guard():
        x = L.data(name="x", shape=[3, 4], dtype="float32")
        y = L.data(name="y", shape=[3], dtype="float32", append_batch_size=False)
        i = L.data(name="i", shape=[4], dtype="int32")
        j = L.data(name="j", shape=[4], dtype="int32", append_batch_size=False)
        cond = fluid.default_main_program().global_block().create_var(name="cond", shape=[-1, 3, 4], dtype="bool")
        lt = L.less_than(x, L.fill_constant([1], "float32", 0.0), force_cpu=True)
        outs = [L.elementwise_max(x, y, axis=1), L.elementwise_min(x, y, axis=1),
                L.elementwise_pow(L.abs(x), y, axis=1), L.elementwise_mod(i, j), L.elementwise_floordiv(i, j),
                L.equal(x, x), L.not_equal(x, x), lt, L.less_equal(x, x), L.greater_than(x, x, cond=cond),
                L.greater_equal(x, x), L.logical_and(lt, lt), L.logical_or(lt, lt), L.logical_xor(lt, lt),
                L.logical_not(lt)]
    assert outs[9] is cond
    ops = main.global_block().ops
    types = [op.type for op in ops]
    for op in ("elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod", "elementwise_floordiv",
               "equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal", "logical_and",
               "logical_or", "logical_xor", "logical_not"):
        assert op in types, op
    assert next(op for op in ops if op.type == "elementwise_max").all_attrs()["axis"] == 1
    assert next(op for op in ops if op.type == "less_than").all_attrs()["force_cpu"] is True
    rng = np.random.RandomState(2)
    xv = rng.randn(2, 3, 4).astype(np.float32)
    yv = np.array([0.5, -1.0, 2.0], np.float32)
    iv = rng.randint(-9, 9, (2, 4)).astype(np.int32)
    jv = np.array([3, -3, 2, -5], np.int32)
    vals = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv, "y": yv, "i": iv, "j": jv}, fetch_list=outs,
                                                scope=pe.static.Scope())
    yb = yv.reshape(3, 1)
    np.testing.assert_allclose(vals[0], np.maximum(xv, yb), rtol=1e-6)
    np.testing.assert_allclose(vals[1], np.minimum(xv, yb), rtol=1e-6)
    np.testing.assert_allclose(vals[2], np.abs(xv) ** yb, rtol=1e-5)
    np.testing.assert_array_equal(vals[3], np.mod(iv, jv))  # Python's %: the sign of the divisor
    np.testing.assert_array_equal(vals[4], np.floor_divide(iv, jv))
    lt_v = xv < 0
    for k, want in ((5, True), (6, False), (8, True), (9, False), (10, True)):
        assert vals[k].dtype == np.bool_ and vals[k].all() == want and vals[k].any() == want, k
    np.testing.assert_array_equal(vals[7], lt_v)
    np.testing.assert_array_equal(vals[11], lt_v)
    np.testing.assert_array_equal(vals[12], lt_v)
    np.testing.assert_array_equal(vals[13], np.zeros_like(lt_v))
    np.testing.assert_array_equal(vals[14], ~lt_v)
    with pytest.raises(pe.UnsupportedError, match="where_index"):
        L.where(lt)


def test_reduce_layers():
    """fluid.layers.reduce_{max,min,prod,any,all}: Paddle's ops and attrs (dim, keep_dim, reduce_all), values."""
    main, startup = fresh()
    L = fluid.layers
    with fluid.program_guard(main, startup), unique_name.guard():
        x = L.data(name="x", shape=[3, 4], dtype="float32")
        b = L.data(name="b", shape=[3, 4], dtype="bool")
        outs = [L.reduce_max(x), L.reduce_min(x, dim=1), L.reduce_prod(x, dim=[1, 2], keep_dim=True),
                L.reduce_any(b, dim=-1), L.reduce_all(b, dim=[0])]
    ops = main.global_block().ops
    assert [op.type for op in ops] == ["reduce_max", "reduce_min", "reduce_prod", "reduce_any", "reduce_all"]
    a = [op.all_attrs() for op in ops]
    assert a[0]["reduce_all"] and not a[1]["reduce_all"] and a[1]["dim"] == [1]
    assert a[2]["dim"] == [1, 2] and a[2]["keep_dim"] and a[4]["dim"] == [0]
    assert [list(o.shape) for o in outs] == [[1], [-1, 4], [-1, 1, 1], [-1, 3], [3, 4]]
    assert outs[3].dtype == "bool"
    rng = np.random.RandomState(3)
    xv = rng.uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32)
    bv = rng.rand(2, 3, 4) < 0.6
    vals = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv, "b": bv}, fetch_list=outs, scope=pe.static.Scope())
    np.testing.assert_allclose(vals[0], [xv.max()], rtol=1e-6)
    np.testing.assert_allclose(vals[1], xv.min(axis=1), rtol=1e-6)
    np.testing.assert_allclose(vals[2], xv.prod(axis=(1, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(vals[3], bv.any(axis=-1))
    np.testing.assert_array_equal(vals[4], bv.all(axis=0))


def test_stack_expand_assign_shape_increment_cumsum_layers():
    """The 1.x forms: expand(x, expand_times) is a tile op, increment is in place by default,
    cumsum's axis=None is the last axis (not flattened), assign copies."""
    main, startup = fresh()
    L = fluid.layers
    with fluid.program_guard(main, startup), unique_name.guard():
        x = L.data(name="x", shape=[3], dtype="float32")
        i = L.fill_constant([1], "int64", 0)
        outs = [L.stack([x, x], axis=0), L.unstack(x, axis=1)[2], L.expand(x, [1, 2]), L.assign(x), L.shape(x),
                L.increment(i), L.increment(i, value=3, in_place=False), L.cumsum(x),
                L.cumsum(x, axis=0, exclusive=True, reverse=True)]
    ops = main.global_block().ops
    assert [op.type for op in ops][1:] == ["stack", "unstack", "tile", "assign", "shape", "increment", "increment",
                                           "cumsum", "cumsum"]
    assert ops[3].all_attrs()["repeat_times"] == [1, 2] and outs[5] is i and outs[6] is not i
    assert ops[8].all_attrs()["axis"] == -1 and not ops[8].all_attrs()["flatten"]
    assert ops[9].all_attrs()["exclusive"] and ops[9].all_attrs()["reverse"]
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    vals = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv}, fetch_list=outs, scope=pe.static.Scope())
    np.testing.assert_array_equal(vals[0], np.stack([xv, xv]))
    np.testing.assert_array_equal(vals[1], xv[:, 2])
    np.testing.assert_array_equal(vals[2], np.tile(xv, (1, 2)))
    np.testing.assert_array_equal(vals[3], xv)
    np.testing.assert_array_equal(vals[4], [2, 3])
    np.testing.assert_array_equal(vals[5], [1])
    np.testing.assert_array_equal(vals[6], [4])
    np.testing.assert_array_equal(vals[7], np.cumsum(xv, axis=-1))
    np.testing.assert_array_equal(vals[8], [[3, 4, 5], [0, 0, 0]])


def test_index_loss_and_pad_layers():
    """The 1.x forms: gather (axis 0), gather_nd, scatter, one_hot on [N, 1] labels (the one_hot
    op, last dim replaced), cos_sim (Out [N, 1]), sigmoid_cross_entropy_with_logits
    (ignore_index, normalize), label_smooth, pad (paddings per dim), pad2d (reflect)."""
    main, startup = fresh()
    L = fluid.layers
    with fluid.program_guard(main, startup), unique_name.guard():
        x = L.data(name="x", shape=[4], dtype="float32")
        y = L.data(name="y", shape=[1, 4], dtype="float32", append_batch_size=False)
        lab = L.data(name="lab", shape=[1], dtype="int64")
        idx = L.data(name="idx", shape=[3], dtype="int64", append_batch_size=False)
        prob = L.data(name="prob", shape=[4], dtype="float32")
        img = L.data(name="img", shape=[2, 3, 3], dtype="float32")
        outs = [L.gather(x, idx), L.gather_nd(x, pe.unsqueeze(idx, [1])),
                L.scatter(x, idx, L.gather(x, idx), overwrite=False), L.one_hot(lab, depth=5),
                L.one_hot(lab, depth=2, allow_out_of_range=True), L.cos_sim(x, y),
                L.sigmoid_cross_entropy_with_logits(x, prob, ignore_index=-1, normalize=True),
                L.label_smooth(L.one_hot(lab, depth=5), epsilon=0.1), L.pad(x, [1, 0, 0, 2], pad_value=9.0),
                L.pad2d(img, [1, 1, 2, 0], mode="reflect")]
    types = [op.type for op in main.global_block().ops]
    for t in ("gather", "gather_nd", "scatter", "one_hot", "cos_sim", "sigmoid_cross_entropy_with_logits",
              "label_smooth", "pad", "pad2d"):
        assert t in types, t
    assert list(outs[3].shape) == [-1, 5] and list(outs[5].shape) == [-1, 1]
    rng = np.random.RandomState(3)
    xv, yv = rng.randn(3, 4).astype(np.float32), rng.randn(1, 4).astype(np.float32)
    lv, iv = np.array([[4], [0], [1]], np.int64), np.array([2, 0, 2], np.int64)
    pv = rng.rand(3, 4).astype(np.float32)
    pv[0, 1] = pv[2, 3] = -1
    imv = rng.randn(3, 2, 3, 3).astype(np.float32)
    vals = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv, "y": yv, "lab": lv, "idx": iv, "prob": pv,
                                                            "img": imv}, fetch_list=outs, scope=pe.static.Scope())
    np.testing.assert_array_equal(vals[0], xv[iv])
    np.testing.assert_array_equal(vals[1], xv[iv])
    want = xv.copy()
    want[[0, 2]] = 0
    np.add.at(want, iv, xv[iv])
    np.testing.assert_allclose(vals[2], want, rtol=1e-6)
    np.testing.assert_array_equal(vals[3], np.eye(5, dtype=np.float32)[lv[:, 0]])
    np.testing.assert_array_equal(vals[4], [[0, 0], [1, 0], [0, 1]])
    cos = (xv * yv).sum(1) / np.linalg.norm(xv, axis=1) / np.linalg.norm(yv)
    np.testing.assert_allclose(vals[5], cos[:, None], rtol=1e-5)
    keep = pv.astype(np.int64) != -1
    ce = np.maximum(xv, 0) - xv * pv + np.log1p(np.exp(-np.abs(xv)))
    np.testing.assert_allclose(vals[6], np.where(keep, ce, 0) / keep.sum(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(vals[7], 0.9 * np.eye(5)[lv[:, 0]] + 0.02, rtol=1e-6)
    np.testing.assert_array_equal(vals[8], np.pad(xv, [(1, 0), (0, 2)], constant_values=9.0))
    np.testing.assert_array_equal(vals[9], np.pad(imv, [(0, 0), (0, 0), (1, 1), (2, 0)], mode="reflect"))


def test_one_hot_out_of_range_is_an_error():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        lab = fluid.layers.data(name="lab", shape=[1], dtype="int64")
        out = fluid.layers.one_hot(lab, depth=3)
    with pytest.raises(pe.InvalidArgumentError, match=r"op one_hot .*X 'lab' element 1 is 3, outside \[0, depth = 3\)"):
        fluid.Executor(fluid.CPUPlace()).run(main, feed={"lab": np.array([[0], [3]], np.int64)}, fetch_list=[out],
                                             scope=pe.static.Scope())


def test_conv_transpose_resize_and_norm_layers():
    """The 1.x forms: conv2d_transpose (filter_size from output_size), conv2d with groups == C
    and use_cudnn=False (Paddle's depthwise_conv2d op), resize_nearest / resize_bilinear /
    image_resize (align_corners=True by default, out_shape or scale), group_norm, instance_norm."""
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    main, startup = fresh()
    L = fluid.layers
    with fluid.program_guard(main, startup), unique_name.guard():
        img = L.data(name="img", shape=[4, 5, 5], dtype="float32")
        outs = [L.conv2d_transpose(img, 3, output_size=[10, 10], stride=2, padding=1, bias_attr=False),
                L.conv2d(img, 4, 3, padding=1, groups=4, use_cudnn=False, bias_attr=False),
                L.resize_nearest(img, out_shape=[9, 7]), L.resize_bilinear(img, out_shape=[8, 9]),
                L.image_resize(img, scale=2.0, resample="BILINEAR", align_corners=False, align_mode=0),
                L.group_norm(img, groups=2), L.instance_norm(img)]
    types = [op.type for op in main.global_block().ops]
    for op_type in ("conv2d_transpose", "depthwise_conv2d", "nearest_interp_v2", "bilinear_interp_v2", "group_norm",
                    "instance_norm"):
        assert op_type in types, op_type
    assert list(outs[0].shape) == [-1, 3, 10, 10] and list(outs[4].shape) == [-1, 4, 10, 10]
    scope = pe.static.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    imv = np.random.RandomState(4).randn(2, 4, 5, 5).astype(np.float32)
    vals = exe.run(main, feed={"img": imv}, fetch_list=outs, scope=scope)
    x = torch.tensor(imv, dtype=torch.float64)
    p = lambda n: torch.tensor(np.array(scope.find_var(n).get_tensor()), dtype=torch.float64)  # noqa: E731
    assert list(p("conv2d_transpose_0.w_0").shape) == [4, 3, 4, 4]  # (10 - 4*2 + 2 - 1) // 1 + 1
    want = [TF.conv_transpose2d(x, p("conv2d_transpose_0.w_0"), stride=2, padding=1),
            TF.conv2d(x, p("conv2d_0.w_0"), padding=1, groups=4)]
    # nearest with align_corners (Paddle's rounding, no torch form): src = int((in-1)/(out-1) * k + 0.5)
    iy = [int(4 / 8 * k + 0.5) for k in range(9)]
    ix = [int(4 / 6 * k + 0.5) for k in range(7)]
    want += [x[:, :, iy][:, :, :, ix], TF.interpolate(x, size=[8, 9], mode="bilinear", align_corners=True),
             TF.interpolate(x, size=[10, 10], mode="bilinear", align_corners=False),
             TF.group_norm(x, 2, p("group_norm_0.w_0"), p("group_norm_0.b_0")),
             TF.instance_norm(x, weight=p("instance_norm_0.w_0"), bias=p("instance_norm_0.b_0"))]
    for i, (got, w) in enumerate(zip(vals, want)):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-4, atol=1e-5, err_msg=str(i))


def test_shape_fill_random_and_parameter_layers():
    """fluid.layers.{squeeze, unsqueeze, slice, zeros, ones, zeros_like, ones_like, leaky_relu, mul, layer_norm,
    uniform_random, gaussian_random, create_parameter, create_global_var} and fluid.one_hot against numpy."""
    L = fluid.layers
    rng = np.random.RandomState(0)
    xv = rng.randn(3, 1, 4, 2).astype("float32")
    yv = rng.randn(8, 5).astype("float32")
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.data(name="x", shape=[3, 1, 4, 2], dtype="float32")
        y = fluid.data(name="y", shape=[8, 5], dtype="float32")
        ids = fluid.data(name="ids", shape=[3, 2], dtype="int64")
        outs = {
            "squeeze": L.squeeze(x, axes=[1]),
            "unsqueeze": L.unsqueeze(y, axes=[0, 2]),
            "slice": L.slice(x, axes=[0, 2], starts=[1, -3], ends=[3, 3]),
            "zeros": L.zeros([2, 3], "int64"),
            "ones": L.ones([2], "float32"),
            "zeros_like": L.zeros_like(x),
            "ones_like": L.ones_like(ids),
            "leaky_relu": L.leaky_relu(x),
            "mul": L.mul(x, y, x_num_col_dims=1),
            "layer_norm": L.layer_norm(x, begin_norm_axis=2, epsilon=1e-5),
            "uniform": L.uniform_random([1000], min=2.0, max=3.0, seed=7),
            "gaussian": L.gaussian_random([2000], mean=1.0, std=0.5, seed=7),
            "one_hot": fluid.one_hot(ids, depth=4),
        }
        w = L.create_parameter([5, 2], "float32", name="my_w",
                               default_initializer=pe.nn.initializer.Constant(0.5))
        outs["param"] = L.mul(y, w)
        g = L.create_global_var([1], 3.0, "float32", persistable=True, name="g")
        outs["global"] = L.scale(g, 2.0)
    assert isinstance(w, pe.framework.Parameter) and w.name == "my_w"
    assert list(outs["mul"].shape) == [3, 5] and list(outs["unsqueeze"].shape) == [1, 8, 1, 5]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    idv = np.array([[0, 3], [2, 1], [1, 1]], "int64")
    names = list(outs)
    got = dict(zip(names, exe.run(main, feed={"x": xv, "y": yv, "ids": idv}, fetch_list=[outs[n] for n in names])))
    mean = xv.reshape(3, 1, -1).mean(-1, keepdims=True)
    var = xv.reshape(3, 1, -1).var(-1, keepdims=True)
    want = {
        "squeeze": xv[:, 0], "unsqueeze": yv[None, :, None], "slice": xv[1:3, :, 1:3],
        "zeros": np.zeros((2, 3), "int64"), "ones": np.ones(2, "float32"), "zeros_like": np.zeros_like(xv),
        "ones_like": np.ones((3, 2), "int64"), "leaky_relu": np.where(xv > 0, xv, 0.02 * xv),
        "mul": xv.reshape(3, 8) @ yv, "layer_norm": ((xv.reshape(3, 1, -1) - mean) / np.sqrt(var + 1e-5)).reshape(
            xv.shape),
        "one_hot": np.eye(4, dtype="float32")[idv], "param": yv @ np.full((5, 2), 0.5, "float32"),
        "global": np.array([6.0], "float32"),
    }
    for n, v in want.items():
        assert got[n].dtype == v.dtype, (n, got[n].dtype, v.dtype)
        np.testing.assert_allclose(got[n], v, rtol=1e-5, atol=1e-5, err_msg=n)
    u, gs = got["uniform"], got["gaussian"]
    assert u.shape == (1000,) and u.min() >= 2.0 and u.max() < 3.0 and abs(u.mean() - 2.5) < 0.05
    assert gs.shape == (2000,) and abs(gs.mean() - 1.0) < 0.05 and abs(gs.std() - 0.5) < 0.05
    # layer_norm's scale and shift are trained parameters of the normalized size (4 * 2)
    ln = [p for p in main.global_block().all_parameters() if p.name.startswith("layer_norm")]
    assert sorted(list(p.shape) for p in ln) == [[8], [8]]
    with pytest.raises(pe.InvalidArgumentError, match="begin_norm_axis=4"):
        with fluid.program_guard(*fresh()):
            L.layer_norm(fluid.data(name="z", shape=[2, 3, 4, 5], dtype="float32"), begin_norm_axis=4)
    with pytest.raises(pe.InvalidArgumentError, match="x_num_col_dims=4"):
        with fluid.program_guard(*fresh()):
            L.mul(fluid.data(name="z", shape=[2, 3, 4, 5], dtype="float32"), fluid.data(name="v", shape=[5, 2]),
                  x_num_col_dims=4)


def test_fluid_io_save_load_and_top_level_names(tmp_path):
    """fluid.io.save / load / load_program_state / set_program_state (1.6's model_path forms) are
    pe.static's; fluid.Tensor, fluid.unique_name, fluid.name_scope."""
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        with fluid.name_scope("block"):
            x = fluid.data(name="x", shape=[None, 3], dtype="float32")
            out = fluid.layers.fc(x, 2)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        wname = main.global_block().all_parameters()[0].name
        w0 = np.array(scope.find_var(wname).get_tensor())
        fluid.io.save(main, str(tmp_path / "m"))
        state = fluid.io.load_program_state(str(tmp_path / "m"))
        np.testing.assert_array_equal(state[wname], w0)
        state[wname] = state[wname] + 1
        fluid.io.set_program_state(main, state)
        np.testing.assert_array_equal(np.array(scope.find_var(wname).get_tensor()), w0 + 1)
        fluid.io.load(main, str(tmp_path / "m"), exe)
        np.testing.assert_array_equal(np.array(scope.find_var(wname).get_tensor()), w0)
    assert fluid.Tensor is fluid.LoDTensor and fluid.unique_name is unique_name
    with pytest.raises(TypeError, match="prefix must be a str"):
        with fluid.name_scope(3):
            pass


@pytest.mark.parametrize("layer", ["mse_loss", "log_loss", "huber_loss", "l2_normalize"])
def test_composed_loss_layers_vs_torch(layer):
    """fluid.layers.mse_loss / log_loss / huber_loss / l2_normalize (built from elementwise ops): the
    value and the gradient wrt input against torch's formulas."""
    torch = pytest.importorskip("torch")
    rng = np.random.RandomState(1)
    xv = rng.uniform(0.05, 0.95, (6, 3)).astype("float64") if layer == "log_loss" else rng.randn(6, 3) * 2
    lv = (rng.rand(6, 3) > 0.5).astype("float64") if layer == "log_loss" else rng.randn(6, 3)
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.data(name="x", shape=[6, 3], dtype="float64")
        x.stop_gradient = False
        lab = fluid.data(name="lab", shape=[6, 3], dtype="float64")
        out = {"mse_loss": lambda: fluid.layers.mse_loss(x, lab),
               "log_loss": lambda: fluid.layers.log_loss(x, lab, epsilon=1e-4),
               "huber_loss": lambda: fluid.layers.huber_loss(x, lab, delta=1.5),
               "l2_normalize": lambda: fluid.layers.l2_normalize(x, axis=1)}[layer]()
        seed = fluid.data(name="seed", shape=list(out.shape), dtype="float64")
        gx, = fluid.gradients([out], [x], target_gradients=[seed])
    sv = rng.randn(*[int(d) for d in out.shape])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, ggot = exe.run(main, feed={"x": xv, "lab": lv, "seed": sv}, fetch_list=[out, gx])
    tx = torch.tensor(xv, requires_grad=True)
    tl = torch.tensor(lv)
    if layer == "mse_loss":
        ref = torch.mean((tx - tl) ** 2).reshape(1)
    elif layer == "log_loss":
        ref = -tl * torch.log(tx + 1e-4) - (1 - tl) * torch.log(1 - tx + 1e-4)
    elif layer == "huber_loss":
        ref = torch.nn.functional.huber_loss(tx, tl, reduction="none", delta=1.5)
    else:
        ref = torch.nn.functional.normalize(tx, dim=1, eps=1e-6)
    ref.backward(torch.tensor(sv).reshape(ref.shape))
    np.testing.assert_allclose(got.reshape(ref.shape), ref.detach().numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ggot, tx.grad.numpy(), rtol=1e-6, atol=1e-9)
    if layer == "huber_loss":   # both branches taken
        r = np.abs(lv - xv)
        assert (r <= 1.5).any() and (r > 1.5).any()


def test_issue13_fluid_names():
    """Every name issue 13 lists for fluid-era code exists (what each does is tested where it is built)."""
    import pe.dataset
    import pe.reader
    want = {
        fluid: "CPUPlace CUDAPlace Executor ParallelExecutor Program program_guard default_main_program "
               "default_startup_program global_scope scope_guard DataFeeder create_lod_tensor ParamAttr "
               "ExecutionStrategy BuildStrategy CompiledProgram",
        fluid.core: "Scope is_compiled_with_cuda LoDTensor",
        fluid.layers: "data fc conv2d pool2d batch_norm dropout embedding concat reshape transpose elementwise_add "
                      "elementwise_sub elementwise_mul elementwise_div scale mean square_error_cost cross_entropy "
                      "softmax_with_cross_entropy accuracy cos_sim one_hot gather sequence_pool sequence_conv "
                      "sequence_softmax dynamic_lstm dynamic_gru fill_constant cast exponential_decay "
                      "piecewise_decay noam_decay cosine_decay",
        fluid.nets: "simple_img_conv_pool img_conv_group sequence_conv_pool glu scaled_dot_product_attention",
        fluid.optimizer: "SGD Momentum Adam Adagrad RMSProp Adamax Lamb SGDOptimizer MomentumOptimizer "
                         "AdamOptimizer AdagradOptimizer RMSPropOptimizer AdamaxOptimizer LambOptimizer",
        fluid.regularizer: "L1Decay L2Decay L1DecayRegularizer L2DecayRegularizer",
        fluid.clip: "GradientClipByValue GradientClipByNorm GradientClipByGlobalNorm",
        fluid.io: "save_params load_params save_persistables load_persistables save_inference_model "
                  "load_inference_model",
        pe: "batch",
        pe.reader: "shuffle buffered compose chain map_readers",
        pe.dataset: "uci_housing mnist fashion_mnist cifar imikolov imdb movielens",
    }
    missing = ["%s.%s" % (m.__name__, n) for m, names in want.items() for n in names.split() if not hasattr(m, n)]
    assert not missing, missing
    assert callable(fluid.CompiledProgram(fluid.Program()).with_data_parallel)
