"""gradwire as a torch.distributed backend, and a loss-tolerant DDP hook.

>>> import torch.distributed as dist
>>> import gradwire.torch                       # registers the "gradwire" backend
>>> dist.init_process_group("gradwire")         # under torchrun or `gradwire launch`
>>> model = DDP(model)                          # buckets are summed by gradwire

Options come from ``gradwire.torch.Options`` passed as ``pg_options`` or from the
environment (``GRADWIRE_LOSS_BOUND``, ``GRADWIRE_ALGORITHM``, ``GRADWIRE_TRANSPORT``,
``GRADWIRE_INJECT_LOSS``, ``GRADWIRE_MSS``, ``GRADWIRE_PEER_TIMEOUT``). See docs/torch.md.

(This package is named ``gradwire.torch``; inside it ``import torch`` is PyTorch, as
imports are absolute.)
"""

from __future__ import annotations

import torch.distributed as _dist

from gradwire.torch.backend import GradwireBackend, Stats, create
from gradwire.torch.hook import LossTolerantState, loss_tolerant_hook
from gradwire.torch.options import ENV, Options
from gradwire.torch.scheduled import ScheduledState, scheduled_hook

BACKEND = "gradwire"


def register() -> None:
    """Registers the "gradwire" backend with torch.distributed (once). Runs on import; torch
    versions that read the ``torch.distributed.backends`` entry point call it by itself, so
    ``init_process_group("gradwire")`` works there even without the import."""
    if BACKEND.upper() not in _dist.Backend._plugins:
        # CUDA tensors are staged through pinned host memory (cuda.py).
        _dist.Backend.register_backend(BACKEND, create, extended_api=True, devices=["cpu", "cuda"])


register()


def backend_of(group: _dist.ProcessGroup | None = None) -> GradwireBackend:
    """The gradwire backend object of `group` (default: the world group)."""
    import torch

    pg = group if group is not None else _dist.group.WORLD
    if pg is None:
        raise RuntimeError("no process group: call dist.init_process_group('gradwire') first")
    # older torch has the backend as the whole group (backend.py: _subclassable_base)
    b = pg if isinstance(pg, GradwireBackend) else pg._get_backend(torch.device("cpu"))
    if not isinstance(b, GradwireBackend):
        raise TypeError(f"this process group's CPU backend is {type(b).__name__}, not gradwire")
    return b


__all__ = [
    "BACKEND",
    "ENV",
    "GradwireBackend",
    "LossTolerantState",
    "Options",
    "ScheduledState",
    "Stats",
    "backend_of",
    "create",
    "loss_tolerant_hook",
    "scheduled_hook",
    "register",
]
