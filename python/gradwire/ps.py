"""Parameter-server calls on the default communicator: ``gradwire.ps.push(x, loss_bound)``
and ``gradwire.ps.pull(x)``. See ``gradwire.runtime._PS``."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from gradwire.runtime import Report, _get


def push(x: Any, loss_bound: float = 0.0) -> Report:
    """Sum every worker's shard of `x` into its server's `x` (lossy within `loss_bound`)."""
    return _get().ps.push(x, loss_bound)


def pull(x: Any, loss_bound: float = 0.0) -> Report:
    """Copy each server's shard of `x` to every worker's `x` (reliable by default)."""
    return _get().ps.pull(x, loss_bound)


def push_async(x: Any, loss_bound: float = 0.0) -> concurrent.futures.Future:
    return _get().ps.push_async(x, loss_bound).future()


def pull_async(x: Any, loss_bound: float = 0.0) -> concurrent.futures.Future:
    return _get().ps.pull_async(x, loss_bound).future()
