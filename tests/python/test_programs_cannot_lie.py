"""tests/python/test_programs_cannot_lie.py — a program that says one thing and does another is refused.

Issue 16 item 4, through the Python API (the C side: tests/unit/test_program.c,
test_executor_decl.c, test_safetensors.c):
  * aliasing: an op whose output names one of its inputs outside the op's
    declared in-place pairs (softmax_with_cross_entropy with Softmax = Logits
    gave a wrong loss), or a var named by two outputs, fails the semantic
    check when the program reaches C — Executor and CompiledProgram alike;
    the declared pairs (sum's Out = X[0], an optimizer's ParamOut = Param)
    still run;
  * declared meta: a temporary, a persistable or a startup var whose declared
    dtype or fixed dims contradict what its op infers is an error naming the
    op, the var and both metas, in the single-place and the parallel path;
  * names: a name holding a NUL is refused, not cut short at the NUL.
"""
import numpy as np
import pytest

import pe
from pe.utils import unique_name

pe.enable_static()


def _feed(n=2):
    rng = np.random.RandomState(0)
    return {"x": rng.rand(n, 3).astype(np.float32), "label": rng.randint(0, 3, (n, 1)).astype(np.int64)}


def _x(n=2):
    return {"x": _feed(n)["x"]}


def _swce(softmax_is_logits):
    """softmax_with_cross_entropy on a copy of x; with softmax_is_logits its Softmax overwrites Logits."""
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        label = pe.static.data("label", [None, 1], "int64")
        logits = pe.scale(x, scale=2.0)
        blk = main.global_block()
        softmax = logits if softmax_is_logits else blk.create_var(name="sm", shape=[-1, 3], dtype="float32")
        loss = blk.create_var(name="loss", shape=[-1, 1], dtype="float32")
        blk.append_op(type="softmax_with_cross_entropy", inputs={"Logits": [logits], "Label": [label]},
                      outputs={"Softmax": [softmax], "Loss": [loss]}, attrs={"soft_label": False})
    return main, startup, loss


def test_undeclared_alias_is_refused_by_both_executors():
    feed = _feed()
    main, startup, loss = _swce(False)
    exe = pe.static.Executor(pe.CPUPlace())
    good, = exe.run(main, feed=feed, fetch_list=[loss], scope=pe.static.Scope())
    main, startup, loss = _swce(True)
    with pytest.raises(pe.InvalidArgumentError,
                       match=r"block 0 op 1 \(softmax_with_cross_entropy\): output Softmax 'scale_0.tmp_0' is "
                             r"also its input Logits, but softmax_with_cross_entropy does not declare "
                             r"Logits>Softmax in place \(its in-place pairs: none\)"):
        exe.run(main, feed=feed, fetch_list=[loss], scope=pe.static.Scope())
    with pytest.raises(pe.InvalidArgumentError, match="does not declare Logits>Softmax in place"):
        compiled = pe.static.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
        exe.run(compiled, feed=feed, fetch_list=[loss], scope=pe.static.Scope())
    assert np.isfinite(good).all()


def test_output_named_twice_is_refused():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        blk = main.global_block()
        out = blk.create_var(name="out", shape=[-1, 3], dtype="float32")
        blk.append_op(type="split", inputs={"X": [x]}, outputs={"Out": [out, out]}, attrs={"num": 2, "axis": 0})
    with pytest.raises(pe.InvalidArgumentError, match=r"\(split\): output Out names 'out' twice \(args 0 and 1\)"):
        pe.static.Executor().run(main, feed=_x(), fetch_list=[out], scope=pe.static.Scope())


def test_declared_in_place_pairs_still_run():
    """sum with Out = X[0] (the autodiff pass's accumulation) and sgd's ParamOut = Param are declared."""
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        y = pe.scale(x, scale=1.0)
        main.global_block().append_op(type="sum", inputs={"X": [y, x]}, outputs={"Out": [y]})
    v, = pe.static.Executor().run(main, feed=_x(), fetch_list=[y], scope=pe.static.Scope())
    np.testing.assert_allclose(v, 2 * _x()["x"], rtol=1e-6)


def _declared_temp(dtype, shape):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        blk = main.global_block()
        out = blk.create_var(name="t", shape=shape, dtype=dtype)
        blk.append_op(type="relu", inputs={"X": [x]}, outputs={"Out": [out]})
    return main, out


@pytest.mark.parametrize("dtype,shape,ok", [
    ("float32", [-1, 3], True),      # -1 matches any size
    ("float32", [2, 3], True),       # the declared fixed dims are the inferred ones
    ("float32", [], True),           # no shape declared: any shape
    ("float32", [2, 3, 1], True),    # dims of 1 are ignored
    ("int64", [-1, 3], False),       # the dtype contradicts
    ("float32", [-1, 4], False),     # a fixed dim contradicts
    ("float32", [-1, 3, 2], False),  # the rank contradicts
])
def test_declared_meta_against_inference(dtype, shape, ok):
    main, out = _declared_temp(dtype, shape)
    exe = pe.static.Executor()
    if ok:
        v, = exe.run(main, feed=_x(), fetch_list=[out], scope=pe.static.Scope())
        assert v.shape == (2, 3)
        return
    with pytest.raises(pe.InvalidArgumentError,
                       match=r"block 0 op 0: op relu on cpu:0: output Out 't' is float32 \[2, 3\], but the "
                             r"program declares it %s %s" % (dtype, str(list(shape)).replace("[", r"\[").replace("]", r"\]"))):
        exe.run(main, feed=_x(), fetch_list=[out], scope=pe.static.Scope())
    with pytest.raises(pe.InvalidArgumentError, match=r"output Out 't' is float32 \[1, 3\], but the program declares"):
        compiled = pe.static.CompiledProgram(main).with_data_parallel(places=[pe.CPUPlace()] * 2)
        exe.run(compiled, feed=_x(), fetch_list=[out], scope=pe.static.Scope())


def test_startup_var_declared_meta_is_checked():
    """A parameter declared [3, 2] whose initializer makes [4, 2] stops the startup program."""
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        pe.static.nn.fc(x, 2)
    init = [op for op in startup.global_block().ops if op.type == "uniform_random"][0]
    init._set_attr("shape", [4, 2])
    w = init.output("Out")[0]
    with pytest.raises(pe.InvalidArgumentError,
                       match=r"op uniform_random on cpu:0: output Out '%s' is float32 \[4, 2\], but the program "
                             r"declares it float32 \[3, 2\]" % w):
        pe.static.Executor().run(startup, scope=pe.static.Scope())


def test_names_with_a_nul_are_refused_not_cut_short(tmp_path):
    scope = pe.static.Scope()
    with pytest.raises(pe.InvalidArgumentError, match="holds a NUL character"):
        scope.var("a\0b")
    assert scope.find_var("a") is None
    with pytest.raises(pe.InvalidArgumentError, match="holds a NUL character"):
        scope.find_var("a\0b")
    scope.var("a")
    with pytest.raises(pe.InvalidArgumentError, match=r"names 'a\\x00\.\.\.' holds a NUL character"):
        pe._core.safetensors_write(str(tmp_path / "w.safetensors"), scope, ["a\0b"])
    main, out = _declared_temp("float32", [-1, 3])
    with pytest.raises(pe.InvalidArgumentError, match="holds a NUL character"):
        pe.static.Executor().run(main, feed={"x\0y": _x()["x"]}, fetch_list=[out], scope=pe.static.Scope())
    # and a file whose header hides a NUL in a name is refused on read
    import struct
    h = b'{"a\\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    p = tmp_path / "nul.safetensors"
    p.write_bytes(struct.pack("<Q", len(h)) + h + b"\0" * 4)
    with pytest.raises(pe.FormatError, match=r"escaped NUL \(\\u0000\) at header byte 3"):
        pe._core.safetensors_read(str(p), pe.static.Scope())


# ---- the declared in-place pairs really are safe in place -------------------------------------------
#
# Each row runs an op twice: into new vars, and with every declared pair's output naming its input
# (what the checker now accepts); the results must be bitwise the same.

def _r(*shape, lo=-1.0, hi=1.0, seed=[0]):
    seed[0] += 1
    return np.random.RandomState(seed[0]).uniform(lo, hi, shape).astype(np.float32)


def _probs(*shape):
    e = np.exp(_r(*shape))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


_ALIAS_ROWS = [
    ("relu", {"X": [_r(2, 3)]}, {}, [("X", "Out")]),
    ("scale", {"X": [_r(2, 3)]}, {"scale": 3.0, "bias": 1.0}, [("X", "Out")]),
    ("elementwise_add", {"X": [_r(2, 3)], "Y": [_r(3)]}, {}, [("X", "Out")]),
    ("elementwise_div", {"X": [_r(2, 3)], "Y": [_r(2, 3, lo=1.0, hi=2.0)]}, {}, [("X", "Out")]),
    ("sum", {"X": [_r(4, 5), _r(4, 5), _r(4, 5)]}, {}, [("X", "Out")]),
    ("reshape2", {"X": [_r(2, 6)]}, {"shape": [3, 4]}, [("X", "Out")]),
    ("sigmoid_grad", {"Out": [_probs(2, 3)], "Out@GRAD": [_r(2, 3)]}, {}, [("Out@GRAD", "X@GRAD")]),
    ("softmax_grad", {"Out": [_probs(3, 4)], "Out@GRAD": [_r(3, 4)]}, {"axis": -1}, [("Out@GRAD", "X@GRAD")]),
    ("softmax_grad", {"Out": [_probs(3, 4, 2)], "Out@GRAD": [_r(3, 4, 2)]}, {"axis": 1}, [("Out@GRAD", "X@GRAD")]),
    ("log_softmax_grad", {"Out": [np.log(_probs(3, 4))], "Out@GRAD": [_r(3, 4)]}, {"axis": -1},
     [("Out@GRAD", "X@GRAD")]),
    ("gelu_grad", {"X": [_r(2, 3)], "Out@GRAD": [_r(2, 3)]}, {}, [("Out@GRAD", "X@GRAD")]),
    ("leaky_relu_grad", {"X": [_r(2, 3)], "Out@GRAD": [_r(2, 3)]}, {"alpha": 0.1}, [("Out@GRAD", "X@GRAD")]),
    ("softmax_with_cross_entropy_grad",
     {"Label": [np.array([[1], [2], [0]], np.int64)], "Softmax": [_probs(3, 4)], "Loss@GRAD": [_r(3, 1)]}, {},
     [("Softmax", "Logits@GRAD")]),
    ("clip_by_global_norm", {"X": [_r(3, 2), _r(4)]}, {"max_global_norm": 0.5}, [("X", "Out")]),
    ("sgd", {"Param": [_r(5)], "Grad": [_r(5)], "LearningRate": [np.array([0.1], np.float32)]}, {},
     [("Param", "ParamOut")]),
    ("momentum", {"Param": [_r(5)], "Grad": [_r(5)], "Velocity": [_r(5)],
                  "LearningRate": [np.array([0.1], np.float32)]}, {"use_nesterov": True},
     [("Param", "ParamOut"), ("Velocity", "VelocityOut")]),
    ("adam", {"Param": [_r(5)], "Grad": [_r(5)], "LearningRate": [np.array([0.1], np.float32)],
              "Moment1": [_r(5)], "Moment2": [_r(5, lo=0.0)], "Beta1Pow": [np.array([0.9], np.float32)],
              "Beta2Pow": [np.array([0.999], np.float32)]}, {},
     [("Param", "ParamOut"), ("Moment1", "Moment1Out"), ("Moment2", "Moment2Out"),
      ("Beta1Pow", "Beta1PowOut"), ("Beta2Pow", "Beta2PowOut")]),
    ("batch_norm", {"X": [_r(4, 3, 2)], "Scale": [_r(3)], "Bias": [_r(3)], "Mean": [_r(3)],
                    "Variance": [_r(3, lo=0.5)]}, {"momentum": 0.8},
     [("Mean", "MeanOut"), ("Variance", "VarianceOut")]),
]

_ALIAS_ROWS += [
    ("tanh_grad", {"Out": [_r(2, 3)], "Out@GRAD": [_r(2, 3)]}, {}, [("Out@GRAD", "X@GRAD")]),
    ("relu_grad", {"Out": [_r(2, 3, lo=0.0)], "Out@GRAD": [_r(2, 3)]}, {}, [("Out@GRAD", "X@GRAD")]),
    ("dropout_grad", {"Mask": [(_r(2, 3) > 0).astype(np.uint8)], "Out@GRAD": [_r(2, 3)]}, {"dropout_prob": 0.3},
     [("Out@GRAD", "X@GRAD")]),
    ("dropout", {"X": [_r(4, 5)], "Step": [np.array([3], np.int64)]}, {"dropout_prob": 0.5},
     [("Step", "StepOut")]),
    ("merged_sgd", {"Param": [_r(5), _r(3, 2)], "Grad": [_r(5), _r(3, 2)],
                    "LearningRate": [np.array([0.1], np.float32)]}, {}, [("Param", "ParamOut")]),
    ("squeeze2", {"X": [_r(2, 1, 3)]}, {"axes": [1]}, [("X", "Out")]),
    ("exp", {"X": [_r(2, 3)]}, {}, [("X", "Out")]),
    ("increment", {"X": [_r(1)]}, {"step": 2.0}, [("X", "Out")]),
    ("relu6", {"X": [_r(2, 3, lo=-1.0, hi=8.0)]}, {}, [("X", "Out")]),
    ("softplus_grad", {"X": [_r(2, 3)], "Out@GRAD": [_r(2, 3)]}, {}, [("Out@GRAD", "X@GRAD")]),
    ("elu_grad", {"X": [_r(2, 3)], "Out": [_r(2, 3)], "Out@GRAD": [_r(2, 3)]}, {}, [("Out@GRAD", "X@GRAD")]),
    ("selu_grad", {"Out": [_r(2, 3)], "Out@GRAD": [_r(2, 3)]}, {}, [("Out@GRAD", "X@GRAD")]),
    ("round_grad", {"Out@GRAD": [_r(2, 3)]}, {}, [("Out@GRAD", "X@GRAD")]),
    ("elementwise_max", {"X": [_r(2, 3)], "Y": [_r(3)]}, {}, [("X", "Out")]),
    ("elementwise_pow", {"X": [_r(2, 3, lo=0.5, hi=2.0)], "Y": [_r(2, 3)]}, {}, [("X", "Out")]),
    ("elementwise_floordiv", {"X": [_r(2, 3)], "Y": [_r(3, lo=0.5, hi=2.0)]}, {}, [("X", "Out")]),
    ("logical_xor", {"X": [_r(2, 3) > 0], "Y": [_r(3) > 0]}, {}, [("X", "Out")]),
    ("logical_not", {"X": [_r(2, 3) > 0]}, {}, [("X", "Out")]),
    ("where", {"Condition": [_r(2, 3) > 0], "X": [_r(2, 3)], "Y": [_r(2, 3)]}, {}, [("X", "Out")]),
    ("scatter", {"X": [_r(4, 3)], "Ids": [np.array([2, 0, 2], np.int64)], "Updates": [_r(3, 3)]},
     {"overwrite": False}, [("X", "Out")]),
    ("sigmoid_cross_entropy_with_logits_grad", {"X": [_r(2, 3)], "Label": [_r(2, 3, lo=0.0)], "Out@GRAD": [_r(2, 3)]},
     {}, [("Out@GRAD", "X@GRAD")]),
    ("label_smooth_grad", {"Out@GRAD": [_r(2, 3)]}, {"epsilon": 0.1}, [("Out@GRAD", "X@GRAD")]),
]

_OUT_SLOTS = {"batch_norm": [("Y", "float32")], "dropout": [("Out", "float32"), ("Mask", "uint8")]}


def _run_alias_row(op, ins, attrs, pairs, aliased):
    main, startup = pe.static.Program(), pe.static.Program()
    blk = main.global_block()
    feed, inputs = {}, {}
    for slot, arrays in ins.items():
        names = []
        for k, a in enumerate(arrays):
            name = "%s_%d" % (slot.replace("@", "_"), k)
            # an in-place reshape changes its var's shape: declare the dims unknown
            shape = [-1] * a.ndim if op == "reshape2" else list(a.shape)
            blk.create_var(name=name, shape=shape, dtype=a.dtype.name)
            feed[name] = a
            names.append(name)
        inputs[slot] = names
    outputs, fetch = {}, []
    for in_slot, out_slot in pairs:
        names = []
        for k, n in enumerate(inputs[in_slot][:1] if op == "sum" else inputs[in_slot]):  # sum: one Out
            name = n if aliased else "out_%s_%d" % (out_slot.replace("@", "_"), k)
            if not aliased:
                blk.create_var(name=name, shape=[], dtype=feed[n].dtype.name)
            names.append(name)
        outputs[out_slot] = names
        fetch += names
    for slot, dtype in _OUT_SLOTS.get(op, []):
        blk.create_var(name="other_" + slot, shape=[], dtype=dtype)
        outputs[slot] = ["other_" + slot]
        fetch.append("other_" + slot)
    blk.append_op(type=op, inputs=inputs, outputs=outputs, attrs=attrs)
    return pe.static.Executor().run(main, feed=feed, fetch_list=fetch, scope=pe.static.Scope())


@pytest.mark.parametrize("row", _ALIAS_ROWS, ids=["%s-%d" % (r[0], i) for i, r in enumerate(_ALIAS_ROWS)])
def test_declared_pairs_give_the_same_result_in_place(row):
    op, ins, attrs, pairs = row
    fresh = _run_alias_row(op, ins, attrs, pairs, aliased=False)
    inplace = _run_alias_row(op, ins, attrs, pairs, aliased=True)
    assert len(fresh) == len(inplace)
    for a, b in zip(fresh, inplace):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
