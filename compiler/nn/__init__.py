"""Neural-network functions (`compiler.nn.functional`)."""
from ..optimizer import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue  # noqa: F401
from . import functional  # noqa: F401
