"""tests/python/test_math_op_patch.py — the dtype rules of the tensor operators
(Paddle 2.x's math_op_patch), eager tensors and static Variables alike:
true division of an integer tensor (by a number or a tensor) casts its
integer operands to float32 first; a float number with an integer tensor
casts the tensor to float32 (+ - *); an int number keeps the integer dtype
and must fit it (a ValueError naming the op, value and dtype, not a wrapped
value); // and % stay integer.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_math_op_patch.py
"""
import numpy as np
import pytest

import pe
from pe.utils import unique_name

I64 = np.array([7, 8, -7], np.int64)
I32 = np.array([1, 2, 3], np.int32)
F32 = np.array([1.0, 2.5, -4.0], np.float32)

# name, fn(a: int64, b: int32, c: float32), expected value, expected dtype
CASES = [
    ("int/2", lambda a, b, c: a / 2, I64 / 2, "float32"),
    ("int/2.0", lambda a, b, c: a / 2.0, I64 / 2, "float32"),
    ("2/int", lambda a, b, c: 2 / a, 2 / I64, "float32"),
    ("int/int", lambda a, b, c: a / a, I64 / I64, "float32"),
    ("int32/int32", lambda a, b, c: b / b, I32 / I32, "float32"),
    ("float/float", lambda a, b, c: c / c, F32 / F32, "float32"),
    ("int*0.5", lambda a, b, c: a * 0.5, I64 * 0.5, "float32"),
    ("0.5*int", lambda a, b, c: 0.5 * a, I64 * 0.5, "float32"),
    ("int+0.5", lambda a, b, c: a + 0.5, I64 + 0.5, "float32"),
    ("int-0.5", lambda a, b, c: a - 0.5, I64 - 0.5, "float32"),
    ("0.5-int", lambda a, b, c: 0.5 - a, 0.5 - I64, "float32"),
    ("int+3", lambda a, b, c: a + 3, I64 + 3, "int64"),
    ("3-int", lambda a, b, c: 3 - a, 3 - I64, "int64"),
    ("int*3", lambda a, b, c: a * 3, I64 * 3, "int64"),
    ("int32+2**31-4", lambda a, b, c: b + (2 ** 31 - 4), I32.astype(np.int64) + 2 ** 31 - 4, "int32"),
    ("int//2", lambda a, b, c: a // 2, I64 // 2, "int64"),
    ("int%3", lambda a, b, c: a % 3, I64 % 3, "int64"),
    ("20//int", lambda a, b, c: 20 // a, 20 // I64, "int64"),
    ("20%int", lambda a, b, c: 20 % a, 20 % I64, "int64"),
    ("float*2", lambda a, b, c: c * 2, F32 * 2, "float32"),
]


def _check(name, got, dtype, want, want_dtype):
    assert dtype == want_dtype, (name, dtype)
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("name,fn,want,dtype", CASES, ids=[c[0] for c in CASES])
def test_eager(name, fn, want, dtype):
    pe.disable_static()
    try:
        out = fn(pe.to_tensor(I64), pe.to_tensor(I32), pe.to_tensor(F32))
        _check(name, out.numpy(), out.dtype, want, dtype)
    finally:
        pe.enable_static()


def test_static():
    pe.enable_static()
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        a = pe.static.data("a", [3], "int64")
        b = pe.static.data("b", [3], "int32")
        c = pe.static.data("c", [3], "float32")
        outs = [fn(a, b, c) for _, fn, _, _ in CASES]
    exe = pe.static.Executor()
    scope = pe.static.Scope()
    exe.run(startup, scope=scope)
    got = exe.run(main, feed={"a": I64, "b": I32, "c": F32}, fetch_list=outs, scope=scope)
    for (name, _, want, dtype), v, g in zip(CASES, outs, got):
        _check(name, g, v.dtype, want, dtype)
        assert g.dtype == np.dtype(dtype), name


def test_numbers_that_do_not_fit_the_integer_dtype():
    """An int number outside the tensor's integer range, or a fractional number
    in // or %, is refused by name (it used to wrap or truncate)."""
    def each(a, b):
        with pytest.raises(ValueError, match=r"elementwise_add: the number 1099511627776 does not fit the tensor's "
                                             r"dtype int32"):
            b + 2 ** 40
        with pytest.raises(ValueError, match=r"elementwise_sub: the number -9223372036854775809 .*int64"):
            a - (-2 ** 63 - 1)
        with pytest.raises(ValueError, match=r"elementwise_mul: the number 4294967296 .*int32"):
            2 ** 32 * b
        with pytest.raises(ValueError, match=r"elementwise_floordiv: the number 0.5 .*int64"):
            a // 0.5
    pe.disable_static()
    try:
        each(pe.to_tensor(I64), pe.to_tensor(I32))
    finally:
        pe.enable_static()
    with pe.static.program_guard(pe.static.Program(), pe.static.Program()):
        each(pe.static.data("a", [3], "int64"), pe.static.data("b", [3], "int32"))
