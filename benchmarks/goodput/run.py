#!/usr/bin/env python3
"""Runs the runtime data-path benchmarks (see README.md) and writes results.json."""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(mode, extra):
    cmd = ["cargo", "run", "--quiet", "--release", "-p", "gradwire-net", "--example", "goodput", "--", mode] + extra
    print("$", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    sys.stdout.write(out)
    return [json.loads(line[len("RESULT ") :]) for line in out.splitlines() if line.startswith("RESULT ")]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=256, help="MiB per goodput transfer")
    ap.add_argument("--reps", type=int, default=7, help="goodput reps")
    ap.add_argument("--loss-reps", type=int, default=5)
    ap.add_argument("--skip-loss", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results.json"))
    a = ap.parse_args()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    results = {"load_before": load, "goodput": run("goodput", ["--mb", str(a.mb), "--reps", str(a.reps)])}
    if not a.skip_loss:
        results["loss"] = run("loss", ["--reps", str(a.loss_reps)])
    with open("/proc/loadavg") as f:
        results["load_after"] = f.read().split()[:3]
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
