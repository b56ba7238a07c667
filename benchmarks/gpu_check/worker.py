"""One rank of the GPU check (run.sh starts 2 on one GPU): the "gradwire" backend on CUDA
tensors against Gloo.

1. collectives on CUDA tensors, against Gloo's results on CPU copies of the same inputs
   (every dtype and op the CPU test checks, a 64 MiB all_reduce that is cut into many
   pipelined chunks, point-to-point, all-to-all);
2. stream semantics: a collective issued behind a 100 ms kernel on the caller's stream sees
   the kernel's result, and the caller's stream (default or not) reads the result after
   wait() without a host synchronization;
3. DDP (plain and with the loss-tolerant hook), FSDP1 FULL_SHARD and FSDP2 on CUDA: losses
   against DDP over Gloo on CUDA, 20 steps;
4. timing: a 64 MiB all_reduce and a ResNet18-sized DDP step, gradwire against Gloo on the
   same GPU, alternating.

Rank 0 writes results.json to the folder given. `--device cpu` runs the same script on CPU
tensors with GRADWIRE_STAGE_CPU_FOR_TESTS=1 (a dry run of the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gradwire.torch as gt


def inputs(seed: int, dtype: torch.dtype, n: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, generator=g) if dtype.is_floating_point else torch.randint(-1000, 1000, (n,), generator=g)
    return t.to(dtype).to(device)


class Checks:
    def __init__(self) -> None:
        self.passed: list[str] = []
        self.failed: dict[str, str] = {}

    def run(self, name: str, fn) -> None:
        try:
            fn()
            self.passed.append(name)
        except Exception as e:  # noqa: BLE001 - recorded, the next check runs
            self.failed[name] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"


def same(a: torch.Tensor, b: torch.Tensor, exact: bool) -> None:
    a, b = a.cpu(), b.cpu()
    if exact:
        assert torch.equal(a, b), f"{a.flatten()[:4].tolist()} != {b.flatten()[:4].tolist()}"
    else:
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5)


def collectives(c: Checks, dev: torch.device, gloo, rank: int, world: int) -> None:
    def vs_gloo(name, fn, exact=False):
        def check():
            mine, ref = fn(dev, None), fn(torch.device("cpu"), gloo)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            for a, b in zip(mine, ref):
                same(a, b, exact)

        c.run(name, check)

    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64):
        for opname, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX)):

            def ar(d, g, dtype=dtype, op=op):
                t = inputs(rank, dtype, 1000, d)
                dist.all_reduce(t, op=op, group=g)
                return [t]

            vs_gloo(f"all_reduce {opname} {dtype}", ar, exact=not dtype.is_floating_point or opname == "max")

    def big(d, g):  # 64 MiB: many 4 MiB pipelined chunks
        t = inputs(rank, torch.float32, 16 << 20, d)
        dist.all_reduce(t, group=g)
        return [t]

    vs_gloo("all_reduce 64 MiB", big)

    def avg(d, g):
        t = inputs(rank, torch.float32, 3 << 20, d)
        dist.all_reduce(t, op=dist.ReduceOp.AVG if g is None else dist.ReduceOp.SUM, group=g)
        return [t if g is None else t / world]

    vs_gloo("all_reduce avg 12 MiB", avg)

    def bc(d, g):
        t = inputs(rank, torch.bfloat16, 999, d)
        dist.broadcast(t, src=world - 1, group=g)
        return [t]

    vs_gloo("broadcast bfloat16", bc, exact=True)

    def agt(d, g):
        out = torch.zeros(world * 100, device=d)
        dist.all_gather_into_tensor(out, inputs(rank, torch.float32, 100, d), group=g)
        return [out]

    vs_gloo("all_gather_into_tensor", agt, exact=True)

    def rst(d, g):
        out = torch.zeros(100, device=d)
        dist.reduce_scatter_tensor(out, inputs(rank, torch.float32, 100 * world, d), group=g)
        return [out]

    vs_gloo("reduce_scatter_tensor", rst)

    def a2a(d, g):
        ins = [r + rank + 1 for r in range(world)]
        outs = [rank + r + 1 for r in range(world)]
        out = torch.zeros(sum(outs), 3, device=d)
        dist.all_to_all_single(out, inputs(rank, torch.float32, 3 * sum(ins), d).view(-1, 3), outs, ins, group=g)
        return [out]

    vs_gloo("all_to_all_single uneven", a2a, exact=True)

    def ring(d, g):
        out = torch.zeros(1000, device=d)
        ws = [
            dist.isend(inputs(rank, torch.float32, 1000, d), dst=(rank + 1) % world, group=g),
            dist.irecv(out, src=(rank - 1) % world, group=g),
        ]
        for w in ws:
            w.wait()
        return [out]

    vs_gloo("isend/irecv", ring, exact=True)


def streams(c: Checks, dev: torch.device, rank: int, world: int) -> None:
    if dev.type != "cuda":
        return
    want = world * (world + 1) / 2

    def behind_a_kernel(stream=None):
        def check():
            ctx = torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream())
            with ctx:
                x = torch.zeros(1 << 20, device=dev)
                torch.cuda._sleep(200_000_000)  # ~100 ms of GPU time before the fill
                x.fill_(rank + 1)
                work = dist.all_reduce(x, async_op=True)
                work.wait()  # the current stream waits; the host does not
                y = x * 1.0  # queued on the current stream after the copies back
            torch.cuda.synchronize()
            assert torch.all(y == want), (y[:4].tolist(), want)

        return check

    c.run("stream: collective after a kernel, default stream", behind_a_kernel())
    c.run("stream: collective after a kernel, side stream", behind_a_kernel(torch.cuda.Stream(dev)))

    def future_path():
        x = torch.full((1 << 20,), float(rank + 1), device=dev)
        fut = dist.all_reduce(x, async_op=True).get_future()
        y = fut.wait()[0] * 1.0  # a CUDA-aware future: the reading stream waits
        torch.cuda.synchronize()
        assert torch.all(y == want)

    c.run("stream: future", future_path)


def mlp(dev: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).to(dev)


def train(model: torch.nn.Module, dev: torch.device, rank: int, steps: int = 20) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 64, generator=g).to(dev)
        y = torch.randint(0, 10, (32,), generator=g).to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def training(c: Checks, dev: torch.device, gloo, rank: int, out: dict) -> None:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy, fully_shard

    ids = [dev.index] if dev.type == "cuda" else None
    ref = train(DDP(mlp(dev), device_ids=ids, process_group=gloo), dev, rank)
    out["losses gloo ddp"] = ref

    def compare(name, make):
        def check():
            losses = train(make(), dev, rank)
            out[f"losses {name}"] = losses
            torch.testing.assert_close(losses, ref, rtol=1e-5, atol=1e-6)

        c.run(name, check)

    compare("ddp", lambda: DDP(mlp(dev), device_ids=ids))

    def hooked():
        m = DDP(mlp(dev), device_ids=ids)
        m.register_comm_hook(gt.LossTolerantState(), gt.loss_tolerant_hook)
        return m

    compare("ddp loss_tolerant_hook", hooked)
    compare(
        "fsdp1 full_shard",
        lambda: FSDP(mlp(dev), sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=dev),
    )

    def fsdp2():
        m = mlp(dev)
        mesh = DeviceMesh.from_group(dist.group.WORLD, dev.type)
        for layer in (m[0], m[2]):
            fully_shard(layer, mesh=mesh)
        return fully_shard(m, mesh=mesh)

    compare("fsdp2 fully_shard", fsdp2)


def timing(dev: torch.device, gloo, rank: int, out: dict) -> None:
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def timed(fn) -> float:
        dist.barrier(group=gloo)
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - t0

    x = torch.ones(16 << 20, device=dev)
    times = {"gradwire": [], "gloo": []}
    for _ in range(2):  # warm-up
        dist.all_reduce(x)
        dist.all_reduce(x, group=gloo)
    for _ in range(10):
        times["gradwire"].append(timed(lambda: dist.all_reduce(x)))
        times["gloo"].append(timed(lambda: dist.all_reduce(x, group=gloo)))
    out["all_reduce 64 MiB median s"] = {k: statistics.median(v) for k, v in times.items()}
    out["all_reduce 64 MiB gradwire/gloo"] = statistics.median(times["gradwire"]) / statistics.median(times["gloo"])

    try:
        import torchvision

        def model():
            torch.manual_seed(0)
            return torchvision.models.resnet18(num_classes=10).to(dev)

        name = "resnet18, 32 images of 64x64 per rank"
        shape = (32, 3, 64, 64)
    except ImportError:
        model, name, shape = (lambda: mlp(dev)), "mlp", (32, 64)
    ids = [dev.index] if dev.type == "cuda" else None
    nets = {"gradwire": DDP(model(), device_ids=ids), "gloo": DDP(model(), device_ids=ids, process_group=gloo)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in nets.items()}
    g = torch.Generator().manual_seed(rank)
    xb = torch.randn(*shape, generator=g).to(dev)
    yb = torch.randint(0, 10, (shape[0],), generator=g).to(dev)

    def step(k):
        opts[k].zero_grad()
        torch.nn.functional.cross_entropy(nets[k](xb), yb).backward()
        opts[k].step()

    steps = {"gradwire": [], "gloo": []}
    for i in range(25):
        for k in ("gradwire", "gloo") if i % 2 else ("gloo", "gradwire"):
            s = timed(lambda k=k: step(k))
            if i >= 3:
                steps[k].append(s)
    out["ddp step"] = name
    out["ddp step median s"] = {k: statistics.median(v) for k, v in steps.items()}
    out["ddp step gradwire/gloo"] = statistics.median(steps["gradwire"]) / statistics.median(steps["gloo"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    dist.init_process_group("gradwire")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)  # both ranks on the one GPU
    gloo = dist.new_group(backend="gloo")
    c = Checks()
    out: dict = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__}
    collectives(c, dev, gloo, rank, world)
    streams(c, dev, rank, world)
    training(c, dev, gloo, rank, out)
    c.run("timing", lambda: timing(dev, gloo, rank, out))
    out["passed"], out["failed"] = c.passed, c.failed
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as f:
        json.dump(out, f, indent=1)
    dist.barrier(group=gloo)
    sys.stdout.flush()
    os._exit(0)  # without the interpreter's teardown (Gloo's threads can abort it)


if __name__ == "__main__":
    main()
