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


# ---------------------------------------------------------------------------------------
# The network's choices (NetConfig) on a jagged speed surface, fast and slow jobs alike.

JAGGED = grid(2 * MB, 8 * MB, 4)


def jagged(level: float, arch: str, c: Candidate) -> float:
    """A smooth rise with the credit, but the 4 MB row 25 % down (as PS striping makes it in
    the simulator) on PS only; the level differs 100× between jobs."""
    v = 60.0 + 10.0 * c.credit_multiple - 2.0 * c.partition_bytes / MB
    if arch == "ps" and c.partition_bytes == 4 * MB:
        v *= 0.75
    if arch == "ps" and c.partition_bytes == 6 * MB:
        v *= 1.2
    return level * v


def jagged_conditions():
    from gradwire.tune.evaluate import Condition

    out = []
    for arch in ("ps", "ring"):
        for level in (0.1, 0.3, 10.0, 30.0):
            o = Observation([[level, level]] * 3, [level, level], [level, level], model="vgg16", arch=arch)
            out.append(Condition(o, {c: jagged(level, arch, c) for c in JAGGED}))
    return out


def test_log_target_slots_and_level_weight_rank_a_jagged_surface_for_slow_jobs_too():
    from gradwire.tune.autobyte import AutoByte, NetConfig

    conds = jagged_conditions()
    samples = [s for c in conds for s in c.samples()]

    def top1(**config):
        ab = AutoByte(seed=0, config=NetConfig(**config))
        ab.fit(samples, epochs=150, lr=1e-2, batch=len(JAGGED) * 2, seed=0)
        return ranking(ab, conds)

    shipped = top1(log_target=True, slot_embed=4, level_weight=0.1)
    assert shipped.within(0.05) == 1.0, shipped.scores
    # each choice alone falls short: (log S_p, k) alone fits the 4 and 6 MB rows only on
    # average; speed/scale under plain L2 fits the 100× slower jobs only on average; the
    # full L2 spends the network on the jobs' levels instead of their shapes
    for alone in ({}, {"log_target": True}, {"slot_embed": 4}, {"log_target": True, "slot_embed": 4}):
        assert top1(**alone).within(0.05) < 1.0, alone


def test_level_weight_one_is_plain_l2_and_lower_weights_only_the_level():
    from gradwire.tune.autobyte import AutoByte, NetConfig

    o1, o2 = jagged_conditions()[:2]
    obs = [o1.obs, o1.obs, o2.obs]
    err = torch.tensor([0.3, 0.1, -0.2])
    plain = AutoByte(config=NetConfig())._loss(err, obs)
    assert plain == pytest.approx(torch.mean(err**2).item())
    split = AutoByte(config=NetConfig(level_weight=0.0))._loss(err, obs)
    # only the spread around each observation's mean error is left: (±0.1)² twice, 0 once
    assert split == pytest.approx((0.01 + 0.01) / 3)


def test_ensemble_round_trips_with_its_config(tmp_path):
    from gradwire.tune.autobyte import AutoByte, NetConfig

    cfg = NetConfig(log_target=True, slot_embed=2, cell_embed=2, dense=16)
    ab = AutoByte(seed=3, config=cfg, members=2)
    conds = jagged_conditions()[:2]
    ab.fit([s for c in conds for s in c.samples()], epochs=2, batch=16)
    ab.save(tmp_path / "e.pt")
    again = AutoByte.load(tmp_path / "e.pt")
    assert again.config == cfg and len(again.nets) == 2
    assert again.predict(conds[0].obs, JAGGED) == pytest.approx(ab.predict(conds[0].obs, JAGGED))
    # a candidate off the paper's grid takes the "other" slot and cell
    off = [Candidate(3 * MB, 9), Candidate(64 * MB, 1)]
    assert all(v > 0 for v in again.predict(conds[0].obs, off).values())


def test_head_only_fine_tuning_keeps_the_encoders():
    from gradwire.tune.autobyte import AutoByte, NetConfig

    ab = AutoByte(seed=0, config=NetConfig(log_target=True, slot_embed=2))
    cond = jagged_conditions()[0]
    before = {k: v.clone() for k, v in ab.net.state_dict().items()}
    ab.fit(cond.samples(), epochs=3, batch=8, head_only=True)
    after = ab.net.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("head.") for k in changed), changed
