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

With ``tuner=gradwire.tune.online.AutoByteLoop()`` the same round carries what AutoByte's
meta-network reads (Table II), measured by every rank over the round's steps: the backward
time of each bucket in backward order (the gap between its arrival and the previous
bucket's; the first bucket's from the end of the forward pass if ``watch(model)`` was
called, else the median of the other gaps), and the rank's upload and download rate while
its calls were in flight (bytes over the span from the step's first call to its last
completion). The allreduce gathers them from every rank; the loop predicts every
candidate's samples/s (``batch_size`` samples per rank per step), switches only for a
predicted gain of 5 %, and fine-tunes when a prediction misses by 10 %.
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
    model_name: str = "other"
    batch_size: int = 0
    steps: int = 0
    history: list = field(default_factory=list)
    last_observation: Any = None
    tuning_seconds: float = 0.0
    _sched: Any = field(default=None, repr=False)
    _started: list = field(default_factory=list, repr=False)
    _buckets: dict = field(default_factory=dict, repr=False)
    _next_tensor: int = 0
    _step_start: float | None = None
    _step_times: list = field(default_factory=list, repr=False)
    _step_logs: list = field(default_factory=list, repr=False)
    _arrivals: list = field(default_factory=list, repr=False)
    _forward_end: float | None = None
    _step_forward_end: float | None = None
    _first_issue: float | None = None
    _bytes_at_start: tuple = (0, 0)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check(self.partition_bytes, self.credit_bytes)
        if self.tune_every < 1:
            raise ValueError(f"tune_every must be at least 1, got {self.tune_every}")
        if _is_autobyte(self.tuner) and self.batch_size < 1:
            raise ValueError("AutoByte predicts samples/s: set batch_size (samples per rank per step)")
        self._sched = Scheduler(self.partition_bytes, self.credit_bytes)

    def watch(self, module: torch.nn.Module) -> None:
        """Notes when `module`'s forward pass ends (backward starts right after the loss), so
        that AutoByte's backward time of the first bucket is measured, not estimated."""
        module.register_forward_hook(lambda *_: setattr(self, "_forward_end", time.perf_counter()))

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

    def _step_begins(self, comm: Any, now: float) -> float:
        """A step's first bucket arrived at `now`; returns `now` on the step's clock, which
        a tuning round stops while it runs."""
        if self._step_start is not None:
            self._step_times.append(now - self._step_start)
            self._step_logs.append(self._step_log())
        self._step_start = now
        self._arrivals, self._first_issue = [], None
        self._step_forward_end = self._forward_end  # this step's forward pass, if watched
        self._bytes_at_start = (self.bytes_sent, self.bytes_received)
        self.steps += 1
        if self.tuner is None or len(self._step_times) < self.tune_every:
            return now
        self._tune_round(comm)
        # the round's own cost (gather, prediction, fine-tuning, broadcast) is counted in
        # `tuning_seconds`, not in the step or backward times the next round judges by
        cost = time.perf_counter() - now
        self.tuning_seconds += cost
        self._step_start += cost
        if self._step_forward_end is not None:
            self._step_forward_end += cost
        return now + cost

    def _tune_round(self, comm: Any) -> None:
        autobyte = _is_autobyte(self.tuner)
        # one allreduce (a sum) carries the mean step time and, for AutoByte, every rank's
        # measurements in its own slot
        per_rank = _per_rank(self._step_logs) if autobyte else np.zeros(0)
        gathered = np.zeros(1 + comm.world_size * len(per_rank))
        gathered[0] = statistics.fmean(self._step_times)
        gathered[1 + comm.rank * len(per_rank) : 1 + (comm.rank + 1) * len(per_rank)] = per_rank
        self._step_times.clear()
        self._step_logs.clear()
        comm.allreduce(gathered)
        step_s = float(gathered[0]) / comm.world_size
        self.history.append((self.steps, self.partition_bytes, self.credit_bytes, step_s))
        choice = np.array([self.partition_bytes, self.credit_bytes], dtype=np.float64)
        from gradwire.tune.space import Candidate

        current = Candidate(self.partition_bytes, max(1, self.credit_bytes // self.partition_bytes))
        if autobyte:
            self.last_observation = self._observation(gathered[1:].reshape(comm.world_size, -1))
        if comm.rank == 0:
            if autobyte:
                self.tuner.current = current  # what ran is what the state had in force
                self.tuner.observe(self.last_observation, self.batch_size * comm.world_size / step_s)
                nxt = self.tuner.decide(self.last_observation) or self.tuner.current
            else:
                self.tuner.observe(current, 1.0 / step_s)
                nxt = self.tuner.propose() or (self.tuner.best or (current, 0.0))[0]
            choice[:] = (nxt.partition_bytes, nxt.credit_bytes)
        comm.broadcast(choice, root=0)
        self.reconfigure(int(choice[0]), int(choice[1]))

    def _step_log(self) -> tuple[list[float], float, float]:
        """The step that just ended: each bucket's backward time (ms, backward order) and
        this rank's upload and download Gbit/s while its calls were in flight."""
        arr = self._arrivals
        gaps = [(b - a) * 1e3 for a, b in zip(arr, arr[1:])]
        fwd = self._step_forward_end
        if fwd is not None and arr and fwd <= arr[0]:
            first = (arr[0] - fwd) * 1e3
        else:
            first = statistics.median(gaps) if gaps else 0.0
        span = self.last_done - self._first_issue if self._first_issue is not None else 0.0
        sent, received = self.bytes_sent - self._bytes_at_start[0], self.bytes_received - self._bytes_at_start[1]
        up, down = (sent * 8 / span / 1e9, received * 8 / span / 1e9) if span > 0 else (0.0, 0.0)
        return [first, *gaps] if arr else [], up, down

    def _observation(self, ranks: np.ndarray) -> Any:
        """AutoByte's input from every rank's row of (upload, download, bucket ms ...)."""
        from gradwire.tune.observation import Observation

        return Observation(
            backward_ms=[[float(x) for x in ranks[:, 2 + b]] for b in range(ranks.shape[1] - 2)]
            or [[0.0] * len(ranks)],
            upload_gbps=[float(x) for x in ranks[:, 0]],
            download_gbps=[float(x) for x in ranks[:, 1]],
            model=self.model_name,
            arch="ps" if self.algorithm == "ps" else "ring",
            workers=len(ranks),
        )


def _is_autobyte(tuner: Any) -> bool:
    """A tuner that decides from each round's network observation (AutoByteLoop), asked by
    its attribute so the hook never imports the tuning package's simulated job."""
    return bool(getattr(tuner, "observes_network", False))


def _per_rank(logs: list[tuple[list[float], float, float]]) -> np.ndarray:
    """A rank's mean (upload, download, bucket ms ...) over the round's steps that had the
    last step's buckets (DDP rebuilds its buckets after the first step)."""
    nb = len(logs[-1][0])
    same = [log for log in logs if len(log[0]) == nb]
    return np.array([statistics.fmean(x) for x in zip(*[(up, down, *ms) for ms, up, down in same])])


def scheduled_hook(state, bucket):  # unannotated: DDP checks a hook's annotations by type
    """Average `bucket` (a dist.GradBucket) over the ranks with gradwire, its partitions
    released by `state`'s scheduler (a ScheduledState); returns the torch Future DDP waits on."""
    buf = bucket.buffer()
    if buf.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"gradwire sums float32 or float64 gradients; this bucket is {buf.dtype}")
    comm = state.comm()
    now = time.perf_counter()
    if state._arrived == 0:
        now = state._step_begins(comm, now)
        state.issue_order = []
    state._arrivals.append(now)
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
        if state._first_issue is None:
            state._first_issue = time.perf_counter()
        _issue(state, comm, state._buckets[t], offset // state.partition_bytes, piece)
        if last:
            sched.complete(pid)  # the step's end: everything left goes now
        else:
            state._started.append(pid)
    if last:
        state._buckets.clear()
        state._arrived = state._issued = 0
    return b.fut
