"""tests/python/test_lr_schedules.py — fluid.layers' learning-rate schedules (Paddle 1.x semantics).

Each schedule's LR over 20 runs of the main program against Paddle's formula
in numpy; the ops carry op_role LRSched and share one @LR_DECAY_COUNTER@;
SGD with a schedule trains as numpy's SGD with that LR; bad arguments are
errors naming the argument.
"""
import math

import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.framework import OpRole
from pe.utils import unique_name

N = 20


def run_schedule(make, steps=N):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        lr = make()
    assert lr.persistable and list(lr.shape) == [1] and lr.dtype == "float32"
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    out = [float(np.array(exe.run(main, fetch_list=[lr], scope=scope)[0]).ravel()[0]) for _ in range(steps)]
    return main, np.array(out)


def ref(fn, begin=0, steps=N):
    return np.array([fn(float(s)) for s in range(begin, begin + steps)])


L = fluid.layers

CASES = {
    "exponential": (lambda: L.exponential_decay(0.1, 5, 0.5),
                    ref(lambda s: 0.1 * 0.5 ** (s / 5))),
    "exponential_staircase": (lambda: L.exponential_decay(0.1, 5, 0.5, staircase=True),
                              ref(lambda s: 0.1 * 0.5 ** math.floor(s / 5))),
    "natural_exp": (lambda: L.natural_exp_decay(0.1, 4, 0.3),
                    ref(lambda s: 0.1 * math.exp(-0.3 * s / 4))),
    "natural_exp_staircase": (lambda: L.natural_exp_decay(0.1, 4, 0.3, staircase=True),
                              ref(lambda s: 0.1 * math.exp(-0.3 * math.floor(s / 4)))),
    "inverse_time": (lambda: L.inverse_time_decay(0.1, 3, 0.5),
                     ref(lambda s: 0.1 / (1 + 0.5 * s / 3))),
    "inverse_time_staircase": (lambda: L.inverse_time_decay(0.1, 3, 0.5, staircase=True),
                               ref(lambda s: 0.1 / (1 + 0.5 * math.floor(s / 3)))),
    "polynomial": (lambda: L.polynomial_decay(0.1, 8, end_learning_rate=0.01, power=2.0),
                   ref(lambda s: (0.1 - 0.01) * (1 - min(s, 8) / 8) ** 2 + 0.01)),
    "polynomial_cycle": (lambda: L.polynomial_decay(0.1, 6, end_learning_rate=0.001, power=1.5, cycle=True),
                         ref(lambda s: (0.1 - 0.001) * (1 - s / (6 * max(math.ceil(s / 6), 1))) ** 1.5 + 0.001)),
    "piecewise": (lambda: L.piecewise_decay([3, 7, 12], [1.0, 0.5, 0.1, 0.01]),
                  ref(lambda s: [1.0, 0.5, 0.1, 0.01][sum(s >= b for b in (3, 7, 12))])),
    "noam": (lambda: L.noam_decay(64, 6, learning_rate=2.0),
             ref(lambda s: 2.0 * 64 ** -0.5 * min(s ** -0.5, 6 ** -1.5 * s), begin=1)),
    "cosine": (lambda: L.cosine_decay(0.1, 3, 4),  # runs past `epochs`: cos goes on as Paddle's
               ref(lambda s: 0.1 * 0.5 * (math.cos(math.floor(s / 3) * math.pi / 4) + 1))),
    "warmup_number": (lambda: L.linear_lr_warmup(0.2, 5, 0.0, 0.2),
                      ref(lambda s: 0.2 * s / 5 if s < 5 else 0.2)),
    "warmup_of_a_schedule": (lambda: L.linear_lr_warmup(L.exponential_decay(0.1, 2, 0.9, True), 4, 0.01, 0.1),
                             ref(lambda s: 0.01 + 0.09 * s / 4 if s < 4 else 0.1 * 0.9 ** math.floor(s / 2))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_matches_paddle_formula(name):
    make, want = CASES[name]
    main, got = run_schedule(make)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-8)
    ops = main.global_block().ops
    assert ops[0].type == "increment" and ops[0].input("X") == ["@LR_DECAY_COUNTER@"]
    assert all(int(op.attr("op_role") or 0) == OpRole.LRSched for op in ops)
    assert sum(op.type == "increment" for op in ops) == 1  # one counter even for a warmup of a schedule


def test_counter_is_int64_persistable_and_shared():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        a = L.exponential_decay(0.1, 5, 0.5)
        b = L.piecewise_decay([2], [0.1, 0.2])
    c = main.global_block().var("@LR_DECAY_COUNTER@")
    assert c.persistable and c.dtype == "int64"
    assert [op.type for op in main.global_block().ops].count("increment") == 1
    assert a.name != b.name
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    for s in range(4):
        va, vb = exe.run(main, fetch_list=[a, b], scope=scope)
        assert np.isclose(float(np.ravel(va)[0]), 0.1 * 0.5 ** (s / 5))
        assert np.isclose(float(np.ravel(vb)[0]), 0.1 if s < 2 else 0.2)
    assert np.array(scope.var("@LR_DECAY_COUNTER@").get_tensor()).ravel()[0] == 3


@pytest.mark.parametrize("sched", ["exponential", "piecewise", "noam", "momentum_cosine"])
def test_sgd_with_schedule_matches_numpy(sched):
    """Linear regression y = x W + b, mean square error: SGD (and Momentum)
    steps with the scheduled LR equal numpy's over 6 steps."""
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.program_guard(main, startup), unique_name.guard():
        x = L.data(name="x", shape=[4], dtype="float32")
        y = L.data(name="y", shape=[1], dtype="float32")
        pred = L.fc(x, 1, param_attr=fluid.ParamAttr(name="w"), bias_attr=fluid.ParamAttr(name="b"))
        loss = L.mean(L.square_error_cost(pred, y))
        if sched == "exponential":
            lr, lrf = L.exponential_decay(0.1, 2, 0.5, staircase=True), lambda s: 0.1 * 0.5 ** (s // 2)
        elif sched == "piecewise":
            lr, lrf = L.piecewise_decay([2, 4], [0.2, 0.05, 0.01]), lambda s: [0.2, 0.05, 0.01][(s >= 2) + (s >= 4)]
        elif sched == "noam":
            lr, lrf = L.noam_decay(16, 3), lambda s: 16 ** -0.5 * min((s + 1) ** -0.5, 3 ** -1.5 * (s + 1))
        else:
            lr, lrf = L.cosine_decay(0.1, 1, 5), lambda s: 0.05 * (math.cos(s * math.pi / 5) + 1)
        if sched == "momentum_cosine":
            fluid.optimizer.Momentum(learning_rate=lr, momentum=0.9).minimize(loss)
        else:
            fluid.optimizer.SGD(learning_rate=lr).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    w = np.array(scope.var("w").get_tensor()).astype(np.float64)
    b = np.array(scope.var("b").get_tensor()).astype(np.float64)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    rng = np.random.RandomState(0)
    for s in range(6):
        xs, ys = rng.randn(8, 4).astype("float32"), rng.randn(8, 1).astype("float32")
        got_loss, got_lr = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss, lr], scope=scope)
        err = xs @ w + b - ys
        assert np.isclose(float(np.ravel(got_loss)[0]), float(np.mean(err ** 2)), rtol=1e-5)
        assert np.isclose(float(np.ravel(got_lr)[0]), lrf(s), rtol=1e-6)
        gw, gb = 2 * xs.T @ err / len(xs), 2 * err.sum(0) / len(xs)
        if sched == "momentum_cosine":
            vw, vb = 0.9 * vw + gw, 0.9 * vb + gb
            gw, gb = vw, vb
        w, b = w - lrf(s) * gw, b - lrf(s) * gb
    np.testing.assert_allclose(np.array(scope.var("w").get_tensor()), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(scope.var("b").get_tensor()), b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make,match", [
    (lambda: L.exponential_decay(0.1, 0, 0.5), "decay_steps must be > 0, got 0"),
    (lambda: L.exponential_decay("0.1", 5, 0.5), "learning_rate must be a finite number, got '0.1'"),
    (lambda: L.natural_exp_decay(0.1, 5, float("nan")), "decay_rate must be a finite number"),
    (lambda: L.inverse_time_decay(0.1, -2, 0.5), "decay_steps must be > 0, got -2"),
    (lambda: L.polynomial_decay(0.1, 0), "decay_steps must be > 0"),
    (lambda: L.piecewise_decay([3, 7], [1.0, 0.5]), "len\\(values\\) must be len\\(boundaries\\) \\+ 1, got 2 values"),
    (lambda: L.piecewise_decay([7, 3], [1.0, 0.5, 0.1]), "boundaries must increase, got \\[7, 3\\]"),
    (lambda: L.piecewise_decay(3, [1.0]), "boundaries must be a list, got 3"),
    (lambda: L.noam_decay(0, 10), "d_model must be > 0, got 0"),
    (lambda: L.cosine_decay(0.1, 10, 2.5), "epochs must be a positive int, got 2.5"),
    (lambda: L.linear_lr_warmup(0.1, 0, 0.0, 0.1), "warmup_steps must be a positive int, got 0"),
])
def test_bad_arguments(make, match):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        with pytest.raises(pe.InvalidArgumentError, match=match):
            make()
    assert not main.global_block().ops  # nothing half-built


def test_exponential_decay_refuses_a_variable_learning_rate():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        v = L.exponential_decay(0.1, 5, 0.5)
        with pytest.raises(pe.InvalidArgumentError, match="exponential_decay: learning_rate must be a number, got "
                                                          "Variable"):
            L.exponential_decay(v, 5, 0.5)
