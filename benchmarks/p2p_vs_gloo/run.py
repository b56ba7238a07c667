#!/usr/bin/env python3
"""Point-to-point and all-to-all on the "gradwire" backend against Gloo, 2 ranks on
loopback: a send/recv ping-pong of 4 KB and 4 MB and an all_to_all_single of 8 KB and
8 MB, each the median of its rounds, the systems alternating.

    python benchmarks/p2p_vs_gloo/run.py          # starts 2 ranks under torchrun (20 s)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def worker() -> None:
    import torch
    import torch.distributed as dist

    import gradwire.torch  # noqa: F401 - registers the backend

    dist.init_process_group("gradwire")
    gloo = dist.new_group(backend="gloo")
    r = dist.get_rank()
    for n in (1024, 1 << 20):
        x = torch.ones(n)
        res: dict[str, list[float]] = {"gradwire": [], "gloo": []}
        for name, g in (("gradwire", None), ("gloo", gloo)) * 2:
            for i in range(150):
                t0 = time.perf_counter()
                if r == 0:
                    dist.send(x, 1, group=g)
                    dist.recv(x, 1, group=g)
                else:
                    dist.recv(x, 0, group=g)
                    dist.send(x, 0, group=g)
                if i >= 20:
                    res[name].append(time.perf_counter() - t0)
        if r == 0:
            w, g_ = statistics.median(res["gradwire"]), statistics.median(res["gloo"])
            print(f"{n * 4:>8} B ping-pong:          gradwire {w * 1e6:7.0f} us   gloo {g_ * 1e6:7.0f} us", flush=True)
        xs, out = torch.ones(2 * n), torch.empty(2 * n)
        res = {"gradwire": [], "gloo": []}
        for name, g in (("gradwire", None), ("gloo", gloo)) * 2:
            for i in range(60):
                t0 = time.perf_counter()
                dist.all_to_all_single(out, xs, group=g)
                if i >= 10:
                    res[name].append(time.perf_counter() - t0)
        if r == 0:
            w, g_ = statistics.median(res["gradwire"]), statistics.median(res["gloo"])
            print(f"{n * 8:>8} B all_to_all_single:  gradwire {w * 1e6:7.0f} us   gloo {g_ * 1e6:7.0f} us", flush=True)
    dist.barrier(group=gloo)
    os._exit(0)  # without the interpreter's teardown (Gloo's threads can abort it)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__, "--worker"]
    sys.exit(subprocess.call(cmd))
