"""Set two traces of one scenario beside each other: gradwire's (`--features trace`) and
ns-3's (`validation/ns3/build/leafspine` with `LEAFSPINE_TRACE_*`), which print the same
lines (see `crates/gradwire-core/src/transport/tcp/trace.rs`). It prints, for each side,
the drops over time and where, the resends dropped again, and per flow group (same leaf as
the receiver or not) the ECN cuts per flow, the cuts taken on the ACK that ended the last
CWR, and the first RTOs: the state they interrupt and the window at them.

    cargo build --release -p gradwire-sim --features trace --target-dir target/trace
    GRADWIRE_TRACE_STATES=1 GRADWIRE_TRACE_DROPS=1 target/trace/release/gradwire-sim S.toml \\
        --out OURS --set ... 2> ours.trace
    LEAFSPINE_TRACE_STATES=1 LEAFSPINE_TRACE_DROPS=1 validation/ns3/build/leafspine ... \\
        --out=NS3/flows.csv 2> ns3.trace
    python validation/trace_compare.py ours.trace ns3.trace --flows OURS/flows.csv --hosts-per-leaf 16

`validation/compare.py` prints both commands' arguments (its `cmd.txt` and `log.txt`).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import Counter, defaultdict
from pathlib import Path


def read(path: Path) -> tuple[dict[int, list[tuple[float, str, str, int]]], list[tuple[float, int, str, int, str]]]:
    """(state changes per flow: (t µs, from, to, cwnd B)), drops: (t µs, flow, kind, seq, port))."""
    states: dict[int, list] = defaultdict(list)
    drops = []
    for line in path.read_text().splitlines():
        p = line.split()
        if p[:1] == ["ST"] and len(p) == 6:
            states[int(p[2])].append((int(p[1]) / 1000, p[3], p[4], int(p[5])))
        elif p[:1] == ["DROP"] and len(p) == 6:
            drops.append((int(p[1]) / 1000, int(p[2]), p[3], int(p[4]), p[5]))
    return states, drops


def quantiles(v: list[float]) -> str:
    if not v:
        return "-"
    v = sorted(v)
    return " / ".join(f"{v[int(q * (len(v) - 1))]:.1f}" for q in (0.1, 0.5, 0.9))


def summarize(name: str, path: Path, group: dict[int, str], mss: int, bin_us: float) -> None:
    states, drops = read(path)
    print(f"== {name}: {path}")
    by_bin = Counter(int(t // bin_us) * bin_us for t, *_ in drops)
    print(f"  drops per {bin_us:g} µs:", " ".join(f"{t:g}:{n}" for t, n in sorted(by_bin.items())))
    ports = Counter(port.split("->")[1].rstrip("0123456789") for *_, port in drops)
    seen: Counter = Counter()
    again = []
    for t, flow, kind, seq, _port in drops:
        if kind == "Data" and seen[(flow, seq)]:
            again.append(t)
        seen[(flow, seq)] += 1
    print(f"  drops toward: {dict(ports)}; resends dropped again: {len(again)} (median {quantiles(again)} µs)")
    for g in sorted(set(group.values())):
        cuts: Counter = Counter()
        recut = total_recut = 0
        rto_from: Counter = Counter()
        rto_cwnd = []
        for flow, kind in group.items():
            if kind != g:
                continue
            n, last_exit = 0, None
            for t, a, b, cwnd in states.get(flow, []):
                if a == "CA_CWR" and b == "CA_OPEN":
                    last_exit = t
                if b == "CA_CWR":
                    n += 1
                    if n > 1:
                        total_recut += 1
                        recut += last_exit is not None and t - last_exit < 1e-3
                if b == "CA_LOSS":
                    rto_from[a] += 1
                    rto_cwnd.append(cwnd / mss)
                    break
            cuts[n] += 1
        print(
            f"  {g}: ECN cuts before the first RTO (flows): "
            + " ".join(f"{k}:{v}" for k, v in sorted(cuts.items()))
            + f"; later cuts on the ACK that ended CWR: {recut} of {total_recut}"
        )
        print(
            f"    first RTOs: {sum(rto_from.values())} from {dict(rto_from)}, window (segments) q10/50/90 {quantiles(rto_cwnd)}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ours", type=Path)
    ap.add_argument("ns3", type=Path)
    ap.add_argument("--flows", type=Path, required=True, help="either side's flows.csv (flow id, src, dst)")
    ap.add_argument("--hosts-per-leaf", type=int, default=16)
    ap.add_argument("--mss", type=int, default=1460)
    ap.add_argument("--bin-us", type=float, default=25.0)
    args = ap.parse_args(argv)
    with args.flows.open() as f:
        rows = list(csv.DictReader(f))
    h = args.hosts_per_leaf
    group = {
        int(r["flow_id"]): "same leaf" if int(r["src"]) // h == int(r["dst"]) // h else "across leaves" for r in rows
    }
    fcts = [int(r["fct_ns"]) for r in rows if r["fct_ns"]]
    print(f"{len(rows)} flows; mean FCT {statistics.mean(fcts) / 1000:.1f} µs (this flows.csv)")
    summarize("gradwire", args.ours, group, args.mss, args.bin_us)
    summarize("ns-3", args.ns3, group, args.mss, args.bin_us)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
