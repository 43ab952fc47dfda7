"""Every collective of pe.distributed on every rank, checked against numpy.

    mpirun -np N python collectives.py

Rank r's data is a formula of r, so each rank computes what every other
rank holds and the expected result (sums added in rank order, as PE's
backend does: bitwise equal). Then the errors: shape, dtype and root
mismatches, and a bad argument on one rank, must raise the same
InvalidArgumentError on every rank (never a hang), and the world must stay
usable after each. Prints "collectives OK rank r of n" at the end.
"""
import os

import numpy as np

import pe
import pe.distributed as dist

DTYPES = ["float32", "float64", "int32", "int64"]
SHAPES = [(), (0,), (5,), (2, 3, 4)]
env = dist.ParallelEnv()
assert env.rank == int(os.environ["OMPI_COMM_WORLD_RANK"]), env
assert env.world_size == int(os.environ["OMPI_COMM_WORLD_SIZE"]), env
assert env.rank_in_node == int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]), env
group = dist.init_parallel_env()
rank, n = dist.get_rank(), dist.get_world_size()
assert (group.rank, group.nranks, group.ranks) == (rank, n, list(range(n))) and dist.is_initialized()


def data(r, shape, dt):
    k = int(np.prod(shape))
    v = (np.arange(k) % 7 + 1) * (r + 1) - 2 * r if dt.startswith("int") else np.sin(np.arange(k) + 1.7 * r) * 3
    return np.asarray(v, dtype=dt).reshape(shape)


def seq_sum(shape, dt):
    acc = data(0, shape, dt).copy()
    for r in range(1, n):
        acc += data(r, shape, dt)
    return acc


def expect_error(what, fn, *pieces):
    try:
        fn()
    except pe.InvalidArgumentError as e:
        for p in pieces:
            assert p in str(e), "%s: %r lacks %r" % (what, str(e), p)
    else:
        raise AssertionError("%s: no error on rank %d" % (what, rank))
    x = np.ones(3, dtype="float32")  # still usable
    dist.all_reduce(x)
    assert (x == n).all(), x


for dt in DTYPES:
    for shape in SHAPES:
        mine = data(rank, shape, dt)
        stack = np.stack([data(r, shape, dt) for r in range(n)])
        x = mine.copy()
        dist.all_reduce(x)
        np.testing.assert_array_equal(x, seq_sum(shape, dt))
        for op, ref in [(dist.ReduceOp.MAX, np.max), (dist.ReduceOp.MIN, np.min), (dist.ReduceOp.PROD, np.prod)]:
            x = mine.copy()
            dist.all_reduce(x, op=op)
            np.testing.assert_array_equal(x, ref(stack, axis=0).astype(dt))
        if dt.startswith("float"):
            x = mine.copy()
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            np.testing.assert_allclose(x, stack.sum(0) / n, rtol=1e-6)
        for root in range(n):
            x = mine.copy()
            dist.broadcast(x, src=root)
            np.testing.assert_array_equal(x, data(root, shape, dt))
            x = mine.copy()
            dist.reduce(x, dst=root)
            np.testing.assert_array_equal(x, seq_sum(shape, dt) if rank == root else mine)
            x = mine.copy()
            dist.reduce(x, root, op=dist.ReduceOp.MAX)
            np.testing.assert_array_equal(x, stack.max(0) if rank == root else mine)
        out = ["stale"]
        dist.all_gather(out, mine)
        assert len(out) == n
        for r in range(n):
            np.testing.assert_array_equal(out[r], data(r, shape, dt))
        src = n - 1
        x = np.zeros(shape, dtype=dt)
        parts = [data(10 + r, shape, dt) for r in range(n)] if rank == src else None
        dist.scatter(x, parts, src=src)
        np.testing.assert_array_equal(x, data(10 + rank, shape, dt))
dist.barrier()

# large: several of the backend's 4 MiB chunks
big = np.full(1 << 21, rank + 1, dtype="float32")
dist.all_reduce(big)
assert (big == n * (n + 1) / 2).all()

# errors: the same on every rank, and the world goes on
last = n - 1
expect_error("shape", lambda: dist.all_reduce(np.zeros(4 if rank == last else 3, "float32")),
             "all_reduce: the ranks' calls differ: rank %d passed float32 [4], rank 0 float32 [3]" % last)
expect_error("same size, other shape",
             lambda: dist.broadcast(np.zeros((3, 2) if rank == last else (2, 3)), 0), "[3, 2]", "[2, 3]")
expect_error("dtype", lambda: dist.all_reduce(np.zeros(3, "int64" if rank == last else "float32")),
             "rank %d passed int64 [3], rank 0 float32 [3]" % last)
expect_error("unsupported dtype on one rank",
             lambda: dist.all_reduce(np.zeros(3, "float16" if rank == last else "float32")),
             "all_reduce: rank %d's argument: dtype float16 is not supported" % last)
expect_error("unsupported dtype everywhere", lambda: dist.all_gather([], np.zeros(3, "complex64")),
             "all_gather: rank 0's argument: dtype complex64")
expect_error("non-contiguous", lambda: dist.all_reduce(np.zeros((4, 4), "float32")[:, :2] if rank == last
                                                        else np.zeros((4, 2), "float32")),
             "rank %d's argument: the array is not C-contiguous" % last)
expect_error("read-only", lambda: dist.broadcast(np.broadcast_to(np.zeros(1), (3,)) if rank == 0
                                                 else np.zeros(3), 0), "rank 0's argument")
expect_error("root differs", lambda: dist.broadcast(np.zeros(2), src=rank), "broadcast: the ranks' calls differ",
             "src 1, rank 0 0")
expect_error("root out of range", lambda: dist.reduce(np.zeros(2), dst=n if rank == 0 else 0),
             "reduce: rank 0's argument: dst=%d is not a rank of the %d processes" % (n, n))
expect_error("op differs", lambda: dist.all_reduce(np.zeros(2), op=dist.ReduceOp.MAX if rank == last
                                                   else dist.ReduceOp.SUM), "rank %d passed op max" % last)
expect_error("function differs", lambda: (dist.barrier() if rank == last else dist.all_reduce(np.zeros(2))),
             "rank %d called barrier while rank 0 called all_reduce" % last)
expect_error("not an array", lambda: dist.all_reduce([1.0, 2.0] if rank == 0 else np.zeros(2)),
             "rank 0's argument: expected a numpy.ndarray")
expect_error("AVG of ints", lambda: dist.all_reduce(np.zeros(2, "int32"), op=dist.ReduceOp.AVG),
             "ReduceOp.AVG needs a float array")
expect_error("scatter list", lambda: dist.scatter(np.zeros(2), [np.zeros(2)] if rank == 0 else None, src=0),
             "scatter: rank 0's argument: tensor_list of the src rank must be a list of %d arrays" % n)
print("collectives OK rank %d of %d" % (rank, n), flush=True)
