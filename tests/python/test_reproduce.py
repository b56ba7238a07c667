"""`gradwire reproduce`: every reproduction, shrunk (--quick plus overrides), on the real
extension; the tables, the figure and the per-iteration BST."""

from __future__ import annotations

import json
import math
import os

import pandas as pd
import pytest
from conftest import run_cli, set_args
from typer.testing import CliRunner

from gradwire import reproduce as rp
from gradwire.cli import app

#: On top of --quick: the smallest model and jumbo frames (6x fewer packets), so each run
#: takes a fraction of a second.
TINY = ["workload.model=resnet18", "transport.mss_bytes=8960"]

TABLE_COLUMNS = ["reproduction", "scenario", "model", "series", "x", "run"]
PNG = b"\x89PNG\r\n\x1a\n"
SCHEMES = ["dctcp", "pias", "pfabric", "dlcp", "dlcp-pair"]
#: dlcp-fig14 also carries the best DLCP combinations measured.
FIG14_SCHEMES = [*SCHEMES, "dlcp-tuned", "dlcp-share", "dlcp-strict"]
#: The fluid lower bounds beside the schemes (the `ideal` scenario key).
IDEAL = ["ideal-fair", "ideal-srpt"]
FCT = ["fct_mean_us", "fct_p99_us"]
BST = ["bst_median_ms", "bst_p99_ms"]
DLCP_MODELS = ["resnet50", "inception_v3"]

#: What each quick reproduction must give: its --jobs, then per model a scenario
#: `<name>-<model>` whose runs are every (series, x) pair and have every metric > 0.
#: (name: jobs, models, metrics, x values, series)
QUICK = {
    # 2 models x 2 scales x (8 schemes + 2 fluid rows)
    "dlcp-fig14": (1, DLCP_MODELS, [*FCT, "iter_mean_ms", "iter_p99_ms"], [4, 8], FIG14_SCHEMES + IDEAL),
    "dlcp-fig16": (1, DLCP_MODELS, FCT[::-1], [1000.0, 5000.0, 10000.0], SCHEMES + IDEAL),
    "ltp-bst": (2, ["resnet50", "vgg16"], BST, [0.0, 0.001, 0.01], ["newreno", "dctcp", "dlcp", "ltp"]),
}


@pytest.fixture
def cli():
    return CliRunner()


def reproduce(cli, tmp_path, name, *extra, jobs=2):
    out = tmp_path / name
    r = cli.invoke(app, ["reproduce", name, "--quick", "--out", str(out), "--jobs", str(jobs), *set_args(TINY), *extra])
    assert r.exit_code == 0, r.stdout + r.stderr
    return out, r.stdout


def check_common(out, name, scenarios, metrics, xs, series):
    n_runs = len(scenarios) * len(xs) * len(series)
    table = pd.read_csv(out / "table.csv")
    assert list(table.columns[: len(TABLE_COLUMNS)]) == TABLE_COLUMNS
    for m in metrics:
        assert m in table.columns
        assert (table[m] > 0).all(), table[["run", m]]
    assert len(table) == n_runs
    assert (table["reproduction"] == name).all()
    assert list(dict.fromkeys(table["scenario"])) == scenarios
    assert (table["flows_finished"] == table["flows"]).all()
    for scen in scenarios:
        sub = table[table["scenario"] == scen]
        assert sorted(set(sub["x"])) == pytest.approx(xs)
        assert list(dict.fromkeys(sub["series"])) == series
        assert len(sub) == len(xs) * len(series)  # one row per (series, x)
        for run in sub["run"]:
            assert (out / scen / run / "flows.csv").is_file()
            assert (out / scen / run / "summary.json").is_file()
        assert (out / scen / "summary.csv").is_file() and (out / scen / "runs.json").is_file()
    assert (out / f"{name}.png").read_bytes()[:8] == PNG
    md = (out / "table.md").read_text()
    assert md.count("\n### ") == len(scenarios) * len(rp.get(name).metrics) and "|---|" in md
    manifest = json.loads((out / "reproduce.json").read_text())
    assert manifest["name"] == name and manifest["quick"] is True
    assert manifest["wall_seconds"] > 0 and manifest["cpu_count"] >= 1 and manifest["jobs"] >= 1
    assert len(manifest["runs"]) == n_runs
    assert all(r["wall_seconds"] > 0 for r in manifest["runs"])
    return table


def quick(cli, tmp_path, name):
    """`name` run with --quick and checked against its row of QUICK: (out dir, stdout, table)."""
    jobs, models, metrics, xs, series = QUICK[name]
    out, stdout = reproduce(cli, tmp_path, name, jobs=jobs)
    table = check_common(out, name, [f"{name}-{m}" for m in models], metrics, xs, series)
    assert json.loads((out / "reproduce.json").read_text())["jobs"] == jobs
    return out, stdout, table


def test_dlcp_fig14_quick(cli, tmp_path):
    out, stdout, table = quick(cli, tmp_path, "dlcp-fig14")
    # every worker's 3 iterations are measured (but a lone server's own worker, which pulls
    # nothing over the network), and the fluid rows are floors
    assert (table["iterations_done"] == 3 * (table["x"] - (table["x"] == 4))).all()
    assert (table["iter_p99_ms"] >= table["iter_mean_ms"]).all()
    for (_scen, _x), g in table.groupby(["scenario", "x"]):
        ideal = g[g["series"].isin(IDEAL)]
        schemes = g[g["series"].isin(FIG14_SCHEMES)]
        for m in ("fct_mean_us", "fct_p99_us"):
            assert ideal[m].min() <= schemes[m].min(), (m, g[["series", m]])
        # iteration time: neither fluid schedule minimizes the last pull's end (SRPT and fair
        # sharing are not makespan-optimal), and compute dominates at this size; the fluid
        # rows are a reference within a hair of the best scheme, not a strict floor
        for m in ("iter_mean_ms", "iter_p99_ms"):
            assert ideal[m].min() <= 1.001 * schemes[m].min(), (m, g[["series", m]])
    assert (table["fct_p99_us"] >= table["fct_mean_us"]).all()
    # per stage: every run has pushes and pulls, and the overall p99 is one of the two stages'
    for st in ("push", "pull"):
        assert (table[f"{st}_p99_us"] >= table[f"{st}_mean_us"]).all()
    assert (table["fct_p99_us"] <= table[["push_p99_us", "pull_p99_us"]].max(axis=1) + 1e-6).all()
    lo = table[["push_mean_us", "pull_mean_us"]].min(axis=1) - 1e-6
    hi = table[["push_mean_us", "pull_mean_us"]].max(axis=1) + 1e-6
    assert ((table["fct_mean_us"] >= lo) & (table["fct_mean_us"] <= hi)).all()
    assert set(table["model"]) == {"resnet18"}  # the override, reported truthfully
    assert "total wall time" in stdout and "p99 FCT" in stdout


def test_sweep_axis_override_and_inline(cli, tmp_path):
    """A bundled axis is replaced with --set sweep.<axis>=[...]; --jobs 1 runs in-process."""
    w = 'sweep.workers=[{ name = "6", "workload.workers" = 6, "workload.servers" = 2 }]'
    s = (
        'sweep.scheme=[{ name = "dctcp", "transport.kind" = "dctcp" }, '
        '{ name = "dlcp", "transport.kind" = "dlcp", "switch.policy" = "dlcp", "routing.mode" = "spray" }]'
    )
    out, _ = reproduce(cli, tmp_path, "dlcp-fig14", "--set", w, "--set", s, jobs=1)
    table = pd.read_csv(out / "table.csv")
    assert table["x"].tolist() == [6] * 4
    assert table["series"].tolist() == ["dctcp", "dlcp"] * 2


def test_runs_on_threads_share_the_cores(cli, tmp_path):
    """With --set threads=2 and no --jobs, the pool gives each run its two cores."""
    w = 'sweep.workers=[{ name = "6", "workload.workers" = 6, "workload.servers" = 2 }]'
    s = 'sweep.scheme=[{ name = "dctcp", "transport.kind" = "dctcp" }]'
    out = tmp_path / "threads"
    args = ["reproduce", "dlcp-fig14", "--quick", "--out", str(out), *set_args(TINY)]
    r = cli.invoke(app, [*args, "--set", w, "--set", s, "--set", "threads=2"])
    assert r.exit_code == 0, r.stdout + r.stderr
    table = pd.read_csv(out / "table.csv")
    record = json.loads((out / "reproduce.json").read_text())
    assert record["jobs"] == max(1, min((os.cpu_count() or 1) // 2, len(table)))
    assert (table["flows_finished"] == table["flows"]).all()


def test_a_ray_task_asks_for_its_runs_threads_up_to_the_largest_node():
    from gradwire.cluster import task_cpus

    assert task_cpus(1, [4.0, 2.0]) == 1
    assert task_cpus(2, [4.0, 2.0]) == 2
    assert task_cpus(8, [4.0, 2.0]) == 4, "more than any node has: the largest node's CPUs"
    assert task_cpus(2, []) == 1


def test_dlcp_fig16_quick(cli, tmp_path):
    out, _, table = quick(cli, tmp_path, "dlcp-fig16")
    # RTOmin does not touch DLCP, pFabric or the fluid rows: identical results at every RTOmin
    for scheme in ("dlcp", "dlcp-pair", "pfabric", *IDEAL):
        assert table[table["series"] == scheme]["fct_p99_us"].nunique() == 1
    md = (out / "table.md").read_text()
    assert "| 1 | 5 | 10 |" in md  # RTOmin shown in ms


def test_ltp_bst_quick_parallel(cli, tmp_path):
    out, _, table = quick(cli, tmp_path, "ltp-bst")
    assert (table["iterations"] == 3).all() and (table["iterations_done"] == 3).all()
    assert (table["bst_p99_ms"] >= table["bst_median_ms"]).all()
    assert "| 0 | 0.1 | 1 |" in (out / "table.md").read_text()  # loss rate in %
    # BST is per iteration: recompute one run from flows.csv
    row = table[(table["series"] == "newreno") & (table["x"] == 0.01)].iloc[0]
    flows = pd.read_csv(out / row["scenario"] / row["run"] / "flows.csv")
    assert sorted(flows["iteration"].unique()) == [0, 1, 2]
    bst = sorted((g["finish_ns"].max() - g["start_ns"].min()) / 1e6 for _, g in flows.groupby("iteration"))
    assert row["bst_median_ms"] == pytest.approx(bst[1])
    assert row["bst_p99_ms"] == pytest.approx(bst[2])  # p99 of 3 iterations = max
    whole = (flows["finish_ns"].max() - flows["start_ns"].min()) / 1e6
    assert row["bst_p99_ms"] < whole  # not the whole run
    # the loss axis reaches the TCP baseline: it resends more. (Its median BST need not grow
    # at this tiny size, where the PS incast's own drops and timeouts set the lossless BST:
    # with Linux's loss cut, 38.9 ms lossless and 33.5 ms at 1 %.)
    nr = table[(table["series"] == "newreno") & (table["scenario"] == row["scenario"])].set_index("x")
    assert nr.loc[0.01, "retransmits"] > 1.2 * nr.loc[0.0, "retransmits"]


def test_bst_per_iteration_and_nearest_rank():
    flows = pd.DataFrame(
        {
            "iteration": [0, 0, 1, 1, 2],
            "start_ns": [100, 50, 1000, 1200, 5000],
            "finish_ns": [400, 300, 1500, None, 5100],
        }
    )
    assert rp.bst_per_iteration(flows) == {0: 350.0, 2: 100.0}  # iteration 1 unfinished
    assert rp.nearest_rank(list(range(1, 11)), 0.99) == 10
    assert rp.nearest_rank(list(range(1, 11)), 0.5) == 5
    assert math.isnan(rp.nearest_rank([], 0.5))


def test_cost_estimate_orders_by_bytes():
    small = {"workload": {"kind": "dnn", "model": "resnet18", "workers": 16}}
    big = {"workload": {"kind": "dnn", "model": "resnet50", "workers": 144}}
    assert rp.estimate_cost(big) > rp.estimate_cost(small) > 0
    # at the same scale a DLCP run (resend rounds) is expected to cost more than DCTCP
    dlcp = {**big, "transport": {"kind": "dlcp"}}
    dctcp = {**big, "transport": {"kind": "dctcp"}}
    assert rp.estimate_cost(dlcp) > rp.estimate_cost(dctcp) == rp.estimate_cost(big)


def test_list_and_errors(cli, tmp_path):
    r = cli.invoke(app, ["reproduce", "--list"])
    assert r.exit_code == 0
    for name in ("dlcp-fig14", "dlcp-fig16", "ltp-bst"):
        assert name in r.stdout
    r = cli.invoke(app, ["reproduce", "no-such-figure"])
    assert r.exit_code == 2 and "no-such-figure" in r.stderr and "dlcp-fig14" in r.stderr
    r = cli.invoke(app, ["reproduce"])
    assert r.exit_code == 2
    r = cli.invoke(app, ["reproduce", "ltp-bst", "--out", str(tmp_path / "x"), "--set", "topology.spinez=3"])
    assert r.exit_code == 2 and "topology.spinez" in r.stderr and "ltp-bst-resnet50" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    r = cli.invoke(app, ["reproduce", "dlcp-fig16", "--out", str(tmp_path / "y"), "--set", "sweep={}"])
    assert r.exit_code == 2 and "transport.rto_min_us" in r.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_subprocess_unknown_name_exits_2(gradwire_cmd):
    p = run_cli(gradwire_cmd + ["reproduce", "nope"])
    assert p.returncode == 2 and "nope" in p.stderr and "Traceback" not in p.stderr


def test_resume_keeps_finished_runs(cli, tmp_path):
    """--resume reruns only what is missing (or was planned differently)."""
    one = 'sweep.scheme=[{ name = "dctcp", "transport.kind" = "dctcp" }]'
    args = ["reproduce", "dlcp-fig16", "--quick", "--jobs", "1", "--out", str(tmp_path / "r"), *set_args(TINY + [one])]
    r = cli.invoke(app, args)
    assert r.exit_code == 0, r.stdout + r.stderr
    first = pd.read_csv(tmp_path / "r" / "table.csv")
    victim = tmp_path / "r" / first.loc[0, "scenario"] / first.loc[0, "run"] / "summary.json"
    victim.unlink()
    r = cli.invoke(app, [*args, "--resume"])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "5 runs already done, 1 to run" in r.stdout
    again = pd.read_csv(tmp_path / "r" / "table.csv")
    cols = ["scenario", "series", "x", "fct_mean_us", "fct_p99_us", "flows_finished"]
    pd.testing.assert_frame_equal(first[cols], again[cols])
    # a different configuration is not reused
    r = cli.invoke(app, [*args, "--resume", "--set", "seed=3"])
    assert r.exit_code == 0 and "0 runs already done, 6 to run" in r.stdout


def test_one_registry_holds_every_reproduction_and_how_it_is_reduced():
    """Scenario sweeps carry their reduction; AutoByte's figures are entries of the same
    registry, each naming the function that draws it."""
    import importlib

    kinds = {type(r).__name__ for r in rp.REPRODUCTIONS.values()}
    assert kinds == {"Reproduction", "TuningFigure"}
    for name, r in rp.REPRODUCTIONS.items():
        assert r.name == name
        if isinstance(r, rp.Reproduction):
            assert isinstance(r.reduce, rp.Reduction) and callable(r.reduce.run)
        else:
            module, function = r.run.split(":")
            assert callable(getattr(importlib.import_module(module), function)), r.run
    assert rp.get("pcn-fig10").reduce.files is rp.pcn_files
