"""pe.dataset.cifar — CIFAR-10 / CIFAR-100 as Paddle's paddle.dataset.cifar.

cifar-10-python.tar.gz / cifar-100-python.tar.gz (from
https://www.cs.toronto.edu/~kriz/) in data_dir('cifar'), read in place:
the tar's pickled batches whose names hold 'data_batch' / 'test_batch'
(CIFAR-10) or 'train' / 'test' (CIFAR-100). A sample is (3072 float32
pixels / 255, int label), as Paddle's; cycle=True repeats forever.
"""
import pickle
import tarfile

import numpy as np

from .. import _core
from . import common

__all__ = ["train10", "test10", "train100", "test100"]

SOURCE = "https://www.cs.toronto.edu/~kriz/"


def reader_creator(filename, sub_name, cycle=False):
    def read_batch(batch, name):
        data = batch.get(b"data")
        labels = batch.get(b"labels", batch.get(b"fine_labels"))
        if data is None or labels is None:
            raise _core.FormatError("pe.dataset.cifar: batch %s of %s has no data / labels" % (name, filename))
        for sample, label in zip(data, labels):
            yield (np.asarray(sample) / 255.0).astype(np.float32), int(label)

    def reader():
        while True:
            try:
                f = tarfile.open(filename, mode="r")
            except (OSError, tarfile.TarError) as e:
                raise _core.FormatError("pe.dataset.cifar: %s is not a tar file: %s" % (filename, e)) from None
            with f:
                names = [m.name for m in f if sub_name in m.name]
                for name in names:
                    batch = pickle.load(f.extractfile(name), encoding="bytes")
                    yield from read_batch(batch, name)
            if not cycle:
                break
    return reader


def _find(filename):
    return common.find("cifar", filename, SOURCE)


def train10(cycle=False):
    """Reader creator of CIFAR-10's 50000 training samples (the data_batch_* pickles)."""
    return reader_creator(_find("cifar-10-python.tar.gz"), "data_batch", cycle)


def test10(cycle=False):
    return reader_creator(_find("cifar-10-python.tar.gz"), "test_batch", cycle)


def train100(cycle=False):
    return reader_creator(_find("cifar-100-python.tar.gz"), "train", cycle)


def test100(cycle=False):
    return reader_creator(_find("cifar-100-python.tar.gz"), "test", cycle)
