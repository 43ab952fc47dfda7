"""pe._cpu — OpenBLAS's kernels for this CPU, chosen before OpenBLAS loads.

OpenBLAS's DYNAMIC_ARCH build (Debian's) picks its kernels by CPU model
when the library loads; a model newer than the build gets its generic
ones. Debian bookworm's OpenBLAS 0.3.21 does not know Intel's Sapphire,
Emerald and Granite Rapids server parts (family 6, models 143, 207, 173,
174) and runs "Prescott" SSE3 kernels there: 4.5x slower GEMMs on an
Emerald Rapids host (docs/benchmarks.md). pe/__init__.py calls
prefer_blas_kernels() before anything loads OpenBLAS, so `import pe` in a
fresh process sets OPENBLAS_CORETYPE (SkylakeX with AVX-512, else Haswell)
on those models; a value the user set is kept. When OpenBLAS was already
loaded (numpy imported first, on a Debian numpy that uses it), the engine
warns at its first GEMM (ops/cpu/gemm.c) with the same fix.
"""
import os

# Intel family 6 models newer than OpenBLAS 0.3.21's table (Aug 2022); the same
# list as ops/cpu/gemm.c's (pe_blas_coretype_hint, which the `pe` tool uses).
_NEWER_INTEL = frozenset((143, 207, 173, 174))


def _first_cpu():
    """vendor, family, model and flags of /proc/cpuinfo's first processor ({} elsewhere)."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        pass
    return info


def prefer_blas_kernels(environ=os.environ, cpu=None):
    """Sets OPENBLAS_CORETYPE for the CPU models OpenBLAS 0.3.21 does not
    know, when unset. Returns the value set, or None."""
    if "OPENBLAS_CORETYPE" in environ:
        return None
    cpu = _first_cpu() if cpu is None else cpu
    try:
        family, model = int(cpu.get("cpu family", "-1")), int(cpu.get("model", "-1"))
    except ValueError:
        return None
    if cpu.get("vendor_id") != "GenuineIntel" or family != 6 or model not in _NEWER_INTEL:
        return None
    flags = cpu.get("flags", "").split()
    core = "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None
    if core:
        environ["OPENBLAS_CORETYPE"] = core
    return core
