"""pe.optimizer.lr — Paddle 2.x's learning-rate schedulers: Python objects
that an optimizer takes as its learning_rate, in eager mode and in static
programs alike.

    sched = pe.optimizer.lr.StepDecay(learning_rate=0.1, step_size=30, gamma=0.1)
    opt = pe.optimizer.Momentum(learning_rate=sched, momentum=0.9, parameters=model.parameters())
    for epoch in range(90):
        for x, y in loader:
            ...; opt.step(); opt.clear_grad()
        sched.step()                       # once an epoch (or once a step: the user decides)

What a scheduler is: a counter `last_epoch` (-1 before the first step; the
constructor steps once, so a new scheduler is at epoch 0) and the rate at
that count, `last_lr`, which `sched()` returns. `step()` advances the count
by one and recomputes the rate (`get_lr()`, each class's formula of
last_epoch); `step(epoch)` sets the count. `state_dict()` /
`set_state_dict()` save and restore the count and the rate (and the
plateau tracking of ReduceOnPlateau), for resuming.

How an optimizer uses it: eager mode reads `sched()` at every `step()`;
`minimize()` in a static program makes a persistable float32 [1] var for
the rate (initialized by the startup program to `sched()`), records the
scheduler on the main program as `program.lr_scheduler`, and every
executor run of that program (Executor, CompiledProgram, ParallelExecutor:
on every place) writes `sched()` into that var first. Parameter-server
programs (DistributeTranspiler) cannot carry one: their rate lives on the
pservers (use fluid.layers' decay functions there).

The formulas are Paddle 2.x's (and, where PyTorch has the same schedule,
torch.optim.lr_scheduler's: StepLR, MultiStepLR, ExponentialLR,
CosineAnnealingLR, LambdaLR, MultiplicativeLR, OneCycleLR with Paddle's
end_learning_rate, CyclicLR, LinearLR; tests/python/test_lr_scheduler.py
compares them).
"""
import bisect
import math
import warnings

__all__ = ["LRScheduler", "NoamDecay", "PiecewiseDecay", "NaturalExpDecay", "InverseTimeDecay", "PolynomialDecay",
           "LinearWarmup", "ExponentialDecay", "MultiStepDecay", "StepDecay", "LambdaDecay", "MultiplicativeDecay",
           "ReduceOnPlateau", "CosineAnnealingDecay", "OneCycleLR", "CyclicLR", "LinearLR"]


def _number(owner, name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TypeError("%s: %s must be a finite number, got %r" % (owner, name, v))
    return float(v)


def _positive_int(owner, name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError("%s: %s must be a positive int, got %r" % (owner, name, v))
    return v


def _epoch_fn(owner, f):
    if not callable(f):
        raise TypeError("%s: lr_lambda must be a function of the epoch, got %s" % (owner, type(f).__name__))
    return f


def _scalar(owner, v):
    """A metric as a float: a number, or a one-element numpy array or pe Tensor."""
    if hasattr(v, "numpy") and not isinstance(v, (int, float)):
        v = v.numpy()
    if hasattr(v, "size") and hasattr(v, "reshape"):
        if v.size != 1:
            raise ValueError("%s: metrics must hold one value, got shape %s" % (owner, tuple(v.shape)))
        v = v.reshape(-1)[0]
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError("%s: metrics must be a number or a one-element array / Tensor, got %s"
                        % (owner, type(v).__name__)) from None


class LRScheduler:
    """The base: last_epoch, last_lr, step(), __call__(), state_dict(). A
    subclass sets its fields, then calls this __init__ (which steps once),
    and defines get_lr() from self.last_epoch (and self.base_lr)."""

    def __init__(self, learning_rate=0.1, last_epoch=-1, verbose=False):
        name = type(self).__name__
        self.base_lr = _number(name, "learning_rate", learning_rate)
        self.last_lr = self.base_lr
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise ValueError("%s: last_epoch must be an int >= -1, got %r" % (name, last_epoch))
        self.last_epoch = last_epoch
        self.verbose = bool(verbose)
        self.state_keys()
        self.step()

    def __call__(self):
        """The current learning rate."""
        return self.last_lr

    def _advance(self, epoch):
        """last_epoch one further, or epoch (checked); True when it was given."""
        if epoch is None:
            self.last_epoch += 1
            return False
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError("%s.step: epoch must be an int >= 0, got %r" % (type(self).__name__, epoch))
        self.last_epoch = epoch
        return True

    def step(self, epoch=None):
        """Advances last_epoch by one (or sets it to epoch) and recomputes last_lr."""
        closed = getattr(self, "_closed_form", None)
        self.last_lr = closed() if self._advance(epoch) and closed else self.get_lr()
        if self.verbose:
            print("Epoch %d: %s set learning rate to %s." % (self.last_epoch, type(self).__name__, self.last_lr))

    def get_lr(self):
        raise NotImplementedError("%s must define get_lr()" % type(self).__name__)

    def state_keys(self):
        """The attributes state_dict() saves (override to add some)."""
        self.keys = ["last_epoch", "last_lr"]

    def state_dict(self):
        """{attribute: value} of the keys (last_epoch, last_lr, ...)."""
        self.state_keys()
        return {k: getattr(self, k) for k in self.keys}

    def set_state_dict(self, state_dict):
        """Restores what state_dict() returned; keys it lacks stay as they are."""
        if not isinstance(state_dict, dict):
            raise TypeError("%s.set_state_dict: expected a dict, got %s" % (type(self).__name__,
                                                                            type(state_dict).__name__))
        self.state_keys()
        for k in self.keys:
            if k in state_dict:
                setattr(self, k, state_dict[k])
        unknown = sorted(set(state_dict) - set(self.keys))
        if unknown:
            warnings.warn("%s.set_state_dict: keys %s are not this scheduler's (it saves %s); left out"
                          % (type(self).__name__, unknown, self.keys))

    set_dict = set_state_dict

    def __repr__(self):
        return "%s(last_epoch=%d, last_lr=%g)" % (type(self).__name__, self.last_epoch, self.last_lr)


class NoamDecay(LRScheduler):
    """lr * d_model^-0.5 * min(epoch^-0.5, epoch * warmup_steps^-1.5) (epoch 0: the first term is 1)."""

    def __init__(self, d_model, warmup_steps, learning_rate=1.0, last_epoch=-1, verbose=False):
        self.d_model = _number("NoamDecay", "d_model", d_model)
        self.warmup_steps = _number("NoamDecay", "warmup_steps", warmup_steps)
        if self.d_model <= 0 or self.warmup_steps <= 0:
            raise ValueError("NoamDecay: d_model and warmup_steps must be > 0, got %r and %r" % (d_model, warmup_steps))
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        a = 1.0 if self.last_epoch == 0 else self.last_epoch ** -0.5
        b = self.warmup_steps ** -1.5 * self.last_epoch
        return self.base_lr * self.d_model ** -0.5 * min(a, b)


class PiecewiseDecay(LRScheduler):
    """values[i] while epoch < boundaries[i] (the first such i), values[-1] after the last boundary."""

    def __init__(self, boundaries, values, last_epoch=-1, verbose=False):
        self.boundaries, self.values = list(boundaries), [_number("PiecewiseDecay", "values", v) for v in values]
        if len(self.values) != len(self.boundaries) + 1:
            raise ValueError("PiecewiseDecay: %d boundaries need %d values, got %d"
                             % (len(self.boundaries), len(self.boundaries) + 1, len(self.values)))
        if any(b2 <= b1 for b1, b2 in zip(self.boundaries, self.boundaries[1:])):
            raise ValueError("PiecewiseDecay: boundaries must increase, got %s" % self.boundaries)
        super().__init__(self.values[0], last_epoch, verbose)

    def get_lr(self):
        return self.values[bisect.bisect_right(self.boundaries, self.last_epoch)]


class NaturalExpDecay(LRScheduler):
    """lr * e^(-gamma * epoch)."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        self.gamma = _number("NaturalExpDecay", "gamma", gamma)
        if self.gamma <= 0:
            raise ValueError("NaturalExpDecay: gamma must be > 0 (the rate decays), got %r" % gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * math.exp(-self.gamma * self.last_epoch)


class InverseTimeDecay(LRScheduler):
    """lr / (1 + gamma * epoch)."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        self.gamma = _number("InverseTimeDecay", "gamma", gamma)
        if self.gamma < 0:
            raise ValueError("InverseTimeDecay: gamma must be >= 0, got %r" % gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr / (1 + self.gamma * self.last_epoch)


class PolynomialDecay(LRScheduler):
    """(lr - end_lr) * (1 - epoch / decay_steps)^power + end_lr, epoch capped at
    decay_steps; cycle=True stretches decay_steps to the next multiple of it past epoch."""

    def __init__(self, learning_rate, decay_steps, end_lr=0.0001, power=1.0, cycle=False, last_epoch=-1,
                 verbose=False):
        self.decay_steps = _positive_int("PolynomialDecay", "decay_steps", decay_steps)
        self.end_lr = _number("PolynomialDecay", "end_lr", end_lr)
        self.power = _number("PolynomialDecay", "power", power)
        if self.power <= 0:
            raise ValueError("PolynomialDecay: power must be > 0, got %r" % power)
        self.cycle = bool(cycle)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        epoch, steps = self.last_epoch, self.decay_steps
        if self.cycle:
            steps = self.decay_steps * max(1, math.ceil(epoch / self.decay_steps))
        else:
            epoch = min(epoch, steps)
        return (self.base_lr - self.end_lr) * (1 - epoch / steps) ** self.power + self.end_lr


class LinearWarmup(LRScheduler):
    """start_lr -> end_lr linearly over warmup_steps, then learning_rate (a
    number, or a scheduler stepped from 0 from then on)."""

    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr, last_epoch=-1, verbose=False):
        if not isinstance(learning_rate, LRScheduler):
            _number("LinearWarmup", "learning_rate", learning_rate)
        self.learning_rate = learning_rate
        self.warmup_steps = _positive_int("LinearWarmup", "warmup_steps", warmup_steps)
        self.start_lr = _number("LinearWarmup", "start_lr", start_lr)
        self.end_lr = _number("LinearWarmup", "end_lr", end_lr)
        super().__init__(start_lr, last_epoch, verbose)

    def state_keys(self):
        self.keys = ["last_epoch", "last_lr"]
        if isinstance(self.learning_rate, LRScheduler):
            self.keys.append("LinearWarmup_LR")

    @property
    def LinearWarmup_LR(self):  # noqa: N802 (Paddle's state key)
        return self.learning_rate.state_dict()

    @LinearWarmup_LR.setter
    def LinearWarmup_LR(self, state):  # noqa: N802
        self.learning_rate.set_state_dict(state)

    def get_lr(self):
        if self.last_epoch < self.warmup_steps:
            return (self.end_lr - self.start_lr) * self.last_epoch / self.warmup_steps + self.start_lr
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return float(self.learning_rate)


class ExponentialDecay(LRScheduler):
    """lr * gamma^epoch."""

    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        self.gamma = _number("ExponentialDecay", "gamma", gamma)
        if not 0 < self.gamma < 1:
            raise ValueError("ExponentialDecay: gamma must be in (0, 1), got %r" % gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.gamma ** self.last_epoch


class MultiStepDecay(LRScheduler):
    """lr * gamma^(milestones passed): the rate drops by gamma at each milestone epoch."""

    def __init__(self, learning_rate, milestones, gamma=0.1, last_epoch=-1, verbose=False):
        if not isinstance(milestones, (list, tuple)) or not milestones:
            raise TypeError("MultiStepDecay: milestones must be a non-empty list of ints, got %r" % (milestones,))
        if any(isinstance(m, bool) or not isinstance(m, int) for m in milestones) or \
                any(b <= a for a, b in zip(milestones, milestones[1:])):
            raise ValueError("MultiStepDecay: milestones must be increasing ints, got %r" % (milestones,))
        self.milestones = list(milestones)
        self.gamma = _number("MultiStepDecay", "gamma", gamma)
        if self.gamma >= 1.0:
            raise ValueError("MultiStepDecay: gamma must be < 1.0, got %r" % gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.gamma ** bisect.bisect_right(self.milestones, self.last_epoch)


class StepDecay(LRScheduler):
    """lr * gamma^(epoch // step_size)."""

    def __init__(self, learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        self.step_size = _positive_int("StepDecay", "step_size", step_size)
        self.gamma = _number("StepDecay", "gamma", gamma)
        if self.gamma >= 1.0:
            raise ValueError("StepDecay: gamma must be < 1.0, got %r" % gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class LambdaDecay(LRScheduler):
    """lr * lr_lambda(epoch)."""

    def __init__(self, learning_rate, lr_lambda, last_epoch=-1, verbose=False):
        self.lr_lambda = _epoch_fn("LambdaDecay", lr_lambda)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.lr_lambda(self.last_epoch)


class MultiplicativeDecay(LRScheduler):
    """The last rate times lr_lambda(epoch) at each step (epoch 0: lr)."""

    def __init__(self, learning_rate, lr_lambda, last_epoch=-1, verbose=False):
        self.lr_lambda = _epoch_fn("MultiplicativeDecay", lr_lambda)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch <= 0:
            return self.base_lr
        return self.last_lr * self.lr_lambda(self.last_epoch)

    def _closed_form(self):
        lr = self.base_lr
        for e in range(1, self.last_epoch + 1):
            lr *= self.lr_lambda(e)
        return lr


class CosineAnnealingDecay(LRScheduler):
    """eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, computed
    step by step from the last rate as torch's CosineAnnealingLR (so a rate
    changed from outside is followed), in closed form for step(epoch)."""

    def __init__(self, learning_rate, T_max, eta_min=0, last_epoch=-1, verbose=False):  # noqa: N803
        self.T_max = _positive_int("CosineAnnealingDecay", "T_max", T_max)
        self.eta_min = _number("CosineAnnealingDecay", "eta_min", eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        e, t, lo = self.last_epoch, self.T_max, self.eta_min
        if e == 0:
            return self.base_lr
        if (e - 1 - t) % (2 * t) == 0:
            return self.last_lr + (self.base_lr - lo) * (1 - math.cos(math.pi / t)) / 2
        return (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t)) * (self.last_lr - lo) + lo

    def _closed_form(self):
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2


class LinearLR(LRScheduler):
    """lr * (start_factor + (end_factor - start_factor) * min(epoch, total_steps) / total_steps)."""

    def __init__(self, learning_rate, total_steps, start_factor=1.0 / 3, end_factor=1.0, last_epoch=-1,
                 verbose=False):
        self.total_steps = _positive_int("LinearLR", "total_steps", total_steps)
        self.start_factor = _number("LinearLR", "start_factor", start_factor)
        self.end_factor = _number("LinearLR", "end_factor", end_factor)
        if not 0 < self.start_factor <= 1 or not 0 <= self.end_factor <= 1:
            raise ValueError("LinearLR: need 0 < start_factor <= 1 and 0 <= end_factor <= 1, got %r and %r"
                             % (start_factor, end_factor))
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        f = min(self.last_epoch, self.total_steps) / self.total_steps
        return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * f)


class ReduceOnPlateau(LRScheduler):
    """Lowers the rate by `factor` when a metric has not improved for
    `patience` steps (then waits `cooldown` steps); step(metrics) each epoch."""

    def __init__(self, learning_rate, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0, epsilon=1e-8, verbose=False):
        if mode not in ("min", "max"):
            raise ValueError("ReduceOnPlateau: mode must be 'min' or 'max', got %r" % (mode,))
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("ReduceOnPlateau: threshold_mode must be 'rel' or 'abs', got %r" % (threshold_mode,))
        self.factor = _number("ReduceOnPlateau", "factor", factor)
        if not 0 <= self.factor < 1:
            raise ValueError("ReduceOnPlateau: factor must be in [0, 1), got %r" % factor)
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError("ReduceOnPlateau: patience must be an int >= 0, got %r" % (patience,))
        if isinstance(cooldown, bool) or not isinstance(cooldown, int) or cooldown < 0:
            raise ValueError("ReduceOnPlateau: cooldown must be an int >= 0, got %r" % (cooldown,))
        self.mode, self.threshold_mode, self.patience, self.cooldown = mode, threshold_mode, patience, cooldown
        self.threshold = _number("ReduceOnPlateau", "threshold", threshold)
        self.min_lr = _number("ReduceOnPlateau", "min_lr", min_lr)
        self.epsilon = _number("ReduceOnPlateau", "epsilon", epsilon)
        self.best, self.num_bad_epochs, self.cooldown_counter = None, 0, 0
        self.base_lr = self.last_lr = _number("ReduceOnPlateau", "learning_rate", learning_rate)
        self.last_epoch, self.verbose = 0, bool(verbose)
        self.state_keys()

    def state_keys(self):
        self.keys = ["cooldown_counter", "best", "num_bad_epochs", "last_epoch", "last_lr"]

    def _better(self, current):
        if self.best is None:
            return True
        if self.threshold_mode == "rel":
            margin = abs(self.best) * self.threshold
        else:
            margin = self.threshold
        return current < self.best - margin if self.mode == "min" else current > self.best + margin

    def step(self, metrics, epoch=None):
        """One epoch's metric (a number or a one-element array / Tensor)."""
        current = _scalar("ReduceOnPlateau.step", metrics)
        self._advance(epoch)
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            return
        if self._better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.num_bad_epochs > self.patience:
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
            new_lr = max(self.last_lr * self.factor, self.min_lr)
            if self.last_lr - new_lr > self.epsilon:
                self.last_lr = new_lr
                if self.verbose:
                    print("Epoch %d: ReduceOnPlateau set learning rate to %s." % (self.last_epoch, self.last_lr))

    def get_lr(self):
        return self.last_lr


class OneCycleLR(LRScheduler):
    """The 1cycle policy: max_learning_rate / divide_factor up to
    max_learning_rate over phase_pct of total_steps, then down to
    end_learning_rate (three_phase: down to the initial rate, then to
    end_learning_rate); cosine or linear between the phase ends."""

    def __init__(self, max_learning_rate, total_steps, divide_factor=25.0, end_learning_rate=0.0001, phase_pct=0.3,
                 anneal_strategy="cos", three_phase=False, last_epoch=-1, verbose=False):
        max_lr = _number("OneCycleLR", "max_learning_rate", max_learning_rate)
        self.total_steps = _positive_int("OneCycleLR", "total_steps", total_steps)
        div = _number("OneCycleLR", "divide_factor", divide_factor)
        end_lr = _number("OneCycleLR", "end_learning_rate", end_learning_rate)
        pct = _number("OneCycleLR", "phase_pct", phase_pct)
        if not 0 <= pct <= 1 or div <= 0:
            raise ValueError("OneCycleLR: need 0 <= phase_pct <= 1 and divide_factor > 0, got %r and %r"
                             % (phase_pct, divide_factor))
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("OneCycleLR: anneal_strategy must be 'cos' or 'linear', got %r" % (anneal_strategy,))
        self.anneal = self._cos if anneal_strategy == "cos" else self._linear
        initial = max_lr / div
        up = float(pct * self.total_steps) - 1
        # per phase: (its last step, its start rate, its end rate)
        if three_phase:
            self.phases = [(up, initial, max_lr), (2 * up, max_lr, initial), (self.total_steps - 1, initial, end_lr)]
        else:
            self.phases = [(up, initial, max_lr), (self.total_steps - 1, max_lr, end_lr)]
        super().__init__(initial, last_epoch, verbose)

    @staticmethod
    def _cos(start, end, pct):
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    @staticmethod
    def _linear(start, end, pct):
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError("OneCycleLR: stepped %d times, beyond total_steps=%d" % (step, self.total_steps))
        start_step = 0.0
        for i, (end_step, start, end) in enumerate(self.phases):
            if step <= end_step or i == len(self.phases) - 1:  # the last phase returns
                span = end_step - start_step
                return self.anneal(start, end, (step - start_step) / span if span else 1.0)
            start_step = end_step


class CyclicLR(LRScheduler):
    """Cycles between base_learning_rate and max_learning_rate: up over
    step_size_up steps, down over step_size_down (default: the same); the
    amplitude scaled per cycle (triangular: 1; triangular2: halved each
    cycle; exp_range: exp_gamma^iteration) or by scale_fn(cycle or iteration)."""

    def __init__(self, base_learning_rate, max_learning_rate, step_size_up, step_size_down=None, mode="triangular",
                 exp_gamma=1.0, scale_fn=None, scale_mode="cycle", last_epoch=-1, verbose=False):
        self.max_lr = _number("CyclicLR", "max_learning_rate", max_learning_rate)
        up = _positive_int("CyclicLR", "step_size_up", step_size_up)
        down = up if step_size_down is None else _positive_int("CyclicLR", "step_size_down", step_size_down)
        self.cycle_size = up + down
        self.step_up_ratio = up / self.cycle_size
        if scale_fn is None:
            if mode not in ("triangular", "triangular2", "exp_range"):
                raise ValueError("CyclicLR: mode must be 'triangular', 'triangular2' or 'exp_range', got %r" % (mode,))
            self.exp_gamma = _number("CyclicLR", "exp_gamma", exp_gamma)
            if mode == "triangular":
                self.scale_fn, self.scale_mode = (lambda x: 1.0), "cycle"
            elif mode == "triangular2":
                self.scale_fn, self.scale_mode = (lambda x: 1 / (2.0 ** (x - 1))), "cycle"
            else:
                self.scale_fn, self.scale_mode = (lambda x: self.exp_gamma ** x), "iterations"
        else:
            if not callable(scale_fn):
                raise TypeError("CyclicLR: scale_fn must be a function, got %s" % type(scale_fn).__name__)
            if scale_mode not in ("cycle", "iterations"):
                raise ValueError("CyclicLR: scale_mode must be 'cycle' or 'iterations', got %r" % (scale_mode,))
            self.scale_fn, self.scale_mode = scale_fn, scale_mode
        super().__init__(base_learning_rate, last_epoch, verbose)

    def get_lr(self):
        it = self.last_epoch
        cycle = 1 + it // self.cycle_size
        x = it / self.cycle_size - cycle + 1  # where in this cycle, [0, 1)
        scale = x / self.step_up_ratio if x <= self.step_up_ratio else (1 - x) / (1 - self.step_up_ratio)
        height = (self.max_lr - self.base_lr) * scale
        return self.base_lr + height * self.scale_fn(cycle if self.scale_mode == "cycle" else it)
