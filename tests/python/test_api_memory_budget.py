"""tests/python/test_api_memory_budget.py — PE_MAX_MEMORY bounds what a program can allocate.

A program whose sizes pass the budget fails with pe.ResourceExhaustedError
naming the op, the var, the place, the budget and PE_MAX_MEMORY, before any
memory is touched; the same program runs under a larger budget; suffixes
and percentages parse; a malformed value warns and keeps the default.
Each case is its own process (the budget is read once per process).
"""
import os
import subprocess
import sys

SCRIPT = r'''
import numpy as np, pe
pe.enable_static()
main, startup = pe.static.Program(), pe.static.Program()
with pe.static.program_guard(main, startup):
    x = pe.static.data("x", [None, 8], "float32")
    big = pe.full([1 << 12, 1 << 12], 1.0, "float32")  # 64 MiB
    y = pe.mean(x) + pe.mean(big)
exe = pe.static.Executor(pe.CPUPlace())
exe.run(startup)
try:
    out, = exe.run(main, feed={"x": np.ones((4, 8), "float32")}, fetch_list=[y])
    print("OK", float(out))
except pe.ResourceExhaustedError as e:
    print("ERR", e)
'''


def run(value):
    env = dict(os.environ)
    env.pop("PE_MAX_MEMORY", None)
    if value is not None:
        env["PE_MAX_MEMORY"] = value
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), r.stderr


def test_budget_refuses_with_names():
    out, _ = run("16M")
    assert out.startswith("ERR"), out
    for part in ("fill_constant", "cpu:0", "memory budget is 16777216 bytes", "PE_MAX_MEMORY"):
        assert part in out, out


def test_budget_large_enough_runs():
    assert run("512M")[0] == "OK 2.0"
    assert run(None)[0] == "OK 2.0"  # the default: 80% of the machine's memory


def test_budget_forms():
    assert run("0.0001%")[0].startswith("ERR")  # a few MB of any machine
    assert run("100%")[0] == "OK 2.0"
    assert run("268435456")[0] == "OK 2.0"
    assert run("1G")[0] == "OK 2.0"


def test_budget_malformed_warns():
    out, err = run("lots")
    assert out == "OK 2.0"
    assert "PE_MAX_MEMORY=lots is not a size" in err
