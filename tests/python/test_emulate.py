"""The emulated testbed end to end: real namespaces, TUN devices, the emulator's switch (run
from the extension, python -m gradwire.emu.switch), real UDP and TCP sockets. Needs root
and /dev/net/tun (skipped otherwise)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gradwire.emu import EmulatedNetwork, switch_command, unavailable_reason
from gradwire.emu.job import plan, run_point

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")

UDP = str(Path(__file__).parent / "emu_udp.py")
CS7, BE = 0xE0, 0x00  # DSCP CS7 -> queue 0 (first served); DSCP 0 -> queue 7
ECT0 = 0x02


@pytest.fixture(scope="session", autouse=True)
def emu_switch() -> list[str]:
    return switch_command()  # fails at once if the extension has no switch


def scenario(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "net.toml"
    p.write_text(textwrap.dedent(text))
    return p


def ours(prefix_pid: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"gwe{prefix_pid}h")]


def udp_exchange(
    net: EmulatedNetwork,
    src: int,
    dst: int,
    groups: list[str],
    count: int,
    size: int = 1000,
):
    rx = net.popen(
        dst,
        [sys.executable, UDP, "recv", 7000, count, 5],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert rx.stdout.readline().strip() == "ready"
    net.run(
        src,
        [sys.executable, UDP, "send", net.addr(dst), 7000, size, *groups],
        check=True,
        timeout=60,
    )
    out, _ = rx.communicate(timeout=60)
    return json.loads(out)


def check_conservation(stats: dict) -> None:
    pk = stats["packets"]
    assert pk["conserved"], pk
    assert pk["sent"] == pk["delivered"] + pk["dropped"] + pk["in_flight"]
    assert pk["dropped"] == sum(stats["drops"].values())
    for p in stats["ports"]:
        admission = sum(v for k, v in p["drops"].items() if k != "random_loss")
        assert p["offered"] == p["enqueued"] + admission, p
        assert p["enqueued"] == p["dequeued"] + p["queued_packets"], p


def test_two_hosts_strict_priority_and_conservation(tmp_path):
    # 1 Mbit/s: a 1000-byte datagram takes 8 ms, so the 60 queue at host 0's NIC port and
    # the later high-priority ones overtake the earlier ones even when the sender is slowed
    # by a loaded machine (at 10 Mbit/s a CI run once saw them all arrive in order)
    path = scenario(
        tmp_path,
        """
        [topology]
        hosts_per_leaf = 2
        host_link_gbps = 0.001
        """,
    )
    with EmulatedNetwork(path, tmp_path / "run") as net:
        assert len(net) == 2 and net.addr(1) == "10.77.0.2"
        got = udp_exchange(net, 0, 1, [f"{BE}:50", f"{CS7}:10"], count=60)
        stats = net.stats()
    assert len(got) == 60, "no loss: the queues have room for everything"
    order = [seq for seq, _ in got]
    high = [i for i, s in enumerate(order) if s >= 50]
    # the high-priority datagrams were sent last and arrive well before the last best-effort ones
    assert max(high) < order.index(49), order
    assert [t >> 2 for s, t in got if s >= 50] == [CS7 >> 2] * 10, "DSCP survives the switch"
    check_conservation(stats)
    assert stats["packets"]["delivered"] >= 60 and stats["packets"]["in_flight"] == 0
    nic = next(p for p in stats["ports"] if p["name"] == "host0->leaf0")
    assert nic["max_bytes"] > 20 * 1000, "the queue built at the bottleneck"
    final = net.final_stats()
    check_conservation(final)
    assert not ours(net.proc.pid), "namespaces removed"


def test_four_hosts_ecn_marks_ect_only_and_drops_by_reason(tmp_path):
    # hosts 1 and 2 send to host 0 at once: the leaf0->host0 port holds twice its rate
    path = scenario(
        tmp_path,
        """
        [topology]
        hosts_per_leaf = 4
        host_link_gbps = 0.02
        [switch]
        ecn_threshold_packets = 5
        buffer_bytes = 60000
        """,
    )
    with EmulatedNetwork(path, tmp_path / "run") as net:
        rx = net.popen(
            0,
            [sys.executable, UDP, "recv", 7000, 1000, 5],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert rx.stdout.readline().strip() == "ready"
        # both start at one instant (processes start up far apart on a loaded machine); 500
        # datagrams each last 200 ms at 20 Mbit/s and the 60 KB port fills within 24 ms of
        # their overlap, so a wake-up skew of up to ~170 ms still overflows it (at 200 each,
        # a loaded CI-like machine once missed the overlap)
        at = f"@{time.time() + 3.0}"
        senders = [
            net.popen(
                1,
                [
                    sys.executable,
                    UDP,
                    "send",
                    net.addr(0),
                    7000,
                    1000,
                    at,
                    f"{ECT0}:500",
                ],
            ),
            net.popen(
                2,
                [sys.executable, UDP, "send", net.addr(0), 7000, 1000, at, f"{BE}:500"],
            ),
        ]
        for s in senders:
            assert s.wait(timeout=60) == 0
        got = json.loads(rx.communicate(timeout=60)[0])
        stats = net.stats()
    ce = [t for _, t in got if t & 0b11 == 0b11]
    assert ce, "ECT datagrams were marked CE at the congested port"
    assert all(t & 0b11 in (ECT0, 0b11) for t in ce)
    assert not [t for _, t in got if t & 0b11 == 0b01], "nothing invents ECT(1)"
    port = next(p for p in stats["ports"] if p["name"] == "leaf0->host0")
    assert port["ecn_marked"] == len(ce) and stats["ecn_marks"] == len(ce)
    assert port["drops"]["buffer_full"] > 0, "60 KB cannot hold the overload"
    assert stats["drops"]["buffer_full"] == port["drops"]["buffer_full"]
    assert stats["packets"]["delivered"] >= len(got)
    check_conservation(stats)


def test_pcn_start_lowers_a_switch_ports_ecn_threshold(tmp_path):
    # Host 2 streams 300 ECT datagrams to host 0 at the link's rate (0.5 s at 5 Mbit/s); 0.2 s
    # in, host 1 sends a START and 40 more. A queue forms at host 0's port only while both
    # send, and stays near 20 packets, below K = 50: only the PCN threshold (5 packets) that
    # the START carries makes the port mark. The long stream keeps the two overlapping even
    # when a loaded machine wakes a sender a few hundred ms late (with two 40-packet bursts,
    # 66 ms each, a late wake serialized them and nothing queued).
    path = scenario(
        tmp_path,
        """
        [topology]
        hosts_per_leaf = 3
        host_link_gbps = 0.005
        [switch]
        ecn_threshold_packets = 50
        buffer_bytes = 200000
        [emulate]
        pcn = true
        """,
    )
    start = ((1 << 5) | 1) << 2  # DSCP: START flag, threshold 1 x 5 packets
    with EmulatedNetwork(path, tmp_path / "run") as net:
        rx = net.popen(0, [sys.executable, UDP, "recv", 7000, 341, 10], stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "ready"
        at = time.time() + 5.0
        senders = [
            net.popen(2, [sys.executable, UDP, "send", net.addr(0), 7000, 1000, f"@{at}", f"{ECT0}:300"]),
            net.popen(
                1, [sys.executable, UDP, "send", net.addr(0), 7000, 1000, f"@{at + 0.2}", f"{start}:1", f"{ECT0}:40"]
            ),
        ]
        for s in senders:
            assert s.wait(timeout=60) == 0
        got = json.loads(rx.communicate(timeout=60)[0])
        stats = net.stats()
    port = next(p for p in stats["ports"] if p["name"] == "leaf0->host0")
    assert port["max_bytes"] < 50 * 1028, "the queue stayed below K"
    ce = [t for _, t in got if t & 0b11 == 0b11]
    assert ce and port["ecn_marked"] == len(ce)
    assert stats["pcn"]["port_starts"] == 1 and stats["pcn"]["ports_lowered"] == 1
    check_conservation(stats)


FLOWS = """
    name = "tcp"
    seed = 3
    [topology]
    leaves = 2
    spines = 2
    uplinks_per_leaf = 2
    hosts_per_leaf = 2
    host_link_gbps = 0.2
    uplink_gbps = 0.2
    link_loss_rate = 0.01
    [job]
    kind = "flows"
    flows = [{ src = 0, dst = 3, bytes = 2000000, cc = "cubic" }, { src = 1, dst = 2, bytes = 2000000, cc = "bbr" }]
    """


def test_kernel_tcp_across_a_leaf_spine_with_random_loss(tmp_path):
    path = scenario(tmp_path, FLOWS)
    name, points = plan(path)
    assert name == "tcp" and len(points) == 1
    s = run_point(path, points[0], tmp_path / "out", log=lambda m: None, timeout=120)
    rows = {r["cc"]: r for r in s["rows"]}
    for cc in ("cubic", "bbr"):
        assert rows[cc]["time_s"] > 0 and not rows[cc].get("error"), rows[cc]
        # 2 MB at 200 Mbit/s is at least 80 ms: the shaper holds the rate
        assert rows[cc]["time_s"] > 0.08
        # the CPU over the flows: the senders', the switch's, the kernel's
        assert rows[cc]["switch_share"] > 0 and rows[cc]["cpu_bound"] == (rows[cc]["machine_busy"] >= 0.9)
    assert rows["cubic"]["retransmits"] > 0, "1 % random loss per link costs retransmissions"
    assert s["drops"]["random_loss"] > 0
    stats = json.loads((tmp_path / "out" / "switch.json").read_text())
    check_conservation(stats)
    assert stats["packets"]["in_flight"] == 0
    spines = sum(p["dequeued"] for p in stats["ports"] if p["name"].startswith("spine"))
    assert spines > 2000, "cross-rack flows crossed the spines"
    loss = sum(p["drops"]["random_loss"] for p in stats["ports"])
    assert loss == s["drops"]["random_loss"], "random loss is counted on the port of the lossy link"
    assert (tmp_path / "out" / "results.csv").exists()


def test_switch_crash_leaves_nothing_behind(tmp_path):
    """SIGKILL of the switch: its TUN devices vanish with it, and the next run sweeps the
    namespaces whose owner is gone."""
    path = scenario(tmp_path, "[topology]\nhosts_per_leaf = 2\n")
    net = EmulatedNetwork(path, tmp_path / "a")
    net.start()
    pid = net.proc.pid
    try:
        assert len(ours(pid)) == 2
        os.kill(pid, signal.SIGKILL)
        net.proc.wait(timeout=30)
        links = subprocess.run(
            ["ip", "-n", ours(pid)[0], "link"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        assert "eth0" not in links, "the TUN device died with its process"
        with EmulatedNetwork(path, tmp_path / "b"):
            assert not ours(pid), "the stale namespaces were swept on start"
    finally:
        net.close()
        for ns in ours(pid):
            subprocess.run(["ip", "netns", "del", ns], check=False)


def test_front_end_crash_tears_the_network_down(tmp_path):
    """SIGKILL of the Python process that owns the network: the switch sees its stdin
    close (and its parent die) and removes every namespace."""
    path = scenario(tmp_path, "[topology]\nhosts_per_leaf = 2\n")
    code = textwrap.dedent(f"""
        import sys, time
        from gradwire.emu import EmulatedNetwork
        net = EmulatedNetwork({str(path)!r}, {str(tmp_path / "run")!r}).__enter__()
        print(net.proc.pid, flush=True)
        time.sleep(600)
        """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        switch_pid = int(p.stdout.readline())
        assert len(ours(switch_pid)) == 2
        p.kill()
        p.wait(timeout=30)
        deadline = time.monotonic() + 60
        while ours(switch_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not ours(switch_pid)
    finally:
        if p.poll() is None:
            p.kill()


def test_bad_scenarios_fail_clearly(tmp_path):
    bad = scenario(tmp_path, "[topology]\nspine = 2\n")
    with (
        pytest.raises(Exception, match="spine"),
        EmulatedNetwork(bad, tmp_path / "run"),
    ):
        pass
    res = subprocess.run(
        [sys.executable, "-m", "gradwire", "emulate", str(bad)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "job" in (res.stdout + res.stderr)


JOBS = """
    name = "jobs"
    [topology]
    hosts_per_leaf = 3
    host_link_gbps = 0.2
    [job]
    kind = "allreduce"
    backends = ["gloo", "dlcp"]
    ranks = 2
    bytes = 2000000
    iterations = 1
    loss_bound = 0.0
    timeout_s = 120
    """


def test_gloo_and_gradwire_allreduce_tcp_ps_and_ddp_run_in_namespaces(tmp_path, monkeypatch):
    """The unchanged runtime and torch.distributed's Gloo, one rank per namespace, through
    the switch; then a kernel-TCP parameter-server exchange and DDP steps with the hook and
    on the backend."""
    path = scenario(tmp_path, JOBS)
    _, points = plan(path)
    # what a rank writes to stderr (here the runtime's trace) is kept per rank, in a file:
    # a pipe read only once the rank before has exited would fill and block the rank
    monkeypatch.setenv("GRADWIRE_TRACE", "1")
    s = run_point(path, points[0], tmp_path / "ar", log=lambda m: None)
    monkeypatch.delenv("GRADWIRE_TRACE")
    for rank in range(2):
        trace = (tmp_path / "ar" / f"dlcp-rank{rank}.log").read_text()
        assert f"rank {rank} call 0 finished transfer" in trace and f"rank {rank} call 0 complete" in trace
    by = {r["label"]: r for r in s["rows"]}
    for backend in ("gloo", "dlcp"):
        assert not by[backend].get("error"), by[backend]
        # 2 MB each way at 200 Mbit/s: at least 80 ms on the wire
        assert by[backend]["time_s"] > 0.08
        assert by[backend]["packets"] > 2000000 // 1500
        # through the switch's TSO/USO split and GRO-style merge, bit for bit
        assert by[backend]["exact"], by[backend]
    # Gloo's kernel TCP runs the job's congestion control (cubic unless set), not the host's
    assert by["gloo"]["tcp_cc"] == "cubic", by["gloo"]
    # every iteration says where the CPU went: ranks, switch, kernel, and whether it was CPU-bound
    for r in s["rows"]:
        assert 0 < r["ranks_share"] <= 1.05 and 0 < r["switch_share"] <= 1.05, r
        assert r["machine_busy"] >= r["kernel_share"] and r["iter_switch_cpu_s"] > 0, r
        assert r["cpu_bound"] == (r["machine_busy"] >= 0.9), r
        # the hosts' kernel receive path runs inside the switch's TUN writes: part of its CPU
        assert 0 < r["switch_rx_cpu_s"] <= r["switch_cpu_s"], r
    assert 0 < s["switch_rx_cpu_seconds"] < s["switch_cpu_seconds"], s
    _, points = plan(path, ['job.kind="ps"', 'job.backends=["cubic"]', "job.ranks=3", "topology.link_loss_rate=0.02"])
    s = run_point(path, points[0], tmp_path / "ps", log=lambda m: None)
    (row,) = s["rows"]
    assert row["label"] == "cubic" and not row.get("error") and row["time_s"] > 0.08
    assert "cpu_bound" in row and row["ranks_share"] > 0, row
    # the kernels' own TCP counters say how they recovered the switch's random losses
    assert row["random_loss"] > 0 and row["tcp_retrans_segs"] > 0, row
    assert row["tcp_sack_recoveries"] + row["tcp_loss_probes"] + row["tcp_timeouts"] > 0, row
    # and how CUBIC's slow start ended: by HyStart (either rule, with the window) or not
    for rule in ("train", "delay"):
        assert row[f"tcp_hystart_{rule}_cwnd"] >= 16 * row[f"tcp_hystart_{rule}"] >= 0, row
    assert s["packets"]["conserved"]
    # in lockstep (`sync`), each iteration of the runtime's PS and kernel TCP's carries the
    # whole push and pull through the server's port: 2 workers x 2 MB each way at 200 Mbit/s
    sets = ['job.kind="ps"', 'job.backends=["cubic", "dlcp"]', "job.ranks=3", "job.iterations=2", "job.sync=true"]
    _, points = plan(path, sets)
    s = run_point(path, points[0], tmp_path / "ps-sync", log=lambda m: None)
    assert {r["label"] for r in s["rows"]} == {"cubic", "dlcp"}
    for r in s["rows"]:
        assert not r.get("error") and r["time_s"] > 0.95 * 2 * 4e6 * 8 / 0.2e9, r
    # a DDP training step with gradwire's communication hook, and with DDP's own allreduce
    # on the "gradwire" process-group backend: 4 MB of gradients
    _, points = plan(path, ['job.kind="ddp"', 'job.backends=["dlcp", "dlcp-backend"]', "job.bytes=4000000"])
    s = run_point(path, points[0], tmp_path / "ddp", log=lambda m: None)
    assert [r["label"] for r in s["rows"]] == ["dlcp", "dlcp-backend"]
    for row in s["rows"]:
        assert not row.get("error") and row["time_s"] > 0.08, row


def test_a_training_job_reports_its_time_to_accuracy(tmp_path):
    """`kind = "train"`: gradwire train's DDP job on Gloo and on the gradwire backend with
    its loss-tolerant hook, one rank per namespace; both train the same replicas and say
    when (in seconds of steps) they reached the target."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")  # the digits dataset
    path = scenario(tmp_path, JOBS)
    sets = ['job.kind="train"', 'job.backends=["gloo","dlcp"]', "job.epochs=2", "job.target=0.3"]
    _, points = plan(path, sets)
    s = run_point(path, points[0], tmp_path / "train", log=lambda m: None)
    by = {r["label"]: r for r in s["rows"]}
    for backend in ("gloo", "dlcp"):
        r = by[backend]
        assert not r.get("error"), r
        assert r["steps"] > 0 and 0 < r["time_to_accuracy_s"] <= r["time_s"], r
        assert "cpu_bound" in r, r
    # the lossless network and the same seed: the same model, step for step
    assert by["gloo"]["final_accuracy"] == by["dlcp"]["final_accuracy"]


def test_ctrl_c_tears_down_a_running_job(tmp_path):
    """SIGINT to the whole process group, as Ctrl-C in a terminal: exit 130, nothing left."""
    path = scenario(
        tmp_path,
        """
        [topology]
        hosts_per_leaf = 2
        host_link_gbps = 0.1
        [job]
        kind = "flows"
        flows = [{ src = 0, dst = 1, bytes = 1000000000, cc = "cubic" }]
        """,
    )
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gradwire",
            "emulate",
            str(path),
            "-o",
            str(tmp_path / "out"),
            "--no-plot",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        network = tmp_path / "out" / "net" / "network.json"
        deadline = time.monotonic() + 120
        while not network.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert network.exists(), "the network came up"
        pid = json.loads(network.read_text())["switch_pid"]
        assert len(ours(pid)) == 2
        time.sleep(3)  # the flow is running
        os.killpg(p.pid, signal.SIGINT)
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 130, out
        assert "interrupted" in out
        assert not ours(pid)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
