"""pe.autograd — Paddle's `paddle.autograd`: custom differentiable
operations (PyLayer) and backward() on several tensors, over the eager tape
of pe.eager.autograd.

    class cus_tanh(pe.autograd.PyLayer):
        @staticmethod
        def forward(ctx, x):
            y = pe.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            y, = ctx.saved_tensor()
            return dy * (1 - pe.square(y))

    y = cus_tanh.apply(x)      # forward runs now; backward() calls cus_tanh.backward

How: apply() runs forward under no_grad (its ops record nothing), then, when
gradients are on and some Tensor argument has stop_gradient False, puts one
node on the tape for the whole call, as pe.jit's calls do: the node's
inputs are the Tensor arguments (positional, then keyword, in order), its
outputs the floating-point Tensors forward returned. When backward()
reaches the node it calls backward(ctx, *grads) under no_grad, one
gradient per Tensor output (zeros for an output no gradient reached, as
Paddle's default materialize_grads; none for a non-Tensor output), and
takes one gradient (or None) per Tensor argument back, each checked
against its argument's shape and dtype.

Not supported (clear errors): PyLayer inside pe.jit.to_static (a traced
program cannot carry a Python backward), backward returning the wrong
number of gradients or a gradient of the wrong shape or dtype, and
double backward (create_graph).
"""
import inspect

from . import _core
from .eager import autograd as _ag

__all__ = ["PyLayer", "PyLayerContext", "backward"]


class PyLayerContext:
    """The ctx of PyLayer.forward / backward: what forward keeps for backward."""

    def __init__(self):
        self._saved = ()
        self.materialize_grads = True
        self._non_diff = set()

    def save_for_backward(self, *tensors):
        """Keeps tensors (or any values) for backward: saved_tensor() returns them."""
        self._saved = tensors

    def saved_tensor(self):
        """The values save_for_backward kept, as a tuple."""
        return self._saved

    def mark_non_differentiable(self, *tensors):
        """Outputs of forward that get no gradient (stop_gradient True; backward
        receives zeros for them)."""
        self._non_diff.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        """With False, backward receives None (not zeros) for an output no gradient reached."""
        self.materialize_grads = bool(value)

    def mark_not_inplace(self, *tensors):
        """Accepted for Paddle's API: PE's forward outputs are never the inputs' storage updated in place."""


class PyLayer:
    """A differentiable operation written in Python: subclass it with two
    static methods, forward(ctx, *args, **kwargs) and backward(ctx, *grads),
    and call Cls.apply(*args, **kwargs)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("PyLayer subclasses must define forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("PyLayer subclasses must define backward(ctx, *grads)")

    @classmethod
    def apply(cls, *args, **kwargs):
        if _ag._tracer() is not None:
            raise _core.UnsupportedError(
                "pe.jit.to_static: PyLayer %s has a Python backward, which a traced static program cannot carry; "
                "run the layer that calls it eagerly" % cls.__name__)
        ctx = PyLayerContext()
        with _ag.no_grad():
            outs = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(outs, (tuple, list))
        seq = [outs] if single else list(outs)
        where = [(i, a) for i, a in enumerate(args)] + list(kwargs.items())  # (position or keyword, value)
        ins = [a for _, a in where if isinstance(a, _ag.Tensor)]
        diff = [isinstance(o, _ag.Tensor) and id(o) not in ctx._non_diff for o in seq]
        # an output with a history of its own (an argument, a tensor made outside forward) gets a Tensor of
        # its own: the node goes on the new one, the old one keeps its place in the graph
        seq = [_ag.Tensor(o._t, stop_gradient=True, name=o.name) if isinstance(o, _ag.Tensor) and (
            o._node is not None or not o.stop_gradient or any(o is a for a in ins)) else o for o in seq]
        if _ag._grad_enabled() and any(not a.stop_gradient for a in ins):
            _record(cls, ctx, ins, [w for w, a in where if isinstance(a, _ag.Tensor)], seq, diff)
        if single:
            return seq[0]
        return tuple(seq) if isinstance(outs, tuple) else seq


def _record(cls, ctx, ins, where, outs, diff):
    node = _ag._Node()
    node.seq = next(_ag._seq)
    node.op_type = "PyLayer(%s)" % cls.__name__
    node.saved = {}
    node.inputs = [("i%d" % j, t) for j, t in enumerate(ins)]
    node.out_meta = {}
    slots = []
    for j, o in enumerate(outs):
        if not isinstance(o, _ag.Tensor):
            slots.append(None)
            continue
        node.out_meta["o%d" % j] = (o.shape, o.dtype)
        slots.append("o%d" % j)
        if diff[j] and _ag._is_float(o.dtype):
            o.stop_gradient = False
            o._node = node
            o._slot = "o%d" % j
    node.fn = _Backward(cls, ctx, ins, where, slots, node.out_meta)


def _quoted(param):
    return "" if param is None else " ('%s')" % param


def _param_name(forward, where):
    """The name of forward's parameter that took the argument at where (a position after ctx, or a
    keyword); None where the signature cannot say."""
    if isinstance(where, str):
        return where
    try:
        params = list(inspect.signature(forward).parameters.values())[1:]  # after ctx
    except (TypeError, ValueError):
        return None
    for i, p in enumerate(params):
        if p.kind == p.VAR_POSITIONAL:
            return "%s[%d]" % (p.name, where - i)
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and i == where:
            return p.name
    return None


class _Backward:
    """The node's backward: cls.backward on the outputs' gradients."""

    def __init__(self, cls, ctx, ins, where, slots, meta):
        self.cls, self.ctx, self.slots, self.meta = cls, ctx, slots, meta
        self.in_meta = [(t.shape, t.dtype, w) for t, w in zip(ins, where)]

    def __call__(self, env, retain_graph):
        name = self.cls.__name__
        grads = []
        for s in self.slots:
            if s is None:   # forward returned a non-Tensor here: backward gets nothing for it (Paddle's rule)
                continue
            g = env.get(s + "@GRAD")
            if g is None and self.ctx.materialize_grads:
                shape, dtype = self.meta[s]
                g = _ag._zeros_raw(shape, dtype)
            grads.append(None if g is None else _ag.Tensor(g, stop_gradient=True))
        with _ag.no_grad():
            got = self.cls.backward(self.ctx, *grads)
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        if len(got) != len(self.in_meta):
            raise _core.InvalidArgumentError(
                "PyLayer %s: backward returned %d gradient(s); forward took %d Tensor argument(s), and backward "
                "must return one gradient (or None) for each, in order" % (name, len(got), len(self.in_meta)))
        out = {}
        for j, (g, (shape, dtype, where)) in enumerate(zip(got, self.in_meta)):
            if g is None:
                continue
            if not isinstance(g, _ag.Tensor):
                raise _core.InvalidArgumentError("PyLayer %s: backward's gradient %d is a %s, not a Tensor" % (
                    name, j, type(g).__name__))
            if g.shape != shape or g.dtype != dtype:
                raise _core.InvalidArgumentError(
                    "PyLayer %s: backward's gradient %d is %s %s; Tensor argument %d%s of forward is %s %s" % (
                        name, j, g.dtype, g.shape, j, _quoted(_param_name(self.cls.forward, where)), dtype, shape))
            out["i%d@GRAD" % j] = g._t
        if not retain_graph:
            self.ctx = None
        return out


def backward(tensors, grad_tensors=None, retain_graph=False):
    """Runs backward() from each of tensors in turn (Paddle's
    paddle.autograd.backward), the gradients accumulating into the leaves;
    grad_tensors: None, or one gradient (or None) per tensor."""
    tensors = list(tensors) if isinstance(tensors, (tuple, list)) else [tensors]
    if grad_tensors is None:
        grad_tensors = [None] * len(tensors)
    grad_tensors = list(grad_tensors) if isinstance(grad_tensors, (tuple, list)) else [grad_tensors]
    if len(grad_tensors) != len(tensors):
        raise _core.InvalidArgumentError("pe.autograd.backward: %d tensor(s) and %d grad_tensor(s)" % (
            len(tensors), len(grad_tensors)))
    for i, (t, g) in enumerate(zip(tensors, grad_tensors)):
        # every pass but the last keeps the graph: the tensors may share nodes
        _ag.backward(t, g, retain_graph=retain_graph or i < len(tensors) - 1)
