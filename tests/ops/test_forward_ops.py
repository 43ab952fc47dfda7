"""tests/ops/test_forward_ops.py — every forward op of ops/ops.def against PyTorch.

One row per case: op type, inputs (shape, dtype, value range), attrs, and a
PyTorch reference. Each row becomes a one-op JSON program (vars declared
with their exact shapes), its inputs are written as .npy, `pe run` runs it
(one subprocess per row) and every bound output is compared with the
reference: same dims, same dtype, values within tolerance.

References run in float64 on the same (float32) inputs, so they are the
exact answer up to fp64 rounding; a float32 output must be within
rtol 1e-5 / atol 1e-5 of it, a float64 output within 1e-10 (the fp64 rows
exist to catch kernels that compute fp64 through fp32). Integer and bool
outputs must match exactly. Rows that need a looser bound say why.

Semantics are Paddle's where they differ from PyTorch's (the reference
helpers below spell them out): elementwise `axis` alignment, 2- and 4-value
paddings, SAME/VALID, pool2d's exclusive/ceil_mode divisor, batch_norm's
biased running variance and SavedVariance = 1/sqrt(var + eps).

Random ops (uniform_random, gaussian_random, truncated_gaussian_random)
cannot match PyTorch bit for bit; their rows check range, determinism per
seed and a two-sample Kolmogorov-Smirnov distance to samples from PyTorch.

test_every_op_has_a_row fails when ops.def gains a forward op with no row.

    PE_BIN_DIR=build/bin /usr/bin/python3 -m pytest -q tests/ops
"""
import os
import sys
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pe_json import DTYPES, PeCrash, PeError, Program, ops_def, pe_bin, pe_failure, run_pe  # noqa: E402

torch.set_num_threads(1)

FP32_TOL = (1e-5, 1e-5)   # rtol, atol
FP64_TOL = (1e-10, 1e-10)


# ---- input specs --------------------------------------------------------------

class R:
    """A random input: shape, dtype, and a range (uniform) or N(0,1) (default
    for floats). `nonzero` keeps |v| >= 0.5 (divisors). `values` draws from a
    list (labels, ints with ties avoided)."""

    def __init__(self, shape, dtype="float32", lo=None, hi=None, nonzero=False, fn=None):
        self.shape, self.dtype, self.lo, self.hi = list(shape), dtype, lo, hi
        self.nonzero, self.fn = nonzero, fn

    def make(self, rng):
        if self.fn is not None:
            return np.ascontiguousarray(self.fn(rng)).astype(self.dtype)
        dt = np.dtype(self.dtype)
        if dt.kind == "f":
            if self.lo is None:
                a = rng.standard_normal(self.shape)
            else:
                a = rng.uniform(self.lo, self.hi, self.shape)
            if self.nonzero:
                a = np.sign(a + (a == 0)) * (0.5 + np.abs(a))
            return a.astype(dt)
        if dt.kind == "b":
            return rng.integers(0, 2, self.shape).astype(bool)
        lo = -20 if self.lo is None else self.lo
        hi = 20 if self.hi is None else self.hi
        return rng.integers(lo, hi, self.shape).astype(dt)


def f32(*shape, **kw):
    return R(shape, "float32", **kw)


def f64(*shape, **kw):
    return R(shape, "float64", **kw)


def i32(*shape, **kw):
    return R(shape, "int32", **kw)


def i64(*shape, **kw):
    return R(shape, "int64", **kw)


class Case:
    """One conformance row.

    inputs: {slot: R | [R, ...] (duplicable)}; attrs: {name: value};
    ref(t, attrs) -> {out slot: torch tensor}, where t maps each input slot
    to a torch tensor (floats upcast to float64 unless upcast=False) or a
    list of them. Every slot ref returns is bound and compared; `dtypes`
    overrides an output's expected dtype (default: a float result takes the
    first float input's dtype, else float32; other results keep theirs).
    `flat` names outputs whose dims may differ from the reference while the
    element count and values agree (Paddle changed them across versions:
    mean's [1] vs [], arg_max flatten's [1] vs []). `xfail` (a reason) marks
    a known gap: the row must fail with a clean `pe` error (PeError), and
    starts failing the suite once the gap closes (strict), so it gets
    un-marked then. `threads` rows (large inputs, where the kernels split
    work across OpenMP threads) also run in test_thread_count_invariance
    with 1 and with 2 threads: both must match the reference and each other
    bit for bit (DESIGN.md §4: results do not depend on the thread count)."""

    def __init__(self, op, name, inputs, attrs, ref, dtypes=None, tol=None, upcast=True,
                 flat=(), xfail=None, threads=False, why=None, lod=None):
        self.op, self.name, self.inputs, self.attrs, self.ref = op, name, inputs, attrs, ref
        self.lod = lod or {}  # {input slot: offsets per LoD level} (sequence ops), fed with --lod
        self.dtypes, self.tol, self.upcast, self.flat, self.xfail = dtypes or {}, tol, upcast, flat, xfail
        self.threads, self.why = threads, why  # why: the reason for a non-default tol

    @property
    def id(self):
        return "%s-%s" % (self.op, self.name)


CASES = []


def case(*a, **kw):
    CASES.append(Case(*a, **kw))


# ---- Paddle-semantics helpers for the references -------------------------------

def pd_align(x, y, axis):
    """Paddle's elementwise alignment: the lower-rank operand is placed at
    `axis` of the higher-rank one (axis -1: trailing), then numpy rules."""
    if x.dim() == y.dim():
        return x, y
    swap = x.dim() < y.dim()
    big, small = (y, x) if swap else (x, y)
    dims = list(small.shape)
    if axis == -1:
        axis = big.dim() - small.dim()
    while len(dims) + axis > big.dim() and dims and dims[-1] == 1:
        dims.pop()  # trailing 1s past the end are dropped, as Paddle does
    small = small.reshape([1] * axis + dims + [1] * (big.dim() - axis - len(dims)))
    return (small, big) if swap else (big, small)


def pd_pads(paddings, algo, in_hw, k_hw, strides, dilations):
    """Paddle's UpdatePaddingAndDilation: -> (top, bottom, left, right), dilations."""
    p = list(paddings)
    if len(p) == 2:
        p = [p[0], p[0], p[1], p[1]]
    dil = list(dilations)
    if algo == "VALID":
        p = [0, 0, 0, 0]
    elif algo == "SAME":
        for i in range(2):
            out = (in_hw[i] + strides[i] - 1) // strides[i]
            s = max((out - 1) * strides[i] + k_hw[i] - in_hw[i], 0)
            p[2 * i], p[2 * i + 1] = s // 2, s - s // 2
            dil[i] = 1  # Paddle resets dilation to 1 under SAME
    return p, dil


def ref_conv2d(t, a):
    x, w = t["Input"], t["Filter"]
    nhwc = a.get("data_format", "NCHW") == "NHWC"
    if nhwc:
        x = x.permute(0, 3, 1, 2)
    strides = a.get("strides", [1, 1])
    p, dil = pd_pads(a.get("paddings", [0, 0]), a.get("padding_algorithm", "EXPLICIT"),
                     x.shape[2:], w.shape[2:], strides, a.get("dilations", [1, 1]))
    x = F.pad(x, (p[2], p[3], p[0], p[1]))
    y = F.conv2d(x, w, t.get("Bias"), stride=strides, dilation=dil, groups=a.get("groups", 1))
    return {"Output": y.permute(0, 2, 3, 1) if nhwc else y}


def ref_pool2d(t, a):
    x = t["X"]
    nhwc = a.get("data_format", "NCHW") == "NHWC"
    if nhwc:
        x = x.permute(0, 3, 1, 2)
    typ = a.get("pooling_type", "max")
    H, W = x.shape[2], x.shape[3]
    k = list(a["ksize"])
    strides = list(a.get("strides", [1, 1]))
    if a.get("global_pooling"):
        k, pads = [H, W], [0, 0, 0, 0]
    elif a.get("adaptive"):
        y = (F.adaptive_max_pool2d if typ == "max" else F.adaptive_avg_pool2d)(x, k)
        return {"Out": y.permute(0, 2, 3, 1) if nhwc else y}
    else:
        pads, _ = pd_pads(a.get("paddings", [0, 0]), a.get("padding_algorithm", "EXPLICIT"),
                          (H, W), k, strides, [1, 1])
    # Output size (Paddle): floor or ceil of (in + pads - k) / s, + 1. The
    # ceil overhang is extra bottom/right padding that no element reaches.
    extra = [0, 0]
    for i, n in enumerate((H, W)):
        span = n + pads[2 * i] + pads[2 * i + 1] - k[i]
        out = (span + strides[i] - 1) // strides[i] + 1 if a.get("ceil_mode") else span // strides[i] + 1
        extra[i] = max((out - 1) * strides[i] + k[i] - (n + pads[2 * i] + pads[2 * i + 1]), 0)
    padspec = (pads[2], pads[3] + extra[1], pads[0], pads[1] + extra[0])
    if typ == "max":
        y = F.max_pool2d(F.pad(x, padspec, value=float("-inf")), k, strides)
    else:
        s = F.avg_pool2d(F.pad(x, padspec), k, strides, divisor_override=1)
        if a.get("exclusive", True):
            cnt = F.avg_pool2d(F.pad(torch.ones_like(x), padspec), k, strides, divisor_override=1)
            y = s / cnt          # valid elements only
        else:
            y = s / (k[0] * k[1])  # Paddle: always kh*kw when not exclusive
    return {"Out": y.permute(0, 2, 3, 1) if nhwc else y}


def ref_batch_norm(t, a):
    x = t["X"]
    layout = a.get("data_layout", "NCHW")
    c_axis = x.dim() - 1 if layout == "NHWC" else 1
    red = [d for d in range(x.dim()) if d != c_axis]
    bshape = [1] * x.dim()
    bshape[c_axis] = x.shape[c_axis]
    eps, mom = a.get("epsilon", 1e-5), a.get("momentum", 0.9)
    train = not a.get("is_test", False) and not a.get("use_global_stats", False)
    if train:
        m, v = x.mean(red), x.var(red, unbiased=False)
    else:
        m, v = t["Mean"], t["Variance"]
    y = (x - m.reshape(bshape)) / torch.sqrt(v.reshape(bshape) + eps) * t["Scale"].reshape(bshape) \
        + t["Bias"].reshape(bshape)
    out = {"Y": y}
    if train:
        out["MeanOut"] = t["Mean"] * mom + m * (1 - mom)
        out["VarianceOut"] = t["Variance"] * mom + v * (1 - mom)  # biased batch variance
        out["SavedMean"] = m
        out["SavedVariance"] = 1 / torch.sqrt(v + eps)             # inverse std
    return out


def pd_reshape(shape, target):
    res = [shape[i] if d == 0 else d for i, d in enumerate(target)]
    if -1 in res:
        known = int(np.prod([d for d in res if d != -1]))
        res[res.index(-1)] = int(np.prod(shape)) // known
    return res


# ---- the table ----------------------------------------------------------------------

# elementwise_*: same shape, Paddle axis alignment, 1-sized dims, both sides broadcasting.
EW = {"elementwise_add": torch.add, "elementwise_sub": torch.sub,
      "elementwise_mul": torch.mul, "elementwise_div": torch.div}
EW_SHAPES = [
    ("same_7x5", f32(7, 5), f32(7, 5), -1),
    ("row_bias", f32(6, 5), f32(5), -1),
    ("nchw_channel_axis1", f32(2, 3, 4, 5), f32(3), 1),
    ("trailing_2d", f32(2, 3, 4, 5), f32(4, 5), -1),
    ("leading_axis0", f32(2, 3, 4, 5), f32(2, 3), 0),
    ("mid_axis1_3d", f32(2, 3, 4), f32(3, 4), 1),
    ("scalar_y", f32(7, 5), f32(1), -1),
    ("y_trailing_ones_axis1", f32(2, 3, 4, 5), f32(3, 1), 1),
    ("y_ones_same_rank", f32(2, 3, 4, 5), f32(1, 3, 1, 1), -1),
    ("both_broadcast", f32(4, 1, 5), f32(3, 1), -1),
    ("x_lower_rank", f32(3, 5), f32(2, 3, 5), -1),
    ("one_sized", f32(1, 1), f32(1, 1), -1),
    ("fp64_3d", f64(3, 1, 5), f64(3, 4, 5), -1),
]
for op, fn in EW.items():
    for name, xs, ys, axis in EW_SHAPES:
        if op == "elementwise_div":
            ys = R(ys.shape, ys.dtype, nonzero=True)
        case(op, name, {"X": xs, "Y": ys}, {"axis": axis},
             lambda t, a, fn=fn: {"Out": fn(*pd_align(t["X"], t["Y"], a["axis"]))})
case("elementwise_add", "int32", {"X": i32(7, 5), "Y": i32(5)}, {"axis": -1},
     lambda t, a: {"Out": torch.add(t["X"], t["Y"])})
case("elementwise_sub", "int64_axis0", {"X": i64(3, 4), "Y": i64(3)}, {"axis": 0},
     lambda t, a: {"Out": t["X"] - t["Y"].reshape(3, 1)})
case("elementwise_mul", "int64", {"X": i64(2, 3, 4), "Y": i64(3, 4)}, {"axis": -1},
     lambda t, a: {"Out": t["X"] * t["Y"]})

# elementwise_max/min/pow/mod/floordiv, compare and logical ops, where: the same
# broadcasting. max/min refs are Paddle's functors (a > b ? a : b), so the gradient
# rows derived from them send a tie's gradient to Y as Paddle does; mod is
# Python's % (torch.remainder), floordiv Python's // (rounding toward -inf).
def ref_max(x, y):
    return torch.where(x > y, x, y)


def ref_min(x, y):
    return torch.where(x < y, x, y)


def nonzero_ints(shape, dtype, hi=8):
    return R(shape, dtype, fn=lambda r: r.integers(1, hi, shape) * r.choice([-1, 1], shape))


def ties(shape, dtype="float32"):
    return R(shape, dtype, fn=lambda r: r.integers(-2, 3, shape))


EW2 = {"elementwise_max": ref_max, "elementwise_min": ref_min,
       "elementwise_pow": torch.pow, "elementwise_mod": torch.remainder,
       "elementwise_floordiv": lambda x, y: torch.div(x, y, rounding_mode="floor")}
EW2_SHAPES = [("same_7x5", (7, 5), (7, 5), -1), ("row_bias", (6, 5), (5,), -1),
              ("nchw_channel_axis1", (2, 3, 4, 5), (3,), 1), ("leading_axis0", (2, 3, 4, 5), (2, 3), 0),
              ("y_trailing_ones_axis1", (2, 3, 4, 5), (3, 1), 1), ("both_broadcast", (4, 1, 5), (3, 1), -1),
              ("x_lower_rank", (3, 5), (2, 3, 5), -1), ("scalar_y", (7, 5), (1,), -1)]
EW2_KW = {"elementwise_pow": (dict(lo=0.5, hi=2.0), dict(lo=-2.0, hi=2.5)),
          "elementwise_mod": ({}, dict(nonzero=True)), "elementwise_floordiv": ({}, dict(nonzero=True))}
for op, fn in EW2.items():
    xkw, ykw = EW2_KW.get(op, ({}, {}))
    for name, xsh, ysh, axis in EW2_SHAPES:
        case(op, name, {"X": f32(*xsh, **xkw), "Y": f32(*ysh, **ykw)}, {"axis": axis},
             lambda t, a, fn=fn: {"Out": fn(*pd_align(t["X"], t["Y"], a["axis"]))})
    case(op, "fp64_3d", {"X": f64(3, 1, 5, **xkw), "Y": f64(3, 4, 5, **ykw)}, {"axis": -1},
         lambda t, a, fn=fn: {"Out": fn(t["X"], t["Y"])})
    yi = R([7, 5], "int32", lo=0, hi=4) if op == "elementwise_pow" else nonzero_ints([7, 5], "int32")
    case(op, "int32", {"X": i32(7, 5, lo=-5, hi=6), "Y": yi}, {"axis": -1},
         lambda t, a, fn=fn: {"Out": fn(t["X"], t["Y"])})
    yl = R([3], "int64", lo=0, hi=4) if op == "elementwise_pow" else nonzero_ints([3], "int64")
    case(op, "int64_axis0", {"X": i64(3, 4, lo=-30, hi=30), "Y": yl}, {"axis": 0},
         lambda t, a, fn=fn: {"Out": fn(t["X"], t["Y"].reshape(3, 1))})
for op in ("elementwise_max", "elementwise_min"):
    case(op, "ties", {"X": ties([6, 5]), "Y": ties([6, 5])}, {"axis": -1},
         lambda t, a, fn=EW2[op]: {"Out": fn(t["X"], t["Y"])})
    case(op, "ties_bcast", {"X": ties([4, 5]), "Y": ties([5])}, {"axis": -1},
         lambda t, a, fn=EW2[op]: {"Out": fn(t["X"], t["Y"])})
for op in ("elementwise_mod", "elementwise_floordiv"):
    case(op, "int_signs", {"X": R([8], "int32", fn=lambda r: np.array([7, -7, 7, -7, 6, -6, 0, 2147483647])),
                           "Y": R([8], "int32", fn=lambda r: np.array([3, 3, -3, -3, 3, -3, 5, -1]))}, {},
         lambda t, a, fn=EW2[op]: {"Out": fn(t["X"], t["Y"])})
    case(op, "float_signs", {"X": R([6], "float32", fn=lambda r: np.array([7.5, -7.5, 7.5, -7.5, 6.0, -0.0])),
                             "Y": R([6], "float32", fn=lambda r: np.array([2.0, 2.0, -2.0, -2.0, 3.0, 2.0]))}, {},
         lambda t, a, fn=EW2[op]: {"Out": fn(t["X"], t["Y"])})

CMP = {"equal": torch.eq, "not_equal": torch.ne, "less_than": torch.lt, "less_equal": torch.le,
       "greater_than": torch.gt, "greater_equal": torch.ge}
for op, fn in CMP.items():
    ref = (lambda t, a, fn=fn: {"Out": fn(*pd_align(t["X"], t["Y"], a.get("axis", -1)))})
    case(op, "ties_7x5", {"X": ties([7, 5]), "Y": ties([7, 5])}, {}, ref)
    case(op, "row_bias", {"X": ties([6, 5]), "Y": ties([5])}, {"axis": -1}, ref)
    case(op, "channel_axis1", {"X": ties([2, 3, 4]), "Y": ties([3])}, {"axis": 1}, ref)
    case(op, "both_broadcast_fp64", {"X": ties([4, 1, 5], "float64"), "Y": ties([3, 1], "float64")}, {}, ref)
    case(op, "int32", {"X": i32(7, 5, lo=-3, hi=3), "Y": i32(5, lo=-3, hi=3)}, {}, ref)
    case(op, "int64_x_lower_rank", {"X": i64(5, lo=-3, hi=3), "Y": i64(4, 5, lo=-3, hi=3)}, {}, ref)
    case(op, "bool", {"X": R([4, 5], "bool"), "Y": R([4, 5], "bool")}, {}, ref)
    case(op, "random_f32", {"X": f32(7, 5), "Y": f32(7, 5)}, {}, ref)

LOGICAL = {"logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor}
for op, fn in LOGICAL.items():
    ref = (lambda t, a, fn=fn: {"Out": fn(t["X"], t["Y"])})
    case(op, "same_4x5", {"X": R([4, 5], "bool"), "Y": R([4, 5], "bool")}, {}, ref)
    case(op, "bcast", {"X": R([3, 1, 5], "bool"), "Y": R([4, 5], "bool")}, {}, ref)
case("logical_not", "4x5", {"X": R([4, 5], "bool")}, {}, lambda t, a: {"Out": torch.logical_not(t["X"])})
case("logical_not", "3d", {"X": R([2, 3, 4], "bool")}, {}, lambda t, a: {"Out": torch.logical_not(t["X"])})


def ref_where(t, a):
    return {"Out": torch.where(t["Condition"], t["X"], t["Y"])}


case("where", "7x5", {"Condition": R([7, 5], "bool"), "X": f32(7, 5), "Y": f32(7, 5)}, {}, ref_where)
case("where", "4d", {"Condition": R([2, 3, 4, 5], "bool"), "X": f32(2, 3, 4, 5), "Y": f32(2, 3, 4, 5)}, {},
     ref_where)
case("where", "fp64", {"Condition": R([6, 4], "bool"), "X": f64(6, 4), "Y": f64(6, 4)}, {}, ref_where)
case("where", "int32", {"Condition": R([6, 4], "bool"), "X": i32(6, 4), "Y": i32(6, 4)}, {}, ref_where)
case("where", "int64", {"Condition": R([9], "bool"), "X": i64(9), "Y": i64(9)}, {}, ref_where)

for op, fn in (("relu", torch.relu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh)):
    for name, xs in (("7x5", f32(7, 5)), ("4d", f32(2, 3, 4, 5, lo=-6, hi=6)),
                     ("1x1", f32(1, 1)), ("1d_13", f32(13)), ("fp64", f64(7, 5, lo=-8, hi=8))):
        case(op, name, {"X": xs}, {}, lambda t, a, fn=fn: {"Out": fn(t["X"])})


def ref_scale(t, a):
    s, b = a.get("scale", 1.0), a.get("bias", 0.0)
    x = t["X"]
    return {"Out": s * x + b if a.get("bias_after_scale", True) else s * (x + b)}


case("scale", "after", {"X": f32(7, 5)}, {"scale": 2.5, "bias": 0.5}, ref_scale)
case("scale", "before", {"X": f32(2, 3, 4)}, {"scale": -1.5, "bias": 0.25, "bias_after_scale": False}, ref_scale)
case("scale", "defaults", {"X": f32(3, 1)}, {}, ref_scale)
case("scale", "fp64", {"X": f64(5, 7)}, {"scale": 0.3, "bias": -2.0}, ref_scale)

# cast: (name, input spec, out dtype). Float -> int truncates toward zero.
TD = {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32,
      "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool}
for name, xs, to in (
        ("f32_f64", f32(7, 5), "float64"), ("f64_f32", f64(7, 5), "float32"),
        ("f32_i32", f32(7, 5, lo=-50, hi=50), "int32"), ("f32_i64", f32(3, 4, lo=-50, hi=50), "int64"),
        ("i32_f32", i32(7, 5), "float32"), ("i64_f32", i64(7, 5), "float32"),
        ("i64_i32", i64(2, 3, 4), "int32"), ("i32_i64", i32(6), "int64"),
        ("f32_bool", R([4, 5], "float32", fn=lambda r: r.integers(-1, 2, (4, 5))), "bool"),
        ("bool_f32", R([4, 5], "bool"), "float32"), ("bool_i64", R([3, 3], "bool"), "int64"),
        ("u8_f32", R([4, 5], "uint8", lo=0, hi=256), "float32"),
        ("f32_u8", f32(4, 5, lo=0, hi=255), "uint8"),
        ("i32_u8", R([4, 5], "int32", lo=0, hi=256), "uint8"),
        ("f64_i64", f64(7, lo=-1e6, hi=1e6), "int64")):
    case("cast", name, {"X": xs},
         {"in_dtype": DTYPES[xs.dtype][1], "out_dtype": DTYPES[to][1]},
         lambda t, a, to=to: {"Out": t["X"].to(TD[to])}, dtypes={"Out": to}, upcast=False)


def ref_mul(t, a):
    x, y = t["X"], t["Y"]
    xn, yn = a.get("x_num_col_dims", 1), a.get("y_num_col_dims", 1)
    x2 = x.reshape(int(np.prod(x.shape[:xn])), -1)
    y2 = y.reshape(int(np.prod(y.shape[:yn])), -1)
    return {"Out": (x2 @ y2).reshape(list(x.shape[:xn]) + list(y.shape[yn:]))}


case("mul", "7x5_5x3", {"X": f32(7, 5), "Y": f32(5, 3)}, {}, ref_mul)
case("mul", "x_num_col_dims2", {"X": f32(2, 3, 4), "Y": f32(4, 6)}, {"x_num_col_dims": 2}, ref_mul)
case("mul", "flatten_4d", {"X": f32(2, 3, 4, 5), "Y": f32(60, 7)}, {}, ref_mul)
case("mul", "y_num_col_dims2", {"X": f32(6, 4), "Y": f32(2, 2, 3)}, {"y_num_col_dims": 2}, ref_mul)
case("mul", "both_col_dims", {"X": f32(2, 3, 2, 2), "Y": f32(2, 2, 3, 2)},
     {"x_num_col_dims": 2, "y_num_col_dims": 2}, ref_mul)
case("mul", "one_row", {"X": f32(1, 9), "Y": f32(9, 1)}, {}, ref_mul)
case("mul", "fc_784", {"X": f32(3, 784, lo=0, hi=1), "Y": f32(784, 16, lo=-0.08, hi=0.08)}, {}, ref_mul)
case("mul", "fp64", {"X": f64(7, 5), "Y": f64(5, 3)}, {}, ref_mul)


def ref_matmul(t, a, v2=False):
    x, y = t["X"], t["Y"]
    tx = a.get("trans_x" if v2 else "transpose_X", False)
    ty = a.get("trans_y" if v2 else "transpose_Y", False)
    if tx and x.dim() >= 2:
        x = x.transpose(-1, -2)
    if ty and y.dim() >= 2:
        y = y.transpose(-1, -2)
    return {"Out": torch.matmul(x, y) * (1.0 if v2 else a.get("alpha", 1.0))}


for name, xs, ys, at in (
        ("7x5_5x3", f32(7, 5), f32(5, 3), {}),
        ("transpose_X", f32(5, 7), f32(5, 3), {"transpose_X": True}),
        ("transpose_Y", f32(7, 5), f32(3, 5), {"transpose_Y": True}),
        ("transpose_both", f32(5, 7), f32(3, 5), {"transpose_X": True, "transpose_Y": True}),
        ("alpha", f32(4, 6), f32(6, 2), {"alpha": 0.5}),
        ("batched", f32(3, 4, 5), f32(3, 5, 2), {}),
        ("batched_trans", f32(3, 5, 4), f32(3, 2, 5), {"transpose_X": True, "transpose_Y": True}),
        ("batch_bcast_y2d", f32(3, 4, 5), f32(5, 2), {}),
        ("batch_bcast_x2d", f32(4, 5), f32(2, 5, 3), {}),
        ("4d", f32(2, 3, 4, 5), f32(2, 3, 5, 6), {"alpha": 2.0}),
        ("vec_x", f32(5), f32(5, 3), {}),
        ("vec_y", f32(7, 5), f32(5), {}),
        ("fp64", f64(3, 4, 5), f64(5, 2), {"transpose_Y": False, "alpha": 1.5})):
    case("matmul", name, {"X": xs, "Y": ys}, at, ref_matmul)
for name, xs, ys, at in (
        ("7x5_5x3", f32(7, 5), f32(5, 3), {}),
        ("trans_x_y", f32(5, 7), f32(3, 5), {"trans_x": True, "trans_y": True}),
        ("bcast_batch", f32(2, 1, 4, 5), f32(3, 5, 6), {}),
        ("bcast_batch_trans", f32(3, 1, 5, 4), f32(1, 2, 6, 5), {"trans_x": True, "trans_y": True}),
        ("vec_x_batched", f32(5), f32(2, 5, 3), {}),
        ("fp64", f64(2, 4, 5), f64(2, 5, 3), {})):
    case("matmul_v2", name, {"X": xs, "Y": ys}, at, lambda t, a: ref_matmul(t, a, v2=True))

for name, xs in (("7x5", f32(7, 5)), ("4d", f32(2, 3, 4, 5)), ("one", f32(1)),
                 ("big_4096", f32(4096, lo=0, hi=1)), ("fp64", f64(3, 7))):
    case("mean", name, {"X": xs}, {}, lambda t, a: {"Out": t["X"].mean().reshape(1)}, flat=("Out",))

for name, xs in (("one_input", [f32(7, 5)]), ("three_inputs", [f32(7, 5), f32(7, 5), f32(7, 5)]),
                 ("4d_two", [f32(2, 3, 4, 5), f32(2, 3, 4, 5)]), ("fp64", [f64(3, 4), f64(3, 4)]),
                 ("int64", [i64(4, 3), i64(4, 3)])):
    case("sum", name, {"X": xs}, {}, lambda t, a: {"Out": sum(t["X"][1:], t["X"][0])})

for name, xs, axis in (("last", f32(7, 5), -1), ("axis0", f32(7, 5), 0), ("3d_axis1", f32(2, 3, 4), 1),
                       ("4d_last", f32(2, 3, 4, 5), -1), ("large_logits", f32(4, 10, lo=-80, hi=80), -1),
                       ("one_class", f32(6, 1), -1), ("fp64", f64(3, 4, 5), 1)):
    case("softmax", name, {"X": xs}, {"axis": axis},
         lambda t, a: {"Out": torch.softmax(t["X"], a["axis"])})


def ref_arg_max(t, a):
    x = t["X"]
    dt = TD[{v[1]: k for k, v in DTYPES.items()}[a.get("dtype", 3)]]
    if a.get("flatten"):
        r = torch.argmax(x.reshape(-1)).reshape([1] * x.dim() if a.get("keepdims") else [1])
    else:
        r = torch.argmax(x, dim=a.get("axis", -1), keepdim=a.get("keepdims", False))
    return {"Out": r.to(dt)}


for name, xs, at in (("last", f32(7, 5), {"axis": -1}), ("axis0", f32(7, 5), {"axis": 0}),
                     ("3d_axis1_keepdims", f32(2, 3, 4), {"axis": 1, "keepdims": True}),
                     ("flatten", f32(3, 4), {"flatten": True}),
                     ("int32_out", f32(6, 10), {"axis": 1, "dtype": 2}),
                     ("fp64", f64(4, 9), {"axis": -1}),
                     ("int64_in", R([5, 6], "int64", fn=lambda r: r.permutation(30).reshape(5, 6)),
                      {"axis": 1})):
    case("arg_max", name, {"X": xs}, at, ref_arg_max, upcast=False,
         flat=("Out",) if at.get("flatten") else ())


def ref_top_k(t, a):
    v, i = torch.topk(t["X"], a.get("k", 1), dim=-1, largest=True, sorted=True)
    return {"Out": v, "Indices": i}


for name, xs, k in (("k1", f32(7, 5), 1), ("k3", f32(7, 5), 3), ("3d_k2", f32(2, 3, 6), 2),
                    ("k_eq_n", f32(4, 4), 4), ("fp64", f64(5, 8), 3),
                    ("int64", R([4, 7], "int64", fn=lambda r: r.permutation(28).reshape(4, 7)), 2)):
    case("top_k", name, {"X": xs}, {"k": k}, ref_top_k)


def acc_inputs(n, k, classes=10):
    """Out/Indices from a real top-k of random logits; half the labels hit."""
    def make(rng):
        logits = rng.standard_normal((n, classes)).astype(np.float32)
        idx = np.argsort(-logits, axis=1)[:, :k]
        vals = np.take_along_axis(logits, idx, 1)
        label = rng.integers(0, classes, (n, 1))
        hit = rng.random(n) < 0.5
        label[hit, 0] = idx[hit, rng.integers(0, k, hit.sum())]
        return vals, idx.astype(np.int64), label.astype(np.int64)
    cache = {}

    def part(j):
        def get(rng):
            if cache.get("rng") is not rng:  # the three slots share one draw per run
                cache["rng"], cache["data"] = rng, make(rng)
            return cache["data"][j]
        return get
    return {"Out": R([n, k], "float32", fn=part(0)), "Indices": R([n, k], "int64", fn=part(1)),
            "Label": R([n, 1], "int64", fn=part(2))}


def ref_accuracy(t, a):
    hit = (t["Indices"] == t["Label"]).any(dim=1)
    n = t["Indices"].shape[0]
    c = int(hit.sum())
    return {"Accuracy": torch.tensor([c / n], dtype=torch.float64),
            "Correct": torch.tensor([c], dtype=torch.int32), "Total": torch.tensor([n], dtype=torch.int32)}


case("accuracy", "k1_n16", acc_inputs(16, 1), {}, ref_accuracy)
case("accuracy", "k3_n7", acc_inputs(7, 3), {}, ref_accuracy)
case("accuracy", "k1_n1", acc_inputs(1, 1), {}, ref_accuracy)
case("accuracy", "accuracy_only", acc_inputs(9, 2), {},
     lambda t, a: {"Accuracy": ref_accuracy(t, a)["Accuracy"]})

for name, xs, shape in (("to_2d", f32(2, 3, 4), [6, 4]), ("zero_copy_dim", f32(2, 3, 4), [0, -1]),
                        ("flatten", f32(2, 3, 4), [-1]), ("zero_mid", f32(2, 3, 4), [4, 0, -1]),
                        ("add_ones", f32(7, 5), [1, 7, 1, 5]), ("fp64", f64(4, 6), [3, 8]),
                        ("int64", i64(4, 6), [2, -1, 3]), ("cnn_flatten", f32(2, 16, 7, 7), [-1, 784])):
    case("reshape2", name, {"X": xs}, {"shape": shape},
         lambda t, a: {"Out": t["X"].reshape(pd_reshape(list(t["X"].shape), a["shape"]))})

for name, xs, perm in (("2d", f32(7, 5), [1, 0]), ("3d", f32(2, 3, 4), [2, 0, 1]),
                       ("4d_nhwc", f32(2, 3, 4, 5), [0, 2, 3, 1]), ("identity", f32(3, 4), [0, 1]),
                       ("ones", f32(1, 5, 1), [2, 1, 0]), ("fp64", f64(3, 4, 5), [1, 2, 0]),
                       ("int64", i64(2, 3, 4), [2, 1, 0])):
    case("transpose2", name, {"X": xs}, {"axis": perm},
         lambda t, a: {"Out": t["X"].permute(a["axis"])})

for name, xs, axis in (("axis0", [f32(2, 5), f32(3, 5)], 0), ("axis1_three", [f32(4, 1), f32(4, 3), f32(4, 2)], 1),
                       ("neg_axis", [f32(2, 3, 4), f32(2, 3, 1)], -1), ("4d_channels", [f32(2, 3, 4, 4), f32(2, 5, 4, 4)], 1),
                       ("single", [f32(3, 4)], 0), ("fp64", [f64(2, 3), f64(2, 4)], 1),
                       ("int64", [i64(3, 2), i64(1, 2)], 0)):
    case("concat", name, {"X": xs}, {"axis": axis}, lambda t, a: {"Out": torch.cat(t["X"], a["axis"])})

# stack: X* (alike) -> Y with a new axis (negative: of Y's rank); unstack: X -> Y*, num = dims[axis]
for name, xs, axis in (("axis0", [f32(2, 3)] * 3, 0), ("axis1", [f32(2, 3), f32(2, 3)], 1),
                       ("last_neg", [f32(2, 3, 4)] * 2, -1), ("first_neg", [f32(4)] * 3, -2),
                       ("single", [f32(3, 2)], 1), ("fp64", [f64(2, 3)] * 2, 2), ("int64", [i64(3, 2)] * 2, 0)):
    case("stack", name, {"X": xs}, {"axis": axis}, lambda t, a: {"Y": torch.stack(t["X"], a["axis"])})
for name, xs, axis in (("axis0", f32(3, 4), 0), ("axis1_3d", f32(2, 3, 4), 1), ("neg", f32(2, 3, 4), -1),
                       ("one", f32(1, 5), 0), ("fp64", f64(4, 2), 1), ("int32", i32(2, 3), 0)):
    case("unstack", name, {"X": xs}, {"axis": axis, "num": xs.shape[axis]},
         lambda t, a: {"Y": list(torch.unbind(t["X"], a["axis"]))})

# tile (repeat_times; the shorter of it and X's dims gets leading 1s, as torch.tile) and
# expand_v2 (shape; -1 keeps X's dim, size-1 dims broadcast, leading dims added)
for name, xs, reps in (("2d", f32(2, 3), [2, 3]), ("fewer_repeats", f32(2, 3, 4), [2]),
                       ("more_repeats", f32(3), [2, 1, 2]), ("ones", f32(1, 4), [3, 1]),
                       ("fp64", f64(2, 1, 3), [1, 4, 2]), ("int32", i32(2, 3), [2, 2])):
    case("tile", name, {"X": xs}, {"repeat_times": reps}, lambda t, a: {"Out": torch.tile(t["X"], a["repeat_times"])})
for name, xs, shape in (("bcast_rows", f32(1, 4), [3, 4]), ("minus_one", f32(3, 1), [-1, 5]),
                        ("new_lead", f32(2, 3), [4, 2, 3]), ("mid", f32(2, 1, 3), [2, 5, 3]),
                        ("fp64", f64(1, 3), [2, -1]), ("int64", i64(3, 1), [3, 4])):
    case("expand_v2", name, {"X": xs}, {"shape": shape},
         lambda t, a: {"Out": t["X"].expand(*a["shape"]).contiguous()})


# cumsum: axis (-1), exclusive (the sum before each element), reverse, flatten ([numel]).
def ref_cumsum(t, a):
    x, ax = t["X"], a.get("axis", -1)
    if a.get("flatten"):
        x, ax = x.reshape(-1), 0
    if a.get("reverse"):
        x = x.flip(ax)
    y = torch.cumsum(x, ax)
    if a.get("exclusive"):
        y = y - x
    return {"Out": y.flip(ax) if a.get("reverse") else y}


for name, xs, at in (("default_last", f32(3, 4), {}), ("axis0", f32(3, 4), {"axis": 0}),
                     ("mid_3d", f32(2, 3, 4), {"axis": 1}), ("reverse", f32(3, 5), {"reverse": True}),
                     ("exclusive", f32(3, 5), {"exclusive": True, "axis": 0}),
                     ("excl_rev_fp64", f64(4, 3), {"exclusive": True, "reverse": True}),
                     ("int64", i64(3, 4), {"axis": 1})):
    case("cumsum", name, {"X": xs}, at, ref_cumsum)
case("cumsum", "int32_rev", {"X": i32(5, 2)}, {"axis": 0, "reverse": True}, ref_cumsum, dtypes={"Out": "int32"})
case("cumsum", "flatten", {"X": f32(3, 4)}, {"flatten": True}, ref_cumsum)
case("cumsum", "flatten_rev_excl_fp64", {"X": f64(2, 3, 2)}, {"flatten": True, "reverse": True, "exclusive": True},
     ref_cumsum)
case("cumsum", "big", {"X": f32(300, 400)}, {"axis": 0}, ref_cumsum, threads=True, tol=(1e-5, 1e-4),
     why="300 float32 terms per column; the reference adds them in float64")

# ---- index ops: gather (axis), gather_nd, scatter, one_hot / one_hot_v2 ----
def ids(n, bound, dtype="int64", unique=False, shape=None):
    """n indices in [0, bound) (unique: a permutation's first n), shaped `shape` (default [n])."""
    return R(shape or [n], dtype, fn=lambda r: (r.permutation(bound)[:n] if unique else r.integers(0, bound, n))
             .reshape(shape or [n]))


def ref_gather(t, a):
    return {"Out": torch.index_select(t["X"], a.get("axis", 0), t["Index"].reshape(-1).long())}


for name, ins, at in (("rows", {"X": f32(5, 3), "Index": ids(4, 5)}, {}),
                      ("dup_int32", {"X": f32(6, 4), "Index": ids(9, 3, "int32")}, {}),
                      ("index_n1", {"X": f32(5, 2), "Index": ids(3, 5, shape=[3, 1])}, {}),
                      ("axis1_3d", {"X": f32(2, 5, 3), "Index": ids(7, 5)}, {"axis": 1}),
                      ("axis_neg", {"X": f64(3, 4), "Index": ids(5, 4)}, {"axis": -1}),
                      ("int64_x", {"X": i64(6, 2), "Index": ids(4, 6)}, {}),
                      ("big", {"X": f32(400, 100), "Index": ids(500, 400)}, {})):
    case("gather", name, ins, at, ref_gather, threads=name == "big")


def ref_gather_nd(t, a):
    x, idx = t["X"], t["Index"].long()
    k = idx.shape[-1]
    return {"Out": x[tuple(idx[..., j] for j in range(k))] if k else x.expand(*idx.shape[:-1], *x.shape).clone()}


def nd_index(lead, dims, dtype="int64"):
    """Index [*lead, len(dims)], column j in [0, dims[j])."""
    return R(list(lead) + [len(dims)], dtype,
             fn=lambda r: np.stack([r.integers(0, d, lead) for d in dims], -1).reshape(list(lead) + [len(dims)]))


for name, ins in (("k1", {"X": f32(5, 3), "Index": nd_index([4], [5])}),
                  ("k2_3d", {"X": f32(3, 4, 2), "Index": nd_index([2, 3], [3, 4])}),
                  ("full_k_dup", {"X": f64(3, 4), "Index": nd_index([9], [3, 4])}),
                  ("k0", {"X": f32(2, 3), "Index": R([2, 0], "int64")}),
                  ("int32_idx", {"X": f32(4, 5, 2), "Index": nd_index([3], [4, 5], "int32")})):
    case("gather_nd", name, ins, {}, ref_gather_nd)


def ref_scatter(t, a):
    x, ii, u = t["X"], t["Ids"].reshape(-1).long(), t["Updates"]
    if not a.get("overwrite", True):
        return {"Out": x.index_fill(0, ii, 0).index_add(0, ii, u)}
    out = x.clone()
    for k in range(ii.numel()):  # in order: the later duplicate wins (Paddle's CPU kernel)
        out[ii[k]] = u[k]
    return {"Out": out}


for name, ins, at in (("overwrite", {"X": f32(6, 3), "Ids": ids(4, 6, unique=True), "Updates": f32(4, 3)}, {}),
                      ("add_dups", {"X": f32(5, 2, 3), "Ids": ids(7, 5), "Updates": f32(7, 2, 3)},
                       {"overwrite": False}),
                      ("ids_n1_fp64", {"X": f64(5, 4), "Ids": ids(3, 5, "int32", True, [3, 1]),
                                       "Updates": f64(3, 4)}, {}),
                      ("add_int64", {"X": i64(4, 3), "Ids": ids(5, 4), "Updates": i64(5, 3)}, {"overwrite": False})):
    case("scatter", name, ins, at, ref_scatter)
# duplicates with overwrite: the later one wins; its gradient is Paddle's (Updates@GRAD gathers
# every id, where autograd gives the overwritten ones 0), so the row stays out of the grad table
case("scatter", "overwrite_dups_last_wins", {"X": f32(4, 3), "Ids": R([5], "int64", fn=lambda r: np.array([1, 3, 1, 0, 3])),
                                             "Updates": f32(5, 3)}, {}, ref_scatter, upcast=False)


def ref_one_hot(t, a, v1=False):
    x = t["X"].long()
    if v1:
        x = x.squeeze(-1)
    ok = (x >= 0) & (x < a["depth"])
    oh = F.one_hot(torch.where(ok, x, torch.zeros_like(x)), a["depth"]) * ok.unsqueeze(-1)
    dt = {0: torch.float32, 1: torch.float64, 2: torch.int32, 3: torch.int64}[a.get("dtype", 0)]
    return {"Out": oh.to(dt)}


for name, ins, at in (("n1", {"X": ids(6, 5, shape=[6, 1])}, {"depth": 5}),
                      ("3d_int32", {"X": ids(6, 4, "int32", shape=[2, 3, 1])}, {"depth": 4}),
                      ("fp64", {"X": ids(4, 3, shape=[4, 1])}, {"depth": 3, "dtype": 1}),
                      ("out_of_range_allowed", {"X": R([5, 1], "int64", fn=lambda r: np.array([[0], [7], [-1], [2], [3]]))},
                       {"depth": 4, "allow_out_of_range": True})):
    case("one_hot", name, ins, at, lambda t, a: ref_one_hot(t, a, v1=True),
         dtypes={"Out": "float64"} if at.get("dtype") == 1 else None)
for name, ins, at in (("1d", {"X": ids(6, 5)}, {"depth": 5}),
                      ("2d_int32", {"X": ids(6, 4, "int32", shape=[2, 3])}, {"depth": 6}),
                      ("int64_out", {"X": ids(4, 3)}, {"depth": 3, "dtype": 3}),
                      ("out_of_range_allowed", {"X": R([4], "int64", fn=lambda r: np.array([0, 9, 2, -3]))},
                       {"depth": 3, "allow_out_of_range": True})):
    case("one_hot_v2", name, ins, at, ref_one_hot)


# ---- padding: pad (before / after per dim, constant), pad2d (fluid 1.x: [top, bottom, left, right],
# constant / reflect / edge, NCHW / NHWC), pad3d ([left, right, top, bottom, front, back], constant /
# reflect / replicate / circular, NCDHW / NDHWC)
def ref_pad(t, a):
    p = a.get("paddings", [])
    flat = [v for i in reversed(range(len(p) // 2)) for v in (p[2 * i], p[2 * i + 1])]
    return {"Out": F.pad(t["X"], flat, value=a.get("pad_value", 0.0))}


def ref_pad_nd(t, a, three):
    x, p = t["X"], a["paddings"]
    last = a.get("data_format", "NCDHW" if three else "NCHW") in ("NHWC", "NDHWC")
    if last:
        x = x.movedim(-1, 1)
    mode = {"edge": "replicate"}.get(a.get("mode", "constant"), a.get("mode", "constant"))
    flat = list(p) if three else [p[2], p[3], p[0], p[1]]
    kw = {"value": a.get("value" if three else "pad_value", 0.0)} if mode == "constant" else {}
    y = F.pad(x, flat, mode=mode, **kw)
    return {"Out": y.movedim(1, -1) if last else y}


for name, ins, at in (("2d", {"X": f32(3, 4)}, {"paddings": [1, 2, 0, 3]}),
                      ("3d_value", {"X": f32(2, 3, 2)}, {"paddings": [0, 1, 2, 0, 1, 1], "pad_value": 1.5}),
                      ("1d_fp64", {"X": f64(5)}, {"paddings": [3, 2], "pad_value": -2.0}),
                      ("int64", {"X": i64(2, 3)}, {"paddings": [1, 1, 1, 1], "pad_value": 7.0}),
                      ("none", {"X": f32(2, 2)}, {"paddings": [0, 0, 0, 0]})):
    case("pad", name, ins, at, ref_pad)
for name, ins, at in (("constant", {"X": f32(2, 3, 4, 5)}, {"paddings": [1, 2, 0, 1], "pad_value": 0.5}),
                      ("reflect", {"X": f32(2, 2, 4, 5)}, {"paddings": [2, 1, 3, 4], "mode": "reflect"}),
                      ("edge_nhwc", {"X": f32(2, 4, 3, 3)}, {"paddings": [1, 3, 2, 0], "mode": "edge",
                                                             "data_format": "NHWC"}),
                      ("reflect_fp64_nhwc", {"X": f64(1, 3, 4, 2)}, {"paddings": [2, 2, 1, 3], "mode": "reflect",
                                                                     "data_format": "NHWC"})):
    case("pad2d", name, ins, at, lambda t, a: ref_pad_nd(t, a, False))
for name, ins, at in (("constant", {"X": f32(1, 2, 3, 4, 2)}, {"paddings": [1, 0, 2, 1, 0, 2], "value": -1.0}),
                      ("reflect", {"X": f32(2, 1, 3, 4, 5)}, {"paddings": [2, 1, 1, 3, 2, 0], "mode": "reflect"}),
                      ("replicate_ndhwc", {"X": f32(1, 2, 3, 2, 3)}, {"paddings": [1, 2, 0, 3, 2, 1],
                                                                      "mode": "replicate", "data_format": "NDHWC"}),
                      ("circular_fp64", {"X": f64(1, 2, 3, 4, 3)}, {"paddings": [2, 1, 3, 0, 1, 2],
                                                                    "mode": "circular"})):
    case("pad3d", name, ins, at, lambda t, a: ref_pad_nd(t, a, True))
case("pad2d", "big_reflect", {"X": f32(8, 16, 32, 32)}, {"paddings": [2, 2, 3, 3], "mode": "reflect"},
     lambda t, a: ref_pad_nd(t, a, False), threads=True)


# assign (any dtype), shape (Input's dims as int32), increment (a one-element X + step)
for name, xs in (("f32", f32(3, 4)), ("fp64", f64(2, 3, 2)), ("int64", i64(5)), ("bool", R([2, 3], "bool"))):
    case("assign", name, {"X": xs}, {}, lambda t, a: {"Out": t["X"].clone()})
for name, xs in (("2d", f32(3, 4)), ("4d_int64", i64(2, 1, 3, 5)), ("1d_fp64", f64(7))):
    case("shape", name, {"Input": xs}, {}, lambda t, a: {"Out": torch.tensor(list(t["Input"].shape), dtype=torch.int32)})
for name, xs, at in (("default", f32(1), {}), ("step_fp64", f64(1), {"step": 2.5}),
                     ("int64_neg", i64(1), {"step": -3.0}), ("int32", i32(1, 1), {"step": 1.0})):
    case("increment", name, {"X": xs}, at,
         lambda t, a: {"Out": t["X"] + (a.get("step", 1.0) if t["X"].is_floating_point() else int(a.get("step", 1)))})


def ref_split(t, a):
    x, ax = t["X"], a.get("axis", 0)
    if a.get("num", 0) > 0:
        return {"Out": list(torch.split(x, x.shape[ax] // a["num"], ax))}
    s = list(a["sections"])
    if -1 in s:
        s[s.index(-1)] = x.shape[ax] - (sum(s) + 1)
    return {"Out": list(torch.split(x, s, ax))}


for name, xs, at in (("num3_axis1", f32(2, 6, 3), {"num": 3, "axis": 1}),
                     ("sections_infer_neg_axis", f32(3, 2, 6), {"sections": [1, -1, 2], "axis": -1}),
                     ("axis0_fp64", f64(4, 3), {"num": 2}), ("int64", i64(2, 5), {"sections": [2, 3], "axis": 1})):
    case("split", name, {"X": xs}, at, ref_split)


def ref_slice(t, a):
    x = t["Input"]
    idx = [slice(None)] * x.dim()
    for ax, s, e in zip(a["axes"], a["starts"], a["ends"]):
        idx[ax] = slice(s, e)  # python slices clamp as Paddle does
    out = x[tuple(idx)]
    dec = sorted((d % x.dim() for d in a.get("decrease_axis", [])), reverse=True)
    for d in dec:
        out = out.squeeze(d)
    return {"Out": out}


for name, xs, at in (("neg_and_clamped", f32(3, 4, 5), {"axes": [0, 2], "starts": [-2, 1], "ends": [100, -1]}),
                     ("decrease_axis", f32(3, 4, 5), {"axes": [1], "starts": [2], "ends": [3], "decrease_axis": [1]}),
                     ("start_below", f64(4, 6), {"axes": [-1], "starts": [-100], "ends": [4]}),
                     ("int64_inner", i64(2, 3, 8), {"axes": [2], "starts": [3], "ends": [7]})):
    case("slice", name, {"Input": xs}, at, ref_slice)

for name, xs, at in (("mid", f32(2, 3, 4, 5), {"start_axis": 1, "stop_axis": 2}), ("default", f32(2, 3, 4), {}),
                     ("all_fp64", f64(2, 3, 4), {"start_axis": 0, "stop_axis": -1})):
    case("flatten_contiguous_range", name, {"X": xs}, at,
         lambda t, a: {"Out": t["X"].flatten(a.get("start_axis", 1), a.get("stop_axis", -1))})

for name, xs, ax in (("axis2", f32(2, 3, 4, 5), 2), ("axis0", f32(3, 4), 0), ("axis1_fp64", f64(3, 2, 2), 1)):
    case("flatten2", name, {"X": xs}, {"axis": ax},
         lambda t, a: {"Out": t["X"].reshape(int(np.prod(t["X"].shape[:a["axis"]])), -1)})


def ref_squeeze(t, a):
    x, axes = t["X"], a.get("axes", [])
    keep = [d for i, d in enumerate(x.shape)
            if not (d == 1 and (not axes or i in [ax % x.dim() for ax in axes]))]
    return {"Out": x.reshape(keep or [1])}


for name, xs, axes in (("all", f32(1, 3, 1, 4), []), ("neg_axis", f32(1, 3, 1, 4), [-2]),
                       ("not_one_kept", f32(1, 3, 4), [0, 1]), ("fp64", f64(2, 1), [1])):
    case("squeeze2", name, {"X": xs}, {"axes": axes}, ref_squeeze)


def ref_unsqueeze(t, a):
    x = t["X"]
    for ax in a["axes"]:
        x = x.unsqueeze(ax if ax >= 0 else ax + x.dim() + 1)
    return {"Out": x}


for name, xs, axes in (("three", f32(3, 4), [0, 2, -1]), ("repeat", f32(3, 4), [1, 1]), ("fp64", f64(5), [-1])):
    case("unsqueeze2", name, {"X": xs}, {"axes": axes}, ref_unsqueeze)


def ref_lookup(t, a):
    w, ids = t["W"], t["Ids"].long()
    pad = a.get("padding_idx", -1)
    out = w[ids]
    if pad != -1:
        out = torch.where((ids == pad).unsqueeze(-1), torch.zeros_like(out), out)
    return {"Out": out}


for name, w, ids, at in (("padding", f32(10, 4), i64(3, 5, lo=0, hi=10), {"padding_idx": 3}),
                         ("no_padding_1d", f32(6, 3), i64(7, lo=0, hi=6), {}),
                         ("fp64_int32_ids", f64(5, 2), i32(2, 2, 2, lo=0, hi=5), {"padding_idx": 0})):
    case("lookup_table_v2", name, {"W": w, "Ids": ids}, at, ref_lookup)
case("lookup_table", "ids_n1", {"W": f32(8, 3), "Ids": i64(5, 1, lo=0, hi=8)}, {"padding_idx": 2},
     lambda t, a: {"Out": ref_lookup({"W": t["W"], "Ids": t["Ids"][:, 0]}, a)["Out"]})


def ref_layer_norm(t, a):
    x, b = t["X"], a.get("begin_norm_axis", 1)
    rows = x.reshape(int(np.prod(x.shape[:b])), -1)
    mean, var = rows.mean(1), rows.var(1, unbiased=False)
    y = (rows - mean[:, None]) / torch.sqrt(var[:, None] + a.get("epsilon", 1e-5))
    if "Scale" in t:
        y = y * t["Scale"].reshape(1, -1)
    if "Bias" in t:
        y = y + t["Bias"].reshape(1, -1)
    return {"Y": y.reshape(x.shape), "Mean": mean, "Variance": var}


for name, ins, at in (("axis1", {"X": f32(4, 6), "Scale": f32(6), "Bias": f32(6)}, {}),
                      ("axis2", {"X": f32(2, 3, 4), "Scale": f32(4), "Bias": f32(4)}, {"begin_norm_axis": 2}),
                      ("axis1_3d", {"X": f32(2, 3, 4), "Scale": f32(12), "Bias": f32(12)}, {"epsilon": 1e-3}),
                      ("plain", {"X": f32(5, 7)}, {}), ("fp64_scale_only", {"X": f64(3, 8), "Scale": f64(8)}, {})):
    case("layer_norm", name, ins, at, ref_layer_norm)
case("layer_norm", "big", {"X": f32(256, 768), "Scale": f32(768), "Bias": f32(768)}, {}, ref_layer_norm,
     threads=True)


def ref_fill(t, a):
    dt = {v[1]: k for k, v in DTYPES.items()}[a.get("dtype", 0)]
    v = float(a["str_value"]) if a.get("str_value") else a.get("value", 0.0)
    return {"Out": torch.full(a["shape"], v, dtype=torch.float64).to(TD[dt])}


for name, at, dt in (("fp32", {"shape": [2, 3], "value": 1.5}, "float32"),
                     ("fp64", {"shape": [4], "dtype": 1, "value": -2.25}, "float64"),
                     ("int32", {"shape": [3, 1], "dtype": 2, "value": 7}, "int32"),
                     ("int64", {"shape": [1], "dtype": 3, "value": -3}, "int64"),
                     ("bool", {"shape": [2, 2], "dtype": 5, "value": 1}, "bool"),
                     ("uint8", {"shape": [5], "dtype": 4, "value": 200}, "uint8"),
                     ("str_value", {"shape": [3], "value": 9.0, "str_value": "0.1"}, "float32"),
                     ("4d_zero", {"shape": [2, 3, 1, 2]}, "float32")):
    case("fill_constant", name, {}, at, ref_fill, dtypes={"Out": dt}, upcast=False)


def ref_assign_value(t, a):
    dt = {v[1]: k for k, v in DTYPES.items()}[a.get("dtype", 0)]
    vals = a.get("fp32_values") or a.get("int32_values") or a.get("int64_values")
    return {"Out": torch.tensor(vals, dtype=torch.float64).to(TD[dt]).reshape(a["shape"])}


for name, at, dt in (("fp32", {"shape": [2, 3], "fp32_values": [0.5, -1.25, 3.0, 1e-3, 7.0, -0.0]}, "float32"),
                     ("int32", {"shape": [4], "dtype": 2, "int32_values": [1, -2, 3, 2147483647]}, "int32"),
                     ("int64", {"shape": [1, 3], "dtype": 3, "int64_values": [5, -(2 ** 40), 0]}, "int64")):
    case("assign_value", name, {}, at, ref_assign_value, dtypes={"Out": dt}, upcast=False)

for name, xs, at in (("ones_like", f32(7, 5), {"value": 1.0}), ("zeros_like_4d", f32(2, 3, 4, 5), {}),
                     ("fp64", f64(3, 2), {"value": -0.5}), ("to_int64", f32(4), {"value": 3.0, "dtype": 3})):
    case("fill_any_like", name, {"X": xs}, at,
         lambda t, a: {"Out": torch.full(t["X"].shape, a.get("value", 0.0), dtype=torch.float64).to(
             TD[{v[1]: k for k, v in DTYPES.items()}[a["dtype"]]] if a.get("dtype", -1) >= 0 else t["X"].dtype)},
         dtypes={"Out": "int64"} if at.get("dtype") == 3 else None, upcast=False)

CONV = [
    ("basic", f32(2, 3, 9, 9), f32(4, 3, 3, 3), {}),
    ("stride2_pad1", f32(2, 3, 9, 9), f32(4, 3, 3, 3), {"strides": [2, 2], "paddings": [1, 1]}),
    ("pad4_asym", f32(2, 3, 8, 7), f32(4, 3, 3, 3), {"paddings": [1, 0, 2, 1]}),
    ("dilation2", f32(1, 3, 11, 11), f32(2, 3, 3, 3), {"dilations": [2, 2], "paddings": [2, 2]}),
    ("dilation_rect", f32(1, 2, 10, 9), f32(3, 2, 3, 2), {"dilations": [2, 3], "strides": [1, 2]}),
    ("groups3", f32(2, 6, 8, 8), f32(6, 2, 3, 3), {"groups": 3, "paddings": [1, 1]}),
    ("depthwise_mult2", f32(2, 4, 7, 7), f32(8, 1, 3, 3), {"groups": 4, "paddings": [1, 1]}),
    ("same_stride2_odd", f32(2, 3, 9, 9), f32(4, 3, 4, 4), {"strides": [2, 2], "padding_algorithm": "SAME"}),
    ("same_stride1", f32(1, 2, 6, 5), f32(3, 2, 3, 2), {"padding_algorithm": "SAME"}),
    ("same_resets_dilation", f32(1, 2, 7, 7), f32(2, 2, 3, 3),
     {"padding_algorithm": "SAME", "dilations": [2, 2]}),
    ("valid_ignores_pads", f32(2, 3, 9, 9), f32(4, 3, 3, 3), {"padding_algorithm": "VALID", "paddings": [3, 3]}),
    ("rect_kernel_stride", f32(1, 3, 10, 7), f32(4, 3, 3, 2), {"strides": [2, 1], "paddings": [1, 0]}),
    ("1x1", f32(2, 5, 4, 4), f32(3, 5, 1, 1), {}),
    ("single_pixel_out", f32(1, 2, 3, 3), f32(2, 2, 3, 3), {}),
    ("mnist_5x5_pad2", f32(2, 1, 28, 28), f32(8, 1, 5, 5), {"paddings": [2, 2]}),
    ("nhwc", f32(2, 9, 9, 3), f32(4, 3, 3, 3), {"data_format": "NHWC", "paddings": [1, 1], "strides": [2, 2]}),
    ("nhwc_mnist_5x5_pad2", f32(2, 28, 28, 1), f32(8, 1, 5, 5), {"data_format": "NHWC", "paddings": [2, 2]}),
    ("nhwc_groups_dilation", f32(1, 9, 9, 4), f32(6, 2, 3, 3),
     {"data_format": "NHWC", "groups": 2, "dilations": [2, 1], "paddings": [1, 0, 2, 1]}),
    ("nhwc_same_stride2", f32(2, 9, 8, 3), f32(5, 3, 4, 3),
     {"data_format": "NHWC", "strides": [2, 2], "padding_algorithm": "SAME"}),
    ("nhwc_fp64_refused", f64(1, 5, 5, 2), f64(3, 2, 3, 3), {"data_format": "NHWC"}),
    ("fp64_stride2_pad1", f64(2, 3, 9, 9), f64(4, 3, 3, 3), {"strides": [2, 2], "paddings": [1, 1]}),
    ("fp64_groups_dilation", f64(1, 4, 9, 9), f64(6, 2, 3, 3), {"groups": 2, "dilations": [2, 1], "paddings": [1, 0, 2, 1]}),
    ("fp64_same", f64(1, 2, 8, 7), f64(3, 2, 3, 4), {"strides": [2, 2], "padding_algorithm": "SAME"}),
]
NHWC_GAP = "NHWC layout not supported yet: ops/nn.c rejects it with a clear error"
NHWC_CUDA_GAP = "data_format NHWC runs on CPU places only (the CUDA kernels are NCHW)"
NHWC_FP64_GAP = "data_format NHWC runs float32 only (oneDNN): float64 is refused with a clear error"


def nhwc_xfail(name, at, key="data_format", fp64_ok=False):
    """conv2d / pool2d take NHWC on CPU places for float32 (oneDNN), batch_norm
    for float32 and float64 (its loops take either layout); the CUDA kernels
    and the float64 conv / pool refuse it with a clean error (strict xfail rows)."""
    if at.get(key) != "NHWC":
        return None
    if "fp64" in name and not fp64_ok:
        return NHWC_FP64_GAP
    return NHWC_CUDA_GAP if os.environ.get("PE_TEST_PLACES", "cpu").strip().startswith("cuda") else None


for name, xs, ws, at in CONV:
    case("conv2d", name, {"Input": xs, "Filter": ws}, at, ref_conv2d, xfail=nhwc_xfail(name, at))
case("conv2d", "bias", {"Input": f32(2, 3, 6, 6), "Filter": f32(4, 3, 3, 3), "Bias": f32(4)},
     {"paddings": [1, 1]}, ref_conv2d)
case("conv2d", "nhwc_bias", {"Input": f32(2, 6, 6, 3), "Filter": f32(4, 3, 3, 3), "Bias": f32(4)},
     {"paddings": [1, 1], "data_format": "NHWC"}, ref_conv2d, xfail=nhwc_xfail("nhwc_bias", {"data_format": "NHWC"}))
for name, xs, ws, at in (("groups_eq_c", f32(2, 4, 7, 7), f32(4, 1, 3, 3), {"groups": 4, "paddings": [1, 1]}),
                         ("mult2_stride2", f32(2, 3, 8, 8), f32(6, 1, 3, 3), {"groups": 3, "strides": [2, 2]}),
                         ("fp64_same", f64(1, 4, 7, 6), f64(4, 1, 3, 3), {"groups": 4, "padding_algorithm": "SAME"}),
                         ("nhwc", f32(2, 7, 7, 4), f32(4, 1, 3, 3), {"groups": 4, "paddings": [1, 1], "data_format": "NHWC"})):
    case("depthwise_conv2d", name, {"Input": xs, "Filter": ws}, at, ref_conv2d, xfail=nhwc_xfail(name, at))


def ref_conv2d_transpose(t, a):
    """Paddle's conv2d_transpose: torch's with no padding (and the output_padding Paddle's sizes give),
    then Paddle's top / left paddings cropped (4-value and SAME paddings need not be symmetric)."""
    x, w = t["Input"], t["Filter"]
    s = a.get("strides", [1, 1])
    p, dil = pd_pads(a.get("paddings", [0, 0]), a.get("padding_algorithm", "EXPLICIT"),
                     x.shape[2:], w.shape[2:], s, a.get("dilations", [1, 1]))
    base = [(x.shape[2 + i] - 1) * s[i] - p[2 * i] - p[2 * i + 1] + dil[i] * (w.shape[2 + i] - 1) + 1
            for i in range(2)]
    out = list(a["output_size"]) if a.get("output_size") else \
        [base[i] + (a.get("output_padding") or [0, 0])[i] for i in range(2)]
    y = F.conv_transpose2d(x, w, stride=s, dilation=dil, groups=a.get("groups", 1),
                           output_padding=[out[i] - base[i] for i in range(2)])
    return {"Output": y[:, :, p[0]:p[0] + out[0], p[2]:p[2] + out[1]]}


CONV_T = [
    ("basic", f32(2, 3, 5, 5), f32(3, 4, 3, 3), {}),
    ("stride2_pad1_outpad1", f32(2, 3, 5, 4), f32(3, 2, 3, 3),
     {"strides": [2, 2], "paddings": [1, 1], "output_padding": [1, 1]}),
    ("output_size", f32(1, 2, 4, 4), f32(2, 3, 4, 4), {"strides": [2, 2], "paddings": [1, 1], "output_size": [9, 8]}),
    ("pad4_asym_dilation", f32(2, 2, 5, 6), f32(2, 3, 3, 2), {"paddings": [1, 0, 2, 1], "dilations": [2, 1]}),
    ("groups2", f32(2, 4, 5, 5), f32(4, 3, 3, 3), {"groups": 2, "strides": [2, 1], "paddings": [1, 1]}),
    ("same_stride2", f32(1, 3, 4, 5), f32(3, 2, 3, 3), {"strides": [2, 2], "padding_algorithm": "SAME"}),
    ("dcgan_k4s2p1", f32(4, 16, 8, 8), f32(16, 8, 4, 4, lo=-0.1, hi=0.1), {"strides": [2, 2], "paddings": [1, 1]},
     True),
    ("fp64_stride2_groups", f64(2, 4, 4, 3), f64(4, 2, 3, 3),
     {"strides": [2, 2], "paddings": [1, 0], "groups": 2, "output_padding": [1, 0]}),
    ("fp64_valid", f64(1, 2, 3, 3), f64(2, 2, 2, 3), {"padding_algorithm": "VALID", "paddings": [1, 1]}),
]
for name, xs, ws, at, *threads in CONV_T:
    case("conv2d_transpose", name, {"Input": xs, "Filter": ws}, at, ref_conv2d_transpose, threads=bool(threads))


def pd_interp_taps(n_in, n_out, scale, a, bilinear):
    """Paddle's interpolate_v2 source indices / weights of one dim (see ops/cpu/interp.c)."""
    ac, mode = a.get("align_corners", True), a.get("align_mode", 1)
    r = 0.0 if n_out <= 1 else (n_in - 1) / (n_out - 1) if ac else (1.0 / scale if scale else n_in / n_out)
    i0, i1, w1 = [], [], []
    for k in range(n_out):
        if not bilinear:
            i = int(r * k + 0.5) if ac else int(np.floor(r * k))
            i0.append(min(i, n_in - 1)); i1.append(i0[-1]); w1.append(0.0)
            continue
        src = max(r * (k + 0.5) - 0.5, 0.0) if (mode == 0 and not ac) else r * k
        lo = min(int(src), n_in - 1)
        i0.append(lo); i1.append(min(lo + 1, n_in - 1)); w1.append(src - lo)
    return i0, i1, torch.tensor(w1, dtype=torch.float64)


def ref_interp_paddle(t, a, bilinear):
    """Paddle's formulas by indexing (differentiable): where torch has no counterpart (align_corners
    nearest, align_mode 1 bilinear)."""
    x = t["X"]
    sc = a.get("scale") or []
    sh, sw = (sc[0], sc[-1]) if sc else (None, None)
    oh = int(x.shape[2] * sh) if sc else a["out_h"]
    ow = int(x.shape[3] * sw) if sc else a["out_w"]
    y0, y1, wy = pd_interp_taps(x.shape[2], oh, sh, a, bilinear)
    x0, x1, wx = pd_interp_taps(x.shape[3], ow, sw, a, bilinear)
    wy, wx = wy.to(x.dtype)[:, None], wx.to(x.dtype)[None, :]
    r0, r1 = x[:, :, y0, :], x[:, :, y1, :]
    top = r0[:, :, :, x0] * (1 - wx) + r0[:, :, :, x1] * wx
    bot = r1[:, :, :, x0] * (1 - wx) + r1[:, :, :, x1] * wx
    return {"Out": top * (1 - wy) + bot * wy}


def ref_interp_torch(t, a, mode):
    sc = a.get("scale")
    kw = {"scale_factor": (sc[0], sc[-1])} if sc else {"size": (a["out_h"], a["out_w"])}
    if mode == "bilinear":
        kw["align_corners"] = a.get("align_corners", True)
    return {"Out": F.interpolate(t["X"], mode=mode, **kw)}


INTERP = [  # (op, name, X, attrs, torch mode or None: Paddle's own formula)
    ("nearest_interp_v2", "up2x", f32(2, 3, 4, 5), {"out_h": 8, "out_w": 10, "align_corners": False}, "nearest"),
    ("nearest_interp_v2", "down_odd", f32(2, 2, 7, 9), {"out_h": 3, "out_w": 4, "align_corners": False}, "nearest"),
    ("nearest_interp_v2", "scale_2_3", f32(1, 2, 3, 4), {"scale": [2.0, 3.0], "align_corners": False}, "nearest"),
    ("nearest_interp_v2", "align_corners", f32(2, 2, 4, 5), {"out_h": 7, "out_w": 3, "align_corners": True}, None),
    ("nearest_interp_v2", "fp64_up", f64(1, 3, 3, 5), {"out_h": 7, "out_w": 9, "align_corners": False}, "nearest"),
    ("bilinear_interp_v2", "half_pixel_up", f32(2, 3, 4, 5), {"out_h": 9, "out_w": 7, "align_corners": False,
                                                             "align_mode": 0}, "bilinear"),
    ("bilinear_interp_v2", "half_pixel_down", f32(2, 2, 9, 8), {"out_h": 4, "out_w": 3, "align_corners": False,
                                                               "align_mode": 0}, "bilinear"),
    ("bilinear_interp_v2", "align_corners", f32(2, 3, 4, 5), {"out_h": 7, "out_w": 11, "align_corners": True},
     "bilinear"),
    ("bilinear_interp_v2", "scale2", f32(1, 2, 5, 3), {"scale": [2.0], "align_corners": False, "align_mode": 0},
     "bilinear"),
    ("bilinear_interp_v2", "align_mode1", f32(2, 2, 5, 4), {"out_h": 8, "out_w": 7, "align_corners": False,
                                                           "align_mode": 1}, None),
    ("bilinear_interp_v2", "fp64_half_pixel", f64(1, 2, 5, 6), {"out_h": 7, "out_w": 4, "align_corners": False,
                                                               "align_mode": 0}, "bilinear"),
    ("bilinear_interp_v2", "big", f32(8, 16, 32, 32), {"out_h": 64, "out_w": 64, "align_corners": False,
                                                      "align_mode": 0}, "bilinear"),
]
for op, name, xs, at, mode in INTERP:
    case(op, name, {"X": xs}, at,
         (lambda t, a, m=mode: ref_interp_torch(t, a, m)) if mode else
         (lambda t, a, b=op.startswith("bilinear"): ref_interp_paddle(t, a, b)), threads=name == "big")


def ref_group_norm(t, a):
    x, g = t["X"], a.get("groups", 1)
    rows = x.reshape(x.shape[0], g, -1)
    y = F.group_norm(x, g, t.get("Scale"), t.get("Bias"), a.get("epsilon", 1e-5))
    return {"Y": y, "Mean": rows.mean(-1), "Variance": rows.var(-1, unbiased=False)}


def ref_instance_norm(t, a):
    x, eps = t["X"], a.get("epsilon", 1e-5)
    rows = x.reshape(x.shape[0] * x.shape[1], -1)
    y = F.instance_norm(x, weight=t.get("Scale"), bias=t.get("Bias"), eps=eps)
    return {"Y": y, "SavedMean": rows.mean(-1), "SavedVariance": 1 / torch.sqrt(rows.var(-1, unbiased=False) + eps)}


for name, ins, at in (("g2", {"X": f32(2, 4, 3, 5), "Scale": f32(4), "Bias": f32(4)}, {"groups": 2}),
                      ("g1_eps", {"X": f32(3, 6, 4), "Scale": f32(6), "Bias": f32(6)}, {"groups": 1, "epsilon": 1e-3}),
                      ("g_eq_c_no_affine", {"X": f32(2, 3, 4, 4)}, {"groups": 3}),
                      ("rank2", {"X": f32(5, 8), "Scale": f32(8)}, {"groups": 2}),
                      ("fp64", {"X": f64(2, 6, 3, 3), "Scale": f64(6), "Bias": f64(6)}, {"groups": 2}),
                      ("big", {"X": f32(8, 32, 16, 16), "Scale": f32(32), "Bias": f32(32)}, {"groups": 8})):
    case("group_norm", name, ins, at, ref_group_norm, threads=name == "big")
for name, ins, at in (("affine", {"X": f32(2, 3, 4, 5), "Scale": f32(3), "Bias": f32(3)}, {}),
                      ("plain_eps", {"X": f32(3, 2, 7)}, {"epsilon": 1e-3}),
                      ("fp64", {"X": f64(2, 4, 3, 3), "Scale": f64(4), "Bias": f64(4)}, {}),
                      ("big", {"X": f32(8, 32, 16, 16), "Scale": f32(32), "Bias": f32(32)}, {})):
    case("instance_norm", name, ins, at, ref_instance_norm, threads=name == "big")

POOL = [
    ("max_k2s2", f32(2, 3, 8, 8), {"ksize": [2, 2], "strides": [2, 2]}),
    ("avg_k2s2", f32(2, 3, 8, 8), {"pooling_type": "avg", "ksize": [2, 2], "strides": [2, 2]}),
    ("max_k3s1_pad1", f32(2, 3, 7, 7), {"ksize": [3, 3], "paddings": [1, 1]}),
    ("avg_pad1_exclusive", f32(2, 3, 7, 7), {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}),
    ("avg_pad1_inclusive", f32(2, 3, 7, 7),
     {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "exclusive": False}),
    ("max_pad4", f32(1, 2, 7, 6), {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 0, 0, 1]}),
    ("avg_pad4", f32(1, 2, 7, 6), {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [0, 1, 1, 0]}),
    ("global_max", f32(2, 3, 5, 7), {"ksize": [1, 1], "global_pooling": True}),
    ("global_avg", f32(2, 3, 5, 7), {"pooling_type": "avg", "ksize": [1, 1], "global_pooling": True}),
    ("max_ceil", f32(2, 3, 7, 7), {"ksize": [2, 2], "strides": [2, 2], "ceil_mode": True}),
    ("avg_ceil_exclusive", f32(2, 3, 8, 8), {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "ceil_mode": True}),
    ("avg_ceil_inclusive", f32(2, 3, 8, 8),
     {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "ceil_mode": True, "exclusive": False}),
    ("adaptive_avg", f32(2, 3, 7, 7), {"pooling_type": "avg", "ksize": [3, 3], "adaptive": True}),
    ("adaptive_max_rect", f32(2, 3, 8, 9), {"ksize": [2, 4], "adaptive": True}),
    ("same_max", f32(1, 2, 7, 7), {"ksize": [3, 3], "strides": [2, 2], "padding_algorithm": "SAME"}),
    ("same_avg", f32(1, 2, 6, 7), {"pooling_type": "avg", "ksize": [2, 2], "strides": [2, 2], "padding_algorithm": "SAME"}),
    ("valid_max", f32(1, 2, 7, 7), {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "padding_algorithm": "VALID"}),
    ("rect_kernel", f32(2, 2, 9, 8), {"ksize": [3, 2], "strides": [2, 1]}),
    ("nhwc_max", f32(2, 8, 8, 3), {"ksize": [2, 2], "strides": [2, 2], "data_format": "NHWC"}),
    ("nhwc_max_k3s2_pad1", f32(2, 7, 7, 5), {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "data_format": "NHWC"}),
    ("nhwc_avg_pad1_exclusive", f32(2, 7, 7, 3),
     {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "data_format": "NHWC"}),
    ("nhwc_global_avg", f32(2, 5, 7, 3), {"pooling_type": "avg", "ksize": [1, 1], "global_pooling": True,
                                          "data_format": "NHWC"}),
    ("nhwc_fp64_refused", f64(2, 4, 4, 3), {"ksize": [2, 2], "strides": [2, 2], "data_format": "NHWC"}),
    ("cnn_28_to_14", f32(2, 8, 28, 28), {"ksize": [2, 2], "strides": [2, 2]}),
    ("fp64_max_pad", f64(2, 3, 7, 7), {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}),
    ("fp64_avg_ceil_exclusive", f64(2, 3, 8, 8), {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2],
                                                  "paddings": [1, 0, 0, 1], "ceil_mode": True}),
    ("fp64_avg_inclusive", f64(1, 2, 7, 7), {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2],
                                             "paddings": [1, 1], "exclusive": False}),
    ("fp64_adaptive_avg", f64(2, 3, 7, 5), {"pooling_type": "avg", "ksize": [3, 2], "adaptive": True}),
    ("fp64_global_max", f64(2, 3, 4, 6), {"ksize": [2, 2], "global_pooling": True}),
]
for name, xs, at in POOL:
    case("pool2d", name, {"X": xs}, at, ref_pool2d, xfail=nhwc_xfail(name, at))


# ---- collectives (ops/collective.c): `pe run` is one place, a world of one rank, where each is
# Out = X (every rank's reduction / broadcast / gather of one rank); across places and
# processes: tests/unit/test_collective_ops.c and tests/python/test_static_collective.py

def ref_identity(t, a):
    return {"Out": t["X"]}


for _op in ("c_allreduce_sum", "c_allreduce_max", "c_allreduce_min", "c_allreduce_prod", "c_identity"):
    case(_op, "one_rank", {"X": f32(3, 4)}, {}, ref_identity)
case("c_allreduce_sum", "one_rank_fp64", {"X": f64(5)}, {}, ref_identity)
case("c_allreduce_max", "one_rank_int64", {"X": i64(2, 3)}, {}, ref_identity)
case("c_broadcast", "one_rank", {"X": f32(3, 4)}, {"root": 0}, ref_identity)
case("c_reduce_sum", "one_rank", {"X": i32(6)}, {"root_id": 0}, ref_identity)
for _op in ("c_reduce_max", "c_reduce_min", "c_reduce_prod"):
    case(_op, "one_rank", {"X": f32(2, 3)}, {"root_id": 0}, ref_identity)
case("c_allgather", "one_rank", {"X": f32(3, 2)}, {"nranks": 1}, ref_identity)
case("c_scatter", "one_rank", {"X": f64(4, 2)}, {"nranks": 1, "root": 0}, ref_identity)
case("c_sync_calc_stream", "two", {"X": [f32(3), f32(2, 2)]}, {}, lambda t, a: {"Out": list(t["X"])})
case("c_sync_comm_stream", "one", {"X": [f32(4)]}, {"ring_id": 0}, lambda t, a: {"Out": list(t["X"])})


def bn_inputs(x, c):
    dt = x.dtype  # Paddle's batch_norm keeps Scale/Bias/Mean/Variance in X's dtype
    return {"X": x, "Scale": R([c], dt, lo=0.5, hi=1.5), "Bias": R([c], dt), "Mean": R([c], dt),
            "Variance": R([c], dt, lo=0.5, hi=2.0)}


for name, x, c, at in (
        ("infer_nchw", f32(4, 3, 5, 5), 3, {"is_test": True}),
        ("infer_2d", f32(8, 5), 5, {"is_test": True, "epsilon": 1e-3}),
        ("infer_nhwc", f32(2, 4, 4, 3), 3, {"is_test": True, "data_layout": "NHWC"}),
        ("train_nchw", f32(4, 3, 5, 5, lo=-2, hi=3), 3, {}),
        ("train_2d", f32(16, 6), 6, {"momentum": 0.8, "epsilon": 1e-3}),
        ("train_nhwc", f32(2, 4, 4, 3), 3, {"data_layout": "NHWC"}),
        ("use_global_stats", f32(4, 3, 5, 5), 3, {"use_global_stats": True}),
        ("fp64_infer", f64(4, 3, 5, 5), 3, {"is_test": True}),
        ("fp64_train", f64(6, 4, 3, 3), 4, {"momentum": 0.7}),
        ("fp64_train_2d", f64(16, 6), 6, {}),
        ("fp64_train_nhwc", f64(3, 4, 5, 3), 3, {"momentum": 0.7, "data_layout": "NHWC"}),
        ("train_nhwc_c40", f32(2, 3, 5, 40), 40, {"data_layout": "NHWC"})):
    case("batch_norm", name, bn_inputs(x, c), at, ref_batch_norm,
         xfail=nhwc_xfail(name, at, "data_layout", fp64_ok=True))


# reduce_sum / reduce_mean: `dim` (negative allowed), keep_dim, reduce_all;
# everything reduced gives [1] (Paddle 2.x before 0-d tensors).
def ref_reduce(t, a, fn):
    x = t["X"]
    dims = a.get("dim", [0])
    if a.get("reduce_all") or not dims:
        dims = list(range(x.dim()))
    dims = sorted(d % x.dim() for d in dims)
    out = fn(x, dim=dims, keepdim=a.get("keep_dim", False))
    return {"Out": out.reshape(1) if out.dim() == 0 else out}


for op, fn in (("reduce_sum", torch.sum), ("reduce_mean", torch.mean)):
    for name, xs, at in (("dim0_default", f32(7, 5), {}), ("last", f32(2, 3, 4), {"dim": [-1]}),
                         ("two_dims_keep", f32(2, 3, 4, 5), {"dim": [1, 3], "keep_dim": True}),
                         ("hw_of_nchw", f32(2, 3, 4, 5), {"dim": [2, 3]}),
                         ("reduce_all", f32(3, 4, 5), {"reduce_all": True}),
                         ("all_dims_keep", f32(3, 4), {"dim": [0, 1], "keep_dim": True}),
                         ("one_sized", f32(1, 5, 1), {"dim": [0, 2]}),
                         ("fp64", f64(4, 6, 3), {"dim": [1]})):
        case(op, name, {"X": xs}, at, lambda t, a, fn=fn: ref_reduce(t, a, fn),
             flat=("Out",) if at.get("reduce_all") else ())
case("reduce_sum", "int64", {"X": i64(3, 4, 5)}, {"dim": [0, 2]}, lambda t, a: ref_reduce(t, a, torch.sum))


# reduce_max / min / prod (float and int) and reduce_any / all (bool), the same attrs;
# torch.prod / any / all take one dim at a time (torch 1.13). prod's inputs stay
# near |1| (nonzero: the gradient divides by X); int prod wraps around like torch's
# int64 product cast back.
def t_each_dim(fn):
    def f(x, dim, keepdim):
        for d in sorted(dim, reverse=True):
            x = fn(x, d, keepdim=keepdim)
        return x
    return f


REDUCE_MORE = {"reduce_max": torch.amax, "reduce_min": torch.amin, "reduce_prod": t_each_dim(torch.prod)}
for op, fn in REDUCE_MORE.items():
    kw = {"lo": 0.6, "hi": 1.6, "nonzero": True} if op == "reduce_prod" else {}
    for name, xs, at in (("dim0_default", f32(7, 5, **kw), {}), ("last", f32(2, 3, 4, **kw), {"dim": [-1]}),
                         ("two_dims_keep", f32(2, 3, 4, 5, **kw), {"dim": [1, 3], "keep_dim": True}),
                         ("hw_of_nchw", f32(2, 3, 4, 5, **kw), {"dim": [2, 3]}),
                         ("reduce_all", f32(3, 4, 5, **kw), {"reduce_all": True}),
                         ("one_sized", f32(1, 5, 1, **kw), {"dim": [0, 2]}),
                         ("fp64", f64(4, 6, 3, **kw), {"dim": [1]})):
        case(op, name, {"X": xs}, at, lambda t, a, fn=fn: ref_reduce(t, a, fn),
             flat=("Out",) if at.get("reduce_all") else ())
    case(op, "int32", {"X": i32(3, 4, 5, lo=-3, hi=4)}, {"dim": [0, 2]}, lambda t, a, fn=fn: ref_reduce(t, a, fn),
         dtypes={"Out": "int32"})
    case(op, "int64_all", {"X": i64(4, 6, lo=-3, hi=4)}, {"reduce_all": True}, lambda t, a, fn=fn: ref_reduce(t, a, fn),
         flat=("Out",), dtypes={"Out": "int64"})
case("reduce_max", "nan_propagates", {"X": R([2, 4], fn=lambda r: np.array([[1, np.nan, 3, 2], [4, 5, 6, 7]]))},
     {"dim": [1]}, lambda t, a: ref_reduce(t, a, torch.amax), upcast=False)
case("reduce_min", "big", {"X": f32(300, 400)}, {"dim": [0]}, lambda t, a: ref_reduce(t, a, torch.amin), threads=True)
MOSTLY_TRUE = R([4, 6], "bool", fn=lambda r: r.random((4, 6)) < 0.9)
for op, fn in (("reduce_any", t_each_dim(torch.any)), ("reduce_all", t_each_dim(torch.all))):
    for name, xs, at in (("dim0_default", R([7, 5], "bool"), {}), ("last_keep", MOSTLY_TRUE, {"dim": [-1], "keep_dim": True}),
                         ("two_dims", R([2, 3, 4, 5], "bool"), {"dim": [1, 3]}),
                         ("reduce_all", MOSTLY_TRUE, {"reduce_all": True})):
        case(op, name, {"X": xs}, at, lambda t, a, fn=fn: ref_reduce(t, a, fn),
             flat=("Out",) if at.get("reduce_all") else ())

for name, xs, at in (("default_alpha", f32(7, 5), {}), ("alpha_0.2_4d", f32(2, 3, 4, 5), {"alpha": 0.2}),
                     ("fp64", f64(6, 4), {"alpha": 0.01})):
    case("leaky_relu", name, {"X": xs}, at, lambda t, a: {"Out": F.leaky_relu(t["X"], a.get("alpha", 0.02))})
for name, xs, at in (("erf", f32(7, 5, lo=-4, hi=4), {}), ("tanh_approx", f32(2, 3, 4, lo=-4, hi=4), {"approximate": True}),
                     ("fp64", f64(6, 4, lo=-5, hi=5), {})):
    case("gelu", name, {"X": xs}, at,
         lambda t, a: {"Out": F.gelu(t["X"], approximate="tanh" if a.get("approximate") else "none")})
for name, xs, axis in (("last", f32(7, 5), -1), ("axis1_3d", f32(2, 3, 4), 1), ("large_logits", f32(4, 10, lo=-80, hi=80), -1),
                       ("fp64", f64(3, 6), 0)):
    case("log_softmax", name, {"X": xs}, {"axis": axis}, lambda t, a: {"Out": F.log_softmax(t["X"], a["axis"])})

# dropout at inference is deterministic: downgrade_in_infer scales by 1 - p,
# upscale_in_train passes X through. (Training masks: test_dropout_train.)
for name, xs, at in (("infer_downgrade", f32(7, 5), {"dropout_prob": 0.3, "is_test": True}),
                     ("infer_upscale", f32(2, 3, 4), {"dropout_prob": 0.3, "is_test": True,
                                                      "dropout_implementation": "upscale_in_train"}),
                     ("infer_fp64", f64(5, 5), {"dropout_prob": 0.5, "is_test": True})):
    case("dropout", name, {"X": xs}, at,
         lambda t, a: {"Out": t["X"] * (1.0 if a.get("dropout_implementation") == "upscale_in_train"
                                        else 1.0 - a["dropout_prob"])})


# ---- math unary ops and the later activations (ops/cpu/math_unary.c), Paddle's semantics:
# round is half away from zero (std::round), relu6 / hard_sigmoid / clip are clamps,
# selu's scale and alpha are attrs. The gradient rows come from these rows.
SELU_SCALE, SELU_ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
HALVES = R([2, 6], fn=lambda r: np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], [-3.25, -0.75, 0.0, 0.25, 0.7, 4.5]]))
MATH_UNARY = {
    "exp": (lambda x, a: torch.exp(x), dict(lo=-3, hi=3)),
    "log": (lambda x, a: torch.log(x), dict(lo=0.2, hi=5)),
    "sqrt": (lambda x, a: torch.sqrt(x), dict(lo=0.2, hi=5)),
    "rsqrt": (lambda x, a: torch.rsqrt(x), dict(lo=0.2, hi=5)),
    "square": (lambda x, a: x * x, {}),
    "abs": (lambda x, a: torch.abs(x), dict(nonzero=True)),
    "sign": (lambda x, a: torch.sign(x), {}),
    "floor": (lambda x, a: torch.floor(x), dict(lo=-5, hi=5)),
    "ceil": (lambda x, a: torch.ceil(x), dict(lo=-5, hi=5)),
    "round": (lambda x, a: torch.sign(x) * torch.floor(torch.abs(x) + 0.5), dict(lo=-5, hi=5)),
    "pow": (lambda x, a: torch.pow(x, a.get("factor", 1.0)), dict(lo=0.2, hi=4)),
    "clip": (lambda x, a: torch.clamp(x, a["min"], a["max"]), {}),
    "relu6": (lambda x, a: torch.clamp(x, 0, a.get("threshold", 6.0)), dict(lo=-3, hi=9)),
    "elu": (lambda x, a: F.elu(x, a.get("alpha", 1.0)), dict(lo=-4, hi=4)),
    "softplus": (lambda x, a: F.softplus(x, a.get("beta", 1.0), a.get("threshold", 20.0)), dict(lo=-6, hi=6)),
    "swish": (lambda x, a: x * torch.sigmoid(a.get("beta", 1.0) * x), dict(lo=-6, hi=6)),
    "hard_sigmoid": (lambda x, a: torch.clamp(a.get("slope", 0.2) * x + a.get("offset", 0.5), 0, 1),
                     dict(lo=-5, hi=5)),
    "selu": (lambda x, a: a.get("scale", SELU_SCALE) * torch.where(x > 0, x, a.get("alpha", SELU_ALPHA) *
                                                                    torch.expm1(x)), dict(lo=-4, hi=4)),
}
MATH_UNARY_ATTRS = {  # (name, attrs) rows beyond the defaults; the fp64 row takes the last
    "pow": [("factor_2.5", {"factor": 2.5}), ("factor_3_neg", {"factor": 3.0}), ("factor_0.5", {"factor": 0.5})],
    "clip": [("0.5", {"min": -0.5, "max": 0.5}), ("asym", {"min": -1.0, "max": 0.25})],
    "relu6": [("threshold_4", {"threshold": 4.0})],
    "elu": [("alpha_0.5", {"alpha": 0.5})],
    "softplus": [("beta2_threshold3", {"beta": 2.0, "threshold": 3.0})],
    "swish": [("beta_1.5", {"beta": 1.5})],
    "hard_sigmoid": [("torch_slope", {"slope": 1.0 / 6, "offset": 0.5})],
    "selu": [("attrs", {"scale": 1.5, "alpha": 0.7})],
}
for op, (fn, rng_kw) in MATH_UNARY.items():
    variants = [("defaults", {})] if op != "clip" else []
    variants += MATH_UNARY_ATTRS.get(op, [])
    for vname, at in variants:
        kw = dict(rng_kw, lo=-3, hi=3) if vname == "factor_3_neg" else rng_kw
        case(op, vname + "_7x5", {"X": f32(7, 5, **kw)}, at, lambda t, a, fn=fn: {"Out": fn(t["X"], a)})
    vname, at = variants[-1]
    case(op, "4d", {"X": f32(2, 3, 4, 5, **rng_kw)}, at, lambda t, a, fn=fn: {"Out": fn(t["X"], a)})
    case(op, "fp64", {"X": f64(6, 4, **rng_kw)}, at, lambda t, a, fn=fn: {"Out": fn(t["X"], a)})
for op in ("floor", "ceil", "round", "sign"):
    case(op, "halves", {"X": HALVES}, {}, lambda t, a, fn=MATH_UNARY[op][0]: {"Out": fn(t["X"], a)})

def labels(shape, classes, dtype="int64", ignore=None):
    def make(rng):
        lab = rng.integers(0, classes, shape)
        if ignore is not None:
            lab.reshape(-1)[::3] = ignore  # every third row ignored
        return lab
    return R(shape, dtype, fn=make)


def soft_labels(n, d):
    return R([n, d], "float32", fn=lambda r: (lambda e: e / e.sum(1, keepdims=True))(r.random((n, d)) + 0.1))


def ref_swce(t, a):
    x, lab = t["Logits"], t["Label"]
    axis = a.get("axis", -1) % x.dim()
    logp = F.log_softmax(x, axis)
    if a.get("soft_label"):
        loss = -(lab * logp).sum(axis, keepdim=True)
    else:
        li = lab.long()
        if li.dim() < x.dim():
            li = li.unsqueeze(axis)
        ign = li == a.get("ignore_index", -100)
        loss = -torch.gather(logp, axis, torch.where(ign, torch.zeros_like(li), li))
        loss = torch.where(ign, torch.zeros_like(loss), loss)
    return {"Softmax": torch.softmax(x, axis), "Loss": loss}


for name, ins, at in (
        ("hard", {"Logits": f32(8, 10), "Label": labels([8, 1], 10)}, {}),
        ("hard_int32", {"Logits": f32(5, 4), "Label": labels([5, 1], 4, "int32")}, {}),
        ("soft", {"Logits": f32(6, 7), "Label": soft_labels(6, 7)}, {"soft_label": True}),
        ("ignore_index", {"Logits": f32(9, 5), "Label": labels([9, 1], 5, ignore=-1)}, {"ignore_index": -1}),
        ("axis1_3d", {"Logits": f32(2, 5, 3), "Label": labels([2, 1, 3], 5)}, {"axis": 1}),
        ("large_logits", {"Logits": f32(4, 10, lo=-60, hi=60), "Label": labels([4, 1], 10)}, {}),
        ("fp64", {"Logits": f64(6, 8), "Label": labels([6, 1], 8)}, {})):
    case("softmax_with_cross_entropy", name, ins, at, ref_swce)


def ref_ce(t, a):
    x, lab = t["X"], t["Label"]
    if a.get("soft_label"):
        return {"Y": -(lab * torch.log(x)).sum(-1, keepdim=True)}
    li = lab.long().reshape(x.shape[:-1] + (1,))
    ign = li == a.get("ignore_index", -100)
    y = -torch.log(torch.gather(x, -1, torch.where(ign, torch.zeros_like(li), li)))
    return {"Y": torch.where(ign, torch.zeros_like(y), y)}


def probs(*shape):
    return R(shape, "float32", fn=lambda r: (lambda e: e / e.sum(-1, keepdims=True))(r.random(shape) + 0.05))


for name, ins, at in (("hard", {"X": probs(8, 10), "Label": labels([8, 1], 10)}, {}),
                      ("soft", {"X": probs(5, 6), "Label": soft_labels(5, 6)}, {"soft_label": True}),
                      ("ignore_index", {"X": probs(9, 4), "Label": labels([9, 1], 4, ignore=-100)}, {}),
                      ("3d", {"X": probs(2, 3, 5), "Label": labels([2, 3, 1], 5)}, {})):
    case("cross_entropy", name, ins, at, ref_ce)

for name, xs, ys in (("7x5", f32(7, 5), f32(7, 5)), ("col", f32(8, 1), f32(8, 1)), ("fp64", f64(3, 4, 2), f64(3, 4, 2))):
    case("square_error_cost", name, {"X": xs, "Y": ys}, {}, lambda t, a: {"Out": (t["X"] - t["Y"]) ** 2})



# cos_sim (Paddle's: no epsilon; Y of one row broadcast; XNorm / YNorm outputs)
def ref_cos_sim(t, a):
    x, y = t["X"].flatten(1), t["Y"].flatten(1)
    xn, yn = x.norm(dim=1, keepdim=True), y.norm(dim=1, keepdim=True)
    return {"Out": (x * y).sum(1, keepdim=True) / (xn * yn), "XNorm": xn, "YNorm": yn}


for name, ins in (("rows", {"X": f32(6, 5), "Y": f32(6, 5)}), ("y_one_row", {"X": f32(7, 4), "Y": f32(1, 4)}),
                  ("3d_fp64", {"X": f64(3, 2, 4), "Y": f64(3, 2, 4)}), ("d2_y_one_row", {"X": f32(4, 2), "Y": f32(1, 2)}),
                  ("big", {"X": f32(300, 128), "Y": f32(300, 128)})):
    case("cos_sim", name, ins, {}, ref_cos_sim, threads=name == "big")
# one column: Out is +-1 whatever X and Y (its gradient is 0 up to rounding: kept out of the grad table)
case("cos_sim", "one_col", {"X": f32(4, 1), "Y": f32(1, 1)}, {}, ref_cos_sim, upcast=False)


# sigmoid_cross_entropy_with_logits: labels are probabilities; (int)label == ignore_index
# elements give 0 (and no gradient); normalize divides by the count of the others
def prob_labels(shape, ignore=None, dtype="float32"):
    def make(rng):
        lab = rng.random(shape)
        if ignore is not None:
            lab.reshape(-1)[::4] = ignore
        return lab
    return R(shape, dtype, fn=make)


def ref_sigce(t, a):
    x, lab = t["X"], t["Label"]
    keep = lab.long() != a.get("ignore_index", -100)
    out = torch.where(keep, F.binary_cross_entropy_with_logits(x, torch.where(keep, lab, torch.zeros_like(lab)),
                                                                reduction="none"), torch.zeros_like(x))
    if a.get("normalize"):
        out = out / max(float(keep.sum()), 1e-5)
    return {"Out": out}


for name, ins, at in (("plain", {"X": f32(6, 5, lo=-8, hi=8), "Label": prob_labels([6, 5])}, {}),
                      ("ignore", {"X": f32(4, 6), "Label": prob_labels([4, 6], -100)}, {}),
                      ("ignore_normalize", {"X": f32(5, 3), "Label": prob_labels([5, 3], -1)},
                       {"ignore_index": -1, "normalize": True}),
                      ("normalize_fp64_3d", {"X": f64(2, 3, 4), "Label": prob_labels([2, 3, 4], dtype="float64")},
                       {"normalize": True}),
                      ("large_logits", {"X": f32(3, 4, lo=-90, hi=90), "Label": prob_labels([3, 4])}, {})):
    case("sigmoid_cross_entropy_with_logits", name, ins, at, ref_sigce)


def ref_label_smooth(t, a):
    x, eps = t["X"], a.get("epsilon", 0.0)
    p = t["PriorDist"].reshape(-1) if "PriorDist" in t else 1.0 / x.shape[-1]
    return {"Out": (1 - eps) * x + eps * p}


for name, ins, at in (("uniform", {"X": f32(5, 6, lo=0, hi=1)}, {"epsilon": 0.1}),
                      ("prior", {"X": f32(4, 3, lo=0, hi=1), "PriorDist": f32(1, 3, lo=0, hi=1)}, {"epsilon": 0.2}),
                      ("3d_fp64", {"X": f64(2, 3, 5)}, {"epsilon": 0.3}),
                      ("eps0", {"X": f32(3, 4)}, {})):
    case("label_smooth", name, ins, at, ref_label_smooth)

# Optimizer ops: one step of torch.optim from the same state. Paddle's
# formulas (ops/cpu/optimizer.c) equal torch's SGD (dampening 0) and Adam
# (amsgrad off) when torch's state holds the same velocity / moments / step.

def _param(t):
    return torch.nn.Parameter(t["Param"].clone()), t["Grad"].clone()


def ref_sgd(t, a):
    p, g = _param(t)
    p.grad = g
    torch.optim.SGD([p], lr=float(t["LearningRate"])).step()
    return {"ParamOut": p.detach()}


def ref_momentum(t, a):
    p, g = _param(t)
    p.grad = g
    mu, nesterov = a.get("mu", 0.9), a.get("use_nesterov", False)
    opt = torch.optim.SGD([p], lr=float(t["LearningRate"]), momentum=mu, nesterov=nesterov)
    opt.state[p]["momentum_buffer"] = t["Velocity"].clone()
    opt.step()
    return {"ParamOut": p.detach(), "VelocityOut": opt.state[p]["momentum_buffer"]}


def ref_adam(t, a):
    p, g = _param(t)
    p.grad = g
    b1, b2, eps = a.get("beta1", 0.9), a.get("beta2", 0.999), a.get("epsilon", 1e-8)
    b1pow = float(t["Beta1Pow"])
    step = int(round(np.log(b1pow) / np.log(b1)))  # Beta1Pow = beta1^step for this step
    opt = torch.optim.Adam([p], lr=float(t["LearningRate"]), betas=(b1, b2), eps=eps)
    opt.state[p].update({"step": torch.tensor(float(step - 1)), "exp_avg": t["Moment1"].clone(),
                         "exp_avg_sq": t["Moment2"].clone()})
    opt.step()
    st = opt.state[p]
    return {"ParamOut": p.detach(), "Moment1Out": st["exp_avg"], "Moment2Out": st["exp_avg_sq"],
            "Beta1PowOut": t["Beta1Pow"] * b1, "Beta2PowOut": t["Beta2Pow"] * b2}


def ref_clip_by_global_norm(t, a):
    # Paddle: x * M / max(norm, M). (torch's clip_grad_norm_ divides by norm + 1e-6.)
    xs, m = t["X"], a["max_global_norm"]
    norm = torch.sqrt(sum((x * x).sum() for x in xs))
    return {"Out": [x * m / torch.maximum(norm, torch.tensor(m, dtype=norm.dtype)) for x in xs]}


def lr(v):
    return R([1], "float32", fn=lambda r: [v])


for name, dt, shape in (("7x5", "float32", (7, 5)), ("4d", "float32", (2, 3, 4, 5)), ("fp64", "float64", (6,))):
    case("sgd", name, {"Param": R(shape, dt), "Grad": R(shape, dt), "LearningRate": lr(0.1)}, {}, ref_sgd)
for name, dt, shape, at in (("plain", "float32", (7, 5), {"mu": 0.9}),
                            ("nesterov", "float32", (3, 4, 5), {"mu": 0.8, "use_nesterov": True}),
                            ("fp64", "float64", (10,), {"mu": 0.5})):
    case("momentum", name, {"Param": R(shape, dt), "Grad": R(shape, dt), "Velocity": R(shape, dt),
                            "LearningRate": lr(0.05)}, at, ref_momentum)


def adam_inputs(shape, dt, step, b1=0.9, b2=0.999):
    return {"Param": R(shape, dt), "Grad": R(shape, dt), "LearningRate": lr(0.01),
            "Moment1": R(shape, dt, lo=-0.1, hi=0.1), "Moment2": R(shape, dt, lo=0.0, hi=0.05),
            "Beta1Pow": R([1], dt, fn=lambda r: [b1 ** step]),   # Paddle: the param's dtype
            "Beta2Pow": R([1], dt, fn=lambda r: [b2 ** step])}


case("adam", "step1", adam_inputs((7, 5), "float32", 1), {}, ref_adam)
case("adam", "step10_betas", adam_inputs((2, 3, 4), "float32", 10, 0.8, 0.99),
     {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6}, ref_adam)
case("adam", "fp64_step3", adam_inputs((9,), "float64", 3), {}, ref_adam)



# adagrad / rmsprop / adamax / adamw: torch.optim from the same state where the
# formulas agree (adagrad, adamw); rmsprop and adamax put epsilon elsewhere than
# torch (Paddle: sqrt(ms + eps), max(b2 u + eps, |g|); torch: sqrt(ms) + eps,
# max(b2 u, |g| + eps)), so they are checked against Paddle's formulas in numpy
# (float64) and lamb (no torch op) likewise.

def ref_adagrad(t, a):
    p, g = _param(t)
    p.grad = g
    opt = torch.optim.Adagrad([p], lr=float(t["LearningRate"]), eps=a.get("epsilon", 1e-6))
    opt.state[p]["sum"] = t["Moment"].clone()
    opt.step()
    return {"ParamOut": p.detach(), "MomentOut": opt.state[p]["sum"]}


def _np(t):
    return {k: (v.double().numpy() if hasattr(v, "numpy") else v) for k, v in t.items()}


def ref_rmsprop(t, a):
    n, dt = _np(t), t["Param"].dtype
    rho, eps, mu = a.get("decay", 0.9), a.get("epsilon", 1e-10), a.get("momentum", 0.0)
    g, lrv = n["Grad"], float(n["LearningRate"][0])
    ms = rho * n["MeanSquare"] + (1 - rho) * g * g
    out = {"MeanSquareOut": ms}
    if a.get("centered", False):
        mg = rho * n["MeanGrad"] + (1 - rho) * g
        mom = mu * n["Moment"] + lrv * g / np.sqrt(ms - mg * mg + eps)
        out["MeanGradOut"] = mg
    else:
        mom = mu * n["Moment"] + lrv * g / np.sqrt(ms + eps)
    out.update(MomentOut=mom, ParamOut=n["Param"] - mom)
    return {k: torch.tensor(v, dtype=dt) for k, v in out.items()}


def ref_adamax(t, a):
    n, dt = _np(t), t["Param"].dtype
    b1, b2, eps = a.get("beta1", 0.9), a.get("beta2", 0.999), a.get("epsilon", 1e-8)
    g, b1p = n["Grad"], float(n["Beta1Pow"][0])
    m = b1 * n["Moment"] + (1 - b1) * g
    u = np.maximum(b2 * n["InfNorm"] + eps, np.abs(g))
    p = n["Param"] - float(n["LearningRate"][0]) / (1 - b1p) * m / u
    return {"ParamOut": torch.tensor(p, dtype=dt), "MomentOut": torch.tensor(m, dtype=dt),
            "InfNormOut": torch.tensor(u, dtype=dt), "Beta1PowOut": t["Beta1Pow"] * b1}


def ref_adamw(t, a):
    p, g = _param(t)
    p.grad = g
    b1, b2, eps = a.get("beta1", 0.9), a.get("beta2", 0.999), a.get("epsilon", 1e-8)
    lrv = float(t["LearningRate"]) * a.get("lr_ratio", 1.0)
    wd = a.get("coeff", 0.01) if a.get("with_decay", False) else 0.0
    step = int(round(np.log(float(t["Beta1Pow"])) / np.log(b1)))
    opt = torch.optim.AdamW([p], lr=lrv, betas=(b1, b2), eps=eps, weight_decay=wd)
    opt.state[p].update({"step": torch.tensor(float(step - 1)), "exp_avg": t["Moment1"].clone(),
                         "exp_avg_sq": t["Moment2"].clone()})
    opt.step()
    st = opt.state[p]
    return {"ParamOut": p.detach(), "Moment1Out": st["exp_avg"], "Moment2Out": st["exp_avg_sq"],
            "Beta1PowOut": t["Beta1Pow"] * b1, "Beta2PowOut": t["Beta2Pow"] * b2}


def ref_lamb(t, a):
    n, dt = _np(t), t["Param"].dtype
    b1, b2, eps, wd = a.get("beta1", 0.9), a.get("beta2", 0.999), a.get("epsilon", 1e-6), a["weight_decay"]
    g, p = n["Grad"], n["Param"]
    m1 = b1 * n["Moment1"] + (1 - b1) * g
    m2 = b2 * n["Moment2"] + (1 - b2) * g * g
    r = (m1 / (1 - float(n["Beta1Pow"][0]))) / (np.sqrt(m2 / (1 - float(n["Beta2Pow"][0]))) + eps) + wd * p
    pn, rn = np.linalg.norm(p), np.linalg.norm(r)
    ratio = pn / rn if pn > 0 and rn > 0 else 1.0
    p = p - float(n["LearningRate"][0]) * ratio * r
    return {"ParamOut": torch.tensor(p, dtype=dt), "Moment1Out": torch.tensor(m1, dtype=dt),
            "Moment2Out": torch.tensor(m2, dtype=dt),
            "Beta1PowOut": t["Beta1Pow"] * b1, "Beta2PowOut": t["Beta2Pow"] * b2}


def adagrad_inputs(shape, dt):
    return {"Param": R(shape, dt), "Grad": R(shape, dt), "Moment": R(shape, dt, lo=0.0, hi=0.5),
            "LearningRate": lr(0.1)}


def rmsprop_inputs(shape, dt):
    return {"Param": R(shape, dt), "MeanSquare": R(shape, dt, lo=0.5, hi=1.0), "Grad": R(shape, dt),
            "Moment": R(shape, dt, lo=-0.1, hi=0.1), "LearningRate": lr(0.01),
            "MeanGrad": R(shape, dt, lo=-0.1, hi=0.1)}


def adamax_inputs(shape, dt, step, b1=0.9):
    return {"Param": R(shape, dt), "Grad": R(shape, dt), "LearningRate": lr(0.01),
            "Moment": R(shape, dt, lo=-0.1, hi=0.1), "InfNorm": R(shape, dt, lo=0.0, hi=0.5),
            "Beta1Pow": R([1], dt, fn=lambda r: [b1 ** step])}


case("adagrad", "7x5", adagrad_inputs((7, 5), "float32"), {}, ref_adagrad)
case("adagrad", "fp64_eps", adagrad_inputs((2, 3, 4), "float64"), {"epsilon": 1e-3}, ref_adagrad)
case("rmsprop", "plain", rmsprop_inputs((7, 5), "float32"), {}, ref_rmsprop)
case("rmsprop", "momentum", rmsprop_inputs((3, 4), "float32"), {"momentum": 0.9, "decay": 0.95, "epsilon": 1e-6},
     ref_rmsprop)
case("rmsprop", "centered_fp64", rmsprop_inputs((10,), "float64"), {"momentum": 0.5, "centered": True}, ref_rmsprop)
case("adamax", "step1", adamax_inputs((7, 5), "float32", 1), {}, ref_adamax)
case("adamax", "fp64_step4_betas", adamax_inputs((9,), "float64", 4, 0.8), {"beta1": 0.8, "beta2": 0.99},
     ref_adamax)
case("adamw", "decay", adam_inputs((7, 5), "float32", 1), {"coeff": 0.1, "with_decay": True}, ref_adamw)
case("adamw", "no_decay_ratio", adam_inputs((2, 3, 4), "float32", 3), {"lr_ratio": 0.5}, ref_adamw)
case("adamw", "fp64", adam_inputs((9,), "float64", 2), {"coeff": 0.02, "with_decay": True}, ref_adamw)
case("lamb", "7x5", adam_inputs((7, 5), "float32", 1), {"weight_decay": 0.01}, ref_lamb)
case("lamb", "fp64_step5", adam_inputs((3, 4), "float64", 5), {"weight_decay": 0.1, "epsilon": 1e-8}, ref_lamb)
case("lamb", "zero_param", adam_inputs((4,), "float32", 1) | {"Param": R((4,), "float32", fn=lambda r: [0.0] * 4)},
     {"weight_decay": 0.0}, ref_lamb)

# Fused ops emitted by the fusion passes (passes/fuse_*.c): each row checks the
# fused kernel against the same torch computation as the ops it replaces.
ACTS = {"": lambda v: v, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}


def ref_fc(t, a):
    x, w, n = t["Input"], t["W"], a.get("in_num_col_dims", 1)
    out = x.reshape(int(np.prod(x.shape[:n])), -1) @ w
    if "Bias" in t:
        out = out + t["Bias"].reshape(-1)
    return {"Out": ACTS[a.get("activation_type", "")](out).reshape(list(x.shape[:n]) + [w.shape[1]])}


case("fc", "relu", {"Input": f32(7, 5), "W": f32(5, 3), "Bias": f32(3)}, {"activation_type": "relu"}, ref_fc)
case("fc", "no_act_3d", {"Input": f32(2, 3, 4), "W": f32(4, 6), "Bias": f32(6)}, {"in_num_col_dims": 2}, ref_fc)
case("fc", "tanh_fp64_nobias", {"Input": f64(4, 9), "W": f64(9, 2)}, {"activation_type": "tanh"}, ref_fc)


def ref_fused_ew_act(t, a):
    s = t["X"] + t["Y"]
    return {"Out": ACTS[a["functor_list"][0]](s)}


case("fused_elemwise_activation", "relu_row_bias", {"X": f32(6, 5), "Y": f32(5)},
     {"functor_list": ["relu", "elementwise_add"]}, ref_fused_ew_act)
case("fused_elemwise_activation", "sigmoid_same", {"X": f32(3, 4), "Y": f32(3, 4)},
     {"functor_list": ["sigmoid", "elementwise_add"]}, ref_fused_ew_act)
case("fused_elemwise_activation", "tanh_fp64", {"X": f64(2, 3, 4), "Y": f64(2, 3, 4)},
     {"functor_list": ["tanh", "elementwise_add"]}, ref_fused_ew_act)


def merged(single, outs):
    """The merged optimizer = the single-param optimizer applied to each param."""
    def ref(t, a):
        n = len(t["Param"])
        res = {o: [] for o in outs}
        for k in range(n):
            tk = {s: (v[k] if len(v) == n else v[0]) for s, v in t.items()}
            for o, v in single(tk, a).items():
                if o in res:
                    res[o].append(v)
        return res
    return ref


SHAPES = ((7, 5), (3,), (2, 2, 2))
case("merged_sgd", "three_params", {"Param": [f32(*s) for s in SHAPES], "Grad": [f32(*s) for s in SHAPES],
                                    "LearningRate": [lr(0.1)]}, {}, merged(ref_sgd, ["ParamOut"]))
case("merged_momentum", "three_params_lr_each",
     {"Param": [f32(*s) for s in SHAPES], "Grad": [f32(*s) for s in SHAPES], "Velocity": [f32(*s) for s in SHAPES],
      "LearningRate": [lr(0.05), lr(0.1), lr(0.2)]}, {"mu": 0.9}, merged(ref_momentum, ["ParamOut", "VelocityOut"]))
_adams = [adam_inputs(s, "float32", 2) for s in SHAPES]
case("merged_adam", "three_params", {k: [d[k] for d in _adams] for k in _adams[0] if k != "LearningRate"}
     | {"LearningRate": [lr(0.01)]}, {},
     merged(ref_adam, ["ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"]))
case("merged_adagrad", "three_params", {k: [adagrad_inputs(s, "float32")[k] for s in SHAPES]
                                        for k in ("Param", "Grad", "Moment")} | {"LearningRate": [lr(0.1)]},
     {}, merged(ref_adagrad, ["ParamOut", "MomentOut"]))
_rms = [rmsprop_inputs(s, "float32") for s in SHAPES]
case("merged_rmsprop", "three_params_centered", {k: [d[k] for d in _rms] for k in _rms[0] if k != "LearningRate"}
     | {"LearningRate": [lr(0.01)]}, {"momentum": 0.9, "centered": True},
     merged(ref_rmsprop, ["ParamOut", "MomentOut", "MeanSquareOut", "MeanGradOut"]))
_amx = [adamax_inputs(s, "float32", 2) for s in SHAPES]
case("merged_adamax", "three_params", {k: [d[k] for d in _amx] for k in _amx[0] if k != "LearningRate"}
     | {"LearningRate": [lr(0.01)]}, {}, merged(ref_adamax, ["ParamOut", "MomentOut", "InfNormOut", "Beta1PowOut"]))
case("merged_adamw", "three_params", {k: [d[k] for d in _adams] for k in _adams[0] if k != "LearningRate"}
     | {"LearningRate": [lr(0.01)]}, {"coeff": 0.1, "with_decay": True},
     merged(ref_adamw, ["ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"]))
case("merged_lamb", "three_params", {k: [d[k] for d in _adams] for k in _adams[0] if k != "LearningRate"}
     | {"LearningRate": [lr(0.01)]}, {"weight_decay": 0.01},
     merged(ref_lamb, ["ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"]))
for name, xs, m in (("clipped", [f32(7, 5), f32(3), f32(2, 2, 2)], 1.0),
                    ("not_clipped", [f32(4, 3, lo=-0.1, hi=0.1), f32(5, lo=-0.1, hi=0.1)], 5.0),
                    ("single_fp64", [f64(6, 4)], 0.5)):
    case("clip_by_global_norm", name, {"X": xs}, {"max_global_norm": m}, ref_clip_by_global_norm)


# A large GEMM is checked against the reference only: OpenBLAS 0.3.21's sgemm
# partitions K differently for 1 and 2 OpenMP threads when K > ~320, so its
# last bits depend on the kernel thread count. PE's determinism promise
# (DESIGN.md §4) is across runs and scheduler num_threads, with the kernel
# thread count fixed (cores / places), which test_parallel_executor checks.
case("mul", "big_fc", {"X": f32(64, 784, lo=0, hi=1), "Y": f32(784, 512, lo=-0.08, hi=0.08)}, {}, ref_mul)

# Large inputs, run with 1 and 2 OpenMP threads (see Case.threads).
for op, name, inputs, at, ref in (
        ("elementwise_add", "big_row_bias", {"X": f32(300, 1000), "Y": f32(1000)}, {"axis": -1},
         lambda t, a: {"Out": t["X"] + t["Y"]}),
        ("elementwise_mul", "big_channel", {"X": f32(16, 32, 24, 24), "Y": f32(32)}, {"axis": 1},
         lambda t, a: {"Out": t["X"] * t["Y"].reshape(1, 32, 1, 1)}),
        ("elementwise_div", "big_both_bcast", {"X": f32(32, 1, 400), "Y": f32(200, 1, nonzero=True)}, {"axis": -1},
         lambda t, a: {"Out": t["X"] / t["Y"]}),
        ("relu", "big", {"X": f32(1000, 1000)}, {}, lambda t, a: {"Out": torch.relu(t["X"])}),
        ("elementwise_max", "big_row", {"X": f32(300, 1000), "Y": f32(1000)}, {"axis": -1},
         lambda t, a: {"Out": ref_max(t["X"], t["Y"])}),
        ("elementwise_pow", "big_channel", {"X": f32(16, 32, 24, 24, lo=0.5, hi=2), "Y": f32(32)}, {"axis": 1},
         lambda t, a: {"Out": torch.pow(t["X"], t["Y"].reshape(1, 32, 1, 1))}),
        ("elementwise_mod", "big_both_bcast", {"X": f32(32, 1, 400), "Y": f32(200, 1, nonzero=True)}, {"axis": -1},
         lambda t, a: {"Out": torch.remainder(t["X"], t["Y"])}),
        ("less_than", "big", {"X": f32(1000, 1000), "Y": f32(1000)}, {}, lambda t, a: {"Out": t["X"] < t["Y"]}),
        ("logical_xor", "big", {"X": R([1000, 1000], "bool"), "Y": R([1000], "bool")}, {},
         lambda t, a: {"Out": torch.logical_xor(t["X"], t["Y"])}),
        ("logical_not", "big", {"X": R([1000, 1000], "bool")}, {}, lambda t, a: {"Out": torch.logical_not(t["X"])}),
        ("where", "big", {"Condition": R([1000, 1000], "bool"), "X": f32(1000, 1000), "Y": f32(1000, 1000)}, {},
         ref_where),
        ("sigmoid", "big", {"X": f32(1000, 1000, lo=-10, hi=10)}, {}, lambda t, a: {"Out": torch.sigmoid(t["X"])}),
        ("tanh", "big", {"X": f32(1000, 1000, lo=-5, hi=5)}, {}, lambda t, a: {"Out": torch.tanh(t["X"])}),
        ("scale", "big", {"X": f32(1000, 1000)}, {"scale": 3.0, "bias": -1.0}, ref_scale),
        ("softplus", "big", {"X": f32(1000, 1000, lo=-8, hi=8)}, {"beta": 2.0, "threshold": 5.0},
         lambda t, a: {"Out": F.softplus(t["X"], 2.0, 5.0)}),
        ("pow", "big", {"X": f32(1000, 1000, lo=0.1, hi=3)}, {"factor": 1.7},
         lambda t, a: {"Out": torch.pow(t["X"], 1.7)}),
        ("softmax", "big", {"X": f32(2000, 100, lo=-10, hi=10)}, {"axis": -1},
         lambda t, a: {"Out": torch.softmax(t["X"], -1)}),
        ("matmul", "big_batched", {"X": f32(16, 64, 64), "Y": f32(16, 64, 64)}, {"transpose_Y": True}, ref_matmul),
        ("mean", "big", {"X": f32(512, 512, lo=0, hi=1)}, {}, lambda t, a: {"Out": t["X"].mean().reshape(1)}),
        ("sum", "big", {"X": [f32(1000, 1000), f32(1000, 1000), f32(1000, 1000)]}, {},
         lambda t, a: {"Out": t["X"][0] + t["X"][1] + t["X"][2]}),
        ("arg_max", "big", {"X": f32(1000, 1000)}, {"axis": -1}, ref_arg_max),
        ("top_k", "big", {"X": f32(500, 1000)}, {"k": 5}, ref_top_k),
        ("transpose2", "big_nchw_nhwc", {"X": f32(64, 32, 28, 28)}, {"axis": [0, 2, 3, 1]},
         lambda t, a: {"Out": t["X"].permute(a["axis"])}),
        ("concat", "big", {"X": [f32(64, 32, 28, 28), f32(64, 16, 28, 28)]}, {"axis": 1},
         lambda t, a: {"Out": torch.cat(t["X"], 1)}),
        ("cast", "big_f32_f64", {"X": f32(1000, 1000)}, {"in_dtype": 0, "out_dtype": 1},
         lambda t, a: {"Out": t["X"].double()}),
        ("conv2d", "big", {"Input": f32(8, 16, 28, 28), "Filter": f32(32, 16, 3, 3, lo=-0.1, hi=0.1)},
         {"paddings": [1, 1]}, ref_conv2d),
        ("pool2d", "big_max", {"X": f32(8, 32, 28, 28)}, {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]},
         ref_pool2d),
        ("pool2d", "big_avg", {"X": f32(8, 32, 28, 28)},
         {"pooling_type": "avg", "ksize": [2, 2], "strides": [2, 2]}, ref_pool2d),
        ("batch_norm", "big_train", bn_inputs(f32(8, 16, 28, 28, lo=-1, hi=3), 16), {}, ref_batch_norm),
        ("batch_norm", "big_infer", bn_inputs(f32(8, 16, 28, 28), 16), {"is_test": True}, ref_batch_norm)):
    case(op, name, inputs, at, ref, threads=True,
         dtypes={"Out": "float64"} if op == "cast" else None, upcast=op not in ("cast", "arg_max"))


# ---- sequences (LoD): PyTorch has no LoD, so the references loop over the sequences of the
# row's offsets (Paddle 1.x's semantics: an empty sequence pools to pad_value, MaxIndex is the
# X row of each max, sequence_expand repeats X's sequences -- or rows -- by Y's lengths) ----

def ref_seqpool(off):
    def ref(t, a):
        x, kind = t["X"], a["pooltype"]
        rows, idx = [], []
        for b, e in zip(off[:-1], off[1:]):
            s = x[b:e]
            if e == b:
                rows.append(torch.full(x.shape[1:], float(a.get("pad_value", 0.0)), dtype=x.dtype))
                idx.append(torch.full(x.shape[1:], -1, dtype=torch.int32))
            elif kind == "SUM":
                rows.append(s.sum(0))
            elif kind == "AVERAGE":
                rows.append(s.sum(0) / (e - b))
            elif kind == "SQRT":
                rows.append(s.sum(0) / np.sqrt(e - b))
            elif kind == "MAX":
                m, i = s.max(0)
                rows.append(m)
                idx.append((i + b).to(torch.int32))
            elif kind == "LAST":
                rows.append(s[-1])
            else:
                rows.append(s[0])
        out = {"Out": torch.stack(rows) if rows else x.new_zeros([0] + list(x.shape[1:]))}
        if kind == "MAX":
            out["MaxIndex"] = torch.stack(idx)
        return out
    return ref


def ref_seqsoftmax(off):
    def ref(t, a):
        x = t["X"]
        parts = [torch.softmax(x[b:e], 0) for b, e in zip(off[:-1], off[1:])]
        return {"Out": torch.cat(parts, 0)}
    return ref


def ref_seqexpand(y_off, x_off=None):
    def ref(t, a):
        x = t["X"]
        parts = []
        for i, (b, e) in enumerate(zip(y_off[:-1], y_off[1:])):
            seq = x[x_off[i]:x_off[i + 1]] if x_off else x[i:i + 1]
            parts += [seq] * (e - b)
        return {"Out": torch.cat(parts, 0) if parts else x[:0]}
    return ref


def ref_seqmask(t, a):
    x = t["X"]
    m = a.get("maxlen", -1)
    m = int(x.max()) if m < 0 else m
    dt = {0: torch.float32, 1: torch.float64, 2: torch.int32, 3: torch.int64, 5: torch.bool}[a.get("out_dtype", 3)]
    return {"Y": (torch.arange(m).reshape([1] * x.dim() + [m]) < x.unsqueeze(-1)).to(dt)}


def ref_seqconv(off):
    """Paddle's sequence_conv: row r's context rows r + contextStart + j (j < contextLength) put
    side by side (zeros for rows outside r's sequence), times Filter."""
    def ref(t, a):
        x, f = t["X"], t["Filter"]
        n_ctx, start = a["contextLength"], a.get("contextStart", 0)
        rows = []
        for b, e in zip(off[:-1], off[1:]):
            for r in range(b, e):
                rows.append(torch.cat([x[q] if b <= q < e else x.new_zeros(x.shape[1])
                                       for q in range(r + start, r + start + n_ctx)]))
        col = torch.stack(rows) if rows else x.new_zeros((0, n_ctx * x.shape[1]))
        return {"Out": col @ f}
    return ref


_SEQ_OFF = [0, 2, 2, 7, 8]  # 4 sequences of 2, 0, 5, 1 rows: an empty one and a single row
for _kind in ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST"):
    case("sequence_pool", _kind.lower(), {"X": f32(8, 3)}, {"pooltype": _kind, "pad_value": 0.5},
         ref_seqpool(_SEQ_OFF), lod={"X": [_SEQ_OFF]}, dtypes={"MaxIndex": "int32"})
case("sequence_pool", "max_ties_fp64_3d", {"X": R([7, 2, 3], "float64", fn=lambda r: r.integers(0, 3, (7, 2, 3)))},
     {"pooltype": "MAX"}, ref_seqpool([0, 4, 7]), lod={"X": [[0, 4, 7]]}, dtypes={"MaxIndex": "int32"})
case("sequence_pool", "sum_two_levels", {"X": f32(6, 2)}, {"pooltype": "SUM"}, ref_seqpool([0, 1, 3, 6]),
     lod={"X": [[0, 2, 3], [0, 1, 3, 6]]})
case("sequence_pool", "average_long", {"X": f32(1200, 40)}, {"pooltype": "AVERAGE"},
     ref_seqpool([0, 300, 301, 900, 1200]), lod={"X": [[0, 300, 301, 900, 1200]]}, threads=True)
case("sequence_softmax", "rows", {"X": f32(8)}, {}, ref_seqsoftmax(_SEQ_OFF), lod={"X": [_SEQ_OFF]})
case("sequence_softmax", "n_by_1_fp64", {"X": f64(5, 1)}, {}, ref_seqsoftmax([0, 3, 5]), lod={"X": [[0, 3, 5]]})
case("sequence_expand", "x_rows", {"X": f32(3, 2), "Y": i64(6, 1)}, {}, ref_seqexpand([0, 2, 2, 6]),
     lod={"Y": [[0, 2, 2, 6]]})
case("sequence_expand", "x_seqs", {"X": f32(4, 3), "Y": i64(5, 1)}, {"ref_level": 0},
     ref_seqexpand([0, 2, 3], [0, 3, 4]), lod={"X": [[0, 3, 4]], "Y": [[0, 2, 3], [0, 1, 3, 5]]})
case("sequence_expand", "int64_x", {"X": i64(2, 2), "Y": f32(3)}, {}, ref_seqexpand([0, 1, 3]),
     lod={"Y": [[0, 1, 3]]})
# sequence_conv: the layer's centered window (start -(len // 2)), an even length, windows wholly
# after or before the row (up to a whole window in the zeros), an empty and a length-1 sequence
case("sequence_conv", "len3_centered", {"X": f32(8, 3), "Filter": f32(9, 4)},
     {"contextLength": 3, "contextStart": -1}, ref_seqconv(_SEQ_OFF), lod={"X": [_SEQ_OFF]})
case("sequence_conv", "len4_start_m2_fp64", {"X": f64(9, 2), "Filter": f64(8, 5)},
     {"contextLength": 4, "contextStart": -2}, ref_seqconv([0, 3, 4, 9]), lod={"X": [[0, 3, 4, 9]]})
case("sequence_conv", "len2_start_p1", {"X": f32(7, 3), "Filter": f32(6, 3)},
     {"contextLength": 2, "contextStart": 1}, ref_seqconv([0, 1, 5, 7]), lod={"X": [[0, 1, 5, 7]]})
case("sequence_conv", "len3_start_m4_two_levels", {"X": f64(6, 2), "Filter": f64(6, 1)},
     {"contextLength": 3, "contextStart": -4}, ref_seqconv([0, 1, 6]), lod={"X": [[0, 1, 2], [0, 1, 6]]})
case("sequence_conv", "default_start_len1", {"X": f32(5, 4), "Filter": f32(4, 2)},
     {"contextLength": 1}, ref_seqconv([0, 2, 5]), lod={"X": [[0, 2, 5]]})
case("sequence_conv", "long", {"X": f32(600, 16), "Filter": f32(48, 32)}, {"contextLength": 3, "contextStart": -1},
     ref_seqconv([0, 100, 101, 101, 400, 600]), lod={"X": [[0, 100, 101, 101, 400, 600]]}, threads=True)
case("sequence_mask", "maxlen_attr", {"X": R([4], "int64", fn=lambda r: np.array([0, 3, 5, 1]))}, {"maxlen": 6},
     ref_seqmask)
case("sequence_mask", "from_data_2d_float", {"X": R([2, 3], "int32", fn=lambda r: np.array([[2, 0, 4], [1, 1, 3]]))},
     {"out_dtype": 0}, ref_seqmask, dtypes={"Y": "float32"})


# ---- recurrent LoD ops: Paddle 1.x's lstm / gru, each sequence of the last LoD level step by step
# (is_reverse: backwards) from H0 / C0 or zeros; lstm gate columns {candidate, input, forget, output}
# with the peephole weights after the 4H biases; gru's Weight: [H, 2H] update/reset then [H, H] ----

_RNN_ACT = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu, "identity": lambda v: v}


def ref_lstm(off):
    def ref(t, a):
        x, w, b = t["Input"], t["Weight"], t["Bias"]
        H = w.shape[0]
        ga, ca, na = (_RNN_ACT[a.get(k, d)] for k, d in (("gate_activation", "sigmoid"),
                                                           ("cell_activation", "tanh"),
                                                           ("candidate_activation", "tanh")))
        peep = a.get("use_peepholes", True)
        hid, cel, gates, tc = ([None] * x.shape[0] for _ in range(4))
        for s, (bg, e) in enumerate(zip(off[:-1], off[1:])):
            h = t["H0"][s] if "H0" in t else x.new_zeros(H)
            c = t["C0"][s] if "C0" in t else x.new_zeros(H)
            for r in (range(e - 1, bg - 1, -1) if a.get("is_reverse") else range(bg, e)):
                g = x[r] + b[0, :4 * H] + h @ w
                gi, gf, go = g[H:2 * H], g[2 * H:3 * H], g[3 * H:]
                if peep:
                    gi, gf = gi + c * b[0, 4 * H:5 * H], gf + c * b[0, 5 * H:6 * H]
                cand, i, f = na(g[:H]), ga(gi), ga(gf)
                c = cand * i + c * f
                o = ga(go + c * b[0, 6 * H:] if peep else go)
                h = o * ca(c)
                hid[r], cel[r], gates[r], tc[r] = h, c, torch.cat([cand, i, f, o]), ca(c)
        # BatchGate: the activated gates by row, BatchCellPreAct: cell_activation(Cell) (PE's layout)
        return {"Hidden": torch.stack(hid), "Cell": torch.stack(cel), "BatchGate": torch.stack(gates),
                "BatchCellPreAct": torch.stack(tc)}
    return ref


def ref_gru(off):
    def ref(t, a):
        x, w = t["Input"], t["Weight"]
        H = w.shape[0]
        wur, wc = w.reshape(-1)[:2 * H * H].reshape(H, 2 * H), w.reshape(-1)[2 * H * H:].reshape(H, H)
        b = t["Bias"][0] if "Bias" in t else x.new_zeros(3 * H)
        ga, na = _RNN_ACT[a.get("gate_activation", "sigmoid")], _RNN_ACT[a.get("activation", "tanh")]
        hid, gates, rhs = ([None] * x.shape[0] for _ in range(3))
        for s, (bg, e) in enumerate(zip(off[:-1], off[1:])):
            h = t["H0"][s] if "H0" in t else x.new_zeros(H)
            for r in (range(e - 1, bg - 1, -1) if a.get("is_reverse") else range(bg, e)):
                ur = ga(x[r, :2 * H] + b[:2 * H] + h @ wur)
                u, rg = ur[:H], ur[H:]
                c = na(x[r, 2 * H:] + b[2 * H:] + (rg * h) @ wc)
                gates[r], rhs[r] = torch.cat([u, rg, c]), rg * h
                h = u * h + (1 - u) * c if a.get("origin_mode") else (1 - u) * h + u * c
                hid[r] = h
        # BatchGate: the activated u, r, c by row; BatchResetHiddenPrev: r * h_prev (PE's layout)
        return {"Hidden": torch.stack(hid), "BatchGate": torch.stack(gates),
                "BatchResetHiddenPrev": torch.stack(rhs), "BatchHidden": torch.stack(hid)}
    return ref


_RNN_OFF = [0, 3, 4, 8]  # 3 sequences of 3, 1, 4 rows
case("lstm", "peepholes", {"Input": f32(8, 12), "Weight": f32(3, 12, lo=-0.5, hi=0.5), "Bias": f32(1, 21)}, {},
     ref_lstm(_RNN_OFF), lod={"Input": [_RNN_OFF]})
case("lstm", "reverse_no_peep_h0_c0_fp64", {"Input": f64(8, 8), "Weight": f64(2, 8), "Bias": f64(1, 8),
                                             "H0": f64(3, 2), "C0": f64(3, 2)},
     {"use_peepholes": False, "is_reverse": True}, ref_lstm(_RNN_OFF), lod={"Input": [_RNN_OFF]})
case("lstm", "acts_relu_identity", {"Input": f32(5, 8), "Weight": f32(2, 8, lo=-0.5, hi=0.5), "Bias": f32(1, 14)},
     {"cell_activation": "relu", "candidate_activation": "identity", "gate_activation": "tanh"},
     ref_lstm([0, 1, 5]), lod={"Input": [[0, 1, 5]]})
case("gru", "default", {"Input": f32(8, 9), "Weight": f32(3, 9, lo=-0.5, hi=0.5), "Bias": f32(1, 9)}, {},
     ref_gru(_RNN_OFF), lod={"Input": [_RNN_OFF]})
case("gru", "reverse_origin_h0_fp64", {"Input": f64(8, 6), "Weight": f64(2, 6), "H0": f64(3, 2)},
     {"is_reverse": True, "origin_mode": True}, ref_gru(_RNN_OFF), lod={"Input": [_RNN_OFF]})
case("gru", "relu_candidate", {"Input": f32(5, 6), "Weight": f32(2, 6, lo=-0.5, hi=0.5), "Bias": f32(1, 6)},
     {"activation": "relu"}, ref_gru([0, 4, 5]), lod={"Input": [[0, 4, 5]]})
# enough work to fork the sequences over threads: the same bits with 1 and 2 threads
case("lstm", "threads", {"Input": f32(40, 64), "Weight": f32(16, 64, lo=-0.3, hi=0.3), "Bias": f32(1, 112)}, {},
     ref_lstm([0, 13, 14, 40]), lod={"Input": [[0, 13, 14, 40]]}, threads=True)
case("gru", "threads", {"Input": f32(50, 48), "Weight": f32(16, 48, lo=-0.3, hi=0.3), "Bias": f32(1, 48)},
     {"is_reverse": True}, ref_gru([0, 20, 21, 50]), lod={"Input": [[0, 20, 21, 50]]}, threads=True)


# ---- running a row ----------------------------------------------------------------------

def _check(case, name, got, want, want_dtype):
    """name: the output's slot label; `flat` is looked up by slot."""
    assert got.dtype == np.dtype(want_dtype), \
        "%s: output %s dtype %s, expected %s" % (case.id, name, got.dtype, want_dtype)
    if name.split("[")[0] in case.flat:
        assert got.size == want.size, "%s: %s has %d elements, expected %d (dims %s vs %s)" % (
            case.id, name, got.size, want.size, list(got.shape), list(want.shape))
        got = got.reshape(want.shape)
    assert list(got.shape) == list(want.shape), "%s: output %s dims %s, expected %s" % (
        case.id, name, list(got.shape), list(want.shape))
    if np.dtype(want_dtype).kind != "f":
        bad = got != want.astype(want_dtype)
        assert not bad.any(), "%s: output %s differs at %d of %d elements, first at %s: %s vs %s" % (
            case.id, name, bad.sum(), bad.size, np.argwhere(bad)[0].tolist(),
            got[bad].ravel()[0], want.astype(want_dtype)[bad].ravel()[0])
        return
    rtol, atol = case.tol or (FP64_TOL if np.dtype(want_dtype) == np.float64 else FP32_TOL)
    g, w = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(g - w)
    bad = ~(err <= atol + rtol * np.abs(w)) & ~(np.isnan(g) & np.isnan(w))  # NaN where torch has NaN is right
    bad |= np.isnan(g) != np.isnan(w)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err, -1)), g.shape) if g.ndim else ()
        pytest.fail("%s: output %s: %d of %d elements outside rtol %g atol %g; max error %.3g at %s "
                    "(pe %r, torch %r)" % (case.id, name, bad.sum(), bad.size, rtol, atol,
                                           np.nanmax(err), list(i), g[i], w[i]))


def _to_torch(a, upcast):
    t = torch.from_numpy(np.array(a))
    if upcast and t.is_floating_point():
        t = t.double()
    return t


def build_case(case):
    """The row's one-op program, its feeds {var name: array}, LoDs {feed
    name: offsets per level}, fetch names and outputs (label, var name,
    reference array, expected dtype). tests/ops/test_eager_ops.py runs the
    same program eagerly."""
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = {}
    for slot, spec in case.inputs.items():
        arrays[slot] = [s.make(rng) for s in spec] if isinstance(spec, list) else spec.make(rng)
    t = {slot: [_to_torch(a, case.upcast) for a in v] if isinstance(v, list) else _to_torch(v, case.upcast)
         for slot, v in arrays.items()}
    ref = case.ref(t, case.attrs)

    firsts = [a for v in arrays.values() for a in (v if isinstance(v, list) else [v])]
    floats = [a.dtype for a in firsts if a.dtype.kind == "f"]
    base = floats[0] if floats else np.dtype("float32")
    # outputs: (label, var name, expected array, expected dtype); a list = duplicable slot
    outputs, slots = [], {}
    for k, v in ref.items():
        vs = v if isinstance(v, list) else [v]
        slots[k] = []
        for j, w in enumerate(vs):
            w = w.detach().numpy()
            label = "%s[%d]" % (k, j) if isinstance(v, list) else k
            nm = "out_%s_%d" % (k.lower(), j) if isinstance(v, list) else "out_%s" % k.lower()
            outputs.append((label, nm, w, np.dtype(case.dtypes.get(k) or (base if w.dtype.kind == "f" else w.dtype))))
            slots[k].append(nm)

    p = Program()
    feeds, ins = {}, {}
    for slot, v in arrays.items():
        names = []
        for j, a in enumerate(v if isinstance(v, list) else [v]):
            nm = "%s_%d" % (slot.lower(), j)
            p.var(nm, a.dtype, a.shape)
            feeds[nm] = a
            names.append(nm)
        ins[slot] = names
    for label, nm, w, dt in outputs:
        p.var(nm, dt, w.shape)
    p.op(case.op, ins, slots, case.attrs)
    lods = {"%s_0" % slot.lower(): lv for slot, lv in case.lod.items()}
    return p, feeds, lods, [o[1] for o in outputs], outputs


def run_case(case, tmp_path, threads=(1,), env=None):
    """Runs the row with `pe run` (once per thread count; `env` adds to the
    environment, e.g. PE_TEST_PLACES), checks every output against the
    reference, and returns the first run's outputs {var name: array}."""
    os.makedirs(str(tmp_path), exist_ok=True)
    p, feeds, lods, fetch, outputs = build_case(case)
    prog = str(tmp_path / "prog.json")
    p.save(prog)
    results = []
    for nt in threads:
        got = run_pe(prog, feeds, fetch, workdir=str(tmp_path), env=dict(env or {}, OMP_NUM_THREADS=str(nt)),
                     lods=lods)
        for label, nm, w, dt in outputs:
            _check(case, label, got[nm], w, dt)
        results.append(got)
    for nt, got in zip(threads[1:], results[1:]):
        for label, nm, w, dt in outputs:
            a, b = results[0][nm], got[nm]
            if not np.array_equal(a, b, equal_nan=True):
                d = a != b
                pytest.fail("%s: output %s differs between %d and %d threads at %d of %d elements "
                            "(max difference %.3g)" % (case.id, label, threads[0], nt, d.sum(), d.size,
                                                       np.abs(a.astype(np.float64) - b)[d].max()))
    return results[0]


@pytest.fixture(scope="module", autouse=True)
def _need_pe():
    if not os.path.exists(pe_bin()):
        pytest.fail("pe binary not found at %s (set PE_BIN_DIR or build into build/)" % pe_bin())


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(strict=True, raises=PeError, reason=c.xfail)) if c.xfail else c
    for c in CASES], ids=[c.id for c in CASES])
def test_op(case, tmp_path):
    run_case(case, tmp_path)


@pytest.mark.parametrize("rc, stderr, clean", [
    (1, "pe: error: conv2d: data_format NHWC is not supported\n", True),
    (-11, "", False),                                              # SIGSEGV
    (-6, "pe: error: half a line\n", False),                      # SIGABRT after a message
    (1, "pe: error: x\n==1==ERROR: AddressSanitizer: heap-buffer-overflow\n", False),
    (1, "ops/x.c:3:5: runtime error: signed integer overflow\npe: error: x\n", False),
    (1, "", False),                                                # exit 1 with no error line
    (2, "pe: error: x\n", False),
])
def test_strict_xfail_needs_a_clean_error(rc, stderr, clean):
    """The xfail rows are strict with raises=PeError: only a clean `pe` error
    satisfies them; a crash is a PeCrash, not a PeError, so it fails the row."""
    e = pe_failure(["pe", "run", "p.json"], rc, stderr)
    assert isinstance(e, PeError) == clean and isinstance(e, PeCrash) != clean


@pytest.mark.parametrize("case", [c for c in CASES if c.threads], ids=[c.id for c in CASES if c.threads])
def test_thread_count_invariance(case, tmp_path):
    """DESIGN.md §4: the same inputs give bitwise-identical results for any thread count."""
    run_case(case, tmp_path, threads=(1, 2))


# ---- random ops: range, determinism, and distance to PyTorch's samples -------------------

def _ks(a, b):
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = np.sort(a.ravel()), np.sort(b.ravel())
    allv = np.concatenate([a, b])
    return np.max(np.abs(np.searchsorted(a, allv, "right") / a.size - np.searchsorted(b, allv, "right") / b.size))


def _torch_sample(op, attrs, n):
    g = torch.Generator().manual_seed(1234)
    if op == "uniform_random":
        lo, hi = attrs.get("min", -1.0), attrs.get("max", 1.0)
        return (torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo).numpy()
    mean, std = attrs.get("mean", 0.0), attrs.get("std", 1.0)
    if op == "gaussian_random":
        return (torch.randn(n, generator=g, dtype=torch.float64) * std + mean).numpy()
    t = torch.empty(n, dtype=torch.float64)
    torch.manual_seed(1234)
    torch.nn.init.trunc_normal_(t, mean=mean, std=std, a=mean - 2 * std, b=mean + 2 * std)
    return t.numpy()


RANDOM_CASES = [
    ("uniform_random", "default_range", {"shape": [200, 100], "seed": 7}, "float32"),
    ("uniform_random", "range_fp64", {"shape": [20000], "seed": 3, "min": -0.5, "max": 2.0, "dtype": 1}, "float64"),
    ("gaussian_random", "standard", {"shape": [100, 200], "seed": 11}, "float32"),
    ("gaussian_random", "mean_std_fp64", {"shape": [20000], "seed": 5, "mean": 1.5, "std": 0.25, "dtype": 1}, "float64"),
    ("truncated_gaussian_random", "standard", {"shape": [20000], "seed": 13}, "float32"),
    ("truncated_gaussian_random", "mean_std", {"shape": [40, 500], "seed": 17, "mean": -1.0, "std": 2.0}, "float32"),
]


def _run_random(op, attrs, dtype, tmp_path, tag):
    p = Program()
    p.var("out", dtype, attrs["shape"])
    p.op(op, {}, {"Out": ["out"]}, attrs)
    d = tmp_path / tag
    d.mkdir()
    p.save(str(d / "prog.json"))
    return run_pe(str(d / "prog.json"), {}, ["out"], workdir=str(d))["out"]


@pytest.mark.parametrize("op,name,attrs,dtype", RANDOM_CASES, ids=["%s-%s" % (r[0], r[1]) for r in RANDOM_CASES])
def test_random_op(op, name, attrs, dtype, tmp_path):
    a = _run_random(op, attrs, dtype, tmp_path, "a")
    assert a.dtype == np.dtype(dtype) and list(a.shape) == attrs["shape"]
    b = _run_random(op, attrs, dtype, tmp_path, "b")
    assert np.array_equal(a, b), "%s: same seed gave different values in two runs" % op
    c = _run_random(op, dict(attrs, seed=attrs["seed"] + 1), dtype, tmp_path, "c")
    assert not np.array_equal(a, c), "%s: seeds %d and %d gave the same values" % (op, attrs["seed"], attrs["seed"] + 1)
    if op == "uniform_random":
        lo, hi = attrs.get("min", -1.0), attrs.get("max", 1.0)
        assert a.min() >= lo and a.max() < hi, "values outside [%g, %g): %g..%g" % (lo, hi, a.min(), a.max())
    if op == "truncated_gaussian_random":
        m, s = attrs.get("mean", 0.0), attrs.get("std", 1.0)
        assert a.min() >= m - 2 * s - 1e-6 and a.max() <= m + 2 * s + 1e-6, "values outside mean +- 2 std"
    # n = m = 20000: the KS critical value at alpha 0.001 is 1.95 * sqrt(2/n) ~ 0.0195.
    ks = _ks(a.astype(np.float64), _torch_sample(op, attrs, a.size))
    assert ks < 0.0195 * np.sqrt(20000.0 / a.size), "%s: KS distance %.4f to PyTorch's samples" % (op, ks)


@pytest.mark.parametrize("impl", ["downgrade_in_infer", "upscale_in_train"])
def test_dropout_train(impl, tmp_path):
    """Training dropout: Out = X * Mask (/ (1 - p) for upscale_in_train),
    Mask uint8 0/1 with about 1 - p ones, the same mask for the same seed,
    a different one for another seed."""
    p_drop, shape = 0.3, [200, 100]
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32) + 3.0  # no zeros
    masks = []
    for seed in (7, 7, 8):
        prog = Program()
        for nm in ("x", "out"):
            prog.var(nm, "float32", shape)
        prog.var("mask", "uint8", shape)
        prog.op("dropout", {"X": ["x"]}, {"Out": ["out"], "Mask": ["mask"]},
                {"dropout_prob": p_drop, "is_test": False, "fix_seed": True, "seed": seed,
                 "dropout_implementation": impl})
        d = tmp_path / ("s%d_%d" % (seed, len(masks)))
        d.mkdir()
        prog.save(str(d / "p.json"))
        got = run_pe(str(d / "p.json"), {"x": x}, ["out", "mask"], workdir=str(d))
        m, out = got["mask"], got["out"]
        assert m.dtype == np.uint8 and set(np.unique(m)) <= {0, 1}, "Mask must be uint8 0/1"
        scale = 1.0 / (1.0 - p_drop) if impl == "upscale_in_train" else 1.0
        np.testing.assert_allclose(out, x * m * np.float32(scale), rtol=1e-6, atol=0)
        # 20000 Bernoulli(0.7) draws: sd of the mean 0.0032; 5 sd bound.
        assert abs(m.mean() - (1 - p_drop)) < 0.016, "kept fraction %.4f, expected %.2f" % (m.mean(), 1 - p_drop)
        masks.append(m)
    assert np.array_equal(masks[0], masks[1]), "same seed, different masks"
    assert not np.array_equal(masks[0], masks[2]), "seeds 7 and 8 gave the same mask"


@pytest.mark.parametrize("op", ["elementwise_mod", "elementwise_floordiv"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_by_zero_is_refused(op, dtype, tmp_path):
    """An integer 0 divisor is a clean error naming Y (Paddle throws; C would trap)."""
    prog = Program()
    prog.var("x", dtype, [2, 3])
    prog.var("y", dtype, [3])
    prog.var("out", dtype, [2, 3])
    prog.op(op, {"X": ["x"], "Y": ["y"]}, {"Out": ["out"]}, {"axis": -1})
    prog.save(str(tmp_path / "p.json"))
    feeds = {"x": np.arange(6, dtype=dtype).reshape(2, 3), "y": np.array([1, 0, 2], dtype)}
    with pytest.raises(PeError, match="Y 'y' holds a 0: integer division by zero"):
        run_pe(str(tmp_path / "p.json"), feeds, ["out"], workdir=str(tmp_path))


@pytest.mark.parametrize("op,slot,xs,idx,attrs,msg", [
    ("one_hot_v2", "X", None, np.array([0, 5, 1]), {"depth": 4},
     r"X 'x' element 1 is 5, outside \[0, depth = 4\) \(set allow_out_of_range"),
    ("one_hot", "X", None, np.array([[2], [-1]]), {"depth": 3}, r"X 'x' element 1 is -1, outside \[0, depth = 3\)"),
    ("gather", "Index", np.zeros((3, 2), np.float32), np.array([0, 3]), {},
     r"Index 'idx' element 1 is 3, outside \[0, 3\) \(the gathered axis of X 'x'\)"),
    ("gather_nd", "Index", np.zeros((3, 2), np.float32), np.array([[0, 1], [2, 2]]), {},
     r"Index 'idx' element 3 is 2, outside \[0, 2\) \(dim 1 of X 'x'\)"),
    ("scatter", "Ids", np.zeros((3, 2), np.float32), np.array([1, -2]), {},
     r"Ids 'idx' element 1 is -2, outside \[0, 3\) \(the rows of X 'x'\)"),
])
def test_index_out_of_range_is_refused(op, slot, xs, idx, attrs, msg, tmp_path):
    """A bad index is a clean error naming the op, the var, the element, the value and the range."""
    prog = Program()
    feeds = {}
    if xs is None:
        prog.var("x", "int64", list(idx.shape))
        feeds["x"] = idx.astype(np.int64)
        ins = {"X": ["x"]}
        prog.var("out", "float32", list(idx.shape[:-1] if op == "one_hot" else idx.shape) + [attrs["depth"]])
    else:
        prog.var("x", "float32", list(xs.shape))
        prog.var("idx", "int64", list(idx.shape))
        feeds.update(x=xs, idx=idx.astype(np.int64))
        ins = {"X": ["x"], slot: ["idx"]}
        if op == "scatter":
            prog.var("upd", "float32", [len(idx), 2])
            feeds["upd"] = np.ones((len(idx), 2), np.float32)
            ins["Updates"] = ["upd"]
        prog.var("out", "float32", [])
    prog.op(op, ins, {"Out": ["out"]}, attrs)
    prog.save(str(tmp_path / "p.json"))
    with pytest.raises(PeError, match="op %s .*%s" % (op, msg)):
        run_pe(str(tmp_path / "p.json"), feeds, ["out"], workdir=str(tmp_path))


# ---- coverage: every forward op in ops.def has rows --------------------------------------

# Ops with no tensor math to check against a reference: the parameter-server
# ops move tensors between processes (tests/python/test_pserver.py runs them
# in real trainer and pserver processes, tests/unit/test_transport.c their
# transport).
NO_CONFORMANCE_ROW = {"send", "recv", "send_barrier", "fetch_barrier", "listen_and_serv"}


def test_every_op_has_a_row():
    have = {c.op for c in CASES} | {r[0] for r in RANDOM_CASES} | NO_CONFORMANCE_ROW
    forward = {op for op in ops_def() if not op.endswith("_grad")}
    missing = sorted(forward - have)
    assert not missing, "ops in ops/ops.def without a conformance row: %s" % ", ".join(missing)
    unknown = sorted(have - set(ops_def()))
    assert not unknown, "rows for ops not in ops/ops.def: %s" % ", ".join(unknown)
