#!/usr/bin/python3
"""benchmarks/bench_jit.py — one training step of a pe.nn MLP (or CNN, --model cnn): eager vs pe.jit.to_static.

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
  every pass to_static with build_strategy=pe.static.BuildStrategy(): also
             the CNN layout pass (NHWC) and the conv bias fusion, on the
             traced forward + backward before the split (values to float
             tolerance, not the eager bits).
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

    OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 benchmarks/bench_jit.py [--steps 30] [--rounds 5] \
        [--model mlp|cnn] [--batch 128]
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


class CNN(nn.Layer):
    """conv 5x5 1->16, relu, pool 2; conv 5x5 16->32, relu, pool 2; linear 1568->10 (28x28 images)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2D(1, 16, 5, padding=2)
        self.c2 = nn.Conv2D(16, 32, 5, padding=2)
        self.pool = nn.MaxPool2D(2)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        r = nn.functional.relu
        return self.fc(self.flat(self.pool(r(self.c2(self.pool(r(self.c1(x))))))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    a = ap.parse_args()
    pe.disable_static()
    pe.seed(0)
    make = MLP if a.model == "mlp" else CNN
    eager_m = make()
    init = {k: v.numpy() for k, v in eager_m.state_dict().items()}
    off = pe.static.BuildStrategy()  # its defaults fuse: switch every pass off
    off.fuse_gemm_epilogue = off.fuse_elewise_add_act_ops = off.conv_nhwc = off.fuse_conv_bias = False
    off.memory_optimize = off.enable_inplace = False
    models = [("eager", eager_m)]
    for name, bs in (("to_static", None), ("every pass", pe.static.BuildStrategy()), ("no passes", off)):
        m = make()
        m.set_state_dict(init)
        models.append((name, pe.jit.to_static(m, build_strategy=bs)))
    rs = np.random.RandomState(0)
    n_batches = 8
    shape = [a.batch, 784] if a.model == "mlp" else [a.batch, 1, 28, 28]
    data = [(pe.to_tensor(rs.rand(*shape).astype("float32")),
             pe.to_tensor(rs.randint(0, 10, [a.batch]).astype("int64"))) for _ in range(n_batches)]
    loss_fn = nn.CrossEntropyLoss()
    runs = {}
    for name, m in models:
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
    print("%s, batch %d, SGD; %d rounds x %d steps each, median step time" % (
        "MLP 784-512-256-10" if a.model == "mlp" else "CNN " + CNN.__doc__.split(" (")[0], a.batch, a.rounds, a.steps))
    print("%-10s %10s %14s %14s" % ("mode", "ms/step", "CPU ms/step", "last loss"))
    for k, r in runs.items():
        print("%-10s %10.2f %14.2f %14.6f" % (k, med[k], cpu[k], r["loss"]))
    print("eager / to_static = %.2f (CPU %.2f), eager / to_static with every pass = %.2f (CPU %.2f), "
          "eager / to_static without passes = %.2f (CPU %.2f)" % (
              med["eager"] / med["to_static"], cpu["eager"] / cpu["to_static"],
              med["eager"] / med["every pass"], cpu["eager"] / cpu["every pass"],
              med["eager"] / med["no passes"], cpu["eager"] / cpu["no passes"]))


if __name__ == "__main__":
    main()
