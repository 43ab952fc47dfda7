"""tests/python/test_data_parallel.py — pe.DataParallel (eager mode).

Two ranks under pe.distributed.spawn (dist_scripts/data_parallel.py), each
job under a hard time limit (dist_run.run kills the job's process group on
a timeout), the reference computed here in one process:
- seed 001's LinearNet + Adam, 10 steps: the ranks start from different
  random parameters and DataParallel gives both rank 0's; after 10 steps
  the parameters are identical on both ranks and allclose to one process
  training on the concatenated batches.
- no_sync for 3 backwards then one synced backward: the gradients equal
  those of one large batch (times the 4 micro-batches' mean losses).
- find_unused_parameters=True: a parameter used on rank 0 only gets
  rank 0's gradient / 2 on both ranks; one used nowhere keeps grad None.
  Without it the same forward is an error naming the parameter and the
  rank on both ranks (no hang), and the ranks go on afterwards.
In this process (one rank): bucket assignment, passthroughs, arguments.
"""
import os
import sys

import numpy as np
import pytest

import pe
import pe.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "dist_scripts"))
from dist_run import PY, needs_mpirun, run, script  # noqa: E402
import data_parallel as dp_script  # noqa: E402


def _spawn(mode, tmp_path):
    r = run([PY, script("data_parallel.py"), mode, str(tmp_path)], timeout=120)
    assert r.rc == 0, r
    assert r.out.rstrip().endswith("spawn returned"), r
    return [dict(np.load(str(tmp_path / ("%s_rank%d.npz" % (mode, k))))) for k in range(2)]


def _reference_net(init):
    pe.disable_static()
    net = dp_script.LinearNet()
    net.set_state_dict({k[len("init_"):]: v for k, v in init.items() if k.startswith("init_")})
    return net


@needs_mpirun
def test_linearnet_adam_matches_one_process_on_the_whole_batch(tmp_path):
    r0, r1 = _spawn("train", tmp_path)
    names = [k[len("init_"):] for k in r0 if k.startswith("init_")]
    assert len(names) == 4
    # the ranks started apart; DataParallel gave both rank 0's parameters
    assert any(not np.array_equal(r0["own_" + n], r1["own_" + n]) for n in names)
    for n in names:
        np.testing.assert_array_equal(r0["init_" + n], r0["own_" + n])
        np.testing.assert_array_equal(r1["init_" + n], r0["own_" + n])
    net = _reference_net(r0)
    adam = pe.optimizer.Adam(learning_rate=0.01, parameters=net.parameters())
    loss_fn = nn.MSELoss()
    for step in range(dp_script.STEPS):
        x, y = dp_script.batch(step, 2)
        loss = loss_fn(net(pe.to_tensor(x)), pe.to_tensor(y))
        loss.backward()
        adam.step()
        adam.clear_grad()
    ref = {k: v.numpy() for k, v in net.state_dict().items()}
    for n in names:
        np.testing.assert_array_equal(r0["final_" + n], r1["final_" + n], err_msg=n)
        assert not np.array_equal(r0["final_" + n], r0["init_" + n]), n
        np.testing.assert_allclose(r0["final_" + n], ref[n], rtol=1e-5, atol=1e-6, err_msg=n)


@needs_mpirun
def test_no_sync_accumulates_then_one_synced_step_equals_a_large_batch(tmp_path):
    r0, r1 = _spawn("nosync", tmp_path)
    net = _reference_net(r0)
    xs, ys = zip(*[dp_script.batch(s, 2) for s in range(4)])
    loss = nn.MSELoss()(net(pe.to_tensor(np.concatenate(xs))), pe.to_tensor(np.concatenate(ys)))
    loss.backward()
    names = [k[len("grad_"):] for k in r0 if k.startswith("grad_")]
    assert len(names) == 4
    for n, p in net.named_parameters():
        want = 4 * p.grad.numpy()   # each rank's grads: the sum of 4 micro-batch means
        np.testing.assert_array_equal(r0["grad_" + n], r1["grad_" + n], err_msg=n)
        np.testing.assert_allclose(r0["grad_" + n], want, rtol=1e-5, atol=1e-6, err_msg=n)
        # under no_sync nothing was exchanged: the ranks' local sums differ
        assert not np.allclose(r0["local_" + n], r1["local_" + n]), n


@needs_mpirun
def test_find_unused_parameters(tmp_path):
    r0, r1 = _spawn("unused", tmp_path)
    for r in (r0, r1):
        assert r["never_grad_is_none"].all() and r["after_error_ok"].all()
        assert "grad__never.weight" not in r
    for n in ("_linear.weight", "_linear.bias", "_extra.weight", "_extra.bias"):
        np.testing.assert_array_equal(r0["grad_" + n], r1["grad_" + n], err_msg=n)
    # _extra took part on rank 0 only: its grad is rank 0's / 2, not zero
    assert np.abs(r0["grad__extra.weight"]).sum() > 0
    for k in range(2):
        msg = (tmp_path / ("unused_rank%d.txt" % k)).read_text()
        assert msg.startswith("DataParallel: parameter '_extra.weight'"), msg
        assert "got no gradient in this backward on rank(s) 1" in msg and "find_unused_parameters=True" in msg, msg


# ---- one process --------------------------------------------------------------------------------
class _Big(nn.Layer):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(512, 512)      # 1 MB + 2 KB
        self.b = nn.Linear(512, 512)
        self.c = nn.Linear(512, 4)


def test_buckets_reverse_creation_order_with_a_small_last_bucket():
    pe.disable_static()
    dp = pe.DataParallel(_Big(), comm_buffer_size=1, last_comm_buffer_size=0.5)
    names = dp._param_names
    assert names == ["a.weight", "a.bias", "b.weight", "b.bias", "c.weight", "c.bias"]
    buckets = [[names[i] for i in b] for b in dp._buckets]
    # creation order cut at 0.5 MB (a.weight alone), then at 1 MB each; exchanged in reverse
    assert buckets == [["c.bias", "c.weight", "b.bias"], ["b.weight", "a.bias"], ["a.weight"]]
    dp = pe.DataParallel(_Big())
    assert [[names[i] for i in b] for b in dp._buckets] == [
        ["c.bias", "c.weight", "b.bias", "b.weight", "a.bias"], ["a.weight"]]


def test_one_process_passthrough_and_compatible_names():
    pe.disable_static()
    layer = dp_script.LinearNet()
    dp = pe.DataParallel(layer)
    assert pe.distributed.DataParallel is pe.DataParallel
    assert dp.state_dict() == layer.state_dict() and dp.parameters() == layer.parameters()
    x = pe.to_tensor(np.ones([2, 10], "float32"))
    np.testing.assert_array_equal(dp(x).numpy(), layer(x).numpy())
    loss = pe.mean(dp(x))
    assert dp.scale_loss(loss) is loss
    loss.backward()
    assert dp.apply_collective_grads() is None
    g = layer._linear1.weight.grad.numpy()
    ref = dp_script.LinearNet()
    ref.set_state_dict(layer.state_dict())
    pe.mean(ref(x)).backward()
    np.testing.assert_array_equal(g, ref._linear1.weight.grad.numpy())   # one rank: nothing averaged
    with dp.no_sync():
        assert dp.grad_need_sync is False
    assert dp.grad_need_sync is True
    assert dp._linear1 is layer._linear1   # attributes of the layer


def test_bad_arguments():
    pe.disable_static()
    with pytest.raises(TypeError, match="layers must be a pe.nn.Layer"):
        pe.DataParallel(object())
    with pytest.raises(pe.InvalidArgumentError, match="comm_buffer_size must be a positive number of MB"):
        pe.DataParallel(dp_script.LinearNet(), comm_buffer_size=0)
    with pytest.raises(pe.UnsupportedError, match="PE has no process subgroups"):
        pe.DataParallel(dp_script.LinearNet(), group=object())
