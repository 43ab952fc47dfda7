"""pe.static.append_backward / gradients — autodiff by the C pass (passes/backward.c).

The program is handed to pe_append_backward / pe_gradients as a fresh C
copy; the transformed program is merged back into the Python one, whose
Variable objects (the loss, the parameters) stay valid.
"""
from .. import _core
from ..framework import Variable, _var_name

__all__ = ["append_backward", "gradients"]


def _names(vs, what):
    if vs is None:
        return None
    if isinstance(vs, (Variable, str)):
        vs = [vs]
    return [_var_name(v) for v in vs]


def append_backward(loss, parameter_list=None, no_grad_set=None, callbacks=None, checkpoints=None,
                    distop_context=None):
    """Appends the gradient ops of loss to its program; returns [(param, grad)]
    Variables for every parameter the loss depends on."""
    if not isinstance(loss, Variable):
        raise TypeError("append_backward: loss must be a Variable, got %s" % type(loss).__name__)
    if callbacks or checkpoints:
        raise _core.UnsupportedError("append_backward: callbacks and checkpoints (recompute) are not supported")
    prog = loss.block.program
    c = prog._fresh_core()
    pairs = _core.append_backward(c, loss.name, _names(parameter_list, "parameter_list"),
                                  _names(no_grad_set, "no_grad_set"))
    prog._load_json(c.to_json())
    block = prog.global_block()
    return [(block.var(p), block.var(g)) for p, g in pairs]


def gradients(targets, inputs, target_gradients=None, no_grad_set=None):
    """d(sum of targets)/d(inputs) (Paddle's static.gradients): a list with one
    gradient Variable per input, None where an input does not affect the
    targets (or is in no_grad_set). target_gradients: the gradient of each
    target (a Variable of its dtype and shape, or None for ones); several
    targets have their gradients summed."""
    targets = [targets] if isinstance(targets, Variable) else list(targets)
    inputs_l = [inputs] if isinstance(inputs, Variable) else list(inputs)
    if not targets:
        raise _core.InvalidArgumentError("gradients: targets is empty")
    for t in targets:
        if not isinstance(t, Variable):
            raise TypeError("gradients: targets must be Variables, got %s" % type(t).__name__)
    seeds = None
    if target_gradients is not None:
        tg = [target_gradients] if isinstance(target_gradients, Variable) else list(target_gradients)
        if len(tg) != len(targets):
            raise ValueError("gradients: target_gradients has %d entries for %d targets" % (len(tg), len(targets)))
        for g in tg:
            if g is not None and not isinstance(g, Variable):
                raise TypeError("gradients: target_gradients entries must be Variables or None, got %s"
                                % type(g).__name__)
        seeds = [None if g is None else g.name for g in tg]
    nograd = None
    if no_grad_set:
        nograd = [_var_name(v) for v in no_grad_set]
    prog = targets[0].block.program
    c = prog._fresh_core()
    grads = _core.gradients(c, [t.name for t in targets], [_var_name(v) for v in inputs_l], target_grads=seeds,
                            no_grad=nograd)
    prog._load_json(c.to_json())
    block = prog.global_block()
    return [block.var(g) if g is not None else None for g in grads]
