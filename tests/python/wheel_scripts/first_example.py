"""tests/python/wheel_scripts/first_example.py — a first ParallelExecutor program for an installed pe.

What the first example of Paddle's ParallelExecutor page does, written for
this test: a one-layer regression trained on 2 CPU places with a second
executor for testing that shares the trained parameters (share_vars_from),
then a list feed (one dict per place). Run by tests/python/test_wheel.py
with the python of a venv the wheel was installed into, from a directory
outside the source tree: it prints where pe came from and "ok".
"""
import os

os.environ["CPU_NUM"] = "2"  # before pe reads it

import numpy as np
import pe

pe.enable_static()
main, startup = pe.static.Program(), pe.static.Program()
with pe.static.program_guard(main, startup):
    x = pe.static.data(name="x", shape=[None, 3], dtype="float32")
    y = pe.static.nn.fc(x, 4)
    cost = pe.mean(y)
    evaluation = main.clone(for_test=True)
    pe.optimizer.SGD(learning_rate=0.1).minimize(cost)

pe.static.Executor(pe.CPUPlace()).run(startup)
trainer = pe.static.ParallelExecutor(use_cuda=False, main_program=main, loss_name=cost.name)
tester = pe.static.ParallelExecutor(use_cuda=False, main_program=evaluation, share_vars_from=trainer)

batch = np.random.RandomState(0).rand(9, 3).astype("float32")
before, = trainer.run(feed={"x": batch}, fetch_list=[cost.name])   # 9 rows: 4 on place 0, 5 on place 1
after, = tester.run(feed={"x": batch}, fetch_list=[cost.name])
assert before.shape == (2,) and after.shape == (2,), (before.shape, after.shape)
# the cost is linear in the parameters and x >= 0, so one SGD step lowers it on every place's rows
assert (after < before).all(), (before, after)
per_place, = trainer.run(feed=[{"x": batch[:2]}, {"x": batch[2:]}], fetch_list=[cost.name])
assert per_place.shape == (2,)
print("pe %s from %s" % (pe.__version__, os.path.dirname(pe.__file__)))
print("losses before %s, after %s" % (np.round(before, 4).tolist(), np.round(after, 4).tolist()))
print("ok")
