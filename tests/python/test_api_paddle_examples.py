"""tests/python/test_api_paddle_examples.py — the code examples of Paddle's ParallelExecutor page
(../shared/seeds/003_67dc9fc015ecd89a.txt) run unchanged with `import pe as paddle` and use_cuda = False.

Each example is the page's code verbatim except for those two lines; it runs
in its own interpreter (the examples set CPU_NUM in os.environ). After the
example, a check block recomputes in numpy what the example's fetches must
be from the parameters left in the global scope:

  1. constructor example: one SGD step on 10 rows over 2 places, then the
     test executor (share_vars_from) on the updated parameters. With PE's
     batch_share gradient scaling the step equals one step on the whole
     batch, so the initial parameters are recovered exactly from the final
     ones (w0 = w1 + lr * sum(x) / 100, b0 = b1 + lr / 10) and both fetched
     losses must match numpy.
  2. run() example: a dict feed (split 5/5), then a list feed (10 rows on
     place 0, 9 on place 1): the per-place losses of the list run must be
     the means over each place's own rows.
  3. drop_local_exe_scopes() example: no optimizer, so the fetched per-place
     losses are means of x @ w + b over each half of the batch.
"""
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXAMPLE_CTOR = '''
import pe as paddle
import numpy
import os

use_cuda = False
paddle.enable_static()
place = paddle.CUDAPlace(0) if use_cuda else paddle.CPUPlace()

# NOTE: If you use CPU to run the program, you need
# to specify the CPU_NUM, otherwise, PaddlePaddle will use
# all the number of the logic core as the CPU_NUM,
# in that case, the batch size of the input should be
# greater than CPU_NUM, if not, the process will be
# failed by an exception.
if not use_cuda:
    os.environ['CPU_NUM'] = str(2)

exe = paddle.static.Executor(place)

train_program = paddle.static.Program()
startup_program = paddle.static.Program()
with paddle.static.program_guard(train_program, startup_program):
    data = paddle.static.data(name='X', shape=[None, 1], dtype='float32')
    hidden = paddle.static.nn.fc(data, 10)
    loss = paddle.mean(hidden)
    test_program = paddle.static.default_main_program().clone(for_test=True)
    paddle.optimizer.SGD(learning_rate=0.01).minimize(loss)

exe.run(startup_program)

train_exe = paddle.static.ParallelExecutor(use_cuda=use_cuda,
                                           main_program=train_program,
                                           loss_name=loss.name)
# Note: if share_vars_from is not set here, the test parameter is different to the train one
test_exe = paddle.static.ParallelExecutor(use_cuda=use_cuda,
                                          main_program=test_program,
                                          share_vars_from=train_exe)

x = numpy.random.random(size=(10, 1)).astype('float32')
loss_data, = train_exe.run(feed={"X": x},
                           fetch_list=[loss.name])

loss_data, = test_exe.run(feed={"X": x},
                          fetch_list=[loss.name])
'''

SHARDS = '''
def shards(a, n):
    """The rows each of n places gets of a fed batch (the last places take the extra rows)."""
    k, extra = divmod(len(a), n)
    rows = [k + (1 if p >= n - extra else 0) for p in range(n)]
    return [a[sum(rows[:p]):sum(rows[:p + 1])] for p in range(n)]
'''

CHECK_CTOR = '''
import numpy as np
scope = paddle.static.global_scope()
w1 = np.array(scope.find_var("fc_0.w_0").get_tensor()).astype(np.float64)
b1 = np.array(scope.find_var("fc_0.b_0").get_tensor()).astype(np.float64)
x64 = x.astype(np.float64)
# the test run saw the updated parameters
n = test_exe.device_count
assert loss_data.shape == (n,), loss_data.shape
np.testing.assert_allclose(loss_data, [np.mean(r @ w1 + b1) for r in shards(x64, n)], rtol=1e-5, atol=1e-6)
# one SGD step of lr 0.01 on mean(x @ w + b) over all 10 x 10 outputs
w0 = w1 + 0.01 * x64.sum() / 100.0
b0 = b1 + 0.01 / 10.0
assert np.all(np.abs(w0) <= np.sqrt(6.0 / 11) + 1e-6), w0  # XavierUniform bound of a [1, 10] weight
np.testing.assert_allclose(b0, np.zeros(10), atol=1e-7)     # bias initialized to 0
assert train_program.num_blocks == 1 and test_program.num_blocks == 1
assert not any(op.type.endswith("_grad") or op.type == "sgd" for op in test_program.global_block().ops)
print("CHECK OK")
'''

EXAMPLE_RUN = '''
import pe as paddle
import numpy
import os

use_cuda = False
paddle.enable_static()
place = paddle.CUDAPlace(0) if use_cuda else paddle.CPUPlace()

# NOTE: If you use CPU to run the program, you need
# to specify the CPU_NUM, otherwise, PaddlePaddle will use
# all the number of the logic core as the CPU_NUM,
# in that case, the batch size of the input should be
# greater than CPU_NUM, if not, the process will be
# failed by an exception.
if not use_cuda:
    os.environ['CPU_NUM'] = str(2)

exe = paddle.static.Executor(place)

train_program = paddle.static.Program()
startup_program = paddle.static.Program()
with paddle.static.program_guard(train_program, startup_program):
    data = paddle.static.data(name='X', shape=[None, 1], dtype='float32')
    hidden = paddle.static.nn.fc(data, 10)
    loss = paddle.mean(hidden)
    paddle.optimizer.SGD(learning_rate=0.01).minimize(loss)

exe.run(startup_program)

train_exe = paddle.static.ParallelExecutor(use_cuda=use_cuda,
                                           main_program=train_program,
                                           loss_name=loss.name)

# If the feed is a dict:
# the image will be split into devices. If there is two devices
# each device will process an image with shape (5, 1)
x = numpy.random.random(size=(10, 1)).astype('float32')
loss_data, = train_exe.run(feed={"X": x},
                           fetch_list=[loss.name])

# If the feed is a list:
# each device will process each element in the list.
# the 1st device will process an image with shape (10, 1)
# the 2nd device will process an image with shape (9, 1)
#
# you can use exe.device_count to get the device number.
x2 = numpy.random.random(size=(9, 1)).astype('float32')
loss_data, = train_exe.run(feed=[{"X": x}, {"X": x2}],
                           fetch_list=[loss.name])
'''

CHECK_RUN = '''
import numpy as np
assert train_exe.device_count == 2
scope = paddle.static.global_scope()
w2 = np.array(scope.find_var("fc_0.w_0").get_tensor()).astype(np.float64)
b2 = np.array(scope.find_var("fc_0.b_0").get_tensor()).astype(np.float64)
x64, x264 = x.astype(np.float64), x2.astype(np.float64)
# undo the list-feed step: batch_share weights place 0 by 10/19 and place 1 by 9/19,
# i.e. one step on the mean over all 19 x 10 outputs
w1 = w2 + 0.01 * (x64.sum() + x264.sum()) / 190.0
b1 = b2 + 0.01 * 19 / 190.0
assert loss_data.shape == (2,), loss_data.shape
np.testing.assert_allclose(loss_data, [np.mean(x64 @ w1 + b1), np.mean(x264 @ w1 + b1)], rtol=1e-5, atol=1e-6)
print("CHECK OK")
'''

EXAMPLE_DROP = '''
import pe as paddle
import numpy
import os

use_cuda = False
# NOTE: If you use CPU to run the program, you need
# to specify the CPU_NUM, otherwise, PaddlePaddle will use
# all the number of the logic core as the CPU_NUM,
# in that case, the batch size of the input should be
# greater than CPU_NUM, if not, the process will be
# failed by an exception.
if not use_cuda:
    os.environ['CPU_NUM'] = str(2)

paddle.enable_static()
train_program = paddle.static.Program()
startup_program = paddle.static.Program()
with paddle.static.program_guard(train_program, startup_program):
    data = paddle.static.data(name='X', shape=[None, 1], dtype='float32')
    hidden = paddle.static.nn.fc(data, 10)
    loss = paddle.mean(hidden)

place = paddle.CUDAPlace(0) if use_cuda else paddle.CPUPlace()
exe = paddle.static.Executor(place)
exe.run(startup_program)

parallel_exe = paddle.static.ParallelExecutor(use_cuda=use_cuda,
                                              main_program=train_program,
                                              loss_name=loss.name)

x = numpy.random.random(size=(10, 1)).astype('float32')
loss_data, = parallel_exe.run(feed={"X": x},
                              fetch_list=[loss.name])

parallel_exe.drop_local_exe_scopes()
'''

CHECK_DROP = '''
import numpy as np
scope = paddle.static.global_scope()
w = np.array(scope.find_var("fc_0.w_0").get_tensor()).astype(np.float64)
b = np.array(scope.find_var("fc_0.b_0").get_tensor()).astype(np.float64)
x64 = x.astype(np.float64)
np.testing.assert_allclose(loss_data, [np.mean(r @ w + b) for r in shards(x64, parallel_exe.device_count)],
                           rtol=1e-5, atol=1e-6)
assert parallel_exe._pe.local_exe_scopes_bytes() == 0
# the executor rebuilds its scopes on the next run and gives the same result
again, = parallel_exe.run(feed={"X": x}, fetch_list=[loss.name])
np.testing.assert_array_equal(again, loss_data)
print("CHECK OK")
'''


def run_script(tmp_path, code):
    path = tmp_path / "example.py"
    path.write_text(code)
    env = dict(os.environ)
    env.pop("CPU_NUM", None)
    r = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "example failed:\n" + r.stdout + r.stderr
    assert "CHECK OK" in r.stdout
    return r


@pytest.mark.parametrize("example,check", [(EXAMPLE_CTOR, CHECK_CTOR), (EXAMPLE_RUN, CHECK_RUN),
                                           (EXAMPLE_DROP, CHECK_DROP)],
                         ids=["constructor", "run", "drop_local_exe_scopes"])
def test_paddle_example(tmp_path, example, check):
    run_script(tmp_path, textwrap.dedent(example) + SHARDS + textwrap.dedent(check))


def _cuda_devices():
    r = subprocess.run([sys.executable, "-c", "import pe; print(pe._core.cuda_device_count())"],
                       capture_output=True, text=True, timeout=60)
    return int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else 0


@pytest.mark.parametrize("example,check,gpus", [(EXAMPLE_CTOR, CHECK_CTOR, 1), (EXAMPLE_RUN, CHECK_RUN, 2),
                                                (EXAMPLE_DROP, CHECK_DROP, 1)],
                         ids=["constructor", "run", "drop_local_exe_scopes"])
def test_paddle_example_use_cuda(tmp_path, example, check, gpus):
    """The page's own setting, use_cuda = True: every visible GPU is a place (the
    run example's list feed names two places, so it needs two GPUs)."""
    have = _cuda_devices()
    if have < gpus:
        pytest.skip("SKIPPED: use_cuda = True needs %d GPU%s; %d visible to pe" % (gpus, "s" if gpus > 1 else "", have))
    code = textwrap.dedent(example).replace("use_cuda = False", "use_cuda = True")
    run_script(tmp_path, code + SHARDS + textwrap.dedent(check).replace("assert train_exe.device_count == 2",
                                                                         "assert train_exe.device_count >= 2"))


def test_examples_are_verbatim():
    """The examples above are the seed page's code with only the import and use_cuda changed."""
    seed = os.path.join(os.path.dirname(REPO), "shared", "seeds", "003_67dc9fc015ecd89a.txt")
    if not os.path.exists(seed):
        pytest.skip("seed page not available at " + seed)
    text = open(seed, encoding="utf-8").read()
    for ex in (EXAMPLE_CTOR, EXAMPLE_RUN, EXAMPLE_DROP):
        body = ex.replace("import pe as paddle", "import paddle").replace("use_cuda = False", "use_cuda = True")
        for line in body.strip().splitlines():
            assert line.strip() in text, "line not in the seed page: %r" % line
