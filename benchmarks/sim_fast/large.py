"""`fidelity = "fast"` beside packet level on one large fat-tree (issue 32's job at k^3/4
hosts), both on `--threads`, and the error on the sampled servers and the whole job.

run.py keeps every row in memory and runs one thread; this streams flows.csv, for runs of
millions of flows (k = 20: 15.3 M flows, ~25-32 minutes of CPU and 8.7-9.5 GB at packet
level). One packet-level run serves any number of samples (`--offsets`: which of the `m`
interleaved samples, `fast.offset`), each compared with packet level's flows of its own
servers, then all of them pooled, so a rare event one sample misses (a server's RTO chain)
can be told from a bias of the mode. `--packet DIR` reuses a packet-level run's output.
`--by-layer` also prints each spread layer's push mean FCT and flows with an RTO against
packet level's, beside another packet-level run's (`--noise DIR`, another seed) as the
yardstick: the job-wide figures can hold while layers are off both ways.

    python3 benchmarks/sim_fast/large.py --k 20 --out /tmp/k20
    python3 benchmarks/sim_fast/large.py --k 20 --packet /tmp/k20-packet --servers 25 --offsets 0,1,2,3
    python3 benchmarks/sim_fast/large.py --k 16 --servers 32 --by-layer --noise /tmp/k16-seed2
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


def simulate(binary, k, threads, sets, out):
    args = ["/usr/bin/time", "-f", "%U %S %e %M", "-o", out + ".time", binary, SCENARIO, "--out", out, "--quiet"]
    args += sim_threads.overrides(k, threads) + [a for s in sets for a in ("--set", s)]
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


class Servers:
    """A run's flows by server: FCTs, last finish and RTOs."""

    def __init__(self, out):
        self.fct, self.last, self.rtos = {}, {}, {}
        # pushes by (server, layer): flows, summed FCT (ns), flows with an RTO, bytes
        self.pushes = {}
        with open(os.path.join(out, "flows.csv")) as f:
            for r in csv.DictReader(f):
                server = int(r["src"] if r["pull"] == "1" else r["dst"])
                if server not in self.fct:
                    self.fct[server], self.last[server], self.rtos[server] = array("q"), 0, 0
                fct, timeouts = int(r["fct_ns"]), int(r["timeouts"])
                self.fct[server].append(fct)
                self.last[server] = max(self.last[server], int(r["finish_ns"]))
                self.rtos[server] += timeouts
                if r["pull"] == "0":
                    p = self.pushes.setdefault((server, int(r["layer"])), [0, 0, 0, int(r["size_bytes"])])
                    p[0] += 1
                    p[1] += fct
                    p[2] += timeouts > 0

    def of(self, servers):
        """Metrics of the flows of `servers` (those of the run that exist)."""
        servers = [s for s in servers if s in self.fct]
        fct = array("q")
        for s in servers:
            fct.extend(self.fct[s])
        return metrics(fct, max(self.last[s] for s in servers), sum(self.rtos[s] for s in servers))

    def layers(self, servers):
        """Per layer spread over every one of `servers` (each has its pushes): push mean
        FCT (ms), flows with an RTO and a push's bytes."""
        by = {}
        for (server, layer), p in self.pushes.items():
            if server in servers:
                by.setdefault(layer, []).append(p)
        return {
            layer: (sum(p[1] for p in ps) / sum(p[0] for p in ps) / 1e6, sum(p[2] for p in ps), ps[0][3])
            for layer, ps in by.items()
            if len(ps) == len(servers)
        }

    def ends_ms(self, servers):
        """The servers' last finishes, latest first."""
        return sorted((self.last[s] / 1e6 for s in servers if s in self.last), reverse=True)


def job_estimate(fast):
    """The job's flows as a run with every server's whole tensors estimates them
    (summary.json's `fast.job_*`)."""
    return {
        "mean_ms": fast["job_fct_mean_ns"] / 1e6,
        "p50_ms": fast["job_fct_p50_ns"] / 1e6,
        "p99_ms": fast["job_fct_p99_ns"] / 1e6,
        "iteration_ms": fast["job_iteration_ns"] / 1e6,
        "rtos": fast["job_timeouts"],
    }


def error(a, b):
    return (a / b - 1) * 100


def report(label, fast, same, job=None, scale=1):
    print(f"{label}: {'fast':>10s} {'same servers':>22s}" + (f" {'whole job':>22s}" if job else ""))
    for key in fast:
        line = f"  {key:13s} {fast[key]:10.2f} {same[key]:12.2f} ({error(fast[key], same[key]):+6.1f} %)"
        if job:
            as_job = fast[key] * scale if key == "rtos" else fast[key]
            line += f" {job[key]:12.2f} ({error(as_job, job[key]):+6.1f} %)"
        print(line)


def by_layer(servers, fast, packet, noise):
    """Each spread layer's push mean FCT and RTO flows, fast and `noise` against packet level."""
    f, p = fast.layers(servers), packet.layers(servers)
    n = noise.layers(servers) if noise else {}
    print(
        f"  {'layer':>5s} {'kB':>6s} {'push mean FCT, fast':>24s} {'RTO flows, fast':>22s}"
        + ("   another seed: FCT, RTO flows" if n else "")
    )
    for layer in sorted(p.keys() & f.keys()):
        (fm, fr, _), (pm, pr, size) = f[layer], p[layer]
        line = f"  {layer:5d} {size / 1e3:6.1f} {fm:8.2f} ms ({error(fm, pm):+6.1f} %) {fr:9d} ({error(fr, pr) if pr else 0.0:+6.1f} %)"
        if layer in n:
            nm, nr, _ = n[layer]
            line += f"   {error(nm, pm):+6.1f} %, {error(nr, pr) if pr else 0.0:+6.1f} %"
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "gradwire-sim"))
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="/tmp/sim-fast-large")
    ap.add_argument("--servers", type=int, help="fast.servers (default: the mode's own)")
    ap.add_argument("--offsets", default="0", help="fast.offset of each sample, comma-separated")
    ap.add_argument("--packet", help="a packet-level run's --out to reuse instead of running one")
    ap.add_argument("--set", action="append", default=[], help="a --set for every run, e.g. fast.unvalidated=true")
    ap.add_argument("--by-layer", action="store_true", help="each spread layer's push mean FCT and RTO flows")
    ap.add_argument("--noise", help="with --by-layer: another packet-level run (another seed) to print beside")
    a = ap.parse_args()
    offsets = [int(o) for o in a.offsets.split(",")]
    cost, runs = {}, []
    for offset in offsets:
        out = f"{a.out}-fast{offset}"
        sets = a.set + ["fidelity=fast", f"fast.offset={offset}"]
        sets += [f"fast.servers={a.servers}"] if a.servers else []
        cost[f"fast {offset}"] = simulate(a.bin, a.k, a.threads, sets, out)
        runs.append(out)
    packet_out = a.packet or a.out + "-packet"
    if not a.packet:
        cost["packet"] = simulate(a.bin, a.k, a.threads, a.set + ["fidelity=packet"], packet_out)
    packet = Servers(packet_out)
    noise = Servers(a.noise) if a.by_layer and a.noise else None
    job = packet.of(packet.fct)
    print(f"k = {a.k}, threads = {a.threads}")
    for side, c in cost.items():
        print(f"  {side:8s} CPU {c['cpu_s']:8.1f} s  wall {c['wall_s']:7.1f} s  peak RSS {c['rss_mb']:8.0f} MB")
    pooled_fast, pooled_same, every = array("q"), array("q"), []
    iterations, rtos = [[], []], [0, 0]
    for offset, out in zip(offsets, runs):
        sample = json.load(open(os.path.join(out, "summary.json")))["fast"]
        servers = sample["servers"]
        fast = Servers(out)
        f, s = fast.of(servers), packet.of(servers)
        report(
            f"offset {offset}, {len(servers)} of {sample['of']} servers",
            f,
            s,
            job,
            sample["of"] / len(servers),
        )
        estimate = json.load(open(os.path.join(out, "summary.json")))["fast"]
        if "job_fct_mean_ns" in estimate:
            est = job_estimate(estimate)
            print("  the job as the run estimates it (fast.job_*) against packet level's:")
            for key in est:
                print(f"    {key:13s} {est[key]:10.2f} {job[key]:12.2f} ({error(est[key], job[key]):+6.1f} %)")
        top_fast = ", ".join(f"{t:.0f}" for t in fast.ends_ms(servers)[:3])
        top_packet = ", ".join(f"{t:.0f}" for t in packet.ends_ms(servers)[:3])
        print(f"  its servers' last finishes (ms), latest three: fast {top_fast}; packet level {top_packet}")
        if a.by_layer:
            by_layer(set(servers), fast, packet, noise)
        for server in servers:
            pooled_fast.extend(fast.fct.get(server, ()))
            pooled_same.extend(packet.fct.get(server, ()))
        every += servers
        iterations[0].append(f["iteration_ms"])
        iterations[1].append(s["iteration_ms"])
        rtos[0] += f["rtos"]
        rtos[1] += s["rtos"]
    if len(runs) > 1:
        # per flow over every sample's flows; iteration: the samples' mean
        f = metrics(pooled_fast, sum(iterations[0]) / len(runs) * 1e6, rtos[0])
        s = metrics(pooled_same, sum(iterations[1]) / len(runs) * 1e6, rtos[1])
        report(f"{len(runs)} samples pooled ({len(every)} servers; iteration: their mean)", f, s)
    ends = packet.ends_ms(packet.fct)
    print(
        f"servers' last finish at packet level (ms): last {ends[0]:.0f}, median {ends[len(ends) // 2]:.0f}, "
        f"first {ends[-1]:.0f}; the samples' last {max(packet.ends_ms(every)):.0f}"
    )


if __name__ == "__main__":
    main()
