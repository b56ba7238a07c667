"""`gradwire reproduce --fast`: each series' largest point in the fast mode, the next at both
fidelities with the same share of servers sampled, refusals kept at packet level; on the
real extension, shrunk as test_reproduce does."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from conftest import set_args
from test_reproduce import TINY
from typer.testing import CliRunner

from gradwire import fidelity
from gradwire import reproduce as rp
from gradwire._core import ScenarioError, load_scenario
from gradwire.cli import app

DCTCP = 'sweep.scheme=[{ name = "dctcp", "transport.kind" = "dctcp" }]'
#: 4 workers on 2 servers, then 8 on 4: the 8-host quick leaf-spine holds both.
WORKERS = (
    'sweep.workers=[{ name = "4", "workload.workers" = 4, "workload.servers" = 2 },'
    ' { name = "8", "workload.workers" = 8, "workload.servers" = 4 }]'
)
#: The fast mode refuses leaf-spines and colocated servers by default; 2 of 4 servers at x = 8.
FAST = ["fast.unvalidated=true", "fast.servers=2"]


def plan(tmp_path, *extra):
    return rp.plan_reproduction(rp.get("dlcp-fig14"), tmp_path, [*TINY, DCTCP, WORKERS, *extra], quick=True, fast=True)


def test_largest_point_fast_only_the_next_at_both_with_the_same_share(tmp_path):
    p = plan(tmp_path, *FAST)
    for short, runs in p.plans:
        jobs = [j for j in p.jobs if j.scenario == short]
        got = sorted((j.x, j.fidelity, j.sampled) for j in jobs)
        assert got == [(4, "fast", "1 of 2"), (4, "packet", ""), (8, "fast", "2 of 4")]
        for j in jobs:
            assert j.spec.scenario.get("fidelity", "packet") == j.fidelity
            assert j.spec.name.endswith(fidelity.SUFFIX) == (j.fidelity == "fast")
            assert j.dir.name == j.spec.name and not j.refused
        # runs.json lists what runs, and a fast run is planned at its share of the cost
        assert [r.name for r in runs.runs] == [j.spec.name for j in jobs]
        (fast8,) = (j for j in jobs if j.x == 8)
        unsampled = rp.estimate_cost(fast8.spec.scenario)
        assert fast8.cost == pytest.approx(unsampled / 2)


def test_points_the_fast_mode_refuses_stay_at_packet_level(tmp_path):
    p = plan(tmp_path)
    assert all(j.fidelity == "packet" for j in p.jobs)
    assert len(p.jobs) == 4  # both x of both models, once each
    refused = fidelity.refusals(p.jobs)
    ((msg, points),) = refused.items()
    assert msg.startswith("`topology.kind`") and "fast.unvalidated" in msg
    assert sorted(points) == ["resnet18 dctcp @ 4", "resnet18 dctcp @ 4", "resnet18 dctcp @ 8", "resnet18 dctcp @ 8"]


def test_a_run_checks_what_building_it_would_refuse():
    text = '[topology]\nkind = "leaf_spine"\n[workload]\nkind = "ps"\nworkers = 4\nservers = 2\npush_bytes = 100000\n'
    (ok,) = load_scenario(text, ['fidelity="fast"', "fast.unvalidated=true"])
    assert ok.check() == (2, 2)  # its sample: both servers (fast.servers defaults to 32)
    (packet,) = load_scenario(text)
    assert packet.check() is None
    (refused,) = load_scenario(text, ['fidelity="fast"'])
    with pytest.raises(ScenarioError) as e:
        refused.check()
    assert e.value.key == "topology.kind"
    (collective,) = load_scenario(
        '[workload]\nkind = "collective"\nalgorithm = "ring"\nbytes = 100000\n', ['fidelity="fast"']
    )
    with pytest.raises(ScenarioError, match="not one"):
        collective.check()


def test_fast_reproduction_reports_the_error_beside_packet_level(tmp_path):
    out = tmp_path / "r"
    args = ["reproduce", "dlcp-fig14", "--quick", "--fast", "--jobs", "2", "--out", str(out)]
    r = CliRunner().invoke(app, [*args, *set_args([*TINY, DCTCP, WORKERS, *FAST])])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "fast mode: 4 runs" in r.stdout and "the fast mode beside packet level" in r.stdout
    table = pd.read_csv(out / "table.csv")
    assert (
        sorted(zip(table["x"], table["fidelity"]))
        == [(4, "fast"), (4, "fast"), (4, "packet"), (4, "packet")] + [(8, "fast")] * 2
    )
    # a sample holds fewer flows than its job, each of its servers' flows
    for _scen, g in table[table["x"] == 4].groupby("scenario"):
        pk, fa = (g[g["fidelity"] == f].iloc[0] for f in ("packet", "fast"))
        assert fa["flows"] < pk["flows"] and fa["flows_finished"] == fa["flows"]
    cmp = pd.read_csv(out / fidelity.FIDELITY_CSV)
    metrics = [m.key for m in rp.get("dlcp-fig14").metrics]
    assert len(cmp) == 2 * 2 * len(metrics)  # two models, two fast points each
    both = cmp[cmp["x"] == 4]
    assert both["packet"].notna().all() and (both["sampled"] == "1 of 2").all()
    for row in both.itertuples():
        pk = table[(table["scenario"] == row.scenario) & (table["x"] == 4) & (table["fidelity"] == "packet")]
        assert row.packet == pytest.approx(float(pk[row.metric].iloc[0]))
        assert row.error_pct == pytest.approx(100 * (row.fast / row.packet - 1))
    assert cmp[cmp["x"] == 8]["packet"].isna().all() and (cmp[cmp["x"] == 8]["error_pct"].isna()).all()
    md = (out / "table.md").read_text()
    assert " *" in md and "--fast" in md and fidelity.FIDELITY_MD in md
    # the main table shows packet level where both ran, the fast run at the largest point
    for scen, g in table.groupby("scenario"):
        series, cols, rows = rp.pivot(rp.get("dlcp-fig14"), g, "fct_mean_us")
        pk4 = g[(g["x"] == 4) & (g["fidelity"] == "packet")]["fct_mean_us"].iloc[0]
        assert rows[0] == [pytest.approx(pk4), pytest.approx(g[g["x"] == 8]["fct_mean_us"].iloc[0])], scen
        assert rp.fast_only(g) == {("dctcp", 8)}
    manifest = json.loads((out / "reproduce.json").read_text())
    assert manifest["fast"] is True and {r["fidelity"] for r in manifest["runs"]} == {"packet", "fast"}
    assert not math.isnan(float(cmp["fast_wall_s"].iloc[0]))
    # --resume finds every run, the fast ones under their own names
    r = CliRunner().invoke(app, [*args, "--resume", *set_args([*TINY, DCTCP, WORKERS, *FAST])])
    assert r.exit_code == 0 and "6 runs already done, 0 to run" in r.stdout, r.stdout


def test_every_built_in_reproduction_runs_at_packet_level_by_default(tmp_path):
    """docs/reproductions.md says why `--fast` alone runs none of them fast: the keys."""
    why = {
        "dlcp-fig14": {"ideal", "topology.kind", "transport.kind"},
        "dlcp-fig16": {"ideal", "topology.kind", "transport.kind"},
        "ltp-bst": {"topology.kind"},
        "rat-fig4": {"workload.kind"},
        "rat-fig5": {"workload.kind"},
        "pcn-fig9": {"workload.kind"},
        "pcn-fig10": {"workload.kind"},
    }
    for name, keys in why.items():
        p = rp.plan_reproduction(rp.get(name), tmp_path, quick=True, fast=True)
        assert all(j.fidelity == "packet" for j in p.jobs), name
        assert {m.split("`")[1] for m in fidelity.refusals(p.jobs)} == keys, name
