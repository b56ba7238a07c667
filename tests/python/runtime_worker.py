"""One rank of a multi-process runtime test. Reads a JSON plan from argv[1], joins the job
from the torchrun-style environment, runs the plan's calls and writes what it got to
``<out>/rank<R>.npz`` and ``<out>/rank<R>.json``.

Plan keys: out, elems, calls (list of {"op": "allreduce"|"broadcast"|"push"|"pull"|
"allreduce_async"|"allreduce_torch", "algorithm", "loss_bound", "root"}), init (kwargs for
gradwire.init), die_after (exit abruptly before that call index, no cleanup).
"""

import json
import os
import sys

import numpy as np

import gradwire


def data(rank: int, elems: int, call: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + call)
    # Quarter-integers: sums are exact in float32, so results compare bit for bit.
    return (rng.integers(-400, 400, size=elems) / 4).astype(np.float32)


def main() -> None:
    plan = json.loads(sys.argv[1])
    rank = int(os.environ["RANK"])
    out = plan["out"]
    init_kw = plan.get("init", {})
    result = {"rank": rank, "reports": [], "error": None, "counters": None}
    arrays = {}
    try:
        comm = gradwire.init(**init_kw)
        result["mss"], result["line_rate_gbps"] = comm.mss, comm.line_rate_gbps
        for i, call in enumerate(plan["calls"]):
            if plan.get("die_after") == i:
                os._exit(3)
            x = data(rank, plan["elems"], i)
            op = call["op"]
            if op == "allreduce":
                rep = gradwire.allreduce(
                    x, algorithm=call.get("algorithm", "ring"), loss_bound=call.get("loss_bound", 0.0)
                )
            elif op == "allreduce_async":
                rep = gradwire.allreduce_async(x, algorithm=call.get("algorithm", "ring")).result(timeout=60)
            elif op == "allreduce_torch":
                import torch

                t = torch.from_numpy(x.copy()).reshape(-1, 2).t()  # non-contiguous view
                rep = gradwire.allreduce(t, algorithm=call.get("algorithm", "ring"))
                x = t.t().reshape(-1).numpy().copy()
            elif op == "broadcast":
                rep = gradwire.broadcast(x, root=call.get("root", 0))
            elif op == "push":
                rep = gradwire.ps.push(x, loss_bound=call.get("loss_bound", 0.0))
            elif op == "pull":
                rep = gradwire.ps.pull(x, loss_bound=call.get("loss_bound", 0.0))
            else:
                raise ValueError(op)
            arrays[f"call{i}"] = x
            result["reports"].append({**rep.__dict__, "bubbles": [[b.src, b.offset, b.length] for b in rep.bubbles]})
        result["counters"] = comm.counters()
        gradwire.destroy()
    except Exception as e:  # reported to the test, which decides
        result["error"] = f"{type(e).__name__}: {e}"
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
