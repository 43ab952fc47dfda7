"""Ranks of tests/python/test_data_parallel.py: pe.DataParallel under pe.distributed.spawn.

    python data_parallel.py train OUT      # seed 001's LinearNet + Adam, 10 steps
    python data_parallel.py loader OUT     # the same, each rank's data from pe.io (DistributedBatchSampler)
    python data_parallel.py nosync OUT     # 3 steps under no_sync, then one synced backward
    python data_parallel.py unused OUT     # find_unused_parameters True and False
    python data_parallel.py overlap OUT    # DeepNet in 1-parameter buckets: the order of events
    python data_parallel.py pylayer OUT    # seed 001's PyLayer example: no_sync + fused_allreduce_gradients

Each rank starts from its own random parameters (pe.seed(100 + rank)) and
takes its half of a batch that every rank draws from the same numpy seed;
it writes OUT/<mode>_rank<r>.npz (and .txt for messages).
"""
import os
import sys
import time

import numpy as np

import pe as paddle
import pe.distributed as dist
import pe.nn as nn
from pe.autograd import PyLayer
from pe.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients

BATCH = 8   # per rank
STEPS = 10


class LinearNet(nn.Layer):
    def __init__(self):
        super().__init__()
        self._linear1 = nn.Linear(10, 10)
        self._linear2 = nn.Linear(10, 1)

    def forward(self, x):
        return self._linear2(self._linear1(x))


class BranchNet(nn.Layer):
    """_extra is used only when use_extra; _never is never used."""

    def __init__(self):
        super().__init__()
        self._linear = nn.Linear(10, 1)
        self._extra = nn.Linear(10, 1)
        self._never = nn.Linear(10, 1)

    def forward(self, x, use_extra):
        y = self._linear(x)
        return y + self._extra(x) if use_extra else y


class DeepNet(nn.Layer):
    """Four layers: with comm_buffer_size tiny, each parameter is its own bucket."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(10, 16)
        self.l2 = nn.Linear(16, 16)
        self.l3 = nn.Linear(16, 8)
        self.l4 = nn.Linear(8, 1)

    def forward(self, x):
        return self.l4(paddle.tanh(self.l3(paddle.tanh(self.l2(paddle.tanh(self.l1(x)))))))


class cus_tanh(PyLayer):
    """Seed 001's PyLayer: tanh with a hand-written backward."""

    @staticmethod
    def forward(ctx, x):
        y = paddle.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensor()
        return dy * (1 - paddle.square(y))


class SimpleNet(nn.Layer):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, inputs):
        return self.linear(cus_tanh.apply(inputs))


def pylayer_batch(step, world):
    """2 rows of 2 features per rank (the seed's x_data), the same on every rank for a step."""
    return np.random.RandomState(2000 + step).randn(world * 2, 2).astype("float32")


def batch(step, world):
    rs = np.random.RandomState(1000 + step)
    return (rs.randn(world * BATCH, 10).astype("float32"), rs.randn(world * BATCH, 1).astype("float32"))


def mine(a, rank):
    return paddle.to_tensor(a[rank * BATCH:(rank + 1) * BATCH])


def state(layer):
    return {k: v.numpy() for k, v in layer.state_dict().items()}


def grads(layer):
    return {k: p.grad.numpy() for k, p in layer.named_parameters() if p.grad is not None}


def record_error(res, path, fn):
    """Runs fn(); writes its InvalidArgumentError's text (or "no error") to path and the seconds it took
    to res["error_seconds"]."""
    t0 = time.monotonic()
    try:
        fn()
        msg = "no error"
    except paddle.InvalidArgumentError as e:
        msg = str(e)
    res["error_seconds"] = np.array([time.monotonic() - t0])
    with open(path, "w") as f:
        f.write(msg)


def run(mode, out):
    paddle.disable_static()
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    paddle.seed(100 + rank)
    res = {}
    if mode in ("train", "nosync", "loader"):
        layer = LinearNet()
        res.update({"own_" + k: v for k, v in state(layer).items()})
        dp = paddle.DataParallel(layer)
        res.update({"init_" + k: v for k, v in state(dp).items()})
        loss_fn = nn.MSELoss()
        if mode in ("train", "loader"):
            adam = paddle.optimizer.Adam(learning_rate=0.01, parameters=dp.parameters())
            if mode == "train":
                data = ((mine(x, rank), mine(y, rank)) for x, y in (batch(step, world) for step in range(STEPS)))
            else:
                # the same global batches, one after another, as a dataset: the rank's shard of each
                # comes from DistributedBatchSampler (rank and world from the environment), loaded
                # by a worker process
                xs, ys = zip(*(batch(step, world) for step in range(STEPS)))
                ds = paddle.io.TensorDataset([np.concatenate(xs), np.concatenate(ys)])
                sampler = paddle.io.DistributedBatchSampler(ds, batch_size=BATCH)
                data = paddle.io.DataLoader(ds, batch_sampler=sampler, num_workers=1)
                res["batches"] = np.array(len(data))
            for xb, yb in data:
                loss = loss_fn(dp(xb), yb)
                loss.backward()
                adam.step()
                adam.clear_grad()
            res.update({"final_" + k: v for k, v in state(dp).items()})
        else:
            for step in range(3):
                x, y = batch(step, world)
                with dp.no_sync():
                    loss_fn(dp(mine(x, rank)), mine(y, rank)).backward()
            res.update({"local_" + k: v for k, v in grads(dp).items()})
            x, y = batch(3, world)
            loss_fn(dp(mine(x, rank)), mine(y, rank)).backward()
            res.update({"grad_" + k: v for k, v in grads(dp).items()})
    elif mode == "nosync_disagree":
        # rank 1 runs one backward under no_sync() that rank 0 does not: rank
        # 0's synced pass is summed with rank 1's next one; both ranks see it
        dp = paddle.DataParallel(LinearNet())
        loss_fn = nn.MSELoss()
        x, y = batch(0, world)
        if rank == 1:
            with dp.no_sync():
                loss_fn(dp(mine(x, rank)), mine(y, rank)).backward()
        record_error(res, os.path.join(out, "nosync_disagree_rank%d.txt" % rank),
                     lambda: loss_fn(dp(mine(x, rank)), mine(y, rank)).backward())
        # the counts start again: the next synced step agrees
        dp.clear_gradients()
        loss_fn(dp(mine(x, rank)), mine(y, rank)).backward()
        res.update({"grad_" + k: v for k, v in grads(dp).items()})
    elif mode == "unused":
        layer = BranchNet()
        dp = paddle.DataParallel(layer, find_unused_parameters=True)
        x, y = batch(0, world)
        loss = paddle.mean((dp(mine(x, rank), use_extra=(rank == 0)) - mine(y, rank)) ** 2)
        loss.backward()
        res.update({"grad_" + k: v for k, v in grads(dp).items()})
        res["never_grad_is_none"] = np.array([layer._never.weight.grad is None])
        # the same without find_unused_parameters: an error on every rank, no hang
        strict = paddle.DataParallel(BranchNet())
        loss = paddle.mean((strict(mine(x, rank), use_extra=(rank == 0)) - mine(y, rank)) ** 2)
        record_error(res, os.path.join(out, "unused_rank%d.txt" % rank), loss.backward)
        # after the error the ranks still agree: a synced step with every parameter used works
        strict.clear_gradients()
        h = strict._layers
        loss = paddle.mean(strict(mine(x, rank), use_extra=True) + h._never(mine(x, rank)))
        loss.backward()
        res["after_error_ok"] = np.array([True])
        # a backward pass that raises on rank 1 only (a grad-ready hook of
        # its own, midway): rank 1 gets its error, rank 0 one naming rank 1
        from pe.eager import autograd

        def boom(leaf):
            if rank == 1 and leaf is h._linear.weight:
                raise ValueError("rank 1's backward fails on purpose")
        autograd.add_grad_ready_hook(boom)
        strict.clear_gradients()
        loss = paddle.mean(strict(mine(x, rank), use_extra=True) + h._never(mine(x, rank)))
        try:
            loss.backward()
            msg = "no error"
        except (ValueError, paddle.InvalidArgumentError) as e:
            msg = "%s: %s" % (type(e).__name__, e)
        finally:
            autograd._grad_ready.remove(boom)
        with open(os.path.join(out, "failed_rank%d.txt" % rank), "w") as f:
            f.write(msg)
        strict.clear_gradients()
        loss = paddle.mean(strict(mine(x, rank), use_extra=True) + h._never(mine(x, rank)))
        loss.backward()
        res["after_failure_grad"] = h._linear.weight.grad.numpy()
    elif mode == "overlap":
        from pe.distributed import parallel
        from pe.eager import autograd
        layer = DeepNet()
        dp = paddle.DataParallel(layer, comm_buffer_size=1e-6, last_comm_buffer_size=1e-6)
        res.update({"init_" + k: v for k, v in state(dp).items()})
        res["buckets"] = np.array([len(b) for b in dp._buckets])
        events = []
        run_prepared = autograd._run_prepared

        def traced_run_prepared(op, raws):   # every op of the backward pass (grad ops, sums)
            out = run_prepared(op, raws)
            events.append("op " + op.desc[0])
            return out

        parallel._trace = lambda what, k: events.append("%s %d" % (what, k))
        x, y = batch(0, world)
        loss = nn.MSELoss()(dp(mine(x, rank)), mine(y, rank))
        autograd._run_prepared = traced_run_prepared
        try:
            loss.backward()
        finally:
            autograd._run_prepared = run_prepared
            parallel._trace = None
        res["events"] = np.array(events)
        res.update({"grad_" + k: v for k, v in grads(dp).items()})
    elif mode == "pylayer":
        # seed 001's second example as written, the data per rank: gradients kept local by no_sync,
        # then averaged by hand before each step
        model = SimpleNet()
        model = paddle.DataParallel(model)
        res.update({"init_" + k: v for k, v in state(model).items()})
        opt = paddle.optimizer.SGD(learning_rate=0.01, parameters=model.parameters())
        for step in range(STEPS):
            x_data = pylayer_batch(step, world)[rank * 2:(rank + 1) * 2]
            x = paddle.to_tensor(x_data)
            x.stop_gradient = False
            with model.no_sync():
                y_pred = model(x)
                loss = y_pred.mean()
                loss.backward()
            if step == 0:
                res.update({"local_" + k: v for k, v in grads(model).items()})
            fused_allreduce_gradients(list(model.parameters()), None)
            if step == 0:
                res.update({"grad_" + k: v for k, v in grads(model).items()})
            opt.step()
            opt.clear_grad()
        res.update({"final_" + k: v for k, v in state(model).items()})
        # ranks that disagree about which parameters have a gradient: an error on both, before any exchange
        x = paddle.to_tensor(pylayer_batch(0, world)[rank * 2:(rank + 1) * 2])
        with model.no_sync():
            model(x).mean().backward()
        if rank == 1:
            model._layers.linear.bias.clear_grad()
        record_error(res, os.path.join(out, "pylayer_rank%d.txt" % rank),
                     lambda: fused_allreduce_gradients(list(model.parameters()), None))
    np.savez(os.path.join(out, "%s_rank%d.npz" % (mode, rank)), **res)


if __name__ == "__main__":
    dist.spawn(run, args=(sys.argv[1], sys.argv[2]), nprocs=2)
    print("spawn returned", flush=True)
