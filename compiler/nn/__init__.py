"""Neural-network functions (`compiler.nn.functional`)."""
from . import functional  # noqa: F401
from ..optimizer import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue  # noqa: F401
