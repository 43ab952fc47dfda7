"""scripts/pe_json.py — write PE programs as JSON and run them with `pe run`.

Used by scripts/make_examples.py (the example programs), the example tests
(tests/python/test_examples.py) and the op conformance tests (tests/ops/).

    from pe_json import Program, run_pe
    p = Program()
    p.var("x", "float32", [-1, 4])
    p.var("y", "float32", [-1, 4])
    p.op("relu", {"X": ["x"]}, {"Out": ["y"]})
    p.save("relu.json")
    outs = run_pe("relu.json", feeds={"x": np.ones((2, 4), "float32")}, fetch=["y"])

How: a Program is plain Python lists/dicts shaped like graph/program.fbs
(Program -> Block -> Var / Op -> Slot / Attr); `to_json()` emits the
flatbuffers JSON text form of that schema, which `pe` loads with flatbuffers'
own parser. Attr types come from ops/ops.def (parsed here, so the attr table
is never copied by hand); attrs an op does not declare (op_role, ...) need an
explicit type. Why JSON and not .pe: the text form is what people read and
diff; `pe convert` makes the binary form.
"""
import json
import os
import re
import subprocess
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# pe_dtype values (include/pe/dtype.h) <-> numpy dtypes.
DTYPES = {
    "float32": ("FP32", 0), "float64": ("FP64", 1), "int32": ("INT32", 2),
    "int64": ("INT64", 3), "uint8": ("UINT8", 4), "bool": ("BOOL", 5),
}
DTYPE_BY_ENUM = {v[1]: k for k, v in DTYPES.items()}

# ops.def attr type names -> program.fbs AttrType names.
_ATTR_TYPES = {
    "int": "INT", "float": "FLOAT", "string": "STRING", "bool": "BOOL",
    "long": "LONG", "ints": "INTS", "floats": "FLOATS", "strings": "STRINGS",
    "bools": "BOOLS", "longs": "LONGS", "block": "BLOCK",
}


def parse_ops_def(path=None):
    """Returns {op type: {"inputs": [(slot, suffix)], "outputs": [...],
    "attrs": {name: (type, default string or None)}}} from ops/ops.def."""
    path = path or os.path.join(REPO, "ops", "ops.def")
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    ops = {}
    for m in re.finditer(r'^\s*PE_OP\(\s*(\w+)\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"',
                         text, flags=re.M):
        name, ins, outs, attrs = m.groups()

        def slots(s):
            res = []
            for tok in s.split():
                base = tok.rstrip("*?")
                res.append((base, tok[len(base):]))
            return res

        ad = {}
        for tok in attrs.split():
            nm, rest = tok.split(":", 1)
            if "=" in rest:
                ty, default = rest.split("=", 1)
            else:
                ty, default = rest, None
            ad[nm] = (ty, default)
        ops[name] = {"inputs": slots(ins), "outputs": slots(outs), "attrs": ad}
    return ops


def cuda_ops(path=None):
    """Op types whose ops.def line names a CUDA kernel (last column PE_CUDA(fn))."""
    path = path or os.path.join(REPO, "ops", "ops.def")
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    return {m.group(1) for m in re.finditer(r"^\s*PE_OP\(\s*(\w+)\s*,.*PE_CUDA\(\s*\w+\s*\)\s*\)\s*$", text,
                                            flags=re.M)}


def place_args(env=None):
    """["--places", P] when PE_TEST_PLACES is set (in `env`, else the
    environment), else []: scripts/test_gpu.sh runs the op suites on a GPU
    with PE_TEST_PLACES=cuda:0; tests/ops/test_backend_ops.py sets it per run."""
    v = (env or {}).get("PE_TEST_PLACES", os.environ.get("PE_TEST_PLACES"))
    return ["--places", v] if v else []


_OPS = None


def ops_def():
    global _OPS
    if _OPS is None:
        _OPS = parse_ops_def()
    return _OPS


def _attr_json(name, ty, value):
    a = {"name": name, "type": _ATTR_TYPES[ty]}
    if ty in ("int", "long"):
        a["i"] = int(value)
    elif ty == "float":
        a["f"] = float(value)
    elif ty == "string":
        a["s"] = str(value)
    elif ty == "bool":
        a["b"] = bool(value)
    elif ty == "block":
        a["block_idx"] = int(value)
    elif ty in ("ints", "longs"):
        a["ints"] = [int(v) for v in value]
    elif ty == "floats":
        a["floats"] = [float(v) for v in value]
    elif ty == "strings":
        a["strings"] = [str(v) for v in value]
    elif ty == "bools":
        a["bools"] = [bool(v) for v in value]
    return a


class Program:
    """One program with a global block (enough for PE's examples and tests)."""

    def __init__(self, random_seed=0):
        self.random_seed = random_seed
        self.vars = []
        self.ops = []
        self._names = set()

    def var(self, name, dtype, dims, persistable=False, is_parameter=False,
            stop_gradient=False):
        dtype = np.dtype(dtype).name
        if name in self._names:
            raise ValueError("var %s declared twice" % name)
        self._names.add(name)
        self.vars.append({
            "name": name, "dtype": DTYPES[dtype][0], "dims": [int(d) for d in dims],
            "persistable": bool(persistable), "is_parameter": bool(is_parameter),
            "stop_gradient": bool(stop_gradient)})
        return name

    def param(self, name, dims, dtype="float32"):
        return self.var(name, dtype, dims, persistable=True, is_parameter=True)

    def op(self, type, inputs, outputs, attrs=None, attr_types=None):
        """inputs/outputs: {slot: [var names]}; attrs: {name: value}. The
        attr types come from ops.def, or attr_types[name] for undeclared ones."""
        spec = ops_def().get(type)
        if spec is None:
            raise KeyError("op %s is not in ops/ops.def" % type)
        jattrs = []
        for name, value in (attrs or {}).items():
            ty = (attr_types or {}).get(name) or spec["attrs"].get(name, (None,))[0]
            if ty is None:
                raise KeyError("op %s has no attr %s in ops.def; pass attr_types" % (type, name))
            jattrs.append(_attr_json(name, ty, value))
        self.ops.append({
            "type": type,
            "inputs": [{"name": s, "args": list(a)} for s, a in inputs.items()],
            "outputs": [{"name": s, "args": list(a)} for s, a in outputs.items()],
            "attrs": jattrs})

    def to_dict(self):
        return {"version": 1, "random_seed": int(self.random_seed),
                "blocks": [{"idx": 0, "parent_idx": -1, "vars": self.vars, "ops": self.ops}]}

    def to_json(self):
        """The flatbuffers JSON text form, one var or op per line (readable, diffable)."""
        d = self.to_dict()
        b = d["blocks"][0]

        def items(lst):
            return ",\n".join("    " + json.dumps(x) for x in lst)
        return ('{\n "version": %d,\n "random_seed": %d,\n "blocks": [\n'
                '  {\n   "idx": 0,\n   "parent_idx": -1,\n'
                '   "vars": [\n%s\n   ],\n   "ops": [\n%s\n   ]\n  }\n ]\n}\n'
                % (d["version"], d["random_seed"], items(b["vars"]), items(b["ops"])))

    def save(self, path):
        with open(path, "w") as f:
            f.write(self.to_json())


def pe_bin():
    """The `pe` binary: $PE_BIN_DIR/pe (set by scripts/test.sh), else build/bin/pe."""
    d = os.environ.get("PE_BIN_DIR") or os.path.join(REPO, "build", "bin")
    return os.path.join(d, "pe")


def fetch_file(name):
    """The file `pe run --out DIR` writes for fetch `name` (pe run --help):
    characters other than A-Z a-z 0-9 . _ - @ become '_', so does a leading '.'."""
    f = re.sub(r"[^A-Za-z0-9._@-]", "_", name)
    if f.startswith("."):
        f = "_" + f[1:]
    return f + ".npy"


class PeError(RuntimeError):
    """`pe` refused cleanly: exit code 1 and a `pe: error: ...` line, no
    sanitizer report. Strict xfails expect exactly this (raises=PeError)."""
    def __init__(self, cmd, rc, stderr):
        self.rc, self.stderr = rc, stderr
        super().__init__("pe exited %d: %s\n  command: %s" % (rc, stderr.strip(), " ".join(cmd)))


class PeCrash(RuntimeError):
    """`pe` failed in any other way: a signal (segfault, abort), a sanitizer
    report, another exit code, or no error line. Deliberately not a PeError,
    so a crash fails a strict xfail(raises=PeError) instead of satisfying it."""
    def __init__(self, cmd, rc, stderr):
        self.rc, self.stderr = rc, stderr
        how = ("killed by signal %d" % -rc) if rc < 0 else ("exited %d" % rc)
        super().__init__("pe crashed (%s, not a clean error): %s\n  command: %s"
                         % (how, stderr.strip()[-4000:], " ".join(cmd)))


_SANITIZER_WORDS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                    "WARNING: ThreadSanitizer", "Segmentation fault", "Aborted")


def pe_failure(cmd, rc, stderr):
    """The exception for a non-zero exit of `pe`: PeError for a clean error
    (docs/cli.md: every bad input is exit code 1 with a `pe: error:` line,
    never a signal), PeCrash for anything else."""
    clean = (rc == 1 and "pe: error: " in stderr
             and not any(w in stderr for w in _SANITIZER_WORDS))
    return (PeError if clean else PeCrash)(cmd, rc, stderr)


def lod_args(lods):
    """`--lod NAME=0,2,5/...` flags for {feed name: [[offsets of level 0], ...]}."""
    out = []
    for name, levels in (lods or {}).items():
        out += ["--lod", "%s=%s" % (name, "/".join(",".join(str(int(o)) for o in lv) for lv in levels))]
    return out


def run_pe(program, feeds, fetch, startup=None, workdir=None, timeout=120, env=None, lods=None):
    """Runs `pe run program [--startup S] --feed n=f.npy ... --fetch n ... --out DIR`
    (lods: {feed name: offsets per level}, passed as --lod).
    Returns {fetch name: numpy array}; raises PeError on a clean error exit,
    PeCrash on a crash (pe_failure)."""
    own = workdir is None
    tmp = tempfile.TemporaryDirectory() if own else None
    wd = tmp.name if own else workdir
    try:
        cmd = [pe_bin(), "run", program]
        if startup:
            cmd += ["--startup", startup]
        for i, (name, arr) in enumerate(feeds.items()):
            f = os.path.join(wd, "feed_%d.npy" % i)
            np.save(f, np.ascontiguousarray(arr))
            cmd += ["--feed", "%s=%s" % (name, f)]
        cmd += lod_args(lods)
        for name in fetch:
            cmd += ["--fetch", name]
        out = os.path.join(wd, "out")
        os.makedirs(out, exist_ok=True)
        cmd += ["--out", out] + place_args(env)
        e = dict(os.environ)
        e.setdefault("OMP_NUM_THREADS", "1")
        e.update(env or {})
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
        if r.returncode != 0:
            raise pe_failure(cmd, r.returncode, r.stderr)
        return {name: np.load(os.path.join(out, fetch_file(name))) for name in fetch}
    finally:
        if own:
            tmp.cleanup()


_CUDA_WHY = {}


def cuda_unavailable(device=0):
    """None when `pe` runs a program on cuda:<device>; else pe's own error
    line saying why (a CPU-only build, no GPU, too few GPUs), for a visible
    skip: pytest.skip("SKIPPED: no usable GPU: " + why)."""
    if device not in _CUDA_WHY:
        with tempfile.TemporaryDirectory() as d:
            p = Program()
            p.var("x", "float32", [2])
            p.var("y", "float32", [2])
            p.op("scale", {"X": ["x"]}, {"Out": ["y"]}, {"scale": 2.0})
            p.save(os.path.join(d, "p.json"))
            try:
                got = run_pe(os.path.join(d, "p.json"), {"x": np.ones(2, np.float32)}, ["y"], workdir=d,
                             env={"PE_TEST_PLACES": "cuda:%d" % (device + 1) if device else "cuda:0"})
                _CUDA_WHY[device] = None if np.array_equal(got["y"], [2, 2]) else "wrong result on cuda"
            except PeError as e:
                lines = [l.strip() for l in str(e).splitlines() if "error:" in l] or [str(e).strip()]
                _CUDA_WHY[device] = lines[0]
    return _CUDA_WHY[device]

