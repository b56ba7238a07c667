"""The crosscheck's twins re-run against recorded kernel medians, without the kernels.

A `gradwire crosscheck` CSV keeps each row's emulated (kernel) median. This re-runs the
rows' twins with this build, once as the case defines them and once with `--set` keys
added, and prints kernel / twin for both: what a model change does to the agreement
with the kernels, in seconds, on a machine with no emulator at hand.

    python tools/crosscheck_twins.py docs/data/crosscheck-2cores-025-incast-9runs.csv \\
        --gbps 0.25 --iterations 9 --set transport.tcp_rack_min_rtt=samples
"""

import argparse
import csv
import dataclasses
import tempfile
from pathlib import Path

from gradwire.emu.crosscheck import cases, twin


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="a gradwire crosscheck table (case, backend, emulated_s, ...)")
    ap.add_argument("--gbps", type=float, default=0.25, help="the rate the CSV was measured at")
    ap.add_argument("--iterations", type=int, default=None, help="as the crosscheck was run")
    ap.add_argument("--set", action="append", default=[], help="a twin key for the second column")
    a = ap.parse_args()
    with open(a.csv) as f:
        recorded = {(r["case"], r["backend"]): r for r in csv.DictReader(f)}
    print("| case | backend | kernel (s) | kernel / twin | with the --set keys |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases(gbps=a.gbps)):
            other = dataclasses.replace(case, twin_sets=(*case.twin_sets, *a.set))
            for backend in case.backends:
                row = recorded.get((case.name, backend))
                if row is None:
                    continue
                kernel = float(row["emulated_s"])
                base, _, _ = twin(case, backend, Path(tmp) / f"{i}-{backend}", a.iterations)
                alt, _, _ = twin(other, backend, Path(tmp) / f"{i}-{backend}-set", a.iterations)
                print(
                    f"| {case.name} | {backend} | {kernel:.4f} | {kernel / base:.2f} | {kernel / alt:.2f} |", flush=True
                )


if __name__ == "__main__":
    main()
