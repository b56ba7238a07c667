"""`gradwire crosscheck`: the emulator and the simulator twin on one small case (needs root
and /dev/net/tun, skipped otherwise), and the case list the issue asks for."""

from __future__ import annotations

import csv
import math

import pytest

from gradwire.emu import crosscheck as cc
from gradwire.emu import unavailable_reason


def test_the_cases_cover_ring_and_ps_loss_rtt_and_incast():
    names = [c.name for c in cc.cases()]
    for want in (
        "ring, 10 us RTT, 0% loss",
        "ring, 10 us RTT, 1% loss",
        "ring, 10 ms RTT, 0% loss",
        "ring, 10 ms RTT, 1% loss",
        "PS 3:1, 10 us RTT, 0% loss",
        "PS 7:1, 10 us RTT, 1% loss",
        "incast 3:1, 10 us RTT, 0% loss",
        "incast 3:1, 10 ms RTT, 1% loss",
    ):
        assert want in names
    for c in cc.cases():
        assert all(b in cc.TWIN for b in c.backends), c


def test_a_slower_rate_scales_the_bytes_in_both_worlds_and_keeps_the_wire_time():
    """`--gbps 0.25` (network-bound on 2 idle cores): every case's links run at that rate in
    the emulator and the twin, with a quarter of the bytes; a rate that is not positive
    is refused."""
    fast, slow = cc.cases(), cc.cases(gbps=0.25)
    assert [c.name for c in fast] == [c.name for c in slow]
    for f, s in zip(fast, slow):
        assert "topology.host_link_gbps=0.25" in s.sets and "topology.uplink_gbps=0.25" in s.twin_sets
        scaled = [
            (int(a.split("=")[1]), int(b.split("=")[1]))
            for a, b in zip(f.emu_sets + f.twin_sets, s.emu_sets + s.twin_sets)
            if a.split("=")[0] in ("job.bytes", "workload.bytes", "workload.push_bytes", "workload.flow_bytes")
        ]
        assert scaled and all(b == a // 4 for a, b in scaled), (f.name, scaled)
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="positive number of Gbit/s"):
            cc.cases(gbps=bad)


def test_gloos_twin_keeps_its_connections_and_every_twin_key_loads():
    """Gloo keeps one socket per rank pair, so its twin's flows ride persistent connections;
    every twin's overrides are keys the simulator accepts (a no-op key would load silently
    only if it existed, and a typo would fail here, not in a 16-core run)."""
    from gradwire.emu.command import BUILTIN
    from gradwire.runner import plan
    from gradwire.scenarios import ScenarioSource

    assert 'transport.tcp_connections="persistent"' in cc.TWIN["gloo"]
    for case in cc.cases() + cc.cases(gbps=0.25):
        path = BUILTIN / "sim" / f"{case.twin}.toml"
        src = ScenarioSource(name=case.twin, origin=str(path), text=path.read_text())
        for backend in case.backends:
            sets = ["sweep={}", *case.sets, *case.twin_sets, *cc.TWIN[backend], *cc.control_twin(case, backend)]
            runs = plan(src, sets).runs
            assert len(runs) == 1, (case.name, backend)


def test_the_twins_control_resends_as_the_runtimes_tcp_does():
    """DLCP's and LTP's twins resend a control message after 2 RTT plus the minimum RTO the
    runtime's control connections get from this kernel; the TCP twins have no such channel."""
    floor = cc.kernel_control_rto_min_us()
    assert 1000 <= floor <= 200_000
    for case in cc.cases():
        assert cc.control_twin(case, "gloo") == () and cc.control_twin(case, "reno") == ()
        (dlcp,) = cc.control_twin(case, "dlcp")
        assert dlcp == f"transport.ctrl_rto_us={2 * case.rtt_us + floor}"
    ten_ms = next(c for c in cc.cases() if c.name.startswith("ring, 10 ms"))
    assert ten_ms.rtt_us == 10_000.0


def test_the_runtimes_twins_send_its_datagrams_from_its_nic_clock_and_pool_seeds(tmp_path):
    """DLCP's and LTP's twins send 1 440-byte payloads under 60 header bytes from a NIC at
    the runtime's share of the link; kernel TCP's twins keep the link's rate. A twin's
    time is the median over `TWIN_SEEDS` seeds' iterations: on the lossless 10 us ring
    at 0.25 Gbit/s DLCP's twin is at its floor, 6 ring steps of 1 085 datagrams at 95 %."""
    from gradwire.emu.job import LINE_RATE_SHARE

    for backend in ("dlcp", "ltp"):
        assert f"host.nic_rate_share={LINE_RATE_SHARE}" in cc.TWIN[backend]
        assert {"transport.mss_bytes=1440", "transport.header_bytes=60"} <= set(cc.TWIN[backend])
    for backend in ("gloo", "cubic", "reno"):
        assert not any(k.startswith("host.") for k in cc.TWIN[backend])
    ring = next(c for c in cc.cases(gbps=0.25) if c.name == "ring, 10 us RTT, 0% loss")
    t, rtos, each = cc.twin(ring, "dlcp", tmp_path)
    assert len(each) == 3 * cc.TWIN_SEEDS and t == sorted(each)[len(each) // 2]
    floor = 6 * 1085 * 1500 * 8 / (0.25e9 * LINE_RATE_SHARE)
    assert floor <= t <= 1.02 * floor and rtos == 0, (t, floor)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"seed{i}" for i in range(1, cc.TWIN_SEEDS + 1)]


def test_iterations_apply_to_both_worlds_of_a_collective_and_not_to_flows(tmp_path):
    """`--iterations N` runs a ring or PS job N times in the emulator and N times per seed
    in the twin; a kernel-TCP incast runs N times in the emulator (its twin on N seeds, at
    least `TWIN_SEEDS`). The spread column is the quartiles of what was measured."""
    ring = next(c for c in cc.cases(quick=True) if c.name == "ring, 10 us RTT, 0% loss")
    incast = next(c for c in cc.cases(quick=True) if c.name.startswith("incast"))
    assert cc.iteration_sets(ring, 5) == (("job.iterations=5",), ("workload.iterations=5",))
    assert cc.iteration_sets(ring, None) == ((), ()) and cc.iteration_sets(incast, 5) == ((), ())
    _, _, each = cc.twin(ring, "gloo", tmp_path / "ring", iterations=2)
    assert len(each) == 2 * cc.TWIN_SEEDS
    # a flow job's twin: a sample per seed, as many seeds as the emulator's runs
    _, _, each = cc.twin(incast, "reno", tmp_path / "incast", iterations=cc.TWIN_SEEDS + 2)
    assert len(each) == cc.TWIN_SEEDS + 2
    assert cc._spread([1.0, 2.0, 3.0, 4.0, 5.0]) == "2.000-4.000" and cc._spread([0.5]) == "0.500"


def test_the_verdict_counts_each_sides_rows_within_its_bound():
    def row(case, backend, ratio, cpu_bound=False):
        return {"case": case, "backend": backend, "ratio": ratio, "cpu_bound": cpu_bound}

    rows = [
        row("ring", "gloo", 1.63),
        row("ring", "dlcp", 1.06),
        row("ring", "ltp", 0.8, True),
        row("PS", "cubic", 1.0),
        row("PS", "dlcp", math.nan),
    ]
    runtime, kernel, cpu = cc.verdict(rows)
    assert runtime == "runtime: 1 of 3 within 1.2x of the twin. Outside: ring, ltp 0.8x; PS, dlcp nanx"
    assert kernel == "kernel TCP: 1 of 2 within 1.2x of the twin. Outside: ring, gloo 1.63x"
    assert cpu.startswith("CPU-bound: 1 of 5 rows")


@pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")
def test_one_case_runs_in_both_worlds(tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from gradwire.cli import app

    args = ["crosscheck", "--quick", "--case", "ring, 10 us RTT, 0%", "--iterations", "2", "-o", str(tmp_path)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((tmp_path / "crosscheck.csv").open()))
    assert [r["backend"] for r in rows] == ["gloo", "dlcp", "ltp"]
    for row in rows:
        assert row["iterations_emulated"] == "2" and "-" in row["emulated_spread_s"] and row["twin_spread_s"]
        emu, twin = float(row["emulated_s"]), float(row["twin_s"])
        assert emu > 0 and twin > 0 and math.isclose(float(row["ratio"]), emu / twin, rel_tol=0.02, abs_tol=0.006)
        # timeouts per iteration in both worlds: the kernel's counted for Gloo only
        assert float(row["rtos_per_iteration_twin"]) >= 0
        assert (float(row["rtos_per_iteration_emulated"]) >= 0) == (row["backend"] == "gloo"), row
    r = CliRunner().invoke(app, ["crosscheck", "--case", "no such case", "-o", str(tmp_path)])
    assert r.exit_code == 2 and "no case matches" in r.output


@pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")
def test_a_kernel_tcp_incast_runs_per_congestion_control_with_the_kernels_counters(tmp_path):
    """A flow case runs one emulated point per congestion control, `iterations` times; its
    time is the median of the runs' last flows and its RTO column the kernels' count per
    run (0 or more), not missing."""
    case = next(c for c in cc.cases(quick=True) if c.name == "incast 3:1, 10 us RTT, 0% loss")
    rows = cc.run_case(case, tmp_path, log=lambda _: None, iterations=2)
    assert [r["backend"] for r in rows] == ["reno", "cubic"]
    for row in rows:
        # 3 MB over a 1 Gbit/s port: at least the wire time
        assert row["emulated_s"] >= 3e6 * 8 / 1e9 and row["twin_s"] >= 3e6 * 8 / 1e9, row
        assert row["rtos_per_iteration_emulated"] >= 0, row
        assert row["iterations_emulated"] == 2 and "-" in row["emulated_spread_s"], row
    assert (tmp_path / "emulated-reno" / "run1" / "results.csv").exists()
