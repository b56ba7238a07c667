"""The two per-partition costs of the simulator's bytesched job, ablated: for each value of
`partition_overhead_us` (serial, on the worker's communication thread) and
`partition_latency_us` (the round trip a partition's credit waits), the grid optimum of
ResNet50 on 8 workers (PS, 10 Gbit/s), its speed, the speed of no scheduling, and the
speed of the paper's grid corners. Prints a markdown table.

    python benchmarks/bytesched_ablation/run.py [--model resnet50] [--pattern ps] [--gbps 10]
"""

from __future__ import annotations

import argparse

from gradwire.tune.online import grid_optimum
from gradwire.tune.simjob import JobSpec, measure
from gradwire.tune.space import MB, Candidate, grid

DEFAULTS = {"partition_overhead_us": 200.0, "partition_latency_us": 100.0}
VALUES = {"partition_overhead_us": (0.0, 50.0, 200.0, 400.0), "partition_latency_us": (0.0, 100.0, 500.0)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--pattern", default="ps")
    ap.add_argument("--gbps", type=float, default=10.0)
    a = ap.parse_args()
    cands = grid()
    print("| key | value | grid optimum | its samples/s | no scheduling | ⟨2 MB, 1×⟩ | ⟨16 MB, 8×⟩ |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for key, values in VALUES.items():
        for v in values:
            spec = JobSpec(a.model, a.pattern, 8, a.gbps, {**DEFAULTS, key: v})
            best, speed, speeds = grid_optimum(spec, cands)
            none = measure(spec, None)
            lo, hi = speeds[Candidate(2 * MB, 1)], speeds[Candidate(16 * MB, 8)]
            print(f"| {key} | {v:g} | {best} | {speed:.1f} | {none:.1f} | {lo:.1f} | {hi:.1f} |", flush=True)


if __name__ == "__main__":
    main()
