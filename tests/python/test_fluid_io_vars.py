"""tests/python/test_fluid_io_vars.py — fluid.io.save_vars / load_vars (Paddle 1.x signatures).

A small fc program: save_vars with predicate=fluid.io.is_parameter writes the
parameters only; after the scope's values are overwritten, load_vars puts
them back exactly; a vars= list (Variables or names) saves just those;
mistakes are clear errors (both vars and predicate, an unknown name, a var
with no value, a file missing a var or holding another shape, nothing
chosen), and a failed load writes nothing.
"""
import os

import numpy as np
import pytest

import pe
import pe.fluid as fluid


def build():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        h = fluid.layers.fc(input=x, size=3, act="relu")
        y = fluid.layers.fc(input=h, size=2)
        loss = fluid.layers.mean(y)
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.global_scope()
    exe.run(startup)
    return main, exe, scope


def values(scope, names):
    return {n: np.array(scope.find_var(n).get_tensor()).copy() for n in names}


def test_round_trip_with_a_predicate(tmp_path):
    main, exe, scope = build()
    params = [v.name for v in main.global_block().vars.values() if v.is_parameter]
    assert len(params) == 4
    before = values(scope, params)
    fluid.io.save_vars(exe, str(tmp_path), main_program=main, predicate=fluid.io.is_parameter)
    assert os.path.exists(tmp_path / "vars.safetensors")
    for n in params:
        scope.find_var(n).get_tensor().set(np.zeros_like(before[n]), fluid.CPUPlace())
    fluid.io.load_vars(exe, str(tmp_path), main_program=main, predicate=fluid.io.is_parameter)
    after = values(scope, params)
    for n in params:
        np.testing.assert_array_equal(after[n], before[n])


def test_vars_list_saves_just_those(tmp_path):
    main, exe, scope = build()
    g = main.global_block()
    w = [v for v in g.vars.values() if v.is_parameter and v.name.endswith("w_0")]
    fluid.io.save_vars(exe, str(tmp_path), main_program=main, vars=[w[0], w[1].name], filename="two.st")
    # loading a var the file does not hold names it, and writes nothing
    b = [v.name for v in g.vars.values() if v.is_parameter and v.name.endswith("b_0")]
    keep = values(scope, [w[0].name])
    scope.find_var(w[0].name).get_tensor().set(np.ones_like(keep[w[0].name]), fluid.CPUPlace())
    with pytest.raises(pe.InvalidArgumentError, match="%s is not in the file" % b[0]):
        fluid.io.load_vars(exe, str(tmp_path), main_program=main, vars=[w[0].name, b[0]], filename="two.st")
    assert np.all(np.array(scope.find_var(w[0].name).get_tensor()) == 1.0)
    fluid.io.load_vars(exe, str(tmp_path), main_program=main, vars=[w[0]], filename="two.st")
    np.testing.assert_array_equal(np.array(scope.find_var(w[0].name).get_tensor()), keep[w[0].name])


def test_mistakes_are_clear(tmp_path):
    main, exe, scope = build()
    with pytest.raises(pe.InvalidArgumentError, match="give vars or predicate, not both"):
        fluid.io.save_vars(exe, str(tmp_path), main_program=main, vars=["x"], predicate=fluid.io.is_parameter)
    with pytest.raises(pe.NotFoundError, match="var nope is not in main_program's global block"):
        fluid.io.save_vars(exe, str(tmp_path), main_program=main, vars=["nope"])
    with pytest.raises(pe.NotFoundError, match="var x is not in the scope"):
        fluid.io.save_vars(exe, str(tmp_path), main_program=main, vars=["x"])
    with pytest.raises(pe.InvalidArgumentError, match="no var chosen"):
        fluid.io.save_vars(exe, str(tmp_path), main_program=main, predicate=lambda v: False)
    with pytest.raises(TypeError, match="predicate must be callable"):
        fluid.io.load_vars(exe, str(tmp_path), main_program=main, predicate=3)
    with pytest.raises(pe.NotFoundError, match="no checkpoint file"):
        fluid.io.load_vars(exe, str(tmp_path / "empty"), main_program=main, predicate=fluid.io.is_parameter)
    # a file whose var has another shape than the program declares
    # the first fc's weight, [4, 3] (by shape: the names' counters depend on the tests run before)
    wname = [v.name for v in main.global_block().vars.values()
             if v.is_parameter and v.name.endswith("w_0") and list(v.shape) == [4, 3]][0]
    other, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(other, startup):
        x = fluid.layers.data(name="x", shape=[5], dtype="float32")
        fluid.layers.fc(input=x, size=3, act="relu", param_attr=fluid.ParamAttr(name=wname), bias_attr=False)
    sc = fluid.core.Scope()
    with fluid.scope_guard(sc):
        exe.run(startup)
        fluid.io.save_vars(exe, str(tmp_path / "o"), main_program=other, vars=[wname])
    with pytest.raises(pe.InvalidArgumentError, match=r"float32 \[5, 3\], %s wants float32 \[4, 3\]" % wname):
        fluid.io.load_vars(exe, str(tmp_path / "o"), main_program=main, vars=[wname])
