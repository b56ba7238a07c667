"""What a new user of the CLI runs into: help texts, output directories, Ctrl-C, errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import INCAST, SMALL, set_args
from interrupt import interrupt
from typer.testing import CliRunner

from gradwire.cli import app
from gradwire.plot import scenario_label
from gradwire.runner import default_out_dir


@pytest.fixture
def cli():
    return CliRunner()


@pytest.mark.parametrize("command", [[], ["sim"], ["reproduce"], ["launch"], ["plot"], ["scenarios"]])
def test_help_has_no_value_for_flags_and_no_lost_defaults(cli, command):
    r = cli.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stdout
    assert "<bool>" not in r.stdout
    # rich markup must not swallow a bracketed default and leave "word ." behind
    assert not re.search(r"\w \.", r.stdout), r.stdout


def test_launch_usage_shows_the_command(cli):
    r = cli.invoke(app, ["launch", "--help"], env={"COLUMNS": "200"})
    assert "-- COMMAND" in r.stdout


def test_negative_integer_is_named_in_words(cli, tmp_path):
    r = cli.invoke(app, ["sim", str(INCAST), "--out", str(tmp_path / "x"), "--set", "topology.hosts_per_leaf=-3"])
    assert r.exit_code == 2
    assert "topology.hosts_per_leaf" in r.stderr and "non-negative integer" in r.stderr
    assert "u32" not in r.stderr


def test_overrides_get_their_own_results_directory(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_out_dir("incast-dctcp", []) == Path("results/incast-dctcp")
    assert default_out_dir("incast-dctcp", ["transport.kind=ltp"]) == Path("results/incast-dctcp--transport.kind=ltp")
    long = default_out_dir("x", [f"sweep.k{i}=[1, 2, 3]" for i in range(20)])
    assert len(long.name) < 100 and "/" not in long.name
    small = set_args(SMALL + ["workload.senders=3", "workload.flow_bytes=50000"])
    r = cli.invoke(app, ["sim", "incast-dctcp", "--no-plot", "-q", *small])
    assert r.exit_code == 0, r.stderr
    made = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert len(made) == 1 and made[0].startswith("incast-dctcp--topology.leaves=2")
    assert scenario_label(tmp_path / "results" / made[0]).startswith("incast-dctcp (topology.leaves=2")


def test_other_configuration_is_not_overwritten_without_force(cli, tmp_path):
    out = tmp_path / "o"
    small = set_args(["workload.senders=3", "workload.flow_bytes=50000"])
    assert cli.invoke(app, ["sim", str(INCAST), "--out", str(out), "--no-plot", "-q", *small]).exit_code == 0
    first = (out / "incast-small" / "flows.csv").read_bytes()
    # the same configuration again: fine
    assert cli.invoke(app, ["sim", str(INCAST), "--out", str(out), "--no-plot", "-q", *small]).exit_code == 0
    other = [*small, "--set", "transport.kind=newreno"]
    r = cli.invoke(app, ["sim", str(INCAST), "--out", str(out), "--no-plot", "-q", *other])
    assert r.exit_code == 2 and "--force" in r.stderr and "another configuration" in r.stderr
    assert (out / "incast-small" / "flows.csv").read_bytes() == first
    r = cli.invoke(app, ["sim", str(INCAST), "--out", str(out), "--no-plot", "-q", "--force", *other])
    assert r.exit_code == 0, r.stderr


def _children(pid: int) -> set[int]:
    kids = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids |= {int(k) for k in (task / "children").read_text().split()}
        except OSError:
            pass
    return kids


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _finished(out: Path) -> int:
    return len(list(out.glob("*/*/summary.json")))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_ctrl_c_stops_reproduce_at_once_and_resume_finishes(tmp_path):
    """Ctrl-C ends the running simulations at once (no queued run starts afterwards), keeps
    the finished ones, and --resume runs only the rest."""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "gradwire", "reproduce", "dlcp-fig14", "--quick", "--jobs", "2", "--out", str(out)]
    env = dict(os.environ, COLUMNS="200", MPLBACKEND="Agg")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while _finished(out) < 1:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no run finished in 300 s"
            time.sleep(0.05)
        workers = _children(proc.pid)
        stdout, stderr, stopped_in = interrupt(proc)  # the launcher only
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert stopped_in < 15, f"took {stopped_in:.1f} s to stop"
    time.sleep(0.5)
    assert not [w for w in workers if _alive(w)], "simulation workers outlived the interrupt"
    done = _finished(out)
    time.sleep(1.5)
    assert _finished(out) == done, "runs went on after the interrupt"
    total = int(re.search(r"(\d+) runs of", stdout).group(1))
    assert 1 <= done < total
    p = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    assert f"resuming: {done} runs already done, {total - done} to run" in p.stdout
    assert _finished(out) == total


def test_a_cdf_of_millions_of_flows_is_drawn_from_evenly_spaced_ranks(tmp_path):
    """A 10 000-host run's flows.csv has 36 M rows: the CDF reads one column and draws at
    most CDF_POINTS of them, the first and last among them, at their exact fractions."""
    from gradwire.plot import CDF_POINTS, _fcts_us, cdf_points

    n = 3 * CDF_POINTS + 7
    fct = np.sort(np.random.default_rng(1).exponential(1e3, n))
    x, y = cdf_points(fct)
    assert x.size <= CDF_POINTS and (x[0], x[-1]) == (fct[0], fct[-1]) and (y[0], y[-1]) == (1 / n, 1.0)
    ranks = np.searchsorted(fct, x) + 1
    assert np.array_equal(y, ranks / n), "each point at its own rank's fraction"
    assert np.all(np.diff(ranks) <= n // CDF_POINTS + 1), "evenly spaced"
    small = fct[:10]
    assert np.array_equal(cdf_points(small)[0], small), "a small run is drawn whole"
    # an unfinished flow's empty FCT is left out
    (tmp_path / "flows.csv").write_text("flow_id,fct_ns,src\n0,2000,1\n1,,2\n2,1000,3\n")
    assert list(_fcts_us(tmp_path)) == [1.0, 2.0]
