"""tests/python/test_main_job_curves.py — the main job's metrics.jsonl and training.png.

examples/train_fashion_mnist.py with its default options but for a subset of
the data (--limit) on 2 CPU places, as scripts/demo.sh runs it:
- metrics.jsonl in the output directory has a "run" line, then one "step"
  line per logged step (every --log-every steps of every epoch, numbered in
  order) with loss, accuracy, samples/s and learning rate, and one "epoch"
  line per epoch with train loss and accuracy, test accuracy and samples/s;
- training.png next to it is a PNG of plausible size (1500 x 420 pixels,
  20 KB to 2 MB) — the picture of README comes from the default run;
- --plot METRICS redraws it from the file alone (no training), --png chooses
  the path; --no-plot draws nothing;
- under 2 trainer processes (mpirun) only trainer 0 writes: one file, the
  same step and epoch lines (without the times) as one process;
- --tensorboard without TensorBoard's writer installed is a clear error at once;
- --resume keeps the lines of the epochs before the checkpoint and appends.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "train_fashion_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

pytestmark = pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist is not installed")


def have_matplotlib():
    return subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True).returncode == 0


needs_mpl = pytest.mark.skipif(not have_matplotlib(), reason="python3-matplotlib is not installed (scripts/setup.sh)")


def run(out, *args, np=0):
    env = dict(os.environ, CPU_NUM="1" if np else "2", OMP_NUM_THREADS="1")
    cmd = [sys.executable, SCRIPT, "--limit", "600", "--ckpt-dir", str(out)] + list(args)
    if np:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PE_MPI_TIMEOUT="60",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none")
        cmd = ["mpirun", "--oversubscribe", "-np", str(np), "sh", "-c",
               'PADDLE_TRAINER_ID=$OMPI_COMM_WORLD_RANK PADDLE_TRAINERS_NUM=$OMPI_COMM_WORLD_SIZE exec "$0" "$@"'] + cmd
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def records(path):
    return [json.loads(line) for line in open(path)]


def check_png(path):
    raw = open(path, "rb").read()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG: %r" % raw[:8]
    assert raw[12:16] == b"IHDR"
    w, h = struct.unpack(">II", raw[16:24])
    assert (w, h) == (1500, 420), (w, h)
    assert 20_000 < len(raw) < 2_000_000, len(raw)


@needs_mpl
def test_metrics_one_line_per_logged_step_and_png(tmp_path):
    r = run(tmp_path, "--epochs", "2", "--log-every", "1")
    recs = records(tmp_path / "metrics.jsonl")
    run_info = recs[0]
    assert run_info["type"] == "run" and run_info["steps_per_epoch"] == 5 and run_info["places"] == 2
    steps = [x for x in recs if x["type"] == "step"]
    epochs = [x for x in recs if x["type"] == "epoch"]
    # 600 images, batch 128: 5 steps an epoch (the last of 88 rows), 2 epochs, every step logged
    assert [x["step"] for x in steps] == list(range(1, 11))
    assert [x["epoch"] for x in steps] == [1] * 5 + [2] * 5
    assert [x["epoch"] for x in epochs] == [1, 2] and len(recs) == 1 + 10 + 2
    for x in steps:
        assert x["loss"] > 0 and 0 <= x["accuracy"] <= 1 and x["samples_per_s"] > 0 and 0 <= x["lr"] <= 0.05 + 1e-9
    assert steps[0]["lr"] == pytest.approx(0.05) and steps[-1]["lr"] < steps[0]["lr"]
    assert steps[-1]["samples"] == 600
    last = r.stdout.splitlines()[-1]
    assert last == "test_accuracy=%.4f" % epochs[-1]["test_accuracy"]
    for e in epochs:
        assert e["train_loss"] > 0 and 0 <= e["train_accuracy"] <= 1 and e["samples_per_s"] > 0
    assert epochs[1]["train_loss"] < epochs[0]["train_loss"]
    check_png(tmp_path / "training.png")
    assert "curves: %s" % (tmp_path / "training.png") in r.stdout


@needs_mpl
def test_log_every_plot_and_no_plot(tmp_path):
    run(tmp_path, "--epochs", "2", "--log-every", "3", "--no-plot")
    assert not (tmp_path / "training.png").exists()
    steps = [x["step"] for x in records(tmp_path / "metrics.jsonl") if x["type"] == "step"]
    assert steps == [3, 6, 9]  # 10 steps, every third
    png = tmp_path / "elsewhere.png"
    r = subprocess.run([sys.executable, SCRIPT, "--plot", str(tmp_path / "metrics.jsonl"), "--png", str(png)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    check_png(png)
    r = subprocess.run([sys.executable, SCRIPT, "--plot", str(tmp_path / "missing.jsonl")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "missing.jsonl" in r.stderr


def test_resume_keeps_the_earlier_epochs(tmp_path):
    run(tmp_path, "--epochs", "2", "--stop-after", "1", "--log-every", "2", "--no-plot")
    run(tmp_path, "--epochs", "2", "--resume", "--log-every", "2", "--no-plot")
    recs = records(tmp_path / "metrics.jsonl")
    assert [x["type"] for x in recs if x["type"] != "step"] == ["run", "epoch", "run", "epoch"]
    assert [x["step"] for x in recs if x["type"] == "step"] == [2, 4, 6, 8, 10]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found (openmpi-bin; scripts/setup.sh)")
def test_two_trainers_trainer_0_writes(tmp_path):
    run(tmp_path / "one", "--epochs", "1", "--log-every", "1", "--no-plot")
    run(tmp_path / "two", "--epochs", "1", "--log-every", "1", "--no-plot", np=2)

    def strip(recs):
        keep = ("type", "epoch", "step", "samples", "loss", "accuracy", "lr", "train_loss", "train_accuracy",
                "test_accuracy")
        return [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in x.items() if k in keep}
                for x in recs if x["type"] != "run"]
    one, two = records(tmp_path / "one" / "metrics.jsonl"), records(tmp_path / "two" / "metrics.jsonl")
    assert two[0]["trainers"] == 2 and sum(x["type"] == "run" for x in two) == 1
    assert strip(two) == strip(one)


def test_tensorboard_missing_is_an_error(tmp_path):
    for mod in ("torch.utils.tensorboard", "tensorboardX"):
        if subprocess.run([sys.executable, "-c", "import " + mod], capture_output=True).returncode == 0:
            pytest.skip("%s is installed" % mod)
    r = subprocess.run([sys.executable, SCRIPT, "--limit", "100", "--ckpt-dir", str(tmp_path),
                        "--tensorboard", str(tmp_path / "tb")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--tensorboard needs" in r.stderr, r.stderr
    assert not (tmp_path / "metrics.jsonl").exists()
