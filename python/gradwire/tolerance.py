"""`gradwire tolerance`: the loss-tolerance profiler of dlcp.md §2.3 at small scale.

Trains a model (the embedded digits CNN, or ``module:function`` returning a model and a
dataset) in one process while gradients are lost at random, and counts the epochs to a
target test accuracy, over several seeds:

- Observation 1 (``overall``): packets of `packet_floats` consecutive gradient values
  (a 1440-byte datagram of float32 by default) are zeroed with probability p, anywhere.
- Observation 2, by layer (``front`` / ``middle`` / ``back``): the same, only in the first,
  middle or last 20 % of the layers (modules holding parameters, in definition order).
- Observation 2, by magnitude (``small`` / ``medium`` / ``large``): single values among the
  smallest, middle or largest 20 % of |gradient| in each tensor, each zeroed with
  probability p.

The tolerated ratio of a group is the largest p (of those tried, climbing) whose median
epochs-to-accuracy stays within `slack` of lossless training; a ratio whose runs miss the
target in `max_epochs` counts as infinitely slow. The ``overall`` ratio is the loss bound
to hand to ``gradwire.torch.LossTolerantState(loss_bound=...)``, ``Options(loss_bound=...)``
or ``gradwire train --bound``.

Choices dlcp.md leaves open, named: the loss hits the averaged gradient (the worst case:
in a gradwire allreduce a lost packet zeroes one rank's share of a chunk); "20 % of the
layers" is rounded up to whole layers; the learning rate and batch are the training
defaults of `gradwire train`; accuracy is checked 10 times per epoch.
"""

from __future__ import annotations

import importlib
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradwire.train.models import Dataset, build

GROUPS = ("overall", "front", "middle", "back", "small", "medium", "large")
DEFAULT_RATIOS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)


def load_model(spec: str, seed: int) -> tuple[nn.Module, Dataset]:
    """``cnn`` / ``resnet18``, or ``module:function`` whose call returns (model, dataset);
    the dataset a gradwire.train.models.Dataset or (x_train, y_train, x_test, y_test)."""
    if ":" not in spec:
        return build(spec, seed=seed)
    mod, _, fn = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load {spec!r}: {e}") from None
    torch.manual_seed(seed)
    model, data = factory()
    if not isinstance(data, Dataset):
        data = Dataset(*data)
    return model, data


def _layers(model: nn.Module) -> list[list[torch.Tensor]]:
    return [
        list(m.parameters(recurse=False)) for m in model.modules() if any(True for _ in m.parameters(recurse=False))
    ]


def _slice(n: int, where: str) -> range:
    k = max(1, math.ceil(0.2 * n))
    start = {"front": 0, "middle": max(0, (n - k) // 2), "back": n - k}[where]
    return range(start, start + k)


def make_dropper(
    model: nn.Module, group: str, ratio: float, packet_floats: int, gen: torch.Generator
) -> Callable[[], int]:
    """A function that zeroes this step's lost gradients in place; returns values lost."""
    layers = _layers(model)
    if group in ("overall", "front", "middle", "back"):
        chosen = (
            [p for ls in layers for p in ls]
            if group == "overall"
            else [p for i in _slice(len(layers), group) for p in layers[i]]
        )

        def drop_packets() -> int:
            lost = 0
            for p in chosen:
                g = p.grad.view(-1)
                n_pk = (g.numel() + packet_floats - 1) // packet_floats
                hit = torch.rand(n_pk, generator=gen) < ratio
                if hit.any():
                    mask = hit.repeat_interleave(packet_floats)[: g.numel()]
                    g[mask] = 0
                    lost += int(mask.sum())
            return lost

        return drop_packets
    if group not in ("small", "medium", "large"):
        raise ValueError(f"unknown group {group!r}: expected one of {', '.join(GROUPS)}")
    lo = {"small": 0.0, "medium": 0.4, "large": 0.8}[group]
    params = [p for ls in layers for p in ls]

    def drop_values() -> int:
        lost = 0
        for p in params:
            g = p.grad.view(-1)
            order = g.abs().argsort()
            band = order[int(lo * g.numel()) : int((lo + 0.2) * g.numel())]
            hit = band[torch.rand(band.numel(), generator=gen) < ratio]
            g[hit] = 0
            lost += hit.numel()
        return lost

    return drop_values


@dataclass
class Run:
    group: str
    ratio: float
    seed: int
    epochs_to_target: float  # inf if not reached
    final_accuracy: float
    lost_share: float  # values zeroed / values sent


def train_once(
    spec: str,
    group: str,
    ratio: float,
    seed: int,
    *,
    target: float,
    max_epochs: int,
    lr: float,
    batch: int,
    packet_floats: int,
) -> Run:
    model, data = load_model(spec, seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    # Separate streams: for a seed, the batches are the same with and without loss.
    order = torch.Generator().manual_seed(seed)
    gen = torch.Generator().manual_seed(10_000 + seed)
    drop = make_dropper(model, group, ratio, packet_floats, gen) if ratio > 0 else (lambda: 0)
    n = len(data.y_train)
    steps = max(1, n // batch)
    every = max(1, steps // 10)  # 10 checks per epoch: the slack must exceed the resolution
    total_values = sum(p.numel() for p in model.parameters())
    lost = sent = 0
    acc = 0.0
    for epoch in range(max_epochs):
        perm = torch.randperm(n, generator=order)
        for s in range(steps):
            idx = perm[s * batch : (s + 1) * batch]
            opt.zero_grad()
            nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
            lost += drop()
            sent += total_values
            opt.step()
            if (s + 1) % every == 0 or s == steps - 1:
                acc = _accuracy(model, data)
                if acc >= target:
                    return Run(group, ratio, seed, epoch + (s + 1) / steps, acc, lost / sent)
    return Run(group, ratio, seed, math.inf, acc, lost / max(sent, 1))


def _accuracy(model: nn.Module, data: Dataset) -> float:
    model.eval()
    with torch.no_grad():
        acc = float((model(data.x_test).argmax(1) == data.y_test).float().mean())
    model.train()
    return acc


def summarize(runs: list[Run], slack: float) -> dict[str, Any]:
    """Per group: median epochs-to-target per ratio, and the largest tolerated ratio."""
    base_runs = [r.epochs_to_target for r in runs if r.ratio == 0]
    base = statistics.median(base_runs) if base_runs else math.nan
    out: dict[str, Any] = {"lossless_epochs": base, "slack": slack, "groups": {}}
    for g in dict.fromkeys(r.group for r in runs if r.ratio > 0):
        ratios = sorted({r.ratio for r in runs if r.group == g and r.ratio > 0})
        med = {
            p: statistics.median([r.epochs_to_target for r in runs if r.group == g and r.ratio == p]) for p in ratios
        }
        tolerated = 0.0
        for p in ratios:
            if med[p] <= base * (1 + slack):
                tolerated = p
            else:
                break
        out["groups"][g] = {
            "epochs": {str(p): med[p] for p in ratios},
            "tolerated": tolerated,
            "degraded": [p for p in ratios if not med[p] <= base * (1 + slack)],
        }
    out["loss_bound"] = out["groups"].get("overall", {}).get("tolerated")
    return out


def profile(
    console: Any,
    *,
    model: str,
    groups: list[str],
    ratios: list[float],
    seeds: int,
    slack: float,
    target: float,
    max_epochs: int,
    lr: float,
    batch: int,
    packet_floats: int,
    out: Any,
) -> dict[str, Any]:
    """Runs the sweep with a progress bar, prints the table, writes JSON and a plot."""
    import json

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    for g in groups:
        if g not in GROUPS:
            raise ValueError(f"unknown group {g!r}: expected one of {', '.join(GROUPS)}")
    if any(not 0 < p < 1 for p in ratios):
        raise ValueError("loss ratios must be in (0, 1)")
    if not 0 < target <= 1:
        raise ValueError(f"target accuracy must be in (0, 1], got {target}")
    torch.set_num_threads(1)
    ratios = sorted(set(ratios))
    kw = {
        "target": target,
        "max_epochs": max_epochs,
        "lr": lr,
        "batch": batch,
        "packet_floats": packet_floats,
    }
    runs: list[Run] = []
    cols = [
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    with Progress(*cols, console=console) as bar:
        task = bar.add_task("lossless", total=seeds * (1 + len(groups) * len(ratios)))
        for s in range(seeds):
            runs.append(train_once(model, "overall", 0.0, s, **kw))
            bar.advance(task)
        base = statistics.median(r.epochs_to_target for r in runs)
        if math.isinf(base):
            raise RuntimeError(
                f"lossless training does not reach {target:.0%} in {max_epochs} epochs: "
                "lower --target or raise --max-epochs"
            )
        for g in groups:
            for p in ratios:
                bar.update(task, description=f"{g} {p:.1%}")
                these = [train_once(model, g, p, s, **kw) for s in range(seeds)]
                runs += these
                bar.advance(task, seeds)
                if statistics.median(r.epochs_to_target for r in these) > base * (1 + slack) * 2:
                    # Far beyond the slack: larger ratios only get slower; skip them.
                    bar.advance(task, seeds * (len(ratios) - ratios.index(p) - 1))
                    break
    summary = summarize(runs, slack)
    summary.update(model=model, target=target, seeds=seeds, runs=[r.__dict__ for r in runs])
    console.print(table(summary, ratios))
    out.mkdir(parents=True, exist_ok=True)
    (out / "tolerance.json").write_text(json.dumps(summary, indent=1, default=str))
    plot(summary, out / "tolerance.png")
    bound = summary["loss_bound"]
    if bound is not None:
        console.print(
            f"loss bound (overall): [bold]{bound:g}[/] — pass it on as `gradwire train --bound {bound:g}` or "
            f"gradwire.torch.LossTolerantState(loss_bound={bound:g})"
        )
    for g, d in summary["groups"].items():
        if d["degraded"]:
            worst = d["degraded"][-1]
            e = d["epochs"][str(worst)]
            console.print(
                f"[yellow]degraded:[/] {g} loss {worst:.1%} needs "
                + (
                    f"{e:.2f} epochs ({e / summary['lossless_epochs']:.2f}× lossless)"
                    if math.isfinite(e)
                    else f"more than {max_epochs} epochs (target not reached)"
                )
            )
    console.print(f"wrote {out / 'tolerance.json'} and {out / 'tolerance.png'}")
    return summary


def table(summary: dict[str, Any], ratios: list[float]) -> Any:
    from rich.table import Table

    base = summary["lossless_epochs"]
    t = Table(
        title=f"epochs to {summary.get('target', 0):.0%} test accuracy (median of {summary.get('seeds', '?')} seeds; "
        f"lossless {base:.2f}; tolerated = within {summary['slack']:.0%} of lossless)"
    )
    t.add_column("gradients lost")
    for p in ratios:
        t.add_column(f"{p:.1%}", justify="right")
    t.add_column("tolerated", justify="right")
    for g, d in summary["groups"].items():
        cells = []
        for p in ratios:
            e = d["epochs"].get(str(p))
            if e is None:
                cells.append("[dim]skipped[/]")
            else:
                txt = "not reached" if math.isinf(e) else f"{e:.2f}"
                cells.append(f"[red]{txt}[/]" if p in d["degraded"] else txt)
        t.add_row(g, *cells, f"[bold]{d['tolerated']:.1%}[/]")
    return t


def plot(summary: dict[str, Any], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gradwire.figure import save

    panels = [
        ("Observation 1", ["overall"]),
        ("by layer", ["front", "middle", "back"]),
        ("by magnitude", ["small", "medium", "large"]),
    ]
    panels = [(t, [g for g in gs if g in summary["groups"]]) for t, gs in panels]
    panels = [p for p in panels if p[1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False, sharey=True)
    base = summary["lossless_epochs"]
    for ax, (title, gs) in zip(axes[0], panels):
        for g in gs:
            pts = sorted((float(p), e) for p, e in summary["groups"][g]["epochs"].items())
            ax.plot(
                [p * 100 for p, _ in pts],
                [e if math.isfinite(e) else float("nan") for _, e in pts],
                marker="o",
                label=g,
            )
        ax.axhline(base, color="grey", ls=":", lw=1, label="lossless")
        ax.axhline(base * (1 + summary["slack"]), color="grey", ls="--", lw=1, label="slack")
        ax.set_xscale("log")
        ax.set_xlabel("gradient loss ratio (%)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel(f"epochs to {summary.get('target', 0):.0%} accuracy")
    save(fig, path)
