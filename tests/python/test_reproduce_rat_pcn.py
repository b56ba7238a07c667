"""`gradwire reproduce` rat-fig4/5 and pcn-fig9/10, shrunk (--quick plus smaller buffers and
jumbo frames), on the real extension: the tables, the analytic model beside the
measurement, the link-measured cross-rack bytes against Table 1, and PCN's effect."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from conftest import set_args
from typer.testing import CliRunner

from gradwire import reproduce as rp
from gradwire.cli import app

JUMBO = ["transport.mss_bytes=8960"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def cli():
    return CliRunner()


def reproduce(cli, tmp_path, name, *sets):
    out = tmp_path / name
    r = cli.invoke(
        app,
        [
            "reproduce",
            name,
            "--quick",
            "--out",
            str(out),
            "--jobs",
            "2",
            *set_args([*JUMBO, *sets]),
        ],
    )
    assert r.exit_code == 0, r.stdout + r.stderr
    assert (out / f"{name}.png").read_bytes()[:8] == PNG
    table = pd.read_csv(out / "table.csv")
    assert (table["flows_finished"] == table["flows"]).all() or name.startswith("pcn")
    return table, r.stdout


def test_rat_fig4_quick_measures_table_1(cli, tmp_path):
    # Table 1 counts the schedule's bytes: the SACK-less TCP without delayed ACKs resends only
    # what was lost (Linux's delayed ACKs against the 1 ms RTOmin time out spuriously at the
    # end of a flow, and tail loss probes resend a last segment that was not lost)
    table, stdout = reproduce(cli, tmp_path, "rat-fig4", "workload.bytes=960000", "baseline=sackless")
    assert sorted(set(table["x"])) == [2, 4] and list(dict.fromkeys(table["series"])) == ["ps", "ring", "rat"]
    assert "model ICT (ms)" in stdout
    # the rack uplinks carried exactly what Table 1's analysis of each schedule says (plus
    # resent packets: PS's incast into the oversubscribed uplinks drops some)
    clean = table[table["retransmits"] == 0]
    assert set(clean["series"]) >= {"ring", "rat"}
    assert list(clean["cross_rack_mb"]) == pytest.approx(list(clean["table1_cross_rack_mb"]), rel=1e-9)
    assert (table["cross_rack_mb"] >= table["table1_cross_rack_mb"] - 1e-9).all()
    for x, sub in table.groupby("x"):
        by = sub.set_index("series")
        racks, n = 4, 4 * 2 * int(x)
        b = 0.96  # MB
        assert by.loc["rat", "table1_cross_rack_mb"] == pytest.approx(2 * (racks - 1) * b)
        assert by.loc["ring", "table1_cross_rack_mb"] == pytest.approx(racks * 2 * (n - 1) * b / n, rel=1e-3)
        assert by.loc["ps", "table1_cross_rack_mb"] == pytest.approx(2 * x * 2 * (racks - 1) * b, rel=1e-3)
        assert (by["dependent_steps"].to_dict()) == {
            "ps": 2,
            "ring": 2 * (n - 1),
            "rat": 4,
        }
        # the model is a lower bound on the measurement; PS pays for its cross-rack bytes
        assert (by["ict_mean_ms"] >= by["ict_model_ms"]).all()
        assert by.loc["ps", "ict_mean_ms"] > by.loc["rat", "ict_mean_ms"]


def test_rat_fig5_quick_normalises_to_k0(cli, tmp_path):
    table, _ = reproduce(cli, tmp_path, "rat-fig5", "workload.bytes=960000", "pauses.period_us=40.0")
    assert sorted(set(table["x"])) == [0, 2]
    k0 = table[table["x"] == 0]
    assert (k0["ict_mean_ms_norm"] == 1.0).all()
    k2 = table[table["x"] == 2].set_index("series")
    assert (k2["ict_mean_ms_norm"] > 1.0).all(), k2[["ict_mean_ms", "ict_mean_ms_norm"]]


def test_pcn_fig9_and_fig10_quick(cli, tmp_path):
    q, _ = reproduce(cli, tmp_path, "pcn-fig9")
    assert list(dict.fromkeys(q["series"])) == ["off", "pcn"] and set(q["x"]) == {0.25}
    by = q.set_index("series")
    assert (by["bursts_done"] == 2).all()
    assert (by["start_queue_pkts"] >= 0).all() and (by["max_queue_pkts"] <= 60).all(), "60-packet queues"
    # the mechanism ran: every START matched by a burst mark at each of the 3 ports
    run = q[q["series"] == "pcn"]["run"].iloc[0]
    pcn = json.loads((tmp_path / "pcn-fig9" / "pcn-ddlgen" / run / "summary.json").read_text())["pcn"]
    # jumbo frames: Eq. (1) gives 6.2 packets, k = 1/4 -> 1.5, rounded up to 5
    assert (pcn["initial_threshold"], pcn["pcn_threshold"]) == (40, 5)
    assert pcn["starts_sent"] == pcn["released_by_ack"] == 4 and pcn["port_starts"] == pcn["port_bursts"] == 12
    assert pcn["ports_lowered_at_end"] == 0
    # each worker waited for its ACK and then pcn.burst_delay_us (one base RTT) before its burst
    assert pcn["waited_ns"] >= 4 * 2 * 76_900
    # Fig. 9b/c: one row per burst and run, whose means are the table's
    bursts = pd.read_csv(tmp_path / "pcn-fig9" / "bursts.csv")
    assert (bursts.groupby("run").size() == 2).all() and set(bursts["series"]) == {"off", "pcn"}
    assert (tmp_path / "pcn-fig9" / "pcn-fig9-bursts.png").read_bytes()[:8] == PNG
    per_run = bursts.groupby("series")[["start_queue_pkts", "max_queue_pkts"]].mean()
    assert per_run.to_numpy() == pytest.approx(by[["start_queue_pkts", "max_queue_pkts"]].loc[per_run.index].to_numpy())
    t, stdout = reproduce(cli, tmp_path, "pcn-fig10")
    by = t.set_index("series")
    assert by.loc["off", "bg_lost_pct"] == 0.0
    assert math.isfinite(by.loc["pcn", "bg_lost_pct"]) and by.loc["pcn", "train_gbps"] > 0
    assert "pcn-fig10" in stdout and "bct_ms" in t.columns


def test_ict_per_iteration_and_model():
    flows = pd.DataFrame(
        {
            "iteration": [0, 0, 1, 1],
            "start_ns": [100, 150, 900, 950],
            "finish_ns": [800, 1000, 1900, 2500],
        }
    )
    assert rp.ict_per_iteration(flows) == [900.0, 1500.0]
    analysis = {
        "max_rank_send_bytes": 5e6,
        "max_rank_recv_bytes": 4e6,
        "max_rack_out_bytes": 20e6,
        "max_rack_in_bytes": 1e6,
        "dependent_steps": 10,
        "world": 8,
    }
    cfg = {
        "topology": {
            "host_link_gbps": 40.0,
            "uplink_gbps": 40.0,
            "uplinks_per_leaf": 2,
            "link_delay_ns": 1000,
        }
    }
    # rack: 20 MB over 80 Gbit/s = 2 ms > host 5 MB / 40 Gbit/s = 1 ms; + 10 x 4 us
    assert rp.model_ict_ms(analysis, cfg) == pytest.approx(2.0 + 0.04)
    assert rp.model_ict_ms(analysis, cfg, paused_fraction=0.5) == pytest.approx(4.0 + 0.04)


def test_list_shows_the_new_reproductions(cli):
    r = cli.invoke(app, ["reproduce", "--list"])
    assert r.exit_code == 0
    for name in ("rat-fig4", "rat-fig5", "pcn-fig9", "pcn-fig10"):
        assert name in r.stdout
