"""Seed 002's nccl2 mode, trainers= form: a fluid regression model trained by
N trainer processes (started by mpirun; the rank comes from the launcher's
environment). Writes the final parameters to OUT_DIR/params.rank<N>.npz.

    mpirun -np 2 python3 fluid_nccl2_train.py OUT_DIR STEPS
    python3 fluid_nccl2_train.py OUT_DIR STEPS --places 2      # the 1-process reference
"""
import os
import sys

import numpy as np

import pe as paddle  # noqa: F401
import pe.fluid as fluid

out_dir, steps = sys.argv[1], int(sys.argv[2])
places = int(sys.argv[sys.argv.index("--places") + 1]) if "--places" in sys.argv else 1
env = os.environ
trainer_id = int(env.get("PADDLE_TRAINER_ID", env.get("OMPI_COMM_WORLD_RANK", "0")))
n = int(env.get("PADDLE_TRAINERS_NUM", env.get("OMPI_COMM_WORLD_SIZE", "1")))
os.environ["CPU_NUM"] = str(places)
trainers = ",".join("127.0.0.1:%d" % (6170 + i) for i in range(n))
curr_ep = trainers.split(",")[trainer_id]

paddle.seed(100 + trainer_id)  # different seeds: the broadcast from trainer 0 makes them agree
x = fluid.layers.data(name="x", shape=[13], dtype="float32")
y = fluid.layers.data(name="y", shape=[1], dtype="float32")
hidden = fluid.layers.fc(input=x, size=16, act="relu")
pred = fluid.layers.fc(input=hidden, size=1, act=None)
loss_var = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
fluid.optimizer.Momentum(learning_rate=0.01, momentum=0.9).minimize(loss_var)

if n > 1:
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(trainer_id, trainers=trainers, current_endpoint=curr_ep)

use_cuda = False
exe = fluid.Executor(fluid.CPUPlace())
exe.run(fluid.default_startup_program())
pexe = fluid.ParallelExecutor(use_cuda, loss_name=loss_var.name, num_trainers=len(trainers.split(",")),
                              trainer_id=trainer_id)

rng = np.random.RandomState(7)
w_true = rng.randn(13, 1).astype("float32")
global_batch = 12
feeder = fluid.DataFeeder(feed_list=[x, y], place=fluid.CPUPlace())
losses = []
for step in range(steps):
    xs = rng.randn(global_batch, 13).astype("float32")
    ys = xs @ w_true + 0.1
    rows = np.array_split(np.arange(global_batch), n)[trainer_id]  # equal shares here (12 rows)
    mb = [(xs[i], ys[i]) for i in rows]
    loss, = pexe.run(fetch_list=[loss_var.name], feed=feeder.feed(mb))
    losses.append(float(np.mean(loss)))

scope = fluid.global_scope()
params = {p.name: np.array(scope.find_var(p.name).get_tensor())
          for p in fluid.default_main_program().global_block().all_parameters()}
np.savez(os.path.join(out_dir, "params.rank%d.npz" % trainer_id), losses=np.array(losses), **params)
print("trainer %d of %d: loss %.6f -> %.6f" % (trainer_id, n, losses[0], losses[-1]))
