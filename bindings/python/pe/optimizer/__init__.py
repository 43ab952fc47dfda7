"""pe.optimizer — SGD, Momentum, Adam, Adagrad, RMSProp, Adamax, AdamW, Lamb with Paddle's
signatures; minimize() runs the C pass.

minimize(loss) = Paddle's Optimizer.minimize: append_backward, gradient
clipping (ClipGradByGlobalNorm, ClipGradByNorm or ClipGradByValue), weight
decay (weight_decay= float or L2Decay or L1Decay; a ParamAttr.regularizer
replaces it for its parameter), per-parameter learning-rate
multipliers (ParamAttr.learning_rate), then one optimizer op per parameter.
All of it is pe_optimizer_minimize (passes/optimizer.c) on fresh C copies
of the main and startup programs (accumulators and the learning rate are
initialized by the startup program), merged back into the Python programs.
"""
import math

from .. import _core
from ..eager import optimizer as _eager_opt
from ..utils import unique_name as _unique_name
from ..framework import Parameter, Variable, _var_name, default_startup_program
from ..initializer import Constant
from ..nn.clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue
from ..regularizer import L1Decay, L2Decay
from . import lr  # noqa: F401  (pe.optimizer.lr: the schedulers)
from .lr import LRScheduler

__all__ = ["Optimizer", "SGD", "Momentum", "Adam", "Adagrad", "RMSProp", "Adamax", "AdamW", "Lamb", "lr"]


class Optimizer:
    _kind = None

    def __init__(self, learning_rate=0.001, parameters=None, weight_decay=None, grad_clip=None, name=None):
        self._lr_sched = None
        if isinstance(learning_rate, Variable):
            self._lr_var = learning_rate.name
            self._lr = 0.0
        elif isinstance(learning_rate, LRScheduler):
            self._lr_var = None
            self._lr_sched = learning_rate
            self._lr = float(learning_rate())
        elif isinstance(learning_rate, (int, float)) and not isinstance(learning_rate, bool):
            self._lr_var = None
            self._lr = self._finite_lr(learning_rate)
        else:
            raise TypeError("learning_rate must be a float, a pe.optimizer.lr.LRScheduler or a persistable [1] "
                            "Variable, got %s" % type(learning_rate).__name__)
        self._parameter_list = list(parameters) if parameters is not None else None
        self._eager_params = None
        self._accumulators, self._lr_t, self._pending_state = {}, None, {}
        if _eager_opt.in_eager(self._parameter_list):
            self._eager_params = _eager_opt.check_params(self, self._parameter_list)
        self._l1_decay = 0.0
        if weight_decay is None:
            self._weight_decay = 0.0
        elif isinstance(weight_decay, L2Decay):
            self._weight_decay = weight_decay.coeff
        elif isinstance(weight_decay, L1Decay):
            self._weight_decay, self._l1_decay = 0.0, weight_decay.coeff
        elif isinstance(weight_decay, (int, float)):
            self._weight_decay = float(weight_decay)
        else:
            raise _core.UnsupportedError("weight_decay must be a float, pe.regularizer.L2Decay or L1Decay, got %s"
                                         % type(weight_decay).__name__)
        if grad_clip is not None and not isinstance(grad_clip, (ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue)):
            raise _core.UnsupportedError("grad_clip must be pe.nn.ClipGradByGlobalNorm, ClipGradByNorm or "
                                         "ClipGradByValue, got %s" % type(grad_clip).__name__)
        if self._eager_params is not None and (self._l1_decay or isinstance(grad_clip, (ClipGradByNorm,
                                                                                       ClipGradByValue))):
            raise _core.UnsupportedError("%s: in eager mode the optimizer applies ClipGradByGlobalNorm and L2 decay "
                                         "only; %s is for static programs (minimize)" % (
                                             type(self).__name__, "L1Decay" if self._l1_decay else
                                             type(grad_clip).__name__))
        self._grad_clip = grad_clip
        self._name = name

    def _finite_lr(self, v):
        """v as a float; a NaN or infinite learning rate is refused here, as minimize refuses it."""
        return _float("%s: learning_rate" % type(self).__name__, v)

    def get_lr(self):
        """The learning rate the next update uses (a scheduler's current value)."""
        return float(self._lr_sched()) if self._lr_sched is not None else self._lr

    def _extra(self, program):
        return {}

    def _param_configs(self, program):
        cfg = []
        for p in program.global_block().all_parameters():
            if not isinstance(p, Parameter):
                continue
            lr_mult = float(p.optimize_attr.get("learning_rate", 1.0))
            l2, l1 = -1.0, 0.0  # the optimizer's decay
            if isinstance(p.regularizer, L2Decay):
                l2 = p.regularizer.coeff
            elif isinstance(p.regularizer, L1Decay):  # replaces the optimizer's (both kinds), as Paddle
                l2, l1 = 0.0, p.regularizer.coeff
            elif p.regularizer is not None:
                raise _core.UnsupportedError("parameter %s: regularizer %r is not supported (L2Decay or L1Decay)"
                                             % (p.name, p.regularizer))
            if lr_mult != 1.0 or l2 >= 0:
                cfg.append((p.name, lr_mult, l2, l1))
        return cfg

    def _clip_args(self, program):
        # fluid.clip.set_gradient_clip's program-wide clip, when the optimizer has none (as Paddle 1.x)
        c = self._grad_clip if self._grad_clip is not None else getattr(program, "_gradient_clip", None)
        if isinstance(c, ClipGradByGlobalNorm):
            return {"clip_global_norm": c.clip_norm}
        if isinstance(c, ClipGradByNorm):
            return {"clip_norm": c.clip_norm}
        if isinstance(c, ClipGradByValue):
            return {"clip_min": c.min, "clip_max": c.max}
        return {}

    def minimize(self, loss, startup_program=None, parameters=None, no_grad_set=None):
        """Appends backward, clipping, decay and update ops for loss; returns
        (optimize ops, [(param, grad)]). Eager mode: step() with the .grad
        that loss.backward() left (Paddle's dygraph minimize)."""
        if self._eager_params is not None:
            self.step()
            return [], [(p, p.grad) for p in self._eager_params if p.grad is not None]
        if not isinstance(loss, Variable):
            raise TypeError("minimize: loss must be a Variable, got %s" % type(loss).__name__)
        main = loss.block.program
        startup = startup_program if startup_program is not None else default_startup_program()
        params = parameters if parameters is not None else self._parameter_list
        pnames = None
        if params is not None:
            pnames = [_var_name(p) for p in params]
            block = main.global_block()
            pnames = [n for n in pnames if not block.has_var(n) or not block.var(n).stop_gradient]
        nograd = [_var_name(v) for v in no_grad_set] if no_grad_set else None
        lr_var = self._lr_var if self._lr_sched is None else self._sched_var(main, startup)
        n_before = len(main.global_block().ops)
        cm, cs = main._fresh_core(), startup._fresh_core()
        pairs = _core.minimize(
            cm, cs, loss.name, kind=self._kind, learning_rate=self._lr, lr_var=lr_var,
            weight_decay=self._weight_decay, l1_decay=self._l1_decay, params=pnames, no_grad=nograd,
            param_configs=self._param_configs(main), **self._clip_args(main), **self._extra(main))
        main._load_json(cm.to_json())
        startup._load_json(cs.to_json())
        block = main.global_block()
        ops = [op for op in block.ops[n_before:] if int(op.attr("op_role") or 0) & 2]
        return ops, [(block.var(p), block.var(g)) for p, g in pairs]

    def _sched_var(self, main, startup):
        """The learning-rate scheduler's var in main (persistable float32 [1],
        the startup program sets it to the scheduler's value): every run of
        main writes sched() into it first (pe.static's executors). One per
        program, as Paddle's program.lr_scheduler."""
        old = getattr(main, "lr_scheduler", None)
        if old is not None and old is not self._lr_sched:
            raise _core.InvalidArgumentError(
                "minimize: this program already has a learning-rate scheduler (%s) from another optimizer; "
                "a program takes one (give both optimizers the same scheduler object)" % type(old).__name__)
        name = getattr(main, "_lr_sched_var", None)
        if name is None:
            name = _unique_name.generate("learning_rate")
            for prog in (main, startup):
                prog.global_block().create_var(name=name, shape=[1], dtype="float32", persistable=True,
                                               stop_gradient=True)
            Constant(float(self._lr_sched()))(startup.global_block().var(name), startup)
            main.lr_scheduler, main._lr_sched_var = self._lr_sched, name
        return name

    def step(self):
        """Eager mode: one update of every parameter with a .grad, by the
        optimizer's op (pe/eager/optimizer.py), at the scheduler's current
        rate when learning_rate is one."""
        if self._eager_params is None:
            raise _core.UnsupportedError("Optimizer.step is eager-only (an optimizer made with eager parameters); "
                                         "in static mode use minimize(loss) and an executor")
        if self._lr_sched is not None:
            self._lr = float(self._lr_sched())
        _eager_opt.step(self)

    def clear_grad(self, set_to_zero=True):
        """Eager mode: drops every parameter's .grad."""
        if self._eager_params is None:
            raise _core.UnsupportedError("Optimizer.clear_grad is eager-only (an optimizer made with eager "
                                         "parameters)")
        for p in self._eager_params:
            p.clear_grad()

    clear_gradients = clear_grad

    def state_dict(self):
        """Eager mode: the accumulators ({name: tensor}) for pe.save, and
        with a scheduler its state under "LR_Scheduler" (as Paddle's)."""
        if self._eager_params is None:
            raise _core.UnsupportedError("Optimizer.state_dict is eager-only; a static program's optimizer state "
                                         "is in its persistables (pe.static.save)")
        out = _eager_opt.state_dict(self)
        if self._lr_sched is not None:
            out["LR_Scheduler"] = self._lr_sched.state_dict()
        return out

    def set_state_dict(self, state_dict):
        """Eager mode: accumulator values by name (pe.load's dict); an
        "LR_Scheduler" entry goes to the scheduler (an optimizer without one
        refuses it: the rate it would restore has nowhere to go)."""
        if self._eager_params is None:
            raise _core.UnsupportedError("Optimizer.set_state_dict is eager-only; a static program's optimizer "
                                         "state is in its persistables (pe.static.load)")
        if not isinstance(state_dict, dict):
            raise TypeError("set_state_dict: state must be a dict, got %s" % type(state_dict).__name__)
        sched = state_dict.get("LR_Scheduler")
        if sched is not None and self._lr_sched is None:
            raise _core.InvalidArgumentError("%s.set_state_dict: the state holds an LR_Scheduler but this optimizer's "
                                             "learning rate is a number; give it the scheduler it was saved with"
                                             % type(self).__name__)
        _eager_opt.set_state_dict(self, {k: v for k, v in state_dict.items() if k != "LR_Scheduler"})
        if sched is not None:
            self._lr_sched.set_state_dict(sched)

    def _lr_tensor(self):
        return _eager_opt.lr_tensor(self)

    def set_lr(self, value):
        """Sets a float learning rate (not with a scheduler: step the scheduler instead)."""
        if self._lr_sched is not None:
            raise RuntimeError("%s.set_lr: the learning rate is a %s; set it through the scheduler"
                               % (type(self).__name__, type(self._lr_sched).__name__))
        self._lr = self._finite_lr(value)


class SGD(Optimizer):
    """param -= lr * grad."""
    _kind = "sgd"

    def __init__(self, learning_rate=0.001, parameters=None, weight_decay=None, grad_clip=None,
                 multi_precision=False, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)


class Momentum(Optimizer):
    """velocity = momentum * velocity + grad; param -= lr * velocity (Nesterov optional)."""
    _kind = "momentum"

    def __init__(self, learning_rate=0.001, momentum=0.9, parameters=None, use_nesterov=False, weight_decay=None,
                 grad_clip=None, multi_precision=False, rescale_grad=1.0, use_multi_tensor=False, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        if rescale_grad != 1.0:
            raise _core.UnsupportedError("Momentum: rescale_grad is not supported")
        self._momentum = _float("Momentum: momentum", momentum)
        self._use_nesterov = bool(use_nesterov)

    def _extra(self, program):
        return {"momentum": self._momentum, "use_nesterov": self._use_nesterov}


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias-corrected moments."""
    _kind = "adam"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-08, parameters=None,
                 weight_decay=None, grad_clip=None, lazy_mode=False, multi_precision=False, use_multi_tensor=False,
                 name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        if lazy_mode:
            raise _core.UnsupportedError("%s: lazy_mode=True (Paddle updates only the rows of a sparse table that "
                                         "the batch looked up) is not supported: PE trains sparse tables with a "
                                         "dense gradient, lazy_mode=False's update" % type(self).__name__)
        n = type(self).__name__
        self._beta1, self._beta2 = _float(n + ": beta1", beta1, "beta"), _float(n + ": beta2", beta2, "beta")
        self._epsilon = _float(n + ": epsilon", epsilon, "eps")

    def _extra(self, program):
        return {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon}


_RULES = {"finite": (math.isfinite, "it must be finite"),
          "eps": (lambda f: math.isfinite(f) and f >= 0, "it must be finite and >= 0"),
          "beta": (lambda f: 0 <= f < 1, "it must be in [0, 1)")}


def _float(name, v, rule="finite"):
    """A hyperparameter as a float, checked when the optimizer is made (the
    update ops check the same at their first step): rule finite, eps (finite,
    >= 0) or beta (in [0, 1))."""
    if isinstance(v, Variable):
        raise _core.UnsupportedError("%s must be a float, not a Variable" % name)
    f = float(v)
    if not _RULES[rule][0](f):
        raise _core.InvalidArgumentError("%s = %r; %s" % (name, f, _RULES[rule][1]))
    return f


class Adagrad(Optimizer):
    """moment += grad^2; param -= lr * grad / (sqrt(moment) + epsilon)."""
    _kind = "adagrad"

    def __init__(self, learning_rate, epsilon=1e-06, parameters=None, weight_decay=None, grad_clip=None, name=None,
                 initial_accumulator_value=0.0):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        self._epsilon = _float("Adagrad: epsilon", epsilon, "eps")
        self._initial = _float("Adagrad: initial_accumulator_value", initial_accumulator_value)

    def _extra(self, program):
        return {"epsilon": self._epsilon, "initial_accumulator_value": self._initial}


class RMSProp(Optimizer):
    """mean_square = rho * ms + (1 - rho) * grad^2 (centered: minus mean_grad^2);
    moment = momentum * moment + lr * grad / sqrt(ms + epsilon); param -= moment."""
    _kind = "rmsprop"

    def __init__(self, learning_rate, rho=0.95, epsilon=1e-06, momentum=0.0, centered=False, parameters=None,
                 weight_decay=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        self._rho, self._epsilon = _float("RMSProp: rho", rho), _float("RMSProp: epsilon", epsilon, "eps")
        self._momentum, self._centered = _float("RMSProp: momentum", momentum), bool(centered)

    def _extra(self, program):
        return {"rho": self._rho, "epsilon": self._epsilon, "momentum": self._momentum, "centered": self._centered}


class Adamax(Optimizer):
    """moment = beta1 * m + (1 - beta1) * g; inf_norm = max(beta2 * u + epsilon, |g|);
    param -= lr / (1 - beta1^t) * moment / inf_norm."""
    _kind = "adamax"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-08, parameters=None,
                 weight_decay=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)
        self._beta1, self._beta2 = _float("Adamax: beta1", beta1, "beta"), _float("Adamax: beta2", beta2, "beta")
        self._epsilon = _float("Adamax: epsilon", epsilon, "eps")

    def _extra(self, program):
        return {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon}


def _no_decay(program, keep):
    """Names of the parameters of `program` for which keep(name) is false."""
    if keep is None:
        return None
    return [p.name for p in program.global_block().all_parameters() if not keep(p.name)]


class AdamW(Adam):
    """Paddle 2.x AdamW: param -= lr * weight_decay * param (for the parameters
    apply_decay_param_fun accepts, all when None), then Adam's step."""
    _kind = "adamw"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None,
                 weight_decay=0.01, lr_ratio=None, apply_decay_param_fun=None, grad_clip=None, lazy_mode=False,
                 multi_precision=False, name=None):
        super().__init__(learning_rate, beta1, beta2, epsilon, parameters, None, grad_clip, lazy_mode,
                         multi_precision, False, name)
        if lr_ratio is not None:
            raise _core.UnsupportedError("AdamW: lr_ratio (a per-parameter function) is not supported")
        if isinstance(weight_decay, L2Decay):
            weight_decay = weight_decay.coeff
        self._coeff = _float("AdamW: weight_decay", weight_decay)
        self._apply_decay_param_fun = apply_decay_param_fun

    def _extra(self, program):
        return dict(super()._extra(program), coeff=self._coeff,
                    no_decay=_no_decay(program, self._apply_decay_param_fun))


class Lamb(Optimizer):
    """LAMB (You et al.): Adam's moments, r = m_hat / (sqrt(v_hat) + epsilon) + lamb_weight_decay * param,
    param -= lr * (||param|| / ||r||) * r (ratio 1 when either norm is 0)."""
    _kind = "lamb"

    def __init__(self, learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6,
                 parameters=None, grad_clip=None, exclude_from_weight_decay_fn=None, multi_precision=False,
                 name=None):
        super().__init__(learning_rate, parameters, None, grad_clip, name)
        self._beta1, self._beta2 = _float("Lamb: beta1", beta1, "beta"), _float("Lamb: beta2", beta2, "beta")
        self._epsilon = _float("Lamb: epsilon", epsilon, "eps")
        self._coeff = _float("Lamb: lamb_weight_decay", lamb_weight_decay)
        self._exclude = exclude_from_weight_decay_fn

    def _extra(self, program):
        excl = self._exclude
        return {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon, "coeff": self._coeff,
                "no_decay": _no_decay(program, None if excl is None else (lambda n: not excl(n)))}
