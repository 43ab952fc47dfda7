"""pe.ParamAttr — how a layer creates its parameter (Paddle's ParamAttr)."""
from . import _core
from .initializer import Initializer
from .regularizer import L1Decay, L2Decay

__all__ = ["ParamAttr", "WeightNormParamAttr"]


class ParamAttr:
    """name, initializer, learning_rate (multiplier of the optimizer's), regularizer,
    trainable (False: the parameter gets no gradient and no update)."""

    def __init__(self, name=None, initializer=None, learning_rate=1.0, regularizer=None, trainable=True,
                 do_model_average=True, need_clip=True):
        if name is not None and not isinstance(name, str):
            raise TypeError("ParamAttr(name=) must be a str, got %s" % type(name).__name__)
        if initializer is not None and not isinstance(initializer, Initializer):
            raise TypeError("ParamAttr(initializer=) must be a pe.nn.initializer, got %s" % type(initializer).__name__)
        self.name = name
        self.initializer = initializer
        self.learning_rate = float(learning_rate)
        self.regularizer = regularizer
        self.trainable = bool(trainable)
        self.do_model_average = do_model_average
        self.need_clip = need_clip

    @staticmethod
    def _to_attr(arg):
        """None -> default ParamAttr; False -> False (no parameter); str -> named;
        Initializer -> with that initializer; ParamAttr as is."""
        if arg is None:
            return ParamAttr()
        if arg is False:
            return False
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        if isinstance(arg, (L2Decay, L1Decay)):
            return ParamAttr(regularizer=arg)
        if arg is True:
            return ParamAttr()
        raise TypeError("cannot make a ParamAttr from %r" % (arg,))

    def __repr__(self):
        return "ParamAttr(name=%r, initializer=%r, learning_rate=%g, regularizer=%r, trainable=%r)" % (
            self.name, self.initializer, self.learning_rate, self.regularizer, self.trainable)


class WeightNormParamAttr(ParamAttr):
    def __init__(self, *a, **k):
        raise _core.UnsupportedError("WeightNormParamAttr is not supported by PE")
