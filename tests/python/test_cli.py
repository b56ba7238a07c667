"""The `gradwire` CLI, in-process (typer's CliRunner) and as a real subprocess."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import INCAST, SMALL, run_cli, set_args
from typer.testing import CliRunner

import gradwire
from gradwire.cli import app
from gradwire.results import COLUMNS

FLOWS_COLUMNS = [
    "flow_id",
    "src",
    "dst",
    "size_bytes",
    "start_ns",
    "finish_ns",
    "fct_ns",
    "retransmits",
    "timeouts",
    "iteration",
    "pull",
    "layer",
]


@pytest.fixture
def cli():
    return CliRunner()


def check_results(out, runs, n_flows, queues=False):
    """The files `gradwire sim` promises, for every run."""
    for run in runs:
        d = out / run
        flows = pd.read_csv(d / "flows.csv")
        assert list(flows.columns) == FLOWS_COLUMNS
        assert len(flows) == n_flows
        assert flows["fct_ns"].notna().all()
        # (times are truncated to ns separately, so allow 1 ns)
        assert ((flows["fct_ns"] - (flows["finish_ns"] - flows["start_ns"])).abs() <= 1).all()
        summary = json.loads((d / "summary.json").read_text())
        assert summary["packets"]["conserved"] is True
        assert summary["flows_finished"] == n_flows
        assert (d / "queues.csv").exists() == queues
    table = pd.read_csv(out / "summary.csv")
    assert table["run"].tolist() == runs
    assert list(table.columns)[-len(COLUMNS) :] == COLUMNS
    assert table["conserved"].all()
    assert (table["flows_finished"] == n_flows).all()
    return table


def test_sim_incast_in_process(cli, tmp_path):
    out = tmp_path / "res"
    r = cli.invoke(app, ["sim", str(INCAST), "--out", str(out)])
    assert r.exit_code == 0, r.stdout + r.stderr
    table = check_results(out, ["incast-small"], n_flows=6, queues=True)
    assert table.loc[0, "transport"] == "dctcp"
    assert table.loc[0, "fct_p50_us"] <= table.loc[0, "fct_p99_us"] <= table.loc[0, "fct_max_us"]
    for png in ("fct_cdf.png", "fct_bars.png", "queues.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    # the table and the output paths are printed
    assert "incast-small" in r.stdout and "summary.csv" in r.stdout and "fct_cdf.png" in r.stdout
    q = pd.read_csv(out / "incast-small" / "queues.csv")
    assert list(q.columns) == ["time_ns", "port", "bytes", "packets"]
    assert set(q["port"]) == {"leaf0->host0"}


def test_sim_builtin_sweep_with_params(cli, tmp_path):
    """The default scenario (leafspine-compare) shrunk: one row per sweep point, the sweep
    key as a column."""
    out = tmp_path / "cmp"
    args = ["sim", "--out", str(out), "--no-plot", "--seed", "5"]
    args += set_args(SMALL + ["workload.workers=8", "workload.servers=2", "workload.push_bytes=100000"])
    r = cli.invoke(app, args)
    assert r.exit_code == 0, r.stdout + r.stderr
    # 8 workers x 2 colocated servers: 14 pushes + 14 pulls (no flow to oneself)
    table = check_results(out, ["kind=newreno", "kind=dctcp"], n_flows=28)
    assert table["transport.kind"].tolist() == ["newreno", "dctcp"]
    assert table["transport"].tolist() == ["newreno", "dctcp"]
    assert not (out / "fct_cdf.png").exists()
    manifest = json.loads((out / "runs.json").read_text())
    assert manifest["scenario"] == "leafspine-compare"
    assert all(run["config"]["seed"] == 5 for run in manifest["runs"])

    # `gradwire plot` draws them afterwards
    r = cli.invoke(app, ["plot", str(out)])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert (out / "fct_cdf.png").exists() and (out / "fct_bars.png").exists()
    assert not (out / "queues.png").exists()


@pytest.mark.parametrize(
    "override, key, value",
    [
        ("topology.spinez=3", "topology.spinez", "3"),
        ("topology.spines=four", "topology.spines", "four"),
        ("topology.host_link_gbps=-100", "topology.host_link_gbps", "-100"),
        ("workload.receiver=8", "workload.receiver", "8"),
    ],
)
def test_bad_set_exits_2_naming_key(cli, tmp_path, override, key, value):
    r = cli.invoke(app, ["sim", str(INCAST), "--out", str(tmp_path / "x"), "--set", override])
    assert r.exit_code == 2
    assert key in r.stderr and value in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "x").exists()


def test_bad_scenario_argument(cli, tmp_path):
    r = cli.invoke(app, ["sim", "no-such-scenario"])
    assert r.exit_code == 2 and "no-such-scenario" in r.stderr and "leafspine-compare" in r.stderr
    r = cli.invoke(app, ["sim", str(tmp_path / "missing.toml")])
    assert r.exit_code == 2 and "missing.toml" in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text(INCAST.read_text().replace("senders = 6", "senders = 6\nbogus_key = 1"))
    r = cli.invoke(app, ["sim", str(bad)])
    assert r.exit_code == 2 and "workload.bogus_key" in r.stderr
    r = cli.invoke(
        app, ["sim", str(INCAST), "--set", 'output.queue_ports=["leaf5->host0"]', "--out", str(tmp_path / "q")]
    )
    assert r.exit_code == 2 and "output.queue_ports.0" in r.stderr and "leaf5->host0" in r.stderr


def test_scenarios_and_version(cli):
    r = cli.invoke(app, ["scenarios"])
    assert r.exit_code == 0
    for name, desc in gradwire.builtin_scenarios().items():
        assert name in r.stdout
        assert desc.split()[0] in r.stdout
    r = cli.invoke(app, ["scenarios", "leafspine-compare"])
    assert r.exit_code == 0 and "[sweep]" in r.stdout
    r = cli.invoke(app, ["--version"])
    assert r.exit_code == 0 and gradwire.__version__ in r.stdout


def test_subprocess_entry_point(gradwire_cmd, tmp_path):
    """The installed command, end to end, in a fresh process."""
    out = tmp_path / "sub"
    p = run_cli(
        gradwire_cmd
        + ["sim", "incast-dctcp", "--out", str(out), "--no-plot"]
        + set_args(SMALL + ["workload.senders=5", "workload.flow_bytes=100000"])
    )
    assert p.returncode == 0, p.stderr
    check_results(out, ["incast-dctcp"], n_flows=5, queues=True)
    p = run_cli(gradwire_cmd + ["--version"])
    assert p.returncode == 0 and gradwire.__version__ in p.stdout


def test_subprocess_bad_set_exits_2(gradwire_cmd, tmp_path):
    import sys

    p = run_cli(
        [
            sys.executable,
            "-m",
            "gradwire",
            "sim",
            str(INCAST),
            "--out",
            str(tmp_path / "x"),
            "--set",
            "topology.host_link_gbps=-100",
        ]
    )
    assert p.returncode == 2
    assert "topology.host_link_gbps" in p.stderr and "-100" in p.stderr
    assert "Traceback" not in p.stderr


def test_same_seed_same_bytes(cli, tmp_path):
    """Determinism: per-packet spraying draws from the seeded RNG, and two runs with the
    same seed still write byte-identical flows.csv."""
    args = set_args(["routing.mode=spray", "workload.flow_bytes=300000"])
    outs = []
    for i in range(2):
        out = tmp_path / f"d{i}"
        r = cli.invoke(app, ["sim", str(INCAST), "--out", str(out), "--no-plot", "--seed", "11", *args])
        assert r.exit_code == 0, r.stderr
        outs.append((out / "incast-small" / "flows.csv").read_bytes())
    assert outs[0] == outs[1]
    assert len(outs[0].splitlines()) == 7


def test_sim_on_two_threads(cli, tmp_path):
    """`--set threads=2`: the same files from one run on two cores, byte-identical for a
    seed; what a part cannot run alone is refused naming the key."""
    outs = []
    for i in range(2):
        out = tmp_path / f"t{i}"
        r = cli.invoke(app, ["sim", str(INCAST), "--out", str(out), "--set", "threads=2"])
        assert r.exit_code == 0, r.stdout + r.stderr
        check_results(out, ["incast-small"], n_flows=6, queues=True)
        outs.append((out / "incast-small" / "flows.csv").read_bytes())
    assert outs[0] == outs[1]
    r = cli.invoke(
        app,
        [
            "sim",
            str(INCAST),
            "--out",
            str(tmp_path / "x"),
            *set_args(["threads=2", "pauses.hosts=2", "pauses.period_us=100"]),
        ],
    )
    assert r.exit_code == 2 and "threads" in r.stderr and "pauses" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr + r.stdout


FAT_TREE_PS = """name = "ps-k4"
seed = 3
stop_ms = 5000.0
[topology]
kind = "fat_tree"
k = 4
[transport]
kind = "dctcp"
[workload]
kind = "dnn"
model = "resnet18"
pattern = "ps"
workers = 12
servers = 4
colocated = false
"""


def test_sim_fast_cover_writes_the_whole_job(cli, tmp_path):
    """`fast.cover = true`: every sample of the fast mode, two at a time, written as one
    run: every flow of the job once, under packet level's flow ids; what it cannot merge
    is refused naming the key."""
    scenario = tmp_path / "ps-k4.toml"
    scenario.write_text(FAT_TREE_PS)
    packet, cover = tmp_path / "packet", tmp_path / "cover"
    r = cli.invoke(app, ["sim", str(scenario), "--out", str(packet), "--no-plot"])
    assert r.exit_code == 0, r.stdout + r.stderr
    sets = set_args(["fidelity=fast", "fast.servers=2", "fast.cover=true", "threads=2"])
    r = cli.invoke(app, ["sim", str(scenario), "--out", str(cover), "--no-plot", *sets])
    assert r.exit_code == 0, r.stdout + r.stderr
    want = pd.read_csv(packet / "ps-k4" / "flows.csv")
    check_results(cover, ["ps-k4"], n_flows=len(want))
    got = pd.read_csv(cover / "ps-k4" / "flows.csv")
    which = ["flow_id", "src", "dst", "size_bytes", "iteration", "pull", "layer"]
    assert got[which].equals(want[which])
    fast = json.loads((cover / "ps-k4" / "summary.json").read_text())["fast"]
    assert (fast["samples"], fast["of"], sorted(fast["servers"])) == (2, 4, [9, 11, 13, 15])
    r = cli.invoke(app, ["sim", str(scenario), "--out", str(tmp_path / "x"), "--set", "fast.cover=true"])
    assert r.exit_code == 2 and "fast.cover" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_sim_fast_says_what_its_figures_stand_for(cli, tmp_path):
    """A fast run's figures are its sampled servers': the run's line says so, summary.csv
    names the sample, and with every server's whole tensors kept it gives the job's
    iteration as the run estimates it (from a scale model of them when thinned)."""
    scenario = tmp_path / "ps-k4.toml"
    scenario.write_text(FAT_TREE_PS)
    for keep, out in (("false", tmp_path / "sample"), ("true", tmp_path / "keep"), ("thin", tmp_path / "thin")):
        whole = "fast.thin_whole_tensors=true" if keep == "thin" else f"fast.keep_whole_tensors={keep}"
        sets = set_args(["fidelity=fast", "fast.servers=2", whole])
        r = cli.invoke(app, ["sim", str(scenario), "--out", str(out), "--no-plot", *sets])
        assert r.exit_code == 0, r.stdout + r.stderr
        assert "2 of 4 servers'" in r.stdout
        table = pd.read_csv(out / "summary.csv")
        assert (table.loc[0, "fast_servers"], table.loc[0, "fast_of"]) == (2, 4)
        job = table.loc[0, "fast_job_iteration_us"]
        if keep != "false":
            assert "the job's, estimated" in r.stdout and "iteration" in r.stdout
            assert ("scale model" in r.stdout) == (keep == "thin"), r.stdout
            assert ("one in 2 workers" in " ".join(r.stdout.split())) == (keep == "thin"), r.stdout
            flows = pd.read_csv(out / "ps-k4" / "flows.csv")
            # the unreported whole tensors finish no earlier than the sample's flows
            assert job * 1e3 >= flows["finish_ns"].max()
        else:
            assert "not the job's" in r.stdout and pd.isna(job)
    r = cli.invoke(app, ["sim", str(scenario), "--out", str(tmp_path / "packet"), "--no-plot"])
    table = pd.read_csv(tmp_path / "packet" / "summary.csv")
    assert "fast mode" not in r.stdout and pd.isna(table.loc[0, "fast_servers"])
