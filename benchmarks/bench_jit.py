#!/usr/bin/python3
"""benchmarks/bench_jit.py — one training step of a pe.nn MLP: eager vs pe.jit.to_static.

What: the Paddle 2.x dygraph step — loss = CrossEntropyLoss(model(x), y);
loss.backward(); opt.step(); opt.clear_grad(); float(loss) — of the MLP
784-512-256-10 (relu), float32, batch 128 of Fashion-MNIST-shaped data
(seeded random images [128, 784] in [0, 1), labels 0..9), SGD lr 0.05, run
two ways in one process from the same initial weights:

  eager      the Layer as written: every op one pe_eager_run call, the
             backward by the eager tape (per-op backward ops).
  to_static  pe.jit.to_static of a copy of the Layer: the forward traced once
             into a static program run on the static engine (a one-place
             ParallelExecutor with to_static's default passes:
             fuse_gemm_epilogue and fuse_elewise_add_act_ops, run on the
             traced forward + backward before they are split, then
             memory_optimize and enable_inplace), the
             backward program (pe.static.gradients) run by loss.backward(),
             the update by the same eager optimizer step.
  no passes  the same with a BuildStrategy that switches every pass off (no
             fusion, no memory plan: matmul_v2, bias adds, relus and their
             grads as traced).

How: the three alternate in rounds (--rounds, each --steps steps after 3
warm-up steps); the table gives each one's median step time over all timed
steps, the median CPU time of the process per step (at one thread: the
step time less what other jobs took from the core, the steadier figure on
a shared machine), and the ratios eager / to_static (> 1: to_static is
faster). The last losses are printed: the runs take the same steps, so
they agree. Run it with OMP_NUM_THREADS=1 (one thread per kernel):

    OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 benchmarks/bench_jit.py [--steps 30] [--rounds 5]
"""
import argparse
import statistics
import time

import numpy as np

import pe
import pe.nn as nn


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        r = nn.functional.relu
        return self.fc3(r(self.fc2(r(self.fc1(x)))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    a = ap.parse_args()
    pe.disable_static()
    pe.seed(0)
    eager_m = MLP()
    init = {k: v.numpy() for k, v in eager_m.state_dict().items()}
    static_m, plain_m = MLP(), MLP()
    static_m.set_state_dict(init)
    plain_m.set_state_dict(init)
    static_m = pe.jit.to_static(static_m)
    off = pe.static.BuildStrategy()  # its defaults fuse: switch every pass off
    off.fuse_gemm_epilogue = off.fuse_elewise_add_act_ops = off.conv_nhwc = off.fuse_conv_bias = False
    off.memory_optimize = off.enable_inplace = False
    plain_m = pe.jit.to_static(plain_m, build_strategy=off)
    rs = np.random.RandomState(0)
    n_batches = 8
    data = [(pe.to_tensor(rs.rand(a.batch, 784).astype("float32")),
             pe.to_tensor(rs.randint(0, 10, [a.batch]).astype("int64"))) for _ in range(n_batches)]
    loss_fn = nn.CrossEntropyLoss()
    runs = {}
    for name, m in (("eager", eager_m), ("to_static", static_m), ("no passes", plain_m)):
        runs[name] = {"model": m, "opt": pe.optimizer.SGD(learning_rate=0.05, parameters=m.parameters()),
                      "times": [], "cpu": [], "step": 0, "loss": None}

    def step(r):
        xb, yb = data[r["step"] % n_batches]
        r["step"] += 1
        loss = loss_fn(r["model"](xb), yb)
        loss.backward()
        r["opt"].step()
        r["opt"].clear_grad()
        r["loss"] = float(loss)

    for r in runs.values():
        for _ in range(3):
            step(r)
    for _ in range(a.rounds):
        for r in runs.values():
            for _ in range(a.steps):
                t0, c0 = time.perf_counter(), time.process_time()
                step(r)
                r["times"].append(time.perf_counter() - t0)
                r["cpu"].append(time.process_time() - c0)
    med = {k: statistics.median(r["times"]) * 1e3 for k, r in runs.items()}
    cpu = {k: statistics.median(r["cpu"]) * 1e3 for k, r in runs.items()}
    print("MLP 784-512-256-10, batch %d, SGD; %d rounds x %d steps each, median step time" % (
        a.batch, a.rounds, a.steps))
    print("%-10s %10s %14s %14s" % ("mode", "ms/step", "CPU ms/step", "last loss"))
    for k, r in runs.items():
        print("%-10s %10.2f %14.2f %14.6f" % (k, med[k], cpu[k], r["loss"]))
    print("eager / to_static = %.2f (CPU %.2f), eager / to_static without passes = %.2f (CPU %.2f)" % (
        med["eager"] / med["to_static"], cpu["eager"] / cpu["to_static"],
        med["eager"] / med["no passes"], cpu["eager"] / cpu["no passes"]))


if __name__ == "__main__":
    main()
