"""pe.nn.initializer — Paddle's initializers (implemented in pe/initializer.py)."""
from ..initializer import *  # noqa: F401,F403
from ..initializer import __all__  # noqa: F401
from ..initializer import (ConstantInitializer, UniformInitializer, NormalInitializer,  # noqa: F401
                           TruncatedNormalInitializer, MSRA)
