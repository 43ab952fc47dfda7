"""fluid.create_lod_tensor / LoDTensor: tensors of variable-length sequences (Paddle 1.x LoD).

    t = fluid.create_lod_tensor(np.arange(5, dtype="float32").reshape(5, 1), [[2, 3]], fluid.CPUPlace())
    t.recursive_sequence_lengths()   # [[2, 3]]
    t.lod()                          # [[0, 2, 5]]: offsets
    exe.run(feed={"x": t}, fetch_list=[out], return_numpy=False)  # LoDTensors, LoD included

A LoDTensor is a pe Tensor (pe._core.Tensor) whose LoD is set: the C engine
keeps it with the tensor (include/pe/tensor.h), carries it from the feed into
the scope, through the ops that keep rows (Paddle's ShareLoD) and back with
the fetch.
"""
import numpy as np

from .. import _core

__all__ = ["LoDTensor", "create_lod_tensor", "create_random_int_lodtensor"]

LoDTensor = _core.Tensor


def _check_lengths(recursive_seq_lens, api):
    """The lengths as lists of ints: lists / tuples of them, or (as Paddle's
    pybind conversion takes, and the word2vec book passes) a 2-D integer numpy
    array, one row per level."""
    if isinstance(recursive_seq_lens, np.ndarray):
        if recursive_seq_lens.ndim != 2 or recursive_seq_lens.dtype.kind not in "iu":
            raise _core.InvalidArgumentError("%s: recursive_seq_lens as a numpy array must be 2-D of integers (one "
                                             "row per level), got %s %s" % (api, recursive_seq_lens.dtype,
                                                                            list(recursive_seq_lens.shape)))
        recursive_seq_lens = recursive_seq_lens.tolist()
    if not isinstance(recursive_seq_lens, (list, tuple)) or not all(
            isinstance(lv, (list, tuple)) for lv in recursive_seq_lens):
        raise _core.InvalidArgumentError("%s: recursive_seq_lens must be a list of lists of sequence lengths, got %r"
                                         % (api, recursive_seq_lens))
    return [[int(n) for n in lv] for lv in recursive_seq_lens]


def create_lod_tensor(data, recursive_seq_lens, place):
    """A LoDTensor from data (a numpy array, a list of sequences, or a LoDTensor)
    and the sequence lengths per level (recursive_seq_lens=[[2, 3]]: two
    sequences of 2 and 3 rows). A list of sequences of ints becomes an int64
    [rows, 1] tensor, as in Paddle; its lengths must match the last level."""
    api = "fluid.create_lod_tensor"
    lens = _check_lengths(recursive_seq_lens, api)
    if isinstance(data, _core.Tensor):
        return create_lod_tensor(np.array(data), lens, place)
    if isinstance(data, list):
        if not lens:
            raise _core.InvalidArgumentError("%s: a list of sequences needs recursive_seq_lens" % api)
        seq_lens = [len(seq) for seq in data]
        if seq_lens != lens[-1]:
            raise _core.InvalidArgumentError(
                "%s: the sequences have lengths %s, recursive_seq_lens' last level says %s" % (api, seq_lens, lens[-1]))
        flat = [np.asarray(x) for seq in data for x in seq]
        arr = np.asarray(flat) if flat else np.zeros((0,), dtype=np.int64)
        if arr.dtype.kind in "iub":
            arr = arr.astype(np.int64)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        data = arr
    if not isinstance(data, np.ndarray):
        raise TypeError("%s: data must be a numpy array, a list of sequences or a LoDTensor, got %s"
                        % (api, type(data).__name__))
    t = _core.Tensor()
    t.set(data, place)
    t.set_recursive_sequence_lengths(lens)
    if not t.has_valid_recursive_sequence_lengths():
        rows = data.shape[0] if data.ndim else 0
        raise _core.InvalidArgumentError("%s: the sequence lengths %s cover %d rows, the data has %d (shape %s)"
                                         % (api, lens[-1], sum(lens[-1]), rows, list(data.shape)))
    return t


def create_random_int_lodtensor(recursive_seq_lens, base_shape, place, low, high):
    """A LoDTensor of random ints in [low, high]: rows = sum of the last level's lengths,
    each row of shape base_shape."""
    lens = _check_lengths(recursive_seq_lens, "fluid.create_random_int_lodtensor")
    rows = sum(lens[-1]) if lens else 0
    data = np.random.randint(low, high + 1, size=[rows] + list(base_shape)).astype("int64")
    return create_lod_tensor(data, lens, place)
