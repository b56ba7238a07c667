"""Tables and figures of a ``gradwire emulate`` results directory."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.table import Table

TIMES_PNG = "times.png"


def collect(out_dir: Path, runs: list[str]) -> pd.DataFrame:
    """The results of `runs` (subdirectories of `out_dir`), in that order."""
    frames = [
        pd.read_csv(Path(out_dir) / r / "results.csv") for r in runs if (Path(out_dir) / r / "results.csv").exists()
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


SHARES = ("ranks_share", "switch_share", "kernel_share", "other_share", "machine_busy")


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per run and label (backend or flow): median, min and max time; with the CPU
    columns (`job.cpu_shares`), the median of each share and how many iterations were
    CPU-bound."""
    keys = ["run", "label"]
    g = df.groupby(keys, sort=False)["time_s"]
    out = pd.DataFrame({"median_s": g.median(), "min_s": g.min(), "max_s": g.max(), "n": g.count()})
    if "cpu_bound" in df.columns:
        gg = df.groupby(keys, sort=False)
        for c in SHARES:
            out[c] = gg[c].median()
        out["cpu_bound"] = gg["cpu_bound"].apply(lambda s: int(s.fillna(False).astype(bool).sum()))
    return out.reset_index()


def cpu_cell(r: pd.Series) -> str:
    """`ranks / switch / kernel % (busy %)` of one summary row, or '' without samples."""
    if "ranks_share" not in r or pd.isna(r["ranks_share"]):
        return ""
    pct = [f"{100 * r[c]:.0f}" for c in ("ranks_share", "switch_share", "kernel_share")]
    return f"{'/'.join(pct)} ({100 * r['machine_busy']:.0f})"


def table(summary: pd.DataFrame, switch: dict[str, dict]) -> Table:
    t = Table(title="gradwire emulate")
    for col in (
        "run",
        "what",
        "median s",
        "min s",
        "max s",
        "drops (switch)",
        "ECN marks",
        "CPU % ranks/switch/kernel (busy)",
        "CPU-bound",
    ):
        t.add_column(col, justify="right" if col not in ("run", "what") else "left")
    for _, r in summary.iterrows():
        sw = switch.get(r["run"], {})
        drops = ", ".join(f"{k} {v}" for k, v in sw.get("drops", {}).items() if v) or "0"
        t.add_row(
            str(r["run"]),
            str(r["label"]),
            f"{r['median_s']:.3f}",
            f"{r['min_s']:.3f}",
            f"{r['max_s']:.3f}",
            drops,
            str(sw.get("ecn_marks", "")),
            cpu_cell(r),
            f"{int(r['cpu_bound'])}/{int(r['n'])}" if "cpu_bound" in r and not pd.isna(r["cpu_bound"]) else "",
        )
    return t


def cpu_bound_hint(summary: pd.DataFrame) -> str | None:
    """What to make of CPU-bound iterations, if any ran: their times measure this machine's
    cores as much as the network. Where other processes took a fifth of the machine or more
    the job did not have it to itself; else a lower rate is the way out (idle, 0.125 Gbit/s
    per core kept both Gloo and DLCP network-bound, `job.GBPS_PER_CORE`)."""
    if "cpu_bound" not in summary.columns or summary["cpu_bound"].isna().all():
        return None
    bound, total = int(summary["cpu_bound"].fillna(0).sum()), int(summary["n"].sum())
    if bound == 0:
        return None
    head = (
        f"{bound} of {total} iterations were CPU-bound: their times say as much about this machine's "
        "cores as about the network."
    )
    other = summary["other_share"].median() if "other_share" in summary.columns else float("nan")
    if other >= 0.2:
        return f"{head} Other processes took {other:.0%} of the machine: run it again on an idle one."
    return (
        f"{head} A lower link rate with the bytes scaled to the same wire time (--gbps; 0.125 Gbit/s "
        "per core is network-bound on an idle machine) keeps the wire the bottleneck."
    )


def plot(out_dir: Path, summary: pd.DataFrame) -> Path | None:
    if summary.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gradwire.figure import save

    runs = list(dict.fromkeys(summary["run"]))
    labels = list(dict.fromkeys(summary["label"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(runs) * max(1, len(labels)) / 2), 4.5))
    width = 0.8 / len(labels)
    for i, lab in enumerate(labels):
        sub = summary[summary["label"] == lab].set_index("run").reindex(runs)
        xs = [j + i * width for j in range(len(runs))]
        ax.bar(
            xs,
            sub["median_s"],
            width,
            label=lab,
            yerr=[sub["median_s"] - sub["min_s"], sub["max_s"] - sub["median_s"]],
            capsize=3,
        )
    ax.set_xticks(
        [j + width * (len(labels) - 1) / 2 for j in range(len(runs))],
        runs,
        rotation=20,
        ha="right",
        fontsize="small",
    )
    ax.set_ylabel("time (s): median, min-max")
    ax.set_title(Path(out_dir).name)
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    return save(fig, Path(out_dir) / TIMES_PNG)
