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


def raw_datagram(src_port: int, dst_port: int, datagram: bytes) -> bytes:
    """An IPv4 + UDP packet from 127.0.0.1:src_port to 127.0.0.1:dst_port (for a raw socket)."""
    import socket
    import struct

    udp = struct.pack(">HHHH", src_port, dst_port, 8 + len(datagram), 0) + datagram
    lo = socket.inet_aton("127.0.0.1")
    return struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, lo, lo) + udp


def forge_during_calls(spec: dict) -> None:
    """The forger (its own process, root): until `seconds` pass or SIGTERM, spoofed
    datagrams that copy the header of a genuine data segment (session, a flow of the coming
    calls, a segment boundary, the segment's length) with a payload of 1e6s and, in an
    authenticated job, a tag of zeros, from a random other rank's data address to a random
    rank. Prints how many it sent."""
    import random
    import signal
    import socket
    import struct
    import time

    rng = random.Random(spec["seed"])
    ports, seg = spec["ports"], spec["segment"]
    evil = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    evil.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    body = np.full(seg // 4, 1e6, np.float32).tobytes() + b"\0" * spec["tag_bytes"]
    head_fixed = b"GW" + struct.pack(">BBBBH", 1, 1, 0, 1, 0)
    deadline = time.monotonic() + spec["seconds"]
    sent = 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped by rank 0: report, then exit
    print("READY", flush=True)
    try:
        while time.monotonic() < deadline:
            dst = rng.randrange(len(ports))
            src = rng.choice([r for r in range(len(ports)) if r != dst])
            flow = rng.choice(spec["calls"]) << 20 | rng.randrange(spec["transfers"])
            seq = rng.randrange(spec["segments"]) * seg
            head = head_fixed + struct.pack(">QIIQ", spec["session"], flow, seg, seq)
            try:
                evil.sendto(raw_datagram(ports[src], ports[dst], head + body), ("127.0.0.1", 0))
                sent += 1
            except OSError:  # ENOBUFS: the socket is full; the next one goes
                time.sleep(0.0005)
    finally:
        print(f"FORGED {sent}", flush=True)


def forged_during_calls(comm, plan: dict) -> dict:
    """Rank 0 starts a forger process that copies data headers of the coming calls (every
    algorithm in plan["algorithms"], plan["calls"] each) while all ranks run them; every
    rank checks every result exactly."""
    import os
    import subprocess
    import time

    ports = np.zeros(comm.world_size, np.float64)
    ports[comm.rank] = int(comm._c.data_addr().rsplit(":", 1)[1])
    comm.allreduce(ports)  # call 0: everyone learns the data ports
    n, algorithms, per = plan["elems"], plan["algorithms"], plan["calls"]
    total = len(algorithms) * per
    forger = None
    if comm.rank == 0:
        spec = {
            "seed": plan.get("seed", 1),
            "ports": [int(p) for p in ports],
            "session": comm._c.session,
            "segment": comm.mss,
            "calls": list(range(1, total + 1)),
            "transfers": plan.get("transfers", 24),
            "segments": max(1, n * 4 // comm.world_size // comm.mss),
            "tag_bytes": 16 if plan.get("auth") else 0,
            "seconds": plan.get("forge_seconds", 60),
        }
        forger = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--forge", json.dumps(spec)],
            stdout=subprocess.PIPE,
            text=True,
        )
        # The forgeries are flowing when the calls start, however slowly the forger started
        # (the other ranks wait in call 1 meanwhile).
        assert forger.stdout.readline().strip() == "READY"
        time.sleep(0.05)
    wrong = []
    want = comm.world_size * (comm.world_size + 1) / 2
    for i in range(total):
        algorithm = algorithms[i // per]
        x = np.full(n, float(comm.rank + 1), np.float32)
        comm.allreduce(x, algorithm=algorithm)
        if not np.all(x == want):
            bad = x[x != want]
            wrong.append(f"call {i + 1} ({algorithm}): {bad.size} of {n} elements wrong, e.g. {bad[:3].tolist()}")
    out = {"wrong": wrong, "calls": total}
    if forger is not None:
        forger.terminate()
        out["forger"] = forger.communicate()[0].strip()
    return out


def two_threads(comm, plan: dict) -> dict:
    """Two threads make calls of the same shape. Without any_thread the second thread's call
    is refused; with it, the threads take turns by a rule every rank follows (A, B, A, B),
    and each thread's results are checked exactly."""
    import threading

    n, world = plan["elems"], comm.world_size
    ones = np.ones(n, np.float32)
    comm.allreduce(ones)  # the main thread's call: it owns the communicator unless any_thread
    turn = threading.Condition()
    state = {"next": 0, "stop": False}
    out: dict = {"errors": [], "wrong": []}

    def run(me: int, scale: float) -> None:
        for i in range(plan["calls"]):
            with turn:
                turn.wait_for(lambda: state["stop"] or state["next"] % 2 == me)
                if state["stop"]:
                    return
                try:
                    x = np.full(n, scale * (comm.rank + 1), np.float32)
                    w = comm.allreduce_async(x)
                except Exception as e:  # noqa: BLE001 - reported to the test
                    out["errors"].append(f"{threading.current_thread().name}: {type(e).__name__}: {e}")
                    state["stop"] = True  # both stop
                    turn.notify_all()
                    return
                state["next"] += 1
                turn.notify_all()
            w.wait()
            want = scale * world * (world + 1) / 2
            if not np.all(x == want):
                out["wrong"].append(f"{threading.current_thread().name} call {i}: {x[:2].tolist()} != {want}")

    threads = [
        threading.Thread(target=run, args=(0, 1.0), name="A"),
        threading.Thread(target=run, args=(1, 10.0), name="B"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


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
    "forged_during_calls": forged_during_calls,
    "two_threads": two_threads,
}


def main() -> None:
    if sys.argv[1] == "--forge":
        forge_during_calls(json.loads(sys.argv[2]))
        return
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
