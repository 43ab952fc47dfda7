"""tests/python/conftest.py — every test starts in PE's default mode.

Static graph mode is PE's default (docs/guide.md, "Eager mode"); a test
that calls pe.disable_static() would otherwise leave the rest of the
session's tests in eager mode (or eager tensors on a GPU, after
pe.set_device), so their result would depend on the order pytest runs the
files in.
"""
import pytest


@pytest.fixture(autouse=True)
def _static_mode_after_each_test():
    yield
    import sys
    pe = sys.modules.get("pe")
    if pe is not None and pe.in_dynamic_mode():
        pe.enable_static()
    if pe is not None:
        pe.framework._eager_place = None   # pe.set_device / disable_static(place) chose a place
