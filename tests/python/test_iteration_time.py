"""Iteration time from flows.csv: per worker, from one iteration's end (its last pull) to
the next; iteration 0 from the start of its forward pass."""

from __future__ import annotations

import math

import pandas as pd

from gradwire import reproduce as rp


def flows(rows):
    return pd.DataFrame(rows, columns=["dst", "finish_ns", "iteration", "pull"])


def test_iterations_chain_per_worker():
    f = flows(
        [
            # worker 1: pulls of iteration 0 end at 50 and 70, of iteration 1 at 150
            (1, 50.0, 0, 1),
            (1, 70.0, 0, 1),
            (1, 150.0, 1, 1),
            # worker 2: iteration 0 ends at 60, iteration 1 at 200
            (2, 60.0, 0, 1),
            (2, 200.0, 1, 1),
            # pushes never end an iteration
            (0, 999.0, 0, 0),
            (1, 999.0, 1, 0),
        ]
    )
    assert sorted(rp.iteration_times(f, begin_ns=-10.0)) == [70.0, 80.0, 80.0, 140.0]


def test_an_unfinished_pull_ends_the_workers_series():
    f = flows([(1, 50.0, 0, 1), (1, math.nan, 1, 1), (1, 300.0, 2, 1)])
    assert rp.iteration_times(f, begin_ns=0.0) == [50.0]


def test_iteration_metrics_from_a_run(tmp_path):
    csv = tmp_path / "flows.csv"
    flows([(1, 2e6, 0, 1), (1, 5e6, 1, 1), (2, 3e6, 0, 1), (2, 4e6, 1, 1)]).to_csv(csv, index=False)
    cfg = {
        "workload": {
            "kind": "dnn",
            "model": "resnet18",
            "compute": False,
            "start_us": 1000.0,
        }
    }
    m = rp.iteration_metrics(csv, cfg)
    # begin at 1 ms: iterations 1, 3, 2, 1 ms
    assert m["iterations_done"] == 4
    assert m["iter_mean_ms"] == 1.75 and m["iter_p99_ms"] == 3.0
    assert math.isnan(rp.iteration_metrics(csv, {"workload": {"kind": "incast"}})["iter_mean_ms"])
