"""One rank of the DDP-hook test: trains the same model twice, with DDP's own Gloo
allreduce and with gradwire's hook, and saves both final parameter vectors."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gradwire
import gradwire.ddp
from gradwire.launch import leave


def model(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))


def train(m: torch.nn.Module, rank: int, steps: int) -> torch.Tensor:
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for _ in range(steps):
        x, y = torch.randn(16, 64, generator=g), torch.randn(16, 4, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def main() -> None:
    plan = json.loads(sys.argv[1])
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    port = int(os.environ["MASTER_PORT"])
    gradwire.init(master_port=port, **plan.get("init", {}))
    os.environ["MASTER_PORT"] = str(port + 1)
    dist.init_process_group("gloo")
    width, steps, cap = plan["width"], plan["steps"], plan["bucket_cap_mb"]
    reference = train(DDP(model(width), bucket_cap_mb=cap), rank, steps)
    hooked = DDP(model(width), bucket_cap_mb=cap)
    state = gradwire.ddp.HookState(loss_bound=plan["loss_bound"])
    hooked.register_comm_hook(state, gradwire.ddp.allreduce_hook)
    params = train(hooked, rank, steps)
    torch.save({"reference": reference, "params": params}, os.path.join(plan["out"], f"rank{rank}.pt"))
    with open(os.path.join(plan["out"], f"rank{rank}.json"), "w") as f:
        json.dump({"calls": state.calls, "bytes_sent": state.bytes_sent, "bytes_lost": state.bytes_lost}, f)
    dist.destroy_process_group()
    gradwire.destroy()


if __name__ == "__main__":
    main()
    leave()  # without the interpreter's teardown, which Gloo's threads can abort
