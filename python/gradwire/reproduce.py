"""Reproductions of paper figures: several built-in scenarios, run in parallel, reduced to
one table and one figure.

A :class:`Reproduction` names the built-in scenario files it runs (one per DNN model), the
sweep parameter that is the figure's x axis and the one that is its series (one line per
value), and how a run is reduced to metrics. :func:`reproduce` plans every run of every
scenario (with the caller's ``--set`` overrides), runs them in separate processes, longest
first, and writes::

    DIR/<scenario>/<run>/{flows.csv,summary.json}   every run (as `gradwire sim` writes them)
    DIR/<scenario>/{runs.json,summary.csv}           per scenario (`gradwire plot` works on it)
    DIR/table.csv       tidy: one row per run (scenario, model, series, x, metrics, ...)
    DIR/table.md        markdown pivot tables, one per model and metric
    DIR/<name>.png      one panel per model x metric: x vs metric, one line per series
    DIR/reproduce.json  name, wall time, jobs, cores, every run and its wall time

See docs/reproductions.md.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradwire import fidelity, pcn_bursts
from gradwire._core import ScenarioError
from gradwire.runner import (
    RunResult,
    RunSpec,
    ScenarioRuns,
    plan,
    simulate,
    write_manifest,
)
from gradwire.scenarios import resolve_scenario, scenario_error

TABLE_CSV = "table.csv"
TABLE_MD = "table.md"
MANIFEST = "reproduce.json"

#: Shrinks the 144-host leaf-spine to 8 hosts (2 leaves x 4, 2 spines, 2 uplinks per leaf).
SMALL_LEAF_SPINE = (
    "topology.leaves=2",
    "topology.hosts_per_leaf=4",
    "topology.spines=2",
    "topology.uplinks_per_leaf=2",
)


@dataclass(frozen=True)
class Metric:
    key: str
    """Column of table.csv."""
    label: str
    """Axis / table label, with its unit."""


@dataclass(frozen=True)
class Reduction:
    """How a reproduction's runs become its table: `run` gives one run's metric columns
    from (run dir, summary.json, scenario); `table`, if any, adds the columns that compare
    runs (in place); `files`, if any, writes more outputs from (plan, results, out dir) and
    returns their paths."""

    name: str
    run: Callable[[Path, dict, dict], dict]
    table: Callable[[Any], None] | None = None
    files: Callable[[Plan, dict, Path], dict] | None = None


@dataclass(frozen=True)
class Reproduction:
    name: str
    title: str
    scenarios: tuple[str, ...]
    """Built-in scenario names (one per model)."""
    x: str
    """Sweep parameter (a key of a run's ``params``) that is the x axis."""
    x_label: str
    metrics: tuple[Metric, ...]
    reduce: Reduction
    """How a run becomes metrics (FCT, BST, ICT, PCN below)."""
    series: str = "scheme"
    """Sweep parameter whose values are the lines (every figure here compares schemes)."""
    x_scale: float = 1.0
    """x values are shown multiplied by this (e.g. 100 for a loss rate in %)."""
    quick: tuple[str, ...] = ()
    """Overrides applied by ``--quick`` (before the user's ``--set``)."""
    quick_x: tuple[float, ...] = ()
    """With ``--quick``, keep only runs at these x values (empty: all)."""
    note: str = ""
    """Shown under the tables (table.md and the terminal)."""
    normalise: str = ""
    """A metric to also show divided by its value at the series' first x (column ``<metric>_norm``)."""


FCT_METRICS = (
    Metric("fct_mean_us", "mean FCT (µs)"),
    Metric("fct_p99_us", "p99 FCT (µs)"),
)
ITER_METRICS = (
    Metric("iter_mean_ms", "mean iteration time (ms)"),
    Metric("iter_p99_ms", "p99 iteration time (ms)"),
)
BST_METRICS = (
    Metric("bst_median_ms", "median BST (ms)"),
    Metric("bst_p99_ms", "p99 BST (ms)"),
)

ICT_NOTE = (
    "ICT of an iteration = its last flow's finish − the previous iteration's (the first: − its first start); "
    "mean over the iterations. Model ICT (rat.md §2, Table 1) = the busiest rank's or rack's bytes over its "
    "link rate (host link C, rack uplinks U: max(send, recv)/C, max(out, in)/U, from the schedule) + dependent "
    "steps × one-way latency (4 links). cross-rack MB is what the rack uplinks carried (payload, from the "
    "link counters); Table 1's analysis of the schedule is in column table1_cross_rack_mb."
)

ICT_METRICS = (
    Metric("ict_mean_ms", "mean ICT (ms)"),
    Metric("ict_model_ms", "model ICT (ms)"),
)

#: rat-fig4/5 at reduced scale: 9.7 MB per worker and two iterations.
RAT_QUICK = ("workload.bytes=9700000", "workload.iterations=2")

PCN_NOTE = (
    "Per burst (one DDLgen iteration: both workers' pushes): start queue = packets in the bottleneck "
    "queue (leaf0->spine0, sampled every 1 µs) when the burst's data starts; max queue = the most during "
    "the burst; BCT = last finish − first start; training throughput = burst bytes / BCT; wait = a worker's "
    "time from its PCN-START to its burst (the ACK, then pcn.burst_delay_us; 0 with PCN off). Means over the "
    "bursts. Background = the long flows' delivered bytes (receivers' downlinks) per second from the first "
    "burst to the last; lost % is against PCN off at the same k (off ignores k: its runs are the same). "
    "The 6 long background flows never finish: the run stops at stop_ms."
)

#: pcn-fig9/10 reduced: 2 iterations, the paper's k = 1/4 only.
PCN_QUICK = ("workload.iterations=2", "stop_ms=80.0")

# ---------------------------------------------------------------------------------------
# Planning


@dataclass
class Job:
    """One run of one scenario of a reproduction."""

    scenario: str
    """Short scenario name (``dlcp-fig14-resnet50``): the directory under DIR."""
    model: str
    spec: RunSpec
    dir: Path
    cost: float
    series: str
    x: float
    fidelity: str = "packet"
    """The simulator's fidelity: "packet", or "fast" for a point run in the fast mode."""
    refused: str = ""
    """Why the fast mode refused this point, which then runs at packet level (``--fast``)."""
    sampled: str = ""
    """A fast run's servers kept, of the job's (``9 of 36``)."""


@dataclass
class Plan:
    repro: Reproduction
    overrides: list[str]
    quick: bool
    fast: bool = False
    """Each series' largest point in the fast mode, the next at both fidelities (gradwire.fidelity)."""
    plans: list[tuple[str, ScenarioRuns]] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)


def _number(v: str) -> float:
    """A sweep value as a number (an int if written as one: a workers axis stays 16, not 16.0)."""
    try:
        return int(v) if v.lstrip("-").isdigit() else float(v)
    except (TypeError, ValueError):
        return math.nan


def _model_bytes(model: str) -> float:
    try:
        from gradwire.models import load_profile

        return float(load_profile(model)["total_params"]) * 4
    except (KeyError, OSError, ValueError):
        return 1e8


# Simulation cost per byte moved, relative to TCP, measured on the dlcp-fig14 runs (CPU
# seconds at 32 and 144 workers): pFabric scans its rank-ordered port buffers (1.3-2.3x),
# DLCP resends the pushes lost in PS incast several times over (2.5x at 32 workers, more
# at 144). Only the order of runs depends on it: the longest go first.
_TRANSPORT_COST = {"pfabric": 2.0, "dlcp": 4.0}
#: An `ideal` (fluid) run moves no packets: a few seconds where a packet run takes minutes.
_IDEAL_COST = 0.05


def estimate_cost(config: dict) -> float:
    """A rough relative cost of a run: the bytes its workload moves (no simulation), times
    its transport's relative cost per byte."""
    w = config.get("workload", {})
    kind = w.get("kind")
    factor = _TRANSPORT_COST.get(config.get("transport", {}).get("kind", ""), 1.0)
    if config.get("ideal", "off") != "off":
        factor = _IDEAL_COST
    if kind == "dnn":
        return factor * w.get("workers", 1) * _model_bytes(w.get("model", "")) * w.get("iterations", 1)
    if kind == "collective":
        t = config.get("topology", {})
        hosts = w.get("workers") or t.get("leaves", 9) * t.get("hosts_per_leaf", 16)
        return factor * hosts * w.get("bytes", 0) * w.get("iterations", 1)
    if kind == "ps":
        return factor * w.get("workers", 1) * (w.get("push_bytes", 0) + (w.get("pull_bytes") or w.get("push_bytes", 0)))
    return factor * float(w.get("flow_bytes", 1) or 1)


def plan_reproduction(
    repro: Reproduction,
    out_dir: Path,
    overrides: Sequence[str] = (),
    quick: bool = False,
    fast: bool = False,
) -> Plan:
    """Plan every run; raises ScenarioError (with the scenario's origin in the message).
    ``fast``: each series' largest point in the fast mode (gradwire.fidelity)."""
    ovr = [*(repro.quick if quick else ()), *overrides]
    p = Plan(repro, list(overrides), quick, fast)
    for name in repro.scenarios:
        source = resolve_scenario(name)
        try:
            runs = plan(source, ovr)
        except ScenarioError as e:
            raise scenario_error(f"in {source.origin}: {e}", getattr(e, "key", "")) from None
        short = name.rsplit("/", 1)[-1]
        missing = [k for k in (repro.x, repro.series) if runs.runs and k not in runs.runs[0].params]
        if missing:
            raise scenario_error(
                f"in {source.origin}: the sweep has no `{missing[0]}` axis (has: "
                f"{', '.join(runs.runs[0].params) or 'none'}); keep it when overriding `sweep`"
            )
        if quick and repro.quick_x:
            runs.runs = [
                r for r in runs.runs if any(math.isclose(_number(r.params[repro.x]), v) for v in repro.quick_x)
            ]
        p.plans.append((short, runs))
        for spec in runs.runs:
            cfg = spec.scenario
            p.jobs.append(
                Job(
                    scenario=short,
                    model=str(cfg.get("workload", {}).get("model", ""))
                    if cfg.get("workload", {}).get("kind") == "dnn"
                    else "",
                    spec=spec,
                    dir=Path(out_dir) / short / spec.name,
                    cost=estimate_cost(cfg),
                    series=spec.params[repro.series],
                    x=_number(spec.params[repro.x]),
                )
            )
        if fast:
            fidelity.add_fast_runs(p, short, runs, ovr)
    return p


# ---------------------------------------------------------------------------------------
# Running


def _run_job(spec: RunSpec, out_dir: str) -> tuple[RunResult | None, str | None]:
    """In a worker process: simulate one run. Errors come back as text (a ScenarioError
    does not survive pickling)."""
    try:
        return simulate(spec, Path(out_dir), console=None, show_progress=False), None
    except ScenarioError as e:
        return None, str(e)


class RunFailed(Exception):
    def __init__(self, job: Job, message: str, lost: bool = False):
        super().__init__(f"{job.scenario}/{job.spec.name}: {message}")
        self.job = job
        self.lost = lost
        """True when a cluster lost the run (not the run's own error)."""


def run_jobs(
    jobs: Sequence[Job],
    n_procs: int,
    on_done: Callable[[Job, RunResult], None] | None = None,
) -> dict[int, RunResult]:
    """Run ``jobs`` (longest first) on ``n_procs`` processes (inline if 1); result by index
    into ``jobs``."""
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i].cost)
    results: dict[int, RunResult] = {}
    if n_procs <= 1 or len(jobs) <= 1:
        for i in order:
            res, err = _run_job(jobs[i].spec, str(jobs[i].dir))
            if err is not None:
                raise RunFailed(jobs[i], err)
            results[i] = res
            if on_done:
                on_done(jobs[i], res)
        return results
    # spawn: a clean interpreter per worker (no fork of a process with threads).
    with cf.ProcessPoolExecutor(max_workers=n_procs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(_run_job, jobs[i].spec, str(jobs[i].dir)): i for i in order}
        try:
            for fut in cf.as_completed(futures):
                i = futures[fut]
                res, err = fut.result()
                if err is not None:
                    raise RunFailed(jobs[i], err)
                results[i] = res
                if on_done:
                    on_done(jobs[i], res)
        except BaseException:
            _stop_pool(pool)
            raise
    return results


def run_jobs_on_cluster(
    jobs: Sequence[Job],
    on_done: Callable[[Job, RunResult], None] | None = None,
    on_tick: Callable[[str], None] | None = None,
) -> tuple[dict[int, RunResult], dict]:
    """Run ``jobs`` (longest first) as tasks on the connected Ray cluster (gradwire.cluster);
    result by index into ``jobs``, and the cluster's record (nodes used, the runs' own
    seconds). Raises :class:`RunFailed` naming the run that failed."""
    from gradwire import cluster

    order = sorted(range(len(jobs)), key=lambda i: -jobs[i].cost)
    tasks = [cluster.Task(i, f"{jobs[i].scenario}/{jobs[i].spec.name}", jobs[i].spec, jobs[i].dir) for i in order]

    def done(task: cluster.Task, res: RunResult) -> None:
        if on_done is not None:
            on_done(jobs[task.key], res)

    try:
        return cluster.run_tasks(tasks, on_done=done, on_tick=on_tick)
    except cluster.TaskFailed as e:
        raise RunFailed(jobs[e.task.key], e.message, lost=e.lost) from None


def _stop_pool(pool: cf.ProcessPoolExecutor) -> None:
    """Stop at once: cancel the queued runs and end the running ones (Ctrl-C, a failed run).
    A plain ``shutdown`` would let every worker finish the runs it had already taken, and
    leaving the ``with`` block waits for them. Finished runs keep their files; an ended run
    has written none, so ``--resume`` runs it again."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    # (shutdown forgets the worker processes, so take them first)
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        if proc.is_alive():
            proc.terminate()


# ---------------------------------------------------------------------------------------
# Metrics


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 < q ≤ 1) by nearest rank, as summary.json's percentiles."""
    v = sorted(values)
    if not v:
        return math.nan
    return v[max(0, math.ceil(q * len(v)) - 1)]


def bst_per_iteration(flows) -> dict[int, float]:
    """BST (ns) of every iteration whose flows all finished: max(finish) − min(start)."""
    import pandas as pd

    out = {}
    for it, g in flows.groupby("iteration", sort=True):
        start = pd.to_numeric(g["start_ns"], errors="coerce")
        finish = pd.to_numeric(g["finish_ns"], errors="coerce")
        if finish.isna().any() or start.isna().any():
            continue
        out[int(it)] = float(finish.max() - start.min())
    return out


def stage_fct(flows_csv: Path) -> dict:
    """Mean and p99 FCT (µs, nearest rank) of the push and of the pull flows of a run, from
    the `pull` column of flows.csv; NaN where there is no such flow (or no column)."""
    import pandas as pd

    out = {f"{st}_{m}_us": math.nan for st in ("push", "pull") for m in ("mean", "p99")}
    try:
        flows = pd.read_csv(flows_csv, usecols=["fct_ns", "pull"])
    except (OSError, ValueError):
        return out
    for name, is_pull in (("push", 0), ("pull", 1)):
        fct = pd.to_numeric(flows.loc[flows["pull"] == is_pull, "fct_ns"], errors="coerce").dropna()
        us = sorted(v / 1e3 for v in fct)
        if us:
            out[f"{name}_mean_us"] = sum(us) / len(us)
            out[f"{name}_p99_us"] = nearest_rank(us, 0.99)
    return out


def iteration_times(flows, begin_ns: float) -> list[float]:
    """Iteration times (ns) of every PS worker and iteration: worker w's iteration k ends
    when its last pull of iteration k finishes (it then holds every aggregated gradient)
    and began when iteration k-1 ended (``begin_ns`` for k = 0). Only a worker's leading
    run of complete iterations counts (an unfinished pull ends the worker's series)."""
    import pandas as pd

    pulls = flows[flows["pull"] == 1]
    out: list[float] = []
    for _w, g in pulls.groupby("dst", sort=True):
        prev = begin_ns
        for _k, it in g.groupby("iteration", sort=True):
            finish = pd.to_numeric(it["finish_ns"], errors="coerce")
            if finish.isna().any():
                break
            end = float(finish.max())
            out.append(end - prev)
            prev = end
    return out


def iteration_metrics(flows_csv: Path, config: dict | None) -> dict:
    """Mean and p99 (nearest rank) iteration time (ms) over every worker and iteration of
    a DNN PS run. Iteration 0 is counted from the start of its forward pass: the workload
    start minus the model's forward time when ``compute`` is on (backward then makes the
    layers ready), the workload start otherwise."""
    import pandas as pd

    out = {"iter_mean_ms": math.nan, "iter_p99_ms": math.nan, "iterations_done": 0}
    w = (config or {}).get("workload", {})
    if w.get("kind") != "dnn":
        return out
    begin = float(w.get("start_us", 0.0)) * 1e3
    if w.get("compute", True):
        try:
            from gradwire.models import load_profile

            begin -= float(load_profile(w.get("model", "resnet50")).get("forward_time_s", 0.0)) * 1e9
        except (KeyError, OSError, ValueError):
            pass
    try:
        flows = pd.read_csv(flows_csv, usecols=["dst", "finish_ns", "iteration", "pull"])
    except (OSError, ValueError):
        return out
    ms = [v / 1e6 for v in iteration_times(flows, begin)]
    if ms:
        out.update(iter_mean_ms=sum(ms) / len(ms), iter_p99_ms=nearest_rank(ms, 0.99), iterations_done=len(ms))
    return out


def run_metrics(repro: Reproduction, run_dir: Path, summary: dict, config: dict | None = None) -> dict:
    """The metric columns of one run (``config``: the run's scenario, for iteration times)."""
    return repro.reduce.run(run_dir, summary, config or {})


def fct_run(run_dir: Path, summary: dict, config: dict) -> dict:
    """Mean and p99 FCT (summary.json), per stage (push / pull) and iteration times."""

    def us(k):
        v = summary.get(k)
        return math.nan if v is None else v / 1e3

    out = {"fct_mean_us": us("fct_mean_ns"), "fct_p99_us": us("fct_p99_ns")}
    out.update(stage_fct(run_dir / "flows.csv"))
    out.update(iteration_metrics(run_dir / "flows.csv", config))
    return out


def bst_run(run_dir: Path, summary: dict, config: dict) -> dict:
    """Median, p99 and mean BST over the iterations (flows.csv)."""
    import pandas as pd

    flows = pd.read_csv(run_dir / "flows.csv")
    bst = bst_per_iteration(flows)
    ms = [v / 1e6 for v in bst.values()]
    return {
        "bst_median_ms": nearest_rank(ms, 0.5),
        "bst_p99_ms": nearest_rank(ms, 0.99),
        "bst_mean_ms": sum(ms) / len(ms) if ms else math.nan,
        "iterations": int(flows["iteration"].nunique()),
        "iterations_done": len(ms),
    }


def ict_run(run_dir: Path, summary: dict, config: dict) -> dict:
    import pandas as pd

    return ict_metrics(pd.read_csv(run_dir / "flows.csv"), summary, config)


def pcn_run(run_dir: Path, summary: dict, config: dict) -> dict:
    pcn = summary.get("pcn") or {}
    wait_ms = pcn.get("waited_ns", 0) / max(1, pcn.get("starts_sent", 0)) / 1e6
    return {**pcn_metrics(run_dir, config), "wait_ms": wait_ms}


def pcn_table(df) -> None:
    """Background throughput lost against PCN off at the same scenario and k."""
    if not len(df) or "bg_gbps" not in df:
        return
    off = df[df["series"] == "off"].set_index(["scenario", "x"])["bg_gbps"]
    ref = [off.get((r.scenario, r.x), math.nan) for r in df.itertuples()]
    df["bg_lost_pct"] = [
        100.0 * (1.0 - v / o) if not math.isnan(o) and o > 0 else math.nan for v, o in zip(df["bg_gbps"], ref)
    ]


def pcn_files(p: Plan, results: dict, out_dir: Path) -> dict:
    """Every burst of every run (pcn_bursts.write)."""
    runs = [(j.series, j.x, j.dir, j.spec.scenario) for i, j in enumerate(p.jobs) if i in results]
    return pcn_bursts.write(runs, out_dir, p.repro.name)


def pcn_metrics(run_dir: Path, config: dict) -> dict:
    """Per-burst queue, BCT and throughput of a ddlgen run (see PCN_NOTE), means over bursts."""
    import numpy as np
    import pandas as pd

    rows = [
        (
            b["start_queue_pkts"],
            b["max_queue_pkts"],
            b["finish_ns"] - b["start_ns"],
            b["bytes"],
            b["start_ns"],
            b["finish_ns"],
        )
        for b in pcn_bursts.bursts(run_dir, config)
    ]
    out = {
        k: math.nan
        for k in (
            "start_queue_pkts",
            "max_queue_pkts",
            "bct_ms",
            "train_gbps",
            "bg_gbps",
        )
    }
    out["bursts_done"] = len(rows)
    if not rows:
        return out
    arr = np.array(rows, dtype=float)
    out["start_queue_pkts"] = float(arr[:, 0].mean())
    out["max_queue_pkts"] = float(arr[:, 1].mean())
    out["bct_ms"] = float(arr[:, 2].mean()) / 1e6
    out["train_gbps"] = float((arr[:, 3] * 8 / arr[:, 2]).mean())
    t0, t1 = float(arr[:, 4].min()), float(arr[:, 5].max())
    try:
        pb = pd.read_csv(run_dir / "port_bytes.csv").groupby("time_ns")["bytes"].sum()
    except (OSError, ValueError):
        return out
    times = pb.index.to_numpy()

    def at(t: float) -> float:
        return float(pb.iloc[max(0, int(np.searchsorted(times, t, side="right")) - 1)])

    if t1 > t0:
        out["bg_gbps"] = (at(t1) - at(t0)) * 8 / (t1 - t0)
    return out


def ict_per_iteration(flows) -> list[float]:
    """ICT (ns) of every finished iteration: its last finish − the previous iteration's last
    finish (iteration 0: − its first start)."""
    import pandas as pd

    out, prev = [], None
    for _it, g in flows.groupby("iteration", sort=True):
        finish = pd.to_numeric(g["finish_ns"], errors="coerce")
        if finish.isna().any():
            break
        start = float(pd.to_numeric(g["start_ns"], errors="coerce").min()) if prev is None else prev
        out.append(float(finish.max()) - start)
        prev = float(finish.max())
    return out


def model_ict_ms(analysis: dict, config: dict, paused_fraction: float = 0.0) -> float:
    """rat.md §2 / Table 1 as a bound on one iteration: the busiest rank's and rack's bytes
    over their links' rates, plus one one-way latency per dependent step."""
    t = config.get("topology", {})
    if t.get("kind", "leaf_spine") == "fat_tree":
        # a rack (edge switch) has k/2 uplinks at the one link rate
        c = float(t.get("link_gbps", 100.0)) * 1e9 / 8
        u = c * int(t.get("k", 4)) / 2
        hops = 6
    else:
        c = float(t.get("host_link_gbps", 100.0)) * 1e9 / 8
        u = float(t.get("uplink_gbps", 100.0)) * int(t.get("uplinks_per_leaf", 4)) * 1e9 / 8
        hops = 4
    host = max(analysis["max_rank_send_bytes"], analysis["max_rank_recv_bytes"]) / c
    rack = max(analysis["max_rack_out_bytes"], analysis["max_rack_in_bytes"]) / u
    latency = analysis["dependent_steps"] * hops * float(t.get("link_delay_ns", 10650)) * 1e-9
    return (max(host, rack) / max(1e-9, 1.0 - paused_fraction) + latency) * 1e3


def ict_metrics(flows, summary: dict, config: dict) -> dict:
    ict = [v / 1e6 for v in ict_per_iteration(flows)]
    iterations = int(flows["iteration"].nunique())
    analysis = summary.get("collective") or {}
    links = summary.get("link_bytes") or {}
    pauses = config.get("pauses", {})
    world = analysis.get("world") or 1
    paused = min(int(pauses.get("hosts", 0)), world) / world
    out = {
        "ict_mean_ms": sum(ict) / len(ict) if ict else math.nan,
        "ict_max_ms": max(ict) if ict else math.nan,
        "ict_model_ms": model_ict_ms(analysis, config, paused) if analysis else math.nan,
        "cross_rack_mb": links.get("leaf->spine", {}).get("payload", math.nan) / 1e6 / iterations,
        "table1_cross_rack_mb": analysis.get("cross_rack_bytes", math.nan) / 1e6,
        "dependent_steps": analysis.get("dependent_steps", math.nan),
        "iterations": iterations,
        "iterations_done": len(ict),
    }
    return out


def build_table(p: Plan, results: dict[int, RunResult]):
    """table.csv as a DataFrame: one row per run."""
    import pandas as pd

    rows = []
    for i, job in enumerate(p.jobs):
        res = results.get(i)
        if res is None:
            continue
        s = res.summary
        rows.append(
            {
                "reproduction": p.repro.name,
                "scenario": job.scenario,
                "model": job.model,
                "series": job.series,
                "x": job.x,
                "run": job.spec.name,
                "fidelity": job.fidelity,
                "sampled": job.sampled,
                **run_metrics(p.repro, job.dir, s, job.spec.scenario),
                "flows": s.get("flows"),
                "flows_finished": s.get("flows_finished"),
                "retransmits": s.get("retransmits"),
                "timeouts": s.get("timeouts"),
                "drops": sum((s.get("drops") or {}).values()),
                "sim_time_ms": (s.get("sim_time_ns") or 0) / 1e6,
                "events": s.get("events"),
                "wall_seconds": round(res.wall_seconds, 3),
                "fast_refused": job.refused,
            }
        )
    df = pd.DataFrame(rows)
    if p.repro.reduce.table is not None:
        p.repro.reduce.table(df)
    m = p.repro.normalise
    if m and len(df):
        first = df.sort_values("x").groupby(["scenario", "series"])[m].transform("first")
        df[f"{m}_norm"] = df[m] / first
    return df


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_x(repro: Reproduction, x: float) -> str:
    v = x * repro.x_scale
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:g}"


def _panels(df):
    """(scenario, label, sub-frame) in table order; the label is the model, or the scenario
    if models repeat (an override gave every scenario the same model)."""
    scens = list(dict.fromkeys(df["scenario"]))
    models = [str(df[df["scenario"] == s]["model"].iloc[0]) for s in scens]
    unique = all(models) and len(set(models)) == len(models)
    for scen, model in zip(scens, models):
        yield (
            scen,
            (model if unique else f"{scen} ({model})" if model else scen),
            df[df["scenario"] == scen],
        )


def pivot(repro: Reproduction, sub, metric: str, only: str | None = None):
    """Rows = series (in run order), columns = x (formatted), values = metric: packet
    level's where a point ran at both fidelities, or only the fidelity ``only``'s."""
    series = list(dict.fromkeys(sub["series"]))
    xs = sorted(dict.fromkeys(sub["x"]))
    cols = [fmt_x(repro, x) for x in xs]
    if only is not None:
        sub = sub[sub["fidelity"] == only]
    elif "fidelity" in sub:
        sub = sub.sort_values("fidelity", key=lambda c: c != "packet", kind="stable")
    table = []
    for s in series:
        row = []
        for x in xs:
            v = sub[(sub["series"] == s) & (sub["x"] == x)][metric]
            row.append(float(v.iloc[0]) if len(v) else math.nan)
        table.append(row)
    return series, cols, table


def fast_only(sub) -> set[tuple[str, float]]:
    """(series, x) of the points that ran in the fast mode only: `pivot` shows them marked."""
    if "fidelity" not in sub:
        return set()
    packet = set(zip(sub[sub["fidelity"] == "packet"]["series"], sub[sub["fidelity"] == "packet"]["x"]))
    fast = sub[sub["fidelity"] == "fast"]
    return {(s, x) for s, x in zip(fast["series"], fast["x"]) if (s, x) not in packet}


def _incomplete(sub) -> list[str]:
    bad = sub[sub["flows_finished"] != sub["flows"]]
    return [f"{r.series} @ {r.x:g}" for r in bad.itertuples()]


def write_markdown(p: Plan, df, path: Path) -> Path:
    repro = p.repro
    lines = [f"# {repro.title}", ""]
    cmd = f"gradwire reproduce {repro.name}" + (" --quick" if p.quick else "") + (" --fast" if p.fast else "")
    cmd += "".join(f" --set '{o}'" for o in p.overrides)
    lines.append(f"`{cmd}`: rows are {repro.series}, columns {repro.x_label}.")
    lines.append("")
    any_fast = False
    for scen, model, sub in _panels(df):
        fast = fast_only(sub)
        any_fast |= bool(fast)
        for m in repro.metrics:
            series, cols, table = pivot(repro, sub, m.key)
            xs = sorted(dict.fromkeys(sub["x"]))
            lines.append(f"### {model}: {m.label}")
            lines.append("")
            lines.append(f"| {repro.series} \\ {repro.x_label} | " + " | ".join(cols) + " |")
            lines.append("|---|" + "---:|" * len(cols))
            # iteration times are ~100 ms that differ in the tenths: two decimals
            fmt = (lambda v: "–" if math.isnan(v) else f"{v:,.2f}") if m.key.startswith("iter_") else _fmt
            for s, row in zip(series, table):
                cells = (fmt(v) + (" *" if (s, x) in fast else "") for v, x in zip(row, xs))
                lines.append(f"| {s} | " + " | ".join(cells) + " |")
            lines.append("")
        inc = _incomplete(sub)
        if inc:
            lines.append(
                f"Unfinished flows at the stop in {scen}: {', '.join(inc)} (metrics over finished flows only)."
            )
            lines.append("")
    if any_fast:
        lines += [
            f'*: the fast mode (`fidelity = "fast"`); its error beside packet level is in {fidelity.FIDELITY_MD}.',
            "",
        ]
    if repro.note:
        lines += [repro.note, ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def plot(p: Plan, df, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from gradwire.figure import save

    repro = p.repro
    panels = list(_panels(df))
    nr, nc = len(panels), len(repro.metrics)
    fig, axes = plt.subplots(nr, nc, figsize=(4.6 * nc, 3.4 * nr), squeeze=False)
    for r, (_scen, model, sub) in enumerate(panels):
        for c, m in enumerate(repro.metrics):
            ax = axes[r][c]
            # with --fast, packet level's line and the fast mode's (dotted, hollow) apart
            has_fast = "fidelity" in sub and bool((sub["fidelity"] == "fast").any())
            fast = pivot(repro, sub, m.key, only="fast")[2] if has_fast else None
            series, cols, table = pivot(repro, sub, m.key, only="packet" if fast else None)
            xs = np.arange(len(cols))
            vals = []
            for s, row in zip(series, table):
                y = np.array(row, dtype=float)
                if str(s).startswith("ideal"):
                    # fluid lower bounds: dashed, grey, x markers
                    ax.plot(xs, y, linestyle="--", marker="x", color="0.45" if "fair" in str(s) else "0.15", label=s)
                else:
                    (line,) = ax.plot(xs, y, marker="o", label=s)
                    fy = fast[series.index(s)] if fast else []
                    if any(v == v for v in fy):
                        ax.plot(xs, fy, marker="o", linestyle=":", mfc="white", color=line.get_color())
                        vals += [v for v in fy if v == v and v > 0]
                vals += [v for v in row if v == v and v > 0]
            if vals and max(vals) / min(vals) > 10:
                ax.set_yscale("log")
            ax.set_xticks(xs, cols)
            ax.set_xlabel(repro.x_label)
            ax.set_ylabel(m.label)
            ax.set_title(f"{model}: {m.label}", fontsize="medium")
            ax.grid(True, which="both", alpha=0.3)
            if r == 0 and c == 0:
                ax.legend(fontsize="small")
    title = repro.title + (" (quick)" if p.quick else "")
    if p.fast:
        title += "\nsolid: packet level; dotted, hollow: the fast mode (fidelity.md: its error where both ran)"
    fig.suptitle(title, fontsize="medium")
    return save(fig, path)


def write_outputs(
    p: Plan,
    results: dict[int, RunResult],
    out_dir: Path,
    wall: float,
    n_procs: int,
    cluster: str = "local",
    cluster_record: dict | None = None,
) -> dict:
    """table.csv, table.md, the figure, reproduce.json and per-scenario summary.csv;
    ``n_procs`` ran the runs: local processes, or the Ray cluster's CPUs (``cluster="ray"``)."""
    from gradwire.results import write_summary_csv

    out_dir = Path(out_dir)
    for short, _runs in p.plans:
        write_summary_csv(out_dir / short)
    df = build_table(p, results)
    paths = {}
    paths["table_csv"] = out_dir / TABLE_CSV
    df.to_csv(paths["table_csv"], index=False)
    paths["table_md"] = write_markdown(p, df, out_dir / TABLE_MD)
    paths["plot"] = plot(p, df, out_dir / f"{p.repro.name}.png")
    if p.repro.reduce.files is not None:
        paths.update(p.repro.reduce.files(p, results, out_dir))
    if p.fast:
        paths.update(fidelity.write_outputs(p, df, out_dir))
    manifest = {
        "name": p.repro.name,
        "title": p.repro.title,
        "quick": p.quick,
        "fast": p.fast,
        "overrides": p.overrides,
        "scenarios": [{"name": short, "origin": runs.source.origin} for short, runs in p.plans],
        "wall_seconds": round(wall, 3),
        "jobs": n_procs,
        "cluster": cluster,
        **({"ray": cluster_record} if cluster_record else {}),
        "cpu_count": os.cpu_count(),
        "runs": [
            {
                "scenario": j.scenario,
                "run": j.spec.name,
                "params": j.spec.params,
                "fidelity": j.fidelity,
                **({"fast_refused": j.refused} if j.refused else {}),
                "cost_estimate": j.cost,
                "wall_seconds": round(results[i].wall_seconds, 3) if i in results else None,
                "events": results[i].summary.get("events") if i in results else None,
            }
            for i, j in enumerate(p.jobs)
        ],
    }
    paths["manifest"] = out_dir / MANIFEST
    paths["manifest"].write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return {"table": df, "paths": paths}


def finished_runs(p: Plan, out_dir: Path) -> dict[int, RunResult]:
    """Runs already in ``out_dir`` with exactly the planned configuration (per the
    scenario's runs.json) and a summary.json: what ``--resume`` keeps."""
    from gradwire.runner import read_manifest

    done: dict[int, RunResult] = {}
    old = {}
    for short, _runs in p.plans:
        m = read_manifest(Path(out_dir) / short) or {}
        for r in m.get("runs", []):
            old[(short, r.get("name"))] = r.get("config")
    for i, job in enumerate(p.jobs):
        summary_path = job.dir / "summary.json"
        if old.get((job.scenario, job.spec.name)) != job.spec.scenario or not summary_path.is_file():
            continue
        try:
            summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if (job.dir / "flows.csv").is_file():
            done[i] = RunResult(
                job.spec.name,
                job.spec.params,
                job.dir,
                summary,
                float(summary.get("wall_seconds") or 0.0),
            )
    return done


def prepare_dirs(p: Plan, out_dir: Path) -> None:
    for short, runs in p.plans:
        write_manifest(Path(out_dir) / short, runs)


# ---------------------------------------------------------------------------------------
# The registry: `gradwire reproduce NAME`


@dataclass(frozen=True)
class TuningFigure:
    """A figure of ByteScheduler's simulated training job under its tuners (AutoByte's):
    no scenario sweep; `run` ("module:function", imported when run) draws it into a
    directory, and AutoByte's network needs torch (gradwire.tune.figures.reproduce)."""

    name: str
    title: str
    run: str


FCT = Reduction("fct", fct_run)
BST = Reduction("bst", bst_run)
ICT = Reduction("ict", ict_run)
PCN = Reduction("pcn", pcn_run, table=pcn_table, files=pcn_files)


def dlcp_figure(fig: str, title: str, quick: tuple[str, ...], **kw: Any) -> Reproduction:
    """A DLCP figure: FCT of the PS exchange of ResNet50 and Inception-v3 (a scenario each,
    ``repro/dlcp-<fig>-<model>``); ``--quick`` runs it on the small leaf-spine, plus ``quick``."""
    scenarios = tuple(f"repro/dlcp-{fig}-{model}" for model in ("resnet50", "inception_v3"))
    return Reproduction(
        name=f"dlcp-{fig}", title=title, scenarios=scenarios, reduce=FCT, quick=SMALL_LEAF_SPINE + quick, **kw
    )


def rat_figure(fig: str, title: str, quick: tuple[str, ...] = (), note: str = "", **kw: Any) -> Reproduction:
    """A RAT figure: ICT of the allreduce schemes, scenario ``repro/rat-<fig>``; ``--quick``
    shrinks the job (RAT_QUICK, plus ``quick``); ``note`` follows ICT_NOTE."""
    return Reproduction(
        name=f"rat-{fig}",
        title=title,
        scenarios=(f"repro/rat-{fig}",),
        reduce=ICT,
        quick=RAT_QUICK + quick,
        note=ICT_NOTE + note,
        **kw,
    )


def pcn_figure(fig: str, title: str, *metrics: Metric) -> Reproduction:
    """A PCN figure: the DDLgen scenario's bursts per k, PCN off and on; ``--quick`` keeps
    two iterations at the paper's k = 1/4."""
    return Reproduction(
        name=f"pcn-{fig}",
        title=title,
        scenarios=("repro/pcn-ddlgen",),
        x="k",
        x_label="k",
        metrics=metrics,
        reduce=PCN,
        quick=PCN_QUICK,
        quick_x=(0.25,),
        note=PCN_NOTE,
    )


#: Every reproduction, by name: scenario sweeps and tuning figures.
REPRODUCTIONS: dict[str, Reproduction | TuningFigure] = {
    r.name: r
    for r in (
        dlcp_figure(
            "fig14",
            "DLCP Fig. 14: mean and p99 FCT of the PS gradient exchange vs number of workers",
            x="workers",
            x_label="workers",
            metrics=FCT_METRICS + ITER_METRICS,
            quick=(
                'sweep.workers=[{ name = "4", "workload.workers" = 4, "workload.servers" = 1 },'
                ' { name = "8", "workload.workers" = 8, "workload.servers" = 2 }]',
            ),
        ),
        dlcp_figure(
            "fig16",
            "DLCP Fig. 16: p99 FCT under RTOmin 1, 5 and 10 ms (64 workers, 16 servers)",
            x="transport.rto_min_us",
            x_label="RTOmin (ms)",
            x_scale=1e-3,
            metrics=(FCT_METRICS[1], FCT_METRICS[0]) + ITER_METRICS,
            quick=("workload.workers=4", "workload.servers=1"),
            note="RTOmin applies to the TCP-based schemes (DCTCP, PIAS); pFabric uses its own fixed "
            "timeout (transport.pfabric_rto_us) and DLCP does not use it (its control messages have "
            "transport.ctrl_rto_us), so their lines are flat by design.",
        ),
        Reproduction(
            name="ltp-bst",
            title="LTP §V-C: batch synchronization time under random link loss (8 workers, 1 PS)",
            scenarios=("repro/ltp-bst-resnet50", "repro/ltp-bst-vgg16"),
            x="topology.link_loss_rate",
            x_label="link loss rate (%)",
            x_scale=100.0,
            metrics=BST_METRICS,
            reduce=BST,
            quick=(
                "topology.hosts_per_leaf=4",
                "workload.workers=3",
                "workload.iterations=3",
            ),
            quick_x=(0.0, 0.001, 0.01),
            note="BST of an iteration = last finish − first start of its flows; median and p99 over the "
            "iterations (nearest rank: with 10 iterations p99 is the maximum).",
        ),
        rat_figure(
            "fig4",
            "RAT Fig. 4: ICT of the 97 MB ResNet50 allreduce vs oversubscription (2 spines, 4 leaves, 40G)",
            x="oversubscription",
            x_label="oversubscription (x:1)",
            metrics=(
                *ICT_METRICS,
                Metric("cross_rack_mb", "cross-rack MB per iteration (links)"),
            ),
            quick_x=(2.0, 4.0),
        ),
        rat_figure(
            "fig5",
            "RAT Fig. 5: ICT with k paused nodes re-drawn every d = 5 ms, normalised to k = 0 (64 hosts, 2 racks, 40G)",
            x="k",
            x_label="paused nodes k",
            metrics=(Metric("ict_mean_ms_norm", "ICT / ICT at k = 0"), *ICT_METRICS),
            normalise="ict_mean_ms",
            quick=("topology.hosts_per_leaf=8", "workload.servers=16", "pauses.period_us=500.0"),
            quick_x=(0.0, 2.0),
            note=" With k nodes paused out of n, a node sends 1 − k/n of the time on average, so the model divides "
            "the bandwidth term by 1 − k/n; it has no term for chain blocking, which is what makes ring slower.",
        ),
        pcn_figure(
            "fig9",
            "PCN Fig. 9: bottleneck queue when each burst starts and at its peak, PCN off / on vs k",
            Metric("start_queue_pkts", "queue at burst start (packets)"),
            Metric("max_queue_pkts", "max queue per burst (packets)"),
        ),
        pcn_figure(
            "fig10",
            "PCN Fig. 10 and the k sweep: burst completion time, training and background throughput",
            Metric("bct_ms", "burst completion time (ms)"),
            Metric("train_gbps", "training throughput (Gbit/s)"),
            Metric("bg_gbps", "background throughput (Gbit/s)"),
            Metric("bg_lost_pct", "background lost vs off (%)"),
            Metric("wait_ms", "START to burst start (ms)"),
        ),
        TuningFigure(
            "autobyte-fig5",
            "AutoByte converges to the grid optimum from two start points (autobyte.md Fig. 5)",
            "gradwire.tune.figures:fig5",
        ),
        TuningFigure(
            "autobyte-fig6",
            "AutoByte vs BO under host bandwidth switched 10 ↔ 3 Gbit/s (Fig. 6)",
            "gradwire.tune.figures:fig6",
        ),
        TuningFigure(
            "autobyte-fig7", "AutoByte vs BO as a second and a third job join (Fig. 7)", "gradwire.tune.figures:fig7"
        ),
        TuningFigure(
            "autobyte-fig8",
            "No scheduling vs BO vs AutoByte over bandwidths, models, PS and ring (Figs. 8, 9)",
            "gradwire.tune.figures:fig8",
        ),
    )
}


def get(name: str) -> Reproduction | TuningFigure:
    try:
        return REPRODUCTIONS[name]
    except KeyError:
        known = ", ".join(REPRODUCTIONS)
        raise scenario_error(f"no reproduction named `{name}` (known: {known})") from None
