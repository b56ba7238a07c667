"""The ``gradwire`` command line."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
import typer.core
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gradwire import __version__
from gradwire._core import ScenarioError
from gradwire.extras import MissingExtra, require
from gradwire.scenarios import DEFAULT_SCENARIO, builtin_scenarios, resolve_scenario


def _no_metavar_for_flags() -> None:
    """typer >= 0.2x prints a type column for every option, `<bool>` for on/off flags (and
    for --help) too, although a flag takes no value. Show nothing there, as click does."""
    option = getattr(typer.core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "_gradwire", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich._gradwire = True
    option.display_type_rich = display_type_rich


_no_metavar_for_flags()

app = typer.Typer(
    name="gradwire",
    help="gradwire: the communication stack for data-parallel training: simulate, emulate, run and train.",
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
        bool | None,
        typer.Option("--version", "-V", help="Show the version and exit.", callback=_version, is_eager=True),
    ] = None,
) -> None:
    """gradwire: the communication stack for data-parallel training: simulate, emulate, run and train."""


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


def _cluster_option() -> typer.models.OptionInfo:
    return typer.Option(
        "--cluster",
        help="Where the runs go: local (this machine's processes) or ray (one Ray task per run; pip install gradwire\\[cluster]).",
        case_sensitive=False,
    )


def _address_option() -> typer.models.OptionInfo:
    return typer.Option(
        "--address", help="The Ray cluster, HOST:PORT \\[default: $RAY_ADDRESS, else a cluster started here]."
    )


def _connect(cluster: str, address: str | None) -> str | None:
    """Connect to the Ray cluster for --cluster ray (None for local); one-line errors."""
    if cluster not in ("local", "ray"):
        raise _fail(f"--cluster must be local or ray, got {cluster!r}")
    if cluster == "local":
        if address:
            raise _fail("--address is for --cluster ray")
        return None
    from gradwire import cluster as cl

    try:
        return cl.connect(address)
    except MissingExtra as e:
        raise _fail(str(e)) from None
    except cl.ClusterError as e:
        raise _fail(str(e), code=1) from None


def _disconnect(cluster: str) -> None:
    if cluster == "ray":
        from gradwire import cluster as cl

        cl.disconnect()


def _set_option(help: str) -> typer.models.OptionInfo:
    """`--set KEY=VALUE` (repeatable), as sim, reproduce and emulate take it."""
    return typer.Option("--set", "-s", metavar="KEY=VALUE", help=help)


@app.command()
def sim(
    scenario: Annotated[
        str,
        typer.Argument(help="A scenario file (.toml) or a built-in scenario name (see `gradwire scenarios`)."),
    ] = DEFAULT_SCENARIO,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Results directory \\[default: results/<scenario>, or results/<scenario>--<overrides> with --set].",
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed (same seed, same results).")] = None,
    sets: Annotated[
        list[str] | None, _set_option("Override a scenario key, e.g. --set topology.spines=2 (repeatable).")
    ] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Do not draw the figures.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar, table or per-run lines.")] = False,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite a results directory that holds another configuration.")
    ] = False,
    cluster: Annotated[str, _cluster_option()] = "local",
    address: Annotated[str | None, _address_option()] = None,
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

    out_dir = out if out is not None else runner.default_out_dir(source.name, plan.overrides)
    clash = runner.manifest_clash(out_dir, plan)
    if clash and not force:
        raise _fail(
            f"{out_dir} holds results of another configuration ({clash}); give --out DIR, or --force to replace them"
        )
    addr = _connect(cluster, address)
    console = _out()
    if not quiet:
        n = len(plan.runs)
        where = f" on Ray ({escape(addr)})" if addr else ""
        console.print(
            f"[bold]{escape(source.name)}[/] ({escape(source.origin)}): {n} run{'s' if n != 1 else ''}{where} -> {escape(str(out_dir))}"
        )

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
        if fast := s.get("fast"):
            console.print(f"  [dim]{escape(_fast_line(fast))}[/]")

    try:
        runner.run_all(plan, out_dir, console=console, show_progress=not quiet, on_done=done, cluster=cluster)
    except ScenarioError as e:  # checks that need the built topology (port and link names)
        raise _fail(f"in {source.origin}: {e}") from None
    except OSError as e:
        raise _fail(f"cannot write results to {out_dir}: {e}", code=1) from None
    except KeyboardInterrupt:
        _err().print(f"[yellow]interrupted[/]: finished runs are in {escape(str(out_dir))}")
        raise typer.Exit(130) from None
    except RuntimeError as e:  # a run the cluster lost twice (gradwire.cluster.TaskFailed)
        raise _fail(f"{e}; finished runs are in {out_dir}", code=1) from None
    finally:
        _disconnect(cluster)

    summary_csv = write_summary_csv(out_dir)
    df = collect(out_dir)
    plots = []
    if not no_plot:
        from gradwire.plot import plot_all

        plots = plot_all(out_dir, df)
    unconserved = df.loc[~df["conserved"].astype(bool), "run"].tolist()
    if unconserved:
        _err().print(
            f"[bold red]warning:[/] packet conservation violated in: {escape(', '.join(map(str, unconserved)))}"
        )
    if not quiet:
        console.print(_results_table(df))
        console.print("[bold]outputs:[/]")
        for _name, _p, d in _run_dirs(out_dir):
            files = ", ".join(f for f in ("flows.csv", "summary.json", "queues.csv") if (d / f).exists())
            console.print(f"  {escape(str(d))}/  ({files})")
        console.print(f"  {escape(str(summary_csv))}")
        for p in plots:
            console.print(f"  {escape(str(p))}")


def _fast_line(fast: dict) -> str:
    """What a fast run's figures stand for (docs/scenarios.md#fast)."""
    if fast.get("samples", 1) > 1:
        return f"fast mode: every server's flows, from {fast['samples']} samples"
    line = f"fast mode: flows and figures are {len(fast['servers'])} of {fast['of']} servers'"
    if (job := fast.get("job_iteration_ns")) is not None:
        whole = (
            f"a scale model of the other servers' whole tensors (one in {fast['thinned_by']:g} workers)"
            if fast.get("thinned")
            else "every server's whole tensors"
        )
        line += f"; the job's, estimated from {whole}: "
        if (mean := fast.get("job_fct_mean_ns")) is not None:
            line += f"mean FCT {mean / 1e3:,.0f} µs, p99 {fast['job_fct_p99_ns'] / 1e3:,.0f} µs, "
        return line + f"iteration {job / 1e6:.1f} ms"
    return line + "; their last finish is the sample's iteration, not the job's (fast.keep_whole_tensors estimates it)"


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
    name: Annotated[str | None, typer.Argument(help="Print this built-in scenario's TOML.")] = None,
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
        if isinstance(r, rp.TuningFigure):
            t.add_row(escape(r.name), escape(r.title), "bytesched job (simulator)", "-")
            continue
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
    fast, xs = rp.fast_only(sub), sorted(dict.fromkeys(sub["x"]))
    for s, row in zip(series, rows):
        t.add_row(escape(str(s)), *(rp._fmt(v) + (" *" if (s, x) in fast else "") for v, x in zip(row, xs)))
    return t


@app.command()
def reproduce(
    name: Annotated[
        str | None,
        typer.Argument(help="A reproduction (see --list), e.g. dlcp-fig14, dlcp-fig16, ltp-bst."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Results directory \\[default: results/<name>]."),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Runs in parallel, one process each \\[default: all cores, divided by the runs' `threads`].",
        ),
    ] = None,
    sets: Annotated[
        list[str] | None, _set_option("Override a key in every scenario of the reproduction (repeatable).")
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="A small version (8 hosts, few workers / iterations): seconds instead of minutes; a smoke test, not the paper's numbers.",
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Keep the runs already in the results directory with the same configuration; run the rest."
        ),
    ] = False,
    fast: Annotated[
        bool,
        typer.Option(
            "--fast",
            help="Run each series' largest point in the simulator's fast mode (fidelity = \"fast\") and its next "
            "point at both fidelities; fidelity.md gives the fast mode's error there. Points it refuses stay at "
            "packet level, and the refusal is shown.",
        ),
    ] = False,
    list_: Annotated[bool, typer.Option("--list", "-l", help="List the reproductions and exit.")] = False,
    cluster: Annotated[str, _cluster_option()] = "local",
    address: Annotated[str | None, _address_option()] = None,
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
        entry = rp.get(name)
    except ScenarioError as e:
        raise _fail(str(e)) from None
    if isinstance(entry, rp.TuningFigure):
        from gradwire.tune import figures

        if sets or resume or fast or cluster != "local":
            raise _fail(
                f"{name} runs the simulator's bytesched job directly: it takes no --set, --resume, --fast or --cluster"
            )
        try:  # AutoByte's meta-network
            require(f"gradwire reproduce {name}", "torch", ("torch",))
        except MissingExtra as e:
            raise _fail(str(e)) from None
        out_dir = out if out is not None else Path("results") / name
        console.print(f"[bold]{escape(name)}[/]: {escape(entry.title)}{' (quick)' if quick else ''}")
        record = figures.reproduce(name, out_dir, quick=quick, log=lambda m: console.print(escape(m)))
        console.print((out_dir / "table.md").read_text())
        console.print(f"[bold]outputs:[/] {escape(str(out_dir))}  [bold]wall time:[/] {record['wall_s']} s")
        return
    repro = entry
    try:
        out_dir = out if out is not None else Path("results") / repro.name
        plan = rp.plan_reproduction(repro, out_dir, list(sets or []), quick=quick, fast=fast)
    except ScenarioError as e:
        raise _fail(str(e)) from None
    if not plan.jobs:
        raise _fail("no runs to do (the overrides left an empty sweep)")
    if cluster == "ray" and jobs is not None:
        raise _fail("--jobs is for the local pool: on Ray every CPU of the cluster runs one run at a time")
    kept = rp.finished_runs(plan, out_dir) if resume else {}
    todo = [i for i in range(len(plan.jobs)) if i not in kept]
    addr = _connect(cluster, address)
    if addr is None:
        # a run on `threads = N` takes N cores: the default pool leaves each its cores
        threads = max((int(plan.jobs[i].spec.scenario.get("threads", 1)) for i in todo), default=1)
        n_procs = max(1, min(jobs or (os.cpu_count() or 1) // threads, len(todo)))
        where = f"{n_procs} process{'es' if n_procs != 1 else ''}"
    else:
        from gradwire import cluster as cl

        n_procs, _nodes = cl.workers()
        where = f"Ray ({escape(addr)}: {escape(cl.describe().removeprefix('Ray: '))})"

    console.print(
        f"[bold]{escape(repro.name)}[/]: {escape(repro.title)}\n"
        f"{len(plan.jobs)} runs of {len(plan.plans)} scenarios on {where}"
        f"{' (quick)' if quick else ''} -> {escape(str(out_dir))}"
        + (f"\nresuming: {len(kept)} runs already done, {len(todo)} to run" if resume else "")
    )
    if fast:
        from gradwire import fidelity

        n_fast = sum(j.fidelity == "fast" for j in plan.jobs)
        console.print(f"fast mode: {n_fast} runs (each series' largest point, and its next beside packet level)")
        for msg, pts in fidelity.refusals(plan.jobs).items():
            console.print(
                f"[yellow]refused by the fast mode, run at packet level[/] ({escape(', '.join(pts))}): {escape(msg)}"
            )
    t0 = time.perf_counter()
    try:
        rp.prepare_dirs(plan, out_dir)
    except OSError as e:
        _disconnect(cluster)
        raise _fail(f"cannot write results to {out_dir}: {e}", code=1) from None
    progress = Progress(
        TextColumn("[bold]runs"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[cyan]{task.fields[where]}"),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("runs", total=len(todo), where=where if addr is None else cl.describe())

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
            if addr is None:
                fresh = rp.run_jobs([plan.jobs[i] for i in todo], n_procs, on_done=done)
            else:
                fresh, ray_record = rp.run_jobs_on_cluster(
                    [plan.jobs[i] for i in todo], on_done=done, on_tick=lambda w: progress.update(task, where=w)
                )
        results = {**kept, **{todo[k]: res for k, res in fresh.items()}}
    except rp.RunFailed as e:
        raise _fail(
            str(e) + ("" if addr is None else f"; finished runs are in {out_dir}"), code=1 if e.lost else 2
        ) from None
    except BrokenProcessPool as e:
        raise _fail(f"a simulation process died ({e}); finished runs are in {out_dir}", code=1) from None
    except OSError as e:
        raise _fail(f"cannot write results to {out_dir}: {e}", code=1) from None
    except KeyboardInterrupt:
        _err().print(f"[yellow]interrupted[/]: finished runs are in {escape(str(out_dir))}")
        raise typer.Exit(130) from None
    finally:
        _disconnect(cluster)
    wall = time.perf_counter() - t0
    outputs = rp.write_outputs(
        plan, results, out_dir, wall, n_procs, cluster=cluster, cluster_record=ray_record if addr else None
    )
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
    if fast:
        console.print(escape(outputs["paths"]["fidelity_md"].read_text(encoding="utf-8")))
    console.print("[bold]outputs:[/]")
    for p in outputs["paths"].values():
        console.print(f"  {escape(str(p))}")
    on = f"{n_procs} processes" if addr is None else f"{n_procs} Ray workers"
    console.print(f"[bold]total wall time:[/] {wall:.1f} s ({len(plan.jobs)} runs, {on})")
    if addr is not None and ray_record["runs_seconds"] > 0:
        r = ray_record
        share = 100 * r["overhead_seconds"] / (r["wall_seconds"] - r["overhead_seconds"] or 1)
        console.print(
            f"[bold]Ray:[/] {len(fresh)} runs on {r['nodes_used']} nodes ({r['worker_processes']} worker processes), "
            f"runs {r['runs_seconds']:.1f} s in all; overhead {r['overhead_seconds']:.2f} s ({share:.1f} % of the "
            "busiest worker's run time)"
        )


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    options_metavar="[OPTIONS] -- COMMAND [ARGS]...",
)
def launch(
    ctx: typer.Context,
    nproc: Annotated[int, typer.Option("--nproc", "-n", help="Processes (ranks) to start on this machine.")] = 2,
    master_addr: Annotated[str, typer.Option("--master-addr", help="Address rank 0 listens on.")] = "127.0.0.1",
    master_port: Annotated[
        int | None, typer.Option("--master-port", help="Port rank 0 listens on \\[default: a free one].")
    ] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Stop everything after this many seconds.")] = None,
    topology: Annotated[
        str | None,
        typer.Option("--topology", help='Rack of every rank for algorithm "rat", e.g. 0,0,1,1 (GRADWIRE_TOPOLOGY).'),
    ] = None,
) -> None:
    """Run a command as NPROC local ranks of one gradwire job (torchrun-style environment).

    Example: gradwire launch -n 4 -- python -m gradwire.demo --mb 8
    """
    from gradwire.launch import LaunchError
    from gradwire.launch import launch as run

    argv = list(ctx.args)
    if not argv:
        raise _fail("give the command to run after `--`, e.g. gradwire launch -n 4 -- python -m gradwire.demo")
    if nproc < 1:
        raise _fail(f"--nproc must be at least 1, got {nproc}")
    try:
        code = run(argv, nproc, master_addr=master_addr, master_port=master_port, timeout=timeout, topology=topology)
    except LaunchError as e:
        raise _fail(str(e)) from None
    raise typer.Exit(code)


@app.command()
def train(
    backend: Annotated[
        list[str] | None,
        typer.Option(
            "--backend",
            "-b",
            help="gloo or gradwire (repeat for both); default: gloo, gradwire lossless, gradwire with 1 % loss under a 1 % bound",
        ),
    ] = None,
    model: Annotated[str, typer.Option(help="cnn (scikit-learn digits) or resnet18 (generated 32x32 data)")] = "cnn",
    workers: Annotated[int, typer.Option("--workers", "-n", help="local worker processes")] = 2,
    loss: Annotated[float, typer.Option(help="share of gradwire datagrams dropped on purpose")] = 0.0,
    bound: Annotated[float, typer.Option(help="loss bound of the gradient allreduce (see gradwire tolerance)")] = 0.0,
    epochs: Annotated[int | None, typer.Option(help="default: 8 (cnn), 1 (resnet18)")] = None,
    lr: Annotated[float | None, typer.Option(help="SGD learning rate")] = None,
    batch: Annotated[int | None, typer.Option(help="batch per worker")] = None,
    target: Annotated[
        float | None, typer.Option(help="accuracy for time-to-accuracy (default 0.95 cnn, 0.9 resnet18)")
    ] = None,
    mss: Annotated[int | None, typer.Option(help="gradwire payload bytes per datagram")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    out: Annotated[Path, typer.Option(help="results directory")] = Path("results/train"),
    timeout: Annotated[float, typer.Option(help="seconds per configuration")] = 1800.0,
    repeats: Annotated[
        int, typer.Option(help="rounds over all configurations, alternating; the table shows medians")
    ] = 1,
) -> None:
    """Train a model data-parallel on Gloo and gradwire side by side: samples/s, time per step, time-to-accuracy, a curve."""
    try:
        require("gradwire train")  # the workers need torch and scikit-learn
    except MissingExtra as e:
        raise _fail(str(e)) from None
    from gradwire.train.cli import configs_from
    from gradwire.train.cli import train as run_train
    from gradwire.train.job import Settings

    try:
        configs = configs_from(backend or [], loss, bound)
        settings = Settings(
            model=model,
            workers=workers,
            out=out,
            seed=seed,
            epochs=epochs,
            lr=lr,
            batch=batch,
            target=target,
            mss=mss,
            timeout=timeout,
        )
        run_train(_out(), configs, settings, repeats)
    except (ValueError, RuntimeError) as e:
        raise _fail(str(e), 1 if isinstance(e, RuntimeError) else EXIT_BAD_INPUT) from None


@app.command()
def tolerance(
    model: Annotated[str, typer.Option(help="cnn, resnet18, or module:function returning (model, dataset)")] = "cnn",
    group: Annotated[
        list[str] | None,
        typer.Option("--group", "-g", help="overall, front, middle, back, small, medium, large (repeat; default all)"),
    ] = None,
    ratio: Annotated[
        list[float] | None, typer.Option("--ratio", "-r", help="loss ratios to try (repeat; default 0.5 % to 20 %)")
    ] = None,
    seeds: Annotated[int, typer.Option(help="runs per point")] = 3,
    slack: Annotated[
        float, typer.Option(help="tolerated: median epochs-to-accuracy within this share of lossless")
    ] = 0.1,
    target: Annotated[float, typer.Option(help="test accuracy to reach")] = 0.95,
    max_epochs: Annotated[int, typer.Option(help="a run that misses the target by then counts as never")] = 30,
    lr: Annotated[float, typer.Option()] = 0.05,
    batch: Annotated[int, typer.Option()] = 64,
    packet_bytes: Annotated[int, typer.Option(help="bytes of float32 gradients per lost packet")] = 1440,
    check: Annotated[
        float | None, typer.Option(help="only check this one bound (overall loss); exit 1 if training degrades")
    ] = None,
    out: Annotated[Path, typer.Option(help="results directory")] = Path("results/tolerance"),
) -> None:
    """Profile a model's loss tolerance (dlcp.md §2.3): the largest gradient loss ratio that keeps epochs-to-accuracy."""
    try:
        require("gradwire tolerance")  # torch, and scikit-learn's embedded dataset
    except MissingExtra as e:
        raise _fail(str(e)) from None
    from gradwire import tolerance as tol

    groups = ["overall"] if check is not None else (group or list(tol.GROUPS))
    ratios = [check] if check is not None else (ratio or list(tol.DEFAULT_RATIOS[1:]))
    try:
        summary = tol.profile(
            _out(),
            model=model,
            groups=groups,
            ratios=ratios,
            seeds=seeds,
            slack=slack,
            target=target,
            max_epochs=max_epochs,
            lr=lr,
            batch=batch,
            packet_floats=max(1, packet_bytes // 4),
            out=out,
        )
    except (ValueError, RuntimeError) as e:
        raise _fail(str(e), 1 if isinstance(e, RuntimeError) else EXIT_BAD_INPUT) from None
    if check is not None and summary["groups"]["overall"]["degraded"]:
        raise typer.Exit(1)


@app.command()
def emulate(
    scenario: Annotated[
        str, typer.Argument(help="An emulation scenario (.toml) or a built-in name (python/gradwire/emu/scenarios).")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Results directory \\[default: results/emulate-<name>].")
    ] = None,
    sets: Annotated[
        list[str] | None, _set_option("Override a key, e.g. --set topology.link_loss_rate=0.01 (repeatable).")
    ] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Do not draw the figure.")] = False,
    gbps: Annotated[
        str,
        typer.Option(
            "--gbps",
            help="Host link rate in Gbit/s; the uplinks and the job's bytes scale with it, so wire times "
            "stay. auto: a built-in scenario runs at a rate this machine's cores keep up with "
            "(0.125 Gbit/s per core, at most its own; 0.25 on 2 cores).",
        ),
    ] = "auto",
) -> None:
    """Run a job (Gloo, gradwire, kernel TCP) on an emulated network of namespaces (needs root)."""
    from gradwire.emu.command import emulate as run_emulation

    rate = _gbps(gbps)
    raise typer.Exit(run_emulation(scenario, out, list(sets or []), not no_plot, _out(), _err(), gbps=rate))


def _gbps(text: str) -> float | str:
    """`--gbps`: `auto` or a positive number of Gbit/s."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"must be `auto` or a positive number of Gbit/s (got {text!r})", param_hint="--gbps")
    return value


@app.command()
def crosscheck(
    out: Annotated[Path, typer.Option("--out", "-o", help="Results directory.")] = Path("results/crosscheck"),
    quick: Annotated[bool, typer.Option("--quick", help="A fifth of the bytes: a smoke test.")] = False,
    only: Annotated[
        list[str] | None, typer.Option("--case", "-c", help="Run only the cases whose name contains this (repeatable).")
    ] = None,
    gbps: Annotated[
        str,
        typer.Option(
            "--gbps",
            help="Host link rate in both worlds in Gbit/s, the bytes scaled with it (the wire time "
            "stays). auto: 1, or what this machine's cores keep up with (0.125 per core; 0.25 on 2).",
        ),
    ] = "auto",
    iterations: Annotated[
        int,
        typer.Option(
            "--iterations",
            min=1,
            help="Iterations of each ring and PS job in both worlds, runs of each incast (its "
            "twin on as many seeds): under loss 3 are a wide draw (docs/emulation.md).",
        ),
    ] = 9,
) -> None:
    """The same small jobs in the emulator (runtime, kernel TCP) and in their simulator twins,
    with the ratio emulated / simulated per backend and each world's spread (needs root)."""
    from rich.table import Table

    from gradwire.emu import crosscheck as cc
    from gradwire.emu.binary import EmulatorUnavailable, unavailable_reason
    from gradwire.emu.job import GBPS_PER_CORE, JobError

    asked = _gbps(gbps)
    cores = os.cpu_count() or 1
    gbps_value = min(1.0, GBPS_PER_CORE * cores) if asked == "auto" else float(asked)
    if asked == "auto" and gbps_value < 1.0:
        _out().print(f"[yellow]{cores} cores keep up with {gbps_value:g} Gbit/s: links at that rate, bytes scaled[/]")
    reason = unavailable_reason()
    if reason:
        raise _fail(f"cannot emulate here: {reason}", 3)
    try:
        require("gradwire crosscheck", "torch", ("torch",))  # Gloo and the runtime's ranks
    except MissingExtra as e:
        raise _fail(str(e)) from None
    todo = [c for c in cc.cases(quick, gbps_value) if not only or any(o in c.name for o in only)]
    if not todo:
        raise _fail(f"no case matches {only}: {', '.join(c.name for c in cc.cases(quick, gbps_value))}")
    console, rows = _out(), []
    for i, case in enumerate(todo, 1):
        console.print(f"[{i}/{len(todo)}] [bold]{escape(case.name)}[/]")
        slug = "".join(ch if ch.isalnum() else "-" for ch in case.name).strip("-")
        try:
            rows += cc.run_case(
                case, out / slug, log=lambda m: console.print(f"    {escape(m)}"), iterations=iterations
            )
        except (JobError, EmulatorUnavailable) as e:
            raise _fail(str(e)) from None
        cc.write(rows, out)  # after every case: a run cut short keeps what it measured
    t = Table(header_style="bold", title="emulated / simulated seconds per iteration")
    cols = ("case", "backend", "emulated s", "twin s", "ratio", "quartiles, emulated / twin", "CPU-bound")
    for col in (*cols, "timeouts/iter, emulated / twin"):
        t.add_column(col, justify="left" if col in ("case", "backend") else "right")
    for r in rows:
        cpu = {True: "yes", False: "no", None: "?"}[r["cpu_bound"]]
        emu_rtos = r["rtos_per_iteration_emulated"]
        rtos = f"{'-' if emu_rtos != emu_rtos else emu_rtos} / {r['rtos_per_iteration_twin']}"
        spread = f"{r['emulated_spread_s'] or '-'} / {r['twin_spread_s']}"
        cells = (f"{r['emulated_s']:.3f}", f"{r['twin_s']:.3f}", f"{r['ratio']}", spread, cpu, rtos)
        t.add_row(escape(r["case"]), r["backend"], *cells)
    console.print(t)
    for line in cc.verdict(rows):
        console.print(escape(line))
    console.print(f"table: {escape(str(cc.write(rows, out)))}")


autobyte_app = typer.Typer(help="AutoByte's meta-network: regenerate its shipped weights.", no_args_is_help=True)
app.add_typer(autobyte_app, name="autobyte")


@autobyte_app.command("train")
def autobyte_train(
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Weights file \\[default: the package's autobyte_weights.pt]."),
    ] = None,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Passes over the samples.")] = 40,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Processes generating data.")] = 1,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Samples file (JSON lines): read if it exists, else written after generating."),
    ] = None,
) -> None:
    """Generate offline training data with the simulator and fit the meta-network to it."""
    try:
        require("gradwire autobyte train", "torch", ("torch",))
    except MissingExtra as e:
        raise _fail(str(e)) from None
    from gradwire.tune import offline

    console = _out()
    target = out or offline.WEIGHTS
    n = len(offline.conditions())
    console.print(f"{n} conditions x {len(offline.grid())} candidates -> {escape(str(target))}")

    def tick(i: int, total: int) -> None:
        if i % 10 == 0 or i == total:
            console.print(f"  {i}/{total} conditions")

    record = offline.train(target, epochs=epochs, on_condition=tick, processes=jobs, data=data)
    console.print(
        f"{record['samples']} samples, {record['data']} in {record['data_s']} s, fitted in {record['fit_s']} s, "
        f"final L2 loss {record['final_loss']:.4f}; the first-ranked candidate within 5 % of the optimum in "
        f"{100 * record['in_sample_top1_within_5pct']:.0f} % of the training conditions"
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
