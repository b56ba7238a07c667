"""The emulated testbed (``gradwire emulate``): real kernels and real processes in network
namespaces, joined by a user-space switch that runs gradwire-core's egress ports."""

from .binary import EmulatorUnavailable, find_binary, unavailable_reason
from .network import EmulatedNetwork

__all__ = [
    "EmulatedNetwork",
    "EmulatorUnavailable",
    "find_binary",
    "unavailable_reason",
]
