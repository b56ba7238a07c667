"""The ranking evaluation of AutoByte's meta-network (gradwire.tune.evaluate) on a tiny
synthetic dataset with a known answer."""

from __future__ import annotations

import pytest

from gradwire.tune.space import MB, Candidate, grid

torch = pytest.importorskip("torch", reason="the meta-network needs torch (pip install '.[torch]')")

from gradwire.tune.autobyte import Observation  # noqa: E402
from gradwire.tune.evaluate import by_condition, cross_validate, folds, hold_out, ranking, score  # noqa: E402

CANDS = grid(2 * MB, 6 * MB, 3)


def obs(arch: str, gbps: float) -> Observation:
    return Observation([[1.0, 1.1]] * 4, [gbps, gbps], [gbps, gbps], model="resnet50", arch=arch)


def speeds(arch: str, gbps: float) -> dict[Candidate, float]:
    """PS wants ⟨2 MB, 3×⟩, ring wants ⟨6 MB, 1×⟩; the level scales with the bandwidth."""
    best = Candidate(2 * MB, 3) if arch == "ps" else Candidate(6 * MB, 1)
    return {c: gbps * (100.0 if c == best else 80.0 - c.credit_multiple) for c in CANDS}


def dataset():
    out = []
    for arch in ("ps", "ring"):
        for gbps in (1.0, 2.0, 5.0, 10.0):
            o = obs(arch, gbps)
            out.extend((o, c, v) for c, v in speeds(arch, gbps).items())
    return out


class Lookup:
    """A predictor fitted by memorizing each architecture's mean speed per candidate: it
    ranks an unseen condition right only if its training data had that architecture."""

    def __init__(self, samples):
        self.seen = {id(o) for o, _, _ in samples}
        self.table: dict[tuple[str, Candidate], list[float]] = {}
        for o, c, v in samples:
            self.table.setdefault((o.arch, c), []).append(v / o.upload_gbps[0])

    def predict(self, o, candidates):
        return {c: sum(self.table.get((o.arch, c), [0.0])) for c in candidates}


def test_by_condition_groups_one_observation_per_condition():
    conds = by_condition(dataset())
    assert len(conds) == 8 and all(len(c.speeds) == len(CANDS) for c in conds)


def test_score_is_the_first_ranked_speed_over_the_optimum():
    cond = by_condition(dataset())[0]  # PS, 1 Gbit/s: the optimum is 100, ⟨6 MB, 3×⟩ is 77
    assert score(Lookup(cond.samples()), cond) == 1.0

    class Wrong:
        def predict(self, o, candidates):
            return {c: float(c == Candidate(6 * MB, 3)) for c in candidates}

    assert score(Wrong(), cond) == pytest.approx(0.77)
    r = ranking(Wrong(), [cond, cond])
    assert r.within(0.05) == 0.0 and r.mean_regret == pytest.approx(0.23)


def test_folds_partition_the_conditions():
    fs = folds(10, 3, seed=1)
    assert sorted(i for f in fs for i in f) == list(range(10))
    assert folds(10, 3, seed=1) == fs
    with pytest.raises(ValueError):
        folds(3, 4)


def test_cross_validation_scores_each_condition_without_it():
    conds = by_condition(dataset())
    fitted = []

    def fit(samples):
        fitted.append(Lookup(samples))
        return fitted[-1]

    r = cross_validate(conds, fit, k=4)
    assert len(fitted) == 4 and len(r.scores) == len(conds)
    for f in fitted:  # each condition is out of exactly one model's training data
        assert len(f.seen) == 6
    assert sum(sum(id(c.obs) not in f.seen for f in fitted) for c in conds) == len(conds)
    assert r.within(0.05) == 1.0  # every fold keeps both architectures in training


def test_hold_out_an_architecture_is_scored_out_of_sample():
    conds = by_condition(dataset())
    r, model = hold_out(conds, lambda c: c.obs.arch == "ring", Lookup)
    assert len(r.scores) == 4 and r.within(0.05) == 0.0  # it never saw ring
    assert all(id(c.obs) not in model.seen for c in conds if c.obs.arch == "ring")
    with pytest.raises(ValueError):
        hold_out(conds, lambda c: True, Lookup)
