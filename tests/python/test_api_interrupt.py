"""tests/python/test_api_interrupt.py — Ctrl-C during a run (pe/interrupt.h).

A child process builds a chain of 150 fc layers sharing one 2048 x 2048
weight (tanh, no bias: little memory for a lot of work), so one run on a
256-row batch takes seconds (320 GFLOP), starts that run, and gets SIGINT
0.5 s later. Checked, for Executor and for ParallelExecutor on 2 places:
the run raises KeyboardInterrupt (not a pe error) within 1 s of the
signal (it stops between ops), and the next run works and gives the same
result as before (inference: nothing was updated). Then the CLI: `pe run`
of the same chain (one place and --places cpu:2) and `pe train` with a
huge --steps end with exit code 130 and one "pe: interrupted (Ctrl-C)"
line within 1 s of the signal.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_api_interrupt.py
"""
import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pe_json import pe_bin  # noqa: E402

LATENCY_S = 1.0  # generous: the run stops within one op (tens of ms here)
LAYERS = "150"

CHILD = r"""
import sys, time
import numpy as np
import pe
from pe.utils import unique_name
pe.enable_static()
mode, layers, width, rows = sys.argv[1], int(sys.argv[2]), 2048, 256
main, startup = pe.static.Program(), pe.static.Program()
with pe.static.program_guard(main, startup), unique_name.guard():
    x = pe.static.data("x", [None, width], "float32")
    h = x
    for _ in range(layers):
        h = pe.static.nn.fc(h, width, activation="tanh", weight_attr=pe.ParamAttr(name="w_shared"),
                            bias_attr=False)
scope = pe.static.Scope()
exe = pe.static.Executor()
exe.run(startup, scope=scope)
if len(sys.argv) > 3:  # write the programs for the CLI test and stop
    pe.static.save_program(main, sys.argv[3] + "/chain.pe")
    pe.static.save_program(startup, sys.argv[3] + "/chain_startup.pe")
    print(h.name)
    sys.exit(0)
if mode == "pexe":
    pexe = pe.static.ParallelExecutor(False, main_program=main, scope=scope)
    run = lambda feed: pexe.run([h], feed=feed)
else:
    run = lambda feed: exe.run(main, feed=feed, fetch_list=[h], scope=scope)
small = {"x": np.linspace(-1, 1, 2 * width, dtype=np.float32).reshape(2, width)}
ref = np.array(run(small)[0])
big = {"x": np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32)}
print("READY", flush=True)
t0 = time.monotonic()
try:
    run(big)
    print("FINISHED %.3f" % (time.monotonic() - t0), flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED %.3f" % (time.monotonic() - t0), flush=True)
again = np.array(run(small)[0])
assert np.array_equal(again, ref), "the run after the interrupt differs"
print("AGAIN OK", flush=True)
"""


def env(places=1):
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e["CPU_NUM"] = str(places)
    return e


def read_line(proc, deadline):
    """The next stdout line of proc, or None at the deadline (monotonic)."""
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            return None
        c = os.read(proc.stdout.fileno(), 1)
        if not c:
            return buf.decode() or None
        buf += c
    return buf.decode().strip()


@pytest.mark.parametrize("mode,places", [("exe", 1), ("pexe", 2)])
def test_ctrl_c_raises_keyboard_interrupt(mode, places):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, LAYERS], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env(places))
    try:
        line = read_line(proc, time.monotonic() + 180)
        assert line == "READY", (line, proc.stderr.read().decode() if proc.poll() is not None else "")
        time.sleep(0.5)
        t_kill = time.monotonic()
        proc.send_signal(signal.SIGINT)
        line = read_line(proc, t_kill + 60)
        took = time.monotonic() - t_kill
        assert line is not None and not line.startswith("FINISHED"), \
            "the run was not interrupted (%r): make it longer" % line
        assert line.startswith("INTERRUPTED"), line
        assert took < LATENCY_S, "KeyboardInterrupt came %.3f s after SIGINT" % took
        line = read_line(proc, time.monotonic() + 180)
        assert line == "AGAIN OK", (line, proc.stderr.read().decode())
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    d = tmp_path_factory.mktemp("chain")
    r = subprocess.run([sys.executable, "-c", CHILD, "exe", LAYERS, str(d)], capture_output=True, text=True,
                       env=env(), timeout=180)
    assert r.returncode == 0, r.stderr
    np.save(d / "x.npy", np.random.default_rng(0).standard_normal((256, 2048)).astype(np.float32))
    return d, r.stdout.strip()


def interrupt_cli(args, after_s, places=1):
    proc = subprocess.Popen([pe_bin()] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env(places))
    try:
        time.sleep(after_s)
        assert proc.poll() is None, "pe ended before the signal: %s" % proc.stderr.read().decode()
        t_kill = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
        took = time.monotonic() - t_kill
        err = proc.stderr.read().decode().strip().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 130, (rc, err)
    assert len(err) == 1 and err[0].startswith("pe: interrupted (Ctrl-C): "), err
    assert took < LATENCY_S, "pe ended %.3f s after SIGINT" % took
    return err[0]


@pytest.mark.parametrize("places", [1, 2])
def test_cli_run_ctrl_c(chain, tmp_path, places):
    d, fetch = chain
    args = ["run", d / "chain.pe", "--startup", d / "chain_startup.pe", "--feed", "x=%s" % (d / "x.npy"),
            "--fetch", fetch, "--out", tmp_path]
    if places > 1:
        args += ["--places", "cpu:%d" % places]
    line = interrupt_cli(args, 0.5, places)
    assert "run interrupted" in line or "stopped before the run" in line, line
    assert not os.path.exists(tmp_path / (fetch + ".npy"))


def test_cli_train_ctrl_c(tmp_path):
    from train_ref import EXAMPLES, fashion_mnist, make_batches, write_batches
    images, labels = fashion_mnist("train")
    write_batches(str(tmp_path / "data"), "mlp", make_batches("mlp", images, labels, 2, 32))
    line = interrupt_cli(["train", os.path.join(EXAMPLES, "mlp_forward.pe"), "--startup",
                          os.path.join(EXAMPLES, "mlp_forward_startup.pe"), "--loss", "loss", "--optimizer", "sgd",
                          "--data", tmp_path / "data", "--steps", 100000000, "--print-every", 0,
                          "--save", tmp_path / "ckpt.st"], 1.5)
    assert "step" in line, line
    assert not os.path.exists(tmp_path / "ckpt.st")
