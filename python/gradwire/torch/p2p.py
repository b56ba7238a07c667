"""Point-to-point for the "gradwire" backend: send, recv (named or any source), and what is
built on them (all_to_all, all_to_all_single, monitored_barrier).

The runtime runs one call at a time and every rank of a communicator issues the same calls
in the same order, which a send between two of its ranks is not. So a message travels on a
*channel*: a two-rank communicator of its own per (source, destination, tag), made on first
use through the group's c10d store, on which the sender is rank 0 and every message is a
broadcast from it. A channel carries its messages in the order they were posted, as
torch.distributed asks of sends and receives between two ranks with one tag; different
tags are different channels, so their messages never wait for each other. A channel's
thread makes its communicator (a rendezvous, which would block the caller until the peer
posts its side) and submits what was posted meanwhile; after that a post submits at once
(submitting never blocks). So `isend` and `irecv` return at once and a rank can post both
before either completes (`batch_isend_irecv` without deadlock).

A receive from any source needs to know which sender to take: every user send adds one to
its channel's count in the store (from a thread of its own, off the send's path), and an
any-source receive takes the lowest rank whose count is ahead of the receives this rank has
posted on that channel. Receives behind an any-source one are posted, in issue order, by
one thread once its source is known.

Cost: a channel is a communicator (an engine thread, a UDP socket, a TCP connection) per
(source, destination, tag) in use, made once; a message is one runtime call (a two-rank
broadcast), so a small message costs the runtime's per-call latency. all_to_all uses
channels of its own, without counts.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
import weakref
from collections.abc import Callable
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
    """One send or receive on a channel. It is submitted to the channel's communicator
    (in posting order) by whichever thread posts it once the channel is connected, or by
    the channel's thread when it connects; `wait` is the runtime Work's (a Report)."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor
        self._ready = threading.Event()  # submitted, or failed before
        self._work: runtime.Work | None = None
        self._back: Callable[[], None] | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def start(self, comm: runtime.Communicator) -> None:
        """Submits the message: a broadcast from the channel's rank 0 (the sender) to rank
        1, bit for bit (other dtypes than float32/float64 as bytes in a float64 buffer)."""
        try:
            t = self.tensor
            if t.numel() == 0:
                pass
            elif t.dtype in (torch.float32, torch.float64):
                self._work = comm.broadcast_async(t, 0)
            else:
                src = t.contiguous().view(-1).view(torch.uint8)
                stage = torch.zeros((src.numel() + 7) // 8, dtype=torch.float64)
                if comm.rank == 0:
                    stage.view(torch.uint8)[: src.numel()].copy_(src)
                self._work = comm.broadcast_async(stage, 0)
                if comm.rank == 1:
                    n = src.numel()
                    self._back = lambda: t.copy_(stage.view(torch.uint8)[:n].view(t.dtype).view(t.shape))
        except BaseException as e:  # noqa: BLE001 - raised from wait()
            self._error = e
        self._ready.set()

    def fail(self, e: BaseException) -> None:
        if not self._ready.is_set():
            self._error = e
            self._ready.set()

    def wait(self, timeout: float | None = None) -> runtime.Report | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the message was not submitted within {timeout} s (its channel is not connected)")
        if self._error is not None:
            raise self._error
        if self._work is None:
            return None
        rep = self._work.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        with self._lock:
            if self._back is not None:
                self._back()
                self._back = None
        return rep


class Channel:
    """Messages from `src` to `dst` under one name, in posting order, on a two-rank
    communicator; a thread makes it (the rendezvous waits for the peer) and submits what
    was posted meanwhile, after which posts submit at once."""

    def __init__(self, p2p: P2P, name: str, src: int, dst: int):
        self._p2p = p2p
        self.name = name
        self.src, self.dst = src, dst
        self._lock = threading.Lock()
        self._comm: runtime.Communicator | None = None
        self._error: BaseException | None = None
        self._backlog: list[Message] = []
        self._thread = threading.Thread(target=self._connect, name=f"gradwire-p2p-{name}", daemon=True)
        self._thread.start()

    def post(self, m: Message) -> None:
        with self._lock:
            if self._error is not None:
                m.fail(self._error)
            elif self._comm is not None:
                m.start(self._comm)  # submitting never blocks
            else:
                self._backlog.append(m)

    def _connect(self) -> None:
        try:
            comm = self._p2p.connect(self.name, self.src, self.dst)
        except BaseException as e:  # noqa: BLE001 - every message of the channel gets it
            with self._lock:
                self._error = e
                for m in self._backlog:
                    m.fail(e)
                self._backlog.clear()
            return
        while True:  # what was posted while connecting, in order; posts meanwhile queue behind
            with self._lock:
                batch, self._backlog = self._backlog, []
                if not batch:
                    self._comm = comm
                    return
            for m in batch:
                m.start(comm)

    def close(self) -> None:
        with self._lock:
            comm, self._comm = self._comm, None
            self._error = self._error or RuntimeError("the process group was shut down")
        if comm is not None:
            comm.close()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


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
        self._recv_lock = threading.Lock()
        self._lane: queue.SimpleQueue = queue.SimpleQueue()  # receives behind an any-source one
        self._lane_items = 0
        self._lane_thread: threading.Thread | None = None
        self._counts: queue.SimpleQueue = queue.SimpleQueue()  # sends to count in the store
        self._count_thread: threading.Thread | None = None

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
        for q, th in ((self._lane, self._lane_thread), (self._counts, self._count_thread)):
            if th is not None:
                q.put(None)
                th.join(2.0)
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        # Closed side by side, waited for at most a shared 2 s: a channel still connecting
        # (its peer never posted) or with a message its peer never matched (a failed
        # monitored_barrier) would hold a close for its timeout or the engine's linger;
        # those are left to daemon threads.
        closing = [self._thread(ch.close, f"gradwire-p2p-close-{ch.name}") for ch in channels]
        deadline = time.monotonic() + 2.0
        for th in closing:
            th.join(max(deadline - time.monotonic(), 0.0))
        for ch in channels:
            ch.join(max(deadline - time.monotonic(), 0.0))

    def _thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        th = threading.Thread(target=target, name=name, daemon=True)
        th.start()
        return th

    # -- user sends and receives --------------------------------------------------------------

    def send(self, t: torch.Tensor, dst: int, tag: int) -> Message:
        me = self._backend.rank()
        m = Message(t)
        self.channel(f"{me}-{dst}-{tag}", me, dst).post(m)
        # Counted for any-source receives, off the send's path: a count that lands late
        # only makes such a receive look again.
        with self._lock:
            if self._count_thread is None:
                self._count_thread = self._thread(self._run_counts, "gradwire-p2p-count")
        self._counts.put(f"{self._round}/p2p/sent/{me}-{dst}-{tag}")
        return m

    def _run_counts(self) -> None:
        while (key := self._counts.get()) is not None:
            try:
                self._store.add(key, 1)
            except Exception:  # noqa: BLE001 - the store is gone: the group is shutting down
                return

    def recv(self, t: torch.Tensor, src: int | None, tag: int) -> Message:
        m = Message(t)
        me = self._backend.rank()
        with self._recv_lock:
            if src is None or self._lane_items > 0:
                # From any source, or behind one: the lane posts it once its source is known.
                self._lane_items += 1
                if self._lane_thread is None:
                    self._lane_thread = self._thread(self._run_lane, "gradwire-p2p-recv")
                self._lane.put((m, src, tag))
                return m
            self._posted[(src, tag)] = self._posted.get((src, tag), 0) + 1
        self.channel(f"{src}-{me}-{tag}", src, me).post(m)
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
                with self._recv_lock:
                    self._posted[(src, tag)] = self._posted.get((src, tag), 0) + 1
                self.channel(f"{src}-{me}-{tag}", src, me).post(m)
            except BaseException as e:  # noqa: BLE001 - raised from the message's wait()
                m.fail(e)
            with self._recv_lock:
                self._lane_items -= 1

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
            m = Message(t)
            self.channel(f"{name}:{peer}-{me}", peer, me).post(m)
            out.append(m)
        for peer, t in sends.items():
            m = Message(t)
            self.channel(f"{name}:{me}-{peer}", me, peer).post(m)
            out.append(m)
        return out
