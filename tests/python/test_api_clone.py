"""tests/python/test_api_clone.py — Program.clone(for_test=True) and friends.

The test copy of a training program must: drop every backward and optimizer
op (and the gradient vars only they used), set is_test on dropout and
batch_norm, detach dropout's step counter, leave the original program
untouched, and compute the inference function: dropout is the identity
(upscale_in_train), batch_norm normalizes with the running statistics,
and running it changes no persistable state. Also: a plain clone is an
exact copy, and names follow Paddle's unique-name scheme.
"""
import numpy as np

import pe
from pe.utils import unique_name

pe.enable_static()


def build(train_clone_after_minimize):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        img = pe.static.data("img", [None, 3, 4, 4], "float32")
        label = pe.static.data("label", [None, 1], "int64")
        h = pe.static.nn.batch_norm(img, act="relu")
        h = pe.flatten(h, start_axis=1)
        h = pe.nn.functional.dropout(h, p=0.5, training=True)
        logits = pe.static.nn.fc(h, 5)
        loss = pe.nn.functional.cross_entropy(logits, label)
        early = main.clone(for_test=True)
        pe.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
        late = main.clone(for_test=True)
    return main, startup, (late if train_clone_after_minimize else early), img, label, h, logits, loss


def op_types(p):
    return [op.type for op in p.global_block().ops]


def test_names_follow_paddle():
    main, startup, test, *_ = build(True)
    names = set(main.global_block().vars)
    for n in ["batch_norm_0.w_0", "batch_norm_0.b_0", "batch_norm_0.w_1", "batch_norm_0.w_2", "batch_norm_0.tmp_2",
              "fc_0.w_0", "fc_0.b_0", "fc_0.tmp_0", "fc_0.tmp_1", "dropout_0.tmp_0"]:
        assert n in names, n
    assert {p.name for p in main.all_parameters()} == {
        "batch_norm_0.w_0", "batch_norm_0.b_0", "batch_norm_0.w_1", "batch_norm_0.w_2", "fc_0.w_0", "fc_0.b_0"}


def test_clone_for_test_structure():
    main, startup, test, *_ = build(True)
    types = op_types(test)
    assert not any(t.endswith("_grad") or t in ("momentum", "sgd", "adam", "fill_any_like") for t in types), types
    assert "momentum" in op_types(main) and any(t.endswith("_grad") for t in op_types(main))
    for p in (test,):
        for op in p.global_block().ops:
            if op.type in ("dropout", "batch_norm"):
                assert op.attr("is_test") is True
            if op.type == "dropout":
                assert "Step" not in op.input_names and "StepOut" not in op.output_names
    for op in main.global_block().ops:  # the original is untouched
        if op.type in ("dropout", "batch_norm") and "_grad" not in op.type:
            assert op.attr("is_test") is False
    assert not any("@GRAD" in n for n in test.global_block().vars)
    early = build(False)[2]
    assert op_types(early) == op_types(test)


def test_plain_clone_is_identical():
    main, *_ = build(True)
    c = main.clone()
    assert c.to_json() == main.to_json()
    assert c.random_seed == main.random_seed
    assert all(isinstance(p, pe.static.Parameter) for p in c.all_parameters())


def test_test_program_computes_inference():
    main, startup, test, img, label, h, logits, loss = build(True)
    scope = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(0)
    x = rng.randn(6, 3, 4, 4).astype(np.float32)
    y = rng.randint(0, 5, (6, 1)).astype(np.int64)
    for _ in range(3):  # move the running statistics away from (0, 1)
        exe.run(main, feed={"img": x, "label": y}, fetch_list=[loss], scope=scope)

    def state():
        return {n: np.array(scope.find_var(n).get_tensor()).copy()
                for n in ["batch_norm_0.w_1", "batch_norm_0.w_2", "dropout_0.step_0", "fc_0.w_0"]}

    s0 = state()
    assert s0["dropout_0.step_0"][0] == 3
    got_h, got_logits = exe.run(test, feed={"img": x, "label": y}, fetch_list=[h, logits], scope=scope)
    for k, v in state().items():  # inference changes no state
        np.testing.assert_array_equal(v, s0[k], err_msg=k)
    g = lambda n: np.array(scope.find_var(n).get_tensor()).astype(np.float64)  # noqa: E731
    mean, var, gamma, beta = g("batch_norm_0.w_1"), g("batch_norm_0.w_2"), g("batch_norm_0.w_0"), g("batch_norm_0.b_0")
    assert np.abs(mean).max() > 1e-3  # trained statistics, not the initial zeros
    xn = (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
    want_h = np.maximum(xn * gamma[None, :, None, None] + beta[None, :, None, None], 0).reshape(6, -1)
    np.testing.assert_allclose(got_h, want_h, rtol=1e-4, atol=1e-5)  # dropout is the identity
    np.testing.assert_allclose(got_logits, want_h @ g("fc_0.w_0") + g("fc_0.b_0"), rtol=1e-4, atol=1e-5)
    # the training program's dropout does drop (about half of the entries)
    tr_h, = exe.run(main, feed={"img": x, "label": y}, fetch_list=[h], scope=scope)
    zero_frac = float(np.mean(tr_h == 0))
    assert 0.5 < zero_frac < 0.95, zero_frac  # relu zeros plus dropped ones


def test_random_seed_round_trip():
    p = pe.static.Program()
    p.random_seed = 1234
    assert p.random_seed == 1234
    assert p.clone().random_seed == 1234
    assert p._core_program().random_seed == 1234


def test_nonfinite_attrs_survive_c_passes():
    """inf / nan attr values go through the engine's JSON and back (append_backward, clone)."""
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 2], "float32")
        lo, nan = pe.full([1], float("-inf")), pe.full([1], float("nan"))
        pe.static.append_backward(pe.mean(pe.static.nn.fc(x, 2)))
    vals = [op.attr("value") for op in main.clone(for_test=True).global_block().ops if op.type == "fill_constant"]
    assert vals[0] == float("-inf") and np.isnan(vals[1])
    exe = pe.static.Executor()
    scope = pe.static.Scope()
    exe.run(startup, scope=scope)
    got_lo, got_nan = exe.run(main, feed={"x": np.ones((1, 2), np.float32)}, fetch_list=[lo, nan], scope=scope)
    assert got_lo[0] == -np.inf and np.isnan(got_nan[0])
