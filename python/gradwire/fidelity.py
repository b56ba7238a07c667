"""`gradwire reproduce --fast`: a reproduction's largest points in the simulator's fast
mode (``fidelity = "fast"``), each beside a point where both fidelities run, so the table
shows the fast mode's error where it is used.

Per series (one line of the figure), the largest x runs in the fast mode only and the next
x at both fidelities; a series with one x runs both there. A point the fast mode refuses
(by key: a transport, topology or workload it was not validated on, docs/scenarios.md#fast)
stays at packet level, and the refusal is reported. The next x samples the same share of
its servers as the largest (``fast.servers``), so its error is the one the largest point
carries. ``fidelity.csv`` and ``fidelity.md`` give, where both ran, each metric at both
fidelities, the error and the speed-up.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gradwire._core import ScenarioError
from gradwire.runner import RunSpec, ScenarioRuns, plan
from gradwire.scenarios import scenario_error

if TYPE_CHECKING:
    from gradwire.reproduce import Job, Plan

#: Appended to a point's run name for its fast-mode run (and its directory).
SUFFIX = ",fidelity=fast"
FIDELITY_CSV = "fidelity.csv"
FIDELITY_MD = "fidelity.md"
#: The override that selects the fast mode.
FAST = 'fidelity="fast"'


def fast_cost(cost: float, config: dict) -> float:
    """A fast run's share of its packet-level cost: the servers it samples over all (a
    cover runs every sample: all of it)."""
    fast = config.get("fast", {})
    servers = config.get("workload", {}).get("servers") or 1
    return cost if fast.get("cover") else cost * min(1.0, fast.get("servers", servers) / servers)


def add_fast_runs(p: Plan, short: str, runs: ScenarioRuns, overrides: list[str]) -> None:
    """Turn the jobs of scenario ``short`` into the fast plan: each series' largest x fast,
    the next at both fidelities, sampling the same share of its servers as the largest
    (so its error is the one the largest point carries); refusals stay packet level with
    ``job.refused`` set. ``runs.runs`` follows, so runs.json lists what runs."""
    plans: dict[int | None, dict[str, RunSpec]] = {}

    def fast_spec(job: Job, servers: int | None = None) -> RunSpec:
        if servers not in plans:
            extra = [FAST, *([f"fast.servers={servers}"] if servers else [])]
            try:
                plans[servers] = {r.run.name: r for r in plan(runs.source, [*overrides, *extra]).runs}
            except ScenarioError as e:
                key = getattr(e, "key", "")
                raise scenario_error(f"in {runs.source.origin}, with {' '.join(extra)}: {e}", key) from None
        return RunSpec(plans[servers][job.spec.run.name].run, SUFFIX)

    def add(job: Job, spec: RunSpec, alone: bool) -> float | None:
        """Plan `spec` as `job`'s fast run; the share of servers it samples (None: refused)."""
        try:
            kept, of = spec.run.check()
        except ScenarioError as e:
            job.refused = str(e)
            return None
        twin = replace(
            job,
            spec=spec,
            dir=job.dir.parent / spec.name,
            fidelity="fast",
            sampled=f"{kept} of {of}",
            cost=fast_cost(job.cost, spec.scenario),
        )
        if alone:
            p.jobs[next(i for i, j in enumerate(p.jobs) if j is job)] = twin
        else:
            p.jobs.append(twin)
        return kept / of

    series: dict[str, list[Job]] = {}
    for j in p.jobs:
        if j.scenario == short:
            series.setdefault(j.series, []).append(j)
    for jobs in series.values():
        xs = sorted({j.x for j in jobs})
        shares = [add(j, fast_spec(j), alone=len(xs) > 1) for j in jobs if j.x == xs[-1]]
        share = next((x for x in shares if x is not None), None)
        if len(xs) > 1:
            for j in (j for j in jobs if j.x == xs[-2]):
                # as many servers as the largest point's share (m may be a fraction)
                servers = int(j.spec.scenario.get("workload", {}).get("servers") or 1)
                asked = max(1, round(servers * share)) if share is not None else None
                add(j, fast_spec(j, asked), alone=False)
    runs.runs = [j.spec for j in p.jobs if j.scenario == short]


def refusals(jobs: list[Job]) -> dict[str, list[str]]:
    """The fast mode's refusals: its message -> the points (``model series @ x``) it refused."""
    out: dict[str, list[str]] = {}
    for j in jobs:
        if j.refused:
            out.setdefault(j.refused, []).append(f"{j.model or j.scenario} {j.series} @ {j.x:g}")
    return out


def comparison(p: Plan, df):
    """fidelity.csv as a DataFrame: one row per point run fast and metric, with the
    packet-level value and the error where that point ran at both fidelities."""
    import pandas as pd

    rows = []
    if "fidelity" not in df or not len(df):
        return pd.DataFrame(rows)
    keys = ["scenario", "series", "x"]
    packet = df[df["fidelity"] == "packet"].set_index(keys)
    for r in df[df["fidelity"] == "fast"].itertuples(index=False):
        k = (r.scenario, r.series, r.x)
        both = k in packet.index
        pk = packet.loc[k] if both else None
        for m in p.repro.metrics:
            fv = float(getattr(r, m.key))
            pv = float(pk[m.key]) if both else math.nan
            rows.append(
                {
                    "scenario": r.scenario,
                    "model": r.model,
                    "series": r.series,
                    "x": r.x,
                    "sampled": r.sampled,
                    "metric": m.key,
                    "packet": pv,
                    "fast": fv,
                    "error_pct": 100 * (fv / pv - 1) if both and pv else math.nan,
                    "packet_wall_s": float(pk["wall_seconds"]) if both else math.nan,
                    "fast_wall_s": float(r.wall_seconds),
                }
            )
    return pd.DataFrame(rows)


def write_markdown(p: Plan, cmp, path: Path) -> Path:
    from gradwire.reproduce import fmt_x

    repro = p.repro
    label = {m.key: m.label for m in repro.metrics}
    lines = [f"# {repro.title}: the fast mode beside packet level", ""]
    lines += [
        'Each series\' largest point ran in the fast mode (`fidelity = "fast"`), its next point at both '
        "fidelities. Error = fast / packet − 1 where both ran; speed-up = packet / fast wall time.",
        "",
    ]
    if len(cmp):
        both = cmp[cmp["packet"].notna()]
        if len(both):
            lines += [
                f"| scenario | {repro.series} | {repro.x_label} | servers sampled | metric | packet | fast | error "
                "| speed-up |"
            ]
            lines += ["|---|---|---:|---:|---|---:|---:|---:|---:|"]
            for r in both.itertuples(index=False):
                speed = r.packet_wall_s / r.fast_wall_s if r.fast_wall_s else math.nan
                lines.append(
                    f"| {r.scenario} | {r.series} | {fmt_x(repro, r.x)} | {r.sampled} | {label[r.metric]} | {r.packet:,.2f} | "
                    f"{r.fast:,.2f} | {r.error_pct:+.1f} % | {speed:.1f}× |"
                )
            lines.append("")
        only = cmp[cmp["packet"].isna()].drop_duplicates(["scenario", "series", "x"])
        if len(only):
            pts = ", ".join(
                f"{r.scenario} {r.series} @ {fmt_x(repro, r.x)} ({r.sampled} servers, {r.fast_wall_s:.1f} s)"
                for r in only.itertuples()
            )
            lines += [f"Fast mode only: {pts}.", ""]
    refused = refusals(p.jobs)
    if refused:
        lines += ["Refused by the fast mode, run at packet level:", ""]
        lines += [f"- {', '.join(pts)}: {msg}" for msg, pts in refused.items()]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_outputs(p: Plan, df, out_dir: Path) -> dict:
    cmp = comparison(p, df)
    csv = Path(out_dir) / FIDELITY_CSV
    cmp.to_csv(csv, index=False)
    return {"fidelity_csv": csv, "fidelity_md": write_markdown(p, cmp, Path(out_dir) / FIDELITY_MD)}
