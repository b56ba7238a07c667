"""`gradwire reproduce autobyte-fig5` … `autobyte-fig8`: autobyte.md §IV on the simulator's
``bytesched`` job (8 workers, one PS server per worker host, or ring all-reduce).

Each figure writes into its directory::

    trace.csv       per iteration and scheme: the speed and ⟨S_p, S_c⟩ in force (figs 5–7)
    table.csv       one row per setting and scheme (fig 8) or per scheme (figs 5–7)
    table.md        the same as markdown, with the paper's numbers beside ours
    <name>.png      the figure
    reproduce.json  what was run, the headline numbers and the wall time

``--quick`` shrinks the grid, the iterations and the settings to a smoke test.
"""

from __future__ import annotations

import csv
import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gradwire.tune.online import GROUP, Trace, grid_optimum, run_autobyte, run_bo, run_fixed
from gradwire.tune.simjob import JobSpec
from gradwire.tune.space import MB, Candidate, grid

if TYPE_CHECKING:  # torch: loaded by reproduce(), which says which extra is missing
    from gradwire.tune.autobyte import AutoByte

Log = Callable[[str], None]


def _candidates(quick: bool) -> list[Candidate]:
    """The paper's grid (S_p in 2 MB steps, credit 1×–8×), or a 4 × 4 one for --quick."""
    return grid(4 * MB, 16 * MB, 4) if quick else grid()


def _write_trace(path: Path, traces: dict[str, Trace]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scheme", "iteration", "samples_per_s", "partition_mb", "credit_x"])
        for scheme, t in traces.items():
            for i, (v, c) in enumerate(zip(t.speeds, t.configs)):
                w.writerow(
                    [
                        scheme,
                        i,
                        f"{v:.2f}",
                        "" if c is None else c.partition_bytes / MB,
                        "" if c is None else c.credit_multiple,
                    ]
                )


def _write_rows(out: Path, rows: list[dict], paper: str) -> None:
    keys = list(rows[0])
    with (out / "table.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r[k]) for k in keys) + " |")
    (out / "table.md").write_text("\n".join(lines) + f"\n\npaper: {paper}\n")


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"
    return str(v)


def _plot_traces(path: Path, title: str, traces: dict[str, Trace], bands: list[tuple[int, int, str]] = ()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for lo, hi, label in bands:
        ax.axvspan(lo, hi, color="0.92", zorder=0)
        ax.text((lo + hi) / 2, 0.02, label, transform=ax.get_xaxis_transform(), ha="center", fontsize="small")
    for scheme, t in traces.items():
        # the paper plots the mean of every 5 iterations
        xs = list(range(0, len(t.speeds), 5))
        ys = [sum(t.speeds[i : i + 5]) / len(t.speeds[i : i + 5]) for i in xs]
        style = "--" if scheme.startswith("optimum") else "-"
        ax.plot(xs, ys, style, marker="o" if style == "-" else None, markersize=3, label=scheme)
        for it, _c in t.reconfigurations:
            ax.axvline(it, color=ax.lines[-1].get_color(), alpha=0.25, linewidth=0.8)
    ax.set_xlabel("iteration")
    ax.set_ylabel("samples/s (mean of 5 iterations)")
    ax.set_title(title, fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _optimum_trace(phases: list[tuple[int, int, float]], best: dict[int, Candidate]) -> Trace:
    """The per-phase grid optimum as a trace: phase (start, end, speed) and its config."""
    t = Trace()
    for k, (lo, hi, v) in enumerate(phases):
        t.speeds.extend([v] * (hi - lo))
        t.configs.extend([best[k]] * (hi - lo))
    return t


# ---------------------------------------------------------------------------------------
# Fig. 5: convergence to the grid optimum from two start configurations


def fig5(out: Path, quick: bool, model: AutoByte, log: Log) -> dict:
    spec = JobSpec("resnet50", "ps", 8, 10.0)
    cands = _candidates(quick)
    iterations = 40 if quick else 60
    best, v_best, speeds = grid_optimum(spec, cands)
    log(f"grid optimum {best}: {v_best:.1f} samples/s ({len(cands)} candidates)")
    starts = [Candidate(4 * MB, 2), Candidate(8 * MB, 3)] if quick else [Candidate(2 * MB, 2), Candidate(8 * MB, 3)]
    traces: dict[str, Trace] = {}
    rows = []
    for s in starts:
        t = run_autobyte(spec, cands, s, iterations, model)
        traces[f"AutoByte from {s}"] = t
        at30 = t.configs[min(30, len(t.configs) - 1)]
        rows.append(
            {
                "start": str(s),
                "start_speed": speeds[s],
                "config_at_30": str(at30),
                "its_grid_speed": speeds[at30],
                "of_optimum_pct": 100 * speeds[at30] / v_best,
                "gain_over_start_pct": 100 * (speeds[at30] / speeds[s] - 1),
                "reconfigurations": len(t.reconfigurations),
                "adaptations": len(t.adaptations),
            }
        )
        log(f"from {s}: {at30} at iteration 30, {rows[-1]['of_optimum_pct']:.1f} % of the optimum")
    traces["optimum (grid)"] = _optimum_trace([(0, iterations, v_best)], {0: best})
    _write_trace(out / "trace.csv", traces)
    _write_rows(
        out,
        rows,
        "from ⟨2,2⟩ and ⟨8,3⟩ to the optimum ⟨1,4⟩ after 3 predictions (30 iterations); +12.6 % and +81 % over the starts",
    )
    _plot_traces(out / "autobyte-fig5.png", f"ResNet50, PS, 8 workers, 10 Gbit/s; optimum {best}", traces)
    return {"optimum": str(best), "optimum_speed": v_best, "rows": rows, "grid": {str(c): v for c, v in speeds.items()}}


# ---------------------------------------------------------------------------------------
# Figs. 6 and 7: dynamic conditions, AutoByte against BO's static choice


def _dynamic(
    out: Path,
    name: str,
    title: str,
    spec: JobSpec,
    phases: list[tuple[int, int, JobSpec, str]],
    quick: bool,
    model: AutoByte,
    log: Log,
    paper: str,
) -> dict:
    cands = _candidates(quick)
    iterations = phases[-1][1]
    bo = run_bo(spec, cands, iterations, trials=10 if quick else 20)
    choice = bo.configs[0]
    log(f"BO chose {choice} in {bo.search_measurements} measurements before training")
    auto = run_autobyte(spec, cands, choice, iterations, model)
    opt_phases, opt_best, rows = [], {}, []
    cache: dict[str, tuple[Candidate, float, dict]] = {}
    for k, (lo, hi, phase_spec, label) in enumerate(phases):
        key = json.dumps(phase_spec.config(None), sort_keys=True)
        if key not in cache:
            cache[key] = grid_optimum(phase_spec, cands)
        best, v, speeds = cache[key]
        opt_phases.append((lo, hi, v))
        opt_best[k] = best
        rows.append(
            {
                "phase": label,
                "iterations": f"{lo}-{hi}",
                "BO": bo.mean(lo, hi),
                "AutoByte": auto.mean(lo, hi),
                "AutoByte_vs_BO_pct": 100 * (auto.mean(lo, hi) / bo.mean(lo, hi) - 1),
                "optimum": v,
                "optimum_config": str(best),
                "AutoByte_of_optimum_pct": 100 * auto.mean(lo, hi) / v,
            }
        )
    optimum = _optimum_trace(opt_phases, opt_best)
    total = {
        "phase": "all",
        "iterations": f"0-{iterations}",
        "BO": bo.mean(),
        "AutoByte": auto.mean(),
        "AutoByte_vs_BO_pct": 100 * (auto.mean() / bo.mean() - 1),
        "optimum": optimum.mean(),
        "optimum_config": "per phase",
        "AutoByte_of_optimum_pct": 100 * auto.mean() / optimum.mean(),
    }
    rows.append(total)
    log(
        f"mean speed: AutoByte {auto.mean():.1f}, BO {bo.mean():.1f} ({total['AutoByte_vs_BO_pct']:+.1f} %), "
        f"per-phase optimum {optimum.mean():.1f}"
    )
    traces = {"BO (static)": bo, "AutoByte": auto, "optimum (grid, per phase)": optimum}
    _write_trace(out / "trace.csv", traces)
    _write_rows(out, rows, paper)
    bands = [(lo, hi, label) for lo, hi, _s, label in phases]
    _plot_traces(out / f"{name}.png", title, traces, bands)
    return {
        "bo_choice": str(choice),
        "bo_measurements": bo.search_measurements,
        "reconfigurations": [(i, str(c)) for i, c in auto.reconfigurations],
        "adaptations": auto.adaptations,
        "rows": rows,
    }


def fig6(out: Path, quick: bool, model: AutoByte, log: Log) -> dict:
    period = 10 if quick else 20
    phases_n = 4 if quick else 6
    rates = [10.0 if k % 2 == 0 else 3.0 for k in range(phases_n)]
    changes = [{"iteration": k * period, "gbps": g} for k, g in enumerate(rates) if k > 0]
    spec = JobSpec("resnet50", "ps", 8, 10.0, {"rate_changes": changes})
    phases = [(k * period, (k + 1) * period, JobSpec("resnet50", "ps", 8, g), f"{g:g}G") for k, g in enumerate(rates)]
    return _dynamic(
        out,
        "autobyte-fig6",
        f"ResNet50, PS: host bandwidth 10 ↔ 3 Gbit/s every {period} iterations",
        spec,
        phases,
        quick,
        model,
        log,
        "AutoByte +6.4 % to +23 % over BO (mean of every 5 iterations)",
    )


def fig7(out: Path, quick: bool, model: AutoByte, log: Log) -> dict:
    period = 10 if quick else 20
    # a job that joins shares every host's links (one long-lived flow each way) and the
    # GPU (time-sliced: 2 jobs → compute 2× slower, 3 jobs → 3×)
    joins = [
        {"join_iteration": period, "flows": 1, "compute_factor": 2.0},
        {"join_iteration": 2 * period, "flows": 1, "compute_factor": 1.5},
    ]
    spec = JobSpec("resnet50", "ps", 8, 20.0, {"background": joins})
    phases = []
    for k in range(3):
        static = [dict(j, join_iteration=0) for j in joins[:k]]
        phases.append(
            (
                k * period,
                (k + 1) * period,
                JobSpec("resnet50", "ps", 8, 20.0, {"background": static}),
                f"{k + 1} job{'s' if k else ''}",
            )
        )
    return _dynamic(
        out,
        "autobyte-fig7",
        "ResNet50, PS, 20 Gbit/s: a second and a third job join",
        spec,
        phases,
        quick,
        model,
        log,
        "AutoByte +8.8 % to +19.2 % over BO once jobs are added",
    )


# ---------------------------------------------------------------------------------------
# Fig. 8 (and 9): bandwidths × models × PS / ring: no scheduling vs BO vs AutoByte


#: (pattern, model, Gbit/s): the paper's sweep of Figs. 8 and 9.
FIG8_SETTINGS = [
    (p, m, g) for p in ("ps", "ring") for m in ("resnet50", "vgg16", "alexnet") for g in (0.5, 1.0, 5.0, 10.0, 25.0)
]


def fig8(out: Path, quick: bool, model: AutoByte, log: Log) -> dict:
    settings = [("ps", "resnet50", 1.0), ("ps", "resnet50", 10.0)] if quick else FIG8_SETTINGS
    iterations = 30 if quick else 60
    warm = GROUP  # the paper: mean over 50 iterations after a warm-up of 10
    cands = _candidates(quick)
    start = Candidate(4 * MB, 2)
    rows = []
    for pattern, m, g in settings:
        spec = JobSpec(m, pattern, 8, g)
        base = run_fixed(spec, None, iterations).mean(warm)
        bo = run_bo(spec, cands, iterations, trials=10 if quick else 20).mean(warm)
        auto = run_autobyte(spec, cands, start, iterations, model).mean(warm)
        best, v, _ = grid_optimum(spec, cands)
        rows.append(
            {
                "pattern": pattern,
                "model": m,
                "gbps": g,
                "no_scheduling": base,
                "BO": bo,
                "AutoByte": auto,
                "grid_optimum": v,
                "optimum_config": str(best),
                "AutoByte_vs_none_pct": 100 * (auto / base - 1),
                "AutoByte_vs_BO_pct": 100 * (auto / bo - 1),
            }
        )
        r = rows[-1]
        log(
            f"{pattern} {m} {g:g}G: none {base:.1f}, BO {bo:.1f}, AutoByte {auto:.1f} "
            f"({r['AutoByte_vs_BO_pct']:+.1f} % vs BO), optimum {v:.1f}"
        )
    _write_rows(
        out,
        rows,
        "PS: AutoByte over none / BO: ResNet50 +16.7–60.1 % / +3.1–17.5 %, VGG16 +30.2–94.4 % / +15.5–33.2 %, "
        "AlexNet +40.7–79.7 % / +10.6–31.1 %; ring: +15.1–144.4 % / +2.3–17.4 %",
    )
    _plot_fig8(out / "autobyte-fig8.png", rows)
    return {"rows": rows}


def _plot_fig8(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["pattern"], r["model"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (pattern, m) in zip(axes[0], panels):
        sub = [r for r in rows if r["pattern"] == pattern and r["model"] == m]
        xs = range(len(sub))
        width = 0.2
        for j, key in enumerate(("no_scheduling", "BO", "AutoByte", "grid_optimum")):
            ax.bar([x + (j - 1.5) * width for x in xs], [r[key] for r in sub], width, label=key)
        ax.set_xticks(list(xs), [f"{r['gbps']:g}" for r in sub])
        ax.set_xlabel("host bandwidth (Gbit/s)")
        ax.set_ylabel("samples/s")
        ax.set_title(f"{m}, {pattern}", fontsize="medium")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def reproduce(name: str, out: Path, quick: bool = False, model: AutoByte | None = None, log: Log = print) -> dict:
    """Run one figure into ``out``; returns (and writes to reproduce.json) its record.
    Every figure runs AutoByte's meta-network: without torch this raises
    :class:`gradwire.extras.MissingExtra` before writing anything."""
    from gradwire.reproduce import get

    fig = get(name)  # a TuningFigure: its run is "module:function"
    module, function = fig.run.split(":")
    t0 = time.perf_counter()
    if model is None:
        from gradwire.extras import require

        require(f"gradwire reproduce {name}", "torch", ("torch",))
        from gradwire.tune.offline import load_default

        model = load_default()
    out.mkdir(parents=True, exist_ok=True)
    result = getattr(importlib.import_module(module), function)(out, quick, model, log)
    record = {"name": name, "title": fig.title, "quick": quick, "wall_s": round(time.perf_counter() - t0, 1), **result}
    (out / "reproduce.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    return record
