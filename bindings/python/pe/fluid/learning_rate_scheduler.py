"""fluid.layers' learning-rate schedules (Paddle 1.x learning_rate_scheduler.py).

Each builds, in the main program, ops that compute the learning rate from
the global step counter and returns a persistable [1] float32 Variable the
optimizers take as learning_rate. As in Paddle: one int64 counter per
program, @LR_DECAY_COUNTER@ (persistable, started at begin - 1 by the
startup program), incremented by an `increment` op at the head of the main
block, so the first run sees step = begin (0; noam_decay: 1). Every op a
schedule appends carries op_role = LRSched, which the parameter-server
transpiler moves into the pservers' lr-decay block.

Only registered ops: Paddle's control-flow Switch (piecewise_decay,
linear_lr_warmup, polynomial_decay's cycle) is a chain of `where` selects;
cosine_decay's cos (no cos op) is a gather from a table of cos(pi * e /
epochs) for e mod 2 * epochs, exact because the epoch is an integer.
"""
import contextlib
import math
import numbers

import numpy as np

from .. import _core
from .. import tensor as _t
from ..framework import DTYPE_ENUM, OpRole, Variable, default_main_program, default_startup_program
from ..utils import unique_name

__all__ = ["exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay", "piecewise_decay",
           "noam_decay", "cosine_decay", "linear_lr_warmup"]

COUNTER = "@LR_DECAY_COUNTER@"


@contextlib.contextmanager
def _lr_schedule_guard():
    """Marks every op appended (or inserted) in the main block meanwhile op_role = LRSched."""
    block = default_main_program().global_block()
    before = {id(op) for op in block.ops}
    yield
    for op in block.ops:
        if id(op) not in before:
            op._set_attr("op_role", OpRole.LRSched)


def _number(fn, name, v, positive=False, nonneg=False):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
        raise _core.InvalidArgumentError("fluid.layers.%s: %s must be a finite number, got %r" % (fn, name, v))
    if positive and not v > 0:
        raise _core.InvalidArgumentError("fluid.layers.%s: %s must be > 0, got %r" % (fn, name, v))
    if nonneg and v < 0:
        raise _core.InvalidArgumentError("fluid.layers.%s: %s must be >= 0, got %r" % (fn, name, v))
    return float(v)


def _lr_number(fn, v):
    """learning_rate: a number, or (linear_lr_warmup) a float [1] Variable such as another schedule."""
    if isinstance(v, Variable):
        if v.dtype not in ("float32", "float64") or [d for d in v.shape] not in ([1], []):
            raise _core.InvalidArgumentError("fluid.layers.%s: learning_rate Variable %s must be float [1], got %s %s"
                                             % (fn, v.name, v.dtype, list(v.shape)))
        return v
    return _number(fn, "learning_rate", v)


def _decay_step_counter(begin=0):
    """The global step as a float32 [1] var: @LR_DECAY_COUNTER@ (int64, one per
    program, incremented at the head of the main block), cast."""
    main = default_main_program()
    block = main.global_block()
    if not block.has_var(COUNTER):
        block.create_var(name=COUNTER, shape=[1], dtype="int64", persistable=True, stop_gradient=True)
        sblock = default_startup_program().global_block()
        sv = sblock.create_var(name=COUNTER, shape=[1], dtype="int64", persistable=True, stop_gradient=True)
        sblock.append_op(type="fill_constant", outputs={"Out": [sv]},
                         attrs={"shape": [1], "dtype": DTYPE_ENUM["int64"], "value": float(begin - 1)})
        block._prepend_op(type="increment", inputs={"X": [COUNTER]}, outputs={"Out": [COUNTER]},
                          attrs={"step": 1.0, "op_role": OpRole.LRSched})
    step = _t.cast(block.var(COUNTER), "float32")
    step.stop_gradient = True
    return step


def _const(value):
    return _t.fill_constant([1], "float32", float(value))


def _global_lr(value, name="learning_rate"):
    """A persistable float32 [1] var, value in the startup program (Paddle's create_global_var)."""
    vname = unique_name.generate(name)
    v = default_main_program().global_block().create_var(name=vname, shape=[1], dtype="float32", persistable=True,
                                                         stop_gradient=True)
    sblock = default_startup_program().global_block()
    sv = sblock.create_var(name=vname, shape=[1], dtype="float32", persistable=True, stop_gradient=True)
    sblock.append_op(type="fill_constant", outputs={"Out": [sv]},
                     attrs={"shape": [1], "dtype": DTYPE_ENUM["float32"], "value": float(value)})
    return v


def _finish(x):
    """x copied into a persistable learning-rate var (the var the optimizer reads)."""
    lr = _global_lr(0.0)
    _t.assign(x, lr)
    return lr


def _div_res(fn, decay_steps, staircase):
    decay_steps = _number(fn, "decay_steps", decay_steps, positive=True)
    div = _t.scale(_decay_step_counter(), 1.0 / decay_steps)
    return _t.floor(div) if staircase else div


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """lr * decay_rate ** (step / decay_steps) (the exponent floored when staircase)."""
    lr = _lr_only_number("exponential_decay", learning_rate)
    rate = _number("exponential_decay", "decay_rate", decay_rate, positive=True)
    with _lr_schedule_guard():
        div = _div_res("exponential_decay", decay_steps, staircase)
        return _finish(_t.scale(_t.pow(_const(rate), div), lr))


def _lr_only_number(fn, learning_rate):
    if isinstance(learning_rate, Variable):
        raise _core.InvalidArgumentError("fluid.layers.%s: learning_rate must be a number, got Variable %s"
                                         % (fn, learning_rate.name))
    return _number(fn, "learning_rate", learning_rate)


def natural_exp_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """lr * exp(-decay_rate * step / decay_steps) (the ratio floored when staircase)."""
    lr = _lr_only_number("natural_exp_decay", learning_rate)
    rate = _number("natural_exp_decay", "decay_rate", decay_rate)
    with _lr_schedule_guard():
        div = _div_res("natural_exp_decay", decay_steps, staircase)
        return _finish(_t.scale(_t.exp(_t.scale(div, -rate)), lr))


def inverse_time_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """lr / (1 + decay_rate * step / decay_steps) (the ratio floored when staircase)."""
    lr = _lr_only_number("inverse_time_decay", learning_rate)
    rate = _number("inverse_time_decay", "decay_rate", decay_rate, nonneg=True)
    with _lr_schedule_guard():
        div = _div_res("inverse_time_decay", decay_steps, staircase)
        return _finish(_t.divide(_const(lr), _t.scale(div, rate, 1.0)))


def polynomial_decay(learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False):
    """(lr - end) * (1 - step / decay_steps) ** power + end, step capped at
    decay_steps; cycle: decay_steps * max(ceil(step / decay_steps), 1) instead."""
    fn = "polynomial_decay"
    lr = _lr_only_number(fn, learning_rate)
    steps = _number(fn, "decay_steps", decay_steps, positive=True)
    end = _number(fn, "end_learning_rate", end_learning_rate)
    power = _number(fn, "power", power)
    with _lr_schedule_guard():
        step = _decay_step_counter()
        if cycle:
            div = _t.maximum(_t.ceil(_t.scale(step, 1.0 / steps)), _const(1.0))
            frac = _t.divide(step, _t.scale(div, steps))
        else:
            frac = _t.scale(_t.minimum(step, _const(steps)), 1.0 / steps)
        return _finish(_t.scale(_t.pow(_t.scale(frac, -1.0, 1.0), power), lr - end, end))


def _check_values(fn, name, vs):
    if not isinstance(vs, (list, tuple)):
        raise _core.InvalidArgumentError("fluid.layers.%s: %s must be a list, got %r" % (fn, name, vs))
    return [_number(fn, "%s[%d]" % (name, i), v) for i, v in enumerate(vs)]


def piecewise_decay(boundaries, values):
    """values[i] for the first i with step < boundaries[i], else values[-1]."""
    fn = "piecewise_decay"
    b = _check_values(fn, "boundaries", boundaries)
    v = _check_values(fn, "values", values)
    if len(v) != len(b) + 1:
        raise _core.InvalidArgumentError("fluid.layers.piecewise_decay: len(values) must be len(boundaries) + 1, "
                                         "got %d values for %d boundaries" % (len(v), len(b)))
    if any(b[i] >= b[i + 1] for i in range(len(b) - 1)):
        raise _core.InvalidArgumentError("fluid.layers.piecewise_decay: boundaries must increase, got %r"
                                         % (list(boundaries),))
    with _lr_schedule_guard():
        step = _decay_step_counter()
        lr = _const(v[-1])
        for i in reversed(range(len(b))):  # the first boundary the step is below wins
            lr = _t.where(_t.less_than(step, _const(b[i])), _const(v[i]), lr)
        return _finish(lr)


def noam_decay(d_model, warmup_steps, learning_rate=1.0):
    """lr * d_model ** -0.5 * min(step ** -0.5, warmup_steps ** -1.5 * step), step from 1."""
    fn = "noam_decay"
    d = _number(fn, "d_model", d_model, positive=True)
    w = _number(fn, "warmup_steps", warmup_steps, positive=True)
    lr = _lr_only_number(fn, learning_rate)
    with _lr_schedule_guard():
        step = _decay_step_counter(1)
        a = _t.pow(step, -0.5)
        b = _t.scale(step, w ** -1.5)
        return _finish(_t.scale(_t.minimum(a, b), lr * d ** -0.5))


def cosine_decay(learning_rate, step_each_epoch, epochs):
    """lr * 0.5 * (cos(floor(step / step_each_epoch) * pi / epochs) + 1)."""
    fn = "cosine_decay"
    lr = _lr_only_number(fn, learning_rate)
    se = _number(fn, "step_each_epoch", step_each_epoch, positive=True)
    if isinstance(epochs, bool) or not isinstance(epochs, numbers.Integral) or epochs <= 0:
        raise _core.InvalidArgumentError("fluid.layers.cosine_decay: epochs must be a positive int, got %r"
                                         % (epochs,))
    epochs = int(epochs)
    with _lr_schedule_guard():
        epoch = _t.floor(_t.scale(_decay_step_counter(), 1.0 / se))
        # cos(pi * e / epochs) has period 2 * epochs in the integer e: a table lookup
        idx = _t.cast(_t.mod(epoch, _const(2 * epochs)), "int64")
        table = np.array([lr * 0.5 * (math.cos(e * math.pi / epochs) + 1) for e in range(2 * epochs)], "float32")
        return _finish(_t.gather(_t.assign(table), idx))


def linear_lr_warmup(learning_rate, warmup_steps, start_lr, end_lr):
    """start_lr + (end_lr - start_lr) * step / warmup_steps while step <
    warmup_steps, then learning_rate (a number or a schedule's Variable)."""
    fn = "linear_lr_warmup"
    lr = _lr_number(fn, learning_rate)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, numbers.Integral) or warmup_steps <= 0:
        raise _core.InvalidArgumentError("fluid.layers.linear_lr_warmup: warmup_steps must be a positive int, got %r"
                                         % (warmup_steps,))
    start = _number(fn, "start_lr", start_lr)
    end = _number(fn, "end_lr", end_lr)
    with _lr_schedule_guard():
        step = _decay_step_counter()
        warm = _t.scale(step, (end - start) / float(warmup_steps), start)
        after = lr if isinstance(lr, Variable) else _const(lr)
        if after.dtype != "float32":
            after = _t.cast(after, "float32")
        return _finish(_t.where(_t.less_than(step, _const(float(warmup_steps))), warm, after))
