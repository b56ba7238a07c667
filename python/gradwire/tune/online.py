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
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradwire.tune.observation import Observation
from gradwire.tune.simjob import WARMUP, JobSpec, SimJob, mean_speed, measure, observation
from gradwire.tune.space import Candidate, grid
from gradwire.tune.trigger import Trigger
from gradwire.tune.tuners import BayesOpt, GridSearch

if TYPE_CHECKING:  # torch: only AutoByte's own runs need it
    from gradwire.tune.autobyte import AutoByte

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


class AutoByteLoop:
    """AutoByte's decisions over measured groups of iterations (§III-C), wherever the job
    runs: :func:`run_autobyte` feeds it a simulated job's groups, and the DDP hook
    (``gradwire.torch.ScheduledState(tuner=AutoByteLoop(...))``) a real job's.

    Per group: :meth:`observe` records what ran and the speed measured (samples/s), and
    fine-tunes the network when the prediction made for that group missed by more than the
    trigger's error; :meth:`decide` predicts every candidate from the group's observation and
    switches only for the trigger's gain. ``predictor`` is copied (default: the shipped
    weights), so the caller's stays as it was; ``candidates`` default to the paper's grid;
    ``start`` is the configuration in force (the hook sets it from its state each round).

    ``adapt`` is what fine-tuning trains (§III-B says "transfer learning" and no more):
    ``"head"`` the two dense layers, keeping the encoders (LSTM, embeddings) that every
    condition's prediction shares, as transfer learning usually does; ``"all"`` the whole
    network; ``"none"`` nothing (the offline network alone). docs/scheduling.md ablates the
    three.

    ``background=True`` fine-tunes a copy of the network in a thread instead of inside
    :meth:`observe`, and :meth:`decide` predicts with the fine-tuned copy once it is done (a
    miss while one runs starts none). The job then keeps training through the fine-tuning
    instead of waiting for it (in the DDP hook every rank waits for rank 0's decision); the
    price is that decisions use the network as it was until the copy is ready.
    :meth:`settle` waits for it; an error in the thread is raised by the next
    :meth:`decide` or :meth:`settle`."""

    observes_network = True  # the DDP hook hands it a gradwire.tune.Observation per round

    def __init__(
        self,
        predictor: AutoByte | None = None,
        candidates: list[Candidate] | None = None,
        start: Candidate | None = None,
        trigger: Trigger | None = None,
        adapt: str = "head",
        adapt_epochs: int = 30,
        adapt_lr: float = 3e-3,
        background: bool = False,
    ):
        if adapt not in ADAPT:
            raise ValueError(f"adapt must be one of {ADAPT}, got {adapt!r}")
        if predictor is None:
            from gradwire.tune.offline import load_default

            predictor = load_default()
        self.predictor = copy.deepcopy(predictor)
        self.candidates = list(candidates) if candidates is not None else grid()
        self.current = start
        self.trigger = trigger or Trigger()
        self.adapt, self.adapt_epochs, self.adapt_lr = adapt, adapt_epochs, adapt_lr
        self.online: list[tuple[Observation, Candidate, float]] = []
        self.predicted: float | None = None
        self.adaptations = 0
        self.background = background
        self._tuning: threading.Thread | None = None
        self._tuned: AutoByte | None = None
        self._failed: BaseException | None = None

    def observe(self, obs: Observation, measured: float) -> bool:
        """One group ran under ``self.current`` at ``measured`` samples/s; True if that missed
        the prediction enough to fine-tune (done here)."""
        if self.current is None:
            raise ValueError("AutoByteLoop has no current configuration: pass start=")
        self.online.append((obs, self.current, measured))
        if self.adapt == "none" or self.predicted is None:
            return False
        if not self.trigger.needs_adaptation(self.predicted, measured):
            return False
        if not self.background:
            self._fit(self.predictor, list(self.online))
        elif self._tuning is not None and self._tuning.is_alive():
            return False
        else:
            self._adopt()  # a fine-tuning finished since the last decision: build on it
            model = copy.deepcopy(self.predictor)
            # not a daemon: an exiting interpreter waits for the one fine-tuning (a fraction
            # of a second) instead of tearing torch down under it
            self._tuning = threading.Thread(
                target=self._fit_in_background, args=(model, list(self.online)), name="autobyte-fine-tune"
            )
            self._tuning.start()
        self.adaptations += 1
        return True

    def _fit(self, model: AutoByte, samples: list[tuple[Observation, Candidate, float]]) -> None:
        model.fit(
            samples, epochs=self.adapt_epochs, lr=self.adapt_lr, batch=len(samples), head_only=self.adapt == "head"
        )

    def _fit_in_background(self, model: AutoByte, samples: list[tuple[Observation, Candidate, float]]) -> None:
        try:
            self._fit(model, samples)
        except BaseException as e:  # raised in the caller's thread by the next decision
            self._failed = e
            return
        self._tuned = model

    def settle(self) -> None:
        """Wait for a background fine-tuning to finish and predict with its network from now on."""
        if self._tuning is not None:
            self._tuning.join()
        self._adopt()

    def _adopt(self) -> None:
        if self._failed is not None:
            e, self._failed = self._failed, None
            raise RuntimeError("AutoByte's background fine-tuning failed") from e
        if self._tuned is not None:
            self.predictor, self._tuned = self._tuned, None

    def decide(self, obs: Observation) -> Candidate | None:
        """The configuration to switch to for the next group (it becomes current), or None."""
        self._adopt()
        cands = self.candidates if self.current in self.candidates else [*self.candidates, self.current]
        prediction = self.predictor.predict(obs, cands)
        choice = self.trigger.choose(self.current, prediction)
        if choice is not None:
            self.current = choice
        self.predicted = prediction[self.current]
        return choice


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
    """AutoByte online from ``start`` on a simulated job (:class:`AutoByteLoop`'s decisions;
    ``model`` is copied, so the caller's stays as it was)."""
    loop = AutoByteLoop(model, candidates, start, trigger, adapt, adapt_epochs, adapt_lr)
    job = SimJob(spec, start)
    trace = Trace()
    done = 0
    while done < iterations:
        stats = job.run(min(group, iterations - done))
        trace.extend(stats, loop.current)
        done += len(stats)
        # the first iteration of the job and the one after a switch carry the transition
        settled = stats[WARMUP:] or stats
        obs = observation(spec, settled)
        if loop.observe(obs, mean_speed(settled)):
            trace.adaptations.append(done)
        if done >= iterations:
            break
        choice = loop.decide(obs)
        if choice is not None:
            job.reconfigure(choice)
            trace.reconfigurations.append((done, choice))
    return trace
