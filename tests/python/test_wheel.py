"""tests/python/test_wheel.py — the pe wheel works outside the source tree.

`pip wheel --no-build-isolation --no-deps ./bindings/python` builds the wheel
(setup.py drives the CMake build of pe._core: here in the build directory
the tests run from, PE_BUILD_DIR, so nothing is compiled twice); a fresh
venv (`/usr/bin/python3 -m venv --system-site-packages`: numpy is Debian's)
gets it with `pip install --no-index --no-deps`, offline; then, from a
temporary directory and without PYTHONPATH:
- `import pe` comes from the venv's site-packages, and _core links nothing
  of the build tree;
- tests/python/wheel_scripts/first_example.py (a ParallelExecutor over 2
  CPU places with a share_vars_from test executor) prints "ok";
- a copy of examples/train_fashion_mnist.py trains its first steps (--limit)
  and ends with test_accuracy=, writing metrics.jsonl and training.png.
Also `pip install ./bindings/python` straight from the source folder.
"""
import glob
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = "/usr/bin/python3"
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


def build_dir():
    d = os.environ.get("PE_BUILD_DIR") or (os.path.dirname(os.environ["PE_BIN_DIR"]) if os.environ.get("PE_BIN_DIR")
                                           else os.path.join(REPO, "build"))
    return os.path.abspath(d)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(OMP_NUM_THREADS="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def sh(cmd, cwd, env, timeout=240):
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0, "%s failed (exit %d):\n%s" % (" ".join(map(str, cmd)), r.returncode, out[-6000:])
    return out


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    bdir = build_dir()
    if not os.path.exists(os.path.join(bdir, "CMakeCache.txt")):
        pytest.skip("no CMake build of PE at %s (set PE_BUILD_DIR)" % bdir)
    for mod in ("venv", "wheel", "setuptools"):
        if subprocess.run([PY, "-c", "import %s" % mod], capture_output=True).returncode:
            pytest.skip("Debian's python3-%s is not installed (scripts/setup.sh)" % mod)
    tmp = tmp_path_factory.mktemp("wheel")
    env = clean_env(PE_BUILD_DIR=bdir)
    wheels = tmp / "wheelhouse"
    sh([PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(wheels),
        os.path.join(REPO, "bindings", "python")], REPO, env)
    whl = glob.glob(str(wheels / "pe-*.whl"))
    assert len(whl) == 1, os.listdir(wheels)
    v = tmp / "venv"
    sh([PY, "-m", "venv", "--system-site-packages", str(v)], str(tmp), env)
    py = str(v / "bin" / "python")
    sh([py, "-m", "pip", "install", "--no-index", "--no-deps", whl[0]], str(tmp), env)
    return {"py": py, "venv": str(v), "tmp": tmp, "wheel": whl[0], "env": clean_env()}


def test_wheel_imports_from_the_venv(venv):
    out = sh([venv["py"], "-c", "import pe, pe._core; print(pe.__file__); print(pe._core.__file__)"],
             str(venv["tmp"]), venv["env"])
    init, core = out.split()
    assert init.startswith(venv["venv"]) and core.startswith(venv["venv"]), out
    assert os.path.basename(venv["wheel"]).startswith("pe-0.1.0-"), venv["wheel"]
    dyn = subprocess.run(["readelf", "-d", core], capture_output=True, text=True).stdout
    assert REPO not in dyn and build_dir() not in dyn, dyn  # no RPATH into the tree
    ldd = subprocess.run(["ldd", core], capture_output=True, text=True).stdout
    assert "not found" not in ldd and REPO not in ldd, ldd


def test_first_example_outside_the_tree(venv):
    d = venv["tmp"] / "elsewhere"
    d.mkdir(exist_ok=True)
    shutil.copy(os.path.join(REPO, "tests", "python", "wheel_scripts", "first_example.py"), d)
    out = sh([venv["py"], "first_example.py"], str(d), venv["env"], timeout=120)
    assert out.splitlines()[-1] == "ok", out
    assert "from " + venv["venv"] in out, out


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist is not installed")
def test_main_job_first_steps_outside_the_tree(venv):
    d = venv["tmp"] / "job"
    d.mkdir(exist_ok=True)
    shutil.copy(os.path.join(REPO, "examples", "train_fashion_mnist.py"), d)
    out = sh([venv["py"], "train_fashion_mnist.py", "--limit", "512", "--epochs", "1", "--batch-size", "64",
              "--log-every", "2", "--ckpt-dir", "run"], str(d), dict(venv["env"], CPU_NUM="2"), timeout=180)
    assert out.splitlines()[-1].startswith("test_accuracy="), out
    assert (d / "run" / "metrics.jsonl").exists() and (d / "run" / "epoch_1" / "model.safetensors").exists()
    if subprocess.run([PY, "-c", "import matplotlib"], capture_output=True).returncode == 0:
        assert (d / "run" / "training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pip_install_from_the_source_folder(venv):
    """`pip install ./bindings/python` (a second venv): the same package, built by pip itself."""
    v = venv["tmp"] / "venv2"
    env = clean_env(PE_BUILD_DIR=build_dir())
    sh([PY, "-m", "venv", "--system-site-packages", str(v)], str(venv["tmp"]), env)
    sh([str(v / "bin" / "python"), "-m", "pip", "install", "--no-build-isolation", "--no-deps",
        os.path.join(REPO, "bindings", "python")], REPO, env)
    out = sh([str(v / "bin" / "python"), "-c", "import pe; print(pe.__file__, pe.__version__)"], str(venv["tmp"]),
             venv["env"])
    assert out.startswith(str(v)), out
