"""The console side of `gradwire train`: progress bars, the table, the plot."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from gradwire.train.job import DEFAULT_CONFIGS, MODEL_DEFAULTS, Config, plot, run_config


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


def train(
    console: Console,
    configs: list[Config],
    *,
    model: str,
    workers: int,
    out: Path,
    seed: int,
    epochs: int | None,
    lr: float | None,
    batch: int | None,
    target: float | None,
    mss: int | None,
    timeout: float,
) -> list[dict]:
    if model not in MODEL_DEFAULTS:
        raise ValueError(f"unknown model {model!r}: expected one of {', '.join(MODEL_DEFAULTS)}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    d = MODEL_DEFAULTS[model]
    epochs, lr, batch, target = (
        epochs or d["epochs"],
        lr or d["lr"],
        batch or d["batch"],
        target or d["target"],
    )
    out.mkdir(parents=True, exist_ok=True)
    console.print(
        f"[bold]{model}[/], {workers} workers, {epochs} epochs, batch {batch} per worker, target accuracy "
        f"{target:.0%}; results in {out}"
    )
    results = []
    cols = [
        TextColumn("{task.description:<34}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[acc]}"),
        TimeElapsedColumn(),
    ]
    with Progress(*cols, console=console) as progress:
        for cfg in configs:
            task = progress.add_task(cfg.label, total=None, acc="starting workers")

            def update(step: int, total: int, acc: float, task=task) -> None:
                progress.update(task, completed=step, total=total, acc=f"accuracy {acc:.1%}")

            results.append(
                run_config(
                    cfg,
                    workers=workers,
                    model=model,
                    out=out,
                    seed=seed,
                    epochs=epochs,
                    lr=lr,
                    batch=batch,
                    target=target,
                    mss=mss,
                    timeout=timeout,
                    on_progress=update,
                )
            )
    console.print(table(results, target))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    png = out / "accuracy_vs_time.png"
    plot(
        results,
        png,
        target,
        f"{model}, {workers} workers: test accuracy vs training time",
    )
    console.print(f"wrote {out / 'results.json'} and {png}")
    return results


def table(results: list[dict], target: float) -> Table:
    t = Table(title=f"training (time-to-accuracy: first evaluation at {target:.0%} or better)")
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
