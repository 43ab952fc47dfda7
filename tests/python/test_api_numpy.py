"""tests/python/test_api_numpy.py — numpy in and out of PE.

- Tensor.set(ndarray, place) / numpy.array(tensor) round trips for every
  dtype numpy and PE share, including non-contiguous and byte-swapped input.
- Zero-copy in: a C-contiguous array with a PE dtype is read in place (the
  tensor's data pointer is the array's, and a steady-state run with a feed
  makes no PE allocation at all); other layouts are converted once.
- Zero-copy out: fetched results are numpy views of the fetched tensor, valid
  after the executor is gone; scope variables are copied out (their storage
  changes with the next run).
- Handles on erased scope variables fail with NotFoundError (no dangling).
"""
import gc

import numpy as np
import pytest

import pe
from pe.utils import unique_name

pe.enable_static()

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_set_and_array_round_trip(dtype):
    rng = np.random.RandomState(1)
    a = (rng.randn(3, 5) * 10).astype(dtype)
    scope = pe.static.Scope()
    t = scope.var("v").get_tensor()
    t.set(a, pe.CPUPlace())
    assert t.shape() == [3, 5]
    assert t._dtype() == np.dtype(dtype).name
    b = np.array(t)
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(a, b)
    a[0, 0] = 0  # set() copied: the scope does not alias the array
    assert np.array(scope.find_var("v").get_tensor())[0, 0] == b[0, 0]


def test_set_non_contiguous_and_swapped():
    scope = pe.static.Scope()
    t = scope.var("v").get_tensor()
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    t.set(base[:, ::2])
    np.testing.assert_array_equal(np.array(t), base[:, ::2])
    t.set(base.T)
    np.testing.assert_array_equal(np.array(t), base.T)
    t.set(base.astype(">f8"))
    got = np.array(t)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, base)
    t.set(np.float32(3.5))  # 0-d
    assert t.shape() == [] and float(np.array(t)) == 3.5


def test_as_tensor_zero_copy_only_when_layout_allows():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = pe._core.as_tensor(a)
    assert t._data_ptr() == a.ctypes.data
    del a
    gc.collect()
    np.testing.assert_array_equal(np.array(t), np.arange(12, dtype=np.float32).reshape(3, 4))  # kept alive
    b = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    tb = pe._core.as_tensor(b)
    assert tb._data_ptr() != b.ctypes.data
    np.testing.assert_array_equal(np.array(tb), b)


def _net():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 8], "float32")
        out = pe.static.nn.fc(x, 4, activation="relu")
    return main, startup, x, out


def test_feed_is_read_in_place_no_allocation():
    main, startup, x, out = _net()
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(0)
    for _ in range(2):  # warm up: temporaries reach their steady-state sizes
        exe.run(main, feed={"x": rng.randn(16, 8).astype(np.float32)}, fetch_list=[], scope=scope)
    before = pe._core.alloc_stats()
    for _ in range(3):
        exe.run(main, feed={"x": rng.randn(16, 8).astype(np.float32)}, fetch_list=[], scope=scope)
    after = pe._core.alloc_stats()
    assert after["n_allocs"] == before["n_allocs"], (before, after)


def test_fetch_is_a_view_that_outlives_the_executor():
    main, startup, x, out = _net()
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    xv = np.random.RandomState(2).randn(5, 8).astype(np.float32)
    got, = exe.run(main, feed={"x": xv}, fetch_list=[out], scope=scope)
    assert isinstance(got.base, pe.Tensor)
    tensors = exe.run(main, feed={"x": xv}, fetch_list=[out], scope=scope, return_numpy=False)
    assert isinstance(tensors[0], pe.Tensor) and tensors[0].shape() == [5, 4]
    w = np.array(scope.find_var("fc_0.w_0").get_tensor())
    b = np.array(scope.find_var("fc_0.b_0").get_tensor())
    del exe, tensors
    gc.collect()
    np.testing.assert_allclose(got, np.maximum(xv @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_list_and_scalar_feeds_are_converted_to_the_declared_dtype():
    main, startup, x, out = _net()
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    rows = [[0.5] * 8, [1.0] * 8]
    a, = exe.run(main, feed={"x": rows}, fetch_list=[out], scope=scope)
    b, = exe.run(main, feed={x: np.array(rows, np.float32)}, fetch_list=[out.name], scope=scope)
    np.testing.assert_array_equal(a, b)


def test_erased_variable_handle_fails_cleanly():
    scope = pe.static.Scope()
    scope.var("a").get_tensor().set(np.ones(3, np.float32))
    handle = scope.find_var("a")
    t = handle.get_tensor()
    assert scope.erase_var("a")
    with pytest.raises(pe.NotFoundError, match="'a'"):
        np.array(t)
    with pytest.raises(pe.NotFoundError):
        handle.get_tensor()
    assert scope.find_var("a") is None


def test_scope_parent_chain():
    parent = pe.static.Scope()
    parent.var("w").get_tensor().set(np.full(2, 7, np.float32))
    child = parent.new_scope()
    assert child.parent() == parent
    np.testing.assert_array_equal(np.array(child.find_var("w").get_tensor()), [7, 7])
    assert child.find_local_var("w") is None
    child.var("w").get_tensor().set(np.zeros(2, np.float32))
    np.testing.assert_array_equal(np.array(child.find_var("w").get_tensor()), [0, 0])
    np.testing.assert_array_equal(np.array(parent.find_var("w").get_tensor()), [7, 7])
    del parent
    gc.collect()
    assert child.parent().local_var_names() == ["w"]  # the child keeps its parent alive


def test_uninitialized_tensor_to_numpy_is_an_error():
    scope = pe.static.Scope()
    t = scope.var("empty").get_tensor()
    assert not t._is_initialized()
    with pytest.raises(pe.InvalidArgumentError, match="empty"):
        np.array(t)
