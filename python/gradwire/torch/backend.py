"""The "gradwire" torch.distributed backend: a c10d ``Backend`` whose collectives run on the
gradwire socket runtime.

A Python subclass of ``torch._C._distributed_c10d.Backend`` (the pattern of PyTorch's
test/distributed/test_c10d_pypg.py): every collective submits its gradwire calls at once
(so every rank issues them in the same order, as the runtime needs) and returns a
``_GradwireWork``, a Python subclass of c10d's ``Work``. Its ``wait()`` waits on the runtime
in the caller's thread (a synchronous ``dist.all_reduce`` costs no thread hop); its
``get_future()`` (DDP's path) makes a ``torch.futures.Future`` that one waiter thread per
group resolves, in issue order.

The runtime sums float32/float64 buffers and broadcasts; everything else is built from
those two: other dtypes travel as raw bytes, MAX/MIN/PRODUCT and integer sums reduce an
allgather locally (same bits on every rank), reduce_scatter slices an allreduce.
"""

from __future__ import annotations

import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import Work as _C10dWork

from gradwire import runtime
from gradwire.torch.options import Options

_FLOATS = (torch.float32, torch.float64)


def _not_implemented(name: str) -> Callable[..., Any]:
    def call(self: GradwireBackend, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"the gradwire backend does not implement {name}; it implements allreduce, broadcast, allgather, "
            "all_gather_into_tensor, reduce, gather, scatter, reduce_scatter, reduce_scatter_tensor and barrier"
        )

    call.__name__ = name
    return call


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Stats:
    """What this rank's group has sent and lost so far (summed over its runtime calls)."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes_sent = 0
        self.bytes_lost = 0
        self.seconds = 0.0
        self._lock = threading.Lock()  # a Work's waiter and the group's waiter thread both add

    def add(self, rep: runtime.Report) -> None:
        with self._lock:
            self.calls += 1
            self.bytes_sent += rep.bytes_sent
            self.bytes_lost += rep.bytes_lost
            self.seconds += rep.seconds

    def __repr__(self) -> str:
        return f"Stats(calls={self.calls}, bytes_sent={self.bytes_sent}, bytes_lost={self.bytes_lost}, seconds={self.seconds:.3f})"


class GradwireBackend(_C10dBackend):
    """One rank of a process group on gradwire. Made by ``init_process_group("gradwire")``
    (or ``new_group(backend="gradwire")``) through the creator registered on import."""

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        size: int,
        timeout: timedelta,
        options: Options | None = None,
    ):
        super().__init__(rank, size)
        self.gradwire_options = (options or Options()).resolved()
        self.stats = Stats()
        self.comm = self._join(store, rank, size, timeout)
        self._waiter = _Waiter()

    def _join(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> runtime.Communicator:
        # The c10d store (already shared by the group) carries the rendezvous: rank 0 picks
        # a free port and a token, the others read them.
        # A GRADWIRE_TOKEN every rank has is never written to the store (which anyone who
        # reaches it can read); without one, rank 0's random token keeps jobs apart but is
        # no secret, so it cannot key authentication.
        o = self.gradwire_options
        own_token = os.environ.get("GRADWIRE_TOKEN")
        auth = o.extra.get("authenticate")
        if (runtime._env_flag("GRADWIRE_AUTH") if auth is None else auth) and not own_token:
            raise ValueError(
                "gradwire authentication needs GRADWIRE_TOKEN set to the same secret on every rank: "
                "without it the job token would travel in clear through torch's store"
            )
        if rank == 0:
            host = os.environ.get("MASTER_ADDR") or "127.0.0.1"
            port = _free_port(host)
            store.set("gradwire/rendezvous", f"{host} {port} {'-' if own_token else secrets.token_hex(8)}")
        host, port, token = store.get("gradwire/rendezvous").decode().split(" ")
        token = own_token or token
        impair = {p: (o.inject_loss, 0.0) for p in range(size) if p != rank} if o.inject_loss > 0 else None
        secs = max(timeout.total_seconds(), 1.0) if timeout is not None else 300.0
        return runtime.Communicator(
            host,
            int(port),
            rank,
            size,
            token=token,
            transport=o.transport,
            mss=o.mss,
            timeout=min(secs, 300.0),
            peer_timeout=o.peer_timeout,
            impair=impair,
            # torch.distributed's contract: every rank issues its collectives in the same
            # order, from whichever threads (DDP's reducer may call from autograd's).
            any_thread=True,
            # Tensors go by address, their storage left resizable: FSDP frees and regrows
            # the storage of the tensors it communicates (between calls, as c10d's contract
            # has it), which a pinned storage refuses.
            pin_tensors=False,
            **o.extra,
        )

    def getBackendName(self) -> str:
        return "gradwire"

    # -- plumbing -------------------------------------------------------------------------

    def _work(self, calls: list[runtime.Work], finish: Callable[[], Any]) -> _GradwireWork:
        """A c10d Work done once `calls` are done and `finish()` has produced its value."""
        return _GradwireWork(self, calls, finish)

    def _bcast_bytes(self, t: torch.Tensor, root: int) -> tuple[runtime.Work | None, Callable[[], None]]:
        """Broadcast any tensor bit for bit: float32/float64 in place, anything else through
        a float64 staging buffer holding its bytes."""
        if t.numel() == 0:
            return None, lambda: None
        if t.dtype in _FLOATS:
            return self.comm.broadcast_async(t, root), lambda: None
        src = t.contiguous().view(-1).view(torch.uint8)
        stage = torch.zeros((src.numel() + 7) // 8, dtype=torch.float64)
        stage.view(torch.uint8)[: src.numel()].copy_(src)
        work = self.comm.broadcast_async(stage, root)

        def back() -> None:
            t.copy_(stage.view(torch.uint8)[: src.numel()].view(t.dtype).view(t.shape))

        return work, back

    def _bcast_all(self, pairs: Iterable[tuple[torch.Tensor, int]]) -> tuple[list, Callable[[], None]]:
        """Broadcasts each `(tensor, root)`: the calls to wait for, then what copies every
        result into place."""
        calls, backs = [], []
        for t, root in pairs:
            w, b = self._bcast_bytes(t, root)
            if w is not None:
                calls.append(w)
            backs.append(b)
        return calls, lambda: [b() for b in backs]

    def _gather_all(self, parts: Sequence[torch.Tensor], mine: torch.Tensor) -> tuple[list, Callable[[], None]]:
        """parts[r] becomes rank r's `mine` on every rank: one broadcast per rank."""
        parts[self.rank()].copy_(mine)
        return self._bcast_all((p, r) for r, p in enumerate(parts))

    def _reduce_all(self, tensors: list[torch.Tensor], opts: Any, what: str) -> Any:
        """Every rank ends with the reduction of each of `tensors`, in place."""
        calls, fins = [], []
        for t in tensors:
            c, f = self._reduce_into(_cpu(t, what), opts.reduceOp)
            calls += c
            fins.append(f)
        return self._work(calls, lambda: ([f() for f in fins], tensors)[1])

    def _reduce_into(self, t: torch.Tensor, op: Any) -> tuple[list, Callable[[], None]]:
        """Allreduce `t` in place with `op`: float SUM/AVG on the runtime's allreduce (with
        the loss bound), every other op or dtype as a local reduction of an allgather."""
        op = getattr(op, "op", op)  # c10d hands a ReduceOp; its RedOpType is hashable
        if t.numel() == 0:
            return [], lambda: None
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG) and t.dtype in _FLOATS:
            o = self.gradwire_options
            w = self.comm.allreduce_async(t, algorithm=o.algorithm, loss_bound=o.loss_bound)
            n = self.size()
            return [w], (lambda: t.div_(n)) if op == dist.ReduceOp.AVG else (lambda: None)
        reducers = {
            dist.ReduceOp.SUM: lambda s: s.sum(0),
            dist.ReduceOp.PRODUCT: lambda s: s.prod(0),
            dist.ReduceOp.MAX: lambda s: s.amax(0),
            dist.ReduceOp.MIN: lambda s: s.amin(0),
            dist.ReduceOp.BAND: lambda s: _fold(s, torch.bitwise_and),
            dist.ReduceOp.BOR: lambda s: _fold(s, torch.bitwise_or),
            dist.ReduceOp.BXOR: lambda s: _fold(s, torch.bitwise_xor),
        }
        if op == dist.ReduceOp.AVG and t.is_floating_point():
            reducers[dist.ReduceOp.AVG] = lambda s: s.sum(0) / s.shape[0]
        if op not in reducers:
            raise NotImplementedError(f"the gradwire backend does not implement allreduce with {op} on {t.dtype}")
        stack = torch.empty((self.size(), *t.shape), dtype=t.dtype)
        calls, back = self._gather_all(list(stack), t)

        def finish() -> None:
            back()
            t.copy_(reducers[op](stack).to(t.dtype))

        return calls, finish

    # -- collectives ------------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self._reduce_all(tensors, opts, "allreduce")

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        calls, back = self._bcast_all((_cpu(t, "broadcast"), opts.rootRank) for t in tensors)
        return self._work(calls, lambda: (back(), tensors)[1])

    def allgather(
        self,
        output_tensors: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any,
    ) -> Any:
        calls, backs = [], []
        for outs, inp in zip(output_tensors, input_tensors):
            if len(outs) != self.size():
                raise ValueError(f"allgather needs {self.size()} output tensors, got {len(outs)}")
            c, b = self._gather_all([_cpu(o, "allgather") for o in outs], _cpu(inp, "allgather"))
            calls += c
            backs.append(b)
        return self._work(calls, lambda: ([b() for b in backs], output_tensors)[1])

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        parts = list(_cpu(output, "all_gather_into_tensor").view(self.size(), *input.shape))
        calls, back = self._gather_all(parts, _cpu(input, "all_gather_into_tensor"))
        return self._work(calls, lambda: (back(), [output])[1])

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        # Every rank ends with the reduction (c10d leaves non-root tensors unspecified).
        return self._reduce_all(tensors, opts, "reduce")

    def gather(
        self,
        output_tensors: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any,
    ) -> Any:
        inp = _cpu(input_tensors[0], "gather")
        root = opts.rootRank
        outs = output_tensors[0] if self.rank() == root else [torch.empty_like(inp) for _ in range(self.size())]
        calls, back = self._gather_all(outs, inp)
        return self._work(calls, lambda: (back(), output_tensors)[1])

    def scatter(
        self,
        output_tensors: list[torch.Tensor],
        input_tensors: list[list[torch.Tensor]],
        opts: Any,
    ) -> Any:
        out = _cpu(output_tensors[0], "scatter")
        root = opts.rootRank
        parts = input_tensors[0] if self.rank() == root else [torch.empty_like(out) for _ in range(self.size())]
        # every part from the root; each rank keeps its own
        calls, back = self._bcast_all((p, root) for p in parts)

        def finish() -> list:
            back()
            out.copy_(parts[self.rank()])
            return output_tensors

        return self._work(calls, finish)

    def reduce_scatter(
        self,
        output_tensors: list[torch.Tensor],
        input_tensors: list[list[torch.Tensor]],
        opts: Any,
    ) -> Any:
        out = _cpu(output_tensors[0], "reduce_scatter")
        flat = torch.cat([_cpu(t, "reduce_scatter").reshape(-1) for t in input_tensors[0]])
        calls, fin = self._reduce_into(flat, opts.reduceOp)
        n = out.numel()

        def finish() -> list:
            fin()
            out.copy_(flat[self.rank() * n : (self.rank() + 1) * n].view(out.shape))
            return output_tensors

        return self._work(calls, finish)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        flat = _cpu(input, "reduce_scatter_tensor").reshape(-1).clone()
        calls, fin = self._reduce_into(flat, opts.reduceOp)
        n = output.numel()

        def finish() -> list:
            fin()
            output.copy_(flat[self.rank() * n : (self.rank() + 1) * n].view(output.shape))
            return [output]

        return self._work(calls, finish)

    # This torch's names for the two (older ones call the underscored names).
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base

    def barrier(self, opts: Any) -> Any:
        token = torch.zeros(1, dtype=torch.float32)
        return self._work([self.comm.allreduce_async(token)], lambda: None)

    send = _not_implemented("send")
    recv = _not_implemented("recv")
    recv_anysource = _not_implemented("recv_anysource")
    alltoall = _not_implemented("all_to_all")
    alltoall_base = _not_implemented("all_to_all_single")
    all_to_all_single = _not_implemented("all_to_all_single")
    allreduce_coalesced = _not_implemented("allreduce_coalesced")
    allreduce_sparse = _not_implemented("allreduce_sparse")
    all_gather_single_coalesced = _not_implemented("all_gather_single_coalesced")
    reduce_scatter_single_coalesced = _not_implemented("reduce_scatter_single_coalesced")
    gather_single = _not_implemented("gather_single")
    gather_into_tensor = _not_implemented("gather_into_tensor")
    allgather_coalesced = _not_implemented("allgather_coalesced")
    monitored_barrier = _not_implemented("monitored_barrier")

    def shutdown(self) -> None:
        self._waiter.shutdown()
        self.comm.close()


class _Waiter:
    """One thread per group that resolves the futures of the Works handed to it, in the
    order they were handed over (the order the calls were issued and complete in). It
    starts with the first future asked for."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def put(self, work: _GradwireWork) -> None:
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gradwire-c10d", daemon=True)
                self._thread.start()
        self._queue.put(work)

    def _run(self) -> None:
        while (work := self._queue.get()) is not None:
            work._resolve_future()

    def shutdown(self) -> None:
        with self._start:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join()
                self._thread = None


class _GradwireWork(_C10dWork):
    """One collective's gradwire calls as a c10d ``Work``. ``wait()`` waits on the runtime
    in the calling thread; ``get_future()`` hands the same wait to the group's waiter
    thread (once) and returns a future of the result. Whichever comes first runs
    `finish()`; it runs exactly once, and its error, if any, is raised to every waiter."""

    def __init__(self, backend: GradwireBackend, calls: list[runtime.Work], finish: Callable[[], Any]):
        super().__init__()
        self._backend = backend
        self._calls = calls
        self._finish = finish
        self._lock = threading.Lock()
        self._wait_lock = threading.Lock()
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._future: torch.futures.Future | None = None

    def _resolve(self, timeout: float | None = None) -> Any:
        """The result, waiting for it; with `timeout` (seconds), TimeoutError if the calls
        are not done by then (they stay in flight: the Work can be waited on again)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._wait_lock:  # a second waiter blocks here (the GIL is released while waiting)
            if not self._done:
                try:
                    while self._calls:
                        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                        self._backend.stats.add(self._calls[0].wait(left))
                        self._calls.pop(0)
                    self._value = self._finish()
                except TimeoutError:
                    raise
                except BaseException as e:  # noqa: BLE001 - raised to every waiter below
                    self._error = e
                self._done = True
        if self._error is not None:
            raise self._error
        return self._value

    # c10d lets a Python Work override only wait() and get_future(): is_completed() and
    # is_success() of what the caller holds are c10d's own (is_completed() stays false for
    # a Python backend's Work on this torch, as it did for one made from a future); poll
    # `work.get_future().done()` instead.

    def wait(self, timeout: timedelta | None = None) -> bool:
        # c10d's default is no timeout (a zero timedelta); the runtime's own peer timeout
        # still ends a call whose peers go quiet.
        secs = timeout.total_seconds() if timeout is not None else 0.0
        self._resolve(secs if secs > 0 else None)
        return True

    def get_future(self) -> torch.futures.Future:
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                self._backend._waiter.put(self)
            return self._future

    def _resolve_future(self) -> None:
        try:
            self._future.set_result(self._resolve())
        except BaseException as e:  # noqa: BLE001 - raised from the future's wait()
            self._future.set_exception(e)


def _fold(stack: torch.Tensor, f: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    acc = stack[0].clone()
    for s in stack[1:]:
        acc = f(acc, s)
    return acc


def _cpu(t: torch.Tensor, call: str) -> torch.Tensor:
    if t.device.type != "cpu":
        raise ValueError(f"the gradwire backend runs {call} on CPU tensors; this one is on {t.device}")
    return t


def create(dist_opts: Any, backend_options: Any) -> GradwireBackend:
    """The creator registered with ``dist.Backend.register_backend`` (extended API: the
    ``pg_options`` of ``init_process_group`` arrive as `backend_options`)."""
    if backend_options is not None and not isinstance(backend_options, Options):
        raise TypeError(
            f"pg_options for the gradwire backend must be gradwire.torch.Options, got {type(backend_options).__name__}"
        )
    return GradwireBackend(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        dist_opts.timeout,
        backend_options,
    )
