#!/usr/bin/env python3
"""benchmarks/compare_torch.py — PE vs PyTorch training throughput on the Fashion-MNIST models.

What: trains the MLP (784-512-256-10, relu) and the LeNet-style CNN of
examples/train_fashion_mnist.py with the same batch (128), the same
optimizer (momentum 0.9, lr 0.05), the same initial weights and the same
batches in PE (ParallelExecutor over CPU_NUM = cores places) and in PyTorch
(every thread count 1..cores, the best one counts), prints a table of
training samples/s and a last line
`speedup_vs_torch mlp=<PE/torch> cnn=<PE/torch>`.

How: each measurement runs in its own worker process (this script with
--worker): PE and PyTorch both bring an OpenMP runtime, and idle OpenMP
threads spinning in one framework would steal cores from the other in a
shared process. The PE worker of a model runs first and writes the initial
weights (PE's initializers, seed 1) to an .npz that the PyTorch workers
load, so both train the same network from the same point on the same
batches; the mean loss over the timed steps of each is printed as a check
that both did the same work. Each worker runs `--warmup` untimed steps,
then `--steps` timed steps (forward, backward, update and fetching the
loss to the host every step, in both). The workers run round-robin
`--rounds` times and the table shows the median of the rounds (the machine
is shared: medians of interleaved runs resist the noise).

Why: the issue's targets are PE/torch >= 1.3 (MLP) and >= 1.2 (CNN) on
the same work; docs/benchmarks.md records the figures.

    /usr/bin/python3 benchmarks/compare_torch.py                # both models
    /usr/bin/python3 benchmarks/compare_torch.py --models mlp --rounds 5
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
STEPS = {"mlp": (20, 150), "cnn": (5, 40)}  # (warmup, timed) per model


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
    """Runs step(x, y) -> loss over data; returns {samples_per_s, loss (mean over the timed
    steps), busy and waiting (CPUs used, and CPUs' worth of runnable-but-waiting threads)}."""
    for xb, yb in data[:warmup]:
        step(xb, yb)
    losses = []
    s0 = sched_ns()
    t0 = time.perf_counter()
    for xb, yb in data[warmup:]:
        losses.append(step(xb, yb))
    secs = time.perf_counter() - t0
    s1 = sched_ns()
    return {"samples_per_s": sum(len(xb) for xb, _ in data[warmup:]) / secs, "loss": float(np.mean(losses)),
            "busy": (s1[0] - s0[0]) / 1e9 / secs, "waiting": (s1[1] - s0[1]) / 1e9 / secs}


# ---- workers ----------------------------------------------------------------------------------------

def worker_pe(model, init_path, warmup, steps):
    pe = job._import_pe()
    pe.enable_static()
    x, y = job.load_fashion_mnist("train")
    data = batches(x, y, warmup + steps)
    main, startup, _, loss, _ = job.build_programs(pe, model, "momentum", LR, SEED, MOMENTUM)
    scope = pe.static.Scope()
    pe.static.Executor(pe.CPUPlace()).run(startup, scope=scope)
    params = main.all_parameters()
    np.savez(init_path, *[np.array(scope.find_var(p.name).get_tensor()) for p in params])
    exe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope)

    def step(xb, yb):
        lv, = exe.run(fetch_list=[loss.name], feed={"image": xb, "label": yb})
        return float(np.mean(lv))
    return dict(timed(step, data, warmup), places=exe.device_count)


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
        raise SystemExit("compare_torch: PE has %d parameters, the torch %s has %d" % (len(init), model, len(tparams)))
    with torch.no_grad():
        for tp, v in zip(tparams, init):
            v = v.T if v.ndim == 2 else v
            if tuple(tp.shape) != v.shape:
                raise SystemExit("compare_torch: PE parameter shape %s does not fit torch %s"
                                 % (v.shape, tuple(tp.shape)))
            tp.copy_(torch.from_numpy(np.ascontiguousarray(v)))
    return net


def worker_torch(model, init_path, warmup, steps, threads):
    import torch
    torch.set_num_threads(threads)
    x, y = job.load_fashion_mnist("train")
    data = batches(x, y, warmup + steps)
    with np.load(init_path) as f:
        init = [f["arr_%d" % i] for i in range(len(f.files))]
    net = torch_model(torch, model, init)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    lossf = torch.nn.CrossEntropyLoss()

    def step(xb, yb):
        xt, yt = torch.from_numpy(xb), torch.from_numpy(yb[:, 0])
        opt.zero_grad()
        loss = lossf(net(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()
    return dict(timed(step, data, warmup), threads=torch.get_num_threads(), version=torch.__version__)


# ---- driver -------------------------------------------------------------------------------------

def run_worker(args, kind, model, init_path, threads=0):
    env = dict(os.environ)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--model", model, "--init", init_path,
           "--warmup", str(args.warmup[model]), "--steps", str(args.steps[model])]
    if kind == "torch":
        cmd += ["--threads", str(threads)]
        env["OMP_NUM_THREADS"] = str(threads)
    else:
        env.setdefault("CPU_NUM", str(args.cores))
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit("compare_torch: the %s %s worker failed (exit %d):\n%s" % (kind, model, r.returncode,
                                                                                     r.stderr.strip()))
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp,cnn")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repetitions (median reported)")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="PE places and max torch threads")
    ap.add_argument("--worker", choices=["pe", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=["mlp", "cnn"], help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        if args.worker == "pe":
            res = worker_pe(args.model, args.init, args.warmup, args.steps)
        else:
            res = worker_torch(args.model, args.init, args.warmup, args.steps, args.threads)
        print(json.dumps(res))
        return 0

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models or any(m not in STEPS for m in models):
        ap.error("--models must list mlp and/or cnn")
    args.warmup = {m: STEPS[m][0] for m in STEPS}
    args.steps = {m: STEPS[m][1] for m in STEPS}
    threads = list(range(1, args.cores + 1))
    res = {m: {"pe": [], **{t: [] for t in threads}} for m in models}
    meta = {}
    with tempfile.TemporaryDirectory(prefix="pe-compare-") as tmp:
        for r in range(args.rounds):
            for m in models:
                init = os.path.join(tmp, "init_%s.npz" % m)
                p = run_worker(args, "pe", m, init)
                res[m]["pe"].append(p)
                meta["places"] = p["places"]
                for t in threads:
                    q = run_worker(args, "torch", m, init, t)
                    res[m][t].append(q)
                    meta["torch"] = q["version"]
                fmt = lambda w: "%.0f (busy %.1f, waiting %.1f)" % (  # noqa: E731
                    w["samples_per_s"], w["busy"], w["waiting"])
                print("round %d/%d %s, load %.1f: PE %s; torch %s" % (
                    r + 1, args.rounds, m, os.getloadavg()[0], fmt(p),
                    "; ".join("%d thr %s" % (t, fmt(res[m][t][-1])) for t in threads)), flush=True)

    med = lambda rs: statistics.median(x["samples_per_s"] for x in rs)  # noqa: E731
    cpu_us = lambda rs: statistics.median(x["busy"] / x["samples_per_s"] * 1e6 for x in rs)  # noqa: E731
    print("\nTraining throughput, samples/s (median of %d rounds, same batches and initial weights); "
          "batch %d, momentum %g lr %g, %d cores, PE on CPU_NUM=%d places, PyTorch %s"
          % (args.rounds, BATCH, MOMENTUM, LR, args.cores, meta["places"], meta["torch"]))
    head = "| model | PE | " + " | ".join("torch %d thr" % t for t in threads) + \
        " | best torch | PE / best torch | CPU µs per sample PE / " + \
        " / ".join("torch %d thr" % t for t in threads) + " | mean loss PE / torch |"
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    speed = {}
    for m in models:
        pe_sps = med(res[m]["pe"])
        t_sps = {t: med(res[m][t]) for t in threads}
        best = max(t_sps, key=t_sps.get)
        speed[m] = pe_sps / t_sps[best]
        print("| %s | %.0f | %s | %.0f (%d thr) | %.2f | %s | %.4f / %.4f |" % (
            m.upper(), pe_sps, " | ".join("%.0f" % t_sps[t] for t in threads), t_sps[best], best, speed[m],
            " / ".join("%.0f" % cpu_us(res[m][k]) for k in ["pe"] + threads),
            res[m]["pe"][0]["loss"], res[m][best][0]["loss"]))
    print("(busy / waiting: CPUs' worth of time the worker's threads ran / sat runnable waiting for a CPU while\n"
          " timed; waiting > 0 means other processes competed for the %d cores. CPU µs per sample = busy time /\n"
          " samples: the work each framework spends per sample, less sensitive to that competition.)" % args.cores)
    print("speedup_vs_torch " + " ".join("%s=%.2f" % (m, speed[m]) for m in models))
    return 0


if __name__ == "__main__":
    sys.exit(main())
