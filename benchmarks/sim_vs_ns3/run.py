#!/usr/bin/env python3
"""Wall time and peak memory: gradwire vs ns-3.37 on the same scenario.

Runs the scenario (default: scenarios/leafspine-ps-dctcp.toml, 144 hosts, 10 296 flows)
once in gradwire's Rust binary and once in the ns-3 reference program
(validation/ns3/leafspine.cc), each as a child process, and measures each child's wall
time and peak resident set size (ru_maxrss from os.wait4). Both sides use per-packet
spraying (`routing.mode = "spray"`), the only multipath ns-3.37's global routing has.

    python benchmarks/sim_vs_ns3/run.py [--scenario FILE] [--repeat N]

Writes benchmarks/sim_vs_ns3/results.json. Targets: gradwire >= 20x faster and using
<= 1/4 of ns-3's peak memory. Exit 0 when both runs succeeded (targets or not), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "validation"))
import compare  # noqa: E402  (ns3_args, binaries, flow reading)

SPEEDUP_TARGET = 20.0
MEMORY_TARGET = 0.25


def measure(cmd: list[str], log: Path) -> dict:
    """Run `cmd` as a child; wall time from fork to reap, peak RSS of that child alone."""
    with open(log, "w") as lf:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "exit_code": proc.returncode,
        "wall_s": round(wall, 3),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
        "max_rss_mb": round(ru.ru_maxrss / 1024.0, 1),  # Linux: ru_maxrss is in KiB
        "command": " ".join(cmd),
    }


def ensure_binaries() -> None:
    subprocess.run(["bash", str(compare.NS3_DIR / "build.sh")], check=True)
    if not compare.OUR_BIN.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "gradwire-sim"], check=True, cwd=ROOT)


def flow_summary(path: Path) -> dict:
    fcts, unfinished, rtos = compare.read_flows(path)
    fcts.sort()
    return {
        "flows_finished": len(fcts),
        "flows_unfinished": unfinished,
        "fct_mean_us": round(sum(fcts) / len(fcts) / 1e3, 1) if fcts else None,
        "fct_p99_us": round(compare.percentile(fcts, 99) / 1e3, 1) if fcts else None,
        "timeouts": rtos,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="scenarios/leafspine-ps-dctcp.toml")
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs per simulator; the fastest wall time and its RSS are kept"
    )
    ap.add_argument("--out", default=str(HERE / "results.json"))
    args = ap.parse_args()

    scenario = ROOT / args.scenario  # not resolved: scenarios/ may be a symlink
    # The pair validation/compare.py checks for agreement (its default TCP mode, NIC and
    # start jitter on both sides), so both simulators do the same work.
    scn = compare.resolved(scenario)
    scn["workload"]["start_jitter_us"] = compare.DEFAULT_START_JITTER_US
    transport, seed = scn["transport"]["kind"], int(scn["seed"])
    ensure_binaries()

    work = Path(tempfile.mkdtemp(prefix="sim_vs_ns3-"))
    best: dict[str, dict] = {}
    try:
        for rep in range(args.repeat):
            ours_out = work / f"ours{rep}"
            ours_cmd = compare.our_command(scenario, ours_out, transport, seed)
            ns3_csv = work / f"ns3-{rep}.csv"
            ns3_cmd = compare.ns3_command(compare.ns3_args(scn, transport, seed), ns3_csv)
            for name, cmd, csv_path in (("gradwire", ours_cmd, ours_out / "flows.csv"), ("ns3", ns3_cmd, ns3_csv)):
                print(f"[{rep + 1}/{args.repeat}] {name}: {' '.join(cmd)}", flush=True)
                m = measure(cmd, work / f"{name}{rep}.log")
                ok = m["exit_code"] == 0 and csv_path.exists()
                if not ok:
                    print(
                        f"{name} failed (exit {m['exit_code']}):\n" + (work / f"{name}{rep}.log").read_text()[-2000:],
                        file=sys.stderr,
                    )
                    return 1
                m.update(flow_summary(csv_path))
                m["log_tail"] = (work / f"{name}{rep}.log").read_text().strip().splitlines()[-3:]
                print(
                    f"    wall {m['wall_s']:.2f} s, peak RSS {m['max_rss_mb']:.1f} MB, "
                    f"{m['flows_finished']} flows, mean FCT {m['fct_mean_us']} us",
                    flush=True,
                )
                if name not in best or m["wall_s"] < best[name]["wall_s"]:
                    best[name] = m
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ours, ns3 = best["gradwire"], best["ns3"]
    speedup = ns3["wall_s"] / ours["wall_s"]
    mem_ratio = ours["max_rss_mb"] / ns3["max_rss_mb"]
    result = {
        "scenario": args.scenario,
        "transport": transport,
        "routing": "spray (both)",
        "repeat": args.repeat,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "gradwire": ours,
        "ns3": ns3,
        # the same work? (validation/compare.py pools seeds and tests this properly)
        "fct_mean_gradwire_over_ns3": round(ours["fct_mean_us"] / ns3["fct_mean_us"], 3),
        "speedup_ns3_over_gradwire": round(speedup, 2),
        "memory_ratio_gradwire_over_ns3": round(mem_ratio, 3),
        "targets": {"speedup_min": SPEEDUP_TARGET, "memory_ratio_max": MEMORY_TARGET},
        "speedup_met": speedup >= SPEEDUP_TARGET,
        "memory_met": mem_ratio <= MEMORY_TARGET,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"\nwall time: gradwire {ours['wall_s']:.2f} s, ns-3 {ns3['wall_s']:.2f} s "
        f"-> ns-3/gradwire = {speedup:.1f}x (target >= {SPEEDUP_TARGET:.0f}x: "
        f"{'met' if result['speedup_met'] else 'NOT met'})"
    )
    print(
        f"peak RSS:  gradwire {ours['max_rss_mb']:.1f} MB, ns-3 {ns3['max_rss_mb']:.1f} MB "
        f"-> gradwire/ns-3 = {mem_ratio:.3f} (target <= {MEMORY_TARGET}: "
        f"{'met' if result['memory_met'] else 'NOT met'})"
    )
    print(
        f"same work?  mean FCT gradwire {ours['fct_mean_us']:.0f} us, ns-3 {ns3['fct_mean_us']:.0f} us "
        f"({result['fct_mean_gradwire_over_ns3']:.3f}); RTOs {ours['timeouts']} / {ns3['timeouts']}"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
