"""Options of the "gradwire" torch.distributed backend, from code or the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from gradwire import runtime

# Environment variable of each option that has one (read when the process group is created).
ENV = {
    "loss_bound": "GRADWIRE_LOSS_BOUND",
    "algorithm": "GRADWIRE_ALGORITHM",
    "transport": "GRADWIRE_TRANSPORT",
    "inject_loss": "GRADWIRE_INJECT_LOSS",
    "mss": "GRADWIRE_MSS",
    "peer_timeout": "GRADWIRE_PEER_TIMEOUT",
}


@dataclass
class Options:
    """How the backend moves tensors. Pass as ``init_process_group("gradwire",
    pg_options=Options(...))``; a field left at None takes its environment variable (see
    ``ENV``), else the default shown in ``resolved()``.

    - ``loss_bound``: share of each transfer the reduce half of a float SUM/AVG allreduce
      may lose (zeros instead of data); 0 is lossless. Broadcasts, gathers, barriers and
      every other collective are always lossless.
    - ``algorithm``: allreduce schedule, one of ``gradwire.runtime.ALGORITHMS``.
    - ``transport``: ``"dlcp"`` (default) or another transport the runtime knows.
    - ``inject_loss``: share of this rank's outgoing datagrams dropped on purpose (a test
      of the loss bound on a clean network).
    - ``mss``: payload bytes per datagram (default: path MTU less headers).
    - ``peer_timeout``: seconds a call may go without progress before it fails (default:
      the group's torch.distributed timeout, ``init_process_group(timeout=...)``).
    """

    loss_bound: float | None = None
    algorithm: str | None = None
    transport: str | None = None
    inject_loss: float | None = None
    mss: int | None = None
    peer_timeout: float | None = None
    extra: dict = field(default_factory=dict)  # more keyword arguments for runtime.Communicator

    def resolved(self) -> Options:
        """A copy with every None replaced by its environment variable or default, checked."""
        defaults = {
            "loss_bound": 0.0,
            "algorithm": "ring",
            "transport": "dlcp",
            "inject_loss": 0.0,
            "mss": None,
            "peer_timeout": None,  # the process group's timeout
        }
        casts = {
            "loss_bound": float,
            "algorithm": str,
            "transport": str,
            "inject_loss": float,
            "mss": int,
            "peer_timeout": float,
        }
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.name in ENV and os.environ.get(ENV[f.name], "") != "":
                raw = os.environ[ENV[f.name]]
                try:
                    v = casts[f.name](raw)
                except ValueError:
                    raise ValueError(f"{ENV[f.name]}={raw!r} is not a valid {f.name}") from None
            out[f.name] = defaults.get(f.name) if v is None else v
        o = Options(**out)
        if o.algorithm not in runtime.ALGORITHMS:
            raise ValueError(f"unknown algorithm {o.algorithm!r}: expected one of {', '.join(runtime.ALGORITHMS)}")
        if o.transport not in runtime.TRANSPORTS:
            raise ValueError(f"unknown transport {o.transport!r}: expected one of {', '.join(runtime.TRANSPORTS)}")
        if not 0.0 <= o.loss_bound < 1.0:
            raise ValueError(f"loss_bound must be in [0, 1), got {o.loss_bound}")
        if o.peer_timeout is not None and not o.peer_timeout > 0:
            raise ValueError(f"peer_timeout must be a positive number of seconds, got {o.peer_timeout}")
        if not 0.0 <= o.inject_loss < 1.0:
            raise ValueError(f"inject_loss must be in [0, 1), got {o.inject_loss}")
        return o
