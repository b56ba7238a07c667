"""`gradwire train`: the same data-parallel job on several configurations, side by side.

Each configuration is one `gradwire launch` of N local workers (gradwire.train.worker);
the results go in one table (samples/s, time per step, time-to-accuracy, final accuracy)
and one plot of test accuracy against training wall time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from gradwire import launch

# Defaults per model: epochs, learning rate, per-worker batch, target accuracy.
MODEL_DEFAULTS = {
    "cnn": {"epochs": 8, "lr": 0.05, "batch": 32, "target": 0.95},
    "resnet18": {"epochs": 1, "lr": 0.02, "batch": 16, "target": 0.9},
}


@dataclass(frozen=True)
class Config:
    backend: str  # "gloo" or "gradwire"
    inject_loss: float = 0.0
    loss_bound: float = 0.0

    @property
    def label(self) -> str:
        if self.backend == "gloo":
            return "gloo"
        if self.inject_loss == 0 and self.loss_bound == 0:
            return "gradwire lossless"
        return f"gradwire loss {self.inject_loss:.1%} bound {self.loss_bound:.1%}"

    def check(self) -> None:
        if self.backend not in ("gloo", "gradwire"):
            raise ValueError(f"unknown backend {self.backend!r}: expected gloo or gradwire")
        if self.backend == "gloo" and (self.inject_loss or self.loss_bound):
            raise ValueError("injected loss and a loss bound need the gradwire backend")
        for name, v in (
            ("injected loss", self.inject_loss),
            ("loss bound", self.loss_bound),
        ):
            if not 0 <= v < 1:
                raise ValueError(f"{name} must be in [0, 1), got {v}")


DEFAULT_CONFIGS = [Config("gloo"), Config("gradwire"), Config("gradwire", 0.01, 0.01)]


@dataclass(frozen=True)
class Settings:
    """What every configuration of one `gradwire train` run shares; `None` epochs, lr,
    batch or target take the model's default ([`resolved`](Settings.resolved))."""

    model: str
    workers: int
    out: Path
    seed: int
    epochs: int | None
    lr: float | None
    batch: int | None
    target: float | None
    mss: int | None
    timeout: float

    def resolved(self) -> Settings:
        """These settings with the model's defaults in place of what is left `None`."""
        d = MODEL_DEFAULTS[self.model]
        return replace(
            self,
            epochs=self.epochs or d["epochs"],
            lr=self.lr or d["lr"],
            batch=self.batch or d["batch"],
            target=self.target or d["target"],
        )


def run_config(cfg: Config, s: Settings, *, on_progress=None, tag: str = "") -> dict:
    """Launches the workers with resolved settings `s`; returns rank 0's result.
    `on_progress(step, total, accuracy)`."""
    cfg.check()
    slug = cfg.label.replace(" ", "_").replace("%", "pct") + tag
    res_path = s.out / f"{slug}.json"
    plan = {
        "backend": cfg.backend,
        "inject_loss": cfg.inject_loss,
        "loss_bound": cfg.loss_bound,
        "model": s.model,
        "seed": s.seed,
        "epochs": s.epochs,
        "lr": s.lr,
        "batch": s.batch,
        "target": s.target,
        "mss": s.mss,
        "out": str(res_path),
    }
    cmd = launch.command([sys.executable, "-m", "gradwire.train.worker", json.dumps(plan)], s.workers)
    log_path = s.out / f"{slug}.log"
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in p.stdout:
            log.write(line)
            if "@progress " in line and on_progress is not None:
                d = json.loads(line.split("@progress ", 1)[1])
                on_progress(d["step"], d["total"], d["accuracy"])
        try:
            p.wait(timeout=s.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            raise RuntimeError(f"{cfg.label}: no result within {s.timeout:.0f} s (log: {log_path})") from None
    if p.returncode != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-15:])
        raise RuntimeError(f"{cfg.label}: the workers failed (exit {p.returncode}); last lines of {log_path}:\n{tail}")
    result = json.loads(res_path.read_text())
    result["label"] = cfg.label
    return result


def plot(results: list[dict], path: Path, target: float, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gradwire.figure import save

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in results:
        ax.plot(
            [p["seconds"] for p in r["curve"]],
            [p["accuracy"] for p in r["curve"]],
            marker=".",
            label=r["label"],
        )
    ax.axhline(target, color="grey", ls=":", lw=1, label=f"target {target:.0%}")
    ax.set_xlabel("training wall time (s, evaluation excluded)")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    save(fig, path)
