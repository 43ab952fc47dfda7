"""tests/python/test_pserver.py — parameter-server training on ZeroMQ, run
as real processes (pservers and trainers, each its own /usr/bin/python3) on
loopback addresses (127.0.0.x) and free ports, every job under a hard time
limit, every process killed at the end whatever happened (ps_cluster.py).

    PE_BIN_DIR=build/bin PYTHONPATH=build/python OMP_NUM_THREADS=1 \\
        /usr/bin/python3 -m pytest -q tests/python/test_pserver.py

- examples/pserver/dist_train.py launched as its docstring says (2 pservers
  on 127.0.0.1 and 127.0.0.2, one port, + 2 trainers; 1 pserver + 3
  trainers; slice_var_up on / off; RoundRobin / HashName): every process
  exits 0 and the loss falls; with 2 trainers the mean of the trainers'
  losses is, step by step, the loss of one process on the whole batch.
- Sync mode with 2 and 3 trainers, each fed its share of the batch, ends
  with the parameters of one process trained on the whole batch (SGD,
  Momentum, Adam; sliced into row blocks or not). Async mode trains to a
  loss comparable to sync mode's.
- Faults: a trainer SIGKILLed or SIGSTOPped mid-run (the others finish;
  the pservers log it lost and end OK), the same with stop_on_lost_trainer
  (the pserver fails naming the trainer), a pserver SIGKILLed or
  SIGSTOPped mid-run (every trainer raises naming its endpoint within 5 s),
  a trainer that never calls exe.close(), a trainer that never comes
  (PE_PS_TRAINER_WAIT), a pserver that never comes (PE_PS_CONNECT_TIMEOUT),
  a port in use, trainers started before the pservers, Ctrl-C of a trainer
  blocked in a barrier and of a pserver, foreign clients on the pserver
  port (raw TCP garbage; ZeroMQ messages with a truncated or garbled
  header): the pserver answers ERROR, logs them, and the trainers finish.
- L2 decay and an LR schedule (the pservers' LR block) in sync mode: one
  process's values, every persistable.
- Checkpoints: save_persistables on the trainer program gathers one file
  from 2 pservers that a single-process run of the original program loads,
  holding the trained values; pservers restarted from it serve them, and
  training goes on as one process from the checkpoint would.
"""
import ctypes
import ctypes.util
import importlib.util
import os
import random
import re
import signal
import socket
import sys
import time

import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.utils import unique_name

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ps_scripts"))
import ps_node  # noqa: E402
from ps_cluster import Cluster, child_env, lines  # noqa: E402


def _built_with_zmq():
    """False when PE was built without ZeroMQ (PE_WITH_ZMQ=AUTO and no libzmq3-dev)."""
    from pe.fluid import ps_transpiler
    p = fluid.Program()
    ps_transpiler._rpc_op(p.global_block(), "listen_and_serv", {}, {}, {
        "endpoint": "no-port", "Fanin": 1, "sync_mode": True, "optimize_blocks": [], "grad_to_block_id": [],
        "lr_decay_block_id": -1})
    try:
        fluid.Executor(fluid.CPUPlace()).run(p)
    except Exception as e:  # with ZeroMQ: the endpoint is refused; without: the transport is missing
        return "without ZeroMQ" not in str(e)
    return True


pytestmark = pytest.mark.skipif(not _built_with_zmq(), reason="PE was built without ZeroMQ (libzmq3-dev; "
                                "scripts/setup.sh installs it)")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "pserver", "dist_train.py")
RUN_LIMIT = 90       # seconds for a whole job that should end normally (a loaded 2-core machine)
DEAD_PSERVER_LIMIT = 5.0  # the bound: a trainer raises within 5 s of its pserver's death


# ---- jobs ---------------------------------------------------------------------------------

def start_job(c, hosts=("127.0.0.1",), trainers=2, opt="sgd", steps=4, batch=12, seed=7, slice=True,
              min_block_size=8, split="RoundRobin", sync=True, port=None, pservers=True, start_trainers=True,
              trainer_cfg=None, pserver_cfg=None, prefix="", **extra):
    """Starts the pservers (one per host, one port) and the trainers of a
    ps_node.py job. trainer_cfg / pserver_cfg: {index: extra config}.
    Returns (pserver procs, trainer procs, the shared config)."""
    port = port or c.port(*hosts)
    eps = ["%s:%d" % (h, port) for h in hosts]
    base = {"endpoints": eps, "trainers": trainers, "opt": opt, "steps": steps, "batch": batch, "seed": seed,
            "slice": slice, "min_block_size": min_block_size, "split": split, "sync": sync}
    base.update(extra)
    ps, tr = [], []
    if pservers:
        for i, ep in enumerate(eps):
            cfg = dict(base, role="pserver", endpoint=ep, **(pserver_cfg or {}).get(i, {}))
            ps.append(c.node("%sps%d" % (prefix, i), cfg))
    for t in range(trainers if start_trainers else 0):
        cfg = dict(base, role="trainer", trainer_id=t, out=os.path.join(c.dir, "%str%d.npz" % (prefix, t)),
                   progress=os.path.join(c.dir, "%str%d.progress" % (prefix, t)), **(trainer_cfg or {}).get(t, {}))
        tr.append(c.node("%str%d" % (prefix, t), cfg))
    return ps, tr, base


def start_pservers(c, base, prefix="", extra=None):
    return [c.node("%sps%d" % (prefix, i), dict(base, role="pserver", endpoint=ep, **(extra or {})))
            for i, ep in enumerate(base["endpoints"])]


def assert_ok(c, procs):
    bad = [p for p in procs if p.rc != 0]
    assert not bad, "exited non-zero: %s\n%s" % (", ".join(p.name for p in bad), c.report())


def trainer_result(c, t, prefix=""):
    with np.load(os.path.join(c.dir, "%str%d.npz" % (prefix, t))) as z:
        return {k: z[k] for k in z.files}


def steps_done(c, name):
    return len(lines(os.path.join(c.dir, name + ".progress")))


def wait_listening(c, p):
    c.wait_for(lambda: "listening" in p.err() or p.rc is not None, RUN_LIMIT, p.name + " listening")
    assert "listening" in p.err(), c.report([p])


# ---- 1. the example cluster ---------------------------------------------------------------

def example_env(role, ips, port, trainers, loss_file=None, tid=None, current=None, **kw):
    env = child_env(PADDLE_TRAINING_ROLE=role, PADDLE_PSERVER_IPS=",".join(ips), PADDLE_PSERVER_PORT=port,
                    PADDLE_TRAINERS=trainers, DIST_TRAIN_EPOCHS=kw.get("epochs", 2),
                    DIST_TRAIN_SLICE=kw.get("slice", "1"), DIST_TRAIN_SPLIT=kw.get("split", "RoundRobin"))
    if current is not None:
        env["PADDLE_CURRENT_IP"] = current
    if tid is not None:
        env["PADDLE_TRAINER_ID"] = str(tid)
    if loss_file:
        env["DIST_TRAIN_LOSS_FILE"] = loss_file
    return env


def example_single_process_losses(epochs, trainers):
    """The example's program trained by one process, each step on the union of
    the trainers' batches of that step (equal shares: the mean of the trainers'
    mean losses is the loss of the union)."""
    spec = importlib.util.spec_from_file_location("pe_example_dist_train", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        x = fluid.layers.data(name="x", shape=[13], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(input=fluid.layers.fc(input=x, size=1, act=None),
                                                                label=y))
        fluid.optimizer.SGD(learning_rate=0.05).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    per = mod.BATCH_SIZE // trainers
    # each trainer seeds Python's random with its id and shuffles every epoch
    streams = []
    for t in range(trainers):
        random.seed(t)
        streams.append([list(pe.reader.shuffle(mod.train_reader(t, trainers), buf_size=500)())
                        for _ in range(epochs)])
    out = []
    for e in range(epochs):
        for b in range(len(streams[0][e]) // per):
            rows = [s for st in streams for s in st[e][b * per:(b + 1) * per]]
            feed = {"x": np.stack([r[0] for r in rows]), "y": np.stack([r[1] for r in rows])}
            l, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
            out.append(float(np.array(l).reshape(-1)[0]))
    return out


@pytest.mark.parametrize("ips,trainers,slice_,split", [
    (("127.0.0.1", "127.0.0.2"), 2, "1", "RoundRobin"),
    (("127.0.0.1", "127.0.0.2"), 2, "1", "HashName"),
    (("127.0.0.1", "127.0.0.2"), 2, "0", "RoundRobin"),
    (("127.0.0.1",), 3, "1", "HashName"),
], ids=["2ps2t-slice-roundrobin", "2ps2t-slice-hashname", "2ps2t-noslice", "1ps3t-hashname"])
def test_example_cluster(tmp_path, ips, trainers, slice_, split):
    epochs = 2
    with Cluster(tmp_path) as c:
        port = c.port(*ips)
        kw = dict(epochs=epochs, slice=slice_, split=split)
        ps = [c.start("ps%d" % i, [EXAMPLE], env=example_env("PSERVER", ips, port, trainers, current=ip, **kw))
              for i, ip in enumerate(ips)]
        loss_files = [os.path.join(c.dir, "loss%d.txt" % t) for t in range(trainers)]
        tr = [c.start("tr%d" % t, [EXAMPLE],
                      env=example_env("TRAINER", ips, port, trainers, loss_files[t], tid=t, **kw))
              for t in range(trainers)]
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
        for p in ps:
            assert "pserver %s:%d: listening (%d trainers, sync mode" % (ips[ps.index(p)], port, trainers) in p.err()
            assert "(%d trainers left, 0 lost)" % trainers in p.err(), c.report([p])
        losses = [np.array([float(v) for v in lines(f)]) for f in loss_files]
        for t, l in enumerate(losses):
            assert len(l) >= 2 * epochs, (t, l)
            # shuffled small batches: compare the first and last few steps
            assert l[-4:].mean() < 0.35 * l[:4].mean(), "trainer %d: loss %s -> %s" % (t, l[:4], l[-4:])
        if trainers == 2:
            # sync mode: every step is one process's step on the union of the trainers' batches
            ref = example_single_process_losses(epochs, trainers)
            assert all(len(l) == len(ref) for l in losses), ([len(l) for l in losses], len(ref))
            np.testing.assert_allclose(np.mean(losses, axis=0), ref, rtol=1e-4, atol=1e-6)


# ---- 2. equivalence with one process; async mode ------------------------------------------

@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam"])
@pytest.mark.parametrize("trainers,slice_", [(2, True), (3, False), (3, True), (2, False)])
def test_sync_matches_one_process(tmp_path, opt, trainers, slice_):
    steps, batch, seed = 4, 12, 7
    ref_losses, ref, main = ps_node.train_local(opt, seed, steps, batch)
    params = ps_node.param_names(main)
    with Cluster(tmp_path) as c:
        ps, tr, _ = start_job(c, ("127.0.0.1", "127.0.0.2"), trainers=trainers, opt=opt, steps=steps, batch=batch,
                              seed=seed, slice=slice_, min_block_size=8)
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
    # slicing: fc_0.w_0 [13, 16], fc_0.b_0 [16], fc_1.w_0 [16, 1] in 2 row blocks each, fc_1.b_0 [1] whole
    blocks = [int(re.search(r"(\d+) gradient blocks?\)", p.err()).group(1)) for p in ps]
    assert sum(blocks) == (7 if slice_ else 4) and min(blocks) > 0, blocks
    results = [trainer_result(c, t) for t in range(trainers)]
    for t, r in enumerate(results):
        for n in params:
            np.testing.assert_allclose(r[n], ref[n], rtol=1e-5, atol=1e-6, err_msg="trainer %d: %s" % (t, n))
        np.testing.assert_array_equal(r[params[0]], results[0][params[0]])  # every trainer received the same
    np.testing.assert_allclose(np.mean([r["losses"] for r in results], axis=0), ref_losses, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt,trainers,slice_", [("sgd", 3, False), ("momentum", 2, True)])
def test_sync_with_gradients_of_several_parts_matches_one_process(tmp_path, opt, trainers, slice_):
    """fc_0.w_0 of [13, 50000] (2.6 MB; 1.3 MB per block when sliced): its
    gradient goes in parts of 1 MiB, summed on the pserver as they come
    (runtime/transport/transport.h, executor/pserver.c). Not Adam: with 50,000
    relu units many gradients are ~0, where Adam's first steps (about lr x
    sign(g)) turn the summation order's last bits into 1e-5 differences (61
    of 650,000 elements, the same before parts existed)."""
    steps, batch, seed, hidden = 3, 12, 5, 50000
    ref_losses, ref, main = ps_node.train_local(opt, seed, steps, batch, hidden=hidden)
    params = ps_node.param_names(main)
    with Cluster(tmp_path) as c:
        ps, tr, _ = start_job(c, ("127.0.0.1", "127.0.0.2"), trainers=trainers, opt=opt, steps=steps, batch=batch,
                              seed=seed, slice=slice_, min_block_size=8192, hidden=hidden)
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
    results = [trainer_result(c, t) for t in range(trainers)]
    for t, r in enumerate(results):
        for n in params:
            np.testing.assert_allclose(r[n], ref[n], rtol=1e-5, atol=1e-6, err_msg="trainer %d: %s" % (t, n))
            np.testing.assert_array_equal(r[n], results[0][n])  # every trainer received the same bits
    np.testing.assert_allclose(np.mean([r["losses"] for r in results], axis=0), ref_losses, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt", ["momentum", "adam"])
def test_sync_with_decay_and_lr_schedule_matches_one_process(tmp_path, opt):
    """L2 decay (per-parameter ops on the pservers) and an LR schedule (the
    pservers' LR block, run once per step): every persistable, optimizer
    state and LR counter included, gathered into a checkpoint, is one
    process's."""
    steps, batch, seed, decay = 4, 12, 5, 1e-2
    _, ref, main = ps_node.train_local(opt, seed, steps, batch, decay=decay, lr_sched=True)
    ckpt = os.path.join(str(tmp_path), "ckpt")
    with Cluster(tmp_path) as c:
        ps, tr, _ = start_job(c, ("127.0.0.1", "127.0.0.2"), trainers=2, opt=opt, steps=steps, batch=batch,
                              seed=seed, trainer_cfg={0: {"save_dir": ckpt}}, decay=decay, lr_sched=True)
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
    got, _ = _load_plain(ckpt, main)
    # the step counter starts at -1 (the first step is step 0) and is incremented once per step
    assert int(got["@LR_DECAY_COUNTER@"].reshape(-1)[0]) == steps - 1
    for n in ps_node.persistable_names(main):
        np.testing.assert_allclose(got[n], ref[n], rtol=1e-5, atol=1e-6, err_msg=n)


def mlp_loss(p, x, y):
    """ps_node.build's model in numpy: mean square error of fc(relu(fc(x)))."""
    h = np.maximum(x @ p["fc_0.w_0"] + p["fc_0.b_0"], 0)
    return float(np.mean((h @ p["fc_1.w_0"] + p["fc_1.b_0"] - y) ** 2))


def test_async_trains_like_sync(tmp_path):
    steps, batch, seed = 40, 16, 3
    _, init, _ = ps_node.train_local("sgd", seed, 0, batch)
    _, sync, _ = ps_node.train_local("sgd", seed, steps, batch)  # what sync mode gives (the test above)
    with Cluster(tmp_path) as c:
        ps, tr, _ = start_job(c, ("127.0.0.1", "127.0.0.2"), trainers=2, opt="sgd", steps=steps, batch=batch,
                              seed=seed, sync=False)
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
    assert "async mode" in ps[0].err()
    x, y = ps_node.batch(seed, 10 ** 6, 512)  # held-out samples
    before, after_sync = mlp_loss(init, x, y), mlp_loss(sync, x, y)
    assert after_sync < 0.5 * before, (before, after_sync)
    for t in range(2):
        # async: every trainer's gradient is applied unscaled, on params of its own moment: the loss
        # falls about as far as in sync mode
        after = mlp_loss(trainer_result(c, t), x, y)
        assert after < 0.5 * before and after < 3 * after_sync, (t, before, after_sync, after)


# ---- 3. faults ------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_trainer_killed_mid_run(tmp_path, sig):
    """SIGKILL: the trainer's connections close at once. SIGSTOP: the
    pservers' heartbeats (2 s) drop it."""
    with Cluster(tmp_path) as c:
        ps, tr, _ = start_job(c, ("127.0.0.1", "127.0.0.2"), trainers=3, steps=20, trainer_cfg={1: {"hold_after": 3}})
        c.wait_for(lambda: "holding" in tr[1].out(), RUN_LIMIT, "trainer 1 after step 3")
        tr[1].p.send_signal(sig)
        c.wait(ps + [tr[0], tr[2]], RUN_LIMIT)
        assert_ok(c, ps + [tr[0], tr[2]])
        assert tr[1].rc == (-signal.SIGKILL if sig == signal.SIGKILL else None)
        for p in ps:
            assert "trainer 1 lost" in p.err() and "(2 trainers left, 1 lost)" in p.err(), c.report([p])
        assert steps_done(c, "tr0") == steps_done(c, "tr2") == 20 and steps_done(c, "tr1") == 3


def test_stop_on_lost_trainer(tmp_path):
    with Cluster(tmp_path) as c:
        ps, tr, base = start_job(c, ("127.0.0.1",), trainers=2, steps=20, trainer_cfg={1: {"hold_after": 3}},
                                 pserver_cfg={0: {"stop_on_lost": True}})
        c.wait_for(lambda: "holding" in tr[1].out(), RUN_LIMIT, "trainer 1 after step 3")
        tr[1].p.send_signal(signal.SIGKILL)
        c.wait(ps + [tr[0]], 30)
        assert ps[0].rc not in (0, None), c.report()
        err = ps[0].err()
        assert "trainer 1 lost" in err and "stop_on_lost_trainer" in err, c.report(ps)
        assert base["endpoints"][0] in tr[0].err() and tr[0].rc != 0, c.report([tr[0]])


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_pserver_killed_mid_run(tmp_path, sig):
    """SIGKILL: the pserver's connections close at once. SIGSTOP: they stay
    open and the trainers' heartbeats (2 s) find the pserver gone."""
    with Cluster(tmp_path) as c:
        ps, tr, base = start_job(c, ("127.0.0.1", "127.0.0.2"), trainers=2, steps=1000, trainer_cfg={
            t: {"step_sleep": 0.05} for t in range(2)})
        c.wait_for(lambda: all(steps_done(c, "tr%d" % t) >= 3 for t in range(2)), RUN_LIMIT, "trainers at step 3")
        killed = time.monotonic()
        ps[1].p.send_signal(sig)
        c.wait(tr, 30)
        ep = base["endpoints"][1]
        for p in tr:
            took = p.ended - killed
            assert p.rc not in (0, None) and ep in p.err(), c.report([p])
            assert took < DEAD_PSERVER_LIMIT, "%s raised %.2f s after pserver %s died\n%s" % (
                p.name, took, ep, c.report([p]))
            assert steps_done(c, p.name) < 1000


def test_ctrl_c(tmp_path):
    """SIGINT stops a trainer blocked in a barrier (its peer holds) and a
    pserver in its loop within a second or two: KeyboardInterrupt, not a
    wait for the pservers' timeouts."""
    with Cluster(tmp_path) as c:
        ps, tr, _ = start_job(c, ("127.0.0.1",), trainers=2, steps=10, trainer_cfg={1: {"hold_after": 2}})
        c.wait_for(lambda: "holding" in tr[1].out() and steps_done(c, "tr0") >= 2, RUN_LIMIT, "trainer 1 holding")
        time.sleep(0.3)  # trainer 0 is in step 3's send_barrier now, which waits for trainer 1
        for p, lost in ((tr[0], "trainer 0 lost"), (ps[0], None)):
            sent = time.monotonic()
            p.p.send_signal(signal.SIGINT)
            c.wait([p], 30)
            assert p.rc != 0 and "KeyboardInterrupt" in p.err(), c.report([p])
            assert p.ended - sent < 2.0, "%s took %.2f s to stop on SIGINT\n%s" % (p.name, p.ended - sent,
                                                                                   c.report([p]))
            if lost:
                c.wait_for(lambda: lost in ps[0].err(), 10, "the pserver noting " + lost)
        assert steps_done(c, "tr0") == 2


def test_trainer_without_close(tmp_path):
    with Cluster(tmp_path) as c:
        ps, tr, base = start_job(c, ("127.0.0.1",), trainers=2, trainer_cfg={1: {"close": False}})
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
        err = ps[0].err()
        assert "trainer 1 lost" in err and "exe.close() was not called" in err and "(1 trainer left, 1 lost)" in err, \
            c.report(ps)
        # the only trainer never closes: the pserver still ends, as an error
        ps, tr, base = start_job(c, ("127.0.0.1",), trainers=1, trainer_cfg={0: {"close": False}}, prefix="solo-")
        c.wait(ps + tr, RUN_LIMIT)
        assert tr[0].rc == 0, c.report(tr)
        assert ps[0].rc != 0 and "every trainer (1) was lost" in ps[0].err(), c.report(ps)


def test_port_in_use(tmp_path):
    with Cluster(tmp_path) as c:
        ps, _, base = start_job(c, ("127.0.0.1",), trainers=1, start_trainers=False)  # no trainer comes
        ps = ps[0]
        wait_listening(c, ps)
        second = start_pservers(c, base, prefix="second-")[0]
        c.wait([second], 30)
        assert second.ended - second.t0 < 10, c.report([second])  # Python's start, a transpile, then the error
        ep = base["endpoints"][0]
        assert second.rc != 0 and "pserver cannot listen on %s" % ep in second.err(), c.report([second])
        assert "in use" in second.err(), c.report([second])
        assert ps.rc is None  # the first one still serves
        # a port some other program holds
        s = socket.socket()
        try:
            s.bind(("127.0.0.3", 0))
            s.listen(1)
            other = "127.0.0.3:%d" % s.getsockname()[1]
            third = c.node("third", dict(base, role="pserver", endpoints=[other], endpoint=other))
            c.wait([third], 30)
        finally:
            s.close()
        assert third.rc != 0 and "pserver cannot listen on %s" % other in third.err(), c.report([third])


def test_trainers_started_before_pservers(tmp_path):
    with Cluster(tmp_path) as c:
        _, tr, base = start_job(c, ("127.0.0.1", "127.0.0.2"), trainers=2, pservers=False)
        time.sleep(3)
        assert all(p.rc is None for p in tr), c.report(tr)  # waiting for the pservers
        ps = start_pservers(c, base)
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
        assert all(steps_done(c, p.name) == base["steps"] for p in tr)


def test_waits_are_bounded(tmp_path):
    """PE_PS_TRAINER_WAIT: a trainer that never connects is dropped as lost and
    the others train on; PE_PS_CONNECT_TIMEOUT: a trainer whose pserver never
    listens raises naming the endpoint."""
    with Cluster(tmp_path) as c:
        port = c.port("127.0.0.1")
        base = {"endpoints": ["127.0.0.1:%d" % port], "trainers": 2, "opt": "sgd", "steps": 4, "batch": 12,
                "seed": 7, "slice": True, "min_block_size": 8}
        ps = c.node("ps0", dict(base, role="pserver", endpoint=base["endpoints"][0]), PE_PS_TRAINER_WAIT=2)
        tr = c.node("tr0", dict(base, role="trainer", trainer_id=0, progress=os.path.join(c.dir, "tr0.progress")))
        c.wait([ps, tr], RUN_LIMIT)
        assert_ok(c, [ps, tr])
        assert "trainer 1 lost: it never connected within 2 s (PE_PS_TRAINER_WAIT)" in ps.err(), c.report([ps])
        assert "(1 trainer left, 1 lost)" in ps.err() and steps_done(c, "tr0") == 4, c.report()

        nobody = "127.0.0.1:%d" % c.port("127.0.0.1")
        lone = c.node("lone", dict(base, role="trainer", trainer_id=0, endpoints=[nobody]), PE_PS_CONNECT_TIMEOUT=2)
        c.wait([lone], 30)
        assert lone.rc != 0 and "pserver %s: no pserver is listening there: waited 2 s (PE_PS_CONNECT_TIMEOUT)" % (
            nobody) in lone.err(), c.report([lone])
        assert lone.ended - lone.t0 < 15, c.report([lone])


def listening(pid):
    """(ip, port) of every TCP socket process `pid` listens on (/proc)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                ip_hex, port_hex = f[1].split(":")
                ip = ".".join(str(int(ip_hex[i:i + 2], 16)) for i in (6, 4, 2, 0)) if len(ip_hex) == 8 else ip_hex
                out.append((ip, int(port_hex, 16)))
    return out


def test_two_trainers_with_one_id(tmp_path):
    """Two trainer processes started with the same trainer id: the second to
    reach the pserver is refused naming the id (not mixed into the fan-in);
    the first trains, the missing trainer 1 is dropped after PE_PS_TRAINER_WAIT.
    Meanwhile only the pserver listens, on its endpoint alone (/proc)."""
    with Cluster(tmp_path) as c:
        port = c.port("127.0.0.1")
        base = {"endpoints": ["127.0.0.1:%d" % port], "trainers": 2, "opt": "sgd", "steps": 4, "batch": 12,
                "seed": 7, "slice": True, "min_block_size": 8}
        ps = c.node("ps0", dict(base, role="pserver", endpoint=base["endpoints"][0]), PE_PS_TRAINER_WAIT=3)
        tr = [c.node("tr%d" % k, dict(base, role="trainer", trainer_id=0,
                                       progress=os.path.join(c.dir, "tr%d.progress" % k))) for k in range(2)]
        # meanwhile (the pserver waits PE_PS_TRAINER_WAIT for trainer 1): nothing
        # listens but the pserver on its endpoint; the trainers open no port
        wait_listening(c, ps)
        assert listening(ps.p.pid) == [("127.0.0.1", port)], c.report([ps])
        for p in tr:
            if p.rc is None:
                assert listening(p.p.pid) == [], c.report([p])
        c.wait([ps] + tr, RUN_LIMIT)
        refused = [p for p in tr if p.rc != 0]
        assert len(refused) == 1, c.report()
        assert "trainer 0 is already connected to this pserver on another connection" in refused[0].err(), c.report()
        ok = [p for p in tr if p.rc == 0][0]
        assert steps_done(c, ok.name) == 4 and ps.rc == 0, c.report()
        assert "trainer 1 lost: it never connected" in ps.err(), c.report([ps])


class _Zmq:
    """A ZeroMQ DEALER through ctypes on libzmq.so.5 (no pyzmq here)."""
    DEALER, LINGER, RCVTIMEO, SNDMORE = 5, 17, 27, 2

    def __init__(self, endpoint):
        path = ctypes.util.find_library("zmq") or "libzmq.so.5"
        z = self.z = ctypes.CDLL(path)
        z.zmq_ctx_new.restype = ctypes.c_void_p
        z.zmq_socket.restype = ctypes.c_void_p
        z.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
        z.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
        z.zmq_connect.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        z.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        z.zmq_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        z.zmq_close.argtypes = [ctypes.c_void_p]
        z.zmq_ctx_term.argtypes = [ctypes.c_void_p]
        self.ctx = z.zmq_ctx_new()
        self.sock = z.zmq_socket(self.ctx, self.DEALER)
        for opt, val in ((self.LINGER, 0), (self.RCVTIMEO, 10000)):
            v = ctypes.c_int(val)
            z.zmq_setsockopt(self.sock, opt, ctypes.byref(v), ctypes.sizeof(v))
        assert z.zmq_connect(self.sock, ("tcp://" + endpoint).encode()) == 0

    def send(self, *frames):
        for i, f in enumerate(frames):
            assert self.z.zmq_send(self.sock, f, len(f), self.SNDMORE if i + 1 < len(frames) else 0) == len(f)

    def recv(self):
        buf = ctypes.create_string_buffer(70000)
        n = self.z.zmq_recv(self.sock, buf, len(buf), 0)
        assert n >= 0, "no reply from the pserver within 10 s"
        return buf.raw[:n]

    def close(self):
        self.z.zmq_close(self.sock)
        self.z.zmq_ctx_term(self.ctx)


def _ps_header(type_, trainer_id, name, dtype=0, dims=(), nbytes=0, seq=1, offset=0):
    """A header frame as runtime/transport/msg.c lays it out (protocol version 3)."""
    import struct
    d = list(dims) + [0] * (8 - len(dims))
    return struct.pack("<4sHHIIII8qQQ", b"PEPS", 3, type_, trainer_id, seq, dtype, len(dims), *d, nbytes,
                       offset) + name


def test_foreign_clients_are_ignored(tmp_path):
    with Cluster(tmp_path) as c:
        go_on = os.path.join(c.dir, "go-on")
        ps, tr, base = start_job(c, ("127.0.0.1",), trainers=2, steps=30, trainer_cfg={
            0: {"hold_after": 2, "hold_until": go_on}})
        c.wait_for(lambda: "holding" in tr[0].out(), RUN_LIMIT, "trainer 0 after step 2")
        ep = base["endpoints"][0]
        host, port = ep.split(":")
        # raw TCP: an HTTP request, then garbage, then a peer that says nothing and leaves
        for junk in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(300), b""):
            s = socket.create_connection((host, int(port)), timeout=10)
            try:
                if junk:
                    s.sendall(junk)
                time.sleep(0.1)
            finally:
                s.close()
        # ZeroMQ peers with bad PE messages: each is answered with ERROR and logged
        z = _Zmq(ep)
        try:
            bad = [
                ((b"PEPS\x02\x00\x01",), "shorter than the 104-byte fixed part"),
                ((b"SPEP" + bytes(100) + b"x",), 'does not start with "PEPS"'),
                # a SEND announcing a float32 [4] (16 bytes) with a 7-byte data frame
                ((_ps_header(1, 0, b"fc_0.w_0@GRAD.block0", dtype=0, dims=(4,), nbytes=16), b"1234567"),
                 "data frame has 7"),
                ((_ps_header(99, 0, b""),), "unknown message type 99"),
                # parts: a SEND's at multiples of 1 MiB (transport.h: PE_PS_PART); a GET has none
                ((_ps_header(1, 0, b"fc_0.w_0@GRAD.block0", dtype=0, dims=(4,), nbytes=16, offset=8), bytes(8)),
                 "SEND 'fc_0.w_0@GRAD.block0': part offset 8 is not a multiple of 1048576 below its 16 bytes"),
                ((_ps_header(2, 0, b"fc_0.w_0", offset=8),),
                 "GET 'fc_0.w_0' has a part offset of 8; only a SEND or a VALUE comes in parts"),
            ]
            for frames, why in bad:
                z.send(*frames)
                hdr = z.recv()
                assert hdr[:4] == b"PEPS" and int.from_bytes(hdr[6:8], "little") == 18, hdr[:16]  # an ERROR
                text = z.recv().decode()
                assert why in text, (why, text)
        finally:
            z.close()
        assert ps[0].rc is None, c.report(ps)
        open(go_on, "w").close()
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
        err = ps[0].err()
        # ZeroMQ takes a raw TCP peer whose first byte is not ZMTP 3's 0xff for a ZMTP 1.0 peer, so
        # some of the raw junk above arrives as messages too: at least the bad ones are logged
        assert err.count("ignored a malformed message") >= len(bad), c.report(ps)
        for _, why in bad:
            assert why in err, c.report(ps)
        assert "(2 trainers left, 0 lost)" in err, c.report(ps)
        assert all(steps_done(c, p.name) == 30 for p in tr)


# ---- 4. checkpoints -------------------------------------------------------------------------

def _load_plain(dirname, main):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    fluid.io.load_persistables(exe, dirname, main, scope=scope)
    return ps_node.read(scope, ps_node.persistable_names(main)), scope


def test_checkpoint_from_pservers(tmp_path):
    opt, steps, batch, seed = "adam", 4, 12, 11
    ref_losses, ref, main = ps_node.train_local(opt, seed, steps, batch)
    names = ps_node.persistable_names(main)
    params = ps_node.param_names(main)
    ckpt, ckpt2 = os.path.join(str(tmp_path), "ckpt"), os.path.join(str(tmp_path), "ckpt2")
    with Cluster(tmp_path) as c:
        ps, tr, base = start_job(c, ("127.0.0.1", "127.0.0.2"), trainers=2, opt=opt, steps=steps, batch=batch,
                                 seed=seed, trainer_cfg={0: {"save_dir": ckpt}})
        c.wait(ps + tr, RUN_LIMIT)
        assert_ok(c, ps + tr)
        # one file, the original names at full shape: a single-process run of the original program loads it
        assert os.listdir(ckpt) == ["persistables.safetensors"]
        got, _ = _load_plain(ckpt, main)
        assert sorted(got) == sorted(names)
        r0 = trainer_result(c, 0)
        for n in names:
            np.testing.assert_allclose(got[n], ref[n], rtol=1e-5, atol=1e-6, err_msg=n)
        for n in params:  # exactly what the pservers sent the trainer last
            np.testing.assert_array_equal(got[n], r0[n], err_msg=n)
        assert any(".moment1" in n or "moment1" in n for n in names)  # optimizer state came too

        # pservers restarted from the checkpoint serve its values; training goes on as from the file
        more = 2
        ps2 = start_pservers(c, dict(base, trainers=1, steps=more), prefix="re-", extra={"load_dir": ckpt})
        tr2 = c.node("re-tr0", dict(base, role="trainer", trainers=1, trainer_id=0, steps=more, batch=batch // 2,
                                    init_out=os.path.join(c.dir, "re-init.npz"), save_dir=ckpt2,
                                    out=os.path.join(c.dir, "re-tr0.npz")))
        c.wait(ps2 + [tr2], RUN_LIMIT)
        assert_ok(c, ps2 + [tr2])
    with np.load(os.path.join(str(tmp_path), "re-init.npz")) as z:
        for n in params:
            np.testing.assert_array_equal(z[n], got[n], err_msg=n)
    # one process loading the checkpoint and training the same 2 steps (whole batch = the lone trainer's share)
    exe = fluid.Executor(fluid.CPUPlace())
    m2, _, loss2 = ps_node.build(opt, seed)
    _, scope = _load_plain(ckpt, m2)
    for step in range(more):
        exe.run(m2, feed=ps_node.share(seed, step, batch // 2, 1, 0), fetch_list=[loss2], scope=scope)
    after = ps_node.read(scope, names)
    got2, _ = _load_plain(ckpt2, main)
    for n in names:
        np.testing.assert_allclose(got2[n], after[n], rtol=1e-5, atol=1e-6, err_msg=n)
