"""A small MLP trained data-parallel across processes (static graph).

    python -m pe.distributed.launch --nproc_per_node 2 train_mlp.py OUT_DIR   # params.<rank>.npz
    python train_mlp.py OUT_DIR                                               # one process: params.single.npz
    ... train_mlp.py OUT_DIR --mismatch      # rank 1 builds another program (hidden size H + 1)
    ... train_mlp.py OUT_DIR --wrong-count   # every rank says num_trainers = world + 1

Every step takes the same global batch of GLOBAL rows; under launch each
rank feeds its contiguous shard (rank r: rows r*GLOBAL/N ...) to
ParallelExecutor(num_trainers=N, trainer_id=rank). Rank r initializes its
parameters from seed 7 + r: the executor broadcasts trainer 0's, so every
rank must end with the parameters of the one-process run (seed 7, the
whole batch).
"""
import os
import sys

import numpy as np

import pe as paddle
import pe.distributed as dist
from pe.utils import unique_name

paddle.enable_static()
D, H, C, GLOBAL, STEPS = 12, 16, 3, 24, 10
PARAMS = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]


def main(out_dir, fault=None):
    dist.init_parallel_env()
    env = dist.ParallelEnv()
    rank, world = env.rank, env.world_size
    hidden = H + 1 if fault == "--mismatch" and rank == 1 else H
    main_prog, startup = paddle.static.Program(), paddle.static.Program()
    startup.random_seed = 7 + rank
    with paddle.static.program_guard(main_prog, startup), unique_name.guard():
        x = paddle.static.data("x", [None, D], "float32")
        y = paddle.static.data("y", [None, 1], "int64")
        h = paddle.static.nn.fc(x, hidden, activation="tanh")
        logits = paddle.static.nn.fc(h, C)
        loss = paddle.nn.functional.cross_entropy(logits, y)
        paddle.optimizer.SGD(learning_rate=0.2).minimize(loss)
    scope = paddle.static.Scope()
    paddle.static.Executor(paddle.CPUPlace()).run(startup, scope=scope)
    pexe = paddle.static.ParallelExecutor(False, loss_name=loss.name, main_program=main_prog, scope=scope,
                                          num_trainers=world + (fault == "--wrong-count"), trainer_id=rank)
    rng = np.random.RandomState(0)
    w_true = rng.randn(D, C)
    per = GLOBAL // world
    for step in range(STEPS):
        xb = rng.randn(GLOBAL, D).astype(np.float32)
        yb = np.argmax(xb @ w_true, 1).astype(np.int64)[:, None]
        lo, hi = rank * per, (rank + 1) * per
        lv, = pexe.run([loss.name], feed={"x": xb[lo:hi], "y": yb[lo:hi]})
        print("rank %d step %d loss %.5f" % (rank, step, float(np.mean(lv))), flush=True)
    out = {n: np.array(scope.find_var(n).get_tensor()) for n in PARAMS}
    name = "params.%d.npz" % rank if world > 1 else "params.single.npz"
    np.savez(os.path.join(out_dir, name), **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
