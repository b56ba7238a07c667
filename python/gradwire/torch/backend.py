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
from gradwire.torch import cuda
from gradwire.torch.options import Options
from gradwire.torch.p2p import P2P, record_source, source_of

_FLOATS = (torch.float32, torch.float64)


def _not_implemented(name: str) -> Callable[..., Any]:
    def call(self: GradwireBackend, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"the gradwire backend does not implement {name}; see docs/torch.md for the calls it implements"
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


def _subclassable_base() -> type:
    """The c10d class a Python backend derives from in this torch. Newer torch binds
    `Backend` for Python subclasses (a trampoline; the process group then holds this
    backend per device type); older torch (2.11 and before, at least) has no constructor
    for it, and takes a `ProcessGroup` subclass from the creator as the whole group
    (`_new_process_group_helper`: "If the type is a subclass of ProcessGroup then return
    this process group immediately"). The collectives' Python names are the same, apart
    from the aliases at the end of GradwireBackend."""
    try:
        _C10dBackend(0, 1)
    except TypeError:  # "No constructor defined!"
        return dist.ProcessGroup
    return _C10dBackend


_BASE = _subclassable_base()


class GradwireBackend(_BASE):
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
        self.master_addr = os.environ.get("MASTER_ADDR") or "127.0.0.1"
        self.comm = self._join(store, rank, size, timeout)
        self._waiter = _Waiter()
        self._p2p = P2P(self, store, self._round, self._token, self._timeout)
        self._stagers: dict[str, cuda.Stager] = {}  # by device: GPU tensors' staging (cuda.py)
        self._stage_all = runtime._env_flag("GRADWIRE_STAGE_CPU_FOR_TESTS")

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
        # A round-scoped key: a group made again on the same store (destroy, then init
        # again) never reads the previous round's address. Every rank of a round counts
        # itself in before any rank can start the next round (the rendezvous below needs
        # them all), so the count names the round alike on every rank.
        self._round = f"gradwire/{(store.add('gradwire/joined', 1) - 1) // size}"
        key = f"{self._round}/rendezvous"
        if rank == 0:
            host = self.master_addr
            port = _free_port(host)
            store.set(key, f"{host} {port} {'-' if own_token else secrets.token_hex(8)}")
        host, port, token = store.get(key).decode().split(" ")
        token = own_token or token
        self._token = token
        impair = {p: (o.inject_loss, 0.0) for p in range(size) if p != rank} if o.inject_loss > 0 else None
        # torch's timeout (init_process_group(timeout=...), 30 minutes unless given) bounds
        # the rendezvous and, unless peer_timeout is set, how long a call may go without
        # progress: a rank that arrives late within it is waited for, as under Gloo.
        secs = max(timeout.total_seconds(), 1.0) if timeout is not None else 1800.0
        self._timeout = secs
        return runtime.Communicator(
            host,
            int(port),
            rank,
            size,
            token=token,
            transport=o.transport,
            mss=o.mss,
            timeout=secs,
            peer_timeout=o.peer_timeout if o.peer_timeout is not None else secs,
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

    if _BASE is dist.ProcessGroup:
        # c10d's ProcessGroup reads its name from its first registered backend, and a
        # Python group has none ("ProcessGroup name not set" in FSDP2); it keeps its own.
        def _set_group_name(self, name: str) -> None:
            self._group_name = name

        @property
        def group_name(self) -> str:
            return self._group_name

        def _set_group_desc(self, desc: str) -> None:
            self._group_desc = desc

        @property
        def group_desc(self) -> str:
            return self._group_desc

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

    def _reduce_scatter_into(self, flat: torch.Tensor, out: torch.Tensor, op: Any, value: Any) -> _GradwireWork:
        """Reduce `flat` (one `out`-sized part per rank, in rank order) in place with `op`;
        this rank's part of the result goes to `out`, and the work's value is `value`."""
        calls, fin = self._reduce_into(flat, op)
        n = out.numel()

        def finish() -> Any:
            fin()
            out.copy_(flat[self.rank() * n : (self.rank() + 1) * n].view(out.shape))
            return value

        return self._work(calls, finish)

    # -- GPU tensors (cuda.py) -----------------------------------------------------------------

    def _staged(self, args: Sequence[Any]) -> bool:
        return self._stage_all or cuda.has_device_tensor(args)

    def _stager(self, args: Sequence[Any]) -> cuda.Stager:
        dev = next((t.device for a in args for t in cuda._tensors(a)), torch.device("cpu"))
        key = "host" if self._stage_all and dev.type == "cpu" else str(dev)
        st = self._stagers.get(key)
        if st is None:
            copies = cuda.HostCopies() if key == "host" else cuda.Copies(dev)
            st = self._stagers[key] = cuda.Stager(copies)
        return st

    def _on_device(self, impl: Callable[..., Any], args: Sequence[Any], outputs: Sequence[int]) -> Any:
        """`impl` (a CPU implementation) on pinned host copies of `args`' GPU tensors; the
        tensors of `args[i]`, i in `outputs`, are copied back once it is done."""
        st = self._stager(args)
        host_args, copy_back = st.stage(args, outputs)
        w = impl(self, *host_args)
        dev_of = {}
        for a, h in zip(args, host_args):
            for d, t in zip(cuda._tensors(a), cuda._tensors(h)):
                dev_of[id(t)] = d
        inner = w._finish

        def finish() -> Any:
            value = inner()
            w._cuda_event = copy_back()
            for a, h in zip(args, host_args):
                for d, t in zip(cuda._tensors(a), cuda._tensors(h)):
                    if (src := source_of(t)) is not None:
                        record_source(d, src)
            return _map_tensors(value, dev_of)

        w._finish = finish
        w._copies = st.copies
        return w

    def _allreduce_pipelined(self, tensors: list[torch.Tensor], op: Any) -> _GradwireWork:
        """Float SUM/AVG on GPU tensors: chunks on the wire while the next ones are copied."""
        st = self._stager([tensors])
        o, n = self.gradwire_options, self.size()

        def submit(h: torch.Tensor) -> runtime.Work:
            return self.comm._submit("allreduce", h, gated=True, algorithm=o.algorithm, loss_bound=o.loss_bound)

        post = (lambda h: h.div_(n)) if op == dist.ReduceOp.AVG else None
        calls, fins = [], []
        for t in tensors:
            if t.numel() == 0:
                continue
            c, f = st.pipelined(t, submit, post)
            calls += c
            fins.append(f)
        w = self._work(calls, lambda: tensors)
        inner = w._finish

        def finish() -> Any:
            events = [f() for f in fins]
            w._cuda_event = events[-1] if events else None
            return inner()

        w._finish = finish
        w._copies = st.copies
        return w

    # -- collectives ------------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        if self._staged([tensors]):
            op = getattr(opts.reduceOp, "op", opts.reduceOp)
            if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG) and all(t.dtype in _FLOATS for t in tensors):
                return self._allreduce_pipelined(tensors, op)
            return self._on_device(GradwireBackend._reduce_all, [tensors, opts, "allreduce"], [0])
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
        return self._reduce_scatter_into(flat, out, opts.reduceOp, output_tensors)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        flat = _cpu(input, "reduce_scatter_tensor").reshape(-1).clone()
        return self._reduce_scatter_into(flat, output, opts.reduceOp, [output])

    # This torch's names for the two (older ones call the underscored names).
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base

    def barrier(self, opts: Any) -> Any:
        token = torch.zeros(1, dtype=torch.float32)
        return self._work([self.comm.allreduce_async(token)], lambda: None)

    # -- coalesced: the same calls, issued together, one Work ---------------------------------

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self._reduce_all(tensors, opts, "allreduce_coalesced")

    def _coalesced(self, works: list[_GradwireWork], value: Any) -> _GradwireWork:
        """One Work of several: their calls in issue order, then each one's finish."""
        calls = [c for w in works for c in w._calls]
        return self._work(calls, lambda: ([w._finish() for w in works], value)[1])

    def all_gather_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:  # older torch's ProcessGroup passes no options
        return self._coalesced([self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)], outputs)

    def reduce_scatter_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        return self._coalesced([self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)], outputs)

    # ProcessGroup's names for the two (older torch)
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> Any:
        return self._coalesced([self.allgather([o], [i], opts) for o, i in zip(output_lists, inputs)], output_lists)

    # -- point-to-point (p2p.py: a two-rank channel per source, destination and tag) --------

    # batch_isend_irecv asks with getattr; c10d's own property would call back into this
    # class's C++ side for ever (RecursionError). isend/irecv return at once, so a batch
    # is its ops one by one (torch's path for backends without coalescing).
    supports_coalescing = False

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        t = _cpu(tensors[0], "send")
        return self._work([self._p2p.send(t, dst, tag)], lambda: tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        t = _cpu(tensors[0], "recv")
        return self._work([self._p2p.recv(t, src, tag)], lambda: tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> Any:
        t = _cpu(tensors[0], "recv")
        return self._work([self._p2p.recv(t, None, tag)], lambda: tensors)

    def _exchange(self, outs: list[torch.Tensor], ins: list[torch.Tensor], what: str) -> _GradwireWork:
        """outs[r] becomes what rank r holds for this rank (its ins[me]); outs contiguous."""
        me = self.rank()
        outs[me].copy_(ins[me])
        peers = [r for r in range(self.size()) if r != me]
        msgs = self._p2p.exchange("a2a", {r: ins[r].contiguous() for r in peers}, {r: outs[r] for r in peers})
        return self._work(msgs, lambda: None)

    def alltoall(self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor], opts: Any) -> Any:
        if len(output_tensors) != self.size() or len(input_tensors) != self.size():
            raise ValueError(f"all_to_all needs {self.size()} input and output tensors")
        outs = [_cpu(t, "all_to_all") for t in output_tensors]
        stage = [o if o.is_contiguous() else torch.empty_like(o, memory_format=torch.contiguous_format) for o in outs]
        w = self._exchange(stage, [_cpu(t, "all_to_all") for t in input_tensors], "all_to_all")
        fin = w._finish

        def finish() -> list:
            fin()
            for o, st in zip(outs, stage):
                if o is not st:
                    o.copy_(st)
            return output_tensors

        w._finish = finish
        return w

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any,
    ) -> Any:
        n = self.size()

        def split(t: torch.Tensor, sizes: list[int], what: str) -> list[torch.Tensor]:
            if not sizes:
                if t.shape[0] % n:
                    raise ValueError(
                        f"all_to_all_single: the {what} dimension 0 ({t.shape[0]}) is not divisible by {n}"
                    )
                sizes = [t.shape[0] // n] * n
            if len(sizes) != n or sum(sizes) != t.shape[0]:
                raise ValueError(
                    f"all_to_all_single: {what} split sizes {sizes} do not split {t.shape[0]} rows {n} ways"
                )
            return list(torch.split(t, list(sizes), dim=0))

        out = _cpu(output, "all_to_all_single")
        stage = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
        ins = split(_cpu(input, "all_to_all_single").contiguous(), input_split_sizes, "input")
        w = self._exchange(split(stage, output_split_sizes, "output"), ins, "all_to_all_single")
        w._finish = (lambda: [output]) if stage is out else (lambda: (out.copy_(stage), [output])[1])
        return w

    alltoall_base = all_to_all_single  # ProcessGroup's name (older torch)

    def monitored_barrier(self, opts: Any, wait_all_ranks: bool = False) -> None:
        """Gloo's: every rank reports to rank 0, which names the ranks that did not report
        within the timeout (the first, or every one with `wait_all_ranks`), then releases
        the others."""
        secs = opts.timeout.total_seconds() if opts.timeout else 0.0
        secs = secs if secs > 0 else self._timeout
        me, n = self.rank(), self.size()
        deadline = time.monotonic() + secs
        token = {r: torch.zeros(1) for r in range(n)}
        if me != 0:
            self._p2p.exchange("monitored_barrier", {0: token[0]}, {})[0].wait(secs)
            ack = self._p2p.exchange("monitored_barrier_ack", {}, {0: token[1]})[0]
            try:
                ack.wait(max(deadline - time.monotonic(), 0.0) + secs)
            except TimeoutError:
                raise RuntimeError(
                    f"Rank {me}: rank 0 did not release monitoredBarrier in {secs * 1e3:.0f} ms"
                ) from None
            return
        msgs = self._p2p.exchange("monitored_barrier", {}, {r: token[r] for r in range(1, n)})
        missing = []
        for r, m in zip(range(1, n), msgs):
            try:
                m.wait(max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                missing.append(r)
                if not wait_all_ranks:
                    break
        if missing:
            ranks = ", ".join(map(str, missing))
            who = f"Rank {ranks}" if len(missing) == 1 else f"Ranks {ranks}"
            raise RuntimeError(f"[Rank 0]: {who} failed to pass monitoredBarrier in {secs * 1e3:.0f} ms")
        for m in self._p2p.exchange("monitored_barrier_ack", {r: token[0] for r in range(1, n)}, {}):
            m.wait(secs)

    allreduce_sparse = _not_implemented("allreduce_sparse")
    gather_single = _not_implemented("gather_single")
    gather_into_tensor = _not_implemented("gather_into_tensor")

    def shutdown(self) -> None:
        self._waiter.shutdown()
        for st in self._stagers.values():
            st.shutdown()
        self._p2p.close()
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
        # GPU tensors: the copies' engine, and the event the caller's stream waits for
        # once the copies back are queued (set by finish).
        self._copies: Any = None
        self._cuda_event: Any = None

    def _resolve(self, timeout: float | None = None) -> Any:
        """The result, waiting for it; with `timeout` (seconds), TimeoutError if the calls
        are not done by then (they stay in flight: the Work can be waited on again)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._wait_lock:  # a second waiter blocks here (the GIL is released while waiting)
            if not self._done:
                try:
                    while self._calls:
                        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                        rep = self._calls[0].wait(left)
                        if rep is not None:  # None: an empty message
                            self._backend.stats.add(rep)
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

    # c10d lets a Python Work override only wait() and get_future(): the caller holds a
    # c10d wrapper whose is_completed() and _source_rank() are c10d's own; _patch_work()
    # answers both from the future (see there).

    def wait(self, timeout: timedelta | None = None) -> bool:
        # c10d's default is no timeout (a zero timedelta); the runtime's own peer timeout
        # still ends a call whose peers go quiet.
        secs = timeout.total_seconds() if timeout is not None else 0.0
        self._resolve(secs if secs > 0 else None)
        if self._cuda_event is not None:
            self._copies.current_waits(self._cuda_event)  # the stream waits, not the host
        return True

    def get_future(self) -> torch.futures.Future:
        with self._lock:
            if self._future is None:
                self._future = self._copies.future() if self._copies is not None else torch.futures.Future()
                if self._done:  # already waited for: resolved here, no thread hop
                    self._resolve_future()
                else:
                    self._backend._waiter.put(self)
            return self._future

    def _resolve_future(self) -> None:
        try:
            value = self._resolve()
            if self._copies is not None:
                self._copies.resolve(self._future, value)
            else:
                self._future.set_result(value)
        except BaseException as e:  # noqa: BLE001 - raised from the future's wait()
            self._future.set_exception(e)


# Which positional arguments (after self) of each call hold its outputs: the GPU tensors
# copied back after a staged call (cuda.py). allreduce stages itself (pipelined).
_DEVICE_OUTPUTS = {
    "broadcast": (0,),
    "allgather": (0,),
    "_allgather_base": (0,),
    "all_gather_single": (0,),
    "reduce": (0,),
    "gather": (0,),
    "scatter": (0,),
    "reduce_scatter": (0,),
    "_reduce_scatter_base": (0,),
    "reduce_scatter_single": (0,),
    "allreduce_coalesced": (0,),
    "all_gather_single_coalesced": (0,),
    "reduce_scatter_single_coalesced": (0,),
    "allgather_coalesced": (0,),
    "send": (),
    "recv": (0,),
    "recv_anysource": (0,),
    "alltoall": (0,),
    "all_to_all_single": (0,),
    "alltoall_base": (0,),
}


def _device_aware(impl: Callable[..., Any], outputs: tuple[int, ...]) -> Callable[..., Any]:
    def call(self: GradwireBackend, *args: Any) -> Any:
        if self._staged(args):
            return self._on_device(impl, args, outputs)
        return impl(self, *args)

    call.__name__ = impl.__name__
    call.__doc__ = impl.__doc__
    return call


for _name, _outs in _DEVICE_OUTPUTS.items():
    setattr(GradwireBackend, _name, _device_aware(getattr(GradwireBackend, _name), _outs))


def _map_tensors(value: Any, dev_of: dict[int, torch.Tensor]) -> Any:
    """`value` with each host copy replaced by the GPU tensor it stands for."""
    if isinstance(value, torch.Tensor):
        return dev_of.get(id(value), value)
    if isinstance(value, list):
        return [_map_tensors(v, dev_of) for v in value]
    return value


def _fold(stack: torch.Tensor, f: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    acc = stack[0].clone()
    for s in stack[1:]:
        acc = f(acc, s)
    return acc


def _cpu(t: torch.Tensor, call: str) -> torch.Tensor:
    if t.device.type != "cpu":
        raise ValueError(f"the gradwire backend runs {call} on CPU tensors; this one is on {t.device}")
    return t


def _patch_work() -> None:
    """c10d hands the caller a wrapper of a Python backend's Work (PyWorkHolder) that
    forwards wait() and get_future() only, so its is_completed() stays false for good and
    its _source_rank() (torch's recv() from any source asks it) raises. Both are answered
    from the Work's future where c10d's own answer is "no" and the Work is a Python
    backend's (op type UNKNOWN: Gloo's and NCCL's are typed, and left alone)."""
    import torch._C._distributed_c10d as c10d

    if getattr(_C10dWork, "_gradwire_patched", False):
        return
    is_completed, source_rank = _C10dWork.is_completed, _C10dWork._source_rank
    # _get_op_type() answers an int, which never equals the enum
    unknown = int(c10d.OpType.UNKNOWN) if hasattr(c10d, "OpType") else 100

    def untyped(w: _C10dWork) -> bool:
        get = getattr(w, "_get_op_type", None)  # older torch: no op types, every Work asked
        return get is None or get() == unknown

    def patched_is_completed(self: _C10dWork) -> bool:
        if is_completed(self):
            return True
        try:
            return untyped(self) and self.get_future().done()
        except Exception:  # noqa: BLE001 - a Work without a future: c10d's answer stands
            return False

    def patched_source_rank(self: _C10dWork) -> int:
        try:
            return source_rank(self)
        except RuntimeError:
            if not untyped(self):
                raise
            fut = self.get_future()
            src = source_of(fut.value()[0]) if fut.done() else None
            if src is None:
                raise
            return src

    _C10dWork.is_completed = patched_is_completed
    _C10dWork._source_rank = patched_source_rank
    _C10dWork.source_rank = patched_source_rank
    _C10dWork._gradwire_patched = True


_patch_work()


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
