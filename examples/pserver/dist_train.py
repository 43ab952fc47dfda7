"""Parameter-server training of a linear regression, launched as Paddle 1.x's
fluid cluster quick start launches it (PADDLE_TRAINING_ROLE and the other
PADDLE_* variables; see docs/guide.md, "Parameter-server training"):

    # two pservers (on one machine: 127.0.0.1 and 127.0.0.2, the same port) ...
    PADDLE_TRAINING_ROLE=PSERVER PADDLE_CURRENT_IP=127.0.0.1 PADDLE_PSERVER_IPS=127.0.0.1,127.0.0.2 \
        PADDLE_TRAINERS=2 PADDLE_PSERVER_PORT=6174 python3 dist_train.py &
    PADDLE_TRAINING_ROLE=PSERVER PADDLE_CURRENT_IP=127.0.0.2 PADDLE_PSERVER_IPS=127.0.0.1,127.0.0.2 \
        PADDLE_TRAINERS=2 PADDLE_PSERVER_PORT=6174 python3 dist_train.py &
    # ... and two trainers
    PADDLE_TRAINING_ROLE=TRAINER PADDLE_PSERVER_IPS=127.0.0.1,127.0.0.2 PADDLE_TRAINERS=2 \
        PADDLE_TRAINER_ID=0 PADDLE_PSERVER_PORT=6174 python3 dist_train.py &
    PADDLE_TRAINING_ROLE=TRAINER PADDLE_PSERVER_IPS=127.0.0.1,127.0.0.2 PADDLE_TRAINERS=2 \
        PADDLE_TRAINER_ID=1 PADDLE_PSERVER_PORT=6174 python3 dist_train.py

The data is a synthetic regression set of the UCI housing shape (13
features), made from a fixed seed, so every process sees the same samples;
each trainer reads its own share of every batch, shuffled by
paddle.reader.shuffle (Python's random, seeded with the trainer id) as the
quick start shuffles. DIST_TRAIN_EPOCHS and
DIST_TRAIN_SLICE (slice_var_up, 1/0) and DIST_TRAIN_SPLIT (RoundRobin /
HashName) vary the run; the trainers print their loss and write it, one
value per line, to DIST_TRAIN_LOSS_FILE when that is set.
"""
import os
import random

import numpy as np

import pe as paddle
import pe.fluid as fluid

BATCH_SIZE = 16
EPOCH_NUM = int(os.getenv("DIST_TRAIN_EPOCHS", "5"))


def housing_like(n=256, seed=7):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, size=(n, 13)).astype("float32")
    w = rng.uniform(-2, 2, size=(13, 1)).astype("float32")
    y = (x @ w + 0.5 + 0.05 * rng.randn(n, 1)).astype("float32")
    return x, y


def train_reader(trainer_id, trainers):
    x, y = housing_like()

    def reader():
        for i in range(len(x)):
            if i % trainers == trainer_id:
                yield x[i], y[i]
    return reader


def train():
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    x = fluid.layers.data(name="x", shape=[13], dtype="float32")
    y_predict = fluid.layers.fc(input=x, size=1, act=None)
    loss = fluid.layers.square_error_cost(input=y_predict, label=y)
    avg_loss = fluid.layers.mean(loss)
    fluid.optimizer.SGD(learning_rate=0.05).minimize(avg_loss)

    place = fluid.CPUPlace()
    feeder = fluid.DataFeeder(place=place, feed_list=[x, y])
    exe = fluid.Executor(place)

    training_role = os.getenv("PADDLE_TRAINING_ROLE", None)
    port = os.getenv("PADDLE_PSERVER_PORT", "6174")
    pserver_ips = os.getenv("PADDLE_PSERVER_IPS", "")
    trainer_id = int(os.getenv("PADDLE_TRAINER_ID", "0"))
    pserver_endpoints = ",".join(ip + ":" + port for ip in pserver_ips.split(","))
    trainers = int(os.getenv("PADDLE_TRAINERS"))
    current_endpoint = os.getenv("PADDLE_CURRENT_IP", "") + ":" + port

    config = fluid.DistributeTranspilerConfig()
    config.slice_var_up = os.getenv("DIST_TRAIN_SLICE", "1") == "1"
    if os.getenv("DIST_TRAIN_SPLIT", "RoundRobin") == "HashName":
        config.split_method = fluid.transpiler.HashName
    config.min_block_size = 4   # small enough that the 13x1 weight is cut in blocks
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(trainer_id=trainer_id, pservers=pserver_endpoints, trainers=trainers)

    if training_role == "PSERVER":
        pserver_prog = t.get_pserver_program(current_endpoint)
        startup_prog = t.get_startup_program(current_endpoint, pserver_prog)
        exe.run(startup_prog)
        exe.run(pserver_prog)
    elif training_role == "TRAINER":
        trainer_prog = t.get_trainer_program()
        exe.run(fluid.default_startup_program())
        random.seed(trainer_id)  # paddle.reader.shuffle draws from Python's random
        reader = paddle.batch(paddle.reader.shuffle(train_reader(trainer_id, trainers), buf_size=500),
                              batch_size=BATCH_SIZE // trainers)
        losses = []
        for epoch in range(EPOCH_NUM):
            for batch_id, batch_data in enumerate(reader()):
                avg_loss_value, = exe.run(trainer_prog, feed=feeder.feed(batch_data), fetch_list=[avg_loss])
                losses.append(float(avg_loss_value[0]))
                if (batch_id + 1) % 8 == 0:
                    print("Epoch: {0}, Batch: {1}, loss: {2}".format(epoch, batch_id, losses[-1]), flush=True)
        exe.close()
        if os.getenv("DIST_TRAIN_LOSS_FILE"):
            with open(os.environ["DIST_TRAIN_LOSS_FILE"], "w") as f:
                f.write("\n".join("%.9g" % v for v in losses) + "\n")
    else:
        raise AssertionError("PADDLE_TRAINING_ROLE should be one of [TRAINER, PSERVER]")


if __name__ == "__main__":
    train()
