"""The emulated testbed (``gradwire emulate``): real kernels and real processes in network
namespaces, joined by a user-space switch that runs gradwire-core's egress ports."""

from .binary import EmulatorUnavailable, switch_command, unavailable_reason
from .network import EmulatedNetwork

__all__ = [
    "EmulatedNetwork",
    "EmulatorUnavailable",
    "switch_command",
    "unavailable_reason",
]
