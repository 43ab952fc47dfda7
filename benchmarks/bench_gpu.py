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

And a larger model, ResNet-20 on 3x32x32 images at batch 256 (PE_RESNET
below: conv+batch_norm basic blocks), through the Python API
(fluid.Executor(CUDAPlace(0)), a new numpy batch fed every step) against
the same torch model fed by torch.from_numpy(x).to(dev); PE with its
pinned staging of feeds and fetches (the default), with PE_CUDNN_API=graph
(cuDNN's graph API for the convolutions instead of its classic one), with PE_CUDA_PINNED=0,
with PE_CUDNN_EXHAUSTIVE_SEARCH=1 (cuDNN's timed choice among the
deterministic algorithms) and with PE_CUDNN_DETERMINISTIC=0 (any algorithm,
as PyTorch's default).

torch/PE = torch ms / PE ms (> 1: PE is faster). Each measurement is its own
process; the set repeats --rounds times and the table shows the median.
Then benchmarks/bench_nccl.c: NCCL allreduce bus bandwidth over the
visible GPUs (it says so and skips on one GPU).

    python3 benchmarks/bench_gpu.py [--steps 50] [--rounds 3] [--models mlp,cnn,resnet] [--out FILE.md]
    python3 benchmarks/bench_gpu.py --check-cpu   # the ResNet-20 script, 4 steps on the CPU
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

# The larger model: a ResNet-20 for 3x32x32 images (3 stages of 3 basic
# blocks, 16/32/64 channels, conv3x3 without bias + batch_norm, avg pool,
# fc 10), SGD momentum 0.9, batch 256. Both sides get a new host (numpy)
# batch every step, as a training loop over a reader does: PE through
# fluid.Executor(CUDAPlace(0)).run(feed=...), fetching the loss; torch through
# torch.from_numpy(x).to(dev) and loss.item().
PE_RESNET = r'''
import sys, time, statistics, numpy as np
import pe as paddle
import pe.fluid as fluid
batch, steps, place = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def conv_bn(x, ch, k, stride, pad, act="relu"):
    y = fluid.layers.conv2d(input=x, num_filters=ch, filter_size=k, stride=stride, padding=pad, bias_attr=False)
    return fluid.layers.batch_norm(input=y, act=act)

def block(x, cin, cout, stride):
    y = conv_bn(x, cout, 3, stride, 1)
    y = conv_bn(y, cout, 3, 1, 1, act=None)
    s = conv_bn(x, cout, 1, stride, 0, act=None) if cin != cout else x
    return fluid.layers.elementwise_add(x=y, y=s, act="relu")

main, startup = fluid.Program(), fluid.Program()
main.random_seed = startup.random_seed = 1
with fluid.program_guard(main, startup):
    img = fluid.layers.data(name="img", shape=[3, 32, 32], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    h = conv_bn(img, 16, 3, 1, 1)
    for cin, cout, stride in ((16, 16, 1), (16, 32, 2), (32, 64, 2)):
        for i in range(3):
            h = block(h, cin if i == 0 else cout, cout, stride if i == 0 else 1)
    h = fluid.layers.pool2d(input=h, pool_size=8, pool_type="avg", pool_stride=1)
    logits = fluid.layers.fc(input=h, size=10)
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
    fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
exe = fluid.Executor(fluid.CUDAPlace(0) if place == "cuda" else fluid.CPUPlace())
exe.run(startup)
rng = np.random.default_rng(7)
xs = [rng.random((batch, 3, 32, 32), dtype=np.float32) for _ in range(4)]
ys = [rng.integers(0, 10, size=(batch, 1)).astype(np.int64) for _ in range(4)]
times = []
for s in range(steps):
    t0 = time.perf_counter()
    l, = exe.run(main, feed={"img": xs[s % 4], "label": ys[s % 4]}, fetch_list=[loss])
    times.append(time.perf_counter() - t0)
assert np.isfinite(l).all()
print("pe_ms %.4f" % (1e3 * statistics.median(times[3:])))
'''

TORCH_RESNET = r'''
import sys, time, statistics, numpy as np, torch
batch, steps = int(sys.argv[1]), int(sys.argv[2])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda:0")
nn = torch.nn

def conv_bn(cin, cout, k, stride, pad, act=True):
    m = [nn.Conv2d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*(m + [nn.ReLU()] if act else m))

class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a, self.b = conv_bn(cin, cout, 3, stride, 1), conv_bn(cout, cout, 3, 1, 1, act=False)
        self.s = conv_bn(cin, cout, 1, stride, 0, act=False) if cin != cout else nn.Identity()
    def forward(self, x):
        return torch.relu(self.b(self.a(x)) + self.s(x))

layers = [conv_bn(3, 16, 3, 1, 1)]
for cin, cout, stride in ((16, 16, 1), (16, 32, 2), (32, 64, 2)):
    for i in range(3):
        layers.append(Block(cin if i == 0 else cout, cout, stride if i == 0 else 1))
net = nn.Sequential(*layers, nn.AvgPool2d(8), nn.Flatten(), nn.Linear(64, 10)).to(dev)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
rng = np.random.default_rng(7)
xs = [rng.random((batch, 3, 32, 32), dtype=np.float32) for _ in range(4)]
ys = [rng.integers(0, 10, size=(batch,)).astype(np.int64) for _ in range(4)]
times = []
for s in range(steps):
    t0 = time.perf_counter()
    x, y = torch.from_numpy(xs[s % 4]).to(dev), torch.from_numpy(ys[s % 4]).to(dev)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    loss.item()
    times.append(time.perf_counter() - t0)
print("torch_ms %.4f" % (1e3 * statistics.median(times[3:])))
'''


def run_script(code, args, key, env=None):
    r = subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, **(env or {})))
    if r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (key, r.stderr.strip()[-500:]))
    return float(re.search(key + r" ([0-9.]+)", r.stdout).group(1))


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
    return run_script(TORCH_STEP, [model, batch, steps, data], "torch_ms")


def resnet_rows(steps, rounds, batch=256):
    """ResNet-20 at `batch`: PE (defaults, then each variant's environment) vs torch."""
    variants = [("resnet20", {}), ("resnet20, PE_CUDNN_API=graph", {"PE_CUDNN_API": "graph"}),
                ("resnet20, PE_CUDA_PINNED=0", {"PE_CUDA_PINNED": "0"}),
                ("resnet20, PE_CUDNN_EXHAUSTIVE_SEARCH=1", {"PE_CUDNN_EXHAUSTIVE_SEARCH": "1"}),
                ("resnet20, PE_CUDNN_DETERMINISTIC=0", {"PE_CUDNN_DETERMINISTIC": "0"})]
    pe_ms, torch_ms = {name: [] for name, _ in variants}, []
    try:
        for _ in range(rounds):
            for name, env in variants:
                pe_ms[name].append(run_script(PE_RESNET, [batch, steps, "cuda"], "pe_ms", env))
            torch_ms.append(run_script(TORCH_RESNET, [batch, steps], "torch_ms"))
    except RuntimeError as e:
        return ["| resnet20 | %d | failed: %s | | |" % (batch, str(e).replace("|", "/").replace("\n", " ")[:300])]
    t = statistics.median(torch_ms)
    return ["| %s | %d | %.3f | %.3f | %.2f |" % (name, batch, statistics.median(pe_ms[name]), t,
                                                   t / statistics.median(pe_ms[name])) for name, _ in variants]


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
    ap.add_argument("--models", default="mlp,cnn,resnet", help="comma-separated: mlp, cnn, resnet")
    ap.add_argument("--check-cpu", action="store_true",
                    help="run only PE's ResNet-20 script on the CPU for 4 steps (checks the script; no GPU needed)")
    a = ap.parse_args()
    if a.check_cpu:
        print("pe ResNet-20 on cpu: %.1f ms/step" % run_script(PE_RESNET, [8, 4, "cpu"], "pe_ms"))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for model in a.models.split(","):
            if model == "resnet":
                rows += resnet_rows(a.steps, a.rounds)
                continue
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
