"""tests/python/test_blas_kernels.py — OpenBLAS's kernels for the CPU.

`import pe` sets OPENBLAS_CORETYPE, when unset, on the Intel models
Debian's OpenBLAS 0.3.21 does not know (it would run its generic Prescott
kernels there: 4.5x slower GEMMs on an Emerald Rapids host); and the
engine warns once, at its first GEMM, when OpenBLAS runs generic kernels
on a CPU with AVX2 or AVX-512, naming the fix.

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_blas_kernels.py
"""
import os
import subprocess
import sys

import pytest

from pe import _cpu


def _cpu_info(vendor="GenuineIntel", family=6, model=207, flags="fpu sse3 avx2 avx512f"):
    return {"vendor_id": vendor, "cpu family": str(family), "model": str(model), "flags": flags}


def test_newer_intel_models_get_their_kernels():
    env = {}
    assert _cpu.prefer_blas_kernels(env, _cpu_info()) == "SkylakeX"
    assert env == {"OPENBLAS_CORETYPE": "SkylakeX"}
    env = {}
    assert _cpu.prefer_blas_kernels(env, _cpu_info(model=143, flags="avx2")) == "Haswell"
    assert env["OPENBLAS_CORETYPE"] == "Haswell"


def test_other_cpus_and_a_set_value_are_left_alone():
    for info in (_cpu_info(model=85),                           # Skylake-SP: OpenBLAS knows it
                 _cpu_info(vendor="AuthenticAMD", family=25),   # AMD
                 _cpu_info(model=207, flags="sse3"),            # no AVX2: nothing better to pick
                 {}, {"cpu family": "x", "model": "y"}):        # no /proc/cpuinfo, garbage
        env = {}
        assert _cpu.prefer_blas_kernels(env, info) is None and env == {}, info
    env = {"OPENBLAS_CORETYPE": "Haswell"}
    assert _cpu.prefer_blas_kernels(env, _cpu_info()) is None
    assert env == {"OPENBLAS_CORETYPE": "Haswell"}


def test_this_machine_is_read():
    info = _cpu._first_cpu()
    if not os.path.exists("/proc/cpuinfo"):
        assert info == {}
    else:
        assert "vendor_id" in info and "flags" in info


def _has_avx2():
    return "avx2" in _cpu._first_cpu().get("flags", "").split()


@pytest.mark.skipif(not _has_avx2(), reason="the warning is for CPUs with AVX2 or AVX-512")
def test_generic_kernels_are_warned_about_once():
    code = ("import numpy as np, pe\n"
            "pe.disable_static()\n"
            "a = pe.to_tensor(np.ones((8, 8), 'float32'))\n"
            "for _ in range(3): b = a @ a\n"
            "print(float(b.numpy()[0, 0]))\n")
    env = dict(os.environ, OPENBLAS_CORETYPE="Prescott", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "8.0"
    assert r.stderr.count("pe: warning: OpenBLAS runs its generic 'Prescott' kernels on this CPU") == 1, r.stderr
    assert "OPENBLAS_CORETYPE asks for them" in r.stderr and "OPENBLAS_CORETYPE=" in r.stderr
    # with OpenBLAS's own choice on this machine: no warning
    env.pop("OPENBLAS_CORETYPE")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OpenBLAS runs its generic" not in r.stderr, r.stderr
