"""Per-burst measurements of a DDLgen run (pcn.md Fig. 9b/c): the bottleneck queue when each
burst starts and its peak during the burst, the burst completion time and its bytes.

A burst is one DDLgen iteration: every worker's push to the server. Its start is the first
push's start (after PCN's ACK when PCN is on), its end the last push's finish; the queue is
the sampled bottleneck queue (``queues.csv``) at the start and its maximum until the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

BURSTS_CSV = "bursts.csv"

#: The paper's setting (pcn.md §3.3: k = 1/4, h_PCN = 10), drawn per burst beside PCN off.
PAPER_K = 0.25


def bursts(run_dir: Path, config: dict) -> list[dict]:
    """One row per complete burst, in order; stops at the first unfinished one."""
    import numpy as np
    import pandas as pd

    w = config.get("workload", {})
    flows = pd.read_csv(run_dir / "flows.csv")
    # the workers' pushes (a background flow may end at the server too)
    pushes = flows[(flows["dst"] == int(w.get("receiver", 0))) & flows["src"].isin(w.get("sender_list", []))]
    q = pd.read_csv(run_dir / "queues.csv")
    qt, qp = q["time_ns"].to_numpy(), q["packets"].to_numpy()
    rows = []
    for it, g in pushes.groupby("iteration", sort=True):
        start = pd.to_numeric(g["start_ns"], errors="coerce")
        finish = pd.to_numeric(g["finish_ns"], errors="coerce")
        if start.isna().any() or finish.isna().any():
            break
        a, b = float(start.min()), float(finish.max())
        i = max(0, int(np.searchsorted(qt, a, side="right")) - 1)
        j = int(np.searchsorted(qt, b, side="right"))
        rows.append(
            {
                "burst": int(it),
                "start_ns": a,
                "finish_ns": b,
                "start_queue_pkts": int(qp[i]),
                "max_queue_pkts": int(qp[i:j].max() if j > i else qp[i]),
                "bct_ms": (b - a) / 1e6,
                "bytes": float(g["size_bytes"].sum()),
            }
        )
    return rows


def write(runs: Sequence[tuple[str, float, Path, dict]], out_dir: Path, name: str) -> dict[str, Path]:
    """``bursts.csv`` (every run's bursts) and ``<name>-bursts.png``: start and max queue per
    burst for PCN off and on at the paper's k (or the first k swept). ``runs``: (series, k,
    run directory, scenario) per finished run."""
    import pandas as pd

    frames = []
    for series, k, run_dir, config in runs:
        rows = bursts(run_dir, config)
        if rows:
            frames.append(pd.DataFrame(rows).assign(series=series, k=k, run=run_dir.name))
    if not frames:
        return {}
    df = pd.concat(frames, ignore_index=True)
    csv = out_dir / BURSTS_CSV
    df.to_csv(csv, index=False)
    ks = sorted(set(df["k"]))
    k = PAPER_K if PAPER_K in ks else ks[0]
    return {"bursts_csv": csv, "bursts_plot": _plot(df[df["k"] == k], k, out_dir / f"{name}-bursts.png")}


def _plot(df, k: float, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gradwire.figure import save

    fig, axes = plt.subplots(1, 2, figsize=(9.2, 3.4))
    for ax, key, label in (
        (axes[0], "start_queue_pkts", "queue at burst start (packets)"),
        (axes[1], "max_queue_pkts", "max queue per burst (packets)"),
    ):
        for series, g in df.groupby("series", sort=True):
            ax.plot(g["burst"] + 1, g[key], marker="o", label="PCN off" if series == "off" else f"PCN, k = {k:g}")
        ax.set_xlabel("burst")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle("PCN Fig. 9b/c: the bottleneck queue per burst", fontsize="medium")
    return save(fig, path)
