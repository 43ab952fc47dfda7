#!/usr/bin/python3
"""benchmarks/bench_eager.py — PE eager mode vs PyTorch eager on the CPU (issue 15).

What, each part side by side in one run (PE and torch alternate in rounds;
medians of the timed steps; every process at one thread:
OMP_NUM_THREADS=1 and torch.set_num_threads(1)):

  (a) step     one eager training step — loss = CrossEntropyLoss(model(x),
               y); loss.backward(); opt.step(); opt.clear_grad();
               float(loss) — of the MLP 784-512-256-10 (relu), batch 128
               (seeded random [128, 784] images in [0, 1), labels 0..9),
               Adam lr 1e-3, the same initial weights in both: samples/s
               and process CPU µs per sample (time.process_time).
  (b) per-op   the Python overhead of one tiny op, µs per op over a loop:
               add of two [1] tensors and matmul of two [1, 1] tensors,
               forward only (no tensor needs a gradient) and forward +
               backward (one input needs a gradient; y.backward() each
               time). PE also: the C call alone (_core.eager_run of the
               same op, what remains without the Python wrapper).
  (c) static   pe.jit.to_static of the MLP (batch 128, SGD lr 0.05: the
               traced forward and backward programs on a one-place
               ParallelExecutor with to_static's default passes, the eager
               loss and optimizer step) vs the same MLP written as a static
               program (fluid.layers.fc, softmax_with_cross_entropy, mean,
               SGD.minimize: forward, backward and update in one program)
               run by a one-place ParallelExecutor with the same passes
               and by the Executor. Target (issue 15): to_static within 10%.
               Also "to_static, loss inside": to_static of a Layer that
               returns the loss (the MLP and CrossEntropyLoss in one traced
               program; labels fed as [N, 1]): what the eager loss costs.
  (e) CNN      one eager training step of the main job's CNN (batch 128,
               SGD): PE's layers in NCHW and in NHWC (data_format), torch's
               in NCHW and channels_last (not in the default --parts).
  (d) DP       2 processes, batch 128 per rank, the MLP with Adam:
               pe.DataParallel under pe.distributed.spawn (MPI between the
               ranks) vs torch DistributedDataParallel over gloo (2
               processes on 127.0.0.1); global samples/s from rank 0's
               median step time.

torch is Debian's python3-torch (1.13) under /usr/bin/python3, the
interpreter running this file. (a) and (b) also run PyTorch 2.x ("torch2")
from the peers venv (benchmarks/peers/setup.sh; --torch2-python, default
$PE_PEERS_VENV/bin/python or benchmarks/peers/.venv/bin/python): a worker
process of that python (this file with --torch2-worker, which imports
neither pe nor Debian's torch) kept for the whole run, at one thread,
told over a pipe to time its steps / loops in turn with PE's and torch
1.13's (the same alternation; it times itself, with the same clocks, and
sleeps on the pipe while the others run). Without that python, or when it
cannot import torch, torch2 is reported "absent (reason)".

    OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 benchmarks/bench_eager.py [--parts abcd] [--rounds 3]
"""
import argparse
import copy
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["CPU_NUM"] = "1"

SIZES = (784, 512, 256, 10)
BATCH = 128
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the PyTorch 2.x worker: runs under the peers venv's python, imports neither pe nor Debian's torch ----------

def torch_mlp(torch, init=None):
    m = torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(), torch.nn.Linear(SIZES[1], SIZES[2]),
                            torch.nn.ReLU(), torch.nn.Linear(SIZES[2], SIZES[3]))
    if init is not None:  # PE's Linear weight is [in, out], torch's [out, in]
        with torch.no_grad():
            for lin, (w, b) in zip([m[0], m[2], m[4]], init):
                lin.weight.copy_(torch.from_numpy(w.T.copy()))
                lin.bias.copy_(torch.from_numpy(b))
    return m


def data(n, batch=None, seed=0):
    batch = batch or BATCH
    rs = np.random.RandomState(seed)
    return [(rs.rand(batch, SIZES[0]).astype("float32"), rs.randint(0, 10, [batch]).astype("int64"))
            for _ in range(n)]


def torch_cases(torch, n):
    """(b)'s torch loops: {case: run()} (the same ops as part_b's "torch" column)."""
    one, sq = np.ones([1], "float32"), np.ones([1, 1], "float32")
    ta, tb = torch.from_numpy(one.copy()), torch.from_numpy(one.copy())
    tm, tn = torch.from_numpy(sq.copy()), torch.from_numpy(sq.copy())
    tga, tgm = torch.from_numpy(one.copy()).requires_grad_(), torch.from_numpy(sq.copy()).requires_grad_()

    def loop(f):
        def run():
            for _ in range(n):
                f()
        return run
    return {"add fwd": loop(lambda: ta + tb), "matmul fwd": loop(lambda: torch.matmul(tm, tn)),
            "add fwd+bwd": loop(lambda: (tga + tb).backward()),
            "matmul fwd+bwd": loop(lambda: torch.matmul(tgm, tn).backward())}


def torch2_worker():
    """Serves the driver over stdin/stdout, one JSON object a line: {"op": "init", "init": npz, "batch": n,
    "op_loop": n} builds (a)'s model (PE's initial weights), optimizer and batches and (b)'s loops; {"op": "time",
    "what": "step" or a (b) case, "n": k} runs it k times, timing each with perf_counter and process_time, and
    answers {"wall": [...], "cpu": [...], "loss": last loss}."""
    global BATCH
    import torch
    torch.set_num_threads(1)
    st = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "init":
            BATCH = req["batch"]
            with np.load(req["init"]) as f:
                init = [(f["w%d" % i], f["b%d" % i]) for i in range(3)]
            tm = torch_mlp(torch, init)
            opt = torch.optim.Adam(tm.parameters(), lr=1e-3)
            tb = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data(8)]
            lossf = torch.nn.CrossEntropyLoss()
            st = {"i": 0, "loss": None}

            def step():
                x, y = tb[st["i"] % 8]
                st["i"] += 1
                loss = lossf(tm(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                st["loss"] = loss.item()
            runs = dict(torch_cases(torch, req["op_loop"]), step=step)
            out = {"version": torch.__version__, "threads": torch.get_num_threads()}
        else:
            f = runs[req["what"]]
            wall, cpu = [], []
            for _ in range(req["n"]):
                t0, c0 = time.perf_counter(), time.process_time()
                f()
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            out = {"wall": wall, "cpu": cpu, "loss": st.get("loss")}
        print(json.dumps(out), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["--torch2-worker"]:
    torch2_worker()
    sys.exit(0)

import pe  # noqa: E402
import pe.fluid as fluid  # noqa: E402
import pe.nn as nn  # noqa: E402


class Torch2:
    """The torch2 worker process, seen from the driver: remote(what) is a step function for timed_rounds that the
    worker times itself."""

    def __init__(self, python):
        self.python, self.absent, self.proc = python, None, None
        if not os.path.exists(python):
            self.absent = "no %s (run benchmarks/peers/setup.sh)" % python
            return
        r = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=self._env())
        if r.returncode != 0:
            last = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
            self.absent = "%s: %s" % (python, last[-1] if last else "exit %d" % r.returncode)

    @staticmethod
    def _env():
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.pop("PYTHONPATH", None)  # build/python's pe is for Debian's python
        return env

    def start(self, init, op_loop):
        """init: [(w, b)] of the three Linear layers (PE's layout)."""
        if self.absent:
            return None
        if self.proc is None:
            self.proc = subprocess.Popen([self.python, os.path.abspath(__file__), "--torch2-worker"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self._env())
            self.tmp = tempfile.NamedTemporaryFile(prefix="pe-eager-init-", suffix=".npz", delete=False).name
        np.savez(self.tmp, **{k: v for i, (w, b) in enumerate(init) for k, v in (("w%d" % i, w), ("b%d" % i, b))})
        return self._ask({"op": "init", "init": self.tmp, "batch": BATCH, "op_loop": op_loop})

    def _ask(self, req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("bench_eager: the torch2 worker (%s) died (exit %s)" % (self.python, self.proc.wait()))
        return json.loads(line)

    def remote(self, what):
        def times(n):
            r = self._ask({"op": "time", "what": what, "n": n})
            self.loss = r["loss"]
            return r["wall"], r["cpu"]
        times.remote = True
        return times

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            os.unlink(self.tmp)
            self.proc = None


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(SIZES[0], SIZES[1])
        self.fc2 = nn.Linear(SIZES[1], SIZES[2])
        self.fc3 = nn.Linear(SIZES[2], SIZES[3])

    def forward(self, x):
        r = nn.functional.relu
        return self.fc3(r(self.fc2(r(self.fc1(x)))))


class _WithLoss(nn.Layer):
    """The MLP and its loss in one forward: to_static traces both into one program."""

    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, y):
        return self.loss(self.mlp(x), y)


def pe_init(model):
    return [(model.fc1.weight.numpy(), model.fc1.bias.numpy()), (model.fc2.weight.numpy(), model.fc2.bias.numpy()),
            (model.fc3.weight.numpy(), model.fc3.bias.numpy())]


def timed_rounds(runs, rounds, steps, warmup=3):
    """runs: {name: step()} alternated; -> {name: (median s, median CPU s)} per step. A step function with
    .remote (Torch2.remote) is timed by its worker: f(n) -> (wall s, CPU s) of n steps."""
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for f in runs.values():
        if getattr(f, "remote", False):
            f(warmup)
            continue
        for _ in range(warmup):
            f()
    for _ in range(rounds):
        for k, f in runs.items():
            if getattr(f, "remote", False):
                w, c = f(steps)
                wall[k] += w
                cpu[k] += c
                continue
            for _ in range(steps):
                t0, c0 = time.perf_counter(), time.process_time()
                f()
                wall[k].append(time.perf_counter() - t0)
                cpu[k].append(time.process_time() - c0)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in runs}


# ---- (a) one eager training step ------------------------------------------------------------

def part_a(torch, a):
    pe.disable_static()
    pe.seed(0)
    model = MLP()
    tm = torch_mlp(torch, pe_init(model))
    popt = pe.optimizer.Adam(learning_rate=1e-3, parameters=model.parameters())
    topt = torch.optim.Adam(tm.parameters(), lr=1e-3)
    batches = data(8)
    pb = [(pe.to_tensor(x), pe.to_tensor(y)) for x, y in batches]
    tb = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches]
    pe_loss, t_loss = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    st = {"pe": [0, None], "torch": [0, None]}

    def pe_step():
        x, y = pb[st["pe"][0] % 8]
        st["pe"][0] += 1
        loss = pe_loss(model(x), y)
        loss.backward()
        popt.step()
        popt.clear_grad()
        st["pe"][1] = float(loss)

    def torch_step():
        x, y = tb[st["torch"][0] % 8]
        st["torch"][0] += 1
        loss = t_loss(tm(x), y)
        loss.backward()
        topt.step()
        topt.zero_grad()
        st["torch"][1] = float(loss)

    runs = {"PE eager": pe_step, "torch eager": torch_step}
    t2 = a.torch2.start(pe_init(model), a.op_loop)
    if t2:
        runs["torch2 eager"] = a.torch2.remote("step")
    r = timed_rounds(runs, a.rounds, a.steps)
    print("(a) eager training step: MLP 784-512-256-10, batch %d, Adam lr 1e-3; %d rounds x %d steps, medians"
          % (BATCH, a.rounds, a.steps))
    print("%-12s %10s %12s %14s %12s" % ("", "ms/step", "samples/s", "CPU us/sample", "last loss"))
    for k, (w, c) in r.items():
        loss = a.torch2.loss if k == "torch2 eager" else st["pe" if k.startswith("PE") else "torch"][1]
        print("%-12s %10.3f %12.0f %14.2f %12.6f" % (k, w * 1e3, BATCH / w, c * 1e6 / BATCH, loss))
    if not t2:
        print("%-12s absent (%s)" % ("torch2 eager", a.torch2.absent))
    (pw, pc), (tw, tc) = r["PE eager"], r["torch eager"]
    print("PE / torch samples/s = %.2f; CPU per sample PE / torch = %.2f" % (tw / pw, pc / tc))
    if t2:
        t2w, t2c = r["torch2 eager"]
        print("PE / torch2 (%s) samples/s = %.2f; CPU per sample PE / torch2 = %.2f" % (t2["version"], t2w / pw,
                                                                                      pc / t2c))
    pe.enable_static()
    return r


# ---- (e) an eager CNN step in NCHW and NHWC ------------------------------------------------

def part_e(torch, a):
    """The CNN of the main job (conv 1->8 5x5 pad 2, relu, max pool 2, conv 8->16 5x5 pad 2, relu, max pool 2,
    fc 784->64, relu, fc 64->10), batch 128, SGD lr 0.05, eager: PE's layers with data_format NCHW and NHWC
    (oneDNN's layout: no reorder per call) against torch's in NCHW and channels_last."""
    pe.disable_static()
    pe.seed(0)

    def pe_cnn(fmt):
        return nn.Sequential(nn.Conv2D(1, 8, 5, padding=2, data_format=fmt), nn.ReLU(), nn.MaxPool2D(2, data_format=fmt),
                             nn.Conv2D(8, 16, 5, padding=2, data_format=fmt), nn.ReLU(),
                             nn.MaxPool2D(2, data_format=fmt), nn.Flatten(), nn.Linear(784, 64), nn.ReLU(),
                             nn.Linear(64, 10))

    models = {"NCHW": pe_cnn("NCHW"), "NHWC": pe_cnn("NHWC")}
    models["NHWC"].set_state_dict(models["NCHW"].state_dict())  # the flatten order differs: the same work, not the same numbers
    rs = np.random.RandomState(0)
    xs = [rs.rand(BATCH, 1, 28, 28).astype("float32") for _ in range(4)]
    ys = [rs.randint(0, 10, BATCH).astype("int64") for _ in range(4)]
    loss_fn = nn.CrossEntropyLoss()
    runs, last = {}, {}
    for fmt, m in models.items():
        opt = pe.optimizer.SGD(learning_rate=0.05, parameters=m.parameters())
        feed = [(pe.to_tensor(x if fmt == "NCHW" else x.transpose(0, 2, 3, 1).copy()), pe.to_tensor(y))
                for x, y in zip(xs, ys)]
        it = [0]

        def step(m=m, opt=opt, feed=feed, it=it, fmt=fmt):
            x, y = feed[it[0] % 4]
            it[0] += 1
            loss = loss_fn(m(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            last["PE " + fmt] = float(loss)
        runs["PE " + fmt] = step
    tnet = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(8, 16, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    for mf, name in ((torch.contiguous_format, "torch NCHW"), (torch.channels_last, "torch channels_last")):
        net = copy.deepcopy(tnet).to(memory_format=mf)
        topt = torch.optim.SGD(net.parameters(), lr=0.05)
        tfeed = [(torch.from_numpy(x).contiguous(memory_format=mf), torch.from_numpy(y)) for x, y in zip(xs, ys)]
        it = [0]

        def tstep(net=net, topt=topt, tfeed=tfeed, it=it, name=name):
            x, y = tfeed[it[0] % 4]
            it[0] += 1
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            topt.step()
            topt.zero_grad()
            last[name] = float(loss)
        runs[name] = tstep
    r = timed_rounds(runs, a.rounds, a.steps)
    print("(e) eager CNN step (conv 5x5 x2, max pools, fc x2), batch %d, SGD lr 0.05; %d rounds x %d steps, medians"
          % (BATCH, a.rounds, a.steps))
    print("%-20s %10s %12s %14s %12s" % ("", "ms/step", "samples/s", "CPU us/sample", "last loss"))
    for k, (w, c) in r.items():
        print("%-20s %10.3f %12.0f %14.2f %12.6f" % (k, w * 1e3, BATCH / w, c * 1e6 / BATCH, last[k]))
    best_t = min(r["torch NCHW"][0], r["torch channels_last"][0])
    print("PE NHWC / PE NCHW step time = %.2f; best torch / PE NHWC samples/s = %.2f"
          % (r["PE NHWC"][0] / r["PE NCHW"][0], best_t / r["PE NHWC"][0]))
    pe.enable_static()
    return r


# ---- (b) per-op overhead --------------------------------------------------------------------

def part_b(torch, a):
    from pe import _core
    from pe.eager import autograd as ag
    pe.disable_static()
    n = a.op_loop
    one = np.ones([1], "float32")
    sq = np.ones([1, 1], "float32")
    cases = {}
    # forward only
    pa, pb_ = pe.to_tensor(one), pe.to_tensor(one)
    pm, pn = pe.to_tensor(sq), pe.to_tensor(sq)
    ta, tb = torch.from_numpy(one.copy()), torch.from_numpy(one.copy())
    tm, tn = torch.from_numpy(sq.copy()), torch.from_numpy(sq.copy())
    idx = ag._index("elementwise_add")
    raw_ins = [("X", [pa._t], [pa.name]), ("Y", [pb_._t], [pb_.name])]
    raw_outs = [("Out", 1)]
    place = ag._place()

    def loop(f):
        def run():
            for _ in range(n):
                f()
        return run

    cases["add fwd"] = {"PE": loop(lambda: pa + pb_), "torch": loop(lambda: ta + tb),
                        "PE C call": loop(lambda: _core.eager_run(idx, raw_ins, raw_outs, {"axis": -1}, place, 0, 0))}
    cases["matmul fwd"] = {"PE": loop(lambda: pe.matmul(pm, pn)), "torch": loop(lambda: torch.matmul(tm, tn))}
    # forward + backward: one input needs a gradient
    ga, gm = pe.to_tensor(one, stop_gradient=False), pe.to_tensor(sq, stop_gradient=False)
    tga, tgm = torch.from_numpy(one.copy()).requires_grad_(), torch.from_numpy(sq.copy()).requires_grad_()

    def pe_add_bwd():
        (ga + pb_).backward()

    def pe_mm_bwd():
        pe.matmul(gm, pn).backward()

    def t_add_bwd():
        (tga + tb).backward()

    def t_mm_bwd():
        torch.matmul(tgm, tn).backward()

    cases["add fwd+bwd"] = {"PE": loop(pe_add_bwd), "torch": loop(t_add_bwd)}
    cases["matmul fwd+bwd"] = {"PE": loop(pe_mm_bwd), "torch": loop(t_mm_bwd)}
    t2 = a.torch2.start(pe_init(MLP()), n)
    if t2:
        for name in cases:
            cases[name]["torch2"] = a.torch2.remote(name)
    print("\n(b) per-op overhead: CPU us per op (per iteration: op, or op + backward()), loops of %d; %d rounds, "
          "medians; torch = %s, torch2 = %s"
          % (n, a.rounds, torch.__version__, t2["version"] if t2 else "absent (%s)" % a.torch2.absent))
    print("%-16s %10s %10s %10s %10s %10s %12s" % ("op", "PE", "torch", "torch2", "PE/torch", "PE/torch2",
                                                   "PE C call"))
    res = {}
    for name, fs in cases.items():
        r = timed_rounds(fs, a.rounds, 3, warmup=1)
        us = {k: c * 1e6 / n for k, (w, c) in r.items()}   # process CPU time: steadier than wall on a shared box
        res[name] = us
        print("%-16s %10.2f %10.2f %10s %10.2f %10s %12s" % (
            name, us["PE"], us["torch"], "%.2f" % us["torch2"] if t2 else "-", us["PE"] / us["torch"],
            "%.2f" % (us["PE"] / us["torch2"]) if t2 else "-",
            "%.2f" % us["PE C call"] if "PE C call" in us else "-"))
    pe.enable_static()
    return res


# ---- (c) to_static vs the static program ------------------------------------------------------

def part_c(torch, a):
    pe.disable_static()
    pe.seed(0)
    model = MLP()
    init = {p.name: p.numpy() for p in model.parameters()}
    inner = MLP()
    inner.set_state_dict(model.state_dict())
    jm = pe.jit.to_static(model)
    jopt = pe.optimizer.SGD(learning_rate=0.05, parameters=jm.parameters())
    loss_fn = nn.CrossEntropyLoss()
    jl = pe.jit.to_static(_WithLoss(inner))
    lopt = pe.optimizer.SGD(learning_rate=0.05, parameters=jl.parameters())
    batches = data(8)
    pb = [(pe.to_tensor(x), pe.to_tensor(y)) for x, y in batches]
    pb1 = [(x, pe.to_tensor(y.reshape(-1, 1))) for (x, _), (_, y) in zip(pb, batches)]
    sb = [{"x": x, "y": y.reshape(-1, 1)} for x, y in batches]
    st = {"to_static": [0, None], "loss inside": [0, None], "PE": [0, None], "Executor": [0, None]}

    def jit_step():
        x, y = pb[st["to_static"][0] % 8]
        st["to_static"][0] += 1
        loss = loss_fn(jm(x), y)
        loss.backward()
        jopt.step()
        jopt.clear_grad()
        st["to_static"][1] = float(loss)

    def jit_loss_step():
        x, y = pb1[st["loss inside"][0] % 8]
        st["loss inside"][0] += 1
        loss = jl(x, y)
        loss.backward()
        lopt.step()
        lopt.clear_grad()
        st["loss inside"][1] = float(loss)

    pe.enable_static()
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup):
        x = pe.static.data("x", [-1, SIZES[0]], "float32")
        y = pe.static.data("y", [-1, 1], "int64")
        h = x
        for i, (layer, act) in enumerate(((model.fc1, "relu"), (model.fc2, "relu"), (model.fc3, None))):
            h = fluid.layers.fc(h, layer.weight.shape[1], param_attr=pe.ParamAttr(name=layer.weight.name),
                                bias_attr=pe.ParamAttr(name=layer.bias.name), act=act)
        loss = pe.mean(fluid.layers.softmax_with_cross_entropy(h, y))
        pe.optimizer.SGD(learning_rate=0.05).minimize(loss)
    scopes = {}
    for k in ("PE", "Executor"):
        scopes[k] = pe.static.Scope()
        pe.static.Executor(pe.CPUPlace()).run(startup, scope=scopes[k])
        for n, v in init.items():
            scopes[k].find_var(n).get_tensor().set(v, pe.CPUPlace())
    bs = pe.jit._default_build_strategy()
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, build_strategy=bs,
                                      scope=scopes["PE"])
    exe = pe.static.Executor(pe.CPUPlace())

    def pexe_step():
        k = st["PE"][0]
        st["PE"][0] += 1
        st["PE"][1] = float(np.asarray(pexe.run([loss.name], feed=sb[k % 8])[0]).reshape(-1)[0])

    def exe_step():
        k = st["Executor"][0]
        st["Executor"][0] += 1
        got = exe.run(main, feed=sb[k % 8], fetch_list=[loss], scope=scopes["Executor"])[0]
        st["Executor"][1] = float(np.asarray(got).reshape(-1)[0])   # numpy 2 refuses float() of a [1] array

    pe.disable_static()
    r = timed_rounds({"to_static": jit_step, "loss inside": jit_loss_step, "PE": pexe_step, "Executor": exe_step},
                     a.rounds, a.steps)
    pe.enable_static()
    print("\n(c) to_static vs the static program: MLP 784-512-256-10, batch %d, SGD lr 0.05; %d rounds x %d steps"
          % (BATCH, a.rounds, a.steps))
    print("%-34s %10s %12s %12s" % ("", "ms/step", "CPU ms/step", "last loss"))
    label = {"to_static": "pe.jit.to_static (eager loop)", "loss inside": "to_static, loss inside",
             "PE": "static, ParallelExecutor (1 place)",
             "Executor": "static, Executor"}
    for k, (w, c) in r.items():
        print("%-34s %10.3f %12.3f %12.6f" % (label[k], w * 1e3, c * 1e3, st[k][1]))
    print("to_static / ParallelExecutor = %.3f (CPU %.3f); to_static / Executor = %.3f (CPU %.3f)   target <= 1.10" % (
        r["to_static"][0] / r["PE"][0], r["to_static"][1] / r["PE"][1],
        r["to_static"][0] / r["Executor"][0], r["to_static"][1] / r["Executor"][1]))
    print("to_static, loss inside / ParallelExecutor = %.3f (CPU %.3f)" % (
        r["loss inside"][0] / r["PE"][0], r["loss inside"][1] / r["PE"][1]))
    if a.breakdown:
        pe.disable_static()
        _breakdown(jm, jopt, loss_fn, pb, a.rounds * a.steps)
        pe.enable_static()
    return r


def _breakdown(jm, opt, loss_fn, pb, n):
    """Where a to_static step's CPU time goes: the forward call, the eager
    loss, backward(), the optimizer step, and of the forward and backward the
    part spent inside the program runs (ParallelExecutor.run)."""
    runs = {"fwd": 0.0, "bwd": 0.0}
    orig = pe.jit._Runner.run

    def run(self, feed, fetch, take=False):
        c = time.process_time()
        out = orig(self, feed, fetch, take)
        runs["bwd" if any(k.endswith("@GRAD@IN") for k in feed) else "fwd"] += time.process_time() - c
        return out

    pe.jit._Runner.run = run
    parts = np.zeros(5)
    try:
        for k in range(n):
            x, y = pb[k % 8]
            t = [time.process_time()]
            out = jm(x)
            t.append(time.process_time())
            loss = loss_fn(out, y)
            t.append(time.process_time())
            loss.backward()
            t.append(time.process_time())
            opt.step()
            t.append(time.process_time())
            opt.clear_grad()
            float(loss)
            t.append(time.process_time())
            parts += np.diff(t)
    finally:
        pe.jit._Runner.run = orig
    parts *= 1e3 / n
    print("to_static step, CPU ms (mean of %d): forward call %.3f (program run %.3f), loss %.3f, backward %.3f "
          "(program run %.3f), optimizer step %.3f, rest %.3f; total %.3f" % (
              n, parts[0], runs["fwd"] * 1e3 / n, parts[1], parts[2], runs["bwd"] * 1e3 / n, parts[3], parts[4],
              parts.sum()))


# ---- (d) DataParallel vs torch DDP ----------------------------------------------------------

def pe_dp_worker(out, warmup, steps, batch):
    global BATCH
    BATCH = batch
    import pe.distributed as dist
    pe.disable_static()
    dist.init_parallel_env()
    rank = dist.get_rank()
    pe.seed(0)
    model = pe.DataParallel(MLP())
    opt = pe.optimizer.Adam(learning_rate=1e-3, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    batches = [(pe.to_tensor(x), pe.to_tensor(y)) for x, y in data(8, seed=1 + rank)]
    times, loss = [], None
    for k in range(warmup + steps):
        t0 = time.perf_counter()
        x, y = batches[k % 8]
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        lv = float(loss)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"step": statistics.median(times[warmup:]), "loss": lv}, f)


def torch_ddp_worker(rank, out, warmup, steps):
    import torch
    import torch.distributed as tdist
    torch.set_num_threads(1)
    tdist.init_process_group("gloo", rank=rank, world_size=2)
    pe.disable_static()
    pe.seed(0)  # PE's initial weights (pe_dp_worker's rank 0), so both runs take the same steps
    model = torch.nn.parallel.DistributedDataParallel(torch_mlp(torch, pe_init(MLP())))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data(8, seed=1 + rank)]
    times, lv = [], None
    for k in range(warmup + steps):
        t0 = time.perf_counter()
        x, y = batches[k % 8]
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        lv = float(loss)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"step": statistics.median(times[warmup:]), "loss": lv}, f)
    tdist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def part_d(torch, a):
    import pe.distributed as dist
    res = {"PE DataParallel": [], "torch DDP (gloo)": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            out = os.path.join(tmp, "pe%d.json" % rnd)
            dist.spawn(pe_dp_worker, args=(out, 3, a.dp_steps, BATCH), nprocs=2)
            with open(out) as f:
                res["PE DataParallel"].append(json.load(f))
            out = os.path.join(tmp, "torch%d.json" % rnd)
            port = _free_port()
            procs = []
            for r in range(2):
                env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                           OMP_NUM_THREADS="1")
                procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--ddp-worker", str(r),
                                               out, str(a.dp_steps), str(BATCH)], env=env))
            for p in procs:
                if p.wait(timeout=600):
                    raise RuntimeError("torch DDP worker failed (exit %d)" % p.returncode)
            with open(out) as f:
                res["torch DDP (gloo)"].append(json.load(f))
    print("\n(d) data parallel, 2 processes x 1 thread, batch %d per rank, MLP, Adam; %d rounds x %d steps "
          "(rank 0's median step)" % (BATCH, a.rounds, a.dp_steps))
    print("%-18s %12s %12s %s" % ("", "ms/step", "samples/s", "rank 0 last loss"))
    med = {}
    for k, rs in res.items():
        med[k] = statistics.median(r["step"] for r in rs)
        print("%-18s %12.3f %12.0f %s" % (k, med[k] * 1e3, 2 * BATCH / med[k],
                                         " ".join("%.5f" % r["loss"] for r in rs)))
    print("PE / torch samples/s = %.2f (per round: %s)" % (
        med["torch DDP (gloo)"] / med["PE DataParallel"],
        ", ".join("%.2f" % (t["step"] / p["step"]) for p, t in zip(res["PE DataParallel"], res["torch DDP (gloo)"]))))
    return res


def main():
    global BATCH
    if len(sys.argv) > 1 and sys.argv[1] == "--ddp-worker":
        BATCH = int(sys.argv[5])
        torch_ddp_worker(int(sys.argv[2]), sys.argv[3], 3, int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="abcd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round, (a) and (c)")
    ap.add_argument("--op-loop", type=int, default=2000, help="ops per timed loop, (b)")
    ap.add_argument("--dp-steps", type=int, default=30, help="timed steps per round, (d)")
    ap.add_argument("--breakdown", action="store_true", help="(c): where a to_static step's CPU time goes")
    ap.add_argument("--batch", type=int, default=BATCH, help="batch size of (a) and (c), per rank in (d)")
    ap.add_argument("--torch2-python", default="", help="python with PyTorch 2.x for (a) and (b) (default "
                    "$PE_PEERS_VENV/bin/python or benchmarks/peers/.venv/bin/python)")
    a = ap.parse_args()
    BATCH = a.batch
    a.torch2 = Torch2(a.torch2_python or os.path.join(
        os.environ.get("PE_PEERS_VENV") or os.path.join(ROOT, "benchmarks", "peers", ".venv"), "bin", "python"))
    import torch
    torch.set_num_threads(1)
    print("PE at %s; torch %s (%s), %d thread(s); OMP_NUM_THREADS=%s" % (
        os.path.dirname(pe.__file__), torch.__version__, torch.__file__, torch.get_num_threads(),
        os.environ.get("OMP_NUM_THREADS")))
    try:
        for p in a.parts:
            {"a": part_a, "b": part_b, "c": part_c, "d": part_d, "e": part_e}[p](torch, a)
    finally:
        a.torch2.close()


if __name__ == "__main__":
    main()
