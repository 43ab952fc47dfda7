"""tests/ops/test_backend_ops.py — every op's CUDA kernel against its CPU kernel
(in the manner of ggml's test-backend-ops).

The rows are the conformance tables' (tests/ops/test_forward_ops.py for the
forward ops, tests/ops/test_grad_ops.py for the gradients: random inputs,
odd and one-sized dims, broadcasting, every attr variant, float32 and
float64). For each row whose op has a CUDA kernel (ops.def names
PE_CUDA(fn)), `pe run` runs it once on cpu:0 and once on cuda:0; each run is
checked against the PyTorch reference as in the conformance suites, and the
two runs are compared with each other: integer and bool outputs exactly,
float outputs within a per-op bound (CPU_VS_CUDA below; the default is
tighter than the reference bound, since both sides compute the same
formula). Also:

  test_random_ops_match_cpu        uniform/gaussian/truncated_gaussian_random
                                   and dropout's mask: the same seed gives
                                   the same values on a GPU as on the CPU;
  test_cuda_runs_are_deterministic every gradient row twice on cuda:0:
                                   bit-identical results;
  test_every_op_has_a_cuda_kernel  (runs everywhere, no GPU needed) the ops
                                   without a CUDA kernel are exactly
                                   HOST_ONLY | NOT_YET: a new op without a
                                   kernel, or a kernel added without
                                   shrinking NOT_YET, fails it.

Without a GPU (or in a build without CUDA) every GPU test is skipped with
the reason `pe` gave, printed by `pytest -rs`.

    PE_BIN_DIR=build/bin python3 -m pytest -q -rs tests/ops/test_backend_ops.py
"""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import test_forward_ops as fw  # noqa: E402
import test_grad_ops as gr  # noqa: E402
from pe_json import Program, cuda_ops, cuda_unavailable, ops_def, pe_bin, run_pe  # noqa: E402

CPU = {"PE_TEST_PLACES": "cpu"}
CUDA = {"PE_TEST_PLACES": "cuda:0"}

# Ops that run on the host by design: the parameter server's RPC ops move
# tensors between a trainer's CPU scope and a ZeroMQ socket.
HOST_ONLY = {"send", "recv", "send_barrier", "fetch_barrier", "listen_and_serv"}
# Ops whose CUDA kernel is still to be written (issue 14): shrinks to empty.
NOT_YET = set()

# CPU vs CUDA bounds (rtol, atol relative to max|cpu|) for float outputs.
# Default: both sides compute the same formula in the same precision, so
# only rounding order differs. GEMM / convolution / long reductions sum in
# another order (cuBLAS and cuDNN tile the sums).
DEFAULT_FP32, DEFAULT_FP64 = (2e-6, 1e-6), (1e-12, 1e-13)
REORDERED_FP32, REORDERED_FP64 = (1e-4, 1e-5), (1e-10, 1e-11)
REORDERED = {"mul", "matmul", "matmul_v2", "fc", "conv2d", "depthwise_conv2d", "conv2d_transpose", "layer_norm",
             "batch_norm", "group_norm", "instance_norm", "softmax_with_cross_entropy", "cross_entropy", "cos_sim",
             "mean", "reduce_sum", "reduce_mean", "reduce_prod", "softmax", "log_softmax", "cumsum", "lamb",
             "clip_by_global_norm", "merged_lamb", "square_error_cost", "bilinear_interp_v2", "pool2d", "gelu",
             "sigmoid_cross_entropy_with_logits", "lookup_table", "lookup_table_v2", "accuracy", "sum"}

def gpu_or_skip():
    """Skips the test, saying why, unless `pe` can run a program on cuda:0."""
    why = cuda_unavailable()
    if why:
        pytest.skip("SKIPPED: no usable GPU: %s" % why)


def _bound(op, dt):
    if dt == np.float64:
        return REORDERED_FP64 if op in REORDERED else DEFAULT_FP64
    return REORDERED_FP32 if op in REORDERED else DEFAULT_FP32


def compare(case_id, op, cpu, gpu):
    """Every output of the CUDA run against the CPU run."""
    assert set(cpu) == set(gpu)
    for name in sorted(cpu):
        a, b = cpu[name], gpu[name]
        assert a.dtype == b.dtype and a.shape == b.shape, "%s: %s is %s%s on cpu, %s%s on cuda" % (
            case_id, name, a.dtype, list(a.shape), b.dtype, list(b.shape))
        if a.dtype.kind != "f":
            if not np.array_equal(a, b):
                d = a != b
                pytest.fail("%s: %s differs at %d of %d elements (first at %s: cpu %r, cuda %r)" % (
                    case_id, name, d.sum(), d.size, list(np.argwhere(d)[0]), a[d][0], b[d][0]))
            continue
        rtol, ascale = _bound(op, a.dtype)
        x, y = a.astype(np.float64), b.astype(np.float64)
        same_nan = np.isnan(x) == np.isnan(y)
        atol = ascale * (np.nanmax(np.abs(x)) if x.size and not np.isnan(x).all() else 0.0)
        err = np.abs(x - y)
        bad = ~same_nan | (~np.isnan(x) & ~(err <= atol + rtol * np.abs(x)))
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            pytest.fail("%s: %s: %d of %d elements outside rtol %g atol %.3g of the CPU kernel; first at %s: "
                        "cpu %r, cuda %r" % (case_id, name, bad.sum(), bad.size, rtol, atol, list(i), x[i], y[i]))


def _params(cases):
    out = []
    have = cuda_ops()
    for c in cases:
        if c.op not in have or c.xfail:
            continue
        # NHWC rows: the CUDA kernels refuse the layout with a clean error by design, which the
        # op suites check as strict xfails when run on cuda:0 (PE_TEST_PLACES); nothing to compare
        if "NHWC" in (c.attrs.get("data_format"), c.attrs.get("data_layout")):
            continue
        out.append(c)
    return out


FORWARD = _params(fw.CASES)
GRAD = _params(gr.CASES)


# The seed checks first: pytest-xdist hands tests out in collection order,
# and a GPU run that reaches its time limit should not have skipped them.
RANDOM = [r for r in fw.RANDOM_CASES if r[0] in cuda_ops()]


@pytest.mark.parametrize("op,name,attrs,dtype", RANDOM, ids=["%s-%s" % (r[0], r[1]) for r in RANDOM])
def test_random_ops_match_cpu(op, name, attrs, dtype, tmp_path):
    """A seed gives the same initial weights on a GPU as on the CPU."""
    gpu_or_skip()
    got = {}
    for tag, env in (("cpu", CPU), ("cuda", CUDA)):
        p = Program()
        p.var("out", dtype, attrs["shape"])
        p.op(op, {}, {"Out": ["out"]}, attrs)
        d = tmp_path / tag
        d.mkdir()
        p.save(str(d / "prog.json"))
        got[tag] = run_pe(str(d / "prog.json"), {}, ["out"], workdir=str(d), env=env)["out"]
    # the same draws; the transforms (log, sqrt, erfinv) may round differently in the last place
    np.testing.assert_allclose(got["cuda"], got["cpu"], rtol=1e-6 if dtype == "float32" else 1e-13, atol=0,
                               err_msg="%s: cuda:0 and cpu:0 drew different values for seed %d" % (op, attrs["seed"]))


@pytest.mark.skipif("dropout" not in cuda_ops(), reason="SKIPPED: dropout has no CUDA kernel yet")
def test_dropout_mask_matches_cpu(tmp_path):
    gpu_or_skip()
    shape = [64, 33]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) + 3.0
    got = {}
    for tag, env in (("cpu", CPU), ("cuda", CUDA)):
        prog = Program()
        for nm in ("x", "out"):
            prog.var(nm, "float32", shape)
        prog.var("mask", "uint8", shape)
        prog.op("dropout", {"X": ["x"]}, {"Out": ["out"], "Mask": ["mask"]},
                {"dropout_prob": 0.3, "is_test": False, "fix_seed": True, "seed": 9,
                 "dropout_implementation": "upscale_in_train"})
        d = tmp_path / tag
        d.mkdir()
        prog.save(str(d / "p.json"))
        got[tag] = run_pe(str(d / "p.json"), {"x": x}, ["out", "mask"], workdir=str(d), env=env)
    assert np.array_equal(got["cpu"]["mask"], got["cuda"]["mask"]), "dropout: another mask on cuda:0 for seed 9"
    np.testing.assert_allclose(got["cuda"]["out"], got["cpu"]["out"], rtol=1e-6)


@pytest.mark.parametrize("case", FORWARD, ids=[c.id for c in FORWARD])
def test_forward_cuda_vs_cpu(case, tmp_path):
    gpu_or_skip()
    cpu = fw.run_case(case, tmp_path / "cpu", env=CPU)
    gpu = fw.run_case(case, tmp_path / "cuda", env=CUDA)
    compare(case.id, case.op, cpu, gpu)


@pytest.mark.parametrize("case", GRAD, ids=[c.id for c in GRAD])
def test_grad_cuda_vs_cpu(case, tmp_path):
    gpu_or_skip()
    cpu = gr.run_grad_case(case, tmp_path / "cpu", env=CPU)
    gpu = gr.run_grad_case(case, tmp_path / "cuda", env=CUDA)
    compare(case.id, case.op, cpu, gpu)


@pytest.mark.parametrize("case", GRAD, ids=[c.id for c in GRAD])
def test_cuda_runs_are_deterministic(case, tmp_path):
    gpu_or_skip()
    a = gr.run_grad_case(case, tmp_path / "a", env=CUDA)
    b = gr.run_grad_case(case, tmp_path / "b", env=CUDA)
    for name in sorted(a):
        if not np.array_equal(a[name], b[name], equal_nan=True):
            d = a[name] != b[name]
            pytest.fail("%s: %s differs between two runs on cuda:0 at %d of %d elements" % (
                case.id, name, d.sum(), d.size))


def test_every_op_has_a_cuda_kernel():
    """Runs without a GPU: ops.def's CUDA column, checked against the lists above."""
    ops = set(ops_def())
    missing = ops - cuda_ops()
    assert HOST_ONLY <= ops and NOT_YET <= ops, "unknown op in HOST_ONLY / NOT_YET: %s" % sorted(
        (HOST_ONLY | NOT_YET) - ops)
    new = sorted(missing - HOST_ONLY - NOT_YET)
    assert not new, "ops in ops/ops.def without a CUDA kernel (PE_NO_CUDA): %s" % ", ".join(new)
    done = sorted(NOT_YET - missing)
    assert not done, "ops in NOT_YET now have a CUDA kernel: drop them from NOT_YET: %s" % ", ".join(done)
    host = sorted(HOST_ONLY - missing)
    assert not host, "host-only ops with a CUDA kernel: %s" % ", ".join(host)


def test_gpu_skip_is_visible(tmp_path):
    """Where no GPU exists the reason is pe's own error (not a silent pass)."""
    try:
        gpu_or_skip()
    except pytest.skip.Exception as e:
        assert "SKIPPED: no usable GPU" in str(e) and ("CUDA" in str(e) or "cuda" in str(e)), str(e)
        raise
    assert cuda_unavailable() is None
    assert subprocess.run([pe_bin(), "help", "run"], capture_output=True).returncode == 0
