"""One rank of the timeout test: init_process_group("gradwire", timeout=T); the last rank
sleeps `delay` seconds before the first all_reduce. With `barrier_delay`, then a
monitored_barrier of 1 s that the last rank joins that late. Saves what each rank saw and
when."""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import gradwire.torch  # noqa: F401 - registers the backend
from gradwire.launch import leave


def main() -> None:
    plan = json.loads(sys.argv[1])
    dist.init_process_group("gradwire", timeout=timedelta(seconds=plan["timeout"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == world - 1:
        time.sleep(plan["delay"])
    out = {"error": None}
    t0 = time.monotonic()
    try:
        t = torch.ones(1000)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        out["sum"] = t[0].item()
        out["is_completed"] = work.is_completed()
    except Exception as e:  # noqa: BLE001 - reported to the test
        out["error"] = f"{type(e).__name__}: {e}"
    out["seconds"] = time.monotonic() - t0
    if "barrier_delay" in plan and out["error"] is None:
        if rank == world - 1:
            time.sleep(plan["barrier_delay"])
        t0 = time.monotonic()
        try:
            dist.monitored_barrier(timeout=timedelta(seconds=1))
            out["barrier"] = "passed"
        except Exception as e:  # noqa: BLE001 - reported to the test
            out["barrier"] = f"{type(e).__name__}: {e}"
        out["barrier_seconds"] = time.monotonic() - t0
    if plan.get("reinit") and out["error"] is None:
        # A group made again on the same store reads only its own round's keys.
        dist.destroy_process_group()
        dist.init_process_group("gradwire", timeout=timedelta(seconds=plan["timeout"]))
        t = torch.full((3,), float(rank + 10))
        dist.all_reduce(t)
        out["reinit_sum"] = t[0].item()
    with open(os.path.join(plan["out"], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
    leave()
