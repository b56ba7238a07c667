"""gradwire as a DDP communication hook, in real PyTorch DDP between processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_runtime import HERE, env_for, free_port

torch = pytest.importorskip("torch")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed has no Gloo backend here", allow_module_level=True)


def run(tmp: Path, world: int, plan: dict) -> list[dict]:
    plan = {**plan, "out": str(tmp)}
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(HERE, "ddp_worker.py"), json.dumps(plan)],
            env=env_for(r, world, "127.0.0.1", port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    logs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(lay[-2000:] for lay in logs)
    return [
        {**json.loads((tmp / f"rank{r}.json").read_text()), **torch.load(tmp / f"rank{r}.pt")} for r in range(world)
    ]


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_with_the_hook_trains_like_ddp_with_gloo(tmp_path, world):
    # Tiny buckets: several gradwire calls per step.
    plan = {"width": 128, "steps": 4, "bucket_cap_mb": 0.01, "loss_bound": 0.0}
    ranks = run(tmp_path, world, plan)
    for r in ranks:
        assert r["calls"] >= plan["steps"], r["calls"]
        assert r["bytes_lost"] == 0
        # Summation order differs from Gloo's: equal to float rounding.
        torch.testing.assert_close(r["params"], r["reference"], rtol=1e-5, atol=1e-6)
    # The replicas are bitwise the same.
    assert all(torch.equal(r["params"], ranks[0]["params"]) for r in ranks)


def test_a_lossy_hook_keeps_the_replicas_identical(tmp_path):
    world = 3
    # 2 % of each rank's datagrams dropped, 1500-byte packets so every bucket is many of
    # them; the reduce may lose up to 10 % of each transfer.
    impair = {str(p): [0.02, 0.0] for p in range(world)}
    plan = {"width": 512, "steps": 4, "bucket_cap_mb": 0.1, "loss_bound": 0.1, "init": {"mss": 1440, "impair": impair}}
    ranks = run(tmp_path, world, plan)
    assert sum(r["bytes_lost"] for r in ranks) > 0, "loss was injected and tolerated"
    for r in ranks:
        assert torch.isfinite(r["params"]).all()
    assert all(torch.equal(r["params"], ranks[0]["params"]) for r in ranks)


def test_the_ddp_step_benchmark_runs_and_checks_its_replicas(tmp_path):
    pytest.importorskip("sklearn")
    root = Path(HERE).parent.parent
    r = subprocess.run(
        [
            sys.executable,
            str(root / "benchmarks" / "ddp_step" / "run.py"),
            "--models",
            "cnn",
            "--worlds",
            "2",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [row["system"] for row in rows] == ["gloo", "gradwire", "gradwire+hook", "gradwire+sched"]
    assert all(row["matches_gloo"] for row in rows)
    assert all(row["replicas_identical"] for row in rows if row["system"] != "gloo")
    assert all(row["median_s"] > 0 and row["mean_s"] > 0 for row in rows)
    # both ratios are to Gloo's own row
    assert [(row["ratio"], row["mean_ratio"]) for row in rows if row["system"] == "gloo"] == [(1.0, 1.0)]
    # each ratio carries its paired-bootstrap interval (Gloo's own is a point)
    for row in rows:
        for key in ("ratio_interval", "mean_ratio_interval"):
            lo, hi = row[key]
            assert 0 < lo <= hi, (row["system"], key, lo, hi)
    assert [row["mean_ratio_interval"] for row in rows if row["system"] == "gloo"] == [[1.0, 1.0]]


def test_the_per_call_benchmark_times_every_path_beside_gloo():
    root = Path(HERE).parent.parent
    r = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "ddp_step" / "per_call.py"), "--floats", "1000", "--calls", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.rstrip().endswith(" us")]
    assert len(rows) == 2 * 7, r.stdout
    assert sum("Gloo" in line for line in rows) == 2 * 2
    assert all(float(line.split()[-2]) > 0 for line in rows)
