"""pe.dataset.imdb — the IMDB movie reviews of Maas et al. (ACL 2011), as
Paddle's paddle.dataset.imdb (the understand_sentiment chapter's data).

aclImdb_v1.tar.gz (from http://ai.stanford.edu/~amaas/data/sentiment/) in
data_dir('imdb'), read in place, member by member in the archive's order:
the reviews aclImdb/{train,test}/{pos,neg}/*.txt. As Paddle: a review is
tokenized by stripping trailing newlines, deleting ASCII punctuation,
lower-casing and splitting on whitespace; word_dict() counts the words of
all four folders and keeps those seen more than 150 times, ordered by
falling count then by the word, ids 0.. in that order, and '<unk>' last;
train(word_idx) / test(word_idx) yield (ids, label) per review, every
positive review (label 0) first, then every negative one (label 1),
unknown words as '<unk>'. Words are str (the file's utf-8; Paddle keeps
bytes).
"""
import collections
import re
import string
import tarfile

from .. import _core
from . import common

__all__ = ["build_dict", "word_dict", "train", "test"]

URL = "http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"

_DELETE = str.maketrans("", "", string.punctuation)


def _path():
    return common.find("imdb", "aclImdb_v1.tar.gz", URL)


def tokenize(pattern):
    """The token lists of the archive's members whose names match `pattern`, in archive order."""
    path = _path()
    try:
        tf = tarfile.open(path)
    except (OSError, tarfile.TarError) as e:
        raise _core.FormatError("pe.dataset.imdb: %s is not a tar file: %s" % (path, e)) from None
    with tf:
        for member in tf:  # sequential, as Paddle (no random access into the gzip stream)
            if not member.isfile() or not pattern.match(member.name):
                continue
            text = tf.extractfile(member).read().rstrip(b"\n\r").decode("utf-8", errors="replace")
            yield text.translate(_DELETE).lower().split()


def build_dict(pattern, cutoff):
    """{word: id} of the words of the matching reviews seen more than `cutoff` times (by
    falling count, then the word), '<unk>' last."""
    word_freq = collections.defaultdict(int)
    for doc in tokenize(pattern):
        for w in doc:
            word_freq[w] += 1
    kept = sorted(((w, c) for w, c in word_freq.items() if c > cutoff), key=lambda x: (-x[1], x[0]))
    word_idx = {w: i for i, (w, _) in enumerate(kept)}
    word_idx["<unk>"] = len(kept)
    return word_idx


def reader_creator(pos_pattern, neg_pattern, word_idx, what):
    if "<unk>" not in word_idx:
        raise _core.InvalidArgumentError("pe.dataset.imdb: word_idx has no '<unk>' (use word_dict())")
    unk = word_idx["<unk>"]
    ins = []
    for pattern, label in ((pos_pattern, 0), (neg_pattern, 1)):
        for doc in tokenize(pattern):
            ins.append(([word_idx.get(w, unk) for w in doc], label))
    if not ins:
        raise _core.FormatError("pe.dataset.imdb: %s holds no %s reviews (aclImdb/%s/pos/*.txt, aclImdb/%s/neg/*.txt)"
                                % (_path(), what, what, what))

    def reader():
        for doc, label in ins:
            yield doc, label
    return reader


def train(word_idx):
    """Reader creator over aclImdb/train: (word ids, 0 positive / 1 negative)."""
    return reader_creator(re.compile(r"aclImdb/train/pos/.*\.txt$"), re.compile(r"aclImdb/train/neg/.*\.txt$"),
                          word_idx, "train")


def test(word_idx):
    """Reader creator over aclImdb/test."""
    return reader_creator(re.compile(r"aclImdb/test/pos/.*\.txt$"), re.compile(r"aclImdb/test/neg/.*\.txt$"),
                          word_idx, "test")


def word_dict():
    """build_dict over the train and test reviews with Paddle's cutoff, 150."""
    return build_dict(re.compile(r"aclImdb/((train)|(test))/((pos)|(neg))/.*\.txt$"), 150)
