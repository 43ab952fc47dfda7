"""tests/python/test_api_initializers.py — pe.nn.initializer.* through ParamAttr, run by the startup program.

Each initializer is attached to an fc weight [fan_in, fan_out] (large enough
for statistics) and the startup program is run: Constant and Assign are
exact, Uniform stays in [low, high) with the right mean, Normal has the
right mean and std, TruncatedNormal stays within 2 std, Xavier and Kaiming
use Paddle's fan formulas (bounds / std), draws are repeatable, and the
program seed and an initializer's seed both select the random stream.
"""
import numpy as np
import pytest

import pe
import pe.nn.initializer as I
from pe.utils import unique_name

pe.enable_static()

FAN_IN, FAN_OUT = 200, 300


def init_weight(initializer, seed=0):
    main, startup = pe.static.Program(), pe.static.Program()
    startup.random_seed = seed
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, FAN_IN], "float32")
        pe.static.nn.fc(x, FAN_OUT, weight_attr=pe.ParamAttr(name="w", initializer=initializer), bias_attr=False)
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    return np.array(scope.find_var("w").get_tensor()).astype(np.float64)


def test_constant_and_assign():
    np.testing.assert_array_equal(init_weight(I.Constant(0.25)), np.full((FAN_IN, FAN_OUT), 0.25))
    vals = np.random.RandomState(0).randn(FAN_IN, FAN_OUT).astype(np.float32)
    np.testing.assert_array_equal(init_weight(I.Assign(vals)), vals)
    with pytest.raises(pe.InvalidArgumentError, match="Assign"):
        init_weight(I.Assign(np.ones(3)))


def test_uniform_and_normal():
    u = init_weight(I.Uniform(-0.5, 1.5))
    assert u.min() >= -0.5 and u.max() < 1.5
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.std() - 2 / np.sqrt(12)) < 0.02
    n = init_weight(I.Normal(1.0, 2.0))
    assert abs(n.mean() - 1.0) < 0.03 and abs(n.std() - 2.0) < 0.03
    t = init_weight(I.TruncatedNormal(0.0, 0.5))
    assert np.abs(t).max() <= 1.0 + 1e-6 and t.std() > 0.3


@pytest.mark.parametrize("cls,bound_or_std,uniform", [
    (I.XavierUniform, np.sqrt(6.0 / (FAN_IN + FAN_OUT)), True),
    (I.XavierNormal, np.sqrt(2.0 / (FAN_IN + FAN_OUT)), False),
    (I.KaimingUniform, np.sqrt(6.0 / FAN_IN), True),
    (I.KaimingNormal, np.sqrt(2.0 / FAN_IN), False)])
def test_fan_based(cls, bound_or_std, uniform):
    w = init_weight(cls())
    if uniform:
        assert np.abs(w).max() <= bound_or_std and np.abs(w).max() > 0.98 * bound_or_std
        assert abs(w.std() - bound_or_std / np.sqrt(3)) < 0.03 * bound_or_std
    else:
        assert abs(w.std() - bound_or_std) < 0.03 * bound_or_std


def test_explicit_fans():
    w = init_weight(I.XavierUniform(fan_in=10, fan_out=14))
    assert np.abs(w).max() <= np.sqrt(6.0 / 24) and np.abs(w).max() > 0.95 * np.sqrt(6.0 / 24)


def test_seeds():
    a, b = init_weight(I.Normal(0, 1)), init_weight(I.Normal(0, 1))
    np.testing.assert_array_equal(a, b)  # deterministic
    c = init_weight(I.Normal(0, 1), seed=5)
    assert not np.array_equal(a, c)  # the program seed matters when the initializer has none
    # an explicit seed is part of the stream key (with the program seed, ops/cpu/random.c)
    d1, d2 = init_weight(I.Normal(0, 1, seed=11)), init_weight(I.Normal(0, 1, seed=11))
    np.testing.assert_array_equal(d1, d2)
    assert not np.array_equal(d1, a)
    assert not np.array_equal(d1, init_weight(I.Normal(0, 1, seed=12)))


def test_default_initializers_of_fc():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        pe.static.nn.fc(pe.static.data("x", [None, FAN_IN], "float32"), FAN_OUT)
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    w = np.array(scope.find_var("fc_0.w_0").get_tensor())
    b = np.array(scope.find_var("fc_0.b_0").get_tensor())
    assert np.abs(w).max() <= np.sqrt(6.0 / (FAN_IN + FAN_OUT))  # XavierUniform
    np.testing.assert_array_equal(b, np.zeros(FAN_OUT))           # Constant(0)
    types = [op.type for op in startup.global_block().ops]
    assert types == ["uniform_random", "fill_constant"], types
