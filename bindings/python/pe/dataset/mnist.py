"""pe.dataset.mnist — MNIST as Paddle's paddle.dataset.mnist.

The four idx files under Paddle's names (train-images-idx3-ubyte.gz,
train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
t10k-labels-idx1-ubyte.gz, from http://yann.lecun.com/exdb/mnist/) in
data_dir('mnist'). A sample is (784 float32 pixels scaled to [-1, 1] as
Paddle's x / 255 * 2 - 1, int label).
"""
import numpy as np

from .. import _core
from . import common

__all__ = ["train", "test"]

SOURCE = "http://yann.lecun.com/exdb/mnist/"


def reader_creator(image_path, label_path, name="mnist"):
    def reader():
        img = common.read_idx(image_path, 2051, 3)
        lab = common.read_idx(label_path, 2049, 1)
        if img.shape[0] != lab.shape[0]:
            raise _core.FormatError("pe.dataset.%s: %s has %d images but %s %d labels"
                                    % (name, image_path, img.shape[0], label_path, lab.shape[0]))
        images = img.reshape(img.shape[0], -1).astype(np.float32) / 255.0 * 2.0 - 1.0
        for i in range(images.shape[0]):
            yield images[i], int(lab[i])
    return reader


def _split(name, split, source, also=()):
    return reader_creator(common.find(name, "%s-images-idx3-ubyte.gz" % split, source, also),
                          common.find(name, "%s-labels-idx1-ubyte.gz" % split, source, also), name)


def train():
    """Reader creator of the 60000 training samples."""
    return _split("mnist", "train", SOURCE)


def test():
    """Reader creator of the 10000 test samples."""
    return _split("mnist", "t10k", SOURCE)
