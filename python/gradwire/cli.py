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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
