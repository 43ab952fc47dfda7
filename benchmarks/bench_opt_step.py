#!/usr/bin/python3
"""benchmarks/bench_opt_step.py — the eager optimizer step's cost per parameter (issue 15).

What: N eager Linear(16, 16) layers (2N parameters of 256 and 16 floats: the
per-parameter overhead of `step()`, not its arithmetic, is what shows), one
backward, then `opt.step()` timed in loops of 200 (the best of 5 loops), for
SGD, Momentum, Adam and AdamW. Prints µs per step and per parameter, and a
checksum of the parameters after the steps: two builds that take the same
steps print the same checksum.

    OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 benchmarks/bench_opt_step.py [--layers 50]

Instructions per step (repeatable on a busy machine): run under callgrind
with --kinds adam --rounds 1 --steps 5 and --steps 25; the difference of
the totals over 20 is one step's.
"""
import argparse
import time

import numpy as np

import pe


def run(kind, layers, steps, rounds):
    pe.disable_static()
    pe.seed(0)
    model = pe.nn.LayerList([pe.nn.Linear(16, 16) for _ in range(layers)])
    params = model.parameters()
    make = {"sgd": pe.optimizer.SGD, "momentum": pe.optimizer.Momentum, "adam": pe.optimizer.Adam,
            "adamw": pe.optimizer.AdamW}[kind]
    opt = make(learning_rate=1e-3, parameters=params)
    y = pe.to_tensor(np.random.default_rng(0).standard_normal((4, 16)).astype("float32"))
    for layer in model:
        y = layer(y)
    y.sum().backward()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            opt.step()
        best = min(best, (time.perf_counter() - t) / steps)
    check = sum(float(p.numpy().astype(np.float64).sum()) for p in params)
    print("%-8s %d params: %7.1f us per step, %5.2f us per parameter; checksum %.9g" % (
        kind, len(params), best * 1e6, best * 1e6 / len(params), check))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--kinds", default="sgd,momentum,adam,adamw")
    ap.add_argument("--steps", type=int, default=200, help="steps per timed loop")
    ap.add_argument("--rounds", type=int, default=5, help="timed loops (the best is reported)")
    args = ap.parse_args()
    for kind in args.kinds.split(","):
        run(kind, args.layers, args.steps, args.rounds)


if __name__ == "__main__":
    main()
