#!/usr/bin/env python3
"""`fidelity = "fast"` beside packet level, one run each, on issue 32's datacenter
scenario (benchmarks/sim_memory/ft1024.toml: a fat-tree of k^3/4 hosts, ResNet50 through
dedicated parameter servers, workers and servers 3:1) and its variants.

Per case it prints each run's CPU (user + sys), peak RSS and events, and the fast run's
error in mean, p50 and p99 FCT, iteration time and RTOs, twice: against packet level's
flows of the same servers (what the fast mode claims to reproduce: the servers' own
runs) and against packet level's whole job (what a user reading the fast run's summary
gets: a job's iteration is its slowest server's, and a sample's slowest server is
faster; with every server's whole tensors kept, `variant keep` or DLCP's default, the run
estimates the job's iteration and flows itself, `summary.json`'s `fast.job_*`, and the
whole-job column compares those, each seed's against packet level's of the same seed,
averaged over the seeds). RTOs are scaled by S / n for the whole job. A few servers' flows are noisy (at
k = 8, packet level's mean FCT of 4 servers moves 16 % from seed 1 to seed 2), so every
number pools --seeds, and the last column is packet level's own spread over them on the
same servers (largest minus smallest seed, over the pooled value): an error inside it is
noise.

    python3 benchmarks/sim_fast/run.py [--bin target/release/gradwire-sim] [--k 8]
        [--servers 8,4] [--cases dctcp,dlcp,loss] [--seeds 1,2,3]
        [--variants default,stretch,fluid1,fluid10] [--json results.json]

k = 8 takes ~40 s of CPU at packet level; k = 12 ~2.5 min; k = 16 (the 1 024-host
original) ~8-15 min.
"""

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCENARIO = os.path.join(ROOT, "benchmarks", "sim_memory", "ft1024.toml")
VARIANTS = {
    "default": [],
    "stretch": ["fast.phantom=stretch"],
    "fluid1": ["fast.phantom=fluid", "fast.phantom_tau_us=1"],
    "fluid10": ["fast.phantom=fluid", "fast.phantom_tau_us=10"],
    "fluid100": ["fast.phantom=fluid", "fast.phantom_tau_us=100"],
    "whole": ["fast.phantom=stretch", "fast.weigh_whole_tensors=true"],
    "charge": ["fast.charge_buffer=true"],
    # the phantom on the workers' host links only, none at the switches
    "hostlinks": ["fast.weigh_core=false"],
    # every server's whole tensors simulated, only the sample's reported (DLCP's default)
    "keep": ["fast.keep_whole_tensors=true"],
    "nokeep": ["fast.keep_whole_tensors=false"],
    # the other servers' whole tensors as a scale model: one in m workers, links at 1/m
    "thin": ["fast.thin_whole_tensors=true"],
    # the same with a thinned flow standing for so many workers (by default m, at most 10)
    "thin8": ["fast.thin_whole_tensors=true", "fast.thin_by=8"],
    "thin16": ["fast.thin_whole_tensors=true", "fast.thin_by=16"],
}
CASES = {
    "dctcp": [],
    "dlcp": ["transport.kind=dlcp", "switch.policy=dlcp", "switch.queues=8"],
    "loss": ["topology.link_loss_rate=0.0001"],
    "ltp": ["transport.kind=ltp"],
    # kind newreno grows its window by CUBIC under the default baseline ("modern", Linux's
    # defaults); "reno" is RFC 5681's growth
    "cubic": ["transport.kind=newreno", "transport.tcp_cc=cubic"],
    "reno": ["transport.kind=newreno", "transport.tcp_cc=reno"],
    "spray": ["routing.mode=spray"],
    # every host a worker, every fourth a server too
    "colocated": ["workload.colocated=true"],
    # 128 hosts only (--k 8): 8 racks of 16 with 16 uplinks (1:1) or 4 (4:1, the core
    # congests; refused without fast.unvalidated, which the benchmark sets)
    "leafspine": [
        "topology.kind=leaf_spine",
        "topology.leaves=8",
        "topology.hosts_per_leaf=16",
        "topology.spines=4",
        "topology.uplinks_per_leaf=16",
    ],
    "leafspine4": [
        "topology.kind=leaf_spine",
        "topology.leaves=8",
        "topology.hosts_per_leaf=16",
        "topology.spines=4",
        "topology.uplinks_per_leaf=4",
    ],
    # a ring allreduce has no servers to sample: the fast mode refuses it, and the table says so
    "ring": ["workload.pattern=ring"],
}


def command(binary, k, case, extra, out, seed):
    """gradwire-sim on the k-ary fat-tree's job (workers and servers 3:1; colocated: every
    host a worker) with the case's and `extra`'s keys."""
    hosts = k**3 // 4
    workers = hosts if "workload.colocated=true" in CASES[case] else hosts * 3 // 4
    sets = [f"topology.k={k}", f"workload.workers={workers}", f"workload.servers={hosts // 4}"]
    args = [binary, SCENARIO, "--out", out, "--quiet", "--seed", str(seed)]
    for s in [*sets, *CASES[case], *extra]:
        args += ["--set", s]
    return args


def refusal(binary, k, case, extra, out):
    """The fast mode's refusal of the case (its message), or None: what a run that stops at
    once prints when it is refused (construction refuses before simulating)."""
    args = command(binary, k, case, [*extra, "stop_ms=0.001"], out, 1)
    done = subprocess.run(args, capture_output=True, text=True)
    return done.stderr.strip().splitlines()[-1].split(".toml: ", 1)[-1] if done.returncode else None


def run(binary, k, case, extra, out, seed):
    args = command(binary, k, case, extra, out, seed)
    before, began = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out + ".rss", *args], check=True)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - began
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(out + ".rss") as f:
        rss_mb = int(f.read().split()[-1]) / 1024
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(out, "flows.csv")) as f:
        rows = list(csv.DictReader(f))
    return {
        "cpu_s": cpu,
        "rss_mb": rss_mb,
        "wall_s": wall,
        "events": summary["events"],
        "summary": summary,
        "rows": rows,
    }


def pooled(binary, k, case, extra, out, seeds):
    """One run per seed: CPU, RSS and events summed / maxed, each run's rows kept apart."""
    runs = [run(binary, k, case, extra, f"{out}-s{seed}", seed) for seed in seeds]
    return {
        "cpu_s": sum(r["cpu_s"] for r in runs),
        "rss_mb": max(r["rss_mb"] for r in runs),
        "events": sum(r["events"] for r in runs),
        "summary": runs[0]["summary"],
        "summaries": [r["summary"] for r in runs],
        "seeds": [r["rows"] for r in runs],
    }


def server_of(row):
    return int(row["src"] if row["pull"] == "1" else row["dst"])


def metrics(rows):
    fct = sorted(int(r["fct_ns"]) for r in rows if r["fct_ns"])
    return {
        "mean_ms": statistics.mean(fct) / 1e6,
        "p50_ms": fct[(len(fct) + 1) // 2 - 1] / 1e6,
        "p99_ms": fct[-(-99 * len(fct) // 100) - 1] / 1e6,
        "iteration_ms": max(int(r["finish_ns"]) for r in rows if r["finish_ns"]) / 1e6,
        "rtos": sum(int(r["timeouts"]) for r in rows),
    }


def pool(seeds, keep=lambda r: True):
    """Metrics of every seed's kept rows together; the iteration is the seeds' mean."""
    kept = [[r for r in rows if keep(r)] for rows in seeds]
    m = metrics([r for rows in kept for r in rows])
    m["iteration_ms"] = statistics.mean(metrics(rows)["iteration_ms"] for rows in kept)
    return m, [metrics(rows) for rows in kept]


def compare(packet, fast):
    sample = fast["summary"]["fast"]
    servers = set(sample["servers"])
    same, per_seed = pool(packet["seeds"], lambda r: server_of(r) in servers)
    whole, _ = pool(packet["seeds"])
    got, _ = pool(fast["seeds"])
    scaled = dict(got, rtos=got["rtos"] * sample["of"] / len(servers))
    # with every server's whole tensors kept, the run estimates the job's iteration itself,
    # and its flows' figures (each spread shard weighted by the servers it stands for): those
    # are set against packet level's per seed, both averaged over the seeds
    job = [s["fast"].get("job_iteration_ns") for s in fast["summaries"]]
    if all(job):
        scaled["iteration_ms"] = statistics.mean(job) / 1e6
    estimates = [s["fast"] for s in fast["summaries"]]
    if all("job_fct_mean_ns" in x for x in estimates):
        per = [metrics(rows) for rows in packet["seeds"]]
        whole = {k: statistics.mean(p[k] for p in per) for k in per[0]}
        avg = lambda key, unit=1e6: statistics.mean(x[key] for x in estimates) / unit  # noqa: E731
        scaled = dict(scaled, mean_ms=avg("job_fct_mean_ns"), p50_ms=avg("job_fct_p50_ns"))
        scaled = dict(scaled, p99_ms=avg("job_fct_p99_ns"), rtos=avg("job_timeouts", 1))
    err = lambda ref, val: {k: (val[k] / ref[k] - 1) * 100 if ref[k] else 0.0 for k in ref}  # noqa: E731
    spread = {
        k: (max(m[k] for m in per_seed) - min(m[k] for m in per_seed)) / same[k] * 100 if same[k] else 0.0 for k in same
    }
    per_seed = lambda seeds, keep=lambda r: True: [  # noqa: E731
        metrics([r for r in rows if keep(r)])["iteration_ms"] for rows in seeds
    ]
    return {
        "iteration_per_seed_ms": {
            "packet_job": per_seed(packet["seeds"]),
            "packet_same_servers": per_seed(packet["seeds"], lambda r: server_of(r) in servers),
            "fast": per_seed(fast["seeds"]),
            "fast_job": [j / 1e6 if j else None for j in job],
        },
        "servers": f"{len(servers)} of {sample['of']}",
        "cpu_ratio": fast["cpu_s"] / packet["cpu_s"],
        "rss_ratio": fast["rss_mb"] / packet["rss_mb"],
        "events_ratio": fast["events"] / packet["events"],
        "fast": got,
        "same_servers": same,
        "whole_job": whole,
        "error_same_servers_pct": err(same, got),
        "error_whole_job_pct": err(whole, scaled),
        "packet_seed_spread_pct": spread,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "gradwire-sim"))
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--servers", default="8,4", help="fast.servers values, comma-separated")
    ap.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--variants", default="default", help=f"of {', '.join(VARIANTS)}")
    ap.add_argument("--json", help="write every number here")
    a = ap.parse_args()
    seeds = [int(x) for x in a.seeds.split(",")]
    results, refused = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for case in a.cases.split(","):
            why = refusal(a.bin, a.k, case, ["fidelity=fast", "fast.unvalidated=true"], os.path.join(tmp, "check"))
            if why is not None:
                refused.append((case, why))
                continue
            print(f"k = {a.k}, {case}: packet level, seeds {a.seeds} ...", file=sys.stderr, flush=True)
            packet = pooled(a.bin, a.k, case, [], os.path.join(tmp, f"{case}-packet"), seeds)
            for variant in a.variants.split(","):
                for n in a.servers.split(","):
                    print(f"k = {a.k}, {case}: fast ({variant}), {n} servers ...", file=sys.stderr, flush=True)
                    extra = ["fidelity=fast", "fast.unvalidated=true", f"fast.servers={n}", *VARIANTS[variant]]
                    fast = pooled(a.bin, a.k, case, extra, os.path.join(tmp, f"{case}-{variant}-{n}"), seeds)
                    r = compare(packet, fast)
                    r.update(case=case, variant=variant, k=a.k, seeds=seeds)
                    r.update(packet_cpu_s=packet["cpu_s"], fast_cpu_s=fast["cpu_s"])
                    results.append(r)
    keys = ("mean_ms", "p50_ms", "p99_ms", "iteration_ms", "rtos")
    print(
        "| case | fast | servers | CPU fast/packet | RSS | error vs same servers: mean / p50 / p99 / iteration / RTOs "
        "| vs whole job | packet level's seed spread, same servers |"
    )
    print("|---|---|---|---:|---:|---|---|---|")
    for r in results:
        fmt = lambda e: " / ".join(f"{e[k]:+.1f} %" for k in keys)  # noqa: E731
        spread = " / ".join(f"{r['packet_seed_spread_pct'][k]:.0f} %" for k in keys)
        print(
            f"| k={r['k']} {r['case']} | {r['variant']} | {r['servers']} | {r['cpu_ratio']:.3f} | {r['rss_ratio']:.2f} "
            f"| {fmt(r['error_same_servers_pct'])} | {fmt(r['error_whole_job_pct'])} | {spread} |"
        )
    for case, why in refused:
        print(f"| k={a.k} {case} | refused: {why} |")
    print(
        "\niteration per seed (ms): packet level's job | packet level on the sampled servers | fast"
        " | fast's estimate of the job's (with every server's whole tensors)"
    )
    for r in results:
        it = r["iteration_per_seed_ms"]
        cols = " | ".join(" / ".join(f"{v:.0f}" for v in it[k]) for k in ("packet_job", "packet_same_servers", "fast"))
        job = " / ".join("-" if v is None else f"{v:.0f}" for v in it["fast_job"])
        print(f"k={r['k']} {r['case']} {r['variant']} {r['servers']}: {cols} | {job}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results + [{"case": c, "k": a.k, "refused": why} for c, why in refused], f, indent=1)


if __name__ == "__main__":
    main()
