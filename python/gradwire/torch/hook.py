"""A DDP communication hook on the "gradwire" process group: lossy within a bound, with
front layers first on the wire.

>>> import gradwire.torch as gt
>>> dist.init_process_group("gradwire")
>>> model = DDP(model)
>>> state = gt.LossTolerantState(loss_bound=0.01)
>>> model.register_comm_hook(state, gt.loss_tolerant_hook)
>>> ...train...
>>> state.bytes_lost, state.calls

Like PyTorch's PowerSGD hook, the state holds the settings and what the hook has seen.
Each bucket is averaged over the ranks with gradwire's allreduce (the reduce half may lose
up to `loss_bound` of each transfer; the result is broadcast reliably, so replicas stay
bit-identical).

Bucket priority. DDP hands buckets over in backward order: back layers first, the front
layers last; the next forward pass needs the front layers first. Every rank must issue
the runtime's calls in the same order, so the order is decided from the buckets' arrival
sequence alone (the same on every rank), never from timing: buckets are cut into chunks of
`chunk_bytes`; at each arrival every pending chunk is ordered front layers first (DDP
numbers buckets from the back, so a higher bucket index is further front) and issued until
at most `holdback_bytes` of the step's bytes stay held back; the last bucket of the step
flushes the rest. The held-back back-layer chunks thus go on the wire after the front
layers' buckets. With `priority=False` buckets go out whole, in arrival order.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from gradwire import runtime

# Tests only: CPU buckets take the GPU path too, with host memory standing in (cuda.py).
_STAGE_ALL = runtime._env_flag("GRADWIRE_STAGE_CPU_FOR_TESTS")


@dataclass
class LossTolerantState:
    """Settings of `loss_tolerant_hook` and what it has seen.

    `process_group`: a "gradwire" group (default: the world group). `loss_bound`: share of
    each reduce transfer that may be lost (0 = lossless; `gradwire tolerance` measures a
    model's). `algorithm`: one of gradwire.runtime.ALGORITHMS. `priority`, `chunk_bytes`,
    `holdback_bytes`: bucket priority (module docstring)."""

    process_group: Any = None
    loss_bound: float = 0.0
    algorithm: str = "ring"
    priority: bool = True
    chunk_bytes: int = 1 << 20
    holdback_bytes: int = 4 << 20
    calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    bytes_lost: int = 0
    seconds: float = 0.0
    last_done: float = 0.0  # time.perf_counter() when the last call completed
    # (bucket index, chunk number) in the order this step's chunks went to the runtime.
    issue_order: list = field(default_factory=list, repr=False)
    _pending: list = field(default_factory=list, repr=False)
    _arrived: int = 0
    _issued: int = 0
    _comm: Any = field(default=None, repr=False)
    _waiter: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gradwire-hook"),
        repr=False,
    )

    def __post_init__(self) -> None:
        if self.algorithm not in runtime.ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algorithm!r}: expected one of {', '.join(runtime.ALGORITHMS)}")
        if not 0.0 <= self.loss_bound < 1.0:
            raise ValueError(f"loss_bound must be in [0, 1), got {self.loss_bound}")
        if self.chunk_bytes < 1024:
            raise ValueError(f"chunk_bytes must be at least 1024, got {self.chunk_bytes}")

    def comm(self) -> runtime.Communicator:
        if self._comm is None:
            from gradwire.torch import backend_of

            self._comm = backend_of(self.process_group).comm
        return self._comm

    def _record(self, rep: runtime.Report) -> None:
        self.calls += 1
        self.bytes_sent += rep.bytes_sent
        self.bytes_received += rep.bytes_received
        self.bytes_lost += rep.bytes_lost
        self.seconds += rep.seconds
        self.last_done = time.perf_counter()


class _Bucket:
    def __init__(self, index: int, buf: torch.Tensor, chunks: int, world: int):
        self.index, self.buf, self.left, self.world = index, buf, chunks, world
        # A GPU bucket's future is CUDA-aware: DDP's stream waits for the copies back.
        self.fut: torch.futures.Future = (
            torch.futures.Future(devices=[buf.device]) if buf.device.type == "cuda" else torch.futures.Future()
        )
        self.lock = threading.Lock()
        self.failed = False


def loss_tolerant_hook(state, bucket):
    """Average `bucket` over the ranks of `state.process_group` with gradwire; returns the
    torch Future DDP waits on."""
    buf = bucket.buffer()
    if buf.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"gradwire sums float32 or float64 gradients; this bucket is {buf.dtype}")
    comm = state.comm()
    flat = buf.view(-1)
    step = max(1, state.chunk_bytes // flat.element_size()) if state.priority else max(1, flat.numel())
    pieces = [flat[i : i + step] for i in range(0, flat.numel(), step)] or [flat]
    b = _Bucket(bucket.index(), buf, len(pieces), comm.world_size)
    if state._arrived == 0:
        state.issue_order = []
    state._pending += [(b, k, p) for k, p in enumerate(pieces)]
    state._arrived += flat.numel() * flat.element_size()
    last = bucket.is_last()
    # Front layers first: higher bucket index first, a bucket's chunks in order.
    state._pending.sort(key=lambda e: (-e[0].index, e[1]))
    holdback = 0 if (last or not state.priority) else state.holdback_bytes
    while state._pending and state._arrived - state._issued > holdback:
        _issue(state, comm, *state._pending.pop(0))
    if last:
        state._arrived = state._issued = 0
    return b.fut


def _issue(
    state: LossTolerantState,
    comm: runtime.Communicator,
    b: _Bucket,
    k: int,
    piece: torch.Tensor,
) -> None:
    state.issue_order.append((b.index, k))
    state._issued += piece.numel() * piece.element_size()
    if piece.device.type != "cpu" or _STAGE_ALL:
        _issue_device(state, comm, b, piece)
        return
    work = comm.allreduce_async(piece, algorithm=state.algorithm, loss_bound=state.loss_bound)

    def finish() -> None:
        b.buf.div_(b.world)
        b.fut.set_result(b.buf)

    state._waiter.submit(lambda: _settle(b, lambda: state._record(work.wait()), finish))


def _issue_device(state: LossTolerantState, comm: runtime.Communicator, b: _Bucket, piece: torch.Tensor) -> None:
    """A GPU bucket's piece: the backend's pipelined staging (gradwire/torch/cuda.py), the
    division by the world size done on each host chunk before it is copied back."""
    from gradwire.torch import backend_of

    copies_of = backend_of(state.process_group)._stager([piece])

    def submit(h: torch.Tensor) -> runtime.Work:
        return comm._submit("allreduce", h, gated=True, algorithm=state.algorithm, loss_bound=state.loss_bound)

    chunks, finish = copies_of.pipelined(piece, submit, post=lambda h: h.div_(b.world))

    def wait() -> None:
        for c in chunks:
            state._record(c.wait())
        finish()

    state._waiter.submit(lambda: _settle(b, wait, lambda: copies_of.copies.resolve(b.fut, b.buf)))


def _settle(b: _Bucket, wait: Callable[[], None], complete: Callable[[], None]) -> None:
    """One piece of bucket `b` is done once `wait` returns: the last one `complete`s the
    bucket's future; the first failure fails it (DDP raises it from the backward pass)."""
    try:
        wait()
    except BaseException as e:  # noqa: BLE001 - handed to the bucket's future
        with b.lock:
            if not b.failed:
                b.failed = True
                b.fut.set_exception(e)
        return
    with b.lock:
        b.left -= 1
        done = b.left == 0 and not b.failed
    if done:
        complete()
