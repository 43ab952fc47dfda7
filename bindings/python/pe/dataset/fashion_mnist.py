"""pe.dataset.fashion_mnist — Fashion-MNIST as Paddle's paddle.dataset.fashion_mnist.

The idx files (MNIST's names and format) in data_dir('fashion_mnist'), else
Debian's dataset-fashion-mnist package's /usr/share/datasets/fashion-mnist.
Samples as mnist's: (784 float32 in [-1, 1], int label).
"""
from . import mnist

__all__ = ["train", "test"]

SOURCE = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/ (or Debian's dataset-fashion-mnist)"
DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"


def train():
    return mnist._split("fashion_mnist", "train", SOURCE, also=(DEBIAN_DIR,))


def test():
    return mnist._split("fashion_mnist", "t10k", SOURCE, also=(DEBIAN_DIR,))
