"""bindings/python/setup.py — `pip install ./bindings/python` for Debian's /usr/bin/python3 (offline).

How _core is built: this script drives the project's own CMake build
(CMakeLists.txt, PE_BUILD_PYTHON block) rather than compiling the sources
itself, so the extension is compiled and linked exactly as in build/ (the
static stage libraries pe_runtime ... pe_executor, OpenBLAS, oneDNN, flatbuffers, cJSON, OpenMP, CUDA when nvcc
exists):

  - PE_BUILD_DIR=<dir> (an existing CMake build of this tree, e.g. build/):
    the `pe_core` target is (re)built there and its _core*.so is packaged;
  - otherwise a fresh build is configured in setuptools' build_temp
    (Release, tests off, warnings not fatal) and `pe_core` built there.

PE_BUILD_JOBS sets the parallel build jobs (default 2). Then the pure-Python
package (bindings/python/pe) is installed next to it. Use

    /usr/bin/python3 -m pip install --no-build-isolation ./bindings/python
    # Debian marks its Python externally managed: add --user, --target DIR,
    # --prefix DIR, or --break-system-packages as your setup requires.

The dependencies are Debian packages (scripts/setup.sh): python3-dev,
python3-numpy, cmake and the C libraries; nothing is downloaded.
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
            raise RuntimeError("setup.py must run inside the PE source tree (no CMakeLists.txt at %s)" % ROOT)
        build_dir = os.environ.get("PE_BUILD_DIR")
        jobs = os.environ.get("PE_BUILD_JOBS", "2")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                raise RuntimeError("PE_BUILD_DIR=%s is not a CMake build directory of PE" % build_dir)
        else:
            build_dir = os.path.join(os.path.abspath(self.build_temp), "pe-cmake")
            os.makedirs(build_dir, exist_ok=True)
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DPE_BUILD_TESTS=OFF", "-DPE_BUILD_PYTHON=ON", "-DPE_WERROR=OFF",
                                   "-DPython3_EXECUTABLE=" + sys.executable])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "pe_core", "-j", jobs])
        built = glob.glob(os.path.join(build_dir, "python", "pe", "_core*.so"))
        if not built:
            raise RuntimeError("the CMake build in %s produced no python/pe/_core*.so "
                               "(is PE_BUILD_PYTHON on and python3-dev installed?)" % build_dir)
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(max(built, key=os.path.getmtime), dest)


def packages():
    out = []
    for d, _, files in os.walk(os.path.join(HERE, "pe")):
        if "__init__.py" in files:
            out.append(os.path.relpath(d, HERE).replace(os.sep, "."))
    return sorted(out)


setup(
    name="pe",
    version="0.1.0",
    description="PE: a static-graph data-parallel executor engine with a Paddle-style Python API",
    packages=packages(),
    ext_modules=[CMakeExtension("pe._core")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=[],  # numpy comes from Debian's python3-numpy
    zip_safe=False,
)
