"""tests/python/test_dataset.py — pe.dataset's readers over small synthetic files in the real formats.

Each dataset's files are written into a tmp $PE_DATA_HOME under Paddle's
names and formats (housing.data text, gzip'd idx, the cifar tar of pickled
batches, PTB's simple-examples.tgz of text, aclImdb_v1.tar.gz of reviews, ml-1m.zip of
movies, users and ratings); the readers yield Paddle's
samples; a missing file is a
NotFoundError naming the file and the folder.
"""
import gzip
import io
import os
import pickle
import struct
import tarfile

import numpy as np
import pytest

import pe
import pe.dataset


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PE_DATA_HOME", str(tmp_path))
    return tmp_path


def test_default_home(monkeypatch):
    monkeypatch.delenv("PE_DATA_HOME", raising=False)
    assert pe.dataset.common.data_dir("mnist") == os.path.join(os.path.expanduser("~"), ".cache", "pe", "dataset",
                                                               "mnist")


def test_uci_housing(home):
    rng = np.random.RandomState(0)
    rows = np.round(rng.rand(10, 14) * 100, 3)
    (home / "uci_housing").mkdir()
    with open(home / "uci_housing" / "housing.data", "w") as f:
        for r in rows:
            f.write(" " + "  ".join("%.3f" % v for v in r) + "\n")
    want = rows.copy()
    for i in range(13):
        want[:, i] = (rows[:, i] - rows[:, i].mean()) / (rows[:, i].max() - rows[:, i].min())
    train = list(pe.dataset.uci_housing.train()())
    test = list(pe.dataset.uci_housing.test()())
    assert len(train) == 8 and len(test) == 2
    for (x, y), w in zip(train + test, want):
        assert x.shape == (13,) and x.dtype == np.float32 and y.shape == (1,)
        np.testing.assert_allclose(x, w[:13], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, w[13:], rtol=1e-6)


def write_idx(path, arr, magic):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I%dI" % arr.ndim, magic, *arr.shape))
        f.write(arr.astype(np.uint8).tobytes())


@pytest.mark.parametrize("mod,name", [("mnist", "mnist"), ("fashion_mnist", "fashion_mnist")])
def test_mnist_formats(home, mod, name):
    rng = np.random.RandomState(1)
    d = home / name
    d.mkdir()
    sets = {}
    for split, n in (("train", 7), ("t10k", 3)):
        img, lab = rng.randint(0, 256, (n, 28, 28)), rng.randint(0, 10, n)
        write_idx(d / ("%s-images-idx3-ubyte.gz" % split), img, 2051)
        write_idx(d / ("%s-labels-idx1-ubyte.gz" % split), lab, 2049)
        sets[split] = (img, lab)
    m = getattr(pe.dataset, mod)
    for split, fn in (("train", m.train), ("t10k", m.test)):
        got = list(fn()())
        img, lab = sets[split]
        assert len(got) == len(lab)
        for (x, y), i, l in zip(got, img, lab):
            assert x.shape == (784,) and x.dtype == np.float32 and isinstance(y, int) and y == l
            np.testing.assert_allclose(x, i.reshape(-1) / 255.0 * 2.0 - 1.0, rtol=1e-6, atol=1e-6)
            assert x.min() >= -1 and x.max() <= 1


def test_fashion_mnist_from_the_debian_package(home):
    if not os.path.isfile("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"):
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    x, y = next(iter(pe.dataset.fashion_mnist.test()()))
    assert x.shape == (784,) and 0 <= y < 10


def test_missing_files_say_which_and_where(home):
    with pytest.raises(pe.NotFoundError, match="uci_housing: housing.data is not in %s; PE downloads nothing"
                       % os.path.join(str(home), "uci_housing")):
        pe.dataset.uci_housing.train()
    with pytest.raises(pe.NotFoundError, match="mnist: train-images-idx3-ubyte.gz is not in"):
        pe.dataset.mnist.train()
    with pytest.raises(pe.NotFoundError, match="cifar: cifar-10-python.tar.gz is not in"):
        pe.dataset.cifar.train10()
    with pytest.raises(pe.NotFoundError, match="imikolov: simple-examples.tgz is not in"):
        pe.dataset.imikolov.build_dict()
    with pytest.raises(pe.NotFoundError, match="imdb: aclImdb_v1.tar.gz is not in %s; PE downloads nothing: fetch "
                       "it from http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
                       % os.path.join(str(home), "imdb")):
        pe.dataset.imdb.word_dict()


def test_bad_idx_file_is_a_format_error(home):
    (home / "mnist").mkdir()
    write_idx(home / "mnist" / "t10k-images-idx3-ubyte.gz", np.zeros((2, 28, 28)), 2049)  # a labels magic
    write_idx(home / "mnist" / "t10k-labels-idx1-ubyte.gz", np.zeros(2), 2049)
    with pytest.raises(pe.FormatError, match="magic 2049, expected 2051"):
        list(pe.dataset.mnist.test()())


def add_pickle(tar, name, obj):
    raw = pickle.dumps(obj)
    info = tarfile.TarInfo(name)
    info.size = len(raw)
    tar.addfile(info, io.BytesIO(raw))


def test_cifar10_and_100(home):
    rng = np.random.RandomState(2)
    (home / "cifar").mkdir()
    batches = {n: (rng.randint(0, 256, (4, 3072)).astype(np.uint8), list(rng.randint(0, 10, 4)))
               for n in ("data_batch_1", "data_batch_2", "test_batch")}
    with tarfile.open(home / "cifar" / "cifar-10-python.tar.gz", "w:gz") as t:
        add_pickle(t, "cifar-10-batches-py/batches.meta", {b"label_names": [b"x"] * 10})
        for n, (data, labels) in batches.items():
            add_pickle(t, "cifar-10-batches-py/" + n, {b"data": data, b"labels": labels, b"batch_label": b"b"})
    fine = (rng.randint(0, 256, (3, 3072)).astype(np.uint8), list(rng.randint(0, 100, 3)))
    with tarfile.open(home / "cifar" / "cifar-100-python.tar.gz", "w:gz") as t:
        add_pickle(t, "cifar-100-python/train", {b"data": fine[0], b"fine_labels": fine[1], b"coarse_labels": [0] * 3})
        add_pickle(t, "cifar-100-python/test", {b"data": fine[0][:1], b"fine_labels": fine[1][:1]})
    train = list(pe.dataset.cifar.train10()())
    test = list(pe.dataset.cifar.test10()())
    assert len(train) == 8 and len(test) == 4
    want = [(d, l) for n in ("data_batch_1", "data_batch_2") for d, l in zip(*batches[n])]
    for (x, y), (d, l) in zip(train, want):
        assert x.shape == (3072,) and x.dtype == np.float32 and isinstance(y, int) and y == l
        np.testing.assert_allclose(x, d / 255.0, rtol=1e-6)
    assert [y for _, y in test] == [int(v) for v in batches["test_batch"][1]]
    assert [y for _, y in pe.dataset.cifar.train100()()] == [int(v) for v in fine[1]]
    assert len(list(pe.dataset.cifar.test100()())) == 1
    cyc = pe.dataset.cifar.test10(cycle=True)()
    assert len([next(cyc) for _ in range(10)]) == 10


def test_a_reader_feeds_a_batch(home):
    (home / "uci_housing").mkdir()
    np.savetxt(home / "uci_housing" / "housing.data", np.random.RandomState(3).rand(20, 14))
    b = next(pe.batch(pe.dataset.uci_housing.train(), batch_size=5)())
    assert len(b) == 5 and b[0][0].shape == (13,)


def write_ptb(home, train, valid):
    (home / "imikolov").mkdir()
    with tarfile.open(home / "imikolov" / "simple-examples.tgz", "w:gz") as tar:
        for name, text in (("ptb.train.txt", train), ("ptb.valid.txt", valid)):
            raw = text.encode("utf-8")
            info = tarfile.TarInfo("./simple-examples/data/" + name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def test_imikolov(home):
    # counts over both files, '<s>' / '<e>' once a line: a 5 (+1 valid), b 4, c 1 (+1 valid), <s> 4, <e> 4,
    # <unk> 1 (dropped: it is set last), d 1
    write_ptb(home, " a a b c \n a b b a \n a <unk> b \n", " a c d \n")
    d = pe.dataset.imikolov.build_dict(min_word_freq=1)
    assert d == {"a": 0, "<e>": 1, "<s>": 2, "b": 3, "c": 4, "<unk>": 5}  # by falling count, then the word
    assert pe.dataset.imikolov.build_dict(min_word_freq=4) == {"a": 0, "<unk>": 1}
    assert pe.dataset.imikolov.build_dict()["<unk>"] == 0   # Paddle's default min_word_freq=50 keeps none here
    a, e, s, b, c, unk = 0, 1, 2, 3, 4, 5
    grams = list(pe.dataset.imikolov.train(d, 3)())
    assert grams[:4] == [(s, a, a), (a, a, b), (a, b, c), (b, c, e)]
    assert len(grams) == 4 + 4 + 3   # a line of k words framed by <s> <e> gives k + 2 - n + 1 n-grams
    assert list(pe.dataset.imikolov.test(d, 5)()) == [(s, a, c, unk, e)]
    assert list(pe.dataset.imikolov.test(d, 6)()) == []   # the line is shorter than n
    seq = pe.dataset.imikolov.DataType.SEQ
    assert list(pe.dataset.imikolov.test(d, 0, seq)()) == [([s, a, c, unk], [a, c, unk, e])]
    assert list(pe.dataset.imikolov.test(d, 3, seq)()) == []   # src longer than n is skipped
    with pytest.raises(pe.InvalidArgumentError, match="data_type must be"):
        pe.dataset.imikolov.train(d, 3, data_type=7)
    with pytest.raises(pe.InvalidArgumentError, match="no '<unk>'"):
        pe.dataset.imikolov.train({"a": 0}, 3)


def write_imdb(home, reviews):
    """aclImdb_v1.tar.gz as Paddle's imdb reads it: aclImdb/<split>/<pos|neg>/<id>_<stars>.txt, plus a
    file outside the four folders that no reader reads."""
    (home / "imdb").mkdir()
    with tarfile.open(home / "imdb" / "aclImdb_v1.tar.gz", "w:gz") as tar:
        for name, text in list(reviews.items()) + [("aclImdb/train/unsup/0_0.txt", "good good good")]:
            raw = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def test_imdb(home):
    write_imdb(home, {"aclImdb/train/neg/0_2.txt": "Bad, bad movie!\n",
                      "aclImdb/train/pos/1_9.txt": "A GOOD movie... good.",
                      "aclImdb/test/pos/0_8.txt": "Good fun, good",
                      "aclImdb/test/neg/1_1.txt": "bad\r\n"})
    imdb = pe.dataset.imdb
    # counts over the four folders: good 4, bad 3, movie 2, a 1, fun 1 (punctuation deleted, lower case)
    pattern = __import__("re").compile(r"aclImdb/((train)|(test))/((pos)|(neg))/.*\.txt$")
    assert imdb.build_dict(pattern, 0) == {"good": 0, "bad": 1, "movie": 2, "a": 3, "fun": 4, "<unk>": 5}
    d = imdb.build_dict(pattern, 1)
    assert d == {"good": 0, "bad": 1, "movie": 2, "<unk>": 3}
    assert imdb.word_dict() == {"<unk>": 0}   # Paddle's cutoff, 150, keeps none here
    good, bad, movie, unk = 0, 1, 2, 3
    assert list(imdb.train(d)()) == [([unk, good, movie, good], 0), ([bad, bad, movie], 1)]  # positives first
    assert list(imdb.test(d)()) == [([good, unk, good], 0), ([bad], 1)]
    with pytest.raises(pe.InvalidArgumentError, match="no '<unk>'"):
        imdb.train({"good": 0})


def test_imdb_errors(home):
    write_imdb(home, {"aclImdb/train/pos/0_9.txt": "good"})
    with pytest.raises(pe.FormatError, match="holds no test reviews"):
        pe.dataset.imdb.test(pe.dataset.imdb.word_dict())
    (home / "imdb" / "aclImdb_v1.tar.gz").write_bytes(b"not a tar")
    with pytest.raises(pe.FormatError, match="is not a tar file"):
        pe.dataset.imdb.word_dict()


def write_movielens(home, movies, users, ratings):
    """ml-1m.zip as Paddle's movielens reads it: ml-1m/{movies,users,ratings}.dat, '::'-separated latin-1 lines."""
    import zipfile
    (home / "movielens").mkdir()
    with zipfile.ZipFile(home / "movielens" / "ml-1m.zip", "w") as z:
        for name, lines in (("movies", movies), ("users", users), ("ratings", ratings)):
            z.writestr("ml-1m/%s.dat" % name, "".join(line + "\n" for line in lines).encode("latin-1"))


def test_movielens(home):
    with pytest.raises(pe.NotFoundError, match="movielens: ml-1m.zip is not in %s; PE downloads nothing"
                       % os.path.join(str(home), "movielens")):
        pe.dataset.movielens.train()
    write_movielens(home, ["1::Toy Story (1995)::Animation|Children's|Comedy",
                           "7::Sabrina (1995)::Comedy|Romance",
                           "3::Café Society (1995)::Drama"],
                    ["1::F::1::10::48067", "2::M::56::16::70072", "5::M::25::20::55455"],
                    ["1::1::5::978300760", "2::7::3::978302109", "5::3::1::978301968", "1::3::4::978300275"])
    ml = pe.dataset.movielens
    assert ml.movie_categories() == {"Animation": 0, "Children's": 1, "Comedy": 2, "Drama": 3, "Romance": 4}
    assert ml.get_movie_title_dict() == {"café": 0, "sabrina": 1, "society": 2, "story": 3, "toy": 4}
    assert (ml.max_user_id(), ml.max_movie_id(), ml.max_job_id()) == (5, 7, 20)
    assert ml.movie_info()[3].title == "Café Society "   # latin-1; the text before '(year)', as Paddle
    assert ml.user_info()[2].value() == [2, 0, 6, 16]     # male 0, age 56 is age_table[6]
    want = [[1, 1, 0, 10, 1, [0, 1, 2], [4, 3], [5.0]], [2, 0, 6, 16, 7, [2, 4], [1], [1.0]],
            [5, 0, 2, 20, 3, [3], [0, 2], [-3.0]], [1, 1, 0, 10, 3, [3], [0, 2], [3.0]]]
    # Paddle's split: np.random.seed(0), then one random() per line; below test_ratio goes to test
    np.random.seed(0)
    to_test = np.random.random(4) < 0.5
    assert list(ml.train(test_ratio=0.5)()) == [w for w, t in zip(want, to_test) if not t]
    assert list(ml.test(test_ratio=0.5)()) == [w for w, t in zip(want, to_test) if t]
    assert list(ml.train(test_ratio=0.0)()) == want and list(ml.test()()) == []


def test_movielens_errors(home):
    write_movielens(home, ["1::Toy Story::Comedy"], ["1::F::1::10::48067"], ["1::1::5::978300760"])
    with pytest.raises(pe.FormatError, match=r"ml-1m/movies.dat line 1: expected MovieID::Title \(Year\)::Genres"):
        pe.dataset.movielens.max_movie_id()
    (home / "movielens" / "ml-1m.zip").write_bytes(b"not a zip")
    with pytest.raises(pe.FormatError, match="is not a zip file"):
        pe.dataset.movielens.movie_info()
