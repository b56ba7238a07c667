"""AutoByte's offline training (autobyte.md §III-B), on data that gradwire's simulator
generates instead of a testbed: for every condition (model, architecture, host bandwidth,
other jobs sharing the hosts, a straggler) one observation of the job and the measured
speed of every candidate ⟨S_p, S_c⟩ under it.

``gradwire autobyte train`` regenerates :data:`WEIGHTS` (shipped with the package, loaded by
:func:`load_default`); ``docs/scheduling.md`` records how many samples, which conditions
and how long it took.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from gradwire.tune.autobyte import AutoByte, Observation
from gradwire.tune.simjob import JobSpec, SimJob, measure, observation
from gradwire.tune.space import Candidate, grid

WEIGHTS = Path(__file__).with_name("autobyte_weights.pt")

#: The paper's three models (§III-B) and both architectures (§IV-E).
MODELS = ("resnet50", "vgg16", "alexnet")
PATTERNS = ("ps", "ring")
#: The paper's bandwidths (0.5, 1, 5, 10, 25 Gbit/s, §III-B), plus 3 and 20 (Figs. 6 and 7).
BANDWIDTHS = (0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 25.0)
#: Other jobs on every host: (jobs, long-lived flows each per link, compute slowdown of ours).
SHARING = ((0, 0, 1.0), (1, 1, 2.0), (2, 1, 3.0))
#: One worker computing this much slower (a straggler), or none.
STRAGGLERS = (1.0, 1.5)


@dataclass(frozen=True)
class Condition:
    model: str
    pattern: str
    gbps: float
    other_jobs: int
    flows_per_job: int
    compute_factor: float
    straggler: float

    def spec(self, workers: int = 8) -> JobSpec:
        extra: dict = {}
        if self.other_jobs:
            per_job = self.compute_factor ** (1 / self.other_jobs)
            extra["background"] = [
                {"join_iteration": 0, "flows": self.flows_per_job, "compute_factor": per_job}
                for _ in range(self.other_jobs)
            ]
        if self.straggler != 1.0:
            extra["slowdowns"] = [{"worker": 0, "from_iteration": 0, "factor": self.straggler}]
        return JobSpec(model=self.model, pattern=self.pattern, workers=workers, host_gbps=self.gbps, extra=extra)


def conditions() -> list[Condition]:
    return [
        Condition(m, p, g, j, f, c, s)
        for m, p, g, (j, f, c), s in itertools.product(MODELS, PATTERNS, BANDWIDTHS, SHARING, STRAGGLERS)
    ]


def samples_for(cond: Condition, candidates: list[Candidate]) -> Iterator[tuple[Observation, Candidate, float]]:
    """One observation of the job under ``cond`` and every candidate's measured speed."""
    spec = cond.spec()
    stats = SimJob(spec, candidates[0]).run(2)[1:]
    obs = observation(spec, stats)
    for c in candidates:
        yield obs, c, measure(spec, c, iterations=1)


def generate(
    conds: list[Condition], candidates: list[Candidate], on_condition: Callable[[int, int], None] | None = None
) -> list[tuple[Observation, Candidate, float]]:
    out = []
    for i, cond in enumerate(conds):
        out.extend(samples_for(cond, candidates))
        if on_condition:
            on_condition(i + 1, len(conds))
    return out


def train(
    out: Path = WEIGHTS,
    epochs: int = 60,
    on_condition: Callable[[int, int], None] | None = None,
    conds: list[Condition] | None = None,
    candidates: list[Candidate] | None = None,
) -> dict:
    """Generate the data, fit the meta-network, save it to ``out`` (and a ``.json`` beside it
    that says what it was trained on). Returns that record."""
    conds = conds if conds is not None else conditions()
    candidates = candidates or grid()
    t0 = time.perf_counter()
    data = generate(conds, candidates, on_condition)
    t_data = time.perf_counter() - t0
    ab = AutoByte(seed=0)
    losses = ab.fit(data, epochs=epochs, lr=3e-3, batch=64, seed=0)
    t_fit = time.perf_counter() - t0 - t_data
    ab.save(out)
    record = {
        "samples": len(data),
        "conditions": len(conds),
        "candidates": len(candidates),
        "models": sorted({c.model for c in conds}),
        "patterns": sorted({c.pattern for c in conds}),
        "gbps": sorted({c.gbps for c in conds}),
        "sharing": [list(s) for s in SHARING],
        "stragglers": list(STRAGGLERS),
        "workers": 8,
        "epochs": epochs,
        "final_loss": losses[-1],
        "generate_s": round(t_data, 1),
        "fit_s": round(t_fit, 1),
        "example_condition": asdict(conds[0]),
    }
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def load_default() -> AutoByte:
    """The shipped weights (``gradwire autobyte train`` regenerates them)."""
    if not WEIGHTS.exists():
        raise FileNotFoundError(f"{WEIGHTS} is missing: run `gradwire autobyte train`")
    return AutoByte.load(WEIGHTS)
