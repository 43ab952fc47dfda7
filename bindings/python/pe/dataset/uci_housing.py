"""pe.dataset.uci_housing — the Boston housing data, as Paddle's paddle.dataset.uci_housing.

housing.data (506 rows of 14 numbers, from
http://paddlemodels.bj.bcebos.com/uci_housing/housing.data) in
data_dir('uci_housing'). As Paddle: each of the 13 features is normalized
over the whole file, (x - mean) / (max - min); the first 80% of the rows
are train(), the rest test(); a sample is (13 float32 features, [price]).
"""
import numpy as np

from .. import _core
from . import common

__all__ = ["train", "test", "feature_names"]

URL = "http://paddlemodels.bj.bcebos.com/uci_housing/housing.data"
feature_names = ["CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS", "RAD", "TAX", "PTRATIO", "B", "LSTAT"]
FEATURE_NUM = 14
RATIO = 0.8


def load_data(path=None):
    """(train rows, test rows), float32 [n, 14], features normalized."""
    path = path or common.find("uci_housing", "housing.data", URL)
    data = np.fromfile(path, sep=" ")
    if data.size == 0 or data.size % FEATURE_NUM:
        raise _core.FormatError("pe.dataset.uci_housing: %s holds %d numbers, not rows of %d"
                                % (path, data.size, FEATURE_NUM))
    data = data.reshape(data.shape[0] // FEATURE_NUM, FEATURE_NUM)
    maximums, minimums, avgs = data.max(axis=0), data.min(axis=0), data.sum(axis=0) / data.shape[0]
    for i in range(FEATURE_NUM - 1):
        data[:, i] = (data[:, i] - avgs[i]) / (maximums[i] - minimums[i])
    offset = int(data.shape[0] * RATIO)
    data = data.astype(np.float32)
    return data[:offset], data[offset:]


def _reader(part):
    path = common.find("uci_housing", "housing.data", URL)  # a missing file fails here, as Paddle's download

    def reader():
        rows = load_data(path)[part]
        for d in rows:
            yield d[:-1], d[-1:]
    return reader


def train():
    """Reader creator: the first 80% of the rows, (13 float32 features, [price])."""
    return _reader(0)


def test():
    """Reader creator: the last 20% of the rows."""
    return _reader(1)
