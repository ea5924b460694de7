"""Neural-network functions (`compiler.nn.functional`)."""
from . import functional  # noqa: F401
