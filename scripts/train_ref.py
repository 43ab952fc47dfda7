"""scripts/train_ref.py — Fashion-MNIST batches, safetensors reading and the
PyTorch twins of the example training programs (examples/*_forward.json).

Used by tests/python/test_train_parity.py and benchmarks/bench_train.py.

    from train_ref import fashion_mnist, write_batches, read_safetensors, torch_model, pe_train
    x, y = fashion_mnist("train")                      # uint8 [60000, 28, 28], uint8 [60000]
    write_batches("batches/", "mlp", x, y, n=200, batch=64)   # x_<k>.npy, label_<k>.npy
    pe_train("examples/mlp_forward.pe", "examples/mlp_forward_startup.pe", "batches/",
             steps=0, optimizer=["--optimizer", "sgd"], save="init.safetensors")
    model = torch_model("mlp", read_safetensors("init.safetensors"))

How: the idx files are parsed with numpy (big-endian dims after a 4-byte
magic); safetensors is an 8-byte little-endian header length, a JSON header
{name: {dtype, shape, data_offsets}} and the raw data, read with numpy
alone so the check does not depend on the format's own library. The torch
models mirror the PE programs layer by layer; PE's mul weight is [in, out],
torch Linear's is [out, in] (transposed on load); conv filters are
[M, C, kh, kw] in both.
"""
import gzip
import json
import os
import re
import subprocess

import numpy as np

from pe_json import REPO, pe_bin

FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
EXAMPLES = os.path.join(REPO, "examples")

# model -> (the fed image var, its shape per sample)
MODEL_INPUT = {"mlp": ("x", (784,)), "cnn": ("img", (1, 28, 28))}


def _idx(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    if b[:2] != b"\0\0" or b[2] != 8:
        raise ValueError("%s: not an idx file of uint8" % path)
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def fashion_mnist(split="train", root=FMNIST_DIR):
    """(images uint8 [N, 28, 28], labels uint8 [N]) of the train or t10k split."""
    pre = "train" if split == "train" else "t10k"
    return (_idx(os.path.join(root, "%s-images-idx3-ubyte.gz" % pre)),
            _idx(os.path.join(root, "%s-labels-idx1-ubyte.gz" % pre)))


def make_batches(model, images, labels, n, batch):
    """The first n * batch samples as n batches: [(x float32 in [0, 1], label int64 [B, 1])]."""
    name, shape = MODEL_INPUT[model]
    out = []
    for k in range(n):
        x = images[k * batch:(k + 1) * batch].astype(np.float32) / np.float32(255.0)
        y = labels[k * batch:(k + 1) * batch].astype(np.int64).reshape(-1, 1)
        out.append((np.ascontiguousarray(x.reshape((batch,) + shape)), y))
    return out


def write_batches(directory, model, batches):
    """Writes batches as `pe train --data` reads them: <var>_<k>.npy."""
    os.makedirs(directory, exist_ok=True)
    name, _ = MODEL_INPUT[model]
    for k, (x, y) in enumerate(batches):
        np.save(os.path.join(directory, "%s_%d.npy" % (name, k)), x)
        np.save(os.path.join(directory, "label_%d.npy" % k), y)


_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64,
              "U8": np.uint8, "BOOL": np.bool_, "F16": np.float16}


def read_safetensors(path):
    """{name: numpy array} of a safetensors file (metadata skipped)."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], _ST_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def pe_train(program, startup, data, steps, optimizer, log=None, save=None, params=None, places=None,
             extra=(), env=None, timeout=600):
    """Runs `pe train`; returns the CompletedProcess (raises with stderr on failure)."""
    cmd = [pe_bin(), "train", program, "--loss", "loss", "--steps", str(steps)] + list(optimizer)
    if startup:
        cmd += ["--startup", startup]
    if steps:
        cmd += ["--data", data]
    for flag, v in (("--log", log), ("--save", save), ("--params", params), ("--places", places)):
        if v:
            cmd += [flag, v]
    cmd += list(extra)
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(env or {})
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    if r.returncode != 0:
        raise RuntimeError("pe train exited %d: %s\n  command: %s" % (r.returncode, r.stderr.strip(), " ".join(cmd)))
    return r


def steady_ms(stdout):
    """(wall, CPU) ms/step of the steady-state line `pe train` prints."""
    m = re.search(r"steady state: ([0-9.]+) ms/step.*CPU time ([0-9.]+) ms/step", stdout)
    if not m:
        raise ValueError("no steady-state line in pe train's output:\n" + stdout)
    return float(m.group(1)), float(m.group(2))


# ---- the PyTorch twins ------------------------------------------------------------

def pe_param_names(model):
    """PE parameter names in the order of torch_model(model).parameters()."""
    layers = {"mlp": ["fc_0", "fc_1", "fc_2"], "cnn": ["conv2d_0", "conv2d_1", "fc_0", "fc_1"]}[model]
    return [n for l in layers for n in (l + ".w_0", l + ".b_0")]


def pe_to_torch(name, a):
    """A PE tensor as the matching torch parameter (or optimizer state) holds it:
    fc weights (and their accumulators) transposed, [in, out] -> [out, in]."""
    return np.ascontiguousarray(a.T) if name.startswith("fc_") and ".w_0" in name else a


def torch_model(model, params, dtype=None):
    """A torch.nn.Module equal to examples/<model>_forward.json with the weights
    of `params` (from a PE checkpoint), in `dtype` (default float32)."""
    import torch
    import torch.nn as nn
    if model == "mlp":
        net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    elif model == "cnn":
        net = nn.Sequential(nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    else:
        raise KeyError(model)
    net = net.to(dtype or torch.float32)
    with torch.no_grad():
        for name, p in zip(pe_param_names(model), net.parameters()):
            a = pe_to_torch(name, params[name])
            if list(a.shape) != list(p.shape):
                raise ValueError("%s: PE shape %s, torch %s" % (name, a.shape, tuple(p.shape)))
            p.copy_(torch.from_numpy(a.copy()))
    return net


def torch_load_optimizer_state(net, opt, model, kind, ckpt, step):
    """Puts the optimizer state of a PE checkpoint (after `step` steps) into a
    torch optimizer: momentum's <param>_velocity_0 -> momentum_buffer; adam's
    <param>_moment1_0 / _moment2_0 -> exp_avg / exp_avg_sq, step -> step."""
    import torch
    for name, p in zip(pe_param_names(model), net.parameters()):
        st = opt.state[p]
        if kind == "momentum":
            st["momentum_buffer"] = torch.from_numpy(pe_to_torch(name, ckpt[name + "_velocity_0"]).copy()).to(p.dtype)
        elif kind == "adam":
            st["step"] = torch.tensor(float(step))
            st["exp_avg"] = torch.from_numpy(pe_to_torch(name, ckpt[name + "_moment1_0"]).copy()).to(p.dtype)
            st["exp_avg_sq"] = torch.from_numpy(pe_to_torch(name, ckpt[name + "_moment2_0"]).copy()).to(p.dtype)


def torch_optimizer(net, kind, lr, momentum=0.9, betas=(0.9, 0.999), eps=1e-8):
    import torch
    if kind == "sgd":
        return torch.optim.SGD(net.parameters(), lr=lr)
    if kind == "momentum":
        return torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    if kind == "adam":
        return torch.optim.Adam(net.parameters(), lr=lr, betas=betas, eps=eps)
    raise KeyError(kind)


def torch_train(net, opt, batches, steps, on_step=None):
    """Trains like `pe train`: batch k = step mod len(batches), mean cross
    entropy; returns the loss of each step (float64 [steps])."""
    import torch
    import torch.nn.functional as F
    tb = [(torch.from_numpy(x), torch.from_numpy(y.reshape(-1))) for x, y in batches]
    losses = np.zeros(steps)
    for s in range(steps):
        x, y = tb[s % len(tb)]
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses[s] = loss.item()
        if on_step:
            on_step(s)
    return losses
