"""ByteScheduler in the DDP hook: the core's partition-and-credit scheduler
(``gradwire._core.Scheduler``, the code the simulated job runs) cuts and orders the
gradient buckets, and a tuner can choose ⟨S_p, S_c⟩ online from measured step times.

>>> state = gt.ScheduledState(partition_bytes=1 << 20, credit_bytes=4 << 20)
>>> model.register_comm_hook(state, gt.scheduled_hook)
>>> ...train...
>>> state.history            # (step, S_p, S_c, mean step seconds) per tuning round

Release points. ByteScheduler returns a partition's credit when its transfer completes;
completion times differ between ranks, so a credit freed by completions would start the
runtime's calls in a different order on different ranks, and the runtime matches calls by
their order. Here the credit is returned at the next bucket arrival, the same point on
every rank: between two arrivals at most S_c bytes of partitions go to the runtime, front
layers first (DDP numbers buckets from the back); the partitions the credit holds back
wait in the scheduler and, when the next bucket arrives, compete with its partitions by
layer; the step's last bucket flushes the rest. S_p and S_c change only between steps.

Online tuning (``tuner``: a ``gradwire.tune`` tuner such as ``GridSearch`` or ``BayesOpt``
over ``Candidate(partition_bytes, credit_multiple)``): every ``tune_every`` steps the ranks
average their mean step time with one small allreduce, rank 0's tuner observes the speed
(steps/s) of the configuration in force and proposes the next, and rank 0 broadcasts it;
every rank reconfigures before its next bucket. Both calls happen at a step's first bucket,
a point every rank reaches in the same order.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gradwire._core import Scheduler
from gradwire.torch.hook import LossTolerantState, _Bucket, _issue

# DDP's bucket 0 holds the back layers; the scheduler's layer 0 is the front one.
_FRONT = 1 << 16


@dataclass
class ScheduledState(LossTolerantState):
    """Settings of `scheduled_hook` and what it has seen (besides `LossTolerantState`'s
    loss bound, algorithm and counters): ⟨`partition_bytes`, `credit_bytes`⟩ (S_p, S_c;
    S_c ≥ S_p, S_p a multiple of 8 bytes), an optional `tuner` consulted every
    `tune_every` steps. `history`: (step, S_p, S_c, mean step seconds) per tuning round."""

    partition_bytes: int = 4 << 20
    credit_bytes: int = 8 << 20
    tuner: Any = None
    tune_every: int = 10
    steps: int = 0
    history: list = field(default_factory=list)
    _sched: Any = field(default=None, repr=False)
    _started: list = field(default_factory=list, repr=False)
    _buckets: dict = field(default_factory=dict, repr=False)
    _next_tensor: int = 0
    _step_start: float | None = None
    _step_times: list = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check(self.partition_bytes, self.credit_bytes)
        if self.tune_every < 1:
            raise ValueError(f"tune_every must be at least 1, got {self.tune_every}")
        self._sched = Scheduler(self.partition_bytes, self.credit_bytes)

    @staticmethod
    def _check(partition_bytes: int, credit_bytes: int) -> None:
        if partition_bytes < 8 or partition_bytes % 8:
            raise ValueError(f"partition_bytes must be a positive multiple of 8, got {partition_bytes}")
        if credit_bytes < partition_bytes:
            raise ValueError(f"credit_bytes ({credit_bytes}) must be at least partition_bytes ({partition_bytes})")

    def reconfigure(self, partition_bytes: int, credit_bytes: int) -> None:
        """⟨S_p, S_c⟩ from the next step on (call between steps, on every rank)."""
        self._check(partition_bytes, credit_bytes)
        self._sched.reconfigure(partition_bytes, credit_bytes)
        self.partition_bytes, self.credit_bytes = partition_bytes, credit_bytes

    def _step_begins(self, comm: Any) -> None:
        now = time.perf_counter()
        if self._step_start is not None:
            self._step_times.append(now - self._step_start)
        self._step_start = now
        self.steps += 1
        if self.tuner is None or len(self._step_times) < self.tune_every:
            return
        mean = np.array([statistics.fmean(self._step_times)])
        self._step_times.clear()
        comm.allreduce(mean)  # a sum: the same average on every rank
        step_s = float(mean[0]) / comm.world_size
        self.history.append((self.steps, self.partition_bytes, self.credit_bytes, step_s))
        choice = np.array([self.partition_bytes, self.credit_bytes], dtype=np.float64)
        if comm.rank == 0:
            from gradwire.tune.space import Candidate

            current = Candidate(self.partition_bytes, max(1, self.credit_bytes // self.partition_bytes))
            self.tuner.observe(current, 1.0 / step_s)
            nxt = self.tuner.propose() or (self.tuner.best or (current, 0.0))[0]
            choice[:] = (nxt.partition_bytes, nxt.credit_bytes)
        comm.broadcast(choice, root=0)
        self.reconfigure(int(choice[0]), int(choice[1]))


def scheduled_hook(state, bucket):  # unannotated: DDP checks a hook's annotations by type
    """Average `bucket` (a dist.GradBucket) over the ranks with gradwire, its partitions
    released by `state`'s scheduler (a ScheduledState); returns the torch Future DDP waits on."""
    buf = bucket.buffer()
    if buf.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"gradwire sums float32 or float64 gradients; this bucket is {buf.dtype}")
    comm = state.comm()
    if state._arrived == 0:
        state._step_begins(comm)
        state.issue_order = []
    flat = buf.view(-1)
    es = flat.element_size()
    nbytes = flat.numel() * es
    sched = state._sched
    # The release point: partitions started at earlier arrivals return their credit.
    for pid in state._started:
        sched.complete(pid)
    state._started.clear()
    tensor = state._next_tensor
    state._next_tensor += 1
    pieces = -(-nbytes // state.partition_bytes)
    b = _Bucket(bucket.index(), buf, pieces, comm.world_size)
    state._buckets[tensor] = b
    sched.post(tensor, _FRONT - bucket.index(), nbytes)
    state._arrived += nbytes
    last = bucket.is_last()
    while (p := sched.poll_start()) is not None:
        pid, t, _layer, offset, length = p
        piece = state._buckets[t].buf.view(-1)[offset // es : (offset + length) // es]
        _issue(state, comm, state._buckets[t], offset // state.partition_bytes, piece)
        if last:
            sched.complete(pid)  # the step's end: everything left goes now
        else:
            state._started.append(pid)
    if last:
        state._buckets.clear()
        state._arrived = state._issued = 0
    return b.fut
