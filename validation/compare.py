#!/usr/bin/env python3
"""Cross-check gradwire's flow completion times against ns-3.37.

For every scenario and transport, run gradwire and the ns-3 reference program
(validation/ns3/leafspine.cc) on the same topology and workload, both read from the same
scenario TOML, and compare mean and p99 flow completion time (FCT). A row PASSes when both
are within the tolerance (15 % by default) of ns-3.

    python validation/compare.py                      # the default matrix (see below)
    python validation/compare.py --seeds 1,2,3 --scenarios scenarios/incast-dctcp.toml

ns-3.37's global routing only has per-packet random ECMP, so gradwire runs with
`routing.mode = "spray"` (per-packet uniform random) for the comparison. FCTs of all seeds
are pooled before taking mean and p99. Both sides start every flow up to 1 µs late
(`--start-jitter-us`), so that no two hosts act in the same nanosecond.

`--tcp ns3` runs TCP as ns-3.37 does by default on both sides (SACK, delayed ACKs, PRR on
the ns-3 side) and writes validation/results-ns3.{csv,md}; the default, `--tcp sackless`,
runs it as the papers' ns-3 runs had it.

Writes validation/results.csv and validation/results.md (unless --no-write). Exits 1 if
any simulator run fails, 0 otherwise (add --strict to also exit 1 on a FAIL row).
See docs/validation.md for the method and the parameter mapping.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VALIDATION = ROOT / "validation"
NS3_DIR = VALIDATION / "ns3"
NS3_BIN = NS3_DIR / "build" / "leafspine"
OUR_BIN = ROOT / "target" / "release" / "gradwire-sim"

DEFAULT_SCENARIOS = [
    "scenarios/incast-dctcp.toml",
    "scenarios/leafspine-ps-dctcp.toml",
    "scenarios/leafspine-ps1m-dctcp.toml",
]
DEFAULT_TRANSPORTS = ["newreno", "dctcp"]
# TCP as each side runs it: gradwire's keys and leafspine's flags for the same thing. Both
# start from `baseline = "sackless"` (gradwire's default is Linux's TCP) and set the rest.
# In both modes gradwire runs three behaviours of ns-3.37's TcpSocketBase (NS3_SOCKET):
# no fast recovery from CA_CWR (DupAck), only the segments above the recovery point counted
# on the ACK that ends CA_LOSS (ProcessAck), and the RTO's backoff cleared on every new ACK
# (NewAck).
#  sackless: what the papers' ns-3 runs had: no SACK, one ACK a segment, NewReno recovery.
#  ns3: ns-3.37's own defaults: SACK, delayed ACKs every 2 segments or 200 ms, RFC 3042
#    limited transmit, PRR, and what ns-3.37's source does around them, each a gradwire
#    key (docs/validation.md): one more segment sent on every partial ACK in recovery
#    (ProcessAck), the first data segment answered at once (ProcessSynRcvd), a CE mark
#    counted only above the last one counted (ForwardUp), an ECN cut paced by PRR
#    (EnterCwr); TcpNewReno halves the pipe (BytesInFlight), its slow start grows one
#    segment per ACK and its congestion avoidance segmentSize^2/cWnd per ACK; TcpDctcp, a
#    TcpLinuxReno, counts segments in both, cuts by alpha/2 with no floor (GetSsThresh) and
#    answers a CE change one segment short (CeState0to1/1to0). Timestamps stay off on
#    both sides (they would add 12 header bytes a packet).
NS3_SOCKET = [
    "transport.tcp_recovery_from_cwr=false",
    "transport.tcp_loss_exit_ack=above_recover",
    "transport.tcp_rto_backoff_reset=new_ack",
]
TCP_MODES = {
    "sackless": (["baseline=sackless", *NS3_SOCKET], []),
    "ns3": (
        [
            "baseline=sackless",
            "transport.tcp_sack=true",
            "transport.tcp_partial_ack_resend=true",
            "transport.tcp_delack_count=2",
            "transport.tcp_delack_timeout_us=200000.0",
            "transport.tcp_delack_first_at_once=true",
            "transport.tcp_ce_seq_check=true",
            "transport.tcp_ecn_cut=prr",
            *NS3_SOCKET,
        ],
        ["--sack=true", "--delAckCount=2", "--recovery=prr", "--limitedTransmit=true"],
    ),
}
# Keys for one transport only, per mode.
TCP_MODE_TRANSPORT = {
    "ns3": {
        "newreno": ["transport.tcp_slow_start=per_ack", "transport.tcp_loss_cut=pipe"],
        "dctcp": [
            "transport.tcp_cong_avoid=per_segment_ns3",
            "transport.dctcp_ssthresh=ns3",
            "transport.tcp_ce_change_ack=lagged",
        ],
    }
}
_tcp_mode = "sackless"
# ns-3.37 behaviours that Linux and the RFCs do differently, each a leafspine flag (off:
# stock ns-3). `--ns3-fix` turns them on to show what each gap is made of.
#  cwr: fast retransmit from CA_CWR (stock ns-3 waits for the RTO after an ECN cut; gradwire
#    then runs its own rule, `tcp_recovery_from_cwr = true`, too);
#  dctcp_floor: DCTCP's cut keeps 2 segments (Linux's dctcp_ssthresh; ns-3 has no floor).
NS3_FIXES = {"cwr": "--cwrFastRetransmit=true", "dctcp_floor": "--dctcpFloor=true"}
# What gradwire runs beside each fix: the same behaviour as Linux has it.
NS3_FIX_OURS = {"cwr": ["transport.tcp_recovery_from_cwr=true"], "dctcp_floor": ["transport.dctcp_ssthresh=linux"]}
_ns3_fixes: list[str] = []
# `--ours-set`: more gradwire keys, after the mode's (e.g. ns-3.37 behaviours the ns3 mode
# leaves off, to measure them: docs/validation.md).
_ours_sets: list[str] = []
_rerun_ns3 = False
# Both sides start every ungated flow up to this much later (a seeded uniform draw each):
# `workload.start_jitter_us`, leafspine's --startJitterNs. Without it the hosts act in
# lockstep and packets that meet a full port in the same nanosecond are admitted in each
# simulator's event-queue order, which decides who loses (docs/validation.md).
# 1 µs is 8 full-size packets at 100 G and 1 % of the base RTT: enough that no two hosts
# send in the same nanosecond, too little to change the burst (measured 0.1–3 µs alike).
DEFAULT_START_JITTER_US = 1.0
_start_jitter_us = DEFAULT_START_JITTER_US

# Host NIC disciplines by name: (gradwire's host.nic, leafspine's --hostQueue). ns-3's
# round-robin queue disc holds whatever each socket hands over, a queue per flow served a
# packet a turn, which is gradwire's `flow_queues`; `pull` runs gradwire's default NIC
# (`round_robin`: a flow is asked for its packet when its turn comes, ACKs first) against
# that same ns-3 run.
NICS = {"round_robin": ("flow_queues", "rr"), "fifo": ("fifo", "fifo"), "pull": ("round_robin", "rr")}
DEFAULT_NICS = ["round_robin", "fifo"]
# Small scenarios (< 1000 flows) pool this many seeds: one 10 ms RTO among 32 flows is the
# p99 of a single run, and whether it happens is a coin toss on either simulator; pooled
# over 10 seeds the 32-flow incast's mean still moved by ±10 % from one block of seeds to
# the next (docs/validation.md). Large ones pool fewer: a 10 296-flow PS exchange's p99 is
# whether more than 1 % of its pushes hold an RTO.
SMALL_SEEDS = 30
LARGE_SEEDS = 3


class Unsupported(Exception):
    """The scenario uses something the ns-3 reference program does not model."""


def resolved(path: Path) -> dict:
    """The scenario as gradwire runs it, every key it may omit filled in by the simulator's
    own loader (`gradwire.load_scenario`), so the defaults live in one place: the Rust schema."""
    from gradwire import load_scenario

    runs = load_scenario(path.read_text(), [])
    if len(runs) != 1:
        raise SystemExit(f"{path}: a sweep ({len(runs)} runs); compare one configuration at a time")
    return runs[0].config()


def ns3_args(scn: dict, transport: str, seed: int, nic: str = "round_robin") -> list[str]:
    """Map a gradwire scenario ([`resolved`]) to leafspine.cc's command line, with host NICs
    of discipline `nic` (gradwire's `host.nic`)."""
    topo, sw, tr = scn["topology"], scn["switch"], scn["transport"]
    wl = scn["workload"]
    if topo["kind"] != "leaf_spine":
        raise Unsupported(f"topology.kind = {topo['kind']!r} (only leaf_spine)")
    if sw["buffer"] != "per_port":
        raise Unsupported(f"switch.buffer = {sw['buffer']!r} (only per_port)")
    if sw["drop_threshold_packets"]:
        raise Unsupported("switch.drop_threshold_packets")
    if scn.get("failures"):
        raise Unsupported("failures")
    nic_bytes = scn.get("host", {}).get("nic_queue_bytes", 0)
    if nic_bytes and nic != "fifo":
        raise Unsupported("host.nic_queue_bytes with a round-robin NIC (ns-3 side models it unbounded)")
    if tr["header_bytes"] != 40 or tr["ack_bytes"] != 40:
        raise Unsupported("header_bytes/ack_bytes other than 40 (ns-3 sends real IPv4+TCP headers)")
    if tr["dupack_threshold"] != 3:
        raise Unsupported("transport.dupack_threshold other than 3")
    args = [
        f"--spines={topo['spines']}",
        f"--leaves={topo['leaves']}",
        f"--hostsPerLeaf={topo['hosts_per_leaf']}",
        f"--hostGbps={topo['host_link_gbps']}",
        f"--uplinksPerLeaf={topo['uplinks_per_leaf']}",
        f"--uplinkGbps={topo['uplink_gbps']}",
        f"--linkDelayNs={topo['link_delay_ns']}",
        f"--bufferBytes={sw['buffer_bytes']}",
        f"--ecnThresholdPackets={sw['ecn_threshold_packets']}",
        f"--transport={transport}",
        f"--mss={tr['mss_bytes']}",
        f"--initCwnd={tr['init_cwnd_packets']}",
        f"--rtoMinUs={tr['rto_min_us']}",
        f"--rtoInitialUs={tr['rto_initial_us'] if tr['rto_initial_us'] is not None else tr['rto_min_us']}",
        f"--dctcpG={tr['dctcp_g']}",
        "--ecmp=spray",
        f"--hostQueue={NICS[nic][1]}",
        f"--hostQueueBytes={nic_bytes}",
        f"--seed={seed}",
        f"--stopMs={scn.get('stop_ms', 1000.0)}",
        f"--startUs={wl.get('start_us', 0.0)}",
    ]
    if wl.get("start_jitter_us", 0.0) > 0:
        args.append(f"--startJitterNs={wl['start_jitter_us'] * 1e3:g}")
    kind = wl["kind"]
    if kind == "incast":
        args += ["--workload=incast", f"--receiver={wl.get('receiver', 0)}", f"--flowBytes={wl.get('flow_bytes', 0)}"]
        if wl.get("sender_list") is not None:
            args.append("--senderList=" + ",".join(str(h) for h in wl["sender_list"]))
        else:
            args.append(f"--senders={wl.get('senders', 0)}")
    elif kind == "ps":
        push = wl.get("push_bytes", 0)
        pull = push if wl.get("pull_bytes") is None else wl["pull_bytes"]
        args += [
            "--workload=ps",
            f"--workers={wl['workers']}",
            f"--servers={wl['servers']}",
            f"--colocated={'true' if wl.get('colocated', True) else 'false'}",
            f"--pushBytes={push}",
            f"--pullBytes={pull}",
        ]
    else:
        raise Unsupported(f"workload.kind = {kind!r} (only incast and ps)")
    return args


# --------------------------------------------------------------------------------------
# Running the two simulators
# --------------------------------------------------------------------------------------


@dataclass
class Run:
    ok: bool
    fcts: list[int] = field(default_factory=list)
    unfinished: int = 0
    timeouts: int = 0
    wall_s: float = 0.0
    error: str = ""
    reused: bool = False


def read_flows(path: Path) -> tuple[list[int], int, int]:
    """FCTs of finished flows, count of unfinished flows, total RTO count."""
    fcts, unfinished, timeouts = [], 0, 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("fct_ns"):
                fcts.append(int(float(row["fct_ns"])))
            else:
                unfinished += 1
            timeouts += int(row.get("timeouts") or 0)
    return fcts, unfinished, timeouts


_snapshot: Path | None = None


def snapshot_our_binary(work: Path) -> Path | None:
    """Copy target/release/gradwire-sim once, so a rebuild during a long comparison cannot
    mix two simulator versions in one table."""
    global _snapshot
    if _snapshot is None and OUR_BIN.exists():
        work.mkdir(parents=True, exist_ok=True)
        _snapshot = work / "gradwire-sim.snapshot"
        shutil.copy2(OUR_BIN, _snapshot)
    return _snapshot


def our_command(scenario: Path, out: Path, transport: str, seed: int, nic: str = "round_robin") -> list[str]:
    sets = ["--set", f"transport.kind={transport}", "--set", "routing.mode=spray", "--set", f"host.nic={NICS[nic][0]}"]
    fixes = [kv for f in _ns3_fixes for kv in NS3_FIX_OURS[f]] + _ours_sets
    if _start_jitter_us:
        fixes.append(f"workload.start_jitter_us={_start_jitter_us:g}")
    for kv in TCP_MODES[_tcp_mode][0] + TCP_MODE_TRANSPORT.get(_tcp_mode, {}).get(transport, []) + fixes:
        sets += ["--set", kv]
    exe = _snapshot or (OUR_BIN if OUR_BIN.exists() else None)
    if exe:
        return [str(exe), str(scenario), "--out", str(out), "--seed", str(seed), *sets, "--quiet"]
    cli = shutil.which("gradwire")
    if cli:
        return [cli, "sim", str(scenario), "--out", str(out), "--set", f"seed={seed}", *sets]
    raise FileNotFoundError(
        "neither target/release/gradwire-sim nor the `gradwire` CLI exists (cargo build --release -p gradwire-sim)"
    )


def find_flows_csv(out: Path) -> Path:
    direct = out / "flows.csv"
    if direct.exists():
        return direct
    found = sorted(out.glob("*/flows.csv"))  # the CLI writes DIR/<run>/flows.csv
    if len(found) != 1:
        raise FileNotFoundError(f"expected one flows.csv under {out}, found {len(found)}")
    return found[0]


def run_child(cmd: list[str], log: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    with open(log, "w") as lf:
        rc = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    return rc, time.monotonic() - t0


def run_ours(scenario: Path, transport: str, seed: int, work: Path, nic: str) -> Run:
    out = work / f"ours-{_tcp_mode}-{transport}-{nic}-s{seed}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        cmd = our_command(scenario, out, transport, seed, nic)
    except FileNotFoundError as e:
        return Run(False, error=str(e))
    rc, wall = run_child(cmd, out / "log.txt")
    if rc != 0:
        return Run(False, wall_s=wall, error=f"exit {rc}: {tail(out / 'log.txt')}")
    try:
        fcts, unfinished, rtos = read_flows(find_flows_csv(out))
    except (OSError, ValueError) as e:
        return Run(False, wall_s=wall, error=str(e))
    return Run(True, fcts, unfinished, rtos, wall)


def ns3_command(args: list[str], out_csv: Path) -> list[str]:
    """leafspine's command line: the scenario's arguments ([`ns3_args`]), then the TCP
    mode's and the ns-3 fixes', as [`our_command`] sets their gradwire side."""
    fixes = [NS3_FIXES[f] for f in _ns3_fixes]
    return [str(NS3_BIN), *args, *TCP_MODES[_tcp_mode][1], *fixes, f"--out={out_csv}"]


def run_ns3(scn: dict, transport: str, seed: int, work: Path, nic: str) -> Run:
    out = work / f"ns3-{results_stem()}-{transport}-{NICS[nic][1]}-s{seed}"
    try:
        args = ns3_args(scn, transport, seed, nic)
    except Unsupported as e:
        return Run(False, error=f"not modelled on the ns-3 side: {e}")
    cmd = ns3_command(args, out / "flows.csv")
    if not _rerun_ns3 and ns3_run_is_current(out, cmd):
        fcts, unfinished, rtos = read_flows(out / "flows.csv")
        return Run(True, fcts, unfinished, rtos, float((out / "wall.txt").read_text()), reused=True)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "cmd.txt").write_text(" ".join(cmd) + "\n")
    rc, wall = run_child(cmd, out / "log.txt")
    # leafspine exits 3 when some flow did not finish by stop_ms: still a result
    if rc not in (0, 3) or not (out / "flows.csv").exists():
        return Run(False, wall_s=wall, error=f"exit {rc}: {tail(out / 'log.txt')}")
    (out / "wall.txt").write_text(f"{wall:.3f}\n")
    fcts, unfinished, rtos = read_flows(out / "flows.csv")
    return Run(True, fcts, unfinished, rtos, wall)


def ns3_run_is_current(out: Path, cmd: list[str]) -> bool:
    """An ns-3 run of this exact command line that completed, by the binary built now: its
    result can only be the same (ns-3 is deterministic for a seed), so it is read back
    instead of run again (minutes for a PS scenario). `--rerun-ns3` runs it anyway."""
    try:
        same = (out / "cmd.txt").read_text() == " ".join(cmd) + "\n"
        return same and (out / "flows.csv").stat().st_mtime >= NS3_BIN.stat().st_mtime and (out / "wall.txt").exists()
    except OSError:
        return False


def results_stem() -> str:
    """results.md for the papers' SACK-less TCP, results-ns3.md for ns-3's defaults, with
    the ns-3 fixes named after it."""
    stem = "results" if _tcp_mode == "sackless" else f"results-{_tcp_mode}"
    return stem + "".join(f"-{f}" for f in _ns3_fixes)


def tail(path: Path, n: int = 3) -> str:
    try:
        return " | ".join(path.read_text().strip().splitlines()[-n:])
    except OSError:
        return ""


def build_ns3() -> None:
    subprocess.run(["bash", str(NS3_DIR / "build.sh")], check=True)


# --------------------------------------------------------------------------------------
# Statistics and reporting
# --------------------------------------------------------------------------------------


def percentile(sorted_vals: list[int], q: float) -> float:
    """Nearest-rank percentile, as gradwire's summary.json computes it."""
    if not sorted_vals:
        return math.nan
    rank = math.ceil(q / 100.0 * len(sorted_vals))
    return float(sorted_vals[min(max(rank, 1), len(sorted_vals)) - 1])


def rel(ours: float, ref: float) -> float:
    return (ours - ref) / ref if ref else math.nan


@dataclass
class Row:
    scenario: str
    transport: str
    nic: str
    seeds: str
    flows: int
    ours_mean_us: float
    ns3_mean_us: float
    ours_p99_us: float
    ns3_p99_us: float
    mean_diff: float
    p99_diff: float
    ours_rtos: int
    ns3_rtos: int
    ours_wall_s: float
    ns3_wall_s: float
    verdict: str
    note: str = ""
    # Finished flows whose FCT reached RTOmin: the RTOs a flow waited for. The RTO counts
    # also hold timeouts after the receiver had every byte (the last segment's ACK held
    # by a 200 ms delayed ACK, say), which do not touch an FCT.
    ours_held: int = 0
    ns3_held: int = 0


COLUMNS = [
    "scenario",
    "transport",
    "nic",
    "seeds",
    "flows",
    "ours_mean_us",
    "ns3_mean_us",
    "mean_diff",
    "ours_p99_us",
    "ns3_p99_us",
    "p99_diff",
    "verdict",
    "ours_rtos",
    "ns3_rtos",
    "ours_held",
    "ns3_held",
    "ours_wall_s",
    "ns3_wall_s",
    "note",
]


def fmt(row: Row, col: str) -> str:
    v = getattr(row, col)
    if col.endswith("_diff"):
        return "n/a" if math.isnan(v) else f"{v * 100:+.1f}%"
    if col.endswith("_us"):
        return "n/a" if math.isnan(v) else f"{v:.1f}"
    if col.endswith("_s"):
        return f"{v:.1f}"
    return str(v)


HEAD = {
    "scenario": "scenario",
    "transport": "transport",
    "nic": "host NIC",
    "seeds": "seeds",
    "flows": "flows",
    "ours_mean_us": "mean ours (us)",
    "ns3_mean_us": "mean ns-3 (us)",
    "mean_diff": "Δ mean",
    "ours_p99_us": "p99 ours (us)",
    "ns3_p99_us": "p99 ns-3 (us)",
    "p99_diff": "Δ p99",
    "verdict": "verdict",
    "ours_rtos": "RTOs ours",
    "ns3_rtos": "RTOs ns-3",
    "ours_held": "FCT ≥ RTOmin ours",
    "ns3_held": "FCT ≥ RTOmin ns-3",
    "ours_wall_s": "wall ours (s)",
    "ns3_wall_s": "wall ns-3 (s)",
    "note": "note",
}
TABLE_COLS = COLUMNS[:-1]


def print_table(rows: list[Row]) -> None:
    try:
        if not sys.stdout.isatty():
            raise ImportError  # a log file: the plain table keeps every column readable
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        cells = [[HEAD[c] for c in TABLE_COLS]] + [[fmt(r, c) for c in TABLE_COLS] for r in rows]
        widths = [max(len(line[i]) for line in cells) for i in range(len(TABLE_COLS))]
        for k, line in enumerate(cells):
            print("  ".join(v.rjust(w) if k and i > 2 else v.ljust(w) for i, (v, w) in enumerate(zip(line, widths))))
            if k == 0:
                print("  ".join("-" * w for w in widths))
        for r in rows:
            if r.note:
                print(f"note [{r.scenario} {r.transport} {r.nic}]: {r.note}")
        return
    table = Table(title="gradwire vs ns-3.37 (FCT)")
    for c in TABLE_COLS:
        table.add_column(HEAD[c], justify="left" if c in ("scenario", "transport", "nic") else "right")
    for r in rows:
        style = {"PASS": "green", "FAIL": "red"}.get(r.verdict, "yellow")
        table.add_row(*[fmt(r, c) for c in TABLE_COLS], style=style)
    Console().print(table)
    for r in rows:
        if r.note:
            print(f"note [{r.scenario} {r.transport} {r.nic}]: {r.note}")


def write_outputs(rows: list[Row], tol: float, command: str) -> None:
    stem = results_stem()
    with open(VALIDATION / f"{stem}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow(
                [
                    fmt(r, c)
                    if c.endswith("_diff")
                    else (f"{getattr(r, c):.3f}" if isinstance(getattr(r, c), float) else getattr(r, c))
                    for c in COLUMNS
                ]
            )
    md_cols = [c for c in TABLE_COLS if not c.endswith("_wall_s")]
    lines = [
        f"<!-- generated by `{command}` -->",
        "| " + " | ".join(HEAD[c] for c in md_cols) + " |",
        "|" + "|".join("---" if c in ("scenario", "transport", "nic") else "---:" for c in md_cols) + "|",
    ]
    for r in rows:
        lines.append("| " + " | ".join((f"**{r.verdict}**" if c == "verdict" else fmt(r, c)) for c in md_cols) + " |")
    lines.append("")
    lines.append(
        f"PASS: mean and p99 FCT both within {tol * 100:.0f} % of ns-3. "
        'gradwire runs with `routing.mode = "spray"` (ns-3.37 has only per-packet ECMP). '
        "Gaps are explained in docs/validation.md."
    )
    notes = [f"- {r.scenario} / {r.transport} / {r.nic}: {r.note}" for r in rows if r.note]
    if notes:
        lines += ["", *notes]
    (VALIDATION / f"{stem}.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", default=DEFAULT_SCENARIOS)
    ap.add_argument("--transports", nargs="+", default=DEFAULT_TRANSPORTS, choices=DEFAULT_TRANSPORTS)
    ap.add_argument(
        "--nics",
        nargs="+",
        default=DEFAULT_NICS,
        choices=list(NICS),
        help="host NICs: round_robin (ns-3's per-flow round-robin queue disc, gradwire's flow_queues), "
        "fifo (one FIFO each side), pull (gradwire's default round_robin against ns-3's queue disc)",
    )
    ap.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds, pooled (default: 1..30 for scenarios with fewer than 1000 flows, else 1..3)",
    )
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument(
        "--tcp",
        choices=list(TCP_MODES),
        default="sackless",
        help="TCP on both sides: sackless (the papers' ns-3 runs, gradwire's default) or ns3 (ns-3.37's defaults: "
        "SACK, delayed ACKs, PRR); results go to results.md, or results-ns3.md",
    )
    ap.add_argument(
        "--ns3-fix",
        nargs="+",
        default=[],
        choices=list(NS3_FIXES),
        help="run ns-3 with these of its behaviours as Linux has them: cwr (fast retransmit from CA_CWR), "
        "dctcp_floor (DCTCP's cut keeps 2 segments); results go to results[-ns3]-FIX....md",
    )
    ap.add_argument(
        "--work",
        default=str(VALIDATION / "out"),
        help="directory for the runs' outputs (default validation/out, gitignored)",
    )
    ap.add_argument(
        "--ours-set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="more gradwire keys (gradwire-sim --set), after the mode's; the results file keeps its name: "
        "use with --no-write",
    )
    ap.add_argument(
        "--rerun-ns3",
        action="store_true",
        help="run ns-3 again even where WORK holds a completed run of the same command by the same binary",
    )
    ap.add_argument(
        "--start-jitter-us",
        type=float,
        default=DEFAULT_START_JITTER_US,
        help="both sides start every ungated flow up to this many microseconds later (seeded uniform draws; "
        "0: all at once, in lockstep)",
    )
    ap.add_argument("--no-write", action="store_true", help="do not write validation/results.csv and results.md")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a row FAILs")
    args = ap.parse_args(argv)
    global _tcp_mode, _ns3_fixes, _ours_sets, _rerun_ns3, _start_jitter_us
    _tcp_mode = args.tcp
    _start_jitter_us = args.start_jitter_us
    _rerun_ns3 = args.rerun_ns3
    _ns3_fixes = sorted(set(args.ns3_fix))
    _ours_sets = list(args.ours_set)

    os.chdir(ROOT)
    build_ns3()
    snapshot_our_binary(Path(args.work))
    rows: list[Row] = []
    failed_runs = 0
    for scen in args.scenarios:
        path = (ROOT / scen).resolve()
        scn = resolved(path)
        if _start_jitter_us:
            scn["workload"]["start_jitter_us"] = _start_jitter_us
        name = scn.get("name") or path.stem
        for transport, nic in itertools.product(args.transports, args.nics):
            if args.seeds:
                seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
            else:
                seeds = None  # decided after the first run, from its flow count
            work = Path(args.work) / name
            ours_f, ns3_f, ours_wall, ns3_wall = [], [], 0.0, 0.0
            ours_rto, ns3_rto = 0, 0
            errors, unfinished = [], 0
            done_seeds = []
            pending = list(seeds) if seeds else [1]
            while pending:
                seed = pending.pop(0)
                print(f"[{name} {transport} {nic} seed {seed}] gradwire ...", flush=True)
                a = run_ours(path, transport, seed, work, nic)
                print(f"[{name} {transport} {nic} seed {seed}] ns-3 ...", flush=True)
                b = run_ns3(scn, transport, seed, work, nic)
                if b.reused:
                    print(f"[{name} {transport} {nic} seed {seed}] ns-3: the same run's result read back", flush=True)
                for who, r in (("gradwire", a), ("ns-3", b)):
                    if not r.ok:
                        errors.append(f"{who} seed {seed}: {r.error}")
                if not (a.ok and b.ok):
                    continue
                done_seeds.append(seed)
                ours_f += a.fcts
                ns3_f += b.fcts
                ours_rto += a.timeouts
                ns3_rto += b.timeouts
                ours_wall += a.wall_s
                ns3_wall += b.wall_s
                unfinished += a.unfinished + b.unfinished
                if seeds is None and seed == 1:
                    pending += list(range(2, (SMALL_SEEDS if len(b.fcts) < 1000 else LARGE_SEEDS) + 1))
            if errors:
                failed_runs += 1
                for e in errors:
                    print(f"ERROR [{name} {transport} {nic}] {e}", file=sys.stderr)
            if not done_seeds:
                rows.append(
                    Row(
                        name, transport, nic, "-", 0, *([math.nan] * 6), 0, 0, 0.0, 0.0, "ERROR", note="; ".join(errors)
                    )
                )
                continue
            ours_f.sort()
            ns3_f.sort()
            rto_min_ns = scn["transport"]["rto_min_us"] * 1e3
            om, nm = sum(ours_f) / len(ours_f) / 1e3, sum(ns3_f) / len(ns3_f) / 1e3
            op, np_ = percentile(ours_f, 99) / 1e3, percentile(ns3_f, 99) / 1e3
            md, pd = rel(om, nm), rel(op, np_)
            ok = abs(md) <= args.tolerance and abs(pd) <= args.tolerance
            note = "; ".join(errors)
            if unfinished:
                note = (note + "; " if note else "") + f"{unfinished} flows unfinished at stop_ms"
            if len(ours_f) != len(ns3_f):
                note = (note + "; " if note else "") + f"flow counts differ: ours {len(ours_f)}, ns-3 {len(ns3_f)}"
            rows.append(
                Row(
                    name,
                    transport,
                    nic,
                    ",".join(map(str, done_seeds)),
                    len(ns3_f),
                    om,
                    nm,
                    op,
                    np_,
                    md,
                    pd,
                    ours_rto,
                    ns3_rto,
                    ours_wall,
                    ns3_wall,
                    "PASS" if ok else "FAIL",
                    note,
                    ours_held=sum(1 for x in ours_f if x >= rto_min_ns),
                    ns3_held=sum(1 for x in ns3_f if x >= rto_min_ns),
                )
            )
    print()
    print_table(rows)
    if not args.no_write:
        # the command as a reader would rerun it: where the runs were kept does not change them
        given = list(argv if argv is not None else sys.argv[1:])
        shown = [
            a
            for i, a in enumerate(given)
            if a != "--work" and not a.startswith("--work=") and (i == 0 or given[i - 1] != "--work")
        ]
        command = "python validation/compare.py" + (" " + " ".join(shown)).rstrip()
        write_outputs(rows, args.tolerance, command.strip())
        stem = results_stem()
        print(f"\nwrote {VALIDATION / (stem + '.csv')} and {VALIDATION / (stem + '.md')}")
    if failed_runs:
        return 1
    if args.strict and any(r.verdict != "PASS" for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
