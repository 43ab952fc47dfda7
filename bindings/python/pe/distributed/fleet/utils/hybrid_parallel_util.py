"""fused_allreduce_gradients: Paddle's hand-written gradient exchange for
eager data parallelism (after backward passes under DataParallel.no_sync(),
or for a model DataParallel does not wrap).

Every rank calls it with the same parameters in the same order. Their
.grad are averaged over the ranks of the world: the gradients of each
dtype concatenated into buckets of at most 128 MB (Paddle's default), each
bucket one all_reduce of the comm backend (pe.distributed's, MPI between
processes; GPU gradients go through host memory), all started before any
is waited for, then divided by the world size and written back to .grad
on each parameter's place. Parameters with stop_gradient True are left
out, as Paddle leaves out the untrainable ones. A parameter without a
.grad takes part only if it has none on every rank (then it is skipped);
ranks that disagree about which parameters have a gradient, or pass
different parameter lists, get pe.InvalidArgumentError on every rank
before any gradient moves, never a hang. With one process it does nothing.
"""
import numpy as np

from .... import _core
from ... import collective as _coll
from ...parallel import _flat_grads, _set_grads

__all__ = ["fused_allreduce_gradients"]

_BUCKET = 128 * 1024 * 1024


def fused_allreduce_gradients(parameter_list, hcg=None):
    """Averages the .grad of parameter_list over the ranks (see the module)."""
    if hcg is not None:
        raise _core.UnsupportedError("fused_allreduce_gradients: hcg (a hybrid-parallel group topology) must be "
                                     "None: PE's world is one data-parallel group")
    params = [p for p in parameter_list if not p.stop_gradient]
    world = _coll._world_or_none("fused_allreduce_gradients")
    if world is None or world[1] < 2:
        return None
    nranks = world[1]
    # first the lists' sizes (fixed-size arrays: a collective of equal shapes on every rank), then which
    # parameters have a gradient here: the ranks must agree on both before any gradient moves
    n = len(params)
    head, allhead = np.array([n, sum(p.size for p in params)], np.int64), []
    _coll.all_gather(allhead, head)
    allhead = np.stack(allhead)
    if (allhead != allhead[0]).any():
        raise _core.InvalidArgumentError(
            "fused_allreduce_gradients: the ranks passed different parameter lists (%s); every rank must pass the "
            "same parameters in the same order" % ", ".join(
                "rank %d: %d parameters, %d elements" % (r, allhead[r, 0], allhead[r, 1]) for r in range(nranks)))
    allhas = []   # (one element more: never an empty array)
    _coll.all_gather(allhas, np.array([p.grad is not None for p in params] + [0], np.int32))
    has = np.stack(allhas)[:, :n].astype(bool)
    for i in range(n):
        if has[:, i].any() and not has[:, i].all():
            raise _core.InvalidArgumentError(
                "fused_allreduce_gradients: parameter %d ('%s', %s) has a gradient on rank(s) %s and none on rank(s) "
                "%s: no gradient was averaged" % (
                    i, params[i].name, params[i].shape, ", ".join(str(r) for r in range(nranks) if has[r, i]),
                    ", ".join(str(r) for r in range(nranks) if not has[r, i])))
    buckets, open_ = [], {}
    for i, p in enumerate(params):
        if not has[0, i]:
            continue
        dt = np.dtype(p.dtype)
        nbytes = p.size * dt.itemsize
        b = open_.get(dt)
        if b is None or b[1] + nbytes > _BUCKET:   # an open bucket always holds a parameter already
            b = open_[dt] = [[], 0]
            buckets.append((dt, b[0]))
        b[0].append(p)
        b[1] += nbytes
    works = []
    for dt, ps in buckets:
        flat = _flat_grads(ps, dt)
        works.append((ps, flat, _core.world_allreduce_start(flat)))
    for ps, flat, w in works:
        w.wait()
        flat /= flat.dtype.type(nranks)
        _set_grads(ps, flat)
    return None
