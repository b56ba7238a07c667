"""The console side of `gradwire train`: progress bars, the table, the plot."""

from __future__ import annotations

import json
import statistics

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from gradwire.train.job import DEFAULT_CONFIGS, MODEL_DEFAULTS, Config, Settings, plot, run_config


def configs_from(backends: list[str], inject_loss: float, loss_bound: float) -> list[Config]:
    """The configurations to run: the default three, or one per named backend (injected
    loss and bound apply to gradwire)."""
    if not backends and inject_loss == 0 and loss_bound == 0:
        return list(DEFAULT_CONFIGS)
    backends = backends or ["gloo", "gradwire"]
    out = []
    for b in backends:
        cfg = Config(b, inject_loss, loss_bound) if b == "gradwire" else Config(b)
        cfg.check()
        out.append(cfg)
    return out


def train(console: Console, configs: list[Config], settings: Settings, repeats: int = 1) -> list[dict]:
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if settings.model not in MODEL_DEFAULTS:
        raise ValueError(f"unknown model {settings.model!r}: expected one of {', '.join(MODEL_DEFAULTS)}")
    if settings.workers < 1:
        raise ValueError(f"workers must be at least 1, got {settings.workers}")
    s = settings.resolved()
    s.out.mkdir(parents=True, exist_ok=True)
    console.print(
        f"[bold]{s.model}[/], {s.workers} workers, {s.epochs} epochs, batch {s.batch} per worker, target accuracy "
        f"{s.target:.0%}; results in {s.out}"
        + (f"; {repeats} rounds, configurations alternating" if repeats > 1 else "")
    )
    runs: dict[str, list[dict]] = {cfg.label: [] for cfg in configs}
    cols = [
        TextColumn("{task.description:<34}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[acc]}"),
        TimeElapsedColumn(),
    ]
    with Progress(*cols, console=console) as progress:
        # Round-robin over the configurations, so slow phases of a shared machine hit all alike.
        for rnd in range(repeats):
            for cfg in configs:
                name = cfg.label if repeats == 1 else f"{cfg.label} (round {rnd + 1})"
                task = progress.add_task(name, total=None, acc="starting workers")

                def update(step: int, total: int, acc: float, task=task) -> None:
                    progress.update(task, completed=step, total=total, acc=f"accuracy {acc:.1%}")

                run = run_config(cfg, s, on_progress=update, tag="" if repeats == 1 else f"-r{rnd + 1}")
                runs[cfg.label].append(run)
    results = [summarize(rs) for rs in runs.values()]
    console.print(table(results, s.target))
    (s.out / "results.json").write_text(json.dumps(results, indent=1))
    png = s.out / "accuracy_vs_time.png"
    plot(
        results,
        png,
        s.target,
        f"{s.model}, {s.workers} workers: test accuracy vs training time",
    )
    console.print(f"wrote {s.out / 'results.json'} and {png}")
    return results


def summarize(runs: list[dict]) -> dict:
    """One row per configuration: medians over its rounds; the curve and the other fields are
    those of its median run by time-to-accuracy (the lower median; a run that missed the target
    ranks last, so the median misses it when half the rounds did)."""
    if len(runs) == 1:
        return runs[0]
    inf = float("inf")
    by_tta = sorted(runs, key=lambda r: r.get("time_to_accuracy_s") or inf)
    row = dict(by_tta[(len(runs) - 1) // 2])
    ttas = [r.get("time_to_accuracy_s") for r in runs]
    row["rounds"] = len(runs)
    row["time_to_accuracy_runs_s"] = ttas
    row["samples_per_s"] = statistics.median(r["samples_per_s"] for r in runs)
    row["median_step_s"] = statistics.median(r["median_step_s"] for r in runs)
    return row


def table(results: list[dict], target: float) -> Table:
    rounds = results[0].get("rounds", 1)
    what = f"; median of {rounds} rounds" if rounds > 1 else ""
    t = Table(title=f"training (time-to-accuracy: first evaluation at {target:.0%} or better{what})")
    for c in (
        "configuration",
        "samples/s",
        "time/step",
        "time-to-accuracy",
        "steps",
        "final accuracy",
        "bytes lost",
    ):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    base = results[0].get("time_to_accuracy_s")
    for r in results:
        tta = r.get("time_to_accuracy_s")
        rel = f" ({tta / base:.2f}×)" if tta and base and r is not results[0] else ""
        if "rounds" in r:
            done = [t for t in r["time_to_accuracy_runs_s"] if t]
            span = f"{min(done):.2f}–{max(done):.2f}" if done else "none"
            rel += f", {len(done)}/{r['rounds']} in {span} s"

        lost = r.get("bytes_lost")
        t.add_row(
            r["label"],
            f"{r['samples_per_s']:,.0f}",
            f"{r['median_step_s'] * 1e3:.1f} ms",
            f"{tta:.2f} s{rel}" if tta else "not reached",
            str(r.get("steps_to_accuracy") or "-"),
            f"{r['final_accuracy']:.1%}",
            "-" if lost is None else f"{lost:,}",
        )
    return t
