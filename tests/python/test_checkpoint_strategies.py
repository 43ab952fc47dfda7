"""tests/python/test_checkpoint_strategies.py — a checkpoint holds the true state under every strategy.

For every combination of reduce_strategy (AllReduce, Reduce),
shard_optimizer, fuse_all_optimizer_ops and fuse_all_reduce_ops, with
momentum and with adam, on 2 places: 3 steps, pe.static.save, load into a
fresh scope, a new ParallelExecutor, 3 more steps gives the losses and
every persistable (parameters, velocities / moments, beta powers) of 6
uninterrupted steps, bit for bit. A strategy that left an accumulator of a
place other than 0 out of the caller's scope would save stale values and
the resumed run would diverge.
"""
import itertools
import os

import numpy as np
import pytest

import pe
from pe.utils import unique_name

pe.enable_static()


def build(opt):
    main, startup = pe.static.Program(), pe.static.Program()
    main.random_seed = startup.random_seed = 5
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 6], "float32")
        y = pe.static.data("y", [None, 1], "int64")
        h = pe.static.nn.fc(x, 16, activation="relu")
        h = pe.static.nn.fc(h, 12, activation="tanh")
        loss = pe.nn.functional.cross_entropy(pe.static.nn.fc(h, 3), y)
        (pe.optimizer.Momentum(learning_rate=0.1, momentum=0.9) if opt == "momentum"
         else pe.optimizer.Adam(learning_rate=0.01)).minimize(loss)
    return main, startup, loss


def feeds():
    rng = np.random.RandomState(11)
    return [{"x": rng.randn(8, 6).astype(np.float32), "y": rng.randint(0, 3, (8, 1)).astype(np.int64)}
            for _ in range(6)]


def strategy(reduce, shard, fuse_opt, fuse_ar):
    bs = pe.static.BuildStrategy()
    bs.reduce_strategy = (pe.static.BuildStrategy.ReduceStrategy.Reduce if reduce
                          else pe.static.BuildStrategy.ReduceStrategy.AllReduce)
    bs.shard_optimizer = shard
    bs.fuse_all_optimizer_ops = fuse_opt
    bs.fuse_all_reduce_ops = fuse_ar
    return bs


def persistables(main, scope):
    return {v.name: np.array(scope.find_var(v.name).get_tensor()) for v in main.list_vars() if v.persistable}


@pytest.mark.parametrize("opt", ["momentum", "adam"])
@pytest.mark.parametrize("reduce,shard,fuse_opt,fuse_ar", list(itertools.product([False, True], repeat=4)))
def test_save_load_resume_equals_uninterrupted(tmp_path, monkeypatch, opt, reduce, shard, fuse_opt, fuse_ar):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, loss = build(opt)
    f = feeds()

    def pexe(scope):
        return pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                          build_strategy=strategy(reduce, shard, fuse_opt, fuse_ar))

    s_ref = pe.static.Scope()
    pe.static.Executor().run(startup, scope=s_ref)
    e_ref = pexe(s_ref)
    ref = [e_ref.run([loss.name], feed=fd)[0] for fd in f]
    s1 = pe.static.Scope()
    pe.static.Executor().run(startup, scope=s1)
    e1 = pexe(s1)
    first = [e1.run([loss.name], feed=fd)[0] for fd in f[:3]]
    path = str(tmp_path / "ckpt")
    pe.static.save(main, path, scope=s1)
    s2 = pe.static.Scope()
    pe.static.load(main, path, scope=s2)
    e2 = pexe(s2)
    rest = [e2.run([loss.name], feed=fd)[0] for fd in f[3:]]
    np.testing.assert_array_equal(np.concatenate(first + rest), np.concatenate(ref))
    want, got = persistables(main, s_ref), persistables(main, s2)
    assert set(want) == set(got) and len(want) > 6
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
