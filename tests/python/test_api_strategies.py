"""tests/python/test_api_strategies.py — ExecutionStrategy / BuildStrategy reach the engine; threads.

- gradient_scale_strategy: one SGD step of mean(x @ w) on 2 places moves w by
  the batch-mean gradient with BatchShare (default) and CoeffNumDevice (equal
  split), and by twice that with One (per-place gradients summed unscaled).
- reduce_strategy Reduce and num_threads / sequential execution give the same
  parameters as the default.
- enable_sequential_execution x memory_optimize x enable_inplace x
  fuse_elewise_add_act_ops, all 16 combinations, give the losses and
  parameters of the run with all off bit for bit (MLP on 1 place, with 3
  threads, on 2 places; CNN on 1 place).
- debug_graphviz_path writes the multi-device graph; unknown strategy fields
  are AttributeErrors (typos are caught); Paddle-only switches PE cannot
  honour raise pe.UnsupportedError.
- return_merged=False gives one result per place (the last place takes the
  extra row); trainers_sum with one trainer returns its values as float64
  (across processes: tests/python/test_main_job.py).
- Runs release the GIL: executors in two Python threads run concurrently and
  give the results of sequential runs.
"""
import threading

import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.utils import unique_name

pe.enable_static()


def build():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        out = pe.static.nn.fc(x, 2, bias_attr=False)
        loss = pe.mean(out)
        pe.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


X = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0


def step(monkeypatch, **bs_fields):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, loss = build()
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    w0 = np.array(scope.find_var("fc_0.w_0").get_tensor()).astype(np.float64)
    bs = pe.static.BuildStrategy()
    es = pe.static.ExecutionStrategy()
    for k, v in bs_fields.items():
        setattr(es if k in ("num_threads",) else bs, k, v)
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                      build_strategy=bs, exec_strategy=es)
    lv, = pexe.run([loss], feed={"x": X})
    w1 = np.array(scope.find_var("fc_0.w_0").get_tensor()).astype(np.float64)
    return w0, w1, lv


def batch_grad():
    # d mean(x @ w) / dw over the 4 x 2 outputs: column sums of x / 8
    return np.tile(X.astype(np.float64).sum(0)[:, None] / 8.0, (1, 2))


def test_gradient_scale_strategies(monkeypatch):
    S = pe.static.BuildStrategy.GradientScaleStrategy
    for strategy, factor in [(S.BatchShare, 1.0), (S.CoeffNumDevice, 1.0), (S.One, 2.0)]:
        w0, w1, lv = step(monkeypatch, gradient_scale_strategy=strategy)
        np.testing.assert_allclose(w0 - w1, 0.5 * factor * batch_grad(), rtol=1e-5, atol=1e-7,
                                   err_msg=str(strategy))
        assert lv.shape == (2,)


def test_other_strategies_same_result(monkeypatch):
    ref = step(monkeypatch)
    R = pe.static.BuildStrategy.ReduceStrategy
    for fields in ({"reduce_strategy": R.Reduce}, {"num_threads": 1}, {"enable_sequential_execution": True},
                   {"num_threads": 3, "enable_inplace": True, "memory_optimize": True},
                   {"fuse_elewise_add_act_ops": True, "fuse_all_optimizer_ops": True, "fuse_all_reduce_ops": True}):
        got = step(monkeypatch, **fields)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-6, atol=1e-7, err_msg=str(fields))


def test_graphviz_and_field_checks(monkeypatch, tmp_path):
    path = tmp_path / "graph.dot"
    step(monkeypatch, debug_graphviz_path=str(path))
    assert path.exists() and "digraph" in path.read_text()
    bs = pe.static.BuildStrategy()
    with pytest.raises(AttributeError, match="reduce_stratgy"):
        bs.reduce_stratgy = 1
    with pytest.raises(pe.UnsupportedError, match="BuildStrategy.fuse_bn_act_ops = True is not supported"):
        bs.fuse_bn_act_ops = True  # Paddle's switches PE cannot honour (tests/python/test_strategy_fields.py)
    es = pe.static.ExecutionStrategy()
    assert (es.num_threads, es.num_iteration_per_drop_scope, es.num_iteration_per_run) == (0, 100, 1)


def test_return_merged_false(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, loss = build()
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    infer = main.clone(for_test=True)
    pexe = pe.static.ParallelExecutor(False, main_program=infer, scope=scope)  # inference: no loss_name
    w = np.array(scope.find_var("fc_0.w_0").get_tensor()).astype(np.float64)
    out_name = main.global_block().ops[0].output("Out")[0]
    per_place, = pexe.run([out_name], feed={"x": X[:3]}, return_merged=False)
    assert [p.shape for p in per_place] == [(1, 2), (2, 2)]  # the last place takes the extra row
    merged, = pexe.run([out_name], feed={"x": X[:3]})
    np.testing.assert_array_equal(np.concatenate(per_place), merged)
    np.testing.assert_allclose(merged, X[:3] @ w, rtol=1e-5)
    s = pexe.trainers_sum(np.array([[1.5, 2], [3, 4]], np.float32))
    assert s.dtype == np.float64 and s.shape == (2, 2) and s.tolist() == [[1.5, 2], [3, 4]]
    assert pexe.trainers_sum(2.5) == 2.5
    with pytest.raises(ValueError):
        pexe.trainers_sum(["a"])


def test_runs_release_the_gil():
    # programs are built sequentially (program_guard / unique_name.guard are
    # process-wide, as in Paddle); only the runs happen in threads
    jobs = {k: build() for k in (0, 1, 2, "seq")}
    results, errors = {}, []

    def work(k, n=30):
        try:
            main, startup, loss = jobs[k]
            scope = pe.static.Scope()
            exe = pe.static.Executor()
            exe.run(startup, scope=scope)
            for _ in range(n):
                exe.run(main, feed={"x": X}, fetch_list=[loss], scope=scope)
            results[k] = np.array(scope.find_var("fc_0.w_0").get_tensor())
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    work("seq")
    for k in range(3):
        np.testing.assert_array_equal(results[k], results["seq"])


# ---- enable_sequential_execution x the memory plan x fusion: the same bits ----
# Sequential execution runs the graph's handles one by one; memory_optimize on
# one place adds edges that run each optimizer op before the next backward op
# (so its gradient's bytes serve the next gradient). Run in the bare handle
# order, the update came after those bytes were reused, and the losses differed
# from the second step on. Every combination must give the reference's bits.

SEQ_STEPS = 4


def _seq_program(cnn):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        y = pe.static.data("y", [-1, 1], "int64")
        if cnn:
            x = pe.static.data("x", [-1, 2, 8, 8], "float32")
            h = fluid.layers.conv2d(x, 4, 3, padding=1, act="relu", param_attr=pe.ParamAttr(name="c0.w"),
                                       bias_attr=pe.ParamAttr(name="c0.b"))
            h = fluid.layers.pool2d(h, 2, "max", 2)
            h = fluid.layers.conv2d(h, 4, 3, padding=1, act="relu", param_attr=pe.ParamAttr(name="c1.w"),
                                       bias_attr=pe.ParamAttr(name="c1.b"))
            sizes = (4,)
        else:
            x = pe.static.data("x", [-1, 8], "float32")
            h = x
            sizes = (24, 24)
        for i, n in enumerate(sizes):
            h = fluid.layers.fc(h, n, param_attr=pe.ParamAttr(name="f%d.w" % i),
                                   bias_attr=pe.ParamAttr(name="f%d.b" % i), act="relu")
        h = fluid.layers.fc(h, 4, param_attr=pe.ParamAttr(name="out.w"), bias_attr=pe.ParamAttr(name="out.b"))
        loss = pe.mean(fluid.layers.softmax_with_cross_entropy(h, y))
        pe.optimizer.SGD(learning_rate=0.5).minimize(loss)
    params = sorted(v.name for v in main.global_block().all_parameters())
    return main, startup, loss, params


def _seq_train(monkeypatch, cnn, places, num_threads, seq, memopt, inplace, fuse):
    monkeypatch.setenv("CPU_NUM", str(places))
    main, startup, loss, params = _seq_program(cnn)
    scope = pe.static.Scope()
    pe.static.Executor(pe.CPUPlace()).run(startup, scope=scope)
    rs = np.random.RandomState(3)
    for name in params:  # the same start for every combination
        t = scope.find_var(name).get_tensor()
        shape = np.array(t).shape
        t.set(((rs.rand(*shape) - 0.5) * 0.8).astype(np.float32), pe.CPUPlace())
    bs = pe.static.BuildStrategy()
    bs.enable_sequential_execution, bs.memory_optimize, bs.enable_inplace = seq, memopt, inplace
    bs.fuse_elewise_add_act_ops = fuse
    es = pe.static.ExecutionStrategy()
    es.num_threads = num_threads
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                      build_strategy=bs, exec_strategy=es)
    rs = np.random.RandomState(5)
    xs = (16, 2, 8, 8) if cnn else (16, 8)
    losses = []
    for _ in range(SEQ_STEPS):
        feed = {"x": rs.rand(*xs).astype(np.float32), "y": rs.randint(0, 4, (16, 1)).astype(np.int64)}
        losses.append(np.array(pexe.run([loss], feed=feed)[0]))
    return losses, [np.array(scope.find_var(n).get_tensor()) for n in params]


@pytest.mark.parametrize("cnn,places,num_threads", [(False, 1, 0), (False, 1, 3), (False, 2, 0), (True, 1, 0)],
                         ids=["mlp-1place", "mlp-1place-3threads", "mlp-2places", "cnn-1place"])
def test_sequential_execution_with_memory_plan_same_bits(monkeypatch, cnn, places, num_threads):
    ref_losses, ref_params = _seq_train(monkeypatch, cnn, places, num_threads, False, False, False, False)
    for mask in range(1, 16):
        seq, memopt, inplace, fuse = (bool(mask & b) for b in (1, 2, 4, 8))
        what = "enable_sequential_execution=%d memory_optimize=%d enable_inplace=%d fuse_elewise_add_act_ops=%d" % (
            seq, memopt, inplace, fuse)
        losses, params = _seq_train(monkeypatch, cnn, places, num_threads, seq, memopt, inplace, fuse)
        for k, (a, b) in enumerate(zip(losses, ref_losses)):
            assert np.array_equal(a, b), "%s: step %d loss %r, reference %r" % (what, k, a, b)
        for a, b in zip(params, ref_params):
            assert np.array_equal(a, b), what
