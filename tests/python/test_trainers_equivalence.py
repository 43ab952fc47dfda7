"""tests/python/test_trainers_equivalence.py — the main job's models across processes.

The MLP and the CNN of examples/train_fashion_mnist.py, trained 50 steps
(momentum, a fed learning-rate schedule) as 2 processes x 1 place, 2 x 2
and 3 x 1 (mpirun, oversubscribed on this machine), each trainer feeding
its share of every global batch and starting from its own seed, end with
every persistable (parameters, velocities, the learning rate) identical on
every trainer and allclose (rtol 1e-5) to one process with as many places
on the whole batches; a second run of the same layout gives the same bits.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_scripts"))
from dist_run import MPIRUN, PY, needs_mpirun, run, job_env, script  # noqa: E402

SCRIPT = script("train_job_models.py")


def train(tmp_path, model, trainers, places, tag):
    env = job_env(CPU_NUM=str(places))
    if trainers == 1:
        cmd = [PY, SCRIPT, model, str(tmp_path), tag]
    else:
        cmd = [MPIRUN, "--oversubscribe", "-np", str(trainers), "--mca", "btl", "self,vader", PY, SCRIPT, model,
               str(tmp_path), tag]
    r = run(cmd, timeout=240, env=env)
    assert r.rc == 0, r
    return [dict(np.load(tmp_path / ("%s.rank%d.npz" % (tag, t)))) for t in range(trainers)]


@needs_mpirun
@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("trainers,places", [(2, 1), (2, 2), (3, 1)])
def test_trainers_match_one_process(tmp_path, model, trainers, places):
    ranks = train(tmp_path, model, trainers, places, "world")
    ref, = train(tmp_path, model, 1, trainers * places, "one")
    names = sorted(k for k in ref if k != "__losses__")
    assert len(names) >= 5 and sorted(k for k in ranks[0] if k != "__losses__") == names
    for t in range(1, trainers):
        for k in names:
            np.testing.assert_array_equal(ranks[t][k], ranks[0][k], err_msg="trainer %d, %s" % (t, k))
    for k in names:
        np.testing.assert_allclose(ranks[0][k], ref[k], rtol=1e-5, atol=1e-7, err_msg=k)
    assert ranks[0]["__losses__"][-5:].mean() < ranks[0]["__losses__"][:5].mean()
    if (trainers, places) == (2, 1):  # bitwise repeatable for a layout
        again = train(tmp_path, model, trainers, places, "again")
        for k in names:
            np.testing.assert_array_equal(again[0][k], ranks[0][k], err_msg=k)
