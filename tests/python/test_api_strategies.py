"""tests/python/test_api_strategies.py — ExecutionStrategy / BuildStrategy reach the engine; threads.

- gradient_scale_strategy: one SGD step of mean(x @ w) on 2 places moves w by
  the batch-mean gradient with BatchShare (default) and CoeffNumDevice (equal
  split), and by twice that with One (per-place gradients summed unscaled).
- reduce_strategy Reduce and num_threads / sequential execution give the same
  parameters as the default.
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
