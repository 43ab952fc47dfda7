"""fluid.DataFeeder: a minibatch given as a list of sample tuples -> the feed dict.

    feeder = fluid.DataFeeder(feed_list=[image, label], place=fluid.CPUPlace())
    exe.run(feed=feeder.feed([(img0, lbl0), (img1, lbl1), ...]), ...)

Field i of every sample goes to feed_list[i]; the rows are stacked and
shaped [batch] + the var's dims after the first, in the var's dtype.
A var declared with lod_level=L > 0 (fluid.layers.data) takes, per sample,
a sequence nested L deep (lod_level=1: a list of rows of any length): the
rows of all samples are concatenated and the feed is a LoDTensor whose
sequence lengths are the samples' (Paddle's DataToLoDTensorConverter).
"""
import numpy as np

from .. import _core
from ..framework import Variable, default_main_program

__all__ = ["DataFeeder"]


class DataFeeder:
    def __init__(self, feed_list, place, program=None):
        self.place = place
        program = program if program is not None else default_main_program()
        self.feed_vars = []
        for v in feed_list:
            if isinstance(v, str):
                block = program.global_block()
                if v not in block.vars:
                    raise _core.NotFoundError("DataFeeder: no variable '%s' in the program" % v)
                v = block.vars[v]
            if not isinstance(v, Variable):
                raise TypeError("DataFeeder: feed_list holds Variables or names, got %s" % type(v).__name__)
            self.feed_vars.append(v)

    def feed(self, iterable):
        samples = list(iterable)
        if not samples:
            raise _core.InvalidArgumentError("DataFeeder.feed: the minibatch is empty")
        n = len(self.feed_vars)
        cols = [[] for _ in range(n)]
        for i, s in enumerate(samples):
            if len(s) != n:
                raise _core.InvalidArgumentError("DataFeeder.feed: sample %d has %d fields, the feed list has %d (%s)"
                                                 % (i, len(s), n, ", ".join(v.name for v in self.feed_vars)))
            for k in range(n):
                cols[k].append(s[k] if getattr(self.feed_vars[k], "lod_level", 0) > 0 else np.asarray(s[k]))
        out = {}
        for v, col in zip(self.feed_vars, cols):
            if getattr(v, "lod_level", 0) > 0:
                out[v.name] = self._lod_feed(v, col)
                continue
            try:
                arr = np.stack(col).astype(v.dtype, copy=False)
            except ValueError as e:
                raise _core.InvalidArgumentError("DataFeeder.feed: the samples' '%s' fields differ in shape: %s"
                                                 % (v.name, e)) from None
            tail = [int(d) for d in v.shape[1:]]
            if all(d >= 0 for d in tail):
                if arr.size != len(samples) * int(np.prod(tail, dtype=np.int64)):
                    raise _core.InvalidArgumentError(
                        "DataFeeder.feed: '%s' expects %s per sample, a sample has %d values"
                        % (v.name, tail, arr.size // len(samples)))
                arr = arr.reshape([len(samples)] + tail)
            out[v.name] = arr
        return out

    def _lod_feed(self, v, col):
        """A LoDTensor from the samples' fields of var v (each nested v.lod_level deep)."""
        from .lod_tensor import create_lod_tensor
        lens = [[] for _ in range(v.lod_level)]
        rows = []

        def walk(x, level):
            if level == v.lod_level:
                rows.append(np.asarray(x))
                return
            x = list(x) if not isinstance(x, np.ndarray) else x
            lens[level].append(len(x))
            for e in x:
                walk(e, level + 1)

        for i, field in enumerate(col):
            try:
                walk(field, 0)
            except TypeError:
                raise _core.InvalidArgumentError(
                    "DataFeeder.feed: '%s' has lod_level=%d: sample %d's field must be a sequence nested %d deep, got %s"
                    % (v.name, v.lod_level, i, v.lod_level, type(field).__name__)) from None
        tail = [int(d) for d in v.shape[1:]]
        if not rows:
            arr = np.zeros([0] + [max(d, 0) for d in tail], dtype=v.dtype)
        else:
            try:
                arr = np.stack(rows).astype(v.dtype, copy=False)
            except ValueError as e:
                raise _core.InvalidArgumentError("DataFeeder.feed: the rows of '%s' differ in shape: %s"
                                                 % (v.name, e)) from None
            if all(d >= 0 for d in tail):
                if arr.size != len(rows) * int(np.prod(tail, dtype=np.int64)):
                    raise _core.InvalidArgumentError("DataFeeder.feed: '%s' expects %s per row, a row has %d values"
                                                     % (v.name, tail, arr.size // len(rows)))
                arr = arr.reshape([len(rows)] + tail)
        return create_lod_tensor(arr, lens, self.place)
