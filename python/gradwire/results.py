"""Collecting per-run ``summary.json`` files into one table (``summary.csv``)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from gradwire.runner import read_manifest

SUMMARY_CSV = "summary.csv"

#: Columns of summary.csv after `run` and the sweep parameters.
COLUMNS = [
    "transport",
    "flows",
    "flows_finished",
    "fct_mean_us",
    "fct_p50_us",
    "fct_p99_us",
    "fct_max_us",
    "retransmits",
    "timeouts",
    "drops_total",
    "ecn_marks",
    "events",
    "wall_seconds",
    "events_per_second",
    "conserved",
    # the fast mode (`fidelity = "fast"`; empty at packet level): servers simulated, of the job's
    "fast_servers",
    "fast_of",
    # with every server's whole tensors kept, the job's iteration as the run estimates it
    "fast_job_iteration_us",
]


def _us(ns):
    return None if ns is None else ns / 1e3


def summary_row(summary: dict) -> dict:
    """The summary.csv columns (after `run` and the parameters) of one summary.json."""
    fast = summary.get("fast")
    return {
        "transport": summary.get("transport"),
        "flows": summary.get("flows"),
        "flows_finished": summary.get("flows_finished"),
        "fct_mean_us": _us(summary.get("fct_mean_ns")),
        "fct_p50_us": _us(summary.get("fct_p50_ns")),
        "fct_p99_us": _us(summary.get("fct_p99_ns")),
        "fct_max_us": _us(summary.get("fct_max_ns")),
        "retransmits": summary.get("retransmits"),
        "timeouts": summary.get("timeouts"),
        "drops_total": sum((summary.get("drops") or {}).values()),
        "ecn_marks": summary.get("ecn_marks"),
        "events": summary.get("events"),
        "wall_seconds": summary.get("wall_seconds"),
        "events_per_second": summary.get("events_per_second"),
        "conserved": bool((summary.get("packets") or {}).get("conserved", False)),
        "fast_servers": len(fast["servers"]) if fast else None,
        "fast_of": fast.get("of") if fast else None,
        "fast_job_iteration_us": _us(fast.get("job_iteration_ns")) if fast else None,
    }


def run_dirs(results_dir: Path) -> list[tuple[str, dict[str, str], Path]]:
    """(run name, sweep params, directory) of every run in a results directory.

    Uses ``runs.json`` (written by ``gradwire sim``) for the order and the parameters;
    without it, every subdirectory holding a ``summary.json`` is a run (sorted, no params).
    """
    results_dir = Path(results_dir)
    manifest = read_manifest(results_dir)
    if manifest is not None:
        out = []
        for r in manifest.get("runs", []):
            d = results_dir / r["name"]
            if (d / "summary.json").is_file():
                out.append((r["name"], dict(r.get("params", {})), d))
        if out:
            return out
    if (results_dir / "summary.json").is_file():  # a single run written by gradwire-sim
        return [(results_dir.name, {}, results_dir)]
    return [(d.name, {}, d) for d in sorted(results_dir.iterdir()) if (d / "summary.json").is_file()]


def collect(results_dir: Path) -> pd.DataFrame:
    """One row per run: run, the sweep parameters, then :data:`COLUMNS`."""
    rows = []
    param_keys: list[str] = []
    for name, params, d in run_dirs(results_dir):
        summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
        for k in params:
            if k not in param_keys:
                param_keys.append(k)
        rows.append({"run": name, **params, **summary_row(summary)})
    return pd.DataFrame(rows, columns=["run", *param_keys, *COLUMNS])


def write_summary_csv(results_dir: Path) -> Path:
    """Write ``results_dir/summary.csv`` and return its path."""
    df = collect(results_dir)
    path = Path(results_dir) / SUMMARY_CSV
    df.to_csv(path, index=False)
    return path
