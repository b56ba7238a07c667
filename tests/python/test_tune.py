"""The tuners on a synthetic speed function with a known optimum (no network needed)."""

from __future__ import annotations

import math

import pytest

from gradwire.tune import BayesOpt, Candidate, GridSearch, Trigger, grid
from gradwire.tune.space import MB


def speed(c: Candidate, best_partition=6 * MB, best_multiple=3) -> float:
    """Samples/s: one smooth peak in (log S_p, k), as Fig. 3 of autobyte.md shows them."""
    dp = math.log2(c.partition_bytes / best_partition)
    dk = (c.credit_multiple - best_multiple) / 3
    return 1000.0 * math.exp(-0.5 * (dp**2 + dk**2))


def run(tuner, f, steps):
    for _ in range(steps):
        c = tuner.propose()
        if c is None:
            break
        tuner.observe(c, f(c))
    return tuner.best


def test_grid_is_the_paper_grid():
    g = grid()
    assert g[0] == Candidate(2 * MB, 1) and g[-1] == Candidate(16 * MB, 8)
    assert len(g) == 8 * 8 and len(set(g)) == len(g)
    with pytest.raises(ValueError):
        Candidate(0, 1)
    with pytest.raises(ValueError):
        grid(partition_step_bytes=0)


def test_grid_search_finds_the_optimum():
    g = grid()
    tuner = GridSearch(g)
    best, s = run(tuner, speed, len(g) + 5)
    assert tuner.done and tuner.propose() is None
    assert best == Candidate(6 * MB, 3) and s == max(speed(c) for c in g)


@pytest.mark.parametrize("seed", [0, 1])
def test_bayes_opt_gets_within_5_percent_in_20_trials(seed):
    g = grid()
    tuner = BayesOpt(g, trials=20, seed=seed)
    best, s = run(tuner, speed, 20)
    assert tuner.done
    assert s >= 0.95 * max(speed(c) for c in g), (best, s)
    # frozen afterwards: it keeps proposing its choice, whatever it measures next
    assert tuner.propose() == best
    tuner.observe(best, 1.0)
    assert tuner.propose() == best


def test_trigger_needs_a_5_percent_gain_and_does_not_oscillate():
    a, b = Candidate(2 * MB, 1), Candidate(4 * MB, 2)
    t = Trigger()
    assert t.choose(a, {a: 100.0, b: 104.9}) is None
    assert t.choose(a, {a: 100.0, b: 105.0}) == b
    # two configurations within 5 % of each other whose predictions keep swapping order:
    # the trigger never moves, whichever one is running
    for current in (a, b):
        for i in range(50):
            wobble = 1.0 + 0.02 * (-1) ** i
            assert t.choose(current, {a: 100.0 * wobble, b: 100.0 / wobble}) is None
    # a real gain is taken once, and not given back for noise
    current = t.choose(a, {a: 100.0, b: 110.0}) or a
    assert current == b
    assert t.choose(current, {a: 103.0, b: 100.0}) is None
    with pytest.raises(ValueError):
        t.choose(Candidate(8 * MB, 1), {a: 1.0})


def test_trigger_adapts_on_a_10_percent_miss():
    t = Trigger()
    assert not t.needs_adaptation(predicted=109.0, measured=100.0)
    assert t.needs_adaptation(predicted=111.0, measured=100.0)
    assert t.needs_adaptation(predicted=89.0, measured=100.0)


# ---------------------------------------------------------------------------------------
# AutoByte's meta-network, on a synthetic job whose optimum moves with the bandwidth.

torch = pytest.importorskip("torch", reason="the meta-network needs torch (pip install '.[torch]')")


def synthetic(bw_gbps: float, c: Candidate) -> float:
    """A job that wants small partitions and a deep window on a fast network, and large
    partitions with a shallow window on a slow one."""
    best_p = 2 * MB if bw_gbps >= 10 else 8 * MB
    best_k = 4 if bw_gbps >= 10 else 1
    return speed(c, best_partition=best_p, best_multiple=best_k) * (0.5 + bw_gbps / 50)


def observation(bw_gbps: float):
    from gradwire.tune.autobyte import Observation

    layers = [[1.0 + 0.1 * i, 1.2 + 0.1 * i] for i in range(12)]
    return Observation(layers, [bw_gbps, bw_gbps], [bw_gbps, bw_gbps], model="resnet50", arch="ps")


def test_meta_network_learns_where_the_optimum_moves(tmp_path):
    from gradwire.tune.autobyte import AutoByte

    g = grid(max_partition_bytes=10 * MB, max_credit_multiple=5)
    samples = [(observation(bw), c, synthetic(bw, c)) for bw in (3.0, 5.0, 10.0, 25.0) for c in g]
    ab = AutoByte(seed=0)
    losses = ab.fit(samples, epochs=60, seed=0)
    assert losses[-1] < 0.25 * losses[0]
    for bw in (3.0, 25.0):
        pred = ab.predict(observation(bw), g)
        chosen = max(pred, key=pred.get)
        truth = max(synthetic(bw, c) for c in g)
        assert synthetic(bw, chosen) >= 0.9 * truth, (bw, chosen)
    # the weights round-trip
    ab.save(tmp_path / "m.pt")
    again = AutoByte.load(tmp_path / "m.pt")
    assert again.predict(observation(5.0), g) == pytest.approx(ab.predict(observation(5.0), g))


def test_meta_network_takes_any_number_of_layers_and_workers():
    from gradwire.tune.autobyte import AutoByte, Observation

    ab = AutoByte(seed=1)
    g = grid(max_partition_bytes=4 * MB, max_credit_multiple=2)
    for layers, workers in ((3, 2), (50, 8)):
        assert len(ab.predict(Observation.uniform(layers, workers, "vgg16", "ring"), g)) == len(g)
    with pytest.raises(ValueError):
        Observation([], [1.0], [1.0], "x", "ps")


def test_autobyte_loop_switches_for_a_predicted_gain_and_adapts_on_a_miss():
    pytest.importorskip("torch")
    from gradwire.tune.autobyte import AutoByte
    from gradwire.tune.online import AutoByteLoop

    g = grid(max_partition_bytes=10 * MB, max_credit_multiple=5)
    samples = [(observation(bw), c, synthetic(bw, c)) for bw in (3.0, 5.0, 10.0, 25.0) for c in g]
    ab = AutoByte(seed=0)
    ab.fit(samples, epochs=60, seed=0)
    with pytest.raises(ValueError, match="adapt"):
        AutoByteLoop(ab, g, adapt="some")
    with pytest.raises(ValueError, match="start"):
        AutoByteLoop(ab, g).observe(observation(3.0), 1.0)
    worst = min(g, key=lambda c: synthetic(3.0, c))
    loop = AutoByteLoop(ab, g, start=worst)
    assert loop.observe(observation(3.0), synthetic(3.0, worst)) is False  # no prediction yet
    choice = loop.decide(observation(3.0))
    assert choice is not None and loop.current == choice
    assert synthetic(3.0, choice) >= 0.9 * max(synthetic(3.0, c) for c in g)
    # a measured speed far from the prediction fine-tunes a copy: the caller's network stays
    before = ab.predict(observation(3.0), [choice])[choice]
    assert loop.observe(observation(3.0), 0.3 * loop.predicted) is True
    assert loop.adaptations == 1
    assert ab.predict(observation(3.0), [choice])[choice] == pytest.approx(before)
    # a configuration outside the candidates (the hook's default ⟨4 MiB, 8 MiB⟩) is predicted too
    off_grid = Candidate(4 << 20, 2)
    other = AutoByteLoop(ab, g, start=off_grid)
    other.decide(observation(10.0))
    assert other.predicted is not None


def test_autobyte_loop_fine_tunes_in_the_background_to_the_same_network():
    pytest.importorskip("torch")
    import threading

    from gradwire.tune.autobyte import AutoByte
    from gradwire.tune.online import AutoByteLoop

    g = grid(max_partition_bytes=6 * MB, max_credit_multiple=3)
    ab = AutoByte(seed=0)
    ab.fit([(observation(bw), c, synthetic(bw, c)) for bw in (3.0, 10.0) for c in g], epochs=20, seed=0)
    loops = {bg: AutoByteLoop(ab, g, start=g[0], background=bg) for bg in (False, True)}
    for loop in loops.values():
        loop.decide(observation(3.0))
        assert loop.observe(observation(3.0), 0.3 * loop.predicted) is True
    loops[True].settle()
    want = loops[False].predictor.predict(observation(3.0), g)
    assert loops[True].predictor.predict(observation(3.0), g) == pytest.approx(want)
    assert ab.predict(observation(3.0), g) != pytest.approx(want)

    # while a fine-tuning runs, decisions use the network as it was and a miss starts none
    loop = AutoByteLoop(ab, g, start=g[0], background=True)
    gate = threading.Event()
    fit = loop._fit
    loop._fit = lambda model, samples: (gate.wait(30), fit(model, samples))
    loop.decide(observation(3.0))
    before = loop.predictor
    assert loop.observe(observation(3.0), 0.3 * loop.predicted) is True
    assert loop.observe(observation(3.0), 0.3 * loop.predicted) is False
    loop.decide(observation(3.0))
    assert loop.predictor is before and loop.adaptations == 1
    gate.set()
    loop.settle()
    assert loop.predictor is not before
    assert loop.predictor.predict(observation(3.0), g) == pytest.approx(want)

    # a fine-tuning that fails in its thread is raised by the next decision, not lost
    def fail(model, samples):
        raise ValueError("bad sample")

    loop._fit = fail
    assert loop.observe(observation(3.0), 0.3 * loop.predicted) is True
    loop._tuning.join()
    with pytest.raises(RuntimeError, match="background fine-tuning failed"):
        loop.decide(observation(3.0))
    loop.decide(observation(3.0))  # reported once; the network stays as it was
    assert loop.predictor.predict(observation(3.0), g) == pytest.approx(want)


def test_the_scheduled_hook_needs_a_batch_size_for_autobyte():
    pytest.importorskip("torch")
    import gradwire.torch as gt
    from gradwire.tune.autobyte import AutoByte
    from gradwire.tune.online import AutoByteLoop

    with pytest.raises(ValueError, match="batch_size"):
        gt.ScheduledState(tuner=AutoByteLoop(AutoByte(seed=0)))
    assert gt.ScheduledState(tuner=AutoByteLoop(AutoByte(seed=0)), batch_size=32).batch_size == 32


def test_the_torch_hooks_import_no_tuner_or_simulated_job():
    """The DDP hooks (and the tuning types they read) load neither bayes_opt, the tuners
    nor the simulated job: a training process pays for what it runs."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    probe = (
        "import sys, gradwire.torch, gradwire.torch.scheduled\n"
        "from gradwire.tune.space import Candidate\n"
        "from gradwire.tune.observation import Observation\n"
        "bad = [m for m in sys.modules if m.startswith(('bayes_opt', 'gradwire.tune.online',"
        " 'gradwire.tune.simjob', 'gradwire.tune.tuners', 'gradwire.sim'))]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_autobyte_is_known_to_the_hook_by_what_it_observes():
    pytest.importorskip("torch")
    from gradwire.torch.scheduled import _is_autobyte
    from gradwire.tune.online import AutoByteLoop

    assert AutoByteLoop.observes_network is True
    assert not _is_autobyte(None) and not _is_autobyte(GridSearch([Candidate(8 * MB, 1)]))
