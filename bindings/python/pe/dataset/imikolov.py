"""pe.dataset.imikolov — the Penn Treebank text of Mikolov's RNNLM toolkit, as
Paddle's paddle.dataset.imikolov (the word2vec chapter's data).

simple-examples.tgz (from http://www.fit.vutbr.cz/~imikolov/rnnlm/) in
data_dir('imikolov'), read in place: ./simple-examples/data/ptb.train.txt
and ptb.valid.txt. As Paddle: build_dict(min_word_freq=50) counts the words
of both files (each line also counts one '<s>' and one '<e>'), keeps those
seen more than min_word_freq times, ordered by falling count then by the
word, ids 0.. in that order, and '<unk>' last. train(word_idx, n) /
test(word_idx, n) read ptb.train.txt / ptb.valid.txt: with
DataType.NGRAM, every n-gram of each line framed by '<s>' ... '<e>' as a
tuple of n ids (lines shorter than n give none); with DataType.SEQ,
(['<s>'] + ids, ids + ['<e>']) per line, lines longer than n skipped when
n > 0. Unknown words are '<unk>'. Words are str (the file's utf-8).
"""
import collections
import tarfile

from .. import _core
from . import common

__all__ = ["build_dict", "train", "test", "DataType"]

URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
TRAIN_FILE = "./simple-examples/data/ptb.train.txt"
TEST_FILE = "./simple-examples/data/ptb.valid.txt"


class DataType:
    NGRAM = 1
    SEQ = 2


def _path():
    return common.find("imikolov", "simple-examples.tgz", URL)


def _lines(tf, path, member):
    try:
        f = tf.extractfile(member)
    except KeyError:
        f = None
    if f is None:
        raise _core.FormatError("pe.dataset.imikolov: %s holds no %s" % (path, member))
    for raw in f:
        yield raw.decode("utf-8").strip().split()


def _open(path):
    try:
        return tarfile.open(path)
    except (OSError, tarfile.TarError) as e:
        raise _core.FormatError("pe.dataset.imikolov: %s is not a tar file: %s" % (path, e)) from None


def word_count(lines, word_freq=None):
    if word_freq is None:
        word_freq = collections.defaultdict(int)
    for words in lines:
        for w in words:
            word_freq[w] += 1
        word_freq["<s>"] += 1
        word_freq["<e>"] += 1
    return word_freq


def build_dict(min_word_freq=50):
    """{word: id} of the words of ptb.train.txt and ptb.valid.txt seen more
    than min_word_freq times (by falling count, then the word), '<unk>' last."""
    path = _path()
    with _open(path) as tf:
        word_freq = word_count(_lines(tf, path, TEST_FILE), word_count(_lines(tf, path, TRAIN_FILE)))
    word_freq.pop("<unk>", None)  # set as the last id below
    kept = sorted(((w, c) for w, c in word_freq.items() if c > min_word_freq), key=lambda x: (-x[1], x[0]))
    word_idx = {w: i for i, (w, _) in enumerate(kept)}
    word_idx["<unk>"] = len(kept)
    return word_idx


def reader_creator(member, word_idx, n, data_type):
    path = _path()  # a missing file fails here, as Paddle's download
    if data_type not in (DataType.NGRAM, DataType.SEQ):
        raise _core.InvalidArgumentError("pe.dataset.imikolov: data_type must be DataType.NGRAM or DataType.SEQ, "
                                         "got %r" % (data_type,))
    if data_type == DataType.NGRAM and n < 1:
        raise _core.InvalidArgumentError("pe.dataset.imikolov: an n-gram reader needs n >= 1, got %d" % n)
    if "<unk>" not in word_idx:
        raise _core.InvalidArgumentError("pe.dataset.imikolov: word_idx has no '<unk>' (use build_dict())")

    def reader():
        unk = word_idx["<unk>"]
        with _open(path) as tf:
            for words in _lines(tf, path, member):
                if data_type == DataType.NGRAM:
                    ids = [word_idx.get(w, unk) for w in ["<s>"] + words + ["<e>"]]
                    for i in range(n, len(ids) + 1):
                        yield tuple(ids[i - n:i])
                else:
                    ids = [word_idx.get(w, unk) for w in words]
                    src, trg = [word_idx["<s>"]] + ids, ids + [word_idx["<e>"]]
                    if n > 0 and len(src) > n:
                        continue
                    yield src, trg
    return reader


def train(word_idx, n, data_type=DataType.NGRAM):
    """Reader creator over ptb.train.txt: n-gram tuples of ids (or (src, trg) sequences)."""
    return reader_creator(TRAIN_FILE, word_idx, n, data_type)


def test(word_idx, n, data_type=DataType.NGRAM):
    """Reader creator over ptb.valid.txt."""
    return reader_creator(TEST_FILE, word_idx, n, data_type)
