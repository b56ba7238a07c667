"""Figures of a results directory: FCT CDF, FCT bars, queue lengths."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from gradwire.figure import save  # noqa: E402
from gradwire.results import collect, run_dirs  # noqa: E402
from gradwire.runner import read_manifest  # noqa: E402

FCT_CDF = "fct_cdf.png"
FCT_BARS = "fct_bars.png"
QUEUES = "queues.png"
#: Most points a CDF is drawn with: a 10 000-host run has 36 M flows, which take minutes to
#: draw and look the same as this many evenly spaced ranks at a figure's resolution.
CDF_POINTS = 4096


def scenario_label(results_dir: Path) -> str:
    """The scenario a results directory holds, with its overrides, for figure titles."""
    m = read_manifest(results_dir) or {}
    label = str(m.get("scenario") or Path(results_dir).name)
    overrides = m.get("overrides") or []
    return f"{label} ({', '.join(map(str, overrides))})" if overrides else label


def _fcts_us(run_dir: Path) -> np.ndarray:
    # the one column read, as floats (an unfinished flow's is empty: NaN)
    flows = pd.read_csv(run_dir / "flows.csv", usecols=["fct_ns"], dtype={"fct_ns": float})
    fct = flows["fct_ns"].dropna().to_numpy()
    return np.sort(fct) / 1e3


def cdf_points(fct: np.ndarray, most: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """The sorted ``fct`` and their cumulative fractions, at most ``most`` evenly spaced
    ranks of them (the first and the last always)."""
    n = fct.size
    ranks = np.arange(n) if n <= most else np.unique(np.linspace(0, n - 1, most).round().astype(np.int64))
    return fct[ranks], (ranks + 1) / n


def plot_fct_cdf(results_dir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    for name, _params, d in run_dirs(results_dir):
        fct = _fcts_us(d)
        if fct.size == 0:
            continue
        x, y = cdf_points(fct)
        ax.step(x, y, where="post", label=f"{name} ({fct.size} flows)")
        drawn += 1
    if drawn:
        ax.set_xscale("log")
        ax.legend(fontsize="small", loc="lower right")
    else:
        ax.text(0.5, 0.5, "no finished flows", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("flow completion time (µs, log scale)")
    ax.set_ylabel("fraction of flows")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"FCT CDF: {scenario_label(results_dir)}", fontsize="medium")
    return save(fig, Path(results_dir) / FCT_CDF)


def plot_fct_bars(results_dir: Path, df: pd.DataFrame | None = None) -> Path:
    df = collect(results_dir) if df is None else df
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(df) + 2), 4.5))
    x = np.arange(len(df))
    w = 0.38
    mean = pd.to_numeric(df["fct_mean_us"], errors="coerce").fillna(0).to_numpy()
    p99 = pd.to_numeric(df["fct_p99_us"], errors="coerce").fillna(0).to_numpy()
    b1 = ax.bar(x - w / 2, mean, w, label="mean")
    b2 = ax.bar(x + w / 2, p99, w, label="p99")
    ax.bar_label(b1, fmt="%.0f", fontsize="x-small")
    ax.bar_label(b2, fmt="%.0f", fontsize="x-small")
    ax.set_xticks(
        x, df["run"].astype(str).tolist(), rotation=20 if len(df) > 3 else 0, ha="right" if len(df) > 3 else "center"
    )
    ax.set_ylabel("flow completion time (µs)")
    ax.set_title(f"FCT per run: {scenario_label(results_dir)}", fontsize="medium")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    return save(fig, Path(results_dir) / FCT_BARS)


def plot_queues(results_dir: Path) -> Path | None:
    runs = [(name, d / "queues.csv") for name, _p, d in run_dirs(results_dir) if (d / "queues.csv").is_file()]
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.6 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, (name, csv) in zip(axes[:, 0], runs):
        q = pd.read_csv(csv)
        for port, g in q.groupby("port", sort=True):
            ax.plot(g["time_ns"] / 1e3, g["bytes"] / 1e3, label=str(port), linewidth=0.9)
        ax.set_ylabel("queue (KB)")
        ax.set_title(name, fontsize="small")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper right")
    axes[-1, 0].set_xlabel("time (µs)")
    fig.suptitle(f"Queue lengths: {scenario_label(results_dir)}", fontsize="medium")
    return save(fig, Path(results_dir) / QUEUES)


def plot_all(results_dir: Path, df: pd.DataFrame | None = None) -> list[Path]:
    """Draw every figure that the directory has data for; returns the files written."""
    out = [plot_fct_cdf(results_dir), plot_fct_bars(results_dir, df)]
    q = plot_queues(results_dir)
    if q is not None:
        out.append(q)
    return out
