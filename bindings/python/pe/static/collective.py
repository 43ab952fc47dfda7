"""pe.static.collective — Paddle's collective ops in a static program, so a
program carries its own collectives.

    x = pe.static.data("x", [None, 3], "float32")
    s = collective.append_collective("c_allreduce_sum", x)           # in place: s is x
    g = collective.append_collective("c_allgather", x, nranks=4)     # a new var, 4 x the rows
    b = collective.append_collective("c_broadcast", x, root=1)

The ranks are every place of the ParallelExecutor that runs the program,
and with num_trainers > 1 every trainer's places (global rank = trainer x
places + place); ring_id 0 is that world, the only ring PE has. A
single-place Executor is a world of one rank (each op is Out = X). The
multi-device pass turns each op into a collective handle of the graph
(docs/architecture.md), so no kernel waits for another place.

In place like Paddle (Out = X) for c_allreduce_*, c_broadcast,
c_reduce_* and the c_sync_* ops, unless `out=` names another Variable
(then X is copied to Out and the collective runs on Out); c_allgather,
c_scatter and c_identity make a new Variable.
"""
from .. import _core
from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["append_collective", "COLLECTIVE_OPS"]

# op type -> (attrs it takes with their defaults, in place by default)
COLLECTIVE_OPS = {
    "c_allreduce_sum": ({"ring_id": 0, "use_calc_stream": False, "use_model_parallel": False}, True),
    "c_allreduce_max": ({"ring_id": 0, "use_calc_stream": False, "use_model_parallel": False}, True),
    "c_allreduce_min": ({"ring_id": 0, "use_calc_stream": False, "use_model_parallel": False}, True),
    "c_allreduce_prod": ({"ring_id": 0, "use_calc_stream": False, "use_model_parallel": False}, True),
    "c_broadcast": ({"ring_id": 0, "root": 0, "use_calc_stream": False}, True),
    "c_reduce_sum": ({"ring_id": 0, "root_id": 0, "use_calc_stream": False}, True),
    "c_reduce_max": ({"ring_id": 0, "root_id": 0, "use_calc_stream": False}, True),
    "c_reduce_min": ({"ring_id": 0, "root_id": 0, "use_calc_stream": False}, True),
    "c_reduce_prod": ({"ring_id": 0, "root_id": 0, "use_calc_stream": False}, True),
    "c_allgather": ({"ring_id": 0, "nranks": None, "use_calc_stream": False}, False),
    "c_scatter": ({"ring_id": 0, "root": 0, "nranks": None, "use_calc_stream": False}, False),
    "c_identity": ({"ring_id": 0, "use_calc_stream": False, "use_model_parallel": False}, False),
    "c_sync_calc_stream": ({}, True),
    "c_sync_comm_stream": ({"ring_id": 0}, True),
}


def _err(msg):
    return _core.InvalidArgumentError("append_collective: " + msg)


def append_collective(op_type, x, out=None, **attrs):
    """Appends collective op `op_type` over x to the current block of the
    default main program and returns its output Variable (x itself for the
    in-place ops unless `out` is given; a list for the c_sync_* ops when x
    is a list). attrs: Paddle's (ring_id, root, root_id, nranks,
    use_calc_stream, use_model_parallel); c_allgather and c_scatter need nranks."""
    if op_type not in COLLECTIVE_OPS:
        raise _err("unknown op type %r; PE has %s" % (op_type, ", ".join(sorted(COLLECTIVE_OPS))))
    known, in_place = COLLECTIVE_OPS[op_type]
    sync = op_type.startswith("c_sync_")
    xs = list(x) if sync and isinstance(x, (list, tuple)) else [x]
    for v in xs:
        if not isinstance(v, Variable):
            raise TypeError("append_collective(%s): x must be a static Variable (pe.static.data or a layer's "
                            "output), got %s" % (op_type, type(v).__name__))
    unknown = sorted(set(attrs) - set(known))
    if unknown:
        raise _err("%s has no attr %s (its attrs: %s)" % (op_type, ", ".join(unknown),
                                                          ", ".join(sorted(known)) or "none"))
    full = {k: attrs.get(k, d) for k, d in known.items()}
    if full.get("ring_id", 0) != 0:
        raise _err("%s: ring_id %s: PE has one communication ring, ring_id 0 (every place of the "
                   "ParallelExecutor, across its trainers)" % (op_type, full["ring_id"]))
    if op_type in ("c_allgather", "c_scatter"):
        if full["nranks"] is None or int(full["nranks"]) < 1:
            raise _err("%s needs nranks >= 1 (the ranks of the world: trainers x places), got %r"
                       % (op_type, full["nranks"]))
        full["nranks"] = int(full["nranks"])
    helper = LayerHelper(op_type)
    if out is not None:
        outs = list(out) if sync and isinstance(out, (list, tuple)) else [out]
        if len(outs) != len(xs) or not all(isinstance(o, Variable) for o in outs):
            raise _err("%s: out must be %d Variable(s), like x" % (op_type, len(xs)))
    elif in_place:
        outs = xs
    else:
        shape = list(xs[0].shape)
        if op_type == "c_allgather" and shape and shape[0] > 0:
            shape[0] *= full["nranks"]
        if op_type == "c_scatter" and shape and shape[0] > 0:
            if shape[0] % full["nranks"]:
                raise _err("c_scatter: x has %d rows, not a multiple of nranks %d" % (shape[0], full["nranks"]))
            shape[0] //= full["nranks"]
        outs = [helper.create_variable_for_type_inference(xs[0].dtype, shape=shape,
                                                          stop_gradient=xs[0].stop_gradient)]
    helper.append_op(op_type, {"X": xs}, {"Out": outs}, full)
    return outs if sync and isinstance(x, (list, tuple)) else outs[0]
