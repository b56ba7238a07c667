#!/usr/bin/env python3
"""The whole job through the fast mode: its `m` interleaved samples (`fast.offset` 0 to
m - 1, each `fast.servers` of the job's S servers), run side by side, cover every server
once; their flows together are the job's, and the job's iteration is the slowest
sample's. Beside packet level's run of the same job it prints the error in mean, p50 and
p99 FCT, iteration time and RTOs, the CPU (user + sys, all samples summed), the largest
peak RSS of one sample and the wall time, as ratios to packet level's.

    python3 benchmarks/sim_fast/cover.py [--k 8] [--servers 8] [--case dctcp] [--seed 1]
        [--jobs 2] [--packet DIR]   # DIR: a packet-level run of the same job to reuse

The samples are independent processes: `--jobs` of them run at once (on a cluster, each
could run anywhere).
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import CASES, ROOT, command, metrics  # noqa: E402


def simulate(binary, k, case, seed, out, extra=()):
    """One run under /usr/bin/time: (CPU s, peak RSS MB, wall s, summary, flows)."""
    args = command(binary, k, case, list(extra), out, seed)
    began = time.monotonic()
    subprocess.run(["/usr/bin/time", "-f", "%U %S %M", "-o", out + ".time", *args], check=True)
    wall = time.monotonic() - began
    return measured(out) | {"wall_s": wall}


def measured(out):
    with open(out + ".time") as f:
        user, sys_, rss_kb = f.read().split()[-3:]
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(out, "flows.csv")) as f:
        rows = list(csv.DictReader(f))
    return {"cpu_s": float(user) + float(sys_), "rss_mb": int(rss_kb) / 1024, "summary": summary, "rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "gradwire-sim"))
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--servers", type=int, default=8, help="fast.servers of each sample")
    ap.add_argument("--case", default="dctcp", help=f"of {', '.join(CASES)}")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--packet", help="a packet-level run's --out directory (with DIR.time) to reuse")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        first = simulate(
            a.bin,
            a.k,
            a.case,
            a.seed,
            os.path.join(tmp, "fast0"),
            ["fidelity=fast", "fast.unvalidated=true", f"fast.servers={a.servers}"],
        )
        sample = first["summary"]["fast"]
        m = sample["of"] // len(sample["servers"])
        print(
            f"k = {a.k}, {a.case}, seed {a.seed}: {m} samples of {len(sample['servers'])} of {sample['of']} servers",
            file=sys.stderr,
        )
        began = time.monotonic()

        def offset(o):
            extra = ["fidelity=fast", "fast.unvalidated=true", f"fast.servers={a.servers}", f"fast.offset={o}"]
            return simulate(a.bin, a.k, a.case, a.seed, os.path.join(tmp, f"fast{o}"), extra)

        with ThreadPoolExecutor(a.jobs) as pool:
            runs = [first, *pool.map(offset, range(1, m))]
        wall = first["wall_s"] + time.monotonic() - began
        covered = sorted(h for r in runs for h in r["summary"]["fast"]["servers"])
        assert len(covered) == len(set(covered)) == sample["of"], "the samples cover every server once"
        if a.packet:
            packet = measured(a.packet) | {"wall_s": float("nan")}
        else:
            print("packet level ...", file=sys.stderr)
            packet = simulate(a.bin, a.k, a.case, a.seed, os.path.join(tmp, "packet"))
    got = metrics([r for run in runs for r in run["rows"]])
    ref = metrics(packet["rows"])
    keys = ("mean_ms", "p50_ms", "p99_ms", "iteration_ms", "rtos")
    err = " / ".join(f"{(got[k] / ref[k] - 1) * 100:+.1f} %" if ref[k] else "-" for k in keys)
    cpu = sum(r["cpu_s"] for r in runs)
    rss = max(r["rss_mb"] for r in runs)
    print(
        "| job | samples | error: mean / p50 / p99 / iteration / RTOs | CPU, all samples / packet | largest RSS / packet | wall |"
    )
    print("|---|---|---|---:|---:|---:|")
    print(
        f"| k={a.k} {a.case} seed {a.seed} | {m} × {len(sample['servers'])} of {sample['of']} | {err} "
        f"| {cpu:.0f} s / {packet['cpu_s']:.0f} s = {cpu / packet['cpu_s']:.2f} "
        f"| {rss:.0f} / {packet['rss_mb']:.0f} MB = {rss / packet['rss_mb']:.2f} | {wall:.0f} s on {a.jobs} |"
    )
    print(
        f"packet level: {json.dumps({k: round(ref[k], 2) for k in keys})}; samples: {json.dumps({k: round(got[k], 2) for k in keys})}"
    )


if __name__ == "__main__":
    main()
