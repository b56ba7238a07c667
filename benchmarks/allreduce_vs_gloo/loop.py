#!/usr/bin/env python3
"""Back-to-back allreduce loops: wall time and CPU per call, Gloo vs gradwire configurations.

Where run.py times single calls between barriers (what a training step sees), this runs
``--calls`` allreduces back to back per system and reports, per call, the wall time and
the CPU time of the whole process (every thread: gradwire's engine and send threads, Gloo's
own), so a change's CPU cost can be told apart from its effect on overlap. Systems are
interleaved round by round, so slow phases of a noisy machine hit all of them.

    gradwire launch -n 4 -- python benchmarks/allreduce_vs_gloo/loop.py --mb 25
    gradwire launch -n 4 -- python benchmarks/allreduce_vs_gloo/loop.py --mb 25 \\
        --system gradwire --system gradwire:send_thread=false --system gloo

Rank 0 prints one line per system: median over rounds of (wall ms per call, CPU ms per call
per rank, averaged over ranks).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time


def parse_system(spec: str) -> tuple[str, dict]:
    name, _, opts = spec.partition(":")
    kw: dict = {}
    for part in filter(None, opts.split(",")):
        k, v = part.split("=", 1)
        kw[k] = {"true": True, "false": False}.get(v.lower(), int(v) if v.isdigit() else v)
    return name, kw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=25.0, help="MiB per tensor (float32)")
    ap.add_argument("--calls", type=int, default=10, help="back-to-back calls per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--system",
        action="append",
        default=[],
        help="gloo, or gradwire[:k=v,...] (Communicator keywords); default: gloo and gradwire",
    )
    args = ap.parse_args()
    systems = [parse_system(s) for s in (args.system or ["gloo", "gradwire"])]

    import numpy as np
    import torch
    import torch.distributed as dist

    import gradwire

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    base_port = int(os.environ["MASTER_PORT"])
    os.environ["MASTER_PORT"] = str(base_port + 1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    comms = {}
    for i, (name, kw) in enumerate(systems):
        if name == "gradwire":
            comms[i] = gradwire.Communicator(master_port=base_port + 2 + i, **kw)
    x = np.ones(int(args.mb * (1 << 20) / 4), dtype=np.float32)
    t = torch.from_numpy(x)

    def call(i: int) -> None:
        if i in comms:
            comms[i].allreduce(x)
        else:
            dist.all_reduce(t)

    for i in range(len(systems)):  # warm-up
        call(i)
    walls: dict[int, list[float]] = {i: [] for i in range(len(systems))}
    cpus: dict[int, list[float]] = {i: [] for i in range(len(systems))}
    for r in range(args.rounds):
        for k in range(len(systems)):
            i = (k + r) % len(systems)
            dist.barrier()
            c0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            for _ in range(args.calls):
                call(i)
            w1, c1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
            v = torch.tensor([w1 - w0, cpu], dtype=torch.float64)
            dist.all_reduce(v)  # sums over ranks
            walls[i].append(float(v[0]) / world / args.calls * 1e3)
            cpus[i].append(float(v[1]) / world / args.calls * 1e3)
    if rank == 0:
        print(f"{world} ranks, {args.mb:g} MiB, {args.rounds} rounds x {args.calls} calls")
        for i, (name, kw) in enumerate(systems):
            label = name + (":" + ",".join(f"{k}={v}" for k, v in kw.items()) if kw else "")
            w, c = walls[i], cpus[i]
            print(
                f"  {label:40s} wall {statistics.median(w):7.1f} ms/call ({min(w):.1f}-{max(w):.1f})"
                f"   cpu {statistics.median(c):6.1f} ms/call/rank ({min(c):.1f}-{max(c):.1f})"
            )
    for c in comms.values():
        c.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
