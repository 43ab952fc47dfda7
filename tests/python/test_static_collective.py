"""pe.static.collective: a static program carrying its own collectives
(c_allreduce_sum/max/min/prod, c_broadcast, c_allgather, c_reduce_sum,
c_reduce_prod, c_identity, c_sync_*) run through ParallelExecutor on 2 CPU places, each
place fed its own rows (a list feed) and checked against numpy; the
single-place Executor (a world of one rank: Out = X); the errors.
Across processes: tests/unit/test_collective_mpi.c."""
import numpy as np
import pytest

import pe
from pe.static import collective
from pe.utils import unique_name

pe.enable_static()

ROWS, COLS = 2, 3


def x_of(rank):
    i = np.arange(ROWS * COLS)
    return (((7 * i + 5 * rank) % 11) - 5 + rank / 4.0).reshape(ROWS, COLS).astype(np.float32)


def build(world, root=1, root_id=0):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, COLS], "float32")
        outs = {}
        for red in ("sum", "max", "min", "prod"):
            y = pe.static.data("y_" + red, [None, COLS], "float32")  # Out != X: X copied, then reduced
            outs[red] = collective.append_collective("c_allreduce_" + red, x, out=y)
        b = pe.tensor.scale(x, 2.0)
        outs["bcast"] = collective.append_collective("c_broadcast", b, root=root)
        outs["gather"] = collective.append_collective("c_allgather", x, nranks=world)
        r = pe.tensor.scale(x, 1.0)
        outs["reduced"] = collective.append_collective("c_reduce_sum", r, root_id=root_id)
        outs["ident"] = collective.append_collective("c_identity", x)
        outs["rprod"] = collective.append_collective("c_reduce_prod", pe.tensor.scale(x, 1.0), root_id=world - 1)
        s, = collective.append_collective("c_sync_comm_stream", [outs["sum"]])
        outs["synced"] = s
        h = pe.tensor.scale(x, 1.0)  # a fed var is never written: sum a copy in place
        outs["inplace"] = collective.append_collective("c_allreduce_sum", h)
        assert outs["inplace"] is h  # in place, like Paddle
        assert b is outs["bcast"] and r is outs["reduced"]
        assert outs["gather"].shape[1:] == (COLS,) or list(outs["gather"].shape[1:]) == [COLS]
    return main, outs


def test_two_places(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, outs = build(2, root=1, root_id=0)
    pexe = pe.static.ParallelExecutor(False, main_program=main, scope=pe.static.Scope())
    assert pexe.device_count == 2
    names = [outs[k].name for k in ("sum", "max", "min", "prod", "bcast", "gather", "reduced", "ident", "synced",
                                    "inplace", "rprod")]
    xs = [x_of(0), x_of(1)]
    for _ in range(2):
        got = pexe.run(names, feed=[{"x": xs[0]}, {"x": xs[1]}])
        s, mx, mn, pr, bc, ga, rd, idt, syn, xin, rp = got
        two = lambda a: np.concatenate([a, a])  # noqa: E731  every place holds it
        np.testing.assert_allclose(s, two(xs[0] + xs[1]), rtol=1e-6)
        np.testing.assert_array_equal(mx, two(np.maximum(xs[0], xs[1])))
        np.testing.assert_array_equal(mn, two(np.minimum(xs[0], xs[1])))
        np.testing.assert_allclose(pr, two(xs[0] * xs[1]), rtol=1e-6)
        np.testing.assert_array_equal(bc, two(2 * xs[1]))
        np.testing.assert_array_equal(ga, np.concatenate([xs[0], xs[1], xs[0], xs[1]]))
        np.testing.assert_allclose(rd, np.concatenate([xs[0] + xs[1], xs[1]]), rtol=1e-6)
        np.testing.assert_array_equal(idt, np.concatenate(xs))
        np.testing.assert_allclose(syn, two(xs[0] + xs[1]), rtol=1e-6)
        np.testing.assert_allclose(xin, two(xs[0] + xs[1]), rtol=1e-6)
        np.testing.assert_allclose(rp, np.concatenate([xs[0], xs[0] * xs[1]]), rtol=1e-6)


def test_dict_feed_splits_then_reduces(monkeypatch):
    """A dict feed is split along axis 0 (rows [0, 1] -> place 0, [2, 3] -> place 1) before the sum."""
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, COLS], "float32")
        s = collective.append_collective("c_allreduce_sum", pe.tensor.scale(x, 1.0))
    pexe = pe.static.ParallelExecutor(False, main_program=main, scope=pe.static.Scope())
    a = np.arange(4 * COLS, dtype=np.float32).reshape(4, COLS)
    got, = pexe.run([s.name], feed={"x": a})
    np.testing.assert_array_equal(got, np.concatenate([a[:2] + a[2:], a[:2] + a[2:]]))


def test_executor_is_a_world_of_one():
    main, outs = build(1, root=0, root_id=0)
    x = x_of(3)
    got = pe.static.Executor().run(main, feed={"x": x}, fetch_list=[outs[k].name for k in ("sum", "max", "gather",
                                                                                           "bcast", "ident")],
                                   scope=pe.static.Scope())
    for g, want in zip(got, (x, x, x, 2 * x, x)):
        np.testing.assert_array_equal(g, want)


def test_errors(monkeypatch):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, COLS], "float32")
        with pytest.raises(pe.Error, match="unknown op type 'c_alltoall'"):
            collective.append_collective("c_alltoall", x)
        with pytest.raises(pe.Error, match="ring_id 2: PE has one communication ring"):
            collective.append_collective("c_allreduce_sum", x, ring_id=2)
        with pytest.raises(pe.Error, match="c_allgather needs nranks"):
            collective.append_collective("c_allgather", x)
        with pytest.raises(pe.Error, match="c_broadcast has no attr root_id"):
            collective.append_collective("c_broadcast", x, root_id=1)
        with pytest.raises(TypeError, match="static Variable"):
            collective.append_collective("c_allreduce_sum", np.ones(3))
        collective.append_collective("c_broadcast", x, root=2)  # a rank the 2-place world lacks
    monkeypatch.setenv("CPU_NUM", "2")
    with pytest.raises(pe.Error, match=r"c_broadcast: root 2 is not a rank of the world \(0..1"):
        pe.static.ParallelExecutor(False, main_program=main, scope=pe.static.Scope())


def test_no_gradient_through_allreduce_max():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, COLS], "float32")
        x.stop_gradient = False
        y = collective.append_collective("c_allreduce_max", x)
        loss = pe.mean(y)
        with pytest.raises(pe.Error, match=r"\(c_allreduce_max\) has no gradient"):
            pe.static.gradients([loss], [x])


@pytest.mark.parametrize("memory_optimize", [False, True])
def test_gathered_rows_feed_later_ops(monkeypatch, memory_optimize):
    """c_allgather's Out (sized at run time) read by later ops, with and without the memory plan."""
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, COLS], "float32")
        g = collective.append_collective("c_allgather", x, nranks=2)
        z = pe.tensor.scale(pe.tensor.scale(g, 2.0), 1.0)
    bs = pe.static.BuildStrategy()
    bs.memory_optimize = memory_optimize
    pexe = pe.static.ParallelExecutor(False, main_program=main, scope=pe.static.Scope(), build_strategy=bs)
    a = np.arange(4 * COLS, dtype=np.float32).reshape(4, COLS)
    for _ in range(2):
        out, = pexe.run([z.name], feed={"x": a})
        np.testing.assert_array_equal(out, 2 * np.concatenate([a, a]))


def test_scatter_from_a_root(monkeypatch):
    """c_scatter: place r gets rows chunk r of the root place's X; the other places' X is left alone."""
    monkeypatch.setenv("CPU_NUM", "2")
    for root in (0, 1):
        main, startup = pe.static.Program(), pe.static.Program()
        with pe.static.program_guard(main, startup), unique_name.guard():
            z = pe.static.data("z", [4, COLS], "float32")
            s = collective.append_collective("c_scatter", z, root=root, nranks=2)
            assert list(s.shape) == [2, COLS]
            t = pe.tensor.scale(s, 1.0)
        pexe = pe.static.ParallelExecutor(False, main_program=main, scope=pe.static.Scope())
        zs = [np.arange(4 * COLS, dtype=np.float32).reshape(4, COLS) + 100 * r for r in range(2)]
        for _ in range(2):
            got, zz = pexe.run([t.name, "z"], feed=[{"z": zs[0]}, {"z": zs[1]}])
            np.testing.assert_array_equal(got, zs[root])  # chunk 0 on place 0, chunk 1 on place 1
            np.testing.assert_array_equal(zz, np.concatenate(zs))
    with pytest.raises(pe.Error, match="c_scatter: x has 4 rows, not a multiple of nranks 3"):
        with pe.static.program_guard(pe.static.Program(), pe.static.Program()):
            collective.append_collective("c_scatter", pe.static.data("z", [4, COLS], "float32"), nranks=3)
