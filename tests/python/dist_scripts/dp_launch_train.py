"""A rank of test_data_parallel.py's launch test, started by

    python -m pe.distributed.launch --nproc_per_node 2 dp_launch_train.py OUT

Paddle's DataParallel example as a user writes it (`import pe as paddle`):
init_parallel_env, a two-layer LinearNet wrapped in paddle.DataParallel,
Adam over dp_layer.parameters(), MSELoss; 10 steps, each rank on its own
half of a batch every rank draws from the same numpy seed. The ranks start
from different random parameters (paddle.seed(7 + rank)). Writes
OUT/launch_rank<r>.npz: the parameters after the broadcast (init_*) and
after the 10 steps (final_*).
"""
import os
import sys

import numpy as np

import pe as paddle
import pe.distributed as dist
import pe.nn as nn

STEPS = 10
PER_RANK = 6


class LinearNet(nn.Layer):
    def __init__(self):
        super().__init__()
        self._linear1 = nn.Linear(10, 10)
        self._linear2 = nn.Linear(10, 1)

    def forward(self, x):
        return self._linear2(self._linear1(x))


def data(step, world):
    rs = np.random.RandomState(500 + step)
    return rs.randn(world * PER_RANK, 10).astype("float32"), rs.randn(world * PER_RANK, 1).astype("float32")


def train(out):
    paddle.disable_static()
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    paddle.seed(7 + rank)
    layer = LinearNet()
    dp_layer = paddle.DataParallel(layer)
    loss_fn = nn.MSELoss()
    adam = paddle.optimizer.Adam(learning_rate=0.001, parameters=dp_layer.parameters())
    init = {k: v.numpy() for k, v in dp_layer.state_dict().items()}
    for step in range(STEPS):
        x, y = data(step, world)
        inputs = paddle.to_tensor(x[rank * PER_RANK:(rank + 1) * PER_RANK])
        labels = paddle.to_tensor(y[rank * PER_RANK:(rank + 1) * PER_RANK])
        loss = loss_fn(dp_layer(inputs), labels)
        loss.backward()
        adam.step()
        adam.clear_grad()
    res = {"init_" + k: v for k, v in init.items()}
    res.update({"final_" + k: v.numpy() for k, v in dp_layer.state_dict().items()})
    np.savez(os.path.join(out, "launch_rank%d.npz" % rank), **res)
    print("rank %d of %d done" % (rank, world), flush=True)


if __name__ == "__main__":
    train(sys.argv[1])
