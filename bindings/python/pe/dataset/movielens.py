"""pe.dataset.movielens — the MovieLens 1M ratings of GroupLens, as Paddle's
paddle.dataset.movielens (the recommender_system chapter's data).

ml-1m.zip (from https://files.grouplens.org/datasets/movielens/ml-1m.zip)
in data_dir('movielens'), read in place: ml-1m/movies.dat
(MovieID::Title (Year)::Genre|Genre...), ml-1m/users.dat
(UserID::Gender::Age::Occupation::Zip-code) and ml-1m/ratings.dat
(UserID::MovieID::Rating::Timestamp), latin-1 text. As Paddle: a movie's
title is the text before its '(year)', split on whitespace and lower-cased
into title words; an age is its index in age_table; a sample is
[user id, gender (0 male, 1 female), age index, job id, movie id,
[category ids], [title word ids], [rating * 2 - 5]] per line of
ratings.dat, the line going to test() when numpy's random() drawn per line
after np.random.seed(rand_seed) is below test_ratio and to train()
otherwise (Paddle's split: the same seed gives the same split). The
category and title-word dictionaries number the categories and words in
sorted order (Paddle numbers them in set order, which changes from run to
run with Python's string hashing), so ids are stable across runs. The
files are parsed once per process (cached by the zip's path and mtime).
"""
import functools
import os
import re
import zipfile

import numpy as np

from .. import _core
from . import common

__all__ = ["train", "test", "get_movie_title_dict", "max_movie_id", "max_user_id", "max_job_id",
           "movie_categories", "user_info", "movie_info", "age_table", "MovieInfo", "UserInfo"]

URL = "https://files.grouplens.org/datasets/movielens/ml-1m.zip"

age_table = [1, 18, 25, 35, 45, 50, 56]

_TITLE = re.compile(r"^(.*)\((\d+)\)$")


class MovieInfo:
    """A movie of movies.dat: index (its id), categories (names), title (without the year)."""

    def __init__(self, index, categories, title, _meta=None):
        self.index = int(index)
        self.categories = categories
        self.title = title
        self._meta = _meta

    def value(self):
        """[movie id, [category ids], [title word ids]]."""
        meta = self._meta if self._meta is not None else _meta()
        return [self.index, [meta["categories"][c] for c in self.categories],
                [meta["title_words"][w.lower()] for w in self.title.split()]]

    def __str__(self):
        return "<MovieInfo id(%d), title(%s), categories(%s)>" % (self.index, self.title, self.categories)

    __repr__ = __str__


class UserInfo:
    """A user of users.dat: index (its id), is_male, age (index in age_table), job_id."""

    def __init__(self, index, gender, age, job_id):
        self.index = int(index)
        self.is_male = gender == "M"
        self.age = age_table.index(int(age))
        self.job_id = int(job_id)

    def value(self):
        """[user id, 0 male / 1 female, age index, job id]."""
        return [self.index, 0 if self.is_male else 1, self.age, self.job_id]

    def __str__(self):
        return "<UserInfo id(%d), gender(%s), age(%d), job(%d)>" % (
            self.index, "M" if self.is_male else "F", age_table[self.age], self.job_id)

    __repr__ = __str__


def _path():
    return common.find("movielens", "ml-1m.zip", URL)


def _open(path):
    try:
        return zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise _core.FormatError("pe.dataset.movielens: %s is not a zip file: %s" % (path, e)) from None


def _lines(package, path, member):
    """(line number, fields) of member's '::'-separated latin-1 lines."""
    try:
        f = package.open(member)
    except KeyError:
        raise _core.FormatError("pe.dataset.movielens: %s holds no %s" % (path, member)) from None
    with f:
        for i, raw in enumerate(f, 1):
            line = raw.decode("latin-1").strip()
            if line:
                yield i, line.split("::")


def _bad(path, member, lineno, why):
    return _core.FormatError("pe.dataset.movielens: %s: %s line %d: %s" % (path, member, lineno, why))


_CACHE = {}


def _meta():
    """The parsed movies and users of ml-1m.zip: {'path', 'movies', 'users', 'categories', 'title_words'}."""
    path = _path()
    key = (os.path.abspath(path), os.path.getmtime(path))
    if key in _CACHE:
        return _CACHE[key]
    meta = {"path": path}
    movies, words, cats = {}, set(), set()
    with _open(path) as package:
        member = "ml-1m/movies.dat"
        for n, fields in _lines(package, path, member):
            if len(fields) != 3:
                raise _bad(path, member, n, "expected MovieID::Title (Year)::Genres, got %d fields" % len(fields))
            m = _TITLE.match(fields[1])
            if not m or not fields[0].isdigit():
                raise _bad(path, member, n, "expected MovieID::Title (Year)::Genres, got %r" % "::".join(fields))
            title, categories = m.group(1), fields[2].split("|")
            movies[int(fields[0])] = MovieInfo(fields[0], categories, title, meta)
            cats.update(categories)
            words.update(w.lower() for w in title.split())
        users = {}
        member = "ml-1m/users.dat"
        for n, fields in _lines(package, path, member):
            if len(fields) != 5 or not fields[0].isdigit() or fields[1] not in ("M", "F") or \
                    not fields[2].isdigit() or int(fields[2]) not in age_table or not fields[3].isdigit():
                raise _bad(path, member, n, "expected UserID::M|F::Age (one of %s)::Occupation::Zip-code, got %r"
                           % (age_table, "::".join(fields)))
            users[int(fields[0])] = UserInfo(fields[0], fields[1], fields[2], fields[3])
    if not movies or not users:
        raise _core.FormatError("pe.dataset.movielens: %s holds no %s" % (path, "movies" if not movies else "users"))
    meta.update(movies=movies, users=users, categories={c: i for i, c in enumerate(sorted(cats))},
                title_words={w: i for i, w in enumerate(sorted(words))})
    _CACHE.clear()
    _CACHE[key] = meta
    return meta


def _reader(rand_seed=0, test_ratio=0.1, is_test=False):
    meta = _meta()
    path, member = meta["path"], "ml-1m/ratings.dat"
    np.random.seed(rand_seed)
    with _open(path) as package:
        for n, fields in _lines(package, path, member):
            if (np.random.random() < test_ratio) != is_test:
                continue
            try:
                uid, mid, rating = int(fields[0]), int(fields[1]), float(fields[2])
                if len(fields) != 4:
                    raise ValueError
            except (ValueError, IndexError):
                raise _bad(path, member, n, "expected UserID::MovieID::Rating::Timestamp, got %r"
                           % "::".join(fields)) from None
            if uid not in meta["users"] or mid not in meta["movies"]:
                raise _bad(path, member, n, "%s %d is not in %s" % (
                    "user" if uid not in meta["users"] else "movie", uid if uid not in meta["users"] else mid,
                    "users.dat" if uid not in meta["users"] else "movies.dat"))
            yield meta["users"][uid].value() + meta["movies"][mid].value() + [[rating * 2 - 5.0]]


def _reader_creator(rand_seed=0, test_ratio=0.1, is_test=False):
    _path()  # a missing file fails here, as Paddle's download
    return lambda: _reader(rand_seed=rand_seed, test_ratio=test_ratio, is_test=is_test)


train = functools.partial(_reader_creator, is_test=False)
train.__doc__ = "Reader creator of the ratings not drawn for the test split (about 90%)."
test = functools.partial(_reader_creator, is_test=True)
test.__doc__ = "Reader creator of the ratings drawn for the test split (test_ratio, 10%)."


def get_movie_title_dict():
    """{title word (lower case): id}."""
    return _meta()["title_words"]


def max_movie_id():
    return max(_meta()["movies"])


def max_user_id():
    return max(_meta()["users"])


def max_job_id():
    return max(u.job_id for u in _meta()["users"].values())


def movie_categories():
    """{category name: id}."""
    return _meta()["categories"]


def user_info():
    """{user id: UserInfo}."""
    return _meta()["users"]


def movie_info():
    """{movie id: MovieInfo}."""
    return _meta()["movies"]
