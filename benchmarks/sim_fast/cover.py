#!/usr/bin/env python3
"""The whole job through the fast mode: `fast.cover = true` runs its `m` interleaved
samples (`fast.offset` 0 to m - 1, each `fast.servers` of the job's S servers), `threads`
at a time, and writes their flows as the job's (every flow once, under packet level's
flow ids); the job's iteration is the slowest sample's. Beside packet level's run of the
same job it prints the error in mean, p50 and p99 FCT, iteration time and RTOs, and the
cover's CPU (user + sys, every sample), peak RSS and wall time as ratios to packet
level's.

    python3 benchmarks/sim_fast/cover.py [--k 8] [--servers 8] [--case dctcp] [--seed 1]
        [--threads 2] [--packet DIR]   # DIR: a packet-level run of the same job to reuse
"""

import argparse
import csv
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import CASES, ROOT, metrics, run  # noqa: E402


def measured(out):
    """A run already made with run.py's `run` (DIR.cpu beside DIR): its numbers again."""
    with open(out + ".cpu") as f:
        cpu_s, rss_mb, wall_s = map(float, f.read().split())
    with open(os.path.join(out, "flows.csv")) as f:
        rows = list(csv.DictReader(f))
    return {"cpu_s": cpu_s, "rss_mb": rss_mb, "wall_s": wall_s, "rows": rows}


def timed(binary, k, case, seed, out, extra=()):
    r = run(binary, k, case, list(extra), out, seed)
    with open(out + ".cpu", "w") as f:
        f.write(f"{r['cpu_s']} {r['rss_mb']} {r['wall_s']}\n")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "gradwire-sim"))
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--servers", type=int, default=8, help="fast.servers of each sample")
    ap.add_argument("--case", default="dctcp", help=f"of {', '.join(CASES)}")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="samples run at once")
    ap.add_argument("--packet", help="a packet-level run's --out directory, made by an earlier call, to reuse")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["fidelity=fast", "fast.unvalidated=true", f"fast.servers={a.servers}", "fast.cover=true"]
        cover = timed(a.bin, a.k, a.case, a.seed, os.path.join(tmp, "cover"), [*extra, f"threads={a.threads}"])
        sample = cover["summary"]["fast"]
        if a.packet:
            packet = measured(a.packet)
        else:
            print("packet level ...", file=sys.stderr)
            packet = timed(a.bin, a.k, a.case, a.seed, os.path.join(tmp, "packet"))
    assert len(cover["rows"]) == len(packet["rows"]), "the cover holds every flow of the job"
    got, ref = metrics(cover["rows"]), metrics(packet["rows"])
    keys = ("mean_ms", "p50_ms", "p99_ms", "iteration_ms", "rtos")
    err = " / ".join(f"{(got[k] / ref[k] - 1) * 100:+.1f} %" if ref[k] else "-" for k in keys)
    m, n = sample["samples"], len(sample["servers"]) // sample["samples"]
    print(
        "| job | samples | error: mean / p50 / p99 / iteration / RTOs | CPU, cover / packet | RSS, cover / packet | wall |"
    )
    print("|---|---|---|---:|---:|---:|")
    print(
        f"| k={a.k} {a.case} seed {a.seed} | {m} × {n} of {sample['of']} | {err} "
        f"| {cover['cpu_s']:.0f} s / {packet['cpu_s']:.0f} s = {cover['cpu_s'] / packet['cpu_s']:.2f} "
        f"| {cover['rss_mb']:.0f} / {packet['rss_mb']:.0f} MB = {cover['rss_mb'] / packet['rss_mb']:.2f} "
        f"| {cover['wall_s']:.0f} s on {a.threads} threads / {packet['wall_s']:.0f} s |"
    )
    print(
        f"packet level: {json.dumps({k: round(ref[k], 2) for k in keys})}; cover: {json.dumps({k: round(got[k], 2) for k in keys})}"
    )


if __name__ == "__main__":
    main()
