"""Running every run of a scenario, with a progress bar for the slow ones."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from gradwire._core import Run, ScenarioError, Simulation, load_scenario
from gradwire.scenarios import ScenarioSource

#: Events processed per call into Rust; a few tens of milliseconds in a release build.
STEP_EVENTS = 200_000
#: The progress bar appears only once a run has lasted this long (seconds).
SHOW_PROGRESS_AFTER = 1.0
#: Written next to the run directories: run names, sweep parameters and typed configs.
MANIFEST = "runs.json"


@dataclass
class RunSpec:
    """One run of a scenario (a point of its sweep), validated but not yet simulated."""

    run: Run
    """The typed, validated scenario (kept in Rust), as accepted by :class:`gradwire._core.Simulation`."""
    suffix: str = ""
    """Appended to the run's name: a second run of the same point (``,fidelity=fast``)."""

    @property
    def name(self) -> str:
        return self.run.name + self.suffix

    @property
    def params(self) -> dict[str, str]:
        return self.run.params

    @property
    def scenario(self) -> dict:
        """The typed scenario as a dict, every default filled in (a copy, to read)."""
        return self.run.config()


@dataclass
class RunResult:
    name: str
    params: dict[str, str]
    dir: Path
    summary: dict
    wall_seconds: float = 0.0
    """Wall time of the whole run as seen from Python (construction + stepping)."""


@dataclass
class ScenarioRuns:
    source: ScenarioSource
    overrides: list[str]
    runs: list[RunSpec] = field(default_factory=list)


def plan(source: ScenarioSource, overrides: Sequence[str] = ()) -> ScenarioRuns:
    """Load, override, sweep and validate a scenario; raises ScenarioError on bad input."""
    overrides = list(overrides)
    runs = [RunSpec(r) for r in load_scenario(source.text, overrides)]
    return ScenarioRuns(source, overrides, runs)


def _progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("flows"),
        TextColumn("[cyan]{task.fields[sim]}"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def simulate(
    spec: RunSpec,
    out_dir: Path,
    console: Console | None = None,
    show_progress: bool = True,
    step_events: int = STEP_EVENTS,
) -> RunResult:
    """Simulate one run to completion and write its files into ``out_dir``."""
    t0 = time.perf_counter()
    sim = Simulation(spec.run)
    bar: Progress | None = None
    task = None
    try:
        while not sim.step(step_events):
            if not show_progress or console is None:
                continue
            elapsed = time.perf_counter() - t0
            if bar is None and elapsed < SHOW_PROGRESS_AFTER:
                continue
            p = sim.progress()
            fields = {
                "sim": f"t = {p['now_ns'] / 1e6:,.3f} / {p['stop_ns'] / 1e6:,.0f} ms",
                "rate": f"{p['events'] / max(elapsed, 1e-9) / 1e6:.1f} M ev/s",
            }
            if bar is None:
                bar = _progress_bar(console)
                bar.start()
                task = bar.add_task(spec.name, total=max(p["flows_total"], 1), **fields)
            # a fast.cover's total grows to the exact count as its samples are built
            bar.update(task, completed=p["flows_done"], total=max(p["flows_total"], 1), **fields)
    finally:
        if bar is not None:
            bar.stop()
    summary = sim.write_outputs(str(out_dir))
    return RunResult(spec.name, spec.params, out_dir, summary, time.perf_counter() - t0)


def write_manifest(out_dir: Path, plan_: ScenarioRuns) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "scenario": plan_.source.name,
        "origin": plan_.source.origin,
        "overrides": plan_.overrides,
        "runs": [{"name": r.name, "params": r.params, "config": r.scenario} for r in plan_.runs],
    }
    path = out_dir / MANIFEST
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def read_manifest(out_dir: Path) -> dict | None:
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def default_out_dir(scenario: str, overrides: Sequence[str]) -> Path:
    """``results/<scenario>``, or ``results/<scenario>--<overrides>`` when keys are overridden,
    so that a run with other settings never lands on top of the plain scenario's results."""
    base = Path("results") / scenario
    if not overrides:
        return base
    slug = re.sub(r"[^A-Za-z0-9._=+-]+", "_", ",".join(overrides)).strip("_")
    if len(slug) > 80:
        digest = hashlib.sha1(",".join(overrides).encode()).hexdigest()[:8]
        slug = f"{slug[:60]}-{digest}"
    return base.with_name(f"{base.name}--{slug}")


def manifest_clash(out_dir: Path, plan_: ScenarioRuns) -> str | None:
    """Why ``out_dir`` holds results of another configuration than ``plan_``, or None when it
    holds none (or the same runs)."""
    old = read_manifest(out_dir)
    if old is None:
        return None
    mine = [{"name": r.name, "config": r.scenario} for r in plan_.runs]
    theirs = [{"name": r.get("name"), "config": r.get("config")} for r in old.get("runs", [])]
    if mine == theirs:
        return None
    if old.get("scenario") != plan_.source.name:
        return f"scenario {old.get('scenario')!r}, not {plan_.source.name!r}"
    return f"overrides {old.get('overrides', [])}, not {plan_.overrides}"


def run_all(
    plan_: ScenarioRuns,
    out_dir: Path,
    console: Console | None = None,
    show_progress: bool = True,
    on_done=None,
    cluster: str = "local",
) -> list[RunResult]:
    """Run every run of ``plan_`` into ``out_dir/<run>/`` (and write ``out_dir/runs.json``):
    one after the other here, or with ``cluster="ray"`` as tasks on the Ray cluster this
    process is connected to (:mod:`gradwire.cluster`), results in the same layout."""
    out_dir = Path(out_dir)
    write_manifest(out_dir, plan_)
    if cluster == "ray":
        return _run_on_cluster(plan_, out_dir, console, show_progress, on_done)
    results = []
    for spec in plan_.runs:
        res = simulate(spec, out_dir / spec.name, console=console, show_progress=show_progress)
        results.append(res)
        if on_done is not None:
            on_done(res)
    return results


def _run_on_cluster(plan_: ScenarioRuns, out_dir: Path, console, show_progress: bool, on_done) -> list[RunResult]:
    from gradwire import cluster

    tasks = [cluster.Task(k, spec.name, spec, out_dir / spec.name) for k, spec in enumerate(plan_.runs)]
    bar = None
    if show_progress and console is not None:
        bar = Progress(
            TextColumn("[bold]runs"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[cyan]{task.fields[where]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        bar_task = bar.add_task("runs", total=len(tasks), where=cluster.describe())
        bar.start()

    def done(_task, res: RunResult) -> None:
        if bar is not None:
            bar.advance(bar_task)
        if on_done is not None:
            on_done(res)

    def tick(where: str) -> None:
        if bar is not None:
            bar.update(bar_task, where=where)

    try:
        results, _record = cluster.run_tasks(tasks, on_done=done, on_tick=tick)
    except cluster.TaskFailed as e:
        if e.lost:
            raise
        raise ScenarioError(e.message) from None  # as a local run raises it
    finally:
        if bar is not None:
            bar.stop()
    return [results[k] for k in range(len(tasks))]
