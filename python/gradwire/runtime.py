"""The socket runtime from Python: join a job, then run collectives on numpy arrays and
CPU torch tensors in place.

>>> import gradwire, numpy as np
>>> gradwire.init()                      # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
>>> x = np.ones(1 << 20, dtype=np.float32)
>>> report = gradwire.allreduce(x)       # x is now the sum over all ranks
>>> report.seconds, report.bytes_lost
>>> fut = gradwire.allreduce_async(x, algorithm="rat", loss_bound=0.01)
>>> fut.result().bubbles                 # [(src_rank, byte_offset, byte_length), ...]

Every rank must issue the same collectives in the same order, as with torch.distributed.
Buffers are used zero-copy (buffer protocol) and must not be touched until the call
returns (or its future resolves).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gradwire import _core

CommError = _core.CommError
PeerTimeout = _core.PeerTimeout
PeerLost = _core.PeerLost
Refused = _core.Refused
CallMismatch = _core.CallMismatch

#: The allreduce algorithms and the transports the runtime knows, as the Rust side names them.
ALGORITHMS: tuple[str, ...] = tuple(_core.algorithms())
TRANSPORTS: tuple[str, ...] = tuple(_core.transports())


@dataclass(frozen=True)
class Bubble:
    """A byte range of the buffer that arrived as zeros (lost within the loss bound)."""

    src: int
    offset: int
    length: int


@dataclass(frozen=True)
class Report:
    """What this rank saw of one collective call."""

    algorithm: str
    seconds: float
    bytes_sent: int
    bytes_received: int
    bytes_lost: int
    retransmits: int
    packets_sent: int
    transfers_sent: int
    transfers_received: int
    min_delivered_fraction: float
    bubbles: list[Bubble] = field(default_factory=list)

    @classmethod
    def _from(cls, d: dict[str, Any]) -> Report:
        d = dict(d)
        d["bubbles"] = [Bubble(*b) for b in d["bubbles"]]
        return cls(**d)

    def lost_elements(self, itemsize: int) -> list[range]:
        """The bubbles as element index ranges of a buffer of `itemsize`-byte elements."""
        return [range(b.offset // itemsize, (b.offset + b.length) // itemsize) for b in self.bubbles]


def _env(name: str, default: str | None = None) -> str:
    v = os.environ.get(name, default)
    if v is None:
        raise ValueError(
            f"{name} is not set: pass it to gradwire.init() or set the environment variable (as torchrun does)"
        )
    return v


def _env_int(name: str, value: int | None) -> int:
    if value is not None:
        return int(value)
    raw = _env(name)
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} is {raw!r}: expected an integer") from None


_LAUNCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


def _port(port: int) -> int:
    if not 1 <= port <= 65535:
        raise ValueError(f"MASTER_PORT is {port}: expected a TCP port in 1..65535")
    return port


def transfer_bound(result_loss_bound: float, world_size: int) -> float:
    """The per-transfer loss bound that keeps the share of result elements missing any
    contribution within `result_loss_bound`: every element's contributions cross at most
    world_size - 1 lossy reduce transfers (ring, tree, RAT and PS alike), and each may lose
    its bound's share, so (union bound) dividing by world_size - 1 is enough."""
    if not 0.0 <= result_loss_bound <= 1.0:
        raise ValueError(f"result_loss_bound must be in [0, 1], got {result_loss_bound}")
    return result_loss_bound / max(1, world_size - 1)


def default_token() -> str:
    """The job token when none is given: ``GRADWIRE_TOKEN`` (``gradwire launch`` hands
    each job a random one), else torchrun's ``TORCHELASTIC_RUN_ID`` (its ``--rdzv-id``;
    a fixed "none" unless given, so two torchrun jobs on one port still mix: pass
    ``--rdzv-id``), else empty."""
    if "GRADWIRE_TOKEN" in os.environ:
        return os.environ["GRADWIRE_TOKEN"]
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    return f"torchelastic:{run_id}" if run_id else ""


def _env_flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ValueError(f"{name} is {raw!r}: expected 1 or 0")


class _Buffer:
    """A float32/float64 buffer the runtime may write in place, and how to copy back.

    A numpy array goes to the runtime through the buffer protocol, and so does a torch
    tensor by default (through `tensor.numpy()`, which pins the tensor's storage: torch then
    refuses to resize it, for good, so no resize can free memory the engine is writing).
    With `pin=False` a tensor goes by address (`data_ptr()`), held until the call resolves
    but with its storage left resizable: the caller promises not to resize it while the
    call is in flight (torch.distributed's contract for every backend; FSDP frees and
    regrows the storage of the tensors it communicates between calls)."""

    def __init__(self, x: Any, pin: bool = True):
        self.target = x
        self.array = x
        self.copy_back = False
        self.ptr: tuple[int, int, str] | None = None  # (address, bytes, "f32"/"f64") for a tensor
        mod = type(x).__module__
        if mod.startswith("torch"):
            if x.device.type != "cpu":
                raise ValueError(f"gradwire runs on CPU tensors; this one is on {x.device}")
            t = x.detach()
            code = _TORCH_FLOATS.get(str(t.dtype))
            if code is None:
                raise TypeError(
                    f"collectives sum float32 or float64 buffers, not {str(t.dtype).removeprefix('torch.')}"
                )
            if not t.is_contiguous():
                t = t.contiguous()
                self.copy_back = True
            if pin:
                self.array = t.numpy()  # shares memory with the tensor
                if self.array.ndim == 0:
                    self.array = self.array.reshape(1)
            else:
                self.array = t  # held (with its storage) until the call resolves
                self.ptr = (t.data_ptr(), t.numel() * t.element_size(), code)
            return
        import numpy as np

        if not isinstance(x, np.ndarray):
            raise TypeError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")
        if not x.flags.c_contiguous:
            raise ValueError("the array is not C-contiguous; pass np.ascontiguousarray(x) and use the result")
        dt = self.array.dtype
        if dt.char not in "fd":  # float32, float64 (a str() of the dtype costs ~10 us)
            raise TypeError(f"collectives sum float32 or float64 buffers, not {dt}")
        if not dt.isnative:  # dtype.char ignores the byte order
            raise TypeError(
                f"the array's byte order is not this machine's ({dt.str}): collectives sum native floats; "
                "pass x.astype(x.dtype.newbyteorder('=')) and use the result"
            )
        if self.array.ndim == 0:  # a scalar (a loss, a counter): its 1-element view shares the memory
            self.array = self.array.reshape(1)

    def submit(self, c: Any, kind: str, **kw: Any) -> Any:
        if self.ptr is not None:
            return c.submit_ptr(kind, self.array, *self.ptr, **kw)
        return c.submit(kind, self.array, **kw)

    def finish(self) -> None:
        if self.copy_back:
            import torch

            self.target.copy_(self.array if self.ptr is not None else torch.from_numpy(self.array))


_TORCH_FLOATS = {"torch.float32": "f32", "torch.float64": "f64"}


class Work:
    """A collective in flight (like torch.distributed's Work)."""

    def __init__(self, pending: Any, buf: _Buffer):
        self._pending = pending
        self._buf = buf
        self._report: Report | None = None
        self._lock = threading.Lock()

    def wait(self, timeout: float | None = None) -> Report:
        """The report once this rank's part is done; raises the call's error, or
        TimeoutError if `timeout` seconds pass first."""
        with self._lock:
            if self._report is None:
                d = self._pending.wait(timeout)
                if d is None:
                    raise TimeoutError(f"the collective did not finish within {timeout} s")
                self._buf.finish()
                self._report = Report._from(d)
            return self._report

    def is_completed(self) -> bool:
        return self._report is not None or self._pending.done()

    def open(self) -> None:
        """Lets a call submitted gated (`Communicator._submit(..., gated=True)`) start."""
        self._pending.open()

    def future(self) -> concurrent.futures.Future:
        """A concurrent.futures.Future resolved (from a helper thread) with the report."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def resolve() -> None:
            try:
                fut.set_result(self.wait())
            except BaseException as e:  # noqa: BLE001 - handed to the future's consumer
                fut.set_exception(e)

        threading.Thread(target=resolve, name="gradwire-future", daemon=True).start()
        return fut


class Communicator:
    """A rank of a gradwire job. Prefer `gradwire.init()`, which also makes it the default."""

    def __init__(
        self,
        master_addr: str | None = None,
        master_port: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        *,
        token: str | None = None,
        transport: str | None = None,
        topology: str | Sequence[int] | None = None,
        timeout: float = 30.0,
        peer_timeout: float = 30.0,
        mss: int | None = None,
        line_rate_gbps: float | None = None,
        ps_servers: int | None = None,
        tree_arity: int = 2,
        pipeline_chunks: int = 4,
        impair: dict[int, tuple[float, float]] | None = None,
        gso: bool = True,
        send_thread: bool = False,
        authenticate: bool | None = None,
        retx_quiet_us: float | None = None,
        pace_burst_us: float | None = None,
        any_thread: bool = False,
        pin_tensors: bool = True,
    ):
        if all(v is None for v in (master_addr, master_port, rank, world_size)) and not any(
            name in os.environ for name in _LAUNCH_VARS
        ):
            # A script run on its own: one line, not a traceback about one variable.
            raise SystemExit(
                "gradwire: this process was not started by a launcher (MASTER_ADDR, MASTER_PORT, RANK and "
                "WORLD_SIZE are not set): run it with `gradwire launch -n N -- python SCRIPT` or torchrun, "
                "or pass them to gradwire.init()"
            )
        world = _env_int("WORLD_SIZE", world_size)
        if world < 1:
            raise ValueError(f"WORLD_SIZE is {world}: expected the number of ranks, at least 1")
        my_rank = _env_int("RANK", rank)
        if not 0 <= my_rank < world:
            raise ValueError(f"RANK is {my_rank}: expected 0..{world - 1} (WORLD_SIZE is {world})")
        if topology is None:
            topology = os.environ.get("GRADWIRE_TOPOLOGY")
        elif not isinstance(topology, str):
            topology = ",".join(str(int(r)) for r in topology)
        imp = None
        if impair:
            imp = [(0.0, 0.0)] * world
            for peer, (loss, delay) in impair.items():
                if not 0 <= int(peer) < world:
                    raise ValueError(f"impair names rank {peer}, outside 0..{world - 1}")
                imp[int(peer)] = (float(loss), float(delay))
        self._c = _core.Communicator(
            master_addr if master_addr is not None else _env("MASTER_ADDR"),
            _port(_env_int("MASTER_PORT", master_port)),
            my_rank,
            world,
            token=token if token is not None else default_token(),
            timeout=timeout,
            peer_timeout=peer_timeout,
            transport=transport or os.environ.get("GRADWIRE_TRANSPORT", "dlcp"),
            mss=mss if mss is not None else (_env_int("GRADWIRE_MSS", None) if "GRADWIRE_MSS" in os.environ else None),
            line_rate_gbps=line_rate_gbps,
            topology=topology,
            ps_servers=ps_servers,
            tree_arity=tree_arity,
            pipeline_chunks=pipeline_chunks,
            impair=imp,
            gso=gso,
            send_thread=send_thread,
            authenticate=_env_flag("GRADWIRE_AUTH") if authenticate is None else bool(authenticate),
            retx_quiet_us=float(os.environ.get("GRADWIRE_RETX_QUIET_US", 0.0))
            if retx_quiet_us is None
            else float(retx_quiet_us),
            pace_burst_us=float(os.environ["GRADWIRE_PACE_BURST_US"])
            if pace_burst_us is None and "GRADWIRE_PACE_BURST_US" in os.environ
            else pace_burst_us,
            any_thread=any_thread,
        )
        self.ps = _PS(self)
        # False: torch tensors go by address, their storage left resizable (see _Buffer).
        self._pin = pin_tensors

    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def world_size(self) -> int:
        return self._c.world_size

    @property
    def line_rate_gbps(self) -> float:
        """The rate DLCP senders start at: `line_rate_gbps` if given, else the speed the
        kernel reports for the interface toward the peers (100 on loopback, 25 when the
        interface reports none)."""
        return self._c.line_rate_gbps

    @property
    def mss(self) -> int:
        """Payload bytes per datagram, the same on every rank: the `mss` given, or the
        path MTU less the IP, UDP and gradwire headers (65472 on one host)."""
        return self._c.mss

    def counters(self) -> dict[str, int]:
        """Runtime-wide counters (malformed, foreign_session, stale, injected_drops, ...)."""
        return dict(self._c.counters())

    def _submit(self, kind: str, x: Any, gated: bool = False, **kw: Any) -> Work:
        """A call on `x`. `gated`: it takes its place in the call order now and starts once
        `Work.open()` is called (x, a tensor taken by address, may be written until then)."""
        buf = _Buffer(x, self._pin and not gated)
        if gated:
            if buf.ptr is None:
                raise TypeError("a gated call takes a torch tensor")
            kw["gated"] = True
        return Work(buf.submit(self._c, kind, **kw), buf)

    def allreduce_async(
        self, x: Any, algorithm: str = "ring", loss_bound: float = 0.0, *, result_loss_bound: float | None = None
    ) -> Work:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
        if result_loss_bound is not None:
            loss_bound = transfer_bound(result_loss_bound, self.world_size)
        return self._submit("allreduce", x, algorithm=algorithm, loss_bound=loss_bound)

    def allreduce(
        self, x: Any, algorithm: str = "ring", loss_bound: float = 0.0, *, result_loss_bound: float | None = None
    ) -> Report:
        """Sum `x` over all ranks, in place. With `loss_bound` > 0 the reduce half may
        lose up to that share of *each transfer* (zeros, listed in `Report.bubbles`): an
        element crosses up to world_size - 1 lossy transfers, so up to that many times the
        bound may lack some rank's contribution. `result_loss_bound` bounds that share of
        the result instead (it sets loss_bound = result_loss_bound / (world_size - 1)).
        The result is broadcast reliably, so every rank ends with the same bits."""
        return self.allreduce_async(x, algorithm, loss_bound, result_loss_bound=result_loss_bound).wait()

    def broadcast_async(self, x: Any, root: int = 0) -> Work:
        return self._submit("broadcast", x, root=root)

    def broadcast(self, x: Any, root: int = 0) -> Report:
        """Copy rank `root`'s `x` into every rank's `x`."""
        return self.broadcast_async(x, root).wait()

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _PS:
    """Parameter-server calls. The buffer is split into one shard per server (servers
    colocated with workers; `ps_servers` at init, default every rank). `push` sums every
    worker's shard into its server's buffer, lossy within `loss_bound`; `pull` copies each
    server's shard back to every worker, reliable unless given a bound of its own."""

    def __init__(self, comm: Communicator):
        self._comm = comm

    def push_async(self, x: Any, loss_bound: float = 0.0) -> Work:
        return self._comm._submit("ps_push", x, loss_bound=loss_bound)

    def push(self, x: Any, loss_bound: float = 0.0) -> Report:
        return self.push_async(x, loss_bound).wait()

    def pull_async(self, x: Any, loss_bound: float = 0.0) -> Work:
        return self._comm._submit("ps_pull", x, loss_bound=loss_bound)

    def pull(self, x: Any, loss_bound: float = 0.0) -> Report:
        return self.pull_async(x, loss_bound).wait()


_default: Communicator | None = None


def init(*args: Any, **kwargs: Any) -> Communicator:
    """Join the job (torchrun-style environment unless given) and make it the default."""
    global _default
    if _default is not None:
        raise RuntimeError("gradwire.init() was already called in this process; call gradwire.destroy() first")
    _default = Communicator(*args, **kwargs)
    return _default


def _get() -> Communicator:
    if _default is None:
        raise RuntimeError("call gradwire.init() first")
    return _default


def is_initialized() -> bool:
    return _default is not None


def destroy() -> None:
    """Close the default communicator (waits briefly for the last handshakes)."""
    global _default
    if _default is not None:
        _default.close()
        _default = None


def allreduce(
    x: Any, algorithm: str = "ring", loss_bound: float = 0.0, *, result_loss_bound: float | None = None
) -> Report:
    return _get().allreduce(x, algorithm, loss_bound, result_loss_bound=result_loss_bound)


def allreduce_async(
    x: Any, algorithm: str = "ring", loss_bound: float = 0.0, *, result_loss_bound: float | None = None
) -> concurrent.futures.Future:
    """Like `allreduce`, returning a concurrent.futures.Future of the Report."""
    return _get().allreduce_async(x, algorithm, loss_bound, result_loss_bound=result_loss_bound).future()


def broadcast(x: Any, root: int = 0) -> Report:
    return _get().broadcast(x, root)


def broadcast_async(x: Any, root: int = 0) -> concurrent.futures.Future:
    return _get().broadcast_async(x, root).future()
