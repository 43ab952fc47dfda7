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
- ranks that disagree about no_sync (one rank's extra no_sync backward):
  the next synced pass is an error on both ranks naming each one's count,
  and the step after it agrees again.
- find_unused_parameters=True: a parameter used on rank 0 only gets
  rank 0's gradient / 2 on both ranks; one used nowhere keeps grad None.
  Without it the same forward is an error naming the parameter and the
  rank on both ranks within 5 s (no hang), and the ranks go on afterwards;
  a backward pass that raises on one rank is that error there and one
  naming the rank on the other, and the ranks go on afterwards.
- overlap: a four-layer net with one parameter per bucket; the order of
  events in backward() (every op the pass runs, each bucket's start and
  wait) shows the buckets starting in order while grad ops still run,
  and the averaged gradients equal one process on the whole batch.
- seed 001's PyLayer example (a pe.autograd.PyLayer tanh, gradients kept
  local under no_sync and averaged by hand with fleet's
  fused_allreduce_gradients, SGD, 10 steps): both ranks' parameters
  identical and allclose to one process on the whole batch; ranks that
  disagree about which parameters have a gradient get the error on both
  within 5 s.
  The same with each rank's data from pe.io: DataLoader (one worker
  process) over DistributedBatchSampler (the rank from the environment).
- pe.distributed.launch --nproc_per_node 2 of seed 001's LinearNet + Adam
  example (dist_scripts/dp_launch_train.py): 10 steps, both ranks'
  parameters identical and allclose to one process on the whole batch.
In this process (one rank): the tape's grad-ready hook, bucket
assignment, passthroughs, arguments.
"""
import os
import sys

import numpy as np
import pytest

import pe
import pe.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "dist_scripts"))
from dist_run import PY, launch, needs_mpirun, run, script  # noqa: E402
import data_parallel as dp_script  # noqa: E402
import dp_launch_train as launch_script  # noqa: E402


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
@pytest.mark.parametrize("mode", ["train", "loader"])
def test_linearnet_adam_matches_one_process_on_the_whole_batch(tmp_path, mode):
    """mode loader: each rank's half of every batch comes from pe.io's
    DataLoader (a worker process) and DistributedBatchSampler."""
    r0, r1 = _spawn(mode, tmp_path)
    if mode == "loader":
        assert int(r0["batches"]) == int(r1["batches"]) == dp_script.STEPS
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
def test_pylayer_no_sync_and_fused_allreduce_gradients_like_one_process(tmp_path):
    r0, r1 = _spawn("pylayer", tmp_path)
    names = [k[len("init_"):] for k in r0 if k.startswith("init_")]
    assert sorted(names) == ["linear.bias", "linear.weight"]
    pe.disable_static()
    net = dp_script.SimpleNet()
    net.set_state_dict({n: r0["init_" + n] for n in names})
    opt = pe.optimizer.SGD(learning_rate=0.01, parameters=net.parameters())
    for step in range(dp_script.STEPS):
        x = pe.to_tensor(dp_script.pylayer_batch(step, 2))   # both ranks' rows: the mean is the ranks' average
        x.stop_gradient = False
        net(x).mean().backward()
        if step == 0:
            for n, p in net.named_parameters():
                if n == "linear.weight":   # (the bias's gradient of a mean is the same on every rank)
                    assert not np.allclose(r0["local_" + n], r1["local_" + n]), n   # no_sync kept them apart
                np.testing.assert_array_equal(r0["grad_" + n], r1["grad_" + n], err_msg=n)
                np.testing.assert_allclose(r0["grad_" + n], p.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=n)
        opt.step()
        opt.clear_grad()
    ref = {k: v.numpy() for k, v in net.state_dict().items()}
    for n in names:
        np.testing.assert_array_equal(r0["final_" + n], r1["final_" + n], err_msg=n)
        assert not np.array_equal(r0["final_" + n], r0["init_" + n]), n
        np.testing.assert_allclose(r0["final_" + n], ref[n], rtol=1e-5, atol=1e-7, err_msg=n)
    for k, r in enumerate((r0, r1)):
        msg = (tmp_path / ("pylayer_rank%d.txt" % k)).read_text()
        assert msg.startswith("fused_allreduce_gradients: parameter 1 ("), msg
        assert "has a gradient on rank(s) 0 and none on rank(s) 1: no gradient was averaged" in msg, msg
        assert r["error_seconds"][0] < 5.0, r["error_seconds"]


@needs_mpirun
def test_ranks_disagreeing_about_no_sync_is_an_error_on_every_rank(tmp_path):
    r0, r1 = _spawn("nosync_disagree", tmp_path)
    for k, r in enumerate((r0, r1)):
        msg = (tmp_path / ("nosync_disagree_rank%d.txt" % k)).read_text()
        assert msg.startswith("DataParallel: the ranks ran different numbers of backward passes under no_sync() "
                              "before this synced one (rank 0: 0, rank 1: 1)"), msg
        assert r["error_seconds"][0] < 5.0, r["error_seconds"]
    names = [k for k in r0 if k.startswith("grad_")]
    assert names
    for n in names:   # and the next synced step agrees again
        np.testing.assert_array_equal(r0[n], r1[n], err_msg=n)


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
    for r in (r0, r1):
        assert r["error_seconds"][0] < 5.0, r["error_seconds"]
    for k in range(2):
        msg = (tmp_path / ("unused_rank%d.txt" % k)).read_text()
        assert msg.startswith("DataParallel: parameter '_extra.weight'"), msg
        assert "got no gradient in this backward on rank(s) 1" in msg and "find_unused_parameters=True" in msg, msg
    # a backward pass that raised on rank 1: its own error there, one naming it on rank 0; then a step works
    assert (tmp_path / "failed_rank1.txt").read_text() == "ValueError: rank 1's backward fails on purpose"
    msg = (tmp_path / "failed_rank0.txt").read_text()
    assert msg.startswith("InvalidArgumentError: DataParallel: the backward pass failed on rank(s) 1"), msg
    np.testing.assert_array_equal(r0["after_failure_grad"], r1["after_failure_grad"])


@needs_mpirun
def test_bucket_allreduces_start_while_backward_still_runs(tmp_path):
    r0, r1 = _spawn("overlap", tmp_path)
    nb = len(r0["buckets"])
    assert nb == 8 and (r0["buckets"] == 1).all()   # one parameter per bucket
    for r in (r0, r1):
        ev = [str(e) for e in r["events"]]
        starts = [i for i, e in enumerate(ev) if e.startswith("start ")]
        waits = [i for i, e in enumerate(ev) if e.startswith("wait ")]
        ops = [i for i, e in enumerate(ev) if e.startswith("op ")]
        # every bucket started once, in bucket order, then waited for in the same order
        assert [ev[i] for i in starts] == ["start %d" % k for k in range(nb)], ev
        assert [ev[i] for i in waits] == ["wait %d" % k for k in range(nb)], ev
        # overlap: buckets started before the pass's last op ran, with ops between them
        assert starts[0] < ops[-1] and starts[nb - 2] < ops[-1], ev
        assert any(starts[0] < i < starts[1] for i in ops), ev
        # and nothing was waited for before the pass had run all of its ops
        assert waits[0] > ops[-1], ev
    pe.disable_static()
    net = dp_script.DeepNet()
    net.set_state_dict({k[len("init_"):]: v for k, v in r0.items() if k.startswith("init_")})
    x, y = dp_script.batch(0, 2)
    nn.MSELoss()(net(pe.to_tensor(x)), pe.to_tensor(y)).backward()
    for n, p in net.named_parameters():
        np.testing.assert_array_equal(r0["grad_" + n], r1["grad_" + n], err_msg=n)
        np.testing.assert_allclose(r0["grad_" + n], p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=n)


@needs_mpirun
def test_launch_linearnet_adam_like_one_process(tmp_path):
    r = launch(["--nproc_per_node", "2", "--log_dir", str(tmp_path / "log"), script("dp_launch_train.py"),
                str(tmp_path)], cwd=str(tmp_path), timeout=120)
    assert r.rc == 0, r
    r0, r1 = [dict(np.load(str(tmp_path / ("launch_rank%d.npz" % k)))) for k in range(2)]
    names = [k[len("init_"):] for k in r0 if k.startswith("init_")]
    assert len(names) == 4
    pe.disable_static()
    net = launch_script.LinearNet()
    net.set_state_dict({n: r0["init_" + n] for n in names})
    adam = pe.optimizer.Adam(learning_rate=0.001, parameters=net.parameters())
    loss_fn = nn.MSELoss()
    for step in range(launch_script.STEPS):
        x, y = launch_script.data(step, 2)
        loss_fn(net(pe.to_tensor(x)), pe.to_tensor(y)).backward()
        adam.step()
        adam.clear_grad()
    ref = {k: v.numpy() for k, v in net.state_dict().items()}
    for n in names:
        np.testing.assert_array_equal(r0["init_" + n], r1["init_" + n], err_msg=n)   # rank 0's, broadcast
        np.testing.assert_array_equal(r0["final_" + n], r1["final_" + n], err_msg=n)
        assert not np.array_equal(r0["final_" + n], r0["init_" + n]), n
        np.testing.assert_allclose(r0["final_" + n], ref[n], rtol=1e-5, atol=1e-6, err_msg=n)


# ---- one process --------------------------------------------------------------------------------
class _Big(nn.Layer):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(512, 512)      # 1 MB + 2 KB
        self.b = nn.Linear(512, 512)
        self.c = nn.Linear(512, 4)


def test_grad_ready_hook_reports_each_leaf_once_when_its_grad_is_final():
    from pe.eager import autograd
    pe.disable_static()
    net = dp_script.DeepNet()
    w = net.l1.weight
    seen = []
    ops = []

    def hook(leaf):
        seen.append((leaf.name, len(ops), leaf.grad.numpy()))

    run_prepared = autograd._run_prepared

    def traced(op, raws):   # every op of the backward pass (grad ops, sums)
        ops.append(op.desc[0])
        return run_prepared(op, raws)

    autograd.add_grad_ready_hook(hook)
    x = pe.to_tensor(np.random.RandomState(0).randn(4, 10).astype("float32"))
    loss = pe.mean(net(x)) + pe.mean(pe.matmul(x, w))   # l1.weight read by two ops
    autograd._run_prepared = traced
    try:
        loss.backward()
    finally:
        autograd._run_prepared = run_prepared
        autograd._grad_ready.remove(hook)
    names = [n for n, _, _ in seen]
    params = dict((p.name, p) for p in net.parameters())
    assert sorted(names) == sorted(params)                  # each parameter once
    for n, _, g in seen:                                     # reported when final
        np.testing.assert_array_equal(g, params[n].grad.numpy(), err_msg=n)
    when = dict((n, k) for n, k, _ in seen)
    assert when[net.l4.weight.name] < len(ops)               # the last layer's before the pass ended
    assert when[net.l4.weight.name] < when[net.l1.weight.name]


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


def test_fused_allreduce_gradients_in_one_process_leaves_the_gradients():
    from pe.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients
    pe.disable_static()
    try:
        lin = nn.Linear(2, 2)
        lin(pe.to_tensor(np.ones((3, 2), np.float32))).mean().backward()
        before = {n: p.grad.numpy() for n, p in lin.named_parameters()}
        assert fused_allreduce_gradients(list(lin.parameters()), None) is None
        for n, p in lin.named_parameters():
            np.testing.assert_array_equal(p.grad.numpy(), before[n], err_msg=n)
        with pytest.raises(pe.UnsupportedError, match="hcg .* must be None"):
            fused_allreduce_gradients(lin.parameters(), object())
        import pe.distributed.fleet as fleet
        with pytest.raises(pe.UnsupportedError, match=r"pe.distributed.fleet.init: PE has only fleet.utils"):
            fleet.init(is_collective=True)
    finally:
        pe.enable_static()
