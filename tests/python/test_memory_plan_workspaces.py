"""tests/python/test_memory_plan_workspaces.py — oneDNN workspaces under the memory plan.

With BuildStrategy.memory_optimize, each conv2d / batch_norm / pool2d op (and
its gradient) gets its oneDNN workspace (scratchpad, blocked-layout copies)
as a slot of the place's arena, sized at plan time by the kernel's workspace
function; without it the kernels take a per-place pool. A conv -> batch_norm
-> relu -> avg-pool -> conv -> max-pool -> fc network (float32: every one of
those ops on oneDNN, the max-pool gradient on PE's loops) trained 4 steps on
2 places gives the same parameters and losses, bit for bit, with the plan
and without it: the same primitives reading and writing other bytes. A
second batch size re-plans (new shapes, new workspaces) and still agrees.
(That the pool is then never used is asserted in C:
tests/unit/test_memory_plan.c:test_cnn_workspaces_in_plan.)
"""
import numpy as np

import pe
from pe.utils import unique_name

pe.enable_static()


def cnn(x):
    h = pe.static.nn.conv2d(x, 8, 3, padding=1)
    h = pe.static.nn.batch_norm(h, act="relu")
    h = pe.nn.functional.avg_pool2d(h, 2, 2)
    h = pe.static.nn.conv2d(h, 16, 3, padding=1, act="relu")
    return pe.nn.functional.max_pool2d(h, 2, 2)


def decoder(x):
    """conv2d (stride 2) -> conv2d_transpose (stride 2, back to 12x12) -> depthwise_conv2d ->
    group_norm -> bilinear downsampling: the other oneDNN convolutions with workspaces."""
    h = pe.static.nn.conv2d(x, 8, 3, stride=2, padding=1, act="relu")
    h = pe.static.nn.conv2d_transpose(h, 6, filter_size=4, stride=2, padding=1, act="relu")
    h = pe.static.nn.conv2d(h, 6, 3, padding=1, groups=6, use_cudnn=False)
    h = pe.static.nn.group_norm(h, 3, act="relu")
    return pe.nn.functional.interpolate(h, size=[5, 5], mode="bilinear")


def build(body=cnn):
    main, startup = pe.static.Program(), pe.static.Program()
    main.random_seed = startup.random_seed = 7
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3, 12, 12], "float32")
        y = pe.static.data("y", [None, 1], "int64")
        h = body(x)
        logits = pe.static.nn.fc(h, 10)
        loss = pe.mean(pe.nn.functional.cross_entropy(logits, y))
        pe.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return main, startup, loss


def train(monkeypatch, memory_optimize, batches, body=cnn):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, loss = build(body)
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    bs = pe.static.BuildStrategy()
    bs.memory_optimize = memory_optimize
    bs.enable_inplace = memory_optimize
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope, build_strategy=bs)
    losses = []
    for xb, yb in batches:
        lv, = pexe.run([loss], feed={"x": xb, "y": yb})
        losses.append(np.array(lv))
    params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    return losses, params


def test_workspaces_in_the_plan_change_no_result(monkeypatch):
    rng = np.random.RandomState(3)
    batches = [(rng.rand(rows, 3, 12, 12).astype(np.float32), rng.randint(0, 10, (rows, 1)).astype(np.int64))
               for rows in (16, 16, 10, 16)]
    ref_losses, ref_params = train(monkeypatch, False, batches)
    losses, params = train(monkeypatch, True, batches)
    assert any("batch_norm" in n for n in params)
    for a, b in zip(losses, ref_losses):
        np.testing.assert_array_equal(a, b)
    for name, value in ref_params.items():
        np.testing.assert_array_equal(params[name], value, err_msg=name)


def test_transposed_and_depthwise_conv_workspaces_change_no_result(monkeypatch):
    rng = np.random.RandomState(4)
    batches = [(rng.rand(rows, 3, 12, 12).astype(np.float32), rng.randint(0, 10, (rows, 1)).astype(np.int64))
               for rows in (8, 8, 6)]
    ref_losses, ref_params = train(monkeypatch, False, batches, decoder)
    losses, params = train(monkeypatch, True, batches, decoder)
    assert any("conv2d_transpose" in n for n in params) and any("group_norm" in n for n in params)
    for a, b in zip(losses, ref_losses):
        np.testing.assert_array_equal(a, b)
    for name, value in ref_params.items():
        np.testing.assert_array_equal(params[name], value, err_msg=name)
