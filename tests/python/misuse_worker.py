"""One rank of a misuse test (tests/python/test_runtime_misuse.py). argv[1] is a JSON plan:
{"scenario": ..., "elems": N, "init": {...}, per-scenario keys}. Prints one JSON line
(`RESULT {...}`) with what the rank saw; a crash shows as the process's exit status."""

import gc
import json
import sys

import numpy as np

import gradwire


def dropped_handles(comm, plan: dict) -> dict:
    """Rank 0 drops the handles of its async calls (and the arrays with them) and
    allocates over the freed memory; the others keep theirs and check every result."""
    n, calls = plan["elems"], plan["calls"]
    wrong = []
    if comm.rank == 0:
        for _ in range(calls):
            comm.allreduce_async(np.full(n, 1.0, np.float32))  # handle dropped at once
            gc.collect()
            junk = [np.full(n, 1e30, np.float32) for _ in range(4)]  # reuse the freed memory
            del junk
    else:
        works = [(np.full(n, 2.0, np.float32), None) for _ in range(calls)]
        works = [(x, comm.allreduce_async(x)) for x, _ in works]
        for i, (x, w) in enumerate(works):
            w.wait()
            want = 1.0 + 2.0 * (comm.world_size - 1)
            if not np.all(x == want):
                bad = x[x != want]
                wrong.append(f"call {i}: {bad.size} of {n} elements wrong, e.g. {bad[:3].tolist()}")
    # A last call in step on every rank: the job is still healthy.
    y = np.full(8, float(comm.rank), np.float32)
    comm.allreduce(y)
    return {"wrong": wrong, "last": y.tolist()}


def mismatch(comm, plan: dict) -> dict:
    """Each rank makes the call its entry in plan["per_rank"] describes."""
    spec = plan["per_rank"][str(comm.rank)]
    x = np.ones(spec.get("elems", plan["elems"]), np.dtype(spec.get("dtype", "float32")))
    op = spec.get("op", "allreduce")
    if op == "allreduce":
        comm.allreduce(
            x,
            algorithm=spec.get("algorithm", "ring"),
            loss_bound=spec.get("loss_bound", 0.0),
        )
    else:
        comm.broadcast(x, root=spec.get("root", 0))
    return {"sum": float(x.sum())}


def forged(comm, plan: dict) -> dict:
    """Rank 0 sends datagrams with the job's session id from a socket of its own, for the
    next calls' flows, to every rank; then all ranks run those calls and check them."""
    import socket
    import struct
    import time

    ports = np.zeros(comm.world_size, np.float64)
    ports[comm.rank] = int(comm._c.data_addr().rsplit(":", 1)[1])
    comm.allreduce(ports)  # call 0: everyone learns the data ports
    n, calls = plan["elems"], plan["calls"]
    if comm.rank == 0:
        spoof = plan.get("spoof", False)
        if spoof:  # raw IP (root): datagrams that claim to come from the peer's data address
            evil = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        else:
            evil = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # One segment per transfer of a 2-rank ring (the loopback MSS exceeds it).
        payload = np.full(n // comm.world_size, 1e6, np.float32).tobytes()
        for dst, port in enumerate(ports):
            for call in range(1, calls + 1):
                for transfer in range(plan["transfers"]):
                    head = b"GW" + struct.pack(">BBBBH", 1, 1, 0, 1, 0)
                    head += struct.pack(">QIIQ", comm._c.session, call << 20 | transfer, len(payload), 0)
                    datagram = head + payload + b"\0" * plan.get("tag_bytes", 0)
                    if spoof:
                        src_port = int(ports[(dst + 1) % len(ports)])
                        udp = struct.pack(">HHHH", src_port, int(port), 8 + len(datagram), 0) + datagram
                        ip = struct.pack(
                            ">BBHHHBBH4s4s",
                            0x45,
                            0,
                            20 + len(udp),
                            0,
                            0,
                            64,
                            17,
                            0,
                            socket.inet_aton("127.0.0.1"),
                            socket.inet_aton("127.0.0.1"),
                        )
                        evil.sendto(ip + udp, ("127.0.0.1", 0))
                    else:
                        evil.sendto(datagram, ("127.0.0.1", int(port)))
        time.sleep(0.3)
    else:
        time.sleep(0.6)  # the forgeries arrive before this rank posts the calls
    wrong = []
    for i in range(calls):
        x = np.full(n, float(comm.rank + 1), np.float32)
        comm.allreduce(x)
        want = comm.world_size * (comm.world_size + 1) / 2
        if not np.all(x == want):
            wrong.append(
                f"call {i + 1}: {int(np.sum(x != want))} of {n} elements wrong, e.g. {x[x != want][:3].tolist()}"
            )
    return {"wrong": wrong}


def result_bound(comm, plan: dict) -> dict:
    """Lossy allreduces under `result_loss_bound`; each call's bubbles as element ranges."""
    calls = []
    for i in range(plan["calls"]):
        x = np.ones(plan["elems"], np.float32)
        rep = comm.allreduce(
            x,
            algorithm=plan["algorithms"][i % len(plan["algorithms"])],
            result_loss_bound=plan["bound"],
        )
        calls.append([[r.start, r.stop] for r in rep.lost_elements(4)])
    return {"bubbles": calls}


SCENARIOS = {
    "result_bound": result_bound,
    "dropped_handles": dropped_handles,
    "mismatch": mismatch,
    "forged": forged,
}


def main() -> None:
    plan = json.loads(sys.argv[1])
    out = {"error": None}
    try:
        comm = gradwire.init(**plan.get("init", {}))
        out.update(SCENARIOS[plan["scenario"]](comm, plan))
        out["counters"] = comm.counters()
        gradwire.destroy()
    except Exception as e:  # noqa: BLE001 - reported to the test, which decides
        out["error"] = f"{type(e).__name__}: {e}"
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
