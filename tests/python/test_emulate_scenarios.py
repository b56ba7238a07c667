"""The built-in emulation scenarios plan and pass the switch's own validation at every
sweep point (no root needed: the switch's `check` builds the fabric without devices)."""

from __future__ import annotations

import math
import subprocess

import pytest

from gradwire.emu import switch_command
from gradwire.emu.command import BUILTIN, builtin_names
from gradwire.emu.job import JobError, allow_congestion_control, plan


@pytest.mark.parametrize("name", builtin_names())
def test_builtin_scenario_is_valid_at_every_point(name):
    path = BUILTIN / f"{name}.toml"
    _, points = plan(path)
    assert points
    switch = switch_command()
    for pt in points:
        args = [a for ov in pt.overrides for a in ("--set", ov)]
        res = subprocess.run(
            [*switch, "check", str(path), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert "hosts" in res.stdout


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            '[topology]\nhosts_per_leaf = 2\n[job]\nkind = "flows"\nflows = [{src = 0, dst = 5}]\n',
            r"flows\[0\]\.dst: host 5 is out of range",
        ),
        ('[job]\nkind = "flows"\nflows = [{src = 0, dst = 1, cc = "dctcp"}]\n', "cc = 'dctcp'"),
        ('[job]\nkind = "allreduce"\nranks = 1\n', "at least 2 ranks"),
        ('[job]\nkind = "allreduce"\ntcp_cc = "vegas"\n', "job.tcp_cc = 'vegas'"),
        ('[job]\nkind = "allreduce"\nsync = true\n', "job.sync: only a ps job"),
        ('[job]\nkind = "ps"\nsync = 1\n', "job.sync = 1: true or false"),
    ],
)
def test_job_errors_name_the_key(tmp_path, text, error):
    p = tmp_path / "s.toml"
    p.write_text(text)
    with pytest.raises(JobError, match=error):
        plan(p)


def test_job_defaults_and_options(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[job]\nkind = "allreduce"\n')
    assert plan(p)[1][0].job["tcp_cc"] == "cubic"
    p.write_text('[job]\nkind = "ps"\nbackends = ["cubic"]\nsync = true\n')
    assert plan(p)[1][0].job["sync"] is True


def test_a_congestion_control_the_kernel_has_is_allowed_for_the_namespaces(tmp_path):
    """A namespace may only pick what the machine's namespace allows (a GPU machine's kernel
    had cubic available and only reno and bbr allowed): the job allows it, or names what the
    kernel has. Run on a copy of the two /proc files."""
    (tmp_path / "tcp_available_congestion_control").write_text("reno bbr cubic\n")
    allowed = tmp_path / "tcp_allowed_congestion_control"
    allowed.write_text("reno bbr\n")
    allow_congestion_control("bbr", tmp_path)
    assert allowed.read_text().split() == ["reno", "bbr"]
    allow_congestion_control("cubic", tmp_path)
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]
    with pytest.raises(JobError, match="job.tcp_cc = 'vegas': this kernel has reno bbr cubic"):
        allow_congestion_control("vegas", tmp_path)


def test_cpu_shares_cover_the_window_from_the_first_start_to_the_last_end():
    from gradwire.emu.job import cpu_shares

    # samples: [wall, machine busy, machine kernel, switch CPU] (seconds)
    a = {"cpu_s": [0.2], "cpu_windows": [[[10.0, 100.0, 50.0, 5.0], [10.4, 100.7, 50.3, 5.2]]]}
    b = {"cpu_s": [0.3], "cpu_windows": [[[10.1, 100.1, 50.05, 5.05], [10.5, 100.9, 50.4, 5.3]]]}
    got = cpu_shares([a, b], 0, cores=2)
    # 0.5 s on 2 cores: 1 core-second; busy 0.9, kernel 0.4, switch 0.3, ranks 0.5
    assert got["machine_busy"] == 0.9 and got["kernel_share"] == 0.4
    assert got["switch_share"] == 0.3 and got["ranks_share"] == 0.5 and got["other_share"] == 0.1
    assert got["cpu_bound"] is True
    assert cpu_shares([a, {"cpu_s": [0.3]}], 0, cores=2) == {}


def test_an_iterations_period_runs_from_the_last_end_before_to_its_last_end():
    """Back to back, rank a finishes iteration 0 early and starts 1 at once; its call then
    includes waiting for b, so the slowest call (1.0 s) is longer than the period (0.8 s),
    which is what the simulator's iterations measure."""
    from gradwire.emu.job import iteration_periods

    def w(start, end):
        return [[start, 0, 0, 0], [end, 0, 0, 0]]

    a = {"cpu_windows": [w(10.0, 10.5), w(10.5, 11.5)]}
    b = {"cpu_windows": [w(10.1, 10.7), w(10.7, 11.4)]}
    assert iteration_periods([a, b], 2) == [0.7, 0.8]
    assert all(math.isnan(p) for p in iteration_periods([a, {"cpu_s": [0.1]}], 2))


def test_sweeps_and_overrides_are_the_simulators(tmp_path):
    """`--set` and `[sweep]` are expanded by the simulator's own code: the same point
    names, values and errors as `gradwire run`; the switch gets the network keys."""
    from gradwire._core import load_scenario

    sweep = '[sweep]\n"topology.link_loss_rate" = [0.0, 0.01]\n'
    p = tmp_path / "s.toml"
    p.write_text(f'[topology]\nhosts_per_leaf = 4\n[job]\nkind = "allreduce"\n{sweep}"job.bytes" = [1000, 2000]\n')
    _, points = plan(p, ["topology.link_delay_ns=2500000", "job.iterations=2"])
    sim = load_scenario(f'[workload]\nkind = "incast"\nsenders = 2\nflow_bytes = 1000\n{sweep}')
    # axes in key order, as the simulator names its runs
    assert [pt.name for pt in points[:2]] == [f"bytes=1000,{r.name}" for r in sim]
    last = points[-1]
    assert (last.job["bytes"], last.job["iterations"], last.root["topology"]["link_delay_ns"]) == (2000, 2, 2500000)
    assert last.params == [("job.bytes", 2000), ("topology.link_loss_rate", 0.01)]
    assert last.overrides == ["topology.link_delay_ns=2500000", "topology.link_loss_rate=0.01"]
    with pytest.raises(JobError, match="not key=value"):
        plan(p, ["topology.leaves"])
    p.write_text('[job]\nkind = "allreduce"\n[sweep]\n"job.bytes" = []\n')
    with pytest.raises(JobError, match="sweep.job.bytes"):
        plan(p)


def test_cpu_bound_iterations_get_a_note_that_names_a_network_bound_rate():
    import pandas as pd

    from gradwire.emu.report import cpu_bound_hint

    rows = [
        {"run": "r", "label": "gloo", "median_s": 0.3, "min_s": 0.3, "max_s": 0.3, "n": 3, "cpu_bound": 0},
        {"run": "r", "label": "dlcp", "median_s": 0.4, "min_s": 0.4, "max_s": 0.5, "n": 3, "cpu_bound": 2},
    ]
    hint = cpu_bound_hint(pd.DataFrame(rows))
    assert hint and hint.startswith("2 of 6 iterations were CPU-bound") and "0.125 Gbit/s per core" in hint
    # a machine shared with other work: the note says so instead
    busy = [{**r, "other_share": 0.45} for r in rows]
    assert "Other processes took 45% of the machine" in (cpu_bound_hint(pd.DataFrame(busy)) or "")
    rows[1]["cpu_bound"] = 0
    assert cpu_bound_hint(pd.DataFrame(rows)) is None
    # flow jobs without CPU samples: nothing to say
    assert cpu_bound_hint(pd.DataFrame([{k: v for k, v in rows[0].items() if k != "cpu_bound"}])) is None


def test_gbps_scales_rates_and_bytes_to_the_same_wire_time(tmp_path):
    """`gradwire emulate --gbps`: host links at the rate, uplinks and every byte count of the
    job scaled by the same factor; a sweep over a scaled key, a training job and a rate that
    is not positive are refused by name."""
    from gradwire.emu.command import BUILTIN
    from gradwire.emu.job import JobError, at_rate, plan

    sets = at_rate(BUILTIN / "allreduce-incast.toml", ["job.iterations=2"], 0.25)
    (pt, *_), base = plan(BUILTIN / "allreduce-incast.toml", sets)[1], plan(BUILTIN / "allreduce-incast.toml", [])[1][0]
    assert pt.root["topology"]["host_link_gbps"] == 0.25 and pt.job["iterations"] == 2
    assert pt.job["bytes"] * 4 == base.job["bytes"]
    assert [b["bytes"] * 4 for b in pt.job["background"]] == [b["bytes"] for b in base.job["background"]]
    assert "topology.host_link_gbps=0.25" in pt.overrides
    flows = tmp_path / "flows.toml"
    flows.write_text(
        '[topology]\nhosts_per_leaf = 3\nhost_link_gbps = 1.0\n[job]\nkind = "flows"\n'
        'flows = [{ src = 1, dst = 0, bytes = 4000, cc = "reno", start_s = 0.5 }]\n'
    )
    (pt,) = plan(flows, at_rate(flows, [], 0.5))[1]
    assert pt.job["flows"] == [{"src": 1, "dst": 0, "bytes": 2000, "cc": "reno", "start_s": 0.5}]
    with pytest.raises(JobError, match="topology.uplink_gbps, which the sweep sets"):
        at_rate(BUILTIN / "leafspine-oversub.toml", [], 0.25)
    with pytest.raises(JobError, match="training job"):
        at_rate(BUILTIN / "train-loss.toml", [], 0.25)
    with pytest.raises(JobError, match="positive number"):
        at_rate(BUILTIN / "allreduce-loss.toml", [], 0.0)


def test_auto_rate_runs_a_builtin_job_at_what_the_cores_keep_up_with(tmp_path):
    """`--gbps auto` (the default): on 2 cores a built-in 1 Gbit/s job runs at 0.25 Gbit/s,
    on 16 at its own rate; a file of the user's, a rate or bytes set with --set, a training
    job and a sweep over a rate keep theirs, each with its reason."""
    from gradwire.emu.job import auto_rate

    ring = BUILTIN / "allreduce-loss.toml"
    rate, why = auto_rate(ring, [], builtin=True, cores=2)
    assert rate == 0.25 and "2 cores keep up with 0.25 Gbit/s" in why and "--gbps 1 runs its own" in why
    assert auto_rate(ring, [], builtin=True, cores=16)[0] is None
    assert auto_rate(ring, [], builtin=False, cores=2) == (None, "a scenario file of yours runs at its own rate")
    assert auto_rate(ring, ["topology.host_link_gbps=0.5"], builtin=True, cores=2)[0] is None
    assert auto_rate(ring, ["job.bytes=1000"], builtin=True, cores=2)[0] is None
    assert auto_rate(BUILTIN / "train-loss.toml", [], builtin=True, cores=2) == (None, "its rate or bytes cannot scale")
    assert auto_rate(BUILTIN / "leafspine-oversub.toml", [], builtin=True, cores=2)[0] is None


@pytest.mark.parametrize("bad", ["0", "-1", "fast", "nan", "inf"])
def test_gbps_takes_auto_or_a_positive_rate(bad):
    from typer.testing import CliRunner

    from gradwire.cli import app

    r = CliRunner().invoke(app, ["emulate", "allreduce-loss", "--gbps", bad])
    assert r.exit_code == 2 and "must be `auto` or a positive number of Gbit/s" in r.output, r.output
