"""`compiler.nn`: Paddle's layers (`nn.Layer`, `nn.Linear`, ...) and functions (`nn.functional`).

    import compiler.nn as nn

    class Net(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)
"""
from ..optimizer import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue  # noqa: F401
from . import functional  # noqa: F401
from . import initializer  # noqa: F401
from .layer import (Layer, Parameter, ParamAttr, get_default_dtype,  # noqa: F401
                    set_default_dtype, unique_name_guard)
from .layers import *  # noqa: F401,F403
from .layers import __all__ as _layers

__all__ = ["Layer", "Parameter", "ParamAttr", "get_default_dtype", "set_default_dtype",
           "unique_name_guard", "functional",
           "initializer", "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue", *_layers]
