"""tests/ops/test_eager_ops.py — every op eagerly against the static engine, row by row.

The rows are the conformance tables' (tests/ops/test_forward_ops.py,
tests/ops/test_grad_ops.py, which check the static engine against
PyTorch: random inputs, odd and one-sized dims, broadcasting, every attr
variant, float32 and float64, LoD rows, collective ops on one rank). Each
row's program (build_case / build_grad_case, the suites' own) runs twice on
the same feeds:

  static   the program loaded from its JSON (pe.static.load_program, as
           `pe run` loads it), for gradient rows pe.static.gradients of the
           loss for every fed float var that is not stop_gradient (the
           autodiff pass `pe run --backward` runs), one Executor run on cpu:0
           (PE_TEST_PLACES=cuda:0: on the GPU, and the eager run too);
  eager    pe.disable_static(); every feed a pe.to_tensor (its LoD set on
           the tensor's value), every op of the program through
           pe.eager.run_op, loss.backward(), each input's .grad.

  test_forward_eager   every forward row: each output is the static run's,
                       bit for bit (one registry, one set of kernels: eager
                       mode adds no arithmetic);
  test_grad_eager      every gradient row: the loss sum_k mean(out_k * R_k)
                       (R_k the row's fixed random upstream gradients; the
                       same ops in both runs) and each differentiated
                       input's gradient, bit for bit;
  test_forward_eager_in_place
                       every forward row of an op with in-place pairs
                       (ops.def "In>Out"), each such output written into
                       its input's tensor, as the eager optimizer steps do;
  test_grad_eager_one_input
                       every gradient row with several differentiated
                       inputs, once per input with only that one
                       differentiated (the grad makers' partial paths);
  test_random_eager,   uniform / gaussian / truncated_gaussian_random with a
  test_dropout_train_eager
                       seed attr, training dropout with fix_seed (Out, Mask
                       and X's gradient): the same seed, the same bits;
  test_accumulated_grads_eager
                       a tensor with several gradient contributions
                       (repeated args, several readers of a leaf or of an
                       intermediate): the tape sums them in the autodiff
                       pass's order, so the same bits;
  test_every_op_runs_eagerly
                       every op type of ops/ops.def has rows run here or is
                       in NOT_EAGER with the reason (so a new op cannot
                       escape), and every op with a grad maker has gradient
                       rows run here.

Rows the forward table marks xfail (NHWC layouts the kernels refuse) fail
eagerly too, with the static run's error (its class and message, var
names aside).

    PE_BIN_DIR=build/bin PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/ops/test_eager_ops.py
    PE_TEST_PLACES=cuda:0 ... tests/ops/test_eager_ops.py     # eager vs static, both on the GPU
"""
import os
import re
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import test_forward_ops as fw  # noqa: E402
import test_grad_ops as gr  # noqa: E402
from pe_json import Program, ops_def  # noqa: E402

import pe  # noqa: E402
from pe import _core  # noqa: E402

# Op types with no eager rows, and why. The parameter-server ops move
# tensors between a trainer and a pserver process (a program's RPC ops, run
# by tests/python/test_pserver.py); the conformance tables have no rows for
# them either.
NOT_EAGER = {
    "send": "parameter-server RPC op: needs a program's pserver endpoints",
    "recv": "parameter-server RPC op: needs a program's pserver endpoints",
    "send_barrier": "parameter-server RPC op: needs a program's pserver endpoints",
    "fetch_barrier": "parameter-server RPC op: needs a program's pserver endpoints",
    "listen_and_serv": "parameter-server loop: runs a program's optimize blocks",
}


def _test_place():
    """PE_TEST_PLACES (as the op suites read it): "cpu" (the default) or
    "cuda:N" — both runs, static and eager, on that place."""
    v = os.environ.get("PE_TEST_PLACES", "cpu").strip()
    if v.startswith("cuda"):
        return pe.CUDAPlace(int(v.partition(":")[2] or 0))
    return pe.CPUPlace()


PLACE = _test_place()


@pytest.fixture(autouse=True)
def _eager_mode():
    """Eager mode on PLACE for the test; PE's default (static) mode, on the
    CPU, after it."""
    if isinstance(PLACE, pe.CUDAPlace) and PLACE.get_device_id() >= pe.device.cuda.device_count():
        pytest.skip("SKIPPED: PE_TEST_PLACES=cuda:%d needs that GPU (%d visible)" % (
            PLACE.get_device_id(), pe.device.cuda.device_count()))
    pe.disable_static(PLACE)
    yield
    pe.enable_static()
    pe.set_device("cpu")


# ---- running a pe_json Program eagerly --------------------------------------------------

def _attrs(op):
    """An op's attrs back from the program's JSON form ({name: value})."""
    out = {}
    for a in op["attrs"]:
        t = a["type"]
        if t in ("INT", "LONG"):
            out[a["name"]] = a["i"]
        elif t == "FLOAT":
            out[a["name"]] = a["f"]
        elif t == "STRING":
            out[a["name"]] = a["s"]
        elif t == "BOOL":
            out[a["name"]] = a["b"]
        elif t in ("INTS", "LONGS"):
            out[a["name"]] = list(a["ints"])
        elif t == "FLOATS":
            out[a["name"]] = list(a["floats"])
        elif t == "STRINGS":
            out[a["name"]] = list(a["strings"])
        elif t == "BOOLS":
            out[a["name"]] = list(a["bools"])
        else:
            raise AssertionError("op %s: attr %s of type %s in a conformance row" % (op["type"], a["name"], t))
    return out


def run_eager(program, feeds, lods, fetch, backward=None):
    """Runs `program`'s ops in order with pe.eager.run_op on tensors made
    from `feeds` (stop_gradient as the program declares the var; LoDs set on
    the tensors). backward: the name of the loss to call backward() on.
    Returns {fetch name: array}; NAME@GRAD is NAME's .grad (None when
    backward() left it unset)."""
    decl = {v["name"]: v for v in program.vars}
    env = {}
    for name, a in feeds.items():
        t = pe.to_tensor(a)
        assert t.dtype == a.dtype.name, "to_tensor(%s) made a %s tensor" % (a.dtype, t.dtype)
        t.stop_gradient = decl[name]["stop_gradient"]
        if name in lods:
            t._t.set_lod([list(lv) for lv in lods[name]])
        env[name] = t
    for op in program.ops:
        ins = {s["name"]: [env[a] for a in s["args"]] for s in op["inputs"]}
        outs = {s["name"]: len(s["args"]) for s in op["outputs"]}
        res = pe.eager.run_op(op["type"], ins, outs, _attrs(op))
        for s in op["outputs"]:
            for nm, t in zip(s["args"], res[s["name"]]):
                env[nm] = t
    if backward is not None:
        env[backward].backward()
    got = {}
    for name in fetch:
        if name.endswith("@GRAD"):
            g = env[name[:-len("@GRAD")]].grad
            got[name] = None if g is None else g.numpy()
        else:
            got[name] = env[name].numpy()
    return got


def same_bits(case_id, name, static, eager):
    """eager is static: dtype, dims and every bit (NaN payloads and signed zeros included)."""
    assert eager is not None, "%s: %s: the static engine computes it, eager backward() left it None" % (case_id, name)
    assert eager.dtype == static.dtype, "%s: %s is %s eagerly, %s in the static engine" % (
        case_id, name, eager.dtype, static.dtype)
    assert list(eager.shape) == list(static.shape), "%s: %s has dims %s eagerly, %s in the static engine" % (
        case_id, name, list(eager.shape), list(static.shape))
    a, b = np.ascontiguousarray(static), np.ascontiguousarray(eager)
    if a.tobytes() == b.tobytes():
        return
    if a.dtype.kind in "fc":
        d = a.view(np.dtype("u%d" % a.dtype.itemsize)) != b.view(np.dtype("u%d" % a.dtype.itemsize))
    else:
        d = a != b
    i = tuple(np.argwhere(d)[0]) if a.ndim else ()
    pytest.fail("%s: %s differs from the static engine's at %d of %d elements; first at %s: static %r, eager %r%s" % (
        case_id, name, d.sum(), d.size, list(i), a[i], b[i],
        "" if a.dtype.kind != "f" else " (max |difference| %.3g)" % np.nanmax(
            np.abs(a.astype(np.float64) - b.astype(np.float64)))))


def _feed(a, lod, place):
    t = _core.Tensor()
    t.set(np.ascontiguousarray(a), place)
    if lod:
        t.set_lod([list(lv) for lv in lod])
    return t


def run_static(program, feeds, lods, fetch, tmp_path, backward=None):
    """The static engine on the same program, in this process: the program
    loaded from its JSON as `pe run` loads it, backward: pe.static.gradients
    of that loss for every fed float var that is not stop_gradient (what
    `pe run --backward LOSS` differentiates), one Executor run on PLACE in
    a fresh scope. Returns {fetch name: array}."""
    path = str(tmp_path / "prog.json")
    program.save(path)
    pe.enable_static()
    try:
        prog = pe.static.load_program(path)
        block = prog.global_block()
        if backward is not None:
            wrt = [block.var(v["name"]) for v in program.vars if v["name"] in feeds and not v["stop_gradient"]
                   and v["dtype"] in ("FP32", "FP64")]
            grads = pe.static.gradients([block.var(backward)], wrt)
            names = {"%s@GRAD" % v.name: g.name for v, g in zip(wrt, grads) if g is not None}
        else:
            names = {}
        feed = {n: _feed(a, lods.get(n), PLACE._pe_place) for n, a in feeds.items()}
        outs = pe.static.Executor(PLACE).run(prog, feed=feed, fetch_list=[names.get(f, f) for f in fetch],
                                             scope=pe.static.Scope())
    finally:
        pe.disable_static()
    return dict(zip(fetch, outs))


def _params(cases):
    out = []
    for c in cases:
        if c.op in NOT_EAGER:
            out.append(pytest.param(c, marks=pytest.mark.skip(reason="%s: %s" % (c.op, NOT_EAGER[c.op]))))
        else:
            out.append(c)
    return out


FORWARD = _params(fw.CASES)
GRAD = _params(gr.CASES)


def _unnamed(msg):
    """An error message with its quoted names blanked: the static engine
    names the program's vars, eager mode its tensors ('eager_tmp_3', 'Y:0')."""
    return re.sub(r"'[^']*'", "'?'", msg.strip())


def _compare(case, program, feeds, lods, fetch, tmp_path, backward=None):
    try:
        static = run_static(program, feeds, lods, fetch, tmp_path, backward)
    except pe.Error as e:
        # a row the static engine refuses (the tables' xfail rows): eager mode refuses it too, alike
        assert case.xfail, "%s: the static run failed: %s" % (case.id, e)
        with pytest.raises(pe.Error) as got:
            run_eager(program, feeds, lods, fetch, backward)
        assert type(got.value) is type(e) and _unnamed(str(got.value)) in _unnamed(str(e)), (
            "%s: eagerly %s %r, the static engine: %s %r" % (case.id, type(got.value).__name__, str(got.value),
                                                             type(e).__name__, str(e)))
        return
    assert not case.xfail, "%s: the row is xfail but the static run passed" % case.id
    eager = run_eager(program, feeds, lods, fetch, backward)
    for name in fetch:
        same_bits(case.id, name, static[name], eager[name])


@pytest.mark.parametrize("case", FORWARD, ids=[c.id for c in fw.CASES])
def test_forward_eager(case, tmp_path):
    p, feeds, lods, fetch, _ = fw.build_case(case)
    _compare(case, p, feeds, lods, fetch, tmp_path)


@pytest.mark.parametrize("case", GRAD, ids=[c.id for c in gr.CASES])
def test_grad_eager(case, tmp_path):
    p, feeds, lods, fetch, _, _, _ = gr.build_grad_case(case)
    _compare(case, p, feeds, lods, fetch, tmp_path, backward="loss")


def inplace_pairs():
    """{op type: [(in slot, out slot)]}: ops/ops.def's in-place pairs ("In>Out")."""
    text = re.sub(r"/\*.*?\*/", "", open(os.path.join(HERE, "..", "..", "ops", "ops.def")).read(), flags=re.S)
    pairs = {}
    for m in re.finditer(r"^\s*PE_OP\(\s*(\w+)\s*,(.*)$", text, flags=re.M):
        quoted = re.findall(r'"([^"]*)"', re.sub(r"PE_GRAD_WIRE\([^)]*\)", "", m.group(2)))
        if len(quoted) > 3:
            pairs[m.group(1)] = [tuple(t.split(">")) for t in quoted[3].split() if ">" in t]
    return pairs


_INPLACE = inplace_pairs()


def _aliases(op, ins, outs, feeds, dims):
    """[(input var, output var)]: the in-place pairs of op whose input var has
    the output's dims and dtype (dims: {output var: (dims, dtype)})."""
    got = []
    for i, o in _INPLACE.get(op, []):
        for src, dst in zip(ins.get(i, []), outs.get(o, [])):
            if dst in dims and (list(feeds[src].shape), feeds[src].dtype) == dims[dst]:
                got.append((src, dst))
    return got


def _in_place_rows():
    rows = []
    for c in fw.CASES:
        if not _INPLACE.get(c.op) or c.xfail or c.op in NOT_EAGER:
            continue
        p, feeds, _, _, outputs = fw.build_case(c)
        op = p.ops[0]
        if _aliases(c.op, {s["name"]: s["args"] for s in op["inputs"]}, {s["name"]: s["args"] for s in op["outputs"]},
                    feeds, {nm: (list(w.shape), np.dtype(dt)) for _, nm, w, dt in outputs}):
            rows.append(pytest.param(c, id=c.id))
    return rows


@pytest.mark.parametrize("case", _in_place_rows())
def test_forward_eager_in_place(case, tmp_path):
    """The row eagerly with each output of an in-place pair (ops.def "In>Out",
    as the optimizer steps run: ParamOut = Param) written into a copy of its
    input where dims and dtype agree: every output is still the static
    engine's (out of place) bits."""
    p, feeds, lods, fetch, _ = fw.build_case(case)
    static = run_static(p, feeds, lods, fetch, tmp_path)
    op = p.ops[0]
    ins = {s["name"]: s["args"] for s in op["inputs"]}
    env = {}
    for name, a in feeds.items():
        t = pe.to_tensor(a)
        if name in lods:
            t._t.set_lod([list(lv) for lv in lods[name]])
        env[name] = t
    aliased = _aliases(case.op, ins, {s["name"]: s["args"] for s in op["outputs"]}, feeds,
                       {nm: (list(a.shape), a.dtype) for nm, a in static.items()})
    assert aliased, "%s: the static outputs' dims differ from the reference's: no in-place pair applies" % case.id
    into = {dst: src for src, dst in aliased}
    outs = {s["name"]: [env[into[nm]]._t if nm in into else True for nm in s["args"]] for s in op["outputs"]}
    with pe.no_grad():
        res = pe.eager.run_op(op["type"], {k: [env[a] for a in v] for k, v in ins.items()}, outs, _attrs(op))
    for s in op["outputs"]:
        for nm, t in zip(s["args"], res[s["name"]]):
            same_bits(case.id + " (in place)", nm, static[nm], t.numpy())
    for src, dst in aliased:  # the output is the input's tensor, and holds the result
        same_bits(case.id + " (in place)", "%s (written into %s)" % (dst, src), static[dst], env[src].numpy())


def _partial(cases):
    """(row, leaf) for every gradient row with several differentiated inputs:
    the row again with only that input differentiated."""
    out = []
    for c in cases:
        if c.op in NOT_EAGER or c.xfail:
            continue
        leaves = [f[:-len("@GRAD")] for f in gr.build_grad_case(c)[3] if f.endswith("@GRAD")]
        if len(leaves) > 1:
            out += [pytest.param(c, leaf, id="%s-only_%s" % (c.id, leaf)) for leaf in leaves]
    return out


@pytest.mark.parametrize("case,leaf", _partial(gr.CASES))
def test_grad_eager_one_input(case, leaf, tmp_path):
    """Only one input differentiated (the others stop_gradient): the grad
    maker's partial path, driven by the tape and by the autodiff pass, gives
    the same bits."""
    p, feeds, lods, fetch, _, _, _ = gr.build_grad_case(case)
    for v in p.vars:
        if v["name"] in feeds and v["name"] != leaf:
            v["stop_gradient"] = True
    _compare(case, p, feeds, lods, [leaf + "@GRAD", "loss"], tmp_path, backward="loss")


# ---- random ops and training dropout: the same seed, the same bits -------------------------

@pytest.mark.parametrize("op,name,attrs,dtype", fw.RANDOM_CASES, ids=["%s-%s" % (r[0], r[1]) for r in fw.RANDOM_CASES])
def test_random_eager(op, name, attrs, dtype, tmp_path):
    p = Program()
    p.var("out", dtype, attrs["shape"])
    p.op(op, {}, {"Out": ["out"]}, attrs)
    static = run_static(p, {}, {}, ["out"], tmp_path)["out"]
    out, = pe.eager.run_op(op, {}, {"Out": 1}, attrs)["Out"]
    same_bits("%s-%s" % (op, name), "Out", static, out.numpy())


@pytest.mark.parametrize("impl", ["downgrade_in_infer", "upscale_in_train"])
def test_dropout_train_eager(impl, tmp_path):
    """Training dropout with fix_seed: the mask, Out and X's gradient are the static engine's bits."""
    shape = [9, 13]
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "r": rng.standard_normal(shape).astype(np.float32)}
    p = gr.dropout_train_program(impl, 0.4, shape)
    fetch = ["x@GRAD", "out", "mask", "loss"]
    static = run_static(p, feeds, {}, fetch, tmp_path, backward="loss")
    eager = run_eager(p, feeds, {}, fetch, backward="loss")
    assert 0 < static["mask"].mean() < 1, "degenerate mask"
    for name in fetch:
        same_bits("dropout-train-" + impl, name, static[name], eager[name])


# ---- coverage ----------------------------------------------------------------------------

def test_every_op_runs_eagerly():
    """Every op type of ops/ops.def has forward rows here, or is in NOT_EAGER;
    every op with a grad maker has gradient rows here, or is in NOT_EAGER."""
    ops = set(ops_def())
    unknown = sorted(set(NOT_EAGER) - ops)
    assert not unknown, "NOT_EAGER names ops not in ops/ops.def: %s" % ", ".join(unknown)
    forward = {op for op in ops if not op.endswith("_grad")}
    ran = {c.op for c in fw.CASES if c.op not in NOT_EAGER} | {r[0] for r in fw.RANDOM_CASES} | {"dropout"}
    missing = sorted(forward - ran - set(NOT_EAGER))
    assert not missing, "ops in ops/ops.def run neither eagerly here nor listed in NOT_EAGER: %s" % ", ".join(missing)
    ran_grad = {c.op for c in gr.CASES if c.op not in NOT_EAGER} | {"dropout"}
    missing = sorted(gr.grad_ops() - ran_grad - set(NOT_EAGER))
    assert not missing, ("ops with a grad maker whose eager backward is checked nowhere here (add rows to "
                         "tests/ops/test_grad_ops.py, or the op to NOT_EAGER with the reason): %s" % ", ".join(missing))
    stale = sorted(op for op in NOT_EAGER if op in {c.op for c in fw.CASES})
    assert not stale, "ops in NOT_EAGER have conformance rows now: run them here and drop them: %s" % ", ".join(stale)


# ---- gradients with several contributions: eager accumulation against the autodiff pass's sums -----

def _shared_programs():
    """Programs where one tensor gets gradient contributions from several
    places: repeated args of one op, several ops reading a leaf, several
    ops reading an intermediate. Each ends in loss = mean(y * r)."""
    progs = []

    def prog(name, body):
        p = Program()
        rng = np.random.default_rng(len(progs) + 1)
        feeds = {"x": rng.standard_normal([5, 7]).astype(np.float32), "r": None}
        p.var("x", "float32", [5, 7])
        y_dims = body(p)
        feeds["r"] = rng.standard_normal(y_dims).astype(np.float32)
        p.var("r", "float32", y_dims, stop_gradient=True)
        p.var("w", "float32", y_dims)
        p.var("loss", "float32", [1])
        p.op("elementwise_mul", {"X": ["y"], "Y": ["r"]}, {"Out": ["w"]}, {"axis": -1})
        p.op("mean", {"X": ["w"]}, {"Out": ["loss"]})
        progs.append(pytest.param(p, feeds, id=name))

    def concat3(p):
        p.var("y", "float32", [15, 7])
        p.op("concat", {"X": ["x", "x", "x"]}, {"Out": ["y"]}, {"axis": 0})
        return [15, 7]

    def sum4(p):
        p.var("y", "float32", [5, 7])
        p.op("sum", {"X": ["x", "x", "x", "x"]}, {"Out": ["y"]})
        return [5, 7]

    def three_readers(p):
        for nm in ("a", "b", "c", "y"):
            p.var(nm, "float32", [5, 7])
        p.op("tanh", {"X": ["x"]}, {"Out": ["a"]})
        p.op("exp", {"X": ["x"]}, {"Out": ["b"]})
        p.op("scale", {"X": ["x"]}, {"Out": ["c"]}, {"scale": 0.3})
        p.op("sum", {"X": ["a", "b", "c"]}, {"Out": ["y"]})
        return [5, 7]

    def shared_intermediate(p):
        for nm in ("h", "a", "b", "c", "y"):
            p.var(nm, "float32", [5, 7])
        p.op("sigmoid", {"X": ["x"]}, {"Out": ["h"]})
        p.op("elementwise_mul", {"X": ["h"], "Y": ["h"]}, {"Out": ["a"]}, {"axis": -1})
        p.op("tanh", {"X": ["h"]}, {"Out": ["b"]})
        p.op("elementwise_add", {"X": ["a"], "Y": ["h"]}, {"Out": ["c"]}, {"axis": -1})
        p.op("sum", {"X": ["c", "b", "h"]}, {"Out": ["y"]})
        return [5, 7]

    prog("concat_same_arg_3x", concat3)
    prog("sum_same_arg_4x", sum4)
    prog("leaf_read_by_three_ops", three_readers)
    prog("intermediate_read_by_four_ops", shared_intermediate)
    return progs


@pytest.mark.parametrize("program,feeds", _shared_programs())
def test_accumulated_grads_eager(program, feeds, tmp_path):
    """The contributions to one gradient are summed in the autodiff pass's
    order (the same `sum` op, the same order): the same bits eagerly."""
    fetch = ["x@GRAD", "loss"]
    static = run_static(program, feeds, {}, fetch, tmp_path, backward="loss")
    eager = run_eager(program, feeds, {}, fetch, backward="loss")
    for name in fetch:
        same_bits("accumulate", name, static[name], eager[name])
