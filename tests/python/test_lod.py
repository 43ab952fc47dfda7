"""tests/python/test_lod.py — LoD (sequence) tensors, Paddle 1.x semantics.

create_lod_tensor / LoDTensor's lengths and offsets, their checks; a LoD
feed reaches the scope and comes back with the fetch (return_numpy=False),
kept by the ops that keep rows (fc, activations: Paddle's ShareLoD);
DataFeeder turns lists of variable-length sequences of a lod_level=1 var
into a LoDTensor; the ParallelExecutor splits a LoD feed by whole
sequences and merges the fetched LoDs, 2 and 3 places equal to 1.
"""
import numpy as np
import pytest

import pe
import pe.fluid as fluid
from pe.utils import unique_name


def fresh():
    return pe.static.Program(), pe.static.Program()


def test_create_lod_tensor_lengths_and_offsets():
    data = np.arange(10, dtype="float32").reshape(5, 2)
    t = fluid.create_lod_tensor(data, [[2, 3]], fluid.CPUPlace())
    assert isinstance(t, fluid.LoDTensor)
    assert t.recursive_sequence_lengths() == [[2, 3]]
    assert t.lod() == [[0, 2, 5]]
    assert t.has_valid_recursive_sequence_lengths()
    np.testing.assert_array_equal(np.array(t), data)
    t.set_lod([[0, 1, 5]])
    assert t.recursive_sequence_lengths() == [[1, 4]]
    t.set_recursive_sequence_lengths([[1, 1], [2, 3]])
    assert t.lod() == [[0, 1, 2], [0, 2, 5]]
    t.set_lod([])
    assert t.lod() == [] and t.recursive_sequence_lengths() == []
    # Paddle's order: lengths first, then set() the data (set keeps the LoD)
    u = fluid.LoDTensor()
    u.set_recursive_sequence_lengths([[3, 2]])
    u.set(data, fluid.CPUPlace())
    assert u.recursive_sequence_lengths() == [[3, 2]] and u.has_valid_recursive_sequence_lengths()
    # a list of int sequences: int64 [rows, 1]
    w = fluid.create_lod_tensor([[1, 2, 3], [4, 5]], [[3, 2]], fluid.CPUPlace())
    a = np.array(w)
    assert a.dtype == np.int64 and a.shape == (5, 1) and a[:, 0].tolist() == [1, 2, 3, 4, 5]
    assert w.lod() == [[0, 3, 5]]
    r = fluid.create_random_int_lodtensor([[2, 1]], [4], fluid.CPUPlace(), low=0, high=9)
    assert np.array(r).shape == (3, 4) and r.recursive_sequence_lengths() == [[2, 1]]
    # the lengths as a 2-D integer numpy array (Paddle's pybind takes it; the word2vec book passes one)
    n = fluid.create_lod_tensor(np.asarray([[211]], "int64"), np.asarray([[1]], "int64"), fluid.CPUPlace())
    assert n.recursive_sequence_lengths() == [[1]] and np.array(n).tolist() == [[211]]
    with pytest.raises(pe.InvalidArgumentError, match=r"as a numpy array must be 2-D of integers .* float64 \[2\]"):
        fluid.create_lod_tensor(data, np.array([2.0, 3.0]), fluid.CPUPlace())


def test_lod_errors():
    data = np.zeros((5, 1), "float32")
    with pytest.raises(pe.InvalidArgumentError, match="cover 4 rows, the data has 5"):
        fluid.create_lod_tensor(data, [[2, 2]], fluid.CPUPlace())
    with pytest.raises(pe.InvalidArgumentError, match="lengths \\[3, 2\\].*says \\[2, 3\\]"):
        fluid.create_lod_tensor([[1, 2, 3], [4, 5]], [[2, 3]], fluid.CPUPlace())
    t = fluid.LoDTensor()
    t.set(data, fluid.CPUPlace())
    with pytest.raises(pe.InvalidArgumentError, match="starts at 1, not 0"):
        t.set_lod([[1, 5]])
    with pytest.raises(pe.InvalidArgumentError, match="decreases at entry 2"):
        t.set_lod([[0, 3, 2, 5]])
    with pytest.raises(pe.InvalidArgumentError, match="negative length"):
        t.set_recursive_sequence_lengths([[6, -1]])
    with pytest.raises(pe.InvalidArgumentError, match="sequences of the level below"):
        t.set_recursive_sequence_lengths([[3], [2, 3]])
    assert t.lod() == []
    t.set_lod([[0, 2, 4]])  # structurally fine, but 4 rows of 5: refused at the feed
    assert not t.has_valid_recursive_sequence_lengths()
    main, startup = fresh()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[1], dtype="float32", lod_level=1)
        y = fluid.layers.relu(x)
    with pytest.raises(pe.InvalidArgumentError, match="feed 'x': its LoD's last level ends at 4, but the tensor has 5 rows"):
        fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": t}, fetch_list=[y])


def _seq_net():
    main, startup = fresh()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=1)
        h = fluid.layers.fc(x, 4, act="relu")
        loss = fluid.layers.mean(h)
    return main, startup, x, h, loss


def test_feed_lod_comes_back_with_fetch():
    main, startup, x, h, loss = _seq_net()
    assert x.lod_level == 1
    assert main.clone(for_test=True).global_block().vars["x"].lod_level == 1
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        data = np.random.RandomState(0).rand(6, 3).astype("float32")
        t = fluid.create_lod_tensor(data, [[1, 3, 2]], fluid.CPUPlace())
        xo, ho, lo = exe.run(main, feed={"x": t}, fetch_list=[x, h, loss], return_numpy=False)
        assert xo.recursive_sequence_lengths() == [[1, 3, 2]]
        assert ho.recursive_sequence_lengths() == [[1, 3, 2]]  # fc keeps the sequences
        assert lo.lod() == []                                   # mean: one row, no sequences
        np.testing.assert_array_equal(np.array(xo), data)
        # a plain feed afterwards: no stale LoD anywhere
        xo, ho = exe.run(main, feed={"x": data}, fetch_list=[x, h], return_numpy=False)
        assert xo.lod() == [] and ho.lod() == []
        # numpy fetches are the same values either way
        (h1,) = exe.run(main, feed={"x": t}, fetch_list=[h])
        np.testing.assert_array_equal(h1, np.array(ho))


def test_data_feeder_variable_length_sequences():
    main, startup = fresh()
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    feeder = fluid.DataFeeder(feed_list=[words, label], place=fluid.CPUPlace(), program=main)
    feed = feeder.feed([([1, 2, 3], [0]), ([4], [1]), ([5, 6], [0])])
    w = feed["words"]
    assert w.recursive_sequence_lengths() == [[3, 1, 2]]
    a = np.array(w)
    assert a.shape == (6, 1) and a.dtype == np.int64 and a[:, 0].tolist() == [1, 2, 3, 4, 5, 6]
    assert feed["label"].shape == (3, 1)
    with fluid.program_guard(main, startup):
        emb = fluid.layers.embedding(words, size=[10, 2])
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        (e,) = exe.run(main, feed=feed, fetch_list=[emb], return_numpy=False)
        assert e.recursive_sequence_lengths() == [[3, 1, 2]]
    with pytest.raises(pe.InvalidArgumentError, match="nested 1 deep"):
        feeder.feed([(7, [0])])


def _parallel(ns, feed):
    """x and h fetched from CompiledPrograms over each count of places in ns, one scope (the same parameters)."""
    main, startup, x, h, loss = _seq_net()
    exe = fluid.Executor(fluid.CPUPlace())
    outs = []
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        for n in ns:
            cp = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name, places=fluid.cpu_places(n))
            outs.append(exe.run(cp, feed=feed, fetch_list=[x, h], return_numpy=False))
    return outs


@pytest.mark.parametrize("n", [2, 3])
def test_parallel_executor_splits_whole_sequences(n):
    data = np.random.RandomState(1).rand(10, 3).astype("float32")
    lens = [[2, 1, 3, 1, 2, 1]]
    one, many = _parallel([1, n], {"x": fluid.create_lod_tensor(data, lens, fluid.CPUPlace())})
    for a, b in zip(one, many):
        assert a.recursive_sequence_lengths() == lens
        assert b.recursive_sequence_lengths() == lens
        np.testing.assert_allclose(np.array(b), np.array(a), rtol=1e-6)
    # a two-level LoD: split by the top level, merged back whole
    lens2 = [[2, 1, 3], [2, 1, 3, 1, 2, 1]]
    one, many = _parallel([1, n], {"x": fluid.create_lod_tensor(data, lens2, fluid.CPUPlace())})
    for a, b in zip(one, many):
        assert b.recursive_sequence_lengths() == lens2
        np.testing.assert_allclose(np.array(b), np.array(a), rtol=1e-6)


def test_parallel_executor_needs_a_sequence_per_place():
    data = np.zeros((4, 3), "float32")
    with pytest.raises(pe.InvalidArgumentError, match="holds 2 sequences .* fewer than the 3 places"):
        _parallel([3], {"x": fluid.create_lod_tensor(data, [[1, 3]], fluid.CPUPlace())})


def _seq_model():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="float32")
        emb = fluid.layers.embedding(words, size=[20, 4])
        pooled = fluid.layers.sequence_pool(emb, "average")
        att = fluid.layers.sequence_softmax(fluid.layers.fc(emb, 1))
        pred = fluid.layers.fc(fluid.layers.elementwise_add(pooled, fluid.layers.sequence_pool(
            fluid.layers.elementwise_mul(emb, att, axis=0), "sum")), 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, label))
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, words, label, pooled, loss


def _seq_batch():
    rng = np.random.RandomState(3)
    lens = [3, 1, 4, 2, 5, 1]
    samples = [([int(w) for w in rng.randint(0, 20, n)], [float(rng.rand())]) for n in lens]
    return samples


def test_sequence_layers_forward_and_train_on_1_2_3_places():
    samples = _seq_batch()
    params = {}
    for n in (0, 1, 2, 3):  # 0: the Executor; else a CompiledProgram over n places
        main, startup, words, label, pooled, loss = _seq_model()
        feeder = fluid.DataFeeder(feed_list=[words, label], place=fluid.CPUPlace(), program=main)
        exe = fluid.Executor(fluid.CPUPlace())
        scope = fluid.Scope()
        with fluid.scope_guard(scope):
            startup.random_seed = 11
            exe.run(startup)
            if n == 0:
                prog = main
                # the pooled rows: the average of each sentence's embeddings
                w = np.array(scope.find_var([p.name for p in main.global_block().all_parameters()
                                             if list(p.shape) == [20, 4]][0]).get_tensor())
                feed = feeder.feed(samples)
                (pl,) = exe.run(main.clone(for_test=True), feed=feed, fetch_list=[pooled])
                want = np.stack([w[s[0]].mean(0) for s in samples])
                np.testing.assert_allclose(pl.reshape(want.shape), want, rtol=1e-5)
            else:
                bs = fluid.BuildStrategy()
                bs.memory_optimize = bs.enable_inplace = n >= 2  # the memory plan with LoD shapes
                prog = fluid.CompiledProgram(main, build_strategy=bs).with_data_parallel(
                    loss_name=loss.name, places=fluid.cpu_places(n))
            for _ in range(3):
                exe.run(prog, feed=feeder.feed(samples), fetch_list=[loss])
            params[n] = {p.name: np.array(scope.find_var(p.name).get_tensor())
                         for p in main.global_block().all_parameters()}
    for n in (1, 2, 3):
        for k, v in params[0].items():
            np.testing.assert_allclose(params[n][k], v, rtol=2e-5, atol=1e-6, err_msg="%d places: %s" % (n, k))


def test_sequence_layer_errors():
    main, startup = fresh()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        out = fluid.layers.sequence_pool(x, "max")
        with pytest.raises(pe.InvalidArgumentError, match="pool_type='median'"):
            fluid.layers.sequence_pool(x, "median")
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(pe.InvalidArgumentError, match="input X 'x' has no LoD"):
        exe.run(main, feed={"x": np.zeros((3, 2), "float32")}, fetch_list=[out])
    main, startup = fresh()
    with fluid.program_guard(main, startup):
        lengths = fluid.layers.data(name="n", shape=[-1], dtype="int64", append_batch_size=False)
        mask = fluid.layers.sequence_mask(lengths, dtype="float32")
    (m,) = exe.run(main, feed={"n": np.array([2, 0, 3])}, fetch_list=[mask])
    np.testing.assert_array_equal(m, [[1, 1, 0], [0, 0, 0], [1, 1, 1]])
    assert m.dtype == np.float32


@pytest.mark.parametrize("plan", [False, True])
def test_parallel_executor_new_lod_same_rows_and_mask_from_values(plan):
    """Two batches of the same rows but other sequences: with the memory plan its shape
    inference sees the LoD (sequence_pool's rows) and plans are keyed by it;
    sequence_mask's columns come from the lengths' values, known at run time only."""
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[2], dtype="float32", lod_level=1)
        n = fluid.layers.data(name="n", shape=[1], dtype="int64")
        pooled = fluid.layers.sequence_pool(fluid.layers.scale(x, 2.0), "sum")
        mask = fluid.layers.sequence_mask(n, dtype="float32")
        loss = fluid.layers.mean(pooled)
    exe = fluid.Executor(fluid.CPUPlace())
    data = np.arange(16, dtype="float32").reshape(8, 2)
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        bs = fluid.BuildStrategy()
        bs.memory_optimize = bs.enable_inplace = plan
        cp = fluid.CompiledProgram(main, build_strategy=bs).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(2))
        for lens in ([[3, 1, 2, 2]], [[1, 1, 1, 1, 4]], [[3, 1, 2, 2]]):
            offs = np.cumsum([0] + lens[0])
            k = len(lens[0])
            lengths = np.array([[3 if i in (0, k - 1) else i % 3] for i in range(k)], dtype="int64")
            p, m = exe.run(cp, feed={"x": fluid.create_lod_tensor(data, lens, fluid.CPUPlace()), "n": lengths},
                           fetch_list=[pooled, mask])
            want = np.stack([2 * data[b:e].sum(0) for b, e in zip(offs[:-1], offs[1:])])
            np.testing.assert_allclose(p, want)
            # the columns: max(n), known only from the values (each place's max is 3 here)
            np.testing.assert_array_equal(m, (np.arange(3)[None, None, :] < lengths[:, :, None]).astype("float32"))


def test_parameter_updated_in_place_takes_no_lod():
    """A gradient may have the rows of a sequence input by chance (vocabulary 6, 6 words);
    the parameter its optimizer op writes in place keeps no LoD."""
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        emb = fluid.layers.embedding(words, size=[6, 3])
        loss = fluid.layers.mean(fluid.layers.sequence_pool(emb, "sum"))
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    w = [p for p in main.global_block().all_parameters()][0]
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        t = fluid.create_lod_tensor(np.arange(6, dtype="int64").reshape(6, 1), [[4, 2]], fluid.CPUPlace())
        (wv,) = exe.run(main, feed={"words": t}, fetch_list=[w], return_numpy=False)
        assert wv.lod() == []


# ---- sequence_conv ------------------------------------------------------------------------

def np_seqconv(x, w, lens, filter_size, start):
    """Paddle's sequence_conv, one sequence at a time: row t of a sequence sees rows t + start + j
    (j < filter_size) of that sequence side by side, zeros outside it, times w."""
    out = np.zeros((x.shape[0], w.shape[1]), x.dtype)
    b = 0
    for n in lens:
        seq = x[b:b + n]
        for t in range(n):
            col = np.concatenate([seq[q] if 0 <= q < n else np.zeros(x.shape[1], x.dtype)
                                  for q in range(t + start, t + start + filter_size)])
            out[b + t] = col @ w
        b += n
    return out


def np_seqconv_grads(x, w, dout, lens, filter_size, start):
    """dX and dW of sum(out * dout), by the same per-sequence loops."""
    d = x.shape[1]
    gx, gw = np.zeros_like(x), np.zeros_like(w)
    b = 0
    for n in lens:
        for t in range(n):
            for j, q in enumerate(range(t + start, t + start + filter_size)):
                if 0 <= q < n:
                    gx[b + q] += w[j * d:(j + 1) * d] @ dout[b + t]
                    gw[j * d:(j + 1) * d] += np.outer(x[b + q], dout[b + t])
        b += n
    return gx, gw


@pytest.mark.parametrize("filter_size,padding_start", [(3, None), (4, None), (1, None), (3, -4), (2, 0), (3, 1)])
def test_sequence_conv_forward_and_grads_vs_numpy(filter_size, padding_start):
    d, nf = 3, 4
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[d], dtype="float64", lod_level=1, stop_gradient=False)
        r = fluid.layers.data(name="r", shape=[nf], dtype="float64")
        out = fluid.layers.sequence_conv(x, nf, filter_size=filter_size, padding_start=padding_start,
                                         param_attr=fluid.ParamAttr(name="w"), bias_attr=False)
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(out, r))
        gx_var, gw_var = fluid.backward.gradients(loss, [x, main.global_block().var("w")])
    op = [o for o in main.global_block().ops if o.type == "sequence_conv"][0]
    start = -(filter_size // 2) if padding_start is None else padding_start
    assert op.attr("contextStart") == start and op.attr("contextLength") == filter_size
    exe = fluid.Executor(fluid.CPUPlace())
    rng = np.random.RandomState(filter_size)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        w = np.array(scope.find_var("w").get_tensor())
        assert w.shape == (filter_size * d, nf)
        for lens in ([4, 1, 3], [1], [2, 5, 1, 1], [6]):
            xv = rng.randn(sum(lens), d)
            rv = rng.randn(sum(lens), nf)
            o, gx, gw = exe.run(main, feed={"x": fluid.create_lod_tensor(xv, [lens], fluid.CPUPlace()), "r": rv},
                                fetch_list=[out, gx_var, gw_var], return_numpy=False)
            assert o.recursive_sequence_lengths() == [lens]  # Out keeps X's sequences
            np.testing.assert_allclose(np.array(o), np_seqconv(xv, w, lens, filter_size, start), rtol=1e-12,
                                       atol=1e-12)
            want_gx, want_gw = np_seqconv_grads(xv, w, rv, lens, filter_size, start)
            np.testing.assert_allclose(np.array(gx), want_gx, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(np.array(gw), want_gw, rtol=1e-12, atol=1e-12)


def test_sequence_conv_bias_act_and_errors():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[2], dtype="float32", lod_level=1)
        out = fluid.layers.sequence_conv(x, 3, filter_size=2, act="tanh",
                                         bias_attr=fluid.ParamAttr(name="b", initializer=pe.initializer.Constant(0.5)),
                                         param_attr=fluid.ParamAttr(name="w"))
        assert list(out.shape) == [-1, 3]
        with pytest.raises(pe.UnsupportedError, match="filter_stride=2"):
            fluid.layers.sequence_conv(x, 3, filter_stride=2)
        with pytest.raises(pe.InvalidArgumentError, match="num_filters must be an int >= 1"):
            fluid.layers.sequence_conv(x, 0)
    assert [o.type for o in main.global_block().ops][:3] == ["sequence_conv", "elementwise_add", "tanh"]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        w = np.array(scope.find_var("w").get_tensor())
        xv = np.random.RandomState(2).rand(5, 2).astype("float32")
        (o,) = exe.run(main, feed={"x": fluid.create_lod_tensor(xv, [[2, 3]], fluid.CPUPlace())}, fetch_list=[out])
        np.testing.assert_allclose(o, np.tanh(np_seqconv(xv, w, [2, 3], 2, -1) + 0.5), rtol=1e-5, atol=1e-6)
        with pytest.raises(pe.InvalidArgumentError, match="input X 'x' has no LoD"):
            exe.run(main, feed={"x": xv}, fetch_list=[out])
    # the op's own checks: a trainable padding and a stride other than 1 are refused by name
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        x = fluid.layers.data(name="x", shape=[2], dtype="float32", lod_level=1)
        f = fluid.layers.data(name="f", shape=[6, 1], dtype="float32", append_batch_size=False)
        o1 = main.global_block().create_var(name="o1", dtype="float32", shape=[-1, 1])
        main.global_block().append_op(type="sequence_conv", inputs={"X": [x], "Filter": [f]}, outputs={"Out": [o1]},
                                      attrs={"contextLength": 3, "paddingTrainable": True})
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        with pytest.raises(pe.UnsupportedError, match="paddingTrainable = true .* is not supported"):
            exe.run(main, feed={"x": fluid.create_lod_tensor(xv, [[2, 3]], fluid.CPUPlace()),
                                "f": np.ones((6, 1), "float32")}, fetch_list=[o1])


def _conv_model():
    main, startup = fresh()
    with fluid.program_guard(main, startup), unique_name.guard():
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(words, size=[20, 4])
        conv = fluid.layers.sequence_conv(emb, 5, filter_size=3, act="tanh")
        conv4 = fluid.nets.sequence_conv_pool(emb, 3, 4, act="tanh", pool_type="sqrt")
        pred = fluid.layers.fc([fluid.layers.sequence_pool(conv, "max"), conv4], 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, label))
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, words, label, conv, loss


def test_sequence_conv_trains_alike_on_1_2_3_places():
    """A LoD feed through sequence_conv (and sequence_conv_pool): the Executor, then a
    CompiledProgram over 1, 2 and 3 places (the memory plan on for 2 and 3), three SGD steps
    each from the same start: the same conv output (fetched with its LoD) and parameters."""
    rng = np.random.RandomState(5)
    lens = [3, 1, 4, 2, 5, 1]
    samples = [([int(w) for w in rng.randint(0, 20, n)], [int(rng.randint(0, 2))]) for n in lens]
    params, convs = {}, {}
    for n in (0, 1, 2, 3):
        main, startup, words, label, conv, loss = _conv_model()
        feeder = fluid.DataFeeder(feed_list=[words, label], place=fluid.CPUPlace(), program=main)
        exe = fluid.Executor(fluid.CPUPlace())
        scope = fluid.Scope()
        with fluid.scope_guard(scope):
            startup.random_seed = 13
            exe.run(startup)
            if n == 0:
                prog = main
            else:
                bs = fluid.BuildStrategy()
                bs.memory_optimize = bs.enable_inplace = n >= 2
                prog = fluid.CompiledProgram(main, build_strategy=bs).with_data_parallel(
                    loss_name=loss.name, places=fluid.cpu_places(n))
            losses = []
            for step in range(3):
                lv, cv = exe.run(prog, feed=feeder.feed(samples), fetch_list=[loss, conv], return_numpy=False)
                losses.append(float(np.mean(np.array(lv))))
                if step == 0:
                    convs[n] = cv
            assert losses[-1] < losses[0], losses
            params[n] = {p.name: np.array(scope.find_var(p.name).get_tensor())
                         for p in main.global_block().all_parameters()}
    assert len(params[0]) == 8  # embedding, two filters and biases, fc's weights (two inputs) and bias
    for n in (1, 2, 3):
        assert convs[n].recursive_sequence_lengths() == [lens]
        np.testing.assert_allclose(np.array(convs[n]), np.array(convs[0]), rtol=1e-5, atol=1e-6)
        for k, v in params[0].items():
            np.testing.assert_allclose(params[n][k], v, rtol=2e-5, atol=1e-6, err_msg="%d places: %s" % (n, k))
