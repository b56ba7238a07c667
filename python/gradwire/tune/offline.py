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
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from gradwire.tune.autobyte import AutoByte, NetConfig, Observation
from gradwire.tune.evaluate import by_condition, ranking
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


def samples_for(cond: Condition, candidates: list[Candidate]) -> list[tuple[Observation, Candidate, float]]:
    """One observation of the job under ``cond`` and every candidate's measured speed."""
    spec = cond.spec()
    stats = SimJob(spec, candidates[0]).run(2)[1:]
    obs = observation(spec, stats)
    return [(obs, c, measure(spec, c, iterations=1)) for c in candidates]


def _one(args: tuple[Condition, list[Candidate]]) -> list[tuple[Observation, Candidate, float]]:
    return samples_for(*args)


def generate(
    conds: list[Condition],
    candidates: list[Candidate],
    on_condition: Callable[[int, int], None] | None = None,
    processes: int = 1,
) -> list[tuple[Observation, Candidate, float]]:
    """Every condition's samples, in condition order (deterministic for any ``processes``)."""
    out = []
    jobs = [(c, candidates) for c in conds]
    if processes > 1:
        ctx = mp.get_context("spawn")
        with ctx.Pool(processes) as pool:
            for i, part in enumerate(pool.imap(_one, jobs)):
                out.extend(part)
                if on_condition:
                    on_condition(i + 1, len(conds))
        return out
    for i, job in enumerate(jobs):
        out.extend(_one(job))
        if on_condition:
            on_condition(i + 1, len(conds))
    return out


def save_data(path: Path, data: list[tuple[Observation, Candidate, float]]) -> None:
    """The samples as JSON lines, one observation per line with its candidates' speeds."""
    by_obs: dict[int, tuple[Observation, list]] = {}
    for o, c, v in data:
        by_obs.setdefault(id(o), (o, []))[1].append([c.partition_bytes, c.credit_multiple, v])
    with path.open("w") as f:
        for o, speeds in by_obs.values():
            f.write(json.dumps({"obs": asdict(o), "speeds": speeds}) + "\n")


def load_data(path: Path) -> list[tuple[Observation, Candidate, float]]:
    out = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        o = Observation(**d["obs"])
        out.extend((o, Candidate(p, k), v) for p, k, v in d["speeds"])
    return out


#: The network's choices and the fit the shipped weights use (docs/scheduling.md ablates them).
CONFIG = NetConfig(slot_embed=4, log_target=True, level_weight=0.1, dense=128)
EPOCHS = 40
LR = 1e-2
#: Observations per batch.
BATCH_CONDITIONS = 8
#: Networks trained from different seeds and averaged.
MEMBERS = 3


def fit_model(
    samples: list[tuple[Observation, Candidate, float]],
    config: NetConfig = CONFIG,
    epochs: int = EPOCHS,
    members: int = MEMBERS,
    seed: int = 0,
    losses: list | None = None,
    on_epoch: Callable[[int, AutoByte], bool] | None = None,
) -> AutoByte:
    """Fit a fresh meta-network to ``samples`` as the shipped weights are fitted."""
    per_obs = len(samples) / len({id(o) for o, _, _ in samples})
    ab = AutoByte(seed=seed, config=config, members=members)
    batch = max(1, round(BATCH_CONDITIONS * per_obs))
    out = ab.fit(samples, epochs=epochs, lr=LR, batch=batch, seed=seed, on_epoch=on_epoch)
    if losses is not None:
        losses.extend(out)
    return ab


def train(
    out: Path = WEIGHTS,
    epochs: int = EPOCHS,
    on_condition: Callable[[int, int], None] | None = None,
    conds: list[Condition] | None = None,
    candidates: list[Candidate] | None = None,
    processes: int = 1,
    data: Path | None = None,
) -> dict:
    """Generate the data (or read it from ``data`` if that file exists, else write it
    there), fit the meta-network, save it to ``out`` and a ``.json`` beside it that says what
    it was trained on. Returns that record."""
    conds = conds if conds is not None else conditions()
    candidates = candidates or grid()
    t0 = time.perf_counter()
    read = data is not None and data.exists()
    if read:
        samples = load_data(data)
    else:
        samples = generate(conds, candidates, on_condition, processes)
        if data is not None:
            save_data(data, samples)
    t_data = time.perf_counter() - t0
    losses: list[float] = []
    ab = fit_model(samples, epochs=epochs, losses=losses)
    t_fit = time.perf_counter() - t0 - t_data
    ab.save(out)
    in_sample = ranking(ab, by_condition(samples)).summary()
    record = {
        "samples": len(samples),
        "conditions": len(conds),
        "candidates": len(candidates),
        "models": sorted({c.model for c in conds}),
        "patterns": sorted({c.pattern for c in conds}),
        "gbps": sorted({c.gbps for c in conds}),
        "sharing": [list(s) for s in SHARING],
        "stragglers": list(STRAGGLERS),
        "workers": 8,
        "network": asdict(CONFIG),
        "members": MEMBERS,
        "epochs": epochs,
        "lr": LR,
        "batch_conditions": BATCH_CONDITIONS,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "in_sample_top1_within_5pct": in_sample["top1_within_5pct"],
        "in_sample_mean_regret": in_sample["mean_regret"],
        "data": f"read from {data.name}" if read else "generated",
        "processes": processes,
        "data_s": round(t_data, 1),
        "fit_s": round(t_fit, 1),
    }
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def load_default() -> AutoByte:
    """The shipped weights (``gradwire autobyte train`` regenerates them)."""
    if not WEIGHTS.exists():
        raise FileNotFoundError(f"{WEIGHTS} is missing: run `gradwire autobyte train`")
    return AutoByte.load(WEIGHTS)
