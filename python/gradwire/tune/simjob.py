"""A simulated training job for the tuners: the simulator's ``bytesched`` job
(``crates/gradwire-sim/src/bytesched``), stepped from Python.

:func:`measure` answers "what speed does ⟨S_p, S_c⟩ give under these conditions" from a
fresh job in a few iterations; :class:`SimJob` is one job through time whose configuration
a tuner changes between iterations without restarting it; :func:`observation` turns its
iteration stats into the meta-network's input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gradwire import _core
from gradwire.tune.observation import Observation
from gradwire.tune.space import Candidate

#: Iterations left out at the start of a measurement: iteration 0 waits for no update.
WARMUP = 1


@dataclass
class JobSpec:
    """The simulated job; ``extra`` holds the condition keys of ``bytesched`` (rate_changes,
    background, slowdowns, partition_overhead_us, partition_latency_us, ps_split_bytes,
    ps_credit, ps_server_overhead_us, shaping, port_gbps, batch_size)."""

    model: str = "resnet50"
    pattern: str = "ps"
    workers: int = 8
    host_gbps: float = 10.0
    extra: dict[str, Any] = field(default_factory=dict)

    def config(self, candidate: Candidate | None) -> dict[str, Any]:
        return {
            "model": self.model,
            "pattern": self.pattern,
            "workers": self.workers,
            "host_gbps": self.host_gbps,
            "sched": _sched(candidate),
            **self.extra,
        }


def _sched(candidate: Candidate | None) -> dict[str, Any]:
    if candidate is None:
        return {"partition_bytes": None}
    return {"partition_bytes": candidate.partition_bytes, "credit_bytes": candidate.credit_bytes}


class SimJob:
    """One job through time: :meth:`run` some iterations, :meth:`reconfigure` between them."""

    def __init__(self, spec: JobSpec, candidate: Candidate | None):
        self.spec = spec
        self.candidate = candidate
        self._job = _core.BytesJob(json.dumps(spec.config(candidate)))
        self.history: list[dict[str, Any]] = []

    def reconfigure(self, candidate: Candidate | None) -> None:
        """From the next iteration on (the job does not stop)."""
        if candidate is None:
            self._job.set_sched(None)
        else:
            self._job.set_sched(candidate.partition_bytes, candidate.credit_bytes)
        self.candidate = candidate

    def run(self, iterations: int) -> list[dict[str, Any]]:
        stats = self._job.run(iterations)
        self.history.extend(stats)
        return stats


def measure(spec: JobSpec, candidate: Candidate | None, iterations: int = 2) -> float:
    """Mean samples/s of ``iterations`` iterations after :data:`WARMUP`, from a fresh job."""
    stats = SimJob(spec, candidate).run(WARMUP + iterations)[WARMUP:]
    return sum(s["samples_per_s"] for s in stats) / len(stats)


def observation(spec: JobSpec, stats: list[dict[str, Any]]) -> Observation:
    """What the job measured over ``stats`` (one group of iterations), as Table II's input:
    the mean backward time per layer and worker, and each worker's available bandwidth
    (what a one-flow probe beside the other jobs gets; the links are symmetric)."""
    n = len(stats)
    layers = len(stats[0]["backward_ms"])
    workers = len(stats[0]["backward_ms"][0])
    backward = [[sum(s["backward_ms"][i][w] for s in stats) / n for w in range(workers)] for i in range(layers)]
    avail = [sum(s["avail_gbps"][w] for s in stats) / n for w in range(workers)]
    return Observation(
        backward_ms=backward,
        upload_gbps=avail,
        download_gbps=list(avail),
        model=spec.model,
        arch=spec.pattern,
        workers=workers,
    )


def mean_speed(stats: list[dict[str, Any]]) -> float:
    return sum(s["samples_per_s"] for s in stats) / len(stats)
