"""pe.dataset.common — where the dataset files live, and the idx (MNIST) file reader.

data_dir(name) is $PE_DATA_HOME/<name> (default ~/.cache/pe/dataset/<name>);
find(name, filename, source) is that file's path, or a pe.NotFoundError
naming the file, the folder to put it in and where Paddle downloads it
from: PE reads local copies only, it never downloads (the machines it
trains on often reach no network). read_idx parses the gzip'd idx files
of MNIST and Fashion-MNIST (also used by examples/train_fashion_mnist.py).
"""
import gzip
import os
import struct

import numpy as np

from .. import _core

__all__ = ["data_home", "data_dir", "find", "read_idx"]


def data_home():
    """$PE_DATA_HOME, else ~/.cache/pe/dataset."""
    home = os.environ.get("PE_DATA_HOME")
    return home if home else os.path.join(os.path.expanduser("~"), ".cache", "pe", "dataset")


def data_dir(name):
    return os.path.join(data_home(), name)


def find(name, filename, source, also=()):
    """The path of dataset `name`'s file `filename` (in data_dir(name), or one
    of the folders `also`); a clear pe.NotFoundError when it is absent."""
    dirs = [data_dir(name)] + list(also)
    for d in dirs:
        p = os.path.join(d, filename)
        if os.path.isfile(p):
            return p
    raise _core.NotFoundError(
        "pe.dataset.%s: %s is not in %s; PE downloads nothing: fetch it from %s and put it there "
        "(or set PE_DATA_HOME to a folder holding %s/%s)" % (name, filename, " or ".join(dirs), source, name,
                                                               filename))


def read_idx(path, magic_want, ndim, limit=None):
    """The uint8 array of a gzip'd idx file (big-endian uint32 magic and ndim
    dims, then the data); only the first `limit` items when limit is given.
    A short or foreign file is a pe.FormatError naming it."""
    try:
        with gzip.open(path, "rb") as f:
            head = f.read(4 + 4 * ndim)
            if len(head) != 4 + 4 * ndim:
                raise ValueError("truncated header")
            magic, *dims = struct.unpack(">I%dI" % ndim, head)
            if magic != magic_want:
                raise ValueError("magic %d, expected %d" % (magic, magic_want))
            if limit is not None:
                dims[0] = min(dims[0], limit)
            n = int(np.prod(dims))
            raw = f.read(n)
            if len(raw) != n:
                raise ValueError("truncated data: %d of %d bytes" % (len(raw), n))
    except FileNotFoundError:
        raise _core.NotFoundError("read_idx: no file %s" % path) from None
    except (OSError, EOFError, ValueError) as e:
        raise _core.FormatError("read_idx: %s is not a gzip'd idx file: %s" % (path, e)) from None
    return np.frombuffer(raw, np.uint8).reshape(dims)
