"""How much any tuner can gain over BO's static choice in Fig. 6 (ResNet50, PS, 8 workers,
host bandwidth 10 ↔ 3 Gbit/s in equal phases), per calibration of the per-partition costs.

For each calibration: the grid optimum at 10 and at 3 Gbit/s (fresh jobs, as
``grid_optimum``), the 10 Gbit/s optimum (what BO, tuned at 10 Gbit/s, converges to) and
its speed at 3 Gbit/s, the gain of the 3 Gbit/s optimum over it in the 3 Gbit/s phases, and
two bounds on a tuner's mean-speed gain (the per-iteration mean of Fig. 6, equal phases): the per-phase optimum over the 10 Gbit/s optimum kept throughout
(BO at its best), over BO's own choice (20 trials at 10 Gbit/s, seed 0, as Fig. 6 runs it)
and over the best static configuration for both phases; and the first
bound on samples over wall time instead (the harmonic mean, which weighs the slow phases by
their longer duration). A configuration whose job stalls counts as 0. Prints markdown and
writes ``bound.csv`` and ``bound.png`` (the bounds beside the target) into ``--out``.

    python benchmarks/autobyte_fig6_bound/run.py [--jobs 2] [--calibrations NAME,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from gradwire.tune.online import bo_choice
from gradwire.tune.simjob import JobSpec, measure
from gradwire.tune.space import MB, Candidate, grid

#: name → the bytesched keys it sets (the rest at their defaults)
CALIBRATIONS: dict[str, dict] = {
    "default (200 µs overhead, 100 µs latency)": {},
    "overhead 400 µs (Fig. 3(b)'s bound)": {"partition_overhead_us": 400.0},
    "overhead 1 ms": {"partition_overhead_us": 1000.0},
    "overhead 2 ms": {"partition_overhead_us": 2000.0},
    "overhead 4 ms": {"partition_overhead_us": 4000.0},
    "overhead 6.4 ms (Fig. 6's 8 MB at 10G)": {"partition_overhead_us": 6400.0},
    "latency 1 ms": {"partition_latency_us": 1000.0},
    "latency 3 ms": {"partition_latency_us": 3000.0},
    "latency 6.4 ms": {"partition_latency_us": 6400.0},
    # Fig. 6's optima read as a fixed hold per partition: its credits span (k-1)·S_p/B =
    # 12.8 ms at 10 Gbit/s (⟨8 MB, 3×⟩) and 10.7 ms at 3 Gbit/s (⟨4 MB, 2×⟩); a serial
    # overhead that S_p/B just covers is 6.4 ms (8 MB at 10) to 10.7 ms (4 MB at 3)
    "latency 12 ms (Fig. 6's credits)": {"partition_latency_us": 12000.0},
    "overhead 6.4 ms, latency 12 ms (Fig. 6's optima)": {
        "partition_overhead_us": 6400.0,
        "partition_latency_us": 12000.0,
    },
    "overhead 400 µs, latency 12 ms (Fig. 3(b)'s bound, Fig. 6's credits)": {
        "partition_overhead_us": 400.0,
        "partition_latency_us": 12000.0,
    },
    "overhead 2 ms, latency 3 ms": {"partition_overhead_us": 2000.0, "partition_latency_us": 3000.0},
    # the PS server's own per-push work, serial per server; Fig. 3(b) bounds it as it does
    # the worker's overhead (a server takes pushes at B/S_p: 0.4 ms for 1 MB at 20 Gbit/s)
    "server 400 µs per push (Fig. 3(b)'s bound)": {"ps_server_overhead_us": 400.0},
    "server 2 ms per push": {"ps_server_overhead_us": 2000.0},
    "server 6.4 ms per push (Fig. 6's 8 MB at 10G)": {"ps_server_overhead_us": 6400.0},
    "every partition above 1 MB striped (`ps_split_bytes` 1 MB)": {"ps_split_bytes": 1_000_000},
    # a fork of ByteScheduler's MXNet plugin stripes every partition over all servers
    "every partition striped (`ps_split_bytes` 1, as the fork)": {"ps_split_bytes": 1},
    "every partition striped, latency 12 ms": {"ps_split_bytes": 1, "partition_latency_us": 12000.0},
    "every partition striped, aggregated credit": {"ps_split_bytes": 1, "ps_credit": "aggregated"},
    # 3 Gbit/s is no Ethernet link speed: the paper limited its 100 Gbit/s NICs' egress
    "egress shaped, 100 Gbit/s ports": {"shaping": "egress"},
    "egress shaped, latency 1 ms": {"shaping": "egress", "partition_latency_us": 1000.0},
    "egress shaped, overhead 400 µs": {"shaping": "egress", "partition_overhead_us": 400.0},
    "egress shaped, server 400 µs per push": {"shaping": "egress", "ps_server_overhead_us": 400.0},
    "egress shaped, every partition striped": {"shaping": "egress", "ps_split_bytes": 1},
    "egress shaped, aggregated credit": {"shaping": "egress", "ps_credit": "aggregated"},
    # compute per iteration is the other time that does not scale with 1/B: a batch or a
    # GPU the paper does not state moves the compute/communication ratio of both phases
    **{
        f"compute x{f:g} (batch or GPU)": {
            "slowdowns": [{"worker": w, "from_iteration": 0, "factor": f} for w in range(8)]
        }
        for f in (0.5, 2.0, 3.0, 4.0, 6.0, 8.0)
    },
    "aggregated credit": {"ps_credit": "aggregated"},
    "aggregated credit, latency 1 ms": {"ps_credit": "aggregated", "partition_latency_us": 1000.0},
    "aggregated credit, latency 3 ms": {"ps_credit": "aggregated", "partition_latency_us": 3000.0},
    "aggregated credit, overhead 400 µs": {"ps_credit": "aggregated", "partition_overhead_us": 400.0},
}


def _speeds(args: tuple[dict, float]) -> dict[Candidate, float]:
    extra, gbps = args
    spec = JobSpec("resnet50", "ps", 8, gbps, extra)
    return {c: _measure_or_stall(spec, c) for c in grid()}


def _bo(extra: dict) -> Candidate | None:
    """ByteScheduler's BO at 10 Gbit/s (20 trials, seed 0, as Fig. 6); None if a trial stalls."""
    try:
        return bo_choice(JobSpec("resnet50", "ps", 8, 10.0, extra), grid())[0]
    except RuntimeError as e:
        if "stalled" not in str(e):
            raise
        return None


def _measure_or_stall(spec: JobSpec, c: Candidate) -> float:
    """A configuration whose job stalls (windows deadlocked) counts as 0 samples/s."""
    try:
        return measure(spec, c)
    except RuntimeError as e:
        if "stalled" not in str(e):
            raise
        return 0.0


def bound(name: str, s10: dict[Candidate, float], s3: dict[Candidate, float], bo: Candidate | None) -> dict:
    """One calibration's optima and bounds (percent gains of a per-phase tuner)."""
    o10 = max(s10, key=s10.get)
    o3 = max(s3, key=s3.get)
    static = max(s10, key=lambda c: s10[c] + s3[c])
    per_phase = s10[o10] + s3[o3]

    # a job's samples over its wall time (equal phases): the harmonic mean of the speeds
    def timed(a: float, b: float) -> float:
        return 2 / (1 / a + 1 / b) if a and b else 0.0

    paper = Candidate(8 * MB, 3), Candidate(4 * MB, 2)
    return {
        "calibration": name,
        "stalls": sum(v == 0.0 for v in s10.values()) + sum(v == 0.0 for v in s3.values()),
        "optimum_10g": o10,
        "optimum_10g_speed": s10[o10],
        "optimum_3g": o3,
        "optimum_3g_speed": s3[o3],
        "optimum_10g_at_3g": s3[o10],
        "best_static": static,
        "paper_10g_of_optimum_pct": 100 * s10[paper[0]] / s10[o10],
        "paper_3g_of_optimum_pct": 100 * s3[paper[1]] / s3[o3],
        "gain_3g_phases_pct": 100 * (s3[o3] / s3[o10] - 1),
        "bound_vs_bo_pct": 100 * (per_phase / (s10[o10] + s3[o10]) - 1),
        "bo_choice": bo,
        "bound_vs_bo_choice_pct": None if bo is None else 100 * (per_phase / (s10[bo] + s3[bo]) - 1),
        "bound_vs_static_pct": 100 * (per_phase / (s10[static] + s3[static]) - 1),
        "bound_vs_bo_wall_time_pct": 100 * (timed(s10[o10], s3[o3]) / timed(s10[o10], s3[o10]) - 1),
    }


def markdown_row(r: dict) -> str:
    stalls = f" ({r['stalls']} of 128 stall)" if r["stalls"] else ""
    own = "—" if r["bo_choice"] is None else f"{r['bo_choice']}: {r['bound_vs_bo_choice_pct']:+.1f} %"
    return (
        f"| {r['calibration']}{stalls} | {r['optimum_10g']} {r['optimum_10g_speed']:.0f} | "
        f"{r['optimum_3g']} {r['optimum_3g_speed']:.0f} | {r['optimum_10g_at_3g']:.0f} | {r['best_static']} | "
        f"{r['paper_10g_of_optimum_pct']:.1f} / {r['paper_3g_of_optimum_pct']:.1f} % | "
        f"{r['gain_3g_phases_pct']:+.1f} % | {r['bound_vs_bo_pct']:+.1f} % | {own} | "
        f"{r['bound_vs_static_pct']:+.1f} % | {r['bound_vs_bo_wall_time_pct']:+.1f} % |"
    )


def write(rows: list[dict], out: Path) -> None:
    """bound.csv (one row per calibration) and bound.png (the bounds beside the target)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "bound.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows({k: str(v) if isinstance(v, Candidate) else v for k, v in r.items()} for r in rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.6))
    y = range(len(rows))
    ax.barh([i - 0.2 for i in y], [r["bound_vs_bo_pct"] for r in rows], 0.4, label="vs BO at its best")
    ax.barh(
        [i + 0.2 for i in y],
        [r["bound_vs_bo_choice_pct"] or 0.0 for r in rows],
        0.4,
        label="vs BO's own choice (20 trials, seed 0)",
    )
    ax.axvline(6.0, color="red", linestyle="--", label="target: +6 %")
    ax.set_yticks(list(y), [r["calibration"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("bound on a per-phase tuner's mean-speed gain over BO (%)")
    ax.set_title("Fig. 6 (10 ↔ 3 Gbit/s): what any tuner can gain, per calibration")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "bound.png", dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--calibrations", default=None, help="comma-separated names' prefixes; default: all")
    ap.add_argument("--out", type=Path, default=Path("results/autobyte_fig6_bound"), help="bound.csv, bound.png")
    a = ap.parse_args()
    cals = CALIBRATIONS
    if a.calibrations:
        wanted = a.calibrations.split(",")
        cals = {k: v for k, v in cals.items() if any(k.startswith(w) for w in wanted)}
    print(
        "| calibration | optimum at 10G (samples/s) | optimum at 3G | 10G optimum at 3G | best static | "
        "paper's ⟨8,3⟩ at 10G / ⟨4,2⟩ at 3G, of the optimum | 3G phases: optimum over the 10G one | "
        "bound vs BO (10G optimum kept) | BO's own choice (20 trials at 10G), bound vs it | "
        "bound vs best static | bound vs BO, samples over wall time |"
    )
    print("|---|---|---|---:|---|---:|---:|---:|---|---:|---:|")
    rows = []
    with ProcessPoolExecutor(a.jobs) as pool:
        for name, extra in cals.items():
            bo = pool.submit(_bo, extra)
            s10, s3 = pool.map(_speeds, [(extra, 10.0), (extra, 3.0)])
            rows.append(bound(name, s10, s3, bo.result()))
            print(markdown_row(rows[-1]), flush=True)
    if rows:
        write(rows, a.out)
        print(f"wrote {a.out / 'bound.csv'} and {a.out / 'bound.png'}")


if __name__ == "__main__":
    main()
