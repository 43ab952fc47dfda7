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
one all_reduce of its gradients concatenated. PE's eager tape has no hook
when one parameter's gradient is final (the leaves' gradients are all
accumulated when the backward pass ends) and pe.distributed's collectives
are synchronous (no work handles), so the buckets are all-reduced, in that
order, right after backward() returns: DataParallel registers a wrapper
around every backward pass (pe.eager.autograd.add_backward_wrapper), which,
after the pass, runs the exchange of every
DataParallel whose forward ran since its last exchange.

Before the buckets the ranks all-gather a small mask: per parameter,
whether this rank's backward made a gradient for it since the last
exchange, and whether it has a .grad at all. Without
find_unused_parameters a parameter that got no gradient on some rank is
the same error on every rank (pe.InvalidArgumentError naming the parameter
and the ranks), never a hang of ranks waiting in different collectives.
With find_unused_parameters=True a rank without a gradient contributes
zeros; a parameter with no gradient on any rank keeps .grad None (the
optimizer skips it).

Why: Paddle's DataParallel semantics (broadcast at construction, bucketed
average after backward, no_sync) over PE's one collective engine across
processes (pe.distributed's all_reduce/broadcast on numpy arrays, MPI).
"""
import contextlib
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


def _sync_around_backward(run):
    """Around every eager backward pass (pe.eager.autograd.add_backward_wrapper):
    the pass, then the gradient exchange of every DataParallel whose forward
    ran since its last exchange."""
    pending = [dp for dp in list(_live) if dp._pending is not None]
    before = {id(dp): dp._grad_objects() for dp in pending}
    for dp in pending:
        dp._pending_sync, dp._pending = dp._pending, None
    try:
        run()
        for dp in pending:
            dp._mark_touched(before[id(dp)])
        for dp in pending:
            if dp._pending_sync == "sync":
                dp._pending_sync = None
                dp._exchange()
    finally:
        for dp in pending:
            dp._pending_sync = None


def _install_backward_hook():
    _ag.add_backward_wrapper(_sync_around_backward)


def _raw(a):
    t = _core.Tensor()
    t.set(np.ascontiguousarray(a))
    return t


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
        self._pending_sync = None
        self._touched = set()       # indices of params that got a gradient since the last exchange
        self.group = _coll.init_parallel_env() if ParallelEnv().world_size > 1 else None
        self._world = _coll._world
        self._nranks = self._world[1] if self._world else 1
        named = [(n, p) for n, p in layers.named_parameters() if not p.stop_gradient]
        self._param_names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._buckets = self._assign_buckets()
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
            t._t = _raw(raw[off:off + a.nbytes].view(a.dtype).reshape(a.shape))
            off += a.nbytes

    # ---- forward / backward ------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        out = self._layers(*inputs, **kwargs)
        if self._nranks > 1 and _ag._grad_enabled():
            self._pending = "sync" if self.grad_need_sync else "nosync"
        return out

    __call__ = forward

    def _grad_objects(self):
        return [p.grad for p in self._params]

    def _mark_touched(self, before):
        for i, (p, g) in enumerate(zip(self._params, before)):
            if p.grad is not None and p.grad is not g:
                self._touched.add(i)

    def _exchange(self):
        """The ready mask, then each bucket's sum / nranks, in bucket order."""
        n = len(self._params)
        touched, self._touched = self._touched, set()
        mask = np.zeros(2 * n + 1, np.int32)
        for i, p in enumerate(self._params):
            mask[i] = i in touched
            mask[n + i] = p.grad is not None
        mask[2 * n] = n
        allm = []
        _coll.all_gather(allm, mask)
        allm = np.stack(allm)
        got, has = allm[:, :n], allm[:, n:2 * n]
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
        for bucket in self._buckets:
            idx = [i for i in bucket if has[:, i].any()]
            if not idx:
                continue
            ps = [self._params[i] for i in idx]
            dt = np.dtype(ps[0].dtype)
            flat = np.concatenate([p.grad.numpy().reshape(-1).astype(dt, copy=False) if p.grad is not None
                                   else np.zeros(p.size, dt) for p in ps])
            _coll.all_reduce(flat)
            flat /= dt.type(self._nranks)
            off = 0
            for p in ps:
                g = flat[off:off + p.size].reshape(p.shape)
                off += p.size
                p.grad = _ag.Tensor(_raw(g), stop_gradient=True, name=p.name + "@GRAD")

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
