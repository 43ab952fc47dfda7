"""tests/python/test_cuda_train.py — training on CUDA places against the CPU run.

The examples' MLP and CNN (examples/{mlp,cnn}_forward.pe with their
startup programs) are trained 20 steps by `pe train` on cpu:0 and on
cuda:0 — the startup program included, so the GPU draws its own initial
weights — on the same 8 batches of 32 synthetic 28x28 images (seeded: the
test needs no dataset). The per-step losses and the final parameters
(`--save`, a safetensors checkpoint) must agree within float32 rounding of
a different summation order (cuBLAS / cuDNN tile their sums). Also:

  - momentum and adam;
  - two GPUs (`--places cuda:2`) against two CPU places (`--places cpu:2`),
    where two GPUs exist;
  - determinism: two runs on cuda:0 give bit-identical losses and parameters.

Without a GPU (or in a CPU-only build) each test is skipped, visibly, with
`pe`'s own reason (pytest -rs prints it).

    PE_BIN_DIR=build/bin python3 -m pytest -q -rs tests/python/test_cuda_train.py
"""
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pe_json import cuda_unavailable, pe_bin  # noqa: E402
from train_ref import EXAMPLES, read_safetensors, write_batches  # noqa: E402

STEPS = 20
OPTIMIZERS = {
    "momentum": ["--optimizer", "momentum", "--lr", "0.05", "--momentum", "0.9"],
    "adam": ["--optimizer", "adam", "--lr", "0.002"],
}
# |cuda - cpu| <= RTOL * |cpu| + ATOL * max|cpu| after 20 steps
LOSS_RTOL = {"mlp": 1e-4, "cnn": 5e-4}
PARAM_RTOL, PARAM_ATOL = 1e-3, 1e-4


def need_gpus(n):
    why = cuda_unavailable(n - 1)
    if why:
        pytest.skip("SKIPPED: needs %d usable GPU%s: %s" % (n, "s" if n > 1 else "", why))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """8 batches of 32 synthetic images (blobs of class-dependent brightness) per model."""
    rng = np.random.default_rng(2026)
    labels = rng.integers(0, 10, size=256).astype(np.int64)
    base = rng.random((10, 28, 28)).astype(np.float32)
    images = np.clip(base[labels] * 0.7 + 0.3 * rng.random((256, 28, 28), dtype=np.float32), 0, 1)
    dirs = {}
    for model, shape in (("mlp", (784,)), ("cnn", (1, 28, 28))):
        d = tmp_path_factory.mktemp("data_" + model)
        batches = [(np.ascontiguousarray(images[k * 32:(k + 1) * 32].reshape((32,) + shape)),
                    labels[k * 32:(k + 1) * 32].reshape(-1, 1)) for k in range(8)]
        write_batches(str(d), model, batches)
        dirs[model] = str(d)
    return dirs


def train(model, data, places, opt, out):
    os.makedirs(out, exist_ok=True)
    log, ckpt = os.path.join(out, "loss.npy"), os.path.join(out, "params.safetensors")
    cmd = [pe_bin(), "train", os.path.join(EXAMPLES, "%s_forward.pe" % model),
           "--startup", os.path.join(EXAMPLES, "%s_forward_startup.pe" % model), "--loss", "loss",
           "--data", data, "--steps", str(STEPS), "--places", places, "--log", log, "--save", ckpt] + OPTIMIZERS[opt]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, "pe train --places %s failed (%d): %s" % (places, r.returncode, r.stderr)
    return np.load(log), read_safetensors(ckpt)


def assert_close(model, what, cpu, gpu):
    l_cpu, p_cpu = cpu
    l_gpu, p_gpu = gpu
    assert np.isfinite(l_gpu).all(), "%s: non-finite loss on the GPU: %s" % (what, l_gpu)
    np.testing.assert_allclose(l_gpu, l_cpu, rtol=LOSS_RTOL[model], atol=0,
                               err_msg="%s: per-step losses, CUDA vs CPU" % what)
    assert set(p_gpu) == set(p_cpu), "%s: the checkpoints hold different vars" % what
    for name in sorted(p_cpu):
        a, b = p_cpu[name].astype(np.float64), p_gpu[name].astype(np.float64)
        atol = PARAM_ATOL * max(np.abs(a).max() if a.size else 0.0, 1e-30)
        np.testing.assert_allclose(b, a, rtol=PARAM_RTOL, atol=atol,
                                   err_msg="%s: %s after %d steps, CUDA vs CPU" % (what, name, STEPS))


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("opt", ["momentum", "adam"])
def test_one_gpu_matches_cpu(model, opt, data, tmp_path):
    need_gpus(1)
    cpu = train(model, data[model], "cpu", opt, str(tmp_path / "cpu"))
    gpu = train(model, data[model], "cuda:0", opt, str(tmp_path / "cuda"))
    assert cpu[0][-1] < cpu[0][0], "the CPU run did not learn: %s" % cpu[0]
    assert_close(model, "%s/%s on cuda:0" % (model, opt), cpu, gpu)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_two_gpus_match_two_cpu_places(model, data, tmp_path):
    need_gpus(2)
    cpu = train(model, data[model], "cpu:2", "momentum", str(tmp_path / "cpu"))
    gpu = train(model, data[model], "cuda:2", "momentum", str(tmp_path / "cuda"))
    assert_close(model, "%s on cuda:2" % model, cpu, gpu)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_gpu_training_is_deterministic(model, data, tmp_path):
    need_gpus(1)
    a = train(model, data[model], "cuda:0", "adam", str(tmp_path / "a"))
    b = train(model, data[model], "cuda:0", "adam", str(tmp_path / "b"))
    assert np.array_equal(a[0], b[0]), "%s: two runs on cuda:0 gave different losses" % model
    for name in sorted(a[1]):
        assert np.array_equal(a[1][name], b[1][name]), "%s: %s differs between two runs on cuda:0" % (model, name)
