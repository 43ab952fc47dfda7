"""tests/ops/test_grad_ops.py — every differentiable op's gradients against PyTorch autograd.

One row per case. The rows are the forward conformance table's
(tests/ops/test_forward_ops.py: shapes with broadcasting, odd and one-sized
dims, every attr variant, float32 and float64) for every op that has a
grad maker in ops/ops.def (PE_GRAD), plus GRAD_ROWS below for what only
matters backward. For each row:

  program   the op (its inputs fed, non-differentiated ones stop_gradient),
            then loss = sum_k mean(out_k * R_k) over the row's loss outputs,
            R_k fixed random tensors (fed, stop_gradient) so that every
            output element gets its own upstream gradient;
  pe        `pe run --backward loss` (the autodiff pass appends the grad
            ops), fetching IN@GRAD of every differentiated input;
  torch     the same loss from the row's reference in float64 on the same
            inputs, torch.autograd.grad.

float32 gradients must be within rtol 1e-4 of the float64 reference (the
issue's bound), plus an absolute 1e-5 x max|reference| so that elements
that cancel to ~0 are judged on the gradient's scale; float64 gradients
within rtol 1e-9 (+ 1e-11 x max|reference|), which catches a float64
kernel computing through float32. Rows the forward table marks xfail
(NHWC where the kernels refuse it: float64, CUDA places, batch_norm) are
xfail here too (strict: they must fail with a clean `pe` error).
Inputs not differentiated: integer inputs, labels, batch_norm's Mean /
Variance (moving statistics), dropout's Step.

test_dropout_train_grad checks the training-mode mask (drawn by PE, read
back through Mask); test_every_grad_op_has_a_row fails when ops.def gains a
differentiable op without rows.

    PE_BIN_DIR=build/bin /usr/bin/python3 -m pytest -q tests/ops/test_grad_ops.py
"""
import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import test_forward_ops as fw  # noqa: E402
from pe_json import REPO, Program, fetch_file, lod_args, pe_bin, pe_failure, place_args  # noqa: E402

torch.set_num_threads(1)

FP32_RTOL, FP32_ATOL_SCALE = 1e-4, 1e-5
FP64_RTOL, FP64_ATOL_SCALE = 1e-9, 1e-11


def grad_ops():
    """Op types with a grad maker (PE_GRAD(...) or PE_GRAD_WIRE(...)) in ops/ops.def."""
    text = re.sub(r"/\*.*?\*/", "", open(os.path.join(REPO, "ops", "ops.def")).read(), flags=re.S)
    return {m.group(1) for m in re.finditer(r"^\s*PE_OP\(\s*(\w+)\s*,.*PE_GRAD(_WIRE)?\(", text, flags=re.M)}


# Per op: the input slots never differentiated, and the outputs the loss reads
# (default: the first output the reference returns).
NO_GRAD_SLOTS = {"batch_norm": {"Mean", "Variance"}, "softmax_with_cross_entropy": {"Label"},
                 "cross_entropy": {"Label"}, "dropout": {"Step"},
                 "sigmoid_cross_entropy_with_logits": {"Label"}, "label_smooth": {"PriorDist"},
                 "sequence_expand": {"Y"}}  # Y gives the repeat counts (its LoD) only
LOSS_OUTS = {"lstm": ["Hidden", "Cell"], "batch_norm": ["Y"], "layer_norm": ["Y"], "group_norm": ["Y"], "instance_norm": ["Y"], "softmax_with_cross_entropy": ["Loss"], "cos_sim": ["Out"]}


class GradCase:
    def __init__(self, op, name, inputs, attrs, ref, dtypes=None, xfail=None, tol=None, why=None, lod=None):
        self.op, self.name, self.inputs, self.attrs, self.ref = op, name, inputs, attrs, ref
        self.lod = lod or {}  # {input slot: offsets per LoD level}, as the forward rows
        self.dtypes, self.xfail, self.tol, self.why = dtypes or {}, xfail, tol, why

    @property
    def id(self):
        return "%s-%s" % (self.op, self.name)


def _has_float(spec):
    specs = spec if isinstance(spec, list) else [spec]
    return any(np.dtype(s.dtype).kind == "f" for s in specs)


CASES = []
_GRAD_OPS = grad_ops()
for c in fw.CASES:
    if c.op not in _GRAD_OPS or not c.upcast and c.op != "cast":
        continue
    wrt = [s for s, spec in c.inputs.items() if s not in NO_GRAD_SLOTS.get(c.op, set()) and _has_float(spec)]
    if not wrt:
        continue  # integer rows (elementwise_add int32, reduce_sum int64, ...)
    if c.op == "cast" and not (np.dtype(c.dtypes.get("Out", "int64")).kind == "f"):
        continue  # a cast to an integer type has no gradient
    CASES.append(GradCase(c.op, c.name, c.inputs, c.attrs, c.ref, c.dtypes, c.xfail, lod=c.lod))

f32, f64, i64, R = fw.f32, fw.f64, fw.i64, fw.R


def grad_row(*a, **kw):
    CASES.append(GradCase(*a, **kw))


# ---- rows that matter for the backward pass only ----------------------------------------

# elementwise: gradients of the broadcast operand are sums over the broadcast dims
for op, fn in fw.EW.items():
    grad_row(op, "y_bcast_both_sides_odd", {"X": f32(5, 1, 7), "Y": R([1, 3, 7], "float32", nonzero=True)},
             {"axis": -1}, lambda t, a, fn=fn: {"Out": fn(t["X"], t["Y"])})
    grad_row(op, "mid_axis_big", {"X": f32(8, 33, 9), "Y": R([33], "float32", nonzero=True)}, {"axis": 1},
             lambda t, a, fn=fn: {"Out": fn(*fw.pd_align(t["X"], t["Y"], a["axis"]))})
# mul / matmul with one side broadcast across a batch: the weight gradient sums over it
grad_row("mul", "3d_x_big_k", {"X": f32(3, 5, 130), "Y": f32(130, 7)}, {"x_num_col_dims": 2}, fw.ref_mul)
grad_row("matmul_v2", "bcast_y_over_batch", {"X": f32(4, 3, 6, 5), "Y": f32(5, 2)}, {},
         lambda t, a: fw.ref_matmul(t, a, v2=True))
grad_row("matmul", "vec_vec", {"X": f32(6), "Y": f32(6)}, {}, fw.ref_matmul)
# conv2d: filter gradient over a batch, with bias; pool2d: overlapping windows
grad_row("conv2d", "bias_stride2", {"Input": f32(3, 2, 7, 6), "Filter": f32(5, 2, 3, 3), "Bias": f32(5)},
         {"strides": [2, 2], "paddings": [1, 1]}, fw.ref_conv2d)
grad_row("conv2d", "cnn_layer2", {"Input": f32(4, 8, 14, 14, lo=0, hi=1), "Filter": f32(16, 8, 5, 5, lo=-0.1, hi=0.1)},
         {"paddings": [2, 2]}, fw.ref_conv2d)
grad_row("conv2d_transpose", "batch_stride2_outpad", {"Input": f32(3, 4, 5, 4), "Filter": f32(4, 3, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 1], "output_padding": [1, 0]}, fw.ref_conv2d_transpose)
grad_row("depthwise_conv2d", "bias_stride2", {"Input": f32(3, 4, 7, 6), "Filter": f32(4, 1, 3, 3), "Bias": f32(4)},
         {"groups": 4, "strides": [2, 2], "paddings": [1, 1]}, fw.ref_conv2d)
grad_row("bilinear_interp_v2", "overlap_down", {"X": f32(2, 2, 7, 6)},
         {"out_h": 3, "out_w": 4, "align_corners": False, "align_mode": 0},
         lambda t, a: fw.ref_interp_torch(t, a, "bilinear"))
grad_row("group_norm", "scale_only", {"X": f32(3, 6, 5), "Scale": f32(6)}, {"groups": 3}, fw.ref_group_norm)
grad_row("instance_norm", "bias_only", {"X": f32(3, 2, 9), "Bias": f32(2)}, {}, fw.ref_instance_norm)
grad_row("pool2d", "max_overlap_k3s1", {"X": f32(2, 3, 6, 6)}, {"ksize": [3, 3], "strides": [1, 1]}, fw.ref_pool2d)
# data_format NHWC (CPU, float32; what BuildStrategy.conv_nhwc switches a CNN to): conv with bias,
# a CNN layer's shapes, depthwise; max pooling's NHWC loops (2x2 tiles and overlapping windows with
# padding, more channels than one block of 64), average pooling through oneDNN
for name, ins, at in (
        ("nhwc_bias_stride2", {"Input": f32(3, 7, 6, 2), "Filter": f32(5, 2, 3, 3), "Bias": f32(5)},
         {"strides": [2, 2], "paddings": [1, 1]}),
        ("nhwc_cnn_layer2", {"Input": f32(4, 14, 14, 8, lo=0, hi=1), "Filter": f32(16, 8, 5, 5, lo=-0.1, hi=0.1),
                             "Bias": f32(16)}, {"paddings": [2, 2]})):
    grad_row("conv2d", name, ins, dict(at, data_format="NHWC"), fw.ref_conv2d, xfail=fw.nhwc_xfail(name, {"data_format": "NHWC"}))
grad_row("depthwise_conv2d", "nhwc", {"Input": f32(3, 7, 6, 4), "Filter": f32(4, 1, 3, 3)},
         {"groups": 4, "paddings": [1, 1], "data_format": "NHWC"}, fw.ref_conv2d,
         xfail=fw.nhwc_xfail("nhwc", {"data_format": "NHWC"}))
for name, xs, at in (("nhwc_max_2x2", f32(2, 6, 8, 3), {"ksize": [2, 2], "strides": [2, 2]}),
                     ("nhwc_max_2x2_odd_edge", f32(2, 7, 5, 3), {"ksize": [2, 2], "strides": [2, 2]}),
                     ("nhwc_max_overlap_k3s1_pad1", f32(2, 6, 5, 70), {"ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1]}),
                     ("nhwc_avg_overlap_pad_exclusive", f32(2, 5, 6, 2),
                      {"pooling_type": "avg", "ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1]})):
    grad_row("pool2d", name, {"X": xs}, dict(at, data_format="NHWC"), fw.ref_pool2d,
             xfail=fw.nhwc_xfail(name, {"data_format": "NHWC"}))
# batch_norm NHWC: oneDNN (float32, channels last), the loops (float64)
for name, x, c, at in (("nhwc_train", f32(3, 4, 5, 6, lo=-2, hi=3), 6, {}),
                       ("nhwc_global", f32(2, 3, 3, 4), 4, {"use_global_stats": True}),
                       ("fp64_nhwc_train", f64(3, 4, 3, 5), 5, {})):
    grad_row("batch_norm", name, fw.bn_inputs(x, c), dict(at, data_layout="NHWC"), fw.ref_batch_norm,
             xfail=fw.nhwc_xfail(name, {"data_layout": "NHWC"}, "data_layout", fp64_ok=True))
grad_row("pool2d", "avg_overlap_pad_exclusive", {"X": f32(2, 2, 5, 6)},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1]}, fw.ref_pool2d)
# losses on larger batches; hard labels with ignored rows
grad_row("softmax_with_cross_entropy", "batch64_c10",
         {"Logits": f32(64, 10), "Label": fw.labels([64, 1], 10)}, {}, fw.ref_swce)
grad_row("softmax_with_cross_entropy", "ignore_minus100",
         {"Logits": f32(7, 6), "Label": fw.labels([7, 1], 6, ignore=-100)}, {}, fw.ref_swce)
grad_row("batch_norm", "train_odd_hw", fw.bn_inputs(f32(3, 5, 3, 7), 5), {"momentum": 0.9}, fw.ref_batch_norm)
grad_row("layer_norm", "odd_wide", {"X": f32(3, 129), "Scale": f32(129), "Bias": f32(129)}, {}, fw.ref_layer_norm)
grad_row("reduce_prod", "negatives_two_dims", {"X": f32(3, 4, 5, lo=-1.2, hi=1.2, nonzero=True)}, {"dim": [0, 2]},
         lambda t, a: fw.ref_reduce(t, a, fw.REDUCE_MORE["reduce_prod"]))
grad_row("reduce_max", "neg_dims_keep_fp64", {"X": f64(3, 1, 4, 5)}, {"dim": [-1, -3], "keep_dim": True},
         lambda t, a: fw.ref_reduce(t, a, torch.amax))
grad_row("reduce_mean", "neg_dims_keep", {"X": f32(3, 1, 4, 5)}, {"dim": [-1, -3], "keep_dim": True},
         lambda t, a: fw.ref_reduce(t, a, torch.mean))
grad_row("lookup_table_v2", "repeated_ids", {"W": f32(4, 5), "Ids": R([6, 3], "int64", fn=lambda r: r.integers(0, 2, (6, 3)))},
         {}, fw.ref_lookup)
grad_row("concat", "axis2_odd", {"X": [f32(2, 3, 1), f32(2, 3, 4), f32(2, 3, 2)]}, {"axis": 2},
         lambda t, a: {"Out": torch.cat(t["X"], a["axis"])})
grad_row("stack", "mid_axis_four", {"X": [f32(3, 5)] * 4}, {"axis": 1},
         lambda t, a: {"Y": torch.stack(t["X"], a["axis"])})
grad_row("unstack", "mid_axis", {"X": f64(3, 4, 2)}, {"axis": 1, "num": 4},
         lambda t, a: {"Y": list(torch.unbind(t["X"], a["axis"]))})
grad_row("tile", "repeat_lead_and_odd", {"X": f32(3, 1, 5)}, {"repeat_times": [2, 1, 4, 3]},
         lambda t, a: {"Out": torch.tile(t["X"], a["repeat_times"])})
grad_row("expand_v2", "two_bcast_dims_fp64", {"X": f64(1, 4, 1)}, {"shape": [3, 6, 4, 5]},
         lambda t, a: {"Out": t["X"].expand(*a["shape"])})
grad_row("cumsum", "exclusive_reverse_mid", {"X": f32(3, 7, 2)}, {"axis": 1, "exclusive": True, "reverse": True},
         fw.ref_cumsum)
grad_row("split", "sections_axis0", {"X": f32(7, 3)}, {"sections": [2, 4, 1], "axis": 0}, fw.ref_split)
grad_row("slice", "three_axes", {"Input": f32(4, 5, 6)}, {"axes": [0, 1, 2], "starts": [1, -4, 0], "ends": [3, 5, -2]},
         fw.ref_slice)


# sequences: gradients within each sequence of the LoD (empty ones get none)
grad_row("sequence_pool", "average_fp64", {"X": f64(7, 2)}, {"pooltype": "AVERAGE"}, fw.ref_seqpool([0, 3, 3, 7]),
         lod={"X": [[0, 3, 3, 7]]})
grad_row("sequence_expand", "x_seqs_repeated", {"X": f32(5, 2), "Y": i64(6, 1)}, {},
         fw.ref_seqexpand([0, 2, 3, 6], [0, 2, 4, 5]), lod={"X": [[0, 2, 4, 5]], "Y": [[0, 2, 3, 6]]})
# recurrent: gradients through every step, H0 / C0 included, the loss over Hidden and Cell
grad_row("lstm", "peep_h0_c0_reverse_fp64", {"Input": f64(7, 8), "Weight": f64(2, 8), "Bias": f64(1, 14),
                                             "H0": f64(3, 2), "C0": f64(3, 2)}, {"is_reverse": True},
         fw.ref_lstm([0, 2, 3, 7]), lod={"Input": [[0, 2, 3, 7]]})
grad_row("gru", "h0_fp64", {"Input": f64(7, 6), "Weight": f64(2, 6), "Bias": f64(1, 6), "H0": f64(3, 2)}, {},
         fw.ref_gru([0, 2, 3, 7]), lod={"Input": [[0, 2, 3, 7]]})

grad_row("sequence_conv", "len5_start_m3_single_rows", {"X": f32(6, 11), "Filter": f32(55, 2)},
         {"contextLength": 5, "contextStart": -3}, fw.ref_seqconv([0, 1, 2, 6]), lod={"X": [[0, 1, 2, 6]]})


# ---- running a row ----------------------------------------------------------------------

def _run_pe(prog, feeds, fetch, wd, env=None, lods=None):
    cmd = [pe_bin(), "run", prog, "--backward", "loss"]
    for i, (name, arr) in enumerate(feeds.items()):
        f = os.path.join(wd, "feed_%d.npy" % i)
        np.save(f, np.ascontiguousarray(arr))
        cmd += ["--feed", "%s=%s" % (name, f)]
    cmd += lod_args(lods)
    out = os.path.join(wd, "out")
    for name in fetch:
        cmd += ["--fetch", name]
    cmd += ["--out", out] + place_args(env)
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(env or {})
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=e)
    if r.returncode != 0:
        raise pe_failure(cmd, r.returncode, r.stderr)  # PeCrash fails a strict xfail
    return {name: np.load(os.path.join(out, fetch_file(name))) for name in fetch}


def _check_grad(case, label, got, want):
    assert list(got.shape) == list(want.shape), "%s: %s has dims %s, expected %s" % (
        case.id, label, list(got.shape), list(want.shape))
    fp64 = got.dtype == np.float64
    rtol, scale = case.tol or ((FP64_RTOL, FP64_ATOL_SCALE) if fp64 else (FP32_RTOL, FP32_ATOL_SCALE))
    g, w = got.astype(np.float64), want.astype(np.float64)
    atol = scale * (np.abs(w).max() if w.size else 0.0)
    err = np.abs(g - w)
    bad = ~(err <= atol + rtol * np.abs(w))
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err, -1)), g.shape) if g.ndim else ()
        pytest.fail("%s: %s: %d of %d elements outside rtol %g (atol %.3g); max error %.3g at %s (pe %r, torch %r)"
                    % (case.id, label, bad.sum(), bad.size, rtol, atol, np.nanmax(err), list(i), g[i], w[i]))


def build_grad_case(case):
    """The row's program (the op, then the loss), its feeds {var name:
    array}, LoDs {feed name: offsets per level}, fetch names (IN@GRAD of
    every differentiated input, then "loss"), and the torch side: the
    differentiated leaves (name, slot, tensor, dtype), their reference
    gradients and the reference loss. tests/ops/test_eager_ops.py runs the
    same program eagerly."""
    rng = np.random.default_rng(zlib.crc32(("grad-" + case.id).encode()))
    arrays = {slot: [s.make(rng) for s in spec] if isinstance(spec, list) else spec.make(rng)
              for slot, spec in case.inputs.items()}
    no_grad = NO_GRAD_SLOTS.get(case.op, set())
    # torch leaves: float inputs in float64, requires_grad where differentiated
    t, leaves = {}, []
    for slot, v in arrays.items():
        ts = []
        for j, a in enumerate(v if isinstance(v, list) else [v]):
            x = torch.from_numpy(np.array(a))
            if x.is_floating_point():
                x = x.double().requires_grad_(slot not in no_grad)
                if slot not in no_grad:
                    leaves.append(("%s_%d" % (slot.lower(), j), slot, x, a.dtype))
            ts.append(x)
        t[slot] = ts if isinstance(v, list) else ts[0]
    ref = case.ref(t, case.attrs)

    floats = [a.dtype for v in arrays.values() for a in (v if isinstance(v, list) else [v]) if a.dtype.kind == "f"]
    base = floats[0]
    loss_slots = LOSS_OUTS.get(case.op) or [next(iter(ref))]
    p = Program()
    feeds, ins = {}, {}
    for slot, v in arrays.items():
        names = []
        for j, a in enumerate(v if isinstance(v, list) else [v]):
            nm = "%s_%d" % (slot.lower(), j)
            p.var(nm, a.dtype, a.shape, stop_gradient=slot in no_grad or a.dtype.kind != "f")
            feeds[nm] = a
            names.append(nm)
        ins[slot] = names
    outs, loss_terms, torch_loss = {}, [], 0
    for k, v in ref.items():
        outs[k] = []
        for j, w in enumerate(v if isinstance(v, list) else [v]):
            w = w.reshape(1) if w.dim() == 0 else w  # Paddle 2.x: a full reduction is [1]
            nm = "out_%s_%d" % (k.lower(), j)
            dt = np.dtype(case.dtypes.get(k) or (base if w.is_floating_point() else w.numpy().dtype))
            p.var(nm, dt, list(w.shape))
            outs[k].append(nm)
            if k in loss_slots and dt.kind == "f":
                r = rng.standard_normal(list(w.shape)).astype(dt)
                rn, mn, sn = "r_%s_%d" % (k.lower(), j), "w_%s_%d" % (k.lower(), j), "m_%s_%d" % (k.lower(), j)
                p.var(rn, dt, r.shape, stop_gradient=True)
                feeds[rn] = r
                p.var(mn, dt, list(w.shape))
                p.var(sn, dt, [1])
                loss_terms.append((nm, rn, mn, sn))
                torch_loss = torch_loss + (w * torch.from_numpy(r).double()).mean()
    assert loss_terms, "%s: no float output in the loss" % case.id
    p.op(case.op, ins, outs, case.attrs)
    for nm, rn, mn, sn in loss_terms:
        p.op("elementwise_mul", {"X": [nm], "Y": [rn]}, {"Out": [mn]}, {"axis": -1})
        p.op("mean", {"X": [mn]}, {"Out": [sn]})
    ldt = p.vars[[v["name"] for v in p.vars].index(loss_terms[0][3])]["dtype"]
    p.vars.append({"name": "loss", "dtype": ldt, "dims": [1], "persistable": False, "is_parameter": False,
                   "stop_gradient": False})
    p.op("sum", {"X": [s for _, _, _, s in loss_terms]}, {"Out": ["loss"]})
    want = torch.autograd.grad(torch_loss, [x for _, _, x, _ in leaves], allow_unused=True)
    fetch = ["%s@GRAD" % nm for nm, _, _, _ in leaves] + ["loss"]
    lods = {"%s_0" % slot.lower(): lv for slot, lv in case.lod.items()}
    return p, feeds, lods, fetch, leaves, want, torch_loss


def run_grad_case(case, tmp_path, env=None):
    """Runs the row's forward + backward with `pe run --backward` (`env` adds
    to the environment, e.g. PE_TEST_PLACES), checks the loss and every
    gradient against torch, and returns pe's fetches {name: array}."""
    os.makedirs(str(tmp_path), exist_ok=True)
    p, feeds, lods, fetch, leaves, want, torch_loss = build_grad_case(case)
    prog = str(tmp_path / "prog.json")
    p.save(prog)
    got = _run_pe(prog, feeds, fetch, str(tmp_path), env=env, lods=lods)
    np.testing.assert_allclose(got["loss"].astype(np.float64).reshape(-1)[0], torch_loss.item(), rtol=1e-4, atol=1e-6,
                               err_msg="%s: the loss itself differs" % case.id)
    for (nm, slot, x, dt), w, f in zip(leaves, want, fetch):
        g = got[f]
        assert g.dtype == dt, "%s: %s has dtype %s, the input is %s" % (case.id, f, g.dtype, dt)
        _check_grad(case, f, g, np.zeros(x.shape) if w is None else w.numpy())
    return got


@pytest.fixture(scope="module", autouse=True)
def _need_pe():
    if not os.path.exists(pe_bin()):
        pytest.fail("pe binary not found at %s (set PE_BIN_DIR or build into build/)" % pe_bin())


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(strict=True, raises=fw.PeError, reason=c.xfail)) if c.xfail else c
    for c in CASES], ids=[c.id for c in CASES])
def test_grad(case, tmp_path):
    run_grad_case(case, tmp_path)


def dropout_train_program(impl, p_drop, shape):
    """loss = mean(dropout(x) * r): training dropout with fix_seed (seed 11)
    on x, r a stop_gradient weight; Mask fetched as "mask"."""
    p = Program()
    p.var("x", "float32", shape)
    p.var("r", "float32", shape, stop_gradient=True)
    for nm in ("out", "w"):
        p.var(nm, "float32", shape)
    p.var("mask", "uint8", shape)
    p.var("loss", "float32", [1])
    p.op("dropout", {"X": ["x"]}, {"Out": ["out"], "Mask": ["mask"]},
         {"dropout_prob": p_drop, "is_test": False, "fix_seed": True, "seed": 11, "dropout_implementation": impl})
    p.op("elementwise_mul", {"X": ["out"], "Y": ["r"]}, {"Out": ["w"]}, {"axis": -1})
    p.op("mean", {"X": ["w"]}, {"Out": ["loss"]})
    return p


@pytest.mark.parametrize("impl", ["downgrade_in_infer", "upscale_in_train"])
def test_dropout_train_grad(impl, tmp_path):
    """Training dropout: X@GRAD = Mask * dOut (/ (1 - p) for upscale_in_train),
    with the mask PE drew (fetched through Mask)."""
    p_drop, shape = 0.4, [9, 13]
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    r = rng.standard_normal(shape).astype(np.float32)
    p = dropout_train_program(impl, p_drop, shape)
    p.save(str(tmp_path / "p.json"))
    got = _run_pe(str(tmp_path / "p.json"), {"x": x, "r": r}, ["x@GRAD", "mask"], str(tmp_path))
    m = got["mask"].astype(np.float64)
    assert 0 < m.mean() < 1, "degenerate mask"
    scale = 1.0 / (1.0 - p_drop) if impl == "upscale_in_train" else 1.0
    np.testing.assert_allclose(got["x@GRAD"], m * r.astype(np.float64) * scale / r.size, rtol=1e-6, atol=0)


def test_every_grad_op_has_a_row():
    have = {c.op for c in CASES} | {"dropout"}
    missing = sorted(_GRAD_OPS - have)
    assert not missing, "differentiable ops in ops/ops.def without a gradient row: %s" % ", ".join(missing)
