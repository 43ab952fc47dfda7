"""tests/python/test_pe_cli_pserver.py — `pe pserver` serving Python trainers, and `pe inspect` of the RPC ops.

A small regression (fc 13 -> 32 relu -> fc 1, SGD) is transpiled for one
pserver and 2 trainers; the pserver program and its startup program are
saved to .pe files with the endpoint 127.0.0.1:1 (a placeholder) and
`pe pserver ... --endpoint 127.0.0.1:<free port>` serves them; two trainer
processes (this file run as a script: Python, Executor on the trainer
program transpiled for the real port) train a few steps and exe.close().
Checks: the CLI exits 0 after the trainers left, every trainer's loss falls,
the trainers' losses match a single process trained on the whole batches
(sync SGD summed x 1/2 == one process on the union of the halves). `pe
inspect` of the trainer program shows send / recv / send_barrier /
fetch_barrier with their endpoints, and of the pserver program
listen_and_serv with its endpoint. The errors: a program without
listen_and_serv (exit 1, names the file), a bad --endpoint (exit 2).
Everything runs on loopback with time limits; every process is killed in
a finally.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_pe_cli_pserver.py
"""
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from pe_json import pe_bin  # noqa: E402

TRAINERS = 2
STEPS = 20
BATCH = 16  # global; each trainer feeds its half
PLACEHOLDER = "127.0.0.1:1"


def build(fluid, unique_name, train=True):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[13], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(x, 32, act="relu")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        if train:
            fluid.optimizer.SGD(learning_rate=0.05).minimize(loss)
    return main, startup, loss


def data():
    rng = np.random.RandomState(3)
    x = rng.uniform(-1, 1, size=(STEPS * BATCH, 13)).astype("float32")
    w = rng.uniform(-1, 1, size=(13, 1)).astype("float32")
    y = (x @ w + 0.3).astype("float32")
    return [(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]) for i in range(STEPS)]


def transpile(fluid, main, startup, ep, trainer_id):
    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id=trainer_id, program=main, pservers=ep, trainers=TRAINERS, startup_program=startup)
    return t


# ---- the processes (this file run as a script) ------------------------------------------------

def write_programs(out_dir):
    """Saves the pserver program, its startup and the trainer program, transpiled for PLACEHOLDER."""
    import pe
    import pe.fluid as fluid
    from pe.utils import unique_name
    main, startup, _ = build(fluid, unique_name)
    t = transpile(fluid, main, startup, PLACEHOLDER, 0)
    ps = t.get_pserver_program(PLACEHOLDER)
    pe.static.save_program(ps, os.path.join(out_dir, "pserver.pe"))
    pe.static.save_program(t.get_startup_program(PLACEHOLDER, ps), os.path.join(out_dir, "pserver_startup.pe"))
    pe.static.save_program(t.get_trainer_program(), os.path.join(out_dir, "trainer.pe"))
    pe.static.save_program(main, os.path.join(out_dir, "plain.pe"))


def trainer(ep, trainer_id, out):
    import pe.fluid as fluid
    from pe.utils import unique_name
    main, startup, loss = build(fluid, unique_name)
    t = transpile(fluid, main, startup, ep, trainer_id)
    prog = t.get_trainer_program()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    half = BATCH // TRAINERS
    losses = []
    for xb, yb in data():
        lo, hi = trainer_id * half, (trainer_id + 1) * half
        lv, = exe.run(prog, feed={"x": xb[lo:hi], "y": yb[lo:hi]}, fetch_list=[loss])
        losses.append(float(np.asarray(lv).reshape(-1)[0]))
    exe.close()
    with open(out, "w") as f:
        json.dump(losses, f)


def single(out):
    """One process on the whole batches: the reference (its loss per step, and of each half)."""
    import pe.fluid as fluid
    from pe.utils import unique_name
    main, startup, loss = build(fluid, unique_name)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    test, _, test_loss = build(fluid, unique_name, train=False)  # the same parameter names, forward only
    half = BATCH // TRAINERS
    losses = []
    for xb, yb in data():
        halves = [float(np.asarray(exe.run(test, feed={"x": xb[k * half:(k + 1) * half],
                                                       "y": yb[k * half:(k + 1) * half]},
                                           fetch_list=[test_loss])[0]).reshape(-1)[0]) for k in range(TRAINERS)]
        exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
        losses.append(halves)
    with open(out, "w") as f:
        json.dump(losses, f)


# ---- the test -------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env():
    e = dict(os.environ, OMP_NUM_THREADS="1", PE_PS_CONNECT_TIMEOUT="30", PE_PS_TRAINER_WAIT="60")
    for k in list(e):
        if k.startswith("PADDLE_") or k.startswith("OMPI_"):
            e.pop(k)
    return e


def script(*args, timeout=120):
    r = subprocess.run([sys.executable, os.path.abspath(__file__)] + [str(a) for a in args], env=env(),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, "%s failed (%d):\n%s\n%s" % (args, r.returncode, r.stdout, r.stderr)


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    assert os.path.exists(pe_bin()), "pe binary not found at %s (set PE_BIN_DIR or build into build/)" % pe_bin()
    d = tmp_path_factory.mktemp("pserver_cli")
    script("--write", d)
    return d


def pe_cli(*args, timeout=60):
    return subprocess.run([pe_bin()] + [str(a) for a in args], env=env(), capture_output=True, text=True,
                          timeout=timeout)


def test_pserver_serves_trainers(progs):
    port = free_port()
    ep = "127.0.0.1:%d" % port
    procs = []
    try:
        srv = subprocess.Popen([pe_bin(), "pserver", progs / "pserver.pe", "--startup", progs / "pserver_startup.pe",
                                "--endpoint", ep, "--threads", "1"], env=env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        procs.append(srv)
        for tid in range(TRAINERS):
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--trainer", ep, str(tid),
                                           progs / ("loss%d.json" % tid)], env=env(), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + 120
        outs = {}
        for p in procs[1:] + procs[:1]:
            o, e = p.communicate(timeout=max(1, deadline - time.monotonic()))
            outs[p.pid] = (p.returncode, o, e)
        if "built without ZeroMQ" in outs[srv.pid][2]:
            pytest.skip("PE was built without ZeroMQ (PE_WITH_ZMQ)")
        for tid, p in enumerate(procs[1:]):
            rc, o, e = outs[p.pid]
            assert rc == 0, "trainer %d failed (%d):\n%s\n%s" % (tid, rc, o, e)
        rc, o, e = outs[srv.pid]
        assert rc == 0, "pe pserver failed (%d):\n%s\n%s" % (rc, o, e)
        assert "pserver %s: listening" % ep in e and "pserver %s: done after %d steps" % (ep, STEPS) in e, e
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    script("--single", progs / "single.json")
    ref = json.load(open(progs / "single.json"))
    for tid in range(TRAINERS):
        losses = json.load(open(progs / ("loss%d.json" % tid)))
        assert len(losses) == STEPS
        # sync SGD over 2 trainers (gradients summed x 1/2) is one process on the whole batch
        np.testing.assert_allclose(losses, [r[tid] for r in ref], rtol=1e-4, atol=1e-6)
        assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4]), "trainer %d: loss does not fall: %s" % (tid, losses)


def test_inspect_shows_endpoints(progs):
    r = pe_cli("inspect", progs / "trainer.pe")
    assert r.returncode == 0, r.stderr
    for op in ("send", "recv", "send_barrier", "fetch_barrier"):
        lines = [ln for ln in r.stdout.splitlines() if ln.split()[1:2] == [op]]
        assert lines, "no %s op in:\n%s" % (op, r.stdout)
        key = "endpoints=" if op.endswith("barrier") else "epmap="
        assert all(key + '["%s"]' % PLACEHOLDER in ln for ln in lines), lines
    r = pe_cli("inspect", progs / "pserver.pe")
    assert r.returncode == 0, r.stderr
    ls = [ln for ln in r.stdout.splitlines() if ln.split()[1:2] == ["listen_and_serv"]]
    assert len(ls) == 1 and 'endpoint="%s"' % PLACEHOLDER in ls[0] and "Fanin=2" in ls[0], r.stdout


def test_pserver_errors(progs):
    r = pe_cli("pserver", progs / "plain.pe", "--endpoint", "127.0.0.1:%d" % free_port())
    assert r.returncode == 1 and "plain.pe" in r.stderr and "listen_and_serv" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for bad in ("127.0.0.1", "127.0.0.1:x", ":80", "127.0.0.1:70000"):
        r = pe_cli("pserver", progs / "pserver.pe", "--endpoint", bad)
        assert r.returncode == 2 and "--endpoint" in r.stderr, (bad, r.stderr)
    r = pe_cli("pserver", "--help")
    assert r.returncode == 0 and "--endpoint" in r.stdout and "listen_and_serv" in r.stdout
    r = pe_cli("pserver", progs / "pserver.pe", "--threads", "0")
    assert r.returncode == 2, r.stderr


if __name__ == "__main__":
    if sys.argv[1] == "--write":
        write_programs(sys.argv[2])
    elif sys.argv[1] == "--trainer":
        trainer(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "--single":
        single(sys.argv[2])
