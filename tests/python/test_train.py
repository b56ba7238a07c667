"""`gradwire train` and `gradwire tolerance` end to end (tiny runs), and the profiler's parts."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
if not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed has no Gloo backend here", allow_module_level=True)


def gradwire(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradwire", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_train_compares_gloo_and_a_lossy_gradwire_in_one_table(tmp_path):
    r = gradwire(
        "train",
        "-b",
        "gloo",
        "-b",
        "gradwire",
        "--loss",
        "0.01",
        "--bound",
        "0.01",
        "--epochs",
        "3",
        "--target",
        "0.5",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [row["label"] for row in rows] == ["gloo", "gradwire loss 1.0% bound 1.0%"]
    for row in rows:
        assert row["final_accuracy"] > 0.5, row  # it learned, on both backends
        assert row["samples_per_s"] > 0 and row["median_step_s"] > 0
        assert row["curve"] and row["curve"][-1]["step"] == row["steps"]
    assert rows[1]["bytes_sent"] > 0
    assert (tmp_path / "accuracy_vs_time.png").stat().st_size > 10_000
    assert "time-to-accuracy" in r.stdout and "gradwire loss 1.0% bound 1.0%" in r.stdout


def test_train_rounds_alternate_and_report_the_median_run(tmp_path):
    r = gradwire(
        "train", "-b", "gradwire", "--repeats", "2", "--epochs", "1", "--target", "0.3", "--out", str(tmp_path)
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (row,) = json.loads((tmp_path / "results.json").read_text())
    assert row["rounds"] == 2 and len(row["time_to_accuracy_runs_s"]) == 2
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [
        "gradwire_lossless-r1.json",
        "gradwire_lossless-r2.json",
        "results.json",
    ]
    assert "median of 2 rounds" in r.stdout


def test_summary_of_rounds_takes_the_median_run_and_counts_misses_as_slowest():
    from gradwire.train.cli import summarize

    def run(tta, sps):
        return {"time_to_accuracy_s": tta, "samples_per_s": sps, "median_step_s": 1 / sps, "curve": [tta]}

    row = summarize([run(3.0, 10), run(None, 20), run(1.0, 30)])
    assert row["time_to_accuracy_s"] == 3.0 and row["curve"] == [3.0]  # order 1.0, 3.0, miss
    assert row["samples_per_s"] == 20 and row["rounds"] == 3
    assert row["time_to_accuracy_runs_s"] == [3.0, None, 1.0]
    assert summarize([run(None, 1), run(None, 2), run(2.0, 3)])["time_to_accuracy_s"] is None
    one = run(1.0, 1)
    assert summarize([one]) is one


def test_train_rejects_bad_input_in_one_line():
    r = gradwire("train", "-b", "gloo", "--bound", "0.5", "--loss", "0.1", "-b", "nccl")
    assert r.returncode == 2
    assert "error:" in r.stderr and "nccl" in r.stderr and "Traceback" not in r.stderr


def test_tolerance_reports_an_absurd_bound_as_degradation(tmp_path):
    r = gradwire(
        "tolerance",
        "--check",
        "0.6",
        "--seeds",
        "1",
        "--target",
        "0.9",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "degraded: overall loss 60.0%" in r.stdout
    s = json.loads((tmp_path / "tolerance.json").read_text())
    assert s["groups"]["overall"]["degraded"] == [0.6]
    assert s["loss_bound"] == 0.0
    assert (tmp_path / "tolerance.png").exists()


def test_the_tolerated_ratio_is_the_last_one_within_the_slack():
    from gradwire.tolerance import Run, summarize

    runs = [Run("overall", 0.0, s, 4.0, 0.96, 0.0) for s in range(3)]
    for p, e in [
        (0.01, 4.2),
        (0.02, 4.4),
        (0.05, 5.0),
        (0.1, 4.1),
    ]:  # 0.05 breaks the 10 % slack
        runs += [Run("overall", p, s, e, 0.96, p) for s in range(3)]
    runs += [Run("back", 0.01, s, math.inf, 0.5, 0.01) for s in range(3)]
    s = summarize(runs, slack=0.1)
    assert s["loss_bound"] == 0.02 and s["groups"]["overall"]["degraded"] == [0.05]
    assert s["groups"]["back"]["tolerated"] == 0.0


def test_loss_groups_drop_only_their_own_gradients():
    from gradwire.tolerance import make_dropper
    from gradwire.train.models import DigitsCNN

    def fresh():
        m = DigitsCNN()
        for p in m.parameters():
            p.grad = torch.arange(1, p.numel() + 1, dtype=torch.float32).view(p.shape)
        return m

    g = torch.Generator().manual_seed(0)
    m = fresh()
    make_dropper(m, "front", 1.0, 360, g)()
    params = list(m.parameters())
    assert (params[0].grad == 0).all() and (params[1].grad == 0).all()  # the first conv: weight and bias
    assert all((p.grad != 0).all() for p in params[2:])
    m = fresh()
    make_dropper(m, "large", 1.0, 360, g)()
    for p in m.parameters():
        n = p.numel()
        zeroed = (p.grad.view(-1) == 0).nonzero().view(-1)
        assert len(zeroed) == int(n) - int(0.8 * n)  # exactly the largest 20 % (values are 1..n)
        assert zeroed.min() >= int(0.8 * n)
