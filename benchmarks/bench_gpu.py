#!/usr/bin/env python3
"""benchmarks/bench_gpu.py — training steps on one GPU: `pe train --places cuda:0` vs PyTorch.

What: the training step (forward, backward, momentum update, the loss
fetched to the host) of examples/mlp_forward.pe (784-512-256-10, relu) and
examples/cnn_forward.pe (conv 1->8 5x5, pool, conv 8->16 5x5, pool, fc
784->64, fc 64->10), float32, at batch 128 and 256, on synthetic 28x28
images (the GPU machine need not hold Fashion-MNIST):

  pe     `pe train --places cuda:0`, its own steady-state report (median step
         time after the first 3 steps);
  torch  the same torch.nn model on the same GPU (TF32 off, as PE's default),
         torch.optim.SGD(momentum=0.9); median step time after 3 warm-up
         steps, each step ending with loss.item() as PE's ends with the loss
         fetch.

torch/PE = torch ms / PE ms (> 1: PE is faster). Each measurement is its own
process; the set repeats --rounds times and the table shows the median.
Then benchmarks/bench_nccl.c: NCCL allreduce bus bandwidth over the
visible GPUs (it says so and skips on one GPU).

    python3 benchmarks/bench_gpu.py [--steps 50] [--rounds 3] [--out FILE.md]
    (PE_BIN_DIR picks the pe binary; default build-gpu/bin, then build/bin)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "scripts"))
from train_ref import EXAMPLES, write_batches  # noqa: E402

TORCH_STEP = r'''
import sys, time, statistics, numpy as np, torch
model, batch, steps, data = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda:0")
if model == "mlp":
    net = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                              torch.nn.ReLU(), torch.nn.Linear(256, 10))
    x = torch.from_numpy(np.load(data + "/x_0.npy")).to(dev)
else:
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(8, 16, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    x = torch.from_numpy(np.load(data + "/img_0.npy")).to(dev)
y = torch.from_numpy(np.load(data + "/label_0.npy")).reshape(-1).to(dev)
net = net.to(dev)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
times = []
for s in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    loss.item()
    times.append(time.perf_counter() - t0)
print("torch_ms %.4f" % (1e3 * statistics.median(times[3:])))
'''


def pe_bin():
    d = os.environ.get("PE_BIN_DIR")
    if d:
        return os.path.join(d, "pe")
    for b in ("build-gpu", "build"):
        p = os.path.join(REPO, b, "bin", "pe")
        if os.path.exists(p):
            return p
    return "pe"


def make_data(root, model, batch):
    rng = np.random.default_rng(7)
    shape = (784,) if model == "mlp" else (1, 28, 28)
    x = rng.random((batch,) + shape, dtype=np.float32)
    y = rng.integers(0, 10, size=(batch, 1)).astype(np.int64)
    d = os.path.join(root, "%s_%d" % (model, batch))
    write_batches(d, model, [(x, y)])
    return d


def run_pe(model, data, steps):
    cmd = [pe_bin(), "train", os.path.join(EXAMPLES, "%s_forward.pe" % model), "--startup",
           os.path.join(EXAMPLES, "%s_forward_startup.pe" % model), "--loss", "loss", "--optimizer", "momentum",
           "--lr", "0.05", "--momentum", "0.9", "--data", data, "--steps", str(steps), "--places", "cuda:0"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("pe train failed: " + r.stderr.strip())
    m = re.search(r"steady state: ([0-9.]+) ms/step", r.stdout)
    return float(m.group(1))


def run_torch(model, batch, data, steps):
    r = subprocess.run([sys.executable, "-c", TORCH_STEP, model, str(batch), str(steps), data],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("torch failed: " + r.stderr.strip()[-500:])
    return float(re.search(r"torch_ms ([0-9.]+)", r.stdout).group(1))


def nccl_lines():
    exe = os.path.join(os.path.dirname(pe_bin()), "bench_nccl")
    if not os.path.exists(exe):
        return "    (bench_nccl not built next to %s)" % pe_bin()
    r = subprocess.run([exe], capture_output=True, text=True, timeout=600)
    return "\n".join("    " + l for l in (r.stdout + r.stderr).strip().splitlines())


def gpu_name():
    r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "unknown GPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for model in ("mlp", "cnn"):
            for batch in (128, 256):
                data = make_data(root, model, batch)
                pe_ms, torch_ms, err = [], [], None
                for _ in range(a.rounds):
                    try:
                        pe_ms.append(run_pe(model, data, a.steps))
                        torch_ms.append(run_torch(model, batch, data, a.steps))
                    except RuntimeError as e:
                        err = str(e)
                        break
                if err:
                    rows.append("| %s | %d | failed: %s | | |" % (model, batch, err.replace("|", "/")[:200]))
                    continue
                p, t = statistics.median(pe_ms), statistics.median(torch_ms)
                rows.append("| %s | %d | %.3f | %.3f | %.2f |" % (model, batch, p, t, t / p))
    lines = ["GPU: %s; %d steps, median of %d rounds" % (gpu_name(), a.steps, a.rounds), "",
             "| model | batch | PE ms/step | torch ms/step | torch/PE |", "|---|---|---|---|---|"] + rows + [
             "", "NCCL allreduce over the visible GPUs (benchmarks/bench_nccl.c; busbw as nccl-tests):", "",
             nccl_lines()]
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 1 if any("failed" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
