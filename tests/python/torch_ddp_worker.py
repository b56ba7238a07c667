"""One rank of the DDP-on-"gradwire" test: trains the embedded CNN from the same seed on the
same batches with DDP over a Gloo group, DDP over the gradwire world group, and the latter
with gradwire.torch.loss_tolerant_hook, with gradwire.torch.scheduled_hook, and with the
scheduled hook tuned online by a grid search and by AutoByte; saves the per-step losses and the final
parameters."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gradwire.torch as gt
from gradwire.launch import leave
from gradwire.train.models import build


def train(ddp: DDP, data, rank: int, world: int, steps: int, batch: int) -> tuple[list[float], torch.Tensor]:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    losses = []
    n = len(data.y_train)
    for s in range(steps):
        i = ((s * world + rank) * batch) % (n - batch)
        x, y = data.x_train[i : i + batch], data.y_train[i : i + batch]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, torch.cat([p.detach().flatten() for p in ddp.parameters()])


def main() -> None:
    plan = json.loads(sys.argv[1])
    torch.set_num_threads(1)
    dist.init_process_group("gradwire")
    gloo = dist.new_group(backend="gloo")  # the reference only
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {}
    for name in ("gloo", "gradwire", "hook", "sched", "tuned", "autobyte", "autobyte-bg"):
        model, data = build("cnn", seed=0)
        ddp = DDP(
            model,
            process_group=gloo if name == "gloo" else None,
            bucket_cap_mb=plan["bucket_mb"],
        )
        state = None
        if name == "hook":
            state = gt.LossTolerantState(chunk_bytes=8192, holdback_bytes=16384)
            ddp.register_comm_hook(state, gt.loss_tolerant_hook)
        if name == "sched":
            state = gt.ScheduledState(partition_bytes=8192, credit_bytes=16384)
            ddp.register_comm_hook(state, gt.scheduled_hook)
        if name == "tuned":
            from gradwire.tune import Candidate, GridSearch

            grid = GridSearch([Candidate(4096, 1), Candidate(8192, 2), Candidate(16384, 4)])
            state = gt.ScheduledState(partition_bytes=8192, credit_bytes=8192, tuner=grid, tune_every=3)
            ddp.register_comm_hook(state, gt.scheduled_hook)
        if name.startswith("autobyte"):
            from gradwire.tune import Candidate
            from gradwire.tune.online import AutoByteLoop

            loop = AutoByteLoop(
                candidates=[Candidate(4096, 1), Candidate(8192, 2), Candidate(16384, 4)],
                background=name.endswith("-bg"),
            )
            state = gt.ScheduledState(
                partition_bytes=8192, credit_bytes=8192, tuner=loop, tune_every=3, batch_size=plan["batch"]
            )
            state.watch(model)
            ddp.register_comm_hook(state, gt.scheduled_hook)
        losses, params = train(ddp, data, rank, world, plan["steps"], plan["batch"])
        gathered = [torch.zeros_like(params) for _ in range(world)]
        dist.all_gather(gathered, params)
        out[name] = {
            "losses": losses,
            "params": params.tolist(),
            "replicas_identical": all(torch.equal(g, params) for g in gathered),
            "issue_order": state.issue_order if state else None,
            "history": getattr(state, "history", None),
            "config": [state.partition_bytes, state.credit_bytes] if hasattr(state, "history") else None,
        }
        if name.startswith("autobyte"):
            obs = state.last_observation
            out[name]["observation"] = {
                "backward_ms": obs.backward_ms,
                "upload_gbps": obs.upload_gbps,
                "download_gbps": obs.download_gbps,
                "workers": obs.workers,
            }
            out[name]["groups_observed"] = len(state.tuner.online)
    with open(os.path.join(plan["out"], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    leave()  # without the interpreter's teardown, which Gloo's threads can abort
