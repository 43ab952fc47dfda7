"""tests/python/test_main_job.py — smoke test of examples/train_fashion_mnist.py (the main job).

On a tiny subset of Fashion-MNIST (--limit), 2 CPU places:
- one epoch prints a progress line and ends with exactly `test_accuracy=<value>`
  with a value in [0, 1], and leaves a checkpoint (safetensors + program) and
  latest.json in --ckpt-dir;
- training 2 epochs in one run, and 1 epoch then --resume for the second,
  end with bitwise-equal parameters and optimizer state (the resumed run
  continues the epoch counter, the momentum buffers and the shuffling
  order), and the same last line;
- --resume with another --model, or with no checkpoint, fails with a message;
- 2 trainer processes (mpirun, the trainer given as Paddle's PADDLE_TRAINER_ID /
  PADDLE_TRAINERS_NUM as `python -m pe.distributed.launch` sets them, and as
  Open MPI's own OMPI_COMM_WORLD_RANK / _SIZE), 1 place each, train like one
  process with 2 places on the same global batches of 31 (split 15 + 16):
  the same epoch lines (train loss, test accuracy) and parameters allclose
  (bitwise here); only trainer 0 prints and writes checkpoints; a failure
  on trainer 0 (its checkpoint cannot be written) ends the job at once with
  a non-zero status, not after PE_MPI_TIMEOUT.
The MLP runs on 256 images so the whole file takes a few seconds.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "train_fashion_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

pytestmark = pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist is not installed")


def run(ckpt, *args, ok=True, np=0, env_vars="paddle"):
    """The script on 2 places, or (np > 0) as np trainer processes of 1 place under mpirun."""
    env = dict(os.environ, CPU_NUM="1" if np else "2", OMP_NUM_THREADS="1")
    cmd = [sys.executable, SCRIPT, "--limit", "256", "--batch-size", "32", "--ckpt-dir", str(ckpt)] + list(args)
    if np:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PE_MPI_TIMEOUT="60",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none")
        for k in ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM"):
            env.pop(k, None)
        if env_vars == "paddle":  # as pe.distributed.launch sets them
            cmd = ["sh", "-c", 'PADDLE_TRAINER_ID=$OMPI_COMM_WORLD_RANK PADDLE_TRAINERS_NUM=$OMPI_COMM_WORLD_SIZE '
                   'exec "$0" "$@"'] + cmd
        cmd = ["mpirun", "--oversubscribe", "-np", str(np)] + cmd
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()  # bytes: keep the progress bar's \r
    if ok:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def safetensors(path):
    """{name: array} of a safetensors file (read with the format's own definition)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    dt = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4"}
    out = {}
    for name, ent in header.items():
        if name == "__metadata__":
            continue
        b, e = ent["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dt[ent["dtype"]]).reshape(ent["shape"])
    return out


def test_one_epoch_last_line_and_checkpoint(tmp_path):
    r = run(tmp_path, "--epochs", "1")
    lines = r.stdout.split("\n")[:-1]
    assert re.fullmatch(r"test_accuracy=(0|1)\.\d{4}", lines[-1]), lines[-1]
    assert 0.0 <= float(lines[-1].split("=")[1]) <= 1.0
    assert "samples/s" in r.stdout and "\r" in r.stdout          # the progress bar
    assert "over 2 CPU place(s)" in r.stdout
    for f in ("model.safetensors", "model.pe", "infer.pe"):
        assert (tmp_path / "epoch_1" / f).stat().st_size > 0, f
    meta = json.loads((tmp_path / "latest.json").read_text())
    assert meta["epoch"] == 1 and meta["model"] == "mlp"
    params = safetensors(tmp_path / "epoch_1" / "model.safetensors")
    assert params["fc_0.w_0"].shape == (784, 512) and params["fc_2.w_0"].shape == (256, 10)
    assert "fc_0.w_0_velocity_0" in params and "learning_rate" in params


def test_resume_continues_bitwise(tmp_path):
    straight, parts = tmp_path / "straight", tmp_path / "parts"
    a = run(straight, "--epochs", "2")
    b1 = run(parts, "--epochs", "2", "--stop-after", "1")
    assert not (parts / "epoch_2").exists() and (parts / "epoch_1").exists()
    b2 = run(parts, "--epochs", "2", "--resume")
    assert "resumed from" in b2.stdout and "1 epoch(s) done" in b2.stdout
    assert "epoch 1:" not in b2.stdout and "epoch 2:" in b2.stdout
    assert json.loads((parts / "latest.json").read_text())["epoch"] == 2
    want = safetensors(straight / "epoch_2" / "model.safetensors")
    got = safetensors(parts / "epoch_2" / "model.safetensors")
    assert set(want) == set(got)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    first = safetensors(parts / "epoch_1" / "model.safetensors")
    assert not np.array_equal(first["fc_0.w_0"], got["fc_0.w_0"])  # the second epoch trained
    assert a.stdout.splitlines()[-1] == b2.stdout.splitlines()[-1]
    assert b1.stdout.splitlines()[-1].startswith("test_accuracy=")


def test_resume_errors(tmp_path):
    r = run(tmp_path / "none", "--resume", ok=False)
    assert r.returncode != 0 and "no checkpoint" in r.stderr
    run(tmp_path / "ck", "--epochs", "1")
    r = run(tmp_path / "ck", "--resume", "--model", "cnn", ok=False)
    assert r.returncode != 0 and "--model mlp" in r.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found (openmpi-bin; scripts/setup.sh)")
@pytest.mark.parametrize("env_vars", ["paddle", "ompi"])
def test_two_processes_equal_one(tmp_path, env_vars):
    one = run(tmp_path / "one", "--epochs", "2", "--batch-size", "31")
    two = run(tmp_path / "two", "--epochs", "2", "--batch-size", "31", np=2, env_vars=env_vars)
    assert "batch 31 over 2 trainers x 1 CPU place(s)" in two.stdout, two.stdout
    assert two.stdout.count("PE ") == 1 and two.stdout.count("test_accuracy=") == 1, two.stdout  # trainer 0 only

    def epoch_lines(out):  # "epoch k: train loss L, ...; test accuracy A": without the times
        return [re.sub(r"[0-9.]+ s \([0-9]+ samples/s\)|\([0-9.]+ s\)|checkpoint .*", "", l)
                for l in out.splitlines() if l.startswith("epoch ") and "train loss" in l]
    assert epoch_lines(two.stdout) == epoch_lines(one.stdout) and len(epoch_lines(one.stdout)) == 2, two.stdout
    assert one.stdout.splitlines()[-1] == two.stdout.splitlines()[-1]
    want = safetensors(tmp_path / "one" / "epoch_2" / "model.safetensors")
    got = safetensors(tmp_path / "two" / "epoch_2" / "model.safetensors")
    assert set(want) == set(got)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7, err_msg=k)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found (openmpi-bin; scripts/setup.sh)")
def test_failing_trainer_ends_the_job(tmp_path):
    (tmp_path / "file").write_text("")  # --ckpt-dir below a file: trainer 0 fails after epoch 1
    t0 = time.monotonic()
    r = run(tmp_path / "file" / "ck", "--epochs", "3", np=2, ok=False)  # PE_MPI_TIMEOUT is 60 s here
    assert r.returncode != 0 and "Not a directory" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 40, "the job waited for PE_MPI_TIMEOUT: %s" % r.stderr
