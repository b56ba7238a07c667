"""A runtime demo: every algorithm on one buffer, checked against numpy, with timings.

gradwire launch -n 4 -- python -m gradwire.demo --mb 8
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import gradwire


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=8.0, help="buffer size in MB (float32)")
    ap.add_argument("--loss", type=float, default=0.0, help="inject this datagram loss rate on every rank")
    ap.add_argument("--bound", type=float, default=0.0, help="loss bound of the reduce half")
    args = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    racks = ",".join(str(r * 2 // world) for r in range(world))
    impair = {p: (args.loss, 0.0) for p in range(world)} if args.loss > 0 else None
    comm = gradwire.init(topology=racks, impair=impair)
    n = int(args.mb * 1e6 / 4)
    rng = np.random.default_rng(comm.rank)
    base = (rng.integers(-1000, 1000, n) / 8).astype(np.float32)
    want = None
    rows = []
    for algo in gradwire.runtime.ALGORITHMS:
        x = base.copy()
        rep = gradwire.allreduce(x, algorithm=algo, loss_bound=args.bound)
        if want is None:
            # The exact sum, from a lossless ring on a copy (all ranks call it).
            want = base.copy()
            gradwire.allreduce(want, algorithm="ring")
        exact = bool(np.array_equal(x, want))
        rows.append((algo, rep.seconds, rep.bytes_lost, rep.retransmits, exact))
    if comm.rank == 0:
        print(f"{world} ranks, {args.mb:g} MB float32, loss {args.loss:g}, bound {args.bound:g}")
        print(f"{'algorithm':<10}{'time (ms)':>10}{'Gbit/s':>9}{'lost B':>9}{'resent':>8}  exact")
        for algo, s, lost, rtx, exact in rows:
            gbps = 8 * args.mb * 1e6 / s / 1e9 if s > 0 else float("nan")
            print(f"{algo:<10}{s * 1e3:>10.1f}{gbps:>9.2f}{lost:>9}{rtx:>8}  {exact}")
    gradwire.destroy()


if __name__ == "__main__":
    main()
