"""tests/python/test_api_vs_c.py — training through the Python API equals the
C API run: the example MLP (examples/mlp_forward.pe) trained 5 momentum
steps on the same Fashion-MNIST batches by `pe train` (the C engine driven
from C: pe_optimizer_minimize + the ParallelExecutor) and through
pe.static / pe.optimizer.Momentum on 1 and 2 places ends with the same
parameters. (tests/python/test_train_parity.py holds the same runs against
PyTorch.)"""
import os
import subprocess
import sys

import numpy as np
import pytest

import pe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pe_json import pe_bin  # noqa: E402
from train_ref import EXAMPLES, fashion_mnist, make_batches, read_safetensors, write_batches  # noqa: E402

STEPS = 5


@pytest.fixture(scope="module")
def batches():
    x, y = fashion_mnist("train")
    return make_batches("mlp", x, y, n=STEPS, batch=32)


@pytest.mark.parametrize("places", [1, 2])
def test_python_api_equals_pe_train(places, batches, tmp_path, monkeypatch):
    fwd, st = os.path.join(EXAMPLES, "mlp_forward.pe"), os.path.join(EXAMPLES, "mlp_forward_startup.pe")
    write_batches(str(tmp_path / "data"), "mlp", batches)
    ckpt = tmp_path / "c.safetensors"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([pe_bin(), "train", fwd, "--startup", st, "--loss", "loss", "--optimizer", "momentum",
                        "--lr", "0.05", "--momentum", "0.9", "--data", str(tmp_path / "data"), "--steps", str(STEPS),
                        "--places", "cpu:%d" % places, "--save", str(ckpt)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    want = read_safetensors(str(ckpt))

    pe.enable_static()
    main, startup = pe.static.load_program(fwd), pe.static.load_program(st)
    with pe.static.program_guard(main, startup):
        loss = main.global_block().var("loss")
        pe.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    monkeypatch.setenv("CPU_NUM", str(places))
    scope = pe.static.Scope()
    exe = pe.static.Executor(pe.CPUPlace())
    with pe.static.scope_guard(scope):
        exe.run(startup)
        train = pe.static.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
        for x, y in batches:
            exe.run(train, feed={"x": x, "label": y}, fetch_list=[loss.name])
        params = [p.name for p in main.all_parameters()]
        assert params
        for name in params:
            got = np.array(scope.find_var(name).get_tensor())
            np.testing.assert_allclose(got, want[name], rtol=1e-6, atol=1e-7, err_msg=name)
