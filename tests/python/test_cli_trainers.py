"""tests/python/test_cli_trainers.py — `pe train` and `pe run` as several trainer processes.

Checks (docs/cli.md, "Several processes"): `pe train --trainers 2` (which
re-executes itself under mpirun) and `mpirun -np 2 pe train` train like one
process with 2 places on the same global batches — the loss of every step
and the saved parameters allclose (they come out bit for bit here), for a
batch that splits evenly (32) and one that does not (31: trainer 0 takes
15 rows, trainer 1 16); only trainer 0 prints and writes files; `pe run
--trainers 2` of a training program (one step of examples/mlp_train.pe)
fetches and saves what `pe run --places cpu:2` does; the errors: --trainers
0 and a missing value (usage, exit 2), --trainers without mpirun on PATH
(exit 1, one line naming mpirun), --trainers under mpirun with another
count (exit 2), a failure on the trainers (non-zero exit, the error names
the trainer). Skipped with a visible reason when mpirun or PE's MPI
backend is missing.

    PE_BIN_DIR=build/bin /usr/bin/python3 -m pytest -q tests/python/test_cli_trainers.py
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pe_json import pe_bin  # noqa: E402
from train_ref import EXAMPLES, fashion_mnist, make_batches, read_safetensors, write_batches  # noqa: E402

MLP = os.path.join(EXAMPLES, "mlp_forward.pe")
MLP_S = os.path.join(EXAMPLES, "mlp_forward_startup.pe")
TRAIN = ["--loss", "loss", "--optimizer", "momentum", "--lr", "0.05", "--momentum", "0.9"]

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="mpirun not found (openmpi-bin; scripts/setup.sh installs it)")


def env():
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "1")
    # as tests/unit/run_mpi.sh: root allowed, no single-copy (containers forbid process_vm_readv)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_btl_vader_single_copy_mechanism="none", PE_MPI_TIMEOUT="60")
    for k in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID"):
        e.pop(k, None)
    return e


def run(args, mpirun=0, extra_env=None):
    cmd = [pe_bin()] + [str(a) for a in args]
    if mpirun:
        cmd = ["mpirun", "--oversubscribe", "-np", str(mpirun)] + cmd
    e = env()
    e.update(extra_env or {})
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=e)
    assert r.returncode >= 0, "died with signal %d: %s" % (-r.returncode, r.stderr)
    return r


def ok(args, mpirun=0):
    r = run(args, mpirun)
    assert r.returncode == 0, "%s failed (%d): %s" % (args, r.returncode, r.stderr)
    return r


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    assert os.path.exists(pe_bin()), "pe binary not found at %s (set PE_BIN_DIR or build into build/)" % pe_bin()
    d = tmp_path_factory.mktemp("trainers")
    b = make_batches("mlp", *fashion_mnist("train"), 4, 32)
    for name, rows in (("even", 32), ("odd", 31)):  # 31: trainer 0 takes 15 rows, trainer 1 16
        write_batches(str(d / name), "mlp", [(x[:rows], y[:rows]) for x, y in b])
    probe = run(["train", MLP, "--startup", MLP_S] + TRAIN + ["--data", str(d / "even"), "--steps", 1], mpirun=2)
    if probe.returncode != 0 and "built without MPI" in probe.stderr:
        pytest.skip("PE was built without MPI")
    return d


@pytest.mark.parametrize("batch", ["even", "odd"])
def test_train_trainers_equal_places(data, tmp_path, batch):
    """--places cpu:2 (one process), --trainers 2 and mpirun -np 2: the same
    losses and parameters after 6 momentum steps (4 batches, cycled)."""
    args = ["train", MLP, "--startup", MLP_S] + TRAIN + ["--data", str(data / batch), "--steps", 6, "--print-every", 2]
    runs = {"places": (["--places", "cpu:2"], 0), "trainers": (["--trainers", 2], 0), "mpirun": ([], 2)}
    out = {}
    for name, (flags, np_) in runs.items():
        log, ck = tmp_path / (name + ".npy"), tmp_path / (name + ".st")
        r = ok(args + flags + ["--log", log, "--save", ck], mpirun=np_)
        out[name] = (np.load(log), read_safetensors(str(ck)), r.stdout)
    ref_log, ref_ck, _ = out["places"]
    for name in ("trainers", "mpirun"):
        log, ck, stdout = out[name]
        np.testing.assert_allclose(log, ref_log, rtol=1e-6, err_msg=name)
        assert sorted(ck) == sorted(ref_ck)
        for k in ref_ck:
            np.testing.assert_allclose(ck[k], ref_ck[k], rtol=1e-5, atol=1e-7, err_msg="%s: %s" % (name, k))
        # trainer 0 alone prints: one header, steps 1, 2, 4, 6, one steady-state line
        lines = stdout.splitlines()
        assert sum(l.startswith("training ") for l in lines) == 1, stdout
        assert "on 2 trainers x 1 place" in lines[0], lines[0]
        assert [l.split()[1] for l in lines if l.startswith("step ")] == ["1/6", "2/6", "4/6", "6/6"], stdout
        assert sum(l.startswith("steady state") for l in lines) == 1, stdout


def test_run_trainers_equal_places(data, tmp_path):
    """One step of the training program examples/mlp_train.pe on 31 rows:
    --trainers 2 fetches (merged across the trainers in order) and saves
    what --places cpu:2 does."""
    d = data / "odd"
    args = ["run", os.path.join(EXAMPLES, "mlp_train.pe"), "--startup", os.path.join(EXAMPLES, "mlp_startup.pe"),
            "--feed", "x=%s" % (d / "x_0.npy"), "--feed", "label=%s" % (d / "label_0.npy"),
            "--fetch", "loss", "--fetch", "fc_0.tmp_2", "--fetch", "fc_0.w_0"]
    ok(args + ["--places", "cpu:2", "--out", tmp_path / "p", "--save", tmp_path / "p.st"])
    r = ok(args + ["--trainers", 2, "--out", tmp_path / "t", "--save", tmp_path / "t.st"])
    assert r.stdout.count("loss: float32 [2]") == 1, r.stdout  # trainer 0 prints, the loss of both trainers
    for f in ("loss", "fc_0.tmp_2", "fc_0.w_0"):
        a, b = np.load(tmp_path / "p" / (f + ".npy")), np.load(tmp_path / "t" / (f + ".npy"))
        assert a.shape == b.shape, (f, a.shape, b.shape)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7, err_msg=f)
    p, t = read_safetensors(str(tmp_path / "p.st")), read_safetensors(str(tmp_path / "t.st"))
    for k in p:
        np.testing.assert_allclose(t[k], p[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_errors(data, tmp_path):
    args = ["train", MLP, "--startup", MLP_S] + TRAIN + ["--data", str(data / "even"), "--steps", 1]
    for bad, msg in (("0", "--trainers '0' is not a process count"), ("x", "--trainers 'x' is not a process count")):
        r = run(args + ["--trainers", bad])
        assert r.returncode == 2 and r.stderr.startswith("pe: error: " + msg), r.stderr
        assert "usage: pe train" in r.stderr
    r = run(args + ["--trainers"])
    assert r.returncode == 2 and "--trainers needs a value" in r.stderr, r.stderr
    # no mpirun on PATH: one clear line, exit 1
    r = run(args + ["--trainers", 2], extra_env={"PATH": str(tmp_path)})
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "mpirun is not on PATH" in lines[0], r.stderr
    # under mpirun, --trainers must match the processes
    r = run(args + ["--trainers", 3], mpirun=2)
    assert r.returncode == 2 and "--trainers 3, but this process is one of 2 trainers" in r.stderr, r.stderr
    # a failure on the trainers: non-zero exit, the error names the trainer
    r = run(["train", MLP, "--startup", MLP_S] + TRAIN + ["--data", str(tmp_path / "none"), "--steps", 1,
                                                          "--trainers", 2])
    assert r.returncode == 1, r.stderr
    assert "pe: error: trainer 0 of 2: --data" in r.stderr or "pe: error: trainer 1 of 2: --data" in r.stderr
    # a batch smaller than trainers x places
    small = tmp_path / "small"
    small.mkdir()
    np.save(small / "x_0.npy", np.zeros((3, 784), np.float32))
    np.save(small / "label_0.npy", np.zeros((3, 1), np.int64))
    r = run(["train", MLP, "--startup", MLP_S] + TRAIN + ["--data", small, "--steps", 1, "--places", "cpu:2",
                                                          "--trainers", 2])
    assert r.returncode == 1 and "batch 0 has 3 rows, fewer than the 2 trainers x 2 places" in r.stderr, r.stderr
