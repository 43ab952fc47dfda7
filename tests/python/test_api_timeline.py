"""tests/python/test_api_timeline.py — ExecutionStrategy.timeline_path and PE_TIMELINE.

- A 2-layer MLP trained 3 steps on 2 places with timeline_path set writes
  <prefix>.rank0.json when the executor is freed (and on write_timeline());
  json.load reads it: Chrome trace events ("X" spans, "M" names), process
  "trainer 0", one step span per run on "steps", op spans on "place N"
  tracks (the same op types on both places, each step), collectives on
  "comm place N" tracks, every op inside its step.
- Off by default: no file, write_timeline() raises pe.InvalidArgumentError.
- PE_TIMELINE=<dir>/ turns it on without touching the code.
- A timeline_path that is not a str is a TypeError at the setter.
- `pe train --places cpu:2 --timeline PREFIX` writes PREFIX.rank0.json; with
  one place it is a usage error (exit 2).
- scripts/timeline_report.py reads the trace: the hidden fraction is in
  [0, 1], and it renders an SVG; --starts gives each place's first op
  start, the start skew and the share of time both places ran, in range.
"""
import collections
import gc
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import pe
from pe.utils import unique_name

pe.enable_static()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 3


def train(monkeypatch, timeline_path=None):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 8], "float32")
        h = pe.static.nn.fc(x, 16, activation="relu")
        loss = pe.mean(pe.static.nn.fc(h, 4))
        pe.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    es = pe.static.ExecutionStrategy()
    if timeline_path is not None:
        es.timeline_path = timeline_path
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope, exec_strategy=es)
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        pexe.run([loss], feed={"x": rng.standard_normal((6, 8)).astype(np.float32)})
    return pexe


def test_timeline_on(monkeypatch, tmp_path):
    pexe = train(monkeypatch, str(tmp_path / "run"))
    path = str(tmp_path / "run.rank0.json")
    assert pexe.timeline_path == path
    assert not os.path.exists(path)
    pexe.write_timeline()
    first = json.load(open(path))
    os.unlink(path)
    del pexe  # frees the executor, which writes the file
    gc.collect()
    with open(path) as f:
        trace = json.load(f)
    assert len(trace["traceEvents"]) == len(first["traceEvents"])
    ev = trace["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = [e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
    assert procs == ["trainer 0"]
    spans = [e for e in ev if e["ph"] == "X"]
    assert all(e["pid"] == 0 and e["dur"] >= 0 for e in spans)
    steps = sorted((e for e in spans if e["cat"] == "step"), key=lambda e: e["ts"])
    assert [e["args"]["step"] for e in steps] == list(range(STEPS))
    assert all(names[(0, e["tid"])] == "steps" for e in steps)
    ops = collections.Counter()
    n_comm = 0
    for e in spans:
        if e["cat"] == "step":
            continue
        track = names[(0, e["tid"])]
        place = int(e["args"]["place"].split(":")[1])
        s = steps[e["args"]["step"]]
        assert s["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3, e
        if e["cat"] == "op":
            assert track.startswith("place %d " % place), (track, e)
            ops[(e["args"]["step"], place, e["name"])] += 1
        else:
            assert e["cat"] == "comm" and track.startswith("comm place %d " % place), (track, e)
            n_comm += 1
    assert n_comm > 0
    for step in range(STEPS):
        on0 = {k[2]: v for k, v in ops.items() if k[:2] == (step, 0)}
        on1 = {k[2]: v for k, v in ops.items() if k[:2] == (step, 1)}
        assert on0 == on1 and on0 == {k[2]: v for k, v in ops.items() if k[:2] == (0, 0)}
        assert "fc" in on0 and "fc_grad" in on0  # fuse_gemm_epilogue: on by default
    assert trace["otherData"]["steps"] == STEPS and not trace["otherData"]["capped"]

    # the report: hidden fraction and the picture
    svg = str(tmp_path / "t.svg")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "timeline_report.py"), path, "--svg", svg,
                          "--skip", "1"], capture_output=True, text=True, check=True).stdout
    hidden = [line for line in out.splitlines() if line.startswith("hidden")]
    assert hidden, out
    frac = float(hidden[0].split()[1].rstrip("%")) / 100.0
    assert 0.0 <= frac <= 1.0
    with open(svg) as f:
        assert f.read().lstrip().startswith("<svg")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "timeline_report.py"), path, "--skip", "1",
                          "--starts"], capture_output=True, text=True, check=True).stdout
    starts = [line for line in out.splitlines() if "start skew" in line]
    assert len(starts) == 1 and "place 0 (cpu:0) +" in starts[0] and "place 1 (cpu:1) +" in starts[0], out
    assert 0.0 <= float(re.search(r"running ([0-9.]+)%", starts[0]).group(1)) <= 100.0, out


def test_timeline_off(monkeypatch, tmp_path):
    monkeypatch.delenv("PE_TIMELINE", raising=False)
    monkeypatch.chdir(tmp_path)
    pexe = train(monkeypatch)
    assert pexe.timeline_path is None
    with pytest.raises(pe.InvalidArgumentError, match="timeline is off"):
        pexe.write_timeline()
    del pexe  # frees the executor, which writes the file
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_timeline_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PE_TIMELINE", str(tmp_path) + "/")
    pexe = train(monkeypatch)
    path = pexe.timeline_path
    assert path.startswith(str(tmp_path) + "/timeline") and path.endswith(".rank0.json")
    del pexe  # frees the executor, which writes the file
    gc.collect()
    with open(path) as f:
        assert any(e["ph"] == "X" and e["cat"] == "op" for e in json.load(f)["traceEvents"])


def test_timeline_path_type():
    es = pe.static.ExecutionStrategy()
    with pytest.raises(TypeError, match="timeline_path"):
        es.timeline_path = 3


def test_pe_train_timeline(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from pe_json import pe_bin
    from train_ref import EXAMPLES, make_batches, write_batches
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (64, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 64, dtype=np.uint8)
    write_batches(str(tmp_path / "data"), "mlp", make_batches("mlp", images, labels, 2, 32))
    args = [pe_bin(), "train", os.path.join(EXAMPLES, "mlp_forward.pe"), "--startup",
            os.path.join(EXAMPLES, "mlp_forward_startup.pe"), "--loss", "loss", "--optimizer", "sgd",
            "--data", str(tmp_path / "data"), "--steps", "3", "--print-every", "0",
            "--timeline", str(tmp_path / "tl")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(args + ["--places", "cpu:2"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    path = str(tmp_path / "tl.rank0.json")
    assert "wrote the timeline to %s" % path in r.stdout
    with open(path) as f:
        trace = json.load(f)
    assert trace["otherData"]["steps"] == 3 and trace["otherData"]["places"] == 2
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "--timeline" in r.stderr, r.stderr
