"""A DDP communication hook for a job that keeps a Gloo process group beside gradwire.

Superseded by the "gradwire" torch.distributed backend and its hook, which need no second
group (``import gradwire.torch``; ``gradwire.torch.loss_tolerant_hook``, docs/torch.md).
This hook still works as before, and on a "gradwire" world group too (it then uses that
group's communicator when ``gradwire.init()`` was not called).

DDP keeps its process group (Gloo on CPU) for its own setup (broadcasting the initial
parameters); every gradient bucket goes through gradwire instead, in place, with the
algorithm and loss bound of the hook's state:

>>> import torch.distributed as dist, gradwire
>>> from torch.nn.parallel import DistributedDataParallel as DDP
>>> dist.init_process_group("gloo")       # torchrun-style environment
>>> gradwire.init(master_port=...)        # its own port: rank 0 listens on it too
>>> model = DDP(model)
>>> state = gradwire.ddp.HookState(loss_bound=0.01)
>>> model.register_comm_hook(state, gradwire.ddp.allreduce_hook)
>>> ...train...
>>> state.bytes_lost, state.calls         # what the loss bound cost so far

The result is averaged over ranks, as DDP's own allreduce does. Every rank ends with the
same bits (the lossy half of a gradwire allreduce is its reduce; the result is broadcast
reliably), so the replicas never drift apart. Buckets must be float32 or float64.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

from gradwire import runtime


@dataclass
class HookState:
    """How the hook sums buckets, and what it has seen.

    `comm` is the communicator to use (default: the one `gradwire.init()` made).
    """

    comm: runtime.Communicator | None = None
    algorithm: str = "ring"
    loss_bound: float = 0.0
    calls: int = 0
    bytes_sent: int = 0
    bytes_lost: int = 0
    seconds: float = 0.0
    # One thread resolves the buckets' futures in the order they were issued (calls complete
    # in that order), so a training step costs no thread start per bucket.
    _waiter: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gradwire-ddp"), repr=False
    )

    def __post_init__(self) -> None:
        if self.algorithm not in runtime.ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algorithm!r}: expected one of {', '.join(runtime.ALGORITHMS)}")
        if not 0.0 <= self.loss_bound < 1.0:
            raise ValueError(f"loss_bound must be in [0, 1), got {self.loss_bound}")

    def _record(self, rep: runtime.Report) -> None:
        self.calls += 1
        self.bytes_sent += rep.bytes_sent
        self.bytes_lost += rep.bytes_lost
        self.seconds += rep.seconds


def _default_comm() -> runtime.Communicator:
    if runtime.is_initialized():
        return runtime._get()
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_backend() == "gradwire":
        from gradwire.torch import backend_of

        return backend_of().comm
    return runtime._get()  # raises "call gradwire.init() first"


def allreduce_hook(state, bucket):
    """Sum `bucket`'s gradients over all ranks with gradwire and average them; returns the
    `torch.futures.Future` DDP waits on.

    (DDP refuses a hook whose `bucket` is annotated as anything but `dist.GradBucket`, and
    this module does not import torch until a hook runs: hence no annotations.)"""
    import torch

    buf = bucket.buffer()
    if buf.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"gradwire sums float32 or float64 gradients; this bucket is {buf.dtype}")
    comm = state.comm if state.comm is not None else _default_comm()
    work = comm.allreduce_async(buf, algorithm=state.algorithm, loss_bound=state.loss_bound)
    fut: torch.futures.Future = torch.futures.Future()

    def resolve() -> None:
        try:
            state._record(work.wait())
            buf.div_(comm.world_size)
            fut.set_result(buf)
        except BaseException as e:  # noqa: BLE001 - DDP raises it from the backward pass
            fut.set_exception(e)

    state._waiter.submit(resolve)
    return fut
