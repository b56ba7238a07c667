"""One rank of a `gradwire train` job (started by `gradwire launch`): data-parallel DDP
training of an embedded model on the "gloo" or "gradwire" backend.

Rank 0 prints progress as ``@progress {json}`` lines and writes the result to
``<out>/result.json``. The training clock runs only during steps: evaluation (on rank 0,
the replicas being identical) and the barrier after it are not counted.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gradwire.torch as gt
from gradwire.launch import leave
from gradwire.train.models import build


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i : i + 512]).argmax(1) == y[i : i + 512]).sum()) for i in range(0, len(y), 512))
    model.train()
    return correct / len(y)


def run(plan: dict) -> dict:
    torch.set_num_threads(plan.get("threads", 1))
    if plan["backend"] == "gradwire":
        opts = gt.Options(
            inject_loss=plan["inject_loss"],
            mss=plan.get("mss"),
            transport=plan.get("transport"),
            extra=plan.get("runtime") or {},  # the emulator's line rate and runtime table
        )
        dist.init_process_group("gradwire", pg_options=opts)
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, data = build(plan["model"], seed=plan["seed"])
    ddp = DDP(model)
    state = None
    if plan["backend"] == "gradwire":
        state = gt.LossTolerantState(loss_bound=plan["loss_bound"])
        ddp.register_comm_hook(state, gt.loss_tolerant_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=plan["lr"], momentum=0.9)
    g = torch.Generator().manual_seed(plan["seed"])
    batch, n = plan["batch"], len(data.y_train)
    steps_per_epoch = n // (batch * world)
    total = steps_per_epoch * plan["epochs"]
    eval_every = max(1, math.ceil(steps_per_epoch / plan.get("evals_per_epoch", 2)))
    clock, step_times, curve, reached = 0.0, [], [], None
    step = 0
    for _epoch in range(plan["epochs"]):
        perm = torch.randperm(n, generator=g)  # same on every rank; each takes its slice
        for s in range(steps_per_epoch):
            idx = perm[(s * world + rank) * batch : (s * world + rank + 1) * batch]
            x, y = data.x_train[idx], data.y_train[idx]
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
            dt = time.perf_counter() - t0
            clock += dt
            step_times.append(dt)
            step += 1
            if step % eval_every == 0 or step == total:
                if rank == 0:
                    acc = accuracy(model, data.x_test, data.y_test)
                    curve.append(
                        {
                            "seconds": clock,
                            "step": step,
                            "epoch": step / steps_per_epoch,
                            "accuracy": acc,
                        }
                    )
                    if reached is None and acc >= plan["target"]:
                        reached = curve[-1]
                    print(
                        "@progress " + json.dumps({"step": step, "total": total, "accuracy": acc}),
                        flush=True,
                    )
                dist.barrier()
    result = {
        "plan": plan, "world": world, "steps": step, "train_seconds": clock,
        "samples_per_s": step * batch * world / clock,
        "median_step_s": sorted(step_times)[len(step_times) // 2],
        "p90_step_s": sorted(step_times)[int(0.9 * (len(step_times) - 1))],
        "max_step_s": max(step_times),
        "final_accuracy": curve[-1]["accuracy"] if curve else float("nan"),
        "time_to_accuracy_s": reached["seconds"] if reached else None,
        "steps_to_accuracy": reached["step"] if reached else None,
        "curve": curve,
    }  # fmt: skip
    if state is not None:
        result.update(calls=state.calls, bytes_sent=state.bytes_sent, bytes_lost=state.bytes_lost)
    # Every rank's loss accounting: the sum is what the job lost.
    if state is not None:
        lost = torch.tensor([float(state.bytes_lost), float(state.bytes_sent)], dtype=torch.float64)
        dist.all_reduce(lost)
        result.update(bytes_lost=int(lost[0]), bytes_sent=int(lost[1]))
    if rank == 0:
        Path(plan["out"]).write_text(json.dumps(result))
    dist.barrier()  # nobody tears its connections down while a peer still uses them
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
    leave()  # without the interpreter's teardown, which Gloo's threads can abort
