#!/usr/bin/env python3
"""benchmarks/compare_peers.py — PE vs PyTorch 1.13, PyTorch 2.x (eager and torch.compile) and PaddlePaddle 3.x.

What: trains the MLP (784-512-256-10, relu) and the LeNet-style CNN of
examples/train_fashion_mnist.py with the same batch (128), the same
optimizer (momentum 0.9, lr 0.05), the same initial weights and the same
batches in
  - PE: ParallelExecutor (Debian's python3) on every place count of
    --pe-places (default cores and 1: CPU_NUM = cores places of one kernel
    thread each, and one place whose kernels take every core; the best
    count, as for the peers' threads);
  - torch1: Debian's PyTorch 1.13 (the python running this script), eager;
  - torch2: PyTorch 2.x from the peers venv (benchmarks/peers/setup.sh), eager;
  - torch2c: the same PyTorch 2.x with the model under torch.compile (the
    default inductor backend; the optimizer step stays eager);
  - paddle3: PaddlePaddle 3.x from the peers venv, static graph
    (paddle.enable_static, the same layers as Paddle ops, Momentum.minimize,
    paddle.static.Executor: its new executor on PIR);
each peer at every thread count of --threads (default 1..cores; the best
counts), and prints per model a table of training samples/s, PE's speedup
over each peer (median over the rounds of PE's step time / the peer's in
the same round, i.e. peer step time / PE step time), CPU µs per sample
(process CPU time over the timed steps / samples), the fraction of the
model's roofline (below) each reaches, and the mean loss over the timed
steps (the check that all did the same work). Last line:
`speedup_vs_best_peer mlp=<x> cnn=<y>`.

Roofline: FLOPs per sample counted from the layer shapes (each GEMM or
convolution 2*M*N*K; backward = the weight gradient plus the input
gradient, no input gradient for the first layer: ~2x forward), bytes per
step (parameters read by forward and by the input-gradient GEMMs,
gradients written, momentum's update reading parameter, gradient and
velocity and writing parameter and velocity; each activation written and
read in forward, read again in backward, its gradient written and read:
the compulsory traffic with bias and relu fused into the GEMM), and the
machine's sgemm GFLOP/s (numpy's BLAS, a 2048^3 sgemm on all cores and on
one thread, best of 5) and copy bandwidth (numpy copy of 256 MB, read +
write, best of 5), measured by workers of their own before every round and
after the last, the best of them taken (a shared machine only ever lowers a
measured ceiling); the roofline is batch / max(FLOPs / GFLOP/s, bytes /
bandwidth) samples/s.

How: each measurement runs in its own worker process (this script with
--worker, under Debian's python3 for PE and torch1 and the venv's python
for torch2/torch2c/paddle3): each framework brings its own OpenMP runtime,
whose idle threads would steal cores from another in a shared process. The
PE worker of a model runs first each round and writes the initial weights
(PE's initializers, seed 1) to an .npz that the peers load. Each worker
runs `--warmup` untimed steps (torch.compile compiles during them; the
time of the first step is reported), then `--steps` timed steps (feed,
forward, backward, update and the loss fetched to the host every step, in
all). The workers run round-robin --rounds times (the machine is shared:
ratios from the same round and medians over rounds resist the noise). A
peer whose package cannot be imported is reported "absent (reason)"; a
peer that fails (torch.compile without a working compiler, say) is
reported "failed (reason)" and not run again.

    benchmarks/peers/setup.sh     # once: the venv (default benchmarks/peers/.venv, or $PE_PEERS_VENV)
    PYTHONPATH=build/python /usr/bin/python3 benchmarks/compare_peers.py --rounds 5
    PYTHONPATH=build/python /usr/bin/python3 benchmarks/compare_peers.py --models mlp --peers torch2,paddle3
    ... compare_peers.py --models cnn --pe-nchw    # also PE with conv_nhwc / fuse_conv_bias off, same rounds
    ... compare_peers.py --pe-places 2             # PE on CPU_NUM=2 only
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import train_fashion_mnist as job  # noqa: E402  (data loader and model builders)

BATCH, LR, MOMENTUM, SEED = 128, 0.05, 0.9, 1
STEPS = {"mlp": (20, 150), "cnn": (5, 40)}  # (warmup, timed) per model; torch.compile compiles in the first
PEERS = ["torch1", "torch2", "torch2c", "paddle3"]
PEER_NAMES = {"pe": "PE", "torch1": "PyTorch 1.13", "torch2": "PyTorch 2 eager", "torch2c": "PyTorch 2 compile",
              "paddle3": "Paddle 3 static"}

# The layers of job.build_model, for the roofline: ("fc", in, out) or ("conv", cin, cout, k, h_out, w_out);
# pools / relu / softmax are elementwise-sized and carry no GEMM FLOPs; "act" lists each activation's
# size per sample (layer outputs after fused bias + relu, pool outputs), the input image first.
LAYERS = {
    "mlp": {"ops": [("fc", 784, 512), ("fc", 512, 256), ("fc", 256, 10)],
            "act": [784, 512, 256, 10]},
    "cnn": {"ops": [("conv", 1, 20, 5, 24, 24), ("conv", 20, 50, 5, 8, 8), ("fc", 800, 500), ("fc", 500, 10)],
            "act": [784, 20 * 24 * 24, 20 * 12 * 12, 50 * 8 * 8, 50 * 4 * 4, 500, 10]},
}


def batches(x, y, n_steps):
    """The same n_steps batches for every worker: a fixed permutation, wrapped."""
    order = np.random.RandomState(0).permutation(len(x))
    out = []
    for s in range(n_steps):
        idx = order[(s * BATCH) % len(x):][:BATCH]
        if len(idx) < BATCH:
            idx = order[:BATCH]
        out.append((np.ascontiguousarray(x[idx]), np.ascontiguousarray(y[idx])))
    return out


def sched_ns():
    """(ns on a CPU, ns runnable but waiting for a CPU) summed over this process's threads (/proc schedstat)."""
    run = wait = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/schedstat" % t) as f:
                a = f.read().split()
        except OSError:  # a thread that ended meanwhile
            continue
        run, wait = run + int(a[0]), wait + int(a[1])
    return run, wait


def timed(step, data, warmup):
    """Runs step(x, y) -> loss over data; returns {samples_per_s, step_s (mean wall s per step), loss (mean over
    the timed steps), cpu_us_per_sample (process CPU time / samples), first_step_s, busy and waiting (CPUs used,
    and CPUs' worth of runnable-but-waiting threads)}."""
    t0 = time.perf_counter()
    for i, (xb, yb) in enumerate(data[:warmup]):
        step(xb, yb)
        if i == 0:
            first = time.perf_counter() - t0
    losses = []
    s0, c0 = sched_ns(), time.process_time()
    t0 = time.perf_counter()
    for xb, yb in data[warmup:]:
        losses.append(step(xb, yb))
    secs = time.perf_counter() - t0
    cpu, s1 = time.process_time() - c0, sched_ns()
    n = sum(len(xb) for xb, _ in data[warmup:])
    return {"samples_per_s": n / secs, "step_s": secs / len(data[warmup:]), "loss": float(np.mean(losses)),
            "cpu_us_per_sample": cpu / n * 1e6, "first_step_s": first if warmup else 0.0,
            "busy": (s1[0] - s0[0]) / 1e9 / secs, "waiting": (s1[1] - s0[1]) / 1e9 / secs}


def load_batches(data_path, model, n_steps):
    """The first n_steps batches: from data_path (an .npz the driver wrote, for workers whose python cannot
    import pe, which reads the dataset) or, without one, from the dataset."""
    if not data_path:
        x, y = job.load_fashion_mnist("train")
        return batches(x, y, n_steps)
    with np.load(data_path) as f:
        x, y = f["x"], f["y"]
    if len(x) < n_steps:
        raise SystemExit("compare_peers: %s holds %d batches, %d wanted" % (data_path, len(x), n_steps))
    return [(x[i], y[i]) for i in range(n_steps)]


def load_init(init_path):
    with np.load(init_path) as f:
        return [f["arr_%d" % i] for i in range(len(f.files))]


# ---- workers ----------------------------------------------------------------------------------------

def worker_pe(model, init_path, warmup, steps, data_path=None, nchw=False):
    """nchw: the CNN build passes off (BuildStrategy conv_nhwc, fuse_conv_bias), the graph as written."""
    pe = job._import_pe()
    pe.enable_static()
    data = load_batches(data_path, model, warmup + steps)
    main, startup, _, loss, _ = job.build_programs(pe, model, "momentum", LR, SEED, MOMENTUM)
    scope = pe.static.Scope()
    pe.static.Executor(pe.CPUPlace()).run(startup, scope=scope)
    params = main.all_parameters()
    np.savez(init_path, *[np.array(scope.find_var(p.name).get_tensor()) for p in params])
    bs = pe.static.BuildStrategy()
    if nchw:
        bs.conv_nhwc = bs.fuse_conv_bias = False
    exe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope, build_strategy=bs)

    def step(xb, yb):
        lv, = exe.run(fetch_list=[loss.name], feed={"image": xb, "label": yb})
        return float(np.mean(lv))
    return dict(timed(step, data, warmup), places=exe.device_count, version="PE")


def torch_model(torch, model, init):
    """The torch twin of job.build_model, initialized from PE's weights (PE fc weights are [in, out])."""
    nn = torch.nn
    if model == "mlp":
        net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    else:
        net = nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
                            nn.Conv2d(20, 50, 5), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(),
                            nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
    tparams = [p for m in net if isinstance(m, (nn.Linear, nn.Conv2d)) for p in (m.weight, m.bias)]
    if len(tparams) != len(init):
        raise SystemExit("compare_peers: PE has %d parameters, the torch %s has %d" % (len(init), model, len(tparams)))
    with torch.no_grad():
        for tp, v in zip(tparams, init):
            v = v.T if v.ndim == 2 else v
            if tuple(tp.shape) != v.shape:
                raise SystemExit("compare_peers: PE parameter shape %s does not fit torch %s"
                                 % (v.shape, tuple(tp.shape)))
            tp.copy_(torch.from_numpy(np.ascontiguousarray(v)))
    return net


def worker_torch(model, init_path, warmup, steps, threads, compile_=False, data_path=None):
    import torch
    torch.set_num_threads(threads)
    data = load_batches(data_path, model, warmup + steps)
    net = torch_model(torch, model, load_init(init_path))
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    lossf = torch.nn.CrossEntropyLoss()
    fwd = net
    if compile_:
        if not hasattr(torch, "compile"):
            return {"error": "torch %s has no torch.compile" % torch.__version__}
        fwd = torch.compile(net)

    def step(xb, yb):
        xt, yt = torch.from_numpy(xb), torch.from_numpy(yb[:, 0])
        opt.zero_grad()
        loss = lossf(fwd(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()
    try:
        res = timed(step, data, warmup)
    except Exception as e:  # inductor's failures: no compiler, a lowering it lacks, ...
        if not compile_:
            raise
        msg = str(e).strip().splitlines()
        return {"error": "torch.compile: %s: %s" % (type(e).__name__, msg[0][:300] if msg else "")}
    return dict(res, threads=torch.get_num_threads(), version="torch " + torch.__version__)


def worker_paddle(model, init_path, warmup, steps, threads, data_path=None):
    import paddle
    paddle.enable_static()
    paddle.base.core.set_num_threads(threads)
    data = load_batches(data_path, model, warmup + steps)
    init = iter(load_init(init_path))
    nn, F = paddle.nn, paddle.nn.functional

    def attrs():  # weight then bias, PE's initial values (Paddle's fc weight is [in, out] as in PE)
        return dict(weight_attr=paddle.ParamAttr(initializer=nn.initializer.Assign(next(init))),
                    bias_attr=paddle.ParamAttr(initializer=nn.initializer.Assign(next(init))))
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        image = paddle.static.data("image", [None, 784], "float32")
        label = paddle.static.data("label", [None, 1], "int64")
        if model == "mlp":
            h = F.relu(nn.Linear(784, 512, **attrs())(image))
            h = F.relu(nn.Linear(512, 256, **attrs())(h))
            logits = nn.Linear(256, 10, **attrs())(h)
        else:
            h = paddle.reshape(image, [-1, 1, 28, 28])
            h = F.max_pool2d(F.relu(nn.Conv2D(1, 20, 5, **attrs())(h)), 2, 2)
            h = F.max_pool2d(F.relu(nn.Conv2D(20, 50, 5, **attrs())(h)), 2, 2)
            h = F.relu(nn.Linear(800, 500, **attrs())(paddle.flatten(h, 1)))
            logits = nn.Linear(500, 10, **attrs())(h)
        loss = F.cross_entropy(logits, label)
        paddle.optimizer.Momentum(learning_rate=LR, momentum=MOMENTUM).minimize(loss)
    if next(init, None) is not None:
        raise SystemExit("compare_peers: PE's %s has more parameters than the Paddle twin" % model)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)

    def step(xb, yb):
        lv, = exe.run(main, feed={"image": xb, "label": yb}, fetch_list=[loss])
        return float(np.mean(lv))
    return dict(timed(step, data, warmup), threads=threads, version="paddle " + paddle.__version__)


def worker_machine(cores):
    """The roofline's ceilings: numpy's sgemm GFLOP/s (all cores and 1 thread, set by the driver's env) and copy
    bandwidth."""
    n = 2048
    a = np.random.RandomState(0).rand(n, n).astype(np.float32)
    b = np.random.RandomState(1).rand(n, n).astype(np.float32)
    c = np.empty_like(a)
    np.matmul(a, b, out=c)
    best = min(_time(lambda: np.matmul(a, b, out=c)) for _ in range(5))
    src = np.ones(64 << 20, np.float32)  # 256 MB
    dst = np.empty_like(src)
    np.copyto(dst, src)
    cbest = min(_time(lambda: np.copyto(dst, src)) for _ in range(5))
    return {"sgemm_gflops": 2.0 * n ** 3 / best / 1e9, "copy_gbs": 2.0 * src.nbytes / cbest / 1e9,
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "")}


def _time(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


# ---- roofline ---------------------------------------------------------------------------------

def roofline(model, machine):
    """{flops_per_sample, bytes_per_step, params, samples_per_s, bound} of model at BATCH on machine."""
    fwd = bwd = 0
    params = 0
    for i, op in enumerate(LAYERS[model]["ops"]):
        if op[0] == "fc":
            _, k, n = op
            f = 2 * k * n
            params += k * n + n
        else:
            _, cin, cout, k, ho, wo = op
            f = 2 * cout * ho * wo * cin * k * k
            params += cout * cin * k * k + cout
        fwd += f
        bwd += f + (f if i > 0 else 0)  # weight gradient; input gradient but for the first layer
    acts = LAYERS[model]["act"]
    act_floats = 2 * acts[0] + 5 * sum(acts[1:])        # per sample: see the module docstring
    param_floats = params * (1 + 1 + 1 + 5)             # fwd read, dX read, grad write, momentum r/w p, g, v
    bytes_step = 4 * (param_floats + BATCH * act_floats)
    flops_step = BATCH * (fwd + bwd)
    t_flops = flops_step / (machine["sgemm_gflops"] * 1e9)
    t_bytes = bytes_step / (machine["copy_gbs"] * 1e9)
    return {"flops_per_sample": fwd + bwd, "bytes_per_step": bytes_step, "params": params,
            "samples_per_s": BATCH / max(t_flops, t_bytes), "bound": "compute" if t_flops >= t_bytes else "memory",
            "t_flops_ms": t_flops * 1e3, "t_bytes_ms": t_bytes * 1e3}


# ---- driver -------------------------------------------------------------------------------------

def peers_python(arg):
    if arg:
        return arg
    venv = os.environ.get("PE_PEERS_VENV") or os.path.join(ROOT, "benchmarks", "peers", ".venv")
    return os.path.join(venv, "bin", "python")


def probe(python, module):
    """None when `python -c 'import module'` works, else the reason."""
    if not os.path.exists(python):
        return "no %s (run benchmarks/peers/setup.sh)" % python
    r = subprocess.run([python, "-c", "import %s; print(%s.__version__)" % (module, module)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        last = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        return "%s: %s" % (python, last[-1] if last else "exit %d" % r.returncode)
    return None


def run_worker(args, kind, model, init_path, threads=0, data_path=None, places=0):
    env = dict(os.environ)
    python = sys.executable if kind in ("pe", "pe_nchw", "torch1", "machine") else args.peers_python
    cmd = [python, os.path.abspath(__file__), "--worker", kind, "--model", model, "--init", init_path,
           "--warmup", str(args.warmup[model]), "--steps", str(args.steps[model]), "--threads", str(threads)]
    if data_path:
        cmd += ["--data", data_path]
    if kind in ("pe", "pe_nchw"):
        env["CPU_NUM"] = str(places or args.cores)
    else:
        for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[v] = str(threads)
        if kind == "torch2c":
            env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # no pool of compile workers left behind the timed steps
        if kind == "paddle3":
            env.setdefault("GLOG_minloglevel", "2")
        if python != sys.executable:
            env.pop("PYTHONPATH", None)  # build/python's pe is built for Debian's python and numpy
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [ln for ln in r.stdout.strip().splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        if kind in ("pe", "pe_nchw"):
            raise SystemExit("compare_peers: the PE %s worker failed (exit %d):\n%s" % (model, r.returncode,
                                                                                        r.stderr.strip()))
        tail = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        return {"error": "exit %d: %s" % (r.returncode, tail[-1][:300] if tail else "no output")}
    return json.loads(lines[-1])


def step_ratio(base, other):
    """(median, "x (rounds: a b c)"): other's step time over base's, round by round (the rounds alternate)."""
    r = [q["step_s"] / b["step_s"] for b, q in zip(base, other)]
    return statistics.median(r), "%.2f (rounds: %s)" % (statistics.median(r), " ".join("%.2f" % x for x in r))


def measure_machine(args, runs):
    """runs + the ceilings measured now: numpy sgemm and copy on all cores and on 1 thread (numpy's BLAS
    threads; the copy is one thread either way). The roofline takes the best seen: on a shared machine a
    measured ceiling is at most the true one, so it is taken before every round and after the last."""
    for nthr in sorted({args.cores, 1}, reverse=True):
        mr = run_worker(argparse.Namespace(**dict(vars(args), warmup={"mlp": 0}, steps={"mlp": 0})), "machine",
                        "mlp", "-", nthr)
        if "error" in mr:
            raise SystemExit("compare_peers: the machine worker failed: " + mr["error"])
        runs.append(mr)
        print("machine: sgemm %.1f GFLOP/s on %d BLAS thread(s), copy %.1f GB/s (numpy %s), load %.1f" % (
            mr["sgemm_gflops"], nthr, mr["copy_gbs"], np.__version__, os.getloadavg()[0]), flush=True)
    return runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp,cnn")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated of: " + ",".join(PEERS))
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repetitions (median reported)")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="PE places (CPU_NUM)")
    ap.add_argument("--threads", default="", help="peers' thread counts searched, comma-separated (1..cores)")
    ap.add_argument("--pe-places", default="",
                    help="PE's place counts searched (CPU_NUM; the kernels share the cores), comma-separated "
                         "(default: cores,1)")
    ap.add_argument("--json", default="", help="also write every worker's result, per round, to this file")
    ap.add_argument("--peers-python", default="",
                    help="python of the peers venv (default $PE_PEERS_VENV/bin/python or benchmarks/peers/.venv)")
    ap.add_argument("--pe-nchw", action="store_true",
                    help="also run PE with its CNN build passes off (conv_nhwc, fuse_conv_bias), alternating")
    ap.add_argument("--worker", choices=["pe", "pe_nchw", "torch1", "torch2", "torch2c", "paddle3", "machine"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=["mlp", "cnn"], help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        t = args.threads = int(args.threads or 1)
        w, m, i, s, d = args.warmup, args.model, args.init, args.steps, args.data
        res = {"pe": lambda: worker_pe(m, i, w, s, d),
               "pe_nchw": lambda: worker_pe(m, i + ".nchw.npz", w, s, d, nchw=True),
               "torch1": lambda: worker_torch(m, i, w, s, t, data_path=d),
               "torch2": lambda: worker_torch(m, i, w, s, t, data_path=d),
               "torch2c": lambda: worker_torch(m, i, w, s, t, compile_=True, data_path=d),
               "paddle3": lambda: worker_paddle(m, i, w, s, t, data_path=d),
               "machine": lambda: worker_machine(args.cores)}[args.worker]()
        print(json.dumps(res), flush=True)
        return 0

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models or any(m not in STEPS for m in models):
        ap.error("--models must list mlp and/or cnn")
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if any(p not in PEERS for p in peers):
        ap.error("--peers must list some of " + ",".join(PEERS))
    args.peers_python = peers_python(args.peers_python)
    args.warmup = {m: STEPS[m][0] for m in STEPS}
    args.steps = {m: STEPS[m][1] for m in STEPS}
    threads = [int(t) for t in args.threads.split(",")] if args.threads else list(range(1, args.cores + 1))
    pe_places = ([int(v) for v in args.pe_places.split(",")] if args.pe_places
                 else list(dict.fromkeys([args.cores, 1])))

    status = {}  # peer -> None (runs) or "absent (...)" / "failed (...)"
    for p in peers:
        reason = probe(sys.executable if p == "torch1" else args.peers_python, "paddle" if p == "paddle3" else "torch")
        status[p] = None if reason is None else "absent (%s)" % reason
    print("peers python: %s; %s" % (args.peers_python, "; ".join(
        "%s %s" % (PEER_NAMES[p], status[p] or "present") for p in peers)), flush=True)

    machine = []

    live = lambda: [p for p in peers if status[p] is None]  # noqa: E731
    res = {m: {"pe_nchw": [], **{("pe", n): [] for n in pe_places}, **{(p, t): [] for p in peers for t in threads}}
           for m in models}
    meta = {}
    with tempfile.TemporaryDirectory(prefix="pe-compare-") as tmp:
        x, y = job.load_fashion_mnist("train")  # the batches every worker trains on, written once per model
        for m in models:
            bs = batches(x, y, args.warmup[m] + args.steps[m])
            np.savez(os.path.join(tmp, "data_%s.npz" % m), x=np.stack([b[0] for b in bs]),
                     y=np.stack([b[1] for b in bs]))
        del x, y
        for r in range(args.rounds):
            measure_machine(args, machine)
            for m in models:
                init, dpath = os.path.join(tmp, "init_%s.npz" % m), os.path.join(tmp, "data_%s.npz" % m)
                line = []
                for n in pe_places:
                    pr = run_worker(args, "pe", m, init, data_path=dpath, places=n)
                    res[m][("pe", n)].append(pr)
                    line.append("PE %d places %.0f (busy %.1f, waiting %.1f)" % (
                        pr["places"], pr["samples_per_s"], pr["busy"], pr["waiting"]))
                if args.pe_nchw:
                    qn = run_worker(args, "pe_nchw", m, init, data_path=dpath, places=pe_places[0])
                    res[m]["pe_nchw"].append(qn)
                    line.append("PE CNN passes off %.0f" % qn["samples_per_s"])
                for p in live():
                    for t in threads:
                        q = run_worker(args, p, m, init, t, data_path=dpath)
                        if "error" in q:
                            status[p] = "failed (%s %s %d thr: %s)" % (PEER_NAMES[p], m, t, q["error"])
                            line.append("%s %s" % (p, status[p]))
                            break
                        res[m][(p, t)].append(q)
                        meta[p] = q["version"]
                        line.append("%s %d thr %.0f (busy %.1f, waiting %.1f%s)" % (
                            p, t, q["samples_per_s"], q["busy"], q["waiting"],
                            ", first step %.1f s" % q["first_step_s"] if p == "torch2c" else ""))
                print("round %d/%d %s, load %.1f: %s" % (r + 1, args.rounds, m, os.getloadavg()[0], "; ".join(line)),
                      flush=True)

    machine = measure_machine(args, machine)
    mach = {k: max(v[k] for v in machine) for k in ("sgemm_gflops", "copy_gbs")}
    one = max(v["sgemm_gflops"] for v in machine if v["blas_threads"] == "1")
    print("roofline ceilings: the best of those, sgemm %.1f GFLOP/s, copy %.1f GB/s (%d cores x the best 1-thread "
          "sgemm would be %.1f GFLOP/s)" % (mach["sgemm_gflops"], mach["copy_gbs"], args.cores, args.cores * one))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "ceilings": mach, "status": status, "meta": meta,
                       "results": {m: {k if isinstance(k, str) else "%s/%d" % k: v for k, v in res[m].items()}
                                   for m in models},
                       "roofline": {m: roofline(m, mach) for m in models}}, f, indent=1)
    med = lambda rs, k="samples_per_s": statistics.median(x[k] for x in rs)  # noqa: E731
    print("\nTraining throughput (median of %d alternating rounds; same batches and initial weights): batch %d, "
          "momentum %g lr %g, %d cores, PE on CPU_NUM=%s places; peers at %s thread(s), the best counts; %s"
          % (args.rounds, BATCH, MOMENTUM, LR, args.cores, "/".join(map(str, pe_places)), "/".join(map(str, threads)),
             ", ".join("%s = %s" % (PEER_NAMES[p], meta[p]) for p in peers if p in meta)))
    speed = {}
    for m in models:
        rl = roofline(m, mach)
        ideal = roofline(m, dict(mach, sgemm_gflops=max(mach["sgemm_gflops"], args.cores * one)))
        print("\n%s: %.2f MFLOP per sample (forward + backward GEMM/conv), %.1f MB moved per step (%d parameters); "
              "roofline %.0f samples/s (%s-bound: %.2f ms of FLOPs, %.2f ms of bytes per step; %.0f samples/s at "
              "%d x the 1-thread sgemm)" % (
                  m.upper(), rl["flops_per_sample"] / 1e6, rl["bytes_per_step"] / 1e6, rl["params"],
                  rl["samples_per_s"], rl["bound"], rl["t_flops_ms"], rl["t_bytes_ms"], ideal["samples_per_s"],
                  args.cores))
        head = ("| framework | samples/s (best threads) | per thread count | PE speedup (peer step time / PE's) "
                "| CPU µs per sample | % of roofline | mean loss |")
        print(head)
        print("|" + " --- |" * (head.count("|") - 1))
        pe_sps = {n: med(res[m][("pe", n)]) for n in pe_places}
        bn = max(pe_sps, key=pe_sps.get)  # PE's best place count, as the peers' best thread count
        pe_rs = res[m][("pe", bn)]
        for n in pe_places:
            rs = res[m][("pe", n)]
            print("| PE (%d place%s x %d kernel thread%s)%s | %.0f | - | %s | %.0f | %.0f%% | %.4f |" % (
                n, "s"[:n > 1], max(args.cores // n, 1), "s"[:args.cores // n > 1], " (best)" if n == bn else "",
                pe_sps[n], "-" if n == bn else step_ratio(pe_rs, rs)[1],
                med(rs, "cpu_us_per_sample"), 100 * pe_sps[n] / rl["samples_per_s"], rs[0]["loss"]))
        if res[m]["pe_nchw"]:
            rn = res[m]["pe_nchw"]
            print("| PE (%d places), conv_nhwc / fuse_conv_bias off | %.0f | - | %s | %.0f | %.0f%% | %.4f |" % (
                pe_places[0], med(rn), step_ratio(res[m][("pe", pe_places[0])], rn)[1], med(rn, "cpu_us_per_sample"),
                100 * med(rn) / rl["samples_per_s"], rn[0]["loss"]))
        best_peer = None
        for p in peers:
            ts = [t for t in threads if res[m][(p, t)]]
            if not ts:
                print("| %s | %s | | | | | |" % (PEER_NAMES[p], status[p] or "no result"))
                continue
            sps = {t: med(res[m][(p, t)]) for t in ts}
            bt = max(sps, key=sps.get)
            ratio, cell = step_ratio(pe_rs, res[m][(p, bt)])
            if best_peer is None or sps[bt] > best_peer[1]:
                best_peer = (p, sps[bt], ratio)
            note = "" if status[p] is None else " — then %s" % status[p]
            print("| %s | %.0f (%d thr) | %s | %s | %s | %.0f%% | %.4f%s |" % (
                PEER_NAMES[p], sps[bt], bt, ", ".join("%d thr %.0f" % (t, sps[t]) for t in ts), cell,
                " / ".join("%.0f" % med(res[m][(p, t)], "cpu_us_per_sample") for t in ts),
                100 * sps[bt] / rl["samples_per_s"], res[m][(p, bt)][0]["loss"], note))
        if best_peer:
            speed[m] = best_peer[2]
            print("best peer: %s at %.0f samples/s; PE / best peer = %.2f" % (PEER_NAMES[best_peer[0]], best_peer[1],
                                                                            best_peer[2]))
    print("\n(CPU µs per sample: process CPU time over the timed steps / samples, per thread count searched;\n"
          " busy / waiting in the round lines: CPUs' worth of time the worker's threads ran / sat runnable waiting\n"
          " for a CPU; waiting > 0 means other processes competed for the %d cores.)" % args.cores)
    print("speedup_vs_best_peer " + " ".join("%s=%.2f" % (m, speed[m]) for m in models if m in speed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
