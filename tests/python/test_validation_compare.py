"""validation/compare.py's TCP modes: both sides get the same TCP (no ns-3 needed)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def compare(monkeypatch):
    spec = importlib.util.spec_from_file_location("compare", ROOT / "validation" / "compare.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "compare", mod)  # its dataclasses look themselves up there
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "_snapshot", Path("/bin/true"))  # any executable: the command is only built
    return mod


def test_each_tcp_mode_gives_both_simulators_the_same_tcp(compare):
    scenario = ROOT / "scenarios" / "incast-dctcp.toml"
    plain = compare.our_command(scenario, Path("/tmp/x"), "newreno", 1)
    assert not any("tcp_sack" in a for a in plain) and "baseline=sackless" in plain, "sackless: the preset"
    assert compare.TCP_MODES["sackless"][1] == [], "and ns-3's flags as leafspine.cc sets them"
    for kv in compare.NS3_SOCKET:
        assert kv in plain, "ns-3.37's TcpSocketBase behaviours in either mode"
    compare._tcp_mode = "ns3"
    ns3 = compare.our_command(scenario, Path("/tmp/x"), "newreno", 1)
    ours, theirs = compare.TCP_MODES["ns3"]
    for kv in ours:
        assert kv in ns3
    assert "transport.tcp_sack=true" in ours and "--sack=true" in theirs
    assert "transport.tcp_delack_count=2" in ours and "--delAckCount=2" in theirs
    assert "transport.tcp_slow_start=per_ack" in ns3, "ns-3's TcpNewReno grows one segment per ACK"
    for kv in ["tcp_recovery_from_cwr=false", "tcp_loss_exit_ack=above_recover", "tcp_rto_backoff_reset=new_ack"]:
        assert f"transport.{kv}" in ours, "ns-3.37's TcpSocketBase: DupAck, ProcessAck leaving CA_LOSS, NewAck"
    compare._ns3_fixes = ["cwr"]
    fixed = compare.our_command(scenario, Path("/tmp/x"), "dctcp", 1)
    last = max(i for i, a in enumerate(fixed) if a.startswith("transport.tcp_recovery_from_cwr="))
    assert fixed[last] == "transport.tcp_recovery_from_cwr=true", "ns-3 with Linux's CWR rule: gradwire's own rule"
    dctcp = compare.our_command(scenario, Path("/tmp/x"), "dctcp", 1)
    assert "transport.tcp_slow_start=per_ack" not in dctcp, "TcpDctcp counts segments"
    assert "transport.tcp_cong_avoid=per_segment_ns3" in dctcp, "TcpLinuxReno's CongestionAvoidance counts segments"
    assert "transport.tcp_cong_avoid=per_segment_ns3" not in ns3, "TcpNewReno adds segmentSize^2/cWnd an ACK"
    for kv in ["tcp_delack_first_at_once=true", "tcp_ce_seq_check=true", "tcp_ecn_cut=prr"]:
        assert f"transport.{kv}" in ns3 and f"transport.{kv}" in dctcp, (
            "TcpSocketBase: ProcessSynRcvd, ForwardUp, EnterCwr"
        )
    assert "transport.tcp_loss_cut=pipe" in ns3, "TcpNewReno halves BytesInFlight()"
    for kv in ["dctcp_ssthresh=ns3", "tcp_ce_change_ack=lagged"]:
        assert f"transport.{kv}" in dctcp and f"transport.{kv}" not in ns3, "TcpDctcp's own"
    # ns-3's round-robin queue disc holds what each socket hands over: gradwire's flow_queues
    assert "host.nic=flow_queues" in ns3 and "--hostQueue=rr" in compare.ns3_args(
        compare.resolved(scenario), "dctcp", 1
    )
    pull = compare.our_command(scenario, Path("/tmp/x"), "dctcp", 1, "pull")
    assert "host.nic=round_robin" in pull and "--hostQueue=rr" in compare.ns3_args(
        compare.resolved(scenario), "dctcp", 1, "pull"
    )


def test_both_sides_get_the_same_start_jitter(compare):
    scenario = ROOT / "scenarios" / "leafspine-ps-dctcp.toml"
    scn = compare.resolved(scenario)
    compare._start_jitter_us = 0.0  # --start-jitter-us 0
    assert not any(a.startswith("--startJitterNs") for a in compare.ns3_args(scn, "newreno", 1)), "none asked"
    assert not any("start_jitter_us" in a for a in compare.our_command(scenario, Path("/tmp/x"), "newreno", 1))
    compare._start_jitter_us = 1.5
    scn["workload"]["start_jitter_us"] = 1.5  # as main() does
    assert "--startJitterNs=1500" in compare.ns3_args(scn, "newreno", 1)
    assert "workload.start_jitter_us=1.5" in compare.our_command(scenario, Path("/tmp/x"), "newreno", 1)
    assert compare.DEFAULT_START_JITTER_US > 0, "the comparison's default: hosts not in lockstep"
    assert "OPTION(double, startJitterNs," in (ROOT / "validation" / "ns3" / "leafspine.cc").read_text()


def test_an_ns3_run_of_the_same_command_and_binary_is_read_back(compare, tmp_path, monkeypatch):
    binary = tmp_path / "leafspine"
    binary.write_text("#!/bin/sh\n")
    monkeypatch.setattr(compare, "NS3_BIN", binary)
    out, cmd = tmp_path / "run", [str(binary), "--seed=1", f"--out={tmp_path / 'run' / 'flows.csv'}"]
    out.mkdir()
    assert not compare.ns3_run_is_current(out, cmd), "nothing there yet"
    (out / "cmd.txt").write_text(" ".join(cmd) + "\n")
    (out / "flows.csv").write_text("flow_id,src,dst,size_bytes,start_ns,finish_ns,fct_ns,retransmits,timeouts\n")
    assert not compare.ns3_run_is_current(out, cmd), "a run that did not complete (no wall.txt)"
    (out / "wall.txt").write_text("1.0\n")
    assert compare.ns3_run_is_current(out, cmd)
    assert not compare.ns3_run_is_current(out, [*cmd, "--sack=true"]), "another command"
    later = (out / "flows.csv").stat().st_mtime + 10
    os.utime(binary, (later, later))
    assert not compare.ns3_run_is_current(out, cmd), "ns-3 rebuilt since"


NS3_BIN = ROOT / "validation" / "ns3" / "build" / "leafspine"
SIM_BIN = ROOT / "target" / "release" / "gradwire-sim"


@pytest.mark.skipif(
    not (NS3_BIN.exists() and SIM_BIN.exists()),
    reason="needs validation/ns3/build.sh and cargo build --release -p gradwire-sim",
)
def test_a_small_sackless_incast_agrees_with_ns3(tmp_path):
    """16 senders of 500 KB into one host, 5 seeds each side (seconds): the SACK-less TCP of
    `baseline = "sackless"` against ns-3 with the same TCP, mean and p99 within 15 %."""
    import subprocess

    text = (ROOT / "scenarios" / "incast-dctcp.toml").read_text()
    small = text.replace("senders = 32", "senders = 16").replace("flow_bytes = 1000000", "flow_bytes = 500000")
    scenario = tmp_path / "incast-small.toml"
    scenario.write_text(small.replace('name = "incast-dctcp"', 'name = "incast-small"'))
    cmd = [sys.executable, str(ROOT / "validation" / "compare.py"), "--scenarios", str(scenario)]
    cmd += ["--nics", "round_robin", "--seeds", "1,2,3,4,5", "--no-write", "--work", str(tmp_path / "out")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("incast-small")]
    assert [row[1] for row in rows] == ["newreno", "dctcp"], r.stdout
    assert all(row[11] == "PASS" for row in rows), r.stdout


@pytest.mark.skipif(
    not (NS3_BIN.exists() and SIM_BIN.exists()),
    reason="needs validation/ns3/build.sh and cargo build --release -p gradwire-sim",
)
def test_a_small_dctcp_incast_with_ns3s_tcp_defaults_agrees_with_ns3(tmp_path):
    """The same incast with ns-3.37's TCP defaults (delayed ACKs, SACK, PRR), DCTCP: no loss
    on either side, so the FCTs are the window's growth after the first ECN cut, a segment
    per round trip in ns-3's TcpLinuxReno (`tcp_cong_avoid = "per_segment_ns3"`). In lockstep
    (no start jitter): started apart, the flows are cut apart and some are trapped by the
    floorless cut, RTO-bound runs that five seeds cannot average (docs/validation.md)."""
    import subprocess

    text = (ROOT / "scenarios" / "incast-dctcp.toml").read_text()
    small = text.replace("senders = 32", "senders = 16").replace("flow_bytes = 1000000", "flow_bytes = 500000")
    scenario = tmp_path / "incast-small.toml"
    scenario.write_text(small.replace('name = "incast-dctcp"', 'name = "incast-small"'))
    cmd = [sys.executable, str(ROOT / "validation" / "compare.py"), "--scenarios", str(scenario), "--tcp", "ns3"]
    cmd += ["--transports", "dctcp", "--nics", "round_robin", "--seeds", "1,2,3,4,5", "--no-write"]
    cmd += ["--start-jitter-us", "0", "--work", str(tmp_path / "out")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("incast-small")]
    assert len(rows) == 1 and rows[0][11] == "PASS", r.stdout


def test_ns3_fixes_are_leafspine_flags_and_name_their_results(compare):
    """Each `--ns3-fix` is a flag leafspine.cc declares, and its results go to their own file."""
    source = (ROOT / "validation" / "ns3" / "leafspine.cc").read_text()
    for flag in compare.NS3_FIXES.values():
        name = flag.removeprefix("--").split("=")[0]
        assert f"OPTION(bool, {name}," in source, name
    assert compare.results_stem() == "results"
    compare._tcp_mode, compare._ns3_fixes = "ns3", ["cwr", "dctcp_floor"]
    assert compare.results_stem() == "results-ns3-cwr-dctcp_floor"


@pytest.mark.skipif(
    not (NS3_BIN.exists() and SIM_BIN.exists()),
    reason="needs validation/ns3/build.sh and cargo build --release -p gradwire-sim",
)
def test_the_cwr_rule_agrees_with_ns3_either_way(tmp_path):
    """A 64-to-1 DCTCP incast into a 150 KB port (seconds): DCTCP senders lose segments
    within a window of their ECN cut. Stock ns-3 waits for the RTO there, as gradwire does
    with `tcp_recovery_from_cwr = false` (compare.py's default); with `--ns3-fix cwr` ns-3
    fast-retransmits, as gradwire does with the key's default (Linux's rule). Both pairs
    agree on the mean within 15 %, pooled over 10 seeds (3 left the fixed pair at +19 %)."""
    import subprocess

    text = (ROOT / "scenarios" / "incast-dctcp.toml").read_text()
    for old, new in [
        ("senders = 32", "senders = 64"),
        ("flow_bytes = 1000000", "flow_bytes = 300000"),
        ("buffer_bytes = 512000", "buffer_bytes = 150000"),
        ("ecn_threshold_packets = 65", "ecn_threshold_packets = 20"),
        ('name = "incast-dctcp"', 'name = "incast-cwr"'),
    ]:
        assert old in text, old
        text = text.replace(old, new)
    scenario = tmp_path / "incast-cwr.toml"
    scenario.write_text(text)

    def mean_gap(*fix: str) -> float:
        cmd = [sys.executable, str(ROOT / "validation" / "compare.py"), "--scenarios", str(scenario)]
        cmd += ["--transports", "dctcp", "--nics", "round_robin", "--seeds", ",".join(map(str, range(1, 11)))]
        cmd += ["--no-write", "--work", str(tmp_path / "out"), *(["--ns3-fix", *fix] if fix else [])]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        row = next(line.split() for line in r.stdout.splitlines() if line.startswith("incast-cwr"))
        return abs(float(row[7].rstrip("%")))

    stock, fixed = mean_gap(), mean_gap("cwr")
    assert stock <= 15 and fixed <= 15, (stock, fixed)
    logs = list((tmp_path / "out" / "incast-cwr").glob("ns3-results-cwr-*/log.txt"))
    recoveries = [int(p.read_text().split("fast recoveries entered from CA_CWR:")[1].split()[0]) for p in logs]
    assert len(recoveries) == 10 and all(n > 0 for n in recoveries), recoveries


def test_trace_compare_reads_both_sides_traces(tmp_path):
    """validation/trace_compare.py on two hand-written traces in the shared format: drops
    over time, a resend dropped again, cuts taken on the ACK that ended CWR, first RTOs."""
    import subprocess

    flows = tmp_path / "flows.csv"
    flows.write_text(
        "flow_id,src,dst,size_bytes,start_ns,finish_ns,fct_ns,retransmits,timeouts\n"
        "0,1,0,100000,0,2000000,2000000,1,0\n"
        "1,20,0,100000,0,12000000,12000000,2,1\n"
    )
    ours = tmp_path / "ours.trace"
    ours.write_text(
        "ST 100000 1 CA_OPEN CA_CWR 14600\n"
        "ST 200000 1 CA_CWR CA_OPEN 8000\n"
        "ST 200000 1 CA_OPEN CA_CWR 7300\n"
        "DROP 30000 1 Data 4380 leaf1->spine0\n"
        "DROP 260000 1 Data 4380 leaf0->host0\n"
        "ST 10300000 1 CA_CWR CA_LOSS 2190\n"
        "TX 1 0 0 0\n"
    )
    ns3 = tmp_path / "ns3.trace"
    ns3.write_text("ST 100000 1 CA_OPEN CA_CWR 14600\nDROP 30000 0 Data 1460 leaf0->host0\n")
    r = subprocess.run(
        [sys.executable, str(ROOT / "validation" / "trace_compare.py"), str(ours), str(ns3), "--flows", str(flows)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    ours_part, ns3_part = r.stdout.split("== ns-3")
    assert "resends dropped again: 1" in ours_part and "resends dropped again: 0" in ns3_part
    assert "later cuts on the ACK that ended CWR: 1 of 1" in ours_part
    assert "first RTOs: 1 from {'CA_CWR': 1}, window (segments) q10/50/90 1.5 / 1.5 / 1.5" in ours_part
    assert "drops toward: {'spine': 1, 'host': 1}" in ours_part
