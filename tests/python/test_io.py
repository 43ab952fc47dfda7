"""tests/python/test_io.py — pe.io: datasets, samplers, DistributedBatchSampler's
shards, DataLoader in dynamic and static mode, with and without worker
processes (order, errors, dead workers, timeouts), batches through shared
memory, persistent workers."""
import os
import time

import numpy as np
import pytest

import pe
from pe import io


@pytest.fixture
def dynamic():
    was = pe.framework._static_mode
    pe.disable_static()
    yield
    if was:
        pe.enable_static()


def _ds(n=10):
    return io.TensorDataset([np.arange(2 * n, dtype=np.float32).reshape(n, 2), np.arange(n, dtype=np.int64)])


# ---- datasets ----------------------------------------------------------------------------------

def test_datasets():
    ds = _ds()
    assert len(ds) == 10
    x, y = ds[3]
    assert x.tolist() == [6.0, 7.0] and y == 3
    with pytest.raises(ValueError, match=r"different first dimensions \[3, 4\]"):
        io.TensorDataset([np.zeros(3), np.zeros(4)])
    comp = io.ComposeDataset([ds, io.TensorDataset([np.arange(10) * 10])])
    assert [f.tolist() if hasattr(f, "tolist") else f for f in comp[2]] == [[4.0, 5.0], 2, 20]
    with pytest.raises(ValueError, match="different lengths"):
        io.ComposeDataset([ds, _ds(3)])
    sub = io.Subset(ds, [7, 1])
    assert len(sub) == 2 and sub[0][1] == 7 and sub[1][1] == 1
    parts = io.random_split(ds, [6, 4], generator=0)
    got = sorted(int(p[i][1]) for p in parts for i in range(len(p)))
    assert [len(p) for p in parts] == [6, 4] and got == list(range(10))
    assert [p.indices for p in io.random_split(ds, [6, 4], generator=0)] == [p.indices for p in parts]
    assert [len(p) for p in io.random_split(ds, [0.5, 0.25, 0.25])] == [6, 2, 2]
    with pytest.raises(ValueError, match="sum to 9 but the dataset has 10"):
        io.random_split(ds, [5, 4])

    class Count(io.IterableDataset):
        def __init__(self, a, b):
            self.a, self.b = a, b

        def __iter__(self):
            return iter(range(self.a, self.b))
    assert list(io.ChainDataset([Count(0, 2), Count(5, 7)])) == [0, 1, 5, 6]
    with pytest.raises(TypeError, match="has no __len__"):
        len(Count(0, 1))


# ---- samplers ----------------------------------------------------------------------------------

def test_samplers():
    ds = _ds()
    assert list(io.SequenceSampler(ds)) == list(range(10))
    np.random.seed(5)
    a = list(io.RandomSampler(ds))
    np.random.seed(5)
    assert list(io.RandomSampler(ds)) == a and sorted(a) == list(range(10))
    assert list(io.RandomSampler(ds, generator=3)) == list(io.RandomSampler(ds, generator=3))
    r = list(io.RandomSampler(ds, replacement=True, num_samples=30, generator=1))
    assert len(r) == 30 and all(0 <= i < 10 for i in r)
    with pytest.raises(ValueError, match="num_samples is for replacement=True"):
        io.RandomSampler(ds, num_samples=3)
    assert sorted(io.SubsetRandomSampler([4, 8, 9])) == [4, 8, 9]
    w = list(io.WeightedRandomSampler([0, 0, 1, 0], 20, generator=2))
    assert w == [2] * 20
    with pytest.raises(ValueError, match="only 1 weights are > 0"):
        io.WeightedRandomSampler([0, 1], 2, replacement=False)
    bs = io.BatchSampler(ds, batch_size=4)
    assert list(bs) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and len(bs) == 3
    bs = io.BatchSampler(sampler=io.SequenceSampler(ds), batch_size=4, drop_last=True)
    assert list(bs) == [[0, 1, 2, 3], [4, 5, 6, 7]] and len(bs) == 2
    with pytest.raises(ValueError, match="either dataset or sampler"):
        io.BatchSampler()
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        io.BatchSampler(ds, batch_size=0)


@pytest.mark.parametrize("n,bs,R", [(10, 2, 2), (10, 3, 2), (11, 2, 3), (7, 4, 3), (16, 4, 4), (3, 2, 4)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_batch_sampler_shards(n, bs, R, shuffle):
    """Every rank gets the same number of samples (ceil(n / R)); together they
    cover the dataset, each index once apart from the padding (which repeats
    the head of the epoch's order); the shuffle is the same on every rank and
    follows set_epoch."""
    ds = _ds(n)
    per = -(-n // R)
    shards = []
    for r in range(R):
        s = io.DistributedBatchSampler(ds, bs, num_replicas=R, rank=r, shuffle=shuffle)
        s.set_epoch(3)
        batches = list(s)
        assert len(batches) == len(s) == -(-per // bs)
        assert all(len(b) == bs for b in batches[:-1]) and 0 < len(batches[-1]) <= bs
        shards.append([i for b in batches for i in b])
    assert all(len(sh) == per for sh in shards)
    flat = [i for sh in shards for i in sh]
    assert sorted(set(flat)) == list(range(n))
    assert len(flat) - len(set(flat)) == per * R - n
    # rank r's first batch is the epoch order's r-th block of bs (whole batches dealt round-robin)
    unshuffled = list(range(n)) + (list(range(n)) * (per * R // n + 1))[:per * R - n]
    order = unshuffled[:]
    if shuffle:
        np.random.RandomState(3).shuffle(order)
    if per * R >= bs * R:
        for r in range(R):
            assert shards[r][:bs] == order[r * bs:(r + 1) * bs]
    # repeatable; another epoch another order
    s = io.DistributedBatchSampler(ds, bs, num_replicas=R, rank=0, shuffle=shuffle)
    s.set_epoch(3)
    assert [i for b in s for i in b] == shards[0]
    if shuffle and n > 4:
        # epoch 4: the whole epoch's order (all ranks' shards) is RandomState(4)'s, not epoch 3's
        o4 = unshuffled[:]
        np.random.RandomState(4).shuffle(o4)
        assert o4 != order
        e4 = []
        for r in range(R):
            t = io.DistributedBatchSampler(ds, bs, num_replicas=R, rank=r, shuffle=True)
            t.set_epoch(4)
            e4.append([i for b in t for i in b])
        assert sorted(i for sh in e4 for i in sh) == sorted(flat)
        if per * R >= bs * R:
            for r in range(R):
                assert e4[r][:bs] == o4[r * bs:(r + 1) * bs]
        assert e4 != shards


def test_distributed_batch_sampler_env(monkeypatch):
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "3")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "2")
    s = io.DistributedBatchSampler(_ds(9), 2)
    assert (s.nranks, s.local_rank) == (3, 2)
    assert [i for b in s for i in b] == [4, 5, 8]
    s = io.DistributedBatchSampler(_ds(9), 2, drop_last=True)
    assert list(s) == [[4, 5]] and len(s) == 1
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\), got 2"):
        io.DistributedBatchSampler(_ds(9), 2, num_replicas=2, rank=2)


# ---- collation ---------------------------------------------------------------------------------

def test_default_collate_fn():
    out = io.default_collate_fn([(np.ones(2, np.float32), 1, 0.5, "a"), (np.zeros(2, np.float32), 2, 1.5, "b")])
    assert out[0].shape == (2, 2) and out[1].dtype == np.int64 and out[2].dtype == np.float32 and out[3] == ["a", "b"]
    d = io.default_collate_fn([{"x": np.ones(3), "y": 1}, {"x": np.zeros(3), "y": 0}])
    assert d["x"].shape == (2, 3) and d["y"].tolist() == [1, 0]
    with pytest.raises(ValueError, match=r"differ in shape or kind \(\(2,\), \(3,\)\)"):
        io.default_collate_fn([np.ones(2), np.ones(3)])
    with pytest.raises(TypeError, match="cannot batch samples of type object"):
        io.default_collate_fn([object()])


# ---- the loader --------------------------------------------------------------------------------

def _batches(loader):
    """Each batch as a list of numpy fields (a one-field batch is the tensor itself)."""
    return [[np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in (b if isinstance(b, list) else [b])]
            for b in loader]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


def test_loader_dynamic(dynamic):
    ds = _ds(10)
    loader = io.DataLoader(ds, batch_size=4, drop_last=True)
    assert len(loader) == 2
    got = list(loader())
    assert all(isinstance(t, pe.eager.Tensor) for b in got for t in b)
    _same(_batches(got), [[np.arange(8, dtype=np.float32).reshape(4, 2), np.arange(4)],
                          [np.arange(8, 16, dtype=np.float32).reshape(4, 2), np.arange(4, 8)]])
    np.random.seed(0)
    a = _batches(io.DataLoader(ds, batch_size=3, shuffle=True))
    np.random.seed(0)
    b = _batches(io.DataLoader(ds, batch_size=3, shuffle=True, num_workers=2))
    _same(a, b)
    assert sorted(np.concatenate([x[1] for x in a]).tolist()) == list(range(10))
    # batch_size=None: the dataset's items as they are
    whole = list(io.DataLoader(io.TensorDataset([np.ones((4, 3))]), batch_size=None))
    assert len(whole) == 4 and whole[0][0].shape == [3]
    with pytest.raises(ValueError, match="batch_sampler excludes batch_size"):
        io.DataLoader(ds, batch_sampler=io.BatchSampler(ds), batch_size=2)


class _Slow(io.Dataset):
    def __init__(self, n, fail_at=-1, die_at=-1, sleep=0.0):
        self.n, self.fail_at, self.die_at, self.sleep = n, fail_at, die_at, sleep

    def __len__(self):
        return self.n

    def _trouble(self, i):
        if i == self.fail_at:
            raise KeyError("sample %d is missing" % i)
        if i == self.die_at:
            os._exit(7)

    def __getitem__(self, i):
        self._trouble(i)
        time.sleep(self.sleep)
        info = io.get_worker_info()
        return np.array([i, -1 if info is None else info.id], np.int64)


def test_loader_workers_order_and_info(dynamic):
    ds = _Slow(23)
    ref = _batches(io.DataLoader(ds, batch_size=5))
    assert all(b[0][:, 1].tolist() == [-1] * len(b[0]) for b in ref)  # no worker in the main process
    got = _batches(io.DataLoader(ds, batch_size=5, num_workers=3, prefetch_factor=1))
    assert [b[0][:, 0].tolist() for b in got] == [b[0][:, 0].tolist() for b in ref]
    assert [int(b[0][0, 1]) for b in got] == [0, 1, 2, 0, 1]  # whole batches dealt in turn
    assert io.get_worker_info() is None


def test_loader_worker_errors(dynamic):
    with pytest.raises(RuntimeError, match=r"(?s)DataLoader worker \d raised KeyError:.*sample 7 is missing"):
        list(io.DataLoader(_Slow(12, fail_at=7), batch_size=2, num_workers=2))
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader worker \d \(pid \d+\) exited unexpectedly with code 7"):
        list(io.DataLoader(_Slow(12, die_at=5), batch_size=2, num_workers=2))
    assert time.monotonic() - t0 < 10
    with pytest.raises(RuntimeError, match=r"no batch from the workers in 0.5 s \(timeout\)"):
        list(io.DataLoader(_Slow(4, sleep=2.0), batch_size=2, num_workers=1, timeout=0.5))
    # a batch that does not pickle (a lambda in it): an error naming the batch, not a wait forever
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)DataLoader worker \d raised .*batch \d could not be sent.*"
                                           r"Can't pickle local object"):
        list(io.DataLoader(_Slow(6), batch_size=2, num_workers=2, collate_fn=lambda b: (b, lambda: 0)))
    assert time.monotonic() - t0 < 10
    # the next loader works (nothing left behind)
    assert len(list(io.DataLoader(_Slow(4), batch_size=2, num_workers=2))) == 2


def test_loader_worker_dies_mid_message(monkeypatch):
    """A worker that dies while writing a batch (half of it sent): an error naming it, not a read
    that waits forever for the rest."""
    real = io._write_all

    def half_then_die(fd, view):
        if len(view) > 1000:
            real(fd, view[:len(view) // 2])
            os._exit(5)
        real(fd, view)
    monkeypatch.setattr(io, "_write_all", half_then_die)  # the forked workers inherit it
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader worker \d \(pid \d+\) exited unexpectedly with code 5"):
        list(io.DataLoader(_Images(8), batch_size=4, num_workers=2, use_shared_memory=False))
    assert time.monotonic() - t0 < 10
    monkeypatch.undo()
    assert len(list(io.DataLoader(_Slow(4), batch_size=2, num_workers=2))) == 2


class _Stream(io.IterableDataset):
    """0..n-1, each worker its own stride (get_worker_info)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = io.get_worker_info()
        w, nw = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(np.array([i], np.int64) for i in range(w, self.n, nw))


def test_loader_iterable(dynamic):
    one = _batches(io.DataLoader(_Stream(11), batch_size=4))
    assert [b[0].reshape(-1).tolist() for b in one] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    two = _batches(io.DataLoader(_Stream(11), batch_size=2, num_workers=2, drop_last=True))
    vals = sorted(v for b in two for v in b[0].reshape(-1).tolist())
    assert vals == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10]  # worker 0: 0 2 4 6 8 (10 dropped: last short batch)
    with pytest.raises(TypeError, match="has no len"):
        len(io.DataLoader(_Stream(3), batch_size=2))


# ---- shared memory and persistent workers ------------------------------------------------------

class _Images(_Slow):
    """Samples with a large float image (over the shared-memory threshold once batched), a small
    int array, a bool mask and a dict field; the image also says which process made it."""

    def __getitem__(self, i):
        self._trouble(i)
        img = np.full((3, 64, 64), i, np.float32)
        img[0, 0, 0] = os.getpid()
        return img, np.array([i, i * i], np.int64), {"mask": np.arange(16384) % (i + 2) == 0}


class _Stuck(_Images):
    """_Images whose samples from stuck_from on each take two minutes."""

    def __init__(self, n, stuck_from):
        super().__init__(n)
        self.stuck_from = stuck_from

    def __getitem__(self, i):
        if i >= self.stuck_from:
            time.sleep(120)
        return super().__getitem__(i)


def _leftover():
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith("pe-io-%d-" % os.getpid()))


def _mapped(a):
    """a is a view of a shared-memory mapping (not a pickled copy)."""
    import mmap
    while a is not None and not isinstance(a, mmap.mmap):
        a = a.obj if isinstance(a, memoryview) else getattr(a, "base", None)
    return a is not None


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
def test_loader_shared_memory(monkeypatch):
    ds = _Images(24)
    ref = list(io.DataLoader(ds, batch_size=4))  # static mode: numpy batches
    for shm in (True, False):
        got = list(io.DataLoader(ds, batch_size=4, num_workers=2, use_shared_memory=shm))
        assert len(got) == len(ref) == 6
        for (gi, gn, gm), (ri, rn, rm) in zip(got, ref):
            np.testing.assert_array_equal(gi[:, 1:], ri[:, 1:])
            np.testing.assert_array_equal(gn, rn)
            np.testing.assert_array_equal(gm["mask"], rm["mask"])
            assert gi.dtype == np.float32 and gm["mask"].dtype == np.bool_
            assert {int(v) for v in gi[:, 0, 0, 0]} != {os.getpid()}  # made in the workers
            # the images (192 KiB a batch) and the masks (64 KiB) went through /dev/shm, the small array pickled
            assert (_mapped(gi), _mapped(gm["mask"]), _mapped(gn)) == (shm, shm, False)
            assert gi.flags.writeable
        assert _leftover() == []
    # a collate_fn of one's own that makes a new array of the stacked one: the new array is sent (copied
    # into a file), the stacked one's file removed by the worker
    def doubled(samples):
        x, y, m = io.default_collate_fn(samples)
        return x * 2, y
    keep = io.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=doubled, persistent_workers=True)
    for _ in range(2):
        got = list(keep)
        assert all(_mapped(x) for x, _ in got)
        np.testing.assert_array_equal(got[2][0][:, 1:], 2 * ref[2][0][:, 1:])
        # the workers still run (nothing closed the pool): each removed its unsent files after its task
        for _ in range(100):
            if _leftover() == []:
                break
            time.sleep(0.02)
        assert _leftover() == []
    del keep
    # an abandoned pass leaves no files behind
    for _ in io.DataLoader(ds, batch_size=4, num_workers=2):
        break
    assert _leftover() == []
    # a worker killed mid-pass: an error, and its files go with the pool
    with pytest.raises(RuntimeError, match=r"DataLoader worker \d \(pid \d+\) exited unexpectedly with code 7"):
        list(io.DataLoader(_Images(40, die_at=30), batch_size=2, num_workers=2, prefetch_factor=4))
    assert _leftover() == []
    # /dev/shm full (posix_fallocate fails, as in a container's 64 MB): the arrays travel pickled
    def full(fd, off, n):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    got = list(io.DataLoader(ds, batch_size=4, num_workers=2))
    assert not any(_mapped(b[0]) for b in got)
    np.testing.assert_array_equal(got[-1][1], ref[-1][1])
    assert _leftover() == []


class _Logged(io.Dataset):
    """Each sample fetched appends its index to a file (every process), after a short nap."""

    def __init__(self, n, path):
        self.n, self.path = n, str(path)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.1)
        with open(self.path, "a") as f:
            f.write("%d\n" % i)
        return np.array([i], np.int64)


def test_loader_abandoned_pass_skips_queued_tasks(tmp_path):
    """Breaking out of a pass: the tasks already queued to the workers and not begun are skipped (not
    loaded and thrown away), with workers started for the pass and with persistent ones."""
    for persistent in (False, True):
        log = tmp_path / ("fetched%d" % persistent)
        loader = io.DataLoader(_Logged(64, log), batch_size=1, num_workers=2, prefetch_factor=8,
                               persistent_workers=persistent)
        for _ in loader:
            break
        if persistent:
            time.sleep(0.5)  # the workers live on: give them time to (not) load the queued tasks
        fetched = log.read_text().split()
        assert len(fetched) <= 6, "%d samples loaded for a pass abandoned after one (16 were queued)" % len(fetched)
        del loader


def _pids(batches):
    return {int(v) for b in batches for v in b[0][:, 0, 0, 0]}


def test_loader_persistent_workers():
    ds = _Images(12)
    keep = io.DataLoader(ds, batch_size=3, num_workers=2, persistent_workers=True)
    fresh = io.DataLoader(ds, batch_size=3, num_workers=2)
    p1, p2 = list(keep), list(keep)
    assert len(_pids(p1)) == 2 and _pids(p1) == _pids(p2)    # the same two workers, pass after pass
    assert not _pids(list(fresh)) & _pids(list(fresh))       # without: new workers each pass
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(a[1], b[1])
    # a pass abandoned after one batch; the next pass is whole and in order (the late batches dropped)
    for _ in keep:
        break
    p3 = list(keep)
    assert [b[1][:, 0].tolist() for b in p3] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert _pids(p3) == _pids(p1)
    # two passes at once: the second gets workers of its own; both whole
    outer = []
    for b in keep:
        outer.append(b[1][:, 0].tolist())
        if len(outer) == 1:
            inner = list(keep)
    assert outer == [b[1][:, 0].tolist() for b in p3] == [b[1][:, 0].tolist() for b in inner]
    assert not _pids(inner) & _pids(p1)
    # an iterable dataset: each pass restarts the workers' iterators
    stream = io.DataLoader(_Stream(7), batch_size=2, num_workers=2, persistent_workers=True)
    for _ in range(3):
        assert sorted(v for b in stream for v in b.reshape(-1).tolist()) == list(range(7))
    # a failing pass stops the workers; the next starts new ones
    bad = io.DataLoader(_Images(12, fail_at=7), batch_size=3, num_workers=2, persistent_workers=True)
    with pytest.raises(RuntimeError, match="sample 7 is missing"):
        list(bad)
    pool = bad._pool
    assert pool.closed and not any(p.is_alive() for p in pool.procs)
    with pytest.raises(RuntimeError, match="sample 7 is missing"):
        list(bad)
    assert bad._pool is not pool
    # the loader freed: its workers end
    procs = keep._pool.procs
    del keep, p1, p2, p3
    import gc
    gc.collect()
    assert not any(p.is_alive() for p in procs)
    assert _leftover() == []


_KILLED_TRAINER = """
import os, sys, time
sys.path.insert(0, %r)
from pe import io
import test_io
ds = test_io._Stuck(64, stuck_from=8) if %r else test_io._Images(64)
loader = io.DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=4)
it = iter(loader)
next(it), next(it)
time.sleep(1)  # stuck: both workers are inside a two-minute __getitem__ by now
print(os.getpid(), " ".join(str(p.pid) for p in loader._pool.procs), flush=True)
os.kill(os.getpid(), 9)
"""


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
@pytest.mark.parametrize("stuck", [False, True], ids=["idle", "stuck"])
def test_loader_workers_outlive_no_killed_trainer(tmp_path, stuck):
    """A training process killed with SIGKILL (as the launcher ends the ranks when one fails): its
    workers notice within a second or two, remove their shared-memory files and exit — idle ones,
    and (Linux's parent-death signal) ones in the middle of a two-minute __getitem__."""
    import signal
    import subprocess
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_scripts"))
    from dist_run import running
    out, err = tmp_path / "pids", tmp_path / "stderr"
    script = _KILLED_TRAINER % (os.path.dirname(os.path.abspath(__file__)), stuck)
    with open(out, "w") as fo, open(err, "w") as fe:  # files, not pipes: workers that lived on would hold a pipe
        rc = subprocess.run([sys.executable, "-c", script], stdout=fo, stderr=fe, timeout=60).returncode
    assert rc == -signal.SIGKILL, err.read_text()
    trainer, *pids = [int(v) for v in out.read_text().split()]
    assert len(pids) == 2
    prefix = "pe-io-%d-" % trainer
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (any(running(p) for p in pids) or
                                            any(f.startswith(prefix) for f in os.listdir("/dev/shm"))):
        time.sleep(0.1)
    lived = [p for p in pids if running(p)]
    for p in lived:
        os.kill(p, 9)
    assert not lived, "DataLoader workers outlived their killed training process"
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]


def test_loader_workers_outlive_the_thread_that_made_them():
    """The parent-death signal also comes when the thread that made the workers ends (Linux): the
    workers carry on while the training process lives."""
    import threading
    loader = io.DataLoader(_Slow(12), batch_size=3, num_workers=2, persistent_workers=True)
    got = []
    t = threading.Thread(target=lambda: got.append(_batches(loader)))
    t.start()
    t.join(60)
    procs = loader._pool.procs
    time.sleep(0.5)  # the signal of the thread's end has reached the workers
    assert all(p.is_alive() for p in procs)
    _same(_batches(loader), got[0])
    assert loader._pool.procs == procs


def test_loader_static_feeds_an_executor():
    """Static mode: feed_list names the fields; each batch is [{name: array}],
    and training from the loader equals feeding the same rows by hand."""
    pe.enable_static()
    rs = np.random.RandomState(0)
    xs, ys = rs.randn(12, 4).astype(np.float32), rs.randint(0, 3, (12, 1)).astype(np.int64)

    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup):
        x = pe.static.data("x", [None, 4], "float32")
        y = pe.static.data("y", [None, 1], "int64")
        loss = pe.nn.functional.cross_entropy(pe.static.nn.fc(x, 3), y)
        pe.optimizer.SGD(learning_rate=0.1).minimize(loss)
    startup.random_seed = 1

    def train(feeds):
        scope = pe.static.Scope()
        exe = pe.static.Executor(pe.CPUPlace())
        exe.run(startup, scope=scope)
        return [float(np.asarray(exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0]).reshape(-1)[0])
                for f in feeds(x, y)]

    def by_loader(x, y):
        for data in io.DataLoader(io.TensorDataset([xs, ys]), feed_list=[x, y], return_list=False, batch_size=4):
            assert isinstance(data, list) and set(data[0]) == {"x", "y"}
            yield data  # Executor.run takes the one-place list as it is

    def by_hand(x, y):
        for i in range(0, 12, 4):
            yield {"x": xs[i:i + 4], "y": ys[i:i + 4]}
    assert train(by_loader) == train(by_hand)
    with pytest.raises(ValueError, match="return_list=False needs feed_list"):
        io.DataLoader(io.TensorDataset([xs]), return_list=False)
