"""tests/python/test_sparse_embedding.py — is_sparse=True embeddings.

Paddle gives the table of an embedding with is_sparse=True a sparse
(SelectedRows) gradient: the looked-up rows only. PE trains it with the
dense gradient of the whole table (zero in the rows no id looked up), and
that is Paddle's update: with a regularizer Paddle sums the SelectedRows
gradient with the decay of the whole table into a dense gradient; without
one, Paddle's sparse sgd / adagrad change only the looked-up rows (a zero
gradient leaves a row unchanged) and its sparse momentum / adam / rmsprop /
lamb (and adamw's whole-table decay) update every row with a zero gradient
for the absent ones. The tests:

  - table-driven: every optimizer, with no regularizer, L2Decay and
    L1Decay, trains an is_sparse=True table bit-identically to the
    is_sparse=False one (through fluid.embedding, fluid.layers.embedding and
    pe.static.nn.embedding), and the op carries is_sparse;
  - against numpy references written from Paddle's sparse semantics
    (SelectedRows rows merged by id; SGD with L2Decay over the whole table;
    Adagrad updating the merged rows only; Adagrad with L2Decay dense);
  - the refusals, each naming the parameter and the optimizer or layer:
    is_distributed=True, adamax without a regularizer (Paddle's adamax has
    no sparse kernel), adagrad with epsilon = 0 and a zero initial
    accumulator without a regularizer, clipping by value to a range
    without 0, Adam / AdamW lazy_mode.
"""
import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.utils import unique_name

V, D, N = 12, 3, 6
# ids with repeats (merged rows) and rows never looked up (4, 6, 8, 9, 10, 11)
IDS = [np.array([[1], [3], [1], [0], [7], [3]], "int64"),
       np.array([[2], [5], [5], [1], [0], [7]], "int64"),
       np.array([[3], [3], [3], [2], [1], [5]], "int64")]
W0 = (np.arange(V * D, dtype="float32").reshape(V, D) / 10.0 - 1.5).astype("float32")
TARGETS = [np.linspace(-1, 1, N * D, dtype="float32").reshape(N, 1, D),
           np.linspace(2, -1, N * D, dtype="float32").reshape(N, 1, D),
           np.cos(np.arange(N * D, dtype="float32")).reshape(N, 1, D)]
FC0 = np.array([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3], [-0.1, 0.2, 0.5]], "float32")


def _optimizers():
    L2, L1 = fluid.regularizer.L2Decay, fluid.regularizer.L1Decay
    rows = []
    for reg in (None, "l2", "l1"):
        def r(reg=reg):
            return None if reg is None else L2(0.05) if reg == "l2" else L1(0.01)
        rows += [
            ("sgd", reg, lambda r=r: fluid.optimizer.SGD(learning_rate=0.5, regularization=r())),
            ("momentum", reg, lambda r=r: fluid.optimizer.Momentum(learning_rate=0.2, momentum=0.9,
                                                                   regularization=r())),
            ("nesterov", reg, lambda r=r: fluid.optimizer.Momentum(learning_rate=0.2, momentum=0.9,
                                                                   use_nesterov=True, regularization=r())),
            ("adam", reg, lambda r=r: fluid.optimizer.Adam(learning_rate=0.1, regularization=r())),
            ("adagrad", reg, lambda r=r: fluid.optimizer.Adagrad(learning_rate=0.3, regularization=r())),
            ("rmsprop", reg, lambda r=r: fluid.optimizer.RMSProp(learning_rate=0.05, momentum=0.5, centered=True,
                                                                 regularization=r())),
            ("lamb", reg, lambda r=r: fluid.optimizer.Lamb(learning_rate=0.05, regularization=r())),
        ]
        if reg is None:  # AdamW's decay is its own, decoupled, over the whole table
            rows.append(("adamw", reg, lambda: pe.optimizer.AdamW(learning_rate=0.1, weight_decay=0.1)))
        else:  # adamax with a regularizer: Paddle's gradient is dense
            rows.append(("adamax", reg, lambda r=r: fluid.optimizer.Adamax(learning_rate=0.1, regularization=r())))
    return rows


OPTIMIZERS = _optimizers()


def build(layer, is_sparse, make_opt, table_attr=None):
    """ids [N, 1] -> table lookup -> squared error against a fed target; returns (main, startup, table name)."""
    main, startup = pe.static.Program(), pe.static.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        ids = fluid.data(name="ids", shape=[None, 1], dtype="int64")
        tgt = fluid.data(name="tgt", shape=[None, 1, D], dtype="float32")
        attr = fluid.ParamAttr(name="table", initializer=fluid.initializer.Assign(W0))
        if layer == "fluid.embedding":
            emb = fluid.embedding(ids, size=[V, D], is_sparse=is_sparse, param_attr=attr)
        elif layer == "fluid.layers.embedding":
            emb = fluid.layers.reshape(fluid.layers.embedding(ids, size=[V, D], is_sparse=is_sparse,
                                                              param_attr=attr), [-1, 1, D])
        else:
            emb = pe.static.nn.embedding(ids, size=[V, D], is_sparse=is_sparse, param_attr=attr)
        # a second layer so the optimizer also updates a dense parameter
        h = fluid.layers.fc(emb, size=D, num_flatten_dims=2,
                            param_attr=fluid.ParamAttr(initializer=fluid.initializer.Assign(FC0)),
                            bias_attr=False)
        loss = fluid.layers.mean(fluid.layers.square(fluid.layers.elementwise_sub(h, tgt)))
        make_opt().minimize(loss)
    ops = [op for op in main.global_block().ops if op.type in ("lookup_table", "lookup_table_v2")]
    assert len(ops) == 1 and bool(ops[0].attr("is_sparse")) == is_sparse
    return main, startup, loss


def train(main, startup, loss, steps=len(IDS)):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = [float(exe.run(main, feed={"ids": IDS[k % len(IDS)], "tgt": TARGETS[k % len(IDS)]}, fetch_list=[loss])[0])
                  for k in range(steps)]
        return np.array(scope.find_var("table").get_tensor()), losses


@pytest.mark.parametrize("name,reg,make_opt", OPTIMIZERS, ids=["%s-%s" % (n, r) for n, r, _ in OPTIMIZERS])
def test_sparse_trains_as_dense(name, reg, make_opt):
    sparse = train(*build("fluid.embedding", True, make_opt))
    dense = train(*build("fluid.embedding", False, make_opt))
    np.testing.assert_array_equal(sparse[0], dense[0])
    assert sparse[1] == dense[1]
    assert not np.array_equal(sparse[0], W0)  # the table trained
    never = [r for r in range(V) if not any(r in ids for ids in IDS)]
    if reg is None and name in ("sgd", "adagrad"):  # Paddle's sparse kernels leave these rows
        np.testing.assert_array_equal(sparse[0][never], W0[never])


@pytest.mark.parametrize("layer", ["fluid.layers.embedding", "pe.static.nn.embedding"])
def test_other_layers_sparse_as_dense(layer):
    def opt():
        return fluid.optimizer.Adagrad(learning_rate=0.3, regularization=fluid.regularizer.L2Decay(0.05))
    sparse = train(*build(layer, True, opt))
    dense = train(*build(layer, False, opt))
    np.testing.assert_array_equal(sparse[0], dense[0])


# ---- numpy references of Paddle's sparse semantics ---------------------------------------------------

def _selected_rows_grad(w, fc_w, ids, tgt):
    """The SelectedRows gradient of the table (rows = the ids, one value row per id) for
    loss = mean((emb @ fc_w - tgt)^2), merged by id (Paddle's MergeAdd); also the fc weight's gradient."""
    emb = w[ids[:, 0]][:, None, :]  # [N, 1, D]
    h = emb @ fc_w
    dh = 2.0 * (h - tgt) / h.size
    demb = (dh @ fc_w.T)[:, 0, :]  # [N, D], one row per id
    dfc = np.einsum("nki,nkj->ij", emb, dh)
    rows = np.unique(ids[:, 0])
    merged = np.stack([demb[ids[:, 0] == r].sum(0) for r in rows])
    return rows, merged, dfc


def reference(kind, steps=len(IDS), lr=0.0, coeff=0.0, eps=1e-6):
    w = W0.astype("float64")
    fc_w = FC0.astype("float64")
    mom_w, mom_fc = np.zeros_like(w), np.zeros_like(fc_w)
    for k in range(steps):
        rows, g, dfc = _selected_rows_grad(w, fc_w, IDS[k % len(IDS)], TARGETS[k % len(IDS)])
        if kind == "sgd_l2":  # regularizer: sum(SelectedRows, coeff * W) -> dense gradient
            dense = coeff * w
            dense[rows] += g
            w = w - lr * dense
            fc_w = fc_w - lr * (dfc + coeff * fc_w)
        elif kind == "adagrad":  # sparse adagrad: the merged rows only
            mom_w[rows] += g * g
            w[rows] -= lr * g / (np.sqrt(mom_w[rows]) + eps)
            mom_fc += dfc * dfc
            fc_w = fc_w - lr * dfc / (np.sqrt(mom_fc) + eps)
        elif kind == "adagrad_l2":
            dense = coeff * w
            dense[rows] += g
            mom_w += dense * dense
            w = w - lr * dense / (np.sqrt(mom_w) + eps)
            dfc = dfc + coeff * fc_w
            mom_fc += dfc * dfc
            fc_w = fc_w - lr * dfc / (np.sqrt(mom_fc) + eps)
    return w


@pytest.mark.parametrize("layer", ["fluid.embedding", "fluid.layers.embedding"])
@pytest.mark.parametrize("kind", ["sgd_l2", "adagrad", "adagrad_l2"])
def test_against_paddle_sparse_reference(kind, layer):
    lr, coeff = (0.5, 0.05) if kind == "sgd_l2" else (0.1, 0.05)
    reg = fluid.regularizer.L2Decay(coeff) if kind.endswith("l2") else None
    if kind == "sgd_l2":
        def opt():
            return fluid.optimizer.SGD(learning_rate=lr, regularization=reg)
    else:
        def opt():
            return fluid.optimizer.Adagrad(learning_rate=lr, regularization=reg)
    got, _ = train(*build(layer, True, opt))
    want = reference(kind, lr=lr, coeff=coeff)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    # the rows no id looked up: decayed by the whole-table regularizer, else untouched
    never = [r for r in range(V) if not any(r in ids for ids in IDS)]
    if reg is None:
        np.testing.assert_array_equal(got[never], W0[never])
    else:
        assert np.all(got[never] != W0[never])


# ---- refusals ---------------------------------------------------------------------------------------

def _minimize(opt, is_sparse=True, clip=None):
    main, startup = pe.static.Program(), pe.static.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        if clip is not None:
            fluid.clip.set_gradient_clip(clip)
        ids = fluid.data(name="ids", shape=[None, 1], dtype="int64")
        emb = fluid.embedding(ids, size=[V, D], is_sparse=is_sparse, param_attr="tbl")
        loss = fluid.layers.mean(emb)
        opt.minimize(loss)
    return main


def test_adamax_needs_a_regularizer():
    with pytest.raises(pe.UnsupportedError, match=r"parameter 'tbl' is a sparse table \(lookup_table_v2 "
                                                   r"is_sparse=true\) updated by adamax without a regularizer"):
        _minimize(fluid.optimizer.Adamax(learning_rate=0.1))
    _minimize(fluid.optimizer.Adamax(learning_rate=0.1, regularization=fluid.regularizer.L2Decay(1e-3)))
    _minimize(fluid.optimizer.Adamax(learning_rate=0.1), is_sparse=False)


def test_adagrad_zero_epsilon():
    with pytest.raises(pe.UnsupportedError, match=r"parameter 'tbl' .* adagrad with epsilon = 0"):
        _minimize(fluid.optimizer.Adagrad(learning_rate=0.1, epsilon=0.0))
    _minimize(fluid.optimizer.Adagrad(learning_rate=0.1, epsilon=0.0, initial_accumulator_value=0.1))
    _minimize(fluid.optimizer.Adagrad(learning_rate=0.1, epsilon=0.0, regularization=fluid.regularizer.L1Decay(1e-3)))


def test_clip_by_value_without_zero():
    with pytest.raises(pe.UnsupportedError, match=r"parameter 'tbl' is a sparse table .* clipped by value to "
                                                   r"\[0.1, 1\]"):
        _minimize(fluid.optimizer.SGD(learning_rate=0.1), clip=fluid.clip.GradientClipByValue(max=1.0, min=0.1))
    _minimize(fluid.optimizer.SGD(learning_rate=0.1), clip=fluid.clip.GradientClipByValue(max=1.0, min=-1.0))


def test_lazy_mode_refused():
    for cls in (pe.optimizer.Adam, pe.optimizer.AdamW):
        with pytest.raises(pe.UnsupportedError, match=r"%s: lazy_mode=True" % cls.__name__):
            cls(learning_rate=0.1, lazy_mode=True)


def test_distributed_refused():
    main, startup = pe.static.Program(), pe.static.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.data(name="ids", shape=[None, 1], dtype="int64")
        with pytest.raises(pe.UnsupportedError, match=r"fluid.embedding\(is_distributed=True\)"):
            fluid.embedding(ids, size=[V, D], is_distributed=True)
        with pytest.raises(pe.UnsupportedError, match=r"fluid.layers.embedding\(is_distributed=True\)"):
            fluid.layers.embedding(ids, size=[V, D], is_sparse=True, is_distributed=True)
        with pytest.raises(pe.UnsupportedError, match=r"embedding\(is_distributed=True\)"):
            pe.static.nn.embedding(ids, size=[V, D], is_distributed=True)
        # a program that has one anyway (an imported Paddle program): minimize names the table
        emb = fluid.embedding(ids, size=[V, D], param_attr="dist_tbl")
        main.global_block().ops[-1]._set_attr("is_distributed", True)
        loss = fluid.layers.mean(emb)
        with pytest.raises(pe.UnsupportedError, match=r"parameter 'dist_tbl' is the table of a lookup_table_v2 op "
                                                       r"with is_distributed=true"):
            fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
