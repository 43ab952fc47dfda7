"""pe.distributed.parallel — DataParallel: one eager-mode layer trained on every rank.

    import pe as paddle
    import pe.distributed as dist

    def train():
        dist.init_parallel_env()
        model = paddle.DataParallel(LinearNet())   # rank 0's parameters and buffers on every rank
        opt = paddle.optimizer.Adam(learning_rate=0.001, parameters=model.parameters())
        loss = loss_fn(model(x_of_this_rank), y_of_this_rank)
        loss.backward()                               # gradients averaged over the ranks here
        opt.step(); opt.clear_grad()

    dist.spawn(train, nprocs=2)

What: Paddle 2.x's DataParallel for eager mode. At construction every
parameter and buffer takes rank 0's value (one broadcast per dtype). The
forward is the wrapped layer's. When loss.backward() returns, each
trainable parameter's .grad is the mean over the ranks of their .grad (sum,
then divided by the world size), so the same optimizer step on every rank
keeps the ranks' parameters identical. Inside `with model.no_sync():` a
forward's backward exchanges nothing, and the gradients accumulate locally
until the first backward of a forward outside no_sync, which averages the
accumulated sums.

How: the gradients travel in buckets: the trainable parameters in
creation order are cut into buckets of one dtype, the first one of at most
last_comm_buffer_size MB, the others of at most comm_buffer_size MB, and
the buckets are exchanged in reverse order (the last-created parameters,
whose gradients backward makes first, go first; the bucket of the first
parameters, made last by backward, goes last and is small). One bucket is
one all_reduce of its gradients concatenated, and it overlaps the rest of
backward: the eager tape tells DataParallel when a parameter's .grad is
final for the pass (pe.eager.autograd.add_grad_ready_hook: the last op
reading the parameter has run), and when every parameter of a bucket is
final — and every bucket before it has started, so that all ranks start
the same buckets in the same order — the bucket's sum starts at once
(_core.world_allreduce_start: a work handle of the comm backend; the
data moves on its progress thread while backward runs the next grad ops).
When the pass ends (a wrapper around every backward pass,
pe.eager.autograd.add_backward_wrapper), the parameters that got no
gradient in it count as ready (their .grad so far, or zeros), the buckets
left start, and all of them are waited for; only then are the sums,
divided by the world size, written to the parameters' .grad — before
backward() returns, so nothing reads a gradient before its bucket is
done.

After the buckets the ranks all-gather a small mask: per parameter,
whether this rank's backward made a gradient for it since the last
exchange, and whether it has a .grad at all, and whether this rank's
backward pass failed. Without find_unused_parameters a parameter that got
no gradient on some rank is the same error on every rank
(pe.InvalidArgumentError naming the parameter and the ranks; every
rank's buckets were all started and waited for, so the ranks stay in
step and go on afterwards; the gradients stay each rank's own), never a
hang of ranks waiting in different collectives. With
find_unused_parameters=True a rank without a gradient contributes zeros;
a parameter with no gradient on any rank keeps .grad None (the optimizer
skips it). A backward pass that raises on one rank still starts its
buckets and joins the mask, so every other rank raises too (naming that
rank) instead of waiting for it.

Why: Paddle's DataParallel semantics (broadcast at construction, bucketed
average overlapping backward, no_sync) over PE's one collective engine
across processes (pe.distributed's collectives on numpy arrays, MPI);
buckets of fixed layout (every parameter of the bucket, zeros for a
missing gradient) so that a bucket can start before the ranks know which
parameters the others used.

no_sync(): the synced pass after it also exchanges each rank's number
of no_sync() passes since the last exchange; ranks that differ (one
rank's synced pass met another's no_sync step: its buckets were summed
with a later step's) get an InvalidArgumentError naming every rank's
count, on every rank, and their gradients stay their own. A rank that
stays in no_sync() while another waits in a synced pass is only seen when
it syncs again (the waiting rank waits until PE_MPI_TIMEOUT): no_sync()
steps exchange nothing, by design.

GPU tensors (pe.set_device("gpu:N")): the same path — each bucket's
gradients are copied to host memory, summed over MPI and copied back to
their parameters' place; the parameters and buffers broadcast at
construction likewise. NCCL between processes is the static engine's
(ParallelExecutor with num_trainers), not yet eager mode's.
"""
import contextlib
import itertools
import weakref
import zlib

import numpy as np

from .. import _core
from ..eager import autograd as _ag
from . import collective as _coll
from .env import ParallelEnv

__all__ = ["DataParallel"]

_MB = 1024 * 1024
_live = weakref.WeakSet()   # the DataParallel objects the backward wrapper looks at
_made = itertools.count()   # creation order: every rank finishes its DataParallels in it


_active = []   # the DataParallel objects whose backward pass is running
_trace = None  # debug: f(event, bucket) on "start" / "wait" of each bucket's sum (tests)


def _sync_around_backward(run):
    """Around every eager backward pass (pe.eager.autograd.add_backward_wrapper):
    the pass, during which every DataParallel whose forward ran since its
    last exchange starts its buckets as they fill (_grad_ready), then the
    end of each one's exchange."""
    pending = sorted((dp for dp in list(_live) if dp._pending is not None), key=lambda dp: dp._made)
    for dp in pending:
        dp._begin_pass(dp._pending == "sync")
        dp._pending = None
    _active.extend(pending)
    failed = None
    try:
        try:
            run()
        except BaseException as e:   # re-raised below, once the other ranks have been told
            failed = e
        for dp in pending:
            if dp in _active:
                _active.remove(dp)
        # every DataParallel finishes (its buckets all started and waited for,
        # its mask exchanged) even after another one's error, which is every
        # rank's alike: the ranks stay in step
        raised = failed
        for dp in pending:
            if dp._sync:
                try:
                    dp._finish(failed)
                except _core.Error as e:
                    raised = raised or e
        failed = raised
    finally:
        for dp in pending:
            dp._end_pass()
            if dp in _active:
                _active.remove(dp)
    if failed is not None:
        raise failed


def _grad_ready(leaf):
    """pe.eager.autograd.add_grad_ready_hook: leaf's .grad is final for this pass."""
    for dp in _active:
        i = dp._index.get(id(leaf))
        if i is not None:
            dp._param_ready(i)


def _install_backward_hook():
    _ag.add_backward_wrapper(_sync_around_backward)
    _ag.add_grad_ready_hook(_grad_ready)


def _raw(a, place):
    """A _core.Tensor holding a copy of array a on place (a (kind, id) tuple)."""
    t = _core.Tensor()
    t.set(np.ascontiguousarray(a), place)
    return t


def _flat_grads(params, dt):
    """The .grad of params (zeros for a parameter without one), flattened and concatenated as dt."""
    return np.concatenate([p.grad.numpy().reshape(-1).astype(dt, copy=False) if p.grad is not None
                           else np.zeros(p.size, dt) for p in params])


def _set_grads(params, flat, keep=None):
    """Each parameter's piece of flat (in params' order) becomes its .grad, on the parameter's place;
    keep[i] False leaves parameter i's .grad as it is."""
    off = 0
    for i, p in enumerate(params):
        if keep is None or keep[i]:
            g = flat[off:off + p.size].reshape(p.shape)
            p.grad = _ag.Tensor(_raw(g, p._t._place()), stop_gradient=True, name=p.name + "@GRAD")
        off += p.size


def _check_size(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise _core.InvalidArgumentError("DataParallel: %s must be a positive number of MB, got %r" % (name, v))
    return float(v)


class DataParallel:
    """DataParallel(layers, strategy=None, comm_buffer_size=25,
    last_comm_buffer_size=1, find_unused_parameters=False, group=None).

    layers: the pe.nn.Layer to train on every rank. strategy: accepted for
    Paddle's signature (the ranks are pe.distributed's process world).
    comm_buffer_size / last_comm_buffer_size: the buckets' sizes in MB (the
    bucket of the first-created parameters, exchanged last, has the second).
    find_unused_parameters: a parameter that got no gradient on a rank
    counts as a zero gradient there (otherwise it is an error). group: None
    or the default group (dist.init_parallel_env()'s; PE has no subgroups).
    """

    def __init__(self, layers, strategy=None, comm_buffer_size=25, last_comm_buffer_size=1,
                 find_unused_parameters=False, group=None):
        from ..nn.layer import Layer
        if not isinstance(layers, Layer):
            raise TypeError("DataParallel: layers must be a pe.nn.Layer (eager mode), got %s" %
                            type(layers).__name__)
        if group is not None and getattr(group, "id", None) != 0:
            raise _core.UnsupportedError("DataParallel: group must be None or the default group "
                                         "(pe.distributed.init_parallel_env()'s): PE has no process subgroups")
        self._layers = layers
        self._strategy = strategy
        self.comm_buffer_size = _check_size("comm_buffer_size", comm_buffer_size)
        self.last_comm_buffer_size = _check_size("last_comm_buffer_size", last_comm_buffer_size)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.grad_need_sync = True
        self._pending = None        # "sync" / "nosync": a forward ran since the last backward
        self._sync = False          # the running backward pass exchanges (its forward was outside no_sync)
        self._touched = set()       # indices of params that got a gradient since the last exchange
        self._nosync_passes = 0     # backward passes under no_sync() since the last exchange
        self._ready = None          # per param, during a synced pass: its contribution is final
        self._left = None           # per bucket: params not ready yet
        self._next = 0              # the next bucket to start (they start in order)
        self._works = []            # (bucket, flat, work) started this pass
        self.group = _coll.init_parallel_env() if ParallelEnv().world_size > 1 else None
        self._world = _coll._world
        self._nranks = self._world[1] if self._world else 1
        named = [(n, p) for n, p in layers.named_parameters() if not p.stop_gradient]
        self._param_names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._index = {id(p): i for i, p in enumerate(self._params)}
        self._made = next(_made)
        self._buckets = self._assign_buckets()
        self._bucket_of = {i: k for k, b in enumerate(self._buckets) for i in b}
        self._sync_params_buffers()
        _install_backward_hook()
        _live.add(self)

    # ---- construction ---------------------------------------------------------------
    def _assign_buckets(self):
        """Lists of param indices: per dtype, in creation order, the first
        bucket up to last_comm_buffer_size MB, the others up to
        comm_buffer_size MB; returned in exchange order (reversed)."""
        buckets, open_ = [], {}
        for i, p in enumerate(self._params):
            dt = p.dtype
            nbytes = p.size * np.dtype(dt).itemsize
            b = open_.get(dt)
            if b is None:
                first = not any(self._params[x[0]].dtype == dt for x in buckets)
                b = open_[dt] = [[], 0, (self.last_comm_buffer_size if first else self.comm_buffer_size) * _MB]
                buckets.append(b[0])
            b[0].append(i)
            b[1] += nbytes
            if b[1] >= b[2]:
                del open_[dt]
        return [list(reversed(b)) for b in reversed(buckets)]

    def _sync_params_buffers(self):
        """Every parameter and buffer takes rank 0's value."""
        if self._nranks < 2:
            return
        tensors = [(n, t) for n, t in self._layers.state_dict().items()]
        arrays = [t.numpy() for _, t in tensors]
        nbytes = sum(a.nbytes for a in arrays)
        layout = repr([(n, a.dtype.str, a.shape) for (n, _), a in zip(tensors, arrays)]).encode()
        sig = np.array([len(arrays), nbytes, zlib.crc32(layout)], np.int64)
        allsig = []
        _coll.all_gather(allsig, sig)
        for r, s in enumerate(allsig):
            if (s != allsig[0]).any():
                raise _core.InvalidArgumentError(
                    "DataParallel: rank %d's layer has %d parameters and buffers (%d bytes), rank 0's %d (%d bytes)%s: "
                    "build the same layer on every rank" % (r, s[0], s[1], allsig[0][0], allsig[0][1],
                                                            "" if (s[:2] != allsig[0][:2]).any() else
                                                            ", with other names, shapes or dtypes"))
        buf = np.zeros((nbytes + 7) // 8, np.int64)
        raw = buf.view(np.uint8)
        off = 0
        for a in arrays:
            raw[off:off + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            off += a.nbytes
        _coll.broadcast(buf, 0)
        off = 0
        for (_, t), a in zip(tensors, arrays):
            t._t = _raw(raw[off:off + a.nbytes].view(a.dtype).reshape(a.shape), t._t._place())
            off += a.nbytes

    # ---- forward / backward ------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        out = self._layers(*inputs, **kwargs)
        if self._nranks > 1 and _ag._grad_enabled():
            self._pending = "sync" if self.grad_need_sync else "nosync"
        return out

    __call__ = forward

    def _begin_pass(self, sync):
        self._sync = sync
        if not sync:
            self._nosync_passes += 1
        if sync:
            self._ready = [False] * len(self._params)
            self._left = [len(b) for b in self._buckets]
            self._next = 0
            self._works = []

    def _end_pass(self):
        """Drops this pass's state; a work still pending (the pass stopped
        midway through an error of the exchange itself) is waited for when
        it is released, its buffer being ours."""
        self._sync = False
        self._ready = self._left = None
        self._works = []

    def _param_ready(self, i):
        """Parameter i's .grad is final for this pass: it counts as got; in a
        synced pass, its bucket may be full now, and the buckets start in order."""
        self._touched.add(i)
        if not self._sync or self._ready[i]:
            return
        self._ready[i] = True
        k = self._bucket_of[i]
        self._left[k] -= 1
        while self._next < len(self._buckets) and self._left[self._next] == 0:
            self._start_bucket(self._next)
            self._next += 1

    def _start_bucket(self, k):
        """Starts bucket k's sum: its parameters' .grad (zeros for none), concatenated."""
        ps = [self._params[i] for i in self._buckets[k]]
        flat = _flat_grads(ps, np.dtype(ps[0].dtype))
        if _trace is not None:
            _trace("start", k)
        self._works.append((k, flat, _core.world_allreduce_start(flat)))

    def _finish(self, failed):
        """The end of a synced pass: the parameters without a gradient count
        as ready, the buckets left start, every bucket is waited for; then
        the mask, and (all well) each bucket's sum / nranks into .grad."""
        n = len(self._params)
        has = [p.grad is not None for p in self._params]   # before anything is written
        for i in range(n):
            if not self._ready[i]:
                self._ready[i] = True
                self._left[self._bucket_of[i]] -= 1
        while self._next < len(self._buckets):
            self._start_bucket(self._next)
            self._next += 1
        for k, _, work in self._works:
            if _trace is not None:
                _trace("wait", k)
            work.wait()
        touched, self._touched = self._touched, set()
        nosync, self._nosync_passes = self._nosync_passes, 0
        mask = np.zeros(2 * n + 3, np.int32)
        for i in range(n):
            mask[i] = i in touched
            mask[n + i] = has[i]
        mask[2 * n] = n
        mask[2 * n + 1] = failed is not None
        mask[2 * n + 2] = min(nosync, np.iinfo(np.int32).max)
        allm = []
        _coll.all_gather(allm, mask)
        allm = np.stack(allm)
        got, has_any, bad = allm[:, :n], allm[:, n:2 * n].any(axis=0), allm[:, 2 * n + 1]
        skipped = allm[:, 2 * n + 2]
        if failed is not None:
            return   # this rank re-raises its own error
        if bad.any():
            raise _core.InvalidArgumentError(
                "DataParallel: the backward pass failed on rank(s) %s (see its error there): this rank's "
                "gradients were not averaged" % ", ".join(str(r) for r in range(self._nranks) if bad[r]))
        if (skipped != skipped[0]).any():
            raise _core.InvalidArgumentError(
                "DataParallel: the ranks ran different numbers of backward passes under no_sync() before this "
                "synced one (%s): the sums paired gradients of different steps, so this rank's gradients were "
                "not averaged; every rank must enter no_sync() for the same steps" % ", ".join(
                    "rank %d: %d" % (r, skipped[r]) for r in range(self._nranks)))
        if not self.find_unused_parameters:
            for i in range(n):
                if not got[:, i].all():
                    none = [r for r in range(self._nranks) if not got[r, i]]
                    some = [r for r in range(self._nranks) if got[r, i]]
                    raise _core.InvalidArgumentError(
                        "DataParallel: parameter '%s' (%s) got no gradient in this backward on rank(s) %s%s: every "
                        "trainable parameter must take part in every rank's loss, or pass "
                        "find_unused_parameters=True (a missing gradient then counts as zeros)" % (
                            self._param_names[i], self._params[i].name, ", ".join(map(str, none)),
                            " (rank(s) %s did get one)" % ", ".join(map(str, some)) if some else ""))
        for k, flat, _ in self._works:
            flat /= flat.dtype.type(self._nranks)
            _set_grads([self._params[i] for i in self._buckets[k]], flat, [has_any[i] for i in self._buckets[k]])

    @contextlib.contextmanager
    def no_sync(self):
        """Forwards run inside it exchange no gradients at their backward:
        the gradients accumulate locally until the backward of a forward run
        outside it, which averages the accumulated gradients."""
        prev = self.grad_need_sync
        self.grad_need_sync = False
        try:
            yield
        finally:
            self.grad_need_sync = prev

    # ---- Paddle's compatible names -------------------------------------------------------
    def scale_loss(self, loss):
        """Returns loss unchanged (Paddle 2.x: the average over ranks happens
        in the gradient exchange)."""
        return loss

    def apply_collective_grads(self):
        """Does nothing (Paddle 2.x: the exchange already ran at backward)."""
        return None

    # ---- passthrough to the layer -----------------------------------------------------------
    def state_dict(self, destination=None, include_sublayers=True, structured_name_prefix=""):
        return self._layers.state_dict(destination, include_sublayers, structured_name_prefix)

    def set_state_dict(self, state_dict, use_structured_name=True):
        return self._layers.set_state_dict(state_dict, use_structured_name)

    set_dict = set_state_dict
    load_dict = set_state_dict

    def parameters(self, include_sublayers=True):
        return self._layers.parameters(include_sublayers)

    def named_parameters(self, prefix="", include_sublayers=True):
        return self._layers.named_parameters(prefix, include_sublayers)

    def buffers(self, include_sublayers=True):
        return self._layers.buffers(include_sublayers)

    def named_buffers(self, prefix="", include_sublayers=True):
        return self._layers.named_buffers(prefix, include_sublayers)

    def sublayers(self, include_self=False):
        return self._layers.sublayers(include_self)

    def train(self):
        self._layers.train()
        return self

    def eval(self):
        self._layers.eval()
        return self

    @property
    def training(self):
        return self._layers.training

    def clear_gradients(self):
        self._layers.clear_gradients()

    def __getattr__(self, name):
        if name.startswith("__") or name == "_layers":
            raise AttributeError(name)
        return getattr(self._layers, name)

    def __repr__(self):
        return "DataParallel(%r)" % (self._layers,)
