#!/usr/bin/env python3
"""Peak memory and CPU time of two gradwire-sim builds on issue 32's datacenter scenario,
scaled down: a k-ary fat-tree (k^3/4 hosts), ResNet50 through dedicated parameter servers,
workers and servers 3:1 as in the 1 024-host original (ft1024.toml).

Both builds run at the same time, one per core, so the machine's noise hits both alike.
The CPU ratio is one order (old started first), and the order alone moves it: the same
binary against itself at k = 12 came out 0.936. For CPU, use benchmarks/sim_ab/pair.sh,
which runs both orders.
Prints, per size: flows, peak RSS (max resident set, /usr/bin/time) and bytes per flow of
each build, new/old ratios of peak RSS and CPU time (user + sys), and whether flows.csv
and summary.json (apart from its wall-time fields) are byte-identical.

    python3 benchmarks/sim_memory/run.py OLD_BIN NEW_BIN [--k 8,12] [--stop-ms MS]
        [--json results.json]

k = 8 (128 hosts, 80 064 flows) takes ~30 s of CPU per build, k = 12 (432 hosts,
762 696 flows) ~6 minutes; --stop-ms cuts a run short (the peak may then not be reached).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "ft1024.toml")
WALL_FIELDS = ("wall_seconds", "events_per_second")


def overrides(k, stop_ms):
    hosts = k**3 // 4
    sets = [f"topology.k={k}", f"workload.workers={hosts * 3 // 4}", f"workload.servers={hosts // 4}"]
    if stop_ms is not None:
        sets.append(f"stop_ms={stop_ms}")
    return [a for s in sets for a in ("--set", s)]


def start(binary, k, stop_ms, out):
    timing = out + ".time"
    cmd = ["/usr/bin/time", "-f", "%M %U %S", "-o", timing, binary, SCENARIO, "--out", out, "--quiet"]
    return subprocess.Popen(cmd + overrides(k, stop_ms), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), timing


def finish(proc, timing):
    _, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"a run failed:\n{err.decode()}")
    rss_kb, user, sys_s = open(timing).read().split()[-3:]
    return int(rss_kb) * 1024, float(user) + float(sys_s)


def summary(out):
    d = json.load(open(os.path.join(out, "summary.json")))
    for f in WALL_FIELDS:
        d.pop(f, None)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--k", default="8,12", help="fat-tree sizes, comma-separated (default 8,12)")
    ap.add_argument("--stop-ms", type=float, default=None)
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in [int(x) for x in a.k.split(",")]:
            outs = {tag: os.path.join(tmp, f"{tag}-k{k}") for tag in ("old", "new")}
            procs = {tag: start(b, k, a.stop_ms, outs[tag]) for tag, b in (("old", a.old), ("new", a.new))}
            res = {tag: finish(*procs[tag]) for tag in procs}
            s_old, s_new = summary(outs["old"]), summary(outs["new"])
            with (
                open(os.path.join(outs["old"], "flows.csv"), "rb") as f1,
                open(os.path.join(outs["new"], "flows.csv"), "rb") as f2,
            ):
                same = f1.read() == f2.read() and s_old == s_new
            flows = s_new["flows"]
            row = {
                "k": k,
                "hosts": k**3 // 4,
                "flows": flows,
                "events": s_new["events"],
                "old_rss_bytes": res["old"][0],
                "new_rss_bytes": res["new"][0],
                "old_cpu_s": res["old"][1],
                "new_cpu_s": res["new"][1],
                "rss_ratio": res["new"][0] / res["old"][0],
                "cpu_ratio": res["new"][1] / res["old"][1],
                "old_bytes_per_flow": res["old"][0] / flows,
                "new_bytes_per_flow": res["new"][0] / flows,
                "identical": same,
            }
            rows.append(row)
            print(
                f"k={k} ({row['hosts']} hosts, {flows} flows): peak RSS {res['old'][0] / 2**20:.0f} -> "
                f"{res['new'][0] / 2**20:.0f} MiB (new/old {row['rss_ratio']:.3f}), bytes/flow "
                f"{row['old_bytes_per_flow']:.0f} -> {row['new_bytes_per_flow']:.0f}; CPU "
                f"{res['old'][1]:.1f} -> {res['new'][1]:.1f} s (new/old {row['cpu_ratio']:.3f}); "
                f"output {'identical' if same else 'DIFFERENT'}",
                flush=True,
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    sys.exit(0 if all(r["identical"] for r in rows) else 1)


if __name__ == "__main__":
    main()
