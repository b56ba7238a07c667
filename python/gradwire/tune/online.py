"""The three ways of setting ⟨S_p, S_c⟩ run on one simulated job through time (autobyte.md
§IV): a fixed configuration (no scheduling, or what BO chose before training), BO's search
before training, and AutoByte's online loop.

AutoByte, as §III-C describes it: every ``group`` (10) iterations the meta-network predicts
every candidate's speed from what the job measured over the group; the trigger switches
only for a predicted gain of ≥ 5 %, and when the speed measured over a group misses the
prediction made for it by > 10 % the network is fine-tuned on the samples measured online
so far (transfer learning from the offline weights).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from gradwire.tune.autobyte import AutoByte, Observation
from gradwire.tune.simjob import WARMUP, JobSpec, SimJob, measure, observation
from gradwire.tune.space import Candidate
from gradwire.tune.trigger import Trigger
from gradwire.tune.tuners import BayesOpt, GridSearch

#: Iterations per prediction and per averaged measurement (the paper's group of 10).
GROUP = 10
#: What online adapting may fine-tune (see :func:`run_autobyte`).
ADAPT = ("all", "head", "none")


@dataclass
class Trace:
    """One run through time: per iteration, the speed and the configuration in force."""

    speeds: list[float] = field(default_factory=list)
    configs: list[Candidate | None] = field(default_factory=list)
    reconfigurations: list[tuple[int, Candidate]] = field(default_factory=list)
    adaptations: list[int] = field(default_factory=list)
    search_measurements: int = 0

    def mean(self, start: int = 0, end: int | None = None) -> float:
        window = self.speeds[start:end]
        return sum(window) / len(window)

    def extend(self, stats: list[dict], config: Candidate | None) -> None:
        self.speeds.extend(s["samples_per_s"] for s in stats)
        self.configs.extend(config for _ in stats)


def run_fixed(spec: JobSpec, candidate: Candidate | None, iterations: int) -> Trace:
    trace = Trace()
    trace.extend(SimJob(spec, candidate).run(iterations), candidate)
    return trace


def grid_optimum(spec: JobSpec, candidates: list[Candidate], iterations: int = 2) -> tuple[Candidate, float, dict]:
    """The ground truth: every candidate measured on a fresh job under ``spec``'s initial
    conditions. Returns the best, its speed and every candidate's speed."""
    grid = GridSearch(candidates)
    speeds = {}
    while not grid.done:
        c = grid.propose()
        speeds[c] = measure(spec, c, iterations)
        grid.observe(c, speeds[c])
    best, v = grid.best
    return best, v, speeds


def bo_choice(spec: JobSpec, candidates: list[Candidate], trials: int = 20, seed: int = 0) -> tuple[Candidate, int]:
    """ByteScheduler's tuning before training: ``trials`` measurements on fresh jobs under the
    initial conditions; returns the choice and the number of measurements."""
    bo = BayesOpt(candidates, trials=trials, seed=seed)
    n = 0
    while not bo.done:
        c = bo.propose()
        bo.observe(c, measure(spec, c))
        n += 1
    return bo.best[0], n


def run_bo(spec: JobSpec, candidates: list[Candidate], iterations: int, trials: int = 20, seed: int = 0) -> Trace:
    choice, n = bo_choice(spec, candidates, trials, seed)
    trace = run_fixed(spec, choice, iterations)
    trace.search_measurements = n
    return trace


def run_autobyte(
    spec: JobSpec,
    candidates: list[Candidate],
    start: Candidate,
    iterations: int,
    model: AutoByte,
    trigger: Trigger | None = None,
    group: int = GROUP,
    adapt_epochs: int = 30,
    adapt_lr: float = 3e-3,
    adapt: str = "head",
) -> Trace:
    """AutoByte online from ``start``; ``model`` is copied, so the caller's stays as it was.

    ``adapt`` is what fine-tuning trains when a prediction misses by > 10 % (§III-B says
    "transfer learning" and no more): ``"head"`` the two dense layers, keeping the encoders
    (LSTM, embeddings) that every condition's prediction shares, as transfer learning
    usually does; ``"all"`` the whole network; ``"none"`` nothing (the offline network
    alone). docs/scheduling.md ablates the three."""
    if adapt not in ADAPT:
        raise ValueError(f"adapt must be one of {ADAPT}, got {adapt!r}")
    model = copy.deepcopy(model)
    trigger = trigger or Trigger()
    job = SimJob(spec, start)
    trace = Trace()
    online: list[tuple[Observation, Candidate, float]] = []
    predicted: float | None = None
    current = start
    done = 0
    while done < iterations:
        stats = job.run(min(group, iterations - done))
        trace.extend(stats, current)
        done += len(stats)
        # the first iteration of the job and the one after a switch carry the transition
        settled = stats[WARMUP:] or stats
        obs = observation(spec, settled)
        measured = sum(s["samples_per_s"] for s in settled) / len(settled)
        online.append((obs, current, measured))
        if adapt != "none" and predicted is not None and trigger.needs_adaptation(predicted, measured):
            model.fit(online, epochs=adapt_epochs, lr=adapt_lr, batch=len(online), head_only=adapt == "head")
            trace.adaptations.append(done)
        if done >= iterations:
            break
        prediction = model.predict(obs, candidates)
        choice = trigger.choose(current, prediction)
        if choice is not None:
            job.reconfigure(choice)
            current = choice
            trace.reconfigurations.append((done, choice))
        predicted = prediction[current]
    return trace
