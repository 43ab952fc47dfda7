"""pe.dataset — Paddle's `paddle.dataset` readers over a local copy of the original files.

    import pe.dataset
    reader = pe.batch(pe.dataset.mnist.train(), batch_size=64)

uci_housing.train()/test(), mnist.train()/test(), fashion_mnist.train()/test()
cifar.train10()/test10()/train100()/test100(), imikolov.build_dict() /
train(word_idx, n)/test(word_idx, n) and imdb.word_dict() /
train(word_idx)/test(word_idx) and movielens.train()/test() (with
get_movie_title_dict(), movie_categories(), max_user_id(), max_movie_id(),
max_job_id(), user_info(), movie_info()) return reader creators
yielding Paddle's samples. PE downloads nothing: each module reads the files
Paddle downloads, under their Paddle names, from
$PE_DATA_HOME/<name>/ (default ~/.cache/pe/dataset/<name>/; see
common.data_dir); a missing file is a pe.NotFoundError saying which file
to put where. fashion_mnist also finds Debian's dataset-fashion-mnist
package (/usr/share/datasets/fashion-mnist).
"""
from . import common  # noqa: F401
from . import uci_housing  # noqa: F401
from . import mnist  # noqa: F401
from . import fashion_mnist  # noqa: F401
from . import cifar  # noqa: F401
from . import imikolov  # noqa: F401
from . import imdb  # noqa: F401
from . import movielens  # noqa: F401

__all__ = ["common", "uci_housing", "mnist", "fashion_mnist", "cifar", "imikolov", "imdb", "movielens"]
