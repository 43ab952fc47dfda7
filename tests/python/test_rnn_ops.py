"""tests/python/test_rnn_ops.py — Paddle 1.x's lstm / gru ops through fluid.layers.dynamic_lstm
and dynamic_gru, over LoD sequences.

Forward: against references that loop over the sequences and their steps as Paddle's
lstm / gru ops define them (gate columns {candidate, input, forget, output} for lstm, peephole
weights after the bias, {update, reset, candidate} for gru with its [H, 2H] + [H, H] weight
layout), for several LoDs (length-1 sequences, one long one), is_reverse, peepholes on and off,
H0 / C0, each activation; and against torch.nn.LSTMCell / GRUCell where Paddle's math is
theirs (lstm without peepholes: a permutation of the gates; gru with origin_mode at hidden size
1, where resetting h before or after the candidate product is the same). Gradients of the
input, weight, bias, H0 and C0 against torch autograd of the same loop (float64), with a loss
over Hidden and Cell. The ParallelExecutor with a LoD feed through dynamic_lstm on 2 and 3
places equals 1 place (outputs and trained parameters). The book chapter understand_sentiment's
stacked_lstm_net (the book's code: embedding with is_sparse=True, fc, 3 dynamic_lstm layers
alternating is_reverse, max pools, fc softmax, Adagrad) trains on a synthetic IMDB-like LoD set with the loss falling, and
save_inference_model / load_inference_model give the same predictions.
"""
import numpy as np
import pytest
import torch

import pe
import pe.fluid as fluid
from pe.utils import unique_name

torch.set_num_threads(1)

ACTS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu, "identity": lambda v: v}


def offsets(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(int)


def ref_lstm(x, w, b, lens, h0=None, c0=None, peep=True, rev=False, gate="sigmoid", cell="tanh", cand="tanh"):
    """Paddle's lstm op, one sequence and one step at a time (torch tensors, differentiable)."""
    H = w.shape[0]
    ga, ca, na = ACTS[gate], ACTS[cell], ACTS[cand]
    hid, cel = [None] * x.shape[0], [None] * x.shape[0]
    off = offsets(lens)
    for s in range(len(lens)):
        h = h0[s] if h0 is not None else x.new_zeros(H)
        c = c0[s] if c0 is not None else x.new_zeros(H)
        rows = range(off[s], off[s + 1])
        for r in (reversed(rows) if rev else rows):
            g = x[r] + b[0, :4 * H] + h @ w
            gc, gi, gf, go = g[:H], g[H:2 * H], g[2 * H:3 * H], g[3 * H:]
            if peep:
                gi = gi + c * b[0, 4 * H:5 * H]
                gf = gf + c * b[0, 5 * H:6 * H]
            i, f = ga(gi), ga(gf)
            c = na(gc) * i + c * f
            o = ga(go + c * b[0, 6 * H:] if peep else go)
            h = o * ca(c)
            hid[r], cel[r] = h, c
    if not hid:
        return x.new_zeros(0, H), x.new_zeros(0, H)
    return torch.stack(hid), torch.stack(cel)


def ref_gru(x, w, b, lens, h0=None, rev=False, gate="sigmoid", act="tanh", origin=False):
    """Paddle's gru op: Weight's first H*2H elements are W_ur [H, 2H], the last H*H W_c [H, H]."""
    H = w.shape[0]
    flat = w.reshape(-1)
    wur, wc = flat[:2 * H * H].reshape(H, 2 * H), flat[2 * H * H:].reshape(H, H)
    ga, na = ACTS[gate], ACTS[act]
    bb = b[0] if b is not None else x.new_zeros(3 * H)
    hid = [None] * x.shape[0]
    off = offsets(lens)
    for s in range(len(lens)):
        h = h0[s] if h0 is not None else x.new_zeros(H)
        rows = range(off[s], off[s + 1])
        for r in (reversed(rows) if rev else rows):
            ur = ga(x[r, :2 * H] + bb[:2 * H] + h @ wur)
            u, rg = ur[:H], ur[H:]
            c = na(x[r, 2 * H:] + bb[2 * H:] + (rg * h) @ wc)
            h = u * h + (1 - u) * c if origin else (1 - u) * h + u * c
            hid[r] = h
    return torch.stack(hid) if hid else x.new_zeros(0, H)


def build(kind, H, dtype, lens, h0=False, c0=False, **kw):
    """A program: x (LoD) -> dynamic_lstm / dynamic_gru; loss = sum(hidden * R1) (+ sum(cell * R2))."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        width = 4 * H if kind == "lstm" else 3 * H
        x = fluid.layers.data(name="x", shape=[width], dtype=dtype, lod_level=1, stop_gradient=False)
        r1 = fluid.layers.data(name="r1", shape=[H], dtype=dtype)
        r2 = fluid.layers.data(name="r2", shape=[H], dtype=dtype)
        hv = fluid.layers.data(name="h0", shape=[H], dtype=dtype, stop_gradient=False) if h0 else None
        cv = fluid.layers.data(name="c0", shape=[H], dtype=dtype, stop_gradient=False) if c0 else None
        if kind == "lstm":
            hid, cell = fluid.layers.dynamic_lstm(x, 4 * H, h_0=hv, c_0=cv, dtype=dtype,
                                                  param_attr=fluid.ParamAttr(name="w"),
                                                  bias_attr=fluid.ParamAttr(name="b"), **kw)
            loss = fluid.layers.elementwise_add(
                fluid.layers.reduce_sum(fluid.layers.elementwise_mul(hid, r1)),
                fluid.layers.reduce_sum(fluid.layers.elementwise_mul(cell, r2)))
        else:
            hid = fluid.layers.dynamic_gru(x, H, h_0=hv, param_attr=fluid.ParamAttr(name="w"),
                                           bias_attr=fluid.ParamAttr(name="b"), **kw)
            cell = None
            loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(hid, r1))
        wrt = [x, main.global_block().var("w"), main.global_block().var("b")] + [v for v in (hv, cv) if v is not None]
        grads = fluid.backward.gradients([loss], wrt)
    return main, startup, hid, cell, grads


def run(kind, H, dtype, lens, seed=0, h0=False, c0=False, peep=True, **kw):
    """pe's outputs and gradients, and the inputs fed, for one configuration."""
    rng = np.random.RandomState(seed)
    T, N = int(sum(lens)), len(lens)
    lkw = dict(kw)
    if kind == "lstm":
        lkw["use_peepholes"] = peep
    main, startup, hid, cell, gvars = build(kind, H, dtype, lens, h0, c0, **lkw)
    width = 4 * H if kind == "lstm" else 3 * H
    bw = (7 * H if peep else 4 * H) if kind == "lstm" else 3 * H
    vals = {"x": rng.uniform(-1, 1, (T, width)), "w": rng.uniform(-0.6, 0.6, (H, width)),
            "b": rng.uniform(-0.5, 0.5, (1, bw)), "r1": rng.randn(T, H), "r2": rng.randn(T, H)}
    if h0:
        vals["h0"] = rng.uniform(-1, 1, (N, H))
    if c0:
        vals["c0"] = rng.uniform(-1, 1, (N, H))
    vals = {k: v.astype(dtype) for k, v in vals.items()}
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        for p in ("w", "b"):
            scope.find_var(p).get_tensor().set(vals[p], fluid.CPUPlace())
        feed = {"x": fluid.create_lod_tensor(vals["x"], [list(lens)], fluid.CPUPlace()), "r1": vals["r1"],
                "r2": vals["r2"]}
        for k in ("h0", "c0"):
            if k in vals:
                feed[k] = vals[k]
        grads = ["x@GRAD", "w@GRAD", "b@GRAD"] + [k + "@GRAD" for k in ("h0", "c0") if k in vals]
        fetch = [hid] + ([cell] if cell is not None else []) + list(gvars)
        outs = exe.run(main, feed=feed, fetch_list=fetch, return_numpy=False)
    got = {"hidden": outs[0]}
    if cell is not None:
        got["cell"] = outs[1]
    for name, v in zip(grads, outs[-len(grads):]):
        got[name] = np.array(v)
    return got, vals


def torch_ref(kind, vals, lens, peep=True, **kw):
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in vals.items()}
    if kind == "lstm":
        hid, cell = ref_lstm(t["x"], t["w"], t["b"], lens, t.get("h0"), t.get("c0"), peep=peep,
                             rev=kw.get("is_reverse", False), gate=kw.get("gate_activation", "sigmoid"),
                             cell=kw.get("cell_activation", "tanh"), cand=kw.get("candidate_activation", "tanh"))
        loss = (hid * t["r1"]).sum() + (cell * t["r2"]).sum()
    else:
        hid = ref_gru(t["x"], t["w"], t["b"], lens, t.get("h0"), rev=kw.get("is_reverse", False),
                      gate=kw.get("gate_activation", "sigmoid"), act=kw.get("candidate_activation", "tanh"),
                      origin=kw.get("origin_mode", False))
        cell = None
        loss = (hid * t["r1"]).sum()
    wrt = [k for k in ("x", "w", "b", "h0", "c0") if k in t]
    gs = torch.autograd.grad(loss, [t[k] for k in wrt])
    out = {"hidden": hid.detach().numpy()}
    if cell is not None:
        out["cell"] = cell.detach().numpy()
    for k, g in zip(wrt, gs):
        out[k + "@GRAD"] = g.numpy()
    return out


LSTM_CASES = [
    ("lens_mixed", [3, 1, 5, 2], {}),
    ("single_seq_len1", [1], {}),
    ("reverse", [4, 1, 3], {"is_reverse": True}),
    ("no_peepholes", [2, 6, 1], {"peep": False}),
    ("h0_c0", [3, 2, 1], {"h0": True, "c0": True}),
    ("h0_only_reverse", [2, 3], {"h0": True, "is_reverse": True}),
    ("acts", [3, 4], {"gate_activation": "sigmoid", "cell_activation": "relu", "candidate_activation": "identity"}),
    ("long", [30, 1, 17], {"c0": True}),
]


def _compare(got, want, tol):
    for k, v in want.items():
        np.testing.assert_allclose(np.array(got[k]), v, rtol=tol, atol=tol, err_msg=k)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,lens,kw", LSTM_CASES, ids=[c[0] for c in LSTM_CASES])
def test_lstm_forward_and_grads_vs_reference(name, lens, kw, dtype):
    kw = dict(kw)
    h0, c0, peep = kw.pop("h0", False), kw.pop("c0", False), kw.pop("peep", True)
    got, vals = run("lstm", 3, dtype, lens, seed=len(name), h0=h0, c0=c0, peep=peep, **kw)
    want = torch_ref("lstm", vals, lens, peep=peep, **kw)
    _compare(got, want, 1e-10 if dtype == "float64" else 2e-5)
    assert got["hidden"].recursive_sequence_lengths() == [list(lens)]
    assert got["cell"].recursive_sequence_lengths() == [list(lens)]


GRU_CASES = [
    ("lens_mixed", [3, 1, 5, 2], {}),
    ("single_seq_len1", [1], {}),
    ("reverse", [4, 1, 3], {"is_reverse": True}),
    ("origin_mode", [2, 6, 1], {"origin_mode": True}),
    ("h0", [3, 2, 1], {"h0": True}),
    ("h0_reverse_origin", [2, 3], {"h0": True, "is_reverse": True, "origin_mode": True}),
    ("acts", [3, 4], {"gate_activation": "sigmoid", "candidate_activation": "relu"}),
    ("long", [30, 1, 17], {}),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,lens,kw", GRU_CASES, ids=[c[0] for c in GRU_CASES])
def test_gru_forward_and_grads_vs_reference(name, lens, kw, dtype):
    kw = dict(kw)
    h0 = kw.pop("h0", False)
    got, vals = run("gru", 3, dtype, lens, seed=len(name), h0=h0, **kw)
    want = torch_ref("gru", vals, lens, **kw)
    _compare(got, want, 1e-10 if dtype == "float64" else 2e-5)
    assert got["hidden"].recursive_sequence_lengths() == [list(lens)]


def test_lstm_equals_torch_lstm_cell():
    """Without peepholes Paddle's lstm is torch's LSTMCell on the projected input with the gates
    permuted: Paddle's columns {c, i, f, o}, torch's rows {i, f, g, o}."""
    H, lens = 4, [3, 1, 4]
    got, vals = run("lstm", H, "float64", lens, seed=5, h0=True, c0=True, peep=False)
    perm = np.concatenate([np.arange(H, 2 * H), np.arange(2 * H, 3 * H), np.arange(0, H), np.arange(3 * H, 4 * H)])
    cell = torch.nn.LSTMCell(4 * H, H).double()
    with torch.no_grad():
        cell.weight_ih.copy_(torch.eye(4 * H, dtype=torch.float64)[perm])
        cell.weight_hh.copy_(torch.tensor(vals["w"][:, perm].T))
        cell.bias_ih.copy_(torch.tensor(vals["b"][0, perm]))
        cell.bias_hh.zero_()
        off = offsets(lens)
        for s in range(len(lens)):
            h, c = torch.tensor(vals["h0"][s:s + 1]), torch.tensor(vals["c0"][s:s + 1])
            for r in range(off[s], off[s + 1]):
                h, c = cell(torch.tensor(vals["x"][r:r + 1]), (h, c))
                np.testing.assert_allclose(np.array(got["hidden"])[r], h[0].numpy(), rtol=1e-10, atol=1e-12)
                np.testing.assert_allclose(np.array(got["cell"])[r], c[0].numpy(), rtol=1e-10, atol=1e-12)


def test_gru_equals_torch_gru_cell_at_hidden_size_1():
    """origin_mode's h = u h_prev + (1 - u) c is torch's GRUCell update; at hidden size 1 Paddle's
    (r h) W_c is torch's r (W_hn h), so the whole step maps (columns {u, r, c} -> rows {r, z, n})."""
    H, lens = 1, [4, 2, 1]
    got, vals = run("gru", H, "float64", lens, seed=2, h0=True, origin_mode=True)
    w = vals["w"].reshape(-1)
    wur, wc = w[:2].reshape(1, 2), w[2:].reshape(1, 1)
    cell = torch.nn.GRUCell(3, 1).double()
    with torch.no_grad():
        cell.weight_ih.copy_(torch.eye(3, dtype=torch.float64)[[1, 0, 2]])
        cell.weight_hh.copy_(torch.tensor([[wur[0, 1]], [wur[0, 0]], [wc[0, 0]]]))
        cell.bias_ih.copy_(torch.tensor(vals["b"][0, [1, 0, 2]]))
        cell.bias_hh.zero_()
        off = offsets(lens)
        for s in range(len(lens)):
            h = torch.tensor(vals["h0"][s:s + 1])
            for r in range(off[s], off[s + 1]):
                h = cell(torch.tensor(vals["x"][r:r + 1]), h)
                np.testing.assert_allclose(np.array(got["hidden"])[r], h[0].numpy(), rtol=1e-10, atol=1e-12)


def test_layer_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[8], dtype="float32", lod_level=1)
        with pytest.raises(pe.InvalidArgumentError, match="size=6 must be 4"):
            fluid.layers.dynamic_lstm(x, 6)
        with pytest.raises(pe.InvalidArgumentError, match="expected \\[T, size=12\\]"):
            fluid.layers.dynamic_lstm(x, 12)
        with pytest.raises(pe.InvalidArgumentError, match="gate_activation='softsign'"):
            fluid.layers.dynamic_lstm(x, 8, gate_activation="softsign")
        with pytest.raises(pe.InvalidArgumentError, match="expected \\[T, 3 \\* size = 6\\]"):
            fluid.layers.dynamic_gru(x, 2)
        hid, _ = fluid.layers.dynamic_lstm(x, 8)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    with pytest.raises(pe.InvalidArgumentError, match="Input 'x' has no LoD"):
        exe.run(main, feed={"x": np.zeros((3, 8), "float32")}, fetch_list=[hid])
    # H0 must have one row per sequence
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[6], dtype="float32", lod_level=1)
        h0 = fluid.layers.data(name="h0", shape=[2], dtype="float32")
        out = fluid.layers.dynamic_gru(x, 2, h_0=h0)
    exe.run(startup)
    with pytest.raises(pe.InvalidArgumentError, match="H0 'h0' has shape \\[3, 2\\] \\(expected \\[2, 2\\]"):
        exe.run(main, feed={"x": fluid.create_lod_tensor(np.zeros((4, 6), "float32"), [[1, 3]], fluid.CPUPlace()),
                            "h0": np.zeros((3, 2), "float32")}, fetch_list=[out])


# ---- the ParallelExecutor: whole sequences per place -------------------------------------------

def _lstm_net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="float32")
        h0 = fluid.layers.data(name="h0", shape=[5], dtype="float32")  # one row per sequence: split with them
        c0 = fluid.layers.data(name="c0", shape=[5], dtype="float32")
        emb = fluid.layers.embedding(words, size=[30, 6])
        proj = fluid.layers.fc(emb, 4 * 5)
        hid, cell = fluid.layers.dynamic_lstm(proj, 4 * 5, h_0=h0, c_0=c0, is_reverse=True)
        pooled = fluid.layers.sequence_pool(hid, "max")
        pred = fluid.layers.fc(pooled, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, label))
        fluid.optimizer.SGD(learning_rate=0.3).minimize(loss)
    return main, startup, [words, label, h0, c0], hid, loss


def test_dynamic_lstm_parallel_executor_1_2_3_places_equal_1():
    rng = np.random.RandomState(4)
    samples = [([int(w) for w in rng.randint(0, 30, n)], [float(rng.rand())], list(rng.uniform(-1, 1, 5)),
                list(rng.uniform(-1, 1, 5))) for n in [3, 1, 4, 2, 5, 1, 2]]
    res = {}
    for n in (0, 1, 2, 3):
        main, startup, feeds, hid, loss = _lstm_net()
        feeder = fluid.DataFeeder(feed_list=feeds, place=fluid.CPUPlace(), program=main)
        exe = fluid.Executor(fluid.CPUPlace())
        scope = fluid.Scope()
        with fluid.scope_guard(scope):
            startup.random_seed = 7
            exe.run(startup)
            prog = main if n == 0 else fluid.CompiledProgram(main).with_data_parallel(
                loss_name=loss.name, places=fluid.cpu_places(n))
            hs = []
            for _ in range(3):
                h, = exe.run(prog, feed=feeder.feed(samples), fetch_list=[hid], return_numpy=False)
                assert h.recursive_sequence_lengths() == [[3, 1, 4, 2, 5, 1, 2]]
                hs.append(np.array(h))
            res[n] = (hs, {p.name: np.array(scope.find_var(p.name).get_tensor())
                           for p in main.global_block().all_parameters()})
    for n in (1, 2, 3):
        for a, b in zip(res[0][0], res[n][0]):
            np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6, err_msg="%d places: hidden" % n)
        for k, v in res[0][1].items():
            np.testing.assert_allclose(res[n][1][k], v, rtol=2e-5, atol=1e-6, err_msg="%d places: %s" % (n, k))


# ---- the book: understand_sentiment's stacked_lstm_net ---------------------------------------

DICT, CLASSES, EMB, HID, STACKED = 60, 2, 16, 32, 3


def stacked_lstm_net(data, input_dim, class_dim, emb_dim, hid_dim, stacked_num):
    assert stacked_num % 2 == 1
    emb = fluid.layers.embedding(input=data, size=[input_dim, emb_dim], is_sparse=True)
    fc1 = fluid.layers.fc(input=emb, size=hid_dim)
    lstm1, cell1 = fluid.layers.dynamic_lstm(input=fc1, size=hid_dim)
    inputs = [fc1, lstm1]
    for i in range(2, stacked_num + 1):
        fc = fluid.layers.fc(input=inputs, size=hid_dim)
        lstm, cell = fluid.layers.dynamic_lstm(input=fc, size=hid_dim, is_reverse=(i % 2) == 0)
        inputs = [fc, lstm]
    fc_last = fluid.layers.sequence_pool(input=inputs[0], pool_type="max")
    lstm_last = fluid.layers.sequence_pool(input=inputs[1], pool_type="max")
    prediction = fluid.layers.fc(input=[fc_last, lstm_last], size=class_dim, act="softmax")
    return prediction


def imdb_like(n, seed):
    """Reviews of 2..12 words: class 1 uses words from the upper half of the dictionary more."""
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        y = int(rng.randint(0, 2))
        ln = int(rng.randint(2, 13))
        p = np.where(np.arange(DICT) >= DICT // 2, 3.0 if y else 1.0, 1.0 if y else 3.0)
        words = rng.choice(DICT, ln, p=p / p.sum())
        out.append(([int(w) for w in words], [y]))
    return out


def test_understand_sentiment_stacked_lstm_trains_and_infers(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        data = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        prediction = stacked_lstm_net(data, DICT, CLASSES, EMB, HID, STACKED)
        cost = fluid.layers.cross_entropy(input=prediction, label=label)
        avg_cost = fluid.layers.mean(cost)
        acc = fluid.layers.accuracy(input=prediction, label=label)
        test_program = main.clone(for_test=True)
        fluid.optimizer.Adagrad(learning_rate=0.02).minimize(avg_cost)
    lstm_ops = [op for op in main.global_block().ops if op.type == "lstm"]
    assert [op.attr("is_reverse") for op in lstm_ops] == [False, True, False]
    assert len([op for op in main.global_block().ops if op.type == "lstm_grad"]) == 3
    train = imdb_like(64, 1)
    exe = fluid.Executor(fluid.CPUPlace())
    feeder = fluid.DataFeeder(feed_list=[data, label], place=fluid.CPUPlace(), program=main)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        startup.random_seed = 3
        exe.run(startup)
        losses = []
        for epoch in range(6):
            for i in range(0, len(train), 16):
                loss, = exe.run(main, feed=feeder.feed(train[i:i + 16]), fetch_list=[avg_cost])
                losses.append(float(np.array(loss).reshape(-1)[0]))
        assert np.isfinite(losses).all()
        first, last = np.mean(losses[:4]), np.mean(losses[-4:])
        assert last < 0.8 * first, losses
        test = imdb_like(10, 9)
        want, = exe.run(test_program, feed=feeder.feed(test), fetch_list=[prediction])
        fluid.io.save_inference_model(str(tmp_path / "model"), ["words"], [prediction], exe, main_program=main)
    exe2 = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        prog, feed_names, fetch_targets = fluid.io.load_inference_model(str(tmp_path / "model"), exe2)
        assert feed_names == ["words"]
        assert [op.type for op in prog.global_block().ops].count("lstm") == 3
        words = fluid.create_lod_tensor([t[0] for t in test], [[len(t[0]) for t in test]], fluid.CPUPlace())
        got, = exe2.run(prog, feed={"words": words}, fetch_list=fetch_targets)
    np.testing.assert_array_equal(np.array(got), np.array(want))
