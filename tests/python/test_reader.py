"""pe.reader decorators and pe.batch (Paddle 1.x's paddle.reader / paddle.batch)."""
import random

import pytest

import pe as paddle


def counter(n):
    def r():
        return iter(range(n))
    return r


def test_batch_groups_and_keeps_the_tail():
    assert list(paddle.batch(counter(7), 3)()) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(paddle.batch(counter(7), 3, drop_last=True)()) == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        paddle.batch(counter(3), 0)
    with pytest.raises(TypeError, match="a reader is a function"):
        paddle.batch([1, 2], 2)


def test_shuffle_is_a_permutation_and_follows_random_seed():
    random.seed(3)
    a = list(paddle.reader.shuffle(counter(50), buf_size=16)())
    random.seed(3)
    b = list(paddle.reader.shuffle(counter(50), buf_size=16)())
    assert sorted(a) == list(range(50)) and a == b and a != list(range(50))
    # windows of buf_size: nothing leaves its window
    assert sorted(a[:16]) == list(range(16))


def test_buffered_yields_everything_and_reraises():
    assert list(paddle.reader.buffered(counter(100), 4)()) == list(range(100))

    def bad():
        yield 1
        raise RuntimeError("reader broke")
    with pytest.raises(RuntimeError, match="reader broke"):
        list(paddle.reader.buffered(bad, 2)())
    # an abandoned iteration stops the background thread
    it = paddle.reader.buffered(counter(10**6), 2)()
    assert next(it) == 0
    it.close()


def test_compose_chain_map_firstn():
    r = paddle.reader.compose(counter(3), lambda: iter([(10, 11), (12, 13), (14, 15)]))
    assert list(r()) == [(0, 10, 11), (1, 12, 13), (2, 14, 15)]
    with pytest.raises(paddle.reader.ComposeNotAligned):
        list(paddle.reader.compose(counter(3), counter(2))())
    assert list(paddle.reader.compose(counter(3), counter(2), check_alignment=False)()) == [(0, 0), (1, 1)]
    assert list(paddle.reader.chain(counter(2), counter(3))()) == [0, 1, 0, 1, 2]
    assert list(paddle.reader.map_readers(lambda a, b: a + b, counter(3), counter(3))()) == [0, 2, 4]
    assert list(paddle.reader.firstn(counter(10), 4)()) == [0, 1, 2, 3]


def test_fluid_datafeeder_with_batch():
    import numpy as np
    import pe.fluid as fluid
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    samples = lambda: iter([(np.arange(3, dtype="float32") + i, np.array([i])) for i in range(5)])  # noqa: E731
    feeder = fluid.DataFeeder(place=fluid.CPUPlace(), feed_list=[x, y])
    batches = list(paddle.batch(samples, 2)())
    feed = feeder.feed(batches[0])
    assert feed["x"].shape == (2, 3) and feed["y"].shape == (2, 1)
    assert len(batches) == 3
