"""Point-to-point for the "gradwire" backend: send, recv (named or any source), and what is
built on them (all_to_all, all_to_all_single, monitored_barrier).

The runtime runs one call at a time and every rank of a communicator issues the same calls
in the same order, which a send between two of its ranks is not. So a message travels on a
*channel*: a two-rank communicator of its own per (source, destination, tag), made on first
use through the group's c10d store, on which the sender is rank 0 and every message is a
broadcast from it. A channel carries its messages in the order they were posted, as
torch.distributed asks of sends and receives between two ranks with one tag; different
tags are different channels, so their messages never wait for each other. Each channel has
a thread that makes its communicator (a rendezvous, which would block the caller until the
peer posts its side) and then runs the channel's messages one after the other, so `isend`
and `irecv` return at once and a rank can post both before either completes
(`batch_isend_irecv` without deadlock).

A receive from any source needs to know which sender to take: every user send adds one to
its channel's count in the store, and an any-source receive takes the lowest rank whose
count is ahead of the receives this rank has posted on that channel (receives are posted in
issue order by one thread, so a named receive posted after an any-source one waits for it).

Cost: a channel is a communicator (an engine thread, a UDP socket, a TCP connection) per
(source, destination, tag) in use, made once; a user send costs a store round trip beside
the transfer (the count). all_to_all uses channels of its own, without counts.
"""

from __future__ import annotations

import concurrent.futures
import queue
import socket
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import torch

from gradwire import runtime

if TYPE_CHECKING:
    from gradwire.torch.backend import GradwireBackend

# The source rank of each finished any-source receive, by its tensor (torch's recv() asks
# the Work, which c10d wraps where this backend cannot reach: see backend._source_rank).
_SOURCES: dict[int, tuple[weakref.ref, int]] = {}
_SOURCES_LOCK = threading.Lock()


def record_source(t: torch.Tensor, src: int) -> None:
    with _SOURCES_LOCK:
        for k in [k for k, (r, _) in _SOURCES.items() if r() is None]:
            del _SOURCES[k]
        _SOURCES[id(t)] = (weakref.ref(t), src)


def source_of(t: torch.Tensor) -> int | None:
    with _SOURCES_LOCK:
        got = _SOURCES.get(id(t))
        return got[1] if got is not None and got[0]() is t else None


def local_address(toward: str) -> str:
    """This host's address on the route toward `toward` (where peers can reach it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((toward, 9))  # no packet is sent
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class Message:
    """One send or receive on a channel; `wait` is the runtime Work's (a Report)."""

    def __init__(self, tensor: torch.Tensor, send: bool):
        self.tensor = tensor
        self.send = send
        self.future: concurrent.futures.Future = concurrent.futures.Future()

    def wait(self, timeout: float | None = None) -> runtime.Report | None:
        return self.future.result(timeout)

    def fail(self, e: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(e)


class Channel:
    """Messages from `src` to `dst` under one name, in posting order, on a two-rank
    communicator made by the channel's thread."""

    def __init__(self, p2p: P2P, name: str, src: int, dst: int):
        self._p2p = p2p
        self.name = name
        self.src, self.dst = src, dst
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"gradwire-p2p-{name}", daemon=True)
        self._thread.start()

    def post(self, m: Message) -> None:
        self._queue.put(m)

    def stop(self) -> None:
        self._queue.put(None)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        comm: runtime.Communicator | None = None
        error: BaseException | None = None
        try:
            comm = self._p2p.connect(self.name, self.src, self.dst)
        except BaseException as e:  # noqa: BLE001 - every message of the channel gets it
            error = e
        while (m := self._queue.get()) is not None:
            if error is not None:
                m.fail(error)
                continue
            try:
                m.future.set_result(_carry(comm, m.tensor))
            except BaseException as e:  # noqa: BLE001 - raised from the message's wait()
                m.fail(e)
                error = e  # the channel's communicator is unusable after a failure
        if comm is not None:
            comm.close()


def _carry(comm: runtime.Communicator, t: torch.Tensor) -> runtime.Report | None:
    """Broadcast `t` from the channel's rank 0 (the sender) to rank 1, bit for bit."""
    if t.numel() == 0:
        return None
    if t.dtype in (torch.float32, torch.float64):
        return comm.broadcast(t, 0)
    src = t.contiguous().view(-1).view(torch.uint8)
    stage = torch.zeros((src.numel() + 7) // 8, dtype=torch.float64)
    stage.view(torch.uint8)[: src.numel()].copy_(src)
    rep = comm.broadcast(stage, 0)
    if comm.rank == 1:
        t.copy_(stage.view(torch.uint8)[: src.numel()].view(t.dtype).view(t.shape))
    return rep


class P2P:
    """A group's channels, its any-source bookkeeping and its receive lane."""

    def __init__(self, backend: GradwireBackend, store: Any, round_key: str, token: str, timeout: float):
        self._backend = backend
        self._store = store
        self._round = round_key
        self._token = token
        self._timeout = timeout
        self._channels: dict[str, Channel] = {}
        self._lock = threading.Lock()
        self._posted: dict[tuple[int, int], int] = {}  # (src, tag) -> receives posted here
        self._lane: queue.SimpleQueue = queue.SimpleQueue()
        self._lane_thread: threading.Thread | None = None

    # -- channels -------------------------------------------------------------------------

    def channel(self, name: str, src: int, dst: int) -> Channel:
        with self._lock:
            ch = self._channels.get(name)
            if ch is None:
                ch = self._channels[name] = Channel(self, name, src, dst)
            return ch

    def connect(self, name: str, src: int, dst: int) -> runtime.Communicator:
        """The channel's communicator (blocks until the peer makes its side)."""
        b = self._backend
        me = 0 if b.rank() == src else 1
        key = f"{self._round}/p2p/{name}"
        if me == 0:
            from gradwire.torch.backend import _free_port

            host = local_address(b.master_addr)
            self._store.set(key, f"{host} {_free_port(host)}")
        host, port = self._get(key).decode().split(" ")
        o = b.gradwire_options
        return runtime.Communicator(
            host,
            int(port),
            me,
            2,
            token=f"{self._token}/{name}",
            transport=o.transport,
            mss=o.mss,
            timeout=self._timeout,
            peer_timeout=o.peer_timeout if o.peer_timeout is not None else self._timeout,
            any_thread=True,
            pin_tensors=False,
            authenticate=o.extra.get("authenticate"),
        )

    def _get(self, key: str) -> bytes:
        """store.get without blocking in it: a TCPStore client holds its connection while
        a get waits, so a channel waiting for its peer's key would keep every other thread
        (another channel setting the key its peer waits for) out of the store."""
        deadline = time.monotonic() + self._timeout
        pause = 0.0005
        while not self._store.check([key]):
            if time.monotonic() > deadline:
                raise runtime.PeerTimeout(f"no peer joined channel {key!r} within {self._timeout:.0f} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        return self._store.get(key)

    def close(self) -> None:
        if self._lane_thread is not None:
            self._lane.put(None)
            self._lane_thread.join(5.0)
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        # Each channel ends after its last message; one still waiting for a peer that
        # never comes (a monitored_barrier that failed) is left to its timeout: a daemon
        # thread, not waited for past a shared 2 s.
        for ch in channels:
            ch.stop()
        deadline = time.monotonic() + 2.0
        for ch in channels:
            ch.join(max(deadline - time.monotonic(), 0.0))

    # -- user sends and receives --------------------------------------------------------------

    def send(self, t: torch.Tensor, dst: int, tag: int) -> Message:
        me = self._backend.rank()
        m = Message(t, send=True)
        # Counted before it is posted: an any-source receive may pick it from then on.
        self._store.add(f"{self._round}/p2p/sent/{me}-{dst}-{tag}", 1)
        self.channel(f"{me}-{dst}-{tag}", me, dst).post(m)
        return m

    def recv(self, t: torch.Tensor, src: int | None, tag: int) -> Message:
        m = Message(t, send=False)
        with self._lock:
            if self._lane_thread is None:
                self._lane_thread = threading.Thread(target=self._run_lane, name="gradwire-p2p-recv", daemon=True)
                self._lane_thread.start()
        self._lane.put((m, src, tag))
        return m

    def _run_lane(self) -> None:
        """Posts receives in issue order, resolving any-source ones from the store's counts."""
        me = self._backend.rank()
        while (item := self._lane.get()) is not None:
            m, src, tag = item
            try:
                if src is None:
                    src = self._any_source(tag)
                    record_source(m.tensor, src)
                self._posted[(src, tag)] = self._posted.get((src, tag), 0) + 1
                self.channel(f"{src}-{me}-{tag}", src, me).post(m)
            except BaseException as e:  # noqa: BLE001 - raised from the message's wait()
                m.fail(e)

    def _any_source(self, tag: int) -> int:
        me, world = self._backend.rank(), self._backend.size()
        deadline = time.monotonic() + self._timeout
        pause = 0.0005
        while True:
            for src in range(world):
                if src == me:
                    continue
                sent = self._store.add(f"{self._round}/p2p/sent/{src}-{me}-{tag}", 0)
                if sent > self._posted.get((src, tag), 0):
                    return src
            if time.monotonic() > deadline:
                raise runtime.PeerTimeout(
                    f"rank {me}: no rank sent a message with tag {tag} within {self._timeout:.0f} s "
                    "(a receive from any source)"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    # -- built on them ------------------------------------------------------------------------

    def exchange(self, name: str, sends: dict[int, torch.Tensor], recvs: dict[int, torch.Tensor]) -> list[Message]:
        """Posts `sends[peer]` to each peer and `recvs[peer]` from each, on the channels
        `name` (not user tags: no counts, no any-source)."""
        me = self._backend.rank()
        out = []
        for peer, t in recvs.items():
            m = Message(t, send=False)
            self.channel(f"{name}:{peer}-{me}", peer, me).post(m)
            out.append(m)
        for peer, t in sends.items():
            m = Message(t, send=True)
            self.channel(f"{name}:{me}-{peer}", me, peer).post(m)
            out.append(m)
        return out
