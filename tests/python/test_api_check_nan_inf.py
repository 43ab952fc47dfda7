"""tests/python/test_api_check_nan_inf.py — FLAGS_check_nan_inf and the strategy value checks.

- ExecutionStrategy.check_nan_inf: 0/0 (NaN), an overflowing product (+Inf)
  and an overflowing scale (-Inf) fail the run on 1 and 3 places with the
  op's type and index, the place, the output slot and var and the element;
  with the switch off the same program runs and returns the value.
- FLAGS_check_nan_inf=1 in the environment (read once per process, so in a
  child process) turns the check on for pe.static.Executor and the
  ParallelExecutor.
- Training with the switch on gives the bits of training with it off.
- Out-of-range strategy values raise pe.InvalidArgumentError (a ValueError)
  from the setters, naming the field, the value and what is allowed.
- num_iteration_per_drop_scope = 3 drops the local scopes after every 3rd
  run (and the allocator's bytes fall with them).
"""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import pe
from pe.utils import unique_name

pe.enable_static()

CASES = [("elementwise_div", 0.0, "NaN"), ("elementwise_mul", 1e20, "+Inf"), ("scale", 100.0, "-Inf")]


def nan_program(op_type):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 4], "float32")
        a = pe.scale(x, 1.0)
        if op_type == "elementwise_div":
            out = pe.divide(a, a)
        elif op_type == "elementwise_mul":
            out = pe.multiply(a, a)
        else:
            out = pe.scale(a, -1e37)
    return main, out


def feed(bad):
    x = np.ones((3, 4), np.float32)
    x[2, 1] = bad
    return {"x": x}


def run_parallel(monkeypatch, places, check, op_type, bad):
    monkeypatch.setenv("CPU_NUM", str(places))
    main, out = nan_program(op_type)
    es = pe.static.ExecutionStrategy()
    es.check_nan_inf = check
    pexe = pe.static.ParallelExecutor(False, main_program=main, exec_strategy=es, scope=pe.static.Scope())
    return pexe.run([out], feed=feed(bad))[0], out.name


@pytest.mark.parametrize("op_type,bad,what", CASES)
def test_check_nan_inf_names_the_op(monkeypatch, op_type, bad, what):
    for places in (1, 3):
        main, out = nan_program(op_type)
        with pytest.raises(pe.InvalidArgumentError) as e:
            run_parallel(monkeypatch, places, True, op_type, bad)
        want = "op 1 (%s) on cpu:%d: output Out '%s' has %s at element %d (FLAGS_check_nan_inf)" % (
            op_type, 2 if places == 3 else 0, out.name, what, 1 if places == 3 else 9)
        assert want in str(e.value)
        got, _ = run_parallel(monkeypatch, places, False, op_type, bad)  # off: no error, the value comes back
        assert not np.isfinite(got[2, 1]) and np.isfinite(np.delete(got.ravel(), 9)).all()


CHILD = r"""
import numpy as np, pe, sys
sys.path.insert(0, sys.argv[1])
from test_api_check_nan_inf import nan_program, feed
main, out = nan_program("elementwise_div")
for make in (lambda: pe.static.Executor(), lambda: pe.static.ParallelExecutor(False, main_program=main)):
    try:
        ex = make()
        if isinstance(ex, pe.static.Executor):
            ex.run(main, feed=feed(0.0), fetch_list=[out])
        else:
            ex.run([out], feed=feed(0.0))
        print("no error")
    except pe.InvalidArgumentError as e:
        print(e)
"""


@pytest.mark.parametrize("value", ["1", "0"])
def test_env_var(value):
    env = dict(os.environ, FLAGS_check_nan_inf=value, CPU_NUM="3")
    r = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(os.path.abspath(__file__))], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    if value == "0":
        assert lines == ["no error", "no error"]
        return
    assert "op 1 (elementwise_div) on cpu:0: output Out" in lines[0] and "has NaN at element 9" in lines[0]
    assert "op 1 (elementwise_div) on cpu:2: output Out" in lines[1] and "has NaN at element 1" in lines[1]


def train(monkeypatch, check, places):
    monkeypatch.setenv("CPU_NUM", str(places))
    main, startup = pe.static.Program(), pe.static.Program()
    main.random_seed = startup.random_seed = 7
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        h = pe.static.nn.fc(x, 8, activation="relu")
        loss = pe.mean(pe.static.nn.fc(h, 2))
        pe.optimizer.Adam(learning_rate=0.01).minimize(loss)
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    es = pe.static.ExecutionStrategy()
    es.check_nan_inf = check
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, exec_strategy=es, scope=scope)
    rng = np.random.RandomState(0)
    for _ in range(5):
        pexe.run([loss], feed={"x": rng.rand(6, 3).astype(np.float32)})
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def test_training_bits_unchanged(monkeypatch):
    for places in (1, 3):
        off, on = train(monkeypatch, False, places), train(monkeypatch, True, places)
        for k in off:
            assert off[k].tobytes() == on[k].tobytes(), k


@pytest.mark.parametrize("cls,field,value,words", [
    ("ExecutionStrategy", "num_threads", -1, "allowed 0 (automatic"),
    ("ExecutionStrategy", "num_threads", 1025, "or 1 to 1024"),
    ("ExecutionStrategy", "num_iteration_per_run", 0, "allowed a positive count"),
    ("ExecutionStrategy", "num_iteration_per_drop_scope", -1, "allowed 0 (never drop"),
    ("BuildStrategy", "fuse_grad_size_in_MB", math.nan, "allowed a finite size in MB greater than 0"),
    ("BuildStrategy", "fuse_grad_size_in_MB", -1, "allowed a finite size in MB greater than 0"),
    ("BuildStrategy", "fuse_first_grad_size_in_MB", math.inf, "allowed a finite size in MB greater than 0"),
    ("BuildStrategy", "reduce_strategy", 2, "allowed 0 (ReduceStrategy.AllReduce), 1 (ReduceStrategy.Reduce)"),
    ("BuildStrategy", "gradient_scale_strategy", 4, "3 (GradientScaleStrategy.BatchShare)"),
])
def test_invalid_strategy_values(cls, field, value, words):
    s = getattr(pe.static, cls)()
    before = getattr(s, field)
    with pytest.raises(ValueError) as e:
        setattr(s, field, value)
    assert isinstance(e.value, pe.InvalidArgumentError)
    assert "%s.%s = %s is out of range" % (cls, field, value) in str(e.value) and words in str(e.value)
    assert getattr(s, field) == before  # refused, not stored


def test_drop_scope_every_k_runs(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, out = nan_program("elementwise_mul")
    es = pe.static.ExecutionStrategy()
    es.num_iteration_per_drop_scope = 3
    pexe = pe.static.ParallelExecutor(False, main_program=main, exec_strategy=es, scope=pe.static.Scope())
    x = np.ones((64, 4), np.float32)
    places = [("cpu", 0), ("cpu", 1)]

    def in_use():  # the allocator's bytes on each place, not PE's own counter
        return [pe._core.alloc_stats(p)["bytes_in_use"] for p in places]

    for cycle in range(2):
        used = {}
        for run in (1, 2, 3):
            pexe.run([out], feed={"x": x})
            used[run] = in_use()
            assert pexe._need_create_local_exe_scopes() == (run == 3), (cycle, run)
        # runs 1 and 2 keep the local scopes (the same bytes: nothing new is
        # allocated); run 3 drops them, so every place's allocator gives back
        # at least one of its [32, 4] fp32 intermediates (512 bytes)
        assert used[2] == used[1], (cycle, used)
        for p, (kept, dropped) in enumerate(zip(used[2], used[3])):
            assert dropped <= kept - 32 * 4 * 4, (cycle, p, used)
