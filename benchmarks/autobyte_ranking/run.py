"""How well AutoByte's meta-network ranks ⟨S_p, S_c⟩, in and out of sample, per variant of
the choices autobyte.md §III-A leaves open (docs/scheduling.md has the table).

For each variant: the first-ranked candidate's speed against the optimum's on the training
conditions (in sample), on 6 folds of held-out conditions (each scored by a model fitted
without it), on every condition at a held-out bandwidth (10 Gbit/s: Fig. 5's, with the
model fitted on the other six), and Fig. 5 (ResNet50, PS, 10 Gbit/s) online from both start
points with the model fitted on everything.

    python benchmarks/autobyte_ranking/run.py --data /tmp/autobyte_data.jsonl [--variants base,log,...]

The data file is what `gradwire autobyte train --data F` writes (generated if missing).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from gradwire.tune import offline
from gradwire.tune.autobyte import NetConfig
from gradwire.tune.evaluate import by_condition, cross_validate, hold_out, ranking
from gradwire.tune.online import grid_optimum, run_autobyte
from gradwire.tune.simjob import JobSpec
from gradwire.tune.space import MB, Candidate, grid

#: name → (network choices, fit settings); "shipped" is what `gradwire autobyte train` uses.
VARIANTS = {
    "before": (NetConfig(), {"epochs": 60}),
    "log": (NetConfig(log_target=True), {"epochs": 60}),
    "slots": (NetConfig(slot_embed=4), {"epochs": 60}),
    "log+slots": (NetConfig(log_target=True, slot_embed=4), {"epochs": 60}),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--folds", type=int, default=6)
    ap.add_argument("--no-fig5", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    if not a.data.exists():
        offline.save_data(a.data, offline.generate(offline.conditions(), grid(), processes=2))
    samples = offline.load_data(a.data)
    conds = by_condition(samples)
    meta = offline.conditions()
    if len(meta) != len(conds):
        raise SystemExit(f"{a.data} has {len(conds)} conditions, expected {len(meta)} (offline.conditions())")
    gbps = {id(c.obs): m.gbps for c, m in zip(conds, meta)}
    rows = []
    for name in a.variants.split(","):
        cfg, fit_opts = VARIANTS[name]
        t0 = time.perf_counter()

        def fit(train, cfg=cfg, fit_opts=fit_opts):
            return offline.fit_model(train, cfg, **fit_opts)

        cv = cross_validate(conds, fit, k=a.folds)
        held, _ = hold_out(conds, lambda c: gbps[id(c.obs)] == 10.0, fit)
        full = fit(samples)
        ins = ranking(full, conds)
        row = {
            "variant": name,
            "in_sample": ins.summary(),
            "cv": cv.summary(),
            "held_10g": held.summary(),
            "s": round(time.perf_counter() - t0, 1),
        }
        if not a.no_fig5:
            row["fig5"] = fig5(full)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| variant | in sample: top-1 within 5 % | 6-fold held out | held out 10 Gbit/s (regret) | Fig. 5 from ⟨2,2⟩ / ⟨8,3⟩ |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        f5 = " / ".join(f"{p:.1f} %" for p in r.get("fig5", {}).values()) or "—"
        print(
            f"| {r['variant']} | {100 * r['in_sample']['top1_within_5pct']:.0f} % "
            f"| {100 * r['cv']['top1_within_5pct']:.0f} % ({100 * r['cv']['mean_regret']:.1f} %) "
            f"| {100 * r['held_10g']['top1_within_5pct']:.0f} % ({100 * r['held_10g']['mean_regret']:.1f} %) | {f5} |"
        )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


def fig5(model) -> dict[str, float]:
    """% of the grid optimum of the configuration in force at iteration 30, per start."""
    spec = JobSpec("resnet50", "ps", 8, 10.0)
    cands = grid()
    _, best, speeds = grid_optimum(spec, cands)
    out = {}
    for start in (Candidate(2 * MB, 2), Candidate(8 * MB, 3)):
        t = run_autobyte(spec, cands, start, 60, model)
        out[str(start)] = 100 * speeds[t.configs[30]] / best
    return out


if __name__ == "__main__":
    main()
