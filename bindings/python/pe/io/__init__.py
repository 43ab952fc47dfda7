"""pe.io — Paddle 2.x's data loading (`paddle.io`): datasets, samplers and
the DataLoader that turns them into batches, on one process or sharded
across the trainers of a distributed run.

    train = pe.io.TensorDataset([images, labels])            # or a Dataset subclass
    sampler = pe.io.DistributedBatchSampler(train, batch_size=64, shuffle=True)
    loader = pe.io.DataLoader(train, batch_sampler=sampler, num_workers=2)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader():                                # this rank's share of the epoch
            loss = loss_fn(model(x), y) ...

What: map-style datasets (`Dataset`: __getitem__ and __len__;
`TensorDataset`, `ComposeDataset`, `Subset`, `random_split`) and iterable
ones (`IterableDataset`, `ChainDataset`); samplers of indices
(`SequenceSampler`, `RandomSampler`, `SubsetRandomSampler`,
`WeightedRandomSampler`) and of index batches (`BatchSampler`,
`DistributedBatchSampler`); `DataLoader`, which collates each batch's
samples (`default_collate_fn`: numbers and arrays stacked along a new axis
0, dicts and sequences field by field) and hands them over as eager
tensors (dynamic mode) or numpy arrays / feed dicts (static mode).

How: the samplers draw from numpy (RandomSampler from np.random, or the
`generator` given: a np.random.Generator / RandomState or an int seed), so
np.random.seed makes an order repeatable. DistributedBatchSampler pads
the index list to a multiple of the world size (repeating its head), so
every rank gets the same number of batches, shuffles it with the epoch as
the seed (set_epoch, or one more each pass), and gives rank r the batches
r, r + world, r + 2 world, ... of it, the remainder split evenly at the
end: the ranks' shares are disjoint (apart from the padding) and together
cover the dataset. With num_workers > 0 the batches are loaded by that many
worker processes (multiprocessing, fork), each given whole
batches in turn, at most prefetch_factor per worker in flight, and yielded
in the sampler's order; a batch's large arrays travel through shared
memory (use_shared_memory, below), the rest pickled. A worker's exception
is raised in the main process with its traceback (so is a batch that does
not pickle, naming it); a worker that dies
(killed, os._exit, even halfway through sending a batch) is an error
naming it at once (results: below); `timeout` > 0
bounds the wait for a batch. Workers are stopped when the pass ends, is
abandoned or fails; with persistent_workers they serve pass after pass
(each task tagged with its pass: the workers skip the tasks of a pass no
longer under way, a shared counter says which, and an abandoned pass's late
batches are dropped) until the loader is freed or a pass fails. A worker
whose training process dies (SIGKILL included) removes its shared-memory
files and exits: at once on Linux, where the kernel signals it (even in
the middle of a long __getitem__), elsewhere when its task ends.
"""
import itertools
import math
import mmap
import multiprocessing as _mp
import multiprocessing.connection as _mpc
import os
import pickle
import random as _random
import signal
import struct
import time
import traceback as _traceback
import weakref

import numpy as np

from ..utils._process import set_parent_death_signal

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ComposeDataset", "ChainDataset", "Subset",
           "random_split", "Sampler", "SequenceSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "DistributedBatchSampler", "DataLoader", "get_worker_info",
           "default_collate_fn", "default_convert_fn", "WorkerInfo"]


# ---- datasets ---------------------------------------------------------------------------------

class Dataset:
    """A map-style dataset: subclasses define __getitem__(idx) -> sample and __len__."""

    def __getitem__(self, idx):
        raise NotImplementedError("%s must define __getitem__" % type(self).__name__)

    def __len__(self):
        raise NotImplementedError("%s must define __len__" % type(self).__name__)


class IterableDataset(Dataset):
    """An iterable-style dataset: subclasses define __iter__ (in a DataLoader
    worker, get_worker_info() says which share to yield)."""

    def __iter__(self):
        raise NotImplementedError("%s must define __iter__" % type(self).__name__)

    def __getitem__(self, idx):
        raise TypeError("%s is an IterableDataset: it has no __getitem__" % type(self).__name__)

    def __len__(self):
        raise TypeError("%s is an IterableDataset: it has no __len__" % type(self).__name__)


def _rows(t, what):
    a = t.numpy() if hasattr(t, "numpy") and not isinstance(t, np.ndarray) else np.asarray(t)
    if a.ndim == 0:
        raise ValueError("%s: a tensor of rank 0 has no rows" % what)
    return a


class TensorDataset(Dataset):
    """Sample i is (t[i] for t in tensors); every tensor has the same first dimension."""

    def __init__(self, tensors):
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise TypeError("TensorDataset: tensors must be a non-empty list of tensors or arrays")
        self.tensors = [_rows(t, "TensorDataset") for t in tensors]
        n = {len(t) for t in self.tensors}
        if len(n) != 1:
            raise ValueError("TensorDataset: the tensors have different first dimensions %s"
                             % [len(t) for t in self.tensors])

    def __getitem__(self, idx):
        return tuple(t[idx] for t in self.tensors)

    def __len__(self):
        return len(self.tensors[0])


def _fields(sample):
    return list(sample) if isinstance(sample, (list, tuple)) else [sample]


class ComposeDataset(Dataset):
    """Sample i is the fields of every dataset's sample i, concatenated."""

    def __init__(self, datasets):
        if not isinstance(datasets, (list, tuple)) or not datasets:
            raise TypeError("ComposeDataset: datasets must be a non-empty list")
        for d in datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ComposeDataset: %s is an IterableDataset" % type(d).__name__)
        if len({len(d) for d in datasets}) != 1:
            raise ValueError("ComposeDataset: the datasets have different lengths %s" % [len(d) for d in datasets])
        self.datasets = list(datasets)

    def __getitem__(self, idx):
        return tuple(f for d in self.datasets for f in _fields(d[idx]))

    def __len__(self):
        return len(self.datasets[0])


class ChainDataset(IterableDataset):
    """The samples of each iterable dataset, one dataset after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError("ChainDataset: %s is not an IterableDataset" % type(d).__name__)

    def __iter__(self):
        return itertools.chain.from_iterable(self.datasets)


class Subset(Dataset):
    """The samples of dataset at indices, in that order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, idx):
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


def _rng(generator):
    """A numpy random source: np.random itself (None), a Generator / RandomState, or a seed."""
    if generator is None:
        return np.random
    if isinstance(generator, (np.random.Generator, np.random.RandomState)):
        return generator
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.RandomState(int(generator))
    raise TypeError("generator must be None, a numpy Generator / RandomState or an int seed, got %s"
                    % type(generator).__name__)


def _permutation(rng, n):
    return [int(i) for i in rng.permutation(n)]


def random_split(dataset, lengths, generator=None):
    """Subsets of a random permutation of dataset, of the given lengths (which
    sum to len(dataset)); fractions summing to 1 are taken as shares, the
    rows left by rounding down given one each to the first subsets."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(v, float) for v in lengths) and math.isclose(sum(lengths), 1.0):
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in lengths):
        raise ValueError("random_split: lengths must be ints >= 0 (or fractions summing to 1), got %r" % (lengths,))
    if sum(lengths) != n:
        raise ValueError("random_split: the lengths sum to %d but the dataset has %d samples" % (sum(lengths), n))
    order = _permutation(_rng(generator), n)
    out, at = [], 0
    for k in lengths:
        out.append(Subset(dataset, order[at:at + k]))
        at += k
    return out


# ---- samplers ---------------------------------------------------------------------------------

class Sampler:
    """Yields indices of a map-style dataset (subclasses define __iter__ and __len__)."""

    def __init__(self, data_source=None):
        self.data_source = data_source

    def __iter__(self):
        raise NotImplementedError("%s must define __iter__" % type(self).__name__)

    def __len__(self):
        return len(self.data_source)


class SequenceSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __iter__(self):
        return iter(range(len(self.data_source)))


class RandomSampler(Sampler):
    """A random permutation (or num_samples draws with replacement)."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        super().__init__(data_source)
        if not isinstance(replacement, bool):
            raise TypeError("RandomSampler: replacement must be a bool, got %r" % (replacement,))
        if num_samples is not None and not replacement:
            raise ValueError("RandomSampler: num_samples is for replacement=True (a permutation has len(data) "
                             "samples)")
        if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(num_samples, int)
                                        or num_samples <= 0):
            raise ValueError("RandomSampler: num_samples must be a positive int, got %r" % (num_samples,))
        self.replacement, self._num_samples, self.generator = replacement, num_samples, generator

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, rng = len(self.data_source), _rng(self.generator)
        if self.replacement:
            return iter(int(i) for i in rng.randint(0, n, size=self.num_samples))
        return iter(_permutation(rng, n))

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order."""

    def __init__(self, indices, generator=None):
        super().__init__(None)
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        return iter(self.indices[i] for i in _permutation(_rng(self.generator), len(self.indices)))

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """num_samples indices drawn with probability proportional to weights."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        super().__init__(None)
        w = np.asarray(weights.numpy() if hasattr(weights, "numpy") else weights, dtype=np.float64).reshape(-1)
        if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("WeightedRandomSampler: weights must be finite, >= 0 and not all 0")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError("WeightedRandomSampler: num_samples must be a positive int, got %r" % (num_samples,))
        if not replacement and num_samples > np.count_nonzero(w):
            raise ValueError("WeightedRandomSampler: %d samples without replacement, but only %d weights are > 0"
                             % (num_samples, np.count_nonzero(w)))
        self.weights, self.num_samples, self.replacement, self.generator = w, num_samples, replacement, generator

    def __iter__(self):
        rng = _rng(self.generator)
        idx = rng.choice(len(self.weights), self.num_samples, replace=self.replacement, p=self.weights / self.weights.sum())
        return iter(int(i) for i in idx)

    def __len__(self):
        return self.num_samples


def _batch_size(v, what):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError("%s: batch_size must be a positive int, got %r" % (what, v))
    return int(v)


class BatchSampler(Sampler):
    """Lists of batch_size indices from sampler (or from a SequenceSampler /
    RandomSampler of dataset: shuffle); the last shorter one dropped with
    drop_last."""

    def __init__(self, dataset=None, sampler=None, shuffle=False, batch_size=1, drop_last=False):
        if (dataset is None) == (sampler is None):
            raise ValueError("BatchSampler: give either dataset or sampler")
        if sampler is None:
            if isinstance(dataset, IterableDataset):
                raise TypeError("BatchSampler: %s is an IterableDataset (it has no indices)" % type(dataset).__name__)
            sampler = RandomSampler(dataset) if shuffle else SequenceSampler(dataset)
        elif shuffle:
            raise ValueError("BatchSampler: shuffle is for dataset=; a sampler decides its own order")
        self.sampler, self.batch_size, self.drop_last = sampler, _batch_size(batch_size, "BatchSampler"), bool(drop_last)

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size


class DistributedBatchSampler(BatchSampler):
    """This rank's batches of the dataset (see the module's comment):
    num_replicas and rank default to the trainer environment
    (pe.distributed.ParallelEnv: PADDLE_TRAINERS_NUM / PADDLE_TRAINER_ID, or
    Open MPI's). Call set_epoch(e) before each epoch for a shuffle that is
    the same on every rank and differs between epochs."""

    def __init__(self, dataset, batch_size, num_replicas=None, rank=None, shuffle=False, drop_last=False):
        if isinstance(dataset, IterableDataset):
            raise TypeError("DistributedBatchSampler: %s is an IterableDataset (it has no indices)"
                            % type(dataset).__name__)
        self.dataset = dataset
        self.batch_size = _batch_size(batch_size, "DistributedBatchSampler")
        if num_replicas is None or rank is None:
            from ..distributed.env import ParallelEnv
            env = ParallelEnv()
            num_replicas = env.world_size if num_replicas is None else num_replicas
            rank = env.rank if rank is None else rank
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError("DistributedBatchSampler: num_replicas must be an int >= 1, got %r" % (num_replicas,))
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError("DistributedBatchSampler: rank must be an int in [0, %d), got %r" % (num_replicas, rank))
        self.nranks, self.local_rank = num_replicas, rank
        self.shuffle, self.drop_last, self.epoch = bool(shuffle), bool(drop_last), 0
        self.num_samples = int(math.ceil(len(dataset) / self.nranks))
        self.total_size = self.num_samples * self.nranks

    def set_epoch(self, epoch):
        """The epoch seeds the shuffle (the same on every rank)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise TypeError("DistributedBatchSampler.set_epoch: epoch must be an int, got %r" % (epoch,))
        self.epoch = epoch

    def _indices(self):
        n = len(self.dataset)
        idx = list(range(n))
        if n:
            idx += (idx * (self.total_size // n + 1))[:self.total_size - n]
        if self.shuffle:
            np.random.RandomState(self.epoch).shuffle(idx)
            self.epoch += 1
        if self.nranks == 1:
            return idx
        # whole batches dealt round-robin, then the remainder split evenly
        bs, R, r = self.batch_size, self.nranks, self.local_rank
        tail = self.total_size % (bs * R)
        mine = []
        for start in range(r * bs, self.total_size - tail, bs * R):
            mine.extend(idx[start:start + bs])
        per = tail // R
        base = self.total_size - tail
        mine.extend(idx[base + r * per:base + (r + 1) * per])
        return mine

    def __iter__(self):
        idx = self._indices()
        for i in range(0, len(idx), self.batch_size):
            b = idx[i:i + self.batch_size]
            if len(b) == self.batch_size or not self.drop_last:
                yield b

    def __len__(self):
        n = self.num_samples
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size


# ---- collation --------------------------------------------------------------------------------

def _as_array(x):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "numpy") and callable(x.numpy):
        return np.asarray(x.numpy())
    return None


def default_collate_fn(batch):
    """A list of samples -> one batch: arrays / tensors / numbers stacked along
    a new axis 0 (numbers as float32 when float, int64 when int, as Paddle's),
    dicts key by key, tuples and lists field by field; str kept as lists."""
    if not isinstance(batch, (list, tuple)) or not batch:
        raise TypeError("default_collate_fn: a batch is a non-empty list of samples, got %r" % (type(batch).__name__,))
    s0 = batch[0]
    if _as_array(s0) is not None:
        arrs = [_as_array(s) for s in batch]
        if any(a is None for a in arrs) or len({a.shape for a in arrs}) != 1:
            shapes = sorted({str(a.shape) if a is not None else type(s).__name__ for a, s in zip(arrs, batch)})
            raise ValueError("default_collate_fn: the samples' arrays differ in shape or kind (%s); give a "
                             "collate_fn to batch them" % ", ".join(shapes[:4]))
        return _stack(arrs)
    if isinstance(s0, (bool, np.bool_)):
        return np.array(batch, dtype=np.bool_)
    if isinstance(s0, (int, np.integer)):
        return np.array(batch, dtype=np.int64)
    if isinstance(s0, (float, np.floating)):
        return np.array(batch, dtype=np.float32)
    if isinstance(s0, (str, bytes)):
        return list(batch)
    if isinstance(s0, dict):
        for s in batch:
            if not isinstance(s, dict) or s.keys() != s0.keys():
                raise ValueError("default_collate_fn: the samples are dicts with different keys")
        return {k: default_collate_fn([s[k] for s in batch]) for k in s0}
    if isinstance(s0, (list, tuple)):
        if any(not isinstance(s, (list, tuple)) or len(s) != len(s0) for s in batch):
            raise ValueError("default_collate_fn: the samples have different numbers of fields")
        return [default_collate_fn([s[i] for s in batch]) for i in range(len(s0))]
    raise TypeError("default_collate_fn: cannot batch samples of type %s; give a collate_fn" % type(s0).__name__)


def default_convert_fn(batch):
    """For batch_size=None (the dataset yields whole batches): tensors to
    numpy, containers converted field by field, everything else kept."""
    a = _as_array(batch)
    if a is not None:
        return a
    if isinstance(batch, dict):
        return {k: default_convert_fn(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [default_convert_fn(v) for v in batch]
    return batch


# ---- workers ----------------------------------------------------------------------------------

class WorkerInfo:
    """What get_worker_info() says inside a DataLoader worker."""

    def __init__(self, id, num_workers, dataset, seed):  # noqa: A002 (Paddle's name)
        self.id, self.num_workers, self.dataset, self.seed = id, num_workers, dataset, seed

    def __repr__(self):
        return "WorkerInfo(id=%d, num_workers=%d, seed=%d)" % (self.id, self.num_workers, self.seed)


_worker_info = None


def get_worker_info():
    """A WorkerInfo (id, num_workers, dataset, seed) in a DataLoader worker
    process; None in the main process."""
    return _worker_info


class _Failure:
    """A worker's exception, as text (the exception itself may not pickle)."""

    def __init__(self, worker, exc, note=""):
        self.worker = worker
        self.kind = type(exc).__name__
        self.text = note + "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__))


# ---- results and tasks: two pipes per worker ------------------------------------------------------
# Each worker has a pipe of tasks from the training process and a pipe of
# results back; every message is an 8-byte length and a pickle, written
# whole by the sender itself (no feeder thread) and read without blocking:
# the training process waits on the result pipes and the workers' process
# sentinels together, a worker on its task pipe with a timeout. So a worker
# that dies mid-message (killed, or os._exit in a dataset) leaves a partial
# message that is never parsed and is seen dead at once, never a read that
# waits forever; a result that does not pickle is a failure sent in its
# place; a training process that dies (or a pool that closes) ends the task
# pipes, which its workers see as the end of their work.

_HDR = struct.Struct("<Q")
_pipe_fds = set()  # every pool's pipe ends open in this process: a new worker closes all but its two
_EMPTY = object()  # _Reader.pop: no complete message yet


def _send(fd, obj, wid):
    """A worker's result (pass, task, data) to the training process."""
    try:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 (a lambda, an open file, ... in the batch)
        payload = pickle.dumps((obj[0], obj[1], _Failure(wid, e, "batch %s could not be sent to the training "
                                                                 "process: a batch must pickle (arrays, numbers, "
                                                                 "str and containers of them)\n" % obj[1])))
    _frame(fd, payload)


def _frame(fd, payload):
    """payload after its length, whole (blocking)."""
    view = memoryview(_HDR.pack(len(payload)) + payload) if len(payload) < 65536 else None
    if view is None:
        _write_all(fd, memoryview(_HDR.pack(len(payload))))
        view = memoryview(payload)
    _write_all(fd, view)


def _write_all(fd, view):
    while len(view):
        view = view[os.write(fd, view):]


class _Reader:
    """The reading end of a task or result pipe: messages as they complete."""

    def __init__(self, fd):
        self.fd, self.buf, self.eof = fd, bytearray(), False
        os.set_blocking(fd, False)

    def fill(self):
        """Reads what is there (never waits)."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 22)
            except BlockingIOError:
                return
            if not chunk:
                self.eof = True
                return
            self.buf += chunk

    def pop(self):
        """The next complete message, unpickled, or _EMPTY."""
        if len(self.buf) < _HDR.size:
            return _EMPTY
        n = _HDR.unpack_from(self.buf)[0]
        if len(self.buf) < _HDR.size + n:
            return _EMPTY
        with memoryview(self.buf) as m:
            obj = pickle.loads(m[_HDR.size:_HDR.size + n])
        del self.buf[:_HDR.size + n]
        return obj


class _End:
    """An iterable dataset's worker ran out of samples."""


def _fetch(dataset, indices, auto_collate, collate_fn):
    samples = [dataset[i] for i in indices]
    return collate_fn(samples) if auto_collate else collate_fn(samples[0])


# ---- batches through shared memory ----------------------------------------------------------
# A worker puts each large array of a batch in a file of /dev/shm (a tmpfs:
# memory, not disk) and sends its name, shape and dtype; the main process
# maps the file, unlinks it at once and hands the mapping out as the array
# (no copy on that side: the pages live as long as the array).
# default_collate_fn, in such a worker, stacks the samples straight into the
# file (the batch is copied once, as PyTorch's workers do); other large
# arrays (a collate_fn's own) are copied into one. The space is reserved
# with posix_fallocate first, so a full /dev/shm (a container's 64 MB) is
# an error the worker sees, and that array travels pickled instead, never
# a SIGBUS later. A task's files that are not sent (a collate_fn that made
# something else of the stacked array, a failure) are removed when the task
# ends; files sent but never mapped (a pass abandoned, a worker killed) when
# the pool closes: their names start with the pool's prefix
# (pe-io-<main pid>-<pool>-). A worker whose training process died removes
# its files and exits: told by the kernel's parent-death signal (Linux:
# _PARENT_SIGNAL, its handler runs between two bytecodes of whatever the
# worker is doing, and ends a sleep), and failing that, an idle worker
# looks every _PARENT_POLL_S.

_SHM_DIR = "/dev/shm"
_SHM_MIN = 64 * 1024           # smaller arrays travel pickled: a file costs more than their copy
_pool_ids = itertools.count()
_worker_shm = None             # a worker's _WorkerShm, when batches go through shared memory
_PARENT_POLL_S = 1.0           # an idle worker checks this often that the training process lives
# The parent-death signal: a real-time one, which neither Python nor multiprocessing (terminate sends
# SIGTERM) nor a typical dataset uses.
_PARENT_SIGNAL = getattr(signal, "SIGRTMIN", 34) + 3


def _remove_files(prefix):
    for name in os.listdir(_SHM_DIR):
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(_SHM_DIR, name))
            except OSError:
                pass


class _Shared:
    """An array left in _SHM_DIR/name by a worker."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, shape, dtype


class _WorkerShm:
    """A worker's files in /dev/shm: made by alloc, sent by share, the rest removed by end_task."""

    def __init__(self, prefix):
        self.prefix, self.seq = prefix, itertools.count()
        self.made = {}   # id(array) -> (name, array): this task's files, mapped as arrays

    def _create(self, nbytes):
        """(name, fd) of a new file with nbytes reserved; None when there is no room."""
        name = "%s%d" % (self.prefix, next(self.seq))
        path = os.path.join(_SHM_DIR, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError:
            os.close(fd)
            os.unlink(path)
            return None
        return name, fd

    def alloc(self, shape, dtype):
        """An array of shape and dtype mapped from a new file; None when there is no room."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        made = self._create(nbytes)
        if made is None:
            return None
        name, fd = made
        try:
            mm = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
        a = np.ndarray(shape, dtype, buffer=mm)
        self.made[id(a)] = (name, a)
        return a

    def _copy(self, a):
        """a's bytes into a new file; its name, or None when there is no room."""
        a = np.ascontiguousarray(a)
        made = self._create(a.nbytes)
        if made is None:
            return None
        name, fd = made
        try:
            _write_all(fd, memoryview(a.reshape(-1)).cast("B"))
        finally:
            os.close(fd)
        return name

    def share(self, data):
        """data with its large numpy arrays replaced by _Shared (the files the main process maps)."""
        return _map_leaves(data, self._share_leaf)

    def _share_leaf(self, a):
        if not isinstance(a, np.ndarray):
            return a
        ent = self.made.get(id(a))
        if ent is not None and ent[1] is a:
            del self.made[id(a)]  # sent: the main process unlinks it
            return _Shared(ent[0], a.shape, a.dtype.str)
        if a.nbytes < _SHM_MIN or a.dtype.hasobject:
            return a
        name = self._copy(a)
        return a if name is None else _Shared(name, a.shape, a.dtype.str)

    def remove_all(self):
        """Every file of this worker, sent or not (the training process died)."""
        self.end_task()
        _remove_files(self.prefix)

    def end_task(self):
        for name, _ in self.made.values():
            try:
                os.unlink(os.path.join(_SHM_DIR, name))
            except OSError:
                pass
        self.made.clear()


def _stack(arrs):
    """np.stack(arrs) — in a worker that sends batches through shared memory, into a file."""
    if _worker_shm is not None:
        dtype = np.result_type(*{a.dtype for a in arrs})
        if not dtype.hasobject and len(arrs) * arrs[0].size * dtype.itemsize >= _SHM_MIN:
            out = _worker_shm.alloc((len(arrs),) + arrs[0].shape, dtype)
            if out is not None:
                return np.stack(arrs, out=out)
    return np.stack(arrs)


def _map_leaves(data, fn):
    """data with fn applied to each leaf: dicts key by key, lists and tuples (not namedtuples)
    item by item, keeping their types."""
    if isinstance(data, dict):
        return {k: _map_leaves(v, fn) for k, v in data.items()}
    if isinstance(data, (list, tuple)) and not hasattr(data, "_fields"):
        return type(data)(_map_leaves(v, fn) for v in data)
    return fn(data)


def _unshare(data):
    """share undone in the main process: each _Shared mapped as an array, its file unlinked."""
    return _map_leaves(data, _map_shared)


def _map_shared(leaf):
    if not isinstance(leaf, _Shared):
        return leaf
    path = os.path.join(_SHM_DIR, leaf.name)
    fd = os.open(path, os.O_RDWR)
    try:
        os.unlink(path)
        dtype = np.dtype(leaf.dtype)
        n = int(np.prod(leaf.shape, dtype=np.int64))
        size = os.fstat(fd).st_size
        if size != n * dtype.itemsize:
            raise RuntimeError("DataLoader: shared-memory batch %s holds %d bytes, %d expected"
                               % (path, size, n * dtype.itemsize))
        mm = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    return np.frombuffer(mm, dtype=dtype, count=n).reshape(leaf.shape)


def _worker_exit_if_orphaned(parent):
    """The training process (pid parent) is gone: this worker's files removed, the worker ended."""
    if os.getppid() != parent:
        if _worker_shm is not None:
            _worker_shm.remove_all()
        os._exit(0)


def _watch_parent(parent):
    """Has the kernel signal this worker when the training process dies (pe.utils._process). The
    signal also comes when the thread that made the pool ends while the process lives on: the
    handler then finds the same parent and the worker carries on."""
    try:
        signal.signal(_PARENT_SIGNAL, lambda signum, frame: _worker_exit_if_orphaned(parent))
    except (ValueError, OSError):  # no such signal here
        return
    set_parent_death_signal(_PARENT_SIGNAL)
    _worker_exit_if_orphaned(parent)  # died before the signal was asked for


def _worker_main(wid, nw, dataset, seed, init_fn, task_fd, current, out_fd, auto_collate, collate_fn,
                 iterable, batch_size, drop_last, shm_prefix, parent):
    global _worker_info, _worker_shm
    # the other ends, other workers' and other pools' pipes: closed here, so that EOF and EPIPE
    # mean that the one process at the other end is gone
    for fd in _pipe_fds - {task_fd, out_fd}:
        os.close(fd)
    _pipe_fds.clear()
    _worker_info = WorkerInfo(wid, nw, dataset, seed)
    _worker_shm = _WorkerShm("%s%d-" % (shm_prefix, wid)) if shm_prefix else None
    _watch_parent(parent)
    _random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    try:
        if init_fn is not None:
            init_fn(wid)
        it, it_pass = (iter(dataset) if iterable else None), 0
    except Exception as e:  # noqa: BLE001 (reported to the main process)
        _send(out_fd, (None, None, _Failure(wid, e)), wid)
        return
    inbox = _Reader(task_fd)
    while True:
        task = inbox.pop()
        if task is _EMPTY and not inbox.eof and _mpc.wait([task_fd], timeout=_PARENT_POLL_S):
            inbox.fill()
            task = inbox.pop()
        if os.getppid() != parent or (task is _EMPTY and inbox.eof):
            # the pool closed its end of the task pipe, or the training process is gone (killed, its
            # end closed by its exit before this worker is reparented): nobody reads the results or
            # maps this worker's files any more
            if _worker_shm is not None:
                _worker_shm.remove_all()
            return
        if task is _EMPTY:
            continue
        pass_, n, indices = task
        if pass_ != current.value:  # a task of a pass abandoned or of a pool closing: skipped
            continue
        try:
            if iterable:
                if pass_ != it_pass:  # persistent workers: a new pass over the dataset
                    it, it_pass = iter(dataset), pass_
                got = list(itertools.islice(it, batch_size if auto_collate else 1))
                if not got or (auto_collate and drop_last and len(got) < batch_size):
                    _send(out_fd, (pass_, n, _End()), wid)
                    continue
                data = collate_fn(got) if auto_collate else collate_fn(got[0])
            else:
                data = _fetch(dataset, indices, auto_collate, collate_fn)
            if _worker_shm is not None:
                data = _worker_shm.share(data)
            _send(out_fd, (pass_, n, data), wid)
        except Exception as e:  # noqa: BLE001
            _send(out_fd, (pass_, n, _Failure(wid, e)), wid)
        finally:
            data = None
            if _worker_shm is not None:
                _worker_shm.end_task()


class _WorkerPool:
    """The loader's num_workers processes; run(batches) loads one pass's
    batches, in order. Without persistent_workers a pool serves one pass;
    with them, pass after pass (each task and result carries its pass, and
    results of an abandoned pass are dropped when they arrive). The pool
    keeps no reference to the loader (so a loader's finalizer can close
    it)."""

    def __init__(self, loader):
        ctx = _mp.get_context("fork")  # the workers inherit their pipes
        nw = loader.num_workers
        self.iterable, self.timeout = loader._iterable, loader.timeout
        self.cap = loader.prefetch_factor * nw
        self.current = ctx.RawValue("q", 0)  # the pass under way (-1: closing); other tasks are skipped
        self.shm_prefix = ("pe-io-%d-%d-" % (os.getpid(), next(_pool_ids))
                           if loader.use_shared_memory and os.path.isdir(_SHM_DIR) else "")
        base = int(np.random.randint(0, 2 ** 31 - 1))
        self.procs, self.readers = [], []
        self.closed = self.busy = False
        self.passes = 0
        pipes = [os.pipe() for _ in range(nw)]  # (read, write) of each worker's results
        inboxes = [os.pipe() for _ in range(nw)]  # (read, write) of each worker's tasks
        self.readers = [_Reader(r) for r, _ in pipes]
        self.task_fds = [wr for _, wr in inboxes]
        _pipe_fds.update(fd for pair in pipes + inboxes for fd in pair)
        try:
            for w in range(nw):
                p = ctx.Process(target=_worker_main, daemon=True,
                                args=(w, nw, loader.dataset, base + w, loader.worker_init_fn, inboxes[w][0],
                                      self.current, pipes[w][1], loader._auto_collate, loader.collate_fn,
                                      loader._iterable, loader.batch_size, loader.drop_last, self.shm_prefix,
                                      os.getpid()))
                p.start()
                self.procs.append(p)
        except BaseException:
            self.close()
            raise
        finally:
            for fd in [wr for _, wr in pipes] + [r for r, _ in inboxes]:  # the workers' ends
                os.close(fd)
                _pipe_fds.discard(fd)

    def _check_workers(self):
        for w, p in enumerate(self.procs):
            if p.exitcode is not None and p.exitcode != 0:
                raise RuntimeError("DataLoader worker %d (pid %d) exited unexpectedly with code %s%s"
                                   % (w, p.pid, p.exitcode, " (signal %d)" % -p.exitcode if p.exitcode < 0 else ""))

    def _task(self, w, task):
        try:
            _frame(self.task_fds[w], pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL))
        except BrokenPipeError:  # the worker is gone
            self.procs[w].join(timeout=1)
            self._check_workers()
            raise RuntimeError("DataLoader worker %d (pid %d) stopped taking tasks" % (w, self.procs[w].pid))

    def _get(self):
        """The next result of any worker: (pass, task, data)."""
        t0 = time.monotonic()
        while True:
            for r in self.readers:
                msg = r.pop()
                if msg is not _EMPTY:
                    return msg
            self._check_workers()
            waitables = [r.fd for r in self.readers if not r.eof] + [p.sentinel for p in self.procs
                                                                      if p.exitcode is None]
            ready = set(_mpc.wait(waitables, timeout=0.2)) if waitables else set()
            for r in self.readers:
                if r.fd in ready:
                    r.fill()
            if not waitables:
                raise RuntimeError("DataLoader: every worker has ended with batches still to come")
            if self.timeout and not ready and time.monotonic() - t0 >= self.timeout:
                raise RuntimeError("DataLoader: no batch from the workers in %s s (timeout)" % self.timeout)

    def run(self, batches, keep=False):
        """The batches of one pass, a generator (batches: an iterator of index lists, None for
        an iterable dataset); keep: the pool stays open after the pass, ended or abandoned
        (persistent_workers), unless it fails. The pool is busy until the generator ends."""
        self.busy = True
        self.passes += 1
        self.current.value = self.passes
        return self._pass(self.passes, batches, keep)

    def _pass(self, pass_, batches, keep):
        sent = nxt = 0
        ahead, owner = {}, {}                # results early; iterable: task -> the worker it went to
        live = set(range(len(self.procs)))   # iterable: workers that may still have samples
        failed = True
        try:
            while True:
                while sent - nxt < self.cap:  # up to cap tasks in flight
                    if self.iterable:
                        if not live:
                            break
                        w = sorted(live)[sent % len(live)]
                        owner[sent] = w
                        self._task(w, (pass_, sent, None))
                    else:
                        idx = next(batches, None)
                        if idx is None:
                            break
                        self._task(sent % len(self.procs), (pass_, sent, idx))
                    sent += 1
                if nxt == sent:
                    break
                while nxt not in ahead:
                    p, n, data = self._get()
                    if p is not None and p != pass_:  # an abandoned pass's result: its files go now
                        if not isinstance(data, _Failure):
                            _unshare(data)
                        continue
                    if isinstance(data, _Failure):
                        raise RuntimeError("DataLoader worker %d raised %s:\n%s" % (data.worker, data.kind, data.text))
                    ahead[n] = data
                data = ahead.pop(nxt)
                nxt += 1
                if isinstance(data, _End):
                    # the worker this task went to is done; its later tasks answer _End too
                    live.discard(owner.pop(nxt - 1))
                else:
                    owner.pop(nxt - 1, None)
                    yield _unshare(data) if self.shm_prefix else data
            failed = False
        except GeneratorExit:  # the loop over the batches stopped early
            failed = False
            raise
        finally:
            for data in ahead.values():
                if not isinstance(data, (_Failure, _End)):
                    _unshare(data)
            self.current.value = 0  # what is still queued for this pass is skipped
            self.busy = False
            if failed or not keep:
                self.close()

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.current.value = -1  # the workers skip what is queued and stop at the end of their task pipe
        for fd in self.task_fds:
            os.close(fd)
            _pipe_fds.discard(fd)
        self.task_fds = []
        for p in self.procs:
            p.join(timeout=2)
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
        for r in self.readers:
            os.close(r.fd)
            _pipe_fds.discard(r.fd)
        self.readers = []
        if self.shm_prefix:  # the files no one mapped (a pass abandoned, a worker killed mid-batch)
            _remove_files(self.shm_prefix)


# ---- the loader -------------------------------------------------------------------------------

class DataLoader:
    """Batches of dataset (see the module's comment). Paddle 2.x's
    arguments: batch_size / shuffle / drop_last make a BatchSampler unless
    batch_sampler is given; batch_size=None hands the dataset's items over
    as they are (default_convert_fn); collate_fn replaces
    default_collate_fn; num_workers > 0 loads in that many processes;
    feed_list (static mode, return_list=False) names the fields: each batch
    is then [{name: array}], a feed for Executor / ParallelExecutor.run.
    places is accepted (the executor places the data), use_buffer_reader
    too (workers always load ahead). With workers: use_shared_memory (the
    default) moves a batch's arrays of 64 KiB or more through /dev/shm
    instead of pickling them; persistent_workers keeps the workers between
    passes (started by the first, stopped when the loader is freed or a
    pass fails) instead of starting them for each pass."""

    def __init__(self, dataset, feed_list=None, places=None, return_list=True, batch_sampler=None, batch_size=1,
                 shuffle=False, drop_last=False, collate_fn=None, num_workers=0, use_buffer_reader=True,
                 prefetch_factor=2, use_shared_memory=True, timeout=0, worker_init_fn=None,
                 persistent_workers=False):
        self.dataset = dataset
        self._iterable = isinstance(dataset, IterableDataset)
        if not self._iterable and not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError("DataLoader: dataset must be a pe.io.Dataset (or have __getitem__ and __len__) or an "
                            "IterableDataset, got %s" % type(dataset).__name__)
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("DataLoader: num_workers must be an int >= 0, got %r" % (num_workers,))
        if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int) or prefetch_factor < 1:
            raise ValueError("DataLoader: prefetch_factor must be an int >= 1, got %r" % (prefetch_factor,))
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout < 0:
            raise ValueError("DataLoader: timeout must be a number >= 0, got %r" % (timeout,))
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or drop_last:
                raise ValueError("DataLoader: batch_sampler excludes batch_size, shuffle and drop_last (the "
                                 "sampler has its own)")
            if self._iterable:
                raise ValueError("DataLoader: an IterableDataset takes no batch_sampler")
            self.batch_sampler, self.batch_size = batch_sampler, getattr(batch_sampler, "batch_size", None)
        elif batch_size is None:
            if shuffle or drop_last:
                raise ValueError("DataLoader: batch_size=None (no batching) excludes shuffle and drop_last")
            self.batch_sampler = None if self._iterable else BatchSampler(dataset, batch_size=1)
            self.batch_size = None
        else:
            self.batch_size = _batch_size(batch_size, "DataLoader")
            if self._iterable:
                if shuffle:
                    raise ValueError("DataLoader: an IterableDataset cannot be shuffled by the loader")
                self.batch_sampler = None
            else:
                self.batch_sampler = BatchSampler(dataset, shuffle=shuffle, batch_size=self.batch_size,
                                                  drop_last=drop_last)
        self._auto_collate = self.batch_size is not None or (batch_sampler is not None)
        self.collate_fn = collate_fn or (default_collate_fn if self._auto_collate else default_convert_fn)
        self.drop_last = bool(drop_last)
        self.num_workers, self.prefetch_factor, self.timeout = num_workers, prefetch_factor, timeout
        self.worker_init_fn = worker_init_fn
        self.return_list = bool(return_list)
        self.feed_list = list(feed_list) if feed_list is not None else None
        self.places = places
        self.use_buffer_reader, self.use_shared_memory = use_buffer_reader, use_shared_memory
        self.persistent_workers = bool(persistent_workers)  # (Paddle's: no effect without workers)
        self._pool = None
        if not self.return_list and self.feed_list is None:
            raise ValueError("DataLoader: return_list=False needs feed_list (the names of the fed variables)")

    def __len__(self):
        if self._iterable:
            raise TypeError("DataLoader over an IterableDataset has no len()")
        return len(self.batch_sampler)

    def __call__(self):
        return self.__iter__()

    def _raw(self):
        """The collated batches, in order (numpy arrays and containers)."""
        if self.num_workers > 0:
            batches = iter(self.batch_sampler) if self.batch_sampler is not None else None
            if not self.persistent_workers:
                return _WorkerPool(self).run(batches)
            pool = self._pool
            if pool is None or pool.closed:
                pool = self._pool = _WorkerPool(self)
                weakref.finalize(self, pool.close)
            elif pool.busy:  # a second pass while one is under way: workers of its own
                return _WorkerPool(self).run(batches)
            return pool.run(batches, keep=True)
        if self._iterable:
            return self._iterate_single()
        return (_fetch(self.dataset, idx, self._auto_collate, self.collate_fn) for idx in self.batch_sampler)

    def _iterate_single(self):
        it = iter(self.dataset)
        if not self._auto_collate:
            for s in it:
                yield self.collate_fn(s)
            return
        while True:
            got = list(itertools.islice(it, self.batch_size))
            if not got or (self.drop_last and len(got) < self.batch_size):
                return
            yield self.collate_fn(got)

    def __iter__(self):
        from .. import framework as _fw
        static = _fw._static_mode
        for batch in self._raw():
            if static:
                yield self._feed(batch) if not self.return_list else batch
            else:
                yield _to_tensors(batch)

    def _feed(self, batch):
        fields = batch if isinstance(batch, (list, tuple)) else [batch]
        names = [getattr(v, "name", v) for v in self.feed_list]
        if len(fields) != len(names):
            raise ValueError("DataLoader: a batch has %d fields but feed_list names %d variables (%s)"
                             % (len(fields), len(names), ", ".join(map(str, names))))
        return [dict(zip(names, fields))]


def _to_tensors(batch):
    if isinstance(batch, np.ndarray):
        from ..eager import to_tensor
        return to_tensor(batch)
    if isinstance(batch, dict):
        return {k: _to_tensors(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [_to_tensors(v) for v in batch]
    return batch
