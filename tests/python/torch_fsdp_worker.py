"""One rank of the FSDP-on-"gradwire" test: trains a small MLP from the same seed on the
same batches with FSDP1 (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, FULL_SHARD with
use_orig_params) and FSDP2 (`fully_shard`), each once over the gradwire world group and
once over a Gloo group, and saves the per-step losses and the final parameters."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy, fully_shard

from gradwire.launch import leave


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )


def wrap(kind: str, group: dist.ProcessGroup) -> torch.nn.Module:
    m = model()
    if kind == "fsdp2":
        mesh = DeviceMesh.from_group(group, "cpu")
        for layer in (m[0], m[2]):
            fully_shard(layer, mesh=mesh)
        return fully_shard(m, mesh=mesh)
    strategy, orig = {
        "full_shard": (ShardingStrategy.FULL_SHARD, False),
        "shard_grad_op": (ShardingStrategy.SHARD_GRAD_OP, False),
        "no_shard": (ShardingStrategy.NO_SHARD, False),
        "use_orig_params": (ShardingStrategy.FULL_SHARD, True),
    }[kind]
    return FSDP(m, process_group=group, sharding_strategy=strategy, use_orig_params=orig, device_id=torch.device("cpu"))


def train(m: torch.nn.Module, rank: int, steps: int) -> tuple[list[float], list[float]]:
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        y = torch.randint(0, 4, (8,), generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if isinstance(m, FSDP):
        with FSDP.summon_full_params(m):
            params = torch.cat([p.detach().flatten() for p in m.parameters()])
    else:
        params = torch.cat([p.full_tensor().detach().flatten() for p in m.parameters()])
    return losses, params.tolist()


def main() -> None:
    plan = json.loads(sys.argv[1])
    torch.set_num_threads(1)
    dist.init_process_group("gradwire")
    gloo = dist.new_group(backend="gloo")  # the reference only
    rank = dist.get_rank()
    out = {}
    for kind in plan["kinds"]:
        for name, group in (("gloo", gloo), ("gradwire", dist.group.WORLD)):
            try:
                losses, params = train(wrap(kind, group), rank, plan["steps"])
                out[f"{kind} {name}"] = {"losses": losses, "params": params}
            except Exception as e:  # noqa: BLE001 - reported to the test
                out[f"{kind} {name}"] = {"error": f"{type(e).__name__}: {e}"}
    with open(os.path.join(plan["out"], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    leave()
