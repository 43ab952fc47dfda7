#!/usr/bin/python3
"""benchmarks/bench_loader.py — pe.io.DataLoader's worker processes: batches
through shared memory or pickled, workers kept between passes or not, against
PyTorch's DataLoader (Debian's torch 1.13) on the same dataset.

What: a map-style dataset of image-sized samples (3 x 224 x 224 float32,
588 KiB; each a copy of one of 16 stored images with its index written in,
so making a sample costs one copy, like a decoded and cropped image), read
in batches of 64 (37.6 MB) by 2 workers. Each configuration reads --passes
passes of --batches batches; the rounds alternate the configurations.
Prints the median batches/s and MB/s over the rounds, and each round's.
Nothing is done with a batch but to touch one value of it, so the figure is
the loader's own: collation in the worker, the transfer, the hand-over.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/bench_loader.py [--rounds 5]

Configurations: pe (use_shared_memory, the default), pe-pickle
(use_shared_memory=False), pe-persistent (persistent_workers=True, many short
passes: --short-passes passes of 4 batches, where starting the workers each
pass shows), and torch / torch-persistent where torch imports.
"""
import argparse
import statistics
import time

import numpy as np

import pe
from pe import io


class Images(io.Dataset):
    def __init__(self, n, shape=(3, 224, 224)):
        self.n = n
        self.base = np.random.default_rng(0).standard_normal((16,) + shape).astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        img = self.base[i % 16].copy()
        img[0, 0, 0] = i
        return img, np.int64(i)


def passes(make, n_passes, n_batches):
    """Seconds to read n_passes passes of the first n_batches batches of the loader make() gives."""
    loader = make()
    t = time.perf_counter()
    seen = 0.0
    for _ in range(n_passes):
        for k, (x, y) in enumerate(loader):
            seen += float(np.asarray(x)[0, 0, 0, 0])
            if k + 1 == n_batches:
                break
    secs = time.perf_counter() - t
    del loader
    return secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=24, help="batches per long pass")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--short-passes", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    pe.enable_static()  # numpy batches
    ds = Images(a.batch * a.batches)
    mb = a.batch * ds.base[0].nbytes / 2 ** 20
    w, bs = a.workers, a.batch
    configs = {
        "pe": (lambda: io.DataLoader(ds, batch_size=bs, num_workers=w), a.passes, a.batches),
        "pe-pickle": (lambda: io.DataLoader(ds, batch_size=bs, num_workers=w, use_shared_memory=False),
                      a.passes, a.batches),
        "pe-short": (lambda: io.DataLoader(ds, batch_size=bs, num_workers=w), a.short_passes, 4),
        "pe-persistent": (lambda: io.DataLoader(ds, batch_size=bs, num_workers=w, persistent_workers=True),
                          a.short_passes, 4),
    }
    try:
        import torch
        import torch.utils.data as tud

        class TorchImages(tud.Dataset):
            def __len__(self):
                return len(ds)

            def __getitem__(self, i):
                x, y = ds[i]
                return torch.from_numpy(x), y

        tds = TorchImages()
        configs["torch"] = (lambda: tud.DataLoader(tds, batch_size=bs, num_workers=w), a.passes, a.batches)
        configs["torch-short"] = (lambda: tud.DataLoader(tds, batch_size=bs, num_workers=w), a.short_passes, 4)
        configs["torch-persistent"] = (lambda: tud.DataLoader(tds, batch_size=bs, num_workers=w,
                                                              persistent_workers=True), a.short_passes, 4)
        torch_version = torch.__version__
    except ImportError:
        torch_version = "absent"
    rates = {k: [] for k in configs}
    for r in range(a.rounds):
        line = []
        for k, (make, n_passes, n_batches) in configs.items():
            secs = passes(make, n_passes, n_batches)
            rates[k].append(n_passes * n_batches / secs)
            line.append("%s %.1f" % (k, rates[k][-1]))
        print("round %d/%d (batches/s): %s" % (r + 1, a.rounds, ", ".join(line)), flush=True)
    print("\nbatch %d x 3x224x224 float32 (%.1f MB), %d workers, median of %d alternating rounds; torch %s"
          % (bs, mb * 2 ** 20 / 1e6, w, a.rounds, torch_version))
    print("| loader | passes x batches | batches/s | MB/s |")
    print("| --- | --- | --- | --- |")
    for k, (_, n_passes, n_batches) in configs.items():
        med = statistics.median(rates[k])
        print("| %s | %d x %d | %.1f | %.0f |" % (k, n_passes, n_batches, med, med * mb * 2 ** 20 / 1e6))


if __name__ == "__main__":
    main()
