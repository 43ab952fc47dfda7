"""pe.reader — Paddle 1.x's reader decorators (`paddle.reader.*`) and
`paddle.batch`.

A reader is a function of no arguments that returns an iterable of samples
(a sample is usually a tuple of numpy arrays / numbers); a decorator takes
readers and returns a reader. Nothing here starts threads or touches files:
`buffered` prefetches on a background thread only while its reader is being
iterated, bounded by `size` samples.

    train = pe.batch(pe.reader.shuffle(my_reader, buf_size=500), batch_size=8)
    for batch in train():          # a list of up to 8 samples
        exe.run(prog, feed=feeder.feed(batch), ...)
"""
import itertools
import queue
import random
import threading

__all__ = ["shuffle", "buffered", "compose", "chain", "map_readers", "firstn", "batch", "ComposeNotAligned"]


class ComposeNotAligned(ValueError):
    """compose(check_alignment=True): the readers yielded different numbers of samples."""


def _need_reader(r, what):
    if not callable(r):
        raise TypeError("%s: a reader is a function returning an iterable of samples, got %s"
                        % (what, type(r).__name__))


def _positive(v, name, what):
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError("%s: %s must be a positive int, got %r" % (what, name, v))


def shuffle(reader, buf_size):
    """Shuffles within windows of buf_size samples (Python's random module:
    seed it with random.seed for a repeatable order)."""
    _need_reader(reader, "reader.shuffle")
    _positive(buf_size, "buf_size", "reader.shuffle")

    def data_reader():
        buf = []
        for s in reader():
            buf.append(s)
            if len(buf) >= buf_size:
                random.shuffle(buf)
                yield from buf
                buf = []
        random.shuffle(buf)
        yield from buf
    return data_reader


def buffered(reader, size):
    """Reads ahead up to `size` samples on a background thread; an exception
    in the reader is raised where the samples are consumed."""
    _need_reader(reader, "reader.buffered")
    _positive(size, "size", "reader.buffered")
    end = object()

    def data_reader():
        q = queue.Queue(maxsize=size)
        stop = threading.Event()

        def fill():
            try:
                for s in reader():
                    while not stop.is_set():
                        try:
                            q.put((s, None), timeout=0.1)
                            break
                        except queue.Full:
                            pass
                    if stop.is_set():
                        return
                q.put((end, None))
            except BaseException as e:  # handed to the consumer
                q.put((end, e))
        t = threading.Thread(target=fill, daemon=True)
        t.start()
        try:
            while True:
                s, err = q.get()
                if s is end:
                    if err is not None:
                        raise err
                    return
                yield s
        finally:
            stop.set()
    return data_reader


def compose(*readers, **kwargs):
    """Zips readers: each output sample is the concatenation of their samples
    (a non-tuple sample counts as a 1-tuple). check_alignment (default True)
    raises ComposeNotAligned when one reader ends before the others."""
    check = kwargs.pop("check_alignment", True)
    if kwargs:
        raise TypeError("reader.compose: unexpected arguments %s" % sorted(kwargs))
    for r in readers:
        _need_reader(r, "reader.compose")

    def as_tuple(s):
        return s if isinstance(s, tuple) else (s,)

    def data_reader():
        its = [r() for r in readers]
        if not check:
            for parts in zip(*its):
                yield sum((as_tuple(p) for p in parts), ())
            return
        for parts in itertools.zip_longest(*its, fillvalue=end):
            if any(p is end for p in parts):
                raise ComposeNotAligned("reader.compose: the readers yield different numbers of samples")
            yield sum((as_tuple(p) for p in parts), ())
    end = object()
    return data_reader


def chain(*readers):
    """One reader after the other."""
    for r in readers:
        _need_reader(r, "reader.chain")

    def data_reader():
        for r in readers:
            yield from r()
    return data_reader


def map_readers(func, *readers):
    """func applied to the readers' samples, zipped."""
    for r in readers:
        _need_reader(r, "reader.map_readers")

    def data_reader():
        for parts in zip(*[r() for r in readers]):
            yield func(*parts)
    return data_reader


def firstn(reader, n):
    """The first n samples."""
    _need_reader(reader, "reader.firstn")

    def data_reader():
        yield from itertools.islice(reader(), n)
    return data_reader


def batch(reader, batch_size, drop_last=False):
    """Groups samples into lists of batch_size (the last one shorter unless
    drop_last)."""
    _need_reader(reader, "batch")
    _positive(batch_size, "batch_size", "batch")

    def batch_reader():
        b = []
        for s in reader():
            b.append(s)
            if len(b) == batch_size:
                yield b
                b = []
        if b and not drop_last:
            yield b
    return batch_reader
