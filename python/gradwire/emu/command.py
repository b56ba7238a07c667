"""``gradwire emulate SCENARIO``: run a job on an emulated network, every sweep point."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from gradwire.extras import MissingExtra, require

from . import job, report
from .binary import EmulatorUnavailable, unavailable_reason

BUILTIN = Path(__file__).parent / "scenarios"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN.glob("*.toml"))


def resolve(scenario: str) -> Path:
    p = Path(scenario)
    if p.exists():
        return p
    if (BUILTIN / f"{scenario}.toml").exists():
        return BUILTIN / f"{scenario}.toml"
    raise job.JobError(f"no scenario file {scenario!r} and no built-in of that name ({', '.join(builtin_names())})")


def emulate(
    scenario: str,
    out: Path | None,
    sets: list[str],
    plot: bool,
    console: Console,
    err: Console,
    timeout: float = 300.0,
    gbps: float | str | None = None,
) -> int:
    """Returns an exit code: 0 ok, 1 a run failed, 2 bad input, 3 cannot emulate here.
    `gbps`: the host links' rate, bytes scaled to the same wire time (`job.at_rate`);
    `"auto"`: a rate this machine's cores keep up with (`job.auto_rate`)."""
    try:
        path = resolve(scenario)
        if gbps == "auto":
            gbps, why = job.auto_rate(path, sets, builtin=path.parent == BUILTIN)
            if gbps is not None:
                console.print(f"[yellow]{escape(why)}[/]")
        if gbps is not None:
            sets = job.at_rate(path, sets, gbps)
        name, points = job.plan(path, sets)
    except job.JobError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}")
        return 2
    if any(job.needs_torch(pt.job) for pt in points):
        try:
            require(f"gradwire emulate {scenario}", "torch", ("torch",))
        except MissingExtra as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}")
            return 2
    reason = unavailable_reason()
    if reason:
        err.print(f"[bold red]cannot emulate here:[/] {escape(reason)}")
        return 3
    out_dir = out or Path("results") / f"emulate-{name}"
    console.print(f"[bold]{escape(name)}[/] ({escape(str(path))}): {len(points)} run(s) -> {escape(str(out_dir))}")
    switch: dict[str, dict] = {}

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # tear down as on Ctrl-C
    try:
        failed = False
        for i, pt in enumerate(points, 1):
            console.print(f"[{i}/{len(points)}] {escape(pt.name)}")
            try:
                s = job.run_point(
                    path,
                    pt,
                    out_dir / pt.name,
                    log=lambda m: console.print(f"    {escape(m)}"),
                    timeout=timeout,
                )
            except EmulatorUnavailable as e:
                err.print(f"[bold red]error:[/] {escape(str(e))}")
                return 2 if "is not an emulator key" in str(e) or "must be" in str(e) else 3
            switch[pt.name] = s
            failed |= any(r.get("error") for r in s["rows"])
            if not s["packets"]["conserved"]:
                err.print(f"[bold red]warning:[/] packet conservation violated in {escape(pt.name)}: {s['packets']}")
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted[/]: the network is torn down; finished runs are in {escape(str(out_dir))}")
        return 130
    df = report.collect(out_dir, [pt.name for pt in points])
    summary = report.summarize(df)
    summary.to_csv(out_dir / "summary.csv", index=False)
    (out_dir / "switch.json").write_text(json.dumps(switch, indent=2))
    console.print(report.table(summary, switch))
    hint = report.cpu_bound_hint(summary)
    if hint:
        err.print(f"[yellow]note:[/] {escape(hint)}")
    if plot:
        p = report.plot(out_dir, summary)
        if p:
            console.print(f"figure: {escape(str(p))}")
    console.print(f"tables: {escape(str(out_dir / 'summary.csv'))}, per run: results.csv, summary.json, switch.json")
    return 1 if failed else 0
