#!/usr/bin/env python3
"""benchmarks/bench_trainers.py — training across processes: PE's trainers vs PE's places vs PyTorch DDP.

What: the MLP and the CNN of examples/train_fashion_mnist.py (batch 128,
momentum 0.9, lr 0.05, the same initial weights and batches as
compare_peers.py), trained by
  - PE, 1 process x 2 places (ParallelExecutor, CPU_NUM=2): the reference;
  - PE, 2 processes x 1 place (`mpirun -np 2`, ParallelExecutor with
    num_trainers=2, trainer_id=rank, CPU_NUM=1): each process feeds its
    half of every batch, gradients summed over MPI (runtime/comm/mpi.c);
  - PyTorch DistributedDataParallel with the gloo backend, 2 processes of
    1 thread each, each its half of every batch (Debian's torch 1.13; and a
    PyTorch 2.x from a venv given with --torch2-python, if any).
Each prints global samples/s (the whole batch per step over the step time
of rank 0, which waits for the allreduce every step) and the mean loss
over the timed steps on its rank 0 as a check of equal work. The workers
run round-robin --rounds times; medians are reported, with the ratios the
issue sets targets for: PE trainers / PE places >= 0.95 and PE trainers /
torch DDP >= 1.5.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/bench_trainers.py --rounds 3
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_peers as ct  # noqa: E402  (models, batches, timing, the torch twin)

job = ct.job
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def half(xb, rank, n):
    """Rows of trainer `rank` of n (the examples' rule: the last trainers take the extra rows)."""
    lo, hi = job.shard_rows(len(xb), n, rank)
    return xb[lo:hi]


def worker_pe_trainers(model, init_path, warmup, steps):
    pe = job._import_pe()
    pe.enable_static()
    rank, n = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    x, y = job.load_fashion_mnist("train")
    data = ct.batches(x, y, warmup + steps)
    main, startup, _, loss, _ = job.build_programs(pe, model, "momentum", ct.LR, ct.SEED, ct.MOMENTUM)
    scope = pe.static.Scope()
    pe.static.Executor(pe.CPUPlace()).run(startup, scope=scope)
    exe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope, num_trainers=n,
                                     trainer_id=rank)

    def step(xb, yb):
        lv, = exe.run(fetch_list=[loss.name], feed={"image": half(xb, rank, n), "label": half(yb, rank, n)})
        return float(np.mean(lv))
    res = ct.timed(step, data, warmup)
    return dict(res, trainers=n) if rank == 0 else None


def worker_torch_ddp(model, init_path, warmup, steps):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=n)
    x, y = job.load_fashion_mnist("train")
    data = ct.batches(x, y, warmup + steps)
    with np.load(init_path) as f:
        init = [f["arr_%d" % i] for i in range(len(f.files))]
    net = DDP(ct.torch_model(torch, model, init))
    opt = torch.optim.SGD(net.parameters(), lr=ct.LR, momentum=ct.MOMENTUM)
    lossf = torch.nn.CrossEntropyLoss()

    def step(xb, yb):
        xt, yt = torch.from_numpy(half(xb, rank, n)), torch.from_numpy(half(yb, rank, n)[:, 0])
        opt.zero_grad()
        loss = lossf(net(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()
    res = ct.timed(step, data, warmup)
    dist.destroy_process_group()
    return dict(res, version=torch.__version__) if rank == 0 else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env, what, timeout=900):
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit("bench_trainers: %s failed (exit %d):\n%s\n%s" % (what, r.returncode, r.stdout[-2000:],
                                                                           r.stderr[-4000:]))
    lines = [ln for ln in r.stdout.strip().splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])


def worker_cmd(python, kind, model, init, args):
    return [python, os.path.abspath(__file__), "--worker", kind, "--model", model, "--init", init,
            "--warmup", str(ct.STEPS[model][0]), "--steps", str(ct.STEPS[model][1])]


def run_ddp(python, model, init, args):
    port = str(free_port())
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(worker_cmd(python, "torch_ddp", model, init, args), env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit("bench_trainers: torch DDP timed out")
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise SystemExit("bench_trainers: torch DDP (%s) failed:\n%s" % (python, e[-4000:]))
        outs.append(o)
    return json.loads([ln for ln in outs[0].splitlines() if ln.startswith("{")][-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--torch2-python", default="", help="a python with PyTorch 2.x (e.g. a venv's), optional")
    ap.add_argument("--worker", choices=["pe_places", "pe_trainers", "torch_ddp"], help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=["mlp", "cnn"], help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        if args.worker == "pe_places":
            res = ct.worker_pe(args.model, args.init, args.warmup, args.steps)
        elif args.worker == "pe_trainers":
            res = worker_pe_trainers(args.model, args.init, args.warmup, args.steps)
        else:
            res = worker_torch_ddp(args.model, args.init, args.warmup, args.steps)
        if res is not None:
            print(json.dumps(res), flush=True)
        return 0

    models = [m for m in args.models.split(",") if m]
    pythons = [("torch DDP", sys.executable)] + ([("torch2 DDP", args.torch2_python)] if args.torch2_python else [])
    kinds = ["pe places", "pe trainers"] + [k for k, _ in pythons]
    res = {m: {k: [] for k in kinds} for m in models}
    meta = {}
    with tempfile.TemporaryDirectory(prefix="pe-trainers-") as tmp:
        for r in range(args.rounds):
            for m in models:
                init = os.path.join(tmp, "init_%s.npz" % m)
                env = dict(os.environ, CPU_NUM="2", OMP_NUM_THREADS="1")
                res[m]["pe places"].append(run(worker_cmd(sys.executable, "pe_places", m, init, args), env,
                                               "PE 1 process x 2 places"))
                env = dict(os.environ, CPU_NUM="1", OMP_NUM_THREADS="1", **MPI_ENV)
                res[m]["pe trainers"].append(run(
                    ["mpirun", "--oversubscribe", "-np", "2", "--mca", "btl", "self,vader", "-x", "CPU_NUM",
                     "-x", "OMP_NUM_THREADS", "-x", "PYTHONPATH"] + worker_cmd(sys.executable, "pe_trainers", m,
                                                                               init, args),
                    env, "PE 2 processes x 1 place"))
                for k, py in pythons:
                    q = run_ddp(py, m, init, args)
                    res[m][k].append(q)
                    meta[k] = q["version"]
                print("round %d/%d %s, load %.1f: %s" % (r + 1, args.rounds, m, os.getloadavg()[0], "; ".join(
                    "%s %.0f/s (loss %.4f)" % (k, res[m][k][-1]["samples_per_s"], res[m][k][-1]["loss"])
                    for k in kinds)), flush=True)
    med = lambda rs: statistics.median(x["samples_per_s"] for x in rs)  # noqa: E731
    print("\nTraining throughput, global samples/s (median of %d rounds; batch %d, momentum %g lr %g; %s)"
          % (args.rounds, ct.BATCH, ct.MOMENTUM, ct.LR, ", ".join("%s = torch %s" % kv for kv in meta.items())))
    print("| model | " + " | ".join(kinds) + " | trainers / places | " +
          " | ".join("trainers / %s" % k for k, _ in pythons) + " |")
    print("|" + " --- |" * (len(kinds) + 2 + len(pythons)))
    for m in models:
        s = {k: med(res[m][k]) for k in kinds}
        print("| %s | %s | %.2f | %s |" % (m.upper(), " | ".join("%.0f" % s[k] for k in kinds),
                                          s["pe trainers"] / s["pe places"],
                                          " | ".join("%.2f" % (s["pe trainers"] / s[k]) for k, _ in pythons)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
