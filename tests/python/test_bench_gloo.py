"""Smoke test of benchmarks/allreduce_vs_gloo/run.py: a --quick run at tiny sizes must
finish, write the expected rows, and pass its own correctness verification."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "allreduce_vs_gloo" / "run.py"


def torch_missing() -> str | None:
    # find_spec only: importing torch.distributed here would cost seconds on a busy
    # machine; the benchmark's ranks import it anyway and report a missing Gloo (exit 2).
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed: the benchmark compares gradwire with torch.distributed Gloo"
    return None


def bench(out: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """One --quick run of the benchmark on 2 ranks; skips if torch has no Gloo."""
    proc = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--worlds", "2", *args, "--out", str(out), "--timeout", "120"],
        env=dict(os.environ, COLUMNS="160", MPLBACKEND="Agg", **env),
        capture_output=True,
        text=True,
        timeout=180,
    )
    if proc.returncode == 2 and "no Gloo backend" in proc.stdout:
        pytest.skip("torch.distributed has no Gloo backend in this build: " + proc.stdout.strip()[-300:])
    return proc


@pytest.mark.skipif(torch_missing() is not None, reason=torch_missing() or "")
def test_quick_benchmark_writes_expected_rows_and_verifies(tmp_path):
    import pandas as pd

    sizes = [0.01, 0.1]
    proc = bench(tmp_path, "--sizes", ",".join(map(str, sizes)), "--reps", "2", "--warmup", "1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "verification passed" in proc.stdout
    assert "Gloo cannot be given loss" in proc.stdout

    df = pd.read_csv(tmp_path / "results.csv")
    want_cols = {"world", "MB", "system", "median_s", "p90_s", "ratio_to_gloo", "loss_ratio_to_lossless", "verified"}
    assert want_cols <= set(df.columns)
    systems = ["gloo", "gradwire", "gradwire+loss1%"]
    got = {(r.world, r.MB, r.system) for r in df.itertuples()}
    assert got == {(2, mb, s) for mb in sizes for s in systems}
    assert df.verified.all()
    assert (df.median_s > 0).all() and (df.p90_s >= df.median_s).all()
    gloo = df[df.system == "gloo"]
    assert (gloo.ratio_to_gloo == 1.0).all()
    lossless = df[df.system == "gradwire"]
    assert lossless.bitwise_equal_to_sum.all() and (lossless.bytes_lost_max == 0).all()
    lossy = df[df.system == "gradwire+loss1%"]
    assert lossy.loss_ratio_to_lossless.notna().all()
    assert (lossy.min_delivered_fraction >= 0.99).all()

    records = pd.read_json(tmp_path / "results.json")
    assert len(records) == len(df) and "samples_s" in records.columns
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["verification"] == "passed" and not meta["failures"]
    assert (tmp_path / "allreduce_vs_gloo.png").stat().st_size > 1000


@pytest.mark.skipif(torch_missing() is not None, reason=torch_missing() or "")
def test_a_wrong_result_fails_the_benchmark(tmp_path):
    """One element of gradwire's result spoiled on one rank: the run must say so and exit 1."""
    import pandas as pd

    proc = bench(
        tmp_path,
        *("--sizes", "0.01", "--reps", "1", "--warmup", "0", "--no-loss", "--no-plot"),
        ALLREDUCE_VS_GLOO_CORRUPT="gradwire",
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "verification FAILED" in proc.stdout
    df = pd.read_csv(tmp_path / "results.csv").set_index("system")
    assert not df.loc["gradwire", "verified"] and df.loc["gloo", "verified"]
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["verification"] == "FAILED"
    assert any("differs from the numpy sum" in f or "different bits" in f for f in meta["failures"])
