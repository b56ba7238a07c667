"""Where a ring allreduce's time went, from the runtime's trace (``GRADWIRE_TRACE=1``).

    GRADWIRE_TRACE=1 gradwire emulate allreduce-loss --set "job.backends=['dlcp']" -o DIR
    python -m gradwire.emu.ringtrace DIR/<run> [--gbps 0.95] [--mss 1440]

Reads ``dlcp-rank<r>.log`` (or ``ltp-``) of one run: each rank's call starts, started sends
and finished transfers with their ``unix=`` times (the wall clock every namespace shares).
For the ring (transfer ``t`` of a call is step ``t // n``, sent by rank ``t % n``, whose
chunk it reduced or copied in step ``t // n - 1`` from rank ``t % n - 1``), per call:

- the call's wall time, from the first rank's start to the last receive;
- its critical chain, walked back from the last receive through each sender's previous
  receive: the chain's first sender's late start, the time each sender took from its
  previous receive to starting the send (the engine's work between steps), and each
  transfer from its send to its receive, against the floor (one chunk on the wire at the
  rate the runtime paces, 1500-byte packets);
- over all transfers after the first step: their time above the floor, and how much of
  it passed while the sender was still sending its previous step (two sends on one link).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

CALL = re.compile(r"rank (\d+) starts call (\d+) .*unix=([\d.]+)")
START = re.compile(r"rank (\d+) call (\d+) starts transfer (\d+) \((\d+) -> (\d+), (\d+) B\) unix=([\d.]+)")
DONE = re.compile(r"rank (\d+) call (\d+) finished transfer (\d+) \((\d+) -> (\d+), (\d+) B, (\w+)\) unix=([\d.]+)")


@dataclass
class Trace:
    ranks: int = 0
    chunk: int = 0
    call_start: dict = field(default_factory=dict)  # (call, rank) -> unix
    send_start: dict = field(default_factory=dict)  # (call, transfer) -> unix
    received: dict = field(default_factory=dict)
    sent: dict = field(default_factory=dict)


def read(run: Path) -> Trace:
    tr = Trace()
    logs = sorted(run.glob("*-rank*.log"))
    if not logs:
        raise SystemExit(f"no <backend>-rank<r>.log in {run} (run with GRADWIRE_TRACE=1)")
    tr.ranks = len(logs)
    for f in logs:
        for line in f.read_text().splitlines():
            if m := CALL.search(line):
                tr.call_start[(int(m[2]), int(m[1]))] = float(m[3])
            elif m := START.search(line):
                tr.send_start[(int(m[2]), int(m[3]))] = float(m[7])
                tr.chunk = int(m[6])
            elif m := DONE.search(line):
                d = tr.received if m[7] == "received" else tr.sent
                d[(int(m[2]), int(m[3]))] = float(m[8])
    return tr


def report(tr: Trace, gbps: float, mss: int) -> list[str]:
    n = tr.ranks
    floor = -(-tr.chunk // mss) * (mss + 60) * 8 / (gbps * 1e9)
    out = [f"{n} ranks, {tr.chunk} B per step, floor {floor * 1e3:.1f} ms per step at {gbps:g} Gbit/s"]
    calls = sorted({c for c, _ in tr.call_start})
    total = {"wall": 0.0, "late": 0.0, "between": 0.0, "above": 0.0}
    for c in calls:
        starts = [tr.call_start[(c, r)] for r in range(n) if (c, r) in tr.call_start]
        recvs = {t: u for (cc, t), u in tr.received.items() if cc == c}
        if len(starts) < n or not recvs:
            continue
        t0 = min(starts)
        last = max(recvs, key=recvs.get)
        chain, t = [], last
        while (c, t) in tr.send_start:
            step, src = divmod(t, n)
            begin = tr.send_start[(c, t)]
            prev = (step - 1) * n + (src - 1) % n
            if step == 0 or (c, prev) not in tr.received:
                chain.append((begin - tr.call_start.get((c, src), begin), recvs[t] - begin))
                origin = tr.call_start.get((c, src), begin) - t0
                break
            chain.append((begin - tr.received[(c, prev)], recvs[t] - begin))
            t = prev
        chain.reverse()
        wall = recvs[last] - t0
        between = sum(g for g, _ in chain)
        above = sum(d for _, d in chain) - len(chain) * floor
        total["wall"] += wall
        total["late"] += origin
        total["between"] += between
        total["above"] += above
        steps = " ".join(f"[{g * 1e3:.1f}, {d * 1e3:.0f}]" for g, d in chain)
        out.append(
            f"call {c}: {wall * 1e3:.0f} ms; chain: first sender late {origin * 1e3:.0f} ms, "
            f"between steps {between * 1e3:.1f} ms, transfers {above * 1e3:+.0f} ms over "
            f"{len(chain)} x floor; per step [ms before the send, ms of the transfer]: {steps}"
        )
    over = overlap = 0.0
    for (c, t), begin in tr.send_start.items():
        if t < n or (c, t) not in tr.received:
            continue
        over += max(0.0, tr.received[(c, t)] - begin - floor)
        overlap += max(0.0, tr.sent.get((c, t - n), 0.0) - begin)
    out.append(
        f"all calls: {total['wall'] * 1e3:.0f} ms; on the chains: late first senders "
        f"{total['late'] * 1e3:.0f} ms, between steps {total['between'] * 1e3:.1f} ms, transfers "
        f"above the floor {total['above'] * 1e3:.0f} ms"
    )
    out.append(
        f"transfers after the first step: {over * 1e3:.0f} ms above the floor, of which "
        f"{overlap * 1e3:.0f} ms while the sender still sent its previous step"
    )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="one run's directory (with <backend>-rank<r>.log)")
    ap.add_argument("--gbps", type=float, default=0.95, help="the rate the runtime paces at")
    ap.add_argument("--mss", type=int, default=1440, help="payload bytes per datagram")
    a = ap.parse_args(argv)
    print("\n".join(report(read(a.run), a.gbps, a.mss)))


if __name__ == "__main__":
    main()
