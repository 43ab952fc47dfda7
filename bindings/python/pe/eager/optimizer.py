"""pe.eager.optimizer — Optimizer.step() for eager parameters.

step() runs, for the parameters with a .grad, the optimizer op that
pe_optimizer_minimize (passes/optimizer.c) appends in static mode — sgd,
momentum, adam, adamw — in its merged form (merged_sgd, ...: one C call for
every parameter of a dtype, the single op's arithmetic bit for bit) through
the eager entry point, with the same
state (<param>_velocity_0, _moment1_0, _moment2_0, _beta1_pow_acc_0 = beta1,
_beta2_pow_acc_0 = beta2) and attrs, in place as in a program: ParamOut is
the parameter's own tensor (Moment1Out the accumulator's, ...), so the
Parameter keeps its storage (a to_static layer's scope var stays bound to
it) and its version is bumped (autograd.bump_version: a graph that saved
the old value refuses backward()). Before it, in the pass's order: ClipGradByGlobalNorm
(clip_by_global_norm over every gradient), then L2 weight decay
(grad + coeff * param: scale and sum ops).
"""
from .. import _core
from .. import framework as _fw
from .autograd import Tensor, _fill, _index, _run_raw, bump_version, no_grad

_STATE = {
    "sgd": [],
    "momentum": [("Velocity", "VelocityOut", "_velocity_0", "param", lambda o: 0.0)],
    "adam": [("Moment1", "Moment1Out", "_moment1_0", "param", lambda o: 0.0),
             ("Moment2", "Moment2Out", "_moment2_0", "param", lambda o: 0.0),
             ("Beta1Pow", "Beta1PowOut", "_beta1_pow_acc_0", "one", lambda o: o._beta1),
             ("Beta2Pow", "Beta2PowOut", "_beta2_pow_acc_0", "one", lambda o: o._beta2)],
}
_STATE["adamw"] = _STATE["adam"]


def check_params(opt, params):
    """The eager parameter list of an optimizer made in eager mode."""
    if params is None:
        raise _core.InvalidArgumentError(
            "%s: eager mode needs parameters= (e.g. model.parameters())" % type(opt).__name__)
    for i, p in enumerate(params):
        if isinstance(p, dict):
            raise _core.UnsupportedError("%s: parameter groups (dicts) are not supported" % type(opt).__name__)
        if not isinstance(p, Tensor):
            raise TypeError("%s: parameters[%d] must be a pe.eager.Tensor, got %s" % (
                type(opt).__name__, i, type(p).__name__))
    if opt._kind not in _STATE:
        raise _core.UnsupportedError("%s has no eager step() yet (eager mode: SGD, Momentum, Adam, AdamW)"
                                     % type(opt).__name__)
    if opt._lr_var is not None:
        raise _core.UnsupportedError("%s: eager mode takes a float learning_rate" % type(opt).__name__)
    return params


def _attrs(opt, p):
    k = opt._kind
    if k == "momentum":
        return {"mu": opt._momentum, "use_nesterov": opt._use_nesterov}
    if k in ("adam", "adamw"):
        a = {"beta1": opt._beta1, "beta2": opt._beta2, "epsilon": opt._epsilon}
        if k == "adamw":
            fun = opt._apply_decay_param_fun
            a.update(coeff=opt._coeff, lr_ratio=1.0, with_decay=fun is None or bool(fun(p.name)))
        return a
    return {}


def _state(opt, p):
    st = opt._accumulators.get(id(p))
    if st is None:
        st = {}
        with no_grad():
            for slot, _, suffix, shape, init in _STATE[opt._kind]:
                want = p.shape if shape == "param" else [1]
                loaded = opt._pending_state.pop(p.name + suffix, None)
                if loaded is not None:
                    t = loaded
                else:
                    t = _fill(want, p.dtype, init(opt))
                t.name = p.name + suffix
                st[slot] = t
        opt._accumulators[id(p)] = st
    return st


def state_dict(opt):
    """{<param name><suffix>: accumulator} of the accumulators made so far
    (Paddle's names: linear_0.w_0_moment1_0, ...), and the ones loaded by
    set_state_dict that no step has used yet."""
    out = dict(opt._pending_state)
    for p in opt._eager_params:
        for t in opt._accumulators.get(id(p), {}).values():
            out[t.name] = t
    return out


def set_state_dict(opt, state):
    """Accumulator values by name (tensors or numpy arrays): each must belong
    to a parameter of the optimizer, with its shape and dtype ([1] for the
    beta powers); checked first, nothing set on an error."""
    from .functional import to_tensor
    if not isinstance(state, dict):
        raise TypeError("set_state_dict: state must be a dict, got %s" % type(state).__name__)
    want = {}
    for p in opt._eager_params:
        for _, _, suffix, shape, _ in _STATE[opt._kind]:
            want[p.name + suffix] = (p, p.shape if shape == "param" else [1], p.dtype)
    bad, vals = [], []
    for name, v in state.items():
        if name not in want:
            bad.append("%s is no accumulator of this %s's parameters" % (name, type(opt).__name__))
            continue
        t = v if isinstance(v, Tensor) else to_tensor(v)
        _, shape, dtype = want[name]
        if t.shape != shape or t.dtype != dtype:
            bad.append("%s is %s %s, the accumulator is %s %s" % (name, t.dtype, t.shape, dtype, shape))
            continue
        vals.append((name, t))
    if bad:
        raise _core.InvalidArgumentError("%s.set_state_dict: %s" % (type(opt).__name__, "; ".join(bad)))
    for name, t in vals:
        t = t.detach()
        p = want[name][0]
        st = opt._accumulators.get(id(p))
        if st is not None:
            for acc in st.values():
                if acc.name == name:
                    acc._t = t._t
        else:
            opt._pending_state[name] = t


def step(opt):
    """One update of every parameter that has a .grad."""
    pg = [(p, p.grad) for p in opt._eager_params if p.grad is not None and not p.stop_gradient]
    if not pg:
        return
    with no_grad():
        try:
            grads = [g._t for _, g in pg]
        except AttributeError:
            p, g = next((p, g) for p, g in pg if not isinstance(g, Tensor))
            raise TypeError("%s.step: parameter %s's .grad must be a pe.eager.Tensor (as backward() leaves it), "
                            "got %s" % (type(opt).__name__, p.name, type(g).__name__)) from None
        if opt._grad_clip is not None:
            grads = _run_raw("clip_by_global_norm", [("X", grads, [p.name + "@GRAD" for p, _ in pg])],
                             [("Out", len(grads))], {"max_global_norm": float(opt._grad_clip.clip_norm)})["Out"]
        if opt._weight_decay:
            c = float(opt._weight_decay)
            grads = [_run_raw("sum", [("X", [g, _run_raw("scale", [("X", [p._t], [p.name])], [("Out", 1)],
                                                           {"scale": c})["Out"][0]], [None, None])],
                              [("Out", 1)], {})["Out"][0] for (p, _), g in zip(pg, grads)]
        lr = opt._lr_tensor()
        lr_in = ("LearningRate", [lr._t], [lr.name])
        state = _STATE[opt._kind]
        attrs = None if opt._kind == "adamw" else _attrs(opt, None)
        place = _fw._eager_place
        # One merged_<kind> call per (dtype, attrs) group: the element loops of the
        # single op, bit for bit, for any thread count (ops/cpu/fused_optimizer.c),
        # without a C call and its argument lists per parameter. A parameter listed
        # twice is updated twice, in order, as the single ops did.
        each = [(p, g, attrs if attrs is not None else _attrs(opt, p)) for (p, _), g in zip(pg, grads)]
        if len({id(p) for p, _ in pg}) < len(pg):
            groups = [([(p, g)], a) for p, g, a in each]
        else:
            by = {}
            for p, g, a in each:
                by.setdefault((p.dtype, a.get("with_decay")), ([], a))[0].append((p, g))
            groups = list(by.values())
        op = _index("merged_" + opt._kind)
        for items, a in groups:
            sts = [_state(opt, p) for p, _ in items]
            raws = [p._t for p, _ in items]
            ins = [("Param", raws, [p.name for p, _ in items]),
                   ("Grad", [g for _, g in items], [p.name + "@GRAD" for p, _ in items]), lr_in]
            outs = [("ParamOut", raws)]
            for slot, o, _, _, _ in state:
                accs = [st[slot] for st in sts]
                ins.append((slot, [t._t for t in accs], [t.name for t in accs]))
                outs.append((o, [t._t for t in accs]))
            # in place: each output is its input's tensor (ParamOut = Param, Moment1Out = Moment1, ...)
            _core.eager_run(op, ins, outs, a, place, 0, 0)
            for (p, _), st in zip(items, sts):
                bump_version(p)
                for acc in st.values():
                    bump_version(acc)


def lr_tensor(opt):
    t = opt._lr_t
    if t is None or t._lr != opt._lr:
        with no_grad():
            t = _fill([1], "float32", opt._lr)
        t._lr = opt._lr
        t.name = "learning_rate_0"
        opt._lr_t = t
    return t


def in_eager(params):
    """Whether an optimizer gets eager parameters (eager mode, or eager tensors given)."""
    if not _fw._static_mode:
        return True
    return params is not None and any(isinstance(p, Tensor) for p in params)
