"""How well AutoByte's meta-network ranks configurations, in and out of sample.

A predictor is only as good as the candidate it ranks first: for one condition (one
observation of a job and every candidate's measured speed) its *score* is the measured speed
of its first-ranked candidate over the condition's best measured speed (1.0: it picked the
optimum), and its *regret* is one minus that. :func:`ranking` scores a fitted model on
conditions; :func:`cross_validate` fits on all conditions but a fold and scores the fold,
for every fold, so each condition is scored by a model that never saw it;
:func:`hold_out` does the same for one split (e.g. every condition at one bandwidth).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gradwire.tune.autobyte import AutoByte, Observation
from gradwire.tune.space import Candidate

Sample = tuple[Observation, Candidate, float]


@dataclass
class Condition:
    """One observation and every candidate's measured samples/s under it."""

    obs: Observation
    speeds: dict[Candidate, float]

    def samples(self) -> list[Sample]:
        return [(self.obs, c, v) for c, v in self.speeds.items()]


def by_condition(samples: Iterable[Sample]) -> list[Condition]:
    """Group samples by their observation (the same object for one condition), in order."""
    out: dict[int, Condition] = {}
    for o, c, v in samples:
        out.setdefault(id(o), Condition(o, {})).speeds[c] = v
    return list(out.values())


@dataclass
class Ranking:
    """Per condition: the first-ranked candidate's measured speed over the optimum's."""

    scores: list[float] = field(default_factory=list)

    def within(self, tolerance: float = 0.05) -> float:
        """Fraction of conditions whose first-ranked candidate is within ``tolerance`` of
        the optimum."""
        return sum(s >= 1.0 - tolerance - 1e-12 for s in self.scores) / len(self.scores)

    @property
    def mean_regret(self) -> float:
        return 1.0 - statistics.fmean(self.scores)

    @property
    def p10(self) -> float:
        """The 10th percentile of the scores (the bad tail)."""
        return sorted(self.scores)[len(self.scores) // 10]

    def summary(self) -> dict[str, float]:
        return {
            "conditions": len(self.scores),
            "top1_within_5pct": self.within(0.05),
            "mean_regret": self.mean_regret,
            "p10_of_optimum": self.p10,
        }


def score(model: AutoByte, cond: Condition) -> float:
    pred = model.predict(cond.obs, list(cond.speeds))
    first = max(pred, key=pred.get)
    return cond.speeds[first] / max(cond.speeds.values())


def ranking(model: AutoByte, conds: list[Condition]) -> Ranking:
    return Ranking([score(model, c) for c in conds])


Fit = Callable[[list[Sample]], AutoByte]


def folds(n: int, k: int, seed: int = 0) -> list[list[int]]:
    """``k`` disjoint folds of the indices ``0 … n-1``, shuffled with ``seed``."""
    if not 2 <= k <= n:
        raise ValueError(f"need 2 ≤ folds ≤ conditions, got {k} folds of {n}")
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    return [sorted(idx[i::k]) for i in range(k)]


def cross_validate(conds: list[Condition], fit: Fit, k: int = 6, seed: int = 0) -> Ranking:
    """k-fold by condition: every condition scored by a model fitted without it. Scores are
    in the order of ``conds``."""
    scores: list[float | None] = [None] * len(conds)
    for test in folds(len(conds), k, seed):
        held = set(test)
        model = fit([s for i, c in enumerate(conds) if i not in held for s in c.samples()])
        for i in test:
            scores[i] = score(model, conds[i])
    return Ranking(scores)  # type: ignore[arg-type]


def hold_out(conds: list[Condition], is_test: Callable[[Condition], bool], fit: Fit) -> tuple[Ranking, AutoByte]:
    """Fit on the conditions ``is_test`` rejects, score the ones it accepts; returns the
    held-out ranking and the model."""
    test = [c for c in conds if is_test(c)]
    train = [s for c in conds if not is_test(c) for s in c.samples()]
    if not test or not train:
        raise ValueError("the split leaves no test or no training condition")
    model = fit(train)
    return ranking(model, test), model
