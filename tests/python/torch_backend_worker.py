"""One rank of the backend tests: every collective of the "gradwire" world group checked
against the same call on a Gloo group (made here for the comparison only)."""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from gradwire.launch import leave


def inputs(rank: int, dtype: torch.dtype, n: int = 37) -> torch.Tensor:
    g = torch.Generator().manual_seed(10 + rank)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g).to(dtype)
    return torch.randint(-(2**31), 2**31, (n,), generator=g).to(dtype)


def check(
    name: str,
    mine: list[torch.Tensor],
    ref: list[torch.Tensor],
    failures: list[str],
    exact: bool,
) -> None:
    for a, b in zip(mine, ref):
        ok = torch.equal(a, b) if exact else torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6)
        if not ok:
            failures.append(f"{name}: {a[:4].tolist()} != {b[:4].tolist()}")


UNCHECKED: list[str] = []  # what older torch cannot compare (Gloo lacks it, or torch refuses)


def p2p_and_all_to_all(rank: int, world: int, gloo, both) -> None:
    """send/recv (blocking, async, tagged, from any source), batch_isend_irecv, object
    lists, all_to_all, all_to_all_single (even and uneven), the coalesced calls and
    monitored_barrier, each on the gradwire group and on Gloo's."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for dtype in (torch.float32, torch.float64, torch.int64, torch.uint8, torch.bfloat16):

        def ring(g, dtype=dtype):
            out = torch.zeros(37, dtype=dtype)
            works = [dist.isend(inputs(rank, dtype), dst=nxt, group=g), dist.irecv(out, src=prv, group=g)]
            for w in works:
                w.wait()
            return [out]

        both(f"isend/irecv {dtype}", ring, exact=True)

    def blocking(g):
        # rank 0 -> 1 with two tags, received in the other order; sends are async so the
        # tag-2 message can overtake.
        out = [torch.zeros(5), torch.zeros(5)]
        if rank == 0:
            ws = [dist.isend(torch.full((5,), 1.0), dst=1, tag=1, group=g)]
            ws.append(dist.isend(torch.full((5,), 2.0), dst=1, tag=2, group=g))
            dist.send(torch.full((5,), 3.0), dst=1, group=g)
            for w in ws:
                w.wait()
        elif rank == 1:
            dist.recv(out[1], src=0, tag=2, group=g)
            dist.recv(out[0], src=0, tag=1, group=g)
            t = torch.zeros(5)
            dist.recv(t, src=0, group=g)
            out.append(t)
        return out

    both("send/recv tagged", blocking, exact=True)

    def anysource(g):
        if rank == 0:
            got = []
            for _ in range(world - 1):
                t = torch.zeros(3)
                src = dist.recv(t, tag=5, group=g)
                got.append((src, t[0].item()))
            return [torch.tensor(sorted(got))]
        dist.send(torch.full((3,), 10.0 * rank), dst=0, tag=5, group=g)
        return []

    both("recv any source", anysource, exact=True)

    def batch(g):
        out = torch.zeros(11)
        ops = [
            dist.P2POp(dist.irecv, out, prv, group=g),
            dist.P2POp(dist.isend, inputs(rank, torch.float32, 11), nxt, group=g),
        ]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [out]

    both("batch_isend_irecv", batch, exact=True)

    def objects(g):
        objs = [{"from": 0, "x": [1, 2, 3]}, "two"] if rank == 0 else [None, None]
        if rank == 0:
            dist.send_object_list(objs, dst=world - 1, group=g)
        elif rank == world - 1:
            dist.recv_object_list(objs, src=0, group=g)
            return [torch.tensor([len(json.dumps(objs))])]
        return []

    both("send/recv_object_list", objects, exact=True)

    def a2a(g):
        outs = [torch.zeros(4, dtype=torch.int64) for _ in range(world)]
        dist.all_to_all(outs, [inputs(rank * world + j, torch.int64, 4) for j in range(world)], group=g)
        return outs

    both("all_to_all", a2a, exact=True)

    for dtype in (torch.float32, torch.float64, torch.int32, torch.bfloat16):

        def a2a_single(g, dtype=dtype):
            out = torch.zeros(3 * world, 2, dtype=dtype)
            dist.all_to_all_single(out, inputs(rank, dtype, 6 * world).view(3 * world, 2), group=g)
            return [out]

        both(f"all_to_all_single {dtype}", a2a_single, exact=True)

    def a2a_uneven(g):
        ins = [rank + j + 1 for j in range(world)]  # rows this rank sends to rank j
        outs = [r + rank + 1 for r in range(world)]  # rows rank r sends here
        out = torch.zeros(sum(outs), 3, dtype=torch.float64)
        inp = inputs(rank, torch.float64, 3 * sum(ins)).view(sum(ins), 3)
        dist.all_to_all_single(out, inp, outs, ins, group=g)
        return [out]

    both("all_to_all_single uneven", a2a_uneven, exact=True)

    def ar_coalesced(g):
        ts = [inputs(rank, torch.float32, 7), inputs(rank + 5, torch.float32, 3)]  # Gloo: one dtype
        with dist._coalescing_manager(group=g):
            for t in ts:
                dist.all_reduce(t, group=g)
        return ts

    both("allreduce_coalesced", ar_coalesced)

    def ag_coalesced(g):
        outs = [torch.zeros(world * 3), torch.zeros(world * 2)]
        ins = [inputs(rank, torch.float32, 3), inputs(rank, torch.float32, 2)]
        with dist._coalescing_manager(group=g):
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i, group=g)
        return outs

    both("all_gather_into_tensor coalesced", ag_coalesced, exact=True)

    def rs_coalesced(g):
        outs = [torch.zeros(3), torch.zeros(2)]
        ins = [inputs(rank, torch.float32, 3 * world), inputs(rank + 1, torch.float32, 2 * world)]
        with dist._coalescing_manager(group=g):
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i, group=g)
        return outs

    both("reduce_scatter_tensor coalesced", rs_coalesced)

    def mb(g):
        dist.monitored_barrier(group=g, timeout=timedelta(seconds=60))
        return []

    try:
        both("monitored_barrier", mb)
    except ValueError as e:  # torch before 2.15 runs it on Gloo only, and says so
        assert "only implemented for GLOO" in str(e), e
        UNCHECKED.append(f"monitored_barrier: torch {torch.__version__} says {e}")


def main() -> None:
    # No `import gradwire.torch` where torch finds the backend through its entry point
    # (2.15 here); older torch needs the import.
    if not hasattr(dist.Backend, "_ensure_backend_registered"):
        import gradwire.torch  # noqa: F401
    imported_before = "gradwire.torch" in sys.modules
    dist.init_process_group("gradwire")
    import gradwire.torch

    gloo = dist.new_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "gradwire", dist.get_backend()
    failures: list[str] = []
    done: list[str] = []

    def both(name: str, fn, exact: bool = False) -> None:
        mine = fn(None)
        try:
            ref = fn(gloo)
        except RuntimeError as e:  # older torch's Gloo lacks some (all_to_all in 2.11)
            if "does not support" not in str(e):
                raise
            done.append(name)
            UNCHECKED.append(f"{name}: Gloo says {e}")
            return
        check(name, mine, ref, failures, exact)
        done.append(name)

    ops = {
        "sum": dist.ReduceOp.SUM,
        "avg": dist.ReduceOp.AVG,
        "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN,
        "product": dist.ReduceOp.PRODUCT,
    }
    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32):
        for opname, op in ops.items():
            if opname == "avg" and not dtype.is_floating_point:
                continue  # Gloo has no integer AVG either
            if opname == "product" and dtype.is_floating_point:
                continue

            def ar(g, dtype=dtype, op=op):
                t = inputs(rank, dtype)
                dist.all_reduce(t, op=op, group=g)
                return [t]

            both(
                f"all_reduce {opname} {dtype}",
                ar,
                exact=not dtype.is_floating_point or opname in ("max", "min"),
            )

    for dtype in (torch.float32, torch.int64, torch.uint8, torch.bfloat16):

        def bc(g, dtype=dtype):
            t = inputs(rank, dtype).to(dtype)
            dist.broadcast(t, src=world - 1, group=g)
            return [t]

        both(f"broadcast {dtype}", bc, exact=True)

        def ag(g, dtype=dtype):
            outs = [torch.zeros(37, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, inputs(rank, dtype), group=g)
            return outs

        both(f"all_gather {dtype}", ag, exact=True)

    def agt(g):
        out = torch.zeros(world * 5, 3)
        dist.all_gather_into_tensor(out, inputs(rank, torch.float32, 15).view(5, 3), group=g)
        return [out]

    both("all_gather_into_tensor", agt, exact=True)

    def rs(g):
        out = torch.zeros(6)
        dist.reduce_scatter(
            out,
            [inputs(rank * world + k, torch.float32, 6) for k in range(world)],
            group=g,
        )
        return [out]

    both("reduce_scatter", rs)

    def rst(g):
        out = torch.zeros(4)
        dist.reduce_scatter_tensor(out, inputs(rank, torch.float32, 4 * world), group=g)
        return [out]

    both("reduce_scatter_tensor", rst)

    def red(g):
        t = inputs(rank, torch.float32)
        dist.reduce(t, dst=0, group=g)
        return [t] if rank == 0 else []

    both("reduce", red)

    def gat(g):
        outs = [torch.zeros(37) for _ in range(world)] if rank == 1 else None
        dist.gather(inputs(rank, torch.float32), outs, dst=1, group=g)
        return outs or []

    both("gather", gat, exact=True)

    def sca(g):
        out = torch.zeros(37)
        parts = [inputs(100 + k, torch.float32) for k in range(world)] if rank == 0 else None
        dist.scatter(out, parts, src=0, group=g)
        return [out]

    both("scatter", sca, exact=True)

    def objs(g):
        out = [None] * world
        dist.all_gather_object(out, {"rank": rank, "s": "x" * rank}, group=g)
        return [torch.tensor([len(json.dumps(out))])]

    both("all_gather_object", objs, exact=True)
    dist.barrier()
    done.append("barrier")

    # Every call above was synchronous: each waited in this thread, so the group's waiter
    # thread (which only futures need) never started.
    waiter_threads_sync = int(gradwire.torch.backend_of()._waiter.started)
    # An async call's future (DDP's path) and wait() on the same Work agree.
    t = torch.full((1000,), float(rank + 1))
    work = dist.all_reduce(t, async_op=True)
    fut_value = work.get_future().wait()
    work.wait()
    async_ok = bool(torch.all(t == world * (world + 1) / 2)) and fut_value[0] is t and work.is_success()
    # Polling a Work's future completes it; wait() takes a finite timeout.
    t2 = torch.full((1000,), 1.0)
    fut2 = dist.all_reduce(t2, async_op=True).get_future()
    deadline = time.monotonic() + 60
    while not fut2.done() and time.monotonic() < deadline:
        time.sleep(0.001)
    async_ok &= fut2.done() and bool(torch.all(t2 == world))
    async_ok &= dist.all_reduce(t2, async_op=True).wait(timeout=timedelta(seconds=60))
    done.append("async all_reduce")

    async_ok &= work.is_completed()  # true once waited for (c10d's own answer is false)
    p2p_and_all_to_all(rank, world, gloo, both)

    # No call leaves a mark on the caller's storage: FSDP frees (resizes to 0) and regrows
    # the storage of the tensors it communicates.
    resizable = []
    for name, call in {
        "all_reduce": lambda t: dist.all_reduce(t),
        "broadcast": lambda t: dist.broadcast(t, src=0),
        "all_gather_into_tensor": lambda t: dist.all_gather_into_tensor(t, torch.ones(4)),
    }.items():
        t = torch.ones(4 * world)
        call(t)
        try:
            t.untyped_storage().resize_(0)
            resizable.append(name)
        except RuntimeError as e:
            failures.append(f"{name} left the storage unresizable: {e}")

    errors = {}
    for name, call in {
        "allreduce_sparse": lambda: dist.all_reduce(torch.zeros(2, 2).to_sparse()),
    }.items():
        try:
            call()
            errors[name] = "no error"
        except NotImplementedError as e:
            errors[name] = str(e)
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors[name] = f"{type(e).__name__}: {e}"
    stats = gradwire.torch.backend_of().stats
    out = {
        "imported_before": imported_before,
        "unchecked": UNCHECKED,
        "failures": failures,
        "done": done,
        "errors": errors,
        "calls": stats.calls,
        "waiter_threads_sync": waiter_threads_sync,
        "async_ok": async_ok,
        "resizable": resizable,
    }
    with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    leave()  # without the interpreter's teardown, which Gloo's threads can abort
