"""The main job's MLP and CNN (examples/train_fashion_mnist.py's programs:
momentum, the learning rate a fed persistable) trained STEPS steps on a
fixed global batch sequence, by this process's share of the trainers.

    mpirun -np R python3 train_job_models.py MODEL OUT_DIR TAG     # CPU_NUM places each
    python3 train_job_models.py MODEL OUT_DIR TAG                  # one process, CPU_NUM places

Trainer t feeds rows shard_rows(GLOBAL, R, t) of every global batch (the
examples' rule, the last trainers taking the extra rows); every trainer
initializes from its own seed (trainer 0's wins: the broadcast). Writes
OUT_DIR/TAG.rank<t>.npz with every persistable of place 0 and the losses.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))
import train_fashion_mnist as job  # noqa: E402

import pe  # noqa: E402

GLOBAL, STEPS = 12, 50


def main(model, out_dir, tag):
    pe.enable_static()
    n, t = job.trainer_env()
    main_prog, startup, _, loss, _ = job.build_programs(pe, model, "momentum", 0.05, 1)
    startup.random_seed = 1 + 100 * t  # different on every trainer but 0
    scope = pe.static.Scope()
    pe.static.Executor(pe.CPUPlace()).run(startup, scope=scope)
    exe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main_prog, scope=scope,
                                     num_trainers=n, trainer_id=t)
    rng = np.random.RandomState(3)
    lo, hi = job.shard_rows(GLOBAL, n, t)
    losses = []
    for step in range(STEPS):
        x = rng.rand(GLOBAL, 784).astype(np.float32)
        y = rng.randint(0, 10, (GLOBAL, 1)).astype(np.int64)
        lr = job.cosine_lr(0.05, step, STEPS)
        lv, = exe.run(fetch_list=[loss.name], feed={"image": x[lo:hi], "label": y[lo:hi], job.LR_VAR: lr})
        losses.append(float(np.mean(lv)))
    state = {v.name: np.array(scope.find_var(v.name).get_tensor())
             for v in main_prog.global_block().vars.values() if v.persistable and scope.find_var(v.name) is not None}
    np.savez(os.path.join(out_dir, "%s.rank%d.npz" % (tag, t)), __losses__=np.array(losses), **state)


if __name__ == "__main__":
    main(*sys.argv[1:4])
