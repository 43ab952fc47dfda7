"""pe.jit — to_static, save and load for eager pe.nn.Layer models (Paddle 2.x's paddle.jit).

    model = pe.jit.to_static(model, input_spec=[pe.static.InputSpec([None, 784], "float32", "x")])
    loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.clear_grad()   # as in eager mode
    pe.jit.save(model, "out/mlp")          # out/mlp.pe + out/mlp.safetensors: `pe run`, the C API
    infer = pe.jit.load("out/mlp")         # a callable TranslatedLayer

How to_static works (docs/guide.md, "to_static and jit.save"):

- Tracing. The first call with a new input signature (each input's dtype
  and shape, dim 0 as -1; or the input_spec's shapes) runs the Python
  forward once eagerly while every op it runs (autograd.run_op) is also
  appended to a static Program: the same op types and attrs the eager ops
  ran, with the parameters and buffers the forward reads as persistable
  vars named as the eager tensors (linear_0.w_0, ...), the inputs as data
  vars and the returned tensors as its fetch vars. A buffer an op updates
  (batch norm's running mean and variance) becomes that op's output slot,
  as the static builders write it. Tensors made inside forward outside an
  op (pe.to_tensor of a constant) are captured as persistable constants.
  Nothing of the trace run is kept: buffers are put back as they were.
  With -1 dims in the signature a second trace, each -1 dim one larger,
  finds the var dims that follow them (declared -1) and refuses attrs that
  change with them (a size read in Python).
- Running. Every call runs the traced program on the static engine: a
  one-place ParallelExecutor (CPU place 0) built once per program and
  scope, whose build applies the BuildStrategy's passes (by default
  fuse_gemm_epilogue (a Linear's matmul_v2 + bias add + act -> fc),
  fuse_elewise_add_act_ops, memory_optimize and enable_inplace, and not
  conv_nhwc / fuse_conv_bias: the eager kernels, the eager run's bits; to_static's
  build_strategy= replaces them), with the eager parameters' current values: the
  scope's parameter vars are the parameters' storage (each parameter's
  tensor becomes a view of its scope var, which the eager optimizer step
  updates in place; a parameter whose value was replaced, by
  set_state_dict, is copied back in before the run), so a
  training loop through to_static updates the Layer, and state_dict(),
  pe.save and eager calls see what the static runs wrote.
- Training. When a parameter or an input needs a gradient (outside
  pe.no_grad()), the call runs a training copy of the forward program whose
  intermediates that the backward reads are persistable vars of a call
  scope, and returns outputs tied to one autograd node. out.backward() (or
  any backward reaching them) runs the backward program — the ops
  pe.static.gradients (passes/backward.c) appends for the outputs, with the
  output gradients fed; the program passes (the fusions, and the CNN layout
  pass where switched on) run on forward and backward as one program before
  it is cut in two, so fc_grad replaces a layer's grad ops as in a static
  program) — in that call scope and hands each parameter's (and
  input's) gradient to the eager tape (taken from the scope, not copied:
  ParallelExecutor.run(take=True), pe_run_take), which accumulates it into .grad as
  for eager ops; pe.optimizer's eager step() then updates the parameters
  (in place: a backward through a call whose parameters a step changed
  since is refused, as the tape refuses it for eager ops).
  Call scopes are pooled: a steady loop (forward, backward, step) reuses
  two, each with its prepared executors.
- Limits. Python control flow on tensor values (if x.sum() > 0, x.numpy(),
  float(x) inside forward) cannot be traced: it raises UnsupportedError
  naming the layer. Shapes read in Python become constants of the traced
  program (refused where they follow a -1 dim). Dropout draws its masks from a step counter of the
  program (the static builder's Step var), not from pe.seed's stream.
"""
import inspect
import os
import warnings
import weakref

import numpy as np

from . import _core
from . import framework as _fw
from .eager import autograd as _ag
from .static import InputSpec
from .static import io as _sio

__all__ = ["to_static", "save", "load", "TranslatedLayer", "StaticFunction", "not_to_static"]

_FLOAT = ("float32", "float64", "float16", "bfloat16")


def _spec_dtype(d):
    return _ag._dtype_name(d) if d is not None else "float32"


def _layer_class():
    from .nn.layer import Layer
    return Layer


class _Trace:
    """Records the ops of one eager forward run into a static Program."""

    def __init__(self, what, prefix):
        self.what = what            # "MLP.forward": named in errors
        self.prefix = prefix
        self.program = _fw.Program()
        self.block = self.program.global_block()
        self.names = {}             # id(eager Tensor) -> var name
        self.keep = []              # the tensors named (ids stay unique while tracing)
        self.raw_out = {}           # id(_core.Tensor) -> var name, for op outputs
        self.externals = {}         # var name -> eager Tensor read but not made by the trace
        self.taken = set()
        self.n_tmp = 0
        self.n_step = 0
        self.steps = []             # dropout step counters (var names)
        self.buffer_names = {}      # id(buffer) -> its structured name in the layer (bn._mean)

    def _unique(self, name):
        base, k = name, 0
        while name in self.taken:
            k += 1
            name = "%s_%d" % (base, k)
        self.taken.add(name)
        return name

    def _decl_shape(self, shape):
        return list(shape)   # the traced sizes; _probe turns the ones that follow the inputs' -1 dims into -1

    def add_input(self, t, name, shape):
        name = self._unique(name)
        v = self.block.create_var(name=name, shape=list(shape), dtype=t.dtype, persistable=False, stop_gradient=True)
        v.is_data = True
        self.names[id(t)] = name
        self.keep.append(t)
        return name

    def _name_of(self, t):
        n = self.names.get(id(t))
        if n is not None:
            return n
        # a tensor the trace did not make: a parameter, a buffer or a constant
        if t.name and not t.name.startswith("eager_tmp_"):
            n = t.name
        elif id(t) in self.buffer_names:   # a buffer made without a name: the layer's path to it
            n = "%s.%s" % (self.prefix, self.buffer_names[id(t)])
        else:
            n = "%s.const_%d" % (self.prefix, len(self.externals))
        n = self._unique(n)
        self.block.create_var(name=n, shape=t.shape, dtype=t.dtype, persistable=True,
                              stop_gradient=t.stop_gradient)
        self.externals[n] = t
        self.names[id(t)] = n
        self.keep.append(t)
        return n

    def record(self, op_type, ins, outs, attrs, result):
        inputs = {slot: [self._name_of(t) if t is not None else "@EMPTY@" for t in ts] for slot, ts in ins}
        outputs = {}
        for slot, _ in outs:
            names = []
            for t in result[slot]:
                if t is None:
                    names.append("@EMPTY@")
                    continue
                n = self._unique("%s.tmp_%d" % (self.prefix, self.n_tmp))
                self.n_tmp += 1
                self.block.create_var(name=n, shape=self._decl_shape(t.shape), dtype=t.dtype, persistable=False)
                self.names[id(t)] = n
                self.raw_out[id(t._t)] = n
                self.keep.append(t)
                names.append(n)
            outputs[slot] = names
        attrs = dict(attrs)
        if op_type == "dropout" and not attrs.get("is_test", False):
            # a fixed seed would repeat one mask every run: the static builder's step counter instead
            step = self._unique("%s.dropout_step_%d" % (self.prefix, self.n_step))
            self.n_step += 1
            self.block.create_var(name=step, shape=[1], dtype="int64", persistable=True, stop_gradient=True)
            self.steps.append(step)
            inputs["Step"] = [step]
            outputs["StepOut"] = [step]
        self.block.append_op(type=op_type, inputs=inputs, outputs=outputs, attrs=attrs)

    def value_read(self, t, what):
        if id(t) in self.names and self.names[id(t)] not in self.externals:
            raise _core.UnsupportedError(
                "pe.jit.to_static(%s): the forward reads the value of tensor '%s' (%s) while it is traced: Python "
                "control flow or numpy code on tensor values cannot become a static program (the traced program "
                "would keep this call's branch); compute it with tensor ops, or leave this layer eager"
                % (self.what, t.name, what))


def _flatten_outputs(out, what):
    if isinstance(out, _ag.Tensor):
        return [out], False
    if isinstance(out, (list, tuple)) and out and all(isinstance(o, _ag.Tensor) for o in out):
        return list(out), True
    raise _core.UnsupportedError("pe.jit.to_static(%s): forward must return a Tensor or a list/tuple of Tensors, "
                                 "got %s" % (what, type(out).__name__))


def _default_build_strategy():
    """to_static's passes when no build_strategy is given: the fc fusion
    (matmul_v2 + bias add + activation), the fusion of a remaining bias add +
    activation and the memory plan with in-place reuse. The CNN layout
    pass (conv_nhwc) and the conv bias fusion stay off: the traced program keeps
    the eager ops' NCHW kernels and bias adds, so a to_static model takes the eager model's steps to the bit
    (oneDNN's NHWC kernels sum in another order; where a gradient is ~0 by
    construction, e.g. a conv bias before a batch norm, Adam turns that
    rounding into full-size steps of either sign). Pass a build_strategy
    with conv_nhwc=True for the NHWC speed."""
    from .static.executor import BuildStrategy
    bs = BuildStrategy()
    bs.conv_nhwc = False
    bs.fuse_conv_bias = False
    bs.fuse_gemm_epilogue = True
    bs.fuse_elewise_add_act_ops = True
    bs.memory_optimize = True
    bs.enable_inplace = True
    return bs


class _Runner:
    """Runs one program in one scope on a one-place ParallelExecutor (CPU place
    0), whose build applies the BuildStrategy's passes (fusion, memory plan)
    once; each run is then one pass over the prepared op list."""

    def __init__(self, program, scope, build_strategy):
        self.program = program
        self.scope = scope
        self.bs = build_strategy
        self.ex = None

    def run(self, feed, fetch, take=False):
        if self.ex is None:
            from .static.executor import ExecutionStrategy
            self.ex = _core.ParallelExecutor([_fw.CPUPlace()._pe_place], self.program._core_program(), self.scope,
                                             loss_name=None, share_vars_from=None,
                                             exec_strategy=ExecutionStrategy()._to_dict(),
                                             build_strategy=self.bs._to_dict(), num_trainers=1, trainer_id=0)
        return self.ex.run(feed, fetch, True, take)


class _Concrete:
    """One traced signature: the forward program, its training copy and
    backward program (made at the first call that needs gradients)."""

    def __init__(self, owner, trace, feeds, fetches, is_seq, ext, scope):
        self.owner = owner
        self.forward = trace.program
        self.feeds = feeds
        self.fetches = fetches
        self.is_seq = is_seq
        self.ext = ext             # [(var name, eager Tensor)] synced into the scope before each run
        self.scope = scope         # holds the parameters (the owner's scope)
        self.infer = None
        self.train = {}            # grad key -> (forward program, backward program, grad names, backward feeds)
        self.pool = {}             # grad key -> free [(key, forward runner, backward runner)] (one call scope each)

    def sync(self, rebind=True):
        """The scope's parameter and buffer vars take the eager tensors' current
        values; rebind: each eager tensor's storage becomes its scope var, so
        later runs copy nothing: the eager optimizer steps write it in place.
        Only a tensor whose value was replaced (set_state_dict, an eager
        batch norm's buffers) is copied in again."""
        views = self.owner._views
        for n, t in self.ext:
            v = views.get(n)
            if v is None:
                v = views[n] = self.scope.var(n).get_tensor()
            elif t._t is v:
                continue   # bound: the scope var is its storage
            v.set(t._t)
            if rebind:
                t._t = v

    def _feed(self, args):
        return {n: a._t for n, a in zip(self.feeds, args)}

    def run_infer(self, args):
        self.sync()
        if self.infer is None:
            self.infer = _Runner(self.forward, self.scope.new_scope(), self.owner._build_strategy)
        outs = self.infer.run(self._feed(args), self.fetches)
        return [_ag.Tensor(o, stop_gradient=True) for o in outs]

    def _train_programs(self, key):
        ent = self.train.get(key)
        if ent is not None:
            return ent
        want_params, want_inputs = key
        g = self.forward.clone()
        b = g.global_block()
        n_fwd = len(b.ops)
        seeds = []
        for n in self.fetches:
            v = b.var(n)
            gv = b.create_var(name=n + "@GRAD@IN", shape=v.shape, dtype=v.dtype, persistable=False,
                              stop_gradient=True)
            gv.is_data = True
            seeds.append(gv if v.dtype in _FLOAT else None)
        targets = [b.var(n) for n, s in zip(self.fetches, seeds) if s is not None]
        seeds = [s for s in seeds if s is not None]
        wrt = list(want_params) + [self.feeds[i] for i in want_inputs]
        for n in wrt:
            b.var(n).stop_gradient = False
        if targets and wrt:
            from .static.backward import gradients
            grads = gradients(targets, [b.var(n) for n in wrt], target_gradients=seeds)
        else:
            grads = [None] * len(wrt)
        fwd_ops = b.ops[:n_fwd]
        for a, c in zip(fwd_ops, self.forward.global_block().ops):
            if a.type != c.type:
                raise _core.InternalError("pe.jit: the backward pass changed forward op %s of the traced program"
                                          % c.type)
        grad_names = [gv.name if gv is not None else None for gv in grads]
        n_fwd = self._fuse(g, n_fwd, [n for n in grad_names if n is not None])
        b = g.global_block()
        fwd_ops, bwd_ops = b.ops[:n_fwd], b.ops[n_fwd:]
        written = {a for op in fwd_ops for a in op.output_arg_names}
        read = {a for op in bwd_ops for a in op.input_arg_names}
        fed = set(self.feeds)
        keep = (read & written) - fed
        fp = g.clone()
        fp.global_block().ops = fp.global_block().ops[:n_fwd]
        bp = g.clone()
        bp.global_block().ops = bp.global_block().ops[n_fwd:]
        for p in (fp, bp):
            for n in keep:
                p.global_block().var(n).persistable = True
            p._bump()
        bfeeds = [n for n in self.feeds if n in read]
        ent = self.train[key] = (fp, bp, grad_names, bfeeds, [f for f in self.fetches
                                                             if b.var(f).dtype in _FLOAT])
        return ent

    def _fuse(self, g, n_fwd, grads):
        """Runs the build strategy's program passes (fuse_gemm_epilogue,
        fuse_elewise_add_act_ops, and conv_nhwc / fuse_conv_bias where it
        switches them on) on the traced forward + backward program g in
        place, before it is cut in two: a pattern's forward and backward ops
        are then in one program, as in a static program, so matmul_v2 + bias
        add + relu and their three grads become fc / fc_grad (the forward's
        intermediates need not be kept for the backward), and a CNN's
        forward and backward are NHWC with transposes only at the edges of
        the whole. The fetches and the gradients stay (protected). Returns
        the forward's op count in g."""
        # the program passes the strategy switches on (a traced program has no optimizer ops to merge)
        fused, stats = _core.fuse_program(g._core_program(), build_strategy=self.owner._build_strategy._to_dict(),
                                          protect=list(self.fetches) + list(grads))
        if not any(n for _, n in stats):
            return n_fwd
        unfused = g.to_json()
        g._load_json(fused.to_json())   # keeps the Variable objects (is_data of the feeds and seeds)
        roles = [int(op.attr("op_role") or 0) & _fw.OpRole.Backward for op in g.global_block().ops]
        n = roles.index(1) if 1 in roles else len(roles)
        if any(r == 0 for r in roles[n:]):
            # a pass put a forward op after a backward one: no cut gives the two programs; run them unfused
            # (each still gets the per-program passes), which is what to_static did before this fusion
            g._load_json(unfused)
            warnings.warn("pe.jit.to_static(%s): the build passes interleaved the traced forward and backward ops; "
                          "its programs run without the fusion across them" % self.owner.what, RuntimeWarning)
            return n_fwd
        return n

    def run_train(self, args, params, want_inputs):
        self.sync()
        key = (tuple(n for n, _ in params), tuple(want_inputs))
        fp, bp, grad_names, bfeeds, seeded = self._train_programs(key)
        pool = self.pool.setdefault(key, [])
        if pool:
            slot = pool.pop()
        else:
            scope = self.scope.new_scope()
            bs = self.owner._build_strategy
            slot = (key, _Runner(fp, scope, bs), _Runner(bp, scope, bs))
        outs = slot[1].run(self._feed(args), self.fetches)
        saved_feed = {n: a._t for n, a in zip(self.feeds, args) if n in bfeeds}
        call = _TrainCall(self, slot, bp, grad_names, saved_feed, seeded, [o for o in self.fetches])
        node = _ag._Node()
        node.seq = next(_ag._seq)
        node.op_type = "to_static(%s)" % self.owner.what
        node.saved = {}
        wrt = [t for _, t in params] + [args[i] for i in want_inputs]
        node.inputs = [("i%d" % j, t) for j, t in enumerate(wrt)]
        node.out_meta = {}
        node.fn = call.backward
        node.versions = [(t, t._version) for _, t in self.ext]   # the backward program reads their scope vars
        call.meta = node.out_meta
        res = []
        for j, o in enumerate(outs):
            t = _ag.Tensor(o, stop_gradient=o.dtype() not in _FLOAT)
            node.out_meta["o%d" % j] = (t.shape, t.dtype)
            if not t.stop_gradient:
                t._node = node
                t._slot = "o%d" % j
            res.append(t)
        return res


class _TrainCall:
    """The backward of one training call: runs the backward program in the
    call's scope; the scope goes back to the pool afterwards (or when the
    outputs are dropped without a backward)."""

    def __init__(self, conc, slot, bp, grad_names, saved_feed, seeded, fetches):
        self.conc = weakref.ref(conc)
        self.slot = slot
        self.bp = bp
        self.grad_names = grad_names
        self.saved_feed = saved_feed
        self.seeded = seeded
        self.fetches = fetches
        self.meta = {}

    def backward(self, env, retain_graph):
        if self.slot is None:
            raise _core.InvalidArgumentError("backward(): the graph of a to_static call was freed by an earlier "
                                             "backward(); call backward(retain_graph=True) the first time")
        feed = dict(self.saved_feed)
        for j, n in enumerate(self.fetches):
            if n not in self.seeded:
                continue
            g = env.get("o%d@GRAD" % j)
            if g is None:  # no gradient reached this output: zeros
                shape, dtype = self.meta["o%d" % j]
                g = _ag._zeros_raw(shape, dtype)
            feed[n + "@GRAD@IN"] = g
        names = [n for n in self.grad_names if n is not None]
        # take: the gradients leave the call scope without a copy (its next backward computes new ones)
        got = self.slot[2].run(feed, names, take=True) if names else []
        by = dict(zip(names, got))
        out = {}
        for j, n in enumerate(self.grad_names):
            if n is not None:
                out["i%d@GRAD" % j] = by[n]
        if not retain_graph:
            self.release()
        return out

    def release(self):
        slot, self.slot = self.slot, None
        conc = self.conc()
        if slot is not None and conc is not None:
            conc.pool.setdefault(slot[0], []).append(slot)

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass


class StaticFunction:
    """A forward (a Layer's bound forward, or a function of tensors) run as
    traced static programs, one per input signature. Made by to_static."""

    def __init__(self, function, input_spec=None, layer=None, build_strategy=None):
        self._fn = function
        self._build_strategy = build_strategy if build_strategy is not None else _default_build_strategy()
        self._layer = layer
        self._specs = None if input_spec is None else self._check_specs(input_spec)
        self._concrete = {}
        self._scope = _core.Scope()
        self._views = {}
        self._bound = weakref.WeakKeyDictionary()
        name = getattr(function, "__qualname__", None) or getattr(function, "__name__", "function")
        if layer is not None:
            name = "%s.forward" % type(layer).__name__
        self.what = name
        self._prefix = layer.full_name() if layer is not None else getattr(function, "__name__", "fn")
        self.__doc__ = getattr(function, "__doc__", None)
        self.__name__ = getattr(function, "__name__", "forward")

    @staticmethod
    def _check_specs(specs):
        if isinstance(specs, InputSpec):
            specs = [specs]
        if not isinstance(specs, (list, tuple)):
            raise TypeError("to_static: input_spec must be a list of pe.static.InputSpec, got %s"
                            % type(specs).__name__)
        for s in specs:
            if not isinstance(s, InputSpec):
                raise TypeError("to_static: input_spec entries must be pe.static.InputSpec, got %s"
                                % type(s).__name__)
        return list(specs)

    # a decorator on a Layer's forward: bind per instance
    def __get__(self, obj, objtype=None):
        if obj is None or self._layer is not None:
            return self
        sf = self._bound.get(obj)
        if sf is None:
            sf = StaticFunction(self._fn.__get__(obj, objtype), self._specs, layer=obj,
                                build_strategy=self._build_strategy)
            self._bound[obj] = sf
        return sf

    @property
    def input_spec(self):
        return self._specs

    @property
    def dygraph_function(self):
        return self._fn

    def _arg_names(self, n):
        try:
            ps = [p.name for p in inspect.signature(self._fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            ps = []
        return [ps[i] if i < len(ps) else "x%d" % i for i in range(n)]

    def _check_args(self, args):
        for i, a in enumerate(args):
            if not isinstance(a, _ag.Tensor):
                raise TypeError("pe.jit.to_static(%s): argument %d must be a pe.eager.Tensor, got %s (the traced "
                                "program takes tensors only)" % (self.what, i, type(a).__name__))
        if self._specs is None:
            return
        if len(args) != len(self._specs):
            raise _core.InvalidArgumentError("pe.jit.to_static(%s): %d inputs given, input_spec declares %d"
                                             % (self.what, len(args), len(self._specs)))
        for i, (a, s) in enumerate(zip(args, self._specs)):
            nm = s.name or "input %d" % i
            if a.dtype != _spec_dtype(s.dtype):
                raise _core.InvalidArgumentError("pe.jit.to_static(%s): input '%s' is %s, its InputSpec says %s"
                                                 % (self.what, nm, a.dtype, _spec_dtype(s.dtype)))
            if len(a.shape) != len(s.shape) or any(d >= 0 and d != e for d, e in zip(s.shape, a.shape)):
                raise _core.InvalidArgumentError("pe.jit.to_static(%s): input '%s' has shape %s, its InputSpec "
                                                 "says %s (-1: any size)" % (self.what, nm, a.shape, list(s.shape)))

    def _signature(self, args):
        if self._specs is not None:
            return tuple((_spec_dtype(s.dtype), tuple(s.shape)) for s in self._specs)
        return tuple((a.dtype, tuple([-1] + a.shape[1:]) if a.ndim else ()) for a in args)

    def _training(self):
        return bool(self._layer.training) if self._layer is not None else False

    def concrete_program(self, args_or_specs, training=None):
        """The _Concrete of a signature, traced now if new. args_or_specs:
        eager tensors (a call's) or InputSpecs (jit.save)."""
        if training is None:
            training = self._training()
        if all(isinstance(a, InputSpec) for a in args_or_specs):
            sig = tuple((_spec_dtype(s.dtype), tuple(s.shape)) for s in args_or_specs)
            samples = []
            for s in args_or_specs:
                shape = [2 if d < 0 else d for d in s.shape]   # an example batch of 2
                samples.append(_ag.Tensor(_zeros(shape, _spec_dtype(s.dtype))))
            names = [s.name for s in args_or_specs]
        else:
            sig = self._signature(args_or_specs)
            samples = list(args_or_specs)
            names = [s.name for s in self._specs] if self._specs is not None else [None] * len(samples)
        key = (sig, training)
        conc = self._concrete.get(key)
        if conc is None:
            conc = self._concrete[key] = self._trace(sig, samples, names, training)
        return conc

    def _run_traced(self, tr, ins, training):
        layer = self._layer
        flags = [(l, l.training) for l in [layer] + list(layer.sublayers())] if layer is not None else []
        for l, _ in flags:
            object.__setattr__(l, "training", training)
        prev = _ag._set_tracer(tr)
        try:
            with _ag.no_grad():
                return self._fn(*ins)
        finally:
            _ag._set_tracer(prev)
            for l, f in flags:
                object.__setattr__(l, "training", f)

    def _probe(self, tr, sig, samples, training):
        """Traces the forward once more with every -1 dim of the signature one
        larger: the dims of the program's vars that change are declared -1,
        the others keep their size. Ops or attrs that change (a batch size
        read in Python and baked into an attr) are refused."""
        probe = _Trace(self.what, self._prefix)
        ins = []
        for i, (a, (dtype, shape)) in enumerate(zip(samples, sig)):
            pshape = [d + 1 if s < 0 else d for d, s in zip(a.shape, shape)]
            t = _ag.Tensor(_zeros(pshape, a.dtype))
            probe.add_input(t, "x%d" % i, shape)
            ins.append(t)
        sizes = ", ".join(str(a.shape) for a in samples)
        try:
            self._run_traced(probe, ins, training)
        except _core.Error as e:
            raise _core.UnsupportedError(
                "pe.jit.to_static(%s): the forward runs for input shapes %s but fails when the -1 dims of the "
                "signature %s are one larger (%s): it depends on the traced sizes (a Python x.shape[0] in an "
                "attr?); use -1 dims in reshape, or give input_spec fixed sizes" % (
                    self.what, sizes, [list(s) for _, s in sig], e)) from None
        a_ops, b_ops = tr.block.ops, probe.block.ops
        if [o.type for o in a_ops] != [o.type for o in b_ops]:
            raise _core.UnsupportedError(
                "pe.jit.to_static(%s): the ops the forward runs change with the input sizes (%d ops for %s, %d "
                "when the -1 dims are one larger): Python control flow on shapes cannot become one program; give "
                "input_spec fixed sizes" % (self.what, len(a_ops), sizes, len(b_ops)))
        for k, (oa, ob) in enumerate(zip(a_ops, b_ops)):
            for name, va in oa._attrs.items():
                if oa.type == "dropout" and name == "seed":
                    continue
                vb = ob._attrs.get(name)
                if va != vb:
                    raise _core.UnsupportedError(
                        "pe.jit.to_static(%s): op %d (%s) attr %s is %r for input shapes %s and %r when the -1 dims "
                        "are one larger: the forward bakes a traced size into it (x.shape read in Python?); use -1 "
                        "dims (e.g. reshape(x, [-1, n])) or give input_spec fixed sizes"
                        % (self.what, k, oa.type, name, va, sizes, vb))
            for slot, args in oa._outputs.items():
                for na, nb in zip(args, ob._outputs.get(slot, [])):
                    va, vb = tr.block.vars.get(na), probe.block.vars.get(nb)
                    if va is None or vb is None or va.persistable:
                        continue
                    va._set_shape([-1 if x != y else x for x, y in zip(va.shape, vb.shape)])

    def _trace(self, sig, samples, names, training):
        defaults = self._arg_names(len(samples))
        tr = _Trace(self.what, self._prefix)
        ins, feeds = [], []
        for i, (a, (dtype, shape)) in enumerate(zip(samples, sig)):
            t = _ag.Tensor(a._t, stop_gradient=True)
            feeds.append(tr.add_input(t, names[i] or defaults[i], shape))
            ins.append(t)
        # a trace run must leave no trace: buffers (batch norm statistics) are put back afterwards
        layer = self._layer
        state, owned = [], set()
        if layer is not None:
            state = [(t, t._t) for t in layer.buffers()]
            tr.buffer_names = {id(t): n for n, t in layer.named_buffers()}
            owned = {id(t) for t in layer.parameters()} | {id(t) for t in layer.buffers()}
        try:
            out = self._run_traced(tr, ins, training)
            after = [t._t for t, _ in state]
            if any(d < 0 for _, shape in sig for d in shape):
                for t, before in state:
                    t._t = before
                self._probe(tr, sig, samples, training)
            for (t, _), a in zip(state, after):
                t._t = a
        except BaseException:
            for t, before in state:
                t._t = before
            raise
        outs, is_seq = _flatten_outputs(out, self.what)
        try:
            b = tr.block
            # buffers an op updated: that op's output is the buffer's var (the static builders' in-place form)
            renames = {}
            for t, before in state:
                if t._t is not before and id(t._t) in tr.raw_out:
                    tmp = tr.raw_out[id(t._t)]
                    bn = tr.names.get(id(t))
                    if bn is None:
                        bn = tr._name_of(t)
                    renames[tmp] = bn
            if renames:
                for op in b.ops:
                    for slot, args in op._outputs.items():
                        op._outputs[slot] = [renames.get(a, a) for a in args]
                    for slot, args in op._inputs.items():
                        op._inputs[slot] = [renames.get(a, a) for a in args]
                for tmp in renames:
                    b._remove_var(tmp)
            fetches = []
            for o in outs:
                n = tr.names.get(id(o))
                n = renames.get(n, n)
                if n is None or n in tr.externals or n in feeds or n in fetches:
                    src = n if n is not None else tr._name_of(o)
                    n = tr._unique("%s.out_%d" % (self._prefix, len(fetches)))
                    shape = b.vars[src].shape if src in b.vars else o.shape   # an input's keeps its -1 dims
                    b.create_var(name=n, shape=list(shape), dtype=o.dtype, persistable=False)
                    b.append_op(type="assign", inputs={"X": [src]}, outputs={"Out": [n]}, attrs={})
                fetches.append(n)
        finally:
            for t, before in state:
                t._t = before
        tr.program._bump()
        # the state read: the Layer's tensors are synced every run, other tensors captured now (constants)
        ext = []
        for n, t in tr.externals.items():
            if id(t) in owned or not t.stop_gradient:
                ext.append((n, t))
            else:
                self._scope.var(n).get_tensor().set(t._t)
        for n in tr.steps:
            self._scope.var(n).get_tensor().set(np.zeros([1], "int64"))
        return _Concrete(self, tr, feeds, fetches, is_seq, ext, self._scope)

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise _core.UnsupportedError("pe.jit.to_static(%s): keyword arguments are not supported (pass the "
                                         "tensors positionally)" % self.what)
        if _fw._static_mode:
            raise _core.UnsupportedError("pe.jit.to_static(%s): called in static mode; to_static runs eager "
                                         "Layers (pe.disable_static())" % self.what)
        if _ag._tracer() is not None:
            return self._fn(*args)   # inside an enclosing trace: its ops join that program
        if any(isinstance(a, _ag.Tensor) and a._t._place()[0] == "cuda" for a in args):
            raise _core.UnsupportedError("pe.jit.to_static(%s): its programs run on CPU place 0; the inputs are on "
                                         "a GPU (run the Layer eagerly there, or build a static program for "
                                         "Executor(CUDAPlace))" % self.what)
        self._check_args(args)
        conc = self.concrete_program(list(args))
        grad = _ag._grad_enabled()
        params = [(n, t) for n, t in conc.ext if not t.stop_gradient] if grad else []
        want_inputs = [i for i, a in enumerate(args) if grad and not a.stop_gradient and a.dtype in _FLOAT]
        if params or want_inputs:
            outs = conc.run_train(list(args), params, want_inputs)
        else:
            outs = conc.run_infer(list(args))
        if conc.is_seq:
            return outs
        return outs[0]

    def rollback(self):
        """The eager forward (undoes to_static on the layer)."""
        if self._layer is not None and self._layer.__dict__.get("forward") is self:
            del self._layer.__dict__["forward"]
        return self._fn


def _zeros(shape, dtype):
    t = _core.Tensor()
    t.set(np.zeros(shape, dtype))
    return t


def to_static(function=None, input_spec=None, build_strategy=None, **kwargs):
    """Paddle 2.x's paddle.jit.to_static: a Layer (its forward replaced) or a
    function whose calls run as traced static programs; also a decorator
    (@pe.jit.to_static or @pe.jit.to_static(input_spec=[...])) on a Layer's
    forward. input_spec: [pe.static.InputSpec] (None dims: any size)."""
    if build_strategy is not None:
        from .static.executor import BuildStrategy
        if not isinstance(build_strategy, BuildStrategy):
            raise TypeError("to_static: build_strategy must be a pe.static.BuildStrategy, got %s"
                            % type(build_strategy).__name__)
    if function is None:
        return lambda f: to_static(f, input_spec=input_spec, build_strategy=build_strategy)
    Layer = _layer_class()
    if isinstance(function, Layer):
        fwd = function.__dict__.get("forward")
        if isinstance(fwd, StaticFunction):
            return function
        cls_fwd = getattr(type(function), "forward", None)
        if isinstance(cls_fwd, StaticFunction):
            return function   # already decorated in the class
        sf = StaticFunction(function.forward, input_spec, layer=function, build_strategy=build_strategy)
        function.__dict__["forward"] = sf
        return function
    if isinstance(function, StaticFunction):
        return function
    if not callable(function):
        raise TypeError("to_static: expected a pe.nn.Layer or a function, got %s" % type(function).__name__)
    return StaticFunction(function, input_spec, build_strategy=build_strategy)


def not_to_static(function):
    """Paddle's marker for functions left eager; PE traces calls through it
    anyway (it runs eager ops), so it returns the function unchanged."""
    return function


def _static_function(layer, input_spec, fn):
    """(the layer's StaticFunction or a temporary one, the input specs, whether it is temporary)"""
    Layer = _layer_class()
    if not isinstance(layer, Layer):
        raise TypeError("%s: layer must be a pe.nn.Layer, got %s" % (fn, type(layer).__name__))
    sf = layer.__dict__.get("forward")
    if not isinstance(sf, StaticFunction):
        sf = getattr(type(layer), "forward", None)
        sf = sf.__get__(layer, type(layer)) if isinstance(sf, StaticFunction) else None
    temporary = sf is None
    if temporary:
        sf = StaticFunction(layer.forward, input_spec, layer=layer)
    specs = StaticFunction._check_specs(input_spec) if input_spec is not None else sf.input_spec
    if specs is None:
        # the signatures traced so far: the one of the latest call
        if not sf._concrete:
            raise _core.InvalidArgumentError(
                "%s(%s): give input_spec=[pe.static.InputSpec(...)] (or call the to_static layer once first): "
                "the inputs' shapes and dtypes are not known" % (fn, type(layer).__name__))
        sig = list(sf._concrete)[-1][0]
        specs = [InputSpec(list(shape), dtype) for dtype, shape in sig]
    return sf, specs, temporary


def save(layer, path, input_spec=None, **configs):
    """Writes path.pe (the layer's forward traced in eval mode, pruned to its
    inputs -> outputs, feed and fetch names recorded) and path.safetensors
    (the weights it reads) — save_inference_model's files: `pe run path.pe
    --params path.safetensors`, the C API and pe.jit.load / load_inference_model
    read them."""
    fn = "pe.jit.save"
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("%s: path must be a path, got %s" % (fn, type(path).__name__))
    prefix = os.fspath(path)
    if prefix.endswith(".pe"):
        prefix = prefix[:-3]
    sf, specs, temporary = _static_function(layer, input_spec, fn)
    conc = sf.concrete_program(specs, training=False)
    conc.sync(rebind=not temporary)   # a layer that is not to_static keeps its own storage
    _sio._save_inference(prefix + ".pe", prefix + _sio._SUFFIX, list(conc.feeds), list(conc.fetches),
                         conc.forward, conc.scope, fn)


class TranslatedLayer(_layer_class()):
    """A model pe.jit.save wrote, loaded by pe.jit.load: calling it runs the
    saved program (inference) on eager tensors; its parameters are the
    loaded weights (state_dict())."""

    def __init__(self, program, feeds, fetches, scope, path):
        super().__init__()
        object.__setattr__(self, "_program", program)
        object.__setattr__(self, "_feeds", feeds)
        object.__setattr__(self, "_fetches", fetches)
        object.__setattr__(self, "_scope", scope)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_ex", _core.Executor(_fw.CPUPlace()._pe_place))
        object.__setattr__(self, "_run_scope", scope.new_scope())
        g = program.global_block()
        for n in sorted(v.name for v in g.vars.values() if v.persistable):
            t = _ag.Tensor(scope.var(n).get_tensor(), stop_gradient=True, name=n)
            self._buffers[n] = t

    def forward(self, *args):
        if len(args) != len(self._feeds):
            raise _core.InvalidArgumentError("TranslatedLayer(%s): %d inputs given, the program takes %d (%s)" % (
                self._path, len(args), len(self._feeds), ", ".join(self._feeds)))
        feed = {}
        for n, a in zip(self._feeds, args):
            feed[n] = a._t if isinstance(a, _ag.Tensor) else np.ascontiguousarray(a)
        outs = self._ex.run(self._program._core_program(), self._run_scope, feed, list(self._fetches))
        res = [_ag.Tensor(o, stop_gradient=True) for o in outs]
        return res[0] if len(res) == 1 else res

    def program(self):
        return self._program


def load(path, **configs):
    """Reads path.pe and path.safetensors (pe.jit.save's or
    save_inference_model's files): a TranslatedLayer to call on eager tensors."""
    fn = "pe.jit.load"
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("%s: path must be a path, got %s" % (fn, type(path).__name__))
    prefix = os.fspath(path)
    if prefix.endswith(".pe"):
        prefix = prefix[:-3]
    scope = _core.Scope()
    program, feeds, fetches = _sio._load_inference(prefix + ".pe", prefix + _sio._SUFFIX, scope, fn)
    return TranslatedLayer(program, feeds, [v.name for v in fetches], scope, prefix)


