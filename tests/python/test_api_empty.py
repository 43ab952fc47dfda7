"""tests/python/test_api_empty.py — empty batches through the Python API.

- pe.split of a batch with 0 rows (num > 0) gives empty parts; it used to
  dereference NULL in the C op and kill the interpreter.
- Training on an empty batch (the last, partial batch of an epoch can be
  one) with the Executor and a ParallelExecutor on one place: the loss is NaN
  (the mean of 0 rows, as torch.mean and F.cross_entropy in PyTorch 1.13),
  every parameter gradient is 0 (a sum over 0 rows), so SGD leaves the
  parameters as they were, like loss.backward(); opt.step() in PyTorch; the
  accuracy of 0 samples is 0; the next batch trains as usual.
- On 2 places an empty batch stays an error naming the feed and the place
  count (each place needs at least one row).
The same for every op of ops.def, under ASan: tests/unit/test_ops_empty.c.
"""
import numpy as np
import pytest
import torch

import pe
from pe.utils import unique_name

pe.enable_static()

D, C = 6, 3
PARAMS = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]


def build():
    main, startup = pe.static.Program(), pe.static.Program()
    startup.random_seed = 3
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, D], "float32")
        y = pe.static.data("y", [None, 1], "int64")
        h = pe.static.nn.fc(x, 8, activation="relu")
        logits = pe.static.nn.fc(h, C)
        loss = pe.nn.functional.cross_entropy(logits, y)
        acc = pe.metric.accuracy(pe.nn.functional.softmax(logits), y)
        pe.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss, acc


def batch(rows):
    rng = np.random.RandomState(rows)
    return {"x": rng.randn(rows, D).astype(np.float32), "y": rng.randint(0, C, (rows, 1)).astype(np.int64)}


def params(scope):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in PARAMS}


def test_split_of_an_empty_batch():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup):
        x = pe.static.data("x", [None, 4], "float32")
        parts = pe.split(x, 2, axis=0)
        cols = pe.split(x, [1, -1], axis=1)
    out = pe.static.Executor().run(main, feed={"x": np.zeros((0, 4), np.float32)}, fetch_list=list(parts) + list(cols))
    assert [o.shape for o in out] == [(0, 4), (0, 4), (0, 1), (0, 3)]


def test_torch_on_an_empty_batch():
    """What the PE behaviour below follows."""
    lin = torch.nn.Linear(D, C)
    loss = torch.nn.functional.cross_entropy(lin(torch.zeros(0, D)), torch.zeros(0, dtype=torch.long))
    loss.backward()
    assert torch.isnan(loss)
    assert float(lin.weight.grad.abs().sum()) == 0 and float(lin.bias.grad.abs().sum()) == 0


@pytest.mark.parametrize("mode", ["exe", "pe1"])
def test_train_on_an_empty_batch(mode, monkeypatch):
    main, startup, loss, acc = build()
    scope = pe.static.Scope()
    exe = pe.static.Executor(pe.CPUPlace())
    exe.run(startup, scope=scope)
    if mode == "exe":
        run = lambda feed: exe.run(main, feed=feed, fetch_list=[loss, acc], scope=scope)  # noqa: E731
    else:
        monkeypatch.setenv("CPU_NUM", "1")
        pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope)
        run = lambda feed: pexe.run([loss.name, acc.name], feed=feed)  # noqa: E731
    before = params(scope)
    lv, av = run(batch(0))
    assert np.isnan(lv).all() and float(np.asarray(av).ravel()[0]) == 0.0
    for n, v in params(scope).items():
        np.testing.assert_array_equal(v, before[n], err_msg=n)
    lv, _ = run(batch(5))
    assert np.isfinite(lv).all()
    assert not np.array_equal(params(scope)["fc_0.w_0"], before["fc_0.w_0"])


def test_empty_batch_on_two_places_is_an_error(monkeypatch):
    main, startup, loss, _ = build()
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    monkeypatch.setenv("CPU_NUM", "2")
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope)
    with pytest.raises(pe.Error, match=r"feed 'x' has 0 rows, fewer than the 2 places"):
        pexe.run([loss.name], feed=batch(0))
    lv, = pexe.run([loss.name], feed=batch(4))
    assert np.isfinite(lv).all()
