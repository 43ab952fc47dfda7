"""tests/python/test_api_errors.py — engine failures reach Python as pe.Error subclasses.

Each case provokes a real failure inside the C engine (bad program text,
missing file, wrong feed dtype or shape, unknown fetch, too few rows for
the places, uninitialized parameters, a checkpoint that does not match,
CUDA without CUDA) and checks the class (mapped from pe_status), the
`status` attribute, the Python base class users catch (ValueError,
LookupError, OSError, NotImplementedError) and that the message is the
engine's (it names the var / file / place involved). It also checks that an
executor stays usable after a failed run.
"""
import numpy as np
import pytest

import pe
from pe.utils import unique_name

pe.enable_static()


def small_net():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 4], "float32")
        out = pe.static.nn.fc(x, 3)
        loss = pe.mean(out)
    return main, startup, x, out, loss


def test_hierarchy():
    for cls, base, status in [(pe.InvalidArgumentError, ValueError, "PE_ERR_INVALID"),
                              (pe.NotFoundError, LookupError, "PE_ERR_NOT_FOUND"),
                              (pe.IOError, OSError, "PE_ERR_IO"),
                              (pe.FormatError, ValueError, "PE_ERR_FORMAT"),
                              (pe.ResourceExhaustedError, MemoryError, "PE_ERR_NOMEM"),
                              (pe.UnsupportedError, NotImplementedError, "PE_ERR_UNSUPPORTED"),
                              (pe.DeviceError, RuntimeError, "PE_ERR_DEVICE"),
                              (pe.CancelledError, RuntimeError, "PE_ERR_CANCELLED"),
                              (pe.InternalError, RuntimeError, "PE_ERR_INTERNAL")]:
        assert issubclass(cls, pe.Error) and issubclass(cls, base)
        assert cls.status == status
    assert pe.UnimplementedError is pe.UnsupportedError


def test_bad_program_text_is_format_error():
    with pytest.raises(pe.FormatError, match="not a valid PE program"):
        pe._core.Program('{"blocks": [')
    with pytest.raises(pe.FormatError, match="PEPG"):
        pe._core.Program(b"\x00\x01garbage")


def test_semantic_check_names_the_op():
    bad = ('{"version": 1, "blocks": [{"idx": 0, "parent_idx": -1, "vars": [], '
           '"ops": [{"type": "no_such_op", "inputs": [], "outputs": [], "attrs": []}]}]}')
    with pytest.raises(pe.Error, match="no_such_op") as ei:
        pe._core.Program(bad)
    assert isinstance(ei.value, (pe.InvalidArgumentError, pe.NotFoundError, pe.FormatError))


def test_missing_file_names_the_path(tmp_path):
    path = str(tmp_path / "nope.pe")
    with pytest.raises(pe.Error, match="nope.pe") as ei:
        pe.static.load_program(path)
    assert isinstance(ei.value, OSError) or isinstance(ei.value, LookupError)


def test_feed_dtype_and_shape_errors():
    main, startup, x, out, loss = small_net()
    scope = pe.static.Scope()
    exe = pe.static.Executor(pe.CPUPlace())
    exe.run(startup, scope=scope)
    with pytest.raises(pe.InvalidArgumentError, match="feed 'x' has dtype float64") as ei:
        exe.run(main, feed={"x": np.zeros((2, 4))}, fetch_list=[loss], scope=scope)
    assert isinstance(ei.value, ValueError)
    with pytest.raises(pe.InvalidArgumentError, match=r"feed 'x' has shape \[2, 5\]"):
        exe.run(main, feed={"x": np.zeros((2, 5), np.float32)}, fetch_list=[loss], scope=scope)
    with pytest.raises(pe.InvalidArgumentError, match="complex128"):
        exe.run(main, feed={"x": np.zeros((2, 4), np.complex128)}, fetch_list=[loss], scope=scope)
    # the executor is usable after the failures
    v, = exe.run(main, feed={"x": np.ones((2, 4), np.float32)}, fetch_list=[loss], scope=scope)
    assert v.shape == (1,) and np.isfinite(v).all()


def test_unknown_fetch_and_feed_are_not_found():
    main, startup, x, out, loss = small_net()
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    with pytest.raises(pe.NotFoundError, match="fetch 'nope'") as ei:
        exe.run(main, feed={"x": np.ones((2, 4), np.float32)}, fetch_list=["nope"], scope=scope)
    assert isinstance(ei.value, LookupError)
    with pytest.raises(pe.NotFoundError, match="feed 'y'"):
        exe.run(main, feed={"x": np.ones((2, 4), np.float32), "y": np.ones(2, np.float32)}, fetch_list=[loss],
                scope=scope)


def test_uninitialized_parameter_names_it():
    main, startup, x, out, loss = small_net()
    exe = pe.static.Executor()
    with pytest.raises(pe.Error, match="fc_0.w_0"):
        exe.run(main, feed={"x": np.ones((2, 4), np.float32)}, fetch_list=[loss], scope=pe.static.Scope())


def test_too_few_rows_for_places(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, x, out, loss = small_net()
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope)
    with pytest.raises(pe.InvalidArgumentError, match="CPU_NUM=2"):
        pexe.run([loss], feed={"x": np.ones((1, 4), np.float32)})
    with pytest.raises(pe.InvalidArgumentError, match="list feed has 1 entries"):
        pexe.run([loss], feed=[{"x": np.ones((3, 4), np.float32)}])
    got, = pexe.run([loss], feed={"x": np.ones((3, 4), np.float32)})
    assert got.shape == (2,)


def test_bad_cpu_num(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "zero")
    with pytest.raises(pe.InvalidArgumentError, match="CPU_NUM"):
        pe.static.cpu_places()


def test_loss_name_not_in_program():
    main, startup, x, out, loss = small_net()
    with pytest.raises(pe.NotFoundError, match="loss_name 'nope'"):
        pe.static.ParallelExecutor(False, loss_name="nope", main_program=main, scope=pe.static.Scope())


@pytest.mark.skipif(pe.is_compiled_with_cuda(), reason="this build has CUDA")
def test_cuda_without_cuda_is_unsupported():
    with pytest.raises(pe.UnsupportedError, match="without CUDA") as ei:
        pe.static.Executor(pe.CUDAPlace(0))
    assert isinstance(ei.value, NotImplementedError)


def test_checkpoint_mismatch_names_the_var(tmp_path):
    main, startup, x, out, loss = small_net()
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    pe.static.save(main, str(tmp_path / "ck"), scope=scope)
    other_main, other_startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(other_main, other_startup), unique_name.guard():
        pe.static.nn.fc(pe.static.data("x", [None, 5], "float32"), 3)
    with pytest.raises(pe.Error, match="fc_0.w_0"):
        pe.static.load(other_main, str(tmp_path / "ck"), scope=pe.static.Scope())
    with pytest.raises(pe.Error, match="missing.safetensors"):
        pe.static.load(main, str(tmp_path / "missing"), scope=pe.static.Scope())


def test_python_layer_errors_are_pe_errors():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 4], "float32")
        with pytest.raises(pe.InvalidArgumentError, match="inner dims differ"):
            pe.matmul(x, pe.static.data("y", [5, 3], "float32"))
        with pytest.raises(pe.InvalidArgumentError, match="cannot reshape"):
            pe.reshape(pe.static.data("z", [6, 4], "float32"), [5, -1])
        with pytest.raises(pe.UnsupportedError):
            pe.optimizer.SGD(learning_rate=0.1, grad_clip=object())


def test_transforming_a_program_in_use_is_refused():
    main, startup, x, out, loss = small_net()
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    c = main._core_program()
    ex = pe._core.Executor()
    ex.run(c, scope, {"x": np.ones((2, 4), np.float32)}, [loss.name])
    with pytest.raises(pe.InvalidArgumentError, match="in use by 1 executor"):
        pe._core.append_backward(c, loss.name)
    ex.drop_local_scope()
    assert c.n_users == 0
