#!/usr/bin/python3
"""benchmarks/bench_train.py — one training step of the MLP and the CNN: `pe train` vs PyTorch.

What: the training step (forward, backward, momentum update, the loss
fetched to the host) of examples/mlp_forward.pe (784-512-256-10, relu)
and examples/cnn_forward.pe (conv 1->8 5x5, pool, conv 8->16 5x5, pool,
fc 784->64, fc 64->10), float32, batch 128 of Fashion-MNIST training
images, momentum (lr 0.05, mu 0.9), at 1 and 2 threads:

  pe     `pe train --places cpu:1` with OMP_NUM_THREADS=T (T threads inside
         each kernel); its own steady-state report (median step time after
         the first 3 steps; the .npy reads are outside the timed step). At 2
         threads also `--places cpu:2` (two places, 1 thread each, the batch
         split 64/64 and the gradients summed).
  torch  the same torch.nn model from the same initial weights (PE's
         checkpoint), torch.optim.SGD(momentum=0.9), the same batches,
         torch.set_num_threads(T); median step time after the first 3 steps,
         each step ending with loss.item() as PE's ends with the loss fetch.

How: every measurement is its own process (two OpenMP runtimes in one
process would fight over the cores), PE and torch alternate, and the whole
set repeats --rounds times; the table shows the median over rounds of each
run's median (and the best round: on a shared machine the least disturbed
run), and torch/PE = torch ms / PE ms (> 1: PE is faster). Both sides also
report the median CPU time of the process per step (all its threads): at
one thread it is the step time minus the time other jobs on the machine
took the core, the steadiest figure on a loaded machine; at two threads it
adds both threads' time (spin-waiting included). Both sides'
mean loss over the timed steps is printed as a check that they did the
same work (equal to 4 digits for the MLP; the CNN at lr 0.05 is chaotic at
the rounding level, so its two curves drift apart by about 1% in 40 steps,
see docs/benchmarks.md "Training parity"). Two-thread figures need an idle
machine: with other jobs on the cores, a spinning OpenMP thread waits for a
descheduled team-mate and steps of either framework slow down up to 50x
(OMP_WAIT_POLICY=PASSIVE does not help here: the team then runs one thread
at a time, CPU time = wall time).

    /usr/bin/python3 benchmarks/bench_train.py [--steps 40] [--rounds 3] [--threads 1,2]
    (PE_BIN_DIR=/path/to/bin picks the pe binary; default build/bin)
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
from pe_json import pe_bin  # noqa: E402
from train_ref import (EXAMPLES, MODEL_INPUT, fashion_mnist, make_batches, pe_train, read_safetensors,  # noqa: E402
                       steady_ms, torch_model, write_batches)

BATCH, LR, MU, WARMUP = 128, 0.05, 0.9, 3


def torch_worker(args):
    """Runs in its own process: trains args.steps steps, prints JSON {ms, loss}."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    name, _ = MODEL_INPUT[args.model]
    net = torch_model(args.model, read_safetensors(args.init))
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MU)
    n = len([f for f in os.listdir(args.data) if f.startswith("label_")])
    batches = [(torch.from_numpy(np.load(os.path.join(args.data, "%s_%d.npy" % (name, k)))),
                torch.from_numpy(np.load(os.path.join(args.data, "label_%d.npy" % k)).reshape(-1)))
               for k in range(n)]
    times, cpu, losses = [], [], []
    for s in range(args.steps):
        x, y = batches[s % n]
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(json.dumps({"ms": 1e3 * statistics.median(times[WARMUP:]), "cpu": 1e3 * statistics.median(cpu[WARMUP:]),
                      "loss": float(np.mean(losses[WARMUP:]))}))


def omp_env(threads):
    return {"OMP_NUM_THREADS": str(threads)}


def run_torch(model, threads, data, init, steps):
    env = dict(os.environ, **omp_env(threads))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker", "--model", model,
                        "--threads", str(threads), "--data", data, "--init", init, "--steps", str(steps)],
                       capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        sys.exit("torch worker failed: " + r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_pe(model, threads, places, data, steps):
    prog = os.path.join(EXAMPLES, "%s_forward.pe" % model)
    startup = os.path.join(EXAMPLES, "%s_forward_startup.pe" % model)
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "loss.npy")
        r = pe_train(prog, startup, data, steps, ["--optimizer", "momentum", "--lr", str(LR), "--momentum", str(MU)],
                     log=log, places="cpu:%d" % places, extra=["--print-every", "0"],
                     env=omp_env(threads), timeout=1800)
        ms, cpu = steady_ms(r.stdout)
        return {"ms": ms, "cpu": cpu, "loss": float(np.mean(np.load(log)[WARMUP:]))}


def pe_command(model, threads, places, steps):
    return ("OMP_NUM_THREADS=%d %s train examples/%s_forward.pe --startup examples/%s_forward_startup.pe "
            "--loss loss --optimizer momentum --lr %g --momentum %g --data DIR --steps %d --places cpu:%d"
            % (threads, os.path.relpath(pe_bin()), model, model, LR, MU, steps, places))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="steps per run (the first 3 are not timed)")
    ap.add_argument("--rounds", type=int, default=3, help="repetitions of the whole set (median taken)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        args.threads = int(args.threads)
        return torch_worker(args)
    if not os.path.exists(pe_bin()):
        sys.exit("pe binary not found at %s (set PE_BIN_DIR)" % pe_bin())
    threads = [int(t) for t in args.threads.split(",")]
    models = args.models.split(",")
    images, labels = fashion_mnist("train")
    with tempfile.TemporaryDirectory() as tmp:
        data, init = {}, {}
        for m in models:
            data[m] = os.path.join(tmp, m)
            write_batches(data[m], m, make_batches(m, images, labels, min(args.steps, 50), BATCH))
            init[m] = os.path.join(tmp, m + "_init.safetensors")
            pe_train(os.path.join(EXAMPLES, "%s_forward.pe" % m), os.path.join(EXAMPLES, "%s_forward_startup.pe" % m),
                     None, 0, ["--optimizer", "momentum"], save=init[m])
        configs = [(m, t, p) for m in models for t in threads for p in ([1, t] if t > 1 else [1])]
        res = {c: {"pe": [], "torch": []} for c in configs}
        for rnd in range(args.rounds):
            for m, t, p in configs:
                res[(m, t, p)]["pe"].append(run_pe(m, t, p, data[m], args.steps))
                if p == 1:
                    res[(m, t, p)]["torch"].append(run_torch(m, t, data[m], init[m], args.steps))
            print("round %d of %d done" % (rnd + 1, args.rounds), file=sys.stderr)
        print("| model | threads | PE places | PE ms/step median (best) | PyTorch ms/step median (best) "
              "| torch/PE median (best) | CPU ms/step PE / torch | torch/PE CPU | PE samples/s | "
              "mean loss PE / torch |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for m, t, p in configs:
            pe_res, t_res = res[(m, t, p)]["pe"], res[(m, t, 1)]["torch"]
            pe_r, t_r = [r["ms"] for r in pe_res], [r["ms"] for r in t_res]
            pe_ms, t_ms = statistics.median(pe_r), statistics.median(t_r)
            pe_c, t_c = statistics.median(r["cpu"] for r in pe_res), statistics.median(r["cpu"] for r in t_res)
            print("| %s | %d | %d | %.2f (%.2f) | %.2f (%.2f) | %.2f (%.2f) | %.2f / %.2f | %.2f | %.0f | %.4f / %.4f |"
                  % (m, t, p, pe_ms, min(pe_r), t_ms, min(t_r), t_ms / pe_ms, min(t_r) / min(pe_r), pe_c, t_c,
                     t_c / pe_c, BATCH / pe_ms * 1e3, pe_res[0]["loss"], t_res[0]["loss"]))
        print("\nPE commands (DIR: %d batches of %d, <var>_<k>.npy):" % (min(args.steps, 50), BATCH))
        for m, t, p in configs:
            print("  " + pe_command(m, t, p, args.steps))


if __name__ == "__main__":
    main()
