#!/usr/bin/env python3
"""PyTorch DDP training steps: DDP's own Gloo allreduce vs the gradwire hook, side by side.

Every rank trains the same MLP (``--width`` wide, ``--layers`` deep; float32 gradients of
``--mb`` MiB in total by default 50) on its own random batches, twice per round: once as
plain DDP over Gloo, once as DDP with ``gradwire.ddp.allreduce_hook`` (lossless, and with
``--loss-bound`` if given). Systems alternate round by round. A step is forward +
backward (DDP overlaps the bucket allreduces with it) + the optimizer; its time is the
slowest rank's. After the run, the parameters of all systems are checked to agree across
ranks (bitwise for gradwire) and with Gloo (to float rounding, lossless only).

    python benchmarks/ddp_step/run.py                  # 2 and 4 ranks
    python benchmarks/ddp_step/run.py --worlds 2 --steps 20

Writes <out>/results.json and prints a table; exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def mlp(width: int, layers: int):
    import torch

    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods[:-1])


def worker(plan: dict) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gradwire
    import gradwire.ddp

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    port = int(os.environ["MASTER_PORT"])
    gradwire.init(master_port=port)
    os.environ["MASTER_PORT"] = str(port + 1)
    dist.init_process_group("gloo")
    systems = {"gloo": None, "gradwire": 0.0}
    if plan["loss_bound"] > 0:
        systems[f"gradwire(loss_bound={plan['loss_bound']})"] = plan["loss_bound"]
    models, opts, states = {}, {}, {}
    for name, bound in systems.items():
        m = DDP(mlp(plan["width"], plan["layers"]), bucket_cap_mb=plan["bucket_mb"])
        if bound is not None:
            states[name] = gradwire.ddp.HookState(loss_bound=bound)
            m.register_comm_hook(states[name], gradwire.ddp.allreduce_hook)
        models[name], opts[name] = m, torch.optim.SGD(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1000 + rank)
    batches = [(torch.randn(plan["batch"], plan["width"], generator=g), torch.randn(plan["batch"], plan["width"], generator=g))
               for _ in range(plan["warmup"] + plan["steps"])]
    times = {n: [] for n in systems}
    names = list(systems)
    for step, (x, y) in enumerate(batches):
        for k in range(len(names)):
            name = names[(k + step) % len(names)]
            m, opt = models[name], opts[name]
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
            dt = torch.tensor([time.perf_counter() - t0])
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if step >= plan["warmup"]:
                times[name].append(float(dt))
    params = {n: torch.cat([p.detach().flatten() for p in models[n].parameters()]) for n in systems}
    torch.save(params, Path(plan["out"]) / f"params{rank}.pt")
    if rank == 0:
        res = {"world": world, "times": times,
               "hook": {n: {"calls": s.calls, "bytes_lost": s.bytes_lost} for n, s in states.items()}}
        (Path(plan["out"]) / "times.json").write_text(json.dumps(res))
    dist.destroy_process_group()
    gradwire.destroy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=3, help="3 x 2048 wide: 12.6 M parameters, 50 MB of gradients")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (its default is 25)")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--loss-bound", type=float, default=0.0, help="also run a lossy hook with this bound")
    ap.add_argument("--out", default=str(ROOT / "results" / "ddp_step"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    for world in [int(w) for w in a.worlds.split(",")]:
        wdir = out / f"world{world}"
        wdir.mkdir(exist_ok=True)
        plan = {"width": a.width, "layers": a.layers, "batch": a.batch, "bucket_mb": a.bucket_mb, "steps": a.steps,
                "warmup": a.warmup, "loss_bound": a.loss_bound, "out": str(wdir)}
        print(f"{world} ranks: {a.warmup} + {a.steps} steps per system ...", flush=True)
        cmd = [sys.executable, "-m", "gradwire", "launch", "-n", str(world), "--timeout", "1200", "--",
               sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(plan)]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-3000:])
            return 1
        import torch

        res = json.loads((wdir / "times.json").read_text())
        params = [torch.load(wdir / f"params{k}.pt") for k in range(world)]
        for name, ts in res["times"].items():
            same = all(torch.equal(p[name], params[0][name]) for p in params)
            close = name != "gradwire" or torch.allclose(params[0][name], params[0]["gloo"], rtol=1e-4, atol=1e-6)
            ok &= (same or name == "gloo") and close
            rows.append({"world": world, "system": name, "median_s": statistics.median(ts), "p90_s": sorted(ts)[int(0.9 * (len(ts) - 1))],
                         "replicas_identical": same, "matches_gloo": close, **res["hook"].get(name, {})})
    base = {r["world"]: r["median_s"] for r in rows if r["system"] == "gloo"}
    print(f"{'ranks':>5}  {'system':32} {'median step':>12} {'p90':>9} {'/ gloo':>7}  check")
    for r in rows:
        r["ratio"] = r["median_s"] / base[r["world"]]
        check = "ok" if (r["replicas_identical"] or r["system"] == "gloo") and r["matches_gloo"] else "FAILED"
        print(f"{r['world']:>5}  {r['system']:32} {r['median_s'] * 1e3:9.1f} ms {r['p90_s'] * 1e3:6.1f} ms {r['ratio']:7.2f}  {check}")
    (out / "results.json").write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))
    print("wrote", out / "results.json")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
