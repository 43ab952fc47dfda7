"""tests/python/test_ps_transpiler.py — DistributeTranspiler's parameter-server mode and fluid.io.

The RPC ops (send, recv, barriers, listen_and_serv) run in the C engine's
ZeroMQ loop, tested elsewhere; here the programs the transpiler writes are
checked as structure (op order, attrs, var names and shapes, the row blocks
and their placement, the checkpoint mapping), and everything that runs on
registered ops is run: the pservers' startup programs (their blocks must be
the rows of what a single-process startup draws), fluid.io's save / load on
plain programs, loading a pserver's blocks from a full checkpoint, and
a sync step of 2 trainers x 2 pservers with this test playing the server
loop (the written optimize blocks run by the Executor) against one process.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.fluid import ps_transpiler
from pe.framework import OpRole
from pe.utils import unique_name

EPS2 = "127.0.0.1:6170,127.0.0.1:6171"
EP0, EP1 = "127.0.0.1:6170", "127.0.0.1:6171"
TAIL = ("split", "send", "send_barrier", "recv", "fetch_barrier", "concat")


def build(opt="sgd", hidden=300, decay=None, clip=None, bn=False, lr_sched=False):
    """fc(13 -> hidden, relu) -> fc(hidden -> 1), square error, minimized."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[13], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(x, hidden, act="relu")
        if bn:
            h = pe.static.nn.batch_norm(h)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        reg = pe.regularizer.L2Decay(decay) if decay else None
        lr = 0.01
        if lr_sched == "piecewise":
            lr = fluid.layers.piecewise_decay([1, 2], [0.01, 0.005, 0.002])
        elif lr_sched:
            lr = fluid.layers.exponential_decay(0.01, 2, 0.5, staircase=True)
        if opt == "sgd":
            o = fluid.optimizer.SGD(learning_rate=lr, regularization=reg, grad_clip=clip)
        elif opt == "momentum":
            o = fluid.optimizer.Momentum(learning_rate=lr, momentum=0.9, regularization=reg, grad_clip=clip)
        elif opt == "adam":
            o = fluid.optimizer.Adam(learning_rate=lr, regularization=reg, grad_clip=clip)
        elif opt == "adagrad":
            o = fluid.optimizer.Adagrad(learning_rate=lr, regularization=reg, grad_clip=clip,
                                        initial_accumulator_value=0.1)
        elif opt == "rmsprop":
            o = fluid.optimizer.RMSProp(learning_rate=lr, momentum=0.5, centered=True, regularization=reg,
                                        grad_clip=clip)
        elif opt == "adamax":
            o = fluid.optimizer.Adamax(learning_rate=lr, regularization=reg, grad_clip=clip)
        elif opt == "adamw":
            o = pe.optimizer.AdamW(learning_rate=lr, weight_decay=0.1, grad_clip=clip)
        else:
            o = fluid.optimizer.Lamb(learning_rate=lr, regularization=reg, grad_clip=clip)
        o.minimize(loss)
    return main, startup, loss


def transpile(main, startup, pservers=EPS2, trainers=2, trainer_id=0, sync_mode=True, **cfg):
    config = fluid.DistributeTranspilerConfig()
    for k, v in cfg.items():
        setattr(config, k, v)
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(trainer_id, program=main, pservers=pservers, trainers=trainers, sync_mode=sync_mode,
                startup_program=startup)
    return t


def tail_ops(prog):
    """The ops the transpiler appended to the trainer program (from the first split / send on)."""
    ops = prog.global_block().ops
    i = next(i for i, op in enumerate(ops) if op.type in ("split", "send"))
    return ops[i:]


def by_block(prog):
    return {b.idx: b for b in prog.blocks}


def las(prog):
    ops = prog.global_block().ops
    assert [op.type for op in ops] == ["listen_and_serv"]
    return ops[0]


# ---- slicing ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,n,mbs", [((13, 300), 2, 1024), ((13, 300), 3, 8192), ((1000, 7), 4, 100),
                                         ((5,), 8, 1), ((1,), 4, 1), ((64, 1), 3, 16), ((10, 3, 4), 4, 25)])
def test_slice_rows_cover_each_param_exactly(shape, n, mbs):
    parts = ps_transpiler.slice_rows(shape, n, True, mbs)
    numel = int(np.prod(shape))
    rows = shape[0]
    count = min(n, max(1, numel // mbs))
    assert len(parts) <= count and len(parts) >= 1
    per = -(-rows // count)
    off = 0
    for o, r in parts:  # contiguous, whole rows, Paddle's ceil(rows / split_count) per block
        assert o == off and 0 < r <= per
        off += r
    assert off == rows
    if len(parts) > 1:
        assert all(r * numel // rows >= mbs for _, r in parts[:-1])
    a = np.arange(numel, dtype=np.float32).reshape(shape)
    blocks = [a[o:o + r] for o, r in parts]
    np.testing.assert_array_equal(np.concatenate(blocks, axis=0), a)
    assert ps_transpiler.slice_rows(shape, n, False, mbs) == [(0, rows)]


# ---- trainer and pserver programs ------------------------------------------------------------

def test_one_pserver_sgd():
    main, startup, loss = build("sgd")
    t = transpile(main, startup, pservers=EP0, trainers=1)
    tp = t.get_trainer_program()
    assert tp is not main and "sgd" not in [op.type for op in tp.global_block().ops]
    assert "sgd" in [op.type for op in main.global_block().ops]  # the original is untouched
    types = [op.type for op in tail_ops(tp)]
    assert types == ["send"] * 4 + ["send_barrier"] + ["recv"] * 4 + ["fetch_barrier"]
    grads = [op.input("X")[0] for op in tail_ops(tp)[:4]]
    assert grads == ["fc_0.w_0@GRAD", "fc_0.b_0@GRAD", "fc_1.w_0@GRAD", "fc_1.b_0@GRAD"]  # optimizer-op order
    for op in tail_ops(tp):
        assert op.attr("trainer_id") == 0 and int(op.attr("op_role")) == OpRole.RPC
        if op.type == "send":
            assert op.attr("epmap") == [EP0] and op.attr("send_varnames") == op.input("X")
            assert op.attr("sync_mode") is True
        if op.type == "recv":
            assert op.attr("varnames") == op.output("Out") and op.attr("epmap") == [EP0]
        if op.type.endswith("barrier"):
            assert op.attr("endpoints") == [EP0]
    ps = t.get_pserver_program(EP0)
    l = las(ps)
    assert l.attr("endpoint") == EP0 and l.attr("Fanin") == 1 and l.attr("sync_mode") is True
    assert l.attr("optimize_blocks") == [1, 2, 3, 4] and l.attr("lr_decay_block_id") == -1
    assert l.attr("stop_on_lost_trainer") is False
    assert l.attr("grad_to_block_id") == ["fc_0.w_0@GRAD:1", "fc_0.b_0@GRAD:2", "fc_1.w_0@GRAD:3", "fc_1.b_0@GRAD:4"]
    for i, p in enumerate(["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"], start=1):
        b = ps.block(i)
        assert b.parent_idx == 0 and [op.type for op in b.ops] == ["sgd"]
        assert b.ops[0].input("Param") == [p] and b.ops[0].input("Grad") == [p + "@GRAD"]
        assert b.ops[0].input("LearningRate") == ["learning_rate_0"]
    g = ps.global_block()
    assert g.var("fc_0.w_0").persistable and g.var("fc_0.w_0").shape == (13, 300)
    assert not g.var("fc_0.w_0@GRAD").persistable and g.var("fc_0.w_0@GRAD").shape == (13, 300)
    assert g.var("learning_rate_0").persistable
    # the default min_block_size (8192) leaves 13x300 whole
    assert not any(".block" in n for n in g.vars)


def test_two_pservers_sliced_adam_with_decay():
    main, startup, _ = build("adam", decay=1e-4)
    t = transpile(main, startup, min_block_size=1024)
    tp = t.get_trainer_program()
    tail = tail_ops(tp)
    assert [op.type for op in tail] == (["split"] + ["send"] * 4 + ["send_barrier"] + ["recv"] * 4
                                        + ["fetch_barrier", "concat"])
    split = tail[0]
    assert split.input("X") == ["fc_0.w_0@GRAD"]
    assert split.output("Out") == ["fc_0.w_0@GRAD.block0", "fc_0.w_0@GRAD.block1"]
    assert split.attr("sections") == [7, 6] and split.attr("axis") == 0
    send = tail[1]
    assert send.input("X") == ["fc_0.w_0@GRAD.block0", "fc_0.w_0@GRAD.block1"] and send.attr("epmap") == [EP0, EP1]
    recv = tail[6]
    assert recv.output("Out") == ["fc_0.w_0.block0", "fc_0.w_0.block1"] and recv.attr("epmap") == [EP0, EP1]
    concat = tail[-1]
    assert concat.input("X") == recv.output("Out") and concat.output("Out") == ["fc_0.w_0"]
    g = tp.global_block()
    assert g.var("fc_0.w_0@GRAD.block1").shape == (6, 300) and not g.var("fc_0.w_0.block0").persistable
    # the optimizer state and the learning rate left the trainer (program and startup)
    for n in ("fc_0.w_0_moment1_0", "fc_0.w_0_beta1_pow_acc_0", "learning_rate_0", "fc_0.w_0@GRAD@DECAYED_0"):
        assert not g.has_var(n) and not startup.global_block().has_var(n)
    assert {op.type for op in tp.global_block().ops}.isdisjoint({"adam", "scale", "sum"})
    # RoundRobin over the blocks in optimizer order: w0.block0, w0.block1, b0, w1, b1
    p0, p1 = t.get_pserver_program(EP0), t.get_pserver_program(EP1)
    assert las(p0).attr("grad_to_block_id") == ["fc_0.w_0@GRAD.block0:1", "fc_0.b_0@GRAD:2", "fc_1.b_0@GRAD:3"]
    assert las(p1).attr("grad_to_block_id") == ["fc_0.w_0@GRAD.block1:1", "fc_1.w_0@GRAD:2"]
    b = p1.block(1)
    assert [op.type for op in b.ops] == ["scale", "sum", "adam"]
    adam = b.ops[2]
    assert adam.input("Param") == ["fc_0.w_0.block1"] and adam.output("ParamOut") == ["fc_0.w_0.block1"]
    assert adam.input("Grad") == ["fc_0.w_0@GRAD@DECAYED_0.block1"]
    assert adam.input("Moment1") == ["fc_0.w_0_moment1_0.block1"]
    assert adam.input("Beta1Pow") == ["fc_0.w_0_beta1_pow_acc_0.block1"]
    assert adam.input("LearningRate") == ["learning_rate_0"]
    assert adam.attr("op_role_var") == ["fc_0.w_0.block1", "fc_0.w_0@GRAD.block1"]
    assert b.ops[1].input("X") == ["fc_0.w_0@GRAD.block1", "fc_0.w_0_l2_decay_0.block1"]
    g1 = p1.global_block()
    assert g1.var("fc_0.w_0.block1").shape == (6, 300) and g1.var("fc_0.w_0.block1").persistable
    assert g1.var("fc_0.w_0_moment2_0.block1").shape == (6, 300)
    assert g1.var("fc_0.w_0_beta2_pow_acc_0.block1").shape == (1,)
    assert g1.var("fc_0.w_0@GRAD.block1").shape == (6, 300) and not g1.var("fc_0.w_0@GRAD.block1").persistable
    assert not g1.has_var("fc_0.b_0")  # on the other pserver
    # every param block on exactly one pserver
    names = [a.split(":")[0] for p in (p0, p1) for a in las(p).attr("grad_to_block_id")]
    assert sorted(names) == sorted(["fc_0.w_0@GRAD.block0", "fc_0.w_0@GRAD.block1", "fc_0.b_0@GRAD",
                                    "fc_1.w_0@GRAD", "fc_1.b_0@GRAD"])


def test_slice_var_up_off_and_min_block_size():
    main, startup, _ = build("sgd", hidden=1000)  # fc_0.w_0: 13 x 1000 = 13000 elements
    tp = transpile(main, startup).get_trainer_program()  # 13000 // 8192 = 1 -> still whole
    assert "split" not in [op.type for op in tp.global_block().ops]
    main, startup, _ = build("sgd", hidden=1000)
    tp = transpile(main, startup, min_block_size=4000).get_trainer_program()  # min(2, 3) = 2 blocks
    split = [op for op in tp.global_block().ops if op.type == "split"]
    assert [op.attr("sections") for op in split] == [[7, 6]]
    main, startup, _ = build("sgd", hidden=1000)
    t = transpile(main, startup, pservers="127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", min_block_size=4000)
    split = [op for op in t.get_trainer_program().global_block().ops if op.type == "split"]
    assert [op.attr("sections") for op in split] == [[5, 5, 3]]
    main, startup, _ = build("sgd", hidden=1000)
    tp = transpile(main, startup, min_block_size=4000, slice_var_up=False).get_trainer_program()
    assert "split" not in [op.type for op in tp.global_block().ops]
    assert not any(".block" in n for n in tp.global_block().vars)


def placement(t, eps):
    out = {}
    for ep in eps:
        for a in las(t.get_pserver_program(ep)).attr("grad_to_block_id"):
            out[a.split(":")[0]] = ep
    return out


HASH_SCRIPT = r"""
import json, sys
import pe.fluid as fluid
sys.path.insert(0, %r)
import test_ps_transpiler as T
main, startup, _ = T.build("momentum")
t = T.transpile(main, startup, pservers="127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", split_method=fluid.transpiler.HashName,
                min_block_size=1024)
print(json.dumps([T.placement(t, ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]),
                  t.get_trainer_program().to_json(), t.get_pserver_program("127.0.0.1:2").to_json()]))
"""


def test_round_robin_and_hash_name():
    eps = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    main, startup, _ = build("momentum")
    t = transpile(main, startup, pservers=",".join(eps), min_block_size=1024)
    pl = placement(t, eps)
    order = ["fc_0.w_0@GRAD.block0", "fc_0.w_0@GRAD.block1", "fc_0.w_0@GRAD.block2", "fc_0.b_0@GRAD",
             "fc_1.w_0@GRAD", "fc_1.b_0@GRAD"]
    assert [pl[g] for g in order] == [eps[i % 3] for i in range(6)]
    main, startup, _ = build("momentum")
    t = transpile(main, startup, pservers=",".join(eps), split_method=fluid.transpiler.HashName, min_block_size=1024)
    pl = placement(t, eps)
    hn = fluid.transpiler.HashName(eps)
    assert [pl[g] for g in order] == hn.dispatch([g.replace("@GRAD", "") for g in order])
    # stable across processes: another PYTHONHASHSEED places and writes the same programs
    here = os.path.dirname(os.path.abspath(__file__))
    outs = []
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", HASH_SCRIPT % here], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    assert json.loads(outs[0])[0] == pl


def test_momentum_trainers3_async():
    main, startup, _ = build("momentum")
    t = transpile(main, startup, trainers=3, trainer_id=2, sync_mode=False, min_block_size=1024)
    tp = t.get_trainer_program()
    types = [op.type for op in tail_ops(tp)]
    assert types == ["split"] + ["send"] * 4 + ["recv"] * 4 + ["concat"]  # no barriers in async mode
    for op in tail_ops(tp):
        if op.type in ("split", "concat"):
            continue
        assert op.attr("trainer_id") == 2
        if op.type == "send":
            assert op.attr("sync_mode") is False
    l = las(t.get_pserver_program(EP1))
    assert l.attr("Fanin") == 3 and l.attr("sync_mode") is False
    b = t.get_pserver_program(EP0).block(1)
    assert [op.type for op in b.ops] == ["momentum"]
    assert b.ops[0].input("Velocity") == ["fc_0.w_0_velocity_0.block0"]
    assert b.ops[0].output("VelocityOut") == ["fc_0.w_0_velocity_0.block0"]
    assert tp._pe_ps["trainers"] == 3 and tp._pe_ps["sync_mode"] is False
    config = fluid.DistributeTranspilerConfig()
    config.sync_mode = False  # the config's switch turns async on too
    main, startup, _ = build("sgd")
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(0, program=main, pservers=EP0, trainers=2, startup_program=startup)
    assert las(t.get_pserver_program(EP0)).attr("sync_mode") is False


@pytest.mark.parametrize("sched", ["exponential", "piecewise"])
def test_lr_schedule_block(sched):
    """fluid.layers' schedules (op_role LRSched, the @LR_DECAY_COUNTER@ step)
    move whole into each pserver's lr-decay block, counter included."""
    main, startup, _ = build("adam", lr_sched=sched)
    lr_types = [op.type for op in main.global_block().ops if int(op.attr("op_role") or 0) & OpRole.LRSched]
    assert lr_types[0] == "increment"
    lr_name = next(op for op in main.global_block().ops if op.type == "adam").input("LearningRate")[0]
    t = transpile(main, startup, min_block_size=1024)
    tp = t.get_trainer_program()
    counter = "@LR_DECAY_COUNTER@"
    assert not any(int(op.attr("op_role") or 0) & OpRole.LRSched for op in tp.global_block().ops)
    assert not tp.global_block().has_var(counter) and not startup.global_block().has_var(counter)
    for ep in (EP0, EP1):
        ps = t.get_pserver_program(ep)
        l = las(ps)
        assert l.attr("lr_decay_block_id") == 1 and l.attr("optimize_blocks")[0] == 2
        assert [op.type for op in ps.block(1).ops] == lr_types
        assert ps.block(1).ops[-1].output("Out") == [lr_name]
        assert ps.global_block().var(counter).persistable
    kind, entries = tp._pe_ps["vars"][counter]
    assert kind == "copy" and [e[0] for e in entries] == [EP0, EP1]
    s = t.get_startup_program(EP1, t.get_pserver_program(EP1))
    assert counter in [a for op in s.global_block().ops for a in op.output_arg_names]


def test_global_norm_clip_stays_on_trainer():
    main, startup, _ = build("sgd", clip=pe.nn.ClipGradByGlobalNorm(1.0))
    t = transpile(main, startup, min_block_size=1024)
    ops = t.get_trainer_program().global_block().ops
    types = [op.type for op in ops]
    assert types.index("clip_by_global_norm") < types.index("split") < types.index("send")
    for ep in (EP0, EP1):
        ps = t.get_pserver_program(ep)
        assert all(op.type == "sgd" for b in ps.blocks[1:] for op in b.ops)


def test_per_gradient_clip_on_the_pservers():
    """ClipGradByValue is per element: its clip op goes with each row block to its pserver;
    ClipGradByNorm needs the whole gradient's norm: a sliced parameter is refused, an unsliced one moves."""
    main, startup, _ = build("sgd", clip=pe.nn.ClipGradByValue(0.5))
    t = transpile(main, startup, min_block_size=1024)
    assert "clip" not in [op.type for op in t.get_trainer_program().global_block().ops]
    for ep in (EP0, EP1):
        ps = t.get_pserver_program(ep)
        for b in ps.blocks[1:]:
            assert [op.type for op in b.ops] == ["clip", "sgd"]
    main, startup, _ = build("sgd", clip=pe.nn.ClipGradByNorm(1.0))
    with pytest.raises(pe.UnsupportedError, match=r"sliced into 2 blocks, but its gradient is clipped by its own norm"):
        transpile(main, startup, min_block_size=1024)
    t = transpile(main, startup, slice_var_up=False)
    blocks = [b for ep in (EP0, EP1) for b in t.get_pserver_program(ep).blocks[1:]]
    assert all([op.type for op in b.ops] == ["clip_by_global_norm", "sgd"] for b in blocks)


def test_bad_arguments():
    main, startup, _ = build("sgd")
    bad = [dict(pservers="127.0.0.1"), dict(pservers="127.0.0.1:6170,127.0.0.1:6170"), dict(pservers=""),
           dict(pservers="127.0.0.1:0"), dict(trainers=0), dict(trainers="2"), dict(trainers=True),
           dict(trainer_id=2), dict(trainer_id=-1), dict(trainers=3, trainer_id=3)]
    msgs = ["pserver endpoint '127.0.0.1' is not ip:port", "pserver endpoints repeat: pservers=",
            "pserver endpoint list pservers='' is empty", "not ip:port", "trainers must be the number of trainers",
            "got '2'", "got True", "trainer_id 2 is not in \\[0, 2\\)", "trainer_id -1 is not in",
            "trainer_id 3 is not in \\[0, 3\\)"]
    for kw, msg in zip(bad, msgs):
        with pytest.raises(pe.InvalidArgumentError, match=msg):
            transpile(main, startup, **kw)
    with pytest.raises(pe.InvalidArgumentError, match="min_block_size must be an int >= 1, got 0"):
        transpile(main, startup, min_block_size=0)
    with pytest.raises(pe.InvalidArgumentError, match="split_method must be RoundRobin or HashName"):
        transpile(main, startup, split_method="hash")
    with pytest.raises(pe.UnsupportedError, match="enable_dc_asgd"):
        transpile(main, startup, enable_dc_asgd=True)
    t = transpile(main, startup)
    with pytest.raises(pe.InvalidArgumentError, match="endpoint '10.0.0.1:6170' is not one of the pservers "
                                                      "127.0.0.1:6170,127.0.0.1:6171"):
        t.get_pserver_program("10.0.0.1:6170")
    with pytest.raises(pe.InvalidArgumentError, match="get_startup_program: endpoint '10.0.0.1:1'"):
        t.get_startup_program("10.0.0.1:1")
    with pytest.raises(pe.InvalidArgumentError, match="not this transpiler's program for endpoint"):
        t.get_startup_program(EP1, t.get_pserver_program(EP0))
    with pytest.raises(pe.InvalidArgumentError, match="startup_program was already transpiled"):
        transpile(main, startup)
    empty_main, empty_startup = fluid.Program(), fluid.Program()
    with pytest.raises(pe.InvalidArgumentError, match="no optimizer ops"):
        transpile(empty_main, empty_startup)


def test_pserver_without_blocks():
    main, startup, _ = build("sgd")
    eps = ["127.0.0.1:%d" % p for p in range(7000, 7005)]
    t = transpile(main, startup, pservers=",".join(eps))
    prog, st = t.get_pserver_programs(eps[4])  # 4 params, 5 pservers: nothing to serve but the barriers
    l = las(prog)
    assert prog.num_blocks == 1 and l.attr("optimize_blocks") == [] and l.attr("grad_to_block_id") == []
    attrs = {a["name"]: a["type"] for a in json.loads(prog.to_json())["blocks"][0]["ops"][0]["attrs"]}
    assert attrs["optimize_blocks"] == "INTS" and attrs["grad_to_block_id"] == "STRINGS"
    assert attrs["endpoint"] == "STRING" and attrs["Fanin"] == "INT" and attrs["sync_mode"] == "BOOL"
    assert st.global_block().ops == []


def test_deterministic():
    outs = []
    for _ in range(2):
        main, startup, _ = build("adam", decay=1e-4)
        t = transpile(main, startup, min_block_size=1024)
        outs.append((t.get_trainer_program().to_json(), startup.to_json(),
                     [t.get_pserver_programs(ep)[i].to_json() for ep in (EP0, EP1) for i in (0, 1)]))
    assert outs[0] == outs[1]


# ---- checkpoint mapping, startup programs -------------------------------------------------------

def test_checkpoint_mapping_covers_every_persistable():
    main, startup, _ = build("adam", decay=1e-4, bn=True)
    orig = {v.name: v for v in main.global_block().vars.values() if v.persistable}
    t = transpile(main, startup, min_block_size=1024)
    ps = t.get_trainer_program()._pe_ps
    assert set(ps["vars"]) == set(orig) and ps["pservers"] == [EP0, EP1]
    servers = {ep: t.get_pserver_program(ep).global_block() for ep in (EP0, EP1)}
    for name, (kind, entries) in ps["vars"].items():
        shape = orig[name].shape
        assert ps["meta"][name][0] == list(shape)
        if kind == "local":  # batch norm's statistics stay with the trainer
            assert entries == [] and "batch_norm" in name
            continue
        for ep, bname, off, rows in entries:
            v = servers[ep].var(bname)
            assert v.persistable and v.dtype == orig[name].dtype
        if kind == "rows":
            covered = np.zeros(shape[0], dtype=int)
            for ep, bname, off, rows in entries:
                covered[off:off + rows] += 1
                assert servers[ep].var(bname).shape == (rows,) + tuple(shape[1:])
            assert (covered == 1).all(), name
        else:
            assert kind == "copy" and all(servers[ep].var(b).shape == shape for ep, b, _, _ in entries)
    assert ps["vars"]["fc_0.w_0_beta1_pow_acc_0"][0] == "copy"
    assert [e[1] for e in ps["vars"]["fc_0.w_0_moment1_0"][1]] == ["fc_0.w_0_moment1_0.block0",
                                                                    "fc_0.w_0_moment1_0.block1"]


def run_startup(prog, seed=7):
    prog.random_seed = seed
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(prog, scope=scope)
    return scope


def arr(scope, name):
    return np.array(scope.find_var(name).get_tensor())


@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam"])
def test_pserver_startup_draws_the_single_process_values(opt):
    main, startup, _ = build(opt, decay=1e-4)
    startup.random_seed = 7
    ref = run_startup(startup.clone())
    t = transpile(main, startup, min_block_size=1024)
    for ep in (EP0, EP1):
        prog, st = t.get_pserver_programs(ep)
        assert st.random_seed == 7
        scope = fluid.Scope()
        fluid.Executor(fluid.CPUPlace()).run(st, scope=scope)
        where = prog._pe_ps_server["vars"]
        persist = {v.name for v in prog.global_block().vars.values() if v.persistable}
        assert set(where) == persist
        for bname, (kind, orig, off, rows) in where.items():
            want = arr(ref, orig)[off:off + rows] if kind == "rows" else arr(ref, orig)
            np.testing.assert_array_equal(arr(scope, bname), want)
        if ep == EP1:
            assert scope.find_var("fc_0.w_0") is None  # the full var was a temporary
    # the trainer's startup: params initialized, then received from the pservers
    ops = startup.global_block().ops
    assert [op.type for op in ops[-5:]] == ["recv"] * 4 + ["concat"]
    assert all(op.type in ("uniform_random", "fill_constant") for op in ops[:-5])
    assert [a for op in ops[:-5] for a in op.output_arg_names] == ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]


# ---- fluid.io --------------------------------------------------------------------------

def train_single(opt="adam", steps=3, bn=False):
    main, startup, loss = build(opt, decay=1e-4, bn=bn)
    startup.random_seed = 7
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(0)
    for _ in range(steps):
        exe.run(main, feed={"x": rng.randn(8, 13).astype("float32"), "y": rng.randn(8, 1).astype("float32")},
                fetch_list=[loss], scope=scope)
    return main, startup, scope, exe


def test_io_save_load_persistables_and_params(tmp_path):
    main, startup, scope, exe = train_single()
    names = [v.name for v in main.global_block().vars.values() if v.persistable]
    fluid.io.save_persistables(exe, str(tmp_path), main, scope=scope)
    fluid.io.save_params(exe, str(tmp_path), main, scope=scope)
    assert (tmp_path / "persistables.safetensors").exists() and (tmp_path / "params.safetensors").exists()
    saved = {n: arr(scope, n) for n in names}
    other = run_startup(startup.clone(), seed=99)
    assert not np.array_equal(arr(other, "fc_0.w_0"), saved["fc_0.w_0"])
    fluid.io.load_params(exe, str(tmp_path), main, scope=other)
    np.testing.assert_array_equal(arr(other, "fc_0.w_0"), saved["fc_0.w_0"])
    assert not np.array_equal(arr(other, "fc_0.w_0_moment1_0"), saved["fc_0.w_0_moment1_0"])
    fluid.io.load_persistables(exe, str(tmp_path), main, scope=other)
    for n in names:
        np.testing.assert_array_equal(arr(other, n), saved[n], err_msg=n)
    # pe.static.load reads the same file
    third = run_startup(startup.clone(), seed=5)
    pe.static.load(main, str(tmp_path / "persistables"), scope=third)
    np.testing.assert_array_equal(arr(third, "fc_1.w_0_moment2_0"), saved["fc_1.w_0_moment2_0"])
    with pytest.raises(pe.NotFoundError, match="no checkpoint file"):
        fluid.io.load_params(exe, str(tmp_path / "nowhere"), main, scope=other)


def test_io_pserver_loads_its_blocks_from_a_full_checkpoint(tmp_path):
    main, startup, scope, exe = train_single(steps=2)
    fluid.io.save_persistables(exe, str(tmp_path), main, scope=scope)
    main2, startup2, _ = build("adam", decay=1e-4)
    startup2.random_seed = 7
    t = transpile(main2, startup2, min_block_size=1024)
    for ep in (EP0, EP1):
        prog, st = t.get_pserver_programs(ep)
        ps_scope = fluid.Scope()
        exe.run(st, scope=ps_scope)
        fluid.io.load_persistables(exe, str(tmp_path), prog, scope=ps_scope)
        for bname, (kind, orig, off, rows) in prog._pe_ps_server["vars"].items():
            want = arr(scope, orig)[off:off + rows] if kind == "rows" else arr(scope, orig)
            np.testing.assert_array_equal(arr(ps_scope, bname), want, err_msg=bname)
        assert not np.array_equal(arr(ps_scope, "fc_0.w_0_moment1_0.block0" if ep == EP0 else
                                      "fc_0.w_0_moment1_0.block1"), 0)
    # a checkpoint of another model is refused, naming the var, and nothing is loaded
    main3, startup3, _ = build("adam", hidden=100, decay=1e-4)
    t3 = transpile(main3, startup3, min_block_size=64)
    prog3, st3 = t3.get_pserver_programs(EP0)
    s3 = fluid.Scope()
    exe.run(st3, scope=s3)
    before = {n: arr(s3, n) for n in prog3._pe_ps_server["vars"]}
    with pytest.raises(pe.InvalidArgumentError, match="fc_0.w_0 rows \\[0, 7\\): the file gives float32 \\[7, 300\\], "
                                                      "fc_0.w_0.block0 wants float32 \\[7, 100\\]"):
        fluid.io.load_persistables(exe, str(tmp_path), prog3, scope=s3)
    for n, a in before.items():
        np.testing.assert_array_equal(arr(s3, n), a)


def test_io_gather_program_of_a_trainer():
    from pe.fluid.io import _gather_program
    main, startup, _ = build("adam", bn=True)
    ps = transpile(main, startup, min_block_size=1024).get_trainer_program()._pe_ps
    names = [n for n in ps["vars"] if ps["vars"][n][0] != "local"]
    g = _gather_program(ps, names).global_block()
    recvs = [op for op in g.ops if op.type == "recv"]
    assert len(recvs) == len(names)
    w = next(op for op in recvs if op.output("Out") == ["fc_0.w_0.block0", "fc_0.w_0.block1"])
    assert w.attr("epmap") == [EP0, EP1] and w.attr("varnames") == ["fc_0.w_0.block0", "fc_0.w_0.block1"]
    cat = [op for op in g.ops if op.type == "concat"]
    assert sorted(op.output("Out")[0] for op in cat) == ["fc_0.w_0", "fc_0.w_0_moment1_0", "fc_0.w_0_moment2_0"]
    b1 = next(op for op in recvs if op.output("Out") == ["fc_0.w_0_beta1_pow_acc_0"])
    assert b1.attr("varnames") == ["fc_0.w_0_beta1_pow_acc_0.block0"] and b1.attr("epmap") == [EP0]
    for n in names:  # original names, full shapes, persistable: what the single-process program loads
        assert g.var(n).persistable and list(g.var(n).shape) == ps["meta"][n][0]


def test_executor_close_tells_the_pservers(monkeypatch):
    import pe._core as core
    calls = []
    monkeypatch.setattr(core, "ps_close", lambda: calls.append(1), raising=False)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.close()
    exe.close()
    assert calls == [1]
    with pytest.raises(pe.InvalidArgumentError, match="closed"):
        exe.run(fluid.Program())


# ---- the rewriting, run: 2 trainers and 2 pservers played in one process ----------------------

def _server_block_program(ps_prog, idx, received):
    """Block idx of a pserver program as a runnable program over the pserver's
    scope (the received gradients declared persistable: this test plays the
    server loop and writes them into the scope)."""
    p = fluid.Program()
    g = p.global_block()
    for v in ps_prog.global_block().vars.values():
        g.create_var(name=v.name, shape=list(v.shape), dtype=v.dtype,
                     persistable=v.persistable or v.name in received)
    for op in ps_prog.block(idx).ops:
        ps_transpiler._copy_op(g, op)
    return p


def test_lamb_refuses_a_sliced_parameter():
    """lamb's trust ratio is a norm of the whole parameter: per-block norms on
    two pservers would compute a different update, so slicing is refused."""
    main, startup, _ = build("lamb")
    with pytest.raises(pe.UnsupportedError, match="lamb.*slice_var_up"):
        transpile(main, startup, min_block_size=1024)
    main, startup, _ = build("lamb")
    transpile(main, startup, slice_var_up=False)  # whole parameters: fine


@pytest.mark.parametrize("opt,lr_sched", [("sgd", "piecewise"), ("momentum", False), ("adam", "exponential"),
                                          ("adagrad", False), ("rmsprop", False), ("adamax", "exponential"),
                                          ("adamw", False),
                                          ("lamb", False)])
def test_sync_steps_match_one_process_on_the_whole_batch(opt, lr_sched):
    """What the C side does (sum the trainers' gradient blocks in trainer
    order, scale by 1/trainers, run the LR block then each optimize block;
    the trainers recv + concat) played with numpy and the Executor on the
    programs the transpiler wrote: after 3 steps every param and optimizer
    state var equals a single-process run on both trainers' batches."""
    exe = fluid.Executor(fluid.CPUPlace())
    ref_main, ref_startup, _ = build(opt, decay=1e-3, lr_sched=lr_sched)
    ref_startup.random_seed = 7
    ref = fluid.Scope()
    exe.run(ref_startup, scope=ref)
    main, startup, _ = build(opt, decay=1e-3, lr_sched=lr_sched)
    startup.random_seed = 7
    # lamb: whole parameters (its trust ratio cannot be sliced), spread over the 2 pservers
    t = transpile(main, startup, min_block_size=1024, slice_var_up=opt != "lamb")
    tp = t.get_trainer_program()
    info = tp._pe_ps
    servers = {}
    for ep in (EP0, EP1):
        prog, st = t.get_pserver_programs(ep)
        scope = fluid.Scope()
        exe.run(st, scope=scope)
        servers[ep] = (prog, scope)
    # the trainer's compute part: everything but the RPC ops and the concat of received blocks
    compute = tp.clone()
    cut = next(i for i, op in enumerate(compute.global_block().ops) if op.type in ("split", "send"))
    compute.global_block().ops = [op for i, op in enumerate(compute.global_block().ops)
                                  if i < cut or op.type == "split"]
    sends = [op for op in tp.global_block().ops if op.type == "send"]
    sent = [(x, ep, name) for op in sends for x, ep, name in zip(op.input("X"), op.attr("epmap"),
                                                                  op.attr("send_varnames"))]
    assert "@LR_DECAY_COUNTER@" not in [v.name for v in compute.global_block().vars.values()]

    def full(name):
        kind, entries = info["vars"][name]
        parts = [arr(servers[ep][1], b) for ep, b, _, _ in entries]
        return np.concatenate(parts, axis=0) if kind == "rows" else parts[0]

    trainers = [fluid.Scope(), fluid.Scope()]
    rng = np.random.RandomState(1)
    for step in range(3):
        feeds = [{"x": rng.randn(8, 13).astype("float32"), "y": rng.randn(8, 1).astype("float32")} for _ in trainers]
        grads = []
        for ts, feed in zip(trainers, feeds):
            for p in tp.global_block().all_parameters():
                ts.var(p.name).get_tensor().set(full(p.name))  # recv + concat
            outs = exe.run(compute, feed=feed, fetch_list=[x for x, _, _ in sent], scope=ts)
            grads.append([np.array(o) for o in outs])
        for ep, (prog, scope) in servers.items():
            l = las(prog)
            mine = [(k, name) for k, (x, e, name) in enumerate(sent) if e == ep]
            for k, name in mine:
                summed = grads[0][k].copy()
                for g in grads[1:]:
                    summed += g[k]
                scope.var(name).get_tensor().set(summed * np.float32(1.0 / len(trainers)))
            received = {name for _, name in mine}
            assert received == {a.split(":")[0] for a in l.attr("grad_to_block_id")}
            if l.attr("lr_decay_block_id") >= 0:
                exe.run(_server_block_program(prog, l.attr("lr_decay_block_id"), received), scope=scope)
            for idx in l.attr("optimize_blocks"):
                exe.run(_server_block_program(prog, idx, received), scope=scope)
        exe.run(ref_main, feed={k: np.concatenate([f[k] for f in feeds]) for k in ("x", "y")}, scope=ref)
    checked = 0
    for name, (kind, _) in info["vars"].items():
        if kind == "local":
            continue
        np.testing.assert_allclose(full(name), arr(ref, name), rtol=2e-5, atol=1e-6, err_msg=name)
        checked += 1
    assert checked == len([v for v in ref_main.global_block().vars.values() if v.persistable])
