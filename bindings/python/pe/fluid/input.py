"""fluid.data and fluid.embedding — Paddle 1.6's top-level input layers.

fluid.data(name, shape, dtype, lod_level) declares a feed variable of
exactly `shape` (None / -1 for a dim fed at run time; no batch dim is
added, unlike fluid.layers.data). fluid.embedding(input, size, ...) is the
lookup_table_v2 layer: rows of a [size[0], size[1]] parameter picked by the
int64 ids, output shape input.shape + [size[1]] (so ids [N, 1] give
[N, 1, D]; 1.x's fluid.layers.embedding is the older lookup_table op:
ids [..., 1] -> [..., D], see layers.py). is_sparse=True (Paddle's
SelectedRows gradient) trains the table with the dense gradient of the
whole table, which gives Paddle's update (the optimizer pass refuses the
few optimizer settings where it would not; docs/guide.md "Porting fluid
code"); is_distributed=True is refused. fluid.one_hot(input,
depth) is 1.8's one_hot_v2 layer: int ids of any shape -> float32
input.shape + [depth] (fluid.layers.one_hot, 1.x's one_hot op, replaces
a last dim of 1).
"""
from .. import _core
from ..framework import Variable
from ..layer_helper import LayerHelper, check_variable
from . import layers

__all__ = ["data", "embedding", "one_hot"]


def data(name, shape, dtype="float32", lod_level=0):
    """A feed variable of exactly `shape` (None or -1: any size at run time)."""
    if not isinstance(shape, (list, tuple)):
        raise TypeError("fluid.data('%s'): shape must be a list or tuple, got %s" % (name, type(shape).__name__))
    return layers.data(name, list(shape), append_batch_size=False, dtype=dtype, lod_level=lod_level)


def embedding(input, size, is_sparse=False, is_distributed=False, padding_idx=None, param_attr=None,
              dtype="float32"):
    """lookup_table_v2: input.shape + [size[1]]; param_attr (a ParamAttr or a
    name) names the table, so layers given the same name share one table."""
    return layers._embedding("lookup_table_v2", "fluid.embedding", input, size, is_sparse, is_distributed,
                             padding_idx, param_attr, dtype)


def one_hot(input, depth, allow_out_of_range=False):
    """one_hot_v2: float32 input.shape + [depth]; an id outside [0, depth) is a run-time error, or an
    all-zero row with allow_out_of_range."""
    check_variable(input, "input", "fluid.one_hot")
    if input.dtype not in ("int32", "int64"):
        raise TypeError("fluid.one_hot: input must be int32 or int64, got %s" % input.dtype)
    if isinstance(depth, Variable):
        raise _core.UnsupportedError("fluid.one_hot: depth must be an int (a Variable is not supported yet)")
    helper = LayerHelper("one_hot_v2")
    out = helper.create_variable_for_type_inference("float32", shape=list(input.shape) + [int(depth)])
    out.stop_gradient = True
    helper.append_op("one_hot_v2", {"X": [input]}, {"Out": [out]},
                     {"depth": int(depth), "allow_out_of_range": bool(allow_out_of_range), "dtype": 0})
    return out
