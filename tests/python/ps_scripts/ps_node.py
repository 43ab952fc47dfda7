"""tests/python/ps_scripts/ps_node.py — one process of a parameter-server job
for tests/python/test_pserver.py (a pserver or a trainer, as Paddle 1.x's
DistributeTranspiler runs them), and the single-process reference the test
compares with (build / batch / train_local, imported by the test).

    /usr/bin/python3 ps_node.py CONFIG.json

CONFIG (JSON): role "pserver" | "trainer"; endpoints [ip:port, ...];
endpoint (a pserver's own); trainers; trainer_id; opt "sgd" | "momentum" |
"adam"; decay (L2Decay coefficient); hidden (the hidden layer's width, default
16); lr_sched (an LR schedule: its ops
run on the pservers); slice (slice_var_up); min_block_size; split "RoundRobin" |
"HashName"; sync (sync_mode); steps; batch (the whole batch of a step:
trainer t feeds rows [t*k, (t+1)*k), k = batch / trainers); seed;
step_sleep (seconds after each step); hold_after (after that many steps,
wait until the file hold_until exists, or forever without it); init_out (trainer: .npz with the
params its startup received); progress (a file: one line per step
done); out (trainer: .npz with its losses and the params it received last);
close (exe.close() at the end, default true); save_dir (trainer:
fluid.io.save_persistables of the trainer program at the end); load_dir
(pserver: fluid.io.load_persistables after its startup); stop_on_lost
(pserver: listen_and_serv's stop_on_lost_trainer).
"""
import json
import os
import signal
import sys
import time

import numpy as np

import pe
import pe.fluid as fluid
from pe.utils import unique_name

FEATURES, HIDDEN = 13, 16


def build(opt, seed, decay=0.0, lr_sched=False, hidden=HIDDEN):
    """fc(13 -> hidden, relu) -> fc(hidden -> 1), mean square error, minimized by opt
    (with L2 decay when decay > 0; with fluid.layers' LR schedule when lr_sched:
    piecewise_decay for adam, exponential_decay otherwise)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[FEATURES], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(x, hidden, act="relu")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        reg = pe.regularizer.L2Decay(decay) if decay else None
        lr = {"sgd": 0.05, "momentum": 0.02, "adam": 0.01}.get(opt)
        if lr_sched and opt == "adam":
            lr = fluid.layers.piecewise_decay([1, 3], [0.01, 0.005, 0.002])
        elif lr_sched:
            lr = fluid.layers.exponential_decay(lr, 2, 0.5, staircase=True)
        if opt == "sgd":
            o = fluid.optimizer.SGD(learning_rate=lr, regularization=reg)
        elif opt == "momentum":
            o = fluid.optimizer.Momentum(learning_rate=lr, momentum=0.9, regularization=reg)
        elif opt == "adam":
            o = fluid.optimizer.Adam(learning_rate=lr, regularization=reg)
        else:
            raise ValueError("opt %r" % opt)
        o.minimize(loss)
    return main, startup, loss


def batch(seed, step, size):
    """Step `step`'s whole batch of a fixed regression problem."""
    w = np.random.RandomState(seed).uniform(-1, 1, size=(FEATURES, 1))
    rng = np.random.RandomState(seed * 1000 + step + 1)
    x = rng.uniform(-1, 1, size=(size, FEATURES)).astype("float32")
    y = (x @ w + 0.5 + 0.05 * rng.randn(size, 1)).astype("float32")
    return x, y


def share(seed, step, size, trainers, tid):
    x, y = batch(seed, step, size)
    k = size // trainers
    return {"x": x[tid * k:(tid + 1) * k], "y": y[tid * k:(tid + 1) * k]}


def param_names(main):
    return [p.name for p in main.global_block().all_parameters()]


def persistable_names(main):
    return [v.name for v in main.global_block().vars.values() if v.persistable]


def read(scope, names):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def train_local(opt, seed, steps, size, decay=0.0, lr_sched=False, hidden=HIDDEN):
    """One process on the whole batch: (losses, {persistable: value}, main)."""
    main, startup, loss = build(opt, seed, decay, lr_sched, hidden)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    losses = []
    for step in range(steps):
        x, y = batch(seed, step, size)
        l, = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        losses.append(float(np.array(l).reshape(-1)[0]))
    return losses, read(scope, persistable_names(main)), main


def transpiler(cfg, main, startup):
    config = fluid.DistributeTranspilerConfig()
    config.slice_var_up = cfg.get("slice", True)
    config.min_block_size = cfg.get("min_block_size", 8)
    if cfg.get("split", "RoundRobin") == "HashName":
        config.split_method = fluid.transpiler.HashName
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(cfg.get("trainer_id", 0), program=main, startup_program=startup, pservers=",".join(cfg["endpoints"]),
                trainers=cfg["trainers"], sync_mode=cfg.get("sync", True))
    return t


def pserver(cfg):
    main, startup, _ = build(cfg["opt"], cfg["seed"], cfg.get("decay", 0.0), cfg.get("lr_sched", False),
                             cfg.get("hidden", HIDDEN))
    t = transpiler(cfg, main, startup)
    ep = cfg["endpoint"]
    prog = t.get_pserver_program(ep)
    start = t.get_startup_program(ep, prog)
    if cfg.get("stop_on_lost"):
        las = prog.global_block().ops[0]
        assert las.type == "listen_and_serv", las.type
        las._set_attr("stop_on_lost_trainer", True)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(start)
    if cfg.get("load_dir"):
        fluid.io.load_persistables(exe, cfg["load_dir"], prog)
    print("pserver %s: serving" % ep, flush=True)
    exe.run(prog)
    print("pserver %s: returned" % ep, flush=True)


def hold(path):
    """Waits until the file `path` exists (None: until killed)."""
    print("holding", flush=True)
    while path is None or not os.path.exists(path):
        time.sleep(0.02)


def trainer(cfg):
    main, startup, loss = build(cfg["opt"], cfg["seed"], cfg.get("decay", 0.0), cfg.get("lr_sched", False),
                                cfg.get("hidden", HIDDEN))
    t = transpiler(cfg, main, startup)
    prog = t.get_trainer_program()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    if cfg.get("init_out"):
        np.savez(cfg["init_out"], **read(fluid.global_scope(), param_names(main)))
    tid, n = cfg["trainer_id"], cfg["trainers"]
    losses = []
    progress = open(cfg["progress"], "a") if cfg.get("progress") else None
    for step in range(cfg["steps"]):
        l, = exe.run(prog, feed=share(cfg["seed"], step, cfg["batch"], n, tid), fetch_list=[loss])
        losses.append(float(np.array(l).reshape(-1)[0]))
        if progress:
            progress.write("step %d\n" % step)
            progress.flush()
        if cfg.get("step_sleep"):
            time.sleep(cfg["step_sleep"])
        if cfg.get("hold_after") == step + 1:
            hold(cfg.get("hold_until"))
    params = read(fluid.global_scope(), param_names(main))
    if cfg.get("save_dir"):
        fluid.io.save_persistables(exe, cfg["save_dir"], prog)
    if cfg.get("close", True):
        exe.close()
    if cfg.get("out"):
        np.savez(cfg["out"], losses=np.array(losses, dtype="float64"), **params)
    print("trainer %d: done after %d steps" % (tid, len(losses)), flush=True)


if __name__ == "__main__":
    # Ctrl-C raises KeyboardInterrupt even when this was started with SIGINT ignored (a background job)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with open(sys.argv[1]) as f:
        c = json.load(f)
    {"pserver": pserver, "trainer": trainer}[c["role"]](c)
