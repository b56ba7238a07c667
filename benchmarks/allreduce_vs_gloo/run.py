#!/usr/bin/env python3
"""Allreduce time: gradwire ring vs torch.distributed Gloo, side by side in one process tree.

For each world size one job of N processes on loopback is launched; every rank joins a
Gloo process group (``init_process_group("gloo")``) and one gradwire communicator per
gradwire configuration (each its own rendezvous port), then, for each tensor size, runs
the systems interleaved in the same processes: a warm-up, then ``--reps`` timed rounds in
which every system is called once (the order rotates each round). Each timed call is
preceded by a Gloo barrier; its time is the slowest rank's call duration; a system's
figure is the median (and p90) over the rounds.

Systems:
  gloo                      torch.distributed.all_reduce (SUM) on a CPU float32 tensor
  gradwire                  gradwire.allreduce(x, algorithm="ring"), no loss
  gradwire+loss1%           the same with 1 % of every rank's outgoing datagrams dropped
                            by the runtime's injector, loss_bound=0.01
  gradwire(k=v,...)         extra configurations (--variant), lossless and lossy

Gloo cannot be given loss here: the kernel has no netem (and TCP would retransmit anyway),
so the lossy rows are compared with gradwire's own lossless time only.

Every call is checked: lossless results must equal the numpy sum (inputs are
quarter-integers, so float32 sums are exact and Gloo's and gradwire's results must be
bitwise equal to it); lossy results must meet the loss bound, report exact bubble bytes,
be bitwise identical on every rank and match the exact sum on almost every element.

    python benchmarks/allreduce_vs_gloo/run.py                 # worlds 2,4; 1, 25, 100 MB
    python benchmarks/allreduce_vs_gloo/run.py --quick         # smoke test: tiny sizes
    python benchmarks/allreduce_vs_gloo/run.py --variant mss=8940 --variant line_rate_gbps=25

Writes <out>/results.csv, results.json (records), meta.json and allreduce_vs_gloo.png
(default out: results/allreduce_vs_gloo under the repository root). Exit 0 when every run
finished and every result verified (targets met or not), 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MB = 1 << 20  # sizes are in MiB (as torch DDP's bucket_cap_mb)

LOSS = 0.01
LOSS_BOUND = 0.01
LOSSLESS_TARGET_SIZES = (25.0, 100.0)  # gradwire <= Gloo at these sizes (2 and 4 ranks)
LOSSLESS_TARGET_WORLDS = (2, 4)
LOSSY_TARGET = 1.5  # lossy <= 1.5x gradwire's own lossless time
PROGRESS = "@@progress "
NO_GLOO = "torch.distributed has no Gloo backend here"
NO_GLOO_EXIT = 2

GLOO_NOTE = (
    "Gloo cannot be given loss here: this kernel has no netem (and Gloo runs over TCP, "
    "which would retransmit), so lossy gradwire rows are compared with gradwire's own "
    "lossless time only."
)

# Knobs a --variant may set (gradwire.Communicator keyword arguments).
VARIANT_KEYS = {
    "mss": int,
    "line_rate_gbps": float,
    "transport": str,
    "gso": lambda s: s.lower() in ("1", "true", "yes", "on"),
    "pipeline_chunks": int,
    "send_thread": lambda s: s.lower() in ("1", "true", "yes", "on"),
    "authenticate": lambda s: s.lower() in ("1", "true", "yes", "on"),
}


# ---------------------------------------------------------------------------- worker side


def rank_data(rank: int, elems: int):
    """Quarter-integers in [-100, 100): sums over <= 8 ranks are exact in float32, so
    every correct allreduce gives bitwise the same result whatever its summation order."""
    import numpy as np

    rng = np.random.default_rng(7919 + rank)
    return rng.integers(-400, 400, size=elems, dtype=np.int16).astype(np.float32) * 0.25


def digest(a) -> str:
    return hashlib.blake2b(memoryview(a).cast("B"), digest_size=16).hexdigest()


def worker(plan: dict) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    import gradwire

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if not (dist.is_available() and dist.is_gloo_available()):
        print(NO_GLOO + f" (torch {torch.__version__})", flush=True)
        sys.exit(NO_GLOO_EXIT)
    torch.set_num_threads(1)
    out = Path(plan["out"])
    emit = rank == 0

    def progress(**kw) -> None:
        if emit:
            print(PROGRESS + json.dumps(kw), flush=True)

    os.environ["MASTER_PORT"] = str(plan["gloo_port"])
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=plan["timeout"])
    )
    comms = {}
    for i, sysdef in enumerate(plan["gradwire"]):
        kw = dict(sysdef["init"])
        if sysdef["loss"] > 0:
            kw["impair"] = {p: (sysdef["loss"], 0.0) for p in range(world) if p != rank}
        kw.update(
            master_addr="127.0.0.1",
            master_port=sysdef["port"],
            rank=rank,
            world_size=world,
            token=f"bench-gloo-{plan['gloo_port']}",
            timeout=plan["timeout"],
            peer_timeout=plan["timeout"],
        )
        # The first (default) configuration is the process's gradwire.init() communicator.
        comms[sysdef["name"]] = gradwire.init(**kw) if i == 0 else gradwire.Communicator(**kw)
    progress(event="joined", world=world)

    systems = ["gloo"] + [s["name"] for s in plan["gradwire"]]
    # Testing hook: a system whose result rank 0 spoils, to show a wrong run cannot pass.
    corrupt = os.environ.get("ALLREDUCE_VS_GLOO_CORRUPT")
    bounds = {s["name"]: s["loss_bound"] for s in plan["gradwire"]}
    rows = []
    failures: list[str] = []
    for mb in plan["sizes"]:
        elems = max(1, int(round(mb * MB / 4)))
        base = rank_data(rank, elems)
        expected = np.zeros(elems, dtype=np.float32)
        for r in range(world):
            expected += base if r == rank else rank_data(r, elems)
        buf = np.empty_like(base)
        tbuf = torch.from_numpy(buf)  # shares memory with buf
        expected_digest = digest(expected)
        samples = {s: [] for s in systems}
        reports = {s: [] for s in systems}
        checks = {s: [] for s in systems}

        def call(system: str) -> tuple[float, dict]:
            np.copyto(buf, base)
            dist.barrier()
            t0 = time.perf_counter()
            if system == "gloo":
                dist.all_reduce(tbuf, op=dist.ReduceOp.SUM)
                rep = None
            else:
                rep = comms[system].allreduce(buf, algorithm="ring", loss_bound=bounds[system])
            dt = time.perf_counter() - t0
            if system == corrupt and rank == 0:
                buf[elems // 2] += 1.0  # self-test of the verification (see tests)
            return dt, rep

        def verify(system: str, rep) -> dict:
            """This call's correctness, agreed by every rank (gathered over Gloo)."""
            mine = {"digest": digest(buf)}
            if rep is None or bounds[system] == 0:
                mine["exact"] = bool(np.array_equal(buf, expected))
                mine["close"] = bool(np.allclose(buf, expected, rtol=1e-6, atol=1e-6))
                mine["max_abs_err"] = float(np.max(np.abs(buf - expected))) if elems else 0.0
            else:
                mine["close_fraction"] = float(np.isclose(buf, expected).mean())
            if rep is not None:
                mine.update(
                    bytes_lost=rep.bytes_lost,
                    bubble_bytes=sum(b.length for b in rep.bubbles),
                    min_delivered=rep.min_delivered_fraction,
                    retransmits=rep.retransmits,
                    runtime_s=rep.seconds,
                )
            allv: list = [None] * world
            dist.all_gather_object(allv, mine)
            problems = []
            if len({v["digest"] for v in allv}) != 1:
                problems.append("ranks ended with different bits")
            lossless = rep is None or bounds[system] == 0
            if lossless:
                if not all(v["close"] for v in allv):
                    problems.append(
                        f"result differs from the numpy sum (max abs err {max(v['max_abs_err'] for v in allv):g})"
                    )
                if rep is not None and any(v["bytes_lost"] for v in allv):
                    problems.append("bytes lost without a loss bound")
            else:
                b = bounds[system]
                if any(v["min_delivered"] < 1 - b - 1e-12 for v in allv):
                    problems.append(f"delivered fraction {min(v['min_delivered'] for v in allv):.4f} < 1 - {b}")
                if any(v["bytes_lost"] != v["bubble_bytes"] for v in allv):
                    problems.append("bytes_lost differs from the bubbles' total")
                # A lost chunk of a partial sum zeroes up to (world - 1) contributions.
                floor = 1 - 2 * b * world
                if min(v["close_fraction"] for v in allv) < floor:
                    problems.append(f"only {min(v['close_fraction'] for v in allv):.4f} of elements match the sum")
            return {
                "ok": not problems,
                "problems": problems,
                "bitwise_equal_to_sum": all(v["digest"] == expected_digest for v in allv),
                "bytes_lost": max((v.get("bytes_lost", 0) for v in allv), default=0),
                "min_delivered": min((v.get("min_delivered", 1.0) for v in allv), default=1.0),
                "retransmits": sum(v.get("retransmits", 0) for v in allv),
                "runtime_s": max((v.get("runtime_s", 0.0) for v in allv), default=0.0),
            }

        def timed(system: str, phase: str, i: int) -> None:
            dt, rep = call(system)
            t = torch.tensor([dt], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            v = verify(system, rep)
            if not v["ok"]:
                failures.append(f"world {world} {mb} MB {system} {phase} {i}: " + "; ".join(v["problems"]))
            if phase == "timed":
                samples[system].append(float(t.item()))
                reports[system].append(v)
            checks[system].append(v["ok"])
            progress(
                event="call", world=world, mb=mb, system=system, phase=phase, i=i, seconds=float(t.item()), ok=v["ok"]
            )

        for w in range(plan["warmup"]):
            for s in systems:
                timed(s, "warmup", w)
        for i in range(plan["reps"]):
            k = i % len(systems)
            for s in systems[k:] + systems[:k]:
                timed(s, "timed", i)

        for s in systems:
            ts = sorted(samples[s])
            reps = reports[s]
            rows.append(
                {
                    "world": world,
                    "MB": mb,
                    "system": s,
                    "median_s": statistics.median(ts),
                    "p90_s": percentile(ts, 90),
                    "min_s": ts[0],
                    "max_s": ts[-1],
                    "reps": len(ts),
                    "samples_s": ts,
                    "verified": all(checks[s]),
                    "bitwise_equal_to_sum": all(r["bitwise_equal_to_sum"] for r in reps),
                    "bytes_lost_max": max(r["bytes_lost"] for r in reps),
                    "min_delivered_fraction": min(r["min_delivered"] for r in reps),
                    "retransmits_mean": statistics.mean(r["retransmits"] for r in reps),
                    "runtime_median_s": statistics.median(r["runtime_s"] for r in reps) if s != "gloo" else None,
                }
            )
        base = expected = buf = tbuf = None  # free this size's arrays before the next one

    counters = {name: c.counters() for name, c in comms.items()}
    allc: list = [None] * world
    dist.all_gather_object(allc, counters)
    if emit:
        (out / f"world{world}.json").write_text(
            json.dumps(
                {
                    "world": world,
                    "rows": rows,
                    "failures": failures,
                    "counters": allc,
                    "torch": torch.__version__,
                }
            )
        )
    for c in list(comms.values())[1:]:
        c.close()
    gradwire.destroy()
    dist.barrier()
    dist.destroy_process_group()
    progress(event="done", world=world)


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return math.nan
    k = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


# ---------------------------------------------------------------------------- parent side


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_list(s: str, kind=float) -> list:
    return [kind(x) for x in s.replace(" ", "").split(",") if x]


def parse_variant(spec: str) -> dict:
    init = {}
    for part in spec.split(","):
        if not part:
            continue
        if "=" not in part:
            raise SystemExit(f"--variant {spec!r}: expected key=value[,key=value], keys: {', '.join(VARIANT_KEYS)}")
        k, v = part.split("=", 1)
        if k not in VARIANT_KEYS:
            raise SystemExit(f"--variant {spec!r}: unknown key {k!r} (known: {', '.join(VARIANT_KEYS)})")
        init[k] = VARIANT_KEYS[k](v)
    return init


def gradwire_systems(args) -> list[dict]:
    base = {}
    if args.mss is not None:
        base["mss"] = args.mss
    if args.line_rate_gbps is not None:
        base["line_rate_gbps"] = args.line_rate_gbps
    if args.transport is not None:
        base["transport"] = args.transport
    configs = [("gradwire", base)]
    for spec in args.variant:
        init = {**base, **parse_variant(spec)}
        label = ",".join(f"{k}={v}" for k, v in parse_variant(spec).items())
        configs.append((f"gradwire({label})", init))
    systems = []
    for name, init in configs:
        systems.append({"name": name, "init": init, "loss": 0.0, "loss_bound": 0.0})
        if not args.no_loss:
            systems.append(
                {
                    "name": f"{name}+loss{args.loss * 100:g}%",
                    "init": init,
                    "loss": args.loss,
                    "loss_bound": args.loss_bound,
                    "lossless": name,
                }
            )
    return systems


def launch(world: int, plan: dict, out: Path, on_line, timeout: float) -> tuple[int, list[str]]:
    """One process tree of `world` ranks; returns (worst exit code, per-rank log paths)."""
    logs_dir = out / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    procs, logs = [], []
    for r in range(world):
        env = dict(os.environ)
        env.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(plan["gloo_port"]),
            RANK=str(r),
            WORLD_SIZE=str(world),
            GLOO_SOCKET_IFNAME="lo",
            OMP_NUM_THREADS="1",
            MPLBACKEND="Agg",
        )
        log = logs_dir / f"world{world}-rank{r}.log"
        logs.append(str(log))
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(plan)]
        if r == 0:
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True))
        else:
            procs.append(subprocess.Popen(argv, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT))
    import queue
    import threading

    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in procs[0].stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                line = lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                if any(p.poll() not in (None, 0) for p in procs):
                    time.sleep(5)  # let the others report their errors, then end them
                    raise TimeoutError from None  # a rank died: the others may hang on it
                continue
            if line is None:
                break
            if line.startswith(PROGRESS):
                on_line(json.loads(line[len(PROGRESS) :]))
            elif line.startswith(NO_GLOO):
                on_line({"event": "no_gloo", "detail": line.strip()})
        for p in procs:
            p.wait(timeout=max(1.0, min(300.0, deadline - time.monotonic())))
    except (TimeoutError, subprocess.TimeoutExpired):
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
        return max(abs(p.returncode) for p in procs) or 1, logs
    return max(abs(p.returncode) for p in procs), logs


def build_frame(rows: list[dict], systems: list[dict]):
    import pandas as pd

    df = pd.DataFrame(rows)
    gloo = df[df.system == "gloo"].set_index(["world", "MB"]).median_s
    df["ratio_to_gloo"] = [r.median_s / gloo.get((r.world, r.MB), math.nan) for r in df.itertuples()]
    lossless_of = {s["name"]: s.get("lossless") for s in systems}
    med = df.set_index(["world", "MB", "system"]).median_s
    df["loss_ratio_to_lossless"] = [
        r.median_s / med.get((r.world, r.MB, lossless_of[r.system]), math.nan)
        if lossless_of.get(r.system)
        else math.nan
        for r in df.itertuples()
    ]
    df["algbw_gbps"] = df.MB * MB * 8 / df.median_s / 1e9
    first = ["world", "MB", "system", "median_s", "p90_s", "ratio_to_gloo", "loss_ratio_to_lossless"]
    return df[first + [c for c in df.columns if c not in first]]


def targets(df, systems: list[dict]) -> list[dict]:
    """The issue's targets for the default gradwire configuration."""
    default = systems[0]["name"]
    lossy = next((s["name"] for s in systems if s.get("lossless") == default), None)
    out = []
    for r in df[df.system == default].itertuples():
        if r.world in LOSSLESS_TARGET_WORLDS and r.MB in LOSSLESS_TARGET_SIZES:
            out.append(
                {
                    "target": f"lossless <= Gloo, {r.world} ranks, {r.MB:g} MB",
                    "value": r.ratio_to_gloo,
                    "limit": 1.0,
                    "met": bool(r.ratio_to_gloo <= 1.0),
                }
            )
    if lossy:
        for r in df[df.system == lossy].itertuples():
            out.append(
                {
                    "target": f"1% loss <= 1.5x lossless, {r.world} ranks, {r.MB:g} MB",
                    "value": r.loss_ratio_to_lossless,
                    "limit": LOSSY_TARGET,
                    "met": bool(r.loss_ratio_to_lossless <= LOSSY_TARGET),
                }
            )
    return out


def plot(df, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(df[["world", "MB"]].drop_duplicates().itertuples(index=False, name=None))
    systems = list(dict.fromkeys(df.system))
    fig, (ax1, ax2) = plt.subplots(
        2, 1, figsize=(min(16, max(7, 1.6 * len(groups) * max(1, len(systems) / 3))), 8), sharex=True
    )
    width = 0.8 / len(systems)
    idx = df.set_index(["world", "MB", "system"])
    for j, s in enumerate(systems):
        xs = [i + (j - (len(systems) - 1) / 2) * width for i in range(len(groups))]
        med = [idx.median_s.get((w, m, s), math.nan) for w, m in groups]
        p90 = [idx.p90_s.get((w, m, s), math.nan) for w, m in groups]
        err = [[0] * len(med), [max(0.0, p - q) for p, q in zip(p90, med)]]
        ax1.bar(xs, med, width, yerr=err, capsize=2, label=s)
        ax2.bar(xs, [idx.ratio_to_gloo.get((w, m, s), math.nan) for w, m in groups], width, label=s)
    ax1.set_yscale("log")
    ax1.set_ylabel("median allreduce time (s), bar to p90")
    ax1.legend(fontsize=8)
    ax1.set_title("gradwire ring vs torch.distributed Gloo (loopback, slowest rank, median over reps)")
    ax2.axhline(1.0, color="k", lw=0.8, ls="--")
    ax2.set_yscale("log")
    ax2.set_ylabel("time / Gloo's time (target <= 1)")
    ax2.set_xticks(range(len(groups)))
    ax2.set_xticklabels([f"{w} ranks\n{m:g} MB" for w, m in groups])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(df, tgts: list[dict], console) -> None:
    from rich.table import Table

    t = Table(title="allreduce: gradwire ring vs Gloo (median of slowest-rank times)")
    width = max(len(s) for s in df.system)
    for c in ("ranks", "MB", "system", "median s", "p90 s", "/ Gloo", "lossy / lossless", "verified"):
        if c == "system":
            t.add_column(c, justify="left", no_wrap=True, min_width=width)
        else:
            t.add_column(c, justify="right")
    prev = None
    for r in df.itertuples():
        if prev is not None and (r.world, r.MB) != prev:
            t.add_section()
        prev = (r.world, r.MB)
        ratio = f"{r.ratio_to_gloo:.2f}"
        if r.system.startswith("gradwire") and "+loss" not in r.system:
            ratio = f"[{'green' if r.ratio_to_gloo <= 1 else 'red'}]{ratio}[/]"
        lossy = (
            ""
            if math.isnan(r.loss_ratio_to_lossless)
            else (
                f"[{'green' if r.loss_ratio_to_lossless <= LOSSY_TARGET else 'red'}]{r.loss_ratio_to_lossless:.2f}[/]"
            )
        )
        t.add_row(
            str(r.world),
            f"{r.MB:g}",
            r.system,
            f"{r.median_s:.4f}",
            f"{r.p90_s:.4f}",
            ratio,
            lossy,
            "[green]yes[/]" if r.verified else "[red]NO[/]",
        )
    console.print(t)
    for g in tgts:
        mark = "[green]met[/]" if g["met"] else "[red]missed[/]"
        console.print(f"  target {g['target']}: {g['value']:.2f} (limit {g['limit']:g}) {mark}")
    console.print(f"[dim]{GLOO_NOTE}[/]")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument(
        "--sizes",
        type=lambda s: parse_list(s, float),
        help="MB (MiB) per tensor, comma-separated (default 1,25,100; --quick: 0.05,0.5)",
    )
    ap.add_argument("--worlds", type=lambda s: parse_list(s, int), help="ranks per job (default 2,4; --quick: 2)")
    ap.add_argument("--reps", type=int, help="timed rounds per size (default 7; --quick: 3)")
    ap.add_argument("--warmup", type=int, help="untimed rounds first (default 2; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny sizes, world 2, few reps")
    ap.add_argument("--out", default=str(ROOT / "results" / "allreduce_vs_gloo"), help="output directory")
    ap.add_argument("--loss", type=float, default=LOSS, help="injected loss on every rank's outgoing datagrams")
    ap.add_argument("--loss-bound", type=float, default=LOSS_BOUND)
    ap.add_argument("--no-loss", action="store_true", help="skip the lossy gradwire rows")
    ap.add_argument(
        "--mss",
        type=int,
        help="gradwire payload bytes per datagram (runtime default: from the path MTU, 65472 on loopback)",
    )
    ap.add_argument(
        "--line-rate-gbps",
        type=float,
        help="gradwire pacer rate (runtime default: the interface speed, 100 on loopback)",
    )
    from gradwire.runtime import TRANSPORTS

    ap.add_argument("--transport", choices=TRANSPORTS, help="gradwire transport (runtime default dlcp)")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="K=V[,K=V]",
        help=f"extra gradwire configuration run side by side ({', '.join(VARIANT_KEYS)}); repeatable",
    )
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per world size before the job is killed")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument(
        "--replot",
        action="store_true",
        help="no run: redraw the table, targets and plot from <out>/results.json and meta.json",
    )
    args = ap.parse_args()

    if args.replot:
        import pandas as pd
        from rich.console import Console

        out = Path(args.out)
        df = pd.read_json(out / "results.json")
        systems = json.loads((out / "meta.json").read_text())["systems"][1:]
        plot(df, out / "allreduce_vs_gloo.png")
        render(df, targets(df, systems), Console(width=None if sys.stdout.isatty() else 120))
        return 0

    if args.worker:
        worker(json.loads(args.worker))
        return 0

    sizes = args.sizes or ([0.05, 0.5] if args.quick else [1.0, 25.0, 100.0])
    worlds = args.worlds or ([2] if args.quick else [2, 4])
    reps = args.reps or (3 if args.quick else 7)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    systems = gradwire_systems(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(width=None if sys.stdout.isatty() else 120)
    nsys = 1 + len(systems)
    total = sum(len(sizes) * nsys * (warmup + reps) for _ in worlds)
    rows, failures, runs, counters = [], [], [], {}
    torch_version = None
    no_gloo: list[str] = []
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    load_before = os.getloadavg()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as prog:
        task = prog.add_task("starting", total=total)
        for world in worlds:
            plan = {
                "out": str(out),
                "sizes": sizes,
                "reps": reps,
                "warmup": warmup,
                "timeout": min(args.timeout, 120.0),
                "gloo_port": free_port(),
                "gradwire": [{**s, "port": free_port()} for s in systems],
            }
            res_file = out / f"world{world}.json"
            res_file.unlink(missing_ok=True)
            prog.update(task, description=f"{world} ranks: joining")

            def on_line(ev, world=world):
                if ev["event"] == "call":
                    prog.advance(task)
                    mark = "" if ev["ok"] else " FAILED CHECK"
                    desc = (
                        f"{world} ranks {ev['mb']:g} MB {ev['system']} "
                        f"{ev['phase']} {ev['i'] + 1}: {ev['seconds']:.4f} s{mark}"
                    )
                    prog.update(task, description=escape(desc))
                    if not console.is_terminal:  # logs get one plain line per call
                        print(desc, file=sys.stderr, flush=True)
                elif ev["event"] == "no_gloo":
                    no_gloo.append(ev["detail"])
                elif ev["event"] == "joined":
                    prog.update(task, description=f"{world} ranks: joined")

            load0 = os.getloadavg()
            t0 = time.monotonic()
            code, logs = launch(world, plan, out, on_line, args.timeout)
            if no_gloo:
                break
            wall = time.monotonic() - t0
            runs.append(
                {
                    "world": world,
                    "exit_code": code,
                    "wall_s": round(wall, 1),
                    "loadavg_before": load0,
                    "loadavg_after": os.getloadavg(),
                    "logs": logs,
                }
            )
            if code != 0 or not res_file.exists():
                failures.append(f"world {world}: the job failed (exit {code}); see {logs}")
                for lp in logs:
                    tail = Path(lp).read_text(errors="replace")[-1500:]
                    console.print(f"[red]--- {lp}[/]\n{tail}")
                continue
            got = json.loads(res_file.read_text())
            res_file.unlink()
            rows += got["rows"]
            failures += got["failures"]
            counters[world] = got["counters"]
            torch_version = got["torch"]

    if no_gloo:
        console.print(no_gloo[0])
        return NO_GLOO_EXIT
    if not rows:
        console.print("[red]no results[/]")
        for f in failures:
            console.print(f"[red]{f}[/]")
        return 1
    df = build_frame(rows, systems)
    tgts = targets(df, systems)
    flat = df.drop(columns=["samples_s"])
    flat.to_csv(out / "results.csv", index=False)
    df.to_json(out / "results.json", orient="records", indent=1)
    verified = not failures and bool(df.verified.all())
    meta = {
        "command": " ".join([Path(sys.executable).name, os.path.relpath(__file__, Path.cwd())] + sys.argv[1:]),
        "started": started,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch_version,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "sizes_mb": sizes,
        "mb_bytes": MB,
        "worlds": worlds,
        "reps": reps,
        "warmup": warmup,
        "systems": [{"name": "gloo"}] + systems,
        "timing": "barrier before each timed call; time = max over ranks of the call duration; "
        "median and p90 over reps; systems interleaved, order rotated every rep",
        "gloo_loss_note": GLOO_NOTE,
        "verification": "passed" if verified else "FAILED",
        "failures": failures,
        "targets": tgts,
        "runs": runs,
        "counters": counters,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    if not args.no_plot:
        plot(df, out / "allreduce_vs_gloo.png")
    render(df, tgts, console)
    if verified:
        console.print(
            "[green]verification passed[/]: every lossless result equals the numpy sum; "
            "lossy results met their bound on every rank"
        )
    else:
        console.print("[red]verification FAILED[/]")
        for f in failures[:20]:
            console.print(f"  [red]{f}[/]")
    console.print(
        f"wrote {out / 'results.csv'}, results.json, meta.json" + ("" if args.no_plot else ", allreduce_vs_gloo.png")
    )
    return 0 if verified and all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
