"""Parameter-server mode of fluid.DistributeTranspiler (Paddle 1.x's default mode).

transpile() reads the program minimize() produced and cuts it in two:

- the trainer program (get_trainer_program): a copy of the program without
  the optimizer and LR-schedule ops, ending with, in this order:
    split    one per gradient cut into >1 row blocks (X=grad, Out=its blocks)
    send     one per gradient (X=its blocks, epmap=the endpoint of each block,
             send_varnames=the block names)
    send_barrier   sync mode only, endpoints=every pserver
    recv     one per parameter (Out=its blocks, epmap, varnames=the block names)
    fetch_barrier  sync mode only (as Paddle), endpoints=every pserver
    concat   one per parameter cut into >1 blocks (X=its blocks, Out=param)
  The executor runs ops in program order, so the ops carry no dependency vars
  (their Out / X optional slots are left empty).
- one pserver program per endpoint (get_pserver_program): block 0 holds only
  listen_and_serv; block 1 is the LR-decay block when the program has
  LR-schedule ops (op_role LRSched); then one optimize block per parameter
  block placed on that endpoint, holding the parameter's optimize chain (its
  per-parameter gradient transforms such as the L2 decay scale/sum, the lr
  multiplier scale, and its sgd / momentum / adam / adagrad / rmsprop / adamax /
  adamw / lamb op) rewritten onto the block
  vars. Every var is declared in the global block.
- one pserver startup program per endpoint (get_startup_program): the
  original startup's init ops for the full vars it needs, under their
  original names and with the original random_seed (random initializers key
  their stream on the program seed, the op's seed and the output name, so
  they draw what a single-process run draws), then `slice` (row blocks) /
  `assign` (per-block copies) into the block vars; the full vars are
  temporaries there.

Slicing (Paddle's slice_variable): a param of numel elements and R rows is cut
along dim 0 into split_count = min(#pservers, max(1, numel // min_block_size))
blocks of ceil(R / split_count) whole rows (empty blocks dropped); without
slice_var_up every param is one block. A var cut into >1 blocks has blocks
NAME.block{i}; a one-block var keeps its name. The blocks, in the program
order of the optimizer ops, are placed by config.split_method (RoundRobin or
HashName, both deterministic in every process).

Vars of a parameter's optimize chain: the param and its gradient follow the
blocks; a var the chain writes with the param's shape (moments, velocity,
decayed gradient) is cut into the same row blocks; any other var it writes
(beta1/beta2 powers, the lr-multiplied learning rate) gets a copy per block,
NAME.block{i}; a var it only reads (the learning rate) is shared under its
own name. Global-norm clipping (clip_by_global_norm: an optimize op without
op_role_var, needing every gradient) stays on the trainer, before the sends.

The trainer's startup program (the one given to transpile) is changed in
place, as Paddle does: the init ops of the optimizer state and LR vars go
(they live on the pservers only) and recv + concat of every param are
appended, so every trainer starts from the pservers' values. It has no
fetch_barrier: in sync mode no pserver can update before every trainer has
sent its first gradients, which it does after its startup.

program._pe_ps (on the trainer program) records, for each persistable of the
original program, where it lives: {"vars": {name: (kind, [(endpoint, block
var, row offset, rows), ...])}} with kind "rows" (concatenate the blocks),
"copy" (every entry holds the whole value; read the first) or "local" (the
trainer's scope), and "meta": {name: (shape, dtype, is_parameter)}. fluid.io uses it to save a checkpoint that a single-process
run of the original program loads, and the pserver program's _pe_ps_server
({block var: (kind, original name, row offset, rows)}) to load its blocks
from such a checkpoint.
"""
import math

from .. import _core
from ..framework import OpRole, Program, op_registry

_RPC = OpRole.RPC
_DIST = OpRole.Dist


class PSDispatcher:
    """Assigns variables to parameter servers (for the pserver mode's split_method)."""

    def __init__(self, pserver_endpoints):
        self._eps = list(pserver_endpoints)
        if not self._eps:
            raise _core.InvalidArgumentError("%s: the pserver endpoint list is empty" % type(self).__name__)
        self._step = 0

    @property
    def eps(self):
        return self._eps

    def reset(self):
        self._step = 0


class RoundRobin(PSDispatcher):
    """Variable i goes to endpoint i mod len(endpoints), in order of the calls."""

    def dispatch(self, varlist):
        out = []
        for _ in varlist:
            out.append(self._eps[self._step % len(self._eps)])
            self._step += 1
        return out


class HashName(PSDispatcher):
    """A variable goes to the endpoint its name hashes to (a stable hash: the
    same on every process, unlike Python's salted hash())."""

    def dispatch(self, varlist):
        out = []
        for v in varlist:
            name = v if isinstance(v, str) else v.name
            h = 0
            for ch in name.encode():
                h = (h * 131 + ch) & 0xFFFFFFFF
            out.append(self._eps[h % len(self._eps)])
        return out


def _is_optimizer_op(op_type):
    """sgd, momentum, adam, ...: an op with single Param, Grad, LearningRate inputs and a ParamOut."""
    spec = op_registry().get(op_type)
    if not spec:
        return False
    ins = dict(spec["inputs"])
    outs = dict(spec["outputs"])
    return (ins.get("Param") == "one" and ins.get("Grad") == "one" and "LearningRate" in ins
            and outs.get("ParamOut") == "one")


def slice_rows(shape, n_pservers, slice_var_up=True, min_block_size=8192):
    """[(row offset, rows)] of the blocks a var of `shape` is cut into."""
    rows = int(shape[0]) if len(shape) else 1
    numel = 1
    for d in shape:
        numel *= int(d)
    if not slice_var_up or len(shape) == 0 or rows <= 1:
        return [(0, rows)]
    count = min(n_pservers, max(1, numel // min_block_size))
    per = int(math.ceil(rows / float(count)))
    out, off = [], 0
    while off < rows:
        r = min(per, rows - off)
        out.append((off, r))
        off += r
    return out


def _bname(name, i, n):
    return name if n == 1 else "%s.block%d" % (name, i)


class _Chain:
    """One parameter's optimize ops and how each of their vars is placed."""

    def __init__(self, param, grad):
        self.param, self.grad = param, grad
        self.ops = []
        self.opt_op = None
        self.rows = []      # vars cut like the param (param and grad included)
        self.copies = []    # vars copied per block
        self.shared = []    # vars read, shared by name


class PServerPlan:
    """The analysis of one transpile: chains, blocks, placement."""

    def __init__(self, program, startup, eps, trainer_id, trainers, sync_mode, config):
        self.program, self.eps = program, eps
        self.startup = startup.clone()  # the original, before the in-place edit
        self.trainer_id, self.trainers, self.sync_mode, self.config = trainer_id, trainers, sync_mode, config
        self.block = program.global_block()
        self._analyse()
        self._place()

    # -- analysis --------------------------------------------------------------
    def _analyse(self):
        block = self.block
        chains, order, lr_ops, kept_opt = {}, [], [], []
        for op in block.ops:
            role = int(op.attr("op_role") or 0)
            if op.type.startswith("merged_"):
                raise _core.UnsupportedError("DistributeTranspiler: op %s (a merged optimizer) cannot be split "
                                             "across parameter servers; transpile the program minimize() made"
                                             % op.type)
            if role & OpRole.LRSched:
                lr_ops.append(op)
                continue
            if not role & OpRole.Optimize:
                continue
            rv = op.attr("op_role_var") or []
            if len(rv) < 2:
                kept_opt.append(op)  # e.g. clip_by_global_norm: spans every gradient, stays on the trainer
                continue
            p, g = rv[0], rv[1]
            ch = chains.get(p)
            if ch is None:
                ch = chains[p] = _Chain(p, g)
            ch.ops.append(op)
            if _is_optimizer_op(op.type):
                if ch.opt_op is not None:
                    raise _core.UnsupportedError("DistributeTranspiler: parameter %s has two optimizer ops (%s, %s)"
                                                 % (p, ch.opt_op.type, op.type))
                ch.opt_op = op
                order.append(p)
        for p, ch in chains.items():
            if ch.opt_op is None:
                raise _core.UnsupportedError(
                    "DistributeTranspiler: the optimize ops of parameter %s (%s) have no optimizer op this transpiler "
                    "knows (one with Param, Grad, LearningRate inputs and a ParamOut)"
                    % (p, ", ".join(o.type for o in ch.ops)))
        if not order:
            raise _core.InvalidArgumentError("DistributeTranspiler.transpile: the program has no optimizer ops; "
                                             "call optimizer.minimize(loss) before transpile")
        self.chains = [chains[p] for p in order]
        self.lr_ops, self.kept_opt = lr_ops, kept_opt
        lr_written = {a for op in lr_ops for a in op.output_arg_names}
        for ch in self.chains:
            self._classify(ch, lr_written)
        self.lr_vars = []
        for op in lr_ops:
            for a in op.input_arg_names + op.output_arg_names:
                if a not in self.lr_vars:
                    self.lr_vars.append(a)

    def _classify(self, ch, lr_written):
        pv = self.block.var(ch.param)
        if any(int(d) < 0 for d in pv.shape):
            raise _core.InvalidArgumentError("DistributeTranspiler: parameter %s has an unknown dim: %s"
                                             % (ch.param, list(pv.shape)))
        written = {a for op in ch.ops for a in op.output_arg_names}
        seen = []
        for op in ch.ops:
            for a in op.input_arg_names + op.output_arg_names:
                if a not in seen:
                    seen.append(a)
        ch.rows = [ch.param, ch.grad]
        for a in seen:
            if a in (ch.param, ch.grad):
                continue
            v = self.block._var_recursive(a)
            if a not in written:
                if not v.persistable and a not in lr_written:
                    raise _core.UnsupportedError(
                        "DistributeTranspiler: the optimize ops of parameter %s read %s, a temporary the trainer "
                        "computes; only persistables and LR-schedule outputs can be read on a pserver"
                        % (ch.param, a))
                ch.shared.append(a)
            elif tuple(v.shape) == tuple(pv.shape):
                ch.rows.append(a)
            else:
                ch.copies.append(a)

    # -- placement -----------------------------------------------------------------
    def _place(self):
        cfg = self.config
        method = cfg.split_method if cfg.split_method is not None else RoundRobin
        if not (isinstance(method, type) and issubclass(method, PSDispatcher)):
            raise _core.InvalidArgumentError("DistributeTranspilerConfig.split_method must be RoundRobin or HashName "
                                             "(a PSDispatcher class), got %r" % (method,))
        mbs = cfg.min_block_size
        if isinstance(mbs, bool) or not isinstance(mbs, int) or mbs < 1:
            raise _core.InvalidArgumentError("DistributeTranspilerConfig.min_block_size must be an int >= 1, got %r"
                                             % (mbs,))
        self.blocks = []  # dicts, in program order of the optimizer ops
        for ch in self.chains:
            shape = self.block.var(ch.param).shape
            parts = slice_rows(shape, len(self.eps), cfg.slice_var_up, mbs)
            if ch.opt_op.type == "lamb" and len(parts) > 1:
                # lamb's trust ratio ||param|| / ||r|| is over the whole parameter: per-block norms
                # would compute a different update
                raise _core.UnsupportedError(
                    "DistributeTranspiler: parameter %s (%s) would be sliced into %d blocks, but its lamb update "
                    "needs the norm of the whole parameter; set DistributeTranspilerConfig.slice_var_up = False"
                    % (ch.param, list(shape), len(parts)))
            norm_clip = [op for op in ch.ops if op.type == "clip_by_global_norm"]
            if norm_clip and len(parts) > 1:
                # ClipGradByNorm's clip is by the norm of the whole gradient: a block's norm would clip
                # differently (ClipGradByValue and L1 / L2 decay are per element and split fine)
                raise _core.UnsupportedError(
                    "DistributeTranspiler: parameter %s (%s) would be sliced into %d blocks, but its gradient is "
                    "clipped by its own norm (ClipGradByNorm), which needs the whole gradient; set "
                    "DistributeTranspilerConfig.slice_var_up = False or clip by value or by global norm"
                    % (ch.param, list(shape), len(parts)))
            ch.parts = parts
            for i, (off, rows) in enumerate(parts):
                self.blocks.append({"chain": ch, "index": i, "n": len(parts), "offset": off, "rows": rows,
                                    "param": _bname(ch.param, i, len(parts)), "grad": _bname(ch.grad, i, len(parts))})
        placement = method(self.eps).dispatch([b["param"] for b in self.blocks])
        for b, ep in zip(self.blocks, placement):
            b["endpoint"] = ep
        for ch in self.chains:
            ch.blocks = [b for b in self.blocks if b["chain"] is ch]

    def block_shape(self, name, b):
        shape = list(self.block._var_recursive(name).shape)
        if shape:
            shape[0] = b["rows"]
        return shape

    def rename(self, ch, b):
        """{original var name: block var name} for block b of chain ch."""
        m = {}
        for a in ch.rows + ch.copies:
            m[a] = _bname(a, b["index"], b["n"])
        for a in ch.shared:
            m[a] = a
        return m

    # -- checkpoint mapping ----------------------------------------------------------
    def var_map(self):
        out = {}
        for ch in self.chains:
            for a in ch.rows + ch.copies:
                v = self.block._var_recursive(a)
                if not v.persistable:
                    continue
                kind = "rows" if a in ch.rows else "copy"
                out[a] = (kind, [(b["endpoint"], _bname(a, b["index"], b["n"]),
                                  b["offset"] if kind == "rows" else 0,
                                  b["rows"] if kind == "rows" else (int(v.shape[0]) if v.shape else 1))
                                 for b in ch.blocks])
        for a in self._shared_persistables():
            v = self.block._var_recursive(a)
            rows = int(v.shape[0]) if v.shape else 1
            out[a] = ("copy", [(ep, a, 0, rows) for ep in self.eps if a in self.pserver_needs(ep)])
        for v in self.block.vars.values():
            if v.persistable and v.name not in out:
                out[v.name] = ("local", [])
        return out

    def _shared_persistables(self):
        names = []
        for ch in self.chains:
            for a in ch.shared:
                if self.block._var_recursive(a).persistable and a not in names:
                    names.append(a)
        for a in self.lr_vars:
            if self.block._var_recursive(a).persistable and a not in names:
                names.append(a)
        return names

    def pserver_needs(self, ep):
        """Shared / LR persistables a pserver declares."""
        names = list(a for a in self.lr_vars if self.block._var_recursive(a).persistable)
        for b in self.blocks:
            if b["endpoint"] == ep:
                for a in b["chain"].shared:
                    if self.block._var_recursive(a).persistable and a not in names:
                        names.append(a)
        return names

    def check_endpoint(self, endpoint, what):
        if endpoint not in self.eps:
            raise _core.InvalidArgumentError("DistributeTranspiler.%s: endpoint %r is not one of the pservers %s"
                                             % (what, endpoint, ",".join(self.eps)))


# Attr types of the RPC ops (ops/ops.def): set explicitly, so an empty list
# (no optimize block on a pserver) is still typed right.
_RPC_ATTR_TYPES = {"epmap": "STRINGS", "send_varnames": "STRINGS", "varnames": "STRINGS", "endpoints": "STRINGS",
                   "trainer_id": "INT", "sync_mode": "BOOL", "endpoint": "STRING", "Fanin": "INT",
                   "optimize_blocks": "INTS", "grad_to_block_id": "STRINGS", "lr_decay_block_id": "INT",
                   "stop_on_lost_trainer": "BOOL"}


def _rpc_op(block, type, inputs, outputs, attrs):
    op = block.append_op(type=type, inputs=inputs, outputs=outputs, attrs=attrs)
    for k in attrs:
        if k in _RPC_ATTR_TYPES:
            op._attr_types[k] = _RPC_ATTR_TYPES[k]
    return op


def _declare(dst, src_var, name=None, shape=None, persistable=None, parameter=False):
    name = name or src_var.name
    if dst.has_var(name):
        return dst.var(name)
    kw = dict(shape=list(src_var.shape) if shape is None else shape, dtype=src_var.dtype,
              persistable=src_var.persistable if persistable is None else persistable,
              stop_gradient=src_var.stop_gradient)
    if parameter:
        kw.pop("persistable")
        return dst.create_parameter(name, **kw)
    return dst.create_var(name=name, **kw)


def _copy_op(dst, op, rename=None):
    rn = rename or {}
    attrs = dict(op.all_attrs())
    if "op_role_var" in attrs:
        attrs["op_role_var"] = [rn.get(a, a) for a in attrs["op_role_var"]]
    new = dst.append_op(type=op.type, inputs={k: [rn.get(a, a) for a in op.input(k)] for k in op.input_names},
                        outputs={k: [rn.get(a, a) for a in op.output(k)] for k in op.output_names}, attrs=attrs)
    new._attr_types = dict(op._attr_types)
    return new


# ---- trainer ----------------------------------------------------------------------

def _append_recv_concat(plan, block, declare_from):
    """recv of every param block (one recv per param), then concat of split params."""
    ops = []
    for ch in plan.chains:
        pv = declare_from.var(ch.param)
        names = [b["param"] for b in ch.blocks]
        if len(names) > 1:
            for b in ch.blocks:
                _declare(block, pv, b["param"], plan.block_shape(ch.param, b), persistable=False)
        ops.append(_rpc_op(block, "recv", inputs={}, outputs={"Out": names},
                       attrs={"epmap": [b["endpoint"] for b in ch.blocks], "varnames": names,
                              "trainer_id": plan.trainer_id, "op_role": _RPC}))
    return ops


def _append_concats(plan, block):
    for ch in plan.chains:
        if len(ch.blocks) > 1:
            block.append_op(type="concat", inputs={"X": [b["param"] for b in ch.blocks]},
                            outputs={"Out": [ch.param]}, attrs={"axis": 0, "op_role": _DIST})


def trainer_program(plan):
    prog = plan.program.clone()
    block = prog.global_block()
    removed_ops = {id(op) for ch in plan.chains for op in ch.ops} | {id(op) for op in plan.lr_ops}
    src_ops = plan.block.ops
    kept = [new for old, new in zip(src_ops, block.ops) if id(old) not in removed_ops]
    dropped = [new for old, new in zip(src_ops, block.ops) if id(old) in removed_ops]
    used = {a for op in kept for a in op.input_arg_names + op.output_arg_names}
    produced_by_dropped = {a for op in dropped for a in op.output_arg_names}
    for op in kept:
        for a in op.input_arg_names:
            if a in produced_by_dropped and not block.var(a).persistable and \
                    a not in {ch.param for ch in plan.chains} | {ch.grad for ch in plan.chains}:
                raise _core.UnsupportedError("DistributeTranspiler: op %s on the trainer reads %s, which the "
                                             "optimize / LR ops moved to the pservers compute" % (op.type, a))
    block.ops = kept
    keep_vars = used | {ch.param for ch in plan.chains} | {ch.grad for ch in plan.chains}
    for op in dropped:
        for a in op.input_arg_names + op.output_arg_names:
            if a not in keep_vars and block.has_var(a):
                block._remove_var(a)
    for ch in plan.chains:
        if len(ch.blocks) > 1:
            gv = block.var(ch.grad)
            for b in ch.blocks:
                _declare(block, gv, b["grad"], plan.block_shape(ch.param, b), persistable=False)
            block.append_op(type="split", inputs={"X": [ch.grad]}, outputs={"Out": [b["grad"] for b in ch.blocks]},
                            attrs={"num": 0, "sections": [b["rows"] for b in ch.blocks], "axis": 0,
                                   "op_role": _DIST})
    for ch in plan.chains:
        names = [b["grad"] for b in ch.blocks]
        _rpc_op(block, "send", inputs={"X": names}, outputs={},
                attrs={"epmap": [b["endpoint"] for b in ch.blocks], "send_varnames": names,
                       "trainer_id": plan.trainer_id, "sync_mode": plan.sync_mode, "op_role": _RPC})
    if plan.sync_mode:
        _rpc_op(block, "send_barrier", inputs={}, outputs={},
                attrs={"endpoints": list(plan.eps), "trainer_id": plan.trainer_id, "op_role": _RPC})
    _append_recv_concat(plan, block, block)
    if plan.sync_mode:
        _rpc_op(block, "fetch_barrier", inputs={}, outputs={},
                attrs={"endpoints": list(plan.eps), "trainer_id": plan.trainer_id, "op_role": _RPC})
    _append_concats(plan, block)
    prog._pe_ps = {"role": "trainer", "pservers": list(plan.eps), "trainer_id": plan.trainer_id,
                   "trainers": plan.trainers, "sync_mode": plan.sync_mode, "vars": plan.var_map(),
                   "meta": {v.name: (list(v.shape), v.dtype, v.is_parameter)
                            for v in plan.block.vars.values() if v.persistable}}
    return prog


def edit_trainer_startup(plan, startup):
    """In place: drop the init of the state moved to the pservers, append recv + concat of every param."""
    if getattr(startup, "_pe_ps", None) is not None:
        raise _core.InvalidArgumentError("DistributeTranspiler.transpile: startup_program was already transpiled "
                                         "(it receives the params from the pservers); pass the original one")
    moved = set()
    for name, (kind, _) in plan.var_map().items():
        if kind != "local" and name not in {ch.param for ch in plan.chains}:
            moved.add(name)
    block = startup.global_block()
    keep = []
    for op in block.ops:
        outs = op.output_arg_names
        if outs and all(a in moved for a in outs):
            continue
        keep.append(op)
    block.ops = keep
    for a in moved:
        if block.has_var(a):
            block._remove_var(a)
    for ch in plan.chains:
        if not block.has_var(ch.param):
            _declare(block, plan.block.var(ch.param), parameter=True)
    _append_recv_concat(plan, block, block)
    _append_concats(plan, block)
    startup._pe_ps = {"role": "trainer_startup", "pservers": list(plan.eps), "trainer_id": plan.trainer_id}


# ---- pserver ---------------------------------------------------------------------

def pserver_program(plan, endpoint):
    plan.check_endpoint(endpoint, "get_pserver_program")
    prog = Program()
    prog.random_seed = plan.program.random_seed
    g = prog.global_block()
    src = plan.block
    where = {}  # block var -> (kind, original, offset, rows) for fluid.io
    for a in plan.pserver_needs(endpoint):
        _declare(g, src._var_recursive(a))
        where[a] = ("copy", a, 0, None)
    lr_block = -1
    if plan.lr_ops:
        for a in plan.lr_vars:
            _declare(g, src._var_recursive(a))
        lb = prog._create_block(0)
        for op in plan.lr_ops:
            _copy_op(lb, op)
        lr_block = lb.idx
        prog._current_block_idx = 0
    optimize_blocks, grad_to_block = [], []
    for b in plan.blocks:
        if b["endpoint"] != endpoint:
            continue
        ch = b["chain"]
        rn = plan.rename(ch, b)
        for a in ch.rows:
            v = src._var_recursive(a)
            _declare(g, v, rn[a], plan.block_shape(a, b), parameter=(a == ch.param))
            if v.persistable:
                where[rn[a]] = ("rows", a, b["offset"], b["rows"])
        for a in ch.copies:
            v = src._var_recursive(a)
            _declare(g, v, rn[a])
            if v.persistable:
                where[rn[a]] = ("copy", a, 0, None)
        for a in ch.shared:
            _declare(g, src._var_recursive(a))
        sb = prog._create_block(0)
        for op in ch.ops:
            _copy_op(sb, op, rn)
        prog._current_block_idx = 0
        optimize_blocks.append(sb.idx)
        grad_to_block.append("%s:%d" % (b["grad"], sb.idx))
    _rpc_op(g, "listen_and_serv", inputs={}, outputs={},
            attrs={"endpoint": endpoint, "Fanin": plan.trainers, "sync_mode": plan.sync_mode,
                   "optimize_blocks": optimize_blocks, "grad_to_block_id": grad_to_block,
                   "lr_decay_block_id": lr_block,
                   "stop_on_lost_trainer": bool(getattr(plan.config, "stop_on_lost_trainer", False)), "op_role": _RPC})
    prog._pe_ps_server = {"endpoint": endpoint, "pservers": list(plan.eps), "vars": where}
    return prog


def pserver_startup(plan, endpoint, pserver_prog):
    plan.check_endpoint(endpoint, "get_startup_program")
    if pserver_prog is None:
        pserver_prog = pserver_program(plan, endpoint)
    where = getattr(pserver_prog, "_pe_ps_server", None)
    if where is None or where["endpoint"] != endpoint:
        raise _core.InvalidArgumentError("DistributeTranspiler.get_startup_program: pserver_program is not this "
                                         "transpiler's program for endpoint %r" % endpoint)
    # full vars the blocks are cut / copied from
    full = []
    for bname, (kind, orig, off, rows) in where["vars"].items():
        if orig not in full:
            full.append(orig)
    src_start = plan.startup
    prog = Program()
    prog.random_seed = src_start.random_seed
    g = prog.global_block()
    sblock = src_start.global_block()
    needed = set(full)
    for op in sblock.ops:
        outs = op.output_arg_names
        if not any(a in needed for a in outs):
            continue
        for a in op.input_arg_names + outs:
            if not g.has_var(a):
                v = sblock._find_var_recursive(a) or plan.block._find_var_recursive(a)
                if v is None:
                    raise _core.InvalidArgumentError("DistributeTranspiler.get_startup_program: var %s of startup op "
                                                     "%s is not declared" % (a, op.type))
                _declare(g, v, persistable=(a in where["vars"]))  # a full var the blocks come from: a temporary
        _copy_op(g, op)
    pg = pserver_prog.global_block()
    for bname, (kind, orig, off, rows) in where["vars"].items():
        if bname == orig:
            if g.has_var(orig):
                g.var(orig).persistable = True
            continue
        if not g.has_var(orig):
            continue  # not initialized by the startup program (a checkpoint load may fill it)
        _declare(g, pg.var(bname), persistable=True)
        if kind == "rows":
            g.append_op(type="slice", inputs={"Input": [orig]}, outputs={"Out": [bname]},
                        attrs={"axes": [0], "starts": [off], "ends": [off + rows]})
        else:
            g.append_op(type="assign", inputs={"X": [orig]}, outputs={"Out": [bname]})
    return prog
