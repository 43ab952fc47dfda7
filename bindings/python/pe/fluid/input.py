"""fluid.data and fluid.embedding — Paddle 1.6's top-level input layers.

fluid.data(name, shape, dtype, lod_level) declares a feed variable of
exactly `shape` (None / -1 for a dim fed at run time; no batch dim is
added, unlike fluid.layers.data). fluid.embedding(input, size, ...) is the
lookup_table_v2 layer: rows of a [size[0], size[1]] parameter picked by the
int64 ids, output shape input.shape + [size[1]] (so ids [N, 1] give
[N, 1, D]; 1.x's fluid.layers.embedding is the older lookup_table op:
ids [..., 1] -> [..., D], see layers.py). A sparse
(SelectedRows) gradient, is_sparse=True, is refused: PE's gradients are
dense tensors, and a dense gradient is not the same update for a sparse
table under regularization or Adagrad / Adam moments.
"""
from . import layers

__all__ = ["data", "embedding"]


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
