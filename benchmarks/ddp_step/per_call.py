#!/usr/bin/env python3
"""What one small allreduce costs on each path into gradwire, beside Gloo, in one job.

The CNN of `run.py` has one 120 KB bucket per step, so its step-time ratio to Gloo is set by
these per-call costs. Each path is timed back to back `--calls` times (median, µs), twice:

    python benchmarks/ddp_step/per_call.py            # 2 ranks, 30,000 floats (120 KB)
    python benchmarks/ddp_step/per_call.py -n 4 --floats 250000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def worker(floats: int, calls: int) -> None:
    import torch
    import torch.distributed as dist

    import gradwire.torch as gt

    torch.set_num_threads(1)
    dist.init_process_group("gradwire")
    gloo = dist.new_group(backend="gloo")
    be = gt.backend_of()
    pg = dist.group.WORLD
    x = torch.randn(floats)
    opts = dist.AllreduceOptions()
    paths = {
        "bare runtime: Communicator.allreduce": lambda: be.comm.allreduce_async(x).wait(),
        "backend.allreduce(...).wait()": lambda: be.allreduce([x], opts).wait(),
        "through c10d: pg.allreduce(...).wait()": lambda: pg.allreduce([x], opts).wait(),
        "dist.all_reduce (synchronous)": lambda: dist.all_reduce(x),
        "through c10d, waited on get_future() (DDP's path)": lambda: pg.allreduce([x], opts).get_future().wait(),
        "Gloo: dist.all_reduce (synchronous)": lambda: dist.all_reduce(x, group=gloo),
        "Gloo: waited on get_future() (DDP's path)": lambda: (
            dist.all_reduce(x, group=gloo, async_op=True).get_future().wait()
        ),
    }
    for f in paths.values():  # warm up every path
        for _ in range(20):
            f()
    for rep in range(2):
        res = {}
        for name, f in paths.items():
            dist.barrier(group=gloo)
            ts = []
            for _ in range(calls):
                t0 = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t0)
            res[name] = statistics.median(ts) * 1e6
        if dist.get_rank() == 0:
            print(f"round {rep + 1}: {floats * 4 / 1e3:.0f} KB, {dist.get_world_size()} ranks, median of {calls}")
            for name, us in res.items():
                print(f"  {name:52} {us:8.0f} us")
            sys.stdout.flush()
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--ranks", type=int, default=2)
    ap.add_argument("--floats", type=int, default=30_000)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.floats, a.calls)
        return 0
    from gradwire import launch

    cmd = launch.command(
        [sys.executable, str(Path(__file__).resolve()), "--worker", "--floats", str(a.floats), "--calls", str(a.calls)],
        a.ranks,
        timeout=600,
    )
    r = launch.run_job(cmd, cwd=Path(__file__).resolve().parent.parent.parent)
    print(r.stdout, end="")
    if r.returncode != 0:
        print(r.stderr[-3000:], file=sys.stderr)
    return r.returncode


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
