"""pe.metric — accuracy (top_k + accuracy ops, as Paddle's static accuracy)."""
from . import _core
from .layer_helper import LayerHelper, check_variable

__all__ = ["accuracy"]


def accuracy(input, label, k=1, correct=None, total=None, name=None):
    """Fraction of rows whose label is among the k highest scores of input: a float32 [1] Variable."""
    check_variable(input, "input", "accuracy")
    check_variable(label, "label", "accuracy")
    if int(k) < 1:
        raise _core.InvalidArgumentError("accuracy: k must be >= 1, got %r" % (k,))
    helper = LayerHelper("accuracy", name)
    shape = list(input.shape[:-1]) + [int(k)]
    topk_out = helper.create_variable_for_type_inference(input.dtype, shape=shape, stop_gradient=True)
    topk_idx = helper.create_variable_for_type_inference("int64", shape=shape, stop_gradient=True)
    helper.append_op("top_k", {"X": [input]}, {"Out": [topk_out], "Indices": [topk_idx]}, {"k": int(k)})
    acc = helper.create_variable_for_type_inference("float32", shape=[1], stop_gradient=True)
    if correct is None:
        correct = helper.create_variable_for_type_inference("int32", shape=[1], stop_gradient=True)
    if total is None:
        total = helper.create_variable_for_type_inference("int32", shape=[1], stop_gradient=True)
    helper.append_op("accuracy", {"Out": [topk_out], "Indices": [topk_idx], "Label": [label]},
                     {"Accuracy": [acc], "Correct": [correct], "Total": [total]})
    return acc
