"""What a job measures over a group of iterations: AutoByte's run-time input. Plain data,
no torch, so the simulated job (:mod:`gradwire.tune.simjob`) and BO run without it;
:mod:`gradwire.tune.autobyte` re-exports it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Observation:
    """What a job measured over one group of iterations (10 in the paper)."""

    backward_ms: list[list[float]]
    """Per layer (in backward order), per worker: backward time in ms."""
    upload_gbps: list[float]
    download_gbps: list[float]
    model: str
    arch: str
    workers: int = field(default=0)

    def __post_init__(self):
        if not self.backward_ms or not self.backward_ms[0]:
            raise ValueError("backward_ms needs at least one layer and one worker")
        if not self.upload_gbps or not self.download_gbps:
            raise ValueError("bandwidths need at least one worker")
        if self.workers <= 0:
            self.workers = len(self.backward_ms[0])

    @classmethod
    def uniform(cls, layers: int, workers: int, model: str, arch: str) -> Observation:
        """A job of a given shape and nothing else: 1 ms per layer on every worker, 10 Gbit/s
        up and down (the meta-network's cost and input handling depend on the shape only)."""
        return cls([[1.0] * workers] * layers, [10.0] * workers, [10.0] * workers, model, arch)
