"""The ``gradwire`` command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gradwire import __version__
from gradwire._core import ScenarioError
from gradwire.scenarios import DEFAULT_SCENARIO, builtin_scenarios, resolve_scenario

app = typer.Typer(
    name="gradwire",
    help="gradwire: packet-level simulation of data-parallel training traffic.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)

#: Exit code for bad input (scenario, override, arguments).
EXIT_BAD_INPUT = 2


def _width(stream) -> int | None:
    """Full width on a terminal; 160 columns when piped, so tables are not cut in logs."""
    try:
        return None if stream.isatty() else 160
    except (AttributeError, ValueError):
        return 160


def _out() -> Console:
    return Console(highlight=False, width=_width(sys.stdout))


def _err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True, width=_width(sys.stderr))


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    _err().print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gradwire {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", "-V", help="Show the version and exit.", callback=_version, is_eager=True),
    ] = None,
) -> None:
    """gradwire: packet-level simulation of data-parallel training traffic."""


def _fmt_us(v) -> str:
    try:
        if v is None or v != v:  # None or NaN
            return "-"
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    except TypeError:
        return "-"


def _results_table(df) -> Table:
    t = Table(
        title="FCT in µs",
        title_style="bold",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        padding=(0, 1),
    )
    t.add_column("run", style="bold", no_wrap=True)
    for col in ("flows", "mean", "p50", "p99", "max", "retx", "RTOs", "drops", "ECN", "wall"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in df.to_dict("records"):
        # All finished: just the count; else finished/total in yellow.
        flows = f"{r['flows']}"
        if r["flows_finished"] != r["flows"]:
            flows = f"[yellow]{r['flows_finished']}/{r['flows']}[/]"
        t.add_row(
            escape(str(r["run"])),
            flows,
            _fmt_us(r["fct_mean_us"]),
            _fmt_us(r["fct_p50_us"]),
            _fmt_us(r["fct_p99_us"]),
            _fmt_us(r["fct_max_us"]),
            f"{r['retransmits']:,}",
            f"{r['timeouts']:,}",
            f"{r['drops_total']:,}",
            f"{r['ecn_marks']:,}",
            f"{r['wall_seconds']:.2f}s",
        )
    return t


@app.command()
def sim(
    scenario: Annotated[
        str,
        typer.Argument(help="A scenario file (.toml) or a built-in scenario name (see `gradwire scenarios`)."),
    ] = DEFAULT_SCENARIO,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Results directory [default: results/<scenario>]."),
    ] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Random seed (same seed, same results).")] = None,
    sets: Annotated[
        Optional[list[str]],
        typer.Option("--set", "-s", metavar="KEY=VALUE", help="Override a scenario key, e.g. --set topology.spines=2 (repeatable)."),
    ] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Do not draw the figures.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar, table or per-run lines.")] = False,
) -> None:
    """Run a scenario (every point of its sweep) and write flows, summaries and plots."""
    from gradwire import runner
    from gradwire.results import collect, write_summary_csv

    overrides = list(sets or [])
    if seed is not None:
        overrides.append(f"seed={seed}")
    try:
        source = resolve_scenario(scenario)
    except ScenarioError as e:
        raise _fail(str(e)) from None
    try:
        plan = runner.plan(source, overrides)
    except ScenarioError as e:
        raise _fail(f"in {source.origin}: {e}") from None

    out_dir = out if out is not None else Path("results") / source.name
    console = _out()
    if not quiet:
        n = len(plan.runs)
        console.print(f"[bold]{escape(source.name)}[/] ({escape(source.origin)}): {n} run{'s' if n != 1 else ''} -> {escape(str(out_dir))}")

    def done(res: runner.RunResult) -> None:
        if quiet:
            return
        s = res.summary
        ok = s["flows_finished"] == s["flows"]
        mark = "[green]✓[/]" if ok else "[yellow]![/]"
        console.print(
            f"{mark} {escape(res.name)}: {s['flows_finished']}/{s['flows']} flows, "
            f"{s['events']:,} events in {res.wall_seconds:.2f} s"
        )

    try:
        runner.run_all(plan, out_dir, console=console, show_progress=not quiet, on_done=done)
    except ScenarioError as e:  # checks that need the built topology (port and link names)
        raise _fail(f"in {source.origin}: {e}") from None
    except OSError as e:
        raise _fail(f"cannot write results to {out_dir}: {e}", code=1) from None
    except KeyboardInterrupt:
        _err().print(f"[yellow]interrupted[/]: finished runs are in {escape(str(out_dir))}")
        raise typer.Exit(130) from None

    summary_csv = write_summary_csv(out_dir)
    df = collect(out_dir)
    plots = []
    if not no_plot:
        from gradwire.plot import plot_all

        plots = plot_all(out_dir, df)
    unconserved = df.loc[~df["conserved"].astype(bool), "run"].tolist()
    if unconserved:
        _err().print(f"[bold red]warning:[/] packet conservation violated in: {escape(', '.join(map(str, unconserved)))}")
    if not quiet:
        console.print(_results_table(df))
        console.print("[bold]outputs:[/]")
        for name, _p, d in _run_dirs(out_dir):
            files = ", ".join(f for f in ("flows.csv", "summary.json", "queues.csv") if (d / f).exists())
            console.print(f"  {escape(str(d))}/  ({files})")
        console.print(f"  {escape(str(summary_csv))}")
        for p in plots:
            console.print(f"  {escape(str(p))}")


def _run_dirs(out_dir: Path):
    from gradwire.results import run_dirs

    return run_dirs(out_dir)


@app.command()
def plot(
    results_dir: Annotated[Path, typer.Argument(help="A results directory written by `gradwire sim`.")],
) -> None:
    """(Re)draw the figures (and summary.csv) of a results directory."""
    from gradwire.plot import plot_all
    from gradwire.results import run_dirs, write_summary_csv

    if not results_dir.is_dir():
        raise _fail(f"{results_dir} is not a directory")
    if not run_dirs(results_dir):
        raise _fail(f"{results_dir} holds no runs (no */summary.json)")
    console = _out()
    paths = [write_summary_csv(results_dir), *plot_all(results_dir)]
    for p in paths:
        console.print(f"  {escape(str(p))}")


@app.command()
def scenarios(
    name: Annotated[Optional[str], typer.Argument(help="Print this built-in scenario's TOML.")] = None,
) -> None:
    """List the built-in scenarios (or print one)."""
    if name is not None:
        try:
            src = resolve_scenario(name)
        except ScenarioError as e:
            raise _fail(str(e)) from None
        typer.echo(src.text, nl=not src.text.endswith("\n"))
        return
    t = Table(header_style="bold", show_lines=False)
    t.add_column("scenario", style="bold cyan", no_wrap=True)
    t.add_column("description")
    for n, desc in builtin_scenarios().items():
        t.add_row(escape(n), escape(desc))
    _out().print(t)
    _out().print("Run one with [bold]gradwire sim NAME[/]; print its file with [bold]gradwire scenarios NAME[/].")


def _reproductions_table() -> Table:
    from gradwire import reproduce as rp

    t = Table(header_style="bold")
    t.add_column("reproduction", style="bold cyan", no_wrap=True)
    t.add_column("figure")
    t.add_column("scenarios")
    t.add_column("runs", justify="right")
    for r in rp.REPRODUCTIONS.values():
        try:
            n = str(len(rp.plan_reproduction(r, Path(".")).jobs))
        except ScenarioError:
            n = "?"
        t.add_row(escape(r.name), escape(r.title), escape(", ".join(r.scenarios)), n)
    return t


def _pivot_table(repro, model: str, metric, sub) -> Table:
    from gradwire import reproduce as rp

    series, cols, rows = rp.pivot(repro, sub, metric.key)
    t = Table(
        title=f"{model}: {metric.label}",
        title_style="bold",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
    )
    t.add_column(f"{repro.series} \\ {repro.x_label}", style="bold", no_wrap=True)
    for c in cols:
        t.add_column(c, justify="right", no_wrap=True)
    for s, row in zip(series, rows):
        t.add_row(escape(str(s)), *(rp._fmt(v) for v in row))
    return t


@app.command()
def reproduce(
    name: Annotated[
        Optional[str],
        typer.Argument(help="A reproduction (see --list), e.g. dlcp-fig14, dlcp-fig16, ltp-bst."),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Results directory [default: results/<name>]."),
    ] = None,
    jobs: Annotated[
        Optional[int],
        typer.Option("--jobs", "-j", min=1, help="Runs in parallel, one process each [default: all cores]."),
    ] = None,
    sets: Annotated[
        Optional[list[str]],
        typer.Option("--set", "-s", metavar="KEY=VALUE", help="Override a key in every scenario of the reproduction (repeatable)."),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option("--quick", help="A small version (8 hosts, few workers / iterations): seconds instead of minutes; a smoke test, not the paper's numbers."),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Keep the runs already in the results directory with the same configuration; run the rest."),
    ] = False,
    list_: Annotated[bool, typer.Option("--list", "-l", help="List the reproductions and exit.")] = False,
) -> None:
    """Reproduce a paper figure: run its scenarios in parallel, write a table and a plot."""
    import os
    import time
    from concurrent.futures.process import BrokenProcessPool

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from gradwire import reproduce as rp

    console = _out()
    if list_:
        console.print(_reproductions_table())
        console.print("Run one with [bold]gradwire reproduce NAME[/] (add [bold]--quick[/] for a small version).")
        return
    if name is None:
        raise _fail(f"give a reproduction name ({', '.join(rp.REPRODUCTIONS)}) or --list")
    try:
        repro = rp.get(name)
        out_dir = out if out is not None else Path("results") / repro.name
        plan = rp.plan_reproduction(repro, out_dir, list(sets or []), quick=quick)
    except ScenarioError as e:
        raise _fail(str(e)) from None
    if not plan.jobs:
        raise _fail("no runs to do (the overrides left an empty sweep)")
    kept = rp.finished_runs(plan, out_dir) if resume else {}
    todo = [i for i in range(len(plan.jobs)) if i not in kept]
    n_procs = max(1, min(jobs or os.cpu_count() or 1, len(todo)))

    console.print(
        f"[bold]{escape(repro.name)}[/]: {escape(repro.title)}\n"
        f"{len(plan.jobs)} runs of {len(plan.plans)} scenarios on {n_procs} process{'es' if n_procs != 1 else ''}"
        f"{' (quick)' if quick else ''} -> {escape(str(out_dir))}"
        + (f"\nresuming: {len(kept)} runs already done, {len(todo)} to run" if resume else "")
    )
    t0 = time.perf_counter()
    try:
        rp.prepare_dirs(plan, out_dir)
    except OSError as e:
        raise _fail(f"cannot write results to {out_dir}: {e}", code=1) from None
    progress = Progress(
        TextColumn("[bold]runs"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("runs", total=len(todo))

    def done(job, res) -> None:
        s = res.summary
        ok = s["flows_finished"] == s["flows"]
        mark = "[green]✓[/]" if ok else "[yellow]![/]"
        progress.console.print(
            f"{mark} {escape(job.scenario)}/{escape(job.spec.name)}: {s['flows_finished']}/{s['flows']} flows, "
            f"{s['events']:,} events, {res.wall_seconds:.1f} s"
        )
        progress.advance(task)

    try:
        with progress:
            fresh = rp.run_jobs([plan.jobs[i] for i in todo], n_procs, on_done=done)
        results = {**kept, **{todo[k]: res for k, res in fresh.items()}}
    except rp.RunFailed as e:
        raise _fail(str(e)) from None
    except BrokenProcessPool as e:
        raise _fail(f"a simulation process died ({e}); finished runs are in {out_dir}", code=1) from None
    except OSError as e:
        raise _fail(f"cannot write results to {out_dir}: {e}", code=1) from None
    except KeyboardInterrupt:
        _err().print(f"[yellow]interrupted[/]: finished runs are in {escape(str(out_dir))}")
        raise typer.Exit(130) from None
    wall = time.perf_counter() - t0
    outputs = rp.write_outputs(plan, results, out_dir, wall, n_procs)
    df = outputs["table"]
    for _scen, model, sub in rp._panels(df):
        for m in repro.metrics:
            console.print(_pivot_table(repro, model, m, sub))
            console.print()
        inc = rp._incomplete(sub)
        if inc:
            console.print(f"[yellow]unfinished flows at the stop[/] in {escape(_scen)}: {escape(', '.join(inc))}")
    if repro.note:
        console.print(f"[dim]{escape(repro.note)}[/]")
    console.print("[bold]outputs:[/]")
    for p in outputs["paths"].values():
        console.print(f"  {escape(str(p))}")
    console.print(f"[bold]total wall time:[/] {wall:.1f} s ({len(plan.jobs)} runs, {n_procs} processes)")



@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    nproc: Annotated[int, typer.Option("--nproc", "-n", help="Processes (ranks) to start on this machine.")] = 2,
    master_addr: Annotated[str, typer.Option("--master-addr", help="Address rank 0 listens on.")] = "127.0.0.1",
    master_port: Annotated[Optional[int], typer.Option("--master-port", help="Port rank 0 listens on [default: a free one].")] = None,
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="Stop everything after this many seconds.")] = None,
) -> None:
    """Run a command as NPROC local ranks of one gradwire job (torchrun-style environment).

    Example: gradwire launch -n 4 -- python -m gradwire.demo --mb 8
    """
    from gradwire.launch import launch as run

    argv = list(ctx.args)
    if not argv:
        raise _fail("give the command to run after `--`, e.g. gradwire launch -n 4 -- python -m gradwire.demo")
    if nproc < 1:
        raise _fail(f"--nproc must be at least 1, got {nproc}")
    raise typer.Exit(run(argv, nproc, master_addr=master_addr, master_port=master_port, timeout=timeout))


@app.command()
def emulate(
    scenario: Annotated[str, typer.Argument(help="An emulation scenario (.toml) or a built-in name (python/gradwire/emu/scenarios).")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Results directory (default: results/emulate-NAME).")] = None,
    sets: Annotated[
        Optional[list[str]],
        typer.Option("--set", "-s", metavar="KEY=VALUE", help="Override a key, e.g. --set topology.link_loss_rate=0.01 (repeatable)."),
    ] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Do not draw the figure.")] = False,
) -> None:
    """Run a job (Gloo, gradwire, kernel TCP) on an emulated network of namespaces (needs root)."""
    from gradwire.emu.command import emulate as run_emulation

    raise typer.Exit(run_emulation(scenario, out, list(sets or []), not no_plot, _out(), _err()))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
