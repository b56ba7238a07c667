"""Programs run inside an emulated host (``python -m gradwire.emu.worker KIND ...``).

Each prints one JSON line with its result on stdout:

- ``tcp-sink PORT CONNS``: accept CONNS connections, read each to EOF, answer one byte.
- ``tcp-send ADDR PORT BYTES CC [START_AT]``: connect, wait until the wall-clock time
  START_AT, send BYTES with congestion control CC (cubic, reno, bbr: TCP_CONGESTION),
  report the flow completion time (until the sink's answer).
- ``ps BACKEND BYTES ITERS [LOSS_BOUND]``: a parameter-server exchange (push, then pull;
  rank 0 serves) over kernel TCP (BACKEND cubic, reno, bbr) or gradwire's PS (dlcp, ltp).
  With GRADWIRE_EMU_SYNC=1 every iteration ends with a barrier through the server.
- ``ddp BACKEND BYTES ITERS [LOSS_BOUND]``: DDP training steps of an MLP with about BYTES
  of parameters, DDP's Gloo allreduce (gloo), gradwire's communication hook (a transport),
  or DDP's own allreduce on the "gradwire" process-group backend (a transport and
  ``-backend``, e.g. dlcp-backend: lossless, no hook).
- ``allreduce BACKEND BYTES ITERS [LOSS_BOUND]``: BACKEND gloo (torch.distributed) or a
  gradwire transport (dlcp, ltp, ...), ranks from the torchrun-style environment; report
  every iteration's time.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

CHUNK = 1 << 20


_HZ = os.sysconf("SC_CLK_TCK")


def cpu_sample() -> list[float]:
    """[wall time, machine busy, machine kernel (system + irq + softirq), the switch's CPU]
    in seconds, read from /proc: the machine's counters (every namespace shares them) and
    the switch process's (GRADWIRE_EMU_SWITCH_PID; the namespaces share its pid space).
    Taken around each iteration, the front end turns two of them into that iteration's
    CPU shares (`gradwire.emu.job.cpu_shares`)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    busy = user + nice + system + irq + softirq + steal
    switch = 0
    pid = os.environ.get("GRADWIRE_EMU_SWITCH_PID")
    if pid:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            switch = int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return [time.time(), busy / _HZ, (system + irq + softirq) / _HZ, switch / _HZ]


def _print(**kw) -> None:
    print(json.dumps(kw), flush=True)


def _print_job(rank: int, backend: str, nbytes: int, times: list, lost: int, retx: int, **extra) -> None:
    """A job's result line: its per-iteration times, what else the job measures (`extra`),
    and the bytes lost and retransmissions over the run."""
    _print(rank=rank, backend=backend, bytes=nbytes, times_s=times, **extra, lost_bytes=lost, retransmits=retx)


def tcp_sink(port: int, conns: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(conns)
    _print(listening=port)

    def serve(c: socket.socket) -> None:
        got = 0
        while True:
            b = c.recv(CHUNK)
            if not b:
                break
            got += len(b)
        c.sendall(b"k")
        c.close()

    threads = []
    for _ in range(conns):
        c, _ = srv.accept()
        t = threading.Thread(target=serve, args=(c,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def _connect(addr: str, port: int, cc: str) -> socket.socket:
    """A TCP connection to `addr:port` with congestion control `cc`, retried for 30 s
    while the peer is not listening yet."""
    for _ in range(600):
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        try:
            s.connect((addr, port))
            return s
        except OSError:
            s.close()
            time.sleep(0.05)
    raise SystemExit(f"could not connect to {addr}:{port}")


def tcp_send(addr: str, port: int, nbytes: int, cc: str, start_at: float = 0.0) -> None:
    s = _connect(addr, port, cc)
    buf = bytes(CHUNK)
    time.sleep(max(0.0, start_at - time.time()))
    w0 = cpu_sample()
    t0, c0 = time.perf_counter(), time.process_time()
    left = nbytes
    while left > 0:
        n = s.send(memoryview(buf)[: min(left, CHUNK)])
        left -= n
    s.shutdown(socket.SHUT_WR)
    ok = s.recv(1) == b"k"
    fct = time.perf_counter() - t0
    cpu = time.process_time() - c0
    window = [w0, cpu_sample()]
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    # struct tcp_info: tcpi_total_retrans is the u32 at offset 100
    retrans = int.from_bytes(info[100:104], sys.byteorder)
    s.close()
    _print(
        fct_s=fct,
        bytes=nbytes,
        cc=cc,
        ok=ok,
        retransmits=retrans,
        gbps=nbytes * 8 / fct / 1e9,
        # the sender's CPU and the machine's counters around the flow (job.cpu_shares)
        cpu_s=[cpu],
        cpu_windows=[window],
    )


def _init_kwargs(backend: str, **extra: object) -> dict:
    """gradwire.init() arguments: the transport, the line rate the front end computed, and
    the job's `runtime` table (GRADWIRE_EMU_INIT, JSON) on top."""
    kw = {
        "transport": backend,
        "line_rate_gbps": float(os.environ.get("GRADWIRE_EMU_LINE_GBPS", "1")),
        "timeout": 600,
        "peer_timeout": 600,
        **extra,
    }
    kw.update(json.loads(os.environ.get("GRADWIRE_EMU_INIT", "{}")))
    return kw


def _group_kwargs(transport: str) -> dict:
    """`_init_kwargs` for the "gradwire" process group, whose timeout is torch's: without
    the runtime's own timeouts."""
    return {k: v for k, v in _init_kwargs(transport).items() if k not in ("timeout", "peer_timeout")}


def allreduce(backend: str, nbytes: int, iters: int, loss_bound: float) -> None:
    import torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    x = torch.empty(nbytes // 4, dtype=torch.float32)
    # every rank contributes rank + 1: the exact sum is small integers, checked per iteration
    want = world * (world + 1) // 2
    times = []
    cpu = []
    exact = []
    windows = []
    if backend == "gloo":
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=600))
        dist.barrier()
        for _ in range(iters):
            x.fill_(rank + 1)
            w0 = cpu_sample()
            t0, c0 = time.perf_counter(), time.process_time()
            dist.all_reduce(x)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            windows.append([w0, cpu_sample()])
            exact.append(bool((x == want).all()))
        dist.barrier()
        dist.destroy_process_group()
        lost = retx = 0
    else:
        import gradwire

        comm = gradwire.init(**_init_kwargs(backend))
        lost = retx = 0
        for _ in range(iters):
            x.fill_(rank + 1)
            w0 = cpu_sample()
            t0, c0 = time.perf_counter(), time.process_time()
            rep = comm.allreduce(x, algorithm="ring", loss_bound=loss_bound)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            windows.append([w0, cpu_sample()])
            exact.append(bool((x == want).all()))
            lost += rep.bytes_lost
            retx += rep.retransmits
        gradwire.destroy()
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        tcp_cc = f.read().strip()  # this namespace's, which Gloo's sockets run
    _print_job(
        rank,
        backend,
        nbytes,
        times,
        lost,
        retx,
        tcp_cc=tcp_cc,
        # the process's CPU time (all threads: the runtime's engine, Gloo's) per iteration
        cpu_s=cpu,
        # the result is the exact sum everywhere (lossy transfers within their bound: not always)
        exact=exact,
        cpu_windows=windows,
    )


def _recv_exact(c: socket.socket, n: int, buf: bytearray) -> None:
    view = memoryview(buf)
    while n > 0:
        got = c.recv_into(view[: min(n, len(buf))])
        if not got:
            raise ConnectionError("peer closed mid-transfer")
        n -= got


def _tcp_ps(cc: str, nbytes: int, iters: int, cpu: list, windows: list) -> list[float]:
    """Parameter server over kernel TCP: rank 0 serves; every other rank pushes `nbytes`,
    then the server sends `nbytes` back to each (the same traffic as gradwire's PS with
    one server)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1
    data, buf = bytes(nbytes), bytearray(CHUNK)
    times = []
    sync = _sync()
    if rank == 0:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(world)
        conns = [srv.accept()[0] for _ in range(world - 1)]
        for c in conns:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        for _ in range(iters):
            w0 = cpu_sample()
            t0, c0 = time.perf_counter(), time.process_time()
            pushes = [threading.Thread(target=_recv_exact, args=(c, nbytes, bytearray(CHUNK))) for c in conns]
            for t in pushes:
                t.start()
            for t in pushes:
                t.join()
            pulls = [threading.Thread(target=c.sendall, args=(data,)) for c in conns]
            for t in pulls:
                t.start()
            for t in pulls:
                t.join()
            if sync:  # every worker has its pull: release them together
                for c in conns:
                    _recv_exact(c, 1, buf)
                for c in conns:
                    c.sendall(b"g")
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            windows.append([w0, cpu_sample()])
        return times
    s = _connect(addr, port, cc)
    for _ in range(iters):
        w0 = cpu_sample()
        t0, c0 = time.perf_counter(), time.process_time()
        s.sendall(data)
        _recv_exact(s, nbytes, buf)
        if sync:
            s.sendall(b"s")
            _recv_exact(s, 1, buf)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        windows.append([w0, cpu_sample()])
    s.close()
    return times


def _sync() -> bool:
    """Whether a PS iteration ends with a barrier (the job's ``sync``): without one a worker
    pushes its next iteration as soon as its own pull is in, overlapping the pulls of
    workers served later, which the simulator's PS workload (every iteration starts when
    the last one's flows have ended) does not."""
    return os.environ.get("GRADWIRE_EMU_SYNC") == "1"


def ps(backend: str, nbytes: int, iters: int, loss_bound: float) -> None:
    rank = int(os.environ["RANK"])
    lost = retx = 0
    cpu, windows = [], []
    if backend in ("cubic", "reno", "bbr"):
        times = _tcp_ps(backend, nbytes, iters, cpu, windows)
    else:
        import torch

        import gradwire

        x = torch.ones(nbytes // 4, dtype=torch.float32)
        token = torch.zeros(1, dtype=torch.float32)
        comm = gradwire.init(**_init_kwargs(backend, ps_servers=1))
        times = []
        sync = _sync()
        for _ in range(iters):
            w0 = cpu_sample()
            t0, c0 = time.perf_counter(), time.process_time()
            push = comm.ps.push(x, loss_bound=loss_bound)
            pull = comm.ps.pull(x)
            if sync:  # a barrier through the server: 4 bytes in, 4 bytes out, reliable
                comm.ps.push(token, loss_bound=0.0)
                comm.ps.pull(token)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            windows.append([w0, cpu_sample()])
            lost += push.bytes_lost + pull.bytes_lost
            retx += push.retransmits + pull.retransmits
        gradwire.destroy()
    _print_job(rank, backend, nbytes, times, lost, retx, cpu_s=cpu, cpu_windows=windows)


#: A ddp job's backend name ending in this runs DDP on the "gradwire" process group.
ON_BACKEND = "-backend"


def ddp(backend: str, nbytes: int, iters: int, loss_bound: float) -> None:
    """DDP training steps of an MLP with about `nbytes` of float32 parameters: DDP's own
    allreduce on Gloo (BACKEND gloo) or on the "gradwire" backend (a transport and
    `ON_BACKEND`), or gradwire's communication hook on a Gloo group (a transport)."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    port = int(os.environ["MASTER_PORT"])
    timeout = datetime.timedelta(seconds=600)
    state, on_backend = None, backend.endswith(ON_BACKEND)
    if on_backend:
        import gradwire.torch as gt

        kw = _group_kwargs(backend.removesuffix(ON_BACKEND))
        opts = gt.Options(transport=kw.pop("transport"), extra=kw)
        dist.init_process_group("gradwire", pg_options=opts, timeout=timeout)
    elif backend != "gloo":
        import gradwire
        import gradwire.ddp

        gradwire.init(**_init_kwargs(backend, master_port=port))
        state = gradwire.ddp.HookState(loss_bound=loss_bound)
    if not on_backend:
        os.environ["MASTER_PORT"] = str(port + 1)
        dist.init_process_group("gloo", timeout=timeout)
    width = 1024
    layers = max(1, nbytes // (4 * width * width))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]))
    if state is not None:
        model.register_comm_hook(state, gradwire.ddp.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    times, cpu, windows = [], [], []
    for _ in range(iters + 1):  # the first step builds DDP's buckets: not timed
        x = torch.randn(8, width, generator=g)
        w0 = cpu_sample()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        windows.append([w0, cpu_sample()])
    dist.destroy_process_group()
    lost = state.bytes_lost if state else 0
    if state is not None:
        gradwire.destroy()
    _print_job(
        rank, backend, layers * 4 * width * (width + 1), times[1:], lost, 0, cpu_s=cpu[1:], cpu_windows=windows[1:]
    )


def train(backend: str, nbytes: int, iters: int, loss_bound: float) -> None:
    """`gradwire train`'s job (gradwire.train.worker) on this rank: DDP to a target accuracy
    on Gloo (BACKEND gloo) or on the "gradwire" backend with its loss-tolerant hook (a
    transport). One "iteration" is the whole run; rank 0 adds the time to accuracy."""
    from gradwire.train.worker import run

    rank = int(os.environ["RANK"])
    plan = json.loads(os.environ["GRADWIRE_EMU_TRAIN"])
    if backend != "gloo":
        kw = _group_kwargs(backend)
        plan.update(transport=kw.pop("transport"), runtime=kw, loss_bound=loss_bound)
    plan.update(
        backend="gloo" if backend == "gloo" else "gradwire", inject_loss=0.0, out=plan["out"] + f"-{backend}.json"
    )
    w0, c0 = cpu_sample(), time.process_time()
    res = run(plan)
    cpu, w1 = time.process_time() - c0, cpu_sample()
    keys = ("time_to_accuracy_s", "steps_to_accuracy", "final_accuracy", "steps", "median_step_s", "samples_per_s")
    _print_job(
        rank,
        backend,
        nbytes,
        [res["train_seconds"]],
        res.get("bytes_lost", 0) if rank == 0 else 0,  # already summed over the ranks
        0,
        cpu_s=[cpu],
        cpu_windows=[[w0, w1]],
        row={k: res.get(k) for k in keys} if rank == 0 else {},
    )


_JOBS = {"ddp": ddp, "ps": ps, "allreduce": allreduce, "train": train}


def main(argv: list[str]) -> None:
    kind, args = argv[0], argv[1:]
    if kind == "tcp-sink":
        tcp_sink(int(args[0]), int(args[1]))
    elif kind == "tcp-send":
        tcp_send(args[0], int(args[1]), int(args[2]), args[3], float(args[4]) if len(args) > 4 else 0.0)
    elif kind in _JOBS:
        # (backend, bytes, iterations[, loss bound])
        _JOBS[kind](args[0], int(args[1]), int(args[2]), float(args[3]) if len(args) > 3 else 0.0)
    else:
        raise SystemExit(f"unknown worker kind {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
    # Gloo's C++ threads can abort the interpreter's teardown after the job is done
    # ("terminate called without an active exception"): leave without static destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
