"""Tuners behind one interface: propose a configuration, observe the speed it gave."""

from __future__ import annotations

import math
import random
import warnings
from typing import Protocol

from bayes_opt import BayesianOptimization
from bayes_opt.acquisition import ExpectedImprovement

from gradwire.tune.space import Candidate


class Tuner(Protocol):
    def propose(self) -> Candidate | None:
        """The configuration to run next, or None when the tuner is done."""

    def observe(self, candidate: Candidate, speed: float) -> None:
        """The training speed (samples/s) measured with ``candidate``."""

    @property
    def done(self) -> bool:
        """The search is over: ``propose`` keeps answering the final choice (or None)."""

    @property
    def best(self) -> tuple[Candidate, float] | None:
        """The fastest configuration observed so far, with its speed."""


class _Best:
    def __init__(self) -> None:
        self._best: tuple[Candidate, float] | None = None

    def _record(self, candidate: Candidate, speed: float) -> None:
        if speed != speed:  # NaN: a failed measurement ranks last
            speed = float("-inf")
        if self._best is None or speed > self._best[1]:
            self._best = (candidate, speed)

    @property
    def best(self) -> tuple[Candidate, float] | None:
        return self._best


class GridSearch(_Best):
    """Tries every candidate once, in order: the ground truth, at the cost of the whole grid."""

    def __init__(self, candidates: list[Candidate]):
        super().__init__()
        if not candidates:
            raise ValueError("grid search needs at least one candidate")
        self._todo = list(candidates)

    @property
    def done(self) -> bool:
        return not self._todo

    def propose(self) -> Candidate | None:
        return self._todo[0] if self._todo else None

    def observe(self, candidate: Candidate, speed: float) -> None:
        if candidate in self._todo:
            self._todo.remove(candidate)
        self._record(candidate, speed)


class BayesOpt(_Best):
    """ByteScheduler's tuner: Bayesian optimization (a Gaussian process with expected
    improvement, from the ``bayesian-optimization`` package that ByteScheduler uses) over
    the candidates, for ``trials`` measurements before training, then frozen at the best one
    seen (autobyte.md Table I: BO "only works before the beginning of training").

    The GP sees a candidate as (log2 S_p, k). The first ``initial`` trials are random
    candidates (seeded); after that each suggestion is snapped to the nearest candidate not
    measured yet, and that candidate is what is registered."""

    def __init__(
        self,
        candidates: list[Candidate],
        trials: int = 20,
        seed: int = 0,
        initial: int = 4,
    ):
        super().__init__()
        if not candidates:
            raise ValueError("Bayesian optimization needs at least one candidate")
        self._candidates = sorted(set(candidates))
        xs = [_point(c) for c in self._candidates]
        bounds = {
            "log2_partition": (min(x[0] for x in xs), max(x[0] for x in xs) + 1e-9),
            "credit_multiple": (min(x[1] for x in xs), max(x[1] for x in xs) + 1e-9),
        }
        self._opt = BayesianOptimization(
            f=None,
            pbounds=bounds,
            acquisition_function=ExpectedImprovement(xi=0.01),
            random_state=seed,
            verbose=0,
            allow_duplicate_points=True,
        )
        self._budget = min(trials, len(self._candidates))
        self._initial = max(1, initial)
        self._rng = random.Random(seed)
        self._seen: set[Candidate] = set()

    @property
    def done(self) -> bool:
        return len(self._seen) >= self._budget

    def propose(self) -> Candidate | None:
        if self.done:
            return self.best[0] if self.best else None
        fresh = [c for c in self._candidates if c not in self._seen]
        if len(self._seen) < self._initial:
            return self._rng.choice(fresh)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the GP's convergence chatter
            x = self._opt.suggest()
        return _nearest(fresh, (x["log2_partition"], x["credit_multiple"]))

    def observe(self, candidate: Candidate, speed: float) -> None:
        self._record(candidate, speed)
        if self.done or candidate in self._seen:
            return
        self._seen.add(candidate)
        lp, k = _point(candidate)
        self._opt.register(params={"log2_partition": lp, "credit_multiple": k}, target=float(speed))


def _point(c: Candidate) -> tuple[float, float]:
    return (math.log2(c.partition_bytes), float(c.credit_multiple))


def _nearest(candidates: list[Candidate], x: tuple[float, float]) -> Candidate:
    """A credit step of 4× counts like a factor 2 in S_p."""
    return min(
        candidates,
        key=lambda c: (_point(c)[0] - x[0]) ** 2 + ((_point(c)[1] - x[1]) / 4) ** 2,
    )
