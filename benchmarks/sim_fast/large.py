"""`fidelity = "fast"` beside packet level on one large fat-tree (issue 32's job at k^3/4
hosts), both on `--threads`, and the error on the sampled servers and the whole job.

run.py keeps every row in memory and runs one thread; this streams flows.csv, for runs of
millions of flows (k = 20: 15.3 M flows, ~25 minutes of CPU and 9.5 GB at packet level).

    python3 benchmarks/sim_fast/large.py --k 20 --out /tmp/k20
"""

import argparse
import csv
import importlib.util
import json
import os
import subprocess
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(ROOT, "benchmarks", "sim_memory", "ft1024.toml")
# the k-ary job's --set arguments, as sim_threads runs them
_spec = importlib.util.spec_from_file_location(
    "sim_threads_run", os.path.join(ROOT, "benchmarks", "sim_threads", "run.py")
)
sim_threads = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim_threads)


def simulate(binary, k, threads, fidelity, out):
    args = ["/usr/bin/time", "-f", "%U %S %e %M", "-o", out + ".time", binary, SCENARIO, "--out", out, "--quiet"]
    args += sim_threads.overrides(k, threads) + ["--set", f"fidelity={fidelity}"]
    subprocess.run(args, check=True)
    user, sys_, wall, rss_kb = open(out + ".time").read().split()[-4:]
    return {"cpu_s": float(user) + float(sys_), "wall_s": float(wall), "rss_mb": int(rss_kb) / 1024}


def metrics(fct, finish, rtos):
    fct = sorted(fct)
    n = len(fct)
    return {
        "mean_ms": sum(fct) / n / 1e6,
        "p50_ms": fct[(n + 1) // 2 - 1] / 1e6,
        "p99_ms": fct[-(-99 * n // 100) - 1] / 1e6,
        "iteration_ms": finish / 1e6,
        "rtos": rtos,
    }


def read(out, servers=None):
    """Metrics of a run's flows (of those whose server is in `servers`, if given), and each
    server's last finish."""
    fct, finish, rtos, last = array("q"), 0, 0, {}
    with open(os.path.join(out, "flows.csv")) as f:
        for r in csv.DictReader(f):
            server = int(r["src"] if r["pull"] == "1" else r["dst"])
            end = int(r["finish_ns"])
            last[server] = max(last.get(server, 0), end)
            if servers is None or server in servers:
                fct.append(int(r["fct_ns"]))
                finish = max(finish, end)
                rtos += int(r["timeouts"])
    return fct, finish, rtos, last


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "gradwire-sim"))
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="/tmp/sim-fast-large")
    a = ap.parse_args()
    fast_out, packet_out = a.out + "-fast", a.out + "-packet"
    cost = {
        "fast": simulate(a.bin, a.k, a.threads, "fast", fast_out),
        "packet": simulate(a.bin, a.k, a.threads, "packet", packet_out),
    }
    sample = json.load(open(os.path.join(fast_out, "summary.json")))["fast"]
    servers = set(sample["servers"])
    fct, finish, rtos, _ = read(fast_out)
    fast = metrics(fct, finish, rtos)
    fct, finish, rtos, _ = read(packet_out, servers)
    same = metrics(fct, finish, rtos)
    fct, finish, rtos, last = read(packet_out)
    job = metrics(fct, finish, rtos)
    del fct
    scale = sample["of"] / len(servers)
    print(f"k = {a.k}: {len(servers)} of {sample['of']} servers, threads = {a.threads}")
    for side, c in cost.items():
        print(f"  {side:6s} CPU {c['cpu_s']:8.1f} s  wall {c['wall_s']:7.1f} s  peak RSS {c['rss_mb']:8.0f} MB")
    print(f"{'':13s} {'fast':>10s} {'same servers':>22s} {'whole job':>22s}")
    for key in fast:
        as_job = fast[key] * scale if key == "rtos" else fast[key]
        print(
            f"{key:13s} {fast[key]:10.2f} {same[key]:12.2f} ({(fast[key] / same[key] - 1) * 100:+6.1f} %)"
            f" {job[key]:12.2f} ({(as_job / job[key] - 1) * 100:+6.1f} %)"
        )
    ends = sorted(last.values())
    first, median, final = ends[0] / 1e6, ends[len(ends) // 2] / 1e6, ends[-1] / 1e6
    sampled = max(last[s] for s in servers) / 1e6
    print(
        f"servers' last finish at packet level (ms): first {first:.0f}, median {median:.0f}, "
        f"last {final:.0f}; the sample's last {sampled:.0f}"
    )


if __name__ == "__main__":
    main()
