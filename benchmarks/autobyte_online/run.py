"""AutoByte's online loop, ablated: what fine-tuning trains when a prediction misses by
> 10 % (autobyte.md §III-B leaves it at "transfer learning"). For each choice, Fig. 5
(ResNet50, PS, 10 Gbit/s: % of the grid optimum at iteration 30 from both start points) and
Fig. 6 (10 ↔ 3 Gbit/s every 20 iterations: mean speed against BO's static choice and the
per-phase grid optimum), with one meta-network (the shipped one unless --model).

    python benchmarks/autobyte_online/run.py [--model weights.pt] [--adapt all,head,none]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gradwire.tune.autobyte import AutoByte
from gradwire.tune.offline import load_default
from gradwire.tune.online import ADAPT, grid_optimum, run_autobyte, run_bo
from gradwire.tune.simjob import JobSpec
from gradwire.tune.space import MB, Candidate, grid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path)
    ap.add_argument("--adapt", default=",".join(ADAPT))
    a = ap.parse_args()
    model = AutoByte.load(a.model) if a.model else load_default()
    cands = grid()

    fig5 = JobSpec("resnet50", "ps", 8, 10.0)
    _, best5, speeds5 = grid_optimum(fig5, cands)

    rates = [10.0 if k % 2 == 0 else 3.0 for k in range(6)]
    fig6 = JobSpec(
        "resnet50",
        "ps",
        8,
        10.0,
        {"rate_changes": [{"iteration": 20 * k, "gbps": g} for k, g in enumerate(rates) if k]},
    )
    optimum = {g: grid_optimum(JobSpec("resnet50", "ps", 8, g), cands)[1] for g in set(rates)}
    per_phase = sum(optimum[g] for g in rates) / len(rates)
    bo = run_bo(fig6, cands, 120).mean()

    print("| adapt | Fig. 5 from ⟨2,2⟩ | from ⟨8,3⟩ | Fig. 6 AutoByte | vs BO | of per-phase optimum | adaptations |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for adapt in a.adapt.split(","):
        f5 = []
        for start in (Candidate(2 * MB, 2), Candidate(8 * MB, 3)):
            t = run_autobyte(fig5, cands, start, 60, model, adapt=adapt)
            f5.append(100 * speeds5[t.configs[30]] / best5)
        t6 = run_autobyte(fig6, cands, bo_start(fig6, cands), 120, model, adapt=adapt)
        v = t6.mean()
        print(
            f"| {adapt} | {f5[0]:.1f} % | {f5[1]:.1f} % | {v:.1f} | {100 * (v / bo - 1):+.1f} % "
            f"| {100 * v / per_phase:.1f} % | {len(t6.adaptations)} |",
            flush=True,
        )
    print(f"\nBO (static) {bo:.1f} samples/s; per-phase grid optimum {per_phase:.1f}")


def bo_start(spec: JobSpec, cands: list[Candidate]) -> Candidate:
    """Fig. 6 starts AutoByte where BO's search ended (figures.fig6 does the same)."""
    from gradwire.tune.online import bo_choice

    return bo_choice(spec, cands)[0]


if __name__ == "__main__":
    main()
