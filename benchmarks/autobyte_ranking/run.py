"""How well AutoByte's meta-network ranks ⟨S_p, S_c⟩, in and out of sample, per variant of
the choices autobyte.md §III-A leaves open (docs/scheduling.md has the table).

For each variant: the first-ranked candidate's speed against the optimum's on the training
conditions (in sample), on 3 folds of held-out conditions (each scored by a model fitted
without it), on every condition at a held-out bandwidth (10 Gbit/s: Fig. 5's, with the
model fitted on the other six), and Fig. 5 (ResNet50, PS, 10 Gbit/s) online from both start
points with the model fitted on everything and with the one fitted without 10 Gbit/s.

    python benchmarks/autobyte_ranking/run.py --data /tmp/autobyte_data.jsonl [--variants base,log,...]

The data file is what `gradwire autobyte train --data F` writes (generated if missing).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from gradwire.tune import offline
from gradwire.tune.autobyte import NetConfig
from gradwire.tune.evaluate import Ranking, by_condition, folds, hold_out, ranking
from gradwire.tune.online import grid_optimum, run_autobyte
from gradwire.tune.simjob import JobSpec
from gradwire.tune.space import MB, Candidate, grid

#: name → the network's choices; every variant is fitted with the shipped recipe
#: (offline.EPOCHS, LR, BATCH_CONDITIONS). "shipped" is offline.CONFIG.
VARIANTS = {
    "plain": (NetConfig(), 1),
    "log": (NetConfig(log_target=True), 1),
    "slots": (NetConfig(slot_embed=4), 1),
    "log+slots": (NetConfig(log_target=True, slot_embed=4), 1),
    "log+slots+level": (NetConfig(log_target=True, slot_embed=4, level_weight=0.1), 1),
    "log+slots+level+dense128": (NetConfig(log_target=True, slot_embed=4, level_weight=0.1, dense=128), 1),
    "shipped": (offline.CONFIG, offline.MEMBERS),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--no-fig5", action="store_true")
    ap.add_argument("--models", type=Path, help="save each variant's model fitted on everything here")
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
        cfg, members = VARIANTS[name]
        t0 = time.perf_counter()
        curve: dict[int, list[float]] = {}

        def fit(train, test=(), cfg=cfg, members=members, curve=curve):
            def every10(epoch, fitted):
                if test and (epoch + 1) % 10 == 0:
                    curve.setdefault(epoch + 1, []).extend(ranking(fitted, test).scores)
                return False

            return offline.fit_model(train, cfg, members=members, on_epoch=every10)

        # k-fold by condition, with the held-out ranking every 10 epochs
        scores = []
        for fold in folds(len(conds), a.folds):
            held = set(fold)
            test = [conds[i] for i in fold]
            model = fit([s for i, c in enumerate(conds) if i not in held for s in c.samples()], test)
            scores.extend(ranking(model, test).scores)
        cv = Ranking(scores)
        held10, model10 = hold_out(conds, lambda c: gbps[id(c.obs)] == 10.0, fit)
        full = fit(samples)
        if a.models:
            a.models.mkdir(parents=True, exist_ok=True)
            full.save(a.models / f"{name}.pt")
        row = {
            "variant": name,
            "config": asdict(cfg),
            "members": members,
            "in_sample": ranking(full, conds).summary(),
            "cv": cv.summary(),
            "cv_by_epoch": {e: Ranking(s).within() for e, s in sorted(curve.items())},
            "held_10g": held10.summary(),
            "s": round(time.perf_counter() - t0, 1),
        }
        if not a.no_fig5:
            row["fig5"] = fig5(full)
            row["fig5_without_10g"] = fig5(model10)  # a network that never saw Fig. 5's bandwidth
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(
        f"| variant | in sample: top-1 within 5 % | {a.folds}-fold held out (mean regret) "
        "| held out 10 Gbit/s (mean regret) | Fig. 5 from ⟨2,2⟩ / ⟨8,3⟩ | the same, fitted without 10 Gbit/s |"
    )
    print("|---|---:|---:|---:|---|---|")
    for r in rows:
        f5 = " / ".join(f"{p:.1f} %" for p in r.get("fig5", {}).values()) or "—"
        f5h = " / ".join(f"{p:.1f} %" for p in r.get("fig5_without_10g", {}).values()) or "—"
        print(
            f"| {r['variant']} | {100 * r['in_sample']['top1_within_5pct']:.0f} % "
            f"| {100 * r['cv']['top1_within_5pct']:.0f} % ({100 * r['cv']['mean_regret']:.1f} %) "
            f"| {100 * r['held_10g']['top1_within_5pct']:.0f} % ({100 * r['held_10g']['mean_regret']:.1f} %) "
            f"| {f5} | {f5h} |"
        )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


def fig5(model) -> dict[str, float]:
    """% of the grid optimum of the configuration in force at iteration 30, per start
    (whole-network fine-tuning online, as the paper's "transfer learning" reads most
    literally; benchmarks/autobyte_online ablates that choice)."""
    spec = JobSpec("resnet50", "ps", 8, 10.0)
    cands = grid()
    _, best, speeds = grid_optimum(spec, cands)
    out = {}
    for start in (Candidate(2 * MB, 2), Candidate(8 * MB, 3)):
        t = run_autobyte(spec, cands, start, 60, model, adapt="all")
        out[str(start)] = 100 * speeds[t.configs[30]] / best
    return out


if __name__ == "__main__":
    main()
