#!/usr/bin/env python3
"""One simulator run on several cores (`threads = N`) against the same run on one, on issue
32's datacenter scenario (benchmarks/sim_memory/ft1024.toml) scaled by the fat-tree's k:
k^3/4 hosts, ResNet50 through dedicated parameter servers, workers and servers 3:1.

The runs go one after the other (the parallel one needs every core). Prints, per size:
wall time, CPU time (user + sys) and peak RSS of each, the speed-up (one-thread wall /
N-thread wall), and how far the N-thread run's mean, p50 and p99 FCT, iteration time and
RTOs fall from the single run's (packet level's own seed-to-seed spread at k = 8 is about
+-5 % in mean FCT and RTOs, +-2 % in iteration time: docs/notes/fast-mode.md). With
--repeat the N-thread run goes twice and its flows.csv and summary.json must be
byte-identical (a seed gives one output).

    python3 benchmarks/sim_threads/run.py [--bin target/release/gradwire-sim] [--k 8,12]
        [--threads 2] [--repeat] [--json results.json]

k = 8 (128 hosts) takes ~25 s on one core, k = 12 (432 hosts) ~2.5 min, k = 16 (the
1 024-host original) ~10 min.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCENARIO = os.path.join(ROOT, "benchmarks", "sim_memory", "ft1024.toml")
WALL_FIELDS = ("wall_seconds", "events_per_second")


def overrides(k, threads):
    hosts = k**3 // 4
    sets = [
        f"topology.k={k}",
        f"workload.workers={hosts * 3 // 4}",
        f"workload.servers={hosts // 4}",
        f"threads={threads}",
    ]
    return [a for s in sets for a in ("--set", s)]


def run(binary, k, threads, out):
    timing = out + ".time"
    cmd = ["/usr/bin/time", "-f", "%e %M %U %S", "-o", timing, binary, SCENARIO, "--out", out, "--quiet"]
    p = subprocess.run(cmd + overrides(k, threads), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit(f"a run failed (k = {k}, threads = {threads}):\n{p.stderr.decode()}")
    wall, rss_kb, user, sys_s = open(timing).read().split()[-4:]
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    return {
        "wall_s": float(wall),
        "cpu_s": float(user) + float(sys_s),
        "rss_bytes": int(rss_kb) * 1024,
        "summary": summary,
    }


def same_output(a, b):
    def body(out):
        with open(os.path.join(out, "flows.csv"), "rb") as f:
            flows = f.read()
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        for k in WALL_FIELDS:
            s.pop(k, None)
        return flows, s

    return body(a) == body(b)


def rel(new, old):
    return (new / old - 1.0) if old else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "gradwire-sim"))
    ap.add_argument("--k", default="8,12", help="fat-tree sizes, comma-separated (default 8,12)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", action="store_true", help="run the parallel case twice and compare outputs")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        sys.exit(f"no simulator binary at {a.bin}: cargo build --release -p gradwire-sim --bin gradwire-sim")
    rows = []
    print(
        f"{'hosts':>6} {'flows':>9}  {'wall 1 / N (s)':>16} {'speed-up':>8}  {'CPU N/1':>7} {'RSS N/1':>7}"
        f"  {'mean':>7} {'p50':>7} {'p99':>7} {'iter':>7} {'RTOs':>7}  identical"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for k in [int(x) for x in a.k.split(",")]:
            one = run(a.bin, k, 1, os.path.join(tmp, f"k{k}-t1"))
            par_out = os.path.join(tmp, f"k{k}-t{a.threads}")
            par = run(a.bin, k, a.threads, par_out)
            identical = None
            if a.repeat:
                again = os.path.join(tmp, f"k{k}-t{a.threads}-again")
                run(a.bin, k, a.threads, again)
                identical = same_output(par_out, again)
            s1, sn = one["summary"], par["summary"]
            row = {
                "k": k,
                "hosts": k**3 // 4,
                "flows": s1["flows"],
                "threads": a.threads,
                "wall_s": [one["wall_s"], par["wall_s"]],
                "cpu_s": [one["cpu_s"], par["cpu_s"]],
                "rss_bytes": [one["rss_bytes"], par["rss_bytes"]],
                "speedup": one["wall_s"] / par["wall_s"],
                "error": {
                    "fct_mean": rel(sn["fct_mean_ns"], s1["fct_mean_ns"]),
                    "fct_p50": rel(sn["fct_p50_ns"], s1["fct_p50_ns"]),
                    "fct_p99": rel(sn["fct_p99_ns"], s1["fct_p99_ns"]),
                    "iteration": rel(sn["sim_time_ns"], s1["sim_time_ns"]),
                    "rtos": rel(sn["timeouts"], s1["timeouts"]),
                },
                "finished": [s1["flows_finished"], sn["flows_finished"]],
                "conserved": sn["packets"]["conserved"],
                "identical": identical,
            }
            rows.append(row)
            e = row["error"]
            print(
                f"{row['hosts']:>6} {row['flows']:>9}  {one['wall_s']:>7.1f} / {par['wall_s']:>6.1f} {row['speedup']:>7.2f}x"
                f"  {par['cpu_s'] / one['cpu_s']:>7.2f} {par['rss_bytes'] / one['rss_bytes']:>7.2f}"
                f"  {e['fct_mean']:>+7.1%} {e['fct_p50']:>+7.1%} {e['fct_p99']:>+7.1%} {e['iteration']:>+7.1%}"
                f" {e['rtos']:>+7.1%}  {'-' if identical is None else ('yes' if identical else 'NO')}",
                flush=True,
            )
            if sn["flows_finished"] != s1["flows_finished"] or not row["conserved"]:
                sys.exit("the parallel run lost flows or packets")
            if identical is False:
                sys.exit("two parallel runs of one seed differ")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
