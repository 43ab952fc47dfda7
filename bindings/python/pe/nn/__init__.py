"""pe.nn — functional ops, initializers, gradient clipping (static and eager
mode) and Paddle 2.x's Layer classes (eager mode: pe/nn/layer.py)."""
from . import functional  # noqa: F401
from . import initializer  # noqa: F401
from .clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue  # noqa: F401
from .layer import (Layer, Linear, Conv2D, MaxPool2D, AvgPool2D, BatchNorm2D, LayerNorm, Embedding,  # noqa: F401
                    Dropout, ReLU, Sigmoid, Tanh, GELU, Softmax, Flatten, Sequential, LayerList, MSELoss,
                    CrossEntropyLoss, L1Loss)
from . import layer as _layer

__all__ = ["functional", "initializer", "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue"] + _layer.__all__
