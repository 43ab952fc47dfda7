#!/usr/bin/env python3
"""examples/train_fashion_mnist.py — the main job: Fashion-MNIST trained data-parallel with PE's Python API.

What: an MLP (784-512-256-10, relu; the default) or a LeNet-style CNN
(--model cnn: conv5x5x20-pool-conv5x5x50-pool-fc500-fc10, relu) trained on
the 60,000 Fashion-MNIST training images of Debian's dataset-fashion-mnist,
evaluated on the 10,000 test images after every epoch. The last line of the
output is `test_accuracy=<value>` (the accuracy after the last epoch).

How: the Paddle static-graph recipe, unchanged but for `import pe as paddle`
style names: build main/startup programs, clone the main program for test
before minimize(), run the startup program with an Executor, then train
through a ParallelExecutor over CPU_NUM places (default: every core — the
batch of 128 is split across the places, gradients are summed, fetches
merged) and evaluate through a second ParallelExecutor built with
share_vars_from=the training one (it reads the trained parameters, no copy).
Each epoch ends with drop_local_exe_scopes() and a checkpoint
(pe.static.save: every persistable — parameters, momentum/Adam state,
learning rate — as safetensors, plus the program as .pe) in --ckpt-dir;
--resume loads the newest one and continues with the next epoch (the
shuffling order depends on --seed and the epoch, so a resumed run sees the
same batches as an uninterrupted one).

Several processes: run unchanged under `python -m pe.distributed.launch
--nproc_per_node 2 examples/train_fashion_mnist.py` (or plain mpirun), the
script reads its trainer from PADDLE_TRAINERS_NUM / PADDLE_TRAINER_ID
(else OMPI_COMM_WORLD_SIZE / _RANK) and builds its ParallelExecutor with
num_trainers / trainer_id (Paddle's collective mode): every trainer walks
the same shuffled global batches of --batch-size and feeds its share of
each (shard_rows: the last trainers take the extra rows), the gradients
are summed over every place of every trainer, so the job trains as one
process would on the same batches (same learning rate, same accuracy).
Trainer 0 alone prints, evaluates and writes the checkpoints, metrics and
picture; the losses on its progress bar are the global batch's
(ParallelExecutor.trainers_sum).

Curves: every --log-every steps a line goes to metrics.jsonl in --out-dir
(default: --ckpt-dir): {"type": "step", ...} with the batch's loss and
accuracy, the samples/s since the last logged step and the learning rate;
after every epoch a {"type": "epoch", ...} line with the epoch's train loss
and accuracy, the test accuracy and the epoch's samples/s; the first line
is {"type": "run", ...} (the options). At the end of the run the curves are
drawn into training.png next to it (matplotlib, Agg backend, imported only
then: Debian's python3-matplotlib); --plot METRICS draws the picture of a
metrics file and exits. --tensorboard DIR / --visualdl DIR also write the
scalars as TensorBoard (torch.utils.tensorboard or tensorboardX) or VisualDL
logs, when one of them is installed (imported only when asked for).
CPU_NUM defaults to the cores divided by the trainers on this machine.

Why: it is the job the README's `scripts/demo.sh` runs, and
benchmarks/compare_peers.py imports its data loader and model builders so
the comparison with PyTorch trains exactly these models.

    /usr/bin/python3 examples/train_fashion_mnist.py                 # MLP, defaults
    /usr/bin/python3 examples/train_fashion_mnist.py --model cnn --epochs 3
    /usr/bin/python3 examples/train_fashion_mnist.py --epochs 8 --resume   # 3 more epochs
    /usr/bin/python3 -m pe.distributed.launch --nproc_per_node 2 examples/train_fashion_mnist.py
    /usr/bin/python3 examples/train_fashion_mnist.py --plot checkpoints/metrics.jsonl   # the picture again
"""
import argparse
import json
import os
import sys
import tempfile
import time
import traceback

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot"]
LR_VAR = "learning_rate"
# Per model: default epochs and learning rate per optimizer.
DEFAULTS = {
    "mlp": {"epochs": 10, "lr": {"momentum": 0.05, "adam": 0.001}},
    "cnn": {"epochs": 6, "lr": {"momentum": 0.05, "adam": 0.001}},
}


def _import_pe():
    """Imports pe from the build tree when it is not installed (build/python)."""
    try:
        import pe
    except ImportError:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for d in (os.environ.get("PE_BUILD_DIR", ""), "build"):
            p = os.path.join(root if not os.path.isabs(d) else "", d, "python")
            if d and os.path.isdir(os.path.join(p, "pe")):
                sys.path.insert(0, p)
                break
        import pe
    return pe


# ---- data --------------------------------------------------------------------------------------

def _read_idx(path, magic_want, ndim, limit=None):
    """The array of an idx file (gzip): pe.dataset.common.read_idx (only the
    first `limit` items when limit is given); a missing or bad file ends the job."""
    pe = _import_pe()
    try:
        return pe.dataset.common.read_idx(path, magic_want, ndim, limit)
    except pe.Error as e:
        raise SystemExit("train_fashion_mnist: cannot read %s: %s (install Debian's dataset-fashion-mnist: "
                         "scripts/setup.sh)" % (path, e))


def load_fashion_mnist(split, limit=None, data_dir=DATA_DIR):
    """(images float32 [N, 784] in [0, 1], labels int64 [N, 1]) of split 'train' or 't10k'."""
    img = _read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split), 2051, 3, limit)
    lab = _read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split), 2049, 1, limit)
    if img.shape[0] != lab.shape[0]:
        raise SystemExit("train_fashion_mnist: %s has %d images but %d labels" % (split, img.shape[0], lab.shape[0]))
    x = img.reshape(img.shape[0], -1).astype(np.float32) / np.float32(255.0)
    return x, lab.astype(np.int64).reshape(-1, 1)


# ---- models --------------------------------------------------------------------------------------

def build_model(pe, model, image):
    """Logits [N, 10] of `model` ('mlp' | 'cnn') for image: [N, 784]."""
    F = pe.nn.functional
    if model == "mlp":
        h = pe.static.nn.fc(image, 512, activation="relu")
        h = pe.static.nn.fc(h, 256, activation="relu")
        return pe.static.nn.fc(h, 10)
    if model == "cnn":
        x = pe.reshape(image, [-1, 1, 28, 28])                                 # [N, 1, 28, 28]
        x = pe.static.nn.conv2d(x, 20, 5, act="relu")                          # [N, 20, 24, 24]
        x = F.max_pool2d(x, 2, 2)                                              # [N, 20, 12, 12]
        x = pe.static.nn.conv2d(x, 50, 5, act="relu")                          # [N, 50, 8, 8]
        x = F.max_pool2d(x, 2, 2)                                              # [N, 50, 4, 4]
        x = pe.static.nn.fc(x, 500, activation="relu")                         # [N, 500]
        return pe.static.nn.fc(x, 10)                                          # [N, 10]
    raise ValueError("unknown model %r (mlp or cnn)" % model)


def build_programs(pe, model, optimizer, lr, seed, momentum=0.9):
    """(main, startup, test, loss, pred): the training program (forward, backward,
    optimizer), its startup program and the test program (forward only)."""
    from pe.layer_helper import LayerHelper
    from pe.utils import unique_name
    main, startup = pe.static.Program(), pe.static.Program()
    main.random_seed = seed
    startup.random_seed = seed
    with pe.static.program_guard(main, startup), unique_name.guard():
        image = pe.static.data("image", [None, 784], "float32")
        label = pe.static.data("label", [None, 1], "int64")
        logits = build_model(pe, model, image)
        loss = pe.nn.functional.cross_entropy(logits, label)
        pred = pe.nn.functional.softmax(logits)
        test = main.clone(for_test=True)
        # The learning rate is a persistable [1] variable (initialized to lr by
        # the startup program) that the training loop feeds every step with
        # the cosine schedule's value; a fed persistable reaches every place.
        helper = LayerHelper("learning_rate")
        lr_var = helper.create_global_variable([1], "float32", persistable=True, name=LR_VAR)
        helper.set_variable_initializer(lr_var, pe.nn.initializer.Constant(lr))
        if optimizer == "momentum":
            opt = pe.optimizer.Momentum(learning_rate=lr_var, momentum=momentum)
        elif optimizer == "adam":
            opt = pe.optimizer.Adam(learning_rate=lr_var)
        else:
            raise ValueError("unknown optimizer %r (momentum or adam)" % optimizer)
        opt.minimize(loss)
    return main, startup, test, loss, pred


def cosine_lr(base, step, total_steps):
    """base * (1 + cos(pi * step / total_steps)) / 2: from base down to ~0 at the last step."""
    return np.array([0.5 * base * (1.0 + np.cos(np.pi * min(step, total_steps) / total_steps))], np.float32)


# ---- several trainers ---------------------------------------------------------------------------

def trainer_env():
    """(trainers, trainer_id) of this process: PADDLE_TRAINERS_NUM / PADDLE_TRAINER_ID (set by
    `python -m pe.distributed.launch`), else OMPI_COMM_WORLD_SIZE / _RANK (plain mpirun), else (1, 0)."""
    for n_var, id_var in (("PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID"),
                          ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")):
        if not os.environ.get(n_var, "").strip():
            continue
        try:
            n, i = int(os.environ[n_var]), int(os.environ.get(id_var, "0"))
        except ValueError:
            raise SystemExit("train_fashion_mnist: %s=%r / %s=%r are not integers"
                             % (n_var, os.environ[n_var], id_var, os.environ.get(id_var)))
        if n < 1 or not 0 <= i < n:
            raise SystemExit("train_fashion_mnist: %s=%d is not a trainer of %s=%d" % (id_var, i, n_var, n))
        return n, i
    return 1, 0


def shard_rows(rows, n, i):
    """[start, stop) of part i of n of a batch of `rows` rows: contiguous, in order, the last
    rows % n parts taking one row more (3 rows on 2 -> [0], [1, 2]). PE's rule (pe_batch_shard)
    for the places of a ParallelExecutor; here also for the trainers' shares of a global batch."""
    base, extra = divmod(rows, n)
    start = i * base + max(0, i - (n - extra))
    return start, start + base + (i >= n - extra)


# ---- progress bar ------------------------------------------------------------------------------

class Progress:
    """One terminal line per epoch, redrawn in place with \\r (at most 10 times a second)."""

    def __init__(self, title, total, out=None):
        self.title, self.total, self.out = title, total, out or sys.stdout
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.width = 0

    def update(self, done, loss, force=False):
        now = time.perf_counter()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        frac = done / self.total if self.total else 1.0
        n = int(frac * 30)
        bar = "=" * n + (">" if n < 30 else "") + " " * (29 - n)
        sps = done / max(now - self.t0, 1e-9)
        line = "%s [%s] %6d/%d  loss %.4f  %7.0f samples/s" % (self.title, bar, done, self.total, loss, sps)
        self.width = max(self.width, len(line))
        self.out.write("\r" + line.ljust(self.width))
        self.out.flush()

    def close(self, done, loss):
        self.update(done, loss, force=True)
        self.out.write("\n")
        self.out.flush()
        return time.perf_counter() - self.t0


# ---- checkpoints ---------------------------------------------------------------------------------

def _meta_path(ckpt_dir):
    return os.path.join(ckpt_dir, "latest.json")


def save_checkpoint(pe, ckpt_dir, epoch, main, test, scope, args, test_acc):
    """ckpt_dir/epoch_<k>/model.{safetensors,pe} + infer.pe, then latest.json (written last, atomically)."""
    d = os.path.join(ckpt_dir, "epoch_%d" % epoch)
    pe.static.save(main, os.path.join(d, "model"), scope=scope)
    pe.static.save_program(test, os.path.join(d, "infer.pe"))
    meta = {"epoch": epoch, "path": "epoch_%d/model" % epoch, "model": args.model, "optimizer": args.optimizer,
            "lr": args.lr, "batch_size": args.batch_size, "seed": args.seed, "test_accuracy": test_acc}
    # As PE writes its files (guide §7): a fresh temporary that no planted
    # name can redirect (mkstemp: O_EXCL, mode 0600, then the usual mode),
    # fsync, rename over latest.json, fsync of the directory.
    fd, tmp = tempfile.mkstemp(dir=ckpt_dir, prefix="latest.json.tmp.%d." % os.getpid())
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, _meta_path(ckpt_dir))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return d


def load_checkpoint(pe, ckpt_dir, main, scope, args):
    """The epoch of the newest checkpoint in ckpt_dir, its persistables loaded into scope."""
    try:
        with open(_meta_path(ckpt_dir)) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise SystemExit("train_fashion_mnist: --resume: no checkpoint in %s (no latest.json)" % ckpt_dir)
    except (OSError, ValueError) as e:
        raise SystemExit("train_fashion_mnist: --resume: cannot read %s: %s" % (_meta_path(ckpt_dir), e))
    for k in ("model", "optimizer"):
        if meta.get(k) != getattr(args, k):
            raise SystemExit("train_fashion_mnist: --resume: the checkpoint in %s was trained with --%s %s, "
                             "this run asks for %s" % (ckpt_dir, k, meta.get(k), getattr(args, k)))
    pe.static.load(main, os.path.join(ckpt_dir, meta["path"]), scope=scope)
    return int(meta["epoch"])


# ---- metrics and curves -------------------------------------------------------------------------

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "training.png"


class Metrics:
    """metrics.jsonl: one JSON object per line, flushed as written (a crashed run keeps its
    lines); with --tensorboard / --visualdl the same scalars go to that writer too. On --resume
    the lines of the epochs after the checkpoint (an interrupted epoch) are dropped first."""

    def __init__(self, path, run_info, resume_epoch=None, writers=()):
        self.path = path
        kept = []
        if resume_epoch is not None and os.path.exists(path):
            kept = [r for r in read_metrics(path) if r.get("type") == "run" or r.get("epoch", 0) <= resume_epoch]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.f = open(path, "w")
        for r in kept:
            self._write(r)
        self._write(dict(run_info, type="run"))
        self.writers = list(writers)

    def _write(self, rec):
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()

    def log(self, rec, step):
        self._write(rec)
        kind = rec["type"]
        for w in self.writers:
            for k, v in rec.items():
                if k not in ("type", "epoch", "step", "samples", "time") and v is not None:
                    w.add_scalar("%s/%s" % (kind, k), v, step)

    def close(self):
        self.f.close()
        for w in self.writers:
            w.close()


def scalar_writers(tensorboard=None, visualdl=None):
    """The TensorBoard / VisualDL writers asked for, imported only then (an error when missing)."""
    writers = []
    if tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                raise SystemExit("train_fashion_mnist: --tensorboard needs TensorBoard's writer "
                                 "(torch.utils.tensorboard with the tensorboard package, or tensorboardX)")
        writers.append(SummaryWriter(tensorboard))
    if visualdl:
        try:
            from visualdl import LogWriter
        except ImportError:
            raise SystemExit("train_fashion_mnist: --visualdl needs VisualDL (pip install visualdl)")
        writers.append(LogWriter(logdir=visualdl))
    return writers


def read_metrics(path):
    """The records of a metrics.jsonl file (a truncated last line is ignored)."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def plot_metrics(metrics_path, png_path):
    """Draws train loss (and learning rate), train/test accuracy and throughput over the epochs
    of a metrics.jsonl file into png_path. matplotlib (Agg) is imported here, only when drawing."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    recs = read_metrics(metrics_path)
    runs = [r for r in recs if r.get("type") == "run"]
    steps = [r for r in recs if r.get("type") == "step"]
    epochs = [r for r in recs if r.get("type") == "epoch"]
    if not steps and not epochs:
        raise ValueError("no step or epoch lines in %s" % metrics_path)
    spe = (runs[-1].get("steps_per_epoch") if runs else None) or max(1, max((r["step"] for r in steps), default=1))
    at = lambda r: r["step"] / spe  # x: epochs (fractional)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2), dpi=100)
    title = "PE: %s" % (runs[-1].get("title", "") if runs else os.path.basename(metrics_path))
    fig.suptitle(title, fontsize=11)

    a = ax[0]
    a.plot([at(r) for r in steps], [r["loss"] for r in steps], color="tab:blue", alpha=0.35, lw=0.8,
           label="batch loss")
    a.plot([r["epoch"] for r in epochs], [r["train_loss"] for r in epochs], "o-", color="tab:blue",
           label="epoch mean")
    a.set_xlabel("epoch")
    a.set_ylabel("train loss (cross entropy)")
    a.set_title("train loss")
    a.grid(alpha=0.3)
    lr = [(at(r), r["lr"]) for r in steps if r.get("lr") is not None]
    if lr:
        b = a.twinx()
        b.plot(*zip(*lr), "--", color="tab:gray", lw=1, label="learning rate")
        b.set_ylabel("learning rate", color="tab:gray")
        b.tick_params(axis="y", colors="tab:gray")
        h1, l1 = a.get_legend_handles_labels()
        h2, l2 = b.get_legend_handles_labels()
        a.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=8)
    else:
        a.legend(loc="upper right", fontsize=8)

    a = ax[1]
    te = [(r["epoch"], r["test_accuracy"]) for r in epochs if r.get("test_accuracy") is not None]
    tr = [(r["epoch"], r["train_accuracy"]) for r in epochs if r.get("train_accuracy") is not None]
    if tr:
        a.plot(*zip(*tr), "s--", color="tab:orange", label="train (epoch mean)")
    if te:
        a.plot(*zip(*te), "o-", color="tab:green", label="test (10,000 images)" if runs and
               runs[-1].get("test_images") == 10000 else "test")
        e, v = te[-1]
        a.annotate("%.4f" % v, (e, v), textcoords="offset points", xytext=(-10, -14), fontsize=9)
    a.set_xlabel("epoch")
    a.set_ylabel("accuracy")
    a.set_title("accuracy")
    a.grid(alpha=0.3)
    a.legend(loc="lower right", fontsize=8)

    a = ax[2]
    sps = [(at(r), r["samples_per_s"]) for r in steps if r.get("samples_per_s")]
    if sps:
        a.plot(*zip(*sps), color="tab:purple", alpha=0.4, lw=0.8, label="per logged interval")
    eps = [(r["epoch"], r["samples_per_s"]) for r in epochs if r.get("samples_per_s")]
    if eps:
        a.plot(*zip(*eps), "o-", color="tab:purple", label="epoch mean")
    a.set_xlabel("epoch")
    a.set_ylabel("samples/s")
    a.set_title("training throughput")
    a.set_ylim(bottom=0)
    a.grid(alpha=0.3)
    a.legend(loc="lower right", fontsize=8)

    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
    return png_path


# ---- training ------------------------------------------------------------------------------------

def evaluate(test_exe, pred, x, y, batch):
    """Accuracy of the test program on (x, y) through the share_vars_from executor."""
    correct = 0
    for i in range(0, len(x), batch):
        p, = test_exe.run(fetch_list=[pred.name], feed={"image": x[i:i + batch], "label": y[i:i + batch]})
        correct += int((p.argmax(1) == y[i:i + batch, 0]).sum())
    return correct / len(x)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Train an MLP or a CNN on Fashion-MNIST with PE, data-parallel "
                                 "over CPU_NUM places (default: all cores).")
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--epochs", type=int, default=None,
                    help="total epochs (default: mlp %d, cnn %d)" % (DEFAULTS["mlp"]["epochs"],
                                                                     DEFAULTS["cnn"]["epochs"]))
    ap.add_argument("--batch-size", type=int, default=128, help="global batch, split across the places")
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: 0.05 momentum, 0.001 adam)")
    ap.add_argument("--optimizer", choices=["momentum", "adam"], default="momentum")
    ap.add_argument("--seed", type=int, default=1, help="initial weights and shuffling")
    ap.add_argument("--ckpt-dir", default="./checkpoints")
    ap.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --ckpt-dir")
    ap.add_argument("--stop-after", type=int, default=None, metavar="K",
                    help="stop after K epochs of this run (the schedule still spans --epochs; continue with --resume)")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N train and test images (smoke tests)")
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--out-dir", default=None, help="where metrics.jsonl and training.png go (default: --ckpt-dir)")
    ap.add_argument("--log-every", type=int, default=10, metavar="K", help="a metrics line every K steps (10)")
    ap.add_argument("--no-plot", action="store_true", help="do not draw training.png at the end of the run")
    ap.add_argument("--plot", metavar="METRICS", help="only draw the curves of a metrics.jsonl file "
                    "(into --png, default training.png next to it) and exit")
    ap.add_argument("--png", default=None, help="the picture's path (default: training.png next to metrics.jsonl)")
    ap.add_argument("--tensorboard", metavar="DIR", help="also write TensorBoard logs to DIR (needs "
                    "torch.utils.tensorboard or tensorboardX)")
    ap.add_argument("--visualdl", metavar="DIR", help="also write VisualDL logs to DIR (needs visualdl)")
    args = ap.parse_args(argv)
    if args.out_dir is None:
        args.out_dir = args.ckpt_dir
    if args.epochs is None:
        args.epochs = DEFAULTS[args.model]["epochs"]
    if args.lr is None:
        args.lr = DEFAULTS[args.model]["lr"][args.optimizer]
    if args.batch_size < 1 or args.epochs < 1 or any(v is not None and v < 1 for v in (args.limit, args.stop_after,
                                                                                       args.log_every)):
        ap.error("--batch-size, --epochs, --limit, --stop-after and --log-every must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.plot:  # the picture of an existing metrics file: no training
        png = args.png or os.path.join(os.path.dirname(os.path.abspath(args.plot)), PLOT_FILE)
        try:
            print("curves: %s" % plot_metrics(args.plot, png))
        except (OSError, ValueError) as e:
            raise SystemExit("train_fashion_mnist: --plot: %s" % e)
        except ImportError as e:
            raise SystemExit("train_fashion_mnist: --plot needs matplotlib (Debian: python3-matplotlib): %s" % e)
        return 0
    trainers, trainer_id = trainer_env()
    if trainer_id > 0:  # trainer 0 prints; errors still reach stderr
        sys.stdout = open(os.devnull, "w")
    writers = scalar_writers(args.tensorboard, args.visualdl) if trainer_id == 0 else []
    if not os.environ.get("CPU_NUM"):  # every core (shared by this machine's trainers), at least a row per place
        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "0") or 0) or trainers
        os.environ["CPU_NUM"] = str(max(1, min((os.cpu_count() or 1) // local, args.batch_size // trainers, 64)))
    pe = _import_pe()
    pe.enable_static()

    x_train, y_train = load_fashion_mnist("train", args.limit, args.data_dir)
    x_test, y_test = load_fashion_mnist("t10k", args.limit, args.data_dir)
    main_prog, startup, test_prog, loss, pred = build_programs(pe, args.model, args.optimizer, args.lr, args.seed)

    scope = pe.static.global_scope()
    exe = pe.static.Executor(pe.CPUPlace())
    exe.run(startup)
    first_epoch = 0
    if args.resume:
        first_epoch = load_checkpoint(pe, args.ckpt_dir, main_prog, scope, args)
        print("resumed from %s: %d epoch(s) done" % (args.ckpt_dir, first_epoch))

    train_exe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main_prog, scope=scope,
                                           num_trainers=trainers, trainer_id=trainer_id)
    # trainer 0 evaluates (the parameters are the same on every trainer)
    test_exe = None if trainer_id else pe.static.ParallelExecutor(False, main_program=test_prog,
                                                                  share_vars_from=train_exe, scope=scope)
    places = train_exe.device_count
    if args.batch_size < places * trainers:
        raise SystemExit("train_fashion_mnist: --batch-size %d is smaller than %d trainer(s) x CPU_NUM=%d places"
                         % (args.batch_size, trainers, places))
    n = len(x_train)
    steps_per_epoch = (n + args.batch_size - 1) // args.batch_size
    total_steps = steps_per_epoch * args.epochs
    print("PE %s: %s, %s lr=%g (cosine decay over %d epochs), batch %d over %s%d CPU place(s) (CPU_NUM), "
          "%d train / %d test images" % (pe.__version__, args.model.upper(), args.optimizer, args.lr, args.epochs,
                                          args.batch_size, "%d trainers x " % trainers if trainers > 1 else "",
                                          places, n, len(x_test)))

    metrics = None
    if test_exe is not None:  # trainer 0 writes the metrics
        title = "%s, %s lr %g cosine, batch %d over %s%d CPU place(s), %d epochs" % (
            args.model.upper(), args.optimizer, args.lr, args.batch_size,
            "%d trainers x " % trainers if trainers > 1 else "", places, args.epochs)
        run_info = {"title": title, "pe_version": pe.__version__, "model": args.model, "optimizer": args.optimizer,
                    "lr": args.lr, "batch_size": args.batch_size, "epochs": args.epochs, "seed": args.seed,
                    "places": places, "trainers": trainers, "steps_per_epoch": steps_per_epoch,
                    "log_every": args.log_every, "train_images": n, "test_images": len(x_test),
                    "first_epoch": first_epoch}
        metrics = Metrics(os.path.join(args.out_dir, METRICS_FILE), run_info,
                          resume_epoch=first_epoch if args.resume else None, writers=writers)

    acc = None
    if first_epoch >= args.epochs and test_exe is not None:
        acc = evaluate(test_exe, pred, x_test, y_test, 1000)
        print("nothing to train: the checkpoint has %d epoch(s), --epochs %d" % (first_epoch, args.epochs))
    last_epoch = args.epochs if args.stop_after is None else min(args.epochs, first_epoch + args.stop_after)
    for epoch in range(first_epoch, last_epoch):
        order = np.random.RandomState(args.seed * 1000 + epoch).permutation(n)
        bar = Progress("epoch %d/%d" % (epoch + 1, args.epochs), n)
        loss_sum, seen, avg, correct_sum = 0.0, 0, float("nan"), 0
        log_t, log_seen = time.perf_counter(), 0
        lr_now = cosine_lr(args.lr, epoch * steps_per_epoch, total_steps)
        for s, i in enumerate(range(0, n, args.batch_size)):
            idx = order[i:i + args.batch_size]
            if len(idx) < places * trainers:  # a last piece too small to split: skip it
                break
            mine = idx[slice(*shard_rows(len(idx), trainers, trainer_id))]  # this trainer's share
            lr_now = cosine_lr(args.lr, epoch * steps_per_epoch + s, total_steps)
            feed = {"image": x_train[mine], "label": y_train[mine], LR_VAR: lr_now}
            lv, pv = train_exe.run(fetch_list=[loss.name, pred.name], feed=feed)
            correct = int((pv.argmax(1) == y_train[mine][:, 0]).sum())
            # the summed loss of these rows: each place's mean loss times its rows
            step_loss = sum(float(v) * (b - a) for v, (a, b) in
                            zip(np.ravel(lv), (shard_rows(len(mine), places, p) for p in range(places))))
            if trainers > 1:  # the global batch's: every trainer's summed loss and correct answers
                step_loss, correct = (float(v) for v in train_exe.trainers_sum([step_loss, correct]))
            loss_sum += step_loss
            correct_sum += correct
            seen += len(idx)
            avg = loss_sum / seen
            gstep = epoch * steps_per_epoch + s + 1
            if metrics is not None and gstep % args.log_every == 0:
                now = time.perf_counter()
                metrics.log({"type": "step", "epoch": epoch + 1, "step": gstep, "samples": seen,
                             "loss": step_loss / len(idx), "accuracy": correct / len(idx),
                             "lr": float("%.7g" % lr_now[0]),
                             "samples_per_s": (seen - log_seen) / max(now - log_t, 1e-9)}, gstep)
                log_t, log_seen = now, seen
            if not np.isfinite(avg):
                bar.close(seen, avg)
                raise SystemExit("train_fashion_mnist: the loss diverged (%s) in epoch %d; lower --lr"
                                 % (avg, epoch + 1))
            bar.update(seen, avg)
        secs = bar.close(seen, avg)
        train_exe.drop_local_exe_scopes()
        if test_exe is None:  # trainers 1..N-1: on to the next epoch (its first step waits for trainer 0)
            continue
        t0 = time.perf_counter()
        acc = evaluate(test_exe, pred, x_test, y_test, 1000)
        test_exe.drop_local_exe_scopes()
        eval_secs = time.perf_counter() - t0
        d = save_checkpoint(pe, args.ckpt_dir, epoch + 1, main_prog, test_prog, scope, args, acc)
        metrics.log({"type": "epoch", "epoch": epoch + 1, "step": (epoch + 1) * steps_per_epoch, "train_loss": avg,
                     "train_accuracy": correct_sum / max(seen, 1), "test_accuracy": acc,
                     "samples_per_s": seen / secs, "seconds": secs, "eval_seconds": eval_secs,
                     "lr": float("%.7g" % lr_now[0])}, (epoch + 1) * steps_per_epoch)
        print("epoch %d: train loss %.4f, %.1f s (%.0f samples/s); test accuracy %.4f (%.1f s); checkpoint %s"
              % (epoch + 1, avg, secs, seen / secs, acc, time.perf_counter() - t0, d))
    if metrics is not None:
        metrics.close()
        if not args.no_plot:
            png = args.png or os.path.join(args.out_dir, PLOT_FILE)
            try:
                print("metrics: %s; curves: %s" % (metrics.path, plot_metrics(metrics.path, png)))
            except ImportError as e:  # the run itself succeeded: say why there is no picture
                print("train_fashion_mnist: no %s: matplotlib is missing (Debian: python3-matplotlib): %s"
                      % (png, e), file=sys.stderr)
            except ValueError as e:  # nothing trained, nothing logged
                print("train_fashion_mnist: no %s: %s" % (png, e), file=sys.stderr)
    if acc is not None:
        print("test_accuracy=%.4f" % acc)
    return 0


def _main_trainer():
    """main(); a trainer of several that fails leaves at once (os._exit) rather than through
    Python's exit and MPI_Finalize, whose handshake would wait for the trainers still inside a
    collective until PE_MPI_TIMEOUT; mpirun sees the failed trainer and stops the others."""
    try:
        return main()
    except BaseException as e:
        if isinstance(e, SystemExit) and e.code in (None, 0) or trainer_env()[0] < 2:
            raise
        if isinstance(e, SystemExit):
            print(e.code if isinstance(e.code, str) else "train_fashion_mnist: exit %s" % e.code, file=sys.stderr)
        else:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.code if isinstance(e, SystemExit) and isinstance(e.code, int) else 1)


if __name__ == "__main__":
    sys.exit(_main_trainer())
